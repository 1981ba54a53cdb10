"""test_lease_script.py -- the script's lease ops (T: take, R: return;
src/backend/redis/sluice.lua, docs/fleet.md "Leases") against a model of
leases, on a real redis-server, at client time (so every step is exact).

Two things a user would notice:
- every reply of T, R and D is the model's, field for field (the six
  fields, the units leased, the lease's ttl and tag, the units put back);
- several nodes taking, spending (at any time before their lease's
  deadline), returning late or never, and deciding per request never admit
  more than the limit: every window's admissions are <= L (fixed-window);
  at every admission, this window's admissions so far plus the previous
  window's weighted by what is left of this one are <= L (sliding-window:
  SPEC 2's weighted counter, fed the admissions); at every admission, the
  admissions of the P buckets ending with its own are <= L
  (sliding-buckets: what a per-request sliding-buckets promises); and the
  admissions, fed to a strict bucket one by one, are all allowed
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
FW, SW, SB, TB, GCRA = 0, 2, 3, 4, 5


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


def weighed_below(p, r, W):
    """The smallest offset e in [0, W] at which p * (W - e) // W <= r."""
    if p == 0:
        return 0
    k = ((r + 1) * W - 1) // p
    return 0 if k >= W else W - k


class SlidingModel:
    """sliding-window with leases: the units leased are in the current
    window's count (cur); prev is the window before's, weighted by what is
    left of the current one."""

    def __init__(self, L, W):
        self.L, self.W = L, W
        self.clock, self.cur, self.prev = None, 0, 0

    def _at(self, now):
        W = self.W
        t = now if self.clock is None or now > self.clock else self.clock
        if self.clock is not None and t // W == self.clock // W + 1:
            self.cur, self.prev = 0, self.cur
        elif self.clock is None or t // W != self.clock // W:
            self.cur, self.prev = 0, 0
        self.clock = t
        return t

    def _reset(self, e):
        W = self.W
        if self.cur > 0:
            return W - e + weighed_below(self.cur, 0, W)
        return max(weighed_below(self.prev, 0, W), e) - e

    def decide(self, now, cost, want=None):
        L, W = self.L, self.W
        t = self._at(now)
        e = t % W
        used = self.cur + self.prev * (W - e) // W
        ok = used + cost <= L
        retry = 0
        if ok:
            self.cur += cost
            used += cost
        elif cost > L:
            retry = -1
        else:
            r = L - cost - self.cur
            e1 = weighed_below(self.prev, r, W) if r >= 0 else None
            if r >= 0 and e1 < W and e1 > e:
                retry = e1 - e
            else:
                e2 = weighed_below(self.cur, L - cost, W)
                retry = W - e + e2 if e2 < W else W - e + W
        x = 0
        if want is not None and ok:
            x = max(0, min(want - cost, (L - used) // 2))
            self.cur += x
            used += x
        six = [1 if ok else 0, L, max(0, L - used), retry, self._reset(e), 0]
        if want is None:
            return six
        return six + ([x, W - e, t // W] if ok else [0, 0, 0])

    def ret(self, now, back, taken, tag):
        t = self._at(now)
        if t // self.W != tag:
            return 0
        b = min(back, self.cur)
        self.cur -= b
        return b


def sliding_counter_allows_all(events, L, W):
    """Feeds the admissions (t, cost), in time order, to SPEC 2's weighted
    counter: at each one, the admissions of its window so far (itself
    included) plus the window before's weighted by what is left of this
    one must be <= L.  True when they all are."""
    per = {}
    for t, c in sorted(events):
        i, e = t // W, t % W
        per[i] = per.get(i, 0) + c
        if per[i] + per.get(i - 1, 0) * (W - e) // W > L:
            return False
    return True


class BucketsModel:
    """sliding-buckets with leases: P counters of g = W / P ms each, the
    window the P buckets ending with the current one; the units leased are
    in the current bucket's counter, and go back into it (R) while that
    bucket is still in the window."""

    def __init__(self, L, W, P):
        self.L, self.W, self.P, self.g = L, W, P, W // P
        self.clock, self.c = None, [0] * P

    def _at(self, now):
        t = now if self.clock is None or now > self.clock else self.clock
        if self.clock is not None:
            bo, b = self.clock // self.g, t // self.g
            for k in range(1, min(b - bo, self.P) + 1):  # buckets that slid out
                self.c[(bo + k) % self.P] = 0
        self.clock = t
        return t

    def decide(self, now, cost, want=None):
        L, W, P, g = self.L, self.W, self.P, self.g
        t = self._at(now)
        b, tm = t // g, t % g
        ok = sum(self.c) + cost <= L
        if ok:
            self.c[b % P] += cost
        retry = 0
        if not ok and cost > L:
            retry = -1
        elif not ok:  # the first bucket end after which enough has slid out
            need, freed = sum(self.c) + cost - L, 0
            for k in range(1, P + 1):
                freed += self.c[(b + k - P) % P]
                if freed >= need:
                    retry = k * g - tm
                    break
        x = 0
        if want is not None and ok:
            x = max(0, min(want - cost, (L - sum(self.c)) // 2))
            self.c[b % P] += x
        reset = 0
        if sum(self.c) > 0:  # until the newest bucket holding a count slides out
            d = 0
            while d > -P and self.c[(b + d) % P] == 0:
                d -= 1
            reset = (d + P) * g - tm
        six = [1 if ok else 0, L, max(0, L - sum(self.c)), retry, reset, 0]
        if want is None:
            return six
        return six + ([x, g - tm, b] if ok else [0, 0, 0])

    def ret(self, now, back, taken, tag):
        t = self._at(now)
        b = t // self.g
        if back <= 0 or not b - self.P < tag <= b:
            return 0
        j = tag % self.P
        put = min(back, self.c[j])
        self.c[j] -= put
        return put


def buckets_allow_all(events, L, W, P):
    """At each admission (t, cost), the admissions of the P buckets of W / P
    ms ending with its own (itself included) must be <= L: what a
    sliding-buckets limit decided per request promises.  True when they
    all are."""
    g, per = W // P, {}
    for t, c in sorted(events):
        b = t // g
        per[b] = per.get(b, 0) + c
        if sum(per.get(k, 0) for k in range(b - P + 1, b + 1)) > L:
            return False
    return True


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

    def test_sliding_window_take_spend_return(self):
        key = "sl:20:{sw-basic}"
        f = [SW, 100, 1000, 0, 0, 0, 1]
        # 41 in the count of window 1 (1 admitted, 40 leased): it drains,
        # weighted, by the end of window 2
        self.assertEqual(self.call(key, "T", 1500, f, 41), [1, 100, 59, 0, 1476, 0, 40, 500, 1])
        # in window 2 they weigh 41 * 750 / 1000 = 30: a return of window
        # 1's lease now puts nothing back
        self.assertEqual(self.call(key, "D", 2250, f), [1, 100, 69, 0, 751, 0])
        self.assertEqual(self.call(key, "R", 2250, [SW, 100, 1000, 0, 0, 0, 40], 40, 1), 0)
        # a lease of window 2: at most half of what is left; back in its window
        self.assertEqual(self.call(key, "T", 2300, f, 11), [1, 100, 60, 0, 1617, 0, 10, 700, 2])
        self.assertEqual(self.call(key, "R", 2400, [SW, 100, 1000, 0, 0, 0, 10], 10, 2), 10)
        self.assertEqual(self.call(key, "D", 2400, f), [1, 100, 73, 0, 1267, 0])
        self.assertEqual(self.call(key, "T", 2400, f, 300)[6], 36)  # 72 left: 36 leased

    def test_sliding_buckets_take_spend_return(self):
        """A lease is units of the current bucket: valid to that bucket's
        end (ttl), tagged with its index; R puts units back into it while it
        is in the window, even after its end, and not once it slid out."""
        key = "sl:30:{sb-basic}"
        m = BucketsModel(100, 1000, 10)  # buckets of 100 ms
        f = [SB, 100, 1000, 0, 10, 0, 1]
        steps = [  # (op, now, cost, want or (back, taken, tag), the script's reply)
            # bucket 52 (5200..5299): 1 admitted, 49 leased (half of 99, down)
            ("T", 5230, 1, 50, [1, 100, 50, 0, 970, 0, 49, 70, 52]),
            ("D", 5240, 1, None, [1, 100, 49, 0, 960, 0]),
            # back into bucket 52 after its end (bucket 53), while in the window
            ("R", 5350, 30, (49, 52), 30),
            ("D", 5350, 1, None, [1, 100, 78, 0, 950, 0]),
            # bucket 52 slides out at 6200, its 21 with it (2 admitted, 19 leased)
            ("D", 6200, 1, None, [1, 100, 98, 0, 1000, 0]),
            ("R", 6200, 19, (49, 52), 0),
            # a lease is at most half of what is left
            ("T", 6210, 1, 300, [1, 100, 49, 0, 990, 0, 48, 90, 62]),
            ("T", 6210, 1, 300, [1, 100, 24, 0, 990, 0, 24, 90, 62]),
            ("T", 6210, 1, 300, [1, 100, 12, 0, 990, 0, 11, 90, 62]),
            # refused: the window is full until enough slides out
            ("T", 6290, 20, 300, [0, 100, 12, 910, 910, 0, 0, 0, 0]),
        ]
        for op, now, cost, arg, want in steps:
            if op == "R":
                got = self.call(key, "R", now, f[:6] + [cost], *arg)
                self.assertEqual(got, m.ret(now, cost, *arg), (op, now))
            elif op == "T":
                got = self.call(key, "T", now, f[:6] + [cost], arg)
                self.assertEqual(got, m.decide(now, cost, arg), (op, now))
            else:
                got = self.call(key, "D", now, f[:6] + [cost])
                self.assertEqual(got, m.decide(now, cost), (op, now))
            self.assertEqual(got, want, (op, now))

    def test_buckets_check_catches_a_lease_spent_late(self):
        """The sliding-buckets check of the model runs is not one that
        cannot fail: a lease of bucket 0 (L 4, W 1000, P 2: buckets of 500
        ms) spent before its deadline (500) is fine; spent at it, in bucket 1,
        the fleet admits 5 in the window of buckets 1 and 2."""
        key = "sl:30:{sb-late}"
        f = [SB, 4, 1000, 0, 2, 0, 1]
        got = self.call(key, "T", 400, f, 100)
        self.assertEqual(got, [1, 4, 2, 0, 600, 0, 1, 100, 0])  # 1 leased, to 500
        admitted = [(400, 1)]
        for _ in range(2):
            self.assertEqual(self.call(key, "D", 400, f)[0], 1)
            admitted.append((400, 1))
        self.assertEqual(self.call(key, "D", 400, f)[0], 0)  # 3 + 1 leased: full
        for _ in range(4):  # bucket 0 has slid out at 1000
            self.assertEqual(self.call(key, "D", 1000, f)[0], 1)
        after = [(1000, 1)] * 4
        self.assertTrue(buckets_allow_all(admitted + [(499, 1)] + after, 4, 1000, 2))
        self.assertFalse(buckets_allow_all(admitted + [(500, 1)] + after, 4, 1000, 2))

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
        elif algo == SW:
            L, W, B = rng.choice([(50, 1000), (7, 300), (1000, 2000)]) + (0,)
            model = SlidingModel(L, W)
        elif algo == SB:
            L, W, P = rng.choice([(50, 1000, 10), (7, 300, 3), (1000, 2000, 4), (20, 500, 1)])
            B = 0
            model = BucketsModel(L, W, P)
        else:
            L, W = rng.choice([(50, 1000), (5, 100), (400, 3000)])
            B = rng.choice([0, L, 2 * L])
            model = BucketModel(L, W, B or L)
        key = "sl:%d0:{model-%d-%d}" % (algo, algo, seed)
        f = [algo, L, W, B, P if algo == SB else 0, 0]
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
        elif algo == SW:
            self.assertTrue(sliding_counter_allows_all(admitted, L, W))
        elif algo == SB:
            self.assertTrue(buckets_allow_all(admitted, L, W, P))
        else:
            self.assertTrue(strict_bucket_allows_all(admitted, L, W, B or L))
        return admitted

    def test_model_fixed_window(self):
        for seed in range(4):
            self.run_model(FW, seed)

    def test_model_sliding_window(self):
        for seed in range(4):
            self.run_model(SW, seed)

    def test_model_sliding_buckets(self):
        for seed in range(5):  # the fourth draws P = 1 (a fixed window of buckets)
            self.run_model(SB, seed)

    def test_model_token_bucket(self):
        for seed in range(4):
            self.run_model(TB, seed)

    def test_model_gcra(self):
        for seed in range(3):
            self.run_model(GCRA, seed)


if __name__ == "__main__":
    unittest.main()
