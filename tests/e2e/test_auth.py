"""Authentication and authorization (docs/sluiced.md, "Authentication";
docs/security.md): AUTH and HELLO 2 AUTH with Redis's replies byte for
byte, through raw RESP, redis-cli (-a, --user/--pass) and redis-py
(password=, username=); every command group allowed and denied with
NOPERM's exact text; file paths shown to admins only; failed logins
limited per address on the server's clock; bad users and password files
refused at start with FILE:LINE; protected mode refusing a bind beyond
loopback before any socket is made, and `--protected-mode no` serving on
0.0.0.0 inside a network namespace of the test's own."""

import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import harness
from harness import (BASE, HOST, SLOW, SLUICED, Map, RawConn, RespError, Server, ServerTestCase,
                     deadline, parse_info, run_checked)

REDIS_CLI = shutil.which("redis-cli")

NOAUTH = RespError("NOAUTH Authentication required.")
NOAUTH_HELLO = RespError(
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO AUTH <user> <pass> option can be used to authenticate the client and select the "
    "RESP protocol version at the same time")
WRONGPASS = RespError("WRONGPASS invalid username-password pair or user is disabled.")
HIDDEN = "(hidden: admin only)"


def noperm(cmd):
    return RespError("NOPERM this user has no permissions to run the '%s' command" % cmd)


PASSWORD = "default-pw"  # the --requirepass-file password (user "default")
# user -> password; grafana's is given to sluiced as its SHA-256
USERS = {"dec": "dec-pw", "grafana": "read-pw", "ops": "admin-pw", "both": "both-pw"}
RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def users_file(d):
    sha = hashlib.sha256(USERS["grafana"].encode()).hexdigest()
    return write(os.path.join(d, "users"), "\n".join([
        "# sluiced users: name, passwords, groups",
        "user dec >%s +deciding" % USERS["dec"],
        "user grafana #%s +reading" % sha,
        "user ops >old-admin-pw >%s +admin" % USERS["ops"],
        "user both >%s +deciding +reading" % USERS["both"],
        "user retired off >retired-pw +all",
        ""]))


def login(c, user, password=None):
    """AUTH over raw connection c; returns the reply."""
    return c.cmd("AUTH", user) if password is None else c.cmd("AUTH", user, password)


class AuthServer(ServerTestCase):
    """One server for the class: a password file, a users file (given in a
    config file: the options' config-file twins), rules, a snapshot."""

    TRUST = False
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-auth-")
        cls.rules = os.path.join(cls.dir, "rules")
        os.mkdir(cls.rules)
        write(os.path.join(cls.rules, "api.yaml"), RULES, 0o644)
        cls.snapshot = os.path.join(cls.dir, "state.snap")
        cls.conf = write(os.path.join(cls.dir, "sluiced.conf"), "\n".join([
            "requirepass-file %s" % write(os.path.join(cls.dir, "password"), PASSWORD + "\n"),
            "users-file %s" % users_file(cls.dir),
            "rules %s" % cls.rules,
            "watch-rules no",
            "snapshot %s" % cls.snapshot,
            "snapshot-interval 0",
            "auth-fail-limit 50/90s",
            ""]))
        cls.SERVER_ARGS = ("--config", cls.conf) + tuple(cls.EXTRA)
        super().setUpClass()


    def conn(self, user=None, password=None):
        """A raw connection, logged in as user when given (asserting +OK)."""
        c = RawConn(self.srv.port)
        self.addCleanup(c.close)
        if user is not None:
            self.assertEqual(login(c, user, password), b"OK")
        return c


class TestLogin(AuthServer):

    def test_nothing_runs_before_auth(self):
        admin = self.conn("default", PASSWORD)
        before = parse_info(admin.cmd("INFO", "everything"))
        c = self.conn()
        for cmd in (["PING"], ["ECHO", "x"], ["INFO"], ["RL.ALLOW", "k", 5, "10s"],
                    ["RL.PEEK", "k", 5, "10s"], ["RL.RESET", "k"], ["RL.RULES"],
                    ["RL.RULES", "RELOAD"], ["RL.CHECK", "api", "DESCRIPTOR", "user", "u"],
                    ["COMMAND"], ["CLIENT", "SETNAME", "x"], ["SELECT", "0"],
                    ["CONFIG", "GET", "save"], ["NOSUCHCOMMAND", "a"]):
            self.assertEqual(c.cmd(*cmd), NOAUTH, cmd)
        self.assertEqual(c.cmd("HELLO"), NOAUTH_HELLO)
        self.assertEqual(c.cmd("HELLO", "2"), NOAUTH_HELLO)
        self.assertEqual(c.cmd("HELLO", "2", "SETNAME", "app"), NOAUTH_HELLO)
        # nothing ran: no decision, no reload
        info = parse_info(admin.cmd("INFO", "everything"))
        for k in ("decisions", "keys", "rules_reloads", "rules_version"):
            self.assertEqual(info[k], before[k], k)
        self.assertEqual(info["auth_required"], "yes")
        # the config file's auth options, as the start-up log reads them
        self.assertIn('msg="authentication on" users=6 fail_limit=50/90000ms', self.srv.log())
        # QUIT needs no login
        q = self.conn()
        self.assertEqual(q.cmd("QUIT"), b"OK")
        self.assertEqual(q.read_until_eof(), [])

    def test_auth_forms(self):
        c = self.conn()
        self.assertEqual(c.cmd("AUTH", "wrong"), WRONGPASS)
        self.assertEqual(c.cmd("PING"), NOAUTH)  # a failure logs nothing in
        self.assertEqual(c.cmd("AUTH", "a", "b", "c"), RespError("ERR syntax error"))
        self.assertEqual(c.cmd("AUTH"),
                         RespError("ERR wrong number of arguments for 'auth' command"))
        self.assertEqual(c.cmd("AUTH", PASSWORD), b"OK")  # AUTH password: user "default"
        self.assertEqual(c.cmd("PING"), b"PONG")
        # a failed AUTH leaves the connection logged in as before
        self.assertEqual(c.cmd("AUTH", "dec", "nope"), WRONGPASS)
        self.assertEqual(c.cmd("RL.RESET", "k"), 0)
        # AUTH user password switches user
        self.assertEqual(c.cmd("AUTH", "dec", USERS["dec"]), b"OK")
        self.assertEqual(c.cmd("RL.RESET", "k"), noperm("rl.reset"))
        for user, pw in (("default", PASSWORD), ("ops", "old-admin-pw"), ("ops", USERS["ops"]),
                         ("grafana", USERS["grafana"])):
            self.assertEqual(self.conn().cmd("AUTH", user, pw), b"OK", user)
        for user, pw in (("retired", "retired-pw"), ("nobody", PASSWORD), ("DEC", USERS["dec"]),
                         ("grafana", hashlib.sha256(USERS["grafana"].encode()).hexdigest())):
            self.assertEqual(self.conn().cmd("AUTH", user, pw), WRONGPASS, user)

    def test_hello_auth(self):
        c = self.conn()
        # an unknown version is NOPROTO, checked before AUTH: nothing logs in
        self.assertEqual(c.cmd("HELLO", "4", "AUTH", "dec", USERS["dec"]),
                         RespError("NOPROTO unsupported protocol version"))
        self.assertEqual(c.cmd("PING"), NOAUTH)
        self.assertEqual(c.cmd("HELLO", "3"), NOAUTH_HELLO)  # RESP3 needs a login too
        self.assertEqual(c.cmd("HELLO", "2", "AUTH", "dec"),
                         RespError("ERR Syntax error in HELLO option 'AUTH'"))
        self.assertEqual(c.cmd("HELLO", "2", "FOO"),
                         RespError("ERR Syntax error in HELLO option 'FOO'"))
        self.assertEqual(c.cmd("HELLO", "2", "AUTH", "dec", "nope"), WRONGPASS)
        self.assertEqual(c.cmd("PING"), NOAUTH)
        h = c.cmd("HELLO", "2", "AUTH", "dec", USERS["dec"], "SETNAME", "checkout")
        self.assertEqual(h[:6], [b"server", b"sluiced", b"version", h[3], b"proto", 2])
        self.assertEqual(c.cmd("RL.ALLOW", "hello:k", 5, "10s")[:3], [1, 5, 4])
        self.assertEqual(c.cmd("HELLO", "2"), h)  # logged in: HELLO alone works
        # HELLO 3 AUTH: logs in (as another user) and switches to RESP3 at once
        h3 = c.cmd("HELLO", "3", "AUTH", "grafana", USERS["grafana"])
        self.assertIsInstance(h3, Map)
        self.assertEqual(list(h3.items())[:3], [(b"server", b"sluiced"), (b"version", h[3]),
                                                (b"proto", 3)])
        self.assertEqual(c.cmd("RL.ALLOW", "hello:k", 5, "10s"), noperm("rl.allow"))
        self.assertEqual(c.cmd("CLIENT", "GETNAME"), b"checkout")  # the name stays
        # a wrong password in HELLO 3 changes neither the user nor the protocol
        self.assertEqual(c.cmd("HELLO", "2", "AUTH", "dec", "nope"), WRONGPASS)
        self.assertIsInstance(c.cmd("CONFIG", "GET", "save"), Map)
        self.assertEqual(c.cmd("RL.PEEK", "hello:k", 5, "10s")[:3], [1, 5, 3])

    def test_redis_cli(self):
        # a dependency (scripts/deps.sh installs it): missing is a failure
        self.assertIsNotNone(REDIS_CLI, "redis-cli not found (scripts/deps.sh installs it)")

        def cli(*args):
            """redis-cli's standard output and error (an error reply is
            printed on standard output, followed by an empty line)."""
            p = subprocess.run([REDIS_CLI, "-h", HOST, "-p", str(self.srv.port),
                                "--no-auth-warning"] + [str(a) for a in args],
                               capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout.decode(), p.stderr.decode()
        dec = ("--user", "dec", "--pass", USERS["dec"])
        # allowed, limit, remaining, retry (reset_after moves with the clock)
        self.assertTrue(cli("-a", PASSWORD, "RL.ALLOW", "cli:a", 5, "10s")[0].startswith(
            "1\n5\n4\n0\n"))
        self.assertTrue(cli(*dec, "RL.ALLOW", "cli:a", 5, "10s")[0].startswith("1\n5\n3\n0\n"))
        self.assertEqual(cli(*dec, "RL.RESET", "cli:a"),
                         ("NOPERM this user has no permissions to run the 'rl.reset' command\n\n",
                          ""))
        self.assertTrue(cli("--user", "grafana", "--pass", USERS["grafana"], "RL.PEEK", "cli:a",
                            5, "10s")[0].startswith("1\n5\n2\n0\n"))  # after 2, +1
        self.assertEqual(cli("-a", PASSWORD, "RL.RESET", "cli:a"), ("1\n", ""))
        self.assertEqual(cli("RL.ALLOW", "cli:a", 5, "10s"),
                         ("NOAUTH Authentication required.\n\n", ""))
        self.assertEqual(cli("-a", "wrong", "PING"),
                         ("NOAUTH Authentication required.\n\n",
                          "AUTH failed: WRONGPASS invalid username-password pair or user is "
                          "disabled.\n"))

    def test_redis_py(self):
        import redis
        r = self.srv.redis(password=PASSWORD)
        self.addCleanup(r.close)
        self.assertEqual(r.execute_command("RL.ALLOW", "py:a", 5, "10s"), [1, 5, 4, 0, 2000, 0])
        self.assertEqual(r.execute_command("RL.RESET", "py:a"), 1)
        u = self.srv.redis(username="dec", password=USERS["dec"])
        self.addCleanup(u.close)
        self.assertEqual(u.execute_command("RL.ALLOW", "py:a", 5, "10s"), [1, 5, 4, 0, 2000, 0])
        with self.assertRaises(redis.exceptions.NoPermissionError) as e:
            u.execute_command("RL.RULES", "RELOAD")
        self.assertEqual(str(e.exception),
                         "this user has no permissions to run the 'rl.rules|reload' command")
        url = redis.Redis.from_url("redis://grafana:%s@%s:%d/0" % (USERS["grafana"], HOST,
                                                                  self.srv.port))
        self.addCleanup(url.close)
        self.assertEqual(url.execute_command("RL.PEEK", "py:a", 5, "10s")[:3], [1, 5, 3])
        bad = self.srv.redis(username="dec", password="wrong")
        self.addCleanup(bad.close)
        with self.assertRaises(redis.exceptions.RedisError) as e:
            bad.ping()
        self.assertIn("invalid username-password pair", str(e.exception))
        anon = self.srv.redis()
        self.addCleanup(anon.close)
        with self.assertRaises(redis.exceptions.AuthenticationError) as e:
            anon.ping()
        self.assertEqual(str(e.exception), "Authentication required.")


class TestGroups(AuthServer):

    # command -> (group, reply prefix when allowed); reply checked for type
    CASES = [
        (["RL.ALLOW", "g:k", 5, "10s"], "deciding", list),
        (["RL.CHECK", "api", "DESCRIPTOR", "user", "u1"], "deciding", list),
        (["RL.PEEK", "g:k", 5, "10s"], "reading", list),
        (["RL.WAIT", "g:w", 5, "10s", "TIMEOUT", 0], "deciding", list),
        (["RL.ACQUIRE", "g:a", 1000], "deciding", list),
        (["RL.RELEASE", "g:a", 1], "deciding", int),
        (["RL.RESERVE", "g:r", 1000, "10s", "COST", 1], "deciding", list),
        (["INFO", "server"], "reading", bytes),
        (["RL.RULES"], "reading", list),
        (["COMMAND", "COUNT"], "reading", int),
        (["RL.RESET", "g:k"], "admin", int),
        (["RL.RULES", "RELOAD"], "admin", int),
        (["PING"], None, bytes),
        (["ECHO", "x"], None, bytes),
        (["CLIENT", "SETNAME", "x"], None, bytes),
        (["SELECT", "0"], None, bytes),
        (["CONFIG", "GET", "save"], None, list),
    ]
    GROUPS = {"dec": {"deciding"}, "grafana": {"reading"}, "ops": {"admin"},
              "both": {"deciding", "reading"}, "default": {"deciding", "reading", "admin"}}

    def test_every_group_allowed_and_denied(self):
        info0 = parse_info(self.conn("default", PASSWORD).cmd("INFO", "stats"))
        denied = {}
        for user, groups in self.GROUPS.items():
            c = self.conn(user, PASSWORD if user == "default" else USERS[user])
            denied[user] = 0
            for cmd, group, kind in self.CASES:
                got = c.cmd(*cmd)
                if group is None or group in groups:
                    self.assertIsInstance(got, kind, "%s %s: %r" % (user, cmd, got))
                else:
                    name = cmd[0].lower() + ("|reload" if cmd[1:2] == ["RELOAD"] else "")
                    self.assertEqual(got, noperm(name), "%s %s" % (user, cmd))
                    denied[user] += 1
        # dec lacks reading (4) and admin (2); grafana deciding (6) and admin;
        # ops deciding and reading; both admin; default nothing
        self.assertEqual(denied, {"dec": 6, "grafana": 8, "ops": 10, "both": 2, "default": 0})
        info = parse_info(self.conn("default", PASSWORD).cmd("INFO", "stats"))
        self.assertEqual(int(info["acl_access_denied_cmd"]) - int(info0["acl_access_denied_cmd"]),
                         26)

    def test_a_denied_command_changes_nothing(self):
        d = self.conn("dec", USERS["dec"])
        self.assertEqual(d.cmd("RL.ALLOW", "keep:k", 3, "1h")[:3], [1, 3, 2])
        self.assertEqual(self.conn("grafana", USERS["grafana"]).cmd("RL.RESET", "keep:k"),
                         noperm("rl.reset"))
        self.assertEqual(d.cmd("RL.ALLOW", "keep:k", 3, "1h")[:3], [1, 3, 1])  # not reset
        self.assertEqual(self.conn("ops", USERS["ops"]).cmd("RL.RESET", "keep:k"), 1)


class TestPaths(AuthServer):

    def test_paths_shown_to_admins_only(self):
        admin = self.conn("default", PASSWORD)  # +all: INFO needs reading too
        reader = self.conn("grafana", USERS["grafana"])
        self.assertEqual(self.conn("ops", USERS["ops"]).cmd("INFO"), noperm("info"))
        a = parse_info(admin.cmd("INFO", "everything"))
        r = parse_info(reader.cmd("INFO", "everything"))
        self.assertEqual(a["config_file"], self.conf)
        self.assertEqual(a["snapshot_file"], self.snapshot)
        self.assertEqual(a["rules_path"], self.rules)
        for k in ("config_file", "snapshot_file", "rules_path"):
            self.assertEqual(r[k], HIDDEN, k)
        self.assertEqual(r["rules_last_error"], "")  # unset stays empty
        raw = reader.cmd("INFO", "everything")
        self.assertNotIn(self.dir.encode(), raw, "no path of the test's folder anywhere")

        rules_a = dict(zip(*[iter(admin.cmd("RL.RULES"))] * 2))
        rules_r = dict(zip(*[iter(reader.cmd("RL.RULES"))] * 2))
        self.assertEqual(rules_a[b"path"], self.rules.encode())
        self.assertEqual(rules_a[b"domains"][0][1], os.path.join(self.rules, "api.yaml").encode())
        self.assertEqual(rules_r[b"path"], HIDDEN.encode())
        self.assertEqual(rules_r[b"domains"][0][:2], [b"api", b"api.yaml"])

        # a refused reload: its error names the file; readers do not see it
        path = os.path.join(self.rules, "api.yaml")
        write(path, RULES.replace("minute", "minutes"), 0o644)
        self.addCleanup(write, path, RULES, 0o644)
        err = admin.cmd("RL.RULES", "RELOAD")
        self.assertIsInstance(err, RespError)
        self.assertIn(path, err.line)
        a = parse_info(admin.cmd("INFO", "rules"))
        self.assertIn(path, a["rules_last_error"])
        r = parse_info(reader.cmd("INFO", "rules"))
        self.assertEqual(r["rules_last_error"], HIDDEN)
        rules_r = dict(zip(*[iter(reader.cmd("RL.RULES"))] * 2))
        self.assertEqual(rules_r[b"last_error"], HIDDEN.encode())
        self.assertNotIn(self.dir.encode(), reader.cmd("INFO", "everything"))


class TestOpenServer(unittest.TestCase):
    """Without a password nothing changes: every connection is the admin
    "default", paths are shown, AUTH answers as a redis-server with no
    password does."""

    def test_default_user_is_admin(self):
        d = tempfile.mkdtemp(prefix="sluice-auth-open-")
        self.addCleanup(shutil.rmtree, d, True)
        conf = write(os.path.join(d, "sluiced.conf"), "log-level info\n")
        s = Server("--config", conf, name="open")
        s.start()
        self.addCleanup(s.kill)
        with s.raw() as c:
            self.assertEqual(c.cmd("PING"), b"PONG")
            info = parse_info(c.cmd("INFO", "server"))
            self.assertEqual(info["config_file"], conf)
            self.assertEqual(info["auth_required"], "no")
            self.assertEqual(info["protected_mode"], "yes")
            self.assertEqual(c.cmd("AUTH", "x"), RespError(
                "ERR AUTH <password> called without any password configured for the default "
                "user. Are you sure your configuration is correct?"))
            self.assertEqual(c.cmd("AUTH", "default", "anything"), b"OK")
            self.assertEqual(c.cmd("AUTH", "alice", "x"), WRONGPASS)
            self.assertEqual(c.cmd("RL.RESET", "k"), 0)
            self.assertEqual(c.cmd("HELLO", "2", "AUTH", "default", "x")[:2],
                             [b"server", b"sluiced"])


class TestFailedLogins(unittest.TestCase):
    """--auth-fail-limit 3/2s: the 4th attempt from an address is refused
    unchecked, even with the right password, until the first failure is
    2 s old by the server's clock; another address is not affected."""

    WINDOW_MS = 2000

    def test_failures_limited_per_address(self):
        d = tempfile.mkdtemp(prefix="sluice-auth-fail-")
        self.addCleanup(shutil.rmtree, d, True)
        s = Server("--users-file", users_file(d), "--auth-fail-limit", "3/2s",
                   "--log-level", "debug", name="fail_limit")
        s.start()
        self.addCleanup(s.kill)
        c = RawConn(s.port)
        self.addCleanup(c.close)
        t_before = time.monotonic()  # before the first failure reaches the server
        for pw in ("a", "b"):
            self.assertEqual(c.cmd("AUTH", "dec", pw), WRONGPASS)
        self.assertEqual(c.cmd("HELLO", "2", "AUTH", "nobody", "c"), WRONGPASS)
        blocked = re.compile(r"ERR too many failed logins from 127\.0\.0\.1: retry in (\d+) ms "
                             r"\(at most 3 failures per 2000 ms; this password was not checked\)$")
        got = c.cmd("AUTH", "dec", USERS["dec"])  # the right password: refused unchecked
        self.assertIsInstance(got, RespError)
        m = blocked.match(got.line)
        self.assertIsNotNone(m, got.line)
        first = int(m.group(1))
        self.assertTrue(0 < first <= self.WINDOW_MS, first)
        self.assertEqual(c.cmd("PING"), NOAUTH)
        got = c.cmd("HELLO", "2", "AUTH", "dec", USERS["dec"])
        self.assertIsNotNone(blocked.match(got.line), got)

        # another address (127.0.0.2) is not blocked
        with socket.create_connection((HOST, s.port), timeout=10 * SLOW,
                                      source_address=("127.0.0.2", 0)) as other:
            other.sendall(b"AUTH dec %s\r\n" % USERS["dec"].encode())
            self.assertEqual(other.recv(100), b"+OK\r\n")

        # wait (bounded) until the server lets the right password in; each
        # refusal says a shorter wait, and it is never before the window
        until = deadline(self.WINDOW_MS / 1000 + 10)
        last = first
        while True:
            got = c.cmd("AUTH", "dec", USERS["dec"])
            if got == b"OK":
                break
            m = blocked.match(got.line) if isinstance(got, RespError) else None
            self.assertIsNotNone(m, got)
            self.assertLessEqual(int(m.group(1)), last)
            last = int(m.group(1))
            self.assertLess(time.monotonic(), until, "still refused after the window")
            time.sleep(min(last, 100) / 1000)
        elapsed = time.monotonic() - t_before
        self.assertGreaterEqual(elapsed, self.WINDOW_MS / 1000 - 0.05,
                                "let in %.3fs after the first failure" % elapsed)
        self.assertEqual(c.cmd("RL.ALLOW", "f:k", 5, "10s")[:3], [1, 5, 4])
        with RawConn(s.port) as a:
            self.assertEqual(a.cmd("AUTH", "grafana", USERS["grafana"]), b"OK")
            info = parse_info(a.cmd("INFO", "stats"))
        self.assertEqual(info["acl_access_denied_auth"], "3")
        self.assertGreaterEqual(int(info["auth_blocked"]), 3)
        self.assertIn("too many failed logins", s.log())



class TestStartRefused(unittest.TestCase):
    """What refuses the start, with exit status 2 and a message, before
    anything is listening."""

    def run_sluiced(self, *args):
        p = run_checked([SLUICED, "--port", "0"] + [str(a) for a in args],
                        capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode() + p.stderr.decode()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-auth-start-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def refused(self, want, *args):
        rc, out = self.run_sluiced(*args)
        self.assertEqual(rc, 2, out)
        self.assertEqual(out, want)
        self.assertNotIn("listening", out)

    def test_protected_mode(self):
        msg = ("sluiced: refusing to listen on %s without a password (protected mode): anyone "
               "who can reach it could reset any limit and reload the rules.\nEither set a "
               "password (--requirepass-file FILE, or --users-file FILE: see docs/security.md), "
               "or, if a firewall lets only trusted clients reach it, start with "
               "--protected-mode no.\n")
        # refused before anything else: no log line at all, no socket
        self.refused(msg % "0.0.0.0", "--bind", "0.0.0.0")
        self.refused(msg % "::", "--bind", "127.0.0.1,::")
        self.refused(msg % "10.1.2.3", "--bind", "::1", "--bind", "10.1.2.3")
        self.refused(msg % "::ffff:10.0.0.1", "--bind", "::ffff:10.0.0.1")
        conf = write(os.path.join(self.dir, "c.conf"), "bind 0.0.0.0\n")
        self.refused(msg % "0.0.0.0", "--config", conf)
        # the way out, without listening on a real interface: TEST-NET-1's
        # 192.0.2.1 is on no interface, so the start goes past protected
        # mode and fails to bind it (exit 1)
        for args in (["--protected-mode", "no"], ["--protected-mode=no"],
                     ["--config", write(os.path.join(self.dir, "n.conf"), "protected-mode no\n")]):
            rc, out = self.run_sluiced("--bind", "192.0.2.1", *args)
            self.assertEqual(rc, 1, out)
            self.assertIn("cannot listen on 192.0.2.1:0 (--port): Cannot assign requested address", out)
            self.assertIn('msg="listening beyond loopback without a password', out)
        # with a password it goes past protected mode too
        pw = write(os.path.join(self.dir, "pw"), "x\n")
        rc, out = self.run_sluiced("--bind", "192.0.2.1", "--requirepass-file", pw)
        self.assertEqual(rc, 1, out)
        self.assertIn("cannot listen on 192.0.2.1:0", out)
        self.assertIn("passwords and limits cross the network in clear", out)

    def test_bad_files(self):
        users = write(os.path.join(self.dir, "users"),
                      "user dec >d +deciding\n\nuser ops >o +admn\n")
        self.refused("sluiced: %s:3: unknown group '+admn' for user 'ops' (expected +deciding, "
                     "+reading, +admin or +all)\n" % users, "--users-file", users)
        users = write(os.path.join(self.dir, "users2"), "user dec >d +deciding\nuser dec >e +all\n")
        self.refused("sluiced: %s:2: user 'dec' is defined twice (first at line 1)\n" % users,
                     "--users-file", users)
        pw = write(os.path.join(self.dir, "pw"), "one\ntwo\n")
        self.refused("sluiced: %s:2: the password must be one line (only a final newline is "
                     "dropped)\n" % pw, "--requirepass-file", pw)
        self.refused("sluiced: cannot read --users-file '%s/none': No such file or directory\n"
                     % self.dir, "--users-file", os.path.join(self.dir, "none"))
        pw = write(os.path.join(self.dir, "pw2"), "x\n")
        users = write(os.path.join(self.dir, "users3"), "user default >y +all\n")
        self.refused("sluiced: --requirepass-file and %s:1 both set a password for the user "
                     "'default': keep one\n" % users, "--requirepass-file", pw, "--users-file",
                     users)
        self.refused("sluiced: invalid --auth-fail-limit '10': expected N/DURATION (N failed "
                     "logins per client address in DURATION, N from 1 to 1000), e.g. 10/1m\n"
                     "Try 'sluiced --help'.\n", "--auth-fail-limit", "10")
        self.refused("sluiced: invalid --protected-mode 'maybe': expected yes or no\n"
                     "Try 'sluiced --help'.\n", "--protected-mode=maybe")

    def test_readable_password_file_warned(self):
        pw = write(os.path.join(self.dir, "pw"), "x\n", 0o644)
        s = Server("--requirepass-file", pw, name="readable")
        s.start()
        self.addCleanup(s.kill)
        self.assertIn('msg="a password file is readable by every user: chmod o-rwx it" '
                      'option=--requirepass-file file=%s mode=0644' % pw, s.log())


# Runs inside a network namespace of its own (unshare -rn): loopback up,
# sluiced bound to 0.0.0.0 with --protected-mode no, one PING over the
# namespace's own 127.0.0.1, then SIGTERM.  Prints "PONG <exit status>".
NETNS_SCRIPT = r"""
import re, signal, socket, subprocess, sys, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
p = subprocess.Popen([sys.argv[1], "--bind", "0.0.0.0", "--port", "0", "--protected-mode", "no"],
                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
port, log, until = None, b"", time.monotonic() + float(sys.argv[2])
while port is None and time.monotonic() < until:
    line = p.stderr.readline()
    log += line
    m = re.search(rb'msg="listening" addr=0\.0\.0\.0:(\d+)', line)
    port = int(m.group(1)) if m else None
    if not line:
        break
reply = b""
if port:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"PING\r\n")
        reply = c.recv(100)
p.send_signal(signal.SIGTERM)
rest = p.communicate(timeout=float(sys.argv[2]))[1]
sys.stdout.write("%s %d\n" % (reply.strip().decode(), p.returncode))
sys.stderr.write((log + rest).decode())
"""


class TestProtectedModeOff(unittest.TestCase):

    def test_serves_on_every_interface_in_a_namespace(self):
        """--protected-mode no: bound to 0.0.0.0 -- of a network namespace
        that has only its own loopback, never a real interface."""
        unshare = shutil.which("unshare")
        self.assertIsNotNone(unshare, "unshare (util-linux) is needed")
        p = subprocess.run([unshare, "-rn", "/usr/bin/python3", "-c", NETNS_SCRIPT, SLUICED,
                            str(30 * SLOW)], capture_output=True, timeout=90 * SLOW,
                           stdin=subprocess.DEVNULL)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out, "+PONG 0\n", err)
        self.assertIn("listening beyond loopback without a password", err)
        for mark in harness.SANITIZER_MARKS:
            self.assertNotIn(mark, err)


if __name__ == "__main__":
    unittest.main()
