"""test_lease_durable.py -- --lease on with --durability replicas:1: a
lease's units are spent only once Redis's WAIT says the replica has the
take (op T) that granted them.  Against a real master and its replica
(REPLICAOF) on free loopback ports, stopped by PID, one sluiced node:

  - replica live: a hot key's decisions are paid by leases (INFO
    backend_lease_decisions grows) and every answer is allowed;
  - replica stopped (SIGSTOP): T is answered by the master at once, but
    its WAIT cannot be: no decision may be paid by that lease -- a
    failover then could hand the same units to another node.  Every
    answer is the failure policy's denial, exactly; no lease decision is
    counted; the units of the unconfirmed take are counted expired (never
    handed back: an R could subtract units a new master never counted);
  - replica resumed: leases pay decisions again.

Before the fix (lease.c recorded a lease when T's reply came), the later
bursts with the replica stopped were answered "allowed" by the lease at
once.
"""
# Two Redis and a node, a few hundred requests; the test command is near its
# budget, so plain only (passed under ASan by hand: build/asan, 4.5 s).
# sluice-e2e: plain-only

import time
import unittest

import harness
from harness import HOST, SLOW, RedisServer, Server, encode

L = 100000
DENY = [0, L, 0, 1000, 1000, 0]  # --on-backend-error deny's answer
HOT = ("RL.ALLOW", "hot", str(L), "3650d", "ALGO", "fixed-window")
BURST = 40


def wait_online(master, timeout=30):
    until = harness.deadline(timeout * SLOW)
    while time.monotonic() < until:
        info = harness.parse_info(master.cmd("INFO", "replication"))
        if any(k.startswith("slave") and "state=online" in v for k, v in info.items()):
            return
        time.sleep(0.05)
    raise AssertionError("the replica never came online: %r" % info)


class LeaseDurableTest(unittest.TestCase):
    MODULE = None  # ModuleLeaseDurableTest: [] (both Redis load sluice.so; RL.LEASE)

    def wait_no_lease(self, s):
        """Until the node holds no lease (idle ones go back after 50 ms)."""
        until = harness.deadline(10 * SLOW)
        while time.monotonic() < until:
            if s.info_int("backend_leases_outstanding", "backend") == 0:
                return
            time.sleep(0.02)
        self.fail("leases still outstanding: %r" % s.info("backend"))

    def test_a_lease_is_spent_only_after_its_wait(self):
        m = RedisServer(module_args=self.MODULE).start()
        self.addCleanup(m.cleanup)
        r = RedisServer(module_args=self.MODULE).start()
        self.addCleanup(r.cleanup)
        self.assertEqual(m.cmd("CONFIG", "SET", "repl-diskless-sync-delay", "0"), b"OK")
        self.assertEqual(r.cmd("REPLICAOF", HOST, str(m.port)), b"OK")
        wait_online(m)
        s = Server("--backend", m.url(), "--threads", "1", "--lease", "on", "--durability",
                   "replicas:1", "--backend-timeout", "1s", name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        self.assertEqual(s.info("backend")["backend_lease"], "on")
        self.assertEqual(s.info("backend")["backend_redis_path"],
                         "script" if self.MODULE is None else "module")

        # replica live: leases pay decisions, every answer allowed
        with s.raw(timeout=30) as c:
            for _ in range(4):
                c.send(encode(*HOT) * BURST)
                replies = c.read_replies(BURST, timeout=30 * SLOW)
                self.assertEqual([x[0] for x in replies], [1] * BURST, replies)
        served = s.info_int("backend_lease_decisions", "backend")
        self.assertGreater(served, 0, s.info("backend"))
        self.wait_no_lease(s)
        expired = s.info_int("backend_lease_units_expired", "backend")

        # replica stopped: T's units are never spent; every answer the policy's
        r.pause()
        try:
            with s.raw(timeout=30) as c:
                # the later bursts come while the first T's WAIT waits (and
                # within SL_LEASE_IDLE_MS of each other: a lease would stay)
                for _ in range(10):
                    c.send(encode(*HOT) * BURST)
                    time.sleep(0.01)
                replies = c.read_replies(10 * BURST, timeout=30 * SLOW)
            self.assertEqual(replies, [DENY] * (10 * BURST))
            info = s.info("backend")
            self.assertEqual(int(info["backend_lease_decisions"]), served, info)
            self.assertGreater(int(info["backend_lease_units_expired"]), expired, info)
            self.assertEqual(info["backend_leases_outstanding"], "0", info)
        finally:
            r.resume()

        # resumed: leases pay decisions again (once the connection, dropped
        # when a request behind a WAIT passed --backend-timeout, is back)
        wait_online(m)
        until = harness.deadline(30 * SLOW)
        while s.info("backend")["backend_status"] != "up" and time.monotonic() < until:
            time.sleep(0.05)
        self.assertEqual(s.info("backend")["backend_status"], "up")
        with s.raw(timeout=30) as c:
            for _ in range(4):
                c.send(encode(*HOT) * BURST)
                replies = c.read_replies(BURST, timeout=30 * SLOW)
                self.assertEqual([x[0] for x in replies], [1] * BURST, replies)
        self.assertGreater(s.info_int("backend_lease_decisions", "backend"), served)


class ModuleLeaseDurableTest(LeaseDurableTest):
    """The same on the sluice module's path (RL.LEASE replicated with AT)."""
    MODULE = []


if __name__ == "__main__":
    unittest.main()
