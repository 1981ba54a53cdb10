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
 * still counts then (sl_charge's refund, sl__engine_adjust; a window's
 * lease return).  Not for a bucket with units leased out (its refill
 * floor is sl__lone_lease_return's).  Returns 0, or SL_EINVAL (bad
 * parameters, another algorithm's record) / SL_ECOST / SL_EALGO
 * (sliding-log), nothing changed. */
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

/* Bytes the record of loose shard sh holds: its allocation (none in its
 * owner's room), its state's whole room with a bucket's lease tail, and
 * its ring (an estimate of what the allocator gives). */
size_t sl__lone_bytes(const sl__shard *sh, const uint8_t *rec);

/* A record as portable bytes (persistence): sl__lone_dump_len bytes,
 * written by sl__lone_dump: u16 flags, u16 reset code, i64 clock, then
 * the state (engine.h's sl__state_dump), then for a bucket with units
 * leased out its lease tail (SL__LONE_TAIL bytes, as the record keeps
 * it; none when nothing is out).  sl__lone_load makes a record of
 * algorithm algo from such bytes (in room, as sl__lone_decide does): 0
 * and *rec, or SL_EINVAL when they are malformed (out of range, wrong
 * length, a tail with nothing out or an epoch after the clock's) or
 * SL_ENOMEM. */
size_t sl__lone_dump_len(const sl__shard *sh, const uint8_t *rec);
void sl__lone_dump(const sl__shard *sh, const uint8_t *rec, uint8_t *dst);
int sl__lone_load(sl__shard *sh, unsigned algo, const uint8_t *src, size_t len, void *room,
                  uint8_t **rec);

/* ---- leases (the module's RL.LEASE, RL.LEASERETURN; docs/fleet.md,
 * "Leases", sluice.lua's ops T and R) -------------------------------------
 * fixed-window and sliding-window: a lease is units counted in the
 * window's count when taken, spent until the window's end, and what comes
 * back is subtracted in that window only.  token-bucket and gcra: the
 * units are taken from the bucket and the record keeps what is out in its
 * lease tail, SL__LONE_TAIL bytes after its state in its state room (a
 * record in its owner's room has room for it; another grows once, at its
 * first lease): e:i64, O0:u40, O1:u40 -- O0 units leased in epoch e (of
 * SL__LEASE_EPOCH_MS ms of the key's time), O1 in epoch e - 1; all zero:
 * nothing out.  A lease of epoch e is settled (counted spent, never to
 * come back) from the start of epoch e + 2.  While O = O0 + O1 units are
 * out every decision, charge and refund on the record stops the bucket's
 * refill O short of B (sl__lone_decide and sl__lone_decide_all hold it
 * there: sl__lone_hold), so tokens in the bucket plus tokens held never
 * pass B. */
#define SL__LEASE_EPOCH_MS 250
#define SL__LONE_TAIL      18

/* A lease taken: units leased (beyond the request), ms it may be spent
 * (from the key's time of the take), and its tag (the window's index, or
 * the bucket's epoch) for its return. */
typedef struct sl__lone_lease {
    int64_t extra, ttl_ms, tag;
} sl__lone_lease;

/* Whether records of algo lease here (fixed-window, sliding-window,
 * sliding-buckets, token-bucket, gcra). */
int sl__lone_leases(unsigned algo);

/* Leases x (0..SL_MAX_LIMIT) more units of *rec (p's algorithm) at now_ms,
 * right after a committed, allowed decision of the request that asked:
 * charged as a decision of cost x (which the caller keeps to at most
 * half of what that request left: it is then allowed), and for a bucket
 * added to O0.  *out: that decision's answer (the request's before it
 * when x is 0); *lz: the lease (extra 0 when nothing was leased).
 * Returns 0, or SL_EINVAL (no record, another algorithm's) / SL_EALGO
 * (an algorithm that does not lease) / SL_ECOST / SL_ENOMEM (a tail's
 * room), with nothing leased.  *rec may move (a tail's room). */
int sl__lone_lease_take(sl__shard *sh, uint8_t **rec, const sl_params *p, int64_t now_ms, int64_t x,
                        sl_result *out, sl__lone_lease *lz);

/* Hands back `back` unspent units of a lease of `taken` units with tag
 * (sl__lone_lease_take's) on *rec (NULL: nothing) at now_ms: a window's
 * only in that window; sliding-buckets' into bucket tag while it is in
 * the window; a bucket's while its epoch is not settled -- the
 * whole lease leaves O (what was not given back was spent), and the
 * bucket takes back at most what it can hold with the units still out.
 * *put: the units put back.  Returns 0, or SL_EINVAL / SL_EALGO /
 * SL_ECOST / SL_ETIME, nothing changed. */
int sl__lone_lease_return(sl__shard *sh, uint8_t **rec, const sl_params *p, int64_t now_ms,
                          int64_t back, int64_t taken, int64_t tag, int64_t *put);

/* When rec's units out are all settled (the key's time), or INT64_MIN
 * when none are out: a key's state is not at rest before (the module's
 * TTL). */
int64_t sl__lone_lease_end(const sl__shard *sh, const uint8_t *rec);

/* What sl__lone_decide and sl__lone_decide_all (limiter.c) do around a
 * decision on an existing record: sl__lone_hold brings a bucket with units
 * out to the decision's time with its refill stopped O short of B (and
 * its tail to that time's epoch), saving what it changes in *k;
 * sl__lone_unhold keeps that (committed: the tail is written) or puts the
 * record back as it was.  Nothing for other records. */
typedef struct sl__lone_keep {
    uint8_t *tail; /* NULL: nothing held */
    int64_t clock, e, o0, o1;
    unsigned flags;
    uint8_t st[10];
} sl__lone_keep;
struct sl__norm;
void sl__lone_hold(sl__shard *sh, uint8_t *r, const struct sl__norm *n, int64_t now_ms,
                   sl__lone_keep *k);
void sl__lone_unhold(uint8_t *r, const sl__lone_keep *k, int committed);

/* engine.c, for the tail: on a token-bucket or gcra record r (its meta as
 * its holder knows it), sl__engine_bucket_hold brings the state from
 * clock_old to t with the refill stopped at a deficit of `out` requests;
 * sl__engine_bucket_give takes up to `units` requests off the deficit,
 * not below `out` of them, and returns the whole ones it took.  Neither
 * raises the deficit nor moves the clock. */
void sl__engine_bucket_hold(uint8_t *r, uint16_t *meta, const struct sl__norm *n, int64_t clock_old,
                            int64_t t, int64_t out);
int64_t sl__engine_bucket_give(uint8_t *r, uint16_t *meta, const struct sl__norm *n, int64_t units,
                               int64_t out);

#endif
