/*
 * test_store_fitbound_threads.c -- purges and shrinks in place under
 * lock-free readers (store.c, fit_purge): two threads decide on their own
 * keys of one shard the quick way (SL_LOCK_RECORD; support/fit_deciders.h)
 * while a third changes that shard's fitted table, in a bounded store on
 * the fitted path (sl__store_fit_off(s, -1)):
 *   - it adds and forgets keys of the same size, where live + tombstones
 *     may not pass 0.97 of the slots: the table is purged in place --
 *     detached, every record taken, a grace period, records moved within
 *     the block -- again and again under the readers;
 *   - at the bound, it forgets most keys of the table and adds keys of
 *     another size, which need the room: the table shrinks in place (the
 *     same steps, and the block's tail unmapped), stage after stage.
 * Every reply is the one a key alone would get (a fixed window that never
 * ends: remaining = L - decisions).  Run under ThreadSanitizer too (the
 * name has "thread").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "store.h"
#include "support/fit_deciders.h"

#define CHURN 3700   /* keys the third thread adds, then forgets, a round: with the
                        deciders 0.93 of the table (4096 slots) */
#define CHURN_ROUNDS 24

static _Atomic int churn_done;

/* The fitted table of the deciders' keys (shard 0), as store.h sees it. */
static sl__fit_info table_info(sl_store *s) { return fit_table_info(s, DECIDER_KLEN); }

static void *churn_loop(void *arg)
{
    sl_store *s = arg;
    sl_params p = decider_params();
    char k[16];
    sl_result r;
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        for (unsigned i = 0; i < CHURN; i++) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_decide(s, &p, k, DECIDER_KLEN, DECIDER_T0, 1, &r) != 0) abort();
        }
        for (unsigned i = 0; i < CHURN; i++) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_forget(s, SL_FIXED_WINDOW, k, DECIDER_KLEN) != 1) abort();
        }
    }
    atomic_store(&churn_done, 1);
    return NULL;
}

static void test_readers_while_purged(void **state)
{
    (void)state;
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1; /* everyone in one shard: one fitted table */
    o.locking = SL_LOCK_RECORD;
    /* Room for every key (nothing is evicted), but not for the table to
     * grow beside its block (~112 KB at 4096 slots): when a purge gives up
     * on a record a decider holds (a thread preempted while deciding), the
     * next insert purges again, or puts one key in the slab, instead of
     * growing the table out of the purges' reach.  With 1 MB the table
     * grew so in some runs (to ~7000 slots) and then needed fewer than 4
     * purges: 2 of 40 runs failed, 4 of 40 beside two CPU hogs. */
    o.max_bytes = 192u * 1024;
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    sl__store_fit_off(s, -1);
    decider d[2] = {{.s = s, .id = 0, .done = &churn_done}, {.s = s, .id = 1, .done = &churn_done}};
    pthread_t th[3];
    assert_int_equal(pthread_create(&th[2], NULL, churn_loop, s), 0);
    for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, decider_loop, &d[t]), 0);
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    assert_int_equal(atomic_load(&churn_done), 1);
    /* every reply exact; every decider key still in the store, at its
     * count: in the fitted table, or in the slab when a rebuild its insert
     * needed gave up on a record another thread held (by design) */
    assert_true(deciders_check(s, d, 2) > 0); /* the fitted table was in use */
    sl__fit_info fi = table_info(s);
    assert_true(fi.purges >= 4); /* purged in place, under the readers */
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.keys, 2 * DECIDER_KEYS);
    sl_store_free(s);
}

/* ---- a shrink in place alone ----------------------------------------- */

#define BOUND (256u * 1024) /* bytes: the 12-byte keys' table, mapped, holds most */
#define KEEP  16            /* the shrinker forgets all filler keys but every 16th,
                               one slice a stage: KEEP - 1 stages, a shrink each */
#define STAGE_WIDE 4000     /* 30-byte keys a stage may add before its shrink: a
                               catch-all (~200 are needed; 4000 pass the bound) */
#define SHRINK_TIMES 8      /* the scenario, each time on a new store: more shrinks
                               under the readers, more chances to catch one wrong */
#define TRIES 100000        /* refusals of one key before giving up (a hang catch-all) */

static _Atomic int shrink_done;

typedef struct shrinker {
    sl_store *s;
    decider *d;      /* the two deciders, to wait for */
    unsigned fill;   /* filler keys put before it starts */
    unsigned wide;   /* 30-byte keys it added */
    unsigned shrunk; /* stages whose table shrank, its first slot where it was */
    char what[160];  /* what went wrong, if anything ("": nothing) */
} shrinker;

/* Filler key i, DECIDER_KLEN bytes (in the deciders' table), or wide key i
 * (30 bytes: another table, or the slab). */
static void filler_key(char *k, unsigned i) { snprintf(k, 16, "f%011u", i); }
static void wide_key(char *k, unsigned i) { snprintf(k, 32, "w%029u", i); }

/* The third thread: once both deciders decide, KEEP - 1 stages, each
 * forgetting one slice of the filler keys (tombstones: no bytes back yet),
 * then adding 30-byte keys, which need room, until the deciders' table has
 * shrunk in place (fit_shrink_some, fit_free_room) to give it: under
 * SL_FULL_DENY nothing restricted is evicted instead, and a refusal
 * (SL_EFULL or SL_ENOMEM: a shrink gave up on a record a decider held) is
 * tried again.
 * Says in w->what what went wrong (main fails on it: no cmocka here). */
static void *shrink_loop(void *arg)
{
    shrinker *w = arg;
    sl_params p = decider_params();
    char k[32];
    sl_result r = {0};
    deciders_wait_started(w->d, 2);
    for (unsigned stage = 1; stage < KEEP && !w->what[0]; stage++) {
        for (unsigned i = stage; i < w->fill; i += KEEP) {
            filler_key(k, i);
            if (sl_forget(w->s, SL_FIXED_WINDOW, k, DECIDER_KLEN) != 1) {
                snprintf(w->what, sizeof w->what, "stage %u: %s not forgotten", stage, k);
                break;
            }
        }
        sl__fit_info a = table_info(w->s), b = a;
        for (unsigned n = 0; !w->what[0] && b.cap == a.cap; n++, w->wide++) {
            if (n == STAGE_WIDE) {
                snprintf(w->what, sizeof w->what, "stage %u: %u slots after %u keys", stage, b.cap,
                         n);
                break;
            }
            wide_key(k, w->wide);
            int rc, tries = 0;
            while ((rc = sl_decide(w->s, &p, k, 30, DECIDER_T0, 1, &r)) != 0 &&
                   (rc == SL_EFULL || rc == SL_ENOMEM) && ++tries < TRIES)
                sched_yield();
            if (rc != 0 || !r.allowed || r.remaining != DECIDER_LIMIT - 1)
                snprintf(w->what, sizeof w->what, "stage %u: %s rc %d (%d tries) remaining %lld",
                         stage, k, rc, tries, (long long)r.remaining);
            b = table_info(w->s);
        }
        if (!w->what[0] && b.cap < a.cap && b.slot0 == a.slot0) w->shrunk++;
    }
    atomic_store(&shrink_done, 1);
    return NULL;
}

/* A bounded store's table of 12-byte keys, at the bound, shrinks in place
 * (detached, every record taken, a grace period, records moved down, the
 * block's tail unmapped) KEEP - 1 times as its keys are forgotten slice by
 * slice and keys of another size need the room -- while two deciders
 * decide the quick way on their keys of that table, which stay: every
 * reply exact, every decider key still in the table (no rebuild moves one
 * to the slab: no 12-byte key is added meanwhile).  A reader that still
 * probed the table when its records moved or its tail went (no grace
 * period, no detach) is what ThreadSanitizer reports, or a wrong reply. */
static void readers_while_shrunk(unsigned rep)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1;
    o.locking = SL_LOCK_RECORD;
    o.max_bytes = BOUND;
    o.on_full = SL_FULL_DENY; /* a shrink that gives up never costs a decider key */
    o.fixed_seed = 1;
    memcpy(o.seed, "fitted-shrink16b", 16);
    o.seed[15] = (uint8_t)('a' + rep); /* another layout each time */
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    sl__store_fit_off(s, -1);
    atomic_store(&shrink_done, 0);
    decider d[2] = {{.s = s, .id = 0, .base = 1, .done = &shrink_done},
                    {.s = s, .id = 1, .base = 1, .done = &shrink_done}};
    sl_params p = decider_params();
    sl_result r;
    char k[32];
    for (unsigned t = 0; t < 2; t++) /* the deciders' keys first: one request each */
        for (unsigned i = 0; i < DECIDER_KEYS; i++) {
            decider_key(k, t, i);
            assert_int_equal(sl_decide(s, &p, k, DECIDER_KLEN, DECIDER_T0, 1, &r), 0);
        }
    shrinker w = {.s = s, .d = d};
    int rc;
    for (;; w.fill++) { /* then filler keys up to the bound: the table, then the slab */
        assert_true(w.fill < 100000);
        filler_key(k, w.fill);
        if ((rc = sl_decide(s, &p, k, DECIDER_KLEN, DECIDER_T0, 1, &r)) != 0) break;
    }
    assert_int_equal(rc, SL_EFULL);
    sl__fit_info a = table_info(s);
    assert_true(a.live > 4 * w.fill / 10); /* most in the table */
    pthread_t th[3];
    for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, decider_loop, &d[t]), 0);
    assert_int_equal(pthread_create(&th[2], NULL, shrink_loop, &w), 0);
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    assert_int_equal(atomic_load(&shrink_done), 1);
    if (w.what[0]) fail_msg("store %u, shrinker: %s", rep, w.what);
    /* every reply exact, every decider key in the table at its count */
    assert_int_equal(deciders_check(s, d, 2), 2 * DECIDER_KEYS);
    sl__fit_info b = table_info(s);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(w.shrunk, KEEP - 1); /* shrunk in place, each stage */
    assert_true(b.purges >= a.purges + KEEP - 1);
    assert_true(b.cap < a.cap / 4);
    assert_true(b.held < a.held); /* its tail given back */
    assert_int_equal(st.evictions, 0);
    assert_true(st.bytes <= BOUND);
    unsigned kept = 0, kept_fitted = 0;
    for (unsigned i = 0; i < w.fill; i += KEEP) { /* the filler keys kept, at their count */
        filler_key(k, i);
        assert_int_equal(sl_peek(s, &p, k, DECIDER_KLEN, DECIDER_T0, 1, &r), 0);
        assert_int_equal(r.remaining, DECIDER_LIMIT - 2);
        kept++;
        kept_fitted += sl__store_placed(s, SL_FIXED_WINDOW, k, DECIDER_KLEN) == 1;
    }
    assert_int_equal(b.live, 2 * DECIDER_KEYS + kept_fitted);
    for (unsigned j = 0; j < w.wide; j++) {
        wide_key(k, j);
        assert_int_equal(sl_peek(s, &p, k, 30, DECIDER_T0, 1, &r), 0);
        assert_int_equal(r.remaining, DECIDER_LIMIT - 2);
    }
    assert_int_equal(st.keys, 2 * DECIDER_KEYS + kept + w.wide);
    sl_store_free(s);
}

static void test_readers_while_shrunk(void **state)
{
    (void)state;
    for (unsigned rep = 0; rep < SHRINK_TIMES; rep++) readers_while_shrunk(rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_while_purged),
        cmocka_unit_test(test_readers_while_shrunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
