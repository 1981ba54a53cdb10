/* bounded-store bench: 1M 16-byte token-bucket keys in a store bounded to
 * 1 GB (sluiced's default), one sl_decide a decision over random keys.
 * argv[1]: "old" (sl__store_fit_off(s, 1): handle table + slab) or "new". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sluice.h"
void sl__store_fit_off(sl_store *s, int off);
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec / 1e9; }
int main(int argc, char **argv)
{
    int old = argc > 1 && !strcmp(argv[1], "old");
    const unsigned N = 1000000, D = 4000000;
    sl_store_opts o; memset(&o, 0, sizeof o); o.max_bytes = 1ull << 30;
    int err = 0; sl_store *s = sl_store_new(&o, &err);
    if (!s) return 1;
    if (old) sl__store_fit_off(s, 1);
    sl_params p = SL_PARAMS_INIT; p.algo = SL_TOKEN_BUCKET; p.limit = 1000000; p.window_ms = 60000;
    char (*keys)[17] = malloc((size_t)N * 17);
    for (unsigned i = 0; i < N; i++) snprintf(keys[i], 17, "k%015u", i * 2654435761u % 1000000007u);
    sl_result r; int64_t t = 1764000000000LL;
    double t0 = now_s();
    for (unsigned i = 0; i < N; i++) if (sl_decide(s, &p, keys[i], 16, t, 1, &r)) return 2;
    double fill = now_s() - t0;
    uint32_t *idx = malloc(D * sizeof *idx); uint64_t x = 88172645463325252ull;
    for (unsigned i = 0; i < D; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; idx[i] = (uint32_t)(x % N); }
    t0 = now_s();
    for (unsigned i = 0; i < D; i++) if (sl_decide(s, &p, keys[idx[i]], 16, t + i / 1000, 1, &r)) return 3;
    double dec = now_s() - t0;
    sl_store_stats st; sl_store_stats_get(s, &st);
    printf("%s fill %.3f M/s decide %.3f M/s bytes/key %.2f keys %llu\n", old ? "old" : "new", N / fill / 1e6, D / dec / 1e6,
           (double)st.bytes / st.keys, (unsigned long long)st.keys);
    sl_store_free(s);
    return 0;
}
