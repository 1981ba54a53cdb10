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

typedef struct local {
    sl_backend base;
    sl_bchan chan; /* one channel serves every worker: it holds no state */
    sl_store *store;
} local;

/* A Lyft-counted item's answer (check.h, SL_RULES_COUNT_DENIED) from the
 * engine's answer at L = SL_MAX_LIMIT, which charged it: the count after the
 * charge judged against the item's own L, as Lyft compares INCRBY's result. */
static void lyft_answer(const sl_check_item *t, const sl_result *big, sl_result *r)
{
    int64_t L = t->p.limit, after = SL_MAX_LIMIT - big->remaining;
    memset(r, 0, sizeof *r);
    r->allowed = after <= L;
    r->limit = L;
    r->remaining = after <= L ? L - after : 0;
    r->reset_after_ms = big->reset_after_ms;
    r->retry_after_ms = r->allowed ? 0 : t->cost > L ? -1 : big->reset_after_ms;
}

/* Is item t over, by the answer of its counter? */
static int over(const sl_check_outcome *o, const sl_check_item *it, int k)
{
    return it[k].zero || !o->res[it[k].lead].allowed;
}

/* Marks in qover[] the descriptors whose quota counters found one over
 * (items in[] that are quota); returns 1 when every quota descriptor of the
 * plan is marked. */
static int quota_all_over(const sl_check_plan *plan, const sl_check_outcome *o,
                          const unsigned char *decided, unsigned char *qover)
{
    const sl_check_item *it = plan->items;
    int n = 0;
    if (plan->nquota == 0) return 0; /* the usual request: no quota descriptor */
    for (int k = 0; k < plan->nitems; k++)
        if (it[k].quota && decided[it[k].lead] && over(o, it, k)) qover[it[k].desc] = 1;
    for (int i = 0; i < plan->n; i++) n += qover[i];
    return plan->nquota > 0 && n == plan->nquota;
}

int sl__local_check_exec(sl_store *s, const sl_check_plan *plan, sl_check_outcome *o, char *err,
                         size_t errlen)
{
    const sl_check_item *it = plan->items;
    int nit = plan->nitems;
    int64_t now_ms = plan->now_ms, cost = plan->cost;
    const sl_params *pool = plan->has_pool ? &plan->pool : NULL;
    static const char pool_key[] = SL_CHECK_POOL_KEY;
    sl_request req[SL_MAX_BATCH];
    sl_result out[SL_MAX_BATCH];
    sl_params big[SL_MAX_BATCH];
    int idx[SL_MAX_BATCH];
    unsigned char decided[SL_MAX_BATCH] = {0}; /* leaders with an answer in o->res */
    unsigned char qover[SL_CHECK_MAX_DESC] = {0};
    size_t nreq = 0;
    int rc;
    if (err != NULL && errlen > 0) err[0] = '\0';
    memset(o, 0, sizeof *o);

    /* Lyft's counting: these counters are charged whatever the answer, at
     * once (all pass at L = SL_MAX_LIMIT), then judged against their L. */
    for (int k = 0; k < nit; k++) {
        const sl_check_item *t = &it[k];
        if (!t->lyft || t->lead != k) continue;
        big[nreq] = t->p;
        big[nreq].limit = SL_MAX_LIMIT;
        req[nreq] = (sl_request){&big[nreq], t->key, t->keylen, t->cost};
        idx[nreq++] = k;
    }
    if (nreq > 0) {
        if ((rc = sl_decide_all(s, req, nreq, now_ms, out, NULL)) < 0)
            return sl__check_err(err, errlen, rc, "%s", sl_strerror(rc));
        for (size_t q = 0; q < nreq; q++) {
            lyft_answer(&it[idx[q]], &out[q], &o->res[idx[q]]);
            decided[idx[q]] = 1;
        }
    }
    for (int k = 0; k < nit; k++)
        if (it[k].zero) decided[k] = 1; /* "denied, never": sl_check_report's answer */

    /* Denied already -- by an enforced L = 0 or Lyft-counted counter, or
     * every quota descriptor over: every other counter is only peeked
     * (checked, and answered as if alone). */
    int denied = plan->denied_never;
    for (int k = 0; k < nit && !denied; k++)
        denied = it[k].lyft && !it[k].shadow && !it[k].quota && over(o, it, k);
    int quota_denied = !denied && quota_all_over(plan, o, decided, qover);
    if (denied || quota_denied) {
        for (int k = 0; k < nit; k++) {
            const sl_check_item *t = &it[k];
            if (decided[k] || t->lead != k) continue;
            if ((rc = sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, &o->res[k])) < 0)
                return sl__check_err(err, errlen, rc, "limit %s: %s", t->rl->name, sl_strerror(rc));
            if (!o->res[k].allowed && !t->shadow && !t->quota) quota_denied = 0;
        }
        o->quota_denied = quota_denied;
        return 0; /* o->allowed = 0 */
    }

    /* The enforced and quota counters, all-or-none: sl_decide_all checks
     * every request before it charges any, and when it charges none answers
     * each as if alone -- so no peek is needed first.  A quota counter that
     * denies leaves the batch and the rest is decided again (each round
     * one fewer: at most nquota + 1 rounds). */
    int allowed = 0, enforced = 0;
    unsigned char outq[SL_MAX_BATCH] = {0}; /* quota counters out of the batch */
    for (;;) {
        nreq = 0;
        for (int k = 0; k < nit; k++) {
            const sl_check_item *t = &it[k];
            if (t->zero || t->shadow || t->lyft || t->lead != k || outq[k]) continue;
            req[nreq] = (sl_request){&t->p, t->key, t->keylen, t->cost};
            idx[nreq++] = k;
        }
        if (nreq == 0) {
            allowed = 1;
            break;
        }
        enforced = 1;
        int all = 0;
        if ((rc = sl_decide_all(s, req, nreq, now_ms, out, &all)) < 0)
            return sl__check_err(err, errlen, rc, "%s", sl_strerror(rc));
        for (size_t q = 0; q < nreq; q++) {
            o->res[idx[q]] = out[q];
            decided[idx[q]] = 1;
        }
        if (all) {
            allowed = 1;
            break;
        }
        int hard = 0, soft = 0, quota = 0; /* who denied: plain, elastic, quota */
        for (size_t q = 0; q < nreq; q++) {
            const sl_check_item *t = &it[idx[q]];
            if (out[q].allowed) continue;
            if (t->quota)
                quota = 1;
            else if (t->elastic)
                soft = 1;
            else
                hard = 1;
        }
        if (hard) break;
        if (quota) { /* out of the batch; denied when every quota descriptor is over */
            for (size_t q = 0; q < nreq; q++)
                if (!out[q].allowed && it[idx[q]].quota) outq[idx[q]] = 1;
            if (quota_all_over(plan, o, decided, qover)) {
                o->quota_denied = 1;
                break;
            }
            continue;
        }
        /* Denied only by elastic limits: again, all-or-none, with those at
         * their ceilings and the spare pool charged too. */
        if (soft && pool != NULL && nreq < SL_MAX_BATCH) {
            sl_params pe[SL_MAX_BATCH];
            for (size_t q = 0; q < nreq; q++) {
                const sl_check_item *t = &it[idx[q]];
                pe[q] = t->p;
                /* only the limits that denied go up to their ceilings: one
                 * that passed at L is decided at L again (check.h) */
                if (t->elastic && !out[q].allowed) pe[q].limit = t->rl->elastic_limit;
                req[q].params = &pe[q];
            }
            req[nreq] = (sl_request){pool, pool_key, sizeof pool_key - 1, cost};
            sl_result out2[SL_MAX_BATCH];
            if ((rc = sl_decide_all(s, req, nreq + 1, now_ms, out2, &all)) < 0)
                return sl__check_err(err, errlen, rc, "%s", sl_strerror(rc));
            if (all) {
                allowed = 1;
                o->pool_charged = 1;
                for (size_t q = 0; q < nreq; q++) {
                    int k = idx[q];
                    /* over L before (state only grows at one instant) */
                    o->stretched[k] = !o->res[k].allowed;
                    o->res[k] = out2[q];
                    if (o->stretched[k] && out2[nreq].remaining < o->res[k].remaining)
                        o->res[k].remaining = out2[nreq].remaining;
                }
            }
        }
        break;
    }
    /* Within every limit: the request still uses spare capacity. */
    for (int k = 0; k < nit && !enforced; k++) enforced = it[k].lyft && !it[k].shadow;
    if (allowed && enforced && pool != NULL && !o->pool_charged) {
        sl_result pr;
        (void)sl_decide(s, pool, pool_key, sizeof pool_key - 1, now_ms, cost, &pr);
    }
    o->allowed = allowed;

    /* Shadow counters: charged when the request is allowed, else peeked.
     * Their parameters and keys were checked when the set loaded and when
     * the keys were built, so neither call fails in practice; if one did,
     * the counter answers "allowed, all zeros" and the request stands. */
    for (int k = 0; k < nit; k++) {
        const sl_check_item *t = &it[k];
        if (t->zero || !t->shadow || t->lyft || t->lead != k) continue;
        sl_result *r = &o->res[k];
        rc = allowed ? sl_decide(s, &t->p, t->key, t->keylen, now_ms, t->cost, r)
                     : sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, r);
        if (rc < 0 && allowed) rc = sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, r);
        if (rc < 0) {
            memset(r, 0, sizeof *r);
            r->allowed = 1;
        }
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
