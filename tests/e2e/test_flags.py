"""Every yes/no option of sluiced, read from its option table (`sluiced
--dump-options`), given each documented way to a running server, and the
setting seen where a user sees it: INFO (`trust_client_time`,
`protected_mode`, `rules_watch`) or the `rules loaded` log line
(`merge_domains=yes`, `count_denied=yes`).  tests/test_options.sh checks
every spelling of every yes/no option against the parsed values; this
checks that the server runs with what it parsed, and that the two agree."""

# sluice-e2e: no-tsan
# Each spelling is parsed before any thread starts and then read back through
# INFO or the log: start and stop are in every TSan module. ASan+UBSan run it.

import os
import re
import shutil
import tempfile
import time

import harness
from harness import SLUICED, ServerTestCase, deadline

RULES = """\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
"""


def log_says(pattern):
    """How to read an option from the `rules loaded` log line: yes when
    pattern is on it."""
    def read(srv):
        until = deadline(20)
        while time.monotonic() < until:
            line = re.search(r'msg="rules loaded"[^\n]*', srv.log())
            if line:
                return "yes" if pattern in line.group(0) else "no"
            time.sleep(0.02)
        raise AssertionError("no 'rules loaded' line:\n" + srv.log())
    return read


def info_says(field, yes="yes", no="no"):
    """How to read an option from INFO: field is `yes` or `no`."""
    def read(srv):
        v = srv.info()[field]
        if v not in (yes, no):
            raise AssertionError("INFO %s is %r, neither %r nor %r" % (field, v, yes, no))
        return "yes" if v == yes else "no"
    return read


def grpc_says(build, judge):
    """How to read a gRPC front's option (--rls-semantics envoy, the
    default): the ShouldRateLimit answer to build(rls_pb2) on the rule
    d/k (1 a second), judged yes or no by judge(response)."""
    def read(srv):
        import grpc
        import test_grpc as G  # its stubs, generated from proto/
        with grpc.insecure_channel("%s:%d" % (harness.HOST, srv.grpc_port)) as ch:
            r = G.rls_pb2_grpc.RateLimitServiceStub(ch).ShouldRateLimit(build(G), timeout=30)
        return "yes" if judge(G, r) else "no"
    return read


def over_twice(G):
    """k=a at hits 2 (over its 1) beside k=b at its own hits 1, and a
    descriptor no rule matches."""
    req = G.request("d", [("k", "a")], [("k", "b")], [("none", "x")])
    req.descriptors[0].hits_addend.value = 2
    req.descriptors[1].hits_addend.value = 1
    return req


# Where each yes/no option shows on a running server.  A yes/no option the
# table has and this does not fails test_every_yes_no_option_is_seen.
SEEN = {
    "trust-client-time": info_says("trust_client_time"),
    "protected-mode": info_says("protected_mode"),
    "watch-rules": info_says("rules_watch", yes="inotify", no="off"),
    "merge-domains": log_says(" merge_domains=yes"),
    "count-denied": log_says(" count_denied=yes"),
    "deny-cache": info_says("backend_deny_cache"),
    "lease": info_says("backend_lease", yes="on", no="off"),
    # an over descriptor: the overall answer OK (global shadow mode) ...
    "shadow-mode": grpc_says(lambda G: G.request("d", [("k", "s")], cost=2),
                             lambda G, r: r.overall_code == G.OK),
    # ... OK when another descriptor, without a limit, counts as a passing
    # quota one (global quota mode: every non-unlimited descriptor is)
    "quota-mode": grpc_says(lambda G: G.request("d", [("k", "q")], [("none", "x")], cost=2),
                            lambda G, r: r.overall_code == G.OK),
    "limit-response-headers-enabled": grpc_says(
        lambda G: G.request("d", [("k", "h")]), lambda G, r: len(r.response_headers_to_add) == 3),
    "response-dynamic-metadata": grpc_says(lambda G: G.request("d", [("k", "m")]),
                                           lambda G, r: r.HasField("dynamic_metadata")),
    # k=b not charged (its 1 left) when k=a would go over
    "stop-cache-key-increment-when-overlimit": grpc_says(
        over_twice, lambda G, r: r.statuses[1].limit_remaining == 1),
}

# yes/no options seen over gRPC: their servers get a gRPC port
GRPC_SEEN = {"shadow-mode", "quota-mode", "limit-response-headers-enabled",
             "response-dynamic-metadata", "stop-cache-key-increment-when-overlimit"}

# What a yes/no option needs beside itself to mean anything: the deny
# cache is the Redis backend's (a redis-server of the test's own).
NEEDS = {
    "deny-cache": lambda test: ["--backend", test.redis_url()],
    "lease": lambda test: ["--backend", test.redis_url()],
}


def table():
    """The option table: name -> (value name, default) for every option."""
    out = harness.run_checked([SLUICED, "--dump-options"], capture_output=True, text=True,
                              check=True).stdout
    rows = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        name, _short, arg, _file, default, _value, _help = line.split("\t")
        rows[name] = (arg, default)
    return rows


def dumped(args, name):
    """The value `sluiced ARGS --dump-options` gives option name."""
    out = harness.run_checked([SLUICED] + list(args) + ["--dump-options"], capture_output=True,
                              text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == name:
            return f[5]
    raise AssertionError("no %s in --dump-options" % name)


class TestYesNoFlags(ServerTestCase):
    """One server per spelling, each started and stopped cleanly."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-flags-")
        cls.rules = os.path.join(cls.dir, "rules.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.bools = {n: d for n, (arg, d) in table().items() if arg == "yes|no"}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def conf(self, text):
        """A config file of its own holding text."""
        fd, path = tempfile.mkstemp(suffix=".conf", dir=self.dir)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    def test_every_yes_no_option_is_seen(self):
        self.assertGreaterEqual(len(self.bools), 5, self.bools)
        self.assertEqual(sorted(self.bools), sorted(SEEN),
                         "a yes/no option the table has and SEEN does not (or the reverse)")

    def redis_url(self):
        if getattr(self, "_redis", None) is None:
            self._redis = harness.RedisServer().start()
            self.addCleanup(self._redis.cleanup)
        return self._redis.url()

    def test_each_spelling_on_a_running_server(self):
        for name in sorted(self.bools):
            default = self.bools[name]
            other = "no" if default == "yes" else "yes"
            spellings = [
                (["--" + name], "yes"),
                (["--" + name, "no"], "no"),
                (["--" + name, "yes"], "yes"),
                (["--" + name + "=no"], "no"),
                (["--" + name + "=yes"], "yes"),
                (["--" + name, "Off"], "no"),
                (["--config", self.conf("%s\n" % name)], "yes"),
                (["--config", self.conf("%s no\n" % name)], "no"),
                (["--config", self.conf("%s %s\n" % (name, other)), "--" + name, default],
                 default),
                ([], default),
            ]
            for i, (args, want) in enumerate(spellings):
                with self.subTest(option=name, args=args):
                    full = ["--rules", self.rules] + NEEDS.get(name, lambda t: [])(self) + args
                    self.assertEqual(dumped(full, name), want, "--dump-options")
                    # every spelling is parsed by --dump-options above; under a
                    # sanitizer (each start several seconds) a running server
                    # shows the first three (yes, no, yes), one from a file, and
                    # the default
                    if harness.SANITIZED and i not in (0, 1, 2, 7, 9):
                        continue
                    s = self.new_server(*full, name="%s_%s" % (name, len(args)),
                                        grpc=name in GRPC_SEEN)
                    self.assertEqual(SEEN[name](s), want, "sluiced %s" % " ".join(full))
                    s.cleanup()

    def test_environment_variables(self):
        """The peer's settings from its environment variables: Go's
        strconv.ParseBool spellings; a flag wins over the variable; a bad
        value is a start error naming the variable."""
        spellings = [("1", "yes"), ("t", "yes"), ("T", "yes"), ("TRUE", "yes"), ("true", "yes"),
                     ("True", "yes"), ("0", "no"), ("f", "no"), ("F", "no"), ("FALSE", "no"),
                     ("false", "no"), ("False", "no")]
        env = dict(os.environ)
        for word, want in spellings:
            with self.subTest(word=word):
                out = harness.run_checked([SLUICED, "--dump-options"], capture_output=True,
                                          text=True, check=True,
                                          env=dict(env, SHADOW_MODE=word)).stdout
                self.assertIn("\nshadow-mode\t\tyes|no\tyes\tno\t%s\t" % want, out)
        out = harness.run_checked([SLUICED, "--shadow-mode", "no", "--limit-reset-header", "X-R",
                                   "--dump-options"], capture_output=True, text=True,
                                  check=True, env=dict(env, SHADOW_MODE="true",
                                                       LIMIT_RESET_HEADER="X-Env",
                                                       LIMIT_LIMIT_HEADER="X-L")).stdout
        rows = {l.split("\t")[0]: l.split("\t")[5] for l in out.splitlines()
                if not l.startswith("#")}
        self.assertEqual((rows["shadow-mode"], rows["limit-reset-header"],
                          rows["limit-limit-header"]), ("no", "X-R", "X-L"))
        for var, value, msg in [
                ("QUOTA_MODE", "yes", "sluiced: invalid environment variable QUOTA_MODE='yes': "
                 "expected true or false (1, t, T, TRUE, true, True, 0, f, F, FALSE, false or "
                 "False)"),
                ("LIMIT_LIMIT_HEADER", "a b", "sluiced: invalid environment variable "
                 "LIMIT_LIMIT_HEADER (--limit-limit-header): invalid --limit-limit-header 'a b': "
                 "expected a header name (1..127 letters, digits or !#$%&'*+-.^_`|~)")]:
            with self.subTest(var=var):
                p = harness.run_checked([SLUICED, "--port", "0"], capture_output=True, text=True,
                                        timeout=30, env=dict(env, **{var: value}))
                self.assertEqual((p.returncode, p.stderr.splitlines()[0]), (2, msg))

    def test_a_word_not_yes_or_no_is_refused(self):
        for name in sorted(self.bools):
            with self.subTest(option=name):
                p = harness.run_checked([SLUICED, "--port", "0", "--" + name, "maybe"],
                                        capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stderr.splitlines()[0],
                                 "sluiced: invalid --%s 'maybe': expected yes or no" % name)
