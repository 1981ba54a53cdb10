/*
 * holds.c -- the holds table (sluice.h, sl_holds): concurrency leases and
 * reservations, SPEC section 10.
 *
 * A table of SHARDS shards, each a mutex and a chained hash table of
 * groups.  A group is one key's entries of one kind (leases or
 * reservations), the key inline, and an array of entries kept in id order
 * (ids come from one counter, taken under the group's shard lock, so an
 * append keeps the order): release and settle find an id by binary search,
 * removal is a memmove.  The group keeps the earliest expiry of its
 * entries (min_exp), so a call finds nothing to reclaim in O(1) and
 * compacts the array only when something has expired: O(held) then, as a
 * removal is.  A group with no entries is freed.
 *
 * Invariants: every entry in a group has exp > the group's clock at its
 * last reclaim, or is removed at the next one; the table's bytes (groups,
 * entry arrays by capacity, slot arrays) never pass max_bytes: room is
 * taken (an atomic add, given back if over) before anything is allocated.
 *
 * Reclaiming: a group's own expired entries go whenever its key is used;
 * every insert also examines RECLAIM_STEP slots of its shard from a
 * rotating cursor; an insert that finds no room first sweeps its whole
 * shard (O(shard), on that path only), then is refused (SL_EFULL).
 * sl_holds_expire sweeps the rest for a caller with time to spare.
 *
 * A reservation is charged on the store (sl_decide) while its shard lock
 * is held, and settled (sl_charge) the same way, so a settle and the
 * reservation's expiry or a second settle cannot both act on it.  Lock
 * order: a holds shard, then the store's locks (the store never calls
 * here).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "siphash.h"
#include "sluice.h"

#define SHARDS       16
#define RECLAIM_STEP 2 /* slots examined at every insert */
#define MIN_SLOTS    16

enum { K_LEASE = 0, K_RESV = 1 };

typedef struct lease {
    uint64_t id;
    int64_t exp; /* ms: live while t < exp */
} lease;

typedef struct resv {
    uint64_t id;
    int64_t exp;      /* ms: at + the window; then settled at its estimate */
    int64_t at;       /* ms: when it was charged */
    int64_t estimate; /* charged at `at` */
    sl_params p;      /* the limit it was charged on */
} resv;

typedef struct group {
    struct group *next; /* the slot's chain */
    uint64_t hash;
    int64_t clock;   /* ms: latest time seen for the key (SPEC 4) */
    int64_t min_exp; /* earliest exp of the entries; INT64_MAX when none */
    uint32_t n, cap; /* entries, room (entries) */
    uint16_t klen;
    uint8_t kind; /* K_LEASE or K_RESV */
    void *ents;   /* lease[] or resv[], id order */
    uint8_t key[];
} group;

typedef struct shard {
    pthread_mutex_t mu;
    group **slot; /* nslots chains; guarded by mu, as everything below */
    size_t nslots, ngroups, cursor;
} shard;

struct sl_holds {
    shard sh[SHARDS];
    sl__sipkey sip;
    size_t max_bytes;         /* 0 = none */
    _Atomic uint64_t next_id; /* the last id given */
    _Atomic uint64_t bytes, leases, resvs, groups, expired, refused;
};

static size_t esz(int kind) { return kind == K_LEASE ? sizeof(lease) : sizeof(resv); }
static uint64_t ent_id(const group *g, size_t i)
{
    return g->kind == K_LEASE ? ((lease *)g->ents)[i].id : ((resv *)g->ents)[i].id;
}
static int64_t ent_exp(const group *g, size_t i)
{
    return g->kind == K_LEASE ? ((lease *)g->ents)[i].exp : ((resv *)g->ents)[i].exp;
}
static _Atomic uint64_t *count_of(sl_holds *h, int kind)
{
    return kind == K_LEASE ? &h->leases : &h->resvs;
}

/* ---- room ------------------------------------------------------------------ */

/* Takes `bytes` of room under the bound.  0, or -1 when it would pass it. */
static int room_take(sl_holds *h, size_t bytes)
{
    uint64_t was = atomic_fetch_add(&h->bytes, bytes);
    if (h->max_bytes && was + bytes > h->max_bytes) {
        atomic_fetch_sub(&h->bytes, bytes);
        return -1;
    }
    return 0;
}

static void room_give(sl_holds *h, size_t bytes) { atomic_fetch_sub(&h->bytes, bytes); }

static size_t group_bytes(const group *g)
{
    return sizeof *g + g->klen + (size_t)g->cap * esz(g->kind);
}

/* ---- groups ---------------------------------------------------------------- */

static uint64_t hash_of(const sl_holds *h, int kind, const void *key, size_t klen)
{
    return sl__siphash13_v(&h->sip, key, klen) ^ (uint64_t)kind * 0x9e3779b97f4a7c15ULL;
}

/* The group of (kind, key), or NULL; *prevp its chain's link (mu held). */
static group *do_find(shard *sh, uint64_t hash, int kind, const void *key, size_t klen,
                      group ***prevp)
{
    if (sh->nslots == 0) return NULL;
    group **pp = &sh->slot[hash & (sh->nslots - 1)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        group *g = *pp;
        if (g->hash == hash && g->kind == kind && g->klen == klen &&
            memcmp(g->key, key, klen) == 0) {
            if (prevp) *prevp = pp;
            return g;
        }
    }
    return NULL;
}

/* Unlinks and frees g, whose link is *pp (mu held). */
static void do_drop(sl_holds *h, shard *sh, group **pp, group *g)
{
    *pp = g->next;
    sh->ngroups--;
    atomic_fetch_sub(&h->groups, 1);
    atomic_fetch_sub(count_of(h, g->kind), g->n);
    room_give(h, group_bytes(g));
    free(g->ents);
    free(g);
}

/* Removes g's entries with exp <= t; returns how many (mu held).  O(1)
 * when none has expired (min_exp), else O(n). */
static uint32_t do_reclaim(sl_holds *h, group *g, int64_t t)
{
    if (t < g->min_exp) return 0;
    size_t w = 0, sz = esz(g->kind);
    int64_t m = INT64_MAX;
    uint8_t *e = g->ents;
    for (size_t i = 0; i < g->n; i++) {
        int64_t x = ent_exp(g, i);
        if (x <= t) continue;
        if (w != i) memcpy(e + w * sz, e + i * sz, sz);
        if (x < m) m = x;
        w++;
    }
    uint32_t gone = g->n - (uint32_t)w;
    g->n = (uint32_t)w;
    g->min_exp = m;
    atomic_fetch_sub(count_of(h, g->kind), gone);
    atomic_fetch_add(&h->expired, gone);
    return gone;
}

/* Examines `slots` chains of sh from its cursor, reclaiming expired entries
 * and dropping empty groups (mu held).  Returns the entries reclaimed. */
static uint64_t do_sweep(sl_holds *h, shard *sh, int64_t now, size_t slots)
{
    uint64_t gone = 0;
    if (sh->nslots == 0) return 0;
    if (slots > sh->nslots) slots = sh->nslots;
    for (size_t k = 0; k < slots; k++) {
        size_t i = sh->cursor++ & (sh->nslots - 1);
        group **pp = &sh->slot[i];
        while (*pp != NULL) {
            group *g = *pp;
            gone += do_reclaim(h, g, now > g->clock ? now : g->clock);
            if (g->n == 0)
                do_drop(h, sh, pp, g);
            else
                pp = &g->next;
        }
    }
    return gone;
}

/* Takes `bytes` of room for an insert into sh, reclaiming in sh first if
 * the bound is reached.  0, or SL_EFULL (counted). */
static int do_room(sl_holds *h, shard *sh, int64_t now, size_t bytes)
{
    do_sweep(h, sh, now, RECLAIM_STEP);
    if (room_take(h, bytes) == 0) return 0;
    do_sweep(h, sh, now, sh->nslots);
    if (room_take(h, bytes) == 0) return 0;
    atomic_fetch_add(&h->refused, 1);
    return SL_EFULL;
}

/* Doubles sh's slot array when it holds more groups than slots (mu held).
 * Best effort: a table that cannot grow only gets longer chains; but a
 * shard's first array (none yet) must be made, else no group can go in:
 * 0, or SL_EFULL (no room under the bound, counted) / SL_ENOMEM then. */
static int do_grow(sl_holds *h, shard *sh)
{
    if (sh->ngroups < sh->nslots) return 0;
    size_t ns = sh->nslots ? sh->nslots * 2 : MIN_SLOTS;
    if (room_take(h, (ns - sh->nslots) * sizeof(group *)) != 0) {
        if (sh->nslots) return 0;
        atomic_fetch_add(&h->refused, 1);
        return SL_EFULL;
    }
    group **slot = calloc(ns, sizeof *slot);
    if (slot == NULL) {
        room_give(h, (ns - sh->nslots) * sizeof(group *));
        return sh->nslots ? 0 : SL_ENOMEM;
    }
    for (size_t i = 0; i < sh->nslots; i++)
        for (group *g = sh->slot[i], *nx; g != NULL; g = nx) {
            nx = g->next;
            g->next = slot[g->hash & (ns - 1)];
            slot[g->hash & (ns - 1)] = g;
        }
    free(sh->slot);
    sh->slot = slot;
    sh->nslots = ns;
    return 0;
}

/* The group of (kind, key), made if absent with room for one entry more
 * than it has (room taken under the bound).  NULL with *rc (SL_EFULL,
 * SL_ENOMEM) when it cannot be.  mu held. */
static group *do_group_for_insert(sl_holds *h, shard *sh, uint64_t hash, int kind, const void *key,
                                  size_t klen, int64_t now, int *rc)
{
    group *g = do_find(sh, hash, kind, key, klen, NULL);
    size_t sz = esz(kind);
    if (g != NULL && g->n < g->cap) return g;
    if (g == NULL) {
        /* an empty shard whose first slot array finds no room refuses:
         * it has nothing of its own to reclaim (the bound is held by the
         * other shards) */
        if ((*rc = do_grow(h, sh)) != 0) return NULL;
        if ((*rc = do_room(h, sh, now, sizeof *g + klen + sz)) != 0) return NULL;
        g = calloc(1, sizeof *g + klen);
        void *e = malloc(sz);
        if (g == NULL || e == NULL) {
            free(g);
            free(e);
            room_give(h, sizeof *g + klen + sz);
            *rc = SL_ENOMEM;
            return NULL;
        }
        g->hash = hash;
        g->kind = (uint8_t)kind;
        g->klen = (uint16_t)klen;
        g->clock = now;
        g->min_exp = INT64_MAX;
        g->cap = 1;
        g->ents = e;
        memcpy(g->key, key, klen);
        g->next = sh->slot[hash & (sh->nslots - 1)];
        sh->slot[hash & (sh->nslots - 1)] = g;
        sh->ngroups++;
        atomic_fetch_add(&h->groups, 1);
        return g;
    }
    uint32_t nc = g->cap < 4 ? 4 : g->cap + g->cap / 2;
    if ((*rc = do_room(h, sh, now, (size_t)(nc - g->cap) * sz)) != 0) return NULL;
    void *e = realloc(g->ents, (size_t)nc * sz);
    if (e == NULL) {
        room_give(h, (size_t)(nc - g->cap) * sz);
        *rc = SL_ENOMEM;
        return NULL;
    }
    g->ents = e;
    g->cap = nc;
    return g;
}

/* The index of id in g, or -1 (binary search: ids are in order). */
static long find_id(const group *g, uint64_t id)
{
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t m = ent_id(g, mid);
        if (m == id) return (long)mid;
        if (m < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Removes entry i of g (mu held); g is dropped if it empties (*pp its link). */
static void do_remove(sl_holds *h, shard *sh, group **pp, group *g, size_t i)
{
    size_t sz = esz(g->kind);
    int64_t x = ent_exp(g, i);
    uint8_t *e = g->ents;
    memmove(e + i * sz, e + (i + 1) * sz, (g->n - i - 1) * sz);
    g->n--;
    atomic_fetch_sub(count_of(h, g->kind), 1);
    if (g->n == 0) {
        do_drop(h, sh, pp, g);
        return;
    }
    if (x == g->min_exp) { /* recompute: O(n), as the memmove */
        int64_t m = INT64_MAX;
        for (size_t k = 0; k < g->n; k++)
            if (ent_exp(g, k) < m) m = ent_exp(g, k);
        g->min_exp = m;
    }
}

/* ---- the table ------------------------------------------------------------- */

static int random_seed(uint8_t seed[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(seed + got, 16 - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return 0;
}

sl_holds *sl_holds_new(const sl_holds_opts *opts, int *err)
{
    uint8_t seed[16];
    sl_holds *h = NULL;
    int rc = random_seed(seed) == 0 ? 0 : SL_ENOMEM;
    if (rc == 0 && (h = calloc(1, sizeof *h)) == NULL) rc = SL_ENOMEM;
    if (rc == 0) {
        sl__sipkey_init(&h->sip, seed);
        h->max_bytes = opts ? opts->max_bytes : 0;
        atomic_store(&h->bytes, sizeof *h);
        for (int i = 0; i < SHARDS; i++) pthread_mutex_init(&h->sh[i].mu, NULL);
    }
    if (err) *err = rc;
    return h;
}

void sl_holds_free(sl_holds *h)
{
    if (h == NULL) return;
    for (int i = 0; i < SHARDS; i++) {
        shard *sh = &h->sh[i];
        for (size_t k = 0; k < sh->nslots; k++)
            for (group *g = sh->slot[k], *nx; g != NULL; g = nx) {
                nx = g->next;
                free(g->ents);
                free(g);
            }
        free(sh->slot);
        pthread_mutex_destroy(&sh->mu);
    }
    free(h);
}

void sl_holds_stats_get(sl_holds *h, sl_holds_stats *out)
{
    out->leases = atomic_load(&h->leases);
    out->reservations = atomic_load(&h->resvs);
    out->groups = atomic_load(&h->groups);
    out->bytes = atomic_load(&h->bytes);
    out->max_bytes = h->max_bytes;
    out->expired = atomic_load(&h->expired);
    out->refused = atomic_load(&h->refused);
}

uint64_t sl_holds_expire(sl_holds *h, int64_t now_ms, uint64_t max_groups)
{
    uint64_t gone = 0;
    for (int i = 0; i < SHARDS; i++) {
        shard *sh = &h->sh[i];
        pthread_mutex_lock(&sh->mu);
        size_t slots = max_groups == 0 || max_groups / SHARDS + 1 > sh->nslots
                           ? sh->nslots
                           : (size_t)(max_groups / SHARDS + 1);
        gone += do_sweep(h, sh, now_ms, slots);
        pthread_mutex_unlock(&sh->mu);
    }
    return gone;
}

static int check_key_time(const void *key, size_t klen, int64_t now)
{
    if (key == NULL || klen == 0 || klen > SL_MAX_KEY) return SL_EKEY;
    if (now <= -SL_MAX_TIME_MS || now >= SL_MAX_TIME_MS) return SL_ETIME;
    return 0;
}

/* The group of (kind, key), NULL when none, with its shard locked on
 * return (*shp; the caller unlocks): advanced to the time the request is
 * decided at -- now, or the group's later clock (SPEC 4) -- into *tp, its
 * expired entries reclaimed.  *hashp, *ppp: as do_find's. */
static group *group_at(sl_holds *h, unsigned kind, const void *key, size_t keylen, int64_t now,
                       shard **shp, uint64_t *hashp, group ***ppp, int64_t *tp)
{
    uint64_t hash = hash_of(h, kind, key, keylen);
    shard *sh = &h->sh[hash % SHARDS];
    pthread_mutex_lock(&sh->mu);
    group *g = do_find(sh, hash, kind, key, keylen, ppp);
    int64_t t = now;
    if (g != NULL) {
        if (g->clock > t) t = g->clock;
        g->clock = t;
        do_reclaim(h, g, t);
    }
    *shp = sh;
    *hashp = hash;
    *tp = t;
    return g;
}

/* ---- leases ---------------------------------------------------------------- */

/* The six fields of key's leases at t (g may be NULL: none held). */
static void lease_answer(const group *g, int64_t max, int64_t t, int allowed, sl_result *out)
{
    int64_t n = g ? g->n : 0, last = t;
    for (int64_t i = 0; i < n; i++)
        if (ent_exp(g, (size_t)i) > last) last = ent_exp(g, (size_t)i);
    *out = (sl_result){.allowed = allowed,
                       .limit = max,
                       .remaining = max - n > 0 ? max - n : 0,
                       .retry_after_ms = allowed ? 0 : g->min_exp - t,
                       .reset_after_ms = last - t,
                       .delay_ms = 0};
}

int sl_acquire(sl_holds *h, const void *key, size_t keylen, int64_t max, int64_t ttl_ms,
               int64_t now_ms, sl_result *out, uint64_t *id)
{
    int rc = check_key_time(key, keylen, now_ms);
    if (rc != 0) return rc;
    if (max < 1 || max > SL_MAX_CONCURRENCY) return SL_ELIMIT;
    if (ttl_ms < 1 || ttl_ms > SL_MAX_LEASE_TTL_MS) return SL_EWINDOW;
    if (h == NULL || out == NULL || id == NULL) return SL_EINVAL;
    shard *sh;
    uint64_t hash;
    group **pp = NULL;
    int64_t t;
    group *g = group_at(h, K_LEASE, key, keylen, now_ms, &sh, &hash, &pp, &t);
    *id = 0;
    if (g != NULL && (int64_t)g->n >= max) { /* denied: n > 0, so min_exp is a lease's */
        lease_answer(g, max, t, 0, out);
    } else if ((g = do_group_for_insert(h, sh, hash, K_LEASE, key, keylen, t, &rc)) != NULL) {
        lease *e = &((lease *)g->ents)[g->n++];
        e->id = atomic_fetch_add(&h->next_id, 1) + 1;
        e->exp = t + ttl_ms;
        if (e->exp < g->min_exp) g->min_exp = e->exp;
        g->clock = t;
        atomic_fetch_add(&h->leases, 1);
        *id = e->id;
        lease_answer(g, max, t, 1, out);
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int sl_release(sl_holds *h, const void *key, size_t keylen, uint64_t id, int64_t now_ms)
{
    int rc = check_key_time(key, keylen, now_ms);
    if (rc != 0) return rc;
    if (h == NULL) return SL_EINVAL;
    shard *sh;
    uint64_t hash;
    group **pp = NULL;
    int64_t t;
    group *g = group_at(h, K_LEASE, key, keylen, now_ms, &sh, &hash, &pp, &t);
    int held = 0;
    if (g != NULL) {
        long i = find_id(g, id);
        if (i >= 0) {
            held = 1;
            do_remove(h, sh, pp, g, (size_t)i);
        } else if (g->n == 0) {
            do_drop(h, sh, pp, g);
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return held;
}

/* ---- reservations ---------------------------------------------------------- */

int sl_reserve(sl_holds *h, sl_store *s, const sl_params *p, const void *key, size_t keylen,
               int64_t now_ms, int64_t estimate, sl_result *out, uint64_t *id)
{
    int rc = check_key_time(key, keylen, now_ms);
    if (rc != 0) return rc;
    if (h == NULL || s == NULL || p == NULL || out == NULL || id == NULL) return SL_EINVAL;
    if ((rc = sl_params_check(p)) != 0) return rc;
    if (estimate < 0 || estimate > SL_MAX_LIMIT) return SL_ECOST;
    if (p->algo == SL_SLIDING_LOG) return SL_EALGO;
    shard *sh;
    uint64_t hash;
    group **pp = NULL;
    int64_t t;
    group *g = group_at(h, K_RESV, key, keylen, now_ms, &sh, &hash, &pp, &t);
    *id = 0;
    /* room first, so that an allowed charge always gets its record */
    if ((g = do_group_for_insert(h, sh, hash, K_RESV, key, keylen, t, &rc)) != NULL) {
        rc = sl_decide(s, p, key, keylen, t, estimate, out);
        if (rc == 0 && out->allowed) {
            resv *e = &((resv *)g->ents)[g->n++];
            *e = (resv){.id = atomic_fetch_add(&h->next_id, 1) + 1,
                        .exp = t + p->window_ms,
                        .at = t,
                        .estimate = estimate,
                        .p = *p};
            if (e->exp < g->min_exp) g->min_exp = e->exp;
            g->clock = t;
            atomic_fetch_add(&h->resvs, 1);
            *id = e->id;
        } else if (g->n == 0) { /* made for this request: nothing to keep */
            group **link = NULL;
            do_find(sh, hash, K_RESV, key, keylen, &link);
            do_drop(h, sh, link, g);
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return rc;
}

int sl_settle(sl_holds *h, sl_store *s, const void *key, size_t keylen, uint64_t id, int64_t actual,
              int64_t now_ms, sl_result *out)
{
    int rc = check_key_time(key, keylen, now_ms);
    if (rc != 0) return rc;
    if (h == NULL || s == NULL || out == NULL) return SL_EINVAL;
    if (actual < 0 || actual > SL_MAX_LIMIT) return SL_ECOST;
    shard *sh;
    uint64_t hash;
    group **pp = NULL;
    int64_t t;
    group *g = group_at(h, K_RESV, key, keylen, now_ms, &sh, &hash, &pp, &t);
    int settled = 0;
    if (g != NULL) {
        long i = find_id(g, id);
        if (i >= 0) {
            const resv *e = &((resv *)g->ents)[i];
            rc = sl_charge(s, &e->p, key, keylen, t, e->at, actual - e->estimate, out);
            if (rc == 0) {
                settled = 1;
                do_remove(h, sh, pp, g, (size_t)i);
            }
        } else if (g->n == 0) {
            do_drop(h, sh, pp, g);
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return rc != 0 ? rc : settled;
}
