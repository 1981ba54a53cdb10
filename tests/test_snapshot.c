/*
 * test_snapshot.c -- sl_store_save / sl_store_load: a restart loses nothing
 * (every key of every algorithm answers the same after a round trip), and a
 * damaged file is refused whole with a message that says what is wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice.h"

#define NKEYS 300

static char path[256];

static sl_params params_for(int a)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = (sl_algo)(a % SL_ALGO_COUNT);
    p.limit = 5 + a % 7;
    p.window_ms = 60000;
    if (p.algo == SL_SLIDING_BUCKETS) p.precision = 60;
    if (p.algo == SL_TOKEN_BUCKET || p.algo == SL_LEAKY_BUCKET) p.burst = 9;
    if (p.algo == SL_SLIDING_LOG && a % 2) p.log_rejected = 1;
    return p;
}

/* Fills a store with NKEYS keys under every algorithm, some at their limit. */
static sl_store *filled(void)
{
    sl_store *s = sl_store_new(NULL, NULL);
    char key[32];
    for (int a = 0; a < SL_ALGO_COUNT * 2; a++) {
        sl_params p = params_for(a);
        for (int k = 0; k < NKEYS; k++) {
            int n = snprintf(key, sizeof(key), "k%d:%d", a, k);
            for (int i = 0; i < k % 12; i++) {
                sl_result r;
                assert_int_equal(sl_decide(s, &p, key, (size_t)n, 1000 + i * 700 + k, 1 + i % 3, &r), 0);
            }
        }
    }
    return s;
}

/* Every key answers the same in both stores (peek at a later time). */
static void same_answers(sl_store *a, sl_store *b)
{
    char key[32];
    for (int al = 0; al < SL_ALGO_COUNT * 2; al++) {
        sl_params p = params_for(al);
        for (int k = 0; k < NKEYS; k++) {
            int n = snprintf(key, sizeof(key), "k%d:%d", al, k);
            for (int64_t t = 9000; t < 80000; t += 7000) {
                sl_result ra, rb;
                assert_int_equal(sl_peek(a, &p, key, (size_t)n, t, 2, &ra), 0);
                assert_int_equal(sl_peek(b, &p, key, (size_t)n, t, 2, &rb), 0);
                if (memcmp(&ra, &rb, sizeof(ra)) != 0)
                    fail_msg("%s key %s at %lld differs after reload", sl_algo_name(p.algo), key,
                             (long long)t);
            }
        }
    }
}

static void round_trip(void **state)
{
    (void)state;
    sl_store *a = filled();
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    sl_store *b = sl_store_new(NULL, NULL);
    uint64_t n = 0;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), 0);
    sl_store_stats sa, sb;
    sl_store_stats_get(a, &sa);
    sl_store_stats_get(b, &sb);
    assert_int_equal(n, sa.keys);
    assert_int_equal(sb.keys, sa.keys);
    same_answers(a, b);
    sl_store_free(a);
    sl_store_free(b);
}

/* A key in both spaces comes back as two keys with their own counts. */
static void spaces_round_trip(void **state)
{
    (void)state;
    sl_store *a = sl_store_new(NULL, NULL);
    sl_params p0 = SL_PARAMS_INIT, p1;
    p0.algo = SL_TOKEN_BUCKET;
    p0.limit = 10;
    p0.window_ms = 60000;
    p1 = p0;
    p1.space = 1;
    sl_result r;
    assert_int_equal(sl_decide(a, &p0, "both", 4, 1000, 2, &r), 0);
    assert_int_equal(sl_decide(a, &p1, "both", 4, 1000, 7, &r), 0);
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    sl_store *b = sl_store_new(NULL, NULL);
    uint64_t n = 0;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sl_peek(b, &p0, "both", 4, 1000, 0, &r), 0);
    assert_int_equal(r.remaining, 8);
    assert_int_equal(sl_peek(b, &p1, "both", 4, 1000, 0, &r), 0);
    assert_int_equal(r.remaining, 3);
    sl_store_free(a);
    sl_store_free(b);
}

static size_t file_size(void)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return (size_t)n;
}

static void rewrite(size_t keep, long flip_at)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p = malloc(keep);
    assert_int_equal(fread(p, 1, keep, f), keep);
    fclose(f);
    if (flip_at >= 0) p[flip_at] ^= 0x5a;
    f = fopen(path, "wb");
    fwrite(p, 1, keep, f);
    fclose(f);
    free(p);
}

/* A damaged file is refused, with a message naming the file and the
 * problem, and the store it was loaded into is unchanged. */
static void refuse(const char *what, const char *phrase)
{
    sl_store *b = sl_store_new(NULL, NULL);
    sl_params p = params_for(0);
    sl_result r;
    sl_decide(b, &p, "already", 7, 1, 1, &r);
    char err[512] = "";
    uint64_t n = 12345;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), -1);
    if (strstr(err, phrase) == NULL || strstr(err, path) == NULL)
        fail_msg("%s: message '%s' does not say '%s' and the path", what, err, phrase);
    sl_store_stats st;
    sl_store_stats_get(b, &st);
    assert_int_equal(st.keys, 1); /* nothing half-loaded */
    sl_store_free(b);
}

static void damaged_files(void **state)
{
    (void)state;
    sl_store *a = filled();
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    size_t full = file_size();

    rewrite(full, (long)(full / 2)); /* one flipped byte in the middle */
    refuse("flipped byte", "checksum mismatch");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(full - 100, -1); /* cut short */
    refuse("truncated", "checksum mismatch");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(30, -1); /* only the header survives */
    refuse("header only", "truncated");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(full, 0); /* magic */
    refuse("bad magic", "not a sluice snapshot");

    FILE *f = fopen(path, "wb");
    fputs("hello, I am not a snapshot at all, just text\n", f);
    fclose(f);
    refuse("text", "not a sluice snapshot");

    unlink(path);
    sl_store *b = sl_store_new(NULL, NULL);
    assert_int_equal(sl_store_load(b, path, NULL, err, sizeof(err)), 1); /* absent: start empty */
    sl_store_free(b);
    sl_store_free(a);
}

/* An empty store, and one whose keys all sit in one shard of many, round
 * trip too (empty shards must not disturb the checksum). */
static void sparse_stores(void **state)
{
    (void)state;
    char err[512];
    for (int keys = 0; keys <= 1; keys++) {
        sl_store *a = sl_store_new(NULL, NULL);
        sl_params p = params_for(0);
        sl_result r;
        if (keys) sl_decide(a, &p, "only", 4, 5, 1, &r);
        assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
        sl_store *b = sl_store_new(NULL, NULL);
        uint64_t n = 99;
        if (sl_store_load(b, path, &n, err, sizeof(err)) != 0) fail_msg("%s", err);
        assert_int_equal(n, (uint64_t)keys);
        sl_store_free(a);
        sl_store_free(b);
    }
}

static void unwritable(void **state)
{
    (void)state;
    sl_store *a = sl_store_new(NULL, NULL);
    char err[512] = "";
    assert_int_equal(sl_store_save(a, "/nonexistent-dir/x/snap", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x/snap"));
    sl_store_free(a);
}

int main(void)
{
    snprintf(path, sizeof(path), "/tmp/sluice-test-snapshot.%d", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(spaces_round_trip),
        cmocka_unit_test(damaged_files),
        cmocka_unit_test(sparse_stores),
        cmocka_unit_test(unwritable),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    return rc;
}
