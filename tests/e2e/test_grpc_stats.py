"""envoyproxy/ratelimit's statistics names, over a real gRPC client
(python3-grpcio, test_grpc.py's stubs) and read back from INFO rulestats
(docs/rules.md, "Statistics names"):

- a rule with `name:` counts under its descriptor path, as the peer's
  config_test.go TestBasicConfig asserts of key4 (named key4_rate_limit,
  counted as test-domain.key4); the name stays in RL.RULES;
- a descriptor given a limit override counts under the peer's
  descriptorKey, as TestConfigLimitOverride asserts
  (test-domain.key1_value1.subkey1_something): matched is its total_hits,
  denied its over_limit, allowed its within_limit;
- a client sending ever new override entries gets at most 1,000 names per
  domain (SL_STATS_MAX_VALUES); past them the domain's entry counts them.
"""

import os
import re
import shutil
import tempfile
import unittest

import harness
from harness import HOST, assert_clean_stop

import grpc
import test_grpc as G

R = G.rls_pb2.RateLimitResponse
OK, OVER = R.OK, R.OVER_LIMIT
MAX_VALUES = 1000  # SL_STATS_MAX_VALUES (src/server/stats.h)

# The peer's test/config/basic_config.yaml, the parts these tests use, and
# a domain of its own for the bound.
RULES = """domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 1
      name: key4_rate_limit
"""
BOUND = """domain: bound-domain
descriptors:
  - key: anything
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

LINE = "matched=%d,allowed=%d,denied=%d,shadow=0,elastic=0,over_quota=0"


class TestStatisticsNames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-grpc-stats-")
        for name, text in (("test.yaml", RULES), ("bound.yaml", BOUND)):
            with open(os.path.join(cls.dir, name), "w") as f:
                f.write(text)
        cls.srv = G.start("--rules", cls.dir, "--watch-rules=no", name="TestGrpcStats")
        cls.ch = grpc.insecure_channel("%s:%d" % (HOST, cls.srv.grpc_port))
        cls.stub = G.rls_pb2_grpc.RateLimitServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()
        try:
            assert_clean_stop(cls.srv)
        finally:
            shutil.rmtree(cls.dir, True)

    def call(self, req):
        return self.stub.ShouldRateLimit(req, timeout=G.TIMEOUT)

    def rulestats(self):
        """INFO rulestats: {name: the text after the colon}, and the info."""
        info = self.srv.info("rulestats")
        return {k[5:]: v for k, v in info.items() if k.startswith("rule_")}, info

    def test_basic_config_named_limit(self):
        """TestBasicConfig, key4: named key4_rate_limit, counted as
        test-domain.key4; RL.RULES lists both."""
        harness.wait_window_room(86400, 3)  # 1 a day: both calls in one day
        got = [self.call(G.request("test-domain", [("key4", "foo")])).overall_code
               for _ in range(2)]
        self.assertEqual(got, [OK, OVER])
        stats, _ = self.rulestats()
        self.assertEqual(stats["test-domain.key4"], LINE % (2, 1, 1))
        self.assertNotIn("key4_rate_limit", stats)
        with self.srv.raw() as c:
            r = c.cmd("RL.RULES")
        limits = [lim[:2] for dom in r[15] for lim in dom[2]]
        self.assertIn([b"key4_rate_limit", b"test-domain.key4"], limits)

    def test_config_limit_override(self):
        """TestConfigLimitOverride: an override counts under the request's
        descriptorKey whatever limit it gives; other values, other names."""
        entries = [("key1", "value1"), ("subkey1", "something")]
        harness.wait_window_room(3600, 3)  # 2 an hour, 3 calls: in one hour
        r = self.call(G.request_with_overrides("test-domain", (entries, (10, R.RateLimit.DAY))))
        self.assertEqual(r.overall_code, OK)
        got = [self.call(G.request_with_overrides(
            "test-domain", (entries, (2, R.RateLimit.HOUR)))).overall_code for _ in range(3)]
        self.assertEqual(got, [OK, OK, OVER])
        r = self.call(G.request_with_overrides(
            "test-domain", ([("key1", "value1"), ("subkey1", "something_else")],
                            (42, R.RateLimit.HOUR))))
        self.assertEqual(r.overall_code, OK)
        # an entry without a value: its key alone in the name -- here the
        # path of the rule key1_value1 -> subkey1, whose entry it shares, as
        # the peer's counters are one per name
        r = self.call(G.request_with_overrides(
            "test-domain", ([("key1", "value1"), ("subkey1", "")], (0, R.RateLimit.MINUTE))))
        self.assertEqual(r.overall_code, OVER)
        # a domain without rules: nothing counted (the peer: no limit)
        r = self.call(G.request_with_overrides("foo_domain", (entries, (10, R.RateLimit.DAY))))
        self.assertEqual(r.overall_code, OK)
        stats, _ = self.rulestats()
        self.assertEqual(stats["test-domain.key1_value1.subkey1_something"], LINE % (4, 3, 1))
        self.assertEqual(stats["test-domain.key1_value1.subkey1_something_else"],
                         LINE % (1, 1, 0))
        self.assertEqual(stats["test-domain.key1_value1.subkey1"], LINE % (1, 0, 1))
        self.assertEqual(stats["test-domain"], LINE % (0, 0, 0) + ",values=3,overflow=0")
        self.assertEqual([n for n in stats if n.startswith("foo_domain")], [])

    def test_override_names_are_bounded(self):
        """1,000 override names per domain; past them each request counts
        under the domain's entry, and its overflow."""
        _, info = self.rulestats()
        tracked = int(info["rules_tracked"])
        n = MAX_VALUES + 5
        users = ["u%d" % i for i in range(n)]
        allowed = 0
        # 1 a minute: u0's second call (OVER) in the minute of its first
        harness.wait_window_room(60, 5)
        for i in range(0, n, 16):  # at most 16 descriptors a request
            r = self.call(G.request_with_overrides(
                "bound-domain", *[([("user", u)], (1, R.RateLimit.MINUTE))
                                  for u in users[i:i + 16]]))
            allowed += sum(s.code == OK for s in r.statuses)
        self.assertEqual(allowed, n)
        # a name it has goes on counting; a new one is past the bound
        r = self.call(G.request_with_overrides(
            "bound-domain", ([("user", "u0")], (1, R.RateLimit.MINUTE)),
            ([("user", "new")], (1, R.RateLimit.MINUTE))))
        self.assertEqual([s.code for s in r.statuses], [OVER, OK])
        stats, info = self.rulestats()
        self.assertEqual(stats["bound-domain"],
                         LINE % (6, 6, 0) + ",values=%d,overflow=6" % MAX_VALUES)
        names = [k for k in stats if k.startswith("bound-domain.user_")]
        self.assertEqual(len(names), MAX_VALUES)
        self.assertEqual(stats["bound-domain.user_u0"], LINE % (2, 1, 1))
        self.assertNotIn("bound-domain.user_u%d" % MAX_VALUES, stats)
        self.assertNotIn("bound-domain.user_new", stats)
        self.assertEqual(int(info["rules_tracked"]), tracked + 1 + MAX_VALUES)


if __name__ == "__main__":
    unittest.main()
