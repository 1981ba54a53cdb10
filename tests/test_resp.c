/*
 * test_resp.c -- the RESP parser on handcrafted hostile input: negative and
 * huge lengths, unterminated frames, binary arguments, one byte at a time;
 * and the reply writers, byte for byte, in RESP2 and RESP3.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>

#include "buf.h"
#include "resp.h"

static sl_resp_cmd cmd;

static int parse(const char *s, size_t len, size_t *used, const char **err)
{
    *err = NULL;
    return sl_resp_parse(s, len, SL_RESP_MAX_BULK, &cmd, used, err);
}

#define ARG_IS(i, lit)                                                                             \
    do {                                                                                           \
        assert_int_equal(cmd.argv[i].len, sizeof(lit) - 1);                                        \
        assert_memory_equal(cmd.argv[i].p, lit, sizeof(lit) - 1);                                  \
    } while (0)

static void multibulk(void **state)
{
    (void)state;
    const char *s = "*3\r\n$8\r\nRL.ALLOW\r\n$7\r\nuser:42\r\n$1\r\n5\r\nPING\r\n";
    size_t used;
    const char *err;
    assert_int_equal(parse(s, strlen(s), &used, &err), SL_RESP_OK);
    assert_int_equal(cmd.argc, 3);
    ARG_IS(0, "RL.ALLOW");
    ARG_IS(1, "user:42");
    ARG_IS(2, "5");
    assert_int_equal(used, strlen(s) - 6); /* the PING after it is left */
}

static void inline_commands(void **state)
{
    (void)state;
    size_t used;
    const char *err;
    const char *s = "  PING   hello\tthere \r\n";
    assert_int_equal(parse(s, strlen(s), &used, &err), SL_RESP_OK);
    assert_int_equal(cmd.argc, 3);
    ARG_IS(0, "PING");
    ARG_IS(2, "there");
    assert_int_equal(used, strlen(s));
    assert_int_equal(parse("\r\n", 2, &used, &err), SL_RESP_OK); /* empty line: argc 0 */
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(parse("PING", 4, &used, &err), SL_RESP_AGAIN); /* no newline yet */
}

static void binary_arguments(void **state)
{
    (void)state;
    const char s[] = "*2\r\n$4\r\nECHO\r\n$6\r\na\0\r\n\xff"
                     "b\r\n";
    size_t used;
    const char *err;
    assert_int_equal(parse(s, sizeof(s) - 1, &used, &err), SL_RESP_OK);
    assert_int_equal(cmd.argv[1].len, 6);
    assert_memory_equal(cmd.argv[1].p, "a\0\r\n\xff"
                                       "b",
                        6);
}

static void one_byte_at_a_time(void **state)
{
    (void)state;
    const char *s = "*2\r\n$4\r\nECHO\r\n$11\r\nhello world\r\n";
    size_t n = strlen(s), used;
    const char *err;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(parse(s, i, &used, &err), SL_RESP_AGAIN);
    assert_int_equal(parse(s, n, &used, &err), SL_RESP_OK);
    ARG_IS(1, "hello world");
}

static void protocol_errors(void **state)
{
    (void)state;
    static const char *bad[] = {
        "*abc\r\n",                           /* multibulk length not a number */
        "*2\r\n+PING\r\n",                    /* not a bulk */
        "*1\r\n$-5\r\n",                      /* negative bulk length */
        "*1\r\n$99999999999\r\n",             /* huge bulk length */
        "*1\r\n$4\r\nPINGxx",                 /* bulk not followed by CRLF */
        "*1\r\n$4\rx",                        /* CR without LF */
        "*2000\r\n",                          /* too many arguments */
        "*1\r\n$123456789012345678901234\r\n", /* length line too long */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t used;
        const char *err;
        if (parse(bad[i], strlen(bad[i]), &used, &err) != SL_RESP_ERROR)
            fail_msg("case %zu (%s) was not refused", i, bad[i]);
        assert_non_null(err);
        assert_non_null(strstr(err, "Protocol error"));
    }
    /* an unterminated huge inline line is refused once past the limit */
    char *big = malloc(SL_RESP_MAX_INLINE + 10);
    memset(big, 'a', SL_RESP_MAX_INLINE + 10);
    size_t used;
    const char *err;
    assert_int_equal(parse(big, SL_RESP_MAX_INLINE + 10, &used, &err), SL_RESP_ERROR);
    assert_int_equal(parse(big, 100, &used, &err), SL_RESP_AGAIN);
    /* the longest line, SL_RESP_MAX_INLINE bytes, is whole with "\r\n" and
     * every prefix of it is incomplete -- also the one ending in its '\r'
     * (a client's write split there); one byte more is refused */
    big[SL_RESP_MAX_INLINE] = '\r';
    big[SL_RESP_MAX_INLINE + 1] = '\n';
    assert_int_equal(parse(big, SL_RESP_MAX_INLINE + 2, &used, &err), SL_RESP_OK);
    assert_int_equal(used, SL_RESP_MAX_INLINE + 2);
    assert_int_equal(parse(big, SL_RESP_MAX_INLINE + 1, &used, &err), SL_RESP_AGAIN);
    assert_int_equal(parse(big, SL_RESP_MAX_INLINE, &used, &err), SL_RESP_AGAIN);
    big[SL_RESP_MAX_INLINE] = 'a';
    big[SL_RESP_MAX_INLINE + 1] = 'a';
    big[SL_RESP_MAX_INLINE + 2] = '\n';
    assert_int_equal(parse(big, SL_RESP_MAX_INLINE + 3, &used, &err), SL_RESP_ERROR);
    free(big);
    /* the server's own bulk cap */
    assert_int_equal(sl_resp_parse("*1\r\n$600\r\n", 11, 512, &cmd, &used, &err), SL_RESP_ERROR);
}

static void empty_and_null_multibulk(void **state)
{
    (void)state;
    size_t used;
    const char *err;
    assert_int_equal(parse("*0\r\n", 4, &used, &err), SL_RESP_OK);
    assert_int_equal(cmd.argc, 0);
    assert_int_equal(used, 4);
    assert_int_equal(parse("*-1\r\n", 5, &used, &err), SL_RESP_OK);
    assert_int_equal(cmd.argc, 0);
}

/* ---- the writers ---------------------------------------------------------- */

static sl_buf out;

/* out's bytes as a string, then out emptied. */
static const char *written(void)
{
    static char s[1024];
    assert_true(out.len < sizeof s);
    memcpy(s, out.p ? out.p : "", out.len);
    s[out.len] = '\0';
    out.len = 0;
    return s;
}

#define WROTE(call, want)                                                                          \
    do {                                                                                           \
        call;                                                                                      \
        assert_string_equal(written(), want);                                                      \
    } while (0)

static void writers_resp2(void **state)
{
    (void)state;
    WROTE(sl_resp_int(&out, -42), ":-42\r\n");
    WROTE(sl_resp_int(&out, -9223372036854775807LL - 1), ":-9223372036854775808\r\n");
    WROTE(sl_resp_array(&out, 3), "*3\r\n");
    WROTE(sl_resp_bulk(&out, "a\r\nb", 4), "$4\r\na\r\nb\r\n");
    WROTE(sl_resp_bulk_str(&out, ""), "$0\r\n\r\n");
    WROTE(sl_resp_nil(&out), "$-1\r\n");
    WROTE(sl_resp_err(&out, "bad\r\nthing"), "-ERR bad  thing\r\n");
    /* RESP3's types, as Redis writes them to a RESP2 client */
    WROTE(sl_resp_null(&out, SL_RESP2), "$-1\r\n");
    WROTE(sl_resp_null_array(&out, SL_RESP2), "*-1\r\n");
    WROTE(sl_resp_map(&out, SL_RESP2, 7), "*14\r\n");
    WROTE(sl_resp_map(&out, SL_RESP2, 0), "*0\r\n");
    WROTE(sl_resp_set(&out, SL_RESP2, 2), "*2\r\n");
    WROTE(sl_resp_verbatim(&out, SL_RESP2, "txt", "a:b\r\n", 5), "$5\r\na:b\r\n\r\n");
    WROTE(sl_resp_bool(&out, SL_RESP2, 1), ":1\r\n");
    WROTE(sl_resp_bool(&out, SL_RESP2, 0), ":0\r\n");
    WROTE(sl_resp_double(&out, SL_RESP2, 1.5), "$3\r\n1.5\r\n");
    WROTE(sl_resp_double(&out, SL_RESP2, 0.1), "$19\r\n0.10000000000000001\r\n");
    WROTE(sl_resp_double(&out, SL_RESP2, -INFINITY), "$4\r\n-inf\r\n");
    sl_result r = {1, 10, 9, 0, 1000, 0};
    WROTE(sl_resp_fields(&out, &r), ":1\r\n:10\r\n:9\r\n:0\r\n:1000\r\n:0\r\n");
    free(out.p);
    out = (sl_buf){0};
}

static void writers_resp3(void **state)
{
    (void)state;
    WROTE(sl_resp_null(&out, SL_RESP3), "_\r\n");
    WROTE(sl_resp_null_array(&out, SL_RESP3), "_\r\n");
    WROTE(sl_resp_map(&out, SL_RESP3, 7), "%7\r\n");
    WROTE(sl_resp_map(&out, SL_RESP3, 0), "%0\r\n");
    WROTE(sl_resp_set(&out, SL_RESP3, 2), "~2\r\n");
    /* the length counts "txt:" */
    WROTE(sl_resp_verbatim(&out, SL_RESP3, "txt", "a:b\r\n", 5), "=9\r\ntxt:a:b\r\n\r\n");
    WROTE(sl_resp_verbatim(&out, SL_RESP3, "mkd", "", 0), "=4\r\nmkd:\r\n");
    WROTE(sl_resp_bool(&out, SL_RESP3, 7), "#t\r\n");
    WROTE(sl_resp_bool(&out, SL_RESP3, 0), "#f\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, 1.5), ",1.5\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, -0.25), ",-0.25\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, 1e300), ",1.0000000000000001e+300\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, 10), ",10\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, INFINITY), ",inf\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, -INFINITY), ",-inf\r\n");
    WROTE(sl_resp_double(&out, SL_RESP3, NAN), ",nan\r\n");
    /* the rest is RESP2's */
    WROTE(sl_resp_int(&out, 5), ":5\r\n");
    WROTE(sl_resp_bulk_str(&out, "x"), "$1\r\nx\r\n");
    free(out.p);
    out = (sl_buf){0};
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(multibulk),        cmocka_unit_test(inline_commands),
        cmocka_unit_test(binary_arguments), cmocka_unit_test(one_byte_at_a_time),
        cmocka_unit_test(protocol_errors),  cmocka_unit_test(empty_and_null_multibulk),
        cmocka_unit_test(writers_resp2),    cmocka_unit_test(writers_resp3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
