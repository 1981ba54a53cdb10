/*
 * test_whatif_parse.c -- the line parsers of `sluice replay --rules`
 * (src/cli/whatif_parse.c), functions over bytes: the lines format (entries,
 * descriptors, cost, %XX escapes) and nginx's combined format (time zones,
 * quoting, request lines), every malformed case with its exact message,
 * and that they read only the bytes given.  tests/test_replay_rules.sh
 * drives the same parsers through the real command.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"
#include "whatif_parse.h"

static sl__whatif_req *rq; /* ~72 KiB: one, reused */

static int parse(sl__whatif_format f, const char *line, size_t len, char *err)
{
    memset(rq, 0xA5, sizeof *rq); /* no field may be left as it was */
    err[0] = '\0';
    return sl__whatif_parse(f, line, len, rq, err, 300);
}

/* Entry j of descriptor d is key=value. */
static void entry_is(int d, int j, const char *key, size_t klen, const char *value, size_t vlen)
{
    const sl_rule_entry *e = &rq->desc[d][j];
    if (e->keylen != klen || memcmp(e->key, key, klen) != 0)
        fail_msg("descriptor %d entry %d: key '%.*s', want '%.*s'", d, j, (int)e->keylen, e->key,
                 (int)klen, key);
    if (e->valuelen != vlen || memcmp(e->value, value, vlen) != 0)
        fail_msg("descriptor %d entry %d: value '%.*s', want '%.*s'", d, j, (int)e->valuelen,
                 e->value, (int)vlen, value);
}
#define ENTRY(d, j, k, v) entry_is(d, j, k, strlen(k), v, strlen(v))

/* ---- the lines format ---------------------------------------------------- */

static void test_lines_accepts(void **state)
{
    (void)state;
    char err[300];
    const char *l;

    l = "0 k=v";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, 0);
    assert_int_equal(rq->cost, 1);
    assert_int_equal(rq->ndesc, 1);
    assert_int_equal(rq->nent[0], 1);
    ENTRY(0, 0, "k", "v");

    l = "1000 user=bob,path=/login ip=10.0.0.1 cost=5";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, 1000);
    assert_int_equal(rq->cost, 5);
    assert_int_equal(rq->ndesc, 2);
    assert_int_equal(rq->nent[0], 2);
    assert_int_equal(rq->nent[1], 1);
    ENTRY(0, 0, "user", "bob");
    ENTRY(0, 1, "path", "/login");
    ENTRY(1, 0, "ip", "10.0.0.1");
    assert_ptr_equal(rq->desc[0], rq->ent[0]);
    assert_ptr_equal(rq->desc[1], rq->ent[1]);

    /* tabs, runs of blanks, CRLF */
    l = "  12\tuser=bob\t \tpath=/x  \r";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, 12);
    assert_int_equal(rq->ndesc, 2);
    ENTRY(1, 0, "path", "/x");

    /* empty value, cost 0, negative time */
    l = "-5 k= cost=0";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, -5);
    assert_int_equal(rq->cost, 0);
    ENTRY(0, 0, "k", "");

    /* the first '=' splits: the value may hold more (base64 keys) */
    l = "7 key=YWJj== cost=1000000000000";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    ENTRY(0, 0, "key", "YWJj==");
    assert_int_equal(rq->cost, SL_MAX_LIMIT);

    /* cost= is the cost only as the last field, alone */
    l = "7 cost=3 k=v";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, 2);
    assert_int_equal(rq->cost, 1);
    ENTRY(0, 0, "cost", "3");
    l = "7 k=v cost=2,x=1";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, 2);
    assert_int_equal(rq->cost, 1);
    ENTRY(1, 0, "cost", "2");
    ENTRY(1, 1, "x", "1");
    l = "7 %63ost=5"; /* a last descriptor of key cost */
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, 1);
    assert_int_equal(rq->cost, 1);
    ENTRY(0, 0, "cost", "5");

    /* T as sluice replay takes it */
    l = "4611686018427387903 k=v";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, 4611686018427387903LL);
    l = "-4611686018427387903 k=v";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->t, -4611686018427387903LL);

    /* UTF-8 is ordinary */
    l = "1 caf\xc3\xa9=\xe2\x82\xac";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    ENTRY(0, 0, "caf\xc3\xa9", "\xe2\x82\xac");
}

static void test_lines_percent_decoding(void **state)
{
    (void)state;
    char err[300];
    const char *l = "1 k%3Dx=a%2Cb%20c%25d%2c%09 p%25=%7e";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, 2);
    ENTRY(0, 0, "k=x", "a,b c%d,\t");
    ENTRY(1, 0, "p%", "~");
    /* decoded bytes live in the request's scratch space, others in the line */
    assert_true(rq->desc[0][0].key >= rq->scratch &&
                rq->desc[0][0].key < rq->scratch + sizeof rq->scratch);

    l = "1 a=plain";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_ptr_equal(rq->desc[0][0].value, l + 4);

    /* any byte, NUL included: values are (pointer, length) */
    l = "1 k=%00%FF";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    entry_is(0, 0, "k", 1, "\0\xff", 2);

    /* a value made only of escapes; an escaped comma does not split */
    l = "1 a=%2C,b=%3D%3d";
    assert_int_equal(parse(SL_WHATIF_LINES, l, strlen(l), err), SL_WHATIF_REQ);
    assert_int_equal(rq->nent[0], 2);
    ENTRY(0, 0, "a", ",");
    ENTRY(0, 1, "b", "==");
}

static void test_lines_caps(void **state)
{
    (void)state;
    char err[300], line[2048];
    /* 16 descriptors of 16 entries: the most accepted */
    size_t n = (size_t)snprintf(line, sizeof line, "9");
    for (int d = 0; d < SL_WHATIF_MAX_DESC; d++) {
        line[n++] = ' ';
        for (int j = 0; j < SL_WHATIF_MAX_ENTRIES; j++)
            n += (size_t)snprintf(line + n, sizeof line - n, "%sk%d=%d", j ? "," : "", j, d);
    }
    assert_int_equal(parse(SL_WHATIF_LINES, line, n, err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, SL_WHATIF_MAX_DESC);
    for (int d = 0; d < SL_WHATIF_MAX_DESC; d++) assert_int_equal(rq->nent[d], 16);
    ENTRY(15, 15, "k15", "15");
    /* with a cost after them */
    memcpy(line + n, " cost=4", 7);
    assert_int_equal(parse(SL_WHATIF_LINES, line, n + 7, err), SL_WHATIF_REQ);
    assert_int_equal(rq->cost, 4);
    /* one descriptor more */
    memcpy(line + n, " z=1", 4);
    assert_int_equal(parse(SL_WHATIF_LINES, line, n + 4, err), SL_WHATIF_BAD);
    assert_string_equal(err, "more than 16 descriptors (RL.CHECK takes at most 16)");
    /* one entry more */
    n = (size_t)snprintf(line, sizeof line, "9 a=1 ");
    for (int j = 0; j <= SL_WHATIF_MAX_ENTRIES; j++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%sk%d=x", j ? "," : "", j);
    assert_int_equal(parse(SL_WHATIF_LINES, line, n, err), SL_WHATIF_BAD);
    assert_string_equal(err, "descriptor 2 has more than 16 entries (rules nest at most 16 deep)");
}

static void test_lines_skips(void **state)
{
    (void)state;
    static const char *const skip[] = {
        "", " ", "\t \t", "\r", "# comment", "  # 0 k=v", "#\x01\x02 anything goes in a comment"};
    char err[300];
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (parse(SL_WHATIF_LINES, skip[i], strlen(skip[i]), err) != SL_WHATIF_SKIP)
            fail_msg("'%s' not skipped", skip[i]);
}

static void test_lines_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        size_t len; /* 0: strlen */
        const char *msg;
    } bad[] = {
        {"5", 0, "missing descriptor (expected: T key=value[,key=value...] ... [cost=N])"},
        {"5   \t", 0, "missing descriptor (expected: T key=value[,key=value...] ... [cost=N])"},
        {"5 cost=2", 0, "missing descriptor (expected: T key=value[,key=value...] ... [cost=N])"},
        {"abc k=v", 0, "time 'abc' is not an integer (T must be milliseconds)"},
        {"1.5 k=v", 0, "time '1.5' is not an integer (T must be milliseconds)"},
        {"+5 k=v", 0, "time '+5' is not an integer (T must be milliseconds)"},
        {"k=v", 0, "time 'k=v' is not an integer (T must be milliseconds)"},
        {"4611686018427387904 k=v", 0,
         "time '4611686018427387904' is out of range (|T| must be below 4611686018427387904 ms)"},
        {"-99999999999999999999 k=v", 0,
         "time '-99999999999999999999' is out of range (|T| must be below 4611686018427387904 "
         "ms)"},
        {"5 kv", 0, "descriptor 1: entry 'kv' has no '=' (expected key=value)"},
        {"5 a=1 b=2,c", 0, "descriptor 2: entry 'c' has no '=' (expected key=value)"},
        {"5 a=1 =v", 0, "descriptor 2: entry '=v' has an empty key"},
        {"5 a=1,=", 0, "descriptor 1: entry '=' has an empty key"},
        {"5 a=1,,b=2", 0, "descriptor 1: empty entry in 'a=1,,b=2' (a ',' too many)"},
        {"5 a=1,", 0, "descriptor 1: empty entry in 'a=1,' (a ',' too many)"},
        {"5 ,a=1", 0, "descriptor 1: empty entry in ',a=1' (a ',' too many)"},
        {"5 ,", 0, "descriptor 1: empty entry in ',' (a ',' too many)"},
        {"5 a=%zz", 0,
         "descriptor 1: bad escape '%zz' in 'a=%zz' (%XX with two hex digits; a '%' is %25)"},
        {"5 a=1,b=x%2", 0,
         "descriptor 1: bad escape '%2' in 'b=x%2' (%XX with two hex digits; a '%' is %25)"},
        {"5 a%=1", 0,
         "descriptor 1: bad escape '%' in 'a%=1' (%XX with two hex digits; a '%' "
         "is %25)"},
        {"5 a=100%", 0,
         "descriptor 1: bad escape '%' in 'a=100%' (%XX with two hex digits; a "
         "'%' is %25)"},
        {"5 a=1 cost=x", 0, "cost 'x' is not an integer"},
        {"5 a=1 cost=", 0, "cost '' is not an integer"},
        {"5 a=1 cost=1.5", 0, "cost '1.5' is not an integer"},
        {"5 a=1 cost=-1", 0, "cost '-1' is out of range (0 to 1000000000000)"},
        {"5 a=1 cost=1000000000001", 0,
         "cost '1000000000001' is out of range (0 to 1000000000000)"},
        {"5 a=1\0", 6, "NUL byte at column 6 (binary data?)"},
        {"\0", 1, "NUL byte at column 1 (binary data?)"},
        {"5 a=\x01", 0, "control byte 0x01 at column 5 (binary data?)"},
        {"5 a=1 \x1b[0m", 0, "control byte 0x1b at column 7 (binary data?)"},
        {"5 a=1\r2", 0, "control byte 0x0d at column 6 (binary data?)"},
        {"5\x7f a=1", 0, "control byte 0x7f at column 2 (binary data?)"},
        {"5 a=\xff\xfe,q", 0, "descriptor 1: entry 'q' has no '=' (expected key=value)"},
        {"5 a=1 cost=\xff", 0, "cost '\\xff' is not an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[300];
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].line);
        int rc = parse(SL_WHATIF_LINES, bad[i].line, len, err);
        if (rc != SL_WHATIF_BAD) fail_msg("case %zu '%s' accepted (rc %d)", i, bad[i].line, rc);
        if (strcmp(err, bad[i].msg) != 0)
            fail_msg("case %zu '%s':\n  got  '%s'\n  want '%s'", i, bad[i].line, err, bad[i].msg);
    }
}

/* A line longer than SL_WHATIF_MAX_LINE is refused, in both formats. */
static void test_line_too_long(void **state)
{
    (void)state;
    char *line = malloc(SL_WHATIF_MAX_LINE + 1), err[300];
    assert_non_null(line);
    memset(line, 'x', SL_WHATIF_MAX_LINE + 1);
    memcpy(line, "1 k=", 4);
    assert_int_equal(parse(SL_WHATIF_LINES, line, SL_WHATIF_MAX_LINE, err), SL_WHATIF_REQ);
    assert_int_equal(rq->desc[0][0].valuelen, SL_WHATIF_MAX_LINE - 4);
    assert_int_equal(parse(SL_WHATIF_LINES, line, SL_WHATIF_MAX_LINE + 1, err), SL_WHATIF_BAD);
    assert_string_equal(err, "line is longer than 65536 bytes");
    assert_int_equal(parse(SL_WHATIF_COMBINED, line, SL_WHATIF_MAX_LINE + 1, err), SL_WHATIF_BAD);
    assert_string_equal(err, "line is longer than 65536 bytes");
    /* the longest line, all of it escapes: decoding never overruns scratch */
    size_t n = 4 + (SL_WHATIF_MAX_LINE - 4) / 3 * 3;
    for (size_t i = 4; i < n; i += 3) memcpy(line + i, "%41", 3);
    assert_int_equal(parse(SL_WHATIF_LINES, line, n, err), SL_WHATIF_REQ);
    assert_int_equal(rq->desc[0][0].valuelen, (n - 4) / 3);
    free(line);
}

/* Offending tokens are quoted safely: cut short, odd bytes escaped, and a
 * small err buffer is never overrun. */
static void test_quotes_are_safe(void **state)
{
    (void)state;
    char line[1000], err[300];
    memset(line, 'x', sizeof line);
    memcpy(line, "1 k", 3);
    assert_int_equal(parse(SL_WHATIF_LINES, line, sizeof line, err), SL_WHATIF_BAD);
    assert_non_null(strstr(err, "entry 'kxxxx"));
    assert_non_null(strstr(err, "...' has no '='"));
    assert_true(strlen(err) < 200);
    char small[8];
    memset(small, 'Z', sizeof small);
    assert_int_equal(sl__whatif_parse_lines("5 k", 3, rq, small, 4), SL_WHATIF_BAD);
    assert_int_equal(small[3], '\0');
    assert_int_equal(small[4], 'Z');
    memset(small, 'Z', sizeof small);
    assert_int_equal(sl__whatif_parse_combined("x", 1, rq, small, 4), SL_WHATIF_BAD);
    assert_int_equal(small[3], '\0');
    assert_int_equal(small[4], 'Z');
}

/* ---- nginx's combined format ---------------------------------------------- */

#define TIME  "[21/Nov/2026:12:48:07 +0000]"
#define T_UTC 1795265287000LL /* 2026-11-21 12:48:07 UTC */

static void combined_ok(const char *l, int64_t t, const char *addr, const char *method,
                        const char *path)
{
    char err[300];
    int rc = parse(SL_WHATIF_COMBINED, l, strlen(l), err);
    if (rc != SL_WHATIF_REQ) fail_msg("'%s' refused: %s", l, err);
    assert_int_equal(rq->t, t);
    assert_int_equal(rq->cost, 1);
    assert_int_equal(rq->ndesc, 3);
    for (int d = 0; d < 3; d++) assert_int_equal(rq->nent[d], 1);
    ENTRY(0, 0, "remote_address", addr);
    ENTRY(1, 0, "method", method);
    ENTRY(2, 0, "path", path);
}

static void test_combined_accepts(void **state)
{
    (void)state;
    combined_ok("192.0.2.1 - - " TIME " \"GET /api/users?id=3 HTTP/1.1\" 200 512 \"-\" "
                "\"curl/8.0\"",
                T_UTC, "192.0.2.1", "GET", "/api/users");
    /* zones east and west of UTC */
    combined_ok("192.0.2.1 - - [21/Nov/2026:12:48:07 +0530] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"",
                1795245487000LL, "192.0.2.1", "GET", "/");
    combined_ok("192.0.2.1 - - [21/Nov/2026:12:48:07 -0700] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"",
                1795290487000LL, "192.0.2.1", "GET", "/");
    /* the same instant written in two zones */
    combined_ok("::1 - - [21/Nov/2026:05:48:07 -0700] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"", T_UTC,
                "::1", "GET", "/");
    /* a leap day; a time before the epoch */
    combined_ok("a - - [29/Feb/2024:23:59:59 +0000] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"",
                1709251199000LL, "a", "GET", "/");
    combined_ok("a - - [31/Dec/1969:23:00:00 -0100] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"", 0, "a",
                "GET", "/");
    combined_ok("a - - [31/Dec/1969:23:59:59 +0000] \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"", -1000,
                "a", "GET", "/");
    /* IPv6, a remote user, a referer, an empty query, CRLF */
    combined_ok("2001:db8::7 - alice " TIME " \"POST /login? HTTP/2.0\" 302 0 "
                "\"https://example.com/a?b\" \"Mozilla/5.0 (X11; Linux x86_64)\"\r",
                T_UTC, "2001:db8::7", "POST", "/login");
    /* nginx's \x22 escapes, and another logger's \" -- kept as logged */
    combined_ok("a - - " TIME " \"GET /a\\x22b?q=\\x22 HTTP/1.1\" 200 1 \"-\" \"x\\x22y\"", T_UTC,
                "a", "GET", "/a\\x22b");
    combined_ok("a - - " TIME
                " \"GET /a\\\"b HTTP/1.1\" 200 1 \"a \\\"ref\\\"\" \"say \\\"hi\\\"\"",
                T_UTC, "a", "GET", "/a\\\"b");
    combined_ok("a - - " TIME " \"GET /\\\\\" 200 1 \"-\" \"-\"", T_UTC, "a", "GET", "/\\\\");
    /* request lines that are not METHOD TARGET PROTOCOL */
    combined_ok("a - - " TIME " \"-\" 400 0 \"-\" \"-\"", T_UTC, "a", "-", "");
    combined_ok("a - - " TIME " \"\" 400 0 \"-\" \"-\"", T_UTC, "a", "", "");
    combined_ok("a - - " TIME " \"\\x16\\x03\\x01\\x00\\xCA\" 400 157 \"-\" \"-\"", T_UTC, "a",
                "\\x16\\x03\\x01\\x00\\xCA", "");
    combined_ok("a - - " TIME " \"GET /x\" 200 0 \"-\" \"-\"", T_UTC, "a", "GET", "/x");
    combined_ok("a - - " TIME " \"GET ?a HTTP/1.1\" 200 0 \"-\" \"-\"", T_UTC, "a", "GET", "");
    combined_ok("a - - " TIME " \"PRI * HTTP/2.0\" 400 0 \"-\" \"-\"", T_UTC, "a", "PRI", "*");
    combined_ok("a - - " TIME " \"GET http://example.com/p?q HTTP/1.1\" 200 0 \"-\" \"-\"", T_UTC,
                "a", "GET", "http://example.com/p");
    /* fields appended after the user agent are ignored */
    combined_ok("a - - " TIME " \"GET / HTTP/1.1\" 200 0 \"-\" \"-\" \"10.0.0.1\" 0.005 rt=1",
                T_UTC, "a", "GET", "/");
    /* a remote user with a space (nginx does not escape spaces) */
    combined_ok("a - a b " TIME " \"GET / HTTP/1.1\" 200 0 \"-\" \"-\"", T_UTC, "a", "GET", "/");
    /* UTF-8 bytes are ordinary */
    combined_ok("a - - " TIME " \"GET /caf\xc3\xa9 HTTP/1.1\" 200 0 \"-\" \"-\"", T_UTC, "a", "GET",
                "/caf\xc3\xa9");
}

static void test_combined_skips(void **state)
{
    (void)state;
    static const char *const skip[] = {"", "  ", "\r", "# a comment", " # indented"};
    char err[300];
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        if (parse(SL_WHATIF_COMBINED, skip[i], strlen(skip[i]), err) != SL_WHATIF_SKIP)
            fail_msg("'%s' not skipped", skip[i]);
}

#define FMT                                                                                        \
    "nginx's combined format: ADDR - USER [TIME] \"REQUEST\" STATUS BYTES \"REFERER\" "            \
    "\"USER_AGENT\""
#define REQ " \"GET / HTTP/1.1\""

static void test_combined_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        size_t len;
        const char *msg;
    } bad[] = {
        /* missing fields */
        {" a - - " TIME REQ " 200 0 \"-\" \"-\"", 0,
         "the line starts with a space (expected " FMT ")"},
        {"192.0.2.1", 0, "expected ' - ' after the remote address '192.0.2.1' (" FMT ")"},
        {"192.0.2.1 -", 0, "expected ' - ' after the remote address '192.0.2.1' (" FMT ")"},
        {"192.0.2.1 x x " TIME, 0, "expected ' - ' after the remote address '192.0.2.1' (" FMT ")"},
        {"a - -", 0, "missing ' [TIME]' after the remote user (" FMT ")"},
        {"a - - 21/Nov/2026:12:48:07 +0000", 0,
         "missing ' [TIME]' after the remote user (" FMT ")"},
        {"a - - [21/Nov/2026:12:48:07 +0000", 0,
         "unterminated time '[21/Nov/2026:12:48:07 +0000' (no ']')"},
        {"a - - " TIME, 0, "expected ' \"REQUEST\"' after the time, got ''"},
        {"a - - " TIME " 200 0", 0, "expected ' \"REQUEST\"' after the time, got ' 200 0'"},
        {"a - - " TIME REQ, 0, "expected ' STATUS' after the request, got ''"},
        {"a - - " TIME REQ "200 0 \"-\" \"-\"", 0,
         "expected ' STATUS' after the request, got '200 0 \"-\" \"-\"'"},
        {"a - - " TIME REQ " 200", 0, "bad body_bytes_sent '' (expected a number)"},
        {"a - - " TIME REQ " 200 0", 0, "missing referer (expected ' \"...\"', got ''; " FMT ")"},
        {"a - - " TIME REQ " 200 0 -", 0,
         "missing referer (expected ' \"...\"', got ' -'; " FMT ")"},
        {"a - - " TIME REQ " 200 0 \"-\"", 0,
         "missing user agent (expected ' \"...\"', got ''; " FMT ")"},
        /* bad times */
        {"a - - [21/Nov/2026 12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time '21/Nov/2026 12:48:07 +0000' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)"},
        {"a - - [1/Nov/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time '1/Nov/2026:12:48:07 +0000' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)"},
        {"a - - [21/Nov/2026:12:48:07]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time '21/Nov/2026:12:48:07' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)"},
        {"a - - [2x/Nov/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time '2x/Nov/2026:12:48:07 +0000' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)"},
        {"a - - []" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time '' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)"},
        {"a - - [21/Foo/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad month 'Foo' in time '21/Foo/2026:12:48:07 +0000' (expected Jan, Feb, ... Dec)"},
        {"a - - [21/nov/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad month 'nov' in time '21/nov/2026:12:48:07 +0000' (expected Jan, Feb, ... Dec)"},
        {"a - - [21/Nov/2026:12:48:07 +2500]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad zone '+2500' in time '21/Nov/2026:12:48:07 +2500' (expected +hhmm or -hhmm)"},
        {"a - - [21/Nov/2026:12:48:07 +0060]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad zone '+0060' in time '21/Nov/2026:12:48:07 +0060' (expected +hhmm or -hhmm)"},
        {"a - - [21/Nov/2026:12:48:07 *0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad zone '*0000' in time '21/Nov/2026:12:48:07 *0000' (expected +hhmm or -hhmm)"},
        {"a - - [21/Nov/2026:12:48:07 +UTC0]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad zone '+UTC0' in time '21/Nov/2026:12:48:07 +UTC0' (expected +hhmm or -hhmm)"},
        {"a - - [31/Nov/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad day 31 in time '31/Nov/2026:12:48:07 +0000' (Nov 2026 has 30 days)"},
        {"a - - [29/Feb/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad day 29 in time '29/Feb/2026:12:48:07 +0000' (Feb 2026 has 28 days)"},
        {"a - - [29/Feb/2100:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad day 29 in time '29/Feb/2100:12:48:07 +0000' (Feb 2100 has 28 days)"},
        {"a - - [00/Jan/2026:12:48:07 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad day 0 in time '00/Jan/2026:12:48:07 +0000' (Jan 2026 has 31 days)"},
        {"a - - [21/Nov/2026:24:00:00 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time of day '24:00:00' in time '21/Nov/2026:24:00:00 +0000' (00:00:00 to "
         "23:59:59)"},
        {"a - - [21/Nov/2026:12:60:00 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time of day '12:60:00' in time '21/Nov/2026:12:60:00 +0000' (00:00:00 to "
         "23:59:59)"},
        {"a - - [21/Nov/2026:12:48:60 +0000]" REQ " 200 0 \"-\" \"-\"", 0,
         "bad time of day '12:48:60' in time '21/Nov/2026:12:48:60 +0000' (00:00:00 to "
         "23:59:59)"},
        /* quoting */
        {"a - - " TIME " \"GET / HTTP/1.1 200 0 \"-", 0,
         "expected ' STATUS' after the request, got '-'"},
        {"a - - " TIME " \"GET / HTTP/1.1 200 0", 0,
         "unterminated request '\"GET / HTTP/1.1 200 0' (no closing '\"')"},
        {"a - - " TIME " \"GET /a\\\" 200 0 \"-\" \"-", 0,
         "expected ' STATUS' after the request, got '-\" \"-'"},
        {"a - - " TIME " \"GET /a\\\"", 0,
         "unterminated request '\"GET /a\\x5c\"' (no closing '\"')"},
        {"a - - " TIME REQ " 200 0 \"-", 0, "unterminated referer '\"-' (no closing '\"')"},
        {"a - - " TIME REQ " 200 0 \"-\" \"curl", 0,
         "unterminated user agent '\"curl' (no closing '\"')"},
        {"a - - " TIME REQ " 200 0 \"-\" \"curl\\\"", 0,
         "unterminated user agent '\"curl\\x5c\"' (no closing '\"')"},
        {"a - - " TIME REQ " 200 0 \"-\" \"curl\"x", 0,
         "unexpected 'x' right after the user agent's closing '\"'"},
        /* status and size */
        {"a - - " TIME REQ " 20x 0 \"-\" \"-\"", 0, "bad status '20x' (expected three digits)"},
        {"a - - " TIME REQ " 2000 0 \"-\" \"-\"", 0, "bad status '2000' (expected three digits)"},
        {"a - - " TIME REQ " - 0 \"-\" \"-\"", 0, "bad status '-' (expected three digits)"},
        {"a - - " TIME REQ "  200 0 \"-\" \"-\"", 0, "bad status '' (expected three digits)"},
        {"a - - " TIME REQ " 200 - \"-\" \"-\"", 0, "bad body_bytes_sent '-' (expected a number)"},
        {"a - - " TIME REQ " 200 1k \"-\" \"-\"", 0,
         "bad body_bytes_sent '1k' (expected a number)"},
        /* control bytes: nginx escapes them, tab included */
        {"a - - " TIME " \"GET /\tx HTTP/1.1\" 200 0 \"-\" \"-\"", 0,
         "control byte 0x09 at column 42 (binary data?)"},
        {"a\0 - - " TIME, 8, "NUL byte at column 2 (binary data?)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[300];
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].line);
        int rc = parse(SL_WHATIF_COMBINED, bad[i].line, len, err);
        if (rc != SL_WHATIF_BAD) fail_msg("case %zu '%s' accepted (rc %d)", i, bad[i].line, rc);
        if (strcmp(err, bad[i].msg) != 0)
            fail_msg("case %zu '%s':\n  got  '%s'\n  want '%s'", i, bad[i].line, err, bad[i].msg);
    }
}

static void test_days_from_civil(void **state)
{
    (void)state;
    assert_int_equal(sl__whatif_days_from_civil(1970, 1, 1), 0);
    assert_int_equal(sl__whatif_days_from_civil(1969, 12, 31), -1);
    assert_int_equal(sl__whatif_days_from_civil(2000, 3, 1), 11017);
    assert_int_equal(sl__whatif_days_from_civil(2026, 11, 21), 20778);
    assert_int_equal(sl__whatif_days_from_civil(1, 1, 1), -719162);
    assert_int_equal(sl__whatif_days_from_civil(9999, 12, 31), 2932896);
    /* consecutive days, across every month end of a leap and a common year */
    int64_t prev = sl__whatif_days_from_civil(2023, 12, 31);
    static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, /* 2024 */
                                     31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    for (unsigned k = 0; k < 24; k++)
        for (unsigned d = 1; d <= mdays[k]; d++) {
            int64_t x = sl__whatif_days_from_civil(2024 + k / 12, k % 12 + 1, d);
            assert_int_equal(x, prev + 1);
            prev = x;
        }
}

static void test_format_names(void **state)
{
    (void)state;
    sl__whatif_format f = SL_WHATIF_COMBINED;
    assert_int_equal(sl__whatif_format_parse("lines", 5, &f), 0);
    assert_int_equal(f, SL_WHATIF_LINES);
    assert_int_equal(sl__whatif_format_parse("combined", 8, &f), 0);
    assert_int_equal(f, SL_WHATIF_COMBINED);
    assert_int_equal(sl__whatif_format_parse("Combined", 8, &f), -1);
    assert_int_equal(sl__whatif_format_parse("line", 4, &f), -1);
    assert_int_equal(sl__whatif_format_parse("", 0, &f), -1);
}

/* The parsers read only the bytes they are given. */
static void test_reads_only_len(void **state)
{
    (void)state;
    char err[300];
    const char buf[] = {'9', ' ', 'a', '=', 'b', ' ', 'c', 'o', 's', 't', '=', '3', 'x'};
    assert_int_equal(parse(SL_WHATIF_LINES, buf, 12, err), SL_WHATIF_REQ);
    assert_int_equal(rq->cost, 3);
    assert_int_equal(parse(SL_WHATIF_LINES, buf, 5, err), SL_WHATIF_REQ);
    assert_int_equal(rq->ndesc, 1);
    ENTRY(0, 0, "a", "b");
    assert_int_equal(parse(SL_WHATIF_LINES, buf, 4, err), SL_WHATIF_REQ);
    ENTRY(0, 0, "a", "");
    static const char full[] = "a - - " TIME REQ " 200 0 \"-\" \"-\"";
    char *heap = malloc(sizeof full - 1); /* exactly the line: ASan sees any overread */
    assert_non_null(heap);
    memcpy(heap, full, sizeof full - 1);
    assert_int_equal(parse(SL_WHATIF_COMBINED, heap, sizeof full - 1, err), SL_WHATIF_REQ);
    assert_int_equal(parse(SL_WHATIF_COMBINED, heap, sizeof full - 2, err), SL_WHATIF_BAD);
    assert_string_equal(err, "unterminated user agent '\"-' (no closing '\"')");
    free(heap);
}

static int setup(void **state)
{
    (void)state;
    rq = malloc(sizeof *rq);
    return rq == NULL;
}

static int teardown(void **state)
{
    (void)state;
    free(rq);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_accepts),   cmocka_unit_test(test_lines_percent_decoding),
        cmocka_unit_test(test_lines_caps),      cmocka_unit_test(test_lines_skips),
        cmocka_unit_test(test_lines_rejects),   cmocka_unit_test(test_line_too_long),
        cmocka_unit_test(test_quotes_are_safe), cmocka_unit_test(test_combined_accepts),
        cmocka_unit_test(test_combined_skips),  cmocka_unit_test(test_combined_rejects),
        cmocka_unit_test(test_days_from_civil), cmocka_unit_test(test_format_names),
        cmocka_unit_test(test_reads_only_len),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
