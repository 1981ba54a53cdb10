/*
 * test_decide_all.c -- sl_decide_all: several limits on one request are all
 * charged or none is (10 per minute AND 500 per hour), bad input charges
 * nothing.  The threaded version is in test_threads.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

static sl_params P(sl_algo a, int64_t L, int64_t W)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = L;
    p.window_ms = W;
    return p;
}

static void all_or_nothing(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params minute = P(SL_FIXED_WINDOW, 10, 60000), hour = P(SL_FIXED_WINDOW, 15, 3600000);
    sl_request q[2] = {{&minute, "u:m", 3, 1}, {&hour, "u:h", 3, 1}};
    sl_result r[2];
    int all;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(sl_decide_all(s, q, 2, 1000, r, &all), 0);
        assert_true(all);
        assert_int_equal(r[0].remaining, 9 - i);
        assert_int_equal(r[1].remaining, 14 - i);
    }
    /* the minute is full: denied, and the hour is not charged */
    assert_int_equal(sl_decide_all(s, q, 2, 2000, r, &all), 0);
    assert_false(all);
    assert_int_equal(r[0].allowed, 0);
    assert_int_equal(r[0].retry_after_ms, 58000);
    assert_int_equal(r[1].allowed, 1); /* would pass alone ... */
    sl_result peek;
    assert_int_equal(sl_peek(s, &hour, "u:h", 3, 2000, 0, &peek), 0);
    assert_int_equal(peek.remaining, 5); /* ... but was not charged */
    /* next minute: 5 more, then the hour stops them */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sl_decide_all(s, q, 2, 61000, r, &all), 0);
        assert_true(all);
    }
    assert_int_equal(sl_decide_all(s, q, 2, 61000, r, &all), 0);
    assert_false(all);
    assert_int_equal(r[1].allowed, 0);
    assert_int_equal(sl_peek(s, &minute, "u:m", 3, 61000, 0, &peek), 0);
    assert_int_equal(peek.remaining, 5);
    sl_store_free(s);
}

static void bad_input_charges_nothing(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params ok = P(SL_TOKEN_BUCKET, 5, 1000), bad = P(SL_TOKEN_BUCKET, 0, 1000);
    sl_request q[2] = {{&ok, "a", 1, 1}, {&bad, "b", 1, 1}};
    sl_result r[2];
    assert_int_equal(sl_decide_all(s, q, 2, 0, r, NULL), SL_ELIMIT);
    q[1] = (sl_request){&ok, "a", 1, 1}; /* the same state twice */
    assert_int_equal(sl_decide_all(s, q, 2, 0, r, NULL), SL_EINVAL);
    q[1] = (sl_request){&ok, "", 0, 1};
    assert_int_equal(sl_decide_all(s, q, 2, 0, r, NULL), SL_EKEY);
    assert_int_equal(sl_decide_all(s, q, 0, 0, r, NULL), SL_EINVAL);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, 0);
    sl_store_free(s);
}

/* A bounded SL_FULL_DENY store with keys at their limit (fixed-window,
 * 1 a minute) until a new key is refused (SL_EFULL); its first key, "a"
 * (5 a minute), used once.  Returns the index of the refused key. */
static int fill_deny(sl_store *s, const sl_params *a, const sl_params *one)
{
    sl_result r;
    assert_int_equal(sl_decide(s, a, "a", 1, 1000, 1, &r), 0);
    assert_int_equal(r.remaining, 4);
    for (int i = 0; i < 100000; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "full:%d", i);
        int rc = sl_decide(s, one, k, (size_t)n, 1000, 1, &r);
        if (rc == SL_EFULL) return i;
        assert_int_equal(rc, 0);
    }
    fail_msg("a 16 KB store never refused a key");
    return -1;
}

/* A batch refused for room charges nothing: not the existing key before
 * the new one that found no room, nor a new key that found some (it is
 * not left behind).  Found by tests/fuzz/fuzz_api.c: pass two charged in
 * order and stopped at the refusal, the requests before it charged. */
static void refused_for_room_charges_nothing(void **state)
{
    (void)state;
    sl_params a = P(SL_FIXED_WINDOW, 5, 60000), one = P(SL_FIXED_WINDOW, 1, 60000);
    for (unsigned shards = 1; shards <= 64; shards *= 64) {
        sl_store_opts o = {0};
        o.max_bytes = 16 << 10, o.shards = shards, o.on_full = SL_FULL_DENY, o.fixed_seed = 1;
        sl_store *s = sl_store_new(&o, NULL), *twin = sl_store_new(&o, NULL);
        assert_non_null(s);
        assert_non_null(twin);
        int full = fill_deny(s, &a, &one);
        assert_int_equal(fill_deny(twin, &a, &one), full);
        char kf[16], kn[16];
        int nf = snprintf(kf, sizeof kf, "full:%d", full), nn = 0;
        /* with 64 shards, a new key that still finds room (tried on the
         * twin, which holds the same keys) */
        sl_result r, rr[3];
        for (int i = 0; shards > 1 && i < 1000 && !nn; i++) {
            nn = snprintf(kn, sizeof kn, "new:%d", i);
            if (sl_decide(twin, &one, kn, (size_t)nn, 1000, 1, &r) != 0) nn = 0;
        }
        assert_true(shards == 1 || nn > 0);
        sl_store_stats before, after;
        sl_store_stats_get(s, &before);
        sl_request q[3] = {{&a, "a", 1, 1}, {&one, kn, (size_t)nn, 1}, {&one, kf, (size_t)nf, 1}};
        if (shards == 1) q[1] = q[2];
        int all = -1;
        assert_int_equal(sl_decide_all(s, q, shards == 1 ? 2 : 3, 1000, rr, &all), SL_EFULL);
        assert_false(all);
        assert_int_equal(sl_peek(s, &a, "a", 1, 1000, 0, &r), 0);
        assert_int_equal(r.remaining, 4); /* "a" not charged */
        sl_store_stats_get(s, &after);
        assert_int_equal(after.keys, before.keys); /* no new key left behind */
        if (nn) assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, kn, (size_t)nn), 0);
        sl_store_free(s);
        sl_store_free(twin);
    }
}

static void many_shards(void **state)
{
    (void)state;
    /* 16 keys spread over shards, locked together without deadlock */
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params p = P(SL_SLIDING_LOG, 3, 10000);
    char keys[SL_MAX_BATCH][8];
    sl_request q[SL_MAX_BATCH];
    for (int i = 0; i < SL_MAX_BATCH; i++) {
        keys[i][0] = 'k';
        keys[i][1] = (char)('a' + i);
        q[i] = (sl_request){&p, keys[i], 2, 1};
    }
    sl_result r[SL_MAX_BATCH];
    int all;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sl_decide_all(s, q, SL_MAX_BATCH, i, r, &all), 0);
        assert_true(all);
    }
    assert_int_equal(sl_decide_all(s, q, SL_MAX_BATCH, 5, r, &all), 0);
    assert_false(all);
    sl_store_free(s);
}

/* The same key bytes in space 0 and space 1 are two keys: each counts on
 * its own, sl_forget reaches space 0 only, and sl_decide_all may name both
 * in one request (no repeat).  sluiced's rule counters rely on this. */
static void key_spaces(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params p0 = P(SL_FIXED_WINDOW, 3, 60000), p1 = p0;
    p1.space = 1;
    sl_result r;
    for (int i = 0; i < 3; i++) assert_int_equal(sl_decide(s, &p1, "k", 1, 1000, 1, &r), 0);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(sl_decide(s, &p0, "k", 1, 1000, 1, &r), 0); /* space 0: untouched */
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.remaining, 2);
    assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, "k", 1), 1); /* removes space 0's */
    assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, "k", 1), 0);
    assert_int_equal(sl_peek(s, &p1, "k", 1, 1000, 1, &r), 0); /* space 1 still full */
    assert_int_equal(r.allowed, 0);
    sl_request q[2] = {{&p0, "k", 1, 1}, {&p1, "k", 1, 0}};
    sl_result rr[2];
    int all = -1;
    assert_int_equal(sl_decide_all(s, q, 2, 1000, rr, &all), 0);
    assert_true(all);
    assert_int_equal(rr[0].remaining, 2);
    assert_int_equal(rr[1].remaining, 0);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, 2);
    p1.space = 2; /* only 0 and 1 exist */
    assert_int_equal(sl_params_check(&p1), SL_EINVAL);
    assert_int_equal(sl_decide(s, &p1, "k", 1, 1000, 1, &r), SL_EINVAL);
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_or_nothing),
        cmocka_unit_test(key_spaces),
        cmocka_unit_test(bad_input_charges_nothing),
        cmocka_unit_test(many_shards),
        cmocka_unit_test(refused_for_room_charges_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
