"""The gRPC front's caps are sluiced's memory bounds, not small constants
(issue 26; src/proto/grpc/grpc.h, h2.h; docs/envoy.md, "Limits and
stopping").

- A 200 KB RateLimitRequest (300 descriptors of 600-byte values) is
  answered in full: 300 statuses, each the peer's answer.
- 4096 descriptors are served; 4097 are refused before decoding:
  UNKNOWN "4097 descriptors in one request: at most 4096" (envoy
  semantics), INVALID_ARGUMENT with the old text (sluice semantics).
- A message of exactly --max-command bytes is served; one byte more is
  RESOURCE_EXHAUSTED with grpc-go's text "grpc: received message larger
  than max (N vs. M)", answered as soon as the prefix declares it, and
  the same connection goes on (a raw HTTP/2 client: its next stream is
  answered).
- Unfinished bodies: connections of 100 streams each sending half of a
  150,000-byte message, following the windows the server gives, never
  ending: each connection is given exactly --max-command + 5 bytes of
  connection window in all (the bodies sluiced holds) and then no
  WINDOW_UPDATE; sluiced's RSS grows by at most what that bound implies.
"""

import os
import shutil
import struct
import tempfile
import unittest

import harness
from harness import HOST, SANITIZED, Server, assert_clean_stop, deadline
import test_grpc as TG
import test_grpc_hostile as GH

import grpc

R = TG.R
RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"""
TIMEOUT = TG.TIMEOUT
MAX_DESC = 4096  # SL_GRPC_MAX_DESC (grpc.h)


def start(tmp, *args, name, semantics=None):
    path = os.path.join(tmp, "api.yaml")
    with open(path, "w") as f:
        f.write(RULES)
    sem = ["--rls-semantics", semantics] if semantics else []
    return Server("--rules", path, *(list(args) + sem), grpc=True, name=name).start()


def sized_request(size):
    """A RateLimitRequest of exactly size bytes: one descriptor, user=x..x."""
    n = size - 20
    for _ in range(8):  # the value's length prefix settles within a few steps
        req = TG.request("api", [("user", "x" * n)])
        if req.ByteSize() == size:
            return req
        n += size - req.ByteSize()
    raise AssertionError("no request of %d bytes" % size)


class Base(unittest.TestCase):
    ARGS = ()
    SEMANTICS = None

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-grpc-caps-")
        cls.srv = start(cls.dir, *cls.ARGS, name=cls.__name__, semantics=cls.SEMANTICS)
        cls.ch = grpc.insecure_channel("%s:%d" % (HOST, cls.srv.grpc_port))
        cls.stub = TG.rls_pb2_grpc.RateLimitServiceStub(cls.ch)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()
        try:
            assert_clean_stop(cls.srv)
        finally:
            shutil.rmtree(cls.dir, True)

    def call(self, req):
        return self.stub.ShouldRateLimit(req, timeout=TIMEOUT)

    def fails(self, req, code, details):
        with self.assertRaises(grpc.RpcError) as cm:
            self.call(req)
        self.assertEqual((cm.exception.code(), cm.exception.details()), (code, details))


class TestEnvoyCaps(Base):
    """--rls-semantics envoy (the default), --max-command 1mb (the default)."""

    def test_200kb_request_answered_in_full(self):
        req = TG.request("api", *[[("user", "v%03d-" % i + "x" * 600)] for i in range(300)])
        self.assertGreater(req.ByteSize(), 180000)
        r = self.call(req)
        self.assertEqual(len(r.statuses), 300)
        reset = r.statuses[0].duration_until_reset
        self.assertTrue(1 <= reset.seconds <= 60, reset)
        one = R.DescriptorStatus(code=R.OK, limit_remaining=999999)
        one.current_limit.requests_per_unit = 1000000
        one.current_limit.unit = R.RateLimit.MINUTE
        one.duration_until_reset.CopyFrom(reset)
        # the seconds left in the minute may tick between two statuses:
        # each compared with reset's, then on its own
        for i, st in enumerate(r.statuses):
            d = st.duration_until_reset
            self.assertTrue(1 <= d.seconds <= 60 and d.nanos == 0, (i, d))
            got = R.DescriptorStatus()
            got.CopyFrom(st)
            got.duration_until_reset.CopyFrom(reset)
            self.assertEqual(got, one, "status %d" % i)
        self.assertEqual(r.overall_code, R.OK)
        self.assertEqual(len(r.response_headers_to_add), 0)

    def test_4096_descriptors_served_4097_refused(self):
        # e0 is asked twice (refused, then fresh): in one minute, or a fresh
        # window would hide a refused request that counted
        harness.wait_window_room(60, 5)
        r = self.call(TG.request("api", *[[("user", "d%d" % i)] for i in range(MAX_DESC)]))
        self.assertEqual((r.overall_code, len(r.statuses)), (R.OK, MAX_DESC))
        self.assertEqual({s.code for s in r.statuses}, {R.OK})
        self.assertEqual({s.limit_remaining for s in r.statuses}, {999999})
        self.fails(TG.request("api", *[[("user", "e%d" % i)] for i in range(MAX_DESC + 1)]),
                   grpc.StatusCode.UNKNOWN, "4097 descriptors in one request: at most 4096")
        # refused before anything was counted: e0 is fresh
        r = self.call(TG.request("api", [("user", "e0")]))
        self.assertEqual(r.statuses[0].limit_remaining, 999999)

    def test_a_message_over_1mb_is_resource_exhausted(self):
        req = sized_request((1 << 20) + 1)
        self.fails(req, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   "grpc: received message larger than max (1048577 vs. 1048576)")
        self.assertEqual(self.call(sized_request(1 << 20)).overall_code, R.OK)


class TestSluiceCaps(Base):
    """--rls-semantics sluice: its own shapes stay (16 descriptors)."""
    SEMANTICS = "sluice"

    def test_descriptor_counts(self):
        self.fails(TG.request("api", *[[("user", "s%d" % i)] for i in range(17)]),
                   grpc.StatusCode.INVALID_ARGUMENT,
                   "at most 16 descriptors in one request, got 17")
        self.fails(TG.request("api", *[[("user", "s%d" % i)] for i in range(MAX_DESC + 1)]),
                   grpc.StatusCode.INVALID_ARGUMENT,
                   "at most 16 descriptors in one request, got 4097")

    def test_message_bound_is_max_command(self):
        self.assertEqual(self.call(sized_request(200000)).overall_code, R.OK)
        self.fails(sized_request((1 << 20) + 1), grpc.StatusCode.RESOURCE_EXHAUSTED,
                   "grpc: received message larger than max (1048577 vs. 1048576)")


class TestMessageBound(Base):
    """--max-command 64kb: a message of 65,536 bytes, and one more."""
    ARGS = ("--max-command", "64kb")

    def test_just_above_max_command(self):
        self.assertEqual(self.call(sized_request(65536)).overall_code, R.OK)
        self.fails(sized_request(65537), grpc.StatusCode.RESOURCE_EXHAUSTED,
                   "grpc: received message larger than max (65537 vs. 65536)")
        self.assertEqual(self.call(TG.request("api", [("user", "after")])).overall_code, R.OK)

    def test_same_connection_goes_on(self):
        """Raw HTTP/2: the first DATA frame of a 65,537-byte message is
        answered RESOURCE_EXHAUSTED (its stream closed, RST_STREAM
        NO_ERROR); the next stream on the same connection is served."""
        c = GH.H2(self.srv.grpc_port)
        self.addCleanup(c.close)
        body = GH.grpc_body(sized_request(65537).SerializeToString())
        c.send(GH.frame(GH.HEADERS, GH.END_HEADERS, 1, GH.block(GH.RLS))
               + GH.frame(GH.DATA, 0, 1, body[:16384]))
        self.assertTrue(c.read_until(lambda x: x.ended(1), deadline(GH.TIMEOUT)),
                        "no answer to the first frame")
        trailers = [p for t, f, sid, p in c.frames if sid == 1 and t == GH.HEADERS][-1]
        text = b"grpc: received message larger than max (65537 vs. 65536)"
        self.assertIn(b"grpc-status\x018", trailers)  # RESOURCE_EXHAUSTED
        self.assertIn(b"grpc-message" + bytes([len(text)]) + text, trailers)
        self.assertIn((GH.RST, 1, struct.pack(">I", 0)),
                      [(t, sid, p) for t, _, sid, p in c.frames])
        c.send(GH.call_frames(3, GH.RLS, GH.rls_message(b"api", b"user", b"raw")))
        self.assertTrue(c.read_until(lambda x: x.ended(3), deadline(GH.TIMEOUT)),
                        "the next call on the connection was not answered")
        trailers = [p for t, f, sid, p in c.frames if sid == 3 and t == GH.HEADERS][-1]
        self.assertIn(b"grpc-status\x010", trailers)
        self.assertEqual(c.goaway_codes(), [])


class TestHeldBodies(unittest.TestCase):
    MAX_COMMAND = 200000
    HOLD = MAX_COMMAND + 5  # a message and its prefix (grpc.h)
    STREAMS = GH.MAX_STREAMS
    DECLARED = 150000  # each stream's message: within --max-command
    HALF = 75000  # what each stream would send of it

    def stall(self, c, until):
        """Opens STREAMS streams and sends HALF of each message, round
        robin in frames of at most 16 KB, as far as the connection's and
        the streams' windows go, until the server gives no more.  Returns
        (bytes sent, connection window given in all)."""
        c.send(b"".join(GH.frame(GH.HEADERS, GH.END_HEADERS, 1 + 2 * i, GH.block(GH.RLS))
                        for i in range(self.STREAMS)), until)
        body = GH.grpc_body(b"x" * self.DECLARED)[:self.HALF]
        sent = [0] * self.STREAMS
        total = 0
        for _ in range(self.STREAMS * self.HALF // 1000 + 10):  # bounded: each turn sends
            sw = {}  # the streams' windows: 65535 and their WINDOW_UPDATEs
            for t, _, sid, p in c.frames:
                if t == GH.WINDOW and sid:
                    sw[sid] = sw.get(sid, 0) + (int.from_bytes(p, "big") & 0x7fffffff)
            moved = False
            for i in range(self.STREAMS):
                sid = 1 + 2 * i
                room = min(c.window - total, GH.CONN_WINDOW + sw.get(sid, 0) - sent[i],
                           len(body) - sent[i], 16384)
                if room <= 0:
                    continue
                c.send(GH.frame(GH.DATA, 0, sid, body[sent[i]:sent[i] + room]), until)
                sent[i] += room
                total += room
                moved = True
            if not moved:  # all the server gave is used: anything more it sends?
                if not c.ping(until) or c.window - total <= 0:
                    break
        return total, c.window

    def test_unfinished_bodies_bounded_by_max_command(self):
        conns = 4 if SANITIZED else 8
        tmp = tempfile.mkdtemp(prefix="sluice-grpc-held-")
        self.addCleanup(shutil.rmtree, tmp, True)
        srv = start(tmp, "--max-command", str(self.MAX_COMMAND), name="grpc-held-bodies")
        self.addCleanup(srv.cleanup)
        base = srv.rss_kb()
        until = deadline(60)
        for k in range(conns):
            c = GH.H2(srv.grpc_port)
            self.addCleanup(c.close)
            sent, given = self.stall(c, until)
            # given exactly the bound in all, and all of it used: sluiced
            # holds HOLD bytes of this connection's bodies and waits
            self.assertEqual((sent, given), (self.HOLD, self.HOLD), "connection %d" % k)
            self.assertFalse(any(t == GH.HEADERS for t, _, _, _ in c.frames),
                             "a stream was answered")
            self.assertEqual(c.goaway_codes(), [])
        grew_kb = srv.rss_kb() - base
        # held: HOLD a connection, in buffers that grow by doubling (at most
        # twice what they hold; under ASan the ones they replaced stay in
        # its quarantine: twice more), and each stream's state (its
        # gstream, and the first 16 KB buffer, touched in part)
        bound_kb = (conns * (4 * self.HOLD + self.STREAMS * 4096) // 1024 + 4096) * \
            harness.RSS_SCALE
        self.assertLessEqual(grew_kb, bound_kb, "RSS grew %d KB for %d connections, each "
                             "trying %d bytes of bodies" % (grew_kb, conns,
                                                            self.STREAMS * self.HALF))
        GH.Base.served(self, srv)


if __name__ == "__main__":
    unittest.main()
