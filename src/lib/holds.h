/*
 * holds.h -- internal parts of the holds (SPEC section 10): the engine's
 * charge-or-refund step that sl_charge (settle.c) runs on a store's
 * record.  The table itself (holds.c) is public API: sl_holds in sluice.h.
 */
#ifndef SL_HOLDS_H
#define SL_HOLDS_H

#include <stdint.h>

#include "engine.h"

/* Advances the state of record r (held, its layout already n's: for
 * sliding-buckets sl__state_need() == 0) from clock_old to t (>= clock_old)
 * as a decision would, then charges delta > 0 units (past the limit:
 * counters saturate at their field's width, above L) or refunds -delta
 * (at most what a charge made at charged_at still counts at t; buckets
 * refill to at most B).  *meta as sl__engine_decide keeps it.  Writes
 * neither the clock nor the header (the caller does).  Returns 0, or
 * SL_EALGO for sliding-log (nothing changed).  O(P) for sliding-buckets'
 * roll, O(1) otherwise. */
int sl__engine_adjust(uint8_t *r, uint16_t *meta, const sl__norm *n, int64_t clock_old, int64_t t,
                      int64_t charged_at, int64_t delta);

#endif
