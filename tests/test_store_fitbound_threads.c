/*
 * test_store_fitbound_threads.c -- purges in place under lock-free readers
 * (store.c, fit_purge): two threads decide on their own keys of one shard
 * the quick way (SL_LOCK_RECORD), while a third adds and forgets keys of
 * the same size in that shard, a bounded one on the fitted path
 * (sl__store_fit_off(s, -1)), where live + tombstones may not pass 0.97 of
 * the slots: the table is purged in place -- detached, every record taken,
 * a grace period, records moved within the block -- again and again under
 * the readers.  Every reply is the one a key alone would get (a fixed
 * window that never ends: remaining = L - decisions).  Run under
 * ThreadSanitizer too (the name has "thread").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "store.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ROUNDS 60
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ROUNDS 60
#endif
#endif
#ifndef ROUNDS
#define ROUNDS 300
#endif

#define T0    1764000000000LL
#define KEYS  48     /* per decider */
#define LIMIT 1000000
#define CHURN 3700   /* keys the third thread adds, then forgets, a round: with the
                        deciders 0.93 of the table (4096 slots) */
#define CHURN_ROUNDS 24

typedef struct decider {
    sl_store *s;
    unsigned id;
    unsigned bad;
    int rounds; /* done: until the churn is over, at least ROUNDS */
    char what[160];
} decider;

static sl_params params(void)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = LIMIT;
    p.window_ms = SL_MAX_WINDOW_MS;
    return p;
}

static _Atomic int churn_done;

static void *decide_loop(void *arg)
{
    decider *d = arg;
    sl_params p = params();
    char k[16];
    int round;
    for (round = 0; round < 100 * ROUNDS && (round < ROUNDS || !atomic_load(&churn_done)); round++)
        for (unsigned i = 0; i < KEYS; i++) {
            snprintf(k, sizeof k, "d%u:%09u", d->id, i); /* 12 bytes, as the churn's */
            sl_result r;
            int rc = sl_decide(d->s, &p, k, 12, T0 + round, 1, &r);
            if (rc != 0 || !r.allowed || r.remaining != LIMIT - 1 - round) {
                if (!d->bad++)
                    snprintf(d->what, sizeof d->what, "%s round %d: rc %d allowed %d remaining %lld",
                             k, round, rc, (int)r.allowed, (long long)r.remaining);
            }
        }
    d->rounds = round;
    return NULL;
}

static void *churn_loop(void *arg)
{
    sl_store *s = arg;
    sl_params p = params();
    char k[16];
    sl_result r;
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        for (unsigned i = 0; i < CHURN; i++) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_decide(s, &p, k, 12, T0, 1, &r) != 0) abort();
        }
        for (unsigned i = 0; i < CHURN; i++) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_forget(s, SL_FIXED_WINDOW, k, 12) != 1) abort();
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
    o.max_bytes = 1u << 20; /* room for every key: nothing is evicted */
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    sl__store_fit_off(s, -1);
    decider d[2] = {{s, 0, 0, 0, ""}, {s, 1, 0, 0, ""}};
    pthread_t th[3];
    assert_int_equal(pthread_create(&th[2], NULL, churn_loop, s), 0);
    for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, decide_loop, &d[t]), 0);
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        if (d[t].bad) fail_msg("decider %d: %u wrong replies, first %s", t, d[t].bad, d[t].what);
    assert_int_equal(atomic_load(&churn_done), 1);
    /* every decider key is still in the store, at its count: in the
     * fitted table, or in the slab when a rebuild its insert needed gave
     * up on a record another thread held (by design) */
    char k[16];
    unsigned fitted = 0;
    for (unsigned t = 0; t < 2; t++)
        for (unsigned i = 0; i < KEYS; i++) {
            snprintf(k, sizeof k, "d%u:%09u", t, i);
            int at = sl__store_placed(s, SL_FIXED_WINDOW, k, 12);
            assert_true(at == 1 || at == 2);
            fitted += at == 1;
            sl_result r;
            sl_params p = params();
            assert_int_equal(sl_peek(s, &p, k, 12, T0 + d[t].rounds, 1, &r), 0);
            assert_int_equal(r.remaining, LIMIT - d[t].rounds - 1);
        }
    assert_true(fitted > 0); /* the fitted table was in use */
    sl__fit_info fi;
    sl__shard *sh = sl__store_shard_at(s, 0);
    sl__shard_lock(sh);
    sl__shard_fit_info(sh, SL_FIXED_WINDOW, 12, &fi);
    sl__shard_unlock(sh);
    assert_true(fi.purges >= 4); /* purged in place, under the readers */
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.keys, 2 * KEYS);
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_while_purged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
