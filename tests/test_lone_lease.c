/*
 * test_lone_lease.c -- the lone records' leases (src/lib/lone.c, "leases":
 * the module's RL.LEASE and RL.LEASERETURN) against a small model of a
 * leased bucket written from docs/fleet.md ("Leases": the protocol and the
 * proof sketch), not from lone.c:
 *
 *   - the bucket's tokens T (in 1/W of a request) and its units out by
 *     epoch of 250 ms, O0 (this epoch) and O1 (the one before); a lease
 *     of epoch e is settled from the start of epoch e + 2;
 *   - at each call, after the epochs move to its time, the refill adds
 *     L/W a ms and stops at B - O (never taking tokens away);
 *   - a take moves x units from the bucket to a node (O0 += x); a return
 *     of `back` of a lease of `taken` takes the whole lease out of O and
 *     puts back at most `back`, no further than B - O.
 *
 * Three simulated nodes take leases, spend them at random times before
 * their deadlines, hand them back on time, late or never, beside
 * per-request decisions and peeks; every answer (six fields, extra, ttl,
 * tag, units put back, the lease's end) must be the model's, and every
 * admission -- per request or spent from a lease -- one a strict bucket
 * fed only the admissions allows (the proof's S: never more than a strict
 * bucket).  The record is dumped and loaded again now and then (its tail
 * persists), in its owner's room and in an allocation of its own (the
 * tail's room grows).  Then: a peek and a denied batch leave a leased
 * record's bytes as they were; the windows' leases; the refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lone.h"
#include "sluice.h"

#define EPOCH 250

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static int64_t rnd(int64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int64_t)(rng % (uint64_t)n);
}

static int64_t fdiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- the model (docs/fleet.md) ------------------------------------------ */

typedef struct model {
    int64_t L, W, B;
    int64_t tok, clock; /* tokens in 1/W of a request; the key's time */
    int64_t e, o0, o1;  /* units out: leased in epoch e, in e - 1 */
} model;

static void m_at(model *m, int64_t now)
{
    int64_t t = now > m->clock ? now : m->clock, ce = fdiv(t, EPOCH);
    if (ce == m->e + 1) {
        m->o1 = m->o0;
        m->o0 = 0;
    } else if (ce != m->e) {
        m->o0 = m->o1 = 0;
    }
    m->e = ce;
    int64_t cap = (m->B - m->o0 - m->o1) * m->W; /* the refill stops at B - O */
    int64_t full = m->tok + (t - m->clock) * m->L;
    if (full > cap) full = cap > m->tok ? cap : m->tok;
    m->tok = full;
    m->clock = t;
}

static sl_result m_answer(const model *m, int allowed, int64_t retry)
{
    sl_result r = {allowed, m->B, m->tok / m->W, retry, cdiv(m->B * m->W - m->tok, m->L), 0};
    return r;
}

static sl_result m_decide(model *m, int64_t now, int64_t cost, int commit)
{
    model c = *m;
    m_at(&c, now);
    int ok = c.tok >= cost * c.W;
    int64_t retry = cost > c.B ? -1 : ok ? 0 : cdiv(cost * c.W - c.tok, c.L);
    if (ok) c.tok -= cost * c.W;
    if (commit) *m = c;
    return m_answer(&c, ok, retry);
}

/* After an allowed, committed decision at the model's clock. */
static void m_take(model *m, int64_t x, sl_result *r, sl__lone_lease *lz)
{
    if (x > 0) {
        m->tok -= x * m->W;
        m->o0 += x;
        *r = m_answer(m, 1, 0);
    }
    lz->extra = x;
    lz->tag = m->e;
    lz->ttl_ms = (m->e + 2) * EPOCH - m->clock;
}

static int64_t m_return(model *m, int64_t now, int64_t back, int64_t taken, int64_t tag)
{
    m_at(m, now);
    int64_t *ok = tag == m->e ? &m->o0 : tag == m->e - 1 ? &m->o1 : NULL;
    if (ok == NULL) return 0;
    int64_t tk = taken < *ok ? taken : *ok, b = back < tk ? back : tk;
    *ok -= tk;
    int64_t cap = (m->B - m->o0 - m->o1) * m->W, t2 = m->tok + b * m->W;
    if (t2 > cap) t2 = cap > m->tok ? cap : m->tok;
    int64_t put = (t2 - m->tok) / m->W;
    m->tok = t2;
    return put;
}

static int64_t m_end(const model *m)
{
    return m->o0 ? (m->e + 2) * EPOCH : m->o1 ? (m->e + 1) * EPOCH : INT64_MIN;
}

/* ---- the strict bucket S, fed the admissions ---------------------------- */

typedef struct strict {
    int64_t tok, clock;
} strict;

static void s_admit(strict *s, const model *m, int64_t t, int64_t cost, int step)
{
    if (t < s->clock) t = s->clock;
    s->tok += (t - s->clock) * m->L;
    if (s->tok > m->B * m->W) s->tok = m->B * m->W;
    s->clock = t;
    if (s->tok < cost * m->W)
        fail_msg("step %d: admitted %lld at %lld, a strict bucket has %lld/%lld", step,
                 (long long)cost, (long long)t, (long long)s->tok, (long long)m->W);
    s->tok -= cost * m->W;
}

/* ---- the trace ---------------------------------------------------------- */

static void same(const sl_result *want, const sl_result *got, int step, const char *what)
{
    if (want->allowed != got->allowed || want->limit != got->limit ||
        want->remaining != got->remaining || want->retry_after_ms != got->retry_after_ms ||
        want->reset_after_ms != got->reset_after_ms || want->delay_ms != got->delay_ms)
        fail_msg("step %d (%s): model %d %lld %lld %lld %lld %lld, lone %d %lld %lld %lld %lld "
                 "%lld",
                 step, what, (int)want->allowed, (long long)want->limit, (long long)want->remaining,
                 (long long)want->retry_after_ms, (long long)want->reset_after_ms,
                 (long long)want->delay_ms, (int)got->allowed, (long long)got->limit,
                 (long long)got->remaining, (long long)got->retry_after_ms,
                 (long long)got->reset_after_ms, (long long)got->delay_ms);
}

typedef struct node {
    int64_t units, taken, tag, deadline; /* taken 0: no lease */
} node;

/* Dumps rec and loads it again (in room when given): the trace goes on
 * on the loaded record. */
static void reload(sl__shard *sh, uint8_t **rec, void *room, sl_algo a)
{
    uint8_t buf[64];
    size_t n = sl__lone_dump_len(sh, *rec);
    assert_true(n <= sizeof buf);
    sl__lone_dump(sh, *rec, buf);
    sl__lone_free(sh, *rec);
    *rec = NULL;
    assert_int_equal(sl__lone_load(sh, (unsigned)a, buf, n, room, rec), 0);
    uint8_t again[64];
    assert_int_equal(sl__lone_dump_len(sh, *rec), n);
    sl__lone_dump(sh, *rec, again);
    assert_memory_equal(buf, again, n);
}

static void trace(sl_algo a, int64_t L, int64_t W, int64_t B, int in_room, int *leased,
                  int *tails_dumped)
{
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    assert_non_null(sh);
    uint64_t room[SL__LONE_ROOM / 8] = {0}, other[SL__LONE_ROOM / 8] = {0};
    uint8_t *rec = NULL, *occupant = NULL;
    sl_params p = SL_PARAMS_INIT;
    p.algo = a;
    p.limit = L;
    p.window_ms = W;
    p.burst = B == L ? 0 : B;
    if (!in_room) { /* another algorithm's record takes the room: ours is allocated */
        sl_params q = SL_PARAMS_INIT;
        sl_result r;
        q.limit = 5;
        q.window_ms = 1000;
        assert_int_equal(sl__lone_decide(sh, &occupant, room, &q, 0, 1, 1, &r), 0);
        assert_ptr_equal(occupant, sl__lone_roomed(room));
    }
    int64_t t0 = 1000000007, now = t0;
    model m = {L, W, B, B * W, t0, fdiv(t0, EPOCH), 0, 0};
    strict s = {B * W, t0};
    node nd[3] = {{0}};
    for (int step = 0; step < 3000; step++) {
        now += rnd(8) == 0 ? 200 + rnd(500) : rnd(40);
        int k = (int)rnd(3), op = (int)rnd(10);
        node *n = &nd[k];
        sl_result want, got;
        if (op <= 2) { /* a decision per request */
            int64_t cost = 1 + rnd(3);
            want = m_decide(&m, now, cost, 1);
            assert_int_equal(
                sl__lone_decide(sh, &rec, in_room ? room : NULL, &p, now, cost, 1, &got), 0);
            same(&want, &got, step, "decide");
            if (got.allowed) s_admit(&s, &m, now, cost, step);
        } else if (op == 3) { /* a peek changes nothing */
            want = m_decide(&m, now, 2, 0);
            assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, now, 2, 0, &got), 0);
            same(&want, &got, step, "peek");
        } else if (op <= 5 && n->taken == 0) { /* node k takes a lease */
            int64_t cost = 1, wantu = 2 + rnd(12);
            want = m_decide(&m, now, cost, 1);
            assert_int_equal(
                sl__lone_decide(sh, &rec, in_room ? room : NULL, &p, now, cost, 1, &got), 0);
            same(&want, &got, step, "take's decision");
            if (!got.allowed) continue;
            s_admit(&s, &m, now, cost, step);
            int64_t x = wantu - cost;
            if (x > got.remaining / 2) x = got.remaining / 2;
            sl__lone_lease lw, lg;
            m_take(&m, x, &want, &lw);
            assert_int_equal(sl__lone_lease_take(sh, &rec, &p, now, x, &got, &lg), 0);
            same(&want, &got, step, "take");
            assert_int_equal(lg.extra, lw.extra);
            assert_int_equal(lg.ttl_ms, lw.ttl_ms);
            assert_int_equal(lg.tag, lw.tag);
            if (x > 0) {
                *leased += 1;
                *n = (node){x, x, lg.tag, m.clock + lg.ttl_ms};
            }
        } else if (op <= 7 && n->taken > 0) { /* node k spends, before its deadline */
            int64_t c = 1 + rnd(2);
            if (now < n->deadline && n->units >= c) {
                n->units -= c;
                s_admit(&s, &m, now, c, step);
            }
        } else if (op == 8 && n->taken > 0) { /* node k hands back (maybe late) */
            int64_t w = m_return(&m, now, n->units, n->taken, n->tag), put = -1;
            assert_int_equal(
                sl__lone_lease_return(sh, &rec, &p, now, n->units, n->taken, n->tag, &put), 0);
            if (put != w)
                fail_msg("step %d: return put %lld, the model %lld", step, (long long)put,
                         (long long)w);
            n->taken = 0;
        } else if (op == 9 && n->taken > 0 && rnd(4) == 0) { /* node k dies */
            n->taken = 0;
        }
        if (rec != NULL && sl__lone_lease_end(sh, rec) != m_end(&m))
            fail_msg("step %d: lease end %lld, the model %lld", step,
                     (long long)sl__lone_lease_end(sh, rec), (long long)m_end(&m));
        if (rec != NULL && step % 97 == 0) {
            *tails_dumped += sl__lone_dump_len(sh, rec) > 12 + 10;
            reload(sh, &rec, in_room ? room : NULL, a);
        }
    }
    sl__lone_free(sh, rec);
    sl__lone_free(sh, occupant);
    (void)other;
    sl__shard_loose_free(sh);
}

static void model_traces(sl_algo a)
{
    int leased = 0, tails = 0;
    trace(a, 20, 1000, 20, 1, &leased, &tails);
    trace(a, 7, 300, 25, 1, &leased, &tails);
    trace(a, 20, 1000, 30, 0, &leased, &tails);
    trace(a, 3, 100, 12, 0, &leased, &tails);
    /* the traces did lease, and dumped records with units out */
    assert_true(leased > 100);
    assert_true(tails > 5);
}

static void test_token_bucket_model(void **st)
{
    (void)st;
    model_traces(SL_TOKEN_BUCKET);
}

static void test_gcra_model(void **st)
{
    (void)st;
    model_traces(SL_GCRA);
}

/* A leased bucket: full (10 tokens), 4 leased at t.  The refill stops at
 * B - 4 while they are out; a peek and a denied batch leave its bytes as
 * they were; a return fills it no further than B - O. */
static void test_units_out_hold_the_refill(void **st)
{
    (void)st;
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    uint64_t room[SL__LONE_ROOM / 8] = {0};
    uint8_t *rec = NULL, *other = NULL;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 10;
    p.window_ms = 1000;     /* 1 token per 100 ms */
    int64_t t = 1000000000; /* an epoch's start */
    sl_result r;
    sl__lone_lease lz;
    assert_int_equal(sl__lone_decide(sh, &rec, room, &p, t, 1, 1, &r), 0);
    assert_int_equal(r.remaining, 9);
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, t, 4, &r, &lz), 0);
    assert_int_equal(lz.extra, 4);
    assert_int_equal(lz.tag, t / EPOCH);
    assert_int_equal(lz.ttl_ms, 500);
    assert_int_equal(r.remaining, 5);
    assert_int_equal(r.reset_after_ms, 500);
    assert_int_equal(sl__lone_lease_end(sh, rec), t + 500);
    /* 300 ms later a plain bucket would be full (10); this one stops at 6 */
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 300, 0, 0, &r), 0);
    assert_int_equal(r.remaining, 6);
    uint8_t before[64], after[64];
    size_t n = sl__lone_dump_len(sh, rec);
    assert_int_equal(n, 12 + 10 + SL__LONE_TAIL);
    sl__lone_dump(sh, rec, before);
    /* a batch denied by its other request: nothing of ours changes */
    sl_params q = SL_PARAMS_INIT;
    q.limit = 1;
    q.window_ms = 1000;
    sl__lone_req reqs[2] = {{&p, &rec, 1, NULL}, {&q, &other, 2, NULL}};
    sl_result out[2];
    int all = 1;
    assert_int_equal(sl__lone_decide_all(sh, reqs, 2, t + 300, out, &all, NULL), 0);
    assert_int_equal(all, 0);
    assert_int_equal(out[0].remaining, 5);
    assert_int_equal(sl__lone_dump_len(sh, rec), n);
    sl__lone_dump(sh, rec, after);
    assert_memory_equal(before, after, n);
    /* the node hands back 3 of its 4 at t + 300: 6 + 3, not above B - 0 */
    int64_t put = -1;
    assert_int_equal(sl__lone_lease_return(sh, &rec, &p, t + 300, 3, 4, lz.tag, &put), 0);
    assert_int_equal(put, 3);
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 300, 0, 0, &r), 0);
    assert_int_equal(r.remaining, 9);
    assert_int_equal(sl__lone_lease_end(sh, rec), INT64_MIN); /* nothing out */
    assert_int_equal(sl__lone_dump_len(sh, rec), 12 + 10);    /* and no tail */
    /* a second lease, never handed back: settled at its epoch + 2, then
     * the refill goes on as if its units were spent when taken */
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 300, 1, 1, &r), 0);
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, t + 300, 4, &r, &lz), 0);
    assert_int_equal(r.remaining, 4);
    assert_int_equal(lz.ttl_ms, 450); /* epoch t/250 + 1, settled at its + 2 */
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 700, 0, 0, &r), 0);
    assert_int_equal(r.remaining, 6); /* held at B - 4 */
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 750, 0, 0, &r), 0);
    assert_int_equal(r.remaining, 8); /* settled: 4 + 450 ms of refill */
    /* too late: nothing comes back */
    assert_int_equal(sl__lone_lease_return(sh, &rec, &p, t + 750, 4, 4, lz.tag, &put), 0);
    assert_int_equal(put, 0);
    sl__lone_free(sh, rec);
    sl__lone_free(sh, other);
    sl__shard_loose_free(sh);
}

/* Windows: the units are in the window's count; they come back in that
 * window only. */
static void test_window_leases(void **st)
{
    (void)st;
    sl_algo algos[2] = {SL_FIXED_WINDOW, SL_SLIDING_WINDOW};
    for (int i = 0; i < 2; i++) {
        sl__shard *sh = sl__shard_loose_new(1 << 20);
        uint8_t *rec = NULL;
        sl_params p = SL_PARAMS_INIT;
        p.algo = algos[i];
        p.limit = 100;
        p.window_ms = 1000;
        int64_t t = 5000200;
        sl_result r;
        sl__lone_lease lz;
        assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t, 1, 1, &r), 0);
        assert_int_equal(sl__lone_lease_take(sh, &rec, &p, t, 40, &r, &lz), 0);
        assert_int_equal(lz.extra, 40);
        assert_int_equal(lz.tag, 5000);
        assert_int_equal(lz.ttl_ms, 800);
        assert_int_equal(r.remaining, 59);
        int64_t put = -1;
        assert_int_equal(sl__lone_lease_return(sh, &rec, &p, t + 100, 30, 40, 5000, &put), 0);
        assert_int_equal(put, 30);
        assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, t + 100, 0, 0, &r), 0);
        assert_int_equal(r.remaining, 89);
        /* the next window: nothing comes back (a sliding window's previous
         * count stays what it was) */
        assert_int_equal(sl__lone_lease_return(sh, &rec, &p, t + 900, 10, 10, 5000, &put), 0);
        assert_int_equal(put, 0);
        assert_int_equal(sl__lone_lease_end(sh, rec), INT64_MIN);
        sl__lone_free(sh, rec);
        sl__shard_loose_free(sh);
    }
}

static void test_refusals(void **st)
{
    (void)st;
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    uint8_t *rec = NULL;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_SLIDING_LOG;
    p.limit = 10;
    p.window_ms = 1000;
    sl_result r;
    sl__lone_lease lz;
    int64_t put;
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, 1000, 1, 1, &r), 0);
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, 1000, 2, &r, &lz), SL_EALGO);
    assert_int_equal(sl__lone_lease_return(sh, &rec, &p, 1000, 2, 2, 1, &put), SL_EALGO);
    p.algo = SL_TOKEN_BUCKET; /* another algorithm's record */
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, 1000, 2, &r, &lz), SL_EINVAL);
    sl__lone_free(sh, rec);
    rec = NULL;
    assert_int_equal(sl__lone_decide(sh, &rec, NULL, &p, 1000, 1, 1, &r), 0);
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, 1000, -1, &r, &lz), SL_ECOST);
    assert_int_equal(sl__lone_lease_return(sh, &rec, &p, 1000, 1, -1, 1, &put), SL_ECOST);
    /* a dumped tail with nothing out, or an epoch after the clock's, is
     * malformed */
    assert_int_equal(sl__lone_lease_take(sh, &rec, &p, 1000, 3, &r, &lz), 0);
    uint8_t buf[64], *back = NULL;
    size_t n = sl__lone_dump_len(sh, rec);
    sl__lone_dump(sh, rec, buf);
    assert_int_equal(sl__lone_load(sh, SL_TOKEN_BUCKET, buf, n, NULL, &back), 0);
    sl__lone_free(sh, back);
    back = NULL;
    uint8_t bad[64];
    memcpy(bad, buf, n);
    memset(bad + 12 + 10 + 8, 0, 10); /* O0 = O1 = 0 */
    assert_int_equal(sl__lone_load(sh, SL_TOKEN_BUCKET, bad, n, NULL, &back), SL_EINVAL);
    memcpy(bad, buf, n);
    bad[12 + 10] += 1; /* the epoch after its clock's */
    assert_int_equal(sl__lone_load(sh, SL_TOKEN_BUCKET, bad, n, NULL, &back), SL_EINVAL);
    assert_int_equal(sl__lone_load(sh, SL_FIXED_WINDOW, buf, n, NULL, &back), SL_EINVAL);
    assert_null(back);
    sl__lone_free(sh, rec);
    sl__shard_loose_free(sh);
}

/* The bytes a lone record holds (the module's MEMORY USAGE) count its
 * lease tail: a bucket in an allocation of its own grows by SL__LONE_TAIL
 * at its first lease, and sl__lone_bytes grows by as much, also after the
 * units came back (the room stays); a record in its owner's room holds
 * no allocation, tail or not. */
static void test_bytes_count_the_tail(void **st)
{
    (void)st;
    sl__shard *sh = sl__shard_loose_new(1 << 20);
    uint64_t room[SL__LONE_ROOM / 8] = {0};
    uint8_t *own = NULL, *lent = NULL;
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 10;
    p.window_ms = 1000;
    sl_result r;
    sl__lone_lease lz;
    int64_t put = -1;
    assert_int_equal(sl__lone_decide(sh, &own, NULL, &p, 1000, 1, 1, &r), 0);
    assert_int_equal(sl__lone_decide(sh, &lent, room, &p, 1000, 1, 1, &r), 0);
    assert_ptr_equal(sl__lone_roomed(room), lent);
    /* its clock and room word, the header, the one-byte key, 10 bytes of state */
    size_t plain = SL__LOOSE_PREFIX + SL__REC_HDR + 1 + 10;
    assert_int_equal(sl__lone_bytes(sh, own), plain);
    assert_int_equal(sl__lone_bytes(sh, lent), 0);
    assert_int_equal(sl__lone_lease_take(sh, &own, &p, 1000, 4, &r, &lz), 0);
    assert_int_equal(lz.extra, 4);
    assert_int_equal(sl__lone_bytes(sh, own), plain + SL__LONE_TAIL);
    assert_int_equal(sl__lone_lease_take(sh, &lent, &p, 1000, 4, &r, &lz), 0);
    assert_ptr_equal(sl__lone_roomed(room), lent); /* the tail fits the room */
    assert_int_equal(sl__lone_bytes(sh, lent), 0);
    assert_int_equal(sl__lone_lease_return(sh, &own, &p, 1100, 4, 4, lz.tag, &put), 0);
    assert_int_equal(put, 4);
    assert_int_equal(sl__lone_lease_end(sh, own), INT64_MIN); /* nothing out ... */
    assert_int_equal(sl__lone_bytes(sh, own), plain + SL__LONE_TAIL); /* ... same room */
    sl__lone_free(sh, own);
    sl__lone_free(sh, lent);
    sl__shard_loose_free(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_bucket_model),
        cmocka_unit_test(test_gcra_model),
        cmocka_unit_test(test_units_out_hold_the_refill),
        cmocka_unit_test(test_window_leases),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bytes_count_the_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
