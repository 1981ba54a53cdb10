/*
 * test_store_wide.c -- the 8-byte record header's clock (store.h, "The
 * clock"; docs/store.md): a record keeps the low 32 bits of its clock, its
 * shard a window's low end E, and clocks outside the window are kept wide.
 *
 *   - one shard whose keys' times jump by 2^40 ms back and forth (and sit
 *     near a time whose low 32 bits are 0xffffffff): every reply equals
 *     the reference model's (tests/model.c: the 64-bit semantics every
 *     build before this one had), wide records are made and E moves, with
 *     either kind of lock;
 *   - the one time a window cannot hold narrow, its top E + 2^32 - 1 (the
 *     time a wide record's mark decodes to): a key decided there is wide,
 *     one ms later (E moved) narrow again, and a wide record's mark is
 *     rewritten when E moves;
 *   - a snapshot of a store holding wide records loads into stores of one
 *     and of 64 shards with every key answering as before.
 *
 * E moving while other threads decide: test_store_wide_threads.c (TSan).
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

#include "model.h"
#include "sluice.h"
#include "store.h"
#include "support/rng.h"

#define T0        1764000000000LL    /* 2025-11-24, a real clock's time */
#define JUMP      ((int64_t)1 << 40) /* ~34.8 years */
#define NGROUPS   5
#define PER_GROUP 3

/* Group g's keys live around base[g]: now, 2^40 ms either side, 2^33 ms
 * on (~99 days: a 10-year window still holds them when E passes), and
 * just below a time whose low 32 bits are 0xffffffff. */
static const int64_t base[NGROUPS] = {
    T0, T0 + JUMP, T0 - JUMP, T0 + ((int64_t)1 << 33),
    (int64_t)(((uint64_t)(T0 + ((int64_t)1 << 34)) | 0xffffffffULL) - 40)};

static sl_store *one_shard(unsigned locking)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1;
    o.locking = locking;
    int err = 0;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    return s;
}

typedef struct census {
    const sl__shard *sh;
    uint64_t records, wide;
    const char *watch; /* a one-byte key whose record's clock and width are noted */
    int64_t watch_clock;
    int watch_wide;
} census;

static int count_wide(const uint8_t *r, void *ctx)
{
    census *c = ctx;
    c->records++;
    c->wide += (uint64_t)sl__rec_wide(c->sh, r);
    int64_t clock = sl__rec_clock(c->sh, r);
    if (c->watch && sl__rec_klen(r) == 1 && sl__rec_key(r)[0] == (uint8_t)c->watch[0]) {
        c->watch_clock = clock;
        c->watch_wide = sl__rec_wide(c->sh, r);
    }
    return 0;
}

/* Records and wide records in every shard of s; *moved: walks that moved
 * an E. */
static census take_census_of(sl_store *s, uint64_t *moved, const char *watch)
{
    census c = {NULL, 0, 0, watch, INT64_MIN, -1};
    *moved = 0;
    for (unsigned i = 0; i < sl__store_nshards(s); i++) {
        sl__shard *sh = sl__store_shard_at(s, i);
        uint64_t m = 0;
        sl__shard_lock(sh);
        c.sh = sh;
        sl__shard_foreach(sh, count_wide, &c);
        m = sl__shard_clock_moves(sh);
        sl__shard_unlock(sh);
        *moved += m;
    }
    return c;
}

static census take_census(sl_store *s, uint64_t *moved) { return take_census_of(s, moved, NULL); }

/* E of s's shard 0. */
static int64_t epoch_of(sl_store *s)
{
    sl__shard *sh = sl__store_shard_at(s, 0);
    sl__shard_lock(sh);
    int64_t e = sl__shard_epoch(sh);
    sl__shard_unlock(sh);
    return e;
}

static void same(const char *what, const sl_params *p, const char *key, int64_t t,
                 const sl_result *got, const sl_result *want)
{
    if (got->allowed != want->allowed || got->limit != want->limit ||
        got->remaining != want->remaining || got->retry_after_ms != want->retry_after_ms ||
        got->reset_after_ms != want->reset_after_ms || got->delay_ms != want->delay_ms)
        fail_msg("%s %s window %lld key %s at %lld: got allowed %lld limit %lld remaining %lld "
                 "retry %lld reset %lld delay %lld, the model says %lld %lld %lld %lld %lld %lld",
                 what, sl_algo_name(p->algo), (long long)p->window_ms, key, (long long)t,
                 (long long)got->allowed, (long long)got->limit, (long long)got->remaining,
                 (long long)got->retry_after_ms, (long long)got->reset_after_ms,
                 (long long)got->delay_ms, (long long)want->allowed, (long long)want->limit,
                 (long long)want->remaining, (long long)want->retry_after_ms,
                 (long long)want->reset_after_ms, (long long)want->delay_ms);
}

/* Plays `steps` requests of p over the groups' keys on s and on the model:
 * each step a random group (so the shard's time jumps by 2^40 and back;
 * the first five visit the groups in time order, so that E moves),
 * one of its keys, that group's time moved on 0..700 ms (each key's times
 * never go back), a cost of 0..2, every fifth a peek.  Every reply must
 * equal the model's. */
static void play(sl_store *s, const sl_params *p, uint64_t seed, int steps)
{
    model *m = model_new(p);
    rng r = {seed};
    int64_t now[NGROUPS];
    memcpy(now, base, sizeof now);
    static const int rising[NGROUPS] = {2, 0, 3, 4, 1}; /* first each group once, in time order */
    for (int k = 0; k < steps; k++) {
        int g = k < NGROUPS ? rising[k] : (int)rnd_in(&r, 0, NGROUPS - 1);
        char key[32];
        snprintf(key, sizeof key, "g%dk%d", g, (int)rnd_in(&r, 0, PER_GROUP - 1));
        now[g] += rnd_in(&r, 0, 700);
        int64_t cost = rnd_in(&r, 0, 2);
        sl_result got, want;
        if (chance(&r, 20)) {
            assert_int_equal(sl_peek(s, p, key, strlen(key), now[g], cost, &got), 0);
            model_peek(m, key, strlen(key), now[g], cost, &want);
            same("peek", p, key, now[g], &got, &want);
        } else {
            assert_int_equal(sl_decide(s, p, key, strlen(key), now[g], cost, &got), 0);
            model_decide(m, key, strlen(key), now[g], cost, &want);
            same("decide", p, key, now[g], &got, &want);
        }
    }
    assert_null(model_error(m));
    model_free(m);
}

static void jumps_match_model(unsigned locking)
{
    static const int64_t windows[] = {1000, 86400000, SL_MAX_WINDOW_MS};
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++) {
            sl_store *s = one_shard(locking);
            sl_params p = SL_PARAMS_INIT;
            p.algo = (sl_algo)a;
            p.limit = 3;
            p.window_ms = windows[w];
            if (p.algo == SL_SLIDING_BUCKETS) p.precision = 10;
            play(s, &p, 0x5eed0000u + (uint64_t)a * 16 + w, 400);
            uint64_t moved = 0;
            census c = take_census(s, &moved);
            /* keys 2^40 ms behind the newest are kept, and wide */
            assert_int_equal(c.records, NGROUPS * PER_GROUP);
            assert_true(c.wide >= PER_GROUP);
            assert_true(moved >= 1);
            sl_store_free(s);
        }
    }
}

static void test_jumps_record_locks(void **state)
{
    (void)state;
    jumps_match_model(SL_LOCK_RECORD);
}

static void test_jumps_shard_locks(void **state)
{
    (void)state;
    jumps_match_model(SL_LOCK_SHARD);
}

/* One decision of p on one-byte key k at t, on s and on the model. */
static void decide_as_model(sl_store *s, model *m, const sl_params *p, const char *k, int64_t t)
{
    sl_result got, want;
    assert_int_equal(sl_decide(s, p, k, 1, t, 1, &got), 0);
    model_decide(m, k, 1, t, 1, &want);
    same("decide", p, k, t, &got, &want);
}

/* The window's top, E + 2^32 - 1, is the one time a window cannot hold
 * narrow (a wide record's mark decodes to it).  Keys a and b at T0 (E =
 * T0 - 2^31); a at T0 + 3 * 2^30 moves E to T0 + 2^30 (b, left behind,
 * made wide; the next walk is skipped: walk_wait, half the records); c
 * at E + 5, narrow; c at the top: the walk skipped, c made wide, its
 * clock the top exactly; c one ms later: the walk moves E to that time -
 * 2^31, rewrites b's mark (b still wide, its clock T0) and writes c
 * narrow again.  Every reply is the model's. */
static void window_top(unsigned locking)
{
    sl_store *s = one_shard(locking);
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 2;
    p.window_ms = 1000;
    model *m = model_new(&p);
    uint64_t moved;
    decide_as_model(s, m, &p, "a", T0);
    decide_as_model(s, m, &p, "b", T0);
    assert_true(epoch_of(s) == T0 - ((int64_t)1 << 31));
    decide_as_model(s, m, &p, "a", T0 + ((int64_t)3 << 30));
    int64_t e = epoch_of(s);
    assert_true(e == T0 + ((int64_t)1 << 30));
    census c = take_census_of(s, &moved, "b");
    assert_int_equal(c.wide, 1);
    assert_int_equal(c.watch_wide, 1);
    assert_true(c.watch_clock == T0);
    decide_as_model(s, m, &p, "c", e + 5);
    c = take_census_of(s, &moved, "c");
    assert_int_equal(c.watch_wide, 0);
    assert_true(c.watch_clock == e + 5);
    int64_t top = e + (int64_t)0xffffffff;
    decide_as_model(s, m, &p, "c", top);
    assert_true(epoch_of(s) == e);
    c = take_census_of(s, &moved, "c");
    assert_int_equal(c.records, 3);
    assert_int_equal(c.wide, 2);
    assert_int_equal(c.watch_wide, 1);
    assert_true(c.watch_clock == top);
    assert_true(sl_store_latest_time(s) == top);
    decide_as_model(s, m, &p, "c", top + 1);
    assert_true(epoch_of(s) == top + 1 - ((int64_t)1 << 31));
    c = take_census_of(s, &moved, "c");
    assert_int_equal(c.wide, 1);
    assert_int_equal(c.watch_wide, 0);
    assert_true(c.watch_clock == top + 1);
    c = take_census_of(s, &moved, "b");
    assert_int_equal(c.watch_wide, 1);
    assert_true(c.watch_clock == T0);
    decide_as_model(s, m, &p, "b", T0 + 999); /* far below E: b stays wide, read right */
    c = take_census_of(s, &moved, "b");
    assert_int_equal(c.watch_wide, 1);
    assert_true(c.watch_clock == T0 + 999);
    decide_as_model(s, m, &p, "a", top + 2);
    assert_null(model_error(m));
    model_free(m);
    sl_store_free(s);
}

static void test_the_window_top_record_locks(void **state)
{
    (void)state;
    window_top(SL_LOCK_RECORD);
}

static void test_the_window_top_shard_locks(void **state)
{
    (void)state;
    window_top(SL_LOCK_SHARD);
}

/* A snapshot of a store with wide records loads, into one shard and into
 * 64, with every key answering as in the store it came from. */
static void test_snapshot_of_wide_records(void **state)
{
    (void)state;
    sl_store *s = one_shard(SL_LOCK_RECORD);
    sl_params ps[3] = {SL_PARAMS_INIT, SL_PARAMS_INIT, SL_PARAMS_INIT};
    ps[0].algo = SL_TOKEN_BUCKET;
    ps[1].algo = SL_FIXED_WINDOW;
    ps[2].algo = SL_SLIDING_LOG;
    for (int i = 0; i < 3; i++) {
        ps[i].limit = 5;
        ps[i].window_ms = SL_MAX_WINDOW_MS;
        play(s, &ps[i], 0xabc0u + (uint64_t)i, 300);
    }
    uint64_t moved = 0;
    census c = take_census(s, &moved);
    assert_true(c.wide >= 3 * PER_GROUP);
    char path[] = "/tmp/sluice-wide-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256] = "";
    if (sl_store_save(s, path, err, sizeof err) != 0) fail_msg("save: %s", err);
    for (unsigned shards = 1; shards <= 64; shards *= 64) {
        sl_store_opts o;
        memset(&o, 0, sizeof o);
        o.shards = shards;
        int e = 0;
        sl_store *l = sl_store_new(&o, &e);
        assert_non_null(l);
        uint64_t n = 0;
        if (sl_store_load(l, path, &n, err, sizeof err) != 0) fail_msg("load: %s", err);
        assert_int_equal(n, c.records);
        assert_true(sl_store_latest_time(l) == sl_store_latest_time(s));
        if (shards == 1) {
            census lc = take_census(l, &moved);
            assert_int_equal(lc.records, c.records);
            assert_true(lc.wide >= 1);
        }
        for (int i = 0; i < 3; i++)
            for (int g = 0; g < NGROUPS; g++)
                for (int k = 0; k < PER_GROUP; k++) {
                    char key[32];
                    snprintf(key, sizeof key, "g%dk%d", g, k);
                    for (int64_t later = 0; later <= 2 * SL_MAX_WINDOW_MS;
                         later += SL_MAX_WINDOW_MS / 3) {
                        sl_result a, b;
                        int64_t t = base[g] + later;
                        assert_int_equal(sl_peek(s, &ps[i], key, strlen(key), t, 1, &a), 0);
                        assert_int_equal(sl_peek(l, &ps[i], key, strlen(key), t, 1, &b), 0);
                        same("loaded", &ps[i], key, t, &b, &a);
                    }
                }
        sl_store_free(l);
    }
    unlink(path);
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jumps_record_locks),
        cmocka_unit_test(test_jumps_shard_locks),
        cmocka_unit_test(test_the_window_top_record_locks),
        cmocka_unit_test(test_the_window_top_shard_locks),
        cmocka_unit_test(test_snapshot_of_wide_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
