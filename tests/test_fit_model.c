/*
 * test_fit_model.c -- the store's churn checked against the reference model
 * (issue 30: records inline in the table), through the public API only.
 *
 * Written without looking at any store layout: every check is what a caller
 * of include/sluice.h sees -- the six fields of every answer, sl_forget's
 * return, sl_store_expire's count, sl_store_stats, sl_store_latest_time,
 * snapshots -- compared with tests/model.c ("always tells the truth"), so a
 * store that loses a key, mixes two up, keeps a forgotten one or drops one
 * that holds a limit fails here whatever its tables look like.
 *
 * Each key (bytes, algorithm, space) has its own model, made fresh when the
 * key is forgotten or expired: such a key must answer as a fresh key.  A
 * key is in the store after a decision of cost >= 1 (always allowed on a
 * fresh key, so it holds a record), until sl_forget (space 0 only) or an
 * sl_store_expire at or after its reset time -- the time of its last
 * decision plus that decision's reset_after_ms.  Every reset_after_ms in
 * the unbounded cases is below 2048 ms, which docs/store.md says the store
 * keeps exactly (longer ones are kept rounded up, never early), so the
 * count of keys after an expire is exact.
 *
 * The cases:
 *   churn_every_key_length   keys of 1..64 bytes and 8 of 100..512 (each
 *       length three times: a prefix of one random string, and the same
 *       with its last or its middle byte changed), the five fixed-size
 *       algorithms, both spaces, in an unbounded store of one shard:
 *       rounds of decisions (sl_decide, sl_peek, sl_decide_many) at a
 *       moving time with steps back, sl_forget of a random subset, a
 *       partial and a full sl_store_expire, decisions again; `keys`,
 *       `expired` and sl_store_latest_time checked every round; one round
 *       jumps 2^32 ms ahead.
 *   bound_deny_keeps_every_key, bound_evict_keeps_keys_at_limit,
 *   bound_holds_many_keys   a bounded store flooded far past its bound with
 *       keys of mixed lengths and algorithms: `bytes` never passes
 *       max_bytes; SL_FULL_DENY loses no admitted key, refuses with
 *       SL_EFULL (counted), and takes new keys again once old ones rest;
 *       SL_FULL_EVICT keeps every key at its limit through a flood whose
 *       keys come to rest quickly; > max_bytes/48 token-bucket keys of 16
 *       bytes fit.
 *   snapshot_of_churned_store   after the churn, sl_store_save, then
 *       sl_store_load into a 1-shard and a 64-shard store: the same keys,
 *       the same latest time, every key answering as the original and the
 *       model, before and after more decisions, forgets and an expire.
 *   threads_record_locks, threads_shard_locks   two threads decide on their
 *       own keys (each checked against its own models) while a third
 *       inserts batches of new keys, re-decides, forgets and expires them,
 *       for SL_LOCK_RECORD and SL_LOCK_SHARD; a fixed number of operations.
 *   threads_bounded_deny   the same in a store bounded with SL_FULL_DENY
 *       that every batch goes past: the deciders' keys (held for a day,
 *       made before the others start) are never dropped and answer
 *       exactly, the inserter is refused and its keys at rest make room,
 *       `bytes` stays within the bound, and every refusal is counted.
 *
 * Under TSan (tests/run.sh runs this file there too) only the three thread
 * cases run: the others have one thread.  Seeds are fixed; SLUICE_SEED=N
 * changes every case's; SLUICE_TEST_FILTER="*bound*" runs only the
 * matching cases.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "sluice.h"
#include "support/rng.h"

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(TSAN)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

#define CHURN_ROUNDS 40
/* Per deciding thread, operations; batches of the inserting thread: about
 * as long, so the deciders run while tables grow.  Sanitizers run the
 * store and the model 3-10x slower: fewer. */
#ifdef SANITIZED
#define THREAD_OPS      12000
#define CHURN_BATCHES   6
#define BOUNDED_BATCHES 2
#else
#define THREAD_OPS      40000
#define CHURN_BATCHES   16
#define BOUNDED_BATCHES 4
#endif
#define SNAP_ROUNDS   10           /* churn rounds before the snapshot */
#define BATCH         1500         /* keys the inserting thread holds at once */
#define THREAD_BOUND  (256 * 1024) /* the bounded case's, one shard: ~3000 keys */
#define BATCH_BOUNDED 3000         /* its batches: past the bound */

#define NFIXED 5
static const sl_algo fixed_algos[NFIXED] = {SL_TOKEN_BUCKET, SL_GCRA, SL_FIXED_WINDOW,
                                            SL_SLIDING_WINDOW, SL_LEAKY_BUCKET};

#define HOUR 3600000LL
#define DAY  (24 * HOUR)

static uint64_t seed_of(uint64_t dflt)
{
    const char *s = getenv("SLUICE_SEED");
    if (s != NULL && *s != '\0') return strtoull(s, NULL, 0) ^ dflt;
    return dflt;
}

/* ---- a key and its model -------------------------------------------------- */

/* Is the key in the store: no, yes, or a partial expire may have dropped it. */
enum { OUT = 0, IN = 1, MAYBE = 2 };

typedef struct slot {
    sl_params p;
    const unsigned char *key; /* owned by the case */
    size_t klen;
    model *m;         /* the key's history since it was last fresh */
    int present;      /* OUT, IN or MAYBE */
    int64_t reset_at; /* IN: when its state comes to rest (ms) */
    int64_t clock;    /* IN: its latest decision time (ms) */
} slot;

static void slot_fresh(slot *s)
{
    s->present = OUT;
    if (s->m != NULL && model_history_len(s->m, s->key, s->klen) == 0) return; /* fresh already */
    model_free(s->m);
    s->m = model_new(&s->p);
}

static void slot_init(slot *s, const sl_params *p, const unsigned char *key, size_t klen)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->key = key;
    s->klen = klen;
    slot_fresh(s);
}

static void describe(char *buf, size_t len, const slot *s)
{
    char hex[40];
    size_t n = s->klen < 8 ? s->klen : 8, w = 0;
    for (size_t i = 0; i < n; i++)
        w += (size_t)snprintf(hex + w, sizeof hex - w, "%02x", s->key[i]);
    snprintf(buf, len,
             "%s space %d key of %zu bytes %s%s (limit %" PRId64 ", window %" PRId64
             ", burst %" PRId64 ")",
             model_algo_name(s->p.algo), s->p.space, s->klen, hex, s->klen > 8 ? "..." : "",
             s->p.limit, s->p.window_ms, s->p.burst);
}

static void fmt_result(char *buf, size_t len, const sl_result *r)
{
    snprintf(buf, len, "%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
             r->allowed, r->limit, r->remaining, r->retry_after_ms, r->reset_after_ms, r->delay_ms);
}

static int same(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_after_ms == b->reset_after_ms &&
           a->delay_ms == b->delay_ms;
}

/* Compares the store's answer (rc, got) with the model's (want).  Returns
 * 0, or -1 with a message in err. */
static int compare(const char *what, const slot *s, int64_t t, int64_t cost, int rc,
                   const sl_result *got, const sl_result *want, char *err, size_t errlen)
{
    const char *me = model_error(s->m);
    if (me == NULL && rc == 0 && same(got, want)) return 0;
    char d[200], g[120], w[120];
    describe(d, sizeof d, s);
    if (me != NULL) {
        snprintf(err, errlen, "%s: %s", d, me);
        return -1;
    }
    fmt_result(w, sizeof w, want);
    if (rc != 0)
        snprintf(g, sizeof g, "error %d (%s)", rc, sl_strerror(rc));
    else
        fmt_result(g, sizeof g, got);
    snprintf(err, errlen,
             "%s at t=%" PRId64 " cost %" PRId64 " on %s (%s): store says %s, model %s", what, t,
             cost, d,
             s->present == IN    ? "in the store"
             : s->present == OUT ? "not stored"
                                 : "maybe stored",
             g, w);
    return -1;
}

/* The model's side of a decision that was made: the key is in the store. */
static void note_decided(slot *s, int64_t T, const sl_result *want)
{
    s->present = IN;
    s->clock = T;
    s->reset_at = T + want->reset_after_ms;
}

/* sl_decide (peek = 0) or sl_peek (1) of cost at t, on the store and on the
 * model.  Returns 0, or -1 with a message in err naming the key, the
 * request and both answers. */
static int step(sl_store *st, slot *s, int peek, int64_t t, int64_t cost, char *err, size_t errlen)
{
    sl_result got, want;
    memset(&got, 0, sizeof got);
    int64_t T = model_effective_time(s->m, s->key, s->klen, t);
    int rc = peek ? sl_peek(st, &s->p, s->key, s->klen, t, cost, &got)
                  : sl_decide(st, &s->p, s->key, s->klen, t, cost, &got);
    if (peek)
        model_peek(s->m, s->key, s->klen, t, cost, &want);
    else
        model_decide(s->m, s->key, s->klen, t, cost, &want);
    if (compare(peek ? "peek" : "decide", s, t, cost, rc, &got, &want, err, errlen) != 0) return -1;
    if (!peek) note_decided(s, T, &want);
    return 0;
}

/* sl_decide_many of n requests (n <= 64) on the store, each decided by its
 * slot's model in order.  Returns 0, or -1 with a message in err. */
static int step_many(sl_store *st, slot **ss, const int64_t *ts, const int64_t *costs, size_t n,
                     char *err, size_t errlen)
{
    sl_call calls[64];
    sl_result out[64];
    int rc[64];
    memset(calls, 0, sizeof calls);
    for (size_t i = 0; i < n; i++)
        calls[i] = (sl_call){&ss[i]->p, ss[i]->key, ss[i]->klen, ts[i], costs[i]};
    size_t ok = sl_decide_many(st, calls, n, out, rc);
    for (size_t i = 0; i < n; i++) {
        sl_result want;
        slot *s = ss[i];
        int64_t T = model_effective_time(s->m, s->key, s->klen, ts[i]);
        model_decide(s->m, s->key, s->klen, ts[i], costs[i], &want);
        if (compare("sl_decide_many", s, ts[i], costs[i], rc[i], &out[i], &want, err, errlen))
            return -1;
        note_decided(s, T, &want);
    }
    if (ok != n) {
        snprintf(err, errlen, "sl_decide_many returned %zu of %zu decided", ok, n);
        return -1;
    }
    return 0;
}

/* sl_forget(key, algo) of the space-0 slot s0: returns 1 exactly when s0
 * is in the store (either for MAYBE), and the key is fresh afterwards. */
static int forget(sl_store *st, slot *s0, char *err, size_t errlen)
{
    int rc = sl_forget(st, s0->p.algo, s0->key, s0->klen);
    int ok = s0->present == MAYBE ? rc == 0 || rc == 1 : rc == (s0->present == IN);
    if (!ok) {
        char d[200];
        describe(d, sizeof d, s0);
        snprintf(err, errlen, "sl_forget of %s (%s) returned %d", d,
                 s0->present == IN ? "in the store" : "not stored", rc);
        return -1;
    }
    slot_fresh(s0);
    return 0;
}

static void stats_of(sl_store *st, sl_store_stats *ss)
{
    memset(ss, 0xff, sizeof *ss);
    sl_store_stats_get(st, ss);
}

/* Random parameters for a fixed-size algorithm, its window drawn from
 * windows[0..nw): limit 2..8, a bucket's burst L, about L/2 or 2L. */
static sl_params params_rand(rng *r, sl_algo a, const int64_t *windows, int nw, int space)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = rnd_in(r, 2, 8);
    p.window_ms = windows[rnd_in(r, 0, nw - 1)];
    if (a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET) {
        int64_t b[3] = {0, p.limit / 2 + 1, 2 * p.limit};
        p.burst = b[rnd_in(r, 0, 2)];
    }
    p.space = space;
    return p;
}

static int64_t cap_of(const slot *s) { return model_capacity(&s->p); }

/* A cost for s: 1..capacity when it may not be in the store (a fresh key's
 * first request is then allowed, so it holds a record), else 0..capacity
 * and now and then one above. */
static int64_t cost_for(rng *r, const slot *s)
{
    if (s->present != IN) return rnd_in(r, 1, cap_of(s));
    if (chance(r, 3)) return cap_of(s) + 1;
    return rnd_in(r, chance(r, 10) ? 0 : 1, cap_of(s));
}

/* ---- case 1: churn of every key length ----------------------------------- */

#define NLONG 8
static const size_t long_lens[NLONG] = {100, 128, 200, 255, 256, 300, 511, 512};
#define NLENS  (64 + NLONG)
#define NKEYS  (3 * NLENS)
#define NSLOTS (NKEYS * NFIXED * 2)

typedef struct churn {
    rng r;
    sl_store *st;
    unsigned char *keybytes; /* NKEYS keys of up to SL_MAX_KEY bytes each */
    slot slots[NSLOTS];      /* ((key * NFIXED) + algo) * 2 + space */
    int64_t t;               /* the moving time (ms) */
    int64_t floor;           /* no request before it: the last expire's time */
    uint64_t expired;        /* sum of sl_store_expire's returns */
    char err[1024];
} churn;

static size_t len_of(int i) { return i < 64 ? (size_t)i + 1 : long_lens[i - 64]; }

static sl_store *store_new(size_t max_bytes, unsigned shards, unsigned locking, unsigned on_full,
                           uint64_t seed)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.max_bytes = max_bytes;
    o.shards = shards;
    o.locking = locking;
    o.on_full = on_full;
    o.fixed_seed = 1;
    for (int i = 0; i < 16; i++) o.seed[i] = (uint8_t)(seed >> (8 * (i % 8))) ^ (uint8_t)i;
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    assert_int_equal(err, SL_OK);
    return s;
}

/* The keys: for every length, a prefix of one random 512-byte string (so
 * each is a prefix of the next), the same with its last byte changed, and
 * with its middle byte changed (the first, for one byte);
 * in an unbounded store of `shards` shards (1: every key in one shard's
 * tables, so they grow, fill with removed keys and are rebuilt). */
static churn *churn_new(uint64_t seed, unsigned shards)
{
    churn *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->r.s = seed_of(seed);
    c->keybytes = malloc((size_t)NKEYS * SL_MAX_KEY);
    assert_non_null(c->keybytes);
    unsigned char base[SL_MAX_KEY];
    for (size_t i = 0; i < sizeof base; i++) base[i] = (unsigned char)rnd(&c->r); /* NULs and all */
    static const int64_t windows[] = {1, 10, 250, 500, 999, 1000};
    for (int k = 0; k < NKEYS; k++) {
        size_t len = len_of(k / 3);
        unsigned char *kb = c->keybytes + (size_t)k * SL_MAX_KEY;
        memcpy(kb, base, len);
        if (k % 3 == 1)
            kb[len - 1] ^= 0x80;
        else if (k % 3 == 2)
            kb[len / 2] ^= 0x01;
        for (int a = 0; a < NFIXED; a++)
            for (int sp = 0; sp < 2; sp++) {
                sl_params p = params_rand(&c->r, fixed_algos[a], windows, 6, sp);
                slot_init(&c->slots[(k * NFIXED + a) * 2 + sp], &p, kb, len);
            }
    }
    c->st = store_new(0, shards, SL_LOCK_RECORD, SL_FULL_EVICT, seed);
    c->t = -3000; /* through t = 0 too */
    c->floor = c->t;
    return c;
}

static void churn_free(churn *c)
{
    for (int i = 0; i < NSLOTS; i++) model_free(c->slots[i].m);
    if (c->st != NULL) sl_store_free(c->st);
    free(c->keybytes);
    free(c);
}

#define CHECK(c, call)                                                                             \
    do {                                                                                           \
        if ((call) != 0) fail_msg("%s", (c)->err);                                                 \
    } while (0)

static uint64_t count_in(const slot *s, size_t n, int64_t *latest)
{
    uint64_t k = 0;
    if (latest != NULL) *latest = INT64_MIN;
    for (size_t i = 0; i < n; i++)
        if (s[i].present == IN) {
            k++;
            if (latest != NULL && s[i].clock > *latest) *latest = s[i].clock;
        }
    return k;
}

/* The store holds exactly the keys the model says are in it, has counted
 * every drop as expired, and its latest time is theirs. */
static void check_counts(churn *c, sl_store *st, const char *when)
{
    sl_store_stats ss;
    stats_of(st, &ss);
    int64_t latest;
    uint64_t want = count_in(c->slots, NSLOTS, &latest);
    if (ss.keys != want)
        fail_msg("%s: the store holds %" PRIu64 " keys, the model %" PRIu64, when, ss.keys, want);
    if (ss.expired != c->expired || ss.evictions != 0)
        fail_msg("%s: expired %" PRIu64 " (sl_store_expire dropped %" PRIu64 "), evictions %" PRIu64
                 " in an unbounded store",
                 when, ss.expired, c->expired, ss.evictions);
    int64_t lt = sl_store_latest_time(st);
    if (lt != latest)
        fail_msg("%s: sl_store_latest_time %" PRId64 ", the model's latest key clock %" PRId64,
                 when, lt, latest);
}

/* n decisions (some peeks, one sl_decide_many of 32) on random keys at a
 * time moving forward by 0..3 ms, one in five stepping back up to 40 ms
 * (never before c->floor). */
static void churn_decide(churn *c, int n)
{
    rng *r = &c->r;
    int many_at = (int)rnd_in(r, 0, n - 1);
    for (int i = 0; i < n; i++) {
        c->t += rnd_in(r, 0, 3);
        if (i == many_at) {
            slot *ss[32];
            int64_t ts[32], costs[32];
            for (int j = 0; j < 32; j++) {
                /* repeats: a key twice in one batch sees its first charge */
                ss[j] = j > 0 && chance(r, 15) ? ss[rnd_in(r, 0, j - 1)]
                                               : &c->slots[rnd_in(r, 0, NSLOTS - 1)];
                ts[j] = c->t + j / 4;
                costs[j] = cost_for(r, ss[j]); /* a repeat of a new key: >= 1 too */
            }
            CHECK(c, step_many(c->st, ss, ts, costs, 32, c->err, sizeof c->err));
            continue;
        }
        slot *s = &c->slots[rnd_in(r, 0, NSLOTS - 1)];
        int64_t t = c->t;
        if (chance(r, 20)) t -= rnd_in(r, 0, 40);
        if (t < c->floor) t = c->floor;
        CHECK(c, step(c->st, s, chance(r, 10), t, cost_for(r, s), c->err, sizeof c->err));
    }
}

/* sl_store_expire(at, max) on the store; the model's side: every key in
 * the store whose reset time has come is dropped (max = 0), or may be
 * (max > 0: the store examines max records only).  Returns the count. */
static uint64_t churn_expire(churn *c, sl_store *st, int64_t at, uint64_t max)
{
    sl_store_stats before, after;
    stats_of(st, &before);
    uint64_t due = 0, maybe = 0;
    for (int i = 0; i < NSLOTS; i++) {
        const slot *s = &c->slots[i];
        if (s->present == IN && s->reset_at <= at)
            due++;
        else if (s->present == MAYBE)
            maybe++;
    }
    uint64_t d = sl_store_expire(st, at, max);
    stats_of(st, &after);
    if (after.keys != before.keys - d)
        fail_msg("sl_store_expire(%" PRId64 ", %" PRIu64 ") returned %" PRIu64
                 " but keys went from %" PRIu64 " to %" PRIu64,
                 at, max, d, before.keys, after.keys);
    if (max == 0 ? d < due || d > due + maybe : d > due + maybe)
        fail_msg("sl_store_expire(%" PRId64 ", %" PRIu64 ") dropped %" PRIu64
                 " keys; the model has %" PRIu64 " at rest (and %" PRIu64
                 " that may be gone already)",
                 at, max, d, due, maybe);
    for (int i = 0; i < NSLOTS; i++) {
        slot *s = &c->slots[i];
        if (s->present == IN && s->reset_at <= at) s->present = MAYBE;
        if (s->present == MAYBE && max == 0) slot_fresh(s); /* gone: answers as a fresh key */
    }
    return d;
}

/* sl_forget of a random eighth of the (key, algorithm) pairs: space 0 only. */
static void churn_forget(churn *c, sl_store *const *st, int nst)
{
    for (int k = 0; k < NKEYS * NFIXED; k++) {
        if (!chance(&c->r, 12)) continue;
        slot *s0 = &c->slots[k * 2];
        int present = s0->present;
        for (int j = 0; j < nst; j++) {
            s0->present = present;
            CHECK(c, forget(st[j], s0, c->err, sizeof c->err));
        }
    }
}

/* One round: decide, maybe a partial expire, forget, a full expire later
 * on, decide again; the counts are checked after each part. */
static void churn_round(churn *c, int round)
{
    char when[64];
    if (round == 7) c->t += ((int64_t)1 << 32) + 777; /* past any 32-bit clock window */
    churn_decide(c, NSLOTS / 2);
    if (chance(&c->r, 50)) {
        int64_t at = rnd_in(&c->r, c->floor, c->t);
        c->expired += churn_expire(c, c->st, at, (uint64_t)rnd_in(&c->r, 1, 300));
        c->floor = at;
    }
    churn_forget(c, &c->st, 1);
    int64_t at = c->t + rnd_in(&c->r, 0, 800);
    c->expired += churn_expire(c, c->st, at, 0);
    c->floor = c->t = at;
    snprintf(when, sizeof when, "round %d, after the expire at %" PRId64, round, at);
    check_counts(c, c->st, when);
    churn_decide(c, NSLOTS / 4);
    snprintf(when, sizeof when, "round %d, deciding again", round);
    check_counts(c, c->st, when);
}

/* Every key, in the store or not, answers a peek as the model does. */
static void peek_all(churn *c, sl_store *st, int64_t t)
{
    for (int i = 0; i < NSLOTS; i++) {
        slot *s = &c->slots[i];
        CHECK(c, step(st, s, 1, t, rnd_in(&c->r, 0, cap_of(s)), c->err, sizeof c->err));
    }
}

static void test_churn_every_key_length(void **state)
{
    (void)state;
    churn *c = churn_new(0xf17c4a11, 1);
    for (int round = 0; round < CHURN_ROUNDS; round++) churn_round(c, round);
    peek_all(c, c->st, c->t);
    /* the store was used: keys came and went through every path */
    sl_store_stats ss;
    stats_of(c->st, &ss);
    assert_true(c->expired > (uint64_t)NSLOTS);
    assert_true(ss.keys > 0);
    churn_free(c);
}

/* ---- case 3: snapshots of a churned store -------------------------------- */

static void test_snapshot_of_churned_store(void **state)
{
    (void)state;
    churn *c = churn_new(0x5a9e0f17, 2);
    for (int round = 0; round < SNAP_ROUNDS; round++) churn_round(c, round);
    churn_decide(c, NSLOTS / 2); /* keys at rest and not, none expired since */

    char dir[] = "/tmp/sluice-test-fit-XXXXXX", path[64], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/snap", dir);
    if (sl_store_save(c->st, path, err, sizeof err) != 0) fail_msg("sl_store_save: %s", err);

    sl_store_stats ss;
    stats_of(c->st, &ss);
    assert_int_equal(ss.keys, count_in(c->slots, NSLOTS, NULL));
    sl_store *st[3] = {c->st, store_new(0, 1, SL_LOCK_RECORD, SL_FULL_EVICT, 11),
                       store_new(0, 64, SL_LOCK_SHARD, SL_FULL_EVICT, 12)};
    for (int j = 1; j < 3; j++) {
        uint64_t n = 0;
        if (sl_store_load(st[j], path, &n, err, sizeof err) != 0)
            fail_msg("sl_store_load into the store of %d shards: %s", j == 1 ? 1 : 64, err);
        sl_store_stats ls;
        stats_of(st[j], &ls);
        if (n != ss.keys || ls.keys != ss.keys)
            fail_msg("the store of %d shards loaded %" PRIu64 " records and holds %" PRIu64
                     " keys; the original holds %" PRIu64,
                     j == 1 ? 1 : 64, n, ls.keys, ss.keys);
        assert_int_equal(sl_store_latest_time(st[j]), sl_store_latest_time(c->st));
    }
    unlink(path);
    rmdir(dir);

    /* every key answers the same in the three stores and the model */
    for (int j = 0; j < 3; j++) {
        rng keep = c->r;
        peek_all(c, st[j], c->t);
        c->r = keep;
    }
    /* decisions on all three, one model: the loaded records are found for writing */
    for (int i = 0; i < NSLOTS / 2; i++) {
        slot *s = &c->slots[rnd_in(&c->r, 0, NSLOTS - 1)];
        int64_t t = c->t + i / 8, cost = cost_for(&c->r, s);
        sl_result got[3], want;
        int rc[3];
        for (int j = 0; j < 3; j++)
            rc[j] = sl_decide(st[j], &s->p, s->key, s->klen, t, cost, &got[j]);
        int64_t T = model_effective_time(s->m, s->key, s->klen, t);
        model_decide(s->m, s->key, s->klen, t, cost, &want);
        for (int j = 0; j < 3; j++) {
            char what[48];
            snprintf(what, sizeof what, "decide on %s store",
                     j == 0   ? "the original"
                     : j == 1 ? "the 1-shard"
                              : "the 64-shard");
            CHECK(c, compare(what, s, t, cost, rc[j], &got[j], &want, c->err, sizeof c->err));
        }
        note_decided(s, T, &want);
    }
    churn_forget(c, st, 3);
    int64_t at = c->t + NSLOTS / 16 + 700;
    uint64_t d0 = churn_expire(c, st[0], at, 0);
    for (int j = 1; j < 3; j++) {
        /* the model's side is done: the same count, the same keys */
        sl_store_stats b, a;
        stats_of(st[j], &b);
        uint64_t d = sl_store_expire(st[j], at, 0);
        stats_of(st[j], &a);
        if (d != d0 || a.keys != b.keys - d)
            fail_msg("expire on the loaded store %d dropped %" PRIu64 " (keys %" PRIu64
                     " -> %" PRIu64 "), the original %" PRIu64,
                     j, d, b.keys, a.keys, d0);
    }
    c->expired += d0;
    c->t = c->floor = at;
    for (int j = 0; j < 3; j++) {
        sl_store_stats a;
        stats_of(st[j], &a);
        assert_int_equal(a.keys, count_in(c->slots, NSLOTS, NULL));
        rng keep = c->r;
        peek_all(c, st[j], c->t);
        c->r = keep;
    }
    sl_store_free(st[1]);
    sl_store_free(st[2]);
    churn_free(c);
}

/* ---- case 2: growth and shrink under a bound ----------------------------- */

/* A key of the floods: its bytes (index i in the first 4 bytes, so keys
 * are distinct, then filler), its slot, whether the store took it. */
typedef struct fkey {
    slot s;
    unsigned char *bytes;
    int admitted;
    int long_window;
} fkey;

static size_t flood_len(rng *r)
{
    return chance(r, 5) ? (size_t)rnd_in(r, 100, 300) : (size_t)rnd_in(r, 4, 64);
}

static unsigned char *flood_bytes(rng *r, uint32_t i, size_t len)
{
    unsigned char *b = malloc(len);
    assert_non_null(b);
    b[0] = (unsigned char)(i >> 24);
    b[1] = (unsigned char)(i >> 16);
    b[2] = (unsigned char)(i >> 8);
    b[3] = (unsigned char)i;
    for (size_t j = 4; j < len; j++) b[j] = (unsigned char)rnd(r);
    return b;
}

static void check_bound(sl_store *st, size_t bound, const char *when, uint64_t i)
{
    sl_store_stats ss;
    stats_of(st, &ss);
    if (ss.bytes > bound || ss.max_bytes != bound)
        fail_msg("%s, call %" PRIu64 ": the store holds %" PRIu64
                 " bytes, its bound is %zu (stats say %" PRIu64 ")",
                 when, i, ss.bytes, bound, ss.max_bytes);
}

/* n new keys decided once each at t (+1 ms every 64): mixed lengths, the
 * five fixed-size algorithms and sliding-log (one in ten), both spaces,
 * windows of `window` (one in five of `long_window` when nonzero).  Each
 * answer is the model's; the only errors allowed are refusals, with
 * SL_FULL_DENY only: SL_EFULL (counted in refused[0]; refused[1], once
 * the SL_ENOMEM a full store gave now and then, stays 0: step_room).
 * Returns the keys. */
static fkey *flood(sl_store *st, rng *r, size_t bound, unsigned on_full, uint32_t first, uint64_t n,
                   int64_t t, int64_t window, int64_t long_window, uint64_t refused[2])
{
    fkey *f = calloc(n, sizeof *f);
    assert_non_null(f);
    char err[1024];
    refused[0] = refused[1] = 0;
    for (uint64_t i = 0; i < n; i++) {
        int lw = long_window != 0 && chance(r, 20);
        int64_t w[1] = {lw ? long_window : window};
        sl_algo a = chance(r, 10) ? SL_SLIDING_LOG : fixed_algos[rnd_in(r, 0, NFIXED - 1)];
        sl_params p = a == SL_SLIDING_LOG ? (sl_params)SL_PARAMS_INIT
                                          : params_rand(r, a, w, 1, (int)rnd_in(r, 0, 1));
        if (a == SL_SLIDING_LOG) {
            p.algo = a;
            p.limit = rnd_in(r, 2, 8);
            p.window_ms = w[0];
            p.space = (int)rnd_in(r, 0, 1);
        }
        size_t len = flood_len(r);
        f[i].bytes = flood_bytes(r, first + (uint32_t)i, len);
        f[i].long_window = lw;
        slot_init(&f[i].s, &p, f[i].bytes, len);
        int64_t ti = t + (int64_t)(i / 64), cost = rnd_in(r, 1, cap_of(&f[i].s));
        sl_result got;
        int rc = sl_decide(st, &p, f[i].bytes, len, ti, cost, &got);
        if (rc == SL_EFULL && on_full == SL_FULL_DENY) {
            refused[0]++;
            model_free(f[i].s.m); /* fresh: flood_peek makes one when needed */
            f[i].s.m = NULL;
        } else {
            sl_result want;
            model_decide(f[i].s.m, f[i].bytes, len, ti, cost, &want);
            if (compare("flood", &f[i].s, ti, cost, rc, &got, &want, err, sizeof err) != 0)
                fail_msg("key %" PRIu64 " of the flood: %s", i, err);
            note_decided(&f[i].s, model_effective_time(f[i].s.m, f[i].bytes, len, ti), &want);
            f[i].admitted = 1;
        }
        check_bound(st, bound, "flood", i);
    }
    return f;
}

static void flood_free(fkey *f, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        model_free(f[i].s.m);
        free(f[i].bytes);
    }
    free(f);
}

/* Every key of f answers a peek at t as its model does: those the store
 * took with their state, those it refused as fresh keys. */
static void flood_peek(sl_store *st, rng *r, fkey *f, uint64_t n, int64_t t, const char *when)
{
    char err[1024];
    for (uint64_t i = 0; i < n; i++) {
        slot s = f[i].s;
        if (s.m == NULL) s.m = model_new(&s.p);
        int bad = step(st, &s, 1, t, rnd_in(r, 0, cap_of(&s)), err, sizeof err);
        if (f[i].s.m == NULL) model_free(s.m);
        if (bad)
            fail_msg("%s, key %" PRIu64 " (%s): %s", when, i,
                     f[i].admitted ? "admitted" : "refused", err);
    }
}

/* SL_FULL_DENY: a flood far past the bound (keys holding a limit for an
 * hour, one in five for a day) is refused with SL_EFULL once the store is
 * full (never SL_ENOMEM: step_room), every refusal
 * counted in `refused`; every admitted key answers exactly, and decides again without an
 * error (a sliding-log's ring may need to grow: SL_EFULL allowed there,
 * nothing changed); three hours later the hour keys are at rest and a
 * second flood takes their room; no day key is lost, none evicted. */
static void test_bound_deny_keeps_every_key(void **state)
{
    (void)state;
    const size_t bound = 256 * 1024;
    const uint64_t n = bound / 32; /* over three times what fits */
    rng r = {seed_of(0xde4711)};
    sl_store *st = store_new(bound, 0, SL_LOCK_RECORD, SL_FULL_DENY, 7);
    const int64_t t1 = 20 * DAY + HOUR; /* an hour into a day: day windows hold */
    uint64_t ref1[2], ref2[2];
    fkey *f1 = flood(st, &r, bound, SL_FULL_DENY, 0, n, t1, HOUR, DAY, ref1);
    uint64_t adm1 = n - ref1[0] - ref1[1];
    sl_store_stats ss;
    stats_of(st, &ss);
    if (ref1[0] == 0 || ss.keys != adm1 || ss.refused != ref1[0] || ss.evictions != 0 ||
        ss.expired != 0)
        fail_msg("after the first flood: %" PRIu64 " SL_EFULL (%" PRIu64
                 " SL_ENOMEM), keys %" PRIu64 " (admitted %" PRIu64 "), refused %" PRIu64
                 ", evictions %" PRIu64 ", expired %" PRIu64,
                 ref1[0], ref1[1], ss.keys, adm1, ss.refused, ss.evictions, ss.expired);
    flood_peek(st, &r, f1, n, t1 + 1000, "after the first flood");

    /* every admitted key decides again: found, exact, never refused */
    char err[1024];
    for (uint64_t i = 0; i < n; i++) {
        fkey *k = &f1[i];
        if (!k->admitted) continue;
        int64_t t = t1 + 2000, cost = rnd_in(&r, 1, cap_of(&k->s));
        if (k->s.p.algo == SL_SLIDING_LOG) {
            sl_result got;
            int rc = sl_decide(st, &k->s.p, k->bytes, k->s.klen, t, cost, &got);
            if (rc == SL_EFULL)
                continue; /* its ring could not grow: nothing changed (peeked below) */
            sl_result want;
            int64_t T = model_effective_time(k->s.m, k->bytes, k->s.klen, t);
            model_decide(k->s.m, k->bytes, k->s.klen, t, cost, &want);
            if (compare("decide again", &k->s, t, cost, rc, &got, &want, err, sizeof err) != 0)
                fail_msg("admitted key %" PRIu64 ": %s", i, err);
            note_decided(&k->s, T, &want);
            continue;
        }
        if (step(st, &k->s, 0, t, cost, err, sizeof err) != 0)
            fail_msg("admitted key %" PRIu64 ": %s", i, err);
        check_bound(st, bound, "deciding again", i);
    }
    flood_peek(st, &r, f1, n, t1 + 2000, "after deciding again");

    /* three hours on: the hour keys rest, the day keys hold */
    const int64_t t2 = t1 + 3 * HOUR;
    uint64_t held = 0;
    for (uint64_t i = 0; i < n; i++) {
        sl_result p;
        if (!f1[i].admitted || !f1[i].long_window) continue;
        model_peek(f1[i].s.m, f1[i].bytes, f1[i].s.klen, t2, 0, &p);
        held += p.reset_after_ms > 0;
    }
    assert_true(held > adm1 / 10); /* the test's own premise */
    fkey *f2 = flood(st, &r, bound, SL_FULL_DENY, (uint32_t)n, n, t2, HOUR, 0, ref2);
    uint64_t adm2 = n - ref2[0] - ref2[1];
    stats_of(st, &ss);
    if (adm2 < n / 10 || ss.evictions != 0 || ss.refused != ref1[0] + ref2[0] ||
        ss.expired != ss.evicted_at_rest || ss.keys != adm1 - ss.expired + adm2)
        fail_msg("after the second flood: admitted %" PRIu64 " of %" PRIu64 ", keys %" PRIu64
                 " (first flood %" PRIu64 " - expired %" PRIu64 " + %" PRIu64
                 "), evictions %" PRIu64 ", refused %" PRIu64 " (want %" PRIu64
                 "), evicted at rest %" PRIu64,
                 adm2, n, ss.keys, adm1, ss.expired, adm2, ss.evictions, ss.refused,
                 ref1[0] + ref2[0], ss.evicted_at_rest);
    flood_peek(st, &r, f1, n, t2 + 1, "the first flood after the second");
    flood_peek(st, &r, f2, n, t2 + 1, "the second flood");
    flood_free(f1, n);
    flood_free(f2, n);
    sl_store_free(st);
}

/* SL_FULL_EVICT: 48 keys at their limit for a day (mixed lengths and
 * algorithms), then a flood far past the bound of keys that come to rest
 * within ~40 ms, at 1 ms a key: the flood's own keys make its room, every
 * key at its limit is still there, and none was evicted at its limit. */
static void test_bound_evict_keeps_keys_at_limit(void **state)
{
    (void)state;
    const size_t bound = 256 * 1024;
    const uint64_t n = bound / 32; /* over three times what fits */
    enum { NLIM = 48 };
    rng r = {seed_of(0xe71c7)};
    sl_store *st = store_new(bound, 0, SL_LOCK_RECORD, SL_FULL_EVICT, 8);
    const int64_t t0 = 30 * DAY + HOUR;
    char err[1024];
    uint64_t none[2];
    fkey *lim = flood(st, &r, bound, SL_FULL_EVICT, 0x7f000000u, NLIM, t0, DAY, 0, none);
    for (int i = 0; i < NLIM; i++) { /* to the limit: the rest of it, then one denied */
        int64_t left;
        sl_result p;
        model_peek(lim[i].s.m, lim[i].bytes, lim[i].s.klen, t0, 0, &p);
        left = p.remaining;
        if (left > 0 && step(st, &lim[i].s, 0, t0, left, err, sizeof err) != 0)
            fail_msg("key at its limit %d: %s", i, err);
        if (step(st, &lim[i].s, 0, t0, 1, err, sizeof err) != 0)
            fail_msg("key at its limit %d: %s", i, err);
        model_peek(lim[i].s.m, lim[i].bytes, lim[i].s.klen, t0, 1, &p);
        assert_int_equal(p.allowed, 0); /* the test's own premise */
    }
    /* the flood: windows of 20 ms, a key every ms (flood() moves 1 ms per
     * 64 keys: call it per key) */
    sl_store_stats ss;
    for (uint64_t i = 0; i < n; i++) {
        fkey *k =
            flood(st, &r, bound, SL_FULL_EVICT, (uint32_t)i, 1, t0 + 1 + (int64_t)i, 20, 0, none);
        flood_free(k, 1);
        if (i % 4096 == 4095)
            flood_peek(st, &r, lim, NLIM, t0 + 1 + (int64_t)i,
                       "keys at their limit during the flood");
    }
    stats_of(st, &ss);
    if (ss.evicted_at_rest == 0 || ss.evicted_at_limit != 0)
        fail_msg("after the flood: evicted at rest %" PRIu64 " (the flood must have needed room), "
                 "evicted at their limit %" PRIu64 " (evictions %" PRIu64 ")",
                 ss.evicted_at_rest, ss.evicted_at_limit, ss.evictions);
    flood_peek(st, &r, lim, NLIM, t0 + 1 + (int64_t)n, "keys at their limit after the flood");
    for (int i = 0; i < NLIM; i++) { /* and still denied, as the model says */
        if (step(st, &lim[i].s, 0, t0 + 2 + (int64_t)n, 1, err, sizeof err) != 0)
            fail_msg("key at its limit %d after the flood: %s", i, err);
    }
    flood_free(lim, NLIM);
    sl_store_free(st);
}

/* Today's promise (test_store's test_memory_bound, restated for 16-byte
 * keys): a bounded store holds more than max_bytes/48 token-bucket keys
 * of 16 bytes, whether it evicts or refuses past it. */
static void test_bound_holds_many_keys(void **state)
{
    (void)state;
    static const struct {
        size_t bound;
        unsigned shards;
    } runs[] = {{256 * 1024, 1}, {1 << 20, 0}};
    sl_params p = SL_PARAMS_INIT;
    p.limit = 10;
    p.window_ms = HOUR;
#ifdef SANITIZED
    const int nruns = 1; /* no model here: the 1 MB run finds nothing more under a sanitizer */
#else
    const int nruns = 2;
#endif
    for (int ri = 0; ri < nruns; ri++)
        for (unsigned mode = SL_FULL_EVICT; mode <= SL_FULL_DENY; mode++) {
            size_t bound = runs[ri].bound;
            sl_store *st = store_new(bound, runs[ri].shards, SL_LOCK_RECORD, mode, 9);
            uint64_t n = bound / 16, refused = 0;
            unsigned char k[16];
            memset(k, 'k', sizeof k);
            for (uint64_t i = 0; i < n; i++) {
                sl_result res;
                memcpy(k, &i, sizeof i);
                int rc = sl_decide(st, &p, k, sizeof k, 1000 + (int64_t)(i / 1024), 1, &res);
                if (rc == SL_EFULL && mode == SL_FULL_DENY)
                    refused++;
                else if (rc != 0 || res.allowed != 1 || res.remaining != 9)
                    fail_msg("key %" PRIu64 ": rc %d, allowed %" PRId64 ", remaining %" PRId64, i,
                             rc, res.allowed, res.remaining);
                check_bound(st, bound, "16-byte keys", i);
            }
            sl_store_stats ss;
            stats_of(st, &ss);
            int past = mode == SL_FULL_DENY
                           ? refused > 0 && ss.refused == refused && ss.keys == n - refused
                           : ss.evictions > 0 && ss.keys + ss.evictions == n;
            if (!past || ss.keys <= bound / 48)
                fail_msg("%s, bound %zu, %u shards: %" PRIu64
                         " keys of 16 bytes held (want > %zu); "
                         "refused %" PRIu64 ", evictions %" PRIu64,
                         mode == SL_FULL_DENY ? "SL_FULL_DENY" : "SL_FULL_EVICT", bound,
                         runs[ri].shards, ss.keys, bound / 48, ss.refused, ss.evictions);
            sl_store_free(st);
        }
}

/* ---- case 4: threads ------------------------------------------------------ */

typedef struct tctx {
    sl_store *st;
    pthread_barrier_t *start;
    int id; /* 0, 1: deciders; 2: the inserting thread */
    uint64_t seed;
    slot *slots;
    size_t n;
    unsigned char *bytes; /* the slots' keys */
    size_t bound;         /* the store's max_bytes: 0, or SL_FULL_DENY's bound */
    uint64_t held;        /* inserter, bounded: the deciders' keys, all in the store */
    uint64_t expired;     /* inserter: sum of sl_store_expire's returns */
    uint64_t refused;     /* inserter: its SL_EFULL answers */
    char err[1024];       /* the first failure, "" if none */
} tctx;

/* sl_decide of cost at t where a bounded SL_FULL_DENY store may refuse: a
 * key not in the store, or at rest at t (the store may have dropped it to
 * make room), may get SL_EFULL -- nothing changed, and the key is fresh;
 * any other answer must be the model's.  Never SL_ENOMEM: a full store
 * that dropped keys at rest and still found no room for this record (the
 * room freed lay in pages of other record sizes) answered it now and then;
 * the store now says SL_EFULL there, as for any refusal for room.
 * Returns 0, or -1 with a message in err. */
static int step_room(sl_store *st, slot *s, int64_t t, int64_t cost, uint64_t *refused,
                     char *err, size_t errlen)
{
    int may = s->present != IN || s->reset_at <= t;
    sl_result got, want;
    memset(&got, 0, sizeof got);
    int64_t T = model_effective_time(s->m, s->key, s->klen, t);
    int rc = sl_decide(st, &s->p, s->key, s->klen, t, cost, &got);
    if (rc == SL_EFULL && may) {
        (*refused)++;
        slot_fresh(s);
        return 0;
    }
    model_decide(s->m, s->key, s->klen, t, cost, &want);
    if (compare("decide", s, t, cost, rc, &got, &want, err, errlen) != 0) return -1;
    note_decided(s, T, &want);
    return 0;
}

static int check_bound_t(sl_store *st, size_t bound, char *err, size_t errlen)
{
    sl_store_stats ss;
    stats_of(st, &ss);
    if (bound == 0 || ss.bytes <= bound) return 0;
    snprintf(err, errlen, "the store holds %" PRIu64 " bytes, its bound is %zu", ss.bytes, bound);
    return -1;
}

#define DEC_KEYS 40 /* keys per decider; x5 algorithms x2 spaces = 400 slots */

/* A decider: keys "D<id>" + filler of 3..64 bytes (and a few of 100-200),
 * (bounded: each decided once before the start, with windows of a day, so
 * none comes to rest and none may be dropped; no forgets, no new keys),
 * decided, peeked, forgotten, in batches too, at its own time from 10^12
 * on -- far above the inserter's, so the inserter's expires never reach
 * them; no other thread touches them, so its models are exact. */
static void *decider(void *arg)
{
    tctx *c = arg;
    rng r = {c->seed};
    static const int64_t windows[] = {10, 100, 1000}, day[] = {DAY};
    c->n = DEC_KEYS * NFIXED * 2;
    c->slots = calloc(c->n, sizeof *c->slots);
    c->bytes = malloc((size_t)DEC_KEYS * 200);
    if (c->slots == NULL || c->bytes == NULL) {
        snprintf(c->err, sizeof c->err, "out of memory");
        pthread_barrier_wait(c->start);
        return NULL;
    }
    for (int k = 0; k < DEC_KEYS; k++) {
        unsigned char *b = c->bytes + (size_t)k * 200;
        size_t len = k < 4 ? (size_t)(100 + 25 * k) : (size_t)(3 + (k * 61) % 62);
        b[0] = 'D';
        b[1] = (unsigned char)('0' + c->id);
        b[2] = (unsigned char)k;
        for (size_t j = 3; j < len; j++) b[j] = (unsigned char)rnd(&r);
        for (int a = 0; a < NFIXED; a++)
            for (int sp = 0; sp < 2; sp++) {
                sl_params p = c->bound ? params_rand(&r, fixed_algos[a], day, 1, sp)
                                       : params_rand(&r, fixed_algos[a], windows, 3, sp);
                slot_init(&c->slots[(k * NFIXED + a) * 2 + sp], &p, b, len);
            }
    }
    int64_t t = 1000000000000LL;
    for (size_t j = 0; c->bound && j < c->n && c->err[0] == '\0'; j++)
        step(c->st, &c->slots[j], 0, t, 1, c->err, sizeof c->err);
    pthread_barrier_wait(c->start);
    /* bounded: a day's windows keep every request in the model's history */
    int ops = c->bound ? THREAD_OPS / 4 : THREAD_OPS;
    for (int i = 0; i < ops && c->err[0] == '\0'; i++) {
        t += rnd_in(&r, 0, 3);
        int op = (int)rnd_in(&r, 0, 99);
        if (op < 3 && !c->bound) { /* forget a (key, algorithm): its space-0 slot */
            size_t k = (size_t)rnd_in(&r, 0, (int64_t)(c->n / 2) - 1);
            forget(c->st, &c->slots[2 * k], c->err, sizeof c->err);
        } else if (op < 5) {
            slot *ss[8];
            int64_t ts[8], costs[8];
            for (int j = 0; j < 8; j++) {
                ss[j] = &c->slots[rnd_in(&r, 0, (int64_t)c->n - 1)];
                ts[j] = t;
                costs[j] = 1 + (ss[j]->present == IN ? rnd_in(&r, 0, 1) : 0);
            }
            step_many(c->st, ss, ts, costs, 8, c->err, sizeof c->err);
        } else {
            slot *s = &c->slots[rnd_in(&r, 0, (int64_t)c->n - 1)];
            int64_t ti = chance(&r, 20) ? t - rnd_in(&r, 0, 30) : t;
            step(c->st, s, op < 15, ti, cost_for(&r, s), c->err, sizeof c->err);
        }
        if (i % 64 == 0 && c->err[0] == '\0') check_bound_t(c->st, c->bound, c->err, sizeof c->err);
    }
    return NULL;
}

/* The inserter: CHURN_BATCHES batches of BATCH new keys ("C" + 4 bytes of
 * batch and index + filler, 5..64 bytes and one in twenty of 100..200),
 * each decided at the batch's time, then as many random ones decided or
 * peeked again, four fifths of the space-0 ones forgotten (sl_forget must
 * find each), then an expire at a time when all are at rest must drop
 * exactly the rest.  Bounded: BOUNDED_BATCHES batches of BATCH_BOUNDED
 * keys, one in two of 100..200 bytes, most holding a limit through the
 * batch, so each batch goes past the bound: refusals (step_room) make
 * their keys fresh, keys at rest may be gone (forget and expire may find
 * them or not), and after each expire the store holds the deciders' keys
 * and nothing else. */
static void *inserter(void *arg)
{
    tctx *c = arg;
    rng r = {c->seed};
    /* bounded: most hold a limit through the batch (~0.5 s), so it fills
     * the bound and is refused */
    static const int64_t windows[] = {10, 100}, longer[] = {100, 1000, 10000};
    c->n = c->bound ? BATCH_BOUNDED : BATCH;
    c->slots = calloc(c->n, sizeof *c->slots);
    c->bytes = malloc(c->n * 200);
    pthread_barrier_wait(c->start);
    if (c->slots == NULL || c->bytes == NULL) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return NULL;
    }
    for (int b = 0; b < (c->bound ? BOUNDED_BATCHES : CHURN_BATCHES) && c->err[0] == '\0'; b++) {
        int64_t tb = 1000000000000LL - 1000000000LL + (int64_t)b * 100000;
        for (size_t i = 0; i < c->n && c->err[0] == '\0'; i++) {
            unsigned char *kb = c->bytes + i * 200;
            size_t len = chance(&r, c->bound ? 50 : 5) ? (size_t)rnd_in(&r, 100, 200)
                                                       : (size_t)rnd_in(&r, 5, 64);
            kb[0] = 'C';
            kb[1] = (unsigned char)b;
            kb[2] = (unsigned char)(i >> 8); /* i < 2^16 */
            kb[3] = (unsigned char)i;
            for (size_t j = 4; j < len; j++) kb[j] = (unsigned char)rnd(&r);
            sl_params p =
                params_rand(&r, fixed_algos[rnd_in(&r, 0, NFIXED - 1)], c->bound ? longer : windows,
                            c->bound ? 3 : 2, (int)rnd_in(&r, 0, 1));
            model_free(c->slots[i].m);
            slot_init(&c->slots[i], &p, kb, len);
            int64_t t = tb + (int64_t)(i / 16), cost = rnd_in(&r, 1, cap_of(&c->slots[i]));
            if (c->bound) {
                step_room(c->st, &c->slots[i], t, cost, &c->refused, c->err,
                          sizeof c->err);
                check_bound_t(c->st, c->bound, c->err, sizeof c->err);
            } else
                step(c->st, &c->slots[i], 0, t, cost, c->err, sizeof c->err);
        }
        const int64_t half = (int64_t)c->n / 16, tend = tb + 2 * half; /* the batch's last time */
        for (size_t i = 0; i < c->n && c->err[0] == '\0'; i++) {
            slot *s = &c->slots[rnd_in(&r, 0, (int64_t)c->n - 1)];
            int64_t t = tb + half + (int64_t)(i / 16), cost = cost_for(&r, s);
            int peek = chance(&r, 20);
            if (c->bound && !peek)
                step_room(c->st, s, t, cost, &c->refused, c->err, sizeof c->err);
            else
                step(c->st, s, peek, t, cost, c->err, sizeof c->err);
        }
        uint64_t left = 0, held = 0;
        for (size_t i = 0; i < c->n && c->err[0] == '\0'; i++) {
            slot *s = &c->slots[i];
            if (c->bound && s->present == IN && s->reset_at <= tend)
                s->present = MAYBE; /* at rest: may have made room for another */
            if (s->p.space == 0 && chance(&r, 80))
                forget(c->st, s, c->err, sizeof c->err);
            else {
                left += s->present != OUT;
                held += s->present == IN;
            }
        }
        if (c->err[0] != '\0') break;
        /* a few records from the rotating position, then the rest */
        int64_t at = tb + 50000;
        uint64_t d = sl_store_expire(c->st, at, 64);
        d += sl_store_expire(c->st, at, 0);
        c->expired += d;
        if (d < held || d > left)
            snprintf(c->err, sizeof c->err,
                     "batch %d: sl_store_expire(%" PRId64 ") dropped %" PRIu64 " keys; %" PRIu64
                     " of the batch were left, all at rest (%" PRIu64 " surely in the store)",
                     b, at, d, left, held);
        sl_store_stats ss;
        stats_of(c->st, &ss);
        if (c->bound && ss.keys != c->held) /* the deciders add and remove none */
            snprintf(c->err, sizeof c->err,
                     "batch %d: after the expire the store holds %" PRIu64
                     " keys; the deciders hold %" PRIu64 " and nothing else is left",
                     b, ss.keys, c->held);
        for (size_t i = 0; i < c->n; i++) c->slots[i].present = OUT;
    }
    return NULL;
}

/* The three threads on one store: unbounded, of 2 shards (big tables), or
 * bounded by `bound` with SL_FULL_DENY, of one shard. */
static void threads_run(unsigned locking, uint64_t seed, size_t bound)
{
    sl_store *st =
        store_new(bound, bound ? 1 : 2, locking, bound ? SL_FULL_DENY : SL_FULL_EVICT, seed);
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 3), 0);
    tctx c[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].st = st;
        c[i].start = &start;
        c[i].id = i;
        c[i].seed = seed_of(seed + 0x1000 * (uint64_t)i);
        c[i].bound = bound;
        c[i].held = 2 * DEC_KEYS * NFIXED * 2;
        assert_int_equal(pthread_create(&th[i], NULL, i < 2 ? decider : inserter, &c[i]), 0);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 3; i++)
        if (c[i].err[0] != '\0')
            fail_msg("%s thread: %s", i < 2 ? "decider" : "inserting", c[i].err);

    /* afterwards, on this thread: every decider key answers as its model */
    uint64_t in = 0;
    char err[1024];
    for (int i = 0; i < 2; i++) {
        rng r = {c[i].seed ^ 0xabc};
        for (size_t j = 0; j < c[i].n; j++) {
            slot *s = &c[i].slots[j];
            if (step(st, s, 1, 1000000000000LL + 4 * THREAD_OPS, rnd_in(&r, 0, cap_of(s)), err,
                     sizeof err) != 0)
                fail_msg("decider %d after the run: %s", i, err);
            in += s->present == IN;
        }
    }
    sl_store_stats ss;
    stats_of(st, &ss);
    /* bounded: keys at rest were also dropped to make room (evicted_at_rest),
     * the bound was reached (refusals), and held */
    uint64_t rest = bound ? ss.evicted_at_rest : 0;
    if (ss.keys != in || ss.expired != c[2].expired + rest || ss.evictions != 0 ||
        ss.refused != c[2].refused || (bound != 0) != (c[2].refused > 0) ||
        (bound && ss.bytes > bound))
        fail_msg("after the run: keys %" PRIu64 " (the deciders hold %" PRIu64 "), expired %" PRIu64
                 " (the inserter's expires dropped %" PRIu64 ", at rest for room %" PRIu64
                 "), evictions %" PRIu64 ", refused %" PRIu64 " (the inserter saw %" PRIu64
                 "), bytes %" PRIu64 " (bound %zu)",
                 ss.keys, in, ss.expired, c[2].expired, ss.evicted_at_rest, ss.evictions,
                 ss.refused, c[2].refused, ss.bytes, bound);
    for (int i = 0; i < 3; i++) {
        for (size_t j = 0; j < c[i].n; j++) model_free(c[i].slots[j].m);
        free(c[i].slots);
        free(c[i].bytes);
    }
    sl_store_free(st);
}

static void test_threads_record_locks(void **state)
{
    (void)state;
    threads_run(SL_LOCK_RECORD, 0x7e11, 0);
}

static void test_threads_shard_locks(void **state)
{
    (void)state;
    threads_run(SL_LOCK_SHARD, 0x5a4d, 0);
}

/* The same under a bound of SL_FULL_DENY that the inserter's batches go
 * past: it is refused, its keys at rest make room, and the deciders' keys
 * (held for a day) are never dropped and answer exactly throughout. */
static void test_threads_bounded_deny(void **state)
{
    (void)state;
    threads_run(SL_LOCK_RECORD, 0xb0d, THREAD_BOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_churn_every_key_length),
        cmocka_unit_test(test_bound_deny_keeps_every_key),
        cmocka_unit_test(test_bound_evict_keeps_keys_at_limit),
        cmocka_unit_test(test_bound_holds_many_keys),
        cmocka_unit_test(test_snapshot_of_churned_store),
        cmocka_unit_test(test_threads_record_locks),
        cmocka_unit_test(test_threads_shard_locks),
        cmocka_unit_test(test_threads_bounded_deny),
    };
    const char *filter = getenv("SLUICE_TEST_FILTER"); /* e.g. "*bound*" */
#ifdef TSAN
    if (filter == NULL || *filter == '\0')
        filter = "test_threads_*"; /* the one-thread cases: plain and ASan */
#endif
    if (filter != NULL && *filter != '\0') cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
