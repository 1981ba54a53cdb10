/*
 * test_store_fit.c -- fixed-size records in fitted tables (store.c, "fitted
 * tables"; docs/store.md, "Fitted tables"): what only that layout can get
 * wrong.
 *
 *   - every key length 1..64 and every algorithm beside each other, keys
 *     forgotten and added again (tombstones, rebuilds): every reply equals
 *     that of a store on the old path (sl__store_fit_off, SL_LOCK_SHARD),
 *     with both kinds of lock; keys of up to 48 bytes of the fixed-size
 *     algorithms are in fitted tables, the rest in the slab;
 *   - a rebuild while a record is held gives up: the new key goes to the
 *     slab and answers right, the held record stays where its holder has
 *     it; once let go, the next rebuild takes every record;
 *   - a tombstone is reused by the next key whose probe run meets it: at
 *     once in an SL_LOCK_SHARD store, after a grace period in an
 *     SL_LOCK_RECORD one;
 *   - the clock walk moves a fitted record whose clock falls behind to the
 *     slab (wide) and it answers as before;
 *   - a snapshot of fitted, slab and wide records loads into 1 and 64
 *     shards, every key answering as before;
 *   - a bounded store keeps the old path (SL__FIT_BOUNDED): keys in the
 *     slab, the bound held;
 *   - small tables are spread (a record in up to 32 slots, as many as a
 *     block of 64 KB allows) and then dense, every key kept; in a bounded
 *     shard spread tables hold 1/16 of the budget at most.
 *
 * Readers while tables are rebuilt: test_store_fit_threads.c (TSan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "sluice.h"
#include "store.h"
#include "support/fit_info.h"

#define T0 1764000000000LL

static sl_store *store_of(unsigned locking, unsigned shards, uint64_t max_bytes)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = shards;
    o.locking = locking;
    o.max_bytes = max_bytes;
    o.fixed_seed = 1;
    memcpy(o.seed, "fitted-tables-16", 16);
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    assert_int_equal(err, SL_OK);
    return s;
}

static sl_params params_of(sl_algo a)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = 7;
    p.window_ms = 10000;
    if (a == SL_SLIDING_BUCKETS) p.precision = 10;
    return p;
}

/* A key of n bytes (1..64), distinct for each (i, n), every byte used. */
static void key_of(unsigned char *k, unsigned i, size_t n)
{
    for (size_t j = 0; j < n; j++) k[j] = (unsigned char)(i * 131u + j * 7u + (i >> 8) * 17u + n);
    k[0] = (unsigned char)i;
    if (n > 1) k[n - 1] = (unsigned char)(i >> 8);
}

static int same(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->reset_after_ms == b->reset_after_ms && a->retry_after_ms == b->retry_after_ms;
}

/* Decides on both stores and compares the replies (and the codes). */
static void both(sl_store *fit, sl_store *old, const sl_params *p, const unsigned char *k,
                 size_t n, int64_t t, int64_t cost)
{
    sl_result a, b;
    int ra = sl_decide(fit, p, k, n, t, cost, &a), rb = sl_decide(old, p, k, n, t, cost, &b);
    if (ra != 0 || rb != 0 || !same(&a, &b))
        fail_msg("%s, key of %zu bytes at %lld: rc %d/%d allowed %d/%d remaining %lld/%lld "
                 "reset %lld/%lld",
                 sl_algo_name(p->algo), n, (long long)t, ra, rb, (int)a.allowed, (int)b.allowed,
                 (long long)a.remaining, (long long)b.remaining, (long long)a.reset_after_ms,
                 (long long)b.reset_after_ms);
}

/* Every key length and algorithm beside each other, against the old path. */
static void every_length(unsigned locking)
{
    sl_store *fit = store_of(locking, 4, 0), *old = store_of(SL_LOCK_SHARD, 4, 0);
    sl__store_fit_off(old, 1);
    unsigned char k[64];
    for (int round = 0; round < 6; round++) {
        int64_t t = T0 + round * 1700;
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            sl_params p = params_of((sl_algo)a);
            for (size_t n = 1; n <= 64; n++)
                for (unsigned i = 0; i < 12; i++) {
                    key_of(k, i, n);
                    both(fit, old, &p, k, n, t + (int64_t)i, 1 + (int64_t)(i % 3));
                }
        }
        /* forget every third key of the round's parity: tombstones, then
         * the same keys again next round (reused slots, rebuilds) */
        for (int a = 0; a < SL_ALGO_COUNT; a++)
            for (size_t n = 1; n <= 64; n++)
                for (unsigned i = (unsigned)round % 3; i < 12; i += 3) {
                    key_of(k, i, n);
                    assert_int_equal(sl_forget(fit, (sl_algo)a, k, n),
                                     sl_forget(old, (sl_algo)a, k, n));
                }
    }
    /* where they live */
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        for (size_t n = 1; n <= 64; n++) {
            key_of(k, 1, n);
            int fixed = a != SL_SLIDING_LOG && a != SL_SLIDING_BUCKETS;
            int want = fixed && n <= SL__FIT_KEY_MAX ? 1 : 2;
            assert_int_equal(sl__store_placed(fit, (unsigned)a, k, n), want);
            assert_int_equal(sl__store_placed(old, (unsigned)a, k, n), 2);
        }
    sl_store_stats sa, sb;
    sl_store_stats_get(fit, &sa);
    sl_store_stats_get(old, &sb);
    assert_int_equal(sa.keys, sb.keys);
    sl_store_free(fit);
    sl_store_free(old);
}

static void test_every_length_shard_lock(void **state)
{
    (void)state;
    every_length(SL_LOCK_SHARD);
}

static void test_every_length_record_lock(void **state)
{
    (void)state;
    every_length(SL_LOCK_RECORD);
}

/* The engine's state length of each fixed-size algorithm is the fitted
 * tables' (a record made with another goes to the slab). */
static void test_state_len_agrees(void **state)
{
    (void)state;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        if (a == SL_SLIDING_LOG || a == SL_SLIDING_BUCKETS) continue;
        sl_params p = params_of((sl_algo)a);
        sl__norm n;
        sl__norm_from(&n, &p);
        sl_store *s = store_of(SL_LOCK_RECORD, 1, 0);
        sl__shard *sh = sl__store_shard(s, 0);
        uint64_t h = sl__store_hash(s, (unsigned)a, "k2", 2);
        sl__shard_lock(sh);
        uint8_t *r = sl__shard_insert(sh, h, (unsigned)a, "k2", 2, sl__state_len(&n), T0);
        assert_non_null(r);
        sl__fit_info fi;
        sl__shard_fit_info(sh, (unsigned)a, 2, &fi);
        assert_int_equal(fi.live, 1);
        assert_true(r >= fi.slot0 && r < fi.slot0 + (size_t)fi.cap * fi.rsize);
        assert_int_equal(sl__rec_state_cap(sh, r), fi.rsize - SL__REC_HDR - 2);
        assert_true(sl__rec_state_cap(sh, r) - sl__state_len(&n) <= 1); /* even size */
        sl__rec_unlock(r);
        sl__shard_unlock(sh);
        sl_store_free(s);
    }
}

/* Inserts key "h<i>" (8 bytes) under the held shard lock with state byte i. */
static uint8_t *ins(sl_store *s, sl__shard *sh, unsigned i)
{
    char k[16];
    snprintf(k, sizeof k, "h%07u", i);
    uint64_t h = sl__store_hash(s, SL_TOKEN_BUCKET, k, 8);
    uint8_t *r = sl__shard_insert(sh, h, SL_TOKEN_BUCKET, k, 8, 10, T0);
    assert_non_null(r);
    sl__rec_state(r)[0] = (uint8_t)i;
    sl__rec_state(r)[9] = (uint8_t)(i >> 8);
    return r;
}

/* Whether key "h<i>" is found with its state bytes, and where (1 fitted,
 * 2 slab). */
static int where(sl_store *s, unsigned i)
{
    char k[16];
    snprintf(k, sizeof k, "h%07u", i);
    uint64_t h = sl__store_hash(s, SL_TOKEN_BUCKET, k, 8);
    sl__shard *sh = sl__store_shard(s, h);
    sl__shard_lock(sh);
    uint8_t *r = sl__shard_find(sh, h, SL_TOKEN_BUCKET, k, 8);
    assert_non_null(r);
    assert_int_equal(sl__rec_state(r)[0], (uint8_t)i);
    assert_int_equal(sl__rec_state(r)[9], (uint8_t)(i >> 8));
    sl__rec_unlock(r);
    sl__shard_unlock(sh);
    return sl__store_placed(s, SL_TOKEN_BUCKET, k, 8);
}

/* A rebuild with a record held (as sl_decide_all holds several) gives up:
 * the new keys go to the slab; the held record stays put. */
static void held_rebuild(unsigned locking)
{
    sl_store *s = store_of(locking, 1, 0);
    sl__shard *sh = sl__store_shard(s, 0);
    sl__fit_info fi;
    sl__shard_lock(sh);
    sl__rec_unlock(ins(s, sh, 0));
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    uint32_t cap0 = fi.cap;
    char k0[16] = "h0000000";
    uint64_t h0 = sl__store_hash(s, SL_TOKEN_BUCKET, k0, 8);
    uint8_t *held = sl__shard_find(sh, h0, SL_TOKEN_BUCKET, k0, 8); /* taken: held */
    assert_non_null(held);
    unsigned n = cap0 * 2; /* more than the table holds without a rebuild */
    for (unsigned i = 1; i <= n; i++) sl__rec_unlock(ins(s, sh, i));
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    assert_int_equal(fi.cap, cap0); /* no rebuild happened */
    assert_true(held >= fi.slot0 && held < fi.slot0 + (size_t)fi.cap * fi.rsize);
    sl__rec_state(held)[1] = 0xa5; /* the holder still writes its record */
    sl__rec_unlock(held);
    sl__shard_unlock(sh);
    unsigned in_slab = 0;
    for (unsigned i = 0; i <= n; i++) in_slab += where(s, i) == 2;
    assert_true(in_slab >= n - cap0); /* the overflow went to the slab */
    assert_true(in_slab <= n);
    /* let go: the next key's rebuild takes every fitted record along */
    sl__shard_lock(sh);
    sl__rec_unlock(ins(s, sh, n + 1));
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    sl__shard_unlock(sh);
    assert_true(fi.cap > cap0);
    assert_int_equal(where(s, n + 1), 1);
    assert_int_equal(where(s, 0), 1);
    uint8_t st[10];
    sl__shard_lock(sh);
    uint8_t *r = sl__shard_find(sh, h0, SL_TOKEN_BUCKET, k0, 8);
    memcpy(st, sl__rec_state(r), 10);
    sl__rec_unlock(r);
    sl__shard_unlock(sh);
    assert_int_equal(st[1], 0xa5); /* what the holder wrote moved with it */
    for (unsigned i = 0; i <= n + 1; i++) (void)where(s, i);
    sl_store_stats ss;
    sl_store_stats_get(s, &ss);
    assert_int_equal(ss.keys, n + 2);
    sl_store_free(s);
}

static void test_rebuild_held_shard_lock(void **state)
{
    (void)state;
    held_rebuild(SL_LOCK_SHARD);
}

static void test_rebuild_held_record_lock(void **state)
{
    (void)state;
    held_rebuild(SL_LOCK_RECORD);
}

/* A tombstone is taken by the next key whose probe run starts on it: at
 * once with SL_LOCK_SHARD, after one grace period with SL_LOCK_RECORD. */
static void tomb_reuse(unsigned locking)
{
    sl_store *s = store_of(locking, 1, 0);
    sl__shard *sh = sl__store_shard(s, 0);
    sl__fit_info fi;
    sl__shard_lock(sh);
    sl__rec_unlock(ins(s, sh, 99999)); /* a neighbour: the shard never empties */
    uint8_t *a = ins(s, sh, 0);
    sl__rec_unlock(a);
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    uint32_t slot = (uint32_t)((size_t)(a - fi.slot0) / fi.rsize), cap = fi.cap;
    /* a key whose home is a's slot (home: the hash's low 32 bits onto cap) */
    unsigned b = 0;
    for (unsigned i = 1; i < 90000 && !b; i++) {
        char k[16];
        snprintf(k, sizeof k, "h%07u", i);
        uint64_t h = sl__store_hash(s, SL_TOKEN_BUCKET, k, 8);
        if ((uint32_t)(((uint64_t)(uint32_t)h * cap) >> 32) == slot) b = i;
    }
    assert_true(b != 0);
    char k0[16] = "h0000000";
    uint64_t h0 = sl__store_hash(s, SL_TOKEN_BUCKET, k0, 8);
    uint8_t *r = sl__shard_find(sh, h0, SL_TOKEN_BUCKET, k0, 8);
    assert_ptr_equal(r, a);
    sl__shard_remove(sh, h0, r);
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    assert_int_equal(fi.tomb, 1);
    assert_int_equal(fi.live, 1);
    uint64_t graces = fi.graces;
    uint8_t *nb = ins(s, sh, b);
    sl__rec_unlock(nb);
    sl__shard_fit_info(sh, SL_TOKEN_BUCKET, 8, &fi);
    assert_ptr_equal(nb, a); /* the tombstone's slot: the first of b's run */
    assert_int_equal(fi.tomb, 0);
    assert_int_equal(fi.cap, cap);
    assert_int_equal(fi.graces - graces, locking == SL_LOCK_RECORD ? 1 : 0);
    /* a second reuse with no tombstone made since: no grace period */
    r = sl__shard_find(sh, sl__store_hash(s, SL_TOKEN_BUCKET, "h0099999", 8), SL_TOKEN_BUCKET,
                       "h0099999", 8);
    sl__shard_remove(sh, sl__store_hash(s, SL_TOKEN_BUCKET, "h0099999", 8), r);
    sl__shard_unlock(sh);
    assert_int_equal(sl__store_placed(s, SL_TOKEN_BUCKET, k0, 8), 0);
    assert_int_equal(where(s, b), 1);
    sl_store_free(s);
}

static void test_tomb_reuse_shard_lock(void **state)
{
    (void)state;
    tomb_reuse(SL_LOCK_SHARD);
}

static void test_tomb_reuse_record_lock(void **state)
{
    (void)state;
    tomb_reuse(SL_LOCK_RECORD);
}

/* E moves past a fitted record's clock: it moves to the slab, wide, and
 * answers as the old path's. */
static void walk_moves(unsigned locking)
{
    sl_store *fit = store_of(locking, 1, 0), *old = store_of(SL_LOCK_SHARD, 1, 0);
    sl__store_fit_off(old, 1);
    sl_params p = params_of(SL_TOKEN_BUCKET);
    p.window_ms = SL_MAX_WINDOW_MS; /* so the old key is not at rest far on */
    const unsigned char a[] = "sleeper", b[] = "runner";
    both(fit, old, &p, a, 7, T0, 3);
    assert_int_equal(sl__store_placed(fit, SL_TOKEN_BUCKET, a, 7), 1);
    for (int i = 1; i <= 4; i++) /* b's time jumps: E moves past a's clock */
        both(fit, old, &p, b, 6, T0 + i * ((int64_t)1 << 31), 1);
    sl__shard *sh = sl__store_shard(fit, 0);
    sl__shard_lock(sh);
    assert_true(sl__shard_clock_moves(sh) > 0);
    sl__shard_unlock(sh);
    assert_int_equal(sl__store_placed(fit, SL_TOKEN_BUCKET, a, 7), 2); /* wide: the slab */
    both(fit, old, &p, a, 7, T0 + 10, 1); /* its own, older time */
    both(fit, old, &p, a, 7, T0 + 5 * ((int64_t)1 << 31), 2);
    sl_store_free(fit);
    sl_store_free(old);
}

static void test_walk_moves_shard_lock(void **state)
{
    (void)state;
    walk_moves(SL_LOCK_SHARD);
}

static void test_walk_moves_record_lock(void **state)
{
    (void)state;
    walk_moves(SL_LOCK_RECORD);
}

/* A snapshot of fitted, slab (long keys, sliding algorithms) and wide
 * records loads into 1 and 64 shards; every key answers as before. */
static void test_snapshot_reload(void **state)
{
    (void)state;
    sl_store *s = store_of(SL_LOCK_RECORD, 4, 0);
    unsigned char k[64];
    sl_result r;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        sl_params p = params_of((sl_algo)a);
        for (size_t n = 1; n <= 64; n += 3)
            for (unsigned i = 0; i < 5; i++) {
                key_of(k, i, n);
                assert_int_equal(sl_decide(s, &p, k, n, T0 + i, 1 + i % 4, &r), 0);
            }
    }
    sl_params tb = params_of(SL_TOKEN_BUCKET);
    tb.window_ms = SL_MAX_WINDOW_MS;
    assert_int_equal(sl_decide(s, &tb, "old", 3, T0 - ((int64_t)1 << 33), 2, &r), 0);
    char path[] = "/tmp/sluice-fit-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256];
    if (sl_store_save(s, path, err, sizeof err) != 0) fail_msg("save: %s", err);
    unsigned shards[2] = {1, 64};
    for (int v = 0; v < 2; v++) {
        sl_store *l = store_of(SL_LOCK_RECORD, shards[v], 0);
        uint64_t nk = 0, placed[3] = {0, 0, 0};
        if (sl_store_load(l, path, &nk, err, sizeof err) != 0) fail_msg("load: %s", err);
        sl_store_stats a1, a2;
        sl_store_stats_get(s, &a1);
        sl_store_stats_get(l, &a2);
        assert_int_equal(nk, a1.keys);
        assert_int_equal(a2.keys, a1.keys);
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            sl_params p = params_of((sl_algo)a);
            for (size_t n = 1; n <= 64; n += 3)
                for (unsigned i = 0; i < 5; i++) {
                    sl_result x, y;
                    key_of(k, i, n);
                    assert_int_equal(sl_peek(s, &p, k, n, T0 + 20, 2, &x), 0);
                    assert_int_equal(sl_peek(l, &p, k, n, T0 + 20, 2, &y), 0);
                    if (!same(&x, &y)) fail_msg("%s key of %zu bytes", sl_algo_name(p.algo), n);
                    placed[sl__store_placed(l, (unsigned)a, k, n)]++;
                }
        }
        sl_result x, y;
        assert_int_equal(sl_peek(s, &tb, "old", 3, T0, 1, &x), 0);
        assert_int_equal(sl_peek(l, &tb, "old", 3, T0, 1, &y), 0);
        assert_true(same(&x, &y));
        assert_int_equal(x.remaining, x.limit - 2 - 1);
        assert_true(placed[1] > 0 && placed[2] > 0); /* both kinds were loaded */
        sl_store_free(l);
    }
    unlink(path);
    sl_store_free(s);
}

/* Fitted records come to rest: sl_store_expire drops them (tombstones),
 * counts them, and once a shard is empty its fitted tables go (bytes back
 * to the handle tables alone); the keys answer as fresh ones. */
static void test_expire_fitted(void **state)
{
    (void)state;
    sl_store *s = store_of(SL_LOCK_RECORD, 2, 0);
    sl_params p = params_of(SL_FIXED_WINDOW);
    char k[16];
    sl_result r;
    sl_store_stats st0, st;
    sl_store_stats_get(s, &st0);
    for (unsigned i = 0; i < 3000; i++) {
        int n = snprintf(k, sizeof k, "e%06u", i);
        assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0, 7, &r), 0); /* at its limit */
        assert_int_equal(sl__store_placed(s, SL_FIXED_WINDOW, k, (size_t)n), 1);
    }
    assert_int_equal(sl_store_expire(s, T0 + 9999, 0), 0); /* none at rest yet */
    assert_int_equal(sl_store_expire(s, T0 + 10000, 1000), 1000);
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, 2000);
    assert_int_equal(sl_store_expire(s, T0 + 10000, 0), 2000);
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.expired, 3000);
    assert_int_equal(st.bytes, st0.bytes); /* the fitted tables went */
    int n = snprintf(k, sizeof k, "e%06u", 5);
    assert_int_equal(sl__store_placed(s, SL_FIXED_WINDOW, k, (size_t)n), 0);
    assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0 + 10001, 1, &r), 0);
    assert_int_equal(r.remaining, 6); /* a fresh key */
    sl_store_free(s);
}

/* A bounded store far past its bound: its keys live in fitted tables
 * (SL__FIT_BOUNDED, store.c) or in the slab, and the bound holds. */
static void test_bounded_store_slab(void **state)
{
    (void)state;
    const uint64_t bound = 256 * 1024;
    sl_store *s = store_of(SL_LOCK_RECORD, 1, bound);
    sl_params p = params_of(SL_TOKEN_BUCKET);
    char k[16];
    sl_result r;
    for (unsigned i = 0; i < 20000; i++) {
        int n = snprintf(k, sizeof k, "b%07u", i);
        assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0, 1, &r), 0);
    }
    int at = sl__store_placed(s, SL_TOKEN_BUCKET, k, 8);
    assert_true(at == 1 || at == 2);
    sl_store_stats ss;
    sl_store_stats_get(s, &ss);
    assert_true(ss.bytes <= bound);
    assert_true(ss.keys > bound / 40);
    sl_store_free(s);
}

/* Shard 0's fitted table of token-bucket keys of klen bytes. */
static sl__fit_info tb_table(sl_store *s, size_t klen) { return fit_info_of(s, SL_TOKEN_BUCKET, klen); }

/* The least a table's block can be: its slots and their tags. */
static uint64_t table_least(const sl__fit_info *fi) { return (uint64_t)fi->cap * (fi->rsize + 1); }

/* A small table is spread -- one slot in 2^spread holds a record, up to
 * 1 in 32, so records of different keys are seldom near each other -- as
 * sparse as a block of 64 KB allows: 32x at first, sparser never again as
 * it grows, then dense (the load of 0.94 counting one slot in 2^spread);
 * no key is lost on the way and every key answers from its own state. */
static void test_spread_small_tables(void **state)
{
    (void)state;
    sl_store *s = store_of(SL_LOCK_RECORD, 1, 0);
    sl_params p = params_of(SL_TOKEN_BUCKET);
    char k[16];
    sl_result r;
    unsigned spread_at = 0, dense_at = 0, last = 5;
    for (unsigned i = 0; i < 3000; i++) {
        int n = snprintf(k, sizeof k, "s%07u", i);
        assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0, 1, &r), 0);
        sl__fit_info fi = tb_table(s, 8);
        assert_int_equal(fi.live, i + 1);
        assert_true(fi.spread <= last); /* never sparser again */
        last = fi.spread;
        if (i == 0) assert_int_equal(fi.spread, 5);
        assert_true((uint64_t)fi.live * 100 <= (uint64_t)(fi.cap >> fi.spread) * 94);
        if (fi.spread) {
            assert_true((uint64_t)fi.cap * fi.rsize <= 64 * 1024);
            spread_at = i + 1;
        } else if (!dense_at) {
            dense_at = i + 1;
        }
    }
    assert_true(spread_at >= 900); /* 1024 slots 2x (of 28 B) fit a block of 64 KB */
    assert_true(dense_at > spread_at && dense_at < 3000);
    for (unsigned i = 0; i < 3000; i++) { /* a second decision on each: 7 - 2 left */
        int n = snprintf(k, sizeof k, "s%07u", i);
        assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0, 1, &r), 0);
        assert_int_equal(r.remaining, 5);
        assert_int_equal(sl__store_placed(s, SL_TOKEN_BUCKET, k, (size_t)n), 1);
    }
    sl_store_free(s);
}

/* In a bounded shard, spread tables hold 1/16 of the budget at most, and
 * filling the store past its bound keeps the bound. */
static void test_spread_bounded(void **state)
{
    (void)state;
    const uint64_t bound = 256 * 1024;
    sl_store *s = store_of(SL_LOCK_RECORD, 1, bound);
    sl_params p = params_of(SL_TOKEN_BUCKET);
    char k[64];
    sl_result r;
    static const size_t lens[] = {8, 12, 16, 20, 24, 28, 32, 36};
    const unsigned nlens = sizeof lens / sizeof lens[0];
    unsigned spread = 0;
    for (unsigned round = 0; round < 2; round++) {
        for (unsigned j = 0; j < nlens; j++) /* a few keys of each length */
            for (unsigned i = 0; i < 5; i++) {
                snprintf(k, sizeof k, "%0*u", (int)lens[j], round * 1000000u + j * 100u + i);
                assert_int_equal(sl_decide(s, &p, k, lens[j], T0, 1, &r), 0);
            }
        uint64_t least = 0;
        for (unsigned j = 0; j < nlens; j++) {
            sl__fit_info fi = tb_table(s, lens[j]);
            if (fi.spread) least += table_least(&fi), spread++;
        }
        assert_true(least * 16 <= bound);
        for (unsigned i = 0; i < 20000 && round == 0; i++) { /* past the bound */
            int n = snprintf(k, sizeof k, "b%07u", i);
            assert_int_equal(sl_decide(s, &p, k, (size_t)n, T0, 1, &r), 0);
        }
        sl_store_stats ss;
        sl_store_stats_get(s, &ss);
        assert_true(ss.bytes <= bound);
    }
    assert_true(spread > 0); /* the first tables were spread */
    sl__fit_info fi = tb_table(s, 8);
    assert_int_equal(fi.spread, 0); /* the big one is dense */
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_len_agrees),
        cmocka_unit_test(test_every_length_shard_lock),
        cmocka_unit_test(test_every_length_record_lock),
        cmocka_unit_test(test_rebuild_held_shard_lock),
        cmocka_unit_test(test_rebuild_held_record_lock),
        cmocka_unit_test(test_tomb_reuse_shard_lock),
        cmocka_unit_test(test_tomb_reuse_record_lock),
        cmocka_unit_test(test_walk_moves_shard_lock),
        cmocka_unit_test(test_walk_moves_record_lock),
        cmocka_unit_test(test_snapshot_reload),
        cmocka_unit_test(test_expire_fitted),
        cmocka_unit_test(test_bounded_store_slab),
        cmocka_unit_test(test_spread_small_tables),
        cmocka_unit_test(test_spread_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
