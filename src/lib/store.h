/*
 * store.h -- where per-key state lives (internal to libsluice).
 *
 * The store is a set of shards, each a lock, an open-addressing hash table
 * of 32-bit record handles, and a slab of variable-size records -- and
 * tables of fixed-size records fitted to their size (store.c, "fitted
 * tables"), whose slots are the records.  A record is one
 * allocation (or slot) holding the key inline:
 *
 *     offset 0   uint16  meta    bits 0..8: key length - 1 (1..512 bytes)
 *                                bit 9: SL__REC_LOCK, the record's lock
 *                                bits 10..12: algorithm (sl_algo)
 *                                bits 13..15: SL__REC_* flags (bit 15,
 *                                SL__REC_SPACE, is the key space)
 *     offset 2   uint16  exp     reset time, coded relative to clock (below)
 *     offset 4   uint32  clock   latest time seen for the key (ms): its low
 *                                32 bits, or the shard's mark (below)
 *     offset 8   key bytes
 *     then       state bytes     algorithm-defined, unaligned
 *
 * A record is identified by (kind, key), where the kind is the algorithm
 * plus SL__KIND_SPACE for keys of the second key space (sl_request.space):
 * the same key bytes under another algorithm or in the other space are
 * another record.  Store functions take that kind where they say `kind`;
 * both spaces hash alike, the meta bits tell them apart.
 *
 * Records are 2-byte aligned only: read multi-byte fields with memcpy (the
 * sl__ld / sl__st helpers), except meta, which is read and written only
 * atomically (sl__rec_meta): a thread may test it while another holds the
 * record.  The store knows no algorithm's arithmetic: the engine
 * (limiter.c) decides, the store only keeps bytes and bounds memory.  What
 * it knows of a record is what the engine writes in its header at every
 * committed decision: when the state comes to rest (exp, the reset time:
 * from then on it answers as a fresh key would) and whether the key is at
 * its limit (SL__REC_LIMIT) -- enough to drop keys at rest first and, if it
 * must, the least restricted (sl__rec_restriction).  One more fact: a
 * sliding-log record's state starts with its ring, a buffer outside the
 * record (sl__rec_has_ext).
 *
 * Locking, two levels.  A record's own lock (SL__REC_LOCK in its meta)
 * guards its bytes after the meta: whoever decides on a record, reads its
 * clock or drops it holds it.  A shard's lock guards the shard's table,
 * slab and counts: inserting, moving and dropping records, and finding
 * them the sure way.  The order is shard, then record, never the other
 * way: a thread holding a record waits for nothing.  So:
 *   - the common decision (an existing key whose state never changes size)
 *     takes only its record's lock, found without the shard lock
 *     (sl__store_grab): threads on different keys write no shared line;
 *   - everything else takes the shard lock first (sl__store_lookup), and
 *     functions named sl__shard_* expect it held.
 * A record pointer handed out is locked; it stays valid until its lock is
 * released (sl__rec_unlock) or it is moved or removed by the holder.
 */
#ifndef SL_STORE_H
#define SL_STORE_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "sluice.h"

#define SL__REC_HDR 8          /* bytes before the key */
/* SL__REC_LIMIT: the key was at its limit at its clock -- its last committed
 * request was denied or left nothing (written by the engine, read by
 * eviction: sl__rec_restriction). */
#define SL__REC_LIMIT 0x1
#define SL__REC_F1 0x2         /* free for the algorithm's use */
#define SL__REC_SPACE 0x4      /* the record is in key space 1: part of its
                                  identity, set at insert, never changed */
#define SL__KIND_SPACE 8u      /* kind = algorithm | SL__KIND_SPACE: space 1 */
#define SL__META_ID 0x9dffu    /* the meta bits that identify a record with its
                                  key: length, algorithm, SL__REC_SPACE */
#define SL__REC_LOCK 0x200u    /* meta bit 9: the record is held.  Never part of
                                  a key's length (at most 511 + 1) */
#define SL__FREE_MARK 0xffffu  /* the meta of a free record: held forever, and
                                  algorithm 7, which no key has */
#define SL__TOMB_MARK 0xfffeu  /* the meta of a removed fitted record (a tombstone):
                                  held forever, algorithm 7; probes go on past it */
#define SL__FIT_KEY_MAX 48u    /* keys this long at most may live in fitted tables
                                  (store.c, "fitted tables") */

typedef struct sl__shard sl__shard;

/* Unaligned loads and stores. */
static inline uint64_t sl__ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void sl__st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t sl__ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline void sl__st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline uint16_t sl__ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void sl__st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* A record's meta, read and written atomically (records are 2-byte
 * aligned, so the 16-bit word is aligned). */
static inline uint16_t sl__rec_meta(const uint8_t *r)
{
    return __atomic_load_n((const uint16_t *)(const void *)r, __ATOMIC_RELAXED);
}
static inline void sl__rec_meta_set(uint8_t *r, uint16_t m)
{
    __atomic_store_n((uint16_t *)(void *)r, m, __ATOMIC_RELEASE);
}
static inline size_t sl__rec_klen(const uint8_t *r) { return (size_t)(sl__rec_meta(r) & 0x1ff) + 1; }
static inline unsigned sl__rec_algo(const uint8_t *r) { return (sl__rec_meta(r) >> 10) & 7; }
static inline unsigned sl__rec_flags(const uint8_t *r) { return (unsigned)(sl__rec_meta(r) >> 13) & 7; }
/* Sets the flag bits of a record the caller holds (the holder is the only
 * writer of its meta; the lock bit stays). */
static inline void sl__rec_set_flags(uint8_t *r, unsigned f)
{
    sl__rec_meta_set(r, (uint16_t)((sl__rec_meta(r) & 0x1fff) | ((f & 7u) << 13)));
}
/* Releases a record the caller holds, whose meta the holder knows is m
 * (sl__store_grab): one release store, no read back. */
static inline void sl__rec_release(uint8_t *r, uint16_t m)
{
    sl__rec_meta_set(r, (uint16_t)(m & ~SL__REC_LOCK));
}

/* Releases a record the caller holds. */
static inline void sl__rec_unlock(uint8_t *r) { sl__rec_release(r, sl__rec_meta(r)); }
/* The meta identity bits of a record of this kind and key length. */
static inline uint16_t sl__meta_id(unsigned kind, size_t klen)
{
    return (uint16_t)((klen - 1) | (kind & 7) << 10 | (kind & SL__KIND_SPACE ? 0x8000u : 0));
}
static inline unsigned sl__rec_kind(const uint8_t *r)
{
    return sl__rec_algo(r) | (sl__rec_flags(r) & SL__REC_SPACE ? SL__KIND_SPACE : 0);
}
/* Whether r's state starts with a buffer outside the record: a pointer (8
 * bytes, NULL until there is one) then a uint32 of its size in bytes,
 * allocated with sl__ext_alloc and freed by the store with the record.
 * Sliding-log's ring is the one such buffer. */
static inline int sl__rec_has_ext(const uint8_t *r) { return sl__rec_algo(r) == SL_SLIDING_LOG; }
static inline const uint8_t *sl__rec_key(const uint8_t *r) { return r + SL__REC_HDR; }
static inline uint8_t *sl__rec_state(uint8_t *r) { return r + SL__REC_HDR + sl__rec_klen(r); }
/*
 * The clock (docs/store.md, "An 8-byte record header").  A record keeps the
 * low 32 bits of its clock in its header; its shard keeps E, the low end
 * of a window of 2^32 ms (sl__shard_epoch), and the header word lo stands
 * for the one time in [E, E + 2^32) with those low bits (sl__clock_in).
 * The window's top, E + 2^32 - 1, is no narrow clock: a word that decodes
 * to it, (uint32_t)(E - 1) (sl__clock_mark: relative to E), marks a wide
 * record, whose whole clock sits in the last SL__CLOCK_WIDE_BYTES of the
 * record's room, which its state's room leaves out (sl__rec_state_cap).
 * A clock outside [E, E + 2^32 - 1) is kept wide.  A loose shard's E is 0
 * always and its records are wide always (their word 0xffffffff, the mark
 * of E = 0), their clock before the record (SL__LOOSE_PREFIX).
 *
 * Invariant: every narrow record of a shard has a clock in [E, E + 2^32 -
 * 1), every wide one the word sl__clock_mark(E).  E only moves forward,
 * under the shard lock, by a walk of the shard (store.c, clock_walk) that
 * first drops (at rest) or makes wide every record the move would leave
 * behind, then rewrites every wide record's mark for the new E; inserts
 * take the shard lock.  A record's clock never goes back, so low bits
 * written under an older E read the same under a newer one.
 *
 *   - the quick way (sl__store_grab) reads the shard's Q (sl__quick_max),
 *     then E, then the word: c = sl__clock_in(E, lo), t = max(now, c), and
 *     one compare, t <= Q (sl__clock_quick_q): a wide record decodes to
 *     the top, above Q, so it needs no test of its own; a walk sets Q to
 *     INT64_MIN while it runs (store.c, clock_walk, says why that is
 *     enough).  It writes the low bits alone (sl__rec_set_clock_lo),
 *     never making a record wide;
 *   - the sure way reads with sl__rec_clock, makes room for the new time
 *     with sl__shard_clock_room before deciding (it may move E, or make the
 *     record wide, moving it: the one step that can fail, with nothing
 *     changed) and writes it with sl__rec_set_clock.
 */
#define SL__CLOCK_TOP        0xffffffffu        /* the window's top, E + this: the mark's time */
#define SL__CLOCK_WIDE_BYTES 8u                 /* a wide clock's room, at the room's end */
#define SL__CLOCK_QUICK      ((int64_t)3 << 30) /* the quick way writes below E + this */
#define SL__CLOCK_KEEP       ((int64_t)1 << 31) /* E moves to the newest time - this */
#define SL__LOOSE_PREFIX     12u /* a loose record's clock (8) and room word (4), before it */

/* The shard's E (store.c keeps it at offset 8, in the line of its lock),
 * read under the shard lock, under which alone it is written: a plain
 * load (the quick way reads it atomically, in store.c). */
static inline int64_t sl__shard_epoch(const sl__shard *sh)
{
    return *(const int64_t *)(const void *)((const char *)sh + 8);
}
/* The clock with low bits lo in the window starting at e (the top, e +
 * SL__CLOCK_TOP, for the mark). */
static inline int64_t sl__clock_in(int64_t e, uint32_t lo)
{
    return (int64_t)((uint64_t)e + (uint32_t)(lo - (uint32_t)e));
}
/* The header word of a wide record in the window starting at e: the word
 * that decodes to the window's top. */
static inline uint32_t sl__clock_mark(int64_t e) { return (uint32_t)e - 1u; }
/* Whether t can be kept narrow in the window starting at e. */
static inline int sl__clock_fits(int64_t e, int64_t t)
{
    return (uint64_t)t - (uint64_t)e < (uint64_t)SL__CLOCK_TOP;
}
/* Whether the quick way may write t in the window starting at e. */
static inline int sl__clock_quick(int64_t e, int64_t t)
{
    return (uint64_t)t - (uint64_t)e < (uint64_t)SL__CLOCK_QUICK;
}
/* Whether r, a record of sh held under sh's lock, is wide. */
static inline int sl__rec_wide(const sl__shard *sh, const uint8_t *r)
{
    return sl__ld32(r + 4) == sl__clock_mark(sl__shard_epoch(sh));
}
/* Q for the window starting at e: the latest time the quick way may write,
 * e + SL__CLOCK_QUICK - 1, kept by the shard beside E so the test is one
 * compare with no constant to load (sl__clock_quick_q).  Below the top
 * (e + SL__CLOCK_TOP), which a wide record's word decodes to. */
static inline int64_t sl__quick_max(int64_t e) { return e + SL__CLOCK_QUICK - 1; }
/* Whether the quick way may write t = max(now, c), c the clock the header
 * word decodes to under E, Q being the shard's (read before E): false on
 * a wide record (c is the top), a time past the quick span, or while a
 * walk runs (Q = INT64_MIN). */
static inline int sl__clock_quick_q(int64_t q, int64_t t) { return t <= q; }
/* The shard's Q (store.c keeps it at offset 16, beside E): a plain load,
 * under the shard lock. */
static inline int64_t sl__shard_quick_max(const sl__shard *sh)
{
    return *(const int64_t *)(const void *)((const char *)sh + 16);
}

/* A loose record's clock (loose shards keep it before the record). */
static inline int64_t sl__loose_clock(const uint8_t *r)
{
    return (int64_t)sl__ld64(r - SL__LOOSE_PREFIX);
}
static inline void sl__loose_set_clock(uint8_t *r, int64_t t)
{
    sl__st64(r - SL__LOOSE_PREFIX, (uint64_t)t);
}

int64_t sl__rec_clock_wide(const sl__shard *sh, const uint8_t *r);
void sl__rec_set_clock_wide(sl__shard *sh, uint8_t *r, int64_t t);
int sl__shard_clock_slow(sl__shard *sh, uint64_t hash, uint8_t **rp, int64_t t);

/* The clock of r, a record of sh that the caller holds, under sh's lock
 * (or a loose shard's). */
static inline int64_t sl__rec_clock(const sl__shard *sh, const uint8_t *r)
{
    uint32_t lo = sl__ld32(r + 4);
    int64_t e = sl__shard_epoch(sh);
    if (__builtin_expect(lo == sl__clock_mark(e), 0)) return sl__rec_clock_wide(sh, r);
    return sl__clock_in(e, lo);
}

/* Before a decision at t (>= r's clock) on *rp, held, shard lock held:
 * makes sure r can keep t -- may move E (a walk of the shard) or move the
 * record to make it wide (*rp then changes; its meta is the same).  0, or
 * SL_EFULL / SL_ENOMEM (as sl__shard_fail) with the record unchanged. */
static inline int sl__shard_clock_room(sl__shard *sh, uint64_t hash, uint8_t **rp, int64_t t)
{
    if (__builtin_expect(!sl__rec_wide(sh, *rp) && sl__clock_quick(sl__shard_epoch(sh), t), 1))
        return 0;
    return sl__shard_clock_slow(sh, hash, rp, t);
}

/* Writes r's clock t (shard lock held, after sl__shard_clock_room(t)). */
static inline void sl__rec_set_clock(sl__shard *sh, uint8_t *r, int64_t t)
{
    if (__builtin_expect(!sl__rec_wide(sh, r) && sl__clock_fits(sl__shard_epoch(sh), t), 1)) {
        sl__st32(r + 4, (uint32_t)t);
        return;
    }
    sl__rec_set_clock_wide(sh, r, t);
}

/* The quick way's write: t passed sl__store_grab's test. */
static inline void sl__rec_set_clock_lo(uint8_t *r, int64_t t) { sl__st32(r + 4, (uint32_t)t); }

/* The 16-bit code of a time left until reset: codes 0..2047 are that many
 * ms; a code c >= 2048 is a float with a 5-bit exponent e = c >> 11
 * (1..31) and an 11-bit mantissa m: (2048 + m) << (e - 1) ms, i.e. 2048 ms
 * to ~4.4e12 ms (139 years) with a relative step of 1/2048.  Encoding
 * rounds up; 0xffff means never.  Inline: every decision codes one. */
#define SL__RESET_NEVER 0xffffu

static inline uint16_t sl__reset_encode(int64_t ms)
{
    if (ms <= 0) return 0;
    if (ms < 2048) return (uint16_t)ms;
    uint64_t v = (uint64_t)ms;
    int e = 64 - __builtin_clzll(v) - 11;                       /* v >> (e - 1) has 12 bits */
    uint64_t q = (v + ((uint64_t)1 << (e - 1)) - 1) >> (e - 1); /* rounded up */
    if (q == 4096) {
        q = 2048;
        e++;
    }
    uint64_t code = ((uint64_t)e << 11) | (q - 2048);
    return code >= SL__RESET_NEVER ? (uint16_t)SL__RESET_NEVER : (uint16_t)code;
}

/* Records the time left until the key's reset, relative to its clock (call
 * after setting the clock).  Coded in 16 bits, rounded up, so the store may
 * keep a key slightly longer than needed but never drops one early. */
static inline void sl__rec_set_reset(uint8_t *r, int64_t reset_after_ms)
{
    sl__st16(r + 2, sl__reset_encode(reset_after_ms));
}
/* The reset time (ms): clock + decoded reset.  Saturates at INT64_MAX.
 * r is a record of sh (lock held), or of a loose shard. */
int64_t sl__rec_reset_at(const sl__shard *sh, const uint8_t *r);
/* ... of a loose shard's record (no shard needed). */
int64_t sl__loose_reset_at(const uint8_t *r);

/* Sets or clears SL__REC_LIMIT in *meta, the meta of a record the caller
 * holds as it knows it; writes the record's meta only when that changes
 * (rarely: a key reaching or leaving its limit), so a decision pays a
 * compare, not a store. */
static inline void sl__rec_mark_limit(uint8_t *r, uint16_t *meta, int at_limit)
{
    uint16_t m =
        (uint16_t)(at_limit ? *meta | SL__REC_LIMIT << 13 : *meta & ~(SL__REC_LIMIT << 13));
    if (m != *meta) {
        *meta = m;
        sl__rec_meta_set(r, m);
    }
}

/* What dropping a record at `now` would change, from what the engine wrote
 * at its last decision (the store never sees parameters):
 *   SL__AT_REST     its reset time has passed: its state answers as a fresh
 *                   key's would, so dropping it changes no answer at or
 *                   after now (SPEC 3: reset_after_ms is the time until
 *                   `remaining` is back to the full limit; the engine
 *                   writes it at every decision, exactly, rounded up);
 *   SL__RESTRICTED  it holds a restriction, and its last request passed
 *                   with room to spare;
 *   SL__AT_LIMIT    it was at its limit: dropping it would let a denied
 *                   client through.
 * The order is the eviction order: lower first. */
enum { SL__AT_REST = 0, SL__RESTRICTED = 1, SL__AT_LIMIT = 2 };

static inline int sl__rec_restriction(const sl__shard *sh, const uint8_t *r, int64_t now)
{
    if (sl__rec_reset_at(sh, r) <= now) return SL__AT_REST;
    return (sl__rec_flags(r) & SL__REC_LIMIT) ? SL__AT_LIMIT : SL__RESTRICTED;
}

/* Keyed hash of (kind, key) with the store's seed (the space does not
 * change it). */
uint64_t sl__store_hash(const sl_store *s, unsigned kind, const void *key, size_t klen);

/* The shard for a hash.  Never NULL. */
sl__shard *sl__store_shard(sl_store *s, uint64_t hash);
void sl__shard_lock(sl__shard *sh);

/* Releases the lock: one release store, inline on the decision path.  The
 * lock is the shard's first member (store.c), so sh points at it. */
static inline void sl__shard_unlock(sl__shard *sh)
{
    atomic_store_explicit((atomic_uint *)(void *)sh, 0, memory_order_release);
}

/* The quick way in: the record of (kind, key) (klen 1..SL_MAX_KEY, hash
 * from sl__store_hash), held, found without the shard lock -- the table is
 * read under a read-side critical section (reclaim.h) and the record is
 * taken, then checked to be the key's.  NULL when the key has no record or
 * it was not found at once (held by another thread for longer than a
 * short spin, or moved while the table was read): then take the sure way,
 * sl__store_lookup.  Wait-free of the shard lock, bounded work.  Sets
 * *metap to the record's meta as taken (SL__REC_LOCK set), so the holder
 * need not read back the word it just wrote with a locked instruction.
 * Returns the record and its shard, as a pair in registers; the holder
 * then reads the clock with sl__grabbed_clock before it decides. */
typedef struct sl__grabbed {
    uint8_t *rec;          /* the record, or NULL */
    const sl__shard *sh;   /* its shard */
} sl__grabbed;
sl__grabbed sl__store_grab(sl_store *s, unsigned kind, const void *key, size_t klen,
                           uint64_t hash, uint16_t *metap);

/* sl__store_grab that hashes the key too (one call), setting *hashp (the
 * hot path). */
sl__grabbed sl__store_grab_key(sl_store *s, unsigned kind, const void *key, size_t klen,
                               uint64_t *hashp, uint16_t *metap);

/* The clock of g.rec, just grabbed, into *cp, and whether a decision at
 * now may take the quick way: t = max(now, *cp) <= Q (sl__clock_quick_q;
 * false on a wide record, whose word decodes to the window's top, and
 * while a walk runs).  Q, then E, loaded with acquire after the record was
 * taken (store.c, clock_walk, says why).  If not, the holder lets the
 * record go and takes the sure way, which makes room for t; if so, it may
 * write t with sl__rec_set_clock_lo.  now = INT64_MIN: only the clock is
 * read (right whenever it says 1). */
static inline int sl__grabbed_clock(sl__grabbed g, int64_t now, int64_t *cp)
{
    int64_t q = __atomic_load_n((const int64_t *)(const void *)((const char *)g.sh + 16),
                                __ATOMIC_ACQUIRE);
    int64_t e = __atomic_load_n((const int64_t *)(const void *)((const char *)g.sh + 8),
                                __ATOMIC_ACQUIRE);
    int64_t c = sl__clock_in(e, sl__ld32(g.rec + 4));
    *cp = c;
    return sl__clock_quick_q(q, now > c ? now : c);
}

/* Whether the quick way applies to the store at all (SL_LOCK_RECORD; with
 * SL_LOCK_SHARD records are taken only under the shard lock, with plain
 * stores).  The flag is the store's first member (store.c). */
static inline int sl__store_quick(const sl_store *s) { return *(const int *)(const void *)s; }

/* The sure way in: hashes (kind, key) (klen 1..SL_MAX_KEY), takes the lock
 * of the key's shard, finds the record and takes it, in one call.  Sets
 * *shp to the shard and *hashp to the hash; returns the record, or NULL if
 * absent.  The shard lock is held on return either way.  The record is
 * held, except in an SL_LOCK_SHARD store, where nobody takes a record
 * without the shard lock: there it is only found, and is the caller's
 * until the shard lock is released as long as the caller inserts no other
 * record (one decision).  Release it with sl__rec_release(r, meta) either
 * way (a store of the meta the caller knows). */
uint8_t *sl__store_lookup(sl_store *s, unsigned kind, const void *key, size_t klen,
                          sl__shard **shp, uint64_t *hashp);

/* sl__store_lookup returning the record and its shard as a pair, in
 * registers (the hot path: no shard pointer through memory). */
typedef struct sl__found {
    uint8_t *rec; /* the record, or NULL */
    sl__shard *sh; /* its shard, locked */
} sl__found;
sl__found sl__store_lookup_pair(sl_store *s, unsigned kind, const void *key, size_t klen,
                                uint64_t *hashp);

/* sl__store_lookup for a hash already computed with sl__store_hash. */
uint8_t *sl__store_lookup_hashed(sl_store *s, unsigned kind, const void *key, size_t klen,
                                 uint64_t hash, sl__shard **shp);

/* Looking ahead (sl_decide_many): sl__store_prefetch starts loading the
 * slot where a key of (kind, klen) and this hash is first looked for (in
 * a fitted table, the record itself); sl__store_prefetch_rec, later,
 * starts loading the rest of the key's record: the next line of a fitted
 * slot, or the records its handle table's run points to (1/64 of them
 * not the key's).  Neither takes a lock.  Hints only: neither changes
 * anything.  sl__store_prefetch returns the store's table size estimated
 * from this shard's (slots). */
uint64_t sl__store_prefetch(sl_store *s, unsigned kind, size_t klen, uint64_t hash);
void sl__store_prefetch_rec(sl_store *s, unsigned kind, size_t klen, uint64_t hash);

/* For tests: where the record of (kind, key) lives: 0 absent, 1 in a
 * fitted table, 2 in the slab (takes the shard lock). */
int sl__store_placed(sl_store *s, unsigned kind, const void *key, size_t klen);
/* For tests: the fitted table of records of (kind, klen) in shard sh
 * (shard lock held): its slots (0: none), first slot, live records and
 * tombstones, and the grace periods the shard waited to reuse one. */
typedef struct sl__fit_info {
    uint32_t cap, live, tomb, rsize;
    uint32_t spread; /* log2 of the slots a record has in a spread table (store.c,
                        fit_spread_ok); 0: dense */
    const uint8_t *slot0;
    uint64_t graces;
    uint64_t purges; /* the shard's purges and shrinks in place (store.c, fit_purge) */
    uint64_t held;   /* bytes of the shard's fitted blocks */
} sl__fit_info;
void sl__shard_fit_info(const sl__shard *sh, unsigned kind, size_t klen, sl__fit_info *out);
/* For tests: with off > 0, new records of s go to the slab, as before
 * fitted tables (the old path: answers must not change); with off == 0,
 * the default (bounded stores: SL__FIT_BOUNDED, store.c); with off < 0,
 * fitted tables even in a bounded store.  Before use. */
void sl__store_fit_off(sl_store *s, int off);

/* Finds the record of (kind, key) and takes it (waiting for its holder).
 * NULL if absent.  O(1) expected. */
uint8_t *sl__shard_find(sl__shard *sh, uint64_t hash, unsigned kind,
                        const void *key, size_t klen);

/* Inserts a new record with room for at least state_len state bytes, all
 * zero, clock = now_ms (kept wide if it does not fit the shard's window,
 * which may move first: sl__shard_clock_room), reset coded as 0.  When
 * the memory bound would be
 * passed it first drops records at rest (reset time <= now_ms), then --
 * only with SL_FULL_EVICT -- evicts the least restricted of those it
 * examines (sl__rec_restriction: below its limit before at it, then the
 * soonest reset); this work is bounded per call; held records are never
 * dropped.  Returns the record, held, or NULL if it cannot be placed:
 * sl__shard_fail then says why (SL_EFULL: only restricted records were
 * left to drop and the store refuses to; SL_ENOMEM otherwise).  Never
 * called for a key that is already present. */
uint8_t *sl__shard_insert(sl__shard *sh, uint64_t hash, unsigned kind,
                          const void *key, size_t klen, size_t state_len,
                          int64_t now_ms);

/* Why the shard's last sl__shard_insert or sl__shard_resize returned NULL:
 * SL_EFULL or SL_ENOMEM (shard lock held). */
int sl__shard_fail(const sl__shard *sh);

/* Clock walks of the shard (store.c, clock_walk) that moved its E (shard
 * lock held; for tests). */
uint64_t sl__shard_clock_moves(const sl__shard *sh);

/* Room for state bytes in r (>= the state_len it was made with; a wide
 * clock's bytes left out). */
size_t sl__rec_state_cap(const sl__shard *sh, const uint8_t *r);

/* Moves r (held) to a record with room for new_state_len state bytes,
 * copying the header, key and min(old, new) state bytes (the rest zero),
 * reclaiming as sl__shard_insert does (never r) at r's clock.
 * Returns the new record, held (r is then gone), or NULL (sl__shard_fail)
 * with r untouched and still held. */
uint8_t *sl__shard_resize(sl__shard *sh, uint64_t hash, uint8_t *r,
                          size_t new_state_len);

/* Removes r, which the caller holds (freeing its external buffer,
 * sl__rec_has_ext); its lock goes with it. */
void sl__shard_remove(sl__shard *sh, uint64_t hash, uint8_t *r);

/* External buffers (sl__rec_has_ext) come from the store, so that the
 * shard counts what they really cost (the allocator's chunk, or whole
 * pages for a mapped block):
 *   sl__ext_cost     what a buffer of `bytes` costs, to reserve room;
 *   sl__shard_reserve makes `bytes` more room under the bound, reclaiming
 *                    as sl__shard_insert does (never evicting `keep`):
 *                    0, or SL_EFULL / SL_ENOMEM as sl__shard_fail;
 *   sl__ext_alloc    a buffer of `bytes`, counted (NULL if out of memory;
 *                    reserve first: it does not reclaim);
 *   sl__ext_free     frees one (NULL is ignored) and stops counting it.
 * Shard lock held for all but sl__ext_cost.  Only a record's holder uses
 * its buffer, so it may be freed at once. */
size_t sl__ext_cost(size_t bytes);
int sl__shard_reserve(sl__shard *sh, size_t bytes, const uint8_t *keep, int64_t now_ms);
void *sl__ext_alloc(sl__shard *sh, size_t bytes);
void sl__ext_free(sl__shard *sh, void *buf, size_t bytes);

/* A loose shard: records outside any store, each kept by its owner (the
 * Redis module keeps one per key and algorithm in its own values: lone.h).
 * sl__shard_insert on it allocates a record on its own (NULL `hash` and
 * table: the caller keeps the pointer), sl__shard_resize moves it,
 * sl__shard_remove frees it with its external buffer, sl__rec_state_cap
 * gives its room; it has no bound, so reserving always succeeds, and it
 * counts its external buffers (sl__shard_loose_bytes).  Its max_bytes
 * bounds no total: only what one record may grow to.  No lock: one
 * thread uses it (or its callers take turns). */
sl__shard *sl__shard_loose_new(uint64_t max_bytes);
/* The most bytes one record's state may take: as in a store bounded by the
 * max_bytes the loose shard was made with (sl__store_rec_max), UINT64_MAX
 * for 0.  Parameters that could pass it are refused (SL_ETOOBIG). */
uint64_t sl__shard_loose_rec_max(const sl__shard *sh);
/* Offers `bytes` of room (8-byte aligned, the owner's, zeroed before its
 * first use) for the next record made in the loose shard, instead of an
 * allocation of its own: taken by that insert if the room is free and the
 * record fits, else left; room NULL withdraws it.  The owner withdraws it
 * before the room goes away, and keeps the room as long as a record lives
 * in it (sl__shard_loose_roomed): the shard never frees it, and a record
 * that outgrows it moves to an allocation of its own, leaving it free. */
void sl__shard_loose_room(sl__shard *sh, void *room, size_t bytes);
/* The record living in room (offered before), or NULL when it is free. */
uint8_t *sl__shard_loose_roomed(const void *room);
/* Whether a loose shard's record lives in room its owner offered. */
int sl__shard_loose_lent(const uint8_t *r);
void sl__shard_loose_free(sl__shard *sh);
uint64_t sl__shard_loose_bytes(const sl__shard *sh);

/* The most bytes one key's state may take in this store (the bound over
 * SL_STORE_REC_SHARE), or UINT64_MAX when the store is unbounded. */
uint64_t sl__store_rec_max(const sl_store *s);

/* Shards by index, for walking the whole store (snapshots). */
unsigned sl__store_nshards(const sl_store *s);
sl__shard *sl__store_shard_at(sl_store *s, unsigned i);

/* Calls fn for every record of the shard (shard lock held), each record
 * held during its call, stopping at the first nonzero return, which it
 * returns.  fn must not insert or remove. */
int sl__shard_foreach(sl__shard *sh, int (*fn)(const uint8_t *rec, void *ctx), void *ctx);

#endif
