/*
 * status.c -- the live status page (docs/http.md, "The status page"):
 *
 *   GET /v1/status   JSON: uptime, the rules' version and last reload
 *                    error; every decision, rules or not, per second over
 *                    the history's ring and in total per front (RESP,
 *                    HTTP, gRPC); per rule the decisions per second, each
 *                    limit named by its size and window; the clients
 *                    connected now; the backend's state; and the
 *                    most-limited keys (src/server/history.h);
 *   GET /            one self-contained HTML page (status.html, built
 *                    into the binary: nothing is read from disk) that
 *                    draws that JSON and fetches it again every second.
 *
 * Keys and rule names are hostile: the JSON carries them as JSON strings
 * (bytes that are not UTF-8 as \xNN, flagged), and the page writes them
 * only with textContent.  The page is also served with a
 * Content-Security-Policy that allows nothing from elsewhere.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "history.h"
#include "http_int.h"
#include "live.h"
#include "rules.h"
#include "status.h"

/* The window over which /v1/status averages decisions per second (at most:
 * fewer seconds while the server has sampled fewer). */
#define RATE_SECONDS 60

/* The page, status.html, as bytes in the binary (the Makefile makes this
 * object depend on the file; the assembler's path is the source tree's,
 * where make runs). */
__asm__(".section .rodata\n"
        ".global sl_status_html\n"
        ".type sl_status_html, @object\n"
        ".balign 16\n"
        "sl_status_html:\n"
        ".incbin \"src/proto/http/status.html\"\n"
        ".global sl_status_html_end\n"
        "sl_status_html_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char sl_status_html[], sl_status_html_end[];

/* The page may load nothing but itself and its own JSON. */
#define PAGE_CSP                                                                                   \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "                     \
    "frame-ancestors 'none'"

/* s (n bytes, any bytes) as a JSON string: itself when it is UTF-8,
 * otherwise with each byte of 0x80 and above written as \xNN and *binary
 * set.  NULL when out of memory. */
static json_t *bytes_string(const char *s, size_t n, int *binary)
{
    json_t *j = json_stringn(s, n);
    *binary = 0;
    if (j != NULL || n == 0) return j;
    char *b = malloc(n * 4 + 1);
    if (b == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            b[k++] = (char)c;
        else
            k += (size_t)snprintf(b + k, 5, "\\x%02X", c);
    }
    j = json_stringn(b, k);
    free(b);
    *binary = 1;
    return j;
}

/* The series listed, and their statistics entries, for naming their
 * limits after the history's lock is released (entries live until exit). */
typedef struct series_list {
    json_t *list;
    int n;
    const sl_rule_stats *rs[SL_HISTORY_RULES];
} series_list;

/* One series as JSON, oldest second first (history.h). */
static void add_series(const sl_history_series *sr, int64_t last, void *arg)
{
    static const char *const names[SL_HIST_NCOUNTS] = {"allowed", "denied", "shadow", "elastic"};
    series_list *sl = arg;
    json_t *list = sl->list, *o = json_object(), *a[SL_HIST_NCOUNTS];
    int binary;
    if (sl->n < SL_HISTORY_RULES) sl->rs[sl->n++] = sr->rs;
    for (int c = 0; c < SL_HIST_NCOUNTS; c++) a[c] = json_array();
    for (int64_t t = last - SL_HISTORY_SECONDS + 1; t <= last; t++)
        for (int c = 0; c < SL_HIST_NCOUNTS; c++)
            json_array_append_new(a[c], json_integer(t < 0 ? 0 : sr->n[t % SL_HISTORY_SECONDS][c]));
    json_object_set_new(o, "rule", bytes_string(sr->rs->name, strlen(sr->rs->name), &binary));
    json_object_set_new(o, "total", json_integer((json_int_t)sr->total));
    for (int c = 0; c < SL_HIST_NCOUNTS; c++) json_object_set_new(o, names[c], a[c]);
    /* until a limit of the serving rules claims it (name_limits) */
    json_object_set_new(o, "base", json_null());
    json_object_set_new(o, "limit", json_null());
    json_object_set_new(o, "label", json_null());
    json_array_append_new(list, o);
}

/* A window of ms as a person writes it: "10s", "90m", "1500ms" -- the
 * largest unit that divides it. */
static void window_text(int64_t ms, char *buf, size_t cap)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } u[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        if (ms > 0 && ms % u[i].ms == 0) {
            snprintf(buf, cap, "%lld%s", (long long)(ms / u[i].ms), u[i].unit);
            return;
        }
    snprintf(buf, cap, "%lldms", (long long)ms);
}

/* What a limit allows, for people: "100 / minute", "5 / 10s",
 * "100 / minute, token-bucket" (the algorithm when not the rules'
 * default, fixed-window), "unlimited". */
static void limit_text(const sl_rule_limit *l, char *buf, size_t cap)
{
    if (l->unlimited) {
        snprintf(buf, cap, "unlimited");
        return;
    }
    char w[32];
    if (l->unit != SL_UNIT_NONE)
        snprintf(w, sizeof w, "%s", sl_rule_unit_name(l->unit));
    else
        window_text(l->params.window_ms, w, sizeof w);
    if (l->params.algo == SL_FIXED_WINDOW)
        snprintf(buf, cap, "%lld / %s", (long long)l->params.limit, w);
    else
        snprintf(buf, cap, "%lld / %s, %s", (long long)l->params.limit, w,
                 sl_algo_name(l->params.algo));
}

/* Gives series i the names of limit l of node: its base name (the rule's
 * name without the "#N" a node of several limits adds), its size and
 * window, and the label the page shows ("api.remote_address — 100 /
 * minute").  The rule's own name ("rule") is left as it is: RL.CHECK,
 * replay and INFO use it. */
static void name_series(json_t *o, const sl_rule_node *node, const sl_rule_limit *l)
{
    const char *name = l->name, *hash = strrchr(name, '#');
    size_t blen =
        !l->named && node->nlimits > 1 && hash != NULL ? (size_t)(hash - name) : strlen(name);
    char text[128];
    limit_text(l, text, sizeof text);
    int binary;
    json_object_set_new(o, "base", bytes_string(name, blen, &binary));
    json_object_set_new(
        o, "limit",
        json_pack("{s:b,s:I,s:I,s:o,s:s,s:s}", "unlimited", l->unlimited, "requests",
                  (json_int_t)l->params.limit, "window_ms", (json_int_t)l->params.window_ms, "unit",
                  l->unit != SL_UNIT_NONE ? json_string(sl_rule_unit_name(l->unit)) : json_null(),
                  "algorithm", sl_algo_name(l->params.algo), "text", text));
    /* base + " — " + text; a base that is not UTF-8 is shown as bytes_string wrote it */
    json_t *b = json_object_get(o, "base");
    const char *bs = json_string_value(b);
    if (bs == NULL) return; /* out of memory: base and label stay null */
    size_t n = json_string_length(b) + strlen(text) + 8;
    char *label = malloc(n);
    if (label == NULL) return;
    snprintf(label, n, "%s \xE2\x80\x94 %s", bs, text);
    json_object_set_new(o, "label", json_string(label));
    free(label);
}

static int name_node(const sl_rule_node *node, void *arg)
{
    series_list *sl = arg;
    for (int j = 0; j < node->nlimits; j++) {
        const sl_rule_limit *l = &node->limits[j];
        if (l->stats == NULL) continue;
        for (int i = 0; i < sl->n; i++)
            if (sl->rs[i] == l->stats) name_series(json_array_get(sl->list, (size_t)i), node, l);
    }
    return 0;
}

/* Names each listed series after the limit of the serving rules r bound to
 * its statistics entry (sl_stats_bind); a series no limit of r claims (a
 * rule since removed, a per-value name) keeps base, limit and label null.
 * O(limits of r x SL_HISTORY_RULES) pointer compares. */
static void name_limits(series_list *sl, const sl_rules *r)
{
    if (r != NULL && sl->n > 0) sl_rules_foreach(r, name_node, sl);
}

static json_t *rules_json(sl_live *l)
{
    if (l == NULL) return json_null();
    sl_live_info li;
    sl_live_info_get(l, &li);
    int binary;
    return json_pack("{s:I,s:s,s:I,s:I,s:o,s:I}", "version", (json_int_t)li.version, "path",
                     sl_live_path(l), "reloads", (json_int_t)li.reloads, "failures",
                     (json_int_t)li.failures, "last_error",
                     li.last_error[0] ? bytes_string(li.last_error, strlen(li.last_error), &binary)
                                      : json_null(),
                     "last_error_ms", (json_int_t)li.last_error_ms);
}

static json_t *top_json(sl_history *h)
{
    json_t *list = json_array();
    sl_history_top *top = malloc(SL_STATUS_TOP_KEYS * sizeof *top);
    int n = top ? sl_history_top_keys(h, top, SL_STATUS_TOP_KEYS) : 0;
    for (int i = 0; i < n; i++) {
        int binary;
        json_t *k = bytes_string(top[i].key, top[i].len, &binary);
        json_array_append_new(list,
                              json_pack("{s:o,s:I,s:I,s:b,s:b}", "key", k, "denied",
                                        (json_int_t)top[i].count, "error", (json_int_t)top[i].err,
                                        "truncated", top[i].cut, "binary", binary));
    }
    free(top);
    return list;
}

/* Every decision: the totals per front (the counters, exact now) and per
 * second over the history's ring, with the mean over the last
 * RATE_SECONDS sampled. */
static json_t *decisions_json(sl_srv *srv)
{
    sl_stats_sum sum;
    sl_stats_sum_get(&srv->stats, &sum);
    const int ports[SL_FRONTS] = {srv->port, srv->http_port, srv->grpc_port};
    const int tls_ports[SL_FRONTS] = {srv->tls_port, srv->https_port, srv->grpc_tls_port};
    json_t *fronts = json_object();
    uint64_t allowed = 0, denied = 0;
    for (int f = 0; f < SL_FRONTS; f++) {
        allowed += sum.front_allowed[f];
        denied += sum.front_denied[f];
        json_object_set_new(
            fronts, sl_front_names[f],
            json_pack("{s:I,s:I,s:i,s:i}", "allowed", (json_int_t)sum.front_allowed[f], "denied",
                      (json_int_t)sum.front_denied[f], "port", ports[f], "tls_port", tls_ports[f]));
    }
    json_t *pa = json_array(), *pd = json_array();
    int64_t first = -1, last = -1;
    uint64_t ra = 0, rd = 0;
    int window = 0;
    uint32_t(*ring)[2] = srv->history ? malloc(SL_HISTORY_SECONDS * sizeof *ring) : NULL;
    if (ring != NULL) {
        last = sl_history_all(srv->history, ring, &first);
        for (int i = 0; i < SL_HISTORY_SECONDS; i++) {
            json_array_append_new(pa, json_integer(ring[i][0]));
            json_array_append_new(pd, json_integer(ring[i][1]));
        }
        if (last >= 0) {
            window = last - first + 1 < RATE_SECONDS ? (int)(last - first + 1) : RATE_SECONDS;
            for (int i = SL_HISTORY_SECONDS - window; i < SL_HISTORY_SECONDS; i++) {
                ra += ring[i][0];
                rd += ring[i][1];
            }
        }
        free(ring);
    }
    return json_pack("{s:I,s:I,s:o,s:{s:I,s:I,s:o,s:o},s:{s:i,s:I,s:I,s:f,s:f}}", "allowed",
                     (json_int_t)allowed, "denied", (json_int_t)denied, "fronts", fronts,
                     "per_second", "first", (json_int_t)first, "end", (json_int_t)last, "allowed",
                     pa, "denied", pd, "recent", "seconds", window, "allowed", (json_int_t)ra,
                     "denied", (json_int_t)rd, "allowed_per_s", window ? (double)ra / window : 0.0,
                     "denied_per_s", window ? (double)rd / window : 0.0);
}

/* The clients connected now, by front.  Three loads: a connection coming
 * or going between them may show for an instant in the total and in no
 * front's count, or the other way round. */
static json_t *clients_json(sl_srv *srv)
{
    int64_t http = atomic_load(&srv->stats.http_clients);
    int64_t grpc = atomic_load(&srv->stats.grpc_clients);
    int64_t all = atomic_load(&srv->clients);
    int64_t resp = all - http - grpc;
    return json_pack("{s:I,s:i,s:I,s:I,s:I}", "connected", (json_int_t)all, "max",
                     srv->cfg->max_clients, "resp", (json_int_t)(resp > 0 ? resp : 0), "http",
                     (json_int_t)http, "grpc", (json_int_t)grpc);
}

/* Where decisions are made: the local store's size, or Redis's state --
 * its URL (without a password), up or down, the module's commands or the
 * script, and the answers --on-backend-error gave while it could not
 * answer (what INFO's Backend section says: the backend's state, backend.h). */
static json_t *backend_json(sl_srv *srv)
{
    sl_backend_state ri;
    if (sl_backend_state_get(srv->backend, &ri) != 0) {
        sl_backend_stats bs;
        sl_backend_stats_get(srv->backend, &bs);
        return json_pack("{s:s,s:I,s:I,s:I}", "name", srv->backend->ops->name, "keys",
                         (json_int_t)bs.keys, "bytes", (json_int_t)bs.bytes, "max_bytes",
                         (json_int_t)bs.max_bytes);
    }
    json_t *o = json_pack("{s:s,s:s,s:b,s:I,s:i,s:s,s:i,s:s,s:I,s:{s:I,s:I,s:I},s:I,s:I,s:I,s:I}",
                          "name", srv->backend->ops->name, "url", ri.url, "up", ri.up,
                          "down_since_ms", (json_int_t)ri.down_since_ms, "nodes", ri.nodes, "path",
                          ri.path, "module_channels", ri.module_channels, "on_error", ri.policy,
                          "timeout_ms", (json_int_t)ri.timeout_ms, "fallback", "deny",
                          (json_int_t)ri.fallback[SL_BACKEND_DENY], "allow",
                          (json_int_t)ri.fallback[SL_BACKEND_ALLOW], "local",
                          (json_int_t)ri.fallback[SL_BACKEND_LOCAL], "errors",
                          (json_int_t)ri.errors, "timeouts", (json_int_t)ri.timeouts, "reconnects",
                          (json_int_t)ri.reconnects, "deny_cache_hits", (json_int_t)ri.cache_hits);
    if (o != NULL && ri.master[0]) /* a Sentinel's: where decisions go now */
        json_object_set_new(o, "master", json_string(ri.master));
    if (o != NULL) {
        int binary;
        json_object_set_new(o, "last_error",
                            ri.last_error[0]
                                ? bytes_string(ri.last_error, strlen(ri.last_error), &binary)
                                : json_null());
    }
    return o;
}

void sl_http_status_json(http_worker *hw, const sl_hreq *req)
{
    sl_svc_ctx *x = hw->svc;
    sl_srv *srv = x->srv;
    int64_t now = sl_now_ms();
    series_list sl;
    int64_t last;
    json_t *top, *dec;
    /* The series and the decisions per second are two reads of the
     * history; a sample between them would give two ends.  Read again
     * (at most twice more: a sample is taken once a second) until both
     * name the same second, so a client sees one end. */
    for (int tries = 0;; tries++) {
        sl = (series_list){.list = json_array(), .n = 0};
        last = -1;
        top = json_array();
        if (srv->history != NULL) {
            last = sl_history_foreach(srv->history, add_series, &sl);
            json_decref(top);
            top = top_json(srv->history);
        }
        dec = decisions_json(srv);
        json_t *ps = json_object_get(dec, "per_second");
        if (tries == 2 || json_integer_value(json_object_get(ps, "end")) == last) break;
        json_decref(dec);
        json_decref(top);
        json_decref(sl.list);
    }
    const char *why;
    name_limits(&sl, sl_svc_rules(x, &why));
    json_t *o =
        json_pack("{s:I,s:I,s:o,s:o,s:o,s:o,s:{s:i,s:i,s:I,s:o},s:o}", "now_ms", (json_int_t)now,
                  "uptime_s", (json_int_t)((now - srv->start_ms) / 1000), "rules",
                  rules_json(srv->live), "decisions", dec, "clients", clients_json(srv), "backend",
                  backend_json(srv), "history", "seconds", SL_HISTORY_SECONDS, "rules_max",
                  SL_HISTORY_RULES, "end", (json_int_t)last, "series", sl.list, "top_keys", top);
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_add(&h, "Cache-Control", "no-store");
    sl_http_send_json_h(&req->a, &h, 200, "OK", o);
}

void sl_http_status_page(http_worker *hw, const sl_hreq *req)
{
    (void)hw;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_add(&h, "Content-Security-Policy", PAGE_CSP);
    sl_hhdrs_add(&h, "X-Content-Type-Options", "nosniff");
    sl_hhdrs_add(&h, "Cache-Control", "no-store");
    sl_http_send(&req->a, 200, "OK", &h, "text/html; charset=utf-8", sl_status_html,
                 (size_t)(sl_status_html_end - sl_status_html));
}
