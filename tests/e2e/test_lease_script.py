"""test_lease_script.py -- the script's lease ops (T: take, R: return;
src/backend/redis/sluice.lua, docs/fleet.md "Leases") against a model of
leases, on a real redis-server, at client time (so every step is exact).

Two things a user would notice:
- every reply of T, R and D is the model's, field for field (the six
  fields, the units leased, the lease's ttl and tag, the units put back);
- several nodes taking, spending (at any time before their lease's
  deadline), returning late or never, and deciding per request never admit
  more than the limit: every window's admissions are <= L (fixed-window),
  and the admissions, fed to a strict bucket one by one, are all allowed
  (token-bucket, gcra).
"""
# Drives redis-server only (no sluiced): once, against the plain build.
# sluice-e2e: plain-only

import os
import random
import unittest

import harness
from harness import RawConn

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "backend",
                      "redis", "sluice.lua")
EPOCH = 250  # the script's LEASE_EPOCH
FW, TB, GCRA = 0, 4, 5


def cdiv(a, b):
    return -((-a) // b)


class FixedModel:
    """fixed-window with leases: the units leased are in the window's count."""

    def __init__(self, L, W):
        self.L, self.W = L, W
        self.clock, self.count = None, 0

    def _at(self, now):
        t = now if self.clock is None or now > self.clock else self.clock
        if self.clock is None or self.clock // self.W != t // self.W:
            self.count = 0
        self.clock = t
        return t

    def decide(self, now, cost, want=None):
        L, W = self.L, self.W
        t = self._at(now)
        e = t % W
        ok = self.count + cost <= L
        if ok:
            self.count += cost
        x = 0
        if want is not None and ok:
            x = max(0, min(want - cost, (L - self.count) // 2))
            self.count += x
        retry = 0 if ok else (-1 if cost > L else W - e)
        six = [1 if ok else 0, L, max(0, L - self.count), retry, W - e if self.count > 0 else 0, 0]
        if want is None:
            return six
        return six + ([x, W - e, t // W] if ok else [0, 0, 0])

    def ret(self, now, back, taken, tag):
        t = self._at(now)
        if t // self.W != tag:
            return 0
        b = min(back, self.count)
        self.count -= b
        return b


class BucketModel:
    """token-bucket / gcra with leases: d is the deficit in 1/W tokens; the
    units out, by epoch (O0 of epoch e, O1 of e - 1), floor the refill."""

    def __init__(self, L, W, B):
        self.L, self.W, self.B = L, W, B
        self.clock, self.d, self.e, self.O0, self.O1 = None, 0, None, 0, 0

    def _at(self, now, cost):
        L, W = self.L, self.W
        clock = now if self.clock is None else self.clock
        t = now if now > clock else clock
        if self.e is not None:
            ce = t // EPOCH
            if ce == self.e + 1:
                self.e, self.O0, self.O1 = ce, 0, self.O0
            elif ce != self.e:
                self.e, self.O0, self.O1 = ce, 0, 0
            if self.O0 + self.O1 == 0:
                self.e = None
        O = self.O0 + self.O1 if self.e is not None else 0
        low = min(O * W, self.d)
        refill = (t - clock) * L
        self.d = low if refill >= self.d - low else self.d - refill
        self.clock = t
        return t

    def decide(self, now, cost, want=None):
        L, W, B = self.L, self.W, self.B
        BW = B * W
        t = self._at(now, cost)
        before = self.d
        ok, retry = False, 0
        if cost > B:
            retry = -1
        elif cost * W <= BW - self.d:
            ok = True
            self.d += cost * W
        else:
            retry = cdiv(cost * W - (BW - before), L)
        x = 0
        if want is not None and ok:
            x = max(0, min(want - cost, (BW - self.d) // W // 2))
            self.d += x * W
            if self.e is None:
                self.e, self.O0, self.O1 = t // EPOCH, 0, 0
            self.O0 += x
        six = [1 if ok else 0, B, (BW - self.d) // W, retry, cdiv(self.d, L), 0]
        if want is None:
            return six
        return six + ([x, (self.e + 2) * EPOCH - t, self.e] if ok else [0, 0, 0])

    def ret(self, now, back, taken, tag):
        t = self._at(now, 0)
        if self.e is None or tag not in (self.e, self.e - 1):
            return 0
        if tag == self.e:
            taken = min(taken, self.O0)
            self.O0 -= taken
        else:
            taken = min(taken, self.O1)
            self.O1 -= taken
        back = min(back, taken)
        low = (self.O0 + self.O1) * self.W
        d2 = max(self.d - back * self.W, low)
        put = (self.d - d2) // self.W
        self.d = d2
        return put


def strict_bucket_allows_all(events, L, W, B):
    """Feeds the admissions (t, cost), in time order, to a strict bucket:
    True when every one is allowed."""
    d, clock = 0, None
    for t, c in sorted(events):
        if clock is not None:
            d = max(0, d - (t - clock) * L)
        clock = t
        if c * W > B * W - d:
            return False
        d += c * W
    return True


class LeaseScriptTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.redis = harness.RedisServer().start()
        cls.conn = RawConn(cls.redis.port)
        with open(SCRIPT, "rb") as f:
            cls.sha = cls.conn.cmd("SCRIPT", "LOAD", f.read()).decode()

    @classmethod
    def tearDownClass(cls):
        cls.conn.close()
        cls.redis.cleanup()

    def call(self, key, op, now, fields, *extra):
        return self.conn.cmd("EVALSHA", self.sha, 1, key, op, now, *fields, *extra)

    def test_refused_shapes(self):
        for op, args in (("T", []), ("R", [5])):
            r = self.call("k", op, 1000, [0, 10, 1000, 0, 0, 0, 1], *args)
            self.assertEqual(r, harness.RespError(
                "SLUICE args: op %s takes 1 key and %d arguments" % (op, 10 if op == "T" else 11)))

    def test_fixed_window_take_spend_return(self):
        key = "sl:00:{fw-basic}"
        m = FixedModel(100, 1000)
        f = [FW, 100, 1000, 0, 0, 0, 1]
        self.assertEqual(self.call(key, "T", 5200, f, 50), [1, 100, 50, 0, 800, 0, 49, 800, 5])
        self.assertEqual(m.decide(5200, 1, 50), [1, 100, 50, 0, 800, 0, 49, 800, 5])
        # a return within its window puts the units back; in another, nothing
        self.assertEqual(self.call(key, "R", 5500, [FW, 100, 1000, 0, 0, 0, 30], 49, 5), 30)
        self.assertEqual(self.call(key, "D", 5600, f), [1, 100, 79, 0, 400, 0])
        self.assertEqual(self.call(key, "R", 6000, [FW, 100, 1000, 0, 0, 0, 19], 49, 5), 0)
        self.assertEqual(self.call(key, "D", 6000, f), [1, 100, 99, 0, 1000, 0])
        # near the end of what is left, a take leases at most half of it
        self.assertEqual(self.call(key, "T", 6100, f, 200)[6], 49)  # 98 left: 49 leased
        self.assertEqual(self.call(key, "T", 6100, f, 200)[6], 24)  # 48 left
        self.assertEqual(self.call(key, "T", 6100, f, 200)[6], 11)  # 23 left

    def test_bucket_refill_stops_short_of_what_is_out(self):
        key = "sl:40:{tb-basic}"
        f = [TB, 100, 1000, 0, 0, 0, 1]  # 100 tokens a second, B = 100
        self.assertEqual(self.call(key, "T", 1000, f, 60), [1, 100, 50, 0, 500, 0, 49, 500, 4])
        # a second later the bucket would be full: it holds 100 - 49
        self.assertEqual(self.call(key, "D", 1100, f), [1, 100, 50, 0, 500, 0])
        self.assertEqual(self.call(key, "R", 1200, [TB, 100, 1000, 0, 0, 0, 20], 49, 4), 20)
        self.assertEqual(self.call(key, "D", 1200, f)[2], 70)  # 51 + 20 - 1
        # a lease of epoch 5 (t = 1250..1499) is settled at epoch 7 (t =
        # 1750): a return then puts nothing back, one before does
        self.assertEqual(self.call(key, "T", 1250, f, 10)[6:], [9, 500, 5])
        self.assertEqual(self.call(key, "R", 1750, [TB, 100, 1000, 0, 0, 0, 9], 9, 5), 0)
        self.assertEqual(self.call(key, "T", 1760, f, 10)[6:], [9, 490, 7])
        self.assertEqual(self.call(key, "R", 2249, [TB, 100, 1000, 0, 0, 0, 9], 9, 7), 9)

    def run_model(self, algo, seed, steps=1500):
        rng = random.Random(seed)
        if algo == FW:
            L, W, B = rng.choice([(50, 1000), (7, 300), (1000, 2000)]) + (0,)
            model = FixedModel(L, W)
        else:
            L, W = rng.choice([(50, 1000), (5, 100), (400, 3000)])
            B = rng.choice([0, L, 2 * L])
            model = BucketModel(L, W, B or L)
        key = "sl:%d0:{model-%d-%d}" % (algo, algo, seed)
        f = [algo, L, W, B, 0, 0]
        nodes = [None] * 3  # each: [units, taken, tag, deadline] or None
        admitted = []       # (t, cost)
        now = 10_000 + rng.randrange(1000)
        for _ in range(steps):
            now += rng.choice([0, 0, 1, 3, 17, 60, 200])
            n = rng.randrange(3)
            lease = nodes[n]
            cost = rng.choice([1, 1, 1, 2, 5])
            op = rng.random()
            if lease is not None and now < lease[3] and lease[0] >= cost and op < 0.6:
                lease[0] -= cost  # spent at this node, Redis not asked
                admitted.append((now, cost))
                continue
            if lease is not None and op < 0.8:
                back = lease[0] if rng.random() < 0.8 else rng.randrange(lease[0] + 1)
                got = self.call(key, "R", now, f + [back], lease[1], lease[2])
                self.assertEqual(got, model.ret(now, back, lease[1], lease[2]),
                                 "R at %d of %s" % (now, lease))
                nodes[n] = None
                continue
            if rng.random() < 0.3:
                got = self.call(key, "D", now, f + [cost])
                self.assertEqual(got, model.decide(now, cost), "D at %d" % now)
            else:
                want = rng.choice([1, 4, 16, 64, 300])
                got = self.call(key, "T", now, f + [cost], want)
                self.assertEqual(got, model.decide(now, cost, want), "T at %d" % now)
                if got[0] == 1 and got[6] > 0:
                    nodes[n] = [got[6], got[6], got[8], now + got[7]]  # an older lease: dropped
            if got[0] == 1:
                admitted.append((now, cost))
        if algo == FW:
            per = {}
            for t, c in admitted:
                per[t // W] = per.get(t // W, 0) + c
            self.assertLessEqual(max(per.values()), L)
        else:
            self.assertTrue(strict_bucket_allows_all(admitted, L, W, B or L))
        return admitted

    def test_model_fixed_window(self):
        for seed in range(4):
            self.run_model(FW, seed)

    def test_model_token_bucket(self):
        for seed in range(4):
            self.run_model(TB, seed)

    def test_model_gcra(self):
        for seed in range(3):
            self.run_model(GCRA, seed)


if __name__ == "__main__":
    unittest.main()
