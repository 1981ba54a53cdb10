/*
 * history.c -- the recent past for the status page (history.h).
 *
 * Series.  Every rule's counters are cumulative (stats.h); a sample takes
 * each one's difference from the previous sample (kept in `seen`, open
 * addressing on the entry's address: entries live until exit) and adds it
 * to the rule's series, if it has one, at the sample's second.  Invariant:
 * series[i].total is the sum of allowed + denied + shadow over its ring
 * (elastic is part of allowed), so the quietest series is found in
 * O(SL_HISTORY_RULES) and a second leaving the ring subtracts its own.
 *
 * Every decision.  The same, for one pair of totals (every front's
 * allowed and denied, stats.h) into one ring of its own, kept whatever
 * the rules: all_seen holds the totals at the previous sample.
 *
 * Sketches.  Space-saving: a key already held counts one more; a new key
 * takes a free slot, or the slot of the smallest count, inheriting that
 * count (its `err`): every count is then at most err above the truth, and
 * a key denied more often than the smallest count is always held.  Merging
 * sums a key's counts (and errs) over generations and workers.
 */
#include <stdlib.h>
#include <string.h>

#include "history.h"

struct seen_slot {
    const sl_rule_stats *rs; /* NULL: empty */
    uint64_t c[SL_HIST_NCOUNTS];
    int series; /* its series, or -1 */
};

struct sl_history_seen {
    size_t cap, n; /* cap a power of two, n < cap / 2 */
    struct seen_slot slot[];
};

sl_history *sl_history_new(int nworkers)
{
    if (nworkers < 1) nworkers = 1;
    sl_history *h = calloc(1, sizeof *h);
    if (h == NULL) return NULL;
    h->topk = calloc((size_t)nworkers, sizeof *h->topk);
    if (h->topk == NULL) {
        free(h);
        return NULL;
    }
    h->nworkers = nworkers;
    h->last_sec = -1;
    h->rotated_sec = -1;
    h->first_sec = -1;
    pthread_mutex_init(&h->mu, NULL);
    for (int i = 0; i < nworkers; i++) pthread_mutex_init(&h->topk[i].mu, NULL);
    return h;
}

void sl_history_free(sl_history *h)
{
    if (h == NULL) return;
    for (int i = 0; i < h->nworkers; i++) pthread_mutex_destroy(&h->topk[i].mu);
    pthread_mutex_destroy(&h->mu);
    free(h->seen);
    free(h->topk);
    free(h);
}

/* ---- series ---------------------------------------------------------------- */

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* rs's slot in s (or the empty one where it goes). */
static struct seen_slot *seen_find(struct sl_history_seen *s, const sl_rule_stats *rs)
{
    size_t m = s->cap - 1, i = ptr_hash(rs) & m;
    while (s->slot[i].rs != NULL && s->slot[i].rs != rs) i = (i + 1) & m;
    return &s->slot[i];
}

/* rs's slot, made (counts 0, no series) if new; NULL when out of memory. */
static struct seen_slot *seen_get(sl_history *h, const sl_rule_stats *rs)
{
    struct sl_history_seen *s = h->seen;
    if (s == NULL || (s->n + 1) * 2 > s->cap) {
        size_t cap = s ? s->cap * 2 : 64;
        struct sl_history_seen *ns = calloc(1, sizeof *ns + cap * sizeof ns->slot[0]);
        if (ns == NULL) return NULL;
        ns->cap = cap;
        for (size_t i = 0; s != NULL && i < s->cap; i++)
            if (s->slot[i].rs != NULL) *seen_find(ns, s->slot[i].rs) = s->slot[i];
        ns->n = s ? s->n : 0;
        free(s);
        h->seen = s = ns;
    }
    struct seen_slot *e = seen_find(s, rs);
    if (e->rs == NULL) {
        memset(e, 0, sizeof *e);
        e->rs = rs;
        e->series = -1;
        s->n++;
    }
    return e;
}

static uint64_t traffic(const uint32_t *n)
{
    return (uint64_t)n[SL_HIST_ALLOWED] + n[SL_HIST_DENIED] + n[SL_HIST_SHADOW];
}

/* Second t leaves every ring: its counts are zeroed. */
static void clear_second(sl_history *h, int64_t t)
{
    for (int i = 0; i < SL_HISTORY_RULES; i++) {
        uint32_t *n = h->series[i].n[t % SL_HISTORY_SECONDS];
        h->series[i].total -= traffic(n);
        memset(n, 0, sizeof h->series[i].n[0]);
    }
    memset(h->all[t % SL_HISTORY_SECONDS], 0, sizeof h->all[0]);
}

static void rotate(sl_history *h, int both)
{
    for (int w = 0; w < h->nworkers; w++) {
        sl_topk *k = &h->topk[w];
        pthread_mutex_lock(&k->mu);
        if (both)
            k->prev.n = 0;
        else
            k->prev = k->cur;
        k->cur.n = 0;
        pthread_mutex_unlock(&k->mu);
    }
}

void sl_history_begin(sl_history *h, int64_t now_ms)
{
    pthread_mutex_lock(&h->mu);
    int64_t sec = now_ms / 1000 - 1;
    if (sec < 0) sec = 0;
    if (h->last_sec >= 0 && sec <= h->last_sec) {
        sec = h->last_sec; /* early, or the clock held still: same second */
    } else if (h->last_sec >= 0) {
        int64_t from = h->last_sec + 1;
        if (sec - from >= SL_HISTORY_SECONDS) from = sec - SL_HISTORY_SECONDS + 1;
        for (int64_t t = from; t <= sec; t++) clear_second(h, t);
    }
    h->last_sec = h->sample_sec = sec;
    if (h->first_sec < 0) h->first_sec = sec;
    if (h->rotated_sec < 0) {
        h->rotated_sec = sec;
    } else if (sec - h->rotated_sec >= SL_HISTORY_TOPK_PERIOD_S) {
        rotate(h, sec - h->rotated_sec >= 2 * SL_HISTORY_TOPK_PERIOD_S);
        h->rotated_sec = sec;
    }
}

/* The series a rule that was quiet until now, with t decisions this
 * second, should take: a free one, or the quietest if t is more than it
 * saw over its whole ring; -1: none. */
static int series_for(sl_history *h, uint64_t t)
{
    int q = -1;
    for (int i = 0; i < SL_HISTORY_RULES; i++) {
        if (h->series[i].rs == NULL) return i;
        if (q < 0 || h->series[i].total < h->series[q].total) q = i;
    }
    return t > h->series[q].total ? q : -1;
}

void sl_history_observe(sl_history *h, const sl_rule_stats *rs)
{
    struct seen_slot *e = seen_get(h, rs);
    if (e == NULL) return; /* out of memory: this rule is not shown */
    uint64_t now[SL_HIST_NCOUNTS] = {
        atomic_load_explicit(&rs->allowed, memory_order_relaxed),
        atomic_load_explicit(&rs->denied, memory_order_relaxed),
        atomic_load_explicit(&rs->shadow, memory_order_relaxed),
        atomic_load_explicit(&rs->elastic, memory_order_relaxed),
    };
    uint32_t d[SL_HIST_NCOUNTS];
    for (int c = 0; c < SL_HIST_NCOUNTS; c++) {
        uint64_t x = now[c] >= e->c[c] ? now[c] - e->c[c] : 0;
        d[c] = x > UINT32_MAX ? UINT32_MAX : (uint32_t)x;
        e->c[c] = now[c];
    }
    uint64_t t = traffic(d);
    if (t == 0) return;
    if (e->series < 0) {
        int i = series_for(h, t);
        if (i < 0) return;
        sl_history_series *sr = &h->series[i];
        if (sr->rs != NULL) seen_find(h->seen, sr->rs)->series = -1; /* evicted */
        memset(sr, 0, sizeof *sr);
        sr->rs = rs;
        e->series = i;
    }
    sl_history_series *sr = &h->series[e->series];
    uint32_t *n = sr->n[h->sample_sec % SL_HISTORY_SECONDS];
    for (int c = 0; c < SL_HIST_NCOUNTS; c++)
        n[c] = UINT32_MAX - n[c] < d[c] ? UINT32_MAX : n[c] + d[c];
    sr->total += t;
}

void sl_history_end(sl_history *h) { pthread_mutex_unlock(&h->mu); }

void sl_history_observe_all(sl_history *h, uint64_t allowed, uint64_t denied)
{
    uint64_t now[2] = {allowed, denied};
    uint32_t *n = h->all[h->sample_sec % SL_HISTORY_SECONDS];
    for (int c = 0; c < 2; c++) {
        if (now[c] <= h->all_seen[c]) continue; /* counters only grow: nothing new */
        uint64_t d = now[c] - h->all_seen[c];
        h->all_seen[c] = now[c];
        n[c] = UINT32_MAX - n[c] < d ? UINT32_MAX : n[c] + (uint32_t)d;
    }
}

static void observe_cb(const sl_rule_stats *rs, void *arg) { sl_history_observe(arg, rs); }

void sl_history_sample(sl_history *h, sl_stats *s, int64_t now_ms)
{
    sl_history_begin(h, now_ms);
    sl_stats_foreach_rule(s, observe_cb, h);
    /* every front's decisions, read under the lock (so two samplers never
     * see the totals in one order and record them in the other): one pass
     * over the workers' shards */
    uint64_t allowed = 0, denied = 0;
    for (int w = 0; w < s->nworkers; w++)
        for (int f = 0; f < SL_FRONTS; f++) {
            allowed += sl_stat_get(&s->workers[w].front_allowed[f]);
            denied += sl_stat_get(&s->workers[w].front_denied[f]);
        }
    sl_history_observe_all(h, allowed, denied);
    sl_history_end(h);
}

int64_t sl_history_all(sl_history *h, uint32_t out[SL_HISTORY_SECONDS][2], int64_t *first_sec)
{
    pthread_mutex_lock(&h->mu);
    int64_t last = h->last_sec;
    *first_sec = h->first_sec;
    for (int i = 0; i < SL_HISTORY_SECONDS; i++) {
        int64_t t = last - SL_HISTORY_SECONDS + 1 + i;
        out[i][0] = out[i][1] = 0;
        if (last >= 0 && t >= 0) {
            out[i][0] = h->all[t % SL_HISTORY_SECONDS][0];
            out[i][1] = h->all[t % SL_HISTORY_SECONDS][1];
        }
    }
    pthread_mutex_unlock(&h->mu);
    return last;
}

static int by_total(const void *a, const void *b)
{
    const sl_history_series *x = *(const sl_history_series *const *)a;
    const sl_history_series *y = *(const sl_history_series *const *)b;
    if (x->total != y->total) return x->total > y->total ? -1 : 1;
    return strcmp(x->rs->name, y->rs->name);
}

int64_t sl_history_foreach(sl_history *h,
                           void (*fn)(const sl_history_series *sr, int64_t last_sec, void *arg),
                           void *arg)
{
    const sl_history_series *order[SL_HISTORY_RULES];
    int n = 0;
    pthread_mutex_lock(&h->mu);
    int64_t last = h->last_sec;
    for (int i = 0; i < SL_HISTORY_RULES; i++)
        if (h->series[i].rs != NULL) order[n++] = &h->series[i];
    qsort(order, (size_t)n, sizeof order[0], by_total);
    for (int i = 0; last >= 0 && i < n; i++) fn(order[i], last, arg);
    pthread_mutex_unlock(&h->mu);
    return last;
}

/* ---- the most-limited keys ------------------------------------------------- */

static uint64_t key_hash(const char *p, size_t n)
{
    uint64_t x = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) x = (x ^ (unsigned char)p[i]) * 1099511628211ULL;
    return x ^ n;
}

static int same_key(const sl_topk_entry *e, uint64_t hash, const char *key, size_t len, int cut)
{
    size_t kept = cut ? SL_HISTORY_KEY_MAX : len;
    return e->hash == hash && e->cut == cut && e->len == kept && memcmp(e->key, key, kept) == 0;
}

void sl_history_denied(sl_history *h, int w, const char *key, size_t len)
{
    if (h == NULL || w < 0 || w >= h->nworkers) return;
    uint64_t hash = key_hash(key, len);
    int cut = len > SL_HISTORY_KEY_MAX;
    sl_topk *k = &h->topk[w];
    pthread_mutex_lock(&k->mu);
    sl_topk_gen *g = &k->cur;
    int min = -1;
    for (int i = 0; i < g->n; i++) {
        if (same_key(&g->e[i], hash, key, len, cut)) {
            g->e[i].count++;
            pthread_mutex_unlock(&k->mu);
            return;
        }
        if (min < 0 || g->e[i].count < g->e[min].count) min = i;
    }
    sl_topk_entry *e;
    uint64_t base = 0;
    if (g->n < SL_HISTORY_TOPK) {
        e = &g->e[g->n++];
    } else {
        e = &g->e[min];
        base = e->count;
    }
    e->hash = hash;
    e->count = base + 1;
    e->err = base;
    e->cut = (uint8_t)cut;
    e->len = (uint16_t)(cut ? SL_HISTORY_KEY_MAX : len);
    memcpy(e->key, key, e->len);
    pthread_mutex_unlock(&k->mu);
}

static int by_count(const void *a, const void *b)
{
    const sl_history_top *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, n);
    if (c != 0) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

int sl_history_top_keys(sl_history *h, sl_history_top *out, int max)
{
    size_t cap = (size_t)h->nworkers * 2 * SL_HISTORY_TOPK, icap = 1;
    while (icap < 2 * cap) icap *= 2;
    sl_history_top *all = malloc(cap * sizeof *all);
    uint64_t *hashes = malloc(cap * sizeof *hashes);
    int *index = malloc(icap * sizeof *index); /* open addressing: entry of a hash, or -1 */
    sl_topk_gen *g = malloc(sizeof *g);
    int n = 0;
    if (all == NULL || hashes == NULL || index == NULL || g == NULL) goto done;
    memset(index, 0xff, icap * sizeof *index);
    for (int w = 0; w < h->nworkers; w++) {
        for (int gen = 0; gen < 2; gen++) {
            pthread_mutex_lock(&h->topk[w].mu);
            *g = gen ? h->topk[w].prev : h->topk[w].cur;
            pthread_mutex_unlock(&h->topk[w].mu);
            for (int i = 0; i < g->n; i++) {
                const sl_topk_entry *e = &g->e[i];
                size_t s = (size_t)e->hash & (icap - 1);
                int j;
                while ((j = index[s]) >= 0 &&
                       !(hashes[j] == e->hash && all[j].cut == e->cut && all[j].len == e->len &&
                         memcmp(all[j].key, e->key, e->len) == 0))
                    s = (s + 1) & (icap - 1);
                if (j < 0) {
                    j = index[s] = n++;
                    hashes[j] = e->hash;
                    all[j].count = all[j].err = 0;
                    all[j].len = e->len;
                    all[j].cut = e->cut;
                    memcpy(all[j].key, e->key, e->len);
                }
                all[j].count += e->count;
                all[j].err += e->err;
            }
        }
    }
    qsort(all, (size_t)n, sizeof *all, by_count);
    if (n > max) n = max;
    if (n > 0) memcpy(out, all, (size_t)n * sizeof *all);
done:
    free(all);
    free(hashes);
    free(index);
    free(g);
    return n;
}
