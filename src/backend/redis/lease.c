/*
 * lease.c -- --lease on: leased quota on a connection (lease.h).
 *
 * A table of SL_LEASE_SLOTS entries per connection (a worker's to one
 * Redis node: a key's leases route exactly as its decisions), one key
 * each, in sets of SL_LEASE_WAYS: a key not there takes an empty entry of
 * its set, else the least recently used one that holds no lease and whose
 * key is not hot (a cold key never pushes a hot one out); if there is
 * none, it is decided per request.  An entry counts its key's decisions
 * per tick; a key with SL_LEASE_HOT of them in a tick is hot, and its next
 * decision goes as op T, which decides it in Redis and leases up to `size`
 * - cost more units (Redis grants at most half of what is left: the last
 * units of a window go one request at a time).  Decisions then take units
 * from the lease here: no round trip, no Redis CPU.  A lease ends when its
 * units are spent (the next decision takes again), when it is idle for
 * SL_LEASE_IDLE_MS, when its time is nearly up (token-bucket, gcra:
 * SL_LEASE_EARLY_MS before), or when its entry goes to another key (only
 * once idle and cold): what is left goes back in op R.  A lease past its
 * deadline is never spent from: the deadline is counted from before T was
 * sent, so it ends no later than Redis's view of it (docs/fleet.md,
 * "Leases": the proof sketch).
 *
 * Sizing: a lease asks for `size` units (SL_LEASE_MIN at first), doubled
 * when a lease was spent in less than half of its life, halved when more
 * than half of one went back unspent, in [SL_LEASE_MIN, SL_LEASE_MAX].
 *
 * Cost: a decision served here is a hash of its key, up to SL_LEASE_WAYS
 * compares, a subtraction and one clock read; the sweep looks at every
 * entry once per SL_LEASE_SWEEP_MS.  Only fixed-window, sliding-window, token-bucket and
 * gcra lease; only at Redis's clock (not with --trust-client-time); on the
 * module's path (RL.LEASE, RL.LEASERETURN: module.c) those the module
 * names in RL.LEASEINFO -- an older module without it leases
 * fixed-window only, the others are then decided per request.
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
    /* --durability: a T answered, its units not to be spent before its
     * WAIT confirms them (sl__redis_lease_confirmed); sent_at, ttl, left
     * are that T's */
    int waiting;
    int module; /* the lease was taken on the module's path (RL.LEASE): it goes back there */
    int64_t w_extra, w_ttl, w_tag, w_sent_at, w_left;
    char key[SL_MAX_KEY];
} lease;

struct sl_lease_tab {
    struct event *sweep;
    unsigned module; /* the algorithms (bit 1 << algo) the connection's module leases:
                        none without RL.LEASE (conn.c's probe), fixed-window with it,
                        those RL.LEASEINFO names when it answers */
    lease s[SL_LEASE_SLOTS];
};

/* Whether p's keys lease on ch: on the script's path fixed-window,
 * sliding-window, sliding-buckets, token-bucket and gcra; on the module's
 * those of them it says it leases (RL.LEASEINFO). */
static int leases(const rchan *ch, const sl_params *p)
{
    int algo = p->algo == SL_FIXED_WINDOW || p->algo == SL_SLIDING_WINDOW ||
               p->algo == SL_SLIDING_BUCKETS || p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA;
    if (ch->module) return algo && (ch->lease->module >> p->algo & 1u);
    return algo;
}

/* How long before its deadline a lease of algo ends: SL_LEASE_EARLY_MS for
 * those whose units would be lost (or weigh on the next window) left
 * there; 0 for fixed-window (its count starts again) and sliding-buckets
 * (its units go back into their bucket past the deadline too: end_lease). */
static int early_ms(int algo)
{
    return algo == SL_FIXED_WINDOW || algo == SL_SLIDING_BUCKETS ? 0 : SL_LEASE_EARLY_MS;
}

/* RL.LEASEINFO's reply: the names of the algorithms the module leases.
 * An error (an older module: unknown command; a user who may not ask)
 * leaves fixed-window alone. */
static void on_leaseinfo(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    const redisReply *x = reply;
    if (x == NULL || ch->ac != ac || ch->lease == NULL || ch->lease->module == 0 ||
        x->type != REDIS_REPLY_ARRAY)
        return;
    unsigned m = 1u << SL_FIXED_WINDOW;
    for (size_t i = 0; i < x->elements && i < 16; i++) {
        const redisReply *e = x->element[i];
        sl_algo a;
        if ((e->type == REDIS_REPLY_STATUS || e->type == REDIS_REPLY_STRING) &&
            sl_algo_parse(e->str, e->len, &a) == 0)
            m |= 1u << a;
    }
    ch->lease->module = m;
}

void sl__redis_lease_module(rchan *ch, int has)
{
    if (ch->lease == NULL) return;
    ch->lease->module = has ? 1u << SL_FIXED_WINDOW : 0;
    if (has && ch->ac != NULL) /* which others it leases: a newer module says */
        redisAsyncCommand(ch->ac, on_leaseinfo, NULL, "RL.LEASEINFO");
}

static int same_params(const sl_params *a, const sl_params *b)
{
    return a->algo == b->algo && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->burst == b->burst && a->precision == b->precision &&
           a->log_rejected == b->log_rejected && a->space == b->space;
}

/* The first of the SL_LEASE_WAYS entries key (with p's algorithm) may
 * take. */
static lease *set_of(sl_lease_tab *t, const char *key, size_t klen, const sl_params *p)
{
    size_t sets = SL_LEASE_SLOTS / SL_LEASE_WAYS;
    return &t->s[(sl__redis_slot_of(key, klen, p->space) * 31 + (size_t)p->algo) % sets *
                 SL_LEASE_WAYS];
}

/* key's entry (of any parameters), or NULL. */
static lease *find(sl_lease_tab *t, const char *key, size_t klen, const sl_params *p)
{
    lease *w = set_of(t, key, klen, p);
    for (int i = 0; i < SL_LEASE_WAYS; i++)
        if (w[i].klen == klen && memcmp(w[i].key, key, klen) == 0) return &w[i];
    return NULL;
}

/* Whether le may not make room for another key at mono ms now: it holds a
 * lease (or waits for one), or its key was hot here in this tick or the
 * last.  A cold key never pushes out a hot one: with a million cold keys
 * passing by, the hot keys keep their leases (bench/lease.sh, "mix"). */
static int busy(const lease *le, int64_t now)
{
    if (le->klen == 0) return 0;
    if (le->taken > 0 || le->taking || le->waiting) return 1;
    return now - le->tick < 2 * SL_LEASE_TICK_MS &&
           (le->hits >= SL_LEASE_HOT ||
            (now - le->tick < SL_LEASE_TICK_MS && le->prev_hits >= SL_LEASE_HOT));
}

/* An entry for a key not in the table, at mono ms now: an empty way of its
 * set, else the least recently used one not busy; NULL when every way is
 * busy (the key is then decided per request, uncounted). */
static lease *victim(sl_lease_tab *t, const char *key, size_t klen, const sl_params *p, int64_t now)
{
    lease *w = set_of(t, key, klen, p), *v = NULL;
    for (int i = 0; i < SL_LEASE_WAYS; i++) {
        if (w[i].klen == 0) return &w[i];
        if (!busy(&w[i], now) && (v == NULL || w[i].last_use < v->last_use)) v = &w[i];
    }
    return v;
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
static void send_return(rchan *ch, int module, const char *key, size_t klen, const sl_params *p,
                        int64_t back, int64_t taken, int64_t tag)
{
    /* Only on the path the lease was taken on: the module's keys and the
     * script's are apart, and an R on the other would give back units
     * that path never counted.  Else they expire: fewer, never more. */
    if (ch->ac == NULL || ch->module != module || back <= 0) return;
    struct cmd *c = ch->cmd;
    if (module) {
        sl__redis_cmd_module_lease_return(c, key, klen, p, back, tag);
        if (p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA) { /* the whole lease leaves O */
            cmd_str(c, "TAKEN", 5);
            cmd_int(c, taken);
        }
    } else
        sl__redis_cmd_lease_return(c, ch->r, key, klen, p, back, taken, tag);
    redisAsyncCommandArgv(ch->ac, on_returned, ch->r, c->argc, c->argv, c->len);
}

/* Ends le's lease at mono ms now: what is left goes back (before its
 * deadline) or expires; the next lease's size follows how this one went. */
static void end_lease(rchan *ch, lease *le, int64_t now)
{
    redis *r = ch->r;
    if (le->taken <= 0) return;
    /* (a bucket of sliding-buckets takes its units back while it is in the
     * window, also past the deadline: its lease ends at it, not before) */
    if (le->units > 0 && (now < le->deadline || le->p.algo == SL_SLIDING_BUCKETS))
        send_return(ch, le->module, le->key, le->klen, &le->p, le->units, le->taken, le->tag);
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
        int early = early_ms(le->p.algo);
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
    int64_t cap = p->algo == SL_FIXED_WINDOW || p->algo == SL_SLIDING_WINDOW || p->burst == 0
                      ? p->limit
                      : p->burst;
    int64_t rem = le->left + le->units;
    if (rem > cap) rem = cap;
    out->allowed = 1;
    out->limit = cap;
    out->remaining = rem;
    out->retry_after_ms = 0;
    out->delay_ms = 0;
    if (p->algo == SL_FIXED_WINDOW) {
        out->reset_after_ms = le->reset > now ? le->reset - now : 0;
    } else if (p->algo == SL_SLIDING_WINDOW) {
        /* the window's end, then a window for its count to weigh out (at
         * most W / count ms later than Redis's: approximate, as remaining) */
        out->reset_after_ms = (le->reset > now ? le->reset - now : 0) + p->window_ms;
    } else if (p->algo == SL_SLIDING_BUCKETS) { /* its bucket's end, then W less a bucket */
        int64_t prec = p->precision > 0 ? p->precision : SL_DEFAULT_PRECISION;
        out->reset_after_ms =
            (le->reset > now ? le->reset - now : 0) + p->window_ms - p->window_ms / prec;
    } else { /* time for B - remaining tokens at L per W, rounded up */
        i128 need = (i128)(cap - rem) * p->window_ms;
        out->reset_after_ms = (int64_t)((need + p->limit - 1) / p->limit);
    }
}

long long sl__redis_lease_decide(rchan *ch, sl_breq *rq, int *fresh)
{
    sl_lease_tab *t = ch->lease;
    const sl_params *p = rq->params;
    if (t == NULL || ch->ac == NULL || rq->cost <= 0 || !leases(ch, p)) return 0;
    int64_t now = sl__mono_ms();
    lease *le = find(t, rq->key, rq->keylen, p);
    if (le == NULL && (le = victim(t, rq->key, rq->keylen, p, now)) == NULL)
        return 0; /* its set is busy with hot keys: per request */
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
        int early = early_ms(p->algo);
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
    if (le->waiting) { /* its WAIT never came: the units are not spent here */
        le->waiting = 0;
        atomic_fetch_add(&ch->r->lease_expired, (uint64_t)le->w_extra);
    }
    if (le->hits < SL_LEASE_HOT && le->prev_hits < SL_LEASE_HOT) return 0; /* cold here */
    le->taking = 1;
    le->asked_at = now;
    *fresh = 1;
    le->sent_at = now;
    return (long long)(le->size + rq->cost);
}

/* Records a lease of extra units (tag, ttl ms from sent_at; Redis had left
 * after it) in le, taken at mono ms now. */
static void commit(rchan *ch, lease *le, int64_t extra, int64_t ttl, int64_t tag, int64_t sent_at,
                   int64_t left, int64_t now)
{
    le->units = le->taken = extra;
    le->tag = tag;
    le->deadline = sent_at + ttl;
    le->reset = sent_at + ttl;
    le->got_at = now;
    le->left = left;
    atomic_fetch_add(&ch->r->lease_leases, 1);
    atomic_fetch_add(&ch->r->lease_units, (uint64_t)extra);
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
    lease *le = ch->lease != NULL ? find(ch->lease, e->key, rq->keylen, p) : NULL;
    const wgroup *g = e->wg;
    if (g != NULL && g->state == W_DONE && !g->ok) {
        /* --durability: its WAIT failed already; the take may be lost with
         * a master: never spent, never handed back (an R could subtract
         * units a new master never counted) */
        if (extra > 0) atomic_fetch_add(&ch->r->lease_expired, (uint64_t)extra);
        if (le != NULL && le->taking && !le->waiting) le->taking = 0;
        return 0;
    }
    /* A T a cluster redirected (MOVED, ASK) is answered on another
     * connection than the one whose entry sent it: an entry found here may
     * be waiting for its own T, sent later than this one ran, and would
     * count this lease's ttl from then -- past Redis's deadline. */
    if (le == NULL || !le->taking || le->waiting || e->redirects > 0 || le->klen != rq->keylen ||
        memcmp(le->key, e->key, rq->keylen) != 0 || !same_params(&le->p, p) || le->taken > 0) {
        /* nobody waits for these units here any more: back at once (with
         * --durability: never handed back, as if lost -- fewer admissions) */
        if (extra > 0 && g == NULL)
            send_return(ch, e->module, e->key, rq->keylen, p, extra, extra, tag);
        else if (extra > 0)
            atomic_fetch_add(&ch->r->lease_expired, (uint64_t)extra);
        return 0;
    }
    if (extra <= 0) { /* nothing to lease (little left): per request */
        le->taking = 0;
        return 0;
    }
    if (g != NULL && !(g->state == W_DONE && g->ok)) {
        /* --durability replicas:N: the units are spent only once WAIT says
         * N replicas have the take; a failover before that could hand them
         * to another node (docs/faults.md, "Leases under faults") */
        le->waiting = 1;
        le->module = e->module;
        le->w_extra = extra;
        le->w_ttl = ttl;
        le->w_tag = tag;
        le->w_sent_at = le->sent_at;
        le->w_left = rq->result.remaining;
        return 0;
    }
    le->taking = 0;
    le->module = e->module;
    commit(ch, le, extra, ttl, tag, le->sent_at, rq->result.remaining, now);
    return 0;
}

void sl__redis_lease_confirmed(rchan *ch, const pend *e, int ok)
{
    sl_breq *rq = e->rq;
    if (e->lease_want <= 0 || rq == NULL || rq->op != SL_BOP_DECIDE) return;
    if (ch->lease == NULL) return; /* closing: what was taken stays counted */
    lease *le = find(ch->lease, e->key, rq->keylen, rq->params);
    if (le == NULL || !le->waiting || le->klen != rq->keylen ||
        memcmp(le->key, e->key, rq->keylen) != 0 || !same_params(&le->p, rq->params))
        return;
    int64_t now = sl__mono_ms();
    le->waiting = 0;
    le->taking = 0;
    if (!ok || le->taken > 0) { /* lost, maybe: never spent, never handed back */
        atomic_fetch_add(&ch->r->lease_expired, (uint64_t)le->w_extra);
        return;
    }
    commit(ch, le, le->w_extra, le->w_ttl, le->w_tag, le->w_sent_at, le->w_left, now);
}
