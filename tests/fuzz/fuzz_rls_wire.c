/*
 * fuzz_rls_wire.c -- libFuzzer target for src/proto/grpc/rls_wire.c, the
 * hand-written RateLimitRequest decoder and RateLimitResponse encoder,
 * against protobuf-c's own (the reference).
 *
 * Input: one byte of options, then a message's bytes.  The option byte's
 * low 6 bits pick the decoding buffer's size (64 << bits%12 bytes: too
 * small ones exercise the fallback).  Checked, besides ASan and UBSan:
 *   - when sl_rls_unpack takes the bytes, protobuf-c's unpack takes them
 *     too, and both messages pack (protobuf-c) to the same bytes; the
 *     decoder stays inside its buffer and reports what it used;
 *   - when protobuf-c decodes the bytes as a RateLimitResponse without
 *     unknown fields (outside dynamic_metadata), sl_rls_resp_size and
 *     sl_rls_resp_pack, given dynamic_metadata packed by protobuf-c, give
 *     protobuf-c's size and bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp;

static void die(const char *why)
{
    fprintf(stderr, "fuzz_rls_wire: %s\n", why);
    __builtin_trap();
}

/* Whether m or a message under it kept unknown fields (rls_wire.h's
 * encoder writes the known ones only: answer_rls makes no others). */
static int unknown(const ProtobufCMessage *m)
{
    if (m->n_unknown_fields) return 1;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        /* dynamic_metadata goes to the encoder packed by protobuf-c, its
         * unknown fields and all */
        if (f->descriptor == &google__protobuf__struct__descriptor) continue;
        const char *at = (const char *)m + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)((const char *)m + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)at;
            for (size_t k = 0; k < n; k++)
                if (unknown(v[k])) return 1;
        } else {
            const ProtobufCMessage *s = *(const ProtobufCMessage *const *)at;
            if (s && unknown(s)) return 1;
        }
    }
    return 0;
}

static void check_request(const uint8_t *p, size_t n, unsigned opt)
{
    size_t cap = (size_t)64 << (opt % 12);
    void *buf = malloc(cap); /* exactly cap: ASan sees a byte past it */
    if (buf == NULL) return;
    size_t used = (size_t)-1;
    rls_req *mine = sl_rls_unpack(p, n, buf, cap, &used);
    rls_req *ref = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, p);
    if (mine != NULL) {
        if (ref == NULL) die("the fast path took a request protobuf-c refuses");
        if (used > cap) die("the fast path reports more than its buffer");
        size_t a = protobuf_c_message_get_packed_size(&mine->base);
        size_t b = protobuf_c_message_get_packed_size(&ref->base);
        uint8_t *x = malloc(a + 1), *y = malloc(b + 1);
        if (x && y) {
            protobuf_c_message_pack(&mine->base, x);
            protobuf_c_message_pack(&ref->base, y);
            if (a != b || memcmp(x, y, a) != 0) die("the fast path decoded another request");
        }
        free(x);
        free(y);
    }
    if (ref) envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(ref, NULL);
    free(buf);
}

static void check_response(const uint8_t *p, size_t n)
{
    rls_resp *m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, p);
    if (m == NULL) return;
    if (!unknown(&m->base)) {
        /* dynamic_metadata, packed by protobuf-c, as grpc.c gives rls_meta.c's */
        uint8_t *dm = NULL;
        size_t dl = 0;
        if (m->dynamic_metadata) {
            dl = protobuf_c_message_get_packed_size(&m->dynamic_metadata->base);
            if ((dm = malloc(dl + 1)) == NULL) goto out;
            protobuf_c_message_pack(&m->dynamic_metadata->base, dm);
        }
        size_t a = sl_rls_resp_size(m, dm, dl), b = protobuf_c_message_get_packed_size(&m->base);
        if (a != b) die("sl_rls_resp_size differs from protobuf-c's");
        uint8_t *x = malloc(a + 1), *y = malloc(b + 1);
        if (x && y) {
            if (sl_rls_resp_pack(m, dm, dl, x) != a) die("sl_rls_resp_pack wrote another size");
            protobuf_c_message_pack(&m->base, y);
            if (memcmp(x, y, a) != 0) die("sl_rls_resp_pack wrote other bytes");
        }
        free(x);
        free(y);
        free(dm);
    }
out:
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    check_request(data + 1, size - 1, data[0] & 63);
    check_response(data + 1, size - 1);
    return 0;
}
