/*
 * test_replay_parse.c -- the `sluice replay` line parser, a function over
 * bytes (src/cli/replay.c): what it accepts, what it skips, and that every
 * malformed line gets a message naming what is wrong.  tests/test_replay.sh
 * drives the same cases through the real command.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "replay.h"
#include "sluice.h"

static int parse(const char *line, size_t len, sl__replay_req *rq, char *err)
{
    memset(rq, 0, sizeof *rq);
    err[0] = '\0';
    return sl__replay_parse_line(line, len, rq, err, 200);
}

static void test_accepts(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int64_t t;
        const char *key;
        int64_t cost;
    } ok[] = {
        {"0 k", 0, "k", 1},
        {"10800000 Kristie", 10800000, "Kristie", 1},
        {"5 user:42|POST/login 3", 5, "user:42|POST/login", 3},
        {"  12\tip:10.0.0.1\t\t7  ", 12, "ip:10.0.0.1", 7},
        {"-5 k 0", -5, "k", 0},
        {"1 k 1000000000000", 1, "k", SL_MAX_LIMIT},
        {"4611686018427387903 k", 4611686018427387903LL, "k", 1},
        {"-4611686018427387903 k", -4611686018427387903LL, "k", 1},
        {"7 caf\xc3\xa9", 7, "caf\xc3\xa9", 1},
        {"7 k 2\r", 7, "k", 2},
        {"007 k 01", 7, "k", 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        sl__replay_req rq;
        char err[200];
        int rc = parse(ok[i].line, strlen(ok[i].line), &rq, err);
        if (rc != SL_REPLAY_REQ) fail_msg("'%s' refused: %s", ok[i].line, err);
        assert_int_equal(rq.t, ok[i].t);
        assert_int_equal(rq.klen, strlen(ok[i].key));
        assert_memory_equal(rq.key, ok[i].key, rq.klen);
        assert_int_equal(rq.cost, ok[i].cost);
    }
}

static void test_key_of_max_length(void **state)
{
    (void)state;
    char line[4 + SL_MAX_KEY + 2];
    sl__replay_req rq;
    char err[200];
    memcpy(line, "1 ", 2);
    memset(line + 2, 'k', SL_MAX_KEY + 1);
    assert_int_equal(parse(line, 2 + SL_MAX_KEY, &rq, err), SL_REPLAY_REQ);
    assert_int_equal(rq.klen, SL_MAX_KEY);
    assert_int_equal(parse(line, 2 + SL_MAX_KEY + 1, &rq, err), SL_REPLAY_BAD);
    assert_non_null(strstr(err, "key is longer than 512 bytes"));
}

static void test_skips(void **state)
{
    (void)state;
    static const char *const skip[] = {
        "", " ", "\t \t", "\r", "# comment", "  # 0 k", "#\x01\x02 anything goes in a comment"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++) {
        sl__replay_req rq;
        char err[200];
        if (parse(skip[i], strlen(skip[i]), &rq, err) != SL_REPLAY_SKIP)
            fail_msg("'%s' not skipped", skip[i]);
    }
}

static void test_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        size_t len; /* 0: strlen */
        const char *phrase;
    } bad[] = {
        {"5", 0, "missing key"},
        {"5   \t", 0, "missing key"},
        {"abc k", 0, "time 'abc' is not an integer"},
        {"1.5 k", 0, "time '1.5' is not an integer"},
        {"+5 k", 0, "time '+5' is not an integer"},
        {"- k", 0, "time '-' is not an integer"},
        {"--5 k", 0, "time '--5' is not an integer"},
        {"4611686018427387904 k", 0, "time '4611686018427387904' is out of range"},
        {"-4611686018427387904 k", 0, "is out of range"},
        {"99999999999999999999999 k", 0, "is out of range"},
        {"5 k x", 0, "cost 'x' is not an integer"},
        {"5 k -1", 0, "cost '-1' is out of range"},
        {"5 k 1000000000001", 0, "cost '1000000000001' is out of range"},
        {"5 k 1.0", 0, "cost '1.0' is not an integer"},
        {"5 k 1 extra", 0, "unexpected extra field 'extra'"},
        {"5 k 1 2", 0, "unexpected extra field '2'"},
        {"5 k\0 1", 6, "NUL byte at column 4"},
        {"\0", 1, "NUL byte at column 1"},
        {"5 \0k", 4, "NUL byte at column 3"},
        {"\x01\xff\xfe\x1b[0m", 0, "control byte 0x01 at column 1"},
        {"5 k\x7f", 0, "control byte 0x7f at column 4"},
        {"5 k\r1", 0, "control byte 0x0d at column 4"},
        {"5 k 1\x1b", 0, "control byte 0x1b"},
        {"5 k 1 \x02", 0, "control byte 0x02"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl__replay_req rq;
        char err[200];
        size_t len = bad[i].len ? bad[i].len : strlen(bad[i].line);
        int rc = parse(bad[i].line, len, &rq, err);
        if (rc != SL_REPLAY_BAD) fail_msg("case %zu accepted (rc %d)", i, rc);
        if (strstr(err, bad[i].phrase) == NULL)
            fail_msg("case %zu: message '%s' lacks '%s'", i, err, bad[i].phrase);
    }
}

/* Offending tokens are quoted safely: cut short, control bytes escaped. */
static void test_quotes_are_safe(void **state)
{
    (void)state;
    char line[1000];
    sl__replay_req rq;
    char err[200];
    memset(line, 'x', sizeof line);
    line[0] = '1';
    line[1] = ' ';
    line[2] = 'k';
    line[3] = ' ';
    assert_int_equal(parse(line, sizeof line, &rq, err), SL_REPLAY_BAD);
    assert_non_null(strstr(err, "cost 'xxxx"));
    assert_non_null(strstr(err, "...'"));
    assert_true(strlen(err) < 200);
    const char hi[] = "5 k \xff\xfe";
    assert_int_equal(parse(hi, strlen(hi), &rq, err), SL_REPLAY_BAD);
    assert_non_null(strstr(err, "cost '\\xff\\xfe' is not an integer"));
    /* a small err buffer is never overrun */
    char small[8];
    memset(small, 'Z', sizeof small);
    assert_int_equal(sl__replay_parse_line("5 k x", 5, &rq, small, 4), SL_REPLAY_BAD);
    assert_int_equal(small[3], '\0');
    assert_int_equal(small[4], 'Z');
}

/* A line longer than SL_REPLAY_MAX_LINE is refused whatever it holds. */
static void test_line_too_long(void **state)
{
    (void)state;
    static char line[SL_REPLAY_MAX_LINE + 1];
    sl__replay_req rq;
    char err[200];
    memset(line, ' ', sizeof line);
    line[0] = '1';
    line[2] = 'k';
    assert_int_equal(parse(line, SL_REPLAY_MAX_LINE, &rq, err), SL_REPLAY_REQ);
    assert_int_equal(parse(line, SL_REPLAY_MAX_LINE + 1, &rq, err), SL_REPLAY_BAD);
    assert_non_null(strstr(err, "line is longer than 65536 bytes"));
    line[0] = ' ';
    line[2] = ' ';
    assert_int_equal(parse(line, SL_REPLAY_MAX_LINE, &rq, err), SL_REPLAY_SKIP);
    assert_int_equal(parse(line, SL_REPLAY_MAX_LINE + 1, &rq, err), SL_REPLAY_BAD);
}

/* The parser reads only the bytes it is given. */
static void test_reads_only_len(void **state)
{
    (void)state;
    const char buf[] = {'9', ' ', 'a', 'b', ' ', '3', 'x'}; /* no NUL */
    sl__replay_req rq;
    char err[200];
    assert_int_equal(parse(buf, 6, &rq, err), SL_REPLAY_REQ);
    assert_int_equal(rq.cost, 3);
    assert_int_equal(parse(buf, 3, &rq, err), SL_REPLAY_REQ);
    assert_int_equal(rq.klen, 1);
    assert_int_equal(rq.cost, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),         cmocka_unit_test(test_key_of_max_length),
        cmocka_unit_test(test_skips),           cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_quotes_are_safe), cmocka_unit_test(test_reads_only_len),
        cmocka_unit_test(test_line_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
