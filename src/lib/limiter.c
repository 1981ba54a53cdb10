/*
 * limiter.c -- the public decision API: checks the request, finds or makes
 * the key's record and holds it (store.h: the quick way, the record's lock
 * alone, for an existing key whose state never changes size; else the sure
 * way, under the shard lock), applies SPEC section 4's clock (a request
 * older than the key's latest time is decided at that time), and lets the
 * engine decide.  Bad input is refused before any state is touched.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "lone.h"
#include "siphash.h" /* SL__HOT_INLINE */
#include "store.h"

struct sl_limiter {
    sl_params params;
    sl__norm norm;
    sl_store *store;
    int owns_store;
};

static int check_request(const void *key, size_t klen, int64_t now, int64_t cost)
{
    if (key == NULL || klen == 0 || klen > SL_MAX_KEY) return SL_EKEY;
    if (cost < 0 || cost > SL_MAX_LIMIT) return SL_ECOST;
    if (now <= -SL_MAX_TIME_MS || now >= SL_MAX_TIME_MS) return SL_ETIME;
    return 0;
}

/* SL_ETOOBIG if one key under n could take more than its share of s's
 * bound (sl__store_rec_max), else 0.  a is n->algo: only sliding-log and
 * sliding-buckets can grow large, so for the others (and on the paths
 * compiled per algorithm) this is nothing. */
static inline int check_size(const sl_store *s, const sl__norm *n, sl_algo a)
{
    if (a != SL_SLIDING_LOG && a != SL_SLIDING_BUCKETS) return 0;
    return n->big > sl__store_rec_max(s) ? SL_ETOOBIG : 0;
}

/* Answers on a private copy of r adapted to n (answer-only with a changed
 * sliding-buckets layout: the stored record must not change). */
static int decide_on_copy(sl__shard *sh, const uint8_t *r, size_t need, const sl__norm *n,
                          int64_t clock_old, int64_t t, int64_t cost, sl_result *out)
{
    size_t head = SL__REC_HDR + sl__rec_klen(r);
    size_t cap = sl__rec_state_cap(sh, r);
    uint8_t *copy = calloc(1, head + (need > cap ? need : cap));
    if (copy == NULL) return SL_ENOMEM;
    memcpy(copy, r, head + cap);
    sl__state_adapt(sl__rec_state(copy), n, clock_old);
    uint16_t meta = sl__rec_meta(copy);
    int rc = sl__engine_decide(sh, copy, &meta, n, n->algo, clock_old, t, cost, 0, out);
    free(copy);
    return rc;
}

/* Grows *rp's state room (held, shard lock held) to need bytes if it has
 * less, as sl__shard_resize does (*rp may move).  0, or SL_EFULL /
 * SL_ENOMEM (sl__shard_fail) with *rp unchanged. */
static int state_room(sl__shard *sh, uint64_t h, uint8_t **rp, size_t need)
{
    if (need <= sl__rec_state_cap(sh, *rp)) return 0;
    uint8_t *nr = sl__shard_resize(sh, h, *rp, need);
    if (nr == NULL) return sl__shard_fail(sh);
    *rp = nr;
    return 0;
}

/* The state of r needs a new layout for n (sliding-buckets only: a new
 * precision or wider counters, or a fresh record): grows the record if
 * needed and adapts it, or answers on a copy when not committing.  Returns
 * 0 with *rp (maybe moved, held) ready to decide on, 1 when *out already
 * holds the answer (not committing), or a negative SL_E* code (a fresh
 * record is then removed: *rp NULL). */
static int adapt_state(sl__shard *sh, uint64_t h, uint8_t **rp, int fresh, const sl__norm *n,
                       int64_t clock_old, int64_t t, int64_t cost, int commit, sl_result *out)
{
    uint8_t *r = *rp;
    size_t need = sl__state_need(sl__rec_state(r), n);
    if (!need) return 0;
    if (!commit) {
        int rc = decide_on_copy(sh, r, need, n, clock_old, t, cost, out);
        return rc ? rc : 1;
    }
    int rc = state_room(sh, h, rp, need);
    if (rc != 0) {
        if (fresh) {
            sl__shard_remove(sh, h, r);
            *rp = NULL;
        }
        return rc;
    }
    sl__state_adapt(sl__rec_state(*rp), n, clock_old);
    return 0;
}

/* Before sl_decide_all charges anything: takes the room that charging the
 * existing record *rp (held) at t with cost will take -- a sliding-buckets
 * state's new layout, a sliding-log ring's growth -- so that the charge
 * allocates nothing and cannot fail.  0 with *rp (maybe moved) still the
 * key's, or SL_EFULL / SL_ENOMEM with nothing charged (a state grown
 * early stays grown: same state, more room). */
static int charge_room(sl__shard *sh, uint64_t h, uint8_t **rp, const sl__norm *n, int64_t t,
                       int64_t cost)
{
    if (n->algo == SL_SLIDING_LOG) return sl__engine_log_room(sh, *rp, n, t, cost);
    if (n->algo != SL_SLIDING_BUCKETS) return 0;
    return state_room(sh, h, rp, sl__state_need(sl__rec_state(*rp), n));
}

/* Whether decisions for n may take the quick way (sl__store_grab): an
 * existing record whose state never needs the shard -- not
 * sliding-buckets (its state may grow) nor sliding-log (its log is memory
 * the shard counts). */
static inline int quick_ok(sl_algo a)
{
    return a != SL_SLIDING_BUCKETS && a != SL_SLIDING_LOG;
}

/* Decides on the record *rp of (a = n->algo, key) -- NULL if the key has none
 * -- which the caller holds, with the shard lock held; sh is NULL on the
 * quick way (an existing record, quick_ok; clock_q its clock, from
 * sl__grabbed_clock).  *mp is the record's meta as
 * the holder knows it (sl__engine_decide).  On return *rp is the key's
 * record, still held, or NULL, and *mp its meta.  commit = 0 answers
 * without changing anything.
 *
 * The clock (store.h, "The clock"), by `way`, a constant in each copy:
 * WAY_QUICK (sh NULL: sl__grabbed_clock made the test) and WAY_NEAR (an
 * existing record whose t = max(now, clock) passes sl__clock_quick_q, t
 * <= Q, which no wide record does) write t as low bits alone; anything
 * else (a fresh key, a wide record, a time past Q) goes to decide_far, out
 * of line: WAY_FAR reads the whole clock, makes room for t first and writes
 * it with sl__rec_set_clock.  So the hot copies keep no flag across the
 * engine.  WAY_HOT is WAY_NEAR for decide_hashed: where WAY_NEAR calls
 * decide_far it returns GO_FAR instead, and decide_hashed calls
 * decide_far_done, so that the hot copy passes the addresses of its
 * record and meta to no function it does not inline (they stay in
 * registers, not reloaded after the engine: ~3 instructions a decision). */
enum { WAY_NEAR, WAY_FAR, WAY_QUICK, WAY_HOT };
#define GO_FAR INT_MIN /* no sl_* code: WAY_HOT's "take decide_far" */
SL__HOT_INLINE int decide_held_as(sl__shard *sh, uint64_t h, uint8_t **rp, uint16_t *mp,
                                  const sl__norm *n, sl_algo a, const void *key, size_t klen,
                                  int64_t now, int64_t clock_q, int64_t cost, int commit,
                                  sl_result *out, int way);

static __attribute__((noinline)) int decide_far(sl__shard *sh, uint64_t h, uint8_t **rp,
                                                uint16_t *mp, const sl__norm *n, sl_algo a,
                                                const void *key, size_t klen, int64_t now,
                                                int64_t cost, int commit, sl_result *out)
{
    return decide_held_as(sh, h, rp, mp, n, a, key, klen, now, 0, cost, commit, out, WAY_FAR);
}

SL__HOT_INLINE int decide_held_as(sl__shard *sh, uint64_t h, uint8_t **rp, uint16_t *mp,
                                  const sl__norm *n, sl_algo a, const void *key, size_t klen,
                                  int64_t now, int64_t clock_q, int64_t cost, int commit,
                                  sl_result *out, int way)
{
    int rc;
    uint8_t *r = *rp;
    int fresh = r == NULL;
    int64_t clock_old;
    if (way == WAY_QUICK)
        clock_old = clock_q;
    else if (way == WAY_FAR)
        clock_old = fresh ? now : sl__rec_clock(sh, r);
    else {
        if (__builtin_expect(fresh, 0))
            return way == WAY_HOT ? GO_FAR
                                  : decide_far(sh, h, rp, mp, n, a, key, klen, now, cost, commit, out);
        /* a wide record's word decodes to the window's top, above Q */
        clock_old = sl__clock_in(sl__shard_epoch(sh), sl__ld32(r + 4));
        if (__builtin_expect(
                !sl__clock_quick_q(sl__shard_quick_max(sh), now > clock_old ? now : clock_old), 0))
            return way == WAY_HOT ? GO_FAR
                                  : decide_far(sh, h, rp, mp, n, a, key, klen, now, cost, commit, out);
    }
    int64_t t = now > clock_old ? now : clock_old;
    if (way == WAY_FAR && commit && !fresh) { /* room for the clock t (store.h) */
        if ((rc = sl__shard_clock_slow(sh, h, rp, t)) != 0) return rc;
        r = *rp;
    }
    if (fresh && commit) {
        r = sl__shard_insert(sh, h, n->kind, key, klen, sl__state_len(n), now);
        if (r == NULL) return sl__shard_fail(sh);
        *rp = r;
        *mp = sl__rec_meta(r);
    }
    if (r != NULL && a == SL_SLIDING_BUCKETS) {
        rc = adapt_state(sh, h, rp, fresh, n, clock_old, t, cost, commit, out);
        r = *rp;
        if (r != NULL) *mp = sl__rec_meta(r);
        if (rc != 0) return rc == 1 ? 0 : rc;
    }
    rc = sl__engine_decide(sh, r, mp, n, a, clock_old, t, cost, commit, out);
    if (rc != 0) {
        if (fresh && r != NULL) {
            sl__shard_remove(sh, h, r);
            *rp = NULL;
        }
        return rc;
    }
    if (commit) { /* what the store reads to choose what to drop (store.h) */
        if (way == WAY_FAR) /* a fresh record's insert may have made it wide */
            sl__rec_set_clock(sh, r, t);
        else
            sl__rec_set_clock_lo(r, t); /* t <= Q: narrow, in the window (store.h) */
        sl__rec_set_reset(r, out->reset_after_ms);
        sl__rec_mark_limit(r, mp, !out->allowed || out->remaining == 0);
    }
    return 0;
}

SL__HOT_INLINE int decide_held(sl__shard *sh, uint64_t h, uint8_t **rp, uint16_t *mp,
                               const sl__norm *n, sl_algo a, const void *key, size_t klen,
                               int64_t now, int64_t clock_q, int64_t cost, int commit,
                               sl_result *out)
{
    return decide_held_as(sh, h, rp, mp, n, a, key, klen, now, clock_q, cost, commit, out,
                          sh == NULL ? WAY_QUICK : WAY_NEAR);
}

/* decide_far on record r (meta m, or NULL), then lets r and the shard go:
 * decide_hashed's way out of line (WAY_HOT). */
static __attribute__((noinline)) int decide_far_done(sl__shard *sh, uint64_t h, uint8_t *r,
                                                     uint16_t m, const sl__norm *n, sl_algo a,
                                                     const void *key, size_t klen, int64_t now,
                                                     int64_t cost, int commit, sl_result *out)
{
    int rc = decide_far(sh, h, &r, &m, n, a, key, klen, now, cost, commit, out);
    if (r != NULL) sl__rec_release(r, m);
    sl__shard_unlock(sh);
    return rc;
}

/* One decision on a checked request: the quick way when it applies and
 * the key's record is found at once, else the sure way.  hashed: h is the
 * key's hash already, else grab computes it (in the same call).  a is
 * n->algo (decide_held). */
SL__HOT_INLINE int decide_hashed(sl_store *s, const sl__norm *n, sl_algo a, const void *key,
                                 size_t klen, int hashed, uint64_t h, int64_t now, int64_t cost,
                                 int commit, sl_result *out)
{
    int rc;
    if (quick_ok(a) && sl__store_quick(s)) {
        uint16_t gm = 0; /* grab writes it: a variable of its own, not the sure way's */
        sl__grabbed g = hashed ? sl__store_grab(s, n->kind, key, klen, h, &gm)
                               : sl__store_grab_key(s, n->kind, key, klen, &h, &gm);
        if (g.rec != NULL) {
            int64_t c;
            if (__builtin_expect(sl__grabbed_clock(g, now, &c), 1)) {
                uint8_t *r = g.rec;
                rc = decide_held_as(NULL, h, &r, &gm, n, a, key, klen, now, c, cost, commit, out,
                                    WAY_QUICK);
                sl__rec_release(r, gm); /* quick_ok: never moved nor removed */
                return rc;
            }
            sl__rec_release(g.rec, gm); /* the sure way makes room for the clock */
        }
        hashed = 1; /* grab computed h */
    }
    /* r, m and sh: their addresses go to no out-of-line call (registers) */
    uint8_t *r;
    sl__shard *sh;
    if (hashed) {
        sl__shard *hs;
        r = sl__store_lookup_hashed(s, n->kind, key, klen, h, &hs);
        sh = hs;
    } else {
        sl__found f = sl__store_lookup_pair(s, n->kind, key, klen, &h);
        r = f.rec;
        sh = f.sh;
    }
    uint16_t m = r != NULL ? sl__rec_meta(r) : 0;
    rc = decide_held_as(sh, h, &r, &m, n, a, key, klen, now, 0, cost, commit, out, WAY_HOT);
    if (__builtin_expect(rc == GO_FAR, 0))
        return decide_far_done(sh, h, r, m, n, a, key, klen, now, cost, commit, out);
    if (r != NULL) sl__rec_release(r, m); /* m: held or not (sl__store_lookup) */
    sl__shard_unlock(sh);
    return rc;
}

/* The one decision path, inlined into each API function, so sl_allow is
 * one call deep.  a is n->algo (decide_held). */
SL__HOT_INLINE int decide(sl_store *s, const sl__norm *n, sl_algo a, const void *key, size_t klen,
                          int64_t now, int64_t cost, int commit, sl_result *out)
{
    int rc = check_request(key, klen, now, cost);
    if (rc != 0) return rc;
    if (s == NULL || out == NULL) return SL_EINVAL;
    if ((rc = check_size(s, n, a)) != 0) return rc;
    return decide_hashed(s, n, a, key, klen, 0, 0, now, cost, commit, out);
}

/*
 * decide() compiled once for each algorithm the engine decides inline,
 * with the algorithm a constant: one switch here instead of a dozen tests
 * of it along the path.  Token-bucket with one thread on 1,000 hot keys:
 * 454 -> 400 instructions a decision (callgrind), ~18.3 -> ~19.3 M/s
 * (docs/status.md, session 5).
 */
SL__HOT_INLINE int decide_switch(sl_store *s, const sl__norm *n, const void *key, size_t klen,
                                 int64_t now, int64_t cost, int commit, sl_result *out)
{
#define SL__DECIDE_AS(a) decide(s, n, a, key, klen, now, cost, commit, out)
    switch (n->algo) {
    case SL_FIXED_WINDOW: return SL__DECIDE_AS(SL_FIXED_WINDOW);
    case SL_TOKEN_BUCKET: return SL__DECIDE_AS(SL_TOKEN_BUCKET);
    case SL_GCRA: return SL__DECIDE_AS(SL_GCRA);
    case SL_LEAKY_BUCKET: return SL__DECIDE_AS(SL_LEAKY_BUCKET);
    default: return SL__DECIDE_AS(n->algo);
    }
#undef SL__DECIDE_AS
}

/* decide() for parameters given with the call: checked first. */
SL__HOT_INLINE int decide_params(sl_store *s, const sl_params *p, const void *key, size_t keylen,
                                 int64_t now_ms, int64_t cost, int commit, sl_result *out)
{
    int rc = sl_params_check(p);
    if (rc != 0) return rc;
    sl__norm n;
    sl__norm_from(&n, p);
    return decide_switch(s, &n, key, keylen, now_ms, cost, commit, out);
}

int sl_decide(sl_store *s, const sl_params *p, const void *key, size_t keylen, int64_t now_ms,
              int64_t cost, sl_result *out)
{
    return decide_params(s, p, key, keylen, now_ms, cost, 1, out);
}

int sl_peek(sl_store *s, const sl_params *p, const void *key, size_t keylen, int64_t now_ms,
            int64_t cost, sl_result *out)
{
    return decide_params(s, p, key, keylen, now_ms, cost, 0, out);
}

/* Several requests as one (SPEC 7 rules: all pass and all are charged, or
 * none is).  The shards involved are locked together, in address order
 * (the order every multi-shard caller uses, so two batches cannot
 * deadlock), and every existing record is held from the first answer to
 * the last charge (the quick way cannot slip in between); each request is
 * answered first without charging, then, if all are allowed, charged in
 * order. */
int sl_decide_all(sl_store *s, const sl_request *reqs, size_t n, int64_t now_ms,
                  sl_result *out, int *all_allowed)
{
    if (s == NULL || reqs == NULL || out == NULL || n == 0 || n > SL_MAX_BATCH) return SL_EINVAL;
    sl__norm norm[SL_MAX_BATCH];
    uint64_t h[SL_MAX_BATCH];
    sl__shard *sh[SL_MAX_BATCH], *locks[SL_MAX_BATCH];
    size_t nlocks = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = sl_params_check(reqs[i].params);
        if (rc == 0) rc = check_request(reqs[i].key, reqs[i].keylen, now_ms, reqs[i].cost);
        if (rc != 0) return rc;
        sl__norm_from(&norm[i], reqs[i].params);
        if ((rc = check_size(s, &norm[i], norm[i].algo)) != 0) return rc;
        for (size_t j = 0; j < i; j++) /* one state may not be charged twice */
            if (norm[j].kind == norm[i].kind && reqs[j].keylen == reqs[i].keylen &&
                memcmp(reqs[j].key, reqs[i].key, reqs[i].keylen) == 0)
                return SL_EINVAL;
        h[i] = sl__store_hash(s, norm[i].kind, reqs[i].key, reqs[i].keylen);
        sh[i] = sl__store_shard(s, h[i]);
        size_t k = nlocks; /* insert into the sorted set of shards to lock */
        while (k > 0 && (uintptr_t)locks[k - 1] > (uintptr_t)sh[i]) k--;
        if (k > 0 && locks[k - 1] == sh[i]) continue;
        memmove(&locks[k + 1], &locks[k], (nlocks - k) * sizeof(locks[0]));
        locks[k] = sh[i];
        nlocks++;
    }
    for (size_t k = 0; k < nlocks; k++) sl__shard_lock(locks[k]);
    uint8_t *rec[SL_MAX_BATCH];
    uint16_t meta[SL_MAX_BATCH];
    for (size_t i = 0; i < n; i++) {
        rec[i] = sl__shard_find(sh[i], h[i], norm[i].kind, reqs[i].key, reqs[i].keylen);
        meta[i] = rec[i] ? sl__rec_meta(rec[i]) : 0;
    }
    int rc = 0, all = 1;
    /* Pass two takes, before it charges anything, the room every existing
     * key's charge needs: for its clock, its sliding-buckets state's new
     * layout, its sliding-log ring's growth (charge_room).  Then it charges
     * the new keys: one that finds no room (SL_EFULL, SL_ENOMEM) has the
     * new records made before it removed (they held nothing before).  Then
     * the existing keys, whose charges need no room: they cannot fail. */
    size_t order[SL_MAX_BATCH], nnew = 0, no;
    for (size_t i = 0; i < n; i++)
        if (rec[i] == NULL) order[nnew++] = i;
    no = nnew;
    for (size_t i = 0; i < n; i++)
        if (rec[i] != NULL) order[no++] = i;
    for (size_t pass = 0; pass < 2 && rc == 0; pass++) {
        int64_t t[SL_MAX_BATCH];
        for (size_t i = 0; i < n && rc == 0 && pass == 1; i++) /* before any is charged */
            if (rec[i] != NULL) {
                int64_t c = sl__rec_clock(sh[i], rec[i]);
                t[i] = now_ms > c ? now_ms : c;
                rc = sl__shard_clock_room(sh[i], h[i], &rec[i], t[i]);
            }
        for (size_t i = 0; i < n && rc == 0 && pass == 1; i++)
            if (rec[i] != NULL)
                rc = charge_room(sh[i], h[i], &rec[i], &norm[i], t[i], reqs[i].cost);
        size_t o = 0;
        for (; o < n && rc == 0; o++) {
            size_t i = pass ? order[o] : o;
            const sl_request *q = &reqs[i];
            rc = decide_held(sh[i], h[i], &rec[i], &meta[i], &norm[i], norm[i].algo, q->key,
                             q->keylen, now_ms, 0, q->cost, (int)pass, &out[i]);
            if (pass == 0 && !out[i].allowed) all = 0;
        }
        if (pass == 1 && rc != 0) /* a new key found no room: undo the new */
            for (size_t k = 0; k < nnew && k + 1 < o; k++) {
                size_t i = order[k];
                if (rec[i] != NULL) sl__shard_remove(sh[i], h[i], rec[i]);
                rec[i] = NULL;
            }
        if (!all) break; /* a denial: nothing is charged */
    }
    for (size_t i = 0; i < n; i++)
        if (rec[i] != NULL) sl__rec_unlock(rec[i]);
    for (size_t k = nlocks; k > 0; k--) sl__shard_unlock(locks[k - 1]);
    if (all_allowed) *all_allowed = rc == 0 && all;
    return rc;
}

/* ---- lone records (lone.h): decide_held on a loose shard's record ---------- */

int sl__lone_decide(sl__shard *sh, uint8_t **rec, void *room, const sl_params *p, int64_t now_ms,
                    int64_t cost, int commit, sl_result *out)
{
    int rc = sl_params_check(p);
    if (rc == 0) rc = check_request("", 1, now_ms, cost);
    if (rc != 0) return rc;
    if (sh == NULL || rec == NULL || out == NULL) return SL_EINVAL;
    sl__norm n;
    sl__norm_from(&n, p);
    if (n.big > sl__shard_loose_rec_max(sh)) return SL_ETOOBIG; /* check_size */
    uint8_t *r = *rec;
    sl__lone_keep keep; /* a bucket with units leased out: its refill held short (lone.h) */
    sl__lone_hold(sh, r, &n, now_ms, &keep);
    uint16_t m = r ? sl__rec_meta(r) : 0;
    if (r == NULL && commit) sl__shard_loose_room(sh, room, SL__LONE_ROOM); /* for the insert */
    rc = decide_held(sh, 0, &r, &m, &n, n.algo, "", 1, now_ms, 0, cost, commit, out);
    sl__shard_loose_room(sh, NULL, 0);
    if (r != NULL) sl__rec_release(r, m);
    sl__lone_unhold(r, &keep, commit && rc == 0);
    *rec = r;
    return rc;
}

/* sl_decide_all's two passes over lone records: no locks (the owner's
 * turn is the lock), the same answers. */
int sl__lone_decide_all(sl__shard *sh, const sl__lone_req *reqs, size_t n, int64_t now_ms,
                        sl_result *out, int *all_allowed, size_t *bad)
{
    if (all_allowed) *all_allowed = 0;
    if (sh == NULL || reqs == NULL || out == NULL || n == 0 || n > SL_MAX_BATCH) return SL_EINVAL;
    sl__norm norm[SL_MAX_BATCH];
    uint8_t *rec[SL_MAX_BATCH];
    uint16_t meta[SL_MAX_BATCH];
    for (size_t i = 0; i < n; i++) {
        int rc = sl_params_check(reqs[i].params);
        if (rc == 0) rc = check_request("", 1, now_ms, reqs[i].cost);
        if (rc == 0) {
            sl__norm_from(&norm[i], reqs[i].params);
            if (norm[i].big > sl__shard_loose_rec_max(sh)) rc = SL_ETOOBIG; /* check_size */
        }
        for (size_t j = 0; j < i && rc == 0; j++) /* one state may not be charged twice */
            if (reqs[j].rec == reqs[i].rec) rc = SL_EINVAL;
        if (rc != 0) {
            if (bad) *bad = i;
            return rc;
        }
        rec[i] = *reqs[i].rec;
    }
    sl__lone_keep keep[SL_MAX_BATCH]; /* buckets with units leased out (lone.h) */
    for (size_t i = 0; i < n; i++) {
        sl__lone_hold(sh, rec[i], &norm[i], now_ms, &keep[i]);
        meta[i] = rec[i] ? sl__rec_meta(rec[i]) : 0;
    }
    int rc = 0, all = 1;
    size_t i = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (i = 0; i < n && rc == 0; i++) {
            if (pass == 1 && rec[i] == NULL) sl__shard_loose_room(sh, reqs[i].room, SL__LONE_ROOM);
            rc = decide_held(sh, 0, &rec[i], &meta[i], &norm[i], norm[i].algo, "", 1, now_ms, 0,
                             reqs[i].cost, pass, &out[i]);
            sl__shard_loose_room(sh, NULL, 0);
            if (pass == 0 && !out[i].allowed) all = 0;
        }
        if (!all) break; /* a denial: nothing is charged */
    }
    for (size_t k = 0; k < n; k++) {
        if (rec[k] != NULL) sl__rec_release(rec[k], meta[k]);
        sl__lone_unhold(rec[k], &keep[k], rc == 0 && all);
        *reqs[k].rec = rec[k];
    }
    if (rc != 0 && bad) *bad = i - 1;
    if (all_allowed) *all_allowed = rc == 0 && all;
    return rc;
}

/*
 * sl_decide_many: a three-stage pipeline over the calls.  Request i is
 * hashed and its table slot prefetched (no lock) when the loop is at i;
 * its record is prefetched (no lock either) at i + SL__AHEAD; it is
 * decided at i + 2 * SL__AHEAD, by then with slot and record in cache.
 * Decisions stay in call order, each taken exactly like sl_decide, so the
 * answers are those of n sl_decide calls; the stages before only warm the
 * cache.  The second stage costs a probe, so it is skipped for a store
 * whose table is small enough to stay in cache (SL__NEAR_SLOTS, judged
 * from the key's shard).  A bad call is found at stage one and gets its
 * code at its turn.  `shared` is the limiter's parameters (NULL: each
 * call's own).
 */
#define SL__AHEAD      8
#define SL__RING       (4 * SL__AHEAD) /* > 2 * SL__AHEAD, a power of two */
#define SL__NEAR_SLOTS 65536u          /* table slots, whole store: ~1.5 MB with the records */

typedef struct ahead {
    const sl__norm *norm; /* shared, or &own */
    sl__norm own;
    uint64_t hash;
    int rc;
    int far; /* prefetch the record at stage two */
} ahead;

static size_t decide_many(sl_store *s, const sl__norm *shared, const sl_call *calls, size_t n,
                          sl_result *out, int *rcs)
{
    ahead ring[SL__RING];
    size_t ok = 0;
    if (s == NULL || calls == NULL || out == NULL || rcs == NULL) return 0;
    for (size_t i = 0; i < n + 2 * SL__AHEAD; i++) {
        if (i < n) { /* stage one: check, hash, prefetch the slot */
            const sl_call *c = &calls[i];
            ahead *a = &ring[i % SL__RING];
            a->rc = shared ? 0 : sl_params_check(c->params);
            if (a->rc == 0) a->rc = check_request(c->key, c->keylen, c->now_ms, c->cost);
            if (a->rc == 0) {
                a->norm = shared;
                if (!shared) {
                    sl__norm_from(&a->own, c->params);
                    a->norm = &a->own;
                }
                a->rc = check_size(s, a->norm, a->norm->algo);
            }
            if (a->rc == 0) {
                a->hash = sl__store_hash(s, a->norm->kind, c->key, c->keylen);
                a->far = sl__store_prefetch(s, a->norm->kind, c->keylen, a->hash) > SL__NEAR_SLOTS;
            }
        }
        if (i >= SL__AHEAD && i - SL__AHEAD < n) { /* stage two: prefetch the record */
            const ahead *a = &ring[(i - SL__AHEAD) % SL__RING];
            if (a->rc == 0 && a->far)
                sl__store_prefetch_rec(s, a->norm->kind, calls[i - SL__AHEAD].keylen, a->hash);
        }
        if (i >= 2 * SL__AHEAD) { /* stage three: decide */
            size_t k = i - 2 * SL__AHEAD;
            const ahead *a = &ring[k % SL__RING];
            const sl_call *c = &calls[k];
            int rc = a->rc;
            if (rc == 0)
                rc = decide_hashed(s, a->norm, a->norm->algo, c->key, c->keylen, 1, a->hash,
                                   c->now_ms, c->cost, 1, &out[k]);
            rcs[k] = rc;
            ok += rc == 0;
        }
    }
    return ok;
}

size_t sl_decide_many(sl_store *s, const sl_call *calls, size_t n, sl_result *out, int *rc)
{
    return decide_many(s, NULL, calls, n, out, rc);
}

int sl_forget(sl_store *s, sl_algo algo, const void *key, size_t keylen)
{
    if (key == NULL || keylen == 0 || keylen > SL_MAX_KEY) return SL_EKEY;
    if ((unsigned)algo >= SL_ALGO_COUNT) return SL_EALGO;
    if (s == NULL) return SL_EINVAL;
    uint64_t h = sl__store_hash(s, algo, key, keylen);
    sl__shard *sh = sl__store_shard(s, h);
    sl__shard_lock(sh);
    uint8_t *r = sl__shard_find(sh, h, algo, key, keylen);
    if (r != NULL) sl__shard_remove(sh, h, r);
    sl__shard_unlock(sh);
    return r != NULL;
}

sl_limiter *sl_limiter_new(const sl_params *p, sl_store *store, int *err)
{
    int rc = sl_params_check(p);
    sl_limiter *l = NULL;
    if (rc == 0 && (l = calloc(1, sizeof(*l))) == NULL) rc = SL_ENOMEM;
    if (rc == 0) {
        l->params = *p;
        sl__norm_from(&l->norm, p);
        l->store = store;
        if (store == NULL) {
            l->owns_store = 1;
            l->store = sl_store_new(NULL, &rc);
        }
    }
    if (rc != 0 || l->store == NULL) {
        if (rc == 0) rc = SL_ENOMEM;
        free(l);
        l = NULL;
    }
    if (err) *err = rc;
    return l;
}

void sl_limiter_free(sl_limiter *l)
{
    if (l == NULL) return;
    if (l->owns_store) sl_store_free(l->store);
    free(l);
}

const sl_params *sl_limiter_params(const sl_limiter *l)
{
    return &l->params;
}

sl_store *sl_limiter_store(sl_limiter *l)
{
    return l->store;
}

int sl_allow(sl_limiter *l, const void *key, size_t keylen, int64_t now_ms, int64_t cost,
             sl_result *out)
{
    return decide_switch(l->store, &l->norm, key, keylen, now_ms, cost, 1, out);
}

int sl_limiter_peek(sl_limiter *l, const void *key, size_t keylen, int64_t now_ms, int64_t cost,
                    sl_result *out)
{
    return decide(l->store, &l->norm, l->norm.algo, key, keylen, now_ms, cost, 0, out);
}

int sl_reset(sl_limiter *l, const void *key, size_t keylen)
{
    return sl_forget(l->store, l->params.algo, key, keylen);
}

size_t sl_allow_many(sl_limiter *l, const sl_call *calls, size_t n, sl_result *out, int *rc)
{
    return decide_many(l->store, &l->norm, calls, n, out, rc);
}
