/*
 * test_h1.c -- HTTP/1 request framing (src/proto/http/h1.c): what a
 * request's head may hold.  Every framing that two HTTP implementations
 * could read differently (RFC 9112 sections 2.2, 5.1, 5.2, 6.1, 6.3) is
 * refused with 400 and the reason, rather than read one way here and
 * another way by a proxy in front: that difference is how a request is
 * smuggled inside another one's body.  Bytes in, a status out; no socket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "h1.h"

static sl_h1_req r;

static int parse(const char *s) { return sl_h1_parse(s, strlen(s), &r); }

/* s is refused with status, and its reason holds why. */
static void refused(const char *s, int status, const char *why)
{
    int rc = parse(s);
    if (rc != SL_H1_BAD || r.status != status || r.why == NULL || strstr(r.why, why) == NULL)
        fail_msg("%s: rc %d status %d why \"%s\", expected %d \"%s\"", s, rc, r.status,
                 r.why ? r.why : "", status, why);
}

/* The framings that held before stay: a whole request, one with a body,
 * one still arriving, one empty line before the request line. */
static void plain_requests_parse(void **state)
{
    (void)state;
    assert_int_equal(parse("GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"), SL_H1_DONE);
    assert_int_equal(r.nfields, 1);
    const char *post = "POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\nX-A:  b\t\r\n\r\n{}GET";
    assert_int_equal(parse(post), SL_H1_DONE);
    assert_int_equal(r.used, strlen(post) - 3);
    assert_int_equal(r.body.len, 2);
    assert_int_equal(parse("GET /healthz HTTP/1.1\r\nHost: a\r"), SL_H1_MORE);
    assert_int_equal(parse("GET /healthz HTTP/1.1\r\nHo"), SL_H1_MORE);
    assert_int_equal(parse("POST / HTTP/1.1\r\nContent-Length: 12"), SL_H1_MORE);
    assert_int_equal(parse("\r\nGET / HTTP/1.1\r\n\r\n"), SL_H1_DONE);
    assert_int_equal(parse("GET / HTTP/1.1\r\nX-Empty:\r\n\r\n"), SL_H1_DONE);
    refused("\r\n\r\nGET / HTTP/1.1\r\n\r\n", 400, "empty lines before the request line");
}

/* "Content-Length : 35": the header another reader ignores (or this one
 * did not) -- and the request pipelined inside the 35 bytes with it. */
static void whitespace_before_the_colon(void **state)
{
    (void)state;
    refused("POST / HTTP/1.1\r\nContent-Length : 35\r\n\r\n", 400,
            "whitespace between a header name and its colon");
    refused("POST / HTTP/1.1\r\nContent-Length\t: 35\r\n\r\n", 400,
            "invalid character in header"); /* http-parser's own refusal */
    /* seen as soon as the colon is: no need to wait for the line's end */
    refused("POST / HTTP/1.1\r\nContent-Length :", 400,
            "whitespace between a header name and its colon");
    refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400,
            "whitespace between a header name and its colon");
}

static void obs_fold(void **state)
{
    (void)state;
    refused("GET / HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n", 400, "obs-fold");
    refused("GET / HTTP/1.1\r\nX-A: b\r\n\tc\r\n\r\n", 400, "obs-fold");
    refused("GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400, "obs-fold");
}

static void bare_lf_and_bare_cr(void **state)
{
    (void)state;
    refused("GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "bare LF");
    refused("GET / HTTP/1.1\r\nHost: a\n\r\n", 400, "bare LF");
    refused("GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "bare LF");
    refused("GET / HTTP/1.1\n\n", 400, "bare LF");
    refused("\nGET / HTTP/1.1\r\n\r\n", 400, "bare LF");
    refused("\rGET / HTTP/1.1\r\n\r\n", 400, "bare CR");
    refused("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "LF character expected");
    refused("GET / HTTP/1.1\r\nHost: a\r\r\n\r\n", 400, "LF character expected");
    refused("GET / HTTP/1.1\rHost: a\r\n\r\n", 400, "LF character expected");
}

/* Refused by http-parser itself, with its reason: still, each a 400. */
static void bad_field_names(void **state)
{
    (void)state;
    const char *bad[] = {
        "GET / HTTP/1.1\r\nX(A): b\r\n\r\n",
        "GET / HTTP/1.1\r\nX\"A: b\r\n\r\n",
        "GET / HTTP/1.1\r\nX\x7f"
        "A: b\r\n\r\n",
        "GET / HTTP/1.1\r\n: b\r\n\r\n",
        "GET / HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET / HTTP/1.1\r\nX-A: b\x01"
        "c\r\n\r\n",
        "GET / HTTP/1.1\r\nX-A: b\x7f\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        refused(bad[i], 400, "invalid character in header");
}

/* Two lengths, a length and an encoding, an encoding not chunked: each is
 * a body whose end two readers may put in two places. */
static void ambiguous_bodies(void **state)
{
    (void)state;
    /* http-parser's own refusals */
    refused("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc", 400,
            "unexpected content-length header");
    refused("POST / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc", 400,
            "unexpected content-length header");
    refused("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400, "unexpected content-length header");
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
            400, "unexpected content-length header");
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "invalid transfer-encoding");
    /* and the ones it let through */
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400,
            "Transfer-Encoding other than chunked");
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 400,
            "invalid transfer-encoding");
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400, "Transfer-Encoding other than chunked");
    /* chunked alone: as before, 411 (send Content-Length) */
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "chunked");
    refused("POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400, "content-length");
    refused("POST / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\nx", 400, "content-length");
    refused("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx", 400, "content-length");
    refused("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400, "content-length");
    refused("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "content-length");
    /* a length past the body bound, however long: 413 (h1.h's bound) */
    refused("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413,
            "SL_HTTP_MAX_BODY");
    refused("POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\n", 413, "SL_HTTP_MAX_BODY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_requests_parse),
        cmocka_unit_test(whitespace_before_the_colon),
        cmocka_unit_test(obs_fold),
        cmocka_unit_test(bare_lf_and_bare_cr),
        cmocka_unit_test(bad_field_names),
        cmocka_unit_test(ambiguous_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
