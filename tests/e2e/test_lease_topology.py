"""test_lease_topology.py -- --lease on where a key's decisions are routed
by its tag (docs/fleet.md, "Leases": a lease goes where its key's
decisions go): a 3-master Redis Cluster (the script's path, and the
module's) and a ring of 3 standalone redis-servers, three sluiced nodes
on each, at Redis's clock.  What a user would notice:

- hot keys of every leasing algorithm, spread so that every master (every
  ring member) holds some, each driven above its limit through all three
  nodes at once: no key admits more than its limit, decisions were paid
  by leases for every algorithm, and every lease is handed back at the
  end (INFO's backend_leases_outstanding 0 on every node);
- once handed back, one more client takes what is left: a window
  algorithm's key has then admitted exactly its limit (no unit lost), and
  every key's shortfall is exactly what INFO counts as lost in leases
  (leased, neither spent nor put back: a bucket's lease handed back after
  its epoch settled);
- each key's state is on its master (its ring member) only, and no master
  answered MOVED: takes and returns went where the key's decisions go;
- a slot migrated (IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE) while
  the three nodes hold leases of its keys: ASK and MOVED are followed and
  the fleet still admits no more than the limit.

The window is ten years (fixed-window's edges fall at multiples of it
from 1970: none during the test; a bucket refills nothing meanwhile).
"""
# A heavy fleet test (two clusters, a ring, twelve sluiced): once, plain build.
# sluice-e2e: plain-only

import threading
import time
import unittest

import harness
from harness import RawConn, RedisCluster, RedisServer, Server, encode
from test_ring import VNODES, ring_hash

NODES = 3
L = 300
CHUNK = 50
W = "3650d"
ALGOS = ("fixed-window", "sliding-window", "sliding-buckets", "token-bucket", "gcra")
DIGIT = {"fixed-window": 0, "sliding-window": 2, "sliding-buckets": 3, "token-bucket": 4,
         "gcra": 5}
WINDOWS = ("fixed-window", "sliding-window", "sliding-buckets")  # no unit lost there


def redis_key(key, algo, module=False):
    """The Redis key of an RL.ALLOW counter (docs/redis-scripts.md; the
    module's: one a key, whatever its algorithm)."""
    return "sl:%s0:{%s}" % ("m" if module else DIGIT[algo], key)


def hammer(port, plan, out, errors):
    """On one connection: for each (key, algo, limit, chunks) of plan in
    turn, round after round, CHUNK pipelined RL.ALLOW, until each has had
    its chunks; out[key] gets how many were allowed.  Every reply must be a
    decision of that key's limit."""
    try:
        with RawConn(port, timeout=30) as c:
            left = {key: chunks for key, _, _, chunks in plan}
            for _ in range(max(left.values())):
                for key, algo, limit, _ in plan:
                    if left[key] == 0:
                        continue
                    left[key] -= 1
                    c.send(encode("RL.ALLOW", key, limit, W, "ALGO", algo) * CHUNK)
                    for r in c.read_replies(CHUNK, timeout=60 * harness.SLOW):
                        if not isinstance(r, list) or len(r) != 6 or r[1] != limit:
                            errors.append("%s %s: %r" % (port, key, r))
                            return
                        out[key] = out.get(key, 0) + r[0]
    except Exception as e:  # noqa: BLE001 -- the main thread asserts on it
        errors.append("%s: %r" % (port, e))


class LeaseTopology:
    """What every topology runs; a subclass starts the Redis side (start_redis)
    and says which member owns a key (owner)."""
    MODULE = False
    LEASED = ALGOS  # algorithms that lease on this path

    def start_redis(self):
        raise NotImplementedError

    def owner(self, key):
        raise NotImplementedError

    def members(self):
        raise NotImplementedError

    def start_nodes(self, url):
        nodes = []
        for i in range(NODES):
            s = Server("--backend", url, "--backend-timeout", "5s", "--lease", "on",
                       name="%s-node%d" % (self.id().split(".")[-1], i))
            s.start()
            self.addCleanup(s.cleanup)
            s.wait_section("backend", lambda x: x.get("backend_status") == "up", "backend up")
            info = s.info("backend")
            self.assertEqual(info["backend_lease"], "on")
            self.assertEqual(info["backend_redis_path"], "module" if self.MODULE else "script")
            nodes.append(s)
        return nodes

    def keys_for(self, prefix, algos):
        """For each algorithm, one key owned by each member: {algo: [keys]}."""
        members = self.members()
        got = {}
        for a in algos:
            got[a] = []
            for m in members:
                for i in range(200):  # bounded: a member owns about a third of names
                    k = "%s:%s:%d" % (prefix, a, i)
                    if self.owner(k) == m and k not in got[a]:
                        got[a].append(k)
                        break
                else:
                    raise AssertionError("no key of %s owned by %s" % (a, m))
        return got

    @staticmethod
    def lease_counters(nodes):
        total = {}
        for n in nodes:
            info = n.info("backend")
            for k in ("backend_lease_units_leased", "backend_lease_units_returned",
                      "backend_lease_decisions", "backend_leases_outstanding"):
                total[k] = total.get(k, 0) + int(info[k])
        return total

    def run_clients(self, nodes, plan):
        outs, errors, threads = [], [], []
        for n in nodes:
            out = {}
            outs.append(out)
            th = threading.Thread(target=hammer, args=(n.port, plan, out, errors))
            threads.append(th)
            th.start()
        return outs, errors, threads

    def join(self, threads, errors):
        for th in threads:
            th.join(120 * harness.SLOW)
            self.assertFalse(th.is_alive(), "a client did not finish")
        self.assertEqual(errors, [])

    def check_hot_keys(self):
        url = self.start_redis()
        nodes = self.start_nodes(url)
        keys = self.keys_for("hot", ALGOS)
        admitted = {}
        # one algorithm at a time, its keys (one on each member) at once from
        # every node: demand 2L a key (3 nodes x rounds x CHUNK)
        rounds = 2 * L // (NODES * CHUNK)
        for a in ALGOS:
            before = self.lease_counters(nodes)["backend_lease_decisions"]
            plan = [(k, a, L, rounds) for k in keys[a]]
            outs, errors, threads = self.run_clients(nodes, plan)
            self.join(threads, errors)
            for k in keys[a]:
                admitted[k] = sum(o.get(k, 0) for o in outs)
                self.assertLessEqual(admitted[k], L, "%s (%s) admitted %d, the limit is %d"
                                     % (k, a, admitted[k], L))
            served = self.lease_counters(nodes)["backend_lease_decisions"] - before
            if a in self.LEASED:
                self.assertGreater(served, 0, "no %s decision came from a lease" % a)
            else:
                self.assertEqual(served, 0, "%s is decided per request here" % a)
        for n in nodes:  # every lease handed back (idle), bounded wait
            n.wait_info("backend_leases_outstanding", lambda v: v == 0, "backend")
        # one more client takes what is left of every key
        outs, errors, threads = self.run_clients(
            nodes[:1], [(k, a, L, L // CHUNK) for a in ALGOS for k in keys[a]])
        self.join(threads, errors)
        for a in ALGOS:
            for k in keys[a]:
                admitted[k] += outs[0].get(k, 0)
                self.assertLessEqual(admitted[k], L, "%s (%s)" % (k, a))
                if a in WINDOWS or a not in self.LEASED:
                    self.assertEqual(admitted[k], L, "%s (%s) lost units in leases" % (k, a))
        for n in nodes:
            n.wait_info("backend_leases_outstanding", lambda v: v == 0, "backend")
        # the shortfall is what INFO counts as lost (each R's reply counted
        # as it comes: bounded wait)
        short = sum(L - v for v in admitted.values())
        until = harness.deadline(20)
        while True:
            c = self.lease_counters(nodes)
            lost = c["backend_lease_units_leased"] - c["backend_lease_decisions"] - \
                c["backend_lease_units_returned"]
            if lost == short or time.monotonic() > until:
                break
            time.sleep(0.05)
        self.assertEqual(lost, short, "admitted %r, INFO %r" % (admitted, c))
        # each key's state where its decisions go, nowhere else
        where = self.states()
        for a in ALGOS:
            for k in keys[a]:
                holders = [m for m, names in where.items()
                           if redis_key(k, a, self.MODULE) in names]
                self.assertEqual(holders, [self.owner(k)], k)
        return nodes

    def states(self):
        """{member: the names of its sl:* keys}."""
        raise NotImplementedError


class ClusterLeaseTest(LeaseTopology, unittest.TestCase):
    """A 3-master cluster, sluiced on the script's path."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = RedisCluster(3, module_args=[] if cls.MODULE else None).start()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.cleanup()

    def start_redis(self):
        self.slots = self.cluster.nodes[0].cmd("CLUSTER", "SLOTS")
        return self.cluster.url()

    def members(self):
        return [r.port for r in self.cluster.nodes]

    def owner(self, key):
        slot = self.cluster.keyslot(key)
        return next(e[2][1] for e in self.slots if e[0] <= slot <= e[1])

    def states(self):
        return {r.port: {k.decode() for k in r.cmd("KEYS", "sl:*")} for r in self.cluster.nodes}

    def moved_errors(self):
        return [r.port for r in self.cluster.nodes
                if b"errorstat_MOVED" in r.cmd("INFO", "errorstats")]

    def test_hot_keys_on_every_master(self):
        moved = self.moved_errors()  # (the class's cluster: before this test)
        nodes = self.check_hot_keys()
        self.assertEqual(self.moved_errors(), moved, "a take or return went to another master")
        for n in nodes:
            self.assertEqual(n.info("backend")["backend_errors"], "0")

    def test_slot_migrated_while_leases_are_out(self):
        c = self.cluster
        self.start_redis()
        nodes = self.start_nodes(c.url())
        big = 1500
        keys = [("mv", "fixed-window"), ("mv}tb", "token-bucket")]  # one slot: tag "mv"
        slot = c.keyslot("mv")
        self.assertEqual(c.keyslot(redis_key("mv}tb", "token-bucket")), slot)
        src = c.node_of_slot(slot)
        dst = next(r for r in c.nodes if r is not src)
        src_id, dst_id = src.cmd("CLUSTER", "MYID").decode(), dst.cmd("CLUSTER", "MYID").decode()
        # demand 2 x big a key, from the three nodes at once
        plan = [(k, a, big, 2 * big // (NODES * CHUNK)) for k, a in keys]
        outs, errors, threads = self.run_clients(nodes, plan)
        try:
            # both keys on the source and a lease out on some node (polled;
            # the hammers keep them busy)
            names = [redis_key(k, a).encode() for k, a in keys]
            until = harness.deadline(30)
            while src.cmd("EXISTS", *names) != 2 or \
                    sum(int(n.info("backend")["backend_leases_outstanding"]) for n in nodes) == 0:
                self.assertLess(time.monotonic(), until, "no node took a lease")
                self.assertTrue(any(th.is_alive() for th in threads), "the load ended first")
                time.sleep(0.005)
            self.assertEqual(dst.cmd("CLUSTER", "SETSLOT", str(slot), "IMPORTING", src_id), b"OK")
            self.assertEqual(src.cmd("CLUSTER", "SETSLOT", str(slot), "MIGRATING", dst_id), b"OK")
            self.assertEqual(sorted(src.cmd("CLUSTER", "GETKEYSINSLOT", str(slot), "100")),
                             sorted(names))
            self.assertEqual(src.cmd("MIGRATE", "127.0.0.1", str(dst.port), "", "0", "5000",
                                     "KEYS", *names), b"OK")
            for r in [dst, src] + [n for n in c.nodes if n not in (src, dst)]:
                self.assertEqual(r.cmd("CLUSTER", "SETSLOT", str(slot), "NODE", dst_id), b"OK")
        finally:
            self.join(threads, errors)
        for k, a in keys:
            got = sum(o.get(k, 0) for o in outs)
            self.assertLessEqual(got, big, "%s (%s) admitted %d after a migration, limit %d"
                                 % (k, a, got, big))
            self.assertGreater(got, 0)
        for n in nodes:
            n.wait_info("backend_leases_outstanding", lambda v: v == 0, "backend")
        # what is left, through every node (each worker with the old map is
        # answered MOVED): the fleet's total stays <= the limit
        more, errors, threads = self.run_clients(nodes, [(k, a, big, 4) for k, a in keys])
        self.join(threads, errors)
        for k, a in keys:
            got = sum(o.get(k, 0) for o in outs + more)
            self.assertLessEqual(got, big, "%s (%s)" % (k, a))
        self.assertIn("errorstat_MOVED:count=", src.cmd("INFO", "errorstats").decode())
        self.assertGreater(self.lease_counters(nodes)["backend_lease_decisions"], 0)
        self.assertEqual(src.cmd("CLUSTER", "COUNTKEYSINSLOT", str(slot)), 0)
        self.assertEqual(dst.cmd("CLUSTER", "COUNTKEYSINSLOT", str(slot)), 2)
        for n in nodes:
            self.assertEqual(n.info("backend")["backend_fallback_deny"], "0")


class ModuleClusterLeaseTest(ClusterLeaseTest):
    """The same cluster with sluice.so in every master, sluiced on the
    module's path: what the module names in RL.LEASEINFO leases (RL.LEASE),
    every leasing algorithm as on the script's path."""
    MODULE = True
    LEASED = ("fixed-window", "sliding-window", "sliding-buckets", "token-bucket", "gcra")
    test_slot_migrated_while_leases_are_out = None  # the script's path's (not a test here)


class RingLeaseTest(LeaseTopology, unittest.TestCase):
    """A ring of 3 redis-servers (--backend redis://a,redis://b,redis://c)."""

    def start_redis(self):
        self.servers = []
        for _ in range(3):
            r = RedisServer().start()
            self.addCleanup(r.cleanup)
            self.servers.append(r)
        ids = ["127.0.0.1:%d/0" % r.port for r in self.servers]
        self.points = sorted((ring_hash(("%s#%d" % (i, v)).encode()), r.port)
                             for i, r in zip(ids, self.servers) for v in range(VNODES))
        return ",".join(r.url() for r in self.servers)

    def members(self):
        return [r.port for r in self.servers]

    def owner(self, key):
        """The ring's owner of key (test_ring's model of ring.c)."""
        h = ring_hash(key.encode())
        return next((p for at, p in self.points if at >= h), self.points[0][1])

    def states(self):
        return {r.port: {k.decode() for k in r.cmd("KEYS", "sl:*")} for r in self.servers}

    def test_hot_keys_on_every_member(self):
        nodes = self.check_hot_keys()
        for n in nodes:
            self.assertEqual(n.info("backend")["backend_errors"], "0")


if __name__ == "__main__":
    unittest.main()
