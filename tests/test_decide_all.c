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
#include "store.h" /* sl__ext_alloc: a store's last bytes taken on purpose */

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

/* Takes len bytes of s's one shard with a block of the test's own (NULL
 * for 0); free_room gives them back. */
static void *take_room(sl_store *s, size_t len)
{
    if (len == 0) return NULL;
    sl__shard *sh = sl__store_shard_at(s, 0);
    sl__shard_lock(sh);
    void *blk = sl__ext_alloc(sh, len);
    sl__shard_unlock(sh);
    assert_non_null(blk);
    return blk;
}

static void free_room(sl_store *s, void *blk, size_t len)
{
    sl__shard *sh = sl__store_shard_at(s, 0);
    sl__shard_lock(sh);
    sl__ext_free(sh, blk, len);
    sl__shard_unlock(sh);
}

/* Fills a one-shard SL_FULL_DENY store of 64 KB with keys at their limit
 * (fixed-window, 1 a minute, "f:NNNNN", at 2000) until one is refused,
 * forgets the first (its record is free for a key of its size), and
 * leaves keep to keep + 15 bytes free: 4 KB held aside while filling
 * come back, the limbo is emptied (its bytes are room a reclaim
 * would find), and the rest is taken by a block (*blk, *len: free_room
 * gives them back, so that 4 KB or more are free again). */
static void fill_room(sl_store *s, uint64_t keep, void **blk, size_t *len)
{
    sl_params one = P(SL_FIXED_WINDOW, 1, 60000);
    sl_result r;
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    uint64_t keys = st.keys;
    void *aside = take_room(s, 4096);
    int i = 0, rc = 0;
    for (; i < 100000 && rc == 0; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "f:%05d", i);
        rc = sl_decide(s, &one, k, (size_t)n, 2000, 1, &r);
    }
    assert_int_equal(rc, SL_EFULL);
    assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, "f:00000", 7), 1);
    free_room(s, aside, 4096);
    sl_store_expire(s, 2000, 0); /* nothing is at rest: it empties the limbo alone */
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, keys + (uint64_t)i - 2); /* every filler kept but one */
    uint64_t room = st.max_bytes - st.bytes;
    assert_true(room >= 4096);
    size_t n = 0;
    while (n < room && sl__ext_cost(n + 1) + keep <= room) n++; /* costs: steps of 16 */
    *blk = take_room(s, n);
    *len = n;
    sl_store_stats_get(s, &st);
    assert_in_range(st.max_bytes - st.bytes, keep, keep + 15);
}

/* A batch refused because an existing key's state finds no room to grow
 * charges nothing: not the existing key before it in the batch, nor a new
 * key (charged first, then removed).  y's sliding-log ring is full (32
 * one-byte entries in 32 bytes): its next entry grows it to 48 bytes (64
 * with malloc's header, reserved whole before the old ring goes), more
 * than the 40-55 bytes left; z's sliding-buckets counters must widen
 * (limit 300: 2 bytes each) into a bigger record, which finds no page;
 * x's ring has room.  Before the fix x stayed charged, and so did the new
 * key: pass two charged the growing keys in call order. */
static void growth_refused_charges_nothing(void **state)
{
    (void)state;
    sl_params lg = P(SL_SLIDING_LOG, 40, 60000), one = P(SL_FIXED_WINDOW, 1, 60000);
    sl_params sb = P(SL_SLIDING_BUCKETS, 10, 60000), wide = sb;
    sb.precision = wide.precision = 60;
    wide.limit = 300;
    sl_store_opts o = {0};
    o.max_bytes = 64 << 10, o.shards = 1, o.on_full = SL_FULL_DENY, o.fixed_seed = 1;
    sl_store *s = sl_store_new(&o, NULL);
    assert_non_null(s);
    /* in the slab, a forgotten key's record is room for a key of its size
     * (a fitted table's tombstone is room only for keys whose probe run
     * passes it): bounded stores' layout today, kept if that changes */
    sl__store_fit_off(s, 1);
    sl_result r, rr[3];
    for (int i = 0; i < 5; i++) assert_int_equal(sl_decide(s, &lg, "x", 1, 1000 + i, 1, &r), 0);
    for (int i = 0; i < 32; i++) assert_int_equal(sl_decide(s, &lg, "y", 1, 1000 + i, 1, &r), 0);
    assert_int_equal(sl_decide(s, &sb, "z", 1, 1000, 1, &r), 0);
    void *blk;
    size_t len;
    fill_room(s, 40, &blk, &len);
    /* alone, y and the wider z are refused for room; x and a new key in
     * the free record are not (the new key is forgotten again) */
    assert_int_equal(sl_decide(s, &lg, "y", 1, 2000, 1, &r), SL_EFULL);
    assert_int_equal(sl_decide(s, &wide, "z", 1, 2000, 1, &r), SL_EFULL);
    assert_int_equal(sl_decide(s, &one, "n:00000", 7, 2000, 1, &r), 0);
    assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, "n:00000", 7), 1);
    assert_int_equal(sl_peek(s, &lg, "x", 1, 2000, 1, &r), 0);
    assert_true(r.allowed);
    assert_int_equal(r.remaining, 34);
    sl_store_stats before, after;
    sl_store_stats_get(s, &before);
    sl_request q[4][3] = {
        {{&lg, "x", 1, 1}, {&lg, "y", 1, 1}},
        {{&one, "n:00000", 7, 1}, {&lg, "y", 1, 1}},
        {{&one, "n:00000", 7, 1}, {&lg, "x", 1, 1}, {&lg, "y", 1, 1}},
        {{&lg, "x", 1, 1}, {&wide, "z", 1, 1}},
    };
    size_t nq[4] = {2, 2, 3, 2};
    for (int b = 0; b < 4; b++) {
        int all = -1;
        assert_int_equal(sl_decide_all(s, q[b], nq[b], 2000, rr, &all), SL_EFULL);
        assert_false(all);
        assert_int_equal(sl_peek(s, &lg, "x", 1, 2000, 0, &r), 0);
        assert_int_equal(r.remaining, 35); /* x not charged */
        assert_int_equal(sl_peek(s, &lg, "y", 1, 2000, 0, &r), 0);
        assert_int_equal(r.remaining, 8);
        assert_int_equal(sl_peek(s, &sb, "z", 1, 2000, 0, &r), 0);
        assert_int_equal(r.remaining, 9);
        sl_store_stats_get(s, &after);
        assert_int_equal(after.keys, before.keys); /* the new key not left behind */
    }
    /* with the bytes back, the same batches pass, each charged once */
    free_room(s, blk, len);
    for (int b = 0; b < 4; b++) {
        if (b == 2) assert_int_equal(sl_forget(s, SL_FIXED_WINDOW, "n:00000", 7), 1);
        int all = -1;
        assert_int_equal(sl_decide_all(s, q[b], nq[b], 2000, rr, &all), 0);
        assert_true(all);
    }
    assert_int_equal(sl_peek(s, &lg, "x", 1, 2000, 0, &r), 0);
    assert_int_equal(r.remaining, 32);
    assert_int_equal(sl_peek(s, &lg, "y", 1, 2000, 0, &r), 0);
    assert_int_equal(r.remaining, 5);
    assert_int_equal(sl_peek(s, &wide, "z", 1, 2000, 0, &r), 0);
    assert_int_equal(r.remaining, 298);
    sl_store_free(s);
}

/* The largest sliding-log limit a 64 KB store takes for a window (the
 * first that SL_ETOOBIG refuses, less one), by sl_peek. */
static int64_t largest_log(sl_store *s, int64_t W)
{
    sl_params p = P(SL_SLIDING_LOG, 1, W);
    sl_result r;
    int rc = 0;
    for (; p.limit < 100000 && (rc = sl_peek(s, &p, "k", 1, 0, 1, &r)) == 0; p.limit++) {
    }
    assert_int_equal(rc, SL_ETOOBIG);
    return p.limit - 1;
}

/* A key that passes SL_ETOOBIG's check (its state at most 1/64 of the
 * bound) works in a store of 64 shards, whose shards' budgets are each
 * exactly that share: alone in its shard it may pass its shard's budget
 * (the table, page directory and page beside it), as a record that fits
 * nowhere else is placed.  A sliding-log at the largest limit the check
 * takes, every entry taken, with a one-byte key (refused for room at its
 * 81st request before: sl__shard_reserve counted the shard's table beside
 * the share) and with a 512-byte one (at its first); the second through
 * sl_decide_all. */
static void share_works_in_small_shards(void **state)
{
    (void)state;
    static char longkey[SL_MAX_KEY];
    memset(longkey, 'k', sizeof longkey);
    for (int deny = 0; deny < 2; deny++)
        for (size_t klen = 1; klen <= SL_MAX_KEY; klen += SL_MAX_KEY - 1) {
            sl_store_opts o = {0};
            o.max_bytes = 64 << 10, o.shards = 64, o.fixed_seed = 1;
            o.on_full = deny ? SL_FULL_DENY : SL_FULL_EVICT;
            sl_store *s = sl_store_new(&o, NULL);
            assert_non_null(s);
            int64_t W = 60000, L = largest_log(s, W);
            sl_params p = P(SL_SLIDING_LOG, L, W);
            sl_request q = {&p, longkey, klen, 1};
            sl_result r;
            int64_t t = 1000;
            for (int64_t i = 0; i <= L; i++, t += i < L ? W / L : 0) {
                int all = -1;
                int rc = klen == 1 ? sl_decide(s, &p, "k", 1, t, 1, &r)
                                   : sl_decide_all(s, &q, 1, t, &r, &all);
                if (rc != 0) fail_msg("request %lld of %lld (key of %zu bytes): %s",
                                      (long long)i + 1, (long long)L, klen, sl_strerror(rc));
                assert_int_equal(r.allowed, i < L);
                assert_int_equal(r.remaining, i < L ? L - 1 - i : 0);
                assert_int_equal(all, klen == 1 ? -1 : i < L);
            }
            p.limit = L + 1; /* and the check's line is where it was */
            assert_int_equal(sl_decide(s, &p, "k2", 2, t, 1, &r), SL_ETOOBIG);
            sl_store_stats st;
            sl_store_stats_get(s, &st);
            assert_int_equal(st.keys, 1);
            sl_store_free(s);
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
        cmocka_unit_test(growth_refused_charges_nothing),
        cmocka_unit_test(share_works_in_small_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
