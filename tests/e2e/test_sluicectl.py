"""`sluicectl check` and `sluicectl top` against a real sluiced
(docs/operations.md).

check: for each broken rules file, the one line `sluicectl check` prints is
exactly the message sluiced logs (err=...) when it refuses to start with
`--rules` on that file, and the one RL.RULES RELOAD answers after the good
file it served was replaced by it; for good files (the examples', a merged
folder), check exits 0 and its descriptor count is sluiced's
rules_descriptors.

top: `--once` (and a pipe, without --once) prints one sample whose totals
are the decisions made -- RL.ALLOW allowed and denied, RL.CHECK allowed and
denied, per rule matched / allowed / denied / shadow, all as INFO has them
--; `--count 2` prints two samples, the second with rates (0.0: nothing was
decided between them); the backend line of a Redis backend, up, then DOWN
once Redis is stopped; a password (--password-file, --user); the errors:
nobody listening, NOAUTH, a wrong password, bad options.  On a terminal
(util-linux `script`'s pty) each sample is drawn over the last.  No
assertion depends on timing: rates are asserted only where nothing was
decided.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
from harness import RedisServer, Server, ServerTestCase, free_port, run_checked

SLUICE = os.path.join(harness.BUILD, "sluicectl")
EXAMPLES = os.path.join(harness.ROOT, "examples")

GOOD = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"""

# name -> broken rules text
BROKEN = {
    "unit": "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: minite, "
            "requests_per_unit: 3}\n",
    "yaml": "domain: x\ndescriptors: [\n",
    "dup": "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
           "requests_per_unit: 1}\n  - key: a\n    rate_limit: {unit: second, "
           "requests_per_unit: 2}\n",
    "nodomain": "descriptors:\n  - key: a\n    rate_limit: {unit: second, "
                "requests_per_unit: 1}\n",
    "negative": "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                "requests_per_unit: -1}\n",
    "tab": "domain: x\ndescriptors:\n\t- key: a\n",
}

ERR_RE = re.compile(r'level=error .*?\berr="((?:[^"\\]|\\.)*)"')


def unquote(s):
    return re.sub(r'\\(.)', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def ctl(*args, **kw):
    """Runs sluicectl (scanned for sanitizer reports); returns (rc, out, err)."""
    p = run_checked([SLUICE] + [str(a) for a in args], text=True, timeout=60 * harness.SLOW,
                    **kw)
    return p.returncode, p.stdout, p.stderr


def refused_start_errors(*args):
    """Starts sluiced with args, which it must refuse; returns the err= of
    every error line it logged."""
    p = run_checked([harness.SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0"]
                    + list(args), text=True, timeout=60 * harness.SLOW)
    assert p.returncode == 1, "sluiced started (status %s):\n%s" % (p.returncode, p.stderr)
    return [unquote(m) for m in ERR_RE.findall(p.stdout + p.stderr)]


class CheckAsSluiced(harness.ScratchDirCase):
    SCRATCH_PREFIX = "sluice-check-"

    def test_a_broken_file_is_the_message_sluiced_logs_at_start(self):
        for name, text in BROKEN.items():
            with self.subTest(name):
                path = self.write(name + ".yaml", text)
                rc, out, err = ctl("check", path)
                self.assertEqual((rc, out), (1, ""), err)
                self.assertEqual(len(err.splitlines()), 1, err)
                line = err.rstrip("\n")
                self.assertTrue(line.startswith(path + ":"), line)
                errs = refused_start_errors("--rules", path)
                self.assertTrue(errs, "sluiced logged no err=")
                self.assertEqual(set(errs), {line})

    def test_examples_that_are_not_rules_files(self):
        for rel in ("envoy/envoy.yaml", "envoy/ratelimit.yaml", "traefik/dynamic.yml"):
            with self.subTest(rel):
                path = os.path.join(EXAMPLES, rel)
                rc, out, err = ctl("check", path)
                self.assertEqual((rc, out), (1, ""), err)
                self.assertEqual(set(refused_start_errors("--rules", path)), {err.rstrip("\n")})

    def test_a_domain_in_two_files_with_and_without_merge_domains(self):
        d = os.path.join(self.dir, "rules")
        os.mkdir(d)
        for i, k in ((1, "x"), (2, "y")):
            with open(os.path.join(d, "%d.yaml" % i), "w") as f:
                f.write("domain: m\ndescriptors:\n  - key: %s\n    rate_limit: {unit: second, "
                        "requests_per_unit: 1}\n" % k)
        rc, out, err = ctl("check", d)
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(set(refused_start_errors("--rules", d)), {err.rstrip("\n")})
        rc, out, err = ctl("check", "--merge-domains", d)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out, "%s/1.yaml: OK, domain m (merged from 2 files), 2 descriptors, "
                              "2 rules\n" % d)
        s = Server("--rules", d, "--merge-domains", name="merged").start()
        self.addCleanup(s.cleanup)
        info = s.info("rules")
        self.assertEqual((info["rules_domains"], info["rules_descriptors"]), ("1", "2"))

    def test_good_files_count_what_sluiced_counts(self):
        for path in (os.path.join(EXAMPLES, "nginx", "edge.yaml"),
                     os.path.join(EXAMPLES, "envoy", "ratelimit-rules.yaml"),
                     self.write("api.yaml", GOOD)):
            with self.subTest(path):
                rc, out, err = ctl("check", path)
                self.assertEqual((rc, err), (0, ""))
                m = re.fullmatch(r"(\S+): OK, domain (\S+), (\d+) descriptors?, (\d+) rules?"
                                 r"(?: \(.*\))?\n", out)
                self.assertIsNotNone(m, out)
                self.assertEqual(m.group(1), path)
                s = Server("--rules", path, name="good").start()
                self.addCleanup(s.cleanup)
                info = s.info("rules")
                self.assertEqual((info["rules_domains"], info["rules_descriptors"]),
                                 ("1", m.group(3)))
                rules = [k for k in s.info("rulestats") if k.startswith("rule_")]
                self.assertEqual(len(rules), int(m.group(4)))
                harness.assert_clean_stop(s)

    def test_the_message_rl_rules_reload_answers(self):
        path = self.write("api.yaml", GOOD)
        s = Server("--rules", path, "--watch-rules", "no", name="reload").start()
        self.addCleanup(s.cleanup)
        for name, text in BROKEN.items():
            with self.subTest(name):
                self.write("api.yaml", text)
                rc, out, err = ctl("check", path)
                self.assertEqual(rc, 1)
                with s.raw() as c:
                    e = c.cmd("RL.RULES", "RELOAD")
                self.assertIsInstance(e, harness.RespError)
                self.assertTrue(e.line.endswith(": " + err.rstrip("\n")), (e.line, err))
                self.assertEqual(s.info("rules")["rules_last_error"], err.rstrip("\n"))
        harness.assert_clean_stop(s)


RULES = """domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"""


def section(out, header):
    """The rows of out's table whose header line starts with header: {first
    word: [the other words]}, up to a blank line."""
    lines = out.splitlines()
    for i, l in enumerate(lines):
        if l.split()[:1] == [header] or (header == "" and l.split()[:1] == ["total"]):
            rows = {}
            for r in lines[i + 1:]:
                if not r.strip():
                    break
                w = r.split()
                rows[w[0]] = w[1:]
            return rows
    raise AssertionError("no table %r in:\n%s" % (header, out))


class Top(ServerTestCase):
    TRUST = True

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-top-")
        cls.rules = os.path.join(d, "edge.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--rules", cls.rules)
        super().setUpClass()
        # the decisions: RL.ALLOW 3 allowed, 2 denied; RL.CHECK 5 allowed
        # (one of them over in shadow mode), 1 denied (ip 1's third); the
        # rules count an hour: ip 1's three checks in one
        harness.wait_window_room(3600, 3)
        with cls.srv.raw() as c:
            for _ in range(5):
                c.cmd("RL.ALLOW", "top:k", "3", "1h")
            for ip in ("1", "1", "1", "2"):
                c.cmd("RL.CHECK", "edge", "DESCRIPTOR", "ip", ip)
            for _ in range(2):
                c.cmd("RL.CHECK", "edge", "DESCRIPTOR", "path", "/beta")

    def test_once_totals_are_the_decisions_made(self):
        rc, out, err = ctl("top", "--once", "--port", self.srv.port)
        self.assertEqual((rc, err), (0, ""))
        first = out.splitlines()[0]
        self.assertRegex(first, r"^sluiced \d+\.\d+\.\d+ at 127\.0\.0\.1:%d, up \d+s, \d+ threads, "
                                r"backend local$" % self.srv.port)
        self.assertRegex(out.splitlines()[1], r"^clients \d+ of 10000 \(0 http\), refused 0; keys \d+; "
                                              r"rules version 1 \(1 domain, 2 descriptors\)$")
        rows = section(out, "")
        self.assertEqual(rows["allow"], ["5", "3", "2", "-", "-"])
        self.assertEqual(rows["check"], ["6", "5", "1", "-", "-"])
        self.assertEqual(rows["all"], ["11", "8", "3", "-", "-"])
        rules = section(out, "rule")
        self.assertEqual(rules, {"edge.ip": ["4", "3", "1", "0", "-", "-"],
                                 "edge.path_/beta": ["2", "1", "0", "1", "-", "-"]})
        self.assertEqual(list(rules), ["edge.ip", "edge.path_/beta"])  # most denied first
        # the same numbers INFO has
        info = self.srv.info("rulestats")
        self.assertEqual(info["rule_edge.ip"],
                         "matched=4,allowed=3,denied=1,shadow=0,elastic=0,over_quota=0")

    def test_a_pipe_without_once_prints_one_sample(self):
        rc, out, err = ctl("top", "--port", self.srv.port)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.count("\nsluiced ") + out.startswith("sluiced "), 1)
        self.assertEqual(section(out, "")["allow"], ["5", "3", "2", "-", "-"])

    def test_count_two_samples_with_rates(self):
        rc, out, err = ctl("top", "--count", "2", "--interval", "100ms", "--port", self.srv.port)
        self.assertEqual((rc, err), (0, ""))
        samples = out.split("\n\nsluiced ")
        self.assertEqual(len(samples), 2, out)
        second = "sluiced " + samples[1]
        self.assertEqual(section(samples[0], "")["check"], ["6", "5", "1", "-", "-"])
        # nothing decided between the samples: every rate is 0.0
        self.assertEqual(section(second, "")["check"], ["6", "5", "1", "0.0", "0.0"])
        self.assertEqual(section(second, "")["allow"], ["5", "3", "2", "0.0", "0.0"])
        self.assertEqual(section(second, "rule")["edge.ip"], ["4", "3", "1", "0", "0.0", "0.0"])

    def test_a_terminal_redraws_in_place(self):
        if shutil.which("script") is None:
            self.fail("util-linux `script` is needed (a pty)")
        cmd = "%s top --count 2 --interval 100ms --port %d" % (SLUICE, self.srv.port)
        p = run_checked(["script", "-qec", cmd, "/dev/null"], timeout=60 * harness.SLOW)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertEqual(p.stdout.count(b"\x1b[H\x1b[2J"), 2, p.stdout)
        self.assertEqual(p.stdout.count(b"sluiced "), 2)

    def test_usage_errors(self):
        for args, msg in (
                (["--once", "--count", "2"], "--once and --count cannot be used together"),
                (["--interval", "0"], "invalid --interval '0': expected seconds (2) or a duration "
                                      "(500ms, 2s, 1m) from 100ms to 1h"),
                (["--interval", "2h"], "invalid --interval '2h'"),
                (["--port", "x"], "invalid --port 'x': expected a number from 1 to 65535"),
                (["--count", "0"], "invalid --count '0': expected a number from 1 to 1000000"),
                (["--user", "bob"], "--user needs --password-file (the user's password)"),
                (["extra"], "unexpected argument 'extra' (see sluicectl top --help)"),
                (["--frobnicate"], "unknown option '--frobnicate' (see sluicectl top --help)")):
            with self.subTest(args):
                rc, out, err = ctl("top", *args)
                self.assertEqual((rc, out), (2, ""))
                self.assertTrue(err.startswith("sluicectl: " + msg), err)
        rc, out, err = ctl("top", "--help")
        self.assertEqual((rc, err), (0, ""))
        self.assertTrue(out.startswith("usage: sluicectl top "))

    def test_nobody_listening(self):
        port = free_port()
        rc, out, err = ctl("top", "--once", "--port", port)
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(err, "sluicectl: cannot connect to sluiced at 127.0.0.1:%d: "
                              "Connection refused\n" % port)


class TopAuth(unittest.TestCase):

    def test_password_and_user(self):
        d = tempfile.mkdtemp(prefix="sluice-top-auth-")
        self.addCleanup(shutil.rmtree, d, True)
        pw = os.path.join(d, "pw")
        with open(pw, "w") as f:
            f.write("s3cret\n")
        wrong = os.path.join(d, "wrong")
        with open(wrong, "w") as f:
            f.write("nope\n")
        s = Server("--requirepass-file", pw, name="top-auth").start()
        self.addCleanup(s.cleanup)
        where = "127.0.0.1:%d" % s.port
        rc, out, err = ctl("top", "--once", "--port", s.port)
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(err, "sluicectl: %s: INFO: NOAUTH Authentication required.\n" % where)
        rc, out, err = ctl("top", "--once", "--port", s.port, "--password-file", wrong)
        self.assertEqual((rc, out), (1, ""))
        self.assertRegex(err, r"^sluicectl: %s: AUTH: WRONGPASS " % re.escape(where))
        rc, out, err = ctl("top", "--once", "--port", s.port, "--password-file", pw)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("allow", section(out, ""))
        rc, out, err = ctl("top", "--once", "--port", s.port, "--user", "default",
                           "--password-file", pw)
        self.assertEqual((rc, err), (0, ""))
        rc, out, err = ctl("top", "--once", "--port", s.port, "--password-file",
                           os.path.join(d, "none"))
        self.assertEqual((rc, out), (1, ""))
        self.assertEqual(err, "sluicectl: cannot read --password-file %s: No such file or "
                              "directory\n" % os.path.join(d, "none"))
        harness.assert_clean_stop(s)


def wait_status(s, want, timeout=20):
    """Polls INFO backend until backend_status is want (bounded)."""
    until = harness.deadline(timeout)
    got = None
    while time.monotonic() < until:
        got = s.info("backend").get("backend_status")
        if got == want:
            return
        time.sleep(0.05)
    raise AssertionError("backend_status stayed %r, not %r" % (got, want))


class TopRedisBackend(unittest.TestCase):

    def test_backend_line_up_then_down(self):
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        s = Server("--backend", r.url(), "--on-backend-error", "allow", name="top-redis").start()
        self.addCleanup(s.cleanup)
        wait_status(s, "up")
        with s.raw() as c:
            for _ in range(3):
                c.cmd("RL.ALLOW", "k", "2", "1h")
        rc, out, err = ctl("top", "--once", "--port", s.port)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("\nbackend redis %s up, errors 0, timeouts 0, fallback deny 0 allow 0 "
                      "local 0\n" % (r.url() + "/0"), out)
        self.assertEqual(section(out, "")["allow"], ["3", "2", "1", "-", "-"])
        r.stop()
        wait_status(s, "down")
        # answered by --on-backend-error allow: a key Redis never denied, as
        # a worker's deny cache still answers "k" (denied for the hour) when
        # the connection lands on the worker that saw the denial
        with s.raw() as c:
            c.cmd("RL.ALLOW", "k2", "2", "1h")
        rc, out, err = ctl("top", "--once", "--port", s.port)
        self.assertEqual((rc, err), (0, ""))
        self.assertRegex(out, r"\nbackend redis %s DOWN, errors \d+, timeouts \d+, fallback deny 0 "
                              r"allow 1 local 0\nbackend: last error: ." % re.escape(r.url() + "/0"))
        harness.assert_clean_stop(s)


if __name__ == "__main__":
    unittest.main()
