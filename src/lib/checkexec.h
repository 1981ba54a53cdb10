/*
 * checkexec.h -- RL.CHECK's decision rounds on the counters' store: one
 * executor ("cx") for every C path that decides a planned RL.CHECK
 * (internal to libsluice):
 *
 *   - the local backend (src/backend/backend_local.c, sl__local_check_exec),
 *     on an sl_store, the counters named by their keys -- also the Redis
 *     backend's `--on-backend-error local`, which goes through it;
 *   - the Redis module (src/module/module.c, RL.CHECKPLAN), on lone records
 *     (lone.h) in its loose shard, the counters named by their records.
 *
 * The Redis backend's script (src/backend/redis/sluice.lua, op C) runs the
 * same rounds in Lua -- a script cannot call C -- and is tested against
 * this executor with random plans (tests/test_redis_scripts.c, "exec").
 *
 * A plan here is flat: one item per counter the request touches (what
 * src/rules/check.h's sl_check_plan becomes once its L = 0 limits and
 * repeated counters are taken out: the wire form of op C and
 * RL.CHECKPLAN), the quota descriptors as bit masks.  The rounds
 * (check.h, "Semantics", tells why each is so):
 *
 *   1. the Lyft-counted counters (lyft) charged at once, all passing at
 *      L = SL_MAX_LIMIT, then each judged against its own L;
 *   2. denied already -- denied_never, an enforced Lyft-counted counter
 *      over, or every quota descriptor over: every other counter is only
 *      peeked, and that is the answer;
 *   3. the enforced and quota counters in one decide-all, all-or-none;
 *      a quota counter that denies leaves the batch and the rest is
 *      decided again, until it passes, a plain limit denies, or every
 *      quota descriptor is over (at most one round more than there are
 *      quota counters);
 *   4. denied only by elastic counters, with a pool: once more, those that
 *      denied at their ceilings and the pool one more member;
 *   5. allowed and some non-shadow counter counted, the pool not charged
 *      in 4: the pool is charged (best effort);
 *   6. the shadow counters: decided when the request is allowed, else
 *      peeked.
 *
 * Cost: no allocation, no lock of its own, no call through a pointer; the
 * store is chosen by one branch per store call.  Stack: about 3 KB.
 */
#ifndef SL_CHECKEXEC_H
#define SL_CHECKEXEC_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "store.h"

/* One counter of a flat plan. */
typedef struct sl__cx_item {
    const sl_params *p;   /* its parameters at L (checked by the store call) */
    int64_t cost;         /* the request's cost on it (repeats merged) */
    int64_t ceiling;      /* elastic: its L at its ceiling; 0: not elastic */
    uint32_t qmask;       /* the quota descriptors it counts for (bit d:
                             descriptor d); 0 for the others */
    unsigned char shadow; /* never denies: round 6 */
    unsigned char quota;  /* denies only with every quota descriptor */
    unsigned char lyft;   /* charged on every request: round 1 */
    int slot;             /* its answer goes to res[slot] and stretched[slot] */
    /* its counter: key[0..keylen) in an sl_store, or *rec (room: where a
     * record made for it goes, or NULL) in a loose shard */
    const void *key;
    size_t keylen;
    uint8_t **rec;
    void *room;
} sl__cx_item;

/* A flat plan and the store it runs on (the caller's; read only here). */
typedef struct sl__cx_plan {
    sl_store *store;  /* the counters' store, or NULL: */
    sl__shard *loose; /* lone records in this loose shard */
    int strict;       /* 1: a failed pool charge (5) or shadow decide
                         (6) fails the request (the module); 0: the pool
                         is skipped and the shadow counter peeked, else
                         answered "allowed, all zeros" (the local store,
                         whose keys and parameters were checked when the
                         rules loaded) */
    int n;            /* items: 0..SL_MAX_BATCH */
    const sl__cx_item *it;
    const sl__cx_item *pool; /* the spare-capacity pool (its cost the
                                request's), or NULL */
    int denied_never;        /* an enforced L = 0 limit matched */
    uint32_t qall;           /* every quota descriptor of the request */
    uint32_t zmask;          /* the quota descriptors with an L = 0 limit: over */
    int64_t now_ms;
} sl__cx_plan;

/* What the rounds found.  res and stretched are the caller's, zeroed by it
 * (indexed by the items' slots; entries of items not decided stay 0). */
typedef struct sl__cx_out {
    int allowed;      /* the request passed */
    int quota_denied; /* denied because every quota descriptor was over */
    int pool_charged; /* round 4 passed on the pool */
    int wrote;        /* some decision was committed (state changed) */
    int bad;          /* after a failure: the item whose own peek or decide
                         failed, or -1 (a decide-all) */
    sl_result *res;
    unsigned char *stretched; /* passed above L, on the pool */
} sl__cx_out;

/* Runs plan x's rounds (above).  Returns 0, or the first failing store
 * call's SL_E* code (o->bad tells which).  What was committed before it
 * stays committed: the Lyft-counted charges of round 1 (charged first, as
 * Lyft's INCRBY), and with strict the rounds before a failed pool charge or
 * shadow decide (o->wrote says whether anything was). */
int sl__cx_run(const sl__cx_plan *x, sl__cx_out *o);

#endif
