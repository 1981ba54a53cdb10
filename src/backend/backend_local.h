/*
 * backend_local.h -- the local backend: counters in this process's sl_store.
 *
 * Every request completes inline (SL_BACKEND_INLINE): submit calls the
 * store and then the callback, with no allocation and no lock of its own
 * (the store takes its per-record or per-shard lock, as sl_decide always
 * has).  The store stays the caller's: snapshots (sl_store_save/load) and
 * active expiry (sl_store_expire) are run by the server on the store
 * directly; they are not part of the seam because only a local store has
 * them.
 */
#ifndef SL_BACKEND_LOCAL_H
#define SL_BACKEND_LOCAL_H

#include "backend.h"
#include "checkexec.h"

/* A backend over store s (not owned: free the backend before the store).
 * NULL when out of memory. */
sl_backend *sl_backend_local_new(sl_store *s);

/* Called by the local backend after a request that may have changed the
 * counter of (kind, key) -- kind: algorithm | SL__KIND_SPACE for key space
 * 1 (store.h) --, on the worker's thread, once per counter: a decision
 * (charged or not: its clock moved), each counter of an RL.CHECK that
 * wrote, each of an all-or-none batch that passed, each state RL.RESET
 * dropped.  It reads the counter's state itself (the journal:
 * sl__store_image). */
typedef void (*sl_local_record_fn)(void *arg, unsigned kind, const void *key, size_t klen);

/* Sets b's recorder (NULL: none).  Before any request.  0, or SL_EINVAL
 * when b is not the local backend. */
int sl_backend_local_record(sl_backend *b, sl_local_record_fn fn, void *arg);

/* --after-crash deny-window: from now on, until one window of a request's
 * parameters has passed since since_ms (the server's clock), a key b's
 * store does not hold answers as a full counter (denied, remaining 0,
 * retry and reset after what is left of that window) and is not created;
 * in an RL.CHECK or an all-or-none batch such a counter denies the whole
 * request, nothing charged.  INT64_MIN: off (the default).  Before any
 * request.  0, or SL_EINVAL when b is not the local backend. */
int sl_backend_local_deny_window(sl_backend *b, int64_t since_ms);

/* The plan made flat for the library's executor (src/lib/checkexec.h) on
 * store s (NULL: to be set by the caller): its L = 0 limits and repeated
 * counters out, the quota descriptors as masks, each counter answering
 * into res[k] for plan item k, the pool (if any) in *pool under the key
 * SL_CHECK_POOL_KEY.  xi holds SL_MAX_BATCH items; x points into xi, pool
 * and plan: it lives as long as they do.  Pure: no store touched. */
void sl__local_check_flat(sl_store *s, const sl_check_plan *plan, sl__cx_item *xi,
                          sl__cx_item *pool, sl__cx_plan *x);

/* Executes a planned RL.CHECK on store s: the executor's rounds
 * (checkexec.h, check.h's semantics) on the flat plan -- the Lyft-counted
 * counters charged (SL_RULES_COUNT_DENIED); every other counter peeked
 * when the request is denied already (an enforced L = 0 or Lyft-counted
 * limit over, or every quota descriptor over); else sl_decide_all over the
 * enforced and quota counters, again without the quota counters that
 * denied until it passes or every quota descriptor is over, a round with
 * the elastic limits at their ceilings and the pool when only elastic
 * limits denied, the pool's charge, and the shadow counters decided (or
 * peeked when the request is denied).  Fills *o.  Returns 0, or a negative
 * SL_E* code with a message in err: nothing was charged then but the
 * Lyft-counted counters, which are charged first (as Lyft's INCRBY).
 * Used by the local backend and by the Redis backend's
 * `--on-backend-error local`. */
int sl__local_check_exec(sl_store *s, const sl_check_plan *plan, sl_check_outcome *o, char *err,
                         size_t errlen);

/* Plans, executes on s, reports and counts one RL.CHECK request, in one
 * synchronous call: what `sluicectl replay --rules` and the tests use.
 * Arguments and results as sl_check_plan_make and sl_check_report.  Uses
 * about 12 KB of stack for the plan. */
int sl_rules_check(const sl_rules *r, sl_store *s, const sl_params *pool, const char *domain,
                   size_t dlen, const sl_rule_entry *const *descs, const int *ndesc, int n,
                   int64_t cost, int64_t now_ms, sl_result *overall, sl_check_status *st, char *err,
                   size_t errlen);

#endif
