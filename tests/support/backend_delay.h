/*
 * backend_delay.h -- a test backend that answers later, and out of order.
 *
 * It wraps another backend (the local one in the tests) and implements
 * backend.h the way a network backend would behave, without a network:
 *
 *   - submit hands a private copy of the request (the key copied into the
 *     copy's own storage) to the inner backend AT ONCE, so decisions are
 *     made in submission order, exactly as one pipelined connection to a
 *     server would make them;
 *   - the caller's request is completed LATER, from a libevent timer on
 *     the channel's event loop, after a delay drawn per request from a
 *     seeded PRNG in [0, max_delay_us] microseconds: requests submitted
 *     together complete in another order than they were submitted;
 *   - the caller's out fields (result, results[], outcome, existed, ...)
 *     are written only at completion, just before its callback.
 *
 * Not SL_BACKEND_INLINE: no request ever completes before submit returns.
 * A channel's memory grows only with its requests in flight (entries are
 * pooled and reused).  channel_free completes what is still in flight with
 * SL_EINVAL "channel closed", as a network backend answers requests it
 * can no longer send; free frees only the wrapper (the inner backend is
 * the caller's: free it after this one).
 *
 * Threads: a channel is used by the thread running its event loop, as
 * backend.h says; hold/release and the counters may be used from any
 * thread.
 */
#ifndef SL_TEST_BACKEND_DELAY_H
#define SL_TEST_BACKEND_DELAY_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* A delaying backend over inner (not owned).  Channels need a libevent
 * `struct event_base *` as their loop.  max_delay_us: the largest delay of
 * one request (0 = every request completes on the loop's next turn, still
 * after submit returns).  NULL when out of memory. */
sl_backend *backend_delay_new(sl_backend *inner, uint64_t seed, unsigned max_delay_us);

/* While held, no request completes: timers that fire re-arm themselves
 * (every 200 us) until backend_delay_release.  For tests that need requests
 * to stay in flight while something else happens (a client leaving). */
void backend_delay_hold(sl_backend *b);
void backend_delay_release(sl_backend *b);

/* Requests submitted and not yet completed, over every channel. */
size_t backend_delay_inflight(sl_backend *b);
/* Requests submitted since the backend was made, over every channel. */
uint64_t backend_delay_submitted(sl_backend *b);
/* Completions that overtook an earlier submission of their channel (the
 * request completed while one submitted before it was still in flight). */
uint64_t backend_delay_overtakes(sl_backend *b);

#endif
