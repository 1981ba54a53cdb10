/*
 * store.h -- where per-key state lives (internal to libsluice).
 *
 * The store is a set of shards, each a lock, an open-addressing hash table
 * of 32-bit record handles, and a slab of variable-size records.  A record is
 * one allocation holding the key inline:
 *
 *     offset 0   uint16  meta    bits 0..8: key length - 1 (1..512 bytes)
 *                                bit 9: SL__REC_LOCK, the record's lock
 *                                bits 10..12: algorithm (sl_algo)
 *                                bits 13..15: SL__REC_* flags (bit 15,
 *                                SL__REC_SPACE, is the key space)
 *     offset 2   uint16  exp     reset time, coded relative to clock (below)
 *     offset 4   int64   clock   latest time seen for the key (ms)
 *     offset 12  key bytes
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
 * record.  Nothing here knows any algorithm: the engine (limiter.c)
 * decides, the store only keeps bytes and bounds memory.
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

#define SL__REC_HDR 12         /* bytes before the key */
#define SL__REC_EXT 0x1        /* state starts with a malloc'd pointer (8 bytes)
                                  then a uint32 of its size in bytes; the
                                  store frees it with the record */
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
static inline const uint8_t *sl__rec_key(const uint8_t *r) { return r + SL__REC_HDR; }
static inline uint8_t *sl__rec_state(uint8_t *r) { return r + SL__REC_HDR + sl__rec_klen(r); }
static inline int64_t sl__rec_clock(const uint8_t *r) { return (int64_t)sl__ld64(r + 4); }
static inline void sl__rec_set_clock(uint8_t *r, int64_t t) { sl__st64(r + 4, (uint64_t)t); }

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
/* The reset time (ms): clock + decoded reset.  Saturates at INT64_MAX. */
int64_t sl__rec_reset_at(const uint8_t *r);

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
 * need not read back the word it just wrote with a locked instruction. */
uint8_t *sl__store_grab(sl_store *s, unsigned kind, const void *key, size_t klen, uint64_t hash,
                        uint16_t *metap);

/* sl__store_grab that hashes the key too (one call), setting *hashp. */
uint8_t *sl__store_grab_key(sl_store *s, unsigned kind, const void *key, size_t klen,
                            uint64_t *hashp, uint16_t *metap);

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

/* sl__store_lookup for a hash already computed with sl__store_hash. */
uint8_t *sl__store_lookup_hashed(sl_store *s, unsigned kind, const void *key, size_t klen,
                                 uint64_t hash, sl__shard **shp);

/* Looking ahead (sl_decide_many): sl__store_prefetch starts loading the
 * table slot where a key of this hash is first looked for; 
 * sl__store_prefetch_rec, later, starts loading the records that slot's
 * run points to (1/64 of them not the key's).  Neither takes a lock.
 * Hints only: neither changes anything.  sl__store_prefetch returns the
 * store's table size estimated from this shard's (slots). */
uint64_t sl__store_prefetch(sl_store *s, uint64_t hash);
void sl__store_prefetch_rec(sl_store *s, uint64_t hash);

/* Finds the record of (kind, key) and takes it (waiting for its holder).
 * NULL if absent.  O(1) expected. */
uint8_t *sl__shard_find(sl__shard *sh, uint64_t hash, unsigned kind,
                        const void *key, size_t klen);

/* Inserts a new record with room for at least state_len state bytes, all
 * zero, clock = now_ms, reset coded as 0.  When the memory bound would be
 * passed it first drops expired records (reset time <= now_ms), then evicts
 * the least recently used (oldest clock) of those it examines; this work is
 * bounded per call; held records are never dropped.  Returns the record,
 * held, or NULL (SL_ENOMEM) if the record cannot be placed.  Never called
 * for a key that is already present. */
uint8_t *sl__shard_insert(sl__shard *sh, uint64_t hash, unsigned kind,
                          const void *key, size_t klen, size_t state_len,
                          int64_t now_ms);

/* Room for state bytes in r (>= the state_len it was made with). */
size_t sl__rec_state_cap(const sl__shard *sh, const uint8_t *r);

/* Moves r (held) to a record with room for new_state_len state bytes,
 * copying the header, key and min(old, new) state bytes (the rest zero).
 * Returns the new record, held (r is then gone), or NULL (SL_ENOMEM) with
 * r untouched and still held. */
uint8_t *sl__shard_resize(sl__shard *sh, uint64_t hash, uint8_t *r,
                          size_t new_state_len);

/* Removes r, which the caller holds (freeing an SL__REC_EXT buffer); its
 * lock goes with it. */
void sl__shard_remove(sl__shard *sh, uint64_t hash, uint8_t *r);

/* Adds delta bytes (may be negative) to the shard's count of memory held
 * outside records (SL__REC_EXT buffers). */
void sl__shard_account(sl__shard *sh, int64_t delta);

/* Whether an external buffer of `bytes` more fits under the bound, after
 * reclaiming as sl__shard_insert does (never evicting `keep`). */
int sl__shard_reserve(sl__shard *sh, size_t bytes, const uint8_t *keep, int64_t now_ms);

/* Shards by index, for walking the whole store (snapshots). */
unsigned sl__store_nshards(const sl_store *s);
sl__shard *sl__store_shard_at(sl_store *s, unsigned i);

/* Calls fn for every record of the shard (shard lock held), each record
 * held during its call, stopping at the first nonzero return, which it
 * returns.  fn must not insert or remove. */
int sl__shard_foreach(sl__shard *sh, int (*fn)(const uint8_t *rec, void *ctx), void *ctx);

#endif
