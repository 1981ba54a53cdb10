"""Hostile HTTP/2 clients against sluiced's gRPC port (src/proto/grpc/h2.c
and grpc.c; docs/envoy.md, "Bounds"; docs/security.md), frames written by
hand over a socket (HPACK literals, protobuf by hand: no gRPC library, so
a client can do what no library would).

- Floods: a rapid reset (HEADERS + RST_STREAM, CVE-2023-44487), the same
  with calls answered before their reset, and empty CONTINUATION frames
  (CVE-2024-27316) each end with GOAWAY ENHANCE_YOUR_CALM and the
  connection closed; a new client is served.
- Request bodies: many connections each opening 100 streams with partial
  16 KB bodies, following the windows the server gives: the RSS growth is
  bounded by --max-command + 5 a connection (bodies held: h2.h's
  sl_h2_hold_data; test_grpc_caps.py checks the windows given), and PINGs
  do not keep them alive: each connection is cut at --recv-timeout.
- A message whose prefix declares more than --max-command is answered at
  once.
- --idle-timeout: a connection that only PINGs after its last call is
  closed; one making calls beside it is not.
- HEADERS + DATA + RST_STREAM while the Redis backend is stopped
  (SIGSTOP): the calls still waiting are at most the stream limit per
  connection, RSS stays bounded, and the server answers a new client.
"""

import os
import select
import shutil
import socket
import struct
import tempfile
import time
import unittest

import harness
from harness import HOST, SANITIZED, SLOW, Server, deadline

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 1, 4, 1
ENHANCE_YOUR_CALM = 0xb
CANCEL = struct.pack(">I", 8)
RLS = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = b"/grpc.health.v1.Health/Check"
MAX_STREAMS = 100  # SL_GRPC_MAX_STREAMS (grpc.h)
CONN_WINDOW = 65535  # SL_H2_WINDOW (h2.h): the connection's and each stream's window
TIMEOUT = 20  # seconds, scaled by deadline()

RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"""


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(
        ">I", sid) + payload


def literal(name, value):
    """An HPACK literal header field without indexing, new name, no Huffman."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def block(path):
    return (literal(b":method", b"POST") + literal(b":scheme", b"http")
            + literal(b":path", path) + literal(b":authority", b"sluice")
            + literal(b"content-type", b"application/grpc") + literal(b"te", b"trailers"))


def pb_bytes(field, b):
    """A protobuf length-delimited field (lengths below 128)."""
    assert len(b) < 128
    return bytes([field << 3 | 2, len(b)]) + b


def rls_message(domain, key, value):
    """RateLimitRequest{domain, descriptors: [{entries: [{key, value}]}]}."""
    entry = pb_bytes(1, key) + pb_bytes(2, value)
    return pb_bytes(1, domain) + pb_bytes(2, pb_bytes(1, entry))


def grpc_body(msg):
    return b"\x00" + struct.pack(">I", len(msg)) + msg


def call_frames(sid, path=HEALTH, msg=b""):
    return (frame(HEADERS, END_HEADERS, sid, block(path))
            + frame(DATA, END_STREAM, sid, grpc_body(msg)))


class H2:
    """A raw HTTP/2 client connection: sends while reading (so the server
    is never blocked on us), parses what comes into frames."""

    def __init__(self, port, settings=b""):
        self.s = socket.create_connection((HOST, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # PINGs go at once
        self.s.setblocking(False)
        self.buf = b""
        self.frames = []
        self.closed = False
        self.window = CONN_WINDOW  # the server's connection window for our DATA
        self.acks = set()  # payloads of the PING ACKs received
        self.goaways = []  # codes of the GOAWAYs received
        self.send(PREFACE + frame(SETTINGS, 0, 0, settings))

    def close(self):
        self.s.close()

    def _read(self, timeout):
        if self.closed or not select.select([self.s], [], [], timeout)[0]:
            return
        try:
            chunk = self.s.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:  # reset: the server closed with our bytes unread
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self.buf += chunk
        while len(self.buf) >= 9 and len(self.buf) >= 9 + int.from_bytes(self.buf[:3], "big"):
            n = int.from_bytes(self.buf[:3], "big")
            f = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7fffffff,
                 self.buf[9:9 + n])
            if f[0] == WINDOW and f[2] == 0:
                self.window += int.from_bytes(f[3], "big") & 0x7fffffff
            if f[0] == PING and f[1] & ACK:
                self.acks.add(f[3])
            if f[0] == GOAWAY:
                self.goaways.append(struct.unpack(">II", f[3][:8])[1])
            self.frames.append(f)
            self.buf = self.buf[9 + n:]

    def send(self, data, until=None):
        """Sends data, reading meanwhile; stops early once the server
        closed.  Returns whether all was sent."""
        until = until or deadline(TIMEOUT)
        view = memoryview(data)
        while view and not self.closed and time.monotonic() < until:
            _, w, _ = select.select([], [self.s], [], 0.05)
            if w:
                try:
                    view = view[self.s.send(view[:1 << 16]):]
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed = True
            self._read(0)
        return not view

    def read_until(self, done, until):
        while not self.closed and not done(self) and time.monotonic() < until:
            self._read(0.05)
        return done(self)

    def ping(self, until):
        """A PING, and its ACK awaited: everything the server sent for what
        we sent before it has come.  Returns False if the server closed or
        sent GOAWAY (it reads no more)."""
        token = struct.pack(">d", time.monotonic())
        self.send(frame(PING, 0, 0, token), until)
        self.read_until(lambda c: token in c.acks or c.goaways, until)
        return token in self.acks

    def goaway_codes(self):
        return self.goaways

    def ended(self, sid):
        return any(t == HEADERS and f & END_STREAM and s == sid for t, f, s, _ in self.frames)


def start(*args, name):
    return Server(*args, grpc=True, name=name).start()


class Base(unittest.TestCase):
    def served(self, srv):
        """A new client's Health/Check is answered (the server is fine)."""
        c = H2(srv.grpc_port)
        self.addCleanup(c.close)
        c.send(call_frames(1))
        self.assertTrue(c.read_until(lambda x: x.ended(1), deadline(TIMEOUT)),
                        "a new client was not answered")

    def flood_is_calmed(self, srv, data, what):
        c = H2(srv.grpc_port)
        self.addCleanup(c.close)
        c.send(data)
        c.read_until(lambda x: False, deadline(TIMEOUT))  # until the server closes
        self.assertTrue(c.closed, "%s: the connection stays open" % what)
        self.assertEqual(c.goaway_codes(), [ENHANCE_YOUR_CALM], what)


class TestFloods(Base):
    N = 2000 if SANITIZED else 5000  # several times what the bound lets through

    def test_rapid_reset(self):
        """HEADERS then RST_STREAM, new streams one after another: each
        reset counts (h2.h, "Floods"); GOAWAY ENHANCE_YOUR_CALM."""
        srv = start(name="grpc-rapid-reset")
        self.addCleanup(srv.cleanup)
        data = b"".join(frame(HEADERS, END_HEADERS, 1 + 2 * i, block(HEALTH))
                        + frame(RST, 0, 1 + 2 * i, CANCEL) for i in range(self.N))
        self.flood_is_calmed(srv, data, "rapid reset")
        self.served(srv)

    def test_reset_after_each_answer(self):
        """Whole calls, each reset just after it was sent: answered at
        once, yet each reset costs more than an answer pays back."""
        srv = start(name="grpc-reset-answered")
        self.addCleanup(srv.cleanup)
        data = b"".join(call_frames(1 + 2 * i) + frame(RST, 0, 1 + 2 * i, CANCEL)
                        for i in range(self.N))
        self.flood_is_calmed(srv, data, "calls reset after their answer")
        self.served(srv)

    def test_empty_continuation(self):
        """A header block that never ends, in empty CONTINUATION frames."""
        srv = start(name="grpc-continuation")
        self.addCleanup(srv.cleanup)
        data = frame(HEADERS, 0, 1, block(HEALTH)) + frame(CONTINUATION, 0, 1) * (self.N * 20)
        self.flood_is_calmed(srv, data, "empty CONTINUATION")
        self.served(srv)


class TestPartialBodies(Base):
    def test_partial_bodies_bounded_and_cut_at_recv_timeout(self):
        """Connections of 100 streams each sending 15,000 of a declared
        16,000-byte message, as far as the server's windows let them:
        each connection holds at most --max-command + 5 bytes of bodies
        (64 KiB here); PINGs every 0.1 s do not keep them: each is cut at
        --recv-timeout."""
        conns = 12 if SANITIZED else 40
        recv_ms = int(1000 * SLOW)
        hold = 64 * 1024 + 5  # --max-command and a message's prefix
        srv = start("--recv-timeout", "%dms" % recv_ms, "--max-memory", "16mb",
                    "--max-output-total", "16mb", "--max-command", "64kb",
                    name="grpc-partial-bodies")
        self.addCleanup(srv.cleanup)
        base = srv.rss_kb()
        cut_before = srv.info_int("clients_cut_recv")
        cs = []
        chunk = grpc_body(b"x" * 16000)[:15005]  # its prefix and 15,000 of its 16,000
        until = deadline(TIMEOUT)
        for _ in range(conns):
            c = H2(srv.grpc_port)
            self.addCleanup(c.close)
            cs.append(c)
            c.send(b"".join(frame(HEADERS, END_HEADERS, 1 + 2 * i, block(RLS))
                            for i in range(MAX_STREAMS)), until)
            sent, full = 0, False  # DATA bytes sent; no window left
            for i in range(MAX_STREAMS):  # each body as far as the window goes
                off = 0
                while off < len(chunk) and not full:
                    if c.window - sent <= 0 and not (c.ping(until) and c.window - sent > 0):
                        full = True  # all the server gave: it waits for these streams
                        break
                    n = min(len(chunk) - off, c.window - sent, 16384)
                    c.send(frame(DATA, 0, 1 + 2 * i, chunk[off:off + n]), until)
                    off, sent = off + n, sent + n
                if full:
                    break
        grew_kb = srv.rss_kb() - base
        sent_all = sum(c.window for c in cs)
        # held: at most hold each, plus its streams' state
        bound_kb = (conns * (2 * hold + MAX_STREAMS * 1024) // 1024 + 4 * 1024) * \
            harness.RSS_SCALE
        self.assertLessEqual(grew_kb, bound_kb,
                             "RSS grew %d KB for %d connections of partial bodies (windows "
                             "given: %d bytes)" % (grew_kb, conns, sent_all))
        # PINGs do not keep them: each is cut at recv-timeout
        until = deadline(TIMEOUT) + 3 * recv_ms / 1000
        while time.monotonic() < until and not all(c.closed for c in cs):
            for c in cs:
                if not c.closed:
                    c.send(frame(PING, 0, 0, b"12345678"), until)
                    c._read(0)
            time.sleep(0.1)
        self.assertEqual(sum(c.closed for c in cs), conns, "connections still open")
        self.assertGreaterEqual(srv.info_int("clients_cut_recv") - cut_before, conns)
        self.served(srv)


class TestMessageCap(Base):
    def test_a_message_declared_too_large_is_answered_at_once(self):
        """A message whose prefix declares 1 GB (above --max-command, 1 MB):
        answered RESOURCE_EXHAUSTED on its first DATA frame in grpc-go's
        words and its stream closed (RST_STREAM NO_ERROR), the rest never
        awaited nor held; the connection goes on."""
        srv = start(name="grpc-message-cap")
        self.addCleanup(srv.cleanup)
        c = H2(srv.grpc_port)
        self.addCleanup(c.close)
        c.send(frame(HEADERS, END_HEADERS, 1, block(RLS))
               + frame(DATA, 0, 1, b"\x00" + struct.pack(">I", 1 << 30) + b"x" * 1000))
        self.assertTrue(c.read_until(lambda x: x.ended(1), deadline(TIMEOUT)),
                        "no answer before the whole message")
        trailers = [p for t, f, sid, p in c.frames if sid == 1 and t == HEADERS]
        self.assertIn(b"grpc-status\x018", trailers[-1])  # RESOURCE_EXHAUSTED
        self.assertIn(b"grpc: received message larger than max (1073741824 vs. 1048576)",
                      trailers[-1])
        self.assertIn((RST, 1, struct.pack(">I", 0)), [(t, sid, p) for t, _, sid, p in c.frames])
        c.send(call_frames(3))
        self.assertTrue(c.read_until(lambda x: x.ended(3), deadline(TIMEOUT)))


class TestIdle(Base):
    def test_pings_do_not_keep_an_idle_connection(self):
        """--idle-timeout counts from a connection's last call: one that
        only PINGs is closed (clients_cut_idle), one making calls beside
        it is not."""
        idle_ms = int(1500 * min(SLOW, 2))  # calls come every 0.1 s: margin enough
        srv = start("--idle-timeout", "%dms" % idle_ms, name="grpc-idle")
        self.addCleanup(srv.cleanup)
        cut_before = srv.info_int("clients_cut_idle")
        busy, idle = H2(srv.grpc_port), H2(srv.grpc_port)
        self.addCleanup(busy.close)
        self.addCleanup(idle.close)
        idle.send(call_frames(1))
        self.assertTrue(idle.read_until(lambda x: x.ended(1), deadline(TIMEOUT)))
        sid, answered = 1, 0
        until = deadline(TIMEOUT) + 4 * idle_ms / 1000
        while time.monotonic() < until and not idle.closed:
            idle.send(frame(PING, 0, 0, b"12345678"), until)
            busy.send(call_frames(sid), until)
            if busy.read_until(lambda x: x.ended(sid), until):
                answered += 1
            sid += 2
            time.sleep(0.1)
        self.assertTrue(idle.closed, "PINGs kept an idle connection past --idle-timeout")
        self.assertGreaterEqual(srv.info_int("clients_cut_idle") - cut_before, 1)
        # the busy one goes on past a whole idle-timeout (idle_ms is scaled already)
        more = time.monotonic() + 1.5 * idle_ms / 1000
        while time.monotonic() < more and not busy.closed:
            busy.send(call_frames(sid), until)
            if busy.read_until(lambda x: x.ended(sid), until):
                answered += 1
            sid += 2
            time.sleep(0.1)
        self.assertFalse(busy.closed, "a connection making calls was cut as idle")
        self.assertEqual(answered, sid // 2)


class TestResetWhileRedisStopped(Base):
    def test_reset_calls_bounded(self):
        """HEADERS + DATA + RST_STREAM while Redis is stopped: the calls
        whose stream was reset still wait for their backend, and count
        against the connection's streams: at most MAX_STREAMS a connection
        wait; the rest are refused, and the flood is cut."""
        d = tempfile.mkdtemp(prefix="sluice-grpc-hostile-")
        self.addCleanup(shutil.rmtree, d, True)
        with open(os.path.join(d, "api.yaml"), "w") as f:
            f.write(RULES)
        redis = harness.RedisServer().start()
        self.addCleanup(redis.cleanup)
        srv = start("--rules", os.path.join(d, "api.yaml"), "--backend", redis.url(),
                    "--backend-timeout", "60s", name="grpc-reset-redis")
        self.addCleanup(srv.cleanup)
        msg = rls_message(b"api", b"user", b"u")
        c = H2(srv.grpc_port)
        self.addCleanup(c.close)
        c.send(call_frames(1, RLS, msg))
        self.assertTrue(c.read_until(lambda x: x.ended(1), deadline(TIMEOUT)),
                        "the call through Redis was not answered")
        base = srv.rss_kb()
        redis.pause()
        self.addCleanup(redis.resume)
        conns, n = (2, 1000) if SANITIZED else (4, 3000)
        cs = []
        for _ in range(conns):
            x = H2(srv.grpc_port)
            self.addCleanup(x.close)
            cs.append(x)
            x.send(b"".join(call_frames(1 + 2 * i, RLS, msg) + frame(RST, 0, 1 + 2 * i, CANCEL)
                            for i in range(n)))
        until = deadline(TIMEOUT)
        for x in cs:  # each has had all it sent taken, or was told GOAWAY (or is stuck)
            x.ping(until)
        inflight = srv.info_int("backend_inflight")
        self.assertGreater(inflight, 0)  # the calls do wait for the stopped Redis
        self.assertLessEqual(inflight, conns * MAX_STREAMS,
                             "%d calls wait for Redis from %d connections" % (inflight, conns))
        self.assertLessEqual(srv.rss_kb() - base, 16 * 1024 * harness.RSS_SCALE)
        self.served(srv)
        redis.resume()
        c2 = H2(srv.grpc_port)
        self.addCleanup(c2.close)
        c2.send(call_frames(1, RLS, msg))
        self.assertTrue(c2.read_until(lambda x: x.ended(1), deadline(TIMEOUT)),
                        "no answer once Redis came back")


if __name__ == "__main__":
    unittest.main()
