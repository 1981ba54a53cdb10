/*
 * test_grpc_wire.c -- the gRPC module's hand-written hot path pieces:
 * rls_wire (ShouldRateLimit's request decoded, its response encoded, each
 * against protobuf-c's bytes).  tests/fuzz/fuzz_rls_wire.c compares the codec with
 * protobuf-c on arbitrary bytes; these are the cases a reader can check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rls_wire.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp;

static _Alignas(16) unsigned char arena[4096];

/* bench/grpc.sh's request: domain "bench", one descriptor {user: u1} */
static const uint8_t bench_req[] = {0x0a, 5, 'b', 'e', 'n', 'c', 'h',  0x12, 12,  0x0a, 10,
                                    0x0a, 4, 'u', 's', 'e', 'r', 0x12, 2,    'u', '1'};

static void decodes_the_common_request(void **state)
{
    (void)state;
    size_t used = 0;
    rls_req *m = sl_rls_unpack(bench_req, sizeof bench_req, arena, sizeof arena, &used);
    assert_non_null(m);
    assert_true(used > 0 && used <= sizeof arena);
    assert_string_equal(m->domain, "bench");
    assert_int_equal(m->n_descriptors, 1);
    assert_int_equal(m->descriptors[0]->n_entries, 1);
    assert_string_equal(m->descriptors[0]->entries[0]->key, "user");
    assert_string_equal(m->descriptors[0]->entries[0]->value, "u1");
    assert_null(m->descriptors[0]->limit);
    assert_null(m->descriptors[0]->hits_addend);
    assert_int_equal(m->hits_addend, 0);
}

static void decodes_override_and_hits(void **state)
{
    (void)state;
    /* descriptor {entries [{k: v}], limit {10, MINUTE(2)}, hits_addend {7}},
     * hits_addend 3; the descriptor: 8 (entry) + 6 (limit) + 4 (hits) bytes */
    const uint8_t m2[] = {0x0a, 1, 'd',  0x12, 18,   0x0a, 6,    0x0a, 1,    'k', 0x12, 1, 'v',
                          0x12, 4, 0x08, 10,   0x10, 2,    0x1a, 2,    0x08, 7,   0x18, 3};
    size_t used;
    rls_req *m = sl_rls_unpack(m2, sizeof m2, arena, sizeof arena, &used);
    assert_non_null(m);
    assert_string_equal(m->domain, "d");
    assert_int_equal(m->n_descriptors, 1);
    assert_non_null(m->descriptors[0]->limit);
    assert_int_equal(m->descriptors[0]->limit->requests_per_unit, 10);
    assert_int_equal(m->descriptors[0]->limit->unit, 2);
    assert_non_null(m->descriptors[0]->hits_addend);
    assert_int_equal(m->descriptors[0]->hits_addend->value, 7);
    assert_int_equal(m->hits_addend, 3);
    /* protobuf-c reads the same bytes the same way */
    rls_req *r = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, sizeof m2, m2);
    assert_non_null(r);
    assert_int_equal(r->descriptors[0]->limit->requests_per_unit, 10);
    assert_int_equal(r->descriptors[0]->hits_addend->value, 7);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(r, NULL);
}

static void leaves_the_rest_to_protobuf_c(void **state)
{
    (void)state;
    size_t used;
    uint8_t b[sizeof bench_req + 2];
    memcpy(b, bench_req, sizeof bench_req);
    /* an unknown field (9, varint 1): protobuf-c keeps it, the fast path declines */
    b[sizeof bench_req] = 9 << 3, b[sizeof bench_req + 1] = 1;
    assert_null(sl_rls_unpack(b, sizeof b, arena, sizeof arena, &used));
    /* the domain twice */
    uint8_t twice[sizeof bench_req + 7];
    memcpy(twice, bench_req, sizeof bench_req);
    memcpy(twice + sizeof bench_req, bench_req, 7);
    assert_null(sl_rls_unpack(twice, sizeof twice, arena, sizeof arena, &used));
    /* cut short, and a buffer too small for the message */
    assert_null(sl_rls_unpack(bench_req, sizeof bench_req - 1, arena, sizeof arena, &used));
    assert_null(sl_rls_unpack(bench_req, sizeof bench_req, arena, 64, &used));
    /* the domain as a varint: another wire type */
    const uint8_t wt[] = {0x08, 1};
    assert_null(sl_rls_unpack(wt, sizeof wt, arena, sizeof arena, &used));
    /* nothing at all is a request with every field unset */
    rls_req *m = sl_rls_unpack(wt, 0, arena, sizeof arena, &used);
    assert_non_null(m);
    assert_string_equal(m->domain, "");
    assert_int_equal(m->n_descriptors, 0);
}

/* packs m with both encoders and compares (dynamic_metadata given to
 * rls_wire packed by protobuf-c) */
static void same_bytes(const rls_resp *m)
{
    size_t n = protobuf_c_message_get_packed_size(&m->base);
    uint8_t dm[256], *dmeta = NULL;
    size_t dlen = 0;
    if (m->dynamic_metadata) {
        dlen = protobuf_c_message_get_packed_size(&m->dynamic_metadata->base);
        assert_true(dlen <= sizeof dm);
        protobuf_c_message_pack(&m->dynamic_metadata->base, dm);
        dmeta = dm;
    }
    assert_int_equal(sl_rls_resp_size(m, dmeta, dlen), n);
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(sl_rls_resp_pack(m, dmeta, dlen, a), n);
    protobuf_c_message_pack(&m->base, b);
    assert_memory_equal(a, b, n);
    free(a);
    free(b);
}

static void encodes_as_protobuf_c(void **state)
{
    (void)state;
    rls_resp r = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    same_bytes(&r); /* empty: no bytes */
    assert_int_equal(sl_rls_resp_size(&r, NULL, 0), 0);

    Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit lim =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
    lim.name = "user", lim.requests_per_unit = 100, lim.unit = 2;
    Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
    d.seconds = 59, d.nanos = 500000000;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus s[3] = {
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT,
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT,
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT};
    s[0].code = 1, s[0].current_limit = &lim, s[0].limit_remaining = 99;
    s[0].duration_until_reset = &d;
    s[1].code = 2;                     /* over limit, nothing else */
    s[2].limit_remaining = UINT32_MAX; /* `unlimited` */
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *sp[] = {&s[0], &s[1],
                                                                                &s[2]};
    Envoy__Config__Core__V3__HeaderValue h = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    h.key = "RateLimit", h.value = "\"user\";r=99;t=60";
    Envoy__Config__Core__V3__HeaderValue *hp[] = {&h};
    r.overall_code = 2;
    r.n_statuses = 3, r.statuses = sp;
    r.n_response_headers_to_add = 1, r.response_headers_to_add = hp;
    same_bytes(&r);
    /* a negative int32 takes ten bytes; an empty name is left out */
    d.nanos = -1, d.seconds = -5, lim.name = "";
    same_bytes(&r);

    /* dynamic_metadata (field 6), last: an empty Struct is still written,
     * then {"domain": "d", "n": [null, 2.5]} */
    Google__Protobuf__Struct st = GOOGLE__PROTOBUF__STRUCT__INIT;
    r.dynamic_metadata = &st;
    same_bytes(&r);
    Google__Protobuf__Value vs = GOOGLE__PROTOBUF__VALUE__INIT, vn = GOOGLE__PROTOBUF__VALUE__INIT,
                            v0 = GOOGLE__PROTOBUF__VALUE__INIT, v1 = GOOGLE__PROTOBUF__VALUE__INIT;
    vs.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE, vs.string_value = "d";
    v0.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE;
    v1.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE, v1.number_value = 2.5;
    Google__Protobuf__Value *items[] = {&v0, &v1};
    Google__Protobuf__ListValue lv = GOOGLE__PROTOBUF__LIST_VALUE__INIT;
    lv.n_values = 2, lv.values = items;
    vn.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE, vn.list_value = &lv;
    Google__Protobuf__Struct__FieldsEntry e1 = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT,
                                          e2 = GOOGLE__PROTOBUF__STRUCT__FIELDS_ENTRY__INIT;
    e1.key = "domain", e1.value = &vs;
    e2.key = "n", e2.value = &vn;
    Google__Protobuf__Struct__FieldsEntry *ents[] = {&e1, &e2};
    st.n_fields = 2, st.fields = ents;
    same_bytes(&r);
    /* and the bytes read back as the same message */
    size_t n = sl_rls_resp_size(&r, NULL, 0);
    uint8_t dm[64], out[512];
    size_t dl = protobuf_c_message_pack(&st.base, dm);
    size_t total = sl_rls_resp_pack(&r, dm, dl, out);
    assert_int_equal(total, n + 1 + 1 + dl);
    rls_resp *back = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, total, out);
    assert_non_null(back);
    assert_non_null(back->dynamic_metadata);
    assert_int_equal(back->dynamic_metadata->n_fields, 2);
    assert_string_equal(back->dynamic_metadata->fields[1]->key, "n");
    assert_int_equal(back->dynamic_metadata->fields[1]->value->list_value->n_values, 2);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(back, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decodes_the_common_request),
        cmocka_unit_test(decodes_override_and_hits),
        cmocka_unit_test(leaves_the_rest_to_protobuf_c),
        cmocka_unit_test(encodes_as_protobuf_c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
