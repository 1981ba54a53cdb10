/*
 * test_sentinel.c -- redis-sentinel:// without a socket: the URL parser
 * (sl_redis_sentinel_parse: what each part becomes, the URL shown without
 * its password, the exact message naming what is wrong and where, and the
 * same through the seam: sl_backend_url_check, sl_backend_url_shown), and
 * the readers of what a Sentinel and a master answer (redis/sentinel.h),
 * fed replies read from bytes by the backend's bounded reader -- real
 * ones, and hostile ones (wrong types, huge or nested arrays, bad ports,
 * hosts with bytes a host cannot hold) that must be refused with a reason,
 * never read past.  Following a real failover is
 * tests/e2e/test_sentinel.py's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_redis.h"
#include "redis/reply.h"
#include "redis/sentinel.h"

/* ---- the URL ------------------------------------------------------------- */

static void parse_bad(const char *url, const char *want)
{
    sl_redis_sentinel s;
    char err[600] = "";
    if (sl_redis_sentinel_parse(url, strlen(url), &s, err, sizeof err) == 0)
        fail_msg("%s: accepted", url);
    if (strcmp(err, want) != 0) fail_msg("%s:\n  got  %s\n  want %s", url, err, want);
    /* the seam says the same */
    char err2[600] = "";
    assert_int_equal(sl_backend_url_check(url, strlen(url), err2, sizeof err2), -1);
    assert_string_equal(err2, want);
}

static void test_url_parts(void **state)
{
    (void)state;
    sl_redis_sentinel s;
    char err[600] = "";
    const char *url = "redis-sentinel://app:s%40cr%2Ft@127.0.0.1:26380,[::1],sen.example:1/my-master";
    if (sl_redis_sentinel_parse(url, strlen(url), &s, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.at[0].host, "127.0.0.1");
    assert_int_equal(s.at[0].port, 26380);
    assert_string_equal(s.at[1].host, "::1");
    assert_int_equal(s.at[1].port, SL_REDIS_SENTINEL_PORT); /* no :port: Sentinel's own */
    assert_string_equal(s.at[2].host, "sen.example");
    assert_int_equal(s.at[2].port, 1);
    assert_string_equal(s.name, "my-master");
    assert_string_equal(s.master.user, "app");
    assert_string_equal(s.master.pass, "s@cr/t");
    assert_int_equal(s.master.db, 0);
    assert_string_equal(s.shown, "redis-sentinel://app:***@127.0.0.1:26380,[::1]:26379,"
                                 "sen.example:1/my-master");
    /* no password: nothing hidden; the scheme in any case */
    url = "REDIS-SENTINEL://h/m";
    assert_int_equal(sl_redis_sentinel_parse(url, strlen(url), &s, err, sizeof err), 0);
    assert_string_equal(s.shown, "redis-sentinel://h:26379/m");
    assert_string_equal(s.master.pass, "");
    /* :password alone */
    url = "redis-sentinel://:pw@h:2/m";
    assert_int_equal(sl_redis_sentinel_parse(url, strlen(url), &s, err, sizeof err), 0);
    assert_string_equal(s.master.pass, "pw");
    assert_string_equal(s.shown, "redis-sentinel://:***@h:2/m");
    /* through the seam: accepted, shown without the password; a list of
     * servers gives none (the Sentinels tell where the master is) */
    char shown[SL_REDIS_URL_MAX];
    url = "redis-sentinel://u:s3cret@127.0.0.1:1,127.0.0.1:2/m";
    assert_int_equal(sl_backend_url_check(url, strlen(url), err, sizeof err), 0);
    sl_backend_url_shown(url, shown, sizeof shown);
    assert_string_equal(shown, "redis-sentinel://u:***@127.0.0.1:1,127.0.0.1:2/m");
    sl_redis_url u[SL_RING_MAX];
    int n = -1;
    assert_int_equal(sl_redis_urls_parse(url, strlen(url), u, &n, err, sizeof err), 0);
    assert_int_equal(n, 0);
    /* SL_REDIS_SENTINELS_MAX Sentinels are taken */
    char many[SL_REDIS_URL_MAX];
    size_t len = (size_t)snprintf(many, sizeof many, "redis-sentinel://");
    for (int i = 0; i < SL_REDIS_SENTINELS_MAX; i++)
        len += (size_t)snprintf(many + len, sizeof many - len, "%sh:%d", i ? "," : "", i + 1);
    snprintf(many + len, sizeof many - len, "/m");
    assert_int_equal(sl_redis_sentinel_parse(many, strlen(many), &s, err, sizeof err), 0);
    assert_int_equal(s.n, SL_REDIS_SENTINELS_MAX);
}

static void test_url_errors(void **state)
{
    (void)state;
    static const char form[] =
        "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name";
    char want[600];
    snprintf(want, sizeof want,
             "'redis-sentinel://127.0.0.1:26379': expected /master-name after the Sentinels (%s)",
             form);
    parse_bad("redis-sentinel://127.0.0.1:26379", want);
    snprintf(want, sizeof want, "'redis-sentinel://***@h': expected /master-name after the "
                                "Sentinels (%s)", form);
    parse_bad("redis-sentinel://u:s3cret@h", want); /* the password never shown */
    snprintf(want, sizeof want, "'redis-sentinel:///m': no Sentinel before '/master-name' (%s)",
             form);
    parse_bad("redis-sentinel:///m", want);
    parse_bad("redis-sentinel://h:1/", "'redis-sentinel://h:1/': missing master name after '/'");
    parse_bad("redis-sentinel://h:1/m/0",
              "'redis-sentinel://h:1/m/0': a master name holds no '/' (no /db: the master's db 0)");
    parse_bad("redis-sentinel://h:0/m",
              "Sentinel 1: 'redis-sentinel://h:0': the port must be a number 1..65535");
    parse_bad("redis-sentinel://h:1,h:65536/m",
              "Sentinel 2: 'redis-sentinel://h:65536': the port must be a number 1..65535");
    parse_bad("redis-sentinel://u:s3cret@h:1,h:x/m",
              "Sentinel 2: 'redis-sentinel://***@h:x': the port must be a number 1..65535");
    parse_bad("redis-sentinel://u:@h/m", "Sentinel 1: 'redis-sentinel://***@h': empty password");
    parse_bad("redis-sentinel://u:%zz@h/m",
              "Sentinel 1: 'redis-sentinel://***@h': malformed or too long password");
    parse_bad("redis-sentinel://u@h/m", "Sentinel 1: 'redis-sentinel://***@h': the part before "
                                        "'@' must be user:password (or :password)");
    parse_bad("redis-sentinel://h*x:1/m",
              "Sentinel 1: 'redis-sentinel://h*x:1': the host holds a character a host cannot");
    parse_bad("redis-sentinel://h:1,/m", "Sentinel 2: 'redis-sentinel://': missing host");
    parse_bad("redis-sentinel://,h:1/m", "Sentinel 1: 'redis-sentinel://': missing host");
    parse_bad("redis-sentinel://[::1:1/m",
              "Sentinel 1: 'redis-sentinel://[::1:1': '[' of an IPv6 host without ']'");
    parse_bad("redis-sentinel://h,h:26379/m", "Sentinels 1 and 2 are the same, h:26379");
    parse_bad("redis-sentinel://h:1/m x", "'redis-sentinel://h:1/m x': a space or control byte "
                                          "in the URL");
    /* too many Sentinels, a name too long, a URL too long */
    char many[SL_REDIS_URL_MAX];
    size_t len = (size_t)snprintf(many, sizeof many, "redis-sentinel://");
    for (int i = 0; i <= SL_REDIS_SENTINELS_MAX; i++)
        len += (size_t)snprintf(many + len, sizeof many - len, "%sh:%d", i ? "," : "", i + 1);
    snprintf(many + len, sizeof many - len, "/m");
    parse_bad(many, "'redis-sentinel://...': more than 16 Sentinels");
    char name[600];
    int k = snprintf(name, sizeof name, "redis-sentinel://h:1/");
    memset(name + k, 'n', 256);
    name[k + 256] = '\0';
    sl_redis_sentinel s;
    char err[600];
    assert_int_equal(sl_redis_sentinel_parse(name, strlen(name), &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "': master name longer than 255 bytes"));
    static char huge[SL_REDIS_URL_MAX + 8];
    k = snprintf(huge, sizeof huge, "redis-sentinel://u:s3cret@h:1/");
    memset(huge + k, 'n', sizeof huge - 1 - (size_t)k);
    assert_int_equal(sl_redis_sentinel_parse(huge, strlen(huge), &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "...': longer than 1023 bytes"));
    assert_null(strstr(err, "s3cret"));
    /* another scheme: every form --backend takes, this one among them */
    assert_int_equal(sl_redis_sentinel_parse("redis://h/m", 11, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "redis-sentinel://[user:password@]host[:port][,host[:port]...]"
                                "/master-name (no :port: 26379)"));
}

/* ---- the replies --------------------------------------------------------- */

/* The reply in bytes[0..len), read by the backend's bounded reader
 * (NULL when the reader refused it); free with sl__redis_reply_free. */
static redisReply *reply_of(const char *bytes, size_t len)
{
    redisReader *r = redisReaderCreate();
    assert_non_null(r);
    sl_redis_rbound b;
    memset(&b, 0, sizeof b);
    sl__redis_reader_bound(r, &b);
    assert_int_equal(redisReaderFeed(r, bytes, len), REDIS_OK);
    void *reply = NULL;
    if (redisReaderGetReply(r, &reply) != REDIS_OK) reply = NULL;
    redisReaderFree(r);
    return reply;
}

/* SENTINEL get-master-addr-by-name's reply given as bytes: rc, and the
 * host:port found or the reason given. */
static void addr_case(const char *bytes, size_t len, int want_rc, const char *want)
{
    redisReply *x = reply_of(bytes, len);
    assert_non_null(x);
    char host[SL_SENTINEL_HOST], why[300] = "", got[400];
    int port = -1;
    int rc = sl__sentinel_addr_says(x, host, &port, why, sizeof why);
    sl__redis_reply_free(x);
    if (rc == 1)
        snprintf(got, sizeof got, "%s:%d", host, port);
    else
        snprintf(got, sizeof got, "%s", why);
    if (rc != want_rc || (rc != 0 && strcmp(got, want) != 0))
        fail_msg("%.60s: got %d '%s', want %d '%s'", bytes, rc, got, want_rc, want);
    if (rc != 1) {
        assert_int_equal(port, 0); /* nothing half-given */
        assert_string_equal(host, "");
    }
    if (rc == -1) assert_true(why[0] != '\0');
}

#define ADDR(lit, rc, want) addr_case(lit, sizeof lit - 1, rc, want)

static void test_addr_reply(void **state)
{
    (void)state;
    ADDR("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", 1, "127.0.0.1:6380");
    ADDR("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n", 1, "::1:65535");
    ADDR("*2\r\n$14\r\nredis-1.local_\r\n$1\r\n1\r\n", 1, "redis-1.local_:1");
    /* nil: no master of that name (RESP2's null array, or a null string) */
    ADDR("*-1\r\n", 0, "");
    ADDR("$-1\r\n", 0, "");
    ADDR("-ERR unknown command\r\n", -1, "ERR unknown command");
    ADDR("-NOAUTH Authentication required.\r\n", -1, "NOAUTH Authentication required.");
    ADDR("-\r\n", -1, "an error without a message"); /* found by the fuzz target */
    ADDR("-\x00@\r\n", -1, "an error without a message");
    /* wrong types and shapes */
    ADDR("+OK\r\n", -1, "a status, not [host, port]");
    ADDR(":6379\r\n", -1, "an integer, not [host, port]");
    ADDR("$9\r\n127.0.0.1\r\n", -1, "a string, not [host, port]");
    ADDR("*0\r\n", -1, "an array of 0 elements, not [host, port]");
    ADDR("*1\r\n$1\r\nh\r\n", -1, "an array of 1 elements, not [host, port]");
    ADDR("*3\r\n$1\r\nh\r\n$1\r\n1\r\n$1\r\n2\r\n", -1, "an array of 3 elements, not [host, port]");
    ADDR("*2\r\n$1\r\nh\r\n:6379\r\n", -1, "[a string, an integer], not two strings [host, port]");
    ADDR("*2\r\n*1\r\n$1\r\nh\r\n$1\r\n1\r\n", -1,
         "[an array, a string], not two strings [host, port]");
    ADDR("*2\r\n$-1\r\n$1\r\n1\r\n", -1, "[nil, a string], not two strings [host, port]");
    ADDR("*2\r\n+h\r\n+1\r\n", -1, "[a status, a status], not two strings [host, port]");
    ADDR("*2\r\n-ERR\r\n$1\r\n1\r\n", -1, "[an error, a string], not two strings [host, port]");
    /* bad ports */
    ADDR("*2\r\n$1\r\nh\r\n$1\r\n0\r\n", -1, "a port of 1 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$5\r\n65536\r\n", -1, "a port of 5 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$2\r\n-1\r\n", -1, "a port of 2 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$3\r\n+80\r\n", -1, "a port of 3 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$3\r\n80 \r\n", -1, "a port of 3 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$0\r\n\r\n", -1, "a port of 0 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$6\r\n006379\r\n", -1, "a port of 6 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$20\r\n18446744073709557995\r\n", -1,
         "a port of 20 bytes that is not a number 1..65535");
    ADDR("*2\r\n$1\r\nh\r\n$3\r\n8\x00" "0\r\n", -1, "a port of 3 bytes that is not a number 1..65535");
    /* bad hosts: empty, a NUL, a space, a '/', a newline */
    ADDR("*2\r\n$0\r\n\r\n$1\r\n1\r\n", -1, "a host of 0 bytes (1..255)");
    ADDR("*2\r\n$3\r\na\x00" "b\r\n$1\r\n1\r\n", -1, "the host holds a byte a host cannot (0x00)");
    ADDR("*2\r\n$3\r\na b\r\n$1\r\n1\r\n", -1, "the host holds a byte a host cannot (0x20)");
    ADDR("*2\r\n$3\r\na/b\r\n$1\r\n1\r\n", -1, "the host holds a byte a host cannot (0x2f)");
    ADDR("*2\r\n$3\r\na\nb\r\n$1\r\n1\r\n", -1, "the host holds a byte a host cannot (0x0a)");
    /* a host of 256 bytes: one too many (255 is taken) */
    char buf[600];
    int n = snprintf(buf, sizeof buf, "*2\r\n$256\r\n");
    memset(buf + n, 'h', 256);
    n += 256;
    n += snprintf(buf + n, sizeof buf - (size_t)n, "\r\n$1\r\n1\r\n");
    addr_case(buf, (size_t)n, -1, "a host of 256 bytes (1..255)");
    n = snprintf(buf, sizeof buf, "*2\r\n$255\r\n");
    memset(buf + n, 'h', 255);
    n += 255;
    n += snprintf(buf + n, sizeof buf - (size_t)n, "\r\n$2\r\n10\r\n");
    redisReply *x = reply_of(buf, (size_t)n);
    char host[SL_SENTINEL_HOST], why[300];
    int port;
    assert_int_equal(sl__sentinel_addr_says(x, host, &port, why, sizeof why), 1);
    assert_int_equal(strlen(host), 255);
    assert_int_equal(port, 10);
    sl__redis_reply_free(x);
    /* a huge array: within the reader's bound, 16,384 elements, refused by shape */
    size_t cap = 32 + 16384 * 4, len = 0;
    char *big = malloc(cap);
    assert_non_null(big);
    len += (size_t)snprintf(big, cap, "*16384\r\n");
    for (int i = 0; i < 16384; i++, len += 4) memcpy(big + len, ":1\r\n", 4);
    addr_case(big, len, -1, "an array of 16384 elements, not [host, port]");
    /* past the reader's bound: refused before any parser sees it */
    assert_null(reply_of("*2147483647\r\n", 13));
    free(big);
    /* no reply at all (the connection went) */
    assert_int_equal(sl__sentinel_addr_says(NULL, host, &port, why, sizeof why), -1);
    assert_string_equal(why, "no answer");
}

static void role_case(const char *bytes, size_t len, int want_rc, const char *want)
{
    redisReply *x = reply_of(bytes, len);
    assert_non_null(x);
    char why[300] = "";
    int rc = sl__sentinel_role_says(x, why, sizeof why);
    sl__redis_reply_free(x);
    if (rc != want_rc || (rc == 0 && strcmp(why, want) != 0))
        fail_msg("%.60s: got %d '%s', want %d '%s'", bytes, rc, why, want_rc, want);
}

#define ROLE(lit, rc, want) role_case(lit, sizeof lit - 1, rc, want)

static void test_role_reply(void **state)
{
    (void)state;
    /* what Redis 7 answers */
    ROLE("*3\r\n$6\r\nmaster\r\n:3129\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n9001\r\n$4\r\n3129\r\n",
         1, "");
    ROLE("*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n", 1, "");
    ROLE("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:9000\r\n$9\r\nconnected\r\n:3167\r\n", 0,
         "ROLE: a replica, not the master");
    ROLE("*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n", 0, "ROLE: a Sentinel, not the master");
    ROLE("-NOAUTH Authentication required.\r\n", 0, "ROLE: NOAUTH Authentication required.");
    /* hostile: other types, an empty array, a first element not a string */
    ROLE("+master\r\n", 0, "ROLE: a status, not a role");
    ROLE("$6\r\nmaster\r\n", 0, "ROLE: a string, not a role");
    ROLE("*0\r\n", 0, "ROLE: an array, not a role");
    ROLE("*-1\r\n", 0, "ROLE: nil, not a role");
    ROLE("*1\r\n:1\r\n", 0, "ROLE: an array, not a role");
    ROLE("*1\r\n*1\r\n$6\r\nmaster\r\n", 0, "ROLE: an array, not a role");
    ROLE("*1\r\n$7\r\nmasterx\r\n", 0, "ROLE: a role of 7 bytes that is not master");
    ROLE("*1\r\n$6\r\nmaste\x00\r\n", 0, "ROLE: a role of 6 bytes that is not master");
    ROLE("*1\r\n+master\r\n", 1, ""); /* a status "master" is one too */
    char why[300];
    assert_int_equal(sl__sentinel_role_says(NULL, why, sizeof why), 0);
    assert_string_equal(why, "ROLE: no answer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_parts),
        cmocka_unit_test(test_url_errors),
        cmocka_unit_test(test_addr_reply),
        cmocka_unit_test(test_role_reply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
