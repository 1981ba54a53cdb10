/*
 * test_threads.c -- many threads, one store: totals must be exact.
 *
 * Threads hammer the same keys at the same (caller-supplied) times.  Whatever
 * the interleaving, a fixed window of L must allow exactly L per key per
 * window, a token bucket exactly its burst plus its refill, and a sliding log
 * exactly L -- never one more; sl_decide_all and sl_decide_many keep their
 * promises under the same load; a bounded store flooded from several
 * threads never frees a key at its limit.  Runs under ThreadSanitizer too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "sluice.h"

#define NTHREADS 4
#define NKEYS 16
#define NWINDOWS 20
#define PER_WINDOW 400 /* attempts per thread per key per window */

static pthread_barrier_t window_done; /* all threads finish window w before w+1 */

typedef struct job {
    sl_store *store;
    const sl_params *params;
    int64_t allowed[NKEYS][NWINDOWS]; /* this thread's count */
    int errors;
} job;

static void *hammer(void *arg)
{
    job *j = arg;
    char key[32];
    for (int w = 0; w < NWINDOWS; w++) {
        int64_t t0 = (int64_t)w * j->params->window_ms;
        for (int i = 0; i < PER_WINDOW; i++) {
            for (int k = 0; k < NKEYS; k++) {
                int n = snprintf(key, sizeof(key), "user:%d", k);
                sl_result r;
                /* times spread over the window, same for every thread */
                int64_t t = t0 + (int64_t)i * (j->params->window_ms - 1) / PER_WINDOW;
                if (sl_decide(j->store, j->params, key, (size_t)n, t, 1, &r) != 0)
                    j->errors++;
                else
                    j->allowed[k][w] += r.allowed;
            }
        }
        pthread_barrier_wait(&window_done);
    }
    return NULL;
}

static void run(const sl_params *p, int64_t expect_per_window, int64_t expect_first_window)
{
    sl_store_opts o = {0};
    o.max_bytes = 0;
    sl_store *s = sl_store_new(&o, NULL);
    assert_non_null(s);
    static job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    pthread_barrier_init(&window_done, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (job){.store = s, .params = p};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &jobs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&window_done);
    for (int k = 0; k < NKEYS; k++) {
        for (int w = 0; w < NWINDOWS; w++) {
            int64_t total = 0;
            for (int i = 0; i < NTHREADS; i++) total += jobs[i].allowed[k][w];
            int64_t want = w == 0 ? expect_first_window : expect_per_window;
            if (total != want)
                fail_msg("%s key %d window %d: %lld allowed, want exactly %lld",
                         sl_algo_name(p->algo), k, w, (long long)total, (long long)want);
        }
    }
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(jobs[i].errors, 0);
    sl_store_free(s);
}

static void fixed_window_exact(void **state)
{
    (void)state;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 37;
    p.window_ms = 1000;
    run(&p, 37, 37);
}

static void sliding_log_exact(void **state)
{
    (void)state;
    /* All attempts of window w fall in [w*W, (w+1)*W - 1]: requests of the
     * previous window expire exactly as the next window begins. */
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_SLIDING_LOG;
    p.limit = 25;
    p.window_ms = 1000;
    run(&p, 25, 25);
}

static void token_bucket_exact(void **state)
{
    (void)state;
    /* Burst 50, 10 per second: the first second allows the burst plus the
     * tokens refilled during it; each later second exactly 10 (bucket empty
     * at every step, so nothing is capped). */
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 10;
    p.window_ms = 1000;
    p.burst = 50;
    /* refill during window 0: floor(998 * 10 / 1000) = 9 tokens by the last attempt */
    run(&p, 10, 50 + 9);
}

static void *churn(void *arg)
{
    job *j = arg;
    char key[48];
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(key, sizeof(key), "ip:%p:%d", (void *)j, i);
        sl_result r;
        if (sl_decide(j->store, j->params, key, (size_t)n, i, 1, &r) != 0) j->errors++;
    }
    return NULL;
}

/* Hot keys decided the quick way (record locks, no shard lock) while the
 * same threads add new keys to the same shards: tables grow and are
 * replaced, directories grow, pages are made -- under the readers.  The hot
 * keys' totals stay exact; with a bound, pages are also freed under them
 * (evictions), and every call still answers. */
typedef struct mix_job {
    sl_store *store;
    int64_t allowed[NKEYS];
    int errors;
    int id;
} mix_job;

#define MIX_ROUNDS 3000

static void *mix(void *arg)
{
    mix_job *j = arg;
    sl_params hot = SL_PARAMS_INIT, cold = SL_PARAMS_INIT;
    hot.algo = SL_FIXED_WINDOW;
    hot.limit = 1000;
    hot.window_ms = 1000000; /* one window for the whole test */
    cold.algo = SL_TOKEN_BUCKET;
    cold.limit = 5;
    cold.window_ms = 3600000; /* nothing expires: the bound evicts */
    char key[48];
    for (int i = 0; i < MIX_ROUNDS; i++) {
        sl_result r;
        for (int k = 0; k < NKEYS; k++) {
            int n = snprintf(key, sizeof(key), "hot:%d", k);
            if (sl_decide(j->store, &hot, key, (size_t)n, i, 1, &r) != 0)
                j->errors++;
            else
                j->allowed[k] += r.allowed;
        }
        for (int c = 0; c < 8; c++) { /* 8 new keys a round */
            int n = snprintf(key, sizeof(key), "new:%d:%d:%d", j->id, i, c);
            if (sl_decide(j->store, &cold, key, (size_t)n, i, 1, &r) != 0) j->errors++;
        }
    }
    return NULL;
}

static void mix_run(size_t max_bytes, unsigned locking)
{
    sl_store_opts o = {0};
    o.max_bytes = max_bytes;
    o.locking = locking;
    sl_store *s = sl_store_new(&o, NULL);
    assert_non_null(s);
    static mix_job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (mix_job){.store = s, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, mix, &jobs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(jobs[i].errors, 0);
    if (!max_bytes) {
        /* NTHREADS * MIX_ROUNDS = 12000 attempts per hot key, one window:
         * exactly the limit allowed, whoever got them */
        for (int k = 0; k < NKEYS; k++) {
            int64_t sum = 0;
            for (int i = 0; i < NTHREADS; i++) sum += jobs[i].allowed[k];
            assert_int_equal(sum, 1000);
        }
        assert_int_equal(st.keys, NKEYS + (uint64_t)NTHREADS * MIX_ROUNDS * 8);
    } else {
        assert_true(st.bytes <= max_bytes);
        assert_true(st.evictions > 0);
    }
    sl_store_free(s);
}

static void quick_way_while_growing(void **state)
{
    (void)state;
    mix_run(0, SL_LOCK_RECORD);
    mix_run(0, SL_LOCK_SHARD);
}

static void quick_way_while_evicting(void **state)
{
    (void)state;
    mix_run(512 * 1024, SL_LOCK_RECORD);
}

static void bounded_store_threads(void **state)
{
    (void)state;
    /* A bounded store under churn of distinct keys from several threads:
     * every call answers, the bound holds, live keys are evicted and counted. */
    sl_store_opts o = {0};
    o.max_bytes = 256 * 1024;
    sl_store *s = sl_store_new(&o, NULL);
    assert_non_null(s);
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_SLIDING_LOG;
    p.limit = 8;
    p.window_ms = 3600000;
    static job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (job){.store = s, .params = &p};
        assert_int_equal(pthread_create(&th[i], NULL, churn, &jobs[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_true(st.bytes <= o.max_bytes);
    assert_true(st.evictions > 0);
    assert_true(st.keys < (uint64_t)NTHREADS * 20000);
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(jobs[i].errors, 0);
    sl_store_free(s);
}

/* Pairs decided with sl_decide_all race single requests on one of the two
 * keys: a pair is charged to both keys or to neither, so the first key's
 * count equals the pairs allowed and the second's the pairs plus singles. */
typedef struct pair_job {
    sl_store *store;
    int64_t pairs, singles, errors;
} pair_job;

static sl_params pair_a, pair_b;

static void *pairs(void *arg)
{
    pair_job *j = arg;
    sl_request q[2] = {{&pair_a, "a", 1, 1}, {&pair_b, "b", 1, 1}};
    for (int i = 0; i < 3000; i++) {
        sl_result r[2];
        int all = 0;
        if (i % 2 == 0) {
            if (sl_decide_all(j->store, q, 2, 1, r, &all) != 0) j->errors++;
            j->pairs += all;
        } else {
            if (sl_decide(j->store, &pair_b, "b", 1, 1, 1, r) != 0) j->errors++;
            j->singles += r[0].allowed;
        }
    }
    return NULL;
}

static void decide_all_is_atomic(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    pair_a = (sl_params)SL_PARAMS_INIT;
    pair_a.algo = SL_FIXED_WINDOW;
    pair_a.limit = 2000;
    pair_a.window_ms = 3600000;
    pair_b = pair_a;
    pair_b.algo = SL_SLIDING_LOG;
    pair_b.limit = 3000;
    static pair_job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (pair_job){.store = s};
        assert_int_equal(pthread_create(&th[i], NULL, pairs, &jobs[i]), 0);
    }
    int64_t np = 0, ns = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        np += jobs[i].pairs;
        ns += jobs[i].singles;
        assert_int_equal(jobs[i].errors, 0);
    }
    sl_result ra, rb;
    assert_int_equal(sl_peek(s, &pair_a, "a", 1, 1, 0, &ra), 0);
    assert_int_equal(sl_peek(s, &pair_b, "b", 1, 1, 0, &rb), 0);
    if (2000 - ra.remaining != np || 3000 - rb.remaining != np + ns)
        fail_msg("a charged %lld, b %lld; pairs allowed %lld, singles %lld",
                 (long long)(2000 - ra.remaining), (long long)(3000 - rb.remaining),
                 (long long)np, (long long)ns);
    assert_int_equal(rb.remaining, 0); /* 12000 attempts on a limit of 3000 */
    sl_store_free(s);
}

/* sl_decide_many from every thread while the table grows under it (the
 * look-ahead reads the table's address without the lock): each batch
 * mixes new keys of its own thread with one shared key, so the store
 * passes 100,000 keys and the look-ahead's second stage runs.  The shared
 * key allows exactly its limit, every new key its first request. */
#define MANY_PER_THREAD 25600 /* 2x: a whole number of batches */
#define MANY_BATCH 32
#define SHARED_LIMIT 5000

typedef struct many_job {
    sl_store *store;
    const sl_params *params;
    int id;
    int64_t shared_allowed, own_allowed, errors;
} many_job;

static void *many_batches(void *arg)
{
    many_job *j = arg;
    static _Thread_local char keys[MANY_BATCH][32];
    sl_call calls[MANY_BATCH];
    sl_result r[MANY_BATCH];
    int rc[MANY_BATCH];
    for (int i = 0; i < MANY_PER_THREAD * 2; i += MANY_BATCH) {
        for (int b = 0; b < MANY_BATCH; b++) {
            int own = (i + b) % 2 == 0;
            int n = own ? snprintf(keys[b], sizeof keys[b], "t%d:%d", j->id, (i + b) / 2)
                        : snprintf(keys[b], sizeof keys[b], "shared");
            calls[b] = (sl_call){j->params, keys[b], (size_t)n, 1000, 1};
        }
        if (sl_decide_many(j->store, calls, MANY_BATCH, r, rc) != MANY_BATCH) j->errors++;
        for (int b = 0; b < MANY_BATCH; b++) {
            if ((i + b) % 2 == 0)
                j->own_allowed += r[b].allowed;
            else
                j->shared_allowed += r[b].allowed;
        }
    }
    return NULL;
}

static void decide_many_while_growing(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = SHARED_LIMIT;
    p.window_ms = 3600000;
    static many_job jobs[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        jobs[i] = (many_job){.store = s, .params = &p, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, many_batches, &jobs[i]), 0);
    }
    int64_t shared = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].errors, 0);
        assert_int_equal(jobs[i].own_allowed, MANY_PER_THREAD);
        shared += jobs[i].shared_allowed;
    }
    assert_int_equal(shared, SHARED_LIMIT);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(st.keys, (uint64_t)NTHREADS * MANY_PER_THREAD + 1);
    sl_store_free(s);
}

/* Keys at their limit, checked on the quick way by one thread, while the
 * others flood a small bounded store with new keys: token-bucket keys, and
 * 6 KB sliding-buckets records whose pages are freed (after a grace period,
 * store.c's limbo) under the checker.  SL_FULL_DENY: the flood is refused
 * (SL_EFULL, no other error); SL_FULL_EVICT: flood keys are evicted, none
 * at its limit.  Either way, every check of a limited key is a denial. */
#define NVIPS            50
#define FLOOD_PER_THREAD 20000

typedef struct flood_job {
    sl_store *store;
    int id; /* 0: the checker */
    int stop;
    int64_t checks, passed, errors, refused;
} flood_job;

static void *flood_or_check(void *arg)
{
    flood_job *j = arg;
    sl_params vip = SL_PARAMS_INIT, big = SL_PARAMS_INIT;
    vip.limit = 5;
    vip.window_ms = 3600000;
    big.algo = SL_SLIDING_BUCKETS;
    big.limit = 100;
    big.window_ms = 6000;
    big.precision = 6000;
    char key[48];
    sl_result r;
    if (j->id == 0) {
        while (!__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE)) {
            for (int v = 0; v < NVIPS; v++) {
                int n = snprintf(key, sizeof key, "vip:%d", v);
                int rc = sl_decide(j->store, &vip, key, (size_t)n, 1000, 1, &r);
                j->checks++;
                if (rc != 0)
                    j->errors++;
                else
                    j->passed += r.allowed;
            }
        }
        return NULL;
    }
    for (int i = 0; i < FLOOD_PER_THREAD; i++) {
        int n = snprintf(key, sizeof key, "f:%d:%d", j->id, i);
        const sl_params *p = i % 8 == 0 ? &big : &vip;
        int rc = sl_decide(j->store, p, key, (size_t)n, 1000, 1, &r);
        if (rc == SL_EFULL)
            j->refused++;
        else if (rc != 0)
            j->errors++;
    }
    return NULL;
}

static void flood_threads_keep_limits(void **state)
{
    (void)state;
    for (unsigned mode = SL_FULL_EVICT; mode <= SL_FULL_DENY; mode++) {
        sl_store_opts o = {0};
        o.max_bytes = 512 * 1024;
        o.on_full = mode;
        sl_store *s = sl_store_new(&o, NULL);
        assert_non_null(s);
        sl_params vip = SL_PARAMS_INIT;
        vip.limit = 5;
        vip.window_ms = 3600000;
        char key[32];
        sl_result r;
        for (int v = 0; v < NVIPS; v++) { /* five passes and one denial each */
            int n = snprintf(key, sizeof key, "vip:%d", v);
            for (int i = 0; i < 6; i++)
                assert_int_equal(sl_decide(s, &vip, key, (size_t)n, 1000, 1, &r), 0);
            assert_int_equal(r.allowed, 0);
        }
        static flood_job jobs[NTHREADS];
        pthread_t th[NTHREADS];
        for (int i = 0; i < NTHREADS; i++) {
            jobs[i] = (flood_job){.store = s, .id = i};
            assert_int_equal(pthread_create(&th[i], NULL, flood_or_check, &jobs[i]), 0);
        }
        for (int i = 1; i < NTHREADS; i++) pthread_join(th[i], NULL);
        __atomic_store_n(&jobs[0].stop, 1, __ATOMIC_RELEASE);
        pthread_join(th[0], NULL);
        int64_t refused = 0;
        for (int i = 0; i < NTHREADS; i++) {
            assert_int_equal(jobs[i].errors, 0);
            refused += jobs[i].refused;
        }
        assert_true(jobs[0].checks >= NVIPS);
        assert_int_equal(jobs[0].passed, 0);
        sl_store_stats st;
        sl_store_stats_get(s, &st);
        assert_true(st.bytes <= o.max_bytes);
        assert_int_equal(st.evicted_at_limit, 0);
        if (mode == SL_FULL_DENY) {
            assert_true(refused > 0);
            assert_int_equal(st.evictions, 0);
        } else {
            assert_int_equal(refused, 0);
            assert_true(st.evictions > 0);
        }
        sl_store_free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_window_exact),
        cmocka_unit_test(sliding_log_exact),
        cmocka_unit_test(token_bucket_exact),
        cmocka_unit_test(bounded_store_threads),
        cmocka_unit_test(quick_way_while_growing),
        cmocka_unit_test(quick_way_while_evicting),
        cmocka_unit_test(decide_all_is_atomic),
        cmocka_unit_test(decide_many_while_growing),
        cmocka_unit_test(flood_threads_keep_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
