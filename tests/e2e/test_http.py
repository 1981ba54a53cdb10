"""HTTP (SPEC section 8, docs/http.md), as a client sees it through
http.client: GET /v1/allow's JSON, status and rate-limit headers, its 400s
in the words RESP uses, /healthz, 404 / 405, keep-alive, and an oversized
header refused (431) while another client goes on being served.

Times are exact: the server trusts client time and every request carries
at = BASE + offset (harness.BASE divides every window used here)."""

import json
import re
import socket
import subprocess
import unittest

from harness import (BASE, HOST, SLOW, SLUICED, RespError, ServerTestCase, free_port,
                     nothing_listening, run_checked)

# A structured-field list of one item (RFC 9651 section 3.1): a string and
# its integer parameters, e.g. "default";q=5;w=300.
SF_ITEM = re.compile(r'^"((?:[^"\\]|\\.)*)"((?:;[a-z*][a-z0-9_.*-]*=-?\d{1,15})*)$')


def sf_item(value):
    """Parses one structured-field list item with integer parameters into
    (name, {param: int}); AssertionError when it is not one."""
    m = SF_ITEM.match(value)
    if m is None:
        raise AssertionError("not a structured-field item with integer parameters: %r" % value)
    params = {}
    for p in m.group(2).split(";")[1:]:
        k, _, v = p.partition("=")
        if k in params:
            raise AssertionError("parameter %s twice in %r" % (k, value))
        params[k] = int(v)
    return m.group(1), params


class TestHttpAllow(ServerTestCase):
    HTTP = True

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def get(self, path, conn=None):
        """GET path; returns (status, headers as a dict, parsed JSON body)."""
        c = conn or self.conn
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        self.assertEqual(r.getheader("Content-Type"), "application/json", path)
        return r.status, {k: v for k, v in r.getheaders()}, json.loads(body)

    def allow(self, key, limit, window, at=0, **opts):
        q = "key=%s&limit=%s&window=%s&at=%d" % (key, limit, window, BASE + at)
        for k, v in opts.items():
            q += "&%s=%s" % (k, v)
        return self.get("/v1/allow?" + q)

    def test_allowed_answer_is_the_six_fields_and_headers(self):
        status, h, body = self.allow("exact", 2, "10s", algo="fixed-window")
        self.assertEqual(status, 200)
        self.assertEqual(body, {"allowed": True, "limit": 2, "remaining": 1,
                                "retry_after_ms": 0, "reset_after_ms": 10000, "delay_ms": 0})
        self.assertIs(body["allowed"], True)
        self.assertEqual(list(body), ["allowed", "limit", "remaining", "retry_after_ms",
                                      "reset_after_ms", "delay_ms"])
        self.assertEqual(sf_item(h["RateLimit-Policy"]), ("default", {"q": 2, "w": 10}))
        self.assertEqual(sf_item(h["RateLimit"]), ("default", {"r": 1, "t": 10}))
        self.assertEqual(h["X-RateLimit-Limit"], "2")
        self.assertEqual(h["X-RateLimit-Remaining"], "1")
        self.assertEqual(h["X-RateLimit-Reset"], "10")
        self.assertNotIn("Retry-After", h)

    def test_429_after_the_limit(self):
        for i in range(3):
            status, h, body = self.allow("burst", 3, "1m", at=5)
            self.assertEqual((status, body["allowed"], body["remaining"]), (200, True, 2 - i))
        status, h, body = self.allow("burst", 3, "1m", at=5)
        self.assertEqual(status, 429)
        self.assertIs(body["allowed"], False)
        self.assertEqual(body["remaining"], 0)
        # token bucket, 3 per minute: one token back in 20 s, all in 60 s
        self.assertEqual((body["retry_after_ms"], body["reset_after_ms"]), (20000, 60000))
        self.assertEqual(h["Retry-After"], "20")
        self.assertEqual(sf_item(h["RateLimit"]), ("default", {"r": 0, "t": 60}))
        self.assertEqual(h["X-RateLimit-Remaining"], "0")

    def test_retry_after_rounds_up(self):
        """fixed-window 1 per 10 s: denied at 10000 - d ms has retry_after d."""
        for d, want in ((999, "1"), (1000, "1"), (1001, "2"), (1, "1")):
            key = "round%d" % d
            self.assertEqual(self.allow(key, 1, "10s", algo="fixed-window")[0], 200)
            status, h, body = self.allow(key, 1, "10s", at=10000 - d, algo="fixed-window")
            self.assertEqual((status, body["retry_after_ms"], body["reset_after_ms"]),
                             (429, d, d), d)
            self.assertEqual(h["Retry-After"], want, d)
            self.assertEqual(h["X-RateLimit-Reset"], want, d)
            self.assertEqual(sf_item(h["RateLimit"])[1]["t"], int(want), d)
            # waiting exactly retry_after_ms is allowed (SPEC section 3)
            self.assertEqual(self.allow(key, 1, "10s", at=10000, algo="fixed-window")[0], 200)

    def test_leaky_bucket_delay_header(self):
        """SPEC section 2: an allowed leaky-bucket request waits ceil(level *
        W / L) ms; here W / L = 1000 ms a unit.  X-RateLimit-Delay-Ms says it,
        only when above 0 (docs/http.md)."""
        got = []
        for at in (0, 1, 1, 1, 1):
            status, h, body = self.allow("queue", 2, "2s", at=at, algo="leaky-bucket", burst=4)
            got.append((status, h.get("X-RateLimit-Delay-Ms"), body["delay_ms"],
                        h.get("Retry-After")))
        self.assertEqual(got, [(200, None, 0, None), (200, "999", 999, None),
                               (200, "1999", 1999, None), (200, "2999", 2999, None),
                               (429, None, 0, "1")])
        # the other algorithms never delay: no such header
        status, h, body = self.allow("nodelay", 2, "2s", algo="token-bucket")
        self.assertEqual((status, h.get("X-RateLimit-Delay-Ms")), (200, None))

    def test_never_allowed_has_no_retry_after(self):
        status, h, body = self.allow("huge", 2, "1m", cost=3)
        self.assertEqual((status, body["retry_after_ms"]), (429, -1))
        self.assertNotIn("Retry-After", h)

    def test_bad_input_is_400_in_resp_words(self):
        cases = [
            "key=a&limit=x&window=1s",
            "key=a&limit=5&window=5x",
            "key=a&limit=5&window=1s&algo=tokenbucket",
            "key=a&limit=5&window=1s&cost=-1",
            "key=a&limit=0&window=1s",
            "key=&limit=5&window=1s",
        ]
        with self.srv.raw() as rc:
            for q in cases:
                status, h, body = self.get("/v1/allow?" + q)
                self.assertEqual(status, 400, q)
                self.assertEqual(list(body), ["error"], q)
                args = ["RL.ALLOW"]
                kv = dict(p.split("=", 1) for p in q.split("&"))
                args += [kv.pop("key"), kv.pop("limit"), kv.pop("window")]
                for k, v in kv.items():
                    args += [k.upper(), v]
                want = rc.cmd(*args)
                self.assertIsInstance(want, RespError, q)
                self.assertEqual("ERR " + body["error"], want.line, q)
                self.assertNotIn("RateLimit", h)

    def test_bad_query_names_the_parameter(self):
        for q, msg in (
            ("key=a&limit=5", "missing parameter window (key, limit and window are needed)"),
            ("limit=5&window=1s", "missing parameter key (key, limit and window are needed)"),
            ("key=a&limit=5&window=1s&colour=red",
             "unknown parameter 'colour' (expected key, limit, window, algo, cost, burst, "
             "precision, at or wait)"),
            ("key=a&key=b&limit=5&window=1s", "parameter key given twice"),
            ("key=a%00b&limit=5&window=1s", "a parameter holds a NUL byte (%00)"),
        ):
            status, h, body = self.get("/v1/allow?" + q)
            self.assertEqual((status, body), (400, {"error": msg}), q)

    def test_healthz_404_405(self):
        self.assertEqual(self.get("/healthz")[::2], (200, {"status": "alive"}))
        self.assertEqual(self.get("/v1/nothing")[::2], (404, {"error": "no such path: /v1/nothing"}))
        self.conn.request("POST", "/v1/allow?key=a&limit=1&window=1s", body=b"")
        r = self.conn.getresponse()
        self.assertEqual((r.status, r.getheader("Allow")), (405, "GET"))
        self.assertEqual(json.loads(r.read()), {"error": "method not allowed: use GET"})

    def test_keep_alive_serves_many_on_one_connection(self):
        self.get("/healthz")
        sock = self.conn.sock
        self.assertIsNotNone(sock)
        for i in range(20):
            status, h, body = self.allow("ka", 100, "1m", at=7)
            self.assertEqual((status, body["remaining"]), (200, 99 - i))
            self.assertIs(self.conn.sock, sock, "http.client reconnected: keep-alive broken")

    def test_pipelined_requests_answered_in_order(self):
        req = b"".join(b"GET /v1/allow?key=pipe&limit=2&window=1m&at=%d HTTP/1.1\r\n"
                       b"Host: x\r\n\r\n" % (BASE + 9) for _ in range(3))
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(req)
            data = b""
            while data.count(b"HTTP/1.1 ") < 3 or not data.endswith(b"}\n"):
                chunk = s.recv(65536)
                self.assertTrue(chunk, "closed early: %r" % data)
                data += chunk
        self.assertEqual(re.findall(rb"HTTP/1.1 (\d+)", data), [b"200", b"200", b"429"])

    def test_oversized_header_is_431_while_others_are_served(self):
        other = self.srv.http_conn()
        self.addCleanup(other.close)
        self.assertEqual(self.allow("big", 10, "1m", at=11)[0], 200)
        self.assertEqual(self.get("/healthz", conn=other)[0], 200)
        self.conn.request("GET", "/healthz", headers={"X-Big": "a" * 9000})
        r = self.conn.getresponse()
        self.assertEqual(r.status, 431)
        self.assertEqual(json.loads(r.read()),
                         {"error": "request headers longer than SL_HTTP_MAX_HEADERS bytes"})
        sock = other.sock
        self.assertEqual(self.get("/healthz", conn=other)[0], 200)
        self.assertIs(other.sock, sock)
        # a target beyond SL_HTTP_MAX_URI: 414
        self.conn.request("GET", "/healthz?" + "a" * 9000)
        r = self.conn.getresponse()
        r.read()
        self.assertEqual(r.status, 414)
        # far beyond SL_HTTP_MAX_HEADERS: 431 as soon as the bound is
        # passed, and closed; a body beyond SL_HTTP_MAX_BODY: 413
        for headers, body, want in (({"X-Big": "a" * 70000}, None, 431),
                                    ({}, b"a" * 70000, 413)):
            c = self.srv.http_conn()
            self.addCleanup(c.close)
            try:
                c.request("POST" if body else "GET", "/healthz", body=body, headers=headers)
                r = c.getresponse()
                r.read()
                self.assertEqual(r.status, want)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed while the request was still being sent: refused too
            self.assertEqual(self.get("/healthz", conn=other)[0], 200)
            self.assertIs(other.sock, sock)


class TestHttpClientTime(ServerTestCase):
    """`at` needs --trust-client-time, as RESP's AT."""
    HTTP = True
    TRUST = False

    def test_at_refused_without_trust(self):
        c = self.srv.http_conn()
        self.addCleanup(c.close)
        c.request("GET", "/v1/allow?key=a&limit=1&window=1s&at=%d" % BASE)
        r = c.getresponse()
        body = json.loads(r.read())
        with self.srv.raw() as rc:
            want = rc.cmd("RL.ALLOW", "a", "1", "1s", "AT", str(BASE))
        self.assertEqual(r.status, 400)
        self.assertEqual("ERR " + body["error"], want.line)


class TestHttpPortOption(unittest.TestCase):
    """--http-port's values: refused ones name the token, and HTTP on the
    RESP port is refused before anything listens."""

    def run_sluiced(self, *args):
        p = run_checked([SLUICED] + list(args), capture_output=True, text=True,
                        timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr

    def test_bad_values(self):
        rc, err = self.run_sluiced("--port", "0", "--http-port", "80x")
        self.assertEqual(rc, 2)
        self.assertIn("invalid --http-port '80x': expected an integer 0..65535 (0 = off), or any "
                      "(a free port)", err)
        port = free_port()
        rc, err = self.run_sluiced("--port", str(port), "--http-port", str(port))
        self.assertEqual(rc, 2)
        self.assertIn("--http-port %d is also --port: give them different ports" % port, err)
        self.assertTrue(nothing_listening(port))
