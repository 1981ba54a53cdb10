/*
 * lease.c -- --lease on: leased quota on a connection (lease.h).
 *
 * A direct-mapped table of SL_LEASE_SLOTS entries per connection (a
 * worker's to one Redis node: a key's leases route exactly as its
 * decisions), one key each.  An entry counts its key's decisions per tick;
 * a key with SL_LEASE_HOT of them in a tick is hot, and its next decision
 * goes as op T, which decides it in Redis and leases up to `size` - cost
 * more units (Redis grants at most half of what is left: the last units of
 * a window go one request at a time).  Decisions then take units from the
 * lease here: no round trip, no Redis CPU.  A lease ends when its units are
 * spent (the next decision takes again), when it is idle for
 * SL_LEASE_IDLE_MS, when its time is nearly up (token-bucket, gcra:
 * SL_LEASE_EARLY_MS before), or when another key wants its slot: what is
 * left goes back in op R.  A lease past its deadline is never spent from:
 * the deadline is counted from before T was sent, so it ends no later than
 * Redis's view of it (docs/fleet.md, "Leases": the proof sketch).
 *
 * Sizing: a lease asks for `size` units (SL_LEASE_MIN at first), doubled
 * when a lease was spent in less than half of its life, halved when more
 * than half of one went back unspent, in [SL_LEASE_MIN, SL_LEASE_MAX].
 *
 * Cost: a decision served here is a hash of its key, a compare, a
 * subtraction and one clock read; the sweep looks at every entry once per
 * SL_LEASE_SWEEP_MS.  Only fixed-window, token-bucket and gcra lease; only
 * at Redis's clock (not with --trust-client-time); only on the script's
 * path (a connection on the module's decides per request).
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "redis/lease.h"
#include "redis/redis_int.h"

__extension__ typedef __int128 i128;

typedef struct lease {
    size_t klen; /* 0: empty slot */
    sl_params p;
    int64_t tick;      /* mono ms: the start of the tick hits counts in */
    int64_t hits;      /* decisions in this tick */
    int64_t prev_hits; /* in the tick before (0 if it was longer ago) */
    int64_t size;      /* units the next lease asks for */
    int taking;        /* a T is in flight ... */
    int64_t sent_at;   /* mono ms: ... sent at (its reply's ttl counts from here) */
    int64_t units;     /* units left to spend */
    int64_t taken;     /* units the current lease had (R's `taken`) */
    int64_t tag;       /* R's tag: the window or the epoch it was taken in */
    int64_t deadline;  /* mono ms: spent only before this */
    int64_t got_at;    /* mono ms: when its reply came */
    int64_t left;      /* Redis's remaining after the take (the replies' remaining) */
    int64_t reset;     /* fixed-window: mono ms of its window's end */
    int64_t last_use;  /* mono ms */
    int64_t asked_at;  /* mono ms: the last decision sent to Redis past the deny cache */
    char key[SL_MAX_KEY];
} lease;

struct sl_lease_tab {
    struct event *sweep;
    lease s[SL_LEASE_SLOTS];
};

static int leases(const sl_params *p)
{
    return p->algo == SL_FIXED_WINDOW || p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA;
}

static int same_params(const sl_params *a, const sl_params *b)
{
    return a->algo == b->algo && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->burst == b->burst && a->precision == b->precision &&
           a->log_rejected == b->log_rejected && a->space == b->space;
}

static lease *slot_of(sl_lease_tab *t, const char *key, size_t klen, const sl_params *p)
{
    return &t->s[(sl__redis_slot_of(key, klen, p->space) * 31 + (size_t)p->algo) % SL_LEASE_SLOTS];
}

static void on_returned(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    redis *r = privdata;
    const redisReply *x = reply;
    if (x != NULL && x->type == REDIS_REPLY_INTEGER && x->integer > 0)
        atomic_fetch_add(&r->lease_returned, (uint64_t)x->integer);
}

/* Sends R: back unspent units of a lease of taken units with tag (no
 * wait for the reply, which only counts). */
static void send_return(rchan *ch, const char *key, size_t klen, const sl_params *p, int64_t back,
                        int64_t taken, int64_t tag)
{
    if (ch->ac == NULL || ch->module || back <= 0) return; /* they expire: fewer, never more */
    struct cmd *c = ch->cmd;
    sl__redis_cmd_lease_return(c, ch->r, key, klen, p, back, taken, tag);
    redisAsyncCommandArgv(ch->ac, on_returned, ch->r, c->argc, c->argv, c->len);
}

/* Ends le's lease at mono ms now: what is left goes back (before its
 * deadline) or expires; the next lease's size follows how this one went. */
static void end_lease(rchan *ch, lease *le, int64_t now)
{
    redis *r = ch->r;
    if (le->taken <= 0) return;
    if (le->units > 0 && now < le->deadline)
        send_return(ch, le->key, le->klen, &le->p, le->units, le->taken, le->tag);
    else if (le->units > 0)
        atomic_fetch_add(&r->lease_expired, (uint64_t)le->units);
    if (le->units == 0 && now - le->got_at < (le->deadline - le->got_at) / 2) {
        if ((le->size *= 2) > SL_LEASE_MAX) le->size = SL_LEASE_MAX;
    } else if (le->units * 2 > le->taken) {
        if ((le->size /= 2) < SL_LEASE_MIN) le->size = SL_LEASE_MIN;
    }
    atomic_fetch_add(&r->lease_ended, 1);
    le->units = le->taken = 0;
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    sl_lease_tab *t = ch->lease;
    int64_t now = sl__mono_ms();
    for (int i = 0; i < SL_LEASE_SLOTS; i++) {
        lease *le = &t->s[i];
        if (le->taken <= 0) continue;
        int early = le->p.algo != SL_FIXED_WINDOW ? SL_LEASE_EARLY_MS : 0;
        if (now >= le->deadline - early || now - le->last_use >= SL_LEASE_IDLE_MS)
            end_lease(ch, le, now);
    }
}

sl_lease_tab *sl__redis_lease_new(rchan *ch)
{
    sl_lease_tab *t = calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->sweep = event_new(ch->loop, -1, EV_PERSIST, on_sweep, ch);
    struct timeval tv = {0, SL_LEASE_SWEEP_MS * 1000};
    if (t->sweep == NULL || event_add(t->sweep, &tv) != 0) {
        if (t->sweep) event_free(t->sweep);
        free(t);
        return NULL;
    }
    return t;
}

void sl__redis_lease_free(rchan *ch, sl_lease_tab *t)
{
    if (t == NULL) return;
    int64_t now = sl__mono_ms();
    for (int i = 0; i < SL_LEASE_SLOTS; i++) end_lease(ch, &t->s[i], now);
    event_free(t->sweep);
    free(t);
}

/* The six fields of a decision le served, at mono ms now. */
static void served(const lease *le, int64_t now, sl_result *out)
{
    const sl_params *p = &le->p;
    int64_t cap = p->algo == SL_FIXED_WINDOW || p->burst == 0 ? p->limit : p->burst;
    int64_t rem = le->left + le->units;
    if (rem > cap) rem = cap;
    out->allowed = 1;
    out->limit = cap;
    out->remaining = rem;
    out->retry_after_ms = 0;
    out->delay_ms = 0;
    if (p->algo == SL_FIXED_WINDOW) {
        out->reset_after_ms = le->reset > now ? le->reset - now : 0;
    } else { /* time for B - remaining tokens at L per W, rounded up */
        i128 need = (i128)(cap - rem) * p->window_ms;
        out->reset_after_ms = (int64_t)((need + p->limit - 1) / p->limit);
    }
}

long long sl__redis_lease_decide(rchan *ch, sl_breq *rq, int *fresh)
{
    sl_lease_tab *t = ch->lease;
    const sl_params *p = rq->params;
    if (t == NULL || ch->module || ch->ac == NULL || rq->cost <= 0 || !leases(p)) return 0;
    int64_t now = sl__mono_ms();
    lease *le = slot_of(t, rq->key, rq->keylen, p);
    if (le->klen != rq->keylen || memcmp(le->key, rq->key, rq->keylen) != 0 ||
        !same_params(&le->p, p)) {
        end_lease(ch, le, now); /* another key (or limit) takes the slot */
        memset(le, 0, offsetof(lease, key));
        le->klen = rq->keylen;
        memcpy(le->key, rq->key, rq->keylen);
        le->p = *p;
        le->tick = now;
        le->size = SL_LEASE_MIN;
    }
    if (now - le->tick >= SL_LEASE_TICK_MS) {
        le->prev_hits = now - le->tick < 2 * SL_LEASE_TICK_MS ? le->hits : 0;
        le->hits = 0;
        le->tick = now;
    }
    le->hits++;
    le->last_use = now;
    if (le->taken > 0) {
        int early = p->algo != SL_FIXED_WINDOW ? SL_LEASE_EARLY_MS : 0;
        if (now < le->deadline - early && le->units >= rq->cost) {
            le->units -= rq->cost;
            served(le, now, &rq->result);
            rq->rc = 0;
            atomic_fetch_add(&ch->r->lease_served, 1);
            rq->cb(rq);
            return -1;
        }
        end_lease(ch, le, now); /* spent, or nearly over: a new one below */
    }
    if (now - le->asked_at >= SL_LEASE_RECHECK_MS) { /* past the deny cache, now and then */
        le->asked_at = now;
        *fresh = 1;
    }
    if (le->taking && now - le->sent_at < 2 * ch->r->o.timeout_ms) return 0; /* meanwhile */
    le->taking = 0;
    if (le->hits < SL_LEASE_HOT && le->prev_hits < SL_LEASE_HOT) return 0; /* cold here */
    le->taking = 1;
    le->asked_at = now;
    *fresh = 1;
    le->sent_at = now;
    return (long long)(le->size + rq->cost);
}

int sl__redis_lease_reply(rchan *ch, const pend *e, const redisReply *x)
{
    sl_breq *rq = e->rq;
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 9 || sl__redis_six(x, 0, &rq->result) != 0)
        return -1;
    for (int i = 6; i < 9; i++)
        if (x->element[i]->type != REDIS_REPLY_INTEGER) return -1;
    int64_t extra = x->element[6]->integer, ttl = x->element[7]->integer;
    int64_t tag = x->element[8]->integer;
    const sl_params *p = rq->params;
    int64_t now = sl__mono_ms();
    lease *le = ch->lease != NULL ? slot_of(ch->lease, e->key, rq->keylen, p) : NULL;
    if (le == NULL || !le->taking || le->klen != rq->keylen ||
        memcmp(le->key, e->key, rq->keylen) != 0 || !same_params(&le->p, p) || le->taken > 0) {
        /* nobody waits for these units here any more: back at once */
        if (extra > 0) send_return(ch, e->key, rq->keylen, p, extra, extra, tag);
        return 0;
    }
    le->taking = 0;
    if (extra <= 0) return 0; /* nothing to lease (little left): per request */
    le->units = le->taken = extra;
    le->tag = tag;
    le->deadline = le->sent_at + ttl;
    le->reset = le->sent_at + ttl;
    le->got_at = now;
    le->left = rq->result.remaining;
    atomic_fetch_add(&ch->r->lease_leases, 1);
    atomic_fetch_add(&ch->r->lease_units, (uint64_t)extra);
    return 0;
}
