/*
 * test_carryover.c -- SPEC section 7: when a key's parameters change, its
 * state carries over (counts kept, capacities clamped) instead of handing
 * the caller a fresh burst.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

static sl_params P(sl_algo a, int64_t L, int64_t W, int64_t B, int64_t prec)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = L;
    p.window_ms = W;
    p.burst = B;
    p.precision = prec;
    return p;
}

static sl_result decide(sl_store *s, sl_params p, int64_t t, int64_t cost)
{
    sl_result r;
    assert_int_equal(sl_decide(s, &p, "k", 1, t, cost, &r), 0);
    return r;
}

static void fixed_window_counts_kept(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    decide(s, P(SL_FIXED_WINDOW, 10, 60000, 0, 0), 0, 6);
    /* limit raised: the 6 already counted stay counted */
    sl_result r = decide(s, P(SL_FIXED_WINDOW, 20, 60000, 0, 0), 1, 1);
    assert_int_equal(r.remaining, 13);
    /* limit lowered below the count: nothing passes until the window ends */
    r = decide(s, P(SL_FIXED_WINDOW, 5, 60000, 0, 0), 2, 1);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.remaining, 0);
    assert_int_equal(r.retry_after_ms, 59998);
    sl_store_free(s);
}

static void token_bucket_clamped(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    decide(s, P(SL_TOKEN_BUCKET, 10, 1000, 0, 0), 0, 7); /* 3 tokens left */
    /* a bigger bucket does not refill it: still 3 tokens */
    sl_result r = decide(s, P(SL_TOKEN_BUCKET, 10, 1000, 50, 0), 0, 0);
    assert_int_equal(r.remaining, 3);
    assert_int_equal(r.limit, 50);
    /* a smaller bucket clamps: at most its capacity */
    r = decide(s, P(SL_TOKEN_BUCKET, 2, 1000, 0, 0), 0, 0);
    assert_int_equal(r.remaining, 2);
    /* a new window keeps the whole tokens */
    r = decide(s, P(SL_TOKEN_BUCKET, 2, 60000, 0, 0), 0, 0);
    assert_int_equal(r.remaining, 2);
    sl_store_free(s);
}

static void gcra_and_leaky_clamped(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    decide(s, P(SL_GCRA, 1, 1000, 10, 0), 0, 8); /* 2 left of 10 */
    sl_result r = decide(s, P(SL_GCRA, 1, 1000, 4, 0), 0, 0);
    assert_int_equal(r.remaining, 0); /* tolerance clamped to the new burst */
    assert_int_equal(r.reset_after_ms, 4000);
    decide(s, P(SL_LEAKY_BUCKET, 1, 1000, 10, 0), 0, 8); /* queue of 8 */
    r = decide(s, P(SL_LEAKY_BUCKET, 1, 1000, 3, 0), 0, 1);
    assert_int_equal(r.allowed, 0); /* the queue is clamped to 3: full */
    assert_int_equal(r.retry_after_ms, 1000);
    sl_store_free(s);
}

static void sliding_buckets_relayout(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    decide(s, P(SL_SLIDING_BUCKETS, 100, 60000, 0, 10), 0, 30);
    decide(s, P(SL_SLIDING_BUCKETS, 100, 60000, 0, 10), 15000, 20);
    /* a new precision keeps the window's count (50) */
    sl_result r = decide(s, P(SL_SLIDING_BUCKETS, 100, 60000, 0, 60), 16000, 0);
    assert_int_equal(r.remaining, 50);
    /* a limit that needs wider counters keeps them too */
    r = decide(s, P(SL_SLIDING_BUCKETS, 100000, 60000, 0, 60), 16000, 1000);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.remaining, 100000 - 1050);
    /* answer-only with yet another layout changes nothing stored */
    sl_params p = P(SL_SLIDING_BUCKETS, 100000, 60000, 0, 20);
    sl_result peek;
    assert_int_equal(sl_peek(s, &p, "k", 1, 16000, 0, &peek), 0);
    assert_int_equal(peek.remaining, 100000 - 1050);
    r = decide(s, P(SL_SLIDING_BUCKETS, 100000, 60000, 0, 60), 16000, 0);
    assert_int_equal(r.remaining, 100000 - 1050);
    /* and the counts still leave the window in time */
    r = decide(s, P(SL_SLIDING_BUCKETS, 100000, 60000, 0, 60), 16000 + 60000, 0);
    assert_int_equal(r.remaining, 100000);
    sl_store_free(s);
}

static void sliding_log_and_window_kept(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    decide(s, P(SL_SLIDING_LOG, 5, 10000, 0, 0), 0, 4);
    sl_result r = decide(s, P(SL_SLIDING_LOG, 8, 10000, 0, 0), 1000, 0);
    assert_int_equal(r.remaining, 4);
    decide(s, P(SL_SLIDING_WINDOW, 10, 60000, 0, 0), 0, 9);
    r = decide(s, P(SL_SLIDING_WINDOW, 12, 60000, 0, 0), 1000, 0);
    assert_int_equal(r.remaining, 3);
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixed_window_counts_kept),  cmocka_unit_test(token_bucket_clamped),
        cmocka_unit_test(gcra_and_leaky_clamped),    cmocka_unit_test(sliding_buckets_relayout),
        cmocka_unit_test(sliding_log_and_window_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
