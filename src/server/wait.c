/*
 * wait.c -- the waiting room (wait.h): lines of waiters per key, shared by
 * the workers; each waiter decided on its own worker.
 *
 * Invariants (under the room's mutex, r->mu):
 *   - a line holds its waiters in arrival order; only its head is ever
 *     W_TRYING (its decision, charged if allowed, in flight);
 *   - a waiter leaves its line exactly once (leave()), and when the head
 *     leaves, the new head is woken (kick()) -- it asks at once;
 *   - r->total is the number of waiters in lines.
 * A waiter is freed only by its own worker, after its answer, and after
 * it left its line and its door's wake list, so no other thread can reach
 * it then.
 *
 * States of a waiter: W_QUEUED (in line, waiting for its timer or a
 * wake-up), W_TRYING (the head, asking), W_PROBING (out of line: its
 * deadline passed, asking RL.PEEK for the denial it answers).
 *
 * Costs: O(1) per arrival, wake-up and decision (a line found by hash:
 * SipHash with a key drawn at start, so clients cannot choose collisions),
 * one eventfd write per wake-up of another worker's waiter.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "siphash.h"
#include "wait.h"

enum { W_QUEUED, W_TRYING, W_PROBING };
enum { K_ALLOW = 1, K_CHECK = 2 };

typedef struct waiter waiter;
typedef struct line line;
typedef struct door door;

/* One key's line.  Under r->mu. */
struct line {
    line *hnext; /* the bucket's chain */
    waiter *head, *tail;
    int64_t n; /* waiters in it */
    uint64_t h;
    size_t keylen;
    char key[]; /* the line's identity: kind, algorithm or domain, key */
};

/* A worker's door: how other workers wake its waiters. */
struct door {
    sl_wait *r;
    sl_svc_ctx *x;           /* the worker's context; NULL: not attached */
    struct event_base *base; /* its loop */
    struct event *ev;        /* efd is readable */
    int efd;                 /* -1: closed (r->mu) */
    int stopping;            /* the worker is stopping (its thread only) */
    waiter *wake;            /* waiters to wake (r->mu), a list by wnext/wprev */
    waiter *mine;            /* every waiter of the worker (its thread only) */
};

struct waiter {
    door *d;
    line *ln;              /* r->mu; NULL once out of line */
    waiter *prev, *next;   /* in ln (r->mu) */
    waiter *wprev, *wnext; /* on d->wake (r->mu) */
    waiter *mprev, *mnext; /* on d->mine (the worker's thread) */
    sl_conn *c;            /* its client's connection until it goes (NULL then) */
    waiter *cprev, *cnext; /* c's waiters: the list sl_conn_on_drop's arg heads */
    struct event *tev;     /* its timer: retry_after or deadline */
    int state;             /* W_*: r->mu */
    int woken;             /* on d->wake (r->mu) */
    int gone;              /* its client went (r->mu) */
    int kind;              /* K_ALLOW, K_CHECK */
    int64_t t0, deadline;  /* server clock, ms: arrival, and when it is answered anyway */
    int64_t asked;         /* server clock, ms: its last question's time */
    sl_svc_cb cb; /* the protocol's answer (its reply slot in arg) */
    void *arg;
    /* K_ALLOW */
    sl_params p;
    int64_t cost;
    const char *key;
    size_t keylen;
    /* K_CHECK: q points into blob */
    sl_svc_check_req q;
    char blob[];
};

struct sl_wait {
    pthread_mutex_t mu;
    int64_t max_total, max_per_key;
    int64_t total; /* waiters in lines (mu) */
    size_t mask;   /* buckets - 1 */
    line **tab;    /* mu */
    sl__sipkey sip;
    _Atomic uint64_t served, timed_out, dropped, refused;
    int ndoors;
    door doors[];
};

/* ---- the room --------------------------------------------------------------- */

sl_wait *sl_wait_new(int nworkers, int64_t max_total, int64_t max_per_key)
{
    if (nworkers < 1 || max_total < 1 || max_per_key < 1) return NULL;
    sl_wait *r = calloc(1, sizeof *r + (size_t)nworkers * sizeof(door));
    if (r == NULL) return NULL;
    size_t nb = 64;
    while (nb < (size_t)max_total && nb < ((size_t)1 << 16)) nb <<= 1;
    r->tab = calloc(nb, sizeof *r->tab);
    uint8_t seed[16] = {0};
    size_t got = 0;
    while (got < sizeof seed) { /* a fixed key is only weaker, never wrong */
        ssize_t k = getrandom(seed + got, sizeof seed - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (r->tab == NULL || pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->tab);
        free(r);
        return NULL;
    }
    sl__sipkey_init(&r->sip, seed);
    r->mask = nb - 1;
    r->max_total = max_total;
    r->max_per_key = max_per_key;
    r->ndoors = nworkers;
    for (int i = 0; i < nworkers; i++) {
        r->doors[i].r = r;
        r->doors[i].efd = -1;
    }
    return r;
}

void sl_wait_free(sl_wait *r)
{
    if (r == NULL) return;
    for (size_t b = 0; b <= r->mask; b++) /* empty once every worker detached */
        while (r->tab[b] != NULL) {
            line *ln = r->tab[b];
            r->tab[b] = ln->hnext;
            free(ln);
        }
    free(r->tab);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void sl_wait_stats_get(sl_wait *r, sl_wait_stats *out)
{
    memset(out, 0, sizeof *out);
    if (r == NULL) return;
    pthread_mutex_lock(&r->mu);
    out->waiting = r->total;
    pthread_mutex_unlock(&r->mu);
    out->served = atomic_load_explicit(&r->served, memory_order_relaxed);
    out->timed_out = atomic_load_explicit(&r->timed_out, memory_order_relaxed);
    out->dropped = atomic_load_explicit(&r->dropped, memory_order_relaxed);
    out->refused = atomic_load_explicit(&r->refused, memory_order_relaxed);
}

int sl_wait_parse_timeout(const char *s, size_t n, int64_t max, int64_t *out, char *err,
                          size_t errlen)
{
    int64_t v;
    if (sl_int_parse(s, n, INT64_MAX, &v) != 0 && sl_duration_parse(s, n, &v) != 0) {
        char qb[80];
        snprintf(err, errlen, "invalid TIMEOUT: expected milliseconds (or a duration: 500ms, 2s), "
                              "got '%s'",
                 sl__quote(qb, sizeof qb, s, n));
        return -1;
    }
    if (v > max) {
        snprintf(err, errlen, "TIMEOUT %lld ms is above the server's max-wait (%lld ms)",
                 (long long)v, (long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- lines (under r->mu) ------------------------------------------------------ */

static line *line_find(sl_wait *r, const char *key, size_t keylen, uint64_t h)
{
    for (line *ln = r->tab[h & r->mask]; ln != NULL; ln = ln->hnext)
        if (ln->h == h && ln->keylen == keylen && memcmp(ln->key, key, keylen) == 0) return ln;
    return NULL;
}

static void line_unlink(sl_wait *r, line *ln)
{
    line **pp = &r->tab[ln->h & r->mask];
    while (*pp != ln) pp = &(*pp)->hnext;
    *pp = ln->hnext;
    free(ln);
}

/* Wakes w on its worker: its door's list, and the door's eventfd. */
static void kick(waiter *w)
{
    if (w->woken) return;
    door *d = w->d;
    w->woken = 1;
    w->wprev = NULL;
    w->wnext = d->wake;
    if (d->wake != NULL) d->wake->wprev = w;
    d->wake = w;
    if (d->efd >= 0 && w->wnext == NULL) { /* the list was empty: one write wakes the loop */
        uint64_t one = 1;
        if (write(d->efd, &one, sizeof one) < 0) {
        } /* EAGAIN: the counter is full, the loop is due anyway */
    }
}

static void unwake(waiter *w)
{
    if (!w->woken) return;
    if (w->wprev != NULL)
        w->wprev->wnext = w->wnext;
    else
        w->d->wake = w->wnext;
    if (w->wnext != NULL) w->wnext->wprev = w->wprev;
    w->woken = 0;
}

/* w leaves its line (if in one) and its door's wake list; the line's next
 * waiter, if w was the head, is woken. */
static void leave(sl_wait *r, waiter *w)
{
    unwake(w);
    line *ln = w->ln;
    if (ln == NULL) return;
    int was_head = ln->head == w;
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        ln->head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        ln->tail = w->prev;
    w->ln = NULL;
    ln->n--;
    r->total--;
    if (ln->head == NULL)
        line_unlink(r, ln);
    else if (was_head)
        kick(ln->head);
}

/* ---- a waiter's life (its worker's thread) ------------------------------------ */

static void on_conn_drop(void *arg);

/* Takes w off its connection's list (the connection's drop hook). */
static void conn_unlink(waiter *w)
{
    if (w->c == NULL) return;
    if (w->cprev != NULL)
        w->cprev->cnext = w->cnext;
    else if (w->cnext != NULL)
        sl_conn_on_drop(w->c, on_conn_drop, w->cnext);
    else
        sl_conn_on_drop(w->c, NULL, NULL);
    if (w->cnext != NULL) w->cnext->cprev = w->cprev;
    w->c = NULL;
}

static void waiter_free(waiter *w)
{
    door *d = w->d;
    conn_unlink(w);
    if (w->mprev != NULL)
        w->mprev->mnext = w->mnext;
    else
        d->mine = w->mnext;
    if (w->mnext != NULL) w->mnext->mprev = w->mprev;
    if (w->tev != NULL) event_free(w->tev);
    free(w);
}

static void on_answer(void *arg, const sl_svc_reply *rep);

/* Asks the service for w's decision at now: charged if allowed (commit),
 * or RL.PEEK's answer (a K_ALLOW waiter whose deadline passed out of
 * turn).  The answer comes to on_answer, maybe before this returns. */
static void ask(waiter *w, int64_t now, int commit)
{
    sl_svc_ctx *x = w->d->x;
    w->asked = now;
    if (w->kind == K_ALLOW) {
        sl_svc_allow(x, w->key, w->keylen, &w->p, w->cost, now, commit, on_answer, w);
    } else {
        w->q.at = now;
        sl_svc_check(x, &w->q, on_answer, w);
    }
}

/* The protocol's answer, and w freed.  An allowed answer's delay_ms is
 * the time w waited (plus the algorithm's own delay: leaky-bucket's). */
static void answer(waiter *w, const sl_svc_reply *rep)
{
    sl_wait *r = w->d->r;
    sl_svc_reply a = *rep;
    if (w->gone) {
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        memset(&a, 0, sizeof a);
        a.rc = SL_EINVAL;
        a.err = "waiter dropped: the client went";
    } else if (a.rc == 0 && a.result.allowed) {
        atomic_fetch_add_explicit(&r->served, 1, memory_order_relaxed);
        int64_t waited = w->asked > w->t0 ? w->asked - w->t0 : 0; /* decided at asked */
        a.result.delay_ms += waited;
    } else if (a.rc == 0) {
        atomic_fetch_add_explicit(&r->timed_out, 1, memory_order_relaxed);
    }
    sl_svc_cb cb = w->cb;
    void *arg = w->arg;
    waiter_free(w);
    cb(arg, &a);
}

/* Arms w's timer for ms from now, now being the server's clock in whole
 * ms (sl_now_ms): the timer is set for the start of that ms, not ms from
 * the instant within it, so a head asks as its token becomes whole, not up
 * to 1 ms later (the server's clock moves with the steady clock: same ms
 * boundaries). */
static void arm(waiter *w, int64_t ms)
{
    int64_t us = ms > 0 ? ms * 1000 : 0;
    if (us > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_BOOTTIME, &ts);
        us -= (int64_t)(ts.tv_nsec % 1000000) / 1000; /* into the current ms */
        if (us < 0) us = 0;
    }
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    /* from now, not from the loop's cached time (its turn began earlier):
     * a timer that fires early makes the head ask again for nothing */
    event_base_update_cache_time(w->d->base);
    evtimer_add(w->tev, &tv);
}

/* What w does now -- its timer fired, or it was woken: the head asks; a
 * waiter out of time leaves its line and asks for its denial; a waiter
 * whose client went leaves; any other waits for its deadline. */
static void wake(waiter *w)
{
    sl_wait *r = w->d->r;
    int64_t now = sl_now_ms();
    pthread_mutex_lock(&r->mu);
    if (w->state != W_QUEUED) { /* its answer is on its way */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    unwake(w);
    if (w->gone) {
        leave(r, w);
        pthread_mutex_unlock(&r->mu);
        answer(w, &(sl_svc_reply){0});
        return;
    }
    if (w->ln->head == w) {
        w->state = W_TRYING;
        pthread_mutex_unlock(&r->mu);
        ask(w, now, 1);
        return;
    }
    if (now >= w->deadline || w->d->stopping) {
        leave(r, w);
        w->state = W_PROBING;
        pthread_mutex_unlock(&r->mu);
        /* a check has no peek: its last try is a check (wait.h) */
        ask(w, now, w->kind == K_CHECK);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    arm(w, w->deadline - now);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    wake(arg);
}

/* The service's answer to w's question (ask). */
static void on_answer(void *arg, const sl_svc_reply *rep)
{
    waiter *w = arg;
    sl_wait *r = w->d->r;
    int64_t now = sl_now_ms();
    if (w->state == W_PROBING) { /* out of line already */
        if (w->kind == K_ALLOW && rep->rc == 0 && rep->result.allowed) {
            /* the unit it saw is promised to the waiters ahead of it */
            sl_svc_reply a = *rep;
            a.result.allowed = 0;
            a.result.remaining = 0;
            a.result.retry_after_ms = 1;
            a.result.delay_ms = 0;
            answer(w, &a);
            return;
        }
        answer(w, rep);
        return;
    }
    int64_t retry = rep->result.retry_after_ms;
    pthread_mutex_lock(&r->mu);
    int final = rep->rc < 0 || rep->result.allowed || w->gone || now >= w->deadline ||
                retry < 0 || w->d->stopping;
    if (final)
        leave(r, w);
    else
        w->state = W_QUEUED;
    pthread_mutex_unlock(&r->mu);
    if (final) {
        answer(w, rep);
        return;
    }
    if (retry < 1) retry = 1;
    arm(w, retry < w->deadline - now ? retry : w->deadline - now);
}

/* A connection's client went (net.c, on its worker; the hook is cleared):
 * each of its waiters, the list from arg on, leaves on its next event
 * (the hook must not complete a slot itself). */
static void on_conn_drop(void *arg)
{
    if (arg == NULL) return;
    waiter *w = arg;
    sl_wait *r = w->d->r;
    pthread_mutex_lock(&r->mu);
    for (; w != NULL; w = w->cnext) {
        w->c = NULL; /* the connection may be freed next */
        w->gone = 1;
        if (w->state == W_QUEUED) kick(w);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- doors --------------------------------------------------------------------- */

static void on_door(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    door *d = arg;
    sl_wait *r = d->r;
    uint64_t v;
    if (read(fd, &v, sizeof v) < 0) {
    } /* EAGAIN: someone else's write was read with ours */
    waiter *batch[SL_WAIT_WAKE_BATCH];
    int n = 0;
    pthread_mutex_lock(&r->mu);
    while (d->wake != NULL && n < SL_WAIT_WAKE_BATCH) {
        waiter *w = d->wake;
        unwake(w);
        batch[n++] = w;
    }
    if (d->wake != NULL) event_active(d->ev, EV_READ, 0); /* the rest on the next turn */
    pthread_mutex_unlock(&r->mu);
    /* only this thread frees these waiters, and waking one frees no other */
    for (int i = 0; i < n; i++) wake(batch[i]);
}

int sl_wait_attach(sl_wait *r, sl_svc_ctx *x, struct event_base *base, char *err, size_t errlen)
{
    if (r == NULL) return 0;
    if (x->id < 0 || x->id >= r->ndoors) {
        snprintf(err, errlen, "waiting room: no door for worker %d", x->id);
        return -1;
    }
    door *d = &r->doors[x->id];
    d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d->efd < 0) {
        snprintf(err, errlen, "waiting room: eventfd: %s", strerror(errno));
        return -1;
    }
    d->ev = event_new(base, d->efd, EV_READ | EV_PERSIST, on_door, d);
    if (d->ev == NULL || event_add(d->ev, NULL) != 0) {
        if (d->ev) event_free(d->ev);
        d->ev = NULL;
        close(d->efd);
        d->efd = -1;
        snprintf(err, errlen, "waiting room: out of memory");
        return -1;
    }
    d->base = base;
    d->x = x;
    return 0;
}

static door *door_of(sl_svc_ctx *x)
{
    sl_wait *r = x->srv->wait;
    if (r == NULL || x->id < 0 || x->id >= r->ndoors) return NULL;
    door *d = &r->doors[x->id];
    return d->x == x ? d : NULL;
}

void sl_wait_stop(sl_wait *r, sl_svc_ctx *x)
{
    if (r == NULL || door_of(x) == NULL) return;
    door *d = &r->doors[x->id];
    d->stopping = 1;
    pthread_mutex_lock(&r->mu);
    for (waiter *w = d->mine; w != NULL; w = w->mnext)
        if (w->state == W_QUEUED) kick(w);
    pthread_mutex_unlock(&r->mu);
}

void sl_wait_detach(sl_wait *r, sl_svc_ctx *x)
{
    if (r == NULL || door_of(x) == NULL) return;
    door *d = &r->doors[x->id];
    d->stopping = 1;
    waiter *w = d->mine, *next;
    for (; w != NULL; w = next) {
        next = w->mnext;
        pthread_mutex_lock(&r->mu);
        int queued = w->state == W_QUEUED;
        if (queued) {
            leave(r, w);
            w->gone = 1;
        }
        pthread_mutex_unlock(&r->mu);
        if (queued) answer(w, &(sl_svc_reply){0}); /* frees w */
    }
    pthread_mutex_lock(&r->mu);
    close(d->efd);
    d->efd = -1;
    pthread_mutex_unlock(&r->mu);
    event_free(d->ev);
    d->ev = NULL;
    /* d->x stays: the waiters still asking find their door when answered */
}

/* ---- arrivals ------------------------------------------------------------------ */

/* Puts w, whose line is lkey[0..lklen), in line and starts it.  Answers
 * an error itself (and frees w) past the bounds. */
static void arrive(door *d, waiter *w, const char *lkey, size_t lklen, int64_t now)
{
    sl_wait *r = d->r;
    uint64_t h = sl__siphash13_v(&r->sip, lkey, lklen);
    line *fresh = malloc(sizeof *fresh + lklen);
    w->tev = evtimer_new(d->base, on_timer, w);
    if (fresh == NULL || w->tev == NULL) {
        sl_svc_cb cb = w->cb;
        void *arg = w->arg;
        free(fresh);
        if (w->tev) event_free(w->tev);
        free(w);
        cb(arg, &(sl_svc_reply){.rc = SL_ENOMEM, .err = "out of memory"});
        return;
    }
    char msg[SL_SVC_ERR] = "";
    pthread_mutex_lock(&r->mu);
    line *ln = line_find(r, lkey, lklen, h);
    if (r->total >= r->max_total)
        snprintf(msg, sizeof msg,
                 "too many waiters: the server holds at most %lld (max-waiters); retry later",
                 (long long)r->max_total);
    else if (ln != NULL && ln->n >= r->max_per_key)
        snprintf(msg, sizeof msg,
                 "too many waiters on this key: at most %lld wait in one line "
                 "(max-waiters-per-key); retry later",
                 (long long)r->max_per_key);
    if (msg[0] == '\0') {
        if (ln == NULL) {
            ln = fresh;
            fresh = NULL;
            memset(ln, 0, sizeof *ln);
            ln->h = h;
            ln->keylen = lklen;
            memcpy(ln->key, lkey, lklen);
            ln->hnext = r->tab[h & r->mask];
            r->tab[h & r->mask] = ln;
        }
        w->ln = ln;
        w->prev = ln->tail;
        if (ln->tail != NULL)
            ln->tail->next = w;
        else
            ln->head = w;
        ln->tail = w;
        ln->n++;
        r->total++;
        w->state = ln->head == w ? W_TRYING : W_QUEUED;
    }
    pthread_mutex_unlock(&r->mu);
    free(fresh);
    if (msg[0] != '\0') {
        atomic_fetch_add_explicit(&r->refused, 1, memory_order_relaxed);
        sl_svc_cb cb = w->cb;
        void *arg = w->arg;
        event_free(w->tev);
        free(w);
        cb(arg, &(sl_svc_reply){.rc = SL_EFULL, .err = msg});
        return;
    }
    w->mprev = NULL;
    w->mnext = d->mine;
    if (d->mine != NULL) d->mine->mprev = w;
    d->mine = w;
    if (w->c != NULL) { /* first on its connection's list */
        waiter *head = sl_conn_drop_arg(w->c);
        w->cnext = head;
        if (head != NULL) head->cprev = w;
        sl_conn_on_drop(w->c, on_conn_drop, w);
    }
    if (w->state == W_TRYING)
        ask(w, now, 1);
    else
        arm(w, w->deadline - now);
}

static waiter *waiter_new(door *d, sl_conn *c, int kind, size_t blob, int64_t now,
                          int64_t timeout_ms, sl_svc_cb cb, void *arg)
{
    waiter *w = calloc(1, sizeof *w + blob);
    if (w == NULL) return NULL;
    w->d = d;
    w->c = c;
    w->kind = kind;
    w->t0 = now;
    w->deadline = d->stopping ? now : now + timeout_ms;
    w->cb = cb;
    w->arg = arg;
    return w;
}

void sl_wait_allow(sl_svc_ctx *x, sl_conn *c, const char *key, size_t keylen, const sl_params *p,
                   int64_t cost, int64_t now, int64_t timeout_ms, sl_svc_cb cb, void *arg)
{
    door *d = door_of(x);
    if (d == NULL) { /* no loop to wait on (a detached connection): decided once */
        sl_svc_allow(x, key, keylen, p, cost, now, 1, cb, arg);
        return;
    }
    /* the line: K_ALLOW, the algorithm, the key (state is per key and algorithm) */
    waiter *w = waiter_new(d, c, K_ALLOW, 2 + keylen, now, timeout_ms, cb, arg);
    if (w == NULL) {
        cb(arg, &(sl_svc_reply){.rc = SL_ENOMEM, .err = "out of memory"});
        return;
    }
    w->p = *p;
    w->cost = cost;
    w->blob[0] = K_ALLOW;
    w->blob[1] = (char)p->algo;
    memcpy(w->blob + 2, key, keylen);
    w->key = w->blob + 2;
    w->keylen = keylen;
    arrive(d, w, w->blob, 2 + keylen, now);
}

/* Appends n bytes and their length to a line key being built. */
static char *put_part(char *d, const char *s, size_t n)
{
    uint32_t len = (uint32_t)n;
    memcpy(d, &len, sizeof len);
    memcpy(d + sizeof len, s, n);
    return d + sizeof len + n;
}

void sl_wait_check(sl_svc_ctx *x, sl_conn *c, const sl_svc_check_req *q, int64_t now,
                   int64_t timeout_ms, sl_svc_cb cb, void *arg)
{
    door *d = door_of(x);
    if (d == NULL || q->n < 1) {
        sl_svc_check_req once = *q;
        once.at = now;
        sl_svc_check(x, &once, cb, arg);
        return;
    }
    /* the blob: descriptor pointers, counts, entries, overrides, costs (all
     * aligned first), then the bytes: domain, keys and values, the line key */
    size_t nent = 0, bytes = q->dlen;
    for (int i = 0; i < q->n; i++) {
        nent += (size_t)q->ndesc[i];
        for (int e = 0; e < q->ndesc[i]; e++)
            bytes += q->descs[i][e].keylen + q->descs[i][e].valuelen;
    }
    size_t n = (size_t)q->n;
    size_t first = 1 + 4 + q->dlen;
    for (int e = 0; e < q->ndesc[0]; e++)
        first += 8 + q->descs[0][e].keylen + q->descs[0][e].valuelen;
    size_t fixed = n * sizeof(sl_rule_entry *) + nent * sizeof(sl_rule_entry) +
                   (q->over ? n * sizeof(sl_check_override) : 0) +
                   (q->costs ? n * sizeof(int64_t) : 0) + n * sizeof(int);
    waiter *w = waiter_new(d, c, K_CHECK, fixed + bytes + first, now, timeout_ms, cb, arg);
    if (w == NULL) {
        cb(arg, &(sl_svc_reply){.rc = SL_ENOMEM, .err = "out of memory"});
        return;
    }
    char *m = w->blob;
    const sl_rule_entry **descs = (const sl_rule_entry **)(void *)m;
    m += n * sizeof *descs;
    sl_rule_entry *ent = (sl_rule_entry *)(void *)m;
    m += nent * sizeof *ent;
    sl_check_override *over = NULL;
    if (q->over) {
        over = (sl_check_override *)(void *)m;
        memcpy(over, q->over, n * sizeof *over);
        m += n * sizeof *over;
    }
    int64_t *costs = NULL;
    if (q->costs) {
        costs = (int64_t *)(void *)m;
        memcpy(costs, q->costs, n * sizeof *costs);
        m += n * sizeof *costs;
    }
    int *ndesc = (int *)(void *)m;
    m += n * sizeof *ndesc;
    char *dom = m;
    memcpy(dom, q->domain, q->dlen);
    m += q->dlen;
    for (int i = 0; i < q->n; i++) {
        descs[i] = ent;
        ndesc[i] = q->ndesc[i];
        for (int e = 0; e < q->ndesc[i]; e++, ent++) {
            const sl_rule_entry *src = &q->descs[i][e];
            ent->key = m;
            memcpy(m, src->key, src->keylen);
            m += src->keylen;
            ent->keylen = src->keylen;
            ent->value = m;
            memcpy(m, src->value, src->valuelen);
            m += src->valuelen;
            ent->valuelen = src->valuelen;
        }
    }
    w->q = *q;
    w->q.domain = dom;
    w->q.descs = descs;
    w->q.ndesc = ndesc;
    w->q.over = over;
    w->q.costs = costs;
    /* the line: K_CHECK, the domain, the first descriptor's entries */
    char *lk = m, *e = m;
    *e++ = K_CHECK;
    e = put_part(e, q->domain, q->dlen);
    for (int k = 0; k < q->ndesc[0]; k++) {
        e = put_part(e, q->descs[0][k].key, q->descs[0][k].keylen);
        e = put_part(e, q->descs[0][k].value, q->descs[0][k].valuelen);
    }
    arrive(d, w, lk, (size_t)(e - lk), now);
}
