/*
 * rng.h -- the tests' seeded randomness: splitmix64, so a seed names one
 * sequence on every machine (a failing case prints its seed and can be
 * run again).  Header only: each test that includes it gets its own copy
 * of these small functions.
 */
#ifndef SL_TEST_RNG_H
#define SL_TEST_RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rnd(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform-enough integer in [lo, hi] (lo when hi <= lo). */
static inline int64_t rnd_in(rng *r, int64_t lo, int64_t hi)
{
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
    return span == 0 ? (int64_t)rnd(r) : (int64_t)((uint64_t)lo + rnd(r) % span);
}

/* 1 with probability percent / 100. */
static inline int chance(rng *r, int percent) { return (int)(rnd(r) % 100) < percent; }

#endif
