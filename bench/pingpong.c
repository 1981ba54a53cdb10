/*
 * bench/pingpong.c -- how long one cache line takes to go from one core to
 * another: two threads, pinned to CPU_A and CPU_B, bounce one counter alone
 * on a 128-byte-aligned line (128: the adjacent-line prefetcher pairs 64-byte
 * lines, so nothing else the program writes can ride along).  A writes the
 * odd values and waits for the next even one, B waits for each odd value and
 * writes the even one after it: every step is one load that misses (the line
 * is in the other core's cache, modified) and one store, and nothing
 * overlaps them.  bench/goals.sh runs it beside its two-thread rounds: on this
 * VM the hypervisor places the two vCPUs either close (~40-60 ns one way)
 * or far (~200 ns), and everything two threads write in common costs that
 * much more in the far mode.
 *
 *   pingpong CPU_A CPU_B TRIPS      CPUs 0..1023 and different, TRIPS 1..1e9
 *
 * Prints one line, "pingpong: CPUs A,B, TRIPS round trips: NS ns one way,
 * cpu/wall P % (min thread); NB batches of BT: median MED ns one way": NS is
 * A's wall-clock time from its first write to the last answer, over 2 x
 * TRIPS (each round trip is two one-way trips); P is the smaller of the two
 * threads' CPU time over their wall time (below ~95: another process had
 * one of the cores for part of the run, a trip waited for it to be
 * scheduled again, and NS is high); MED is the median of the same quotient
 * over each batch of BT round trips (the trips cut into at most MAX_BATCHES
 * batches of at least BATCH_MIN, the last one shorter).  A process that
 * takes a core stalls the batch it lands in, not the others, so MED still
 * says where the two CPUs are when the load makes NS say nothing.  The waits
 * spin on plain loads (no pause instruction: on recent cores it alone takes
 * ~40 ns, which would be counted as trip time).  A wait that sees no answer
 * for STALL_S (60) seconds gives up (the partner is not running: its CPU is
 * taken by a task of higher priority, or a debugger stopped that thread), so
 * a run is bounded.  Exit 0; 1 if a thread cannot be made or pinned (a CPU that is
 * not online or not in this process's cpuset) or a wait gave up; 2 on a bad
 * argument.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool.h"

#define MAX_TRIPS 1000000000ull
#ifndef STALL_S
#define STALL_S 60 /* seconds a wait may see no answer before it gives up */
#endif
#define SPINS_A_CHECK 65536u /* spins between two looks at the clock in a wait */
#define MAX_BATCHES 4096      /* batches A times, at most */
#define BATCH_MIN 1000u       /* round trips a batch, at least (~0.1-0.4 ms here) */

/* A's ns one way in each batch; static: no allocation, 32 KB. */
static double batch_ns[MAX_BATCHES];

/* The line the two threads bounce, and the flags around it, each alone on
 * its own 128 bytes. */
static struct {
    _Alignas(128) _Atomic uint64_t v; /* the counter: A writes odd, B even */
    _Alignas(128) _Atomic uint64_t ready; /* 1: B is pinned and waiting, A may start */
    _Alignas(128) _Atomic int failed; /* the first thread to fail: 1 A, 2 B; 0 none */
} shared;

static sem_t done; /* posted once by each thread as it ends, well or not */

/* One thread's part: set by main before the thread starts, the rest by the
 * thread before it posts done. */
struct side {
    int id;         /* 1 A, 2 B */
    int cpu;        /* the CPU it pins itself to */
    int other;      /* the partner's CPU, for messages */
    uint64_t trips; /* round trips */
    uint64_t batch; /* round trips a batch (A times each batch) */
    uint64_t cpu_ns, wall_ns; /* its CPU and wall time over its loop */
    char err[200];  /* why it failed, when it did */
};


/* Spins until *p == want.  Returns 0, or -1 when STALL_S seconds passed
 * without it.  The clock is read once every SPINS_A_CHECK spins, and only
 * in a wait that lasts that long, so a wait the partner answers in time
 * costs one load a spin and a counter. */
static int wait_for(_Atomic uint64_t *p, uint64_t want)
{
    uint64_t since = 0;
    for (unsigned spins = 1; atomic_load_explicit(p, memory_order_acquire) != want; spins++) {
        if (spins % SPINS_A_CHECK) continue;
        uint64_t now = clock_ns(CLOCK_MONOTONIC);
        if (since == 0)
            since = now;
        else if (now - since >= (uint64_t)STALL_S * 1000000000u)
            return -1;
    }
    return 0;
}

/* Ends thread s's part: fails it with a message when msg is set (the first
 * thread to fail is the one main reports), then posts done. */
static void *end_side(struct side *s, const char *msg)
{
    if (msg) {
        snprintf(s->err, sizeof s->err, "%s", msg);
        int none = 0;
        atomic_compare_exchange_strong(&shared.failed, &none, s->id);
    }
    sem_post(&done);
    return NULL;
}

/* A thread's body, named pingpong-A or pingpong-B: pins itself to s->cpu
 * (checked: sched_getcpu after), then as A waits for B to be ready and
 * plays the odd values, as B the even ones.  Its CPU and wall time over the
 * loop go into s; a failure's message into s->err. */
static void *side_main(void *arg)
{
    struct side *s = arg;
    char msg[200];
    /* named for ps -L and top -H (and a test that stops one of them) */
    pthread_setname_np(pthread_self(), s->id == 1 ? "pingpong-A" : "pingpong-B");
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(s->cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) {
        snprintf(msg, sizeof msg, "cannot pin thread %c to CPU %d: %s (not online, or not in this process's cpuset?)",
                 s->id == 1 ? 'A' : 'B', s->cpu, strerror(rc));
        return end_side(s, msg);
    }
    if (sched_getcpu() != s->cpu) {
        snprintf(msg, sizeof msg, "thread %c pinned to CPU %d runs on CPU %d", s->id == 1 ? 'A' : 'B',
                 s->cpu, sched_getcpu());
        return end_side(s, msg);
    }
    uint64_t c0, t0;
    if (s->id == 1) {
        if (wait_for(&shared.ready, 1) != 0) {
            snprintf(msg, sizeof msg, "thread B, pinned to CPU %d, not running after %d s", s->other, STALL_S);
            return end_side(s, msg);
        }
        c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
        uint64_t tb = t0;
        for (uint64_t i = 0, k = 0; i < s->trips; k++) { /* batch k: trips i..end-1 */
            uint64_t end = i + s->batch < s->trips ? i + s->batch : s->trips, n = end - i;
            for (; i < end; i++) {
                atomic_store_explicit(&shared.v, 2 * i + 1, memory_order_release);
                if (wait_for(&shared.v, 2 * i + 2) != 0) {
                    snprintf(msg, sizeof msg, "no answer from thread B on CPU %d in %d s (round trip %" PRIu64 ")",
                             s->other, STALL_S, i + 1);
                    return end_side(s, msg);
                }
            }
            uint64_t t = clock_ns(CLOCK_MONOTONIC);
            batch_ns[k] = (double)(t - tb) / (2.0 * (double)n);
            tb = t;
        }
    } else {
        c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
        atomic_store_explicit(&shared.ready, 1, memory_order_release);
        for (uint64_t i = 0; i < s->trips; i++) {
            if (wait_for(&shared.v, 2 * i + 1) != 0) {
                snprintf(msg, sizeof msg, "no word from thread A on CPU %d in %d s (round trip %" PRIu64 ")",
                         s->other, STALL_S, i + 1);
                return end_side(s, msg);
            }
            atomic_store_explicit(&shared.v, 2 * i + 2, memory_order_release);
        }
    }
    s->wall_ns = clock_ns(CLOCK_MONOTONIC) - t0;
    s->cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    return end_side(s, NULL);
}

/* qsort's order of doubles, ascending. */
static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Thread s's CPU time over its wall time, in %. */
static double share(const struct side *s)
{
    return s->wall_ns ? 100.0 * (double)s->cpu_ns / (double)s->wall_ns : 100.0;
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: pingpong CPU_A CPU_B TRIPS   (CPUs 0..1023 and different, TRIPS 1..1000000000)\n";
    uint64_t a, b, trips;
    if (argc != 4) {
        fputs(usage, stderr);
        return 2;
    }
    const char *names[] = {"CPU_A", "CPU_B", "TRIPS"};
    uint64_t *vals[] = {&a, &b, &trips};
    uint64_t lo[] = {0, 0, 1}, hi[] = {CPU_SETSIZE - 1, CPU_SETSIZE - 1, MAX_TRIPS};
    for (int i = 0; i < 3; i++) {
        if (parse_u64(argv[i + 1], lo[i], hi[i], vals[i])) {
            fprintf(stderr, "pingpong: %s must be a whole number %" PRIu64 "..%" PRIu64 ", not '%s'\n%s",
                    names[i], lo[i], hi[i], argv[i + 1], usage);
            return 2;
        }
    }
    if (a == b) {
        fprintf(stderr, "pingpong: CPU_A and CPU_B must be two different CPUs, not %" PRIu64 " and %" PRIu64
                        "\n%s", a, b, usage);
        return 2;
    }
    /* at least BATCH_MIN a batch, and few enough batches for batch_ns */
    uint64_t batch = (trips + MAX_BATCHES - 1) / MAX_BATCHES;
    if (batch < BATCH_MIN) batch = BATCH_MIN;
    uint64_t nb = (trips + batch - 1) / batch;
    struct side sides[2] = {{.id = 1, .cpu = (int)a, .other = (int)b, .trips = trips, .batch = batch},
                            {.id = 2, .cpu = (int)b, .other = (int)a, .trips = trips, .batch = batch}};
    pthread_t th[2];
    if (sem_init(&done, 0, 0) != 0) {
        fprintf(stderr, "pingpong: sem_init: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        int rc = pthread_create(&th[i], NULL, side_main, &sides[i]);
        if (rc != 0) {
            fprintf(stderr, "pingpong: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    /* The first thread to fail is reported at once: its partner may be
     * waiting for it (up to STALL_S) or never scheduled; returning from main
     * ends it. */
    for (int posted = 0; posted < 2; posted++) {
        while (sem_wait(&done) != 0 && errno == EINTR) {
        }
        int f = atomic_load(&shared.failed);
        if (f) {
            fprintf(stderr, "pingpong: %s\n", sides[f - 1].err);
            return 1;
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    double sa = share(&sides[0]), sb = share(&sides[1]);
    qsort(batch_ns, nb, sizeof batch_ns[0], by_value);
    double med = nb % 2 ? batch_ns[nb / 2] : (batch_ns[nb / 2 - 1] + batch_ns[nb / 2]) / 2;
    printf("pingpong: CPUs %" PRIu64 ",%" PRIu64 ", %" PRIu64 " round trips: %.1f ns one way, cpu/wall %.0f %% (min thread); %" PRIu64
           " batches of %" PRIu64 ": median %.1f ns one way\n",
           a, b, trips, (double)sides[0].wall_ns / (2.0 * (double)trips), sa < sb ? sa : sb, nb,
           nb > 1 ? batch : trips, med);
    return 0;
}
