"""sluice as a Redis module (build/sluice.so in a real redis-server): the
spec's vectors; random traces answered exactly as sluiced answers them
(the library's answers, carry-over of changed parameters included); every
bad argument gets -ERR with sluiced's words and Redis goes on; RL.DECIDEALL
all or none; state that survives DEBUG RELOAD, a restart from RDB and from
AOF (DUMP of every key byte for byte the same); a replica holding the
master's state; a TTL that frees an idle key, never before its state is at
rest.

Each redis-server runs on a free loopback port and is stopped by its PID
(SIGTERM); its log is scanned for sanitizer reports.  With an ASan build
($SLUICE_BUILD=build/asan) the module is build/asan/sluice.so and Redis,
which is not built with ASan, runs with the sanitizer's runtime preloaded
(LD_PRELOAD, what gcc -print-file-name finds); likewise TSan.
"""

# sluice-e2e: no-tsan
# The module runs inside redis-server on Redis's main thread only: no thread
# of ours (no pthread, call_rcu or thread-safe context in src/module/ or the
# lone-key code it calls), and no free_effort callback, so Redis frees a
# value on its lazyfree thread only for FLUSHALL/FLUSHDB ASYNC, which no
# module test sends.  TSan has no second thread of ours to watch; ASan+UBSan
# run it.

import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from harness import (BASE, BUILD, CRASH_SIGNALS, HOST, LOG_DIR, REDIS_MARKS, SANITIZED,
                     STARTED, RawConn, RespError, Server, assert_clean_stop, deadline,
                     free_port, load_vectors, wait_window_room)

MODULE = os.path.join(BUILD, "sluice.so")
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
ALGOS = ["fixed-window", "sliding-log", "sliding-window", "sliding-buckets", "token-bucket",
         "gcra", "leaky-bucket"]


def sanitizer_env():
    """The environment that lets a sanitized sluice.so load into a plain
    redis-server: the runtime preloaded, leaks not checked (Redis does not
    free everything at exit, and its allocations are not ours)."""
    env = dict(os.environ)
    kind = os.path.basename(BUILD.rstrip("/"))
    lib = {"asan": "libasan.so", "tsan": "libtsan.so"}.get(kind)
    if lib is None:
        return env
    path = subprocess.run(["gcc", "-print-file-name=" + lib], capture_output=True,
                          text=True, check=True).stdout.strip()
    env["LD_PRELOAD"] = path
    if kind == "asan":
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    else:
        env["TSAN_OPTIONS"] = "exitcode=99:report_signal_unsafe=0"
    return env


class Redis:
    """One redis-server with the module loaded, in its own folder."""

    def __init__(self, name, folder, module_args=(), extra=()):
        self.name = name
        self.dir = folder
        self.module_args = [str(a) for a in module_args]
        self.extra = [str(a) for a in extra]
        self.proc = None
        self.port = None
        self.log_path = None
        self.returncode = None

    def start(self, timeout=20):
        n = len(STARTED)
        self.log_path = os.path.join(LOG_DIR, "%03d-redis-%s.log" % (n, self.name))
        for _ in range(5):  # a port taken between free_port() and bind: another
            self.port = free_port()
            argv = [REDIS, "--bind", HOST, "--port", str(self.port), "--dir", self.dir,
                    "--save", "", "--enable-debug-command", "yes", "--loglevel", "notice",
                    "--loadmodule", MODULE] + self.module_args + self.extra
            with open(self.log_path, "ab") as log:
                log.write(("# " + " ".join(argv) + "\n").encode())
                log.flush()
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.dir,
                                             env=sanitizer_env())
            until = deadline(timeout)
            while time.monotonic() < until and self.proc.poll() is None:
                try:
                    with RawConn(self.port, timeout=2) as c:
                        v = c.cmd("PING", timeout=2)
                        if v == b"PONG":
                            self.check_loaded()
                            return self
                except (OSError, EOFError, TimeoutError):
                    pass
                except RespError:  # LOADING: not ready yet
                    pass
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.stop()
                raise AssertionError("redis-server did not answer PING:\n" + self.log())
            if "Address already in use" not in self.log():
                raise AssertionError("redis-server exited at start:\n" + self.log())
        raise AssertionError("no free port for redis-server")

    def check_loaded(self):
        """The module mapped in the process is this build's, and with a
        sanitized build the sanitizer's runtime is mapped too (else the
        test would prove nothing about it)."""
        with open("/proc/%d/maps" % self.proc.pid) as f:
            maps = f.read()
        if os.path.realpath(MODULE) not in maps:
            raise AssertionError("%s is not loaded in redis-server" % MODULE)
        preload = sanitizer_env().get("LD_PRELOAD")
        if preload and os.path.realpath(preload) not in maps:
            raise AssertionError("%s is not loaded in redis-server" % preload)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def conn(self):
        return RawConn(self.port, timeout=10)

    def stop(self, timeout=30):
        """SIGTERM by PID, waits; returns the exit status (None if it had to
        be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            self.returncode = self.proc.returncode if self.proc else None
            return self.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout * (4 if SANITIZED else 1))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.returncode = None
        return self.returncode

    def reports(self):
        """The sanitizer and Redis crash reports in its log (REDIS_MARKS)."""
        text = self.log()
        return [m for m in REDIS_MARKS if m in text]

    def assert_clean_stop(self):
        rc = self.stop()
        text = self.log()
        marks = self.reports()
        crashed = rc is not None and rc < 0 and -rc in [s.value for s in CRASH_SIGNALS]
        if rc != 0 or marks or crashed:
            raise AssertionError("redis-server %s did not stop cleanly: status %s %s\n%s"
                                 % (self.name, rc, marks, text[-6000:]))


class ModuleCase(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-module-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def redis(self, *module_args, name=None, folder=None, extra=()):
        folder = folder or self.dir
        r = Redis(name or self.id().split(".")[-1], folder, module_args, extra)
        r.start()
        self.addCleanup(r.assert_clean_stop)
        return r

    def dumps(self, c, keys):
        return {k: c.cmd("DUMP", k) for k in keys}


class TestAnswers(ModuleCase):

    def test_spec_vectors(self):
        """Every vector file, request by request through the module's
        RL.ALLOW ... AT t, gives exactly the expected six fields."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        vectors = load_vectors()
        self.assertGreaterEqual(len(vectors), 7)
        seen = set()
        with r.conn() as c:
            for name, (limit, window, opts), rows in vectors:
                if "ALGO" in opts:
                    seen.add(opts[opts.index("ALGO") + 1])
                for i, (t, key, cost, want) in enumerate(rows):
                    args = ["vec:%s:%s" % (name, key), limit, window] + opts
                    if cost is not None:
                        args += ["COST", cost]
                    args += ["AT", BASE + t]
                    self.assertEqual(c.cmd("RL.ALLOW", *args), want,
                                     "%s line %d: RL.ALLOW %s" % (name, i + 1, args))
        self.assertEqual(seen, set(ALGOS))

    def test_random_traces_match_sluiced(self):
        """Random RL.ALLOW / RL.PEEK / RL.RESET traces over every algorithm,
        with costs, times that sometimes go back, and limits, windows,
        bursts and precisions that change for a key (carry-over): the
        module's replies are sluiced's (the same library, in a store), reply
        for reply, errors included."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        s = Server(name="sluiced-reference", trust_client_time=True)
        s.start()
        self.addCleanup(lambda: assert_clean_stop(s))
        rnd = random.Random(9)
        n = 600 if SANITIZED else 3000
        t = BASE
        with r.conn() as m, s.raw() as ref:
            for i in range(n):
                algo = rnd.choice(ALGOS)
                key = "k%d" % rnd.randrange(6)
                t += rnd.choice([0, 1, 7, 50, 300, 1000, 4000, -500])
                limit = rnd.choice([1, 3, 5, 10, 1000000000000])
                window = rnd.choice(["1s", "10s", "1m", "1000"])
                args = [key, limit, window, "ALGO", algo]
                if rnd.random() < 0.5:
                    args += ["COST", rnd.choice([0, 1, 2, 3, 7, 10 ** 12])]
                if algo in ("token-bucket", "gcra", "leaky-bucket") and rnd.random() < 0.3:
                    args += ["BURST", rnd.choice([1, 4, 20])]
                if algo == "sliding-buckets" and rnd.random() < 0.5:
                    args += ["PRECISION", rnd.choice([1, 5, 10])]
                if algo == "sliding-log" and rnd.random() < 0.2:
                    args += ["LOGREJECTED"]
                cmd = rnd.choices(["RL.ALLOW", "RL.PEEK", "RL.RESET"], [8, 2, 0.3])[0]
                if cmd == "RL.RESET":
                    args = [key] + (["ALGO", algo] if rnd.random() < 0.5 else [])
                else:
                    args += ["AT", t]
                want = ref.cmd(cmd, *args)
                got = m.cmd(cmd, *args)
                self.assertEqual(got, want, "request %d: %s %s" % (i, cmd, args))

    def test_carry_over(self):
        """A limit raised for a key keeps its count; a burst lowered clamps
        the bucket: the answers sluiced gives (docs/engine.md)."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        with r.conn() as c:
            fw = ["ALGO", "fixed-window", "AT", BASE]
            for _ in range(3):
                c.cmd("RL.ALLOW", "co", 3, "1m", *fw)
            self.assertEqual(c.cmd("RL.ALLOW", "co", 3, "1m", *fw), [0, 3, 0, 60000, 60000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "co", 5, "1m", *fw), [1, 5, 1, 0, 60000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "tb", 10, "10s", "AT", BASE), [1, 10, 9, 0, 1000, 0])
            self.assertEqual(c.cmd("RL.ALLOW", "tb", 10, "10s", "BURST", 4, "AT", BASE),
                             [1, 4, 3, 0, 1000, 0])

    def test_peek_and_fresh_keys(self):
        """RL.PEEK answers without creating the key; RL.ALLOW creates it."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        with r.conn() as c:
            self.assertEqual(c.cmd("RL.PEEK", "p", 5, "10s", "AT", BASE), [1, 5, 4, 0, 2000, 0])
            self.assertEqual(c.cmd("EXISTS", "p"), 0)
            self.assertEqual(c.cmd("RL.ALLOW", "p", 5, "10s", "AT", BASE), [1, 5, 4, 0, 2000, 0])
            self.assertEqual(c.cmd("TYPE", "p"), b"sluice-rl")
            self.assertEqual(c.cmd("RL.RESET", "p"), 1)
            self.assertEqual(c.cmd("RL.RESET", "p"), 0)
            self.assertEqual(c.cmd("EXISTS", "p"), 0)


BAD = [
    ["RL.ALLOW", "k", "x", "10s"],
    ["RL.ALLOW", "k", "0", "10s"],
    ["RL.ALLOW", "k", "-1", "10s"],
    ["RL.ALLOW", "k", "5", "10q"],
    ["RL.ALLOW", "k", "5", "0"],
    ["RL.ALLOW", "k", "5", "11y"],
    ["RL.ALLOW", "k", "5", "10s", "ALGO", "nope"],
    ["RL.ALLOW", "k", "5", "10s", "ALGO"],
    ["RL.ALLOW", "k", "5", "10s", "COST", "-2"],
    ["RL.ALLOW", "k", "5", "10s", "COST", "1000000000001"],
    ["RL.ALLOW", "k", "5", "10s", "COST", "1", "COST", "2"],
    ["RL.ALLOW", "k", "5", "10s", "BURST", "0"],
    ["RL.ALLOW", "k", "5", "10s", "ALGO", "fixed-window", "BURST", "3"],
    ["RL.ALLOW", "k", "5", "10s", "PRECISION", "3"],
    ["RL.ALLOW", "k", "5", "10s", "ALGO", "sliding-buckets", "PRECISION", "3"],
    ["RL.ALLOW", "k", "5", "10s", "ALGO", "sliding-buckets", "PRECISION", "70000"],
    ["RL.ALLOW", "k", "5", "10s", "LOGREJECTED"],
    ["RL.ALLOW", "k", "5", "10s", "FOO"],
    ["RL.ALLOW", "k", "5", "10s", "AT", "x"],
    ["RL.ALLOW", "k", "5", "10s", "AT", "9999999999999999999999"],
    ["RL.ALLOW", "", "5", "10s"],
    ["RL.ALLOW", "x" * 513, "5", "10s"],
    ["RL.ALLOW", "k", "5"],
    ["RL.PEEK", "k", "5", "10s", "ALGO", "\x01bad\xff"],
    ["RL.PEEK", "k"],
    ["RL.RESET"],
    ["RL.RESET", "k", "ALGO"],
    ["RL.RESET", "k", "ALGO", "nope"],
    ["RL.RESET", "k", "FOO", "gcra"],
    ["RL.RESET", "", "ALGO", "gcra"],
]


class TestErrors(ModuleCase):

    def test_bad_arguments_get_sluiceds_errors(self):
        """Each bad command gets -ERR, word for word what sluiced says, and
        changes nothing; Redis is still there afterwards."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        s = Server(name="sluiced-errors", trust_client_time=True)
        s.start()
        self.addCleanup(lambda: assert_clean_stop(s))
        with r.conn() as m, s.raw() as ref:
            for args in BAD:
                want = ref.cmd(*args)
                got = m.cmd(*args)
                self.assertIsInstance(got, RespError, args)
                self.assertTrue(got.line.startswith("ERR "), got.line)
                self.assertEqual(got, want, args)
            self.assertEqual(m.cmd("DBSIZE"), 0)
            self.assertEqual(m.cmd("PING"), b"PONG")

    def test_module_only_errors(self):
        """AT without trust-client-time; another type's key; RL.DECIDEALL's
        own errors; a malformed RL.RESTORE.  Redis answers on."""
        r = self.redis()
        with r.conn() as c:
            self.assertEqual(
                c.cmd("RL.ALLOW", "k", 5, "10s", "AT", BASE),
                RespError("ERR AT is refused: this server decides at its own clock (load the "
                          "sluice module with trust-client-time yes to accept client times)"))
            c.cmd("SET", "str", "1")
            wrong = RespError("WRONGTYPE Operation against a key holding the wrong kind of value")
            self.assertEqual(c.cmd("RL.ALLOW", "str", 5, "10s"), wrong)
            self.assertEqual(c.cmd("RL.PEEK", "str", 5, "10s"), wrong)
            self.assertEqual(c.cmd("RL.RESET", "str"), wrong)
            self.assertEqual(c.cmd("RL.DECIDEALL", "REQ", "a", 1, "1s", "REQ", "str", 1, "1s"),
                             wrong)
            cases = [
                (["RL.DECIDEALL"], "ERR RL.DECIDEALL needs at least one REQ key limit window"),
                (["RL.DECIDEALL", "a", 1, "1s"], "ERR expected REQ, got 'a'"),
                (["RL.DECIDEALL", "REQ", "a", 1], "ERR request 1: a request needs a key, a "
                 "limit and a window"),
                (["RL.DECIDEALL", "REQ", "a", 1, "1s", "REQ", "b", "x", "1s"],
                 "ERR request 2: limit must be an integer between 1 and 1000000000000"),
                (["RL.DECIDEALL", "REQ", "a", 1, "1s", "AT", BASE],
                 "ERR request 1: unknown option 'AT' (expected ALGO, COST, BURST, PRECISION, "
                 "or LOGREJECTED)"),
                (["RL.DECIDEALL", "REQ", "a", 1, "1s", "REQ", "a", 2, "1s"],
                 "ERR request 2 names the key and algorithm of an earlier request (merge "
                 "their costs)"),
                (["RL.DECIDEALL", "AT", BASE, "REQ", "a", 1, "1s"],
                 "ERR AT is refused: this server decides at its own clock (load the sluice "
                 "module with trust-client-time yes to accept client times)"),
                (["RL.DECIDEALL", "REQ", "a", 1, "1s", "ALGO", "gcra", "PRECISION", 2],
                 "ERR request 1: " + c.cmd("RL.ALLOW", "a", 1, "1s", "ALGO", "gcra",
                                           "PRECISION", 2).line[4:]),
                (["RL.RESTORE", "a", "gcra", "junk"], "ERR malformed state for RL.RESTORE"),
                (["RL.RESTORE", "a", "nope", "junk"], "ERR unknown algorithm 'nope'"),
            ]
            cases.append((["RL.DECIDEALL"] + sum([["REQ", "k%d" % i, 1, "1s"]
                                                  for i in range(17)], []),
                          "ERR at most 16 requests in one RL.DECIDEALL"))
            for args, want in cases:
                self.assertEqual(c.cmd(*args), RespError(want), args)
            self.assertEqual(c.cmd("DBSIZE"), 1)  # only "str"
            self.assertEqual(c.cmd("PING"), b"PONG")

    def test_bad_module_arguments_refuse_the_load(self):
        """An unknown or malformed module argument: Redis refuses to start,
        saying why."""
        for args, why in ((["trust-client-time", "maybe"], "trust-client-time takes yes or no"),
                          (["colour", "blue"], "unknown argument 'colour'"),
                          (["max-client-skew", "soon"], "max-client-skew takes a duration")):
            r = Redis("badargs", self.dir, args)
            with self.assertRaises(AssertionError) as e:
                r.start(timeout=10)
            self.assertIn(why, str(e.exception))
            r.stop()
            self.assertEqual(r.reports(), [], r.log()[-4000:])  # refused, not crashed


class TestDecideAll(ModuleCase):

    def test_all_or_none(self):
        """All allowed: every request charged, one reply per request.  One
        denied: nothing charged, each answer is what it would get alone."""
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        with r.conn() as c:
            got = c.cmd("RL.DECIDEALL", "AT", BASE, "REQ", "u", 10, "1m",
                        "REQ", "u", 2, "1s", "ALGO", "fixed-window", "REQ", "{u}x", 5, "1h",
                        "COST", 5)
            self.assertEqual(got, [1, [1, 10, 9, 0, 6000, 0], [1, 2, 1, 0, 1000, 0],
                                   [1, 5, 0, 0, 3600000, 0]])
            before = self.dumps(c, ["u", "{u}x"])
            got = c.cmd("RL.DECIDEALL", "AT", BASE + 10, "REQ", "u", 10, "1m",
                        "REQ", "{u}x", 5, "1h")
            self.assertEqual(got[0], 0)
            self.assertEqual(got[1], c.cmd("RL.PEEK", "u", 10, "1m", "AT", BASE + 10))
            self.assertEqual(got[2], [0, 5, 0, 719990, 3599990, 0])
            self.assertEqual(self.dumps(c, ["u", "{u}x"]), before, "nothing charged")
            # a denied batch on new keys leaves no key behind
            got = c.cmd("RL.DECIDEALL", "AT", BASE, "REQ", "n1", 1, "1s", "REQ", "n2", 1, "1s",
                        "COST", 2)
            self.assertEqual(got, [0, [1, 1, 0, 0, 1000, 0], [0, 1, 1, -1, 0, 0]])
            self.assertEqual(c.cmd("EXISTS", "n1", "n2"), 0)

    def test_keys_for_cluster(self):
        """Redis knows every command's keys (how Cluster routes them)."""
        r = self.redis()
        with r.conn() as c:
            self.assertEqual(c.cmd("COMMAND", "GETKEYS", "RL.ALLOW", "a", 1, "1s"), [b"a"])
            self.assertEqual(c.cmd("COMMAND", "GETKEYS", "RL.DECIDEALL", "REQ", "{t}a", 1, "1s",
                                   "ALGO", "gcra", "REQ", "REQ", 2, "1s"), [b"{t}a", b"REQ"])


def make_state(c, at=True):
    """Decisions on keys under every algorithm (sliding-log with a log of
    several entries and costs); returns the keys.  at: client times."""
    keys = []
    for i, algo in enumerate(ALGOS):
        key = "st:%s" % algo
        keys.append(key)
        for j in range(4):
            args = [key, 5, "1h", "ALGO", algo, "COST", 1 + j % 2]
            if at:
                args += ["AT", BASE + 1000 * j]
            c.cmd("RL.ALLOW", *args)
    c.cmd("RL.ALLOW", "multi", 3, "1h", "ALGO", "gcra", *(["AT", BASE] if at else []))
    c.cmd("RL.ALLOW", "multi", 3, "1h", "ALGO", "sliding-log", *(["AT", BASE] if at else []))
    keys.append("multi")
    return keys


class TestPersistence(ModuleCase):

    def test_debug_reload(self):
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        with r.conn() as c:
            keys = make_state(c)
            before = self.dumps(c, keys)
            peek = c.cmd("RL.PEEK", "st:sliding-log", 5, "1h", "ALGO", "sliding-log",
                         "AT", BASE + 5000)
            self.assertEqual(c.cmd("DEBUG", "RELOAD"), b"OK")
            self.assertEqual(self.dumps(c, keys), before)
            self.assertEqual(c.cmd("RL.PEEK", "st:sliding-log", 5, "1h", "ALGO", "sliding-log",
                                   "AT", BASE + 5000), peek)

    def test_restart_from_rdb(self):
        r = self.redis(name="rdb1")
        with r.conn() as c:
            keys = make_state(c, at=False)
            before = self.dumps(c, keys)
            ttl = c.cmd("PTTL", "multi")
            self.assertEqual(c.cmd("SAVE"), b"OK")
        r.assert_clean_stop()
        r2 = self.redis(name="rdb2")
        with r2.conn() as c:
            self.assertEqual(self.dumps(c, keys), before)
            self.assertTrue(0 < c.cmd("PTTL", "multi") <= ttl)

    def test_restart_from_aof(self):
        """Decisions at Redis's clock are logged with their time; a rewrite
        mid-way writes RL.RESTORE; a restart replays both to the same state."""
        aof = ["--appendonly", "yes", "--appendfsync", "always"]
        r = self.redis(name="aof1", extra=aof)
        with r.conn() as c:
            keys = make_state(c, at=False)
            self.assertEqual(c.cmd("BGREWRITEAOF")[:4], b"Back")
            until = deadline(30)
            while c.cmd("INFO", "persistence").find(b"aof_rewrite_in_progress:0") < 0 or \
                    c.cmd("INFO", "persistence").find(b"aof_rewrite_scheduled:0") < 0:
                self.assertLess(time.monotonic(), until, "the rewrite did not end")
                time.sleep(0.05)
            c.cmd("RL.ALLOW", "after", 2, "1h")
            c.cmd("RL.ALLOW", "st:gcra", 5, "1h", "ALGO", "gcra")
            c.cmd("RL.RESET", "st:fixed-window")
            keys += ["after"]
            before = self.dumps(c, keys)
        r.assert_clean_stop()
        r2 = self.redis(name="aof2", extra=aof)
        with r2.conn() as c:
            self.assertEqual(self.dumps(c, keys), before)
            self.assertEqual(c.cmd("EXISTS", "st:fixed-window"), 0)


class TestReplica(ModuleCase):

    def test_replica_holds_the_masters_state(self):
        """Decisions at the master's clock reach the replica as decisions at
        that time: the replica's state is the master's, byte for byte, and
        its RL.PEEK answers from it."""
        master = self.redis(name="master", folder=tempfile.mkdtemp(dir=self.dir))
        replica = self.redis(name="replica", folder=tempfile.mkdtemp(dir=self.dir),
                             extra=["--replicaof", HOST, str(master.port)])
        with master.conn() as m, replica.conn() as rc:
            until = deadline(30)
            while b"master_link_status:up" not in rc.cmd("INFO", "replication"):
                self.assertLess(time.monotonic(), until, "the replica did not connect")
                time.sleep(0.05)
            keys = make_state(m, at=False)
            # 3 a day at Redis's clock: the replica's PEEK (0 left) in the
            # day of the master's 3 decisions
            wait_window_room(86400, 10)
            for _ in range(3):
                m.cmd("RL.ALLOW", "day", 3, "1d", "ALGO", "fixed-window")
            keys.append("day")
            self.assertEqual(m.cmd("WAIT", 1, 10000), 1)
            self.assertEqual(self.dumps(rc, keys), self.dumps(m, keys))
            self.assertEqual(rc.cmd("RL.PEEK", "day", 3, "1d", "ALGO", "fixed-window")[:3],
                             [0, 3, 0])
            self.assertEqual(rc.cmd("RL.ALLOW", "day", 3, "1d"),
                             RespError("READONLY You can't write against a read only replica."))


class Hammer(threading.Thread):
    """Decisions at Redis's clock on h:ALGO (one key per algorithm), on a
    connection of its own, from start() until stop(); bounded by `count`
    and in time.  Each changes the key's state (its clock at least)."""

    def __init__(self, port, count):
        super().__init__(daemon=True)
        self.port = port
        self.count = count
        self.done = 0
        self.error = None
        self.halt = threading.Event()

    def run(self):
        try:
            until = deadline(60)
            with RawConn(self.port, timeout=10) as c:
                while self.done < self.count and not self.halt.is_set() \
                        and time.monotonic() < until:
                    i = self.done % len(ALGOS)
                    got = c.cmd("RL.ALLOW", "h:%s" % ALGOS[i], 50, "1h", "ALGO", ALGOS[i])
                    if not isinstance(got, list) or len(got) != 6:
                        raise AssertionError("RL.ALLOW answered %r" % (got,))
                    self.done += 1
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self, test):
        self.halt.set()
        self.join(70)
        test.assertFalse(self.is_alive(), "the hammer did not stop")
        test.assertIsNone(self.error)
        return ["h:%s" % a for a in ALGOS]


class TestPropagation(ModuleCase):
    """With no AOF and no replica the module does not build the propagated
    decision (docs/module.md, "Numbers"); the moment either appears, every
    decision reaches it at its time, so the copies stay byte for byte the
    master's while decisions keep coming."""

    HAMMER = 200000  # a bound: the hammer runs until stop()

    def test_replica_attached_after_decisions(self):
        for mode, conf in (("disk", ["repl-diskless-sync", "no"]),
                           ("diskless", ["repl-diskless-sync", "yes",
                                         "repl-diskless-sync-delay", "1"])):
            with self.subTest(mode=mode):
                folder = tempfile.mkdtemp(dir=self.dir)
                master = self.redis(name="late-master-" + mode, folder=folder)
                replica = self.redis(name="late-replica-" + mode,
                                     folder=tempfile.mkdtemp(dir=self.dir))
                with master.conn() as m, replica.conn() as rc:
                    for k in range(0, len(conf), 2):
                        self.assertEqual(m.cmd("CONFIG", "SET", conf[k], conf[k + 1]), b"OK")
                    keys = make_state(m, at=False)
                    hammer = Hammer(master.port, self.HAMMER)
                    hammer.start()
                    # decisions flow while the replica syncs and after
                    self.assertEqual(rc.cmd("REPLICAOF", HOST, master.port), b"OK")
                    until = deadline(30)
                    while b"master_link_status:up" not in rc.cmd("INFO", "replication"):
                        self.assertLess(time.monotonic(), until, "the replica did not connect")
                        time.sleep(0.05)
                    for i in range(50):
                        m.cmd("RL.ALLOW", "after:%d" % (i % 5), 3, "1h")
                    synced = hammer.done
                    keys += hammer.stop(self) + ["after:%d" % i for i in range(5)]
                    self.assertGreater(synced, 0)
                    self.assertLess(hammer.done, self.HAMMER)
                    self.assertEqual(m.cmd("WAIT", 1, 10000), 1)
                    want = self.dumps(m, keys)
                    self.assertNotIn(None, want.values())
                    self.assertEqual(self.dumps(rc, keys), want)

    def test_aof_turned_on_mid_run(self):
        folder = tempfile.mkdtemp(dir=self.dir)
        r = self.redis(name="aof-late1", folder=folder)
        with r.conn() as c:
            keys = make_state(c, at=False)
            hammer = Hammer(r.port, self.HAMMER)
            hammer.start()
            self.assertEqual(c.cmd("CONFIG", "SET", "appendfsync", "always"), b"OK")
            self.assertEqual(c.cmd("CONFIG", "SET", "appendonly", "yes"), b"OK")
            until = deadline(30)
            while True:
                info = c.cmd("INFO", "persistence")
                if b"aof_rewrite_in_progress:0" in info and b"aof_rewrite_scheduled:0" in info \
                        and b"aof_last_bgrewrite_status:ok" in info and b"aof_enabled:1" in info:
                    break
                self.assertLess(time.monotonic(), until, "the first AOF rewrite did not end")
                time.sleep(0.05)
            rewritten = hammer.done
            for i in range(50):
                c.cmd("RL.ALLOW", "after:%d" % (i % 5), 3, "1h")
            keys += hammer.stop(self) + ["after:%d" % i for i in range(5)]
            self.assertGreater(rewritten, 0)
            self.assertLess(hammer.done, self.HAMMER)
            before = self.dumps(c, keys)
            self.assertNotIn(None, before.values())
        r.assert_clean_stop()
        r2 = self.redis(name="aof-late2", folder=folder, extra=["--appendonly", "yes"])
        with r2.conn() as c:
            self.assertEqual(self.dumps(c, keys), before)


class TestExpiry(ModuleCase):

    def test_idle_key_is_freed_at_rest_never_before(self):
        r = self.redis()
        with r.conn() as c:
            t0 = time.monotonic()
            got = c.cmd("RL.ALLOW", "idle", 2, "1s", "ALGO", "sliding-window")
            ttl = c.cmd("PTTL", "idle")
            since_ms = (time.monotonic() - t0) * 1000  # however long a loaded machine took
            # the state comes to rest reset_after_ms after the decision:
            # the TTL is at least that, less the time since
            self.assertTrue(0 < ttl, ttl)
            self.assertGreaterEqual(ttl + since_ms + 1, got[4])
            self.assertLessEqual(ttl, got[4] + 1)
            # a denied-forever request (cost above the limit) keeps nothing alive longer
            c.cmd("RL.ALLOW", "never", 1, "1h", "COST", 2)
            until = deadline(10)
            while c.cmd("EXISTS", "idle") == 1:
                self.assertLess(time.monotonic(), until, "the idle key was not freed")
                time.sleep(0.02)
            # a key whose state is not at rest keeps its TTL
            c.cmd("RL.ALLOW", "busy", 1, "1h", "ALGO", "fixed-window")
            self.assertGreater(c.cmd("PTTL", "busy"), 0)

    def test_client_time_keeps_keys_an_hour(self):
        r = self.redis("trust-client-time", "yes", "max-client-skew", "7d")
        with r.conn() as c:
            c.cmd("RL.ALLOW", "ct", 2, "100ms", "AT", BASE)
            self.assertGreater(c.cmd("PTTL", "ct"), 3500000)
            c.cmd("RL.ALLOW", "ct2", 2, "2h", "AT", BASE)
            self.assertGreater(c.cmd("PTTL", "ct2"), 3600000)


if __name__ == "__main__":
    unittest.main()
