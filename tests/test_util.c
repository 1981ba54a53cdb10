/*
 * test_util.c -- the helpers of src/lib/util.h: the clocks (the anchored
 * clock sluiced decides on among them), the byte-size
 * parser both `sluiced` and `sluice replay` use (k = 1024), and the CPU
 * count (the affinity mask, the cgroup quota read from files this test
 * writes in a temporary folder).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"
#include "util.h"

/* ---- clocks ------------------------------------------------------------- */

static void test_clocks(void **state)
{
    (void)state;
    int64_t w = sl__wall_ms();
    int64_t t = (int64_t)time(NULL) * 1000;
    /* the same clock as time(2), read a moment apart */
    assert_true(w >= t - 1000 && w <= t + 2000);
    int64_t a = sl__mono_ms(), ns = sl__mono_ns(), b = sl__mono_ms();
    assert_true(a <= b);
    assert_true(ns / 1000000 >= a && ns / 1000000 <= b);
    assert_true(sl__mono_ns() >= ns);
}

/* ---- the anchored clock -------------------------------------------------- */

static int64_t boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs first (main's order): nothing has anchored the clock yet, so its
 * first reading anchors it to the wall clock. */
static void test_clock_unanchored_reads_wall(void **state)
{
    (void)state;
    int64_t s0 = sl__steady_ms(), w0 = sl__wall_ms(), c = sl__clock_ms(), w1 = sl__wall_ms();
    assert_true(c >= w0 && c <= w1 + 1); /* (+1: the two clocks round apart) */
    /* and that anchor holds: a second reading has moved by the steady time */
    int64_t c2 = sl__clock_ms(), s1 = sl__steady_ms();
    assert_true(c2 >= c && c2 - c <= s1 - s0);
}

/* The pure core: a reading is offset + steady time, and no wall time
 * enters it -- which is why a wall-clock step changes nothing. */
static void test_clock_pure(void **state)
{
    (void)state;
    int64_t off = sl__clock_offset(1800000000000, 5000);
    assert_int_equal(sl__clock_at(off, 5000), 1800000000000);
    assert_int_equal(sl__clock_at(off, 5250), 1800000000250);
    assert_int_equal(sl__clock_at(off, 4999), 1799999999999);
    /* a steady clock near its zero and a time before 1970 both work */
    off = sl__clock_offset(-1000, 0);
    assert_int_equal(sl__clock_at(off, 3000), 2000);
}

/* The steady clock is CLOCK_BOOTTIME, which also counts a suspension. */
static void test_steady_is_boottime(void **state)
{
    (void)state;
    int64_t a = boot_ms(), s = sl__steady_ms(), b = boot_ms();
    assert_true(a <= s && s <= b);
}

/* Anchored to a time far from the wall clock, it reads that time and then
 * advances exactly as the steady clock does -- over a real pause, not a
 * simulated one. */
static void test_clock_anchor_follows_steady(void **state)
{
    (void)state;
    const int64_t t = 1000000000000; /* 2001-09-09, far from the wall clock */
    int64_t s0 = sl__steady_ms();
    sl__clock_anchor(t);
    int64_t c0 = sl__clock_ms(), s1 = sl__steady_ms();
    assert_true(c0 >= t && c0 <= t + (s1 - s0));
    struct timespec pause = {0, 30 * 1000000};
    nanosleep(&pause, NULL);
    int64_t sa = sl__steady_ms(), c1 = sl__clock_ms(), sb = sl__steady_ms();
    /* c1 - c0 is the steady time between the readings, to the ms */
    assert_true(c1 - c0 >= 30);
    assert_true(c1 - c0 >= sa - s1 && c1 - c0 <= sb - s0);
    /* anchoring again (a snapshot's later times) moves it there */
    sl__clock_anchor(t + 3600000);
    int64_t c2 = sl__clock_ms();
    assert_true(c2 >= t + 3600000 && c2 <= t + 3600000 + 1000);
}

enum { CLOCK_READERS = 4, CLOCK_READS = 20000 };

static void *read_clock(void *arg)
{
    int64_t *bad = arg, last = sl__clock_ms();
    for (int i = 0; i < CLOCK_READS; i++) {
        int64_t c = sl__clock_ms();
        if (c < last) (*bad)++;
        last = c;
    }
    return NULL;
}

/* Threads read it while it is anchored forward: each sees its time never
 * run backwards (and TSan sees no race on the anchor). */
static void test_clock_threads(void **state)
{
    (void)state;
    pthread_t th[CLOCK_READERS];
    int64_t bad[CLOCK_READERS] = {0};
    for (int i = 0; i < CLOCK_READERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, read_clock, &bad[i]), 0);
    sl__clock_anchor(sl__clock_ms() + 86400000); /* forward only: readers may see either */
    for (int i = 0; i < CLOCK_READERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(bad[i], 0);
    }
}

/* ---- sl__size_parse ----------------------------------------------------- */

static int size(const char *s, uint64_t *out) { return sl__size_parse(s, strlen(s), out); }

static void test_size_accepts(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t want;
    } ok[] = {
        {"0", 0},
        {"64", 64},
        {"64b", 64},
        {"64B", 64},
        {"64k", 65536}, /* k = 1024, as kb: the same in sluiced and sluice replay */
        {"64K", 65536},
        {"64kb", 65536},
        {"64KB", 65536},
        {"64kB", 65536},
        {"1m", 1 << 20},
        {"3Mb", 3 << 20},
        {"2g", 2ULL << 30},
        {"2GB", 2ULL << 30},
        {"9223372036854775807", INT64_MAX},
        {"8589934591g", ((1ULL << 33) - 1) << 30}, /* the largest number of g */
        {"000012k", 12 << 10},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 12345;
        if (size(ok[i].s, &v) != 0) fail_msg("'%s' refused", ok[i].s);
        if (v != ok[i].want)
            fail_msg("'%s' = %llu, want %llu", ok[i].s, (unsigned long long)v,
                     (unsigned long long)ok[i].want);
    }
}

static void test_size_rejects(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "k",
        "kb",
        "b",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1kib",
        "1KiB",
        "1t",
        "1tb",
        "1.5k",
        "0x10",
        "1bb",
        "1kk",
        "1e3",
        "12q",
        "1 k",
        "9223372036854775808",        /* above INT64_MAX */
        "99999999999999999999999999", /* far above */
        "8589934592g",                /* 2^63 */
        "9007199254740992k",          /* 2^63 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 777;
        if (size(bad[i], &v) != SL_EINVAL) fail_msg("'%s' accepted", bad[i]);
        assert_int_equal(v, 777); /* untouched */
    }
}

static void test_size_takes_length(void **state)
{
    (void)state;
    uint64_t v;
    /* only len bytes are read: what follows is not part of the size */
    assert_int_equal(sl__size_parse("64kX", 3, &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(sl__size_parse("64kb", 2, &v), 0);
    assert_int_equal(v, 64);
    assert_int_equal(sl__size_parse("64kb", 0, &v), SL_EINVAL);
    char unterminated[2] = {'7', 'm'};
    assert_int_equal(sl__size_parse(unterminated, 2, &v), 0);
    assert_int_equal(v, 7 << 20);
}

/* ---- the cgroup quota: cpu.max text ------------------------------------- */

static int quota(const char *s) { return sl__cpu_quota_parse(s, strlen(s)); }

static void test_quota_parse(void **state)
{
    (void)state;
    assert_int_equal(quota("max 100000\n"), 0);
    assert_int_equal(quota("max"), 0);
    assert_int_equal(quota("100000 100000\n"), 1);
    assert_int_equal(quota("150000 100000\n"), 2); /* 1.5 CPUs: rounded up */
    assert_int_equal(quota("400000 100000"), 4);
    assert_int_equal(quota("1000 100000\n"), 1); /* 1% of a CPU: still one thread */
    assert_int_equal(quota("12000000 1000000\n"), 12);
    static const char *const bad[] = {"",         "\n",         "abc 100000", "100000",
                                      "100000 0", "100000 x",   "-1 100000",  "max x",
                                      "1 2 3",    "100000  10", "1e5 100000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (quota(bad[i]) != -1) fail_msg("'%s' gave %d", bad[i], quota(bad[i]));
    /* length-taking: a number cut by len */
    assert_int_equal(sl__cpu_quota_parse("300000 100000", 12), 30); /* "300000 10000" */
}

/* ---- the cgroup quota: files -------------------------------------------- */

static char dir[64];

/* Writes text to dir/rel, making its folders. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The quota seen with self_cgroup text cg and root dir/sys. */
static int quota_of(const char *cg)
{
    char root[128], self[128];
    put("self_cgroup", cg);
    snprintf(root, sizeof root, "%s/sys", dir);
    snprintf(self, sizeof self, "%s/self_cgroup", dir);
    return sl__cpu_quota_at(root, self);
}

static int setup_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_util.XXXXXX");
    return mkdtemp(dir) == NULL ? -1 : 0;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_quota_v2(void **state)
{
    (void)state;
    put("sys/cgroup.controllers", "cpu memory\n");
    put("sys/a/b/cpu.max", "max 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 0); /* no quota yet */
    put("sys/a/cpu.max", "150000 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 2); /* the parent's binds */
    put("sys/a/b/cpu.max", "300000 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 2); /* the smaller one */
    put("sys/a/cpu.max", "max 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 3);
    assert_int_equal(quota_of("0::/a/b/\n"), 3);
    assert_int_equal(quota_of("0::/a\n"), 0);
    /* a container that sees its own cgroup at the root: the path named in
     * its cgroup file is not there, so the root's cpu.max is read */
    assert_int_equal(quota_of("0::/kubepods/pod1/c1\n"), 0);
    put("sys/cpu.max", "250000 100000\n");
    assert_int_equal(quota_of("0::/kubepods/pod1/c1\n"), 3);
    assert_int_equal(quota_of("0::/\n"), 3);
    assert_int_equal(quota_of("0::/a/b\n"), 3);
    put("sys/a/cpu.max", "100000 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 1);
    /* a malformed cpu.max is no quota, not a crash */
    put("sys/a/cpu.max", "garbage\n");
    put("sys/a/b/cpu.max", "");
    put("sys/cpu.max", "max 100000\n");
    assert_int_equal(quota_of("0::/a/b\n"), 0);
}

static void test_quota_v1(void **state)
{
    (void)state;
    const char *cg = "11:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n3:cpuset:/docker/c1\n0::/\n";
    put("sys/cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "-1\n");
    put("sys/cpu,cpuacct/docker/c1/cpu.cfs_period_us", "100000\n");
    put("sys/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("sys/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    assert_int_equal(quota_of(cg), 0); /* -1: none */
    put("sys/cpu,cpuacct/docker/c1/cpu.cfs_quota_us", "250000\n");
    assert_int_equal(quota_of(cg), 3);
    put("sys/cpu,cpuacct/docker/cpu.cfs_quota_us", "100000\n");
    put("sys/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
    assert_int_equal(quota_of(cg), 1); /* the parent's */
    /* controllers named cpuset or cpuacct alone are not cpu */
    assert_int_equal(quota_of("3:cpuset:/docker/c1\n2:cpuacct:/docker/c1\n"), 0);
    /* a separate "cpu" mount is found too */
    put("sys/cpu/x/cpu.cfs_quota_us", "50000\n");
    put("sys/cpu/x/cpu.cfs_period_us", "100000\n");
    assert_int_equal(quota_of("2:cpu:/x\n"), 1);
}

static void test_quota_unreadable(void **state)
{
    (void)state;
    assert_int_equal(sl__cpu_quota_at("/nonexistent", "/nonexistent/cgroup"), 0);
    assert_int_equal(quota_of(""), 0);
    assert_int_equal(quota_of("garbage without colons\n::\n:\n"), 0);
}

/* ---- sl__cpu_count ------------------------------------------------------ */

static void test_cpu_count_follows_affinity(void **state)
{
    (void)state;
    cpu_set_t was, one;
    assert_int_equal(sched_getaffinity(0, sizeof was, &was), 0);
    int n = sl__cpu_count();
    assert_true(n >= 1);
    assert_true(n <= CPU_COUNT(&was));
    /* pinned to one CPU, the count follows */
    int first = 0;
    while (!CPU_ISSET(first, &was)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    int pinned = sl__cpu_count();
    assert_int_equal(sched_setaffinity(0, sizeof was, &was), 0);
    assert_int_equal(pinned, 1);
    assert_int_equal(sl__cpu_count(), n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_unanchored_reads_wall), /* first: nothing anchored yet */
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_clock_pure),
        cmocka_unit_test(test_steady_is_boottime),
        cmocka_unit_test(test_clock_anchor_follows_steady),
        cmocka_unit_test(test_clock_threads),
        cmocka_unit_test(test_size_accepts),
        cmocka_unit_test(test_size_rejects),
        cmocka_unit_test(test_size_takes_length),
        cmocka_unit_test(test_quota_parse),
        cmocka_unit_test_setup_teardown(test_quota_v2, setup_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_quota_v1, setup_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_quota_unreadable, setup_dir, remove_dir),
        cmocka_unit_test(test_cpu_count_follows_affinity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
