/*
 * replay.c -- `sluicectl replay` (SPEC section 6): every request of a trace
 * decided by libsluice, one answer line per request, in input order.
 *
 * The hot path keeps to a few tens of nanoseconds a line besides the
 * decision itself: input comes in 1 MiB read(2) blocks, lines are found with
 * memchr and parsed by hand over (pointer, length), answers are formatted by
 * hand into a buffer written out 64 KiB at a time; nothing is allocated per
 * line.  Decisions are sl_allow on one limiter (parameters checked once)
 * bound to one store, unbounded unless --max-memory is given, so a replay is
 * exact: every key is remembered.  Decisions are spread over threads by key
 * (see "the command" below); the answers do not depend on it.
 *
 * On a malformed line everything before it has been answered (stdout is
 * flushed first), then `sluicectl: line N: <what is wrong>` goes to stderr and
 * the exit status is 2.
 */
#include "replay.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "sluice.h"
#include "text.h"
#include "util.h"
#include "whatif.h"

#define IN_BLOCK            (1u << 20) /* bytes asked of each read(2) */
#define TOP_KEYS            10         /* keys listed by --summary */
#define MAX_THREADS         64         /* --threads */
#define DEFAULT_THREADS_MAX 4          /* default --threads: usable CPUs, at most this */

/* ---- the line parser ---------------------------------------------------- */

enum { C_ORD = 0, C_WS = 1, C_CTL = 2 };

/* Byte classes: spaces and tabs separate fields; other bytes below 0x20 and
 * DEL are control bytes, never part of a valid line; everything else
 * (including bytes >= 0x80, as in UTF-8 keys) is ordinary. */
static const unsigned char byte_class[256] = {
    [0x00] = C_CTL, [0x01] = C_CTL, [0x02] = C_CTL, [0x03] = C_CTL, [0x04] = C_CTL, [0x05] = C_CTL,
    [0x06] = C_CTL, [0x07] = C_CTL, [0x08] = C_CTL, ['\t'] = C_WS,  [0x0a] = C_CTL, [0x0b] = C_CTL,
    [0x0c] = C_CTL, [0x0d] = C_CTL, [0x0e] = C_CTL, [0x0f] = C_CTL, [0x10] = C_CTL, [0x11] = C_CTL,
    [0x12] = C_CTL, [0x13] = C_CTL, [0x14] = C_CTL, [0x15] = C_CTL, [0x16] = C_CTL, [0x17] = C_CTL,
    [0x18] = C_CTL, [0x19] = C_CTL, [0x1a] = C_CTL, [0x1b] = C_CTL, [0x1c] = C_CTL, [0x1d] = C_CTL,
    [0x1e] = C_CTL, [0x1f] = C_CTL, [' '] = C_WS,   [0x7f] = C_CTL,
};

/* sl_int_parse with a fast path: up to 18 digits cannot overflow, so the
 * range is checked once at the end rather than per digit.  Same answers. */
static inline int int_parse(const unsigned char *s, size_t len, int64_t max, int64_t *out)
{
    if (len == 0 || len > 18) return sl_int_parse((const char *)s, len, max, out);
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)s[i] - '0';
        if (d > 9) return SL_EINVAL;
        v = v * 10 + d;
    }
    if (v > (uint64_t)max) return SL_EINVAL;
    *out = (int64_t)v;
    return 0;
}

/* The end of the run of ordinary bytes at p (no blank, no control byte).
 * Eight bytes at a time while none is below 0x21 or is 0x7f (text.h), then
 * byte by byte. */
static inline const unsigned char *scan_ordinary(const unsigned char *p, const unsigned char *e)
{
    p = sl__skip_words(p, e, 0x21);
    while (p < e && byte_class[*p] == C_ORD) p++;
    return p;
}

int sl__replay_parse_line(const char *line, size_t len, sl__replay_req *req, char *err,
                          size_t errlen)
{
    const unsigned char *const l = (const unsigned char *)line;
    const unsigned char *p = l, *e = l + len, *tok;
    char q[SL__QBUF];

    if (len > SL_REPLAY_MAX_LINE) {
        snprintf(err, errlen,
                 "line is longer than %d bytes (a request is much shorter: a key has at most "
                 "%d bytes)",
                 SL_REPLAY_MAX_LINE, SL_MAX_KEY);
        return SL_REPLAY_BAD;
    }
    if (p < e && e[-1] == '\r') e--; /* CRLF line ends */
    while (p < e && byte_class[*p] == C_WS) p++;
    if (p == e || *p == '#') return SL_REPLAY_SKIP;

    /* T.  Fast path, one pass: up to 18 digits (no overflow possible) then a
     * blank or the end; anything else takes the careful path. */
    tok = p;
    {
        const unsigned char *d = p + (*p == '-'), *d0 = d;
        uint64_t v = 0;
        while (d < e && (unsigned)(*d - '0') <= 9 && d - d0 < 18)
            v = v * 10 + (unsigned)(*d++ - '0');
        if (d > d0 && (d == e || byte_class[*d] == C_WS) && v < (uint64_t)SL_MAX_TIME_MS) {
            req->t = *p == '-' ? -(int64_t)v : (int64_t)v;
            p = d;
            goto key;
        }
    }
    p = scan_ordinary(p, e);
    if (p < e && byte_class[*p] == C_CTL) goto ctl;
    {
        int neg = *tok == '-';
        size_t n = (size_t)(p - tok) - (size_t)neg;
        int64_t t;
        if (int_parse(tok + neg, n, SL_MAX_TIME_MS - 1, &t) != 0) {
            if (sl__looks_numeric(tok, (size_t)(p - tok)))
                snprintf(err, errlen, "time '%s' is out of range (|T| must be below %lld ms)",
                         sl__quote(tok, (size_t)(p - tok), q), (long long)SL_MAX_TIME_MS);
            else
                snprintf(err, errlen, "time '%s' is not an integer (T must be milliseconds)",
                         sl__quote(tok, (size_t)(p - tok), q));
            return SL_REPLAY_BAD;
        }
        req->t = neg ? -t : t;
    }

key:
    /* KEY */
    while (p < e && byte_class[*p] == C_WS) p++;
    if (p < e && byte_class[*p] == C_CTL) goto ctl;
    if (p == e) {
        snprintf(err, errlen, "missing key (expected: T KEY [COST])");
        return SL_REPLAY_BAD;
    }
    tok = p;
    p = scan_ordinary(p, e);
    if (p < e && byte_class[*p] == C_CTL) goto ctl;
    if ((size_t)(p - tok) > SL_MAX_KEY) {
        snprintf(err, errlen, "key is longer than %d bytes (%zu bytes)", SL_MAX_KEY,
                 (size_t)(p - tok));
        return SL_REPLAY_BAD;
    }
    req->key = (const char *)tok;
    req->klen = (size_t)(p - tok);

    /* [COST] */
    while (p < e && byte_class[*p] == C_WS) p++;
    if (p < e && byte_class[*p] == C_CTL) goto ctl;
    req->cost = 1;
    if (p < e) {
        tok = p;
        p = scan_ordinary(p, e);
        if (p < e && byte_class[*p] == C_CTL) goto ctl;
        if (int_parse(tok, (size_t)(p - tok), SL_MAX_LIMIT, &req->cost) != 0) {
            if (sl__looks_numeric(tok, (size_t)(p - tok)))
                snprintf(err, errlen, "cost '%s' is out of range (0 to %lld)",
                         sl__quote(tok, (size_t)(p - tok), q), (long long)SL_MAX_LIMIT);
            else
                snprintf(err, errlen, "cost '%s' is not an integer",
                         sl__quote(tok, (size_t)(p - tok), q));
            return SL_REPLAY_BAD;
        }
        while (p < e && byte_class[*p] == C_WS) p++;
        if (p < e && byte_class[*p] == C_CTL) goto ctl;
        if (p < e) {
            tok = p;
            while (p < e && byte_class[*p] != C_WS) p++;
            snprintf(err, errlen, "unexpected extra field '%s' (expected: T KEY [COST])",
                     sl__quote(tok, (size_t)(p - tok), q));
            return SL_REPLAY_BAD;
        }
    }
    return SL_REPLAY_REQ;

ctl:
    sl__ctl_message(err, errlen, *p, (size_t)(p - l) + 1);
    return SL_REPLAY_BAD;
}

/* ---- output ------------------------------------------------------------- */

/* Appends one answer line.  The caller flushes once SL__OUT_FLUSH bytes are
 * pending, so the line (SL__RESULT_MAX + 1 bytes) always fits. */
static inline void put_result(sl__out *o, const sl_result *r)
{
    char *p = sl__put_result(o->buf + o->len, r);
    *p++ = '\n';
    o->len = (size_t)(p - o->buf);
}

/* ---- --summary: counts per key ------------------------------------------ */

typedef struct key_stat {
    uint64_t hash;
    size_t koff; /* into keys_arena */
    uint32_t klen;
    uint64_t requests, allowed;
} key_stat;

typedef struct summary {
    key_stat *slots; /* open addressing, power-of-two size; klen 0 = empty */
    size_t cap, used;
    char *arena; /* key bytes */
    size_t arena_len, arena_cap;
    uint64_t requests, allowed, delayed;
    int64_t max_delay_ms;
} summary;

static int summary_grow(summary *s)
{
    size_t ncap = s->cap ? s->cap * 2 : 1024;
    key_stat *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL) return -1;
    for (size_t i = 0; i < s->cap; i++) {
        if (s->slots[i].klen == 0) continue;
        size_t j = s->slots[i].hash & (ncap - 1);
        while (ns[j].klen != 0) j = (j + 1) & (ncap - 1);
        ns[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = ns;
    s->cap = ncap;
    return 0;
}

/* Counts one answered request.  Returns 0, or -1 when out of memory. */
static int summary_add(summary *s, const sl__replay_req *rq, const sl_result *r)
{
    s->requests++;
    s->allowed += (uint64_t)r->allowed;
    if (r->delay_ms > 0) {
        s->delayed++;
        if (r->delay_ms > s->max_delay_ms) s->max_delay_ms = r->delay_ms;
    }
    if (2 * (s->used + 1) > s->cap && summary_grow(s) != 0) return -1;
    uint64_t h = sl__fnv1a(rq->key, rq->klen);
    size_t j = h & (s->cap - 1);
    for (;;) {
        key_stat *k = &s->slots[j];
        if (k->klen == 0) {
            if (s->arena_len + rq->klen > s->arena_cap) {
                size_t ncap = s->arena_cap ? s->arena_cap * 2 : 65536;
                while (ncap < s->arena_len + rq->klen) ncap *= 2;
                char *na = realloc(s->arena, ncap);
                if (na == NULL) return -1;
                s->arena = na;
                s->arena_cap = ncap;
            }
            memcpy(s->arena + s->arena_len, rq->key, rq->klen);
            k->hash = h;
            k->koff = s->arena_len;
            k->klen = (uint32_t)rq->klen;
            s->arena_len += rq->klen;
            s->used++;
        } else if (k->hash != h || k->klen != rq->klen ||
                   memcmp(s->arena + k->koff, rq->key, rq->klen) != 0) {
            j = (j + 1) & (s->cap - 1);
            continue;
        }
        k->requests++;
        k->allowed += (uint64_t)r->allowed;
        return 0;
    }
}

/* Orders keys for the top list: most denied first, then most requests
 * (sl__top_insert's order; ctx is the summary). */
static int more_denied(const void *x, const void *y, const void *ctx)
{
    const summary *s = ctx;
    const key_stat *a = x, *b = y;
    uint64_t da = a->requests - a->allowed, db = b->requests - b->allowed;
    if (da != db) return da > db;
    if (a->requests != b->requests) return a->requests > b->requests;
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(s->arena + a->koff, s->arena + b->koff, n);
    return c != 0 ? c < 0 : a->klen < b->klen;
}

static void summary_print(const summary *s, const sl_params *p, uint64_t lines, double secs,
                          int threads, const sl_store_stats *st)
{
    char d[32], q[SL__QBUF];
    FILE *f = stderr;

    fprintf(f, "\nsluicectl replay summary: %s, limit %lld per %lld ms", sl_algo_name(p->algo),
            (long long)p->limit, (long long)p->window_ms);
    if (p->burst) fprintf(f, ", burst %lld", (long long)p->burst);
    if (p->precision) fprintf(f, ", precision %lld", (long long)p->precision);
    if (p->log_rejected) fprintf(f, ", log-rejected");
    fprintf(f, "\n");
    sl__print_totals(f, 10, s->requests, s->allowed, lines);
    if (p->algo == SL_LEAKY_BUCKET)
        fprintf(f, "  delayed   %12llu   (longest delay %lld ms)\n", (unsigned long long)s->delayed,
                (long long)s->max_delay_ms);
    fprintf(f, "  keys      %12llu\n", (unsigned long long)s->used);
    if (st->evictions)
        fprintf(f, "  evicted   %12llu   (keys dropped to stay under --max-memory)\n",
                (unsigned long long)st->evictions);
    fprintf(f, "  time      %12.3f s  %.2f M requests/s, %d thread%s\n", secs,
            secs > 0 ? (double)s->requests / secs / 1e6 : 0.0, threads, threads == 1 ? "" : "s");

    /* The TOP_KEYS most denied keys. */
    const void *top[TOP_KEYS];
    size_t ntop = 0;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].klen != 0)
            ntop = sl__top_insert(top, ntop, TOP_KEYS, &s->slots[i], more_denied, s);
    if (ntop == 0) return;
    fprintf(f, "  top %zu keys by denied requests:\n", ntop);
    fprintf(f, "    %10s %10s %10s %8s  %s\n", "requests", "allowed", "denied", "denied%", "key");
    for (size_t i = 0; i < ntop; i++) {
        const key_stat *k = top[i];
        sl__pct(d, sizeof d, k->requests - k->allowed, k->requests);
        fprintf(f, "    %10llu %10llu %10llu %8s  %s\n", (unsigned long long)k->requests,
                (unsigned long long)k->allowed, (unsigned long long)(k->requests - k->allowed), d,
                sl__quote((const unsigned char *)s->arena + k->koff, k->klen, q));
    }
}

/* ---- options ------------------------------------------------------------ */

const char sl__replay_usage[] =
    "usage: sluicectl replay --algo ALGO --limit L --window W [--burst B] [--precision P]\n"
    "                        [--log-rejected] [--max-memory BYTES] [--summary]\n"
    "                        [--threads N] [FILE]\n"
    "       sluicectl replay --rules PATH --domain D [...] [FILE]\n"
    "\n"
    "Decides every request of a recorded trace as a limiter would have, and\n"
    "prints one answer per request, in input order.  With --rules, as sluiced's\n"
    "RL.CHECK would with that rules file (sluicectl replay --rules PATH --help).\n"
    "\n"
    "Input: FILE, or standard input if FILE is absent or '-'.  One request a line:\n"
    "    T KEY [COST]     T: time in integer milliseconds (may be negative);\n"
    "                     KEY: 1 to 512 bytes, no spaces, tabs or control bytes;\n"
    "                     COST: integer >= 0, default 1.  Fields are separated by\n"
    "                     spaces or tabs.  Blank lines and lines starting with '#'\n"
    "                     are skipped.  Keys are independent; a request older than\n"
    "                     its key's latest time is decided at that latest time.\n"
    "Output, one line per request:\n"
    "    ALLOWED LIMIT REMAINING RETRY_AFTER_MS RESET_AFTER_MS DELAY_MS\n"
    "\n"
    "Options:\n"
    "  --algo ALGO         fixed-window, sliding-log, sliding-window, sliding-buckets,\n"
    "                      token-bucket, gcra or leaky-bucket\n"
    "  --limit L           requests per window, 1 to 1000000000000\n"
    "  --window W          the window: integer ms, or with a unit: 250ms 10s 5m 1h 1d\n"
    "                      1w 1y (y = 365.25 days), at most 10y\n"
    "  --burst B           bucket capacity (token-bucket, gcra, leaky-bucket);\n"
    "                      default L\n"
    "  --precision P       buckets per window (sliding-buckets only), must divide W;\n"
    "                      default 10\n"
    "  --log-rejected      sliding-log only: denied requests are logged too\n"
    "  --max-memory BYTES  bound the memory for per-key state (suffix k, m or g:\n"
    "                      k = 1024, m = 2^20, g = 2^30, as sluiced reads sizes);\n"
    "                      keys at rest go first, then the least restricted are\n"
    "                      evicted, and answers are no longer exact.  Default:\n"
    "                      every key is remembered\n"
    "  --summary           when done, print totals, the threads used and the most\n"
    "                      denied keys to standard error (standard output is\n"
    "                      unchanged)\n"
    "  --threads N         threads deciding, keys dealt between them (answers are\n"
    "                      the same for any N); default: the CPUs this process may\n"
    "                      run on (its CPU affinity, e.g. taskset, and its cgroup's\n"
    "                      CPU quota), at most 4.  --max-memory implies 1\n"
    "  -h, --help          print this text\n"
    "\n"
    "Exit status: 0 done; 2 bad option or malformed line (\"sluicectl: line N: ...\"\n"
    "on standard error after every line before it has been answered); 1 any\n"
    "other failure (out of memory, read or write error).\n";

typedef struct replay_opts {
    sl_params p;
    int have_algo, have_limit, have_window;
    size_t max_memory;
    int summary;
    int threads;      /* deciding threads, main included */
    const char *file; /* NULL or "-": standard input */
} replay_opts;

/* Parses an integer of 1..max for option `name`. */
static int opt_int(const char *name, const char *v, int64_t min, int64_t max, int64_t *out)
{
    if (sl_int_parse(v, strlen(v), max, out) != 0 || *out < min) {
        fprintf(stderr, "sluicectl: %s must be an integer between %lld and %lld, got '%s'\n", name,
                (long long)min, (long long)max, v);
        return 2;
    }
    return 0;
}

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

static int takes_value(const char *name, size_t nlen)
{
    static const char *const with_value[] = {"algo",      "limit",      "window", "burst",
                                             "precision", "max-memory", "threads"};
    return sl__name_in(name, nlen, with_value, sizeof with_value / sizeof with_value[0]);
}

/* Fills o from argv.  Returns -1 when --help was printed, 0, or 2 after
 * printing what is wrong. */
static int parse_opts(int argc, char **argv, replay_opts *o)
{
    memset(o, 0, sizeof *o);
    o->p = (sl_params)SL_PARAMS_INIT;
    int cpus = sl__cpu_count(); /* affinity mask and cgroup quota, at least 1 */
    o->threads = cpus > DEFAULT_THREADS_MAX ? DEFAULT_THREADS_MAX : cpus;

    sl__args w = {
        .argc = argc, .argv = argv, .takes = takes_value, .see = "sluicectl replay --help"};
    sl__opt op;
    int rc;
    while ((rc = sl__opts_next(&w, &op, sl__replay_usage)) == 1) {
        const char *val = op.val;
#define IS(s) sl__opt_is(&op, s)
        if (IS("algo")) {
            if (sl_algo_parse(val, strlen(val), &o->p.algo) != 0)
                return sl__usage_error(
                    "unknown algorithm '%s' (expected fixed-window, sliding-log, "
                    "sliding-window, sliding-buckets, token-bucket, gcra or "
                    "leaky-bucket)",
                    val);
            o->have_algo = 1;
        } else if (IS("limit")) {
            if (opt_int("limit", val, 1, SL_MAX_LIMIT, &o->p.limit)) return 2;
            o->have_limit = 1;
        } else if (IS("window")) {
            if (sl_duration_parse(val, strlen(val), &o->p.window_ms) != 0)
                return sl__usage_error("window must be a duration from 1ms to 10y (integer ms, or "
                                       "with a unit: ms, s, m, h, d, w, y), got '%s'",
                                       val);
            o->have_window = 1;
        } else if (IS("burst")) {
            if (opt_int("burst", val, 1, SL_MAX_LIMIT, &o->p.burst)) return 2;
        } else if (IS("precision")) {
            if (opt_int("precision", val, 1, SL_MAX_PRECISION, &o->p.precision)) return 2;
        } else if (IS("max-memory")) {
            if (sl__opt_max_memory(val, &o->max_memory)) return 2;
        } else if (IS("threads")) {
            int64_t n;
            if (opt_int("threads", val, 1, MAX_THREADS, &n)) return 2;
            o->threads = (int)n;
        } else if (IS("log-rejected")) {
            o->p.log_rejected = 1;
        } else if (IS("summary")) {
            o->summary = 1;
        } else {
            return sl__usage_error("unknown option '%s' (see %s)", op.arg, w.see);
        }
#undef IS
    }
    if (rc != 0) return rc;
    o->file = w.file;

    if (!o->have_algo)
        return sl__usage_error("missing --algo (fixed-window, sliding-log, sliding-window, "
                               "sliding-buckets, token-bucket, gcra or leaky-bucket)");
    if (!o->have_limit) return sl__usage_error("missing --limit (requests per window)");
    if (!o->have_window) return sl__usage_error("missing --window (e.g. 1000, 10s, 1m)");
    const char *algo = sl_algo_name(o->p.algo);
    if (o->p.burst && !is_bucket(o->p.algo))
        return sl__usage_error(
            "--burst applies only to token-bucket, gcra and leaky-bucket, not %s", algo);
    if (o->p.precision && o->p.algo != SL_SLIDING_BUCKETS)
        return sl__usage_error("--precision applies only to sliding-buckets, not %s", algo);
    if (o->p.log_rejected && o->p.algo != SL_SLIDING_LOG)
        return sl__usage_error("--log-rejected applies only to sliding-log, not %s", algo);
    if (o->p.algo == SL_SLIDING_BUCKETS) {
        int64_t prec = o->p.precision ? o->p.precision : SL_DEFAULT_PRECISION;
        if (o->p.window_ms % prec != 0) {
            fprintf(stderr,
                    "sluicectl: window %lld ms is not divisible by precision %lld "
                    "(sliding-buckets splits the window into equal buckets)\n",
                    (long long)o->p.window_ms, (long long)prec);
            return 2;
        }
    }
    rc = sl_params_check(&o->p);
    if (rc != 0) return sl__usage_error("%s", sl_strerror(rc));
    return 0;
}

/* ---- the command -------------------------------------------------------- */

/*
 * How a run is organised.  The main thread reads, parses a batch of up to
 * BATCH requests, and formats the answers.  The decisions of a batch are
 * shared out by key: each request falls in one of SHARE_SLOTS slots by a hash
 * of its key, and the threads (the main one and --threads - 1 workers) claim
 * whole slots, one at a time, until none is left; a slot's requests are
 * decided in input order by the thread that claimed it.  A batch starts only
 * when the one before it is decided, so every key sees its requests in input
 * order: the answers are those of a single thread.  While the workers decide
 * batch k the main thread parses batch k+1, then claims what is left of k,
 * then formats k.  Claiming (rather than a fixed share) means a worker that
 * the system does not run for a while only delays the slot it holds.
 *
 * Input is read into two buffers used in turn, so that a batch's keys (which
 * point into a buffer) stay valid while the next batch is parsed.
 */
#define BATCH       8192 /* requests per batch */
#define SHARE_SLOTS 64   /* key-hash slots, the unit the threads claim */
/* Thread t of n is at home in slots HOME_LO(t, n) .. HOME_LO(t + 1, n) - 1. */
#define HOME_LO(t, n) ((unsigned)((t)*SHARE_SLOTS / (n)))

enum { MORE = 0, END_EOF, END_BAD, END_READ };

typedef struct batch {
    size_t n;
    int end;           /* MORE, or what ended the input */
    uint64_t err_line; /* END_BAD: the malformed line */
    char err[256];     /* END_BAD, END_READ: what is wrong */
    sl__replay_req req[BATCH];
    uint64_t line[BATCH];            /* input line of each request */
    uint8_t slot[BATCH];             /* key-hash slot of each request */
    uint32_t first[SHARE_SLOTS + 1]; /* slot s: order[first[s] .. first[s+1]) */
    uint32_t order[BATCH];           /* request indices grouped by slot, in input order */
    uint32_t pos[BATCH];             /* request i's place in order[] */
    int grouped;                     /* order/pos are in use: answers are in slot order */
    /* The answers, indexed by place in order[] when grouped (so each thread
     * writes runs of its own, not every other line), else by request. */
    int rc[BATCH];
    sl_result res[BATCH];
} batch;

typedef struct reader {
    int fd;
    const char *name;
    char *buf[2]; /* each IN_BLOCK + SL_REPLAY_MAX_LINE + 1 bytes */
    int cur;      /* the buffer being parsed */
    size_t pos, end;
    int eof, short_read; /* the last read(2) returned less than asked */
    int deal;            /* more than one thread: compute each key's slot */
    uint64_t lineno;
} reader;

/* A thread waiting for a hand-off polls SPIN times, then yields the CPU up
 * to YIELDS times (a few milliseconds when nothing else wants the CPU),
 * polling after each, and only then sleeps on a condition variable: the
 * main thread's own part of a batch takes a few hundred microseconds, and
 * waking a sleeping thread can cost as much. */
#define SPIN   1000
#define YIELDS 4000

struct pool;
typedef struct worker {
    struct pool *pl;
    int index; /* 1.. (the main thread is 0) */
} worker;

typedef struct pool {
    sl_limiter *lim;                   /* one thread: the only limiter */
    sl_limiter *slot_lim[SHARE_SLOTS]; /* the limiter (and store) of each slot's keys */
    int nthreads;                      /* including the main thread */
    pthread_t th[MAX_THREADS];
    worker w[MAX_THREADS];
    _Atomic(batch *) job;                   /* the batch being decided; published by `go` */
    _Atomic uint32_t go;                    /* generation of the batch handed out (release: job) */
    _Atomic uint32_t slot_gen[SHARE_SLOTS]; /* generation that last claimed each slot */
    _Atomic int slots_done;                 /* slots of the current batch fully decided */
    _Atomic int quit;
    pthread_mutex_t mu; /* with the two condition variables, for sleeping */
    pthread_cond_t go_cv, done_cv;
} pool;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A fast unkeyed hash of the key, only to share keys between threads (a
 * skewed share costs speed, never correctness). */
static inline unsigned key_slot(const char *k, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
    while (n >= 8) {
        memcpy(&w, k, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
        k += 8;
        n -= 8;
    }
    w = 0;
    memcpy(&w, k, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 32;
    return (unsigned)(h % SHARE_SLOTS);
}

/* Groups b's requests by slot (a counting sort, input order kept). */
static void group_slots(batch *b)
{
    uint32_t count[SHARE_SLOTS] = {0};
    for (size_t i = 0; i < b->n; i++) count[b->slot[i]]++;
    b->first[0] = 0;
    for (int s = 0; s < SHARE_SLOTS; s++) b->first[s + 1] = b->first[s] + count[s];
    uint32_t at[SHARE_SLOTS];
    memcpy(at, b->first, sizeof at);
    for (size_t i = 0; i < b->n; i++) {
        uint32_t j = at[b->slot[i]]++;
        b->order[j] = (uint32_t)i;
        b->pos[i] = j;
    }
    b->grouped = 1;
}

/* Claims slot s for generation gen: each slot is claimed once per batch. */
static inline int claim_slot(pool *pl, unsigned s, uint32_t gen)
{
    uint32_t prev = gen - 1;
    return atomic_load_explicit(&pl->slot_gen[s], memory_order_relaxed) == prev &&
           atomic_compare_exchange_strong_explicit(&pl->slot_gen[s], &prev, gen,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

static void decide_slot(pool *pl, batch *b, unsigned s)
{
    for (uint32_t j = b->first[s]; j < b->first[s + 1]; j++) {
        const sl__replay_req *rq = &b->req[b->order[j]];
        b->rc[j] = sl_allow(pl->slot_lim[s], rq->key, rq->klen, rq->t, rq->cost, &b->res[j]);
    }
    if (atomic_fetch_add_explicit(&pl->slots_done, 1, memory_order_acq_rel) + 1 == SHARE_SLOTS) {
        pthread_mutex_lock(&pl->mu);
        pthread_cond_signal(&pl->done_cv);
        pthread_mutex_unlock(&pl->mu);
    }
}

/* Thread me decides every slot of b (generation gen) it can claim: first its
 * home slots, front to back, so that a key's state stays in one core's
 * cache; then the other threads' slots, back to front, where their owners
 * will come last.  A thread still holding an older generation claims
 * nothing (every slot is past it). */
static void decide_slots(pool *pl, batch *b, uint32_t gen, int me)
{
    const int n = pl->nthreads;
    for (unsigned s = HOME_LO(me, n); s < HOME_LO(me + 1, n); s++)
        if (claim_slot(pl, s, gen)) decide_slot(pl, b, s);
    for (int k = 1; k < n; k++) {
        int u = (me + k) % n;
        for (unsigned s = HOME_LO(u + 1, n); s-- > HOME_LO(u, n);)
            if (claim_slot(pl, s, gen)) decide_slot(pl, b, s);
    }
}

static void *worker_main(void *arg)
{
    const worker *w = arg;
    pool *pl = w->pl;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = atomic_load_explicit(&pl->go, memory_order_acquire);
        for (int i = 0; i < SPIN + YIELDS && g == seen && !atomic_load(&pl->quit); i++) {
            if (i < SPIN)
                cpu_relax();
            else
                sched_yield();
            g = atomic_load_explicit(&pl->go, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&pl->mu);
            while ((g = atomic_load_explicit(&pl->go, memory_order_acquire)) == seen &&
                   !atomic_load(&pl->quit))
                pthread_cond_wait(&pl->go_cv, &pl->mu);
            pthread_mutex_unlock(&pl->mu);
        }
        if (atomic_load(&pl->quit)) break;
        seen = g;
        /* job may already be a later batch than g's: then g's claims are
         * exhausted and decide_slots returns at once. */
        decide_slots(pl, atomic_load_explicit(&pl->job, memory_order_acquire), g, w->index);
    }
    return NULL;
}

/* Starts nthreads - 1 workers (fewer if the system refuses threads).  lims
 * holds nthreads limiters, each on its own store: the keys of thread t's
 * home slots live in store t, so each store (its shard locks, its tables)
 * is worked on by one thread, except for the slots another steals.  A key
 * always falls in the same slot, so its state is always in the same store. */
static void pool_start(pool *pl, sl_limiter *const *lims, int nthreads)
{
    memset(pl, 0, sizeof *pl);
    pl->lim = lims[0];
    pl->nthreads = 1;
    atomic_init(&pl->job, NULL);
    atomic_init(&pl->go, 0);
    for (int i = 0; i < SHARE_SLOTS; i++) atomic_init(&pl->slot_gen[i], 0);
    atomic_init(&pl->slots_done, 0);
    atomic_init(&pl->quit, 0);
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->go_cv, NULL);
    pthread_cond_init(&pl->done_cv, NULL);
    for (int i = 1; i < nthreads; i++) {
        pl->w[i].pl = pl;
        pl->w[i].index = i;
        if (pthread_create(&pl->th[i], NULL, worker_main, &pl->w[i]) != 0) break;
        pl->nthreads = i + 1;
    }
    for (int t = 0; t < pl->nthreads; t++)
        for (unsigned sl = HOME_LO(t, pl->nthreads); sl < HOME_LO(t + 1, pl->nthreads); sl++)
            pl->slot_lim[sl] = lims[t];
}

static void pool_stop(pool *pl)
{
    pthread_mutex_lock(&pl->mu);
    atomic_store(&pl->quit, 1);
    pthread_cond_broadcast(&pl->go_cv);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 1; i < pl->nthreads; i++) pthread_join(pl->th[i], NULL);
    pthread_cond_destroy(&pl->go_cv);
    pthread_cond_destroy(&pl->done_cv);
    pthread_mutex_destroy(&pl->mu);
}

/* Offers b's slots to the workers. */
static void pool_go(pool *pl, batch *b)
{
    if (pl->nthreads == 1 || b->n == 0) return;
    group_slots(b);
    uint32_t gen = atomic_load_explicit(&pl->go, memory_order_relaxed) + 1;
    atomic_store_explicit(&pl->job, b, memory_order_release);
    atomic_store_explicit(&pl->slots_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&pl->mu);
    atomic_store_explicit(&pl->go, gen, memory_order_release);
    pthread_cond_broadcast(&pl->go_cv);
    pthread_mutex_unlock(&pl->mu);
}

/* Decides what the workers have not claimed of b, then waits for the slots
 * they hold.  With one thread: decides b in input order. */
static void pool_finish(pool *pl, batch *b)
{
    if (pl->nthreads == 1 || b->n == 0) {
        for (size_t i = 0; i < b->n; i++) {
            const sl__replay_req *rq = &b->req[i];
            b->rc[i] = sl_allow(pl->lim, rq->key, rq->klen, rq->t, rq->cost, &b->res[i]);
        }
        return;
    }
    decide_slots(pl, b, atomic_load_explicit(&pl->go, memory_order_relaxed), 0);
    for (int i = 0; i < SPIN + YIELDS; i++) {
        if (atomic_load_explicit(&pl->slots_done, memory_order_acquire) == SHARE_SLOTS) return;
        if (i < SPIN)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_lock(&pl->mu);
    while (atomic_load_explicit(&pl->slots_done, memory_order_acquire) < SHARE_SLOTS)
        pthread_cond_wait(&pl->done_cv, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
}

/* Copies the unparsed tail to the other buffer and reads once after it.
 * The other buffer holds no live batch (see above).  Returns 0 or -1 (b->err
 * set).  Before a read that may wait (after a short one), output is flushed
 * so that a live stream gets its answers. */
static int refill(reader *rd, sl__out *out, batch *b)
{
    size_t rem = rd->end - rd->pos;
    char *dst = rd->buf[!rd->cur];
    memcpy(dst, rd->buf[rd->cur] + rd->pos, rem);
    rd->cur = !rd->cur;
    rd->pos = 0;
    rd->end = rem;
    if (rd->short_read) sl__out_flush(out);
    size_t want = IN_BLOCK + SL_REPLAY_MAX_LINE + 1 - rem;
    ssize_t n = sl__read(rd->fd, dst + rem, want);
    if (n < 0) {
        snprintf(b->err, sizeof b->err, "cannot read %s: %s", rd->name, strerror(errno));
        return -1;
    }
    rd->eof = n == 0;
    rd->short_read = (size_t)n < want;
    rd->end += (size_t)n;
    return 0;
}

/* Parses the next batch: up to BATCH requests, ending early at the end of
 * the buffer, at a malformed line, or at the end of input.  Refills the
 * buffer at most once (the safety of the two buffers depends on it); if
 * `live` (a batch is still undecided) and input would have to be waited
 * for, returns an empty batch instead, so the live one is answered first. */
static void parse_batch(reader *rd, sl__out *out, batch *b, int live)
{
    b->n = 0;
    b->end = MORE;
    b->grouped = 0;
    if (!rd->eof && memchr(rd->buf[rd->cur] + rd->pos, '\n', rd->end - rd->pos) == NULL &&
        rd->end - rd->pos <= SL_REPLAY_MAX_LINE) {
        if (live && rd->short_read) {
            struct pollfd pfd = {.fd = rd->fd, .events = POLLIN};
            if (poll(&pfd, 1, 0) == 0) return;
        }
        if (refill(rd, out, b) != 0) {
            b->end = END_READ;
            return;
        }
    }
    const char *buf = rd->buf[rd->cur];
    while (b->n < BATCH) {
        const char *line = buf + rd->pos;
        size_t avail = rd->end - rd->pos, len;
        const char *nl = memchr(line, '\n', avail);
        if (nl != NULL) {
            len = (size_t)(nl - line);
            rd->pos += len + 1;
        } else if (rd->eof || avail > SL_REPLAY_MAX_LINE) {
            /* the last line, without '\n'; or one too long (refused below) */
            if (avail == 0) {
                b->end = END_EOF;
                return;
            }
            len = avail;
            rd->pos += len;
        } else {
            return; /* the buffer's lines are all parsed */
        }
        rd->lineno++;
        sl__replay_req *rq = &b->req[b->n];
        int rc = sl__replay_parse_line(line, len, rq, b->err, sizeof b->err);
        if (rc == SL_REPLAY_REQ) {
            b->line[b->n] = rd->lineno;
            b->slot[b->n] = rd->deal ? (uint8_t)key_slot(rq->key, rq->klen) : 0;
            b->n++;
        } else if (rc == SL_REPLAY_BAD) {
            b->end = END_BAD;
            b->err_line = rd->lineno;
            return;
        }
    }
}

/* Writes the answers of b in order.  Returns 0, or an exit status after
 * printing what went wrong (the answers before it written first). */
static int answer_batch(const replay_opts *o, sl__out *out, summary *sum, const batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        const size_t j = b->grouped ? b->pos[i] : i; /* where request i's answer is */
        const char *what = NULL;
        if (b->rc[j] == SL_ENOMEM)
            what = o->max_memory ? "out of memory: the key cannot be stored (is --max-memory "
                                   "too small?)"
                                 : "out of memory: the key cannot be stored";
        else if (b->rc[j] != 0)
            what = sl_strerror(b->rc[j]); /* the parser lets through only valid requests */
        else if (o->summary && summary_add(sum, &b->req[i], &b->res[j]) != 0)
            what = "out of memory for --summary";
        if (what != NULL) {
            sl__out_flush(out);
            fprintf(stderr, "sluicectl: line %llu: %s\n", (unsigned long long)b->line[i], what);
            return b->rc[j] == SL_ENOMEM || b->rc[j] == 0 ? 1 : 2;
        }
        put_result(out, &b->res[j]);
        if (out->len >= SL__OUT_FLUSH && sl__out_flush(out) != 0) return 1;
    }
    if (b->end == END_BAD || b->end == END_READ) {
        sl__out_flush(out);
        if (b->end == END_BAD)
            fprintf(stderr, "sluicectl: line %llu: %s\n", (unsigned long long)b->err_line, b->err);
        else
            fprintf(stderr, "sluicectl: %s\n", b->err);
        return b->end == END_BAD ? 2 : 1;
    }
    return 0;
}

/* Reads the input to its end, answering every request.  Returns the exit
 * status. */
static int replay_run(const replay_opts *o, reader *rd, pool *pl, sl__out *out, summary *sum)
{
    batch *bs[2] = {malloc(sizeof(batch)), malloc(sizeof(batch))};
    int rc = 0;
    if (bs[0] == NULL || bs[1] == NULL) {
        fprintf(stderr, "sluicectl: out of memory\n");
        rc = 1;
        goto out;
    }
    parse_batch(rd, out, bs[0], 0);
    for (unsigned k = 0;; k++) {
        batch *b = bs[k & 1], *next = bs[(k + 1) & 1];
        pool_go(pl, b);
        if (pl->nthreads > 1 && b->end == MORE) parse_batch(rd, out, next, b->n > 0);
        pool_finish(pl, b);
        if (pl->nthreads == 1 && b->end == MORE) parse_batch(rd, out, next, b->n > 0);
        rc = answer_batch(o, out, sum, b);
        if (rc != 0 || b->end != MORE) break;
    }
out:
    free(bs[0]);
    free(bs[1]);
    return rc;
}

int sl__replay_main(int argc, char **argv)
{
    /* --rules (or another option of that mode): what-if replay of a rules
     * file, whatif.c */
    if (sl__whatif_wanted(argc, argv)) return sl__whatif_main(argc, argv);
    replay_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;

    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.fd = sl__input_open(o.file, &rd.name);
    if (rd.fd < 0) return 2;

    /* One thread with a memory bound: which keys are evicted then depends
     * on the order of decisions across keys.  Otherwise a store per thread
     * (see pool_start). */
    const int nstores = o.max_memory ? 1 : o.threads;
    sl_store *stores[MAX_THREADS] = {0};
    sl_limiter *lims[MAX_THREADS] = {0};
    sl_store_opts so;
    memset(&so, 0, sizeof so);
    so.max_bytes = o.max_memory;
    so.locking = SL_LOCK_SHARD; /* each store is used by one thread */
    int err = 0;
    for (int i = 0; i < nstores && err == 0; i++) {
        stores[i] = sl_store_new(&so, &err);
        lims[i] = stores[i] ? sl_limiter_new(&o.p, stores[i], &err) : NULL;
    }
    sl__out *out = calloc(1, sizeof *out);
    rd.buf[0] = malloc(IN_BLOCK + SL_REPLAY_MAX_LINE + 1);
    rd.buf[1] = malloc(IN_BLOCK + SL_REPLAY_MAX_LINE + 1);
    summary sum;
    memset(&sum, 0, sizeof sum);
    pool pl;
    int have_pool = 0;

    if (err != 0) {
        rc = sl__store_failed(err, o.max_memory);
    } else if (out == NULL || rd.buf[0] == NULL || rd.buf[1] == NULL) {
        fprintf(stderr, "sluicectl: out of memory\n");
        rc = 1;
    } else {
        out->fd = 1;
        pool_start(&pl, lims, nstores);
        have_pool = 1;
        rd.deal = pl.nthreads > 1;
        int64_t t0 = sl__mono_ns();
        rc = replay_run(&o, &rd, &pl, out, &sum);
        if (sl__out_flush(out) != 0 || out->failed) {
            fprintf(stderr, "sluicectl: cannot write the answers: %s\n", strerror(out->failed));
            rc = 1;
        }
        double secs = (double)(sl__mono_ns() - t0) / 1e9;
        sl_store_stats st, one;
        memset(&st, 0, sizeof st);
        for (int i = 0; i < nstores; i++) {
            sl_store_stats_get(stores[i], &one);
            st.keys += one.keys;
            st.evictions += one.evictions;
        }
        sl__warn_evicted(st.evictions, "keys");
        if (o.summary && rc == 0) summary_print(&sum, &o.p, rd.lineno, secs, pl.nthreads, &st);
    }

    if (have_pool) pool_stop(&pl);
    free(sum.slots);
    free(sum.arena);
    free(rd.buf[0]);
    free(rd.buf[1]);
    free(out);
    for (int i = 0; i < nstores; i++) {
        sl_limiter_free(lims[i]);
        sl_store_free(stores[i]);
    }
    if (rd.fd > 0) close(rd.fd);
    return rc;
}
