/*
 * script.c -- the script path's command encoder: the Lua script
 * (sluice.lua, embedded here as bytes by an .incbin: the Makefile makes
 * this object depend on it) and the EVALSHA commands of its ABI
 * (docs/redis-scripts.md): ops D, P, A, B (a batch of DECIDEs), T and R
 * (--lease on: take and return, docs/fleet.md), C
 * (RL.CHECK's plan), and FORGET's op F (a DEL).  The pieces of a plan shared with
 * the module's RL.CHECKPLAN (module_cmd.c) are here too.  Builds bytes
 * only: the sending is send.c's.
 */
#include <stdio.h>
#include <string.h>

#include "redis/holds.h"
#include "redis/redis_int.h"

/* The script, src/backend/redis/sluice.lua, as bytes in the binary (the
 * Makefile makes this object depend on it; the path is the source tree's,
 * where make runs). */
__asm__(".section .rodata\n"
        ".global sl_redis_script\n"
        ".type sl_redis_script, @object\n"
        ".balign 16\n"
        "sl_redis_script:\n"
        ".incbin \"src/backend/redis/sluice.lua\"\n"
        ".global sl_redis_script_end\n"
        "sl_redis_script_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char sl_redis_script[], sl_redis_script_end[];

/* ---- sending ------------------------------------------------------------- */

/* Writes the Redis key of (algo, space, key[0..len), tag t) into buf
 * (docs/redis-scripts.md): "sl:" a s ":{" key[0..t) "}" key[t..len). */
size_t sl__redis_key(char *buf, int algo, int space, const char *key, size_t len, size_t t)
{
    memcpy(buf, "sl:", 3);
    buf[3] = (char)('0' + algo);
    buf[4] = (char)('0' + space);
    buf[5] = ':';
    buf[6] = '{';
    memcpy(buf + 7, key, t);
    buf[7 + t] = '}';
    memcpy(buf + 8 + t, key + t, len - t);
    return len + 8;
}

static void cmd_key(struct cmd *c, int algo, int space, const char *key, size_t len, size_t tag)
{
    char *k = c->key[c->nkeys++];
    cmd_str(c, k, sl__redis_key(k, algo, space, key, len, tag));
}

/* EVALSHA sha n: the start of every script call of n keys. */
static void cmd_evalsha(struct cmd *c, const redis *r, size_t nkeys)
{
    c->argc = c->nkeys = 0;
    cmd_str(c, "EVALSHA", 7);
    cmd_str(c, r->sha, SHA_LEN);
    cmd_int(c, (int64_t)nkeys);
}

static void cmd_now(struct cmd *c, const redis *r, int64_t now_ms)
{
    if (r->o.trust_client_time)
        cmd_int(c, now_ms);
    else
        cmd_str(c, "", 0);
}

/* The 7 fields of one key (docs/redis-scripts.md). */
void sl__redis_cmd_fields(struct cmd *c, const sl_params *p, int64_t cost)
{
    cmd_int(c, p->algo);
    cmd_int(c, p->limit);
    cmd_int(c, p->window_ms);
    cmd_int(c, p->burst);
    cmd_int(c, p->precision);
    cmd_int(c, p->log_rejected);
    cmd_int(c, cost);
}

static const char pool_key[] = SL_CHECK_POOL_KEY;

/* The pool's key as a user key of plan into u (SL_MAX_KEY + sizeof
 * pool_key bytes), its tag's length in *taglen: "|spare-capacity", its own
 * tag; or in a cluster "<domain>|spare-capacity" with the domain as tag --
 * the domain's slot, so that the plan is one slot (one pool a domain:
 * docs/fleet.md).  Returns its length.  Both paths' keys are made from it
 * (sl__redis_key, cmd_mkey). */
size_t sl__redis_pool_user_key(char *u, const redis *r, const sl_check_plan *plan, size_t *taglen)
{
    for (int k = 0; r->cluster && k < plan->nitems; k++) {
        const sl_check_item *t = &plan->items[k];
        if (t->zero || t->lead != k || t->taglen > t->keylen) continue;
        memcpy(u, t->key, t->taglen);
        memcpy(u + t->taglen, pool_key, sizeof pool_key - 1);
        *taglen = t->taglen;
        return t->taglen + sizeof pool_key - 1;
    }
    memcpy(u, pool_key, sizeof pool_key - 1);
    *taglen = sizeof pool_key - 1;
    return sizeof pool_key - 1;
}

/* RL.CHECK's op C (docs/redis-scripts.md): every counter of the plan that
 * is not L = 0 and not a repeat, then the pool; lead[] gets the plan's
 * item of each key sent, in order. */
/* Op C's counters and masks: lead[] gets the plan's item of each counter
 * sent, in order (returns how many), qmask[] each leader's quota
 * descriptors, *qall and *zmask the plan's. */
int sl__redis_check_masks(const sl_check_plan *plan, int *lead, int64_t *qmask, int64_t *qall,
                       int64_t *zmask)
{
    const sl_check_item *it = plan->items;
    int m = 0;
    *qall = *zmask = 0;
    for (int k = 0; k < plan->nitems; k++) qmask[k] = 0;
    for (int k = 0; k < plan->nitems; k++) {
        int64_t bitd = (int64_t)1 << it[k].desc;
        if (it[k].quota) *qall |= bitd;
        if (it[k].quota && it[k].zero) *zmask |= bitd;
        if (it[k].quota && !it[k].zero) qmask[it[k].lead] |= bitd;
        if (!it[k].zero && it[k].lead == k) lead[m++] = k;
    }
    return m;
}

/* The plan's header after its time, the same for the script's op C and
 * RL.CHECKPLAN: m pool denied_never qall zmask. */
void sl__redis_cmd_plan_head(struct cmd *c, const sl_check_plan *plan, int m, int64_t qall,
                          int64_t zmask)
{
    cmd_int(c, m);
    cmd_int(c, plan->has_pool);
    cmd_int(c, plan->denied_never);
    cmd_int(c, qall);
    cmd_int(c, zmask);
}

/* One counter's fields, the same on both paths: algo L W B P log_rejected
 * cost shadow quota lyft ceiling qmask. */
void sl__redis_cmd_plan_item(struct cmd *c, const sl_check_item *t, int64_t qmask)
{
    sl__redis_cmd_fields(c, &t->p, t->cost);
    cmd_int(c, t->shadow);
    cmd_int(c, t->quota);
    cmd_int(c, t->lyft);
    cmd_int(c, t->elastic ? t->rl->elastic_limit : 0);
    cmd_int(c, qmask);
}

static void cmd_check(struct cmd *c, const redis *r, const sl_check_plan *plan, int *lead)
{
    const sl_check_item *it = plan->items;
    int64_t qall, zmask, qmask[SL_MAX_BATCH];
    int m = sl__redis_check_masks(plan, lead, qmask, &qall, &zmask);
    /* the concurrency limits' leases (leaders: one a key): their keys are
     * RL.ACQUIRE's on the lease key, so RL.RELEASE key id gives one back */
    int nl = 0;
    for (int j = 0; j < plan->nleases; j++) nl += plan->leases[j].lead == j;
    cmd_evalsha(c, r, (size_t)m + (plan->has_pool ? 1 : 0) + 2 * (size_t)nl);
    for (int i = 0; i < m; i++) {
        const sl_check_item *t = &it[lead[i]];
        cmd_key(c, (int)t->p.algo, t->p.space, t->key, t->keylen, t->taglen);
    }
    if (plan->has_pool) {
        char u[KEYBUF];
        size_t tag, n = sl__redis_pool_user_key(u, r, plan, &tag);
        cmd_key(c, (int)plan->pool.algo, plan->pool.space, u, n, tag);
    }
    for (int j = 0; j < plan->nleases; j++)
        if (plan->leases[j].lead == j) sl__redis_check_lease_keys(c, plan, j);
    cmd_str(c, "C", 1);
    cmd_now(c, r, plan->now_ms);
    sl__redis_cmd_plan_head(c, plan, m, qall, zmask);
    for (int i = 0; i < m; i++) sl__redis_cmd_plan_item(c, &it[lead[i]], qmask[lead[i]]);
    if (plan->has_pool) sl__redis_cmd_fields(c, &plan->pool, plan->cost);
    cmd_int(c, nl); /* then take shadow max ttl a lease */
    for (int j = 0; j < plan->nleases; j++) {
        const sl_check_lease *ls = &plan->leases[j];
        if (ls->lead != j) continue;
        cmd_int(c, ls->take);
        cmd_int(c, ls->shadow);
        cmd_int(c, plan->lim[j].params.limit);
        cmd_int(c, plan->lim[j].params.window_ms);
    }
}

/* Builds e's command for the script (docs/redis-scripts.md): one
 * EVALSHA of op D, P, A or C; FORGET's op F (the DEL of the key's every
 * algorithm). */
void sl__redis_cmd_script(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    int lead[SL_MAX_BATCH];

    switch (rq->op) {
    case SL_BOP_FORGET: /* op F: a DEL inside the script, so that a NOSCRIPT
                           resend cannot put a decision sent before it after it */
        cmd_evalsha(c, r, (size_t)(rq->algo_hi - rq->algo_lo));
        for (int a = rq->algo_lo; a < rq->algo_hi; a++)
            cmd_key(c, a, 0, e->key, rq->keylen, rq->keylen);
        cmd_str(c, "F", 1);
        break;
    case SL_BOP_CHECK: cmd_check(c, r, rq->plan, lead); break;
    case SL_BOP_DECIDE_ALL:
        cmd_evalsha(c, r, rq->nreqs);
        for (size_t i = 0; i < rq->nreqs; i++) {
            const sl_request *q = &e->reqs[i];
            cmd_key(c, (int)q->params->algo, q->params->space, q->key, q->keylen, q->keylen);
        }
        cmd_str(c, "A", 1);
        cmd_now(c, r, rq->now_ms);
        for (size_t i = 0; i < rq->nreqs; i++)
            sl__redis_cmd_fields(c, e->reqs[i].params, e->reqs[i].cost);
        break;
    default: /* DECIDE, PEEK */
        cmd_evalsha(c, r, 1);
        cmd_key(c, (int)rq->params->algo, rq->params->space, e->key, rq->keylen, rq->keylen);
        cmd_str(c, rq->op != SL_BOP_DECIDE ? "P" : e->lease_want > 0 ? "T" : "D", 1);
        cmd_now(c, r, rq->now_ms);
        sl__redis_cmd_fields(c, rq->params, rq->cost);
        if (rq->op == SL_BOP_DECIDE && e->lease_want > 0) cmd_int(c, e->lease_want); /* lease.c */
        break;
    }
}

/* Op R (--lease on, lease.c): hands back `back` units of a lease of
 * `taken` units of (key, p) taken with `tag`. */
void sl__redis_cmd_lease_return(struct cmd *c, const redis *r, const char *key, size_t klen,
                                const sl_params *p, int64_t back, int64_t taken, int64_t tag)
{
    cmd_evalsha(c, r, 1);
    cmd_key(c, (int)p->algo, p->space, key, klen, klen);
    cmd_str(c, "R", 1);
    cmd_now(c, r, 0);
    sl__redis_cmd_fields(c, p, back);
    cmd_int(c, taken);
    cmd_int(c, tag);
}

/* Builds batch b's command (n >= 2 DECIDEs): one op B call (op M's
 * decisions, two arguments a key). */
void sl__redis_cmd_batch(struct cmd *c, const redis *r, const batch *b)
{
    cmd_evalsha(c, r, (size_t)b->n);
    for (int i = 0; i < b->n; i++) {
        const pend *e = b->m[i];
        const sl_breq *rq = e->rq;
        cmd_key(c, (int)rq->params->algo, rq->params->space, e->key, rq->keylen, rq->keylen);
    }
    cmd_str(c, "B", 1);
    cmd_now(c, r, b->now);
    for (int i = 0; i < b->n; i++) {
        const sl_params *p = b->m[i]->rq->params;
        int len = snprintf(c->par[i], sizeof c->par[i], "%d %lld %lld %lld %lld %d", (int)p->algo,
                           (long long)p->limit, (long long)p->window_ms, (long long)p->burst,
                           (long long)p->precision, p->log_rejected);
        cmd_str(c, c->par[i], (size_t)len);
        cmd_int(c, b->m[i]->rq->cost);
    }
}
