/*
 * net_slot.c -- reply slots (proto.h): each request's place in its
 * connection's reply order, and what requests in flight weigh.
 *
 * A protocol opens a slot per request, in order, and completes it when
 * its answer is known -- at once, or later from a backend.  The first
 * pending slot of the connection being served writes straight into the
 * worker's batch (no copy); a slot done behind an earlier one keeps its
 * reply in its own buffer until those before it are done; the slots that
 * are done at the head go out in order.  Slots are pooled per worker
 * (SLOT_KEEP, SLOT_POOL_MAX).  A slot whose connection closed is orphaned:
 * its request completes into it, and it is freed then.
 *
 * Requests in flight at a backend that answers later (Redis) hold more
 * than their slot: their request context, a CHECK's plan, the backend's
 * entry and command.  The service tells what each holds as it submits it
 * (service.h: charge; sl__net_on_charge here), and it weighs on the request's
 * slot -- the connection's last, pending one -- until the slot is done:
 * counted in held() (max-output, the total of net_budget.c) though not in
 * the pause bound, and once a connection's weigh SL_NET_INFLIGHT_MAX, its
 * turn ends (net_conn.c).  A connection freed with requests in flight
 * leaves their weight in the total as its worker's (orphan_bytes) until
 * each is answered, so closing never frees room its requests still take.
 */
#include <stdlib.h>
#include <string.h>

#include "net_int.h"

#define SLOT_KEEP     (16 * 1024) /* a pooled slot keeps at most this much buffer */
#define SLOT_POOL_MAX 1024        /* free slots a worker keeps for reuse */

/* The service's charge (service.h): a request of the connection being
 * served went to a backend that answers later, holding `bytes` until it
 * does; they weigh on its slot -- the last opened, still pending: the
 * protocol opens a request's slot, then submits it -- until it is done.
 * A request without a pending slot (sl_conn_hold's) is not weighed. */
void sl__net_on_charge(void *arg, size_t bytes)
{
    worker *w = arg;
    conn *c = w->serving;
    if (c == NULL || c->tail == NULL || c->tail->done || bytes > UINT32_MAX - c->tail->weight)
        return;
    c->tail->weight += (uint32_t)bytes;
    c->wait_bytes += bytes;
    sl__net_check_bound(c);
}

/* Slot s is answered: its request's weight leaves its connection (or,
 * orphaned, the worker's orphans). */
static void unweigh(sl_slot *s)
{
    if (s->weight == 0) return;
    if (s->c != NULL)
        s->c->wait_bytes -= s->weight;
    else
        sl__net_account_orphans(s->w, -(int64_t)s->weight);
    s->weight = 0;
}

/* ---- reply slots (proto.h) ------------------------------------------- */

static void slot_free(sl_slot *s)
{
    worker *w = s->w;
    if (w->nfree_slots >= SLOT_POOL_MAX) { /* the pool is full: back to malloc */
        free(s->buf.p);
        free(s);
        return;
    }
    s->buf.len = 0;
    if (s->buf.cap > SLOT_KEEP) {
        free(s->buf.p);
        s->buf.p = NULL;
        s->buf.cap = 0;
    }
    s->next = w->free_slots;
    w->free_slots = s;
    w->nfree_slots++;
}

sl_slot *sl_conn_slot(conn *c)
{
    worker *w = c->w;
    sl_slot *s = w->free_slots;
    if (s != NULL) {
        w->free_slots = s->next;
        w->nfree_slots--;
    } else if ((s = calloc(1, sizeof *s)) == NULL) {
        return NULL;
    }
    s->w = w;
    s->c = c;
    s->done = 0;
    s->weight = 0;
    memset(&s->data, 0, sizeof s->data);
    s->next = NULL;
    if (c->tail)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
    c->nslots++;
    sl__net_check_bound(c); /* a request in flight holds its slot */
    return s;
}

sl_buf *sl_slot_buf(sl_slot *s)
{
    conn *c = s->c;
    /* the first pending reply of the connection being served: straight
     * into the batch that goes out at the end of this turn */
    if (c != NULL && c->head == s) {
        if (c->sink != NULL) return c->sink;
        if (c->w->serving == c) return &c->w->batch;
    }
    return &s->buf;
}

sl_buf *sl_conn_out_now(conn *c)
{
    if (c->head != NULL) return NULL;
    if (c->sink != NULL) return c->sink;
    return c->w->serving == c ? &c->w->batch : NULL;
}

void sl_slot_done(sl_slot *s)
{
    conn *c = s->c;
    s->done = 1;
    unweigh(s);
    if (c == NULL) { /* orphaned: the connection is gone */
        slot_free(s);
        return;
    }
    if (s != c->head) { /* waits for an earlier reply */
        c->slot_bytes += s->buf.len;
        sl__net_check_bound(c);
        return;
    }
    worker *w = c->w;
    int serving = w->serving == c || c->sink != NULL; /* replies go to a buffer */
    sl_buf *dst = c->sink ? c->sink : &w->batch;
    int rc = 0;
    while (c->head != NULL && c->head->done) {
        sl_slot *h = c->head;
        c->head = h->next;
        if (c->head == NULL) c->tail = NULL;
        c->nslots--;
        if (h != s) c->slot_bytes -= h->buf.len;
        if (h->buf.len > 0 && rc == 0)
            rc = serving ? sl_buf_add(dst, h->buf.p, h->buf.len)
                         : evbuffer_add(c->out, h->buf.p, h->buf.len);
        slot_free(h);
    }
    if (rc != 0) c->oom = 1; /* a reply is lost: flush drops the connection */
    if (!serving)
        sl__net_after_async(c);
    else
        sl__net_check_bound(c);
}

void sl_conn_hold(conn *c)
{
    c->nheld++;
    sl__net_check_bound(c);
}

void sl_conn_release(conn *c)
{
    c->nheld--;
    if (c->w->serving == c || c->sink != NULL)
        sl__net_check_bound(c);
    else
        sl__net_after_async(c); /* may close c: its last request was answered */
}

void *sl_slot_data(sl_slot *s) { return s->data.b; }

void sl_conn_on_drop(conn *c, void (*fn)(void *), void *arg)
{
    c->drop = fn;
    c->drop_arg = fn != NULL ? arg : NULL;
}

void *sl_conn_drop_arg(const conn *c) { return c->drop_arg; }

void sl__net_drop(conn *c)
{
    void (*fn)(void *) = c->drop;
    if (fn == NULL) return;
    c->drop = NULL; /* once */
    fn(c->drop_arg);
    c->drop_arg = NULL;
}
sl_svc_ctx *sl_slot_svc(sl_slot *s) { return s->w->svcp; }

/* Detaches c's pending slots: the done ones are freed, the ones still in
 * flight are left to their backend's completion, which frees them. */
void sl__net_orphan_slots(conn *c)
{
    sl_slot *s = c->head, *next;
    size_t weight = 0;
    sl__net_drop(c); /* the hook only marks its requests: the list stays */
    for (; s != NULL; s = next) {
        next = s->next;
        s->c = NULL;
        weight += s->weight;
        if (s->done) slot_free(s);
    }
    c->head = c->tail = NULL;
    c->nslots = 0;
    c->slot_bytes = 0;
    c->wait_bytes = 0;
    /* still held until answered: counted in the total, as the worker's */
    if (weight > 0 && c->sink == NULL) sl__net_account_orphans(c->w, (int64_t)weight);
}

void sl__net_slot_pool_free(worker *w)
{
    while (w->free_slots != NULL) {
        sl_slot *s = w->free_slots;
        w->free_slots = s->next;
        free(s->buf.p);
        free(s);
    }
    w->nfree_slots = 0;
}
