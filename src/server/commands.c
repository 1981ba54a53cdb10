/*
 * commands.c -- sluiced's commands (SPEC section 7), from parsed arguments
 * to RESP reply bytes.  Decisions are made by libsluice (sl_decide); this
 * file only reads arguments, checks them, and writes replies.
 *
 * Every bad argument gets a "-ERR ..." reply naming what is wrong, and the
 * engine's state is untouched: everything is checked before sl_decide.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "commands.h"
#include "live.h"
#include "rules.h"

/* This worker's reference to the rules it uses (live.h): taken again only
 * when a reload swapped in a new set. */
static _Thread_local sl_live_cache rules_cache;

void sl_cmd_thread_done(void)
{
    sl_live_cache_drop(&rules_cache);
}

static const char no_rules_msg[] = "no rules loaded (start sluiced with --rules PATH)";

/* ---- output ------------------------------------------------------------- */

int sl_buf_add(sl_buf *b, const void *data, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static void add_str(sl_buf *b, const char *s)
{
    sl_buf_add(b, s, strlen(s));
}

/* ":<v>\r\n" or "$<v>\r\n" style: a type byte, an integer, CRLF. */
static void add_num(sl_buf *b, char type, long long v)
{
    char tmp[32], *e = tmp + sizeof(tmp), *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    *--p = type;
    sl_buf_add(b, p, (size_t)(e - p));
}

static void add_bulk(sl_buf *b, const char *s, size_t n)
{
    add_num(b, '$', (long long)n);
    sl_buf_add(b, s, n);
    add_str(b, "\r\n");
}

static void add_bulk_str(sl_buf *b, const char *s)
{
    add_bulk(b, s, strlen(s));
}

/* "-ERR <fmt>\r\n"; newlines in the message are replaced (RESP errors are
 * one line).  Counted in the worker's error statistic. */
static void add_err(sl_buf *b, sl_worker_stats *ws, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_err(sl_buf *b, sl_worker_stats *ws, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(msg)) n = sizeof(msg) - 1;
    for (int i = 0; i < n; i++)
        if (msg[i] == '\r' || msg[i] == '\n') msg[i] = ' ';
    add_str(b, "-ERR ");
    sl_buf_add(b, msg, (size_t)n);
    add_str(b, "\r\n");
    sl_stat_inc(&ws->errors, 1);
}

/* Writes at most max printable bytes of an argument into dst, for quoting
 * client input in error messages (binary bytes become '?'). */
static const char *quote(char *dst, size_t cap, const sl_resp_arg *a)
{
    size_t n = a->len < cap - 4 ? a->len : cap - 4, i;
    for (i = 0; i < n; i++) dst[i] = isprint((unsigned char)a->p[i]) ? a->p[i] : '?';
    if (n < a->len) dst[i++] = '.', dst[i++] = '.', dst[i++] = '.';
    dst[i] = '\0';
    return dst;
}

static int arg_is(const sl_resp_arg *a, const char *lit)
{
    size_t n = strlen(lit);
    return a->len == n && strncasecmp(a->p, lit, n) == 0;
}

/* ---- RL.ALLOW / RL.PEEK ------------------------------------------------- */

static int parse_int_arg(const sl_resp_arg *a, int64_t max, int allow_neg, int64_t *out)
{
    if (allow_neg && a->len > 1 && a->p[0] == '-') {
        int64_t v;
        if (sl_int_parse(a->p + 1, a->len - 1, max, &v) != 0) return -1;
        *out = -v;
        return 0;
    }
    return sl_int_parse(a->p, a->len, max, out);
}

/* An algorithm name, in any case.  Returns 0, or -1 with the error replied. */
static int parse_algo_arg(sl_buf *out, sl_worker_stats *ws, const sl_resp_arg *v, sl_algo *a)
{
    char lower[32], q[80];
    size_t n = v->len < sizeof(lower) ? v->len : sizeof(lower);
    for (size_t k = 0; k < n; k++) lower[k] = (char)tolower((unsigned char)v->p[k]);
    if (v->len > sizeof(lower) || sl_algo_parse(lower, n, a) != 0) {
        add_err(out, ws, "unknown algorithm '%s'", quote(q, sizeof(q), v));
        return -1;
    }
    return 0;
}

/* The value of AT: refused unless the server trusts client time.  Returns
 * 0, or -1 with the error replied. */
static int parse_at_arg(const sl_srv *srv, sl_buf *out, sl_worker_stats *ws,
                        const sl_resp_arg *v, int64_t *at)
{
    char q[80];
    if (!srv->cfg->trust_client_time) {
        add_err(out, ws,
                "AT is refused: this server decides at its own clock (start sluiced "
                "with --trust-client-time to accept client times)");
        return -1;
    }
    if (parse_int_arg(v, SL_MAX_TIME_MS - 1, 1, at) != 0) {
        add_err(out, ws, "%s, got '%s'", sl_strerror(SL_ETIME), quote(q, sizeof(q), v));
        return -1;
    }
    return 0;
}

/* The six fields of SPEC section 3, as integers (no array header). */
static void add_fields(sl_buf *out, const sl_result *r)
{
    add_num(out, ':', r->allowed);
    add_num(out, ':', r->limit);
    add_num(out, ':', r->remaining);
    add_num(out, ':', r->retry_after_ms);
    add_num(out, ':', r->reset_after_ms);
    add_num(out, ':', r->delay_ms);
}

/* RL.ALLOW key limit window [ALGO name] [COST c] [BURST b] [PRECISION p]
 *          [LOGREJECTED] [AT t] */
static void cmd_decide(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *c, int64_t now,
                       int commit, sl_buf *out)
{
    char q[80];
    const char *name = commit ? "rl.allow" : "rl.peek";
    if (c->argc < 4) {
        add_err(out, ws, "wrong number of arguments for '%s' command", name);
        return;
    }
    const sl_resp_arg *key = &c->argv[1];
    if (key->len == 0 || key->len > SL_MAX_KEY) {
        add_err(out, ws, "%s", sl_strerror(SL_EKEY));
        return;
    }
    sl_params p = SL_PARAMS_INIT;
    if (parse_int_arg(&c->argv[2], SL_MAX_LIMIT, 0, &p.limit) != 0 || p.limit < 1) {
        add_err(out, ws, "%s", sl_strerror(SL_ELIMIT));
        return;
    }
    if (sl_duration_parse(c->argv[3].p, c->argv[3].len, &p.window_ms) != 0) {
        add_err(out, ws, "%s, got '%s'", sl_strerror(SL_EWINDOW), quote(q, sizeof(q), &c->argv[3]));
        return;
    }
    int64_t cost = 1, at = now;
    unsigned seen = 0;
    for (int i = 4; i < c->argc; i++) {
        const sl_resp_arg *o = &c->argv[i];
        const sl_resp_arg *v = i + 1 < c->argc ? &c->argv[i + 1] : NULL;
        static const char *const opts[] = {"ALGO", "COST", "BURST", "PRECISION", "LOGREJECTED", "AT"};
        unsigned which = 0;
        while (which < 6 && !arg_is(o, opts[which])) which++;
        if (which == 6) {
            add_err(out, ws,
                    "unknown option '%s' (expected ALGO, COST, BURST, PRECISION, LOGREJECTED "
                    "or AT)",
                    quote(q, sizeof(q), o));
            return;
        }
        if (seen & (1u << which)) {
            add_err(out, ws, "option %s given twice", opts[which]);
            return;
        }
        seen |= 1u << which;
        if (which == 4) { /* LOGREJECTED takes no value */
            p.log_rejected = 1;
            continue;
        }
        if (v == NULL) {
            add_err(out, ws, "option %s needs a value", opts[which]);
            return;
        }
        i++;
        int bad = 0;
        switch (which) {
        case 0:
            if (parse_algo_arg(out, ws, v, &p.algo) != 0) return;
            break;
        case 1:
            if (parse_int_arg(v, SL_MAX_LIMIT, 0, &cost) != 0) bad = SL_ECOST;
            break;
        case 2:
            if (parse_int_arg(v, SL_MAX_LIMIT, 0, &p.burst) != 0 || p.burst < 1) bad = SL_EBURST;
            break;
        case 3:
            if (parse_int_arg(v, SL_MAX_PRECISION, 0, &p.precision) != 0 || p.precision < 1)
                bad = SL_EPRECISION;
            break;
        case 5:
            if (parse_at_arg(srv, out, ws, v, &at) != 0) return;
            break;
        }
        if (bad) {
            add_err(out, ws, "%s, got '%s'", sl_strerror(bad), quote(q, sizeof(q), v));
            return;
        }
    }
    sl_result r; /* sl_decide checks the parameters: its error names the bad one */
    int rc = commit ? sl_decide(srv->store, &p, key->p, key->len, at, cost, &r)
                : sl_peek(srv->store, &p, key->p, key->len, at, cost, &r);
    if (rc != 0) {
        add_err(out, ws, "%s", sl_strerror(rc));
        return;
    }
    if (commit) {
        sl_stat_inc(&ws->decisions[p.algo], 1);
        sl_stat_inc(r.allowed ? &ws->allowed[p.algo] : &ws->denied[p.algo], 1);
    }
    add_str(out, "*6\r\n");
    add_fields(out, &r);
}

/* RL.CHECK domain [COST c] [AT t] DESCRIPTOR k v [k v ...] [DESCRIPTOR ...]
 * Reply: the six fields for the most restrictive outcome, then per
 * descriptor [code, rule name (nil for NO_RULE), limit, remaining,
 * retry_after_ms, reset_after_ms]. */
static void cmd_check(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *c, int64_t now,
                      sl_buf *out)
{
    char q[80];
    sl_rules *rules = srv->live ? sl_live_get(srv->live, &rules_cache) : NULL;
    if (rules == NULL) {
        add_err(out, ws, "%s", no_rules_msg);
        return;
    }
    if (c->argc < 5) {
        add_err(out, ws, "wrong number of arguments for 'rl.check' command");
        return;
    }
    static _Thread_local sl_rule_entry ent[SL_CHECK_MAX_DESC][SL_RULES_MAX_DEPTH];
    const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
    int ndesc[SL_CHECK_MAX_DESC], n = -1;
    int64_t cost = 1, at = now;
    unsigned seen = 0;
    for (int i = 2; i < c->argc;) {
        const sl_resp_arg *o = &c->argv[i];
        if (arg_is(o, "DESCRIPTOR")) {
            if (++n == SL_CHECK_MAX_DESC) {
                add_err(out, ws, "at most %d descriptors in one RL.CHECK", SL_CHECK_MAX_DESC);
                return;
            }
            descs[n] = ent[n];
            ndesc[n] = 0;
            i++;
            continue;
        }
        if (n < 0 && (arg_is(o, "COST") || arg_is(o, "AT"))) {
            int is_cost = arg_is(o, "COST");
            if ((seen & (1u << is_cost)) || i + 1 >= c->argc) {
                add_err(out, ws, "option %s given twice or without a value", is_cost ? "COST" : "AT");
                return;
            }
            seen |= 1u << is_cost;
            const sl_resp_arg *v = &c->argv[i + 1];
            if (is_cost && parse_int_arg(v, SL_MAX_LIMIT, 0, &cost) != 0) {
                add_err(out, ws, "%s, got '%s'", sl_strerror(SL_ECOST), quote(q, sizeof(q), v));
                return;
            }
            if (!is_cost && parse_at_arg(srv, out, ws, v, &at) != 0) return;
            i += 2;
            continue;
        }
        if (n < 0) {
            add_err(out, ws, "expected COST, AT or DESCRIPTOR, got '%s'", quote(q, sizeof(q), o));
            return;
        }
        if (i + 1 >= c->argc) {
            add_err(out, ws, "descriptor key '%s' has no value", quote(q, sizeof(q), o));
            return;
        }
        if (ndesc[n] == SL_RULES_MAX_DEPTH) {
            add_err(out, ws, "at most %d entries in one descriptor", SL_RULES_MAX_DEPTH);
            return;
        }
        ent[n][ndesc[n]++] = (sl_rule_entry){o->p, o->len, c->argv[i + 1].p, c->argv[i + 1].len};
        i += 2;
    }
    n++;
    for (int d = 0; d < n; d++) {
        if (ndesc[d] == 0) {
            add_err(out, ws, "descriptor %d has no entries (expected DESCRIPTOR key value ...)", d + 1);
            return;
        }
    }
    if (n == 0) {
        add_err(out, ws, "RL.CHECK needs at least one DESCRIPTOR");
        return;
    }
    sl_result overall;
    sl_check_status st[SL_CHECK_MAX_DESC];
    char err[256];
    int rc = sl_rules_check(rules, srv->store, srv->cfg->capacity[0] ? &srv->cfg->pool : NULL, c->argv[1].p, c->argv[1].len, descs, ndesc, n,
                            cost, at, &overall, st, err, sizeof(err));
    if (rc != 0) {
        add_err(out, ws, "%s", err[0] ? err : sl_strerror(rc));
        return;
    }
    add_num(out, '*', 6 + n);
    add_fields(out, &overall);
    for (int d = 0; d < n; d++) {
        add_str(out, "*6\r\n");
        add_bulk_str(out, sl_check_code_name(st[d].code));
        if (st[d].name)
            add_bulk_str(out, st[d].name);
        else
            add_str(out, "$-1\r\n");
        add_num(out, ':', st[d].limit);
        add_num(out, ':', st[d].remaining);
        add_num(out, ':', st[d].retry_after_ms);
        add_num(out, ':', st[d].reset_after_ms);
    }
}

/* RL.RULES: what is serving.  A flat map, as redis-py's HELLO-style replies:
 *   version N  loaded_at_ms T  path P  reloads N  reload_failures N
 *   last_error E ("" if the last reload worked)  last_error_at_ms T
 *   domains [[domain, file, [[name, descriptor, limit, mode, checked, over,
 *             shadow_over, elastic], ...]], ...]
 * with one entry per limit: its name, Lyft's descriptor path, the limit
 * ("10/minute fixed-window"), mode "enforce" or "shadow", and what it has
 * decided since this version loaded (sl_rule_counts).
 * RL.RULES RELOAD: reloads now; replies the new version, or an error with
 * FILE:LINE:COLUMN (the old rules keep serving). */
/* Appends one entry per limit of node and of the nodes below it to dom;
 * returns how many. */
static int list_limits(sl_buf *dom, const sl_rule_node *node)
{
    int n = 0;
    for (int j = 0; j < node->nlimits; j++, n++) {
        const sl_rule_limit *l = &node->limits[j];
        char desc[200];
        sl_rules_limit_format(l, desc, sizeof desc);
        add_str(dom, "*8\r\n");
        add_bulk_str(dom, l->name);
        add_bulk_str(dom, node->path);
        add_bulk_str(dom, desc);
        add_bulk_str(dom, node->shadow_mode ? "shadow" : "enforce");
        const sl_rule_counts *k = l->counts;
        add_num(dom, ':', (long long)atomic_load_explicit(&k->checked, memory_order_relaxed));
        add_num(dom, ':', (long long)atomic_load_explicit(&k->over, memory_order_relaxed));
        add_num(dom, ':', (long long)atomic_load_explicit(&k->shadow, memory_order_relaxed));
        add_num(dom, ':', (long long)atomic_load_explicit(&k->elastic, memory_order_relaxed));
    }
    for (int c = 0; c < node->nchildren; c++) n += list_limits(dom, &node->children[c]);
    return n;
}

static void cmd_rules(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *c, sl_buf *out)
{
    char err[SL_LIVE_ERR];
    if (srv->live == NULL) {
        add_err(out, ws, "%s", no_rules_msg);
        return;
    }
    if (c->argc == 2 && arg_is(&c->argv[1], "RELOAD")) {
        if (sl_live_reload(srv->live, "RL.RULES RELOAD", err, sizeof err) != 0) {
            sl_live_info li;
            sl_live_info_get(srv->live, &li);
            add_err(out, ws, "rules not reloaded, version %llu keeps serving: %s",
                    (unsigned long long)li.version, err);
            return;
        }
        sl_rules *r = sl_live_get(srv->live, &rules_cache);
        add_num(out, ':', (long long)sl_rules_generation(r));
        return;
    }
    if (c->argc != 1) {
        add_err(out, ws, "usage: RL.RULES [RELOAD]");
        return;
    }
    sl_rules *r = sl_live_get(srv->live, &rules_cache);
    sl_live_info li;
    sl_live_info_get(srv->live, &li);
    add_str(out, "*16\r\n");
    add_bulk_str(out, "version");
    add_num(out, ':', (long long)sl_rules_generation(r));
    add_bulk_str(out, "loaded_at_ms");
    add_num(out, ':', sl_rules_loaded_at_ms(r));
    add_bulk_str(out, "path");
    add_bulk_str(out, sl_live_path(srv->live));
    add_bulk_str(out, "reloads");
    add_num(out, ':', (long long)li.reloads);
    add_bulk_str(out, "reload_failures");
    add_num(out, ':', (long long)li.failures);
    add_bulk_str(out, "last_error");
    add_bulk_str(out, li.last_error);
    add_bulk_str(out, "last_error_at_ms");
    add_num(out, ':', li.last_error_ms);
    add_bulk_str(out, "domains");
    int nd = sl_rules_ndomains(r);
    add_num(out, '*', nd);
    for (int i = 0; i < nd; i++) {
        const sl_rule_domain *d = sl_rules_domain(r, i);
        sl_buf dom = {0}; /* the entries, counted as they are written */
        int nlim = list_limits(&dom, &d->root);
        add_str(out, "*3\r\n");
        add_bulk(out, d->name, d->namelen);
        add_bulk_str(out, d->file);
        add_num(out, '*', nlim);
        sl_buf_add(out, dom.p ? dom.p : "", dom.len);
        free(dom.p);
    }
}

/* RL.RESET key [ALGO name] */
static void cmd_reset(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *c, sl_buf *out)
{
    char q[80];
    if (c->argc != 2 && c->argc != 4) {
        add_err(out, ws, "wrong number of arguments for 'rl.reset' command");
        return;
    }
    const sl_resp_arg *key = &c->argv[1];
    if (key->len == 0 || key->len > SL_MAX_KEY) {
        add_err(out, ws, "%s", sl_strerror(SL_EKEY));
        return;
    }
    int lo = 0, hi = SL_ALGO_COUNT;
    if (c->argc == 4) {
        sl_algo a;
        if (!arg_is(&c->argv[2], "ALGO")) {
            add_err(out, ws, "unknown option '%s' (expected ALGO)", quote(q, sizeof(q), &c->argv[2]));
            return;
        }
        if (parse_algo_arg(out, ws, &c->argv[3], &a) != 0) return;
        lo = (int)a;
        hi = lo + 1;
    }
    int existed = 0;
    for (int a = lo; a < hi; a++) existed |= sl_forget(srv->store, (sl_algo)a, key->p, key->len) == 1;
    add_num(out, ':', existed);
}

/* ---- INFO --------------------------------------------------------------- */

static void info_line(sl_buf *b, const char *name, unsigned long long v)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "%s:%llu\r\n", name, v);
    sl_buf_add(b, line, (size_t)n);
}

static void info_text(sl_buf *b, const char *name, const char *v)
{
    char line[1200];
    int n = snprintf(line, sizeof(line), "%s:%s\r\n", name, v);
    if (n > 0) sl_buf_add(b, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static int wants(const sl_resp_cmd *c, const char *section)
{
    if (c->argc < 2) return 1;
    for (int i = 1; i < c->argc; i++)
        if (arg_is(&c->argv[i], section) || arg_is(&c->argv[i], "all") ||
            arg_is(&c->argv[i], "default") || arg_is(&c->argv[i], "everything"))
            return 1;
    return 0;
}

static void cmd_info(sl_srv *srv, const sl_resp_cmd *c, int64_t now, sl_buf *out)
{
    sl_buf b = {0};
    const sl_config *cfg = srv->cfg;
    if (wants(c, "server")) {
        add_str(&b, "# Server\r\n");
        info_text(&b, "sluice_version", SL_VERSION);
        info_text(&b, "redis_version", "7.0.0"); /* for clients that parse it */
        info_line(&b, "process_id", (unsigned long long)getpid());
        info_line(&b, "tcp_port", (unsigned long long)srv->port);
        info_line(&b, "uptime_in_seconds", (unsigned long long)((now - srv->start_ms) / 1000));
        info_line(&b, "threads", (unsigned long long)srv->nworkers);
        info_text(&b, "trust_client_time", cfg->trust_client_time ? "yes" : "no");
        info_text(&b, "config_file", cfg->config_file);
        add_str(&b, "\r\n");
    }
    if (wants(c, "clients")) {
        add_str(&b, "# Clients\r\n");
        info_line(&b, "connected_clients", (unsigned long long)atomic_load(&srv->clients));
        info_line(&b, "maxclients", (unsigned long long)cfg->max_clients);
        info_line(&b, "max_command_bytes", cfg->max_command);
        info_line(&b, "max_output_bytes", cfg->max_output);
        info_line(&b, "idle_timeout_ms", (unsigned long long)cfg->idle_timeout_ms);
        add_str(&b, "\r\n");
    }
    if (wants(c, "stats")) {
        uint64_t cmds = 0, errs = 0, proto = 0, all_dec = 0, all_ok = 0, all_no = 0;
        uint64_t dec[SL_ALGO_COUNT] = {0}, ok[SL_ALGO_COUNT] = {0}, no[SL_ALGO_COUNT] = {0};
        for (int w = 0; w < srv->nworkers; w++) {
            sl_worker_stats *s = &srv->workers[w];
            cmds += sl_stat_get(&s->commands);
            errs += sl_stat_get(&s->errors);
            proto += sl_stat_get(&s->protocol_errors);
            for (int a = 0; a < SL_ALGO_COUNT; a++) {
                dec[a] += sl_stat_get(&s->decisions[a]);
                ok[a] += sl_stat_get(&s->allowed[a]);
                no[a] += sl_stat_get(&s->denied[a]);
            }
        }
        sl_store_stats st;
        sl_store_stats_get(srv->store, &st);
        add_str(&b, "# Stats\r\n");
        info_line(&b, "total_connections_received", atomic_load(&srv->connections));
        info_line(&b, "rejected_connections", atomic_load(&srv->rejected));
        info_line(&b, "total_commands_processed", cmds);
        info_line(&b, "error_replies", errs);
        info_line(&b, "protocol_errors", proto);
        info_line(&b, "clients_cut_output", atomic_load(&srv->cut_output));
        info_line(&b, "clients_cut_idle", atomic_load(&srv->cut_idle));
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            all_dec += dec[a];
            all_ok += ok[a];
            all_no += no[a];
        }
        info_line(&b, "decisions", all_dec);
        info_line(&b, "allowed", all_ok);
        info_line(&b, "denied", all_no);
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            char line[200];
            int n = snprintf(line, sizeof(line), "algo_%s:decisions=%llu,allowed=%llu,denied=%llu\r\n",
                             sl_algo_name((sl_algo)a), (unsigned long long)dec[a],
                             (unsigned long long)ok[a], (unsigned long long)no[a]);
            sl_buf_add(&b, line, (size_t)n);
        }
        info_line(&b, "evicted_keys", st.evictions);
        info_line(&b, "expired_keys", st.expired);
        add_str(&b, "\r\n");
    }
    if (wants(c, "memory")) {
        sl_store_stats st;
        sl_store_stats_get(srv->store, &st);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        add_str(&b, "# Memory\r\n");
        info_line(&b, "used_memory", st.bytes);
        info_line(&b, "maxmemory", st.max_bytes);
        info_line(&b, "keys", st.keys);
        info_line(&b, "max_rss_bytes", (unsigned long long)ru.ru_maxrss * 1024);
        add_str(&b, "\r\n");
    }
    if (wants(c, "rules")) {
        add_str(&b, "# Rules\r\n");
        if (srv->live != NULL) {
            sl_live_info li;
            sl_live_info_get(srv->live, &li);
            info_text(&b, "rules_path", sl_live_path(srv->live));
            info_line(&b, "rules_version", li.version);
            info_line(&b, "rules_loaded_at_ms", (unsigned long long)li.loaded_at_ms);
            info_line(&b, "rules_domains", (unsigned long long)li.ndomains);
            info_line(&b, "rules_descriptors", (unsigned long long)li.ndescriptors);
            info_line(&b, "rules_reloads", li.reloads);
            info_line(&b, "rules_reload_failures", li.failures);
            info_text(&b, "rules_last_error", li.last_error);
            info_line(&b, "rules_last_error_at_ms", (unsigned long long)li.last_error_ms);
            info_text(&b, "rules_watch", li.watching ? "inotify" : "off");
        } else {
            info_text(&b, "rules_path", "");
            info_line(&b, "rules_version", 0);
        }
        info_text(&b, "rules_capacity", cfg->capacity);
        add_str(&b, "\r\n");
    }
    if (wants(c, "persistence")) {
        add_str(&b, "# Persistence\r\n");
        info_text(&b, "snapshot_file", cfg->snapshot);
        info_line(&b, "snapshot_interval_ms", (unsigned long long)cfg->snapshot_interval_ms);
        info_line(&b, "snapshots_written", atomic_load(&srv->saves));
        info_line(&b, "last_snapshot_unix_ms", (unsigned long long)atomic_load(&srv->last_save_ms));
        info_text(&b, "last_snapshot_status", atomic_load(&srv->last_save_ok) ? "ok" : "err");
        info_line(&b, "keys_loaded_at_start", atomic_load(&srv->loaded_keys));
        add_str(&b, "\r\n");
    }
    add_bulk(out, b.p ? b.p : "", b.len);
    free(b.p);
}

/* ---- small commands ----------------------------------------------------- */

/* One COMMAND entry: name, arity, flags, first key, last key, step. */
static void command_entry(sl_buf *out, const char *name, int arity, int first_key)
{
    add_str(out, "*6\r\n");
    add_bulk_str(out, name);
    add_num(out, ':', arity);
    add_str(out, "*1\r\n");
    add_str(out, "+fast\r\n");
    add_num(out, ':', first_key);
    add_num(out, ':', first_key);
    add_num(out, ':', first_key ? 1 : 0);
}

static const struct {
    const char *name;
    int arity; /* redis convention: negative = at least */
    int first_key;
} command_table[] = {
    {"rl.allow", -4, 1}, {"rl.peek", -4, 1}, {"rl.reset", -2, 1}, {"rl.check", -5, 0},
    {"rl.rules", -1, 0}, {"ping", -1, 0},
    {"echo", 2, 0},      {"quit", 1, 0},     {"info", -1, 0},     {"command", -1, 0},
    {"hello", -1, 0},    {"client", -2, 0},  {"select", 2, 0},    {"config", -2, 0},
};
#define NCOMMANDS (sizeof(command_table) / sizeof(command_table[0]))

static void cmd_command(const sl_resp_cmd *c, sl_buf *out)
{
    if (c->argc >= 2 && arg_is(&c->argv[1], "COUNT")) {
        add_num(out, ':', (long long)NCOMMANDS);
        return;
    }
    if (c->argc >= 2 && arg_is(&c->argv[1], "DOCS")) {
        add_str(out, "*0\r\n"); /* no docs: redis-cli falls back to plain input */
        return;
    }
    if (c->argc >= 2 && arg_is(&c->argv[1], "INFO")) {
        add_num(out, '*', c->argc - 2);
        for (int i = 2; i < c->argc; i++) {
            size_t k = 0;
            while (k < NCOMMANDS && !arg_is(&c->argv[i], command_table[k].name)) k++;
            if (k == NCOMMANDS)
                add_str(out, "*-1\r\n");
            else
                command_entry(out, command_table[k].name, command_table[k].arity,
                              command_table[k].first_key);
        }
        return;
    }
    add_num(out, '*', (long long)NCOMMANDS);
    for (size_t k = 0; k < NCOMMANDS; k++)
        command_entry(out, command_table[k].name, command_table[k].arity, command_table[k].first_key);
}

static void cmd_hello(sl_worker_stats *ws, const sl_resp_cmd *c, sl_buf *out)
{
    if (c->argc >= 2 && !arg_is(&c->argv[1], "2")) {
        add_str(out, "-NOPROTO sluiced speaks RESP2 only (HELLO 2)\r\n");
        sl_stat_inc(&ws->errors, 1);
        return;
    }
    if (c->argc > 2) {
        add_err(out, ws, "HELLO takes only the protocol version (no AUTH or SETNAME)");
        return;
    }
    add_str(out, "*14\r\n");
    add_bulk_str(out, "server");
    add_bulk_str(out, "sluiced");
    add_bulk_str(out, "version");
    add_bulk_str(out, SL_VERSION);
    add_bulk_str(out, "proto");
    add_num(out, ':', 2);
    add_bulk_str(out, "id");
    add_num(out, ':', 0);
    add_bulk_str(out, "mode");
    add_bulk_str(out, "standalone");
    add_bulk_str(out, "role");
    add_bulk_str(out, "master");
    add_bulk_str(out, "modules");
    add_str(out, "*0\r\n");
}

/* CONFIG GET: answers the two settings redis-benchmark asks about, and an
 * empty list for anything else; CONFIG SET is refused. */
static void cmd_config(sl_worker_stats *ws, const sl_resp_cmd *c, sl_buf *out)
{
    if (c->argc == 3 && arg_is(&c->argv[1], "GET")) {
        if (arg_is(&c->argv[2], "save")) {
            add_str(out, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
        } else if (arg_is(&c->argv[2], "appendonly")) {
            add_str(out, "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
        } else {
            add_str(out, "*0\r\n");
        }
        return;
    }
    add_err(out, ws, "CONFIG supports only GET; sluiced is configured by flags or --config FILE");
}

int sl_cmd_exec(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *c, int64_t now, sl_buf *out)
{
    char q[80];
    sl_stat_inc(&ws->commands, 1);
    const sl_resp_arg *name = &c->argv[0];
    if (arg_is(name, "RL.ALLOW")) {
        cmd_decide(srv, ws, c, now, 1, out);
    } else if (arg_is(name, "RL.PEEK")) {
        cmd_decide(srv, ws, c, now, 0, out);
    } else if (arg_is(name, "RL.CHECK")) {
        cmd_check(srv, ws, c, now, out);
    } else if (arg_is(name, "RL.RULES")) {
        cmd_rules(srv, ws, c, out);
    } else if (arg_is(name, "RL.RESET")) {
        cmd_reset(srv, ws, c, out);
    } else if (arg_is(name, "PING")) {
        if (c->argc == 1)
            add_str(out, "+PONG\r\n");
        else if (c->argc == 2)
            add_bulk(out, c->argv[1].p, c->argv[1].len);
        else
            add_err(out, ws, "wrong number of arguments for 'ping' command");
    } else if (arg_is(name, "ECHO")) {
        if (c->argc == 2)
            add_bulk(out, c->argv[1].p, c->argv[1].len);
        else
            add_err(out, ws, "wrong number of arguments for 'echo' command");
    } else if (arg_is(name, "QUIT")) {
        add_str(out, "+OK\r\n");
        return SL_CMD_CLOSE;
    } else if (arg_is(name, "INFO")) {
        cmd_info(srv, c, now, out);
    } else if (arg_is(name, "COMMAND")) {
        cmd_command(c, out);
    } else if (arg_is(name, "HELLO")) {
        cmd_hello(ws, c, out);
    } else if (arg_is(name, "CLIENT") && c->argc >= 2 &&
               (arg_is(&c->argv[1], "SETNAME") || arg_is(&c->argv[1], "SETINFO"))) {
        add_str(out, "+OK\r\n"); /* accepted for client libraries; not kept */
    } else if (arg_is(name, "SELECT") && c->argc == 2) {
        if (arg_is(&c->argv[1], "0"))
            add_str(out, "+OK\r\n");
        else
            add_err(out, ws, "sluiced has one database (0)");
    } else if (arg_is(name, "CONFIG")) {
        cmd_config(ws, c, out);
    } else {
        add_err(out, ws, "unknown command '%s'", quote(q, sizeof(q), name));
    }
    return SL_CMD_OK;
}
