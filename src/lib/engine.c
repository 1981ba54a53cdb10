/*
 * engine.c -- the seven algorithms of SPEC section 2, exact.
 *
 * Every algorithm keeps its state normalised at the key's clock: when a
 * request arrives at effective time t (>= the clock) the state is first
 * advanced to t (windows rolled, tokens refilled, expired log entries
 * dropped), which never changes any answer, then the request is decided.
 * All arithmetic is integer; products that can pass 2^63 use 128 bits.
 *
 * State layouts (little-endian, unaligned, after the key in the record):
 *   fixed-window     count:u40
 *   sliding-window   n:u40 p:u40            (this window, previous window)
 *   sliding-buckets  P:u16 width:u8 sum:u64 count[P]:width bytes each
 *   token-bucket     dw:u40 dr:u40          tokens = dw + dr/W (SL__REC_F1 set;
 *                                          unset: a full bucket)
 *   leaky-bucket     dw:u40 dr:u40          level   = dw + dr/W requests
 *   gcra             dw:u40 dr:u40          TAT = clock + (dw*W + dr)/L ms
 *   (the three buckets: dr's bit 39 set, SL__BUCKET_DEBT, makes dw*W + dr
 *   a debt beyond an empty bucket instead: only a settle writes it)
 *   sliding-log      buf:ptr cap:u32 head:u32 used:u32 sum:u64
 *                    first:i64 last:i64     (see the log section below)
 * A zero state is a fresh key: empty window, full bucket, empty queue.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "holds.h" /* sl__engine_adjust */
#include "lone.h"  /* sl__engine_bucket_hold, sl__engine_bucket_give */

__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

/* ---- arithmetic --------------------------------------------------------- */

static inline u128 udiv(u128 a, uint64_t b)
{
    return (a >> 64) == 0 ? (u128)((uint64_t)a / b) : a / b;
}

static inline u128 ceildiv(u128 a, uint64_t b)
{
    u128 q = udiv(a, b);
    return q * b == a ? q : q + 1;
}

/* Clamps to int64 (answers past 2^63 ms cannot be written as int64). */
static inline int64_t sat(u128 v)
{
    return v > (u128)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* ---- sliding-window (weighted two-window counter) ----------------------- */

/* floor(p * x / W) with 128-bit intermediate. */
static inline int64_t weigh(int64_t p, int64_t x, int64_t W)
{
    return (int64_t)udiv((u128)p * (u128)x, (uint64_t)W);
}

/* Smallest offset e in [0, W] into a window whose previous-window count is p
 * at which floor(p * (W - e) / W) <= r (r >= 0). */
static int64_t weighed_below(int64_t p, int64_t r, int64_t W)
{
    if (p == 0) return 0;
    /* p*(W-e) < (r+1)*W  <=>  W - e <= floor(((r+1)*W - 1) / p) */
    u128 k = udiv((u128)(r + 1) * (u128)W - 1, (uint64_t)p);
    return k >= (u128)W ? 0 : W - (int64_t)k;
}

static void sliding_window(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                           int64_t cost, int commit, sl_result *out)
{
    int64_t W = n->W, L = n->L;
    int64_t i = sl__fdiv(t, W), io = sl__fdiv(clock_old, W);
    int64_t cur = 0, prev = 0;
    if (st && i == io) {
        cur = (int64_t)sl__ld40(st);
        prev = (int64_t)sl__ld40(st + 5);
    } else if (st && i == io + 1) {
        prev = (int64_t)sl__ld40(st);
    }
    int64_t e = t - i * W, start_next = (i + 1) * W;
    int64_t used = cur + weigh(prev, W - e, W);
    int allowed = used + cost <= L;
    if (allowed) {
        cur += cost;
        used += cost;
    }

    int64_t retry = -1;
    if (!allowed && cost <= L) {
        int64_t r = L - cost - cur, e1;
        if (r >= 0 && (e1 = weighed_below(prev, r, W)) < W && e1 > e) {
            retry = e1 - e; /* later in this window, as prev's weight fades */
        } else {
            int64_t e2 = weighed_below(cur, L - cost, W); /* next window: cur weighs */
            retry = e2 < W ? start_next + e2 - t : start_next + W - t;
        }
    }
    int64_t reset;
    if (cur > 0)
        reset = start_next + weighed_below(cur, 0, W) - t;
    else
        reset = max64(weighed_below(prev, 0, W), e) - e;

    sl__answer(out, allowed, L, L - used, retry, reset, 0);
    if (commit) {
        sl__st40(st, (uint64_t)cur);
        sl__st40(st + 5, (uint64_t)prev);
    }
}

/* ---- sliding-buckets ---------------------------------------------------- */

#define SB_HDR 11 /* P:u16 width:u8 sum:u64 */

static unsigned sb_width(int64_t L)
{
    return L <= 0xff ? 1 : L <= 0xffff ? 2 : L <= 0xffffffffLL ? 4 : 8;
}

static inline uint64_t sb_get(const uint8_t *c, unsigned w, int64_t j)
{
    uint64_t v = 0;
    memcpy(&v, c + (size_t)j * w, w);
    return v;
}

static inline void sb_set(uint8_t *c, unsigned w, int64_t j, uint64_t v)
{
    memcpy(c + (size_t)j * w, &v, w);
}

static void sliding_buckets(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                            int64_t cost, int commit, sl_result *out)
{
    int64_t L = n->L, P = n->P, g = n->W / n->P;
    unsigned w = st ? st[2] : 1;
    uint8_t *c = st ? st + SB_HDR : NULL;
    int64_t sum = st ? (int64_t)sl__ld64(st + 3) : 0;
    int64_t b = sl__fdiv(t, g), bo = sl__fdiv(clock_old, g);

    /* Roll forward: buckets bo+1..b are new (zero).  In answer-only mode the
     * stale buckets are skipped when reading instead of cleared. */
    int64_t stale = b - bo >= P ? P : b - bo; /* buckets to forget */
    if (c && stale == P) { /* the whole window passed: O(1) but for the clearing */
        sum = 0;
        if (commit) memset(c, 0, (size_t)P * w);
    } else if (c && stale > 0) {
        for (int64_t k = 1; k <= stale; k++) {
            int64_t j = (bo + k) % P;
            j = j < 0 ? j + P : j;
            sum -= (int64_t)sb_get(c, w, j);
            if (commit) sb_set(c, w, j, 0);
        }
    }
#define SB_COUNT(bk) /* count of absolute bucket bk in (b-P, b] */                       \
    ((c == NULL || (bk) > bo) ? 0 : (int64_t)sb_get(c, w, ((bk) % P + P) % P))

    int allowed = sum + cost <= L;
    if (allowed) {
        sum += cost;
        if (commit && cost > 0) {
            int64_t j = (b % P + P) % P;
            sb_set(c, w, j, (uint64_t)SB_COUNT(b) + (uint64_t)cost);
        }
    }
    int64_t retry = -1;
    if (!allowed && cost <= L) {
        int64_t need = sum + cost - L, freed = 0; /* the oldest buckets expire first */
        for (int64_t k = 1; k <= P; k++) {
            freed += SB_COUNT(b - P + k);
            if (freed >= need) {
                retry = (b + k) * g - t;
                break;
            }
        }
    }
    int64_t reset = 0;
    if (sum > 0) {
        int64_t j = b;
        while (j > b - P && SB_COUNT(j) == 0 && !(allowed && cost > 0 && j == b)) j--;
        reset = (j + P) * g - t;
    }
#undef SB_COUNT
    sl__answer(out, allowed, L, L - sum, retry, reset, 0);
    if (commit) sl__st64(st + 3, (uint64_t)sum);
}

/* ---- token-bucket, leaky-bucket, gcra ----------------------------------- */

/* The three share one exact quantity, kept in units of 1/W of a request:
 * the token bucket's tokens, the leaky bucket's level, and GCRA's TAT -
 * clock in units of 1/L ms (the same number as the token bucket's deficit).  It is stored split as dw*W + dr so that a change of window keeps
 * the whole part.
 *
 * The two u40 fields are read as one 8-byte load (dw and dr's low 24 bits)
 * and one 2-byte load (dr's high 16 bits), and written the same way: the
 * accesses cover exactly the state's 10 bytes, never beyond. */

static inline u128 bucket_load(const uint8_t *st, const sl__norm *n)
{
    if (st == NULL) return 0;
    uint64_t lo = sl__ld64(st), W = (uint64_t)n->W, B = (uint64_t)n->B;
    uint64_t dw = lo & SL__U40_MASK, dr = lo >> 40 | (uint64_t)sl__ld16(st + 8) << 24;
    if (dr >= W) dr = W - 1;
    uint64_t d, BW;
    /* The common case, everything within 64 bits (W*B < 2^64). */
    if (!__builtin_mul_overflow(B, W, &BW) && dw <= B) {
        d = dw * W + dr; /* <= B*W + W - 1: may pass BW, not 2^64 - 1 ... */
        if (d >= dw * W) return d > BW ? BW : d; /* ... unless it wrapped */
    }
    u128 dd = (u128)dw * W + dr, bw = (u128)B * W;
    return dd > bw ? bw : dd; /* capacity clamped */
}

/* d = q*W + r, with one 64-bit division when d fits in 64 bits. */
static inline void bucket_split(u128 d, uint64_t W, uint64_t *q, uint64_t *r)
{
    if ((uint64_t)(d >> 64) == 0) {
        *q = (uint64_t)d / W;
        *r = (uint64_t)d % W;
    } else {
        u128 qq = d / W;
        *q = (uint64_t)qq;
        *r = (uint64_t)(d - qq * W);
    }
}

/* The largest debt a state holds (SL__BUCKET_DEBT): q at its u40 top.
 * About 10^12 requests beyond empty -- SL_MAX_LIMIT; more saturates. */
static inline u128 debt_max(uint64_t W)
{
    return (u128)SL__U40_MASK * W + (W - 1);
}

/* The deficit d of a bucket state at the key's clock, in 1/W of a request:
 * capacity minus tokens (token-bucket), the level (leaky-bucket), TAT -
 * clock (gcra).  In [0, B*W] but for a state holding a debt E
 * (SL__BUCKET_DEBT: a settle charged past empty), which is B*W + E --
 * kept whatever B is now.  tb_full: a token bucket not yet marked
 * SL__REC_F1 (a full bucket, d = 0). */
static u128 bucket_deficit(const uint8_t *st, const sl__norm *n, int tb, int tb_full)
{
    u128 BW = (u128)n->B * (uint64_t)n->W;
    if (st == NULL || tb_full) return 0;
    if (st[9] & 0x80) { /* the debt bit, r's bit 39 */
        uint64_t lo = sl__ld64(st), W = (uint64_t)n->W;
        uint64_t dw = lo & SL__U40_MASK, dr = (lo >> 40 | (uint64_t)sl__ld16(st + 8) << 24) & ~SL__BUCKET_DEBT;
        if (dr >= W) dr = W - 1;
        return BW + (u128)dw * W + dr;
    }
    return tb ? BW - bucket_load(st, n) : bucket_load(st, n);
}

/* Writes deficit d as bucket_deficit reads it: past B*W, as a debt
 * (saturated at debt_max). */
static void bucket_put_deficit(uint8_t *st, const sl__norm *n, int tb, u128 d)
{
    uint64_t W = (uint64_t)n->W, q, r;
    u128 BW = (u128)n->B * W;
    if (d > BW) {
        u128 e = d - BW, em = debt_max(W);
        bucket_split(e > em ? em : e, W, &q, &r);
        sl__bucket_put(st, q, r | SL__BUCKET_DEBT);
        return;
    }
    bucket_split(tb ? BW - d : d, W, &q, &r);
    sl__bucket_put(st, q, r);
}

/* Token bucket and leaky bucket: the same decision on the deficit d (capacity
 * minus tokens; the leaky bucket's level).  The leaky bucket stores d (zero:
 * an empty queue); the token bucket stores its tokens, so that a change of
 * capacity keeps them (clamped), and marks the record SL__REC_F1 once it
 * holds any (before that the bucket is full).  A debt (d > B*W) denies
 * until it and the cost have refilled. */
static void token_bucket(uint8_t *st, const sl__norm *n, int tokens_stored, int64_t clock_old,
                         int64_t t, int64_t cost, int commit, sl_result *out)
{
    uint64_t W = (uint64_t)n->W, L = (uint64_t)n->L;
    u128 BW = (u128)n->B * W, cW = (u128)cost * W;
    int tb = n->algo == SL_TOKEN_BUCKET;
    u128 d = bucket_deficit(st, n, tb, tb && !tokens_stored);
    u128 refill = (u128)(uint64_t)(t - clock_old) * L;
    d = refill >= d ? 0 : d - refill;

    u128 before = d;
    int allowed = d + cW <= BW;
    if (allowed) d += cW;
    int64_t retry = 0, delay = 0;
    if (!allowed) retry = cost > n->B ? -1 : sat(ceildiv(before + cW - BW, L));
    else if (!tb) delay = sat(ceildiv(before, L));
    int64_t remaining = 0;
    if (d <= BW) { /* the stored quantity's whole part */
        uint64_t q, r;
        bucket_split(tb ? BW - d : d, W, &q, &r);
        remaining = tb ? (int64_t)q : n->B - (int64_t)q - (r != 0);
    }
    sl__answer(out, allowed, n->B, remaining, retry, sat(ceildiv(d, L)), delay);
    if (commit) bucket_put_deficit(st, n, tb, d);
}

/* GCRA: a request is conforming iff its arrival is no earlier than TAT minus
 * the tolerance; conforming requests push TAT by cost emission intervals.
 * Times are in units of 1/L ms, so the emission interval is W units and the
 * burst tolerance plus one interval is B*W units.  A debt is a TAT more
 * than B*W ahead of the clock. */
static void gcra(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t, int64_t cost,
                 int commit, sl_result *out)
{
    int64_t L = n->L;
    uint64_t W = (uint64_t)n->W;
    i128 now = (i128)t * L;
    i128 tat = (i128)clock_old * L + (i128)bucket_deficit(st, n, 0, 0);
    i128 limit = (i128)n->B * (i128)W; /* tau + T */
    i128 base = tat > now ? tat : now;
    i128 next = base + (i128)cost * (i128)W;
    int allowed = next - now <= limit;
    if (allowed) tat = next;

    u128 ahead = tat > now ? (u128)(tat - now) : 0; /* TAT - t */
    int64_t retry = 0;
    if (!allowed) retry = cost > n->B ? -1 : sat(ceildiv((u128)(next - now - limit), (uint64_t)L));
    int64_t remaining = ahead > (u128)limit ? 0 : (int64_t)udiv((u128)limit - ahead, W);
    sl__answer(out, allowed, n->B, remaining, retry, sat(ceildiv(ahead, (uint64_t)L)), 0);
    if (commit) bucket_put_deficit(st, n, 0, ahead);
}

/* ---- sliding-log -------------------------------------------------------- */

/* The log is a ring of bytes outside the record.  Each entry is a LEB128
 * varint of (dt << 1 | has_cost), dt = its time minus the previous entry's
 * time (0 for the first), followed by a varint cost when cost != 1.  The
 * state keeps the sum of the costs, the time of the first and last entries,
 * so a decision reads only the entries that expire (amortised O(1)) and a
 * denied request's wait reads only as many entries as its cost needs.  At
 * 500 requests an hour an entry takes about 2 bytes.
 *
 * Invariant: every entry is inside (clock - W, clock]; plain logs have sum <=
 * L after each accepted request; logs of rejected requests are trimmed to the
 * newest entries whose costs exceed L (older ones can never matter).
 *
 * The ring's capacity is any multiple of LOG_CAP_STEP and grows by a quarter,
 * so it wastes ~1/8 of the bytes used on average (doubling wastes ~1/3: at
 * 500 requests an hour that was 4.7 B a request instead of ~3.0); offsets
 * wrap with a compare (log_at), not a mask.  Growing copies the ring into a
 * new buffer, ~4 bytes copied per byte appended over a ring's life: cheap
 * beside a decision, and measured to fragment the heap less than realloc
 * (resident bytes 3.7 against 4.0 a request). */
typedef struct sl_log {
    uint8_t *buf;
    uint32_t cap, head, used; /* bytes; head < cap, used <= cap */
    int64_t sum, first, last; /* sum of costs; times of first, last entry */
} sl_log;

#define LOG_ENTRY_MAX 20 /* two 10-byte varints */
#define LOG_MIN_CAP 32   /* bytes: a new ring */
#define LOG_CAP_STEP 16  /* bytes: capacities are multiples of this */
#define LOG_MAX_CAP (1u << 30)

/* The buffer index of ring offset pos, for pos < 2 * cap (head + used is). */
static inline uint32_t log_at(const sl_log *lg, uint32_t pos)
{
    return pos < lg->cap ? pos : pos - lg->cap;
}

/* The capacity a ring grows to when it must hold need bytes: 1.25x its
 * current one (at least LOG_MIN_CAP) and at least need, rounded up to a
 * multiple of LOG_CAP_STEP.  0 beyond LOG_MAX_CAP. */
static uint32_t log_grown_cap(uint32_t cap, uint32_t need)
{
    uint64_t c = cap ? (uint64_t)cap + cap / 4 : LOG_MIN_CAP;
    if (c < need) c = need;
    c = (c + LOG_CAP_STEP - 1) / LOG_CAP_STEP * LOG_CAP_STEP;
    return c > LOG_MAX_CAP ? 0 : (uint32_t)c;
}

static void log_load(const uint8_t *st, sl_log *lg)
{
    if (st == NULL) {
        memset(lg, 0, sizeof(*lg));
        return;
    }
    memcpy(&lg->buf, st, sizeof(lg->buf));
    lg->cap = sl__ld32(st + 8);
    lg->head = sl__ld32(st + 12);
    lg->used = sl__ld32(st + 16);
    lg->sum = (int64_t)sl__ld64(st + 20);
    lg->first = (int64_t)sl__ld64(st + 28);
    lg->last = (int64_t)sl__ld64(st + 36);
}

static void log_save(uint8_t *st, const sl_log *lg)
{
    memcpy(st, &lg->buf, sizeof(lg->buf));
    sl__st32(st + 8, lg->cap);
    sl__st32(st + 12, lg->head);
    sl__st32(st + 16, lg->used);
    sl__st64(st + 20, (uint64_t)lg->sum);
    sl__st64(st + 28, (uint64_t)lg->first);
    sl__st64(st + 36, (uint64_t)lg->last);
}

/* Reads a varint at ring offset *pos (advanced). */
static uint64_t log_varint(const sl_log *lg, uint32_t *pos)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        uint8_t byte = lg->buf[log_at(lg, *pos)];
        (*pos)++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) return v;
    }
}

/* Decodes the entry at ring offset *pos: its dt and cost. */
static void log_entry(const sl_log *lg, uint32_t *pos, int64_t *dt, int64_t *cost)
{
    uint64_t v = log_varint(lg, pos);
    *dt = (int64_t)(v >> 1);
    *cost = (v & 1) ? (int64_t)log_varint(lg, pos) : 1;
}

/* Removes the first entry. */
static void log_pop(sl_log *lg)
{
    int64_t dt, cost;
    uint32_t pos = lg->head;
    log_entry(lg, &pos, &dt, &cost);
    lg->used -= pos - lg->head;
    lg->head = log_at(lg, pos);
    lg->sum -= cost;
    if (lg->used > 0) {
        uint32_t p2 = lg->head;
        log_entry(lg, &p2, &dt, &cost);
        lg->first += dt;
    }
}

/* Drops entries that are no longer inside (t - W, t]. */
static void log_expire(sl_log *lg, int64_t t, int64_t W)
{
    while (lg->used > 0 && lg->first <= t - W) log_pop(lg);
}

static unsigned put_varint(uint8_t *p, uint64_t v)
{
    unsigned n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* The entry (t, cost) appended to lg, encoded in tmp: its length. */
static unsigned log_encode(const sl_log *lg, int64_t t, int64_t cost, uint8_t tmp[LOG_ENTRY_MAX])
{
    int64_t dt = lg->used ? t - lg->last : 0;
    unsigned len = put_varint(tmp, ((uint64_t)dt << 1) | (cost != 1));
    if (cost != 1) len += put_varint(tmp + len, (uint64_t)cost);
    return len;
}

/* Grows the ring (from the store, counted by the shard) when it must hold
 * `need` bytes, its entries kept.  Returns 0, or SL_ENOMEM / SL_EFULL (no
 * room: sl__shard_reserve) with the log unchanged. */
static int log_grow(sl__shard *sh, const uint8_t *rec, sl_log *lg, uint32_t need, int64_t now)
{
    if (need <= lg->cap) return 0;
    uint32_t cap = lg->cap, ncap = log_grown_cap(cap, need);
    if (ncap == 0) return SL_ENOMEM;
    /* the old ring is freed only after the copy: room for the whole new one */
    int rc = sl__shard_reserve(sh, sl__ext_cost(ncap), rec, now);
    if (rc != 0) return rc;
    uint8_t *nb = sl__ext_alloc(sh, ncap);
    if (nb == NULL) return SL_ENOMEM;
    uint32_t tail = cap - lg->head; /* bytes from head to the old end */
    if (lg->used > tail) {          /* wrapped: two pieces */
        memcpy(nb, lg->buf + lg->head, tail);
        memcpy(nb + tail, lg->buf, lg->used - tail);
    } else if (lg->used > 0) {
        memcpy(nb, lg->buf + lg->head, lg->used);
    }
    sl__ext_free(sh, lg->buf, cap);
    lg->buf = nb;
    lg->cap = ncap;
    lg->head = 0;
    return 0;
}

/* Appends (t, cost), growing the ring.  Returns 0, or SL_ENOMEM / SL_EFULL
 * with the log unchanged. */
static int log_append(sl__shard *sh, const uint8_t *rec, sl_log *lg, int64_t t, int64_t cost,
                      int64_t now)
{
    uint8_t tmp[LOG_ENTRY_MAX];
    unsigned len = log_encode(lg, t, cost, tmp);
    int rc = log_grow(sh, rec, lg, lg->used + len, now);
    if (rc != 0) return rc;
    uint32_t at = log_at(lg, lg->head + lg->used);
    for (unsigned k = 0; k < len; k++) {
        lg->buf[at] = tmp[k];
        if (++at == lg->cap) at = 0;
    }
    if (lg->used == 0) lg->first = t;
    lg->used += len;
    lg->last = t;
    lg->sum += cost;
    return 0;
}

/* Time of the entry at which the entries, oldest first, first sum to >=
 * need; t if they never do (the caller counts a not-yet-appended entry at t
 * last). */
static int64_t log_expiry_of(const sl_log *lg, int64_t need, int64_t t)
{
    int64_t freed = 0, at = lg->first, dt, cost;
    uint32_t pos = lg->head, end = lg->head + lg->used;
    for (int i = 0; pos != end; i++) {
        log_entry(lg, &pos, &dt, &cost);
        if (i > 0) at += dt;
        freed += cost;
        if (freed >= need) return at;
    }
    return t;
}

/* Whether a request of cost on lg (expired to its time) is appended to
 * it, and whether it is allowed (*allowed). */
static int log_logs(const sl_log *lg, const sl__norm *n, int64_t cost, int *allowed)
{
    *allowed = lg->sum + cost <= n->L;
    return n->log_rejected ? cost > 0 : *allowed && cost > 0;
}

int sl__engine_log_room(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t t, int64_t cost)
{
    uint8_t *st = sl__rec_state(r), tmp[LOG_ENTRY_MAX];
    sl_log lg, x;
    log_load(st, &lg);
    x = lg;
    log_expire(&x, t, n->W); /* as sliding_log will, on a copy */
    int allowed;
    if (!log_logs(&x, n, cost, &allowed)) return 0;
    /* the capacity sliding_log's append would grow x's ring to holds all
     * of lg's entries too (log_grown_cap: at least 1.25 times the old) */
    int rc = log_grow(sh, r, &lg, x.used + log_encode(&x, t, cost, tmp), t);
    if (rc == 0) log_save(st, &lg);
    return rc;
}

static int sliding_log(sl__shard *sh, uint8_t *rec, uint8_t *st, const sl__norm *n, int64_t t,
                       int64_t cost, int commit, sl_result *out)
{
    int64_t L = n->L, W = n->W;
    sl_log lg;
    log_load(st, &lg);
    log_expire(&lg, t, W); /* on a copy: the state changes only if committed */

    int allowed, logged = log_logs(&lg, n, cost, &allowed);
    int64_t sum = lg.sum + (n->log_rejected || allowed ? cost : 0), last = lg.last;
    if (logged) last = t;
    /* An entry not in the ring yet (answer-only, or not appended yet) is the
     * newest; it expires last, at t + W. */
    int64_t retry = -1;
    if (!allowed && cost <= L) {
        /* The retried request must fit: expire entries until sum + cost <= L
         * (for log-rejected the retry is itself logged, hence the same
         * formula with this request already in sum). */
        int64_t need = (n->log_rejected ? sum : lg.sum) + cost - L;
        retry = (need > lg.sum ? t : log_expiry_of(&lg, need, t)) + W - t;
    }
    int64_t reset = sum > 0 ? last + W - t : 0;
    sl__answer(out, allowed, L, L - sum, retry, reset, 0);

    if (!commit) return 0;
    if (logged) {
        int rc = log_append(sh, rec, &lg, t, cost, t);
        if (rc != 0) return rc;
        if (n->log_rejected) {
            /* Keep only the newest entries whose costs exceed L. */
            for (;;) {
                int64_t dt, c1;
                uint32_t pos = lg.head;
                log_entry(&lg, &pos, &dt, &c1);
                if (lg.sum - c1 < L + 1) break;
                log_pop(&lg);
            }
        }
    }
    log_save(st, &lg);
    return 0;
}

/* ---- dispatch ----------------------------------------------------------- */

void sl__norm_from(sl__norm *n, const sl_params *p)
{
    n->algo = p->algo;
    n->L = p->limit;
    n->W = p->window_ms;
    n->B = p->burst ? p->burst : p->limit;
    n->P = p->precision ? p->precision : SL_DEFAULT_PRECISION;
    n->log_rejected = p->log_rejected != 0;
    n->kind = (unsigned)p->algo | (p->space ? SL__KIND_SPACE : 0);
    uint64_t bw;
    n->bw64 = __builtin_mul_overflow((uint64_t)n->B, (uint64_t)n->W, &bw) || bw >= (uint64_t)1 << 62
                  ? 0
                  : bw;
    n->big = n->algo == SL_SLIDING_LOG || n->algo == SL_SLIDING_BUCKETS ? sl__state_max(n) : 0;
}

uint64_t sl__state_max(const sl__norm *n)
{
    /* the header, a wide clock's room (store.h), the longest key, the state */
    uint64_t rec = SL__REC_HDR + SL__CLOCK_WIDE_BYTES + SL_MAX_KEY + sl__state_len(n) + 1;
    if (n->algo != SL_SLIDING_LOG) return rec;
    /* Entries: at most L, or L + 1 kept by log-rejected, plus the one being
     * appended.  A time gap is below W, its varint (of 2 * gap + 1) at most
     * varint_len(2W) bytes; and a varint of x takes at most 1 + x / 127
     * bytes, while the gaps sum below 2W (the entries span less than W, the
     * first one's gap is below W): the gaps take at most the smaller of
     * e * varint_len(2W) and e + (4W + e) / 127 bytes.  The costs -- a
     * varint only for a cost of 2 or more, their sum at most L but for the
     * first entry and the new one, 6 bytes each at most -- take at most the
     * smaller of L / 2 * varint_len(L) and L / 2 + L / 127, plus 12. */
    uint64_t L = (uint64_t)n->L, W = (uint64_t)n->W, e = L + 2;
    uint8_t tmp[10];
    uint64_t gaps = e * put_varint(tmp, 2 * W), gaps2 = e + (4 * W + e) / 127;
    uint64_t costs = L / 2 * put_varint(tmp, L), costs2 = L / 2 + L / 127;
    uint64_t used =
        (gaps < gaps2 ? gaps : gaps2) + (costs < costs2 ? costs : costs2) + 12 + LOG_ENTRY_MAX;
    uint64_t cap = used + used / 4 + LOG_CAP_STEP; /* grown by a quarter at most */
    if (cap > LOG_MAX_CAP) cap = LOG_MAX_CAP;      /* a ring never grows past it */
    return rec + sl__ext_cost((size_t)cap);
}

size_t sl__state_len(const sl__norm *n)
{
    switch (n->algo) {
    case SL_FIXED_WINDOW: return 5;
    case SL_SLIDING_LOG: return 44;
    case SL_SLIDING_BUCKETS: return SB_HDR + (size_t)n->P * sb_width(n->L);
    default: return 10;
    }
}

size_t sl__state_need(const uint8_t *st, const sl__norm *n)
{
    if (n->algo != SL_SLIDING_BUCKETS) return 0;
    unsigned w = st[2], nw = sb_width(n->L);
    if (w != 0 && sl__ld16(st) == (uint64_t)n->P && w >= nw) return 0;
    return SB_HDR + (size_t)n->P * (w > nw ? w : nw);
}

void sl__state_adapt(uint8_t *st, const sl__norm *n, int64_t clock)
{
    if (n->algo != SL_SLIDING_BUCKETS) return;
    unsigned w = st[2], nw = sb_width(n->L);
    int64_t P = sl__ld16(st);
    if (w == 0) { /* fresh */
        sl__st16(st, (uint16_t)n->P);
        st[2] = (uint8_t)nw;
        return;
    }
    if (P == n->P) { /* wider counters: move them in place, from the top down */
        if (w >= nw) return;
        for (int64_t j = P - 1; j >= 0; j--) sb_set(st + SB_HDR, nw, j, sb_get(st + SB_HDR, w, j));
        st[2] = (uint8_t)nw;
        return;
    }
    /* A new precision: the window's count is kept, its spread over time is
     * not -- it all moves to the bucket of the key's latest time (the sum is
     * at most the old limit, so it fits the old width). */
    uint64_t sum = sl__ld64(st + 3);
    nw = nw > w ? nw : w;
    memset(st + SB_HDR, 0, (size_t)n->P * nw);
    sl__st16(st, (uint16_t)n->P);
    st[2] = (uint8_t)nw;
    int64_t j = sl__fdiv(clock, n->W / n->P) % n->P;
    sb_set(st + SB_HDR, nw, j < 0 ? j + n->P : j, sum);
}

int sl__engine_decide_general(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t clock_old,
                              int64_t t, int64_t cost, int commit, sl_result *out)
{
    uint8_t *st = r ? sl__rec_state(r) : NULL;
    switch (n->algo) {
    case SL_FIXED_WINDOW: sl__fixed_window(st, n, clock_old, t, cost, commit, out); return 0;
    case SL_SLIDING_WINDOW: sliding_window(st, n, clock_old, t, cost, commit, out); return 0;
    case SL_SLIDING_BUCKETS: sliding_buckets(st, n, clock_old, t, cost, commit, out); return 0;
    case SL_GCRA: gcra(st, n, clock_old, t, cost, commit, out); return 0;
    case SL_SLIDING_LOG: return sliding_log(sh, r, st, n, t, cost, commit, out);
    default: {
        uint16_t meta = r ? sl__rec_meta(r) : 0;
        int stored = sl__tokens_stored(meta, st);
        token_bucket(st, n, stored, clock_old, t, cost, commit, out);
        sl__tokens_mark(r, &meta, n->algo, stored, commit);
        return 0;
    }
    }
}

/* ---- snapshots: a record's state as portable bytes ---------------------- */

/* The sliding-log's state is dumped as its 44 bytes with the pointer
 * zeroed, head 0 and the capacity a load gives the ring (not the one it
 * grew to: a dump loaded and dumped again is the same bytes), followed by
 * the ring's used bytes in order. */
size_t sl__state_dump_len(const uint8_t *r)
{
    const uint8_t *st = r + SL__REC_HDR + sl__rec_klen(r);
    switch (sl__rec_algo(r)) {
    case SL_FIXED_WINDOW: return 5;
    case SL_SLIDING_LOG: return 44 + sl__ld32(st + 16);
    case SL_SLIDING_BUCKETS: return SB_HDR + (size_t)sl__ld16(st) * st[2];
    default: return 10;
    }
}

void sl__state_dump(const uint8_t *r, uint8_t *dst)
{
    const uint8_t *st = r + SL__REC_HDR + sl__rec_klen(r);
    if (sl__rec_algo(r) != SL_SLIDING_LOG) {
        memcpy(dst, st, sl__state_dump_len(r));
        return;
    }
    sl_log lg;
    log_load(st, &lg);
    for (uint32_t k = 0; k < lg.used; k++) dst[44 + k] = lg.buf[log_at(&lg, lg.head + k)];
    lg.buf = NULL;
    lg.head = 0;
    lg.cap = lg.used > 0 ? log_grown_cap(0, lg.used) : 0; /* as sl__state_load makes it */
    log_save(dst, &lg);
}

/* Checks that a dumped log's bytes decode to entries whose costs add up to
 * its sum and whose times end at its last time. */
static int log_check(const uint8_t *src, size_t len)
{
    sl_log lg;
    log_load(src, &lg);
    if (lg.used != len - 44 || lg.used > LOG_MAX_CAP) return -1;
    if (lg.used == 0) return lg.sum == 0 ? 0 : -1;
    int64_t sum = 0, at = lg.first;
    size_t pos = 44;
    for (int i = 0; pos < len; i++) {
        uint64_t v[2] = {0, 1};
        for (int part = 0; part < 2; part++) {
            if (part == 1 && !(v[0] & 1)) break;
            v[part] = 0;
            for (unsigned shift = 0;; shift += 7) {
                if (pos >= len || shift > 63) return -1;
                uint8_t byte = src[pos++];
                v[part] |= (uint64_t)(byte & 0x7f) << shift;
                if (!(byte & 0x80)) break;
            }
        }
        int64_t dt = (int64_t)(v[0] >> 1);
        if (i > 0) {
            if (dt > SL_MAX_TIME_MS || at > SL_MAX_TIME_MS - dt) return -1;
            at += dt;
        }
        if (v[1] > (uint64_t)SL_MAX_LIMIT * 4 || sum > INT64_MAX / 2) return -1;
        sum += (int64_t)v[1];
    }
    return sum == lg.sum && at == lg.last ? 0 : -1;
}

size_t sl__state_load_len(unsigned algo, const uint8_t *src, size_t len)
{
    switch (algo) {
    case SL_FIXED_WINDOW: return len == 5 ? 5 : 0;
    case SL_SLIDING_LOG: return len >= 44 && log_check(src, len) == 0 ? 44 : 0;
    case SL_SLIDING_BUCKETS: {
        if (len < SB_HDR) return 0;
        unsigned w = src[2];
        size_t P = sl__ld16(src);
        if ((w != 1 && w != 2 && w != 4 && w != 8) || P == 0 || len != SB_HDR + P * w) return 0;
        /* the sum is the counts' (every decision keeps it so) and at most a
         * limit: else no bucket's expiry would ever free what it claims */
        uint64_t sum = sl__ld64(src + 3), total = 0;
        if (sum > (uint64_t)SL_MAX_LIMIT) return 0;
        for (size_t j = 0; j < P; j++) {
            uint64_t c = sb_get(src + SB_HDR, w, (int64_t)j);
            if (c > sum - total) return 0;
            total += c;
        }
        return total == sum ? len : 0;
    }
    case SL_SLIDING_WINDOW:
    case SL_TOKEN_BUCKET:
    case SL_GCRA:
    case SL_LEAKY_BUCKET: return len == 10 ? 10 : 0;
    default: return 0;
    }
}

int sl__state_load(sl__shard *sh, uint8_t *r, const uint8_t *src, size_t len, int64_t now)
{
    uint8_t *st = sl__rec_state(r);
    if (sl__rec_algo(r) != SL_SLIDING_LOG) {
        memcpy(st, src, len);
        return 0;
    }
    sl_log lg;
    log_load(src, &lg);
    lg.buf = NULL;
    lg.cap = 0;
    lg.head = 0;
    if (lg.used > 0) {
        uint32_t cap = log_grown_cap(0, lg.used);
        int rc = sl__shard_reserve(sh, sl__ext_cost(cap), r, now);
        if (rc != 0) return rc;
        if ((lg.buf = sl__ext_alloc(sh, cap)) == NULL) return SL_ENOMEM;
        memcpy(lg.buf, src + 44, lg.used);
        lg.cap = cap;
    }
    log_save(st, &lg);
    return 0;
}

/* ---- charging and refunding outside a decision (holds.h) ----------------
 * sl__engine_adjust: settling a reservation (sl_charge).  The state is
 * first advanced to t exactly as a decision advances it (windows rolled,
 * buckets refilled), then delta is added (a charge, past the limit if it
 * must) or taken away (a refund: at most what the charge made at
 * charged_at still counts at t).  Counters saturate at what their fields
 * hold (u40, a sliding-buckets counter's width): every such counter is
 * then already above L, so no answer changes. */

static uint64_t add_sat(uint64_t v, uint64_t d, uint64_t max)
{
    return d > max - (v < max ? v : max) ? max : v + d;
}

static void adjust_fixed(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                         int64_t charged_at, int64_t delta)
{
    int64_t i = sl__fdiv(t, n->W);
    uint64_t count = sl__fdiv(clock_old, n->W) == i ? sl__ld40(st) : 0;
    if (delta > 0) {
        count = add_sat(count, (uint64_t)delta, SL__U40_MASK);
    } else if (sl__fdiv(charged_at, n->W) == i) {
        uint64_t take = (uint64_t)-delta;
        count -= take < count ? take : count;
    }
    sl__st40(st, count);
}

static void adjust_sliding_window(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                                  int64_t charged_at, int64_t delta)
{
    int64_t W = n->W, i = sl__fdiv(t, W), io = sl__fdiv(clock_old, W);
    uint64_t cur = 0, prev = 0;
    if (i == io) {
        cur = sl__ld40(st);
        prev = sl__ld40(st + 5);
    } else if (i == io + 1) {
        prev = sl__ld40(st);
    }
    if (delta > 0) {
        cur = add_sat(cur, (uint64_t)delta, SL__U40_MASK);
    } else {
        int64_t ic = sl__fdiv(charged_at, W);
        uint64_t take = (uint64_t)-delta, *c = ic == i ? &cur : ic == i - 1 ? &prev : NULL;
        if (c != NULL) *c -= take < *c ? take : *c;
    }
    sl__st40(st, cur);
    sl__st40(st + 5, prev);
}

/* The layout must be n's already (sl__state_need() == 0). */
static void adjust_sliding_buckets(uint8_t *st, const sl__norm *n, int64_t clock_old, int64_t t,
                                   int64_t charged_at, int64_t delta)
{
    int64_t P = n->P, g = n->W / n->P;
    unsigned w = st[2];
    uint8_t *c = st + SB_HDR;
    uint64_t sum = sl__ld64(st + 3);
    int64_t b = sl__fdiv(t, g), bo = sl__fdiv(clock_old, g);
    int64_t stale = b - bo >= P ? P : b - bo;
    if (stale == P) {
        sum = 0;
        memset(c, 0, (size_t)P * w);
    } else {
        for (int64_t k = 1; k <= stale; k++) {
            int64_t j = ((bo + k) % P + P) % P;
            sum -= sb_get(c, w, j);
            sb_set(c, w, j, 0);
        }
    }
    uint64_t cmax = w == 8 ? UINT64_MAX : ((uint64_t)1 << (8 * w)) - 1;
    if (delta > 0) {
        int64_t j = (b % P + P) % P;
        uint64_t v = sb_get(c, w, j), nv = add_sat(v, (uint64_t)delta, cmax);
        sb_set(c, w, j, nv);
        sum += nv - v;
    } else {
        int64_t bc = sl__fdiv(charged_at, g);
        if (bc > b - P && bc <= b) {
            int64_t j = (bc % P + P) % P;
            uint64_t v = sb_get(c, w, j), take = (uint64_t)-delta;
            take = take < v ? take : v;
            sb_set(c, w, j, v - take);
            sum -= take;
        }
    }
    sl__st64(st + 3, sum);
}

/* token-bucket, leaky-bucket and gcra, on the deficit d (token_bucket's and
 * gcra's quantity), in units of 1/W of a request: a charge past an empty
 * bucket is kept as a debt (bucket_deficit), a refund fills it to at most
 * full. */
static void adjust_bucket(uint8_t *r, uint16_t *meta, uint8_t *st, const sl__norm *n,
                          int64_t clock_old, int64_t t, int64_t delta)
{
    uint64_t W = (uint64_t)n->W, L = (uint64_t)n->L;
    u128 BW = (u128)n->B * W, dmax = BW + debt_max(W);
    int tb = n->algo == SL_TOKEN_BUCKET;
    int stored = sl__tokens_stored(*meta, st);
    u128 d = bucket_deficit(st, n, tb, tb && !stored);
    u128 refill = (u128)(uint64_t)(t - clock_old) * L;
    d = refill >= d ? 0 : d - refill;
    u128 dd = (u128)(uint64_t)(delta < 0 ? -delta : delta) * W;
    if (delta > 0)
        d = dd >= dmax - d ? dmax : d + dd;
    else
        d = dd >= d ? 0 : d - dd;
    bucket_put_deficit(st, n, tb, d);
    sl__tokens_mark(r, meta, n->algo, stored, 1);
}

int sl__engine_adjust(uint8_t *r, uint16_t *meta, const sl__norm *n, int64_t clock_old,
                      int64_t t, int64_t charged_at, int64_t delta)
{
    uint8_t *st = r + SL__REC_HDR + (*meta & 0x1ff) + 1;
    switch (n->algo) {
    case SL_FIXED_WINDOW: adjust_fixed(st, n, clock_old, t, charged_at, delta); return 0;
    case SL_SLIDING_WINDOW: adjust_sliding_window(st, n, clock_old, t, charged_at, delta); return 0;
    case SL_SLIDING_BUCKETS:
        adjust_sliding_buckets(st, n, clock_old, t, charged_at, delta);
        return 0;
    case SL_TOKEN_BUCKET:
    case SL_LEAKY_BUCKET:
    case SL_GCRA: adjust_bucket(r, meta, st, n, clock_old, t, delta); return 0;
    default: return SL_EALGO; /* sliding-log: sl_charge refuses it first */
    }
}

/* ---- a bucket's units leased out (lone.h: the module's leases) -----------
 * token-bucket and gcra with `out` whole requests held by nodes (leased,
 * not yet spent nor settled: docs/fleet.md, "Leases"): the refill stops
 * at a deficit of out*W -- tokens in the bucket plus those held never pass
 * B -- and what comes back fills the bucket no further than that.  Neither
 * ever raises the deficit: a state already below out*W (none is, but for
 * crafted bytes) keeps what it has.  sluice.lua's bucket() with its O is
 * the same arithmetic. */

void sl__engine_bucket_hold(uint8_t *r, uint16_t *meta, const sl__norm *n, int64_t clock_old,
                            int64_t t, int64_t out)
{
    uint8_t *st = r + SL__REC_HDR + (*meta & 0x1ff) + 1;
    int tb = n->algo == SL_TOKEN_BUCKET;
    int stored = sl__tokens_stored(*meta, st);
    u128 d = bucket_deficit(st, n, tb, tb && !stored);
    u128 low = (u128)(uint64_t)(out > 0 ? out : 0) * (uint64_t)n->W;
    if (low > d) low = d;
    u128 refill = (u128)(uint64_t)(t > clock_old ? t - clock_old : 0) * (uint64_t)n->L;
    d = refill >= d - low ? low : d - refill;
    bucket_put_deficit(st, n, tb, d);
    sl__tokens_mark(r, meta, n->algo, stored, 1);
}

int64_t sl__engine_bucket_give(uint8_t *r, uint16_t *meta, const sl__norm *n, int64_t units,
                               int64_t out)
{
    uint8_t *st = r + SL__REC_HDR + (*meta & 0x1ff) + 1;
    int tb = n->algo == SL_TOKEN_BUCKET;
    int stored = sl__tokens_stored(*meta, st);
    uint64_t W = (uint64_t)n->W;
    u128 d = bucket_deficit(st, n, tb, tb && !stored);
    u128 low = (u128)(uint64_t)(out > 0 ? out : 0) * W;
    u128 dd = (u128)(uint64_t)(units > 0 ? units : 0) * W;
    u128 d2 = dd >= d ? 0 : d - dd;
    if (d2 < low) d2 = low < d ? low : d;
    bucket_put_deficit(st, n, tb, d2);
    sl__tokens_mark(r, meta, n->algo, stored, 1);
    return (int64_t)udiv(d - d2, W); /* <= units */
}
