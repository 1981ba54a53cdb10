"""Configuration as a user meets it: --config FILE means the same as the
flags, flags override the file, bad lines name file:line and the token,
--help lists every option, and a port in use is a clear error."""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import unittest

from harness import ROOT, SLOW, SLUICED, Server, assert_clean_stop, free_port, nothing_listening

COMPARED = ("maxclients", "max_command_bytes", "max_output_bytes", "idle_timeout_ms",
            "trust_client_time", "threads", "maxmemory", "snapshot_interval_ms")


class TestConfig(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-conf-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, *args):
        s = Server(*args, name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.kill)
        return s

    def run_sluiced(self, *args):
        p = subprocess.run([SLUICED] + list(args), capture_output=True, timeout=30 * SLOW,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def settings(self, srv):
        info = srv.info("everything")
        return {k: info[k] for k in COMPARED}

    def test_file_equals_flags(self):
        conf = self.write("sluiced.conf", """\
# sluiced test configuration
max-clients 7
   max-command   8kb
max-output 2mb
idle-timeout 5m

threads 1
max-memory 3mb
trust-client-time yes
snapshot-interval 90s
""")
        by_file = self.start("--config", conf)
        by_flags = self.start("--max-clients", "7", "--max-command", "8kb", "--max-output", "2mb",
                              "--idle-timeout", "5m", "--threads", "1", "--max-memory", "3mb",
                              "--trust-client-time", "--snapshot-interval", "90s")
        want = {"maxclients": "7", "max_command_bytes": "8192", "max_output_bytes": "2097152",
                "idle_timeout_ms": "300000", "trust_client_time": "yes", "threads": "1",
                "maxmemory": "3145728", "snapshot_interval_ms": "90000"}
        self.assertEqual(self.settings(by_file), want)
        self.assertEqual(self.settings(by_flags), want)
        self.assertEqual(by_file.info("server")["config_file"], conf)
        assert_clean_stop(by_file)
        assert_clean_stop(by_flags)

    def test_flags_override_file(self):
        conf = self.write("a.conf", "max-clients 7\nidle-timeout 5m\n")
        s = self.start("--max-clients", "9", "--config", conf)
        got = self.settings(s)
        self.assertEqual(got["maxclients"], "9")
        self.assertEqual(got["idle_timeout_ms"], "300000")
        assert_clean_stop(s)

    def test_bad_lines_name_file_line_and_token(self):
        cases = [
            ("prot 6390\n", 1, "'prot'"),
            ("# ok\nmax-clients 7\nmax-clients lots\n", 3, "'lots'"),
            ("idle-timeout 30\n", 1, "'30'"),
            ("\n\nmax-memory 12zb\n", 3, "'12zb'"),
            ("bind 999.1.1.1\n", 1, "'999.1.1.1'"),
            ("config other.conf\n", 1, "config"),
            ("trust-client-time maybe\n", 1, "'maybe'"),
            ("port 70000\n", 1, "'70000'"),
        ]
        for text, line, token in cases:
            conf = self.write("bad.conf", text)
            port = free_port()
            rc, out, err = self.run_sluiced("--config", conf, "--port", str(port))
            self.assertEqual(rc, 2, (text, out, err))
            self.assertIn("%s:%d:" % (conf, line), err, text)
            self.assertIn(token, err, text)
            self.assertTrue(nothing_listening(port))
        rc, out, err = self.run_sluiced("--config", os.path.join(self.dir, "missing.conf"))
        self.assertNotEqual(rc, 0)
        self.assertIn("missing.conf", err)

    def test_bad_flags(self):
        for args, token in ((["--prot", "1"], "'--prot'"), (["--port", "x"], "'x'"),
                            (["--max-clients", "0"], "'0'"), (["--idle-timeout", "10"], "unit"),
                            (["--port"], "--port needs a value"), (["stray"], "'stray'")):
            rc, out, err = self.run_sluiced(*args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(token, err, args)
            self.assertIn("sluiced --help", err, "points to --help")

    def test_help_lists_every_option(self):
        rc, out, err = self.run_sluiced("--help")
        self.assertEqual(rc, 0)
        for opt in ("--port", "--bind", "--threads", "--max-memory", "--max-clients",
                    "--max-command", "--max-output", "--idle-timeout", "--send-timeout",
                    "--snapshot", "--snapshot-interval", "--trust-client-time", "--config",
                    "--log-level", "--help", "--version"):
            self.assertRegex(out, r"(?m)^\s+%s\b" % re.escape(opt))
        rc, out, err = self.run_sluiced("--version")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^sluiced \d+\.\d+\.\d+")

    def test_docs_cover_every_option(self):
        doc = os.path.join(ROOT, "docs", "sluiced.md")
        if not os.path.exists(doc):
            self.skipTest("docs/sluiced.md not written yet")
        text = open(doc).read()
        rc, out, _ = self.run_sluiced("--help")
        for opt in re.findall(r"(?m)^\s+(--[a-z-]+)", out):
            self.assertIn(opt, text, "docs/sluiced.md documents %s" % opt)

    def test_port_in_use(self):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        try:
            rc, out, err = self.run_sluiced("--port", str(port))
        finally:
            holder.close()
        self.assertNotEqual(rc, 0)
        self.assertIn("127.0.0.1:%d" % port, out + err)
        self.assertIn("Address already in use", out + err)

    def test_ipv6_loopback(self):
        try:
            probe = socket.socket(socket.AF_INET6)
            probe.bind(("::1", 0))
            probe.close()
        except OSError:
            self.skipTest("no IPv6 loopback here")
        s = self.start("--bind", "127.0.0.1,::1")
        self.assertIn("addr=[::1]:%d" % s.port, s.log())
        with socket.create_connection(("::1", s.port), timeout=10) as c:
            c.sendall(b"PING\r\n")
            self.assertEqual(c.recv(100), b"+PONG\r\n")
        assert_clean_stop(s)
