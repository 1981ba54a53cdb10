/*
 * store.c -- the sharded, bounded, thread-safe key store (see store.h).
 *
 * Layout.  A store is 2^k shards; a key's shard is the top k bits of its
 * keyed hash (SipHash-1-3, a random seed per store), its home slot in the
 * shard's table the low 32 bits mapped onto the table size by a multiply
 * ("fast range"), so the table size need not be a power of two.  Each shard
 * has its own lock (a spinlock: see lock_wait) and each record its own
 * (a bit of its meta: rec_trylock); store.h says who takes which.
 *
 * Threads.  With SL_LOCK_RECORD (the default) a decision on an existing key
 * reads the shard's table without the shard lock and takes only the
 * record's lock (sl__store_grab): two threads on different keys write no
 * common cache line, so they scale (bench: 2 threads on their own keys
 * went from 18-22 to 30-34 M/s together).  What such readers may still
 * be reading is retired, not freed, when replaced: old tables and
 * directories, freed pages (reclaim.h).  Everything that adds, moves or
 * drops a record takes the shard lock, then the record's lock (eviction
 * and the expiry sweep skip records held right now: in use, so neither
 * expired nor least recently used).  With SL_LOCK_SHARD nobody reads
 * without the shard lock, so a record's lock is taken with plain stores:
 * no atomic read-modify-write on the key's own line, ~5-10% faster for
 * one thread (docs/store.md).
 *
 * Fitted tables.  A record of a fixed-size state with a key of at most
 * SL__FIT_KEY_MAX bytes and a narrow clock lives in its shard's table of
 * records of its size, the slot being the record, found by a tag byte a
 * slot: a decision reads the tags' line and one slot, not a handle then a
 * record (see "fitted tables" below; docs/store.md; a bounded store purges
 * and shrinks its tables in place at the bound: fit_purge).  Everything
 * else -- and a fitted-kind record its table could not take -- is in the
 * slab, found through the handle table:
 *
 * Table.  Open addressing with linear probing; a slot is 32 bits: a record
 * handle (26 bits, 0 = empty) and a 6-bit tag from the key's hash.  A probe
 * reads a record only when the tag matches (1 in 64 for another key), then
 * compares key length and algorithm (one 16-bit load) and the key bytes, so
 * a lookup reads one record, the key's own; deletion shifts the
 * rest of the cluster back (no tombstones), recomputing the home slot of the
 * records it moves.  Invariant: every record sits in the cluster starting at
 * its home slot, with no empty slot between its home and itself.  The table
 * grows by 1.5x when the load would pass 0.8, so it stays between ~0.53 and
 * 0.8 full (4-7.5 bytes a key).
 *
 * Slab.  Records have an even size of at least 16 bytes.  Sizes up to
 * SL__CLASS_MAX each have a class; a class's records live in pages that hold
 * only records of that size: a class's first page is small (SL__PAGE_MIN
 * bytes) and each further page doubles up to SL__PAGE_MAX, and a page is
 * exactly a whole number of records, so a class costs little until it is
 * used a lot and nothing is lost at page ends.  Larger records get a page of
 * their own.  A handle is (page << 10 | index in page) + 1, so a shard has
 * at most 65535 pages (1 GB of records in 16 KB pages).  A freed record
 * is marked free in its first two bytes (a key length no record has) and
 * linked into its page's free list by the next two; a page with a free
 * record is on its class's list; an empty page is freed at once, so memory
 * moves between classes.  Records never move while they live, except
 * through sl__shard_resize.
 *
 * Memory bound.  A shard's bytes are every block it holds, at what the
 * block costs the process (blk_cost: malloc's chunk, or whole pages for a
 * block of SL__MAP_MIN bytes or more, which is mapped so that freeing it
 * gives it back to the system whichever thread frees it): pages, the page
 * directory, the table, sliding-log rings, and blocks retired but not yet
 * freed (limbo, below).  Its budget is max_bytes / shards.  Records come to
 * rest (their reset time passes: sl__rec_restriction) and then hold
 * nothing; when a record does not fit (SL__ROUNDS rounds at most per call,
 * so the work per call is bounded):
 *   1. an expiry sweep walks the slab from a hand (SL__SCAN live records a
 *      round) and drops every record at rest.  While sweeps find such
 *      records, only sweep.
 *   2. otherwise SL__SAMPLE random table slots are sampled; records at rest
 *      met there are dropped too.  Only SL_FULL_EVICT goes further: it
 *      evicts the least restricted record seen (below its limit before at
 *      it, then the soonest reset), preferring, at that level, one whose
 *      slot the new record fits in, so that one eviction makes room; if
 *      none fits (the new record is bigger than every one sampled), the
 *      sampled page with the fewest live records is emptied of what is no
 *      more restricted than that.  SL_FULL_DENY refuses instead (SL_EFULL)
 *      and, until something is dropped, tries one round only per call, so
 *      a flood of new keys against a full store costs little each.
 *   3. once the budget holds no new page, a free record of a bigger class
 *      is used rather than evicting.
 * A record that fits nowhere is placed anyway if nothing else lives in the
 * shard (a key bigger than the budget still works, alone).  sl_store_expire
 * runs the expiry sweep on demand.
 *
 * Limbo.  A block that lock-free readers may still be reading (a page, an
 * old table or directory) is not freed when replaced but put in the
 * shard's limbo, still counted; the limbo is emptied after a grace period
 * (sl__reclaim_wait, ~1 us) when the shard needs the room, when it holds
 * 1/32 of what the shard holds (at least SL__LIMBO_MIN), when the shard
 * empties, and by sl_store_expire: a grace period per 3% of the shard
 * retired, so at most ~3% of a growing store waits there.  So memory
 * waiting for readers is bounded and counted: handed to a background
 * thread (call_rcu), it piled up by ~100 MB, uncounted, under a flood of
 * 64 KB records (each one evicting another) into an 8 MB store.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getrandom */
#endif

#include "store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "reclaim.h"
#include "siphash.h"

#define SL__REC_MIN          16u   /* bytes: the smallest record (a free list link fits) */
#define SL__CLASS_MAX        1024u /* bytes: larger records get a page each */
#define SL__NCLASS           ((SL__CLASS_MAX - SL__REC_MIN) / 2 + 1)
#define SL__NOCLASS          0xffffu
#define SL__PAGE_MIN         256u          /* bytes: a class's first page */
#define SL__PAGE_MAX         16384u        /* bytes: a class's pages from the 7th on */
#define SL__STATE_MAX        (1u << 28)    /* bytes of state in one record */
#define SL__TABLE_MIN        16u           /* slots in a new table */
#define SL__SCAN             32u           /* live records the expiry sweep examines a round */
#define SL__ROUNDS           16            /* reclaim rounds per call */
#define SL__SHARDS           64u           /* default shard count */
#define SL__SHARD_BUDGET_MIN (256u * 1024) /* bytes: auto shard count keeps this */
#define SL__MAX_SHARDS       65536u
#define SL__SAMPLE           16u /* table slots sampled for an eviction */
#define SL__MAP_MIN          (64u * 1024)  /* bytes: blocks this big are mapped, not malloc'd */
#define SL__LIMBO_MIN        (16u * 1024) /* bytes of limbo that may make the shard empty it */
#define SL__PF_LINES         3u           /* lines of slots a decision prefetches (prefetch_home) */
#define SL__PF_MIN_CAP       4096u        /* ... in tables of at least this many slots */
#define SL__CHUNK            (2u << 20)   /* bytes: an arena chunk, one huge page (arena) */
#define SL__ARENA_SHARD_MIN  (8u << 20)   /* bytes of budget a shard needs for the arena */

/* Waiting for a shard lock (lock_wait). */
#define SL__SPINS  128u  /* busy waits before yielding the CPU */
#define SL__YIELDS 1024u /* sched_yield()s before sleeping */
#define SL__NAP_NS 50000 /* ns slept per round after that */

/* A handle is (page << SL__IDX_BITS | index) + 1 < 2^SL__H_BITS; a table
 * slot keeps a hash tag in the bits above (tag_of). */
#define SL__IDX_BITS  10 /* a page holds at most 1024 records */
#define SL__PAGE_BITS 16
#define SL__H_BITS    (SL__IDX_BITS + SL__PAGE_BITS)
#define SL__H_MASK    ((1u << SL__H_BITS) - 1)
#define SL__MAX_PAGES ((1u << SL__PAGE_BITS) - 1) /* pages per shard: the last handle < 2^26 */

/* A free record's meta is SL__FREE_MARK (store.h); its bytes 2..3 link
 * the page's free list. */

/* Fitted tables (see "fitted tables" below): one per record size of the
 * fixed-size states with keys of at most SL__FIT_KEY_MAX bytes. */
#define SL__FIT_RSIZE_MAX ((SL__REC_HDR + SL__FIT_KEY_MAX + 10 + 1) & ~1u)
#define SL__NFIT          ((SL__FIT_RSIZE_MAX - SL__REC_MIN) / 2 + 1)
#define SL__FIT_NONE      0xffu
#define SL__H_FIT         (1u << SL__H_BITS) /* obtain's "a fitted slot was found" */

/* Waiting for a record's holder on the quick path (sl__store_grab) before
 * taking the sure way: a decision holds a record ~20-100 ns. */
#define SL__GRAB_SPINS 64u

/* One slab page (a directory entry).  mem, rsize and cap are also read
 * without the shard lock (rec_seen), so they are written atomically: mem
 * last when a page is made, first (NULL) when it is freed. */
typedef struct page {
    uint8_t *mem;    /* cap * rsize bytes; NULL when the entry is unused */
    uint32_t rsize;  /* bytes per record (even) */
    uint32_t next;   /* next page with room in the class (index + 1); for an
                        unused entry, the next unused entry */
    uint32_t prev;   /* previous page with room in the class (index + 1) */
    uint16_t cls;    /* size class, SL__NOCLASS for a one-record page */
    uint16_t cap;    /* records in the page, 1..1024 */
    uint16_t live;   /* records in use */
    uint16_t bump;   /* records [0, bump) have been handed out before */
    uint16_t free;   /* first free record: index + 1, 0 = none */
    uint8_t listed;  /* on its class's list of pages with room */
    uint8_t zeroed;  /* records [bump, cap) are still all zero but for their
                        meta (a mapped page: never written before) */
} page;

/* A block retired to the shard's limbo (see the top). */
typedef struct limbo {
    struct limbo *next;
    void *blk;
    size_t n; /* bytes asked for (blk_free) */
} limbo;

/* Eviction candidates seen by one sample: handles (0 = none), each the
 * least restricted of its kind by rank (rank_of: level, then time to rest). */
typedef struct victims {
    uint32_t best; /* the least restricted record */
    uint32_t fit;  /* ... whose slot a record of `want` fits */
    uint32_t ext;  /* ... holding an external buffer */
    uint32_t thin; /* a record at best's level on the page with
                      the fewest live records */
    uint64_t best_rank, fit_rank, ext_rank;
    uint32_t thin_live;
    uint8_t *frec;  /* a fitted record of the table a fitted insert wants
                       (fit_want_fi), the least restricted seen, or NULL */
    uint64_t frank;
    uint8_t *fany;  /* a fitted record of any table, the least restricted seen */
    uint64_t fany_rank;
} victims;

/* The store's page arena (see "arena" below): full-size slab pages carved
 * from 2 MB chunks mapped for transparent huge pages. */
typedef struct arena {
    pthread_mutex_t lock; /* guards the rest; taken under a shard lock, never
                             the other way round */
    uint8_t **chunk;      /* mapped chunks (SL__CHUNK bytes each), by address */
    uint32_t nchunk, cchunk;
    uint8_t *tail;        /* the newest chunk's next page never handed out */
    uint32_t left;        /* pages from tail to that chunk's end */
    void **freev;         /* pages freed (and given back: MADV_DONTNEED) */
    uint32_t nfree, cfree;
} arena;

struct sl__shard {
    _Alignas(64) atomic_uint lock; /* 0 = free, 1 = held (sl__shard_lock); must stay
                                      the first member (sl__shard_unlock, store.h) */
    uint32_t walk_wait;            /* clock walks to skip before the next (clock_walk) */
    int64_t epoch;                 /* E, the clock window's low end (store.h, "The clock"):
                                      at offset 8 (sl__shard_epoch); written under the lock,
                                      atomically, read without it by the quick way */
    int64_t quick_max;             /* Q, the latest time the quick way may write
                                      (sl__shard_quick_max, offset 16): set with E */
    /* Everything below is protected by lock; slot, size and pages are also
     * read without it (sl__store_grab).  They share the lock's line: a
     * decision under the lock reads one line of shard, and readers on two
     * cores share it clean while no key is added (only the paths that add
     * or drop keys write it). */
    uint32_t *slot;        /* the table: record handles, 0 = empty; slot[-1] holds
                              the size (table_new), so a reader gets both from one
                              pointer */
    uint32_t size;         /* slots (= slot[-1]) */
    uint8_t quick;         /* the store's `quick` (record locks taken atomically) */
    uint8_t deny;          /* SL_FULL_DENY: never evict a restricted record */
    uint8_t starved;       /* the last reclaim found only restricted records
                              (SL_FULL_DENY); cleared when one at rest is dropped
                              (any other drop leaves room: no search then) */
    uint8_t loose;         /* a loose shard (sl__shard_loose_new): no table, each
                              record its own allocation, owned by the caller */
    page *pages;           /* page directory, pcap entries */
    uint32_t fit_slab;     /* records of fitted kinds (fit_idx) in the slab, which a
                              lookup must then look for in the handle table too; read
                              without the lock by the quick way */
    uint32_t count;        /* records, fitted and in the slab */
    uint16_t hand_pi;      /* the expiry sweep's position: page index (< SL__MAX_PAGES) */
    uint16_t hand_idx;     /* ... and record index in that page (< 2^SL__IDX_BITS) */
    uint8_t tomb_new;      /* a tombstone was made since the last grace period: an
                              SL_LOCK_RECORD shard waits for one before reusing it */
    uint8_t fit_off;       /* new records go to the slab (sl__store_fit_off) */
    uint8_t fit_hand_t;    /* the expiry sweep's position in the fitted tables: table */
    /* Fitted tables by record size (fit_idx), NULL until a key of that size
     * comes: written under the lock (release), read without it. */
    _Alignas(64) struct fit_tbl *fit[SL__NFIT];
    uint32_t fit_cap[SL__NFIT]; /* their slots, for prefetching without reading them */
    uint32_t fit_hand_i;   /* ... and slot */
    uint32_t hcount;       /* records in the slab (and the handle table) */
    uint32_t fit_pass_drops; /* records at rest dropped in the fitted hand's pass */
    uint32_t fit_prev_drops; /* ... in its previous pass */
    uint64_t tomb_graces;  /* grace periods waited to reuse a tombstone (tests) */
    uint64_t fit_purges;   /* purges and shrinks in place (fit_purge; tests) */
    uint64_t fit_held;     /* bytes of the fitted tables' blocks */
    uint32_t fit_want_fi;  /* while a fitted insert reclaims (obtain): its table + 1 */
    uint64_t fit_want_hash; /* ... and its hash */
    uint8_t *fit_got;      /* the slot obtain found for it (SL__H_FIT) */
    const sl_store *store; /* for rehashing keys; read-only */
    uint64_t rng;          /* xorshift state for sampling eviction candidates */
    uint32_t last_h;       /* handle last found, inserted or resized (0 = none) */
    uint32_t npages;       /* directory entries in use or on the unused list */
    uint32_t pcap;         /* directory entries allocated */
    uint32_t punused;      /* first unused entry (index + 1), 0 = none */
    int fail;              /* why the last insert or resize failed (sl__shard_fail) */
    uint32_t pass_drops;   /* expired records dropped in the sweep's current pass */
    uint64_t bytes;        /* every block held, at blk_cost: pages, directory, table,
                              external buffers, limbo */
    uint64_t budget;       /* bytes; 0 = unbounded */
    uint64_t ext;          /* bytes in external buffers (sl__rec_has_ext) */
    limbo *limbo;          /* retired blocks waiting for readers to leave */
    uint64_t limbo_bytes;  /* what they cost (included in bytes) */
    uint64_t expired;      /* records dropped at rest (reset passed) */
    uint64_t evictions;    /* records evicted while holding a restriction */
    uint64_t evict_rest;   /* of expired: dropped to make room */
    uint64_t evict_limit;  /* of evictions: at their limit */
    uint64_t refused;      /* SL_EFULL failures */
    uint64_t loose_rec_max; /* a loose shard's bound on one record (sl__lone_decide) */
    arena *arena;           /* the store's page arena, NULL when it has none */
    uint8_t *loose_room;    /* room its owner offers for the next record (or NULL) */
    size_t loose_room_len;  /* its bytes */
    uint32_t walks_moved;   /* clock walks that moved E (tests) */
    uint32_t prev_drops;   /* ... in its previous pass over the pages */
    uint64_t availmap[(SL__NCLASS + 63) / 64]; /* classes with a page with room */
    uint16_t avail[SL__NCLASS];   /* first page with room (index + 1 <= SL__MAX_PAGES) */
    uint16_t npclass[SL__NCLASS]; /* pages the class holds */
    uint8_t pad_to_3k[3072 - 2720]; /* see the size's assert below */
};
_Static_assert(offsetof(struct sl__shard, lock) == 0, "sl__shard_unlock needs the lock first");
_Static_assert(offsetof(struct sl__shard, epoch) == 8, "sl__shard_epoch reads E at offset 8");
_Static_assert(offsetof(struct sl__shard, quick_max) == 16, "sl__shard_quick_max reads Q at 16");
_Static_assert(sizeof(struct sl__shard) == 3072, "a shard is 3 * 1024 bytes: two instructions "
                                                 "find one (lea, shl), as with 9 * 256 before "
                                                 "the fitted tables' fields (2720 bytes: padded)");
_Static_assert(offsetof(struct sl__shard, fit_slab) + sizeof(uint32_t) <= 64,
               "the quick way's fields share the lock's line (fit[] is the next line's)");

struct sl_store {
    int quick;          /* SL_LOCK_RECORD: must stay the first member (store.h) */
    sl__sipkey sip[8];  /* SipHash-1-3 key state per algorithm, derived from the seed */
    unsigned nshards;   /* power of two */
    unsigned shift;     /* 64 - log2(nshards); 64 when there is one shard */
    uint64_t max_bytes; /* 0 = unbounded */
    int deny;           /* on_full == SL_FULL_DENY */
    atomic_uint next;   /* shard where the next sl_store_expire starts */
    sl__shard *shard;
    arena *arena;       /* NULL: slab pages are malloc'd (a small bounded store) */
};

/* ---- the reset code (store.h) -------------------------------------------------- */

static int64_t reset_decode(uint16_t code)
{
    if (code < 2048) return code;
    if (code == SL__RESET_NEVER) return INT64_MAX;
    unsigned e = code >> 11;
    return (int64_t)((2048u + (code & 2047u)) * ((uint64_t)1 << (e - 1)));
}

int64_t sl__rec_reset_at(const sl__shard *sh, const uint8_t *r)
{
    int64_t d = reset_decode(sl__ld16(r + 2));
    int64_t c = sl__rec_clock(sh, r);
    if (d == INT64_MAX || c > INT64_MAX - d) return INT64_MAX;
    return c + d;
}

int64_t sl__loose_reset_at(const uint8_t *r)
{
    int64_t d = reset_decode(sl__ld16(r + 2));
    int64_t c = sl__loose_clock(r);
    if (d == INT64_MAX || c > INT64_MAX - d) return INT64_MAX;
    return c + d;
}

/* ---- hashing, locking and slots ---------------------------------------------- */

uint64_t sl__store_hash(const sl_store *s, unsigned kind, const void *key, size_t klen)
{
    return sl__siphash13_v(&s->sip[kind & 7], key, klen);
}

static inline sl__shard *shard_of(sl_store *s, uint64_t hash)
{
    return &s->shard[s->shift >= 64 ? 0 : hash >> s->shift];
}

sl__shard *sl__store_shard(sl_store *s, uint64_t hash) { return shard_of(s, hash); }

/*
 * The shard lock is a test-and-test-and-set spinlock: taking it is one
 * atomic exchange and releasing it one plain release store, where a mutex
 * costs two atomic read-modify-writes and ~60 instructions of library code
 * (the unlock's RMW also drains the store buffer before the caller's next
 * loads).  Critical sections are short (a decision, 50-300 ns) except a
 * snapshot's copy of a shard, a table growth (O(records in the shard)) and
 * sl_store_expire; a waiter busy-waits SL__SPINS rounds, then yields the
 * CPU SL__YIELDS times, then sleeps SL__NAP_NS per round, so a long hold
 * costs the waiters little CPU.  Not fair: fine for locks held this briefly.
 */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The n-th round of waiting for a lock (shard or record). */
static void backoff(unsigned n)
{
    if (n < SL__SPINS) {
        cpu_relax();
    } else if (n < SL__SPINS + SL__YIELDS) {
        sched_yield();
    } else {
        struct timespec ts = {0, SL__NAP_NS};
        nanosleep(&ts, NULL);
    }
}

static void lock_wait(sl__shard *sh)
{
    for (unsigned n = 0;; n++) {
        if (!atomic_load_explicit(&sh->lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(&sh->lock, 1, memory_order_acquire))
            return;
        backoff(n);
    }
}

static inline void shard_lock(sl__shard *sh)
{
    if (__builtin_expect(atomic_exchange_explicit(&sh->lock, 1, memory_order_acquire) != 0, 0))
        lock_wait(sh);
}

void sl__shard_lock(sl__shard *sh) { shard_lock(sh); }

/*
 * A record's lock is SL__REC_LOCK in its meta, taken with a compare-and-swap
 * on the 16-bit word and released with a store (sl__rec_unlock).  It lives in
 * the record's first cache line, which a decision writes anyway: taking it
 * costs no miss and, for threads on different keys, no shared line.
 */
/* Takes r if its meta is still m (unheld): one compare-and-swap. */
static inline int rec_cas(uint8_t *r, uint16_t m)
{
    return __atomic_compare_exchange_n((uint16_t *)(void *)r, &m, (uint16_t)(m | SL__REC_LOCK), 0,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline int rec_trylock(const sl__shard *sh, uint8_t *r)
{
    uint16_t m = sl__rec_meta(r);
    if (m & SL__REC_LOCK) return 0;
    if (!sh->quick) { /* SL_LOCK_SHARD: only shard lock holders touch records */
        sl__rec_meta_set(r, (uint16_t)(m | SL__REC_LOCK));
        return 1;
    }
    return rec_cas(r, m);
}

static void __attribute__((noinline)) rec_lock_wait(const sl__shard *sh, uint8_t *r)
{
    for (unsigned n = 0; !rec_trylock(sh, r); n++) backoff(n);
}

/* Takes a live record's lock, waiting for its holder (shard lock held: a
 * live record stays live, and its holder waits for nothing). */
SL__HOT_INLINE void rec_lock(const sl__shard *sh, uint8_t *r)
{
    if (__builtin_expect(!rec_trylock(sh, r), 0)) rec_lock_wait(sh, r);
}

static inline uint32_t rec_size(size_t klen, size_t state_len)
{
    size_t n = (SL__REC_HDR + klen + state_len + 1) & ~(size_t)1;
    return n < SL__REC_MIN ? SL__REC_MIN : (uint32_t)n;
}

static inline uint32_t h_page(uint32_t h) { return (h - 1) >> SL__IDX_BITS; }
static inline uint32_t h_idx(uint32_t h) { return (h - 1) & ((1u << SL__IDX_BITS) - 1); }
static inline uint32_t h_make(uint32_t pi, uint32_t idx)
{
    return ((pi << SL__IDX_BITS) | idx) + 1;
}

/* A slot holds a handle (< 2^26, 0 = empty) and, in its top 6 bits, a tag:
 * 6 bits of the key's hash that neither the shard nor the home slot use. */
static inline uint32_t tag_of(uint64_t hash) { return (uint32_t)(hash >> 32) << SL__H_BITS; }
static inline uint32_t s_h(uint32_t v) { return v & SL__H_MASK; }

/* Writes slot i: a release store, as readers without the lock may be
 * reading it (sl__store_grab); a record is complete before its handle is
 * seen. */
static inline void slot_set(sl__shard *sh, uint32_t i, uint32_t v)
{
    __atomic_store_n(&sh->slot[i], v, __ATOMIC_RELEASE);
}

/* ---- blocks: what the shard's memory costs ------------------------------------
 *
 * Every block a shard holds is allocated here and counted at blk_cost, what
 * it costs the process: a block of SL__MAP_MIN bytes or more is mapped
 * (whole pages, returned to the system when freed, whichever thread frees
 * it: such blocks are few -- large records, large tables and logs -- and
 * malloc would keep them in per-thread arenas, where a flood of 64 KB
 * records left RSS at 3-16x the count); a smaller one is malloc'd and
 * costs malloc's chunk: the size plus an 8-byte header, rounded up to 16,
 * at least 32 (glibc's chunks; other allocators differ by a few bytes). */

static size_t os_page(void)
{
    static _Atomic size_t page_size;
    size_t p = atomic_load_explicit(&page_size, memory_order_relaxed);
    if (!p) {
        long v = sysconf(_SC_PAGESIZE);
        p = v > 0 ? (size_t)v : 4096;
        atomic_store_explicit(&page_size, p, memory_order_relaxed);
    }
    return p;
}

/* A block's size n may carry SL__BLK_MAP: mapped whatever its size (a
 * fitted table's block of a few KB, fit_bytes), so that freeing it gives
 * its pages back: such blocks, freed to malloc as a table grows, stayed in
 * the heap (1.25 MB of a 1M-key store's, ~1.2 B a key of RSS). */
#define SL__BLK_MAP ((size_t)1 << 62)

static uint64_t blk_cost(size_t n)
{
    if (n >= SL__MAP_MIN) /* SL__BLK_MAP too */
        return ((uint64_t)(n & ~SL__BLK_MAP) + os_page() - 1) / os_page() * os_page();
    uint64_t c = ((uint64_t)n + 8 + 15) & ~(uint64_t)15;
    return c < 32 ? 32 : c;
}

/* A block of n bytes (zeroed if `zero`; mapped blocks always are), or NULL. */
static void *blk_new(size_t n, int zero)
{
    if (n >= SL__MAP_MIN) {
        void *p = mmap(NULL, n & ~SL__BLK_MAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    return zero ? calloc(1, n) : malloc(n);
}

static void blk_free(void *p, size_t n)
{
    if (!p) return;
    if (n >= SL__MAP_MIN)
        munmap(p, n & ~SL__BLK_MAP);
    else
        free(p);
}

size_t sl__ext_cost(size_t bytes) { return (size_t)blk_cost(bytes); }

/* ---- the arena: slab pages on huge pages ---------------------------------------
 *
 * At 1M keys a decision's table slot and record are on two 4 KB pages of
 * ~50 MB: two TLB misses, which under a VM's nested paging cost about what
 * the cache misses do (docs/status.md, "Issue 18 of 18": 2 MB pages for
 * the slab pages made 1M-key decisions 1.27-1.36x faster).  So a store
 * that may grow big takes its full-size slab pages (more than half of
 * SL__PAGE_MAX: a class's pages from the 7th on, nearly all of a big
 * store) from chunks of SL__CHUNK bytes, aligned and marked MADV_HUGEPAGE.
 * Such a page is counted as a malloc'd one (blk_cost, 16 bytes more than
 * it takes); a freed one is given back to the system at once
 * (MADV_DONTNEED) and kept for reuse, no longer resident.  What the arena
 * holds beyond its pages is the newest chunk's uncarved tail, resident
 * once the chunk's huge page is touched: at most SL__CHUNK, which a
 * bounded store keeps aside from its shards' budgets (sl_store_new), so
 * the bound holds; sl_store_stats' bytes, what the shards count, leave
 * it out.  Chunks are unmapped with the store.  Used by
 * unbounded stores and by bounded ones whose shards have at least
 * SL__ARENA_SHARD_MIN each (sluiced's default 1 GB: 16 MB), never by a
 * small one, whose 2 MB would be a large part of its bound. */

static arena *arena_new(void)
{
    arena *a = calloc(1, sizeof *a);
    if (a && pthread_mutex_init(&a->lock, NULL) != 0) {
        free(a);
        a = NULL;
    }
    return a;
}

static void arena_free(arena *a)
{
    if (!a) return;
    for (uint32_t i = 0; i < a->nchunk; i++) munmap(a->chunk[i], SL__CHUNK);
    free(a->chunk);
    free(a->freev);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* Whether blocks of n bytes come from the arena. */
static inline int arena_size(size_t n) { return n > SL__PAGE_MAX / 2 && n <= SL__PAGE_MAX; }

/* A new chunk, aligned to SL__CHUNK (so that it can be one huge page),
 * entered in a->chunk by address.  Lock held.  0, or -1 out of memory. */
static int arena_grow(arena *a)
{
    if (a->nchunk == a->cchunk) {
        uint32_t nc = a->cchunk ? a->cchunk * 2 : 16;
        uint8_t **v = realloc(a->chunk, (size_t)nc * sizeof *v);
        if (!v) return -1;
        a->chunk = v;
        a->cchunk = nc;
    }
    uint8_t *m = mmap(NULL, 2 * (size_t)SL__CHUNK, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    uint8_t *c = (uint8_t *)(((uintptr_t)m + SL__CHUNK - 1) & ~(uintptr_t)(SL__CHUNK - 1));
    if (c > m) munmap(m, (size_t)(c - m));
    if (c + SL__CHUNK < m + 2 * (size_t)SL__CHUNK)
        munmap(c + SL__CHUNK, (size_t)(m + 2 * (size_t)SL__CHUNK - (c + SL__CHUNK)));
    madvise(c, SL__CHUNK, MADV_HUGEPAGE); /* a hint: 4 KB pages if refused */
    uint32_t i = a->nchunk;
    while (i > 0 && a->chunk[i - 1] > c) { /* insertion: chunks are few */
        a->chunk[i] = a->chunk[i - 1];
        i--;
    }
    a->chunk[i] = c;
    a->nchunk++;
    a->tail = c;
    a->left = SL__CHUNK / SL__PAGE_MAX;
    return 0;
}

/* A page of SL__PAGE_MAX bytes from the arena (a freed one first), or NULL
 * when out of memory.  Its bytes are not zero (a freed one's are, in
 * fact, but nobody relies on it). */
static void *arena_page(arena *a)
{
    void *p = NULL;
    pthread_mutex_lock(&a->lock);
    if (a->nfree) {
        p = a->freev[--a->nfree];
    } else if (a->left || arena_grow(a) == 0) {
        p = a->tail;
        a->tail += SL__PAGE_MAX;
        a->left--;
    }
    pthread_mutex_unlock(&a->lock);
    return p;
}

/* Whether p is a page of the arena's (lock held). */
static int arena_owns(const arena *a, const void *p)
{
    uint32_t lo = 0, hi = a->nchunk;
    while (lo < hi) { /* the last chunk at or below p */
        uint32_t mid = (lo + hi) / 2;
        if ((const uint8_t *)p < a->chunk[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo > 0 && (const uint8_t *)p < a->chunk[lo - 1] + SL__CHUNK;
}

/* Takes back p if it is an arena page: gives its memory back to the system
 * and keeps it for reuse.  Returns 1 if it was, 0 if p is some other block. */
static int arena_put(arena *a, void *p)
{
    int own;
    pthread_mutex_lock(&a->lock);
    own = arena_owns(a, p);
    if (own) {
        madvise(p, SL__PAGE_MAX, MADV_DONTNEED);
        if (a->nfree == a->cfree) {
            uint32_t nc = a->cfree ? a->cfree * 2 : 64;
            void **v = realloc(a->freev, (size_t)nc * sizeof *v);
            if (v) {
                a->freev = v;
                a->cfree = nc;
            }
        }
        if (a->nfree < a->cfree) a->freev[a->nfree++] = p; /* else lost until the store goes */
    }
    pthread_mutex_unlock(&a->lock);
    return own;
}

/* A slab page's block of n bytes: from the arena when the store has one
 * and n is a full page's size, else blk_new. */
static void *page_blk_new(sl__shard *sh, size_t n)
{
    if (sh->arena && arena_size(n)) {
        void *p = arena_page(sh->arena);
        if (p) return p;
    }
    return blk_new(n, 0);
}

/* The size of a slab page's block of n bytes: an arena page is a whole
 * SL__PAGE_MAX, and is counted so (a page the arena could not give, taken
 * from malloc instead, is then counted a little high). */
static inline size_t page_blk_size(const sl__shard *sh, size_t n)
{
    return sh->arena && arena_size(n) ? SL__PAGE_MAX : n;
}

/* Frees a block the shard held: to the arena if it came from there. */
static void sh_blk_free(sl__shard *sh, void *p, size_t n)
{
    if (p && sh->arena && arena_size(n) && arena_put(sh->arena, p)) return;
    blk_free(p, n);
}

/* Empties the limbo: waits for every reader that may still see a block in
 * it (a grace period), then frees them all.  Returns 1 if it freed any. */
static int limbo_flush(sl__shard *sh)
{
    limbo *l = sh->limbo;
    if (!l) return 0;
    sl__reclaim_wait();
    sh->tomb_new = 0; /* a grace period: tombstones made so far may be reused */
    while (l) {
        limbo *next = l->next;
        sh_blk_free(sh, l->blk, l->n);
        free(l);
        l = next;
    }
    sh->limbo = NULL;
    sh->bytes -= sh->limbo_bytes;
    sh->limbo_bytes = 0;
    return 1;
}

/* Retires block blk of n bytes, which is counted in bytes and which
 * lock-free readers may still be reading: into the limbo, counted until
 * freed (its 24-byte node is not: it would push a full shard over its
 * bound as it frees memory). */
static void limbo_add(sl__shard *sh, void *blk, size_t n)
{
    limbo *l = malloc(sizeof *l);
    if (!l) { /* no node: wait for the readers here */
        sl__reclaim_wait();
        sh->tomb_new = 0;
        sh_blk_free(sh, blk, n);
        sh->bytes -= blk_cost(n);
        return;
    }
    l->blk = blk;
    l->n = n;
    l->next = sh->limbo;
    sh->limbo = l;
    sh->limbo_bytes += blk_cost(n);
    if (sh->limbo_bytes >= SL__LIMBO_MIN && sh->limbo_bytes >= sh->bytes / 32) limbo_flush(sh);
}

/* A zeroed table of size slots, its size in front (slot[-1]); NULL if out
 * of memory.  table_block gives back the block to free or retire, of
 * table_bytes(size) bytes. */
static inline size_t table_bytes(uint32_t size) { return ((size_t)size + 1) * sizeof(uint32_t); }

static uint32_t *table_new(uint32_t size)
{
    uint32_t *b = blk_new(table_bytes(size), 1);
    if (!b) return NULL;
    b[0] = size;
    return b + 1;
}

static inline void *table_block(uint32_t *slot) { return slot - 1; }

static inline uint8_t *rec_at(const sl__shard *sh, uint32_t h)
{
    const page *p = &sh->pages[h_page(h)];
    return p->mem + (size_t)h_idx(h) * p->rsize;
}

/* The slot where a key of this hash is first looked for in a table of
 * `size` slots: the hash's low 32 bits mapped onto the size ("fast range"). */
static inline uint32_t home_in(uint64_t hash, uint32_t size)
{
    return (uint32_t)(((uint64_t)(uint32_t)hash * size) >> 32);
}

static inline uint32_t home(const sl__shard *sh, uint64_t hash) { return home_in(hash, sh->size); }

static inline uint64_t rec_hash(const sl__shard *sh, const uint8_t *r)
{
    return sl__store_hash(sh->store, sl__rec_algo(r), sl__rec_key(r), sl__rec_klen(r));
}

/* Whether the n bytes at a and b are equal: inline word compares, as keys
 * are short (memcmp costs a call and ~30 instructions more). */
SL__HOT_INLINE int key_eq(const uint8_t *a, const uint8_t *b, size_t n)
{
    if (n >= 8) {
        if (n <= 16) /* two overlapping words */
            return (sl__ld64(a) == sl__ld64(b)) & (sl__ld64(a + n - 8) == sl__ld64(b + n - 8));
        if (n > 32) return memcmp(a, b, n) == 0;
        for (size_t i = 0; i + 8 < n; i += 8)
            if (sl__ld64(a + i) != sl__ld64(b + i)) return 0;
        return sl__ld64(a + n - 8) == sl__ld64(b + n - 8);
    }
    if (n >= 4) return (sl__ld32(a) == sl__ld32(b)) & (sl__ld32(a + n - 4) == sl__ld32(b + n - 4));
    return a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1];
}

/* ---- fitted tables: the records themselves ---------------------------------------
 *
 * A record of a fixed-size state (fit_state_len: all but sliding log and
 * sliding buckets) with a key of at most SL__FIT_KEY_MAX bytes and a narrow
 * clock lives in its shard's fitted table for its size (fit_idx), if there
 * is room: one block, a fit_tbl header, the tags, then `cap` slots of exactly rsize
 * bytes, each a whole record in the slab's format (so every sl__rec_*
 * helper and the engine work on it unchanged).  A decision on it reads one
 * place: the slot, not a handle and then a record.  Open addressing,
 * linear probing from home_in(hash, cap), walked on a tag byte a slot
 * (fit_tags, before the slots: fit_probe); a slot whose tag matches has
 * the identity bits of its meta compared and, on a match, the key bytes.
 * A slot's meta (and tag) says its state: SL__FREE_MARK, never used (a
 * probe stops there), SL__TOMB_MARK, removed (a probe goes on), else a
 * record.  Both marks are held forever (their lock bit is set), so nobody
 * takes them.
 *
 * Records never move while reachable, except by a rebuild (fit_rebuild:
 * every live record taken, copied into a new block, the old slot marked a
 * tombstone, the new block published, the old one retired to the limbo),
 * by a purge or shrink in place (fit_purge: the table unpublished, every
 * record taken, a grace period, the records moved within the block, the
 * table published again: a bounded shard at its bound has no room for a
 * second block) and by a move to the slab (fit_move_out: a record that
 * must become wide or bigger).  Removing one writes the tombstone over
 * its meta.
 *
 * Readers without the shard lock (sl__store_grab) load the table pointer
 * (acquire), the tags (a hint: a stale one leads to a meta that does not
 * match, or to a stop, and a key not found takes the sure way), then a
 * matching slot's meta (acquire), and compare the key bytes
 * before they take the record: a slot's key bytes are written before its
 * meta is published (release) and never change while it carries that
 * identity, and a tombstone is reused only after a grace period since it
 * was made (tomb_new) in an SL_LOCK_RECORD store, so a reader still
 * comparing the old key's bytes is done before they change.  In an
 * SL_LOCK_SHARD store nobody reads without the lock: reuse at once.
 *
 * Everything else stays as it was: variable states, long keys, wide
 * records and the overflow -- a fitted-kind record whose table could not
 * take it (a rebuild that did not fit the shard's room, or gave up on a
 * held record) -- live in the slab and the handle table.  sh->fit_slab
 * counts fitted-kind records in the slab: while it is 0, a key of a fitted
 * kind not in its fitted table is absent, and the handle table is not read.
 */
typedef struct fit_tbl {
    uint32_t cap;   /* slots */
    uint32_t rsize; /* bytes a slot: a whole record */
    uint32_t live;  /* slots holding a record (shard lock) */
    uint32_t tomb;  /* tombstones (shard lock) */
    uint32_t tagb;  /* bytes of tags before the slots: fit_tagb(cap) when made;
                       a shrink in place (fit_purge) keeps it, slots keep their place */
    uint32_t spread; /* 0, or 1..SL__FIT_SPREAD: a small table, spread (fit_ecap) */
    size_t blk;     /* the block's size for blk_cost / blk_free / limbo_add
                       (fit_bytes when made; less after a shrink in place) */
    uint8_t pad[32]; /* the tags, then the slots, start on a cache line */
} fit_tbl;

/* A slot's tag byte (fit_tags): 7 bits of its key's hash (fit_tag; not the
 * bits home_in or shard_of use) for a record, or one of these. */
#define SL__TAG_FREE 0x80u /* never used: a probe stops */
#define SL__TAG_TOMB 0xfeu /* removed: a probe goes on */
#define SL__TAG_PAD  0xffu /* past the last slot: neither */
#ifndef SL__FIT_LOAD_NUM
#define SL__FIT_LOAD_NUM 94u   /* live + tombstones stay within 0.94 of the slots */
#define SL__FIT_LOAD_DEN 100u
#define SL__FIT_TO_NUM   86u   /* a rebuild sizes the new block for a load of 0.86 */
#define SL__FIT_TO_DEN   100u
#endif

#define SL__FIT_MIN      16u   /* slots in a new fitted table */
#define SL__FIT_SMALL    4096u /* a table of fewer slots at least doubles */
#define SL__FIT_HARD_NUM 97u   /* bounded: live + tombstones stay within 0.97 (the live
                                  records within SL__FIT_LOAD): a purge in place turns
                                  the tombstones between back into free slots */
#define SL__FIT_SHRINK   8u    /* bounded: a table of which 1/8 or more are tombstones
                                  shrinks in place when the shard needs room */
#define SL__FIT_DIRTY    0x81u /* a purge's tag for a record not yet placed again */
#ifndef SL__FIT_SPREAD
#define SL__FIT_SPREAD   5u    /* log2: a spread table has up to 2^5 slots for each its
                                  load counts (fit_rebuild: as many as SL__FIT_SPREAD_MAX
                                  allows) */
#endif
#ifndef SL__FIT_SPREAD_MAX
#define SL__FIT_SPREAD_MAX   (64u * 1024) /* bytes: a table is spread only this small */
#endif
#define SL__FIT_SPREAD_SHARE 16u /* bounded: spread tables hold 1/16 of the budget at most */
#ifndef SL__FIT_BOUNDED
#define SL__FIT_BOUNDED  1     /* bounded stores use fitted tables too (docs/store.md,
                                  "Fitted tables", "Bounded stores"); 0: the old path */
#endif

/* The state bytes of each algorithm whose state has a fixed size (engine.c,
 * sl__state_len; test_store_fit checks they agree), 0 for the others. */
static const uint8_t fit_state_len[8] = {5, 0, 10, 0, 10, 10, 10, 0};

/* The fitted table (index) of records of algorithm `algo` with klen-byte
 * keys, or SL__FIT_NONE when they never live in one. */
static inline unsigned fit_idx(unsigned algo, size_t klen)
{
    /* (rec_size(klen, l) - SL__REC_MIN) / 2, rec_size's rounding and
     * minimum folded in: (klen + l - 7) / 2, at least 0 */
    int l = fit_state_len[algo & 7];
    if (!l || klen > SL__FIT_KEY_MAX) return SL__FIT_NONE;
    int v = (int)klen + l - 7;
    return v > 0 ? (unsigned)v >> 1 : 0;
}

static inline uint32_t fit_rsize_of(unsigned fi) { return SL__REC_MIN + 2 * fi; }
/* A fitted block's size, for blk_cost / blk_free / limbo_add: blocks of
 * SL__FIT_MAP bytes or more are mapped (SL__BLK_MAP), smaller ones malloc'd. */
#define SL__FIT_MAP 4096u
/* The bytes of tags a table of cap slots has: one a slot, rounded up to a
 * cache line (the slots start on one; words past the last slot: SL__TAG_PAD). */
static inline uint32_t fit_tagb(uint32_t cap) { return (cap + 63) & ~63u; }
static inline size_t fit_bytes(uint32_t cap, uint32_t rsize)
{
    size_t n = sizeof(fit_tbl) + fit_tagb(cap) + (size_t)cap * rsize;
    return n >= SL__FIT_MAP && n < SL__MAP_MIN ? n | SL__BLK_MAP : n;
}
static inline uint8_t *fit_tags(const fit_tbl *t) { return (uint8_t *)(uintptr_t)(t + 1); }
static inline uint8_t *fit_slot(const fit_tbl *t, uint32_t i)
{
    return fit_tags(t) + t->tagb + (size_t)i * t->rsize;
}
static inline uint32_t fit_index(const fit_tbl *t, const uint8_t *r)
{
    return (uint32_t)((size_t)(r - fit_slot(t, 0)) / t->rsize);
}
/* The slots table t's load counts: all of them, or for a spread table
 * (fit_spread_ok) one in 2^t->spread -- a record of one key then seldom
 * has another's near it. */
static inline uint32_t fit_ecap(const fit_tbl *t) { return t->cap >> t->spread; }
static inline uint8_t fit_tag(uint64_t hash) { return (uint8_t)((hash >> 40) & 0x7f); }
/* Sets slot i's tag in a published table (readers load the tags without
 * the lock: an atomic store). */
static inline void fit_tag_set(fit_tbl *t, uint32_t i, unsigned g)
{
    __atomic_store_n(&fit_tags(t)[i], (uint8_t)g, __ATOMIC_RELAXED);
}

/* Tags are read eight at a time, as one word (an atomic load: the lock
 * holder may be writing one of them), byte k of word w being slot 8w + k. */
#define SL__B1 0x0101010101010101ull
#define SL__B7 0x7f7f7f7f7f7f7f7full
static inline uint64_t fit_tag_word(const fit_tbl *t, uint32_t w)
{
    uint64_t x = __atomic_load_n((const uint64_t *)(const void *)(fit_tags(t) + 8 * (size_t)w),
                                 __ATOMIC_RELAXED);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}
/* The high bit of every byte of x that is 0, and no other bit: exact (no
 * borrow crosses a byte), so a stop is never seen where there is none. */
static inline uint64_t zero_bytes(uint64_t x) { return ~(((x & SL__B7) + SL__B7) | x | SL__B7); }
static inline int fit_live_meta(uint16_t m) { return m != SL__FREE_MARK && m != SL__TOMB_MARK; }

/* Counts a fitted-kind record into or out of the slab (read without the
 * lock by the quick way: an atomic store). */
static inline void fit_slab_add(sl__shard *sh, int d)
{
    __atomic_store_n(&sh->fit_slab, sh->fit_slab + (uint32_t)d, __ATOMIC_RELAXED);
}

/* The fitted table holding r (a record of sh), or NULL: r is in the slab. */
static fit_tbl *fit_holding(const sl__shard *sh, const uint8_t *r)
{
    unsigned fi = fit_idx(sl__rec_algo(r), sl__rec_klen(r));
    if (fi == SL__FIT_NONE || !sh->fit[fi]) return NULL;
    fit_tbl *t = sh->fit[fi];
    const uint8_t *b = fit_slot(t, 0);
    return r >= b && r < b + (size_t)t->cap * t->rsize ? t : NULL;
}

/*
 * The record of (meta, key) in fitted table t, or NULL: with or without the
 * shard lock (see above; without it, inside a read section, and the record
 * is trusted only once taken with its identity checked again).  The probe
 * run is walked on the tags, eight a word: only a slot whose tag is the
 * key's is read (one in 128 of the others), and the walk stops at the word
 * holding a free slot.  A match in that word past the free slot is read
 * too, harmlessly: a key sits before any free slot of its run (a slot is
 * freed only by a rebuild, which places every key again).  The table is
 * never full, so the walk ends.
 */
SL__HOT_INLINE uint8_t *fit_probe(const fit_tbl *t, uint64_t hash, uint16_t meta, const void *key,
                                  size_t klen)
{
    uint32_t cap = t->cap, rsize = t->rsize, i = home_in(hash, cap);
    uint8_t *base = fit_slot(t, 0), tag = fit_tag(hash);
    if (__atomic_load_n(&fit_tags(t)[i], __ATOMIC_RELAXED) == tag) { /* most keys sit at home */
        uint8_t *r = base + (size_t)i * rsize;
        uint16_t m = __atomic_load_n((uint16_t *)(void *)r, __ATOMIC_ACQUIRE);
        if ((m & SL__META_ID) == meta && key_eq(r + SL__REC_HDR, key, klen)) return r;
    }
    uint32_t w = i >> 3, nw = (cap + 7) >> 3;
    uint64_t want = tag * SL__B1, from = ~0ull << (i & 7) * 8;
    for (uint32_t n = 0; n <= nw; n++) {
        uint64_t x = fit_tag_word(t, w);
        uint64_t hit = zero_bytes(x ^ want) & from;
        while (hit) {
            uint8_t *r = base + (size_t)(w * 8 + ((unsigned)__builtin_ctzll(hit) >> 3)) * rsize;
            uint16_t m = __atomic_load_n((uint16_t *)(void *)r, __ATOMIC_ACQUIRE);
            if ((m & SL__META_ID) == meta && key_eq(r + SL__REC_HDR, key, klen)) return r;
            hit &= hit - 1;
        }
        if (zero_bytes(x ^ SL__TAG_FREE * SL__B1) & from) return NULL;
        from = ~0ull;
        if (++w == nw) w = 0;
    }
    return NULL;
}

/* The record of (meta, key) in the table, or NULL.  A slot whose tag
 * differs is passed without reading its record: a probe reads a record
 * that is not the key's with probability 1/64.  The table is never full
 * (it grows at 0.8), so the loop ends at an empty slot. */
SL__HOT_INLINE uint8_t *find_fi(sl__shard *sh, unsigned fi, uint64_t hash, uint16_t meta,
                                const void *key, size_t klen)
{
    if (fi != SL__FIT_NONE) {
        const fit_tbl *t = sh->fit[fi];
        if (t) {
            uint8_t *r = fit_probe(t, hash, meta, key, klen);
            if (r) return r;
        }
        if (!sh->fit_slab) return NULL;
    }
    const uint32_t *slot = sh->slot;
    uint32_t size = sh->size, tag = tag_of(hash), i = home(sh, hash);
    for (;;) {
        uint32_t v = slot[i];
        if (!v) return NULL;
        if ((v ^ tag) <= SL__H_MASK) {
            uint8_t *r = rec_at(sh, s_h(v));
            if ((sl__rec_meta(r) & SL__META_ID) == meta && key_eq(r + SL__REC_HDR, key, klen)) {
                sh->last_h = s_h(v);
                return r;
            }
        }
        if (++i == size) i = 0;
    }
}

/* find_fi for the key's fitted table (fit_idx). */
SL__HOT_INLINE uint8_t *find(sl__shard *sh, uint64_t hash, uint16_t meta, const void *key,
                             size_t klen)
{
    return find_fi(sh, fit_idx((meta >> 10) & 7, klen), hash, meta, key, klen);
}

/* The slot holding handle h (whose hash is `hash`), or UINT32_MAX. */
static uint32_t slot_of_handle(const sl__shard *sh, uint64_t hash, uint32_t h)
{
    uint32_t i = home(sh, hash);
    for (uint32_t n = 0; n < sh->size; n++) {
        uint32_t v = sh->slot[i];
        if (s_h(v) == h) return i;
        if (!v) break;
        if (++i == sh->size) i = 0;
    }
    return UINT32_MAX;
}

/* The slot holding record r (whose hash is `hash`), or UINT32_MAX. */
static uint32_t slot_of_rec(const sl__shard *sh, uint64_t hash, const uint8_t *r)
{
    uint32_t i = home(sh, hash);
    for (uint32_t n = 0; n < sh->size; n++) {
        uint32_t v = sh->slot[i];
        if (!v) break;
        if (rec_at(sh, s_h(v)) == r) return i;
        if (++i == sh->size) i = 0;
    }
    return UINT32_MAX;
}

/* Empties slot i and shifts the rest of its cluster back so that every
 * record stays reachable from its home.  Costs a hash per record moved past. */
static void slot_delete(sl__shard *sh, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        if (++j == sh->size) j = 0;
        uint32_t h = sh->slot[j];
        if (!h) break;
        uint32_t k = home(sh, rec_hash(sh, rec_at(sh, s_h(h))));
        /* h stays if its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        slot_set(sh, i, h);
        i = j;
    }
    slot_set(sh, i, 0);
}

/* Puts handle h (of a record whose hash is `hash`) in the first empty slot
 * from its home. */
static void slot_put(sl__shard *sh, uint64_t hash, uint32_t h)
{
    uint32_t i = home(sh, hash);
    while (sh->slot[i])
        if (++i == sh->size) i = 0;
    slot_set(sh, i, h | tag_of(hash));
}

/* What the bigger table costs if one more record needs it, else 0. */
static uint64_t grow_bytes(const sl__shard *sh)
{
    if ((uint64_t)(sh->hcount + 1) * 5 <= (uint64_t)sh->size * 4) return 0;
    return blk_cost(table_bytes(sh->size + sh->size / 2));
}

/* Rehashes into a table 1.5x bigger.  O(records): every key is hashed
 * again.  The new table is filled before it is published; readers still in
 * the old one find every key there or fall back to the sure way, and the
 * old one is retired, not freed (reclaim.h). */
static int table_grow(sl__shard *sh)
{
    if (sh->size > UINT32_MAX / 2) return -1;
    uint32_t old = sh->size, ns = old + old / 2;
    uint32_t *t = table_new(ns);
    if (!t) return -1;
    uint32_t *o = sh->slot;
    for (uint32_t i = 0; i < old; i++) {
        uint32_t v = o[i];
        if (!v) continue;
        uint32_t j = home_in(rec_hash(sh, rec_at(sh, s_h(v))), ns);
        while (t[j])
            if (++j == ns) j = 0;
        t[j] = v; /* same key: same tag */
    }
    /* Atomic stores: sl__store_grab and sl__store_prefetch read these two
     * without the lock. */
    __atomic_store_n(&sh->slot, t, __ATOMIC_RELEASE);
    __atomic_store_n(&sh->size, ns, __ATOMIC_RELAXED);
    sh->bytes += blk_cost(table_bytes(ns));
    limbo_add(sh, table_block(o), table_bytes(old));
    return 0;
}

/* ---- the slab ---------------------------------------------------------------- */

static void avail_link(sl__shard *sh, uint32_t pi)
{
    page *p = &sh->pages[pi];
    unsigned c = p->cls;
    p->prev = 0;
    p->next = sh->avail[c];
    if (p->next) sh->pages[p->next - 1].prev = pi + 1;
    sh->avail[c] = (uint16_t)(pi + 1);
    sh->availmap[c / 64] |= (uint64_t)1 << (c % 64);
    p->listed = 1;
}

static void avail_unlink(sl__shard *sh, uint32_t pi)
{
    page *p = &sh->pages[pi];
    unsigned c = p->cls;
    if (p->prev)
        sh->pages[p->prev - 1].next = p->next;
    else
        sh->avail[c] = (uint16_t)p->next;
    if (p->next) sh->pages[p->next - 1].prev = p->prev;
    if (!sh->avail[c]) sh->availmap[c / 64] &= ~((uint64_t)1 << (c % 64));
    p->listed = 0;
}

/* The smallest class >= c with a free record, or -1. */
static int avail_from(const sl__shard *sh, unsigned c)
{
    for (unsigned w = c / 64; w < (SL__NCLASS + 63) / 64; w++) {
        uint64_t m = sh->availmap[w];
        if (w == c / 64) m &= ~(uint64_t)0 << (c % 64);
        if (m) return (int)(w * 64 + (unsigned)__builtin_ctzll(m));
    }
    return -1;
}

/* Directory entries after it grows (double), when a new page needs it;
 * else 0. */
static uint32_t dir_grown(const sl__shard *sh)
{
    if (sh->punused || sh->npages < sh->pcap) return 0;
    return sh->pcap ? sh->pcap * 2 : 16;
}

/* What a new page of cap records of rsize bytes costs: its block, and the
 * bigger directory if it needs one (the old one then waits in the limbo,
 * still counted). */
static inline uint64_t page_cost(const sl__shard *sh, uint32_t cap, uint32_t rsize)
{
    uint32_t nc = dir_grown(sh);
    return blk_cost(page_blk_size(sh, (size_t)cap * rsize)) +
           (nc ? blk_cost((size_t)nc * sizeof(page)) : 0);
}

/* A new page of cap records of rsize bytes.  Returns its index + 1, or 0
 * when out of memory or directory entries. */
static uint32_t page_new(sl__shard *sh, uint32_t rsize, unsigned cls, uint32_t cap)
{
    uint32_t pi;
    if (sh->punused) {
        pi = sh->punused - 1;
    } else {
        if (sh->npages >= SL__MAX_PAGES) return 0;
        uint32_t nc = dir_grown(sh);
        if (nc) { /* a bigger copy; readers may hold the old */
            page *np = blk_new((size_t)nc * sizeof *np, 1);
            if (!np) return 0;
            if (sh->pcap) memcpy(np, sh->pages, (size_t)sh->pcap * sizeof *np);
            page *op = sh->pages;
            __atomic_store_n(&sh->pages, np, __ATOMIC_RELEASE);
            sh->bytes += blk_cost((size_t)nc * sizeof *np);
            if (op) limbo_add(sh, op, (size_t)sh->pcap * sizeof *op);
            sh->pcap = nc;
        }
        pi = sh->npages;
    }
    uint8_t *mem = page_blk_new(sh, (size_t)cap * rsize);
    if (!mem) return 0;
    /* Every record free until handed out: a reader that lands here through
     * a stale handle finds it held, never a key. */
    for (uint32_t k = 0; k < cap; k++) sl__st16(mem + (size_t)k * rsize, SL__FREE_MARK);
    if (sh->punused)
        sh->punused = sh->pages[pi].next;
    else
        sh->npages++;
    page *p = &sh->pages[pi];
    p->next = p->prev = 0;
    p->live = p->bump = p->free = p->listed = 0;
    p->zeroed = (size_t)cap * rsize >= SL__MAP_MIN; /* blk_new mapped it */
    p->cls = (uint16_t)cls;
    __atomic_store_n(&p->rsize, rsize, __ATOMIC_RELEASE);
    __atomic_store_n(&p->cap, (uint16_t)cap, __ATOMIC_RELEASE);
    __atomic_store_n(&p->mem, mem, __ATOMIC_RELEASE);
    sh->bytes += blk_cost(page_blk_size(sh, (size_t)cap * rsize));
    if (cls != SL__NOCLASS) {
        sh->npclass[cls]++;
        avail_link(sh, pi);
    }
    return pi + 1;
}

static void page_release(sl__shard *sh, uint32_t pi)
{
    page *p = &sh->pages[pi];
    if (p->listed) avail_unlink(sh, pi);
    if (p->cls != SL__NOCLASS) sh->npclass[p->cls]--;
    uint8_t *mem = p->mem;
    __atomic_store_n(&p->mem, NULL, __ATOMIC_RELEASE);
    p->next = sh->punused;
    sh->punused = pi + 1;
    limbo_add(sh, mem, page_blk_size(sh, (size_t)p->cap * p->rsize)); /* still counted */
}

/* Hands out a zeroed record of page pi (which has room). */
static uint32_t rec_take(sl__shard *sh, uint32_t pi)
{
    page *p = &sh->pages[pi];
    uint32_t idx;
    int fresh = 0;
    if (p->free) {
        idx = p->free - 1u;
        p->free = sl__ld16(p->mem + (size_t)idx * p->rsize + 2);
    } else {
        idx = p->bump++;
        fresh = p->zeroed;
    }
    if (++p->live == p->cap && p->listed) avail_unlink(sh, pi);
    /* All but the meta, which stays SL__FREE_MARK until the record is
     * given an identity (sl__shard_insert, sl__shard_resize).  A record
     * of a fresh mapped page is zero already: not writing it leaves the
     * pages of a large record that its state never touches unfaulted
     * (a new 64 KB sliding-buckets record: 2 pages, not 16). */
    if (!fresh) memset(p->mem + (size_t)idx * p->rsize + 2, 0, p->rsize - 2);
    return h_make(pi, idx);
}

/* Returns record h to its page, freeing the page when it empties. */
static void rec_give(sl__shard *sh, uint32_t h)
{
    uint32_t pi = h_page(h), idx = h_idx(h);
    page *p = &sh->pages[pi];
    uint8_t *r = p->mem + (size_t)idx * p->rsize;
    if (sh->last_h == h) sh->last_h = 0;
    sl__rec_meta_set(r, SL__FREE_MARK); /* held for good: readers pass it */
    if (--p->live == 0) {
        page_release(sh, pi);
        return;
    }
    sl__st16(r + 2, p->free);
    p->free = (uint16_t)(idx + 1);
    if (!p->listed && p->cls != SL__NOCLASS) avail_link(sh, pi);
}

static inline uint64_t room(const sl__shard *sh, uint64_t reserve)
{
    if (!sh->budget) return UINT64_MAX;
    uint64_t used = sh->bytes + reserve;
    return used < sh->budget ? sh->budget - used : 0;
}

/* Room for a fitted table's block. */
static inline uint64_t room_fit(const sl__shard *sh) { return room(sh, 0); }

/*
 * A record of at least rsize bytes without passing the budget, keeping
 * `reserve` bytes aside (a table about to grow): a free record of the class,
 * else a new page (smaller than planned if that is what fits), else a free
 * record of a bigger class.  `force` ignores the budget (one record).
 * Returns the handle, or 0.
 */
static uint32_t rec_alloc(sl__shard *sh, uint32_t rsize, uint64_t reserve, int force)
{
    uint64_t left = force ? UINT64_MAX : room(sh, reserve);
    if (rsize > SL__CLASS_MAX) {
        if (page_cost(sh, 1, rsize) > left) return 0;
        uint32_t p = page_new(sh, rsize, SL__NOCLASS, 1);
        return p ? rec_take(sh, p - 1) : 0;
    }
    unsigned c = (rsize - SL__REC_MIN) / 2;
    if (sh->avail[c]) return rec_take(sh, sh->avail[c] - 1);
    uint32_t shift = sh->npclass[c] < 6 ? sh->npclass[c] : 6;
    uint32_t target = SL__PAGE_MIN << shift;
    if (target > SL__PAGE_MAX) target = SL__PAGE_MAX;
    uint32_t cap = target / rsize ? target / rsize : 1;
    if (force) cap = 1;
    if (page_cost(sh, cap, rsize) > left) {
        int c2 = avail_from(sh, c + 1);
        if (c2 >= 0) return rec_take(sh, sh->avail[c2] - 1);
        /* a smaller page, as many records as fit (pages are below
         * SL__MAP_MIN: malloc'd, costing at most 24 bytes more) */
        uint64_t fixed = page_cost(sh, 0, rsize) - blk_cost(0) + 24;
        cap = left > fixed ? (uint32_t)((left - fixed) / rsize) : 0;
        if (cap > target / rsize) cap = target / rsize;
        while (cap && page_cost(sh, cap, rsize) > left) cap--;
        if (!cap) return 0;
    }
    uint32_t p = page_new(sh, rsize, c, cap);
    return p ? rec_take(sh, p - 1) : 0;
}

/* ---- dropping records ------------------------------------------------------- */

/* The shard's last record is gone: it gives back all but its table.  Its
 * pages are in the limbo; after the grace period (limbo_flush) no reader
 * holds a handle (every slot has been empty since before it began, and
 * nothing is added under the lock), so nobody reads the directory any
 * more: it is freed at once, and the next page starts a new one. */
static void shard_emptied(sl__shard *sh)
{
    if (!sh->pages) return;
    if (!limbo_flush(sh)) sl__reclaim_wait();
    sh->tomb_new = 0;
    blk_free(sh->pages, (size_t)sh->pcap * sizeof(page));
    sh->bytes -= blk_cost((size_t)sh->pcap * sizeof(page));
    __atomic_store_n(&sh->pages, NULL, __ATOMIC_RELEASE);
    sh->pcap = sh->npages = sh->punused = 0;
    sh->hand_pi = sh->hand_idx = 0;
}

static void free_ext(sl__shard *sh, uint8_t *r)
{
    uint8_t *st = sl__rec_state(r);
    void *buf;
    memcpy(&buf, st, sizeof buf);
    if (!buf) return;
    sl__ext_free(sh, buf, sl__ld32(st + 8));
    sl__st64(st, 0);
    sl__st32(st + 8, 0);
}

/* Removes the record h held in slot i; the caller holds the record's lock,
 * which goes with it. */
static void drop_slot(sl__shard *sh, uint32_t i, uint32_t h)
{
    uint8_t *r = rec_at(sh, h);
    if (sl__rec_has_ext(r)) free_ext(sh, r);
    if (fit_idx(sl__rec_algo(r), sl__rec_klen(r)) != SL__FIT_NONE) fit_slab_add(sh, -1);
    slot_delete(sh, i);
    rec_give(sh, h);
    sh->hcount--;
    sh->count--;
    if (!sh->count) shard_emptied(sh);
}

/* Counts a record dropped at level `lv` (sl__rec_restriction); `room`: to
 * make room (else by the expiry sweep on demand). */
static void count_drop(sl__shard *sh, int lv, int room)
{
    if (lv == SL__AT_REST) {
        sh->expired++;
        sh->evict_rest += (uint64_t)room;
        sh->starved = 0; /* keys are coming to rest: worth looking again */
        return;
    }
    sh->evictions++;
    sh->evict_limit += lv == SL__AT_LIMIT;
}

/* Evicts record h if it is at most at level max_lv at `now`, unless a
 * thread holds it right now (then it is in use: not a candidate).  Returns
 * 1 if evicted. */
static int evict_one(sl__shard *sh, uint32_t h, int64_t now, int max_lv)
{
    uint8_t *r = rec_at(sh, h);
    if (!rec_trylock(sh, r)) return 0;
    int lv = sl__rec_restriction(sh, r, now);
    uint32_t i = lv <= max_lv ? slot_of_handle(sh, rec_hash(sh, r), h) : UINT32_MAX;
    if (i == UINT32_MAX) { /* too restricted (no live record lacks a slot) */
        sl__rec_unlock(r);
        return 0;
    }
    drop_slot(sh, i, h);
    count_drop(sh, lv, 1);
    return 1;
}

/* Evicts every live record of page pi that nobody holds and that is at
 * most at level max_lv (the page is then freed if that was all of them).
 * At most 1024 records, each a hash and a probe: bounded, and done only
 * when no sampled record had a slot the new record fits in.  Returns the
 * number evicted. */
static uint32_t evict_page(sl__shard *sh, uint32_t pi, int64_t now, int max_lv)
{
    uint32_t n = 0; /* the shard may empty on the way: pages is then NULL */
    for (uint32_t idx = 0; sh->pages && sh->pages[pi].mem && idx < sh->pages[pi].bump; idx++) {
        const page *p = &sh->pages[pi];
        if (sl__rec_meta(p->mem + (size_t)idx * p->rsize) != SL__FREE_MARK)
            n += (uint32_t)evict_one(sh, h_make(pi, idx), now, max_lv);
    }
    return n;
}

static void victims_init(victims *v)
{
    memset(v, 0, sizeof *v);
    v->thin_live = UINT32_MAX;
}

/* How restricted a record is at `now`, as one number, lower = evicted
 * first: its level (sl__rec_restriction) in the top bits, then the time
 * until it comes to rest. */
static uint64_t rank_of(const sl__shard *sh, const uint8_t *r, int lv, int64_t now)
{
    int64_t at = sl__rec_reset_at(sh, r);
    uint64_t left = at > now ? (uint64_t)at - (uint64_t)now : 0;
    if (left >= (uint64_t)1 << 61) left = ((uint64_t)1 << 61) - 1;
    return (uint64_t)lv << 61 | left;
}

static inline int rank_level(uint64_t rank) { return (int)(rank >> 61); }

/* ---- fitted tables: adding, moving and dropping (shard lock held) ------------- */

static int rec_trylock_wait(const sl__shard *sh, uint8_t *r);
static uint32_t obtain(sl__shard *sh, uint32_t rsize, int adding, int64_t now, uint32_t keep);
static uint32_t try_alloc(sl__shard *sh, uint32_t rsize, int adding, int force);
static inline uint8_t *wide_at(const sl__shard *sh, uint32_t h);

/* A grace period: every reader that could see a tombstone's old key is done. */
static void grace(sl__shard *sh)
{
    sl__reclaim_wait();
    sh->tomb_new = 0;
}

/* Removes fitted record r of t, which the caller holds: a tombstone. */
static void fit_drop(sl__shard *sh, fit_tbl *t, uint8_t *r)
{
    sl__rec_meta_set(r, SL__TOMB_MARK);
    fit_tag_set(t, fit_index(t, r), SL__TAG_TOMB);
    t->live--;
    t->tomb++;
    sh->tomb_new = 1;
    sh->count--;
    if (!sh->count) shard_emptied(sh);
}

static void fit_publish(sl__shard *sh, unsigned fi, fit_tbl *t)
{
    __atomic_store_n(&sh->fit[fi], t, __ATOMIC_RELEASE);
}

/* The shard holds no record: its fitted tables, all tombstones, are
 * retired (memory goes back to the handle table alone).  Only where no
 * caller walks a table (sl__shard_remove, sl_store_expire). */
static void fit_release_all(sl__shard *sh)
{
    if (sh->count) return;
    for (unsigned fi = 0; fi < SL__NFIT; fi++) {
        fit_tbl *t = sh->fit[fi];
        if (!t) continue;
        fit_publish(sh, fi, NULL);
        __atomic_store_n(&sh->fit_cap[fi], 0, __ATOMIC_RELAXED);
        sh->fit_held -= blk_cost(t->blk);
        limbo_add(sh, t, t->blk);
    }
    sh->fit_hand_t = 0;
    sh->fit_hand_i = 0;
    limbo_flush(sh); /* an empty shard holds its handle table alone */
}

/* A fitted table's block of n bytes, zeroed: as blk_new, a mapped one's
 * pages populated at once (the rebuild writes every slot's meta: one call
 * instead of a fault per page). */
static void *fit_blk_new(size_t n)
{
    if (n >= SL__MAP_MIN) { /* SL__BLK_MAP too */
        void *p = mmap(NULL, n & ~SL__BLK_MAP, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    return blk_new(n, 1);
}

/* The fewest slots that hold `need` records within SL__FIT_LOAD. */
static inline uint64_t fit_mincap(uint64_t need)
{
    return need * SL__FIT_LOAD_DEN / SL__FIT_LOAD_NUM + 1;
}

/*
 * Whether fitted table fi of shard sh may be rebuilt spread, as a block of
 * scap slots of rsize bytes (`left`: room_fit): its block is small
 * (SL__FIT_SPREAD_MAX) and, in a bounded shard, fits in a quarter of the
 * room left, and with the shard's other spread tables within
 * 1/SL__FIT_SPREAD_SHARE of the budget.  Why: two threads deciding on
 * their own keys write records that in a dense table sit near each other:
 * their lines, and those the prefetchers bring along, go back and forth
 * between the cores at every decision (docs/store.md, "Spread small
 * tables": two threads on their own 1,000 keys of one store, 0.33-0.82 of
 * two stores dense, 0.91-0.98 spread 32x).  A big table is mostly not in
 * cache and stays dense (the bytes a key costs); a bounded shard short of
 * room gives the spread bytes back first (fit_free_room shrinks tables in
 * place, dense).  Shard lock held; O(SL__NFIT).
 */
static int fit_spread_ok(const sl__shard *sh, unsigned fi, uint64_t scap, uint32_t rsize,
                         uint64_t left)
{
    size_t bytes = scap > (1u << 20) ? SIZE_MAX : fit_bytes((uint32_t)scap, rsize);
    if (!SL__FIT_SPREAD || (bytes & ~SL__BLK_MAP) > SL__FIT_SPREAD_MAX) return 0;
    if (!sh->budget) return 1;
    uint64_t cost = blk_cost(bytes), held = cost;
    if (cost > left / 4) return 0;
    for (unsigned f = 0; f < SL__NFIT; f++)
        if (f != fi && sh->fit[f] && sh->fit[f]->spread) held += blk_cost(sh->fit[f]->blk);
    return held * SL__FIT_SPREAD_SHARE <= sh->budget;
}

/* The slots a rebuild of o (or a new table) gives for `need` records. */
static uint64_t fit_cap_for(const fit_tbl *o, uint32_t need)
{
    uint64_t mincap = fit_mincap(need);
    uint64_t ncap = (uint64_t)need * SL__FIT_TO_DEN / SL__FIT_TO_NUM + 1;
    uint64_t ocap = o ? fit_ecap(o) : 0;
    if (o && ocap < SL__FIT_SMALL && ncap < 2 * ocap && need > o->live) ncap = 2 * ocap;
    if (ncap < SL__FIT_MIN) ncap = SL__FIT_MIN;
    return ncap < mincap ? mincap : ncap;
}

/* The tags of slots k to k + 7 as a word, byte j being slot k + j (plain
 * loads: a table not yet published). */
static inline uint64_t fit_tags_at(const uint8_t *tags, uint32_t k)
{
    uint64_t x = sl__ld64(tags + k);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

/* The first free slot from slot k on (wrapping) of a table not yet
 * published, of cap slots and tagb bytes of tags, on the tags eight at a
 * time: first the eight from k (9 records in 10 of a rebuild find one
 * there: one branch, well predicted), then aligned words.  The tags past
 * the last slot are SL__TAG_PAD, never free.  The table must have a free
 * slot. */
static uint32_t fit_free_from(const uint8_t *tags, uint32_t tagb, uint32_t cap, uint32_t k)
{
    if (k + 8 <= tagb) {
        uint64_t e = zero_bytes(fit_tags_at(tags, k) ^ SL__TAG_FREE * SL__B1);
        if (e) return k + ((unsigned)__builtin_ctzll(e) >> 3);
        k = k + 8 < cap ? k + 8 : 0;
    }
    uint32_t w = k >> 3, nw = (cap + 7) >> 3;
    uint64_t from = ~0ull << (k & 7) * 8;
    for (;;) {
        uint64_t e = zero_bytes(fit_tags_at(tags, 8 * w) ^ SL__TAG_FREE * SL__B1) & from;
        if (e) return w * 8 + ((unsigned)__builtin_ctzll(e) >> 3);
        from = ~0ull;
        if (++w == nw) w = 0;
    }
}

/*
 * Rebuilds fitted table fi into a new block with room for `need` records
 * (sized for a load of SL__FIT_TO; tables under SL__FIT_SMALL slots at
 * least double) -- or, with !grow, with no more slots than it has (a
 * rebuild in place of its tombstones) -- which must fit the shard's room
 * beside the old block; a smaller one is taken if it still holds `need`
 * within the load (in a bounded shard: the shard's room, nothing kept
 * aside: a table at the bound is purged in place, fit_purge).  Every live record is
 * taken first (waiting a little for a holder, as clock_walk does); if one
 * stays held -- another thread deciding, or the caller's own
 * (sl_decide_all holds several) -- those taken are let go and nothing
 * changes.  Then each is copied to its new home, its old slot marked a
 * tombstone (held forever: a reader of the old block finds nothing and
 * takes the sure way), the new block published and the old one retired.
 * O(records): each key is hashed again.  0, or -1 (nothing changed).
 */
static int fit_rebuild(sl__shard *sh, unsigned fi, uint32_t need, int grow)
{
    fit_tbl *o = sh->fit[fi];
    uint32_t rsize = fit_rsize_of(fi);
    uint64_t mincap = fit_mincap(need);
    uint64_t ncap = fit_cap_for(o, need);
    uint64_t ocost = o ? blk_cost(o->blk) : 0;
    uint64_t left = room_fit(sh);
    unsigned spread = SL__FIT_SPREAD; /* as sparse as may be (fit_spread_ok) */
    while (spread && (!fit_spread_ok(sh, fi, ncap << spread, rsize, left) ||
                      (!grow && o && (mincap << spread) > o->cap)))
        spread--;
    ncap <<= spread;
    if (!grow) {
        if (!o || mincap > o->cap) return -1;
        if (ncap > o->cap) ncap = o->cap;
    }
    if (ncap > (1u << 28)) return -1;
    if (sh->budget && blk_cost(fit_bytes((uint32_t)ncap, rsize)) > left && limbo_flush(sh))
        left = room_fit(sh);
    if (blk_cost(fit_bytes((uint32_t)ncap, rsize)) > left) { /* the most that fits, dense */
        ncap >>= spread; /* (fit_spread_ok: a spread block fits; kept for the load's sake) */
        spread = 0;
        uint64_t fixed = sizeof(fit_tbl) + 64 + 32 + os_page(); /* + the tags' rounding */
        uint64_t c = left > fixed ? (left - fixed) / (rsize + 1) : 0;
        if (c < ncap) ncap = c;
        if (ncap < mincap || ncap < SL__FIT_MIN || blk_cost(fit_bytes((uint32_t)ncap, rsize)) > left)
            return -1;
    }
    uint32_t ocap = o ? o->cap : 0, i;
    for (i = 0; i < ocap; i++) { /* take every live record */
        uint8_t *r = fit_slot(o, i);
        if (fit_live_meta(sl__rec_meta(r)) && !rec_trylock_wait(sh, r)) break;
    }
    size_t nb = fit_bytes((uint32_t)ncap, rsize);
    fit_tbl *n = i == ocap ? fit_blk_new(nb) : NULL;
    if (!n) { /* let go of those taken */
        for (uint32_t j = 0; j < i; j++) {
            uint8_t *r = fit_slot(o, j);
            if (fit_live_meta(sl__rec_meta(r))) sl__rec_unlock(r);
        }
        return -1;
    }
    n->cap = (uint32_t)ncap;
    n->spread = spread;
    n->rsize = rsize;
    n->tagb = fit_tagb(n->cap);
    n->blk = nb;
    uint8_t *tags = fit_tags(n); /* not yet published: plain stores */
    memset(tags, SL__TAG_FREE, n->cap);
    memset(tags + n->cap, SL__TAG_PAD, n->tagb - n->cap);
    /* the headers' fields in locals: the byte stores below may alias them */
    uint32_t cap = n->cap, tagb = n->tagb, live = 0;
    uint8_t *to = fit_slot(n, 0), *from = o ? fit_slot(o, 0) : NULL;
    for (uint32_t j = 0; j < cap; j++) sl__st16(to + (size_t)j * rsize, SL__FREE_MARK);
    for (uint32_t j = 0; j < ocap; j++) {
        uint8_t *r = from + (size_t)j * rsize;
        uint16_t m = sl__rec_meta(r);
        if (!fit_live_meta(m)) continue;
        uint64_t hash = rec_hash(sh, r);
        uint32_t k = fit_free_from(tags, tagb, cap, home_in(hash, cap));
        tags[k] = fit_tag(hash);
        uint8_t *d = to + (size_t)k * rsize;
        memcpy(d + 2, r + 2, rsize - 2);
        sl__st16(d, (uint16_t)(m & ~SL__REC_LOCK)); /* published with the block */
        live++;
        sl__rec_meta_set(r, SL__TOMB_MARK); /* held for good */
    }
    n->live = live;
    fit_publish(sh, fi, n);
    __atomic_store_n(&sh->fit_cap[fi], n->cap, __ATOMIC_RELAXED);
    sh->bytes += blk_cost(nb);
    sh->fit_held += blk_cost(nb) - ocost;
    if (sh->fit_hand_t == fi) sh->fit_hand_i = 0;
    if (o) limbo_add(sh, o, o->blk);
    return 0;
}

/*
 * Rebuilds fitted table fi within its own block, with ncap <= cap slots:
 * ncap == cap turns every tombstone back into a free slot (a purge),
 * ncap < cap also gives the block's tail back (a shrink: the tail pages of
 * a mapped block are unmapped; slots keep their addresses and the tags
 * their place, SL__TAG_PAD past ncap; a malloc'd block, under
 * SL__FIT_MAP bytes, keeps its bytes).  No second block: what a bounded
 * shard at its bound can do.  Shard lock held.  Steps:
 *   1. detach: NULL is published for the table (and 0 slots for
 *      prefetching): a reader that finds no table takes the sure way,
 *      which waits for the shard lock the caller holds;
 *   2. every live record is taken (waiting a little for a holder, as
 *      fit_rebuild); if one stays held, those taken are let go, the table
 *      is published again and nothing changed (-1);
 *   3. a grace period: no reader is still in the block (grace);
 *   4. every record is placed again by the in-place algorithm for linear
 *      probing (abseil's DropDeletesWithoutResize), the tags serving as
 *      state: tombstones become free, records SL__FIT_DIRTY; for each dirty
 *      slot i, the first free or dirty slot j from the record's home in
 *      [0, ncap): i itself (placed where it is), a free one (moved there, i
 *      freed) or a dirty one (swapped: j placed, i processed again).  A
 *      placed slot never changes again, so no run gets a gap;
 *   5. the records are let go, the table published again (release).
 * O(cap), one hash a record; counts the bytes given back in bytes and
 * fit_held.  The live records must fit ncap within SL__FIT_LOAD.  0, or
 * -1 (nothing changed).
 */
static int fit_purge(sl__shard *sh, unsigned fi, uint32_t ncap)
{
    fit_tbl *t = sh->fit[fi];
    if (!t || ncap > t->cap || ncap < SL__FIT_MIN ||
        (uint64_t)t->live * SL__FIT_LOAD_DEN > (uint64_t)ncap * SL__FIT_LOAD_NUM)
        return -1;
    uint32_t cap = t->cap, rsize = t->rsize, i;
    fit_publish(sh, fi, NULL); /* 1 */
    __atomic_store_n(&sh->fit_cap[fi], 0, __ATOMIC_RELAXED);
    for (i = 0; i < cap; i++) { /* 2 */
        uint8_t *r = fit_slot(t, i);
        if (fit_live_meta(sl__rec_meta(r)) && !rec_trylock_wait(sh, r)) break;
    }
    if (i < cap) {
        for (uint32_t j = 0; j < i; j++) {
            uint8_t *r = fit_slot(t, j);
            if (fit_live_meta(sl__rec_meta(r))) sl__rec_unlock(r);
        }
        __atomic_store_n(&sh->fit_cap[fi], cap, __ATOMIC_RELAXED);
        fit_publish(sh, fi, t);
        return -1;
    }
    grace(sh); /* 3 */
    uint8_t *tags = fit_tags(t), buf[SL__FIT_RSIZE_MAX];
    for (i = 0; i < cap; i++) { /* 4: nobody else reads the block now */
        uint8_t *r = fit_slot(t, i);
        if (fit_live_meta(sl__rec_meta(r))) {
            tags[i] = SL__FIT_DIRTY;
        } else { /* a free slot's bytes are zero (fit_place) */
            tags[i] = SL__TAG_FREE;
            if (sl__rec_meta(r) != SL__FREE_MARK) memset(r + 2, 0, rsize - 2);
            sl__rec_meta_set(r, SL__FREE_MARK);
        }
    }
    for (i = 0; i < cap; i++) {
        /* each turn places one record: at most live turns */
        for (uint32_t turn = 0; tags[i] == SL__FIT_DIRTY && turn <= t->live; turn++) {
            uint8_t *r = fit_slot(t, i);
            uint64_t hash = rec_hash(sh, r);
            uint32_t j = home_in(hash, ncap);
            for (uint32_t n = 0; n < ncap && tags[j] != SL__TAG_FREE && tags[j] != SL__FIT_DIRTY;
                 n++)
                if (++j == ncap) j = 0;
            if (j == i) {
                tags[i] = fit_tag(hash);
                break;
            }
            uint8_t *d = fit_slot(t, j);
            if (tags[j] == SL__TAG_FREE) {
                memcpy(d, r, rsize);
                tags[j] = fit_tag(hash);
                tags[i] = SL__TAG_FREE;
                memset(r + 2, 0, rsize - 2);
                sl__rec_meta_set(r, SL__FREE_MARK);
                break;
            }
            memcpy(buf, d, rsize); /* j's record comes to i, dirty still */
            memcpy(d, r, rsize);
            memcpy(r, buf, rsize);
            tags[j] = fit_tag(hash);
        }
    }
    for (i = 0; i < ncap; i++) /* 5 */
        if (tags[i] != SL__TAG_FREE) sl__rec_unlock(fit_slot(t, i));
    memset(tags + ncap, SL__TAG_PAD, t->tagb - ncap);
    t->tomb = 0;
    if (ncap < cap) {
        t->cap = ncap;
        t->spread = 0; /* fit_purge's callers size ncap for a dense table */
        if (t->blk >= SL__MAP_MIN) { /* mapped (SL__BLK_MAP too): unmap the tail */
            size_t pg = os_page(), nb = sizeof(fit_tbl) + t->tagb + (size_t)ncap * rsize;
            size_t ob = (t->blk & ~SL__BLK_MAP) + pg - 1, keep = nb + pg - 1;
            ob -= ob % pg;
            keep -= keep % pg;
            if (keep < ob) munmap((uint8_t *)t + keep, ob - keep);
            uint64_t before = blk_cost(t->blk);
            t->blk = nb | SL__BLK_MAP;
            sh->bytes -= before - blk_cost(t->blk);
            sh->fit_held -= before - blk_cost(t->blk);
        }
    }
    if (sh->fit_hand_t == fi) sh->fit_hand_i = 0;
    sh->fit_purges++;
    __atomic_store_n(&sh->fit_cap[fi], t->cap, __ATOMIC_RELAXED);
    fit_publish(sh, fi, t);
    return 0;
}

/* Bounded shard: gives back the bytes of tombstones -- records at rest
 * dropped by the sweep or to make room for another record size -- from
 * every table whose slots are SL__FIT_SHRINK-th or more tombstones: each
 * shrinks in place (fit_purge) to the slots its records need at the
 * rebuild load (fit_cap_for).  O(cap) a table, paid back by the
 * tombstones' records, each dropped once.  1 if any bytes came back. */
static int fit_shrink_some(sl__shard *sh)
{
    int got = 0;
    for (unsigned fi = 0; sh->budget && fi < SL__NFIT; fi++) {
        fit_tbl *t = sh->fit[fi];
        if (!t || t->blk < SL__MAP_MIN || (uint64_t)t->tomb * SL__FIT_SHRINK < t->cap) continue;
        uint64_t ncap = fit_cap_for(NULL, t->live), before = sh->bytes;
        if (ncap < t->cap && fit_purge(sh, fi, (uint32_t)ncap) == 0 && sh->bytes < before) got = 1;
    }
    return got;
}

/* Whether fitted table t may hold one more live record within
 * SL__FIT_LOAD (a bounded shard's limit on live records, tombstone reused
 * or not: so one record dropped always makes room for one). */
static inline int fit_live_ok(const fit_tbl *t)
{
    return (uint64_t)(t->live + 1) * SL__FIT_LOAD_DEN <= (uint64_t)fit_ecap(t) * SL__FIT_LOAD_NUM;
}

/* Whether fitted table t may take one more record in a free slot: live +
 * tombstones stay within SL__FIT_LOAD; in a bounded shard, the live records
 * within it and live + tombstones within SL__FIT_HARD (fit_place purges
 * when only the tombstones stand in the way: at least 3 % of the slots). */
static inline int fit_free_ok(const sl__shard *sh, const fit_tbl *t)
{
    uint64_t cap = fit_ecap(t), live = t->live, tomb = t->tomb;
    if (!sh->budget) return (live + tomb + 1) * SL__FIT_LOAD_DEN <= cap * SL__FIT_LOAD_NUM;
    return fit_live_ok(t) && (live + tomb + 1) * SL__FIT_LOAD_DEN <= cap * SL__FIT_HARD_NUM;
}

/*
 * A slot for a new record of this hash in fitted table fi: the first
 * tombstone of its probe run (after a grace period if one was made since
 * the last, in an SL_LOCK_RECORD shard), else its first free slot if the
 * table stays within its load (fit_free_ok; in a bounded shard a
 * tombstone too only while the live records stay within SL__FIT_LOAD,
 * fit_live_ok); else, with `rebuild`: in a bounded shard where only
 * tombstones stand in the way, one in the table purged in place
 * (fit_purge); else one in a rebuilt block: a bigger one, or, when a tenth
 * of its slots are tombstones (made elsewhere than in this key's run:
 * records at rest dropped by a sweep), one as big without them.  The slot
 * is counted live, its bytes after the
 * meta are zero and its meta is still a mark (held): the caller fills it,
 * then publishes the meta.  NULL if there is none.
 */
static uint8_t *fit_place(sl__shard *sh, unsigned fi, uint64_t hash, int rebuild)
{
    fit_tbl *t = sh->fit[fi];
    if (t) { /* the run's first tombstone or empty slot, on the tags */
        uint32_t cap = t->cap, i = home_in(hash, cap), w = i >> 3, nw = (cap + 7) >> 3;
        uint64_t from = ~0ull << (i & 7) * 8;
        for (uint32_t n = 0; n <= nw; n++) {
            uint64_t x = fit_tag_word(t, w);
            uint64_t tomb = zero_bytes(x ^ SL__TAG_TOMB * SL__B1) & from;
            uint64_t empty = zero_bytes(x ^ SL__TAG_FREE * SL__B1) & from;
            if (n == nw) { /* back at the home word: only what is before home */
                tomb &= ~(~0ull << (i & 7) * 8);
                empty &= ~(~0ull << (i & 7) * 8);
            }
            from = ~0ull;
            if (!(tomb | empty)) {
                if (++w == nw) w = 0;
                continue;
            }
            uint64_t first = (tomb | empty) & -(tomb | empty);
            uint32_t j = w * 8 + ((unsigned)__builtin_ctzll(first) >> 3);
            uint8_t *r = fit_slot(t, j);
            if (first & tomb) {
                if (sh->budget && !fit_live_ok(t)) break;
                if (sh->quick && sh->tomb_new) {
                    grace(sh);
                    sh->tomb_graces++;
                }
                t->tomb--;
                t->live++;
                memset(r + 2, 0, t->rsize - 2);
                fit_tag_set(t, j, fit_tag(hash));
                return r;
            }
            if (!fit_free_ok(sh, t)) break;
            t->live++;
            fit_tag_set(t, j, fit_tag(hash));
            return r; /* never used: zero */
        }
    }
    if (!rebuild) return NULL;
    if (t && sh->budget && t->tomb && fit_live_ok(t) &&
        fit_purge(sh, fi, t->cap) == 0) /* only tombstones stand in the way */
        return fit_place(sh, fi, hash, 0);
    uint32_t need = t ? t->live + 1 : 1;
    if (fit_rebuild(sh, fi, need, 1) == 0 ||
        (t && (uint64_t)t->tomb * 10 >= fit_ecap(t) && fit_rebuild(sh, fi, need, 0) == 0))
        return fit_place(sh, fi, hash, 0);
    return NULL;
}

/*
 * Moves fitted record r of t (the caller's, held or, in an SL_LOCK_SHARD
 * store, found under the shard lock) to a slab record of want >= t->rsize
 * bytes, made wide with clock c if `wide`; `now` for reclaiming.  The new
 * record has r's meta and bytes (the rest zero), its handle goes in the
 * handle table before r becomes a tombstone.  Returns the new handle, or
 * 0 (sh->fail) with r unchanged.
 */
static uint32_t fit_move_out(sl__shard *sh, fit_tbl *t, uint64_t hash, uint8_t *r, uint32_t want,
                             int wide, int64_t c, int64_t now)
{
    uint16_t m = sl__rec_meta(r);
    sl__rec_meta_set(r, (uint16_t)(m | SL__REC_LOCK)); /* nothing reclaims it meanwhile */
    uint32_t nh = obtain(sh, want, 1, now, SL__H_FIT);
    if (!nh) {
        sl__rec_meta_set(r, m);
        return 0;
    }
    uint8_t *nr = rec_at(sh, nh);
    memcpy(nr + 2, r + 2, t->rsize - 2);
    if (wide) {
        sl__st32(nr + 4, sl__clock_mark(sh->epoch));
        sl__st64(wide_at(sh, nh), (uint64_t)c);
    }
    sl__rec_meta_set(nr, m); /* held as r was */
    slot_put(sh, hash, nh);
    sh->hcount++;
    fit_slab_add(sh, 1);
    sh->count++;      /* fit_drop counts r out */
    fit_drop(sh, t, r);
    sh->last_h = nh;
    return nh;
}

static inline int rest_lately(const sl__shard *sh);

/* The shard's next random number (xorshift64; shard lock held). */
static inline uint64_t shard_rng(sl__shard *sh)
{
    uint64_t x = sh->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return sh->rng = x;
}

/* Samples table t: SL__SAMPLE random slots, each the first live record of
 * up to 8 from there.  Drops the first found at rest (returns 1); notes
 * the least restricted others in v (may be NULL: then the sample stops at
 * the first restricted one's slot).  Bounded work. */
static int fit_sample_in(sl__shard *sh, fit_tbl *t, int64_t now, victims *v)
{
    for (uint32_t k = 0; k < SL__SAMPLE; k++) {
        uint64_t x = shard_rng(sh);
        uint32_t i = home_in(x, t->cap);
        for (uint32_t n = 0; n < 8; n++) {
            uint8_t *r = fit_slot(t, i);
            if (++i == t->cap) i = 0;
            if (!fit_live_meta(sl__rec_meta(r))) continue;
            if (!rec_trylock(sh, r)) break;
            int lv = sl__rec_restriction(sh, r, now);
            if (lv == SL__AT_REST) {
                fit_drop(sh, t, r);
                count_drop(sh, SL__AT_REST, 1);
                return 1;
            }
            uint64_t rank = v ? rank_of(sh, r, lv, now) : 0;
            if (v && (!v->frec || rank < v->frank)) {
                v->frec = r;
                v->frank = rank;
            }
            sl__rec_unlock(r);
            break;
        }
    }
    return 0;
}

/*
 * A place for a new record of fitted table fi (state room: the table's):
 * a fitted slot (returned), or a slab record (*hp) when the table cannot
 * take it -- its rebuild does not fit the shard's room, or gave up on a
 * held record -- which keeps the bound: a store near it keeps its fitted
 * tables as they are and puts new keys in the slab.  When neither has
 * room, it reclaims: records at rest in the key's probe run, then as
 * obtain does (the whole shard's at rest first; the slab's restricted
 * records), each step trying the run's tombstones again, and last, with
 * SL_FULL_EVICT, the least restricted record of the run.  NULL with *hp 0:
 * sh->fail says why.
 */
static uint8_t *fit_insert(sl__shard *sh, unsigned fi, uint64_t hash, int64_t now, uint32_t *hp)
{
    *hp = 0;
    sh->fail = SL_ENOMEM;
    uint8_t *r = fit_place(sh, fi, hash, 1);
    if (r) return r;
    uint32_t rsize = fit_rsize_of(fi);
    if ((*hp = try_alloc(sh, rsize, 1, 0)) != 0 || !sh->budget) return NULL;
    /* no room left: a record at rest of this table, if a sample finds one
     * (bounded work: obtain's sweep looks further; only while the sweep has
     * met some lately: a flood of restricted keys skips the sample) */
    if (sh->fit[fi] && rest_lately(sh) && fit_sample_in(sh, sh->fit[fi], now, NULL) &&
        (r = fit_place(sh, fi, hash, 1)))
        return r;
    sh->fit_want_fi = fi + 1;
    sh->fit_want_hash = hash;
    uint32_t h = obtain(sh, rsize, 1, now, 0);
    sh->fit_want_fi = 0;
    if (h == SL__H_FIT) return sh->fit_got;
    *hp = h;
    return NULL;
}

static uint64_t sweep(sl__shard *sh, int64_t now, uint64_t max, uint32_t keep, uint64_t *seen,
                      int room);

/* The expiry sweep's part over fitted tables (sweep): from its own hand,
 * up to `max` live records, dropping those at rest; steps over at most
 * 32 * max free slots and tombstones.  Returns the number dropped; *seen
 * counts records examined. */
static uint64_t fit_sweep(sl__shard *sh, int64_t now, uint64_t max, uint64_t *seen, int room)
{
    uint64_t n = 0, dropped = 0, skip = max > UINT64_MAX / 32 ? UINT64_MAX : max * 32;
    unsigned ti = sh->fit_hand_t, visited = 0;
    uint32_t i = sh->fit_hand_i;
    while (n < max && skip && sh->count > sh->hcount && visited <= SL__NFIT) {
        if (ti >= SL__NFIT) { /* a pass is over */
            ti = 0;
            sh->fit_prev_drops = sh->fit_pass_drops;
            sh->fit_pass_drops = 0;
        }
        fit_tbl *t = sh->fit[ti];
        if (!t || i >= t->cap) {
            ti++;
            i = 0;
            visited++;
            continue;
        }
        uint8_t *r = fit_slot(t, i++);
        if (!fit_live_meta(sl__rec_meta(r))) {
            skip--;
            continue;
        }
        n++;
        if (!rec_trylock(sh, r)) continue; /* being decided on: not at rest */
        if (sl__rec_restriction(sh, r, now) == SL__AT_REST) {
            fit_drop(sh, t, r);
            count_drop(sh, SL__AT_REST, room);
            sh->fit_pass_drops++;
            dropped++;
        } else {
            sl__rec_unlock(r);
        }
    }
    sh->fit_hand_t = (uint8_t)ti;
    sh->fit_hand_i = i;
    *seen = n;
    return dropped;
}

/* One sample among the fitted records (sample): the first live record at or
 * after a random slot of a table chosen in proportion to its records.
 * Dropped if at rest (returns 1); a restricted one is noted in v: as
 * v->frec if its table is the one a fitted insert wants (fit_want_fi; its
 * slot is room for that key), as v->fany in any case (fit_free_room). */
static int fit_sample(sl__shard *sh, uint64_t x, int64_t now, victims *v)
{
    uint64_t u = (x >> 20) % (sh->count - sh->hcount);
    for (unsigned fi = 0; fi < SL__NFIT; fi++) {
        fit_tbl *t = sh->fit[fi];
        if (!t) continue;
        if (u >= t->live) {
            u -= t->live;
            continue;
        }
        uint32_t i = home_in(x, t->cap);
        for (uint32_t n = 0; n < t->cap; n++) {
            uint8_t *r = fit_slot(t, i);
            if (++i == t->cap) i = 0;
            if (!fit_live_meta(sl__rec_meta(r))) continue;
            if (!rec_trylock(sh, r)) return 0;
            int lv = sl__rec_restriction(sh, r, now);
            if (lv != SL__AT_REST) {
                /* a candidate only in the table a fitted insert wants:
                 * elsewhere its slot frees no memory */
                uint64_t rank = rank_of(sh, r, lv, now);
                if (sh->fit_want_fi == fi + 1 && (!v->frec || rank < v->frank)) {
                    v->frec = r;
                    v->frank = rank;
                }
                if (!v->fany || rank < v->fany_rank) {
                    v->fany = r;
                    v->fany_rank = rank;
                }
                sl__rec_unlock(r);
                return 0;
            }
            fit_drop(sh, t, r);
            count_drop(sh, SL__AT_REST, 1);
            return 1;
        }
        return 0;
    }
    return 0;
}

/*
 * The expiry sweep: examines up to `max` live records in slab order from
 * the hand, dropping each one at rest at `now` (never `keep`).
 * Slab order, not table order: the records it drops are spread evenly over
 * the table (dropping a run of table slots while inserts land everywhere
 * would pack the rest of the table into one long cluster), and it reads
 * memory sequentially.  Visits each page at most once per call, and steps
 * over at most 32 * max free records.  `room`: sweeping to make room
 * (counted so).  Returns the number dropped; *seen (may be NULL) counts
 * records examined.
 */
static uint64_t slab_sweep(sl__shard *sh, int64_t now, uint64_t max, uint32_t keep, uint64_t *seen,
                           int room)
{
    uint64_t n = 0, dropped = 0, skip = max > UINT64_MAX / 32 ? UINT64_MAX : max * 32;
    uint32_t pi = sh->hand_pi, idx = sh->hand_idx, visited = 0;
    while (n < max && sh->count && visited <= sh->npages && skip) {
        if (pi >= sh->npages) {
            pi = idx = 0;
            sh->prev_drops = sh->pass_drops;
            sh->pass_drops = 0;
            if (!sh->npages) break;
        }
        const page *p = &sh->pages[pi];
        if (!p->mem || idx >= p->bump) {
            pi++;
            idx = 0;
            visited++;
            continue;
        }
        uint8_t *r = p->mem + (size_t)idx * p->rsize;
        uint32_t h = h_make(pi, idx++);
        if (sl__rec_meta(r) == SL__FREE_MARK) {
            skip--;
            continue;
        }
        n++;
        /* A held record is being decided on: not at rest, skip it. */
        if (h == keep || !rec_trylock(sh, r)) continue;
        uint32_t i;
        if (sl__rec_restriction(sh, r, now) == SL__AT_REST &&
            (i = slot_of_handle(sh, rec_hash(sh, r), h)) != UINT32_MAX) {
            drop_slot(sh, i, h); /* may free the page: p->mem is then NULL */
            count_drop(sh, SL__AT_REST, room);
            sh->pass_drops++;
            dropped++;
        } else {
            sl__rec_unlock(r);
        }
    }
    sh->hand_pi = pi;
    sh->hand_idx = idx;
    if (seen) *seen = n;
    return dropped;
}

/* The expiry sweep over the slab (its share of `max`, in proportion to its
 * records) and the fitted tables (the rest). */
static uint64_t sweep(sl__shard *sh, int64_t now, uint64_t max, uint32_t keep, uint64_t *seen,
                      int room)
{
    uint64_t smax = !sh->count               ? 0
                    : max <= UINT32_MAX        ? max * sh->hcount / sh->count
                                               : max / sh->count * sh->hcount;
    if (sh->hcount && !smax) smax = 1;
    uint64_t sn = 0, fn = 0;
    uint64_t dropped = slab_sweep(sh, now, smax, keep, &sn, room);
    if (sh->count > sh->hcount) dropped += fit_sweep(sh, now, max - sn, &fn, room);
    if (seen) *seen = sn + fn;
    return dropped;
}

/*
 * Samples up to SL__SAMPLE records at random table slots (the first record
 * at or after each), noting in v the eviction candidates for a record of
 * `want` bytes; records at rest found on the way are dropped (returned).
 * Random slots sample records evenly whatever their size or age.
 */
static uint64_t sample(sl__shard *sh, int64_t now, uint32_t want, uint32_t keep, victims *v)
{
    uint64_t dropped = 0;
    uint32_t keep_pi = keep ? h_page(keep) : UINT32_MAX;
    for (uint32_t k = 0; k < SL__SAMPLE && sh->count; k++) {
        uint64_t x = shard_rng(sh);
        if (sh->count > sh->hcount && (x >> 40) % sh->count >= sh->hcount) {
            dropped += (uint64_t)fit_sample(sh, x, now, v); /* a fitted record, in proportion */
            continue;
        }
        if (!sh->hcount) continue;
        uint32_t i = home(sh, x), h;
        while ((h = sh->slot[i]) == 0)
            if (++i == sh->size) i = 0;
        h = s_h(h);
        if (h == keep) continue;
        uint8_t *r = rec_at(sh, h);
        if (!rec_trylock(sh, r)) continue; /* in use right now: not a candidate */
        int lv = sl__rec_restriction(sh, r, now);
        if (lv == SL__AT_REST) {
            drop_slot(sh, i, h);
            count_drop(sh, lv, 1);
            dropped++;
            continue;
        }
        uint64_t rank = rank_of(sh, r, lv, now);
        int ext = sl__rec_has_ext(r) && sl__ld32(sl__rec_state(r) + 8) > 0;
        sl__rec_unlock(r);
        const page *p = &sh->pages[h_page(h)];
        if (p->rsize >= want && (!v->fit || rank < v->fit_rank)) {
            v->fit = h;
            v->fit_rank = rank;
        }
        if (ext && (!v->ext || rank < v->ext_rank)) {
            v->ext = h;
            v->ext_rank = rank;
        }
        if (!v->best || rank_level(rank) < rank_level(v->best_rank)) {
            v->thin = 0; /* a lower level: thin pages are judged at it */
            v->thin_live = UINT32_MAX;
        }
        if (!v->best || rank < v->best_rank) {
            v->best = h;
            v->best_rank = rank;
        }
        if (rank_level(rank) == rank_level(v->best_rank) && p->live < v->thin_live &&
            h_page(h) != keep_pi) {
            v->thin = h;
            v->thin_live = p->live;
        }
    }
    /* A fitted insert whose table is full: SL__SAMPLE of that table's own
     * records too, so that its least restricted is chosen among as many
     * as the slab's (fit_sample lands there only in proportion). */
    if (sh->fit_want_fi && sh->fit[sh->fit_want_fi - 1] && sh->count)
        dropped += (uint64_t)fit_sample_in(sh, sh->fit[sh->fit_want_fi - 1], now, v);
    return dropped;
}

/*
 * A bounded shard whose slab found no victim (its memory is in fitted
 * tables): gives back the bytes of fitted table slots.  First every table
 * whose free and tombstone slots beyond what its live records need
 * (within SL__FIT_LOAD) make a page or more shrinks in place to that
 * (nothing evicted); else, with SL_FULL_EVICT and a fitted candidate
 * v->fany, the records at most at its level in `want` bytes and two pages'
 * worth of slots from it are evicted (as evict_page does for a slab page) and its table
 * shrinks.  1 if bytes came back.
 */
static int fit_free_room(sl__shard *sh, const victims *v, uint64_t want, int64_t now)
{
    uint64_t before = sh->bytes;
    for (unsigned fi = 0; fi < SL__NFIT; fi++) {
        fit_tbl *t = sh->fit[fi];
        if (!t || t->blk < SL__MAP_MIN) continue;
        uint64_t mincap = fit_mincap(t->live);
        if (mincap < SL__FIT_MIN) mincap = SL__FIT_MIN;
        if (mincap < t->cap && (t->cap - mincap) * t->rsize >= os_page())
            fit_purge(sh, fi, (uint32_t)mincap);
    }
    if (sh->bytes < before || sh->deny || !v->fany) return sh->bytes < before;
    fit_tbl *t = fit_holding(sh, v->fany);
    if (!t || t->blk < SL__MAP_MIN) return 0;
    int lv = rank_level(v->fany_rank);
    uint64_t n = (want + 2 * os_page()) / t->rsize + 1;
    uint32_t i = fit_index(t, v->fany);
    unsigned fi = fit_idx(sl__rec_algo(v->fany), sl__rec_klen(v->fany));
    for (uint32_t k = 0; k < n && k < t->cap; k++) {
        uint8_t *r = fit_slot(t, i);
        if (++i == t->cap) i = 0;
        if (!fit_live_meta(sl__rec_meta(r)) || !rec_trylock(sh, r)) continue;
        int l = sl__rec_restriction(sh, r, now);
        if (l > lv) {
            sl__rec_unlock(r);
            continue;
        }
        fit_drop(sh, t, r);
        count_drop(sh, l, 1);
    }
    uint64_t mincap = fit_mincap(t->live);
    if (mincap < SL__FIT_MIN) mincap = SL__FIT_MIN;
    if (mincap < t->cap) fit_purge(sh, fi, (uint32_t)mincap);
    return sh->bytes < before;
}

/*
 * Makes room by evicting, at the level of the least restricted candidate
 * of v: for a record (want > 0), the least restricted whose slot it fits
 * in, else the page with the fewest live records, emptied of what is no
 * more restricted than that level (a new page, maybe a bigger page
 * directory, must fit: freeing a ring or a smaller slot may never make
 * that much room); for memory (want == 0), the least restricted holding an
 * external buffer, else that page.
 * `shrink_table`: the table cannot grow, so the least restricted record of
 * all will do.  Only with SL_FULL_EVICT: a SL_FULL_DENY shard never
 * evicts a restricted record.  Returns 0 if nothing was evicted: v holds
 * no candidate, or the one chosen is held by a thread right now (the
 * caller samples again).
 */
static int evict(sl__shard *sh, const victims *v, uint32_t want, int shrink_table, int64_t now)
{
    if (sh->deny) return 0;
    /* the fitted insert's table, when its candidate is the least
     * restricted (else the slab's goes, and the key may take its room) */
    if (v->frec && (!v->best || v->frank <= v->best_rank)) {
        uint8_t *r = v->frec;
        fit_tbl *t = fit_holding(sh, r);
        if (!t || !fit_live_meta(sl__rec_meta(r)) || !rec_trylock(sh, r)) return 0;
        int lv = sl__rec_restriction(sh, r, now);
        if (lv > rank_level(v->frank)) {
            sl__rec_unlock(r);
            return 0;
        }
        fit_drop(sh, t, r);
        count_drop(sh, lv, 1);
        return 1;
    }
    if (!v->best) return 0;
    int lv = rank_level(v->best_rank);
    if (shrink_table) return evict_one(sh, v->best, now, lv);
    if (want && v->fit && rank_level(v->fit_rank) == lv) return evict_one(sh, v->fit, now, lv);
    if (!want && v->ext && rank_level(v->ext_rank) == lv) return evict_one(sh, v->ext, now, lv);
    if (v->thin && evict_page(sh, h_page(v->thin), now, lv) > 0) return 1;
    return evict_one(sh, v->best, now, lv);
}

/* Whether the sweep dropped records at rest in its current or previous
 * pass (over the slab or the fitted tables): more are likely ahead. */
static inline int rest_lately(const sl__shard *sh)
{
    return sh->pass_drops || sh->prev_drops || sh->fit_pass_drops || sh->fit_prev_drops;
}

/* A record of rsize bytes within budget, growing the table first if
 * `adding` a record needs it; if what stands in the way is memory in the
 * limbo, takes it back and tries again.  Returns the handle or 0. */
static uint32_t try_alloc(sl__shard *sh, uint32_t rsize, int adding, int force)
{
    if (sh->fit_want_fi) { /* a fitted insert reclaiming: a tombstone of its run will do */
        uint8_t *f = fit_place(sh, sh->fit_want_fi - 1, sh->fit_want_hash, 1);
        if (f) {
            sh->fit_got = f;
            return SL__H_FIT;
        }
    }
    for (int again = 0;; again = 1) {
        uint64_t tb = adding ? grow_bytes(sh) : 0;
        uint32_t h = 0;
        if (force || tb <= room(sh, 0)) {
            h = rec_alloc(sh, rsize, tb, force);
            if (h && tb && table_grow(sh) != 0) {
                rec_give(sh, h);
                h = 0;
            }
        }
        if (h || again || !(limbo_flush(sh) | fit_shrink_some(sh))) return h;
    }
}

/*
 * Finds a record of rsize bytes, reclaiming as the file comment says; keep
 * (a handle, or 0) is never dropped.  Records at rest go first: while the
 * sweep drops some, or dropped some during the hand's current or previous
 * pass over the table (so more are likely ahead), up to half the rounds only
 * sweep; a restricted record is evicted only when sweeping finds nothing
 * (at once when nothing has come to rest lately: the steady state costs one
 * round), and only by a SL_FULL_EVICT shard; a SL_FULL_DENY shard that
 * finds no room says SL_EFULL (sh->fail), and when it met only restricted
 * records, until a record is dropped, tries one round per call.  If nothing else lives in the shard
 * the record is placed even beyond the budget (a key bigger than the
 * budget still works, alone).
 */
static uint32_t obtain(sl__shard *sh, uint32_t rsize, int adding, int64_t now, uint32_t keep)
{
    sh->fail = SL_ENOMEM;
    uint32_t h = try_alloc(sh, rsize, adding, 0);
    if (h || !sh->budget) return h;
    int rounds = sh->starved ? 1 : SL__ROUNDS, declined = 0;
    if (sh->fit_want_fi && !sh->starved) {
        /* A fitted insert (fit_insert): a record at rest dropped elsewhere
         * than in its probe run gives it no room, yet what is at rest must
         * go before anything restricted: sweep on while the sweep finds
         * some, up to two passes (each record is dropped once: O(1)
         * amortized a drop). */
        uint64_t limit = 2 * (uint64_t)sh->count / SL__SCAN + SL__ROUNDS;
        for (uint64_t k = 0; k < limit; k++) {
            uint64_t dropped = sweep(sh, now, SL__SCAN, keep, NULL, 1);
            if (dropped && (h = try_alloc(sh, rsize, adding, 0)) != 0) return h;
            if (!dropped && !rest_lately(sh)) break;
        }
    }
    for (int round = 0; round < rounds; round++) {
        uint64_t dropped = sweep(sh, now, SL__SCAN, keep, NULL, 1);
        if (dropped && (h = try_alloc(sh, rsize, adding, 0)) != 0) return h;
        if (round < rounds / 2 && (dropped || rest_lately(sh))) continue;
        victims v;
        victims_init(&v);
        if (sample(sh, now, rsize, keep, &v)) {
            if ((h = try_alloc(sh, rsize, adding, 0)) != 0) return h;
            continue;
        }
        declined |= sh->deny && v.best;
        int table_full = adding && grow_bytes(sh) > room(sh, 0);
        int ev = evict(sh, &v, rsize, table_full, now);
        if ((!ev && !v.best) || round >= rounds - 4) /* the slab gives no room: the fitted tables' */
            if (sh->budget && sh->count > sh->hcount && fit_free_room(sh, &v, rsize, now)) ev = 1;
        if (!ev && !dropped && !v.best && !v.frec && !v.fany) break;
        if ((h = try_alloc(sh, rsize, adding, 0)) != 0) return h;
    }
    if (sh->count == (keep ? 1u : 0u)) return try_alloc(sh, rsize, adding, 1);
    if (declined || sh->deny) {
        /* A SL_FULL_DENY shard that found no room refuses for room
         * (SL_EFULL) whatever stood in the way: restricted records, or
         * room freed by keys at rest in pages of other record sizes (it
         * said SL_ENOMEM then, a bound reached, not the system's memory) */
        sh->fail = SL_EFULL;
        if (declined) sh->starved = 1;
        sh->refused++;
    }
    return 0;
}

/* ---- the store.h interface ------------------------------------------------- */

uint8_t *sl__shard_find(sl__shard *sh, uint64_t hash, unsigned kind, const void *key, size_t klen)
{
    if (klen == 0 || klen > SL_MAX_KEY) return NULL;
    uint8_t *r = find(sh, hash, sl__meta_id(kind, klen), key, klen);
    if (r) rec_lock(sh, r);
    return r;
}

/* ---- reading without the shard lock -----------------------------------------
 *
 * sl__store_grab and sl__store_prefetch_rec read the table, the directory and
 * pages while the shard's lock holder may change them.  What they read is
 * never freed under them (reclaim.h: they read inside a critical section,
 * and replaced tables, directories and pages are retired), but it may be
 * stale: a slot may name a record since dropped, a directory entry may
 * have been given to a new page.  So:
 *   - a directory entry is read as mem, then rsize and cap, then mem again:
 *     equal, they belong together (a page's mem is set last when it is made
 *     and cleared first when it is freed; its block cannot come back while
 *     the reader runs);
 *   - a record is trusted only once held and seen to carry the key: a free
 *     record is held for good (SL__FREE_MARK), so a reader never takes one;
 *   - a key not found is not absent: the caller takes the sure way.
 * The directory is read after the slot that led to it, so it is at least as
 * new as that slot's handle (directories only grow).
 */

/*
 * Starts loading the table slot where a key of this hash is first looked
 * for, without the lock; returns the table's size.  The table pointer and
 * size may be those of a table just replaced (read with atomic loads,
 * written so by table_grow): a prefetch of a stale address is harmless --
 * it never faults and changes nothing but the cache -- so the address is
 * formed as an integer, never dereferenced.
 *
 * Issued before the lock is taken because the lock's atomic exchange is a
 * full fence on x86: no load after it starts until the previous
 * decision's stores have drained, so a slot miss begun only under the lock
 * is paid after everything the previous call did (over 1M keys, per
 * call, gcra 4.3 -> 4.9 M/s; token-bucket and fixed-window within the
 * noise; docs/status.md).
 *
 * `lines`: how many lines of slots from the home slot's.  A record sits
 * (1/(1 - a) - 1)/2 slots past its home on average (linear probing at
 * load a: ~4.5 slots, ~150 bytes, at the 0.86-0.94 a fitted table keeps),
 * so a decision asks for SL__PF_LINES (3) and its miss overlaps the tag's
 * read and the lock: 1M-key decisions 1.08-1.13x on this VM (docs/store.md,
 * "Prefetching the run").  A look-ahead (sl__store_prefetch) asks for
 * one: its second stage prefetches the exact record.  A table of fewer
 * than SL__PF_MIN_CAP slots (~140 KB of 34-byte slots: an L2's share) is
 * in cache when it is decided on often, and the lines around a record
 * there are other keys' -- of other threads, whose next write must then
 * take them back: such tables get one line (two threads on their own
 * 1,000 keys of one store: 0.79 -> 0.82 of two stores, medians of 6).
 */
static inline uint32_t prefetch_home(const sl__shard *sh, unsigned fi, uint64_t hash, unsigned lines)
{
    if (fi != SL__FIT_NONE) { /* the home tag, and the home slot: most records are near */
        uintptr_t t = (uintptr_t)__atomic_load_n(&sh->fit[fi], __ATOMIC_RELAXED);
        uint32_t cap = __atomic_load_n(&sh->fit_cap[fi], __ATOMIC_RELAXED);
        if (t) {
            uintptr_t home = home_in(hash, cap), tags = t + sizeof(fit_tbl);
            uintptr_t r = tags + fit_tagb(cap) + home * fit_rsize_of(fi);
            __builtin_prefetch((const void *)(tags + home));
            if (cap < SL__PF_MIN_CAP) lines = 1; /* a small table: in cache */
            for (unsigned q = 0; q < lines; q++) __builtin_prefetch((const void *)(r + 64 * q));
            return cap;
        }
    }
    uintptr_t slot = (uintptr_t)__atomic_load_n(&sh->slot, __ATOMIC_RELAXED);
    uint32_t size = __atomic_load_n(&sh->size, __ATOMIC_RELAXED);
    __builtin_prefetch((const void *)(slot + (uintptr_t)home_in(hash, size) * sizeof(uint32_t)));
    return size;
}

/* The record a handle names in directory dir, or NULL if the entry is
 * being changed or the handle is stale for it. */
static inline uint8_t *rec_seen(const sl__shard *sh, uint32_t h)
{
    const page *p = &__atomic_load_n(&sh->pages, __ATOMIC_ACQUIRE)[h_page(h)];
    uint8_t *mem = __atomic_load_n(&p->mem, __ATOMIC_ACQUIRE);
    if (!mem) return NULL;
    uint32_t rsize = __atomic_load_n(&p->rsize, __ATOMIC_ACQUIRE);
    uint32_t cap = __atomic_load_n(&p->cap, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&p->mem, __ATOMIC_RELAXED) != mem || h_idx(h) >= cap) return NULL;
    return mem + (size_t)h_idx(h) * rsize;
}

/* A walk of a key's probe run without the shard lock, inside a read
 * section: walk_next gives the next record whose slot's tag matches the
 * key's, or NULL at the run's end or at a stale directory entry (either
 * way: stop). */
typedef struct run_walk {
    const sl__shard *sh;
    const uint32_t *slot;
    uint32_t size, tag, i, n;
} run_walk;

static inline void walk_start(run_walk *w, const sl__shard *sh, uint64_t hash)
{
    w->sh = sh;
    w->slot = __atomic_load_n(&sh->slot, __ATOMIC_ACQUIRE);
    w->size = w->slot[-1];
    w->tag = tag_of(hash);
    w->i = home_in(hash, w->size);
    w->n = 0;
}

static inline uint8_t *walk_next(run_walk *w)
{
    while (w->n++ < w->size) {
        uint32_t v = __atomic_load_n(&w->slot[w->i], __ATOMIC_ACQUIRE);
        if (!v) return NULL;
        if (++w->i == w->size) w->i = 0;
        if ((v ^ w->tag) <= SL__H_MASK) return rec_seen(w->sh, s_h(v));
    }
    return NULL;
}

/* Takes r if it carries identity `meta`, waiting a little for a holder.
 * 1: taken, *got its meta (held); 0: not this identity (or free); -1: held
 * too long. */
static inline int rec_grab(uint8_t *r, uint16_t meta, uint16_t *got)
{
    for (unsigned n = 0;; n++) {
        uint16_t m = sl__rec_meta(r);
        if ((m & SL__META_ID) != meta) return 0;
        if (!(m & SL__REC_LOCK)) {
            *got = (uint16_t)(m | SL__REC_LOCK);
            if (rec_cas(r, m)) return 1;
            continue;
        }
        if (n >= SL__GRAB_SPINS) return -1;
        cpu_relax();
    }
}

SL__HOT_INLINE sl__grabbed grab(sl_store *s, unsigned kind, const void *key, size_t klen,
                                uint64_t hash, uint16_t *metap, unsigned lines)
{
    uint16_t meta = sl__meta_id(kind, klen);
    uint8_t *r, *got = NULL;
    const sl__shard *sh = shard_of(s, hash);
    run_walk w;
    unsigned fi = fit_idx(kind, klen);
    if (lines) prefetch_home(sh, fi, hash, lines); /* the record's miss under the tag's read */
    sl__read_begin();
    if (fi != SL__FIT_NONE) {
        const fit_tbl *t = __atomic_load_n(&sh->fit[fi], __ATOMIC_ACQUIRE);
        if (t && (r = fit_probe(t, hash, meta, key, klen)) != NULL) {
            /* its key bytes matched: take it if it still has the identity */
            if (rec_grab(r, meta, metap) > 0) got = r;
            goto out; /* else moved, removed or held: the sure way */
        }
        if (!__atomic_load_n(&sh->fit_slab, __ATOMIC_RELAXED)) goto out;
    }
    walk_start(&w, sh, hash);
    while ((r = walk_next(&w)) != NULL) {
        int rc = rec_grab(r, meta, metap);
        if (rc < 0) break;
        if (rc == 0) continue;
        if (key_eq(r + SL__REC_HDR, key, klen)) {
            got = r;
            break;
        }
        sl__rec_unlock(r);
    }
out:
    sl__read_end();
    return (sl__grabbed){got, sh}; /* the clock: sl__grabbed_clock (store.h) */
}

sl__grabbed sl__store_grab(sl_store *s, unsigned kind, const void *key, size_t klen, uint64_t hash,
                           uint16_t *metap)
{
    return grab(s, kind, key, klen, hash, metap, 0); /* a look-ahead prefetched it */
}

sl__grabbed sl__store_grab_key(sl_store *s, unsigned kind, const void *key, size_t klen,
                               uint64_t *hashp, uint16_t *metap)
{
    *hashp = sl__siphash13_v(&s->sip[kind & 7], key, klen);
    return grab(s, kind, key, klen, *hashp, metap, SL__PF_LINES);
}


SL__HOT_INLINE uint8_t *lookup(sl_store *s, unsigned kind, const void *key, size_t klen,
                               uint64_t hash, sl__shard **shp, unsigned lines)
{
    sl__shard *sh = shard_of(s, hash);
    *shp = sh;
    unsigned fi = fit_idx(kind, klen);
    prefetch_home(sh, fi, hash, lines); /* the slot's miss before the lock's fence */
    shard_lock(sh);
    uint8_t *r = find_fi(sh, fi, hash, sl__meta_id(kind, klen), key, klen);
    if (r && sh->quick) rec_lock(sh, r); /* else: the shard lock is enough */
    return r;
}

uint8_t *sl__store_lookup(sl_store *s, unsigned kind, const void *key, size_t klen, sl__shard **shp,
                          uint64_t *hashp)
{
    *hashp = sl__siphash13_v(&s->sip[kind & 7], key, klen);
    return lookup(s, kind, key, klen, *hashp, shp, SL__PF_LINES);
}

sl__found sl__store_lookup_pair(sl_store *s, unsigned kind, const void *key, size_t klen,
                                uint64_t *hashp)
{
    sl__found f;
    *hashp = sl__siphash13_v(&s->sip[kind & 7], key, klen);
    f.rec = lookup(s, kind, key, klen, *hashp, &f.sh, SL__PF_LINES);
    return f;
}

uint8_t *sl__store_lookup_hashed(sl_store *s, unsigned kind, const void *key, size_t klen,
                                 uint64_t hash, sl__shard **shp)
{
    return lookup(s, kind, key, klen, hash, shp, 1); /* a look-ahead prefetched it */
}

/* Stage one of a look-ahead: no lock (prefetch_home). */
uint64_t sl__store_prefetch(sl_store *s, unsigned kind, size_t klen, uint64_t hash)
{
    return (uint64_t)prefetch_home(shard_of(s, hash), fit_idx(kind, klen), hash, 1) * s->nshards;
}

/* Stage two: without the lock (as sl__store_grab reads), walks the key's
 * probe run (its slots are in cache by now) and prefetches, for writing,
 * the first and last bytes of every record whose tag matches -- without
 * reading them: reading the record here would wait for it, which is what
 * looking ahead avoids. */
void sl__store_prefetch_rec(sl_store *s, unsigned kind, size_t klen, uint64_t hash)
{
    const uint8_t *r;
    run_walk w;
    const sl__shard *sh = shard_of(s, hash);
    unsigned fi = fit_idx(kind, klen);
    sl__read_begin();
    if (fi != SL__FIT_NONE) { /* the first slot of the run whose tag is the key's */
        const fit_tbl *t = __atomic_load_n(&sh->fit[fi], __ATOMIC_ACQUIRE);
        if (t) {
            uint32_t i = home_in(hash, t->cap), wi = i >> 3, nw = (t->cap + 7) >> 3;
            uint64_t want = fit_tag(hash) * SL__B1, from = ~0ull << (i & 7) * 8;
            for (uint32_t n = 0; n < 4 && n < nw; n++) { /* a few words: this is a hint */
                uint64_t x = fit_tag_word(t, wi);
                uint64_t hit = zero_bytes(x ^ want) & from;
                if (hit) {
                    const uint8_t *f = fit_slot(t, wi * 8 + ((unsigned)__builtin_ctzll(hit) >> 3));
                    __builtin_prefetch(f, 1);
                    __builtin_prefetch(f + t->rsize - 1, 1);
                    break;
                }
                if (zero_bytes(x ^ SL__TAG_FREE * SL__B1) & from) break;
                from = ~0ull;
                if (++wi == nw) wi = 0;
            }
        }
        if (!__atomic_load_n(&sh->fit_slab, __ATOMIC_RELAXED)) {
            sl__read_end();
            return;
        }
    }
    walk_start(&w, sh, hash);
    while ((r = walk_next(&w)) != NULL) {
        __builtin_prefetch(r, 1);
        __builtin_prefetch(r + 63, 1); /* most records end in the next line */
    }
    sl__read_end();
}

/* ---- loose shards (store.h) ---------------------------------------------------
 * A record of a loose shard is its own allocation, or lives in room its
 * owner offered (sl__shard_loose_room): its clock (int64, store.h: a loose
 * record's clock is always kept whole, its header word the mark of its
 * shard's E, 0: SL__LOOSE_MARK), a
 * uint32 word of its state room -- LOOSE_LENT set when it lives in the
 * owner's room, which the shard never frees nor grows (a record that
 * outgrows it moves to an allocation of its own) -- then the record
 * (2-byte aligned, as in a page): SL__LOOSE_PREFIX bytes before it, as
 * many as the 64-bit clock took in the header before (a lone record is as
 * big as it was).  A room whose word is 0 is free: the shard zeroes it
 * when its record leaves.  No table, no budget: its owner finds it, and
 * the shard only counts external buffers. */

#define LOOSE_PREFIX SL__LOOSE_PREFIX
#define SL__LOOSE_MARK 0xffffffffu /* sl__clock_mark(0): a loose shard's E stays 0 */
#define LOOSE_LENT   ((uint32_t)1 << 31)

static uint32_t loose_word(const uint8_t *r) { return sl__ld32(r - 4); }

static size_t loose_cap(const uint8_t *r) { return loose_word(r) & ~LOOSE_LENT; }

int sl__shard_loose_lent(const uint8_t *r) { return (loose_word(r) & LOOSE_LENT) != 0; }

static uint8_t *loose_insert(sl__shard *sh, unsigned kind, const void *key, size_t klen,
                             size_t state_len, int64_t now_ms)
{
    size_t need = LOOSE_PREFIX + SL__REC_HDR + klen + state_len;
    uint32_t word = (uint32_t)state_len; /* <= SL__STATE_MAX */
    uint8_t *b;
    uint8_t *room = sh->loose_room;
    if (room && need <= sh->loose_room_len && loose_word(room + LOOSE_PREFIX) == 0) {
        b = room; /* the owner's free room, once */
        word = (uint32_t)(sh->loose_room_len - (need - state_len)) | LOOSE_LENT;
        memset(b, 0, sh->loose_room_len);
        sh->loose_room = NULL;
    } else if ((b = calloc(1, need)) == NULL) {
        return NULL;
    }
    uint8_t *r = b + LOOSE_PREFIX;
    sl__st32(r - 4, word);
    sl__loose_set_clock(r, now_ms);
    sl__st32(r + 4, SL__LOOSE_MARK);
    memcpy(r + SL__REC_HDR, key, klen);
    sl__rec_meta_set(r, (uint16_t)(sl__meta_id(kind, klen) | SL__REC_LOCK)); /* held */
    return r;
}

static uint8_t *loose_resize(uint8_t *r, size_t new_state_len)
{
    size_t cap = loose_cap(r), head = SL__REC_HDR + sl__rec_klen(r);
    if (new_state_len <= cap) { /* fits where it is: clear what is no longer state */
        memset(r + head + new_state_len, 0, cap - new_state_len);
        return r;
    }
    uint8_t *b;
    if (sl__shard_loose_lent(r)) { /* out of the owner's room, which stays its: free */
        if ((b = malloc(LOOSE_PREFIX + head + new_state_len)) == NULL) return NULL;
        memcpy(b, r - LOOSE_PREFIX, LOOSE_PREFIX + head + cap); /* clock, word, record */
        memset(r - LOOSE_PREFIX, 0, LOOSE_PREFIX);
    } else if ((b = realloc(r - LOOSE_PREFIX, LOOSE_PREFIX + head + new_state_len)) == NULL) {
        return NULL;
    }
    sl__st32(b + LOOSE_PREFIX - 4, (uint32_t)new_state_len);
    memset(b + LOOSE_PREFIX + head + cap, 0, new_state_len - cap);
    return b + LOOSE_PREFIX;
}

void sl__shard_loose_room(sl__shard *sh, void *room, size_t bytes)
{
    sh->loose_room = room;
    sh->loose_room_len = room ? bytes : 0;
}

uint8_t *sl__shard_loose_roomed(const void *room)
{
    uint8_t *r = (uint8_t *)room + LOOSE_PREFIX;
    return loose_word(r) ? r : NULL;
}

sl__shard *sl__shard_loose_new(uint64_t max_bytes)
{
    sl__shard *sh = aligned_alloc(64, sizeof *sh);
    if (!sh) return NULL;
    memset(sh, 0, sizeof *sh);
    sh->loose = 1;
    sh->quick_max = INT64_MIN; /* its records are wide: never the quick way; E stays 0 */
    sh->loose_rec_max = max_bytes ? max_bytes / SL_STORE_REC_SHARE : UINT64_MAX;
    return sh;
}

uint64_t sl__shard_loose_rec_max(const sl__shard *sh) { return sh->loose_rec_max; }

void sl__shard_loose_free(sl__shard *sh) { free(sh); }

uint64_t sl__shard_loose_bytes(const sl__shard *sh) { return sh->ext; }

/* ---- the clock (store.h, "The clock"; docs/store.md) ---------------------------
 *
 * A narrow record keeps its clock's low 32 bits, a wide one the mark of
 * its shard's E (sl__clock_mark(E), the word that decodes to the window's
 * top) and the whole clock in the last 8 bytes of its room (the page's
 * rsize).  E moves forward by clock_walk, which makes every record the
 * move leaves behind wide (or drops it, at rest), then rewrites every wide
 * record's mark for the new E, then stores the new E.  The walk gives up
 * -- E stays, nothing is wrong, the record being decided is made wide
 * alone -- when a record is held by another thread for longer than a
 * short wait, or memory for a wide record cannot be found; it gives up
 * only before it rewrites a mark.  It is
 * O(records in the shard), so a shard walks at most once per walk_wait
 * clock moves past E + SL__CLOCK_QUICK (a walk sets it to half its
 * records): with a real clock E moves once per ~12.4 days
 * (SL__CLOCK_QUICK - SL__CLOCK_KEEP), and callers' times jumping about
 * cost O(1) amortized a decision.  A record made wide stays in its bigger
 * room; a decision at a time back in the window writes it narrow again
 * (set_clock_wide), and its state keeps the room it had. */

/* Sets E and Q (sl__quick_max(e)) together: E first, then Q, both
 * release, so a reader that loads Q and then E (acquire) sees an E no
 * older than its Q's.  Outside a walk, only where no record can be held
 * by anyone: a new shard (E = 0), an empty one (its window starts afresh,
 * possibly back). */
static inline void epoch_set(sl__shard *sh, int64_t e)
{
    __atomic_store_n(&sh->epoch, e, __ATOMIC_RELEASE);
    __atomic_store_n(&sh->quick_max, sl__quick_max(e), __ATOMIC_RELEASE);
}

/* r's handle (r a live record of the table), or 0. */
static uint32_t rec_handle(const sl__shard *sh, const uint8_t *r)
{
    uint32_t h = sh->last_h;
    if (h && sh->pages[h_page(h)].mem && rec_at(sh, h) == r) return h;
    uint32_t i = slot_of_rec(sh, rec_hash(sh, r), r);
    return i == UINT32_MAX ? 0 : s_h(sh->slot[i]);
}

/* Where record h (wide) keeps its clock: the last 8 bytes of its room. */
static inline uint8_t *wide_at(const sl__shard *sh, uint32_t h)
{
    return rec_at(sh, h) + sh->pages[h_page(h)].rsize - SL__CLOCK_WIDE_BYTES;
}

int64_t sl__rec_clock_wide(const sl__shard *sh, const uint8_t *r)
{
    if (sh->loose) return sl__loose_clock(r);
    uint32_t h = rec_handle(sh, r);
    return h ? (int64_t)sl__ld64(wide_at(sh, h)) : 0;
}

void sl__rec_set_clock_wide(sl__shard *sh, uint8_t *r, int64_t t)
{
    if (sh->loose) {
        sl__loose_set_clock(r, t);
        return;
    }
    uint32_t h = rec_handle(sh, r);
    if (!h) return;
    if (!sl__rec_wide(sh, r)) { /* cannot be: sl__shard_clock_room(t) made it wide */
        abort();
    }
    if (sl__clock_fits(sl__shard_epoch(sh), t)) {        /* back in the window: narrow again */
        memset(wide_at(sh, h), 0, SL__CLOCK_WIDE_BYTES); /* state room again, zero */
        sl__st32(r + 4, (uint32_t)t);
        return;
    }
    sl__st64(wide_at(sh, h), (uint64_t)t);
}

/* Moves narrow record h (held; hash its hash) to a room 8 bytes bigger and
 * makes it wide, its clock c; `now` for reclaiming.  Returns the new
 * handle (held, meta as h's), or 0 (sh->fail) with h unchanged. */
static uint32_t widen(sl__shard *sh, uint64_t hash, uint32_t h, int64_t c, int64_t now)
{
    uint8_t *r = rec_at(sh, h);
    uint32_t have = sh->pages[h_page(h)].rsize;
    uint32_t nh = obtain(sh, have + SL__CLOCK_WIDE_BYTES, 0, now, h);
    if (!nh) return 0;
    uint8_t *nr = rec_at(sh, nh);
    memcpy(nr + 2, r + 2, have - 2);
    sl__st32(nr + 4, sl__clock_mark(sh->epoch));
    sl__st64(wide_at(sh, nh), (uint64_t)c);
    sl__rec_meta_set(nr, sl__rec_meta(r));             /* held, as r is */
    uint32_t i = slot_of_handle(sh, hash, h);          /* reclaiming may have moved slots */
    slot_set(sh, i, nh | (sh->slot[i] & ~SL__H_MASK)); /* same key: same tag */
    rec_give(sh, h);
    sh->last_h = nh;
    return nh;
}

/* Takes r, waiting a little for another holder (a decision holds a record
 * ~20-100 ns); 0 when it is still held, maybe by the caller itself. */
static int rec_trylock_wait(const sl__shard *sh, uint8_t *r)
{
    for (unsigned n = 0; n < 16 * SL__GRAB_SPINS; n++) {
        if (rec_trylock(sh, r)) return 1;
        cpu_relax();
    }
    return 0;
}

/* Takes live record r, waiting for its holder however long (shard lock
 * held): for clock_walk's second pass, when the only holders left are
 * quick ways that read Q = INT64_MIN and let go at once. */
static void rec_lock_live(const sl__shard *sh, uint8_t *r) { rec_lock(sh, r); }

/*
 * Moves E to t - SL__CLOCK_KEEP if it can (shard lock held): every live
 * record whose clock would fall below it is made wide, or in a bounded
 * store dropped if at rest at t (it answers as a fresh key would; an
 * unbounded store keeps every key: docs/store.md, "A dropped key forgets
 * its clock"), and every wide record's mark is rewritten for the new E.
 * *keepp (a record the caller holds, or NULL) is never dropped; it is made
 * wide too if it must (then *keepp changes).  Gives up when a record is
 * held by someone else or a wide one finds no memory: what was done stays
 * (a record made wide has the mark of the E in force, which stays), E and
 * Q are as before.
 *
 * Why lock-free readers (the quick way, SL_LOCK_RECORD: sl__store_grab)
 * never read a word against the wrong E.  A reader takes the record's
 * lock (acquire), then loads Q (acquire), then E, then the word; it
 * writes the word only if t <= Q, and lets the record go (release).  The
 * walk, holding the shard lock (so no sure way runs, and no E, Q, record
 * or mark changes but by it):
 *   1. stores Q = INT64_MIN (release): from then on a reader that sees it
 *      writes nothing and takes the sure way, which waits for the shard lock;
 *   2. pass one: takes every record's lock (a bounded wait, else it gives
 *      up), reads its word under the old E, makes wide (mark of the old E)
 *      or drops the ones the new E leaves behind;
 *   3. if it gave up: stores the old Q back (release) and stops; every
 *      word is right under the E still in force;
 *   4. pass two: takes every record's lock again, waiting as long as it
 *      takes, and rewrites each old mark as the new E's mark;
 *   5. stores E' (release), then Q' (release).
 * A reader holding record r when the walk takes r in pass one took it
 * before (the lock orders them): if it read the old Q, it also read the
 * old E (E' is stored in 5, after the walk took r, which was after the
 * reader let r go, and the reader's loads came before that), and it read
 * and wrote r's word before the walk reads it.  A reader that takes r
 * after the walk let it go in pass one or two synchronizes with that
 * release, so it reads INT64_MIN (stored in 1, before) or, once 5 is
 * done, Q' -- and a Q' read with acquire makes E' and every rewritten
 * mark visible to it.  So after pass one nobody but INT64_MIN readers
 * (who hold a record only to let it go) takes a record: pass two's wait
 * is short, and it cannot be for the caller's own records (a batch's,
 * sl_decide_all), since pass one would have given up on those.  The
 * marks of pass one's new wide records and pass two's rewrites are made
 * under the record lock, read by readers only after they took it.  A
 * narrow record's word never equals the new mark: its clock c is in
 * [E', E + 2^32 - 1), and c = E' - 1 (mod 2^32) would put it at E' - 1 or
 * at E' + 2^32 - 1 or above.  With SL_LOCK_SHARD no reader runs without
 * the shard lock; the same steps are merely plain.
 */
static void clock_walk(sl__shard *sh, int64_t t, uint8_t **keepp)
{
    int64_t e = sh->epoch, e2 = t - SL__CLOCK_KEEP;
    if (e2 <= e || !sh->count) return;
    if (sh->walk_wait) {
        sh->walk_wait--;
        return;
    }
    uint32_t mark = sl__clock_mark(e), mark2 = sl__clock_mark(e2);
    uint8_t *keep_r = keepp ? *keepp : NULL;
    uint32_t keep = keep_r && !fit_holding(sh, keep_r) ? rec_handle(sh, keep_r) : 0;
    uint16_t keep_meta = keep_r ? sl__rec_meta(keep_r) : 0;
    if (keep_r && !sh->quick) /* SL_LOCK_SHARD: mark it held, so nothing drops it */
        sl__rec_meta_set(keep_r, (uint16_t)(keep_meta | SL__REC_LOCK));
    __atomic_store_n(&sh->quick_max, INT64_MIN, __ATOMIC_RELEASE); /* 1 */
    int ok = 1;
    for (unsigned fi = 0; ok && fi < SL__NFIT; fi++) { /* 2, fitted records: narrow all */
        fit_tbl *ft = sh->fit[fi];
        for (uint32_t i = 0; ok && ft && i < ft->cap; i++) {
            uint8_t *r = fit_slot(ft, i);
            if (r == keep_r || !fit_live_meta(sl__rec_meta(r))) continue;
            if (!rec_trylock_wait(sh, r)) {
                ok = 0;
                break;
            }
            uint32_t lo = sl__ld32(r + 4);
            if (sl__clock_in(e, lo) >= e2) {
                sl__rec_unlock(r);
                continue;
            }
            if (sh->budget && sl__rec_restriction(sh, r, t) == SL__AT_REST) {
                fit_drop(sh, ft, r);
                count_drop(sh, SL__AT_REST, 0);
                continue;
            }
            uint32_t nh = fit_move_out(sh, ft, rec_hash(sh, r), r, ft->rsize + SL__CLOCK_WIDE_BYTES,
                                       1, sl__clock_in(e, lo), t);
            if (nh) {
                sl__rec_unlock(rec_at(sh, nh));
            } else {
                sl__rec_unlock(r);
                ok = 0;
            }
        }
    }
    for (uint32_t pi = 0; ok && sh->pages && pi < sh->npages; pi++) { /* 2 */
        for (uint32_t idx = 0; ok && sh->pages && sh->pages[pi].mem && idx < sh->pages[pi].bump;
             idx++) {
            uint32_t h = h_make(pi, idx);
            uint8_t *r = rec_at(sh, h);
            if (h == keep || sl__rec_meta(r) == SL__FREE_MARK) continue;
            if (!rec_trylock_wait(sh, r)) { /* its clock may be being written */
                ok = 0;
                break;
            }
            uint32_t lo = sl__ld32(r + 4); /* as its last holder left it */
            if (lo == mark || sl__clock_in(e, lo) >= e2) {
                sl__rec_unlock(r);
                continue;
            }
            uint64_t hash = rec_hash(sh, r);
            uint32_t i;
            if (sh->budget && sl__rec_restriction(sh, r, t) == SL__AT_REST &&
                (i = slot_of_handle(sh, hash, h)) != UINT32_MAX) {
                drop_slot(sh, i, h); /* a bounded store's: an unbounded one keeps every key */
                count_drop(sh, SL__AT_REST, 0);
            } else {
                uint32_t nh = widen(sh, hash, h, sl__clock_in(e, lo), t);
                if (nh)
                    sl__rec_unlock(rec_at(sh, nh));
                else {
                    sl__rec_unlock(r);
                    ok = 0;
                }
            }
        }
    }
    if (ok && keep_r) { /* the caller's record: its clock may be left behind too */
        uint8_t *r = *keepp;
        uint32_t lo = sl__ld32(r + 4);
        if (lo != mark && sl__clock_in(e, lo) < e2) {
            fit_tbl *ft = fit_holding(sh, r);
            uint32_t kh = ft ? 0 : rec_handle(sh, r), nh;
            if (ft)
                nh = fit_move_out(sh, ft, rec_hash(sh, r), r, ft->rsize + SL__CLOCK_WIDE_BYTES, 1,
                                  sl__clock_in(e, lo), t);
            else
                nh = kh ? widen(sh, rec_hash(sh, r), kh, sl__clock_in(e, lo), t) : 0;
            if (nh)
                *keepp = rec_at(sh, nh);
            else
                ok = 0;
        }
    }
    sh->walk_wait = sh->count / 2;
    if (!ok) { /* 3 */
        if (keep_r && !sh->quick) sl__rec_meta_set(*keepp, keep_meta);
        __atomic_store_n(&sh->quick_max, sl__quick_max(e), __ATOMIC_RELEASE);
        return;
    }
    for (uint32_t pi = 0; sh->pages && pi < sh->npages; pi++) { /* 4 */
        for (uint32_t idx = 0; sh->pages[pi].mem && idx < sh->pages[pi].bump; idx++) {
            uint8_t *r = rec_at(sh, h_make(pi, idx));
            int mine = keep_r && r == *keepp;
            if (sl__rec_meta(r) == SL__FREE_MARK) continue;
            if (!mine) rec_lock_live(sh, r);
            if (sl__ld32(r + 4) == mark) sl__st32(r + 4, mark2);
            if (!mine) sl__rec_unlock(r);
        }
    }
    if (keep_r && !sh->quick) sl__rec_meta_set(*keepp, keep_meta);
    sh->walks_moved++;
    epoch_set(sh, e2); /* 5 */
}

int sl__shard_clock_slow(sl__shard *sh, uint64_t hash, uint8_t **rp, int64_t t)
{
    if (sh->loose) return 0; /* wide always, in room of their own */
    if (t > sh->epoch && (uint64_t)t - (uint64_t)sh->epoch >= (uint64_t)SL__CLOCK_QUICK)
        clock_walk(sh, t, rp);
    uint8_t *r = *rp;
    if (sl__rec_wide(sh, r) || sl__clock_fits(sh->epoch, t)) return 0;
    fit_tbl *ft = fit_holding(sh, r);
    if (ft) { /* a wide record lives in the slab */
        uint32_t nh = fit_move_out(sh, ft, hash, r, ft->rsize + SL__CLOCK_WIDE_BYTES, 1,
                                   sl__clock_in(sh->epoch, sl__ld32(r + 4)), t);
        if (!nh) return sh->fail;
        *rp = rec_at(sh, nh);
        return 0;
    }
    uint32_t i = slot_of_rec(sh, hash, r);
    if (i == UINT32_MAX) return SL_ENOMEM; /* cannot be: r is the key's */
    uint32_t h = s_h(sh->slot[i]);
    uint32_t nh = widen(sh, hash, h, sl__clock_in(sh->epoch, sl__ld32(r + 4)), t);
    if (!nh) return sh->fail;
    *rp = rec_at(sh, nh);
    return 0;
}

uint8_t *sl__shard_insert(sl__shard *sh, uint64_t hash, unsigned kind, const void *key, size_t klen,
                          size_t state_len, int64_t now_ms)
{
    sh->fail = SL_ENOMEM;
    if (klen == 0 || klen > SL_MAX_KEY || state_len > SL__STATE_MAX || kind > 15) return NULL;
    if (sh->loose) return loose_insert(sh, kind, key, klen, state_len, now_ms);
    if (!sh->count) /* an empty shard: its window starts afresh */
        epoch_set(sh, now_ms - SL__CLOCK_KEEP);
    else if (now_ms > sh->epoch &&
             (uint64_t)now_ms - (uint64_t)sh->epoch >= (uint64_t)SL__CLOCK_QUICK)
        clock_walk(sh, now_ms, NULL);
    int wide = !sl__clock_fits(sh->epoch, now_ms);
    unsigned fk = fit_idx(kind, klen), fi = fk;
    if (wide || sh->fit_off || state_len != fit_state_len[kind & 7]) fi = SL__FIT_NONE;
    uint32_t h = 0;
    if (fi != SL__FIT_NONE) {
        uint8_t *r = fit_insert(sh, fi, hash, now_ms, &h);
        if (r) { /* zeroed but its meta, still a mark */
            sl__st32(r + 4, (uint32_t)now_ms);
            memcpy(r + SL__REC_HDR, key, klen);
            sl__rec_meta_set(r, (uint16_t)(sl__meta_id(kind, klen) | SL__REC_LOCK)); /* held */
            sh->count++;
            return r;
        }
        if (!h) return NULL;
    } else {
        h = obtain(sh, rec_size(klen, state_len) + (wide ? SL__CLOCK_WIDE_BYTES : 0), 1, now_ms, 0);
        if (!h) return NULL;
    }
    uint8_t *r = rec_at(sh, h); /* zeroed, meta SL__FREE_MARK */
    if (wide) {
        sl__st32(r + 4, sl__clock_mark(sh->epoch));
        sl__st64(wide_at(sh, h), (uint64_t)now_ms);
    } else {
        sl__st32(r + 4, (uint32_t)now_ms);
    }
    memcpy(r + SL__REC_HDR, key, klen);
    sl__rec_meta_set(r, (uint16_t)(sl__meta_id(kind, klen) | SL__REC_LOCK)); /* held */
    slot_put(sh, hash, h);
    sh->count++;
    sh->hcount++;
    if (fk != SL__FIT_NONE) fit_slab_add(sh, 1);
    sh->last_h = h;
    return r;
}

size_t sl__rec_state_cap(const sl__shard *sh, const uint8_t *r)
{
    if (sh->loose) return loose_cap(r);
    const fit_tbl *ft = fit_holding(sh, r);
    if (ft) return ft->rsize - SL__REC_HDR - sl__rec_klen(r); /* never wide */
    uint32_t h = rec_handle(sh, r);
    if (!h) return 0;
    return sh->pages[h_page(h)].rsize - SL__REC_HDR - sl__rec_klen(r) -
           (sl__rec_wide(sh, r) ? SL__CLOCK_WIDE_BYTES : 0);
}

int sl__shard_fail(const sl__shard *sh) { return sh->fail; }

uint64_t sl__shard_clock_moves(const sl__shard *sh) { return sh->walks_moved; }

uint8_t *sl__shard_resize(sl__shard *sh, uint64_t hash, uint8_t *r, size_t new_state_len)
{
    sh->fail = SL_ENOMEM;
    if (new_state_len > SL__STATE_MAX) return NULL;
    if (sh->loose) return loose_resize(r, new_state_len);
    fit_tbl *ft = fit_holding(sh, r);
    if (ft) {
        size_t klen = sl__rec_klen(r), cap = ft->rsize - SL__REC_HDR - klen;
        uint32_t want = rec_size(klen, new_state_len);
        if (want <= ft->rsize) { /* fits where it is */
            if (new_state_len < cap)
                memset(sl__rec_state(r) + new_state_len, 0, cap - new_state_len);
            return r;
        }
        uint32_t nh = fit_move_out(sh, ft, hash, r, want, 0, 0, sl__rec_clock(sh, r));
        return nh ? rec_at(sh, nh) : NULL;
    }
    uint32_t i = slot_of_rec(sh, hash, r);
    if (i == UINT32_MAX) return NULL;
    uint32_t h = s_h(sh->slot[i]);
    size_t klen = sl__rec_klen(r);
    int wide = sl__rec_wide(sh, r);
    size_t extra = wide ? SL__CLOCK_WIDE_BYTES : 0;
    uint32_t have = sh->pages[h_page(h)].rsize;
    size_t cap = have - SL__REC_HDR - klen - extra;
    uint32_t want = rec_size(klen, new_state_len) + (uint32_t)extra;
    if (want <= have) { /* fits where it is: clear what is no longer state */
        if (new_state_len < cap) memset(sl__rec_state(r) + new_state_len, 0, cap - new_state_len);
        sh->last_h = h;
        return r;
    }
    /* Reclaiming may move slots (not records): find r's slot again after. */
    int64_t clock = sl__rec_clock(sh, r);
    uint32_t nh = obtain(sh, want, 0, clock, h);
    if (!nh) return NULL;
    uint8_t *nr = rec_at(sh, nh);
    memcpy(nr + 2, r + 2, SL__REC_HDR + klen + cap - 2);
    if (wide) sl__st64(wide_at(sh, nh), (uint64_t)clock);
    sl__rec_meta_set(nr, sl__rec_meta(r)); /* held, as r is */
    i = slot_of_handle(sh, hash, h);
    slot_set(sh, i, nh | (sh->slot[i] & ~SL__H_MASK)); /* same key: same tag */
    rec_give(sh, h);
    sh->last_h = nh;
    return nr;
}

void sl__shard_remove(sl__shard *sh, uint64_t hash, uint8_t *r)
{
    if (sh->loose) {
        if (sl__rec_has_ext(r)) free_ext(sh, r);
        if (sl__shard_loose_lent(r))
            memset(r - LOOSE_PREFIX, 0, LOOSE_PREFIX); /* the room is free again */
        else
            free(r - LOOSE_PREFIX);
        return;
    }
    fit_tbl *ft = fit_holding(sh, r);
    if (ft) {
        fit_drop(sh, ft, r);
        fit_release_all(sh);
        return;
    }
    uint32_t i = slot_of_rec(sh, hash, r);
    if (i != UINT32_MAX) drop_slot(sh, i, s_h(sh->slot[i]));
    fit_release_all(sh);
}

void *sl__ext_alloc(sl__shard *sh, size_t bytes)
{
    void *p = blk_new(bytes, 0);
    if (p) {
        sh->ext += blk_cost(bytes);
        sh->bytes += blk_cost(bytes);
    }
    return p;
}

void sl__ext_free(sl__shard *sh, void *buf, size_t bytes)
{
    if (!buf) return;
    blk_free(buf, bytes);
    uint64_t c = blk_cost(bytes);
    sh->ext = sh->ext > c ? sh->ext - c : 0;
    sh->bytes = sh->bytes > c ? sh->bytes - c : 0;
}

/* Whether sl__shard_reserve may let `bytes` more be taken: room, or its
 * keep alone in the shard (count `alone`).  As obtain places a record that
 * fits nowhere, a key alone grows past the budget: a key whose share of
 * the bound passed SL_ETOOBIG's check still works when its shard's table
 * and pages leave it too little (64 shards of 1 KB: docs/store.md). */
static inline int reserved(const sl__shard *sh, size_t bytes, uint32_t alone)
{
    return room(sh, 0) >= bytes || sh->count == alone;
}

int sl__shard_reserve(sl__shard *sh, size_t bytes, const uint8_t *keep, int64_t now_ms)
{
    sh->fail = SL_ENOMEM;
    uint32_t alone = keep ? 1u : 0u;
    if (reserved(sh, bytes, alone)) return 0;
    if (limbo_flush(sh) && reserved(sh, bytes, alone)) return 0;
    uint32_t keep_h = 0;
    if (keep) {
        uint32_t i = slot_of_rec(sh, rec_hash(sh, keep), keep);
        if (i != UINT32_MAX) keep_h = s_h(sh->slot[i]);
    }
    int rounds = sh->starved ? 1 : SL__ROUNDS, declined = 0;
    for (int round = 0; round < rounds; round++) {
        uint64_t dropped = sweep(sh, now_ms, SL__SCAN, keep_h, NULL, 1);
        limbo_flush(sh);
        fit_shrink_some(sh);
        if (reserved(sh, bytes, alone)) return 0;
        if (round < rounds / 2 && (dropped || rest_lately(sh))) continue;
        victims v;
        victims_init(&v);
        uint64_t sampled = sample(sh, now_ms, 0, keep_h, &v);
        declined |= sh->deny && v.best;
        int ev = sampled || evict(sh, &v, 0, 0, now_ms);
        if (!ev && !v.best && sh->count > sh->hcount && fit_free_room(sh, &v, bytes, now_ms)) ev = 1;
        if (!ev && !dropped && !v.best) break;
        limbo_flush(sh);
        if (reserved(sh, bytes, alone)) return 0;
    }
    if (declined) {
        sh->fail = SL_EFULL;
        sh->starved = 1;
        sh->refused++;
    }
    return sh->fail;
}

uint64_t sl__store_rec_max(const sl_store *s)
{
    return s->max_bytes ? s->max_bytes / SL_STORE_REC_SHARE : UINT64_MAX;
}

/* ---- the public store API --------------------------------------------------- */

/* 16 bytes from the kernel's CSPRNG.  Returns 0 or -1. */
static int random_seed(uint8_t seed[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(seed + got, 16 - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got == 16) return 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    got = 0;
    while (got < 16) {
        ssize_t n = read(fd, seed + got, 16 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    return got == 16 ? 0 : -1;
}

static int shard_init(sl__shard *sh, const sl_store *s, unsigned index, uint64_t budget)
{
    memset(sh, 0, sizeof *sh);
    sh->store = s;
    sh->quick = s->quick;
    sh->budget = budget;
    sh->deny = s->deny;
    sh->fit_off = budget && !SL__FIT_BOUNDED; /* docs/store.md, "Fitted tables" */
    epoch_set(sh, 0);
    sh->rng = sl__siphash13_v(&s->sip[0], &index, sizeof index) | 1; /* never 0 */
    __atomic_store_n(&sh->size, SL__TABLE_MIN, __ATOMIC_RELAXED);
    __atomic_store_n(&sh->slot, table_new(SL__TABLE_MIN), __ATOMIC_RELAXED);
    if (!sh->slot) return -1;
    sh->bytes = blk_cost(table_bytes(SL__TABLE_MIN));
    atomic_init(&sh->lock, 0);
    return 0;
}

/* Frees everything; no reader is left (sl_store_free's contract), so the
 * limbo is freed without waiting. */
static void shard_fini(sl__shard *sh)
{
    for (uint32_t i = 0; i < sh->size; i++) {
        uint32_t h = s_h(sh->slot[i]);
        if (h && sl__rec_has_ext(rec_at(sh, h))) free_ext(sh, rec_at(sh, h));
    }
    for (uint32_t pi = 0; pi < sh->npages; pi++) {
        const page *p = &sh->pages[pi];
        size_t n = page_blk_size(sh, (size_t)p->cap * p->rsize);
        if (p->mem && !(sh->arena && arena_size(n) && arena_owns(sh->arena, p->mem)))
            blk_free(p->mem, n); /* arena pages go with the arena */
    }
    blk_free(sh->pages, (size_t)sh->pcap * sizeof(page));
    blk_free(table_block(sh->slot), table_bytes(sh->size));
    for (unsigned fi = 0; fi < SL__NFIT; fi++)
        if (sh->fit[fi]) blk_free(sh->fit[fi], sh->fit[fi]->blk);
    for (limbo *l = sh->limbo, *next; l; l = next) {
        next = l->next;
        if (!(sh->arena && arena_size(l->n) && arena_owns(sh->arena, l->blk)))
            blk_free(l->blk, l->n);
        free(l);
    }
}

sl_store *sl_store_new(const sl_store_opts *opts, int *err)
{
    sl_store_opts o;
    if (opts)
        o = *opts;
    else
        memset(&o, 0, sizeof o);
    int e = SL_EINVAL;
    if (o.locking != SL_LOCK_RECORD && o.locking != SL_LOCK_SHARD) goto fail;
    if (o.on_full != SL_FULL_EVICT && o.on_full != SL_FULL_DENY) goto fail;
    unsigned n = o.shards;
    if (n) {
        if (n > SL__MAX_SHARDS || (n & (n - 1))) goto fail;
    } else {
        n = SL__SHARDS;
        while (n > 1 && o.max_bytes && o.max_bytes / n < SL__SHARD_BUDGET_MIN) n /= 2;
    }
    uint8_t seed[16];
    if (o.fixed_seed)
        memcpy(seed, o.seed, 16);
    else if (random_seed(seed) != 0)
        goto fail; /* no randomness: refuse rather than hash predictably */
    e = SL_ENOMEM;
    sl_store *s = calloc(1, sizeof *s);
    if (!s) goto fail;
    /* Independent per-algorithm keys, so (algo, key) hashes without copying. */
    for (unsigned a = 0; a < 8; a++) {
        uint8_t m[8] = {'s', 'l', 'u', 'i', 'c', 'e', (uint8_t)a, 0};
        uint64_t k0 = sl__siphash24(seed, m, 8);
        m[7] = 1;
        uint64_t k1 = sl__siphash24(seed, m, 8);
        uint8_t key[16];
        for (int b = 0; b < 8; b++) {
            key[b] = (uint8_t)(k0 >> (8 * b));
            key[8 + b] = (uint8_t)(k1 >> (8 * b));
        }
        sl__sipkey_init(&s->sip[a], key);
    }
    s->quick = o.locking != SL_LOCK_SHARD;
    s->deny = o.on_full == SL_FULL_DENY;
    s->nshards = n;
    s->shift = 64;
    for (unsigned m = n; m > 1; m >>= 1) s->shift--;
    s->max_bytes = o.max_bytes;
    atomic_init(&s->next, 0);
    s->shard = aligned_alloc(_Alignof(sl__shard), (size_t)n * sizeof(sl__shard));
    if (!s->shard) {
        free(s);
        goto fail;
    }
    uint64_t budget = o.max_bytes ? o.max_bytes / n : 0;
    if (o.max_bytes && !budget) budget = 1;
    /* The arena for a store that may grow big; a bounded one keeps a
     * chunk's tail aside from its shards' budgets. */
    if (!o.max_bytes ||
        (o.max_bytes > SL__CHUNK && (o.max_bytes - SL__CHUNK) / n >= SL__ARENA_SHARD_MIN)) {
        s->arena = arena_new();
        if (s->arena && o.max_bytes) budget = (o.max_bytes - SL__CHUNK) / n;
    }
    for (unsigned i = 0; i < n; i++) {
        if (shard_init(&s->shard[i], s, i, budget) != 0) {
            while (i--) shard_fini(&s->shard[i]);
            arena_free(s->arena);
            free(s->shard);
            free(s);
            goto fail;
        }
        s->shard[i].arena = s->arena;
    }
    if (err) *err = SL_OK;
    return s;
fail:
    if (err) *err = e;
    return NULL;
}

void sl_store_free(sl_store *s)
{
    if (!s) return;
    for (unsigned i = 0; i < s->nshards; i++) shard_fini(&s->shard[i]);
    arena_free(s->arena);
    free(s->shard);
    free(s);
}

void sl_store_stats_get(sl_store *s, sl_store_stats *out)
{
    memset(out, 0, sizeof *out);
    out->max_bytes = s->max_bytes;
    for (unsigned i = 0; i < s->nshards; i++) {
        sl__shard *sh = &s->shard[i];
        sl__shard_lock(sh);
        out->keys += sh->count;
        out->bytes += sh->bytes;
        out->expired += sh->expired;
        out->evictions += sh->evictions;
        out->evicted_at_rest += sh->evict_rest;
        out->evicted_at_limit += sh->evict_limit;
        out->refused += sh->refused;
        sl__shard_unlock(sh);
    }
}

uint64_t sl_store_expire(sl_store *s, int64_t now_ms, uint64_t max_records)
{
    uint64_t dropped = 0, left = max_records ? max_records : UINT64_MAX;
    unsigned start = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
    for (unsigned k = 0; k < s->nshards && left; k++) {
        sl__shard *sh = &s->shard[(start + k) & (s->nshards - 1)];
        uint64_t seen = 0;
        sl__shard_lock(sh);
        dropped += sweep(sh, now_ms, left, 0, &seen, 0);
        fit_release_all(sh);
        limbo_flush(sh); /* what readers might still see has waited long enough */
        sl__shard_unlock(sh);
        if (max_records) left -= seen < left ? seen : left;
    }
    return dropped;
}

typedef struct latest_ctx {
    const sl__shard *sh;
    int64_t latest;
} latest_ctx;

static int later_clock(const uint8_t *rec, void *ctx)
{
    latest_ctx *x = ctx;
    int64_t c = sl__rec_clock(x->sh, rec);
    if (c > x->latest) x->latest = c;
    return 0;
}

int64_t sl_store_latest_time(sl_store *s)
{
    latest_ctx x = {NULL, INT64_MIN};
    for (unsigned i = 0; i < s->nshards; i++) {
        sl__shard *sh = &s->shard[i];
        sl__shard_lock(sh);
        x.sh = sh;
        sl__shard_foreach(sh, later_clock, &x);
        sl__shard_unlock(sh);
    }
    return x.latest;
}

unsigned sl__store_nshards(const sl_store *s)
{
    return s->nshards;
}

sl__shard *sl__store_shard_at(sl_store *s, unsigned i)
{
    return &s->shard[i];
}

int sl__shard_foreach(sl__shard *sh, int (*fn)(const uint8_t *rec, void *ctx), void *ctx)
{
    for (uint32_t i = 0; i < sh->size; i++) {
        if (!sh->slot[i]) continue;
        uint8_t *r = rec_at(sh, s_h(sh->slot[i]));
        rec_lock(sh, r);
        int rc = fn(r, ctx);
        sl__rec_unlock(r);
        if (rc != 0) return rc;
    }
    for (unsigned fi = 0; fi < SL__NFIT; fi++) {
        fit_tbl *t = sh->fit[fi];
        for (uint32_t i = 0; t && i < t->cap; i++) {
            uint8_t *r = fit_slot(t, i);
            if (!fit_live_meta(sl__rec_meta(r))) continue;
            rec_lock(sh, r);
            int rc = fn(r, ctx);
            sl__rec_unlock(r);
            if (rc != 0) return rc;
        }
    }
    return 0;
}

int sl__store_placed(sl_store *s, unsigned kind, const void *key, size_t klen)
{
    uint64_t h = sl__store_hash(s, kind, key, klen);
    sl__shard *sh = shard_of(s, h);
    shard_lock(sh);
    uint8_t *r = find(sh, h, sl__meta_id(kind, klen), key, klen);
    int where = !r ? 0 : fit_holding(sh, r) ? 1 : 2;
    sl__shard_unlock(sh);
    return where;
}

void sl__shard_fit_info(const sl__shard *sh, unsigned kind, size_t klen, sl__fit_info *out)
{
    memset(out, 0, sizeof *out);
    out->graces = sh->tomb_graces;
    out->purges = sh->fit_purges;
    out->held = sh->fit_held;
    unsigned fi = fit_idx(kind, klen);
    const fit_tbl *t = fi == SL__FIT_NONE ? NULL : sh->fit[fi];
    if (!t) return;
    out->cap = t->cap;
    out->live = t->live;
    out->tomb = t->tomb;
    out->rsize = t->rsize;
    out->spread = t->spread;
    out->slot0 = fit_slot(t, 0);
}

void sl__store_fit_off(sl_store *s, int off)
{
    for (unsigned i = 0; i < s->nshards; i++)
        s->shard[i].fit_off = off > 0 || (!off && s->max_bytes && !SL__FIT_BOUNDED);
}
