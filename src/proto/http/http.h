/*
 * http.h -- the HTTP/1.1 protocol module (SPEC section 8, docs/http.md):
 * libevent's evhttp on every worker's loop, over the service layer
 * (service.h) as RESP is -- no decision code of its own.  main.c hands
 * &sl_http_side to sl_net_start, which binds the --http-port listeners and
 * has each worker serve them (net.h: sl_net_side).
 *
 * What it answers today: GET /v1/allow (a decision, 200 or 429, with the
 * RateLimit headers), GET /healthz, and the status page, GET / and GET
 * /v1/status (status.h).  Every other path is 404.
 */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include "net.h"

/* Bounds on one request.  A request line (method, target, version) longer
 * than SL_HTTP_MAX_URI is answered 414, headers (names, values and
 * separators) longer than SL_HTTP_MAX_HEADERS 431; SL_HTTP_MAX_READ bounds
 * what evhttp itself buffers of the two (beyond: 413 from evhttp) and
 * SL_HTTP_MAX_BODY a body (beyond: 413). */
#define SL_HTTP_MAX_URI     8192
#define SL_HTTP_MAX_HEADERS 8192
#define SL_HTTP_MAX_READ    (64 * 1024)
#define SL_HTTP_MAX_BODY    (64 * 1024)
/* Without --recv-timeout, a connection idle or trickling for this long is
 * closed. */
#define SL_HTTP_TIMEOUT_MS 10000
/* A listener whose accept(2) failed (out of file descriptors) rests this
 * long instead of spinning. */
#define SL_HTTP_ACCEPT_BACKOFF_MS 100

extern const sl_net_side sl_http_side;

#endif
