/*
 * test_ring.c -- the consistent-hash ring of the Redis backend
 * (src/backend/redis/ring.h): adding a node moves about its share of the
 * tags, all of them to it; removing one moves only its own; the list's
 * order does not matter; the printed shares are the tags' shares; and the
 * hash is pinned, since a change would move every key of every fleet (the
 * values were computed by an independent Python model of the ring).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "redis/ring.h"

#define NTAGS 100000

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* NTAGS random tags "user:<n>" (each 8..24 bytes), from a fixed seed. */
static char (*tags)[32];
static size_t *lens;

static int make_tags(void **state)
{
    (void)state;
    tags = malloc(NTAGS * sizeof *tags);
    lens = malloc(NTAGS * sizeof *lens);
    uint64_t s = 42;
    for (int i = 0; i < NTAGS; i++)
        lens[i] = (size_t)snprintf(tags[i], sizeof tags[i], "user:%llu",
                                   (unsigned long long)(mix(&s) >> (mix(&s) % 40)));
    return tags == NULL || lens == NULL;
}

static int free_tags(void **state)
{
    (void)state;
    free(tags);
    free(lens);
    return 0;
}

/* The owner of each tag, as a node's identity (ids[node]). */
static void owners(const char *const *ids, int n, const char **out)
{
    sl_ring *r = sl_ring_new(ids, n);
    assert_non_null(r);
    for (int i = 0; i < NTAGS; i++) out[i] = ids[sl_ring_node(r, tags[i], lens[i])];
    sl_ring_free(r);
}

static const char *A = "10.0.0.1:6379/0", *B = "10.0.0.2:6379/0", *C = "10.0.0.3:6379/0",
                  *D = "10.0.0.4:6379/0";

static void test_adding_moves_a_share_to_the_new_node(void **state)
{
    (void)state;
    static const char *three[NTAGS], *four[NTAGS];
    owners((const char *[]){A, B, C}, 3, three);
    owners((const char *[]){A, B, C, D}, 4, four);
    int moved = 0;
    for (int i = 0; i < NTAGS; i++) {
        if (three[i] == four[i]) continue;
        moved++;
        assert_ptr_equal(four[i], D); /* every tag that moved went to the new node */
    }
    printf("adding a 4th node moved %d of %d tags (%.1f%%)\n", moved, NTAGS, 100.0 * moved / NTAGS);
    assert_in_range(moved, NTAGS * 15 / 100, NTAGS * 35 / 100);
}

static void test_removing_moves_only_its_tags(void **state)
{
    (void)state;
    static const char *four[NTAGS], *three[NTAGS];
    owners((const char *[]){A, B, C, D}, 4, four);
    owners((const char *[]){A, B, D}, 3, three);
    int moved = 0, hadc = 0;
    for (int i = 0; i < NTAGS; i++) {
        hadc += four[i] == C;
        if (four[i] == C)
            assert_ptr_not_equal(three[i], C);
        else
            assert_ptr_equal(three[i], four[i]); /* C's removal moved nothing else */
        moved += three[i] != four[i];
    }
    assert_int_equal(moved, hadc);
    assert_in_range(hadc, 1, NTAGS - 1);
}

static void test_order_of_the_list_does_not_matter(void **state)
{
    (void)state;
    static const char *x[NTAGS], *y[NTAGS];
    owners((const char *[]){A, B, C, D}, 4, x);
    owners((const char *[]){D, B, A, C}, 4, y);
    for (int i = 0; i < NTAGS; i++) assert_string_equal(x[i], y[i]);
}

/* The share INFO prints is the part of the tags a node owns (within 1.5
 * points: 100k tags sample it to about 0.15), and the shares sum to 1. */
static void test_shares_are_what_the_tags_see(void **state)
{
    (void)state;
    const char *ids[] = {A, B, C, D};
    sl_ring *r = sl_ring_new(ids, 4);
    assert_non_null(r);
    assert_int_equal(sl_ring_size(r), 4);
    int count[4] = {0};
    for (int i = 0; i < NTAGS; i++) count[sl_ring_node(r, tags[i], lens[i])]++;
    double sum = 0;
    for (int k = 0; k < 4; k++) {
        double share = sl_ring_share(r, k), seen = (double)count[k] / NTAGS;
        printf("%s: share %.4f, tags %.4f\n", ids[k], share, seen);
        assert_true(share > seen - 0.015 && share < seen + 0.015);
        assert_true(share > 0.15 && share < 0.35); /* 160 points: no node far off its quarter */
        sum += share;
    }
    assert_true(sum > 0.999999 && sum < 1.000001);
    assert_true(sl_ring_share(r, 4) == 0);
    sl_ring_free(r);
}

static void test_one_node_owns_everything(void **state)
{
    (void)state;
    sl_ring *r = sl_ring_new((const char *[]){A}, 1);
    assert_non_null(r);
    for (int i = 0; i < 1000; i++) assert_int_equal(sl_ring_node(r, tags[i], lens[i]), 0);
    assert_true(sl_ring_share(r, 0) > 0.999999);
    sl_ring_free(r);
}

static void test_sizes_out_of_range(void **state)
{
    (void)state;
    const char *ids[SL_RING_MAX + 1];
    char names[SL_RING_MAX + 1][24];
    for (int i = 0; i <= SL_RING_MAX; i++) {
        snprintf(names[i], sizeof names[i], "h%d:1/0", i);
        ids[i] = names[i];
    }
    assert_null(sl_ring_new(ids, 0));
    assert_null(sl_ring_new(ids, SL_RING_MAX + 1));
    sl_ring *r = sl_ring_new(ids, SL_RING_MAX);
    assert_non_null(r);
    sl_ring_free(r);
}

/* The hash places every key of every fleet: a change would move them all
 * on an upgrade.  These values are the ring's contract. */
static void test_hash_is_pinned(void **state)
{
    (void)state;
    assert_true(sl_ring_hash("", 0) == 0xd725c98e9509182eULL);
    assert_true(sl_ring_hash("user:1", 6) == 0x25bf4257e1f5a102ULL);
    sl_ring *r = sl_ring_new((const char *[]){A, B, C}, 3);
    assert_non_null(r);
    assert_int_equal(sl_ring_node(r, "user:1", 6), 2);
    assert_int_equal(sl_ring_node(r, "user:2", 6), 1);
    assert_int_equal(sl_ring_node(r, "user:5", 6), 0);
    sl_ring_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adding_moves_a_share_to_the_new_node),
        cmocka_unit_test(test_removing_moves_only_its_tags),
        cmocka_unit_test(test_order_of_the_list_does_not_matter),
        cmocka_unit_test(test_shares_are_what_the_tags_see),
        cmocka_unit_test(test_one_node_owns_everything),
        cmocka_unit_test(test_sizes_out_of_range),
        cmocka_unit_test(test_hash_is_pinned),
    };
    return cmocka_run_group_tests(tests, make_tags, free_tags);
}
