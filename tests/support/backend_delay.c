/*
 * backend_delay.c -- a backend that answers later and out of order, for
 * tests (backend_delay.h).
 *
 * Each request in flight is one pooled entry: the private copy handed to
 * the inner backend (with its own key, results and outcome), the caller's
 * request, and a timer on the channel's event_base.  An entry completes the
 * caller's request when both its inner request has completed and its timer
 * has fired; the caller's out fields are copied from the private copy only
 * then.  Entries in flight are kept in submission order, so a completion
 * that is not the oldest one counts as an overtake.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "backend_delay.h"

#define HOLD_RETRY_US 200 /* a held request's timer re-arms this often */

typedef struct delay {
    sl_backend base;
    sl_backend *inner; /* not owned */
    uint64_t seed;
    unsigned max_delay_us;
    _Atomic int hold;           /* 1: no request completes */
    _Atomic size_t inflight;    /* over every channel */
    _Atomic uint64_t submitted; /* since made */
    _Atomic uint64_t overtakes; /* completions before an earlier submission */
    _Atomic uint64_t nchannels; /* channels made: each gets its own PRNG stream */
} delay;

typedef struct dchan dchan;

typedef struct pend {
    sl_breq in;  /* the private copy the inner backend answers */
    sl_breq *rq; /* the caller's */
    dchan *ch;
    struct event *ev;         /* the completion timer (made once, reused) */
    int inner_done;           /* the inner backend has completed `in` */
    int timer_done;           /* the delay is over */
    struct pend *prev, *next; /* in flight, oldest first; or the free pool (next) */
    char key[SL_MAX_KEY];
    sl_result results[SL_MAX_BATCH];
    sl_check_outcome outcome;
} pend;

struct dchan {
    sl_bchan base;
    delay *d;
    struct event_base *loop;
    sl_bchan *inner;   /* the inner backend's channel on the same loop */
    uint64_t rng;      /* splitmix64 state */
    pend *head, *tail; /* in flight, in submission order */
    pend *free;        /* entries ready for reuse */
};

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void arm(pend *e, unsigned us)
{
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    evtimer_add(e->ev, &tv);
}

static void unlink_pend(dchan *ch, pend *e)
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
}

/* Copies the private answer into the caller's request, gives the entry
 * back to the pool and runs the caller's callback (last: it may submit). */
static void complete(pend *e)
{
    dchan *ch = e->ch;
    delay *d = ch->d;
    sl_breq *rq = e->rq;
    const sl_breq *in = &e->in;
    rq->rc = in->rc;
    memcpy(rq->err, in->err, sizeof rq->err);
    switch (rq->op) {
    case SL_BOP_DECIDE:
    case SL_BOP_PEEK: rq->result = in->result; break;
    case SL_BOP_FORGET: rq->existed = in->existed; break;
    case SL_BOP_DECIDE_ALL:
        if (in->rc == 0) {
            memcpy(rq->results, e->results, rq->nreqs * sizeof *rq->results);
            rq->all_allowed = in->all_allowed;
        }
        break;
    case SL_BOP_CHECK:
        if (rq->outcome != NULL) *rq->outcome = e->outcome;
        break;
    default: break;
    }
    if (e != ch->head) atomic_fetch_add(&d->overtakes, 1);
    unlink_pend(ch, e);
    e->next = ch->free;
    ch->free = e;
    atomic_fetch_sub(&d->inflight, 1);
    rq->cb(rq);
}

static void on_inner(sl_breq *in)
{
    pend *e = in->data;
    e->inner_done = 1;
    if (e->timer_done) complete(e);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pend *e = arg;
    if (atomic_load(&e->ch->d->hold)) {
        arm(e, HOLD_RETRY_US);
        return;
    }
    e->timer_done = 1;
    if (e->inner_done) complete(e);
}

static sl_bchan *delay_channel(sl_backend *b, void *loop)
{
    delay *d = (delay *)b;
    if (loop == NULL) {
        sl__backend_set_err(b, SL_EINVAL, "the delay backend needs an event loop");
        return NULL;
    }
    dchan *ch = calloc(1, sizeof *ch);
    if (ch == NULL) {
        sl__backend_set_err(b, SL_ENOMEM, "out of memory");
        return NULL;
    }
    ch->inner = sl_backend_channel(d->inner, loop);
    if (ch->inner == NULL) {
        sl__backend_set_err(b, d->inner->err ? d->inner->err : SL_EINVAL, "inner backend: %s",
                            d->inner->errstr);
        free(ch);
        return NULL;
    }
    ch->base.b = b;
    ch->d = d;
    ch->loop = loop;
    ch->rng = d->seed ^ (0x5851f42d4c957f2dULL * (atomic_fetch_add(&d->nchannels, 1) + 1));
    return &ch->base;
}

static void delay_submit(sl_bchan *c, sl_breq *rq)
{
    dchan *ch = (dchan *)c;
    delay *d = ch->d;
    pend *e = ch->free;
    if (e != NULL) {
        ch->free = e->next;
    } else {
        e = calloc(1, sizeof *e);
        if (e != NULL) e->ev = evtimer_new(ch->loop, on_timer, e);
        if (e == NULL || e->ev == NULL) {
            free(e);
            sl__breq_fail(rq, SL_ENOMEM, "out of memory");
            return;
        }
    }
    e->ch = ch;
    e->rq = rq;
    e->inner_done = e->timer_done = 0;
    e->in = *rq;
    e->in.cb = on_inner;
    e->in.data = e;
    e->in.rc = 0;
    e->in.err[0] = '\0';

    /* the caller may reuse its key buffer once submit returns: copy it */
    int run_inner = 1;
    switch (rq->op) {
    case SL_BOP_DECIDE:
    case SL_BOP_PEEK:
    case SL_BOP_FORGET:
        if (rq->keylen > SL_MAX_KEY) {
            e->in.rc = SL_EKEY; /* what the store answers, without reading the key */
            run_inner = 0;
        } else if (rq->key != NULL && rq->keylen > 0) {
            memcpy(e->key, rq->key, rq->keylen);
            e->in.key = e->key;
        }
        break;
    case SL_BOP_DECIDE_ALL:
        if (rq->nreqs > SL_MAX_BATCH) {
            e->in.rc = SL_EINVAL; /* as sl_decide_all answers a bad n */
            run_inner = 0;
        }
        e->in.results = e->results;
        break;
    case SL_BOP_CHECK: e->in.outcome = &e->outcome; break;
    default: break;
    }

    /* in flight, newest last */
    e->prev = ch->tail;
    e->next = NULL;
    if (ch->tail)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
    atomic_fetch_add(&d->inflight, 1);
    atomic_fetch_add(&d->submitted, 1);
    arm(e, d->max_delay_us ? (unsigned)(rnd(&ch->rng) % ((uint64_t)d->max_delay_us + 1)) : 0);

    /* decided now, in submission order; answered when the timer fires */
    if (run_inner)
        sl_backend_submit(ch->inner, &e->in);
    else
        e->inner_done = 1;
}

static void delay_channel_free(sl_bchan *c)
{
    dchan *ch = (dchan *)c;
    /* the inner channel first: whatever it still holds completes into
     * entries that are then answered below */
    sl_backend_channel_free(ch->inner);
    ch->inner = NULL;
    while (ch->head != NULL) {
        pend *e = ch->head;
        evtimer_del(e->ev);
        e->in.rc = SL_EINVAL;
        snprintf(e->in.err, sizeof e->in.err, "channel closed with the request in flight");
        complete(e);
    }
    while (ch->free != NULL) {
        pend *e = ch->free;
        ch->free = e->next;
        event_free(e->ev);
        free(e);
    }
    free(ch);
}

static void delay_stats(sl_backend *b, sl_backend_stats *out)
{
    sl_backend_stats_get(((delay *)b)->inner, out);
}

static void delay_free(sl_backend *b) { free(b); }

static const sl_backend_ops delay_ops = {
    "delay", delay_channel, delay_channel_free, delay_submit, delay_stats, delay_free,
    NULL, NULL, NULL, /* info, metrics, state: nothing beyond its stats */
};

sl_backend *backend_delay_new(sl_backend *inner, uint64_t seed, unsigned max_delay_us)
{
    if (inner == NULL) return NULL;
    delay *d = calloc(1, sizeof *d);
    if (d == NULL) return NULL;
    d->base.ops = &delay_ops;
    d->base.flags = 0; /* never inline */
    d->inner = inner;
    d->seed = seed;
    d->max_delay_us = max_delay_us;
    return &d->base;
}

void backend_delay_hold(sl_backend *b) { atomic_store(&((delay *)b)->hold, 1); }
void backend_delay_release(sl_backend *b) { atomic_store(&((delay *)b)->hold, 0); }

size_t backend_delay_inflight(sl_backend *b) { return atomic_load(&((delay *)b)->inflight); }
uint64_t backend_delay_submitted(sl_backend *b) { return atomic_load(&((delay *)b)->submitted); }
uint64_t backend_delay_overtakes(sl_backend *b) { return atomic_load(&((delay *)b)->overtakes); }
