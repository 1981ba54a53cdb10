/*
 * test_history_threads.c -- the status page's history (src/server/history.h)
 * under threads, for TSan: workers count denials on their own sketches
 * while another thread samples the rules' counters (which some workers
 * bump meanwhile) and merges the top keys; at the end every denial and
 * every count is there, exactly.  And every decision: workers count on
 * their own shards' per-front counters (stats.h) while a sampler sums them
 * into the history (sl_history_sample) and a reader copies the ring out
 * (sl_history_all), as the status page does: the ring holds every
 * decision exactly once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>

#include "history.h"

#define WORKERS 3
#define N       20000

typedef struct arg {
    sl_history *h;
    sl_rule_stats *rs;
    int w;
} arg;

static void *worker(void *p)
{
    arg *a = p;
    char own[16];
    snprintf(own, sizeof own, "own%d", a->w);
    for (int i = 0; i < N; i++) {
        sl_history_denied(a->h, a->w, "shared", 6);
        if (i % 2 == 0) sl_history_denied(a->h, a->w, own, strlen(own));
        atomic_fetch_add(&a->rs->denied, 1);
        atomic_fetch_add(&a->rs->matched, 1);
    }
    return NULL;
}

typedef struct reader_arg {
    sl_history *h;
    sl_rule_stats *rs;
    _Atomic int stop;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *r = p;
    sl_history_top top[8];
    int64_t t = 1000;
    while (!atomic_load(&r->stop)) {
        sl_history_begin(r->h, t);
        sl_history_observe(r->h, r->rs);
        sl_history_end(r->h);
        t += 1000; /* well within one sketch generation: nothing rotates away */
        if (t > 30000) t = 30000;
        int n = sl_history_top_keys(r->h, top, 8);
        assert_true(n <= WORKERS + 1);
    }
    return NULL;
}

static void test_denials_and_samples_under_threads(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(WORKERS);
    assert_non_null(h);
    sl_rule_stats *rs = calloc(1, sizeof *rs + 2);
    assert_non_null(rs);
    strcpy(rs->name, "r");
    reader_arg ra = {h, rs, 0};
    pthread_t rt, wt[WORKERS];
    arg a[WORKERS];
    assert_int_equal(pthread_create(&rt, NULL, reader, &ra), 0);
    for (int i = 0; i < WORKERS; i++) {
        a[i] = (arg){h, rs, i};
        assert_int_equal(pthread_create(&wt[i], NULL, worker, &a[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(wt[i], NULL);
    atomic_store(&ra.stop, 1);
    pthread_join(rt, NULL);

    sl_history_top top[8];
    int n = sl_history_top_keys(h, top, 8);
    assert_int_equal(n, WORKERS + 1);
    assert_int_equal(top[0].len, 6);
    assert_memory_equal(top[0].key, "shared", 6);
    assert_int_equal(top[0].count, (uint64_t)WORKERS * N);
    for (int i = 1; i < n; i++) assert_int_equal(top[i].count, N / 2);
    /* one last sample takes what the reader had not seen yet */
    sl_history_begin(h, 31000);
    sl_history_observe(h, rs);
    sl_history_end(h);
    uint64_t total = 0;
    for (int t = 0; t < SL_HISTORY_SECONDS; t++) total += h->series[0].n[t][SL_HIST_DENIED];
    assert_int_equal(total, (uint64_t)WORKERS * N);
    assert_int_equal(h->series[0].total, (uint64_t)WORKERS * N);
    sl_history_free(h);
    free(rs);
}

typedef struct front_arg {
    sl_stats *st;
    int w;
} front_arg;

static void *front_worker(void *p)
{
    front_arg *a = p;
    for (int i = 0; i < N; i++)
        sl_stats_decided(&a->st->workers[a->w], (i + a->w) % SL_FRONTS, i % 3 != 0);
    return NULL;
}

typedef struct sampler_arg {
    sl_history *h;
    sl_stats *st;
    _Atomic int stop;
    int64_t t;
} sampler_arg;

static void *sampler(void *p)
{
    sampler_arg *r = p;
    static uint32_t all[SL_HISTORY_SECONDS][2];
    while (!atomic_load(&r->stop)) {
        sl_history_sample(r->h, r->st, r->t);
        if (r->t < 200000) r->t += 1000; /* within the ring: nothing is forgotten */
        int64_t first;
        sl_history_all(r->h, all, &first);
        /* never more than was counted: nothing twice, even mid-flight */
        uint64_t ring = 0, counted = 0;
        for (int i = 0; i < SL_HISTORY_SECONDS; i++) ring += (uint64_t)all[i][0] + all[i][1];
        sl_stats_sum sum;
        sl_stats_sum_get(r->st, &sum);
        for (int f = 0; f < SL_FRONTS; f++) counted += sum.front_allowed[f] + sum.front_denied[f];
        assert_true(ring <= counted);
    }
    return NULL;
}

static void test_every_decision_sampled_under_threads(void **state)
{
    (void)state;
    sl_stats st;
    assert_int_equal(sl_stats_init(&st, WORKERS), 0);
    sl_history *h = sl_history_new(WORKERS);
    assert_non_null(h);
    sampler_arg sa = {h, &st, 0, 1000};
    pthread_t smp, wt[WORKERS];
    front_arg a[WORKERS];
    assert_int_equal(pthread_create(&smp, NULL, sampler, &sa), 0);
    for (int i = 0; i < WORKERS; i++) {
        a[i] = (front_arg){&st, i};
        assert_int_equal(pthread_create(&wt[i], NULL, front_worker, &a[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(wt[i], NULL);
    atomic_store(&sa.stop, 1);
    pthread_join(smp, NULL);
    sl_history_sample(h, &st, sa.t + 1000); /* what the sampler had not seen yet */

    static uint32_t all[SL_HISTORY_SECONDS][2];
    int64_t first;
    sl_history_all(h, all, &first);
    uint64_t ra = 0, rd = 0;
    for (int i = 0; i < SL_HISTORY_SECONDS; i++) ra += all[i][0], rd += all[i][1];
    sl_stats_sum sum;
    sl_stats_sum_get(&st, &sum);
    uint64_t sa_ = 0, sd = 0;
    for (int f = 0; f < SL_FRONTS; f++) sa_ += sum.front_allowed[f], sd += sum.front_denied[f];
    /* i % 3 != 0 allowed: N - ceil(N / 3) per worker */
    uint64_t want_denied = (uint64_t)WORKERS * ((N + 2) / 3);
    assert_int_equal(sd, want_denied);
    assert_int_equal(sa_, (uint64_t)WORKERS * N - want_denied);
    assert_int_equal(ra, sa_);
    assert_int_equal(rd, sd);
    sl_history_free(h);
    sl_stats_free(&st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_denials_and_samples_under_threads),
        cmocka_unit_test(test_every_decision_sampled_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
