/*
 * module.c -- sluice as a Redis module (build/sluice.so): RL.ALLOW, RL.PEEK,
 * RL.RESET (SPEC section 7, the arguments, replies and error texts of
 * sluiced's) and RL.DECIDEALL (all or none, sl_decide_all's rules), on the
 * library's engine, inside Redis.  docs/module.md is the user's page.
 *
 * State: a value of the module type "sluice-rl" per Redis key (the user's
 * key), holding that key's state under each algorithm used -- a lone
 * record each (src/lib/lone.h), decided by the library's own decision
 * path.  Saved in RDB (rdb_save/rdb_load: every field checked, so a
 * crafted RESTORE fails with an error -- type_load), rewritten in AOF as
 * RL.RESTORE commands carrying each record's exact bytes, replicated as
 * the decision at its time (RL.ALLOW/RL.DECIDEALL with AT t, accepted from
 * the master and while loading), and given a TTL at every decision: the
 * time its state comes to rest (equals a fresh key's), never earlier.
 *
 * Time: Redis's clock (RedisModule_Milliseconds), unless loaded with
 * `trust-client-time yes` (then AT t is accepted, bounded by
 * `max-client-skew`).  Redis runs commands one at a time, so no locks.
 *
 * Speed (docs/module.md, "Numbers"): a decision's own work is small next
 * to Redis's; what the module adds is kept to the key's lookup, one cache
 * line of value holding the record (rlval), the TTL's dictionary update
 * (at an absolute time: no second clock read) and the reply -- the
 * decision's propagation is built only when something can take it
 * (repl_watch below).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "checkexec.h"
#include "lone.h"
#include "module_int.h"
#include "redismodule_api.h"
#include "sluice.h"
#include "util.h"

#define TYPE_NAME   "sluice-rl" /* 9 characters, as Redis requires */
/* The RDB encoding: 1 since a bucket's record may carry its lease tail
 * (lone.h); version 0's values (no tails) load as they are. */
#define TYPE_ENCVER 1
#define ERRLEN      256
#define HOUR_MS     3600000LL

/* The module's settings (its load arguments) and its loose shard. */
static struct {
    int trust_client_time; /* accept AT t from clients */
    int64_t max_client_skew_ms;
    uint64_t max_memory; /* bounds one key's state to 1/64 of it, as sluiced's store */
    RedisModuleType *type;
    sl__shard *loose; /* where the lone records live (counts sliding-log rings) */
    int repl;         /* replication may take what is propagated (repl_watch) */
} mod;

/* One Redis key's state: its record under each algorithm used.  The
 * first one of an algorithm that stays in a room (lone.h: not
 * sliding-log, not sliding-buckets) lives in the value's room; the others
 * are pointed to by `more`, made when first needed.  A key under one such
 * algorithm is one 64-byte allocation -- one cache line -- freed in one
 * piece. */
typedef struct rlval {
    uint64_t room[SL__LONE_ROOM / 8];
    uint8_t **more; /* NULL, or SL_ALGO_COUNT records (or NULL): those not in the room */
} rlval;
_Static_assert(sizeof(rlval) == 64, "a value is one cache line");

static const char refused_at[] =
    "AT is refused: this server decides at its own clock (load the sluice module "
    "with trust-client-time yes to accept client times)";

/* ---- replies --------------------------------------------------------------- */

static int reply_err(RedisModuleCtx *ctx, const char *msg)
{
    char buf[2 * ERRLEN];
    snprintf(buf, sizeof buf, "ERR %s", msg);
    return RedisModule_ReplyWithError(ctx, buf);
}

void sl__mod_reply_six(RedisModuleCtx *ctx, const sl_result *r)
{
    RedisModule_ReplyWithLongLong(ctx, r->allowed);
    RedisModule_ReplyWithLongLong(ctx, r->limit);
    RedisModule_ReplyWithLongLong(ctx, r->remaining);
    RedisModule_ReplyWithLongLong(ctx, r->retry_after_ms);
    RedisModule_ReplyWithLongLong(ctx, r->reset_after_ms);
    RedisModule_ReplyWithLongLong(ctx, r->delay_ms);
}

static void reply_fields(RedisModuleCtx *ctx, const sl_result *r)
{
    RedisModule_ReplyWithArray(ctx, 6);
    sl__mod_reply_six(ctx, r);
}

/* The six fields flat, then one more integer (RL.CHECKPLAN's `stretched`,
 * RL.HOLDCHECK's lease id). */
static void reply_seven(RedisModuleCtx *ctx, const sl_result *r, long long seventh)
{
    sl__mod_reply_six(ctx, r);
    RedisModule_ReplyWithLongLong(ctx, seventh);
}

/* ---- values ---------------------------------------------------------------- */

static rlval *val_new(void) { return RedisModule_Calloc(1, sizeof(rlval)); }

/* v's record under algorithm a, or NULL. */
static uint8_t *val_rec(const rlval *v, int a)
{
    uint8_t *r = sl__lone_roomed(v->room);
    if (r != NULL && (int)sl__lone_algo(r) == a) return r;
    return v->more ? v->more[a] : NULL;
}

/* Records r (NULL: none) as v's record under a, after a decision, a load
 * or a removal made or removed it: the room's record is found in the
 * room, any other in more, which must exist then (val_more). */
static void val_set(rlval *v, int a, uint8_t *r)
{
    if (r != NULL && r == sl__lone_roomed(v->room)) r = NULL;
    if (v->more) v->more[a] = r;
}

/* Makes v->more if it is not there yet: 0, or SL_ENOMEM. */
static int val_more(rlval *v)
{
    if (v->more == NULL) v->more = RedisModule_Calloc(SL_ALGO_COUNT, sizeof *v->more);
    return v->more ? 0 : SL_ENOMEM;
}

/* The room for a record of algorithm a to be made in v -- v's room if a's
 * records stay in one and it is free -- or NULL. */
static void *val_room(rlval *v, int a)
{
    return sl__lone_stays((unsigned)a) && sl__lone_roomed(v->room) == NULL ? v->room : NULL;
}

/* Whether a decision under a on v may leave a's record outside the room,
 * so that v->more must exist before it is taken. */
static int val_needs_more(const rlval *v, int a)
{
    if (v->more != NULL || !sl__lone_stays((unsigned)a)) return v->more == NULL;
    uint8_t *r = sl__lone_roomed(v->room);
    return r != NULL && (int)sl__lone_algo(r) != a;
}

/* Frees v->more when it holds no record (a decision that made none). */
static void val_trim(rlval *v)
{
    if (v->more == NULL) return;
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        if (v->more[a]) return;
    RedisModule_Free(v->more);
    v->more = NULL;
}

static void val_free(void *p)
{
    rlval *v = p;
    sl__lone_free(mod.loose, sl__lone_roomed(v->room));
    if (v->more) {
        for (int a = 0; a < SL_ALGO_COUNT; a++) sl__lone_free(mod.loose, v->more[a]);
        RedisModule_Free(v->more);
    }
    RedisModule_Free(v);
}

static int val_empty(const rlval *v)
{
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        if (val_rec(v, a)) return 0;
    return 1;
}

/* A record's dump (RDB, RL.RESTORE) longer than this is refused before
 * it is looked at: the state a decision may grow one key to
 * (sl__lone_decide refuses parameters past it with SL_ETOOBIG), or no
 * bound with max-memory 0. */
static uint64_t dump_max(void) { return sl__shard_loose_rec_max(mod.loose); }

/* Whether the command comes from the master or the AOF: a decision
 * replicated at its time, whose AT is taken as it is (the master checked
 * it, or decided it at its own clock). */
static int from_log(RedisModuleCtx *ctx)
{
    int f = RedisModule_GetContextFlags(ctx);
    return (f & (REDISMODULE_CTX_FLAGS_REPLICATED | REDISMODULE_CTX_FLAGS_LOADING)) != 0;
}

/* Parses AT t (n bytes at s): accepted with trust-client-time (within
 * max-client-skew of Redis's clock) and from the master or the AOF
 * (unbounded); else refused as sluiced refuses it.  ctx: the command's
 * RedisModuleCtx (sl__parse_allow's at). */
static int parse_at_bytes(void *ctx, const char *s, size_t n, int64_t *out, char *err,
                          size_t errlen)
{
    int logged = from_log(ctx);
    return sl__parse_at(mod.trust_client_time || logged, logged ? 0 : mod.max_client_skew_ms,
                        refused_at, RedisModule_Milliseconds(), s, n, out, err, errlen);
}

static int parse_at(RedisModuleCtx *ctx, RedisModuleString *arg, int64_t *out, char *err)
{
    size_t n;
    const char *s = RedisModule_StringPtrLen(arg, &n);
    return parse_at_bytes(ctx, s, n, out, err, ERRLEN);
}

/* Sets the key's TTL to when all of v's state comes to rest (the latest
 * reset time of its records, each rounded up: never early) -- as seen from
 * `now`, the time it was decided at, which is `clock` on Redis's clock
 * (the same time unless the request carried AT).  With client time trusted
 * the key's times may not be Redis's, so it is kept at least an hour of
 * real time.  No TTL when some state never comes to rest. */
static void val_expire(RedisModuleKey *key, const rlval *v, int64_t now, int64_t clock)
{
    int64_t until = INT64_MIN;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const uint8_t *rec = val_rec(v, a);
        if (!rec) continue;
        int64_t r = sl__lone_reset_at(rec), end = sl__lone_lease_end(mod.loose, rec);
        if (r > until) until = r;
        if (end > until) until = end; /* units leased out: not at rest before they settle */
    }
    if (until == INT64_MIN) return;
    if (until == INT64_MAX) {
        RedisModule_SetExpire(key, REDISMODULE_NO_EXPIRE);
        return;
    }
    /* |now| and |until| < 2^62 + 2^62 (clock + a reset of at most ~2^42) */
    int64_t ttl = until - now;
    if (mod.trust_client_time && ttl < HOUR_MS) ttl = HOUR_MS;
    if (ttl < 1) ttl = 1;
    /* absolute: RedisModule_SetExpire would read the clock again */
    RedisModule_SetAbsExpire(key, clock + ttl);
}

/* Opens keyname for writing (or reading) and finds its value: 0 with *vp
 * (NULL when the key is empty), or -1 when it holds another type (the
 * WRONGTYPE reply is sent, the key closed). */
static int open_val(RedisModuleCtx *ctx, RedisModuleString *name, int mode, RedisModuleKey **kp,
                    rlval **vp)
{
    RedisModuleKey *k = RedisModule_OpenKey(ctx, name, mode);
    int t = RedisModule_KeyType(k);
    *vp = NULL;
    if (t != REDISMODULE_KEYTYPE_EMPTY && RedisModule_ModuleTypeGetType(k) != mod.type) {
        RedisModule_CloseKey(k);
        RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }
    if (t != REDISMODULE_KEYTYPE_EMPTY) *vp = RedisModule_ModuleTypeGetValue(k);
    *kp = k;
    return 0;
}

/* ---- propagation: built only when something can take it ---------------------
 * A decision at Redis's clock is propagated as the decision at its time
 * (the command with AT now added) for the AOF and the replicas.  Building
 * that command (RedisModule_Replicate: a command-table lookup and new
 * argument objects, freed again) costs about as much as the decision, and
 * Redis drops it unless its AOF is on or, being a master, it has replicas
 * or a replication backlog.  The AOF is read from the context flags at
 * each decision (CONFIG SET appendonly yes sets them before its rewrite
 * starts).  The rest is mod.repl, kept conservatively by repl_watch:
 *   - 1 when the module loads on a replica, or on a server with replicas
 *     or a backlog;
 *   - 1 when a child process is born (a full sync forks before it gives
 *     the replica its starting offset, so every decision after that is
 *     built), when the replication role changes, when a replica goes
 *     online or offline;
 *   - when a child dies, 1 only if INFO shows replicas or a backlog, or
 *     this server is a replica (a plain BGSAVE or AOF rewrite leaves it 0
 *     again).
 * A replica's PSYNC makes the backlog before the fork; what goes in
 * between reaches no replica (the fork's snapshot holds it and the
 * replica's offset starts after it).  When nothing can take it the
 * command is "propagated" verbatim: Redis drops it at once but counts the
 * change (server.dirty, which drives the RDB save points), as before. */

/* Whether replication can take what is propagated now, from INFO. */
static int repl_now(RedisModuleCtx *ctx)
{
    if (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_SLAVE) return 1;
    RedisModuleServerInfoData *inf = RedisModule_GetServerInfo(ctx, "replication");
    if (inf == NULL) return 1;
    int e1 = 0, e2 = 0;
    long long replicas = RedisModule_ServerInfoGetFieldSigned(inf, "connected_slaves", &e1);
    long long backlog = RedisModule_ServerInfoGetFieldSigned(inf, "repl_backlog_active", &e2);
    RedisModule_FreeServerInfo(ctx, inf);
    return e1 != 0 || e2 != 0 || replicas != 0 || backlog != 0;
}

/* The server events that may start or end replication (above). */
static void repl_watch(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent, void *data)
{
    (void)data;
    if (eid.id == REDISMODULE_EVENT_FORK_CHILD && subevent == REDISMODULE_SUBEVENT_FORK_CHILD_DIED)
        mod.repl = repl_now(ctx);
    else
        mod.repl = 1;
}

/* Propagates a decision made at `now`, Redis's clock: the command with its
 * arguments and AT now (first, for RL.DECIDEALL: at_first), or verbatim
 * when nothing can take it. */
static void replicate_at(RedisModuleCtx *ctx, const char *cmd, RedisModuleString **argv, int argc,
                         int64_t now, int at_first)
{
    if (!mod.repl && !(RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_AOF)) {
        RedisModule_ReplicateVerbatim(ctx); /* dropped by Redis, counted as a change */
        return;
    }
    if (at_first)
        RedisModule_Replicate(ctx, cmd, "clv", "AT", (long long)now, argv + 1, (size_t)(argc - 1));
    else
        RedisModule_Replicate(ctx, cmd, "vcl", argv + 1, (size_t)(argc - 1), "AT", (long long)now);
}

/* ---- parsing: one request's key, limit, window and options ------------------ */

/* The key of a request: at most SL_MAX_KEY bytes, as sluiced takes it --
 * or a key sluiced's Redis backend names (backend_redis.c, the module
 * path): "sl:m" space ":{" tag "}" rest, 8 bytes around a user key of at
 * most SL_MAX_KEY bytes (docs/module.md, "sluiced's Redis backend").
 * 0, or -1 with sluiced's message in err. */
static int key_ok(const char *s, size_t n, char *err)
{
    if (n > SL_MAX_KEY && n <= SL_MAX_KEY + 8 && memcmp(s, "sl:m", 4) == 0 &&
        (s[4] == '0' || s[4] == '1') && s[5] == ':' && s[6] == '{' &&
        memchr(s + 7, '}', n - 7) != NULL)
        return 0;
    return sl__parse_key(s, n, err, ERRLEN);
}

typedef struct request {
    int keyarg; /* argv index of the key */
    sl__allow_req r;
} request;

static int arg_is(RedisModuleString *a, const char *word)
{
    size_t n;
    const char *s = RedisModule_StringPtrLen(a, &n);
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

/* Parses argv[i..end): key limit window [options] as RL.ALLOW takes them
 * (sl__parse_allow, sluiced's grammar; with_at: AT allowed among them).
 * `stop`, when not NULL, is a word that ends the request (RL.DECIDEALL's
 * REQ).  Returns the index after the request, or -1 with the client's
 * message in err. */
static int parse_request(RedisModuleCtx *ctx, RedisModuleString **argv, int i, int end,
                         const char *stop, int with_at, request *q, char *err)
{
    size_t n;
    const char *s;
    sl__arg a[SL__ALLOW_ARGS];
    if (end - i < 3) {
        memset(q, 0, sizeof *q);
        snprintf(err, ERRLEN, "a request needs a key, a limit and a window");
        return -1;
    }
    q->keyarg = i;
    s = RedisModule_StringPtrLen(argv[i], &n);
    if (key_ok(s, n, err) != 0) return -1;
    int na = end - i - 1 < SL__ALLOW_ARGS ? end - i - 1 : SL__ALLOW_ARGS;
    for (int k = 0; k < na; k++) a[k].p = RedisModule_StringPtrLen(argv[i + 1 + k], &a[k].len);
    int took =
        sl__parse_allow(a, na, stop, with_at ? parse_at_bytes : NULL, ctx, &q->r, err, ERRLEN);
    return took < 0 ? -1 : i + 1 + took;
}

/* ---- RL.ALLOW / RL.PEEK ------------------------------------------------------ */

/* Decides p at now for cost on v's record of p's algorithm, committing (a
 * record made in v's room when it has none); *recp: the record.  On an
 * error v is left as it was -- freed when it was made for this call
 * (made), trimmed otherwise -- and the SL_E* code returned. */
static int decide_in(rlval *v, int made, const sl_params *p, int64_t now, int64_t cost,
                     uint8_t **recp, sl_result *r)
{
    uint8_t *rec = val_rec(v, p->algo);
    int rc = val_needs_more(v, p->algo) ? val_more(v) : 0;
    if (rc == 0)
        rc = sl__lone_decide(mod.loose, &rec, rec ? NULL : val_room(v, p->algo), p, now, cost, 1,
                             r);
    if (rc != 0) {
        if (made)
            val_free(v);
        else
            val_trim(v);
    }
    *recp = rec;
    return rc;
}

/* RL.ALLOW key limit window [ALGO a] [COST c] [BURST b] [PRECISION p]
 *          [LOGREJECTED] [AT t]   (RL.PEEK: the same, nothing consumed) */
static int decide_cmd(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int commit)
{
    char err[ERRLEN];
    request q;
    if (argc < 4) return RedisModule_WrongArity(ctx);
    if (parse_request(ctx, argv, 1, argc, NULL, 1, &q, err) < 0) return reply_err(ctx, err);
    int64_t now = q.r.has_at ? q.r.at : RedisModule_Milliseconds();
    int rc = sl_params_check(&q.r.p);
    if (rc != 0) return reply_err(ctx, sl_strerror(rc));
    RedisModuleKey *key;
    rlval *v;
    if (open_val(ctx, argv[1], commit ? REDISMODULE_WRITE : REDISMODULE_READ, &key, &v) != 0)
        return REDISMODULE_OK;
    sl_result r;
    if (!commit) {
        uint8_t *rec = v ? val_rec(v, q.r.p.algo) : NULL;
        rc = sl__lone_decide(mod.loose, &rec, NULL, &q.r.p, now, q.r.cost, 0, &r);
        RedisModule_CloseKey(key);
        if (rc != 0) return reply_err(ctx, sl_strerror(rc));
        reply_fields(ctx, &r);
        return REDISMODULE_OK;
    }
    int made = 0;
    if (v == NULL) {
        if ((v = val_new()) == NULL) {
            RedisModule_CloseKey(key);
            return reply_err(ctx, sl_strerror(SL_ENOMEM));
        }
        made = 1;
    }
    uint8_t *rec;
    rc = decide_in(v, made, &q.r.p, now, q.r.cost, &rec, &r);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        return reply_err(ctx, sl_strerror(rc));
    }
    val_set(v, q.r.p.algo, rec);
    if (made) RedisModule_ModuleTypeSetValue(key, mod.type, v);
    val_expire(key, v, now, q.r.has_at ? RedisModule_Milliseconds() : now);
    RedisModule_CloseKey(key);
    /* the decision at its time, so a replica's state (and the AOF's) is
     * the master's */
    if (q.r.has_at)
        RedisModule_ReplicateVerbatim(ctx);
    else
        replicate_at(ctx, "RL.ALLOW", argv, argc, now, 0);
    reply_fields(ctx, &r);
    return REDISMODULE_OK;
}

static int cmd_allow(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return decide_cmd(ctx, argv, argc, 1);
}

static int cmd_peek(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return decide_cmd(ctx, argv, argc, 0);
}

/* ---- RL.LEASE / RL.LEASERETURN: sluiced's leases (docs/fleet.md, "Leases") -----
 * The module's side of --lease on, sluice.lua's ops T and R, on the
 * library's lease operations (lone.h, "leases"): fixed-window and
 * sliding-window lease units counted in the window's count, spent until
 * the window ends, subtracted again only in that window; token-bucket and
 * gcra lease tokens taken from the bucket, and the record keeps what is
 * out (its lease tail, by epoch of SL__LEASE_EPOCH_MS) so that every
 * decision on the key stops the refill short of B by them.  Other
 * algorithms are decided as RL.ALLOW and lease nothing (extra 0).
 * RL.LEASEINFO names the algorithms that lease: sluiced asks it (lease.c),
 * so an older module, which leases fixed-window only, is used per request
 * for the others. */

/* A positive integer argument (at most max) into *out: 0, or -1 with the
 * client's message in err. */
static int lease_int(RedisModuleString *a, long long max, const char *what, long long *out,
                     char *err)
{
    size_t n;
    const char *s = RedisModule_StringPtrLen(a, &n);
    int neg = n > 0 && s[0] == '-' && max < 0;
    long long v = 0, lim = max < 0 ? -(max + 1) : max; /* max < 0: any int64 (a tag) */
    size_t i = (size_t)neg;
    for (; i < n && i < 20 && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (lim - (s[i] - '0')) / 10) break;
        v = v * 10 + (s[i] - '0');
    }
    if (n == (size_t)neg || i != n) {
        if (max < 0)
            snprintf(err, ERRLEN, "%s must be an integer", what);
        else
            snprintf(err, ERRLEN, "%s must be an integer in 0..%lld", what, max);
        return -1;
    }
    *out = neg ? -v : v;
    return 0;
}

/* Opens argv[ki] for writing with a value (made if empty, *made = 1): 0,
 * or -1 with the reply sent (WRONGTYPE, out of memory). */
static int open_made(RedisModuleCtx *ctx, RedisModuleString *name, RedisModuleKey **kp,
                     rlval **vp, int *made)
{
    *made = 0;
    if (open_val(ctx, name, REDISMODULE_WRITE, kp, vp) != 0) return -1;
    if (*vp == NULL) {
        if ((*vp = val_new()) == NULL) {
            RedisModule_CloseKey(*kp);
            reply_err(ctx, sl_strerror(SL_ENOMEM));
            return -1;
        }
        *made = 1;
    }
    return 0;
}

/* RL.LEASE want key limit window [options] [AT t]: RL.ALLOW's decision,
 * and when it is allowed (an algorithm that leases) up to want - cost
 * more units leased: at most half of what is left after the request, so
 * the last units go one request at a time.  Reply: RL.ALLOW's six fields
 * (remaining without the leased units), extra (units leased), ttl (ms the
 * lease may be spent: to the window's end, or to a bucket's lease's
 * settling), tag (the window's index, windows aligned at 0; a bucket's
 * epoch). */
static int cmd_lease(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN];
    request q;
    long long want;
    if (argc < 5) return RedisModule_WrongArity(ctx);
    if (lease_int(argv[1], SL_MAX_LIMIT, "want", &want, err) != 0) return reply_err(ctx, err);
    if (parse_request(ctx, argv, 2, argc, NULL, 1, &q, err) < 0) return reply_err(ctx, err);
    int64_t now = q.r.has_at ? q.r.at : RedisModule_Milliseconds();
    int rc = sl_params_check(&q.r.p);
    if (rc != 0) return reply_err(ctx, sl_strerror(rc));
    RedisModuleKey *key;
    rlval *v;
    int made;
    if (open_made(ctx, argv[2], &key, &v, &made) != 0) return REDISMODULE_OK;
    uint8_t *rec;
    sl_result r;
    rc = decide_in(v, made, &q.r.p, now, q.r.cost, &rec, &r);
    if (rc != 0) {
        RedisModule_CloseKey(key);
        return reply_err(ctx, sl_strerror(rc));
    }
    sl__lone_lease lz = {0, 0, 0};
    if (r.allowed && rec != NULL && sl__lone_leases(q.r.p.algo)) {
        long long x = want - q.r.cost;
        if (x > r.remaining / 2) x = r.remaining / 2;
        if (x < 0) x = 0;
        /* out of memory for a bucket's tail: the decision stands, no lease */
        if (sl__lone_lease_take(mod.loose, &rec, &q.r.p, now, x, &r, &lz) != 0)
            lz = (sl__lone_lease){0, 0, 0};
    }
    val_set(v, q.r.p.algo, rec);
    if (made) RedisModule_ModuleTypeSetValue(key, mod.type, v);
    val_expire(key, v, now, q.r.has_at ? RedisModule_Milliseconds() : now);
    RedisModule_CloseKey(key);
    if (q.r.has_at)
        RedisModule_ReplicateVerbatim(ctx);
    else
        replicate_at(ctx, "RL.LEASE", argv, argc, now, 0);
    RedisModule_ReplyWithArray(ctx, 9);
    sl__mod_reply_six(ctx, &r);
    RedisModule_ReplyWithLongLong(ctx, lz.extra);
    RedisModule_ReplyWithLongLong(ctx, lz.ttl_ms);
    RedisModule_ReplyWithLongLong(ctx, lz.tag);
    return REDISMODULE_OK;
}

/* RL.LEASERETURN back tag key limit window [options] [AT t] [TAKEN n [AT t]]:
 * hands back `back` unspent units of a lease taken with tag (of n units,
 * TAKEN: a bucket's whole lease leaves the units out; without it n =
 * back).  A window's only in its window; a bucket's only before its
 * epoch is settled, and no more than the bucket can hold with the units
 * still out.  Too late, nothing goes back.  Reply: the units put back. */
static int cmd_leasereturn(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN];
    request q;
    long long back, tag, taken;
    if (argc < 6) return RedisModule_WrongArity(ctx);
    if (lease_int(argv[1], SL_MAX_LIMIT, "back", &back, err) != 0) return reply_err(ctx, err);
    if (lease_int(argv[2], -INT64_MAX, "tag", &tag, err) != 0) return reply_err(ctx, err);
    int i = parse_request(ctx, argv, 3, argc, "TAKEN", 1, &q, err);
    if (i < 0) return reply_err(ctx, err);
    taken = back;
    if (i < argc) { /* TAKEN n, then AT t when the request had none (replicate_at's) */
        if (i + 1 >= argc) return reply_err(ctx, "TAKEN needs a value");
        if (lease_int(argv[i + 1], SL_MAX_LIMIT, "TAKEN", &taken, err) != 0)
            return reply_err(ctx, err);
        i += 2;
        if (i < argc && !q.r.has_at && arg_is(argv[i], "AT") && i + 1 < argc) {
            if (parse_at(ctx, argv[i + 1], &q.r.at, err) != 0) return reply_err(ctx, err);
            q.r.has_at = 1;
            i += 2;
        }
        if (i < argc) {
            size_t n;
            const char *s = RedisModule_StringPtrLen(argv[i], &n);
            snprintf(err, ERRLEN, "unexpected argument '%.*s' after TAKEN", (int)(n > 64 ? 64 : n),
                     s);
            return reply_err(ctx, err);
        }
    }
    int64_t now = q.r.has_at ? q.r.at : RedisModule_Milliseconds();
    int rc = sl_params_check(&q.r.p);
    if (rc != 0) return reply_err(ctx, sl_strerror(rc));
    RedisModuleKey *key;
    rlval *v;
    if (open_val(ctx, argv[3], REDISMODULE_WRITE, &key, &v) != 0) return REDISMODULE_OK;
    uint8_t *rec = v ? val_rec(v, q.r.p.algo) : NULL;
    int64_t put = 0;
    if (rec != NULL && sl__lone_leases(q.r.p.algo)) {
        rc = sl__lone_lease_return(mod.loose, &rec, &q.r.p, now, back, taken, tag, &put);
        if (rc != 0) {
            RedisModule_CloseKey(key);
            return reply_err(ctx, sl_strerror(rc));
        }
        val_set(v, q.r.p.algo, rec);
        val_expire(key, v, now, q.r.has_at ? RedisModule_Milliseconds() : now);
    }
    RedisModule_CloseKey(key);
    int bucket = q.r.p.algo == SL_TOKEN_BUCKET || q.r.p.algo == SL_GCRA;
    if (rec != NULL && (put > 0 || bucket)) { /* a bucket's units out changed */
        if (q.r.has_at)
            RedisModule_ReplicateVerbatim(ctx);
        else
            replicate_at(ctx, "RL.LEASERETURN", argv, argc, now, 0);
    }
    return RedisModule_ReplyWithLongLong(ctx, put);
}

/* RL.LEASEINFO: the algorithms RL.LEASE leases, by name (sluiced's
 * handshake asks: an older module without this command leases
 * fixed-window only). */
static int cmd_leaseinfo(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    if (argc != 1) return RedisModule_WrongArity(ctx);
    long n = 0;
    for (int a = 0; a < SL_ALGO_COUNT; a++) n += sl__lone_leases((unsigned)a);
    RedisModule_ReplyWithArray(ctx, n);
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        if (sl__lone_leases((unsigned)a))
            RedisModule_ReplyWithSimpleString(ctx, sl_algo_name((sl_algo)a));
    return REDISMODULE_OK;
}

/* ---- what holds.c (RL.HOLDRESERVE, RL.HOLDSETTLE) takes from here: module_int.h ---- */

int sl__mod_reply_err(RedisModuleCtx *ctx, const char *msg) { return reply_err(ctx, msg); }
void sl__mod_reply_fields(RedisModuleCtx *ctx, const sl_result *r) { reply_fields(ctx, r); }
int sl__mod_trusted(void) { return mod.trust_client_time; }
int sl__mod_key_ok(const char *s, size_t n, char *err) { return key_ok(s, n, err); }
int sl__mod_at(void *ctx, const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    return parse_at_bytes(ctx, s, n, out, err, errlen);
}
void sl__mod_replicate_at(RedisModuleCtx *ctx, const char *cmd, RedisModuleString **argv,
                          int argc, int64_t now)
{
    replicate_at(ctx, cmd, argv, argc, now, 0);
}

int sl__mod_rate(RedisModuleCtx *ctx, RedisModuleString *name, const sl_params *p, int64_t now,
                 int64_t clock, int charge, int64_t amount, int64_t charged_at, sl_result *out)
{
    RedisModuleKey *key;
    rlval *v;
    int made, a = (int)p->algo;
    if (open_made(ctx, name, &key, &v, &made) != 0) return -1;
    uint8_t *rec = val_rec(v, a);
    void *room = rec ? NULL : val_room(v, a);
    int rc = val_needs_more(v, a) ? val_more(v) : 0;
    if (rc == 0)
        rc = charge ? sl__lone_charge(mod.loose, &rec, room, p, now, charged_at, amount, out)
                    : sl__lone_decide(mod.loose, &rec, room, p, now, amount, 1, out);
    if (rc == 0) val_set(v, a, rec);
    val_trim(v);
    if (made && (rc != 0 || val_empty(v))) { /* a refund on a fresh key makes nothing */
        val_free(v);
    } else {
        if (made) RedisModule_ModuleTypeSetValue(key, mod.type, v);
        if (rc == 0) val_expire(key, v, now, clock);
    }
    RedisModule_CloseKey(key);
    return rc;
}

/* ---- RL.RESET ---------------------------------------------------------------- */

/* RL.RESET key [ALGO a]: :1 if state existed, else :0. */
static int cmd_reset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN], qb[80];
    size_t n;
    const char *s;
    if (argc != 2 && argc != 4) return RedisModule_WrongArity(ctx);
    s = RedisModule_StringPtrLen(argv[1], &n);
    if (key_ok(s, n, err) != 0) return reply_err(ctx, err);
    int lo = 0, hi = SL_ALGO_COUNT;
    if (argc == 4) {
        sl_algo a;
        if (!arg_is(argv[2], "ALGO")) {
            s = RedisModule_StringPtrLen(argv[2], &n);
            snprintf(err, ERRLEN, "unknown option '%s' (expected ALGO)",
                     sl__quote(qb, sizeof qb, s, n));
            return reply_err(ctx, err);
        }
        s = RedisModule_StringPtrLen(argv[3], &n);
        if (sl__parse_algo(s, n, &a, err, ERRLEN) != 0) return reply_err(ctx, err);
        lo = (int)a;
        hi = lo + 1;
    }
    RedisModuleKey *key;
    rlval *v;
    if (open_val(ctx, argv[1], REDISMODULE_WRITE, &key, &v) != 0) return REDISMODULE_OK;
    int existed = 0;
    for (int a = lo; v && a < hi; a++) {
        uint8_t *rec = val_rec(v, a);
        if (!rec) continue;
        sl__lone_free(mod.loose, rec);
        val_set(v, a, NULL);
        existed = 1;
    }
    /* the TTL left on what remains is later than it needs: never early */
    if (v && val_empty(v)) RedisModule_DeleteKey(key);
    RedisModule_CloseKey(key);
    if (existed) RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithLongLong(ctx, existed);
}

/* ---- RL.DECIDEALL -------------------------------------------------------------- */

/* RL.DECIDEALL [AT t] REQ key limit window [ALGO a] [COST c] [BURST b]
 *              [PRECISION p] [LOGREJECTED] [REQ key limit window ...]
 * 1..SL_MAX_BATCH requests decided as one at one time (sl_decide_all):
 * all are charged if all are allowed, else none.  Reply: [all_allowed,
 * [6 fields] per request].  Each REQ's first argument is its key, whatever
 * its bytes. */
typedef struct batch {
    int n;
    int has_at;
    int64_t at;
    request q[SL_MAX_BATCH];
} batch;

/* Parses the batch (also for the key positions: Redis asks before the
 * command runs, in a cluster to route it).  0, or -1 with err. */
static int parse_batch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, batch *b, char *err)
{
    char msg[ERRLEN], qb[80];
    int i = 1;
    b->n = 0;
    b->has_at = 0;
    if (i < argc && arg_is(argv[i], "AT")) {
        if (i + 1 >= argc) {
            snprintf(err, ERRLEN, "option AT needs a value");
            return -1;
        }
        if (parse_at(ctx, argv[i + 1], &b->at, err) != 0) return -1;
        b->has_at = 1;
        i += 2;
    }
    while (i < argc) {
        if (!arg_is(argv[i], "REQ")) {
            size_t n;
            const char *s = RedisModule_StringPtrLen(argv[i], &n);
            snprintf(err, ERRLEN, "expected REQ, got '%s'", sl__quote(qb, sizeof qb, s, n));
            return -1;
        }
        if (b->n == SL_MAX_BATCH) {
            snprintf(err, ERRLEN, "at most %d requests in one RL.DECIDEALL", SL_MAX_BATCH);
            return -1;
        }
        i = parse_request(ctx, argv, i + 1, argc, "REQ", 0, &b->q[b->n], msg);
        if (i < 0) {
            snprintf(err, ERRLEN, "request %d: %.200s", b->n + 1, msg);
            return -1;
        }
        b->n++;
    }
    if (b->n == 0) {
        snprintf(err, ERRLEN, "RL.DECIDEALL needs at least one REQ key limit window");
        return -1;
    }
    return 0;
}

static int cmd_decideall(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN + 16];
    batch b;
    int perr = parse_batch(ctx, argv, argc, &b, err);
    if (RedisModule_IsKeysPositionRequest(ctx)) {
        for (int k = 0; perr == 0 && k < b.n; k++) RedisModule_KeyAtPos(ctx, b.q[k].keyarg);
        return REDISMODULE_OK;
    }
    if (perr != 0) return reply_err(ctx, err);
    int64_t clock = RedisModule_Milliseconds();
    int64_t now = b.has_at ? b.at : clock;
    for (int k = 0; k < b.n; k++) {
        int rc = sl_params_check(&b.q[k].r.p);
        if (rc != 0) {
            snprintf(err, sizeof err, "request %d: %s", k + 1, sl_strerror(rc));
            return reply_err(ctx, err);
        }
    }
    /* Open every key (a key named twice is opened once) and make the
     * values the batch needs; values made here are kept only if charged. */
    RedisModuleKey *keys[SL_MAX_BATCH];
    rlval *vals[SL_MAX_BATCH];
    int made[SL_MAX_BATCH], owner[SL_MAX_BATCH], nopen = 0, rc = 0;
    for (int k = 0; k < b.n && rc == 0; k++) {
        size_t ln;
        const char *kn = RedisModule_StringPtrLen(argv[b.q[k].keyarg], &ln);
        owner[k] = -1;
        for (int j = 0; j < k; j++) {
            size_t lj;
            const char *kj = RedisModule_StringPtrLen(argv[b.q[j].keyarg], &lj);
            if (lj == ln && memcmp(kj, kn, ln) == 0) {
                owner[k] = owner[j];
                break;
            }
        }
        if (owner[k] >= 0) continue;
        owner[k] = nopen;
        if (open_val(ctx, argv[b.q[k].keyarg], REDISMODULE_WRITE, &keys[nopen], &vals[nopen]) !=
            0) {
            rc = -1; /* WRONGTYPE sent */
            break;
        }
        made[nopen] = vals[nopen] == NULL;
        if (made[nopen] && (vals[nopen] = val_new()) == NULL) {
            RedisModule_CloseKey(keys[nopen]);
            rc = SL_ENOMEM;
            break;
        }
        nopen++;
    }
    /* One record pointer per (key, algorithm): requests naming the same
     * share it (sl__lone_decide_all refuses that).  A value's free room
     * goes to the first request that can take it; a value some request's
     * record may end up outside the room of gets its `more` first. */
    sl__lone_req reqs[SL_MAX_BATCH];
    sl_result out[SL_MAX_BATCH];
    uint8_t *recs[SL_MAX_BATCH];
    int first[SL_MAX_BATCH], roomed[SL_MAX_BATCH] = {0}, all = 0, decided = 0;
    size_t bad = 0;
    for (int k = 0; k < b.n && rc == 0; k++) {
        rlval *v = vals[owner[k]];
        int a = (int)b.q[k].r.p.algo;
        first[k] = k;
        for (int j = 0; j < k && first[k] == k; j++)
            if (owner[j] == owner[k] && (int)b.q[j].r.p.algo == a) first[k] = j;
        void *room = NULL;
        if (first[k] == k) {
            recs[k] = val_rec(v, a);
            if (recs[k] == NULL && !roomed[owner[k]] && (room = val_room(v, a)) != NULL)
                roomed[owner[k]] = 1;
            else if ((recs[k] == NULL || recs[k] != sl__lone_roomed(v->room)) &&
                     (rc = val_more(v)) != 0)
                bad = (size_t)k;
        }
        reqs[k] = (sl__lone_req){&b.q[k].r.p, &recs[first[k]], b.q[k].r.cost, room};
    }
    if (rc == 0) {
        rc = sl__lone_decide_all(mod.loose, reqs, (size_t)b.n, now, out, &all, &bad);
        decided = 1;
    }
    for (int k = 0; decided && k < b.n; k++)
        if (first[k] == k) val_set(vals[owner[k]], (int)b.q[k].r.p.algo, recs[k]);
    for (int o = 0; o < nopen; o++) {
        val_trim(vals[o]);
        if (made[o] && val_empty(vals[o])) {
            val_free(vals[o]);
        } else {
            if (made[o]) RedisModule_ModuleTypeSetValue(keys[o], mod.type, vals[o]);
            if (all) val_expire(keys[o], vals[o], now, clock);
        }
        RedisModule_CloseKey(keys[o]);
    }
    if (rc == -1) return REDISMODULE_OK;
    if (rc == SL_EINVAL) {
        snprintf(err, sizeof err,
                 "request %zu names the key and algorithm of an earlier request (merge their "
                 "costs)",
                 bad + 1);
        return reply_err(ctx, err);
    }
    if (rc != 0) {
        snprintf(err, sizeof err, "request %zu: %s", bad + 1, sl_strerror(rc));
        return reply_err(ctx, err);
    }
    if (all) { /* only a charge changes state: replicate it at its time */
        if (b.has_at)
            RedisModule_ReplicateVerbatim(ctx);
        else
            replicate_at(ctx, "RL.DECIDEALL", argv, argc, now, 1);
    }
    RedisModule_ReplyWithArray(ctx, 1 + b.n);
    RedisModule_ReplyWithLongLong(ctx, all);
    for (int k = 0; k < b.n; k++) reply_fields(ctx, &out[k]);
    return REDISMODULE_OK;
}

/* ---- RL.CHECKPLAN: one RL.CHECK of sluiced's Redis backend -------------------- */

/* RL.CHECKPLAN [AT t] m pool denied_never qall zmask
 *              <key algo L W B P log_rejected cost shadow quota lyft ceiling qmask> x m
 *              [<key algo L W B P log_rejected cost>]                     (pool = 1)
 * The execution of a planned RL.CHECK (src/rules/check.h) as one command,
 * all-or-none: the script's op C (docs/redis-scripts.md) with the same
 * arguments, a key before each counter's fields, and the same reply --
 * allowed, quota_denied, pool_charged, then per counter its six fields and
 * `stretched`.  The rounds are the library's executor (src/lib/checkexec.h,
 * also the local backend's), on the module's lone records.  Made
 * for the backend, which has checked every parameter; refused arguments
 * get -ERR naming the counter.
 *
 * RL.HOLDCHECK: the same, then the concurrency limits' leases of the
 * check (docs/rules.md, "Concurrency"; op C's, sluice.lua):
 *              ... nl <hh hl take shadow max ttl> x nl
 * hh and hl being RL.ACQUIRE's keys of the lease key on the script's path
 * (the hash and the sorted set: holds.c, "RL.HOLDCHECK's leases").  All
 * or none with the counters in this one command: a lease set that is
 * full and not shadow denies the request (its counters only peeked,
 * nothing charged, no lease taken); only an allowed request takes its
 * leases (take 1, with room), after the counters.  The reply is
 * RL.CHECKPLAN's, then per lease the six fields RL.ACQUIRE would answer
 * and the id taken (0: none).  Its own name, so that sluiced learns at
 * its handshake (COMMAND INFO RL.HOLDCHECK) whether this module takes
 * leases; RL.CHECKPLAN's grammar is unchanged. */
#define CP_ITEM  13 /* a counter's arguments: its key and 12 fields */
#define CP_POOL  8  /* the pool's: its key and 7 fields */
#define CP_LEASE 6  /* a lease's: hh hl take shadow max ttl */

/* The plan: the executor's (src/lib/checkexec.h), its counters then the
 * pool in it[], each counter's parameters in p[] and key at argv[keyarg]. */
typedef struct cp_plan {
    int m, has_pool, has_at;
    int nl; /* RL.HOLDCHECK: its leases in ls[] */
    int64_t at;
    int keyarg[SL_MAX_BATCH + 1];
    sl__mod_lease ls[SL_MAX_BATCH];
    sl_params p[SL_MAX_BATCH + 1];
    sl__cx_item it[SL_MAX_BATCH + 1];
    sl__cx_plan x;
} cp_plan;

/* An integer argument 0..max: 0, or -1 with "<what>: not an integer 0..max". */
static int cp_int(RedisModuleString *a, int64_t max, int64_t *out, const char *what, char *err)
{
    size_t n;
    const char *s = RedisModule_StringPtrLen(a, &n);
    if (sl_int_parse(s, n, max, out) == 0) return 0;
    snprintf(err, ERRLEN, "%s is not an integer 0..%lld", what, (long long)max);
    return -1;
}

/* A key and 7 fields at argv[i..i+8), counter k's (or the pool's): 0,
 * or -1 with err. */
static int cp_fields(RedisModuleString **argv, int i, cp_plan *c, int k, char *err)
{
    static const char *const what[7] = {"algo", "L", "W", "B", "P", "log_rejected", "cost"};
    static const int64_t max[7] = {
        SL_ALGO_COUNT - 1, SL_MAX_LIMIT, INT64_MAX, SL_MAX_LIMIT, INT64_MAX, 1, SL_MAX_LIMIT};
    int64_t v[7];
    size_t n;
    const char *s = RedisModule_StringPtrLen(argv[i], &n);
    if (key_ok(s, n, err) != 0) return -1;
    c->keyarg[k] = i;
    for (int f = 0; f < 7; f++)
        if (cp_int(argv[i + 1 + f], max[f], &v[f], what[f], err) != 0) return -1;
    sl_params *p = &c->p[k];
    *p = (sl_params)SL_PARAMS_INIT;
    p->algo = (sl_algo)v[0];
    p->limit = v[1];
    p->window_ms = v[2];
    p->burst = v[3];
    p->precision = v[4];
    p->log_rejected = (int)v[5];
    c->it[k] = (sl__cx_item){.p = p, .cost = v[6], .slot = k};
    int rc = sl_params_check(p);
    if (rc != 0) {
        snprintf(err, ERRLEN, "%s", sl_strerror(rc));
        return -1;
    }
    return 0;
}

/* RL.HOLDCHECK's leases at argv[i..argc) (i < argc: cp_parse saw nl):
 * nl, then CP_LEASE arguments a lease.  0, or -1 with err naming it. */
static int cp_leases(RedisModuleString **argv, int i, int argc, cp_plan *c, char *err)
{
    static const char *const what[4] = {"take", "shadow", "max", "ttl"};
    static const int64_t lo[4] = {0, 0, 1, 1};
    static const int64_t hi[4] = {1, 1, SL_MAX_CONCURRENCY, SL_MAX_LEASE_TTL_MS};
    int64_t nl;
    if (cp_int(argv[i], SL_MAX_BATCH, &nl, "nl", err) != 0) return -1;
    if (argc - i - 1 != CP_LEASE * nl) {
        snprintf(err, ERRLEN, "%d arguments after nl for %d leases (%d each)", argc - i - 1,
                 (int)nl, CP_LEASE);
        return -1;
    }
    c->nl = (int)nl;
    for (int j = 0; j < c->nl; j++) {
        int b = i + 1 + CP_LEASE * j;
        int64_t v[4];
        for (int f = 0; f < 4; f++) {
            size_t n;
            const char *s = RedisModule_StringPtrLen(argv[b + 2 + f], &n);
            /* the bounds checked here too: sl_int_parse takes one digit
             * past a max below 9 ("2" for 0..1) */
            if (sl_int_parse(s, n, hi[f], &v[f]) != 0 || v[f] < lo[f] || v[f] > hi[f]) {
                snprintf(err, ERRLEN, "lease %d: %s is not an integer %lld..%lld", j + 1, what[f],
                         (long long)lo[f], (long long)hi[f]);
                return -1;
            }
        }
        c->ls[j] = (sl__mod_lease){.hh = argv[b],
                                   .hl = argv[b + 1],
                                   .take = (int)v[0],
                                   .shadow = (int)v[1],
                                   .max = v[2],
                                   .ttl = v[3]};
    }
    return 0;
}

/* Parses the plan (also for the key positions), RL.HOLDCHECK's with its
 * leases when holds.  0, or -1 with err. */
static int cp_parse(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int holds, cp_plan *c,
                    char *err)
{
    char msg[ERRLEN];
    int64_t v[5];
    static const char *const head[5] = {"m", "pool", "denied_never", "qall", "zmask"};
    static const int64_t hmax[5] = {SL_MAX_BATCH, 1, 1, 0xffff, 0xffff};
    int i = 1;
    memset(c, 0, sizeof *c);
    if (argc > 2 && arg_is(argv[1], "AT")) {
        if (parse_at(ctx, argv[2], &c->at, err) != 0) return -1;
        c->has_at = 1;
        i = 3;
    }
    if (argc - i < 5) {
        snprintf(err, ERRLEN, "RL.CHECKPLAN needs m pool denied_never qall zmask");
        return -1;
    }
    for (int f = 0; f < 5; f++)
        if (cp_int(argv[i + f], hmax[f], &v[f], head[f], err) != 0) return -1;
    c->m = (int)v[0];
    c->has_pool = (int)v[1];
    c->x.denied_never = (int)v[2];
    c->x.qall = (uint32_t)v[3];
    c->x.zmask = (uint32_t)v[4];
    i += 5;
    int items = CP_ITEM * c->m + CP_POOL * c->has_pool;
    if (holds ? argc - i <= items : argc - i != items) {
        snprintf(err, ERRLEN, "%d arguments after the header for %d counters%s%s", argc - i, c->m,
                 c->has_pool ? " and a pool" : "", holds ? " and nl" : "");
        return -1;
    }
    for (int k = 0; k < c->m; k++, i += CP_ITEM) {
        static const char *const what[5] = {"shadow", "quota", "lyft", "ceiling", "qmask"};
        static const int64_t max[5] = {1, 1, 1, SL_MAX_LIMIT, 0xffff};
        sl__cx_item *t = &c->it[k];
        int64_t f[5] = {0};
        int rc = cp_fields(argv, i, c, k, msg);
        for (int j = 0; rc == 0 && j < 5; j++)
            rc = cp_int(argv[i + 8 + j], max[j], &f[j], what[j], msg);
        t->shadow = (unsigned char)f[0];
        t->quota = (unsigned char)f[1];
        t->lyft = (unsigned char)f[2];
        t->ceiling = f[3];
        t->qmask = (uint32_t)f[4];
        /* the executor decides a Lyft-counted counter at L = SL_MAX_LIMIT
         * and an elastic one at its ceiling: both checked here */
        sl_params big = c->p[k], up = c->p[k];
        big.limit = SL_MAX_LIMIT;
        up.limit = t->ceiling;
        if (rc == 0 && (t->lyft && (rc = sl_params_check(&big)) != 0))
            snprintf(msg, sizeof msg, "at L = %lld: %s", SL_MAX_LIMIT, sl_strerror(rc));
        if (rc == 0 && t->ceiling > 0 && (rc = sl_params_check(&up)) != 0)
            snprintf(msg, sizeof msg, "at its ceiling: %s", sl_strerror(rc));
        if (rc != 0) {
            snprintf(err, ERRLEN, "counter %d: %.200s", k + 1, msg);
            return -1;
        }
    }
    if (c->has_pool && cp_fields(argv, i, c, c->m, msg) != 0) {
        snprintf(err, ERRLEN, "the pool: %.200s", msg);
        return -1;
    }
    if (holds && cp_leases(argv, i + CP_POOL * c->has_pool, argc, c, err) != 0) return -1;
    c->x.n = c->m;
    c->x.it = c->it;
    c->x.pool = c->has_pool ? &c->it[c->m] : NULL;
    return 0;
}

/* Whether argv[k] and argv[j] are the same bytes. */
static int same_arg(RedisModuleString *a, RedisModuleString *b)
{
    size_t la, lb;
    const char *sa = RedisModule_StringPtrLen(a, &la), *sb = RedisModule_StringPtrLen(b, &lb);
    return la == lb && memcmp(sa, sb, la) == 0;
}

/* RL.HOLDCHECK's keys are each named once (a lease's two and every
 * counter's): 0, or -1 with err. */
static int cp_distinct(RedisModuleString **argv, const cp_plan *c, char *err)
{
    int nk = c->m + c->has_pool;
    for (int j = 0; j < c->nl; j++) {
        RedisModuleString *mine[2] = {c->ls[j].hh, c->ls[j].hl};
        for (int h = 0; h < 2; h++) {
            int dup = h == 1 && same_arg(mine[0], mine[1]);
            for (int k = 0; !dup && k < nk; k++) dup = same_arg(mine[h], argv[c->keyarg[k]]);
            for (int i = 0; !dup && i < j; i++)
                dup = same_arg(mine[h], c->ls[i].hh) || same_arg(mine[h], c->ls[i].hl);
            if (dup) {
                snprintf(err, ERRLEN, "lease %d: its %s key is named twice in the command", j + 1,
                         h ? "hl" : "hh");
                return -1;
            }
        }
    }
    return 0;
}

/* Propagates RL.HOLDCHECK / RL.CHECKPLAN (cmd) decided at now: the id
 * counters a take made first (HSET hh n seed: a replica's take then gives
 * the same ids), then the command at its time (AT now first), or verbatim
 * when it carried AT. */
static void cp_replicate(RedisModuleCtx *ctx, const char *cmd, RedisModuleString **argv, int argc,
                         const cp_plan *c, int64_t now)
{
    int logs = mod.repl || (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_AOF);
    for (int j = 0; logs && j < c->nl; j++)
        if (c->ls[j].seed > 0)
            RedisModule_Replicate(ctx, "HSET", "scl", c->ls[j].hh, "n", c->ls[j].seed);
    if (c->has_at)
        RedisModule_ReplicateVerbatim(ctx);
    else
        replicate_at(ctx, cmd, argv, argc, now, 1);
}

static int checkplan(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int holds)
{
    char err[ERRLEN];
    cp_plan c;
    int perr = cp_parse(ctx, argv, argc, holds, &c, err);
    int nk = c.m + c.has_pool;
    if (RedisModule_IsKeysPositionRequest(ctx)) {
        for (int k = 0; perr == 0 && k < nk; k++) RedisModule_KeyAtPos(ctx, c.keyarg[k]);
        /* a lease's hh and hl: its first two arguments (cp_leases) */
        for (int j = 0, i = argc - CP_LEASE * c.nl; perr == 0 && j < c.nl; j++, i += CP_LEASE) {
            RedisModule_KeyAtPos(ctx, i);
            RedisModule_KeyAtPos(ctx, i + 1);
        }
        return REDISMODULE_OK;
    }
    if (perr == 0) perr = cp_distinct(argv, &c, err);
    if (perr != 0) return reply_err(ctx, err);
    int64_t clock = RedisModule_Milliseconds();
    int64_t now = c.has_at ? c.at : clock;
    /* open every key once (counters of several algorithms may share one);
     * values made here are kept only when a record was made in them */
    RedisModuleKey *keys[SL_MAX_BATCH + 1];
    rlval *vals[SL_MAX_BATCH + 1];
    int made[SL_MAX_BATCH + 1], owner[SL_MAX_BATCH + 1], nopen = 0, rc = 0;
    for (int k = 0; k < nk; k++) {
        size_t ln, lj;
        const char *kn = RedisModule_StringPtrLen(argv[c.keyarg[k]], &ln);
        owner[k] = -1;
        for (int j = 0; j < k && owner[k] < 0; j++) {
            const char *kj = RedisModule_StringPtrLen(argv[c.keyarg[j]], &lj);
            if (lj == ln && memcmp(kj, kn, ln) == 0) {
                if (c.p[j].algo == c.p[k].algo) {
                    snprintf(err, sizeof err,
                             "counter %d names the key and algorithm of counter %d", k + 1, j + 1);
                    rc = SL_EINVAL;
                }
                owner[k] = owner[j];
            }
        }
        if (rc != 0) break;
        if (owner[k] >= 0) continue;
        owner[k] = nopen;
        if (open_val(ctx, argv[c.keyarg[k]], REDISMODULE_WRITE, &keys[nopen], &vals[nopen]) != 0) {
            rc = -1; /* WRONGTYPE sent */
            break;
        }
        made[nopen] = vals[nopen] == NULL;
        if (made[nopen] && (vals[nopen] = val_new()) == NULL) {
            RedisModule_CloseKey(keys[nopen]);
            snprintf(err, sizeof err, "%s", sl_strerror(SL_ENOMEM));
            rc = SL_ENOMEM;
            break;
        }
        nopen++;
    }
    /* the leases' keys, checked before anything is written (holds.c) */
    int lopen = 0, lwrote = 0;
    for (; rc == 0 && lopen < c.nl; lopen++)
        if ((rc = sl__mod_lease_open(ctx, &c.ls[lopen], err)) != 0) break;
    /* each counter's record, taken out of its value and put back after (as
     * cmd_decideall): a value's free room goes to the first counter whose
     * algorithm's records stay in one; a value a record may end up outside
     * the room of gets its `more` first */
    sl_result res[SL_MAX_BATCH] = {{0}};
    unsigned char stretched[SL_MAX_BATCH] = {0};
    sl__cx_out o = {.res = res, .stretched = stretched};
    uint8_t *recs[SL_MAX_BATCH + 1];
    int roomed[SL_MAX_BATCH + 1] = {0}, decided = 0;
    for (int k = 0; k < nk && rc == 0; k++) {
        rlval *v = vals[owner[k]];
        int a = (int)c.p[k].algo;
        recs[k] = val_rec(v, a);
        c.it[k].rec = &recs[k];
        c.it[k].room = NULL;
        if (recs[k] == NULL && !roomed[owner[k]] && (c.it[k].room = val_room(v, a)) != NULL)
            roomed[owner[k]] = 1;
        else if ((recs[k] == NULL || recs[k] != sl__lone_roomed(v->room)) && val_more(v) != 0) {
            snprintf(err, sizeof err, "%s", sl_strerror(SL_ENOMEM));
            rc = SL_ENOMEM;
        }
    }
    /* every lease set looked at (op C's order): a full one that is not
     * shadow denies, and the counters are then only peeked */
    for (int j = 0; rc == 0 && j < c.nl; j++) {
        lwrote |= sl__mod_lease_look(ctx, &c.ls[j], now);
        if (!c.ls[j].room && !c.ls[j].shadow) c.x.denied_never = 1;
    }
    if (rc == 0) {
        decided = 1;
        c.x.loose = mod.loose;
        c.x.strict = 1; /* a record's memory refused: the request fails */
        c.x.now_ms = now;
        if ((rc = sl__cx_run(&c.x, &o)) != 0) snprintf(err, sizeof err, "%s", sl_strerror(rc));
    }
    /* an allowed request takes its leases, last */
    for (int j = 0; rc == 0 && o.allowed && j < c.nl; j++)
        if (c.ls[j].take && c.ls[j].room) {
            sl__mod_lease_take(ctx, &c.ls[j]);
            lwrote = 1;
        }
    for (int j = 0; j < lopen; j++) sl__mod_lease_close(&c.ls[j]);
    for (int k = 0; decided && k < nk; k++) val_set(vals[owner[k]], (int)c.p[k].algo, recs[k]);
    for (int j = 0; j < nopen; j++) {
        val_trim(vals[j]);
        if (made[j] && val_empty(vals[j])) {
            val_free(vals[j]);
        } else {
            if (made[j]) RedisModule_ModuleTypeSetValue(keys[j], mod.type, vals[j]);
            if (o.wrote) val_expire(keys[j], vals[j], now, clock);
        }
        RedisModule_CloseKey(keys[j]);
    }
    /* what was decided, at its time: a replica or the AOF decides the same */
    if (o.wrote || lwrote)
        cp_replicate(ctx, holds ? "RL.HOLDCHECK" : "RL.CHECKPLAN", argv, argc, &c, now);
    if (rc == -1) return REDISMODULE_OK;
    if (rc != 0) return reply_err(ctx, err);
    RedisModule_ReplyWithArray(ctx, 3 + 7 * (long)c.m + 7 * (long)c.nl);
    RedisModule_ReplyWithLongLong(ctx, o.allowed);
    RedisModule_ReplyWithLongLong(ctx, o.quota_denied);
    RedisModule_ReplyWithLongLong(ctx, o.pool_charged);
    for (int k = 0; k < c.m; k++) reply_seven(ctx, &res[k], stretched[k]);
    for (int j = 0; j < c.nl; j++) reply_seven(ctx, &c.ls[j].ans, c.ls[j].id);
    return REDISMODULE_OK;
}

static int cmd_checkplan(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return checkplan(ctx, argv, argc, 0);
}

static int cmd_holdcheck(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return checkplan(ctx, argv, argc, 1);
}

/* ---- RL.RESTORE: what the AOF rewrite emits ------------------------------------ */

/* RL.RESTORE key algorithm dump: sets key's state under that algorithm to
 * the record dump (sl__lone_dump's bytes, as rdb_save writes them); other
 * algorithms' state of the key is kept.  The AOF rewrite writes one per
 * record, then Redis's PEXPIREAT for the key's TTL. */
static int cmd_restore(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    char err[ERRLEN];
    size_t n, dl;
    if (argc != 4) return RedisModule_WrongArity(ctx);
    const char *s = RedisModule_StringPtrLen(argv[1], &n);
    if (sl__parse_key(s, n, err, ERRLEN) != 0) return reply_err(ctx, err);
    sl_algo a;
    s = RedisModule_StringPtrLen(argv[2], &n);
    if (sl__parse_algo(s, n, &a, err, ERRLEN) != 0) return reply_err(ctx, err);
    const char *dump = RedisModule_StringPtrLen(argv[3], &dl);
    if (dl > dump_max()) {
        snprintf(err, sizeof err,
                 "state of %zu bytes for RL.RESTORE is over the module's bound on one key "
                 "(max-memory / %d: %llu bytes)",
                 dl, SL_STORE_REC_SHARE, (unsigned long long)dump_max());
        return reply_err(ctx, err);
    }
    uint8_t *rec = NULL;
    int rc = sl__lone_load(mod.loose, a, (const uint8_t *)dump, dl, NULL, &rec);
    if (rc == SL_EINVAL) return reply_err(ctx, "malformed state for RL.RESTORE");
    if (rc != 0) return reply_err(ctx, sl_strerror(rc));
    RedisModuleKey *key;
    rlval *v;
    if (open_val(ctx, argv[1], REDISMODULE_WRITE, &key, &v) != 0) {
        sl__lone_free(mod.loose, rec);
        return REDISMODULE_OK;
    }
    int made = v == NULL;
    if (made && (v = val_new()) == NULL) rc = SL_ENOMEM;
    /* the record replaces a's: in the room when a's records stay there
     * and the room is free or holds a's; else in more */
    uint8_t *old = rc == 0 ? val_rec(v, a) : NULL;
    int to_room = rc == 0 && sl__lone_stays(a) &&
                  (old ? old == sl__lone_roomed(v->room) : sl__lone_roomed(v->room) == NULL);
    if (rc == 0 && !to_room) rc = val_more(v);
    if (rc != 0) {
        sl__lone_free(mod.loose, rec);
        if (made && v) val_free(v);
        RedisModule_CloseKey(key);
        return reply_err(ctx, sl_strerror(rc));
    }
    sl__lone_free(mod.loose, old);
    val_set(v, a, NULL);
    if (to_room) { /* loaded again, in the room: the bytes are checked, and a record
                    * that stays in a room needs no allocation, so this cannot fail */
        sl__lone_free(mod.loose, rec);
        rec = NULL;
        sl__lone_load(mod.loose, a, (const uint8_t *)dump, dl, v->room, &rec);
    }
    val_set(v, a, rec);
    if (made) RedisModule_ModuleTypeSetValue(key, mod.type, v);
    RedisModule_CloseKey(key);
    RedisModule_ReplicateVerbatim(ctx);
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* ---- the data type ---------------------------------------------------------------- */

/* RDB: the number of records, then per record its algorithm and its dump. */
static void type_save(RedisModuleIO *io, void *p)
{
    rlval *v = p;
    uint64_t n = 0;
    for (int a = 0; a < SL_ALGO_COUNT; a++) n += val_rec(v, a) != NULL;
    RedisModule_SaveUnsigned(io, n);
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const uint8_t *rec = val_rec(v, a);
        if (!rec) continue;
        size_t len = sl__lone_dump_len(mod.loose, rec);
        uint8_t *buf = RedisModule_Alloc(len);
        sl__lone_dump(mod.loose, rec, buf);
        RedisModule_SaveUnsigned(io, (uint64_t)a);
        RedisModule_SaveStringBuffer(io, (const char *)buf, len);
        RedisModule_Free(buf);
    }
}

/* Loading a value (rdb_load): a start or DEBUG RELOAD reading the RDB, a
 * replica's full sync, and RESTORE of a DUMP payload -- bytes anyone who
 * may write a key can hand in, CRC and all.  So every field read is
 * checked before it is used, and the module is loaded with
 * REDISMODULE_OPTIONS_HANDLE_IO_ERRORS: a read past the value's end or of
 * the wrong kind (a count changed, a payload cut short) sets the IO's
 * error flag instead of Redis panicking, and RedisModule_IsIOError is
 * asked after every read.  A refused value is freed whole and NULL is
 * returned: RESTORE answers "Bad data format" and Redis goes on; a load
 * from disk stops, as Redis stops on any corrupt RDB.
 *
 * The form type_save writes, and what is checked of each field:
 *   records  1 .. SL_ALGO_COUNT (an empty value is deleted, never saved)
 *   then per record:
 *     algo   an algorithm id below SL_ALGO_COUNT, not seen before in it
 *     dump   at most the per-key bound (max-memory / SL_STORE_REC_SHARE:
 *            what a decision may grow one key's state to), then every byte
 *            by sl__lone_load (flags, clock in range, the state's length
 *            and contents for its algorithm). */

/* Logs why a value being loaded is refused and frees what was loaded of
 * it; returns NULL for rdb_load to return.  "warning" while Redis loads
 * its data (the load then stops: the operator needs the reason);
 * "verbose" for RESTORE, which answers an error, so that a client sending
 * bad payloads cannot fill the log. */
static void *load_refuse(RedisModuleIO *io, rlval *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void *load_refuse(RedisModuleIO *io, rlval *v, const char *fmt, ...)
{
    char why[ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int loading = RedisModule_GetContextFlags(RedisModule_GetContextFromIO(io)) &
                  REDISMODULE_CTX_FLAGS_LOADING;
    RedisModule_LogIOError(io, loading ? "warning" : "verbose", "sluice: a %s value refused: %s",
                           TYPE_NAME, why);
    if (v) val_free(v);
    return NULL;
}

static void *type_load(RedisModuleIO *io, int encver)
{
    if (encver < 0 || encver > TYPE_ENCVER)
        return load_refuse(io, NULL, "encoding version %d (this module reads 0 to %d)", encver,
                           TYPE_ENCVER);
    uint64_t n = RedisModule_LoadUnsigned(io);
    if (RedisModule_IsIOError(io)) return load_refuse(io, NULL, "short read (record count)");
    if (n < 1 || n > SL_ALGO_COUNT)
        return load_refuse(io, NULL, "%llu records (a value holds 1 to %d)", (unsigned long long)n,
                           SL_ALGO_COUNT);
    rlval *v = val_new();
    if (v == NULL) return load_refuse(io, NULL, "%s", sl_strerror(SL_ENOMEM));
    for (uint64_t k = 1; k <= n; k++) {
        uint64_t a = RedisModule_LoadUnsigned(io);
        if (RedisModule_IsIOError(io))
            return load_refuse(io, v, "record %llu: short read (algorithm)", (unsigned long long)k);
        if (a >= SL_ALGO_COUNT)
            return load_refuse(io, v, "record %llu: unknown algorithm id %llu",
                               (unsigned long long)k, (unsigned long long)a);
        if (val_rec(v, (int)a) != NULL)
            return load_refuse(io, v, "record %llu: a second %s record", (unsigned long long)k,
                               sl_algo_name((sl_algo)a));
        size_t len = 0;
        char *buf = RedisModule_LoadStringBuffer(io, &len);
        if (RedisModule_IsIOError(io) || buf == NULL) {
            if (buf) RedisModule_Free(buf);
            return load_refuse(io, v, "record %llu: short read (%s state)", (unsigned long long)k,
                               sl_algo_name((sl_algo)a));
        }
        int rc = SL_EINVAL;
        if (len > dump_max()) {
            rc = SL_ETOOBIG;
        } else {
            uint8_t *rec = NULL;
            void *room = val_room(v, (int)a);
            rc = room ? 0 : val_more(v);
            if (rc == 0)
                rc = sl__lone_load(mod.loose, (unsigned)a, (const uint8_t *)buf, len, room, &rec);
            if (rc == 0) val_set(v, (int)a, rec);
        }
        RedisModule_Free(buf);
        if (rc == SL_ETOOBIG)
            return load_refuse(io, v,
                               "record %llu: %s state of %zu bytes, over the module's bound on "
                               "one key (max-memory / %d: %llu bytes)",
                               (unsigned long long)k, sl_algo_name((sl_algo)a), len,
                               SL_STORE_REC_SHARE, (unsigned long long)dump_max());
        if (rc != 0)
            return load_refuse(io, v, "record %llu: %s %s state (%zu bytes)", (unsigned long long)k,
                               rc == SL_EINVAL ? "malformed" : sl_strerror(rc),
                               sl_algo_name((sl_algo)a), len);
    }
    return v;
}

static void type_rewrite(RedisModuleIO *aof, RedisModuleString *key, void *p)
{
    rlval *v = p;
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const uint8_t *rec = val_rec(v, a);
        if (!rec) continue;
        size_t len = sl__lone_dump_len(mod.loose, rec);
        uint8_t *buf = RedisModule_Alloc(len);
        sl__lone_dump(mod.loose, rec, buf);
        RedisModule_EmitAOF(aof, "RL.RESTORE", "scb", key, sl_algo_name((sl_algo)a),
                            (const char *)buf, len);
        RedisModule_Free(buf);
    }
}

static size_t type_mem(const void *p)
{
    const rlval *v = p;
    size_t n = sizeof *v + (v->more ? SL_ALGO_COUNT * sizeof *v->more : 0);
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        const uint8_t *rec = val_rec(v, a);
        if (rec) n += sl__lone_bytes(mod.loose, rec);
    }
    return n;
}

/* ---- loading ------------------------------------------------------------------------ */

/* Module arguments: trust-client-time yes|no, max-client-skew DURATION,
 * max-memory SIZE (sluiced's options of those names). */
static int parse_args(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    for (int i = 0; i < argc; i += 2) {
        size_t n, vn = 0;
        const char *name = RedisModule_StringPtrLen(argv[i], &n);
        const char *val = i + 1 < argc ? RedisModule_StringPtrLen(argv[i + 1], &vn) : NULL;
        if (val == NULL) {
            RedisModule_Log(ctx, "warning", "sluice: argument '%.*s' needs a value", (int)n, name);
            return -1;
        }
        if (arg_is(argv[i], "trust-client-time")) {
            if (arg_is(argv[i + 1], "yes"))
                mod.trust_client_time = 1;
            else if (arg_is(argv[i + 1], "no"))
                mod.trust_client_time = 0;
            else {
                RedisModule_Log(ctx, "warning",
                                "sluice: trust-client-time takes yes or no, got '%.*s'", (int)vn,
                                val);
                return -1;
            }
        } else if (arg_is(argv[i], "max-memory")) {
            if (sl__size_parse(val, vn, &mod.max_memory) != 0) {
                RedisModule_Log(ctx, "warning",
                                "sluice: max-memory takes a size (e.g. 1gb) or 0, got '%.*s'",
                                (int)vn, val);
                return -1;
            }
        } else if (arg_is(argv[i], "max-client-skew")) {
            if (vn == 1 && val[0] == '0')
                mod.max_client_skew_ms = 0;
            else if (sl_duration_parse(val, vn, &mod.max_client_skew_ms) != 0) {
                RedisModule_Log(ctx, "warning",
                                "sluice: max-client-skew takes a duration (e.g. 5s) or 0, got "
                                "'%.*s'",
                                (int)vn, val);
                return -1;
            }
        } else {
            RedisModule_Log(ctx, "warning",
                            "sluice: unknown argument '%.*s' (expected trust-client-time, "
                            "max-client-skew or max-memory)",
                            (int)n, name);
            return -1;
        }
    }
    return 0;
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (sl_rm_init(ctx, "sluice", 1, REDISMODULE_APIVER_1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    mod.max_memory = 1ULL << 30; /* sluiced's defaults */
    mod.max_client_skew_ms = 3600000;
    if (parse_args(ctx, argv, argc) != 0) return REDISMODULE_ERR;
    if ((mod.loose = sl__shard_loose_new(mod.max_memory)) == NULL) return REDISMODULE_ERR;
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION_1,
        .rdb_load = type_load,
        .rdb_save = type_save,
        .aof_rewrite = type_rewrite,
        .mem_usage = type_mem,
        .free = val_free,
    };
    mod.type = RedisModule_CreateDataType(ctx, TYPE_NAME, TYPE_ENCVER, &tm);
    if (mod.type == NULL) return REDISMODULE_ERR;
    /* type_load checks every read: a bad payload fails RESTORE (and a load)
     * instead of making Redis panic */
    RedisModule_SetModuleOptions(ctx, REDISMODULE_OPTIONS_HANDLE_IO_ERRORS);
    static const RedisModuleEvent watched[] = {
        {REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, 1},
        {REDISMODULE_EVENT_REPLICA_CHANGE, 1},
        {REDISMODULE_EVENT_FORK_CHILD, 1},
    };
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        if (RedisModule_SubscribeToServerEvent(ctx, watched[i], repl_watch) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    mod.repl = repl_now(ctx);
    static const struct {
        const char *name;
        RedisModuleCmdFunc fn;
        const char *flags;
        int first, last, step;
    } cmds[] = {
        {"rl.allow", cmd_allow, "write deny-oom fast", 1, 1, 1},
        {"rl.peek", cmd_peek, "readonly fast", 1, 1, 1},
        {"rl.reset", cmd_reset, "write fast", 1, 1, 1},
        {"rl.decideall", cmd_decideall, "write deny-oom getkeys-api", 0, 0, 0},
        {"rl.restore", cmd_restore, "write deny-oom", 1, 1, 1},
        {"rl.checkplan", cmd_checkplan, "write deny-oom getkeys-api", 0, 0, 0},
        {"rl.holdcheck", cmd_holdcheck, "write deny-oom getkeys-api", 0, 0, 0},
        {"rl.lease", cmd_lease, "write deny-oom fast", 2, 2, 1},
        {"rl.leasereturn", cmd_leasereturn, "write fast", 3, 3, 1},
        {"rl.leaseinfo", cmd_leaseinfo, "readonly fast", 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (RedisModule_CreateCommand(ctx, cmds[i].name, cmds[i].fn, cmds[i].flags, cmds[i].first,
                                      cmds[i].last, cmds[i].step) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    if (sl__mod_holds_load(ctx) != REDISMODULE_OK) return REDISMODULE_ERR; /* holds.c */
    RedisModule_Log(ctx, "notice", "sluice %s: client time %s", SL_VERSION,
                    mod.trust_client_time ? "trusted (AT accepted)" : "refused (Redis's clock)");
    return REDISMODULE_OK;
}
