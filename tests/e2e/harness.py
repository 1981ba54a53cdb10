"""harness.py -- what the end-to-end tests share: a real sluiced to talk to,
a raw RESP connection, and the spec's vectors.

Server: starts $SLUICE_BUILD/sluiced (default build/sluiced) with --port 0,
so the kernel picks a free 127.0.0.1 port atomically (no probe-then-bind
race), reads the port from the "listening" log line, and waits (bounded)
until it answers PING.  HTTP (--http-port, on by default at 8390) is
off (`--http-port 0`) unless the test asks for it with http=True: then
`--http-port any` has the kernel pick its port too, read from the
"listening ... http=yes" line into Server.http_port (http_conn() opens an
http.client connection to it).  Its log goes to LOG_DIR; the runner (run_e2e.py)
deletes LOG_DIR when every test passed and prints the failed tests' logs
otherwise.

Stopping: every way a test's server ends up stopped by the harness is
SIGTERM, a generous wait (STOP_SECONDS, scaled), and only then SIGKILL --
which is itself a failure.  Then its log is scanned for sanitizer reports
(SANITIZER_MARKS); a report, a crash signal or a forced kill fails the test
that started the server (Server.check).  The paths: assert_clean_stop(), a
test's cleanup (`self.addCleanup(s.kill)` -- while unittest runs cleanups,
Server.kill means "clean up", see below), ServerTestCase.new_server(),
tearDownClass for a class's shared server, run_e2e.py after each test (any
server the test left running) and at exit.  Only a Server.kill() called
from a test's body is a real `kill -9` (persistence tests crash a server on
purpose); its log is still scanned at cleanup.

RawConn: a socket speaking RESP byte for byte, for pipelines, hostile input
and exact error lines (client libraries hide those).  Every read has a
deadline: no test can hang.

Times: tests that need exact replies start sluiced with --trust-client-time
and send `AT t` with t = BASE + offset.  BASE is a whole day at least 24 h
in the future: every window of the tests divides it (so window boundaries
fall where the spec vectors expect them), and the server's active expiry,
which runs on its wall clock, never finds such a key finished.  Such a
server is started with `--max-client-skew 7d` so that it accepts them.
A test that decides at the server's own clock instead (rules over gRPC,
forward-auth, no AT) and counts across calls of a fixed window calls
wait_window_room(unit_s, need_s) first: windows start on the second,
minute, hour and day, and calls straddling one see a fresh counter.
"""

import os
import re
import select
import signal
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

ROOT = os.environ.get("SLUICE_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SLUICE_BUILD") or os.path.join(ROOT, "build")
SLUICED = os.path.join(BUILD, "sluiced")
HOST = "127.0.0.1"

# Sanitizer builds run several times slower: every deadline is scaled.
KIND = next((k for k in ("asan", "tsan") if k in BUILD.rstrip("/").split("/")[-1]), "plain")
SANITIZED = KIND != "plain"
# A memory bound a test asserts on sluiced's RSS is multiplied by this:
# TSan's shadow memory and allocator make each byte held cost several more
# than plain's and ASan's (measured: 2-3x on test_grpc_hostile's bodies).
RSS_SCALE = 4 if KIND == "tsan" else 1
SLOW = float(os.environ.get("SLUICE_E2E_SLOW", "4" if SANITIZED else "1"))

LOG_DIR = os.environ.get("SLUICE_E2E_LOGS") or tempfile.mkdtemp(prefix="sluice-e2e-")
os.makedirs(LOG_DIR, exist_ok=True)

DAY = 86400000
BASE = (int(time.time() * 1000) // DAY + 2) * DAY

# Every server ever started, so the runner can show logs and stop leftovers.
STARTED = []

# How long a SIGTERMed server may take to exit before SIGKILL (scaled by
# SLOW): generous, since a forced kill is a failure.
STOP_SECONDS = 30

# What a sanitizer writes when it finds something (ASan, LSan, UBSan, TSan).
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer")

# Signals a server dies of only by a bug (the harness sends SIGTERM/SIGKILL).
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)


def deadline(seconds):
    """A monotonic deadline `seconds` (scaled for sanitizers) from now."""
    return time.monotonic() + seconds * SLOW


# How far sluiced's clock may be from this process's: it reads the time once
# per loop turn, as the wall clock at its start plus the monotonic clock.
WINDOW_SLACK = 0.25 * SLOW


def wait_window_room(unit_s, need_s):
    """Returns once the current wall-clock window of `unit_s` seconds has at
    least `need_s` seconds left, so that calls a test makes within need_s of
    the return all count in one window.  Windows are aligned to t = 0 (SPEC
    §2's fixed-window; the rules' units: 1 second, 60 minute, 3600 hour,
    86400 day), so sluiced's counter resets on the second, minute, hour or
    day: a test that asserts counts or `remaining` across calls of such a
    window must call this first, or its calls can straddle a boundary and
    see a fresh counter.

    need_s is scaled by SLOW (sanitizer builds run slower) and then capped
    at 3/4 of unit_s, so that it can always be met; a 1 s window thus gives
    at most 0.75 s, too little under load: such a test should count on a
    longer unit where its point allows.  Besides the need, WINDOW_SLACK
    (at most a tenth of the unit) is kept on both sides of a boundary, for
    sluiced's clock may read a little behind or ahead of this process's.

    Waits only through the current window's last need (and the next one's
    first slack) and returns early in the next window: never longer than
    need + 2 slack -- also for hour and day windows, where a fresh window is
    cheap to wait for only near the end of one, the one case in which this
    waits.  Returns at once otherwise.

    Windows nest (60 divides 3600 divides 86400): room left in the minute
    is as much room left in the hour and the day, so one guard on the
    shortest unit a test counts on covers its longer ones.

    Returns the wall-clock time (seconds since the epoch) at which the
    window ends: a caller may check that its calls ended before it.

    Not for a server deciding at a time the request carries (`AT t`,
    `&at=`, BASE with --trust-client-time): its windows do not move with
    the wall clock, and such tests need no guard."""
    need = min(need_s * SLOW, unit_s * 0.75)
    slack = min(WINDOW_SLACK, unit_s * 0.1)
    while True:
        now = time.time()
        into = now % unit_s
        left = unit_s - into
        if into >= slack and left >= need + slack:
            return now + left
        # past the need: sleep to just after the boundary (+ slack)
        wake = left + slack if left < need + slack else slack - into
        time.sleep(min(max(wake, 0.005), 0.05))


def spec_dir():
    """The spec folder: $SLUICE_SPEC_DIR when set (and only it, as
    tests/run.sh), else beside the repo, else /work/shared/spec."""
    if os.environ.get("SLUICE_SPEC_DIR"):
        d = os.environ["SLUICE_SPEC_DIR"]
        return d if os.path.isdir(os.path.join(d, "vectors")) else None
    for d in (os.path.join(ROOT, "..", "shared", "spec"), "/work/shared/spec"):
        if d and os.path.isdir(os.path.join(d, "vectors")):
            return d
    return None


def load_vectors():
    """[(file name, RL.ALLOW options, [(t, key, cost or None, [6 ints])])] for
    every vector file of the spec.  The options come from the `# args:` line,
    translated from `sluice replay` flags to RL.ALLOW options."""
    d = spec_dir()
    if d is None:
        raise unittest.SkipTest("no spec folder: set SLUICE_SPEC_DIR")
    out = []
    for name in sorted(os.listdir(os.path.join(d, "vectors"))):
        path = os.path.join(d, "vectors", name)
        opts = None
        rows = []
        with open(path) as f:
            for line in f:
                line = line.strip()
                m = re.match(r"#\s*args:\s*(.*)$", line)
                if m:
                    opts = replay_args_to_options(m.group(1).split())
                    continue
                if not line or line.startswith("#"):
                    continue
                req, want = line.split("|")
                req = req.split()
                rows.append((int(req[0]), req[1], int(req[2]) if len(req) > 2 else None,
                             [int(x) for x in want.split()]))
        if opts is None:
            raise AssertionError("%s: no '# args:' line" % path)
        out.append((name, opts, rows))
    return out


def replay_args_to_options(args):
    """`--algo A --limit L --window W [--burst B] [--precision P]
    [--log-rejected]` -> (L, W, [RL.ALLOW options])."""
    limit = window = None
    opts = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--log-rejected":
            opts.append("LOGREJECTED")
            i += 1
            continue
        v = args[i + 1]
        i += 2
        if a == "--limit":
            limit = v
        elif a == "--window":
            window = v
        elif a in ("--algo", "--burst", "--precision"):
            opts += [a[2:].upper(), v]
        else:
            raise AssertionError("unknown replay flag in a vector file: %s" % a)
    return limit, window, opts


# ---- RESP -------------------------------------------------------------------

class RespError(Exception):
    """An error reply; .line is the whole line without '-' and CRLF."""

    def __init__(self, line):
        super().__init__(line)
        self.line = line

    def __eq__(self, other):
        return isinstance(other, RespError) and other.line == self.line

    def __hash__(self):
        return hash(self.line)

    def __repr__(self):
        return "RespError(%r)" % self.line


class Incomplete(Exception):
    pass


class Map(dict):
    """A RESP3 map (%): its pairs, in the order sent."""


class Set(list):
    """A RESP3 set (~), as a list in the order sent."""


class Verbatim(bytes):
    """A RESP3 verbatim string (=): the text, with .fmt ("txt", "mkd")."""

    def __new__(cls, fmt, text):
        v = super().__new__(cls, text)
        v.fmt = fmt
        return v


def encode(*args):
    """One command as a RESP multibulk."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def parse_reply(buf, pos=0):
    """Parses one RESP2 or RESP3 reply at buf[pos:].  Returns (value, new
    pos) or raises Incomplete.  Simple strings and bulks are bytes, integers
    int, nulls None, errors RespError (returned, not raised), arrays lists;
    RESP3's maps Map, sets Set, verbatim strings Verbatim, booleans bool,
    doubles float.  A malformed reply raises ValueError."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete()
    kind, line = buf[pos:pos + 1], bytes(buf[pos + 1:end])
    nxt = end + 2
    if kind == b"+":
        return line, nxt
    if kind == b"-":
        return RespError(line.decode("utf-8", "replace")), nxt
    if kind == b":":
        return int(line), nxt
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            raise Incomplete()
        if buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise ValueError("bulk reply not followed by CRLF at %d" % (nxt + n))
        return bytes(buf[nxt:nxt + n]), nxt + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            v, nxt = parse_reply(buf, nxt)
            items.append(v)
        return items, nxt
    # RESP3
    if kind == b"_" and line == b"":
        return None, nxt
    if kind == b"#" and line in (b"t", b"f"):
        return line == b"t", nxt
    if kind == b",":
        return float(line), nxt
    if kind in (b"%", b"~"):
        n = int(line)
        items = []
        for _ in range(2 * n if kind == b"%" else n):
            v, nxt = parse_reply(buf, nxt)
            items.append(v)
        if kind == b"~":
            return Set(items), nxt
        return Map(zip(items[::2], items[1::2])), nxt
    if kind == b"=":
        n = int(line)
        if len(buf) < nxt + n + 2:
            raise Incomplete()
        if n < 4 or buf[nxt + 3:nxt + 4] != b":" or buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise ValueError("malformed verbatim string at %d" % pos)
        return Verbatim(bytes(buf[nxt:nxt + 3]).decode(), bytes(buf[nxt + 4:nxt + n])), nxt + n + 2
    raise ValueError("not a RESP reply: %r" % bytes(buf[pos:pos + 40]))


class RawConn:
    """A plain TCP connection to sluiced that speaks RESP by hand."""

    def __init__(self, port, timeout=10):
        self.sock = socket.create_connection((HOST, port), timeout=timeout * SLOW)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.reset = False  # the server closed with a reset, not a FIN

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def cmd(self, *args, timeout=10):
        """Sends one command and returns its reply."""
        self.send(encode(*args))
        return self.read_reply(timeout)

    def _fill(self, until):
        """Reads more bytes; False on EOF.  Raises TimeoutError at `until`."""
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply within the deadline (have %d unparsed bytes: %r)"
                               % (len(self.buf) - self.pos, bytes(self.buf[self.pos:self.pos + 80])))
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return self._fill(until)
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            self.reset = True
            data = b""
        if not data:
            self.eof = True
            return False
        if self.pos > (1 << 20):
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data
        return True

    def read_reply(self, timeout=10):
        """The next reply; raises EOFError if the server closed first."""
        until = deadline(timeout)
        while True:
            try:
                v, self.pos = parse_reply(self.buf, self.pos)
                return v
            except Incomplete:
                pass
            if self.eof or not self._fill(until):
                raise EOFError("connection closed by the server; unparsed bytes: %r"
                               % bytes(self.buf[self.pos:self.pos + 80]))

    def read_replies(self, n, timeout=30):
        until = deadline(timeout)
        out = []
        while len(out) < n:
            try:
                v, self.pos = parse_reply(self.buf, self.pos)
                out.append(v)
                continue
            except Incomplete:
                pass
            if self.eof or not self._fill(until):
                raise EOFError("connection closed after %d of %d replies" % (len(out), n))
        return out

    def read_until_eof(self, timeout=10):
        """Every reply up to the server's close (bounded); raises TimeoutError
        if the connection stays open."""
        until = deadline(timeout)
        out = []
        while True:
            try:
                v, self.pos = parse_reply(self.buf, self.pos)
                out.append(v)
                continue
            except Incomplete:
                pass
            try:
                more = not self.eof and self._fill(until)
            except TimeoutError:
                raise TimeoutError("the connection stayed open; replies so far: %r"
                                   % ([repr(x)[:100] for x in out][:5],)) from None
            if not more:
                rest = bytes(self.buf[self.pos:])
                if rest:
                    raise ValueError("connection closed after a partial reply: %r" % rest[:80])
                return out


# ---- the server -------------------------------------------------------------

LISTEN_RE = re.compile(rb'msg="?listening"? addr=127\.0\.0\.1:(\d+)')
HTTP_LISTEN_RE = re.compile(rb'msg="?listening"? addr=127\.0\.0\.1:(\d+) threads=\d+ http=yes')
GRPC_LISTEN_RE = re.compile(rb'msg="?listening"? addr=127\.0\.0\.1:(\d+) threads=\d+ grpc=yes')



def threads_of(pid):
    """Where a process that will not stop is, for the failure message: each
    thread's stack from gdb when it is installed, else each thread's name,
    state, kernel wait channel and signal masks from /proc (bounded)."""
    out = []
    if shutil.which("gdb"):
        try:
            p = subprocess.run(["gdb", "-batch", "-nx", "-p", str(pid),
                                "-ex", "thread apply all bt 30"],
                               capture_output=True, timeout=60)
            text = p.stdout.decode("utf-8", "replace")
            out.append("\n".join(l for l in text.splitlines()
                                  if l.startswith(("Thread ", "#")))[:20000])
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append("gdb: %s" % e)
    try:
        for tid in sorted(os.listdir("/proc/%d/task" % pid))[:64]:
            base = "/proc/%d/task/%s/" % (pid, tid)
            fields = {}
            with open(base + "status") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k in ("Name", "State", "SigPnd", "SigBlk", "ShdPnd"):
                        fields[k] = v.strip()
            with open(base + "wchan") as f:
                fields["wchan"] = f.read().strip()
            out.append("task %s: %s" % (tid, " ".join("%s=%s" % kv for kv in fields.items())))
    except OSError as e:
        out.append("/proc: %s" % e)
    return "\n".join(out)

class Server:
    """One sluiced process.  `args` are extra flags; `port=0` lets the kernel
    choose a free port."""

    def __init__(self, *args, name="sluiced", port=0, trust_client_time=False, log_level=None,
                 threads=None, user=None, http=False, grpc=False):
        self.args = [str(a) for a in args]
        self.http = http
        self.grpc = grpc  # True: --grpc-port any, read into grpc_port (else --grpc-port 0)
        if trust_client_time:
            # BASE is up to two days ahead of the server's clock: allow it
            # (the default --max-client-skew, 1h, is tested in test_clock.py)
            self.args += ["--trust-client-time", "--max-client-skew", "7d"]
        if threads is not None:
            self.args += ["--threads", str(threads)]
        if log_level:
            self.args += ["--log-level", log_level]
        self.want_port = port
        self.user = user  # a uid to run as (its gid, no other groups): what it may not do
        self.name = name
        self.proc = None
        self.port = None
        self.http_port = None
        self.grpc_port = None
        self.log_path = None
        self.returncode = None
        self.forced = None       # why stop() had to SIGKILL, if it did
        self._reported = set()   # problems check() already returned

    @property
    def pid(self):
        return self.proc.pid

    def start(self, timeout=15):
        """Starts and waits until it answers PING.  Raises AssertionError
        with the log on failure."""
        n = len(STARTED)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", self.name)
        self.log_path = os.path.join(LOG_DIR, "%03d-%s.log" % (n, safe))
        self.returncode = None
        self.forced = None
        self._reported = set()
        log = open(self.log_path, "wb")
        argv = [SLUICED, "--port", str(self.want_port),
                "--http-port", "any" if self.http else "0",
                "--grpc-port", "any" if self.grpc else "0"] + self.args
        log.write(("# " + " ".join(argv) + "\n").encode())
        log.flush()
        as_user = {} if self.user is None else dict(user=self.user, group=self.user,
                                                       extra_groups=[])
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=LOG_DIR, **as_user)
        log.close()
        STARTED.append(self)
        until = deadline(timeout)
        while time.monotonic() < until:
            text = self.log_bytes()
            m = LISTEN_RE.search(text)
            h = HTTP_LISTEN_RE.search(text) if self.http else True
            g = GRPC_LISTEN_RE.search(text) if self.grpc else True
            if m and h and g:
                self.port = int(m.group(1))
                if self.http:
                    self.http_port = int(h.group(1))
                if self.grpc:
                    self.grpc_port = int(g.group(1))
                break
            if self.proc.poll() is not None:
                raise AssertionError("sluiced exited with status %s at start:\n%s"
                                     % (self.proc.returncode, self.log()))
            time.sleep(0.02)
        else:
            self._give_up("sluiced did not log its address within %ss" % (timeout * SLOW))
        while time.monotonic() < until:
            try:
                with RawConn(self.port, timeout=2) as c:
                    v = c.cmd("PING", timeout=2)
                    # with a password configured, NOAUTH is its answer
                    if v == b"PONG" or v == RespError("NOAUTH Authentication required."):
                        return self
            except (OSError, EOFError, TimeoutError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self._give_up("sluiced did not answer PING")

    def _give_up(self, why):
        """A start that failed: stops the server (SIGTERM first) and raises
        AssertionError with why, anything check() finds, and the log."""
        self.stop(timeout=10)
        problems = self.check()
        raise AssertionError("%s%s:\n%s" % (why, "; " + "; ".join(problems) if problems else "",
                                            self.log()))

    def log_bytes(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def log(self):
        return self.log_bytes().decode("utf-8", "replace")

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_SECONDS):
        """SIGTERM, wait up to `timeout` seconds (scaled), then SIGKILL, which
        check() reports as a failure.  Returns the exit status (negative:
        killed by that signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                where = threads_of(self.proc.pid)
                self.proc.kill()
                self.proc.wait(10)
                self.forced = ("did not exit within %gs of SIGTERM, killed with SIGKILL\n%s"
                               % (timeout * SLOW, where))
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        """SIGKILL, as a crash or `kill -9` would -- when a test calls it.
        As a test's cleanup (`self.addCleanup(s.kill)`, run by unittest's
        doCleanups) it is cleanup(): SIGTERM and check, never kill -9."""
        if _CLEANING:
            return self.cleanup()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.returncode = self.proc.returncode if self.proc else None
        return self.returncode

    def cleanup(self):
        """The end of a server's life in a test: if still running, stop() it,
        and it must then exit with status 0; in any case check() its log.
        Raises AssertionError (failing the test that runs it) on any problem."""
        if self.proc is None:
            return
        problems = []
        if self.proc.poll() is None:
            rc = self.stop()
            if rc != 0 and not self.forced:
                problems.append("exit status %s after SIGTERM" % rc)
        problems += self.check()
        if problems:
            raise AssertionError("sluiced (%s, pid %s): %s\n%s"
                                 % (self.name, self.proc.pid, "; ".join(problems),
                                    self.log()[-4000:]))

    def check(self):
        """What went wrong with this server that has not been reported yet:
        a forced SIGKILL by stop(), death by a crash signal, sanitizer
        reports in its log.  Each problem is returned once."""
        if self.proc is None:
            return []
        problems = []
        if self.forced:
            problems.append(self.forced)
        rc = self.proc.poll()
        if rc is not None and rc < 0 and -rc in CRASH_SIGNALS:
            problems.append("died of signal %d (%s)" % (-rc, signal.Signals(-rc).name))
        reports = self.sanitizer_reports()
        if reports:
            problems.append("sanitizer: %s" % ", ".join(reports))
        new = [p for p in problems if p not in self._reported]
        self._reported.update(new)
        return new

    def sanitizer_reports(self):
        text = self.log()
        return [m for m in SANITIZER_MARKS if m in text]

    # -- clients --

    def raw(self, timeout=10):
        return RawConn(self.port, timeout)

    def redis(self, **kw):
        import redis
        kw.setdefault("socket_timeout", 20 * SLOW)
        kw.setdefault("socket_connect_timeout", 10 * SLOW)
        return redis.Redis(host=HOST, port=self.port, **kw)

    def http_conn(self, timeout=10):
        """An http.client connection to the HTTP port (started with http=True)."""
        import http.client
        return http.client.HTTPConnection(HOST, self.http_port, timeout=timeout * SLOW)

    def info(self, section=None):
        """INFO [section] as a dict of str -> str (over a fresh connection)."""
        with self.raw() as c:
            v = c.cmd("INFO", section) if section else c.cmd("INFO")
        if isinstance(v, RespError):
            raise AssertionError("INFO failed: %s" % v.line)
        return parse_info(v)

    def sole_client(self, timeout=10):
        """A RawConn that has seen, in INFO, that it is the server's only
        client: connections closed before (the start-up probe, INFO's own)
        are then no longer counted against --max-clients, which a test of
        that limit must know (a lingering one refused a client under ASan
        and TSan).  Raises AssertionError if another stays past timeout."""
        c = self.raw()
        until = deadline(timeout)
        while True:
            n = int(parse_info(c.cmd("INFO", "clients"))["connected_clients"])
            if n == 1:
                return c
            if time.monotonic() >= until:
                c.close()
                raise AssertionError("connected_clients stayed at %d: a client from "
                                     "before the test is still connected" % n)
            time.sleep(0.02)

    def info_int(self, field, section=None):
        return int(self.info(section)[field])

    def wait_info(self, field, pred, section=None, timeout=20, what=""):
        """Polls INFO until pred(int(field)) holds (bounded).  Returns the
        value; raises AssertionError with the last value otherwise."""
        until = deadline(timeout)
        v = None
        while time.monotonic() < until:
            v = self.info_int(field, section)
            if pred(v):
                return v
            time.sleep(0.02)
        raise AssertionError("INFO %s stayed at %s %s" % (field, v, what))

    def wait_log(self, pattern, timeout=20):
        """Polls the log until regex pattern matches (bounded: timeout x
        SLOW seconds): a counter can show an event before the log line that
        tells it is written.  Returns the match; raises AssertionError with
        the log's tail otherwise."""
        until = deadline(timeout * SLOW)
        while True:
            m = re.search(pattern, self.log())
            if m or time.monotonic() >= until:
                break
            time.sleep(0.02)
        if m is None:
            raise AssertionError("the log never matched %r:\n%s" % (pattern, self.log()[-4000:]))
        return m

    def wait_section(self, section, pred, what, timeout=20):
        """Polls INFO section until pred(its fields, a dict) holds, within
        timeout x SLOW seconds.  Returns the fields; raises AssertionError
        naming what was awaited, with the last fields, otherwise."""
        until = deadline(timeout * SLOW)
        info = None
        while time.monotonic() < until:
            info = self.info(section)
            if pred(info):
                return info
            time.sleep(0.02)
        raise AssertionError("INFO never showed %s: %r" % (what, info))

    def rss_kb(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def parse_info(raw):
    out = {}
    for line in raw.decode("utf-8", "replace").split("\r\n"):
        if not line or line.startswith("#"):
            continue
        k, _, v = line.partition(":")
        out[k] = v
    return out



class ScratchDirCase(unittest.TestCase):
    """A test with a scratch folder of its own (self.dir, removed after the
    test) and write(name, text) -> the path of a file written there.
    SCRATCH_PREFIX names the folder (short where paths go into messages)."""
    SCRATCH_PREFIX = "sluice-"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix=self.SCRATCH_PREFIX)
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

class ServerTestCase(unittest.TestCase):
    """Base class: one shared server per class (SERVER_ARGS), stopped by PID
    in tearDownClass, which fails the class if it does not exit cleanly with
    status 0 after SIGTERM or if a sanitizer reported anything."""

    SERVER_ARGS = ()
    TRUST = True
    HTTP = False  # True: the class's server also serves HTTP (Server.http_port)

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(*cls.SERVER_ARGS, name=cls.__name__, trust_client_time=cls.TRUST,
                         http=cls.HTTP)
        cls.srv.start()

    @classmethod
    def tearDownClass(cls):
        try:
            assert_clean_stop(cls.srv)
        finally:
            d = cls.__dict__.get("dir")
            if d is not None:
                shutil.rmtree(d, True)

    @classmethod
    def class_dir(cls, prefix):
        """A temporary folder for the class's files (rules, configs,
        snapshots), as cls.dir; removed after the class's server stopped."""
        cls.dir = tempfile.mkdtemp(prefix=prefix)
        return cls.dir

    def new_server(self, *args, name=None, **kw):
        """A server of this test's own, stopped (by PID) when the test ends."""
        s = Server(*args, name=name or self.id().split(".")[-1], **kw)
        s.start()
        self.addCleanup(s.cleanup)
        return s

    def assertAllow(self, reply, allowed, limit, remaining, retry, reset, delay=0, msg=None):
        self.assertEqual(reply, [allowed, limit, remaining, retry, reset, delay], msg)


def assert_clean_stop(srv):
    """Stops srv (SIGTERM, see Server.stop) and raises AssertionError unless
    it exited with status 0 and check() finds nothing."""
    rc = srv.stop()
    problems = srv.check()
    if rc != 0 or problems:
        raise AssertionError("sluiced (%s) did not stop cleanly on SIGTERM: status %s%s\n%s"
                             % (srv.name, rc, "; " + "; ".join(problems) if problems else "",
                                srv.log()[-4000:]))


# While unittest runs a test's cleanups, Server.kill is the cleanup path
# (SIGTERM + check), not a deliberate kill -9: tests register their servers
# with `self.addCleanup(s.kill)`, and a cleanup must neither skip a
# sanitizer's exit-time checks (leaks) nor hide a server that hangs on
# SIGTERM.  A failure raised there fails the test that ran the cleanup.
_CLEANING = False
_do_cleanups = unittest.TestCase.doCleanups


def _do_cleanups_stopping(self):
    global _CLEANING
    was, _CLEANING = _CLEANING, True
    try:
        return _do_cleanups(self)
    finally:
        _CLEANING = was


unittest.TestCase.doCleanups = _do_cleanups_stopping



def read_close(sock, limit=1 << 20):
    """Everything sock receives until the peer closes it (a reset counts as
    the close), bounded by limit and by the socket's timeout, which raises."""
    out = b""
    while len(out) < limit:
        try:
            d = sock.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        out += d
    return out

def run_checked(argv, **kw):
    """subprocess.run(argv, **kw) for a sluiced that runs to its end by
    itself (a start it must refuse, --dump-options, --help): its output,
    captured (capture_output, unless the caller redirects it), is scanned
    as a server's log is.  A sanitizer report (SANITIZER_MARKS) or a death
    by a crash signal raises AssertionError, whatever exit status the test
    expects.  Returns the CompletedProcess."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    p = subprocess.run(argv, **kw)
    out = b""
    for part in (p.stdout, p.stderr):
        if part:
            out += part if isinstance(part, bytes) else part.encode()
    text = out.decode("utf-8", "replace")
    problems = [m for m in SANITIZER_MARKS if m in text]
    if p.returncode < 0 and -p.returncode in CRASH_SIGNALS:
        problems.append("died of signal %d (%s)" % (-p.returncode,
                                                     signal.Signals(-p.returncode).name))
    if problems:
        raise AssertionError("%s: %s\n%s" % (" ".join(str(a) for a in argv[:6]),
                                               "; ".join(problems), text[-4000:]))
    return p


def free_port():
    """A port free right now, for the few tests that must name one (a
    server refusing to start: nothing may listen there afterwards)."""
    s = socket.socket()
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def nothing_listening(port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((HOST, port))
        return False
    except OSError:
        return True
    finally:
        s.close()


class RedisServer:
    """A redis-server of a test's own on a free loopback port (the Redis
    backend's tests): no snapshots unless `appendonly_dir` is given (then
    every write is in an append-only file there, so a restart keeps it).
    Stopped by its PID only: stop() (SIGTERM, a generous wait, then SIGKILL,
    which is a failure), kill() (SIGKILL: a crash), pause()/resume()
    (SIGSTOP and SIGCONT: a stalled server).  `password` sets requirepass.
    `module_args` (a list, may be empty) loads the build's sluice.so with
    those module arguments (a sanitized build's with its runtime preloaded);
    `loadable` preloads that runtime without loading it, for a MODULE LOAD
    later.

    Its log (redis.log in its folder, appended across restarts) is scanned
    as sluiced's is (REDIS_MARKS: a sanitizer's report from inside the
    module, Redis's own crash report): cleanup() -- a test's cleanup, and
    run_e2e.py after each test for every redis-server the test created --
    raises AssertionError for a report, a crash signal, a forced kill or a
    nonzero status after SIGTERM, failing the test that started it."""

    def __init__(self, password=None, appendonly_dir=None, module_args=None, loadable=False,
                 cluster=False):
        self.password = password
        self.module_args = module_args
        self.loadable = loadable or module_args is not None  # MODULE LOAD may come later
        self.cluster = cluster  # --cluster-enabled yes (a node of RedisCluster)
        self.dir = appendonly_dir or tempfile.mkdtemp(prefix="sluice-redis-")
        self.own_dir = appendonly_dir is None
        self.appendonly = appendonly_dir is not None
        self.log_path = os.path.join(self.dir, "redis.log")
        self.port = None
        self.proc = None
        self.problems = []    # found by stop() or check(), not yet reported
        self._scanned = 0     # bytes of the log check() has read
        self._cleaned = False
        REDIS_STARTED.append(self)

    def start(self, timeout=15):
        """Starts (on the same port as before after a stop) and waits until
        it answers PING.  A port taken meanwhile is tried again on another
        (bounded), the first time only."""
        self._cleaned = False
        for _ in range(5):
            port = self.port or free_port()
            # a cluster node's bus is its port + 10000: Redis refuses a
            # port above 55535 (a free port often is one)
            for _ in range(100):
                if not self.cluster or port <= 55535:
                    break
                port = free_port()
            argv = ["redis-server", "--port", str(port), "--bind", HOST, "--save", "",
                    "--dir", self.dir, "--appendonly", "yes" if self.appendonly else "no",
                    "--appendfsync", "always", "--daemonize", "no", "--protected-mode", "no"]
            if self.password:
                argv += ["--requirepass", self.password]
            env = module_env() if self.loadable else None
            if self.loadable:
                argv += ["--enable-module-command", "yes"]
            if self.module_args is not None:
                argv += ["--loadmodule", MODULE] + list(self.module_args)
            if self.cluster:
                argv += ["--cluster-enabled", "yes", "--cluster-config-file",
                         os.path.join(self.dir, "nodes-%d.conf" % port),
                         "--cluster-node-timeout", "2000",
                         "--cluster-require-full-coverage", "no"]
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env)
            log.close()
            until = deadline(timeout)
            while time.monotonic() < until and self.proc.poll() is None:
                try:
                    with RawConn(port, timeout=2) as c:
                        v = c.cmd("PING", timeout=2)
                        if v == b"PONG" or (isinstance(v, RespError) and "NOAUTH" in v.line):
                            self.port = port
                            return self
                except (OSError, EOFError, TimeoutError):
                    pass
                time.sleep(0.02)
            self.stop()
            problems = self.check()
            if problems:
                raise AssertionError("redis-server did not start: %s\n%s"
                                     % ("; ".join(problems), self.log()[-4000:]))
            if self.port is not None:
                break
        raise AssertionError("redis-server did not start:\n%s" % self.log()[-4000:])

    def url(self, password=None):
        auth = ":%s@" % password if password else ""
        return "redis://%s%s:%d" % (auth, HOST, self.port)

    def cmd(self, *args):
        """One command on a fresh connection (AUTH first with a password)."""
        with RawConn(self.port, timeout=10) as c:
            if self.password:
                c.cmd("AUTH", self.password)
            return c.cmd(*args)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        """SIGKILL by PID, as a crash would (a test's own choice: not a
        failure; the log is still scanned by cleanup())."""
        if self.running():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout=STOP_SECONDS):
        """SIGCONT (it may be paused), SIGTERM by PID, a wait of `timeout`
        seconds (scaled), then SIGKILL.  A forced kill, or a status other
        than 0 after SIGTERM, is kept for check() to report."""
        if not self.running():
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout * SLOW)
            if rc != 0:
                self.problems.append("exit status %s after SIGTERM" % rc)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            self.problems.append("did not exit within %gs of SIGTERM, killed with SIGKILL"
                                 % (timeout * SLOW))

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def check(self):
        """What went wrong that has not been reported yet: stop()'s findings,
        death by a crash signal, and in the log written since the last
        check, a sanitizer report or Redis's crash report (REDIS_MARKS).
        Each is returned once."""
        problems, self.problems = self.problems, []
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is not None and rc < 0 and -rc in CRASH_SIGNALS:
                msg = "died of signal %d (%s)" % (-rc, signal.Signals(-rc).name)
                if msg not in problems:
                    problems.append(msg)
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._scanned)
                text = f.read()
        except OSError:
            text = b""
        self._scanned += len(text)
        text = text.decode("utf-8", "replace")
        marks = [m for m in REDIS_MARKS if m in text]
        if marks:
            problems.append("report in its log: %s" % ", ".join(marks))
        return problems

    def cleanup(self):
        """The end of its life in a test: stop() if running, check(), remove
        its own folder.  Raises AssertionError (with the log's end) on any
        problem; a second call does nothing."""
        if self._cleaned:
            return
        self.stop()
        problems = self.check()
        tail = self.log()[-6000:] if problems else ""
        self._cleaned = True
        if self.own_dir:
            shutil.rmtree(self.dir, True)
        if problems:
            raise AssertionError("redis-server (port %s, pid %s): %s\n%s"
                                 % (self.port, self.proc.pid if self.proc else "?",
                                    "; ".join(problems), tail))


# What Redis writes when it crashes or panics (a module's assertion, a
# signal), on top of a sanitizer's report from inside the module.
REDIS_MARKS = SANITIZER_MARKS + ("REDIS BUG REPORT", "crashed by signal")


# The build's Redis module, and the environment a redis-server loading it
# needs: a sanitized build's runtime preloaded (Debian's redis-server is not
# sanitized), leaks not checked (Redis's allocations are not ours).
MODULE = os.path.join(BUILD, "sluice.so")


def module_env():
    env = dict(os.environ)
    kind = os.path.basename(BUILD.rstrip("/"))
    lib = {"asan": "libasan.so", "tsan": "libtsan.so"}.get(kind)
    if lib is None:
        return env
    env["LD_PRELOAD"] = subprocess.run(["gcc", "-print-file-name=" + lib], capture_output=True,
                                       text=True, check=True).stdout.strip()
    if kind == "asan":
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:exitcode=99"
    else:
        env["TSAN_OPTIONS"] = "exitcode=99:report_signal_unsafe=0"
    return env


class RedisCluster:
    """A Redis Cluster of n masters (no replicas) of a test's own: n
    redis-servers with --cluster-enabled yes on free loopback ports, joined
    by `redis-cli --cluster create`, ready when every node says
    cluster_state:ok and agrees on the slots.  A master lost leaves the
    others serving their slots (cluster-require-full-coverage no).  Each
    node is a RedisServer: stopped by its PID only.  `module_args` loads
    the build's sluice.so into every node (as RedisServer's)."""

    def __init__(self, n=3, module_args=None):
        self.nodes = [RedisServer(cluster=True, module_args=module_args) for _ in range(n)]

    def start(self, timeout=60):
        for r in self.nodes:
            r.start()
        p = subprocess.run(["redis-cli", "--cluster", "create"] +
                           ["%s:%d" % (HOST, r.port) for r in self.nodes] +
                           ["--cluster-replicas", "0", "--cluster-yes"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        if p.returncode != 0:
            raise AssertionError("redis-cli --cluster create: %s%s" % (p.stdout, p.stderr))
        until = deadline(timeout)
        while time.monotonic() < until:
            if all(self.ready(r) for r in self.nodes):
                return self
            time.sleep(0.05)
        raise AssertionError("the cluster never reached cluster_state:ok on every node")

    @staticmethod
    def ready(r):
        info = r.cmd("CLUSTER", "INFO")
        if not isinstance(info, bytes) or b"cluster_state:ok" not in info:
            return False
        slots = r.cmd("CLUSTER", "SLOTS")
        return isinstance(slots, list) and sum(e[1] - e[0] + 1 for e in slots) == 16384

    def url(self, password=None):
        auth = ":%s@" % password if password else ""
        return "redis-cluster://%s%s" % (auth, ",".join("%s:%d" % (HOST, r.port)
                                                         for r in self.nodes))

    def node_of_slot(self, slot):
        """The RedisServer serving slot, as the first live node's CLUSTER SLOTS says."""
        for r in self.nodes:
            if r.running():
                for e in r.cmd("CLUSTER", "SLOTS"):
                    if e[0] <= slot <= e[1]:
                        return next(n for n in self.nodes if n.port == e[2][1])
        raise AssertionError("no node serves slot %d" % slot)

    def keyslot(self, key):
        r = next(n for n in self.nodes if n.running())
        return r.cmd("CLUSTER", "KEYSLOT", key)

    def cleanup(self):
        """Every node's cleanup(), all of them even if one fails; raises
        AssertionError with every node's problems."""
        problems = []
        for r in self.nodes:
            try:
                r.cleanup()
            except AssertionError as e:
                problems.append(str(e))
        if problems:
            raise AssertionError("\n".join(problems))


# Every redis-server started (RedisServer), stopped by PID at exit.
REDIS_STARTED = []
