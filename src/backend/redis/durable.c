/*
 * durable.c -- --durability replicas:N (SPEC section 11): an allowed
 * answer leaves sluiced only once Redis's WAIT N has said that N replicas
 * acknowledged the writes of the commands that decided it, so a master
 * that fails after answering cannot take the decision with it.
 *
 * One WAIT per batch per connection.  The commands that may write
 * (DECIDE -- a lone one or an op B batch --, DECIDE_ALL, CHECK; on either
 * path, the script's or the module's) that one loop turn sends on a
 * connection form a group (wgroup); at the end of the turn (wait_ev, made
 * active by the turn's first such command, after the batch's flush event)
 * one `WAIT N T` follows them on the same connection, T the time left until
 * the group's earliest deadline.  Redis answers a connection's commands in
 * order, so every member's reply comes before its group's WAIT reply:
 *   - a member's allowed answer is held (off the pending list, still
 *     counted in npend and in flight) until that reply;
 *   - a denial, a peek, a reset go out as they come: they promise nothing
 *     a lost write could break (a denial that wrote -- a sliding log's
 *     log_rejected, Lyft's count-denied -- is at worst forgotten, which
 *     can only lower later counts, and the allowed answers those later
 *     counts give are themselves held for their own WAIT);
 *   - WAIT's reply >= N releases the held answers as they are; fewer than
 *     N, an error, a lost connection, or no reply by the group's deadline
 *     (this file's timer: Redis may answer WAIT up to a serverCron tick,
 *     100 ms at hz 10, after T when idle) replaces each by the failure
 *     policy's answer (--on-backend-error), counted in `replaced`.  A
 *     member whose reply comes after its group's deadline gets the same.
 * A WAIT blocks its connection in Redis: what was sent behind it waits
 * for it, and times out as a stalled Redis does when the replicas do not
 * answer (send.c, conn.c: the policy, the connection made again).
 *
 * A group lives while a member or its WAIT may still refer to it (refs):
 * members leave when answered (sl__redis_pend_put) or sent again
 * elsewhere (NOSCRIPT, a cluster's MOVED / ASK: they join the group of
 * the turn that sends them again).  Pooled per connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/lease.h"
#include "redis/redis_int.h"

/* Whether rq's answer says "allowed" (what the WAIT must confirm). */
static int answer_allowed(const sl_breq *rq)
{
    switch (rq->op) {
    case SL_BOP_DECIDE: return rq->result.allowed != 0;
    case SL_BOP_DECIDE_ALL: return rq->all_allowed != 0;
    case SL_BOP_CHECK: return rq->outcome->allowed != 0;
    default: return 0;
    }
}

/* One reference to g gone: back to its channel's pool when none is left
 * and its WAIT is no longer to be sent. */
static void unref(wgroup *g)
{
    if (--g->refs > 0 || g->state == W_OPEN) return;
    g->next = g->ch->wfree;
    g->ch->wfree = g;
}

void sl__redis_durable_leave(pend *e)
{
    wgroup *g = e->wg;
    if (g == NULL) return;
    e->wg = NULL;
    unref(g);
}

/* Joins e (about to be sent on ch) to this turn's group of ch, made (and
 * its WAIT scheduled) by the turn's first writing command.  0; -1 when out
 * of memory (the caller sends nothing: the policy answers).  Nothing for
 * a request that writes nothing, or without --durability. */
int sl__redis_durable_join(rchan *ch, pend *e)
{
    if (ch->r->o.durability == 0) return 0;
    sl_bop op = e->rq->op;
    sl__redis_durable_leave(e); /* sent again: it belongs to this turn's group now */
    if (op != SL_BOP_DECIDE && op != SL_BOP_DECIDE_ALL && op != SL_BOP_CHECK) return 0;
    wgroup *g = ch->wopen;
    if (g == NULL) {
        if ((g = ch->wfree) != NULL)
            ch->wfree = g->next;
        else if ((g = malloc(sizeof *g)) == NULL)
            return -1;
        memset(g, 0, sizeof *g);
        g->ch = ch;
        g->ac = ch->ac;
        g->state = W_OPEN;
        g->deadline = e->deadline;
        ch->wopen = g;
        event_active(ch->wait_ev, EV_TIMEOUT, 0);
    }
    if (e->deadline < g->deadline) g->deadline = e->deadline;
    g->refs++;
    e->wg = g;
    return 0;
}

/* e's answer once its group is known to have failed: the policy's (or a
 * failure, the channel closing); then e is freed. */
static void replace(rchan *ch, pend *e)
{
    if (ch->closing) {
        sl__breq_fail(e->rq, SL_EINVAL, "channel closed with the request in flight");
    } else {
        atomic_fetch_add(&ch->r->replaced, 1);
        sl__redis_by_policy(ch, e->rq, e->key, e->reqs);
    }
    sl__redis_pend_put(ch, e);
}

/* e's reply was read into its request (success): 0 when the answer may go
 * now (the caller answers and frees e, as without --durability); 1 when
 * this took e -- held for its group's WAIT, or answered by the policy
 * since the group already failed. */
int sl__redis_durable_take(rchan *ch, pend *e)
{
    wgroup *g = e->wg;
    if (g == NULL || !answer_allowed(e->rq)) return 0;
    if (g->state == W_DONE) {
        if (g->ok) return 0;
        replace(ch, e);
        return 1;
    }
    e->next = NULL; /* held: still in flight, still within the connection's bound */
    if (g->held_tail != NULL)
        g->held_tail->next = e;
    else
        g->held = e;
    g->held_tail = e;
    ch->npend++;
    atomic_fetch_add(&ch->r->inflight, 1);
    return 1;
}

/* g is answered: ok (N replicas confirmed) releases its held answers as
 * they are, else each is the policy's. */
static void release(rchan *ch, wgroup *g, int ok)
{
    g->state = W_DONE;
    g->ok = ok;
    pend *e = g->held;
    g->held = g->held_tail = NULL;
    g->refs++; /* the answers below make members leave: g stays until this ends */
    while (e != NULL) {
        pend *next = e->next;
        e->next = NULL;
        ch->npend--;
        atomic_fetch_sub(&ch->r->inflight, 1);
        sl__redis_lease_confirmed(ch, e, ok); /* an op T's units: spent only if ok */
        if (ok) {
            e->rq->cb(e->rq);
            sl__redis_pend_put(ch, e);
        } else {
            replace(ch, e);
        }
        e = next;
    }
    unref(g);
}

/* Takes g off ch's list of groups whose WAIT is sent (its head, but for
 * a reply out of the usual order). */
static void unlist(rchan *ch, wgroup *g)
{
    wgroup **p = &ch->whead, *prev = NULL;
    while (*p != NULL && *p != g) {
        prev = *p;
        p = &(*p)->next;
    }
    if (*p == NULL) return;
    *p = g->next;
    if (ch->wtail == g) ch->wtail = prev;
    g->next = NULL;
}

/* WAIT's reply: the number of replicas that acknowledged the group's
 * writes (NULL: the connection went). */
static void on_wait(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    wgroup *g = privdata;
    rchan *ch = g->ch;
    redis *r = ch->r;
    const redisReply *x = reply;
    if (g->state == W_SENT) { /* not expired meanwhile */
        unlist(ch, g);
        if (x != NULL && x->type == REDIS_REPLY_ERROR) {
            atomic_fetch_add(&r->errors, 1);
            sl__redis_set_last_error(r, "WAIT: %.200s", x->str);
        }
        int ok = x != NULL && x->type == REDIS_REPLY_INTEGER && x->integer >= r->o.durability;
        if (!ok) atomic_fetch_add(&r->waits_short, 1);
        release(ch, g, ok);
        sl__redis_arm_timer(ch);
    }
    unref(g);
}

/* The end of a turn that sent writing commands on ch: their WAIT. */
void sl__redis_on_wait_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    wgroup *g = ch->wopen;
    if (g == NULL) return;
    ch->wopen = NULL;
    if (ch->ac == NULL || ch->ac != g->ac) {
        /* the connection went this turn: every member was answered by
         * the policy already (hiredis's NULL replies) */
        release(ch, g, 0);
        return;
    }
    int64_t t = g->deadline - sl__mono_ms();
    if (t < 1) t = 1; /* WAIT N 0 would block until the replicas answer */
    if (redisAsyncCommand(ch->ac, on_wait, g, "WAIT %d %lld", ch->r->o.durability,
                          (long long)t) != REDIS_OK) {
        release(ch, g, 0);
        return;
    }
    atomic_fetch_add(&ch->r->waits, 1);
    g->state = W_SENT;
    g->refs++; /* its WAIT's */
    if (ch->wtail != NULL)
        ch->wtail->next = g;
    else
        ch->whead = g;
    ch->wtail = g;
    if (g == ch->whead) sl__redis_arm_timer(ch);
}

/* The deadline of the oldest group whose WAIT is unanswered (monotonic
 * ms), 0 when none: conn.c's timer watches it too. */
int64_t sl__redis_durable_deadline(const rchan *ch)
{
    return ch->whead != NULL ? ch->whead->deadline : 0;
}

/* Groups past their deadline without WAIT's reply: their held answers
 * are the policy's now (the connection stays: Redis did answer, its
 * replicas did not in time). */
void sl__redis_durable_expire(rchan *ch, int64_t now)
{
    while (ch->whead != NULL && now >= ch->whead->deadline) {
        wgroup *g = ch->whead;
        unlist(ch, g);
        atomic_fetch_add(&ch->r->waits_short, 1);
        release(ch, g, 0); /* its WAIT's reply, when it comes, finds it W_DONE */
    }
}

/* The channel is being freed, its connection gone (every reply NULL):
 * the open group and the pool. */
void sl__redis_durable_free(rchan *ch)
{
    if (ch->wopen != NULL) {
        wgroup *g = ch->wopen;
        ch->wopen = NULL;
        release(ch, g, 0);
    }
    while (ch->wfree != NULL) {
        wgroup *g = ch->wfree;
        ch->wfree = g->next;
        free(g);
    }
}
