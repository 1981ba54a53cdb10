/*
 * http.h -- the HTTP/1.1 protocol module (SPEC section 8, docs/http.md):
 * a protocol of net.c (proto.h) beside RESP, over the service layer
 * (service.h) as RESP is -- no decision code of its own.  main.c hands
 * &sl_http_proto to sl_net_start, which binds the --http-port and
 * --https-port listeners and serves their connections with it.
 *
 * The bounds of one request are h1.h's (SL_HTTP_MAX_URI, _HEADERS, _BODY).
 */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include "h1.h"
#include "net.h"

/* Without --recv-timeout, a request that is not whole this long after it
 * began, or a connection idle this long, is closed. */
#define SL_HTTP_TIMEOUT_MS SL_NET_HTTP_TIMEOUT_MS

extern const sl_proto sl_http_proto;

#endif
