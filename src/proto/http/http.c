/*
 * http.c -- HTTP/1.1 on net.c's own connection path (http.h): a second
 * protocol (proto.h) beside RESP, on the same workers, reply slots,
 * limits and TLS.  Each request is framed by h1.c, routed here, checked
 * with args.h's sl__parse_* and sl_svc_parse_at (so a 400 says what RESP's -ERR
 * says), and answered into its reply slot: the status line, headers and
 * body written straight into the slot's buffer, without printf and
 * without allocating (JSON bodies of the rarer endpoints excepted, made
 * with jansson).  Requests pipelined on a connection are answered in
 * order by the slots, whenever their answers come.
 *
 * A decision's answer is written in the service's callback, which may run
 * after the handler returned (a backend that answers later): what it
 * needs (the slot, the answer's framing, a few numbers) lives in the
 * slot's own data (sl_slot_data), nothing on the handler's stack.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>

#include "auth.h"
#include "check_int.h"
#include "config.h"
#include "h1.h"
#include "http.h"
#include "http_int.h"
#include "metrics.h"
#include "ratelimit_headers.h"
#include "service.h"
#include "status.h"
#include "util.h"

/* ---- writing answers ---------------------------------------------------------- */

void sl_hhdrs_init(sl_hhdrs *h)
{
    h->len = 0;
    h->cut = 0;
}

void sl_hhdrs_addn(sl_hhdrs *h, const char *name, const char *value, size_t vlen)
{
    size_t nlen = strlen(name);
    if (h->len + nlen + vlen + 4 > sizeof h->b) {
        h->cut = 1;
        return;
    }
    char *d = h->b + h->len;
    memcpy(d, name, nlen);
    d += nlen;
    *d++ = ':';
    *d++ = ' ';
    memcpy(d, value, vlen);
    d += vlen;
    *d++ = '\r';
    *d++ = '\n';
    h->len = (size_t)(d - h->b);
}

void sl_hhdrs_add(sl_hhdrs *h, const char *name, const char *value)
{
    sl_hhdrs_addn(h, name, value, strlen(value));
}

void sl_hhdrs_int(sl_hhdrs *h, const char *name, long long v)
{
    char t[24];
    sl_hhdrs_addn(h, name, t, sl_rlh_itoa(t, v));
}

/* "Date: <IMF-fixdate>\r\n" of the current second, written once a second
 * per thread. */
static const char *date_line(size_t *len)
{
    static _Thread_local time_t at = -1;
    static _Thread_local char line[48];
    static _Thread_local size_t n;
    time_t now = time(NULL);
    if (now != at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        n = strftime(line, sizeof line, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        at = now;
    }
    *len = n;
    return line;
}

#define ADD(b, lit) sl_buf_add(b, lit, sizeof lit - 1)

void sl_http_send(const sl_hans *a, int code, const char *reason, const sl_hhdrs *h,
                  const char *ctype, const char *body, size_t len)
{
    sl_buf *b = sl_slot_buf(a->slot);
    size_t start = b->len, dn;
    char num[24];
    const char *date = date_line(&dn);
    char line[16] = "HTTP/1.1 000 ";
    line[7] = a->minor ? '1' : '0';
    line[9] = (char)('0' + code / 100 % 10);
    line[10] = (char)('0' + code / 10 % 10);
    line[11] = (char)('0' + code % 10);
    int rc = sl_buf_add(b, line, 13) | sl_buf_adds(b, reason) | ADD(b, "\r\n");
    if (a->close)
        rc |= ADD(b, "Connection: close\r\n");
    else if (!a->minor)
        rc |= ADD(b, "Connection: keep-alive\r\n");
    rc |= sl_buf_add(b, date, dn);
    if (h != NULL && h->len > 0) rc |= sl_buf_add(b, h->b, h->len);
    if (ctype != NULL) rc |= ADD(b, "Content-Type: ") | sl_buf_adds(b, ctype) | ADD(b, "\r\n");
    rc |= ADD(b, "Content-Length: ") | sl_buf_add(b, num, sl_rlh_itoa(num, (long long)len)) |
          ADD(b, "\r\n\r\n");
    if (!a->head && len > 0) rc |= sl_buf_add(b, body, len);
    if (rc != 0) { /* out of memory: what fits of an answer that says so */
        b->len = start;
        ADD(b, "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: "
               "0\r\n\r\n");
    }
    sl_slot_done(a->slot);
}

void sl_http_send_json_h(const sl_hans *a, const sl_hhdrs *h, int code, const char *reason,
                         json_t *obj)
{
    char stack[512];
    size_t n = obj ? json_dumpb(obj, stack, sizeof stack - 1, 0) : 0;
    char *text = stack;
    if (n >= sizeof stack - 1) { /* larger: its own buffer */
        text = malloc(n + 1);
        if (text != NULL) json_dumpb(obj, text, n, 0);
    }
    json_decref(obj);
    if (n == 0 || text == NULL) { /* out of memory */
        sl_http_send(a, 500, "Internal Server Error", h, NULL, NULL, 0);
        return;
    }
    text[n] = '\n';
    sl_http_send(a, code, reason, h, "application/json", text, n + 1);
    if (text != stack) free(text);
}

void sl_http_send_json(const sl_hans *a, int code, const char *reason, json_t *obj)
{
    sl_http_send_json_h(a, NULL, code, reason, obj);
}

/* s (n bytes) as a JSON string's contents into d; returns the end. */
static char *json_escape(char *d, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *d++ = '\\';
            *d++ = (char)ch;
        } else if (ch < 0x20) {
            memcpy(d, "\\u00", 4);
            d[4] = hex[ch >> 4];
            d[5] = hex[ch & 15];
            d += 6;
        } else {
            *d++ = (char)ch;
        }
    }
    return d;
}

void sl_http_send_error_h(const sl_hans *a, const sl_hhdrs *h, int code, const char *reason,
                          const char *msg)
{
    /* {"error": "msg"} as jansson writes it (its messages are UTF-8 or
     * quoted by sl__quote: only '"', '\' and controls need escaping) */
    char body[6 * SL_SVC_ERR + 32], *d = body;
    size_t n = strlen(msg);
    if (n > SL_SVC_ERR * 4) n = SL_SVC_ERR * 4;
    memcpy(d, "{\"error\": \"", 11);
    d = json_escape(d + 11, msg, n);
    memcpy(d, "\"}\n", 3);
    sl_http_send(a, code, reason, h, "application/json", body, (size_t)(d + 3 - body));
}

void sl_http_send_error(const sl_hans *a, int code, const char *reason, const char *msg)
{
    sl_http_send_error_h(a, NULL, code, reason, msg);
}

void sl_http_decision_headers(sl_hhdrs *h, const sl_result *r, int64_t window_ms)
{
    sl_rlh o;
    sl_hhdrs_rlh(h, &o);
    sl_rlh_decision(&o, r, window_ms);
    sl_hhdrs_took(h, &o);
}

/* ---- the request ---------------------------------------------------------------- */

/* What the module keeps per connection (its pdata): the client's address,
 * read the first time a request needs it. */
typedef struct hconn {
    int got; /* 1: read (ok says whether it could be) */
    int ok;
    struct sockaddr_storage ss;
    char host[INET6_ADDRSTRLEN];
} hconn;

static hconn *conn_state(sl_conn *c)
{
    hconn *h = sl_conn_pdata(c);
    if (h == NULL && (h = calloc(1, sizeof *h)) != NULL) sl_conn_set_pdata(c, h);
    if (h != NULL && !h->got) {
        h->got = 1;
        socklen_t sl = sizeof h->ss;
        int fd = sl_conn_fd(c);
        h->ok = fd >= 0 && getpeername(fd, (struct sockaddr *)&h->ss, &sl) == 0 &&
                sl_conn_peer_host(c, h->host, sizeof h->host) != NULL;
    }
    return h;
}

const struct sockaddr *sl_hreq_peer(const sl_hreq *r)
{
    hconn *h = conn_state(r->conn);
    return h != NULL && h->ok ? (const struct sockaddr *)&h->ss : NULL;
}

const char *sl_hreq_peer_host(const sl_hreq *r)
{
    hconn *h = conn_state(r->conn);
    return h != NULL && h->ok ? h->host : NULL;
}

const char *sl_hreq_header(const sl_hreq *r, const char *name)
{
    for (int i = 0; i < r->nh; i++)
        if (strcasecmp(r->hname[i], name) == 0) return r->hvalue[i];
    return NULL;
}

static void http_closed(void *pdata) { free(pdata); }

/* ---- GET /v1/allow ------------------------------------------------------------ */

/* A decision in flight, in its slot's data: what its answer needs besides
 * the result. */
typedef struct allow_req {
    sl_hans a;
    int64_t window_ms;
} allow_req;

_Static_assert(sizeof(allow_req) <= SL_SLOT_DATA, "allow_req fits a slot's data");

/* Appends ,"NAME":V to d; returns the end. */
static char *jfield(char *d, const char *name, long long v)
{
    size_t n = strlen(name);
    *d++ = ',';
    *d++ = ' ';
    *d++ = '"';
    memcpy(d, name, n);
    d += n;
    *d++ = '"';
    *d++ = ':';
    *d++ = ' ';
    return d + sl_rlh_itoa(d, v);
}

static void on_allowed(void *arg, const sl_svc_reply *r)
{
    allow_req *q = arg;
    if (r->rc < 0) {
        sl_http_send_error(&q->a, 400, "Bad Request", r->err);
        return;
    }
    const sl_result *x = &r->result;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_http_decision_headers(&h, x, q->window_ms);
    /* the six fields, as jansson would write them (test_http.py parses them) */
    char body[256], *d = body;
    memcpy(d, x->allowed ? "{\"allowed\": true" : "{\"allowed\": false", x->allowed ? 16 : 17);
    d += x->allowed ? 16 : 17;
    d = jfield(d, "limit", (long long)x->limit);
    d = jfield(d, "remaining", (long long)x->remaining);
    d = jfield(d, "retry_after_ms", (long long)x->retry_after_ms);
    d = jfield(d, "reset_after_ms", (long long)x->reset_after_ms);
    d = jfield(d, "delay_ms", (long long)x->delay_ms);
    memcpy(d, "}\n", 2);
    d += 2;
    sl_hans a = q->a;
    if (x->allowed)
        sl_http_send(&a, 200, "OK", &h, "application/json", body, (size_t)(d - body));
    else
        sl_http_send(&a, 429, "Too Many Requests", &h, "application/json", body,
                     (size_t)(d - body));
}

/* The parameters of /v1/allow, in the order RL.ALLOW takes them. */
static const char *const allow_params[] = {"key",  "limit", "window",    "algo",
                                           "cost", "burst", "precision", "at"};
#define NPARAMS (sizeof allow_params / sizeof allow_params[0])

static int unhex(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes s[0..n) (a query value: %XX, '+' a space; a '%' not followed by
 * two hex digits stays as it is) into d, NUL-ended; returns its length. */
static size_t query_decode(char *d, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '+') {
            d[o++] = ' ';
        } else if (s[i] == '%' && i + 2 < n && (h = unhex(s[i + 1])) >= 0 &&
                   (l = unhex(s[i + 2])) >= 0) {
            d[o++] = (char)(h * 16 + l);
            i += 2;
        } else {
            d[o++] = s[i];
        }
    }
    d[o] = '\0';
    return o;
}

static void v1_allow(http_worker *hw, const sl_hreq *req)
{
    char err[SL_SVC_ERR], qb[80];
    sl_svc_ctx *x = hw->svc;
    const char *query = req->query ? req->query : "";
    /* %00 would decode to a NUL and cut the value short: refuse it */
    for (const char *p = query; (p = strchr(p, '%')) != NULL; p++)
        if (p[1] == '0' && p[2] == '0') {
            sl_http_send_error(&req->a, 400, "Bad Request", "a parameter holds a NUL byte (%00)");
            return;
        }
    /* name=value&...: names as sent, values decoded into dec */
    char dec[SL_HTTP_MAX_URI + NPARAMS + 1], *dp = dec;
    const char *val[NPARAMS] = {0};
    size_t vlen[NPARAMS] = {0};
    int bad = 0;
    for (const char *s = query; *s != '\0' && !bad;) {
        const char *amp = strchr(s, '&'), *end = amp ? amp : s + strlen(s);
        const char *eq = memchr(s, '=', (size_t)(end - s));
        if (eq == NULL || eq == s) {
            sl_http_send_error(&req->a, 400, "Bad Request",
                               "malformed query string: expected name=value&...");
            return;
        }
        size_t i = 0, klen = (size_t)(eq - s);
        while (i < NPARAMS && (strlen(allow_params[i]) != klen || memcmp(s, allow_params[i], klen)))
            i++;
        if (i == NPARAMS) {
            snprintf(err, sizeof err,
                     "unknown parameter '%s' (expected key, limit, window, algo, cost, burst, "
                     "precision or at)",
                     sl__quote(qb, sizeof qb, s, klen));
            bad = 1;
            break;
        }
        if (val[i] != NULL) {
            snprintf(err, sizeof err, "parameter %s given twice", allow_params[i]);
            bad = 1;
            break;
        }
        val[i] = dp;
        vlen[i] = query_decode(dp, eq + 1, (size_t)(end - eq - 1));
        dp += vlen[i] + 1;
        s = amp ? amp + 1 : end;
        if (amp != NULL && *s == '\0') break; /* a trailing '&' */
    }
    for (size_t i = 0; !bad && i < 3; i++)
        if (val[i] == NULL) {
            snprintf(err, sizeof err, "missing parameter %s (key, limit and window are needed)",
                     allow_params[i]);
            bad = 1;
        }
    sl_params p = SL_PARAMS_INIT;
    int64_t cost = 1, now = sl_now_ms(), at = now;
#define LEN(i) vlen[i]
    if (!bad)
        bad = sl__parse_key(val[0], LEN(0), err, sizeof err) != 0 ||
              sl__parse_limit(val[1], LEN(1), &p.limit, err, sizeof err) != 0 ||
              sl__parse_window(val[2], LEN(2), &p.window_ms, err, sizeof err) != 0 ||
              (val[3] && sl__parse_algo(val[3], LEN(3), &p.algo, err, sizeof err) != 0) ||
              (val[4] && sl__parse_cost(val[4], LEN(4), &cost, err, sizeof err) != 0) ||
              (val[5] && sl__parse_burst(val[5], LEN(5), &p.burst, err, sizeof err) != 0) ||
              (val[6] &&
               sl__parse_precision(val[6], LEN(6), &p.precision, err, sizeof err) != 0) ||
              (val[7] && sl_svc_parse_at(x, now, val[7], LEN(7), &at, err, sizeof err) != 0);
#undef LEN
    if (bad) {
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    allow_req *q = sl_slot_data(req->a.slot);
    q->a = req->a;
    q->window_ms = p.window_ms;
    /* the service checks the parameters together: its error names the bad one */
    sl_svc_allow(x, val[0], vlen[0], &p, cost, at, 1, on_allowed, q);
}

/* ---- routing ---------------------------------------------------------------- */

static void healthz(http_worker *hw, const sl_hreq *req)
{
    (void)hw;
    static const char body[] = "{\"status\": \"alive\"}\n";
    sl_http_send(&req->a, 200, "OK", NULL, "application/json", body, sizeof body - 1);
}

#define GET  SL_HM_GET
#define HEAD SL_HM_HEAD

/* Every endpoint: the first row that matches the path wins.  Each
 * endpoint family's file adds its rows here. */
static const sl_http_route routes[] = {
    {"/v1/allow", 0, GET, "GET", v1_allow, SL_AUTH_DECIDING},
    {"/healthz", 0, GET | HEAD, "GET, HEAD", healthz, 0},
    {"/v1/rules", 0, ~0u, "GET", sl_http_rules_list, 0},
    {"/v1/rules/", 1, ~0u, "GET, PUT, DELETE", sl_http_rules_domain, 0},
    {"/v1/status", 0, GET | HEAD, "GET, HEAD", sl_http_status_json, SL_AUTH_READING},
    {"/", 0, GET | HEAD, "GET, HEAD", sl_http_status_page, SL_AUTH_READING},
    {"/v1/check", 0, SL_HM_POST, "POST", sl_http_v1_check, SL_AUTH_DECIDING},
    {"/v1/acquire", 0, SL_HM_POST, "POST", sl_http_v1_acquire, SL_AUTH_DECIDING}, /* hold.c */
    {"/v1/release", 0, SL_HM_POST, "POST", sl_http_v1_release, SL_AUTH_DECIDING},
    {"/v1/reserve", 0, SL_HM_POST, "POST", sl_http_v1_reserve, SL_AUTH_DECIDING},
    {"/v1/settle", 0, SL_HM_POST, "POST", sl_http_v1_settle, SL_AUTH_DECIDING},
    {"/v1/auth/", 1, ~0u, "", sl_http_v1_auth, SL_AUTH_DECIDING},
    {"/readyz", 0, GET | HEAD, "GET, HEAD", sl_http_readyz, 0},
    {"/metrics", 0, GET | HEAD, "GET, HEAD", sl_http_metrics, 0},
};

static const sl_http_route *route_for(const char *path)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const sl_http_route *r = &routes[i];
        if (r->prefix ? strncmp(path, r->path, strlen(r->path)) == 0 : strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

/* ---- bearer tokens ------------------------------------------------------------ */

/* Refuses req with 401: the JSON error msg and a WWW-Authenticate
 * challenge (RFC 6750 section 3: no error code when no credentials came,
 * `error` naming what was wrong with those that did); h may hold more
 * headers. */
static void unauthorized(const sl_hreq *req, sl_hhdrs *h, const char *error, const char *msg)
{
    char v[96];
    if (error == NULL)
        snprintf(v, sizeof v, "Bearer realm=\"sluiced\"");
    else
        snprintf(v, sizeof v, "Bearer realm=\"sluiced\", error=\"%s\"", error);
    sl_hhdrs_add(h, "WWW-Authenticate", v);
    sl_http_send_error_h(&req->a, h, 401, "Unauthorized", msg);
}

void sl_http_send_blocked(const sl_hreq *req, const sl_config *cfg, const char *host,
                          int64_t retry_ms)
{
    char msg[256];
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_int(&h, "Retry-After", sl_rlh_ceil_s(retry_ms));
    snprintf(msg, sizeof msg,
             "too many failed logins from %s: retry in %lld ms (at most %lld failures per "
             "%lld ms; this token was not checked)",
             host ? host : "this client", (long long)retry_ms, (long long)cfg->auth_fail_max,
             (long long)cfg->auth_fail_window_ms);
    unauthorized(req, &h, "invalid_token", msg);
}

/* Whether req may reach a route that needs the groups `need` (SL_AUTH_*
 * bits), at time now.  With no password configured, or need 0, everyone
 * may.  Otherwise the request carries `Authorization: Bearer TOKEN`, TOKEN
 * being the password of "default" (--requirepass-file) or USER:PASSWORD
 * (a --users-file user; a token with a ':' is always read so, split at
 * its first ':'); it is checked as RESP's AUTH checks it (sl_auth_bearer:
 * constant time, failures counted against the client's address), and the
 * user must hold every group of need.  Returns 1, or 0 after answering
 * req: 401 (no, malformed or wrong credentials; an address with too many
 * recent failures, with Retry-After) or 403 (a user without the group). */
static int authorized(http_worker *hw, const sl_hreq *req, unsigned need, int64_t now)
{
    sl_auth *a = hw->svc->srv->auth;
    if (need == 0 || !sl_auth_required(a)) return 1;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    const char *hv = sl_hreq_header(req, "Authorization");
    char hb[64];
    const char *host = sl_hreq_client_host(hw->cfg, req, hb, sizeof hb);
    char msg[256];
    const sl_auth_user *who = NULL;
    int64_t retry = 0;
    switch (sl_auth_bearer(a, host, hv, hv ? strlen(hv) : 0, need, now, &who, &retry)) {
    case SL_AUTH_OK: return 1;
    case SL_AUTH_MISSING:
        unauthorized(req, &h, NULL,
                     "a password is configured: send Authorization: Bearer <password> (or "
                     "Bearer <user>:<password>)");
        return 0;
    case SL_AUTH_MALFORMED:
        unauthorized(req, &h, "invalid_request",
                     "malformed Authorization header: expected Bearer <password> or Bearer "
                     "<user>:<password>");
        return 0;
    case SL_AUTH_BLOCKED: sl_http_send_blocked(req, hw->svc->srv->cfg, host, retry); return 0;
    case SL_AUTH_NOPERM:
        snprintf(msg, sizeof msg, "user '%s' has no permission for this endpoint (it needs %s)",
                 who->name,
                 need & SL_AUTH_ADMIN     ? "+admin"
                 : need & SL_AUTH_READING ? "+reading"
                                          : "+deciding");
        sl_http_send_error(&req->a, 403, "Forbidden", msg);
        return 0;
    default:
        unauthorized(req, &h, "invalid_token",
                     "invalid bearer token: wrong user or password, or the user is disabled");
        return 0;
    }
}

/* ---- running requests ------------------------------------------------------- */

/* Copies n bytes of s into the worker's copy at *o, NUL-ended; returns
 * the copy. */
static const char *keep(http_worker *hw, size_t *o, const char *s, size_t n)
{
    char *d = hw->copy + *o;
    memcpy(d, s, n);
    d[n] = '\0';
    *o += n + 1;
    return d;
}

/* The path and query of a target that is not origin-form ("/path?q"):
 * absolute-form ("http://host/path?q") has its path and query taken; any
 * other ("*", an authority) has no path.  Returns the path's length
 * (0: none) and sets *q to the query's start (NULL: none). */
static size_t split_target(const char *t, size_t n, const char **path, const char **q, size_t *qn)
{
    *q = NULL;
    *qn = 0;
    const char *s = t, *end = t + n;
    if (n == 0 || t[0] != '/') { /* absolute-form: scheme "://" authority, then the path */
        const char *sch = memchr(t, ':', n);
        if (sch == NULL || end - sch < 3 || sch[1] != '/' || sch[2] != '/') return 0;
        s = sch + 3;
        while (s < end && *s != '/' && *s != '?') s++;
        if (s == end || *s != '/') return 0;
    }
    const char *qm = memchr(s, '?', (size_t)(end - s));
    *path = s;
    if (qm != NULL) {
        *q = qm + 1;
        *qn = (size_t)(end - qm - 1);
    }
    return (size_t)((qm ? qm : end) - s);
}

/* Opens the next slot of c for the request just parsed, with its framing
 * in a; -1 when out of memory. */
static int open_answer(sl_conn *c, const sl_h1_req *h, sl_hans *a)
{
    a->slot = sl_conn_slot(c);
    if (a->slot == NULL) return -1;
    a->head = h->method == SL_HM_HEAD;
    a->close = !h->keep_alive || sl_conn_stopping(c);
    a->minor = h->major == 1 && h->minor >= 1;
    return 0;
}

/* Runs one whole request (hw->h1, whose spans point into p).  Returns 1
 * when the connection ends after its answer, 0 when it goes on, -1 when
 * out of memory. */
static int run_request(http_worker *hw, sl_conn *c, const char *p, int64_t now)
{
    const sl_h1_req *h = &hw->h1;
    sl_hreq req;
    if (open_answer(c, h, &req.a) != 0) return -1;
    if (h->major != 1) {
        /* HTTP/0.x and 2+: not ours (RFC 9110 section 15.6.6), answered
         * in HTTP/1.0, which every HTTP client reads */
        req.a.close = 1;
        req.a.minor = 0;
        sl_http_send_error(&req.a, 505, "HTTP Version Not Supported",
                           "only HTTP/1.0 and HTTP/1.1 are served");
        return 1;
    }
    int ends = req.a.close;
    if (sl_conn_refused(c)) { /* beyond --max-clients: this answer is its only one */
        req.a.close = 1;
        sl_http_send_error(&req.a, 503, "Service Unavailable", "max number of clients reached");
        return 1;
    }
    /* the head's strings, NUL-ended, in the worker's copy */
    size_t o = 0, plen, qn;
    const char *path = NULL, *q;
    plen = split_target(p + h->target.off, h->target.len, &path, &q, &qn);
    if (plen == 0) {
        sl_http_send_error(&req.a, 400, "Bad Request", "malformed request target");
        return ends;
    }
    req.method = h->method;
    req.method_name = h->method_name;
    req.path = keep(hw, &o, path, plen);
    req.query = q ? keep(hw, &o, q, qn) : NULL;
    req.nh = h->nfields;
    for (int i = 0; i < h->nfields; i++) {
        const char *v = p + h->value[i].off;
        size_t vn = h->value[i].len;
        while (vn > 0 && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) vn--;
        req.hname[i] = keep(hw, &o, p + h->name[i].off, h->name[i].len);
        req.hvalue[i] = keep(hw, &o, v, vn);
    }
    req.body = p + h->body.off;
    req.body_len = h->body.len;
    req.conn = c;

    const sl_http_route *r = route_for(req.path);
    if (r == NULL) {
        char qb[80], msg[128];
        snprintf(msg, sizeof msg, "no such path: %s", sl__quote(qb, sizeof qb, req.path, plen));
        sl_http_send_error(&req.a, 404, "Not Found", msg);
        return ends;
    }
    if (!(r->methods & req.method)) {
        char msg[96];
        sl_hhdrs hh;
        sl_hhdrs_init(&hh);
        sl_hhdrs_add(&hh, "Allow", r->allow);
        snprintf(msg, sizeof msg, "method not allowed: use %s", r->allow);
        sl_http_send_error_h(&req.a, &hh, 405, "Method Not Allowed", msg);
        return ends;
    }
    if (!authorized(hw, &req, r->needs_auth, now)) return ends;
    r->fn(hw, &req);
    return ends;
}

/* Answers a request refused by the framing (h1.h: SL_H1_BAD), in HTTP/1.1
 * with Connection: close. */
static int refuse(sl_conn *c, int status, const char *why)
{
    static const struct {
        int code;
        const char *reason;
    } reasons[] = {
        {400, "Bad Request"},
        {411, "Length Required"},
        {413, "Content Too Large"},
        {414, "URI Too Long"},
        {431, "Request Header Fields Too Large"},
        {505, "HTTP Version Not Supported"},
    };
    const char *reason = "Bad Request";
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].code == status) reason = reasons[i].reason;
    sl_hans a = {sl_conn_slot(c), 0, 1, 1};
    if (a.slot == NULL) return SL_PROTO_NOMEM;
    char msg[160];
    if (status == 400)
        snprintf(msg, sizeof msg, "malformed request: %s", why);
    else
        snprintf(msg, sizeof msg, "%s", why);
    if (status == 505) a.minor = 0;
    sl_conn_protocol_error(c, msg);
    sl_http_send_error(&a, status, reason, msg);
    return SL_PROTO_CLOSE;
}

static int http_run(sl_conn *c, const char *p, size_t len, int64_t now, sl_turn *t, size_t *used)
{
    http_worker *hw = sl_conn_scratch(c);
    if (hw->svc == NULL) {
        hw->svc = sl_conn_svc(c);
        hw->cfg = sl_conn_cfg(c);
    }
    size_t off = 0;
    int st = SL_PROTO_AGAIN;
    while (off < len) {
        if (t->cmds == 0 || t->bytes == 0) {
            st = SL_PROTO_TURN;
            break;
        }
        int rc = sl_h1_parse(p + off, len - off, &hw->h1);
        if (rc == SL_H1_MORE) break;
        if (rc == SL_H1_BAD) {
            st = refuse(c, hw->h1.status, hw->h1.why);
            off = len;
            break;
        }
        size_t n = hw->h1.used;
        t->cmds--;
        t->bytes = n >= t->bytes ? 0 : t->bytes - n;
        int ends = run_request(hw, c, p + off, now);
        off += n;
        if (ends != 0) {
            st = ends < 0 ? SL_PROTO_NOMEM : SL_PROTO_CLOSE;
            break;
        }
    }
    *used = off;
    return st;
}

/* Input beyond max-command without a whole request (net.c's bound). */
static void http_fatal(sl_conn *c, const char *msg)
{
    (void)msg;
    refuse(c, 431, "request head longer than max-command");
}

const sl_proto sl_http_proto = {
    .name = "http",
    .run = http_run,
    .fatal = http_fatal,
    .scratch_size = sizeof(http_worker),
    .closed = http_closed,
    .front = SL_FRONT_HTTP,
    .timeout_ms = SL_HTTP_TIMEOUT_MS,
    .refuse_in_band = 1, /* a 503 (sl_conn_refused) */
    .stop_waits = 1,     /* answered with Connection: close */
};
