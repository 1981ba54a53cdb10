"""Restarts: SIGTERM saves and a restart carries every decision over;
kill -9 loses at most what came after the last periodic snapshot; a
corrupt snapshot is refused with a clear message and left as it was;
SIGTERM during a pipelined batch still answers what was read, and the
snapshot holds exactly the decisions the client was told about.  A
snapshot place that cannot be written refuses the start; a symlinked
snapshot path is written through and stays a link."""

import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import (BASE, SLOW, SLUICED, Server, ServerTestCase, assert_clean_stop, deadline,
                     encode, free_port, nothing_listening, run_checked)

FW = ["ALGO", "fixed-window"]


class TestRestart(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-snap-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.snap = os.path.join(self.dir, "state.snap")

    def server(self, *args, **kw):
        s = Server("--snapshot", self.snap, *args, name=self.id().split(".")[-1],
                   trust_client_time=True, **kw)
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_sigterm_restart_keeps_state(self):
        s = self.server()
        with s.raw() as c:
            for _ in range(3):
                c.cmd("RL.ALLOW", "full", 3, "1h", *FW, "AT", BASE)
            self.assertEqual(c.cmd("RL.ALLOW", "full", 3, "1h", *FW, "AT", BASE + 1000),
                             [0, 3, 0, 3599000, 3599000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "half", 10, "1m", "AT", BASE, "COST", 4),
                             [1, 10, 6, 0, 24000, 0])
            for algo in ("sliding-log", "sliding-window", "sliding-buckets", "gcra", "leaky-bucket"):
                c.cmd("RL.ALLOW", "algo", 2, "1h", "ALGO", algo, "AT", BASE)
                c.cmd("RL.ALLOW", "algo", 2, "1h", "ALGO", algo, "AT", BASE)
            # and a key decided at the server's own clock
            c.cmd("RL.ALLOW", "wall", 2, "1d")
            c.cmd("RL.ALLOW", "wall", 2, "1d")
            self.assertEqual(c.cmd("RL.ALLOW", "wall", 2, "1d")[:3], [0, 2, 0])
        assert_clean_stop(s)
        self.assertIn("snapshot saved", s.log())
        self.assertTrue(os.path.getsize(self.snap) > 0)

        s2 = self.server()
        self.assertEqual(s2.info_int("keys_loaded_at_start", "persistence"), 8)
        self.assertEqual(s2.info_int("keys", "memory"), 8)
        with s2.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "full", 3, "1h", *FW, "AT", BASE + 2000),
                             [0, 3, 0, 3598000, 3598000, 0], "a key at its limit is still at it")
            self.assertEqual(c.cmd("RL.ALLOW", "half", 10, "1m", "AT", BASE, "COST", 6),
                             [1, 10, 0, 0, 60000, 0])
            for algo in ("sliding-log", "sliding-window", "sliding-buckets", "gcra", "leaky-bucket"):
                self.assertEqual(c.cmd("RL.ALLOW", "algo", 2, "1h", "ALGO", algo, "AT", BASE)[:3],
                                 [0, 2, 0], algo)
            self.assertEqual(c.cmd("RL.ALLOW", "wall", 2, "1d")[:3], [0, 2, 0])
        assert_clean_stop(s2)

    def test_kill9_loses_at_most_one_interval(self):
        """Requests answered before a periodic snapshot that started after
        them are remembered after kill -9."""
        s = self.server("--snapshot-interval", "200ms")
        with s.raw() as c:
            for _ in range(5):
                c.cmd("RL.ALLOW", "k9", 5, "1h", *FW, "AT", BASE)
            c.cmd("RL.ALLOW", "k9-tb", 5, "1h", "AT", BASE, "COST", 3)
        n0 = s.info_int("snapshots_written", "persistence")
        # n0 + 2: at least one whole snapshot began after the requests
        s.wait_info("snapshots_written", lambda v: v >= n0 + 2, "persistence", timeout=30,
                    what="(periodic snapshots every 200ms)")
        self.assertEqual(s.info("persistence")["last_snapshot_status"], "ok")
        s.kill()
        self.assertEqual(s.returncode, -9)

        s2 = self.server("--snapshot-interval", "200ms")
        self.assertEqual(s2.info_int("keys_loaded_at_start", "persistence"), 2)
        with s2.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "k9", 5, "1h", *FW, "AT", BASE),
                             [0, 5, 0, 3600000, 3600000, 0])
            self.assertEqual(c.cmd("RL.PEEK", "k9-tb", 5, "1h", "AT", BASE), [1, 5, 1, 0, 2880000, 0])
        assert_clean_stop(s2)

    def corrupt_and_expect_refusal(self, mutate, words):
        """Writes a good snapshot, mutates it, and checks that sluiced
        refuses to start: nonzero exit, a message naming the file and one of
        `words`, nothing listening, and the file left as it was."""
        if os.path.exists(self.snap):
            os.remove(self.snap)
        s = self.server()
        with s.raw() as c:
            for i in range(50):
                c.cmd("RL.ALLOW", "c%d" % i, 3, "1h", "AT", BASE)
        assert_clean_stop(s)
        with open(self.snap, "rb") as f:
            good = f.read()
        bad = mutate(good)
        with open(self.snap, "wb") as f:
            f.write(bad)
        port = free_port()
        p = run_checked([SLUICED, "--port", str(port), "--snapshot", self.snap],
                        capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        msg = (p.stdout + p.stderr).decode("utf-8", "replace")
        self.assertNotEqual(p.returncode, 0, msg)
        self.assertIn(self.snap, msg)
        self.assertTrue(any(w in msg for w in words), "expected one of %s in:\n%s" % (words, msg))
        self.assertNotIn("listening", msg)
        self.assertTrue(nothing_listening(port))
        for m in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            self.assertNotIn(m, msg)
        with open(self.snap, "rb") as f:
            self.assertEqual(f.read(), bad, "the refused snapshot is left untouched")
        return msg

    def test_corrupt_flipped_byte(self):
        def flip(b):
            b = bytearray(b)
            b[len(b) // 2] ^= 0x40
            return bytes(b)
        self.corrupt_and_expect_refusal(flip, ["checksum", "corrupt"])

    def test_corrupt_truncated(self):
        for cut in (lambda b: b[:len(b) // 2], lambda b: b[:20], lambda b: b[:-1]):
            self.corrupt_and_expect_refusal(cut, ["truncated", "cut short", "checksum", "corrupt"])

    def test_corrupt_garbage(self):
        rnd = random.Random(7)
        self.corrupt_and_expect_refusal(lambda b: bytes(rnd.randrange(256) for _ in range(len(b))),
                                        ["not a sluice snapshot", "corrupt", "bad magic"])
        self.corrupt_and_expect_refusal(lambda b: b"", ["not a sluice snapshot", "truncated",
                                                       "empty", "corrupt"])

    def test_corrupt_trailing_bytes(self):
        self.corrupt_and_expect_refusal(lambda b: b + b"\x00" * 7,
                                        ["checksum", "corrupt", "unexpected bytes"])

    def sigterm_during_pipeline(self, n):
        """Sends n pipelined RL.ALLOW in one write, SIGTERMs the server after
        the first reply, reads to the end: every reply exact and in order,
        a clean end (no partial reply), exit status 0, and after the restart
        the key holds exactly as many decisions as the client got replies."""
        s = self.server()
        limit = 10 ** 9
        with s.raw() as c:
            c.send(encode("RL.ALLOW", "term", limit, "1h", *FW, "AT", BASE) * n)
            first = c.read_reply()
            self.assertEqual(first, [1, limit, limit - 1, 0, 3600000, 0])
            s.proc.send_signal(15)
            try:
                rest = c.read_until_eof(timeout=30)
            except ValueError as e:
                s.proc.wait(30 * SLOW)
                s2 = self.server()
                with s2.raw() as c2:
                    left = c2.cmd("RL.PEEK", "term", limit, "1h", *FW, "AT", BASE)[2]
                self.fail("%s; the snapshot holds %d decisions (replies lost to a reset)"
                          % (e, limit - 1 - left))
            reset = c.reset
        got = [first] + rest
        for i, g in enumerate(got):
            if g != [1, limit, limit - 1 - i, 0, 3600000, 0]:
                self.fail("reply %d of %d: %r" % (i, len(got), g))
        s.proc.wait(30 * SLOW)
        self.assertEqual(s.proc.returncode, 0, s.log()[-2000:])
        s2 = self.server()
        with s2.raw() as c:
            left = c.cmd("RL.PEEK", "term", limit, "1h", *FW, "AT", BASE)[2]
        self.assertEqual(limit - 1 - left, len(got),
                         "decisions in the snapshot vs replies the client got (connection %s)"
                         % ("reset" if reset else "closed with FIN"))
        assert_clean_stop(s2)

    def test_sigterm_during_pipeline(self):
        """10,000 commands (700 KB) in flight: within what docs/sluiced.md
        promises to drain (SL_NET_STOP_READ run, up to 1 MB discarded)."""
        self.sigterm_during_pipeline(10000)

    def test_sigterm_during_deep_pipeline(self):
        """50,000 commands (3.5 MB) in flight: the server may stop reading
        early, but every decision it made must reach the client."""
        self.sigterm_during_pipeline(50000)

    def test_unwritable_snapshot_is_reported(self):
        """A snapshot folder that goes away while the server runs (it was
        checked at start, then moved away): the server still serves; the failed save shows in
        INFO and the exit status."""
        sub = os.path.join(self.dir, "sub")
        os.mkdir(sub)
        s = Server("--snapshot", os.path.join(sub, "x.snap"), "--snapshot-interval", "100ms",
                   name="unwritable")
        s.start()
        self.addCleanup(s.kill)
        os.rename(sub, os.path.join(self.dir, "moved"))  # atomic, whatever a save is doing
        with s.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        until = deadline(20)
        while time.monotonic() < until and "snapshot save failed" not in s.log():
            time.sleep(0.05)
        self.assertIn("snapshot save failed", s.log())
        self.assertEqual(s.info("persistence")["last_snapshot_status"], "err")
        rc = s.stop()
        self.assertNotEqual(rc, 0, "a shutdown that could not save says so in its status")


def run_refused(args, user=None, cwd=None):
    """Runs sluiced with args on a free port, expecting it to refuse to
    start.  Returns (exit status, its output); asserts nothing listens on
    the port and no sanitizer spoke.  user: run as that uid (and gid)."""
    port = free_port()
    kw = {}
    if user is not None:
        kw = dict(user=user, group=user, extra_groups=[])
    p = run_checked([SLUICED, "--port", str(port)] + list(args), capture_output=True,
                    timeout=30 * SLOW, stdin=subprocess.DEVNULL, cwd=cwd, **kw)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert nothing_listening(port), msg
    for m in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        assert m not in msg, msg
    return p.returncode, msg


class TestSnapshotPlace(unittest.TestCase):
    """The snapshot's place is checked at start by a real write (a test file
    created and removed beside the snapshot): a place that cannot take the
    snapshot refuses the start, exit status 1 like every start failure,
    rather than losing the state at the first save or at shutdown."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-snap-")
        os.chmod(self.dir, 0o755)  # so that nobody may enter it
        self.addCleanup(shutil.rmtree, self.dir, True)

    def refused(self, snap, why, user=None):
        before = sorted(os.listdir(self.dir))
        rc, msg = run_refused(["--snapshot", snap], user=user, cwd=self.dir)
        self.assertEqual(rc, 1, msg)
        self.assertIn('msg="cannot write the snapshot: refusing to start"', msg)
        self.assertIn("snapshot %s: %s" % (snap, why), msg)
        self.assertNotIn("listening", msg)
        self.assertEqual(sorted(os.listdir(self.dir)), before, "nothing was left behind")
        return msg

    def test_missing_directory(self):
        snap = os.path.join(self.dir, "no", "such", "state.snap")
        self.refused(snap, "its directory %s/no/such: No such file or directory" % self.dir)

    def test_file_where_the_directory_should_be(self):
        with open(os.path.join(self.dir, "file"), "w"):
            pass
        snap = os.path.join(self.dir, "file", "state.snap")
        self.refused(snap, "its directory %s/file: Not a directory" % self.dir)

    def test_read_only_directory(self):
        """Mode 0555.  Root writes through mode bits, so when the test runs as
        root sluiced runs as nobody (65534): the check is a real write, and
        what forbids it (mode bits here, a read-only mount elsewhere) is
        what the server sees."""
        ro = os.path.join(self.dir, "ro")
        os.mkdir(ro)
        os.chmod(ro, 0o555)
        user = 65534 if os.geteuid() == 0 else None
        snap = os.path.join(ro, "state.snap")
        self.refused(snap, "cannot create a file in %s: Permission denied" % ro, user=user)
        self.assertEqual(os.listdir(ro), [])

    def test_symlinked_snapshot_stays_a_link(self):
        """The snapshot path is a link (as a deployment may point a fixed path
        at a volume): saves go through it to the target, the link stays a
        link, and a restart reloads the target's state."""
        real = os.path.join(self.dir, "volume")
        os.mkdir(real)
        link = os.path.join(self.dir, "state.snap")
        os.symlink("volume/data.snap", link)  # the target does not exist yet
        s = Server("--snapshot", link, name="symlinked", trust_client_time=True)
        s.start()
        self.addCleanup(s.kill)
        with s.raw() as c:
            for _ in range(3):
                c.cmd("RL.ALLOW", "linked", 3, "1h", *FW, "AT", BASE)
        assert_clean_stop(s)
        self.assertTrue(os.path.islink(link), "the link was replaced by a file")
        self.assertEqual(os.readlink(link), "volume/data.snap")
        self.assertEqual(os.listdir(real), ["data.snap"], "written beside the target, no .tmp left")
        first = os.path.getmtime(os.path.join(real, "data.snap"))
        s2 = Server("--snapshot", link, name="symlinked-2", trust_client_time=True)
        s2.start()
        self.addCleanup(s2.kill)
        self.assertEqual(s2.info_int("keys_loaded_at_start", "persistence"), 1)
        with s2.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "linked", 3, "1h", *FW, "AT", BASE + 1000),
                             [0, 3, 0, 3599000, 3599000, 0], "the state came back through the link")
        assert_clean_stop(s2)
        self.assertTrue(os.path.islink(link))
        self.assertGreaterEqual(os.path.getmtime(os.path.join(real, "data.snap")), first)
        self.assertEqual(sorted(os.listdir(self.dir)), ["state.snap", "volume"])


class TestSnapshotOff(ServerTestCase):
    TRUST = False

    def test_persistence_section_without_snapshot(self):
        info = self.srv.info("persistence")
        self.assertEqual(info["snapshot_file"], "")
        self.assertEqual(info["snapshots_written"], "0")
        self.assertIn("snapshot off", self.srv.log())
