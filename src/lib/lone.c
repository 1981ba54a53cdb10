/*
 * lone.c -- lone records (lone.h): what a record is and how it is saved.
 * Decisions on them are limiter.c's (sl__lone_decide), on its one path.
 */
#include <string.h>

#include "engine.h"
#include "holds.h"
#include "lone.h"

#define LONE_HDR 12 /* flags, reset code, clock */

void sl__lone_free(sl__shard *sh, uint8_t *rec)
{
    if (rec != NULL) sl__shard_remove(sh, 0, rec);
}

sl_algo sl__lone_algo(const uint8_t *rec) { return (sl_algo)sl__rec_algo(rec); }
int64_t sl__lone_clock(const uint8_t *rec) { return sl__rec_clock(rec); }
int64_t sl__lone_reset_at(const uint8_t *rec) { return sl__rec_reset_at(rec); }

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
    /* the loose record's word, its header, the one-byte key, the state */
    return sizeof(size_t) + SL__REC_HDR + 1 + sl__state_len(&n) <= SL__LONE_ROOM;
}

size_t sl__lone_bytes(const uint8_t *rec)
{
    /* the state's room is at least what a dump holds; a ring is counted
     * at its capacity */
    size_t n = sl__shard_loose_lent(rec)
                   ? 0
                   : sizeof(size_t) + SL__REC_HDR + sl__rec_klen(rec) + sl__state_dump_len(rec);
    if (sl__rec_has_ext(rec)) n += sl__ld32(rec + SL__REC_HDR + sl__rec_klen(rec) + 8);
    return n;
}

size_t sl__lone_dump_len(const uint8_t *rec) { return LONE_HDR + sl__state_dump_len(rec); }

void sl__lone_dump(const uint8_t *rec, uint8_t *dst)
{
    sl__st16(dst, (uint16_t)(sl__rec_flags(rec) & ~SL__REC_SPACE));
    memcpy(dst + 2, rec + 2, 10); /* reset code, clock */
    sl__state_dump(rec, dst + LONE_HDR);
}

int sl__lone_load(sl__shard *sh, unsigned algo, const uint8_t *src, size_t len, void *room,
                  uint8_t **rec)
{
    if (algo >= SL_ALGO_COUNT || len < LONE_HDR) return SL_EINVAL;
    unsigned flags = sl__ld16(src);
    int64_t clock = (int64_t)sl__ld64(src + 4);
    const uint8_t *st = src + LONE_HDR;
    size_t slen = len - LONE_HDR, need;
    if (flags > (SL__REC_LIMIT | SL__REC_F1) || clock <= -SL_MAX_TIME_MS ||
        clock >= SL_MAX_TIME_MS || (need = sl__state_load_len(algo, st, slen)) == 0)
        return SL_EINVAL;
    sl__shard_loose_room(sh, room, SL__LONE_ROOM);
    uint8_t *r = sl__shard_insert(sh, 0, algo, "", 1, need, clock);
    sl__shard_loose_room(sh, NULL, 0);
    if (r == NULL) return SL_ENOMEM;
    int rc = sl__state_load(sh, r, st, slen, clock);
    if (rc != 0) {
        sl__shard_remove(sh, 0, r);
        return rc;
    }
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
    int64_t clock_old = sl__rec_clock(rec);
    int64_t t = now_ms > clock_old ? now_ms : clock_old;
    uint16_t meta = sl__rec_meta(rec);
    int rc = sl__engine_adjust(rec, &meta, &n, clock_old, t, charged_at_ms, -units);
    if (rc == 0) {
        sl__rec_set_clock(rec, t);
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
            int64_t t = sl__rec_clock(r);
            uint16_t meta = sl__rec_meta(r);
            rc = sl__engine_adjust(r, &meta, &n, t, t, charged_at_ms, delta);
            sl__rec_release(r, meta);
        }
        /* committed again at t (cost 0): the record's reset time and
         * at-limit flag as a decision writes them; a cost of 1 answers */
        int64_t t = rc == 0 ? sl__rec_clock(*rec) : 0;
        if (rc == 0) rc = sl__lone_decide(sh, rec, NULL, p, t, 0, 1, out);
        if (rc == 0) rc = sl__lone_decide(sh, rec, NULL, p, t, 1, 0, &one);
    }
    if (rc != 0) return rc;
    out->allowed = one.allowed;
    out->retry_after_ms = one.retry_after_ms;
    out->delay_ms = 0;
    return 0;
}
