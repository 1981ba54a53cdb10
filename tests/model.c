/*
 * model.c -- the reference model sluice is fuzzed against (see model.h).
 *
 * The semantics, SPEC sections 2-4 plus the team's choices:
 *
 *  - A key's history is every request decided for it, in order, each with
 *    its effective time t_eff = max(t, every earlier t_eff of the key) and a
 *    flag `counted`: it was accepted, or (sliding-log with log-rejected) it
 *    was logged, which every request is.  Denied requests advance the key's
 *    clock but count nothing.  Replies are relative to t_eff.
 *  - allow(T, c): would a request of cost c at T (>= every t_eff of the
 *    history) pass, given the counted history?  Computed from scratch:
 *      fixed-window     counted cost with floor(t/W) == floor(T/W), + c <= L
 *      sliding-log      counted cost with t > T - W, + c <= L.  With
 *                       log-rejected the request is logged first and passes
 *                       iff the log then holds <= L: the same inequality,
 *                       so cost 0 fails once the log already holds > L
 *      sliding-window   n + floor(p * (W - e) / W) + c <= L  (SPEC 2)
 *      sliding-buckets  counted cost in buckets floor(T/g)-P+1 .. floor(T/g)
 *                       of g = W/P ms aligned to t = 0, + c <= L
 *      token-bucket,    the accepted history replayed from a full bucket of
 *      gcra             B tokens refilled at L per W ms: tokens(T) >= c
 *      leaky-bucket     the accepted history replayed into an empty queue
 *                       drained at L per W ms: level(T) + c <= B
 *    The buckets are kept exactly in units of 1/W token (unsigned 128-bit).
 *  - remaining: the largest n in [0, capacity] with allow(T, n), after the
 *    request is recorded; 0 if none.
 *  - retry_after_ms: 0 if allowed; -1 if cost > capacity; else the smallest
 *    d >= 1 with allow(T + d, cost) on the history including this request.
 *  - reset_after_ms: the smallest d >= 0 with allow(T + d, capacity), which
 *    is "remaining equals the capacity" since no cost above the capacity
 *    ever passes.
 *  - delay_ms (leaky-bucket, allowed): the smallest d >= 0 at which the
 *    queue ahead of the request, level(T) before adding it, has drained.
 *
 * Searches over d are exponential then binary: each predicate is monotone
 * in d when nothing else arrives, windows reach 10 years, so linear search
 * is out.  The model checks its own searches (the answer's predecessor must
 * fail) and reports any inconsistency through model_error().
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

/* The longest wait a search looks for (ms).  |t| < 2^62, so T + d fits. */
#define SEARCH_MAX ((int64_t)1 << 62)

typedef struct entry {
    int64_t t;    /* effective time (ms) */
    int64_t cost;
    int counted;  /* accepted, or logged (log-rejected) */
} entry;

typedef struct mkey {
    unsigned char *key;
    size_t klen;
    entry *h; /* the full history, t non-decreasing */
    size_t n, cap;
} mkey;

struct model {
    sl_params p;
    int64_t full;   /* capacity: L, or B for the buckets */
    int64_t burst;  /* B (buckets) */
    int64_t g;      /* sliding-buckets: bucket width W / P (ms) */
    int64_t prec;   /* sliding-buckets: P */
    mkey *keys;     /* a few keys per test: linear search is fine */
    size_t nkeys, capkeys;
    char err[512];  /* first internal inconsistency, "" if none */
};

/* The state a key's counted history leaves behind, for the buckets: the
 * replay is done once per question, then evaluated at any later time. */
typedef struct view {
    const mkey *k;
    int has;        /* buckets: some counted request was replayed */
    u128 q;         /* buckets: tokens (token-bucket) or level (leaky), 1/W units */
    int64_t last;   /* buckets: time of the last counted request */
} view;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL) {
        fprintf(stderr, "model: out of memory\n");
        abort();
    }
    return q;
}

static void model_fail(model *m, const char *what, int64_t a, int64_t b)
{
    if (m->err[0] == '\0')
        snprintf(m->err, sizeof m->err, "model bug (%s): %s (%lld, %lld)",
                 model_algo_name(m->p.algo), what, (long long)a, (long long)b);
}

/* floor(a / b) for b > 0. */
static int64_t fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if (a % b != 0 && a < 0)
        q--;
    return q;
}

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

const char *model_algo_name(sl_algo a)
{
    switch (a) {
    case SL_FIXED_WINDOW: return "fixed-window";
    case SL_SLIDING_LOG: return "sliding-log";
    case SL_SLIDING_WINDOW: return "sliding-window";
    case SL_SLIDING_BUCKETS: return "sliding-buckets";
    case SL_TOKEN_BUCKET: return "token-bucket";
    case SL_GCRA: return "gcra";
    case SL_LEAKY_BUCKET: return "leaky-bucket";
    default: return "?";
    }
}

int64_t model_capacity(const sl_params *p)
{
    if (is_bucket(p->algo) && p->burst > 0)
        return p->burst;
    return p->limit;
}

model *model_new(const sl_params *p)
{
    model *m = xrealloc(NULL, sizeof *m);
    memset(m, 0, sizeof *m);
    m->p = *p;
    m->full = model_capacity(p);
    m->burst = m->full;
    m->prec = p->precision > 0 ? p->precision : SL_DEFAULT_PRECISION;
    m->g = p->window_ms / m->prec;
    if (p->algo == SL_SLIDING_BUCKETS && (m->g < 1 || m->g * m->prec != p->window_ms))
        model_fail(m, "window not divisible by precision", p->window_ms, m->prec);
    return m;
}

void model_free(model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->nkeys; i++) {
        free(m->keys[i].key);
        free(m->keys[i].h);
    }
    free(m->keys);
    free(m);
}

const char *model_error(const model *m) { return m->err[0] ? m->err : NULL; }

static mkey *find_key(const model *m, const void *key, size_t klen)
{
    for (size_t i = 0; i < m->nkeys; i++)
        if (m->keys[i].klen == klen && memcmp(m->keys[i].key, key, klen) == 0)
            return &m->keys[i];
    return NULL;
}

static mkey *get_key(model *m, const void *key, size_t klen)
{
    mkey *k = find_key(m, key, klen);
    if (k != NULL)
        return k;
    if (m->nkeys == m->capkeys) {
        m->capkeys = m->capkeys ? 2 * m->capkeys : 8;
        m->keys = xrealloc(m->keys, m->capkeys * sizeof *m->keys);
    }
    k = &m->keys[m->nkeys++];
    memset(k, 0, sizeof *k);
    k->key = xrealloc(NULL, klen);
    memcpy(k->key, key, klen);
    k->klen = klen;
    return k;
}

static void push(mkey *k, entry e)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 64;
        k->h = xrealloc(k->h, k->cap * sizeof *k->h);
    }
    k->h[k->n++] = e;
}

/* ---- the buckets: replay the accepted history from the start ------------ */

/* tokens after dt ms more of refilling: min(B, q + dt * L/W), in 1/W units */
static u128 refill(const model *m, u128 q, int64_t dt)
{
    u128 cap = (u128)m->burst * (u128)m->p.window_ms;
    u128 v = q + (u128)dt * (u128)m->p.limit;
    return v < cap ? v : cap;
}

/* level after dt ms more of draining: max(0, q - dt * L/W), in 1/W units */
static u128 drain(const model *m, u128 q, int64_t dt)
{
    u128 out = (u128)dt * (u128)m->p.limit;
    return out >= q ? 0 : q - out;
}

static view build_view(model *m, const mkey *k)
{
    view v;
    memset(&v, 0, sizeof v);
    v.k = k;
    if (!is_bucket(m->p.algo))
        return v;
    u128 W = (u128)m->p.window_ms;
    u128 cap = (u128)m->burst * W;
    int leaky = m->p.algo == SL_LEAKY_BUCKET;
    v.q = leaky ? 0 : cap; /* a token bucket starts full, a queue empty */
    for (size_t i = 0; k != NULL && i < k->n; i++) {
        const entry *e = &k->h[i];
        if (!e->counted)
            continue;
        if (v.has) {
            if (e->t < v.last)
                model_fail(m, "history runs backwards", e->t, v.last);
            v.q = leaky ? drain(m, v.q, e->t - v.last) : refill(m, v.q, e->t - v.last);
        }
        v.has = 1;
        v.last = e->t;
        u128 c = (u128)e->cost * W;
        if (leaky) {
            v.q += c;
            if (v.q > cap)
                model_fail(m, "accepted request overfilled the queue", e->t, e->cost);
        } else {
            if (v.q < c)
                model_fail(m, "accepted request took missing tokens", e->t, e->cost);
            else
                v.q -= c;
        }
    }
    return v;
}

/* ---- the amount in use at time T --------------------------------------- */

/* What allow() compares, at time T >= every t in the history:
 *   window algorithms: the counted cost that weighs on a request at T
 *     (sliding-window: n + floor(p * (W - e) / W));
 *   token-bucket/gcra: tokens(T) in 1/W units;
 *   leaky-bucket: level(T) in 1/W units.
 * The history is sorted by time, so each window scan walks back from the
 * newest entry and stops at the first one too old to count. */
static u128 amount(model *m, const view *v, int64_t T)
{
    const mkey *k = v->k;
    const int64_t W = m->p.window_ms;
    size_t n = k != NULL ? k->n : 0;

    switch (m->p.algo) {
    case SL_FIXED_WINDOW: {
        int64_t i = fdiv(T, W);
        u128 sum = 0;
        for (size_t j = n; j-- > 0;) {
            if (fdiv(k->h[j].t, W) < i)
                break;
            if (k->h[j].counted)
                sum += (u128)k->h[j].cost;
        }
        return sum;
    }
    case SL_SLIDING_LOG: {
        u128 sum = 0;
        for (size_t j = n; j-- > 0;) {
            if (k->h[j].t <= T - W) /* counts while t_j > T - W */
                break;
            if (k->h[j].counted)
                sum += (u128)k->h[j].cost;
        }
        return sum;
    }
    case SL_SLIDING_WINDOW: {
        int64_t i = fdiv(T, W);
        int64_t e = T - i * W;
        u128 cur = 0, prev = 0;
        for (size_t j = n; j-- > 0;) {
            int64_t ij = fdiv(k->h[j].t, W);
            if (ij < i - 1)
                break;
            if (!k->h[j].counted)
                continue;
            if (ij == i)
                cur += (u128)k->h[j].cost;
            else
                prev += (u128)k->h[j].cost;
        }
        return cur + prev * (u128)(W - e) / (u128)W;
    }
    case SL_SLIDING_BUCKETS: {
        int64_t b = fdiv(T, m->g);
        u128 sum = 0;
        for (size_t j = n; j-- > 0;) {
            if (fdiv(k->h[j].t, m->g) < b - m->prec + 1)
                break;
            if (k->h[j].counted)
                sum += (u128)k->h[j].cost;
        }
        return sum;
    }
    case SL_TOKEN_BUCKET:
    case SL_GCRA:
        if (!v->has)
            return (u128)m->burst * (u128)W;
        if (T < v->last)
            model_fail(m, "asked before the last request", T, v->last);
        return refill(m, v->q, T - v->last);
    case SL_LEAKY_BUCKET:
        if (!v->has)
            return 0;
        if (T < v->last)
            model_fail(m, "asked before the last request", T, v->last);
        return drain(m, v->q, T - v->last);
    default:
        model_fail(m, "unknown algorithm", (int64_t)m->p.algo, 0);
        return 0;
    }
}

/* Would a request of cost c pass, given the amount q from amount()? */
static int fits(const model *m, u128 q, int64_t c)
{
    u128 W = (u128)m->p.window_ms;
    switch (m->p.algo) {
    case SL_TOKEN_BUCKET:
    case SL_GCRA:
        return q >= (u128)c * W;                            /* tokens >= c */
    case SL_LEAKY_BUCKET:
        return q + (u128)c * W <= (u128)m->burst * W;       /* level + c <= B */
    default:
        return q + (u128)c <= (u128)m->p.limit;             /* used + c <= L */
    }
}

static int allow(model *m, const view *v, int64_t T, int64_t c)
{
    return fits(m, amount(m, v, T), c);
}

/* ---- searches ----------------------------------------------------------- */

enum pred { P_ALLOW, P_DRAINED };

/* pred(d): P_ALLOW: allow(T + d, c); P_DRAINED: amount(T + d) == 0 (the
 * leaky queue is empty).  Both are monotone in d: no arrivals, windows only
 * forget, buckets only refill or drain. */
static int pred(model *m, const view *v, enum pred kind, int64_t T, int64_t c, int64_t d)
{
    if (T > 0 && d > INT64_MAX - T) {
        model_fail(m, "search ran past the end of time", T, d);
        return 1;
    }
    if (kind == P_DRAINED)
        return amount(m, v, T + d) == 0;
    return allow(m, v, T + d, c);
}

/* The smallest d in [lo, SEARCH_MAX] with pred(d); -1 (and a model error)
 * if there is none.  Exponential search for a true point, then bisection
 * between the last false point and it.  O(62 * 2) evaluations. */
static int64_t search_min(model *m, const view *v, enum pred kind, int64_t T,
                          int64_t c, int64_t lo)
{
    if (pred(m, v, kind, T, c, lo))
        return lo;
    int64_t bad = lo, hi, step = 1;
    for (;;) {
        hi = lo + step;
        if (pred(m, v, kind, T, c, hi))
            break;
        bad = hi;
        if (step > SEARCH_MAX / 2) {
            model_fail(m, "search found no wait", T, c);
            return -1;
        }
        step *= 2;
    }
    while (hi - bad > 1) { /* pred(bad) false, pred(hi) true */
        int64_t mid = bad + (hi - bad) / 2;
        if (pred(m, v, kind, T, c, mid))
            hi = mid;
        else
            bad = mid;
    }
    if (hi > lo && pred(m, v, kind, T, c, hi - 1))
        model_fail(m, "search answer is not the smallest", T, hi);
    return hi;
}

/* The largest n in [0, capacity] that fits amount q; 0 if none does. */
static int64_t largest_fit(const model *m, u128 q)
{
    if (!fits(m, q, 0))
        return 0;
    int64_t good = 0, bad = m->full + 1; /* no cost above the capacity fits */
    while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        if (fits(m, q, mid))
            good = mid;
        else
            bad = mid;
    }
    return good;
}

/* ---- decisions ---------------------------------------------------------- */

static void decide(model *m, const void *key, size_t klen, int64_t t,
                   int64_t cost, int commit, sl_result *out)
{
    mkey *k = get_key(m, key, klen);
    int64_t T = t;
    if (k->n > 0 && k->h[k->n - 1].t > T)
        T = k->h[k->n - 1].t;

    memset(out, 0, sizeof *out);
    out->limit = m->full;

    view before = build_view(m, k);
    int ok = allow(m, &before, T, cost);
    out->allowed = ok;
    if (ok && m->p.algo == SL_LEAKY_BUCKET)
        out->delay_ms = search_min(m, &before, P_DRAINED, T, 0, 0);

    entry e = {T, cost, ok || (m->p.algo == SL_SLIDING_LOG && m->p.log_rejected)};
    push(k, e);

    view after = build_view(m, k);
    out->remaining = largest_fit(m, amount(m, &after, T));
    if (ok)
        out->retry_after_ms = 0;
    else if (cost > m->full)
        out->retry_after_ms = -1;
    else
        out->retry_after_ms = search_min(m, &after, P_ALLOW, T, cost, 1);
    out->reset_after_ms = search_min(m, &after, P_ALLOW, T, m->full, 0);

    if (!commit)
        k->n--;
}

void model_decide(model *m, const void *key, size_t klen, int64_t t,
                  int64_t cost, sl_result *out)
{
    decide(m, key, klen, t, cost, 1, out);
}

void model_peek(model *m, const void *key, size_t klen, int64_t t,
                int64_t cost, sl_result *out)
{
    decide(m, key, klen, t, cost, 0, out);
}

int64_t model_effective_time(const model *m, const void *key, size_t klen, int64_t t)
{
    const mkey *k = find_key(m, key, klen);
    if (k != NULL && k->n > 0 && k->h[k->n - 1].t > t)
        return k->h[k->n - 1].t;
    return t;
}

size_t model_history_len(const model *m, const void *key, size_t klen)
{
    const mkey *k = find_key(m, key, klen);
    return k != NULL ? k->n : 0;
}
