/*
 * util.c -- the anchored clock, byte sizes and the CPU count for the
 * programs around libsluice (util.h).  Only the clock is read on a
 * decision's path, by the server, once per loop turn.
 */
#include "util.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sluice.h"

/* ---- the anchored clock -------------------------------------------------- */

#define CLOCK_UNSET INT64_MIN /* no anchor yet */

/* anchor - steady_at_anchor (util.h); CLOCK_UNSET until anchored */
static _Atomic int64_t clock_offset = CLOCK_UNSET;

int64_t sl__steady_ms(void)
{
    struct timespec ts;
#ifdef CLOCK_BOOTTIME
    if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0)
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
#endif
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sl__clock_anchor(int64_t now_ms)
{
    atomic_store_explicit(&clock_offset, sl__clock_offset(now_ms, sl__steady_ms()),
                          memory_order_relaxed);
}

int64_t sl__clock_ms(void)
{
    int64_t off = atomic_load_explicit(&clock_offset, memory_order_relaxed);
    if (off == CLOCK_UNSET) {
        /* first reader anchors; a racing one keeps the winner's anchor */
        int64_t mine = sl__clock_offset(sl__wall_ms(), sl__steady_ms());
        if (atomic_compare_exchange_strong_explicit(&clock_offset, &off, mine, memory_order_relaxed,
                                                    memory_order_relaxed))
            off = mine;
    }
    return sl__clock_at(off, sl__steady_ms());
}

/* ---- byte sizes --------------------------------------------------------- */

int sl__size_parse(const char *s, size_t len, uint64_t *out)
{
    static const struct {
        const char *sfx;
        unsigned shift;
    } sfx[] = {{"", 0},   {"b", 0},   {"k", 10}, {"kb", 10},
               {"m", 20}, {"mb", 20}, {"g", 30}, {"gb", 30}};
    size_t n = 0;
    uint64_t v = 0;
    while (n < len && s[n] >= '0' && s[n] <= '9') {
        unsigned d = (unsigned)(s[n++] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return SL_EINVAL;
        v = v * 10 + d;
    }
    if (n == 0) return SL_EINVAL;
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        if (strlen(sfx[i].sfx) != len - n || strncasecmp(s + n, sfx[i].sfx, len - n) != 0) continue;
        if (v > ((uint64_t)INT64_MAX >> sfx[i].shift)) return SL_EINVAL;
        *out = v << sfx[i].shift;
        return 0;
    }
    return SL_EINVAL;
}

/* ---- CPUs: the affinity mask -------------------------------------------- */

/* The CPUs in the affinity mask, with a set sized for as many CPUs as the
 * kernel has (sched_getaffinity says EINVAL while the set is too small);
 * -1 if it cannot be read. */
static int affinity_count(void)
{
    for (int ncpu = 1024; ncpu <= (1 << 22); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (set == NULL) return -1;
        size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        int rc = sched_getaffinity(0, size, set);
        int n = rc == 0 ? CPU_COUNT_S(size, set) : -1;
        int e = errno;
        CPU_FREE(set);
        if (rc == 0) return n;
        if (e != EINVAL) return -1;
    }
    return -1;
}

/* ---- CPUs: the cgroup quota --------------------------------------------- */

/* Reads the file at path whole into buf (cap bytes, the last one left for
 * a NUL).  Returns its length, or -1 if it cannot be opened or read or
 * does not fit. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    for (;;) {
        if (n == cap - 1) {
            n = (size_t)-1; /* too large for what it should hold */
            break;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            n = (size_t)-1;
            break;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n == (size_t)-1) return -1;
    buf[n] = '\0';
    return (ssize_t)n;
}

/* Length of s[0..len) without trailing blanks and newlines. */
static size_t trim_end(const char *s, size_t len)
{
    while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
    return len;
}

/* ceil(quota / period), at least 1, at most INT_MAX. */
static int whole_cpus(int64_t quota, int64_t period)
{
    int64_t n = quota / period + (quota % period != 0);
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}

int sl__cpu_quota_parse(const char *s, size_t len)
{
    len = trim_end(s, len);
    const char *sp = memchr(s, ' ', len);
    size_t qlen = sp ? (size_t)(sp - s) : len;
    int64_t quota = -1, period = 0;
    if (sp != NULL) {
        const char *p = sp + 1;
        size_t plen = len - qlen - 1;
        if (sl_int_parse(p, plen, INT64_MAX, &period) != 0 || period == 0) return -1;
    }
    if (qlen == 3 && memcmp(s, "max", 3) == 0) return 0;
    if (sp == NULL || sl_int_parse(s, qlen, INT64_MAX, &quota) != 0) return -1;
    return whole_cpus(quota, period);
}

/* The v1 quota in dir (cpu.cfs_quota_us, cpu.cfs_period_us): CPUs, 0 for
 * none (-1), or -1 when unreadable. */
static int v1_quota(const char *dir)
{
    char path[PATH_MAX], q[64], p[64];
    ssize_t ql, pl;
    int64_t quota, period;
    if (snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir) >= (int)sizeof path) return -1;
    if ((ql = read_small(path, q, sizeof q)) < 0) return -1;
    size_t qn = trim_end(q, (size_t)ql);
    if (qn > 0 && q[0] == '-') return 0; /* -1: no quota */
    if (snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) >= (int)sizeof path) return -1;
    if ((pl = read_small(path, p, sizeof p)) < 0) return -1;
    if (sl_int_parse(q, qn, INT64_MAX, &quota) != 0 ||
        sl_int_parse(p, trim_end(p, (size_t)pl), INT64_MAX, &period) != 0 || period == 0)
        return -1;
    return whole_cpus(quota, period);
}

/* The v2 quota in dir (cpu.max): CPUs, 0 for none, or -1 when unreadable. */
static int v2_quota(const char *dir)
{
    char path[PATH_MAX], text[128];
    if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path) return -1;
    ssize_t n = read_small(path, text, sizeof text);
    return n < 0 ? -1 : sl__cpu_quota_parse(text, (size_t)n);
}

#define MAX_DEPTH 256 /* cgroup levels walked up, at most */

/* The smallest quota (in CPUs) of the cgroup at ctrl/cg (cg: glen bytes,
 * "/..." or empty) and its ancestors, read by quota_in(); 0 for none.  If
 * ctrl/cg is not there, only ctrl itself is read. */
static int tree_quota(const char *ctrl, const char *cg, size_t glen, int (*quota_in)(const char *))
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s%.*s", ctrl, (int)glen, cg) >= (int)sizeof dir ||
        access(dir, F_OK) != 0)
        glen = 0;
    while (glen > 0 && cg[glen - 1] == '/') glen--;
    int best = 0;
    for (int depth = 0; depth < MAX_DEPTH; depth++) {
        snprintf(dir, sizeof dir, "%s%.*s", ctrl, (int)glen, cg);
        int q = quota_in(dir);
        if (q > 0 && (best == 0 || q < best)) best = q;
        if (glen == 0) break;
        while (glen > 0 && cg[glen - 1] != '/') glen--; /* up one level */
        while (glen > 0 && cg[glen - 1] == '/') glen--;
    }
    return best;
}

/* Whether the comma-separated list s[0..len) names controller "cpu". */
static int has_cpu(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        size_t b = i;
        while (i < len && s[i] != ',') i++;
        if (i - b == 3 && memcmp(s + b, "cpu", 3) == 0) return 1;
        i++;
    }
    return 0;
}

int sl__cpu_quota_at(const char *root, const char *self_cgroup)
{
    static const char *const v1_dirs[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
    char text[16384], ctrl[PATH_MAX];
    ssize_t n = read_small(self_cgroup, text, sizeof text);
    if (n < 0) return 0;
    int best = 0;
    for (size_t i = 0; i < (size_t)n;) {
        /* one line: ID:CONTROLLERS:PATH */
        const char *line = text + i;
        const char *nl = memchr(line, '\n', (size_t)n - i);
        size_t len = nl ? (size_t)(nl - line) : (size_t)n - i;
        i += len + 1;
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2 == NULL) continue;
        const char *ctl = c1 + 1, *cg = c2 + 1;
        size_t clen = (size_t)(c2 - ctl), glen = len - (size_t)(cg - line);
        int q = 0;
        if (c1 - line == 1 && line[0] == '0' && clen == 0) {
            q = tree_quota(root, cg, glen, v2_quota);
        } else if (has_cpu(ctl, clen)) {
            for (size_t k = 0; k < sizeof v1_dirs / sizeof v1_dirs[0]; k++) {
                if (snprintf(ctrl, sizeof ctrl, "%s/%s", root, v1_dirs[k]) >= (int)sizeof ctrl ||
                    access(ctrl, F_OK) != 0)
                    continue;
                q = tree_quota(ctrl, cg, glen, v1_quota);
                break;
            }
        }
        if (q > 0 && (best == 0 || q < best)) best = q;
    }
    return best;
}

int sl__cpu_count(void)
{
    int n = affinity_count();
    if (n < 1) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online < 1 ? 1 : online > INT_MAX ? INT_MAX : (int)online;
    }
    int q = sl__cpu_quota_at("/sys/fs/cgroup", "/proc/self/cgroup");
    if (q > 0 && q < n) n = q;
    return n < 1 ? 1 : n;
}
