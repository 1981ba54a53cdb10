/*
 * settle.c -- sl_charge: a charge or a refund on a key's rate state outside
 * any decision (SPEC section 10, settling a reservation).  The record is
 * found the sure way (under its shard's lock, store.h), made if a charge
 * needs one, advanced to the effective time and adjusted by the engine
 * (sl__engine_adjust), and its header (clock, reset time, at-limit flag)
 * written as a committed decision writes it, so the store's reclaiming
 * sees the new state.  Bad input is refused before anything is touched.
 */
#include <string.h>

#include "engine.h"
#include "holds.h"
#include "store.h"

/* The six fields a key answers with after a charge (sl_charge's *out):
 * remaining and reset_after_ms of the state as it stands (a request of
 * cost 0), allowed and retry_after_ms of a request of cost 1; r held (or
 * NULL: no state), at clock t. */
static int answer_after(sl__shard *sh, uint8_t *r, uint16_t *meta, const sl__norm *n, int64_t t,
                        sl_result *out)
{
    sl_result one;
    int rc = sl__engine_decide(sh, r, meta, n, n->algo, t, t, 0, 0, out);
    if (rc == 0) rc = sl__engine_decide(sh, r, meta, n, n->algo, t, t, 1, 0, &one);
    if (rc != 0) return rc;
    out->allowed = one.allowed;
    out->retry_after_ms = one.retry_after_ms;
    out->delay_ms = 0;
    return 0;
}

int sl_charge(sl_store *s, const sl_params *p, const void *key, size_t keylen, int64_t now_ms,
              int64_t charged_at_ms, int64_t delta, sl_result *out)
{
    int rc = sl_params_check(p);
    if (rc != 0) return rc;
    if (key == NULL || keylen == 0 || keylen > SL_MAX_KEY) return SL_EKEY;
    if (delta < -SL_MAX_LIMIT || delta > SL_MAX_LIMIT) return SL_ECOST;
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS) return SL_ETIME;
    if (s == NULL || out == NULL) return SL_EINVAL;
    if (p->algo == SL_SLIDING_LOG) return SL_EALGO;
    sl__norm n;
    sl__norm_from(&n, p);
    if (n.big > sl__store_rec_max(s)) return SL_ETOOBIG;

    sl__shard *sh;
    uint64_t h;
    uint8_t *r = sl__store_lookup(s, n.kind, key, keylen, &sh, &h);
    int fresh = r == NULL;
    int64_t clock_old = r ? sl__rec_clock(sh, r) : now_ms;
    int64_t t = now_ms > clock_old ? now_ms : clock_old;
    if (fresh && delta <= 0) { /* nothing counted: nothing to refund */
        uint16_t m0 = 0;
        rc = answer_after(sh, NULL, &m0, &n, t, out);
        sl__shard_unlock(sh);
        return rc;
    }
    if (fresh &&
        (r = sl__shard_insert(sh, h, n.kind, key, keylen, sl__state_len(&n), now_ms)) == NULL) {
        rc = sl__shard_fail(sh);
        sl__shard_unlock(sh);
        return rc;
    }
    if (n.algo == SL_SLIDING_BUCKETS) { /* limiter.c's adapt_state, committing */
        size_t need = sl__state_need(sl__rec_state(r), &n);
        if (need > sl__rec_state_cap(sh, r)) {
            uint8_t *nr = sl__shard_resize(sh, h, r, need);
            if (nr == NULL) {
                rc = sl__shard_fail(sh);
                if (fresh)
                    sl__shard_remove(sh, h, r);
                else
                    sl__rec_release(r, sl__rec_meta(r));
                sl__shard_unlock(sh);
                return rc;
            }
            r = nr;
        }
        if (need) sl__state_adapt(sl__rec_state(r), &n, clock_old);
    }
    if ((rc = sl__shard_clock_room(sh, h, &r, t)) != 0) { /* room for the clock t (store.h) */
        if (fresh)
            sl__shard_remove(sh, h, r);
        else
            sl__rec_release(r, sl__rec_meta(r));
        sl__shard_unlock(sh);
        return rc;
    }
    uint16_t meta = sl__rec_meta(r);
    rc = sl__engine_adjust(r, &meta, &n, clock_old, t, charged_at_ms, delta);
    if (rc == 0) {
        sl__rec_set_clock(sh, r, t);
        rc = answer_after(sh, r, &meta, &n, t, out);
    }
    if (rc == 0) { /* what the store reads to choose what to drop (store.h) */
        sl__rec_set_reset(r, out->reset_after_ms);
        sl__rec_mark_limit(r, &meta, out->remaining == 0);
    }
    sl__rec_release(r, meta);
    sl__shard_unlock(sh);
    return rc;
}
