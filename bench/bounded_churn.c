/* at the bound: a store of 32 MB takes 3M distinct 16-byte token-bucket
 * keys, 1 ms a 1000 keys, a window of 1 s (older keys are at rest): the
 * rate of the last 2M inserts (every one needs room made) */
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
    sl_store_opts o; memset(&o, 0, sizeof o); o.max_bytes = 32u << 20;
    sl_store *s = sl_store_new(&o, NULL);
    if (old) sl__store_fit_off(s, 1);
    sl_params p = SL_PARAMS_INIT; p.algo = SL_TOKEN_BUCKET; p.limit = 10; p.window_ms = 1000;
    char k[17]; sl_result r; double t0 = 0;
    for (unsigned i = 0; i < 3000000; i++) {
        if (i == 1000000) t0 = now_s();
        snprintf(k, 17, "k%015u", i);
        if (sl_decide(s, &p, k, 16, 1764000000000LL + i / 1000, 1, &r)) return 2;
    }
    double dt = now_s() - t0;
    sl_store_stats st; sl_store_stats_get(s, &st);
    printf("%s at-bound inserts %.3f M/s keys %llu evictions %llu at_rest %llu bytes/key %.2f\n", old ? "old" : "new", 2.0 / dt,
           (unsigned long long)st.keys, (unsigned long long)st.evictions, (unsigned long long)st.evicted_at_rest, (double)st.bytes / st.keys);
    return 0;
}
