/*
 * test_lone_charge.c -- sl__lone_charge (src/lib/lone.c: the module's
 * RL.SETTLE on a lone record) against sl_charge on a store: the same
 * random traces of decisions, charges past the limit and refunds (into
 * the current window, a past one, a fresh key), with the parameters
 * changing mid-trace, give the same six fields step for step on both, for
 * every algorithm a reservation takes; and its refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lone.h"
#include "sluice.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static void same(const sl_result *a, const sl_result *b, int step)
{
    if (a->allowed != b->allowed || a->limit != b->limit || a->remaining != b->remaining ||
        a->retry_after_ms != b->retry_after_ms || a->reset_after_ms != b->reset_after_ms ||
        a->delay_ms != b->delay_ms)
        fail_msg("step %d: store %d %lld %lld %lld %lld %lld, lone %d %lld %lld %lld %lld %lld",
                 step, a->allowed, (long long)a->limit, (long long)a->remaining,
                 (long long)a->retry_after_ms, (long long)a->reset_after_ms,
                 (long long)a->delay_ms, b->allowed, (long long)b->limit,
                 (long long)b->remaining, (long long)b->retry_after_ms,
                 (long long)b->reset_after_ms, (long long)b->delay_ms);
}

static void trace(sl_algo a)
{
    sl_store *s = sl_store_new(NULL, NULL);
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    assert_non_null(s);
    assert_non_null(sh);
    uint64_t room[SL__LONE_ROOM / 8] = {0};
    uint8_t *rec = NULL;
    int64_t t = 1000000, charged[8] = {0};
    int nc = 0;
    for (int step = 0; step < 400; step++) {
        sl_params p = SL_PARAMS_INIT;
        p.algo = a;
        p.limit = 10 + (int64_t)rnd(3) * 5; /* L changes: 10, 15, 20 */
        p.window_ms = rnd(8) == 0 ? 2000 : 1000;
        if (a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET)
            p.burst = rnd(4) == 0 ? 30 : 0;
        if (a == SL_SLIDING_BUCKETS) p.precision = rnd(4) == 0 ? 5 : 10;
        t += (int64_t)rnd(300) - 20; /* now and then backwards: the clock holds */
        sl_result x, y;
        int op = (int)rnd(4);
        if (op < 2) { /* a decision (a peek now and then) */
            int64_t cost = (int64_t)rnd(6);
            int commit = rnd(5) != 0;
            assert_int_equal((commit ? sl_decide : sl_peek)(s, &p, "k", 1, t, cost, &x), 0);
            assert_int_equal(sl__lone_decide(sh, &rec, room, &p, t, cost, commit, &y), 0);
            if (commit && x.allowed && cost > 0 && nc < 8) charged[nc++] = t;
        } else { /* a charge (even far past the limit) or a refund */
            int64_t delta = op == 2 ? (int64_t)rnd(40) : -(int64_t)rnd(12);
            int64_t at = nc ? charged[rnd((uint64_t)nc)] : t;
            assert_int_equal(sl_charge(s, &p, "k", 1, t, at, delta, &x), 0);
            assert_int_equal(sl__lone_charge(sh, &rec, room, &p, t, at, delta, &y), 0);
        }
        same(&x, &y, step);
    }
    sl__lone_free(sh, rec);
    sl__shard_loose_free(sh);
    sl_store_free(s);
}

static void fixed_window(void **st) { (void)st, trace(SL_FIXED_WINDOW); }
static void sliding_window(void **st) { (void)st, trace(SL_SLIDING_WINDOW); }
static void sliding_buckets(void **st) { (void)st, trace(SL_SLIDING_BUCKETS); }
static void token_bucket(void **st) { (void)st, trace(SL_TOKEN_BUCKET); }
static void gcra(void **st) { (void)st, trace(SL_GCRA); }
static void leaky_bucket(void **st) { (void)st, trace(SL_LEAKY_BUCKET); }

/* A refund on a key with no state makes none; a charge past empty on a
 * bucket is a debt (denied until debt + 1 has refilled); refusals change
 * nothing. */
static void fresh_debt_and_refusals(void **st)
{
    (void)st;
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    uint8_t *rec = NULL;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 10;
    p.window_ms = 10000; /* a token a second */
    sl_result r;
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &p, 5000, 5000, -3, &r), 0);
    assert_null(rec);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.remaining, 10);
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &p, 5000, 5000, 25, &r), 0);
    assert_non_null(rec);
    /* 25 taken from 10: a debt of 15; a request of 1 waits for 16 tokens */
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.retry_after_ms, 16000);
    assert_int_equal(r.reset_after_ms, 25000);
    assert_int_equal(sl__lone_clock(rec), 5000);
    sl_params q = p;
    q.algo = SL_SLIDING_LOG;
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &q, 6000, 5000, 1, &r), SL_EALGO);
    q.algo = SL_GCRA; /* another algorithm's record */
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &q, 6000, 5000, 1, &r), SL_EINVAL);
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &p, 6000, 5000, SL_MAX_LIMIT + 1, &r),
                     SL_ECOST);
    assert_int_equal(sl__lone_charge(sh, &rec, NULL, &p, SL_MAX_TIME_MS, 5000, 1, &r), SL_ETIME);
    assert_int_equal(sl__lone_clock(rec), 5000); /* nothing moved */
    sl__lone_free(sh, rec);
    sl__shard_loose_free(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_window),    cmocka_unit_test(sliding_window),
        cmocka_unit_test(sliding_buckets), cmocka_unit_test(token_bucket),
        cmocka_unit_test(gcra),            cmocka_unit_test(leaky_bucket),
        cmocka_unit_test(fresh_debt_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
