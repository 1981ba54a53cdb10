/*
 * bench/chase.c -- the latency of one dependent load, by a pointer chase:
 * a buffer of MB megabytes, one 8-byte pointer at the start of each 64-byte
 * line, the lines linked in one random cycle (Sattolo's shuffle driven by a
 * seeded xorshift, so every run walks the same order), then LOADS loads each
 * of which needs the one before it.  Nothing overlaps them: the time a load
 * is the time of one trip to wherever the buffer lives -- DRAM for a buffer
 * far bigger than the last level (256 MB against this VM's 32 MB L3), the L3
 * for a small one (8 MB).  The buffer is on 4 KB pages (MADV_NOHUGEPAGE), as
 * the store's fitted tables are, so a load into a big buffer also misses the
 * TLB, as a decision on 1M keys does.  bench/chain.sh runs it.
 *
 *   chase MB LOADS      MB 1..65536, LOADS 1..1e10
 *
 * Prints one line, "chase: MB MB, LINES lines, LOADS dependent loads, 4 KB
 * pages: NS ns/load, cpu/wall P % (ended on line N)": NS is wall-clock time
 * over LOADS, as bench/bench's rates are; P is the thread's CPU time over
 * that wall time (below ~95: another process had the core for part of it,
 * and NS is high by about that much).  Exit 0, 1 if the buffer cannot be
 * had or the shuffle is broken (checked: one lap, n loads), 2 on a bad
 * argument.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tool.h"

#define LINE 64 /* bytes a cache line: one pointer a line */

/* The next of a xorshift64 sequence; *x must not be 0. */
static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}


/* Links the n lines of buf into one cycle in a random order: first each
 * line's slot holds the index of its successor (Sattolo's shuffle of the
 * identity: every permutation it makes is a single cycle through all n),
 * then, in one sequential pass, that index becomes the successor's address. */
static void link_cycle(char *buf, uint64_t n, uint64_t seed)
{
    uintptr_t *slot;
    for (uint64_t i = 0; i < n; i++) {
        slot = (uintptr_t *)(buf + i * LINE);
        *slot = (uintptr_t)i;
    }
    for (uint64_t i = n - 1; i > 0; i--) { /* j < i: no fixed point */
        uint64_t j = xorshift(&seed) % i;
        uintptr_t *a = (uintptr_t *)(buf + i * LINE), *b = (uintptr_t *)(buf + j * LINE);
        uintptr_t t = *a;
        *a = *b;
        *b = t;
    }
    for (uint64_t i = 0; i < n; i++) {
        slot = (uintptr_t *)(buf + i * LINE);
        *slot = (uintptr_t)(buf + *slot * LINE);
    }
}

/* Follows the cycle from p for loads steps; returns where it ended.  Each
 * load's address is the previous load's value: no two can overlap. */
static void *walk(void *p, uint64_t loads)
{
    for (uint64_t i = 0; i < loads; i++) p = *(void **)p;
    return p;
}

int main(int argc, char **argv)
{
    uint64_t mb, loads;
    if (argc != 3 || parse_u64(argv[1], 1, 65536, &mb) ||
        parse_u64(argv[2], 1, 10000000000ull, &loads)) {
        fprintf(stderr, "usage: chase MB LOADS   (MB 1..65536, LOADS 1..10000000000)\n");
        return 2;
    }
    size_t bytes = (size_t)mb << 20;
    uint64_t n = bytes / LINE;
    char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        fprintf(stderr, "chase: mmap of %" PRIu64 " MB: %s\n", mb, strerror(errno));
        return 1;
    }
    /* Before the first touch, so no huge page is ever placed; EINVAL: a
     * kernel without transparent huge pages, where every page is 4 KB. */
    if (madvise(buf, bytes, MADV_NOHUGEPAGE) != 0 && errno != EINVAL) {
        fprintf(stderr, "chase: madvise(MADV_NOHUGEPAGE): %s\n", strerror(errno));
        return 1;
    }
    link_cycle(buf, n, 88172645463325252ull);
    /* One lap first, counted: a walk that comes back to the start after n
     * loads and no sooner went through every line (a shuffle that left two
     * cycles would be caught here).  It also brings a small buffer into the
     * cache it is meant to measure and the page-table entries where a
     * steady walk keeps them. */
    uint64_t lap = 0;
    void *p = buf;
    do {
        p = *(void **)p;
        lap++;
    } while (p != buf && lap <= n);
    if (lap != n) {
        fprintf(stderr, "chase: the lines are not one cycle (back to the start after %" PRIu64
                        " loads, not %" PRIu64 ")\n", lap, n);
        return 1;
    }
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = clock_ns(CLOCK_MONOTONIC);
    p = walk(p, loads);
    uint64_t t1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("chase: %" PRIu64 " MB, %" PRIu64 " lines, %" PRIu64
           " dependent loads, 4 KB pages: %.2f ns/load, cpu/wall %.0f %% (ended on line %" PRIu64
           ")\n",
           mb, n, loads, (double)(t1 - t0) / (double)loads,
           t1 > t0 ? 100.0 * (double)(c1 - c0) / (double)(t1 - t0) : 100.0,
           (uint64_t)(((char *)p - buf) / LINE));
    munmap(buf, bytes);
    return 0;
}
