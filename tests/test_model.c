/*
 * test_model.c -- sl_decide and sl_peek fuzzed against the reference model.
 *
 * For every algorithm (and sliding-log with log-rejected) random traces are
 * played on a fresh, unbounded sl_store and on the model (tests/model.c);
 * all six fields of every reply must agree.  Traces mix a few keys, times
 * that mostly move forward with steps back, costs of 0 and above the
 * capacity, L and c near 10^12, windows of 1 ms and of 10 years, bursts
 * other than L and every kind of precision.  Peeks are sprinkled in: a peek
 * must answer what the model would, and must change nothing (the decisions
 * after it are checked).  So are invalid requests (SPEC section 5): each
 * must be refused with its SL_E* code and leave the state as it was.
 *
 * A mismatch is shrunk to a short request sequence and printed in the
 * `sluice replay` format with both replies.  Each case has a fixed seed;
 * SLUICE_SEED=N overrides it and SLUICE_FUZZ_SCALE=K plays K times as many
 * traces, SLUICE_TEST_FILTER="*gcra*" runs only the matching tests.  The
 * model is also checked against every file of the spec's
 * vectors/ ($SLUICE_SPEC_DIR, default /work/shared/spec).
 *
 * The model is O(history) per evaluation, so histories are kept below 2000
 * requests per key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "sluice.h"
#include "support/rng.h"

#define FIXED_KEYS 4                 /* the keys[] table */
#define MAX_KEYS 600                 /* more are named "m<i>" */
#define MAX_HISTORY 2000             /* requests per key: the model is O(history) */
#define TMIN (-SL_MAX_TIME_MS + 1)   /* times are in (-2^62, 2^62) */
#define TMAX (SL_MAX_TIME_MS - 1)
#define SHRINK_SECONDS 20.0          /* budget for shrinking one mismatch */

__extension__ typedef unsigned __int128 u128;

/* ---- randomness: splitmix64 ---------------------------------------------- */

/* rng, rnd, rnd_in, chance: support/rng.h */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int64_t fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if (a % b != 0 && a < 0)
        q--;
    return q;
}

static uint64_t env_seed(uint64_t dflt)
{
    const char *s = getenv("SLUICE_SEED");
    if (s != NULL && *s != '\0')
        return strtoull(s, NULL, 0);
    return dflt;
}

static int env_scale(void)
{
    const char *s = getenv("SLUICE_FUZZ_SCALE");
    int k = s != NULL ? atoi(s) : 1;
    return k >= 1 ? k : 1;
}

/* ---- traces ----------------------------------------------------------------- */

/* The keys a trace may use: short text, binary with NULs, the longest; past
 * these, many short ones (the store must grow). */
static unsigned char long_key[SL_MAX_KEY];
static char many_keys[MAX_KEYS][16];
static struct {
    const char *name; /* as printed */
    const unsigned char *bytes;
    size_t len;
} keys[MAX_KEYS] = {
    {"k0", (const unsigned char *)"k0", 2},
    {"k1", (const unsigned char *)"k1", 2},
    {"bin\\0x", (const unsigned char *)"bin\0x", 5},
    {"long512", long_key, SL_MAX_KEY},
};

typedef struct op {
    int pi;     /* index into the trace's params */
    int key;    /* index into keys[] */
    int peek;   /* sl_peek rather than sl_decide */
    int bad;    /* 0, or the invalid_kind the request is made invalid by */
    int64_t t;
    int64_t cost;
} op;

typedef struct trace {
    const char *label;   /* the case */
    uint64_t seed;       /* the case's seed */
    int index;           /* trace number within the case */
    int np;
    sl_params p[SL_ALGO_COUNT];
    op *ops;
    size_t n, cap;
} trace;

static void trace_push(trace *tr, op o)
{
    if (tr->n == tr->cap) {
        tr->cap = tr->cap ? 2 * tr->cap : 256;
        tr->ops = realloc(tr->ops, tr->cap * sizeof *tr->ops);
        assert_non_null(tr->ops);
    }
    tr->ops[tr->n++] = o;
}

static void format_params(char *buf, size_t len, const sl_params *p)
{
    int w = snprintf(buf, len, "--algo %s --limit %" PRId64 " --window %" PRId64,
                     model_algo_name(p->algo), p->limit, p->window_ms);
    if (p->burst > 0)
        w += snprintf(buf + w, len - (size_t)w, " --burst %" PRId64, p->burst);
    if (p->precision > 0)
        w += snprintf(buf + w, len - (size_t)w, " --precision %" PRId64, p->precision);
    if (p->log_rejected)
        snprintf(buf + w, len - (size_t)w, " --log-rejected");
}

static void format_result(char *buf, size_t len, const sl_result *r)
{
    snprintf(buf, len, "%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
             r->allowed, r->limit, r->remaining, r->retry_after_ms, r->reset_after_ms,
             r->delay_ms);
}

static int same_result(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_after_ms == b->reset_after_ms &&
           a->delay_ms == b->delay_ms;
}

/* Ways to make a request invalid, one field at a time, and the code each
 * must be refused with (sluice.h). */
static const struct {
    const char *what;
    int rc;
} invalid_kind[] = {
    {"valid", 0},
    {"cost -1", SL_ECOST},
    {"cost SL_MAX_LIMIT + 1", SL_ECOST},
    {"t = SL_MAX_TIME_MS", SL_ETIME},
    {"t = -SL_MAX_TIME_MS", SL_ETIME},
    {"key of 0 bytes", SL_EKEY},
    {"key of SL_MAX_KEY + 1 bytes", SL_EKEY},
    {"limit 0", SL_ELIMIT},
    {"window 0", SL_EWINDOW},
    {"window SL_MAX_WINDOW_MS + 1", SL_EWINDOW},
    {"limit SL_MAX_LIMIT + 1", SL_ELIMIT},
    {"bad burst (window algorithm, or above SL_MAX_LIMIT)", SL_EBURST},
    {"bad precision (not sliding-buckets, or not dividing W)", SL_EPRECISION},
    {"log-rejected on another algorithm", SL_ELOGREJECTED},
};
#define INVALID_KINDS ((int)(sizeof invalid_kind / sizeof invalid_kind[0]))

/* Applies invalid kind `bad` to a copy of the request.  Returns 0 if that
 * kind does not apply to these parameters. */
static int make_invalid(int bad, sl_params *p, size_t *klen, int64_t *t, int64_t *cost)
{
    int bucket = p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA || p->algo == SL_LEAKY_BUCKET;
    switch (bad) {
    case 1: *cost = -1; return 1;
    case 2: *cost = SL_MAX_LIMIT + 1; return 1;
    case 3: *t = SL_MAX_TIME_MS; return 1;
    case 4: *t = -SL_MAX_TIME_MS; return 1;
    case 5: *klen = 0; return 1;
    case 6: *klen = SL_MAX_KEY + 1; return 1;
    case 7: p->limit = 0; return 1;
    case 8: p->window_ms = 0; return 1;
    case 9: p->window_ms = SL_MAX_WINDOW_MS + 1; return 1;
    case 10: p->limit = SL_MAX_LIMIT + 1; return 1;
    case 11: p->burst = bucket ? SL_MAX_LIMIT + 1 : 1; return 1;
    case 12:
        if (p->algo != SL_SLIDING_BUCKETS)
            p->precision = 1;
        else if (p->window_ms > 1)
            p->precision = p->window_ms + 1 <= SL_MAX_PRECISION ? p->window_ms + 1 : SL_MAX_PRECISION + 1;
        else
            return 0;
        return 1;
    case 13:
        if (p->algo == SL_SLIDING_LOG)
            return 0;
        p->log_rejected = 1;
        return 1;
    default: return 0;
    }
}

static int invalid_applies(int bad, const sl_params *p)
{
    sl_params q = *p;
    size_t klen = 1;
    int64_t t = 0, cost = 0;
    return make_invalid(bad, &q, &klen, &t, &cost);
}

/* What one op got from each side. */
typedef struct outcome {
    int rc;          /* the library's return code */
    sl_result want;  /* the model */
    sl_result got;   /* the library */
    int64_t t_eff;   /* the model's effective time */
} outcome;

/* Plays ops[0..n) on a fresh store and fresh models.  Returns the index of
 * the first op whose replies differ (or whose call failed), or n if all
 * agree.  If outs is not NULL it receives every op's outcome up to and
 * including the mismatch.  *model_err receives a model self-check failure
 * ("model bug ...": the index of the op that caused it is returned) or,
 * after a trace that agrees throughout, a wrong count of the store's keys
 * (n - 1 is returned). */
static size_t play(const trace *tr, const op *ops, size_t n, outcome *outs,
                   const char **model_err)
{
    int err = 0;
    /* Odd traces on a store with shard locks alone (sl_store_opts.locking):
     * its lone decisions do not mark their record held. */
    sl_store_opts so = {.locking = (tr->index & 1) ? SL_LOCK_SHARD : SL_LOCK_RECORD};
    sl_store *s = sl_store_new(&so, &err);
    assert_non_null(s);
    model *m[SL_ALGO_COUNT] = {NULL};
    for (int i = 0; i < tr->np; i++)
        m[i] = model_new(&tr->p[i]);
    static char errbuf[600];
    *model_err = NULL;

    size_t i;
    for (i = 0; i < n; i++) {
        const op *o = &ops[i];
        outcome oc;
        memset(&oc, 0, sizeof oc);
        const void *kb = keys[o->key].bytes;
        size_t kl = keys[o->key].len;
        oc.t_eff = model_effective_time(m[o->pi], kb, kl, o->t);
        if (o->bad) { /* refused with its code; the model is not told */
            static unsigned char big_key[SL_MAX_KEY + 1];
            sl_params bp = tr->p[o->pi];
            int64_t bt = o->t, bc = o->cost;
            make_invalid(o->bad, &bp, &kl, &bt, &bc);
            if (kl > SL_MAX_KEY)
                kb = big_key;
            sl_result junk;
            oc.rc = o->peek ? sl_peek(s, &bp, kb, kl, bt, bc, &junk)
                            : sl_decide(s, &bp, kb, kl, bt, bc, &junk);
            if (outs != NULL)
                outs[i] = oc;
            if (oc.rc != invalid_kind[o->bad].rc)
                break;
            continue;
        }
        if (o->peek) {
            model_peek(m[o->pi], kb, kl, o->t, o->cost, &oc.want);
            oc.rc = sl_peek(s, &tr->p[o->pi], kb, kl, o->t, o->cost, &oc.got);
        } else {
            model_decide(m[o->pi], kb, kl, o->t, o->cost, &oc.want);
            oc.rc = sl_decide(s, &tr->p[o->pi], kb, kl, o->t, o->cost, &oc.got);
        }
        if (outs != NULL)
            outs[i] = oc;
        if (model_error(m[o->pi]) != NULL) {
            snprintf(errbuf, sizeof errbuf, "%s", model_error(m[o->pi]));
            *model_err = errbuf;
            break;
        }
        if (oc.rc != 0 || !same_result(&oc.want, &oc.got))
            break;
    }
    if (i == n && *model_err == NULL) {
        /* Peeks and refused requests create no record: the store holds
         * exactly the (algorithm, key) pairs that were decided. */
        uint64_t want = 0;
        for (int j = 0; j < tr->np; j++)
            for (int k = 0; k < MAX_KEYS; k++)
                want += model_history_len(m[j], keys[k].bytes, keys[k].len) > 0;
        sl_store_stats st;
        sl_store_stats_get(s, &st);
        if (st.keys != want) {
            snprintf(errbuf, sizeof errbuf,
                     "the store holds %" PRIu64 " keys after the trace, but %" PRIu64
                     " (algorithm, key) pairs were decided (peeks and refused requests must "
                     "not create records)",
                     st.keys, want);
            *model_err = errbuf;
            i = n - 1;
        }
    }
    sl_store_free(s);
    for (int j = 0; j < tr->np; j++)
        model_free(m[j]);
    return i;
}

static int fails(const trace *tr, const op *ops, size_t n)
{
    const char *merr;
    return play(tr, ops, n, NULL, &merr) < n;
}

/* Shrinks ops[0..*n), which fails, to a short sequence that still fails:
 * first the failing key's own requests, then chunks removed while the rest
 * still fails (ddmin, without the complement step), within a time budget. */
static void shrink(const trace *tr, op *ops, size_t *n)
{
    clock_t start = clock();
    size_t len = *n;
    const op last = ops[len - 1];
    op *tmp = malloc(len * sizeof *tmp);
    assert_non_null(tmp);

    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        if (ops[i].pi == last.pi && ops[i].key == last.key)
            tmp[k++] = ops[i];
    if (k < len && fails(tr, tmp, k)) {
        memcpy(ops, tmp, k * sizeof *ops);
        len = k;
    }

    for (size_t chunk = len / 2; chunk >= 1;) {
        int removed = 0;
        for (size_t at = 0; at < len && len > 1;) {
            if ((double)(clock() - start) / CLOCKS_PER_SEC > SHRINK_SECONDS)
                goto out;
            size_t cut = min64((int64_t)chunk, (int64_t)(len - at));
            size_t m = 0;
            for (size_t i = 0; i < len; i++)
                if (i < at || i >= at + cut)
                    tmp[m++] = ops[i];
            if (m > 0 && fails(tr, tmp, m)) {
                memcpy(ops, tmp, m * sizeof *ops);
                len = m;
                removed = 1;
            } else {
                at += cut;
            }
        }
        if (!removed)
            chunk /= 2;
    }
out:
    free(tmp);
    *n = len;
}

/* Prints ops with both sides' replies, in `sluice replay` input format. */
static void print_ops(const trace *tr, const op *ops, size_t n, const outcome *outs)
{
    char ps[256], a[128], b[128];
    int lastpi = -1;
    for (size_t i = 0; i < n; i++) {
        const op *o = &ops[i];
        if (o->pi != lastpi) {
            format_params(ps, sizeof ps, &tr->p[o->pi]);
            print_error("  # args: %s\n", ps);
            lastpi = o->pi;
        }
        if (o->bad) {
            int rc = invalid_kind[o->bad].rc;
            print_error("  # %s with %s: rc %d expected, library: rc %d%s\n",
                        o->peek ? "sl_peek" : "sl_decide", invalid_kind[o->bad].what, rc,
                        outs[i].rc, outs[i].rc != rc ? "  <-- MISMATCH" : "");
            continue;
        }
        format_result(a, sizeof a, &outs[i].want);
        format_result(b, sizeof b, &outs[i].got);
        int bad = outs[i].rc != 0 || !same_result(&outs[i].want, &outs[i].got);
        print_error("  %" PRId64 " %s %" PRId64 " | %s%s   # t_eff %" PRId64 ", library: %s"
                    " (rc %d)%s\n",
                    o->t, keys[o->key].name, o->cost, a, o->peek ? " (PEEK)" : "",
                    outs[i].t_eff, b, outs[i].rc, bad ? "  <-- MISMATCH" : "");
    }
}

/* What a case exercised, so a reader can see the traces are not all
 * "allowed" (counted from the agreed replies). */
typedef struct stats {
    long decisions, peeks, invalid, allowed, denied, never, denied_free, late, delayed;
} stats;

static void count(stats *st, const op *o, const outcome *oc)
{
    if (o->bad) {
        st->invalid++;
        return;
    }
    if (o->peek) {
        st->peeks++;
        return;
    }
    st->decisions++;
    st->allowed += oc->want.allowed == 1;
    st->denied += oc->want.allowed == 0 && oc->want.retry_after_ms > 0;
    st->never += oc->want.retry_after_ms == -1;
    st->denied_free += oc->want.allowed == 0 && o->cost == 0;
    st->late += oc->t_eff > o->t;
    st->delayed += oc->want.delay_ms > 0;
}

static void print_stats(const char *what, const stats *st, uint64_t seed)
{
    print_message("[ info     ] %s: %ld decisions + %ld peeks agree, %ld invalid refused "
                  "(allowed %ld, denied %ld, never %ld, cost-0 denied %ld, out of order %ld, "
                  "delayed %ld), seed 0x%" PRIx64 "\n",
                  what, st->decisions, st->peeks, st->invalid, st->allowed, st->denied, st->never,
                  st->denied_free, st->late, st->delayed, seed);
}

/* Plays a whole trace; on a mismatch prints it, shrinks it, prints the
 * shrunk sequence and fails the test. */
static void check_trace(const trace *tr, stats *st)
{
    outcome *outs = malloc((tr->n ? tr->n : 1) * sizeof *outs);
    assert_non_null(outs);
    const char *merr = NULL;
    size_t at = play(tr, tr->ops, tr->n, outs, &merr);
    if (at == tr->n && merr == NULL) {
        for (size_t i = 0; i < tr->n; i++)
            count(st, &tr->ops[i], &outs[i]);
        free(outs);
        return;
    }

    if (merr != NULL && strncmp(merr, "model bug", 9) != 0) { /* the store count */
        free(outs);
        fail_msg("%s: case %s, seed 0x%" PRIx64 ": %s", "STORE", tr->label, tr->seed, merr);
    }
    const op *o = &tr->ops[at];
    char ps[256], a[128], b[128];
    format_params(ps, sizeof ps, &tr->p[o->pi]);
    format_result(a, sizeof a, &outs[at].want);
    format_result(b, sizeof b, &outs[at].got);
    print_error("%s: case %s, seed 0x%016" PRIx64 " (SLUICE_SEED=0x%" PRIx64 "), trace %d, "
                "request #%zu\n  params: %s\n  %s key=%s t=%" PRId64 " cost=%" PRId64
                " (t_eff %" PRId64 ")%s%s\n  model:   %s\n  library: %s (rc %d)\n",
                merr ? "MODEL SELF-CHECK FAILED" : "MISMATCH", tr->label, tr->seed, tr->seed,
                tr->index, at, ps, o->peek ? "sl_peek" : "sl_decide", keys[o->key].name, o->t,
                o->cost, outs[at].t_eff, o->bad ? ", made invalid by: " : "",
                o->bad ? invalid_kind[o->bad].what : "", a, b, outs[at].rc);
    if (merr != NULL) {
        print_error("  %s\n", merr);
        free(outs);
        fail_msg("the model contradicts itself (%s)", "a test bug, see above");
    }

    size_t n = at + 1;
    op *ops = malloc(n * sizeof *ops);
    assert_non_null(ops);
    memcpy(ops, tr->ops, n * sizeof *ops);
    shrink(tr, ops, &n);
    outcome *souts = calloc(n, sizeof *souts);
    assert_non_null(souts);
    size_t sat = play(tr, ops, n, souts, &merr);
    print_error("  shrunk to %zu request(s) (request, model's reply, library's reply):\n",
                sat < n ? sat + 1 : n);
    print_ops(tr, ops, sat < n ? sat + 1 : n, souts);
    free(souts);
    free(ops);
    free(outs);
    fail_msg("library and model disagree (%s, seed 0x%" PRIx64 ")", tr->label, tr->seed);
}

/* ---- generating traces --------------------------------------------------- */

typedef enum profile {
    PROF_SMALL,    /* L 1..10, W up to 3 s */
    PROF_W1,       /* W = 1 ms */
    PROF_DECADE,   /* W = 10 years */
    PROF_HUGE,     /* L near 10^12, costs up to 10^12 */
    PROF_WIDE,     /* bursts far from L, larger L, negative times */
    PROF_EDGE,     /* times at the ends of the range */
    PROF_DENSE,    /* many requests per window: logs fill, wrap, overflow */
    PROF_MANY,     /* hundreds of keys: the store grows */
    PROF_COUNT
} profile;

static const char *profile_name[PROF_COUNT] = {"small", "w1", "decade", "huge", "wide", "edge", "dense", "many"};

/* A precision for sliding-buckets: 0 (default, if it divides W), 1, W, or
 * a random divisor of W up to SL_MAX_PRECISION. */
static int64_t pick_precision(rng *r, int64_t W)
{
    int64_t divs[64];
    int nd = 0;
    int64_t top = min64(W, SL_MAX_PRECISION);
    int64_t start = rnd_in(r, 1, top);
    for (int64_t i = 0; i < top && nd < 64; i++) { /* divisors from a random start */
        int64_t d = (start + i - 1) % top + 1;
        if (W % d == 0)
            divs[nd++] = d;
    }
    int c = (int)(rnd(r) % 10);
    if (c < 3 && W % SL_DEFAULT_PRECISION == 0)
        return 0;
    if (c == 3)
        return 1;
    if (c == 4 && W <= SL_MAX_PRECISION)
        return W;
    return nd > 0 ? divs[rnd(r) % (uint64_t)nd] : 1;
}

static int64_t pick_window(rng *r, int64_t lo, int64_t hi)
{
    int64_t W = rnd_in(r, lo, hi);
    if (chance(r, 50) && W >= 10)
        W -= W % 10; /* often a round number, so the default precision fits */
    return W;
}

/* Parameters for algo under a profile.  Bucket parameters keep B * W / L
 * (the longest refill) below 2^60 ms, so every wait fits in an int64. */
static sl_params pick_params(rng *r, sl_algo algo, int log_rejected, profile pr)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = algo;
    p.log_rejected = log_rejected;
    switch (pr) {
    case PROF_SMALL:
    case PROF_MANY:
        p.limit = rnd_in(r, 1, 10);
        p.window_ms = pick_window(r, 1, 3000);
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 4 * p.limit);
        break;
    case PROF_W1:
        p.limit = rnd_in(r, 1, 5);
        p.window_ms = 1;
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 10);
        break;
    case PROF_DECADE:
        p.limit = chance(r, 50) ? rnd_in(r, 1, 20) : rnd_in(r, 1, 2000000);
        p.window_ms = SL_MAX_WINDOW_MS;
        p.burst = chance(r, 40) ? 0 : chance(r, 50) ? rnd_in(r, 1, 8 * p.limit)
                                                    : rnd_in(r, 1, 3000000); /* waits ~2^58 ms */
        break;
    case PROF_HUGE: {
        static const int64_t ws[] = {1, 7, 1000, 60000, 86400000, SL_MAX_WINDOW_MS};
        p.limit = chance(r, 50) ? SL_MAX_LIMIT - 7 : rnd_in(r, SL_MAX_LIMIT / 10, SL_MAX_LIMIT);
        p.window_ms = ws[rnd(r) % (sizeof ws / sizeof ws[0])];
        if (chance(r, 30))
            p.window_ms = pick_window(r, 1, SL_MAX_WINDOW_MS);
        p.burst = chance(r, 40) ? 0 : chance(r, 50) ? SL_MAX_LIMIT : rnd_in(r, 1, SL_MAX_LIMIT);
        break;
    }
    case PROF_WIDE:
        p.limit = rnd_in(r, 1, 1000);
        p.window_ms = pick_window(r, 1, 10000000);
        p.burst = chance(r, 20) ? 0 : chance(r, 50) ? rnd_in(r, 1, p.limit) : rnd_in(r, p.limit, 1000 * p.limit);
        break;
    case PROF_DENSE:
        p.limit = rnd_in(r, 1, 300);
        p.window_ms = pick_window(r, 1000, 10000000);
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 3 * p.limit);
        break;
    case PROF_EDGE:
    default:
        p.limit = rnd_in(r, 1, 10);
        p.window_ms = chance(r, 30) ? SL_MAX_WINDOW_MS : pick_window(r, 1, 1000000);
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 3 * p.limit);
        break;
    }
    if (algo != SL_TOKEN_BUCKET && algo != SL_GCRA && algo != SL_LEAKY_BUCKET)
        p.burst = 0;
    if (p.burst > 0 && (u128)p.burst * (u128)p.window_ms / (u128)p.limit >= (u128)1 << 60)
        p.burst = p.limit;
    if (algo == SL_SLIDING_BUCKETS)
        p.precision = pick_precision(r, p.window_ms);
    assert_int_equal(sl_params_check(&p), 0);
    return p;
}

/* A cost: mostly small, sometimes 0, the capacity, or above it (<= 10^12). */
static int64_t pick_cost(rng *r, int64_t full)
{
    int c = (int)(rnd(r) % 100);
    if (c < 5)
        return 0;
    if (c < 40)
        return 1;
    if (c < 60)
        return rnd_in(r, 1, max64(1, full / 4));
    if (c < 75)
        return rnd_in(r, 1, full);
    if (c < 83)
        return max64(0, full - rnd_in(r, 0, 2));
    if (c < 90)
        return chance(r, 20) ? SL_MAX_LIMIT : min64(SL_MAX_LIMIT, full + rnd_in(r, 1, 3));
    return rnd_in(r, 0, min64(3, full));
}

/* The next time: mostly forward by steps of every scale (1 ms, a bucket, a
 * window, to a window boundary and around it), sometimes back.  Dense
 * traces mostly creep forward by a small fraction of the window. */
static int64_t next_time(rng *r, int64_t t, int64_t W, int64_t g, int dense)
{
    int c = (int)(rnd(r) % 100);
    int64_t nt;
    if (dense && c < 85)
        nt = t + (chance(r, 5) ? -rnd_in(r, 1, W / 10) : rnd_in(r, 0, W / 300));
    else if (c < 8)
        nt = t - rnd_in(r, 1, 2 * W);
    else if (c < 25)
        nt = t;
    else if (c < 45)
        nt = t + rnd_in(r, 1, 3);
    else if (c < 60)
        nt = t + rnd_in(r, 1, g);
    else if (c < 75)
        nt = t + rnd_in(r, 1, W);
    else if (c < 85) {
        nt = (fdiv(t, W) + 1) * W + rnd_in(r, -1, 1);
        if (nt <= t)
            nt = t + 1;
    } else if (c < 95)
        nt = t + max64(1, W + rnd_in(r, -2, 2));
    else
        nt = t + rnd_in(r, 1, 5 * W);
    return nt < TMIN ? TMIN : nt > TMAX ? TMAX : nt;
}

/* One trace of about nreq requests over the algorithms of params[0..np),
 * each (algorithm, key) history kept under MAX_HISTORY decisions. */
static void gen_trace(rng *r, trace *tr, profile pr, int nreq)
{
    int nkeys = pr == PROF_MANY ? MAX_KEYS : (int)rnd_in(r, 1, FIXED_KEYS);
    int64_t W = tr->p[0].window_ms, g = W;
    for (int i = 0; i < tr->np; i++)
        W = min64(W, tr->p[i].window_ms);
    g = tr->p[0].algo == SL_SLIDING_BUCKETS && tr->np == 1
            ? W / (tr->p[0].precision ? tr->p[0].precision : SL_DEFAULT_PRECISION)
            : max64(1, W / 10);

    int64_t t;
    switch (pr) {
    case PROF_EDGE:
        if (chance(r, 50))
            t = TMIN + rnd_in(r, 0, 3 * W);
        else /* late enough that the trace runs into TMAX */
            t = TMAX - (int64_t)nreq * min64(W, 1000000);
        break;
    case PROF_WIDE:
        t = -rnd_in(r, 0, 50 * W); /* starts negative, crosses zero */
        break;
    default:
        t = rnd_in(r, -1000 * W, 1000 * W);
        break;
    }

    int hist[SL_ALGO_COUNT][MAX_KEYS] = {{0}};
    for (int i = 0; i < nreq; i++) {
        op o;
        memset(&o, 0, sizeof o);
        o.pi = (int)rnd_in(r, 0, tr->np - 1);
        o.key = (int)rnd_in(r, 0, nkeys - 1);
        if (hist[o.pi][o.key] >= MAX_HISTORY)
            continue;
        t = next_time(r, t, W, g, pr == PROF_DENSE);
        int64_t full = model_capacity(&tr->p[o.pi]);
        o.t = t;
        o.cost = pick_cost(r, full);
        int c = (int)(rnd(r) % 100);
        if (c < 15) { /* the same request peeked first: the same answer */
            o.peek = 1;
            trace_push(tr, o);
        } else if (c < 22) { /* another request peeked: changes nothing */
            op q = o;
            q.peek = 1;
            q.t = chance(r, 50) ? next_time(r, t, W, g, 0) : t + rnd_in(r, 0, 5 * W);
            q.t = min64(q.t, TMAX);
            q.cost = pick_cost(r, full);
            trace_push(tr, q);
        }
        if (chance(r, 4)) { /* an invalid request: refused, changes nothing */
            op q = o;
            q.peek = chance(r, 30);
            do
                q.bad = (int)rnd_in(r, 1, INVALID_KINDS - 1);
            while (!invalid_applies(q.bad, &tr->p[o.pi]));
            trace_push(tr, q);
        }
        o.peek = 0;
        trace_push(tr, o);
        hist[o.pi][o.key]++;
    }
}

/* ---- the randomized cases ------------------------------------------------ */

typedef struct fcase {
    const char *label;
    sl_algo algo;
    int log_rejected;
    uint64_t seed;
} fcase;


/* Per profile: traces and requests per trace. */
static const int prof_traces[PROF_COUNT] = {12, 6, 6, 8, 8, 6, 6, 2};
static const int prof_reqs[PROF_COUNT] = {1200, 600, 1000, 1000, 1000, 800, 1500, 4000};

static void run_case(const fcase *fc)
{
    uint64_t seed = env_seed(fc->seed);
    rng r = {seed};
    int scale = env_scale();
    stats st;
    memset(&st, 0, sizeof st);
    int index = 0;
    for (int pr = 0; pr < PROF_COUNT; pr++) {
        for (int k = 0; k < prof_traces[pr] * scale; k++) {
            trace tr;
            memset(&tr, 0, sizeof tr);
            char label[96];
            snprintf(label, sizeof label, "%s%s/%s", model_algo_name(fc->algo),
                     fc->log_rejected ? "+log-rejected" : "", profile_name[pr]);
            tr.label = label;
            tr.seed = seed;
            tr.index = index++;
            tr.np = 1;
            tr.p[0] = pick_params(&r, fc->algo, fc->log_rejected, (profile)pr);
            gen_trace(&r, &tr, (profile)pr, (int)rnd_in(&r, prof_reqs[pr] / 2, prof_reqs[pr]));
            check_trace(&tr, &st);
            free(tr.ops);
        }
    }
    print_stats(fc->label, &st, seed);
}

static const fcase cases[] = {
    {"fixed-window", SL_FIXED_WINDOW, 0, 0x0f1ed0001ULL},
    {"sliding-log", SL_SLIDING_LOG, 0, 0x5110900002ULL},
    {"sliding-log+log-rejected", SL_SLIDING_LOG, 1, 0x5110900003ULL},
    {"sliding-window", SL_SLIDING_WINDOW, 0, 0x5119d00004ULL},
    {"sliding-buckets", SL_SLIDING_BUCKETS, 0, 0x5119b00005ULL},
    {"token-bucket", SL_TOKEN_BUCKET, 0, 0x70b0000006ULL},
    {"gcra", SL_GCRA, 0, 0x9c9a000007ULL},
    {"leaky-bucket", SL_LEAKY_BUCKET, 0, 0x1eac000008ULL},
};

#define FUZZ_TEST(name, i)                                                                 \
    static void test_fuzz_##name(void **state)                                             \
    {                                                                                      \
        (void)state;                                                                       \
        run_case(&cases[i]);                                                               \
    }
FUZZ_TEST(fixed_window, 0)
FUZZ_TEST(sliding_log, 1)
FUZZ_TEST(sliding_log_rejected, 2)
FUZZ_TEST(sliding_window, 3)
FUZZ_TEST(sliding_buckets, 4)
FUZZ_TEST(token_bucket, 5)
FUZZ_TEST(gcra, 6)
FUZZ_TEST(leaky_bucket, 7)

/* Every algorithm on one store, the same keys: state is per (key, algo). */
static void test_fuzz_mixed(void **state)
{
    (void)state;
    uint64_t seed = env_seed(0x6d69786564ULL);
    rng r = {seed};
    stats st;
    memset(&st, 0, sizeof st);
    for (int k = 0; k < 6 * env_scale(); k++) {
        trace tr;
        memset(&tr, 0, sizeof tr);
        profile pr = k % 2 ? PROF_SMALL : PROF_WIDE;
        if (k == 5)
            pr = PROF_MANY;
        tr.label = profile_name[pr];
        tr.seed = seed;
        tr.index = k;
        tr.np = SL_ALGO_COUNT;
        int lr = chance(&r, 50);
        for (int a = 0; a < SL_ALGO_COUNT; a++)
            tr.p[a] = pick_params(&r, (sl_algo)a, a == SL_SLIDING_LOG ? lr : 0, pr);
        gen_trace(&r, &tr, pr, pr == PROF_MANY ? 6000 : 1200);
        check_trace(&tr, &st);
        free(tr.ops);
    }
    print_stats("all algorithms on one store", &st, seed);
}

/* ---- the spec's vectors ------------------------------------------------------- */

/* $SLUICE_SPEC_DIR, else ../shared/spec (a clone beside shared/, run from
 * its root), else /work/shared/spec. */
static const char *spec_dir(void)
{
    const char *d = getenv("SLUICE_SPEC_DIR");
    if (d != NULL && *d != '\0')
        return d;
    DIR *dir = opendir("../shared/spec/vectors");
    if (dir != NULL) {
        closedir(dir);
        return "../shared/spec";
    }
    return "/work/shared/spec";
}

/* "60000", "10s", "5m", "1h", "1d", "250ms" -> ms; -1 if not one. */
static int64_t parse_window(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0)
        return -1;
    if (*end == '\0' || strcmp(end, "ms") == 0)
        return v;
    if (strcmp(end, "s") == 0)
        return v * 1000;
    if (strcmp(end, "m") == 0)
        return v * 60000;
    if (strcmp(end, "h") == 0)
        return v * 3600000;
    if (strcmp(end, "d") == 0)
        return v * 86400000;
    return -1;
}

static int parse_algo(const char *s, sl_algo *out)
{
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        if (strcmp(s, model_algo_name((sl_algo)a)) == 0) {
            *out = (sl_algo)a;
            return 0;
        }
    return -1;
}

/* Parses "--algo A --limit L ..." into p.  Returns 0 or -1. */
static int parse_args(char *s, sl_params *p)
{
    sl_params q = SL_PARAMS_INIT;
    char *save = NULL;
    for (char *w = strtok_r(s, " \t\r\n", &save); w != NULL; w = strtok_r(NULL, " \t\r\n", &save)) {
        if (strcmp(w, "--log-rejected") == 0) {
            q.log_rejected = 1;
            continue;
        }
        char *v = strtok_r(NULL, " \t\r\n", &save);
        if (v == NULL)
            return -1;
        if (strcmp(w, "--algo") == 0) {
            if (parse_algo(v, &q.algo) != 0)
                return -1;
        } else if (strcmp(w, "--limit") == 0)
            q.limit = strtoll(v, NULL, 10);
        else if (strcmp(w, "--window") == 0)
            q.window_ms = parse_window(v);
        else if (strcmp(w, "--burst") == 0)
            q.burst = strtoll(v, NULL, 10);
        else if (strcmp(w, "--precision") == 0)
            q.precision = strtoll(v, NULL, 10);
        else
            return -1;
    }
    if (q.limit < 1 || q.window_ms < 1)
        return -1;
    *p = q;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Who answers the vectors: the model, or sl_decide on a fresh store. */
typedef struct vec_target {
    const char *who;
    int use_library;
} vec_target;

/* Plays every vectors/ file through vt and fails, after listing every
 * wrong line (file:line, request, expected and got), if any is wrong. */

static void check_vectors(const vec_target *vt)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/vectors", spec_dir());
    DIR *d = opendir(dir);
    if (d == NULL)
        fail_msg("cannot open %s (set SLUICE_SPEC_DIR)", dir);
    char *names[256];
    int nn = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && nn < 256;)
        if (strlen(e->d_name) > 4 && strcmp(e->d_name + strlen(e->d_name) - 4, ".txt") == 0)
            names[nn++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)nn, sizeof names[0], cmp_names);
    assert_true(nn > 0);

    int lines = 0, bad = 0, selfcheck = 0;
    for (int f = 0; f < nn; f++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        FILE *fp = fopen(path, "r");
        assert_non_null(fp);
        sl_params p;
        int have_params = 0, lineno = 0, checked = 0, model_broken = 0;
        model *m = NULL;
        sl_store *s = NULL;
        char line[1024];
        while (fgets(line, sizeof line, fp) != NULL) {
            lineno++;
            if (strncmp(line, "# args:", 7) == 0) {
                if (parse_args(line + 7, &p) != 0)
                    fail_msg("%s:%d: cannot parse the args line", path, lineno);
                have_params = 1;
                model_broken = 0;
                m = model_new(&p);
                int err;
                s = sl_store_new(NULL, &err);
                assert_non_null(s);
                continue;
            }
            char *bar = strchr(line, '|');
            if (line[0] == '#' || bar == NULL)
                continue;
            if (!have_params)
                fail_msg("%s:%d: a request before the args line", path, lineno);
            *bar = '\0';
            long long t, cost = 1;
            char key[600];
            int nf = sscanf(line, "%lld %599s %lld", &t, key, &cost);
            sl_result want, got;
            int nr = sscanf(bar + 1, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64
                                     " %" SCNd64,
                            &want.allowed, &want.limit, &want.remaining, &want.retry_after_ms,
                            &want.reset_after_ms, &want.delay_ms);
            if (nf < 2 || nr != 6)
                fail_msg("%s:%d: cannot parse the line", path, lineno);
            if (vt->use_library) {
                int rc = sl_decide(s, &p, key, strlen(key), t, cost, &got);
                if (rc != 0)
                    memset(&got, 0xff, sizeof got);
            } else {
                model_decide(m, key, strlen(key), t, cost, &got);
                /* The model's error is sticky: report and count it at the
                 * line that caused it, once per file. */
                if (model_error(m) != NULL && !model_broken) {
                    print_error("%s:%d: %s\n", names[f], lineno, model_error(m));
                    model_broken = 1;
                    selfcheck++;
                }
            }
            checked++;
            lines++;
            if (!same_result(&want, &got)) {
                char a[128], b[128];
                format_result(a, sizeof a, &want);
                format_result(b, sizeof b, &got);
                print_error("%s:%d: %lld %s %lld: expected %s, %s says %s\n", names[f], lineno,
                            t, key, cost, a, vt->who, b);
                bad++;
            }
        }
        fclose(fp);
        if (checked == 0)
            fail_msg("%s: no requests", path);
        model_free(m);
        sl_store_free(s);
        free(names[f]);
    }
    print_message("[ info     ] %s: %d vector lines in %d files, %d wrong, %d model self-check "
                  "failure(s)\n",
                  vt->who, lines, nn, bad, selfcheck);
    assert_int_equal(bad, 0);
    assert_int_equal(selfcheck, 0);
}

static void test_model_vectors(void **state)
{
    (void)state;
    vec_target vt = {"the model", 0};
    check_vectors(&vt);
}

static void test_library_vectors(void **state)
{
    (void)state;
    vec_target vt = {"the library", 1};
    check_vectors(&vt);
}

/* ---- a few known answers the model must give (beyond the vectors) --------- */

static void expect(model *m, const char *key, int64_t t, int64_t cost, int64_t a, int64_t l,
                   int64_t rem, int64_t retry, int64_t reset, int64_t delay)
{
    sl_result r;
    model_decide(m, key, strlen(key), t, cost, &r);
    sl_result w = {a, l, rem, retry, reset, delay};
    char x[128], y[128];
    format_result(x, sizeof x, &w);
    format_result(y, sizeof y, &r);
    if (!same_result(&r, &w))
        fail_msg("model: %s %" PRId64 " %" PRId64 ": expected %s, got %s", key, t, cost, x, y);
    assert_null(model_error(m));
}

static void test_model_known(void **state)
{
    (void)state;
    sl_params p = SL_PARAMS_INIT;

    /* 10^12 per 10 years: exact where doubles are not. */
    p.algo = SL_TOKEN_BUCKET;
    p.limit = SL_MAX_LIMIT - 7;
    p.window_ms = SL_MAX_WINDOW_MS;
    model *m = model_new(&p);
    expect(m, "k", -5, SL_MAX_LIMIT - 7, 1, SL_MAX_LIMIT - 7, 0, 0, SL_MAX_WINDOW_MS, 0);
    /* one token refills in ceil(W / L) ms: W / L = 0.3155760000022... */
    expect(m, "k", -5, 1, 0, SL_MAX_LIMIT - 7, 0, 1, SL_MAX_WINDOW_MS, 0);
    model_free(m);

    /* log-rejected: a cost-0 request is refused while the log is over L. */
    p.algo = SL_SLIDING_LOG;
    p.limit = 1;
    p.window_ms = 100;
    p.log_rejected = 1;
    m = model_new(&p);
    expect(m, "k", 0, 1, 1, 1, 0, 0, 100, 0);
    expect(m, "k", 10, 1, 0, 1, 0, 100, 100, 0);  /* log {0,10}: retry when 0 and 10 are gone */
    expect(m, "k", 20, 0, 0, 1, 0, 80, 90, 0);    /* S = 2 > 1: even cost 0 waits for 0 to go */
    model_free(m);

    /* leaky bucket: delay is the drain time of the queue ahead. */
    p = (sl_params)SL_PARAMS_INIT;
    p.algo = SL_LEAKY_BUCKET;
    p.limit = 3;
    p.window_ms = 1000;
    p.burst = 5;
    m = model_new(&p);
    expect(m, "k", 0, 2, 1, 5, 3, 0, 667, 0);
    expect(m, "k", 100, 2, 1, 5, 1, 0, 1234, 567); /* level 1.7 + 2: waits 1.7 s / 3 */
    /* fixed window with negative times: windows are aligned by floor. */
    model_free(m);
    p = (sl_params)SL_PARAMS_INIT;
    p.algo = SL_FIXED_WINDOW;
    p.limit = 2;
    p.window_ms = 1000;
    m = model_new(&p);
    expect(m, "k", -1, 2, 1, 2, 0, 0, 1, 0);
    expect(m, "k", -1, 1, 0, 2, 0, 1, 1, 0);
    expect(m, "k", 0, 2, 1, 2, 0, 0, 1000, 0);
    model_free(m);
}

int main(void)
{
    for (size_t i = 0; i < sizeof long_key; i++)
        long_key[i] = (unsigned char)(i * 37 + 11);
    for (int i = FIXED_KEYS; i < MAX_KEYS; i++) {
        snprintf(many_keys[i], sizeof many_keys[i], "m%d", i);
        keys[i].name = many_keys[i];
        keys[i].bytes = (const unsigned char *)many_keys[i];
        keys[i].len = strlen(many_keys[i]);
    }

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_known),
        cmocka_unit_test(test_model_vectors),
        cmocka_unit_test(test_library_vectors),
        cmocka_unit_test(test_fuzz_fixed_window),
        cmocka_unit_test(test_fuzz_sliding_log),
        cmocka_unit_test(test_fuzz_sliding_log_rejected),
        cmocka_unit_test(test_fuzz_sliding_window),
        cmocka_unit_test(test_fuzz_sliding_buckets),
        cmocka_unit_test(test_fuzz_token_bucket),
        cmocka_unit_test(test_fuzz_gcra),
        cmocka_unit_test(test_fuzz_leaky_bucket),
        cmocka_unit_test(test_fuzz_mixed),
    };
    const char *filter = getenv("SLUICE_TEST_FILTER"); /* e.g. "*gcra*" */
    if (filter != NULL && *filter != '\0')
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
