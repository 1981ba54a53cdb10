/*
 * module_cmd.c -- the module path's command encoder: RL.ALLOW, RL.PEEK,
 * RL.DECIDEALL, RL.CHECKPLAN, RL.RESET, RL.LEASE and RL.LEASERETURN of the sluice module
 * (docs/module.md, "sluiced's Redis backend") on keys "sl:m" space ":{"
 * tag "}" rest, apart from the script's; RL.HOLDCHECK (RL.CHECK's
 * concurrency leases).  Builds bytes only.
 */
#include <string.h>

#include "redis/redis_int.h"
#include "redis/holds.h"

/* ---- the module's commands (docs/module.md, "sluiced's Redis backend") ---- */

/* The Redis key of (space, key[0..len), tag t) on the module path:
 * "sl:m" s ":{" key[0..t) "}" key[t..len).  The scripts' keys are "sl:"
 * digit digit ":", so the two paths never name one Redis key; the hash
 * tag is the script's, so a key maps to the same Cluster slot on both. */
static void cmd_mkey(struct cmd *c, int space, const char *key, size_t len, size_t t)
{
    char *k = c->key[c->nkeys++];
    memcpy(k, "sl:m", 4);
    k[4] = (char)('0' + space);
    k[5] = ':';
    k[6] = '{';
    memcpy(k + 7, key, t);
    k[7 + t] = '}';
    memcpy(k + 8 + t, key + t, len - t);
    cmd_str(c, k, len + 8);
}

/* AT now_ms, with client time (the module loaded with trust-client-time
 * yes: the handshake checked); nothing with Redis's clock. */
static void cmd_at(struct cmd *c, const redis *r, int64_t now_ms)
{
    if (!r->o.trust_client_time) return;
    cmd_str(c, "AT", 2);
    cmd_int(c, now_ms);
}

/* limit window ALGO a COST c [BURST b] [PRECISION p] [LOGREJECTED]: a
 * request's arguments after its key, as RL.ALLOW takes them. */
static void cmd_request(struct cmd *c, const sl_params *p, int64_t cost)
{
    const char *algo = sl_algo_name(p->algo);
    cmd_int(c, p->limit);
    cmd_int(c, p->window_ms);
    cmd_str(c, "ALGO", 4);
    cmd_str(c, algo, strlen(algo));
    cmd_str(c, "COST", 4);
    cmd_int(c, cost);
    if (p->burst != 0) {
        cmd_str(c, "BURST", 5);
        cmd_int(c, p->burst);
    }
    if (p->precision != 0) {
        cmd_str(c, "PRECISION", 9);
        cmd_int(c, p->precision);
    }
    if (p->log_rejected) cmd_str(c, "LOGREJECTED", 11);
}

/* RL.HOLDCHECK's leases after the plan: nl, then per lease (leaders only:
 * one a lease key) its keys -- RL.ACQUIRE's on the script's path, so that
 * RL.RELEASE key id gives it back -- and take shadow max ttl, as op C. */
static void cmd_leases(struct cmd *c, const sl_check_plan *plan, int nl)
{
    cmd_int(c, nl);
    for (int j = 0; j < plan->nleases; j++) {
        const sl_check_lease *ls = &plan->leases[j];
        if (ls->lead != j) continue;
        sl__redis_check_lease_keys(c, plan, j);
        cmd_int(c, ls->take);
        cmd_int(c, ls->shadow);
        cmd_int(c, plan->lim[j].params.limit);
        cmd_int(c, plan->lim[j].params.window_ms);
    }
}

/* Builds e's command for the module: RL.ALLOW (D), RL.PEEK (P),
 * RL.DECIDEALL (A), RL.CHECKPLAN or with leases RL.HOLDCHECK (C),
 * RL.RESET (forget). */
void sl__redis_cmd_module(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    c->argc = c->nkeys = 0;
    switch (rq->op) {
    case SL_BOP_FORGET: /* the service resets one algorithm or all of them */
        cmd_str(c, "RL.RESET", 8);
        cmd_mkey(c, 0, e->key, rq->keylen, rq->keylen);
        if (rq->algo_hi - rq->algo_lo == 1) {
            const char *algo = sl_algo_name((sl_algo)rq->algo_lo);
            cmd_str(c, "ALGO", 4);
            cmd_str(c, algo, strlen(algo));
        }
        break;
    case SL_BOP_CHECK: {
        const sl_check_plan *plan = rq->plan;
        int lead[SL_MAX_BATCH];
        int64_t qall, zmask, qmask[SL_MAX_BATCH];
        int m = sl__redis_check_masks(plan, lead, qmask, &qall, &zmask);
        /* with concurrency limits, RL.HOLDCHECK: the plan and its leases,
         * on RL.ACQUIRE's keys of each lease key (sent only to a module
         * that has it: backend_redis.c) */
        int nl = 0;
        for (int j = 0; j < plan->nleases; j++) nl += plan->leases[j].lead == j;
        if (nl > 0)
            cmd_str(c, "RL.HOLDCHECK", 12);
        else
            cmd_str(c, "RL.CHECKPLAN", 12);
        cmd_at(c, r, plan->now_ms);
        sl__redis_cmd_plan_head(c, plan, m, qall, zmask);
        for (int i = 0; i < m; i++) {
            const sl_check_item *t = &plan->items[lead[i]];
            cmd_mkey(c, t->p.space, t->key, t->keylen, t->taglen);
            sl__redis_cmd_plan_item(c, t, qmask[lead[i]]);
        }
        if (plan->has_pool) {
            char u[KEYBUF];
            size_t tag, n = sl__redis_pool_user_key(u, r, plan, &tag);
            cmd_mkey(c, plan->pool.space, u, n, tag);
            sl__redis_cmd_fields(c, &plan->pool, plan->cost);
        }
        if (nl > 0) cmd_leases(c, plan, nl);
        break;
    }
    case SL_BOP_DECIDE_ALL:
        cmd_str(c, "RL.DECIDEALL", 12);
        cmd_at(c, r, rq->now_ms);
        for (size_t i = 0; i < rq->nreqs; i++) {
            const sl_request *q = &e->reqs[i];
            cmd_str(c, "REQ", 3);
            cmd_mkey(c, q->params->space, q->key, q->keylen, q->keylen);
            cmd_request(c, q->params, q->cost);
        }
        break;
    default: /* DECIDE, PEEK */
        if (rq->op == SL_BOP_DECIDE && e->lease_want > 0) { /* --lease on: op T (lease.c) */
            cmd_str(c, "RL.LEASE", 8);
            cmd_int(c, e->lease_want);
        } else {
            cmd_str(c, rq->op == SL_BOP_DECIDE ? "RL.ALLOW" : "RL.PEEK",
                    rq->op == SL_BOP_DECIDE ? 8 : 7);
        }
        cmd_mkey(c, rq->params->space, e->key, rq->keylen, rq->keylen);
        cmd_request(c, rq->params, rq->cost);
        cmd_at(c, r, rq->now_ms);
        break;
    }
}

/* RL.LEASERETURN back tag key request: op R on the module's path (lease.c
 * appends a bucket's TAKEN n; Redis's clock: leases are off with client
 * time). */
void sl__redis_cmd_module_lease_return(struct cmd *c, const char *key, size_t klen,
                                       const sl_params *p, int64_t back, int64_t tag)
{
    c->argc = c->nkeys = 0;
    cmd_str(c, "RL.LEASERETURN", 14);
    cmd_int(c, back);
    cmd_int(c, tag);
    cmd_mkey(c, p->space, key, klen, klen);
    cmd_request(c, p, 1);
}

/* RL.HOLDRESERVE / RL.HOLDSETTLE (the module's src/module/holds.c): RL.RESERVE
 * and RL.SETTLE on the module's path.  The reservations' key is
 * "sl:mr:{" key "}" (the rate key's hash tag: one slot), the rate key
 * RL.ALLOW's "sl:m0:{" key "}". */
void sl__redis_cmd_module_hold(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    c->argc = c->nkeys = 0;
    int reserve = rq->op == SL_BOP_RESERVE;
    cmd_str(c, reserve ? "RL.HOLDRESERVE" : "RL.HOLDSETTLE", reserve ? 14 : 13);
    char *k = c->key[c->nkeys++];
    memcpy(k, "sl:mr:{", 7);
    memcpy(k + 7, e->key, rq->keylen);
    k[7 + rq->keylen] = '}';
    cmd_str(c, k, rq->keylen + 8);
    cmd_mkey(c, 0, e->key, rq->keylen, rq->keylen);
    if (reserve) {
        cmd_request(c, rq->params, rq->cost);
    } else {
        cmd_int(c, (int64_t)(rq->hold_id > INT64_MAX ? 0 : rq->hold_id));
        cmd_int(c, rq->cost);
    }
    cmd_at(c, r, rq->now_ms);
}
