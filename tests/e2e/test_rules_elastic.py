"""Elastic limits in sluiced: --capacity N/DURATION sets the server-wide
spare pool; above its own limit a descriptor passes (ELASTIC) up to its
ceiling while the pool has room, exactly at both edges; Lyft's `replaces`;
and a bad --capacity is refused at start with what is wrong."""

import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BASE, SLOW, SLUICED, RespError, Server, assert_clean_stop, run_checked

RULES = """domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, elastic: 5, name: tenant}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 2, name: team_default}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 100
      name: vip
      replaces: [{name: team_default}]
"""


class TestElastic(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-elastic-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "api.yaml")
        with open(self.path, "w") as f:
            f.write(RULES)

    def start(self, *args):
        s = Server("--rules", self.path, *args, trust_client_time=True,
                   name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_elastic_edges_on_the_pool(self):
        s = self.start("--capacity", "6/1m")
        self.assertEqual(s.info("rules")["rules_capacity"], "6/1m")
        t = BASE  # a minute boundary
        with s.raw() as c:
            def check(tenant, at):
                r = c.cmd("RL.CHECK", "api", "AT", at, "DESCRIPTOR", "tenant", tenant)
                self.assertNotIsInstance(r, RespError, r)
                return r[0], r[6][0].decode(), r[6][2], r[6][3]
            for i in range(3):
                self.assertEqual(check("a", t), (1, "OK", 3, 2 - i))
            self.assertEqual(check("a", t), (1, "ELASTIC", 5, 1))
            self.assertEqual(check("a", t), (1, "ELASTIC", 5, 0))
            self.assertEqual(check("a", t), (0, "OVER_LIMIT", 3, 0))   # the ceiling
            for i in range(3):                                        # b: its own 3
                self.assertEqual(check("b", t), (1, "OK", 3, 2 - i))
            self.assertEqual(check("b", t), (0, "OVER_LIMIT", 3, 0))   # pool full (6 of 6)
            self.assertEqual(check("b", t + 60000), (1, "OK", 3, 2))  # next minute
        s.stop()
        assert_clean_stop(s)

    def test_no_capacity_no_elastic(self):
        s = self.start()
        with s.raw() as c:
            for _ in range(3):
                c.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "tenant", "a")
            r = c.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "tenant", "a")
        self.assertEqual(r[0], 0)
        self.assertEqual(r[6][0], b"OVER_LIMIT")
        s.stop()
        assert_clean_stop(s)

    def test_rule_counters_are_out_of_rl_allow_reach(self):
        # A rule's counter and the pool live in their own key space: an
        # RL.ALLOW or RL.RESET naming the same bytes ("api|tenant=a") meets
        # a key of its own, so no client can clear or spend a rule's
        # counter by guessing its name -- and the counter survives a
        # restart in its own space.
        snap = os.path.join(self.dir, "state.snap")
        s = self.start("--capacity", "6/1m", "--snapshot", snap)
        t = BASE
        with s.raw() as c:
            def check():
                r = c.cmd("RL.CHECK", "api", "AT", t, "DESCRIPTOR", "tenant", "a")
                self.assertNotIsInstance(r, RespError, r)
                return r[6][0].decode(), r[6][3]
            for i in range(5):
                check()
            self.assertEqual(check(), ("OVER_LIMIT", 0))  # 3 + 2 elastic, at the ceiling
            for key in ("api|tenant=a", "|spare-capacity"):
                self.assertEqual(c.cmd("RL.RESET", key), 0, key)  # nothing of RL.ALLOW's there
            r = c.cmd("RL.ALLOW", "api|tenant=a", 3, "1m", "ALGO", "fixed-window", "AT", t)
            self.assertEqual(r[:3], [1, 3, 2])               # a fresh key of its own
            self.assertEqual(check(), ("OVER_LIMIT", 0))     # the rule's counter: still full
        s.stop()
        assert_clean_stop(s)
        s2 = self.start("--capacity", "6/1m", "--snapshot", snap)
        with s2.raw() as c:
            r = c.cmd("RL.CHECK", "api", "AT", t, "DESCRIPTOR", "tenant", "a")
            self.assertEqual(r[6][0], b"OVER_LIMIT")
            r = c.cmd("RL.PEEK", "api|tenant=a", 3, "1m", "ALGO", "fixed-window", "AT", t)
            self.assertEqual(r[:3], [1, 3, 1])               # RL.ALLOW's key kept its 1
        s2.stop()
        assert_clean_stop(s2)

    def test_replaces(self):
        s = self.start()
        with s.raw() as c:
            for _ in range(2):
                c.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "team", "red")
            r = c.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "team", "red",
                      "DESCRIPTOR", "vip", "yes")
        self.assertEqual(r[0], 1)
        self.assertEqual(r[6], [b"OK", b"team_default", 0, 0, 0, 0])
        self.assertEqual(r[7], [b"OK", b"vip", 100, 99, 0, 60000])
        s.stop()
        assert_clean_stop(s)

    def test_bad_capacity_is_refused(self):
        for bad, want in (("6", "must be N/DURATION"), ("x/1s", "N must be a whole number"),
                          ("5/soon", "'soon' is not a duration"), ("0/1s", "N must be")):
            p = run_checked([SLUICED, "--port", "0", "--capacity", bad], capture_output=True,
                            timeout=30 * SLOW, stdin=subprocess.DEVNULL)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(want, p.stderr.decode(), bad)


if __name__ == "__main__":
    unittest.main()
