/*
 * backend_local.c -- the local backend (backend_local.h): every request
 * decided on this process's sl_store, inline, before submit returns.
 *
 * The hot path is submit -> one switch -> sl_decide -> the callback: no
 * allocation, no lock beyond the store's own, no copy of the key.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_local.h"
#include "checkexec.h"

typedef struct local {
    sl_backend base;
    sl_bchan chan; /* one channel serves every worker: it holds no state */
    sl_store *store;
} local;

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

/* The plan made flat, run by the library's executor. */
int sl__local_check_exec(sl_store *s, const sl_check_plan *plan, sl_check_outcome *o, char *err,
                         size_t errlen)
{
    const sl_check_item *it = plan->items;
    sl__cx_item xi[SL_MAX_BATCH], pool;
    sl__cx_plan x;
    if (err != NULL && errlen > 0) err[0] = '\0';
    memset(o, 0, sizeof *o);
    sl__local_check_flat(s, plan, xi, &pool, &x);
    sl__cx_out xo = {.res = o->res, .stretched = o->stretched};
    int rc = sl__cx_run(&x, &xo);
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

static void local_submit(sl_bchan *ch, sl_breq *rq)
{
    sl_store *s = ((local *)ch->b)->store;
    int rc;
    rq->err[0] = '\0';
    switch (rq->op) {
    case SL_BOP_DECIDE:
        rc = sl_decide(s, rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
        break;
    case SL_BOP_PEEK:
        rc = sl_peek(s, rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
        break;
    case SL_BOP_FORGET:
        rc = 0;
        rq->existed = 0;
        for (int a = rq->algo_lo; a < rq->algo_hi && rc >= 0; a++) {
            rc = sl_forget(s, (sl_algo)a, rq->key, rq->keylen);
            if (rc == 1) rq->existed = 1;
        }
        if (rc > 0) rc = 0;
        break;
    case SL_BOP_DECIDE_ALL:
        rc = sl_decide_all(s, rq->reqs, rq->nreqs, rq->now_ms, rq->results, &rq->all_allowed);
        break;
    case SL_BOP_CHECK:
        rc = sl__local_check_exec(s, rq->plan, rq->outcome, rq->err, sizeof rq->err);
        break;
    default: rc = SL_EINVAL; break;
    }
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

static void local_free(sl_backend *b) { free(b); }

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
    l->base.flags = SL_BACKEND_INLINE;
    l->chan.b = &l->base;
    l->store = s;
    return &l->base;
}
