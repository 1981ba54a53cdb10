/*
 * test_ratelimit_headers.c -- the one writer of the RateLimit headers
 * (src/proto/headers/ratelimit_headers.c) that HTTP and gRPC share: the
 * exact bytes of a rules decision and of a "default" decision, the same
 * headers in HTTP/1.1's lines and in gRPC's list, which statuses make a
 * member, and its bounds (a list that does not fit left out whole, a name
 * too long left out, SL_RLH_CAP holding the largest answer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "check.h"
#include "ratelimit_headers.h"

static sl_rule_limit rule(const char *name, int64_t window_ms)
{
    sl_rule_limit rl;
    memset(&rl, 0, sizeof rl);
    rl.name = name;
    rl.params.window_ms = window_ms;
    return rl;
}

static sl_check_status status(const sl_rule_limit *rl, sl_check_code code, int64_t limit,
                              int64_t remaining, int64_t retry, int64_t reset)
{
    sl_check_status st;
    memset(&st, 0, sizeof st);
    st.code = code;
    st.rule = rl;
    st.name = rl ? rl->name : NULL;
    st.limit = limit;
    st.remaining = remaining;
    st.retry_after_ms = retry;
    st.reset_after_ms = reset;
    return st;
}

/* The list form's headers as HTTP/1.1 lines, to compare with the lines form. */
static void as_lines(const sl_rlh *o, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < o->n; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s: %s\r\n", o->name[i], o->value[i]);
}

/* Writes st[0..n) / x in both forms; checks that they agree and that the
 * lines are want. */
static void both(const sl_check_status *st, int n, const sl_result *x, const char *want)
{
    static char lines[SL_RLH_CAP], list[SL_RLH_CAP], back[SL_RLH_CAP + 64];
    sl_rlh a, b;
    sl_rlh_init(&a, lines, sizeof lines, 1);
    sl_rlh_check(&a, st, n, x);
    sl_rlh_init(&b, list, sizeof list, 0);
    sl_rlh_check(&b, st, n, x);
    assert_false(a.cut);
    assert_false(b.cut);
    assert_int_equal(a.n, b.n);
    as_lines(&b, back, sizeof back);
    assert_int_equal(a.len, strlen(want));
    assert_memory_equal(lines, want, a.len);
    assert_string_equal(back, want);
}

static void a_denial_names_each_limit_once(void **state)
{
    (void)state;
    sl_rule_limit ip = rule("edge.remote_address", 60000), path = rule("edge.path_/login", 1500),
                  sh = rule("shadowed", 1000);
    sl_check_status st[5] = {
        status(&ip, SL_CHECK_OK, 5, 1, 0, 17001),
        status(&sh, SL_CHECK_OVER_LIMIT, 2, 0, 500, 900),
        status(&path, SL_CHECK_OVER_LIMIT, 3, 0, 1200, 1400),
        status(NULL, SL_CHECK_NO_RULE, 0, 0, 0, 0),
        status(&ip, SL_CHECK_OK, 5, 3, 0, 2000), /* the same limit, less tight */
    };
    st[1].shadow = 1;
    sl_result x = {0, 3, 0, 1200, 1400, 0};
    both(st, 5, &x,
         "RateLimit-Policy: \"edge.remote_address\";q=5;w=60, \"edge.path_/login\";q=3;w=2\r\n"
         "RateLimit: \"edge.remote_address\";r=1;t=18, \"edge.path_/login\";r=0;t=2\r\n"
         "X-RateLimit-Limit: 3\r\n"
         "X-RateLimit-Remaining: 0\r\n"
         "X-RateLimit-Reset: 2\r\n"
         "Retry-After: 2\r\n");
}

static void names_are_escaped_sf_strings(void **state)
{
    (void)state;
    sl_rule_limit rl = rule("acme \"users\" \\ caf\xc3\xa9 100%", 500);
    sl_check_status st = status(&rl, SL_CHECK_OK, 7, 6, 0, 1);
    sl_result x = {1, 7, 6, 0, 1, 250};
    both(&st, 1, &x,
         "RateLimit-Policy: \"acme \\\"users\\\" \\\\ caf%C3%A9 100%25\";q=7;w=1\r\n"
         "RateLimit: \"acme \\\"users\\\" \\\\ caf%C3%A9 100%25\";r=6;t=1\r\n"
         "X-RateLimit-Limit: 7\r\n"
         "X-RateLimit-Remaining: 6\r\n"
         "X-RateLimit-Reset: 1\r\n"
         "X-RateLimit-Delay-Ms: 250\r\n");
}

static void no_limit_allowed_tells_nothing(void **state)
{
    (void)state;
    sl_rule_limit un = rule("api.unlimited", 1000), rep = rule("api.replaced", 1000);
    sl_check_status st[3] = {
        status(NULL, SL_CHECK_NO_RULE, 0, 0, 0, 0), status(&un, SL_CHECK_UNLIMITED, 0, 0, 0, 0),
        status(&rep, SL_CHECK_OK, 0, 0, 0, 0), /* a replaced limit: all 0 */
    };
    sl_result ok = {1, 0, 0, 0, 0, 0}, never = {0, 0, 0, -1, 0, 0};
    both(st, 3, &ok, "");
    /* denied with no member (a limit of 0 can never pass): the trio, no Retry-After */
    both(st, 3, &never,
         "X-RateLimit-Limit: 0\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 0\r\n");
}

static void a_default_decision(void **state)
{
    (void)state;
    static char b[256];
    sl_rlh o;
    sl_result r = {0, 10, 0, 1, 59001, 0};
    sl_rlh_init(&o, b, sizeof b, 1);
    sl_rlh_decision(&o, &r, 400); /* a window under a second is written 1 */
    const char *want = "RateLimit-Policy: \"default\";q=10;w=1\r\n"
                       "RateLimit: \"default\";r=0;t=60\r\n"
                       "X-RateLimit-Limit: 10\r\n"
                       "X-RateLimit-Remaining: 0\r\n"
                       "X-RateLimit-Reset: 60\r\n"
                       "Retry-After: 1\r\n";
    assert_int_equal(o.len, strlen(want));
    assert_memory_equal(b, want, o.len);
    assert_int_equal(o.n, 6);
    sl_rlh_init(&o, b, sizeof b, 0);
    sl_rlh_decision(&o, &r, 400);
    assert_int_equal(o.n, 6);
    assert_string_equal(o.name[1], "RateLimit");
    assert_string_equal(o.value[1], "\"default\";r=0;t=60");
    assert_string_equal(o.name[5], "Retry-After");
    assert_string_equal(o.value[5], "1");
}

/* HTTP's bound: a list that does not fit is left out whole (cut), and the
 * smaller headers after it still come. */
static void a_list_too_long_is_left_out_whole(void **state)
{
    (void)state;
    static char b[120];
    sl_rule_limit a = rule("a-rather-long-rule-name-for-a-small-buffer", 1000),
                  c = rule("another-rather-long-rule-name", 1000);
    sl_check_status st[2] = {status(&a, SL_CHECK_OVER_LIMIT, 1, 0, 1000, 1000),
                             status(&c, SL_CHECK_OK, 9, 9, 0, 0)};
    sl_result x = {0, 1, 0, 1000, 1000, 0};
    sl_rlh o;
    sl_rlh_init(&o, b, sizeof b, 1);
    sl_rlh_check(&o, st, 2, &x);
    assert_true(o.cut);
    const char *want = "X-RateLimit-Limit: 1\r\nX-RateLimit-Remaining: 0\r\n"
                       "X-RateLimit-Reset: 1\r\nRetry-After: 1\r\n";
    assert_int_equal(o.len, strlen(want));
    assert_memory_equal(b, want, o.len);
}

/* A name longer than SL_RLH_NAME_MAX as an sf-string has no member; the
 * others keep theirs.  The largest answer (SL_CHECK_MAX_DESC limits, each
 * name as long as fits) fits SL_RLH_CAP uncut. */
static void long_names_and_the_largest_answer(void **state)
{
    (void)state;
    static char names[SL_CHECK_MAX_DESC][300], too_long[SL_RLH_NAME_MAX];
    memset(too_long, 'x', sizeof too_long - 1);
    sl_rule_limit big = rule(too_long, 1000), small = rule("s", 1000);
    sl_check_status st[2] = {status(&big, SL_CHECK_OK, 1, 1, 0, 0),
                             status(&small, SL_CHECK_OK, 2, 2, 0, 0)};
    sl_result x = {1, 2, 2, 0, 0, 0};
    both(st, 2, &x,
         "RateLimit-Policy: \"s\";q=2;w=1\r\nRateLimit: \"s\";r=2;t=0\r\n"
         "X-RateLimit-Limit: 2\r\nX-RateLimit-Remaining: 2\r\nX-RateLimit-Reset: 0\r\n");

    /* 16 limits named by 257 bytes, 256 of which escape to 3: 771 with
     * the quotes, as long as fits SL_RLH_NAME_MAX (with its NUL, 772: the
     * escape stops when fewer than 5 bytes are left) */
    sl_rule_limit rl[SL_CHECK_MAX_DESC];
    sl_check_status many[SL_CHECK_MAX_DESC];
    for (int d = 0; d < SL_CHECK_MAX_DESC; d++) {
        memset(names[d], 0xff, 257);
        names[d][0] = (char)('a' + d);
        names[d][257] = '\0';
        rl[d] = rule(names[d], INT64_C(1) << 52);
        many[d] = status(&rl[d], SL_CHECK_OVER_LIMIT, INT64_C(1) << 53, 0, -1, INT64_C(1) << 62);
    }
    static char list[SL_RLH_CAP];
    sl_rlh o;
    sl_result never = {0, INT64_C(1) << 53, 0, 0, INT64_C(1) << 62, 0};
    sl_rlh_init(&o, list, sizeof list, 0);
    sl_rlh_check(&o, many, SL_CHECK_MAX_DESC, &never);
    assert_false(o.cut);
    assert_int_equal(o.n, 6);
    int commas = 0;
    for (const char *p = o.value[0]; *p; p++) commas += *p == ',';
    assert_int_equal(commas, SL_CHECK_MAX_DESC - 1);
    /* each member: the name, ";q=" 2^53 (16 digits), ";w=" 2^52 ms in
     * seconds rounded up (13 digits); ", " between them */
    assert_int_equal(strlen(o.value[0]),
                     SL_CHECK_MAX_DESC * (771 + 3 + 16 + 3 + 13) + (SL_CHECK_MAX_DESC - 1) * 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_denial_names_each_limit_once),
        cmocka_unit_test(names_are_escaped_sf_strings),
        cmocka_unit_test(no_limit_allowed_tells_nothing),
        cmocka_unit_test(a_default_decision),
        cmocka_unit_test(a_list_too_long_is_left_out_whole),
        cmocka_unit_test(long_names_and_the_largest_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
