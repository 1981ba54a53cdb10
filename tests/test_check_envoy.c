/*
 * test_check_envoy.c -- what RL.CHECK's plan (src/rules/check.c) gives a
 * front that answers as envoyproxy/ratelimit does (issue 26), through
 * sl_check_plan_build and the local executor:
 *
 *   costs        each descriptor its own cost (Envoy's hits_addend): 0
 *                charges nothing, repeats add up, out of range is refused
 *                naming the descriptor;
 *   lyft         Lyft's counting asked by ONE request (sl_check_input.lyft)
 *                on a set without --count-denied: its denial still charges
 *                every fixed-window counter, the next request sees it, and
 *                a request that does not ask keeps all-or-none;
 *   lyft_zero    cost 0 in Lyft's counting: a counter over L answers
 *                OVER_LIMIT, one at exactly L answers OK with 0 left;
 *   fields       the status's node, replaced and quota;
 *   deep         a descriptor of 17 entries: NO_RULE, or counted by all
 *                its entries when it has a limit override;
 *   long_keys    counting keys over SL_MAX_KEY: the digest form (exact
 *                bytes), different values never share a counter, the same
 *                value does; SipHash-2-4-128 against the reference vectors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_local.h"
#include "check.h"
#include "rules.h"
#include "siphash.h"
#include "sluice.h"

static char err[1024];

typedef struct fx {
    sl_rules *r;
    sl_store *s;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->s = sl_store_new(NULL, NULL);
    if (f->s == NULL) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    sl_store_free(f->s);
    sl_rules_free(f->r);
    free(f);
    return 0;
}

static void use(fx *f, const char *y, unsigned flags)
{
    sl_rules_free(f->r);
    f->r = sl_rules_load_buffer_flags("t.yaml", y, strlen(y), flags, err, sizeof err);
    if (f->r == NULL) fail_msg("load: %s", err);
}

/* A request of one-entry descriptors: k, v, k, v, ..., NULL. */
typedef struct req {
    sl_rule_entry e[SL_CHECK_MAX_DESC];
    const sl_rule_entry *d[SL_CHECK_MAX_DESC];
    int nd[SL_CHECK_MAX_DESC];
    int n;
} req;

static void build(req *q, const char *const *kv)
{
    q->n = 0;
    for (; kv[2 * q->n]; q->n++) {
        int i = q->n;
        q->e[i] =
            (sl_rule_entry){kv[2 * i], strlen(kv[2 * i]), kv[2 * i + 1], strlen(kv[2 * i + 1])};
        q->d[i] = &q->e[i];
        q->nd[i] = 1;
    }
}

static sl_check_plan plan; /* large: not on the stack */
static sl_result ov;
static sl_check_status st[SL_CHECK_MAX_DESC];

/* Plans in (domain "e", the set of f), executes it on f's store, reports
 * into ov and st; returns the plan's code (err says why). */
static int run(fx *f, sl_check_input *in)
{
    in->domain = "e";
    in->dlen = 1;
    int rc = sl_check_plan_build(f->r, in, &plan, err, sizeof err);
    if (rc != 0) return rc;
    sl_check_outcome o;
    rc = sl__local_check_exec(f->s, &plan, &o, err, sizeof err);
    if (rc != 0) return rc;
    sl_check_report(&plan, &o, &ov, st);
    return 0;
}

/* RUN(f, costs, lyft, now, k, v, ...): one request, asserted to succeed. */
#define RUN(f, costs_, lyft_, now, ...)                                                            \
    do {                                                                                           \
        req q_;                                                                                    \
        build(&q_, (const char *const[]){__VA_ARGS__, NULL});                                      \
        sl_check_input in_ = {.n = q_.n,                                                           \
                              .descs = q_.d,                                                       \
                              .ndesc = q_.nd,                                                      \
                              .cost = 1,                                                           \
                              .costs = (costs_),                                                   \
                              .lyft = (lyft_),                                                     \
                              .now_ms = (now)};                                                    \
        if (run((f), &in_) != 0) fail_msg("line %d: %s", __LINE__, err);                           \
    } while (0)

static int at; /* the caller's line, for failures */
#define status_is(...) (at = __LINE__, status_is_(__VA_ARGS__))

static void status_is_(int i, sl_check_code code, int64_t limit, int64_t rem, int64_t retry,
                       int64_t reset)
{
    if (st[i].code != code || st[i].limit != limit || st[i].remaining != rem ||
        st[i].retry_after_ms != retry || st[i].reset_after_ms != reset)
        fail_msg("line %d: status %d is %s %lld %lld %lld %lld, want %s %lld %lld %lld %lld", at, i,
                 sl_check_code_name(st[i].code), (long long)st[i].limit, (long long)st[i].remaining,
                 (long long)st[i].retry_after_ms, (long long)st[i].reset_after_ms,
                 sl_check_code_name(code), (long long)limit, (long long)rem, (long long)retry,
                 (long long)reset);
}

/* The count of fixed-window counter key (space 1) at now, window W. */
static int64_t count_of(fx *f, const char *key, size_t len, int64_t W, int64_t now)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = SL_MAX_LIMIT;
    p.window_ms = W;
    p.space = 1;
    sl_result r;
    assert_int_equal(sl_peek(f->s, &p, key, len, now, 0, &r), 0);
    return SL_MAX_LIMIT - r.remaining;
}
#define COUNT(f, key, now) count_of((f), (key), strlen(key), 60000, (now))

static const char rules_yaml[] =
    "domain: e\n"
    "descriptors:\n"
    "  - {key: a, rate_limit: {unit: minute, requests_per_unit: 2}}\n"
    "  - {key: b, rate_limit: {unit: minute, requests_per_unit: 10}}\n"
    "  - {key: tb, rate_limit: {algorithm: token-bucket, unit: minute, requests_per_unit: 5}}\n";

/* Per-descriptor costs: [0, 1] charges only the second; repeats add. */
static void costs(void **state)
{
    fx *f = *state;
    use(f, rules_yaml, 0);
    RUN(f, ((const int64_t[]){0, 1}), 0, 1000, "b", "x", "b", "y");
    status_is(0, SL_CHECK_OK, 10, 10, 0, 0); /* a peek of a fresh counter */
    status_is(1, SL_CHECK_OK, 10, 9, 0, 59000);
    assert_int_equal(COUNT(f, "e|b=x", 1000), 0);
    assert_int_equal(COUNT(f, "e|b=y", 1000), 1);
    /* the pool's share is the largest cost; the overall answer the tightest */
    assert_int_equal(plan.cost, 1);
    assert_int_equal(ov.allowed, 1);
    assert_int_equal(ov.remaining, 9);

    /* the same counter from two descriptors: one counter, costs 2 + 3 */
    RUN(f, ((const int64_t[]){2, 3}), 0, 1000, "b", "z", "b", "z");
    assert_int_equal(plan.items[0].cost, 5);
    assert_int_equal(plan.items[1].lead, 0);
    status_is(0, SL_CHECK_OK, 10, 5, 0, 59000);
    status_is(1, SL_CHECK_OK, 10, 5, 0, 59000);
    assert_int_equal(COUNT(f, "e|b=z", 1000), 5);
    /* 3 + 3 more would pass 10: all-or-none, neither descriptor charges
     * (the engine's denial: the room there is, 5) */
    RUN(f, ((const int64_t[]){3, 3}), 0, 1000, "b", "z", "b", "z");
    status_is(0, SL_CHECK_OVER_LIMIT, 10, 5, 59000, 59000);
    status_is(1, SL_CHECK_OVER_LIMIT, 10, 5, 59000, 59000);
    assert_int_equal(COUNT(f, "e|b=z", 1000), 5);

    /* costs NULL: `cost` for every descriptor, as before */
    RUN(f, NULL, 0, 1000, "b", "w", "b", "v");
    assert_int_equal(COUNT(f, "e|b=w", 1000), 1);
    assert_int_equal(COUNT(f, "e|b=v", 1000), 1);

    /* a cost out of range names its descriptor; nothing is charged */
    req q;
    build(&q, (const char *const[]){"b", "u", "b", "t", NULL});
    sl_check_input in = {.n = 2,
                         .descs = q.d,
                         .ndesc = q.nd,
                         .costs = (const int64_t[]){1, SL_MAX_LIMIT + 1},
                         .now_ms = 1000};
    assert_int_equal(run(f, &in), SL_ECOST);
    assert_string_equal(err, "descriptor 2: cost must be an integer between 0 and 1000000000000");
    in.costs = (const int64_t[]){-1, 1};
    assert_int_equal(run(f, &in), SL_ECOST);
    assert_string_equal(err, "descriptor 1: cost must be an integer between 0 and 1000000000000");
    assert_int_equal(COUNT(f, "e|b=u", 1000), 0);
}

/* Lyft's counting for one request, on a set without --count-denied. */
static void lyft(void **state)
{
    fx *f = *state;
    use(f, rules_yaml, 0);
    assert_int_equal(sl_rules_flags(f->r) & SL_RULES_COUNT_DENIED, 0);
    for (int i = 0; i < 2; i++) RUN(f, NULL, 1, 1000, "a", "x", "b", "y", "tb", "z");
    assert_int_equal(plan.items[0].lyft, 1);
    assert_int_equal(plan.items[2].lyft, 0); /* a token bucket: never Lyft-counted */
    status_is(0, SL_CHECK_OK, 2, 0, 0, 59000);
    /* the 3rd: a is over and denies -- and a and b are still charged */
    RUN(f, NULL, 1, 1000, "a", "x", "b", "y", "tb", "z");
    assert_int_equal(ov.allowed, 0);
    status_is(0, SL_CHECK_OVER_LIMIT, 2, 0, 59000, 59000);
    status_is(1, SL_CHECK_OK, 10, 7, 0, 59000);
    assert_int_equal(COUNT(f, "e|a=x", 1000), 3);
    assert_int_equal(COUNT(f, "e|b=y", 1000), 3);
    /* the token bucket keeps all-or-none: peeked, not charged (5 - 2 left
     * after this one: 2 charged before, this one only peeked) */
    status_is(2, SL_CHECK_OK, 5, 2, 0, 36000);

    /* the next request, not Lyft-counted, sees the count past L */
    RUN(f, NULL, 0, 2000, "a", "x", "b", "y");
    assert_int_equal(plan.items[0].lyft, 0);
    status_is(0, SL_CHECK_OVER_LIMIT, 2, 0, 58000, 58000);
    status_is(1, SL_CHECK_OK, 10, 6, 0, 58000);   /* a peek: what would be left */
    assert_int_equal(COUNT(f, "e|a=x", 2000), 3); /* denied: nobody charged */
    assert_int_equal(COUNT(f, "e|b=y", 2000), 3);
    /* and a Lyft-counted one charges again */
    RUN(f, ((const int64_t[]){1, 2}), 1, 2000, "a", "x", "b", "y");
    status_is(0, SL_CHECK_OVER_LIMIT, 2, 0, 58000, 58000);
    status_is(1, SL_CHECK_OK, 10, 5, 0, 58000);
    assert_int_equal(COUNT(f, "e|a=x", 2000), 4);
    assert_int_equal(COUNT(f, "e|b=y", 2000), 5);
}

/* Cost 0 in Lyft's counting: nothing charged, the count judged as it is. */
static void lyft_zero(void **state)
{
    fx *f = *state;
    use(f, rules_yaml, 0);
    for (int i = 0; i < 3; i++) RUN(f, NULL, 1, 1000, "a", "over");
    assert_int_equal(COUNT(f, "e|a=over", 1000), 3);
    for (int i = 0; i < 2; i++) RUN(f, NULL, 1, 1000, "a", "full");
    assert_int_equal(COUNT(f, "e|a=full", 1000), 2);

    RUN(f, ((const int64_t[]){0, 0, 0}), 1, 5000, "a", "over", "a", "full", "a", "fresh");
    status_is(0, SL_CHECK_OVER_LIMIT, 2, 0, 55000, 55000); /* 3 > 2 */
    status_is(1, SL_CHECK_OK, 2, 0, 0, 55000);             /* 2 = L: not over */
    status_is(2, SL_CHECK_OK, 2, 2, 0, 0);
    assert_int_equal(ov.allowed, 0);
    assert_int_equal(COUNT(f, "e|a=over", 5000), 3);
    assert_int_equal(COUNT(f, "e|a=full", 5000), 2);
    assert_int_equal(COUNT(f, "e|a=fresh", 5000), 0);
    /* mixed [0, 1]: the one at L goes over with its own hit */
    RUN(f, ((const int64_t[]){0, 1}), 1, 5000, "a", "fresh", "a", "full");
    status_is(0, SL_CHECK_OK, 2, 2, 0, 0);
    status_is(1, SL_CHECK_OVER_LIMIT, 2, 0, 55000, 55000);
    assert_int_equal(COUNT(f, "e|a=full", 5000), 3);
    assert_int_equal(COUNT(f, "e|a=fresh", 5000), 0);
}

/* The status's node, replaced and quota. */
static void fields(void **state)
{
    fx *f = *state;
    use(f,
        "domain: e\n"
        "descriptors:\n"
        "  - {key: team, rate_limit: {unit: minute, requests_per_unit: 2, name: team_default}}\n"
        "  - {key: vip, rate_limit: {unit: minute, requests_per_unit: 100, name: vip,\n"
        "     replaces: [{name: team_default}]}}\n"
        "  - {key: q, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
        "  - {key: sq, quota_mode: true, shadow_mode: true,\n"
        "     rate_limit: {unit: minute, requests_per_unit: 1}}\n"
        "  - {key: uq, quota_mode: true, rate_limit: {unlimited: true}}\n"
        "  - {key: p, rate_limit: {unit: minute, requests_per_unit: 5}}\n",
        0);
    RUN(f, NULL, 0, 1000, "team", "t", "vip", "v", "q", "1", "sq", "1", "uq", "1", "p", "1", "none",
        "1");
    const char *path[7] = {"e.team", "e.vip", "e.q", "e.sq", "e.uq", "e.p", NULL};
    for (int i = 0; i < 7; i++) {
        if (path[i] == NULL)
            assert_null(st[i].node);
        else
            assert_string_equal(st[i].node->path, path[i]);
    }
    /* replaced: OK with the replaced limit's name and zeros (RESP's) */
    assert_int_equal(st[0].replaced, 1);
    assert_string_equal(sl_check_code_name(st[0].code), "OK");
    assert_string_equal(st[0].name, "team_default");
    status_is(0, SL_CHECK_OK, 0, 0, 0, 0);
    for (int i = 1; i < 7; i++) assert_int_equal(st[i].replaced, 0);
    /* quota: the quota node that counts, OK or over; not in shadow mode,
     * not unlimited */
    int quota[7] = {0, 0, 1, 0, 0, 0, 0};
    for (int i = 0; i < 7; i++) assert_int_equal(st[i].quota, quota[i]);
    /* over, while another quota descriptor has room: OVER_QUOTA */
    RUN(f, NULL, 0, 1000, "q", "1", "q", "2", "p", "1");
    assert_string_equal(sl_check_code_name(st[0].code), "OVER_QUOTA");
    assert_int_equal(st[0].quota, 1);
    assert_string_equal(sl_check_code_name(st[1].code), "OK");
    assert_int_equal(st[1].quota, 1);
    assert_int_equal(ov.allowed, 1);
    /* every quota descriptor over: OVER_LIMIT, still quota */
    RUN(f, NULL, 0, 1000, "q", "1");
    assert_string_equal(sl_check_code_name(st[0].code), "OVER_LIMIT");
    assert_int_equal(st[0].quota, 1);
    /* an override: no node */
    req q;
    build(&q, (const char *const[]){"p", "1", NULL});
    sl_check_override o = {3, SL_UNIT_MINUTE};
    sl_check_input in = {.n = 1, .descs = q.d, .ndesc = q.nd, .over = &o, .cost = 1, .now_ms = 0};
    assert_int_equal(run(f, &in), 0);
    assert_null(st[0].node);
    assert_int_equal(st[0].quota, 0);
    assert_int_equal(st[0].replaced, 0);
    status_is(0, SL_CHECK_OK, 3, 2, 0, 60000);
}

/* A descriptor of 17 entries (more than SL_RULES_MAX_DEPTH). */
static void deep(void **state)
{
    fx *f = *state;
    use(f, rules_yaml, 0);
    static char kbuf[17][16], vbuf[17][16];
    sl_rule_entry e[17];
    for (int i = 0; i < 17; i++) {
        snprintf(kbuf[i], sizeof kbuf[i], i == 0 ? "a" : "k%d", i);
        snprintf(vbuf[i], sizeof vbuf[i], "v%d", i);
        e[i] = (sl_rule_entry){kbuf[i], strlen(kbuf[i]), vbuf[i], strlen(vbuf[i])};
    }
    const sl_rule_entry *d[2] = {e, e};
    int nd[2] = {17, 1};
    /* no override: rules never nest 17 deep -- NO_RULE; "a" alone matches */
    sl_check_input in = {.n = 2, .descs = d, .ndesc = nd, .cost = 1, .now_ms = 0};
    assert_int_equal(run(f, &in), 0);
    assert_string_equal(sl_check_code_name(st[0].code), "NO_RULE");
    assert_null(st[0].node);
    status_is(1, SL_CHECK_OK, 2, 1, 0, 60000);

    /* with an override: counted by all 17 entries */
    sl_check_override o[2] = {{2, SL_UNIT_MINUTE}, {0, SL_UNIT_NONE}};
    in.over = o;
    in.n = 1;
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OK, 2, 1, 0, 60000);
    const char want[] = "e|a=v0|k1=v1|k2=v2|k3=v3|k4=v4|k5=v5|k6=v6|k7=v7|k8=v8|k9=v9|k10=v10|"
                        "k11=v11|k12=v12|k13=v13|k14=v14|k15=v15|k16=v16#override/60000";
    assert_int_equal((int)plan.items[0].keylen, (int)strlen(want));
    assert_memory_equal(plan.items[0].key, want, strlen(want));
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OK, 2, 0, 0, 60000);
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OVER_LIMIT, 2, 0, 60000, 60000);
    /* the 17th entry is part of the counter: another value, another count */
    e[16].value = "other";
    e[16].valuelen = 5;
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OK, 2, 1, 0, 60000);
    /* no entries with an override: counted by the domain and window alone
     * (envoyproxy/ratelimit's GetLimit returns the override before looking
     * at the entries; its cache key is then "domain_<window start>") */
    nd[0] = 0;
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OK, 2, 1, 0, 60000);
    assert_int_equal((int)plan.items[0].keylen, 16);
    assert_memory_equal(plan.items[0].key, "e#override/60000", 16);
    /* without one, no entries at all is still refused */
    in.over = NULL;
    assert_int_equal(run(f, &in), SL_EINVAL);
    assert_string_equal(err, "descriptor 1 has no entries");
}

/* The digest form's 64 hex digits for the key k (klen bytes), with the
 * keys check.h documents. */
static void digest_hex(const char *k, size_t klen, char out[65])
{
    static const uint8_t key[2][16] = {
        {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '1'},
        {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '2'}};
    uint8_t d[32];
    for (int h = 0; h < 2; h++) {
        sl__sip128 s;
        sl__sip128_init(&s, key[h]);
        sl__sip128_update(&s, k, klen);
        sl__sip128_final(&s, d + 16 * h);
    }
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* SipHash-2-4-128 against the reference's vectors_sip128 (key 00..0f,
 * message 00..len-1), in one piece and in pieces. */
static void sip128_vectors(void **state)
{
    (void)state;
    static const struct {
        size_t len;
        const char *hex;
    } v[] = {{0, "a3817f04ba25a8e66df67214c7550293"},  {1, "da87c1d86b99af44347659119b22fc45"},
             {7, "a1f1ebbed8dbc153c0b84aa61ff08239"},  {8, "3b62a9ba6258f5610f83e264f31497b4"},
             {15, "5493e99933b0a8117e08ec0f97cfc3d9"}, {16, "6ee2a4ca67b054bbfd3315bf85230577"},
             {63, "5150d1772f50834a503e069a973fbd7c"}};
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) msg[i] = (uint8_t)i;
    for (size_t t = 0; t < sizeof v / sizeof v[0]; t++) {
        for (size_t step = 1; step <= 9; step += 4) { /* pieces of 1, 5, 9 bytes */
            sl__sip128 s;
            sl__sip128_init(&s, key);
            for (size_t o = 0; o < v[t].len; o += step)
                sl__sip128_update(&s, msg + o, v[t].len - o < step ? v[t].len - o : step);
            uint8_t out[16];
            char hex[33];
            sl__sip128_final(&s, out);
            for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", out[i]);
            if (strcmp(hex, v[t].hex) != 0)
                fail_msg("length %zu in pieces of %zu: %s, want %s", v[t].len, step, hex, v[t].hex);
        }
    }
}

/* Counting keys over SL_MAX_KEY: the digest form, exact. */
static void long_keys(void **state)
{
    fx *f = *state;
    use(f, rules_yaml, 0);
    static char v1[600], v2[600], full[800];
    memset(v1, 'x', sizeof v1);
    memset(v2, 'x', sizeof v2);
    v2[599] = 'y'; /* differs in its last byte only: past the readable prefix */
    sl_rule_entry e1 = {"b", 1, v1, sizeof v1}, e2 = {"b", 1, v2, sizeof v2};
    const sl_rule_entry *d[2] = {&e1, &e2};
    int nd[2] = {1, 1};
    sl_check_input in = {.n = 2, .descs = d, .ndesc = nd, .cost = 1, .now_ms = 0};
    assert_int_equal(run(f, &in), 0);
    /* two counters, one hit each */
    assert_int_equal(plan.nitems, 2);
    assert_int_equal(plan.items[1].lead, 1);
    status_is(0, SL_CHECK_OK, 10, 9, 0, 60000);
    status_is(1, SL_CHECK_OK, 10, 9, 0, 60000);
    /* the exact form: 446 readable bytes, "#~", 64 hex digits */
    int n = snprintf(full, sizeof full, "e|b=%.600s", v1);
    char hex[65];
    digest_hex(full, (size_t)n, hex);
    const sl_check_item *t = &plan.items[0];
    assert_int_equal((int)t->keylen, SL_MAX_KEY);
    assert_memory_equal(t->key, full, SL_RULES_KEY_PREFIX);
    assert_memory_equal(t->key + SL_RULES_KEY_PREFIX, "#~", 2);
    assert_memory_equal(t->key + SL_RULES_KEY_PREFIX + 2, hex, 64);
    assert_int_equal((int)t->taglen, 1); /* the domain "e" */
    assert_memory_not_equal(plan.items[1].key, t->key, SL_MAX_KEY);
    /* the same value again shares its counter */
    in.n = 1;
    assert_int_equal(run(f, &in), 0);
    status_is(0, SL_CHECK_OK, 10, 8, 0, 60000);
    assert_int_equal(count_of(f, t->key, t->keylen, 60000, 0), 2);
    /* the same long value twice in one request: one counter, costs added */
    d[1] = &e1;
    in.n = 2;
    assert_int_equal(run(f, &in), 0);
    assert_int_equal(plan.items[1].lead, 0);
    status_is(1, SL_CHECK_OK, 10, 6, 0, 60000);

    /* a key of exactly SL_MAX_KEY bytes stays as built; one more byte
     * takes the digest form */
    e1.valuelen = SL_MAX_KEY - strlen("e|b=");
    in.n = 1;
    assert_int_equal(run(f, &in), 0);
    assert_int_equal((int)plan.items[0].keylen, SL_MAX_KEY);
    assert_memory_equal(plan.items[0].key, "e|b=xxx", 7);
    assert_memory_equal(plan.items[0].key + SL_MAX_KEY - 3, "xxx", 3);
    e1.valuelen++;
    assert_int_equal(run(f, &in), 0);
    assert_memory_equal(plan.items[0].key + SL_RULES_KEY_PREFIX, "#~", 2);
    /* escapes count: 200 '|' are 600 bytes of key */
    memset(v1, '|', 200);
    e1.valuelen = 200;
    assert_int_equal(run(f, &in), 0);
    assert_memory_equal(plan.items[0].key, "e|b=%7C%7C", 10);
    assert_memory_equal(plan.items[0].key + SL_RULES_KEY_PREFIX, "#~", 2);

    /* an override's key too: 17 entries of 40 bytes each */
    static char big[17][41];
    sl_rule_entry e[17];
    n = snprintf(full, sizeof full, "e");
    for (int i = 0; i < 17; i++) {
        memset(big[i], 'a' + i, 40);
        e[i] = (sl_rule_entry){"k", 1, big[i], 40};
        n += snprintf(full + n, sizeof full - (size_t)n, "|k=%.40s", big[i]);
    }
    n += snprintf(full + n, sizeof full - (size_t)n, "#override/1000");
    const sl_rule_entry *od[1] = {e};
    int ond[1] = {17};
    sl_check_override o = {1, SL_UNIT_SECOND};
    sl_check_input oin = {.n = 1, .descs = od, .ndesc = ond, .over = &o, .cost = 1, .now_ms = 0};
    assert_int_equal(run(f, &oin), 0);
    status_is(0, SL_CHECK_OK, 1, 0, 0, 1000);
    digest_hex(full, (size_t)n, hex);
    assert_int_equal((int)plan.items[0].keylen, SL_MAX_KEY);
    assert_memory_equal(plan.items[0].key, full, SL_RULES_KEY_PREFIX);
    assert_memory_equal(plan.items[0].key + SL_RULES_KEY_PREFIX + 2, hex, 64);
    assert_int_equal(run(f, &oin), 0);
    status_is(0, SL_CHECK_OVER_LIMIT, 1, 0, 1000, 1000);
    big[16][39] = 'z'; /* the last byte of the last entry: another counter */
    assert_int_equal(run(f, &oin), 0);
    status_is(0, SL_CHECK_OK, 1, 0, 0, 1000);

    /* sl_rules_key itself: a cap below SL_MAX_KEY cannot hold the form */
    sl_rule_entry le = {"b", 1, v2, sizeof v2};
    const sl_rule_node *node = sl_rules_match(f->r, "e", 1, &le, 1);
    assert_non_null(node);
    char kb[SL_MAX_KEY];
    size_t kl;
    assert_int_equal(sl_rules_key(node, &le, 1, 0, kb, sizeof kb - 1, &kl), SL_EKEY);
    assert_int_equal(sl_rules_key(node, &le, 1, 0, kb, sizeof kb, &kl), 0);
    assert_int_equal((int)kl, SL_MAX_KEY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(costs, setup, teardown),
        cmocka_unit_test_setup_teardown(lyft, setup, teardown),
        cmocka_unit_test_setup_teardown(lyft_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(fields, setup, teardown),
        cmocka_unit_test_setup_teardown(deep, setup, teardown),
        cmocka_unit_test(sip128_vectors),
        cmocka_unit_test_setup_teardown(long_keys, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
