/*
 * test_rls_meta.c -- RateLimitResponse's dynamic_metadata
 * (src/proto/grpc/rls_meta.c): sl_rls_dmeta's bytes, read back by
 * protobuf-c's google.protobuf.Struct decoder and written out as a tree
 * in one line, against the tree envoyproxy/ratelimit's
 * ratelimitToMetadata builds for the same request and rules: the request's
 * part (domain, descriptors' entries, limit, hitsAddend) and the merge of
 * the passed descriptors' rules' metadata (first wins, maps merged).
 * Then the whole answer through rls_wire's encoder, read back by
 * protobuf-c as a RateLimitResponse.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/struct.pb-c.h"
#include "rls_meta.h"
#include "rls_wire.h"
#include "rules.h"
#include "sluice.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry rls_entry;

/* ---- a Struct as one line of text ------------------------------------------ */

typedef struct text {
    char s[4096];
    size_t n;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
    va_end(ap);
    assert_true(k >= 0 && (size_t)k < sizeof t->s - t->n);
    t->n += (size_t)k;
}

static void put_struct(text *t, const Google__Protobuf__Struct *s);

static void put_value(text *t, const Google__Protobuf__Value *v)
{
    assert_non_null(v);
    switch (v->kind_case) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE: add(t, "null"); break;
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE: add(t, "%.17g", v->number_value); break;
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE: add(t, "\"%s\"", v->string_value); break;
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE: add(t, v->bool_value ? "true" : "false"); break;
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE: put_struct(t, v->struct_value); break;
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
        add(t, "[");
        for (size_t i = 0; i < v->list_value->n_values; i++) {
            if (i) add(t, ",");
            put_value(t, v->list_value->values[i]);
        }
        add(t, "]");
        break;
    default: fail_msg("a Value with no kind");
    }
}

/* Keys in the order they came, which must be rls_meta.h's: sorted. */
static void put_struct(text *t, const Google__Protobuf__Struct *s)
{
    add(t, "{");
    for (size_t i = 0; i < s->n_fields; i++) {
        if (i) {
            add(t, ",");
            if (strcmp(s->fields[i - 1]->key, s->fields[i]->key) >= 0)
                fail_msg("keys out of order: '%s' then '%s'", s->fields[i - 1]->key,
                         s->fields[i]->key);
        }
        add(t, "%s:", s->fields[i]->key);
        put_value(t, s->fields[i]->value);
    }
    add(t, "}");
}

/* sl_rls_dmeta(req, passed) read back by protobuf-c, as text. */
static void dmeta_is(const rls_req *req, const sl_rule_meta *const *passed, int n, const char *want)
{
    sl_buf b = {0};
    assert_int_equal(sl_buf_add(&b, "xy", 2), 0); /* appended after what is there */
    assert_int_equal(sl_rls_dmeta(req, passed, n, &b), 0);
    assert_memory_equal(b.p, "xy", 2);
    Google__Protobuf__Struct *s =
        google__protobuf__struct__unpack(NULL, b.len - 2, (const uint8_t *)b.p + 2);
    assert_non_null(s);
    text t = {.n = 0};
    put_struct(&t, s);
    assert_string_equal(t.s, want);
    google__protobuf__struct__free_unpacked(s, NULL);
    free(b.p);
}

/* ---- rules and requests -------------------------------------------------------- */

static const char RULES[] = "domain: d\n"
                            "descriptors:\n"
                            "  - key: a\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                            "    metadata:\n"
                            "      team: alpha\n"
                            "      quota: {tier: 1, flags: [x, yes, ~, 2.5]}\n"
                            "      shared: {a: 1, deep: {x: 1}}\n"
                            "      n: -1e3\n"
                            "  - key: b\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                            "    metadata:\n"
                            "      team: beta\n"   /* alpha came first: alpha */
                            "      quota: plain\n" /* a map came first: the map */
                            "      shared: {b: 2, a: 9, deep: {w: 2, x: 7}, extra: {z: 0}}\n"
                            "      extra: [1, two]\n"
                            "  - key: c\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                            "    metadata:\n"
                            "      n: {not: merged}\n" /* a number came first */
                            "      shared: {deep: {z: 3}, c: 3}\n"
                            "  - key: s\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
                            "    metadata:\n"
                            "      team: solo\n"
                            "      nested: {\"\": empty-key}\n";

static sl_rules *rules;

static int setup(void **state)
{
    (void)state;
    char err[512];
    rules = sl_rules_load_buffer("t.yaml", RULES, strlen(RULES), err, sizeof err);
    if (rules == NULL) fail_msg("%s", err);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_rules_free(rules);
    return 0;
}

static const sl_rule_meta *meta(const char *key)
{
    const sl_rule_domain *d = sl_rules_domain(rules, 0);
    for (int i = 0; i < d->root.nchildren; i++)
        if (strcmp(d->root.children[i].key, key) == 0) return d->root.children[i].metadata;
    fail_msg("no descriptor %s", key);
    return NULL;
}

/* A request of up to 4 descriptors of one entry each. */
typedef struct req {
    rls_req m;
    rls_desc d[4], *dp[4];
    rls_entry e[4], *ep[4];
} req;

static void req_init(req *r, const char *domain, const char *const *kv, int n)
{
    r->m = (rls_req)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    r->m.domain = (char *)domain;
    for (int i = 0; i < n; i++) {
        r->e[i] =
            (rls_entry)ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
        r->e[i].key = (char *)kv[2 * i], r->e[i].value = (char *)kv[2 * i + 1];
        r->ep[i] = &r->e[i];
        r->d[i] = (rls_desc)ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
        r->d[i].n_entries = 1, r->d[i].entries = &r->ep[i];
        r->dp[i] = &r->d[i];
    }
    r->m.n_descriptors = (size_t)n, r->m.descriptors = r->dp;
}

/* ---- the cases ------------------------------------------------------------------ */

/* Three passed descriptors' metadata merged: the first value of a key
 * wins, maps under one key merge recursively, a map does not merge into a
 * scalar that came first; the request's part beside it. */
static void merges_as_the_peer(void **state)
{
    (void)state;
    req r;
    const char *kv[] = {"a", "1", "b", "2", "c", "3", "x", "y"};
    req_init(&r, "d", kv, 4);
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride o =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
    o.requests_per_unit = 10, o.unit = ENVOY__TYPE__V3__RATE_LIMIT_UNIT__MINUTE;
    r.d[1].limit = &o;
    Google__Protobuf__UInt64Value h = GOOGLE__PROTOBUF__UINT64_VALUE__INIT; /* 0, but set */
    r.d[1].hits_addend = &h;
    r.m.hits_addend = 3;
    /* the fourth descriptor matched nothing: NULL */
    const sl_rule_meta *passed[] = {meta("a"), meta("b"), meta("c"), NULL};
    dmeta_is(&r.m, passed, 4,
             "{descriptors:[{entries:[\"a=1\"]},"
             "{entries:[\"b=2\"],hitsAddend:0,limit:\"requests_per_unit:10 unit:MINUTE\"},"
             "{entries:[\"c=3\"]},{entries:[\"x=y\"]}],"
             "domain:\"d\",hitsAddend:3,"
             "metadata:{extra:[1,\"two\"],n:-1000,"
             "quota:{flags:[\"x\",true,null,2.5],tier:1},"
             "shared:{a:1,b:2,c:3,deep:{w:2,x:1,z:3},extra:{z:0}},team:\"alpha\"}}");
    /* the order of the passed ones decides */
    const sl_rule_meta *rev[] = {meta("c"), meta("b"), meta("a")};
    dmeta_is(&r.m, rev, 3,
             "{descriptors:[{entries:[\"a=1\"]},"
             "{entries:[\"b=2\"],hitsAddend:0,limit:\"requests_per_unit:10 unit:MINUTE\"},"
             "{entries:[\"c=3\"]},{entries:[\"x=y\"]}],"
             "domain:\"d\",hitsAddend:3,"
             "metadata:{extra:[1,\"two\"],n:{not:\"merged\"},quota:\"plain\","
             "shared:{a:9,b:2,c:3,deep:{w:2,x:7,z:3},extra:{z:0}},team:\"beta\"}}");
    /* one passed: its own, as it is (an empty key included) */
    const sl_rule_meta *one[] = {NULL, meta("s")};
    dmeta_is(&r.m, one, 2,
             "{descriptors:[{entries:[\"a=1\"]},"
             "{entries:[\"b=2\"],hitsAddend:0,limit:\"requests_per_unit:10 unit:MINUTE\"},"
             "{entries:[\"c=3\"]},{entries:[\"x=y\"]}],"
             "domain:\"d\",hitsAddend:3,metadata:{nested:{:\"empty-key\"},team:\"solo\"}}");
    /* the same one twice merges to itself */
    const sl_rule_meta *twice[] = {meta("s"), meta("s")};
    dmeta_is(&r.m, twice, 2,
             "{descriptors:[{entries:[\"a=1\"]},"
             "{entries:[\"b=2\"],hitsAddend:0,limit:\"requests_per_unit:10 unit:MINUTE\"},"
             "{entries:[\"c=3\"]},{entries:[\"x=y\"]}],"
             "domain:\"d\",hitsAddend:3,metadata:{nested:{:\"empty-key\"},team:\"solo\"}}");
}

/* No metadata passed: no "metadata"; hits_addend 0: no "hitsAddend";
 * the override's text leaves out zero fields and writes an unknown unit
 * as its number; an entry with empty parts is "=". */
static void request_part(void **state)
{
    (void)state;
    req r;
    const char *kv[] = {"k", "v", "", "", "u", "w"};
    req_init(&r, "dom", kv, 3);
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride o[3] = {
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT,
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT,
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT};
    o[1].unit = (Envoy__Type__V3__RateLimitUnit)9;
    o[2].requests_per_unit = 7;
    r.d[0].limit = &o[0], r.d[1].limit = &o[1], r.d[2].limit = &o[2];
    Google__Protobuf__UInt64Value h = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    h.value = 5;
    r.d[2].hits_addend = &h;
    const sl_rule_meta *none[] = {NULL, NULL};
    dmeta_is(&r.m, none, 2,
             "{descriptors:[{entries:[\"k=v\"],limit:\"\"},{entries:[\"=\"],limit:\"unit:9\"},"
             "{entries:[\"u=w\"],hitsAddend:5,limit:\"requests_per_unit:7\"}],domain:\"dom\"}");
    dmeta_is(&r.m, NULL, 0,
             "{descriptors:[{entries:[\"k=v\"],limit:\"\"},{entries:[\"=\"],limit:\"unit:9\"},"
             "{entries:[\"u=w\"],hitsAddend:5,limit:\"requests_per_unit:7\"}],domain:\"dom\"}");
    /* no descriptors at all (the caller refuses that; the packer copes) */
    req_init(&r, "", kv, 0);
    dmeta_is(&r.m, NULL, 0, "{descriptors:[],domain:\"\"}");
}

/* The whole answer: rls_wire's encoder with sl_rls_dmeta's bytes as field
 * 6, read back by protobuf-c as a RateLimitResponse. */
static void in_the_response(void **state)
{
    (void)state;
    req r;
    const char *kv[] = {"a", "1"};
    req_init(&r, "d", kv, 1);
    const sl_rule_meta *passed[] = {meta("a")};
    sl_buf b = {0};
    assert_int_equal(sl_rls_dmeta(&r.m, passed, 1, &b), 0);
    rls_resp m = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    m.overall_code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    size_t n = sl_rls_resp_size(&m, (const uint8_t *)b.p, b.len);
    uint8_t *out = malloc(n);
    assert_non_null(out);
    assert_int_equal(sl_rls_resp_pack(&m, (const uint8_t *)b.p, b.len, out), n);
    rls_resp *back = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, out);
    assert_non_null(back);
    assert_int_equal(back->overall_code, 1);
    assert_non_null(back->dynamic_metadata);
    text t = {.n = 0};
    put_struct(&t, back->dynamic_metadata);
    assert_string_equal(t.s, "{descriptors:[{entries:[\"a=1\"]}],domain:\"d\","
                             "metadata:{n:-1000,quota:{flags:[\"x\",true,null,2.5],tier:1},"
                             "shared:{a:1,deep:{x:1}},team:\"alpha\"}}");
    /* and protobuf-c packs what it read to the same bytes: rls_meta's
     * encoding is the canonical one (fields in order, nothing extra) */
    size_t k = protobuf_c_message_get_packed_size(&back->base);
    assert_int_equal(k, n);
    uint8_t *again = malloc(k);
    assert_non_null(again);
    protobuf_c_message_pack(&back->base, again);
    assert_memory_equal(again, out, n);
    free(again);
    envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(back, NULL);
    free(out);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(merges_as_the_peer),
        cmocka_unit_test(request_part),
        cmocka_unit_test(in_the_response),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
