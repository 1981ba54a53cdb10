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
/* A request message (without its 5-byte prefix) is at most --max-command
 * bytes (cfg->max_command, "the size of one command", as for RESP): more
 * is answered RESOURCE_EXHAUSTED "grpc: received message larger than max
 * (N vs. M)", grpc-go's code and text, as soon as the prefix declares it
 * or the bytes pass it.  A connection holds at most --max-command + 5
 * bytes of unfinished request bodies (at least SL_H2_WINDOW): h2.c's
 * sl_h2_hold_data. */
#define SL_GRPC_MAX_DESC                                                                           \
    4096 /* descriptors of one RateLimitRequest, counted before it is                              \
            decoded (the per-request state is ~200 bytes a descriptor):                            \
            more is UNKNOWN "N descriptors in one request: at most 4096"                           \
            (--rls-semantics envoy) or INVALID_ARGUMENT "at most 16                                \
            descriptors in one request, got N" (sluice, whose bound is                             \
            SL_CHECK_MAX_DESC) */
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
