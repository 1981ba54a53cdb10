/*
 * test_check.c -- RL.CHECK's evaluation (src/rules/check.c): several limits
 * on one descriptor all-or-none, several descriptors all-or-none (a denied
 * request charges nobody), shadow mode, soft limits at their edge,
 * unlimited, no rule, requests_per_unit 0, the batch cap, repeated counters,
 * elastic limits on the spare pool at their edges, Lyft's `replaces`;
 * Lyft's current format: share_threshold, quota_mode, and Lyft's counting
 * of denied requests (SL_RULES_COUNT_DENIED); limit overrides (Envoy's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "backend_local.h"
#include "check.h"
#include "rules.h"
#include "sluice.h"

static char err[1024];

static const char yaml[] =
    "domain: api\n"
    "descriptors:\n"
    "  - key: user                     # 10 a minute AND 500 an hour\n"
    "    rate_limit:\n"
    "      - unit: minute\n"
    "        requests_per_unit: 10\n"
    "      - unit: hour\n"
    "        requests_per_unit: 500\n"
    "  - key: ip\n"
    "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
    "  - key: shadow\n"
    "    shadow_mode: true\n"
    "    rate_limit: {unit: minute, requests_per_unit: 2, name: shadowed}\n"
    "  - key: soft\n"
    "    rate_limit: {unit: minute, requests_per_unit: 10, soft: 10%}\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true, name: free}\n"
    "  - key: blocked\n"
    "    rate_limit: {unit: second, requests_per_unit: 0, name: blocklist}\n"
    "  - key: tenant                   # 3 a minute, up to 5 on spare capacity\n"
    "    rate_limit: {unit: minute, requests_per_unit: 3, elastic: 5, name: tenant}\n"
    "  - key: team\n"
    "    rate_limit: {unit: minute, requests_per_unit: 2, name: team_default}\n"
    "  - key: vip\n"
    "    rate_limit:\n"
    "      unit: minute\n"
    "      requests_per_unit: 100\n"
    "      name: vip\n"
    "      replaces:\n"
    "        - name: team_default\n";

typedef struct fx {
    sl_rules *r;
    sl_store *s;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (f == NULL) return -1;
    f->r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (f->r == NULL) {
        fprintf(stderr, "load: %s\n", err);
        free(f);
        return -1;
    }
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

/* Up to 20 one-entry descriptors (key, value) given as k, v, k, v, ..., NULL. */
typedef struct req {
    sl_rule_entry e[20];
    const sl_rule_entry *d[20];
    int nd[20];
    int n;
} req;

static void build(req *q, const char *const *kv)
{
    q->n = 0;
    for (; kv[2 * q->n]; q->n++) {
        int i = q->n;
        q->e[i].key = kv[2 * i];
        q->e[i].keylen = strlen(kv[2 * i]);
        q->e[i].value = kv[2 * i + 1];
        q->e[i].valuelen = strlen(kv[2 * i + 1]);
        q->d[i] = &q->e[i];
        q->nd[i] = 1;
    }
}

static sl_result ov;
static sl_check_status st[20];
static const sl_params *pool; /* the spare-capacity pool, if a test sets one */

static int check_kv(fx *f, const char *dom, int64_t cost, int64_t now, const char *const *kv)
{
    req q;
    build(&q, kv);
    return sl_rules_check(f->r, f->s, pool, dom, strlen(dom), q.d, q.nd, q.n, cost, now, &ov, st, err,
                          sizeof err);
}
/* CHECK(f, cost, now, k, v, ...): in domain api; asserts success. */
#define CHECK(f, cost, now, ...)                                                              \
    assert_int_equal(check_kv((f), "api", (cost), (now), (const char *const[]){__VA_ARGS__, NULL}), 0)

/* The remaining of a counter, by peeking the engine directly: rule
 * counters live in key space 1 (check.h).  The same key in space 0 -- where
 * RL.ALLOW keys live -- is never touched by a check. */
static int64_t peek_rem(fx *f, const char *key, int64_t L, int64_t W, int64_t now)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = L;
    p.window_ms = W;
    sl_result r;
    assert_int_equal(sl_peek(f->s, &p, key, strlen(key), now, 0, &r), 0);
    assert_int_equal(r.remaining, L); /* space 0: untouched */
    p.space = 1;
    assert_int_equal(sl_peek(f->s, &p, key, strlen(key), now, 0, &r), 0);
    return r.remaining;
}

static int at; /* the caller's line, for failures */
#define status_is(...)  (at = __LINE__, status_is_(__VA_ARGS__))
#define overall_is(...) (at = __LINE__, overall_is_(__VA_ARGS__))

static void status_is_(int i, sl_check_code code, const char *name, int64_t limit, int64_t rem,
                       int64_t retry, int64_t reset)
{
    if (st[i].code != code || st[i].limit != limit || st[i].remaining != rem ||
        st[i].retry_after_ms != retry || st[i].reset_after_ms != reset)
        print_error("line %d: status %d is %s %s %lld %lld %lld %lld\n", at, i,
                    sl_check_code_name(st[i].code), st[i].name ? st[i].name : "(nil)",
                    (long long)st[i].limit, (long long)st[i].remaining,
                    (long long)st[i].retry_after_ms, (long long)st[i].reset_after_ms);
    assert_string_equal(sl_check_code_name(st[i].code), sl_check_code_name(code));
    if (name == NULL)
        assert_null(st[i].name);
    else
        assert_string_equal(st[i].name, name);
    assert_int_equal(st[i].limit, limit);
    assert_int_equal(st[i].remaining, rem);
    assert_int_equal(st[i].retry_after_ms, retry);
    assert_int_equal(st[i].reset_after_ms, reset);
}

static void overall_is_(int64_t allowed, int64_t limit, int64_t rem, int64_t retry, int64_t reset)
{
    if (ov.allowed != allowed || ov.limit != limit || ov.remaining != rem ||
        ov.retry_after_ms != retry || ov.reset_after_ms != reset)
        print_error("line %d: overall is %lld %lld %lld %lld %lld\n", at, (long long)ov.allowed,
                    (long long)ov.limit, (long long)ov.remaining, (long long)ov.retry_after_ms,
                    (long long)ov.reset_after_ms);
    assert_int_equal(ov.allowed, allowed);
    assert_int_equal(ov.limit, limit);
    assert_int_equal(ov.remaining, rem);
    assert_int_equal(ov.retry_after_ms, retry);
    assert_int_equal(ov.reset_after_ms, reset);
}

/* 10 a minute AND 500 an hour: both charged or neither. */
static void several_limits(void **state)
{
    fx *f = *state;
    const int64_t H = 3600000, M = 60000;
    CHECK(f, 1, 1000, "user", "bob");
    /* the most restrictive: the minute (9 left, 59 s to reset) */
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 9, 0, 59000);
    overall_is(1, 10, 9, 0, 59000);
    assert_int_equal(peek_rem(f, "api|user=bob#3600000", 500, H, 1000), 499);
    for (int i = 2; i <= 10; i++) CHECK(f, 1, 1000, "user", "bob");
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 0, 0, 59000);
    /* 11th: the minute denies; the hour is not charged */
    CHECK(f, 1, 2000, "user", "bob");
    status_is(0, SL_CHECK_OVER_LIMIT, "api.user#1", 10, 0, 58000, 58000);
    overall_is(0, 10, 0, 58000, 58000);
    assert_int_equal(peek_rem(f, "api|user=bob#3600000", 500, H, 2000), 490);

    /* 10 a minute for 49 more minutes: the hour is at 500 exactly */
    for (int m = 1; m < 50; m++)
        for (int i = 0; i < 10; i++) {
            CHECK(f, 1, m * M, "user", "bob");
            assert_int_equal(ov.allowed, 1);
        }
    assert_int_equal(peek_rem(f, "api|user=bob#3600000", 500, H, 50 * M), 0);
    /* minute 50: the minute has room, the hour does not -- neither charged */
    CHECK(f, 1, 50 * M, "user", "bob");
    status_is(0, SL_CHECK_OVER_LIMIT, "api.user#2", 500, 0, 10 * M, 10 * M);
    overall_is(0, 500, 0, 10 * M, 10 * M);
    assert_int_equal(peek_rem(f, "api|user=bob#60000", 10, M, 50 * M), 10);
    /* a new hour; a cost the minute can never take: neither charged */
    CHECK(f, 11, H, "user", "bob");
    assert_string_equal(sl_check_code_name(st[0].code), "OVER_LIMIT");
    assert_string_equal(st[0].name, "api.user#1");
    assert_int_equal(st[0].retry_after_ms, -1);
    assert_int_equal(ov.retry_after_ms, -1);
    assert_int_equal(peek_rem(f, "api|user=bob#3600000", 500, H, H), 500);
    CHECK(f, 10, H, "user", "bob");
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 0, 0, M);
    assert_int_equal(peek_rem(f, "api|user=bob#3600000", 500, H, H), 490);
}

/* A denied request charges none of its descriptors. */
static void denied_charges_nobody(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 3; i++) CHECK(f, 1, 0, "ip", "1.2.3.4");
    CHECK(f, 1, 5000, "user", "dave", "ip", "1.2.3.4");
    assert_int_equal(ov.allowed, 0);
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 9, 0, 55000); /* alone: would pass, 9 left */
    status_is(1, SL_CHECK_OVER_LIMIT, "api.ip", 3, 0, 55000, 55000);
    overall_is(0, 3, 0, 55000, 55000);
    assert_int_equal(peek_rem(f, "api|user=dave#60000", 10, 60000, 5000), 10);
    assert_int_equal(peek_rem(f, "api|user=dave#3600000", 500, 3600000, 5000), 500);
    /* allowed: both charged, overall = the smallest remaining */
    CHECK(f, 1, 60000, "user", "dave", "ip", "1.2.3.4");
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 9, 0, 60000);
    status_is(1, SL_CHECK_OK, "api.ip", 3, 2, 0, 60000);
    overall_is(1, 3, 2, 0, 60000);
}

/* Shadow mode: counted, never denies, says SHADOW; kept out of the answer. */
static void shadow(void **state)
{
    fx *f = *state;
    CHECK(f, 1, 0, "shadow", "s");
    status_is(0, SL_CHECK_OK, "shadowed", 2, 1, 0, 60000);
    assert_true(st[0].shadow);
    overall_is(1, 0, 0, 0, 0); /* no enforced limit */
    CHECK(f, 1, 0, "shadow", "s");
    status_is(0, SL_CHECK_OK, "shadowed", 2, 0, 0, 60000);
    for (int i = 0; i < 3; i++) {
        CHECK(f, 1, 1000, "shadow", "s", "ip", "9.9.9.9");
        assert_int_equal(ov.allowed, 1);
        status_is(0, SL_CHECK_SHADOW, "shadowed", 2, 0, 59000, 59000);
        status_is(1, SL_CHECK_OK, "api.ip", 3, 2 - i, 0, 59000);
        overall_is(1, 3, 2 - i, 0, 59000);
    }
    /* ip is now exhausted: the request is denied by ip, never by shadow */
    CHECK(f, 1, 1000, "shadow", "s", "ip", "9.9.9.9");
    assert_int_equal(ov.allowed, 0);
    status_is(0, SL_CHECK_SHADOW, "shadowed", 2, 0, 59000, 59000);
    status_is(1, SL_CHECK_OVER_LIMIT, "api.ip", 3, 0, 59000, 59000);
    overall_is(0, 3, 0, 59000, 59000);

    /* a denied request does not charge the shadow counter either */
    CHECK(f, 1, 0, "shadow", "t", "blocked", "x");
    assert_int_equal(ov.allowed, 0);
    status_is(0, SL_CHECK_OK, "shadowed", 2, 1, 0, 60000); /* would */
    assert_int_equal(peek_rem(f, "api|shadow=t", 2, 60000, 0), 2);
    CHECK(f, 1, 0, "shadow", "t");
    assert_int_equal(peek_rem(f, "api|shadow=t", 2, 60000, 0), 1);

    /* what the limits counted: shadow reports its would-be denials */
    const sl_rule_counts *c = st[0].rule->counts;
    assert_int_equal(atomic_load(&c->checked), 8);
    assert_int_equal(atomic_load(&c->shadow), 4);
    assert_int_equal(atomic_load(&c->over), 0);
}

/* soft: 10% on L = 10: 11 pass, the 12th is denied. */
static void soft(void **state)
{
    fx *f = *state;
    for (int i = 1; i <= 11; i++) {
        CHECK(f, 1, 0, "soft", "a");
        status_is(0, SL_CHECK_OK, "api.soft", 11, 11 - i, 0, 60000);
        assert_int_equal(ov.allowed, 1);
    }
    CHECK(f, 1, 0, "soft", "a");
    status_is(0, SL_CHECK_OVER_LIMIT, "api.soft", 11, 0, 60000, 60000);
    overall_is(0, 11, 0, 60000, 60000);
    /* a cost of 12 never fits in one window */
    CHECK(f, 12, 60000, "soft", "b");
    assert_int_equal(ov.allowed, 0);
    assert_int_equal(ov.retry_after_ms, -1);
}

static void unlimited_and_no_rule(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 1000; i++) {
        CHECK(f, 1000, 0, "free", "x", "nothing", "here");
        assert_int_equal(ov.allowed, 1);
    }
    status_is(0, SL_CHECK_UNLIMITED, "free", 0, 0, 0, 0);
    status_is(1, SL_CHECK_NO_RULE, NULL, 0, 0, 0, 0);
    assert_null(st[1].rule);
    overall_is(1, 0, 0, 0, 0);
    sl_store_stats ss;
    sl_store_stats_get(f->s, &ss);
    assert_int_equal(ss.keys, 0); /* nothing counted */
    /* unknown domain */
    assert_int_equal(check_kv(f, "web", 1, 0, (const char *const[]){"user", "bob", NULL}), 0);
    status_is(0, SL_CHECK_NO_RULE, NULL, 0, 0, 0, 0);
    assert_int_equal(ov.allowed, 1);
}

/* requests_per_unit 0: denied, never, and the others not charged. */
static void zero_limit(void **state)
{
    fx *f = *state;
    CHECK(f, 1, 0, "user", "eve", "blocked", "x");
    status_is(0, SL_CHECK_OK, "api.user#1", 10, 9, 0, 60000); /* would */
    status_is(1, SL_CHECK_OVER_LIMIT, "blocklist", 0, 0, -1, 0);
    overall_is(0, 0, 0, -1, 0);
    assert_int_equal(peek_rem(f, "api|user=eve#60000", 10, 60000, 0), 10);
    /* never, even with another denial that has a finite retry */
    for (int i = 0; i < 3; i++) CHECK(f, 1, 0, "ip", "5.5.5.5");
    CHECK(f, 1, 0, "ip", "5.5.5.5", "blocked", "x");
    status_is(0, SL_CHECK_OVER_LIMIT, "api.ip", 3, 0, 60000, 60000);
    overall_is(0, 0, 0, -1, 0);
    CHECK(f, 0, 0, "blocked", "x"); /* even a cost of 0 */
    assert_int_equal(ov.allowed, 0);
}

/* More than SL_MAX_BATCH counted limits: an error, nothing charged. */
static void batch_cap(void **state)
{
    fx *f = *state;
    /* 8 users x 2 limits = 16: fine */
    CHECK(f, 1, 0, "user", "a", "user", "b", "user", "c", "user", "d", "user", "e", "user", "f",
          "user", "g", "user", "h");
    assert_int_equal(ov.allowed, 1);
    /* 16 + 1 */
    assert_int_equal(check_kv(f, "api", 1, 0,
                              (const char *const[]){"user", "a", "user", "b", "user", "c", "user",
                                                    "d", "user", "e", "user", "f", "user", "g",
                                                    "user", "h", "ip", "z", NULL}),
                     SL_EINVAL);
    assert_non_null(strstr(err, "more than 16 limits"));
    assert_int_equal(peek_rem(f, "api|user=a#60000", 10, 60000, 0), 9);
    assert_int_equal(peek_rem(f, "api|ip=z", 3, 60000, 0), 3);
    /* unlimited and no-rule descriptors do not count */
    CHECK(f, 1, 0, "user", "a", "user", "b", "user", "c", "user", "d", "user", "e", "user", "f",
          "user", "g", "user", "h", "free", "1", "none", "2");
    assert_int_equal(ov.allowed, 1);
}

/* The same counter twice in one request: one counter, costs added. */
static void repeated_counter(void **state)
{
    fx *f = *state;
    CHECK(f, 1, 0, "ip", "7.7.7.7", "ip", "7.7.7.7");
    status_is(0, SL_CHECK_OK, "api.ip", 3, 1, 0, 60000);
    status_is(1, SL_CHECK_OK, "api.ip", 3, 1, 0, 60000);
    CHECK(f, 1, 0, "ip", "7.7.7.7", "ip", "7.7.7.7"); /* 2 > 1 left: denied, none charged */
    assert_int_equal(ov.allowed, 0);
    status_is(0, SL_CHECK_OVER_LIMIT, "api.ip", 3, 1, 60000, 60000);
    status_is(1, SL_CHECK_OVER_LIMIT, "api.ip", 3, 1, 60000, 60000);
    assert_int_equal(peek_rem(f, "api|ip=7.7.7.7", 3, 60000, 0), 1);
}

static void bad_arguments(void **state)
{
    fx *f = *state;
    req q;
    build(&q, (const char *const[]){"user", "a", NULL});
    assert_int_equal(sl_rules_check(f->r, f->s, NULL, "api", 3, q.d, q.nd, 0, 1, 0, &ov, st, err,
                                    sizeof err),
                     SL_EINVAL);
    assert_int_equal(sl_rules_check(f->r, f->s, NULL, "api", 3, q.d, q.nd, 1, -1, 0, &ov, st, err,
                                    sizeof err),
                     SL_ECOST);
    assert_int_equal(sl_rules_check(f->r, f->s, NULL, "api", 3, q.d, q.nd, 1, 1, SL_MAX_TIME_MS, &ov,
                                    st, err, sizeof err),
                     SL_ETIME);
    q.nd[0] = 0;
    assert_int_equal(sl_rules_check(f->r, f->s, NULL, "api", 3, q.d, q.nd, 1, 1, 0, &ov, st, err,
                                    sizeof err),
                     SL_EINVAL);
    /* merged costs beyond SL_MAX_LIMIT */
    build(&q, (const char *const[]){"ip", "1", "ip", "1", NULL});
    assert_int_equal(sl_rules_check(f->r, f->s, NULL, "api", 3, q.d, q.nd, 2, SL_MAX_LIMIT, 0, &ov,
                                    st, err, sizeof err),
                     SL_ECOST);
}

/* elastic: over its own 3 a minute, a tenant passes up to 5 while the
 * spare pool (6 a minute through all rules) has room. */
static void elastic(void **state)
{
    fx *f = *state;
    const int64_t M = 60000;
    sl_params pp;
    assert_int_equal(sl_check_pool_parse("6/1m", &pp, err, sizeof err), 0);
    pool = &pp;
    for (int i = 1; i <= 3; i++) {
        CHECK(f, 1, 0, "tenant", "a");
        status_is(0, SL_CHECK_OK, "tenant", 3, 3 - i, 0, M);
    }
    /* 4th and 5th: above L, on the pool: ELASTIC, numbers at the ceiling
     * (remaining: the smaller of the ceiling's and the pool's) */
    CHECK(f, 1, 1000, "tenant", "a");
    status_is(0, SL_CHECK_ELASTIC, "tenant", 5, 1, 0, M - 1000);
    overall_is(1, 5, 1, 0, M - 1000);
    CHECK(f, 1, 1000, "tenant", "a");
    status_is(0, SL_CHECK_ELASTIC, "tenant", 5, 0, 0, M - 1000);
    /* 6th: the ceiling: denied, answered at L */
    CHECK(f, 1, 2000, "tenant", "a");
    status_is(0, SL_CHECK_OVER_LIMIT, "tenant", 3, 0, M - 2000, M - 2000);
    assert_int_equal(ov.allowed, 0);
    /* the pool holds 5 of 6.  Tenant b within its own limit always passes
     * (and uses the last unit of the pool) ... */
    for (int i = 1; i <= 3; i++) {
        CHECK(f, 1, 3000, "tenant", "b");
        status_is(0, SL_CHECK_OK, "tenant", 3, 3 - i, 0, M - 3000);
    }
    assert_int_equal(peek_rem(f, "|spare-capacity", 6, M, 3000), 0);
    /* ... but not above it: the pool is full */
    CHECK(f, 1, 3000, "tenant", "b");
    status_is(0, SL_CHECK_OVER_LIMIT, "tenant", 3, 0, M - 3000, M - 3000);
    assert_int_equal(peek_rem(f, "api|tenant=b", 3, M, 3000), 0);
    /* a new minute: the pool is empty again */
    CHECK(f, 2, M, "tenant", "b");
    status_is(0, SL_CHECK_OK, "tenant", 3, 1, 0, M);
    CHECK(f, 2, M, "tenant", "b"); /* 4 of 3: elastic */
    status_is(0, SL_CHECK_ELASTIC, "tenant", 5, 1, 0, M);
    CHECK(f, 2, M, "tenant", "b"); /* 6 of 5: never mind the pool */
    status_is(0, SL_CHECK_OVER_LIMIT, "tenant", 3, 0, M, M);
    /* elastic never helps past another descriptor's denial: nothing charged */
    for (int i = 0; i < 3; i++) CHECK(f, 1, M, "ip", "9.9.9.9");
    CHECK(f, 1, M, "tenant", "c", "ip", "9.9.9.9");
    assert_int_equal(ov.allowed, 0);
    assert_int_equal(peek_rem(f, "api|tenant=c", 3, M, M), 3);
    /* without a pool an elastic limit is a plain limit */
    pool = NULL;
    for (int i = 0; i < 3; i++) CHECK(f, 1, 2 * M, "tenant", "d");
    CHECK(f, 1, 2 * M, "tenant", "d");
    status_is(0, SL_CHECK_OVER_LIMIT, "tenant", 3, 0, M, M);
    /* 18 checks of tenants; 3 passed above L, 4 found over (c was denied by ip) */
    const sl_rule_counts *c = st[0].rule->counts;
    assert_int_equal(atomic_load(&c->checked), 18);
    assert_int_equal(atomic_load(&c->elastic), 3);
    assert_int_equal(atomic_load(&c->over), 4);
}

/* replaces: a matched `vip` limit means `team_default` is not applied. */
static void replaces(void **state)
{
    fx *f = *state;
    for (int i = 0; i < 2; i++) CHECK(f, 1, 0, "team", "red");
    CHECK(f, 1, 0, "team", "red");
    status_is(0, SL_CHECK_OVER_LIMIT, "team_default", 2, 0, 60000, 60000);
    CHECK(f, 1, 0, "team", "red", "vip", "yes");
    assert_int_equal(ov.allowed, 1);
    status_is(0, SL_CHECK_OK, "team_default", 0, 0, 0, 0); /* not applied, as Lyft */
    status_is(1, SL_CHECK_OK, "vip", 100, 99, 0, 60000);
    overall_is(1, 100, 99, 0, 60000);
    assert_int_equal(peek_rem(f, "api|team=red", 2, 60000, 0), 0); /* not charged */
}

/* ---- Lyft's current format ------------------------------------------------ */

/* Replaces the fixture's rules with yaml, loaded with SL_RULES_* flags. */
static void use(fx *f, const char *y, unsigned flags)
{
    sl_rules_free(f->r);
    f->r = sl_rules_load_buffer_flags("t.yaml", y, strlen(y), flags, err, sizeof err);
    if (f->r == NULL) fail_msg("load: %s", err);
}

/* CHECK_IN(f, dom, cost, now, k, v, ...): asserts success. */
#define CHECK_IN(f, dom, cost, now, ...)                                                           \
    assert_int_equal(                                                                              \
        check_kv((f), (dom), (cost), (now), (const char *const[]){__VA_ARGS__, NULL}), 0)

/* share_threshold: every value the wildcard matches spends one counter. */
static void share_threshold(void **state)
{
    fx *f = *state;
    use(f,
        "domain: s\n"
        "descriptors:\n"
        "  - {key: files, value: files/*, share_threshold: true,\n"
        "     rate_limit: {unit: minute, requests_per_unit: 2}}\n"
        "  - {key: path, value: /api/*/v1, rate_limit: {unit: minute, requests_per_unit: 2}}\n",
        0);
    CHECK_IN(f, "s", 1, 1000, "files", "files/a.txt");
    status_is(0, SL_CHECK_OK, "s.files_files/*", 2, 1, 0, 59000);
    CHECK_IN(f, "s", 1, 1000, "files", "files/b.txt");
    status_is(0, SL_CHECK_OK, "s.files_files/*", 2, 0, 0, 59000);
    CHECK_IN(f, "s", 1, 1000, "files", "files/c.txt"); /* a third value: the same counter */
    status_is(0, SL_CHECK_OVER_LIMIT, "s.files_files/*", 2, 0, 59000, 59000);
    assert_int_equal(peek_rem(f, "s|files=files/*", 2, 60000, 1000), 0);
    /* without share_threshold, a middle wildcard counts each value apart */
    for (int i = 0; i < 2; i++) {
        CHECK_IN(f, "s", 1, 1000, "path", "/api/users/v1");
        assert_int_equal(ov.allowed, 1);
    }
    CHECK_IN(f, "s", 1, 1000, "path", "/api/orders/v1");
    status_is(0, SL_CHECK_OK, "s.path_/api/*/v1", 2, 1, 0, 59000);
    CHECK_IN(f, "s", 1, 1000, "path", "/api/users/v1");
    assert_int_equal(ov.allowed, 0);
}

/* quota_mode: a quota descriptor over its limit does not deny, unless every
 * quota descriptor of the request is over (Lyft's rule since PR 1059). */
static void quota_mode(void **state)
{
    fx *f = *state;
    use(f,
        "domain: q\n"
        "descriptors:\n"
        "  - {key: backend, value: a, quota_mode: true,\n"
        "     rate_limit: {unit: minute, requests_per_unit: 2}}\n"
        "  - {key: backend, value: b, quota_mode: true,\n"
        "     rate_limit: {unit: second, requests_per_unit: 3}}\n"
        "  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n"
        "  - {key: sq, quota_mode: true, shadow_mode: true,\n"
        "     rate_limit: {unit: minute, requests_per_unit: 1}}\n",
        0);
    const char *a = "q.backend_a", *b = "q.backend_b";
    CHECK_IN(f, "q", 1, 1000, "backend", "a", "backend", "b", "user", "u");
    status_is(0, SL_CHECK_OK, a, 2, 1, 0, 59000);
    status_is(1, SL_CHECK_OK, b, 3, 2, 0, 1000);
    status_is(2, SL_CHECK_OK, "q.user", 5, 4, 0, 59000);
    overall_is(1, 2, 1, 0, 59000); /* a quota descriptor counts like any */
    CHECK_IN(f, "q", 1, 1000, "backend", "a", "backend", "b", "user", "u");
    overall_is(1, 2, 0, 0, 59000);
    /* a is over: it does not deny, and is not charged; b and user are */
    CHECK_IN(f, "q", 1, 1000, "backend", "a", "backend", "b", "user", "u");
    status_is(0, SL_CHECK_OVER_QUOTA, a, 2, 0, 59000, 59000);
    status_is(1, SL_CHECK_OK, b, 3, 0, 0, 1000);
    status_is(2, SL_CHECK_OK, "q.user", 5, 2, 0, 59000);
    overall_is(1, 3, 0, 0, 1000);
    assert_int_equal(peek_rem(f, "q|backend=a", 2, 60000, 1000), 0);
    /* both over: denied; the overall answer is the first to have room (b) */
    CHECK_IN(f, "q", 1, 1000, "backend", "a", "backend", "b", "user", "u");
    status_is(0, SL_CHECK_OVER_LIMIT, a, 2, 0, 59000, 59000);
    status_is(1, SL_CHECK_OVER_LIMIT, b, 3, 0, 1000, 1000);
    status_is(2, SL_CHECK_OK, "q.user", 5, 1, 0, 59000); /* as if alone: not charged */
    overall_is(0, 3, 0, 1000, 1000);
    assert_int_equal(peek_rem(f, "q|user=u", 5, 60000, 1000), 2);
    /* the next second b has room again: allowed */
    CHECK_IN(f, "q", 1, 2000, "backend", "a", "backend", "b", "user", "u");
    status_is(0, SL_CHECK_OVER_QUOTA, a, 2, 0, 58000, 58000);
    status_is(1, SL_CHECK_OK, b, 3, 2, 0, 1000);
    overall_is(1, 5, 1, 0, 58000); /* user: 4 of 5 */
    /* one quota descriptor alone, over: every quota descriptor is over */
    CHECK_IN(f, "q", 1, 2000, "backend", "a");
    status_is(0, SL_CHECK_OVER_LIMIT, a, 2, 0, 58000, 58000);
    overall_is(0, 2, 0, 58000, 58000);
    /* an enforced descriptor denies: then the quota ones over are not why */
    CHECK_IN(f, "q", 1, 2000, "user", "u", "backend", "a", "backend", "b");
    status_is(0, SL_CHECK_OK, "q.user", 5, 0, 0, 58000); /* its 5th */
    status_is(1, SL_CHECK_OVER_QUOTA, a, 2, 0, 58000, 58000);
    status_is(2, SL_CHECK_OK, b, 3, 1, 0, 1000);
    CHECK_IN(f, "q", 1, 2000, "backend", "b");
    status_is(0, SL_CHECK_OK, b, 3, 0, 0, 1000);
    CHECK_IN(f, "q", 1, 2000, "user", "u", "backend", "a", "backend", "b");
    status_is(0, SL_CHECK_OVER_LIMIT, "q.user", 5, 0, 58000, 58000);
    status_is(1, SL_CHECK_OVER_QUOTA, a, 2, 0, 58000, 58000);
    status_is(2, SL_CHECK_OVER_QUOTA, b, 3, 0, 1000, 1000);
    overall_is(0, 5, 0, 58000, 58000); /* the enforced one, as always */
    /* shadow wins over quota: never denies, not a quota descriptor */
    CHECK_IN(f, "q", 1, 3000, "sq", "x");
    CHECK_IN(f, "q", 1, 3000, "sq", "x");
    status_is(0, SL_CHECK_SHADOW, "q.sq", 1, 0, 57000, 57000);
    overall_is(1, 0, 0, 0, 0);
    /* RL.RULES counts: a was found over 6 times in 8 (2 of them it denied) */
    const sl_rule_node *n = sl_rules_match(f->r, "q", 1, &(sl_rule_entry){"backend", 7, "a", 1}, 1);
    assert_int_equal(atomic_load(&n->limits[0].counts->checked), 8);
    assert_int_equal(atomic_load(&n->limits[0].counts->over), 6);
}

/* SL_RULES_COUNT_DENIED (sluiced --count-denied): Lyft's counting.  A
 * denied request still charges every matched fixed-window counter, and each
 * is judged against L after the charge, as Lyft's INCRBY. */
static void count_denied(void **state)
{
    fx *f = *state;
    static const char y[] =
        "domain: c\n"
        "descriptors:\n"
        "  - {key: a, rate_limit: {unit: minute, requests_per_unit: 2}}\n"
        "  - {key: b, rate_limit: {unit: minute, requests_per_unit: 10}}\n"
        "  - {key: tb, rate_limit: {algorithm: token-bucket, unit: minute, requests_per_unit: 5}}\n"
        "  - {key: s, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n";
    use(f, y, SL_RULES_COUNT_DENIED);
    assert_int_equal(sl_rules_flags(f->r), SL_RULES_COUNT_DENIED);
    for (int i = 1; i <= 2; i++) CHECK_IN(f, "c", 1, 1000, "a", "x", "b", "y", "tb", "z");
    status_is(0, SL_CHECK_OK, "c.a", 2, 0, 0, 59000);
    status_is(1, SL_CHECK_OK, "c.b", 10, 8, 0, 59000);
    /* the 3rd: a is over and denies -- and still b, and a itself, are charged */
    CHECK_IN(f, "c", 1, 1000, "a", "x", "b", "y", "tb", "z");
    status_is(0, SL_CHECK_OVER_LIMIT, "c.a", 2, 0, 59000, 59000);
    status_is(1, SL_CHECK_OK, "c.b", 10, 7, 0, 59000);
    overall_is(0, 2, 0, 59000, 59000);
    assert_int_equal(peek_rem(f, "c|b=y", 10, 60000, 1000), 7);
    /* the token bucket keeps all-or-none: only peeked when denied */
    status_is(2, SL_CHECK_OK, "c.tb", 5, 2, 0, 36000);
    /* the count went past L: a 4th is over, and counted */
    CHECK_IN(f, "c", 1, 1000, "a", "x");
    status_is(0, SL_CHECK_OVER_LIMIT, "c.a", 2, 0, 59000, 59000);
    CHECK_IN(f, "c", 1, 1000, "b", "y");
    status_is(0, SL_CHECK_OK, "c.b", 10, 6, 0, 59000);
    /* a cost above L: over, never */
    CHECK_IN(f, "c", 3, 1000, "a", "w");
    status_is(0, SL_CHECK_OVER_LIMIT, "c.a", 2, 0, -1, 59000);
    /* a new window starts from 0 */
    CHECK_IN(f, "c", 1, 60000, "a", "x");
    status_is(0, SL_CHECK_OK, "c.a", 2, 1, 0, 60000);
    /* shadow counters are charged too, and never deny */
    CHECK_IN(f, "c", 1, 1000, "s", "v");
    CHECK_IN(f, "c", 1, 1000, "s", "v");
    status_is(0, SL_CHECK_SHADOW, "c.s", 1, 0, 59000, 59000);
    overall_is(1, 0, 0, 0, 0);
    CHECK_IN(f, "c", 1, 1000, "s", "v");
    status_is(0, SL_CHECK_SHADOW, "c.s", 1, 0, 59000, 59000);

    /* the default, for contrast: the denied request charges nobody */
    sl_store_free(f->s);
    f->s = sl_store_new(NULL, NULL);
    use(f, y, 0);
    for (int i = 1; i <= 3; i++) CHECK_IN(f, "c", 1, 1000, "a", "x", "b", "y");
    status_is(1, SL_CHECK_OK, "c.b", 10, 7, 0, 59000); /* as if alone */
    assert_int_equal(peek_rem(f, "c|b=y", 10, 60000, 1000), 8);
}

/* The plan names each descriptor's node, and counts those whose statistics
 * go per value (detailed_metric, value_to_metric): 0 for every other
 * request, which is what spares them any per-value work in sluiced. */
static void plan_metric_nodes(void **state)
{
    fx *f = *state;
    use(f,
        "domain: m\n"
        "descriptors:\n"
        "  - {key: user, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 2}}\n"
        "  - {key: key7, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: "
        "70}}\n"
        "  - {key: ip, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
        "  - {key: w, value: 'a*', value_to_metric: true, share_threshold: true,\n"
        "     rate_limit: {unit: minute, requests_per_unit: 3}}\n",
        0);
    static sl_check_plan plan; /* large: not on the stack */
    req q;
    build(&q, (const char *const[]){"ip", "1.2.3.4", "w", "ab", "color", "red", NULL});
    assert_int_equal(
        sl_check_plan_make(f->r, NULL, "m", 1, q.d, q.nd, q.n, 1, 0, &plan, err, sizeof err), 0);
    assert_int_equal(plan.nmetric, 0); /* a shared wildcard keeps its pattern: static */
    assert_string_equal(plan.node[0]->path, "m.ip");
    assert_string_equal(plan.node[1]->path, "m.w_a*");
    assert_null(plan.node[2]); /* NO_RULE */
    build(&q, (const char *const[]){"user", "bob", "ip", "1.2.3.4", "key7", "x", NULL});
    assert_int_equal(
        sl_check_plan_make(f->r, NULL, "m", 1, q.d, q.nd, q.n, 1, 0, &plan, err, sizeof err), 0);
    assert_int_equal(plan.nmetric, 2);
    assert_true(plan.node[0]->metric_dynamic);
    assert_false(plan.node[1]->metric_dynamic);
    assert_true(plan.node[2]->metric_dynamic);
}

/* A limit override (check.h): the descriptor's limit whatever the rules
 * say, counted by entries and unit under a key no rule can have; NO_RULE
 * in a domain without rules; refused with a message when malformed. */
static void limit_override(void **state)
{
    fx *f = *state;
    use(f, yaml, 0);
    static sl_check_plan plan; /* large: not on the stack */
    req q;
    build(&q, (const char *const[]){"shadow", "a|b", "nokey", "x", "ip", "1.2.3.4", NULL});
    sl_check_override ovr[3] = {{7, SL_UNIT_HOUR}, {0, SL_UNIT_SECOND}, {0, SL_UNIT_NONE}};
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, ovr, q.n, 2, 1000,
                                             &plan, err, sizeof err),
                     0);
    assert_int_equal(plan.nitems, 3);
    const sl_check_item *t = &plan.items[0];
    assert_int_equal(t->desc, 0);
    assert_string_equal(t->rl->name, "");
    assert_int_equal(t->p.algo, SL_FIXED_WINDOW);
    assert_int_equal(t->p.limit, 7);
    assert_int_equal(t->p.window_ms, 3600000);
    assert_int_equal(t->p.space, 1);
    assert_int_equal(t->shadow, 0); /* the node is in shadow mode: not consulted */
    assert_int_equal((int)t->keylen, (int)strlen("api|shadow=a%7Cb#override/3600000"));
    assert_memory_equal(t->key, "api|shadow=a%7Cb#override/3600000", t->keylen);
    assert_int_equal((int)t->taglen, 3);
    assert_int_equal(t->cost, 2);
    assert_true(plan.items[1].zero); /* 0 requests: denied, never */
    assert_int_equal(plan.items[1].desc, 1);
    assert_int_equal(plan.denied_never, 1);
    assert_int_equal(plan.items[2].desc, 2); /* no override: the rule */
    assert_memory_equal(plan.items[2].key, "api|ip=1.2.3.4", plan.items[2].keylen);
    assert_null(plan.node[0]);
    assert_non_null(plan.node[2]);

    /* a domain the rules do not define: no limit */
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "other", 5, q.d, q.nd, ovr, q.n, 1, 1000,
                                             &plan, err, sizeof err),
                     0);
    assert_int_equal(plan.nitems, 0);
    assert_int_equal(plan.pre[0].code, SL_CHECK_NO_RULE);

    /* decided: 7 an hour, the shadow rule's 2 a minute not applied */
    build(&q, (const char *const[]){"shadow", "d", NULL});
    sl_check_override one = {7, SL_UNIT_HOUR};
    sl_check_outcome o;
    sl_result all;
    sl_check_status sts[1];
    for (int i = 0; i < 8; i++) {
        assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, &one, q.n, 1,
                                                 1000, &plan, err, sizeof err),
                         0);
        memset(&o, 0, sizeof o);
        assert_int_equal(sl__local_check_exec(f->s, &plan, &o, err, sizeof err), 0);
        sl_check_report(&plan, &o, &all, sts);
        assert_int_equal(all.allowed, i < 7);
        assert_int_equal(sts[0].code, i < 7 ? SL_CHECK_OK : SL_CHECK_OVER_LIMIT);
        assert_int_equal(sts[0].limit, 7);
        assert_int_equal(sts[0].remaining, i < 7 ? 6 - i : 0);
        assert_int_equal(sts[0].reset_after_ms, 3600000 - 1000);
    }

    /* refused */
    sl_check_override bad[2] = {{1, SL_UNIT_MINUTE}, {1, (sl_rule_unit)99}};
    build(&q, (const char *const[]){"ip", "a", "ip", "b", NULL});
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, bad, q.n, 1, 1000,
                                             &plan, err, sizeof err),
                     SL_EINVAL);
    assert_string_equal(err, "descriptor 2: limit override with an unknown unit");
    bad[1] = (sl_check_override){SL_MAX_LIMIT + 1, SL_UNIT_MINUTE};
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, bad, q.n, 1, 1000,
                                             &plan, err, sizeof err),
                     SL_EINVAL);
    assert_string_equal(err, "descriptor 2: limit override must be 0 to 1000000000000");
    build(&q, (const char *const[]){"ip", "a", "ip", "a", NULL});
    bad[1] = (sl_check_override){2, SL_UNIT_MINUTE};
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, bad, q.n, 1, 1000,
                                             &plan, err, sizeof err),
                     SL_EINVAL);
    assert_string_equal(err, "descriptors 1 and 2 override the limit of the same entries with "
                             "different limits");
    bad[1] = (sl_check_override){1, SL_UNIT_MINUTE}; /* the same: one counter, costs added */
    assert_int_equal(sl_check_plan_make_over(f->r, NULL, "api", 3, q.d, q.nd, bad, q.n, 1, 1000,
                                             &plan, err, sizeof err),
                     0);
    assert_int_equal(plan.items[1].lead, 0);
    assert_int_equal(plan.items[0].cost, 2);
}

/* Which limit the answer reports when several apply (docs/rules.md, "The
 * overall answer"): on equal remaining the one that resets last -- the one
 * the next request waits for -- and on equal retries the denial that resets
 * last; the overall delay is the longest queue the request joined.  Every
 * number is SPEC §2-3 worked by hand (windows aligned on t = 0). */
static void ties_and_delay(void **state)
{
    fx *f = *state;
    use(f,
        "domain: t\n"
        "descriptors:\n"
        "  - key: user\n"
        "    rate_limit:\n"
        "      - {window: 2s, requests_per_unit: 1}\n"
        "      - {window: 6s, requests_per_unit: 2}\n"
        "  - {key: a, rate_limit: {window: 2s, requests_per_unit: 1}}\n"
        "  - {key: b, rate_limit: {window: 6s, requests_per_unit: 2}}\n"
        "  - key: q\n"
        "    rate_limit:\n"
        "      - {window: 2s, requests_per_unit: 3}\n"
        "      - {algorithm: token-bucket, window: 1s, requests_per_unit: 1, burst: 3}\n"
        "  - {key: lb, rate_limit: {algorithm: leaky-bucket, window: 2s, requests_per_unit: 2,\n"
        "                           burst: 4}}\n"
        "  - {key: fw, rate_limit: {window: 2s, requests_per_unit: 1}}\n",
        0);
    /* one descriptor, 1 per 2 s and 2 per 6 s */
    CHECK_IN(f, "t", 1, 0, "user", "bob");
    overall_is(1, 1, 0, 0, 2000); /* 2 s: 1 left of the 6 s */
    status_is(0, SL_CHECK_OK, "t.user#1", 1, 0, 0, 2000);
    CHECK_IN(f, "t", 1, 2000, "user", "bob");
    /* both spent: the 6 s window holds the next request until t = 6000 */
    overall_is(1, 2, 0, 0, 4000);
    status_is(0, SL_CHECK_OK, "t.user#2", 2, 0, 0, 4000);
    CHECK_IN(f, "t", 1, 3000, "user", "bob");
    overall_is(0, 2, 0, 3000, 3000);
    assert_int_equal(ov.delay_ms, 0);
    /* two descriptors, one limit each: the same answers */
    CHECK_IN(f, "t", 1, 0, "a", "x", "b", "y");
    overall_is(1, 1, 0, 0, 2000);
    CHECK_IN(f, "t", 1, 2000, "a", "x", "b", "y");
    overall_is(1, 2, 0, 0, 4000);
    status_is(0, SL_CHECK_OK, "t.a", 1, 0, 0, 2000);
    status_is(1, SL_CHECK_OK, "t.b", 2, 0, 0, 4000);
    CHECK_IN(f, "t", 1, 3000, "a", "x", "b", "y");
    overall_is(0, 2, 0, 3000, 3000);
    status_is(0, SL_CHECK_OVER_LIMIT, "t.a", 1, 0, 1000, 1000);
    status_is(1, SL_CHECK_OVER_LIMIT, "t.b", 2, 0, 3000, 3000);

    /* 3 per 2 s (fixed) and a bucket of 3 refilled 1 a second, cost 3 at
     * t = 0: both 0 left; the window resets at 2000, the bucket at 3000 */
    CHECK_IN(f, "t", 3, 0, "q", "z");
    overall_is(1, 3, 0, 0, 3000);
    status_is(0, SL_CHECK_OK, "t.q#2", 3, 0, 0, 3000);
    /* cost 2 at t = 1000: both retry in 1000 (the window's end; the bucket's
     * second token); the bucket holds 1 and is full at 3000 */
    CHECK_IN(f, "t", 2, 1000, "q", "z");
    overall_is(0, 3, 1, 1000, 2000);
    status_is(0, SL_CHECK_OVER_LIMIT, "t.q#2", 3, 1, 1000, 2000);

    /* a leaky bucket of 4 drained 1 a second: the second request queues
     * behind 1 (1000 ms), the third behind 2 (2000 ms) */
    CHECK_IN(f, "t", 1, 0, "lb", "k");
    assert_int_equal(ov.delay_ms, 0);
    CHECK_IN(f, "t", 1, 0, "lb", "k");
    overall_is(1, 4, 2, 0, 2000);
    assert_int_equal(ov.delay_ms, 1000);
    /* with a fixed window that has less left: its numbers, the queue's delay */
    CHECK_IN(f, "t", 1, 0, "lb", "k", "fw", "k");
    overall_is(1, 1, 0, 0, 2000);
    status_is(0, SL_CHECK_OK, "t.lb", 4, 1, 0, 3000);
    assert_int_equal(ov.delay_ms, 2000);
    /* denied (the window): no delay */
    CHECK_IN(f, "t", 1, 0, "lb", "k", "fw", "k");
    overall_is(0, 1, 0, 2000, 2000);
    assert_int_equal(ov.delay_ms, 0);
}

/* ---- concurrency: N (docs/rules.md, "Concurrency") ----------------------- */

static const char conc_yaml[] =
    "domain: llm\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limit:\n"
    "      - {unit: minute, requests_per_unit: 3}\n"
    "      - {concurrency: 2, concurrency_ttl: 10s}\n"
    "  - key: db\n"
    "    rate_limit: {concurrency: 1}\n"
    "  - key: route\n"
    "    quota_mode: true\n"
    "    rate_limit: {concurrency: 1}\n";

static sl_check_plan cplan;

static int conc_plan(fx *f, sl_check_conc conc, int64_t cost, int64_t now,
                     const char *const *kv)
{
    req q;
    build(&q, kv);
    sl_check_input in = {.domain = "llm", .dlen = 3, .n = q.n, .descs = q.d, .ndesc = q.nd,
                         .cost = cost, .now_ms = now, .conc = conc};
    return sl_check_plan_build(f->r, &in, &cplan, err, sizeof err);
}
#define CONC_PLAN(f, conc, cost, now, ...) \
    conc_plan((f), (conc), (cost), (now), (const char *const[]){__VA_ARGS__, NULL})

/* The lease key, one lease per key, the three modes, the refusals. */
static void concurrency_plan(void **state)
{
    fx *f = *state;
    use(f, conc_yaml, 0);
    assert_int_equal(CONC_PLAN(f, SL_CHECK_CONC_REFUSE, 1, 0, "db", "x"), SL_EINVAL);
    assert_string_equal(err, "descriptor 1: rule llm.db has concurrency: 1, which only RL.CHECK "
                             "and /v1/check take leases for: forward-auth and replay cannot hand "
                             "a lease back (use RL.ACQUIRE beside it; docs/rules.md)");
    assert_int_equal(CONC_PLAN(f, SL_CHECK_CONC_LEASE, 1, 0, "route", "r"), SL_EINVAL);
    assert_string_equal(err, "descriptor 1: rule llm.route has concurrency: 1 in quota_mode, "
                             "which RL.CHECK does not take leases for (docs/rules.md)");
    /* LEASE: the counting key and "|conc"; the same key twice is one lease */
    assert_int_equal(CONC_PLAN(f, SL_CHECK_CONC_LEASE, 1, 0, "user", "a|b", "db", "x", "user",
                               "a|b"), 0);
    assert_int_equal(cplan.nleases, 3);
    assert_int_equal(cplan.nitems, 2); /* the rpm, twice: one counter */
    assert_int_equal(cplan.leases[0].keylen, strlen("llm|user=a%7Cb|conc"));
    assert_memory_equal(cplan.leases[0].key, "llm|user=a%7Cb|conc", cplan.leases[0].keylen);
    assert_memory_equal(cplan.leases[1].key, "llm|db=x|conc", cplan.leases[1].keylen);
    assert_int_equal(cplan.leases[2].lead, 0);
    assert_string_equal(cplan.lim[0].name, "llm.user#concurrency");
    assert_int_equal(cplan.lim[0].params.limit, 2);
    assert_int_equal(cplan.lim[0].params.window_ms, 10000);
    assert_int_equal(cplan.lim[1].params.window_ms, SL_DEFAULT_LEASE_TTL_MS);
    /* RATES (gRPC): no lease; a concurrency limit alone is no rule */
    assert_int_equal(CONC_PLAN(f, SL_CHECK_CONC_RATES, 1, 0, "user", "a", "db", "x"), 0);
    assert_int_equal(cplan.nleases, 0);
    assert_int_equal(cplan.nitems, 1);
    assert_int_equal(cplan.pre[1].code, SL_CHECK_NO_RULE);
    /* long keys: SL_MAX_KEY bytes, "|conc#~" and 64 hex digits, whether
     * the counting key took the digest form (600 bytes) or not (a key of
     * 510 bytes, which the suffix would push past SL_MAX_KEY) */
    static char v[601];
    static const size_t lens[2] = {600, 501};
    for (int t = 0; t < 2; t++) {
        size_t len = lens[t];
        memset(v, 'v', sizeof v);
        v[len] = '\0';
        assert_int_equal(CONC_PLAN(f, SL_CHECK_CONC_LEASE, 1, 0, "user", v), 0);
        assert_int_equal(cplan.leases[0].keylen, SL_MAX_KEY);
        assert_memory_equal(cplan.leases[0].key + SL_RULES_KEY_PREFIX - 5, "|conc#~", 7);
        assert_memory_equal(cplan.leases[0].key, "llm|user=vvv", 12);
        /* not the rate counter's key, nor the other length's */
        assert_true(cplan.items[0].keylen != SL_MAX_KEY ||
                    memcmp(cplan.leases[0].key, cplan.items[0].key, SL_MAX_KEY) != 0);
    }
}

/* One RL.CHECK through the local backend (its holds table). */
static sl_check_outcome cout;
static sl_check_status cst[4];
static sl_result cov;

static void conc_done(sl_breq *rq) { (void)rq; }

#define CONC_RUN(b, f, cost, now, ...)                                                            \
    do {                                                                                          \
        assert_int_equal(conc_plan((f), SL_CHECK_CONC_LEASE, (cost), (now),                      \
                                   (const char *const[]){__VA_ARGS__, NULL}),                     \
                         0);                                                                      \
        sl_breq rq_;                                                                              \
        memset(&rq_, 0, sizeof rq_);                                                              \
        rq_.op = SL_BOP_CHECK;                                                                    \
        rq_.now_ms = (now);                                                                       \
        rq_.plan = &cplan;                                                                        \
        rq_.outcome = &cout;                                                                      \
        rq_.cb = conc_done;                                                                       \
        sl_backend_submit(sl_backend_channel((b), NULL), &rq_);                                   \
        assert_int_equal(rq_.rc, 0);                                                              \
        sl_check_report(&cplan, &cout, &cov, cst);                                                \
    } while (0)

/* All or none: the third in flight is denied and charges no rate; a rate
 * denial keeps no lease; cost 0 looks and keeps nothing. */
static void concurrency_exec(void **state)
{
    fx *f = *state;
    use(f, conc_yaml, 0);
    sl_backend *b = sl_backend_local_new(f->s);
    assert_non_null(b);
    CONC_RUN(b, f, 1, 0, "user", "u");
    assert_true(cov.allowed);
    uint64_t id1 = cout.lid[0];
    assert_true(id1 != 0);
    CONC_RUN(b, f, 1, 100, "user", "u");
    assert_true(cov.allowed && cout.lid[0] != 0 && cout.lid[0] != id1);
    CONC_RUN(b, f, 1, 200, "user", "u"); /* the third: denied by the lease */
    assert_false(cov.allowed);
    assert_int_equal(cout.lid[0], 0);
    assert_int_equal(cst[0].code, SL_CHECK_OVER_LIMIT);
    assert_string_equal(cst[0].name, "llm.user#concurrency");
    assert_int_equal(cov.retry_after_ms, 9800); /* the oldest lease, taken at 0 */
    assert_int_equal(cov.reset_after_ms, 9900);
    /* the rpm was not charged: after a release, the next is its 3rd of 3 */
    sl_bchan *ch = sl_backend_channel(b, NULL);
    sl_breq rel;
    memset(&rel, 0, sizeof rel);
    rel.op = SL_BOP_RELEASE;
    rel.key = "llm|user=u|conc";
    rel.keylen = strlen(rel.key);
    rel.hold_id = id1;
    rel.now_ms = 300;
    rel.cb = conc_done;
    sl_backend_submit(ch, &rel);
    assert_int_equal(rel.existed, 1);
    CONC_RUN(b, f, 1, 300, "user", "u");
    assert_true(cov.allowed);
    assert_int_equal(cout.res[0].remaining, 0);
    rel.hold_id = cout.lid[0];
    sl_backend_submit(ch, &rel);
    assert_int_equal(rel.existed, 1);
    /* a 4th: denied by the rpm, its lease given back (one held) */
    CONC_RUN(b, f, 1, 400, "user", "u");
    assert_false(cov.allowed);
    assert_int_equal(cout.lid[0], 0);
    assert_int_equal(cst[0].code, SL_CHECK_OVER_LIMIT);
    assert_string_equal(cst[0].name, "llm.user");
    /* cost 0 looks: one held, so a take would leave 0; nothing kept */
    CONC_RUN(b, f, 0, 500, "user", "u");
    assert_int_equal(cout.lres[0].remaining, 0);
    assert_true(cout.lres[0].allowed);
    assert_int_equal(cout.lid[0], 0);
    CONC_RUN(b, f, 0, 500, "user", "u"); /* and the same again: the look kept nothing */
    assert_int_equal(cout.lres[0].remaining, 0);
    assert_true(cout.lres[0].allowed);
    sl_backend_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(several_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(denied_charges_nobody, setup, teardown),
        cmocka_unit_test_setup_teardown(shadow, setup, teardown),
        cmocka_unit_test_setup_teardown(soft, setup, teardown),
        cmocka_unit_test_setup_teardown(unlimited_and_no_rule, setup, teardown),
        cmocka_unit_test_setup_teardown(zero_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(repeated_counter, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(elastic, setup, teardown),
        cmocka_unit_test_setup_teardown(replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(share_threshold, setup, teardown),
        cmocka_unit_test_setup_teardown(quota_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(count_denied, setup, teardown),
        cmocka_unit_test_setup_teardown(plan_metric_nodes, setup, teardown),
        cmocka_unit_test_setup_teardown(limit_override, setup, teardown),
        cmocka_unit_test_setup_teardown(ties_and_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrency_exec, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
