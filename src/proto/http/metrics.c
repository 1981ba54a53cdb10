/*
 * metrics.c -- GET /metrics and GET /readyz (metrics.h).
 *
 * The page reads what INFO reads: the workers' shards summed
 * (sl_stats_sum_get), the backend's numbers, the rules' reload counts and
 * version, and the per-rule entries (stats.h).  Those entries are keyed by
 * name only, across reloads; a rule's domain is known only from the
 * serving set, so the per-rule series are those of the serving set's
 * limits, walked domain by domain in load order: an entry bound to several
 * limits (the same name twice) is shown once, under the first.  A rule's
 * per-value names (Lyft's detailed_metric, value_to_metric) are listed
 * from its entry (sl_stats_values_list) in a family of their own, as they
 * count the same requests again.  Entries of rules a reload removed are
 * not shown (they count on if the name comes back).
 *
 * Counters are read one by one with relaxed loads while workers add: a
 * page is not a snapshot of one instant, but every counter only grows
 * and a histogram's buckets and count come from the same loads.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "live.h"
#include "metrics.h"

/* ---- writing ---------------------------------------------------------------- */

int sl_metrics_label(struct evbuffer *b, const char *s, size_t n)
{
    size_t run = 0; /* bytes of s[i - run, i) that need no escape */
    for (size_t i = 0; i < n; i++) {
        const char *esc = s[i] == '\\'   ? "\\\\"
                          : s[i] == '"'  ? "\\\""
                          : s[i] == '\n' ? "\\n"
                                         : NULL;
        if (esc == NULL) {
            run++;
            continue;
        }
        if (evbuffer_add(b, s + i - run, run) != 0 || evbuffer_add(b, esc, 2) != 0) return -1;
        run = 0;
    }
    return evbuffer_add(b, s + n - run, run);
}

/* The page being written: the buffer, and whether anything failed (then
 * the page is dropped, so each write need not be checked). */
typedef struct page {
    struct evbuffer *b;
    int failed;
} page;

static void put(page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(page *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (evbuffer_add_vprintf(p->b, fmt, ap) < 0) p->failed = 1;
    va_end(ap);
}

static void label(page *p, const char *s, size_t n)
{
    if (sl_metrics_label(p->b, s, n) != 0) p->failed = 1;
}

/* "# HELP name help\n# TYPE name type\n" */
static void family(page *p, const char *name, const char *type, const char *help)
{
    put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(page *p, const char *name, uint64_t v) { put(p, "%s %" PRIu64 "\n", name, v); }

#define GET(rs, f) sl_stat_get((_Atomic uint64_t *)&(rs)->f)

/* ---- the serving set's rules -------------------------------------------------- */

/* One rule shown: its statistics entry, the domain of the first limit
 * bound to it, and whether a node bound to it names statistics per value
 * (the serving set's metric_dynamic: rs->per_value is the table's, written
 * under its lock by every bind). */
typedef struct row {
    const sl_rule_stats *rs;
    const sl_rule_domain *d;
    int per_value;
} row;

/* The rules to show, distinct entries in load order, at most
 * SL_METRICS_MAX_RULES; `seen` is an open-addressing set of the rows taken
 * (their index + 1; SEEN_CAP slots, over twice the cap, so it never
 * fills). */
#define SEEN_CAP 32768
typedef struct rules_walk {
    row *rows;
    size_t n;
    uint32_t *seen;
    uint64_t omitted; /* limits not shown: their rule was past the cap */
} rules_walk;

_Static_assert(SEEN_CAP >= 2 * SL_METRICS_MAX_RULES, "the set of entries shown never fills");

static void walk_node(rules_walk *w, const sl_rule_domain *d, const sl_rule_node *node)
{
    for (int j = 0; j < node->nlimits; j++) {
        const sl_rule_stats *rs = node->limits[j].stats;
        if (rs == NULL) continue; /* not tracked (stats.h: rules_untracked) */
        size_t i = (size_t)(((uintptr_t)rs >> 4) * 0x9E3779B97F4A7C15ULL >> 40) & (SEEN_CAP - 1);
        while (w->seen[i] != 0 && w->rows[w->seen[i] - 1].rs != rs) i = (i + 1) & (SEEN_CAP - 1);
        if (w->seen[i] != 0) { /* shown under an earlier limit */
            w->rows[w->seen[i] - 1].per_value |= node->metric_dynamic != 0;
            continue;
        }
        if (w->n >= SL_METRICS_MAX_RULES) {
            w->omitted++;
            continue;
        }
        w->rows[w->n++] = (row){rs, d, node->metric_dynamic != 0};
        w->seen[i] = (uint32_t)w->n;
    }
    for (int c = 0; c < node->nchildren; c++) walk_node(w, d, &node->children[c]);
}

/* The rule labels of row r: domain="...",rule="..." */
static void rule_labels(page *p, const row *r)
{
    put(p, "domain=\"");
    label(p, r->d->name, r->d->namelen);
    put(p, "\",rule=\"");
    label(p, r->rs->name, strlen(r->rs->name));
    put(p, "\"");
}

static const char *const outcomes[] = {"allowed", "denied", "over_quota", "shadow"};

static uint64_t outcome_count(const sl_rule_stats *rs, int o)
{
    switch (o) {
    case 0: return GET(rs, allowed);
    case 1: return GET(rs, denied);
    case 2: return GET(rs, over_quota);
    default: return GET(rs, shadow);
    }
}

static void write_rules(page *p, const sl_rules *r, uint64_t omitted[2])
{
    rules_walk w = {0};
    size_t nl = 0;
    if (r != NULL) {
        w.rows = malloc(SL_METRICS_MAX_RULES * sizeof *w.rows);
        w.seen = calloc(SEEN_CAP, sizeof *w.seen);
        if (w.rows == NULL || w.seen == NULL) {
            p->failed = 1;
            goto out;
        }
        for (int i = 0; i < sl_rules_ndomains(r); i++) {
            const sl_rule_domain *d = sl_rules_domain(r, i);
            walk_node(&w, d, &d->root);
        }
    }
    omitted[0] = w.omitted;
    family(p, "sluice_rule_requests_total", "counter",
           "RL.CHECK requests that evaluated the rule's limit, by outcome: allowed (elastic "
           "included), denied, over_quota (over in quota mode, not denied for it), shadow (over in "
           "shadow mode, allowed anyway). Their sum is the rule's matched count.");
    for (size_t i = 0; i < w.n; i++)
        for (int o = 0; o < 4; o++) {
            put(p, "sluice_rule_requests_total{");
            rule_labels(p, &w.rows[i]);
            put(p, ",outcome=\"%s\"} %" PRIu64 "\n", outcomes[o], outcome_count(w.rows[i].rs, o));
        }
    family(p, "sluice_rule_elastic_total", "counter",
           "RL.CHECK requests the rule allowed above its limit, on the spare pool (of allowed).");
    for (size_t i = 0; i < w.n; i++) {
        put(p, "sluice_rule_elastic_total{");
        rule_labels(p, &w.rows[i]);
        put(p, "} %" PRIu64 "\n", GET(w.rows[i].rs, elastic));
    }
    /* per-value names: only rules bound to a node that names them so */
    family(p, "sluice_rule_value_requests_total", "counter",
           "The same requests again, under Lyft's per-value statistics name (detailed_metric, "
           "value_to_metric), by outcome.");
    const sl_rule_stats **vals = NULL;
    if (w.n > 0) vals = malloc(SL_METRICS_MAX_VALUES * sizeof *vals);
    if (w.n > 0 && vals == NULL) p->failed = 1;
    for (size_t i = 0; vals != NULL && i < w.n; i++) {
        if (!w.rows[i].per_value) continue;
        size_t room = SL_METRICS_MAX_VALUES - nl;
        size_t has = sl_stats_values_list(w.rows[i].rs, vals, room);
        size_t k = has < room ? has : room;
        omitted[1] += has - k;
        nl += k;
        for (size_t v = 0; v < k; v++)
            for (int o = 0; o < 4; o++) {
                put(p, "sluice_rule_value_requests_total{");
                rule_labels(p, &w.rows[i]);
                put(p, ",name=\"");
                label(p, vals[v]->name, strlen(vals[v]->name));
                put(p, "\",outcome=\"%s\"} %" PRIu64 "\n", outcomes[o], outcome_count(vals[v], o));
            }
    }
    free(vals);
    family(p, "sluice_rule_value_overflow_total", "counter",
           "Requests of the rule whose per-value name was not tracked (over SL_STATS_MAX_VALUES "
           "names, or too long).");
    for (size_t i = 0; i < w.n; i++) {
        if (!w.rows[i].per_value) continue;
        put(p, "sluice_rule_value_overflow_total{");
        rule_labels(p, &w.rows[i]);
        put(p, "} %" PRIu64 "\n", GET(w.rows[i].rs, overflow));
    }
out:
    free(w.rows);
    free(w.seen);
}

/* ---- the page --------------------------------------------------------------- */

int sl_metrics_write(struct evbuffer *b, sl_srv *srv, const sl_rules *r)
{
    static const int64_t bounds_us[SL_STATS_LAT_NBOUNDS] = SL_STATS_LAT_BOUNDS_US;
    page p = {b, 0};
    sl_stats_sum sum;
    sl_backend_stats bs;
    sl_stats_sum_get(&srv->stats, &sum);
    sl_backend_stats_get(srv->backend, &bs);

    family(&p, "sluice_decisions_total", "counter",
           "RL.ALLOW and GET /v1/allow decisions (RL.PEEK not included), by algorithm and "
           "outcome.");
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const char *an = sl_algo_name((sl_algo)a);
        put(&p, "sluice_decisions_total{algorithm=\"%s\",outcome=\"allowed\"} %" PRIu64 "\n", an,
            sum.allowed[a]);
        put(&p, "sluice_decisions_total{algorithm=\"%s\",outcome=\"denied\"} %" PRIu64 "\n", an,
            sum.denied[a]);
    }
    family(&p, "sluice_checks_total", "counter", "RL.CHECK decisions, by overall outcome.");
    put(&p, "sluice_checks_total{outcome=\"allowed\"} %" PRIu64 "\n",
        sum.checks - sum.checks_denied);
    put(&p, "sluice_checks_total{outcome=\"denied\"} %" PRIu64 "\n", sum.checks_denied);

    uint64_t omitted[2] = {0, 0};
    write_rules(&p, r, omitted);

    family(&p, "sluice_decision_latency_seconds", "histogram",
           "Time of sampled decisions (one in SL_STATS_LAT_SAMPLE per worker), from submission "
           "to completion.");
    uint64_t cum = 0;
    for (int i = 0; i < SL_STATS_LAT_NBOUNDS; i++) {
        cum += sum.lat[i];
        put(&p, "sluice_decision_latency_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
            (double)bounds_us[i] / 1e6, cum);
    }
    put(&p, "sluice_decision_latency_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", sum.lat_count);
    put(&p, "sluice_decision_latency_seconds_sum %.9f\n", (double)sum.lat_sum_ns / 1e9);
    sample(&p, "sluice_decision_latency_seconds_count", sum.lat_count);

    family(&p, "sluice_keys", "gauge", "Keys the backend holds.");
    sample(&p, "sluice_keys", bs.keys);
    family(&p, "sluice_memory_bytes", "gauge", "The backend's accounted memory.");
    sample(&p, "sluice_memory_bytes", bs.bytes);
    family(&p, "sluice_memory_max_bytes", "gauge", "The bound on it (--max-memory); 0 = none.");
    sample(&p, "sluice_memory_max_bytes", bs.max_bytes);
    family(&p, "sluice_evictions_total", "counter", "Keys dropped to stay under the bound.");
    sample(&p, "sluice_evictions_total", bs.evictions);
    family(&p, "sluice_expired_total", "counter", "Keys dropped because their time was up.");
    sample(&p, "sluice_expired_total", bs.expired);
    family(&p, "sluice_store_full_refusals_total", "counter",
           "Requests refused: the store full, nothing at rest to drop.");
    sample(&p, "sluice_store_full_refusals_total", bs.refused);

    family(&p, "sluice_rules_reloads_total", "counter",
           "Rules loads by result (ok includes the first load at start).");
    put(&p, "sluice_rules_reloads_total{result=\"ok\"} %" PRIu64 "\n",
        sl_stat_get(&srv->stats.reloads_ok));
    put(&p, "sluice_rules_reloads_total{result=\"failed\"} %" PRIu64 "\n",
        sl_stat_get(&srv->stats.reloads_failed));
    family(&p, "sluice_rules_version", "gauge",
           "Version (generation) of the serving rules; 0 = none loaded.");
    sample(&p, "sluice_rules_version", r != NULL ? sl_rules_generation(r) : 0);
    family(&p, "sluice_rules_untracked", "gauge",
           "Limits bound to no statistics entry (over SL_STATS_MAX_RULES names).");
    sample(&p, "sluice_rules_untracked", sl_stat_get(&srv->stats.untracked));

    family(&p, "sluice_clients", "gauge", "Client connections open now, by protocol.");
    /* srv->clients counts every connection (--max-clients); HTTP's are
     * also in http_clients, gRPC's in grpc_clients.  Separate loads: a
     * connection coming or going between them may show for an instant in
     * neither or both. */
    int64_t http = atomic_load(&srv->stats.http_clients), all = atomic_load(&srv->clients);
    int64_t grpc = atomic_load(&srv->stats.grpc_clients);
    int64_t resp = all - http - grpc;
    put(&p, "sluice_clients{protocol=\"resp\"} %" PRId64 "\n", resp > 0 ? resp : 0);
    put(&p, "sluice_clients{protocol=\"http\"} %" PRId64 "\n", http);
    put(&p, "sluice_clients{protocol=\"grpc\"} %" PRId64 "\n", grpc);
    family(&p, "sluice_clients_max", "gauge", "The bound on connections at once (--max-clients).");
    sample(&p, "sluice_clients_max", (uint64_t)srv->cfg->max_clients);

    family(&p, "sluice_metrics_omitted", "gauge",
           "Left off this page by its caps: limits whose rule was past SL_METRICS_MAX_RULES, "
           "per-value names past SL_METRICS_MAX_VALUES.");
    put(&p, "sluice_metrics_omitted{what=\"rules\"} %" PRIu64 "\n", omitted[0]);
    put(&p, "sluice_metrics_omitted{what=\"values\"} %" PRIu64 "\n", omitted[1]);
    if (sl_backend_metrics_write(b, srv->backend) != 0) p.failed = 1;
    return p.failed ? -1 : 0;
}

/* ---- readiness -------------------------------------------------------------- */

int sl_http_ready(const sl_srv *srv, const sl_rules *r, char *why, size_t whylen)
{
    if (srv->cfg->rules[0] != '\0' && r == NULL) {
        snprintf(why, whylen, "no rules loaded from --rules");
        return 0;
    }
    const sl_backend *be = srv->backend;
    if (be->err != 0) {
        snprintf(why, whylen, "backend %s: %s", be->ops->name,
                 be->errstr[0] != '\0' ? be->errstr : sl_strerror(be->err));
        return 0;
    }
    if (whylen > 0) why[0] = '\0';
    return 1;
}

/* ---- the endpoints -------------------------------------------------------------- */

void sl_http_metrics(http_worker *hw, const sl_hreq *req)
{
    struct evbuffer *b = evbuffer_new();
    const char *p = NULL;
    if (b == NULL || sl_metrics_write(b, hw->svc->srv, sl_svc_rules(hw->svc, NULL)) != 0 ||
        (p = (const char *)evbuffer_pullup(b, -1)) == NULL) {
        if (b != NULL) evbuffer_free(b);
        sl_http_send_error(&req->a, 500, "Internal Server Error", "out of memory writing /metrics");
        return;
    }
    sl_http_send(&req->a, 200, "OK", NULL, SL_METRICS_CONTENT_TYPE, p, evbuffer_get_length(b));
    evbuffer_free(b);
}

void sl_http_readyz(http_worker *hw, const sl_hreq *req)
{
    char why[256];
    sl_srv *srv = hw->svc->srv;
    const sl_rules *r = sl_svc_rules(hw->svc, NULL);
    if (!sl_http_ready(srv, r, why, sizeof why)) {
        sl_http_send_json(&req->a, 503, "Service Unavailable",
                          json_pack("{s:s,s:s}", "status", "not ready", "reason", why));
        return;
    }
    sl_http_send_json(&req->a, 200, "OK",
                      json_pack("{s:s,s:I,s:s}", "status", "ready", "rules_version",
                                (json_int_t)(r != NULL ? sl_rules_generation(r) : 0), "backend",
                                srv->backend->ops->name));
}
