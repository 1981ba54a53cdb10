/*
 * stats.c -- sluiced's statistics (stats.h).
 *
 * The rule table is open addressing on the name's FNV-1a hash, grown by
 * doubling at half full, under s->mu; counters are reached through the
 * pointer bound on each limit, so deciding never takes the lock.
 *
 * A rule's per-value names (detailed_metric, value_to_metric) hang from its
 * entry in a small table of their own (struct sl_stats_values), open
 * addressing too, that workers read without a lock: a slot goes once from
 * NULL to an entry (a release store, after the entry is whole), and a
 * table that fills past half is replaced by a copy twice its size,
 * published the same way; the old one stays readable (s->retired) until
 * the server exits.  So a name the rule already has costs a hash and a
 * probe; only a new name -- at most SL_STATS_MAX_VALUES per rule, ever --
 * takes s->mu, and a rule at its cap takes it no more (the count of names,
 * published after each name, says so).  The entries themselves are the
 * rule table's, by name.
 *
 * A limit override's names (envoyproxy/ratelimit's descriptorKey) are the
 * same per-value names, hung from an entry per domain; the domains'
 * entries are themselves found as per-value names of s->domains, an entry
 * kept out of the table, so an override with a known name costs two such
 * lookups and no lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rules.h"
#include "stats.h"

const char *const sl_front_names[SL_FRONTS] = {"resp", "http", "grpc"};

static const int64_t lat_bounds_us[SL_STATS_LAT_NBOUNDS] = SL_STATS_LAT_BOUNDS_US;

struct sl_stats_values {
    struct sl_stats_values *retired; /* next in sl_stats.retired, once outgrown */
    size_t cap;                      /* slots, a power of two */
    _Atomic(sl_rule_stats *) slot[];
};

int sl_stats_init(sl_stats *s, int nworkers)
{
    memset(s, 0, sizeof *s);
    if (nworkers < 1) nworkers = 1;
    s->workers = calloc((size_t)nworkers, sizeof *s->workers);
    if (s->workers == NULL) return -1;
    s->domains = calloc(1, sizeof *s->domains + 1); /* named "" */
    if (s->domains == NULL) {
        free(s->workers);
        s->workers = NULL;
        return -1;
    }
    s->nworkers = nworkers;
    pthread_mutex_init(&s->mu, NULL);
    return 0;
}

void sl_stats_free(sl_stats *s)
{
    if (s->workers == NULL) return;
    for (size_t i = 0; i < s->cap; i++) {
        if (s->rules[i] == NULL) continue;
        free(atomic_load_explicit(&s->rules[i]->values, memory_order_relaxed));
        free(s->rules[i]);
    }
    while (s->retired != NULL) {
        struct sl_stats_values *v = s->retired;
        s->retired = v->retired;
        free(v);
    }
    free(atomic_load_explicit(&s->domains->values, memory_order_relaxed));
    free(s->domains); /* its names are the table's entries, freed above */
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

/* The slot of name, of hash h (its entry, or the empty slot where it
 * goes).  Under mu. */
static size_t find(const sl_stats *s, const char *name, uint64_t h)
{
    size_t m = s->cap - 1, i = (size_t)h & m;
    while (s->rules[i] != NULL && (s->rules[i]->hash != h || strcmp(s->rules[i]->name, name) != 0))
        i = (i + 1) & m;
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
        if (old[i] != NULL) s->rules[find(s, old[i]->name, old[i]->hash)] = old[i];
    free(old);
    return 0;
}

/* The entry for name, created if new; NULL when full or out of memory. */
static sl_rule_stats *entry(sl_stats *s, const char *name)
{
    if (s->cap == 0 && grow(s) != 0) return NULL;
    uint64_t h = fnv(name);
    size_t i = find(s, name, h);
    if (s->rules[i] != NULL) return s->rules[i];
    if (s->nrules >= SL_STATS_MAX_RULES) return NULL;
    if ((s->nrules + 1) * 2 > s->cap) {
        if (grow(s) != 0) return NULL;
        i = find(s, name, h);
    }
    size_t n = strlen(name);
    sl_rule_stats *e = calloc(1, sizeof *e + n + 1);
    if (e == NULL) return NULL;
    e->hash = h;
    memcpy(e->name, name, n + 1);
    s->rules[i] = e;
    s->nrules++;
    return e;
}

/* The entry of limit j of node, by its statistics name (stats.h): the
 * node's path, "#N" after it on a node of several -- what the limit's
 * derived name is, whether or not the file gave it a `name:`.  Under mu. */
static sl_rule_stats *limit_entry(sl_stats *s, const sl_rule_node *node, int j)
{
    const sl_rule_limit *l = &node->limits[j];
    if (!l->named) return entry(s, l->name); /* derived: the path, or path#N */
    if (node->nlimits == 1) return entry(s, node->path);
    size_t n = strlen(node->path) + 16;
    char *name = malloc(n);
    if (name == NULL) return NULL;
    snprintf(name, n, "%s#%d", node->path, j + 1);
    sl_rule_stats *e = entry(s, name);
    free(name);
    return e;
}

static int bind_node(const sl_rule_node *node, void *arg)
{
    sl_stats *s = arg;
    for (int j = 0; j < node->nlimits; j++) {
        /* the set is still being built (not serving yet): this is its one
         * late write, so the const of a loaded set is cast away here only */
        sl_rule_limit *l = (sl_rule_limit *)&node->limits[j];
        l->stats = limit_entry(s, node, j);
        if (l->stats == NULL)
            atomic_fetch_add_explicit(&s->untracked, 1, memory_order_relaxed);
        else if (node->metric_dynamic)
            l->stats->per_value = 1;
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

/* ---- per-value names ------------------------------------------------------ */

/* The entry named name (hash h) in table v, or NULL.  Without a lock: a
 * slot read as NULL ends the probe, and one read as an entry (acquire)
 * shows that entry whole. */
static sl_rule_stats *values_find(const struct sl_stats_values *v, const char *name, uint64_t h)
{
    if (v == NULL) return NULL;
    size_t m = v->cap - 1;
    for (size_t i = (size_t)h & m;; i = (i + 1) & m) {
        sl_rule_stats *e = atomic_load_explicit(&v->slot[i], memory_order_acquire);
        if (e == NULL) return NULL;
        if (e->hash == h && strcmp(e->name, name) == 0) return e;
    }
}

static void values_put(struct sl_stats_values *v, sl_rule_stats *e)
{
    size_t m = v->cap - 1, i = (size_t)e->hash & m;
    while (atomic_load_explicit(&v->slot[i], memory_order_relaxed) != NULL) i = (i + 1) & m;
    atomic_store_explicit(&v->slot[i], e, memory_order_release);
}

/* Adds e to rs's names, replacing the table by one twice its size past
 * half full (the old one retired, still readable).  Under mu.  Returns 0,
 * or -1 when out of memory. */
static int values_add(sl_stats *s, sl_rule_stats *rs, sl_rule_stats *e)
{
    struct sl_stats_values *v = atomic_load_explicit(&rs->values, memory_order_relaxed);
    size_t n = atomic_load_explicit(&rs->nvalues, memory_order_relaxed);
    if (v == NULL || (n + 1) * 2 > v->cap) {
        size_t cap = v ? v->cap * 2 : 16;
        struct sl_stats_values *nv = calloc(1, sizeof *nv + cap * sizeof nv->slot[0]);
        if (nv == NULL) return -1;
        nv->cap = cap;
        for (size_t i = 0; v != NULL && i < v->cap; i++) {
            sl_rule_stats *o = atomic_load_explicit(&v->slot[i], memory_order_relaxed);
            if (o != NULL) values_put(nv, o);
        }
        atomic_store_explicit(&rs->values, nv, memory_order_release);
        if (v != NULL) {
            v->retired = s->retired;
            s->retired = v;
        }
        v = nv;
    }
    values_put(v, e);
    atomic_store_explicit(&rs->nvalues, n + 1, memory_order_release); /* after the name */
    return 0;
}

/* name (len bytes, any) as INFO writes it (stats.h), "#nth" after it when
 * nth > 0, into buf (SL_STATS_MAX_NAME + 1 bytes, NUL-terminated).
 * Returns 0, or -1 when that is longer than SL_STATS_MAX_NAME. */
static int escape_name(const char *name, size_t len, int nth, char *buf)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        int esc = c <= ' ' || c > '~' || c == '%' || c == ':' || c == ',';
        if (n + (esc ? 3 : 1) > SL_STATS_MAX_NAME) return -1;
        if (esc) {
            buf[n++] = '%';
            buf[n++] = hex[c >> 4];
            buf[n++] = hex[c & 15];
        } else {
            buf[n++] = (char)c;
        }
    }
    if (nth > 0) {
        int k = snprintf(buf + n, SL_STATS_MAX_NAME + 1 - n, "#%d", nth);
        if (k < 0 || n + (size_t)k > SL_STATS_MAX_NAME) return -1;
        n += (size_t)k;
    }
    buf[n] = '\0';
    return 0;
}

/* rs's per-value entry named buf (as INFO writes it), added if new and rs
 * has fewer than SL_STATS_MAX_VALUES; NULL when not tracked.  An entry it
 * creates gets per_value = mark (a domain's override entry: INFO shows its
 * values= and overflow=).  sl_stats_value_entry says the rest. */
static sl_rule_stats *value_lookup(sl_stats *s, sl_rule_stats *rs, const char *buf, int mark)
{
    uint64_t h = fnv(buf);
    sl_rule_stats *e = values_find(atomic_load_explicit(&rs->values, memory_order_acquire), buf, h);
    if (e != NULL) return e;
    /* full for good (names are never dropped): no lock for the requests
     * of a rule at its cap, whatever values they send.  Seeing the count
     * (acquire) shows every name added before it: look once more */
    if (atomic_load_explicit(&rs->nvalues, memory_order_acquire) >= SL_STATS_MAX_VALUES)
        return values_find(atomic_load_explicit(&rs->values, memory_order_acquire), buf, h);
    pthread_mutex_lock(&s->mu);
    /* again under the lock: another worker may have added it */
    e = values_find(atomic_load_explicit(&rs->values, memory_order_relaxed), buf, h);
    if (e == NULL &&
        atomic_load_explicit(&rs->nvalues, memory_order_relaxed) < SL_STATS_MAX_VALUES) {
        e = entry(s, buf);
        if (e != NULL && values_add(s, rs, e) != 0) e = NULL;
        if (e != NULL && mark) e->per_value = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return e;
}

sl_rule_stats *sl_stats_value_entry(sl_stats *s, sl_rule_stats *rs, const char *name, size_t len,
                                    int nth)
{
    char buf[SL_STATS_MAX_NAME + 1];
    if (escape_name(name, len, nth, buf) != 0) return NULL;
    if (strcmp(buf, rs->name) == 0) return rs; /* Lyft's name is the rule's own */
    return value_lookup(s, rs, buf, 0);
}

/* ---- limit overrides ------------------------------------------------------ */

/* descriptorKey(domain, d) as envoyproxy/ratelimit builds it into buf (cap
 * bytes): "domain." then the n entries joined by '.', each "key" or, with a
 * value, "key_value".  Returns the length, or -1 when it does not fit. */
static long override_name(const char *domain, size_t dlen, const sl_rule_entry *d, int n,
                          char *buf, size_t cap)
{
    size_t len = 0;
#define PUT(p, k)                                                                                  \
    do {                                                                                           \
        if ((k) > cap - len) return -1;                                                            \
        memcpy(buf + len, (p), (k));                                                               \
        len += (k);                                                                                \
    } while (0)
    PUT(domain, dlen);
    for (int i = 0; i < n; i++) {
        PUT(".", 1);
        PUT(d[i].key, d[i].keylen);
        if (d[i].valuelen > 0) {
            PUT("_", 1);
            PUT(d[i].value, d[i].valuelen);
        }
    }
#undef PUT
    return (long)len;
}

void sl_stats_override_entries(sl_stats *s, sl_check_plan *plan, const char *domain, size_t dlen,
                               const sl_rule_entry *const *descs, const int *ndesc)
{
    char buf[SL_STATS_MAX_NAME + 1], raw[SL_STATS_MAX_NAME];
    sl_rule_stats *dom = NULL; /* the domain's entry, found at the first override */
    for (int j = 0; j < plan->nitems; j++) {
        const sl_check_item *t = &plan->items[j];
        sl_rule_limit *over = &plan->over[t->desc];
        if (t->rl != over) continue; /* a rule's limit */
        if (dom == NULL) {
            if (escape_name(domain, dlen, 0, buf) != 0) return; /* a domain too long to name */
            dom = value_lookup(s, s->domains, buf, 1);
            if (dom == NULL) return; /* not tracked: none of them is */
        }
        long n = override_name(domain, dlen, descs[t->desc], ndesc[t->desc], raw, sizeof raw);
        sl_rule_stats *e = NULL;
        if (n >= 0 && escape_name(raw, (size_t)n, 0, buf) == 0) e = value_lookup(s, dom, buf, 0);
        if (e == NULL) atomic_fetch_add_explicit(&dom->overflow, 1, memory_order_relaxed);
        over->stats = e != NULL ? e : dom;
    }
}

void sl_stats_foreach_rule(sl_stats *s, void (*fn)(const sl_rule_stats *rs, void *arg), void *arg)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->cap; i++)
        if (s->rules[i] != NULL) fn(s->rules[i], arg);
    pthread_mutex_unlock(&s->mu);
}

size_t sl_stats_values_list(const sl_rule_stats *rs, const sl_rule_stats **out, size_t max)
{
    const struct sl_stats_values *v = atomic_load_explicit(
        (_Atomic(struct sl_stats_values *) *)&rs->values, memory_order_acquire);
    size_t n = 0;
    for (size_t i = 0; v != NULL && i < v->cap; i++) {
        sl_rule_stats *e = atomic_load_explicit((_Atomic(sl_rule_stats *) *)&v->slot[i],
                                                memory_order_acquire);
        if (e == NULL) continue;
        if (n < max) out[n] = e;
        n++;
    }
    return n;
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
        out->batched += sl_stat_get(&w->batched);
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            out->decisions[a] += sl_stat_get(&w->decisions[a]);
            out->allowed[a] += sl_stat_get(&w->allowed[a]);
            out->denied[a] += sl_stat_get(&w->denied[a]);
        }
        for (int f = 0; f < SL_FRONTS; f++) {
            out->front_allowed[f] += sl_stat_get(&w->front_allowed[f]);
            out->front_denied[f] += sl_stat_get(&w->front_denied[f]);
        }
        for (int b = 0; b <= SL_STATS_LAT_NBOUNDS; b++) {
            uint64_t v = sl_stat_get(&w->lat[b]);
            out->lat[b] += v;
            out->lat_count += v;
        }
        out->lat_sum_ns += sl_stat_get(&w->lat_sum_ns);
    }
}
