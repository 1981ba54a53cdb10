"""The decision journal (--journal, --journal-fsync) and --after-crash
(docs/durability.md, SPEC section 11), against a sluiced killed with -9:

- with --journal-fsync always, every allowed answer a client received is
  remembered after kill -9 and a restart: the next request over the same
  keys sees exactly the allowed ones (RL.ALLOW: fixed window, sliding
  window, token bucket; RL.CHECK);
- with everysec, kill -9 forgets nothing either (the records reach the
  kernel before the replies leave: one write per loop turn, the turn's
  replies held for it), also with many clients and a reply stream larger
  than a socket takes;
- --after-crash deny-window without a journal: after kill -9, a key the
  snapshot does not hold is denied right after the start, as a full
  counter, and allowed again once its window has passed; a clean stop
  leaves no marker, so the next start denies nothing;
- the options' refusals: --journal without --snapshot."""

import os
import shutil
import tempfile
import threading
import time
import unittest

from harness import (BASE, SLOW, Server, assert_clean_stop, deadline, encode, run_checked, SLUICED,
                     wait_window_room)

RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 40}
"""


class JournalCase(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-journal-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.snap = os.path.join(self.dir, "state.snap")
        self.journal = os.path.join(self.dir, "decisions.journal")

    def server(self, *args, **kw):
        s = Server("--snapshot", self.snap, *args, name=self.id().split(".")[-1], **kw)
        s.start()
        self.addCleanup(s.kill)
        return s

    def pipeline(self, s, cmds):
        """Sends every command at once, returns the replies."""
        with s.raw(timeout=60) as c:
            c.send(b"".join(encode(*cmd) for cmd in cmds))
            return c.read_replies(len(cmds), timeout=60)


class TestAlways(JournalCase):

    def test_kill9_forgets_no_allowed_answer(self):
        args = ("--journal", self.journal, "--journal-fsync", "always", "--threads", "2")
        s = self.server(*args, trust_client_time=True)
        sent = {}
        cmds = []
        for algo in ("fixed-window", "sliding-window", "token-bucket"):
            # one key over its limit, one below it, interleaved
            for i in range(60):
                cmds.append(("RL.ALLOW", "over-" + algo, 50, "1d", "ALGO", algo, "AT", BASE))
                if i < 23:
                    cmds.append(("RL.ALLOW", "under-" + algo, 50, "1d", "ALGO", algo, "AT", BASE))
        replies = self.pipeline(s, cmds)
        for cmd, r in zip(cmds, replies):
            sent[cmd[1]] = sent.get(cmd[1], 0) + r[0]
        self.assertEqual({k: v for k, v in sent.items() if k.startswith("over")},
                         {"over-fixed-window": 50, "over-sliding-window": 50,
                          "over-token-bucket": 50})
        s.kill()
        self.assertEqual(s.returncode, -9)

        s2 = self.server(*args, trust_client_time=True)
        self.assertIn("journal replayed", s2.log())
        info = s2.info("persistence")
        self.assertEqual((info["journal_file"], info["journal_fsync"], info["after_crash"],
                          info["last_stop_unclean"]), (self.journal, "always", "trust", "1"))
        # one record per decision (a denied one records its key as it stands)
        self.assertEqual(int(info["journal_records_replayed"]), 60 * 3 + 23 * 3)
        self.assertEqual(info["journal_bytes_written"], "0")
        with s2.raw() as c:
            for algo in ("fixed-window", "sliding-window", "token-bucket"):
                r = c.cmd("RL.ALLOW", "over-" + algo, 50, "1d", "ALGO", algo, "AT", BASE)
                self.assertEqual(r[:3], [0, 50, 0], algo)
                r = c.cmd("RL.ALLOW", "under-" + algo, 50, "1d", "ALGO", algo, "AT", BASE)
                # 23 remembered, this one the 24th
                self.assertEqual(r[:3], [1, 50, 50 - 24], algo)
        info = s2.info("persistence")
        self.assertGreater(int(info["journal_bytes_written"]), 0)
        self.assertGreater(int(info["journal_fsyncs"]), 0)
        assert_clean_stop(s2)

    def test_kill9_rl_check(self):
        rules = os.path.join(self.dir, "api.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        args = ("--journal", self.journal, "--journal-fsync", "always", "--rules", rules)
        # 40 a day at the server's clock: the 25 checks, the kill, the
        # restart and the 26th within one day, or it starts from 40 again
        wait_window_room(86400, 15)
        s = self.server(*args)
        cmds = [("RL.CHECK", "api", "DESCRIPTOR", "user", "bob")] * 25
        allowed = sum(r[0] for r in self.pipeline(s, cmds))
        self.assertEqual(allowed, 25)
        s.kill()
        s2 = self.server(*args)
        with s2.raw() as c:
            r = c.cmd("RL.CHECK", "api", "DESCRIPTOR", "user", "bob")
        self.assertEqual(r[:3], [1, 40, 40 - 26])
        assert_clean_stop(s2)


class TestEverysec(JournalCase):

    def test_kill9_loss_is_measured(self):
        args = ("--journal", self.journal, "--journal-fsync", "everysec")
        s = self.server(*args, trust_client_time=True)
        allowed = 0
        for burst in range(20):
            cmds = [("RL.ALLOW", "k%d" % k, 1000, "1d", "AT", BASE) for k in range(50)]
            allowed += sum(r[0] for r in self.pipeline(s, cmds))
        s.kill()
        s2 = self.server(*args, trust_client_time=True)
        cmds = [("RL.PEEK", "k%d" % k, 1000, "1d", "AT", BASE) for k in range(50)]
        # RL.PEEK answers as RL.ALLOW would: remaining after one more
        remembered = sum(1000 - 1 - r[2] for r in self.pipeline(s2, cmds))
        # the records reached the kernel before the replies left: a killed
        # process forgets none of them (a machine crash could)
        self.assertEqual(remembered, allowed)
        assert_clean_stop(s2)

    def test_replies_wait_for_the_turns_write(self):
        """Many clients at once, one of them with more replies than its
        socket takes (the rest sent as it reads): the replies of a turn
        wait for its one journal write, and every allowed answer is
        remembered after kill -9."""
        args = ("--journal", self.journal, "--journal-fsync", "everysec", "--threads", "2")
        s = self.server(*args, trust_client_time=True)
        conns = [s.raw(timeout=60) for _ in range(6)]
        per = 400
        for i, c in enumerate(conns):
            c.send(b"".join(encode("RL.ALLOW", "c%d" % (n % 7), 100000, "1d", "AT", BASE)
                            for n in range(per * (i + 1))))
        big = s.raw(timeout=60)
        nbig = 20000
        wire = b"".join(encode("RL.ALLOW", "big%d" % (n % 5), 100000, "1d", "AT", BASE)
                        for n in range(nbig))
        sender = threading.Thread(target=big.send, args=(wire,))
        sender.start()
        replies = big.read_replies(nbig, timeout=120)
        sender.join(60)
        allowed = {}
        for n, r in enumerate(replies):
            allowed["big%d" % (n % 5)] = allowed.get("big%d" % (n % 5), 0) + r[0]
        for i, c in enumerate(conns):
            for n, r in enumerate(c.read_replies(per * (i + 1), timeout=60)):
                allowed["c%d" % (n % 7)] = allowed.get("c%d" % (n % 7), 0) + r[0]
        for c in conns + [big]:
            c.close()
        self.assertEqual(sum(allowed.values()), nbig + per * 21)
        s.kill()
        s2 = self.server(*args, trust_client_time=True)
        keys = sorted(allowed)
        peeks = self.pipeline(s2, [("RL.PEEK", k, 100000, "1d", "AT", BASE) for k in keys])
        self.assertEqual({k: 100000 - 1 - r[2] for k, r in zip(keys, peeks)}, allowed)
        assert_clean_stop(s2)


class TestAfterCrash(JournalCase):

    def test_deny_window_after_kill9(self):
        args = ("--after-crash", "deny-window")
        marker = self.snap + ".running"
        s1 = self.server(*args)
        with s1.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "known", 5, "2s")[:3], [1, 5, 4])
        self.assertTrue(os.path.exists(marker))
        s1.stop()
        assert_clean_stop(s1)
        self.assertFalse(os.path.exists(marker), "a clean stop removes the marker")

        s2 = self.server(*args)
        self.assertNotIn("the last stop was unclean", s2.log())
        with s2.raw() as c:
            # a clean stop before: an unknown key is a fresh one
            self.assertEqual(c.cmd("RL.ALLOW", "fresh", 5, "2s")[:3], [1, 5, 4])
        s2.kill()

        s3 = self.server(*args)
        self.assertIn("keys the snapshot does not hold are denied", s3.log())
        with s3.raw() as c:
            # RL.PEEK says what RL.ALLOW would: a full counter
            self.assertEqual(c.cmd("RL.PEEK", "new", 5, "2s")[:3], [0, 5, 0])
            r = c.cmd("RL.ALLOW", "new", 5, "2s")
            self.assertEqual(r[:3], [0, 5, 0])
            self.assertTrue(0 < r[3] <= 2000 and r[3] == r[4], r)
            r = c.cmd("RL.ALLOW", "fresh", 5, "2s")  # decided by s2, then forgotten
            self.assertEqual(r[:3], [0, 5, 0])
            # the snapshot's key is decided as usual
            self.assertEqual(c.cmd("RL.ALLOW", "known", 5, "1h")[0], 1)
            # a long window stays denied; the 2 s one passes, eventually
            self.assertEqual(c.cmd("RL.ALLOW", "long", 5, "1h")[:3], [0, 5, 0])
            end = deadline(30)
            while True:
                r = c.cmd("RL.ALLOW", "new", 5, "2s")
                if r[0] == 1 or time.monotonic() > end:
                    break
                time.sleep(0.2)
            self.assertEqual(r[:3], [1, 5, 4], "allowed once the window has passed")
        assert_clean_stop(s3)


class TestRefusals(unittest.TestCase):

    def test_journal_needs_snapshot(self):
        r = run_checked([SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0",
                         "--journal", "/tmp/never-written.journal"], timeout=30 * SLOW, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--journal needs --snapshot", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
