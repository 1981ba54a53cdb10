"""Real Redis client libraries against sluiced, connecting with their
defaults: redis-py (Debian's), node-redis and ioredis (from npm, the
versions locked in tests/e2e/node/), each calling RL.ALLOW, RL.CHECK, a
pipeline and an error; and what go-redis, Lettuce and redis-py with
protocol=3 send when they connect, replayed byte for byte (no Go, Java or
redis-py 5 here), with the replies those libraries need.

node-redis 6 and ioredis 6 open every connection with HELLO 3 (RESP3):
before sluiced spoke RESP3, node-redis failed to connect unless told
`RESP: 2`.  Both run in one `node` process (tests/e2e/node/clients.js),
once against a server without a password and once against one with
(HELLO 3 AUTH).  Their packages are installed with `npm ci` from the
committed lock file into build/e2e-node (NODE_DIR), once per lock file:
later runs reuse it, so the suite stays fast; a run without node, npm or
the registry fails, never skips.
"""

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import redis

from harness import (BASE, ROOT, SLOW, Map, RawConn, RespError, ServerTestCase, Verbatim,
                     encode)

NODE_SRC = os.path.join(ROOT, "tests", "e2e", "node")
NODE_DIR = os.path.join(ROOT, "build", "e2e-node")
NODE_MIN = 20  # node-redis 6 and ioredis 6: "engines": {"node": ">= 20"}

PASSWORD = "clients-pw"
RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
"""

# What every client reads, whatever its protocol: the six fields, and
# RL.CHECK's rows (NO_RULE's name is a null: None, JavaScript's null).
ALLOW_FIRST = [1, 5, 4, 0, 2000, 0]
CHECK_FIRST = [1, 2, 1, 0, 60000, 0, ["OK", "api.user", 2, 1, 0, 60000],
               ["NO_RULE", None, 0, 0, 0, 0]]
BAD_LIMIT = "ERR limit must be an integer between 1 and 1000000000000"
BAD_ALGO = "ERR unknown algorithm 'tokenbucket'"
HELLO_KEYS = ["server", "version", "proto", "id", "mode", "role", "modules"]
# CLIENT INFO's fields, Redis 7.2's in its order (7.0's, then lib-name and
# lib-ver): libraries parse them (redis-py's client_info() wants them all).
CLIENT_FIELDS = ["id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "sub", "psub",
                 "ssub", "multi", "qbuf", "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp",
                 "obl", "oll", "omem", "tot-mem", "events", "cmd", "user", "redir", "resp",
                 "lib-name", "lib-ver"]


def client_fields(line, port):
    """CLIENT INFO's line as a dict, after checking its field names and
    that addr and laddr are this connection's ends (the client's port
    varies, the server's is `port`)."""
    if isinstance(line, bytes):
        line = line.decode()
    assert line.endswith("\n"), line
    pairs = [f.split("=", 1) for f in line.split()]
    assert [k for k, _ in pairs] == CLIENT_FIELDS, line
    d = dict(pairs)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", d.pop("addr")), line
    assert d.pop("laddr") == "127.0.0.1:%d" % port, line
    assert int(d.pop("fd")) > 2, line
    return d


def node_ready():
    """NODE_DIR with tests/e2e/node's locked packages installed (`npm ci`,
    its cache in NODE_DIR too), installing them if the lock file changed
    since the last install; clients.js is copied there each time.  Runs
    in parallel (plain, ASan, TSan) install once: a lock file serialises
    them.  Raises AssertionError saying what is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise AssertionError("node and npm are needed (scripts/deps.sh installs nodejs and npm)")
    v = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    major = int(v.strip().lstrip("v").split(".")[0])
    if major < NODE_MIN:
        raise AssertionError("node-redis 6 and ioredis 6 need Node.js %d or later; %s is %s"
                             % (NODE_MIN, node, v.strip()))
    os.makedirs(NODE_DIR, exist_ok=True)
    with open(os.path.join(NODE_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(os.path.join(NODE_SRC, "package-lock.json")) as f:
            want = f.read()
        stamp = os.path.join(NODE_DIR, ".installed")
        have = open(stamp).read() if os.path.exists(stamp) else None
        modules = [os.path.join(NODE_DIR, "node_modules", m, "package.json")
                   for m in ("redis", "ioredis")]
        if have != want or not all(os.path.exists(m) for m in modules):
            for name in ("package.json", "package-lock.json"):
                shutil.copy(os.path.join(NODE_SRC, name), NODE_DIR)
            p = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline",
                                "--loglevel=error", "--cache", os.path.join(NODE_DIR, ".npm-cache")],
                               cwd=NODE_DIR, capture_output=True, text=True, timeout=600,
                               stdin=subprocess.DEVNULL)
            if p.returncode != 0:
                raise AssertionError("npm ci in %s failed (status %d):\n%s%s"
                                     % (NODE_DIR, p.returncode, p.stdout, p.stderr))
            with open(stamp, "w") as f:
                f.write(want)
        shutil.copy(os.path.join(NODE_SRC, "clients.js"), NODE_DIR)
    return NODE_DIR


class TestClients(ServerTestCase):
    """One server without a password and one with (--requirepass-file),
    both with a small rules file and trusting AT (so every reply is exact)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-clients-")
        cls.rules = os.path.join(cls.dir, "rules.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.passfile = os.path.join(cls.dir, "password")
        with open(cls.passfile, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(cls.passfile, 0o600)
        cls.SERVER_ARGS = ("--rules", cls.rules)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.dir, True)

    def auth_server(self):
        return self.new_server("--rules", self.rules, "--requirepass-file", self.passfile,
                               trust_client_time=True)

    # ---- node-redis and ioredis -------------------------------------------

    def run_node(self, port, password, tag):
        d = node_ready()
        cfg = {"port": port, "password": password, "at": BASE, "tag": tag,
               "step_ms": int(20000 * SLOW)}
        p = subprocess.run(["node", os.path.join(d, "clients.js"), json.dumps(cfg)],
                           capture_output=True, text=True, timeout=120 * SLOW,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def check_node(self, got, port, client, lib, ver, user):
        """What one Node client got: each step's reply exactly."""
        r = got[client]
        self.assertNotIn("fatal", r, "%s did not connect: %s" % (client, r.get("fatal")))
        # the connection is RESP3: HELLO answers a map (ioredis flattens maps
        # to [key, value, ...] unless told otherwise) with proto 3
        hello = r["hello"]
        if isinstance(hello, list):
            hello = dict(zip(hello[::2], hello[1::2]))
        self.assertEqual(list(hello), HELLO_KEYS, client)
        self.assertEqual((hello["server"], hello["proto"], hello["modules"]), ("sluiced", 3, []))
        # the decision arrays, as on RESP2
        self.assertEqual(r["allow"], ALLOW_FIRST, client)
        self.assertEqual(r["check"], CHECK_FIRST, client)
        self.assertEqual(r["pipeline"], [
            [1, 5, 3, 0, 4000, 0],
            [1, 5, 2, 0, 6000, 0],
            [1, 2, 0, 0, 60000, 0, ["OK", "api.user", 2, 0, 0, 60000]],
        ], client)
        self.assertEqual(r["pipeline_error"], [
            [1, 5, 2, 0, 6000, 0],
            {"error": BAD_LIMIT, "name": "SimpleError"},
            [1, 5, 1, 0, 8000, 0],
        ], client)
        # multi().exec(): MULTI ... EXEC, each decision exact, an error one element
        self.assertEqual(r["multi"], [
            [1, 2, 1, 0, 5000, 0],
            [1, 2, 0, 0, 10000, 0],
            [0, 2, 0, 5000, 10000, 0],
            [1, 2, 1, 0, 60000, 0, ["OK", "api.user", 2, 1, 0, 60000]],
        ], client)
        self.assertEqual(r["multi_error"], [
            {"error": BAD_LIMIT, "name": "SimpleError"},
            [0, 2, 0, 5000, 10000, 0],
        ], client)
        self.assertEqual(r["error"], {"error": BAD_ALGO, "name": "SimpleError"}, client)
        # what the library said of itself on connecting (CLIENT SETINFO)
        f = client_fields(r["client_info"], port)
        self.assertEqual((f["id"], f["name"], f["user"], f["resp"], f["lib-name"], f["lib-ver"],
                          f["cmd"], f["db"]),
                         (str(hello["id"]), "", user, "3", lib, ver, "client|info", "0"), client)
        # INFO, a verbatim string in RESP3, reads as INFO's text
        self.assertTrue(r["info"].startswith("# Server\r\nsluice_version:"), r["info"][:80])
        rules = r["rules"]
        if isinstance(rules, list):
            rules = dict(zip(rules[::2], rules[1::2]))
        self.assertEqual(list(rules), ["version", "loaded_at_ms", "path", "reloads",
                                       "reload_failures", "last_error", "last_error_at_ms",
                                       "domains"], client)
        self.assertEqual(rules["domains"][0][0], "api")
        # SPEC 10 through the library: a lease and its id, refused while
        # held (retry when it expires), given back once; a token bucket of
        # 100 a minute reserved at 30, settled at 45 (55 left, 45 tokens to
        # refill at 600 ms each); a wait answered at once
        lease = r["acquire"]
        self.assertEqual(lease[:6], [1, 1, 0, 0, 30000, 0], client)
        self.assertIsInstance(lease[6], int, client)
        self.assertEqual(r["acquire_held"], [0, 1, 0, 30000, 30000, 0, None], client)
        self.assertEqual((r["release"], r["release_again"]), (1, 0), client)
        self.assertEqual(r["reserve"][:6], [1, 100, 70, 0, 18000, 0], client)
        self.assertIsInstance(r["reserve"][6], int, client)
        self.assertEqual(r["settle"], [1, 100, 55, 0, 27000, 0], client)
        self.assertEqual(r["wait"], [1, 5, 4, 0, 2000, 0], client)
        self.assertNotIn("client_errors", r, client)

    def test_node_clients(self):
        """node-redis and ioredis with their defaults (HELLO 3), on a server
        without a password and on one with (HELLO 3 AUTH default ...)."""
        versions = {}
        with open(os.path.join(NODE_SRC, "package.json")) as f:
            versions = json.load(f)["dependencies"]
        for port, password, tag in ((self.srv.port, None, "open"),
                                    (self.auth_server().port, PASSWORD, "auth")):
            got = self.run_node(port, password, tag)
            self.check_node(got, port, "node-redis", "node-redis", versions["redis"], "default")
            self.check_node(got, port, "ioredis", "ioredis", versions["ioredis"], "default")

    # ---- redis-py (Debian's) ----------------------------------------------

    def test_redis_py(self):
        """redis-py as Debian 12 ships it (4.3: RESP2 only; protocol=3 came
        in 5.0, replayed in test_handshakes)."""
        r = self.srv.redis()
        self.addCleanup(r.close)
        self.assertEqual(r.execute_command("RL.ALLOW", "py:k", 5, "10s", "AT", BASE), ALLOW_FIRST)
        self.assertEqual(r.execute_command("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "user",
                                           "py", "DESCRIPTOR", "team", "red"),
                         [1, 2, 1, 0, 60000, 0, [b"OK", b"api.user", 2, 1, 0, 60000],
                          [b"NO_RULE", None, 0, 0, 0, 0]])
        p = r.pipeline(transaction=False)
        p.execute_command("RL.ALLOW", "py:k", 5, "10s", "AT", BASE)
        p.execute_command("RL.ALLOW", "py:k", 0, "10s")
        p.execute_command("RL.PEEK", "py:k", 5, "10s", "AT", BASE)
        got = p.execute(raise_on_error=False)
        self.assertEqual(got[0], [1, 5, 3, 0, 4000, 0])
        self.assertIsInstance(got[1], redis.exceptions.ResponseError)
        self.assertEqual(str(got[1]), BAD_LIMIT[len("ERR "):])
        self.assertEqual(got[2], [1, 5, 2, 0, 6000, 0])
        with self.assertRaises(redis.exceptions.ResponseError) as e:
            r.execute_command("RL.ALLOW", "py:k", 5, "10s", "ALGO", "tokenbucket")
        self.assertEqual(str(e.exception), BAD_ALGO[len("ERR "):])
        # the connection commands redis-py has methods for
        self.assertTrue(r.client_setname("py-app"))
        self.assertEqual(r.client_getname(), "py-app")
        cid = r.client_id()
        self.assertIsInstance(cid, int)
        info = r.client_info()  # it parses Redis's fields, and wants them all
        self.assertEqual((info["id"], info["name"], info["db"], info["user"], info["resp"],
                          info["idle"], info["age"] >= 0),
                         (cid, "py-app", 0, "default", "2", 0, True))
        self.assertEqual(list(info), CLIENT_FIELDS)
        self.assertEqual(info["laddr"], "127.0.0.1:%d" % self.srv.port)
        self.assertEqual(r.client_setname(""), True)
        self.assertIsNone(r.client_getname())
        # Redis(db=N): db 0 is the only one; another gets Redis's error at connect
        r0, r1 = self.srv.redis(db=0), self.srv.redis(db=1)
        self.addCleanup(r0.close)
        self.addCleanup(r1.close)
        self.assertEqual(r0.execute_command("RL.PEEK", "py:k", 5, "10s", "AT", BASE)[:3],
                         [1, 5, 2])
        with self.assertRaises(redis.exceptions.ResponseError) as e:
            r1.ping()
        self.assertEqual(str(e.exception), "DB index is out of range")
        # with a password (AUTH) and a client name (CLIENT SETNAME) at connect
        s = self.auth_server()
        ra = redis.Redis(host="127.0.0.1", port=s.port, password=PASSWORD, client_name="py-auth",
                         socket_timeout=20 * SLOW)
        self.addCleanup(ra.close)
        self.assertEqual(ra.execute_command("RL.ALLOW", "py:k", 5, "10s", "AT", BASE),
                         ALLOW_FIRST)
        self.assertEqual(ra.client_getname(), "py-auth")

    # ---- what other libraries send on connecting ----------------------------

    # Each: the commands the library sends when it connects, in its order,
    # with the reply check its code needs; then ours.  From their sources:
    #   go-redis v9 (redis.go, initConn): HELLO 3 [AUTH user|default pass]
    #     [SETNAME name]; on a Redis error it falls back to AUTH and RESP2.
    #     CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type T (an error is
    #     ignored in its default "auto" mode), then CLIENT SETINFO LIB-NAME
    #     go-redis(<suffix>,<go version>) and LIB-VER, errors ignored.
    #   Lettuce 6/7 (RedisHandshake.java): HELLO 3 [AUTH user|default pass]
    #     [SETNAME name], reading id (a Long), version, mode, role from the
    #     map; falls back to RESP2 on NOPROTO or an unknown command.  Then
    #     CLIENT SETINFO lib-name Lettuce / lib-ver, errors ignored, and
    #     CLIENT MAINT_NOTIFICATIONS on moving-endpoint-type T, ignored.
    #   redis-py 5 and 6 with protocol=3 (connection.py, on_connect): HELLO 3
    #     [AUTH user|default pass], CLIENT SETNAME name (must be OK), CLIENT
    #     SETINFO LIB-NAME redis-py / LIB-VER, errors ignored, SELECT db
    #     (must be OK) when db is not 0.
    HANDSHAKES = {
        "go-redis": [
            (["HELLO", "3", "AUTH", "default", PASSWORD, "SETNAME", "checkout"], "hello"),
            (["CLIENT", "MAINT_NOTIFICATIONS", "ON", "moving-endpoint-type", "internal-ip"],
             RespError("ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.")),
            (["CLIENT", "SETINFO", "LIB-NAME", "go-redis(,go1.23.4)"], b"OK"),
            (["CLIENT", "SETINFO", "LIB-VER", "9.17.0"], b"OK"),
        ],
        "lettuce": [
            (["HELLO", "3", "AUTH", "default", PASSWORD, "SETNAME", "checkout"], "hello"),
            (["CLIENT", "SETINFO", "lib-name", "Lettuce"], b"OK"),
            (["CLIENT", "SETINFO", "lib-ver", "6.7.1.RELEASE"], b"OK"),
            (["CLIENT", "MAINT_NOTIFICATIONS", "on", "moving-endpoint-type", "external-ip"],
             RespError("ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.")),
        ],
        "redis-py": [
            (["HELLO", "3", "AUTH", "default", PASSWORD], "hello"),
            (["CLIENT", "SETNAME", "checkout"], b"OK"),
            (["CLIENT", "SETINFO", "LIB-NAME", "redis-py"], b"OK"),
            (["CLIENT", "SETINFO", "LIB-VER", "6.4.0"], b"OK"),
            (["SELECT", "0"], b"OK"),
        ],
    }

    def test_handshakes(self):
        """Each library's connect sequence in one write (as they pipeline
        it), then RL.ALLOW, RL.CHECK, INFO, RL.RULES and CLIENT INFO over
        the same connection: RESP3 replies of the types those libraries
        read."""
        s = self.auth_server()
        for lib, steps in self.HANDSHAKES.items():
            with RawConn(s.port) as c:
                tag = "hs-" + lib
                ours = [
                    (["RL.ALLOW", tag + ":k", 5, "10s", "AT", BASE], ALLOW_FIRST),
                    (["RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "user", tag, "DESCRIPTOR",
                      "team", "red"],
                     [1, 2, 1, 0, 60000, 0, [b"OK", b"api.user", 2, 1, 0, 60000],
                      [b"NO_RULE", None, 0, 0, 0, 0]]),
                    (["RL.ALLOW", tag + ":k", 0, "10s"], RespError(BAD_LIMIT)),
                    (["INFO", "server"], "info"),
                    (["RL.RULES"], "rules"),
                    (["CLIENT", "INFO"], "client_info"),
                    (["CLIENT", "GETNAME"], b"checkout"),
                ]
                cmds = steps + ours
                c.send(b"".join(encode(*args) for args, _ in cmds))
                replies = c.read_replies(len(cmds))
                for (args, want), got in zip(cmds, replies):
                    what = "%s: %s" % (lib, " ".join(str(a) for a in args[:3]))
                    if want == "hello":
                        self.assertIsInstance(got, Map, what)
                        self.assertEqual([k.decode() for k in got], HELLO_KEYS, what)
                        self.assertEqual((got[b"server"], got[b"proto"], got[b"mode"],
                                          got[b"role"], got[b"modules"]),
                                         (b"sluiced", 3, b"standalone", b"master", []), what)
                        self.assertIsInstance(got[b"id"], int, what)
                        self.assertIsInstance(got[b"version"], bytes, what)
                        cid = got[b"id"]
                    elif want == "info":
                        self.assertIsInstance(got, Verbatim, what)
                        self.assertEqual(got.fmt, "txt", what)
                        self.assertTrue(got.startswith(b"# Server\r\nsluice_version:"), what)
                    elif want == "rules":
                        self.assertIsInstance(got, Map, what)
                        self.assertEqual(got[b"domains"][0][0], b"api", what)
                        self.assertEqual(got[b"path"], self.rules.encode(), "an admin's view")
                    elif want == "client_info":
                        self.assertIsInstance(got, Verbatim, what)
                        self.assertEqual(got.fmt, "txt", what)
                        f = client_fields(got, s.port)
                        libs = [a[3] for a, _ in steps if a[:2] == ["CLIENT", "SETINFO"]]
                        self.assertEqual((f["id"], f["name"], f["user"], f["resp"], f["lib-name"],
                                          f["lib-ver"]),
                                         (str(cid), "checkout", "default", "3", libs[0], libs[1]),
                                         what)
                    else:
                        self.assertEqual(got, want, what)


if __name__ == "__main__":
    unittest.main()
