/*
 * fit_deciders.h -- the deciders of the fitted-table thread tests
 * (test_store_fit_threads, test_store_fitbound_threads): a thread that
 * decides on its own keys of one shard, the quick way (SL_LOCK_RECORD),
 * round after round, while the test's own scenario changes that shard's
 * fitted table under it, and checks every reply against the one a key
 * alone would get: a fixed window that never ends, so a key decided n
 * times before has LIMIT - n - 1 left after one more request, exactly.
 * Header only (static inline functions, as support/rng.h); include it after
 * <cmocka.h>, "sluice.h" and "store.h".
 */
#ifndef SL_TEST_FIT_DECIDERS_H
#define SL_TEST_FIT_DECIDERS_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "fit_info.h"

/* Rounds of a decider at the least: fewer under a sanitizer (slower). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DECIDER_ROUNDS 60
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define DECIDER_ROUNDS 60
#endif
#endif
#ifndef DECIDER_ROUNDS
#define DECIDER_ROUNDS 300
#endif

#define DECIDER_T0    1764000000000LL /* ms: round r decides at DECIDER_T0 + r */
#define DECIDER_KEYS  48              /* keys of each decider */
#define DECIDER_KLEN  12              /* bytes of a decider's key (and the tests' other keys) */
#define DECIDER_LIMIT 1000000

typedef struct decider {
    sl_store *s;
    unsigned id;           /* its keys: decider_key(id, i), i < DECIDER_KEYS */
    int64_t base;          /* decisions on each key before the loop (0: keys it adds) */
    const _Atomic int *done; /* set by the scenario's thread when it is over */
    _Atomic int started;   /* set (relaxed: no order TSan would see) after round 0 */
    unsigned bad;          /* wrong replies */
    int rounds;            /* rounds done: until *done, at least DECIDER_ROUNDS */
    char what[160];        /* the first wrong reply */
} decider;

/* Fitted table (fixed window, keys of klen bytes) of shard 0, as store.h
 * sees it under the shard lock. */
static inline sl__fit_info fit_table_info(sl_store *s, size_t klen)
{
    return fit_info_of(s, SL_FIXED_WINDOW, klen);
}

/* The one limit of every key of the tests: DECIDER_LIMIT in a window that
 * never ends. */
static inline sl_params decider_params(void)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = DECIDER_LIMIT;
    p.window_ms = SL_MAX_WINDOW_MS;
    return p;
}

/* Key i of decider id in k (16 bytes): DECIDER_KLEN bytes, no NUL. */
static inline void decider_key(char *k, unsigned id, unsigned i)
{
    snprintf(k, 16, "d%u:%09u", id, i);
}

/* The thread (pthread_create(..., decider_loop, d)): each round decides
 * once on each key of d at DECIDER_T0 + round; a reply that is not
 * allowed, or not LIMIT - base - round - 1 left, counts in d->bad (the
 * first one said in d->what).  Runs DECIDER_ROUNDS rounds, and on until
 * *d->done (at most 100 times as many). */
static inline void *decider_loop(void *arg)
{
    decider *d = arg;
    sl_params p = decider_params();
    char k[16];
    int round;
    for (round = 0; round < 100 * DECIDER_ROUNDS && (round < DECIDER_ROUNDS || !atomic_load(d->done));
         round++) {
        for (unsigned i = 0; i < DECIDER_KEYS; i++) {
            decider_key(k, d->id, i);
            sl_result r;
            int rc = sl_decide(d->s, &p, k, DECIDER_KLEN, DECIDER_T0 + round, 1, &r);
            if (rc != 0 || !r.allowed || r.remaining != DECIDER_LIMIT - 1 - d->base - round) {
                if (!d->bad++)
                    snprintf(d->what, sizeof d->what, "%s round %d: rc %d allowed %d remaining %lld",
                             k, round, rc, (int)r.allowed, (long long)r.remaining);
            }
        }
        if (!round) atomic_store_explicit(&d->started, 1, memory_order_relaxed);
    }
    d->rounds = round;
    return NULL;
}

/* Waits until each of the n deciders of d has done its round 0 (they are
 * running): the scenario then changes the table under them. */
static inline void deciders_wait_started(decider *d, unsigned n)
{
    for (unsigned t = 0; t < n; t++)
        while (!atomic_load_explicit(&d[t].started, memory_order_relaxed)) sched_yield();
}

/* After the n deciders of d are joined: fails on a wrong reply of any;
 * each key is still in s with its count (base + rounds decisions), in the
 * fitted table or in the slab (sl__store_placed 1 or 2: a rebuild gives up
 * on a record another thread holds, by design).  Returns how many are in
 * the fitted table. */
static inline unsigned deciders_check(sl_store *s, const decider *d, unsigned n)
{
    for (unsigned t = 0; t < n; t++)
        if (d[t].bad) fail_msg("decider %u: %u wrong replies, first %s", t, d[t].bad, d[t].what);
    char k[16];
    unsigned fitted = 0;
    sl_params p = decider_params();
    for (unsigned t = 0; t < n; t++)
        for (unsigned i = 0; i < DECIDER_KEYS; i++) {
            decider_key(k, d[t].id, i);
            int at = sl__store_placed(s, SL_FIXED_WINDOW, k, DECIDER_KLEN);
            assert_true(at == 1 || at == 2);
            fitted += at == 1;
            sl_result r;
            assert_int_equal(sl_peek(s, &p, k, DECIDER_KLEN, DECIDER_T0 + d[t].rounds, 1, &r), 0);
            assert_int_equal(r.remaining, DECIDER_LIMIT - d[t].base - d[t].rounds - 1);
        }
    return fitted;
}

#endif
