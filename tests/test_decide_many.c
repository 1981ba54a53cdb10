/*
 * test_decide_many.c -- sl_decide_many and sl_allow_many answer exactly as
 * the same calls made one by one: two stores with the same seed, one fed
 * call by call, the other in batches, must give the same six fields and
 * the same return code for every request -- repeated keys, every
 * algorithm, bad calls mixed in -- and end holding the same state.  The
 * store is made big enough (100,000 keys) that the look-ahead's second
 * stage runs.  The threaded case is in test_threads.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

#define NKEYS  100000
#define NCALLS 300000
#define KEYLEN 16

static char g_keys[NKEYS][KEYLEN];

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static sl_store *twin_store(void)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.fixed_seed = 1;
    memcpy(o.seed, "decide-many-seed", 16);
    sl_store *s = sl_store_new(&o, NULL);
    assert_non_null(s);
    return s;
}

static void assert_same(const sl_result *a, const sl_result *b, size_t i)
{
    if (a->allowed != b->allowed || a->limit != b->limit || a->remaining != b->remaining ||
        a->retry_after_ms != b->retry_after_ms || a->reset_after_ms != b->reset_after_ms ||
        a->delay_ms != b->delay_ms)
        fail_msg("call %zu: one by one (%d %lld %lld %lld %lld %lld) != batched "
                 "(%d %lld %lld %lld %lld %lld)",
                 i, a->allowed, (long long)a->limit, (long long)a->remaining,
                 (long long)a->retry_after_ms, (long long)a->reset_after_ms,
                 (long long)a->delay_ms, b->allowed, (long long)b->limit,
                 (long long)b->remaining, (long long)b->retry_after_ms,
                 (long long)b->reset_after_ms, (long long)b->delay_ms);
}

/* Random calls over every algorithm; about one in 200 is bad (no params,
 * empty key, negative cost, time out of range). */
static void same_as_one_by_one(void **state)
{
    (void)state;
    static sl_params params[SL_ALGO_COUNT * 2];
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        for (int v = 0; v < 2; v++) {
            sl_params *p = &params[a * 2 + v];
            *p = (sl_params)SL_PARAMS_INIT;
            p->algo = (sl_algo)a;
            p->limit = v ? 1000000000000 : 5; /* v = 1: past the 64-bit fast path */
            p->window_ms = v ? 315360000000 : 1000;
            if (a == SL_SLIDING_BUCKETS) p->precision = 10;
        }
    }
    for (int k = 0; k < NKEYS; k++) snprintf(g_keys[k], KEYLEN, "k:%d", k);
    static sl_call calls[NCALLS];
    static sl_result one[NCALLS], many[NCALLS];
    static int rc_one[NCALLS], rc_many[NCALLS];
    uint64_t s = 88172645463325252ULL;
    int64_t now = 1000000;
    for (size_t i = 0; i < NCALLS; i++) {
        uint64_t x = rng(&s);
        /* half the calls on 100 hot keys (repeats inside a batch), half on all */
        int k = (int)((x >> 8) % ((x & 1) ? 100 : NKEYS));
        sl_call *c = &calls[i];
        c->params = &params[(k % SL_ALGO_COUNT) * 2 + ((x >> 40) % 16 == 0)];
        c->key = g_keys[k];
        c->keylen = strlen(g_keys[k]);
        now += (int64_t)((x >> 30) % 3);
        c->now_ms = now - (int64_t)((x >> 34) % 4); /* a little out of order */
        c->cost = (int64_t)((x >> 20) % 4);
        switch ((x >> 50) % 800) {
        case 0: c->params = NULL; break;
        case 1: c->keylen = 0; break;
        case 2: c->cost = -1; break;
        case 3: c->now_ms = INT64_MAX; break;
        default: break;
        }
    }
    sl_store *a = twin_store(), *b = twin_store();
    size_t ok_one = 0;
    for (size_t i = 0; i < NCALLS; i++) {
        const sl_call *c = &calls[i];
        rc_one[i] = sl_decide(a, c->params, c->key, c->keylen, c->now_ms, c->cost, &one[i]);
        ok_one += rc_one[i] == 0;
    }
    /* batches of uneven sizes, 1 to 100 */
    size_t ok_many = 0;
    for (size_t i = 0, n; i < NCALLS; i += n) {
        n = 1 + (size_t)(rng(&s) % 100);
        if (n > NCALLS - i) n = NCALLS - i;
        ok_many += sl_decide_many(b, calls + i, n, many + i, rc_many + i);
    }
    assert_int_equal(ok_one, ok_many);
    if (!(ok_one < NCALLS && ok_one > NCALLS * 9 / 10)) fail_msg("%zu of %d calls ok", ok_one, NCALLS);
    for (size_t i = 0; i < NCALLS; i++) {
        if (rc_one[i] != rc_many[i])
            fail_msg("call %zu: rc %d one by one, %d batched", i, rc_one[i], rc_many[i]);
        if (rc_one[i] == 0) assert_same(&one[i], &many[i], i);
    }
    /* and the same state is left: peek every key of every algorithm */
    for (int k = 0; k < NKEYS; k += 7) {
        for (int p = 0; p < SL_ALGO_COUNT * 2; p++) {
            sl_result ra, rb;
            int ea = sl_peek(a, &params[p], g_keys[k], strlen(g_keys[k]), now + 500, 1, &ra);
            int eb = sl_peek(b, &params[p], g_keys[k], strlen(g_keys[k]), now + 500, 1, &rb);
            assert_int_equal(ea, eb);
            if (ea == 0) assert_same(&ra, &rb, (size_t)k);
        }
    }
    sl_store_stats sa, sb;
    sl_store_stats_get(a, &sa);
    sl_store_stats_get(b, &sb);
    assert_int_equal(sa.keys, sb.keys);
    sl_store_free(a);
    sl_store_free(b);
}

/* sl_allow_many is sl_allow n times; a key repeated in one batch sees its
 * earlier charges (a limit of 3: the 4th of the same key is denied). */
static void allow_many_with_repeats(void **state)
{
    (void)state;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 3;
    p.window_ms = 60000;
    sl_limiter *l = sl_limiter_new(&p, NULL, NULL);
    assert_non_null(l);
    sl_call c[6] = {
        {NULL, "u:1", 3, 1000, 1}, {NULL, "u:1", 3, 1000, 1}, {NULL, "u:2", 3, 1000, 1},
        {NULL, "u:1", 3, 1000, 1}, {NULL, "u:1", 3, 1000, 1}, {NULL, "", 0, 1000, 1},
    };
    sl_result r[6];
    int rc[6];
    assert_int_equal(sl_allow_many(l, c, 6, r, rc), 5);
    int want_allowed[5] = {1, 1, 1, 1, 0};
    int64_t want_remaining[5] = {2, 1, 2, 0, 0};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(rc[i], 0);
        assert_int_equal(r[i].allowed, want_allowed[i]);
        assert_int_equal(r[i].remaining, want_remaining[i]);
    }
    assert_int_equal(r[4].retry_after_ms, 59000);
    assert_int_equal(rc[5], SL_EKEY);
    /* nothing at all, or no room for answers: nothing decided */
    assert_int_equal(sl_allow_many(l, c, 0, r, rc), 0);
    assert_int_equal(sl_allow_many(l, c, 6, NULL, rc), 0);
    assert_int_equal(sl_decide_many(NULL, c, 6, r, rc), 0);
    sl_result peek;
    assert_int_equal(sl_limiter_peek(l, "u:2", 3, 1000, 0, &peek), 0);
    assert_int_equal(peek.remaining, 2);
    sl_limiter_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_as_one_by_one),
        cmocka_unit_test(allow_many_with_repeats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
