/*
 * test_store_wide_threads.c -- a shard's clock window moves (store.h, "The
 * clock": E moves, a walk of the shard making the records it leaves
 * behind wide, then rewriting every wide record's mark for the new E)
 * while other threads decide on the shard's keys, narrow ones the quick
 * way and wide ones the sure way (a wide record's word decodes to the
 * window's top, above Q: the quick way reads it, lets it go).  Each worker
 * also has sleepers: keys decided at the start and again only at the end,
 * wide through every walk, their marks rewritten each time.  Every reply
 * of every thread must equal the reference model's (tests/model.c, one
 * per thread: its keys are its own).  Runs under ThreadSanitizer too (the
 * name holds "thread").
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "model.h"
#include "sluice.h"
#include "store.h"
#include "support/rng.h"

#define NWORKERS 2
#define NKEYS    12  /* a worker's own keys */
#define SLEEPERS 3   /* ... and its sleepers, keys NKEYS .. NKEYS + SLEEPERS - 1 */
#define STEPS    720 /* decisions a worker makes: 60 a key (the model is O(history)) */
#define JUMPS    120
#define T0       1764000000000LL
#define STRIDE   (((int64_t)1 << 32) + 12345) /* each jump: past E + 3 * 2^30 */
/* every other jump 2^30 ms on: the time is only just past E + 3 * 2^30
 * (E is the last jump - 2^31), E moves by ~2^30, and a new mark read
 * against the old E would decode below the old Q (what a quick way
 * running between a walk's rewrite and its new E would take, were Q not
 * INT64_MIN then: store.c, clock_walk) */
#define STRIDE_SHORT (((int64_t)1 << 30) + 12345)

static _Atomic int64_t clock_base = T0; /* the time the jumper reached */
static _Atomic int steps_done, workers_done; /* the jumper keeps pace with them */

typedef struct worker {
    sl_store *s;
    const sl_params *p;
    int id;
    int64_t now;
    int mismatches, errors;
    char first[256];
} worker;

static int same(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_after_ms == b->reset_after_ms &&
           a->delay_ms == b->delay_ms;
}

static void key_of(char *key, size_t n, int id, int k) { snprintf(key, n, "w%dk%d", id, k); }

/* One decision of worker w on its key k at its time, checked. */
static void step(worker *w, model *m, int k, int64_t cost)
{
    char key[32];
    key_of(key, sizeof key, w->id, k);
    sl_result got, want;
    if (sl_decide(w->s, w->p, key, strlen(key), w->now, cost, &got) != 0) {
        w->errors++;
        return;
    }
    model_decide(m, key, strlen(key), w->now, cost, &want);
    if (!same(&got, &want) && w->mismatches++ == 0)
        snprintf(w->first, sizeof w->first,
                 "%s at %lld: allowed %lld remaining %lld reset %lld, model %lld %lld %lld", key,
                 (long long)w->now, (long long)got.allowed, (long long)got.remaining,
                 (long long)got.reset_after_ms, (long long)want.allowed, (long long)want.remaining,
                 (long long)want.reset_after_ms);
}

static void *work(void *arg)
{
    worker *w = arg;
    model *m = model_new(w->p);
    rng r = {0x77770000u + (uint64_t)w->id};
    for (int k = NKEYS; k < NKEYS + SLEEPERS; k++) step(w, m, k, 1 + (k & 1));
    for (int i = 0; i < STEPS; i++) {
        /* its time follows the jumper's (its keys' clocks sit where E is
         * about to move past them), never going back */
        int64_t b = __atomic_load_n(&clock_base, __ATOMIC_ACQUIRE);
        w->now = (b > w->now ? b : w->now) + rnd_in(&r, 0, 40);
        step(w, m, (int)rnd_in(&r, 0, NKEYS - 1), rnd_in(&r, 0, 2));
        __atomic_fetch_add(&steps_done, 1, __ATOMIC_RELAXED);
    }
    /* the last word, after every jump: each key once more */
    w->now += (int64_t)1 << 33;
    for (int k = 0; k < NKEYS + SLEEPERS; k++) step(w, m, k, 1);
    if (model_error(m) && w->mismatches++ == 0)
        snprintf(w->first, sizeof w->first, "model: %s", model_error(m));
    model_free(m);
    __atomic_fetch_add(&workers_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

typedef struct jumper {
    sl_store *s;
    const sl_params *p;
    int errors;
} jumper;

static void *jump(void *arg)
{
    jumper *j = arg;
    for (int i = 0; i < JUMPS; i++) {
        /* jump i once the workers made i / JUMPS of their steps (or are
         * done): the walks fall among their decisions */
        while (__atomic_load_n(&steps_done, __ATOMIC_RELAXED) < i * (NWORKERS * STEPS / JUMPS) &&
               __atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < NWORKERS)
            sched_yield();
        int64_t b = __atomic_load_n(&clock_base, __ATOMIC_RELAXED) + (i & 1 ? STRIDE_SHORT : STRIDE);
        __atomic_store_n(&clock_base, b, __ATOMIC_RELEASE);
        sl_result r;
        if (sl_decide(j->s, j->p, "jump", 4, b, 1, &r) != 0) j->errors++;
    }
    return NULL;
}

static uint64_t walks_moved(sl_store *s)
{
    sl__shard *sh = sl__store_shard_at(s, 0);
    uint64_t moved = 0;
    sl__shard_lock(sh);
    moved = sl__shard_clock_moves(sh);
    sl__shard_unlock(sh);
    return moved;
}

static void run(unsigned locking, sl_algo algo)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1;
    o.locking = locking;
    int err = 0;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    sl_params p = SL_PARAMS_INIT;
    p.algo = algo;
    p.limit = 4;
    p.window_ms = SL_MAX_WINDOW_MS; /* restricted across every jump: made wide, not dropped */
    __atomic_store_n(&clock_base, T0, __ATOMIC_RELAXED);
    __atomic_store_n(&steps_done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&workers_done, 0, __ATOMIC_RELAXED);
    worker w[NWORKERS];
    jumper j = {s, &p, 0};
    pthread_t tid[NWORKERS + 1];
    for (int i = 0; i < NWORKERS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = s;
        w[i].p = &p;
        w[i].id = i;
        w[i].now = T0;
        assert_int_equal(pthread_create(&tid[i], NULL, work, &w[i]), 0);
    }
    assert_int_equal(pthread_create(&tid[NWORKERS], NULL, jump, &j), 0);
    for (int i = 0; i <= NWORKERS; i++) assert_int_equal(pthread_join(tid[i], NULL), 0);
    for (int i = 0; i < NWORKERS; i++) {
        if (w[i].mismatches || w[i].errors)
            fail_msg("%s, worker %d: %d mismatches, %d errors; first: %s", sl_algo_name(algo), i,
                     w[i].mismatches, w[i].errors, w[i].first);
    }
    assert_int_equal(j.errors, 0);
    /* alone now: the next walk of the shard cannot be kept from moving E
     * (no other holder); walks are skipped for a while after each one */
    uint64_t before = walks_moved(s);
    int64_t b = __atomic_load_n(&clock_base, __ATOMIC_RELAXED);
    for (int i = 0; i < 2 * (NWORKERS * (NKEYS + SLEEPERS) + 1) + 2 && walks_moved(s) == before;
         i++) {
        sl_result r;
        b += STRIDE;
        assert_int_equal(sl_decide(s, &p, "jump", 4, b, 1, &r), 0);
    }
    assert_true(walks_moved(s) > before);
    sl_store_free(s);
}

static void test_token_bucket_record_locks(void **state)
{
    (void)state;
    run(SL_LOCK_RECORD, SL_TOKEN_BUCKET);
}

static void test_fixed_window_record_locks(void **state)
{
    (void)state;
    run(SL_LOCK_RECORD, SL_FIXED_WINDOW);
}

static void test_gcra_shard_locks(void **state)
{
    (void)state;
    run(SL_LOCK_SHARD, SL_GCRA);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_bucket_record_locks),
        cmocka_unit_test(test_fixed_window_record_locks),
        cmocka_unit_test(test_gcra_shard_locks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
