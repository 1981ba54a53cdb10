"""Every command through the stock `redis-cli`: one-shot, commands on
standard input (the spec's vectors), and the interactive prompt on a pty."""

import os
import pty
import select
import shutil
import subprocess
import time

from harness import BASE, SLOW, ServerTestCase, deadline, load_vectors

REDIS_CLI = shutil.which("redis-cli")


class TestRedisCli(ServerTestCase):

    @classmethod
    def setUpClass(cls):
        if REDIS_CLI is None:
            raise AssertionError("redis-cli is not installed (scripts/deps.sh installs redis-tools)")
        super().setUpClass()

    def cli(self, *args, stdin=None):
        """redis-cli's standard output (non-tty: raw replies, one per line)."""
        p = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.srv.port)]
                           + [str(a) for a in args],
                           input=stdin, capture_output=True, timeout=30 * SLOW)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.decode()

    def test_every_command(self):
        t = BASE
        self.assertEqual(self.cli("RL.ALLOW", "user:42", 5, "10s", "AT", t), "1\n5\n4\n0\n2000\n0\n")
        self.assertEqual(self.cli("RL.PEEK", "user:42", 5, "10s", "AT", t), "1\n5\n3\n0\n4000\n0\n")
        self.assertEqual(self.cli("RL.ALLOW", "user:42", 5, "10s", "ALGO", "fixed-window",
                                  "COST", 5, "AT", t), "1\n5\n0\n0\n10000\n0\n")
        self.assertEqual(self.cli("RL.ALLOW", "user:42", 5, "10s", "ALGO", "fixed-window",
                                  "AT", t), "0\n5\n0\n10000\n10000\n0\n")
        self.assertEqual(self.cli("RL.RESET", "user:42", "ALGO", "fixed-window"), "1\n")
        self.assertEqual(self.cli("RL.RESET", "user:42"), "1\n")
        self.assertEqual(self.cli("RL.RESET", "user:42"), "0\n")
        self.assertEqual(self.cli("PING"), "PONG\n")
        self.assertEqual(self.cli("PING", "hello there"), "hello there\n")
        self.assertEqual(self.cli("ECHO", "a b c"), "a b c\n")
        self.assertEqual(self.cli("QUIT"), "OK\n")
        info = self.cli("INFO")
        for sec in ("# Server", "# Clients", "# Stats", "# Memory", "# Persistence"):
            self.assertIn(sec, info)
        self.assertIn("tcp_port:%d" % self.srv.port, self.cli("INFO", "server"))
        with self.srv.raw() as c:
            self.assertEqual(self.cli("COMMAND", "COUNT"), "%d\n" % len(c.cmd("COMMAND")))
        self.assertIn("rl.allow", self.cli("COMMAND"))
        hello = self.cli("HELLO", "2").split("\n")
        self.assertEqual(hello[hello.index("proto") + 1], "2")
        self.assertEqual(self.cli("HELLO", "4"), "NOPROTO unsupported protocol version\n\n")
        # redis-cli -3 says HELLO 3 first: the decision reads the same in RESP3
        self.assertEqual(self.cli("-3", "RL.ALLOW", "cli3", 5, "10s", "AT", t),
                         "1\n5\n4\n0\n2000\n0\n")
        hello = self.cli("-3", "HELLO").split("\n")
        self.assertEqual(hello[2:3], ["proto 3"])
        self.assertEqual(self.cli("-3", "CONFIG", "GET", "save"), "save \n")
        self.assertEqual(self.cli("RL.ALLOW", "k", 5, 1000, "ALGO", "tokenbucket").strip(),
                         "ERR unknown algorithm 'tokenbucket'")
        self.assertEqual(self.cli("RL.ALLOW", "k", 0, 1000).strip(),
                         "ERR limit must be an integer between 1 and 1000000000000")

    def test_vectors_on_stdin(self):
        """All spec vectors typed into one redis-cli as commands on stdin."""
        lines, want = [], []
        for name, (limit, window, opts), rows in load_vectors():
            for t, key, cost, expect in rows:
                cmd = ["RL.ALLOW", "cli:%s:%s" % (name, key), limit, window] + opts
                if cost is not None:
                    cmd += ["COST", str(cost)]
                cmd += ["AT", str(BASE + t)]
                lines.append(" ".join(cmd))
                want += [str(x) for x in expect]
        out = self.cli(stdin=("\n".join(lines) + "\n").encode())
        self.assertEqual(out.split("\n")[:-1], want)

    def test_interactive_prompt(self):
        """redis-cli on a terminal: type RL.ALLOW user:42 5 10s, see the six
        integers, type quit, and redis-cli exits."""
        env = dict(os.environ, TERM="dumb", HOME=self.srv.log_path + ".home")
        os.makedirs(env["HOME"], exist_ok=True)
        pid, fd = pty.fork()
        if pid == 0:  # the child: redis-cli on the pty
            try:
                os.execve(REDIS_CLI, [REDIS_CLI, "-p", str(self.srv.port)], env)
            finally:
                os._exit(127)
        out = b""

        def read_until(pred, seconds):
            nonlocal out
            until = deadline(seconds)
            while not pred(out) and time.monotonic() < until:
                r, _, _ = select.select([fd], [], [], max(0.0, until - time.monotonic()))
                if not r:
                    break
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the child has gone
                    break
                if not chunk:
                    break
                out += chunk
            return pred(out)

        try:
            self.assertTrue(read_until(lambda o: b"> " in o, 10), "no prompt: %r" % out)
            os.write(fd, b"RL.ALLOW user:42 5 10s\r")
            ok = read_until(lambda o: o.count(b"(integer)") >= 6, 10)
            self.assertTrue(ok, "six integers expected: %r" % out)
            text = out.decode("utf-8", "replace").replace("\r", "")
            self.assertRegex(text, r"1\) \(integer\) 1\n\s*2\) \(integer\) 5\n\s*3\) \(integer\) 4\n"
                                   r"\s*4\) \(integer\) 0\n\s*5\) \(integer\) 2000\n\s*6\) \(integer\) 0")
            os.write(fd, b"ping\r")
            self.assertTrue(read_until(lambda o: b"PONG" in o, 10), out)
            os.write(fd, b"quit\r")
            read_until(lambda o: False, 5)  # until EOF/EIO
            until = deadline(10)
            status = None
            while time.monotonic() < until:
                p, status = os.waitpid(pid, os.WNOHANG)
                if p == pid:
                    break
                time.sleep(0.05)
            else:
                self.fail("redis-cli did not exit after quit: %r" % out)
            self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)
            pid = None
        finally:
            if pid is not None:
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                except OSError:
                    pass
            os.close(fd)
