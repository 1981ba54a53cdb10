/*
 * test_history.c -- the status page's recent past (src/server/history.h):
 * per-second series sampled from rule counters with time moved by hand
 * (seconds attributed, skipped, early timers, the ring wrapping, the
 * busiest SL_HISTORY_RULES rules kept), every decision per second (the
 * per-front totals of stats.h sampled into a ring of their own, rules or
 * not, read back oldest first), and the most-limited keys
 * (space-saving per worker, merged over workers and generations, exact
 * while fewer keys than counters, the heavy key kept when there are more,
 * long keys cut, generations rotating away).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "history.h"

/* A rule's counters, as the statistics table holds them. */
static sl_rule_stats *rule(const char *name)
{
    size_t n = strlen(name);
    sl_rule_stats *rs = calloc(1, sizeof *rs + n + 1);
    assert_non_null(rs);
    memcpy(rs->name, name, n + 1);
    return rs;
}

static void add(sl_rule_stats *rs, uint64_t allowed, uint64_t denied, uint64_t shadow,
                uint64_t elastic)
{
    atomic_fetch_add(&rs->allowed, allowed);
    atomic_fetch_add(&rs->denied, denied);
    atomic_fetch_add(&rs->shadow, shadow);
    atomic_fetch_add(&rs->elastic, elastic);
    atomic_fetch_add(&rs->matched, allowed + denied + shadow);
}

static void sample(sl_history *h, int64_t now_ms, sl_rule_stats **rs, int n)
{
    sl_history_begin(h, now_ms);
    for (int i = 0; i < n; i++) sl_history_observe(h, rs[i]);
    sl_history_end(h);
}

/* What the readers see: each series by name. */
typedef struct seen {
    int n;
    int64_t last;
    const sl_history_series *sr[SL_HISTORY_RULES];
} seen;

static void collect(const sl_history_series *sr, int64_t last, void *arg)
{
    seen *s = arg;
    s->last = last;
    s->sr[s->n++] = sr;
}

static const sl_history_series *series_of(sl_history *h, const char *name, int64_t *last)
{
    static seen s;
    memset(&s, 0, sizeof s);
    *last = sl_history_foreach(h, collect, &s);
    for (int i = 0; i < s.n; i++)
        if (strcmp(s.sr[i]->rs->name, name) == 0) return s.sr[i];
    return NULL;
}

#define AT(sr, t, c) ((sr)->n[(t) % SL_HISTORY_SECONDS][c])

static void test_counts_land_in_the_second_before_the_sample(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    assert_non_null(h);
    sl_rule_stats *r = rule("api.path_/login");
    int64_t last;
    assert_int_equal(sl_history_foreach(h, collect, &(seen){0}), -1); /* nothing yet */
    add(r, 3, 2, 0, 1);                                               /* before the first sample */
    sample(h, 100005, &r, 1);                                         /* at 100.005 s: second 99 */
    const sl_history_series *sr = series_of(h, "api.path_/login", &last);
    assert_non_null(sr);
    assert_int_equal(last, 99);
    assert_int_equal(AT(sr, 99, SL_HIST_ALLOWED), 3);
    assert_int_equal(AT(sr, 99, SL_HIST_DENIED), 2);
    assert_int_equal(AT(sr, 99, SL_HIST_ELASTIC), 1);
    assert_int_equal(sr->total, 5);

    add(r, 4, 0, 7, 0);
    sample(h, 101003, &r, 1); /* second 100 */
    add(r, 1, 1, 0, 0);
    sample(h, 101900, &r, 1); /* early: still second 100, added */
    sr = series_of(h, "api.path_/login", &last);
    assert_int_equal(last, 100);
    assert_int_equal(AT(sr, 100, SL_HIST_ALLOWED), 5);
    assert_int_equal(AT(sr, 100, SL_HIST_DENIED), 1);
    assert_int_equal(AT(sr, 100, SL_HIST_SHADOW), 7);
    assert_int_equal(AT(sr, 99, SL_HIST_ALLOWED), 3);
    assert_int_equal(sr->total, 5 + 13);

    /* a timer late by 3 s: the seconds between read 0, the counts go to the latest */
    add(r, 0, 9, 0, 0);
    sample(h, 104010, &r, 1);
    sr = series_of(h, "api.path_/login", &last);
    assert_int_equal(last, 103);
    assert_int_equal(AT(sr, 101, SL_HIST_DENIED), 0);
    assert_int_equal(AT(sr, 102, SL_HIST_DENIED), 0);
    assert_int_equal(AT(sr, 103, SL_HIST_DENIED), 9);
    sl_history_free(h);
    free(r);
}

static void test_the_ring_forgets_what_is_older_than_it(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    sl_rule_stats *r = rule("r");
    int64_t last;
    add(r, 10, 0, 0, 0);
    sample(h, 1000, &r, 1); /* second 0 */
    for (int64_t t = 1; t < SL_HISTORY_SECONDS; t++) {
        add(r, 1, 0, 0, 0);
        sample(h, (t + 1) * 1000 + 2, &r, 1);
    }
    const sl_history_series *sr = series_of(h, "r", &last);
    assert_int_equal(last, SL_HISTORY_SECONDS - 1);
    assert_int_equal(AT(sr, 0, SL_HIST_ALLOWED), 10); /* still in the ring */
    assert_int_equal(sr->total, 10 + SL_HISTORY_SECONDS - 1);
    add(r, 2, 0, 0, 0);
    sample(h, (SL_HISTORY_SECONDS + 1) * 1000, &r, 1); /* second 0 leaves */
    sr = series_of(h, "r", &last);
    assert_int_equal(AT(sr, SL_HISTORY_SECONDS, SL_HIST_ALLOWED), 2);
    assert_int_equal(sr->total, SL_HISTORY_SECONDS - 1 + 2);
    /* a gap longer than the ring: everything before it is gone */
    add(r, 5, 0, 0, 0);
    sample(h, 10000 * 1000, &r, 1);
    sr = series_of(h, "r", &last);
    assert_int_equal(last, 9999);
    assert_int_equal(sr->total, 5);
    sl_history_free(h);
    free(r);
}

static void test_the_busiest_rules_keep_a_series(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    enum { N = SL_HISTORY_RULES + 4 };
    sl_rule_stats *r[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "rule%02d", i);
        r[i] = rule(name);
    }
    int64_t last;
    /* the first SL_HISTORY_RULES with traffic take every series */
    for (int i = 0; i < SL_HISTORY_RULES; i++) add(r[i], (uint64_t)i + 10, 0, 0, 0);
    sample(h, 5000, r, N);
    assert_non_null(series_of(h, "rule00", &last));
    assert_null(series_of(h, "rule16", &last));
    /* a quiet newcomer does not displace anyone; a busy one displaces the quietest */
    add(r[SL_HISTORY_RULES], 5, 0, 0, 0);
    add(r[SL_HISTORY_RULES + 1], 0, 0, 100, 0);
    sample(h, 6000, r, N);
    assert_null(series_of(h, "rule16", &last));
    const sl_history_series *sr = series_of(h, "rule17", &last);
    assert_non_null(sr);
    assert_int_equal(AT(sr, 5, SL_HIST_SHADOW), 100);
    assert_int_equal(AT(sr, 4, SL_HIST_SHADOW), 0); /* its past is not known */
    assert_null(series_of(h, "rule00", &last));     /* the quietest (10) left */
    /* busiest first */
    seen s = {0};
    sl_history_foreach(h, collect, &s);
    assert_int_equal(s.n, SL_HISTORY_RULES);
    assert_string_equal(s.sr[0]->rs->name, "rule17");
    for (int i = 1; i < s.n; i++) assert_true(s.sr[i - 1]->total >= s.sr[i]->total);
    /* the evicted rule counts again from where it was, when busy again */
    add(r[0], 500, 0, 0, 0);
    sample(h, 7000, r, N);
    sr = series_of(h, "rule00", &last);
    assert_non_null(sr);
    assert_int_equal(AT(sr, 6, SL_HIST_ALLOWED), 500);
    assert_int_equal(sr->total, 500);
    sl_history_free(h);
    for (int i = 0; i < N; i++) free(r[i]);
}

/* ---- the most-limited keys ------------------------------------------------ */

/* Every decision: cumulative totals sampled, per second, with time moved
 * by hand; read back oldest first as the status page does. */
static void test_every_decision_per_second(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    assert_non_null(h);
    static uint32_t all[SL_HISTORY_SECONDS][2];
    int64_t first;
    assert_int_equal(sl_history_all(h, all, &first), -1); /* nothing sampled */
    assert_int_equal(first, -1);
    assert_int_equal(all[SL_HISTORY_SECONDS - 1][0], 0);

    /* 7 allowed and 3 denied before the first sample: all in its second */
    sl_history_begin(h, 500005);
    sl_history_observe_all(h, 7, 3);
    sl_history_end(h);
    sl_history_begin(h, 501004); /* second 500: 5 more allowed */
    sl_history_observe_all(h, 12, 3);
    sl_history_end(h);
    sl_history_begin(h, 501950); /* early: still second 500, added */
    sl_history_observe_all(h, 13, 4);
    sl_history_end(h);
    sl_history_begin(h, 504020); /* 3 s late: 501 and 502 read 0 */
    sl_history_observe_all(h, 13, 10);
    sl_history_end(h);
    sl_history_begin(h, 505001); /* totals that went back (never: counters grow) add nothing */
    sl_history_observe_all(h, 12, 10);
    sl_history_end(h);
    sl_history_begin(h, 506001); /* ... nor are counted again when they come back */
    sl_history_observe_all(h, 14, 10);
    sl_history_end(h);

    assert_int_equal(sl_history_all(h, all, &first), 505);
    assert_int_equal(first, 499);
    const int L = SL_HISTORY_SECONDS - 1; /* out[L] is second 505 */
    uint32_t want[][3] = {{499, 7, 3}, {500, 6, 1}, {501, 0, 0}, {502, 0, 0},
                          {503, 0, 6}, {504, 0, 0}, {505, 1, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int at = L - (505 - (int)want[i][0]);
        assert_int_equal(all[at][0], want[i][1]);
        assert_int_equal(all[at][1], want[i][2]);
    }
    uint64_t a = 0, d = 0;
    for (int i = 0; i < SL_HISTORY_SECONDS; i++) a += all[i][0], d += all[i][1];
    assert_int_equal(a, 14); /* the totals, exactly */
    assert_int_equal(d, 10);

    /* the ring forgets what is older than it: SL_HISTORY_SECONDS later,
     * only the newest second holds anything */
    sl_history_begin(h, (506 + SL_HISTORY_SECONDS) * 1000 + 1);
    sl_history_observe_all(h, 15, 11);
    sl_history_end(h);
    assert_int_equal(sl_history_all(h, all, &first), 505 + SL_HISTORY_SECONDS);
    a = d = 0;
    for (int i = 0; i < SL_HISTORY_SECONDS; i++) a += all[i][0], d += all[i][1];
    assert_int_equal(a, 1);
    assert_int_equal(d, 1);
    assert_int_equal(all[L][0], 1);
    sl_history_free(h);
}

/* sl_history_sample sums every front of every worker's shard (stats.h). */
static void test_sample_sums_every_front(void **state)
{
    (void)state;
    sl_stats st;
    assert_int_equal(sl_stats_init(&st, 3), 0);
    sl_history *h = sl_history_new(3);
    assert_non_null(h);
    sl_stats_decided(&st.workers[0], SL_FRONT_RESP, 1);
    sl_stats_decided(&st.workers[1], SL_FRONT_HTTP, 0);
    sl_stats_decided(&st.workers[2], SL_FRONT_GRPC, 1);
    sl_stats_decided(&st.workers[2], SL_FRONT_GRPC, 0);
    sl_stats_decided(&st.workers[1], 99, 1); /* a front out of range: counted as RESP */
    sl_history_sample(h, &st, 42000);
    static uint32_t all[SL_HISTORY_SECONDS][2];
    int64_t first;
    assert_int_equal(sl_history_all(h, all, &first), 41);
    assert_int_equal(all[SL_HISTORY_SECONDS - 1][0], 3);
    assert_int_equal(all[SL_HISTORY_SECONDS - 1][1], 2);
    sl_stats_sum sum;
    sl_stats_sum_get(&st, &sum);
    assert_int_equal(sum.front_allowed[SL_FRONT_RESP], 2);
    assert_int_equal(sum.front_denied[SL_FRONT_HTTP], 1);
    assert_int_equal(sum.front_allowed[SL_FRONT_GRPC], 1);
    assert_int_equal(sum.front_denied[SL_FRONT_GRPC], 1);
    assert_string_equal(sl_front_names[SL_FRONT_GRPC], "grpc");
    sl_history_free(h);
    sl_stats_free(&st);
}

static void deny(sl_history *h, int w, const char *key, int times)
{
    for (int i = 0; i < times; i++) sl_history_denied(h, w, key, strlen(key));
}

static void test_top_keys_are_exact_below_the_sketch_size(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(3);
    deny(h, 0, "alice", 5);
    deny(h, 1, "alice", 2);
    deny(h, 2, "bob", 7);
    deny(h, 1, "<script>x</script>", 3);
    sl_history_denied(h, 0, "nul\0byte", 8);
    sl_history_top top[8];
    int n = sl_history_top_keys(h, top, 8);
    assert_int_equal(n, 4);
    /* 7 alice and 7 bob: ties by key bytes */
    assert_int_equal(top[0].count, 7);
    assert_memory_equal(top[0].key, "alice", 5);
    assert_int_equal(top[0].len, 5);
    assert_int_equal(top[1].count, 7);
    assert_memory_equal(top[1].key, "bob", 3);
    assert_int_equal(top[2].count, 3);
    assert_int_equal(top[3].count, 1);
    assert_int_equal(top[3].len, 8);
    assert_memory_equal(top[3].key, "nul\0byte", 8);
    for (int i = 0; i < n; i++) assert_int_equal(top[i].err, 0);
    assert_int_equal(sl_history_top_keys(h, top, 2), 2); /* at most max */
    sl_history_denied(h, 3, "nobody", 6);                /* no such worker: ignored */
    sl_history_denied(NULL, 0, "x", 1);
    assert_int_equal(sl_history_top_keys(h, top, 8), 4);
    sl_history_free(h);
}

static void test_the_heavy_key_survives_many_light_ones(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    char key[32];
    for (int round = 0; round < 50; round++) {
        deny(h, 0, "heavy", 3);
        for (int i = 0; i < 20; i++) { /* 1000 one-off keys in all */
            snprintf(key, sizeof key, "light%d", round * 20 + i);
            deny(h, 0, key, 1);
        }
    }
    sl_history_top top[4];
    int n = sl_history_top_keys(h, top, 4);
    assert_int_equal(n, 4);
    assert_int_equal(top[0].len, 5);
    assert_memory_equal(top[0].key, "heavy", 5);
    /* never under the truth, at most err over it */
    assert_true(top[0].count >= 150);
    assert_true(top[0].count - top[0].err <= 150);
    sl_history_free(h);
}

static void test_long_keys_are_cut_but_counted_apart(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(1);
    char a[SL_HISTORY_KEY_MAX + 10], b[SL_HISTORY_KEY_MAX + 10];
    memset(a, 'k', sizeof a);
    memcpy(b, a, sizeof b);
    b[sizeof b - 1] = 'z'; /* same first SL_HISTORY_KEY_MAX bytes */
    sl_history_denied(h, 0, a, sizeof a);
    sl_history_denied(h, 0, a, sizeof a);
    sl_history_denied(h, 0, b, sizeof b);
    sl_history_top top[4];
    int n = sl_history_top_keys(h, top, 4);
    assert_int_equal(n, 2);
    assert_int_equal(top[0].count, 2);
    assert_int_equal(top[0].cut, 1);
    assert_int_equal(top[0].len, SL_HISTORY_KEY_MAX);
    assert_int_equal(top[1].count, 1);
    sl_history_free(h);
}

static void test_generations_rotate_away(void **state)
{
    (void)state;
    sl_history *h = sl_history_new(2);
    sl_history_top top[4];
    const int64_t P = SL_HISTORY_TOPK_PERIOD_S * 1000;
    sample(h, 1000, NULL, 0); /* the first period starts at second 0 */
    deny(h, 0, "old", 4);
    sample(h, 1000 + P, NULL, 0); /* one period: "old" is the previous generation */
    deny(h, 1, "new", 1);
    deny(h, 0, "old", 1);
    int n = sl_history_top_keys(h, top, 4);
    assert_int_equal(n, 2);
    assert_memory_equal(top[0].key, "old", 3);
    assert_int_equal(top[0].count, 5);
    sample(h, 1000 + 2 * P, NULL, 0); /* the first four fall out */
    n = sl_history_top_keys(h, top, 4);
    assert_int_equal(n, 2);
    assert_memory_equal(top[0].key, "new", 3);
    assert_int_equal(top[0].count, 1);
    assert_int_equal(top[1].count, 1);
    sample(h, 1000 + 4 * P, NULL, 0); /* two periods of silence: nothing */
    assert_int_equal(sl_history_top_keys(h, top, 4), 0);
    sl_history_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_land_in_the_second_before_the_sample),
        cmocka_unit_test(test_the_ring_forgets_what_is_older_than_it),
        cmocka_unit_test(test_the_busiest_rules_keep_a_series),
        cmocka_unit_test(test_every_decision_per_second),
        cmocka_unit_test(test_sample_sums_every_front),
        cmocka_unit_test(test_top_keys_are_exact_below_the_sketch_size),
        cmocka_unit_test(test_the_heavy_key_survives_many_light_ones),
        cmocka_unit_test(test_long_keys_are_cut_but_counted_apart),
        cmocka_unit_test(test_generations_rotate_away),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
