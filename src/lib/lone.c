/*
 * lone.c -- lone records (lone.h): what a record is and how it is saved.
 * Decisions on them are limiter.c's (sl__lone_decide), on its one path.
 */
#include <string.h>

#include "engine.h"
#include "holds.h"
#include "lone.h"

#define LONE_HDR 12 /* flags, reset code, clock */
#define BUCKET_ST 10 /* a bucket's state: its lease tail follows (lone.h) */

/* ---- a bucket's lease tail (lone.h, "leases") ----------------------------- */

typedef struct tail {
    int64_t e, o0, o1; /* the epoch; units leased in it, in the one before */
} tail;

static int is_bucket(unsigned algo) { return algo == SL_TOKEN_BUCKET || algo == SL_GCRA; }

/* r's tail, or NULL: not a bucket's record, or one with no room for it
 * (it never leased: nothing out). */
static uint8_t *tail_of(const sl__shard *sh, const uint8_t *r)
{
    if (!is_bucket(sl__rec_algo(r)) || sl__rec_state_cap(sh, r) < BUCKET_ST + SL__LONE_TAIL)
        return NULL;
    return (uint8_t *)r + SL__REC_HDR + sl__rec_klen(r) + BUCKET_ST;
}

static void tail_read(const uint8_t *p, tail *z)
{
    z->e = (int64_t)sl__ld64(p);
    z->o0 = (int64_t)sl__ld40(p + 8);
    z->o1 = (int64_t)sl__ld40(p + 13);
}

/* Writes z (all zero when nothing is out: a tail is written only with
 * units out, so a record that leased and a fresh one dump alike). */
static void tail_write(uint8_t *p, const tail *z)
{
    if (z->o0 == 0 && z->o1 == 0) {
        memset(p, 0, SL__LONE_TAIL);
        return;
    }
    sl__st64(p, (uint64_t)z->e);
    sl__st40(p + 8, (uint64_t)z->o0);
    sl__st40(p + 13, (uint64_t)z->o1);
}

/* z moved to the epoch of t (>= the epoch it was written in): a lease of
 * epoch e is settled from the start of epoch e + 2 (sluice.lua's
 * lease_at). */
static void tail_at(tail *z, int64_t t)
{
    int64_t ce = sl__fdiv(t, SL__LEASE_EPOCH_MS);
    if (ce == z->e) return;
    if (ce == z->e + 1) {
        z->o1 = z->o0;
    } else {
        z->o1 = 0;
    }
    z->o0 = 0;
    z->e = ce;
}

/* Whether a dumped tail is one a record can hold: units out (at most a
 * limit in each epoch), an epoch no later than the record's clock's. */
static int tail_ok(const uint8_t *p, int64_t clock)
{
    tail z;
    tail_read(p, &z);
    return z.o0 <= SL_MAX_LIMIT && z.o1 <= SL_MAX_LIMIT && z.o0 + z.o1 > 0 &&
           z.e <= sl__fdiv(clock, SL__LEASE_EPOCH_MS) &&
           z.e > sl__fdiv(-SL_MAX_TIME_MS, SL__LEASE_EPOCH_MS);
}

/* Whether r holds a tail with units out (dumped with it). */
static int tail_out(const sl__shard *sh, const uint8_t *r)
{
    const uint8_t *p = tail_of(sh, r);
    tail z;
    if (p == NULL) return 0;
    tail_read(p, &z);
    return z.o0 != 0 || z.o1 != 0;
}

void sl__lone_hold(sl__shard *sh, uint8_t *r, const sl__norm *n, int64_t now_ms, sl__lone_keep *k)
{
    k->tail = NULL;
    uint8_t *p = r != NULL ? tail_of(sh, r) : NULL;
    if (p == NULL) return;
    tail z;
    tail_read(p, &z);
    if (z.o0 == 0 && z.o1 == 0) return; /* nothing out: the plain decision */
    int64_t clock = sl__loose_clock(r), t = now_ms > clock ? now_ms : clock;
    tail_at(&z, t);
    k->tail = p;
    k->clock = clock;
    k->e = z.e;
    k->o0 = z.o0;
    k->o1 = z.o1;
    k->flags = sl__rec_flags(r);
    memcpy(k->st, sl__rec_state(r), BUCKET_ST);
    if (z.o0 + z.o1 == 0) return; /* all settled: the tail is cleared on commit */
    uint16_t meta = sl__rec_meta(r);
    sl__engine_bucket_hold(r, &meta, n, clock, t, z.o0 + z.o1);
    sl__rec_release(r, meta);
    sl__loose_set_clock(r, t);
}

void sl__lone_unhold(uint8_t *r, const sl__lone_keep *k, int committed)
{
    if (k->tail == NULL) return;
    if (committed) {
        tail z = {k->e, k->o0, k->o1};
        tail_write(k->tail, &z);
        return;
    }
    memcpy(sl__rec_state(r), k->st, BUCKET_ST);
    sl__loose_set_clock(r, k->clock);
    sl__rec_set_flags(r, k->flags);
}

int sl__lone_leases(unsigned algo)
{
    return algo == SL_FIXED_WINDOW || algo == SL_SLIDING_WINDOW || algo == SL_SLIDING_BUCKETS ||
           is_bucket(algo);
}

/* A sliding-buckets lease's span: one bucket of p's (W / P ms), the one
 * its units were charged to (docs/fleet.md, "sliding-buckets"). */
static int64_t sb_bucket_ms(const sl_params *p)
{
    sl__norm n;
    sl__norm_from(&n, p);
    return n.W / n.P;
}

/* Checks a lease operation's common arguments: 0 or its SL_E* code. */
static int lease_check(const sl_params *p, const uint8_t *rec, int64_t now_ms, int64_t n)
{
    if (sl_params_check(p) != 0) return SL_EINVAL;
    if (!sl__lone_leases((unsigned)p->algo)) return SL_EALGO;
    if (n < 0 || n > SL_MAX_LIMIT) return SL_ECOST;
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS) return SL_ETIME;
    if (rec != NULL && sl__rec_algo(rec) != (unsigned)p->algo) return SL_EINVAL;
    return 0;
}

int sl__lone_lease_take(sl__shard *sh, uint8_t **rec, const sl_params *p, int64_t now_ms, int64_t x,
                        sl_result *out, sl__lone_lease *lz)
{
    lz->extra = lz->ttl_ms = lz->tag = 0;
    if (sh == NULL || rec == NULL || *rec == NULL || out == NULL) return SL_EINVAL;
    int rc = lease_check(p, *rec, now_ms, x);
    if (rc != 0) return rc;
    uint8_t *r = *rec;
    if (x > 0 && is_bucket((unsigned)p->algo) && tail_of(sh, r) == NULL) {
        /* its first lease: room for the tail (zeroed: nothing out) */
        uint8_t *nr = sl__shard_resize(sh, 0, r, BUCKET_ST + SL__LONE_TAIL);
        if (nr == NULL) return SL_ENOMEM;
        *rec = r = nr;
    }
    if (x > 0) {
        sl_result o;
        rc = sl__lone_decide(sh, rec, NULL, p, now_ms, x, 1, &o);
        if (rc != 0) return rc;
        r = *rec;
        if (o.allowed)
            *out = o;
        else
            x = 0; /* cannot be: x is at most half of what is left */
    }
    int64_t t = sl__loose_clock(r); /* the decisions' time */
    if (is_bucket((unsigned)p->algo)) {
        tail z = {sl__fdiv(t, SL__LEASE_EPOCH_MS), 0, 0};
        uint8_t *tp = tail_of(sh, r);
        if (tp != NULL) {
            tail_read(tp, &z);
            tail_at(&z, t); /* at t already: the decision held it there */
        }
        if (x > 0) {
            z.o0 += x; /* <= B: leases are at most half of what is left */
            tail_write(tp, &z);
        }
        lz->tag = z.e;
        lz->ttl_ms = (z.e + 2) * SL__LEASE_EPOCH_MS - t;
    } else { /* a window's: its window; sliding-buckets': the bucket charged */
        int64_t W = p->algo == SL_SLIDING_BUCKETS ? sb_bucket_ms(p) : p->window_ms;
        lz->tag = sl__fdiv(t, W);
        lz->ttl_ms = (lz->tag + 1) * W - t;
    }
    lz->extra = x;
    return 0;
}

int sl__lone_lease_return(sl__shard *sh, uint8_t **rec, const sl_params *p, int64_t now_ms,
                          int64_t back, int64_t taken, int64_t tag, int64_t *put)
{
    *put = 0;
    if (sh == NULL || rec == NULL) return SL_EINVAL;
    int rc = lease_check(p, *rec, now_ms, back);
    if (rc == 0 && (taken < 0 || taken > SL_MAX_LIMIT)) rc = SL_ECOST;
    if (rc != 0 || *rec == NULL) return rc;
    uint8_t *r = *rec;
    if (p->algo == SL_SLIDING_BUCKETS) {
        /* into bucket tag while it is in the window, past the lease's end
         * too (its units count there until it slides out): the state
         * brought to now first (a committed decision of cost 0), so what
         * the refund takes off the sum is what went back */
        int64_t g = sb_bucket_ms(p);
        sl_result o;
        if ((rc = sl__lone_decide(sh, rec, NULL, p, now_ms, 0, 1, &o)) != 0) return rc;
        r = *rec;
        const uint8_t *st = sl__rec_state(r);
        int64_t b = sl__fdiv(sl__loose_clock(r), g), P = sl__ld16(st);
        if (tag <= b - P || tag > b) return 0; /* slid out: counted spent */
        uint64_t before = sl__ld64(st + 3);
        if (back > 0 && (rc = sl__lone_refund(p, r, now_ms, tag * g, back)) != 0) return rc;
        *put = (int64_t)(before - sl__ld64(sl__rec_state(r) + 3));
        return 0;
    }
    if (!is_bucket((unsigned)p->algo)) {
        /* the window's count, in window tag only (not the one after: a
         * sliding window's previous count stays as it was) */
        int64_t W = p->window_ms, clock = sl__loose_clock(r);
        int64_t t = now_ms > clock ? now_ms : clock;
        if (sl__fdiv(t, W) != tag || sl__fdiv(clock, W) != tag) return 0;
        int64_t count = (int64_t)sl__ld40(sl__rec_state(r));
        int64_t b = back < count ? back : count;
        if (b > 0 && (rc = sl__lone_refund(p, r, now_ms, tag * W, b)) != 0) return rc;
        *put = b;
        return 0;
    }
    if (tail_of(sh, r) == NULL) return 0; /* it never leased: nothing out */
    /* at now, the refill held short of what is out (the tail at now's
     * epoch): a decision of cost 0, committed */
    sl_result o;
    if ((rc = sl__lone_decide(sh, rec, NULL, p, now_ms, 0, 1, &o)) != 0) return rc;
    r = *rec;
    uint8_t *tp = tail_of(sh, r);
    tail z;
    tail_read(tp, &z);
    tail_at(&z, sl__loose_clock(r));
    int64_t *o_k = tag == z.e ? &z.o0 : tag == z.e - 1 ? &z.o1 : NULL;
    if (o_k == NULL) return 0; /* settled: counted spent */
    int64_t tk = taken < *o_k ? taken : *o_k, b = back < tk ? back : tk;
    *o_k -= tk; /* the whole lease: what did not come back was spent */
    tail_write(tp, &z);
    sl__norm n;
    sl__norm_from(&n, p);
    uint16_t meta = sl__rec_meta(r);
    *put = sl__engine_bucket_give(r, &meta, &n, b, z.o0 + z.o1);
    sl__rec_mark_limit(r, &meta, 0);
    sl__rec_release(r, meta);
    return 0;
}

int64_t sl__lone_lease_end(const sl__shard *sh, const uint8_t *rec)
{
    const uint8_t *p = rec != NULL ? tail_of(sh, rec) : NULL;
    tail z;
    if (p == NULL) return INT64_MIN;
    tail_read(p, &z);
    if (z.o0 != 0) return (z.e + 2) * SL__LEASE_EPOCH_MS;
    if (z.o1 != 0) return (z.e + 1) * SL__LEASE_EPOCH_MS;
    return INT64_MIN;
}

void sl__lone_free(sl__shard *sh, uint8_t *rec)
{
    if (rec != NULL) sl__shard_remove(sh, 0, rec);
}

sl_algo sl__lone_algo(const uint8_t *rec) { return (sl_algo)sl__rec_algo(rec); }
int64_t sl__lone_clock(const uint8_t *rec) { return sl__loose_clock(rec); }
int64_t sl__lone_reset_at(const uint8_t *rec) { return sl__loose_reset_at(rec); }

uint8_t *sl__lone_roomed(const void *room) { return sl__shard_loose_roomed(room); }

int sl__lone_stays(unsigned algo)
{
    if (algo >= SL_ALGO_COUNT || algo == SL_SLIDING_LOG || algo == SL_SLIDING_BUCKETS) return 0;
    sl_params p = SL_PARAMS_INIT;
    p.algo = (sl_algo)algo;
    p.limit = 1;
    p.window_ms = 1000;
    sl__norm n;
    sl__norm_from(&n, &p); /* the other algorithms' state has one size */
    /* the loose record's clock and word, its header, the one-byte key, the state */
    return SL__LOOSE_PREFIX + SL__REC_HDR + 1 + sl__state_len(&n) <= SL__LONE_ROOM;
}

size_t sl__lone_bytes(const sl__shard *sh, const uint8_t *rec)
{
    /* the allocation: the state's whole room (a bucket's lease tail, a
     * sliding-buckets state grown for more counters than it keeps now),
     * not what a dump holds; a ring is counted at its capacity */
    size_t n = sl__shard_loose_lent(rec) ? 0
                                         : SL__LOOSE_PREFIX + SL__REC_HDR + sl__rec_klen(rec) +
                                               sl__rec_state_cap(sh, rec);
    if (sl__rec_has_ext(rec)) n += sl__ld32(rec + SL__REC_HDR + sl__rec_klen(rec) + 8);
    return n;
}

size_t sl__lone_dump_len(const sl__shard *sh, const uint8_t *rec)
{
    return LONE_HDR + sl__state_dump_len(rec) + (tail_out(sh, rec) ? SL__LONE_TAIL : 0);
}

void sl__lone_dump(const sl__shard *sh, const uint8_t *rec, uint8_t *dst)
{
    sl__st16(dst, (uint16_t)(sl__rec_flags(rec) & ~SL__REC_SPACE));
    sl__st16(dst + 2, sl__ld16(rec + 2));            /* reset code */
    sl__st64(dst + 4, (uint64_t)sl__loose_clock(rec)); /* clock */
    sl__state_dump(rec, dst + LONE_HDR);
    if (tail_out(sh, rec))
        memcpy(dst + LONE_HDR + sl__state_dump_len(rec), tail_of(sh, rec), SL__LONE_TAIL);
}

int sl__lone_load(sl__shard *sh, unsigned algo, const uint8_t *src, size_t len, void *room,
                  uint8_t **rec)
{
    if (algo >= SL_ALGO_COUNT || len < LONE_HDR) return SL_EINVAL;
    unsigned flags = sl__ld16(src);
    int64_t clock = (int64_t)sl__ld64(src + 4);
    const uint8_t *st = src + LONE_HDR, *tl = NULL;
    size_t slen = len - LONE_HDR, need;
    if (is_bucket(algo) && slen == BUCKET_ST + SL__LONE_TAIL) { /* units leased out */
        slen = BUCKET_ST;
        tl = st + BUCKET_ST;
    }
    if (flags > (SL__REC_LIMIT | SL__REC_F1) || clock <= -SL_MAX_TIME_MS ||
        clock >= SL_MAX_TIME_MS || (need = sl__state_load_len(algo, st, slen)) == 0 ||
        (tl != NULL && !tail_ok(tl, clock)))
        return SL_EINVAL;
    sl__shard_loose_room(sh, room, SL__LONE_ROOM);
    uint8_t *r = sl__shard_insert(sh, 0, algo, "", 1, need + (tl ? SL__LONE_TAIL : 0), clock);
    sl__shard_loose_room(sh, NULL, 0);
    if (r == NULL) return SL_ENOMEM;
    int rc = sl__state_load(sh, r, st, slen, clock);
    if (rc != 0) {
        sl__shard_remove(sh, 0, r);
        return rc;
    }
    if (tl != NULL) memcpy(sl__rec_state(r) + BUCKET_ST, tl, SL__LONE_TAIL);
    memcpy(r + 2, src + 2, 2); /* the reset code, as saved */
    sl__rec_set_flags(r, flags);
    sl__rec_unlock(r);
    *rec = r;
    return 0;
}

int sl__lone_refund(const sl_params *p, uint8_t *rec, int64_t now_ms, int64_t charged_at_ms,
                    int64_t units)
{
    if (sl_params_check(p) != 0) return SL_EINVAL;
    if (units <= 0 || units > SL_MAX_LIMIT) return SL_ECOST;
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS) return SL_ETIME;
    if (p->algo == SL_SLIDING_LOG) return SL_EALGO;
    if (rec == NULL) return 0;
    if (sl__rec_algo(rec) != (unsigned)p->algo) return SL_EINVAL;
    sl__norm n;
    sl__norm_from(&n, p);
    int64_t clock_old = sl__loose_clock(rec);
    int64_t t = now_ms > clock_old ? now_ms : clock_old;
    uint16_t meta = sl__rec_meta(rec);
    int rc = sl__engine_adjust(rec, &meta, &n, clock_old, t, charged_at_ms, -units);
    if (rc == 0) {
        sl__loose_set_clock(rec, t);
        sl__rec_mark_limit(rec, &meta, 0); /* fewer counted: not at the limit */
    }
    sl__rec_release(rec, meta);
    return rc;
}

int sl__lone_charge(sl__shard *sh, uint8_t **rec, void *room, const sl_params *p, int64_t now_ms,
                    int64_t charged_at_ms, int64_t delta, sl_result *out)
{
    int rc = sl_params_check(p);
    if (rc != 0) return rc;
    if (delta < -SL_MAX_LIMIT || delta > SL_MAX_LIMIT) return SL_ECOST;
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS) return SL_ETIME;
    if (sh == NULL || rec == NULL || out == NULL) return SL_EINVAL;
    if (p->algo == SL_SLIDING_LOG) return SL_EALGO;
    if (*rec != NULL && sl__rec_algo(*rec) != (unsigned)p->algo) return SL_EINVAL;
    sl_result one;
    if (*rec == NULL && delta <= 0) { /* nothing counted: nothing to refund */
        rc = sl__lone_decide(sh, rec, NULL, p, now_ms, 0, 0, out);
        if (rc == 0) rc = sl__lone_decide(sh, rec, NULL, p, now_ms, 1, 0, &one);
    } else {
        /* a committed decision of cost 0 makes the record (in room) or
         * brings it to t = max(now, clock) (adapted, as sl_charge's);
         * then the engine's adjust at t, as sl_charge's on a store */
        rc = sl__lone_decide(sh, rec, room, p, now_ms, 0, 1, out);
        if (rc == 0 && delta != 0) {
            uint8_t *r = *rec;
            sl__norm n;
            sl__norm_from(&n, p);
            int64_t t = sl__loose_clock(r), out_now = 0;
            uint8_t *tp = delta < 0 ? tail_of(sh, r) : NULL;
            if (tp != NULL) { /* the decision above brought the tail to t */
                tail z;
                tail_read(tp, &z);
                out_now = z.o0 + z.o1;
            }
            uint16_t meta = sl__rec_meta(r);
            if (out_now > 0) /* a refund fills no further than the units out allow */
                sl__engine_bucket_give(r, &meta, &n, -delta, out_now);
            else
                rc = sl__engine_adjust(r, &meta, &n, t, t, charged_at_ms, delta);
            sl__rec_release(r, meta);
        }
        /* committed again at t (cost 0): the record's reset time and
         * at-limit flag as a decision writes them; a cost of 1 answers */
        int64_t t = rc == 0 ? sl__loose_clock(*rec) : 0;
        if (rc == 0) rc = sl__lone_decide(sh, rec, NULL, p, t, 0, 1, out);
        if (rc == 0) rc = sl__lone_decide(sh, rec, NULL, p, t, 1, 0, &one);
    }
    if (rc != 0) return rc;
    out->allowed = one.allowed;
    out->retry_after_ms = one.retry_after_ms;
    out->delay_ms = 0;
    return 0;
}
