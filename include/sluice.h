/*
 * sluice.h -- libsluice, an exact, embeddable rate-limit decision engine.
 *
 * Two objects:
 *
 *   sl_store    per-key state for every algorithm: a sharded, thread-safe hash
 *               table with a memory bound that counts every byte a key holds,
 *               a keyed (SipHash) hash with a random per-process seed.  Under
 *               the bound it drops keys at rest first (they hold no
 *               restriction); what happens when every key it could drop
 *               holds one is the store's choice (sl_store_opts.on_full).  One
 *               store may serve many limiters.
 *   sl_limiter  an algorithm and its parameters bound to a store: the classic
 *               "limiter.allow(key, now)" object.
 *
 * Time is always passed in (integer milliseconds); the library never reads a
 * clock.  Every decision returns the six fields of SPEC section 3 (sl_result).
 * All arithmetic is exact integer arithmetic.
 *
 * Errors are negative codes (SL_E*), never errno; sl_strerror() names them.
 * Codes are only ever appended, never renumbered.
 *
 * Thread safety: every function taking an sl_store or sl_limiter may be called
 * from many threads at once, except the _free functions.
 *
 * Minimal use:
 *
 *     sl_params p = SL_PARAMS_INIT;
 *     p.algo = SL_TOKEN_BUCKET; p.limit = 5; p.window_ms = 10000;
 *     int err;
 *     sl_limiter *lim = sl_limiter_new(&p, NULL, &err);
 *     sl_result r;
 *     if (sl_allow(lim, "user:42", 7, now_ms, 1, &r) == 0 && r.allowed) ...
 *     sl_limiter_free(lim);
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is libsluice's public API, exported by the
 * shared library; the library is built with -fvisibility=hidden, so its
 * internal (sl__) names are not. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SL_VERSION "0.1.0"

/* Ranges of SPEC section 1.  Quote these names rather than their values. */
#define SL_MAX_KEY 512                         /* bytes */
#define SL_MAX_LIMIT 1000000000000LL           /* L, B and c */
#define SL_MAX_WINDOW_MS 315576000000LL        /* 10 years of 365.25 days */
#define SL_MAX_PRECISION 65535                 /* sliding-buckets P */
#define SL_DEFAULT_PRECISION 10
#define SL_MAX_TIME_MS 4611686018427387904LL   /* |t| < 2^62 */

/* Error codes (negative).  Only ever appended. */
#define SL_OK 0
#define SL_ENOMEM -1      /* out of memory, or the memory bound cannot fit the key */
#define SL_EALGO -2       /* unknown algorithm name */
#define SL_ELIMIT -3      /* limit out of range */
#define SL_EWINDOW -4     /* window out of range */
#define SL_EBURST -5      /* burst out of range, or given to a window algorithm */
#define SL_ECOST -6       /* cost out of range */
#define SL_EPRECISION -7  /* precision out of range, not sliding-buckets, or W % P != 0 */
#define SL_EKEY -8        /* key empty or longer than SL_MAX_KEY */
#define SL_ETIME -9       /* time outside (-SL_MAX_TIME_MS, SL_MAX_TIME_MS) */
#define SL_ELOGREJECTED -10 /* log-rejected given to an algorithm other than sliding-log */
#define SL_EINVAL -11     /* other invalid argument (NULL pointer, bad option) */
#define SL_EFULL -12      /* no room, and every key to drop holds a limit (SL_FULL_DENY) */
#define SL_ETOOBIG -13    /* one key could take over 1/SL_STORE_REC_SHARE of the bound */

/* Returns a static, human-readable description of an SL_E* code. */
const char *sl_strerror(int err);

typedef enum sl_algo {
    SL_FIXED_WINDOW = 0,
    SL_SLIDING_LOG = 1,
    SL_SLIDING_WINDOW = 2,
    SL_SLIDING_BUCKETS = 3,
    SL_TOKEN_BUCKET = 4,
    SL_GCRA = 5,
    SL_LEAKY_BUCKET = 6,
    SL_ALGO_COUNT = 7
} sl_algo;

/* "fixed-window", "sliding-log", ... as in SPEC section 2. */
const char *sl_algo_name(sl_algo a);
/* Parses an algorithm name of len bytes.  Returns 0 and sets *out, or SL_EALGO. */
int sl_algo_parse(const char *name, size_t len, sl_algo *out);

/* The parameters of one limit (SPEC section 1).  Zero means "default" for
 * burst (= limit) and precision (= SL_DEFAULT_PRECISION). */
typedef struct sl_params {
    sl_algo algo;
    int64_t limit;     /* L: requests per window, 1..SL_MAX_LIMIT */
    int64_t window_ms; /* W: 1..SL_MAX_WINDOW_MS */
    int64_t burst;     /* B: bucket algorithms only; 0 = L */
    int64_t precision; /* P: sliding-buckets only; 0 = SL_DEFAULT_PRECISION */
    int log_rejected;  /* sliding-log only: log denied requests too */
    int space;         /* key space, 0 or 1: the same key bytes in the other
                          space are another key (and sl_forget reaches space
                          0 only).  Not a limit parameter: part of the key.
                          sluiced keeps its rules' counters in space 1, so no
                          RL.ALLOW or RL.RESET can reach them. */
} sl_params;

#define SL_PARAMS_INIT {SL_TOKEN_BUCKET, 0, 0, 0, 0, 0, 0}

/* Checks every field.  Returns 0, or the SL_E* code of the first bad field. */
int sl_params_check(const sl_params *p);

/* Parses a duration: a bare integer (milliseconds) or an integer with one of
 * the units ms, s, m, h, d, w, y (y = 365.25 d).  Returns 0 and sets *ms, or
 * SL_EWINDOW when the text is not such a duration or falls outside
 * 1..SL_MAX_WINDOW_MS. */
int sl_duration_parse(const char *s, size_t len, int64_t *ms);

/* Parses a non-negative decimal integer of len bytes (no sign, no spaces).
 * Returns 0 and sets *out, or SL_EINVAL when it is not one or exceeds max. */
int sl_int_parse(const char *s, size_t len, int64_t max, int64_t *out);

/* The answer (SPEC section 3). */
typedef struct sl_result {
    int64_t allowed;        /* 1 or 0 */
    int64_t limit;          /* L, or B for the bucket algorithms */
    int64_t remaining;      /* largest cost that would pass now, >= 0 */
    int64_t retry_after_ms; /* 0 if allowed; -1 if never; else exact wait */
    int64_t reset_after_ms; /* until remaining is back to limit */
    int64_t delay_ms;       /* leaky-bucket: queueing delay of an allowed request */
} sl_result;

/* ---- the store ---------------------------------------------------------- */

typedef struct sl_store sl_store;

/* How a store's threads take turns (sl_store_opts.locking):
 *   SL_LOCK_RECORD  each key's state has its own lock, and a decision on an
 *                   existing key finds it without any shared lock: threads
 *                   on different keys share no written cache line, so
 *                   decisions scale with cores.  The default.
 *   SL_LOCK_SHARD   each decision takes its shard's lock (64 shards): no
 *                   atomic read-modify-write on the key's own state, ~10%
 *                   faster for one thread, but two threads take the same
 *                   locks and slow each other down.  For a store one
 *                   thread uses (sluicectl replay does).
 * Both are safe with any number of threads; docs/store.md has the numbers. */
enum { SL_LOCK_RECORD = 0, SL_LOCK_SHARD = 1 };

/* What a bounded store does when a new key needs room and every key it
 * could drop holds a restriction -- dropping it would hand its owner back
 * part of a limit (sl_store_opts.on_full).  Keys at rest (whose state
 * answers exactly as a fresh key's would) are always dropped first, and
 * without counting as a choice:
 *   SL_FULL_EVICT  evict the least restricted key seen: one below its
 *                  limit before one at it, the one nearest to rest first.
 *                  A zeroed sl_store_opts gives this (as before it existed).
 *   SL_FULL_DENY   refuse the new key (SL_EFULL); no limit is ever reset to
 *                  make room.  What sluiced does by default. */
enum { SL_FULL_EVICT = 0, SL_FULL_DENY = 1 };

/* A bounded store refuses (SL_ETOOBIG) parameters under which one key's
 * state -- its record with the longest key and everything it may allocate,
 * e.g. a sliding-log's whole ring -- could take more than 1/SL_STORE_REC_SHARE
 * of max_bytes: such a key could not share the bound with others. */
#define SL_STORE_REC_SHARE 64

typedef struct sl_store_opts {
    size_t max_bytes; /* memory bound: every byte the store holds for keys
                         (records, tables, logs, memory waiting to be freed);
                         0 = unbounded */
    unsigned shards;  /* power of two; 0 = chosen from max_bytes (at most 64) */
    unsigned locking; /* SL_LOCK_RECORD (0) or SL_LOCK_SHARD */
    int fixed_seed;   /* nonzero: use `seed` instead of a random one (tests) */
    uint8_t seed[16];
    unsigned on_full; /* SL_FULL_EVICT (0) or SL_FULL_DENY */
} sl_store_opts;

/* Creates a store.  opts may be NULL (unbounded, random seed).
 * Returns NULL with *err set (may be NULL) on failure. */
sl_store *sl_store_new(const sl_store_opts *opts, int *err);
/* Frees the store and every key.  No other thread may be using it. */
void sl_store_free(sl_store *s);

/* What the store holds and what it dropped.  A key is dropped at rest
 * (`expired`: its reset time had passed, so its state answered as a fresh
 * key's) or evicted while it held a restriction (`evictions`). */
typedef struct sl_store_stats {
    uint64_t keys;          /* live records */
    uint64_t bytes;         /* memory held: pages, tables, page directories,
                               sliding-log rings, memory waiting to be freed */
    uint64_t max_bytes;     /* the bound (0 = none) */
    uint64_t expired;       /* keys dropped at rest: by sl_store_expire or to make room */
    uint64_t evictions;     /* keys evicted while holding a restriction (SL_FULL_EVICT) */
    uint64_t evicted_at_rest;  /* of `expired`, those dropped to make room */
    uint64_t evicted_at_limit; /* of `evictions`, those at their limit (their last
                                  request denied or leaving nothing) */
    uint64_t refused;          /* requests refused for room: SL_EFULL (SL_FULL_DENY) */
} sl_store_stats;

void sl_store_stats_get(sl_store *s, sl_store_stats *out);

/* Drops every record whose reset time is <= now_ms, examining at most
 * max_records records (0 = all) from a rotating position.  Returns the
 * number dropped.  Servers call this periodically; it is never required
 * for correctness. */
uint64_t sl_store_expire(sl_store *s, int64_t now_ms, uint64_t max_records);

/* The latest time any key of s has been decided at (the largest key
 * clock), INT64_MIN for an empty store: after sl_store_load, a server whose
 * clock is behind the snapshot's keys learns how far.  O(keys): every
 * shard is walked under its lock in turn, so decisions go on meanwhile. */
int64_t sl_store_latest_time(sl_store *s);

/* ---- snapshots ---------------------------------------------------------- */

/* Writes every key's state to path atomically: path.tmp, fsync, rename,
 * fsync of the directory.  When path is a symbolic link, through it: the
 * link's final target is written (its .tmp beside it) and the link stays.
 * One shard is copied at a time under its lock, so decisions go on
 * meanwhile.  Returns 0, or -1 with a message in err (naming the file and
 * the system error). */
int sl_store_save(sl_store *s, const char *path, char *err, size_t errlen);

/* Checks that sl_store_save can write path: the directory of path (of its
 * final target when path is a symbolic link) exists, and the save's .tmp
 * file can be created there and removed -- a real write, so it holds
 * whatever decides it (mode bits, ACLs, a read-only mount, root or not).
 * Returns 0, or -1 with a message in err naming the path, the directory
 * and the reason. */
int sl_store_save_check(const char *path, char *err, size_t errlen);

/* Loads a file written by sl_store_save into s.  The whole file is read and
 * checked (magic, version, length, CRC-32, every record) before anything is
 * inserted: on any problem it returns -1 with a message naming the file and
 * what is wrong, and s is unchanged.  Returns 1 if path does not exist, 0
 * when loaded (*nkeys = records read; may be NULL).  Keys beyond the
 * store's memory bound are dropped as new keys would be: records at rest
 * first, then evicted (SL_FULL_EVICT) or not loaded (SL_FULL_DENY: the
 * records read first are kept). */
int sl_store_load(sl_store *s, const char *path, uint64_t *nkeys, char *err, size_t errlen);

/* ---- decisions ---------------------------------------------------------- */

/* Decides one request of `cost` for `key` at `now_ms` with parameters p, on
 * the state stored for (key, p->algo).  When allowed (or always, for
 * sliding-log with log_rejected) the state is charged.  A request older than
 * the key's latest time is decided at that latest time (SPEC section 4).
 * If the parameters differ from those the state was built with, the state
 * carries over (counts kept, capacities clamped).
 *
 * Returns 0 and fills *out, or a negative SL_E* code with the state untouched
 * (bad parameters, key, cost or time; SL_ETOOBIG for parameters too big for
 * the store's bound; SL_EFULL when a new key -- or an existing key's state
 * that must grow -- finds no room and the store refuses to reset a limit
 * (SL_FULL_DENY); SL_ENOMEM if it cannot be stored otherwise). */
int sl_decide(sl_store *s, const sl_params *p, const void *key, size_t keylen,
              int64_t now_ms, int64_t cost, sl_result *out);

/* As sl_decide, but changes nothing: the answer a request would get. */
int sl_peek(sl_store *s, const sl_params *p, const void *key, size_t keylen,
            int64_t now_ms, int64_t cost, sl_result *out);

/* One request of a batch for sl_decide_all. */
typedef struct sl_request {
    const sl_params *params;
    const void *key;
    size_t keylen;
    int64_t cost;
} sl_request;

#define SL_MAX_BATCH 16 /* requests in one sl_decide_all */

/* Decides n (1..SL_MAX_BATCH) requests at now_ms as one, atomically with
 * respect to every other call: if each would be allowed, all are charged
 * and out[i] are their answers; otherwise none is charged, no clock moves,
 * and out[i] are the answers each would get alone (the denied ones say when
 * to retry).  *all_allowed (may be NULL) says which happened.  Two requests
 * may not name the same (key, algorithm, space): merge their costs.  Returns 0, or
 * the first bad request's SL_E* code with nothing charged (SL_EINVAL for a
 * bad n or a repeated key), or SL_EFULL / SL_ENOMEM when a key finds no
 * room, with nothing charged either. */
int sl_decide_all(sl_store *s, const sl_request *reqs, size_t n, int64_t now_ms,
                  sl_result *out, int *all_allowed);

/* One request of sl_decide_many: sl_decide's arguments. */
typedef struct sl_call {
    const sl_params *params; /* ignored by sl_allow_many */
    const void *key;
    size_t keylen;
    int64_t now_ms;
    int64_t cost;
} sl_call;

/* Decides calls[0..n) in order, each exactly as sl_decide would: a key
 * that appears twice sees its first charge, and other threads' decisions
 * may fall between two requests, as between two calls.  Writes out[i] and
 * rc[i] (0 or the SL_E* code sl_decide would return; out[i] is then
 * unspecified).  Faster than n calls when the store is larger than the CPU
 * caches: it works a few requests ahead, loading their table slots and
 * records while earlier ones are decided, so their memory waits overlap.
 * Returns how many requests got rc 0 (0, deciding nothing, when s, calls,
 * out or rc is NULL). */
size_t sl_decide_many(sl_store *s, const sl_call *calls, size_t n, sl_result *out, int *rc);

/* Forgets (key, algo).  Returns 1 if state existed, 0 if not, or SL_EKEY. */
int sl_forget(sl_store *s, sl_algo algo, const void *key, size_t keylen);

/* ---- the limiter: parameters bound to a store --------------------------- */

typedef struct sl_limiter sl_limiter;

/* Creates a limiter with parameters p (copied).  If store is NULL the limiter
 * owns a new unbounded store; otherwise it borrows `store`, which must outlive
 * it.  Returns NULL and sets *err (may be NULL) on bad parameters or ENOMEM. */
sl_limiter *sl_limiter_new(const sl_params *p, sl_store *store, int *err);
void sl_limiter_free(sl_limiter *l);
const sl_params *sl_limiter_params(const sl_limiter *l);
sl_store *sl_limiter_store(sl_limiter *l);

/* sl_decide / sl_peek / sl_forget with the limiter's parameters. */
int sl_allow(sl_limiter *l, const void *key, size_t keylen, int64_t now_ms,
             int64_t cost, sl_result *out);
int sl_limiter_peek(sl_limiter *l, const void *key, size_t keylen,
                    int64_t now_ms, int64_t cost, sl_result *out);
int sl_reset(sl_limiter *l, const void *key, size_t keylen);

/* sl_decide_many with the limiter's parameters (calls[i].params unused):
 * n calls of sl_allow, working ahead. */
size_t sl_allow_many(sl_limiter *l, const sl_call *calls, size_t n, sl_result *out, int *rc);

/* ---- holds: concurrency leases and reservations (SPEC section 10) -------- */

/* Charges (delta > 0) or refunds (delta < 0) |delta| units on the state of
 * (key, p->algo) at now_ms, outside any decision: what settling a
 * reservation does (sl_settle).  A charge is made even past the limit:
 * the key then answers as if requests of that cost had passed, so the
 * next request waits (window algorithms keep the whole excess; a bucket
 * -- token-bucket, leaky-bucket, gcra -- holds at most its capacity
 * B of debt: it is empty, and what lies beyond is not kept).  A refund
 * gives back at most what the charge made at charged_at_ms still counts
 * at now_ms (nothing once that charge has left the window; a bucket
 * refills to at most B).  sliding-log is refused (SL_EALGO): a logged
 * entry's cost is not changed afterwards.  *out is the answer a request
 * of cost 1 would get afterwards (sl_peek's, nothing consumed).  Returns
 * 0, or an SL_E* code with nothing changed. */
int sl_charge(sl_store *s, const sl_params *p, const void *key, size_t keylen, int64_t now_ms,
              int64_t charged_at_ms, int64_t delta, sl_result *out);

/* Leases and reservations live in an sl_holds table: sharded, thread-safe,
 * bounded in bytes (every group, entry array and table slot counted), each
 * entry reclaimed when it expires (when its key is next touched, and a few
 * groups examined at every insert).  Keys are the same bytes as a store's
 * but a table of their own: a lease key and a rate key never meet. */
typedef struct sl_holds sl_holds;

#define SL_MAX_CONCURRENCY 100000         /* RL.ACQUIRE's max: leases one key may hold */
#define SL_MAX_LEASE_TTL_MS 86400000LL    /* a lease lasts at most a day */
#define SL_DEFAULT_LEASE_TTL_MS 60000LL   /* RL.ACQUIRE without TTL */

typedef struct sl_holds_opts {
    size_t max_bytes; /* bound on everything the table holds; 0 = unbounded */
} sl_holds_opts;

/* A table; opts may be NULL (unbounded).  NULL with *err (may be NULL) set. */
sl_holds *sl_holds_new(const sl_holds_opts *opts, int *err);
/* Frees it and every entry.  No other thread may be using it. */
void sl_holds_free(sl_holds *h);

typedef struct sl_holds_stats {
    uint64_t leases;       /* live lease entries (some may be expired, not yet reclaimed) */
    uint64_t reservations; /* live reservation entries (the same) */
    uint64_t groups;       /* keys holding any */
    uint64_t bytes;        /* memory held */
    uint64_t max_bytes;    /* the bound (0 = none) */
    uint64_t expired;      /* entries reclaimed after their time */
    uint64_t refused;      /* inserts refused for room (SL_EFULL) */
} sl_holds_stats;

void sl_holds_stats_get(sl_holds *h, sl_holds_stats *out);

/* Reclaims expired entries of at most max_groups groups (0 = all) from a
 * rotating position.  Returns the entries reclaimed.  Never required for
 * correctness. */
uint64_t sl_holds_expire(sl_holds *h, int64_t now_ms, uint64_t max_groups);

/* Takes one lease of key's concurrency limit max (1..SL_MAX_CONCURRENCY)
 * for ttl_ms (1..SL_MAX_LEASE_TTL_MS) at now_ms (decided at the key's
 * latest time if later, SPEC 4).  Allowed iff fewer than max leases are
 * live (a lease is live while now < its expiry).  *out: allowed, limit =
 * max, remaining = free leases after the call, retry_after_ms (denied) =
 * until the oldest live lease expires, reset_after_ms = until every lease
 * held expires, delay 0.  *id = the new lease's id (>= 1, unique in the
 * table) or 0 when denied.  Returns 0, or SL_EKEY / SL_ELIMIT (max) /
 * SL_EWINDOW (ttl) / SL_ETIME / SL_EFULL (the table's bound) / SL_ENOMEM,
 * nothing changed. */
int sl_acquire(sl_holds *h, const void *key, size_t keylen, int64_t max, int64_t ttl_ms,
               int64_t now_ms, sl_result *out, uint64_t *id);

/* Gives back lease id of key.  Returns 1 if it was live, 0 if unknown or
 * expired, or SL_EKEY / SL_ETIME. */
int sl_release(sl_holds *h, const void *key, size_t keylen, uint64_t id, int64_t now_ms);

/* A reservation: sl_decide of `estimate` on (key, p) in store s; when
 * allowed, a record of it (id, p, estimate, now) is kept until it is
 * settled or until now + p->window_ms, when it settles at its estimate
 * (the record goes: the charge stays).  *id = its id (>= 1), or 0 when
 * denied (nothing kept).  Returns 0, or sl_decide's codes, SL_EALGO for
 * sliding-log (sl_charge), SL_EFULL when the table has no room (nothing
 * charged). */
int sl_reserve(sl_holds *h, sl_store *s, const sl_params *p, const void *key, size_t keylen,
               int64_t now_ms, int64_t estimate, sl_result *out, uint64_t *id);

/* Settles reservation id of key at `actual` (0..SL_MAX_LIMIT): sl_charge
 * of actual - estimate on the reservation's parameters, then the record
 * goes.  *out: the key's six fields afterwards (sl_charge's).  Returns 1
 * when settled, 0 when id is unknown, settled already or expired (settled
 * at its estimate), or an SL_E* code with nothing changed (the
 * reservation is then kept). */
int sl_settle(sl_holds *h, sl_store *s, const void *key, size_t keylen, uint64_t id,
              int64_t actual, int64_t now_ms, sl_result *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
