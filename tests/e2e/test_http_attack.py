"""What an attacker found over HTTP (issue 23, part B, findings 6-9), each
re-run against the real daemon:

- connections beyond --max-clients take no more descriptors than the
  server reserved for them, whichever front they come to (docs/sluiced.md,
  --max-clients; net.h: SL_NET_REFUSED_MAX);
- the admin token of /v1/rules has the failed-attempt limit of every other
  credential (--auth-fail-limit), per client address;
- a request head two HTTP readers could frame differently is refused with
  400 and the connection closed, so nothing inside it is read as a request
  (docs/http.md, "Hostile clients");
- behind --trusted-proxies, failures count against the client the proxy
  names, not against the proxy.

Raw sockets throughout: what is asserted is the bytes a client reads."""

import json
import os
import re
import resource
import socket
import subprocess
import time
import unittest
from unittest import mock

from harness import (HOST, SLOW, Server, ServerTestCase, assert_clean_stop, deadline,
                     parse_info, read_close)

REFUSED_MAX = 16         # src/server/net.h: SL_NET_REFUSED_MAX
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # empty SETTINGS, stream 0


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path



def answers(out):
    """The status codes of the HTTP answers in out, in order."""
    codes = []
    for part in out.split(b"HTTP/1.")[1:]:
        codes.append(int(part[2:5]))
    return codes


def fds_of(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def resp_answer(port):
    """A new RESP client's answer to PING: '+PONG' or the refusal (b'' if
    closed without one); a hang raises socket.timeout."""
    with socket.create_connection((HOST, port), timeout=10 * SLOW) as s:
        s.sendall(b"PING\r\n")
        out = b""
        while not out.endswith(b"\r\n"):
            try:
                d = s.recv(64)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
        return out


def grpc_answer(port):
    """A new gRPC client's first bytes: the server's SETTINGS frame, or b''
    for a refusal (closed); a hang raises socket.timeout."""
    with socket.create_connection((HOST, port), timeout=10 * SLOW) as s:
        s.sendall(PREFACE + SETTINGS_FRAME)
        try:
            return s.recv(9)
        except ConnectionResetError:
            return b""


class TestDescriptorsBeyondMaxClients(unittest.TestCase):
    """Hundreds of idle HTTP connections against a small --max-clients, with
    few descriptors to spare: RESP and gRPC clients are still answered or
    refused at once (never left in the backlog behind "accept failed: Too
    many open files"), and served once the HTTP ones are gone."""

    def setUp(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1024:  # the test's own sockets
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))

    def start(self, *args, preexec_fn=None):
        # the counted HTTP connections stay open through the test: HTTP's
        # idle deadline is --recv-timeout's (docs/http.md)
        srv = Server(*args, "--recv-timeout", "120s", name=self.id().split(".")[-1],
                     trust_client_time=True, http=True, grpc=True)
        if preexec_fn is None:
            srv.start()
        else:
            real = subprocess.Popen
            with mock.patch.object(subprocess, "Popen",
                                   lambda *a, **k: real(*a, preexec_fn=preexec_fn, **k)):
                srv.start()
        self.addCleanup(assert_clean_stop, srv)
        return srv

    def flood(self, srv, n):
        """Opens n idle HTTP connections beside a RESP client of its own
        (to read INFO), and waits until the acceptor took each: counted up
        to max-clients, the rest refused.  Returns the sockets."""
        monitor = srv.raw()
        self.addCleanup(monitor.close)

        def info():
            return parse_info(monitor.cmd("INFO"))
        i0 = info()
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(n):
            socks.append(socket.create_connection((HOST, srv.http_port), timeout=10 * SLOW))
        until = deadline(30)
        while True:
            i = info()
            rejected = int(i["rejected_connections"]) - int(i0["rejected_connections"])
            if (int(i["http_clients"]) + rejected == n and
                    i["connected_clients"] == i["maxclients"]):
                return socks
            self.assertLess(time.monotonic(), until,
                            "the acceptor did not take the %d connections: %s\n%s"
                            % (n, {k: i[k] for k in ("http_clients", "rejected_connections")},
                               srv.log()[-2000:]))
            time.sleep(0.05)

    def assert_fronts_answer(self, srv, socks):
        # full: a RESP client is refused with its error line, a gRPC one
        # closed -- at once, both
        self.assertEqual(resp_answer(srv.port), b"-ERR max number of clients reached\r\n")
        self.assertEqual(grpc_answer(srv.grpc_port), b"")
        for s in socks:
            s.close()
        srv.wait_info("http_clients", lambda v: v == 0, what="HTTP clients gone")
        self.assertEqual(resp_answer(srv.port), b"+PONG\r\n")
        got = grpc_answer(srv.grpc_port)
        self.assertEqual(got[3:4], b"\x04", got)  # a SETTINGS frame
        self.assertNotIn("Too many open files", srv.log())
        self.assertNotIn("accept failed", srv.log())

    def test_refused_http_clients_take_a_bounded_number_of_descriptors(self):
        """The finding: 300 idle HTTP connections, --max-clients 20; the
        server may open max-clients + SL_NET_REFUSED_MAX descriptors beyond
        what it holds at rest, no more."""
        srv = self.start("--max-clients", "20", "--threads", "2")
        n = fds_of(srv.pid) + 20 + REFUSED_MAX + 4
        resource.prlimit(srv.pid, resource.RLIMIT_NOFILE, (n, n))
        socks = self.flood(srv, 300)
        self.assert_fronts_answer(srv, socks)

    def test_the_open_file_limit_at_start_leaves_room(self):
        """Started under a hard open-file limit too low for --max-clients,
        sluiced lowers max-clients so that the counted clients, the refused
        ones being answered and its own descriptors (16 workers' here) all
        fit; then filled, it still answers every front."""
        hard = 300

        def low_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        srv = self.start("--max-clients", "10000", "--threads", "16", preexec_fn=low_limit)
        m = re.search(r"open-file limit too low for max-clients.* new_max_clients=(\d+)",
                      srv.log())
        self.assertIsNotNone(m, srv.log())
        maxc = int(m.group(1))
        self.assertLessEqual(fds_of(srv.pid) + maxc + REFUSED_MAX, hard,
                             "max-clients %d leaves no room" % maxc)
        socks = self.flood(srv, maxc + 100)
        self.assert_fronts_answer(srv, socks)


class TestFraming(ServerTestCase):
    """Request heads that two readers could frame differently (RFC 9112):
    400, Connection: close, and the request hidden inside never answered."""

    HTTP = True

    INNER = b"GET /nope-smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

    def send(self, raw):
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(raw)
            return read_close(s)

    def assert_refused(self, raw, error):
        out = self.send(raw)
        head, _, body = out.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.assertEqual(lines[0], b"HTTP/1.1 400 Bad Request", out[:300])
        self.assertIn(b"Connection: close", lines)
        self.assertEqual(json.loads(body), {"error": "malformed request: " + error})
        # one answer only: nothing after the refused head was read as a request
        self.assertEqual(answers(out), [400], out)
        self.assertNotIn(b"smuggled", out)

    def test_whitespace_before_the_colon(self):
        """The finding: `Content-Length : 35` was honoured, and the request
        pipelined inside its 35 bytes was swallowed as body."""
        inner = b"GET /healthz HTTP/1.1\r\nHost: xy\r\n\r\n"
        body = inner[:35]
        self.assertEqual(len(body), 35)
        self.assert_refused(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length : 35\r\n\r\n"
                            + body + self.INNER,
                            "whitespace between a header name and its colon "
                            "(RFC 9112 section 5.1)")

    def test_obs_fold(self):
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n"
                            + self.INNER,
                            "obs-fold: a header line begins with whitespace "
                            "(RFC 9112 section 5.2)")

    def test_bare_lf(self):
        self.assert_refused(b"GET /healthz HTTP/1.1\nHost: x\n\n" + self.INNER,
                            "bare LF: a line must end with CRLF (RFC 9112 section 2.2)")
        self.assert_refused(b"GET /healthz HTTP/1.1\r\nHost: x\n\r\n" + self.INNER,
                            "bare LF: a line must end with CRLF (RFC 9112 section 2.2)")

    def test_transfer_encoding_other_than_chunked(self):
        self.assert_refused(b"POST /v1/check HTTP/1.1\r\nHost: x\r\n"
                            b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + self.INNER,
                            "Transfer-Encoding other than chunked (RFC 9112 section 6.3)")

    def test_ambiguous_lengths_refused(self):
        """Already refused by http-parser itself (its reasons): kept so."""
        for raw, error in [
            (b"POST /v1/check HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc",
             "unexpected content-length header"),
            (b"POST /v1/check HTTP/1.1\r\nContent-Length: 3\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "unexpected content-length header"),
            (b"POST /v1/check HTTP/1.1\r\nContent-Length: -3\r\n\r\nabc",
             "invalid character in content-length header"),
            (b"GET /healthz HTTP/1.1\r\nX(A): b\r\n\r\n", "invalid character in header"),
        ]:
            with self.subTest(raw=raw):
                self.assert_refused(raw + self.INNER, error)

    def test_a_clean_pipeline_is_still_served(self):
        out = self.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(answers(out), [200, 200], out)


def request(port, path, token=None, xff=None, source=None):
    """One GET on a new connection, from source (an address on loopback)
    if given: (status, headers dict, JSON body)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10 * SLOW)
    try:
        if source is not None:
            s.bind((source, 0))
        s.connect((HOST, port))
        head = "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % path
        if token is not None:
            head += "Authorization: Bearer %s\r\n" % token
        if xff is not None:
            head += "X-Forwarded-For: %s\r\n" % xff
        s.sendall((head + "\r\n").encode())
        out = read_close(s)
    finally:
        s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


class TestAdminTokenFailures(ServerTestCase):
    """The admin token of /v1/rules counts against --auth-fail-limit (10 per
    minute here, the default) per client address, as AUTH and the bearer
    tokens do; another address is not held back."""

    HTTP = True
    TOKEN = "the-admin-token"

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-http-attack-admin-")
        rules = os.path.join(d, "rules")
        os.mkdir(rules)
        write(os.path.join(rules, "api.yaml"), "domain: api\ndescriptors:\n  - key: user\n"
              "    rate_limit: {unit: hour, requests_per_unit: 5}\n")
        cls.SERVER_ARGS = ("--rules", rules,
                           "--admin-token-file", write(os.path.join(d, "token"), cls.TOKEN + "\n"),
                           "--auth-fail-limit", "10/60s")
        super().setUpClass()

    def test_wrong_admin_tokens_are_limited_per_address(self):
        port = self.srv.http_port
        for i in range(10):
            status, h, body = request(port, "/v1/rules", "wrong-%d" % i)
            self.assertEqual((status, body), (401, {"error": "wrong bearer token"}), i)
        # the 11th: refused unchecked, even the right token, as the bearer paths answer
        for token in ("wrong-10", self.TOKEN):
            status, h, body = request(port, "/v1/rules", token)
            self.assertEqual(status, 401, body)
            self.assertEqual(h["WWW-Authenticate"],
                             'Bearer realm="sluiced", error="invalid_token"')
            self.assertGreaterEqual(int(h["Retry-After"]), 1)
            self.assertLessEqual(int(h["Retry-After"]), 60)
            self.assertRegex(body["error"],
                             r"^too many failed logins from 127\.0\.0\.1: retry in \d+ ms \(at "
                             r"most 10 failures per 60000 ms; this token was not checked\)$")
        # another address: its right token works, its wrong one is its own failure
        status, _, body = request(port, "/v1/rules", self.TOKEN, source="127.0.0.2")
        self.assertEqual(status, 200, body)
        status, _, body = request(port, "/v1/rules", "wrong", source="127.0.0.2")
        self.assertEqual((status, body), (401, {"error": "wrong bearer token"}))
        self.assertIn("too many failed logins", self.srv.log())


class TestFailuresBehindTrustedProxies(ServerTestCase):
    """--trusted-proxies: failed logins count against the client the proxy
    names (X-Forwarded-For), the address the rate limits use -- not against
    the proxy, which would lock every client behind it out."""

    HTTP = True
    PASSWORD = "the-password"

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-http-attack-xff-")
        cls.SERVER_ARGS = ("--requirepass-file",
                           write(os.path.join(d, "password"), cls.PASSWORD + "\n"),
                           "--trusted-proxies", "127.0.0.1/32", "--auth-fail-limit", "10/60s")
        super().setUpClass()

    def test_ten_wrong_tokens_for_one_client_leave_another_alone(self):
        port, path = self.srv.http_port, "/v1/allow?key=k&limit=100&window=1m"
        for i in range(10):
            status, _, body = request(port, path, "wrong-%d" % i, xff="6.6.6.6")
            self.assertEqual(status, 401, body)
        status, _, body = request(port, path, self.PASSWORD, xff="7.7.7.7")
        self.assertEqual(status, 200, body)
        self.assertTrue(body["allowed"], body)
        status, h, body = request(port, path, self.PASSWORD, xff="6.6.6.6")
        self.assertEqual(status, 401, body)
        self.assertIn("Retry-After", h)
        self.assertRegex(body["error"], r"^too many failed logins from 6\.6\.6\.6: ")
        # the proxy's own requests (no X-Forwarded-For) are not held back either
        status, _, body = request(port, path, self.PASSWORD)
        self.assertEqual(status, 200, body)
