/*
 * deny_cache.c -- the Redis backend's local deny cache: per channel, a
 * fixed direct-mapped table of denials Redis gave, so a request that is
 * known to be denied still is answered here without asking Redis (the
 * rules are at the top of backend_redis.c; docs/fleet.md).
 */
#include <stdlib.h>
#include <string.h>

#include "redis/redis_int.h"

/* ---- the deny cache ------------------------------------------------------ */

size_t sl__redis_slot_of(const char *key, size_t klen, int space)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)space;
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return (size_t)(h % SL_REDIS_CACHE_SLOTS);
}

static int same_params(const sl_params *a, const sl_params *b)
{
    return a->algo == b->algo && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->burst == b->burst && a->precision == b->precision &&
           a->log_rejected == b->log_rejected && a->space == b->space;
}

/* Answers rq from the cache when a denial there still holds: 1, else 0. */
int sl__redis_cache_answer(rchan *ch, sl_breq *rq)
{
    if (ch->cache == NULL) return 0;
    denial *d = &ch->cache[sl__redis_slot_of(rq->key, rq->keylen, rq->params->space)];
    if (d->klen == 0 || d->klen != rq->keylen || memcmp(d->key, rq->key, rq->keylen) != 0)
        return 0;
    /* a key's time never runs back: the cache's denials moved its clock
     * to d->clock, which Redis has not seen -- a request going there is
     * decided at that time at least (with client time; Redis's own clock
     * is past it anyway) */
    if (d->p.algo == rq->params->algo && d->p.space == rq->params->space && rq->now_ms < d->clock)
        rq->now_ms = d->clock; /* the same state: (key, algorithm, space) */
    int64_t t = rq->now_ms;
    /* the same cost; in a fixed window also a larger one up to L, whose
     * answer is the same field for field (the count only resets at the
     * window's end) */
    int cost_ok = rq->cost == d->cost ||
                  (d->p.algo == SL_FIXED_WINDOW && rq->cost > d->cost && rq->cost <= d->limit);
    if (!same_params(&d->p, rq->params) || !cost_ok || t >= d->retry_at) {
        /* another request on the key goes to Redis: if it is charged, the
         * denial kept here would no longer be Redis's answer, number for
         * number -- drop it (Redis's reply may keep a new one) */
        if (rq->op == SL_BOP_DECIDE || t >= d->retry_at) d->klen = 0;
        return 0;
    }
    if (rq->op == SL_BOP_DECIDE) d->clock = t; /* a denial moves the clock; a peek does not */
    sl_result *o = &rq->result;
    o->allowed = 0;
    o->limit = d->limit;
    o->remaining = d->remaining;
    o->retry_after_ms = d->retry_at - t;
    o->reset_after_ms = d->reset_at > t ? d->reset_at - t : 0;
    o->delay_ms = 0;
    rq->rc = 0;
    rq->err[0] = '\0';
    atomic_fetch_add(&ch->r->cache_hits, 1);
    rq->cb(rq);
    return 1;
}

/* Keeps Redis's denial of rq (key: its copy) when it can be reused
 * exactly: a retry time, and not log-rejected (whose denials are logged). */
static void cache_keep(rchan *ch, const sl_breq *rq, const char *key, uint32_t gen)
{
    const sl_result *o = &rq->result;
    if (ch->cache == NULL || o->allowed || o->retry_after_ms <= 0 || rq->params->log_rejected)
        return;
    /* Every field must hold until retry_at: retry and reset are absolute
     * times, but `remaining` (below the cost while denied) only stays put
     * for a cost of at most 1 (it is 0) or in a fixed window (the window's
     * count does not move before its end); a bucket refilling under a
     * larger denied cost shows a growing remaining, which only Redis knows. */
    if (rq->cost > 1 && rq->params->algo != SL_FIXED_WINDOW) return;
    denial *d = &ch->cache[sl__redis_slot_of(key, rq->keylen, rq->params->space)];
    if (d->gen != gen) return; /* the key was forgotten since it was sent */
    d->klen = rq->keylen;
    memcpy(d->key, key, rq->keylen);
    d->p = *rq->params;
    d->cost = rq->cost;
    d->t0 = d->clock = rq->now_ms;
    d->retry_at = rq->now_ms + o->retry_after_ms;
    d->reset_at = rq->now_ms + o->reset_after_ms;
    d->limit = o->limit;
    d->remaining = o->remaining;
}

/* The deny cache after Redis's answer to DECIDE e: an allowed request may
 * have charged its key, so a denial kept for the key (from a request sent
 * before it, answered before it) no longer holds -- dropped; a denial is
 * kept only when no request with a later time has been sent since (one
 * could have moved the key's clock into a later window, which a kept
 * denial would not know). */
void sl__redis_cache_after(rchan *ch, const pend *e)
{
    const sl_breq *rq = e->rq;
    if (ch->cache == NULL) return;
    if (rq->result.allowed) {
        denial *d = &ch->cache[sl__redis_slot_of(e->key, rq->keylen, rq->params->space)];
        if (d->klen == rq->keylen && d->p.space == rq->params->space &&
            memcmp(d->key, e->key, rq->keylen) == 0)
            d->klen = 0;
        return;
    }
    if (e->latest && rq->now_ms >= ch->latest_sent) cache_keep(ch, rq, e->key, e->gen);
}

/* Drops the cache's entry of key (RL.RESET on this node). */
void sl__redis_cache_forget(rchan *ch, const char *key, size_t klen)
{
    if (ch->cache == NULL) return;
    for (int space = 0; space < 2; space++) {
        denial *d = &ch->cache[sl__redis_slot_of(key, klen, space)];
        if (d->klen == klen && memcmp(d->key, key, klen) == 0) d->klen = 0;
        d->gen++;
    }
}
