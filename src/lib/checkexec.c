/*
 * checkexec.c -- RL.CHECK's decision rounds on a store (checkexec.h): the
 * one C copy of them.  Each round asks the store through one of three
 * operations -- decide-all, decide, peek -- which pick the sl_store or the
 * loose shard by a branch, never a pointer.
 */
#include <string.h>

#include "checkexec.h"
#include "lone.h"

/* Decide-all over items idx[0..n) at their parameters (pe[q] for idx[q]
 * when pe is not NULL), the pool one more member when with_pool: all
 * charged or none (sl_decide_all, sl__lone_decide_all).  0 or SL_E*. */
static int op_all(const sl__cx_plan *x, const int *idx, size_t n, const sl_params *pe,
                  int with_pool, sl_result *out, int *all, sl__cx_out *o)
{
    int rc;
    if (x->store != NULL) {
        sl_request r[SL_MAX_BATCH + 1];
        for (size_t q = 0; q < n; q++) {
            const sl__cx_item *t = &x->it[idx[q]];
            r[q] = (sl_request){pe ? &pe[q] : t->p, t->key, t->keylen, t->cost};
        }
        if (with_pool)
            r[n++] = (sl_request){x->pool->p, x->pool->key, x->pool->keylen, x->pool->cost};
        rc = sl_decide_all(x->store, r, n, x->now_ms, out, all);
    } else {
        sl__lone_req r[SL_MAX_BATCH + 1];
        for (size_t q = 0; q < n; q++) {
            const sl__cx_item *t = &x->it[idx[q]];
            r[q] = (sl__lone_req){pe ? &pe[q] : t->p, t->rec, t->cost, t->room};
        }
        if (with_pool)
            r[n++] = (sl__lone_req){x->pool->p, x->pool->rec, x->pool->cost, x->pool->room};
        rc = sl__lone_decide_all(x->loose, r, n, x->now_ms, out, all, NULL);
    }
    if (rc == 0 && *all) o->wrote = 1;
    return rc;
}

/* Decides (commit) or peeks item t alone at its parameters.  0 or SL_E*. */
static int op_one(const sl__cx_plan *x, const sl__cx_item *t, int commit, sl_result *out)
{
    if (x->store != NULL)
        return commit ? sl_decide(x->store, t->p, t->key, t->keylen, x->now_ms, t->cost, out)
                      : sl_peek(x->store, t->p, t->key, t->keylen, x->now_ms, t->cost, out);
    return sl__lone_decide(x->loose, t->rec, t->room, t->p, x->now_ms, t->cost, commit, out);
}

/* A Lyft-counted item's answer from its answer at L = SL_MAX_LIMIT, which
 * charged it: the count after the charge judged against the item's own
 * L, as Lyft compares INCRBY's result. */
static void lyft_answer(const sl__cx_item *t, const sl_result *big, sl_result *r)
{
    int64_t L = t->p->limit, after = SL_MAX_LIMIT - big->remaining;
    memset(r, 0, sizeof *r);
    r->allowed = after <= L;
    r->limit = L;
    r->remaining = after <= L ? L - after : 0;
    r->reset_after_ms = big->reset_after_ms;
    r->retry_after_ms = r->allowed ? 0 : t->cost > L ? -1 : big->reset_after_ms;
}

/* Adds to *qover the quota descriptors with a decided counter over; 1
 * when that makes every quota descriptor of the plan over. */
static int quota_all_over(const sl__cx_plan *x, const sl__cx_out *o, const unsigned char *decided,
                          uint32_t *qover)
{
    if (x->qall == 0) return 0; /* the usual request: no quota descriptor */
    for (int k = 0; k < x->n; k++)
        if (x->it[k].qmask != 0 && decided[k] && !o->res[x->it[k].slot].allowed)
            *qover |= x->it[k].qmask;
    return *qover == x->qall;
}

int sl__cx_run(const sl__cx_plan *x, sl__cx_out *o)
{
    const sl__cx_item *it = x->it;
    sl_result *res = o->res;
    int n = x->n, idx[SL_MAX_BATCH], rc, all = 0;
    unsigned char decided[SL_MAX_BATCH] = {0}; /* items with an answer in res */
    unsigned char outq[SL_MAX_BATCH] = {0};    /* quota items out of the batch */
    uint32_t qover = x->zmask;
    sl_result out[SL_MAX_BATCH + 1];
    sl_params pe[SL_MAX_BATCH];
    size_t nreq = 0;
    o->allowed = o->quota_denied = o->pool_charged = o->wrote = 0;
    o->bad = -1;

    /* 1. Lyft's counting: charged whatever the answer, then judged */
    for (int k = 0; k < n; k++) {
        if (!it[k].lyft) continue;
        pe[nreq] = *it[k].p;
        pe[nreq].limit = SL_MAX_LIMIT;
        idx[nreq++] = k;
    }
    if (nreq > 0) {
        if ((rc = op_all(x, idx, nreq, pe, 0, out, &all, o)) != 0) return rc;
        for (size_t q = 0; q < nreq; q++) {
            lyft_answer(&it[idx[q]], &out[q], &res[it[idx[q]].slot]);
            decided[idx[q]] = 1;
        }
    }

    /* 2. denied already: every other counter is only peeked */
    int denied = x->denied_never;
    for (int k = 0; k < n && !denied; k++)
        denied = it[k].lyft && !it[k].shadow && !it[k].quota && !res[it[k].slot].allowed;
    int quota_denied = !denied && quota_all_over(x, o, decided, &qover);
    if (denied || quota_denied) {
        for (int k = 0; k < n; k++) {
            const sl__cx_item *t = &it[k];
            if (decided[k]) continue;
            if ((rc = op_one(x, t, 0, &res[t->slot])) != 0) {
                o->bad = k;
                return rc;
            }
            if (!res[t->slot].allowed && !t->shadow && !t->quota) quota_denied = 0;
        }
        o->quota_denied = quota_denied;
        return 0;
    }

    /* 3. the enforced and quota counters, all-or-none: a decide-all checks
     * every member before it charges any, and when it charges none answers
     * each as if alone -- so no peek is needed first */
    int allowed = 0, enforced = 0;
    for (;;) {
        nreq = 0;
        for (int k = 0; k < n; k++)
            if (!it[k].shadow && !it[k].lyft && !outq[k]) idx[nreq++] = k;
        if (nreq == 0) {
            allowed = 1;
            break;
        }
        enforced = 1;
        if ((rc = op_all(x, idx, nreq, NULL, 0, out, &all, o)) != 0) return rc;
        for (size_t q = 0; q < nreq; q++) {
            res[it[idx[q]].slot] = out[q];
            decided[idx[q]] = 1;
        }
        if (all) {
            allowed = 1;
            break;
        }
        int hard = 0, soft = 0, quota = 0; /* who denied: plain, elastic, quota */
        for (size_t q = 0; q < nreq; q++) {
            const sl__cx_item *t = &it[idx[q]];
            if (out[q].allowed) continue;
            if (t->quota)
                quota = 1;
            else if (t->ceiling > 0)
                soft = 1;
            else
                hard = 1;
        }
        if (hard) break;
        if (quota) { /* out of the batch; denied when every quota descriptor is over */
            for (size_t q = 0; q < nreq; q++)
                if (!out[q].allowed && it[idx[q]].quota) outq[idx[q]] = 1;
            if (quota_all_over(x, o, decided, &qover)) {
                o->quota_denied = 1;
                break;
            }
            continue;
        }
        /* 4. denied only by elastic limits: again, all-or-none, those that
         * denied at their ceilings (one that passed at L is decided at L
         * again: check.h) and the spare pool one more member */
        if (soft && x->pool != NULL && nreq < SL_MAX_BATCH) {
            sl_result out2[SL_MAX_BATCH + 1];
            for (size_t q = 0; q < nreq; q++) {
                const sl__cx_item *t = &it[idx[q]];
                pe[q] = *t->p;
                if (t->ceiling > 0 && !out[q].allowed) pe[q].limit = t->ceiling;
            }
            if ((rc = op_all(x, idx, nreq, pe, 1, out2, &all, o)) != 0) return rc;
            if (all) {
                allowed = 1;
                o->pool_charged = 1;
                for (size_t q = 0; q < nreq; q++) {
                    int s = it[idx[q]].slot;
                    /* over L before (state only grows at one instant) */
                    o->stretched[s] = !res[s].allowed;
                    res[s] = out2[q];
                    if (o->stretched[s] && out2[nreq].remaining < res[s].remaining)
                        res[s].remaining = out2[nreq].remaining;
                }
            }
        }
        break;
    }

    /* 5. within every limit: the request still uses spare capacity */
    for (int k = 0; k < n && !enforced; k++) enforced = it[k].lyft && !it[k].shadow;
    if (allowed && enforced && x->pool != NULL && !o->pool_charged) {
        sl_result pr;
        rc = op_one(x, x->pool, 1, &pr);
        if (rc != 0 && x->strict) return rc;
        if (rc == 0) o->wrote = 1;
    }
    o->allowed = allowed;

    /* 6. shadow counters: charged when the request is allowed, else peeked */
    for (int k = 0; k < n; k++) {
        const sl__cx_item *t = &it[k];
        if (!t->shadow || t->lyft) continue;
        sl_result *r = &res[t->slot];
        rc = op_one(x, t, allowed, r);
        if (rc != 0 && x->strict) {
            o->bad = k;
            return rc;
        }
        if (rc == 0) {
            o->wrote |= allowed;
            continue;
        }
        if (allowed) rc = op_one(x, t, 0, r);
        if (rc != 0) {
            memset(r, 0, sizeof *r);
            r->allowed = 1;
        }
    }
    return 0;
}
