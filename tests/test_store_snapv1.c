/*
 * test_store_snapv1.c -- a snapshot written by the store as it was at
 * e9bf021 (format version 1, tests/data/snapshot_v1.snap) still loads, and
 * every key answers as it did when that build loaded the same file.
 *
 * The file holds 70 keys: each algorithm, five keys of 1, 9, 16, 23 and 51
 * bytes (short enough for a table slot and not), in both key spaces, each
 * decided a few times at 1,000,000 ms and after.  The expected answers are
 * what that build's sl_peek gave at 1,010,000 ms after loading the file
 * (printed by the generator, not recomputed here).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

static const char *keys[] = {"a", "user:1234", "0123456789abcdef", "0123456789abcdefghijklm",
                             "a-rather-long-key-that-never-fits-inline:0123456789"};

/* algo, key index, space, allowed, remaining, retry_after_ms, reset_after_ms, delay_ms */
static const int64_t expected[][8] = {
    {0, 0, 0, 1, 2, 0, 10000, 0},
    {0, 0, 1, 1, 1, 0, 10000, 0},
    {0, 1, 0, 1, 2, 0, 10000, 0},
    {0, 1, 1, 1, 1, 0, 10000, 0},
    {0, 2, 0, 1, 2, 0, 10000, 0},
    {0, 2, 1, 1, 1, 0, 10000, 0},
    {0, 3, 0, 1, 2, 0, 10000, 0},
    {0, 3, 1, 1, 1, 0, 10000, 0},
    {0, 4, 0, 1, 2, 0, 10000, 0},
    {0, 4, 1, 1, 1, 0, 10000, 0},
    {1, 0, 0, 1, 2, 0, 60000, 0},
    {1, 0, 1, 1, 1, 0, 60000, 0},
    {1, 1, 0, 1, 2, 0, 60000, 0},
    {1, 1, 1, 1, 1, 0, 60000, 0},
    {1, 2, 0, 1, 2, 0, 60000, 0},
    {1, 2, 1, 1, 1, 0, 60000, 0},
    {1, 3, 0, 1, 2, 0, 60000, 0},
    {1, 3, 1, 1, 1, 0, 60000, 0},
    {1, 4, 0, 1, 2, 0, 60000, 0},
    {1, 4, 1, 1, 1, 0, 60000, 0},
    {2, 0, 0, 1, 2, 0, 50001, 0},
    {2, 0, 1, 1, 1, 0, 55001, 0},
    {2, 1, 0, 1, 2, 0, 55001, 0},
    {2, 1, 1, 1, 1, 0, 58001, 0},
    {2, 2, 0, 1, 2, 0, 58001, 0},
    {2, 2, 1, 1, 1, 0, 60001, 0},
    {2, 3, 0, 1, 2, 0, 60001, 0},
    {2, 3, 1, 1, 1, 0, 61429, 0},
    {2, 4, 0, 1, 2, 0, 61429, 0},
    {2, 4, 1, 1, 1, 0, 62501, 0},
    {3, 0, 0, 1, 2, 0, 58000, 0},
    {3, 0, 1, 1, 1, 0, 58000, 0},
    {3, 1, 0, 1, 2, 0, 58000, 0},
    {3, 1, 1, 1, 1, 0, 58000, 0},
    {3, 2, 0, 1, 2, 0, 58000, 0},
    {3, 2, 1, 1, 1, 0, 58000, 0},
    {3, 3, 0, 1, 2, 0, 58000, 0},
    {3, 3, 1, 1, 1, 0, 58000, 0},
    {3, 4, 0, 1, 2, 0, 58000, 0},
    {3, 4, 1, 1, 1, 0, 58000, 0},
    {4, 0, 0, 1, 2, 0, 26052, 0},
    {4, 0, 1, 1, 1, 0, 38052, 0},
    {4, 1, 0, 1, 2, 0, 30052, 0},
    {4, 1, 1, 1, 1, 0, 40052, 0},
    {4, 2, 0, 1, 3, 0, 32910, 0},
    {4, 2, 1, 1, 2, 0, 41481, 0},
    {4, 3, 0, 1, 3, 0, 35052, 0},
    {4, 3, 1, 1, 2, 0, 42552, 0},
    {4, 4, 0, 1, 3, 0, 36719, 0},
    {4, 4, 1, 1, 2, 0, 43386, 0},
    {5, 0, 0, 1, 2, 0, 26065, 0},
    {5, 0, 1, 1, 1, 0, 38065, 0},
    {5, 1, 0, 1, 2, 0, 30065, 0},
    {5, 1, 1, 1, 1, 0, 40065, 0},
    {5, 2, 0, 1, 3, 0, 32923, 0},
    {5, 2, 1, 1, 2, 0, 41494, 0},
    {5, 3, 0, 1, 3, 0, 35065, 0},
    {5, 3, 1, 1, 2, 0, 42565, 0},
    {5, 4, 0, 1, 3, 0, 36732, 0},
    {5, 4, 1, 1, 2, 0, 43399, 0},
    {6, 0, 0, 1, 2, 0, 26078, 14078},
    {6, 0, 1, 1, 1, 0, 38078, 26078},
    {6, 1, 0, 1, 2, 0, 30078, 20078},
    {6, 1, 1, 1, 1, 0, 40078, 30078},
    {6, 2, 0, 1, 3, 0, 32936, 24364},
    {6, 2, 1, 1, 2, 0, 41507, 32936},
    {6, 3, 0, 1, 3, 0, 35078, 27578},
    {6, 3, 1, 1, 2, 0, 42578, 35078},
    {6, 4, 0, 1, 3, 0, 36745, 30078},
    {6, 4, 1, 1, 2, 0, 43412, 36745},
};

/* The fixture, found from the repository's root (where tests/run.sh runs
 * tests) or beside this source file. */
static const char *fixture(void)
{
    static char path[4096];
    FILE *f = fopen("tests/data/snapshot_v1.snap", "rb");
    if (f) {
        fclose(f);
        return "tests/data/snapshot_v1.snap";
    }
    const char *src = __FILE__, *slash = strrchr(src, '/');
    snprintf(path, sizeof path, "%.*sdata/snapshot_v1.snap", slash ? (int)(slash - src + 1) : 0,
             src);
    return path;
}

static void version1_loads(void **state)
{
    (void)state;
    sl_store *s = sl_store_new(NULL, NULL);
    assert_non_null(s);
    char err[256] = "";
    uint64_t n = 0;
    if (sl_store_load(s, fixture(), &n, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(n, 70);
    assert_int_equal(sizeof expected / sizeof expected[0], 70);
    for (size_t i = 0; i < 70; i++) {
        const int64_t *e = expected[i];
        sl_params p = SL_PARAMS_INIT;
        p.algo = (sl_algo)e[0];
        p.limit = 5 + e[1];
        p.window_ms = 60000;
        p.space = (int)e[2];
        const char *k = keys[e[1]];
        sl_result r;
        assert_int_equal(sl_peek(s, &p, k, strlen(k), 1010000, 1, &r), 0);
        if (r.allowed != e[3] || r.remaining != e[4] || r.retry_after_ms != e[5] ||
            r.reset_after_ms != e[6] || r.delay_ms != e[7])
            fail_msg("%s key %s space %d: got %lld/%lld/%lld/%lld/%lld, the v1 build said "
                     "%lld/%lld/%lld/%lld/%lld",
                     sl_algo_name(p.algo), k, p.space, (long long)r.allowed,
                     (long long)r.remaining, (long long)r.retry_after_ms,
                     (long long)r.reset_after_ms, (long long)r.delay_ms, (long long)e[3],
                     (long long)e[4], (long long)e[5], (long long)e[6], (long long)e[7]);
    }
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version1_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
