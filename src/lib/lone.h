/*
 * lone.h -- one key's state under one algorithm, kept by its owner outside
 * any store (internal to libsluice; the Redis module, src/module, is the
 * owner: each of its values holds the records of one Redis key).
 *
 * A lone record is a store record (store.h's layout, a one-byte key) made
 * in a loose shard (sl__shard_loose_new), so the engine decides on it by
 * the very path a store's records take (limiter.c's decide_held): the same
 * checks, the same clock rule (SPEC section 4), the same answers.  The
 * owner keeps the pointer: NULL is a key with no state yet (a fresh key),
 * and a decision may set, move or (on failure of a fresh one) leave it
 * NULL.  No locks: the owner calls these one at a time.
 */
#ifndef SL_LONE_H
#define SL_LONE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "sluice.h"

/* Room for one record inside its owner's own memory (8-byte aligned,
 * zeroed before its first use): the record of every algorithm but
 * sliding-log (and sliding-buckets with many counters) fits, so such a
 * key's state needs no allocation of its own, nor a pointer chased to
 * another cache line.  The owner keeps the room while a record lives in
 * it (sl__lone_roomed); a record that outgrows it moves out and leaves it
 * free. */
#define SL__LONE_ROOM 56

/* Decides (commit = 1) or answers (0) a request of `cost` at now_ms with
 * parameters p on *rec (NULL: no state).  A record made for it is put in
 * room (SL__LONE_ROOM bytes, or NULL: an allocation of its own) if it
 * fits.  Returns 0 and fills *out, or the SL_E* code sl_decide would
 * return (parameters, cost, time; SL_ENOMEM), with *rec untouched. */
int sl__lone_decide(sl__shard *sh, uint8_t **rec, void *room, const sl_params *p, int64_t now_ms,
                    int64_t cost, int commit, sl_result *out);

/* Refunds units (> 0) on rec (NULL: no state, nothing to give back) with
 * parameters p at now_ms: at most what a charge made at charged_at_ms
 * still counts then (sl_charge's refund, sl__engine_adjust; the module's
 * lease return).  Returns 0, or SL_EINVAL (bad parameters, another
 * algorithm's record) / SL_ECOST / SL_EALGO (sliding-log), nothing changed. */
int sl__lone_refund(const sl_params *p, uint8_t *rec, int64_t now_ms, int64_t charged_at_ms,
                    int64_t units);

/* sl_charge on a lone record: charges delta (> 0, kept even past the
 * limit: a bucket's debt) or refunds -delta (at most what a charge made at
 * charged_at_ms still counts) on *rec with parameters p at
 * t = max(now_ms, its clock), making the record (in room, as
 * sl__lone_decide) when a charge needs one.  *out: sl_charge's six fields
 * -- remaining and reset_after_ms of the state as it now stands, allowed
 * and retry_after_ms of a request of cost 1 at t, delay_ms 0.  Returns 0,
 * or SL_EINVAL (bad parameters, another algorithm's record) / SL_ECOST
 * (|delta| > SL_MAX_LIMIT) / SL_ETIME / SL_EALGO (sliding-log) /
 * SL_ETOOBIG / SL_ENOMEM, with nothing changed. */
int sl__lone_charge(sl__shard *sh, uint8_t **rec, void *room, const sl_params *p, int64_t now_ms,
                    int64_t charged_at_ms, int64_t delta, sl_result *out);

/* Whether a record of algo made in a room stays there whatever happens
 * to it: it fits and never changes size (not sliding-log nor
 * sliding-buckets). */
int sl__lone_stays(unsigned algo);

/* One request of sl__lone_decide_all: the record pointer it decides on,
 * and the room (or NULL) a record made for it may take. */
typedef struct sl__lone_req {
    const sl_params *params;
    uint8_t **rec;
    int64_t cost;
    void *room;
} sl__lone_req;

/* sl_decide_all on lone records: n (1..SL_MAX_BATCH) requests at now_ms,
 * all charged if all are allowed, else none (no clock moves) and out[i]
 * are the answers each would get alone.  Two requests may not share a
 * record pointer (SL_EINVAL, nothing done).  Returns 0 or the first bad
 * request's code, with nothing charged; *bad (may be NULL) gets its
 * index. */
int sl__lone_decide_all(sl__shard *sh, const sl__lone_req *reqs, size_t n, int64_t now_ms,
                        sl_result *out, int *all_allowed, size_t *bad);

/* Frees a record (and its sliding-log ring; a record in its owner's room
 * leaves the room to its owner).  NULL is ignored. */
void sl__lone_free(sl__shard *sh, uint8_t *rec);

/* The record living in room (SL__LONE_ROOM bytes), or NULL: it is free. */
uint8_t *sl__lone_roomed(const void *room);

/* The algorithm, clock and reset time (clock + reset_after_ms of its last
 * committed decision, rounded up, INT64_MAX for never: store.h) of a
 * record. */
sl_algo sl__lone_algo(const uint8_t *rec);
int64_t sl__lone_clock(const uint8_t *rec);
int64_t sl__lone_reset_at(const uint8_t *rec);

/* Bytes the record holds: its allocation (none in its owner's room) and
 * its ring (an estimate of what the allocator gives). */
size_t sl__lone_bytes(const uint8_t *rec);

/* A record as portable bytes (persistence): sl__lone_dump_len bytes,
 * written by sl__lone_dump: u16 flags, u16 reset code, i64 clock, then
 * the state (engine.h's sl__state_dump).  sl__lone_load makes a record of
 * algorithm algo from such bytes (in room, as sl__lone_decide does): 0 and
 * *rec, or SL_EINVAL when they are malformed (out of range, wrong length)
 * or SL_ENOMEM. */
size_t sl__lone_dump_len(const uint8_t *rec);
void sl__lone_dump(const uint8_t *rec, uint8_t *dst);
int sl__lone_load(sl__shard *sh, unsigned algo, const uint8_t *src, size_t len, void *room,
                  uint8_t **rec);

#endif
