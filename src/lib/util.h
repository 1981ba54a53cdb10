/*
 * util.h -- small helpers for the programs around libsluice (internal).
 *
 * libsluice's own decisions never read a clock nor ask how many CPUs there
 * are: time is passed in (SPEC section 1) and threads are the caller's.
 * These helpers are for the programs built on it -- the `sluice` command
 * (src/cli), the `sluiced` server (src/server) and the rules loader
 * (src/rules) -- so that each of them reads the clock, parses a byte size
 * and counts its CPUs the same way, in one place.  They live in src/lib
 * only so that every binary and test, all linked with libsluice.a, has
 * them; nothing in sluice.h exposes them.
 *
 *   sl__wall_ms, sl__mono_ms, sl__mono_ns   the clocks
 *   sl__clock_ms, sl__clock_anchor          the anchored clock sluiced decides on
 *   sl__size_parse                          "64k" -> 65536 (k = 1024)
 *   sl__cpu_count                           CPUs this process may run on
 *   sl__cpu_quota_parse, sl__cpu_quota_at   its cgroup's CPU quota (testable)
 *
 * No locks: every function may be called from any thread.  The one piece
 * of state is the anchored clock's offset (one atomic word, util.c).  The
 * plain clocks are inline here; the rest is in util.c (libsluice.a).
 */
#ifndef SL_UTIL_H
#define SL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* ---- clocks ------------------------------------------------------------- */

/* Inline, so that a part built alone (a fuzz target of the rules loader)
 * needs no util.o for them. */

/* CLOCK_REALTIME in ms since the epoch: wall time, for what a user reads
 * (log lines, "loaded at", "saved at").  May jump either way (an NTP step,
 * a VM restore, an operator's `date -s`): never decide on it. */
static inline int64_t sl__wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in ns: for intervals and deadlines (how long a run took,
 * debouncing); never jumps, its zero is arbitrary. */
static inline int64_t sl__mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same in ms. */
static inline int64_t sl__mono_ms(void) { return sl__mono_ns() / 1000000; }

/* ---- the anchored clock -------------------------------------------------- */

/*
 * The clock a server decides on: it reads like the wall clock (ms since the
 * epoch, so times stored in snapshots and shown to clients mean something)
 * but moves only with a steady clock, so a step of the wall clock in either
 * direction changes no decision:
 *
 *     now = anchor + (steady - steady_at_anchor)
 *
 * kept as one offset, anchor - steady_at_anchor.  The steady clock is
 * CLOCK_BOOTTIME: monotonic like CLOCK_MONOTONIC, and it also counts the
 * time the machine was suspended, during which a limit's window went on
 * passing for its clients (CLOCK_MONOTONIC would stop there, and every key
 * would then need the suspension's length more to refill -- the symptom of
 * a wall clock stepped back).  Where CLOCK_BOOTTIME is not available,
 * CLOCK_MONOTONIC.  Its rate is the kernel's NTP-disciplined one, as the
 * wall clock's; only steps are ignored.
 */

/* The steady clock above, in ms; its zero is arbitrary (boot). */
int64_t sl__steady_ms(void);

/* The offset that makes the anchored clock read now_ms while the steady
 * clock reads steady_ms.  Pure; sl__clock_at(sl__clock_offset(n, s), s)
 * == n. */
static inline int64_t sl__clock_offset(int64_t now_ms, int64_t steady_ms)
{
    return now_ms - steady_ms;
}

/* The anchored clock's reading at steady time steady_ms, for an offset from
 * sl__clock_offset.  Pure: no wall clock enters it. */
static inline int64_t sl__clock_at(int64_t offset, int64_t steady_ms) { return offset + steady_ms; }

/*
 * Anchors the process's clock: from this call on, sl__clock_ms() reads
 * now_ms and then advances with the steady clock.  A server calls it once
 * at start with the wall clock, and again only to move it past the times a
 * loaded snapshot holds (sluiced's main.c); nothing re-anchors it to the
 * wall clock while it runs.  Thread-safe (one atomic store), but readers
 * racing an anchor see the old clock or the new one.
 */
void sl__clock_anchor(int64_t now_ms);

/* The anchored clock now, in ms since the epoch.  Anchored to the wall
 * clock by the first call if sl__clock_anchor was never called.  Lock
 * free: one atomic load and one clock read. */
int64_t sl__clock_ms(void);

/* ---- byte sizes --------------------------------------------------------- */

/*
 * Parses a byte size of len bytes (s need not be NUL-terminated; nothing
 * past len is read): decimal digits, then optionally one suffix, in any
 * case: b (1), k or kb (2^10), m or mb (2^20), g or gb (2^30) -- so "64k"
 * and "64kb" are both 65536, as nginx reads sizes.  No sign, no blanks, no
 * other suffix.  Returns 0 with *out set, or SL_EINVAL (from sluice.h)
 * for anything else, including a value above INT64_MAX (so it fits an
 * int64_t too).  The caller checks its own range.
 */
int sl__size_parse(const char *s, size_t len, uint64_t *out);

/* ---- CPUs --------------------------------------------------------------- */

/*
 * The number of CPUs this process may use, for a default thread count:
 * the CPUs of its affinity mask (sched_getaffinity, any number of CPUs,
 * as nproc(1) counts), and when its cgroup has a CPU quota, that quota
 * rounded up to whole CPUs (sl__cpu_quota_at("/sys/fs/cgroup",
 * "/proc/self/cgroup")) -- the smaller of the two, at least 1.  Reads a
 * few small files each call: call it once at start, not per request.
 */
int sl__cpu_count(void);

/*
 * The whole CPUs a cgroup v2 `cpu.max` text allows (len bytes, no NUL
 * needed): "QUOTA PERIOD" (microseconds, optional trailing newline) gives
 * ceil(QUOTA / PERIOD), at least 1; "max PERIOD" (or "max") gives 0, no
 * quota.  Returns -1 for text of any other shape.  Pure: reads only s.
 */
int sl__cpu_quota_parse(const char *s, size_t len);

/*
 * The whole CPUs that the cgroup CPU quota allows the process whose
 * /proc/PID/cgroup text is in the file self_cgroup, with the cgroup file
 * systems mounted under root (normally "/sys/fs/cgroup"):
 *   - cgroup v2 ("0::PATH"): ROOT/PATH/cpu.max;
 *   - cgroup v1 (a line "N:...cpu...:PATH"): ROOT/cpu/PATH/ (or
 *     ROOT/cpu,cpuacct/PATH/) cpu.cfs_quota_us and cpu.cfs_period_us,
 *     a quota of -1 meaning none.
 * PATH's ancestors are read too, up to the root, and the smallest quota
 * wins (a parent's quota binds its children); a PATH that is not there
 * under ROOT (a container that sees only its own cgroup mounted at the
 * root) is read at the controller's root instead.  Returns the CPUs, at
 * least 1, or 0 when no quota applies or nothing could be read.
 */
int sl__cpu_quota_at(const char *root, const char *self_cgroup);

#endif
