/*
 * backend.h -- the one seam through which the server asks for decisions.
 *
 * A backend is where counters live: the local store (backend_local.c,
 * sl_store) or Redis (backend_redis.h).  The server never calls the store
 * directly; it fills an sl_breq and submits it on its worker's channel:
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
    /* in: DECIDE_ALL */
    const sl_request *reqs;
    size_t nreqs;
    /* in: CHECK */
    const sl_check_plan *plan;

    /* out */
    int rc;                    /* 0, or a negative SL_E* code with err */
    char err[SL_BREQ_ERR];     /* "" unless rc < 0 (may be "" then: use sl_strerror) */
    sl_result result;          /* DECIDE, PEEK */
    int existed;               /* FORGET: 1 if some state was dropped */
    sl_result *results;        /* DECIDE_ALL: the caller's array of nreqs, filled */
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

/* A backend implementation.  Every function is required. */
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

struct evbuffer;
/* Appends a backend's own numbers to a /metrics page (Prometheus text
 * format): the Redis backend's state and counters (backend_redis.c);
 * nothing for the local backend, whose numbers sl_backend_stats has.
 * Returns 0, or -1 when out of memory. */
int sl_backend_metrics_write(struct evbuffer *out, sl_backend *b);

/* Sets the backend's error state (printf-style message); returns err. */
int sl__backend_set_err(sl_backend *b, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sl__backend_clear_err(sl_backend *b);

/* Completes rq with an error: rq->rc = rc, rq->err = the message, then
 * rq->cb(rq).  For backends' refusals. */
void sl__breq_fail(sl_breq *rq, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
