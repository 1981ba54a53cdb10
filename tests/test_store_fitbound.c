/*
 * test_store_fitbound.c -- fitted tables in a bounded store at its bound
 * (store.c, fit_purge; docs/store.md, "Fitted tables", "Bounded stores"):
 * tombstones turned back into room in place (no second block, no
 * eviction), a table shrunk in place giving its bytes back (every key
 * still there with its count), and keys at rest in one table making room
 * for new keys of another size without a live eviction.  Each store is
 * put on the bounded fitted path with sl__store_fit_off(s, -1), whatever
 * the build's default (SL__FIT_BOUNDED).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "store.h"
#include "support/fit_deciders.h"

#define T0     1764000000000LL
#define BOUND  (256u * 1024)
#define LONG_L 1000000

/* One shard of BOUND bytes, records locked one by one (lock-free readers
 * and their grace periods, as sluiced's store), on the bounded fitted path. */
static sl_store *bounded(void)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1;
    o.locking = SL_LOCK_RECORD;
    o.max_bytes = BOUND;
    o.on_full = SL_FULL_EVICT;
    o.fixed_seed = 1;
    memcpy(o.seed, "fitted-bound-16b", 16);
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    assert_int_equal(err, SL_OK);
    sl__store_fit_off(s, -1);
    return s;
}

/* A fixed window of `window` ms and limit L: after n requests in it a key
 * has L - n left, exactly. */
static sl_params fw(int64_t L, int64_t window)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = L;
    p.window_ms = window;
    return p;
}

/* Key i of length n (8..40): a letter for the length, then digits. */
static void key(char *k, unsigned i, size_t n)
{
    char b[64];
    snprintf(b, sizeof b, "%c%039u", 'a' + (int)(n % 26), i);
    memcpy(k, b + 40 - n, n);
    k[0] = (char)('a' + (int)(n % 26));
}

static void stats(sl_store *s, sl_store_stats *st) { sl_store_stats_get(s, st); }

static sl__fit_info info(sl_store *s, size_t klen) { return fit_table_info(s, klen); }

static void decide_ok(sl_store *s, const sl_params *p, const char *k, size_t n, int64_t t,
                      int64_t left)
{
    sl_result r;
    int rc = sl_decide(s, p, k, n, t, 1, &r);
    if (rc != 0 || !r.allowed || r.remaining != left)
        fail_msg("%.*s at %lld: rc %d allowed %d remaining %lld (want %lld)", (int)n, k,
                 (long long)(t - T0), rc, (int)r.allowed, (long long)r.remaining,
                 (long long)left);
}

/* Whether key k holds one request (1), none (0: absent), or anything else
 * (-1): a peek of cost 1 says what a request would leave. */
static int has_one(sl_store *s, const char *k, size_t n, int64_t t)
{
    sl_params p = fw(LONG_L, SL_MAX_WINDOW_MS);
    sl_result r;
    assert_int_equal(sl_peek(s, &p, k, n, t, 1, &r), 0);
    return r.remaining == LONG_L - 2 ? 1 : r.remaining == LONG_L - 1 ? 0 : -1;
}

/* Fills s with 8-byte keys that never come to rest until the first
 * eviction (the store is at its bound); returns how many were put. */
static unsigned fill(sl_store *s, size_t n)
{
    sl_params p = fw(LONG_L, SL_MAX_WINDOW_MS);
    sl_store_stats st;
    char k[64];
    unsigned i;
    for (i = 0; i < 100000; i++) {
        key(k, i, n);
        decide_ok(s, &p, k, n, T0, LONG_L - 1);
        stats(s, &st);
        assert_true(st.bytes <= BOUND);
        if (st.evictions) break;
    }
    assert_true(st.evictions == 1 && i < 100000);
    return i + 1;
}

/* A table at the bound, half of its keys forgotten (tombstones): as many
 * new keys of its size as it has tombstones (but a margin) take their
 * room in that table -- tombstones reused, and
 * purged in place when free slots are what they need -- without a second
 * block, a growth, the slab, or one more eviction. */
static void test_purge_in_place(void **state)
{
    (void)state;
    sl_store *s = bounded();
    sl_params p = fw(LONG_L, SL_MAX_WINDOW_MS);
    sl_store_stats st;
    char k[64];
    unsigned n = fill(s, 8), forgot = 0;
    for (unsigned i = 0; i < n; i += 2) {
        key(k, i, 8);
        forgot += (unsigned)sl_forget(s, SL_FIXED_WINDOW, k, 8);
    }
    sl__fit_info a = info(s, 8);
    assert_true(a.cap > 0 && a.tomb > a.cap / 3); /* most keys were in the table */
    const unsigned m = a.tomb - a.tomb / 50;
    for (unsigned j = 0; j < m; j++) {
        key(k, n + j, 8);
        decide_ok(s, &p, k, 8, T0 + 1, LONG_L - 1);
        if (sl__store_placed(s, SL_FIXED_WINDOW, k, 8) != 1)
            fail_msg("new key %u of %u is not in the fitted table", j, m);
    }
    sl__fit_info b = info(s, 8);
    stats(s, &st);
    assert_int_equal(st.evictions, 1); /* the fill's, none since */
    assert_int_equal(st.expired, 0);
    assert_true(st.bytes <= BOUND);
    assert_int_equal(b.cap, a.cap); /* in place: no growth */
    assert_true(b.purges > a.purges);
    assert_int_equal(st.keys, n - 1 - forgot + m);
    unsigned old = 0;
    for (unsigned i = 1; i < n; i += 2) { /* the odd keys kept their counts (one was evicted) */
        key(k, i, 8);
        int h = has_one(s, k, 8, T0 + 2);
        assert_true(h >= 0);
        old += (unsigned)h;
    }
    assert_true(old + 1 >= n / 2);
    for (unsigned j = 0; j < m; j++) {
        key(k, n + j, 8);
        assert_int_equal(has_one(s, k, 8, T0 + 2), 1);
    }
    sl_store_free(s);
}

/* A table at the bound with 3/4 of its keys forgotten: keys of another
 * size need memory, which the table gives back by shrinking in place --
 * no eviction; every key it still holds is found with its exact count. */
static void test_shrink_in_place(void **state)
{
    (void)state;
    sl_store *s = bounded();
    sl_params p = fw(LONG_L, SL_MAX_WINDOW_MS);
    sl_store_stats st;
    char k[64];
    unsigned n = fill(s, 8);
    for (unsigned i = 0; i < n; i++) {
        if (i % 4 == 3) continue;
        key(k, i, 8);
        sl_forget(s, SL_FIXED_WINDOW, k, 8);
    }
    sl__fit_info a = info(s, 8);
    stats(s, &st);
    uint64_t keys0 = st.keys; /* every 4th key, but the one evicted by the fill */
    const unsigned m = 1500; /* 30-byte keys: ~70 KB of the room the forgotten keys left */
    for (unsigned j = 0; j < m; j++) {
        key(k, j, 30);
        decide_ok(s, &p, k, 30, T0 + 1, LONG_L - 1);
    }
    sl__fit_info b = info(s, 8);
    stats(s, &st);
    assert_int_equal(st.evictions, 1); /* the fill's */
    assert_true(st.bytes <= BOUND);
    assert_true(b.cap < a.cap / 2);    /* shrunk in place ... */
    assert_true(b.slot0 == a.slot0);   /* ... its slots where they were */
    assert_true(b.purges > a.purges);
    assert_int_equal(b.live, a.live);
    assert_true(b.held < a.held);
    unsigned kept = 0;
    for (unsigned i = 3; i < n; i += 4) {
        key(k, i, 8);
        int h = has_one(s, k, 8, T0 + 2);
        assert_true(h >= 0);
        kept += (unsigned)h;
    }
    assert_int_equal(kept, keys0);
    for (unsigned j = 0; j < m; j++) {
        key(k, j, 30);
        assert_int_equal(has_one(s, k, 30, T0 + 2), 1);
    }
    sl_store_free(s);
}

/* Keys at rest only in one table (8-byte keys whose window has ended), new
 * keys of another size (30 bytes) that need their room: the keys at rest
 * go, counted at rest, and no live key is evicted. */
static void test_at_rest_first_two_sizes(void **state)
{
    (void)state;
    sl_store *s = bounded();
    sl_params shortw = fw(10, 1000), p = fw(LONG_L, SL_MAX_WINDOW_MS);
    sl_store_stats st;
    char k[64];
    unsigned n;
    for (n = 0; n < 100000; n++) { /* at the bound, every key restricted until T0 + 1000 */
        key(k, n, 8);
        decide_ok(s, &shortw, k, 8, T0, 9);
        stats(s, &st);
        if (st.evictions) break;
    }
    assert_true(n < 100000);
    uint64_t ev = st.evictions;
    const unsigned m = n / 3; /* 30-byte keys need ~2x the room: ~2/3 of the 8-byte keys' */
    for (unsigned j = 0; j < m; j++) {
        key(k, j, 30);
        decide_ok(s, &p, k, 30, T0 + 5000, LONG_L - 1);
    }
    stats(s, &st);
    assert_int_equal(st.evictions, ev); /* no live eviction */
    assert_true(st.evicted_at_rest > 0);
    assert_int_equal(st.expired, st.evicted_at_rest);
    assert_true(st.bytes <= BOUND);
    for (unsigned j = 0; j < m; j++) {
        key(k, j, 30);
        assert_int_equal(has_one(s, k, 30, T0 + 5001), 1);
    }
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_purge_in_place),
        cmocka_unit_test(test_shrink_in_place),
        cmocka_unit_test(test_at_rest_first_two_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
