"""The INFO fields docs/sluiced.md names that no other test reads for their
value: uptime_in_seconds, total_connections_received, connected_clients,
last_snapshot_unix_ms (with snapshots_written and
last_snapshot_status), rules_loaded_at_ms, rules_domains and
rules_descriptors -- each checked against what the test did or against
bounds it observed itself (no timing threshold)."""

import os
import shutil
import tempfile
import time
import unittest

from harness import RespError, Server, assert_clean_stop

API = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: org
    descriptors:
      - key: team
        rate_limit: {unit: hour, requests_per_unit: 50}
"""
WEB = """domain: web
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 3}
"""


def wall_ms():
    return int(time.time() * 1000)


class TestInfoValues(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-info-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, *args, **kw):
        s = Server(*args, name=self.id().split(".")[-1], **kw)
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_uptime_connections_and_clients(self):
        t0 = time.monotonic()
        s = self.start()
        info = s.info()
        up = int(info["uptime_in_seconds"])
        self.assertGreaterEqual(up, 0)
        self.assertLessEqual(up, time.monotonic() - t0 + 1, "no older than the process")
        # it counts seconds: reaches 1 (bounded wait), never goes back
        self.assertGreaterEqual(s.wait_info("uptime_in_seconds", lambda v: v >= 1, "server"), 1)
        self.assertGreaterEqual(s.info_int("uptime_in_seconds", "server"), 1)

        # connections accepted: exactly one per connection, INFO's own included
        n0 = s.info_int("total_connections_received", "stats")
        held = [s.raw() for _ in range(5)]
        try:
            for c in held:
                self.assertEqual(c.cmd("PING"), b"PONG")
            info = s.info()
            self.assertEqual(int(info["total_connections_received"]), n0 + 6)
            # connections now: the five held and INFO's own
            self.assertEqual(int(info["connected_clients"]), 6)
        finally:
            for c in held:
                c.close()
        s.wait_info("connected_clients", lambda v: v == 1, "clients")
        assert_clean_stop(s)

    def test_last_snapshot_unix_ms(self):
        snap = os.path.join(self.dir, "state.snap")
        t0 = wall_ms()
        s = self.start("--snapshot", snap, "--snapshot-interval", "100ms")
        info = s.info("persistence")
        if info["snapshots_written"] == "0":
            self.assertEqual(info["last_snapshot_unix_ms"], "0", "no snapshot yet")
        n = s.wait_info("snapshots_written", lambda v: v >= 1, "persistence")
        first = s.info_int("last_snapshot_unix_ms", "persistence")
        t1 = wall_ms()
        self.assertTrue(t0 <= first <= t1, (t0, first, t1))
        self.assertEqual(s.info("persistence")["last_snapshot_status"], "ok")
        s.wait_info("snapshots_written", lambda v: v >= n + 2, "persistence")
        later = s.info_int("last_snapshot_unix_ms", "persistence")
        self.assertTrue(first < later <= wall_ms(), (first, later))
        self.assertGreater(os.path.getsize(snap), 0)
        assert_clean_stop(s)

    def test_rules_domains_descriptors_loaded_at(self):
        with open(os.path.join(self.dir, "api.yaml"), "w") as f:
            f.write(API)
        t0 = wall_ms()
        s = self.start("--rules", self.dir, "--watch-rules=no")
        t1 = wall_ms()
        info = s.info("rules")
        self.assertEqual(info["rules_domains"], "1")
        # user, org and org's team: every descriptor map counts
        self.assertEqual(info["rules_descriptors"], "3")
        loaded = int(info["rules_loaded_at_ms"])
        self.assertTrue(t0 <= loaded <= t1, (t0, loaded, t1))

        with open(os.path.join(self.dir, "web.yaml"), "w") as f:
            f.write(WEB)
        t2 = wall_ms()
        with s.raw() as c:
            self.assertEqual(c.cmd("RL.RULES", "RELOAD"), 2)
        t3 = wall_ms()
        info = s.info("rules")
        self.assertEqual(info["rules_domains"], "2")
        self.assertEqual(info["rules_descriptors"], "4")
        reloaded = int(info["rules_loaded_at_ms"])
        self.assertTrue(t2 <= reloaded <= t3, (t2, reloaded, t3))

        # a refused reload changes none of them
        with open(os.path.join(self.dir, "web.yaml"), "w") as f:
            f.write("domain: web\ndescriptors: [\n")
        with s.raw() as c:
            self.assertIsInstance(c.cmd("RL.RULES", "RELOAD"), RespError)
        after = s.info("rules")
        for k in ("rules_domains", "rules_descriptors", "rules_loaded_at_ms", "rules_version"):
            self.assertEqual(after[k], info[k], k)
        assert_clean_stop(s)


if __name__ == "__main__":
    unittest.main()
