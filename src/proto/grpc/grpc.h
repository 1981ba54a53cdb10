/*
 * grpc.h -- the gRPC protocol module: Envoy's rate limit service
 * (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and
 * grpc.health.v1.Health/Check over HTTP/2, on net.c's connections
 * (--grpc-port).  main.c hands &sl_grpc_proto to sl_net_start through
 * sl_srv.grpc.
 *
 * HTTP/2 is sluiced's own (h2.c, HPACK in hpack.c: one server side per
 * connection, fed bytes, never a socket -- docs/envoy.md, "Performance",
 * says why not a library's); the messages are protobuf-c's, generated
 * from proto/ (ShouldRateLimit's by hand: rls_wire.c).
 * A call's framing is gRPC's: a 5-byte prefix (compressed flag, 32-bit
 * big-endian length) before the message, and trailers carrying
 * grpc-status.  docs/envoy.md says how ShouldRateLimit maps onto RL.CHECK.
 */
#ifndef SL_GRPC_H
#define SL_GRPC_H

#include "proto.h"

/* Limits of one connection, named here and quoted by docs/envoy.md. */
#define SL_GRPC_MAX_STREAMS 100 /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define SL_GRPC_MAX_MESSAGE                                                                        \
    (16 * 1024) /* bytes of one request message (without its                                       \
                   5-byte prefix): more is RESOURCE_EXHAUSTED */
#define SL_GRPC_MAX_HEADERS                                                                        \
    (16 * 1024) /* bytes of one request's header list, counted as RFC                              \
                   9113 does (names + values + 32 a field;                                         \
                   SETTINGS_MAX_HEADER_LIST_SIZE): more resets the                                 \
                   stream (ENHANCE_YOUR_CALM) */
/* The gRPC request header that asks for RateLimit headers in
 * response_headers_to_add (docs/envoy.md): Envoy sends it with the rate
 * limit service's `initial_metadata`. */
#define SL_GRPC_HEADERS_MD "x-sluice-ratelimit-headers"

extern const sl_proto sl_grpc_proto;

#endif
