/*
 * test_store_clock.c -- a key's clock is kept exactly, however far apart
 * the times of one store's keys are and however far a store's time moves.
 *
 * The guard for a record header that keeps the clock in fewer than 64 bits
 * (docs/store.md, "An 8-byte record header"): every store here has one
 * shard, so all its keys share whatever epoch the shard keeps.  The
 * 64-bit clock passed; hdr8's prototype (one 32-bit window of ~49.7 days)
 * stopped the process here; the 8-byte header as built (a window per
 * shard that moves, wide records outside it) passes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

#define DAY_MS 86400000LL

static sl_store *one_shard(void)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1;
    int err = 0;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    return s;
}

static void expect(sl_store *s, const sl_params *p, const char *key, int64_t now, int64_t allowed,
                   int64_t remaining, int64_t retry, int64_t reset)
{
    sl_result r;
    assert_int_equal(sl_decide(s, p, key, strlen(key), now, 1, &r), 0);
    if (r.allowed != allowed || r.remaining != remaining || r.retry_after_ms != retry ||
        r.reset_after_ms != reset)
        fail_msg("%s %s at %lld: got allowed %lld remaining %lld retry %lld reset %lld, "
                 "want %lld %lld %lld %lld",
                 sl_algo_name(p->algo), key, (long long)now, (long long)r.allowed,
                 (long long)r.remaining, (long long)r.retry_after_ms, (long long)r.reset_after_ms,
                 (long long)allowed, (long long)remaining, (long long)retry, (long long)reset);
}

/* A key at its limit for a year-long window, left alone for 60 days while
 * other keys of its shard move the time on day by day, is still at its
 * limit, with the same window end; a token bucket left 50 days has
 * refilled exactly half of a 100-day window. */
static void held_across_months(void **state)
{
    (void)state;
    sl_store *s = one_shard();
    sl_params fw = SL_PARAMS_INIT, tb = SL_PARAMS_INIT, other = SL_PARAMS_INIT;
    fw.algo = SL_FIXED_WINDOW;
    fw.limit = 2;
    fw.window_ms = 365 * DAY_MS; /* windows start at multiples of 31,536,000,000 */
    tb.algo = SL_TOKEN_BUCKET;
    tb.limit = 10;
    tb.window_ms = 100 * DAY_MS;
    other.algo = SL_FIXED_WINDOW;
    other.limit = 5;
    other.window_ms = 1000;
    const int64_t t0 = 1672000000000LL, end = 1702944000000LL; /* its window's end */

    expect(s, &fw, "year", t0, 1, 1, 0, end - t0);
    expect(s, &fw, "year", t0, 1, 0, 0, end - t0);
    for (int i = 0; i < 10; i++) expect(s, &tb, "bucket", t0, 1, 9 - i, 0, (i + 1) * 10 * DAY_MS);
    for (int d = 1; d <= 60; d++) { /* bounded: 60 days, one key a day */
        char k[16];
        snprintf(k, sizeof k, "day:%d", d);
        expect(s, &other, k, t0 + d * DAY_MS, 1, 4, 0, 1000);
    }
    int64_t t = t0 + 60 * DAY_MS;
    expect(s, &fw, "year", t, 0, 0, end - t, end - t);
    /* 50 of 100 days: 5 tokens back; one taken leaves 4, 60 days to full */
    expect(s, &tb, "bucket", t0 + 50 * DAY_MS, 1, 4, 0, 60 * DAY_MS);
    sl_store_free(s);
}

/* Keys at the ends of the time range (|t| < 2^62) and at 0 in one shard,
 * decided in turn: each answers from its own clock. */
static void far_apart_in_one_shard(void **state)
{
    (void)state;
    sl_store *s = one_shard();
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 1;
    p.window_ms = 1000;
    const int64_t far = 4000000000000000000LL; /* a multiple of 1000 */
    const int64_t at[3] = {-far, 0, far};
    const char *key[3] = {"past", "zero", "future"};
    for (int i = 0; i < 3; i++) expect(s, &p, key[i], at[i], 1, 0, 0, 1000);
    for (int i = 0; i < 3; i++) expect(s, &p, key[i], at[i] + 1, 0, 0, 999, 999);
    /* a time older than the key's clock is decided at the clock */
    for (int i = 2; i >= 0; i--) expect(s, &p, key[i], at[i] - 5000, 0, 0, 999, 999);
    for (int i = 0; i < 3; i++) expect(s, &p, key[i], at[i] + 1000, 1, 0, 0, 1000);
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(held_across_months),
        cmocka_unit_test(far_apart_in_one_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
