/*
 * bench/misses.c -- cache misses of one decision, for cachegrind (perf has
 * no counters in this VM).  Fills a store with N token-bucket keys of KL
 * bytes ("user:" and digits), then makes D decisions on random keys, one
 * sl_allow a decision.  Keys are written into a stack buffer for every call,
 * so the only data a decision misses on is the store's.  Run it with D = 0
 * and D > 0 under `valgrind --tool=cachegrind --cache-sim=yes`: the
 * difference of the two runs over D is the cost of one decision
 * (bench/misses.sh does that).  Without valgrind it prints the decisions'
 * rate per CPU-second.
 *
 *   misses N D KL
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sluice.h"

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t key(char *buf, unsigned kl, unsigned i)
{
    snprintf(buf, 64, "user:%0*u", (int)kl - 5, i);
    return kl;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: misses N D KL (KL 6..40)\n");
        return 2;
    }
    unsigned n = (unsigned)atoi(argv[1]), d = (unsigned)atoi(argv[2]), kl = (unsigned)atoi(argv[3]);
    if (n == 0 || kl < 6 || kl > 40) return 2;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 240000;
    p.window_ms = 60000;
    int err;
    sl_limiter *l = sl_limiter_new(&p, NULL, &err);
    if (!l) return 1;
    char k[64];
    sl_result r;
    long long now = 1700000000000LL;
    for (unsigned i = 0; i < n; i++)
        if (sl_allow(l, k, key(k, kl, i), now, 1, &r)) return 1;
    unsigned long long x = 88172645463325252ULL, allowed = 0;
    double c0 = cpu_s();
    for (unsigned i = 0; i < d; i++) { /* bounded: d decisions */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (sl_allow(l, k, key(k, kl, (unsigned)(x % n)), now + i / 1000, 1, &r)) return 1;
        allowed += (unsigned long long)r.allowed;
    }
    double c1 = cpu_s();
    if (d) printf("%u decisions, %llu allowed, %.3f M/CPU-s\n", d, allowed, d / (c1 - c0) / 1e6);
    sl_limiter_free(l);
    return 0;
}
