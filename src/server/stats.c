/*
 * stats.c -- sluiced's statistics (stats.h).
 *
 * The rule table is open addressing on the name's FNV-1a hash, grown by
 * doubling at half full, under s->mu; counters are reached through the
 * pointer bound on each limit, so deciding never takes the lock.
 */
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "stats.h"

static const int64_t lat_bounds_us[SL_STATS_LAT_NBOUNDS] = SL_STATS_LAT_BOUNDS_US;

int sl_stats_init(sl_stats *s, int nworkers)
{
    memset(s, 0, sizeof *s);
    if (nworkers < 1) nworkers = 1;
    s->workers = calloc((size_t)nworkers, sizeof *s->workers);
    if (s->workers == NULL) return -1;
    s->nworkers = nworkers;
    pthread_mutex_init(&s->mu, NULL);
    return 0;
}

void sl_stats_free(sl_stats *s)
{
    if (s->workers == NULL) return;
    for (size_t i = 0; i < s->cap; i++) free(s->rules[i]);
    free(s->rules);
    free(s->workers);
    pthread_mutex_destroy(&s->mu);
    memset(s, 0, sizeof *s);
}

static uint64_t fnv(const char *p)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h;
}

/* The slot of name (its entry, or the empty slot where it goes).  Under mu. */
static size_t find(const sl_stats *s, const char *name)
{
    size_t m = s->cap - 1, i = (size_t)fnv(name) & m;
    while (s->rules[i] != NULL && strcmp(s->rules[i]->name, name) != 0) i = (i + 1) & m;
    return i;
}

static int grow(sl_stats *s)
{
    size_t cap = s->cap ? s->cap * 2 : 64;
    sl_rule_stats **old = s->rules;
    size_t ocap = s->cap;
    s->rules = calloc(cap, sizeof *s->rules);
    if (s->rules == NULL) {
        s->rules = old;
        return -1;
    }
    s->cap = cap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i] != NULL) s->rules[find(s, old[i]->name)] = old[i];
    free(old);
    return 0;
}

/* The entry for name, created if new; NULL when full or out of memory. */
static sl_rule_stats *entry(sl_stats *s, const char *name)
{
    if (s->cap == 0 && grow(s) != 0) return NULL;
    size_t i = find(s, name);
    if (s->rules[i] != NULL) return s->rules[i];
    if (s->nrules >= SL_STATS_MAX_RULES) return NULL;
    if ((s->nrules + 1) * 2 > s->cap) {
        if (grow(s) != 0) return NULL;
        i = find(s, name);
    }
    size_t n = strlen(name);
    sl_rule_stats *e = calloc(1, sizeof *e + n + 1);
    if (e == NULL) return NULL;
    memcpy(e->name, name, n + 1);
    s->rules[i] = e;
    s->nrules++;
    return e;
}

static int bind_node(const sl_rule_node *node, void *arg)
{
    sl_stats *s = arg;
    for (int j = 0; j < node->nlimits; j++) {
        /* the set is still being built (not serving yet): this is its one
         * late write, so the const of a loaded set is cast away here only */
        sl_rule_limit *l = (sl_rule_limit *)&node->limits[j];
        l->stats = entry(s, l->name);
        if (l->stats == NULL) atomic_fetch_add_explicit(&s->untracked, 1, memory_order_relaxed);
    }
    return 0;
}

void sl_stats_bind(sl_stats *s, sl_rules *r)
{
    pthread_mutex_lock(&s->mu);
    sl_rules_foreach(r, bind_node, s);
    pthread_mutex_unlock(&s->mu);
}

void sl_stats_on_rules_load(void *arg, sl_rules *r)
{
    sl_stats *s = arg;
    if (r == NULL) {
        atomic_fetch_add(&s->reloads_failed, 1);
        return;
    }
    sl_stats_bind(s, r);
    atomic_fetch_add(&s->reloads_ok, 1);
}

void sl_stats_foreach_rule(sl_stats *s, void (*fn)(const sl_rule_stats *rs, void *arg), void *arg)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->cap; i++)
        if (s->rules[i] != NULL) fn(s->rules[i], arg);
    pthread_mutex_unlock(&s->mu);
}

void sl_stats_latency(sl_worker_stats *w, int64_t ns)
{
    int b = 0;
    while (b < SL_STATS_LAT_NBOUNDS && ns > lat_bounds_us[b] * 1000) b++;
    sl_stat_inc(&w->lat[b], 1);
    sl_stat_inc(&w->lat_sum_ns, ns > 0 ? (uint64_t)ns : 0);
}

void sl_stats_sum_get(const sl_stats *s, sl_stats_sum *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < s->nworkers; i++) {
        sl_worker_stats *w = &s->workers[i];
        out->commands += sl_stat_get(&w->commands);
        out->errors += sl_stat_get(&w->errors);
        out->protocol_errors += sl_stat_get(&w->protocol_errors);
        out->net_in += sl_stat_get(&w->net_in);
        out->net_out += sl_stat_get(&w->net_out);
        out->checks += sl_stat_get(&w->checks);
        out->checks_denied += sl_stat_get(&w->checks_denied);
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            out->decisions[a] += sl_stat_get(&w->decisions[a]);
            out->allowed[a] += sl_stat_get(&w->allowed[a]);
            out->denied[a] += sl_stat_get(&w->denied[a]);
        }
        for (int b = 0; b <= SL_STATS_LAT_NBOUNDS; b++) {
            uint64_t v = sl_stat_get(&w->lat[b]);
            out->lat[b] += v;
            out->lat_count += v;
        }
        out->lat_sum_ns += sl_stat_get(&w->lat_sum_ns);
    }
}
