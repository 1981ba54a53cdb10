/*
 * test_stats_threads.c -- per-value statistics names (src/server/stats.c,
 * sl_stats_value_entry) found and created by several workers at once,
 * while a reader lists them as INFO does.  Each thread asks for the same
 * SL_STATS_MAX_VALUES + 500 names of one rule, in its own order, and
 * counts each request on the entry it got: every thread must get the same
 * entry for a name (or none, past the cap, for all of them), exactly
 * SL_STATS_MAX_VALUES names are tracked, and no count is lost.  Run under
 * TSan by tests/run.sh (the name contains "thread"): the lock-free reads
 * of a table that another thread grows are what it checks; a second case
 * has readers find each new name without ever taking the lock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rules.h"
#include "stats.h"

#define THREADS 4
#define NAMES   (SL_STATS_MAX_VALUES + 500)
#define ROUNDS  3 /* each thread asks for every name this many times */

typedef struct shared {
    sl_stats stats;
    sl_rule_stats *rule;
    sl_rule_stats *got[THREADS][NAMES];
    pthread_barrier_t go; /* the workers start together */
    _Atomic int done;
    _Atomic long listed;   /* entries seen by the reader, in all its passes */
    _Atomic int bad_value; /* the reader listed a per-value entry not whole */
} shared;

typedef struct worker {
    shared *sh;
    int id;
} worker;

static void *ask(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    char name[64];
    pthread_barrier_wait(&sh->go);
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < NAMES; k++) {
            /* each thread its own order: a stride prime to NAMES (1500) */
            static const int stride[THREADS] = {1, 7, 11, 13};
            int i = (int)(((long)k * stride[w->id] + w->id * 97) % NAMES);
            int n = snprintf(name, sizeof name, "d.user_u%d", i);
            sl_rule_stats *e = sl_stats_value_entry(&sh->stats, sh->rule, name, (size_t)n, 0);
            if (round == 0)
                sh->got[w->id][i] = e;
            else
                assert_ptr_equal(e, sh->got[w->id][i]); /* a name keeps its answer */
            if (e != NULL) {
                assert_string_equal(e->name, name);
                atomic_fetch_add_explicit(&e->matched, 1, memory_order_relaxed);
            } else {
                atomic_fetch_add_explicit(&sh->rule->overflow, 1, memory_order_relaxed);
            }
        }
    }
    return NULL;
}

static void count_one(const sl_rule_stats *rs, void *arg)
{
    (void)rs;
    atomic_fetch_add_explicit((_Atomic long *)arg, 1, memory_order_relaxed);
}

/* Lists as INFO does, and the rule's per-value names as /metrics does
 * (sl_stats_values_list, lock-free: each entry listed must be whole). */
static void *list(void *arg)
{
    shared *sh = arg;
    static const sl_rule_stats *vals[SL_STATS_MAX_VALUES];
    while (!atomic_load(&sh->done)) {
        sl_stats_foreach_rule(&sh->stats, count_one, &sh->listed);
        size_t n = sl_stats_values_list(sh->rule, vals, SL_STATS_MAX_VALUES);
        for (size_t i = 0; i < n && i < SL_STATS_MAX_VALUES; i++)
            if (strncmp(vals[i]->name, "d.user_", 7) != 0 ||
                sl_stat_get((_Atomic uint64_t *)&vals[i]->matched) > THREADS * ROUNDS)
                atomic_store(&sh->bad_value, 1);
    }
    return NULL;
}

static void many_workers_one_rule(void **state)
{
    (void)state;
    static shared sh; /* large: not on the stack */
    char err[256];
    const char *yaml = "domain: d\n"
                       "descriptors:\n"
                       "  - {key: user, value_to_metric: true,\n"
                       "     rate_limit: {unit: minute, requests_per_unit: 5}}\n";
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    assert_non_null(r);
    assert_int_equal(sl_stats_init(&sh.stats, THREADS), 0);
    sl_stats_bind(&sh.stats, r);
    const sl_rule_node *node = &sl_rules_domain(r, 0)->root.children[0];
    sh.rule = node->limits[0].stats;
    assert_non_null(sh.rule);
    assert_string_equal(sh.rule->name, "d.user");
    assert_true(sh.rule->per_value);

    pthread_t t[THREADS], reader;
    pthread_barrier_init(&sh.go, NULL, THREADS);
    worker w[THREADS];
    assert_int_equal(pthread_create(&reader, NULL, list, &sh), 0);
    /* the reader's first pass before the workers start: beside a CPU hog it
     * was not scheduled at all before they finished (listed stayed 0) */
    for (long n = 0; atomic_load(&sh.listed) == 0 && n < 10000000; n++) sched_yield();
    assert_true(atomic_load(&sh.listed) > 0); /* the rule is listed (a hang catch-all above) */
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&sh, i};
        assert_int_equal(pthread_create(&t[i], NULL, ask, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    atomic_store(&sh.done, 1);
    pthread_join(reader, NULL);

    int tracked = 0;
    uint64_t counted = 0;
    for (int i = 0; i < NAMES; i++) {
        for (int j = 1; j < THREADS; j++) assert_ptr_equal(sh.got[j][i], sh.got[0][i]);
        if (sh.got[0][i] == NULL) continue;
        tracked++;
        uint64_t m = sl_stat_get(&sh.got[0][i]->matched);
        assert_int_equal(m, THREADS * ROUNDS); /* no count lost */
        counted += m;
    }
    assert_int_equal(tracked, SL_STATS_MAX_VALUES);
    assert_int_equal(sh.rule->nvalues, SL_STATS_MAX_VALUES);
    assert_int_equal(sh.stats.nrules, 1 + SL_STATS_MAX_VALUES);
    assert_int_equal(counted + sl_stat_get(&sh.rule->overflow), (uint64_t)THREADS * ROUNDS * NAMES);
    assert_true(atomic_load(&sh.listed) > 0);
    assert_int_equal(atomic_load(&sh.bad_value), 0);
    static const sl_rule_stats *vals[SL_STATS_MAX_VALUES + 1];
    assert_int_equal(sl_stats_values_list(sh.rule, vals, SL_STATS_MAX_VALUES + 1),
                     SL_STATS_MAX_VALUES);
    for (int i = 0; i < SL_STATS_MAX_VALUES; i++)
        assert_int_equal(sl_stat_get((_Atomic uint64_t *)&vals[i]->matched), THREADS * ROUNDS);
    assert_int_equal(sl_stats_values_list(sh.rule, vals, 3), SL_STATS_MAX_VALUES); /* all counted */
    pthread_barrier_destroy(&sh.go);
    sl_stats_free(&sh.stats);
    sl_rules_unref(r);
}

/* One worker makes names; the others read each one as soon as they see it
 * counted (a relaxed counter: no ordering of its own), so they find it on
 * the lock-free path -- never through the lock the maker held -- and must
 * still see the entry whole (TSan checks the publication). */
typedef struct fresh {
    sl_stats stats;
    sl_rule_stats *rule;
    sl_rule_stats *made[SL_STATS_MAX_VALUES];
    _Atomic int nmade;
    _Atomic long mismatched;
} fresh;

static void *make_names(void *arg)
{
    fresh *f = arg;
    char name[64];
    for (int i = 0; i < SL_STATS_MAX_VALUES; i++) {
        int n = snprintf(name, sizeof name, "d.user_m%d", i);
        f->made[i] = sl_stats_value_entry(&f->stats, f->rule, name, (size_t)n, 0);
        atomic_store_explicit(&f->nmade, i + 1, memory_order_relaxed);
    }
    return NULL;
}

static void *read_names(void *arg)
{
    fresh *f = arg;
    char name[64];
    for (int i = 0; i < SL_STATS_MAX_VALUES; i++) {
        while (atomic_load_explicit(&f->nmade, memory_order_relaxed) <= i) sched_yield();
        int n = snprintf(name, sizeof name, "d.user_m%d", i);
        sl_rule_stats *e = sl_stats_value_entry(&f->stats, f->rule, name, (size_t)n, 0);
        if (e == NULL || e->hash == 0 || strcmp(e->name, name) != 0)
            atomic_fetch_add(&f->mismatched, 1);
        else
            atomic_fetch_add_explicit(&e->matched, 1, memory_order_relaxed);
    }
    return NULL;
}

static void readers_see_whole_entries(void **state)
{
    (void)state;
    static fresh f;
    char err[256];
    const char *yaml = "domain: d\n"
                       "descriptors:\n"
                       "  - {key: user, detailed_metric: true,\n"
                       "     rate_limit: {unit: minute, requests_per_unit: 5}}\n";
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    assert_non_null(r);
    assert_int_equal(sl_stats_init(&f.stats, THREADS), 0);
    sl_stats_bind(&f.stats, r);
    f.rule = sl_rules_domain(r, 0)->root.children[0].limits[0].stats;
    assert_non_null(f.rule);
    pthread_t t[THREADS];
    assert_int_equal(pthread_create(&t[0], NULL, make_names, &f), 0);
    for (int i = 1; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, read_names, &f), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&f.mismatched), 0);
    for (int i = 0; i < SL_STATS_MAX_VALUES; i++) {
        assert_non_null(f.made[i]);
        assert_int_equal(sl_stat_get(&f.made[i]->matched), THREADS - 1);
    }
    assert_int_equal(f.rule->nvalues, SL_STATS_MAX_VALUES);
    sl_stats_free(&f.stats);
    sl_rules_unref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_workers_one_rule),
        cmocka_unit_test(readers_see_whole_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
