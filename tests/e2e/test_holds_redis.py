"""test_holds_redis.py -- leases and reservations (SPEC section 10) on the
Redis backend's script path (src/backend/redis/sluice.lua, ops LA LR RV
ST), against the local backend and across a fleet:

- one scripted sequence of RL.ACQUIRE, RL.RELEASE, RL.RESERVE, RL.SETTLE
  and RL.ALLOW / RL.PEEK (every algorithm a reservation takes, refunds
  into the current and the previous window, charges past the limit,
  settling twice, an unknown id, a reservation whose window ended) sent
  to a local-backend sluiced and to a Redis-backed one: every reply the
  same, field by field (the ids: present or null alike).  Client time
  (AT) throughout, so nothing depends on timing; RELEASE and SETTLE take
  no AT and are decided at the key's latest time (BASE is days ahead);
- three sluiced nodes on one redis-server acquiring one key with max = N
  at once: exactly N granted, never more than N held (granted minus
  released), every release of a held lease answered 1;
- three nodes reserving and settling one key at once: the key's count is
  exactly the sum of the actuals (no unit created or lost), for a fixed
  window and a token bucket;
- in a Redis Cluster, every key's holds on its decisions' master;
- with the sluice module loaded: the same sequence compared with the
  local backend (leases through the script's ops, reservations through
  the module's RL.HOLDRESERVE / RL.HOLDSETTLE on the module's state), and
  the module's own refusals.
"""
# Four sluiced and a redis-server: run once, against the plain build.
# sluice-e2e: plain-only

import os
import shutil
import tempfile
import threading
import time
import unittest

import harness
import test_ring
from harness import BASE, RawConn, encode

T = BASE + 123  # inside a second, not at a window's edge
NODES = 3


def flat(reply):
    """A reply with errors as their text (RespError compares by its line)."""
    if isinstance(reply, harness.RespError):
        return "ERR:" + reply.line
    return reply


LLM_RULES = """\
domain: llm
descriptors:
  - key: user
    rate_limit:
      - {unit: minute, requests_per_unit: 3}
      - {concurrency: 2, concurrency_ttl: 10s}
  - key: tokens
    rate_limit: {window: 1m, requests_per_unit: 1000, algorithm: sliding-window}
  - key: batch
    shadow_mode: true
    rate_limit: {concurrency: 1}
  - key: job
    rate_limit:
      - {window: 1h, requests_per_unit: 1000000}
      - {concurrency: 2, concurrency_ttl: 1h}
"""


def write_rules(d):
    path = os.path.join(d, "llm.yaml")
    with open(path, "w") as f:
        f.write(LLM_RULES)
    return path


def llm(user, rpm_cost, tokens, at):
    return ("RL.CHECK", "llm", "COSTS", rpm_cost, tokens, "AT", at,
            "DESCRIPTOR", "user", user, "DESCRIPTOR", "tokens", user)


def lease_name(kind, key):
    """The Redis name of a lease's key (docs/commands-holds.md, "The lease tag"),
    written from the docs: for "<domain>|...|conc" the domain is the tag
    -- its bytes before the first '|', less two a '%' (an escape of the
    rules' keys) --, any other key is its own tag."""
    if key.endswith(b"|conc") and b"|" in key[:-5]:
        p = key.index(b"|")
        t = p - 2 * key[:p].count(b"%")
        if t > 0:
            return b"sl:h" + kind + b":{" + key[:t] + b"}" + key[t:]
    return b"sl:h" + kind + b":{" + key + b"}"


def leased_check_sequence(test, cs, zcard):
    """The LLM recipe's checks (LLM_RULES, client time from T) on cs[0], a
    local-backend sluiced, and cs[1], a Redis-backed one: every reply the
    same field by field but for the lease ids (present in both or in
    neither); zcard(name) counts the leases in Redis's sorted set name."""
    key = b"llm|user=u1|conc"

    def both(*args):
        """args to both; the replies equal once each lease id is
        replaced by True; returns each server's reply."""
        out = [flat(c.cmd(*[str(a) for a in args])) for c in cs]
        norm = []
        for rep in out:
            if isinstance(rep, list) and rep and isinstance(rep[-1], list) and \
                    all(isinstance(x, list) and len(x) == 2 for x in rep[-1]):
                for lk, lid in rep[-1]:
                    test.assertIsInstance(lid, int, (args, rep))
                    test.assertGreater(lid, 0, (args, rep))
                rep = rep[:-1] + [[[lk, True] for lk, _ in rep[-1]]]
            norm.append(rep)
        test.assertEqual(norm[0], norm[1], args)
        return out

    # 1, 2: allowed, each holding a lease (concurrency the tightest)
    c1 = both(*llm("u1", 1, 400, T))
    test.assertEqual(c1[1][:7], [1, 2, 1, 0, 10000, 0,
                                 [b"OK", b"llm.user#concurrency", 2, 1, 0, 10000]])
    test.assertEqual([lk for lk, _ in c1[1][8]], [key])
    c2 = both(*llm("u1", 1, 400, T + 100))
    test.assertEqual(c2[1][:6], [1, 2, 0, 0, 10000, 0])
    # the leases are in RL.ACQUIRE's keys of the lease key in Redis, under
    # the domain's tag
    test.assertEqual(zcard(b"sl:hl:{llm}|user=u1|conc"), 2)
    # 3: denied by the concurrency: no lease taken, nothing charged
    c3 = both(*llm("u1", 1, 100, T + 200))
    test.assertEqual(c3[1][:7], [0, 2, 0, 9800, 9900, 0,
                                 [b"OVER_LIMIT", b"llm.user#concurrency", 2, 0, 9800, 9900]])
    test.assertEqual(c3[1][8], [])
    # RL.RELEASE of the lease key and the check's id frees one
    for i, c in enumerate(cs):
        test.assertEqual(c.cmd("RL.RELEASE", key, str(c1[i][8][0][1])), 1)
        test.assertEqual(c.cmd("RL.RELEASE", key, str(c1[i][8][0][1])), 0)
    c4 = both(*llm("u1", 1, 100, T + 300))
    test.assertEqual(c4[1][:4], [1, 3, 0, 0])
    # 400 + 400 + 100 tokens: the check the concurrency denied charged none
    test.assertEqual(c4[1][7][:4], [b"OK", b"llm.tokens", 1000, 100])
    for i, c in enumerate(cs):
        test.assertEqual(c.cmd("RL.RELEASE", key, str(c4[i][8][0][1])), 1)
    # 5: denied by the rate (a 4th this minute) with a lease free: it
    # takes none -- one lease (the second check's) held, as RL.ACQUIRE sees
    c5 = both(*llm("u1", 1, 1, T + 400))
    test.assertEqual(c5[1][:4], [0, 3, 0, 59477])
    test.assertEqual(c5[1][6][:4], [b"OVER_LIMIT", b"llm.user", 3, 0])
    test.assertEqual(c5[1][8], [])
    for c in cs:
        a = c.cmd("RL.ACQUIRE", key, "2", "TTL", "1", "AT", str(T + 500))
        test.assertEqual(a[:6], [1, 2, 0, 0, 9600, 0])
        test.assertEqual(c.cmd("RL.RELEASE", key, str(a[6])), 1)
    for i, c in enumerate(cs):
        test.assertEqual(c.cmd("RL.RELEASE", key, str(c2[i][8][0][1])), 1)
    # the tokens: the rate-denied check charged none either (100 left)
    t = both(*llm("u1", 0, 0, T + 600))
    test.assertEqual(t[1][7][:4], [b"OK", b"llm.tokens", 1000, 100])
    # a lease not given back ends at its TTL (10 s): the slot is free
    # again at T + 10000 exactly, and the expired lease's id is unknown
    e1 = both(*llm("u2", 1, 1, T))
    both(*llm("u2", 1, 1, T + 1))
    e3 = both(*llm("u2", 1, 1, T + 2))
    test.assertEqual(e3[1][:7], [0, 2, 0, 9998, 9999, 0,
                                 [b"OVER_LIMIT", b"llm.user#concurrency", 2, 0, 9998, 9999]])
    e4 = both(*llm("u2", 1, 1, T + 9999))
    test.assertEqual(e4[1][0], 0)
    e5 = both(*llm("u2", 1, 1, T + 10000))
    test.assertEqual(e5[1][0], 1)
    test.assertEqual([lk for lk, _ in e5[1][8]], [b"llm|user=u2|conc"])
    for i, c in enumerate(cs):
        test.assertEqual(c.cmd("RL.RELEASE", b"llm|user=u2|conc", str(e1[i][8][0][1])), 0)
    test.assertEqual(zcard(b"sl:hl:{llm}|user=u2|conc"), 2)
    # a shadow concurrency limit: a lease while it has room, then
    # SHADOW and none; never a denial
    s1 = both("RL.CHECK", "llm", "AT", T, "DESCRIPTOR", "batch", "s1")
    test.assertEqual(s1[1][:7], [1, 0, 0, 0, 0, 0,
                                 [b"OK", b"llm.batch#concurrency", 1, 0, 0, 60000]])
    s2 = both("RL.CHECK", "llm", "AT", T + 1, "DESCRIPTOR", "batch", "s1")
    test.assertEqual(s2[1], [1, 0, 0, 0, 0, 0, [b"SHADOW", b"llm.batch#concurrency", 1, 0,
                                                59999, 59999], []])
    for i, c in enumerate(cs):
        test.assertEqual(c.cmd("RL.RELEASE", "llm|batch=s1|conc", str(s1[i][7][0][1])), 1)


class Pair:
    """The same commands to a local-backend sluiced and a Redis-backed one;
    `ids` maps a name to each server's id of that name."""

    def __init__(self, test, local, remote):
        self.test, self.c = test, [RawConn(local.port), RawConn(remote.port)]
        self.ids = {}

    def close(self):
        for c in self.c:
            c.close()

    def send(self, *args, keep=None):
        """Sends args to both ('@name' replaced by each server's id of that
        name); asserts the replies are the same but for the ids; keeps a
        7th element's id under `keep`.  Returns the local reply."""
        out = []
        for i, c in enumerate(self.c):
            a = [self.ids[x[1:]][i] if isinstance(x, str) and x.startswith("@") else x
                 for x in args]
            out.append(flat(c.cmd(*[str(x) for x in a])))
        lo, re = out
        if keep is not None:
            self.ids[keep] = (lo[6] if isinstance(lo, list) and len(lo) == 7 else None,
                              re[6] if isinstance(re, list) and len(re) == 7 else None)
        if isinstance(lo, list) and len(lo) == 7 and isinstance(re, list) and len(re) == 7:
            self.test.assertEqual(lo[6] is None, re[6] is None, (args, lo, re))
            if re[6] is not None:
                self.test.assertIsInstance(re[6], int)
                self.test.assertGreater(re[6], 0)
            lo, re = lo[:6], re[:6]
        self.test.assertEqual(lo, re, args)
        return out[0]


class HoldsRedis(unittest.TestCase):

    def redis(self):
        r = harness.RedisServer().start()
        self.addCleanup(r.cleanup)
        return r

    def node(self, r, name, trust=True):
        # a generous backend timeout: a slow answer must not become an error
        s = harness.Server("--backend", r.url(), "--backend-timeout", "5s",
                           trust_client_time=trust, name="%s-%s" % (self.id(), name))
        s.start()
        self.addCleanup(s.cleanup)
        return s

    def test_same_replies_as_local(self):
        self.compare(self.redis())

    def test_same_replies_as_local_module(self):
        """The same sequence against a Redis with the sluice module: leases
        through the script, reservations through the module's
        RL.HOLDRESERVE / RL.HOLDSETTLE on its own rate state."""
        r = harness.RedisServer(module_args=["trust-client-time", "yes",
                                             "max-client-skew", "7d"]).start()
        self.addCleanup(r.cleanup)
        self.compare(r)
        # the module's keys, not the script's: RL.ALLOW's state and the
        # reservations', both with an expiry
        self.assertEqual(r.cmd("EXISTS", "sl:40:{tpm:token-bucket}"), 0)
        self.assertEqual(r.cmd("TYPE", "sl:m0:{tpm:token-bucket}"), b"sluice-rl")
        self.assertEqual(r.cmd("TYPE", "sl:mr:{tpm:token-bucket}"), b"sluice-rv")
        self.assertGreater(r.cmd("PTTL", "sl:mr:{tpm:token-bucket}"), 0)

    def compare(self, r):
        local = harness.Server(trust_client_time=True, name=self.id() + "-local")
        local.start()
        self.addCleanup(local.cleanup)
        p = Pair(self, local, self.node(r, "redis"))
        self.addCleanup(p.close)
        S = p.send
        # leases: two of max 2, a denial until the oldest expires, release
        self.assertEqual(S("RL.ACQUIRE", "db", 2, "TTL", 1000, "AT", T, keep="a")[:6],
                         [1, 2, 1, 0, 1000, 0])
        S("RL.ACQUIRE", "db", 2, "TTL", 5000, "AT", T + 10, keep="b")
        self.assertEqual(S("RL.ACQUIRE", "db", 2, "AT", T + 20),
                         [0, 2, 0, 980, 4990, 0, None])
        S("RL.ACQUIRE", "db", 3, "TTL", 100, "AT", T + 30, keep="c")  # max differs by call
        self.assertEqual(S("RL.RELEASE", "db", "@a"), 1)
        self.assertEqual(S("RL.RELEASE", "db", "@a"), 0)
        self.assertEqual(S("RL.RELEASE", "db", "not-an-id"), 0)
        self.assertEqual(S("RL.RELEASE", "other", "@b"), 0)  # another key's id
        S("RL.ACQUIRE", "db", 2, "AT", T + 40)  # lease c still live: denied
        S("RL.ACQUIRE", "db", 2, "AT", T + 130, keep="d")  # c expired at T + 130
        self.assertEqual(S("RL.RELEASE", "db", "@c"), 0)
        S("RL.ACQUIRE", "db", 2, "AT", T + 5010, keep="e")  # b expired too
        self.assertEqual(S("RL.RELEASE", "db", "@b"), 0)
        self.assertEqual(S("RL.RELEASE", "db", "@d"), 1)
        self.assertEqual(S("RL.RELEASE", "db", "@e"), 1)
        S("RL.ACQUIRE", "db", 1, "TTL", 1, "AT", T + 6000)
        S("RL.ACQUIRE", "db", 1, "TTL", 1, "AT", T + 6000)  # 1 ms lease, same ms: held
        S("RL.ACQUIRE", "db", 1, "TTL", 1, "AT", T + 6001)  # gone at t0 + d exactly
        for bad in (("db", 0), ("db", 1, "TTL", "2d")):
            S("RL.ACQUIRE", *bad)
        # reservations, every algorithm they take
        algos = [("fixed-window", ()), ("sliding-window", ()),
                 ("sliding-buckets", ("PRECISION", 5)), ("token-bucket", ("BURST", 150)),
                 ("gcra", ()), ("leaky-bucket", ())]
        for algo, extra in algos:
            k = "tpm:" + algo
            L = ("RL.RESERVE", k, 100, "10s", "ALGO", algo) + extra
            A = ("ALGO", algo) + extra
            S(*L, "COST", 30, "AT", T, keep="r1")
            S(*L, "COST", 20, "AT", T + 500, keep="r2")
            S("RL.SETTLE", k, "@r1", 10)  # refund 20
            S("RL.SETTLE", k, "@r1", 10)  # settled already: the error
            S(*L, "COST", 5, "AT", T + 1000, keep="r3")
            S("RL.SETTLE", k, "@r3", 60)  # charge 55: still within a bucket
            S("RL.PEEK", k, 100, "10s", *A, "AT", T + 1000)
            S(*L, "COST", 500, "AT", T + 1000)  # over the limit: denied, no id
            S(*L, "COST", 1, "AT", T + 2000, keep="r4")
            # the key decided a window later: r4's refund into the previous window
            S("RL.ALLOW", k, 100, "10s", *A, "AT", T + 10500)
            S("RL.SETTLE", k, "@r4", 0)
            S("RL.SETTLE", k, "@r2", 20)  # actual = estimate
            S(*L, "COST", 2, "AT", T + 11000, keep="r5")
            S("RL.SETTLE", k, "@r5", 1)
            S("RL.SETTLE", k, 424242, 1)  # unknown id
            S("RL.SETTLE", k, "@r5", -1)
            S("RL.PEEK", k, 100, "10s", *A, "AT", T + 11000)
        # a settle past empty on the buckets: a debt, kept whole (the next
        # requests wait until debt + cost has refilled; remaining 0 meanwhile)
        for algo in ("token-bucket", "gcra", "leaky-bucket"):
            k, A = "debt:" + algo, ("ALGO", algo)
            R = ("RL.RESERVE", k, 10, "10s") + A
            S(*R, "COST", 4, "AT", T, keep="d1")
            S(*R, "COST", 3, "AT", T, keep="d2")
            self.assertEqual(S("RL.SETTLE", k, "@d1", 29), [0, 10, 0, 23000, 32000, 0])
            S("RL.PEEK", k, 10, "10s", *A, "COST", 3, "AT", T + 1500)
            S("RL.ALLOW", k, 10, "10s", *A, "AT", T + 2000)  # denied
            S("RL.SETTLE", k, "@d2", 1)  # refunds 2 of the debt
            S("RL.ALLOW", k, 10, "10s", *A, "COST", 0, "AT", T + 2500)
            S("RL.PEEK", k, 10, "10s", *A, "BURST", 20, "AT", T + 3000)  # the debt kept
            S("RL.PEEK", k, 10, "5s", *A, "AT", T + 3000)  # a new window: its whole part kept
            self.assertEqual(S(*R, "COST", 1, "AT", T + 20000),  # one more to refill
                             [0, 10, 0, 1000, 10000, 0, None])
            self.assertEqual(S(*R, "COST", 1, "AT", T + 21000, keep="d3")[:3], [1, 10, 0])
            S("RL.SETTLE", k, "@d3", 10 ** 11)  # a huge debt: kept, not clamped
            self.assertEqual(S("RL.PEEK", k, 10, "10s", *A, "AT", T + 22000),
                             [0, 10, 0, 10 ** 14 - 1000, 10 ** 14 + 8000, 0])
            S("RL.SETTLE", k, "@d3", 0)  # settled already
            S("RL.ALLOW", k, 10, "10s", *A, "AT", T + 10 ** 6)
        # a charge past the limit in windows: the next request waits
        k = "llm"
        S("RL.RESERVE", k, 100, "1m", "COST", 5, "ALGO", "sliding-window", "AT", T, keep="x")
        S("RL.SETTLE", k, "@x", 250)
        S("RL.ALLOW", k, 100, "1m", "ALGO", "sliding-window", "AT", T + 59000)
        S("RL.ALLOW", k, 100, "1m", "ALGO", "sliding-window", "AT", T + 90000)
        # a reservation whose window ended settles at its estimate: unknown after
        S("RL.RESERVE", "w", 10, "1s", "COST", 4, "ALGO", "fixed-window", "AT", T, keep="y")
        S("RL.RESERVE", "w", 10, "1s", "COST", 1, "ALGO", "fixed-window", "AT", T + 1000)
        S("RL.SETTLE", "w", "@y", 0)
        S("RL.PEEK", "w", 10, "1s", "ALGO", "fixed-window", "AT", T + 1000)
        # refusals, the same words
        S("RL.RESERVE", "k", 10, "1m", "COST", 1, "ALGO", "sliding-log")
        S("RL.RESERVE", "k", 10, "1m", "ALGO", "gcra")
        S("RL.SETTLE", "nobody", 1, 1)

    def test_debt_range(self):
        """A bucket's debt past the script's exact range (B*W + debt > 2^53
        in units of 1/W) is refused with the quantity named, nothing
        written: the reservation can still be settled."""
        r = self.redis()
        with RawConn(self.node(r, "range").port) as c:
            v = c.cmd("RL.RESERVE", "big", "10", "1h", "ALGO", "gcra", "COST", "1", "AT", str(T))
            self.assertEqual(v[:3], [1, 10, 9])
            self.assertEqual(flat(c.cmd("RL.SETTLE", "big", str(v[6]), str(10 ** 12))),
                             "ERR:ERR range: B*W + the bucket's debt after the settle = 3600000 + "
                             "3599999999996400000 passes 2^53, the Redis backend's exact range "
                             "(docs/redis-scripts.md)")
            self.assertEqual(c.cmd("RL.SETTLE", "big", str(v[6]), "2"), [1, 10, 8, 0, 720000, 0])
            # a debt in range at W = 1 s, past it when read with W = 1 h
            v = c.cmd("RL.RESERVE", "w", "10", "1s", "ALGO", "token-bucket", "COST", "1",
                      "AT", str(T))
            self.assertEqual(c.cmd("RL.SETTLE", "w", str(v[6]), str(10 ** 12))[:4],
                             [0, 10, 0, 10 ** 14 - 900])
            self.assertEqual(flat(c.cmd("RL.PEEK", "w", "10", "1h", "ALGO", "token-bucket",
                                        "AT", str(T))),
                             "ERR:ERR range: B*W + the bucket's debt = 3599999999964000000 + "
                             "36000000 passes 2^53, the Redis backend's exact range "
                             "(docs/redis-scripts.md)")

    def test_keys_in_redis(self):
        """The keys a hold makes carry the key as hash tag, and every one
        has an expiry."""
        r = self.redis()
        n = self.node(r, "one")
        with RawConn(n.port) as c:
            c.cmd("RL.ACQUIRE", "q", "2", "TTL", "5000", "AT", str(T))
            c.cmd("RL.RESERVE", "q", "10", "1m", "COST", "3", "AT", str(T))
        keys = sorted(r.cmd("KEYS", "*"))
        self.assertEqual(keys, [b"sl:40:{q}", b"sl:hh:{q}", b"sl:hl:{q}", b"sl:hr:{q}"])
        for k in keys:
            ttl = r.cmd("PTTL", k)
            self.assertGreater(ttl, 0, k)
            self.assertLessEqual(ttl, 3600000, k)  # client time: an hour of real time

    def test_module_path(self):
        """With the sluice module loaded, leases go through the script (no
        rate state involved); RL.RESERVE / RL.SETTLE charge the module's
        state, where RL.ALLOW looks, not the script's."""
        r = harness.RedisServer(module_args=["trust-client-time", "yes",
                                             "max-client-skew", "7d"]).start()
        self.addCleanup(r.cleanup)
        n = self.node(r, "module")
        with RawConn(n.port) as c:
            a = c.cmd("RL.ACQUIRE", "m", "1", "TTL", "5000", "AT", str(T))
            self.assertEqual(a[:6], [1, 1, 0, 0, 5000, 0])
            self.assertEqual(c.cmd("RL.ACQUIRE", "m", "1", "AT", str(T + 1)),
                             [0, 1, 0, 4999, 4999, 0, None])
            self.assertEqual(c.cmd("RL.RELEASE", "m", str(a[6])), 1)
            v = c.cmd("RL.RESERVE", "m", "10", "1m", "COST", "4", "AT", str(T))
            self.assertEqual(v[:6], [1, 10, 6, 0, 24000, 0])  # token-bucket, 6 s a token
            self.assertEqual(c.cmd("RL.SETTLE", "m", str(v[6]), "1"), [1, 10, 9, 0, 6000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "m", "10", "1m", "COST", "9", "AT", str(T)),
                             [1, 10, 0, 0, 60000, 0])
            self.assertEqual(flat(c.cmd("RL.SETTLE", "m", str(v[6]), "1")),
                             "ERR:ERR unknown reservation id: never given for this key, settled "
                             "already, or its window ended (then it settled at its estimate)")
        self.assertEqual(r.cmd("EXISTS", "sl:40:{m}"), 0)
        # the module's commands refuse what sluiced never sends, naming it
        for cmd, msg in (
                (("RL.HOLDRESERVE", "h", "k", "10", "1m"), "RL.HOLDRESERVE needs COST estimate"),
                (("RL.HOLDRESERVE", "k", "k", "10", "1m", "COST", "1"),
                 "the reservations' key and the key must differ"),
                (("RL.HOLDRESERVE", "h", "k", "10", "1m", "COST", "1", "ALGO", "sliding-log"),
                 "RL.HOLDRESERVE does not take sliding-log: a logged request's cost is not "
                 "changed afterwards"),
                (("RL.HOLDSETTLE", "h", "k", "1", "-1"), "actual must be an integer 0..1000000000000")):
            self.assertEqual(flat(r.cmd(*cmd)), "ERR:ERR " + msg, cmd)
        self.assertEqual(r.cmd("RL.HOLDSETTLE", "h", "k", "1", "1"), [0])
        # a reservation survives the RDB form (DUMP, then RESTORE as h2)
        with RawConn(r.port) as c:
            v = c.cmd("RL.HOLDRESERVE", "h", "k", "10", "1m", "COST", "3", "AT", str(T))
            self.assertEqual(v[:3], [1, 10, 7])
            self.assertEqual(c.cmd("RESTORE", "h2", "0", c.cmd("DUMP", "h")), b"OK")
            self.assertEqual(c.cmd("RL.HOLDSETTLE", "h2", "k", str(v[6]), "0", "AT", str(T)),
                             [1, 1, 10, 10, 0, 0, 0])
            self.assertEqual(c.cmd("RL.HOLDSETTLE", "h2", "k", str(v[6]), "0", "AT", str(T)), [0])
            self.assertEqual(c.cmd("RL.HOLDSETTLE", "h", "k", str(v[6]), "0", "AT", str(T))[:2],
                             [1, 1])
            self.assertEqual(c.cmd("RL.HOLDSETTLE", "h", "k", str(v[6]), "0", "AT", str(T)), [0])
            self.assertEqual(flat(c.cmd("RL.HOLDRESTORE", "h", "junk")),
                             "ERR:ERR malformed reservations for RL.HOLDRESTORE")

    def test_cluster(self):
        """In a Redis Cluster every hold goes to the master of its key's
        slot (the decisions' routing): keys spread over the 3 masters all
        answer, and each key's hold keys sit on the master holding its
        RL.ALLOW state."""
        c = harness.RedisCluster(3).start()
        self.addCleanup(c.cleanup)
        s = harness.Server("--backend", c.url(), "--backend-timeout", "5s",
                           trust_client_time=True, name=self.id() + "-cluster")
        s.start()
        self.addCleanup(s.cleanup)
        s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        keys = ["u%d" % i for i in range(12)]
        with RawConn(s.port) as conn:
            for k in keys:
                a = conn.cmd("RL.ACQUIRE", k, "1", "TTL", "5000", "AT", str(T))
                self.assertEqual(a[:6], [1, 1, 0, 0, 5000, 0], k)
                v = conn.cmd("RL.RESERVE", k, "10", "1m", "COST", "4", "ALGO", "fixed-window",
                             "AT", str(T))
                self.assertEqual(v[:3], [1, 10, 6], k)
                self.assertEqual(conn.cmd("RL.SETTLE", k, str(v[6]), "1")[:3], [1, 10, 9], k)
                self.assertEqual(conn.cmd("RL.RELEASE", k, str(a[6])), 1, k)
        used = set()
        for k in keys:
            home = [i for i, r in enumerate(c.nodes)
                    if r.cmd("EXISTS", "sl:00:{%s}" % k) == 1]
            self.assertEqual(len(home), 1, k)
            self.assertEqual(c.nodes[home[0]].cmd("EXISTS", "sl:hh:{%s}" % k), 1, k)
            used.add(home[0])
        self.assertEqual(len(used), 3)  # 12 keys: every master holds some

    # RL.CHECK with concurrency limits (docs/rules.md, "Concurrency"): the
    # LLM recipe of test_holds.py, on the script's op C (leases and rates
    # in one call, all-or-none)
    def rules_file(self):
        d = tempfile.mkdtemp(prefix="sluice-holds-redis-")
        self.addCleanup(shutil.rmtree, d, True)
        return write_rules(d)

    def rules_node(self, backend, name, path):
        args = ("--backend", backend, "--backend-timeout", "5s") if backend else ()
        s = harness.Server(*args, "--rules", path, trust_client_time=True,
                           name="%s-%s" % (self.id(), name))
        s.start()
        self.addCleanup(s.cleanup)
        return s

    llm = staticmethod(llm)

    def test_check_leases_same_as_local(self):
        """The LLM recipe (requests per minute, tokens per minute and
        concurrency in one RL.CHECK) on a local-backend sluiced and a
        Redis-backed one at the same AT times: every reply the same field
        by field (a lease id present in both or in neither), RL.RELEASE of
        the lease key and id answered 1 on both."""
        path = self.rules_file()
        r = self.redis()
        cs = [RawConn(self.rules_node(None, "local", path).port),
              RawConn(self.rules_node(r.url(), "redis", path).port)]
        for c in cs:
            self.addCleanup(c.close)
        leased_check_sequence(self, cs, lambda name: r.cmd("ZCARD", name))

    def test_check_leases_module_replicated(self):
        """RL.CHECK's leases on the module (RL.HOLDCHECK) replicated: a
        replica of the module's Redis holds the same leases with the same
        ids and expiries, the same id counter and the same rate state --
        for a node sending client time (the command verbatim) and one on
        Redis's clock (AT now added); a new id counter's seed is sent
        before the command.  (The module's path takes RL.CHECK's leases:
        CheckLeasesModule.)"""
        path = self.rules_file()
        m = harness.RedisServer(module_args=["trust-client-time", "yes",
                                             "max-client-skew", "7d"]).start()
        self.addCleanup(m.cleanup)
        rep = harness.RedisServer(module_args=["trust-client-time", "yes",
                                               "max-client-skew", "7d"]).start()
        self.addCleanup(rep.cleanup)
        self.assertEqual(m.cmd("CONFIG", "SET", "repl-diskless-sync-delay", "0"), b"OK")
        self.assertEqual(rep.cmd("REPLICAOF", harness.HOST, str(m.port)), b"OK")
        until = harness.deadline(30 * harness.SLOW)
        while "state=online" not in m.cmd("INFO", "replication").decode():
            self.assertLess(time.monotonic(), until, "the replica never came online")
            time.sleep(0.05)
        at = self.rules_node(m.url(), "at", path)
        own = harness.Server("--backend", m.url(), "--backend-timeout", "5s", "--rules", path,
                             name=self.id() + "-own")
        own.start()
        self.addCleanup(own.cleanup)
        ids = []
        for s, user, extra in ((at, "a", ("AT", str(T))), (own, "b", ())):
            s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
            with RawConn(s.port) as c:
                for _ in range(3):  # 2 leases, then a denial
                    a = c.cmd("RL.CHECK", "llm", *extra, "DESCRIPTOR", "user", user)
                    ids += [i for _, i in a[-1]]
        self.assertEqual(len(ids), 4)
        # a write of this connection's after the nodes' (the stream is in
        # order): once the replica shows it, it has them all
        self.assertEqual(m.cmd("SET", "synced", "1"), b"OK")
        until = harness.deadline(30 * harness.SLOW)
        while rep.cmd("EXISTS", "synced") != 1:
            self.assertLess(time.monotonic(), until, "the replica never caught up")
            time.sleep(0.02)
        held = []
        for user in (b"a", b"b"):
            key = b"llm|user=%s|conc" % user
            hh, hl = lease_name(b"h", key), lease_name(b"l", key)
            got = m.cmd("ZRANGE", hl, "0", "-1", "WITHSCORES")
            self.assertEqual(len(got), 4, got)
            held += [int(x) for x in got[::2]]
            self.assertEqual(rep.cmd("ZRANGE", hl, "0", "-1", "WITHSCORES"), got, user)
            self.assertEqual(rep.cmd("HGETALL", hh), m.cmd("HGETALL", hh), user)
        self.assertEqual(sorted(held), sorted(ids))
        keys = sorted(m.cmd("KEYS", "sl:m1:*"))
        self.assertEqual(len(keys), 2, keys)
        self.assertEqual(sorted(rep.cmd("KEYS", "sl:m1:*")), keys)
        for k in keys:
            self.assertEqual(rep.cmd("DUMP", k), m.cmd("DUMP", k), k)

    def test_lease_key_names(self):
        """A lease's Redis keys: "<domain>|...|conc" under the domain's tag,
        any other key under its own; keys whose '{' and '}' would shift a
        naive tag never share a lease set (max 1 each: every first acquire
        allowed, every second denied) and get the names the docs give."""
        r = self.redis()
        keys = [b"a}b|x|conc", b"ab}|x|conc", b"a}|bx|conc", b"a|}bx|conc", b"{a}|x|conc",
                b"{a|x|conc", b"a|x|conc", b"a|x|conc}", b"a|x|conc{", b"}a|x|conc",
                b"a%7C|x|conc", b"a%|x|conc", b"%%|x|conc", b"|x|conc", b"x|conc", b"ab|conc",
                b"a|x|conc}|conc", b"a}b", b"a}b|x", b"{a}b|x|conc}", b"llm|user=u|conc"]
        with RawConn(self.node(r, "names").port) as c:
            for k in keys:
                self.assertEqual(c.cmd("RL.ACQUIRE", k, "1", "TTL", "60000", "AT", str(T))[:6],
                                 [1, 1, 0, 0, 60000, 0], k)
            for k in keys:
                self.assertEqual(c.cmd("RL.ACQUIRE", k, "1", "AT", str(T + 1))[:4],
                                 [0, 1, 0, 59999], k)
        got = sorted(r.cmd("KEYS", "sl:hl:*"))
        self.assertEqual(got, sorted(lease_name(b"l", k) for k in keys))
        self.assertEqual(sorted(r.cmd("KEYS", "sl:hh:*")),
                         sorted(lease_name(b"h", k) for k in keys))
        self.assertIn(b"sl:hl:{a}b}|x|conc", got)
        self.assertIn(b"sl:hl:{a}b}", got)
        self.assertIn(b"sl:hl:{|x|conc}", got)  # no domain: the whole key
        self.assertIn(b"sl:hl:{a%}7C|x|conc", got)  # "a|": one byte escaped as %7C

    def fleet(self, trust):
        r = self.redis()
        return r, [self.node(r, "n%d" % i, trust=trust) for i in range(NODES)]

    def test_leases_fleet(self):
        _, nodes = self.fleet(trust=False)
        N, PER = 4, 6
        lock, held, worst, errors = threading.Lock(), [0], [0], []
        got = [[] for _ in range(NODES * 2)]

        def grab(j):
            try:
                with RawConn(nodes[j % NODES].port, timeout=30) as c:
                    c.send(b"".join(encode("RL.ACQUIRE", "hot", str(N), "TTL", "60s")
                                    for _ in range(PER)))
                    for a in c.read_replies(PER, timeout=60 * harness.SLOW):
                        if a[0] == 1:
                            got[j].append(a[6])
            except Exception as e:
                errors.append(repr(e))

        def churn(j):
            """acquire, count, uncount, release: held never passes N"""
            try:
                with RawConn(nodes[j % NODES].port, timeout=30) as c:
                    for _ in range(15):
                        a = c.cmd("RL.ACQUIRE", "churn", str(N), "TTL", "60s")
                        if a[0] != 1:
                            continue
                        with lock:
                            held[0] += 1
                            worst[0] = max(worst[0], held[0])
                        with lock:
                            held[0] -= 1
                        if c.cmd("RL.RELEASE", "churn", str(a[6])) != 1:
                            errors.append("a held lease released: not 1")
            except Exception as e:
                errors.append(repr(e))

        for fn in (grab, churn):
            ths = [threading.Thread(target=fn, args=(j,)) for j in range(NODES * 2)]
            for th in ths:
                th.start()
            for th in ths:
                th.join(120 * harness.SLOW)
        self.assertEqual(errors, [])
        ids = [i for g in got for i in g]
        self.assertEqual(len(ids), N)  # exactly N of 36 asks, across 3 nodes
        self.assertEqual(len(set(ids)), N)
        self.assertLessEqual(worst[0], N)
        self.assertGreaterEqual(worst[0], 1)
        with RawConn(nodes[0].port) as c:
            for i in ids:
                self.assertEqual(c.cmd("RL.RELEASE", "hot", str(i)), 1)
            self.assertEqual(c.cmd("RL.ACQUIRE", "hot", str(N), "TTL", "60s")[:3], [1, N, N - 1])

    def test_reserve_settle_fleet(self):
        _, nodes = self.fleet(trust=True)
        PER, L = 10, 1000000
        limits = {"fixed-window": ("ALGO", "fixed-window"),
                  "token-bucket": ("ALGO", "token-bucket")}
        actuals, errors = [], []
        lock = threading.Lock()

        def client(j):
            try:
                with RawConn(nodes[j % NODES].port, timeout=30) as c:
                    for i in range(PER):
                        for name, opt in limits.items():
                            est, act = 50 + j, (i * 37 + j * 11) % 120
                            a = c.cmd("RL.RESERVE", "tok:" + name, str(L), "1h", "COST",
                                      str(est), *opt, "AT", str(T))
                            if a[0] != 1:
                                errors.append("denied: %r" % (a,))
                                continue
                            s = c.cmd("RL.SETTLE", "tok:" + name, str(a[6]), str(act))
                            if not isinstance(s, list) or s[0] != 1:
                                errors.append("settle: %r" % (s,))
                                continue
                            with lock:
                                actuals.append((name, act))
            except Exception as e:
                errors.append(repr(e))

        ths = [threading.Thread(target=client, args=(j,)) for j in range(NODES * 2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120 * harness.SLOW)
        self.assertEqual(errors, [])
        with RawConn(nodes[1].port) as c:
            for name, opt in limits.items():
                total = sum(a for n, a in actuals if n == name)
                self.assertEqual(len([1 for n, _ in actuals if n == name]), NODES * 2 * PER)
                peek = c.cmd("RL.PEEK", "tok:" + name, str(L), "1h", *opt, "COST", "0",
                             "AT", str(T))
                self.assertEqual(peek[2], L - total, name)


class _LeasesApart:
    """RL.CHECK's concurrency leases where keys are spread: a Redis Cluster
    (CheckLeasesCluster) or a ring of standalone servers (CheckLeasesRing).
    A check's leases live under its domain's hash tag (holds.c), so one
    script call holds the leases and the rates on the domain's server;
    RL.ACQUIRE / RL.RELEASE on the lease key go there too.  The servers
    are the class's: a local-backend sluiced and two on the spread backend,
    all with LLM_RULES; each test uses keys of its own."""

    @classmethod
    def setUpClass(cls):
        d = tempfile.mkdtemp(prefix="sluice-holds-apart-")
        cls.addClassCleanup(shutil.rmtree, d, True)
        path = write_rules(d)
        backend = cls.start_backend()
        cls.local = cls.sluiced(path, None, "local")
        cls.nodes = [cls.sluiced(path, backend, "n%d" % i) for i in range(2)]

    @classmethod
    def sluiced(cls, path, backend, name):
        args = ("--backend", backend, "--backend-timeout", "5s") if backend else ()
        s = harness.Server(*args, "--rules", path, trust_client_time=True,
                           name="%s-%s" % (cls.__name__, name))
        s.start()
        cls.addClassCleanup(s.cleanup)
        if backend:
            s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        return s

    def conn(self, s):
        c = RawConn(s.port, timeout=30)
        self.addCleanup(c.close)
        return c

    def test_check_leases_same_as_local(self):
        """The single server's sequence (leased_check_sequence: two leases
        of N = 2 and a denial with retry_after, RL.RELEASE of the reply's
        key and id, a rate denial taking no lease, TTL expiry, shadow),
        every reply equal to the local backend's field by field; the lease
        sets on the server of the domain's counters, and on no other."""
        home = self.home(b"llm")

        def zcard(name):
            """On home; none elsewhere (a ring's other servers: 0; a
            Cluster's other masters: MOVED, the slot is not theirs)."""
            for r in self.servers():
                if r is not home:
                    n = flat(r.cmd("ZCARD", name))
                    self.assertTrue(n == 0 or str(n).startswith("ERR:MOVED "), (name, n))
            return home.cmd("ZCARD", name)

        leased_check_sequence(self, [self.conn(self.local), self.conn(self.nodes[0])], zcard)
        self.assertNotEqual(home.cmd("KEYS", "sl:?1:{llm}|user=u1*"), [])  # the rates there too

    def test_acquire_release_go_with_the_domain(self):
        """RL.ACQUIRE on a check's lease key (a user whose whole lease key
        hashes elsewhere than "llm") shares the check's count, through
        either node; RL.RELEASE through the other node gives it back.  A
        user's own key "jobs|nightly|conc" lives with "jobs", a plain key
        with itself; their replies are RL.ACQUIRE's as anywhere."""
        home = self.home(b"llm")
        user = next((u for u in ("w%d" % i for i in range(200))
                     if len(self.servers()) == 1 or
                     self.home(b"llm|user=%s|conc" % u.encode()) is not home), None)
        self.assertIsNotNone(user, "no user whose lease key hashes away from llm")
        key = "llm|user=%s|conc" % user
        n0, n1 = self.conn(self.nodes[0]), self.conn(self.nodes[1])
        a = n0.cmd("RL.ACQUIRE", key, "2", "TTL", "10000", "AT", str(T))
        self.assertEqual(a[:6], [1, 2, 1, 0, 10000, 0])
        c1 = n1.cmd(*[str(x) for x in llm(user, 1, 1, T + 1)])
        self.assertEqual(c1[:7], [1, 2, 0, 0, 10000, 0,
                                  [b"OK", b"llm.user#concurrency", 2, 0, 0, 10000]])
        self.assertEqual(c1[8][0][0], key.encode())
        c2 = n0.cmd(*[str(x) for x in llm(user, 1, 1, T + 2)])
        self.assertEqual(c2[:7], [0, 2, 0, 9998, 9999, 0,
                                  [b"OVER_LIMIT", b"llm.user#concurrency", 2, 0, 9998, 9999]])
        self.assertEqual(c2[8], [])
        self.assertEqual(home.cmd("ZCARD", lease_name(b"l", key.encode())), 2)
        self.assertEqual(n1.cmd("RL.RELEASE", key, str(a[6])), 1)
        self.assertEqual(n0.cmd("RL.RELEASE", key, str(a[6])), 0)
        c3 = n0.cmd(*[str(x) for x in llm(user, 1, 1, T + 3)])
        self.assertEqual(c3[0], 1)
        for c, lk, lid in ((n1, key, c1[8][0][1]), (n0, key, c3[8][0][1])):
            self.assertEqual(c.cmd("RL.RELEASE", lk, str(lid)), 1)
        self.assertEqual(home.cmd("ZCARD", lease_name(b"l", key.encode())), 0)
        for k, tag in ((b"jobs|nightly|conc", b"jobs"), (b"plain:%s" % user.encode(), None)):
            a = n0.cmd("RL.ACQUIRE", k, "1", "TTL", "5000", "AT", str(T))
            self.assertEqual(a[:6], [1, 1, 0, 0, 5000, 0], k)
            self.assertEqual(self.home(tag or k).cmd("ZCARD", lease_name(b"l", k)), 1, k)
            self.assertEqual(n1.cmd("RL.RELEASE", k, str(a[6])), 1, k)

    def test_fleet_never_more_than_n(self):
        """Checks of one key (`job`: a rate and concurrency 2) from four
        clients on two sluiced nodes at once: exactly 2 of 24 pipelined
        checks granted (distinct ids); then acquire-count-release loops on
        another key never see more than 2 held; the 2 released through the
        other node, the next check has 1 left."""
        N = 2
        nodes = self.nodes

        def check(c, job, at=T):
            return c.cmd("RL.CHECK", "llm", "AT", str(at), "DESCRIPTOR", "job", job)

        lock, held, worst, errors = threading.Lock(), [0], [0], []
        got = [[] for _ in range(4)]

        def grab(j):
            try:
                with RawConn(nodes[j % 2].port, timeout=30) as c:
                    c.send(b"".join(encode("RL.CHECK", "llm", "AT", str(T), "DESCRIPTOR", "job",
                                           "grab") for _ in range(6)))
                    for rep in c.read_replies(6, timeout=60 * harness.SLOW):
                        if rep[0] == 1:
                            got[j].append(rep[7][0][1])
                        elif rep[7] != []:
                            errors.append("a denied check holds leases: %r" % (rep,))
            except Exception as e:
                errors.append(repr(e))

        def churn(j):
            try:
                with RawConn(nodes[j % 2].port, timeout=30) as c:
                    for _ in range(10):
                        rep = check(c, "churn")
                        if rep[0] != 1:
                            continue
                        with lock:
                            held[0] += 1
                            worst[0] = max(worst[0], held[0])
                        with lock:
                            held[0] -= 1
                        lk, lid = rep[7][0]
                        if c.cmd("RL.RELEASE", lk, str(lid)) != 1:
                            errors.append("a held lease released: not 1")
            except Exception as e:
                errors.append(repr(e))

        for fn in (grab, churn):
            ths = [threading.Thread(target=fn, args=(j,)) for j in range(4)]
            for th in ths:
                th.start()
            for th in ths:
                th.join(120 * harness.SLOW)
        self.assertEqual(errors, [])
        ids = [i for g in got for i in g]
        self.assertEqual(len(ids), N)  # exactly N of 24, across 2 nodes
        self.assertEqual(len(set(ids)), N)
        self.assertLessEqual(worst[0], N)
        self.assertGreaterEqual(worst[0], 1)
        with RawConn(nodes[1].port) as c:
            for i in ids:
                self.assertEqual(c.cmd("RL.RELEASE", "llm|job=grab|conc", str(i)), 1)
            rep = check(c, "grab")
            self.assertEqual(rep[6], [b"OK", b"llm.job#concurrency", N, N - 1, 0, 3600000])


class CheckLeasesCluster(_LeasesApart, unittest.TestCase):
    """_LeasesApart in a Redis Cluster of three masters."""

    @classmethod
    def start_backend(cls):
        cls.cluster = harness.RedisCluster(3)
        cls.addClassCleanup(cls.cluster.cleanup)
        cls.cluster.start()
        return cls.cluster.url()

    def servers(self):
        return self.cluster.nodes

    def home(self, tag):
        """The master of tag's slot."""
        return self.cluster.node_of_slot(self.cluster.keyslot(tag))


class CheckLeasesModule(_LeasesApart, unittest.TestCase):
    """_LeasesApart on one Redis with the sluice module: RL.CHECK's leases
    by the module's RL.HOLDCHECK (the rates on the module's state, the
    leases in RL.ACQUIRE's keys, all-or-none in one command)."""

    @classmethod
    def start_backend(cls):
        cls.redis = harness.RedisServer(module_args=["trust-client-time", "yes",
                                                     "max-client-skew", "7d"])
        cls.addClassCleanup(cls.redis.cleanup)
        cls.redis.start()
        return cls.redis.url()

    def servers(self):
        return [self.redis]

    def home(self, tag):
        return self.redis

    def test_rates_on_the_module_keys(self):
        """The rates of a leased check are counted where every RL.CHECK on
        the module's path counts them -- the module's values -- and never
        on the script's keys (one counter a rule): a check without the
        concurrency descriptor sees the count."""
        c = self.conn(self.nodes[1])
        got = c.cmd("RL.CHECK", "llm", "COSTS", "1", "300", "AT", str(T), "DESCRIPTOR", "user",
                    "r1", "DESCRIPTOR", "tokens", "r1")
        self.assertEqual(got[0], 1)
        lk, lid = got[-1][0]
        self.assertEqual(c.cmd("RL.RELEASE", lk, str(lid)), 1)
        self.assertEqual(c.cmd("RL.CHECK", "llm", "COST", "0", "AT", str(T), "DESCRIPTOR",
                               "tokens", "r1")[:3], [1, 1000, 700])
        self.assertEqual(self.redis.cmd("KEYS", "sl:[0-9][0-9]:*"), [])
        mine = self.redis.cmd("KEYS", "sl:m1:{llm}|*=r1*")
        self.assertEqual(len(mine), 2, mine)  # requests and tokens of r1
        for k in mine:
            self.assertEqual(self.redis.cmd("TYPE", k), b"sluice-rl", k)


class CheckLeasesRing(_LeasesApart, unittest.TestCase):
    """_LeasesApart on a ring of three standalone Redis servers; the owner
    of a tag from test_ring.py's model of the ring."""

    @classmethod
    def start_backend(cls):
        cls.ring = [harness.RedisServer() for _ in range(3)]
        for r in cls.ring:
            cls.addClassCleanup(r.cleanup)
            r.start()
        return ",".join(r.url() for r in cls.ring)

    def servers(self):
        return self.ring

    def home(self, tag):
        ids = [test_ring.ident(r) for r in self.ring]
        return self.ring[ids.index(test_ring.ring_owner(ids, tag.decode()))]


if __name__ == "__main__":
    unittest.main()
