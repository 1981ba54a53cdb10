"""`sluicectl replay --rules` against sluiced's RL.CHECK: the same rules, the
same requests, the same decisions.

A generated nginx `combined` access log (a few thousand lines: IPv4 and
IPv6 clients, several methods, paths with query strings, a wildcard-matched
path, escaped quotes, times advancing with repeats of the same second, zone
offsets other than +0000) is replayed with `build/sluicectl replay --rules R
--domain edge --log-format combined`; then sluiced is started with the same
rules, `--capacity` and `--trust-client-time`, and the same requests are
sent, in order, as `RL.CHECK edge AT t DESCRIPTOR remote_address A
DESCRIPTOR method M DESCRIPTOR path P`.  Every answer line must equal the
server's reply: the six overall numbers and each descriptor's code and rule
name.  The rules exercise a per-IP limit with ip_prefix, a block list
(limit 0), a wildcard path with two limits (all-or-none), a shadow rule, an
unlimited path, an elastic limit on the spare pool and a sliding-window
limit.  A second test does the same for the `lines` format (several
entries per descriptor, costs, %XX escapes), and a third for sluiced's
loader options, `--merge-domains` and `--count-denied`, given to both.
"""

import datetime
import os
import random
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse

import harness
from harness import BASE, RespError, ServerTestCase, encode

SLUICE = os.path.join(harness.BUILD, "sluicectl")

RULES = """\
domain: edge
descriptors:
  - key: remote_address                # each /24 or /64: 6 a second
    ip_prefix: {ipv4: 24, ipv6: 64}
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: remote_address                # a block list
    value: 198.51.100.7
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: method
    value: POST
    rate_limit: {algorithm: sliding-window, unit: minute, requests_per_unit: 40}
  - key: method
    value: DELETE
    rate_limit: {unit: minute, requests_per_unit: 5, elastic: 300%}
  - key: path
    value: /api/*                      # every /api/... path, each counted apart
    rate_limit:
      - {unit: second, requests_per_unit: 3}
      - {algorithm: token-bucket, window: 10s, requests_per_unit: 10, burst: 6}
  - key: path
    value: /admin
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
"""

# The lines-format rules: nested descriptors, costs.
RULES_LINES = """\
domain: app
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 20, burst: 8}
  - key: route
    value: "GET /a b"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: route
    rate_limit: {algorithm: sliding-log, unit: second, requests_per_unit: 4}
"""

# One domain in two files (--merge-domains); fixed windows, counted Lyft's
# way with --count-denied, beside a sliding window and a quota descriptor,
# which keep all-or-none.
RULES_LYFT_A = """\
domain: lyft
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: route
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 5}
"""
RULES_LYFT_B = """\
domain: lyft
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 40}
  - key: route
    value: /login
    rate_limit: {algorithm: sliding-window, unit: second, requests_per_unit: 2}
  - key: backend
    value: primary
    quota_mode: true
    rate_limit: {unit: second, requests_per_unit: 4}
"""

CLIENTS = ["203.0.113.5", "203.0.113.77",            # one /24
           "192.0.2.1", "192.0.2.200",               # another
           "198.51.100.7",                           # blocked
           "2001:db8:1:2::1", "2001:db8:1:2:ffff::9",  # one /64
           "2001:db8:9::42", "10.1.2.3"]
METHODS = ["GET"] * 8 + ["POST"] * 3 + ["PUT", "DELETE", "OPTIONS", "HEAD"]
PATHS = ["/api/users", "/api/users/17", "/api/orders", "/login", "/admin", "/health",
         "/static/app.js", "/", "/api/search"]
QUERIES = ["", "", "?id=3", "?q=a+b&page=2", "?x=\\x22quoted\\x22"]
ZONES = [0, 0, 330, -420, 60, -210, 600]             # minutes east of UTC
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
AGENTS = ["curl/8.0", "Mozilla/5.0 (X11; Linux x86_64)", "a \\\"quoted\\\" agent", "-"]


def time_local(t_ms, zone_min):
    """nginx's $time_local for t_ms (whole seconds) in a zone zone_min east."""
    tz = datetime.timezone(datetime.timedelta(minutes=zone_min))
    d = datetime.datetime.fromtimestamp(t_ms // 1000, tz)
    sign = "+" if zone_min >= 0 else "-"
    z = abs(zone_min)
    return "%02d/%s/%04d:%02d:%02d:%02d %s%02d%02d" % (
        d.day, MONTHS[d.month - 1], d.year, d.hour, d.minute, d.second, sign, z // 60, z % 60)


def make_log(n, seed=7):
    """(lines of the log, [(t_ms, addr, method, path)]), times from BASE."""
    rnd = random.Random(seed)
    t = BASE + 3600 * 1000  # whole seconds
    lines, reqs = [], []
    for i in range(n):
        # bursts in the same second, then a step forward (sometimes long)
        r = rnd.random()
        if r < 0.8:
            pass
        elif r < 0.97:
            t += 1000
        else:
            t += rnd.choice([5000, 20000, 61000])
        # a hot client and a hot path, so that limits are reached
        addr = CLIENTS[0] if rnd.random() < 0.3 else rnd.choice(CLIENTS)
        method = rnd.choice(METHODS)
        path = PATHS[0] if rnd.random() < 0.2 else rnd.choice(PATHS)
        if path == "/api/users/17" and rnd.random() < 0.3:
            path = "/api/users/%d" % rnd.randrange(5)
        if i % 97 == 0:
            path = "/api/a\\x22b"    # an escaped quote inside the path itself
        query = rnd.choice(QUERIES)
        status = rnd.choice([200, 200, 304, 404, 429, 500])
        line = '%s - %s [%s] "%s %s%s HTTP/1.1" %d %d "%s" "%s"' % (
            addr, rnd.choice(["-", "alice"]), time_local(t, rnd.choice(ZONES)), method, path,
            query, status, rnd.randrange(0, 5000), rnd.choice(["-", "https://example.com/"]),
            rnd.choice(AGENTS))
        lines.append(line)
        reqs.append((t, addr, method, path))
    return lines, reqs


def unescape_name(s):
    """A rule name as the answer line writes it (%XX escapes) -> the name."""
    return None if s == "-" else urllib.parse.unquote(s, errors="strict")


def parse_answer(line):
    """'A L R RA RS D CODE:NAME ...' -> ([6 ints], [(code, name)])."""
    f = line.split(" ")
    nums = [int(x) for x in f[:6]]
    descs = []
    for d in f[6:]:
        code, _, name = d.partition(":")
        descs.append((code, unescape_name(name)))
    return nums, descs


def parse_reply(reply):
    """RL.CHECK's reply -> the same shape as parse_answer."""
    if isinstance(reply, RespError):
        raise AssertionError("RL.CHECK failed: %s" % reply.line)
    nums = reply[:6]
    descs = [(d[0].decode(), None if d[1] is None else d[1].decode()) for d in reply[6:]]
    return nums, descs


class TestReplayRulesMatchesServer(ServerTestCase):
    """One server with the combined-log rules; a second one of its own for
    the lines format."""

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-replay-rules-")
        cls.rules = os.path.join(cls.dir, "edge.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--rules", cls.rules, "--capacity", "8/1s")
        super().setUpClass()


    def replay(self, *args, stdin_text):
        p = subprocess.run([SLUICE, "replay"] + list(args), input=stdin_text.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120 * harness.SLOW)
        self.assertEqual(p.returncode, 0, "sluicectl replay %s failed: %s"
                         % (" ".join(args), p.stderr.decode(errors="replace")[-2000:]))
        return p.stdout.decode().splitlines(), p.stderr.decode(errors="replace")

    def ask(self, srv, commands):
        """Sends every command pipelined (in chunks) on one connection;
        returns the replies in order."""
        out = []
        with srv.raw(timeout=60) as c:
            for i in range(0, len(commands), 500):
                chunk = commands[i:i + 500]
                c.send(b"".join(encode(*cmd) for cmd in chunk))
                out += c.read_replies(len(chunk), timeout=60)
        return out

    def compare(self, answers, replies, inputs):
        self.assertEqual(len(answers), len(replies))
        codes = {}
        for i, (line, reply) in enumerate(zip(answers, replies)):
            got, want = parse_answer(line), parse_reply(reply)
            self.assertEqual(got, want, "request %d (%s): replay says %r, sluiced says %r"
                             % (i + 1, inputs[i], line, reply))
            for code, name in got[1]:
                codes[code] = codes.get(code, 0) + 1
        return codes

    def test_combined_log_same_decisions_as_sluiced(self):
        lines, reqs = make_log(3000)
        answers, _ = self.replay("--rules", self.rules, "--domain", "edge", "--log-format",
                                 "combined", "--capacity", "8/1s",
                                 stdin_text="\n".join(lines) + "\n")
        self.assertEqual(len(answers), len(lines))
        cmds = [("RL.CHECK", "edge", "AT", t, "DESCRIPTOR", "remote_address", a,
                 "DESCRIPTOR", "method", m, "DESCRIPTOR", "path", p) for t, a, m, p in reqs]
        codes = self.compare(answers, self.ask(self.srv, cmds), lines)
        # the log exercises every outcome
        for code in ("OK", "OVER_LIMIT", "SHADOW", "UNLIMITED", "NO_RULE", "ELASTIC"):
            self.assertGreater(codes.get(code, 0), 0, "no %s in %r" % (code, codes))
        allowed = sum(1 for a in answers if a.startswith("1 "))
        self.assertTrue(0 < allowed < len(answers), "allowed %d of %d" % (allowed, len(answers)))

    def test_summary_counts_match_the_answers(self):
        lines, _ = make_log(1500, seed=11)
        answers, err = self.replay("--rules", self.rules, "--domain", "edge", "--log-format",
                                   "combined", "--summary", stdin_text="\n".join(lines) + "\n")
        allowed = sum(1 for a in answers if a.startswith("1 "))
        self.assertRegex(err, r"requests +%d +\(" % len(answers))
        self.assertRegex(err, r"allowed +%d " % allowed)
        denied_admin = sum(a.count("SHADOW:edge.path_/admin") for a in answers)
        self.assertRegex(err, r"\n +\d+ +\d+ +\d+ +\d+ +%d +\d+  edge\.path_/admin " % denied_admin)

    def test_lines_format_same_decisions_as_sluiced(self):
        rules = os.path.join(self.dir, "app.yaml")
        with open(rules, "w") as f:
            f.write(RULES_LINES)
        srv = self.new_server("--rules", rules, trust_client_time=True)
        rnd = random.Random(3)
        t = BASE
        lines, cmds = [], []
        for i in range(2000):
            t += rnd.choice([0, 0, 50, 130, 400, 1000])
            tenant = rnd.choice(["acme", "glob,ex", "a b"])
            user = rnd.choice(["bob", "eve", "x=y", "100%"])
            route = rnd.choice(["GET /a b", "GET /c", "PUT /a b"])
            cost = rnd.choice([1, 1, 1, 2, 0])
            descs = [[("tenant", tenant), ("user", user)], [("route", route)]]
            if rnd.random() < 0.3:
                descs.append([("tenant", tenant)])
            enc = lambda s: urllib.parse.quote(s, safe="/")  # noqa: E731
            fields = [",".join("%s=%s" % (enc(k), enc(v)) for k, v in d) for d in descs]
            lines.append("%d %s%s" % (t, " ".join(fields), " cost=%d" % cost if cost != 1 else ""))
            cmd = ["RL.CHECK", "app", "COST", cost, "AT", t]
            for d in descs:
                cmd.append("DESCRIPTOR")
                for k, v in d:
                    cmd += [k, v]
            cmds.append(cmd)
        answers, _ = self.replay("--rules", rules, "--domain", "app",
                                 stdin_text="\n".join(lines) + "\n")
        self.assertEqual(len(answers), len(lines))
        codes = self.compare(answers, self.ask(srv, cmds), lines)
        self.assertGreater(codes.get("OVER_LIMIT", 0), 0, codes)

    def test_merge_domains_and_count_denied_as_sluiced(self):
        """`--merge-domains` and `--count-denied` mean what they mean to
        sluiced: one domain in two files, Lyft's counting; the same
        requests get the same answers from both."""
        d = os.path.join(self.dir, "lyft")
        os.mkdir(d)
        with open(os.path.join(d, "a.yaml"), "w") as f:
            f.write(RULES_LYFT_A)
        with open(os.path.join(d, "b.yaml"), "w") as f:
            f.write(RULES_LYFT_B)
        srv = self.new_server("--rules", d, "--merge-domains", "--count-denied",
                              trust_client_time=True)
        rnd = random.Random(5)
        t = BASE
        lines, cmds = [], []
        for i in range(2000):
            t += rnd.choice([0, 0, 40, 150, 300, 1000])
            descs = [("user", rnd.choice(["ann", "bob", "cy"])),
                     ("route", rnd.choice(["/api/a", "/api/b", "/login", "/x"]))]
            if rnd.random() < 0.5:
                descs.append(("tenant", rnd.choice(["t1", "t2"])))
            if rnd.random() < 0.3:
                descs.append(("backend", "primary"))
            cost = rnd.choice([1, 1, 1, 2])
            lines.append("%d %s%s" % (t, " ".join("%s=%s" % kv for kv in descs),
                                      " cost=2" if cost == 2 else ""))
            cmd = ["RL.CHECK", "lyft", "COST", cost, "AT", t]
            for k, v in descs:
                cmd += ["DESCRIPTOR", k, v]
            cmds.append(cmd)
        text = "\n".join(lines) + "\n"
        answers, _ = self.replay("--rules", d, "--domain", "lyft", "--merge-domains",
                                 "--count-denied", stdin_text=text)
        codes = self.compare(answers, self.ask(srv, cmds), lines)
        for code in ("OK", "OVER_LIMIT", "OVER_QUOTA", "NO_RULE"):
            self.assertGreater(codes.get(code, 0), 0, codes)
        # all-or-none answers otherwise: the flag is what made them agree
        plain, _ = self.replay("--rules", d, "--domain", "lyft", "--merge-domains=yes",
                               "--count-denied=no", stdin_text=text)
        self.assertEqual(len(plain), len(answers))
        self.assertGreater(sum(1 for a, b in zip(plain, answers) if a != b), 100)


if __name__ == "__main__":
    unittest.main()
