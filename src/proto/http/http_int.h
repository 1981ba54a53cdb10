/*
 * http_int.h -- what the files of the HTTP module share (not an API):
 * the worker's server, the route table's handler type, and the answers
 * every endpoint writes the same way.  http.c owns the listener and the
 * routing (its `routes[]`); each endpoint family has its own file and adds
 * its rows there.
 */
#ifndef SL_HTTP_INT_H
#define SL_HTTP_INT_H

#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <jansson.h>

#include "service.h"

typedef struct hconn hconn;

/* One worker's HTTP server: its evhttp for --http-port and the one for
 * --https-port (TLS), the listeners they watch, and its connections
 * (http.c: hconn). */
typedef struct http_worker {
    struct evhttp *http;   /* plain HTTP; NULL: none */
    struct evhttp *https;  /* HTTP over TLS; NULL: none */
    sl_svc_ctx *svc;       /* the worker's (not owned) */
    const sl_config *cfg;  /* the server's (not owned) */
    int id;                /* its number: servers[id] is this; -1 until registered */
    struct event *backoff; /* re-enables the listeners after an accept failure */
    struct event *sweep;   /* closes connections past their deadline (http.c) */
    struct event *adopt;   /* finds new connections' evhttp_connection (http.c) */
    int64_t timeout_ms;    /* --recv-timeout, or SL_HTTP_TIMEOUT_MS */
    int stopping;          /* sl_net_side.drain was called */
    hconn *fresh;          /* connections not yet adopted */
    hconn *head, *tail;    /* counted connections, by deadline, soonest first */
    hconn *refused;        /* connections beyond --max-clients (answered 503) */
    int nlev;
    struct evconnlistener *lev[8]; /* owned by http / https (their bound sockets) */
} http_worker;

/* An endpoint: called on the worker's thread for a request whose path
 * matched its route and whose method is in the route's set.  `path` is
 * the decoded-free path of the target (no query), `query` its query
 * string (NULL: none).  The handler answers req -- now, or later from a
 * callback while the connection lives. */
typedef void sl_http_handler(http_worker *hw, struct evhttp_request *req, const char *path,
                             const char *query);

typedef struct sl_http_route {
    const char *path;  /* exact, or a prefix when it ends in '/' and prefix is set */
    int prefix;        /* 1: every path that starts with `path` */
    unsigned methods;  /* enum evhttp_cmd_type bits; others get 405 */
    const char *allow; /* the Allow header of that 405, e.g. "GET, HEAD" */
    sl_http_handler *fn;
    /* The SL_AUTH_* groups (auth.h) a caller must hold when a password is
     * configured: on_request checks `Authorization: Bearer ...` before the
     * handler runs (401 / 403 otherwise), so handlers need nothing.  0: open
     * to everyone (/healthz); SL_AUTH_DECIDING (1) for decision endpoints. */
    unsigned needs_auth;
} sl_http_route;

/* Sends obj (consumed; NULL: out of memory) as the JSON body of a `code`
 * answer with Content-Type application/json. */
void sl_http_send_json(struct evhttp_request *req, int code, const char *reason, json_t *obj);

/* {"error": msg} with status code (SPEC section 8's error body). */
void sl_http_send_error(struct evhttp_request *req, int code, const char *reason, const char *msg);

/* ceil(ms / 1000) for ms >= 0: seconds never shorter than ms. */
long long sl_http_ceil_s(int64_t ms);

/* The headers of every decision (SPEC section 8) for the one limit named
 * "default": RateLimit-Policy and RateLimit as structured-field lists
 * (RFC 9651; draft-ietf-httpapi-ratelimit-headers), the X-RateLimit-*
 * trio, and Retry-After on a denial that can ever be allowed.  The window
 * is in seconds rounded up (at least 1: a structured-field integer cannot
 * say half a second). */
void sl_http_decision_headers(struct evkeyvalq *h, const sl_result *r, int64_t window_ms);

/* The headers every decision carries whatever its policies: the
 * X-RateLimit-* trio of r (Reset: seconds, rounded up) and, on a denial
 * that can ever be allowed, Retry-After (seconds rounded up, at least 1;
 * none when retry_after_ms is -1). */
void sl_http_overall_headers(struct evkeyvalq *h, const sl_result *r);

/* The rules service (admin.c): GET /v1/rules, and GET|PUT|DELETE
 * /v1/rules/<domain>.  Their routes take every method: without a token
 * configured every request is 404, so they answer 405 themselves. */
sl_http_handler sl_http_rules_list, sl_http_rules_domain;

/* admin.c: evhttp is freeing conn, a connection of hw (http.c's close
 * callback, the one a connection has, calls it): forgets conn in the rules
 * changes still waiting for their answer. */
void sl_http_admin_conn_closed(http_worker *hw, struct evhttp_connection *conn);

#endif
