/*
 * service.c -- the protocol-neutral service layer (service.h).
 *
 * A decision goes: protocol -> sl_svc_allow / sl_svc_check -> a request
 * context from the worker's pool -> sl_backend_submit -> (now or later)
 * done_* -> statistics -> the protocol's callback -> the context back to
 * the pool.  In steady state nothing is allocated: contexts are reused,
 * and the pool only grows while more requests are in flight than ever
 * before on this worker.
 *
 * With a backend that completes inline (SL_BACKEND_INLINE) the key and the
 * rules are read straight from the caller's bytes and the worker's rules
 * reference.  With one that may answer later, the context keeps a copy of
 * the key and a reference to the rule set, so a reload or the caller's
 * buffer moving on cannot pull them away while the request is in flight.
 *
 * A run of RL.ALLOW (sl_svc_allow_many: a protocol's pipelined requests)
 * is one context and one backend request (DECIDE_MANY) on a backend that
 * takes it, each call then counted and answered as done_allow does one;
 * on any other it is n sl_svc_allow calls.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "history.h"
#include "service.h"
#include "util.h"

const char sl_svc_no_rules[] = "no rules loaded (start sluiced with --rules PATH)";

/* What an RL.CHECK needs beyond a plain request (~13 KB): pooled apart,
 * so an RL.ALLOW in flight holds only its small context. */
typedef struct svc_check {
    sl_check_plan plan;
    sl_check_outcome out;
    sl_check_status st[SL_CHECK_MAX_DESC];
    /* set only when plan.nmetric > 0 (metric_entries): */
    sl_rule_stats *metric[SL_MAX_BATCH];  /* item k's per-value entry; NULL: none
                                             beyond its rule's own */
    unsigned char overflow[SL_MAX_BATCH]; /* item k's per-value name not tracked */
    struct svc_check *next;               /* in the free pool */
} svc_check;

struct svc_req {
    sl_breq b;
    sl_svc_ctx *x;
    sl_svc_cb cb;
    void *arg;
    int commit;           /* ALLOW: a decision, counted in the statistics */
    unsigned nsampled;    /* DECIDE_MANY: its calls whose latency is sampled */
    int front;            /* SL_FRONT_* it came in by (x->front at submission) */
    sl_params p;          /* ALLOW, PEEK: b.params points here */
    int64_t t0_ns;        /* sampled: submission time; 0 = not timed */
    sl_rules *held;       /* CHECK, later backends: the set, referenced */
    svc_check *chk;       /* CHECK: its plan and outcome */
    char key[SL_MAX_KEY]; /* later backends: the key, copied */
    svc_req *next;        /* in the free pool */
};

int sl_svc_ctx_init(sl_svc_ctx *x, sl_srv *srv, int id, void *loop, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    x->srv = srv;
    x->id = id;
    x->st = &srv->stats.workers[id];
    x->chan = sl_backend_channel(srv->backend, loop);
    if (x->chan == NULL) {
        snprintf(err, errlen, "worker %d: cannot reach the %s backend: %s", id,
                 srv->backend->ops->name, srv->backend->errstr);
        return -1;
    }
    if (loop != NULL && srv->live != NULL) {
        char e[128];
        x->inbox = sl_live_inbox_new(srv->live, loop, e, sizeof e);
        if (x->inbox == NULL) {
            snprintf(err, errlen, "worker %d: rules reloads: %s", id, e);
            sl_backend_channel_free(x->chan);
            x->chan = NULL;
            return -1;
        }
    }
    return 0;
}

void sl_svc_ctx_done(sl_svc_ctx *x)
{
    /* the channel first: a backend answers what it still holds as it
     * closes, and those answers come back to the pools freed below */
    sl_backend_channel_free(x->chan);
    x->chan = NULL;
    sl_live_inbox_free(x->inbox); /* runs the reload answers still due */
    x->inbox = NULL;
    while (x->free != NULL) {
        svc_req *q = x->free;
        x->free = q->next;
        free(q);
    }
    while (x->free_checks != NULL) {
        svc_check *k = x->free_checks;
        x->free_checks = k->next;
        free(k);
    }
    sl_live_cache_drop(&x->rules);
}

/* A request context from the pool; NULL when out of memory. */
static svc_req *req_get(sl_svc_ctx *x)
{
    svc_req *q = x->free;
    if (q != NULL) {
        x->free = q->next;
    } else if ((q = malloc(sizeof *q)) == NULL) {
        return NULL;
    }
    q->x = x;
    q->held = NULL;
    q->chk = NULL;
    q->t0_ns = 0;
    q->b.data = q;
    q->b.now_ms = 0;
    q->front = x->front;
    x->inflight++;
    if (++x->st->lat_tick % SL_STATS_LAT_SAMPLE == 0) q->t0_ns = sl__mono_ns();
    return q;
}

static int inline_backend(const sl_svc_ctx *x)
{
    return (x->srv->backend->flags & SL_BACKEND_INLINE) != 0;
}

/* Answers an error that never reached the backend. */
static void reply_err(sl_svc_cb cb, void *arg, int rc, const char *msg)
{
    sl_svc_reply r;
    memset(&r, 0, sizeof r);
    r.rc = rc;
    r.err = msg;
    cb(arg, &r);
}

/* A context for a request answered by cb(arg, ...), or NULL after
 * answering "out of memory" itself. */
static svc_req *req_start(sl_svc_ctx *x, sl_svc_cb cb, void *arg)
{
    svc_req *q = req_get(x);
    if (q == NULL) {
        reply_err(cb, arg, SL_ENOMEM, sl_strerror(SL_ENOMEM));
        return NULL;
    }
    q->cb = cb;
    q->arg = arg;
    return q;
}

size_t sl_svc_pooled(const sl_svc_ctx *x)
{
    size_t n = 0;
    for (const svc_req *q = x->free; q != NULL; q = q->next) n++;
    return n;
}

/* Points the request at its key: the caller's bytes for an inline
 * backend (read during submit only), a copy for one that answers later. */
static void set_key(svc_req *q, const char *key, size_t keylen)
{
    q->b.key = key;
    q->b.keylen = keylen;
    if (!inline_backend(q->x) && keylen <= sizeof q->key) {
        memcpy(q->key, key, keylen);
        q->b.key = q->key;
    }
}

/* The reply fields every answer shares. */
static void reply_init(sl_svc_reply *r, const sl_breq *b)
{
    memset(r, 0, sizeof *r);
    r->rc = b->rc;
    r->err = b->rc < 0 ? (b->err[0] ? b->err : sl_strerror(b->rc)) : "";
}

static void req_put(svc_req *q)
{
    sl_svc_ctx *x = q->x;
    if (q->held != NULL) sl_rules_unref(q->held);
    if (q->chk != NULL) {
        q->chk->next = x->free_checks;
        x->free_checks = q->chk;
    }
    x->inflight--;
    q->next = x->free;
    x->free = q;
}

/* Submits q's request.  To a backend that may answer later, what it
 * holds while in flight -- its context, a CHECK's plan, the backend's own
 * share (sl_backend.req_bytes) -- is told to x->charge first, for the
 * bounds of the connection it is for (service.h). */
static void submit(sl_svc_ctx *x, svc_req *q)
{
    if (x->charge != NULL && !inline_backend(x))
        x->charge(x->charge_arg,
                  sizeof *q + (q->chk != NULL ? sizeof *q->chk : 0) + x->srv->backend->req_bytes);
    sl_backend_submit(x->chan, &q->b);
}

static void timed(svc_req *q)
{
    if (q->t0_ns != 0) sl_stats_latency(q->x->st, sl__mono_ns() - q->t0_ns);
}

/* ---- values ---------------------------------------------------------------- */

int sl_svc_parse_at(const sl_svc_ctx *x, int64_t now, const char *s, size_t n, int64_t *out,
                    char *err, size_t errlen)
{
    const sl_config *cfg = x->srv->cfg;
    return sl__parse_at(cfg->trust_client_time, cfg->max_client_skew_ms,
                        "AT is refused: this server decides at its own clock (start sluiced "
                        "with --trust-client-time to accept client times)",
                        now, s, n, out, err, errlen);
}

/* ---- RL.ALLOW / RL.PEEK ---------------------------------------------------- */

static void done_allow(sl_breq *b)
{
    svc_req *q = b->data;
    sl_svc_ctx *x = q->x;
    timed(q);
    sl_svc_reply r;
    reply_init(&r, b);
    r.result = b->result;
    if (b->rc == 0 && q->commit) {
        sl_algo a = q->p.algo;
        sl_stat_inc(&x->st->decisions[a], 1);
        sl_stat_inc(b->result.allowed ? &x->st->allowed[a] : &x->st->denied[a], 1);
        sl_stats_decided(x->st, q->front, b->result.allowed);
        if (!b->result.allowed) sl_history_denied(x->srv->history, x->id, b->key, b->keylen);
    }
    sl_svc_cb cb = q->cb;
    void *arg = q->arg;
    req_put(q); /* before the callback: it may start the next request */
    cb(arg, &r);
}

void sl_svc_allow(sl_svc_ctx *x, const char *key, size_t keylen, const sl_params *p, int64_t cost,
                  int64_t at, int commit, sl_svc_cb cb, void *arg)
{
    svc_req *q = req_start(x, cb, arg);
    if (q == NULL) return;
    q->commit = commit;
    q->p = *p;
    sl_breq *b = &q->b;
    b->op = commit ? SL_BOP_DECIDE : SL_BOP_PEEK;
    b->now_ms = at;
    b->cb = done_allow;
    b->params = &q->p;
    b->cost = cost;
    set_key(q, key, keylen);
    submit(x, q);
}

/* ---- a run of RL.ALLOW as one batch -------------------------------------------- */

size_t sl_svc_many_max(const sl_svc_ctx *x)
{
    unsigned want = SL_BACKEND_INLINE | SL_BACKEND_MANY;
    return (x->srv->backend->flags & want) == want ? SL_SVC_MANY : 1;
}

/* DECIDE_MANY answered: each call counted as done_allow counts one, then
 * answered in order.  The arrays (b->calls, results, rcs) are
 * sl_svc_allow_many's, alive during this call (the backend is inline);
 * q->arg holds its args.  Each sampled call (the worker's tick, one in
 * SL_STATS_LAT_SAMPLE, as for single requests) is timed as the whole
 * batch: from its submission to its completion. */
static void done_many(sl_breq *b)
{
    svc_req *q = b->data;
    sl_svc_ctx *x = q->x;
    void *const *args = q->arg;
    sl_svc_cb cb = q->cb;
    int front = q->front;
    int64_t t0 = q->t0_ns;
    unsigned timed_n = q->nsampled;
    const sl_call *calls = b->calls;
    const sl_result *res = b->results;
    const int *rcs = b->rcs;
    size_t n = b->nreqs;
    req_put(q); /* before the callbacks, as done_allow: b is not read again */
    if (t0 != 0) {
        int64_t ns = sl__mono_ns() - t0;
        for (unsigned k = 0; k < timed_n; k++) sl_stats_latency(x->st, ns);
    }
    sl_svc_reply r;
    memset(&r, 0, sizeof r); /* once: each call sets rc, err and result */
    for (size_t i = 0; i < n; i++) {
        const sl_call *c = &calls[i];
        r.rc = rcs[i];
        r.err = r.rc < 0 ? sl_strerror(r.rc) : "";
        r.result = r.rc == 0 ? res[i] : (sl_result){0};
        if (r.rc == 0) {
            sl_algo a = c->params->algo;
            sl_stat_inc(&x->st->decisions[a], 1);
            sl_stat_inc(res[i].allowed ? &x->st->allowed[a] : &x->st->denied[a], 1);
            sl_stats_decided(x->st, front, res[i].allowed);
            sl_stat_inc(&x->st->batched, 1);
            if (!res[i].allowed) sl_history_denied(x->srv->history, x->id, c->key, c->keylen);
        }
        cb(args[i], &r);
    }
}

void sl_svc_allow_many(sl_svc_ctx *x, const sl_call *calls, size_t n, void *const *args,
                       sl_svc_cb cb)
{
    if (n <= 1 || n > sl_svc_many_max(x)) { /* one at a time: what the batch stands for */
        for (size_t i = 0; i < n; i++)
            sl_svc_allow(x, calls[i].key, calls[i].keylen, calls[i].params, calls[i].cost,
                         calls[i].now_ms, 1, cb, args[i]);
        return;
    }
    sl_result results[SL_SVC_MANY];
    int rcs[SL_SVC_MANY];
    unsigned sampled = x->st->lat_tick % SL_STATS_LAT_SAMPLE == SL_STATS_LAT_SAMPLE - 1;
    svc_req *q = req_get(x); /* its own tick: the first call's */
    if (q == NULL) {         /* out of memory: each answers so, as sl_svc_allow would */
        for (size_t i = 0; i < n; i++) reply_err(cb, args[i], SL_ENOMEM, sl_strerror(SL_ENOMEM));
        return;
    }
    for (size_t i = 1; i < n; i++) /* the other calls' ticks */
        if (++x->st->lat_tick % SL_STATS_LAT_SAMPLE == 0) {
            sampled++;
            if (q->t0_ns == 0) q->t0_ns = sl__mono_ns();
        }
    q->cb = cb;
    q->arg = (void *)args;
    q->nsampled = sampled;
    sl_breq *b = &q->b;
    b->op = SL_BOP_DECIDE_MANY;
    b->cb = done_many;
    b->calls = calls;
    b->nreqs = n;
    b->results = results;
    b->rcs = rcs;
    b->now_ms = calls[0].now_ms;
    submit(x, q);
}

/* ---- RL.RESET -------------------------------------------------------------- */

static void done_reset(sl_breq *b)
{
    svc_req *q = b->data;
    sl_svc_reply r;
    reply_init(&r, b);
    r.existed = b->existed;
    sl_svc_cb cb = q->cb;
    void *arg = q->arg;
    req_put(q);
    cb(arg, &r);
}

void sl_svc_reset(sl_svc_ctx *x, const char *key, size_t keylen, int algo_lo, int algo_hi,
                  sl_svc_cb cb, void *arg)
{
    svc_req *q = req_start(x, cb, arg);
    if (q == NULL) return;
    q->t0_ns = 0; /* not a decision */
    sl_breq *b = &q->b;
    b->op = SL_BOP_FORGET;
    b->cb = done_reset;
    b->algo_lo = algo_lo;
    b->algo_hi = algo_hi;
    set_key(q, key, keylen);
    submit(x, q);
}

/* ---- holds: RL.ACQUIRE, RL.RELEASE, RL.RESERVE, RL.SETTLE ------------------ */

static void done_hold(sl_breq *b)
{
    svc_req *q = b->data;
    sl_svc_ctx *x = q->x;
    timed(q);
    sl_svc_reply r;
    reply_init(&r, b);
    r.result = b->result;
    r.existed = b->existed;
    r.hold_id = b->hold_id;
    if (b->rc == 0 && q->commit) { /* a reservation is a decision on its limit */
        sl_algo a = q->p.algo;
        sl_stat_inc(&x->st->decisions[a], 1);
        sl_stat_inc(b->result.allowed ? &x->st->allowed[a] : &x->st->denied[a], 1);
        sl_stats_decided(x->st, q->front, b->result.allowed);
    }
    sl_svc_cb cb = q->cb;
    void *arg = q->arg;
    req_put(q);
    cb(arg, &r);
}

/* A hold request's context, its fields cleared; NULL after answering. */
static svc_req *hold_start(sl_svc_ctx *x, sl_bop op, const char *key, size_t keylen, int64_t at,
                           sl_svc_cb cb, void *arg)
{
    svc_req *q = req_start(x, cb, arg);
    if (q == NULL) return NULL;
    q->commit = 0;
    sl_breq *b = &q->b;
    b->op = op;
    b->now_ms = at;
    b->cb = done_hold;
    b->params = NULL;
    b->cost = 0;
    b->max = 0;
    b->ttl_ms = 0;
    b->hold_id = 0;
    b->existed = 0;
    set_key(q, key, keylen);
    return q;
}

void sl_svc_acquire(sl_svc_ctx *x, const char *key, size_t keylen, int64_t max, int64_t ttl_ms,
                    int64_t at, sl_svc_cb cb, void *arg)
{
    svc_req *q = hold_start(x, SL_BOP_ACQUIRE, key, keylen, at, cb, arg);
    if (q == NULL) return;
    q->b.max = max;
    q->b.ttl_ms = ttl_ms;
    submit(x, q);
}

void sl_svc_release(sl_svc_ctx *x, const char *key, size_t keylen, uint64_t id, int64_t at,
                    sl_svc_cb cb, void *arg)
{
    svc_req *q = hold_start(x, SL_BOP_RELEASE, key, keylen, at, cb, arg);
    if (q == NULL) return;
    q->t0_ns = 0; /* not a decision */
    q->b.hold_id = id;
    submit(x, q);
}

void sl_svc_reserve(sl_svc_ctx *x, const char *key, size_t keylen, const sl_params *p,
                    int64_t estimate, int64_t at, sl_svc_cb cb, void *arg)
{
    svc_req *q = hold_start(x, SL_BOP_RESERVE, key, keylen, at, cb, arg);
    if (q == NULL) return;
    q->commit = 1;
    q->p = *p;
    q->b.params = &q->p;
    q->b.cost = estimate;
    submit(x, q);
}

void sl_svc_settle(sl_svc_ctx *x, const char *key, size_t keylen, uint64_t id, int64_t actual,
                   int64_t at, sl_svc_cb cb, void *arg)
{
    svc_req *q = hold_start(x, SL_BOP_SETTLE, key, keylen, at, cb, arg);
    if (q == NULL) return;
    q->b.hold_id = id;
    q->b.cost = actual;
    submit(x, q);
}

/* ---- RL.CHECK -------------------------------------------------------------- */

/* Adds item k's answer to the statistics entry rs. */
static void count_item(sl_rule_stats *rs, const sl_check_item *t, const sl_check_outcome *o, int k)
{
    atomic_fetch_add_explicit(&rs->matched, 1, memory_order_relaxed);
    if (!o->res[k].allowed) {
        /* a quota limit that was over denies only with every quota
         * descriptor over (quota_denied); otherwise it answered OVER_QUOTA,
         * as sl_check_report says */
        _Atomic uint64_t *c = t->shadow                      ? &rs->shadow
                              : t->quota && !o->quota_denied ? &rs->over_quota
                                                             : &rs->denied;
        atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&rs->allowed, 1, memory_order_relaxed);
        if (o->stretched[t->lead]) atomic_fetch_add_explicit(&rs->elastic, 1, memory_order_relaxed);
    }
}

/* Adds one decided request to the per-rule statistics (stats.h): each
 * limit's rule, and its per-value name when k has one (k->plan.nmetric). */
static void count_rules(const svc_check *k)
{
    const sl_check_plan *plan = &k->plan;
    for (int j = 0; j < plan->nitems; j++) {
        const sl_check_item *t = &plan->items[j];
        sl_rule_stats *rs = t->rl->stats;
        if (rs == NULL) continue;
        count_item(rs, t, &k->out, j);
        if (plan->nmetric == 0) continue; /* the usual request */
        if (k->metric[j] != NULL)
            count_item(k->metric[j], t, &k->out, j);
        else if (k->overflow[j])
            atomic_fetch_add_explicit(&rs->overflow, 1, memory_order_relaxed);
    }
}

/* Finds the per-value statistics entry (stats.h) of every item whose node
 * names its statistics by the request's values -- before the request is
 * submitted, while descs (the caller's bytes) are still there.  Called
 * only when k->plan.nmetric > 0: requests of other rules pay nothing.
 * O(items + the names' lengths); a new name takes the statistics' lock. */
static void metric_entries(sl_stats *s, svc_check *k, const sl_rule_entry *const *descs,
                           const int *ndesc)
{
    const sl_check_plan *plan = &k->plan;
    char name[SL_STATS_MAX_NAME + 1];
    size_t len = 0;
    int named = -1, fits = 0; /* the descriptor whose name is in name; it fit */
    for (int j = 0; j < plan->nitems; j++) {
        const sl_check_item *t = &plan->items[j];
        const sl_rule_node *node = plan->node[t->desc];
        k->metric[j] = NULL;
        k->overflow[j] = 0;
        if (node == NULL || !node->metric_dynamic || t->rl->stats == NULL)
            continue; /* node NULL: a limit override's item */
        if (named != t->desc) {
            named = t->desc;
            fits = sl_rules_metric_name(node, descs[t->desc], ndesc[t->desc], name, sizeof name,
                                        &len) >= 0 &&
                   len < sizeof name;
        }
        /* a node of several limits: "#N" after the name, as its rules' names */
        int nth = node->nlimits > 1 ? (int)(t->rl - node->limits) + 1 : 0;
        sl_rule_stats *e = fits ? sl_stats_value_entry(s, t->rl->stats, name, len, nth) : NULL;
        if (e == NULL)
            k->overflow[j] = 1;
        else if (e != t->rl->stats)
            k->metric[j] = e;
    }
}

/* The status page's most-limited keys (history.h): each counting key
 * that denied this request, once. */
static void note_denied(sl_svc_ctx *x, const svc_check *k)
{
    const sl_check_plan *plan = &k->plan;
    for (int j = 0; j < plan->nitems; j++) {
        const sl_check_item *t = &plan->items[j];
        if (t->lead == j && !k->out.res[j].allowed && !t->shadow &&
            !(t->quota && !k->out.quota_denied))
            sl_history_denied(x->srv->history, x->id, t->key, t->keylen);
    }
}

static void done_check(sl_breq *b)
{
    svc_req *q = b->data;
    sl_svc_ctx *x = q->x;
    timed(q);
    sl_svc_reply r;
    reply_init(&r, b);
    svc_check *k = q->chk;
    if (b->rc == 0) {
        sl_check_report(&k->plan, &k->out, &r.result, k->st);
        sl_check_count(&k->plan, &k->out);
        count_rules(k);
        sl_stat_inc(&x->st->checks, 1);
        sl_stats_decided(x->st, q->front, k->out.allowed);
        if (!k->out.allowed) {
            sl_stat_inc(&x->st->checks_denied, 1);
            if (x->srv->history != NULL) note_denied(x, k);
        }
        r.n = k->plan.n;
        r.st = k->st;
        r.nleases = k->plan.nleases;
        r.leases = k->plan.leases;
        r.lid = k->out.lid;
    }
    /* the statuses live in q until the callback returns */
    q->cb(q->arg, &r);
    req_put(q);
}

void sl_svc_check(sl_svc_ctx *x, const sl_svc_check_req *c, sl_svc_cb cb, void *arg)
{
    const char *why;
    sl_rules *rules = sl_svc_rules(x, &why);
    if (rules == NULL) {
        reply_err(cb, arg, SL_EINVAL, why);
        return;
    }
    svc_req *q = req_get(x);
    if (q != NULL) {
        q->chk = x->free_checks;
        if (q->chk != NULL)
            x->free_checks = q->chk->next;
        else if ((q->chk = malloc(sizeof *q->chk)) == NULL)
            req_put(q), q = NULL;
    }
    if (q == NULL) {
        reply_err(cb, arg, SL_ENOMEM, sl_strerror(SL_ENOMEM));
        return;
    }
    const sl_config *cfg = x->srv->cfg;
    char err[SL_SVC_ERR];
    svc_check *k = q->chk;
    sl_check_input in = {.domain = c->domain,
                         .dlen = c->dlen,
                         .n = c->n,
                         .descs = c->descs,
                         .ndesc = c->ndesc,
                         .over = c->over,
                         .cost = c->cost,
                         .costs = c->costs,
                         .lyft = c->lyft,
                         .pool = cfg->capacity[0] ? &cfg->pool : NULL,
                         .now_ms = c->at,
                         .conc = c->conc};
    /* leases live in the local backend's holds table or in Redis (the
     * script's op C): elsewhere a concurrency limit is refused
     * (docs/rules.md, "Concurrency") */
    if (in.conc == SL_CHECK_CONC_LEASE && strcmp(x->srv->backend->ops->name, "local") != 0 &&
        strcmp(x->srv->backend->ops->name, "redis") != 0)
        in.conc = SL_CHECK_CONC_REFUSE;
    int rc = sl_check_plan_build(rules, &in, &k->plan, err, sizeof err);
    if (rc != 0) {
        req_put(q);
        reply_err(cb, arg, rc, err[0] ? err : sl_strerror(rc));
        return;
    }
    if (k->plan.nmetric > 0) metric_entries(&x->srv->stats, k, c->descs, c->ndesc);
    if (c->over != NULL) /* limit overrides: their statistics names (stats.h) */
        sl_stats_override_entries(&x->srv->stats, &k->plan, c->domain, c->dlen, c->descs, c->ndesc);
    q->cb = cb;
    q->arg = arg;
    if (!inline_backend(x)) q->held = sl_rules_ref(rules); /* the plan points into it */
    sl_breq *b = &q->b;
    b->op = SL_BOP_CHECK;
    b->now_ms = c->at;
    b->cb = done_check;
    b->plan = &k->plan;
    b->outcome = &k->out;
    submit(x, q);
}

/* ---- rules ----------------------------------------------------------------- */

sl_rules *sl_svc_rules(sl_svc_ctx *x, const char **why)
{
    sl_rules *r = x->srv->live ? sl_live_get(x->srv->live, &x->rules) : NULL;
    if (r == NULL && why != NULL) *why = sl_svc_no_rules;
    return r;
}

/* A reload being answered: the caller's callback and the worker's context. */
typedef struct svc_reload {
    sl_svc_ctx *x;
    sl_svc_cb cb;
    void *arg;
} svc_reload;

/* The answer of a reload, as the client is told it. */
static void reload_answer(sl_svc_ctx *x, sl_svc_cb cb, void *arg, int rc, uint64_t version,
                          const char *lerr)
{
    char msg[SL_SVC_ERR];
    sl_svc_reply r;
    memset(&r, 0, sizeof r);
    r.version = version;
    r.err = "";
    if (rc != 0) {
        snprintf(msg, sizeof msg, "rules not reloaded, version %llu keeps serving: %s",
                 (unsigned long long)version, lerr);
        r.rc = SL_EINVAL;
        r.err = msg;
    } else {
        sl_live_get(x->srv->live, &x->rules); /* this worker serves it from now on */
    }
    cb(arg, &r);
}

static void reload_done(void *arg, int rc, uint64_t version, const char *err)
{
    svc_reload *q = arg;
    sl_svc_ctx *x = q->x;
    x->inflight--;
    reload_answer(x, q->cb, q->arg, rc, version, err);
    free(q);
}

void sl_svc_reload(sl_svc_ctx *x, const char *why, sl_svc_cb cb, void *arg)
{
    sl_live *l = x->srv->live;
    if (l == NULL) {
        reply_err(cb, arg, SL_EINVAL, sl_svc_no_rules);
        return;
    }
    if (x->inbox == NULL) { /* no loop to come back to: here and now */
        char lerr[SL_LIVE_ERR];
        int rc = sl_live_reload(l, why, lerr, sizeof lerr);
        sl_live_info li;
        sl_live_info_get(l, &li);
        reload_answer(x, cb, arg, rc, li.version, lerr);
        return;
    }
    svc_reload *q = malloc(sizeof *q);
    if (q == NULL) {
        reply_err(cb, arg, SL_ENOMEM, "out of memory");
        return;
    }
    q->x = x;
    q->cb = cb;
    q->arg = arg;
    x->inflight++; /* a stopping worker waits for the answer (net.c) */
    if (sl_live_ask(x->inbox, why, reload_done, q) != 0) {
        x->inflight--;
        free(q);
        reply_err(cb, arg, SL_ENOMEM, "rules not reloaded: out of memory, or no reload thread");
    }
}
