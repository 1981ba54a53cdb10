"""test_durability_wait.py -- --durability replicas:N on the Redis backend
(SPEC section 11, issue 27): an allowed answer leaves sluiced only after
Redis's WAIT N says N replicas acknowledged the writes of the batch that
decided it; short of that within --backend-timeout, --on-backend-error
answers instead.  Against real redis-servers on free loopback ports (a
master, its replica made with REPLICAOF), stopped by PID:

  - with replicas:1 and a live replica, answers are Redis's, the replica
    holds each allowed decision when its answer arrives, INFO and /metrics
    count the WAITs (one per request sent alone), none short;
  - the replica stopped (SIGSTOP): every answer that would have been
    allowed is the policy's exactly (deny; allow with --on-backend-error
    allow), a denial is Redis's own; resumed (SIGCONT): allowed again;
  - replicas:2 with one replica: every allowed answer is the policy's;
  - the module's path: the same promise with RL.ALLOW on the sluice module;
  - failover: the master killed with -9 while nodes are deciding, its
    replica promoted (REPLICAOF NO ONE), a new sluiced on it: every
    allowed answer is counted there -- also when the replica had been cut
    off before (its replication user disabled, its link killed): with
    replicas:1 nothing allowed was forgotten; with none, what was forgotten
    is measured and printed, not asserted;
  - a Redis Cluster of 3 masters with a replica each: one WAIT per node
    connection; one replica stopped makes its master's keys the policy's
    while the other masters' keys are allowed;
  - bad values of --durability, and replicas:N with --backend local, are
    refused with a message naming them.

Times are the caller's (AT, --trust-client-time), the algorithm fixed-window,
so every reply is exact.  Where an answer must be Redis's with a live
replica the timeout is 5 s; where WAIT falls short it is 1 s: Redis answers
a WAIT's timeout up to a serverCron tick late (100 ms at hz 10), and what
was sent behind it waits meanwhile, so a timeout well above that keeps
every answer here exact (the policy's, or Redis's own denial) on a loaded
machine.
"""
# sluice-e2e: plain-only

import re
import subprocess
import sys
import threading
import time
import unittest

import harness
from harness import BASE, HOST, SLOW, SLUICED, RawConn, RedisServer, RespError, Server

W = 10000  # ms: the window of every limit here
DENY = lambda L: [0, L, 0, 1000, 1000, 0]  # noqa: E731 -- --on-backend-error deny's answer
ALLOWP = lambda L: [1, L, 0, 0, 0, 0]  # noqa: E731 -- --on-backend-error allow's answer


def allow(c, key, L, at=BASE):
    return c.cmd("RL.ALLOW", key, str(L), "10s", "ALGO", "fixed-window", "AT", str(at))


def fw_count(r, key):
    """The count of key's fixed-window counter in Redis r, 0 when none
    (docs/redis-scripts.md: the string "clock count"; the module's
    sl:m0 keys are read through RL.PEEK by the caller instead)."""
    v = r.cmd("GET", "sl:00:{%s}" % key)
    return int(v.split()[1]) if isinstance(v, bytes) else 0


def wait_online(master, n=1, timeout=30):
    """Until master's INFO replication shows n replicas online (bounded)."""
    until = harness.deadline(timeout * SLOW)
    while time.monotonic() < until:
        info = harness.parse_info(master.cmd("INFO", "replication"))
        online = [k for k, v in info.items() if k.startswith("slave") and "state=online" in v]
        if len(online) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the master never had %d replica(s) online: %r" % (n, info))


class DurabilityCase(unittest.TestCase):

    def redis(self, **kw):
        r = RedisServer(**kw).start()
        self.addCleanup(r.cleanup)
        return r

    def pair(self, module_args=None, user=None):
        """A master and its replica (REPLICAOF), the replica online.  user:
        the replica authenticates as that user (a password 'pw') made on
        the master for replication only."""
        m = self.redis(module_args=module_args)
        r = self.redis(module_args=module_args)
        # the full sync at once (Redis 7 waits 5 s for more replicas by default)
        self.assertEqual(m.cmd("CONFIG", "SET", "repl-diskless-sync-delay", "0"), b"OK")
        if user:
            self.assertEqual(m.cmd("ACL", "SETUSER", user, "on", ">pw", "+psync", "+replconf",
                                   "+ping"), b"OK")
            r.cmd("CONFIG", "SET", "masteruser", user)
            r.cmd("CONFIG", "SET", "masterauth", "pw")
        self.assertEqual(r.cmd("REPLICAOF", HOST, str(m.port)), b"OK")
        wait_online(m)
        return m, r

    def node(self, r, *args, name="", http=False):
        s = Server("--backend", r.url(), "--threads", "1", *args, trust_client_time=True,
                   name="%s-%s" % (self.id().split(".")[-1], name), http=http)
        s.start()
        self.addCleanup(s.cleanup)
        return s

    def backend(self, s):
        return s.info("backend")


class TestWaitHealthy(DurabilityCase):

    def test_answers_flow_the_replica_has_them_and_waits_are_counted(self):
        m, r = self.pair()
        s = self.node(m, "--durability", "replicas:1", "--backend-timeout", "5s", http=True)
        info = self.backend(s)
        self.assertEqual(info["backend_durability"], "replicas:1")
        with s.raw(timeout=30) as c:
            for i in range(3):
                self.assertEqual(allow(c, "h", 3), [1, 3, 2 - i, 0, W, 0])
                # the answer came after WAIT 1: the replica has this decision now
                self.assertEqual(fw_count(r, "h"), i + 1)
            self.assertEqual(allow(c, "h", 3), [0, 3, 0, W, W, 0])  # Redis's denial
            self.assertEqual(allow(c, "h", 3), [0, 3, 0, W, W, 0])  # the deny cache's
        info = self.backend(s)
        # one WAIT per request sent alone (the denial's too: it is known
        # only from the reply); none for the deny cache's answer
        self.assertEqual(info["backend_durability_waits"], "4")
        self.assertEqual(info["backend_durability_waits_short"], "0")
        self.assertEqual(info["backend_durability_replaced"], "0")
        self.assertEqual(info["backend_deny_cache_hits"], "1")
        h = s.http_conn()
        h.request("GET", "/metrics")
        page = h.getresponse().read().decode()
        for line in ("sluice_backend_durability_waits_total 4",
                     "sluice_backend_durability_waits_short_total 0",
                     "sluice_backend_durability_replaced_total 0"):
            self.assertIn("\n" + line + "\n", page)
        # a pipelined burst: batches (op B), one WAIT per batch, all Redis's
        with s.raw(timeout=30) as c:
            c.send(b"".join(harness.encode("RL.ALLOW", "b%d" % (i % 7), "100", "10s", "ALGO",
                                           "fixed-window", "AT", str(BASE)) for i in range(140)))
            replies = c.read_replies(140)
        self.assertEqual([x[0] for x in replies], [1] * 140)
        info = self.backend(s)
        waits = int(info["backend_durability_waits"]) - 4
        self.assertGreaterEqual(waits, 1)
        self.assertLessEqual(waits, 140)
        self.assertEqual(info["backend_durability_replaced"], "0")
        self.assertEqual(sum(fw_count(r, "b%d" % k) for k in range(7)), 140)

    def test_none_sends_no_wait(self):
        m, r = self.pair()
        s = self.node(m, "--backend-timeout", "5s")
        with s.raw(timeout=30) as c:
            self.assertEqual(allow(c, "n", 3), [1, 3, 2, 0, W, 0])
        info = self.backend(s)
        self.assertEqual(info["backend_durability"], "none")
        self.assertEqual(info["backend_durability_waits"], "0")


class TestWaitShort(DurabilityCase):

    def stalled(self, policy, answer):
        m, r = self.pair()
        s = self.node(m, "--durability", "replicas:1", "--backend-timeout", "1s",
                      "--on-backend-error", policy)
        with self.node(m, "--backend-timeout", "5s", name="charge").raw(timeout=30) as c:
            for i in range(3):  # a key at its limit, through another node
                self.assertEqual(allow(c, "full", 3), [1, 3, 2 - i, 0, W, 0])
        with s.raw(timeout=60) as c:
            r.pause()
            try:
                for i in range(3):
                    self.assertEqual(allow(c, "st%d" % i, 3), answer(3),
                                     "request %d while the replica is stopped" % i)
                # a denial is Redis's own, as it is (it waits for no WAIT)
                self.assertEqual(allow(c, "full", 3), [0, 3, 0, W, W, 0])
                info = self.backend(s)
                self.assertEqual(info["backend_fallback_" + policy], "3")
                self.assertEqual(info["backend_durability_replaced"], "3")
                self.assertEqual(info["backend_reconnects"], "0")
            finally:
                r.resume()
            # the replica back: allowed again (the first fresh key allowed
            # is Redis's answer; bounded)
            until = harness.deadline(30 * SLOW)
            i = 0
            while True:
                v = allow(c, "back%d" % i, 3)
                if v[0] == 1 and v != ALLOWP(3) or time.monotonic() > until:
                    break
                i += 1
                time.sleep(0.05)
            self.assertEqual(v, [1, 3, 2, 0, W, 0])

    def test_replica_stopped_allowed_answers_are_deny(self):
        self.stalled("deny", DENY)

    def test_replica_stopped_allowed_answers_are_allow_policy(self):
        self.stalled("allow", ALLOWP)

    def test_two_replicas_asked_one_present(self):
        m, r = self.pair()
        s = self.node(m, "--durability", "replicas:2", "--backend-timeout", "1s")
        with s.raw(timeout=60) as c:
            for i in range(3):
                self.assertEqual(allow(c, "two", 3), DENY(3), "request %d" % i)
            # 3 writes allowed by Redis, each answered by the policy; the 4th
            # Redis denied itself: its own answer
            self.assertEqual(allow(c, "two", 3), [0, 3, 0, W, W, 0])
        # the denial's WAIT (sent before its reply was known) falls short too
        s.wait_info("backend_durability_waits_short", lambda v: v == 4, "backend")
        info = self.backend(s)
        self.assertEqual(info["backend_durability_replaced"], "3")
        self.assertEqual(info["backend_durability_waits"], "4")
        self.assertEqual(fw_count(m, "two"), 3)


class TestWaitModule(DurabilityCase):

    def test_module_path_waits_and_falls_short(self):
        margs = ["trust-client-time", "yes", "max-client-skew", "0"]
        m, r = self.pair(module_args=margs)
        s = self.node(m, "--durability", "replicas:1", "--backend-timeout", "5s")
        s.wait_section("backend", lambda i: i.get("backend_redis_path") == "module", "module")
        with s.raw(timeout=60) as c:
            for i in range(3):
                self.assertEqual(allow(c, "mod", 3), [1, 3, 2 - i, 0, W, 0])
            self.assertEqual(allow(c, "mod", 3), [0, 3, 0, W, W, 0])
        info = self.backend(s)
        self.assertEqual(info["backend_durability_waits"], "4")
        self.assertEqual(info["backend_durability_replaced"], "0")
        # the replica has the module's counter (its RL.PEEK: 3 charged)
        self.assertEqual(r.cmd("RL.PEEK", "sl:m0:{mod}", "3", "10000", "ALGO", "fixed-window",
                               "AT", str(BASE))[:3], [0, 3, 0])
        s2 = self.node(m, "--durability", "replicas:2", "--backend-timeout", "1s",
                       name="two")
        s2.wait_section("backend", lambda i: i.get("backend_redis_path") == "module", "module")
        with s2.raw(timeout=60) as c:
            self.assertEqual(allow(c, "mod2", 3), DENY(3))
        self.assertEqual(self.backend(s2)["backend_durability_replaced"], "1")


class TestFailover(DurabilityCase):

    def failover(self, mode, cut):
        """Two client threads deciding on 8 keys through one sluiced; with
        `cut`, the replica is first cut off (its user disabled, its link
        killed) and the clients go on; then the master is killed with -9,
        the replica promoted, a new sluiced on it.  Returns (allowed
        answers per key, counts the promoted replica holds)."""
        m, r = self.pair(user="repl")
        s = self.node(m, "--durability", mode, "--backend-timeout", "1s")
        L = 100000
        allowed = {}
        replies = [0]
        lock = threading.Lock()
        stop = threading.Event()
        errors = []

        def client(n):
            try:
                with s.raw(timeout=30) as c:
                    for rnd in range(1000):  # bounded; stopped by the kill
                        if stop.is_set():
                            break
                        keys = ["f%d" % ((n * 4 + i) % 8) for i in range(16)]
                        c.send(b"".join(harness.encode("RL.ALLOW", k, str(L), "10s", "ALGO",
                                                       "fixed-window", "AT", str(BASE))
                                        for k in keys))
                        for k, v in zip(keys, c.read_replies(16)):
                            with lock:
                                replies[0] += 1
                            if isinstance(v, list) and v[0] == 1 and v != ALLOWP(L):
                                with lock:
                                    allowed[k] = allowed.get(k, 0) + 1
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        try:
            until = harness.deadline(20 * SLOW)
            while sum(allowed.values()) < 300 and time.monotonic() < until:
                time.sleep(0.01)
            if cut:
                m.cmd("ACL", "SETUSER", "repl", "off")
                m.cmd("CLIENT", "KILL", "TYPE", "replica")
                n0 = replies[0]
                until = harness.deadline(20 * SLOW)
                while replies[0] < n0 + 64 and time.monotonic() < until:
                    time.sleep(0.01)
                self.assertGreaterEqual(replies[0], n0 + 64)
            m.kill()  # right after allowed answers, with more in flight
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertEqual(errors, [])
        got = dict(allowed)
        self.assertGreater(sum(got.values()), 0)
        self.assertEqual(r.cmd("REPLICAOF", "NO", "ONE"), b"OK")
        s2 = self.node(r, "--backend-timeout", "5s", name="promoted")
        counts = {}
        with s2.raw(timeout=30) as c:
            for k in ("f%d" % i for i in range(8)):
                v = allow(c, k, L)
                self.assertEqual(v[0], 1, v)
                counts[k] = L - 1 - v[2]  # what the promoted replica held before this one
        return got, counts

    def check_kept(self, got, counts):
        for k, n in got.items():
            self.assertGreaterEqual(counts[k], n, "key %s: %d allowed, %d on the promoted "
                                    "replica (all: %r / %r)" % (k, n, counts[k], got, counts))

    def measure(self, what, got, counts):
        forgotten = sum(max(0, n - counts[k]) for k, n in got.items())
        sys.stderr.write("\n  [durability none, %s] %d allowed, %d forgotten after failover\n"
                         % (what, sum(got.values()), forgotten))

    def test_master_killed_replicas_1_forgets_nothing(self):
        got, counts = self.failover("replicas:1", cut=False)
        self.check_kept(got, counts)

    def test_replica_cut_off_then_master_killed_replicas_1_forgets_nothing(self):
        got, counts = self.failover("replicas:1", cut=True)
        self.check_kept(got, counts)

    def test_master_killed_none_measured(self):
        got, counts = self.failover("none", cut=False)
        self.measure("master killed", got, counts)

    def test_replica_cut_off_then_master_killed_none_measured(self):
        got, counts = self.failover("none", cut=True)
        self.measure("replica cut off, master killed", got, counts)


class ReplicatedCluster:
    """A Redis Cluster of 3 masters with one replica each (redis-cli
    --cluster create --cluster-replicas 1), every node a RedisServer."""

    def __init__(self):
        self.nodes = [RedisServer(cluster=True) for _ in range(6)]

    def start(self, timeout=60):
        for r in self.nodes:
            r.start()
        p = subprocess.run(["redis-cli", "--cluster", "create"] +
                           ["%s:%d" % (HOST, r.port) for r in self.nodes] +
                           ["--cluster-replicas", "1", "--cluster-yes"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if p.returncode != 0:
            raise AssertionError("redis-cli --cluster create: %s%s" % (p.stdout, p.stderr))
        until = harness.deadline(timeout)
        while time.monotonic() < until:
            if all(harness.RedisCluster.ready(r) for r in self.nodes) and all(
                    self.replica_of(m) is not None for m in self.masters()):
                return self
            time.sleep(0.05)
        raise AssertionError("the cluster never became ready with a replica per master")

    def masters(self):
        return [r for r in self.nodes
                if b"role:master" in r.cmd("INFO", "replication")]

    def replica_of(self, master):
        """The node replicating master, online (None: not yet)."""
        info = harness.parse_info(master.cmd("INFO", "replication"))
        for k, v in info.items():
            if k.startswith("slave") and "state=online" in v:
                port = int(re.search(r"port=(\d+)", v).group(1))
                return next(r for r in self.nodes if r.port == port)
        return None

    def url(self):
        return "redis-cluster://" + ",".join("%s:%d" % (HOST, r.port) for r in self.masters())

    def cleanup(self):
        problems = []
        for r in self.nodes:
            try:
                r.cleanup()
            except AssertionError as e:
                problems.append(str(e))
        if problems:
            raise AssertionError("\n".join(problems))


class TestWaitCluster(DurabilityCase):

    def test_one_wait_per_master_and_one_replica_stopped(self):
        c = ReplicatedCluster()
        self.addCleanup(c.cleanup)
        c.start()
        masters = c.masters()
        self.assertEqual(len(masters), 3)
        s = Server("--backend", c.url(), "--threads", "1", "--durability", "replicas:1",
                   "--backend-timeout", "5s", trust_client_time=True, name="cluster-wait")
        s.start()
        self.addCleanup(s.cleanup)
        s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        # a key on each master
        on = {}
        for i in range(200):
            k = "ck%d" % i
            slot = masters[0].cmd("CLUSTER", "KEYSLOT", "sl:00:{%s}" % k)
            for e in masters[0].cmd("CLUSTER", "SLOTS"):
                if e[0] <= slot <= e[1]:
                    on.setdefault(e[2][1], k)
            if len(on) == 3:
                break
        self.assertEqual(len(on), 3)
        with s.raw(timeout=60) as conn:
            for port, k in sorted(on.items()):
                self.assertEqual(allow(conn, k, 3), [1, 3, 2, 0, W, 0], "key %s" % k)
            info = self.backend(s)
            self.assertEqual(info["backend_durability_waits"], "3")  # one per master asked
            self.assertEqual(info["backend_durability_replaced"], "0")
            # every master's replica holds its key's decision
            for port, k in on.items():
                master = next(m for m in masters if m.port == port)
                with RawConn(c.replica_of(master).port) as rc:
                    self.assertEqual(rc.cmd("READONLY"), b"OK")
                    v = rc.cmd("GET", "sl:00:{%s}" % k)
                self.assertEqual(int(v.split()[1]), 1)
        s2 = Server("--backend", c.url(), "--threads", "1", "--durability", "replicas:1",
                    "--backend-timeout", "1s", trust_client_time=True, name="cluster-stall")
        s2.start()
        self.addCleanup(s2.cleanup)
        s2.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        stopped_port, stopped_key = sorted(on.items())[0]
        replica = c.replica_of(next(m for m in masters if m.port == stopped_port))
        replica.pause()
        try:
            with s2.raw(timeout=60) as conn:
                self.assertEqual(allow(conn, stopped_key, 3), DENY(3))
                for port, k in sorted(on.items())[1:]:
                    self.assertEqual(allow(conn, k, 3), [1, 3, 1, 0, W, 0], "key %s" % k)
        finally:
            replica.resume()
        self.assertEqual(self.backend(s2)["backend_durability_replaced"], "1")


class TestDurabilityOption(unittest.TestCase):

    def refused(self, *args):
        p = subprocess.run([SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0"] +
                           list(args), capture_output=True, timeout=30 * SLOW,
                           stdin=subprocess.DEVNULL)
        self.assertNotEqual(p.returncode, 0)
        return p.stderr.decode() + p.stdout.decode()

    def test_bad_values(self):
        for v in ("replicas:0", "replicas:", "replicas:101", "replicas:x", "all", "REPLICAS:1"):
            out = self.refused("--durability", v)
            self.assertIn("invalid --durability '%s': expected none, or replicas:N with N 1..100"
                          % v, out)

    def test_replicas_with_local_backend(self):
        out = self.refused("--durability", "replicas:1")
        self.assertIn("--durability replicas:1 needs a Redis --backend (redis:// or "
                      "redis-cluster://): with --backend local there is no replica to wait for",
                      out)


if __name__ == "__main__":
    unittest.main()
