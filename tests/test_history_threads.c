/*
 * test_history_threads.c -- the status page's history (src/server/history.h)
 * under threads, for TSan: workers count denials on their own sketches
 * while another thread samples the rules' counters (which some workers
 * bump meanwhile) and merges the top keys; at the end every denial and
 * every count is there, exactly.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_denials_and_samples_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
