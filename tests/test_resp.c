/*
 * test_resp.c -- the RESP parser on handcrafted hostile input: negative and
 * huge lengths, unterminated frames, binary arguments, one byte at a time;
 * and the reply writers, byte for byte, in RESP2 and RESP3.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include <math.h>

#include "buf.h"
#include "resp.h"
#include "resp_int.h"

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

/* ---- the fast paths against the parser as it was ------------------------- */

/* The reference: the multibulk half of the parser before its length lines
 * got a fast path (memchr for the '\r', then the digits), kept here as the
 * model sl_resp_parse must agree with byte for byte: the same answer, the
 * same bytes used, the same arguments, the same message. */
static int ref_parse_len(const char *p, size_t n, long long *res)
{
    int neg = 0;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n == 0 || n > 18) return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    *res = neg ? -v : v;
    return 0;
}

static int ref_len_line(const char *buf, size_t len, size_t *pos, long long *val)
{
    size_t start = *pos + 1, avail = len - start;
    size_t scan = avail < 22 ? avail : 22;
    const char *cr = memchr(buf + start, '\r', scan);
    if (cr == NULL) return avail > 21 ? SL_RESP_ERROR : SL_RESP_AGAIN;
    size_t n = (size_t)(cr - (buf + start));
    if (start + n + 1 >= len) return SL_RESP_AGAIN;
    if (buf[start + n + 1] != '\n') return SL_RESP_ERROR;
    if (ref_parse_len(buf + start, n, val) != 0) return SL_RESP_ERROR;
    *pos = start + n + 2;
    return SL_RESP_OK;
}

static int ref_multibulk(const char *buf, size_t len, size_t max_bulk, sl_resp_cmd *c, size_t *used,
                         const char **err)
{
    size_t pos = 0;
    long long count;
    if (len == 0) return SL_RESP_AGAIN;
    int rc = ref_len_line(buf, len, &pos, &count);
    if (rc != SL_RESP_OK) {
        *err = "Protocol error: invalid multibulk length";
        return rc;
    }
    if (count > SL_RESP_MAX_ARGS) {
        *err = "Protocol error: too many arguments (at most 1024)";
        return SL_RESP_ERROR;
    }
    c->argc = 0;
    for (long long i = 0; i < count; i++) {
        if (pos >= len) return SL_RESP_AGAIN;
        if (buf[pos] != '$') {
            *err = "Protocol error: expected '$' before a bulk argument";
            return SL_RESP_ERROR;
        }
        long long blen;
        rc = ref_len_line(buf, len, &pos, &blen);
        if (rc == SL_RESP_AGAIN) return rc;
        if (rc != SL_RESP_OK || blen < 0) {
            *err = "Protocol error: invalid bulk length";
            return SL_RESP_ERROR;
        }
        if ((unsigned long long)blen > max_bulk) {
            *err = "Protocol error: argument longer than the server accepts";
            return SL_RESP_ERROR;
        }
        if (len - pos < (size_t)blen + 2) return SL_RESP_AGAIN;
        if (buf[pos + (size_t)blen] != '\r' || buf[pos + (size_t)blen + 1] != '\n') {
            *err = "Protocol error: bulk argument not followed by CRLF";
            return SL_RESP_ERROR;
        }
        c->argv[c->argc].p = buf + pos;
        c->argv[c->argc].len = (size_t)blen;
        c->argc++;
        pos += (size_t)blen + 2;
    }
    *used = pos;
    return SL_RESP_OK;
}

static sl_resp_cmd refcmd;

/* sl_resp_parse and the reference agree on buf[0..len) (a multibulk). */
static void agree(const char *buf, size_t len, size_t max_bulk)
{
    size_t u1 = 0, u2 = 0;
    const char *e1 = NULL, *e2 = NULL;
    int r1 = sl_resp_parse(buf, len, max_bulk, &cmd, &u1, &e1);
    int r2 = ref_multibulk(buf, len, max_bulk, &refcmd, &u2, &e2);
    if (r1 != r2) fail_msg("rc %d, reference %d on %zu bytes '%.*s'", r1, r2, len, (int)len, buf);
    if (r1 == SL_RESP_ERROR) {
        assert_non_null(e1);
        assert_string_equal(e1, e2);
    }
    if (r1 != SL_RESP_OK) return;
    assert_int_equal(u1, u2);
    assert_int_equal(cmd.argc, refcmd.argc);
    for (int i = 0; i < cmd.argc; i++) {
        assert_ptr_equal(cmd.argv[i].p, refcmd.argv[i].p);
        assert_int_equal(cmd.argv[i].len, refcmd.argv[i].len);
    }
}

/* A deterministic generator (xorshift64*): the same cases every run. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}
static unsigned rndn(unsigned n) { return (unsigned)(rnd() % n); }

/* Appends a length line's body to b (at most 28 bytes): mostly a plain
 * length (n, with leading zeros sometimes), else what a client should not
 * send -- a sign, junk, 17 to 22 digits, nothing. */
static size_t gen_len(char *b, long long n)
{
    char tmp[64];
    int k;
    switch (rndn(10)) {
    case 0: k = snprintf(tmp, sizeof tmp, "%0*lld", (int)(1 + rndn(20)), n); break;
    case 1: k = snprintf(tmp, sizeof tmp, "%c%lld", "+- 0x"[rndn(5)], n); break;
    case 2: k = snprintf(tmp, sizeof tmp, "%lld%c", n, "+-ax\n\0"[rndn(6)]); break;
    case 3: {
        k = (int)(17 + rndn(6));
        for (int i = 0; i < k; i++) tmp[i] = (char)('0' + (i ? rndn(10) : 1 + rndn(9)));
        break;
    }
    case 4: k = 0; break;
    default: k = snprintf(tmp, sizeof tmp, "%lld", n); break;
    }
    memcpy(b, tmp, (size_t)k);
    return (size_t)k;
}

/* A line's end: mostly CRLF, sometimes "\r", "\n", "\rx" or nothing. */
static size_t gen_end(char *b)
{
    static const char *ends[] = {"\r\n", "\r\n", "\r\n", "\r\n", "\r\n", "\r", "\n", "\rx", ""};
    const char *e = ends[rndn(sizeof ends / sizeof ends[0])];
    memcpy(b, e, strlen(e));
    return strlen(e);
}

static void length_lines_match_reference(void **state)
{
    (void)state;
    static const char *edges[] = {
        "*1\r\n$04\r\nPING\r\n",                   /* leading zeros */
        "*001\r\n$000000000000000004\r\nPING\r\n", /* 18 digits: the fast path's last */
        "*1\r\n$0000000000000000004\r\nPING\r\n",  /* 19: refused, as before */
        "*1\r\n$+4\r\nPING\r\n",                   /* '+' */
        "*1\r\n$-0\r\n\r\n",                       /* '-0' */
        "*-1\r\n",                                 /* RESP's null */
        "*1\r\n$4x\r\n",                           /* junk after the digits */
        "*1\r\n$4x",                               /* ... the line not ended yet */
        "*1\r\n$999999999999999999\r\n",           /* 18 nines: over max_bulk */
        "*1\r\n$1234567890123456789012\r\n",       /* 22 digits */
        "*1\r\n$12345678901234567890123",          /* a line too long, no CR */
        "*1\r\n$4\r\r\n",                          /* CR CR */
        "*2\r\n$8\r\nRL.ALLOW\r\n$3\r\nkey\r\n",
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        size_t n = strlen(edges[i]);
        for (size_t k = 0; k <= n; k++) { /* every prefix: partial lines */
            agree(edges[i], k, SL_RESP_MAX_BULK);
            agree(edges[i], k, 3);
        }
    }
    /* generated commands, cut at every length */
    char buf[512];
    for (int round = 0; round < 4000; round++) {
        size_t n = 0;
        unsigned argc = rndn(5);
        buf[n++] = '*';
        n += gen_len(buf + n, rndn(8) ? (long long)argc : (long long)rndn(2000) - 2);
        n += gen_end(buf + n);
        for (unsigned a = 0; a < argc; a++) {
            unsigned alen = rndn(12);
            buf[n++] = rndn(30) ? '$' : '+';
            n += gen_len(buf + n, rndn(8) ? (long long)alen : (long long)rndn(40) - 2);
            n += gen_end(buf + n);
            for (unsigned j = 0; j < alen; j++) buf[n++] = (char)rnd();
            n += gen_end(buf + n);
        }
        size_t max_bulk = rndn(4) ? SL_RESP_MAX_BULK : rndn(12);
        for (size_t k = 0; k <= n; k++) agree(buf, k, max_bulk);
    }
}

/* The whole-command fast path (parse_fast in resp.c: "*<1-9>", lengths of
 * 1 or 2 digits) against the reference: well-formed commands of 1 to 10
 * arguments of 0 to 120 bytes -- either side of each bound the fast path
 * has -- whole, cut at every length, and with one byte changed (a digit,
 * a CR, an LF, a '$', ':' or '/' (either side of the digits) or a random
 * byte) anywhere, under max_bulk caps either side of the lengths. */
static void fast_path_matches_reference(void **state)
{
    (void)state;
    static const char *edges[] = {
        "*9\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$"
        "1\r\na\r\n$1\r\na\r\n",
        "*1\r\n$99\r\n"
        "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        "xxxxx"
        "xxxx\r\n",
        "*1\r\n$0\r\n\r\n",
        "*1\r\n$00\r\n\r\n",
        "*0\r\n",
        "*1\r\n$1\r\nab\r\n",
        "*2\r\n$1\r\na\r\n",
        "*4\r\n$8\r\nRL.ALLOW\r\n$10\r\nkey:000001\r\n$3\r\n100\r\n$2\r\n1h\r\n",
        /* ':' follows '9', '/' precedes '0': a digit test one off takes them */
        "*:\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$"
        "1\r\na\r\n$1\r\na\r\n$1\r\na\r\n",
        "*/\r\n",
        "*1\r\n$:\r\n0123456789\r\n",
        "*1\r\n$1:\r\n01234567890123456789\r\n",
        "*1\r\n$/\r\n\r\n",
        "*1\r\n$1/\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        size_t n = strlen(edges[i]);
        for (size_t k = 0; k <= n; k++) {
            agree(edges[i], k, SL_RESP_MAX_BULK);
            agree(edges[i], k, 1);
            agree(edges[i], k, 98);
            agree(edges[i], k, 99);
        }
    }
    static char buf[2048];
    for (int round = 0; round < 3000; round++) {
        size_t n = 0;
        unsigned argc = 1 + rndn(10);
        n += (size_t)snprintf(buf + n, 16, "*%u\r\n", argc);
        for (unsigned a = 0; a < argc; a++) {
            unsigned alen = rndn(4) ? rndn(12) : rndn(121);
            n += (size_t)snprintf(buf + n, 16, rndn(20) ? "$%u\r\n" : "$0%u\r\n", alen);
            for (unsigned j = 0; j < alen; j++) buf[n++] = (char)(rndn(2) ? 'a' + rndn(26) : rnd());
            buf[n++] = '\r';
            buf[n++] = '\n';
        }
        /* one byte changed, past the leading '*' (agree compares multibulk) */
        if (rndn(2))
            buf[1 + rndn((unsigned)n - 1)] = "0123456789\r\n$*:/"[rndn(16)];
        else if (rndn(4) == 0)
            buf[1 + rndn((unsigned)n - 1)] = (char)rnd();
        size_t max_bulk = rndn(3) ? SL_RESP_MAX_BULK : rndn(120);
        for (size_t k = 0; k <= n; k++) agree(buf, k, max_bulk);
    }
}

/* The integer writer against printf, over the edges of each digit count
 * and random values, appended to a buffer that must grow. */
static void integers_match_printf(void **state)
{
    (void)state;
    long long v[200];
    size_t nv = 0;
    long long p = 1;
    for (int d = 0; d < 19; d++) {
        if (d > 0) p *= 10; /* 10^d: 10^18 the last */
        v[nv++] = p - 1;
        v[nv++] = p;
        v[nv++] = -p;
        v[nv++] = 1 - p;
    }
    v[nv++] = 9223372036854775807LL;
    v[nv++] = -9223372036854775807LL - 1;
    for (int i = 0; i < 100; i++) v[nv++] = (long long)(rnd() >> rndn(64));
    sl_buf b = {0};
    char want[64];
    for (size_t i = 0; i < nv; i++) {
        size_t at = b.len;
        sl_resp_int(&b, v[i]);
        int n = snprintf(want, sizeof want, ":%lld\r\n", v[i]);
        assert_int_equal(b.len - at, (size_t)n);
        assert_memory_equal(b.p + at, want, (size_t)n);
        at = b.len;
        sl_resp_array(&b, v[i]);
        want[0] = '*';
        assert_int_equal(b.len - at, (size_t)n);
        assert_memory_equal(b.p + at, want, (size_t)n);
    }
    free(b.p);
}

/* Every value from 0 to 300,000 and 300,000 random ones below 10^9
 * (put_digits8 takes 100 to 10^8 - 1), every seventh negated, against
 * printf. */
static void integers_below_1e9_match_printf(void **state)
{
    (void)state;
    sl_buf b = {0};
    char want[32];
    for (long long i = 0; i < 600000; i++) {
        long long v = i < 300000 ? i : (long long)(rnd() % 1000000000ULL);
        if (i % 7 == 3) v = -v;
        b.len = 0;
        sl_resp_int(&b, v);
        int n = snprintf(want, sizeof want, ":%lld\r\n", v);
        if (b.len != (size_t)n || memcmp(b.p, want, (size_t)n) != 0)
            fail_msg("%lld written as '%.*s'", v, (int)b.len, b.p);
    }
    free(b.p);
}

/* RL.ALLOW's reply: the array header and the six fields, as the pieces
 * would write them, into a buffer with no room left (it grows). */
static void allow_reply_in_place(void **state)
{
    (void)state;
    sl_result r = {.allowed = 1,
                   .limit = 1000000000000LL,
                   .remaining = 99,
                   .retry_after_ms = -1,
                   .reset_after_ms = 3599999,
                   .delay_ms = 0};
    sl_buf b = {0};
    sl_buf_add(&b, "x", 1);
    b.cap = b.len; /* full: the reservation must grow it (realloc keeps the bytes) */
    sl_resp_fields_array(&b, &r);
    const char *want = "x*6\r\n:1\r\n:1000000000000\r\n:99\r\n:-1\r\n:3599999\r\n:0\r\n";
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.p, want, b.len);
    b.len = 0;
    sl_resp_fields(&b, &r);
    assert_int_equal(b.len, strlen(want) - 5);
    assert_memory_equal(b.p, want + 5, b.len);
    /* allowed 0 and 1 take one store for the header and that field; any
     * other value (the field is an integer) is written as one */
    static const int64_t allowed[] = {0, 1, 2, -1, 10, INT64_MIN};
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        char w[160];
        r.allowed = allowed[i];
        int n = snprintf(w, sizeof w,
                         "*6\r\n:%lld\r\n:1000000000000\r\n:99\r\n:-1\r\n:3599999\r\n:0\r\n",
                         (long long)r.allowed);
        b.len = 0;
        sl_resp_fields_array(&b, &r);
        assert_int_equal(b.len, (size_t)n);
        assert_memory_equal(b.p, w, b.len);
    }
    free(b.p);
}

/* sl__resp_same_ci (command names, options) against strncasecmp: bytes of
 * every value on one side, a NUL-free literal on the other (as arg_is's). */
static void same_ci_matches_strncasecmp(void **state)
{
    (void)state;
    char a[24], lit[24];
    for (int round = 0; round < 200000; round++) {
        size_t n = rndn(20);
        for (size_t i = 0; i < n; i++) {
            a[i] = (char)(rndn(3) ? "aZ.-_@[`{09"[rndn(11)] : (int)rnd());
            int c = (unsigned char)a[i];
            switch (rndn(4)) { /* the literal: a's byte, its other case, or another */
            case 0: c = c >= 'a' && c <= 'z' ? c - 32 : c >= 'A' && c <= 'Z' ? c + 32 : c; break;
            case 1: c = (int)(rnd() & 0xff); break;
            default: break;
            }
            lit[i] = (char)(c == 0 ? 'x' : c);
        }
        lit[n] = '\0';
        int want = strncasecmp(a, lit, n) == 0;
        if (sl__resp_same_ci(a, lit, n) != want) fail_msg("round %d: same_ci is %d", round, !want);
    }
    assert_true(sl__resp_same_ci("RL.ALLOW", "rl.allow", 8));
    assert_true(sl__resp_same_ci("rL.aLlOw!", "Rl.AlLoW!", 9));
    assert_false(sl__resp_same_ci("RL\x0e"
                                  "ALLOW",
                                  "rl.allow", 8)); /* 0x0e | 0x20 is '.' */
    assert_false(sl__resp_same_ci("\xc1"
                                  "BC",
                                  "\xe1"
                                  "bc",
                                  3)); /* not ASCII: no case */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(multibulk),        cmocka_unit_test(inline_commands),
        cmocka_unit_test(binary_arguments), cmocka_unit_test(one_byte_at_a_time),
        cmocka_unit_test(protocol_errors),  cmocka_unit_test(empty_and_null_multibulk),
        cmocka_unit_test(writers_resp2),    cmocka_unit_test(writers_resp3),
        cmocka_unit_test(length_lines_match_reference),
        cmocka_unit_test(fast_path_matches_reference),
        cmocka_unit_test(integers_match_printf),
        cmocka_unit_test(integers_below_1e9_match_printf),
        cmocka_unit_test(allow_reply_in_place),
        cmocka_unit_test(same_ci_matches_strncasecmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
