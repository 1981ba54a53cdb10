"""test_ring.py -- sluiced on a consistent-hash ring of standalone Redis
servers (--backend redis://a,redis://b,...: docs/fleet.md, "Several Redis
servers (the ring)"), against real redis-server processes started on free
loopback ports and stopped by PID (harness.RedisServer):

  - keys spread over every server, each on the server an independent
    Python model of the ring names (src/backend/redis/ring.h), and INFO
    prints the ring (servers, their state, their shares);
  - sluiced restarted with a fourth server: the keys the model says stay
    are decided exactly where their count is, those that move all go to
    the new server (fresh there);
  - one server killed: its keys follow --on-backend-error, the others'
    answers stay exact; the server back, its keys are decided there again;
  - bad lists: the element at fault is named; the same server twice.

Times are the caller's (AT, --trust-client-time), so every reply is exact.
"""
# A heavy fleet test: run once, against the plain build (run_e2e.py).
# sluice-e2e: plain-only

import bisect
import subprocess
import time
import unittest

import harness
from harness import BASE, SLOW, SLUICED, RedisServer, Server

W = 10000  # the window of every limit here, ms
L = 5
NKEYS = 120

# -- an independent model of the ring (ring.c) --------------------------------

M64 = (1 << 64) - 1
VNODES = 160


def ring_hash(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & M64
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    h ^= h >> 33
    return h


def ring_owner(ids, tag):
    """The identity ("host:port/db") of the server that owns tag."""
    pts = sorted((ring_hash(("%s#%d" % (i, v)).encode()), i) for i in ids for v in range(VNODES))
    at = [p[0] for p in pts]
    k = bisect.bisect_left(at, ring_hash(tag.encode()))
    return pts[0 if k == len(pts) else k][1]


def ident(r):
    return "127.0.0.1:%d/0" % r.port


def redis_key(key):
    """The Redis key of a fixed-window RL.ALLOW counter (docs/redis-scripts.md)."""
    return "sl:00:{%s}" % key


class RingTest(unittest.TestCase):

    def redis(self):
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        return r

    def node(self, servers, *args):
        s = Server("--backend", ",".join(r.url() for r in servers), *args, trust_client_time=True,
                   name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        return s

    @staticmethod
    def allow(c, key, at, cost=1):
        return c.cmd("RL.ALLOW", key, str(L), "10s", "ALGO", "fixed-window", "COST", str(cost),
                     "AT", str(at))

    @staticmethod
    def keys_on(r):
        return {k.decode() for k in r.cmd("KEYS", "sl:*")}

    def test_keys_spread_and_stay_exact_when_a_fourth_server_joins(self):
        a, b, c, d = (self.redis() for _ in range(4))
        three = [a, b, c]
        keys = ["user:%d" % i for i in range(NKEYS)]
        s = self.node(three)
        info = s.info("backend")
        self.assertEqual(info["backend_url"], ",".join("redis://%s" % ident(r) for r in three))
        self.assertEqual(info["backend_nodes"], "3")
        shares = 0.0
        for i, r in enumerate(three):
            fields = dict(f.split("=", 1) for f in info["backend_node%d" % i].split(","))
            self.assertEqual(fields["url"], "redis://%s" % ident(r))
            self.assertEqual(fields["status"], "up")
            shares += float(fields["share"])
        self.assertAlmostEqual(shares, 100.0, delta=0.05)
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, BASE, cost=2), [1, L, 3, 0, W, 0], k)
        # every key on the server the model names, and every server used
        ids3 = [ident(r) for r in three]
        for r in three:
            want = {redis_key(k) for k in keys if ring_owner(ids3, k) == ident(r)}
            self.assertTrue(want, "the model gives %s no key of %d" % (ident(r), NKEYS))
            self.assertEqual(self.keys_on(r), want, ident(r))
        s.stop()

        # the same keys through a ring with a fourth server
        s4 = self.node(three + [d])
        self.assertEqual(s4.info("backend")["backend_nodes"], "4")
        ids4 = ids3 + [ident(d)]
        moved = [k for k in keys if ring_owner(ids4, k) != ring_owner(ids3, k)]
        self.assertTrue(0 < len(moved) < NKEYS // 2, len(moved))
        for k in moved:  # a key that moves goes to the new server only
            self.assertEqual(ring_owner(ids4, k), ident(d), k)
        with s4.raw() as conn:
            for k in keys:
                got = self.allow(conn, k, BASE + 1, cost=2)
                if k in moved:  # fresh on the new server
                    self.assertEqual(got, [1, L, 3, 0, W - 1, 0], k)
                else:  # its count continues where it was
                    self.assertEqual(got, [1, L, 1, 0, W - 1, 0], k)
            for k in keys:  # and the next one is exact too
                got = self.allow(conn, k, BASE + 2, cost=2)
                if k in moved:
                    self.assertEqual(got, [1, L, 1, 0, W - 2, 0], k)
                else:
                    self.assertEqual(got, [0, L, 1, W - 2, W - 2, 0], k)
        self.assertEqual(self.keys_on(d), {redis_key(k) for k in moved})

    def test_a_server_killed_its_keys_follow_the_policy(self):
        servers = [self.redis() for _ in range(3)]
        ids = [ident(r) for r in servers]
        s = self.node(servers, "--on-backend-error", "deny", "--backend-timeout", "500ms")
        keys = ["tenant:%d" % i for i in range(60)]
        owner = {k: ids.index(ring_owner(ids, k)) for k in keys}
        self.assertEqual(set(owner.values()), {0, 1, 2})
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, BASE), [1, L, 4, 0, W, 0], k)
        servers[1].kill()
        info = s.wait_section("backend", lambda i: "status=down" in i.get("backend_node1", ""),
                              "server 2 down")
        self.assertEqual(info["backend_status"], "down")
        self.assertIn("status=up", info["backend_node0"])
        self.assertIn("status=up", info["backend_node2"])
        self.assertTrue(info["backend_last_error"].startswith("redis://%s: " % ids[1]),
                        info["backend_last_error"])
        denied = 0
        with s.raw() as conn:
            for k in keys:
                got = self.allow(conn, k, BASE + 1)
                if owner[k] == 1:  # --on-backend-error deny
                    self.assertEqual(got, [0, L, 0, 1000, 1000, 0], k)
                    denied += 1
                else:  # the others, exact: their second request
                    self.assertEqual(got, [1, L, 3, 0, W - 1, 0], k)
        self.assertEqual(s.info_int("backend_fallback_deny", "backend"), denied)
        # back (empty: no persistence here): its keys are Redis's again
        servers[1].start()
        s.wait_section("backend", lambda i: i.get("backend_status") == "up", "the ring up again")
        with s.raw() as conn:
            for k in keys:
                got = self.allow(conn, k, BASE + 2)
                if owner[k] == 1:
                    self.assertEqual(got, [1, L, 4, 0, W - 2, 0], k)
                else:
                    self.assertEqual(got, [1, L, 2, 0, W - 2, 0], k)

    # -- bad lists --

    def run_sluiced(self, *args):
        p = harness.run_checked([SLUICED, "--port", "0", "--http-port", "0"] + list(args),
                                capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_bad_lists(self):
        cases = [
            ("redis://127.0.0.1:7001,redis://127.0.0.1:",
             "invalid --backend element 2 of 2: 'redis://127.0.0.1:': the port must be a number "
             "1..65535"),
            ("redis://127.0.0.1:7001,redis://u:pw@127.0.0.1:x",
             "invalid --backend element 2 of 2: 'redis://***@127.0.0.1:x': the port must be a "
             "number 1..65535"),
            ("redis://127.0.0.1:7001,127.0.0.1:7002",
             "invalid --backend 'redis://127.0.0.1:7001,127.0.0.1:7002': the port must be a "
             "number 1..65535 (the servers of a ring are whole URLs separated by commas: "
             "redis://a:6379,redis://b:6379)"),
            ("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7001/0",
             "invalid --backend elements 1 and 3 of 3 are the same server 127.0.0.1:7001/0"),
            ("redis://127.0.0.1:7001,rediss://127.0.0.1:7002",
             "invalid --backend element 2 of 2: 'rediss://127.0.0.1:7002': TLS to Redis"),
            ("redis://127.0.0.1:7001,,redis://127.0.0.1:7002",
             "invalid --backend element 1 of 2: 'redis://127.0.0.1:7001,': the port must be a "
             "number 1..65535 (the servers of a ring are whole URLs separated by commas: "
             "redis://a:6379,redis://b:6379)"),
        ]
        for arg, want in cases:
            rc, err = self.run_sluiced("--backend", arg)
            self.assertEqual(rc, 2, (arg, err))
            self.assertIn(want, err, arg)
        self.assertNotIn("pw", self.run_sluiced("--backend", cases[1][0])[1])

    def test_a_server_unreachable_stops_the_start(self):
        r = self.redis()
        port = harness.free_port()
        rc, err = self.run_sluiced("--backend", "%s,redis://127.0.0.1:%d" % (r.url(), port))
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot connect to Redis at redis://127.0.0.1:%d/0" % port, err)


if __name__ == "__main__":
    unittest.main()
