"""test_lease_fleet.py -- --lease on: three sluiced nodes on one
redis-server, clients hammering one hot key through all three.  What a
user would notice:

- the fleet never admits more than the limit, and the nodes did answer
  from leases (INFO's backend_lease_decisions);
- units a node leased and did not spend come back: once every lease is
  handed back (INFO's backend_leases_outstanding 0 everywhere) one more
  client gets exactly what is left, so the fleet admits exactly L in the
  window (fixed-window) -- or, for a bucket, exactly L less the units
  INFO counts as lost (leased, neither spent nor put back);
- a node killed with -9 while it holds leases: the fleet admits fewer,
  never more.

ModuleLeaseFleetTest runs the same against Redis with sluice.so loaded
(the nodes on the module's path: RL.LEASE, RL.LEASERETURN), and there
also a gcra and a sliding-window hot key: every algorithm the module
names in RL.LEASEINFO leases.

The window is ten years (fixed-window's edges fall at multiples of it
from 1970: none during the test), so at Redis's own clock every request
of a test is in one window, and a bucket refills nothing meanwhile.
"""
# A heavy fleet test (three nodes, thousands of requests): once, plain build.
# sluice-e2e: plain-only

import os
import threading
import unittest

import harness
from harness import RawConn, encode, parse_info

NODES = 3
CLIENTS_PER_NODE = 2
L = 3000
CHUNK = 100
W = "3650d"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "backend",
                      "redis", "sluice.lua")


def hammer(port, cmd, chunks, out, errors, started=None, stop=None, ready=None):
    """Sends cmd in `chunks` pipelined chunks of CHUNK on one connection,
    appending the replies to out; sets `started` after the fifth chunk (or,
    given ready, after the first chunk of the first half of L after which
    ready() is true); ends early when `stop` is set or the connection goes
    (stop given)."""
    try:
        with RawConn(port, timeout=30) as c:
            for k in range(chunks):
                if stop is not None and stop.is_set():
                    return
                c.send(b"".join(encode(*cmd) for _ in range(CHUNK)))
                out.extend(c.read_replies(CHUNK, timeout=60 * harness.SLOW))
                if started is None or started.is_set():
                    continue
                if ready is None and k == 4:
                    started.set()
                elif ready is not None and (k + 1) * CHUNK <= L // 2 and ready():
                    started.set()
    except Exception as e:
        if stop is None or not stop.is_set():
            errors.append("%s: %r" % (port, e))


class LeaseFleetTest(unittest.TestCase):
    MODULE = False  # ModuleLeaseFleetTest: Redis with sluice.so, the nodes on its path

    def start_fleet(self):
        r = self.redis = harness.RedisServer(module_args=[] if self.MODULE else None).start()
        self.addCleanup(r.cleanup)
        nodes = []
        for i in range(NODES):
            s = harness.Server("--backend", r.url(), "--backend-timeout", "5s", "--lease", "on",
                               name="%s-node%d" % (self.id(), i), http=True)
            s.start()
            self.addCleanup(s.cleanup)
            nodes.append(s)
            self.assertEqual(s.info("backend")["backend_redis_path"],
                             "module" if self.MODULE else "script")
        return nodes

    def run_clients(self, ports, cmd, chunks):
        outs, errors, threads = [], [], []
        for p in ports:
            out = []
            outs.append(out)
            th = threading.Thread(target=hammer, args=(p, cmd, chunks, out, errors))
            threads.append(th)
            th.start()
        for th in threads:
            th.join(120 * harness.SLOW)
            self.assertFalse(th.is_alive(), "a client did not finish")
        self.assertEqual(errors, [])
        flat = [r for out in outs for r in out]
        for r in flat:
            self.assertIsInstance(r, list, "an error reply: %r" % (r,))
            self.assertEqual(len(r), 6, r)
        return flat

    def counters(self, nodes):
        total = {}
        for n in nodes:
            info = n.info("backend")
            for k in ("backend_lease_units_leased", "backend_lease_units_returned",
                      "backend_lease_decisions", "backend_leases_outstanding"):
                total[k] = total.get(k, 0) + int(info[k])
        return total

    def check_hot_key(self, algo):
        nodes = self.start_fleet()
        self.assertEqual(nodes[0].info("backend")["backend_lease"], "on")
        cmd = ["RL.ALLOW", "hot:" + algo, L, W, "ALGO", algo]
        ports = [n.port for n in nodes for _ in range(CLIENTS_PER_NODE)]
        # demand 2L: 6 clients x 10 chunks of 100
        flat = self.run_clients(ports, cmd, 2 * L // (CHUNK * len(ports)))
        allowed = sum(1 for r in flat if r[0] == 1)
        self.assertLessEqual(allowed, L, "the fleet admitted %d, the limit is %d" % (allowed, L))
        for r in flat:
            self.assertEqual(r[1], L, r)
        c = self.counters(nodes)
        self.assertGreater(c["backend_lease_decisions"], 0, "no decision came from a lease")
        for n in nodes:  # every lease handed back (idle), bounded wait
            n.wait_info("backend_leases_outstanding", lambda v: v == 0, "backend")
        # one more client takes what is left; the fleet's total is then L,
        # less what leases lost (a bucket's units handed back too late)
        flat = self.run_clients([nodes[0].port], cmd, 2 * L // CHUNK)
        allowed += sum(1 for r in flat if r[0] == 1)
        c = self.counters(nodes)
        lost = c["backend_lease_units_leased"] - c["backend_lease_decisions"] - \
            c["backend_lease_units_returned"]
        self.assertGreaterEqual(lost, 0, c)
        if algo in ("fixed-window", "sliding-window"):
            self.assertEqual(lost, 0, "a window's lease lost units: %r" % c)
        self.assertEqual(allowed, L - lost, "admitted %d of %d, %d lost in leases: %r"
                         % (allowed, L, lost, c))
        # /metrics has INFO's numbers (the nodes are quiet now)
        nodes[0].wait_info("backend_leases_outstanding", lambda v: v == 0, "backend")
        info = nodes[0].info("backend")
        h = nodes[0].http_conn()
        h.request("GET", "/metrics")
        page = h.getresponse().read().decode()
        h.close()
        for line in ("sluice_backend_leases_outstanding 0",
                     "sluice_backend_leases_total %s" % info["backend_leases_taken"],
                     'sluice_backend_lease_units_total{what="leased"} %s'
                     % info["backend_lease_units_leased"],
                     'sluice_backend_lease_units_total{what="returned"} %s'
                     % info["backend_lease_units_returned"],
                     'sluice_backend_lease_units_total{what="expired"} %s'
                     % info["backend_lease_units_expired"],
                     "sluice_backend_lease_decisions_total %s" % info["backend_lease_decisions"]):
            self.assertIn("\n" + line + "\n", page)

    def test_fixed_window(self):
        self.check_hot_key("fixed-window")

    def test_token_bucket(self):
        self.check_hot_key("token-bucket")

    def test_returned_units_reach_a_denied_node(self):
        """A lease taken elsewhere (this test, as a fourth node, through the
        script's op T) holds 500 units; node 0 spends the rest and is
        denied (its deny cache keeps the denial); the 500 come back (op R),
        and node 0 -- which asks Redis past its deny cache now and then --
        admits exactly them."""
        nodes = self.start_fleet()
        rconn = RawConn(self.redis.port)
        self.addCleanup(rconn.close)
        with open(SCRIPT, "rb") as f:
            sha = rconn.cmd("SCRIPT", "LOAD", f.read())
        fields = [0, L, 3650 * 86400000, 0, 0, 0]
        got = rconn.cmd("EVALSHA", sha, 1, "sl:00:{hot:back}", "T", "", *fields, 1, 501)
        self.assertEqual(got[:3] + got[6:7], [1, L, L - 501, 500], got)
        cmd = ["RL.ALLOW", "hot:back", L, W, "ALGO", "fixed-window"]
        flat = self.run_clients([nodes[0].port], cmd, 2 * L // CHUNK)
        allowed = 1 + sum(1 for r in flat if r[0] == 1)
        self.assertEqual(allowed, L - 500)
        self.assertEqual(flat[-1][0], 0)
        self.assertEqual(rconn.cmd("EVALSHA", sha, 1, "sl:00:{hot:back}", "R", "", *fields, 500,
                                   500, got[8]), 500)
        for _ in range(500):  # bounded: until node 0 has what came back
            flat = self.run_clients([nodes[0].port], cmd, 1)
            allowed += sum(1 for r in flat if r[0] == 1)
            if allowed >= L:
                break
        self.assertEqual(allowed, L)
        self.assertGreater(nodes[0].info_int("backend_deny_cache_hits", "backend"), 0)

    def test_node_killed_holding_leases(self):
        nodes = self.start_fleet()
        cmd = ["RL.ALLOW", "hot:killed", L, W, "ALGO", "fixed-window"]
        out, errors, started, stop = [], [], threading.Event(), threading.Event()

        def holding(ic):
            return int(parse_info(ic.cmd("INFO", "backend"))["backend_leases_outstanding"]) > 0

        # node 0's client asks INFO after each chunk, on a second connection,
        # while the lease is fresh (a lease idle 50 ms goes back): polling
        # from another thread could miss every moment a lease is out, as the
        # chunks run the key to its limit on a busy machine
        with RawConn(nodes[0].port, timeout=30) as ic:
            th = threading.Thread(target=hammer,
                                  args=(nodes[0].port, cmd, 2 * L // CHUNK, out, errors, started,
                                        stop, lambda: holding(ic)))
            th.start()
            try:
                self.assertTrue(started.wait(60 * harness.SLOW),
                                "node 0 held no lease in its first %d requests" % (L // 2))
            finally:
                stop.set()
                nodes[0].kill()
                th.join(60 * harness.SLOW)
        self.assertFalse(th.is_alive())
        self.assertEqual(errors, [])
        allowed = sum(1 for r in out if isinstance(r, list) and r[0] == 1)
        flat = self.run_clients([n.port for n in nodes[1:]], cmd, L // CHUNK)
        allowed += sum(1 for r in flat if r[0] == 1)
        self.assertLessEqual(allowed, L, "the fleet admitted %d after a kill -9, the limit is %d"
                             % (allowed, L))
        self.assertGreater(allowed, 0)


class ModuleLeaseFleetTest(LeaseFleetTest):
    """The same fleet on the sluice module's path (RL.LEASE, RL.LEASERETURN):
    fixed-window, token-bucket (test_token_bucket, inherited), gcra,
    sliding-window and sliding-buckets lease there (module.c, lone.c's
    lease tail)."""
    MODULE = True

    def test_sliding_buckets(self):
        self.check_hot_key("sliding-buckets")

    def test_gcra(self):
        self.check_hot_key("gcra")

    def test_sliding_window(self):
        self.check_hot_key("sliding-window")

    def test_returned_units_reach_a_denied_node(self):
        """As the script's, with RL.LEASE / RL.LEASERETURN for the fourth node."""
        nodes = self.start_fleet()
        rconn = RawConn(self.redis.port)
        self.addCleanup(rconn.close)
        req = ["sl:m0:{hot:back}", L, W, "ALGO", "fixed-window"]
        got = rconn.cmd("RL.LEASE", 501, *req)
        self.assertEqual(got[:3] + got[6:7], [1, L, L - 501, 500], got)
        cmd = ["RL.ALLOW", "hot:back", L, W, "ALGO", "fixed-window"]
        flat = self.run_clients([nodes[0].port], cmd, 2 * L // CHUNK)
        allowed = 1 + sum(1 for r in flat if r[0] == 1)
        self.assertEqual(allowed, L - 500)
        self.assertEqual(flat[-1][0], 0)
        self.assertEqual(rconn.cmd("RL.LEASERETURN", 500, got[8] + 1, *req), 0)  # another window
        self.assertEqual(rconn.cmd("RL.LEASERETURN", 500, got[8], *req), 500)
        for _ in range(500):  # bounded: until node 0 has what came back
            flat = self.run_clients([nodes[0].port], cmd, 1)
            allowed += sum(1 for r in flat if r[0] == 1)
            if allowed >= L:
                break
        self.assertEqual(allowed, L)
        self.assertGreater(nodes[0].info_int("backend_deny_cache_hits", "backend"), 0)


if __name__ == "__main__":
    unittest.main()
