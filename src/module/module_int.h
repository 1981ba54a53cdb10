/*
 * module_int.h -- what module.c lends the module's other files (holds.c:
 * RL.HOLDRESERVE, RL.HOLDSETTLE), so that they decide, reply, read AT and
 * replicate exactly as module.c's own commands do.  Internal to the module.
 */
#ifndef SL_MODULE_INT_H
#define SL_MODULE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "redismodule_api.h"
#include "sluice.h"

/* "-ERR msg"; RL.ALLOW's six fields. */
int sl__mod_reply_err(RedisModuleCtx *ctx, const char *msg);
void sl__mod_reply_fields(RedisModuleCtx *ctx, const sl_result *r);

/* Whether the module was loaded with trust-client-time yes. */
int sl__mod_trusted(void);

/* A request's key as the module's commands take it (sluiced's, or the
 * backend's "sl:m" form): 0, or -1 with the message in err (256 bytes). */
int sl__mod_key_ok(const char *s, size_t n, char *err);

/* AT's value (sl__at_parse): accepted with trust-client-time (within
 * max-client-skew) or from the master / the AOF; ctx: the command's. */
int sl__mod_at(void *ctx, const char *s, size_t n, int64_t *out, char *err, size_t errlen);

/* RL.ALLOW's six fields, flat (inside an array the caller opened). */
void sl__mod_reply_six(RedisModuleCtx *ctx, const sl_result *r);

/* Propagates the command decided at `now`, Redis's clock, with AT now
 * appended (as RL.ALLOW's), or verbatim when nothing can take it. */
void sl__mod_replicate_at(RedisModuleCtx *ctx, const char *cmd, RedisModuleString **argv,
                          int argc, int64_t now);

/* On key `name`'s state under p's algorithm, at now (clock: Redis's
 * clock, for the TTL): charge 0 -- a decision of cost `amount`, committed
 * (RL.ALLOW's); charge 1 -- sl__lone_charge of delta `amount` for a
 * charge made at charged_at.  The value is made if needed (not for a
 * refund on a fresh key) and its TTL set as a decision sets it.  Returns
 * 0 with *out, an SL_E* code (nothing changed), or -1 when a reply was
 * sent already (WRONGTYPE, out of memory). */
int sl__mod_rate(RedisModuleCtx *ctx, RedisModuleString *name, const sl_params *p, int64_t now,
                 int64_t clock, int charge, int64_t amount, int64_t charged_at, sl_result *out);

/* holds.c: registers the reservations' data type and commands at load:
 * REDISMODULE_OK or REDISMODULE_ERR. */
int sl__mod_holds_load(RedisModuleCtx *ctx);

/* One concurrency lease of an RL.HOLDCHECK (module.c parses it; holds.c
 * looks at and takes it on RL.ACQUIRE's own Redis keys of its lease key,
 * in the script's format: docs/module.md, "RL.HOLDCHECK").  The fields
 * above `kh` are the command's; the rest is filled while it runs. */
typedef struct sl__mod_lease {
    RedisModuleString *hh, *hl; /* its keys (argv's): the hash, the sorted set */
    int take, shadow;           /* take: kept when the request passes; shadow: never denies */
    int64_t max;                /* 1..SL_MAX_CONCURRENCY */
    int64_t ttl;                /* ms, 1..SL_MAX_LEASE_TTL_MS */
    RedisModuleKey *kh, *kl;    /* open between sl__mod_lease_open and _close */
    int64_t t;                  /* ms: max(now, the leases' clock) */
    int room;                   /* fewer than max leases live at t */
    sl_result ans;              /* what a take answers at t (RL.ACQUIRE's six fields) */
    long long id;               /* the lease taken, else 0 */
    long long seed;             /* > 0: its id counter was made by this take (replicated) */
} sl__mod_lease;

/* Opens ls's keys for writing and checks them before anything is
 * written: 0; -1 when a key holds another type (WRONGTYPE replied, the
 * keys closed); SL_EINVAL with err (256 bytes) when a clock or id
 * counter of the hash is not an integer (the keys closed). */
int sl__mod_lease_open(RedisModuleCtx *ctx, sl__mod_lease *ls, char *err);

/* Op C's look at ls at now (sluice.lua, lease_look): t = max(now, the
 * clock), the leases expired at t dropped, ls->room and ls->ans set.
 * Returns 1 when it wrote (a lease dropped, the clock moved), else 0.
 * O(leases dropped x log leases held). */
int sl__mod_lease_look(RedisModuleCtx *ctx, sl__mod_lease *ls, int64_t now);

/* Takes ls (looked at, with room): ls->id, as op LA gives one. */
void sl__mod_lease_take(RedisModuleCtx *ctx, sl__mod_lease *ls);

/* Closes ls's keys (either may be closed already). */
void sl__mod_lease_close(sl__mod_lease *ls);

#endif
