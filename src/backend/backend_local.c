/*
 * backend_local.c -- the local backend (backend_local.h): every request
 * decided on this process's sl_store, inline, before submit returns.
 *
 * The hot path is submit -> one switch -> sl_decide -> the callback: no
 * allocation, no lock beyond the store's own, no copy of the key.  A run
 * of decisions (SL_BOP_DECIDE_MANY: a pipelined run of RL.ALLOW) goes
 * through sl_decide_many, which overlaps the cache misses of its keys.
 *
 * Two things the server may add (main.c), neither costing a request more
 * than a test of a pointer or a time when unused:
 *   - a recorder (sl_backend_local_record): called after every request
 *     that may have changed a counter, once per counter it asked about,
 *     with the counter's kind and key -- the decision journal
 *     (src/server/journal.c) then writes that counter's new state;
 *   - a deny window (sl_backend_local_deny_window, --after-crash
 *     deny-window): until one window of a request's own parameters has
 *     passed since `since`, a key the store does not hold answers as at its
 *     limit (denied, remaining 0, retry after what is left of that window)
 *     and is not created.  No state per key: the start and each request's
 *     window say everything.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_local.h"
#include "checkexec.h"
#include "store.h"

/* The holds table's bound (leases and reservations, SPEC 10): a quarter
 * of the store's --max-memory on top of it, or 64 MB when the store has
 * no bound.  Past it RL.ACQUIRE and RL.RESERVE are refused ("the holds
 * table is full"), never an existing lease or reservation dropped. */
#define SL_HOLDS_SHARE     4
#define SL_HOLDS_MAX_BYTES ((size_t)64 << 20)

typedef struct local {
    sl_backend base;
    sl_bchan chan; /* one channel serves every worker: it holds no state */
    sl_store *store;
    sl_holds *holds; /* leases and reservations (SPEC 10), owned */
    sl_local_record_fn record; /* NULL: none (set before any request) */
    void *record_arg;
    int64_t deny_since; /* the deny window's start (ms, server clock);
                           INT64_MIN: none (set before any request) */
} local;

static inline unsigned kind_of(const sl_params *p)
{
    return (unsigned)p->algo | (p->space ? SL__KIND_SPACE : 0u);
}

/* Whether a request on key with parameters p at now is in the deny window
 * and the store has no record of the key. */
static int denied_unknown(local *l, const sl_params *p, const void *key, size_t klen, int64_t now)
{
    if (l->deny_since == INT64_MIN || p == NULL || now - l->deny_since >= p->window_ms ||
        klen == 0 || klen > SL_MAX_KEY)
        return 0;
    sl__shard *sh;
    uint64_t h;
    uint8_t *r = sl__store_lookup(l->store, kind_of(p), key, klen, &sh, &h);
    if (r != NULL) sl__rec_release(r, sl__rec_meta(r));
    sl__shard_unlock(sh);
    return r == NULL;
}

/* The answer of a full counter: denied, nothing left, until the window
 * that began at the start has passed. */
static void full_counter(const local *l, const sl_params *p, int64_t now, sl_result *out)
{
    int64_t left = l->deny_since + p->window_ms - now;
    int bucket = p->algo == SL_TOKEN_BUCKET || p->algo == SL_LEAKY_BUCKET ||
                 p->algo == SL_GCRA;
    *out = (sl_result){.allowed = 0,
                       .limit = bucket && p->burst > 0 ? p->burst : p->limit,
                       .remaining = 0,
                       .retry_after_ms = left,
                       .reset_after_ms = left};
}

void sl__local_check_flat(sl_store *s, const sl_check_plan *plan, sl__cx_item *xi,
                          sl__cx_item *pool, sl__cx_plan *x)
{
    static const char pool_key[] = SL_CHECK_POOL_KEY;
    const sl_check_item *it = plan->items;
    int pos[SL_MAX_BATCH]; /* a leader's place in xi */
    *x = (sl__cx_plan){
        .store = s, .it = xi, .denied_never = plan->denied_never, .now_ms = plan->now_ms};
    for (int k = 0; k < plan->nitems; k++) {
        const sl_check_item *t = &it[k];
        uint32_t bit = t->quota ? 1u << t->desc : 0;
        x->qall |= bit;
        if (t->zero) { /* "denied, never": sl_check_report's answer */
            x->zmask |= bit;
            continue;
        }
        if (t->lead != k) { /* the same counter as its leader's */
            xi[pos[t->lead]].qmask |= bit;
            continue;
        }
        pos[k] = x->n;
        xi[x->n++] = (sl__cx_item){.p = &t->p,
                                   .cost = t->cost,
                                   .ceiling = t->elastic ? t->rl->elastic_limit : 0,
                                   .qmask = bit,
                                   .shadow = (unsigned char)t->shadow,
                                   .quota = (unsigned char)t->quota,
                                   .lyft = (unsigned char)t->lyft,
                                   .slot = k,
                                   .key = t->key,
                                   .keylen = t->keylen};
    }
    if (plan->has_pool) {
        *pool = (sl__cx_item){.p = &plan->pool,
                              .cost = plan->cost,
                              .key = pool_key,
                              .keylen = sizeof pool_key - 1,
                              .slot = -1};
        x->pool = pool;
    }
}

/* The plan made flat, run by the library's executor; with l, in the deny
 * window, a counter the store does not hold denies as a full one (its
 * answer that of a full counter, every other counter peeked), and with a
 * recorder every counter is recorded after a run that wrote. */
static int check_exec(local *l, sl_store *s, const sl_check_plan *plan, sl_check_outcome *o,
                      int denied, char *err, size_t errlen)
{
    const sl_check_item *it = plan->items;
    sl__cx_item xi[SL_MAX_BATCH], pool;
    sl__cx_plan x;
    if (err != NULL && errlen > 0) err[0] = '\0';
    memset(o, 0, offsetof(sl_check_outcome, lres)); /* the leases' are the caller's */
    sl__local_check_flat(s, plan, xi, &pool, &x);
    if (denied) x.denied_never = 1; /* a lease denied: every counter only peeked */
    sl__cx_out xo = {.res = o->res, .stretched = o->stretched};
    if (l != NULL && l->deny_since != INT64_MIN) {
        int unknown = 0;
        for (int k = 0; k < x.n; k++)
            if (!xi[k].shadow && denied_unknown(l, xi[k].p, xi[k].key, xi[k].keylen, x.now_ms)) {
                unknown = 1;
                break;
            }
        if (unknown) { /* nothing charged: every counter's answer as it stands */
            for (int k = 0; k < x.n; k++) {
                const sl__cx_item *t = &xi[k];
                if (!t->shadow && denied_unknown(l, t->p, t->key, t->keylen, x.now_ms))
                    full_counter(l, t->p, x.now_ms, &o->res[t->slot]);
                else if (sl_peek(s, t->p, t->key, t->keylen, x.now_ms, t->cost,
                                 &o->res[t->slot]) != 0)
                    memset(&o->res[t->slot], 0, sizeof o->res[t->slot]);
            }
            return 0; /* o->allowed = 0 */
        }
    }
    int rc = sl__cx_run(&x, &xo);
    if (l != NULL && l->record != NULL && xo.wrote) {
        for (int k = 0; k < x.n; k++)
            l->record(l->record_arg, kind_of(xi[k].p), xi[k].key, xi[k].keylen);
        if (x.pool != NULL) l->record(l->record_arg, kind_of(x.pool->p), x.pool->key, x.pool->keylen);
    }
    if (rc != 0) {
        if (xo.bad >= 0)
            return sl__check_err(err, errlen, rc, "limit %s: %s", it[xi[xo.bad].slot].rl->name,
                                 sl_strerror(rc));
        return sl__check_err(err, errlen, rc, "%s", sl_strerror(rc));
    }
    o->allowed = xo.allowed;
    o->quota_denied = xo.quota_denied;
    o->pool_charged = xo.pool_charged;
    return 0;
}

int sl__local_check_exec(sl_store *s, const sl_check_plan *plan, sl_check_outcome *o, char *err,
                         size_t errlen)
{
    if (plan->nleases > 0) /* no holds table here: the plan's caller asked for leases */
        return sl__check_err(err, errlen, SL_EINVAL, "%s", "RL.CHECK takes leases only on the "
                             "local backend");
    memset(o->lid, 0, sizeof o->lid);
    return check_exec(NULL, s, plan, o, 0, err, errlen);
}

/* Lease j of plan (a leader) on holds h: taken (o->lid[j] set when
 * granted), or with keep 0 taken and given back at once -- a look at
 * its count (the answer a take would get; a racing RL.ACQUIRE may see
 * that one lease for an instant).  0 or an SL_E* code. */
static int lease_take(sl_holds *h, const sl_check_plan *plan, int j, int keep, sl_check_outcome *o)
{
    const sl_check_lease *ls = &plan->leases[j];
    uint64_t id = 0;
    int rc = sl_acquire(h, ls->key, ls->keylen, plan->lim[j].params.limit,
                        plan->lim[j].params.window_ms, plan->now_ms, &o->lres[j], &id);
    if (rc < 0) return rc;
    if (id != 0 && !keep) sl_release(h, ls->key, ls->keylen, id, plan->now_ms);
    o->lid[j] = keep ? id : 0;
    return 0;
}

/* Gives back every lease o holds (o->lid), then forgets their ids. */
static void lease_drop(sl_holds *h, const sl_check_plan *plan, sl_check_outcome *o)
{
    for (int j = 0; j < plan->nleases; j++)
        if (o->lid[j] != 0) {
            sl_release(h, plan->leases[j].key, plan->leases[j].keylen, o->lid[j], plan->now_ms);
            o->lid[j] = 0;
        }
}

/* RL.CHECK with concurrency limits (docs/rules.md, "Concurrency"), all or
 * none: every enforced lease is taken first (kept when its descriptor's
 * cost is above 0, else only looked at); one denied, and the rate
 * counters are only peeked (nothing charged) and the leases given back;
 * all granted, the rates are decided as without leases, and when they
 * deny the leases are given back.  Shadow leases come last: taken when the
 * request passed (a shadow lease refused answers SHADOW, holds nothing),
 * looked at when it did not.  Never an over-admission: a request allowed
 * held its leases before its rates were decided and keeps them.  A
 * spurious denial is possible: a lease taken here and given back after a
 * rate denial is seen by a racing RL.ACQUIRE or RL.CHECK on its key while
 * it is held. */
static int check_leases(local *l, sl_store *s, const sl_check_plan *plan, sl_check_outcome *o,
                        char *err, size_t errlen)
{
    int denied = 0, rc = 0;
    memset(o->lid, 0, sizeof o->lid);
    memset(o->lres, 0, sizeof o->lres);
    for (int j = 0; j < plan->nleases && rc == 0; j++) {
        const sl_check_lease *ls = &plan->leases[j];
        if (ls->lead != j || ls->shadow) continue;
        rc = lease_take(l->holds, plan, j, ls->take, o);
        if (rc == 0 && !o->lres[j].allowed) denied = 1;
    }
    if (rc == 0) rc = check_exec(l, s, plan, o, denied, err, errlen);
    else if (rc == SL_EFULL)
        snprintf(err, errlen, "no room for the lease: the holds table (a quarter of "
                 "--max-memory) or the store is at its bound");
    else
        sl__check_err(err, errlen, rc, "lease: %s", sl_strerror(rc));
    if (rc != 0 || !o->allowed) lease_drop(l->holds, plan, o);
    if (rc != 0) return rc;
    for (int j = 0; j < plan->nleases; j++) { /* shadow: never denies */
        const sl_check_lease *ls = &plan->leases[j];
        if (ls->lead != j || !ls->shadow) continue;
        if (lease_take(l->holds, plan, j, o->allowed && ls->take, o) != 0)
            memset(&o->lres[j], 0, sizeof o->lres[j]), o->lres[j].allowed = 1;
    }
    return 0;
}

int sl_rules_check(const sl_rules *r, sl_store *s, const sl_params *pool, const char *domain,
                   size_t dlen, const sl_rule_entry *const *descs, const int *ndesc, int n,
                   int64_t cost, int64_t now_ms, sl_result *overall, sl_check_status *st, char *err,
                   size_t errlen)
{
    sl_check_plan plan;
    sl_check_outcome o;
    if (s == NULL || overall == NULL || st == NULL)
        return sl__check_err(err, errlen, SL_EINVAL, "invalid argument");
    int rc = sl_check_plan_make(r, pool, domain, dlen, descs, ndesc, n, cost, now_ms, &plan, err,
                                errlen);
    if (rc == 0) rc = sl__local_check_exec(s, &plan, &o, err, errlen);
    if (rc != 0) return rc;
    sl_check_report(&plan, &o, overall, st);
    sl_check_count(&plan, &o);
    return 0;
}

/* ---- the backend ------------------------------------------------------ */

static sl_bchan *local_channel(sl_backend *b, void *loop)
{
    (void)loop;
    return &((local *)b)->chan;
}

static void local_channel_free(sl_bchan *ch) { (void)ch; }

/* One DECIDE: in the deny window, a key the store does not hold answers
 * as a full counter (nothing created, nothing recorded); else sl_decide,
 * recorded when it decided.  0 or an SL_E* code. */
static int decide_one(local *l, const sl_params *p, const void *key, size_t klen, int64_t now,
                      int64_t cost, sl_result *out)
{
    if (l->deny_since != INT64_MIN && denied_unknown(l, p, key, klen, now)) {
        full_counter(l, p, now, out);
        return 0;
    }
    int rc = sl_decide(l->store, p, key, klen, now, cost, out);
    if (rc == 0 && l->record != NULL) l->record(l->record_arg, kind_of(p), key, klen);
    return rc < 0 ? rc : 0;
}

/* DECIDE_MANY: calls[0..n) decided in order, each answering exactly as a
 * DECIDE of its own would (out[i], rcs[i]).  Outside the deny window the
 * library's batched call does it (sl_decide_many: the table slots and
 * records of later calls are fetched while earlier ones are decided), and
 * every call that decided is recorded after the batch, in call order:
 * the recorder reads the counter's state then, so a key named twice is
 * recorded twice with its state after both -- what replaying the journal
 * rebuilds is the same, and the journal is committed before any of the
 * replies leaves (journal.c), as for single decisions.  In the deny
 * window each call goes the single way (decide_one). */
static void decide_many(local *l, const sl_call *calls, size_t n, sl_result *out, int *rcs)
{
    if (l->deny_since != INT64_MIN) {
        for (size_t i = 0; i < n; i++)
            rcs[i] = decide_one(l, calls[i].params, calls[i].key, calls[i].keylen, calls[i].now_ms,
                                calls[i].cost, &out[i]);
        return;
    }
    sl_decide_many(l->store, calls, n, out, rcs);
    for (size_t i = 0; i < n; i++) {
        if (rcs[i] > 0) rcs[i] = 0;
        if (rcs[i] == 0 && l->record != NULL)
            l->record(l->record_arg, kind_of(calls[i].params), calls[i].key, calls[i].keylen);
    }
}

static void local_submit(sl_bchan *ch, sl_breq *rq)
{
    local *l = (local *)ch->b;
    sl_store *s = l->store;
    int rc;
    rq->err[0] = '\0';
    switch (rq->op) {
    case SL_BOP_DECIDE:
        rc = decide_one(l, rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
        break;
    case SL_BOP_DECIDE_MANY:
        rc = 0;
        decide_many(l, rq->calls, rq->nreqs, rq->results, rq->rcs);
        break;
    case SL_BOP_PEEK: /* what RL.ALLOW would answer: in the deny window, a full counter */
        if (l->deny_since != INT64_MIN &&
            denied_unknown(l, rq->params, rq->key, rq->keylen, rq->now_ms)) {
            full_counter(l, rq->params, rq->now_ms, &rq->result);
            rc = 0;
            break;
        }
        rc = sl_peek(s, rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
        break;
    case SL_BOP_FORGET:
        rc = 0;
        rq->existed = 0;
        for (int a = rq->algo_lo; a < rq->algo_hi && rc >= 0; a++) {
            rc = sl_forget(s, (sl_algo)a, rq->key, rq->keylen);
            if (rc == 1) {
                rq->existed = 1;
                if (l->record != NULL) l->record(l->record_arg, (unsigned)a, rq->key, rq->keylen);
            }
        }
        if (rc > 0) rc = 0;
        break;
    case SL_BOP_DECIDE_ALL: {
        int unknown = 0;
        for (size_t i = 0; l->deny_since != INT64_MIN && i < rq->nreqs && !unknown; i++)
            unknown = denied_unknown(l, rq->reqs[i].params, rq->reqs[i].key, rq->reqs[i].keylen,
                                     rq->now_ms);
        if (unknown) { /* all or none: none, each answered as it stands */
            rc = 0;
            rq->all_allowed = 0;
            for (size_t i = 0; i < rq->nreqs && rc == 0; i++) {
                const sl_request *q = &rq->reqs[i];
                if (denied_unknown(l, q->params, q->key, q->keylen, rq->now_ms))
                    full_counter(l, q->params, rq->now_ms, &rq->results[i]);
                else
                    rc = sl_peek(s, q->params, q->key, q->keylen, rq->now_ms, q->cost,
                                 &rq->results[i]);
            }
            break;
        }
        rc = sl_decide_all(s, rq->reqs, rq->nreqs, rq->now_ms, rq->results, &rq->all_allowed);
        if (rc == 0 && rq->all_allowed && l->record != NULL)
            for (size_t i = 0; i < rq->nreqs; i++)
                l->record(l->record_arg, kind_of(rq->reqs[i].params), rq->reqs[i].key,
                          rq->reqs[i].keylen);
        break;
    }
    case SL_BOP_CHECK:
        rc = rq->plan->nleases > 0
                 ? check_leases(l, s, rq->plan, rq->outcome, rq->err, sizeof rq->err)
                 : check_exec(l, s, rq->plan, rq->outcome, 0, rq->err, sizeof rq->err);
        break;
    case SL_BOP_ACQUIRE:
        rc = sl_acquire(l->holds, rq->key, rq->keylen, rq->max, rq->ttl_ms, rq->now_ms,
                        &rq->result, &rq->hold_id);
        break;
    case SL_BOP_RELEASE:
        rc = sl_release(l->holds, rq->key, rq->keylen, rq->hold_id, rq->now_ms);
        rq->existed = rc == 1;
        break;
    case SL_BOP_RESERVE:
        rc = sl_reserve(l->holds, s, rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost,
                        &rq->result, &rq->hold_id);
        if (rc == 0 && rq->hold_id != 0 && l->record != NULL)
            l->record(l->record_arg, kind_of(rq->params), rq->key, rq->keylen);
        break;
    case SL_BOP_SETTLE:
        rc = sl_settle(l->holds, s, rq->key, rq->keylen, rq->hold_id, rq->cost, rq->now_ms,
                       &rq->result);
        rq->existed = rc == 1;
        /* the journal records the counter by kind: a settle does not know it here
         * without the reservation; its algorithm's state is recorded at the next
         * decision on the key (docs/commands-holds.md) */
        break;
    default: rc = SL_EINVAL; break;
    }
    if (rc == SL_EFULL && (rq->op == SL_BOP_ACQUIRE || rq->op == SL_BOP_RESERVE))
        snprintf(rq->err, sizeof rq->err,
                 "no room for the %s: the holds table (a quarter of --max-memory) or the "
                 "store is at its bound",
                 rq->op == SL_BOP_ACQUIRE ? "lease" : "reservation");
    rq->rc = rc < 0 ? rc : 0;
    rq->cb(rq);
}

static void local_stats(sl_backend *b, sl_backend_stats *out)
{
    sl_store_stats st;
    sl_store_stats_get(((local *)b)->store, &st);
    memset(out, 0, sizeof *out);
    out->keys = st.keys;
    out->bytes = st.bytes;
    out->max_bytes = st.max_bytes;
    out->evictions = st.evictions;
    out->expired = st.expired;
    out->evicted_at_rest = st.evicted_at_rest;
    out->evicted_at_limit = st.evicted_at_limit;
    out->refused = st.refused;
}

static void local_free(sl_backend *b)
{
    sl_holds_free(((local *)b)->holds);
    free(b);
}

static const sl_backend_ops local_ops = {
    "local", local_channel, local_channel_free, local_submit, local_stats, local_free,
    NULL, NULL, NULL, /* info, metrics, state: nothing beyond its stats */
};

sl_backend *sl_backend_local_new(sl_store *s)
{
    local *l = calloc(1, sizeof *l);
    if (l == NULL || s == NULL) {
        free(l);
        return NULL;
    }
    l->base.ops = &local_ops;
    l->base.flags = SL_BACKEND_INLINE | SL_BACKEND_MANY;
    l->chan.b = &l->base;
    l->store = s;
    l->deny_since = INT64_MIN;
    /* The holds' bound: a quarter of the store's (SL_HOLDS_SHARE), or
     * SL_HOLDS_MAX_BYTES with an unbounded store */
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    sl_holds_opts ho = {.max_bytes = st.max_bytes ? (size_t)(st.max_bytes / SL_HOLDS_SHARE)
                                                  : SL_HOLDS_MAX_BYTES};
    if ((l->holds = sl_holds_new(&ho, NULL)) == NULL) {
        free(l);
        return NULL;
    }
    return &l->base;
}

int sl_backend_local_record(sl_backend *b, sl_local_record_fn fn, void *arg)
{
    if (b == NULL || b->ops != &local_ops) return SL_EINVAL;
    ((local *)b)->record = fn;
    ((local *)b)->record_arg = arg;
    return 0;
}

int sl_backend_local_deny_window(sl_backend *b, int64_t since_ms)
{
    if (b == NULL || b->ops != &local_ops) return SL_EINVAL;
    ((local *)b)->deny_since = since_ms;
    return 0;
}
