/*
 * test_service.c -- the protocol-neutral service layer (src/server/service.c)
 * and the statistics it keeps (src/server/stats.c), without any protocol:
 * answers arrive through callbacks, values are checked with the messages
 * every protocol shows, decisions are counted by algorithm and outcome,
 * the latency histogram is sampled one decision in SL_STATS_LAT_SAMPLE, and
 * per-rule statistics go on counting across rules reloads (by name).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend_local.h"
#include "live.h"
#include "service.h"
#include "stats.h"

static sl_config cfg;
static sl_srv srv;
static sl_svc_ctx svc;

static int setup(void **state)
{
    (void)state;
    char err[256];
    memset(&cfg, 0, sizeof cfg);
    memset(&srv, 0, sizeof srv);
    cfg.trust_client_time = 1;
    srv.cfg = &cfg;
    srv.store = sl_store_new(NULL, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0) return -1;
    return sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err);
}

static int teardown(void **state)
{
    (void)state;
    sl_svc_ctx_done(&svc);
    sl_live_free(srv.live);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    return 0;
}

/* What a callback saw. */
typedef struct seen {
    int calls;
    sl_svc_reply r;
    char err[SL_SVC_ERR];
    sl_check_status st[4];
} seen;

static void record(void *arg, const sl_svc_reply *r)
{
    seen *s = arg;
    s->calls++;
    s->r = *r;
    snprintf(s->err, sizeof s->err, "%s", r->err ? r->err : "");
    for (int i = 0; i < r->n && i < 4; i++) s->st[i] = r->st[i];
}

static void allow_counts_by_algorithm_and_outcome(void **state)
{
    (void)state;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 2;
    p.window_ms = 1000;
    seen s = {0};
    for (int i = 0; i < 3; i++) sl_svc_allow(&svc, "k", 1, &p, 1, 0, 1, record, &s);
    assert_int_equal(s.calls, 3); /* the local backend answers before the call returns */
    assert_int_equal(s.r.result.allowed, 0);
    assert_int_equal(s.r.result.retry_after_ms, 1000);
    sl_svc_allow(&svc, "k", 1, &p, 1, 0, 0, record, &s); /* a peek: not a decision */
    assert_int_equal(s.calls, 4);
    /* no allocation per decision: one pooled context served all four */
    assert_int_equal(svc.inflight, 0);
    assert_int_equal(sl_svc_pooled(&svc), 1);
    sl_worker_stats *w = &srv.stats.workers[0];
    assert_int_equal(sl_stat_get(&w->decisions[SL_FIXED_WINDOW]), 3);
    assert_int_equal(sl_stat_get(&w->allowed[SL_FIXED_WINDOW]), 2);
    assert_int_equal(sl_stat_get(&w->denied[SL_FIXED_WINDOW]), 1);
    assert_int_equal(sl_stat_get(&w->decisions[SL_TOKEN_BUCKET]), 0);
    for (int i = 0; i < 1000; i++) sl_svc_allow(&svc, "many", 4, &p, 1, i, 1, record, &s);
    assert_int_equal(s.calls, 1004);
    assert_int_equal(sl_svc_pooled(&svc), 1); /* still the one context */
    assert_int_equal(svc.inflight, 0);

    /* the engine's own refusal comes back as an error, nothing decided */
    p.algo = SL_FIXED_WINDOW;
    p.burst = 5;
    sl_svc_allow(&svc, "k2", 2, &p, 1, 0, 1, record, &s);
    assert_true(s.r.rc < 0);
    assert_non_null(strstr(s.err, "burst"));
    assert_int_equal(sl_stat_get(&w->decisions[SL_FIXED_WINDOW]), 1003); /* not one more */

    /* reset answers whether state existed */
    sl_svc_reset(&svc, "k", 1, 0, SL_ALGO_COUNT, record, &s);
    assert_int_equal(s.r.existed, 1);
    sl_svc_reset(&svc, "k", 1, 0, SL_ALGO_COUNT, record, &s);
    assert_int_equal(s.r.existed, 0);
}

static void latency_is_sampled(void **state)
{
    (void)state;
    sl_params p = SL_PARAMS_INIT;
    p.limit = 1000000;
    p.window_ms = 1000;
    seen s = {0};
    int n = SL_STATS_LAT_SAMPLE * 10;
    for (int i = 0; i < n; i++) sl_svc_allow(&svc, "lat", 3, &p, 1, 0, 1, record, &s);
    sl_stats_sum sum;
    sl_stats_sum_get(&srv.stats, &sum);
    assert_int_equal(sum.lat_count, 10);
    uint64_t in_buckets = 0;
    for (int b = 0; b <= SL_STATS_LAT_NBOUNDS; b++) in_buckets += sum.lat[b];
    assert_int_equal(in_buckets, 10);
    assert_true(sum.lat_sum_ns > 0);
}

static void values_name_the_problem(void **state)
{
    (void)state;
    char err[SL_SVC_ERR];
    int64_t v;
    sl_algo a;
    assert_int_equal(sl__parse_window("10x", 3, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "got '10x'"));
    assert_int_equal(sl__parse_algo("tokenbucket", 11, &a, err, sizeof err), -1);
    assert_string_equal(err, "unknown algorithm 'tokenbucket'");
    assert_int_equal(sl__parse_algo("GCRA", 4, &a, err, sizeof err), 0);
    assert_int_equal(a, SL_GCRA);
    assert_int_equal(sl__parse_limit("0", 1, &v, err, sizeof err), -1);
    assert_string_equal(err, "limit must be an integer between 1 and 1000000000000");
    assert_int_equal(sl__parse_key("", 0, err, sizeof err), -1);
    assert_int_equal(sl_svc_parse_at(&svc, 0, "-5", 2, &v, err, sizeof err), 0);
    assert_int_equal(v, -5);
    cfg.trust_client_time = 0;
    assert_int_equal(sl_svc_parse_at(&svc, 0, "5", 1, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "AT is refused"));
    cfg.trust_client_time = 1;
    char q[16];
    assert_string_equal(sl__quote(q, sizeof q, "a\nb", 3), "a?b");
    assert_string_equal(sl__quote(q, sizeof q, "0123456789abcdefghij", 20), "0123456789ab...");
}

/* AT t with --max-client-skew: at most the bound ahead of the server's
 * clock (inclusive), any distance behind it; the refusal names t, how far
 * ahead it is, the server's clock and the bound, and leaves *out alone. */
static void at_skew_is_bounded(void **state)
{
    (void)state;
    char err[SL_SVC_ERR], t[32];
    int64_t now = 1800000000000, v = -1;
    cfg.max_client_skew_ms = 3600000;
    snprintf(t, sizeof t, "%lld", (long long)(now + 3600000));
    assert_int_equal(sl_svc_parse_at(&svc, now, t, strlen(t), &v, err, sizeof err), 0);
    assert_int_equal(v, now + 3600000);
    v = -1;
    snprintf(t, sizeof t, "%lld", (long long)(now + 3600001));
    assert_int_equal(sl_svc_parse_at(&svc, now, t, strlen(t), &v, err, sizeof err), -1);
    assert_string_equal(err, "AT 1800003600001 is 3600001 ms ahead of the server's clock "
                             "(1800000000000); --max-client-skew allows at most 3600000 ms");
    assert_int_equal(v, -1);
    /* ten years ahead: refused; the far past: accepted (SPEC section 4) */
    assert_int_equal(sl_svc_parse_at(&svc, now, "2115576000000", 13, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "is 315576000000 ms ahead"));
    assert_int_equal(sl_svc_parse_at(&svc, now, "1", 1, &v, err, sizeof err), 0);
    assert_int_equal(v, 1);
    assert_int_equal(sl_svc_parse_at(&svc, now, "-4611686018427387903", 20, &v, err, sizeof err),
                     0);
    /* a bound of 0 is none: the largest time the engine takes is accepted */
    cfg.max_client_skew_ms = 0;
    assert_int_equal(sl_svc_parse_at(&svc, now, "4611686018427387903", 19, &v, err, sizeof err), 0);
    assert_int_equal(v, 4611686018427387903LL);
    /* a server clock far from t does not overflow the difference */
    cfg.max_client_skew_ms = 1;
    assert_int_equal(sl_svc_parse_at(&svc, -4611686018427387903LL, "4611686018427387903", 19, &v,
                                     err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "is 9223372036854775806 ms ahead"));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static const sl_rule_stats *rule_stats(const char *name)
{
    for (size_t i = 0; i < srv.stats.cap; i++)
        if (srv.stats.rules[i] && strcmp(srv.stats.rules[i]->name, name) == 0)
            return srv.stats.rules[i];
    return NULL;
}

static void check_one(const char *user, int64_t at, seen *s)
{
    sl_rule_entry e = {"user", 4, user, strlen(user)};
    const sl_rule_entry *d[1] = {&e};
    int nd[1] = {1};
    sl_svc_check_req q = {
        .domain = "api", .dlen = 3, .n = 1, .descs = d, .ndesc = nd, .cost = 1, .at = at};
    sl_svc_check(&svc, &q, record, s);
}

static void rule_stats_survive_reloads(void **state)
{
    (void)state;
    seen s = {0};
    check_one("bob", 0, &s);
    assert_int_equal(s.r.rc, SL_EINVAL);
    assert_string_equal(s.err, sl_svc_no_rules);

    char path[] = "/tmp/sluice-test-service-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "domain: api\ndescriptors:\n  - key: user\n"
                     "    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}\n");
    srv.live = sl_live_new(path);
    assert_non_null(srv.live);
    sl_live_on_load(srv.live, sl_stats_on_rules_load, &srv.stats);
    char err[SL_LIVE_ERR];
    assert_int_equal(sl_live_reload(srv.live, "test", err, sizeof err), 0);

    for (int i = 0; i < 3; i++) check_one("bob", 0, &s); /* 2 allowed, 1 denied */
    assert_int_equal(s.r.result.allowed, 0);
    assert_int_equal(s.st[0].code, SL_CHECK_OVER_LIMIT);
    /* counted under the descriptor path, not the rule's `name:` */
    assert_null(rule_stats("per_user"));
    const sl_rule_stats *rs = rule_stats("api.user");
    assert_non_null(rs);
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->matched), 3);
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->allowed), 2);
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->denied), 1);
    assert_int_equal(sl_stat_get(&srv.stats.workers[0].checks), 3);
    assert_int_equal(sl_stat_get(&srv.stats.workers[0].checks_denied), 1);

    /* a reload with the same descriptor (a new limit, renamed): the numbers go on */
    write_file(path, "domain: api\ndescriptors:\n  - key: user\n"
                     "    rate_limit: {name: per_user_v2, unit: minute, requests_per_unit: 5}\n"
                     "  - key: team\n"
                     "    rate_limit: {name: per_team, unit: minute, requests_per_unit: 5}\n");
    seen rl = {0};
    sl_svc_reload(&svc, "test", record, &rl); /* no loop: answered at once */
    assert_int_equal(rl.calls, 1);
    assert_int_equal(rl.r.rc, 0);
    assert_int_equal(rl.r.version, 2);
    check_one("carol", 0, &s);
    assert_int_equal(s.r.result.allowed, 1);
    assert_ptr_equal(rule_stats("api.user"), rs); /* the same entry */
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->matched), 4);
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->allowed), 3);
    assert_non_null(rule_stats("api.team"));
    assert_null(rule_stats("per_user_v2"));
    assert_int_equal(srv.stats.nrules, 2);

    /* a refused reload changes nothing and is counted */
    write_file(path, "domain: api\ndescriptors: [\n");
    sl_svc_reload(&svc, "test", record, &rl);
    assert_int_equal(rl.calls, 2);
    assert_true(rl.r.rc < 0);
    assert_non_null(strstr(rl.err, "rules not reloaded, version 2 keeps serving"));
    assert_int_equal(atomic_load(&srv.stats.reloads_ok), 2);
    assert_int_equal(atomic_load(&srv.stats.reloads_failed), 1);
    check_one("carol", 0, &s);
    assert_int_equal(sl_stat_get((_Atomic uint64_t *)&rs->matched), 5);
    unlink(path);
}

/* Loads text as the serving rules (the first load, or a reload). */
static void serve_rules(const char *path, const char *text)
{
    write_file(path, text);
    if (srv.live == NULL) {
        srv.live = sl_live_new(path);
        assert_non_null(srv.live);
        sl_live_on_load(srv.live, sl_stats_on_rules_load, &srv.stats);
    }
    char err[SL_LIVE_ERR];
    assert_int_equal(sl_live_reload(srv.live, "test", err, sizeof err), 0);
}

/* RL.CHECK in domain dom at time at, cost 1: descriptors of one or more
 * entries, given as "k=v" strings, a NULL between descriptors and two at
 * the end. */
static void check_in_over(const char *dom, int64_t at, seen *s, const sl_check_override *over,
                          const char *const *kv);
static void check_in(const char *dom, int64_t at, seen *s, const char *const *kv)
{
    check_in_over(dom, at, s, NULL, kv);
}

/* As check_in, descriptor i given the limit override over[i] (over NULL:
 * none; unit SL_UNIT_NONE: none for that descriptor). */
static void check_in_over(const char *dom, int64_t at, seen *s, const sl_check_override *over,
                          const char *const *kv)
{
    static sl_rule_entry e[32];
    const sl_rule_entry *d[8];
    int nd[8], n = 0, ne = 0;
    for (int i = 0; kv[i] != NULL; i++) {
        d[n] = &e[ne];
        nd[n] = 0;
        for (; kv[i] != NULL; i++, ne++, nd[n]++) {
            const char *eq = strchr(kv[i], '=');
            e[ne] = (sl_rule_entry){kv[i], (size_t)(eq - kv[i]), eq + 1, strlen(eq + 1)};
        }
        n++;
    }
    s->calls = 0;
    sl_svc_check_req q = {.domain = dom,
                          .dlen = strlen(dom),
                          .n = n,
                          .descs = d,
                          .ndesc = nd,
                          .over = over,
                          .cost = 1,
                          .at = at};
    sl_svc_check(&svc, &q, record, s);
    assert_int_equal(s->calls, 1);
    assert_int_equal(s->r.rc, 0);
}
#define CHECK_IN(dom, at, s, ...)                                                                  \
    check_in((dom), (at), (s), (const char *const[]){__VA_ARGS__, NULL, NULL})
/* One descriptor given the override {limit, unit}. */
#define CHECK_OVER(dom, at, s, limit, unit, ...)                                                   \
    check_in_over((dom), (at), (s), (const sl_check_override[]){{(limit), (unit)}},               \
                  (const char *const[]){__VA_ARGS__, NULL, NULL})

/* A rule's counts: matched allowed denied over_quota shadow elastic. */
static void counts_are_(int line, const char *name, uint64_t m, uint64_t a, uint64_t d, uint64_t q,
                        uint64_t sh, uint64_t el)
{
    const sl_rule_stats *rs = rule_stats(name);
    if (rs == NULL) fail_msg("line %d: no statistics named '%s'", line, name);
#define G(f) sl_stat_get((_Atomic uint64_t *)&rs->f)
    if (G(matched) != m || G(allowed) != a || G(denied) != d || G(over_quota) != q ||
        G(shadow) != sh || G(elastic) != el)
        fail_msg("line %d: %s: matched=%llu allowed=%llu denied=%llu over_quota=%llu shadow=%llu "
                 "elastic=%llu, want %llu %llu %llu %llu %llu %llu",
                 line, name, (unsigned long long)G(matched), (unsigned long long)G(allowed),
                 (unsigned long long)G(denied), (unsigned long long)G(over_quota),
                 (unsigned long long)G(shadow), (unsigned long long)G(elastic),
                 (unsigned long long)m, (unsigned long long)a, (unsigned long long)d,
                 (unsigned long long)q, (unsigned long long)sh, (unsigned long long)el);
    /* every evaluation is exactly one of these */
    assert_int_equal(G(matched), G(allowed) + G(denied) + G(over_quota) + G(shadow));
#undef G
}
#define counts_are(...) counts_are_(__LINE__, __VA_ARGS__)

static const char *code(const seen *s, int i) { return sl_check_code_name(s->st[i].code); }

/* A quota-mode limit that is over but did not deny is counted as
 * over_quota, not denied: when another quota descriptor carried the
 * request, and when an enforced limit denied it.  Only when every quota
 * descriptor is over (the request denied for that) is it denied. */
static void quota_over_is_its_own_count(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-test-service-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    serve_rules(path, "domain: route\n"
                      "descriptors:\n"
                      "  - key: backend\n"
                      "    value: primary\n"
                      "    quota_mode: true\n"
                      "    rate_limit: {name: primary, unit: minute, requests_per_unit: 2}\n"
                      "  - key: backend\n"
                      "    value: fallback\n"
                      "    quota_mode: true\n"
                      "    rate_limit: {name: fallback, unit: minute, requests_per_unit: 3}\n"
                      "  - key: user\n"
                      "    rate_limit: {name: per_user, unit: minute, requests_per_unit: 1}\n");
    seen s = {0};
    const char *want[][2] = {{"OK", "OK"},
                             {"OK", "OK"},
                             {"OVER_QUOTA", "OK"},         /* fallback carries it */
                             {"OVER_LIMIT", "OVER_LIMIT"}, /* both over: denied */
                             {"OVER_LIMIT", "OVER_LIMIT"},
                             {"OVER_LIMIT", "OVER_LIMIT"}};
    for (int i = 0; i < 6; i++) {
        CHECK_IN("route", i, &s, "backend=primary", NULL, "backend=fallback");
        assert_int_equal(s.r.result.allowed, i < 3);
        assert_string_equal(code(&s, 0), want[i][0]);
        assert_string_equal(code(&s, 1), want[i][1]);
    }
    counts_are("route.backend_primary", 6, 2, 3, 1, 0, 0);
    counts_are("route.backend_fallback", 6, 3, 3, 0, 0, 0);

    /* the next minute: an enforced limit denies while primary is over and
     * fallback has room -- primary answers OVER_QUOTA, not what denied */
    int64_t t = 60000;
    CHECK_IN("route", t, &s, "backend=primary", NULL, "backend=fallback", NULL, "user=bob");
    assert_int_equal(s.r.result.allowed, 1);
    CHECK_IN("route", t + 1, &s, "backend=primary", NULL, "backend=fallback");
    assert_int_equal(s.r.result.allowed, 1); /* primary now at 2 of 2 */
    CHECK_IN("route", t + 2, &s, "backend=primary", NULL, "backend=fallback", NULL, "user=bob");
    assert_int_equal(s.r.result.allowed, 0);
    assert_string_equal(code(&s, 0), "OVER_QUOTA");
    assert_string_equal(code(&s, 1), "OK");
    assert_string_equal(code(&s, 2), "OVER_LIMIT");
    counts_are("route.backend_primary", 9, 4, 3, 2, 0, 0);
    counts_are("route.backend_fallback", 9, 6, 3, 0, 0, 0);
    counts_are("route.user", 2, 1, 1, 0, 0, 0);
    unlink(path);
}

static const sl_rule_stats *must(const char *name)
{
    const sl_rule_stats *rs = rule_stats(name);
    if (rs == NULL) fail_msg("no statistics named '%s'", name);
    return rs;
}

static uint64_t overflow_of(const char *name)
{
    return sl_stat_get((_Atomic uint64_t *)&must(name)->overflow);
}

static const char metric_rules[] =
    "domain: m\n"
    "descriptors:\n"
    "  - key: route                 # Lyft's README example: route and method in the name\n"
    "    value_to_metric: true\n"
    "    descriptors:\n"
    "      - key: method\n"
    "        value_to_metric: true\n"
    "        descriptors:\n"
    "          - key: subject\n"
    "            rate_limit: {unit: minute, requests_per_unit: 2}\n"
    "  - key: key7\n"
    "    detailed_metric: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 70}\n"
    "  - key: team                  # two limits: #1, #2 as their rules\n"
    "    detailed_metric: true\n"
    "    rate_limit:\n"
    "      - {unit: second, requests_per_unit: 1}\n"
    "      - {unit: minute, requests_per_unit: 5}\n"
    "  - key: plan                  # every level exact: Lyft's name is the rule's\n"
    "    value: gold\n"
    "    detailed_metric: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    "  - key: other                 # a rule named as key7's value 'shared'\n"
    "    rate_limit: {name: m.key7_shared, unit: minute, requests_per_unit: 9}\n"
    "  - key: ip\n"
    "    rate_limit: {unit: minute, requests_per_unit: 3}\n";

/* detailed_metric and value_to_metric: each request counted under its rule
 * AND under Lyft's per-value name (sl_rules_metric_name), names written as
 * INFO writes them, at most SL_STATS_MAX_VALUES per rule (then the rule's
 * overflow), kept across reloads like the rules' own. */
static void per_value_statistics(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-test-service-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    serve_rules(path, metric_rules);
    seen s = {0};
    for (int i = 0; i < 3; i++) CHECK_IN("m", i, &s, "route=/a", "method=GET", "subject=u1");
    assert_string_equal(code(&s, 0), "OVER_LIMIT");
    CHECK_IN("m", 10, &s, "route=/b", "method=POST", "subject=u1");
    counts_are("m.route.method.subject", 4, 3, 1, 0, 0, 0); /* the rule: every request */
    counts_are("m.route_/a.method_GET.subject", 3, 2, 1, 0, 0, 0);
    counts_are("m.route_/b.method_POST.subject", 1, 1, 0, 0, 0, 0);
    assert_int_equal(must("m.route.method.subject")->nvalues, 2);
    assert_true(must("m.route.method.subject")->per_value);
    assert_int_equal(overflow_of("m.route.method.subject"), 0);

    /* detailed_metric: Lyft's basic_config key7 */
    CHECK_IN("m", 20, &s, "key7=unspecified_value");
    CHECK_IN("m", 21, &s, "key7=unspecified_value");
    CHECK_IN("m", 22, &s, "key7=another");
    counts_are("m.key7", 3, 3, 0, 0, 0, 0);
    counts_are("m.key7_unspecified_value", 2, 2, 0, 0, 0, 0);
    counts_are("m.key7_another", 1, 1, 0, 0, 0, 0);
    /* a node of two limits: each limit's own name, "#N" as the rules' */
    CHECK_IN("m", 30, &s, "team=t1");
    CHECK_IN("m", 31, &s, "team=t1"); /* over 1 a second: denied, both peeked */
    assert_int_equal(s.r.result.allowed, 0);
    counts_are("m.team#1", 2, 1, 1, 0, 0, 0);
    counts_are("m.team_t1#1", 2, 1, 1, 0, 0, 0);
    counts_are("m.team_t1#2", 2, 2, 0, 0, 0, 0);
    assert_null(rule_stats("m.team_t1"));
    /* Lyft's name is the rule's own: counted once */
    CHECK_IN("m", 40, &s, "plan=gold");
    counts_are("m.plan_gold", 1, 1, 0, 0, 0, 0);
    assert_int_equal(must("m.plan_gold")->nvalues, 0);
    /* a rule's `name:` names no statistics (Lyft's are by path): the rule
     * named m.key7_shared counts under m.other, key7's value 'shared'
     * under its per-value name alone */
    CHECK_IN("m", 50, &s, "other=x");
    CHECK_IN("m", 51, &s, "key7=shared");
    counts_are("m.other", 1, 1, 0, 0, 0, 0);
    counts_are("m.key7_shared", 1, 1, 0, 0, 0, 0);
    assert_false(must("m.key7_shared")->per_value); /* a per-value entry: no values= */
    /* request bytes in a name: outside '!'..'~' and % : , as %XX */
    CHECK_IN("m", 60, &s, "key7=a b:c,d%\r\n\xff");
    counts_are("m.key7_a%20b%3Ac%2Cd%25%0D%0A%FF", 1, 1, 0, 0, 0, 0);
    /* a name longer than SL_STATS_MAX_NAME (200 blanks: a 208-byte key,
     * a 607-byte name): not tracked, the overflow */
    char big[200 + 6];
    memcpy(big, "key7=", 5);
    memset(big + 5, ' ', 200);
    big[205] = '\0';
    size_t before = srv.stats.nrules;
    CHECK_IN("m", 70, &s, big);
    assert_int_equal(srv.stats.nrules, before);
    counts_are("m.key7", 6, 6, 0, 0, 0, 0);
    assert_int_equal(overflow_of("m.key7"), 1);
    assert_int_equal(must("m.key7")->nvalues, 4);
    /* other rules: no per-value work, no values= */
    CHECK_IN("m", 80, &s, "ip=10.0.0.1");
    counts_are("m.ip", 1, 1, 0, 0, 0, 0);
    assert_false(must("m.ip")->per_value);
    assert_null(must("m.ip")->values);

    /* the cap: 1000 names for a rule, then its overflow; names it has go
     * on counting */
    char v[64];
    for (int i = 0; i < SL_STATS_MAX_VALUES + 5; i++) {
        snprintf(v, sizeof v, "route=/v%d", i);
        CHECK_IN("m", 1000 + i, &s, v, "method=GET", "subject=u2");
    }
    const sl_rule_stats *rt = must("m.route.method.subject");
    assert_int_equal(rt->nvalues, SL_STATS_MAX_VALUES);
    assert_int_equal(overflow_of("m.route.method.subject"), 2 + 5); /* /v998 .. /v1004 */
    counts_are("m.route.method.subject", 4 + SL_STATS_MAX_VALUES + 5, 3 + SL_STATS_MAX_VALUES + 5,
               1, 0, 0, 0);
    counts_are("m.route_/v997.method_GET.subject", 1, 1, 0, 0, 0, 0);
    assert_null(rule_stats("m.route_/v998.method_GET.subject"));
    CHECK_IN("m", 3000, &s, "route=/a", "method=GET", "subject=u3");
    counts_are("m.route_/a.method_GET.subject", 4, 3, 1, 0, 0, 0);
    assert_int_equal(overflow_of("m.route.method.subject"), 7);

    /* a reload: the same entries go on, the cap too */
    size_t tracked = srv.stats.nrules;
    serve_rules(path, metric_rules);
    CHECK_IN("m", 4000, &s, "route=/b", "method=POST", "subject=u1");
    counts_are("m.route_/b.method_POST.subject", 2, 2, 0, 0, 0, 0);
    CHECK_IN("m", 4001, &s, "route=/new", "method=GET", "subject=u1");
    assert_int_equal(overflow_of("m.route.method.subject"), 8);
    assert_int_equal(srv.stats.nrules, tracked);
    assert_ptr_equal(must("m.route.method.subject"), rt);
    unlink(path);
}

/* envoyproxy/ratelimit's statistics names (its config_test.go): a named
 * limit counts under its descriptor path (TestBasicConfig's key4, named
 * key4_rate_limit: test-domain.key4), a limit override under the
 * request's descriptorKey (TestConfigLimitOverride:
 * test-domain.key1_value1.subkey1_something), each request once: matched
 * is the peer's total_hits, denied its over_limit, allowed its
 * within_limit (for requests of one hit).  At most SL_STATS_MAX_VALUES
 * override names per domain; past them the domain's entry counts. */
static const char override_rules[] =
    "domain: test-domain\n"
    "descriptors:\n"
    "  - key: key4\n"
    "    rate_limit: {name: key4_rate_limit, unit: day, requests_per_unit: 1}\n"
    "  - key: plan\n"
    "    value: gold\n"
    "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    "  - key: team\n"
    "    rate_limit:\n"
    "      - {unit: second, requests_per_unit: 1, name: team_burst}\n"
    "      - {unit: minute, requests_per_unit: 5, name: team_minute}\n";

static void override_statistics(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-test-service-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    serve_rules(path, override_rules);
    seen s = {0};
    const char *D = "test-domain";

    /* TestBasicConfig, key4: the name is for replaces and current_limit */
    CHECK_IN(D, 0, &s, "key4=foo");
    CHECK_IN(D, 1, &s, "key4=foo");
    assert_string_equal(code(&s, 0), "OVER_LIMIT");
    counts_are("test-domain.key4", 2, 1, 1, 0, 0, 0);
    assert_null(rule_stats("key4_rate_limit"));
    /* named limits of a node of several: the path and "#N", as unnamed */
    CHECK_IN(D, 0, &s, "team=red");
    CHECK_IN(D, 1, &s, "team=red"); /* over 1 a second: denied, both peeked */
    assert_int_equal(s.r.result.allowed, 0);
    counts_are("test-domain.team#1", 2, 1, 1, 0, 0, 0);
    counts_are("test-domain.team#2", 2, 2, 0, 0, 0, 0);
    assert_null(rule_stats("team_burst"));
    assert_null(rule_stats("team_minute"));

    /* TestConfigLimitOverride: 10 a day, then 2 an hour (its own counter:
     * the override's key holds the unit), the same name counting on */
    const char *k = "test-domain.key1_value1.subkey1_something";
    CHECK_OVER(D, 0, &s, 10, SL_UNIT_DAY, "key1=value1", "subkey1=something");
    assert_string_equal(code(&s, 0), "OK");
    counts_are(k, 1, 1, 0, 0, 0, 0);
    for (int i = 0; i < 3; i++)
        CHECK_OVER(D, 10 + i, &s, 2, SL_UNIT_HOUR, "key1=value1", "subkey1=something");
    assert_string_equal(code(&s, 0), "OVER_LIMIT");
    counts_are(k, 4, 3, 1, 0, 0, 0);
    CHECK_OVER(D, 20, &s, 42, SL_UNIT_HOUR, "key1=value1", "subkey1=something_else");
    counts_are("test-domain.key1_value1.subkey1_something_else", 1, 1, 0, 0, 0, 0);
    counts_are(k, 4, 3, 1, 0, 0, 0);
    /* an empty value: "key" alone in the name; limit 0: denied */
    CHECK_OVER(D, 30, &s, 0, SL_UNIT_MINUTE, "key1=value1", "subkey1=");
    assert_string_equal(code(&s, 0), "OVER_LIMIT");
    counts_are("test-domain.key1_value1.subkey1", 1, 0, 1, 0, 0, 0);
    /* the names hang from the domain's entry, which counts none of them */
    const sl_rule_stats *dom = must("test-domain");
    assert_true(dom->per_value);
    assert_int_equal(dom->nvalues, 3);
    counts_are("test-domain", 0, 0, 0, 0, 0, 0);
    assert_int_equal(overflow_of("test-domain"), 0);
    /* a domain without rules: NO_RULE, nothing counted (TestConfigLimitOverride's foo_domain) */
    size_t tracked = srv.stats.nrules;
    CHECK_OVER("foo_domain", 40, &s, 10, SL_UNIT_DAY, "key1=value1");
    assert_string_equal(code(&s, 0), "NO_RULE");
    assert_int_equal(srv.stats.nrules, tracked);
    /* the same name is the same entry: an override of plan=gold counts
     * with the rule of that path, as the peer's counters by name */
    CHECK_IN(D, 50, &s, "plan=gold");
    CHECK_OVER(D, 51, &s, 7, SL_UNIT_MINUTE, "plan=gold");
    counts_are("test-domain.plan_gold", 2, 2, 0, 0, 0, 0);
    assert_int_equal(dom->nvalues, 4);
    /* a rule's descriptor and an override in one request: each its own */
    check_in_over(D, 60, &s,
                  (const sl_check_override[]){{0, SL_UNIT_NONE}, {5, SL_UNIT_MINUTE}},
                  (const char *const[]){"key4=bar", NULL, "key1=value1", "subkey1=mixed", NULL,
                                        NULL});
    counts_are("test-domain.key4", 3, 2, 1, 0, 0, 0);
    counts_are("test-domain.key1_value1.subkey1_mixed", 1, 1, 0, 0, 0, 0);
    /* request bytes written as INFO writes them; a name longer than
     * SL_STATS_MAX_NAME once so written (200 blanks: 600 bytes) is not
     * tracked: the domain's entry counts it, and its overflow */
    CHECK_OVER(D, 70, &s, 5, SL_UNIT_MINUTE, "key1=a b:c");
    counts_are("test-domain.key1_a%20b%3Ac", 1, 1, 0, 0, 0, 0);
    char big[200 + 6];
    memcpy(big, "key1=", 5);
    memset(big + 5, ' ', 200);
    big[205] = '\0';
    tracked = srv.stats.nrules;
    CHECK_OVER(D, 80, &s, 5, SL_UNIT_MINUTE, big);
    assert_int_equal(srv.stats.nrules, tracked);
    counts_are("test-domain", 1, 1, 0, 0, 0, 0);
    assert_int_equal(overflow_of("test-domain"), 1);
    size_t had = dom->nvalues; /* 6 */
    assert_int_equal(had, 6);

    /* the bound: a client sending ever new entries gets 1,000 names in the
     * domain, no more; then the domain's entry counts them (and its
     * overflow), and the names it has go on counting */
    tracked = srv.stats.nrules;
    char v[64];
    for (int i = 0; i < SL_STATS_MAX_VALUES + 5; i++) {
        snprintf(v, sizeof v, "user=u%d", i);
        CHECK_OVER(D, 1000 + i, &s, 1, SL_UNIT_MINUTE, v);
        assert_int_equal(s.r.result.allowed, 1);
    }
    size_t fresh = SL_STATS_MAX_VALUES - had; /* names the loop got */
    assert_int_equal(dom->nvalues, SL_STATS_MAX_VALUES);
    assert_int_equal(srv.stats.nrules, tracked + fresh);
    uint64_t past = SL_STATS_MAX_VALUES + 5 - fresh;
    counts_are("test-domain", 1 + past, 1 + past, 0, 0, 0, 0);
    assert_int_equal(overflow_of("test-domain"), 1 + past);
    snprintf(v, sizeof v, "test-domain.user_u%zu", fresh - 1);
    counts_are(v, 1, 1, 0, 0, 0, 0);
    snprintf(v, sizeof v, "test-domain.user_u%zu", fresh);
    assert_null(rule_stats(v));
    CHECK_OVER(D, 3000, &s, 2, SL_UNIT_HOUR, "key1=value1", "subkey1=something");
    assert_string_equal(code(&s, 0), "OVER_LIMIT");
    counts_are(k, 5, 3, 2, 0, 0, 0);
    assert_int_equal(overflow_of("test-domain"), 1 + past);
    /* rules keep their own names past the bound: the cap is the domain's
     * override names only */
    CHECK_IN(D, 3001, &s, "key4=baz");
    counts_are("test-domain.key4", 4, 3, 1, 0, 0, 0);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(allow_counts_by_algorithm_and_outcome, setup, teardown),
        cmocka_unit_test_setup_teardown(latency_is_sampled, setup, teardown),
        cmocka_unit_test_setup_teardown(values_name_the_problem, setup, teardown),
        cmocka_unit_test_setup_teardown(at_skew_is_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(rule_stats_survive_reloads, setup, teardown),
        cmocka_unit_test_setup_teardown(quota_over_is_its_own_count, setup, teardown),
        cmocka_unit_test_setup_teardown(per_value_statistics, setup, teardown),
        cmocka_unit_test_setup_teardown(override_statistics, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
