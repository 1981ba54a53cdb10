/*
 * test_http_ready.c -- what /readyz and /metrics decide without a network
 * (src/proto/http/metrics.c): readiness and its 503 reasons, which a
 * running sluiced with the local backend never reaches (the backend's
 * error state, backend.h's err / errstr, is set here by hand; a server
 * whose rules fail their first load does not start); label values escaped
 * as the exposition format wants; and the page's caps
 * (SL_METRICS_MAX_RULES, SL_METRICS_MAX_VALUES), with what they left off
 * counted in sluice_metrics_omitted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "backend_local.h"
#include "metrics.h"
#include "rules.h"
#include "stats.h"

static sl_config cfg;
static sl_srv srv;

static int setup(void **state)
{
    (void)state;
    memset(&cfg, 0, sizeof cfg);
    memset(&srv, 0, sizeof srv);
    srv.cfg = &cfg;
    srv.store = sl_store_new(NULL, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    return 0;
}

static sl_rules *load(const char *yaml)
{
    char err[512];
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (r == NULL) fail_msg("rules refused: %s", err);
    sl_stats_bind(&srv.stats, r);
    return r;
}

/* The page as a NUL-terminated string (free it). */
static char *page(const sl_rules *r)
{
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    assert_int_equal(sl_metrics_write(b, &srv, r), 0);
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);
    assert_non_null(s);
    evbuffer_remove(b, s, n);
    s[n] = '\0';
    evbuffer_free(b);
    return s;
}

/* How many times needle occurs in text.  One pass, O(length of text): a
 * strstr per match re-reads the rest of the text under ASan (its strstr
 * takes the haystack's strlen each call), which made this 7 MB page's
 * 40,000 matches take minutes there. */
static size_t count(const char *text, const char *needle)
{
    size_t n = 0, len = strlen(needle);
    for (const char *p = text; *p != '\0'; p++)
        if (*p == needle[0] && strncmp(p, needle, len) == 0) n++;
    return n;
}

static void ready_and_its_503_reasons(void **state)
{
    (void)state;
    char why[256] = "x";
    assert_int_equal(sl_http_ready(&srv, NULL, why, sizeof why), 1); /* no --rules */
    assert_string_equal(why, "");

    snprintf(cfg.rules, sizeof cfg.rules, "/etc/sluice/rules");
    assert_int_equal(sl_http_ready(&srv, NULL, why, sizeof why), 0);
    assert_string_equal(why, "no rules loaded from --rules");
    sl_rules *r = load("domain: api\ndescriptors:\n  - key: user\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 1}\n");
    assert_int_equal(sl_http_ready(&srv, r, why, sizeof why), 1);

    sl__backend_set_err(srv.backend, SL_ENOMEM, "lost its store: %s", "out of memory");
    assert_int_equal(sl_http_ready(&srv, r, why, sizeof why), 0);
    assert_string_equal(why, "backend local: lost its store: out of memory");
    srv.backend->errstr[0] = '\0'; /* no words of its own: the code's */
    assert_int_equal(sl_http_ready(&srv, r, why, sizeof why), 0);
    char want[256];
    snprintf(want, sizeof want, "backend local: %s", sl_strerror(SL_ENOMEM));
    assert_string_equal(why, want);
    sl__backend_clear_err(srv.backend);
    assert_int_equal(sl_http_ready(&srv, r, why, sizeof why), 1);
    sl_rules_unref(r);
}

static void label_values_are_escaped(void **state)
{
    (void)state;
    struct evbuffer *b = evbuffer_new();
    static const char in[] = "a\\b\"c\nd\0e"; /* a NUL passes as it is */
    assert_int_equal(sl_metrics_label(b, in, sizeof in - 1), 0);
    static const char want[] = "a\\\\b\\\"c\\nd\0e";
    assert_int_equal(evbuffer_get_length(b), sizeof want - 1);
    assert_memory_equal(evbuffer_pullup(b, -1), want, sizeof want - 1);
    evbuffer_free(b);
}

/* Rules past SL_METRICS_MAX_RULES and per-value names past
 * SL_METRICS_MAX_VALUES are left off and counted; two limits with the same
 * `name:` are two series, under their paths (statistics are named by
 * path, as envoyproxy/ratelimit names them). */
static void the_page_is_capped(void **state)
{
    (void)state;
    enum { EXTRA = 5, VRULES = SL_METRICS_MAX_VALUES / SL_STATS_MAX_VALUES + 1 };
    size_t cap = (SL_METRICS_MAX_RULES + EXTRA + VRULES + 2) * 96 + 256, n = 0;
    char *yaml = malloc(cap);
    assert_non_null(yaml);
    n += (size_t)snprintf(yaml + n, cap - n, "domain: d\ndescriptors:\n");
    /* VRULES rules with per-value names first (they are walked first) */
    for (int i = 0; i < VRULES; i++)
        n += (size_t)snprintf(yaml + n, cap - n,
                              "  - key: v%d\n    value_to_metric: true\n"
                              "    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                              i);
    /* two limits of the same name: two entries, d.same0 and d.same1 */
    for (int i = 0; i < 2; i++)
        n += (size_t)snprintf(yaml + n, cap - n,
                              "  - key: same%d\n"
                              "    rate_limit: {name: twice, unit: minute, requests_per_unit: 1}\n",
                              i);
    for (int i = 0; i < SL_METRICS_MAX_RULES + EXTRA; i++)
        n += (size_t)snprintf(yaml + n, cap - n,
                              "  - key: k\n    value: \"%d\"\n"
                              "    rate_limit: {unit: minute, requests_per_unit: 1}\n",
                              i);
    assert_true(n < cap);
    sl_rules *r = load(yaml);
    free(yaml);
    const sl_rule_node *root = &sl_rules_domain(r, 0)->root;
    for (int i = 0; i < VRULES; i++) {
        sl_rule_stats *rs = root->children[i].limits[0].stats;
        assert_non_null(rs);
        for (int v = 0; v < SL_STATS_MAX_VALUES; v++) {
            char name[64];
            int len = snprintf(name, sizeof name, "d.v%d_%d", i, v);
            assert_non_null(sl_stats_value_entry(&srv.stats, rs, name, (size_t)len, 0));
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *text = page(r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* distinct rules: VRULES + same0 + same1 + the k's; shown up to the cap */
    int rules = VRULES + 2 + SL_METRICS_MAX_RULES + EXTRA;
    int omitted = rules - SL_METRICS_MAX_RULES;
    assert_int_equal(count(text, "sluice_rule_elastic_total{"), SL_METRICS_MAX_RULES);
    assert_int_equal(count(text, "sluice_rule_requests_total{"), 4 * SL_METRICS_MAX_RULES);
    assert_int_equal(count(text, "rule=\"twice\""), 0);
    assert_int_equal(count(text, "rule=\"d.same0\",outcome=\"allowed\""), 1);
    assert_int_equal(count(text, "rule=\"d.same1\",outcome=\"allowed\""), 1);
    char line[128];
    snprintf(line, sizeof line, "\nsluice_metrics_omitted{what=\"rules\"} %d\n", omitted);
    assert_non_null(strstr(text, line));
    assert_int_equal(count(text, "sluice_rule_value_requests_total{"), 4 * SL_METRICS_MAX_VALUES);
    snprintf(line, sizeof line, "\nsluice_metrics_omitted{what=\"values\"} %d\n",
             VRULES * SL_STATS_MAX_VALUES - SL_METRICS_MAX_VALUES);
    assert_non_null(strstr(text, line));
    /* what that costs: printed, for docs/http.md */
    printf("# page at the caps: %zu bytes in %.1f ms\n", strlen(text),
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    free(text);
    sl_rules_unref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ready_and_its_503_reasons, setup, teardown),
        cmocka_unit_test_setup_teardown(label_values_are_escaped, setup, teardown),
        cmocka_unit_test_setup_teardown(the_page_is_capped, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
