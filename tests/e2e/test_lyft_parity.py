"""The Lyft parity suite: envoyproxy/ratelimit's own tests, replayed through
RL.CHECK with our fixtures (tests/e2e/lyft/, none copied from Lyft).

From Lyft's config tests (test/config/config_test.go): basic, shadow mode,
wildcards (at the end, in the middle, several, two that match), replaces,
unlimited, share_threshold, quota_mode, metadata, every unit, merged
domains (MERGE_DOMAIN_CONFIG) and every file Lyft refuses.  From its
integration test (test/integration/integration_test.go): an unknown
domain, the first limits and remainings, over-limit sequences on one key
and on two keys of a request, share_threshold, and hits_addend (COST).

Each assertion is Lyft's answer, or -- where sluice differs on purpose --
sluice's, with Lyft's beside it and the line of
docs/migrating-from-envoy-ratelimit.md that says why; with `--count-denied`
sluice gives Lyft's numbers exactly (TestLyftCounting)."""

import os
import shutil
import tempfile
import unittest

import harness
from harness import (BASE, RespError, Server, ServerTestCase, assert_clean_stop, encode,
                     free_port, nothing_listening)

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lyft")
CONFIG = os.path.join(HERE, "config")
INTEGRATION = os.path.join(HERE, "integration")
MERGE = os.path.join(HERE, "merge")
BAD = os.path.join(HERE, "bad")

SECOND, MINUTE, HOUR, DAY = 1000, 60000, 3600000, 86400000
NO_RULE = [b"NO_RULE", None, 0, 0, 0, 0]


def rl_check(domain, descs, at, cost=1):
    """RL.CHECK's arguments: descs is a list of flat (k, v, k2, v2, ...)."""
    args = ["RL.CHECK", domain]
    if cost != 1:
        args += ["COST", cost]
    args += ["AT", at]
    for d in descs:
        args.append("DESCRIPTOR")
        args += list(d)
    return args


class LyftCase(ServerTestCase):
    """One server per class on RULES (a folder of fixtures), the client's
    time trusted so that every window is exact."""

    RULES = CONFIG
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.SERVER_ARGS = ("--rules", cls.RULES, "--watch-rules=no") + tuple(cls.EXTRA)
        super().setUpClass()

    def check(self, domain, *descs, at=BASE, cost=1):
        with self.srv.raw() as c:
            return c.cmd(*rl_check(domain, descs, at, cost))

    def checks(self, cmds):
        """Pipelined: every reply, in order."""
        with self.srv.raw(timeout=30) as c:
            c.send(b"".join(encode(*a) for a in cmds))
            return c.read_replies(len(cmds), timeout=30)

    def repeat(self, n, domain, *descs, at=BASE, cost=1):
        return self.checks([rl_check(domain, descs, at, cost)] * n)

    def rules_counts(self, name):
        """RL.RULES' per-limit counts of the limit `name`: [checked, over,
        shadow_over, elastic] (Lyft's total_hits, over_limit, ...)."""
        with self.srv.raw() as c:
            r = c.cmd("RL.RULES")
        for dom in r[15]:
            for lim in dom[2]:
                if lim[0] == name.encode():
                    return lim[4:]
        self.fail("no limit %s in RL.RULES: %r" % (name, r))

    def rules_entry(self, name):
        with self.srv.raw() as c:
            r = c.cmd("RL.RULES")
        for dom in r[15]:
            for lim in dom[2]:
                if lim[0] == name.encode():
                    return lim
        self.fail("no limit %s in RL.RULES: %r" % (name, r))


class TestLyftConfig(LyftCase):
    """Lyft's test/config cases, each descriptor as Lyft's GetLimit finds it:
    the limit's name is Lyft's statistics key (its descriptor path)."""

    def test_basic_config(self):
        """TestBasicConfig: what matches, what does not, each limit."""
        self.assertEqual(self.check("foo_domain", ("key1", "value1")), [1, 0, 0, 0, 0, 0, NO_RULE])
        for d in (("key1", "something"),                     # no key-only key1
                  ("key1", "value1"),                        # routes only: no limit
                  ("key2", "value2", "subkey", "subvalue"),  # one entry too deep
                  ("key5", "value5", "subkey5", "subvalue"),  # no such nested value
                  ("key2", "value3")):                       # no limit: let through
            self.assertEqual(self.check("test-domain", d), [1, 0, 0, 0, 0, 0, NO_RULE], d)
        cases = [
            (("key1", "value1", "subkey1", "something"), "key1_value1.subkey1", 5, SECOND),
            (("key1", "value1", "subkey1", "subvalue1"), "key1_value1.subkey1_subvalue1", 10,
             SECOND),
            (("key2", "something"), "key2", 20, MINUTE),
            (("key2", "value2"), "key2_value2", 30, MINUTE),
            (("key3", "foo"), "key3", 1, HOUR),
            (("key4", "foo"), "key4", 1, DAY),
            (("key5", "value5"), "key5_value5", 15, DAY),
            (("key5", "value5", "subkey5", "subvalue5"), "key5_value5.subkey5_subvalue5", 25, DAY),
            (("key7", "unspecified_value"), "key7", 70, MINUTE),
        ]
        for d, name, limit, window in cases:
            r = self.check("test-domain", d)
            self.assertEqual(r[6], [b"OK", b"test-domain." + name.encode(), limit, limit - 1, 0,
                                    window], d)
            self.assertEqual(r[:6], [1, limit, limit - 1, 0, window, 0], d)
        # a key-only level counts each value on its own
        r = self.check("test-domain", ("key1", "value1", "subkey1", "other"))
        self.assertEqual(r[6][2:4], [5, 4])
        # detailed_metric: per-value statistics (TestLyftStatistics); the
        # same limit for every value
        r = self.check("test-domain", ("key7", "another_value"))
        self.assertEqual(r[6], [b"OK", b"test-domain.key7", 70, 69, 0, MINUTE])
        self.assertEqual(self.rules_entry("test-domain.key7")[2],
                         b"70/minute fixed-window detailed_metric")
        # unlimited: always OK (Lyft: OK without a limit), nothing counted
        for r in self.repeat(60, "test-domain", ("key6", "foo")):
            self.assertEqual(r, [1, 0, 0, 0, 0, 0, [b"UNLIMITED", b"test-domain.key6", 0, 0, 0, 0]])

    def test_shadow_mode(self):
        """TestShadowModeConfig.  Lyft answers a shadow-mode rule over its
        limit OK (and counts it); sluice answers SHADOW, still allowed
        (migrating doc: "RESP and HTTP")."""
        got = self.repeat(6, "shadow-domain", ("key1", "value1", "subkey1", "something"))
        self.assertEqual([r[0] for r in got], [1] * 5 + [0])          # not shadow: enforced
        self.assertEqual(got[5][6][:2], [b"OVER_LIMIT", b"shadow-domain.key1_value1.subkey1"])
        got = self.repeat(11, "shadow-domain", ("key1", "value1", "subkey1", "subvalue1"))
        self.assertEqual([r[0] for r in got], [1] * 11)               # shadow: never denies
        self.assertEqual(got[10][6], [b"SHADOW", b"shadow-domain.key1_value1.subkey1_subvalue1",
                                      10, 0, SECOND, SECOND])
        self.assertEqual(got[10][:6], [1, 0, 0, 0, 0, 0])             # changes no answer
        got = self.repeat(21, "shadow-domain", ("key2", "something"))
        self.assertEqual([r[0] for r in got], [1] * 21)
        self.assertEqual(got[20][6][0], b"SHADOW")
        got = self.repeat(31, "shadow-domain", ("key2", "value2"))   # the exact one: enforced
        self.assertEqual([r[0] for r in got], [1] * 30 + [0])
        self.assertEqual(self.rules_counts("shadow-domain.key2"), [21, 0, 1, 0])

    def test_wildcards(self):
        """TestWildcardConfig, with a '*' in the middle and several."""
        a, b = self.check("wildcard-domain", ("noVal", "foo1")), \
            self.check("wildcard-domain", ("noVal", "foo2"))
        self.assertEqual(a[6], [b"OK", b"wildcard-domain.noVal", 20, 19, 0, MINUTE])
        self.assertEqual(a[6], b[6])                 # the same rule, a counter each
        for v in ("foo1", "foo2", "foo"):
            self.assertEqual(self.check("wildcard-domain", ("wild", v))[6],
                             [b"OK", b"wildcard-domain.wild_foo*", 20, 19, 0, MINUTE], v)
        self.assertEqual(self.check("wildcard-domain", ("wild", "bar"))[6], NO_RULE)
        self.assertEqual(self.check("wildcard-domain", ("noWild", "foo1"))[6], NO_RULE)
        # Lyft's midWild "bar*b" matches "barab" (it did not before Lyft's
        # middle wildcards; neither did sluice)
        for v in ("barab", "barb", "bar-x-b"):
            self.assertEqual(self.check("wildcard-domain", ("midWild", v))[6][:2],
                             [b"OK", b"wildcard-domain.midWild_bar*b"], v)
        for v in ("bar", "barbx", "bab"):
            self.assertEqual(self.check("wildcard-domain", ("midWild", v))[6], NO_RULE, v)
        for v in ("foobarbaz", "foo-bar-baz", "foo_1_bar_2_baz"):
            self.assertEqual(self.check("wildcard-domain", ("multiWild", v))[6][:2],
                             [b"OK", b"wildcard-domain.multiWild_foo*bar*baz"], v)
        for v in ("foobazbar", "foobarbaz!"):
            self.assertEqual(self.check("wildcard-domain", ("multiWild", v))[6], NO_RULE, v)
        # README example 9's path: each value its own counter, 2 a second
        p = "/api/v1/resource/42/action"
        got = self.repeat(3, "wildcard-domain", ("path", p), at=BASE + 250)
        self.assertEqual([r[0] for r in got], [1, 1, 0])
        self.assertEqual(got[2][6], [b"OVER_LIMIT", b"wildcard-domain.path_/api/*/resource/*/action",
                                     2, 0, 750, 750])
        self.assertEqual(self.check("wildcard-domain", ("path", "/api/v2/resource/7/action"),
                                    at=BASE + 250)[0], 1)
        self.assertEqual(self.check("wildcard-domain", ("path", "/api/v1/resource/42/actions"))[6],
                         NO_RULE)
        # two wildcards match: the first in the file, as Lyft
        self.assertEqual(self.check("wildcard-domain", ("route", "/v1/users"))[6][:3],
                         [b"OK", b"wildcard-domain.route_/v1/*", 3])

    def test_replaces(self):
        """Lyft's replaces: a request matching both limits applies only the
        replacing one; the replaced one is neither decided nor charged."""
        got = self.repeat(3, "replaces-domain", ("user", "u1"))
        self.assertEqual([r[0] for r in got], [1, 1, 0])
        got = self.repeat(6, "replaces-domain", ("user", "u2"), ("endpoint", "/reports"))
        self.assertEqual([r[0] for r in got], [1] * 5 + [0])
        self.assertEqual(got[0][6], [b"OK", b"user_reads", 0, 0, 0, 0])  # Lyft: OK, no limit
        self.assertEqual(got[0][7], [b"OK", b"reports_read", 5, 4, 0, MINUTE])
        self.assertEqual(got[5][7][:4], [b"OVER_LIMIT", b"reports_read", 5, 0])
        # user_reads was never charged for u2
        self.assertEqual(self.check("replaces-domain", ("user", "u2"))[6],
                         [b"OK", b"user_reads", 2, 1, 0, MINUTE])

    def test_share_threshold(self):
        """Lyft's share_threshold cases: every value a wildcard matches
        spends ONE counter."""
        got = self.checks([rl_check("share-domain", [("files", "files/%s" % n)], BASE)
                           for n in "abcd"])
        self.assertEqual([r[6][:4] for r in got],
                         [[b"OK", b"share-domain.files_files/*", 3, 2],
                          [b"OK", b"share-domain.files_files/*", 3, 1],
                          [b"OK", b"share-domain.files_files/*", 3, 0],
                          [b"OVER_LIMIT", b"share-domain.files_files/*", 3, 0]])
        # the exact value first; the others share test*
        self.assertEqual([r[0] for r in self.repeat(2, "share-domain", ("file", "test1"))], [1, 0])
        got = self.checks([rl_check("share-domain", [("file", v)], BASE)
                           for v in ("test2", "test3", "test4")])
        self.assertEqual([(r[0], r[6][1]) for r in got],
                         [(1, b"share-domain.file_test*")] * 2 + [(0, b"share-domain.file_test*")])
        got = self.checks([rl_check("share-domain", [("midpath", v)], BASE)
                           for v in ("/api/a/v1", "/apiv1", "/api/b/v1")])
        self.assertEqual([r[0] for r in got], [1, 1, 0])
        got = self.checks([rl_check("share-domain", [("tenant", t, "resource", x)], BASE)
                           for t, x in (("t1prod", "res1v2"), ("t2prod", "res-b-v2"),
                                        ("t3prod", "resv2"))])
        self.assertEqual([r[0] for r in got], [1, 1, 0])
        # shared above, each method apart below (1 a minute each)
        got = self.checks([rl_check("share-domain", [("route", "api/%s" % p, "method", m)], BASE)
                           for p, m in (("users", "GET"), ("orders", "POST"), ("items", "GET"))])
        self.assertEqual([r[0] for r in got], [1, 1, 0])
        self.assertIn(b"share_threshold", self.rules_entry("share-domain.files_files/*")[2])

    def test_quota_mode(self):
        """quota_mode: over its limit a quota descriptor does not deny, until
        every quota descriptor of the request is over (then the one with
        room soonest is the answer)."""
        both = [("backend", "primary"), ("backend", "fallback")]
        got = self.checks([rl_check("quota-domain", both, BASE + i) for i in range(6)])
        self.assertEqual([r[0] for r in got], [1, 1, 1, 0, 0, 0])
        self.assertEqual(got[1][6], [b"OK", b"quota-domain.backend_primary", 2, 0, 0, MINUTE - 1])
        self.assertEqual(got[2][6][0], b"OVER_QUOTA")       # primary over: fallback carries it
        self.assertEqual(got[2][7], [b"OK", b"quota-domain.backend_fallback", 3, 0, 0, HOUR - 2])
        self.assertEqual(got[3][6][0], b"OVER_LIMIT")       # both over: denied
        self.assertEqual(got[3][7][0], b"OVER_LIMIT")
        self.assertEqual(got[3][:6], [0, 2, 0, MINUTE - 3, MINUTE - 3, 0])  # primary, sooner
        # the next minute primary has room again
        r = self.check("quota-domain", *both, at=BASE + MINUTE)
        self.assertEqual(r[0], 1)
        self.assertEqual(r[6][:2], [b"OK", b"quota-domain.backend_primary"])
        self.assertEqual(r[7][0], b"OVER_QUOTA")
        self.assertEqual(self.rules_entry("quota-domain.backend_primary")[3], b"quota")

    def test_metadata(self):
        """Lyft's metadata.yaml: accepted, the limits work, and RL.RULES
        says it changes nothing here."""
        r = self.check("metadata-domain", ("key1", "value1", "subkey1", "x"))
        self.assertEqual(r[6], [b"OK", b"metadata-domain.key1_value1.subkey1", 5, 4, 0, SECOND])
        self.assertEqual(self.check("metadata-domain", ("key2", "y"))[6][2:4], [20, 19])
        self.assertEqual(self.rules_entry("metadata-domain.key2")[2],
                         b"20/minute fixed-window metadata: not applicable")

    def test_every_unit(self):
        """Lyft's units, fixed lengths aligned to the epoch (UnitToDivider):
        a month is 30 days, a year 365."""
        windows = {"second": SECOND, "minute": MINUTE, "hour": HOUR, "day": DAY,
                   "week": 7 * DAY, "month": 30 * DAY, "year": 365 * DAY, "upper": SECOND}
        t = BASE + 500
        for key, w in windows.items():
            reset = w - t % w
            a, b = self.repeat(2, "units-domain", (key, "v"), at=t)
            self.assertEqual(a, [1, 1, 0, 0, reset, 0,
                                 [b"OK", b"units-domain." + key.encode(), 1, 0, 0, reset]], key)
            self.assertEqual(b[:6], [0, 1, 0, reset, reset, 0], key)


class TestLyftIntegration(LyftCase):
    """Lyft's integration test (TestBasicConfig), sluice's default counting:
    a denied request is charged to none."""

    RULES = INTEGRATION

    def test_unknown_domain_and_first_limits(self):
        # Lyft: OverallCode OK, one status OK with no limit, 0 remaining
        self.assertEqual(self.check("foo", ("hello", "world")), [1, 0, 0, 0, 0, 0, NO_RULE])
        # Lyft: OK, 50 per SECOND, 49 remaining
        r = self.check("basic", ("key1", "foo"))
        self.assertEqual(r, [1, 50, 49, 0, SECOND, 0, [b"OK", b"basic.key1", 50, 49, 0, SECOND]])

    def test_over_limit_on_one_key(self):
        """25 requests on a 20-a-minute key: 19..0 remaining, then 5 over."""
        got = self.repeat(25, "another", ("key2", "seq-one"), at=BASE + 5)
        for i, r in enumerate(got):
            if i < 20:
                self.assertEqual(r, [1, 20, 19 - i, 0, MINUTE - 5, 0,
                                     [b"OK", b"another.key2", 20, 19 - i, 0, MINUTE - 5]], i)
            else:
                self.assertEqual(r[0], 0, i)
                self.assertEqual(r[6], [b"OVER_LIMIT", b"another.key2", 20, 0, MINUTE - 5,
                                        MINUTE - 5], i)
        # Lyft's stats: total_hits 25, over_limit 5
        self.assertEqual(self.rules_counts("another.key2")[:2], [25, 5])

    def test_over_limit_on_two_keys(self):
        """key2 (20 a minute) and key3 (10 an hour) in one request, 15 times.
        key3: Lyft's numbers.  key2: Lyft charges it even when key3 denies
        (remaining 9, 8, ... 5 on requests 11 to 15); sluice charges a
        denied request to none, so key2 stays at 10 used and answers 9 as if
        alone (migrating doc: "RESP and HTTP")."""
        got = self.repeat(15, "another", ("key2", "seq-two"), ("key3", "seq-two"), at=BASE + 7)
        for i, r in enumerate(got):
            key3 = [b"OK", b"another.key3", 10, 9 - i, 0, HOUR - 7] if i < 10 else \
                [b"OVER_LIMIT", b"another.key3", 10, 0, HOUR - 7, HOUR - 7]
            self.assertEqual(r[7], key3, i)
            self.assertEqual(r[0], int(i < 10), i)
            key2_remaining = 19 - i if i < 10 else 9        # Lyft: 19 - i throughout
            self.assertEqual(r[6], [b"OK", b"another.key2", 20, key2_remaining, 0, MINUTE - 7], i)
        self.assertEqual(self.rules_counts("another.key3")[:2], [15, 5])

    def test_share_threshold(self):
        """Lyft's share_threshold integration test: ten files share one
        counter of 10 an hour; without share_threshold each file has its
        own."""
        got = self.checks([rl_check("share-threshold-test", [("files", "files/f%d" % i)], BASE)
                           for i in range(11)])
        self.assertEqual([r[6][3] for r in got[:10]], list(range(9, -1, -1)))
        self.assertEqual(got[10][6], [b"OVER_LIMIT", b"share-threshold-test.files_files/*", 10, 0,
                                      HOUR, HOUR])
        got = self.checks([rl_check("share-threshold-test",
                                    [("files_no_share", "files_no_share/f%d" % i)], BASE)
                           for i in range(11)])
        self.assertEqual([r[0] for r in got], [1] * 11)
        self.assertEqual({r[6][3] for r in got}, {9})

    def test_hits_addend(self):
        """hits_addend is COST.  Lyft adds it whatever the answer and
        compares after: 15 then 10 then 5 on 20 a day answer OK 5, OVER 0,
        OVER 0.  sluice never charges a denied request: the 10 is denied
        with 5 still there (SPEC §3's remaining: what would pass now), and
        the 5 passes (migrating doc).  COST 0 counts nothing here; Lyft
        counts a hits_addend of 0 as 1."""
        got = self.checks([rl_check("another", [("key4", "hits")], BASE + 1, c)
                           for c in (15, 10, 5, 0, 1)])
        self.assertEqual([r[6][:4] for r in got],
                         [[b"OK", b"another.key4", 20, 5],
                          [b"OVER_LIMIT", b"another.key4", 20, 5],
                          [b"OK", b"another.key4", 20, 0],
                          [b"OK", b"another.key4", 20, 0],
                          [b"OVER_LIMIT", b"another.key4", 20, 0]])


class TestLyftCounting(TestLyftIntegration):
    """The same integration test with `--count-denied`: Lyft's numbers
    exactly, where the default differs."""

    EXTRA = ("--count-denied",)

    def test_the_log_says_so(self):
        self.assertIn(" count_denied=yes", self.srv.log())

    def test_over_limit_on_two_keys(self):
        got = self.repeat(15, "another", ("key2", "seq-two"), ("key3", "seq-two"), at=BASE + 7)
        for i, r in enumerate(got):
            # Lyft: key2 OK with 20 - (i + 1) throughout; key3 over from the 11th
            self.assertEqual(r[6], [b"OK", b"another.key2", 20, 19 - i, 0, MINUTE - 7], i)
            self.assertEqual(r[7][:4], [b"OK" if i < 10 else b"OVER_LIMIT", b"another.key3", 10,
                                        max(0, 9 - i)], i)
            self.assertEqual(r[0], int(i < 10), i)
        self.assertEqual(self.rules_counts("another.key3")[:2], [15, 5])

    def test_hits_addend(self):
        # Lyft: 15 -> OK 5; 10 -> 25, OVER 0; 5 -> 30, OVER 0
        got = self.checks([rl_check("another", [("key4", "hits")], BASE + 1, c)
                           for c in (15, 10, 5)])
        self.assertEqual([r[6][:4] for r in got],
                         [[b"OK", b"another.key4", 20, 5],
                          [b"OVER_LIMIT", b"another.key4", 20, 0],
                          [b"OVER_LIMIT", b"another.key4", 20, 0]])
        self.assertEqual(got[1][6][4], DAY - 1)    # retry: the day's end
        # a cost above the limit can never pass
        self.assertEqual(self.check("another", ("key4", "big"), cost=21)[6][4], -1)


class TestLyftStatistics(LyftCase):
    """Lyft names its statistics by descriptor path, and with
    `value_to_metric` / `detailed_metric` by the request's values too.
    INFO rulestats counts each request under its rule's name AND under
    Lyft's per-value name (docs/rules.md, "Statistics names"), at most
    1,000 names per rule (then the rule's `overflow`).  A quota limit that
    was over without denying is `over_quota`, not `denied`."""

    PLAIN = "matched=%d,allowed=%d,denied=%d,shadow=0,elastic=0,over_quota=%d"

    def rulestats(self):
        """INFO rulestats: {name: the text after the colon}, and the info."""
        info = self.srv.info("rulestats")
        return {k[5:]: v for k, v in info.items() if k.startswith("rule_")}, info

    def test_value_to_metric_names(self):
        """Lyft's README example: route and method values in the name, the
        limited key without its value."""
        self.checks([rl_check("metric-domain", [d], BASE) for d in (
            ("route", "api", "http_method", "GET", "subject_id", "123"),
            ("route", "api", "http_method", "GET", "subject_id", "124"),
            ("route", "web", "http_method", "POST", "subject_id", "456"))])
        stats, _ = self.rulestats()
        p = "metric-domain.route"
        self.assertEqual(stats[p + ".http_method.subject_id"],
                         self.PLAIN % (3, 3, 0, 0) + ",values=2,overflow=0")
        self.assertEqual(stats[p + "_api.http_method_GET.subject_id"], self.PLAIN % (2, 2, 0, 0))
        self.assertEqual(stats[p + "_web.http_method_POST.subject_id"], self.PLAIN % (1, 1, 0, 0))
        self.assertEqual(len([n for n in stats if n.startswith(p)]), 3)

    def test_wildcard_value_in_name(self):
        """value_to_metric on a wildcard: the request's value, not the
        pattern; denials counted under both names."""
        got = self.checks([rl_check("metric-domain", [("path", v)], BASE + 1)
                           for v in ("/api/users", "/api/users", "/api/users", "/api/orders")])
        self.assertEqual([r[0] for r in got], [1, 1, 0, 1])
        stats, _ = self.rulestats()
        self.assertEqual(stats["metric-domain.path_/api/*"],
                         self.PLAIN % (4, 3, 1, 0) + ",values=2,overflow=0")
        self.assertEqual(stats["metric-domain.path_/api/users"], self.PLAIN % (3, 2, 1, 0))
        self.assertEqual(stats["metric-domain.path_/api/orders"], self.PLAIN % (1, 1, 0, 0))
        self.assertEqual(self.rules_entry("metric-domain.path_/api/*")[2],
                         b"2/minute fixed-window value_to_metric")

    def test_detailed_metric_and_request_bytes(self):
        """Lyft's basic_config key7; a value that tries to write a line of
        its own into INFO is written %XX (bytes outside '!'..'~', '%', ':'
        and ',')."""
        forged = "x\r\nrule_forged:matched=99, y%"
        self.checks([rl_check("test-domain", [("key7", v)], BASE + 2)
                     for v in ("unspecified_value", "unspecified_value", "another_value", forged)])
        stats, info = self.rulestats()
        self.assertEqual(stats["test-domain.key7"], self.PLAIN % (4, 4, 0, 0) + ",values=3,overflow=0")
        self.assertEqual(stats["test-domain.key7_unspecified_value"], self.PLAIN % (2, 2, 0, 0))
        self.assertEqual(stats["test-domain.key7_another_value"], self.PLAIN % (1, 1, 0, 0))
        self.assertEqual(stats["test-domain.key7_x%0D%0Arule_forged%3Amatched=99%2C%20y%25"],
                         self.PLAIN % (1, 1, 0, 0))
        self.assertNotIn("forged", stats)
        self.assertNotIn("rule_forged", info)
        # a rule without either field: its line as before, nothing per value
        self.check("test-domain", ("key2", "plain"), at=BASE + 2)
        stats, _ = self.rulestats()
        self.assertEqual(stats["test-domain.key2"], self.PLAIN % (1, 1, 0, 0))
        self.assertNotIn("test-domain.key2_plain", stats)

    def test_names_per_rule_are_capped(self):
        """1,000 names per rule; past them a request counts under the
        rule's name and its overflow, and the names it has go on."""
        _, info = self.rulestats()
        tracked = int(info["rules_tracked"])
        got = self.checks([rl_check("metric-domain", [("client", "c%d" % i)], BASE + 3)
                           for i in range(1005)])
        self.assertEqual(sum(r[0] for r in got), 1005)
        self.checks([rl_check("metric-domain", [("client", c)], BASE + 3)
                     for c in ("c0", "c999", "c1000", "new")])
        stats, info = self.rulestats()
        self.assertEqual(stats["metric-domain.client"],
                         self.PLAIN % (1009, 1009, 0, 0) + ",values=1000,overflow=7")
        names = [n for n in stats if n.startswith("metric-domain.client_")]
        self.assertEqual(len(names), 1000)
        self.assertEqual(stats["metric-domain.client_c0"], self.PLAIN % (2, 2, 0, 0))
        self.assertEqual(stats["metric-domain.client_c999"], self.PLAIN % (2, 2, 0, 0))
        self.assertNotIn("metric-domain.client_c1000", stats)
        self.assertEqual(int(info["rules_tracked"]), tracked + 1000)

    def test_over_quota_counted_apart(self):
        """Lyft's quota_mode sequence (TestLyftConfig.test_quota_mode):
        over without denying is over_quota; over with every quota
        descriptor over (the request denied for it) is denied."""
        both = [("backend", "primary"), ("backend", "fallback")]
        got = self.checks([rl_check("quota-domain", both, BASE + i) for i in range(6)] +
                          [rl_check("quota-domain", both, BASE + MINUTE)])
        self.assertEqual([(r[0], r[6][0], r[7][0]) for r in got],
                         [(1, b"OK", b"OK")] * 2 + [(1, b"OVER_QUOTA", b"OK")] +
                         [(0, b"OVER_LIMIT", b"OVER_LIMIT")] * 3 + [(1, b"OK", b"OVER_QUOTA")])
        stats, _ = self.rulestats()
        self.assertEqual(stats["quota-domain.backend_primary"], self.PLAIN % (7, 3, 3, 1))
        self.assertEqual(stats["quota-domain.backend_fallback"], self.PLAIN % (7, 3, 3, 1))


def start_refused(args):
    """sluiced with args must refuse to start: (exit status, output)."""
    import subprocess
    port = free_port()
    p = harness.run_checked([harness.SLUICED, "--port", str(port)] + list(args),
                            capture_output=True, timeout=30 * harness.SLOW,
                            stdin=subprocess.DEVNULL, cwd="/")
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert nothing_listening(port), msg
    for m in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert m not in msg, msg
    return p.returncode, msg


class TestLyftMergeDomains(unittest.TestCase):
    """TestDomainMerge and TestDuplicateKeyDomainMerge: `--merge-domains`
    is MERGE_DOMAIN_CONFIG; without it, Lyft's duplicate-domain error."""

    def server(self, *args):
        s = Server(*args, trust_client_time=True, name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_merged(self):
        s = self.server("--rules", MERGE, "--merge-domains", "--watch-rules=no")
        with s.raw() as c:
            r1 = c.cmd(*rl_check("test-domain", [("key1", "value1")], BASE))
            r2 = c.cmd(*rl_check("test-domain", [("key2", "value2")], BASE))
            # the first file's wildcard comes first, as Lyft appends them
            r3 = c.cmd(*rl_check("test-domain", [("path", "/a/bc")], BASE))
            rules = c.cmd("RL.RULES")
        self.assertEqual(r1[6], [b"OK", b"test-domain.key1_value1", 10, 9, 0, MINUTE])
        self.assertEqual(r2[6], [b"OK", b"test-domain.key2_value2", 20, 19, 0, MINUTE])
        self.assertEqual(r3[6][:3], [b"OK", b"test-domain.path_/a/*", 11])
        self.assertEqual([d[0] for d in rules[15]], [b"test-domain"])
        self.assertEqual(rules[15][0][1], os.path.join(MERGE, "key1.yaml").encode())
        self.assertEqual(len(rules[15][0][2]), 4)
        self.assertIn("domains=1 descriptors=4", s.log())
        self.assertIn(" merge_domains=yes", s.log())   # the log says how it loaded
        s.stop()
        assert_clean_stop(s)

    def test_not_merged_by_default(self):
        rc, msg = start_refused(["--rules", MERGE])
        self.assertEqual(rc, 1, msg)
        self.assertIn("%s:2:9: domain 'test-domain' is already defined in %s:2:9 (--merge-domains "
                      "merges them, as Lyft's MERGE_DOMAIN_CONFIG does)"
                      % (os.path.join(MERGE, "key2.yaml"), os.path.join(MERGE, "key1.yaml")), msg)

    def test_the_same_descriptor_twice(self):
        d = tempfile.mkdtemp(prefix="sluice-merge-")
        self.addCleanup(shutil.rmtree, d, True)
        for name in ("a.yaml", "b.yaml"):
            shutil.copy(os.path.join(MERGE, "key1.yaml"), os.path.join(d, name))
        rc, msg = start_refused(["--rules", d, "--merge-domains"])
        self.assertEqual(rc, 1, msg)
        self.assertIn("%s/b.yaml:4:5: duplicate descriptor: key 'key1' value 'value1', already in "
                      "domain 'test-domain' of %s/a.yaml (line 4)" % (d, d), msg)


# Lyft's refused files (bad/), with where and what sluice says; Lyft's own
# message is the comment at the top of each file.
BAD_FILES = [
    ("bad_limit_unit.yaml", "6:13", "unknown unit 'foo' (expected second, minute, hour, day, "
                                    "week, month or year)"),
    ("bad_yaml.yaml", "4:1", "YAML syntax error: did not find expected node content (while "
                             "parsing a flow node from line 4)"),
    ("duplicate_key.yaml", "7:5", "duplicate descriptor: key 'key1' value 'value1' again "
                                  "(first at line 4)"),
    ("empty_domain.yaml", "2:9", "domain is empty"),
    ("empty_key.yaml", "4:10", "descriptor has an empty key"),
    ("metadata_not_a_map.yaml", "5:15", "metadata must be a map (name: value ...), not a list"),
    ("misspelled_key.yaml", "5:5", "unknown field 'ratelimit' in a descriptor (expected key, "
                                   "value, rate_limit, descriptors, shadow_mode, quota_mode, "
                                   "detailed_metric, value_to_metric, share_threshold, metadata "
                                   "or ip_prefix)"),
    ("misspelled_key2.yaml", "7:7", "unknown field 'requestsperunit' in a rate_limit (expected "
                                    "unit, requests_per_unit, unlimited, name, replaces, "
                                    "algorithm, window, burst, precision, soft, elastic, "
                                    "concurrency or concurrency_ttl)"),
    ("non_map_list.yaml", "4:5", "each descriptor must be a map (key: ..., value: ...), not 'a'"),
    ("non_string_key.yaml", "2:1", "unknown field '0.25' in a rules file (expected domain or "
                                   "descriptors)"),
    ("replaces_empty.yaml", "8:11", "a replaces entry needs a name"),
    ("replaces_self.yaml", "8:17", "a limit cannot replace itself ('mine')"),
    ("share_threshold_no_wildcard.yaml", "6:22", "share_threshold needs a wildcard value (one "
                                                 "with '*'), not 'files'"),
    ("unlimited_with_unit.yaml", "7:13", "unit must not be given with unlimited: true"),
]


class TestLyftBadFiles(unittest.TestCase):
    """Every file Lyft refuses is refused: at a reload (the old rules keep
    serving) and at the start, FILE:LINE:COLUMN and what is wrong."""

    def test_each_refused_at_reload(self):
        self.assertEqual(sorted(f for f, _, _ in BAD_FILES), sorted(os.listdir(BAD)))
        d = tempfile.mkdtemp(prefix="sluice-bad-")
        self.addCleanup(shutil.rmtree, d, True)
        shutil.copy(os.path.join(INTEGRATION, "basic.yaml"), os.path.join(d, "basic.yaml"))
        s = Server("--rules", d, "--watch-rules=no", name="lyft-bad-files")
        s.start()
        self.addCleanup(s.kill)
        for name, where, what in BAD_FILES:
            path = os.path.join(d, name)
            shutil.copy(os.path.join(BAD, name), path)
            with s.raw() as c:
                self.assertEqual(c.cmd("RL.RULES", "RELOAD"),
                                 RespError("ERR rules not reloaded, version 1 keeps serving: "
                                           "%s:%s: %s" % (path, where, what)), name)
                r = c.cmd("RL.CHECK", "basic", "DESCRIPTOR", "key1", name)
                self.assertEqual(r[6][:3], [b"OK", b"basic.key1", 50], name)  # still serving
            os.remove(path)
        s.stop()
        assert_clean_stop(s)

    def test_refused_at_start(self):
        name, where, what = BAD_FILES[0]
        rc, msg = start_refused(["--rules", os.path.join(BAD, name)])
        self.assertEqual(rc, 1, msg)
        self.assertIn("%s:%s: %s" % (os.path.join(BAD, name), where, what), msg)


if __name__ == "__main__":
    unittest.main()
