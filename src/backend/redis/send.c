/*
 * send.c -- the Redis backend's requests in flight: the pending list of a
 * connection (oldest first, one deadline timer), sending a request's
 * command or a batch of DECIDEs (op B), and reading the answers back --
 * NOSCRIPT answered by loading the script again, a cluster's MOVED / ASK
 * followed (route.c), anything else Redis cannot answer sent to the
 * policy (fallback.c).  The overview is at the top of backend_redis.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/lease.h"
#include "redis/redis_int.h"

void sl__redis_pend_put(rchan *ch, pend *e)
{
    sl__redis_durable_leave(e); /* --durability: its group may go */
    free(e->keys);
    free(e->reqs);
    e->keys = NULL;
    e->reqs = NULL;
    e->rq = NULL;
    e->next = ch->free;
    ch->free = e;
}

void sl__redis_unlink_pend(rchan *ch, pend *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        ch->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        ch->tail = e->prev;
    e->prev = e->next = NULL;
    ch->npend--;
    atomic_fetch_sub(&ch->r->inflight, 1);
}

void sl__redis_link_pend(rchan *ch, pend *e)
{
    e->prev = ch->tail;
    e->next = NULL;
    if (ch->tail)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
    ch->npend++;
    atomic_fetch_add(&ch->r->inflight, 1);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends e's command on ch's connection.  Returns 0, or -1 when hiredis
 * refused it (the connection is going). */
int sl__redis_send_pend(rchan *ch, pend *e)
{
    struct cmd *c = ch->cmd;
    e->module = ch->module;
    if (sl__redis_durable_join(ch, e) != 0) return -1; /* its WAIT follows (durable.c) */
    if (ch->module)
        sl__redis_cmd_module(c, ch->r, e);
    else
        sl__redis_cmd_script(c, ch->r, e);
    return redisAsyncCommandArgv(ch->ac, on_reply, e, c->argc, c->argv, c->len) == REDIS_OK ? 0
                                                                                            : -1;
}

static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends batch b (n >= 2 DECIDEs) as one op B call (op M's decisions, two
 * arguments a key): 0, or -1 as sl__redis_send_pend. */
static int send_batch(rchan *ch, batch *b)
{
    struct cmd *c = ch->cmd;
    for (int i = 0; i < b->n; i++) /* their WAIT follows (durable.c) */
        if (sl__redis_durable_join(ch, b->m[i]) != 0) return -1;
    sl__redis_cmd_batch(c, ch->r, b);
    return redisAsyncCommandArgv(ch->ac, on_batch_reply, b, c->argc, c->argv, c->len) == REDIS_OK
               ? 0
               : -1;
}

/* MOVED, ASK or TRYAGAIN: an answer a cluster request follows (redirect). */
int sl__redis_is_redirect(const char *err)
{
    return strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0 ||
           strncmp(err, "TRYAGAIN", 8) == 0;
}

/* hiredis's callback of a request's command: 0 when it was sent again
 * (NOSCRIPT), else 1 (answered, e freed). */
static int reply_one(redisAsyncContext *ac, void *reply, void *privdata);

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    pend *e = privdata;
    rchan *ch = e->ch;
    int flushed = e->flushed;
    if (reply_one(ac, reply, e) && flushed) sl__redis_batch_done(ch);
}

static int reply_one(redisAsyncContext *ac, void *reply, void *privdata)
{
    pend *e = privdata;
    rchan *ch = e->ch;
    redis *r = ch->r;
    sl_breq *rq = e->rq;
    const redisReply *x = reply;
    sl__redis_unlink_pend(ch, e);
    if (x == NULL) { /* the connection went (lost, timed out, or the channel closing) */
        if (ch->closing)
            sl__breq_fail(rq, SL_EINVAL, "channel closed with the request in flight");
        else
            sl__redis_by_policy(ch, rq, e->key, e->reqs);
        sl__redis_pend_put(ch, e);
        return 1;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        if (r->cluster && sl__redis_redirect(ch, e, x->str)) return 0; /* e went on: MOVED, ASK */
        if (strncmp(x->str, "NOSCRIPT", 8) == 0 && !e->resent && ch->ac == ac) {
            /* Redis lost the script (SCRIPT FLUSH, a restart behind a
             * proxy): load it again, then this request, in that order */
            e->resent = 1;
            redisAsyncCommand(ac, sl__redis_on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                              (size_t)(sl_redis_script_end - sl_redis_script));
            sl__redis_link_pend(ch, e);
            if (sl__redis_send_pend(ch, e) == 0) return 0;
            sl__redis_unlink_pend(ch, e);
        } else if (strncmp(x->str, "SLUICE ", 7) == 0) { /* the script refused the request */
            sl__breq_fail(rq, SL_EINVAL, "%s", x->str + 7);
            sl__redis_pend_put(ch, e);
            return 1;
        } else if (e->module && strncmp(x->str, "ERR ", 4) == 0 &&
                   strncmp(x->str, "ERR unknown command", 19) != 0) {
            /* the module refused the request (sluiced's message: the
             * engine's, or AT past the module's max-client-skew) */
            sl__breq_fail(rq, SL_EINVAL, "%s", x->str + 4);
            sl__redis_pend_put(ch, e);
            return 1;
        }
        atomic_fetch_add(&r->errors, 1);
        sl__redis_set_last_error(r, "%.200s", x->str);
        sl__redis_demoted(ch, ac, x->str); /* redis-sentinel://: READONLY, LOADING */
        /* a slot no master serves: the map is stale (a topology change) */
        if (r->cluster && strncmp(x->str, "CLUSTERDOWN", 11) == 0) sl__redis_cluster_refresh(ch->w);
        sl__redis_by_policy(ch, rq, e->key, e->reqs);
        sl__redis_pend_put(ch, e);
        return 1;
    }
    rq->rc = 0;
    rq->err[0] = '\0';
    if ((e->lease_want > 0 && !e->module ? sl__redis_lease_reply(ch, e, x)
                                         : sl__redis_parse_reply(rq, x, e->module)) != 0) {
        atomic_fetch_add(&r->errors, 1);
        sl__redis_set_last_error(r, "a reply the script ABI does not allow (type %d)", x->type);
        sl__redis_by_policy(ch, rq, e->key, e->reqs);
    } else {
        /* a peek's time is no key's clock: only decisions are kept */
        if (rq->op == SL_BOP_DECIDE) sl__redis_cache_after(ch, e);
        /* --durability: an allowed answer waits for its WAIT (durable.c) */
        if (sl__redis_durable_take(ch, e))
            e = NULL;
        else
            rq->cb(rq);
    }
    if (e != NULL) sl__redis_pend_put(ch, e);
    sl__redis_arm_timer(ch);
    return 1;
}

/* Answers e's request, whose connection went (or was never there). */
static void answer_lost(rchan *ch, pend *e)
{
    if (ch->closing)
        sl__breq_fail(e->rq, SL_EINVAL, "channel closed with the request in flight");
    else
        sl__redis_by_policy(ch, e->rq, e->key, e->reqs);
}

static void batch_put(rchan *ch, batch *b)
{
    b->next = ch->free_batch;
    ch->free_batch = b;
}

/* Every member of b by the policy (or failed, the channel closing);
 * error: an error reply answered them all. */
static void batch_lost(rchan *ch, batch *b, const char *error)
{
    for (int i = 0; i < b->n; i++) {
        pend *e = b->m[i];
        sl__redis_unlink_pend(ch, e);
        if (error != NULL) {
            atomic_fetch_add(&ch->r->errors, 1);
            sl__redis_set_last_error(ch->r, "%.200s", error);
        }
        answer_lost(ch, e);
        sl__redis_pend_put(ch, e);
    }
    batch_put(ch, b);
}

/* hiredis's callback of a batch: its members answered in order. */
static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    batch *b = privdata;
    rchan *ch = b->ch;
    const redisReply *x = reply;
    if (x == NULL) { /* the connection went */
        batch_lost(ch, b, NULL);
        sl__redis_batch_done(ch);
        return;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        if (strncmp(x->str, "NOSCRIPT", 8) == 0 && !b->resent && ch->ac == ac) {
            b->resent = 1; /* load the script again, then the batch (as on_reply) */
            redisAsyncCommand(ac, sl__redis_on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                              (size_t)(sl_redis_script_end - sl_redis_script));
            if (send_batch(ch, b) == 0) return;
        }
        if (ch->r->cluster && sl__redis_is_redirect(x->str)) { /* each member follows it alone */
            for (int i = 0; i < b->n; i++) {
                sl__redis_unlink_pend(ch, b->m[i]);
                sl__redis_redirect(ch, b->m[i], x->str);
            }
            batch_put(ch, b);
            sl__redis_arm_timer(ch);
            sl__redis_batch_done(ch);
            return;
        }
        sl__redis_demoted(ch, ac, x->str); /* redis-sentinel://: READONLY, LOADING */
        batch_lost(ch, b, x->str);
        sl__redis_arm_timer(ch);
        sl__redis_batch_done(ch);
        return;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements != (size_t)b->n) {
        char why[80];
        snprintf(why, sizeof why, "a reply the script ABI does not allow (type %d)", x->type);
        batch_lost(ch, b, why);
        sl__redis_arm_timer(ch);
        sl__redis_batch_done(ch);
        return;
    }
    for (int i = 0; i < b->n; i++) {
        pend *e = b->m[i];
        sl_breq *rq = e->rq;
        const redisReply *el = x->element[i];
        sl__redis_unlink_pend(ch, e);
        if (el->type == REDIS_REPLY_ERROR && strncmp(el->str, "SLUICE ", 7) == 0) {
            sl__breq_fail(rq, SL_EINVAL, "%s", el->str + 7); /* the script refused this one */
        } else if (el->type == REDIS_REPLY_ARRAY && el->elements == 6 &&
                   sl__redis_six(el, 0, &rq->result) == 0) {
            rq->rc = 0;
            rq->err[0] = '\0';
            sl__redis_cache_after(ch, e);
            if (sl__redis_durable_take(ch, e)) continue; /* held for its WAIT (durable.c) */
            rq->cb(rq);
        } else {
            atomic_fetch_add(&ch->r->errors, 1);
            sl__redis_set_last_error(ch->r, "%.200s",
                           el->type == REDIS_REPLY_ERROR ? el->str
                                                         : "a reply the script ABI does not allow");
            sl__redis_by_policy(ch, rq, e->key, NULL);
        }
        sl__redis_pend_put(ch, e);
    }
    batch_put(ch, b);
    sl__redis_arm_timer(ch);
    sl__redis_batch_done(ch);
}

/* Sends the open batch, if any: a lone DECIDE as D, more as one M. */
void sl__redis_flush_open(rchan *ch)
{
    batch *b = ch->open;
    if (b == NULL) return;
    ch->open = NULL;
    if (ch->ac == NULL) { /* the connection went */
        batch_lost(ch, b, NULL);
        return;
    }
    if (b->n == 1) {
        pend *e = b->m[0];
        batch_put(ch, b);
        e->flushed = 1;
        if (sl__redis_send_pend(ch, e) != 0) {
            sl__redis_unlink_pend(ch, e);
            answer_lost(ch, e);
            sl__redis_pend_put(ch, e);
            return;
        }
        ch->busy++;
        return;
    }
    if (send_batch(ch, b) != 0) {
        batch_lost(ch, b, NULL);
        return;
    }
    ch->busy++;
}

/* A batch was answered: the open one goes when none is left in flight. */
void sl__redis_batch_done(rchan *ch)
{
    ch->busy--;
    if (ch->busy == 0) sl__redis_flush_open(ch);
}

/* The end of a loop turn with DECIDEs queued: they go now, unless a batch
 * is in flight -- then they wait for its answer (sl__redis_batch_done) and gather
 * what comes meanwhile, so a busy channel sends few, large batches. */
void sl__redis_on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    if (ch->busy == 0 || ch->ac == NULL) sl__redis_flush_open(ch);
}

/* Queues DECIDE e (linked, not sent) in the open batch; 0, or -1 when out
 * of memory (e is then the caller's to send). */
int sl__redis_queue(rchan *ch, pend *e)
{
    batch *b = ch->open;
    int64_t now = ch->r->o.trust_client_time ? e->rq->now_ms : 0;
    int slot = ch->r->cluster ? sl__redis_request_slot(ch->r, e->rq) : -1;
    if (b != NULL && (b->n == SL_REDIS_BATCH_MAX || b->now != now || b->slot != slot)) {
        sl__redis_flush_open(ch); /* full, another time or slot: what came first goes first */
        b = NULL;
    }
    if (b == NULL) {
        if ((b = ch->free_batch) != NULL)
            ch->free_batch = b->next;
        else if ((b = malloc(sizeof *b)) == NULL)
            return -1;
        b->ch = ch;
        b->n = 0;
        b->resent = 0;
        b->now = now;
        b->slot = slot;
        ch->open = b;
        event_active(ch->flush, EV_TIMEOUT, 0);
    }
    b->m[b->n++] = e;
    return 0;
}
