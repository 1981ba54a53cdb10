/*
 * bench/tool.h -- what the bench's one-file C tools (chase.c, pingpong.c,
 * each built alone with `cc FILE.c`) share: a strict number parser and a
 * clock in ns.  Header only; include it after <errno.h>, <stdint.h>,
 * <stdlib.h> and <time.h>.
 */
#ifndef SL_BENCH_TOOL_H
#define SL_BENCH_TOOL_H

/* Parses a whole decimal number in lo..hi into *v.  Returns 0, or -1 when
 * s is not one (sign, junk, out of range). */
static inline int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *v)
{
    char *end;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno || *end || n < lo || n > hi) return -1;
    *v = n;
    return 0;
}

/* The time of clock id in ns. */
static inline uint64_t clock_ns(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
