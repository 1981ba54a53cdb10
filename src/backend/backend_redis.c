/*
 * backend_redis.c -- the Redis backend (backend_redis.h): how it works
 * (below), its table of operations (the seam, backend.h), a worker's
 * channel, a request's checks and its way to a connection, the start-up
 * check and the constructors (sl_backend_redis_new; sl_backend_open, the
 * backend --backend names).  Its parts, one concern each, are under
 * redis/ (redis_int.h): url.c (--backend's URLs), conn.c (the
 * connection), send.c (requests in flight, batches, replies), fallback.c
 * (--on-backend-error), durable.c (--durability: WAIT), deny_cache.c, script.c and module_cmd.c (the two
 * command encoders), route.c (ring and cluster routing), info.c (INFO,
 * /metrics, the status page), with reply.c, ring.c and slots.c.
 *
 * A channel is one hiredis async connection on its worker's event_base,
 * in one of three states: DOWN (no connection; a timer will make one),
 * CONNECTING (made; AUTH, SELECT and SCRIPT LOAD sent, not yet answered)
 * and UP.  Requests are sent in CONNECTING too: hiredis queues them behind
 * the handshake, and they are answered in order.
 *
 * Every request sent is one pooled entry (pend) on the channel's list,
 * oldest first, with its deadline; Redis answers a connection's commands
 * in order, so the oldest entry's deadline is the next to pass, and one
 * timer per channel watches it (and the handshake's).  When a deadline
 * passes, the connection is freed: hiredis then calls every callback still
 * pending with a NULL reply, and each of those requests is answered by the
 * policy -- so nothing waits past its deadline, and no late reply is ever
 * read.  Then the channel is DOWN and reconnects after
 * random(0, min(SL_REDIS_BACKOFF_CAP, SL_REDIS_BACKOFF_BASE * 2^n)) ms.
 *
 * Batching: the DECIDEs a channel gets during one loop turn are queued
 * (the open batch) and sent as ONE script call (op B: op M's n decisions
 * in order, two arguments a key) when the turn's other callbacks have run:
 * the first of a turn makes the channel's flush event active, and libevent
 * runs an event made active during a turn after those already active, in
 * the same turn -- so a lone request on an idle channel is sent in its own
 * turn, as a plain D.  While a batch is in flight (busy), the next ones
 * wait in the open batch for its answer, so a busy channel sends few,
 * large batches; a full batch (SL_REDIS_BATCH_MAX) goes at once.  Every
 * other request sends the open batch first, so Redis runs a connection's
 * commands in the order they were submitted.  With client time the
 * members of a batch share one `now`: a request with another time sends
 * the open batch and opens a new one.  Each member keeps its own pend
 * (deadline, policy, deny cache), answered in order from the reply's
 * elements.  hiredis writes whatever a turn appended in one write.
 *
 * Several servers: a worker's channel (wchan) holds one such connection
 * (rchan) per server, each with everything above of its own; a request
 * goes to one of them -- with a ring, the owner of its hash tag
 * (redis/ring.c); in a Redis Cluster, the master of its slot in the
 * worker's map (redis/slots.c), read from CLUSTER SLOTS at start and again
 * after a MOVED, a CLUSTERDOWN or a lost master.  A cluster's batches hold
 * one slot's DECIDEs (a call's keys may not span slots), and requests
 * follow MOVED / ASK / TRYAGAIN up to SL_REDIS_REDIRECTS times within
 * their deadline (redirect; a batch's members each alone).
 *
 * RL.CHECK is one script call too (op C): the plan's counters and flags
 * in, the outcome out (cmd_check, redis/reply.c's sl__redis_parse_reply).
 *
 * On a Redis with the sluice module loaded (docs/module.md) a channel
 * sends the module's commands instead (sl__redis_cmd_module: RL.ALLOW, RL.PEEK,
 * RL.DECIDEALL, RL.CHECKPLAN, RL.RESET on keys "sl:m" space ":{" tag "}"
 * rest, apart from the script's), one RL.ALLOW per DECIDE with no batch.
 * The path is found at each handshake (COMMAND INFO RL.CHECKPLAN, then a
 * probe RL.PEEK: on_cmdinfo, on_probe) and kept in rchan.module; a
 * request remembers the path it was sent on (pend.module) to read its
 * reply.
 *
 * The deny cache (one fixed table per channel, direct-mapped by the key):
 * a denial (key, parameters, cost c, retry_after d) answered at the
 * request's time t0 is kept as absolute times, and a later request for the
 * same key, parameters and cost c (in a fixed window, any cost from c to
 * L) at t < t0 + d is denied here, with
 * retry_after and reset_after counted down from those times; a request on
 * the key with other parameters or another cost goes to Redis and, being
 * a decision that may charge, drops the entry.  (A larger cost is denied
 * too, but its own retry_after is Redis's to say -- except in a fixed
 * window, where every cost up to L gets the same answer.)  A denial answered
 * here does not move the key's clock in Redis: with client time running
 * backwards a later request may be decided at an earlier time than the
 * local engine would, which never lets more through (docs/fleet.md).  t0 is
 * the request's time (the caller's with --trust-client-time, else this
 * node's clock when it sent the request, which is before Redis decided: so
 * an entry ends no later than the denial it copies).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hiredis/adapters/libevent.h>

#include "backend_local.h"
#include "redis/holds.h"
#include "redis/lease.h"
#include "redis/redis_int.h"
#include "redis/sentinel.h"

void sl__redis_set_last_error(redis *r, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&r->lock);
    va_start(ap, fmt);
    vsnprintf(r->last_error, sizeof r->last_error, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&r->lock);
}

/* ---- the seam ------------------------------------------------------------ */

/* Frees ch: what is in flight or queued is answered "channel closed". */
static void conn_free(rchan *ch)
{
    if (ch == NULL) return;
    ch->closing = 1;
    sl__redis_lease_free(ch, ch->lease); /* what is held goes back while it still can */
    ch->lease = NULL;
    if (ch->ac != NULL) {
        redisAsyncContext *ac = ch->ac;
        sl__redis_go_down(ch, "closing");
        redisAsyncFree(ac); /* answers what is in flight: "channel closed" */
    }
    sl__redis_flush_open(ch); /* this turn's DECIDEs, never sent: "channel closed" */
    sl__redis_durable_free(ch);
    event_free(ch->wait_ev);
    sl__sentinel_chan_free(ch);
    sl__redis_set_path(ch, 0);
    atomic_fetch_sub(&ch->r->nconn, 1);
    event_free(ch->timer);
    event_free(ch->retry);
    event_free(ch->flush);
    while (ch->free_batch != NULL) {
        batch *b = ch->free_batch;
        ch->free_batch = b->next;
        free(b);
    }
    while (ch->free != NULL) {
        pend *e = ch->free;
        ch->free = e->next;
        free(e);
    }
    free(ch->lplan);
    free(ch->cmd);
    free(ch->cache);
    free(ch);
}

/* A worker's connection to node n on loop, not connected yet; NULL when
 * out of memory. */
rchan *sl__redis_conn_new(redis *r, rnode *n, struct event_base *loop)
{
    rchan *ch = calloc(1, sizeof *ch);
    if (ch == NULL) return NULL;
    ch->r = r;
    ch->node = n;
    ch->loop = loop;
    ch->latest_sent = INT64_MIN;
    ch->rng = (uint64_t)sl__mono_ns() ^ ((uintptr_t)ch * 0x9e3779b97f4a7c15ULL);
    if (r->o.deny_cache) ch->cache = calloc(SL_REDIS_CACHE_SLOTS, sizeof *ch->cache);
    ch->cmd = malloc(sizeof *ch->cmd);
    ch->flush = event_new(loop, -1, 0, sl__redis_on_flush, ch);
    ch->timer = evtimer_new(loop, sl__redis_on_timer, ch);
    ch->retry = evtimer_new(loop, sl__redis_on_retry, ch);
    ch->wait_ev = event_new(loop, -1, 0, sl__redis_on_wait_turn, ch); /* --durability */
    if ((r->o.deny_cache && ch->cache == NULL) || ch->timer == NULL || ch->retry == NULL ||
        ch->cmd == NULL || ch->flush == NULL || ch->wait_ev == NULL) {
        if (ch->wait_ev) event_free(ch->wait_ev);
        if (ch->timer) event_free(ch->timer);
        if (ch->retry) event_free(ch->retry);
        if (ch->flush) event_free(ch->flush);
        free(ch->cache);
        free(ch->cmd);
        free(ch);
        return NULL;
    }
    if (r->o.lease && !r->o.trust_client_time && (ch->lease = sl__redis_lease_new(ch)) == NULL) {
        ch->closing = 1; /* nothing to hand back yet: frees as a new connection's parts */
        event_free(ch->wait_ev), event_free(ch->timer), event_free(ch->retry);
        event_free(ch->flush);
        free(ch->cache), free(ch->cmd), free(ch);
        return NULL;
    }
    atomic_fetch_add(&r->nconn, 1);
    sl__redis_set_path(ch, n->module_at_start);
    ch->holdcheck = n->hold_at_start;
    return ch;
}

static sl_bchan *redis_channel(sl_backend *b, void *loop)
{
    redis *r = (redis *)b;
    if (loop == NULL) {
        sl__backend_set_err(b, SL_EINVAL, "the Redis backend needs an event loop");
        return NULL;
    }
    /* a cluster's masters may grow (node_add): room for every one */
    int n = r->cluster ? SL_REDIS_MASTERS_MAX : atomic_load(&r->nnodes);
    wchan *w = calloc(1, sizeof *w + (size_t)n * sizeof w->c[0]);
    if (w != NULL && r->cluster && (w->map = malloc(sizeof *w->map)) != NULL) {
        pthread_mutex_lock(&r->lock);
        memcpy(w->map, r->map, sizeof *w->map);
        pthread_mutex_unlock(&r->lock);
    }
    if (w == NULL || (r->cluster && w->map == NULL)) {
        if (w != NULL) free(w);
        sl__backend_set_err(b, SL_ENOMEM, "out of memory");
        return NULL;
    }
    w->base.b = b;
    w->r = r;
    w->loop = loop;
    w->n = n;
    int known = atomic_load(&r->nnodes); /* a cluster's: the masters found so far */
    for (int i = 0; i < known; i++)
        if ((w->c[i] = sl__redis_conn_new(r, &r->node[i], loop)) == NULL) {
            while (i > 0) conn_free(w->c[--i]);
            free(w->map);
            free(w);
            sl__backend_set_err(b, SL_ENOMEM, "out of memory");
            return NULL;
        } else {
            w->c[i]->w = w;
        }
    /* counted before the first connects: a node is up when every channel's
     * connection to it is */
    atomic_fetch_add(&r->nchan, 1);
    for (int i = 0; i < known; i++) sl__redis_connect_now(w->c[i]);
    return &w->base;
}

static void redis_channel_free(sl_bchan *c)
{
    wchan *w = (wchan *)c;
    for (int i = 0; i < w->n; i++) conn_free(w->c[i]);
    atomic_fetch_sub(&w->r->nchan, 1);
    free(w->map);
    free(w);
}

/* The checks the local engine makes, in its order: 0 or the SL_E* code. */
static int valid_one(const sl_params *p, const char *key, size_t klen, int64_t now, int64_t cost)
{
    int rc = sl_params_check(p);
    if (rc != 0) return rc;
    if (key == NULL || klen == 0 || klen > SL_MAX_KEY) return SL_EKEY;
    if (cost < 0 || cost > SL_MAX_LIMIT) return SL_ECOST;
    if (now <= -SL_MAX_TIME_MS || now >= SL_MAX_TIME_MS) return SL_ETIME;
    return 0;
}

static int valid_all(const sl_breq *rq)
{
    if (rq->reqs == NULL || rq->results == NULL || rq->nreqs == 0 || rq->nreqs > SL_MAX_BATCH)
        return SL_EINVAL;
    for (size_t i = 0; i < rq->nreqs; i++) {
        const sl_request *q = &rq->reqs[i];
        int rc = valid_one(q->params, q->key, q->keylen, rq->now_ms, q->cost);
        if (rc != 0) return rc;
        for (size_t j = 0; j < i; j++) /* one state may not be charged twice */
            if (rq->reqs[j].params->algo == q->params->algo &&
                rq->reqs[j].params->space == q->params->space && rq->reqs[j].keylen == q->keylen &&
                memcmp(rq->reqs[j].key, q->key, q->keylen) == 0)
                return SL_EINVAL;
    }
    return 0;
}

/* RL.CHECK's plan as the script takes it: every counter's parameters
 * valid, the time in range (what the local engine checks first). */
static int valid_plan(const sl_check_plan *plan)
{
    if (plan->nitems < 0 || plan->nitems > SL_MAX_BATCH || plan->n < 1 ||
        plan->n > SL_CHECK_MAX_DESC)
        return SL_EINVAL;
    for (int k = 0; k < plan->nitems; k++) {
        const sl_check_item *t = &plan->items[k];
        if (t->zero || t->lead != k) continue;
        int rc = valid_one(&t->p, t->key, t->keylen, plan->now_ms, t->cost);
        if (rc != 0) return rc;
    }
    if (plan->nleases < 0 || plan->nleases > SL_CHECK_MAX_DESC) return SL_EINVAL;
    for (int j = 0; j < plan->nleases; j++) { /* sl_acquire's checks */
        const sl_params *lp = &plan->lim[j].params;
        if (plan->leases[j].keylen == 0 || plan->leases[j].keylen > SL_MAX_KEY) return SL_EKEY;
        if (lp->limit < 1 || lp->limit > SL_MAX_CONCURRENCY) return SL_ELIMIT;
        if (lp->window_ms < 1 || lp->window_ms > SL_MAX_LEASE_TTL_MS) return SL_EWINDOW;
    }
    if (plan->has_pool) return valid_one(&plan->pool, "p", 1, plan->now_ms, plan->cost);
    return 0;
}

/* Submits rq on ch (where: TO_REDIS); in a cluster, a valid rq whose
 * slot has no master is answered by the policy (NO_MASTER), one whose keys
 * are in several slots is refused (CROSSSLOT). */
void sl__redis_submit(rchan *ch, sl_breq *rq, int where)
{
    redis *r = ch->r;
    int rc = 0;
    long long want = 0; /* --lease on: > 0, sent as op T (lease.c) */
    int fresh = 0;      /* --lease on: not from the deny cache (lease.c) */
    rq->err[0] = '\0';
    switch (rq->op) {
    case SL_BOP_DECIDE:
    case SL_BOP_PEEK:
        if (rq->params == NULL) {
            rc = SL_EINVAL;
            break;
        }
        rc = valid_one(rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost);
        if (rc == 0 && rq->op == SL_BOP_DECIDE && ch->lease != NULL &&
            (want = sl__redis_lease_decide(ch, rq, &fresh)) < 0)
            return; /* a lease answered it (lease.c) */
        if (rc == 0 && !fresh && sl__redis_cache_answer(ch, rq)) return;
        break;
    case SL_BOP_FORGET:
        if (rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY)
            rc = SL_EKEY;
        else if (rq->algo_lo < 0 || rq->algo_hi > SL_ALGO_COUNT || rq->algo_lo >= rq->algo_hi)
            rc = SL_EINVAL;
        else
            sl__redis_cache_forget(ch, rq->key, rq->keylen);
        break;
    case SL_BOP_DECIDE_ALL:
        rc = valid_all(rq);
        for (size_t i = 0; rc == 0 && i < rq->nreqs; i++) /* they may charge: see the top */
            sl__redis_cache_forget(ch, rq->reqs[i].key, rq->reqs[i].keylen);
        break;
    case SL_BOP_CHECK:
        /* the plan's counters are space 1, which no request the deny
         * cache answers (space 0) shares: nothing there to drop */
        rc = rq->plan == NULL || rq->outcome == NULL ? SL_EINVAL : valid_plan(rq->plan);
        if (rc == 0 && rq->plan->nleases > 0 && ch->module && !ch->holdcheck) {
            /* a module older than RL.HOLDCHECK takes no leases (RL.CHECKPLAN
             * has none; in a Cluster and on a ring their keys carry the
             * domain's tag, holds.c, so one command finds them beside the
             * rates on either path) */
            sl__breq_fail(rq, SL_EINVAL,
                          "rule %.*s: RL.CHECK takes concurrency leases on Redis only by "
                          "the script on one server, not %s (docs/rules.md)",
                          (int)strcspn(rq->plan->lim[0].name, "#"), rq->plan->lim[0].name,
                          "with a sluice module older than RL.HOLDCHECK");
            return;
        }
        break;
    case SL_BOP_ACQUIRE:
    case SL_BOP_RELEASE:
    case SL_BOP_RESERVE:
    case SL_BOP_SETTLE: /* holds.c; a reservation charges or refunds the key's rate state */
        rc = sl__redis_hold_check(rq);
        if (rc == 0 && (rq->op == SL_BOP_RESERVE || rq->op == SL_BOP_SETTLE))
            sl__redis_cache_forget(ch, rq->key, rq->keylen);
        break;
    default: rc = SL_EINVAL; break;
    }
    if (rc != 0) {
        rq->rc = rc;
        rq->cb(rq);
        return;
    }
    if (where == CROSSSLOT) {
        sl__breq_fail(rq, SL_EINVAL,
                      "the keys of this request are in several Redis Cluster slots: "
                      "decided all-or-none only in one (docs/fleet.md, \"Redis Cluster\")");
        return;
    }
    if (ch->ac == NULL || where == NO_MASTER) { /* DOWN (or no master known): the policy */
        sl__redis_by_policy(ch, rq, rq->key, rq->reqs);
        return;
    }
    if (ch->npend >= SL_REDIS_PENDING_MAX) {
        /* Redis is not keeping up (slow, or stopped until the timeout
         * drops it): what waits for it is bounded, the rest is the
         * policy's, as when it is down */
        atomic_fetch_add(&r->errors, 1);
        sl__redis_set_last_error(r,
                       "%d requests wait for Redis on one connection (the bound): "
                       "answered by the policy",
                       SL_REDIS_PENDING_MAX);
        sl__redis_by_policy(ch, rq, rq->key, rq->reqs);
        return;
    }
    pend *e = ch->free;
    if (e != NULL)
        ch->free = e->next;
    else if ((e = calloc(1, sizeof *e)) == NULL) {
        sl__breq_fail(rq, SL_ENOMEM, "out of memory");
        return;
    }
    e->rq = rq;
    e->ch = ch;
    e->resent = 0;
    e->redirects = 0;
    e->flushed = 0;
    e->keys = NULL;
    e->reqs = NULL;
    e->lease_want = want;
    if (rq->op == SL_BOP_DECIDE_ALL) { /* the keys, copied: the caller's may go */
        size_t total = 0;
        for (size_t i = 0; i < rq->nreqs; i++) total += rq->reqs[i].keylen;
        e->keys = malloc(total);
        e->reqs = malloc(rq->nreqs * sizeof *e->reqs);
        if (e->keys == NULL || e->reqs == NULL) {
            sl__redis_pend_put(ch, e);
            sl__breq_fail(rq, SL_ENOMEM, "out of memory");
            return;
        }
        for (size_t i = 0, off = 0; i < rq->nreqs; i++) {
            e->reqs[i] = rq->reqs[i];
            memcpy(e->keys + off, rq->reqs[i].key, rq->reqs[i].keylen);
            e->reqs[i].key = e->keys + off;
            off += rq->reqs[i].keylen;
        }
    } else if (rq->op != SL_BOP_CHECK) { /* a CHECK's plan lives until its answer */
        memcpy(e->key, rq->key, rq->keylen);
    }
    if (ch->cache != NULL && rq->op == SL_BOP_DECIDE)
        e->gen = ch->cache[sl__redis_slot_of(e->key, rq->keylen, rq->params->space)].gen;
    int64_t t = rq->op == SL_BOP_CHECK ? rq->plan->now_ms : rq->now_ms;
    e->latest = t >= ch->latest_sent;
    if (e->latest) ch->latest_sent = t;
    e->deadline = sl__mono_ms() + r->o.timeout_ms;
    sl__redis_link_pend(ch, e);
    /* the script's batches; the module's RL.ALLOWs go as they come (hiredis
     * writes a turn's commands in one write, Redis reads them in one) */
    if (rq->op == SL_BOP_DECIDE && !ch->module && want == 0 && sl__redis_queue(ch, e) == 0) {
        if (e == ch->head) sl__redis_arm_timer(ch);
        return;
    }
    sl__redis_flush_open(ch); /* this turn's DECIDEs before it: Redis runs them in order */
    if (ch->ac == NULL || sl__redis_send_pend(ch, e) != 0) {
        sl__redis_unlink_pend(ch, e);
        sl__redis_by_policy(ch, rq, e->key, e->reqs);
        sl__redis_pend_put(ch, e);
        return;
    }
    if (e == ch->head) sl__redis_arm_timer(ch);
}

static void redis_stats(sl_backend *b, sl_backend_stats *out)
{
    (void)b;
    memset(out, 0, sizeof *out); /* Redis keeps the state: INFO of Redis tells */
}

static void redis_free_all(redis *r);

static void redis_free(sl_backend *b) { redis_free_all((redis *)b); }

/* Every request, leases and reservations (SPEC 10, holds.c) too, is
 * routed by its key (route.c). */
static void redis_submit(sl_bchan *c, sl_breq *rq) { sl__redis_route(c, rq); }

const sl_backend_ops sl__redis_ops = {
    "redis",    redis_channel,        redis_channel_free, redis_submit,          redis_stats,
    redis_free, sl__redis_info_lines, sl__redis_metrics,  sl_backend_redis_info,
};

/* One command on the start-up check's connection: the reply, or NULL with
 * err set ("what: why"). */
static redisReply *start_cmd(redisContext *c, const char *shown, const char *what, char *err,
                             size_t errlen, int argc, const char **argv, const size_t *argvlen)
{
    redisReply *x = redisCommandArgv(c, argc, argv, argvlen);
    if (x == NULL) {
        snprintf(err, errlen, "Redis at %s: %s: %s", shown, what,
                 c->errstr[0] ? c->errstr : "no answer");
        return NULL;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "Redis at %s refused %s: %s", shown, what, x->str);
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

/* The handshake's test for the module on the start-up check's connection:
 * 1 when RL.CHECKPLAN exists and RL.PEEK answers (with AT when client
 * time is trusted), else 0 -- an error (no such command, an ACL's NOPERM)
 * is "no module", with what Redis said into why ("": no module at all). */
static int start_probe(redisContext *c, int trust_client_time, const char *key, char *why,
                       size_t cap)
{
    redisReply *x = redisCommand(c, "COMMAND INFO RL.CHECKPLAN");
    int ok = sl__redis_cmdinfo_says(x, why, cap) == 1;
    if (x != NULL) freeReplyObject(x);
    if (!ok) return 0;
    x = trust_client_time
            ? redisCommand(c, "RL.PEEK %s 1 1000 AT %lld", key, (long long)sl__wall_ms())
            : redisCommand(c, "RL.PEEK %s 1 1000", key);
    ok = sl__redis_probe_says(x, why, cap);
    if (x != NULL) freeReplyObject(x);
    return ok;
}

/* The start-up check of one node nd: reachable, the password, the db, the
 * script (its SHA1 into sha), the module (nd->module_at_start, told to
 * on_path).  0, or -1 with err set. */
static int check_node(redis *r, rnode *nd, const char *probe, const sl_redis_opts *o, char *sha,
                      char *err, size_t errlen)
{
    const sl_redis_url *u = &nd->url;
    int64_t timeout_ms = o->timeout_ms;
    int64_t ms = timeout_ms > SL_REDIS_HANDSHAKE_MS ? timeout_ms : SL_REDIS_HANDSHAKE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(u->host, u->port, tv);
    redisReply *x = NULL;
    int ok = 0;
    if (c == NULL || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", u->shown,
                 c ? c->errstr : "out of memory");
        goto out;
    }
    redisSetTimeout(c, tv);
    sl_redis_rbound rb = {0}; /* the reply bounds here too (no async context to check) */
    sl__redis_reader_bound(c->reader, &rb);
    if (u->pass[0] != '\0') {
        const char *av[3] = {"AUTH", u->user, u->pass};
        size_t al[3] = {4, strlen(u->user), strlen(u->pass)};
        int user = u->user[0] != '\0';
        const char **a = user ? av : (const char *[]){"AUTH", u->pass};
        const size_t *l = user ? al : (const size_t[]){4, strlen(u->pass)};
        if ((x = start_cmd(c, u->shown, "AUTH (wrong user or password?)", err, errlen, user ? 3 : 2,
                           a, l)) == NULL)
            goto out;
        freeReplyObject(x);
    }
    if (u->db != 0) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", u->db);
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)n};
        if ((x = start_cmd(c, u->shown, "SELECT of the db", err, errlen, 2, av, al)) == NULL)
            goto out;
        freeReplyObject(x);
    }
    const char *av[3] = {"SCRIPT", "LOAD", sl_redis_script};
    size_t al[3] = {6, 4, (size_t)(sl_redis_script_end - sl_redis_script)};
    if ((x = start_cmd(c, u->shown, "SCRIPT LOAD", err, errlen, 3, av, al)) == NULL) goto out;
    if (x->type != REDIS_REPLY_STRING || x->len != SHA_LEN) {
        snprintf(err, errlen, "Redis at %s: SCRIPT LOAD did not answer a SHA1", u->shown);
        freeReplyObject(x);
        goto out;
    }
    memcpy(sha, x->str, SHA_LEN);
    freeReplyObject(x);
    char why[320];
    if (r->sentinel != NULL) { /* the server a Sentinel named must be the master */
        x = redisCommand(c, "ROLE");
        int master = sl__sentinel_role_says(x, why, sizeof why);
        if (x != NULL) freeReplyObject(x);
        if (!master) {
            snprintf(err, errlen, "Redis at %s, the master a Sentinel of %s named: %s", u->shown,
                     sl__sentinel_shown(r->sentinel), why);
            goto out;
        }
    }
    nd->module_at_start = start_probe(c, o->trust_client_time, probe, why, sizeof why);
    if (nd->module_at_start) { /* RL.CHECK's leases on the module (conn.c asks again) */
        char no[8];
        x = redisCommand(c, "COMMAND INFO RL.HOLDCHECK");
        nd->hold_at_start = sl__redis_cmdinfo_says(x, no, sizeof no) == 1;
        if (x != NULL) freeReplyObject(x);
    }
    sl__redis_tell_path(r, nd, nd->module_at_start, why);
    ok = 1;
out:
    if (c != NULL) redisFree(c);
    return ok ? 0 : -1;
}

/* A cluster's slot map at start: CLUSTER SLOTS from the first of the n
 * seeds u[] that answers, into r->map and r->node (the masters).  0, or
 * -1 with err set (the last seed's failure). */
static int cluster_start(redis *r, const sl_redis_url *u, int n, char *err, size_t errlen)
{
    int64_t ms = r->o.timeout_ms > SL_REDIS_HANDSHAKE_MS ? r->o.timeout_ms : SL_REDIS_HANDSHAKE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    for (int i = 0; i < n; i++) {
        redisContext *c = redisConnectWithTimeout(u[i].host, u[i].port, tv);
        redisReply *x = NULL;
        if (c == NULL || c->err) {
            snprintf(err, errlen, "cannot connect to Redis Cluster seed %s: %s", u[i].shown,
                     c ? c->errstr : "out of memory");
            if (c != NULL) redisFree(c);
            continue;
        }
        redisSetTimeout(c, tv);
        sl_redis_rbound rb = {0}; /* the reply bounds (redis/reply.h) */
        sl__redis_reader_bound(c->reader, &rb);
        if (u[i].pass[0] != '\0') {
            x = u[i].user[0] != '\0' ? redisCommand(c, "AUTH %s %s", u[i].user, u[i].pass)
                                     : redisCommand(c, "AUTH %s", u[i].pass);
            int bad = x == NULL || x->type == REDIS_REPLY_ERROR;
            snprintf(err, errlen,
                     "Redis Cluster seed %s refused AUTH (wrong user or password?): %s", u[i].shown,
                     x == NULL ? c->errstr
                     : bad     ? x->str
                               : "");
            if (x != NULL) freeReplyObject(x);
            if (bad) {
                redisFree(c);
                continue;
            }
        }
        x = redisCommand(c, "CLUSTER SLOTS");
        int rc = sl__redis_parse_slots(r, x, u[i].host, r->map);
        if (rc != 0)
            snprintf(err, errlen, "Redis Cluster seed %s: CLUSTER SLOTS: %s", u[i].shown,
                     x == NULL                      ? c->errstr
                     : x->type == REDIS_REPLY_ERROR ? x->str
                                                    : "not a slot map");
        if (x != NULL) freeReplyObject(x);
        redisFree(c);
        if (rc == 0 && atomic_load(&r->nnodes) == 0) {
            snprintf(err, errlen, "Redis Cluster seed %s: no slot has a master", u[i].shown);
            return -1;
        }
        if (rc == 0) return 0;
        sl_slotmap_clear(r->map);
    }
    return -1;
}

static void redis_free_all(redis *r)
{
    sl__sentinel_free(r->sentinel);
    sl_store_free(r->store);
    sl_ring_free(r->ring);
    free(r->map);
    free(r->node);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

sl_backend *sl_backend_redis_new(const sl_redis_opts *o, char *err, size_t errlen)
{
    redis *r = calloc(1, sizeof *r);
    sl_redis_url *u = calloc(SL_RING_MAX, sizeof *u);
    if (r == NULL || u == NULL || pthread_mutex_init(&r->lock, NULL) != 0) {
        snprintf(err, errlen, "out of memory");
        free(r);
        free(u);
        return NULL;
    }
    char why[600];
    int n = 0;
    sl_redis_sentinel sen;
    if (strncasecmp(o->url, "redis-sentinel://", 17) == 0) { /* one node: the master */
        if (sl_redis_sentinel_parse(o->url, strlen(o->url), &sen, why, sizeof why) != 0) {
            snprintf(err, errlen, "invalid --backend %s", why);
            free(u);
            redis_free_all(r);
            return NULL;
        }
        r->o = *o;
        if ((r->sentinel = sl__sentinel_new(&sen)) == NULL) {
            snprintf(err, errlen, "out of memory");
            free(u);
            redis_free_all(r);
            return NULL;
        }
        if (sl__sentinel_start(r, &u[0], err, errlen) != 0) {
            free(u);
            redis_free_all(r);
            return NULL;
        }
        n = 1;
    } else if (sl_redis_urls_parse(o->url, strlen(o->url), u, &n, why, sizeof why) != 0) {
        snprintf(err, errlen, "invalid --backend %s", why);
        free(u);
        redis_free_all(r);
        return NULL;
    }
    r->o = *o;
    r->o.url = NULL;
    if (r->o.timeout_ms < 1) r->o.timeout_ms = 1;
    if (r->o.fleet_size < 1) r->o.fleet_size = 1;
    r->node = calloc(u[0].cluster ? SL_REDIS_MASTERS_MAX : SL_RING_MAX, sizeof *r->node);
    if (r->node != NULL && u[0].cluster) { /* the masters, from a seed's CLUSTER SLOTS */
        r->cluster = 1;
        r->seed = u[0];
        size_t used = (size_t)snprintf(r->shown, sizeof r->shown, "redis-cluster://%s%s", u[0].user,
                                       u[0].pass[0] ? ":***@" : "");
        for (int i = 0; i < n && used < sizeof r->shown; i++)
            used += (size_t)snprintf(r->shown + used, sizeof r->shown - used, "%s%s%s%s:%d",
                                     i ? "," : "", strchr(u[i].host, ':') ? "[" : "", u[i].host,
                                     strchr(u[i].host, ':') ? "]" : "", u[i].port);
        if ((r->map = malloc(sizeof *r->map)) == NULL) {
            snprintf(err, errlen, "out of memory");
        } else if (cluster_start(r, u, n, err, errlen) != 0) {
            free(u);
            redis_free_all(r);
            return NULL;
        }
        n = 0; /* the masters are in r->node already */
    }
    if (!r->cluster) atomic_store(&r->nnodes, n);
    const char *ids[SL_RING_MAX];
    for (int i = 0; r->node != NULL && i < n; i++) {
        rnode *nd = &r->node[i];
        nd->url = u[i];
        sl__redis_url_id(&u[i], nd->id, sizeof nd->id);
        ids[i] = nd->id;
        atomic_store(&nd->up, 1); /* reachable now (below); the channels connect next */
        size_t used = strlen(r->shown);
        snprintf(r->shown + used, sizeof r->shown - used, "%s%s", i ? "," : "", u[i].shown);
    }
    free(u);
    if (r->sentinel != NULL) /* shown: the Sentinels and the name (INFO adds the master) */
        snprintf(r->shown, sizeof r->shown, "%s", sl__sentinel_shown(r->sentinel));
    if (r->node == NULL || (r->cluster && r->map == NULL) ||
        (n > 1 && (r->ring = sl_ring_new(ids, n)) == NULL)) {
        snprintf(err, errlen, "out of memory");
        redis_free_all(r);
        return NULL;
    }
    /* the start-up check of every node: the script is the same text, so
     * its SHA1 is the same on every server */
    for (int i = 0; i < atomic_load(&r->nnodes); i++) {
        char probe[64];
        sl__redis_probe_key(probe, sizeof probe, r->cluster ? r->map : NULL, i);
        if (check_node(r, &r->node[i], probe, o, r->sha, err, errlen) != 0) {
            redis_free_all(r);
            return NULL;
        }
    }
    if (r->sentinel != NULL) /* the node is whichever master the Sentinels name */
        snprintf(r->node[0].url.shown, sizeof r->node[0].url.shown, "%s", r->shown);
    if (r->o.policy == SL_REDIS_LOCAL) {
        sl_store_opts so = {.max_bytes = (size_t)o->local_max_bytes, .on_full = o->local_on_full};
        r->store = sl_store_new(&so, NULL);
        if (r->store == NULL) {
            snprintf(err, errlen, "out of memory");
            redis_free_all(r);
            return NULL;
        }
    }
    r->base.ops = &sl__redis_ops;
    r->base.flags = 0;
    /* its entry and its command in hiredis's output buffer (with the
     * callback's node): a CHECK's command, the longest, is ~1 KB */
    r->base.req_bytes = sizeof(pend) + 1024;
    return &r->base;
}

sl_backend *sl_backend_open(const sl_backend_opts *o, char *err, size_t errlen)
{
    if (strcmp(o->url, "local") == 0) {
        if (o->durability > 0) { /* nothing here can confirm a decision elsewhere */
            snprintf(err, errlen,
                     "--durability replicas:%d needs a Redis --backend (redis:// or "
                     "redis-cluster://): with --backend local there is no replica to wait for",
                     o->durability);
            return NULL;
        }
        sl_backend *b = sl_backend_local_new(o->store);
        if (b == NULL) snprintf(err, errlen, "out of memory");
        return b;
    }
    return sl_backend_redis_new(o, err, errlen);
}

