/*
 * http.c -- HTTP/1.1 on evhttp (http.h): one struct evhttp per worker,
 * bound to the HTTP listening sockets that every worker shares, so a
 * request is parsed, decided and answered on the worker that accepted its
 * connection, with that worker's service context.  evhttp does the
 * framing, keep-alive and pipelining (requests on one connection are
 * answered in order); this file routes, checks values with the service
 * layer's sl_svc_parse_* (so a 400 says what RESP's -ERR says), and writes
 * JSON with jansson and the RateLimit headers.
 *
 * A decision's answer is written in the service's callback.  With the
 * local backend that runs before sl_svc_allow returns; a backend that
 * answers later would need the request kept alive past its connection
 * (evhttp frees it with the connection): not built yet (docs/http.md).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <jansson.h>

#include "auth.h"
#include "check_int.h"
#include "config.h"
#include "http.h"
#include "http_int.h"
#include "metrics.h"
#include "service.h"
#include "status.h"
#include "tls.h"
#include "util.h"

/* ---- answers ---------------------------------------------------------------- */

void sl_http_send_json(struct evhttp_request *req, int code, const char *reason, json_t *obj)
{
    struct evbuffer *b = evbuffer_new();
    char *text = obj ? json_dumps(obj, 0) : NULL;
    json_decref(obj);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (b == NULL || text == NULL) { /* out of memory: an answer without a body */
        free(text);
        if (b) evbuffer_free(b);
        evhttp_send_reply(req, 500, "Internal Server Error", NULL);
        return;
    }
    evbuffer_add(b, text, strlen(text));
    evbuffer_add(b, "\n", 1);
    free(text);
    if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
        /* the headers of the GET without its body: evhttp 2.1 would send
         * the body, unframed, and the next answer on the connection after
         * it (found by tests/fuzz/fuzz_http.c) */
        char n[24];
        snprintf(n, sizeof n, "%zu", evbuffer_get_length(b));
        evhttp_add_header(h, "Content-Length", n);
        evhttp_send_reply(req, code, reason, NULL);
    } else {
        evhttp_send_reply(req, code, reason, b);
    }
    evbuffer_free(b);
}

void sl_http_send_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
    sl_http_send_json(req, code, reason, json_pack("{s:s}", "error", msg));
}

long long sl_http_ceil_s(int64_t ms) { return (long long)((ms + 999) / 1000); }

void sl_http_decision_headers(struct evkeyvalq *h, const sl_result *r, int64_t window_ms)
{
    char v[128];
    long long w = sl_http_ceil_s(window_ms);
    if (w < 1) w = 1;
    snprintf(v, sizeof v, "\"default\";q=%lld;w=%lld", (long long)r->limit, w);
    evhttp_add_header(h, "RateLimit-Policy", v);
    snprintf(v, sizeof v, "\"default\";r=%lld;t=%lld", (long long)r->remaining,
             sl_http_ceil_s(r->reset_after_ms));
    evhttp_add_header(h, "RateLimit", v);
    sl_http_overall_headers(h, r);
}

void sl_http_overall_headers(struct evkeyvalq *h, const sl_result *r)
{
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)r->limit);
    evhttp_add_header(h, "X-RateLimit-Limit", v);
    snprintf(v, sizeof v, "%lld", (long long)r->remaining);
    evhttp_add_header(h, "X-RateLimit-Remaining", v);
    snprintf(v, sizeof v, "%lld", sl_http_ceil_s(r->reset_after_ms));
    evhttp_add_header(h, "X-RateLimit-Reset", v);
    if (!r->allowed && r->retry_after_ms >= 0) {
        long long s = sl_http_ceil_s(r->retry_after_ms);
        snprintf(v, sizeof v, "%lld", s < 1 ? 1 : s);
        evhttp_add_header(h, "Retry-After", v);
    }
}

/* ---- GET /v1/allow ------------------------------------------------------------ */

/* A decision in flight: what its answer needs besides the result. */
typedef struct allow_req {
    struct evhttp_request *req;
    int64_t window_ms;
} allow_req;

static void on_allowed(void *arg, const sl_svc_reply *r)
{
    allow_req *a = arg;
    if (r->rc < 0) {
        sl_http_send_error(a->req, 400, "Bad Request", r->err);
        return;
    }
    const sl_result *x = &r->result;
    sl_http_decision_headers(evhttp_request_get_output_headers(a->req), x, a->window_ms);
    json_t *o = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I}", "allowed", x->allowed != 0, "limit",
                          (json_int_t)x->limit, "remaining", (json_int_t)x->remaining,
                          "retry_after_ms", (json_int_t)x->retry_after_ms, "reset_after_ms",
                          (json_int_t)x->reset_after_ms, "delay_ms", (json_int_t)x->delay_ms);
    if (x->allowed)
        sl_http_send_json(a->req, 200, "OK", o);
    else
        sl_http_send_json(a->req, 429, "Too Many Requests", o);
}

/* The parameters of /v1/allow, in the order RL.ALLOW takes them. */
static const char *const allow_params[] = {"key",  "limit", "window",    "algo",
                                           "cost", "burst", "precision", "at"};
#define NPARAMS (sizeof allow_params / sizeof allow_params[0])

static void v1_allow(http_worker *hw, struct evhttp_request *req, const char *path,
                     const char *query)
{
    (void)path;
    char err[SL_SVC_ERR], qb[80];
    sl_svc_ctx *x = hw->svc;
    if (query == NULL) query = "";
    /* %00 would decode to a NUL and cut the value short: refuse it */
    for (const char *p = query; (p = strchr(p, '%')) != NULL; p++)
        if (p[1] == '0' && p[2] == '0') {
            sl_http_send_error(req, 400, "Bad Request", "a parameter holds a NUL byte (%00)");
            return;
        }
    struct evkeyvalq kv;
    TAILQ_INIT(&kv);
    if (evhttp_parse_query_str(query, &kv) != 0) {
        evhttp_clear_headers(&kv);
        sl_http_send_error(req, 400, "Bad Request",
                           "malformed query string: expected name=value&...");
        return;
    }
    const char *val[NPARAMS] = {0};
    struct evkeyval *e;
    int bad = 0;
    TAILQ_FOREACH(e, &kv, next)
    {
        size_t i = 0;
        while (i < NPARAMS && strcmp(e->key, allow_params[i]) != 0) i++;
        if (i == NPARAMS) {
            snprintf(err, sizeof err,
                     "unknown parameter '%s' (expected key, limit, window, algo, cost, burst, "
                     "precision or at)",
                     sl_svc_quote(qb, sizeof qb, e->key, strlen(e->key)));
            bad = 1;
            break;
        }
        if (val[i] != NULL) {
            snprintf(err, sizeof err, "parameter %s given twice", allow_params[i]);
            bad = 1;
            break;
        }
        val[i] = e->value;
    }
    for (size_t i = 0; !bad && i < 3; i++)
        if (val[i] == NULL) {
            snprintf(err, sizeof err, "missing parameter %s (key, limit and window are needed)",
                     allow_params[i]);
            bad = 1;
        }
    sl_params p = SL_PARAMS_INIT;
    int64_t cost = 1, now = sl_now_ms(), at = now;
#define LEN(i) strlen(val[i])
    if (!bad)
        bad = sl_svc_parse_key(val[0], LEN(0), err, sizeof err) != 0 ||
              sl_svc_parse_limit(val[1], LEN(1), &p.limit, err, sizeof err) != 0 ||
              sl_svc_parse_window(val[2], LEN(2), &p.window_ms, err, sizeof err) != 0 ||
              (val[3] && sl_svc_parse_algo(val[3], LEN(3), &p.algo, err, sizeof err) != 0) ||
              (val[4] && sl_svc_parse_cost(val[4], LEN(4), &cost, err, sizeof err) != 0) ||
              (val[5] && sl_svc_parse_burst(val[5], LEN(5), &p.burst, err, sizeof err) != 0) ||
              (val[6] &&
               sl_svc_parse_precision(val[6], LEN(6), &p.precision, err, sizeof err) != 0) ||
              (val[7] && sl_svc_parse_at(x, now, val[7], LEN(7), &at, err, sizeof err) != 0);
#undef LEN
    if (bad) {
        evhttp_clear_headers(&kv);
        sl_http_send_error(req, 400, "Bad Request", err);
        return;
    }
    allow_req a = {req, p.window_ms};
    /* the service checks the parameters together: its error names the bad one */
    sl_svc_allow(x, val[0], strlen(val[0]), &p, cost, at, 1, on_allowed, &a);
    evhttp_clear_headers(&kv);
}

/* ---- routing ---------------------------------------------------------------- */

static void healthz(http_worker *hw, struct evhttp_request *req, const char *path,
                    const char *query)
{
    (void)hw, (void)path, (void)query;
    sl_http_send_json(req, 200, "OK", json_pack("{s:s}", "status", "alive"));
}

#define GET  EVHTTP_REQ_GET
#define HEAD EVHTTP_REQ_HEAD

/* Every endpoint: the first row that matches the path wins.  Each
 * endpoint family's file adds its rows here. */
static const sl_http_route routes[] = {
    {"/v1/allow", 0, GET, "GET", v1_allow, SL_AUTH_DECIDING},
    {"/healthz", 0, GET | HEAD, "GET, HEAD", healthz, 0},
    {"/v1/rules", 0, ~0u, "GET", sl_http_rules_list, 0},
    {"/v1/rules/", 1, ~0u, "GET, PUT, DELETE", sl_http_rules_domain, 0},
    {"/v1/status", 0, GET | HEAD, "GET, HEAD", sl_http_status_json, SL_AUTH_READING},
    {"/", 0, GET | HEAD, "GET, HEAD", sl_http_status_page, SL_AUTH_READING},
    {"/v1/check", 0, EVHTTP_REQ_POST, "POST", sl_http_v1_check, SL_AUTH_DECIDING},
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

/* Bytes of the request's headers as sent: "name: value\r\n" each. */
static size_t headers_size(struct evhttp_request *req)
{
    size_t n = 0;
    struct evkeyval *e;
    TAILQ_FOREACH(e, evhttp_request_get_input_headers(req), next)
    n += strlen(e->key) + strlen(e->value) + 4;
    return n;
}

/* ---- bearer tokens ------------------------------------------------------------ */

/* Refuses req with 401: the JSON error msg and a WWW-Authenticate
 * challenge (RFC 6750 section 3: no error code when no credentials came,
 * `error` naming what was wrong with those that did). */
static void unauthorized(struct evhttp_request *req, const char *error, const char *msg)
{
    char v[96];
    if (error == NULL)
        snprintf(v, sizeof v, "Bearer realm=\"sluiced\"");
    else
        snprintf(v, sizeof v, "Bearer realm=\"sluiced\", error=\"%s\"", error);
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", v);
    sl_http_send_error(req, 401, "Unauthorized", msg);
}

/* Whether req may reach a route that needs the groups `need` (SL_AUTH_*
 * bits), at time now.  With no password configured, or need 0, everyone
 * may.  Otherwise the request carries `Authorization: Bearer TOKEN`, TOKEN
 * being the password of "default" (--requirepass-file) or USER:PASSWORD
 * (a --users-file user; a token with a ':' is always read so, split at
 * its first ':'); it is checked as RESP's AUTH checks it (sl_auth_login:
 * constant time, failures counted against the client's address), and the
 * user must hold every group of need.  Returns 1, or 0 after answering
 * req: 401 (no, malformed or wrong credentials; an address with too many
 * recent failures, with Retry-After) or 403 (a user without the group). */
static int authorized(http_worker *hw, struct evhttp_request *req, unsigned need, int64_t now)
{
    sl_auth *a = hw->svc->srv->auth;
    if (need == 0 || !sl_auth_required(a)) return 1;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (h == NULL) {
        unauthorized(req, NULL,
                     "a password is configured: send Authorization: Bearer <password> (or "
                     "Bearer <user>:<password>)");
        return 0;
    }
    /* the scheme is case-insensitive (RFC 9110 section 11.1), then one or
     * more spaces, then the token: no spaces, not empty */
    const char *tok = h;
    if (strncasecmp(tok, "Bearer", 6) != 0 || tok[6] != ' ') tok = NULL;
    if (tok != NULL) {
        tok += 6;
        while (*tok == ' ') tok++;
        if (*tok == '\0' || strpbrk(tok, " \t") != NULL) tok = NULL;
    }
    if (tok == NULL) {
        unauthorized(req, "invalid_request",
                     "malformed Authorization header: expected Bearer <password> or Bearer "
                     "<user>:<password>");
        return 0;
    }
    const char *colon = strchr(tok, ':');
    const char *user = colon ? tok : "default", *pass = colon ? colon + 1 : tok;
    size_t ulen = colon ? (size_t)(colon - tok) : 7;
    char *host = NULL, msg[256];
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(evhttp_request_get_connection(req), &host, &port);
    const sl_auth_user *who = NULL;
    int64_t retry = 0;
    int rc = sl_auth_login(a, host, user, ulen, pass, strlen(pass), now, &who, &retry);
    if (rc == SL_AUTH_BLOCKED) {
        const sl_config *cfg = hw->svc->srv->cfg;
        snprintf(msg, sizeof msg, "%lld", sl_http_ceil_s(retry));
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", msg);
        snprintf(msg, sizeof msg,
                 "too many failed logins from %s: retry in %lld ms (at most %lld failures per "
                 "%lld ms; this token was not checked)",
                 host ? host : "this client", (long long)retry, (long long)cfg->auth_fail_max,
                 (long long)cfg->auth_fail_window_ms);
        unauthorized(req, "invalid_token", msg);
        return 0;
    }
    if (rc != SL_AUTH_OK) {
        unauthorized(req, "invalid_token",
                     "invalid bearer token: wrong user or password, or the user is disabled");
        return 0;
    }
    if ((who->groups & need) != need) {
        sl_auth_count_denied(a);
        snprintf(msg, sizeof msg, "user '%s' has no permission for this endpoint (it needs %s)",
                 who->name,
                 need & SL_AUTH_ADMIN     ? "+admin"
                 : need & SL_AUTH_READING ? "+reading"
                                          : "+deciding");
        sl_http_send_error(req, 403, "Forbidden", msg);
        return 0;
    }
    return 1;
}

static int refused(http_worker *hw, struct evhttp_request *req);

static void on_request(struct evhttp_request *req, void *arg)
{
    http_worker *hw = arg;
    /* evhttp takes HTTP/0.x and HTTP/1.x for any x, and answers in the
     * request's version (libevent 2.1 has no accessor for it): a later
     * HTTP/1 is answered as HTTP/1.1 (RFC 9110 section 2.5); HTTP/0.x, and
     * a negative number (its sscanf takes one), is refused in HTTP/1.0 */
    if (req->major == 1 && req->minor > 1) req->minor = 1;
    if (req->major != 1 || req->minor < 0) {
        req->major = 1;
        req->minor = 0;
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        sl_http_send_error(req, 505, "HTTP Version Not Supported",
                           "only HTTP/1.0 and HTTP/1.1 are served");
        return;
    }
    const char *target = evhttp_request_get_uri(req);
    if (strlen(target) > SL_HTTP_MAX_URI) {
        sl_http_send_error(req, 414, "URI Too Long",
                           "request target longer than SL_HTTP_MAX_URI bytes");
        return;
    }
    if (headers_size(req) > SL_HTTP_MAX_HEADERS) {
        sl_http_send_error(req, 431, "Request Header Fields Too Large",
                           "request headers longer than SL_HTTP_MAX_HEADERS bytes");
        return;
    }
    const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    if (path == NULL) {
        sl_http_send_error(req, 400, "Bad Request", "malformed request target");
        return;
    }
    if (hw->stopping) /* the server is stopping: this answer is the last */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    if (refused(hw, req)) return;
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    const sl_http_route *r = route_for(path);
    if (r == NULL) {
        char qb[80], msg[128];
        snprintf(msg, sizeof msg, "no such path: %s",
                 sl_svc_quote(qb, sizeof qb, path, strlen(path)));
        sl_http_send_error(req, 404, "Not Found", msg);
        return;
    }
    if (!(r->methods & (unsigned)m)) {
        char msg[96];
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", r->allow);
        snprintf(msg, sizeof msg, "method not allowed: use %s", r->allow);
        sl_http_send_error(req, 405, "Method Not Allowed", msg);
        return;
    }
    if (!authorized(hw, req, r->needs_auth, sl_now_ms())) return;
    r->fn(hw, req, path, evhttp_uri_get_query(u));
}

/* ---- connections ------------------------------------------------------------ */

/* One HTTP connection.  libevent 2.1's evhttp keeps its connections to
 * itself: it tells of a new one only by asking for its bufferevent
 * (evhttp_set_bevcb, before the connection exists), and of its end only to
 * a close callback set on the connection.  So each new connection's
 * bufferevent is made here with an hconn, queued on hw->fresh, and
 * adopted (its evhttp_connection found, the close callback set) by an
 * event activated at once: it runs in the same loop turn, after evhttp has
 * made the connection and before any byte of it can be read.  The hconn is
 * counted (--max-clients, INFO http_clients) from its bufferevent to its
 * close callback, and holds the connection's deadline. */
struct hconn {
    struct bufferevent *bev;          /* the connection's (evhttp's once adopted) */
    struct evhttp_connection *evcon;  /* NULL until adopted */
    struct evbuffer_cb_entry *out_cb; /* on bev's output: an answer re-arms the deadline */
    struct evbuffer_cb_entry *in_cb;  /* on bev's input: a request has begun */
    http_worker *hw;
    int64_t deadline;     /* monotonic ms: closed if its next request is not answered by then */
    hconn *prev, *next;   /* in hw's list: fresh, head..tail, or refused */
    unsigned counted : 1; /* counts in srv->clients and stats.http_clients */
    unsigned refused : 1; /* beyond --max-clients: its first request is answered 503 */
    unsigned doomed : 1;  /* its TLS could not be made: closed at once */
    unsigned closing : 1; /* told to close */
    unsigned busy : 1;    /* bytes came since its last answer: a request is under way */
};

/* The list c is on. */
static hconn **list_of(http_worker *hw, hconn *c)
{
    return c->evcon == NULL ? &hw->fresh : c->refused ? &hw->refused : &hw->head;
}

static void unlink_conn(http_worker *hw, hconn *c)
{
    hconn **head = list_of(hw, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else if (head == &hw->head)
        hw->tail = c->prev;
    c->prev = c->next = NULL;
}

/* Puts c on its list with deadline `at`.  The counted list stays ordered
 * by deadline, as every deadline there is "now + timeout" when set. */
static void link_conn(http_worker *hw, hconn *c, int64_t at)
{
    hconn **head = list_of(hw, c);
    c->deadline = at;
    c->prev = NULL;
    if (head != &hw->head) {
        c->next = *head;
        if (*head) (*head)->prev = c;
        *head = c;
        return;
    }
    c->next = NULL;
    c->prev = hw->tail;
    if (hw->tail)
        hw->tail->next = c;
    else
        hw->head = c;
    hw->tail = c;
}

/* Forgets c: uncounted, off its list, freed. */
static void conn_drop(http_worker *hw, hconn *c)
{
    unlink_conn(hw, c);
    if (c->counted) {
        sl_srv *srv = hw->svc->srv;
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&srv->stats.http_clients, 1, memory_order_relaxed);
    }
    free(c);
}

/* evhttp frees the connection (closed by either side, timed out, or the
 * server stopping). */
static void on_conn_closed(struct evhttp_connection *evcon, void *arg)
{
    hconn *c = arg;
    sl_http_admin_conn_closed(c->hw, evcon); /* its requests waiting for a rules change */
    if (c->out_cb) evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
    if (c->in_cb) evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->in_cb);
    conn_drop(c->hw, c);
}

/* Bytes added to the connection's output: an answer, so its next request
 * has --recv-timeout from now. */
static void on_output(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)b;
    hconn *c = arg;
    if (info->n_added == 0) return;
    c->busy = 0;
    if (c->refused) return;
    unlink_conn(c->hw, c);
    link_conn(c->hw, c, sl__mono_ms() + c->hw->timeout_ms);
}

/* Bytes read: a request has begun (evhttp consumes its lines as they
 * come, so the input buffer alone does not say). */
static void on_input(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)b;
    if (info->n_added > 0) ((hconn *)arg)->busy = 1;
}

/* Has evhttp close c's connection as one that timed out (deferred: evhttp
 * frees the connection, and c, from the loop). */
static void conn_close(hconn *c)
{
    if (c->closing) return;
    c->closing = 1;
    bufferevent_trigger_event(c->bev, BEV_EVENT_TIMEOUT | BEV_EVENT_READING,
                              BEV_TRIG_DEFER_CALLBACKS);
}

/* The connections made since the last run: finds each one's
 * evhttp_connection (the argument evhttp gave its bufferevent's callbacks)
 * and sets the close callback.  One whose callbacks are gone was freed by
 * evhttp at once (out of memory): its bufferevent waits for the loop to
 * finalize it, so it can still be read here. */
static void on_adopt(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    http_worker *hw = arg;
    while (hw->fresh != NULL) {
        hconn *c = hw->fresh;
        void *evcon = NULL;
        bufferevent_getcb(c->bev, NULL, NULL, NULL, &evcon);
        if (evcon == NULL) {
            conn_drop(hw, c);
            continue;
        }
        unlink_conn(hw, c);
        c->evcon = evcon;
        evhttp_connection_set_closecb(c->evcon, on_conn_closed, c);
        c->out_cb = evbuffer_add_cb(bufferevent_get_output(c->bev), on_output, c);
        c->in_cb = evbuffer_add_cb(bufferevent_get_input(c->bev), on_input, c);
        link_conn(hw, c, c->doomed ? 0 : c->deadline);
        if (c->doomed) conn_close(c);
    }
}

/* Every tick: closes the connections past their deadline, soonest first
 * (a request not whole within --recv-timeout of the connection's start or
 * of its last answer: a slow or stalled sender), refused ones included. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    http_worker *hw = arg;
    int64_t now = sl__mono_ms();
    for (hconn *c = hw->head; c != NULL && (c->closing || c->deadline <= now); c = c->next)
        conn_close(c);
    for (hconn *c = hw->refused; c != NULL; c = c->next)
        if (c->deadline <= now) conn_close(c);
}

/* A new connection's bufferevent (evhttp_set_bevcb), on the worker's
 * thread: the socket's, or for TLS OpenSSL's (accepting).  Counted
 * against --max-clients as RESP's clients are; beyond it the connection is
 * served only a 503.  NULL when out of memory (evhttp then makes a plain
 * one of its own, or more likely fails too). */
static struct bufferevent *conn_bev(http_worker *hw, struct event_base *base, int tls)
{
    sl_srv *srv = hw->svc->srv;
    hconn *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    SSL *ssl = tls ? sl_tls_ssl_new(srv->tls) : NULL;
    if (ssl != NULL)
        c->bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                BEV_OPT_CLOSE_ON_FREE);
    else /* without TLS state, a TLS client is closed at once, never served in clear */
        c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        if (ssl) SSL_free(ssl);
        free(c);
        return NULL;
    }
    c->hw = hw;
    c->doomed = tls && ssl == NULL;
    int n = atomic_fetch_add_explicit(&srv->clients, 1, memory_order_relaxed);
    if (n >= hw->cfg->max_clients) {
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&srv->rejected, 1, memory_order_relaxed);
        c->refused = 1;
    } else {
        c->counted = 1;
        atomic_fetch_add_explicit(&srv->connections, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&srv->stats.http_clients, 1, memory_order_relaxed);
    }
    link_conn(hw, c, sl__mono_ms() + hw->timeout_ms); /* on fresh */
    event_active(hw->adopt, EV_TIMEOUT, 0);
    return c->bev;
}

static struct bufferevent *bev_plain(struct event_base *base, void *arg)
{
    return conn_bev(arg, base, 0);
}

static struct bufferevent *bev_tls(struct event_base *base, void *arg)
{
    return conn_bev(arg, base, 1);
}

/* Whether req came on a connection beyond --max-clients: then it is
 * answered 503 and the connection closed.  The refused list is empty
 * unless the server is full. */
static int refused(http_worker *hw, struct evhttp_request *req)
{
    if (hw->refused == NULL) return 0;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    for (hconn *c = hw->refused; c != NULL; c = c->next)
        if (c->evcon == evcon) {
            struct evkeyvalq *h = evhttp_request_get_output_headers(req);
            if (evhttp_find_header(h, "Connection") == NULL)
                evhttp_add_header(h, "Connection", "close");
            sl_http_send_error(req, 503, "Service Unavailable", "max number of clients reached");
            return 1;
        }
    return 0;
}

/* ---- the worker's server ---------------------------------------------------- */

static void on_backoff_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    http_worker *hw = arg;
    for (int i = 0; i < hw->nlev; i++) evconnlistener_enable(hw->lev[i]);
}

/* Every worker's server, by worker number, for on_accept_error, which
 * evhttp calls with its struct evhttp (the listener's argument is evhttp's
 * own).  Written before the worker's thread starts and when it stops (on
 * that thread); atomic as other workers scan it. */
static _Atomic(http_worker *) servers[SL_CONFIG_MAX_THREADS];

/* accept(2) failed (most likely out of file descriptors): rest instead of
 * spinning on a listener that stays readable. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)l;
    http_worker *hw = NULL;
    for (int i = 0; i < SL_CONFIG_MAX_THREADS && hw == NULL; i++) {
        http_worker *h = atomic_load_explicit(&servers[i], memory_order_acquire);
        if (h != NULL && (h->http == arg || h->https == arg)) hw = h;
    }
    if (hw == NULL) return;
    for (int i = 0; i < hw->nlev; i++) evconnlistener_disable(hw->lev[i]);
    struct timeval tv = {0, SL_HTTP_ACCEPT_BACKOFF_MS * 1000};
    evtimer_add(hw->backoff, &tv);
}

static void http_stop(void *h)
{
    http_worker *hw = h;
    if (hw == NULL) return;
    if (hw->id >= 0) atomic_store_explicit(&servers[hw->id], NULL, memory_order_release);
    if (hw->adopt) on_adopt(-1, 0, hw);  /* then freeing a connection frees its hconn */
    if (hw->http) evhttp_free(hw->http); /* its listeners (and their fds) and connections */
    if (hw->https) evhttp_free(hw->https);
    if (hw->adopt) event_free(hw->adopt);
    if (hw->backoff) event_free(hw->backoff);
    if (hw->sweep) event_free(hw->sweep);
    free(hw);
}

/* Whether c's connection is between requests: nothing of a request read
 * since its last answer, nothing in the socket, and nothing of an answer
 * left to send. */
static int idle(const hconn *c)
{
    int fd = (int)bufferevent_getfd(c->bev), n = 0;
    return !c->busy && evbuffer_get_length(bufferevent_get_input(c->bev)) == 0 &&
           evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
           (fd < 0 || (ioctl(fd, FIONREAD, &n) == 0 && n == 0));
}

/* sl_net_side.drain: no more connections; from now on every answer says
 * Connection: close (on_request), so evhttp closes a connection once it
 * has answered; connections idle now are closed at once. */
static int http_drain(void *h)
{
    http_worker *hw = h;
    if (!hw->stopping) {
        hw->stopping = 1;
        for (int i = 0; i < hw->nlev; i++) evconnlistener_disable(hw->lev[i]);
        event_del(hw->backoff);
    }
    on_adopt(-1, 0, hw);
    int open = 0;
    hconn *lists[2] = {hw->head, hw->refused};
    for (int k = 0; k < 2; k++)
        for (hconn *c = lists[k]; c != NULL; c = c->next) {
            if (!c->closing && idle(c)) conn_close(c);
            open++;
        }
    return open;
}

/* A new evhttp on base answering through on_request, with the bounds of
 * http.h; bevcb makes its connections' bufferevents. */
static struct evhttp *new_server(http_worker *hw, struct event_base *base,
                                 struct bufferevent *(*bevcb)(struct event_base *, void *))
{
    struct evhttp *http = evhttp_new(base);
    if (http == NULL) return NULL;
    evhttp_set_gencb(http, on_request, hw);
    evhttp_set_bevcb(http, bevcb, hw);
    evhttp_set_max_headers_size(http, SL_HTTP_MAX_READ);
    evhttp_set_max_body_size(http, SL_HTTP_MAX_BODY);
    struct timeval tv = {(time_t)(hw->timeout_ms / 1000),
                         (suseconds_t)(hw->timeout_ms % 1000) * 1000};
    evhttp_set_timeout_tv(http, &tv);
    /* every method reaches on_request, which answers 405 where it must
     * (evhttp itself would answer 501 to those not in the set) */
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                         EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                         EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    return http;
}

static void *http_start(struct event_base *base, sl_svc_ctx *svc, const sl_config *cfg,
                        const int *lfds, const int *tls, int n, char *err, size_t errlen)
{
    http_worker *hw = calloc(1, sizeof *hw);
    if (hw == NULL) goto nomem;
    hw->svc = svc;
    hw->cfg = cfg;
    hw->id = -1;
    hw->timeout_ms = cfg->recv_timeout_ms > 0 ? cfg->recv_timeout_ms : SL_HTTP_TIMEOUT_MS;
    hw->backoff = evtimer_new(base, on_backoff_done, hw);
    hw->sweep = event_new(base, -1, EV_PERSIST, on_sweep, hw);
    hw->adopt = event_new(base, -1, 0, on_adopt, hw);
    if (hw->backoff == NULL || hw->sweep == NULL || hw->adopt == NULL) goto nomem;
    int64_t tick = hw->timeout_ms / 8 < 10    ? 10
                   : hw->timeout_ms / 8 > 250 ? 250
                                              : hw->timeout_ms / 8;
    struct timeval tv = {(time_t)(tick / 1000), (suseconds_t)(tick % 1000) * 1000};
    if (event_add(hw->sweep, &tv) != 0) goto nomem;
    for (int i = 0; i < n && i < (int)(sizeof hw->lev / sizeof hw->lev[0]); i++) {
        struct evhttp **http = tls[i] ? &hw->https : &hw->http;
        if (*http == NULL && (*http = new_server(hw, base, tls[i] ? bev_tls : bev_plain)) == NULL)
            goto nomem;
        int fd = dup(lfds[i]);
        struct evconnlistener *l =
            fd < 0 ? NULL
                   : evconnlistener_new(base, NULL, NULL,
                                        LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
        if (l == NULL) {
            if (fd >= 0) close(fd);
            goto nomem;
        }
        if (evhttp_bind_listener(*http, l) == NULL) {
            evconnlistener_free(l);
            goto nomem;
        }
        evconnlistener_set_error_cb(l, on_accept_error);
        hw->lev[hw->nlev++] = l;
    }
    if (svc->id >= 0 && svc->id < SL_CONFIG_MAX_THREADS) {
        hw->id = svc->id;
        atomic_store_explicit(&servers[hw->id], hw, memory_order_release);
    }
    return hw;
nomem:
    snprintf(err, errlen, "cannot serve HTTP: out of memory or file descriptors");
    http_stop(hw);
    return NULL;
}

const sl_net_side sl_http_side = {"http", http_start, http_drain, http_stop};
