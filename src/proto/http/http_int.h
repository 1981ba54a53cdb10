/*
 * http_int.h -- what the files of the HTTP module share (not an API):
 * the worker's state, a request as handlers see it, the answer they write
 * (into the request's reply slot: proto.h), and the route table's handler
 * type.  http.c owns the framing (h1.h) and the routing (its `routes[]`);
 * each endpoint family has its own file and adds its rows there.
 */
#ifndef SL_HTTP_INT_H
#define SL_HTTP_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "h1.h"
#include "proto.h"
#include "ratelimit_headers.h"
#include "service.h"

/* One worker's HTTP state (its protocol scratch, proto.h): shared by every
 * HTTP connection of the worker, used during one request's handler. */
typedef struct http_worker {
    sl_svc_ctx *svc;      /* the worker's (not owned) */
    const sl_config *cfg; /* the server's (not owned) */
    int64_t date_s;       /* the second `date` was written for */
    char date[48];        /* "Date: ...\r\n" of that second */
    size_t datelen;
    sl_h1_req h1; /* the request being run */
    char copy[SL_HTTP_MAX_URI + SL_HTTP_MAX_HEADERS + 2 * SL_H1_MAX_FIELDS + 16]; /* its head */
} http_worker;

/* How a request is answered: everything its answer needs, small enough to
 * be copied into whatever answers it later (a service callback, the reload
 * thread's answer), as nothing of the request outlives its handler. */
typedef struct sl_hans {
    sl_slot *slot;      /* where the answer goes (orphaned if the client left) */
    unsigned head : 1;  /* HEAD: the GET's headers without the body */
    unsigned close : 1; /* Connection: close, and the connection ends after it */
    unsigned minor : 1; /* HTTP/1.minor in the status line */
} sl_hans;

/* A request, valid only while its handler runs: strings NUL-ended, the
 * body excepted. */
typedef struct sl_hreq {
    unsigned method;         /* an SL_HM_* bit (h1.h) */
    const char *method_name; /* "GET" */
    const char *path;        /* the target's path, not decoded */
    const char *query;       /* what follows '?', not decoded; NULL: none */
    const char *body;        /* its Content-Length bytes (not NUL-ended) */
    size_t body_len;
    int nh;
    const char *hname[SL_H1_MAX_FIELDS], *hvalue[SL_H1_MAX_FIELDS];
    sl_conn *conn;
    sl_hans a;
} sl_hreq;

/* The value of the request's first header `name` (case-insensitive), or NULL. */
const char *sl_hreq_header(const sl_hreq *r, const char *name);
/* The client's address (kept per connection: read once), or NULL. */
const struct sockaddr *sl_hreq_peer(const sl_hreq *r);
/* The same as text without its port ("10.0.0.7", "::1"), or NULL. */
const char *sl_hreq_peer_host(const sl_hreq *r);
/* The client the request is from, as text: its peer, or with a peer in
 * --trusted-proxies the client X-Forwarded-For / X-Real-IP name (fauth.c,
 * the address forward-auth decides for).  Failed logins are counted
 * against it.  buf (cap >= INET6_ADDRSTRLEN) may hold the text; NULL when
 * the peer has no IP address. */
const char *sl_hreq_client_host(const sl_config *cfg, const sl_hreq *req, char *buf, size_t cap);
/* Answers req 401 for a client (host) refused unchecked by the
 * failed-login limit (auth.h: SL_AUTH_BLOCKED): WWW-Authenticate
 * invalid_token, Retry-After (retry_ms in whole seconds, rounded up), and
 * the limit in the message -- one answer for every bearer credential. */
void sl_http_send_blocked(const sl_hreq *req, const sl_config *cfg, const char *host,
                          int64_t retry_ms);

/* Extra headers of an answer, "Name: value\r\n" each, built on the stack
 * (SL_HHDRS_CAP bytes: a header that does not fit is left out and `cut`
 * set). */
#define SL_HHDRS_CAP 16384
typedef struct sl_hhdrs {
    size_t len;
    int cut;
    char b[SL_HHDRS_CAP];
} sl_hhdrs;

void sl_hhdrs_init(sl_hhdrs *h);
void sl_hhdrs_add(sl_hhdrs *h, const char *name, const char *value);
void sl_hhdrs_addn(sl_hhdrs *h, const char *name, const char *value, size_t vlen);
void sl_hhdrs_int(sl_hhdrs *h, const char *name, long long v);

/* The rate-limit headers' writer (ratelimit_headers.h) set to write h's
 * lines after what h holds; sl_hhdrs_took then counts what it wrote (and
 * what it left out: h->cut). */
static inline void sl_hhdrs_rlh(sl_hhdrs *h, sl_rlh *o)
{
    sl_rlh_init(o, h->b + h->len, sizeof h->b - h->len, 1);
}
static inline void sl_hhdrs_took(sl_hhdrs *h, const sl_rlh *o)
{
    h->len += o->len;
    h->cut |= o->cut;
}

/* Writes the whole answer into a's slot and completes it: the status line
 * (HTTP/1.a->minor code reason), Date, Connection: close when a->close,
 * the headers of h (NULL: none), Content-Type ctype (NULL: none),
 * Content-Length and, unless a->head, the body (body may be NULL when
 * len is 0).  Out of memory: a bare 500 with Connection: close. */
void sl_http_send(const sl_hans *a, int code, const char *reason, const sl_hhdrs *h,
                  const char *ctype, const char *body, size_t len);

/* Sends obj (consumed; NULL: out of memory) as the JSON body of a `code`
 * answer with Content-Type application/json, and h's headers. */
void sl_http_send_json(const sl_hans *a, int code, const char *reason, json_t *obj);
void sl_http_send_json_h(const sl_hans *a, const sl_hhdrs *h, int code, const char *reason,
                         json_t *obj);

/* {"error": msg} with status code (SPEC section 8's error body). */
void sl_http_send_error(const sl_hans *a, int code, const char *reason, const char *msg);
void sl_http_send_error_h(const sl_hans *a, const sl_hhdrs *h, int code, const char *reason,
                          const char *msg);

/* The headers of every decision (SPEC section 8) for the one limit named
 * "default" (sl_rlh_decision: RateLimit-Policy, RateLimit, the
 * X-RateLimit-* trio, Retry-After, X-RateLimit-Delay-Ms), after h's. */
void sl_http_decision_headers(sl_hhdrs *h, const sl_result *r, int64_t window_ms);

/* An endpoint: called on the worker's thread for a request whose path
 * matched its route and whose method is in the route's set.  It answers
 * through req->a -- now, or later (copy req->a: nothing of req lives past
 * the call). */
typedef void sl_http_handler(http_worker *hw, const sl_hreq *req);

typedef struct sl_http_route {
    const char *path;  /* exact, or a prefix when it ends in '/' and prefix is set */
    int prefix;        /* 1: every path that starts with `path` */
    unsigned methods;  /* SL_HM_* bits; others get 405 */
    const char *allow; /* the Allow header of that 405, e.g. "GET, HEAD" */
    sl_http_handler *fn;
    /* The SL_AUTH_* groups (auth.h) a caller must hold when a password is
     * configured: the router checks `Authorization: Bearer ...` before the
     * handler runs (401 / 403 otherwise), so handlers need nothing.  0: open
     * to everyone (/healthz); SL_AUTH_DECIDING (1) for decision endpoints. */
    unsigned needs_auth;
} sl_http_route;

/* The rules service (admin.c): GET /v1/rules, and GET|PUT|DELETE
 * /v1/rules/<domain>.  Their routes take every method: without a token
 * configured every request is 404, so they answer 405 themselves. */
sl_http_handler sl_http_rules_list, sl_http_rules_domain;

/* Leases and reservations (hold.c, SPEC 10): POST /v1/acquire, /v1/release,
 * /v1/reserve, /v1/settle. */
sl_http_handler sl_http_v1_acquire, sl_http_v1_release, sl_http_v1_reserve, sl_http_v1_settle;

#endif
