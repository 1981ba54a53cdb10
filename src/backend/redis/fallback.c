/*
 * fallback.c -- what a request gets when Redis cannot answer
 * (--on-backend-error): denied, allowed, or decided on this node's own
 * store with every limit divided by the fleet size (SL_REDIS_LOCAL, the
 * library's engine and RL.CHECK executor).  FORGET is refused: nothing can
 * be reset without Redis.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_local.h"
#include "redis/redis_int.h"

static sl_params scaled(const redis *r, const sl_params *p)
{
    sl_params q = *p;
    int64_t n = r->o.fleet_size;
    q.limit = p->limit / n > 0 ? p->limit / n : 1;
    if (p->burst != 0) q.burst = p->burst / n > 0 ? p->burst / n : 1;
    return q;
}

static void policy_result(const redis *r, const sl_params *p, sl_result *out)
{
    memset(out, 0, sizeof *out);
    out->limit = p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA || p->algo == SL_LEAKY_BUCKET
                     ? (p->burst ? p->burst : p->limit)
                     : p->limit;
    if (r->o.policy == SL_REDIS_ALLOW) {
        out->allowed = 1;
    } else {
        out->retry_after_ms = SL_REDIS_DENY_RETRY;
        out->reset_after_ms = SL_REDIS_DENY_RETRY;
    }
}

/* RL.CHECK by the policy: the whole request (its plan's every counter). */
static void check_by_policy(rchan *ch, sl_breq *rq)
{
    redis *r = ch->r;
    const sl_check_plan *plan = rq->plan;
    sl_check_outcome *o = rq->outcome;
    if (r->o.policy == SL_REDIS_LOCAL) {
        /* the plan with every L and B divided by the fleet size */
        if (ch->lplan == NULL && (ch->lplan = malloc(sizeof *ch->lplan)) == NULL) {
            sl__breq_fail(rq, SL_ENOMEM, "out of memory");
            return;
        }
        *ch->lplan = *plan;
        for (int k = 0; k < plan->nitems; k++) ch->lplan->items[k].p = scaled(r, &plan->items[k].p);
        if (plan->has_pool) ch->lplan->pool = scaled(r, &plan->pool);
        int rc = sl__local_check_exec(r->store, ch->lplan, o, rq->err, sizeof rq->err);
        rq->rc = rc < 0 ? rc : 0;
        rq->cb(rq);
        return;
    }
    memset(o, 0, sizeof *o);
    o->allowed = r->o.policy == SL_REDIS_ALLOW;
    for (int k = 0; k < plan->nitems; k++) policy_result(r, &plan->items[k].p, &o->res[k]);
    rq->cb(rq);
}

/* Answers rq by the policy (Redis could not): rq's key is key (a copy, or
 * the caller's during submit), reqs DECIDE_ALL's requests. */
void sl__redis_by_policy(rchan *ch, sl_breq *rq, const char *key, const sl_request *reqs)
{
    redis *r = ch->r;
    rq->rc = 0;
    rq->err[0] = '\0';
    if (rq->op == SL_BOP_FORGET) {
        sl__breq_fail(rq, SL_EINVAL, "the Redis backend %s is unreachable: nothing was reset",
                      ch->node->url.shown);
        return;
    }
    if (rq->op >= SL_BOP_ACQUIRE && rq->op <= SL_BOP_SETTLE) { /* no id without Redis */
        sl__breq_fail(rq, SL_EINVAL,
                      "Redis (%s) did not answer: the lease or reservation may or may not "
                      "have been taken, released or settled",
                      ch->node->url.shown);
        return;
    }
    atomic_fetch_add(&r->fallback[r->o.policy], 1);
    if (rq->op == SL_BOP_CHECK) {
        check_by_policy(ch, rq);
        return;
    }
    if (r->o.policy == SL_REDIS_LOCAL) {
        sl_params p;
        sl_params ps[SL_MAX_BATCH];
        sl_request lr[SL_MAX_BATCH];
        int rc;
        switch (rq->op) {
        case SL_BOP_DECIDE:
        case SL_BOP_PEEK:
            p = scaled(r, rq->params);
            rc = rq->op == SL_BOP_DECIDE
                     ? sl_decide(r->store, &p, key, rq->keylen, rq->now_ms, rq->cost, &rq->result)
                     : sl_peek(r->store, &p, key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
            break;
        default: /* DECIDE_ALL */
            for (size_t i = 0; i < rq->nreqs; i++) {
                ps[i] = scaled(r, reqs[i].params);
                lr[i] = reqs[i];
                lr[i].params = &ps[i];
            }
            rc = sl_decide_all(r->store, lr, rq->nreqs, rq->now_ms, rq->results, &rq->all_allowed);
            break;
        }
        rq->rc = rc < 0 ? rc : 0;
        rq->cb(rq);
        return;
    }
    if (rq->op == SL_BOP_DECIDE_ALL) {
        for (size_t i = 0; i < rq->nreqs; i++) policy_result(r, reqs[i].params, &rq->results[i]);
        rq->all_allowed = r->o.policy == SL_REDIS_ALLOW;
    } else {
        policy_result(r, rq->params, &rq->result);
    }
    rq->cb(rq);
}
