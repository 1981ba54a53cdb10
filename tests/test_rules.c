/*
 * test_rules.c -- the rules loader and matcher (src/rules/rules.c): Lyft
 * ratelimit's documented examples, loaded from the README's YAML and
 * matched as the README says; each sluice extension in the model; the
 * matching order; counting keys and ip_prefix; every kind of bad file
 * giving FILE:LINE:COLUMN and what is wrong; directories, and every kind of
 * entry that cannot be read (a dangling link, a FIFO, ...) refusing the load.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "check.h"
#include "rules.h"
#include "sluice.h"

static char err[1024];

static sl_rules *load(const char *yaml)
{
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (r == NULL) fail_msg("load failed: %s", err);
    assert_string_equal(err, "");
    return r;
}

/* The request (k1, v1), (k2, v2)... given as a NULL-terminated list. */
static int entries(sl_rule_entry *e, const char *const *kv)
{
    int n = 0;
    for (; kv[2 * n]; n++) {
        e[n].key = kv[2 * n];
        e[n].keylen = strlen(kv[2 * n]);
        e[n].value = kv[2 * n + 1];
        e[n].valuelen = strlen(kv[2 * n + 1]);
    }
    return n;
}

static const sl_rule_node *match_kv(const sl_rules *r, const char *dom, const char *const *kv)
{
    sl_rule_entry e[SL_RULES_MAX_DEPTH + 1];
    int n = entries(e, kv);
    return sl_rules_match(r, dom, strlen(dom), e, n);
}
#define MATCH(r, dom, ...) match_kv((r), (dom), (const char *const[]){__VA_ARGS__, NULL})

/* A request kv matched in dom (it must match), with a string buffer for
 * what the caller builds from it: one of four, so a test may hold a few. */
typedef struct {
    sl_rule_entry e[SL_RULES_MAX_DEPTH + 1];
    int n;
    const sl_rule_node *node;
    char *buf;
} matched;

static void match_into(matched *m, const sl_rules *r, const char *dom, const char *const *kv)
{
    static char bufs[4][SL_MAX_KEY + 1];
    static int turn;
    m->buf = bufs[turn++ % 4];
    m->n = entries(m->e, kv);
    m->node = sl_rules_match(r, dom, strlen(dom), m->e, m->n);
    assert_non_null(m->node);
}

/* The counting key of limit `lim` of the node matched by kv, as a string. */
static const char *key_kv(const sl_rules *r, const char *dom, int lim, const char *const *kv)
{
    matched m;
    match_into(&m, r, dom, kv);
    size_t len = 0;
    assert_int_equal(sl_rules_key(m.node, m.e, m.n, lim, m.buf, SL_MAX_KEY, &len), 0);
    m.buf[len] = '\0';
    return m.buf;
}
#define KEY(r, dom, lim, ...) key_kv((r), (dom), (lim), (const char *const[]){__VA_ARGS__, NULL})

/* The limit L of the only limit of the node. */
static int64_t L(const sl_rule_node *n)
{
    assert_non_null(n);
    assert_int_equal(n->nlimits, 1);
    return n->limits[0].params.limit;
}

/* ---- Lyft's README, "Examples" ------------------------------------------- */

static void lyft_example_1(void **state)
{
    (void)state;
    sl_rules *r = load("domain: mongo_cps\n"
                       "descriptors:\n"
                       "  - key: database\n"
                       "    value: users\n"
                       "    rate_limit:\n"
                       "      unit: second\n"
                       "      requests_per_unit: 500\n"
                       "\n"
                       "  - key: database\n"
                       "    value: default\n"
                       "    rate_limit:\n"
                       "      unit: second\n"
                       "      requests_per_unit: 500\n");
    const sl_rule_node *n = MATCH(r, "mongo_cps", "database", "users");
    assert_int_equal(L(n), 500);
    assert_int_equal(n->limits[0].params.window_ms, 1000);
    assert_int_equal(n->limits[0].params.algo, SL_FIXED_WINDOW); /* Lyft's only algorithm */
    assert_int_equal(n->limits[0].unit, SL_UNIT_SECOND);
    assert_string_equal(n->path, "mongo_cps.database_users");
    assert_string_equal(n->limits[0].name, "mongo_cps.database_users");
    assert_int_equal(L(MATCH(r, "mongo_cps", "database", "default")), 500);
    assert_null(MATCH(r, "mongo_cps", "database", "other")); /* no key-only rule */
    assert_null(MATCH(r, "other_domain", "database", "users"));
    assert_string_equal(KEY(r, "mongo_cps", 0, "database", "users"), "mongo_cps|database=users");
    sl_rules_free(r);
}

static void lyft_example_2(void **state)
{
    (void)state;
    sl_rules *r = load("domain: messaging\n"
                       "descriptors:\n"
                       "  # Only allow 5 marketing messages a day\n"
                       "  - key: message_type\n"
                       "    value: marketing\n"
                       "    descriptors:\n"
                       "      - key: to_number\n"
                       "        rate_limit:\n"
                       "          unit: day\n"
                       "          requests_per_unit: 5\n"
                       "\n"
                       "  # Only allow 100 messages a day to any unique phone number\n"
                       "  - key: to_number\n"
                       "    rate_limit:\n"
                       "      unit: day\n"
                       "      requests_per_unit: 100\n");
    /* ("message_type", "marketing"), ("to_number", N): 5 a day per number */
    const sl_rule_node *n =
        MATCH(r, "messaging", "message_type", "marketing", "to_number", "2061111111");
    assert_int_equal(L(n), 5);
    assert_int_equal(n->limits[0].params.window_ms, 86400000);
    assert_ptr_equal(n,
                     MATCH(r, "messaging", "message_type", "marketing", "to_number", "2062222222"));
    assert_string_equal(n->path, "messaging.message_type_marketing.to_number");
    assert_string_equal(
        KEY(r, "messaging", 0, "message_type", "marketing", "to_number", "2061111111"),
        "messaging|message_type=marketing|to_number=2061111111");
    assert_string_equal(
        KEY(r, "messaging", 0, "message_type", "marketing", "to_number", "2062222222"),
        "messaging|message_type=marketing|to_number=2062222222");
    /* the placeholder has no limit of its own */
    assert_null(MATCH(r, "messaging", "message_type", "marketing"));
    /* ("to_number", N): 100 a day for any number */
    assert_int_equal(L(MATCH(r, "messaging", "to_number", "2061111111")), 100);
    assert_string_equal(KEY(r, "messaging", 0, "to_number", "2061111111"),
                        "messaging|to_number=2061111111");
    assert_null(MATCH(r, "messaging", "message_type", "transactional", "to_number", "1"));
    sl_rules_free(r);
}

static void lyft_example_3(void **state)
{
    (void)state;
    sl_rules *r = load("domain: edge_proxy_per_ip\n"
                       "descriptors:\n"
                       "  - key: remote_address\n"
                       "    rate_limit:\n"
                       "      unit: second\n"
                       "      requests_per_unit: 10\n"
                       "\n"
                       "  # Black list IP\n"
                       "  - key: remote_address\n"
                       "    value: 50.0.0.5\n"
                       "    rate_limit:\n"
                       "      unit: second\n"
                       "      requests_per_unit: 0\n");
    assert_int_equal(L(MATCH(r, "edge_proxy_per_ip", "remote_address", "50.0.0.1")), 10);
    /* the most specific match: key and value before key only, whatever the order */
    const sl_rule_node *n = MATCH(r, "edge_proxy_per_ip", "remote_address", "50.0.0.5");
    assert_int_equal(L(n), 0); /* nothing passes */
    assert_int_equal(n->match, SL_MATCH_EXACT);
    sl_rules_free(r);
}

static void lyft_example_4(void **state)
{
    (void)state;
    /* a request with two entries does not match a one-level rule */
    sl_rules *r = load("domain: example4\n"
                       "descriptors:\n"
                       "  - key: key\n"
                       "    value: value\n"
                       "    rate_limit:\n"
                       "      requests_per_unit: 300\n"
                       "      unit: second\n");
    assert_null(MATCH(r, "example4", "key", "value", "subkey", "subvalue"));
    assert_int_equal(L(MATCH(r, "example4", "key", "value")), 300);
    sl_rules_free(r);
    /* but it matches the two-level one */
    r = load("domain: example4\n"
             "descriptors:\n"
             "  - key: key\n"
             "    value: value\n"
             "    descriptors:\n"
             "      - key: subkey\n"
             "        rate_limit:\n"
             "          requests_per_unit: 300\n"
             "          unit: second\n");
    assert_int_equal(L(MATCH(r, "example4", "key", "value", "subkey", "subvalue")), 300);
    assert_null(MATCH(r, "example4", "key", "value"));
    sl_rules_free(r);
}

static void lyft_example_5(void **state)
{
    (void)state;
    sl_rules *r = load("domain: internal\n"
                       "descriptors:\n"
                       "  - key: ldap\n"
                       "    rate_limit:\n"
                       "      unlimited: true\n"
                       "\n"
                       "  - key: azure\n"
                       "    rate_limit:\n"
                       "      unit: minute\n"
                       "      requests_per_unit: 100\n");
    const sl_rule_node *n = MATCH(r, "internal", "ldap", "anything");
    assert_non_null(n);
    assert_int_equal(n->nlimits, 1);
    assert_true(n->limits[0].unlimited);
    assert_int_equal(L(MATCH(r, "internal", "azure", "x")), 100);
    assert_int_equal(MATCH(r, "internal", "azure", "x")->limits[0].params.window_ms, 60000);
    char buf[64];
    sl_rules_limit_format(&n->limits[0], buf, sizeof buf);
    assert_string_equal(buf, "unlimited");
    sl_rules_free(r);
}

static void lyft_example_6(void **state)
{
    (void)state;
    sl_rules *r = load("domain: example6\n"
                       "descriptors:\n"
                       "  - key: service\n"
                       "    descriptors:\n"
                       "      - key: user\n"
                       "        value: user-a\n"
                       "        rate_limit:\n"
                       "          requests_per_unit: 10\n"
                       "          unit: second\n"
                       "        shadow_mode: true\n"
                       "      - key: user\n"
                       "        value: user-b\n"
                       "        rate_limit:\n"
                       "          requests_per_unit: 20\n"
                       "          unit: second\n");
    const sl_rule_node *a = MATCH(r, "example6", "service", "auth-service", "user", "user-a");
    const sl_rule_node *b = MATCH(r, "example6", "service", "auth-service", "user", "user-b");
    assert_int_equal(L(a), 10);
    assert_true(a->shadow_mode); /* counted, never limited */
    assert_int_equal(L(b), 20);
    assert_false(b->shadow_mode);
    assert_null(MATCH(r, "example6", "service", "auth-service", "user", "user-c"));
    sl_rules_free(r);
}

static void lyft_example_7(void **state)
{
    (void)state;
    sl_rules *r = load("domain: example7\n"
                       "descriptors:\n"
                       "  - key: key_1\n"
                       "    value: value_1\n"
                       "    descriptors:\n"
                       "      - key: user\n"
                       "        value: bkthomps\n"
                       "        rate_limit:\n"
                       "          name: specific_limit\n"
                       "          requests_per_unit: 5\n"
                       "          unit: second\n"
                       "  - key: key_2\n"
                       "    value: value_2\n"
                       "    descriptors:\n"
                       "      - key: user\n"
                       "        value: bkthomps\n"
                       "        rate_limit:\n"
                       "          replaces:\n"
                       "            - name: specific_limit\n"
                       "          requests_per_unit: 10\n"
                       "          unit: second\n");
    const sl_rule_node *a = MATCH(r, "example7", "key_1", "value_1", "user", "bkthomps");
    const sl_rule_node *b = MATCH(r, "example7", "key_2", "value_2", "user", "bkthomps");
    assert_int_equal(L(a), 5);
    assert_string_equal(a->limits[0].name, "specific_limit");
    assert_true(a->limits[0].named);
    assert_int_equal(L(b), 10);
    assert_int_equal(b->limits[0].nreplaces, 1);
    assert_string_equal(b->limits[0].replaces[0], "specific_limit");
    assert_false(b->limits[0].named);
    assert_string_equal(b->limits[0].name, "example7.key_2_value_2.user_bkthomps");
    sl_rules_free(r);
}

static void lyft_example_8(void **state)
{
    (void)state;
    sl_rules *r = load("domain: example8\n"
                       "descriptors:\n"
                       "  - key: key1\n"
                       "    detailed_metric: true\n"
                       "    rate_limit:\n"
                       "      unit: minute\n"
                       "      requests_per_unit: 10\n"
                       "  - key: key1\n"
                       "    value: value1\n"
                       "    rate_limit:\n"
                       "      unit: minute\n"
                       "      requests_per_unit: 20\n");
    const sl_rule_node *n = MATCH(r, "example8", "key1", "unspecified_value");
    assert_int_equal(L(n), 10);
    assert_true(n->detailed_metric);
    assert_ptr_equal(n, MATCH(r, "example8", "key1", "unspecified_value2"));
    assert_int_equal(L(MATCH(r, "example8", "key1", "value1")), 20);
    sl_rules_free(r);
}

static void lyft_example_9(void **state)
{
    (void)state;
    sl_rules *r = load("domain: example9\n"
                       "descriptors:\n"
                       "  - key: key1\n"
                       "    value: value*\n"
                       "    rate_limit:\n"
                       "      unit: minute\n"
                       "      requests_per_unit: 20\n");
    const sl_rule_node *n = MATCH(r, "example9", "key1", "value_1");
    assert_int_equal(L(n), 20);
    assert_int_equal(n->match, SL_MATCH_WILDCARD);
    assert_int_equal(n->valuelen, 6);
    assert_string_equal(n->value, "value*");
    assert_string_equal(n->path, "example9.key1_value*");
    assert_ptr_equal(n, MATCH(r, "example9", "key1", "value_2"));
    assert_ptr_equal(n, MATCH(r, "example9", "key1", "value"));
    assert_null(MATCH(r, "example9", "key1", "valu"));
    assert_null(MATCH(r, "example9", "key1", "other"));
    /* each value is counted on its own: 20 for value_1, 20 for value_2 */
    assert_string_equal(KEY(r, "example9", 0, "key1", "value_1"), "example9|key1=value_1");
    assert_string_equal(KEY(r, "example9", 0, "key1", "value_2"), "example9|key1=value_2");
    sl_rules_free(r);
}

/* ---- sluice's extensions --------------------------------------------------- */

static const char extensions_yaml[] =
    "domain: api\n"
    "descriptors:\n"
    "  - key: user                     # 10 a minute AND 500 an hour\n"
    "    rate_limit:\n"
    "      - unit: minute\n"
    "        requests_per_unit: 10\n"
    "      - unit: hour\n"
    "        requests_per_unit: 500\n"
    "  - key: path\n"
    "    value: /login\n"
    "    rate_limit:\n"
    "      algorithm: token-bucket\n"
    "      window: 90s\n"
    "      requests_per_unit: 30\n"
    "      burst: 45\n"
    "  - key: path\n"
    "    value: /search\n"
    "    rate_limit:\n"
    "      algorithm: sliding-buckets\n"
    "      window: 1m\n"
    "      precision: 60\n"
    "      requests_per_unit: 100\n"
    "      soft: 10%\n"
    "  - key: tenant\n"
    "    rate_limit: {unit: second, requests_per_unit: 100, elastic: 300}\n"
    "  - key: team\n"
    "    rate_limit: {unit: second, requests_per_unit: 100, elastic: 50%}\n"
    "  - key: remote_address\n"
    "    ip_prefix: 64\n"
    "    rate_limit: {unit: week, requests_per_unit: 7, name: per_ip}\n"
    "  - key: client\n"
    "    ip_prefix: {ipv4: 24, ipv6: 48}\n"
    "    rate_limit: {unit: month, requests_per_unit: 1000}\n"
    "  - key: yearly\n"
    "    rate_limit: {unit: YEAR, requests_per_unit: 0}\n";

static void extensions(void **state)
{
    (void)state;
    sl_rules *r = load(extensions_yaml);
    char buf[128];

    const sl_rule_node *n = MATCH(r, "api", "user", "bob");
    assert_non_null(n);
    assert_int_equal(n->nlimits, 2);
    assert_int_equal(n->limits[0].params.limit, 10);
    assert_int_equal(n->limits[0].params.window_ms, 60000);
    assert_int_equal(n->limits[1].params.limit, 500);
    assert_int_equal(n->limits[1].params.window_ms, 3600000);
    assert_string_equal(n->limits[0].name, "api.user#1");
    assert_string_equal(n->limits[1].name, "api.user#2");
    /* two limits, two counters */
    assert_string_equal(KEY(r, "api", 0, "user", "bob"), "api|user=bob#60000");
    assert_string_equal(KEY(r, "api", 1, "user", "bob"), "api|user=bob#3600000");
    assert_string_equal(KEY(r, "api", -1, "user", "bob"), "api|user=bob");

    n = MATCH(r, "api", "path", "/login");
    const sl_rule_limit *l = &n->limits[0];
    assert_int_equal(l->params.algo, SL_TOKEN_BUCKET);
    assert_int_equal(l->params.window_ms, 90000);
    assert_int_equal(l->params.limit, 30);
    assert_int_equal(l->params.burst, 45);
    assert_int_equal(l->unit, SL_UNIT_NONE);
    sl_rules_limit_format(l, buf, sizeof buf);
    assert_string_equal(buf, "30/90s token-bucket burst=45");

    l = &MATCH(r, "api", "path", "/search")->limits[0];
    assert_int_equal(l->params.algo, SL_SLIDING_BUCKETS);
    assert_int_equal(l->params.precision, 60);
    assert_int_equal(l->soft_pct, 10);
    assert_int_equal(l->soft_limit, 110);
    sl_rules_limit_format(l, buf, sizeof buf);
    assert_string_equal(buf, "100/1m sliding-buckets precision=60 soft=10%");

    l = &MATCH(r, "api", "tenant", "t1")->limits[0];
    assert_int_equal(l->elastic_limit, 300);
    assert_int_equal(l->elastic_pct, 0);
    assert_int_equal(l->soft_limit, 100); /* hard */
    l = &MATCH(r, "api", "team", "t1")->limits[0];
    assert_int_equal(l->elastic_limit, 150);
    assert_int_equal(l->elastic_pct, 50);
    sl_rules_limit_format(l, buf, sizeof buf);
    assert_string_equal(buf, "100/second fixed-window elastic=50%(150)");

    n = MATCH(r, "api", "remote_address", "::1");
    assert_int_equal(n->ip6_prefix, 64);
    assert_int_equal(n->ip4_prefix, 32);
    assert_string_equal(n->limits[0].name, "per_ip");
    assert_int_equal(n->limits[0].params.window_ms, 7 * 86400000LL);
    n = MATCH(r, "api", "client", "x");
    assert_int_equal(n->ip4_prefix, 24);
    assert_int_equal(n->ip6_prefix, 48);
    assert_int_equal(n->limits[0].params.window_ms, 30 * 86400000LL); /* Lyft: 30 days */
    n = MATCH(r, "api", "yearly", "x");
    assert_int_equal(n->limits[0].params.window_ms, 365 * 86400000LL); /* Lyft: 365 days */
    assert_int_equal(n->limits[0].unit, SL_UNIT_YEAR);                 /* any case */
    assert_int_equal(n->limits[0].params.limit, 0);

    assert_int_equal(sl_rules_ndomains(r), 1);
    assert_int_equal(sl_rules_count(r), 8);
    assert_string_equal(sl_rules_domain(r, 0)->name, "api");
    assert_string_equal(sl_rules_domain(r, 0)->file, "t.yaml");
    assert_string_equal(sl_rules_source(r), "t.yaml");
    sl_rules_free(r);
}

/* Anchors and aliases are YAML, so Lyft files may use them. */
static void aliases(void **state)
{
    (void)state;
    sl_rules *r = load("domain: a\n"
                       "descriptors:\n"
                       "  - key: x\n"
                       "    rate_limit: &std {unit: second, requests_per_unit: 7}\n"
                       "  - key: y\n"
                       "    rate_limit: *std\n");
    assert_int_equal(L(MATCH(r, "a", "x", "1")), 7);
    assert_int_equal(L(MATCH(r, "a", "y", "1")), 7);
    sl_rules_free(r);
}

/* ---- matching ------------------------------------------------------------ */

static void match_order(void **state)
{
    (void)state;
    sl_rules *r = load("domain: prio\n"
                       "descriptors:\n"
                       "  - key: path\n"
                       "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                       "  - key: path\n"
                       "    value: /api/*\n"
                       "    rate_limit: {unit: second, requests_per_unit: 2}\n"
                       "  - key: path\n"
                       "    value: /api/v2/*\n"
                       "    rate_limit: {unit: second, requests_per_unit: 3}\n"
                       "  - key: path\n"
                       "    value: /api/v2/users\n"
                       "    rate_limit: {unit: second, requests_per_unit: 4}\n"
                       "  - key: method\n"
                       "    value: '*'\n"
                       "    rate_limit: {unit: second, requests_per_unit: 5}\n");
    assert_int_equal(L(MATCH(r, "prio", "path", "/api/v2/users")), 4);  /* exact */
    /* the first wildcard in file order wins, as in Lyft: value 2 comes before 3 */
    assert_int_equal(L(MATCH(r, "prio", "path", "/api/v2/orders")), 2);
    assert_int_equal(L(MATCH(r, "prio", "path", "/api/v1/users")), 2);
    assert_int_equal(L(MATCH(r, "prio", "path", "/api/")), 2);
    assert_int_equal(L(MATCH(r, "prio", "path", "/api")), 1); /* key only */
    assert_int_equal(L(MATCH(r, "prio", "path", "")), 1);
    assert_int_equal(L(MATCH(r, "prio", "method", "GET")), 5); /* '*' alone: any value */
    assert_int_equal(L(MATCH(r, "prio", "method", "")), 5);
    assert_null(MATCH(r, "prio", "Path", "/api")); /* keys are case-sensitive */
    assert_null(MATCH(r, "prio", "path", "/api", "path", "/api"));
    assert_null(match_kv(r, "prio", (const char *const[]){NULL}));
    sl_rules_free(r);
}

/* Lyft walks greedily: once a level matched exactly, the walk does not come
 * back to try the key-only sibling. */
static void match_no_backtracking(void **state)
{
    (void)state;
    sl_rules *r = load("domain: greedy\n"
                       "descriptors:\n"
                       "  - key: a\n"
                       "    value: x\n"
                       "    descriptors:\n"
                       "      - key: b\n"
                       "        value: '1'\n"
                       "        rate_limit: {unit: second, requests_per_unit: 1}\n"
                       "  - key: a\n"
                       "    rate_limit: {unit: second, requests_per_unit: 3}\n"
                       "    descriptors:\n"
                       "      - key: b\n"
                       "        rate_limit: {unit: second, requests_per_unit: 2}\n");
    assert_int_equal(L(MATCH(r, "greedy", "a", "x", "b", "1")), 1);
    assert_null(MATCH(r, "greedy", "a", "x", "b", "2"));
    assert_int_equal(L(MATCH(r, "greedy", "a", "y", "b", "2")), 2);
    assert_null(MATCH(r, "greedy", "a", "x")); /* a=x has no limit of its own */
    assert_int_equal(L(MATCH(r, "greedy", "a", "y")), 3);
    sl_rules_free(r);
}

/* ---- counting keys ------------------------------------------------------- */

static void counting_keys(void **state)
{
    (void)state;
    sl_rules *r = load("domain: d\n"
                       "descriptors:\n"
                       "  - key: user\n"
                       "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                       "  - key: 'k|='\n"
                       "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    /* a key-only rule counts each value on its own */
    assert_string_equal(KEY(r, "d", 0, "user", "alice"), "d|user=alice");
    assert_string_equal(KEY(r, "d", 0, "user", "bob"), "d|user=bob");
    /* separators in parts are escaped: no two requests share a key */
    assert_string_equal(KEY(r, "d", 0, "user", "a|b=c%d#e"), "d|user=a%7Cb%3Dc%25d%23e");
    assert_string_equal(KEY(r, "d", 0, "k|=", "v"), "d|k%7C%3D=v");

    sl_rule_entry e[2];
    char big[600], buf[SL_MAX_KEY];
    size_t len;
    memset(big, 'x', sizeof big);
    const char *kv[] = {"user", "v", NULL};
    entries(e, kv);
    const sl_rule_node *n = sl_rules_match(r, "d", 1, e, 1);
    assert_non_null(n);
    e[0].value = big; /* 600 bytes: longer than SL_MAX_KEY */
    e[0].valuelen = sizeof big;
    assert_ptr_equal(sl_rules_match(r, "d", 1, e, 1), n);
    /* longer than SL_MAX_KEY: the digest form (check.h, "Long keys") */
    assert_int_equal(sl_rules_key(n, e, 1, 0, buf, sizeof buf, &len), 0);
    assert_int_equal(len, SL_MAX_KEY);
    assert_memory_equal(buf + SL_RULES_KEY_PREFIX, "#~", 2);
    e[0].valuelen = SL_MAX_KEY - strlen("d|user="); /* exactly SL_MAX_KEY */
    assert_int_equal(sl_rules_key(n, e, 1, 0, buf, sizeof buf, &len), 0);
    assert_int_equal(len, SL_MAX_KEY);
    assert_int_equal(sl_rules_key(n, e, 1, 0, buf, 100, &len), SL_EKEY); /* small buffer */
    assert_int_equal(sl_rules_key(n, e, 2, 0, buf, sizeof buf, &len), SL_EINVAL);
    assert_int_equal(sl_rules_key(n, e, 1, 1, buf, sizeof buf, &len), SL_EINVAL);
    e[0].key = "usr";
    assert_int_equal(sl_rules_key(n, e, 1, 0, buf, sizeof buf, &len), SL_EINVAL);
    sl_rules_free(r);
}

static void ip_prefix(void **state)
{
    (void)state;
    sl_rules *r = load("domain: ip\n"
                       "descriptors:\n"
                       "  - key: remote_address\n"
                       "    ip_prefix: 64\n"
                       "    rate_limit: {unit: second, requests_per_unit: 10}\n"
                       "  - key: client\n"
                       "    ip_prefix: {ipv4: 24, ipv6: 56}\n"
                       "    descriptors:\n"
                       "      - key: path\n"
                       "        rate_limit: {unit: second, requests_per_unit: 10}\n"
                       "  - key: v6only\n"
                       "    ip_prefix: {ipv6: 64}\n"
                       "    rate_limit: {unit: second, requests_per_unit: 10}\n");
    /* a whole /64 is one key: one host cannot make a million */
    const char *k1 = KEY(r, "ip", 0, "remote_address", "2001:db8:1:2::1");
    const char *k2 = KEY(r, "ip", 0, "remote_address", "2001:db8:1:2:ffff::9");
    assert_string_equal(k1, "ip|remote_address=2001:db8:1:2::");
    assert_string_equal(k2, k1);
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "2001:DB8:1:2:0:0:0:7"), k1);
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "2001:db8:1:3::1"),
                        "ip|remote_address=2001:db8:1:3::");
    /* an integer prefix past 32 leaves IPv4 addresses whole */
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "192.0.2.77"),
                        "ip|remote_address=192.0.2.77");
    /* values that are not IP addresses count as they are */
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "unknown"), "ip|remote_address=unknown");
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "fe80::1%eth0"),
                        "ip|remote_address=fe80::1%25eth0");
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "1.2.3"), "ip|remote_address=1.2.3");
    /* IPv4 /24, on a level above the one with the limit */
    assert_string_equal(KEY(r, "ip", 0, "client", "192.0.2.1", "path", "/"),
                        "ip|client=192.0.2.0|path=/");
    assert_string_equal(KEY(r, "ip", 0, "client", "192.0.2.200", "path", "/"),
                        "ip|client=192.0.2.0|path=/");
    assert_string_equal(KEY(r, "ip", 0, "client", "192.0.3.1", "path", "/"),
                        "ip|client=192.0.3.0|path=/");
    assert_string_equal(KEY(r, "ip", 0, "client", "::ffff:192.0.2.9", "path", "/"),
                        "ip|client=192.0.2.0|path=/"); /* IPv4-mapped counts as IPv4 */
    assert_string_equal(KEY(r, "ip", 0, "client", "2001:db8:aa:bbcc::1", "path", "/"),
                        "ip|client=2001:db8:aa:bb00::|path=/");
    /* a family without a prefix is left as is */
    assert_string_equal(KEY(r, "ip", 0, "v6only", "192.0.2.1"), "ip|v6only=192.0.2.1");
    /* IPv4 keys are written as inet_ntop writes them: every byte value */
    for (unsigned b = 0; b < 256; b++) {
        char ip[32], want[64];
        snprintf(ip, sizeof ip, "%u.%u.%u.%u", b, 255 - b, b / 10, b % 100);
        snprintf(want, sizeof want, "ip|remote_address=%s", ip);
        assert_string_equal(KEY(r, "ip", 0, "remote_address", ip), want);
    }
    assert_string_equal(KEY(r, "ip", 0, "remote_address", "010.1.1.1"),
                        "ip|remote_address=010.1.1.1"); /* not an address to inet_pton */
    sl_rules_free(r);
}

/* ---- bad files ------------------------------------------------------------ */

/* Loading yaml must fail with a message starting with `where` (FILE:LINE:
 * COLUMN:) and containing `what`. */
static void expect_error_n(const char *yaml, size_t len, const char *where, const char *what)
{
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, len, err, sizeof err);
    if (r != NULL) {
        sl_rules_free(r);
        fail_msg("loaded, expected \"%s ... %s\"", where, what);
    }
    if (strncmp(err, where, strlen(where)) != 0 || strstr(err, what) == NULL)
        fail_msg("error \"%s\", expected \"%s ... %s\"", err, where, what);
}

static void expect_error(const char *yaml, const char *where, const char *what)
{
    expect_error_n(yaml, strlen(yaml), where, what);
}

#define HEAD "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n"

static void bad_values(void **state)
{
    (void)state;
    expect_error(HEAD "      unit: minutes\n      requests_per_unit: 10\n", "t.yaml:5:13: ",
                 "unknown unit 'minutes' (expected second, minute, hour, day, week, month or "
                 "year)");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: -5\n",
                 "t.yaml:6:26: ", "negative requests_per_unit '-5'");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: 1.5\n", "t.yaml:6:26: ",
                 "requests_per_unit must be a whole number from 0 to 1000000000000, not '1.5'");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: \"10\"\n",
                 "t.yaml:6:26: ", "not the quoted string '10'");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: 1000000000001\n",
                 "t.yaml:6:26: ", "too large");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: 010\n",
                 "t.yaml:6:26: ", "leading zero");
    expect_error(HEAD "      unit: minute\n",
                 "t.yaml:5:7: ", "rate_limit has no requests_per_unit");
    expect_error(HEAD "      requests_per_unit: 1\n", "t.yaml:5:7: ",
                 "rate_limit needs a unit (second, minute, hour, day, week, month or year) or a "
                 "window");
    expect_error(HEAD "      unit: minute\n      window: 90s\n      requests_per_unit: 1\n",
                 "t.yaml:6:15: ", "give either unit or window, not both");
    expect_error(HEAD "      window: 90x\n      requests_per_unit: 1\n",
                 "t.yaml:5:15: ", "window must be a duration");
    expect_error(HEAD "      window: 90s\n      requests_per_unit: 1\n      algorithm: leaky\n",
                 "t.yaml:7:18: ", "unknown algorithm 'leaky' (expected fixed-window");
    expect_error(HEAD "      window: 90s\n      requests_per_unit: 1\n      burst: 5\n",
                 "t.yaml:7:14: ", "burst applies only to token-bucket, gcra and leaky-bucket");
    expect_error(HEAD "      window: 1000ms\n      requests_per_unit: 1\n"
                      "      algorithm: sliding-buckets\n      precision: 7\n",
                 "t.yaml:8:18: ", "not a multiple of the precision 7");
    expect_error(HEAD "      window: 1s\n      requests_per_unit: 1\n      precision: 10\n",
                 "t.yaml:7:18: ", "precision applies only to sliding-buckets");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n      soft: 10\n",
                 "t.yaml:7:13: ", "soft must be a percentage from 0% to 1000%");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n      soft: 1001%\n",
                 "t.yaml:7:13: ", "soft must be a percentage");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n      elastic: 10\n",
                 "t.yaml:7:16: ", "elastic ceiling 10 must be above the limit 10");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n      elastic: 1%\n",
                 "t.yaml:7:16: ", "elastic 1% adds nothing to a limit of 10");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n      soft: 5%\n"
                      "      elastic: 20\n",
                 "t.yaml:8:16: ", "soft and elastic cannot be combined");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n"
                      "      algorithm: token-bucket\n      elastic: 20\n",
                 "t.yaml:8:16: ", "elastic needs an algorithm that counts requests in a window "
                                  "(fixed-window, sliding-window, sliding-log, sliding-buckets), "
                                  "not token-bucket");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 10\n"
                      "      elastic: 1000000000001\n",
                 "t.yaml:7:16: ", "elastic '1000000000001' is too large (at most 1000000000000)");
    expect_error(HEAD "      unlimited: true\n      unit: second\n",
                 "t.yaml:6:13: ", "unit must not be given with unlimited: true");
    expect_error(HEAD "      unlimited: true\n      window: 1s\n",
                 "t.yaml:6:15: ", "window cannot be combined with unlimited: true");
    expect_error(HEAD "      unlimited: maybe\n",
                 "t.yaml:5:18: ", "unlimited must be true or false, not 'maybe'");
    expect_error(HEAD "      - unlimited: true\n      - {unit: second, requests_per_unit: 1}\n",
                 "t.yaml:5:9: ", "unlimited cannot be combined with other limits");
    expect_error(HEAD "      - {unit: second, requests_per_unit: 1}\n"
                      "      - {window: 1s, requests_per_unit: 2}\n",
                 "t.yaml:6:9: ", "two limits of one descriptor with the same algorithm and window");
    expect_error(HEAD "      []\n", "t.yaml:5:7: ", "rate_limit is an empty list");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 1\n      name: me\n"
                      "      replaces:\n        - name: me\n",
                 "t.yaml:9:17: ", "a limit cannot replace itself ('me')");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 1\n      replaces: [x]\n",
                 "t.yaml:7:18: ", "each replaces entry must be a map");
    expect_error("domain: api\ndescriptors:\n  - key: ip\n    ip_prefix: 129\n",
                 "t.yaml:4:16: ", "ip_prefix '129' is too large (at most 128)");
    expect_error("domain: api\ndescriptors:\n  - key: ip\n    ip_prefix: {ipv4: 33}\n",
                 "t.yaml:4:23: ", "ip_prefix ipv4 '33' is too large (at most 32)");
    expect_error("domain: \"a\\0b\"\n",
                 "t.yaml:1:9: ", "domain 'a\\x00b' holds a control character (\\x00)");
    expect_error("domain: api\ndescriptors:\n  - {key: k, value: \"\\x01\"}\n",
                 "t.yaml:3:21: ", "value '\\x01' holds a control character");
    expect_error(HEAD "      unit: second\n      requests_per_unit: 1\n      algorithm: [a]\n",
                 "t.yaml:7:18: ", "algorithm must be a name such as token-bucket, not a list");
    expect_error("domain: api\ndescriptors:\n  - key: ip\n    shadow_mode: \"yes\"\n",
                 "t.yaml:4:18: ", "shadow_mode must be true or false, not 'yes'");
}

static void bad_structure(void **state)
{
    (void)state;
    /* wrong types */
    expect_error("domain: api\ndescriptors:\n  key: user\n",
                 "t.yaml:3:3: ", "descriptors must be a list (- key: ...), not a map");
    expect_error("domain: api\ndescriptors:\n  - user\n", "t.yaml:3:5: ",
                 "each descriptor must be a map (key: ..., value: ...), not 'user'");
    expect_error(HEAD "      fast\n", "t.yaml:5:7: ", "rate_limit must be a map");
    expect_error("domain: [api]\n", "t.yaml:1:9: ", "domain must be a string, not a list");
    expect_error("domain: api\ndescriptors:\n  - key: {a: b}\n",
                 "t.yaml:3:10: ", "key must be a string, not a map");
    expect_error("- domain: api\n", "t.yaml:1:1: ", "a rules file must be a map");
    expect_error("just text\n", "t.yaml:1:1: ", "a rules file must be a map");
    /* unknown fields are errors, named */
    expect_error("domain: api\ndescriptors:\n  - key: user\n    rate_limt: {}\n", "t.yaml:4:5: ",
                 "unknown field 'rate_limt' in a descriptor (expected key, value, rate_limit, "
                 "descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, "
                 "share_threshold, metadata or ip_prefix)");
    expect_error(HEAD "      units: second\n",
                 "t.yaml:5:7: ", "unknown field 'units' in a rate_limit");
    expect_error("domain: api\nversion: 2\n", "t.yaml:2:1: ", "unknown field 'version'");
    expect_error("domain: api\n[a]: b\n", "t.yaml:2:1: ", "must be field names, not a list");
    /* duplicate keys, at any level */
    expect_error("domain: api\ndomain: api2\n",
                 "t.yaml:2:1: ", "duplicate key 'domain' (first at line 1, column 1)");
    expect_error(HEAD "      unit: second\n      unit: minute\n",
                 "t.yaml:6:7: ", "duplicate key 'unit' (first at line 5, column 7)");
    /* missing and empty things */
    expect_error("", "t.yaml:1:1: ", "empty file");
    expect_error("# only a comment\n", "t.yaml:1:1: ", "empty file");
    expect_error("descriptors: []\n", "t.yaml:1:1: ", "rules file has no domain");
    expect_error("domain: ''\n", "t.yaml:1:9: ", "domain is empty");
    expect_error("domain: api\ndescriptors:\n  - value: x\n",
                 "t.yaml:3:5: ", "descriptor has no key");
    expect_error("domain: api\ndescriptors:\n  - key: ''\n",
                 "t.yaml:3:10: ", "descriptor has an empty key");
    /* duplicate siblings */
    expect_error("domain: api\ndescriptors:\n"
                 "  - key: database\n    value: users\n"
                 "  - key: database\n    value: default\n"
                 "  - key: database\n    value: users\n",
                 "t.yaml:7:5: ",
                 "duplicate descriptor: key 'database' value 'users' again (first at line 3)");
    expect_error("domain: api\ndescriptors:\n  - key: a\n  - key: b\n  - key: a\n",
                 "t.yaml:5:5: ", "duplicate descriptor: key 'a' without a value again");
    expect_error("domain: api\ndescriptors:\n  - {key: a, value: x*}\n  - {key: a, value: x*}\n",
                 "t.yaml:4:5: ", "duplicate descriptor: key 'a' value 'x*' again");
    /* YAML */
    expect_error("domain: api\ndescriptors:\n  - key: [unclosed\n",
                 "t.yaml:4:1: ", "YAML syntax error: did not find expected ',' or ']'");
    expect_error("domain: api\n  bad: indent\n", "t.yaml:2:6: ", "YAML syntax error");
    expect_error("domain: api\n---\ndomain: other\n",
                 "t.yaml:2:1: ", "a second YAML document: a rules file holds one domain");
    expect_error("domain: api\ndescriptors:\n  - key: x\n    rate_limit: *nope\n",
                 "t.yaml:4:17: ", "unknown alias '*nope'");
    expect_error("domain: api\ndescriptors: &d\n  - key: x\n    descriptors: *d\n",
                 "t.yaml:4:18: ", "unknown alias '*d'"); /* no cycles */
}

static void bad_bytes(void **state)
{
    (void)state;
    /* tabs */
    expect_error("domain: api\ndescriptors:\n\t- key: user\n",
                 "t.yaml:3:1: ", "tab character in indentation (YAML indents with spaces)");
    expect_error("domain: api\ndescriptors:\n  - key: user\n  \trate_limit: {}\n",
                 "t.yaml:4:3: ", "tab character in indentation");
    /* binary junk */
    static const char nul[] = "domain: api\n\x7f"
                              "ELF\x02\x01\x01\0\0\0\0";
    expect_error_n(nul, sizeof nul - 1, "t.yaml:2:8: ", "binary data (a NUL byte)");
    expect_error("domain: api\ndescriptors: \xc3\x28\n", "t.yaml:2:15: ", /* at the bad byte */
                 "binary data or invalid UTF-8: invalid trailing UTF-8 octet");
    expect_error("domain: a\x01pi\n", "t.yaml:1:10: ",
                 "binary data or invalid UTF-8: control characters are not allowed");
    char junk[4096];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (char)(x >> 16);
    }
    sl_rules *r = sl_rules_load_buffer("junk.bin", junk, sizeof junk, err, sizeof err);
    assert_null(r);
    assert_true(strncmp(err, "junk.bin:", 9) == 0);
    /* too big for a buffer: refused before parsing */
    r = sl_rules_load_buffer("t.yaml", junk, (size_t)SL_RULES_MAX_FILE + 1, err, sizeof err);
    assert_null(r);
    assert_string_equal(err, "t.yaml:1:1: file too large: 4194305 bytes (the limit is 4194304 "
                             "bytes, SL_RULES_MAX_FILE)");
}

/* A sparse file of `size` bytes (all zero) at dir/name. */
static void sparse_file(const char *path, long size)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), size), 0);
    fclose(f);
}

static void bad_caps(void **state)
{
    (void)state;
    /* a 100 MB file, refused by its size before it is read: the message
     * gives the exact size, which only stat(2) knows (a reader stopping at
     * the cap would say "more than"), and no content error comes first
     * though the file is all NUL bytes */
    char dir[] = "/tmp/sluice-rules-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/huge.yaml", dir);
    sparse_file(path, 100L << 20);
    sl_rules *r = sl_rules_load(path, err, sizeof err);
    assert_null(r);
    char want[256];
    snprintf(want, sizeof want,
             "%s:1:1: file too large: 104857600 bytes (the limit is 4194304 bytes, "
             "SL_RULES_MAX_FILE)",
             path);
    assert_string_equal(err, want);
    /* the cap is inclusive: one byte over is refused by its size, exactly
     * the cap is read and parsed (and these NUL bytes are then refused as
     * binary data, at the first byte) */
    sparse_file(path, (long)SL_RULES_MAX_FILE + 1);
    assert_null(sl_rules_load(path, err, sizeof err));
    snprintf(want, sizeof want,
             "%s:1:1: file too large: 4194305 bytes (the limit is 4194304 bytes, "
             "SL_RULES_MAX_FILE)",
             path);
    assert_string_equal(err, want);
    sparse_file(path, (long)SL_RULES_MAX_FILE);
    assert_null(sl_rules_load(path, err, sizeof err));
    assert_null(strstr(err, "too large"));
    assert_non_null(strstr(err, "binary data (a NUL byte)"));
    unlink(path);
    rmdir(dir);

    /* descriptors nested deeper than SL_RULES_MAX_DEPTH */
    char deep[2048] = "domain: d\ndescriptors: ";
    for (int i = 0; i < SL_RULES_MAX_DEPTH + 1; i++) strcat(deep, "[{key: k, descriptors: ");
    strcat(deep, "[]");
    for (int i = 0; i < SL_RULES_MAX_DEPTH + 1; i++) strcat(deep, "}]");
    strcat(deep, "\n");
    /* the 16th level's `descriptors` value is the 17th "[" */
    int col = (int)strlen("descriptors: ") + 16 * (int)strlen("[{key: k, descriptors: ") + 1;
    char where[64];
    snprintf(where, sizeof where, "t.yaml:2:%d: ", col);
    expect_error(deep, where, "descriptors nested deeper than 16 levels (SL_RULES_MAX_DEPTH)");

    /* YAML nesting */
    char nest[256] = "domain: [";
    for (int i = 0; i < SL_RULES_MAX_YAML_DEPTH; i++) strcat(nest, "[");
    expect_error(nest, "t.yaml:1:72: ", /* the 65th collection */
                 "YAML nested deeper than 64 levels (SL_RULES_MAX_YAML_DEPTH)");

    /* more limits on one descriptor than SL_RULES_MAX_LIMITS */
    char lims[1024] = HEAD;
    for (int i = 1; i <= SL_RULES_MAX_LIMITS + 1; i++)
        snprintf(lims + strlen(lims), sizeof lims - strlen(lims),
                 "      - {window: %ds, requests_per_unit: 1}\n", i);
    expect_error(lims,
                 "t.yaml:5:7: ", "more than 8 limits on one descriptor (SL_RULES_MAX_LIMITS)");

    /* more anchors than SL_RULES_MAX_ANCHORS */
    char *anch = malloc(64 * 1100);
    assert_non_null(anch);
    strcpy(anch, "domain: a\ndescriptors:\n");
    for (int i = 0; i <= SL_RULES_MAX_ANCHORS; i++)
        sprintf(anch + strlen(anch), "  - {key: &a%d k%d}\n", i, i);
    expect_error(anch, "t.yaml:1027:11: ", "more than 1024 YAML anchors (SL_RULES_MAX_ANCHORS)");
    free(anch);

    /* more descriptors than SL_RULES_MAX_RULES: one list ... */
    size_t cap = (size_t)(SL_RULES_MAX_RULES + 1) * 32 + 64, len = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    len += (size_t)snprintf(big + len, cap - len, "domain: big\ndescriptors:\n");
    for (int i = 0; i <= SL_RULES_MAX_RULES; i++)
        len += (size_t)snprintf(big + len, cap - len, "- {key: k, value: v%d}\n", i);
    expect_error_n(big, len, "t.yaml:3:1: ", "more than 100000 descriptors (SL_RULES_MAX_RULES)");
    /* ... exactly the cap loads */
    r = sl_rules_load_buffer("t.yaml", big, len - strlen("- {key: k, value: v100000}\n"), err,
                             sizeof err);
    assert_non_null(r);
    assert_int_equal(sl_rules_count(r), SL_RULES_MAX_RULES);
    assert_int_equal(sl_rules_domain(r, 0)->root.nchildren, SL_RULES_MAX_RULES);
    assert_null(MATCH(r, "big", "k", "v99999")); /* found, but it has no limit */
    sl_rules_free(r);
    /* ... or aliases multiplying a small file (10 per level, 6 levels) */
    len = (size_t)snprintf(big, cap,
                           "domain: boom\ndescriptors:\n  - key: l0\n"
                           "    descriptors: &d0 [");
    for (int j = 0; j < 10; j++) len += (size_t)snprintf(big + len, cap - len, "{key: k%d},", j);
    big[len - 1] = ']';
    big[len++] = '\n';
    for (int i = 1; i < 6; i++) {
        len +=
            (size_t)snprintf(big + len, cap - len, "  - key: l%d\n    descriptors: &d%d [", i, i);
        for (int j = 0; j < 10; j++)
            len +=
                (size_t)snprintf(big + len, cap - len, "{key: k%d, descriptors: *d%d},", j, i - 1);
        big[len - 1] = ']';
        big[len++] = '\n';
    }
    expect_error_n(big, len, "t.yaml:", "more than 100000 descriptors (SL_RULES_MAX_RULES)");
    free(big);
}

/* ---- directories ---------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *dir, const char *name)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

static int count_nodes(const sl_rule_node *n, void *ctx)
{
    char *paths = ctx;
    strcat(paths, n->path);
    strcat(paths, " ");
    return 0;
}

static int stop_at_two(const sl_rule_node *n, void *ctx)
{
    (void)n;
    return ++*(int *)ctx == 2 ? 7 : 0;
}

static void directory(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-rules-XXXXXX", p[512], q[512];
    assert_non_null(mkdtemp(dir));
    write_file(dir, "b.yaml",
               "domain: b\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 2}\n");
    write_file(dir, "a.yml",
               "domain: a\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    write_file(dir, ".hidden.yaml", "not: [valid");
    write_file(dir, "notes.txt", "\x01\x02 not yaml");
    /* Kubernetes' ConfigMap layout: c.yaml -> ..data/c.yaml, ..data -> ..2024_01_01 */
    snprintf(p, sizeof p, "%s/..2024_01_01", dir);
    assert_int_equal(mkdir(p, 0700), 0);
    write_file(p, "c.yaml",
               "domain: c\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 3}\n");
    write_file(p, "zz.yaml", "junk: [");
    snprintf(p, sizeof p, "%s/..data", dir);
    assert_int_equal(symlink("..2024_01_01", p), 0);
    snprintf(p, sizeof p, "%s/c.yaml", dir);
    assert_int_equal(symlink("..data/c.yaml", p), 0);

    sl_rules *r = sl_rules_load(dir, err, sizeof err);
    if (r == NULL) fail_msg("%s", err);
    assert_int_equal(sl_rules_ndomains(r), 3);
    assert_string_equal(sl_rules_domain(r, 0)->name, "a"); /* a.yml, b.yaml, c.yaml */
    assert_string_equal(sl_rules_domain(r, 1)->name, "b");
    assert_string_equal(sl_rules_domain(r, 2)->name, "c");
    snprintf(p, sizeof p, "%s/a.yml", dir);
    assert_string_equal(sl_rules_domain(r, 0)->file, p);
    assert_int_equal(L(MATCH(r, "c", "k", "v")), 3);
    assert_ptr_equal(sl_rules_find_domain(r, "b", 1), sl_rules_domain(r, 1));
    assert_null(sl_rules_find_domain(r, "d", 1));
    assert_string_equal(sl_rules_source(r), dir);
    char paths[256] = "";
    assert_int_equal(sl_rules_foreach(r, count_nodes, paths), 0);
    assert_string_equal(paths, "a a.k b b.k c c.k ");
    int calls = 0;
    assert_int_equal(sl_rules_foreach(r, stop_at_two, &calls), 7);
    assert_int_equal(calls, 2);

    /* reference counting; generations grow */
    sl_rules *r2 = sl_rules_load(dir, err, sizeof err);
    assert_non_null(r2);
    assert_true(sl_rules_generation(r2) > sl_rules_generation(r));
    assert_true(sl_rules_loaded_at_ms(r2) > 1600000000000LL);
    assert_ptr_equal(sl_rules_ref(r2), r2);
    sl_rules_unref(r2);
    assert_int_equal(L(MATCH(r2, "a", "k", "v")), 1); /* still held */
    sl_rules_unref(r2);
    sl_rules_free(r);
    sl_rules_unref(NULL);

    /* a trailing slash is fine */
    snprintf(q, sizeof q, "%s/", dir);
    r = sl_rules_load(q, err, sizeof err);
    assert_non_null(r);
    sl_rules_free(r);

    /* a domain in two files is refused, naming both */
    write_file(dir, "d.yaml", "domain: a\n");
    assert_null(sl_rules_load(dir, err, sizeof err));
    snprintf(q, sizeof q,
             "%s/d.yaml:1:9: domain 'a' is already defined in %s/a.yml:1:9 (--merge-domains "
             "merges them, as Lyft's MERGE_DOMAIN_CONFIG does)",
             dir, dir);
    assert_string_equal(err, q);
    remove_file(dir, "d.yaml");

    /* one bad file and there is no set at all */
    write_file(dir, "e.yaml",
               "domain: e\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    assert_null(sl_rules_load(dir, err, sizeof err));
    snprintf(q, sizeof q, "%s/e.yaml:4:24: unknown unit 'fortnight'", dir);
    if (strncmp(err, q, strlen(q)) != 0) fail_msg("error \"%s\", expected \"%s\"", err, q);
    remove_file(dir, "e.yaml");

    /* cleanup; then an empty directory is an empty set */
    remove_file(dir, "a.yml");
    remove_file(dir, "b.yaml");
    remove_file(dir, "c.yaml");
    remove_file(dir, ".hidden.yaml");
    remove_file(dir, "notes.txt");
    remove_file(dir, "..data");
    snprintf(p, sizeof p, "%s/..2024_01_01", dir);
    remove_file(p, "c.yaml");
    remove_file(p, "zz.yaml");
    rmdir(p);
    r = sl_rules_load(dir, err, sizeof err);
    assert_non_null(r);
    assert_int_equal(sl_rules_ndomains(r), 0);
    assert_null(MATCH(r, "a", "k", "v"));
    sl_rules_free(r);
    rmdir(dir);

    /* a path that does not exist */
    assert_null(sl_rules_load("/nonexistent/rules.yaml", err, sizeof err));
    assert_string_equal(err, "/nonexistent/rules.yaml: No such file or directory");
}

/* Makes an entry of one kind at path p; 0 or -1. */
typedef int (*make_fn)(const char *p);

static int make_dangling(const char *p) { return symlink("missing-target.yaml", p); }
static int make_loop(const char *p) { return symlink(strrchr(p, '/') + 1, p); } /* itself */
static int make_fifo(const char *p) { return mkfifo(p, 0600); }
static int make_device(const char *p) { return symlink("/dev/null", p); }
static int make_dir(const char *p) { return mkdir(p, 0700); }

static int make_socket(const char *p)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", p);
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&a, sizeof a);
    if (fd >= 0) close(fd); /* the socket file stays */
    return rc;
}

static void remove_any(const char *p)
{
    if (unlink(p) != 0) rmdir(p);
}

/* Every rules entry that cannot be read as a regular file fails the whole
 * load, naming the entry and what it is, in a folder and as the rules path
 * itself -- nothing is skipped, so a set is never silently a domain short.
 * Symbolic links to regular files (a Kubernetes ConfigMap's) still load.
 * alarm(): a load that blocked (a FIFO opened for reading waits for a
 * writer) would kill the test rather than hang it. */
static void unreadable_entries(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        make_fn make;
        const char *msg;
    } kinds[] = {
        {"dangling symlink", make_dangling, "No such file or directory (a dangling symlink)"},
        {"symlink loop", make_loop, "Too many levels of symbolic links (a symlink loop)"},
        {"FIFO", make_fifo, "not a regular file (a FIFO)"},
        {"device", make_device, "not a regular file (a character device)"},
        {"directory", make_dir, "not a regular file (a directory)"},
        {"socket", make_socket, "not a regular file (a socket)"},
    };
    char dir[] = "/tmp/sluice-test-bad-XXXXXX", p[512], want[1024];
    assert_non_null(mkdtemp(dir));
    write_file(dir, "a.yaml",
               "domain: a\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    write_file(dir, "target.txt",
               "domain: l\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 2}\n");
    snprintf(p, sizeof p, "%s/l.yaml", dir); /* a link to a regular file */
    assert_int_equal(symlink("target.txt", p), 0);
    sl_rules *r = sl_rules_load(dir, err, sizeof err);
    if (r == NULL) fail_msg("%s", err);
    assert_int_equal(sl_rules_ndomains(r), 2);
    assert_int_equal(L(MATCH(r, "l", "k", "v")), 2);
    sl_rules_free(r);

    alarm(30);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        /* in the folder, between two good files */
        snprintf(p, sizeof p, "%s/b.yaml", dir);
        if (kinds[i].make(p) != 0) fail_msg("cannot make a %s: %s", kinds[i].what, strerror(errno));
        assert_null(sl_rules_load(dir, err, sizeof err));
        snprintf(want, sizeof want, "%s: %s", p, kinds[i].msg);
        if (strcmp(err, want) != 0)
            fail_msg("%s: \"%s\", expected \"%s\"", kinds[i].what, err, want);
        /* and as the rules path itself (a directory there is a rules folder) */
        if (kinds[i].make == make_dir) {
            remove_any(p);
            continue;
        }
        assert_null(sl_rules_load(p, err, sizeof err));
        if (strcmp(err, want) != 0)
            fail_msg("%s: \"%s\", expected \"%s\"", kinds[i].what, err, want);
        remove_any(p);
    }
    alarm(0);
    r = sl_rules_load(dir, err, sizeof err); /* all gone: loads again */
    if (r == NULL) fail_msg("%s", err);
    assert_int_equal(sl_rules_ndomains(r), 2);
    sl_rules_free(r);
    remove_file(dir, "l.yaml");
    remove_file(dir, "target.txt");
    remove_file(dir, "a.yaml");
    rmdir(dir);
}

/* A rules file the server may not read fails the load with "Permission
 * denied".  Root reads through mode bits, so when run as root the load runs
 * in a child that has become nobody (65534) first; its message comes back
 * through a pipe. */
static void permission_denied(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-test-perm-XXXXXX", p[512], want[600], got[1024] = "";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
    write_file(dir, "a.yaml",
               "domain: a\ndescriptors:\n  - key: k\n"
               "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    write_file(dir, "b.yaml", "domain: b\n");
    snprintf(p, sizeof p, "%s/b.yaml", dir);
    assert_int_equal(chmod(p, 0000), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(3);
        char e[1024];
        sl_rules *r = sl_rules_load(dir, e, sizeof e);
        ssize_t w = write(fds[1], e, strlen(e));
        _exit(r == NULL && w >= 0 ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], got, sizeof got - 1);
    got[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3) fail_msg("could not become nobody");
    assert_int_equal(WEXITSTATUS(status), 0); /* refused */
    snprintf(want, sizeof want, "%s: Permission denied", p);
    assert_string_equal(got, want);
    remove_file(dir, "a.yaml");
    remove_file(dir, "b.yaml");
    rmdir(dir);
}

/* SL_RULES_MAX_TOTAL: the files of a directory together.  16 files just
 * under SL_RULES_MAX_FILE each fit in 64 MiB and load; a 17th makes the
 * total too large, and the error names the file where it went over.  Each
 * file is a valid one-domain rules file padded with YAML comments. */
static void total_size_cap(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-test-total-XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    size_t size = SL_RULES_MAX_FILE - 4096; /* 16 of them: 64 MiB - 64 KiB */
    char *buf = malloc(size);
    assert_non_null(buf);
    int nfiles = SL_RULES_MAX_TOTAL / SL_RULES_MAX_FILE + 1; /* 17 */
    for (int i = 0; i < nfiles; i++) {
        int n = snprintf(buf, size,
                         "domain: d%02d\ndescriptors:\n  - key: k\n"
                         "    rate_limit: {unit: second, requests_per_unit: 1}\n",
                         i);
        memset(buf + n, ' ', size - (size_t)n);
        for (size_t at = (size_t)n; at + 80 < size; at += 80) {
            buf[at] = '#';
            buf[at + 79] = '\n';
        }
        buf[size - 1] = '\n';
        snprintf(path, sizeof path, "%s/r%02d.yaml", dir, i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, size, f), size);
        fclose(f);
        if (i == nfiles - 2) { /* 16 files: at the cap, loads */
            sl_rules *r = sl_rules_load(dir, err, sizeof err);
            if (r == NULL) fail_msg("16 files under the total: %s", err);
            assert_int_equal(sl_rules_ndomains(r), nfiles - 1);
            sl_rules_free(r);
        }
    }
    assert_null(sl_rules_load(dir, err, sizeof err));
    char want[256];
    snprintf(want, sizeof want,
             "%s/r%02d.yaml:1:1: the rules files total more than 67108864 bytes "
             "(SL_RULES_MAX_TOTAL)",
             dir, nfiles - 1);
    assert_string_equal(err, want);
    for (int i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/r%02d.yaml", dir, i);
        unlink(path);
    }
    rmdir(dir);
    free(buf);
}

/* ---- Lyft's current format (envoyproxy/ratelimit's config tests) ----------
 *
 * Our own fixtures for the cases of Lyft's test/config: wildcards anywhere
 * in a value (TestWildcardConfig, README example 9), share_threshold,
 * value_to_metric and detailed_metric names, quota_mode and metadata,
 * merged domains, and the files Lyft refuses. */

static void lyft_wildcards(void **state)
{
    (void)state;
    sl_rules *r = load("domain: test-domain\n"
                       "descriptors:\n"
                       "  - key: wild\n"
                       "    value: foo*\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 20}\n"
                       "  - key: noWild\n"
                       "    value: foo\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 21}\n"
                       "  - key: noVal\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 22}\n"
                       "  - key: midWild\n"
                       "    value: bar*b\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 23}\n"
                       "  - key: multiWild\n"
                       "    value: foo*bar*baz\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 24}\n"
                       "  - key: path\n"
                       "    value: /api/*/resource/*/action\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 25}\n"
                       "  - key: stars\n"
                       "    value: a**b\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 26}\n");
    /* key only: every value, each its own counter */
    assert_ptr_equal(MATCH(r, "test-domain", "noVal", "foo1"),
                     MATCH(r, "test-domain", "noVal", "foo2"));
    /* a trailing '*': every value it starts, the empty rest included */
    const sl_rule_node *w = MATCH(r, "test-domain", "wild", "foo1");
    assert_int_equal(L(w), 20);
    assert_int_equal(w->match, SL_MATCH_WILDCARD);
    assert_ptr_equal(w, MATCH(r, "test-domain", "wild", "foo2"));
    assert_ptr_equal(w, MATCH(r, "test-domain", "wild", "foo"));
    assert_null(MATCH(r, "test-domain", "wild", "bar"));
    assert_null(MATCH(r, "test-domain", "wild", "fo"));
    assert_null(MATCH(r, "test-domain", "noWild", "foo1")); /* no '*': exact only */
    /* in the middle: Lyft's "bar*b" now matches "barab" */
    assert_int_equal(L(MATCH(r, "test-domain", "midWild", "barab")), 23);
    assert_int_equal(L(MATCH(r, "test-domain", "midWild", "barb")), 23); /* '*' empty */
    assert_int_equal(L(MATCH(r, "test-domain", "midWild", "bar/x/b")), 23);
    assert_null(MATCH(r, "test-domain", "midWild", "bar"));   /* no 'b' after "bar" */
    assert_null(MATCH(r, "test-domain", "midWild", "barbx")); /* must end in 'b' */
    assert_null(MATCH(r, "test-domain", "midWild", "bab"));
    /* several '*': the parts in order, each '*' any run */
    assert_int_equal(L(MATCH(r, "test-domain", "multiWild", "foobarbaz")), 24);
    assert_int_equal(L(MATCH(r, "test-domain", "multiWild", "foo-bar-baz")), 24);
    assert_int_equal(L(MATCH(r, "test-domain", "multiWild", "foo_x_bar_y_baz")), 24);
    assert_int_equal(L(MATCH(r, "test-domain", "multiWild", "foobarbarbaz")), 24);
    assert_int_equal(L(MATCH(r, "test-domain", "multiWild", "foo*bar*baz")), 24); /* its text */
    assert_null(MATCH(r, "test-domain", "multiWild", "foobazbar"));               /* order */
    assert_null(MATCH(r, "test-domain", "multiWild", "foobarbaz!"));
    assert_null(MATCH(r, "test-domain", "multiWild", "foobaz"));
    /* README example 9's path pattern, two '*' between slashes */
    assert_int_equal(L(MATCH(r, "test-domain", "path", "/api/v1/resource/42/action")), 25);
    assert_int_equal(L(MATCH(r, "test-domain", "path", "/api//resource//action")), 25);
    assert_int_equal(L(MATCH(r, "test-domain", "path", "/api/a/b/resource/c/d/action")), 25);
    assert_null(MATCH(r, "test-domain", "path", "/api/v1/resource/42/actions"));
    assert_null(MATCH(r, "test-domain", "path", "/api/v1/42/action"));
    assert_null(MATCH(r, "test-domain", "path", "/api/resource/action"));
    /* "**" is one '*' */
    assert_int_equal(L(MATCH(r, "test-domain", "stars", "ab")), 26);
    assert_int_equal(L(MATCH(r, "test-domain", "stars", "a-b")), 26);
    /* without share_threshold each value counts on its own */
    assert_string_equal(KEY(r, "test-domain", 0, "midWild", "barab"), "test-domain|midWild=barab");
    assert_string_equal(KEY(r, "test-domain", 0, "midWild", "barb"), "test-domain|midWild=barb");
    assert_string_equal(w->path, "test-domain.wild_foo*");
    sl_rules_free(r);
}

/* Lyft's order at each level: the same key and value (a wildcard's own text
 * too), else the FIRST wildcard in file order that matches, else key only. */
static void lyft_wildcard_precedence(void **state)
{
    (void)state;
    sl_rules *r = load("domain: d\n"
                       "descriptors:\n"
                       "  - key: p\n"
                       "    rate_limit: {unit: second, requests_per_unit: 1}\n"
                       "  - key: p\n"
                       "    value: /a/*/x\n"
                       "    rate_limit: {unit: second, requests_per_unit: 2}\n"
                       "  - key: p\n"
                       "    value: /a/*\n"
                       "    rate_limit: {unit: second, requests_per_unit: 3}\n"
                       "  - key: p\n"
                       "    value: /a/b/*\n"
                       "    rate_limit: {unit: second, requests_per_unit: 4}\n"
                       "  - key: p\n"
                       "    value: /a/b/x\n"
                       "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                       "  - key: q\n"
                       "    value: '*'\n"
                       "    rate_limit: {unit: second, requests_per_unit: 6}\n"
                       "  - key: q\n"
                       "    value: a*\n"
                       "    rate_limit: {unit: second, requests_per_unit: 7}\n");
    assert_int_equal(L(MATCH(r, "d", "p", "/a/b/x")), 5); /* exact first */
    assert_int_equal(L(MATCH(r, "d", "p", "/a/c/x")), 2); /* first wildcard in file order */
    assert_int_equal(L(MATCH(r, "d", "p", "/a/b/y")), 3); /* 4 comes after 3 in the file */
    assert_int_equal(L(MATCH(r, "d", "p", "/a/b/*")), 4); /* a wildcard's own text: exact */
    assert_int_equal(L(MATCH(r, "d", "p", "/b")), 1);     /* key only last */
    assert_int_equal(L(MATCH(r, "d", "q", "abc")), 6);    /* '*' alone: every value */
    assert_int_equal(L(MATCH(r, "d", "q", "")), 6);
    assert_int_equal(L(MATCH(r, "d", "q", "a*")), 7); /* unreachable but by its text */
    sl_rules_free(r);
}

/* The cases of Lyft's test/config/share_threshold.yaml, in our own file. */
static const char share_yaml[] =
    "domain: test-domain\n"
    "descriptors:\n"
    "  - {key: files, value: files/*, share_threshold: true,\n"
    "     rate_limit: {unit: minute, requests_per_unit: 100}}\n"
    "  - key: nested\n"
    "    value: parent\n"
    "    descriptors:\n"
    "      - {key: files, value: nested/*, share_threshold: true,\n"
    "         rate_limit: {unit: minute, requests_per_unit: 200}}\n"
    "  - key: files\n"
    "    value: top/*\n"
    "    share_threshold: true\n"
    "    descriptors:\n"
    "      - {key: files, value: nested/*, share_threshold: true,\n"
    "         rate_limit: {unit: minute, requests_per_unit: 300}}\n"
    "  - key: route\n"
    "    value: api/*\n"
    "    share_threshold: true\n"
    "    value_to_metric: true\n"
    "    descriptors:\n"
    "      - {key: method, rate_limit: {unit: minute, requests_per_unit: 60}}\n"
    "  - key: service\n"
    "    value: svc/*\n"
    "    share_threshold: true\n"
    "    descriptors:\n"
    "      - {key: endpoint, detailed_metric: true,\n"
    "         rate_limit: {unit: minute, requests_per_unit: 80}}\n"
    "  - key: path\n"
    "    value: path/*\n"
    "    share_threshold: true\n"
    "    descriptors:\n"
    "      - key: file\n"
    "        value: file/*\n"
    "        share_threshold: false\n"
    "        descriptors:\n"
    "          - {key: type, rate_limit: {unit: minute, requests_per_unit: 120}}\n"
    "  - key: user\n"
    "    value: user/*\n"
    "    share_threshold: true\n"
    "    descriptors:\n"
    "      - key: resource\n"
    "        value: res/*\n"
    "        share_threshold: true\n"
    "        descriptors:\n"
    "          - {key: action, rate_limit: {unit: minute, requests_per_unit: 150}}\n"
    "  - {key: file, value: test1, rate_limit: {unit: minute, requests_per_unit: 50}}\n"
    "  - {key: file, value: test*, share_threshold: true,\n"
    "     rate_limit: {unit: minute, requests_per_unit: 100}}\n"
    "  - {key: midpath, value: /api*v1, share_threshold: true,\n"
    "     rate_limit: {unit: minute, requests_per_unit: 100}}\n"
    "  - {key: multiroute, value: svc*ep*rpc, share_threshold: true,\n"
    "     rate_limit: {unit: minute, requests_per_unit: 50}}\n"
    "  - {key: midroute, value: /api*v2, share_threshold: true, value_to_metric: true,\n"
    "     rate_limit: {unit: minute, requests_per_unit: 80}}\n"
    "  - key: tenant\n"
    "    value: t*prod\n"
    "    share_threshold: true\n"
    "    descriptors:\n"
    "      - {key: resource, value: res*v2, share_threshold: true,\n"
    "         rate_limit: {unit: minute, requests_per_unit: 60}}\n";

/* Lyft's statistics name of the request kv, as a string. */
static const char *metric_kv(const sl_rules *r, const char *dom, int *dynamic,
                             const char *const *kv)
{
    matched m;
    match_into(&m, r, dom, kv);
    size_t len = 0;
    *dynamic = sl_rules_metric_name(m.node, m.e, m.n, m.buf, SL_MAX_KEY + 1, &len);
    assert_int_equal(*dynamic, sl_rules_metric_dynamic(m.node));
    assert_int_equal(*dynamic, m.node->metric_dynamic); /* the loader's, RL.CHECK's */
    assert_int_equal(len, strlen(m.buf));
    return m.buf;
}
#define METRIC(r, dom, dyn, ...)                                                                   \
    metric_kv((r), (dom), (dyn), (const char *const[]){__VA_ARGS__, NULL})

static void lyft_share_threshold(void **state)
{
    (void)state;
    sl_rules *r = load(share_yaml);
    int dyn;
    const char *D = "test-domain";
    /* every value the wildcard matches shares one counter: the pattern's */
    assert_int_equal(L(MATCH(r, D, "files", "files/a.txt")), 100);
    assert_string_equal(KEY(r, D, 0, "files", "files/a.txt"), "test-domain|files=files/*");
    assert_string_equal(KEY(r, D, 0, "files", "files/b.txt"), "test-domain|files=files/*");
    assert_true(MATCH(r, D, "files", "files/a.txt")->share_threshold);
    /* nested below an exact level */
    assert_int_equal(L(MATCH(r, D, "nested", "parent", "files", "nested/x")), 200);
    assert_string_equal(KEY(r, D, 0, "nested", "parent", "files", "nested/x"),
                        "test-domain|nested=parent|files=nested/*");
    /* the same key name at two levels, both shared */
    assert_int_equal(L(MATCH(r, D, "files", "top/1", "files", "nested/2")), 300);
    assert_string_equal(KEY(r, D, 0, "files", "top/1", "files", "nested/2"),
                        "test-domain|files=top/*|files=nested/*");
    /* a shared level above a key-only leaf: the leaf's values still apart */
    assert_int_equal(L(MATCH(r, D, "route", "api/users", "method", "GET")), 60);
    assert_string_equal(KEY(r, D, 0, "route", "api/users", "method", "GET"),
                        "test-domain|route=api/*|method=GET");
    assert_string_equal(KEY(r, D, 0, "route", "api/orders", "method", "POST"),
                        "test-domain|route=api/*|method=POST");
    /* share_threshold wins over value_to_metric: the pattern names it */
    assert_string_equal(METRIC(r, D, &dyn, "route", "api/users", "method", "GET"),
                        "test-domain.route_api/*.method");
    assert_int_equal(dyn, 0);
    /* detailed_metric below a shared level: the pattern, then the value */
    assert_string_equal(METRIC(r, D, &dyn, "service", "svc/a", "endpoint", "ep1"),
                        "test-domain.service_svc/*.endpoint_ep1");
    assert_int_equal(dyn, 1);
    assert_string_equal(KEY(r, D, 0, "service", "svc/a", "endpoint", "ep1"),
                        "test-domain|service=svc/*|endpoint=ep1");
    /* mixed: a shared level, an unshared wildcard, a key-only leaf */
    assert_int_equal(L(MATCH(r, D, "path", "path/1", "file", "file/a", "type", "pdf")), 120);
    assert_string_equal(KEY(r, D, 0, "path", "path/1", "file", "file/a", "type", "pdf"),
                        "test-domain|path=path/*|file=file/a|type=pdf");
    assert_string_equal(KEY(r, D, 0, "path", "path/2", "file", "file/b", "type", "pdf"),
                        "test-domain|path=path/*|file=file/b|type=pdf");
    /* both wildcards shared */
    assert_string_equal(KEY(r, D, 0, "user", "user/1", "resource", "res/9", "action", "read"),
                        "test-domain|user=user/*|resource=res/*|action=read");
    assert_string_equal(KEY(r, D, 0, "user", "user/2", "resource", "res/8", "action", "read"),
                        "test-domain|user=user/*|resource=res/*|action=read");
    /* an exact value before a shared wildcard */
    assert_int_equal(L(MATCH(r, D, "file", "test1")), 50);
    assert_string_equal(KEY(r, D, 0, "file", "test1"), "test-domain|file=test1");
    assert_int_equal(L(MATCH(r, D, "file", "test2")), 100);
    assert_string_equal(KEY(r, D, 0, "file", "test2"), "test-domain|file=test*");
    assert_string_equal(KEY(r, D, 0, "file", "test3"), "test-domain|file=test*");
    /* a '*' in the middle, and several */
    assert_string_equal(KEY(r, D, 0, "midpath", "/api/users/v1"), "test-domain|midpath=/api*v1");
    assert_string_equal(KEY(r, D, 0, "midpath", "/apiv1"), "test-domain|midpath=/api*v1");
    assert_null(MATCH(r, D, "midpath", "/api/users/v2"));
    assert_string_equal(KEY(r, D, 0, "multiroute", "svc-a-ep-b-rpc"),
                        "test-domain|multiroute=svc*ep*rpc");
    assert_string_equal(METRIC(r, D, &dyn, "midroute", "/api/x/v2"),
                        "test-domain.midroute_/api*v2");
    assert_string_equal(KEY(r, D, 0, "tenant", "t1prod", "resource", "res-1-v2"),
                        "test-domain|tenant=t*prod|resource=res*v2");
    assert_string_equal(KEY(r, D, 0, "tenant", "t2prod", "resource", "res-2-v2"),
                        "test-domain|tenant=t*prod|resource=res*v2");
    sl_rules_free(r);
}

/* Lyft's statistics names (stats keys): value_to_metric and detailed_metric. */
static void lyft_metric_names(void **state)
{
    (void)state;
    sl_rules *r =
        load("domain: d\n"
             "descriptors:\n"
             "  - key: route\n"
             "    value_to_metric: true\n"
             "    descriptors:\n"
             "      - {key: method, rate_limit: {unit: minute, requests_per_unit: 60}}\n"
             "  - {key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
             "  - {key: wild2, value: foo*, value_to_metric: true,\n"
             "     rate_limit: {unit: minute, requests_per_unit: 1}}\n"
             "  - {key: key7, detailed_metric: true,\n"
             "     rate_limit: {unit: minute, requests_per_unit: 70}}\n"
             "  - key: a\n"
             "    value: x\n"
             "    descriptors:\n"
             "      - {key: b, value_to_metric: true,\n"
             "         rate_limit: {unit: minute, requests_per_unit: 2}}\n"
             "  - {key: plain, rate_limit: {unit: minute, requests_per_unit: 3}}\n"
             "  - key: s\n"
             "    value: s*\n"
             "    share_threshold: true\n"
             "    descriptors:\n"
             "      - {key: e, detailed_metric: true,\n"
             "         rate_limit: {unit: minute, requests_per_unit: 4}}\n");
    int dyn;
    /* value_to_metric on a key-only level above the limit */
    assert_string_equal(METRIC(r, "d", &dyn, "route", "/users", "method", "GET"),
                        "d.route_/users.method");
    assert_int_equal(dyn, 1);
    /* a wildcard without it keeps the pattern; with it, the value */
    assert_string_equal(METRIC(r, "d", &dyn, "wild", "foo1"), "d.wild_foo*");
    assert_int_equal(dyn, 0);
    assert_string_equal(METRIC(r, "d", &dyn, "wild2", "foo1"), "d.wild2_foo1");
    assert_int_equal(dyn, 1);
    /* Lyft's basic_config key7: detailed_metric puts the value in */
    assert_string_equal(METRIC(r, "d", &dyn, "key7", "unspecified_value"),
                        "d.key7_unspecified_value");
    assert_string_equal(METRIC(r, "d", &dyn, "key7", "another_value"), "d.key7_another_value");
    assert_string_equal(METRIC(r, "d", &dyn, "key7", ""), "d.key7_");
    /* below a shared level Lyft leaves out the '_' of an empty value */
    assert_string_equal(METRIC(r, "d", &dyn, "s", "s1", "e", ""), "d.s_s*.e");
    assert_string_equal(METRIC(r, "d", &dyn, "s", "s1", "e", "x"), "d.s_s*.e_x");
    assert_string_equal(METRIC(r, "d", &dyn, "a", "x", "b", "y"), "d.a_x.b_y");
    /* nothing asked: the descriptor's path */
    assert_string_equal(METRIC(r, "d", &dyn, "plain", "v"), "d.plain");
    assert_int_equal(dyn, 0);
    /* a small buffer is cut, the length is the whole name's */
    sl_rule_entry e[1];
    entries(e, (const char *const[]){"key7", "unspecified_value", NULL});
    const sl_rule_node *n = sl_rules_match(r, "d", 1, e, 1);
    char small[8];
    size_t len = 0;
    assert_int_equal(sl_rules_metric_name(n, e, 1, small, sizeof small, &len), 1);
    assert_string_equal(small, "d.key7_");
    assert_int_equal(len, strlen("d.key7_unspecified_value"));
    assert_int_equal(sl_rules_metric_name(n, e, 2, small, sizeof small, &len), SL_EINVAL);
    sl_rules_free(r);
}

/* quota_mode, metadata and the fields RL.RULES lists. */
static void lyft_new_fields(void **state)
{
    (void)state;
    sl_rules *r = load("domain: d\n"
                       "descriptors:\n"
                       "  - key: backend\n"
                       "    value: aws\n"
                       "    quota_mode: true\n"
                       "    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
                       "    metadata:\n"
                       "      service_with_quota:\n"
                       "        name: service_2\n"
                       "        tags: [a, b, {c: 1}]\n"
                       "  - key: k\n"
                       "    metadata: {}\n"
                       "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                       "  - key: empty\n"
                       "    metadata:\n"
                       "    rate_limit: {unit: second, requests_per_unit: 5}\n"
                       "  - {key: s, value: s*, share_threshold: true, detailed_metric: true,\n"
                       "     value_to_metric: true, quota_mode: false,\n"
                       "     rate_limit: {unit: second, requests_per_unit: 5}}\n");
    char buf[200];
    const sl_rule_node *n = MATCH(r, "d", "backend", "aws");
    assert_true(n->quota_mode);
    assert_true(n->has_metadata);
    assert_false(n->shadow_mode);
    sl_rules_node_notes(n, buf, sizeof buf);
    assert_string_equal(buf, " quota_mode metadata: not applicable");
    n = MATCH(r, "d", "k", "v");
    assert_true(n->has_metadata);
    assert_false(n->quota_mode);
    n = MATCH(r, "d", "empty", "v"); /* a null value: as if not given */
    assert_false(n->has_metadata);
    sl_rules_node_notes(n, buf, sizeof buf);
    assert_string_equal(buf, "");
    n = MATCH(r, "d", "s", "s1");
    sl_rules_node_notes(n, buf, sizeof buf);
    /* the metric fields name INFO rulestats' per-value entries: applicable */
    assert_string_equal(buf, " share_threshold detailed_metric value_to_metric");
    sl_rules_free(r);

    /* the new fields' bad values */
    expect_error("domain: d\ndescriptors:\n  - key: k\n    quota_mode: \"yes\"\n",
                 "t.yaml:4:17: ", "quota_mode must be true or false, not 'yes'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    value_to_metric: 1\n",
                 "t.yaml:4:22: ", "value_to_metric must be true or false, not '1'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n",
                 "t.yaml:4:15: ", "metadata must be a map (name: value ...), not a list");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    metadata: text\n",
                 "t.yaml:4:15: ", "metadata must be a map (name: value ...), not 'text'");
    /* Lyft: "share_threshold can only be used with wildcard values" */
    expect_error("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
                 "t.yaml:5:22: ", "share_threshold needs a wildcard value (one with '*'), not 'v'");
    expect_error("domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n",
                 "t.yaml:4:22: ",
                 "share_threshold needs a wildcard value (one with '*'), and descriptor 'k' "
                 "has no value");
    /* share_threshold: false is fine anywhere */
    sl_rules_free(load("domain: d\ndescriptors:\n  - key: k\n    share_threshold: false\n"));
    /* two wildcards with the same text are one descriptor twice */
    expect_error(
        "domain: d\ndescriptors:\n  - {key: k, value: a*b}\n  - {key: k, value: a*b}\n",
        "t.yaml:4:5: ", "duplicate descriptor: key 'k' value 'a*b' again (first at line 3)");
}

/* Lyft's refusals (test/config's bad files and config_test.go's messages),
 * each refused by sluice too, with its own message. */
static void lyft_bad_files(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *where, *what; /* what Lyft says, in a comment */
    } bad[] = {
        /* "config file cannot have empty domain" */
        {"domain: \"\"\ndescriptors: []\n", "t.yaml:1:9: ", "domain is empty"},
        /* "descriptor has empty key" */
        {"domain: d\ndescriptors:\n  - key: \"\"\n",
         "t.yaml:3:10: ", "descriptor has an empty key"},
        /* "duplicate descriptor composite key 'test-domain.key1_value1'" */
        {"domain: test-domain\ndescriptors:\n  - {key: key1, value: value1}\n"
         "  - {key: key1, value: value1}\n",
         "t.yaml:4:5: ", "duplicate descriptor: key 'key1' value 'value1' again"},
        /* "invalid rate limit unit 'foo'" */
        {HEAD "      unit: foo\n      requests_per_unit: 5\n",
         "t.yaml:5:13: ", "unknown unit 'foo'"},
        /* "error loading config file: yaml: line 2: found unexpected end of stream" */
        {"domain: d\ndescriptors: \"\n", "t.yaml:", "YAML syntax error"},
        /* "config error, unknown key 'ratelimit'" */
        {"domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day}\n",
         "t.yaml:4:5: ", "unknown field 'ratelimit' in a descriptor"},
        /* "config error, unknown key 'requestsperunit'" */
        {HEAD "      unit: day\n      requestsperunit: 5\n",
         "t.yaml:6:7: ", "unknown field 'requestsperunit' in a rate_limit"},
        /* "config error, key is not of type string: 0.25" */
        {"0.25: test-domain\ndescriptors: []\n",
         "t.yaml:1:1: ", "unknown field '0.25' in a rules file"},
        /* "config error, yaml file contains list of type other than map: a" */
        {"domain: d\ndescriptors:\n  - a\n  - b\n",
         "t.yaml:3:5: ", "each descriptor must be a map (key: ..., value: ...), not 'a'"},
        /* "should not specify rate limit unit when unlimited" */
        {HEAD "      unlimited: true\n      unit: second\n",
         "t.yaml:6:13: ", "unit must not be given with unlimited: true"},
        /* "should not have an empty replaces entry" */
        {HEAD "      name: self\n      replaces:\n        - name:\n      unit: second\n"
              "      requests_per_unit: 5\n",
         "t.yaml:7:11: ", "a replaces entry needs a name"},
        /* "replaces should not contain name of same descriptor" */
        {HEAD "      name: self\n      replaces:\n        - name: self\n      unit: second\n"
              "      requests_per_unit: 5\n",
         "t.yaml:7:17: ", "a limit cannot replace itself ('self')"},
        /* "share_threshold can only be used with wildcard values (containing '*')" */
        {"domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true}\n",
         "t.yaml:3:41: ", "share_threshold needs a wildcard value"},
        /* "error parsing metadata: ..." (a map is all Lyft takes) */
        {"domain: d\ndescriptors:\n  - {key: k, metadata: [1]}\n",
         "t.yaml:3:24: ", "metadata must be a map"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error(bad[i].yaml, bad[i].where, bad[i].what);
}

/* Lyft's MERGE_DOMAIN_CONFIG (TestDomainMerge, TestDuplicateKeyDomainMerge)
 * as SL_RULES_MERGE_DOMAINS; without it, Lyft's "duplicate domain". */
static void lyft_merge_domains(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-merge-XXXXXX", q[2200];
    assert_non_null(mkdtemp(dir));
    write_file(dir, "merge1.yaml",
               "domain: test-domain\n"
               "descriptors:\n"
               "  - {key: key1, value: value1, rate_limit: {unit: minute, requests_per_unit: 10}}\n"
               "  - {key: w, value: a*, rate_limit: {unit: minute, requests_per_unit: 11}}\n");
    write_file(
        dir, "merge2.yaml",
        "domain: test-domain\n"
        "descriptors:\n"
        "  - {key: key2, value: value2, rate_limit: {unit: minute, requests_per_unit: 20}}\n"
        "  - {key: w, value: ab*, rate_limit: {unit: minute, requests_per_unit: 21}}\n"
        "  - key: n\n"
        "    descriptors:\n"
        "      - {key: m, ip_prefix: 24, rate_limit: {unit: second, requests_per_unit: 22}}\n");
    write_file(dir, "other.yaml", "domain: other\ndescriptors: []\n");

    /* without the option: refused, naming both files, as Lyft's error */
    assert_null(sl_rules_load(dir, err, sizeof err));
    snprintf(q, sizeof q,
             "%s/merge2.yaml:1:9: domain 'test-domain' is already defined in %s/merge1.yaml:1:9 "
             "(--merge-domains merges them, as Lyft's MERGE_DOMAIN_CONFIG does)",
             dir, dir);
    assert_string_equal(err, q);

    sl_rules *r = sl_rules_load_flags(dir, SL_RULES_MERGE_DOMAINS, err, sizeof err);
    assert_non_null(r);
    assert_string_equal(err, "");
    assert_int_equal(sl_rules_flags(r), SL_RULES_MERGE_DOMAINS);
    assert_int_equal(sl_rules_ndomains(r), 2);
    const sl_rule_domain *d = sl_rules_find_domain(r, "test-domain", 11);
    assert_int_equal(d->nfiles, 2);
    snprintf(q, sizeof q, "%s/merge1.yaml", dir);
    assert_string_equal(d->file, q);
    assert_int_equal(d->root.nchildren, 5);
    assert_int_equal(L(MATCH(r, "test-domain", "key1", "value1")), 10);
    assert_int_equal(L(MATCH(r, "test-domain", "key2", "value2")), 20);
    /* wildcards in file order across the files: merge1's "a*" first */
    assert_int_equal(L(MATCH(r, "test-domain", "w", "abc")), 11);
    assert_int_equal(L(MATCH(r, "test-domain", "w", "ab*")), 21); /* its own text */
    /* a nested node of the second file still knows its path */
    assert_int_equal(L(MATCH(r, "test-domain", "n", "x", "m", "192.0.2.77")), 22);
    assert_string_equal(KEY(r, "test-domain", 0, "n", "x", "m", "192.0.2.77"),
                        "test-domain|n=x|m=192.0.2.0");
    assert_string_equal(MATCH(r, "test-domain", "n", "x", "m", "1")->path, "test-domain.n.m");
    char paths[512] = "";
    sl_rules_foreach(r, count_nodes, paths);
    assert_string_equal(paths, "test-domain test-domain.key1_value1 test-domain.w_a* "
                               "test-domain.key2_value2 test-domain.w_ab* test-domain.n "
                               "test-domain.n.m other ");
    sl_rules_free(r);

    /* the same descriptor in both files: refused, naming the other file */
    write_file(
        dir, "merge3.yaml",
        "domain: test-domain\n"
        "descriptors:\n"
        "  - {key: key1, value: value1, rate_limit: {unit: minute, requests_per_unit: 5}}\n");
    assert_null(sl_rules_load_flags(dir, SL_RULES_MERGE_DOMAINS, err, sizeof err));
    snprintf(q, sizeof q,
             "%s/merge3.yaml:3:5: duplicate descriptor: key 'key1' value 'value1', already in "
             "domain 'test-domain' of %s/merge1.yaml (line 3)",
             dir, dir);
    assert_string_equal(err, q);
    remove_file(dir, "merge3.yaml");
    write_file(dir, "merge3.yaml", "domain: test-domain\ndescriptors:\n  - key: n\n");
    assert_null(sl_rules_load_flags(dir, SL_RULES_MERGE_DOMAINS, err, sizeof err));
    assert_non_null(strstr(err, "merge3.yaml:3:5: duplicate descriptor: key 'n' without a value, "
                                "already in domain 'test-domain'"));
    assert_null(sl_rules_load_flags(dir, 0x80, err, sizeof err));
    assert_string_equal(err, "invalid argument");
    remove_file(dir, "merge1.yaml");
    remove_file(dir, "merge2.yaml");
    remove_file(dir, "merge3.yaml");
    remove_file(dir, "other.yaml");
    rmdir(dir);
}

/* ---- concurrency: N (SPEC 10, docs/rules.md) ----------------------------- */

static void concurrency_fields(void **state)
{
    (void)state;
    const char *yaml = "domain: llm\n"
                       "descriptors:\n"
                       "  - key: user\n"
                       "    rate_limit:\n"
                       "      - unit: minute\n"
                       "        requests_per_unit: 60\n"
                       "        concurrency: 4\n"
                       "        concurrency_ttl: 2m\n"
                       "  - key: db\n"
                       "    rate_limit:\n"
                       "      concurrency: 10\n";
    sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (r == NULL) fail_msg("%s", err);
    const sl_rule_node *u = MATCH(r, "llm", "user", "a");
    assert_int_equal(L(u), 60);
    assert_int_equal(u->concurrency, 4);
    assert_int_equal(u->concurrency_ttl_ms, 120000);
    /* concurrency alone: a descriptor that matches, no rate limit, TTL 60 s */
    const sl_rule_node *d = MATCH(r, "llm", "db", "x");
    assert_non_null(d);
    assert_int_equal(d->nlimits, 0);
    assert_int_equal(d->concurrency, 10);
    assert_int_equal(d->concurrency_ttl_ms, SL_DEFAULT_LEASE_TTL_MS);
    /* a plan that cannot take leases (conc REFUSE, the default) refuses it,
     * naming it: never unenforced */
    sl_rule_entry e = {"db", 2, "x", 1};
    const sl_rule_entry *descs[1] = {&e};
    int nd[1] = {1};
    static sl_check_plan plan;
    assert_int_equal(sl_check_plan_make(r, NULL, "llm", 3, descs, nd, 1, 1, 0, &plan, err,
                                        sizeof err),
                     SL_EINVAL);
    assert_string_equal(err, "descriptor 1: rule llm.db has concurrency: 10, which only RL.CHECK "
                             "and /v1/check take leases for: forward-auth and replay cannot hand "
                             "a lease back (use RL.ACQUIRE beside it; docs/rules.md)");
    sl_rules_free(r);

    expect_error(HEAD "      concurrency: 0\n", "t.yaml:5:20: ",
                 "concurrency must be from 1 to 100000, not '0'");
    expect_error(HEAD "      concurrency: 100001\n", "t.yaml:5:20: ",
                 "concurrency '100001' is too large (at most 100000)");
    expect_error(HEAD "      concurrency: 2.5\n", "t.yaml:5:20: ",
                 "concurrency must be a whole number from 1 to 100000, not '2.5'");
    expect_error(HEAD "      concurrency: four\n", "t.yaml:5:20: ",
                 "concurrency must be a whole number from 1 to 100000, not 'four'");
    expect_error(HEAD "      concurrency: -1\n", "t.yaml:5:20: ", "negative concurrency '-1'");
    expect_error(HEAD "      concurrency: 2\n      concurrency_ttl: 2d\n", "t.yaml:6:24: ",
                 "concurrency_ttl must be a duration from 1ms to 1d such as 30s, not '2d'");
    expect_error(HEAD "      unit: minute\n      requests_per_unit: 5\n      concurrency_ttl: 5s\n",
                 "t.yaml:7:24: ", "concurrency_ttl needs concurrency: N beside it");
    expect_error(HEAD "      concurrency: 2\n      algorithm: gcra\n", "t.yaml:6:18: ",
                 "algorithm needs a rate (unit and requests_per_unit) beside concurrency");
    expect_error(HEAD "      - concurrency: 2\n      - unit: minute\n        requests_per_unit: 5\n"
                      "        concurrency: 3\n",
                 "t.yaml:8:22: ", "concurrency given twice on one descriptor (the other at line 5)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lyft_example_1),
        cmocka_unit_test(lyft_example_2),
        cmocka_unit_test(lyft_example_3),
        cmocka_unit_test(lyft_example_4),
        cmocka_unit_test(lyft_example_5),
        cmocka_unit_test(lyft_example_6),
        cmocka_unit_test(lyft_example_7),
        cmocka_unit_test(lyft_example_8),
        cmocka_unit_test(lyft_example_9),
        cmocka_unit_test(extensions),
        cmocka_unit_test(aliases),
        cmocka_unit_test(match_order),
        cmocka_unit_test(match_no_backtracking),
        cmocka_unit_test(counting_keys),
        cmocka_unit_test(ip_prefix),
        cmocka_unit_test(bad_values),
        cmocka_unit_test(bad_structure),
        cmocka_unit_test(bad_bytes),
        cmocka_unit_test(bad_caps),
        cmocka_unit_test(directory),
        cmocka_unit_test(unreadable_entries),
        cmocka_unit_test(permission_denied),
        cmocka_unit_test(total_size_cap),
        cmocka_unit_test(lyft_wildcards),
        cmocka_unit_test(lyft_wildcard_precedence),
        cmocka_unit_test(lyft_share_threshold),
        cmocka_unit_test(lyft_metric_names),
        cmocka_unit_test(lyft_new_fields),
        cmocka_unit_test(lyft_bad_files),
        cmocka_unit_test(lyft_merge_domains),
        cmocka_unit_test(concurrency_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
