/*
 * wait.h -- the waiting room: requests that wait for their turn instead
 * of being denied (RL.WAIT, HTTP's ?wait=ms; SPEC section 10,
 * docs/commands-wait.md).
 *
 * A waiter is a decision (one key's RL.ALLOW, or a whole RL.CHECK) with a
 * deadline.  Waiters line up per key -- a line per (key, algorithm), or per
 * (domain, first descriptor) for a check -- shared by every worker: only
 * the line's head ever asks the backend for a unit, so a later waiter
 * never gets one before an earlier one, whichever worker or connection
 * either came on.  The head asks at once, and when denied again after the
 * denial's retry_after_ms (a timer: no polling); when it is allowed or
 * leaves, the next waiter is woken on its own worker (each worker has a
 * door: an eventfd its loop reads).  A waiter whose deadline passes
 * leaves its line and gets RL.ALLOW's denial, charged nothing; one whose
 * client goes (proto.h: sl_conn_on_drop) leaves charged nothing.
 *
 * Every decision goes through the service (service.h) and so through the
 * backend seam: the local backend and Redis alike.  Time is the server's
 * clock, read once per event; each event does O(1) work on the lines (a
 * door's wake-ups are taken SL_WAIT_WAKE_BATCH at a time).
 *
 * Threads: the room is shared by the workers, its lines under one mutex
 * (held only to link and unlink, never across a decision).  A waiter is
 * touched outside the mutex only by the worker it came on, which alone
 * frees it.
 */
#ifndef SL_WAIT_H
#define SL_WAIT_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "service.h"

struct event_base;

/* The longest TIMEOUT a client may give when --max-wait is not set lower. */
#define SL_WAIT_MAX_TIMEOUT_MS (24LL * 3600 * 1000)
/* Wake-ups a door runs per event before yielding to the loop. */
#define SL_WAIT_WAKE_BATCH 64

typedef struct sl_wait sl_wait;

/* A room for nworkers workers, holding at most max_total waiters, at most
 * max_per_key in one line (>= 1 each).  NULL when out of memory. */
sl_wait *sl_wait_new(int nworkers, int64_t max_total, int64_t max_per_key);
/* After every worker detached. */
void sl_wait_free(sl_wait *r);

/* Worker x->id's door on its loop base: 0, or -1 (out of memory, or no
 * eventfd) with a message in err.  Until attached, a worker's requests do
 * not wait (they are decided once, as with TIMEOUT 0). */
int sl_wait_attach(sl_wait *r, sl_svc_ctx *x, struct event_base *base, char *err, size_t errlen);
/* The worker is stopping: its waiters are answered now (as at their
 * deadline), and new ones wait no longer than that. */
void sl_wait_stop(sl_wait *r, sl_svc_ctx *x);
/* Before the worker's service context is done (sl_svc_ctx_done): its
 * waiters still in line are answered with an error and freed, its door
 * closed; those whose decision is in flight finish as the backend
 * channel closes.  Idempotent; r may be NULL. */
void sl_wait_detach(sl_wait *r, sl_svc_ctx *x);

/* Numbers for INFO: waiters now, and since start those served, timed out,
 * dropped (client gone) and refused (bounds). */
typedef struct sl_wait_stats {
    int64_t waiting;
    uint64_t served, timed_out, dropped, refused;
} sl_wait_stats;
void sl_wait_stats_get(sl_wait *r, sl_wait_stats *out);

/* RL.WAIT (RESP) and /v1/allow?wait=ms: key's RL.ALLOW with p and cost,
 * arriving at now (the server's clock) on connection c, waiting at most
 * timeout_ms (0.., checked by the caller); the waiter leaves if c's
 * client goes (it takes c's drop hook: sl_conn_on_drop).  The protocol
 * opened the request's reply slot first.  cb(arg, r) runs exactly once, on
 * this worker: allowed, with delay_ms the time waited (plus leaky-bucket's
 * own delay); or at the deadline, RL.ALLOW's denial, nothing charged; or
 * an error: the bounds (SL_EFULL, the message naming the option), a bad
 * parameter, the client gone.  The key is copied. */
void sl_wait_allow(sl_svc_ctx *x, sl_conn *c, const char *key, size_t keylen, const sl_params *p,
                   int64_t cost, int64_t now, int64_t timeout_ms, sl_svc_cb cb, void *arg);

/* /v1/check?wait=ms: the whole all-or-none check q, waiting as above in
 * the line of (q->domain, q's first descriptor).  q is copied (its
 * overrides and costs included); q->at is ignored: each try is at the
 * server's clock.  cb gets the check's answer as sl_svc_check gives it. */
void sl_wait_check(sl_svc_ctx *x, sl_conn *c, const sl_svc_check_req *q, int64_t now,
                   int64_t timeout_ms, sl_svc_cb cb, void *arg);

/* ---- the queue logic, for the unit test (tests/test_wait.c) ---- */

/* Parses a TIMEOUT value (ms, or with a unit as windows take) s[0..n):
 * 0..max, or -1 with the client's message. */
int sl_wait_parse_timeout(const char *s, size_t n, int64_t max, int64_t *out, char *err,
                          size_t errlen);

#endif
