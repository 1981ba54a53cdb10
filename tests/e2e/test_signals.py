"""Signals as docs/sluiced.md promises them: SIGINT (Ctrl-C) stops the
server as gracefully as SIGTERM -- the replies to every command already
sent are flushed, the snapshot is written after them and holds exactly
those decisions, the exit status is 0 -- and SIGPIPE is ignored."""

import os
import shutil
import signal
import socket
import tempfile
import unittest

from harness import BASE, SLOW, Server, assert_clean_stop, encode

FW = ["ALGO", "fixed-window"]
LIMIT = 10 ** 9
N = 2000  # ~140 KB of commands: within SL_NET_STOP_READ (256 KB), all answered


class TestGracefulStop(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-sig-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.snap = os.path.join(self.dir, "state.snap")

    def server(self, *args):
        s = Server(*args, name=self.id().split(".")[-1], trust_client_time=True)
        s.start()
        self.addCleanup(s.kill)
        return s

    def stop_mid_pipeline(self, sig, name):
        """N commands in flight, then sig: every reply arrives, the process
        exits 0 after saving, and the snapshot holds exactly N decisions."""
        s = self.server("--snapshot", self.snap)
        with s.raw() as c:
            c.send(encode("RL.ALLOW", "k", LIMIT, "1h", *FW, "AT", BASE) * N)
            first = c.read_reply()
            self.assertEqual(first, [1, LIMIT, LIMIT - 1, 0, 3600000, 0])
            s.proc.send_signal(sig)
            got = [first] + c.read_until_eof(timeout=30)
        self.assertEqual(len(got), N, "every command sent before the %s was answered" % name)
        for i, g in enumerate(got):
            if g != [1, LIMIT, LIMIT - 1 - i, 0, 3600000, 0]:
                self.fail("reply %d of %d: %r" % (i, N, g))
        self.assertEqual(s.proc.wait(30 * SLOW), 0, s.log()[-2000:])
        log = s.log()
        self.assertIn('msg="shutting down" signal=%s' % name, log)
        self.assertIn('msg="snapshot saved" file=%s reason=shutdown keys=1' % self.snap, log)
        self.assertIn('msg="bye" status=0', log)
        # the order the docs promise: clients closed, then the snapshot
        self.assertLess(log.index('msg="clients closed"'), log.index("reason=shutdown"))
        self.assertEqual(s.sanitizer_reports(), [])
        s2 = self.server("--snapshot", self.snap)
        self.assertEqual(s2.info_int("keys_loaded_at_start", "persistence"), 1)
        with s2.raw() as c:
            left = c.cmd("RL.PEEK", "k", LIMIT, "1h", *FW, "AT", BASE)
        self.assertEqual(left[2], LIMIT - N - 1, "the snapshot holds exactly the %d decisions" % N)
        assert_clean_stop(s2)

    def test_sigint_like_sigterm(self):
        self.stop_mid_pipeline(signal.SIGINT, "INT")

    def test_sigterm(self):
        self.stop_mid_pipeline(signal.SIGTERM, "TERM")

    def test_sigint_without_snapshot(self):
        s = self.server()
        with s.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        s.proc.send_signal(signal.SIGINT)
        self.assertEqual(s.proc.wait(30 * SLOW), 0, s.log()[-2000:])
        log = s.log()
        self.assertIn('msg="shutting down" signal=INT', log)
        self.assertNotIn("snapshot saved", log)
        self.assertIn('msg="bye" status=0', log)
        self.assertEqual(s.sanitizer_reports(), [])

    def test_sigpipe_ignored(self):
        """Replies to a client that reset its connection: the write fails
        with EPIPE/ECONNRESET, no SIGPIPE kills the server."""
        s = self.server()
        big = encode("ECHO", "x" * 60000)
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            c.sendall(big * 20)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)
            c.close()
        s.wait_info("connected_clients", lambda v: v == 1, "clients")
        os.kill(s.pid, signal.SIGPIPE)
        with s.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        self.assertTrue(s.running())
        assert_clean_stop(s)


if __name__ == "__main__":
    unittest.main()
