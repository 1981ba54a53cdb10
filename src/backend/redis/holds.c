/*
 * holds.c -- leases and reservations (SPEC 10: RL.ACQUIRE, RL.RELEASE,
 * RL.RESERVE, RL.SETTLE) on the Redis backend: the checks the local
 * backend makes, the command of each (the script's ops LA, LR, RV, ST in
 * sluice.lua's holds section; on the module's path RL.RESERVE and
 * RL.SETTLE are the module's RL.HOLDRESERVE and RL.HOLDSETTLE, whose
 * replies are RV's and ST's), and the reading of their replies.  Builds bytes only: the sending is send.c's.
 *
 * Every Redis key of one hold call carries one hash tag, so one call is
 * one Cluster slot and a ring sends it to the owner of that tag
 * (route.c).  A reservation's keys carry its key k, as the decisions'
 * keys do: "sl:hh:{k}" (a hash: the id counter, the clock, the
 * reservations' records), "sl:hr:{k}" (the reservations' ids by expiry)
 * and the rate state RL.ALLOW uses, "sl:<algo>0:{k}" (script.c).  A
 * lease's keys, "sl:hh:" and "sl:hl:" (the leases, a sorted set by
 * expiry), carry k's lease tag (sl__redis_lease_tag): k itself, or for
 * a key of RL.CHECK's lease form "<domain>|...|conc" the domain, as the
 * domain's counters carry it -- so a check's leases and its rates are in
 * one slot, on one ring member, and one script call takes both.
 * docs/commands-holds.md, "The Redis backend", tells the rest.
 */
#include <string.h>

#include "redis/redis_int.h"
#include "redis/holds.h"

int sl__redis_is_hold(int op) { return op >= SL_BOP_ACQUIRE && op <= SL_BOP_SETTLE; }

int sl__redis_hold_check(const sl_breq *rq)
{
    if (rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY) return SL_EKEY;
    if (rq->now_ms <= -SL_MAX_TIME_MS || rq->now_ms >= SL_MAX_TIME_MS) return SL_ETIME;
    switch (rq->op) {
    case SL_BOP_ACQUIRE:
        if (rq->max < 1 || rq->max > SL_MAX_CONCURRENCY) return SL_ELIMIT;
        if (rq->ttl_ms < 1 || rq->ttl_ms > SL_MAX_LEASE_TTL_MS) return SL_EWINDOW;
        return 0;
    case SL_BOP_RELEASE: return 0;
    case SL_BOP_RESERVE: {
        if (rq->params == NULL) return SL_EINVAL;
        int rc = sl_params_check(rq->params);
        if (rc != 0) return rc;
        if (rq->cost < 0 || rq->cost > SL_MAX_LIMIT) return SL_ECOST;
        if (rq->params->algo == SL_SLIDING_LOG) return SL_EALGO;
        /* the records keep the rate state's key by algorithm, space 0 (RL.RESERVE's) */
        return rq->params->space != 0 ? SL_EINVAL : 0;
    }
    case SL_BOP_SETTLE: return rq->cost < 0 || rq->cost > SL_MAX_LIMIT ? SL_ECOST : 0;
    default: return SL_EINVAL;
    }
}

size_t sl__redis_lease_tag(const char *key, size_t len)
{
    static const char suf[] = SL_CHECK_LEASE_SUFFIX;
    const size_t sl = sizeof suf - 1;
    const size_t longat = SL_RULES_KEY_PREFIX - sl; /* the long form's "|conc#~" */
    size_t end;                                     /* the domain ends before key[end] */
    if (len > sl && memcmp(key + len - sl, suf, sl) == 0)
        end = len - sl;
    else if (len == SL_MAX_KEY && memcmp(key + longat, suf, sl) == 0 &&
             memcmp(key + longat + sl, "#~", 2) == 0)
        end = longat;
    else
        return len;
    const char *bar = memchr(key, '|', end);
    if (bar == NULL) return len; /* no "<domain>|" before the suffix */
    /* the domain as the rules write it in a key: '%', '|', '=', '#'
     * escaped as %XX (rules_match.c), so its own length is the bytes
     * before the '|' less two a '%'; the counters' tag is that many bytes
     * of the key, at most SL_RULES_KEY_PREFIX (check.c, tag_len) */
    size_t p = (size_t)(bar - key), pct = 0;
    for (size_t i = 0; i < p; i++) pct += key[i] == '%';
    if (p <= 2 * pct) return len;
    size_t t = p - 2 * pct;
    return t < SL_RULES_KEY_PREFIX ? t : SL_RULES_KEY_PREFIX;
}

size_t sl__redis_hold_name(char *buf, char kind, const char *key, size_t len, size_t tag)
{
    memcpy(buf, "sl:h", 4);
    buf[4] = kind;
    buf[5] = ':';
    buf[6] = '{';
    memcpy(buf + 7, key, tag);
    buf[7 + tag] = '}';
    memcpy(buf + 8 + tag, key + tag, len - tag);
    return len + 8;
}

void sl__redis_hold_key(struct cmd *c, char kind, const char *key, size_t len)
{
    char *k = c->key[c->nkeys++];
    cmd_str(c, k, sl__redis_hold_name(k, kind, key, len, sl__redis_lease_tag(key, len)));
}

/* A reservation's hold key: "sl:h" kind ":{" key "}", the tag of the rate
 * state it charges. */
static void resv_key(struct cmd *c, char kind, const char *key, size_t len)
{
    char *k = c->key[c->nkeys++];
    cmd_str(c, k, sl__redis_hold_name(k, kind, key, len, len));
}

/* RL.CHECK's lease j of plan: its hh then its hl (holds.h). */
void sl__redis_check_lease_keys(struct cmd *c, const sl_check_plan *plan, int j)
{
    sl__redis_hold_key(c, 'h', plan->leases[j].key, plan->leases[j].keylen);
    sl__redis_hold_key(c, 'l', plan->leases[j].key, plan->leases[j].keylen);
}

static void rate_key(struct cmd *c, int algo, const char *key, size_t len)
{
    char *k = c->key[c->nkeys++];
    cmd_str(c, k, sl__redis_key(k, algo, 0, key, len, len));
}

/* The script's op (docs/redis-scripts.md, "Holds"). */
static void cmd_script(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    static const char *const op[] = {"LA", "LR", "RV", "ST"};
    static const int nkeys[] = {2, 2, 3, 9};
    int i = rq->op - SL_BOP_ACQUIRE;
    c->argc = c->nkeys = 0;
    cmd_str(c, "EVALSHA", 7);
    cmd_str(c, r->sha, SHA_LEN);
    cmd_int(c, nkeys[i]);
    if (rq->op == SL_BOP_ACQUIRE || rq->op == SL_BOP_RELEASE) { /* the lease tag */
        sl__redis_hold_key(c, 'h', e->key, rq->keylen);
        sl__redis_hold_key(c, 'l', e->key, rq->keylen);
    } else {
        resv_key(c, 'h', e->key, rq->keylen);
        resv_key(c, 'r', e->key, rq->keylen);
    }
    if (rq->op == SL_BOP_RESERVE) rate_key(c, (int)rq->params->algo, e->key, rq->keylen);
    if (rq->op == SL_BOP_SETTLE) /* the record names its algorithm */
        for (int a = 0; a < SL_ALGO_COUNT; a++) rate_key(c, a, e->key, rq->keylen);
    cmd_str(c, op[i], 2);
    if (r->o.trust_client_time)
        cmd_int(c, rq->now_ms);
    else
        cmd_str(c, "", 0);
    switch (rq->op) {
    case SL_BOP_ACQUIRE:
        cmd_int(c, rq->max);
        cmd_int(c, rq->ttl_ms);
        break;
    case SL_BOP_RELEASE: cmd_int(c, (int64_t)(rq->hold_id > INT64_MAX ? 0 : rq->hold_id)); break;
    case SL_BOP_RESERVE: sl__redis_cmd_fields(c, rq->params, rq->cost); break;
    default: /* SETTLE */
        cmd_int(c, (int64_t)(rq->hold_id > INT64_MAX ? 0 : rq->hold_id));
        cmd_int(c, rq->cost);
        break;
    }
}

/* The module's path: leases touch no rate state, so the script's LA and
 * LR serve there too (the script is loaded on every connection); RL.RESERVE
 * and RL.SETTLE charge the module's rate state, so they are the module's
 * RL.HOLDRESERVE and RL.HOLDSETTLE (module_cmd.c), whose replies are RV's
 * and ST's. */
void sl__redis_cmd_holds(struct cmd *c, const redis *r, const pend *e, int module)
{
    if (module && (e->rq->op == SL_BOP_RESERVE || e->rq->op == SL_BOP_SETTLE))
        sl__redis_cmd_module_hold(c, r, e);
    else
        cmd_script(c, r, e);
}

/* An id element: an integer >= 1, or 0 / a null for none. */
static int id_of(const redisReply *x, uint64_t *id)
{
    if (x->type == REDIS_REPLY_NIL) {
        *id = 0;
        return 0;
    }
    if (x->type != REDIS_REPLY_INTEGER || x->integer < 0) return -1;
    *id = (uint64_t)x->integer;
    return 0;
}

int sl__redis_parse_holds(sl_breq *rq, const redisReply *x)
{
    switch (rq->op) {
    case SL_BOP_ACQUIRE:
    case SL_BOP_RESERVE:
        /* the six fields and the id (0 or a null when denied) */
        if (x->type != REDIS_REPLY_ARRAY || x->elements != 7 ||
            sl__redis_six(x, 0, &rq->result) != 0 || id_of(x->element[6], &rq->hold_id) != 0)
            return -1;
        if (!rq->result.allowed) rq->hold_id = 0;
        return 0;
    case SL_BOP_RELEASE:
        if (x->type != REDIS_REPLY_INTEGER) return -1;
        rq->existed = x->integer > 0;
        return 0;
    case SL_BOP_SETTLE:
        /* [0]: unknown; [1, six fields]: settled */
        if (x->type != REDIS_REPLY_ARRAY || x->elements < 1 ||
            x->element[0]->type != REDIS_REPLY_INTEGER)
            return -1;
        rq->existed = x->element[0]->integer != 0;
        if (!rq->existed) return x->elements == 1 ? 0 : -1;
        return x->elements == 7 ? sl__redis_six(x, 1, &rq->result) : -1;
    default: return -1;
    }
}
