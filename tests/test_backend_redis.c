/*
 * test_backend_redis.c -- the Redis backend's --backend URL parser
 * (sl_redis_url_parse): what each part becomes, the URL shown in messages
 * (never the password), and the exact message naming the wrong part; and
 * the bounded reply reader (redis/reply.h): what it refuses, and why,
 * before allocating, and the real replies it reads whole; and what the
 * seam (backend.h) says of --backend and --on-backend-error, and of a
 * backend that decides here (nothing beyond its stats).
 * Talking to Redis is tests/e2e/test_backend_redis.py's and the redis row
 * of tests/test_backend.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/buffer.h>

#include "backend_local.h"
#include "backend_redis.h"
#include "redis/holds.h"
#include "redis/redis_int.h"
#include "redis/reply.h"

static void parse_ok(const char *url, const char *host, int port, int db, const char *user,
                     const char *pass, const char *shown)
{
    sl_redis_url u;
    char err[512] = "";
    if (sl_redis_url_parse(url, strlen(url), &u, err, sizeof err) != 0)
        fail_msg("%s: refused: %s", url, err);
    assert_string_equal(u.host, host);
    assert_int_equal(u.port, port);
    assert_int_equal(u.db, db);
    assert_string_equal(u.user, user);
    assert_string_equal(u.pass, pass);
    assert_string_equal(u.shown, shown);
}

static void parse_bad(const char *url, const char *want)
{
    sl_redis_url u;
    char err[512] = "";
    if (sl_redis_url_parse(url, strlen(url), &u, err, sizeof err) == 0)
        fail_msg("%s: accepted", url);
    if (strcmp(err, want) != 0) fail_msg("%s:\n  got  %s\n  want %s", url, err, want);
}

static void test_parts(void **state)
{
    (void)state;
    parse_ok("redis://127.0.0.1:6379", "127.0.0.1", 6379, 0, "", "", "redis://127.0.0.1:6379/0");
    parse_ok("redis://localhost:1/15", "localhost", 1, 15, "", "", "redis://localhost:1/15");
    parse_ok("REDIS://h:65535/0", "h", 65535, 0, "", "", "redis://h:65535/0");
    parse_ok("redis://:pw@h:2", "h", 2, 0, "", "pw", "redis://:***@h:2/0");
    parse_ok("redis://app:s%40cr%3At@h:2/3", "h", 2, 3, "app", "s@cr:t", "redis://app:***@h:2/3");
    parse_ok("redis://app:p@ss@h:2", "h", 2, 0, "app", "p@ss", "redis://app:***@h:2/0");
    parse_ok("redis://[::1]:6379/2", "::1", 6379, 2, "", "", "redis://[::1]:6379/2");
    /* no :port: Redis's own, 6379, as redis-cli and Redis URLs take it */
    parse_ok("redis://127.0.0.1", "127.0.0.1", 6379, 0, "", "", "redis://127.0.0.1:6379/0");
    parse_ok("redis://h/3", "h", 6379, 3, "", "", "redis://h:6379/3");
    parse_ok("redis://:pw@h", "h", 6379, 0, "", "pw", "redis://:***@h:6379/0");
    parse_ok("redis://[::1]", "::1", 6379, 0, "", "", "redis://[::1]:6379/0");
    parse_ok("redis://[::1]/1", "::1", 6379, 1, "", "", "redis://[::1]:6379/1");
}

/* A list and a cluster's seeds without ports: each 6379. */
static void test_default_port_in_lists(void **state)
{
    (void)state;
    sl_redis_url u[SL_RING_MAX];
    char err[700] = "";
    int n = 0;
    const char ring[] = "redis://a,redis://b:7000,redis://[::1]";
    if (sl_redis_urls_parse(ring, strlen(ring), u, &n, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(n, 3);
    assert_string_equal(u[0].shown, "redis://a:6379/0");
    assert_string_equal(u[1].shown, "redis://b:7000/0");
    assert_string_equal(u[2].shown, "redis://[::1]:6379/0");
    const char seeds[] = "redis-cluster://:pw@a,b:7000,[::1]";
    if (sl_redis_urls_parse(seeds, strlen(seeds), u, &n, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(n, 3);
    assert_int_equal(u[0].port, 6379);
    assert_string_equal(u[0].pass, "pw");
    assert_int_equal(u[1].port, 7000);
    assert_string_equal(u[2].host, "::1");
    assert_int_equal(u[2].port, 6379);
    /* one server twice, once with its port and once without */
    const char twice[] = "redis://a,redis://a:6379";
    assert_int_equal(sl_redis_urls_parse(twice, strlen(twice), u, &n, err, sizeof err), -1);
    assert_string_equal(err, "elements 1 and 2 of 2 are the same server a:6379/0");
}

/* Every form --backend takes, as the message of a value with another
 * scheme or none lists them. */
#define FORMS                                                                                      \
    "use local, redis://[user:password@]host[:port][/db], several redis:// URLs separated by "     \
    "commas (a ring: redis://a:6379,redis://b:6379), "                                             \
    "redis-cluster://[user:password@]host[:port][,host[:port]...] (no :port: 6379), or "           \
    "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name (no :port: 26379)"

static void test_errors(void **state)
{
    (void)state;
    parse_bad("redis://[::1]x", "'redis://[::1]x': expected :port or /db after the host");
    parse_bad("redis://h:", "'redis://h:': the port must be a number 1..65535");
    parse_bad("redis://h:0", "'redis://h:0': the port must be a number 1..65535");
    parse_bad("redis://h:65536", "'redis://h:65536': the port must be a number 1..65535");
    parse_bad("redis://h:+1", "'redis://h:+1': the port must be a number 1..65535");
    parse_bad("redis://h:1/", "'redis://h:1/': missing db number after '/'");
    parse_bad("redis://h:1/-1", "'redis://h:1/-1': the db must be a number 0..2147483647");
    parse_bad("redis://h:1/2147483648",
              "'redis://h:1/2147483648': the db must be a number 0..2147483647");
    parse_bad("redis://:1", "'redis://:1': missing host");
    parse_bad("redis://h*x:1", "'redis://h*x:1': the host holds a character a host cannot");
    parse_bad("redis://[::1:1", "'redis://[::1:1': '[' of an IPv6 host without ']'");
    parse_bad("redis://u@h:1", "'redis://***@h:1': the part before '@' must be user:password "
                               "(or :password)");
    parse_bad("redis://u:@h:1", "'redis://***@h:1': empty password");
    parse_bad("redis://u:%zz@h:1", "'redis://***@h:1': malformed or too long password");
    parse_bad("redis://u:secret@h:0", "'redis://***@h:0': the port must be a number 1..65535");
    parse_bad("rediss://h:1",
              "'rediss://h:1': TLS to Redis (rediss://) is not supported: use redis:// "
              "(docs/fleet.md)");
    parse_bad("http://h:1", "'http://h:1': unknown scheme 'http://': " FORMS);
    parse_bad("redis+sentinel://u:secret@h:1",
              "'redis+sentinel://...': unknown scheme 'redis+sentinel://': " FORMS);
    parse_bad("h:6379", "'h:6379': no scheme: " FORMS);
    parse_bad("redis://h :1", "'redis://h :1': a space or control byte in the URL");
    parse_bad("", "'': no scheme: " FORMS);
}

/* Feeds bytes to a bounded reader (ac: the async context whose commands
 * replies must match, or NULL): the first reply's type, or -1 when the
 * reader failed; why gets the refusal. */
static int read_one(const char *bytes, size_t len, const redisAsyncContext *ac, char *why,
                    size_t cap)
{
    redisReader *r = redisReaderCreate();
    assert_non_null(r);
    sl_redis_rbound b;
    memset(&b, 0, sizeof b);
    b.ac = ac;
    sl__redis_reader_bound(r, &b);
    assert_int_equal(redisReaderFeed(r, bytes, len), REDIS_OK);
    void *reply = NULL;
    int type = redisReaderGetReply(r, &reply) == REDIS_OK && reply != NULL
                   ? ((redisReply *)reply)->type
                   : -1;
    sl__redis_reply_free(reply);
    snprintf(why, cap, "%s", b.why);
    redisReaderFree(r);
    return type;
}

static void test_reply_bounds(void **state)
{
    (void)state;
    char why[200];
    /* real replies: the script's six fields, a status, an error */
    const char six[] = "*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:10000\r\n:0\r\n";
    assert_int_equal(read_one(six, sizeof six - 1, NULL, why, sizeof why), REDIS_REPLY_ARRAY);
    assert_string_equal(why, "");
    assert_int_equal(read_one("+OK\r\n", 5, NULL, why, sizeof why), REDIS_REPLY_STATUS);
    /* an array past the bound: refused before its pointers are allocated */
    assert_int_equal(read_one("*2147483647\r\n", 13, NULL, why, sizeof why), -1);
    assert_string_equal(why, "an array of 2147483647 elements (at most 16384)");
    /* arrays within the bound each, past it together: the reply's objects
     * in all (16 full arrays of 16,384 in one) */
    size_t cap = 16 + 16 * (16 + 4 * 16384), len = 0;
    char *many = malloc(cap);
    assert_non_null(many);
    len += (size_t)snprintf(many, cap, "*16384\r\n");
    for (int a = 0; a < 16; a++) {
        len += (size_t)snprintf(many + len, cap - len, "*16384\r\n");
        for (int i = 0; i < 16384; i++, len += 4) memcpy(many + len, ":1\r\n", 4);
    }
    assert_int_equal(read_one(many, len, NULL, why, sizeof why), -1);
    assert_string_equal(why, "a reply of more than 262144 objects");
    free(many);
    int n;
    /* a string past the bound, once whole */
    static char big[SL_REDIS_REPLY_STRING + 64];
    n = snprintf(big, sizeof big, "$%d\r\n", SL_REDIS_REPLY_STRING + 1);
    memset(big + n, 'x', SL_REDIS_REPLY_STRING + 1);
    memcpy(big + n + SL_REDIS_REPLY_STRING + 1, "\r\n", 2);
    assert_int_equal(read_one(big, (size_t)n + SL_REDIS_REPLY_STRING + 3, NULL, why, sizeof why),
                     -1);
    assert_string_equal(why, "a string of 65537 bytes (at most 65536)");
    /* a reply while no command waits for one */
    static redisAsyncContext idle; /* its replies list empty */
    assert_int_equal(read_one("+OK\r\n", 5, &idle, why, sizeof why), -1);
    assert_string_equal(why, "a reply that matches no command sent (a reply too many)");
}

/* --backend through the seam: checked as sl_redis_urls_parse checks it
 * (its exact message), and shown without its passwords. */
/* The handshake's probe: which path a connection takes from RL.PEEK's
 * answer, given whether COMMAND INFO found RL.CHECKPLAN.  A cluster state
 * that passes must never put a connection on the script's path beside the
 * module's (two counters for one key). */
static void test_probe_path(void **state)
{
    (void)state;
    char why[300] = "COMMAND INFO: no RL.CHECKPLAN";
    redisReply err = {.type = REDIS_REPLY_ERROR};
    redisReply six = {.type = REDIS_REPLY_ARRAY, .elements = 6};
    /* no module: the script, and why stays what COMMAND INFO said */
    assert_int_equal(sl__redis_probe_path(0, &six, why, sizeof why), 0);
    assert_string_equal(why, "COMMAND INFO: no RL.CHECKPLAN");
    assert_int_equal(sl__redis_probe_path(-1, &six, why, sizeof why), 0);
    /* the module answered: its path */
    assert_int_equal(sl__redis_probe_path(1, &six, why, sizeof why), 1);
    static const struct {
        const char *str;
        int path;
    } cases[] = {
        {"MOVED 3999 127.0.0.1:7001", 1},
        {"ASK 3999 127.0.0.1:7001", 1},
        {"CLUSTERDOWN Hash slot not served", -1},
        {"CLUSTERDOWN The cluster is down", -1},
        {"TRYAGAIN Multiple keys request during rehashing of slot", -1},
        {"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", -1},
        {"BUSY Redis is busy running a script.", -1},
        {"NOPERM User u has no permissions to run the 'rl.peek' command", 0},
        {"ERR unknown command 'RL.PEEK'", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char str[200];
        snprintf(str, sizeof str, "%s", cases[i].str);
        err.str = str;
        err.len = strlen(str);
        why[0] = '\0';
        int got = sl__redis_probe_path(1, &err, why, sizeof why);
        if (got != cases[i].path) fail_msg("%s: path %d, expected %d", str, got, cases[i].path);
        if (got != 1 && strstr(why, str) == NULL) fail_msg("%s: why is '%s'", str, why);
    }
    /* no answer: the script's, as before (the handshake's deadline drops it) */
    assert_int_equal(sl__redis_probe_path(1, NULL, why, sizeof why), 0);
    assert_string_equal(why, "RL.PEEK: no answer");
}

static void test_seam_url(void **state)
{
    (void)state;
    char err[600] = "", want[600] = "", shown[1024];
    int n;
    assert_int_equal(sl_backend_url_check("local", 5, err, sizeof err), 0);
    assert_int_equal(sl_backend_url_check("redis://h:1,redis://h:2/1", 25, err, sizeof err), 0);
    const char *bad = "redis://h:1,redis://h:99999";
    assert_int_equal(sl_backend_url_check(bad, strlen(bad), err, sizeof err), -1);
    assert_int_equal(sl_redis_urls_parse(bad, strlen(bad), NULL, &n, want, sizeof want), -1);
    assert_string_equal(err, want);
    assert_int_equal(sl_backend_url_check("locals", 6, err, sizeof err), -1);

    sl_backend_url_shown("local", shown, sizeof shown);
    assert_string_equal(shown, "local");
    sl_backend_url_shown("redis://app:s3cret@h:2/3,redis://:pw@[::1]", shown, sizeof shown);
    assert_string_equal(shown, "redis://app:***@h:2/3,redis://:***@[::1]:6379/0");
    sl_backend_url_shown("redis-cluster://u:pw@127.0.0.1:7000,127.0.0.1:7001", shown,
                         sizeof shown);
    assert_string_equal(shown, "redis-cluster://u:***@127.0.0.1:7000,127.0.0.1:7001");
}

/* --on-backend-error's names, in sl_backend_policy's order. */
static void test_seam_policy_names(void **state)
{
    (void)state;
    assert_string_equal(sl_backend_policy_name(SL_BACKEND_DENY), "deny");
    assert_string_equal(sl_backend_policy_name(SL_BACKEND_ALLOW), "allow");
    assert_string_equal(sl_backend_policy_name(SL_BACKEND_LOCAL), "local");
    assert_null(sl_backend_policy_name(SL_BACKEND_POLICIES));
    assert_null(sl_backend_policy_name(-1));
    assert_int_equal(SL_REDIS_DENY, SL_BACKEND_DENY); /* the Redis backend's names */
    assert_int_equal(SL_REDIS_LOCAL, SL_BACKEND_LOCAL);
}

static void count_line(void *arg, const char *name, const char *value)
{
    (void)name, (void)value;
    (*(int *)arg)++;
}

/* The local backend, made by sl_backend_open: nothing to tell beyond its
 * stats -- no INFO lines, no /metrics families, no remote state. */
static void test_seam_local(void **state)
{
    (void)state;
    char err[200] = "";
    sl_store *s = sl_store_new(NULL, NULL);
    assert_non_null(s);
    sl_backend_opts o = {.url = "local", .store = s};
    sl_backend *b = sl_backend_open(&o, err, sizeof err);
    assert_non_null(b);
    assert_string_equal(b->ops->name, "local");
    int lines = 0;
    sl_backend_info(b, count_line, &lines);
    assert_int_equal(lines, 0);
    struct evbuffer *out = evbuffer_new();
    assert_int_equal(sl_backend_metrics_write(out, b), 0);
    assert_int_equal(evbuffer_get_length(out), 0);
    evbuffer_free(out);
    sl_backend_state st;
    assert_int_equal(sl_backend_state_get(b, &st), -1);
    sl_backend_free(b);
    sl_store_free(s);
}

/* ---- lease keys' Redis names (redis/holds.h) ------------------------------ */

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

/* A check's lease key gets the tag of its domain's counters (the item's
 * taglen, check.c), for domains whose bytes the keys escape and for long
 * keys; and no two keys -- '{', '}', '|', '%' anywhere -- share a name. */
static void test_lease_names(void **state)
{
    (void)state;
    static sl_check_plan plan;
    static const char *const domains[] = {"llm", "a%b", "x|y=z#w", "}{", "{a}", "%%%"};
    static char v[601];
    memset(v, 'v', 600);
    for (size_t d = 0; d < sizeof domains / sizeof *domains; d++) {
        char yaml[256], err[512] = "";
        int n = snprintf(yaml, sizeof yaml,
                         "domain: '%s'\n"
                         "descriptors:\n"
                         "  - key: user\n"
                         "    rate_limit:\n"
                         "      - {unit: minute, requests_per_unit: 3}\n"
                         "      - {concurrency: 2}\n",
                         domains[d]);
        sl_rules *r = sl_rules_load_buffer("t.yaml", yaml, (size_t)n, err, sizeof err);
        if (r == NULL) fail_msg("%s: %s", domains[d], err);
        for (size_t vlen = 1; vlen <= 600; vlen += 599) { /* short, long (the digest form) */
            sl_rule_entry e = {"user", 4, v, vlen};
            const sl_rule_entry *descs[1] = {&e};
            int ndesc[1] = {1};
            sl_check_input in = {.domain = domains[d], .dlen = strlen(domains[d]), .n = 1,
                                 .descs = descs, .ndesc = ndesc, .cost = 1,
                                 .conc = SL_CHECK_CONC_LEASE};
            if (sl_check_plan_build(r, &in, &plan, err, sizeof err) != 0)
                fail_msg("%s: %s", domains[d], err);
            assert_int_equal(plan.nleases, 1);
            const sl_check_lease *ls = &plan.leases[0];
            size_t t = sl__redis_lease_tag(ls->key, ls->keylen);
            if (t != plan.items[0].taglen || memcmp(ls->key, plan.items[0].key, t) != 0)
                fail_msg("domain '%s', value of %zu bytes: the lease tag is %zu bytes, the "
                         "counters' %zu", domains[d], vlen, t, plan.items[0].taglen);
            char a[KEYBUF], b[KEYBUF];
            size_t an = sl__redis_hold_name(a, 'l', ls->key, ls->keylen, t);
            size_t bn = sl__redis_key(b, (int)plan.items[0].p.algo, 1, plan.items[0].key,
                                      plan.items[0].keylen, plan.items[0].taglen);
            /* the same slot -- but for a domain starting with '}', whose
             * Redis tag is empty: Redis hashes each name whole, the
             * counters' too (route.c refuses such a check as cross-slot) */
            if (domains[d][0] != '}') assert_int_equal(sl_key_slot(a, an), sl_key_slot(b, bn));
        }
        sl_rules_unref(r);
    }
    assert_int_equal(sl__redis_lease_tag("llm|user=bob|conc", 17), 3);
    assert_int_equal(sl__redis_lease_tag("a%7C|x|conc", 11), 2);
    assert_int_equal(sl__redis_lease_tag("%%|x|conc", 9), 9);   /* nothing left: whole */
    assert_int_equal(sl__redis_lease_tag("x|conc", 6), 6);      /* no "<domain>|" before */
    assert_int_equal(sl__redis_lease_tag("a|b|conc}", 9), 9);   /* not the form */
    assert_int_equal(sl__redis_lease_tag("db", 2), 2);

    /* every key of up to 5 bytes of "a{}|%", each alone, + "|conc" and +
     * "|x|conc": 11,717 keys, 11,717 names */
    static const char abc[] = "a{}|%";
    static const char *const sufs[] = {"", "|conc", "|x|conc"};
    enum { MAXN = 3 * 3906 };
    static char names[MAXN][32];
    int nn = 0;
    for (int len = 0; len <= 5; len++) {
        int total = 1;
        for (int i = 0; i < len; i++) total *= 5;
        for (int x = 0; x < total; x++) {
            char key[16];
            for (int i = 0, y = x; i < len; i++, y /= 5) key[i] = abc[y % 5];
            for (int s = 0; s < 3; s++) {
                size_t sl = strlen(sufs[s]), kl = (size_t)len + sl;
                if (kl == 0) continue;
                memcpy(key + len, sufs[s], sl);
                char *o = names[nn++];
                size_t on = sl__redis_hold_name(o, 'l', key, kl, sl__redis_lease_tag(key, kl));
                o[on] = '\0';
            }
        }
    }
    assert_int_equal(nn, MAXN - 1); /* the empty key is none */
    qsort(names, (size_t)nn, sizeof names[0], by_name);
    for (int i = 1; i < nn; i++)
        if (strcmp(names[i - 1], names[i]) == 0) fail_msg("two keys named %s", names[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_default_port_in_lists),
        cmocka_unit_test(test_reply_bounds),
        cmocka_unit_test(test_probe_path),
        cmocka_unit_test(test_seam_url),
        cmocka_unit_test(test_seam_policy_names),
        cmocka_unit_test(test_seam_local),
        cmocka_unit_test(test_lease_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
