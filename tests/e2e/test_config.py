"""Configuration as a user meets it: --config FILE means the same as the
flags, every key docs/sluiced.md lists set in a file and seen in INFO or in
behaviour, flags override the file (a --bind flag the whole bind list),
bad lines name file:line and the token, --log-level debug/info/warn/error
show exactly their records, --help lists every option, and a port in use
is a clear error."""

import os
import re
import socket
import errno
import subprocess
import time

import harness
from harness import (BASE, LOG_DIR, ROOT, SLOW, SLUICED, STARTED, RespError, Server,
                     assert_clean_stop, deadline, encode, free_port, nothing_listening, run_checked)

COMPARED = ("maxclients", "max_command_bytes", "max_output_bytes", "idle_timeout_ms",
            "trust_client_time", "threads", "maxmemory", "snapshot_interval_ms")


def listening_ports(pid):
    """The TCP ports process pid listens on (its sockets matched against
    /proc/net/tcp{,6}): how to find a server whose log does not say."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            m = re.match(r"socket:\[(\d+)\]$", os.readlink(os.path.join(fd_dir, fd)))
        except OSError:
            continue
        if m:
            inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            if col[3] == "0A" and col[9] in inodes:  # LISTEN
                ports.add(int(col[1].rsplit(":", 1)[1], 16))
    return ports


class BareServer(Server):
    """A sluiced started with exactly its arguments (no --port 0 added, so a
    config file's `port` holds), found through /proc rather than its
    "listening" line (absent at --log-level warn), and PINGed at host."""

    host = "127.0.0.1"

    def start(self, timeout=15):
        n = len(STARTED)
        self.log_path = os.path.join(LOG_DIR, "%03d-%s.log" % (n, re.sub(r"[^\w.-]", "_", self.name)))
        argv = [SLUICED, "--http-port", "0", "--grpc-port", "0"] + self.args  # HTTP: test_http.py
        with open(self.log_path, "wb") as log:
            log.write(("# " + " ".join(argv) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=LOG_DIR)
        STARTED.append(self)
        until = deadline(timeout)
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                raise AssertionError("sluiced exited with status %s at start:\n%s"
                                     % (self.proc.returncode, self.log()))
            ports = listening_ports(self.pid)
            if ports:
                self.port = min(ports)
                try:
                    if ping(self.host, self.port) == b"+PONG\r\n":
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise AssertionError("sluiced did not answer PING:\n%s" % self.log())


def ping(host, port):
    with socket.create_connection((host, port), timeout=10 * SLOW) as c:
        c.sendall(b"PING\r\n")
        return c.recv(100)


def hold_the_one_client(srv):
    """A connection that PINGs through --max-clients 1: retried (bounded)
    until the server has closed the previous client (its start probe)."""
    until = deadline(10)
    while True:
        c = srv.raw()
        if c.cmd("PING") == b"PONG":
            return c
        c.close()
        if time.monotonic() > until:
            raise AssertionError("max-clients 1: no client ever admitted")
        time.sleep(0.05)


def levels(log):
    """The levels of the log's records, with how many of each."""
    out = {}
    for lv in re.findall(r"(?m)^ts=\S+ level=(\w+) ", log):
        out[lv] = out.get(lv, 0) + 1
    return out


class TestConfig(harness.ScratchDirCase):
    SCRATCH_PREFIX = "sluice-conf-"

    def start(self, *args):
        s = Server(*args, name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.kill)
        return s

    def run_sluiced(self, *args):
        p = run_checked([SLUICED] + list(args), capture_output=True, timeout=30 * SLOW,
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
        with open(doc) as f:  # missing: a failure
            text = f.read()
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

    def wait_log(self, srv, text, timeout=10):
        until = deadline(timeout)
        while time.monotonic() < until:
            if text in srv.log():
                return
            time.sleep(0.02)
        self.fail("%r never logged:\n%s" % (text, srv.log()[-3000:]))

    def start_bare(self, *args, host="127.0.0.1"):
        s = BareServer(*args, name=self.id().split(".")[-1])
        s.host = host
        s.start()
        self.addCleanup(s.kill)
        return s

    def test_file_sets_port_bind_and_log_level(self):
        """`port`, `bind` (two addresses on one line) and `log-level debug`
        from the file alone, with no flag beside --config."""
        port = free_port()
        conf = self.write("net.conf", "port %d\nbind 127.0.0.1 127.0.0.2\nlog-level debug\n"
                          % port)
        s = self.start_bare("--config", conf)
        self.assertEqual(s.port, port)
        self.assertEqual(s.info_int("tcp_port", "server"), port)
        self.assertEqual(listening_ports(s.pid), {port})
        self.assertEqual(ping("127.0.0.2", port), b"+PONG\r\n")
        log = s.log()
        self.assertIn("addr=127.0.0.1:%d" % port, log)
        self.assertIn("addr=127.0.0.2:%d" % port, log)
        self.wait_log(s, 'level=debug msg="client connected"')
        self.wait_log(s, 'level=debug msg="client closed"')
        assert_clean_stop(s)

    def test_bind_flag_replaces_the_files_list(self):
        conf = self.write("bind.conf", "bind 127.0.0.2\n")
        s = self.start("--config", conf, "--bind", "127.0.0.1")
        self.assertNotIn("127.0.0.2", s.log())
        self.assertTrue(nothing_listening_at("127.0.0.2", s.port))
        assert_clean_stop(s)
        # and without the flag, the file's address alone
        s2 = self.start_bare("--config", conf, "--port", "0", host="127.0.0.2")
        self.assertEqual(ping("127.0.0.2", s2.port), b"+PONG\r\n")
        self.assertTrue(nothing_listening(s2.port), "127.0.0.1 is not in the file's list")
        s2.proc.terminate()
        self.assertEqual(s2.proc.wait(30 * SLOW), 0)

    def test_file_sets_snapshot_rules_capacity_watch(self):
        """`snapshot` (a quoted path with a space), `snapshot-interval`,
        `rules`, `watch-rules`, `capacity`, a bare boolean
        (`trust-client-time` alone means yes) and `threads`, from a file."""
        os.mkdir(os.path.join(self.dir, "with space"))
        snap = os.path.join(self.dir, "with space", "state.snap")
        rules = self.write("api.yaml", "domain: api\ndescriptors:\n  - key: user\n"
                           "    rate_limit: {unit: minute, requests_per_unit: 2, name: u}\n")
        conf = self.write("state.conf", """\
snapshot "%s"
snapshot-interval 100ms
rules %s
watch-rules no
capacity 6/1m
trust-client-time
max-client-skew 7d
threads 2
""" % (snap, rules))
        s = self.start("--config", conf)
        info = s.info("everything")
        self.assertEqual(info["snapshot_file"], snap)
        self.assertEqual(info["snapshot_interval_ms"], "100")
        self.assertEqual(info["rules_path"], rules)
        self.assertEqual(info["rules_watch"], "off")
        self.assertEqual(info["rules_capacity"], "6/1m")
        self.assertEqual(info["trust_client_time"], "yes")
        self.assertEqual(info["max_client_skew_ms"], str(7 * 86400000))
        self.assertEqual(info["threads"], "2")
        with s.raw() as c:
            r = c.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "user", "ann")
            self.assertEqual(r[6][:4], [b"OK", b"u", 2, 1])
            self.assertEqual(c.cmd("RL.ALLOW", "k", 5, "1h", "AT", BASE)[:3], [1, 5, 4])
        # saved every 100 ms: two periodic snapshots, the file in place
        s.wait_info("snapshots_written", lambda v: v >= 2, "persistence")
        self.assertTrue(os.path.getsize(snap) > 0)
        keys = s.info_int("keys", "memory")
        self.assertGreaterEqual(keys, 2)
        assert_clean_stop(s)
        s2 = self.start("--config", conf)
        self.assertEqual(s2.info_int("keys_loaded_at_start", "persistence"), keys)
        with s2.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "k", 5, "1h", "AT", BASE)[:3], [1, 5, 3])
        assert_clean_stop(s2)

    def test_file_sets_send_timeout(self):
        """`send-timeout 300ms`: a client that pipelines and never reads is
        cut after it (well before the 60 s default), for that reason."""
        conf = self.write("send.conf", "send-timeout 300ms\nmax-output 64mb\nlog-level debug\n")
        s = self.start("--config", conf)
        self.assertIn("send_timeout=300ms", s.log())
        view = memoryview(encode("RL.ALLOW", "flood", 10 ** 9, "1h") * 1000)
        off = 0
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.setblocking(False)
        until = time.monotonic() + 30  # not scaled: must stay below the default 60 s
        closed = False
        try:
            while time.monotonic() < until and not closed:
                try:  # whole commands, however the kernel splits the writes
                    off = (off + sock.send(view[off:])) % len(view)
                    continue
                except BlockingIOError:
                    pass
                except OSError as e:
                    if e.errno not in (errno.EPIPE, errno.ECONNRESET):
                        raise
                    closed = True
                if s.info_int("clients_cut_output", "stats") > 0:
                    closed = True
                time.sleep(0.02)
        finally:
            sock.close()
        self.assertTrue(closed, "the client was not cut within 30 s")
        self.assertEqual(s.wait_info("clients_cut_output", lambda v: v >= 1, "stats"), 1)
        self.wait_log(s, "reason=send-timeout")
        assert_clean_stop(s)

    def test_log_level_info_hides_debug(self):
        s = self.start()
        with s.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
        s.wait_info("connected_clients", lambda v: v == 1, "clients")
        assert_clean_stop(s)
        log = s.log()
        self.assertIn('level=info msg="bye"', log)
        self.assertNotIn("level=debug", log)
        self.assertNotIn("client connected", log)

    def test_log_level_warn_hides_info(self):
        """At warn: the max-clients refusal is logged, no info record is
        (not even "listening", "ready" or "bye")."""
        s = self.start_bare("--port", "0", "--log-level", "warn", "--max-clients", "1")
        self.assertIsNone(re.search(r"msg=\"?listening", s.log()))
        with hold_the_one_client(s):
            with s.raw() as extra:
                self.assertEqual(extra.read_until_eof(),
                                 [RespError("ERR max number of clients reached")])
            self.wait_log(s, 'level=warn msg="max-clients reached')
        s.proc.terminate()
        self.assertEqual(s.proc.wait(30 * SLOW), 0)
        lv = levels(s.log())
        self.assertEqual(set(lv), {"warn"}, s.log())

    def test_log_level_error_hides_warn(self):
        """At error (set in the file): a failing snapshot save is logged;
        the max-clients warning and every info record are not.  (The
        snapshot's folder exists at start, which checks it, and is moved
        away after.)"""
        os.mkdir(os.path.join(self.dir, "gone"))
        conf = self.write("err.conf", "log-level error\nmax-clients 1\nsnapshot %s\n"
                          "snapshot-interval 100ms\n"
                          % os.path.join(self.dir, "gone", "x.snap"))
        s = self.start_bare("--port", "0", "--config", conf)
        os.rename(os.path.join(self.dir, "gone"), os.path.join(self.dir, "moved"))  # atomic
        with hold_the_one_client(s):
            with s.raw() as extra:
                self.assertEqual(extra.read_until_eof(),
                                 [RespError("ERR max number of clients reached")])
            self.wait_log(s, 'level=error msg="snapshot save failed"')
        s.proc.terminate()
        self.assertEqual(s.proc.wait(30 * SLOW), 1, "the final save failed too")
        self.assertEqual(set(levels(s.log())), {"error"}, s.log())

    def test_bad_rules_at_start_say_so_once_and_a_reload_keeps_the_old(self):
        # at start there are no old rules: one line, that sluiced does not
        # start, naming FILE:LINE:COLUMN
        bad = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: x}\n"
        rules = self.write("rules.yaml", bad)
        port = free_port()
        rc, out, err = self.run_sluiced("--port", str(port), "--http-port", "0", "--grpc-port", "0",
                                        "--rules", rules)
        self.assertEqual(rc, 1, err)
        self.assertTrue(nothing_listening(port))
        self.assertEqual(re.findall(r"(?m)^ts=\S+ (level=(?:warn|error) .*)$", err), [
            'level=error msg="cannot load the rules: refusing to start" path=%s err="%s:4:51: '
            'requests_per_unit must be a whole number from 0 to 1000000000000, not \'x\'"'
            % (rules, rules)], err)
        # a reload: today's message, the old rules keep serving
        self.write("rules.yaml", bad.replace(": x}", ": 1}"))
        s = self.start("--rules", rules, "--watch-rules", "no")  # only the RELOAD below
        self.write("rules.yaml", bad)
        with s.raw() as c:
            r = c.cmd("RL.RULES", "RELOAD")
        self.assertEqual(r, RespError("ERR rules not reloaded, version 1 keeps serving: %s:4:51: "
                                      "requests_per_unit must be a whole number from 0 to "
                                      "1000000000000, not 'x'" % rules))
        self.assertIn('level=error msg="rules not reloaded: the old rules keep serving" '
                      'why="RL.RULES RELOAD" path=%s version=1 err="%s:4:51: ' % (rules, rules),
                      s.log())

    def test_help_says_backend_port_is_optional(self):
        rc, out, err = self.run_sluiced("--help")
        self.assertEqual(rc, 0, err)
        text = " ".join(out.split())
        self.assertIn("redis://[user:password@]host[:port][/db]", text)
        self.assertIn("redis-cluster://[user:password@]host[:port][,host[:port]...]", text)
        self.assertIn("(no :port: 6379; docs/fleet.md)", text)


def nothing_listening_at(host, port):
    c = socket.socket()
    c.settimeout(2)
    try:
        c.connect((host, port))
        return False
    except OSError:
        return True
    finally:
        c.close()
