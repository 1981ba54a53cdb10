/*
 * service.h -- what sluiced does, whatever the protocol: allow / peek /
 * reset / check over the backend (backend.h), the rules (list, reload) and
 * the numbers INFO shows.  A protocol module (src/proto/resp, http, grpc)
 * turns its own syntax into these calls and their answers into its own
 * replies; nothing here knows RESP, HTTP, sockets or threads.
 *
 * Each worker thread owns one sl_svc_ctx (no thread-locals): its channel
 * to the backend, its reference to the rules, its statistics shard and a
 * pool of request contexts.  Every call that decides completes through a
 * callback, exactly once, on the worker's thread: at once with the local
 * backend, later with one that answers over a network.  The callback gets
 * an sl_svc_reply that lives only during the call.
 *
 * Bad input never reaches the backend: protocols check every value with
 * the sl__parse_* helpers (args.h) and sl_svc_parse_at, whose messages are
 * what the client is told ("invalid window: ..., got '5x'"), the same for
 * every protocol.
 */
#ifndef SL_SERVICE_H
#define SL_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "args.h"
#include "backend.h"
#include "check.h"
#include "live.h"
#include "rules.h"
#include "server.h"
#include "stats.h"

#define SL_SVC_ERR 512 /* bytes of a client-facing error message */

/* An answer, as the callback sees it (valid during the call only). */
typedef struct sl_svc_reply {
    int rc;                    /* 0, or < 0: err says what, for the client */
    const char *err;           /* "" when rc is 0 */
    sl_result result;          /* ALLOW, PEEK; CHECK: the overall six fields */
    int existed;               /* RESET: 1 if some state was dropped; RELEASE: 1 if the
                                  lease was held; SETTLE: 1 if settled */
    uint64_t hold_id;          /* ACQUIRE, RESERVE: the new id; 0 when denied */
    uint64_t version;          /* RELOAD: the rules version now serving */
    int n;                     /* CHECK: descriptors */
    const sl_check_status *st; /* CHECK: n statuses */
    int nleases;               /* CHECK: the plan's leases (0: no concurrency limit
                                  matched, the reply has no lease element) */
    const sl_check_lease *leases; /* CHECK: nleases of them; leaders have lead == index */
    const uint64_t *lid;       /* CHECK: lease j's id, 0 when none is held */
} sl_svc_reply;

typedef void (*sl_svc_cb)(void *arg, const sl_svc_reply *r);

typedef struct svc_req svc_req;

/* One worker's context.  Used by its thread only. */
typedef struct sl_svc_ctx {
    sl_srv *srv;
    int id;                        /* worker number */
    sl_bchan *chan;                /* this worker's channel to the backend */
    sl_live_cache rules;           /* this worker's reference to the rules (live.h) */
    sl_worker_stats *st;           /* this worker's statistics shard */
    svc_req *free;                 /* request contexts ready for reuse */
    struct svc_check *free_checks; /* RL.CHECK's plans ready for reuse */
    size_t inflight;               /* requests submitted, not completed */
    int front;                     /* SL_FRONT_* (stats.h) of the requests submitted now:
                                      net.c sets it as it runs a connection's input */
    sl_live_inbox *inbox;          /* answers of its rules reloads (live.h); NULL: reload inline */
    /* Told, as each request is submitted to a backend that may answer
     * later (not an inline one), the bytes it holds until its callback
     * runs: its context, a CHECK's plan, the backend's share.  net.c
     * counts them against the bounds of the connection whose request it
     * is (net.c: "in flight"); NULL: nobody is told. */
    void (*charge)(void *arg, size_t bytes);
    void *charge_arg;
} sl_svc_ctx;

/* Makes worker id's context on its event loop `loop` (handed to the
 * backend's channel, and where the answers of its rules reloads arrive
 * when the server has rules).  Returns 0, or -1 with a message in err. */
int sl_svc_ctx_init(sl_svc_ctx *x, sl_srv *srv, int id, void *loop, char *err, size_t errlen);

/* Gives back what x holds.  Requests still in flight must have completed
 * (or their backend been freed). */
void sl_svc_ctx_done(sl_svc_ctx *x);

/* Request contexts x keeps for reuse (free now); a worker allocates one
 * only while more requests are in flight than ever before. */
size_t sl_svc_pooled(const sl_svc_ctx *x);

/* ---- values: each parses one, 0 or -1 with the client's message ---------- */

/* key, limit, window, algorithm, cost, burst, precision and quoting client
 * input: sl__parse_* and sl__quote in src/lib/args.h (one set of words
 * for sluiced and the Redis module).  Only AT needs the server: */
/* AT t, for a request the server would otherwise decide at `now` (its own
 * clock, sl_now_ms, as read for this turn): refused unless the server
 * trusts client time (--trust-client-time), and refused when t - now is
 * above --max-client-skew (a bound of 0: none), the message naming t, how
 * far ahead it is, now and the bound.  A t at exactly now + the bound is
 * accepted; a t in the past is never refused for being early (SPEC
 * section 4 decides it at the key's latest time, so it cannot reopen a
 * window).  *out is written only on success. */
int sl_svc_parse_at(const sl_svc_ctx *x, int64_t now, const char *s, size_t n, int64_t *out,
                    char *err, size_t errlen);

/* ---- decisions ------------------------------------------------------------ */

/* RL.ALLOW (commit = 1) or RL.PEEK (commit = 0) of key with parameters p at
 * time at, cost cost.  The key is read only during the call.  cb(arg, r)
 * runs exactly once: r->result, or r->rc < 0 with the engine's message. */
void sl_svc_allow(sl_svc_ctx *x, const char *key, size_t keylen, const sl_params *p, int64_t cost,
                  int64_t at, int commit, sl_svc_cb cb, void *arg);

/* The most RL.ALLOW requests sl_svc_allow_many decides as one batch on
 * x's backend: SL_SVC_MANY when the backend takes a run of decisions at
 * once (the local one: SL_BACKEND_MANY), else 1 (a protocol then has no
 * reason to hold requests back: it calls sl_svc_allow for each). */
#define SL_SVC_MANY SL_MAX_BATCH
size_t sl_svc_many_max(const sl_svc_ctx *x);

/* RL.ALLOW (commit) of each of calls[0..n), n <= sl_svc_many_max(x), in
 * order: exactly what n calls of sl_svc_allow(x, calls[i].key, ...,
 * calls[i].params, calls[i].cost, calls[i].now_ms, 1, cb, args[i]) would
 * answer and count -- a key named twice sees the first one's charge --
 * but decided by one backend request, which lets the store overlap the
 * cache misses of different keys (sl_decide_many).  cb(args[i], r) runs
 * exactly once for each i, in order, before the call returns.  The keys
 * and parameters are read only during the call. */
void sl_svc_allow_many(sl_svc_ctx *x, const sl_call *calls, size_t n, void *const *args,
                       sl_svc_cb cb);

/* RL.RESET: forgets key in algorithms [algo_lo, algo_hi).  cb gets
 * r->existed. */
void sl_svc_reset(sl_svc_ctx *x, const char *key, size_t keylen, int algo_lo, int algo_hi,
                  sl_svc_cb cb, void *arg);

/* One RL.CHECK request, as every front builds it (RESP's RL.CHECK, HTTP's
 * /v1/check and forward-auth, gRPC's ShouldRateLimit).  Everything it
 * points to is the caller's, read only during sl_svc_check. */
typedef struct sl_svc_check_req {
    const char *domain; /* dlen bytes */
    size_t dlen;
    int n;                             /* descriptors: sl_check_shape_desc's bounds */
    const sl_rule_entry *const *descs; /* descriptor i: its ndesc[i] entries descs[i] */
    const int *ndesc;
    const sl_check_override *over; /* descriptor i's limit override over[i]; NULL: none */
    int64_t cost;                  /* of every descriptor (0..SL_MAX_LIMIT), when costs
                                      is NULL */
    const int64_t *costs;          /* descriptor i's own cost costs[i] (0..SL_MAX_LIMIT;
                                      0: charges nothing), or NULL: `cost` for all */
    int lyft;                      /* 1: count this request the Lyft way, as
                                      --count-denied does, whatever the server's flag */
    int64_t at;                    /* ms: the decision's time */
    sl_check_conc conc;            /* a matched `concurrency: N`: SL_CHECK_CONC_LEASE
                                      for a front that hands the lease ids back (RESP,
                                      /v1/check; refused unless the backend is the
                                      local one), RATES (gRPC), REFUSE (0: the others) */
} sl_svc_check_req;

/* RL.CHECK of q (sl_check_plan_build: against the serving rules, with the
 * server's spare pool).  cb gets the overall six fields and q->n statuses,
 * or an error ("no rules loaded ...", the plan's own message: a bad shape,
 * too many limits, a cost out of range).  Descriptors of any depth and
 * keys of any length are planned (check.h): the fronts that bound them
 * check before calling. */
void sl_svc_check(sl_svc_ctx *x, const sl_svc_check_req *q, sl_svc_cb cb, void *arg);

/* ---- holds: leases and reservations (SPEC section 10) ------------------------ */

/* RL.ACQUIRE: a lease of key's concurrency limit max for ttl_ms at `at`.
 * cb gets r->result (the six fields) and r->hold_id (0: denied). */
void sl_svc_acquire(sl_svc_ctx *x, const char *key, size_t keylen, int64_t max, int64_t ttl_ms,
                    int64_t at, sl_svc_cb cb, void *arg);

/* RL.RELEASE: lease id of key.  cb gets r->existed (1: it was held). */
void sl_svc_release(sl_svc_ctx *x, const char *key, size_t keylen, uint64_t id, int64_t at,
                    sl_svc_cb cb, void *arg);

/* RL.RESERVE: estimate charged on (key, p) at `at`, a reservation kept.
 * cb gets r->result and r->hold_id (0: denied).  Counted as a decision. */
void sl_svc_reserve(sl_svc_ctx *x, const char *key, size_t keylen, const sl_params *p,
                    int64_t estimate, int64_t at, sl_svc_cb cb, void *arg);

/* RL.SETTLE: reservation id of key at `actual`.  cb gets r->existed (0:
 * unknown, settled already or expired) and, when 1, r->result. */
void sl_svc_settle(sl_svc_ctx *x, const char *key, size_t keylen, uint64_t id, int64_t actual,
                   int64_t at, sl_svc_cb cb, void *arg);

/* ---- rules and numbers ----------------------------------------------------- */

/* The serving rules for this worker (borrowed until the next call with x),
 * or NULL when the server has none (then *why says so). */
sl_rules *sl_svc_rules(sl_svc_ctx *x, const char **why);

/* Reloads the rules ("RL.RULES RELOAD").  On the rules' reload thread
 * (live.h) when x has a loop, so the worker goes on serving while the
 * files are read; cb then runs later, on the worker's thread; without a
 * loop (a detached connection) the reload runs now.  cb(arg, r): r->version
 * is the new version, or r->rc < 0 with the client's message ("rules not
 * reloaded, version N keeps serving: ...").  why: a string literal. */
void sl_svc_reload(sl_svc_ctx *x, const char *why, sl_svc_cb cb, void *arg);

/* Message for a server started without rules. */
extern const char sl_svc_no_rules[];

#endif
