"""test_backend_hostile.py -- sluiced on the Redis backend against a Redis
that misbehaves (issue 23, B1-B3), and against clients that pile requests
onto a stalled Redis:

  - replies: a proxy of the test's own (HostileRedis) in front of a real
    redis-server answers one request with bytes of its choosing -- a reply
    too many (`+OK\\r\\n+OK\\r\\n`, which made hiredis 0.14 abort the
    process), an array claiming 2^31-1 elements (16 GB of pointers), a
    bulk string claiming 2 GB and streaming; also a wrong-type and a
    malformed reply (these held before: kept as guards).  Each time
    sluiced stays up, answers the request by its --on-backend-error
    policy, names the refusal in its log, and reconnects; the next
    request is Redis's answer again;
  - what waits on one Redis connection: past SL_REDIS_PENDING_MAX, the
    policy answers at once;
  - requests in flight: Redis stopped (SIGSTOP) while clients pipeline
    RL.CHECK without reading, or send a pipeline and close: sluiced's
    memory stays within a bound derived from --max-output-total, a new
    client is answered, and after they close the memory is back and
    every answer Redis's again.
"""

import os
import shutil
import socket
import tempfile
import threading
import time
import unittest

import harness
from harness import BASE, SANITIZED, SLOW, RawConn, RedisServer, Server

W = 10000  # the window of the limits here, ms
DENIED = [0, 5, 0, 1000, 1000, 0]  # --on-backend-error deny (the default), L = 5

SAN_FACTOR = 8 if harness.KIND == "tsan" else 3 if SANITIZED else 2

RULES = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n"


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


class HostileRedis:
    """A proxy on a free loopback port in front of redis-server `up`: it
    passes everything both ways, except that once armed (arm), the next
    chunk sluiced sends that holds an EVALSHA is not passed on -- the
    proxy answers it itself with the armed chunks, sent one by one until
    sent or sluiced has closed the connection.  Stopped by cleanup
    (its sockets closed; the threads end with them)."""

    def __init__(self, up):
        self.up = up
        self.lock = threading.Lock()
        self.armed = None
        self.socks = []
        self.answered = threading.Event()  # the armed answer went out (or was cut)
        self.ls = socket.socket()
        self.ls.bind((harness.HOST, 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self):
        return "redis://%s:%d" % (harness.HOST, self.port)

    def arm(self, *chunks):
        with self.lock:
            self.answered.clear()
            self.armed = list(chunks)

    def cleanup(self):
        try:
            self.ls.close()
        except OSError:
            pass
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection((harness.HOST, self.up.port), timeout=10)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            wlock = threading.Lock()  # writes to c: Redis's replies, the armed answer
            with self.lock:
                self.socks += [c, u]
            threading.Thread(target=self._down, args=(c, u, wlock), daemon=True).start()
            threading.Thread(target=self._up, args=(c, u, wlock), daemon=True).start()

    def _down(self, c, u, wlock):
        """Redis -> sluiced."""
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                with wlock:
                    c.sendall(data)
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _up(self, c, u, wlock):
        """sluiced -> Redis, or the armed answer."""
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                chunks = None
                with self.lock:
                    if self.armed is not None and b"EVALSHA" in data:
                        chunks, self.armed = self.armed, None
                if chunks is None:
                    u.sendall(data)
                    continue
                try:
                    with wlock:
                        for ch in chunks:
                            c.sendall(ch)
                except OSError:
                    pass  # sluiced dropped the connection mid-answer
                self.answered.set()
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Base(unittest.TestCase):

    def redis(self):
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        return r

    def server(self, url, *args):
        s = Server("--backend", url, "--deny-cache", "off", *args, trust_client_time=True,
                   name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        self.wait_up(s)
        return s

    def wait_up(self, s, reconnects=None):
        """Until INFO says the backend is up (and, given, has reconnected
        more than `reconnects` times)."""
        def ok(i):
            if i.get("backend_status") != "up":
                return False
            return reconnects is None or int(i.get("backend_reconnects", 0)) > reconnects
        s.wait_section("backend", ok, "the backend up%s" % ("" if reconnects is None else " again"),
                       timeout=30)

    @staticmethod
    def allow(c, key, at=BASE):
        return c.cmd("RL.ALLOW", key, "5", "10s", "ALGO", "fixed-window", "AT", str(at), timeout=30)


class TestHostileReplies(Base):
    """One request answered by the proxy with hostile bytes: the policy's
    answer, the refusal in the log, a reconnect, then Redis again."""

    def hostile(self, chunks, refusal, *args, drops=True):
        r = self.redis()
        p = HostileRedis(r)
        self.addCleanup(p.cleanup)
        s = self.server(p.url(), "--threads", "1", *args)
        with s.raw(timeout=30) as c:
            self.assertEqual(self.allow(c, "before"), [1, 5, 4, 0, W, 0], "Redis's answer")
            before = int(s.info("backend")["backend_reconnects"])
            p.arm(*chunks)
            self.assertEqual(self.allow(c, "hostile"), DENIED,
                             "the request Redis answered with %r: the policy's answer"
                             % chunks[0][:40])
            self.assertTrue(s.running(), "sluiced died of the reply:\n%s" % s.log())
            self.assertEqual(c.cmd("PING"), b"PONG")
            if refusal is not None:
                until = harness.deadline(20)
                while refusal not in s.log() and time.monotonic() < until:
                    time.sleep(0.02)
                self.assertIn(refusal, s.log(), "the log names why the connection was dropped")
            self.wait_up(s, reconnects=before if drops else None)
            self.assertEqual(self.allow(c, "after"), [1, 5, 4, 0, W, 0],
                             "Redis's answer again after the reconnect")
        return s

    def test_reply_too_many_drops_the_connection(self):
        """`+OK\\r\\n+OK\\r\\n` to one EVALSHA: the first is a wrong-type
        reply (the policy), the second matches no command -- hiredis 0.14
        asserted and the process aborted."""
        self.hostile([b"+OK\r\n+OK\r\n"], "reply refused: a reply that matches no command")

    def test_huge_array_claim_refused_before_allocating(self):
        """`*2147483647`: refused as it is read, before 16 GB of element
        pointers are allocated (the worker stalled ~13.6 s on it)."""
        peak = {}
        r = self.redis()
        p = HostileRedis(r)
        self.addCleanup(p.cleanup)
        s = self.server(p.url(), "--threads", "1", "--backend-timeout", "60s")
        before_kb = status_kb(s.pid, "VmPeak")
        with s.raw(timeout=30) as c:
            self.assertEqual(self.allow(c, "before"), [1, 5, 4, 0, W, 0])
            n = int(s.info("backend")["backend_reconnects"])
            p.arm(b"*2147483647\r\n")
            # the answer comes from the refusal, not from the 60 s timeout
            self.assertEqual(self.allow(c, "hostile"), DENIED)
            peak["kb"] = status_kb(s.pid, "VmPeak")
            self.assertIn("reply refused: an array of 2147483647 elements", s.log())
            self.wait_up(s, reconnects=n)
            self.assertEqual(self.allow(c, "after"), [1, 5, 4, 0, W, 0])
        if not SANITIZED:  # a sanitizer's shadow memory makes VmPeak meaningless
            self.assertLess(peak["kb"] - before_kb, 1 << 20,
                            "virtual memory grew by %d KB for one reply" % (peak["kb"] - before_kb))

    def test_huge_bulk_claim_refused_as_it_streams(self):
        """`$2147483647` then 8 MB of it: dropped once the reader holds
        more than one reply may (64 KB), not buffered until the timeout."""
        chunks = [b"$2147483647\r\n"] + [b"x" * 65536] * 128
        self.hostile(chunks, "reply refused: an item of more than 65536 bytes",
                     "--backend-timeout", "60s")

    def test_wrong_type_reply_answered_by_the_policy(self):
        """An integer where the script's array belongs (held before: a guard)."""
        self.hostile([b":1\r\n"], None, drops=False)

    def test_malformed_reply_drops_the_connection(self):
        """Bytes that are no RESP (held before: a guard)."""
        self.hostile([b"!not resp\r\n"], "Protocol error")


class TestInFlightBound(Base):
    """Requests waiting on a stopped Redis are within --max-output-total."""

    BUDGET_MB = 16

    def setUp(self):
        d = tempfile.mkdtemp(prefix="sluice-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        self.rules = os.path.join(d, "api.yaml")
        with open(self.rules, "w") as f:
            f.write(RULES)

    def flood(self, s, n, per, close):
        """n clients each send `per` pipelined RL.CHECKs (as much as the
        kernel takes at once) and never read; with close, they close."""
        one = harness.encode("RL.CHECK", "api", "AT", str(BASE), "DESCRIPTOR", "user", "bob")
        out = []
        for _ in range(n):
            so = socket.create_connection((harness.HOST, s.port), timeout=10)
            so.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            so.setblocking(False)
            try:
                so.send(one * per)
            except BlockingIOError:
                pass
            if close:
                so.close()
            else:
                out.append(so)
        return out

    def stalled(self, close):
        r = self.redis()
        s = self.server(r.url(), "--rules", self.rules, "--threads", "2",
                        "--max-output-total", "%dmb" % self.BUDGET_MB, "--backend-timeout", "2s")
        check = ("RL.CHECK", "api", "AT", str(BASE), "DESCRIPTOR", "user", "ann")
        with s.raw() as c:
            self.assertEqual(c.cmd(*check)[0], 1)
        base_kb = status_kb(s.pid, "VmRSS")
        timeouts = int(s.info("backend")["backend_timeouts"])
        r.pause()
        try:
            socks = self.flood(s, 20 if SANITIZED else 50, 1000, close)
            # Redis's silence runs out: whatever waited was answered by the policy
            s.wait_info("backend_timeouts", lambda v: v > timeouts, section="backend",
                        timeout=30 * SLOW, what="(no request timed out)")
            with s.raw(timeout=20 * SLOW) as c:
                self.assertEqual(c.cmd("PING", timeout=20 * SLOW), b"PONG",
                                 "a new client answered during the flood")
            grown = status_kb(s.pid, "VmHWM") - base_kb
        finally:
            r.resume()
        for so in socks:
            so.close()
        # everything a client held (replies, requests in flight) given back
        s.wait_info("client_output_bytes", lambda v: v == 0, timeout=30 * SLOW,
                    what="(client output still held)")
        self.wait_up(s)
        with s.raw() as c:
            self.assertEqual(c.cmd(*check)[:2], [1, 1000000], "Redis decides again")
        after = status_kb(s.pid, "VmRSS") - base_kb
        # the budget, what a sanitizer adds to it (TSan's shadow: several
        # times each byte), and the allocator's slack
        bound = SAN_FACTOR * self.BUDGET_MB * 1024 + 48 * 1024
        self.assertLess(grown, bound, "peak RSS grew by %d KB (bound %d KB)" % (grown, bound))
        self.assertLess(after, bound, "RSS after the clients left: +%d KB" % after)

    def test_pipelines_unread_on_a_stopped_redis(self):
        """Clients pipelining RL.CHECK without reading while Redis is stopped."""
        self.stalled(close=False)

    def test_pipelines_sent_then_closed_on_a_stopped_redis(self):
        """Clients that send a pipeline and close: their requests in flight
        stay counted until answered, and nothing more of theirs runs."""
        self.stalled(close=True)


class TestPendingBound(Base):
    """What waits on one Redis connection is bounded (SL_REDIS_PENDING_MAX)."""

    PENDING_MAX = 2048  # backend_redis.h
    PER = 300  # RL.ALLOWs a client pipelines: within its in-flight bound

    def test_requests_past_the_bound_get_the_policy_at_once(self):
        """Redis stopped, one worker, clients pipelining until 2048 requests
        wait on its connection: a later request is answered by the policy
        at once (before, it waited for the 60 s timeout), and when Redis
        returns every waiting one gets Redis's answer."""
        r = self.redis()
        s = self.server(r.url(), "--threads", "1", "--backend-timeout", "60s")
        one = harness.encode("RL.ALLOW", "pend", "1000000", "10s", "ALGO", "fixed-window",
                             "AT", str(BASE))
        r.pause()
        clients = []
        try:
            sent = 0
            while sent < self.PENDING_MAX:
                c = s.raw(timeout=30)
                self.addCleanup(c.close)
                c.send(one * self.PER)
                clients.append(c)
                sent += self.PER
                want = min(sent, self.PENDING_MAX)
                s.wait_info("backend_inflight", lambda v: v == want, section="backend",
                            timeout=30 * SLOW, what="(the pipelines waiting on Redis)")
            with s.raw(timeout=30) as late:
                self.assertEqual(self.allow(late, "late"), DENIED,
                                 "a request past the bound: the policy, with Redis stopped")
            info = s.info("backend")
            self.assertEqual(int(info["backend_inflight"]), self.PENDING_MAX)
            self.assertIn("requests wait for Redis on one connection", info["backend_last_error"])
        finally:
            r.resume()
        # the ones that waited get Redis's answers (each client's in order;
        # those past the bound the policy's)
        got = [c.read_replies(self.PER, timeout=30) for c in clients]
        redis_answers = sum(1 for g in got for v in g if v != [0, 1000000, 0, 1000, 1000, 0])
        self.assertEqual(redis_answers, self.PENDING_MAX)


if __name__ == "__main__":
    unittest.main()
