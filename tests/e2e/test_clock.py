"""Time (issue 5, point 7): sluiced decides on a clock anchored to the wall
clock at start and then moved only by CLOCK_BOOTTIME, so a step of the wall
clock in either direction changes no decision; with --trust-client-time,
`AT t` more than --max-client-skew (default 1h) ahead of that clock is
refused and nothing is decided.

The wall clock is stepped with Debian's libfaketime: sluiced runs with
LD_PRELOAD of it (libfaketimeMT.so.1, the variant for threaded programs:
the plain libfaketime.so.1 races on its own state between sluiced's
threads, which TSan reports), FAKETIME_TIMESTAMP_FILE names a file holding an offset in
seconds ("+0", "-3600") that the test rewrites, FAKETIME_NO_CACHE=1 makes
every clock read see the file as it is, and FAKETIME_DONT_FAKE_MONOTONIC=1
leaves the monotonic clocks (CLOCK_BOOTTIME among them) alone: only the
wall clock moves.  That it really moved inside the server is checked each
time (INFO's wall_clock_offset_ms, the "wall clock stepped" log record),
so no test here can pass on a clock that never stepped.

Elapsed time is measured by the test on its own monotonic clock (Python is
not preloaded), and every reply is checked exactly: the server's time since
a decision, e, must lie between the real time that certainly passed and the
real time that at most passed, and every field must be the one the spec
gives at that e.  Under ASan, libfaketime comes before the sanitizer's
runtime in the library list, which ASan refuses by default:
verify_asan_link_order=0 lets it run (its interceptors still work).
"""

import calendar
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import harness
from harness import SLOW, SLUICED, RespError, Server, ServerTestCase, deadline

HOUR_MS = 3600000


def faketime_lib():
    """Debian's libfaketimeMT.so.1 (package libfaketime, scripts/deps.sh)."""
    try:
        out = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        if line.endswith("/libfaketimeMT.so.1"):
            return line
    raise AssertionError("libfaketime is not installed: run scripts/deps.sh")


def mono_ms():
    return time.monotonic() * 1000.0


class FakeClockServer(Server):
    """A sluiced whose wall clock is the real one plus the offset in a file
    of its own; step() changes that offset."""

    def __init__(self, *args, clock_file, **kw):
        super().__init__(*args, **kw)
        self.clock_file = clock_file
        if not os.path.exists(clock_file):
            self.step(0)

    def step(self, offset_s):
        """Sets the wall clock to the real one + offset_s seconds (written
        whole, by rename: the server never reads half a file)."""
        tmp = self.clock_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+d\n" % offset_s)
        os.replace(tmp, self.clock_file)

    def start(self, timeout=15):
        env = {
            "LD_PRELOAD": faketime_lib(),
            "FAKETIME_TIMESTAMP_FILE": self.clock_file,
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "ASAN_OPTIONS": ":".join(o for o in (os.environ.get("ASAN_OPTIONS"),
                                                 "verify_asan_link_order=0") if o),
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # Popen inherits it; only while starting
        try:
            return super().start(timeout)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def wall_offset_ms(self):
        return int(self.info("server")["wall_clock_offset_ms"])

    def wait_wall_offset(self, want_ms, timeout=10):
        """Waits until the server's wall clock reads want_ms (+-1 s) from
        its decision clock: the step has reached the server."""
        until = deadline(timeout)
        got = None
        while time.monotonic() < until:
            got = self.wall_offset_ms()
            if abs(got - want_ms) <= 1000:
                return got
            time.sleep(0.02)
        raise AssertionError("the server's wall clock is %s ms from its clock, want %d: "
                             "libfaketime did not step it" % (got, want_ms))

    def wait_log(self, pattern, count=1, timeout=10):
        """Waits until pattern (a regex) matches count times in the log;
        returns the last match."""
        until = deadline(timeout)
        while time.monotonic() < until:
            found = list(re.finditer(pattern, self.log()))
            if len(found) >= count:
                return found[count - 1]
            time.sleep(0.02)
        raise AssertionError("no %r (x%d) in the log:\n%s" % (pattern, count, self.log()[-3000:]))


def log_time_ms(ts):
    """A log record's ts (2026-11-21T12:00:00.123Z) in ms since the epoch."""
    whole, ms = ts.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) * 1000 + int(ms)


def since(reply_e, lo, hi, what):
    """Checks that the server's time since the decision, as a reply shows it
    (reply_e), lies in [lo, hi] ms of the test's own clock (+-1 ms of
    rounding each side)."""
    if not (lo - 1 <= reply_e <= hi + 1):
        raise AssertionError("%s: the reply says %d ms passed since the decision; real time "
                             "says %.1f..%.1f ms" % (what, reply_e, lo, hi))


class WallStepCase(unittest.TestCase):
    """Tests that start their own FakeClockServer."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-clock-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.clock_file = os.path.join(self.dir, "wall-offset")

    def server(self, *args, **kw):
        s = FakeClockServer(*args, name=self.id().split(".")[-1], clock_file=self.clock_file,
                            **kw)
        s.start()
        self.addCleanup(s.kill)  # cleanup: SIGTERM, exit 0, no sanitizer report
        return s


# token-bucket, 2 per 4 s: one token every 2000 ms
L, W, TOKEN_MS = 2, "4s", 2000


class TestWallClockSteps(WallStepCase):

    def drain_then_step(self, srv, c, key, offset_s, step_no):
        """Takes both tokens of key at server time T0, steps the wall clock to
        real + offset_s, and checks that a PEEK right after sees exactly the
        real time since T0.  Returns (m0, m1): the test's clock just before
        and after the decision at T0."""
        m0 = mono_ms()
        self.assertEqual(c.cmd("RL.ALLOW", key, L, W, "COST", 2), [1, L, 0, 0, 4000, 0])
        m1 = mono_ms()
        srv.step(offset_s)
        srv.wait_wall_offset(offset_s * 1000)
        step = srv.wait_log(r'(?m)^ts=(\S+) level=warn msg="wall clock stepped[^"]*" '
                            r'step_ms=(-?\d+)', count=step_no)
        # the step the server logged is the one made (+-1 s: real time read apart)
        self.assertLessEqual(abs(int(step.group(2)) - (offset_s * 1000 - self.offset_ms)), 1000,
                             step.group(0))
        self.offset_ms = offset_s * 1000
        # and log times are the wall clock's, stepped with it
        self.assertLessEqual(abs(log_time_ms(step.group(1)) - (wall_ms() + offset_s * 1000)),
                             5000 * SLOW, step.group(0))
        # let some real time pass, so that a clock that stood still shows
        while mono_ms() < m1 + 100:
            time.sleep(0.01)
        m2 = mono_ms()
        got = c.cmd("RL.PEEK", key, L, W)
        m3 = mono_ms()
        self.assertEqual(len(got), 6, got)
        e = TOKEN_MS - got[3]
        # denied, one token short: retry = 2000 - e, reset = 4000 - e
        self.assertEqual(got, [0, L, 0, TOKEN_MS - e, 2 * TOKEN_MS - e, 0],
                         "RL.PEEK right after a %+d s wall-clock step" % offset_s)
        since(e, m2 - m1, m3 - m0, "RL.PEEK after a %+d s step" % offset_s)
        return m0, m1

    def refills_on_time(self, c, key, m0, m1, offset_s):
        """Polls until key has a token again: no sooner than 2000 ms of real
        time after the decision at T0 (a step forward grants nothing) and
        not much later (a step back does not freeze it); then exactly one
        token is there."""
        until = deadline(TOKEN_MS / 1000.0 + 10)
        while True:
            a = mono_ms()
            got = c.cmd("RL.PEEK", key, L, W)
            b = mono_ms()
            if got[0] == 1:
                break
            e = TOKEN_MS - got[3]
            self.assertEqual(got, [0, L, 0, TOKEN_MS - e, 2 * TOKEN_MS - e, 0])
            since(e, a - m1, b - m0, "a denied RL.PEEK")
            self.assertLess(time.monotonic(), until,
                            "after a %+d s step the key did not refill within %d ms of "
                            "real time: %r" % (offset_s, TOKEN_MS, got))
            time.sleep(0.02)
        self.assertGreaterEqual(b - m0, TOKEN_MS - 1, "refilled before its time: %r" % got)
        # one token, no more: it is taken, and the next request is denied
        a = mono_ms()
        got = c.cmd("RL.ALLOW", key, L, W)
        b = mono_ms()
        e = 3 * TOKEN_MS - got[4]
        self.assertEqual(got, [1, L, 0, 0, 3 * TOKEN_MS - e, 0])
        since(e, a - m1, b - m0, "the RL.ALLOW that took the refilled token")
        self.assertGreaterEqual(e, TOKEN_MS)
        a = mono_ms()
        got = c.cmd("RL.ALLOW", key, L, W)
        b = mono_ms()
        e2 = 2 * TOKEN_MS - got[3]
        self.assertEqual(got, [0, L, 0, 2 * TOKEN_MS - e2, 3 * TOKEN_MS - e2, 0],
                         "after the refill, nothing extra")
        since(e2, a - m1, b - m0, "the RL.ALLOW after the refill")

    def test_steps_back_and_forward_change_no_decision(self):
        """A key at its limit refills after exactly its refill time of real
        time when the wall clock is stepped back an hour (before: denied for
        an hour), and stepping it forward an hour grants nothing extra."""
        srv = self.server()
        self.offset_ms = 0
        self.assertLessEqual(abs(srv.wall_offset_ms()), 1000)
        with srv.raw() as c:
            m0, m1 = self.drain_then_step(srv, c, "back", -3600, 1)
            self.refills_on_time(c, "back", m0, m1, -3600)
            m0, m1 = self.drain_then_step(srv, c, "fwd", +3600, 2)
            self.refills_on_time(c, "fwd", m0, m1, +3600)

    def test_restart_behind_the_snapshot(self):
        """The wall clock stepped back an hour while sluiced was down: the
        restarted server starts its clock at the snapshot's latest time, so
        a key at its limit refills after its refill time of real time, not
        an hour later; the start says so in the log."""
        snap = os.path.join(self.dir, "state.snap")
        srv = self.server("--snapshot", snap)
        with srv.raw() as c:
            m0 = mono_ms()
            self.assertEqual(c.cmd("RL.ALLOW", "kept", 1, "3s"), [1, 1, 0, 0, 3000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "kept", 1, "3s")[:3], [0, 1, 0])
        harness.assert_clean_stop(srv)
        srv.step(-3600)
        srv2 = self.server("--snapshot", snap)
        m = srv2.wait_log(r'msg="the snapshot holds later times than the wall clock[^"]*" '
                          r'behind_ms=(\d+) clock_ms=(\d+)')
        behind = int(m.group(1))
        self.assertLessEqual(behind, HOUR_MS)
        self.assertGreaterEqual(behind, HOUR_MS - (mono_ms() - m0) - 1000)
        self.assertLessEqual(abs(srv2.wall_offset_ms() + behind), 1000)
        with srv2.raw() as c:
            until = deadline(3 + 10)
            while True:
                got = c.cmd("RL.PEEK", "kept", 1, "3s")
                b = mono_ms()
                if got[0] == 1:
                    break
                self.assertLess(time.monotonic(), until,
                                "the key did not refill within 3 s of real time: %r" % got)
                self.assertLessEqual(got[3], 3000, got)
                time.sleep(0.02)
            self.assertGreaterEqual(b - m0, 3000 - 1, "refilled before its time")
            self.assertEqual(c.cmd("RL.ALLOW", "kept", 1, "3s")[:4], [1, 1, 0, 0])


# ---- AT and --max-client-skew ------------------------------------------------

SKEW_RE = re.compile(r"^ERR AT (-?\d+) is (\d+) ms ahead of the server's clock \((\d+)\); "
                     r"--max-client-skew allows at most (\d+) ms$")

RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: u}
"""


def wall_ms():
    return int(time.time() * 1000)


class TestClientSkew(ServerTestCase):
    """--trust-client-time with the default --max-client-skew (1h)."""

    TRUST = False  # the harness's own skew (7d) is not wanted here

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-skew-")
        rules = os.path.join(cls.dir, "api.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--trust-client-time", "--rules", rules)
        super().setUpClass()


    def refused(self, reply, at, bound=HOUR_MS):
        """reply is the skew error for AT at, with the server's clock near
        the wall clock; returns that clock."""
        self.assertIsInstance(reply, RespError, reply)
        m = SKEW_RE.match(reply.line)
        self.assertIsNotNone(m, reply.line)
        got_at, ahead, clock, got_bound = (int(x) for x in m.groups())
        self.assertEqual(got_at, at)
        self.assertEqual(ahead, at - clock)
        self.assertEqual(got_bound, bound)
        self.assertLessEqual(abs(clock - wall_ms()), 5000 * SLOW, "the server's clock")
        return clock

    def counts(self):
        st = self.srv.info("stats")
        return int(st["decisions"]), int(st["checks"]), self.srv.info_int("keys", "memory")

    def test_default_bound_is_an_hour(self):
        self.assertEqual(self.srv.info("server")["max_client_skew_ms"], str(HOUR_MS))

    def test_ten_years_ahead_is_refused_and_decides_nothing(self):
        """The finding: one `AT now+10y` locked a key.  Now RL.ALLOW, RL.PEEK
        and RL.CHECK refuse it, naming the value and the bound; no decision,
        no check, no key; the key then answers as if it never came."""
        far = wall_ms() + 10 * 365 * 86400000
        before = self.counts()
        with self.srv.raw() as c:
            self.refused(c.cmd("RL.ALLOW", "locked", 5, "10s", "AT", far), far)
            self.refused(c.cmd("RL.PEEK", "locked", 5, "10s", "AT", far), far)
            self.refused(c.cmd("RL.CHECK", "api", "AT", far, "DESCRIPTOR", "user", "ann"), far)
            self.refused(c.cmd("RL.ALLOW", "locked", 5, "10s", "COST", 2, "AT", far + 1), far + 1)
            self.assertEqual(self.counts(), before, "nothing decided, nothing stored")
            # untouched: a fresh key's answers, at the server's own clock
            self.assertEqual(c.cmd("RL.PEEK", "locked", 5, "10s"), [1, 5, 4, 0, 2000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "locked", 5, "10s"), [1, 5, 4, 0, 2000, 0])
            r = c.cmd("RL.CHECK", "api", "DESCRIPTOR", "user", "ann")
            self.assertEqual(r[6][:4], [b"OK", b"u", 2, 1], r)

    def test_bound_is_inclusive(self):
        """AT = the server's clock + 1h exactly is accepted, one ms more is
        refused.  All the candidates go in one write, so one turn -- one
        reading of the server's clock -- decides them all; the first command
        of the write reveals that reading (its error names it)."""
        far = wall_ms() + 10 * 365 * 86400000
        guess = wall_ms()
        # +-60 candidates: their replies (refusals ~115 bytes) stay well
        # under SL_NET_TURN_OUT (16 KB), which would end the turn early
        span = 60
        for attempt in range(8):
            cmds = [harness.encode("RL.PEEK", "probe", 1, "1s", "AT", far)]
            ats = [guess + HOUR_MS + d for d in range(-span, span + 1)]
            cmds += [harness.encode("RL.PEEK", "edge", 1, "1s", "AT", t) for t in ats]
            t0 = mono_ms()
            with self.srv.raw() as c:
                c.send(b"".join(cmds))
                replies = c.read_replies(len(cmds))
            clock = self.refused(replies[0], far)
            clocks = {self.refused(r, t) for r, t in zip(replies[1:], ats)
                      if isinstance(r, RespError)}
            if clocks <= {clock}:  # one turn (else the write was split: again)
                want = [t - clock <= HOUR_MS for t in ats]
                got = [not isinstance(r, RespError) for r in replies[1:]]
                for ok, r in zip(got, replies[1:]):
                    if ok:
                        self.assertEqual(r, [1, 1, 0, 0, 1000, 0])
                self.assertEqual(got, want, "accepted iff AT - clock <= 3600000")
                if any(want) and not all(want):
                    self.assertIn(clock + HOUR_MS, ats)
                    self.assertTrue(got[ats.index(clock + HOUR_MS)], "the bound itself")
                    self.assertFalse(got[ats.index(clock + HOUR_MS + 1)], "one ms past it")
                    return
            guess = clock + int(mono_ms() - t0)  # aim at the server's clock next time
        self.fail("never had the bound inside one turn's candidates")

    def test_the_past_is_accepted(self):
        """No lower bound: SPEC section 4 decides a time behind a key's latest
        at that latest time, so an early AT cannot reopen a window; on a new
        key it is a decision like any other."""
        now = wall_ms()
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "past", 1, "1h", "AT", 1), [1, 1, 0, 0, HOUR_MS, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "past2", 1, "1h", "AT", now),
                             [1, 1, 0, 0, HOUR_MS, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "past2", 1, "1h", "AT", now - 10 * HOUR_MS),
                             [0, 1, 0, HOUR_MS, HOUR_MS, 0], "decided at the key's latest time")


class TestSkewOption(unittest.TestCase):
    """--max-client-skew and its config-file twin; 0 is no bound."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-skew-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self, *args):
        s = Server(*args, name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_flag_file_and_zero(self):
        conf = os.path.join(self.dir, "sluiced.conf")
        with open(conf, "w") as f:
            f.write("trust-client-time yes\nmax-client-skew 90s\n")
        for s in (self.start("--config", conf),
                  self.start("--trust-client-time", "--max-client-skew", "90s")):
            self.assertEqual(s.info("server")["max_client_skew_ms"], "90000")
            with s.raw() as c:
                t = wall_ms() + 3600000
                r = c.cmd("RL.ALLOW", "k", 1, "1s", "AT", t)
                m = SKEW_RE.match(r.line) if isinstance(r, RespError) else None
                self.assertIsNotNone(m, r)
                self.assertEqual(int(m.group(4)), 90000)
                self.assertEqual(c.cmd("RL.ALLOW", "k", 1, "1s", "AT", wall_ms() + 30000)[:3],
                                 [1, 1, 0], "30 s ahead is inside 90 s")
        s = self.start("--trust-client-time", "--max-client-skew", "0")
        self.assertEqual(s.info("server")["max_client_skew_ms"], "0")
        with s.raw() as c:
            t = wall_ms() + 10 * 365 * 86400000
            self.assertEqual(c.cmd("RL.ALLOW", "k", 1, "1s", "AT", t), [1, 1, 0, 0, 1000, 0],
                             "0: no bound")

    def test_bad_values(self):
        conf = os.path.join(self.dir, "bad.conf")
        with open(conf, "w") as f:
            f.write("trust-client-time\nmax-client-skew soon\n")
        for args, msg in (
                (["--max-client-skew", "30"],
                 "sluiced: invalid --max-client-skew '30': give a unit (ms, s, m, h or d), "
                 "or 0 for no bound"),
                (["--max-client-skew", "-1h"],
                 "sluiced: invalid --max-client-skew '-1h': expected a duration such as 500ms, "
                 "30s, 5m or 1h, or 0 for no bound"),
                (["--config", conf],
                 "sluiced: %s:2: invalid max-client-skew 'soon': expected a duration such as "
                 "500ms, 30s, 5m or 1h, or 0 for no bound" % conf)):
            p = harness.run_checked([SLUICED, "--port", "0"] + args, capture_output=True, text=True,
                                    timeout=30 * SLOW)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(p.stderr.splitlines()[0], msg)


if __name__ == "__main__":
    unittest.main()
