/*
 * test_evict.c -- what a bounded store gives up when it is full, as a caller
 * of libsluice sees it (issue 5, points 3 and 5):
 *   - a flood of new keys never makes a key at its limit pass: with
 *     SL_FULL_DENY the flood is refused (SL_EFULL) once nothing at rest is
 *     left, with SL_FULL_EVICT the flood's own keys, below their limit, go
 *     first; when every key holds a limit, the two modes part ways;
 *   - keys at rest go first and are counted as such, and a refusing store
 *     takes new keys again once old ones come to rest;
 *   - the bound counts everything a key allocates: used memory stays within
 *     it, and the heap the store takes is no more than it says it holds;
 *   - parameters whose one key could take more than 1/64 of the bound are
 *     refused, at the exact boundary.
 */
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#define SCALE 10 /* sanitizers run 10-40x slower: a tenth of the keys, */
#else            /* under a tenth of the bound, still far past it */
#define SCALE 1
#endif

#define HOUR 3600000
#define NVIP 200

static sl_store *store_new(size_t bound, unsigned on_full)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.max_bytes = bound;
    o.on_full = on_full;
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    assert_int_equal(err, SL_OK);
    return s;
}

/* L requests per hour: a key that made one request holds a limit for an
 * hour (a window) or a fifth of one (the buckets). */
static sl_params params_for(sl_algo a, int64_t L)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = L;
    p.window_ms = HOUR;
    return p;
}

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* NVIP keys "vip:N" driven to their limit at t: L requests, then one more,
 * denied. */
static void vips_to_limit(sl_store *s, const sl_params *p, int64_t t)
{
    char k[32];
    sl_result r;
    for (int v = 0; v < NVIP; v++) {
        int n = snprintf(k, sizeof k, "vip:%d", v);
        for (int64_t i = 0; i < p->limit; i++) {
            assert_int_equal(sl_decide(s, p, k, (size_t)n, t, 1, &r), 0);
            assert_int_equal(r.allowed, 1);
        }
        assert_int_equal(sl_decide(s, p, k, (size_t)n, t, 1, &r), 0);
        assert_int_equal(r.allowed, 0);
    }
}

/* Every vip is still denied at t, for as long as its own state says. */
static void vips_still_denied(sl_store *s, const sl_params *p, int64_t t)
{
    char k[32];
    sl_result r;
    for (int v = 0; v < NVIP; v++) {
        int n = snprintf(k, sizeof k, "vip:%d", v);
        int rc = sl_decide(s, p, k, (size_t)n, t, 1, &r);
        if (rc != 0 || r.allowed != 0 || r.retry_after_ms <= 0)
            fail_msg("%s: %s was allowed again after the flood (rc %d, allowed %d, retry %lld)",
                     sl_algo_name(p->algo), k, rc, (int)r.allowed, (long long)r.retry_after_ms);
    }
}

/* A flood of n random new keys with parameters p at t, t + 1 ms every 1000
 * keys.  Returns how many were refused (SL_EFULL); any other error fails. */
static uint64_t flood(sl_store *s, const sl_params *p, int64_t t, uint64_t n, uint64_t seed)
{
    char k[32];
    sl_result r;
    uint64_t x = seed | 1, refused = 0;
    for (uint64_t i = 0; i < n; i++) {
        int len = snprintf(k, sizeof k, "f:%016llx", (unsigned long long)next_rand(&x));
        int rc = sl_decide(s, p, k, (size_t)len, t + (int64_t)(i / 1000), 1, &r);
        if (rc == SL_EFULL)
            refused++;
        else if (rc != 0)
            fail_msg("flood key %llu: %s", (unsigned long long)i, sl_strerror(rc));
    }
    return refused;
}

/* 200 keys at their limit, then a flood of random keys (each one request,
 * below its limit of 5) far past a 1 MB bound, for every algorithm and
 * both modes: the 200 are still denied.  SL_FULL_DENY refuses the flood
 * and evicts nothing; SL_FULL_EVICT evicts flood keys and no key at its
 * limit.  For the token bucket 3,000,000 keys refused (the flood:
 * ~1 us each) and 1,000,000 evicting (~1.7 us each); 200,000 for the
 * others. */
static void test_flood_keeps_limits(void **state)
{
    (void)state;
    const size_t bound = (1 << 20) / SCALE;
    for (unsigned mode = SL_FULL_EVICT; mode <= SL_FULL_DENY; mode++) {
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            sl_params p = params_for((sl_algo)a, 5);
            uint64_t n = a != SL_TOKEN_BUCKET ? 200000 : mode == SL_FULL_DENY ? 3000000 : 1000000;
            n /= SCALE;
            sl_store *s = store_new(bound, mode);
            vips_to_limit(s, &p, 1000);
            uint64_t refused = flood(s, &p, 2000, n, 0x9e3779b97f4a7c15ULL + (uint64_t)a);
            vips_still_denied(s, &p, 2000 + (int64_t)n / 1000);
            sl_store_stats st;
            sl_store_stats_get(s, &st);
            assert_true(st.bytes <= bound);
            assert_int_equal(st.expired, 0); /* nothing came to rest in the meantime */
            assert_int_equal(st.evicted_at_limit, 0);
            if (mode == SL_FULL_DENY) {
                assert_int_equal(st.evictions, 0);
                assert_true(refused > n / 2); /* the bound holds far fewer keys */
                assert_int_equal(st.refused, refused);
                assert_int_equal(st.keys, NVIP + n - refused);
            } else {
                assert_int_equal(refused, 0);
                assert_int_equal(st.refused, 0);
                assert_true(st.evictions > n / 2);
                assert_int_equal(st.keys + st.evictions, NVIP + n);
            }
            sl_store_free(s);
        }
    }
}

/* When every key holds a limit -- a flood of keys that each reach theirs
 * (L = 1) -- the modes differ as documented: SL_FULL_DENY still refuses and
 * keeps the 200; SL_FULL_EVICT evicts keys at their limit, and says so. */
static void test_flood_at_limit(void **state)
{
    (void)state;
    const size_t bound = 256 * 1024 / SCALE;
    sl_params vip = params_for(SL_FIXED_WINDOW, 5), one = params_for(SL_FIXED_WINDOW, 1);
    uint64_t n = 200000 / SCALE;

    sl_store *s = store_new(bound, SL_FULL_DENY);
    vips_to_limit(s, &vip, 1000);
    uint64_t refused = flood(s, &one, 2000, n, 77);
    vips_still_denied(s, &vip, 3000);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_true(refused > n / 2);
    assert_int_equal(st.evictions, 0);
    sl_store_free(s);

    s = store_new(bound, SL_FULL_EVICT);
    vips_to_limit(s, &vip, 1000);
    assert_int_equal(flood(s, &one, 2000, n, 77), 0);
    sl_store_stats_get(s, &st);
    assert_true(st.evicted_at_limit > n / 2);
    assert_int_equal(st.evicted_at_limit, st.evictions);
    assert_true(st.bytes <= bound);
    sl_store_free(s);
}

/* Keys at rest go first, whatever the mode: a store full of keys that have
 * come to rest takes new keys without evicting any that holds a limit,
 * counting each drop as at rest; a refusing store (SL_FULL_DENY) takes new
 * keys again once its keys come to rest. */
static void test_at_rest_first(void **state)
{
    (void)state;
    const size_t bound = 256 * 1024 / SCALE;
    for (unsigned mode = SL_FULL_EVICT; mode <= SL_FULL_DENY; mode++) {
        sl_params p = params_for(SL_TOKEN_BUCKET, 5);
        p.window_ms = 1000; /* one request rests after 200 ms */
        sl_store *s = store_new(bound, mode);
        uint64_t n = 100000 / SCALE;
        uint64_t refused = flood(s, &p, 0, n, 1); /* t = 0 .. 99 ms: all restricted */
        sl_store_stats st;
        sl_store_stats_get(s, &st);
        if (mode == SL_FULL_DENY) {
            assert_true(refused > n / 2);
            assert_int_equal(st.evictions, 0);
        } else {
            assert_int_equal(refused, 0);
            assert_true(st.evictions > n / 2);
        }
        assert_int_equal(st.expired, 0);
        uint64_t keys = st.keys, ev = st.evictions;
        /* t = 10 s: every key is at rest; as many new ones fit, none refused */
        assert_int_equal(flood(s, &p, 10000, keys, 2), 0);
        sl_store_stats_get(s, &st);
        assert_int_equal(st.evictions, ev);
        assert_true(st.evicted_at_rest >= keys * 9 / 10);
        assert_int_equal(st.expired, st.evicted_at_rest); /* all of them to make room */
        /* the periodic expiry counts as expired, not as evicted */
        uint64_t gone = sl_store_expire(s, 20000, 0);
        assert_true(gone > 0);
        sl_store_stats_get(s, &st);
        assert_int_equal(st.expired, st.evicted_at_rest + gone);
        assert_int_equal(st.keys, 0);
        assert_true(st.bytes <= bound);
        sl_store_free(s);
    }
}

/* Heap bytes in use (malloc'd, in chunks; glibc's own mapped blocks too). */
static uint64_t heap_used(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

/* The bound counts every byte a key holds.  For every algorithm, with
 * parameters that make large records and long logs too, a flood of 3x
 * what fits: used memory never passes the bound, and (plain build) what
 * the store took from the heap -- sliding-log rings included -- is no more
 * than it counts (+ its fixed part: 64 shards of ~2 KB; and the mapped
 * blocks of 64 KB or more are not in the heap at all).  Before rings were
 * counted at their malloc chunk, a ring of 32 bytes cost 48 and counted 32. */
static void test_bound_counts_everything(void **state)
{
    (void)state;
    struct {
        sl_algo a;
        int64_t L, W, P, reqs; /* reqs: requests per key */
        size_t bound;
        uint64_t keys;
    } cases[] = {
        {SL_FIXED_WINDOW, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_SLIDING_WINDOW, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_TOKEN_BUCKET, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_GCRA, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_LEAKY_BUCKET, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_SLIDING_BUCKETS, 5, HOUR, 0, 1, 2 << 20, 200000},
        {SL_SLIDING_BUCKETS, 100, 6000, 6000, 1, 2 << 20, 1000},  /* 6 KB each */
        {SL_SLIDING_BUCKETS, 100, 65535, 65535, 1, 8 << 20, 400}, /* 64 KB each */
        {SL_SLIDING_LOG, 5, HOUR, 0, 3, 2 << 20, 60000},
        {SL_SLIDING_LOG, 2000, HOUR, 0, 100, 1 << 20, 7000}, /* rings of ~150 bytes */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sl_params p = params_for(cases[c].a, cases[c].L);
        p.window_ms = cases[c].W;
        p.precision = cases[c].P;
        /* few keys, large ones, are not scaled down: 1/64 of the bound must
         * hold one */
        int scale = cases[c].keys < 10000 ? 1 : SCALE;
        size_t bound = cases[c].bound / (size_t)scale;
        uint64_t before = heap_used();
        sl_store *s = store_new(bound, SL_FULL_EVICT);
        char k[32];
        sl_result r;
        uint64_t x = 5, keys = cases[c].keys / (uint64_t)scale;
        for (uint64_t i = 0; i < keys; i++) {
            int len = snprintf(k, sizeof k, "f:%016llx", (unsigned long long)next_rand(&x));
            for (int64_t q = 0; q < cases[c].reqs; q++)
                assert_int_equal(sl_decide(s, &p, k, (size_t)len, (int64_t)i + q, 1, &r), 0);
        }
        sl_store_stats st;
        sl_store_stats_get(s, &st);
        if (st.bytes > bound)
            fail_msg("case %zu: %llu bytes over a bound of %zu", c, (unsigned long long)st.bytes,
                     bound);
        if (st.evictions == 0) fail_msg("case %zu: the bound was not reached", c);
#ifndef SANITIZED
        uint64_t took = heap_used() - before;
        if (took > st.bytes + 192 * 1024)
            fail_msg("case %zu (%s): the heap grew %llu bytes, the store counts %llu", c,
                     sl_algo_name(p.algo), (unsigned long long)took, (unsigned long long)st.bytes);
#else
        (void)before;
#endif
        sl_store_free(s);
    }
}

/* A bounded store refuses parameters under which one key could take more
 * than 1/64 of the bound -- the record with the longest key and, for a
 * sliding-log, its largest ring -- at every entry point, before touching
 * anything; an unbounded store takes them.  4 MB: 64 KB a key, so
 * sliding-buckets of width 1 (L < 256) fit up to P = 64996 (540 bytes of
 * header -- 8, and 8 for a clock kept wide --, longest key and bucket
 * header beside the counters). */
static void test_too_big(void **state)
{
    (void)state;
    sl_store *s = store_new(4 << 20, SL_FULL_DENY), *free_s = store_new(0, SL_FULL_DENY);
    sl_params p = params_for(SL_SLIDING_BUCKETS, 100);
    sl_result r;
    p.precision = 64996;
    p.window_ms = 64996 * 1000;
    assert_int_equal(sl_decide(s, &p, "k", 1, 0, 1, &r), 0);
    p.precision = 64997;
    p.window_ms = 64997 * 1000;
    assert_int_equal(sl_decide(s, &p, "k2", 2, 0, 1, &r), SL_ETOOBIG);
    assert_int_equal(sl_peek(s, &p, "k2", 2, 0, 1, &r), SL_ETOOBIG);
    assert_int_equal(sl_decide(free_s, &p, "k2", 2, 0, 1, &r), 0);
    sl_request rq = {&p, "k3", 2, 1};
    assert_int_equal(sl_decide_all(s, &rq, 1, 0, &r, NULL), SL_ETOOBIG);
    sl_call call = {&p, "k4", 2, 0, 1};
    int rc = 0;
    assert_int_equal(sl_decide_many(s, &call, 1, &r, &rc), 0);
    assert_int_equal(rc, SL_ETOOBIG);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, 1); /* "k" alone: nothing was touched */

    /* A sliding-log of a million a second could hold a million entries. */
    sl_params log = params_for(SL_SLIDING_LOG, 1000000);
    log.window_ms = 1000;
    assert_int_equal(sl_decide(s, &log, "k", 1, 0, 1, &r), SL_ETOOBIG);
    log.limit = 1000;
    assert_int_equal(sl_decide(s, &log, "k", 1, 0, 1, &r), 0);
    assert_string_equal(sl_strerror(SL_ETOOBIG),
                        "one key under these parameters could take more than 1/64 of the memory "
                        "bound: lower the precision or the limit, or raise the bound");
    assert_string_equal(sl_strerror(SL_EFULL),
                        "store full: every key it could drop to make room still holds a limit, "
                        "so new keys are refused");
    sl_store_free(s);
    sl_store_free(free_s);
}

/* A bad on_full is refused. */
static void test_opts(void **state)
{
    (void)state;
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.on_full = 2;
    int err = 0;
    assert_null(sl_store_new(&o, &err));
    assert_int_equal(err, SL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_keeps_limits),
        cmocka_unit_test(test_flood_at_limit),
        cmocka_unit_test(test_at_rest_first),
        cmocka_unit_test(test_bound_counts_everything),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
