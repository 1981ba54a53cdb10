/*
 * backend.h -- the one seam through which the server asks for decisions.
 *
 * A backend is where counters live: the local store (backend_local.c,
 * over an sl_store) or Redis (backend_redis.c and src/backend/redis/).  The
 * server never calls the store directly; it fills an sl_breq and submits it on its worker's channel:
 *
 *     sl_breq rq = {.op = SL_BOP_DECIDE, .params = &p, .key = k, ...,
 *                   .cb = done, .data = ctx};
 *     sl_backend_submit(chan, &rq);   ...   done(&rq) runs exactly once
 *
 * Completion.  Every submitted request completes through its callback,
 * exactly once, on the thread of the channel it was submitted on: at once,
 * before sl_backend_submit returns (the local backend always does: it
 * says so with SL_BACKEND_INLINE), or later, from that channel's event loop
 * (a network backend).  Completions of one channel may come in any order;
 * callers that must answer in request order keep their own order (the
 * server's reply slots, net.c).
 *
 * Ownership.  The caller owns the sl_breq and everything it points to until
 * the callback has run: the request is not copied.  (The local backend
 * reads the key only during the call; a later backend copies what it sends
 * before submit returns, so a caller's key buffer need only live until
 * then -- but the sl_breq itself, its results array and its plan must
 * live until the callback.)  A backend may raise rq->now_ms to the time
 * it decided at (the key's clock, SPEC section 4: the answer is relative
 * to it); it writes no other input field.
 *
 * Errors.  A request's own failure (a bad parameter, a refused batch) is
 * rq->rc < 0 with a message in rq->err.  The backend keeps its own error
 * state, as hiredis's context does: `err` (0 or a negative SL_E* code) and
 * `errstr`, set when the backend itself fails (a lost connection) and
 * kept until sl_backend_clear_err.
 *
 * Threads.  A backend is shared by every worker; each worker asks through
 * its own channel (sl_backend_channel), made for that worker's event loop.
 * Channels are used by one thread each; the backend's stats may be read
 * from any thread.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "sluice.h"

typedef enum sl_bop {
    SL_BOP_DECIDE = 0, /* one request: charge if allowed (sl_decide) */
    SL_BOP_PEEK,       /* one request, nothing charged (sl_peek) */
    SL_BOP_FORGET,     /* drop a key's state in algorithms [algo_lo, algo_hi) */
    SL_BOP_DECIDE_ALL, /* several requests all-or-none (sl_decide_all) */
    SL_BOP_CHECK,      /* execute a planned RL.CHECK (check.h) */
    SL_BOP_ACQUIRE,    /* a concurrency lease (sl_acquire): max, ttl_ms -> hold_id */
    SL_BOP_RELEASE,    /* give a lease back (sl_release): hold_id -> existed */
    SL_BOP_RESERVE,    /* charge an estimate, keep a reservation (sl_reserve): params,
                          cost = the estimate -> hold_id */
    SL_BOP_SETTLE,     /* settle one (sl_settle): hold_id, cost = actual -> existed */
    /* several DECIDEs one after another (sl_decide_many): calls, nreqs ->
     * results, rcs; only to a backend with SL_BACKEND_MANY */
    SL_BOP_DECIDE_MANY,
    SL_BOP_COUNT
} sl_bop;

typedef struct sl_breq sl_breq;
typedef void (*sl_breq_cb)(sl_breq *rq);

#define SL_BREQ_ERR 160

struct sl_breq {
    /* in: every op */
    sl_bop op;
    int64_t now_ms;
    sl_breq_cb cb; /* called exactly once (see the top) */
    void *data;    /* the caller's */
    /* in: DECIDE, PEEK, FORGET */
    const sl_params *params; /* DECIDE, PEEK */
    const char *key;
    size_t keylen;
    int64_t cost; /* DECIDE, PEEK */
    int algo_lo;  /* FORGET: algorithms [algo_lo, algo_hi) */
    int algo_hi;
    /* in: DECIDE_ALL (reqs), DECIDE_MANY (calls) */
    const sl_request *reqs;
    const sl_call *calls;
    size_t nreqs;
    /* in: CHECK */
    const sl_check_plan *plan;
    /* in: ACQUIRE (max, ttl_ms); RELEASE and SETTLE (hold_id) */
    int64_t max;
    int64_t ttl_ms;
    uint64_t hold_id; /* out for ACQUIRE and RESERVE: the new id, 0 when denied */

    /* out */
    int rc;                    /* 0, or a negative SL_E* code with err */
    char err[SL_BREQ_ERR];     /* "" unless rc < 0 (may be "" then: use sl_strerror) */
    sl_result result;          /* DECIDE, PEEK */
    int existed;               /* FORGET: 1 if some state was dropped; RELEASE: 1 if
                                  the lease was held; SETTLE: 1 if settled */
    sl_result *results;        /* DECIDE_ALL, DECIDE_MANY: the caller's array of nreqs, filled */
    int *rcs;                  /* DECIDE_MANY: the caller's array of nreqs: each call's
                                  0 or SL_E* code, as DECIDE's rc (rc itself is 0) */
    int all_allowed;           /* DECIDE_ALL */
    sl_check_outcome *outcome; /* CHECK: the caller's, filled */
};

/* What a backend knows about the state it keeps; fields it cannot know are 0. */
typedef struct sl_backend_stats {
    uint64_t keys;      /* live keys */
    uint64_t bytes;     /* accounted memory */
    uint64_t max_bytes; /* the bound; 0 = none */
    uint64_t evictions; /* keys dropped to stay under the bound */
    uint64_t expired;   /* keys dropped because their time was up */
    uint64_t evicted_at_rest;  /* of expired: dropped to make room */
    uint64_t evicted_at_limit; /* of evictions: keys at their limit */
    uint64_t refused;          /* requests refused: no room, nothing at rest to drop */
} sl_backend_stats;

typedef struct sl_backend sl_backend;
typedef struct sl_bchan sl_bchan;

#define SL_BACKEND_INLINE 1 /* every request completes before submit returns */
/* takes SL_BOP_DECIDE_MANY (an inline backend only: the caller's arrays
 * are read and written during submit) */
#define SL_BACKEND_MANY 2

/* What a request gets when a backend cannot answer (--on-backend-error):
 * the Redis backend's policy while Redis is down or slow (backend_redis.h
 * says what each answers); the local backend always answers. */
typedef enum sl_backend_policy {
    SL_BACKEND_DENY = 0, /* denied, retry after SL_REDIS_DENY_RETRY */
    SL_BACKEND_ALLOW,    /* allowed */
    SL_BACKEND_LOCAL,    /* decided on this node's own store, the limit shared by the fleet */
    SL_BACKEND_POLICIES
} sl_backend_policy;

/* The state of a backend that decides elsewhere (Redis), for INFO's
 * Backend section, the status page and the start-up log. */
typedef struct sl_backend_state {
    char url[1024];         /* where, without a password (a ring's: every URL, by commas) */
    int up;                 /* 1: every channel connected to every node */
    int64_t down_since_ms;  /* wall clock when the first node down went; 0 when up */
    int nodes;              /* servers it talks to */
    uint64_t errors;        /* error replies and lost connections */
    uint64_t timeouts;      /* requests answered by the policy after the timeout */
    uint64_t reconnects;    /* connections made again after one was lost */
    uint64_t fallback[SL_BACKEND_POLICIES]; /* answers by the policy, by sl_backend_policy */
    uint64_t cache_hits;    /* requests the deny cache answered */
    uint64_t inflight;      /* requests sent, not yet answered */
    const char *policy;     /* sl_backend_policy_name */
    int64_t timeout_ms;
    int64_t fleet_size;
    int deny_cache;
    const char *path;     /* Redis: "module": every connection sends the sluice module's
                             commands; "script": every one the script (no module, or
                             one it cannot use); "mixed": some of each (between a
                             MODULE LOAD and every reconnect) */
    int module_channels;  /* connections (a worker's to a node) on the module's path */
    char last_error[256]; /* "" = none */
    char master[280];     /* a Sentinel's: the master it named, host:port ("" = not yet, or no
                             Sentinel) */
} sl_backend_state;

struct evbuffer;

/* A backend implementation.  Every function is required but the three
 * that tell what a backend knows beyond sl_backend_stats (info, metrics,
 * state): NULL there means nothing more to tell (the local backend). */
typedef struct sl_backend_ops {
    const char *name; /* "local", ... */
    /* Makes worker's channel for its event loop `loop` (an opaque pointer:
     * libevent's event_base for sluiced).  NULL with b->err set on failure. */
    sl_bchan *(*channel)(sl_backend *b, void *loop);
    void (*channel_free)(sl_bchan *ch);
    /* Takes rq; its callback runs exactly once (see the top).  Never fails:
     * a request that cannot be run completes with rq->rc < 0. */
    void (*submit)(sl_bchan *ch, sl_breq *rq);
    void (*stats)(sl_backend *b, sl_backend_stats *out);
    void (*free)(sl_backend *b);
    /* INFO's Backend section after backend_name: calls line(arg, name,
     * value) once per line, in the order INFO shows them. */
    void (*info)(sl_backend *b, void (*line)(void *arg, const char *name, const char *value),
                 void *arg);
    /* Appends the backend's own families to a /metrics page (Prometheus
     * text format).  Returns 0, or -1 when out of memory. */
    int (*metrics)(sl_backend *b, struct evbuffer *out);
    /* Fills *out and returns 0. */
    int (*state)(sl_backend *b, sl_backend_state *out);
} sl_backend_ops;

/* The part every backend starts with. */
struct sl_backend {
    const sl_backend_ops *ops;
    unsigned flags;   /* SL_BACKEND_INLINE */
    size_t req_bytes; /* what one request in flight holds in the backend (its entry,
                         its command): the service counts it (service.h: charge) */
    int err;          /* 0, or the backend's own failure (SL_E*) */
    char errstr[128]; /* what err means here; "" when err is 0 */
};

/* A channel: the part every backend's channel starts with. */
struct sl_bchan {
    sl_backend *b;
};

static inline sl_bchan *sl_backend_channel(sl_backend *b, void *loop)
{
    return b->ops->channel(b, loop);
}

static inline void sl_backend_channel_free(sl_bchan *ch)
{
    if (ch != NULL) ch->b->ops->channel_free(ch);
}

/* Submits rq on ch (see the top for completion and ownership).  Costs one
 * indirect call over the backend's own work. */
static inline void sl_backend_submit(sl_bchan *ch, sl_breq *rq) { ch->b->ops->submit(ch, rq); }

static inline void sl_backend_stats_get(sl_backend *b, sl_backend_stats *out)
{
    b->ops->stats(b, out);
}

static inline void sl_backend_free(sl_backend *b)
{
    if (b != NULL) b->ops->free(b);
}

/* INFO's Backend section's lines after backend_name (ops->info); none
 * for a backend with nothing to tell beyond its name. */
static inline void sl_backend_info(sl_backend *b,
                                   void (*line)(void *arg, const char *name, const char *value),
                                   void *arg)
{
    if (b->ops->info != NULL) b->ops->info(b, line, arg);
}

/* Appends a backend's own numbers to a /metrics page (Prometheus text
 * format): the Redis backend's state and counters; nothing for the local
 * backend, whose numbers sl_backend_stats has.  Returns 0, or -1 when out
 * of memory. */
static inline int sl_backend_metrics_write(struct evbuffer *out, sl_backend *b)
{
    return b->ops->metrics != NULL ? b->ops->metrics(b, out) : 0;
}

/* Fills *out with the state of a backend that decides elsewhere and
 * returns 0; -1 (nothing filled) for one that decides here (local). */
static inline int sl_backend_state_get(sl_backend *b, sl_backend_state *out)
{
    return b->ops->state != NULL ? b->ops->state(b, out) : -1;
}

/* --on-backend-error's name of a policy ("deny", "allow", "local"), or NULL. */
const char *sl_backend_policy_name(int policy);

/* ---- the backends --backend names (the server's: linked with the Redis
 * backend, src/backend/backend_redis.c) ---- */

/* --durability replicas:N: the largest N (Redis's WAIT takes any; more
 * replicas than this is not a setup a WAIT per batch suits). */
#define SL_DURABILITY_REPLICAS_MAX 100

/* How to make the backend --backend names. */
typedef struct sl_backend_opts {
    const char *url;          /* "local", or one redis://... URL or several
                                 (sl_backend_url_check) */
    sl_store *store;          /* "local": the store it decides on (not owned) */
    int64_t timeout_ms;       /* no caller waits longer for Redis (>= 1) */
    sl_backend_policy policy; /* when Redis cannot answer */
    int64_t fleet_size;       /* SL_BACKEND_LOCAL: L and B divided by this (>= 1) */
    int deny_cache;           /* 1: the local deny cache is on */
    int durability;           /* --durability replicas:N: N (1..SL_DURABILITY_REPLICAS_MAX),
                                 an allowed answer waits for Redis's WAIT N; 0: none */
    int trust_client_time;    /* 1: the request's now_ms is the script's `now`;
                                 0: "" (Redis's clock) */
    int lease;                /* --lease on: hot keys lease quota (docs/fleet.md, "Leases") */
    uint64_t local_max_bytes; /* SL_BACKEND_LOCAL's own store: its bound (0 = none) */
    unsigned local_on_full;   /* ... and what it does when full (sl_store_opts.on_full) */
    /* Called on a change of the backend's state (up: every channel has its
     * connection; down: some channel has none), from the worker whose
     * channel changed it; what says why.  NULL: none. */
    void (*on_state)(void *arg, int up, const char *url, const char *what);
    /* Called with state_arg when a server's path is first known (its
     * start-up check, from the constructor; a cluster's master found
     * later, at its first connection) and when a connection finds another
     * (changed 1: the module loaded or gone, from that worker): module 1,
     * decisions use the sluice module's commands; 0, the Lua script, why
     * saying what Redis answered when a module may be there (an ACL's
     * NOPERM, an AT refused), "" when there is none.  NULL: none. */
    void (*on_path)(void *arg, const char *url, int module, const char *why, int changed);
    void *state_arg;
} sl_backend_opts;

/* The backend o->url names: the local one over o->store, or Redis
 * (reached now, synchronously, to check the URL, the password, the db and
 * the script: sl_backend_redis_new).  NULL with a message in err. */
sl_backend *sl_backend_open(const sl_backend_opts *o, char *err, size_t errlen);

/* Checks s[0..len) as --backend's value: "local", or redis URLs (one, a
 * ring's, a cluster's seeds).  Returns 0, or -1 with a message naming
 * the element and the part that is wrong (sl_redis_urls_parse). */
int sl_backend_url_check(const char *s, size_t len, char *err, size_t errlen);

/* --backend's value as --dump-options shows it: the URLs without their
 * passwords (a cluster's: redis-cluster://user:***@seed,seed...). */
void sl_backend_url_shown(const char *url, char *buf, size_t cap);

/* Sets the backend's error state (printf-style message); returns err. */
int sl__backend_set_err(sl_backend *b, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sl__backend_clear_err(sl_backend *b);

/* Completes rq with an error: rq->rc = rc, rq->err = the message, then
 * rq->cb(rq).  For backends' refusals. */
void sl__breq_fail(sl_breq *rq, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
