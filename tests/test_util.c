/*
 * test_util.c -- the helpers of src/lib/util.h: the clocks, the byte-size
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
        cmocka_unit_test(test_clocks),
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
