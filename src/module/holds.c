/*
 * holds.c -- reservations in the sluice module (SPEC section 10's
 * RL.RESERVE and RL.SETTLE on a Redis with the module: sluiced's Redis
 * backend sends these two on its module path; docs/module.md,
 * "Reservations").
 *
 *   RL.HOLDRESERVE hkey key limit window COST estimate [ALGO a] [BURST b]
 *                  [PRECISION p] [LOGREJECTED] [AT t]
 *       -> the six fields of RL.ALLOW, then the reservation's id (0: denied)
 *   RL.HOLDSETTLE hkey key id actual [AT t]
 *       -> [0] unknown id; [1, the six fields of key after settling]
 *
 * The replies are the script's ops RV and ST (docs/redis-scripts.md,
 * "Holds"), so the backend reads both paths alike.  `key` is the module's
 * rate-state key (RL.ALLOW's: a "sluice-rl" value); `hkey` holds the key's
 * reservations, a value of this file's module type "sluice-rv" -- both
 * named by the caller, so both are declared keys (one Cluster slot when
 * they share a hash tag, as the backend's "sl:m0:{k}" and "sl:mr:{k}" do).
 *
 * A reservation charges `estimate` to key's state exactly as RL.ALLOW
 * ... COST estimate (the library's decision on the module's lone record)
 * and keeps its parameters; settling charges or refunds actual - estimate
 * through sl__lone_charge (sl_charge's arithmetic: past the limit, a
 * bucket's debt) and forgets it.  A reservation lives until its window
 * ends (made at t with window W: gone at t + W), then it is unknown (it
 * settled at its estimate).  Time per hkey never runs backwards: each
 * command works at t = max(now, the reservations' clock), as the script.
 *
 * Persistence: the "sluice-rv" value is saved in RDB and rewritten in the
 * AOF (RL.HOLDRESTORE hkey bytes) as one checked blob; both commands are
 * propagated as what they did at their time (AT t appended), so a replica
 * computes the same ids.  Ids: a per-hkey counter, seeded at t x 1000
 * when the value is made (a key made again gives ids above its old ones
 * unless it gave more than 1000 a millisecond), kept with the value, which
 * lives (TTL) until the latest expiry it gave.
 *
 * Bounds: at most RV_MAX live reservations per hkey (a clear error past
 * it, nothing charged); every command is O(reservations of the key)
 * (expired ones are dropped at each use).
 *
 * Also here: the leases of module.c's RL.HOLDCHECK (RL.CHECK with
 * concurrency limits), on RL.ACQUIRE's own keys in the script's format
 * (below, "RL.HOLDCHECK's leases").
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "module_int.h"
#include "redismodule_api.h"
#include "sluice.h"

#define RV_TYPE   "sluice-rv" /* 9 characters, as Redis requires */
#define RV_ENCVER 0
#define RV_MAX    100000 /* live reservations per hkey */
#define RV_HDR    28     /* last:u64 clock:i64 until:i64 n:u32 */
#define RV_ENT    66     /* id exp at est L W B P: 8 x 8 bytes, algo, log_rejected */
#define ERRLEN    256
#define HOUR_MS   3600000LL
#define NO_CLOCK  INT64_MIN

typedef struct rv {
    uint64_t id;
    int64_t exp, at, est; /* gone at exp; made at at; charged est */
    sl_params p;
} rv;

typedef struct rvtab {
    uint64_t last;  /* the last id given */
    int64_t clock;  /* the reservations' clock while some are kept, else NO_CLOCK */
    int64_t until;  /* the latest expiry given (the value's TTL) */
    uint32_t n, cap;
    rv *e;          /* by id, ascending */
} rvtab;

static RedisModuleType *rv_type;

static void tab_free(void *p)
{
    rvtab *t = p;
    if (t == NULL) return;
    RedisModule_Free(t->e);
    RedisModule_Free(t);
}

/* Drops the reservations whose window ended at t (exp <= t). */
static void tab_drop(rvtab *t, int64_t now)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->e[i].exp > now) t->e[w++] = t->e[i];
    t->n = w;
}

/* The index of id, or -1. */
static int64_t tab_find(const rvtab *t, uint64_t id)
{
    uint32_t lo = 0, hi = t->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->e[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->n && t->e[lo].id == id ? (int64_t)lo : -1;
}

/* ---- the blob: RDB and RL.HOLDRESTORE ------------------------------------------ */

static void st64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t ld64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t blob_len(const rvtab *t) { return RV_HDR + (size_t)t->n * RV_ENT; }

static void blob_write(const rvtab *t, uint8_t *b)
{
    st64(b, t->last);
    st64(b + 8, (uint64_t)t->clock);
    st64(b + 16, (uint64_t)t->until);
    for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(t->n >> (8 * i));
    for (uint32_t k = 0; k < t->n; k++) {
        const rv *e = &t->e[k];
        uint8_t *q = b + RV_HDR + (size_t)k * RV_ENT;
        st64(q, e->id);
        st64(q + 8, (uint64_t)e->exp);
        st64(q + 16, (uint64_t)e->at);
        st64(q + 24, (uint64_t)e->est);
        st64(q + 32, (uint64_t)e->p.limit);
        st64(q + 40, (uint64_t)e->p.window_ms);
        st64(q + 48, (uint64_t)e->p.burst);
        st64(q + 56, (uint64_t)e->p.precision);
        q[64] = (uint8_t)e->p.algo;
        q[65] = (uint8_t)e->p.log_rejected;
    }
}

static int in_time(int64_t t) { return t > -SL_MAX_TIME_MS && t < SL_MAX_TIME_MS; }

/* A table from a blob, every field checked: NULL when malformed. */
static rvtab *blob_read(const uint8_t *b, size_t len)
{
    if (len < RV_HDR) return NULL;
    uint32_t n = 0;
    for (int i = 0; i < 4; i++) n |= (uint32_t)b[24 + i] << (8 * i);
    if (n > RV_MAX || len != RV_HDR + (size_t)n * RV_ENT) return NULL;
    rvtab *t = RedisModule_Calloc(1, sizeof *t);
    if (t == NULL) return NULL;
    t->last = ld64(b);
    t->clock = (int64_t)ld64(b + 8);
    t->until = (int64_t)ld64(b + 16);
    int ok = (t->clock == NO_CLOCK || in_time(t->clock)) && in_time(t->until) && t->last < (1ULL << 62);
    if (ok && n > 0 && (t->e = RedisModule_Calloc(n, sizeof *t->e)) == NULL) ok = 0;
    t->cap = n;
    for (uint32_t k = 0; ok && k < n; k++) {
        const uint8_t *q = b + RV_HDR + (size_t)k * RV_ENT;
        rv *e = &t->e[k];
        e->id = ld64(q);
        e->exp = (int64_t)ld64(q + 8);
        e->at = (int64_t)ld64(q + 16);
        e->est = (int64_t)ld64(q + 24);
        e->p = (sl_params)SL_PARAMS_INIT;
        e->p.limit = (int64_t)ld64(q + 32);
        e->p.window_ms = (int64_t)ld64(q + 40);
        e->p.burst = (int64_t)ld64(q + 48);
        e->p.precision = (int64_t)ld64(q + 56);
        e->p.algo = (sl_algo)q[64];
        e->p.log_rejected = q[65];
        ok = e->id >= 1 && e->id <= t->last && (k == 0 || e->id > t->e[k - 1].id) &&
             in_time(e->exp) && in_time(e->at) && e->exp <= t->until && e->est >= 0 &&
             e->est <= SL_MAX_LIMIT && q[64] < SL_ALGO_COUNT && q[64] != SL_SLIDING_LOG &&
             q[65] <= 1 && sl_params_check(&e->p) == 0;
        t->n = k + 1;
    }
    if (!ok) {
        tab_free(t);
        return NULL;
    }
    return t;
}

static void tab_save(RedisModuleIO *io, void *p)
{
    rvtab *t = p;
    size_t len = blob_len(t);
    uint8_t *b = RedisModule_Alloc(len);
    blob_write(t, b);
    RedisModule_SaveStringBuffer(io, (const char *)b, len);
    RedisModule_Free(b);
}

/* Loading (module.c's type_load says why every read is checked): a
 * refused value is logged as "warning" while Redis loads its data, as
 * "verbose" for RESTORE (which answers an error: a client sending bad
 * payloads cannot fill the log); NULL. */
static void *tab_refuse(RedisModuleIO *io, const char *why, long long n)
{
    int loading = RedisModule_GetContextFlags(RedisModule_GetContextFromIO(io)) &
                  REDISMODULE_CTX_FLAGS_LOADING;
    RedisModule_LogIOError(io, loading ? "warning" : "verbose", "sluice: a %s value refused: %s %lld",
                           RV_TYPE, why, n);
    return NULL;
}

static void *tab_load(RedisModuleIO *io, int encver)
{
    if (encver != RV_ENCVER) return tab_refuse(io, "encoding version (this module reads 0)", encver);
    size_t len = 0;
    char *b = RedisModule_LoadStringBuffer(io, &len);
    if (RedisModule_IsIOError(io) || b == NULL) {
        if (b) RedisModule_Free(b);
        return tab_refuse(io, "short read, bytes", 0);
    }
    rvtab *t = blob_read((const uint8_t *)b, len);
    RedisModule_Free(b);
    if (t == NULL) return tab_refuse(io, "malformed, bytes", (long long)len);
    return t;
}

static void tab_rewrite(RedisModuleIO *aof, RedisModuleString *key, void *p)
{
    rvtab *t = p;
    size_t len = blob_len(t);
    uint8_t *b = RedisModule_Alloc(len);
    blob_write(t, b);
    RedisModule_EmitAOF(aof, "RL.HOLDRESTORE", "sb", key, (const char *)b, len);
    RedisModule_Free(b);
}

static size_t tab_mem(const void *p)
{
    const rvtab *t = p;
    return sizeof *t + (size_t)t->cap * sizeof *t->e;
}

/* ---- commands ------------------------------------------------------------------ */

/* Opens hkey for writing: 0 with *tp (NULL: empty), or -1 with the reply
 * sent (WRONGTYPE). */
static int open_tab(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleKey **kp, rvtab **tp)
{
    RedisModuleKey *k = RedisModule_OpenKey(ctx, name, REDISMODULE_WRITE);
    int ty = RedisModule_KeyType(k);
    *tp = NULL;
    if (ty != REDISMODULE_KEYTYPE_EMPTY && RedisModule_ModuleTypeGetType(k) != rv_type) {
        RedisModule_CloseKey(k);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }
    if (ty != REDISMODULE_KEYTYPE_EMPTY) *tp = RedisModule_ModuleTypeGetValue(k);
    *kp = k;
    return 0;
}

/* The two keys: hkey any 1..SL_MAX_KEY + 8 bytes, key as RL.ALLOW's, and
 * not the same key.  0, or -1 with err. */
static int keys_ok(RedisModuleString **argv, char *err)
{
    size_t hn, kn;
    const char *h = RedisModule_StringPtrLen(argv[1], &hn);
    const char *k = RedisModule_StringPtrLen(argv[2], &kn);
    if (hn == 0 || hn > SL_MAX_KEY + 8) {
        snprintf(err, ERRLEN, "the reservations' key must be 1 to %d bytes", SL_MAX_KEY + 8);
        return -1;
    }
    if (sl__mod_key_ok(k, kn, err) != 0) return -1;
    if (hn == kn && memcmp(h, k, hn) == 0) {
        snprintf(err, ERRLEN, "the reservations' key and the key must differ");
        return -1;
    }
    return 0;
}

/* hkey's TTL: until its latest expiry, as seen from t (an hour at least
 * with client time); clock: Redis's. */
static void tab_expire(RedisModuleKey *k, const rvtab *t, int64_t now, int64_t clock)
{
    int64_t ttl = t->until - now;
    if (sl__mod_trusted() && ttl < HOUR_MS) ttl = HOUR_MS;
    if (ttl < 1) ttl = 1;
    RedisModule_SetAbsExpire(k, clock + ttl);
}

static int reply_err(RedisModuleCtx *ctx, const char *msg) { return sl__mod_reply_err(ctx, msg); }

/* RL.HOLDRESERVE hkey key limit window COST estimate [options] [AT t] */
static int cmd_reserve(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN];
    if (argc < 5) return RedisModule_WrongArity(ctx);
    if (keys_ok(argv, err) != 0) return reply_err(ctx, err);
    sl__arg a[SL__ALLOW_ARGS];
    int na = argc - 3 < SL__ALLOW_ARGS ? argc - 3 : SL__ALLOW_ARGS, has_cost = 0;
    for (int k = 0; k < na; k++) {
        a[k].p = RedisModule_StringPtrLen(argv[3 + k], &a[k].len);
        if (k >= 2 && a[k].len == 4 && strncasecmp(a[k].p, "COST", 4) == 0) has_cost = 1;
    }
    sl__allow_req q;
    if (sl__parse_allow(a, na, NULL, sl__mod_at, ctx, &q, err, ERRLEN) < 0)
        return reply_err(ctx, err);
    if (!has_cost) return reply_err(ctx, "RL.HOLDRESERVE needs COST estimate");
    if (q.p.algo == SL_SLIDING_LOG)
        return reply_err(ctx, "RL.HOLDRESERVE does not take sliding-log: a logged request's cost "
                              "is not changed afterwards");
    int rc = sl_params_check(&q.p);
    if (rc != 0) return reply_err(ctx, sl_strerror(rc));
    int64_t clock = RedisModule_Milliseconds(), now = q.has_at ? q.at : clock;
    RedisModuleKey *hk;
    rvtab *t;
    if (open_tab(ctx, argv[1], &hk, &t) != 0) return REDISMODULE_OK;
    int made = t == NULL;
    if (made && (t = RedisModule_Calloc(1, sizeof *t)) == NULL) {
        RedisModule_CloseKey(hk);
        return reply_err(ctx, sl_strerror(SL_ENOMEM));
    }
    if (made) t->clock = NO_CLOCK;
    int64_t tt = t->clock != NO_CLOCK && t->clock > now ? t->clock : now;
    tab_drop(t, tt);
    if (t->n >= RV_MAX) {
        RedisModule_CloseKey(hk);
        if (made) tab_free(t);
        snprintf(err, sizeof err,
                 "no room for the reservation: the key holds %d live reservations (the module's "
                 "bound)", RV_MAX);
        return reply_err(ctx, err);
    }
    if (t->n == t->cap) { /* room first: nothing may fail after the charge */
        uint32_t cap = t->cap ? t->cap * 2 : 4;
        if (cap > RV_MAX) cap = RV_MAX;
        rv *e = RedisModule_Calloc(cap, sizeof *e);
        if (e == NULL) {
            RedisModule_CloseKey(hk);
            if (made) tab_free(t);
            return reply_err(ctx, sl_strerror(SL_ENOMEM));
        }
        if (t->n) memcpy(e, t->e, (size_t)t->n * sizeof *e);
        RedisModule_Free(t->e);
        t->e = e;
        t->cap = cap;
    }
    sl_result r;
    rc = sl__mod_rate(ctx, argv[2], &q.p, tt, clock, 0, q.cost, 0, &r);
    if (rc != 0) {
        if (made) tab_free(t);
        RedisModule_CloseKey(hk);
        return rc == -1 ? REDISMODULE_OK : reply_err(ctx, sl_strerror(rc));
    }
    uint64_t id = 0;
    if (r.allowed) {
        if (t->last == 0) /* ids above a former value's: from the time, in us */
            t->last = tt > 0 && tt < (INT64_C(1) << 53) / 1000 ? (uint64_t)tt * 1000 : 0;
        id = ++t->last;
        rv *e = &t->e[t->n++];
        *e = (rv){.id = id, .exp = tt + q.p.window_ms, .at = tt, .est = q.cost, .p = q.p};
        if (made || e->exp > t->until) t->until = e->exp;
    }
    t->clock = t->n ? tt : NO_CLOCK;
    if (made && id == 0) {
        tab_free(t); /* denied: nothing kept */
    } else {
        if (made) RedisModule_ModuleTypeSetValue(hk, rv_type, t);
        tab_expire(hk, t, tt, clock);
    }
    RedisModule_CloseKey(hk);
    if (q.has_at)
        RedisModule_ReplicateVerbatim(ctx);
    else
        sl__mod_replicate_at(ctx, "RL.HOLDRESERVE", argv, argc, now);
    RedisModule_ReplyWithArray(ctx, 7);
    sl__mod_reply_six(ctx, &r);
    RedisModule_ReplyWithLongLong(ctx, (long long)id);
    return REDISMODULE_OK;
}

/* RL.HOLDSETTLE hkey key id actual [AT t] */
static int cmd_settle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN];
    if (argc != 5 && argc != 7) return RedisModule_WrongArity(ctx);
    if (keys_ok(argv, err) != 0) return reply_err(ctx, err);
    size_t n;
    const char *s = RedisModule_StringPtrLen(argv[4], &n);
    int64_t actual, idv = 0;
    if (sl_int_parse(s, n, SL_MAX_LIMIT, &actual) != 0) {
        snprintf(err, sizeof err, "actual must be an integer 0..%lld", (long long)SL_MAX_LIMIT);
        return reply_err(ctx, err);
    }
    int64_t clock = RedisModule_Milliseconds(), now = clock;
    int has_at = argc == 7;
    if (has_at) {
        s = RedisModule_StringPtrLen(argv[5], &n);
        if (n != 2 || strncasecmp(s, "AT", 2) != 0) return reply_err(ctx, "expected AT t after actual");
        s = RedisModule_StringPtrLen(argv[6], &n);
        if (sl__mod_at(ctx, s, n, &now, err, ERRLEN) != 0) return reply_err(ctx, err);
    }
    s = RedisModule_StringPtrLen(argv[3], &n);
    if (sl_int_parse(s, n, INT64_MAX, &idv) != 0) idv = 0; /* not an id: unknown */
    RedisModuleKey *hk;
    rvtab *t;
    if (open_tab(ctx, argv[1], &hk, &t) != 0) return REDISMODULE_OK;
    if (t == NULL || t->clock == NO_CLOCK) { /* no reservations: nothing written */
        RedisModule_CloseKey(hk);
        RedisModule_ReplyWithArray(ctx, 1);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }
    int64_t tt = t->clock > now ? t->clock : now, clock0 = t->clock;
    tab_drop(t, tt);
    int64_t i = idv > 0 ? tab_find(t, (uint64_t)idv) : -1;
    sl_result r;
    if (i >= 0) {
        rv *e = &t->e[i];
        int rc = sl__mod_rate(ctx, argv[2], &e->p, tt, clock, 1, actual - e->est, e->at, &r);
        if (rc != 0) { /* nothing changed (expired ones dropped: as a replica will) */
            t->clock = t->n ? clock0 : NO_CLOCK;
            RedisModule_CloseKey(hk);
            return rc == -1 ? REDISMODULE_OK : reply_err(ctx, sl_strerror(rc));
        }
        memmove(e, e + 1, (size_t)(t->n - (uint32_t)i - 1) * sizeof *e);
        t->n--;
    }
    t->clock = t->n ? tt : NO_CLOCK;
    RedisModule_CloseKey(hk); /* the TTL stands: until the latest expiry given */
    /* the clock moved, expired ones went: the replicas do the same */
    if (has_at)
        RedisModule_ReplicateVerbatim(ctx);
    else
        sl__mod_replicate_at(ctx, "RL.HOLDSETTLE", argv, argc, now);
    if (i < 0) {
        RedisModule_ReplyWithArray(ctx, 1);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }
    RedisModule_ReplyWithArray(ctx, 7);
    RedisModule_ReplyWithLongLong(ctx, 1);
    sl__mod_reply_six(ctx, &r);
    return REDISMODULE_OK;
}

/* ---- RL.HOLDCHECK's leases: RL.ACQUIRE's keys, in the script's format ---------
 * A lease of RL.CHECK (module.c's RL.HOLDCHECK) lives where RL.ACQUIRE on
 * its lease key keeps it on the script's path, so that the script's
 * RL.RELEASE (op LR) gives it back and RL.ACQUIRE (op LA) shares the count:
 * hh, a hash with "n" (the last id given) and "l" (the leases' clock),
 * and hl, a sorted set id -> expiry (sluice.lua, "holds").  What is
 * written here is what op C writes there, step for step (lease_look and
 * lease_take in sluice.lua), through the key API.  One difference: a new
 * id counter is seeded from Redis's clock in ms x 1000 (the script reads
 * TIME in us), and module.c replicates that seed before the command (an
 * HSET), so that a replica or the AOF gives the same ids. */

#define LEASE_WRONGTYPE(k, type)                                                                   \
    (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_EMPTY && RedisModule_KeyType(k) != (type))

/* Field f of hash key k as an integer: 1 (*v), 0 absent, -1 not an integer. */
static int hash_int(RedisModuleCtx *ctx, RedisModuleKey *k, const char *f, long long *v)
{
    RedisModuleString *s = NULL;
    if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_HASH) return 0;
    RedisModule_HashGet(k, REDISMODULE_HASH_CFIELDS, f, &s, NULL);
    if (s == NULL) return 0;
    int rc = RedisModule_StringToLongLong(s, v) == REDISMODULE_OK ? 1 : -1;
    RedisModule_FreeString(ctx, s);
    return rc;
}

/* HSET k f v, v in decimal (the script's dec). */
static void hash_put(RedisModuleCtx *ctx, RedisModuleKey *k, const char *f, long long v)
{
    RedisModuleString *s = RedisModule_CreateStringFromLongLong(ctx, v);
    RedisModule_HashSet(k, REDISMODULE_HASH_CFIELDS, f, s, NULL);
    RedisModule_FreeString(ctx, s);
}

/* The lowest (last 0) or highest (last 1) score of the sorted set k with a
 * score <= max, into *score: 1, or 0 when there is none.  With drop, that
 * member is removed too. */
static int zset_end(RedisModuleCtx *ctx, RedisModuleKey *k, int last, double max, int drop,
                    double *score)
{
    if (RedisModule_KeyType(k) != REDISMODULE_KEYTYPE_ZSET) return 0;
    int ok = last ? RedisModule_ZsetLastInScoreRange(k, -INFINITY, max, 0, 0)
                  : RedisModule_ZsetFirstInScoreRange(k, -INFINITY, max, 0, 0);
    RedisModuleString *e = NULL;
    if (ok == REDISMODULE_OK && !RedisModule_ZsetRangeEndReached(k))
        e = RedisModule_ZsetRangeCurrentElement(k, score);
    RedisModule_ZsetRangeStop(k);
    if (e == NULL) return 0;
    int gone = 0;
    if (drop) RedisModule_ZsetRem(k, e, &gone); /* the last one deletes the key */
    RedisModule_FreeString(ctx, e);
    return 1;
}

/* The script's keep: k's expiry never shortened, at least ms (an hour with
 * client time). */
static void lease_keep(RedisModuleKey *k, int64_t ms)
{
    if (ms < 1) ms = 1;
    if (sl__mod_trusted() && ms < HOUR_MS) ms = HOUR_MS;
    if (RedisModule_GetExpire(k) < ms) RedisModule_SetExpire(k, ms);
}

void sl__mod_lease_close(sl__mod_lease *ls)
{
    if (ls->kh != NULL) RedisModule_CloseKey(ls->kh);
    if (ls->kl != NULL) RedisModule_CloseKey(ls->kl);
    ls->kh = ls->kl = NULL;
}

int sl__mod_lease_open(RedisModuleCtx *ctx, sl__mod_lease *ls, char *err)
{
    long long v;
    ls->kh = RedisModule_OpenKey(ctx, ls->hh, REDISMODULE_READ | REDISMODULE_WRITE);
    ls->kl = RedisModule_OpenKey(ctx, ls->hl, REDISMODULE_READ | REDISMODULE_WRITE);
    if (LEASE_WRONGTYPE(ls->kh, REDISMODULE_KEYTYPE_HASH) ||
        LEASE_WRONGTYPE(ls->kl, REDISMODULE_KEYTYPE_ZSET)) {
        sl__mod_lease_close(ls);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }
    static const char *const fields[2] = {"n", "l"};
    for (int f = 0; f < 2; f++)
        if (hash_int(ctx, ls->kh, fields[f], &v) < 0) {
            size_t n;
            const char *name = RedisModule_StringPtrLen(ls->hh, &n);
            snprintf(err, ERRLEN, "field %s of %.*s is not an integer", fields[f],
                     (int)(n > 160 ? 160 : n), name);
            sl__mod_lease_close(ls);
            return SL_EINVAL;
        }
    return 0;
}

int sl__mod_lease_look(RedisModuleCtx *ctx, sl__mod_lease *ls, int64_t now)
{
    long long l;
    int had = hash_int(ctx, ls->kh, "l", &l) == 1, wrote = 0;
    ls->t = had && l > now ? l : now;
    if (had && l < ls->t) { /* as LA: the clock moved to now */
        hash_put(ctx, ls->kh, "l", ls->t);
        wrote = 1;
    }
    /* ZREMRANGEBYSCORE hl -inf t: each one found is removed (bounded by
     * the set's size when looked at) */
    double s;
    for (size_t i = 0, n = RedisModule_ValueLength(ls->kl); i < n; i++) {
        if (!zset_end(ctx, ls->kl, 0, (double)ls->t, 1, &s)) break;
        wrote = 1;
    }
    int64_t held = (int64_t)RedisModule_ValueLength(ls->kl), t = ls->t;
    double first = 0, last = 0;
    if (held > 0) {
        zset_end(ctx, ls->kl, 0, INFINITY, 0, &first);
        zset_end(ctx, ls->kl, 1, INFINITY, 0, &last);
    }
    if (held >= ls->max) { /* full (held > 0): until the oldest expires */
        ls->room = 0;
        ls->ans = (sl_result){0, ls->max, 0, (int64_t)first - t, (int64_t)last - t, 0};
    } else { /* what a take answers (a look too) */
        int64_t end = t + ls->ttl;
        if (held > 0 && (int64_t)last > end) end = (int64_t)last;
        ls->room = 1;
        ls->ans = (sl_result){1, ls->max, ls->max - held - 1, 0, end - t, 0};
    }
    return wrote;
}

void sl__mod_lease_take(RedisModuleCtx *ctx, sl__mod_lease *ls)
{
    long long n;
    ls->seed = 0;
    if (hash_int(ctx, ls->kh, "n", &n) != 1) n = ls->seed = RedisModule_Milliseconds() * 1000;
    ls->id = n + 1; /* HINCRBY n 1 */
    hash_put(ctx, ls->kh, "n", ls->id);
    int64_t exp = ls->t + ls->ttl;
    RedisModuleString *m = RedisModule_CreateStringFromLongLong(ctx, ls->id);
    int flags = 0;
    RedisModule_ZsetAdd(ls->kl, (double)exp, m, &flags);
    RedisModule_FreeString(ctx, m);
    hash_put(ctx, ls->kh, "l", ls->t);
    lease_keep(ls->kl, exp - ls->t);
    lease_keep(ls->kh, exp - ls->t);
}

/* RL.HOLDRESTORE hkey bytes: what the AOF rewrite emits (the value as
 * RDB saves it, checked). */
static int cmd_restore(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 3) return RedisModule_WrongArity(ctx);
    size_t len;
    const char *b = RedisModule_StringPtrLen(argv[2], &len);
    rvtab *t = blob_read((const uint8_t *)b, len);
    if (t == NULL) return reply_err(ctx, "malformed reservations for RL.HOLDRESTORE");
    RedisModuleKey *hk;
    rvtab *old;
    if (open_tab(ctx, argv[1], &hk, &old) != 0) {
        tab_free(t);
        return REDISMODULE_OK;
    }
    RedisModule_ModuleTypeSetValue(hk, rv_type, t); /* frees the old value */
    RedisModule_CloseKey(hk);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

int sl__mod_holds_load(RedisModuleCtx *ctx)
{
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION_1,
        .rdb_load = tab_load,
        .rdb_save = tab_save,
        .aof_rewrite = tab_rewrite,
        .mem_usage = tab_mem,
        .free = tab_free,
    };
    rv_type = RedisModule_CreateDataType(ctx, RV_TYPE, RV_ENCVER, &tm);
    if (rv_type == NULL) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "rl.holdreserve", cmd_reserve, "write deny-oom", 1, 2, 1) !=
            REDISMODULE_OK ||
        RedisModule_CreateCommand(ctx, "rl.holdsettle", cmd_settle, "write deny-oom", 1, 2, 1) !=
            REDISMODULE_OK ||
        RedisModule_CreateCommand(ctx, "rl.holdrestore", cmd_restore, "write deny-oom", 1, 1, 1) !=
            REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
