/*
 * bench.c -- libsluice throughput and memory benchmark.
 *
 * For each algorithm it measures, with the library's public API only:
 *
 *   hot    decisions/s on one thread over 1,000 hot keys
 *   1M     decisions/s on one thread over 1,000,000 keys
 *   2thr   decisions/s with 2 threads sharing one limiter (hot and 1M keys),
 *          aggregate and per thread
 *   mem    bytes per key, measured: the process's memory before and after
 *          inserting 1,000,000 distinct keys into a fresh store (allocator
 *          count from mallinfo2() and resident set from /proc/self/statm),
 *          minus the keys' own bytes, divided by the number of keys
 *   log    sliding-log bytes per logged request: 2,000 keys x 500 requests
 *          spread over one hour, L = 500, W = 1 h
 *   bkt    sliding-buckets (P = 60, W = 60 s, L = 1000) bytes per key with
 *          every bucket of every key in use
 *
 * and prints one table with the goals of the benchmark issue beside them.
 * Every load loop is bounded both in count and in time.  Memory is measured
 * in a forked child so that the parent's heap (freed stores, earlier runs)
 * cannot hide or inflate it.
 *
 * It also has small helper modes used by bench/run.sh, so that the whole
 * benchmark stays one C file: --gen-replay (input for `sluice replay`),
 * --gen-redis (RESP for `redis-cli --pipe`) and --free-port.
 *
 * Time is simulated, never read from the clock for decisions: it starts at
 * T0 and advances 1 ms per 1,000 decisions (per thread).
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice.h"

#define T0                1700000000000LL /* ms: the simulated clock's start */
#define TICK_DECISIONS    1000            /* decisions per simulated ms, per thread */
#define KEY_STRIDE        16              /* bytes between key strings in the key buffer */
#define KEY_LEN           11              /* every key: "user:" and 6 digits */
#define HOT_KEYS          1000
#define MANY_KEYS         1000000
#define HOT_IDX           (1u << 16)   /* random index array for hot keys (256 KB) */
#define MANY_IDX          (1u << 22)   /* random index array for 1M keys (16 MB) */
#define CHECK_EVERY       1024         /* decisions between clock reads */
#define MAX_RUN_DECISIONS 200000000ULL /* count bound of one timed run */
#define CHILD_TIMEOUT_S   300          /* time bound of one memory-measuring child */

/* Everything the options choose. */
typedef struct cfg {
    int quick;           /* short smoke run: small sizes, short runs */
    int interleave;      /* 2t own keys: the store filled A0 B0 A1 B1 ..., not A's then B's */
    double run_s;        /* seconds per timed run */
    int reps;            /* timed runs per measurement; the best is kept */
    unsigned many_keys;  /* the "1M" key set size */
    unsigned mem_keys;   /* keys inserted for the bytes/key measurement */
    unsigned log_keys;   /* sliding-log memory: keys x 500 requests */
    unsigned bkt_keys;   /* sliding-buckets memory: keys */
    unsigned algos;      /* bit set of sl_algo to run */
    unsigned parts;      /* bit set of PART_* */
    const char *results; /* file for key=value results, or NULL */
} cfg;

enum {
    PART_HOT = 1,
    PART_MANY = 2,
    PART_2T = 4,
    PART_MEM = 8,
    PART_LOG = 16,
    PART_BKT = 32,
    PART_BATCH = 64
};

/* What was measured for one algorithm (-1 = not run). */
typedef struct algo_res {
    double hot1, many1;               /* M decisions/s, one thread (SL_LOCK_SHARD) */
    double hot1r, many1r;             /* the same with the default store (SL_LOCK_RECORD) */
    double hotb, manyb;               /* the same through sl_allow_many, BATCH a call */
    double hot2, many2;               /* M decisions/s, two threads, aggregate */
    double hot2min, many2min;         /* M decisions/s of the slower of the two threads */
    double hot2d, hot2dmin;           /* two threads, each on its own 1,000 hot keys */
    double hot2s, hot2smin;           /* ... each with its own limiter (store) */
    double hot_allowed, many_allowed; /* fraction of decisions allowed */
    double insert;                    /* M inserts/s while filling the 1M store */
    double share_hot1, share_many1, share_hot2, share_many2; /* CPU / wall, 0..1 */
    double b_alloc, b_rss, b_stats; /* bytes per key beyond the key's bytes */
} algo_res;

/* Memory measured in a child process, sent back through a pipe. */
typedef struct mem_res {
    int ok;
    double alloc, rss, stats; /* bytes beyond the keys' own bytes */
    double keys_stored;       /* sl_store_stats keys */
    double insert_mps;        /* M decisions/s while inserting */
    double denied;            /* decisions denied while loading */
    char err[96];
} mem_res;

static volatile int64_t g_sink; /* keeps results observable */
static char *g_keys;            /* MANY_KEYS strings "user:NNNNNN", KEY_STRIDE apart */
static uint32_t *g_hot_idx, *g_many_idx;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

/* The 1-minute load average, or -1.  Other processes on this 2-core machine
 * take cores from the benchmark: the table says so rather than hide it. */
static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* xorshift64*: a fast, reproducible generator (no libc rand state). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static uint32_t rng_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(((rng_next(s) >> 32) * (uint64_t)n) >> 32);
}

static const char *key_at(uint32_t i) { return g_keys + (size_t)i * KEY_STRIDE; }

/* Builds the key strings and the random index arrays (outside any timing). */
static void make_keys(unsigned nkeys)
{
    g_keys = malloc((size_t)MANY_KEYS * KEY_STRIDE);
    g_hot_idx = malloc(HOT_IDX * sizeof *g_hot_idx);
    g_many_idx = malloc(MANY_IDX * sizeof *g_many_idx);
    if (!g_keys || !g_hot_idx || !g_many_idx) die("out of memory for keys");
    for (uint32_t i = 0; i < MANY_KEYS; i++)
        snprintf(g_keys + (size_t)i * KEY_STRIDE, KEY_STRIDE, "user:%06u", i);
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (uint32_t i = 0; i < HOT_IDX; i++) g_hot_idx[i] = rng_below(&s, HOT_KEYS);
    for (uint32_t i = 0; i < MANY_IDX; i++) g_many_idx[i] = rng_below(&s, nkeys);
}

/* ---- parameters --------------------------------------------------------- */

/*
 * The parameters of the throughput runs.  Offered load per key: one thread
 * gives each of 1,000 hot keys about 1 request per simulated ms; two threads
 * about 2.  The limits allow 4 per ms, so nearly every decision is allowed
 * and the state keeps changing (the realistic, costlier path: a denied
 * request changes nothing).  The 1M-key runs use the same limits, so there a
 * key sees ~1 request per simulated second.
 */
static sl_params tput_params(sl_algo a)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.window_ms = 1000;
    p.limit = 4000;
    if (a == SL_SLIDING_BUCKETS) {
        p.window_ms = 60000;
        p.limit = 240000;
        p.precision = 60;
    }
    return p;
}

/* A limiter on a store of its own with this locking (SL_LOCK_*); free both
 * with free_limiter. */
static sl_limiter *new_limiter(const sl_params *p, unsigned locking)
{
    int err = 0;
    sl_store_opts o = {.locking = locking};
    sl_store *s = sl_store_new(&o, &err);
    if (!s) die("sl_store_new: %s", sl_strerror(err));
    sl_limiter *l = sl_limiter_new(p, s, &err);
    if (!l) die("sl_limiter_new(%s): %s", sl_algo_name(p->algo), sl_strerror(err));
    return l;
}

static void free_limiter(sl_limiter *l)
{
    if (!l) return;
    sl_store *s = sl_limiter_store(l);
    sl_limiter_free(l);
    sl_store_free(s);
}

/* ---- throughput --------------------------------------------------------- */

typedef struct run_arg {
    sl_limiter *lim;
    const uint32_t *idx;
    uint32_t idx_mask;
    uint32_t key_base; /* added to every index: disjoint key sets */
    uint32_t pos;      /* where in idx to start */
    int64_t now;       /* simulated ms; carried from run to run */
    double run_s;
    pthread_barrier_t *go; /* NULL on one thread */
    uint64_t n, allowed;   /* out */
    double secs;           /* out: wall-clock seconds */
    double cpu;            /* out: this thread's CPU seconds in the run */
    int err;               /* out: first non-zero return of sl_allow */
    int batch;             /* 0: sl_allow per decision; else sl_allow_many, this many a call */
} run_arg;

#define BATCH 64 /* requests per sl_allow_many call in the batched runs */

/*
 * One timed run: decisions over keys drawn from idx until run_s seconds or
 * MAX_RUN_DECISIONS have passed.  The clock is read every CHECK_EVERY
 * decisions (~1% of the budget at 20 M/s).
 */
static void *run_loop(void *vp)
{
    run_arg *a = vp;
    sl_result r;
    uint64_t n = 0, allowed = 0;
    uint32_t pos = a->pos, tick = 0;
    int64_t now = a->now;
    if (a->go) pthread_barrier_wait(a->go);
    double t0 = now_s(), t1 = t0, c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    while (n < MAX_RUN_DECISIONS && a->batch) { /* CHECK_EVERY is a multiple of BATCH */
        sl_call calls[BATCH];
        sl_result rs[BATCH];
        int rcs[BATCH];
        for (int j = 0; j < CHECK_EVERY; j += BATCH) {
            for (int b = 0; b < BATCH; b++) {
                uint32_t k = a->key_base + a->idx[pos++ & a->idx_mask];
                calls[b] = (sl_call){.key = key_at(k), .keylen = KEY_LEN, .now_ms = now, .cost = 1};
                __builtin_prefetch(calls[b].key); /* see "keys in cache" in the README */
                if (++tick == TICK_DECISIONS) {
                    tick = 0;
                    now++;
                }
            }
            if (sl_allow_many(a->lim, calls, BATCH, rs, rcs) != BATCH) {
                for (int b = 0; b < BATCH; b++)
                    if (rcs[b]) a->err = rcs[b];
                goto out;
            }
            for (int b = 0; b < BATCH; b++) allowed += (uint64_t)rs[b].allowed;
        }
        n += CHECK_EVERY;
        t1 = now_s();
        if (t1 - t0 >= a->run_s) break;
    }
    while (n < MAX_RUN_DECISIONS && !a->batch) {
        for (int j = 0; j < CHECK_EVERY; j++) {
            uint32_t k = a->key_base + a->idx[pos++ & a->idx_mask];
            /* the next key's bytes: see "keys in cache" in the README */
            __builtin_prefetch(key_at(a->key_base + a->idx[pos & a->idx_mask]));
            int rc = sl_allow(a->lim, key_at(k), KEY_LEN, now, 1, &r);
            if (rc != 0) {
                a->err = rc;
                goto out;
            }
            allowed += (uint64_t)r.allowed;
            if (++tick == TICK_DECISIONS) {
                tick = 0;
                now++;
            }
        }
        n += CHECK_EVERY;
        t1 = now_s();
        if (t1 - t0 >= a->run_s) break;
    }
out:
    a->n = n;
    a->allowed = allowed;
    a->secs = t1 - t0;
    a->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    a->pos = pos;
    a->now = now;
    return NULL;
}

/* Fills a fresh store with every key of the set (one decision each, in key
 * order) so that the timed runs measure steady-state decisions, not inserts.
 * With `parts` > 1 the set is that many equal runs of keys (the threads'
 * own keys), filled in turn: the first of each, then the second of each...
 * (--interleave: as threads inserting at once would, where key order puts
 * each thread's records apart in a store that keeps insertion order).
 * Returns M decisions/s of the fill. */
static double warm(sl_limiter *lim, unsigned nkeys, int64_t *now, unsigned parts)
{
    sl_result r;
    double t0 = now_s();
    unsigned per = parts > 1 ? nkeys / parts : nkeys;
    for (uint32_t i = 0; i < nkeys; i++) {
        uint32_t k = parts > 1 ? (i % parts) * per + i / parts : i;
        int rc = sl_allow(lim, key_at(k), KEY_LEN, *now, 1, &r);
        if (rc != 0) die("warm-up: sl_allow: %s", sl_strerror(rc));
        if ((i + 1) % TICK_DECISIONS == 0) ++*now;
    }
    return nkeys / (now_s() - t0) / 1e6;
}

/*
 * Best of cfg->reps runs of nthreads threads sharing one limiter over a key
 * set (nkeys keys, drawn through idx).  With `disjoint` 1, thread t uses keys
 * t*nkeys .. t*nkeys+nkeys-1 instead (same store, no key shared); with 2,
 * each thread also has a limiter (and store) of its own: nothing shared,
 * the machine's own ceiling for two threads.  Returns
 * the aggregate M decisions/s;
 * *slowest gets the slowest thread's M/s in that run, *allowed_frac the
 * fraction allowed, *insert the fill rate, *cpu_share the smallest ratio of
 * a thread's CPU time to wall time in that run (below ~0.95: other
 * processes took the core for part of it).
 */
static double measure(const cfg *c, sl_algo algo, unsigned nkeys, const uint32_t *idx,
                      uint32_t idx_n, int nthreads, int disjoint, double *slowest,
                      double *allowed_frac, double *insert, double *cpu_share, int batch,
                      unsigned locking)
{
    sl_params p = tput_params(algo);
    sl_limiter *lim = new_limiter(&p, locking), *lim2 = NULL;
    int64_t now = T0;
    double ins = warm(lim, disjoint ? nkeys * (unsigned)nthreads : nkeys, &now,
                      disjoint == 1 && c->interleave ? (unsigned)nthreads : 1);
    if (disjoint == 2) {
        int64_t now2 = T0;
        lim2 = new_limiter(&p, locking);
        warm(lim2, nkeys * (unsigned)nthreads, &now2, 1);
    }
    if (insert) *insert = ins;
    run_arg a[2];
    pthread_barrier_t go;
    double best = 0, best_slow = 0, best_allowed = 0, best_share = 0;
    for (int t = 0; t < nthreads; t++)
        a[t] = (run_arg){.lim = t == 1 && lim2 ? lim2 : lim,
                         .idx = idx,
                         .idx_mask = idx_n - 1,
                         .key_base = disjoint ? (uint32_t)t * nkeys : 0,
                         .pos = (uint32_t)t * (idx_n / 2),
                         .now = now,
                         .run_s = c->run_s,
                         .batch = batch};
    for (int rep = 0; rep < c->reps; rep++) {
        if (nthreads == 1) {
            a[0].go = NULL;
            run_loop(&a[0]);
        } else {
            pthread_t th[2];
            pthread_barrier_init(&go, NULL, (unsigned)nthreads);
            for (int t = 0; t < nthreads; t++) {
                a[t].go = &go;
                if (pthread_create(&th[t], NULL, run_loop, &a[t]) != 0)
                    die("pthread_create failed");
            }
            for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
            pthread_barrier_destroy(&go);
        }
        double agg = 0, slow = 1e300, share = 1e300;
        uint64_t n = 0, al = 0;
        for (int t = 0; t < nthreads; t++) {
            if (a[t].err) die("%s: sl_allow: %s", sl_algo_name(algo), sl_strerror(a[t].err));
            double m = a[t].n / a[t].secs / 1e6;
            agg += m;
            if (m < slow) slow = m;
            if (a[t].cpu / a[t].secs < share) share = a[t].cpu / a[t].secs;
            n += a[t].n;
            al += a[t].allowed;
            g_sink += (int64_t)a[t].allowed;
        }
        if (agg > best) {
            best = agg;
            best_slow = slow;
            best_allowed = n ? (double)al / (double)n : 0;
            best_share = share;
        }
        /* keep the threads' clocks together: both continue from the latest */
        int64_t latest = a[0].now;
        for (int t = 1; t < nthreads; t++)
            if (a[t].now > latest) latest = a[t].now;
        for (int t = 0; t < nthreads; t++) a[t].now = latest;
    }
    free_limiter(lim);
    free_limiter(lim2);
    if (slowest) *slowest = best_slow;
    if (allowed_frac) *allowed_frac = best_allowed;
    if (cpu_share) *cpu_share = best_share;
    return best;
}

/* ---- memory ------------------------------------------------------------- */

typedef struct mem_snap {
    double alloc; /* bytes in use by malloc: uordblks + hblkhd (all arenas) */
    double rss;   /* resident bytes */
} mem_snap;

static mem_snap snap(void)
{
    mem_snap m = {0, 0};
    malloc_trim(0); /* return freed pages, so RSS counts what is held */
    struct mallinfo2 mi = mallinfo2();
    m.alloc = (double)mi.uordblks + (double)mi.hblkhd;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    m.rss = (double)res * (double)sysconf(_SC_PAGESIZE);
    return m;
}

/* What one memory scenario loads into a fresh limiter. */
typedef enum { LOAD_KEYS, LOAD_LOG, LOAD_BKT } load_kind;

/*
 * Loads the scenario into a fresh limiter between two memory snapshots and
 * fills *out with bytes beyond the keys' own bytes divided by `per` (keys or
 * logged requests).  For LOAD_LOG `per` is the number of logged requests
 * and the keys' bytes are not subtracted (they are 1/500 of a request).
 */
static void mem_load(load_kind kind, sl_algo algo, unsigned nkeys, mem_res *out)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = algo;
    p.limit = 1000;
    p.window_ms = 60000;
    if (algo == SL_SLIDING_BUCKETS) p.precision = 60;
    if (kind == LOAD_LOG) {
        p.limit = 500;
        p.window_ms = 3600000;
    }
    sl_result r;
    uint64_t denied = 0, decisions = 0;
    double per = nkeys, keybytes = (double)nkeys * KEY_LEN;
    mem_snap a = snap();
    int err = 0;
    sl_store *st = sl_store_new(NULL, &err);
    if (!st) {
        snprintf(out->err, sizeof out->err, "sl_store_new: %s", sl_strerror(err));
        return;
    }
    sl_limiter *lim = sl_limiter_new(&p, st, &err);
    if (!lim) {
        snprintf(out->err, sizeof out->err, "sl_limiter_new: %s", sl_strerror(err));
        return;
    }
    double t0 = now_s();
    uint64_t s = 42;
    if (kind == LOAD_KEYS) {
        /* one decision per key; 1 ms per 1,000 keys */
        for (uint32_t i = 0; i < nkeys; i++) {
            int rc = sl_allow(lim, key_at(i), KEY_LEN, T0 + i / TICK_DECISIONS, 1, &r);
            if (rc != 0) {
                snprintf(out->err, sizeof out->err, "sl_allow: %s", sl_strerror(rc));
                return;
            }
            denied += !r.allowed;
        }
        decisions = nkeys;
    } else if (kind == LOAD_LOG) {
        /* 500 requests per key, request j in [j*7.2 s, (j+1)*7.2 s) of the
         * hour: all 500 fall inside one W = 1 h window, so all are allowed
         * and all stay logged. */
        per = (double)nkeys * 500;
        keybytes = 0;
        for (int j = 0; j < 500; j++)
            for (uint32_t k = 0; k < nkeys; k++) {
                int64_t t = T0 + (int64_t)j * 7200 + rng_below(&s, 7200);
                int rc = sl_allow(lim, key_at(k), KEY_LEN, t, 1, &r);
                if (rc != 0) {
                    snprintf(out->err, sizeof out->err, "sl_allow: %s", sl_strerror(rc));
                    return;
                }
                denied += !r.allowed;
                decisions++;
            }
    } else {
        /* every one of the 60 one-second buckets of every key used, with a
         * cost of 1..16 each (at most 960 <= L = 1000: all allowed). */
        for (int b = 0; b < 60; b++)
            for (uint32_t k = 0; k < nkeys; k++) {
                int64_t t = T0 + (int64_t)b * 1000 + rng_below(&s, 1000);
                int rc = sl_allow(lim, key_at(k), KEY_LEN, t, 1 + rng_below(&s, 16), &r);
                if (rc != 0) {
                    snprintf(out->err, sizeof out->err, "sl_allow: %s", sl_strerror(rc));
                    return;
                }
                denied += !r.allowed;
                decisions++;
            }
    }
    double secs = now_s() - t0;
    sl_store_stats ss;
    sl_store_stats_get(st, &ss);
    mem_snap b = snap();
    out->alloc = (b.alloc - a.alloc - keybytes) / per;
    out->rss = (b.rss - a.rss - keybytes) / per;
    out->stats = ((double)ss.bytes - keybytes) / per;
    out->keys_stored = (double)ss.keys;
    out->insert_mps = (double)decisions / secs / 1e6;
    out->denied = (double)denied;
    out->ok = 1;
    sl_limiter_free(lim);
    sl_store_free(st);
}

/* Runs mem_load in a forked child (fresh heap, bounded by an alarm). */
static mem_res mem_measure(load_kind kind, sl_algo algo, unsigned nkeys)
{
    mem_res res;
    memset(&res, 0, sizeof res);
    int fd[2];
    if (pipe(fd) != 0) die("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fd[0]);
        alarm(CHILD_TIMEOUT_S);
        mem_load(kind, algo, nkeys, &res);
        ssize_t w = write(fd[1], &res, sizeof res);
        _exit(w == (ssize_t)sizeof res ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = 0;
    while (got < (ssize_t)sizeof res) {
        ssize_t n = read(fd[0], (char *)&res + got, sizeof res - (size_t)got);
        if (n <= 0) break;
        got += n;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof res) {
        memset(&res, 0, sizeof res);
        if (WIFSIGNALED(status))
            snprintf(res.err, sizeof res.err, "child killed by signal %d%s", WTERMSIG(status),
                     WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
        else
            snprintf(res.err, sizeof res.err, "child exited with status %d", WEXITSTATUS(status));
    }
    return res;
}

/* ---- output ------------------------------------------------------------- */

static FILE *g_results;

static void result(const char *name, sl_algo a, double v)
{
    if (g_results) fprintf(g_results, "%s.%s %.3f\n", sl_algo_name(a), name, v);
}

static void fmt_num(char *buf, size_t n, double v, const char *f)
{
    if (v < 0)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, f, v);
}

static int has_goal(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_FIXED_WINDOW;
}

/* Appends "what" to the list of missed goals in buf. */
static void miss(char *buf, size_t n, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len && len + 2 < n) {
        strcat(buf, ", ");
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench [--quick] [--algo NAME[,NAME...]] [--parts LIST] [--seconds S]\n"
               "             [--reps N] [--results FILE] [--interleave]\n"
               "       bench --gen-replay LINES KEYS     write `T KEY` lines to stdout\n"
               "       bench --gen-redis hset|set|zset N write RESP for redis-cli --pipe\n"
               "       bench --free-port                 print a free 127.0.0.1 TCP port\n"
               "parts: hot,1m,2t,mem,log,bkt,batch (default all)\n");
}

/* ---- helper modes for run.sh -------------------------------------------- */

/* Writes `lines` replay lines "T KEY\n" with keys uniform over `keys`
 * distinct keys and T advancing 1 ms per 1,000 lines. */
static int gen_replay(unsigned long long lines, unsigned keys)
{
    static char buf[1 << 16];
    size_t len = 0;
    uint64_t s = 7;
    for (unsigned long long i = 0; i < lines; i++) {
        if (len > sizeof buf - 64) {
            if (fwrite(buf, 1, len, stdout) != len) return 1;
            len = 0;
        }
        len += (size_t)sprintf(buf + len, "%lld user:%06u\n", T0 + (long long)(i / TICK_DECISIONS),
                               rng_below(&s, keys));
    }
    return fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0;
}

static void resp_arr(FILE *f, int n) { fprintf(f, "*%d\r\n", n); }
static void resp_str(FILE *f, const char *s) { fprintf(f, "$%zu\r\n%s\r\n", strlen(s), s); }

/*
 * RESP for redis-cli --pipe, with the same "user:NNNNNN" keys:
 *   hset N   HSET key tokens 10 ts T      (token-bucket state, textbook form)
 *   set N    SET key T                    (GCRA's one timestamp)
 *   zset N   ZADD key T1 T1 ... T500 T500 (N keys, 500 logged requests each:
 *                                          the textbook sorted-set sliding log)
 */
static int gen_redis(const char *kind, unsigned n)
{
    char key[32], t[32];
    uint64_t s = 42;
    for (unsigned i = 0; i < n; i++) {
        snprintf(key, sizeof key, "user:%06u", i);
        if (!strcmp(kind, "hset")) {
            snprintf(t, sizeof t, "%lld", T0 + i / TICK_DECISIONS);
            resp_arr(stdout, 6);
            resp_str(stdout, "HSET");
            resp_str(stdout, key);
            resp_str(stdout, "tokens");
            resp_str(stdout, "10");
            resp_str(stdout, "ts");
            resp_str(stdout, t);
        } else if (!strcmp(kind, "set")) {
            snprintf(t, sizeof t, "%lld", T0 + i / TICK_DECISIONS);
            resp_arr(stdout, 3);
            resp_str(stdout, "SET");
            resp_str(stdout, key);
            resp_str(stdout, t);
        } else if (!strcmp(kind, "zset")) {
            resp_arr(stdout, 2 + 2 * 500);
            resp_str(stdout, "ZADD");
            resp_str(stdout, key);
            for (int j = 0; j < 500; j++) {
                snprintf(t, sizeof t, "%lld", T0 + (long long)j * 7200 + rng_below(&s, 7200));
                resp_str(stdout, t);
                resp_str(stdout, t);
            }
        } else {
            fprintf(stderr, "bench: --gen-redis: unknown kind '%s'\n", kind);
            return 2;
        }
    }
    return fflush(stdout) != 0;
}

/* Binds 127.0.0.1:0 and prints the port the kernel chose.  The port is free
 * when printed; the caller starts its server on it at once. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        close(fd);
        return 1;
    }
    printf("%u\n", ntohs(sa.sin_port));
    close(fd);
    return 0;
}

/* ---- main --------------------------------------------------------------- */

static unsigned parse_algos(const char *s)
{
    unsigned set = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        sl_algo a;
        if (sl_algo_parse(s, n, &a) != 0) die("unknown algorithm '%.*s'", (int)n, s);
        set |= 1u << a;
        s += n + (s[n] == ',');
    }
    return set;
}

static unsigned parse_parts(const char *s)
{
    static const struct {
        const char *name;
        unsigned bit;
    } names[] = {
        {"hot", PART_HOT}, {"1m", PART_MANY}, {"2t", PART_2T},
        {"mem", PART_MEM}, {"log", PART_LOG}, {"bkt", PART_BKT}, {"batch", PART_BATCH},
    };
    unsigned set = 0;
    while (*s) {
        size_t n = strcspn(s, ",");
        size_t i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n)) break;
        if (i == sizeof names / sizeof names[0])
            die("unknown part '%.*s' (hot,1m,2t,mem,log,bkt)", (int)n, s);
        set |= names[i].bit;
        s += n + (s[n] == ',');
    }
    return set;
}

/* Everything measured in one run. */
typedef struct bench {
    cfg c;
    algo_res res[SL_ALGO_COUNT];
    mem_res logm, bktm; /* .ok = 0 when not run */
} bench;

/* Bytes per key, per algorithm, each in a forked child; then the sliding-log
 * and sliding-buckets scenarios.  Run before any throughput run, while the
 * parent's heap holds only the keys. */
static void run_memory(bench *b)
{
    const cfg *c = &b->c;
    for (int a = 0; a < SL_ALGO_COUNT && (c->parts & PART_MEM); a++) {
        if (!(c->algos & (1u << a))) continue;
        algo_res *r = &b->res[a];
        mem_res m = mem_measure(LOAD_KEYS, (sl_algo)a, c->mem_keys);
        if (!m.ok) die("%s: memory: %s", sl_algo_name((sl_algo)a), m.err);
        r->b_alloc = m.alloc;
        r->b_rss = m.rss;
        r->b_stats = m.stats;
        fprintf(stderr,
                "  mem %-16s %7.1f B/key alloc %7.1f rss %7.1f stats (%.0f keys stored, "
                "%.0f denied, fill %.2f M/s)\n",
                sl_algo_name((sl_algo)a), m.alloc, m.rss, m.stats, m.keys_stored, m.denied,
                m.insert_mps);
    }
    if ((c->algos & (1u << SL_SLIDING_LOG)) && (c->parts & PART_LOG)) {
        b->logm = mem_measure(LOAD_LOG, SL_SLIDING_LOG, c->log_keys);
        if (!b->logm.ok) die("sliding-log memory: %s", b->logm.err);
        if (b->logm.denied > 0)
            die("sliding-log memory: %.0f requests denied, expected none", b->logm.denied);
    }
    if ((c->algos & (1u << SL_SLIDING_BUCKETS)) && (c->parts & PART_BKT)) {
        b->bktm = mem_measure(LOAD_BKT, SL_SLIDING_BUCKETS, c->bkt_keys);
        if (!b->bktm.ok) die("sliding-buckets memory: %s", b->bktm.err);
        if (b->bktm.denied > 0)
            die("sliding-buckets memory: %.0f requests denied, expected none", b->bktm.denied);
    }
}

static void run_throughput(bench *b)
{
    const cfg *c = &b->c;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        algo_res *r = &b->res[a];
        sl_algo al = (sl_algo)a;
        if (!(c->algos & (1u << a))) continue;
        /* One thread: a store for one thread (SL_LOCK_SHARD); two threads:
         * the default store (SL_LOCK_RECORD).  The other pairing is in the
         * details table (1 thread, record locks). */
        if (c->parts & PART_HOT) {
            r->hot1 = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 1, 0, NULL, &r->hot_allowed,
                              NULL, &r->share_hot1, 0, SL_LOCK_SHARD);
            r->hot1r = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 1, 0, NULL, NULL, NULL, NULL,
                               0, SL_LOCK_RECORD);
        }
        if (c->parts & PART_MANY) {
            r->many1 = measure(c, al, c->many_keys, g_many_idx, MANY_IDX, 1, 0, NULL,
                               &r->many_allowed, &r->insert, &r->share_many1, 0, SL_LOCK_SHARD);
            r->many1r = measure(c, al, c->many_keys, g_many_idx, MANY_IDX, 1, 0, NULL, NULL, NULL,
                                NULL, 0, SL_LOCK_RECORD);
        }
        if (c->parts & PART_2T) {
            r->hot2 = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 2, 0, &r->hot2min, NULL, NULL,
                              &r->share_hot2, 0, SL_LOCK_RECORD);
            r->hot2d = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 2, 1, &r->hot2dmin, NULL, NULL,
                               NULL, 0, SL_LOCK_RECORD);
            r->hot2s = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 2, 2, &r->hot2smin, NULL, NULL,
                               NULL, 0, SL_LOCK_RECORD);
            r->many2 = measure(c, al, c->many_keys, g_many_idx, MANY_IDX, 2, 0, &r->many2min, NULL,
                               NULL, &r->share_many2, 0, SL_LOCK_RECORD);
        }
        if (c->parts & PART_BATCH) {
            r->hotb = measure(c, al, HOT_KEYS, g_hot_idx, HOT_IDX, 1, 0, NULL, NULL, NULL, NULL,
                              BATCH, SL_LOCK_SHARD);
            r->manyb = measure(c, al, c->many_keys, g_many_idx, MANY_IDX, 1, 0, NULL, NULL, NULL,
                               NULL, BATCH, SL_LOCK_SHARD);
        }
        fprintf(stderr,
                "  run %-16s hot %6.2f  many %6.2f  2thr hot %6.2f / %6.2f  many %6.2f  batched "
                "hot %6.2f  many %6.2f M/s\n",
                sl_algo_name(al), r->hot1, r->many1, r->hot2, r->hot2d, r->many2, r->hotb,
                r->manyb);
    }
}

/* Judges one algorithm's row against the goals: writes "yes", "-"
 * (no goal) or the list of misses into met.  Returns 0 if a goal was missed. */
static int judge_row(const bench *b, sl_algo a, char *met, size_t n)
{
    const algo_res *r = &b->res[a];
    met[0] = 0;
    if (!has_goal(a)) {
        snprintf(met, n, "-");
        return 1;
    }
    if (r->hot1 >= 0 && r->hot1 < 20) miss(met, n, "hot %.1f<20", r->hot1);
    /* over 1M keys the goal is judged on the better of the two ways in:
     * one sl_allow per decision, or sl_allow_many (both are printed) */
    double many = r->manyb > r->many1 ? r->manyb : r->many1;
    if (many >= 0 && many < 5) miss(met, n, "many %.1f<5", many);
    if (r->hot2 >= 0 && r->hot2 / 2 < 20) miss(met, n, "2thr hot %.1f/thr<20", r->hot2 / 2);
    if (r->many2 >= 0 && r->many2 / 2 < 5) miss(met, n, "2thr many %.1f/thr<5", r->many2 / 2);
    if (b->c.parts & PART_MEM) {
        double worst = r->b_alloc > r->b_rss ? r->b_alloc : r->b_rss;
        if (worst > 32) miss(met, n, "%.1f B>32", worst);
    }
    if (met[0]) return 0;
    snprintf(met, n, "yes");
    return 1;
}

/* One row for a memory scenario with a goal of at most `goal` bytes. */
static int scenario_row(const char *algo, const char *what, const mem_res *m, const char *unit,
                        double goal, const char *goal_text)
{
    double worst = m->alloc > m->rss ? m->alloc : m->rss;
    char bytes[40], met[40];
    snprintf(bytes, sizeof bytes, "%.2f / %.2f%s", m->alloc, m->rss, unit);
    if (worst <= goal)
        snprintf(met, sizeof met, "yes");
    else
        snprintf(met, sizeof met, "no: %.2f>%g", worst, goal);
    printf("%-16s | %-45s | %-21s | %-26s | %s\n", algo, what, bytes, goal_text, met);
    return worst <= goal;
}

/* Prints the table; returns whether every goal was met. */
static int print_table(const bench *b)
{
    const cfg *c = &b->c;
    char many_h[16];
    if (c->many_keys % 1000000 == 0)
        snprintf(many_h, sizeof many_h, "%uM keys", c->many_keys / 1000000);
    else
        snprintf(many_h, sizeof many_h, "%uk keys", c->many_keys / 1000);
    printf("%-16s | %9s | %9s | %9s | %9s | %9s | %9s | %-21s | %-26s | %s\n", "algorithm",
           "hot keys", many_h, "hot keys", many_h, "hot keys", many_h, "bytes/key", "goal", "met?");
    printf("%-16s | %9s | %9s | %9s | %9s | %9s | %9s | %-21s | %-26s |\n", "", "1 thr M/s",
           "1 thr M/s", "batched", "batched", "2 thr M/s", "2 thr M/s", "alloc / rss", "");
    printf("-----------------+-----------+-----------+-----------+-----------+-----------+"
           "-----------+-----------------------+----------------------------+------\n");
    int all_met = 1;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const algo_res *r = &b->res[a];
        if (!(c->algos & (1u << a))) continue;
        char h1[16], m1[16], hb[16], mb[16], h2[16], m2[16], bytes[32], met[160];
        fmt_num(h1, sizeof h1, r->hot1, "%.2f");
        fmt_num(m1, sizeof m1, r->many1, "%.2f");
        fmt_num(hb, sizeof hb, r->hotb, "%.2f");
        fmt_num(mb, sizeof mb, r->manyb, "%.2f");
        fmt_num(h2, sizeof h2, r->hot2, "%.2f");
        fmt_num(m2, sizeof m2, r->many2, "%.2f");
        if (c->parts & PART_MEM)
            snprintf(bytes, sizeof bytes, "%.1f / %.1f", r->b_alloc, r->b_rss);
        else
            snprintf(bytes, sizeof bytes, "-");
        all_met &= judge_row(b, (sl_algo)a, met, sizeof met);
        printf("%-16s | %9s | %9s | %9s | %9s | %9s | %9s | %-21s | %-26s | %s\n",
               sl_algo_name((sl_algo)a), h1, m1, hb, mb, h2, m2, bytes,
               has_goal((sl_algo)a) ? ">=20 hot, >=5 many, <=32 B" : "", met);
    }
    if (b->logm.ok)
        all_met &= scenario_row("sliding-log", "per logged request, 500/h per key, L=500 W=1h",
                                &b->logm, " /req", 4.5, "<=4.5 B/req (textbook 24)");
    if (b->bktm.ok)
        all_met &= scenario_row("sliding-buckets", "per key, P=60 W=60s L=1000, 60 buckets used",
                                &b->bktm, "", 256, "<=256 B (textbook 1.6 KB)");
    return all_met;
}

/* The numbers behind the table: slowest thread, disjoint hot sets, the
 * fraction allowed, fill rates, the store's own byte count, and how much of
 * the wall-clock time the benchmark threads actually ran. */
static void print_details(const bench *b)
{
    const cfg *c = &b->c;
    printf("\n%-16s | %18s | %18s | %18s | %10s | %14s | %13s | %8s | %8s | %16s | %s\n",
           "details", "2 thr hot M/s", "2 thr hot M/s", "2 thr hot M/s", "2 thr many",
           "1 thr M/s", "allowed %", "fill M/s", "stats B", "1thr M/CPU-s",
           "cpu/wall % (min thread)");
    printf("%-16s | %18s | %18s | %18s | %10s | %14s | %13s | %8s | %8s | %16s | %s\n", "",
           "shared: agg (min)", "own keys: agg(min)", "own store: agg(min)", "min M/s",
           "rec locks h/m", "hot / many", "many", "per key", "hot / many",
           "hot1 many1 hot2 many2");
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const algo_res *r = &b->res[a];
        if (!(c->algos & (1u << a))) continue;
        char sh[32], own[32], sep[32], mm[16], al[32], ins[16], st[16], cpu[48], per[40],
            rl[40];
        snprintf(rl, sizeof rl, "%.2f / %.2f", r->hot1r, r->many1r);
        if (r->hot2 >= 0) {
            snprintf(sh, sizeof sh, "%.2f (%.2f)", r->hot2, r->hot2min);
            snprintf(own, sizeof own, "%.2f (%.2f)", r->hot2d, r->hot2dmin);
            snprintf(sep, sizeof sep, "%.2f (%.2f)", r->hot2s, r->hot2smin);
        } else {
            snprintf(sh, sizeof sh, "-");
            snprintf(own, sizeof own, "-");
            snprintf(sep, sizeof sep, "-");
        }
        fmt_num(mm, sizeof mm, r->many2min, "%.2f");
        snprintf(al, sizeof al, "%.1f / %.1f", r->hot_allowed * 100, r->many_allowed * 100);
        fmt_num(ins, sizeof ins, r->insert, "%.2f");
        fmt_num(st, sizeof st, (c->parts & PART_MEM) ? r->b_stats : -1, "%.1f");
        snprintf(cpu, sizeof cpu, "%4.0f %5.0f %4.0f %5.0f", r->share_hot1 * 100,
                 r->share_many1 * 100, r->share_hot2 * 100, r->share_many2 * 100);
        snprintf(per, sizeof per, "%.2f / %.2f", r->share_hot1 > 0 ? r->hot1 / r->share_hot1 : 0,
                 r->share_many1 > 0 ? r->many1 / r->share_many1 : 0);
        printf("%-16s | %18s | %18s | %18s | %10s | %14s | %13s | %8s | %8s | %16s | %s\n",
               sl_algo_name((sl_algo)a), sh, own, sep, mm, rl, r->hot_allowed >= 0 ? al : "-", ins,
               st, per, cpu);
    }
    if (b->logm.ok)
        printf("sliding-log 500/h: %u keys x 500 requests, load %.2f M/s, store stats "
               "%.2f B/req\n",
               c->log_keys, b->logm.insert_mps, b->logm.stats);
    if (b->bktm.ok)
        printf("sliding-buckets P=60: %u keys x 60 buckets, load %.2f M/s, store stats "
               "%.1f B/key\n",
               c->bkt_keys, b->bktm.insert_mps, b->bktm.stats);
}

static void write_results(const bench *b, int all_met)
{
    if (!g_results) return;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const algo_res *r = &b->res[a];
        if (!(b->c.algos & (1u << a))) continue;
        result("hot1", (sl_algo)a, r->hot1);
        result("many1", (sl_algo)a, r->many1);
        result("hot1_batched", (sl_algo)a, r->hotb);
        result("many1_batched", (sl_algo)a, r->manyb);
        result("hot2", (sl_algo)a, r->hot2);
        result("hot2_own_keys", (sl_algo)a, r->hot2d);
        result("hot2_own_store", (sl_algo)a, r->hot2s);
        result("many2", (sl_algo)a, r->many2);
        if (b->c.parts & PART_MEM) {
            result("bytes_alloc", (sl_algo)a, r->b_alloc);
            result("bytes_rss", (sl_algo)a, r->b_rss);
            result("bytes_stats", (sl_algo)a, r->b_stats);
        }
    }
    if (b->logm.ok)
        fprintf(g_results,
                "sliding-log.bytes_per_req_alloc %.3f\n"
                "sliding-log.bytes_per_req_rss %.3f\n",
                b->logm.alloc, b->logm.rss);
    if (b->bktm.ok)
        fprintf(g_results,
                "sliding-buckets.p60_bytes_alloc %.3f\n"
                "sliding-buckets.p60_bytes_rss %.3f\n",
                b->bktm.alloc, b->bktm.rss);
    fprintf(g_results, "all_met %d\n", all_met);
}

/* Parses the options into b->c.  Returns -1 to go on, or an exit status
 * (the helper modes run here). */
static int parse_options(bench *b, int argc, char **argv)
{
    cfg *c = &b->c;
    double run_s = -1;
    int reps = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--quick"))
            c->quick = 1;
        else if (!strcmp(o, "--interleave"))
            c->interleave = 1;
        else if (!strcmp(o, "--algo") && i + 1 < argc)
            c->algos = parse_algos(argv[++i]);
        else if (!strcmp(o, "--parts") && i + 1 < argc)
            c->parts = parse_parts(argv[++i]);
        else if (!strcmp(o, "--seconds") && i + 1 < argc)
            run_s = atof(argv[++i]);
        else if (!strcmp(o, "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(o, "--results") && i + 1 < argc)
            c->results = argv[++i];
        else if (!strcmp(o, "--gen-replay") && i + 2 < argc)
            return gen_replay(strtoull(argv[i + 1], NULL, 10),
                              (unsigned)strtoul(argv[i + 2], NULL, 10));
        else if (!strcmp(o, "--gen-redis") && i + 2 < argc)
            return gen_redis(argv[i + 1], (unsigned)strtoul(argv[i + 2], NULL, 10));
        else if (!strcmp(o, "--free-port"))
            return free_port();
        else if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (c->quick) {
        c->run_s = 0.05;
        c->reps = 1;
        c->many_keys = 100000;
        c->mem_keys = 100000;
        c->log_keys = 200;
        c->bkt_keys = 10000;
    }
    if (run_s > 0) c->run_s = run_s > 10 ? 10 : run_s;
    if (reps > 0) c->reps = reps > 20 ? 20 : reps;
    return -1;
}

int main(int argc, char **argv)
{
    static bench b;
    b.c = (cfg){.quick = 0,
                .run_s = 0.5,
                .reps = 3,
                .many_keys = MANY_KEYS,
                .mem_keys = MANY_KEYS,
                .log_keys = 2000,
                .bkt_keys = 100000,
                .algos = (1u << SL_ALGO_COUNT) - 1,
                .parts = 127,
                .results = NULL};
    /* every field of algo_res is a double: all start as -1, "not run" */
    _Static_assert(sizeof(algo_res) % sizeof(double) == 0, "algo_res holds doubles only");
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        for (size_t i = 0; i < sizeof(algo_res) / sizeof(double); i++) ((double *)&b.res[a])[i] = -1;
    int rc = parse_options(&b, argc, argv);
    if (rc >= 0) return rc;
    if (b.c.results && !(g_results = fopen(b.c.results, "w")))
        die("cannot write %s: %s", b.c.results, strerror(errno));

    make_keys(b.c.many_keys);
    printf("sluice bench%s%s: %.2f s per run, best of %d; %u hot keys, %u many keys; "
           "keys \"user:NNNNNN\" (%zu bytes)\n",
           b.c.quick ? " --quick (smoke run: too small to judge goals)" : "",
           b.c.interleave ? " --interleave (2t own keys: filled A0 B0 A1 B1 ...)" : "", b.c.run_s,
           b.c.reps, HOT_KEYS, b.c.many_keys, (size_t)KEY_LEN);
    printf("time simulated, +1 ms per %d decisions per thread; throughput limits L=4000 "
           "W=1s (sliding-buckets L=240000 W=60s P=60): a hot key uses ~25%% of L\n"
           "bytes/key: memory held after inserting %u keys minus their %zu key bytes, "
           "per key\n\n",
           TICK_DECISIONS, b.c.mem_keys, (size_t)KEY_LEN);
    double load0 = loadavg();
    fflush(stdout);

    run_memory(&b);
    run_throughput(&b);
    int all_met = print_table(&b);
    print_details(&b);
    double load1 = loadavg();
    printf("\nload average (1 min) at start %.2f, at end %.2f on %ld cores%s\n", load0, load1,
           sysconf(_SC_NPROCESSORS_ONLN),
           load0 > 0.5 || load1 > 2.5 ? ": OTHER PROCESSES WERE RUNNING, throughput is "
                                        "understated (see cpu/wall %)"
                                      : "");
    printf("all goals met: %s\n", all_met ? "yes" : "no");
    write_results(&b, all_met);
    if (g_results) fclose(g_results);
    free(g_keys);
    free(g_hot_idx);
    free(g_many_idx);
    return 0;
}
