/*
 * test_params.c -- the edges of the library's input checking (SPEC section 5):
 * sl_int_parse, sl_duration_parse, sl_algo_parse, sl_params_check, and bad
 * requests to sl_decide / sl_peek / sl_forget / sl_limiter_new, which must
 * return their error and leave every key's state exactly as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "args.h"
#include "sluice.h"

/* ---- sl_int_parse ------------------------------------------------------- */

static int int_parse(const char *s, int64_t max, int64_t *out)
{
    return sl_int_parse(s, strlen(s), max, out);
}

static void test_int_parse_accepts(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(int_parse("0", 10, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(int_parse("7", 10, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(int_parse("10", 10, &v), 0); /* max itself */
    assert_int_equal(v, 10);
    assert_int_equal(int_parse("1000000000000", SL_MAX_LIMIT, &v), 0);
    assert_int_equal(v, SL_MAX_LIMIT);
    assert_int_equal(int_parse("9223372036854775807", INT64_MAX, &v), 0);
    assert_int_equal(v, INT64_MAX);
}

static void test_int_parse_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1a",
        "a1",
        "0x10",
        "1e3",
        "1.0",
        "١",
        "11", /* > max 10 */
        "9223372036854775808",
        "99999999999999999999999999",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 12345;
        if (int_parse(bad[i], 10, &v) != SL_EINVAL) fail_msg("sl_int_parse accepted '%s'", bad[i]);
        assert_int_equal(v, 12345); /* untouched */
    }
    int64_t v;
    assert_int_equal(int_parse("1000000000001", SL_MAX_LIMIT, &v), SL_EINVAL);
    assert_int_equal(int_parse("9223372036854775808", INT64_MAX, &v), SL_EINVAL);
    /* a bound below 9: every digit past it refused, every one up to it taken
     * (the flags 0..1 of RL.CHECKPLAN once took 2..9) */
    for (int64_t max = 0; max <= 9; max++)
        for (int64_t d = 0; d <= 9; d++) {
            char s[2] = {(char)('0' + d), 0};
            int rc = int_parse(s, max, &v);
            if (rc != (d <= max ? 0 : SL_EINVAL))
                fail_msg("sl_int_parse('%s', max %lld) gave %d", s, (long long)max, rc);
        }
    assert_int_equal(int_parse("10", 9, &v), SL_EINVAL);
    assert_int_equal(int_parse("19", 19, &v), 0);
    assert_int_equal(int_parse("20", 19, &v), SL_EINVAL);
}

/* Only len bytes are read: the buffer need not be NUL-terminated. */
static void test_int_parse_takes_length(void **state)
{
    (void)state;
    const char buf[5] = {'1', '2', '3', '4', '5'}; /* no NUL */
    int64_t v;
    assert_int_equal(sl_int_parse(buf, 3, 1000, &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(sl_int_parse(buf, 5, 1000, &v), SL_EINVAL);
    assert_int_equal(sl_int_parse(buf, 0, 1000, &v), SL_EINVAL);
}

/* ---- sl_duration_parse -------------------------------------------------- */

static void test_duration_units(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
    } ok[] = {
        {"1", 1},
        {"250", 250},
        {"250ms", 250},
        {"10s", 10000},
        {"5m", 300000},
        {"1h", 3600000},
        {"1d", 86400000},
        {"1w", 604800000},
        {"1y", 31557600000LL},
        {"10y", SL_MAX_WINDOW_MS},
        {"315576000000", SL_MAX_WINDOW_MS},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t ms = -1;
        int rc = sl_duration_parse(ok[i].s, strlen(ok[i].s), &ms);
        if (rc != 0 || ms != ok[i].ms)
            fail_msg("sl_duration_parse('%s') = %d, %lld; want 0, %lld", ok[i].s, rc, (long long)ms,
                     (long long)ok[i].ms);
    }
}

static void test_duration_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "0",
        "0s",
        "10x",
        "s",
        "ms",
        "-5s",
        "-5",
        "1.5s",
        "10 s",
        " 10s",
        "10s ",
        "1sm",
        "1ss",
        "11y",
        "315576000001",
        "3655d",
        "99999999999999999999d",
        "5000000000000000000ms",
        "1e3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ms = 777;
        int rc = sl_duration_parse(bad[i], strlen(bad[i]), &ms);
        if (rc != SL_EWINDOW) fail_msg("sl_duration_parse accepted '%s' (%d)", bad[i], rc);
        assert_int_equal(ms, 777);
    }
    /* length-taking: "10s" of "10sx" */
    int64_t ms;
    assert_int_equal(sl_duration_parse("10sx", 3, &ms), 0);
    assert_int_equal(ms, 10000);
}

/* ---- sl_algo_parse / sl_algo_name --------------------------------------- */

static void test_algo_names(void **state)
{
    (void)state;
    static const char *const names[SL_ALGO_COUNT] = {
        "fixed-window", "sliding-log", "sliding-window", "sliding-buckets",
        "token-bucket", "gcra",        "leaky-bucket",
    };
    for (int i = 0; i < SL_ALGO_COUNT; i++) {
        sl_algo a = SL_ALGO_COUNT;
        assert_int_equal(sl_algo_parse(names[i], strlen(names[i]), &a), 0);
        assert_int_equal(a, i);
        assert_string_equal(sl_algo_name(a), names[i]);
    }
    static const char *const bad[] = {
        "",       "tokenbucket",  "token-bucket ", "token", "token-bucketx",
        "gcra\n", "leaky_bucket", "sliding"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_algo a = SL_GCRA;
        if (sl_algo_parse(bad[i], strlen(bad[i]), &a) != SL_EALGO)
            fail_msg("sl_algo_parse accepted '%s'", bad[i]);
        assert_int_equal(a, SL_GCRA);
    }
    sl_algo a;
    assert_int_equal(sl_algo_parse("gcra-and-more", 4, &a), 0); /* length-taking */
    assert_int_equal(a, SL_GCRA);
    assert_non_null(sl_algo_name((sl_algo)99));
}

static void test_strerror(void **state)
{
    (void)state;
    for (int e = 0; e >= SL_EINVAL; e--) {
        const char *s = sl_strerror(e);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
    }
    assert_non_null(sl_strerror(-1000));
    assert_non_null(sl_strerror(5));
}

/* ---- sl_params_check ---------------------------------------------------- */

static sl_params mk(sl_algo a, int64_t limit, int64_t window)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = limit;
    p.window_ms = window;
    return p;
}

static void test_params_ranges(void **state)
{
    (void)state;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        sl_params p = mk((sl_algo)a, 1, 1);
        if (a == SL_SLIDING_BUCKETS) p.precision = 1;
        assert_int_equal(sl_params_check(&p), 0);
        p.limit = 0;
        assert_int_equal(sl_params_check(&p), SL_ELIMIT);
        p.limit = -1;
        assert_int_equal(sl_params_check(&p), SL_ELIMIT);
        p.limit = SL_MAX_LIMIT + 1;
        assert_int_equal(sl_params_check(&p), SL_ELIMIT);
        p.limit = SL_MAX_LIMIT;
        assert_int_equal(sl_params_check(&p), 0);
        p.window_ms = 0;
        assert_int_equal(sl_params_check(&p), SL_EWINDOW);
        p.window_ms = -1000;
        assert_int_equal(sl_params_check(&p), SL_EWINDOW);
        p.window_ms = SL_MAX_WINDOW_MS + 1;
        assert_int_equal(sl_params_check(&p), SL_EWINDOW);
        p.window_ms = SL_MAX_WINDOW_MS; /* divisible by 1 */
        assert_int_equal(sl_params_check(&p), 0);
    }
    sl_params p = mk(SL_ALGO_COUNT, 1, 1);
    assert_int_equal(sl_params_check(&p), SL_EALGO);
    p.algo = (sl_algo)-1;
    assert_int_equal(sl_params_check(&p), SL_EALGO);
    assert_int_equal(sl_params_check(NULL), SL_EINVAL);
}

static void test_params_options_belong(void **state)
{
    (void)state;
    /* burst: bucket algorithms only, 1..SL_MAX_LIMIT */
    static const sl_algo window_algos[] = {SL_FIXED_WINDOW, SL_SLIDING_LOG, SL_SLIDING_WINDOW,
                                           SL_SLIDING_BUCKETS};
    static const sl_algo bucket_algos[] = {SL_TOKEN_BUCKET, SL_GCRA, SL_LEAKY_BUCKET};
    for (size_t i = 0; i < 4; i++) {
        sl_params p = mk(window_algos[i], 10, 1000);
        p.burst = 5;
        assert_int_equal(sl_params_check(&p), SL_EBURST);
    }
    for (size_t i = 0; i < 3; i++) {
        sl_params p = mk(bucket_algos[i], 10, 1000);
        p.burst = 5;
        assert_int_equal(sl_params_check(&p), 0);
        p.burst = SL_MAX_LIMIT;
        assert_int_equal(sl_params_check(&p), 0);
        p.burst = SL_MAX_LIMIT + 1;
        assert_int_equal(sl_params_check(&p), SL_EBURST);
        p.burst = -1;
        assert_int_equal(sl_params_check(&p), SL_EBURST);
        p.burst = 0;
        p.precision = 4;
        assert_int_equal(sl_params_check(&p), SL_EPRECISION);
        p.precision = 0;
        p.log_rejected = 1;
        assert_int_equal(sl_params_check(&p), SL_ELOGREJECTED);
    }
    /* precision: sliding-buckets only, must divide W, 1..SL_MAX_PRECISION */
    sl_params p = mk(SL_SLIDING_BUCKETS, 4, 1000);
    assert_int_equal(sl_params_check(&p), 0); /* default 10 divides 1000 */
    p.precision = 4;
    assert_int_equal(sl_params_check(&p), 0);
    p.precision = 3;
    assert_int_equal(sl_params_check(&p), SL_EPRECISION);
    p.precision = -4;
    assert_int_equal(sl_params_check(&p), SL_EPRECISION);
    p.precision = 2000;
    assert_int_equal(sl_params_check(&p), SL_EPRECISION); /* does not divide 1000 */
    p.window_ms = (int64_t)SL_MAX_PRECISION * 2;
    p.precision = SL_MAX_PRECISION;
    assert_int_equal(sl_params_check(&p), 0);
    p.window_ms = (int64_t)(SL_MAX_PRECISION + 1) * 2;
    p.precision = SL_MAX_PRECISION + 1;
    assert_int_equal(sl_params_check(&p), SL_EPRECISION);
    p = mk(SL_SLIDING_BUCKETS, 4, 15); /* 15 % default 10 != 0 */
    assert_int_equal(sl_params_check(&p), SL_EPRECISION);
    p = mk(SL_FIXED_WINDOW, 4, 1000);
    p.precision = 10;
    assert_int_equal(sl_params_check(&p), SL_EPRECISION);
    /* log-rejected: sliding-log only */
    p = mk(SL_SLIDING_LOG, 4, 1000);
    p.log_rejected = 1;
    assert_int_equal(sl_params_check(&p), 0);
    p.algo = SL_FIXED_WINDOW;
    assert_int_equal(sl_params_check(&p), SL_ELOGREJECTED);
}

/* ---- bad requests leave state untouched --------------------------------- */

typedef struct bad_call {
    const char *what;
    int want; /* expected error */
    const void *key;
    size_t klen;
    int64_t t, cost;
    int bad_params; /* use a params struct with limit 0 */
} bad_call;

/* For every algorithm: one good decision, then each bad call to sl_decide and
 * sl_peek, each followed by a peek that must answer exactly as before, and a
 * final decide that must answer as the same decide would have without the
 * bad calls. */
static void test_bad_requests_leave_state(void **state)
{
    (void)state;
    char long_key[SL_MAX_KEY + 2];
    memset(long_key, 'k', sizeof long_key);
    const bad_call bad[] = {
        {"NULL key", SL_EKEY, NULL, 3, 1000, 1, 0},
        {"empty key", SL_EKEY, "k", 0, 1000, 1, 0},
        {"key of 513 bytes", SL_EKEY, long_key, SL_MAX_KEY + 1, 1000, 1, 0},
        {"cost -1", SL_ECOST, "k", 1, 1000, -1, 0},
        {"cost above max", SL_ECOST, "k", 1, 1000, SL_MAX_LIMIT + 1, 0},
        {"cost INT64_MIN", SL_ECOST, "k", 1, 1000, INT64_MIN, 0},
        {"time 2^62", SL_ETIME, "k", 1, SL_MAX_TIME_MS, 1, 0},
        {"time -2^62", SL_ETIME, "k", 1, -SL_MAX_TIME_MS, 1, 0},
        {"time INT64_MAX", SL_ETIME, "k", 1, INT64_MAX, 1, 0},
        {"time INT64_MIN", SL_ETIME, "k", 1, INT64_MIN, 1, 0},
        {"limit 0", SL_ELIMIT, "k", 1, 5000, 1, 1},
    };
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        sl_params p = mk((sl_algo)a, 3, 1000);
        sl_params badp = p;
        badp.limit = 0;
        int err = 0;
        sl_store *st = sl_store_new(NULL, &err);
        sl_store *ref = sl_store_new(NULL, &err); /* the same, without bad calls */
        assert_non_null(st);
        assert_non_null(ref);
        sl_result r0, r1, rr;
        assert_int_equal(sl_decide(st, &p, "k", 1, 1000, 1, &r0), 0);
        assert_int_equal(sl_decide(ref, &p, "k", 1, 1000, 1, &rr), 0);
        assert_int_equal(sl_peek(st, &p, "k", 1, 1200, 1, &r0), 0);
        sl_store_stats s0;
        sl_store_stats_get(st, &s0);
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            for (int peek = 0; peek < 2; peek++) {
                const bad_call *b = &bad[i];
                sl_result junk;
                memset(&junk, 0x77, sizeof junk);
                int (*fn)(sl_store *, const sl_params *, const void *, size_t, int64_t, int64_t,
                          sl_result *) = peek ? sl_peek : sl_decide;
                int rc = fn(st, b->bad_params ? &badp : &p, b->key, b->klen, b->t, b->cost, &junk);
                if (rc != b->want)
                    fail_msg("%s: %s with %s returned %d, want %d", sl_algo_name(p.algo),
                             peek ? "sl_peek" : "sl_decide", b->what, rc, b->want);
                assert_int_equal(sl_peek(st, &p, "k", 1, 1200, 1, &r1), 0);
                if (memcmp(&r0, &r1, sizeof r0) != 0)
                    fail_msg("%s: state changed after a bad call (%s)", sl_algo_name(p.algo),
                             b->what);
                sl_store_stats s1;
                sl_store_stats_get(st, &s1);
                if (s1.keys != s0.keys)
                    fail_msg("%s: bad call (%s) changed the number of keys from %llu to %llu",
                             sl_algo_name(p.algo), b->what, (unsigned long long)s0.keys,
                             (unsigned long long)s1.keys);
            }
        }
        /* NULL store / params / out */
        assert_int_equal(sl_decide(NULL, &p, "k", 1, 1000, 1, &r1), SL_EINVAL);
        assert_int_equal(sl_decide(st, NULL, "k", 1, 1000, 1, &r1), SL_EINVAL);
        assert_int_equal(sl_decide(st, &p, "k", 1, 1000, 1, NULL), SL_EINVAL);
        /* the next decision is the one it would have been */
        sl_result a1, a2;
        assert_int_equal(sl_decide(st, &p, "k", 1, 1200, 1, &a1), 0);
        assert_int_equal(sl_decide(ref, &p, "k", 1, 1200, 1, &a2), 0);
        assert_memory_equal(&a1, &a2, sizeof a1);
        assert_memory_equal(&a1, &r0, sizeof a1); /* peek told the truth */
        sl_store_free(st);
        sl_store_free(ref);
    }
}

/* Keys are binary-safe: NUL bytes inside, and exactly SL_MAX_KEY bytes. */
static void test_keys_binary_safe(void **state)
{
    (void)state;
    sl_params p = mk(SL_FIXED_WINDOW, 1, 1000);
    sl_store *st = sl_store_new(NULL, NULL);
    assert_non_null(st);
    sl_result r;
    char max_key[SL_MAX_KEY];
    memset(max_key, 0xff, sizeof max_key);
    assert_int_equal(sl_decide(st, &p, max_key, sizeof max_key, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(sl_decide(st, &p, max_key, sizeof max_key, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    /* "a\0b" and "a\0c" and "a" are three keys */
    assert_int_equal(sl_decide(st, &p, "a\0b", 3, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(sl_decide(st, &p, "a\0c", 3, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(sl_decide(st, &p, "a", 1, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(sl_decide(st, &p, "a\0b", 3, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    /* forget: bad key is an error, state stays */
    assert_int_equal(sl_forget(st, SL_FIXED_WINDOW, NULL, 1), SL_EKEY);
    assert_int_equal(sl_forget(st, SL_FIXED_WINDOW, "a", 0), SL_EKEY);
    assert_int_equal(sl_forget(st, SL_FIXED_WINDOW, max_key, SL_MAX_KEY + 1), SL_EKEY);
    assert_int_equal(sl_decide(st, &p, max_key, sizeof max_key, 0, 1, &r), 0);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(sl_forget(st, SL_FIXED_WINDOW, max_key, sizeof max_key), 1);
    assert_int_equal(sl_forget(st, SL_FIXED_WINDOW, max_key, sizeof max_key), 0);
    sl_store_free(st);
}

static void test_limiter_new_rejects(void **state)
{
    (void)state;
    sl_params p = mk(SL_TOKEN_BUCKET, 0, 1000);
    int err = 0;
    assert_null(sl_limiter_new(&p, NULL, &err));
    assert_int_equal(err, SL_ELIMIT);
    p = mk(SL_FIXED_WINDOW, 5, 1000);
    p.burst = 3;
    err = 0;
    assert_null(sl_limiter_new(&p, NULL, &err));
    assert_int_equal(err, SL_EBURST);
    assert_null(sl_limiter_new(&p, NULL, NULL)); /* err may be NULL */
    /* a good one: bad requests through the limiter leave it as it was */
    p = mk(SL_TOKEN_BUCKET, 2, 1000);
    sl_limiter *l = sl_limiter_new(&p, NULL, &err);
    assert_non_null(l);
    sl_result r0, r1;
    assert_int_equal(sl_allow(l, "u", 1, 0, 1, &r0), 0);
    assert_int_equal(sl_limiter_peek(l, "u", 1, 0, 1, &r0), 0);
    assert_int_equal(sl_allow(l, "u", 1, 0, -5, &r1), SL_ECOST);
    assert_int_equal(sl_allow(l, "", 0, 0, 1, &r1), SL_EKEY);
    assert_int_equal(sl_allow(l, "u", 1, SL_MAX_TIME_MS, 1, &r1), SL_ETIME);
    assert_int_equal(sl_limiter_peek(l, "u", 1, 0, 1, &r1), 0);
    assert_memory_equal(&r0, &r1, sizeof r0);
    assert_int_equal(sl_reset(l, "", 0), SL_EKEY);
    assert_int_equal(sl_reset(l, "u", 1), 1);
    sl_limiter_free(l);
}

/* ---- the fast paths against the full parsers ----------------------------- */

/* A deterministic generator (xorshift64*): the same cases every run. */
static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

/* A string of n bytes, mostly digits, else one of alpha's. */
static void gen(char *s, size_t n, const char *alpha)
{
    size_t na = strlen(alpha);
    for (size_t i = 0; i < n; i++) s[i] = rnd() % 4 ? (char)('0' + rnd() % 10) : alpha[rnd() % na];
}

#define UNSET 0x5a5a5a5a5a5a5a5aLL /* *out must stay so on an error */

/* sl_int_parse and sl__int_parse_full give the same code, and the same
 * value or none, for s[0..n) under max. */
static void int_agrees(const char *s, size_t n, int64_t max)
{
    int64_t a = UNSET, b = UNSET;
    int ra = sl_int_parse(s, n, max, &a), rb = sl__int_parse_full(s, n, max, &b);
    if (ra != rb || a != b)
        fail_msg("'%.*s' under %lld: %d/%lld, full parser %d/%lld", (int)n, s, (long long)max, ra,
                 (long long)a, rb, (long long)b);
}

static void test_int_parse_fast_equals_full(void **state)
{
    (void)state;
    static const int64_t maxes[] = {0,
                                    1,
                                    5,
                                    9,
                                    10,
                                    99,
                                    100,
                                    65535,
                                    SL_MAX_LIMIT,
                                    SL_MAX_WINDOW_MS,
                                    SL_MAX_TIME_MS - 1,
                                    999999999999999999LL,
                                    INT64_MAX};
    static const char *edges[] = {
        "",
        "0",
        "00",
        "9",
        "10",
        "100",
        "65535",
        "65536",
        "1000000000000",
        "1000000000001",
        "000000000000000001",
        "999999999999999999",
        "0000000000000000001",
        "9223372036854775807",
        "9223372036854775808",
        "99999999999999999999",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1a",
        "a1",
        "1.0",
        "\xd9\xa1",
    };
    for (size_t m = 0; m < sizeof maxes / sizeof maxes[0]; m++)
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
            int_agrees(edges[i], strlen(edges[i]), maxes[m]);
    char s[24];
    for (int round = 0; round < 100000; round++) {
        size_t n = rnd() % 22;
        gen(s, n, "-+ a/:\x00\xff");
        int64_t max = rnd() % 3 ? maxes[rnd() % (sizeof maxes / sizeof maxes[0])]
                                : (int64_t)(rnd() >> (rnd() % 64));
        int_agrees(s, n, max);
    }
    /* the fast path's bound, by itself: a value above max, short or long */
    int64_t v = UNSET;
    assert_int_equal(sl_int_parse("10", 2, 9, &v), SL_EINVAL);
    assert_int_equal(sl_int_parse("5", 1, 3, &v), SL_EINVAL);
    assert_int_equal(v, UNSET);
    assert_int_equal(sl_int_parse("999999999999999999", 18, INT64_MAX, &v), 0);
    assert_int_equal(v, 999999999999999999LL);
}

static void duration_agrees(const char *s, size_t n)
{
    int64_t a = UNSET, b = UNSET;
    int ra = sl_duration_parse(s, n, &a), rb = sl__duration_parse_full(s, n, &b);
    if (ra != rb || a != b)
        fail_msg("'%.*s': %d/%lld, full parser %d/%lld", (int)n, s, ra, (long long)a, rb,
                 (long long)b);
}

static void test_duration_parse_fast_equals_full(void **state)
{
    (void)state;
    static const char *edges[] = {
        "",
        "0",
        "1",
        "1ms",
        "1s",
        "1m",
        "1h",
        "1d",
        "1w",
        "1y",
        "10y",
        "11y",
        "0h",
        "ms",
        "h",
        "1M",
        "1S",
        "1mss",
        "1sm",
        "1 h",
        "1h ",
        "1hh",
        "315576000000",
        "315576000001",
        "315576000000ms",
        "315576000s",
        "5259600m",
        "87660h",
        "3652d",
        "3653d",
        "521w",
        "522w",
        "000000000000000001h",
        "0000000000000000001h",
        "999999999999999999",
        "9999999999999999999",
        "000000000000000000000000001",
        "-1h",
        "+1h",
        "1.5h",
        "1\0h",
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        duration_agrees(edges[i], strlen(edges[i]));
    duration_agrees("1\0h", 3);
    char s[32];
    for (int round = 0; round < 100000; round++) {
        size_t n = rnd() % 24;
        gen(s, n, "smhdwyMS x-\x00");
        duration_agrees(s, n);
        /* digits then a unit, the common shape */
        size_t d = rnd() % 21;
        gen(s, d, "0");
        static const char *units[] = {"", "ms", "s", "m", "h", "d", "w", "y", "us", "mm"};
        const char *u = units[rnd() % (sizeof units / sizeof units[0])];
        memcpy(s + d, u, strlen(u));
        duration_agrees(s, d + strlen(u));
    }
}

/* AT for the memo test: the value is a counter, a new one each call, so
 * a request with AT answered from the memo would show. */
static int at_counter(void *ctx, const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    int64_t *k = ctx;
    if (n > 0 && s[0] == 'x') {
        snprintf(err, errlen, "bad AT '%.*s'", (int)n, s);
        return -1;
    }
    *out = ++*k;
    return 0;
}

static void req_equal(const sl__allow_req *a, const sl__allow_req *b)
{
    assert_int_equal(a->p.algo, b->p.algo);
    assert_int_equal(a->p.limit, b->p.limit);
    assert_int_equal(a->p.window_ms, b->p.window_ms);
    assert_int_equal(a->p.burst, b->p.burst);
    assert_int_equal(a->p.precision, b->p.precision);
    assert_int_equal(a->p.log_rejected, b->p.log_rejected);
    assert_int_equal(a->p.space, b->p.space);
    assert_int_equal(a->cost, b->cost);
    assert_int_equal(a->has_at, b->has_at);
    assert_int_equal(a->at, b->at);
}

/* sl__parse_allow_memo against sl__parse_allow on runs of requests: the
 * same one again (the memo answers), one byte changed, its case changed,
 * another request, AT (never remembered: its value changes each call),
 * errors (the memo keeps the last good one), arguments too long to
 * remember.  Every answer, *q and message equal. */
static void test_allow_memo_equals_parse(void **state)
{
    (void)state;
    static const char *words[] = {
        "100", "1", "0", "-1", "5", "1000000", "abc", "1h", "60s", "1x", "250ms", "ALGO", "algo",
        "COST", "cost", "BURST", "PRECISION", "LOGREJECTED", "logrejected", "AT", "at", "FOO",
        "token-bucket", "gcra", "sliding-log", "sliding-buckets", "7", "x1", "",
        "00000000000000100", "0000000000000000100", "00000000000000001h", /* 17-19 bytes */
        "123456789012345678901234567890123456789012345" /* 45 bytes: with more, beyond 48 */};
    size_t nw = sizeof words / sizeof words[0];
    sl__allow_memo m;
    memset(&m, 0, sizeof m);
    char store[SL__ALLOW_ARGS][64], prev[SL__ALLOW_ARGS][64];
    size_t plen[SL__ALLOW_ARGS];
    int pn = 0, remembered = 0;
    int64_t k1 = 0, k2 = 0;
    for (int round = 0; round < 200000; round++) {
        sl__arg a[SL__ALLOW_ARGS];
        int n;
        unsigned how = (unsigned)(rnd() % 8);
        if (pn > 0 && how < 5) { /* the previous request, maybe changed */
            n = pn;
            for (int i = 0; i < n; i++) {
                memcpy(store[i], prev[i], plen[i]);
                a[i] = (sl__arg){store[i], plen[i]};
            }
            int i = (int)(rnd() % (unsigned)n);
            if (how == 3 && plen[i] > 0) store[i][rnd() % plen[i]] ^= (char)(1 + rnd() % 3);
            if (how == 4 && plen[i] > 0) store[i][rnd() % plen[i]] ^= 0x20; /* its case */
        } else {
            n = 2 + (int)(rnd() % 7);
            for (int i = 0; i < n; i++) {
                const char *w = i == 0 && rnd() % 4 ? "100" : i == 1 && rnd() % 4 ? "1h"
                                                                                 : words[rnd() % nw];
                size_t len = strlen(w);
                memcpy(store[i], w, len);
                a[i] = (sl__arg){store[i], len};
            }
        }
        sl__at_parse at = rnd() % 8 ? at_counter : NULL;
        sl__allow_req q1, q2;
        char e1[256] = "", e2[256] = "";
        const sl__allow_req *hit = sl__allow_memo_get(&m, a, n);
        sl__allow_req before = hit ? *hit : (sl__allow_req){0};
        int r1 = sl__parse_allow_memo(&m, a, n, at, &k1, &q1, e1, sizeof e1);
        if (hit != NULL) { /* a hit is the answer sl__parse_allow_memo gives */
            assert_int_equal(r1, n);
            req_equal(&before, &q1);
        }
        int r2 = sl__parse_allow(a, n, NULL, at, &k2, &q2, e2, sizeof e2);
        if (r1 != r2) fail_msg("round %d: %d, sl__parse_allow %d", round, r1, r2);
        if (r1 < 0) {
            assert_string_equal(e1, e2);
        } else {
            req_equal(&q1, &q2);
            remembered += m.n == n && !q1.has_at;
        }
        assert_int_equal(k1, k2);
        size_t held = 0; /* the memo's bound */
        for (int i = 0; i < m.n; i++) held += m.len[i];
        assert_true(held <= SL__ALLOW_MEMO_BYTES);
        pn = n;
        for (int i = 0; i < n; i++) {
            memcpy(prev[i], a[i].p, a[i].len);
            plen[i] = a[i].len;
        }
    }
    assert_true(remembered > 10000);
    /* a good request of 74 bytes: answered, not remembered (m keeps the last one) */
    static const char *big[] = {"100",     "1h",    "ALGO",    "token-bucket", "COST",
                                "1000000", "BURST", "1000000", "LOGREJECTED"};
    sl__arg a[9];
    for (int i = 0; i < 9; i++) a[i] = (sl__arg){big[i], strlen(big[i])};
    for (int twice = 0; twice < 2; twice++) {
        sl__allow_req q1, q2;
        char e1[256] = "", e2[256] = "";
        assert_int_equal(sl__parse_allow_memo(&m, a, 9, NULL, NULL, &q1, e1, sizeof e1), 9);
        assert_int_equal(sl__parse_allow(a, 9, NULL, NULL, NULL, &q2, e2, sizeof e2), 9);
        req_equal(&q1, &q2);
        assert_int_equal(q1.cost, 1000000);
        assert_true(m.n != 9);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_parse_accepts),
        cmocka_unit_test(test_int_parse_rejects),
        cmocka_unit_test(test_int_parse_takes_length),
        cmocka_unit_test(test_duration_units),
        cmocka_unit_test(test_duration_rejects),
        cmocka_unit_test(test_algo_names),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_params_ranges),
        cmocka_unit_test(test_params_options_belong),
        cmocka_unit_test(test_bad_requests_leave_state),
        cmocka_unit_test(test_keys_binary_safe),
        cmocka_unit_test(test_limiter_new_rejects),
        cmocka_unit_test(test_int_parse_fast_equals_full),
        cmocka_unit_test(test_duration_parse_fast_equals_full),
        cmocka_unit_test(test_allow_memo_equals_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
