/*
 * rls_wire.h -- ShouldRateLimit's two messages in protobuf's wire format,
 * by hand, for the hot path of every call (grpc.c): RateLimitRequest
 * decoded into a caller's buffer, RateLimitResponse encoded.
 *
 * Both give exactly what protobuf-c gives for the same input (the fuzz
 * target tests/fuzz/fuzz_rls_wire.c checks it); they exist because
 * protobuf-c's table-driven code cost ~4k instructions a call between
 * them (docs/envoy.md, "Performance").  The decoder is a fast path, not a
 * second parser: what it does not take it leaves to protobuf-c.
 */
#ifndef SL_RLS_WIRE_H
#define SL_RLS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "envoy/service/ratelimit/v3/rls.pb-c.h"

/* Decodes the RateLimitRequest in p[0..len) into buf[0..cap) (aligned for
 * pointers; the message and everything it points to live there: nothing
 * to free) and sets *used to the bytes of buf taken.  Takes the messages
 * made of rls.proto's fields, each with its own wire type, every singular
 * field at most once.  Returns NULL for anything else -- an unknown field,
 * another wire type, a singular field twice, bytes cut short, buf too
 * small -- for protobuf-c's unpack to decode or refuse.  What it returns
 * equals protobuf-c's unpack of the same bytes. */
Envoy__Service__Ratelimit__V3__RateLimitRequest *sl_rls_unpack(const uint8_t *p, size_t len,
                                                               void *buf, size_t cap, size_t *used);

/* Bytes of m in the wire format, and m written to out (that many bytes):
 * byte for byte protobuf-c's get_packed_size and pack of m.
 * dynamic_metadata (field 6) is not read from m but given packed: dmeta,
 * dmeta_len bytes of a google.protobuf.Struct without its tag (as
 * rls_meta.h's sl_rls_dmeta writes them), written last, as field 6;
 * dmeta NULL: no field 6 (a non-NULL dmeta of 0 bytes is an empty Struct,
 * present).  With m->dynamic_metadata packed by protobuf-c as dmeta, the
 * bytes are protobuf-c's. */
size_t sl_rls_resp_size(const Envoy__Service__Ratelimit__V3__RateLimitResponse *m,
                        const uint8_t *dmeta, size_t dmeta_len);
size_t sl_rls_resp_pack(const Envoy__Service__Ratelimit__V3__RateLimitResponse *m,
                        const uint8_t *dmeta, size_t dmeta_len, uint8_t *out);

#endif
