/*
 * fuzz_api.c -- libFuzzer target that drives libsluice's stateful API as a
 * hostile caller would: a store (src/lib/store.c), a holds table
 * (src/lib/holds.c), sl_decide_all / sl_decide_many and a snapshot round
 * trip, through include/sluice.h only.
 *
 * Input: a header of HEAD bytes choosing the setup, then operations, each
 * an opcode byte and a few argument bytes (at most MAX_OPS a run; a missing
 * byte reads as 0, so every input runs).
 *   header[0]  store max_bytes: 0 (unbounded), 16 KB, 64 KB, 256 KB, 1 MB
 *   header[1]  shards: 0 (chosen), 1, 2, 64
 *   header[2]  bit 0 on_full (EVICT / DENY), bit 1 locking (RECORD /
 *              SHARD), bits 2-3 the holds table's max_bytes: 0, 4 KB,
 *              16 KB, 64 KB
 * Keys come from a pool of KEYS keys (lengths 1..64 and up to SL_MAX_KEY),
 * plus a key of 0 bytes and one of SL_MAX_KEY + 1 (SL_EKEY); parameters
 * from NSLOT slots an operation rewrites with values at and past their
 * limits; one clock moves forward, back, by 2^32, and sits near and at
 * +/- SL_MAX_TIME_MS.
 *
 * Checked besides no crash, leak or sanitizer report (a failed check
 * prints why and traps):
 *   - every return code is one include/sluice.h documents for that call;
 *     a bad key (with everything else valid) is SL_EKEY, a repeated key in
 *     sl_decide_all SL_EINVAL;
 *   - an answer: allowed 0 or 1, 0 <= remaining <= limit, limit = L (B
 *     for the bucket algorithms), retry_after_ms 0 when allowed, -1 or > 0
 *     when denied; sl_decide_many's count = its rc 0s, and each of its
 *     answers is what sl_decide gives (a second store, same calls);
 *     sl_decide_all says all_allowed iff every answer allows;
 *   - holds: a lease's limit is its max and remaining < max when allowed,
 *     an id >= 1 when allowed and 0 when denied (leases and reservations);
 *   - a bounded store's stats bytes <= max_bytes while more than one key
 *     lives (docs/store.md "Memory bound": a key bigger than a shard's
 *     budget may pass it alone), a holds table's bytes <= its max_bytes;
 *   - a key just forgotten (space 0) answers as a fresh key: sl_peek's
 *     remaining == limit;
 *   - a refused decision or reservation adds no key and changes none, a
 *     refused sl_decide_all charges none of its requests;
 *   - the store never holds more keys than the distinct (key, algorithm,
 *     space) it decided; sl_store_expire's count is what left the store;
 *     an empty store's latest time is INT64_MIN;
 *   - a snapshot (once a run) loads into a second store with as many keys
 *     as it had, at most as many as the first store holds.
 * The stores hash with a fixed seed, so a run does not depend on chance.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_dir.h"
#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HEAD 3
#define MAX_OPS 2000
#define KEYS 26
#define NSLOT 4

static void die(const char *why, long a, long b)
{
    fprintf(stderr, "fuzz_api: %s (%ld, %ld)\n", why, a, b);
    __builtin_trap();
}

/* FUZZ_API_TRACE set: each decision and the store's bytes after it on
 * stderr (to read a failing input). */
static int trace;

static void trace_op(const char *op, const sl_params *p, size_t kl, int64_t c, int64_t t, int rc);

/* ---- input ---- */

static const uint8_t *in_p;
static size_t in_n;

static uint8_t byte(void)
{
    if (!in_n) return 0;
    in_n--;
    return *in_p++;
}

static uint16_t u16(void)
{
    uint16_t a = byte();
    return (uint16_t)(a | (uint16_t)byte() << 8);
}

/* ---- keys ---- */

static uint8_t keybuf[KEYS + 2][SL_MAX_KEY + 1];
static size_t keylen[KEYS + 2];

static void keys_init(void)
{
    static const size_t lens[KEYS] = {1,  2,  3,  4,  5,  7,  8,  15, 16,  17,  23,  24,          31,
                                      32, 33, 40, 47, 48, 63, 64, 12, 100, 200, 257, SL_MAX_KEY - 1,
                                      SL_MAX_KEY};
    for (int i = 0; i < KEYS; i++) {
        keylen[i] = lens[i];
        for (size_t j = 0; j < lens[i]; j++) keybuf[i][j] = (uint8_t)(i * 37 + j * 11 + 1);
        keybuf[i][0] = (uint8_t)('A' + i);
    }
    keylen[KEYS] = 0;
    keylen[KEYS + 1] = SL_MAX_KEY + 1;
    memset(keybuf[KEYS + 1], 'z', SL_MAX_KEY + 1);
}

/* A key index: the pool's keys most often, the two bad ones sometimes. */
static int pick_key(void)
{
    uint8_t b = byte();
    if (b >= 250) return KEYS + (b & 1);
    return b % KEYS;
}

/* ---- parameters ---- */

static sl_params slot[NSLOT];

static const int64_t limits[] = {1, 2, 3, 5, 10, 100, 1000, SL_MAX_LIMIT, SL_MAX_LIMIT - 1,
                                 0, SL_MAX_LIMIT + 1, -1, 7, 64, 1, 4};
static const int64_t windows[] = {1, 2, 10, 1000, 60000, SL_MAX_WINDOW_MS, SL_MAX_WINDOW_MS - 1,
                                  0, SL_MAX_WINDOW_MS + 1, 7, 65535, 3, 1000, 100, 5000, 86400000};

static void slot_set(sl_params *p)
{
    uint8_t a = byte(), l = byte(), w = byte(), e = byte();
    memset(p, 0, sizeof *p);
    p->algo = (sl_algo)(a % 8 == 7 ? (a & 0x80 ? 7 : a % 7) : a % 8); /* 7: rarely invalid */
    p->limit = limits[l % 16];
    p->window_ms = windows[w % 16];
    switch (e & 7) { /* burst */
    case 0: case 1: case 2: p->burst = 0; break;
    case 3: p->burst = 1; break;
    case 4: p->burst = p->limit + 1; break;
    case 5: p->burst = SL_MAX_LIMIT; break;
    case 6: p->burst = (e >> 5) ? p->limit : -1; break;
    default: p->burst = SL_MAX_LIMIT + 1; break;
    }
    if (p->algo != SL_TOKEN_BUCKET && p->algo != SL_GCRA && p->algo != SL_LEAKY_BUCKET &&
        (e & 7) != 7)
        p->burst = 0;
    switch ((e >> 3) & 3) { /* precision */
    case 0: p->precision = 0; break;
    case 1: p->precision = (e & 0x20) ? 1 : 2; break;
    case 2: p->precision = (e & 0x20) ? SL_MAX_PRECISION : 10; break;
    default: p->precision = (e & 0x20) ? SL_MAX_PRECISION + 1 : p->window_ms; break;
    }
    if (p->algo != SL_SLIDING_BUCKETS && !(e & 0x40)) p->precision = 0;
    p->log_rejected = (a & 0x40) && (p->algo == SL_SLIDING_LOG || (a & 0x20));
    p->space = (e & 0x80) ? 1 : 0;
}

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

/* ---- time and cost ---- */

static int64_t now;

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

static void time_move(void)
{
    uint8_t b = byte();
    int64_t d = byte();
    switch (b % 12) {
    case 0: case 1: case 2: now = sat_add(now, d); break;
    case 3: now = sat_add(now, d * 1000); break;
    case 4: now = sat_add(now, -d); break;
    case 5: now = sat_add(now, (int64_t)1 << 32); break;
    case 6: now = sat_add(now, -((int64_t)1 << 32)); break;
    case 7: now = SL_MAX_TIME_MS - 1 - d; break;
    case 8: now = -SL_MAX_TIME_MS + 1 + d; break;
    case 9: now = (b & 0x80) ? SL_MAX_TIME_MS : -SL_MAX_TIME_MS; break; /* outside */
    case 10: now = d * 60000; break;
    default: now = sat_add(now, SL_MAX_WINDOW_MS); break;
    }
}

static int time_ok(int64_t t)
{
    return t > -SL_MAX_TIME_MS && t < SL_MAX_TIME_MS;
}

static int64_t pick_cost(const sl_params *p)
{
    uint8_t b = byte();
    switch (b % 12) {
    case 0: case 1: case 2: case 3: return 1;
    case 4: return 0;
    case 5: return 2 + (b >> 4);
    case 6: return p->limit;
    case 7: return p->limit + 1;
    case 8: return SL_MAX_LIMIT;
    case 9: return SL_MAX_LIMIT + 1;
    case 10: return -1;
    default: return p->burst ? p->burst : 3;
    }
}

static int cost_ok(int64_t c)
{
    return c >= 0 && c <= SL_MAX_LIMIT;
}

/* ---- checks ---- */

/* sl_decide's documented codes. */
static int decide_code(int rc)
{
    switch (rc) {
    case 0: case SL_ENOMEM: case SL_EALGO: case SL_ELIMIT: case SL_EWINDOW: case SL_EBURST:
    case SL_ECOST: case SL_EPRECISION: case SL_EKEY: case SL_ETIME: case SL_ELOGREJECTED:
    case SL_EINVAL: case SL_EFULL: case SL_ETOOBIG: return 1;
    default: return 0;
    }
}

static unsigned on_full;

/* rc of a decision on (p, key k, cost c, time t): a documented code; a bad
 * key alone is SL_EKEY; SL_EFULL only from an SL_FULL_DENY store (or
 * a holds table without room, for sl_reserve). */
static void check_rc(const char *what, int rc, const sl_params *p, int k, int64_t c, int64_t t)
{
    int holds = strcmp(what, "sl_reserve code") == 0; /* SL_EFULL: the table's room */
    if (!decide_code(rc)) die(what, rc, 0);
    int others_ok = sl_params_check(p) == 0 && cost_ok(c) && time_ok(t);
    if (k >= KEYS && others_ok && rc != SL_EKEY) die("a bad key alone is not SL_EKEY", rc, k);
    if (k >= KEYS && rc == 0) die("a bad key decided", rc, k);
    if (!others_ok && rc == 0) die("bad parameters, cost or time decided", rc, k);
    if (rc == SL_EFULL && on_full != SL_FULL_DENY && !holds) die("SL_EFULL from an evicting store", rc, 0);
}

static void check_result(const char *what, const sl_params *p, const sl_result *r)
{
    int64_t lim = is_bucket(p->algo) && p->burst ? p->burst : p->limit;
    if (r->allowed != 0 && r->allowed != 1) die(what, r->allowed, 0);
    if (r->limit != lim) die("result limit is not L (B)", r->limit, lim);
    if (r->remaining < 0 || r->remaining > r->limit) die("remaining out of 0..limit", r->remaining, r->limit);
    if (r->allowed && r->retry_after_ms != 0) die("allowed with a retry time", r->retry_after_ms, 0);
    if (!r->allowed && r->retry_after_ms != -1 && r->retry_after_ms <= 0)
        die("denied without a retry time", r->retry_after_ms, 0);
    if (r->reset_after_ms < 0) die("negative reset_after_ms", r->reset_after_ms, 0);
    if (r->delay_ms < 0 || (r->delay_ms && p->algo != SL_LEAKY_BUCKET))
        die("delay_ms", r->delay_ms, p->algo);
}

/* ---- state of a run ---- */

static sl_store *st, *st2, *st3; /* st2, st3: twins seeing sl_decide_many's batches alone */
static sl_holds *hd;
static sl_store_opts sopts;
static size_t hmax;
static uint8_t touched[KEYS][SL_ALGO_COUNT][2];
static uint64_t ntouched;
static int saved;

static void touch(int k, const sl_params *p)
{
    if (k >= KEYS || (unsigned)p->algo >= SL_ALGO_COUNT || (unsigned)p->space > 1) die("touch", k, p->algo);
    if (!touched[k][p->algo][p->space]) {
        touched[k][p->algo][p->space] = 1;
        ntouched++;
    }
}

#define NIDS 16
static uint64_t leases[NIDS];
static struct {
    uint64_t id;
    int k;
    sl_params p;
} resv[NIDS];
static unsigned nlease, nresv;

/* What a bounded store may hold (docs/store.md "Memory bound", store.c's
 * first comment): each shard holds at most its share of max_bytes, but a
 * record that fits nowhere is placed anyway when nothing else lives in its
 * shard.  With 1 or 2 shards, or as many as the store chooses (each >= 16
 * KB here), every record the store accepts fits its shard (SL_ETOOBIG
 * refuses one over 1/64 of the bound): max_bytes, exactly.  With 64 shards
 * of 256 B to 16 KB each, any shard may hold one record alone beyond its
 * share: ALONE bytes each on top (measured: a lone record with a 512-byte
 * key, or the largest state the share allows, costs its shard at most
 * ~1.1 KB more than the share, its table and page counted). */
#define ALONE (4096 + SL_MAX_KEY)

static uint64_t store_bound(void)
{
    return sopts.max_bytes + (sopts.shards == 64 ? 64u * ALONE : 0);
}

static void check_store(void)
{
    sl_store_stats ss;
    sl_store_stats_get(st, &ss);
    if (ss.keys > ntouched) die("more keys than were decided", (long)ss.keys, (long)ntouched);
    if (ss.max_bytes != sopts.max_bytes) die("stats max_bytes", (long)ss.max_bytes, (long)sopts.max_bytes);
    if (sopts.max_bytes && ss.keys > 1 && ss.bytes > store_bound())
        die("a bounded store holds more than max_bytes", (long)ss.bytes, (long)store_bound());
    if (ss.refused && on_full != SL_FULL_DENY) die("refused in an evicting store", (long)ss.refused, 0);
    if (ss.evictions && on_full != SL_FULL_EVICT) die("evictions in a denying store", (long)ss.evictions, 0);
    if (ss.evicted_at_rest > ss.expired || ss.evicted_at_limit > ss.evictions) die("stats parts", 0, 0);
    sl_holds_stats hs;
    sl_holds_stats_get(hd, &hs);
    if (hs.max_bytes != hmax) die("holds stats max_bytes", (long)hs.max_bytes, (long)hmax);
    if (hmax && hs.bytes > hmax) die("a bounded holds table holds more than max_bytes", (long)hs.bytes, (long)hmax);
    if (hs.leases + hs.reservations < hs.groups && hs.groups) die("holds groups without entries", (long)hs.groups, 0);
}

static void trace_op(const char *op, const sl_params *p, size_t kl, int64_t c, int64_t t, int rc)
{
    if (!trace) return;
    sl_store_stats ss;
    sl_store_stats_get(st, &ss);
    fprintf(stderr, "%s algo %d L %lld W %lld B %lld P %lld lr %d sp %d keylen %zu cost %lld t %lld -> %d; keys %llu bytes %llu\n",
            op, p->algo, (long long)p->limit, (long long)p->window_ms, (long long)p->burst,
            (long long)p->precision, p->log_rejected, p->space, kl, (long long)c, (long long)t, rc,
            (unsigned long long)ss.keys, (unsigned long long)ss.bytes);
}

/* ---- operations ---- */

static uint64_t keys_now(void)
{
    sl_store_stats ss;
    sl_store_stats_get(st, &ss);
    return ss.keys;
}

/* sl_decide, after an sl_peek of the same request: the decision's answer
 * is the one sl_peek gave, and sl_peek added no key; a refused decision
 * added none either. */
static void op_decide(int peek_only)
{
    sl_params *p = &slot[byte() % NSLOT];
    int k = pick_key();
    int64_t c = pick_cost(p), t = now;
    sl_result r, pr;
    uint64_t k0 = keys_now();
    int prc = sl_peek(st, p, keybuf[k], keylen[k], t, c, &pr);
    trace_op("peek", p, keylen[k], c, t, prc);
    check_rc("sl_peek code", prc, p, k, c, t);
    if (prc == SL_EFULL) die("sl_peek said SL_EFULL", prc, 0);
    if (prc == 0) check_result("sl_peek result", p, &pr);
    if (keys_now() > k0) die("sl_peek added a key", (long)keys_now(), (long)k0);
    if (peek_only) return;
    int rc = sl_decide(st, p, keybuf[k], keylen[k], t, c, &r);
    trace_op("decide", p, keylen[k], c, t, rc);
    check_rc("sl_decide code", rc, p, k, c, t);
    if (rc != 0) {
        if (keys_now() > k0) die("a refused decision added a key", rc, (long)k0);
        return;
    }
    check_result("sl_decide result", p, &r);
    touch(k, p);
    if (prc == 0 && memcmp(&r, &pr, sizeof r) != 0)
        die("sl_decide's answer is not sl_peek's", (long)r.remaining, (long)pr.remaining);
}

static void op_decide_all(void)
{
    sl_request rq[SL_MAX_BATCH + 1];
    sl_result out[SL_MAX_BATCH + 1];
    uint8_t b = byte();
    size_t n = (b & 0x80) ? (b % 19) : 1 + b % SL_MAX_BATCH; /* 0, 17, 18: SL_EINVAL */
    int ks[SL_MAX_BATCH + 1], dup = 0, bad = 0, badkey = 0;
    for (size_t i = 0; i < n && i <= SL_MAX_BATCH; i++) {
        const sl_params *p = &slot[byte() % NSLOT];
        ks[i] = pick_key();
        rq[i].params = p;
        rq[i].key = keybuf[ks[i]];
        rq[i].keylen = keylen[ks[i]];
        rq[i].cost = pick_cost(p);
        if (sl_params_check(p) || !cost_ok(rq[i].cost)) bad = 1;
        if (ks[i] >= KEYS) badkey = 1;
        for (size_t j = 0; j < i; j++)
            if (ks[j] == ks[i] && ks[i] < KEYS && rq[j].params->algo == p->algo &&
                rq[j].params->space == p->space)
                dup = 1;
    }
    /* Valid distinct requests: each one's sl_peek before (what it would
     * get alone) is its answer in the batch, and after a denied batch the
     * same again (nothing charged, no clock moved).  Unbounded stores only:
     * in a bounded one a batch's new key may push out another's. */
    sl_result before[SL_MAX_BATCH + 1], after;
    int cmp = sopts.max_bytes == 0 && n >= 1 && n <= SL_MAX_BATCH && !dup && !bad && !badkey &&
              time_ok(now);
    for (size_t i = 0; cmp && i < n; i++)
        if (sl_peek(st, rq[i].params, rq[i].key, rq[i].keylen, now, rq[i].cost, &before[i]) != 0)
            die("sl_peek of a valid request", (long)i, 0);
    int all = -1;
    int rc = sl_decide_all(st, rq, n, now, out, &all);
    for (size_t i = 0; trace && i < n && i <= SL_MAX_BATCH; i++)
        trace_op("decide_all", rq[i].params, rq[i].keylen, rq[i].cost, now, rc);
    if (!decide_code(rc)) die("sl_decide_all code", rc, 0);
    if (rc == SL_EFULL && on_full != SL_FULL_DENY) die("sl_decide_all SL_EFULL evicting", rc, 0);
    if (n == 0 || n > SL_MAX_BATCH) {
        if (rc != SL_EINVAL) die("sl_decide_all of a bad n", rc, (long)n);
        return;
    }
    if (dup && !bad && !badkey && time_ok(now) && rc != SL_EINVAL && rc != SL_ETOOBIG)
        die("sl_decide_all with a repeated key is not SL_EINVAL", rc, 0);
    if (rc == 0 && (dup || bad || badkey || !time_ok(now)))
        die("sl_decide_all accepted a bad batch", dup, bad);
    if (badkey && !dup && !bad && time_ok(now) && rc != SL_EKEY && rc != SL_ETOOBIG)
        die("sl_decide_all with a bad key is not SL_EKEY", rc, 0);
    if (rc != 0) return;
    int every = 1;
    for (size_t i = 0; i < n; i++) {
        check_result("sl_decide_all result", rq[i].params, &out[i]);
        every &= (int)out[i].allowed;
        touch(ks[i], rq[i].params);
    }
    if (all != every) die("all_allowed is not every answer's", all, every);
    for (size_t i = 0; cmp && i < n; i++) {
        if (memcmp(&out[i], &before[i], sizeof out[i]) != 0)
            die("an answer of sl_decide_all is not the one its request gets alone", (long)i,
                (long)out[i].remaining);
        if (all) continue;
        if (sl_peek(st, rq[i].params, rq[i].key, rq[i].keylen, now, rq[i].cost, &after) != 0 ||
            memcmp(&after, &before[i], sizeof after) != 0)
            die("a denied sl_decide_all changed a key", (long)i, (long)after.remaining);
    }
}

static void op_decide_many(void)
{
    sl_call calls[32];
    sl_result out[32];
    int rc[32], ks[32];
    size_t n = byte() % 33;
    const sl_params *ps[32];
    for (size_t i = 0; i < n; i++) {
        ps[i] = &slot[byte() % NSLOT];
        ks[i] = pick_key();
        calls[i].params = ps[i];
        calls[i].key = keybuf[ks[i]];
        calls[i].keylen = keylen[ks[i]];
        calls[i].cost = pick_cost(ps[i]);
        uint8_t tb = byte();
        calls[i].now_ms = tb < 200 ? sat_add(now, tb % 8) : tb < 250 ? sat_add(now, -(int64_t)(tb % 8)) : SL_MAX_TIME_MS;
    }
    size_t good = sl_decide_many(st, calls, n, out, rc);
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        check_rc("sl_decide_many code", rc[i], ps[i], ks[i], calls[i].cost, calls[i].now_ms);
        if (rc[i] != 0) continue;
        count++;
        check_result("sl_decide_many result", ps[i], &out[i]);
        touch(ks[i], ps[i]);
    }
    if (good != count) die("sl_decide_many's count", (long)good, (long)count);
    /* Twins that see these batches alone: one through sl_decide_many,
     * the other call by call through sl_decide; they agree. */
    int rc2[32], rc3;
    sl_result out2[32], r3;
    if (st2 == NULL) { /* made at the first batch: most inputs need none */
        sl_store_opts o2 = sopts;
        int e = 0;
        o2.max_bytes = 0;
        st2 = sl_store_new(&o2, &e);
        st3 = sl_store_new(&o2, &e);
        if (st2 == NULL || st3 == NULL) die("sl_store_new (twin)", e, 0);
    }
    size_t good2 = sl_decide_many(st2, calls, n, out2, rc2);
    size_t count2 = 0;
    for (size_t i = 0; i < n; i++) {
        rc3 = sl_decide(st3, ps[i], calls[i].key, calls[i].keylen, calls[i].now_ms, calls[i].cost, &r3);
        if (rc3 != rc2[i]) die("sl_decide_many's rc is not sl_decide's", rc2[i], rc3);
        if (rc3 != 0) continue;
        count2++;
        if (memcmp(&r3, &out2[i], sizeof r3) != 0)
            die("sl_decide_many's answer is not sl_decide's", (long)i, (long)r3.remaining);
    }
    if (good2 != count2) die("sl_decide_many's count (twin)", (long)good2, (long)count2);
}

static void op_forget(void)
{
    sl_params *p = &slot[byte() % NSLOT];
    int k = pick_key();
    int rc = sl_forget(st, p->algo, keybuf[k], keylen[k]);
    if (k >= KEYS) {
        if (rc != SL_EKEY) die("sl_forget of a bad key is not SL_EKEY", rc, k);
        return;
    }
    if ((unsigned)p->algo >= SL_ALGO_COUNT) {
        if (rc != SL_EALGO && rc != SL_EINVAL && rc != 0) die("sl_forget of a bad algorithm", rc, 0);
        return;
    }
    if (rc != 0 && rc != 1) die("sl_forget code", rc, 0);
    if (rc == 1 && !touched[k][p->algo][0]) die("sl_forget found a key never decided", k, p->algo);
    if (p->space != 0 || sl_params_check(p) != 0 || !time_ok(now)) return;
    sl_result r;
    int pr = sl_peek(st, p, keybuf[k], keylen[k], now, 0, &r); /* cost 0: remaining untouched */
    check_rc("sl_peek code", pr, p, k, 0, now);
    if (pr == 0 && r.remaining != r.limit)
        die("a key just forgotten does not answer as fresh", (long)r.remaining, (long)r.limit);
}

static void op_expire(void)
{
    uint8_t b = byte();
    uint64_t maxr = (b & 1) ? 0 : b >> 1;
    sl_store_stats a, z;
    sl_store_stats_get(st, &a);
    uint64_t n = sl_store_expire(st, now, maxr);
    sl_store_stats_get(st, &z);
    if (n > a.keys || z.keys != a.keys - n) die("sl_store_expire's count", (long)n, (long)(a.keys - z.keys));
    if (maxr && n > maxr) die("sl_store_expire dropped more than max_records", (long)n, (long)maxr);
    if (z.expired != a.expired + n) die("stats expired", (long)z.expired, (long)(a.expired + n));
}

static void op_latest(void)
{
    sl_store_stats a;
    int64_t t = sl_store_latest_time(st);
    sl_store_stats_get(st, &a);
    if (a.keys == 0 && t != INT64_MIN) die("an empty store's latest time", (long)t, 0);
    if (a.keys && !time_ok(t)) die("latest time out of range", (long)t, 0);
}

static void op_charge(void)
{
    sl_params *p = &slot[byte() % NSLOT];
    int k = pick_key();
    uint8_t b = byte();
    int64_t d = (b & 0x80) ? -(int64_t)(b & 0x7f) : (b & 0x40) ? SL_MAX_LIMIT : (int64_t)b;
    int64_t at = sat_add(now, -(int64_t)byte());
    sl_result r;
    int rc = sl_charge(st, p, keybuf[k], keylen[k], now, at, d, &r);
    if (!decide_code(rc)) die("sl_charge code", rc, 0);
    if (rc == 0 && p->algo == SL_SLIDING_LOG) die("sl_charge of a sliding-log", 0, 0);
    if (rc == 0 && k >= KEYS) die("sl_charge of a bad key", k, 0);
    if (rc == 0) {
        check_result("sl_charge result", p, &r);
        touch(k, p);
    }
}

static void op_acquire(void)
{
    static const int64_t maxes[] = {1, 2, 3, SL_MAX_CONCURRENCY, 0, SL_MAX_CONCURRENCY + 1, 5, 1};
    static const int64_t ttls[] = {1, 1000, SL_MAX_LEASE_TTL_MS, 0, SL_MAX_LEASE_TTL_MS + 1, 10, 60000, 2};
    int k = pick_key();
    uint8_t b = byte();
    int64_t mx = maxes[b & 7], ttl = ttls[(b >> 3) & 7];
    sl_result r;
    uint64_t id = 77;
    int rc = sl_acquire(hd, keybuf[k], keylen[k], mx, ttl, now, &r, &id);
    switch (rc) {
    case 0: case SL_EKEY: case SL_ELIMIT: case SL_EWINDOW: case SL_ETIME: case SL_EFULL: case SL_ENOMEM: break;
    default: die("sl_acquire code", rc, 0);
    }
    int ok = mx >= 1 && mx <= SL_MAX_CONCURRENCY && ttl >= 1 && ttl <= SL_MAX_LEASE_TTL_MS && time_ok(now);
    if (k >= KEYS && ok && rc != SL_EKEY) die("sl_acquire of a bad key", rc, 0);
    if (rc == 0 && (!ok || k >= KEYS)) die("sl_acquire accepted bad arguments", (long)mx, (long)ttl);
    if (rc != 0) return;
    if (r.allowed != 0 && r.allowed != 1) die("lease allowed", (long)r.allowed, 0);
    if (r.limit != mx) die("lease limit is not max", (long)r.limit, (long)mx);
    if (r.remaining < 0 || r.remaining > mx || (r.allowed && r.remaining >= mx))
        die("lease remaining", (long)r.remaining, (long)mx);
    if (r.allowed ? (id == 0 || r.retry_after_ms != 0) : (id != 0 || r.retry_after_ms <= 0))
        die("lease id / retry", (long)id, (long)r.retry_after_ms);
    if (r.delay_ms != 0 || r.reset_after_ms < 0 || r.reset_after_ms > SL_MAX_LEASE_TTL_MS)
        die("lease delay / reset", (long)r.delay_ms, (long)r.reset_after_ms);
    if (r.allowed) leases[nlease++ % NIDS] = id;
}

static void op_release(void)
{
    int k = pick_key();
    uint8_t b = byte();
    uint64_t id = (b & 0x80) ? (uint64_t)b : leases[b % NIDS];
    int rc = sl_release(hd, keybuf[k], keylen[k], id, now);
    if (rc != 0 && rc != 1 && rc != SL_EKEY && rc != SL_ETIME) die("sl_release code", rc, 0);
    if (k >= KEYS && time_ok(now) && rc != SL_EKEY) die("sl_release of a bad key", rc, 0);
    if (id == 0 && rc == 1) die("sl_release of id 0", rc, 0);
}

static void op_reserve(void)
{
    sl_params *p = &slot[byte() % NSLOT];
    int k = pick_key();
    int64_t c = pick_cost(p);
    sl_result r, b, a;
    uint64_t id = 77, k0 = keys_now();
    int pb = sl_peek(st, p, keybuf[k], keylen[k], now, 1, &b);
    int rc = sl_reserve(hd, st, p, keybuf[k], keylen[k], now, c, &r, &id);
    check_rc("sl_reserve code", rc, p, k, c, now);
    if (rc == 0 && p->algo == SL_SLIDING_LOG) die("sl_reserve of a sliding-log", 0, 0);
    if (rc != 0) { /* nothing charged, no key added */
        if (keys_now() > k0) die("a refused reservation added a key", rc, (long)k0);
        if (pb == 0 && (sl_peek(st, p, keybuf[k], keylen[k], now, 1, &a) != 0 || memcmp(&a, &b, sizeof a) != 0))
            die("a refused reservation changed its key", rc, (long)a.remaining);
        return;
    }
    check_result("sl_reserve result", p, &r);
    touch(k, p);
    if (r.allowed ? id == 0 : id != 0) die("reservation id", (long)id, (long)r.allowed);
    if (r.allowed) {
        unsigned i = nresv++ % NIDS;
        resv[i].id = id, resv[i].k = k, resv[i].p = *p;
    }
}

static void op_settle(void)
{
    uint8_t b = byte();
    unsigned i = b % NIDS;
    int k = (b & 0x80) ? pick_key() : resv[i].k;
    uint64_t id = (b & 0x40) ? (uint64_t)byte() : resv[i].id;
    uint8_t a = byte();
    int64_t actual = a < 200 ? a % 8 : a < 250 ? SL_MAX_LIMIT : -1;
    if (a == 255) actual = SL_MAX_LIMIT + 1;
    sl_result r;
    int rc = sl_settle(hd, st, keybuf[k], keylen[k], id, actual, now, &r);
    if (rc != 1 && !decide_code(rc)) die("sl_settle code", rc, 0);
    if (rc == 1 && (!cost_ok(actual) || k >= KEYS || id == 0)) die("sl_settle accepted bad arguments", (long)actual, k);
    if (rc == 1) {
        if (k == resv[i].k && id == resv[i].id && resv[i].id) {
            check_result("sl_settle result", &resv[i].p, &r);
            touch(k, &resv[i].p);
            resv[i].id = 0;
        } else {
            for (int a2 = 0; a2 < SL_ALGO_COUNT; a2++) /* another reservation: its parameters unknown here */
                for (int sp = 0; sp < 2; sp++) {
                    sl_params q = slot[0];
                    q.algo = (sl_algo)a2, q.space = sp;
                    touch(k, &q);
                }
        }
    }
}

static void op_holds_expire(void)
{
    uint8_t b = byte();
    sl_holds_stats a, z;
    sl_holds_stats_get(hd, &a);
    uint64_t n = sl_holds_expire(hd, now, b % 4);
    sl_holds_stats_get(hd, &z);
    if (n > a.leases + a.reservations) die("sl_holds_expire's count", (long)n, 0);
    if (z.leases + z.reservations + n != a.leases + a.reservations)
        die("sl_holds_expire's count is not what left", (long)n, 0);
}

static void op_snapshot(void)
{
    if (saved++) return;
    char err[512];
    if (sl_store_save(st, "fuzz-api.snap", err, sizeof err) != 0) die(err, 0, 0);
    sl_store_stats a;
    sl_store_stats_get(st, &a);
    int e = 0;
    sl_store *s3 = sl_store_new(&sopts, &e);
    if (s3 == NULL) die("sl_store_new for a snapshot", e, 0);
    uint64_t n = 0;
    int rc = sl_store_load(s3, "fuzz-api.snap", &n, err, sizeof err);
    if (rc != 0) die(err, rc, 0);
    sl_store_stats b;
    sl_store_stats_get(s3, &b);
    if (n != a.keys) die("a snapshot's record count is not the store's keys", (long)n, (long)a.keys);
    if (b.keys > a.keys) die("a loaded snapshot holds more keys than were saved", (long)b.keys, (long)a.keys);
    if (b.max_bytes && b.keys > 1 && b.bytes > store_bound()) die("loaded store over max_bytes", (long)b.bytes, 0);
    if (b.max_bytes == 0 && b.keys != a.keys) die("an unbounded store lost keys loading", (long)b.keys, (long)a.keys);
    sl_store_free(s3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        init = 1;
        keys_init();
        trace = getenv("FUZZ_API_TRACE") != NULL;
        fuzz_dir_enter("api", "fuzz-api.snap", NULL);
    }
    in_p = data, in_n = size;
    static const size_t smax[] = {0, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
    static const unsigned sshards[] = {0, 1, 2, 64};
    static const size_t hmaxes[] = {0, 4 << 10, 16 << 10, 64 << 10};
    uint8_t h0 = byte(), h1 = byte(), h2 = byte();
    memset(&sopts, 0, sizeof sopts);
    sopts.max_bytes = smax[h0 % 5];
    sopts.shards = sshards[h1 % 4];
    sopts.on_full = on_full = (h2 & 1) ? SL_FULL_DENY : SL_FULL_EVICT;
    sopts.locking = (h2 & 2) ? SL_LOCK_SHARD : SL_LOCK_RECORD;
    sopts.fixed_seed = 1;
    memcpy(sopts.seed, "fuzz_api.c, sl!!", 16);
    hmax = hmaxes[(h2 >> 2) & 3];
    int err = 0;
    st = sl_store_new(&sopts, &err);
    if (st == NULL) die("sl_store_new", err, (long)sopts.max_bytes);
    st2 = st3 = NULL;
    sl_holds_opts ho = {hmax};
    hd = sl_holds_new(&ho, &err);
    if (hd == NULL) die("sl_holds_new", err, (long)hmax);
    memset(touched, 0, sizeof touched);
    ntouched = 0, saved = 0, nlease = nresv = 0;
    memset(leases, 0, sizeof leases);
    memset(resv, 0, sizeof resv);
    now = 1000;
    for (int i = 0; i < NSLOT; i++) {
        memset(&slot[i], 0, sizeof slot[i]);
        slot[i].algo = (sl_algo)(i * 2 % SL_ALGO_COUNT);
        slot[i].limit = 3 + i;
        slot[i].window_ms = 1000;
    }

    for (int ops = 0; ops < MAX_OPS && in_n; ops++) {
        uint8_t op = byte();
        switch (op % 20) {
        case 0: case 1: case 2: case 3: op_decide(0); break;
        case 4: op_decide(1); break;
        case 5: slot_set(&slot[byte() % NSLOT]); break;
        case 6: case 7: time_move(); break;
        case 8: op_decide_all(); break;
        case 9: op_decide_many(); break;
        case 10: op_forget(); break;
        case 11: op_expire(); break;
        case 12: op_latest(); break;
        case 13: op_charge(); break;
        case 14: op_acquire(); break;
        case 15: op_release(); break;
        case 16: op_reserve(); break;
        case 17: op_settle(); break;
        case 18: op_holds_expire(); break;
        default: if (op >= 240) op_snapshot(); else check_store(); break;
        }
        if (trace) {
            sl_store_stats ss;
            sl_store_stats_get(st, &ss);
            fprintf(stderr, "op %d (%d): now %lld keys %llu bytes %llu\n", ops, op % 20, (long long)now,
                    (unsigned long long)ss.keys, (unsigned long long)ss.bytes);
        }
        if ((op & 7) == 0) check_store();
    }
    check_store();
    sl_holds_free(hd);
    sl_store_free(st);
    if (st2 != NULL) sl_store_free(st2);
    if (st3 != NULL) sl_store_free(st3);
    (void)u16;
    return 0;
}
