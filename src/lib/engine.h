/*
 * engine.h -- where a decision is made (internal to libsluice).
 *
 * Each algorithm is a function of (state bytes, the key's previous clock,
 * the effective time, the request) that fills an sl_result and, when asked
 * to commit, writes the new state back.  It reads no clock, takes no lock
 * and allocates nothing, except sliding-log, whose log lives in a growable
 * buffer outside the record (accounted to the shard).
 */
#ifndef SL_ENGINE_H
#define SL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "sluice.h"

/* Parameters with defaults filled in (burst, precision). */
typedef struct sl__norm {
    sl_algo algo;
    int64_t L, W, B, P; /* limit, window (ms), burst, precision */
    int log_rejected;
} sl__norm;

/* Fills n from p (which must have passed sl_params_check). */
void sl__norm_from(sl__norm *n, const sl_params *p);

/* State bytes a new record needs for these parameters. */
size_t sl__state_len(const sl__norm *n);

/* Whether the state st must change layout to serve these parameters (a new
 * precision or wider counters for sliding-buckets, or a fresh record): 0 if
 * not, else the state bytes it needs.  The caller grows the record to that
 * size if needed, then calls sl__state_adapt. */
size_t sl__state_need(const uint8_t *st, const sl__norm *n);

/* Converts st in place to the layout for n (counts kept, capacities
 * clamped).  clock is the key's clock.  Room must be >= sl__state_need(). */
void sl__state_adapt(uint8_t *st, const sl__norm *n, int64_t clock);

/* Decides a request of `cost` at effective time t (>= clock_old) on the
 * record r.  clock_old is the key's clock before this request (== t for a
 * new key).  commit != 0 writes the new state (allowed, or logged), 0 only
 * answers.  Returns 0, or SL_ENOMEM when a sliding-log buffer could not
 * grow (nothing changed).  sh is the record's shard, lock held. */
int sl__engine_decide(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t clock_old,
                      int64_t t, int64_t cost, int commit, sl_result *out);

/* Snapshots.  sl__state_dump writes sl__state_dump_len(r) bytes: the
 * record's state in a form that does not depend on where it lives in
 * memory.  sl__state_load_len checks such bytes for an algorithm and
 * returns the state room a record needs for them, or 0 if they are
 * malformed; sl__state_load puts them into a record with that room
 * (allocating a sliding-log ring: 0 or SL_ENOMEM). */
size_t sl__state_dump_len(const uint8_t *r);
void sl__state_dump(const uint8_t *r, uint8_t *dst);
size_t sl__state_load_len(unsigned algo, const uint8_t *src, size_t len);
int sl__state_load(sl__shard *sh, uint8_t *r, const uint8_t *src, size_t len, int64_t now);

#endif
