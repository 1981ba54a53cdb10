"""test_fleet.py -- one limit across a fleet: three sluiced nodes deciding
through one real redis-server (--backend redis://), many clients hammering
the same keys through all three at once.  What a user would notice: per
window, the fleet admits exactly the limit -- never more, and not less when
demand is above it.

Two ways of knowing which window a request fell in:

- client time (--trust-client-time): every request of phase k carries
  AT = BASE + k*W, so a phase is exactly one window for every algorithm
  (fixed-window: one index; sliding-log: the previous phase's entries sit
  at t - W, outside (t - W, t]; token-bucket: W refills the whole bucket).
  Each phase must admit exactly L, for fixed-window, sliding-log and
  token-bucket, with the deny cache on (the default).
- RL.CHECK with two limits (a second and a minute), all-or-none: each
  phase admits exactly what both limits leave.
- Redis's clock (no AT): fixed-window on real time for three windows or
  more; every allowed reply's
  window is read from its reset_after (the window ends at a multiple of
  W on Redis's clock, which on this machine is ours), and within a window
  the allowed replies' `remaining` must be L-1 .. 0, each exactly once.
"""
# A heavy fleet test: run once, against the plain build (run_e2e.py).
# sluice-e2e: plain-only

import math
import os
import shutil
import tempfile
import threading
import time
import unittest

import harness
from harness import BASE, RawConn, encode

NODES = 3
CLIENTS_PER_NODE = 2


def hammer(port, commands, out, errors):
    """Sends `commands` (lists of args) pipelined on one connection to port
    and appends the replies to out, in order."""
    try:
        with RawConn(port, timeout=30) as c:
            c.send(b"".join(encode(*a) for a in commands))
            out.extend(c.read_replies(len(commands), timeout=60 * harness.SLOW))
    except Exception as e:  # reported by the test, not lost in a thread
        errors.append("%s: %r" % (port, e))


class FleetTest(unittest.TestCase):

    def start_fleet(self, trust=False, extra=()):
        r = harness.RedisServer().start()
        self.addCleanup(r.cleanup)
        nodes = []
        for i in range(NODES):
            # a generous backend timeout: under a sanitizer a slow answer
            # must not turn into the failure policy's
            s = harness.Server("--backend", r.url(), "--backend-timeout", "5s", *extra,
                               trust_client_time=trust, name="%s-node%d" % (self.id(), i))
            s.start()
            self.addCleanup(s.cleanup)
            nodes.append(s)
        return nodes

    def run_clients(self, nodes, commands_for):
        """One thread per client (CLIENTS_PER_NODE per node), client j
        sending commands_for(j); returns every reply, checked for errors."""
        replies, errors, threads = [], [], []
        for j in range(NODES * CLIENTS_PER_NODE):
            out = []
            replies.append(out)
            th = threading.Thread(target=hammer, args=(nodes[j % NODES].port, commands_for(j), out,
                                                       errors))
            threads.append(th)
            th.start()
        for th in threads:
            th.join(120 * harness.SLOW)
            self.assertFalse(th.is_alive(), "a client did not finish")
        self.assertEqual(errors, [])
        flat = [r for out in replies for r in out]
        for r in flat:
            self.assertIsInstance(r, list, "an error reply: %r" % (r,))
        return flat


class TestFleetClientTime(FleetTest):
    L, W = 20, 1000
    PHASES = 3 if harness.SANITIZED else 5
    PER_CLIENT = 12 if harness.SANITIZED else 40  # 6 clients: 72 / 240 per window, L = 20

    def check_algo(self, algo):
        nodes = self.start_fleet(trust=True)
        key = "fleet:" + algo
        for k in range(1, self.PHASES + 1):
            t = BASE + k * self.W
            cmd = ["RL.ALLOW", key, self.L, self.W, "ALGO", algo, "AT", t]
            # a pipelined burst, all of it to Redis; then, the denials known,
            # a second round the deny caches answer
            flat = self.run_clients(nodes, lambda j: [cmd] * self.PER_CLIENT)
            flat += self.run_clients(nodes, lambda j: [cmd] * 3)
            allowed = [r for r in flat if r[0] == 1]
            self.assertEqual(len(allowed), self.L,
                             "%s, window %d: the fleet admitted %d, the limit is %d"
                             % (algo, k, len(allowed), self.L))
            self.assertEqual(sorted(r[2] for r in allowed), list(range(self.L)),
                             "%s, window %d: each remaining value once" % (algo, k))
            for r in flat:
                if r[0] == 0:
                    self.assertEqual((r[1], r[2], r[5]), (self.L, 0, 0), r)
                    self.assertGreaterEqual(r[3], 1, r)
        hits = sum(n.info_int("backend_deny_cache_hits", "backend") for n in nodes)
        self.assertGreater(hits, 0, "the deny cache answered nothing")

    def test_fixed_window(self):
        self.check_algo("fixed-window")

    def test_sliding_log(self):
        self.check_algo("sliding-log")

    def test_token_bucket(self):
        self.check_algo("token-bucket")


class TestFleetCheck(FleetTest):
    """RL.CHECK with two limits on one descriptor (20 a second AND 50 a
    minute, all-or-none) through three nodes: phase k (one second, client
    time) admits exactly min(20, what the minute has left) -- 20, 20, 10,
    0, 0 -- whatever node a request went through."""

    RULES = ("domain: fleet\n"
             "descriptors:\n"
             "  - key: user\n"
             "    rate_limit:\n"
             "      - {unit: second, requests_per_unit: 20}\n"
             "      - {unit: minute, requests_per_unit: 50}\n")
    PER_CLIENT = 12 if harness.SANITIZED else 40

    def test_two_limits_all_or_none(self):
        d = tempfile.mkdtemp(prefix="sluice-fleet-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "fleet.yaml")
        with open(path, "w") as f:
            f.write(self.RULES)
        nodes = self.start_fleet(trust=True, extra=("--rules", path))
        for k, want in enumerate([20, 20, 10, 0, 0], start=1):
            t = BASE + k * 1000  # BASE is a whole day: the five phases share one minute
            cmd = ["RL.CHECK", "fleet", "AT", t, "DESCRIPTOR", "user", "u1"]
            flat = self.run_clients(nodes, lambda j: [cmd] * self.PER_CLIENT)
            flat += self.run_clients(nodes, lambda j: [cmd] * 3)
            allowed = sum(1 for r in flat if r[0] == 1)
            self.assertEqual(allowed, want, "phase %d: the fleet admitted %d, the limits allow %d"
                             % (k, allowed, want))


class TestFleetServerTime(FleetTest):
    L = 15
    W = 2000 if harness.SANITIZED else 500
    MAX_ROUNDS = 20000  # bounded (and by time); the rounds stop once 3.5 windows have passed

    def test_fixed_window_on_redis_clock(self):
        nodes = self.start_fleet()
        seen = {}  # window end (ms, Redis's clock) -> remaining values allowed
        cmd = ["RL.ALLOW", "fleet:real", self.L, self.W, "ALGO", "fixed-window"]
        start = time.time() * 1000
        unsure = 0  # allowed replies whose window a long round left open
        for _ in range(self.MAX_ROUNDS):
            if time.time() * 1000 - start > 3.5 * self.W:
                break
            before = time.time() * 1000
            flat = self.run_clients(nodes, lambda j: [cmd] * 10)
            after = time.time() * 1000
            # a reply's window ends at a multiple of W in [before, after] +
            # reset_after (before floored: Redis's ms are its clock's, floored);
            # a round shorter than W holds one.  A round that a loaded
            # machine made longer may hold two for some replies: those are
            # not attributed (counted in `unsure`), the others still are.
            for r in flat:
                if r[0] == 1:
                    # Redis's clock reads whole ms: its time of the
                    # decision is in [floor(before), after]
                    lo, hi = math.floor(before) + r[4], after + r[4] + 1
                    ends = [e for e in range(int(lo // self.W) * self.W, int(hi) + 1, self.W)
                            if lo <= e <= hi]
                    self.assertGreaterEqual(len(ends), 1, "no window end fits %r" % ((lo, hi, r),))
                    if len(ends) > 1:
                        unsure += 1
                        continue
                    seen.setdefault(ends[0], []).append(r[2])
        self.assertGreaterEqual(len(seen), 3, "the rounds admitted in fewer than three windows "
                                "(%d replies of rounds longer than a window left out)" % unsure)
        for end, rem in sorted(seen.items()):
            self.assertEqual(len(rem), len(set(rem)),
                             "window ending %d: a remaining value twice: %s" % (end, sorted(rem)))
            self.assertLessEqual(len(rem), self.L, "window ending %d admitted %d" % (end, len(rem)))
            self.assertTrue(all(0 <= v < self.L for v in rem), rem)


if __name__ == "__main__":
    unittest.main()
