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

/* A backend over store s (not owned: free the backend before the store).
 * NULL when out of memory. */
sl_backend *sl_backend_local_new(sl_store *s);

/* Executes a planned RL.CHECK on store s: today's rounds (check.h) -- the
 * Lyft-counted counters charged (SL_RULES_COUNT_DENIED); every other counter
 * peeked when the request is denied already (an enforced L = 0 or
 * Lyft-counted limit over, or every quota descriptor over); else
 * sl_decide_all over the enforced and quota counters, again without the
 * quota counters that denied until it passes or every quota descriptor is
 * over, a round with the elastic limits at their ceilings and the pool when
 * only elastic limits denied, the pool's charge, and the shadow counters
 * decided (or peeked when the request is denied).  Fills *o.  Returns 0, or
 * a negative SL_E* code with a message in err: nothing was charged then but
 * the Lyft-counted counters, which are charged first (as Lyft's INCRBY). */
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
