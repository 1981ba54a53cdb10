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
#include <string.h>

#include "siphash.h" /* SL__HOT_INLINE */
#include "store.h"
#include "sluice.h"

/* Parameters with defaults filled in (burst, precision). */
typedef struct sl__norm {
    sl_algo algo;
    int64_t L, W, B, P; /* limit, window (ms), burst, precision */
    int log_rejected;
    unsigned kind;  /* the store's name for the key's kind: algo, plus
                       SL__KIND_SPACE in key space 1 (sl_params.space) */
    uint64_t bw64;  /* B*W if below 2^62 (the inline bucket paths apply),
                       else 0 */
    uint64_t big;   /* sliding-log and sliding-buckets: the most bytes one
                       key's state may cost (sl__state_max); else 0 */
} sl__norm;

/* Fills n from p (which must have passed sl_params_check). */
void sl__norm_from(sl__norm *n, const sl_params *p);

/* State bytes a new record needs for these parameters. */
size_t sl__state_len(const sl__norm *n);

/* The most bytes one key's state may cost in a store under these
 * parameters, whatever its requests: its record with the longest key, and
 * for sliding-log the largest ring its log can need (every entry as long
 * as its varints can be, given that the entries' time gaps add up to less
 * than 2W and their costs to at most L plus two outliers).  An upper
 * bound, tight within ~2x for long logs.  O(1). */
uint64_t sl__state_max(const sl__norm *n);

/* Whether the state st must change layout to serve these parameters (a new
 * precision or wider counters for sliding-buckets, or a fresh record): 0 if
 * not, else the state bytes it needs.  The caller grows the record to that
 * size if needed, then calls sl__state_adapt. */
size_t sl__state_need(const uint8_t *st, const sl__norm *n);

/* Converts st in place to the layout for n (counts kept, capacities
 * clamped).  clock is the key's clock.  Room must be >= sl__state_need(). */
void sl__state_adapt(uint8_t *st, const sl__norm *n, int64_t clock);

/* sl__engine_decide (below) for every algorithm and every parameter size:
 * the out-of-line path, taken when the inline one does not apply. */
int sl__engine_decide_general(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t clock_old,
                              int64_t t, int64_t cost, int commit, sl_result *out);

/* For a sliding-log record r (held, shard lock held): grows its ring, its
 * entries kept, to what committing a request of cost at t (>= its clock)
 * would grow it to, so that the commit then allocates nothing (so it
 * cannot fail): sl_decide_all takes every batch's room before charging.
 * 0, or SL_EFULL / SL_ENOMEM (sl__shard_reserve) with r unchanged. */
int sl__engine_log_room(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t t, int64_t cost);

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

/* ---- the hot paths, inline ---------------------------------------------
 * fixed-window, and token-bucket / leaky-bucket / gcra whenever their
 * numbers fit in 64 bits, are decided inline in the caller's decision path
 * (limiter.c): a call and a switch less on the most common requests.
 * engine.c holds everything else and the general (128-bit) paths. */

#define SL__U40_MASK 0xffffffffffULL

/* floor(a / b) for b > 0. */
static inline int64_t sl__fdiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* ceil(a / b) for b > 0. */
static inline uint64_t sl__ceil64(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static inline uint64_t sl__ld40(const uint8_t *p)
{
    uint64_t v = 0;
    memcpy(&v, p, 5);
    return v;
}

static inline void sl__st40(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 5);
}

/* Fills the six fields (SPEC 3): remaining clamped at 0, retry only when
 * denied, delay only when allowed. */
static inline void sl__answer(sl_result *out, int allowed, int64_t limit, int64_t remaining,
                              int64_t retry, int64_t reset, int64_t delay)
{
    out->allowed = allowed;
    out->limit = limit;
    out->remaining = remaining < 0 ? 0 : remaining;
    out->retry_after_ms = allowed ? 0 : retry;
    out->reset_after_ms = reset;
    out->delay_ms = allowed ? delay : 0;
}

/* fixed-window: state u40 count of the window holding the key's clock. */
SL__HOT_INLINE void sl__fixed_window(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                                     int64_t cost, int commit, sl_result *out)
{
    int64_t W = n->W, L = n->L;
    int64_t i = sl__fdiv(t, W);
    int64_t count = (st && sl__fdiv(clock_old, W) == i) ? (int64_t)sl__ld40(st) : 0;
    int allowed = count + cost <= L;
    if (allowed) count += cost;
    int64_t to_end = (i + 1) * W - t;
    sl__answer(out, allowed, L, L - count, cost > L ? -1 : to_end, count ? to_end : 0, 0);
    if (commit) sl__st40(st, (uint64_t)count);
}

/* The bucket state: q (u40) then r (u40), the quantity q*W + r (engine.c
 * explains it), written as one 8-byte and one 2-byte store.  r < W <
 * 2^39, so r's top bit is free: set (SL__BUCKET_DEBT), q*W + (r without
 * it) is a debt beyond an empty bucket, which only a settle's charge
 * makes (sl__engine_adjust); decisions on such a state take the general
 * path (engine.c).  A state that never saw a settle never has it. */
#define SL__BUCKET_DEBT ((uint64_t)1 << 39)

static inline void sl__bucket_put(uint8_t *st, uint64_t q, uint64_t r)
{
    sl__st64(st, (q & SL__U40_MASK) | r << 40);
    sl__st16(st + 8, (uint16_t)(r >> 24));
}

/*
 * token-bucket (mode 0), leaky-bucket (1) and gcra (2) in 64-bit arithmetic
 * only.  Valid when B*W < 2^62 and cost <= B (sl__bucket64_fits): every
 * quantity below (d + cost*W <= 2*B*W) then fits in 63 bits, so no 128-bit
 * step, saturation or -1 retry is needed.  d is the deficit (token bucket),
 * the level (leaky bucket) or TAT - t (gcra), in 1/W of a request and
 * clamped to [0, B*W].  The answers are exactly those of the general paths
 * in engine.c, which the randomized model tests check on both sides of the
 * 2^62 line.  Returns 0, or 1 before reading further or writing anything
 * when the state holds a debt (SL__BUCKET_DEBT, found in the test for a
 * malformed r that was already there: no cost on the hot path): the
 * caller then takes the general path.
 */
static inline int sl__bucket64_fits(const sl__norm *n, int64_t cost)
{
    return n->bw64 != 0 && cost <= n->B;
}

SL__HOT_INLINE int sl__bucket64(uint8_t *st, const sl__norm *n, int mode, int tokens_stored,
                                 int64_t clock_old, int64_t t, int64_t cost,
                                 int commit, sl_result *out)
{
    uint64_t W = (uint64_t)n->W, L = (uint64_t)n->L, B = (uint64_t)n->B, BW = n->bw64;
    uint64_t d = 0;
    if (st != NULL && (mode != 0 || tokens_stored)) {
        uint64_t lo = sl__ld64(st);
        uint64_t dw = lo & SL__U40_MASK, dr = lo >> 40 | (uint64_t)sl__ld16(st + 8) << 24;
        if (__builtin_expect(dr >= W, 0)) {
            if (dr & SL__BUCKET_DEBT) return 1;
            dr = W - 1;
        }
        d = dw > B ? BW : dw * W + dr; /* dw <= B: at most BW + W - 1 < 2^63 */
        if (d > BW) d = BW;
        if (mode == 0) d = BW - d; /* stored tokens -> deficit */
    }
    uint64_t refill;
    if (__builtin_mul_overflow((uint64_t)(t - clock_old), L, &refill)) refill = UINT64_MAX;
    d = refill >= d ? 0 : d - refill;

    uint64_t before = d, cW = (uint64_t)cost * W;
    int allowed = d + cW <= BW;
    if (allowed) d += cW;
    int64_t retry = 0, delay = 0;
    if (!allowed)
        retry = (int64_t)sl__ceil64(before + cW - BW, L);
    else if (mode == 1)
        delay = (int64_t)sl__ceil64(before, L);
    uint64_t v = mode == 0 ? BW - d : d; /* what is stored */
    uint64_t q = v / W, r = v % W;
    int64_t remaining = mode == 0 ? (int64_t)q : (int64_t)(B - q) - (r != 0);
    sl__answer(out, allowed, n->B, remaining, retry, (int64_t)sl__ceil64(d, L), delay);
    if (commit) sl__bucket_put(st, q, r);
    return 0;
}

/* token-bucket's state holds its tokens once the record carries
 * SL__REC_F1; a record without it holds a deficit of 0 (a fresh record's
 * zeros, engine.c).  sl__tokens_stored says which, from the record's meta
 * as its holder knows it (*meta); sl__tokens_mark sets the flag at the
 * first committed decision, in the record and in *meta.  Used by both
 * bucket paths. */
static inline int sl__tokens_stored(uint16_t meta, const uint8_t *st)
{
    return st != NULL && ((meta >> 13) & SL__REC_F1);
}

static inline void sl__tokens_mark(uint8_t *r, uint16_t *meta, sl_algo a, int stored,
                                   int commit)
{
    if (commit && a == SL_TOKEN_BUCKET && !stored) {
        *meta = (uint16_t)(*meta | SL__REC_F1 << 13);
        sl__rec_meta_set(r, *meta);
    }
}

/* Decides a request of `cost` at effective time t (>= clock_old) on the
 * record r (NULL: the key has none and commit is 0).  a is n->algo, passed
 * apart so that a caller that knows it as a constant (limiter.c's
 * per-algorithm paths) gets this compiled for that one algorithm alone.
 * clock_old is the key's clock before this request (== t for a new key).  commit != 0
 * writes the new state (allowed, or logged), 0 only answers.  Returns 0,
 * or SL_ENOMEM when a sliding-log buffer could not grow (nothing changed).
 * sh is the record's shard, lock held (NULL on the quick way: not for
 * sliding-log).  *meta is r's meta as its holder last saw or wrote it, kept
 * up to date here: the inline paths never read the meta back (a load of
 * the word just taken with a locked instruction waits for that
 * instruction: ~2-5 ns a decision, measured). */
SL__HOT_INLINE int sl__engine_decide(sl__shard *sh, uint8_t *r, uint16_t *meta, const sl__norm *n,
                                     sl_algo a, int64_t clock_old, int64_t t, int64_t cost,
                                     int commit, sl_result *out)
{
    uint8_t *st = r ? r + SL__REC_HDR + (*meta & 0x1ff) + 1 : NULL;
    switch (a) {
    case SL_FIXED_WINDOW: sl__fixed_window(st, n, clock_old, t, cost, commit, out); return 0;
    case SL_GCRA:
        if (!sl__bucket64_fits(n, cost) || sl__bucket64(st, n, 2, 0, clock_old, t, cost, commit, out))
            break;
        return 0;
    case SL_TOKEN_BUCKET:
    case SL_LEAKY_BUCKET: {
        if (!sl__bucket64_fits(n, cost)) break;
        int stored = sl__tokens_stored(*meta, st);
        if (sl__bucket64(st, n, a != SL_TOKEN_BUCKET, stored, clock_old, t, cost, commit, out))
            break;
        sl__tokens_mark(r, meta, a, stored, commit);
        return 0;
    }
    default: break;
    }
    int rc = sl__engine_decide_general(sh, r, n, clock_old, t, cost, commit, out);
    if (r) *meta = sl__rec_meta(r); /* the general paths may set flags */
    return rc;
}

#endif
