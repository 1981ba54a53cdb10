"""HTTP's protections (docs/http.md, "Protections"; docs/security.md,
"HTTP"): bearer tokens on the decision endpoints when a password is
configured, HTTPS (--https-port) with the server's TLS context, HTTP
connections counted against --max-clients and shown in INFO, and hostile
clients: slowloris, malformed request lines, pipelining.

Every answer is read as a client reads it: status, exact headers, exact
JSON."""

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import tempfile
import time

from harness import (BASE, HOST, SANITIZED, SLOW, RespError, ServerTestCase,
                     assert_clean_stop, deadline, free_port, nothing_listening, parse_info,
                     read_close)
import test_tls  # its certificate helpers (only the module: its tests stay its own)

PASSWORD = "default-pw"
USERS = {"dec": "dec-pw", "reader": "read-pw", "colon": "pw:with:colons"}

ALLOW = "/v1/allow?key=k&limit=100&window=1m&at=%d" % BASE


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def http_get(conn, path, headers=None):
    """GET path over conn; returns (status, headers dict, JSON body)."""
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    return r.status, {k: v for k, v in r.getheaders()}, json.loads(body)


class TestHttpBearer(ServerTestCase):
    """A server with --requirepass-file and --users-file: /v1/allow needs a
    bearer token, /healthz does not."""

    HTTP = True
    TRUST = True

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-http-bearer-")
        pw = write(os.path.join(d, "password"), PASSWORD + "\n")
        sha = hashlib.sha256(USERS["reader"].encode()).hexdigest()
        users = write(os.path.join(d, "users"), "\n".join([
            "user dec >%s +deciding" % USERS["dec"],
            "user reader #%s +reading" % sha,
            "user colon >%s +deciding" % USERS["colon"],
            "user retired off >retired-pw +all",
            ""]))
        cls.SERVER_ARGS = ("--requirepass-file", pw, "--users-file", users,
                           "--auth-fail-limit", "1000/90s")
        super().setUpClass()

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def assert_401(self, headers, challenge, error):
        status, h, body = http_get(self.conn, ALLOW, headers)
        self.assertEqual(status, 401, headers)
        self.assertEqual(h["WWW-Authenticate"], challenge)
        self.assertEqual(h["Content-Type"], "application/json")
        self.assertEqual(body, {"error": error})
        self.assertNotIn("RateLimit", h)

    def test_no_header_is_401_with_a_challenge(self):
        self.assert_401({}, 'Bearer realm="sluiced"',
                        "a password is configured: send Authorization: Bearer <password> "
                        "(or Bearer <user>:<password>)")

    def test_wrong_tokens_are_401_invalid_token(self):
        wrong = "invalid bearer token: wrong user or password, or the user is disabled"
        ch = 'Bearer realm="sluiced", error="invalid_token"'
        for tok in ("nope", PASSWORD + "x", "dec:" + PASSWORD, "dec:wrong", "nobody:dec-pw",
                    "retired:retired-pw", "default:", ":" + PASSWORD):
            with self.subTest(token=tok):
                self.assert_401({"Authorization": "Bearer " + tok}, ch, wrong)

    def test_malformed_headers_are_401_invalid_request(self):
        bad = ("malformed Authorization header: expected Bearer <password> or Bearer "
               "<user>:<password>")
        ch = 'Bearer realm="sluiced", error="invalid_request"'
        for v in ("Basic ZGVmYXVsdDpkZWZhdWx0LXB3", "Bearer", "Bearer ", "Bearerdefault-pw",
                  "Bearer default-pw extra", "Token " + PASSWORD):
            with self.subTest(value=v):
                self.assert_401({"Authorization": v}, ch, bad)

    def test_good_tokens_decide(self):
        for i, tok in enumerate((PASSWORD, "default:" + PASSWORD, "dec:dec-pw",
                                 "colon:pw:with:colons")):
            with self.subTest(token=tok):
                for scheme in ("Bearer", "bearer"):
                    status, h, body = http_get(
                        self.conn, "/v1/allow?key=good%d%s&limit=5&window=1m&at=%d"
                        % (i, scheme, BASE), {"Authorization": "%s %s" % (scheme, tok)})
                    self.assertEqual(status, 200)
                    self.assertEqual(body["remaining"], 4)
                    self.assertEqual(h["X-RateLimit-Remaining"], "4")

    def test_user_without_deciding_is_403(self):
        status, h, body = http_get(self.conn, ALLOW, {"Authorization": "Bearer reader:read-pw"})
        self.assertEqual(status, 403)
        self.assertEqual(body, {"error": "user 'reader' has no permission for this endpoint "
                                         "(it needs +deciding)"})
        self.assertNotIn("WWW-Authenticate", h)

    def test_every_route_is_guarded_as_its_row_says(self):
        """The guard is the router's, from each route's row: the decisions
        (/v1/check, /v1/auth/) need +deciding, the status page and its JSON
        (they name clients' keys) +reading, and /metrics, /healthz,
        /readyz stay open (rule names and counts only)."""
        dec, rd = {"Authorization": "Bearer dec:dec-pw"}, {"Authorization": "Bearer reader:read-pw"}
        check = json.dumps({"domain": "none", "descriptors": [[{"key": "k", "value": "v"}]]})
        cases = [  # method, path, body, needs
            ("POST", "/v1/check", check, "deciding"),
            ("GET", "/v1/auth/none", None, "deciding"),
            ("GET", "/v1/status", None, "reading"),
            ("GET", "/", None, "reading"),
            ("GET", "/metrics", None, None),
            ("GET", "/readyz", None, None),
        ]
        for method, path, body, needs in cases:
            with self.subTest(path=path):
                def ask(headers):
                    self.conn.request(method, path, body=body, headers=headers)
                    r = self.conn.getresponse()
                    r.read()
                    return r.status
                if needs is None:
                    self.assertEqual(ask({}), 200)
                    continue
                self.assertEqual(ask({}), 401)
                good, other = (dec, rd) if needs == "deciding" else (rd, dec)
                self.assertEqual(ask(other), 403)
                # without rules, check answers 503 and auth 503: past the guard
                self.assertIn(ask(good), (200, 503))

    def test_healthz_stays_open(self):
        status, h, body = http_get(self.conn, "/healthz")
        self.assertEqual((status, body), (200, {"status": "alive"}))

    def auth_stats(self):
        with self.srv.raw() as c:
            self.assertEqual(c.cmd("AUTH", PASSWORD), b"OK")
            info = parse_info(c.cmd("INFO", "stats"))
        return {k: int(info[k]) for k in ("auth_ok", "acl_access_denied_auth",
                                          "acl_access_denied_cmd")}

    def test_logins_are_counted_as_resp_counts_them(self):
        before = self.auth_stats()
        http_get(self.conn, ALLOW, {"Authorization": "Bearer wrong"})
        http_get(self.conn, ALLOW, {"Authorization": "Bearer reader:read-pw"})
        http_get(self.conn, ALLOW, {"Authorization": "Bearer dec:dec-pw"})
        after = self.auth_stats()
        # the INFO connection's own AUTH is one auth_ok too
        self.assertEqual(after, {"auth_ok": before["auth_ok"] + 3,
                                 "acl_access_denied_auth": before["acl_access_denied_auth"] + 1,
                                 "acl_access_denied_cmd": before["acl_access_denied_cmd"] + 1})

    def test_too_many_failures_block_the_address(self):
        d = tempfile.mkdtemp(prefix="sluice-http-block-")
        self.addCleanup(shutil.rmtree, d, True)
        pw = write(os.path.join(d, "password"), PASSWORD + "\n")
        srv = self.new_server("--requirepass-file", pw, "--auth-fail-limit", "2/90s", http=True)
        c = srv.http_conn()
        self.addCleanup(c.close)
        for _ in range(2):
            self.assertEqual(http_get(c, ALLOW, {"Authorization": "Bearer wrong"})[0], 401)
        status, h, body = http_get(c, ALLOW, {"Authorization": "Bearer " + PASSWORD})
        self.assertEqual(status, 401)
        self.assertEqual(h["WWW-Authenticate"], 'Bearer realm="sluiced", error="invalid_token"')
        m = re.fullmatch(r"too many failed logins from 127\.0\.0\.1: retry in (\d+) ms \(at most 2 "
                         r"failures per 90000 ms; this token was not checked\)", body["error"])
        self.assertIsNotNone(m, body)
        retry_ms = int(m.group(1))
        self.assertTrue(0 < retry_ms <= 90000, retry_ms)
        self.assertEqual(h["Retry-After"], str((retry_ms + 999) // 1000))


HTTPS_LISTEN_RE = re.compile(rb'msg="?listening"? addr=127\.0\.0\.1:(\d+) threads=\d+ https=yes')
CERTS = None


def setUpModule():
    global CERTS
    CERTS = tempfile.mkdtemp(prefix="sluice-https-")
    test_tls.make_cert(CERTS, "ca", "sluice test CA")
    test_tls.make_cert(CERTS, "server", "localhost", ca="ca", san="IP:127.0.0.1,DNS:localhost")


def tearDownModule():
    shutil.rmtree(CERTS, True)


def https_args(*more):
    return ("--https-port", "any", "--tls-cert-file", os.path.join(CERTS, "server.crt"),
            "--tls-key-file", os.path.join(CERTS, "server.key"),
            "--tls-auth-clients", "no") + more


def https_port(srv):
    m = HTTPS_LISTEN_RE.search(srv.log().encode())
    if m is None:
        raise AssertionError("no https=yes listener in the log:\n" + srv.log()[-2000:])
    return int(m.group(1))



class TestHttps(ServerTestCase):
    """--https-port: HTTP over the server's TLS context."""

    HTTP = True

    @classmethod
    def setUpClass(cls):
        cls.SERVER_ARGS = https_args()
        super().setUpClass()
        cls.port = https_port(cls.srv)

    def https_conn(self):
        ctx = ssl.create_default_context(cafile=os.path.join(CERTS, "ca.crt"))
        c = http.client.HTTPSConnection(HOST, self.port, timeout=10 * SLOW, context=ctx)
        self.addCleanup(c.close)
        return c

    def test_decisions_over_https(self):
        c = self.https_conn()
        for i in range(3):
            status, h, body = http_get(c, "/v1/allow?key=tls&limit=2&window=1m&at=%d" % BASE)
            self.assertEqual(status, 200 if i < 2 else 429)
            self.assertEqual(body["remaining"], max(1 - i, 0))
            self.assertEqual(h["X-RateLimit-Limit"], "2")
        self.assertEqual(c.sock.version() in ("TLSv1.2", "TLSv1.3"), True, c.sock.version())
        self.assertEqual(http_get(c, "/healthz")[2], {"status": "alive"})

    def test_the_plain_port_still_serves_http(self):
        c = self.srv.http_conn()
        self.addCleanup(c.close)
        self.assertEqual(http_get(c, "/healthz")[:3:2], (200, {"status": "alive"}))

    def test_a_client_that_does_not_check_the_ca_is_refused_by_itself(self):
        ctx = ssl.create_default_context()  # the system's CAs: ours is not one
        c = http.client.HTTPSConnection(HOST, self.port, timeout=10 * SLOW, context=ctx)
        self.addCleanup(c.close)
        with self.assertRaises(ssl.SSLCertVerificationError):
            c.request("GET", "/healthz")

    def test_plain_text_on_the_https_port_is_closed_without_an_answer(self):
        with socket.create_connection((HOST, self.port), timeout=10 * SLOW) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            out = read_close(s)
        self.assertNotIn(b"HTTP/1.", out)
        self.assertNotIn(b"alive", out)
        # and the server goes on serving HTTPS
        self.assertEqual(http_get(self.https_conn(), "/healthz")[0], 200)

    def test_https_clients_are_counted(self):
        c = self.https_conn()
        self.assertEqual(http_get(c, "/healthz")[0], 200)
        self.srv.wait_info("http_clients", lambda n: n >= 1, "clients")
        c.close()
        self.srv.wait_info("http_clients", lambda n: n == 0, "clients")

    def test_https_port_needs_a_certificate(self):
        rc, msg = test_tls.refused_start(["--https-port", "any"])
        self.assertEqual((rc, msg), (2, "sluiced: --https-port needs --tls-cert-file and "
                                        "--tls-key-file (the server's certificate and its "
                                        "private key)\nTry 'sluiced --help'.\n"))

    def test_https_port_clashes_are_refused(self):
        p = str(free_port())
        rc, msg = test_tls.refused_start(list(https_args()[2:]) + ["--https-port", p,
                                                                   "--http-port", p])
        self.assertEqual((rc, msg), (2, "sluiced: --https-port %s is also --http-port: give "
                                        "them different ports\nTry 'sluiced --help'.\n" % p))

    def test_bad_https_port_value(self):
        rc, msg = test_tls.refused_start(["--https-port", "x"])
        self.assertEqual((rc, msg), (2, "sluiced: invalid --https-port 'x': expected an integer "
                                        "0..65535 (0 = off), or any (a free port)\n"
                                        "Try 'sluiced --help'.\n"))


class TestHttpClients(ServerTestCase):
    """HTTP connections in INFO (http_clients, connected_clients) and
    against --max-clients."""

    HTTP = True

    def test_http_clients_gauge(self):
        # the only client first: connections of earlier tests may still be
        # closing, and would count in the base but not after (TSan saw 5 < 6)
        sole = self.srv.sole_client()
        self.addCleanup(sole.close)
        conns = [self.srv.http_conn() for _ in range(3)]
        for c in conns:
            self.addCleanup(c.close)
            self.assertEqual(http_get(c, "/healthz")[0], 200)
        # a connection that never sends a byte counts too
        idle = socket.create_connection((HOST, self.srv.http_port))
        self.addCleanup(idle.close)
        # connected_clients counts them too: the four and `sole`.  Polled on
        # `sole` itself: wait_info's own connections close asynchronously
        # and were seen still counted (6)
        until = deadline(20)
        while True:
            info = parse_info(sole.cmd("INFO", "clients"))
            got = (int(info["http_clients"]), int(info["connected_clients"]))
            if got == (4, 5) or time.monotonic() > until:
                break
            time.sleep(0.02)
        self.assertEqual(got, (4, 5))
        for c in conns:
            c.close()
        idle.close()
        self.srv.wait_info("http_clients", lambda n: n == 0, "clients")

    def test_max_clients_counts_http_and_refuses_with_503(self):
        srv = self.new_server("--max-clients", "2", http=True)
        resp = srv.sole_client()  # 1: this RESP client
        self.addCleanup(resp.close)
        a = srv.http_conn()
        self.addCleanup(a.close)
        self.assertEqual(http_get(a, "/healthz")[0], 200)  # 2: full now
        b = srv.http_conn()
        self.addCleanup(b.close)
        b.request("GET", "/healthz")
        r = b.getresponse()
        self.assertEqual(r.status, 503)
        self.assertEqual(r.getheader("Connection"), "close")
        self.assertEqual(json.loads(r.read()), {"error": "max number of clients reached"})
        # RESP sees the HTTP client too
        with srv.raw() as extra:
            self.assertEqual(extra.read_reply(), RespError("ERR max number of clients reached"))
        self.assertEqual(int(parse_info(resp.cmd("INFO", "clients"))["http_clients"]), 1)
        a.close()
        b.close()
        until = deadline(20)
        while True:  # the slot comes back once the server saw a close
            c = srv.http_conn()
            try:
                status = http_get(c, "/healthz")[0]
            finally:
                c.close()
            if status == 200 or time.monotonic() >= until:
                break
            time.sleep(0.02)
        self.assertEqual(status, 200)


class TestHttpHostile(ServerTestCase):
    """Slow, malformed and pipelined clients, on a server with a short
    --recv-timeout."""

    HTTP = True
    SERVER_ARGS = ("--recv-timeout", "1s")

    def healthz(self):
        c = self.srv.http_conn()
        try:
            return http_get(c, "/healthz")[::2]
        finally:
            c.close()

    def test_slowloris_is_closed_while_others_are_served(self):
        """Connections trickling a request line a byte at a time, faster
        than an inactivity timeout could notice, are closed at their
        deadline; a normal client is served meanwhile; RSS stays bounded."""
        n = 40 if SANITIZED else 200
        line = b"GET /healthz?" + b"x" * 4000 + b" HTTP/1.1\r\n"
        rss0 = self.srv.rss_kb()
        socks = []
        for _ in range(n):
            s = socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW)
            s.setblocking(False)
            socks.append(s)
        open_ = {s: 0 for s in socks}  # socket -> bytes sent
        cut_at = []  # bytes sent by each connection when it was closed
        closed, served, until = 0, 0, deadline(60)
        got = b""
        while open_ and time.monotonic() < until:
            for s in list(open_):
                try:
                    d = s.recv(4096)
                    got += d
                    if d == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except (ConnectionResetError, BrokenPipeError):
                    cut_at.append(open_.pop(s))
                    closed += 1
                    continue
                i = open_[s]
                if i < len(line):
                    try:
                        s.send(line[i:i + 1])
                        open_[s] = i + 1
                    except (ConnectionResetError, BrokenPipeError):
                        cut_at.append(open_.pop(s))
                        closed += 1
                    except BlockingIOError:
                        pass
            if served < 20:  # another client, served while the trickle goes on
                self.assertEqual(self.healthz(), (200, {"status": "alive"}))
                served += 1
            time.sleep(0.05)
        for s in socks:
            s.close()
        self.assertEqual((closed, len(open_)), (n, 0), "trickling connections left open")
        self.assertEqual(got, b"", "a trickling connection was answered")
        # served while the trickle went on: each round's healthz is asserted
        # above, and the first round runs with all n connections open; how
        # many rounds fit before the deadline closed the trickle is the
        # machine's speed, not sluiced's behaviour, so it is not asserted
        # each line was cut before its end: no request was ever whole
        self.assertEqual(len(cut_at), n)
        self.assertLess(max(cut_at), len(line))
        self.srv.wait_info("http_clients", lambda v: v == 0, "clients")
        grown = self.srv.rss_kb() - rss0
        self.assertLess(grown, 64 * 1024, "RSS grew by %d KB for %d connections" % (grown, n))
        self.assertEqual(self.healthz(), (200, {"status": "alive"}))

    # (what, bytes sent, the status line, the JSON error): each answered
    # with Connection: close, and the connection closed after it
    MALFORMED = [
        ("garbage", b"garbage\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid HTTP method"),
        ("bad version", b"GET /healthz HTTP/9.9\r\n\r\n",
         b"HTTP/1.0 505 HTTP Version Not Supported", "only HTTP/1.0 and HTTP/1.1 are served"),
        ("not HTTP", b"GET /healthz FOO/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid constant string"),
        ("no target", b"GET\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid HTTP method"),
        ("empty target", b"GET  HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid URL"),
        ("NUL in the target", b"GET /heal\x00thz HTTP/1.1\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid URL"),
        ("header without colon", b"GET /healthz HTTP/1.1\r\nNoColonHere\r\n\r\n",
         b"HTTP/1.1 400 Bad Request", "malformed request: invalid character in header"),
        ("binary", b"\x00\x01\x02\xff\r\n\r\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: invalid HTTP method"),
        ("lone LF lines", b"\n\n\n\n", b"HTTP/1.1 400 Bad Request",
         "malformed request: empty lines before the request line"),
        ("negative length", b"POST /v1/allow HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
         b"HTTP/1.1 400 Bad Request", "malformed request: invalid character in content-length header"),
        ("huge length",
         b"POST /v1/allow HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
         b"HTTP/1.1 413 Content Too Large", "request body longer than SL_HTTP_MAX_BODY bytes"),
        ("chunked", b"POST /v1/allow HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
         b"HTTP/1.1 411 Length Required",
         "chunked request bodies are not taken: send Content-Length"),
    ]

    def test_malformed_requests_get_a_clean_error_and_close(self):
        for name, raw, status, error in self.MALFORMED:
            with self.subTest(name=name):
                with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
                    s.sendall(raw)
                    out = read_close(s)  # closed after the answer
                head, body = out.split(b"\r\n\r\n", 1)
                lines = head.split(b"\r\n")
                self.assertEqual(lines[0], status, (name, out[:200]))
                self.assertIn(b"Connection: close", lines, name)
                self.assertIn(b"Content-Type: application/json", lines, name)
                self.assertIn(b"Content-Length: %d" % len(body), lines, name)
                self.assertEqual(json.loads(body), {"error": error}, name)
                self.assertEqual(self.healthz(), (200, {"status": "alive"}), name)
        self.srv.wait_info("http_clients", lambda v: v == 0, "clients")

    def test_a_nul_in_a_header_value_is_refused(self):
        """A NUL is not a header value's byte (RFC 9110 section 5.5): the
        request is refused, not read up to the NUL."""
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\x00b\r\nConnection: close\r\n\r\n")
            out = read_close(s)
        self.assertTrue(out.startswith(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"), out)
        self.assertTrue(out.endswith(
            b'\r\n\r\n{"error": "malformed request: invalid character in header"}\n'), out)

    def test_pipelined_requests_in_one_send_answered_in_order(self):
        reqs = [b"GET /v1/allow?key=pipe&limit=2&window=1m&at=%d HTTP/1.1\r\nHost: x\r\n\r\n"
                % BASE] * 3 + [b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
                               b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"]
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(b"".join(reqs))
            out = read_close(s)
        statuses = re.findall(rb"^HTTP/1\.1 (\d{3}) ", out, re.M)
        self.assertEqual(statuses, [b"200", b"200", b"429", b"404", b"200"])
        bodies = re.findall(rb"\r\n\r\n(\{[^\n]*\})\n", out)
        self.assertEqual([json.loads(b).get("remaining") for b in bodies[:3]], [1, 0, 0])
        self.assertEqual(json.loads(bodies[3]), {"error": "no such path: /nope"})
        self.assertEqual(json.loads(bodies[4]), {"status": "alive"})

    def test_head_is_framed_and_pipelining_goes_on(self):
        """HEAD gets the GET's headers (Content-Length included) and no
        body, so the next answer on the connection is not mistaken for
        one (found by tests/fuzz/fuzz_http.c)."""
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out = read_close(s)
        first, rest = out.split(b"\r\n\r\n", 1)
        self.assertTrue(first.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertIn(b"\r\nContent-Length: 20", first)
        self.assertTrue(rest.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertTrue(rest.endswith(b'\r\n\r\n{"status": "alive"}\n'), out)

    def test_http10_keeps_the_connection_only_when_asked(self):
        """HTTP/1.0 closes after each answer unless the request asks for
        keep-alive; then the answer says so and the next request is served
        on the same connection."""
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                      b"GET /healthz HTTP/1.0\r\n\r\n")
            out = read_close(s)
        first, rest = out.split(b'{"status": "alive"}\n', 1)
        self.assertTrue(first.startswith(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"), out)
        self.assertTrue(rest.startswith(b"HTTP/1.0 200 OK\r\nConnection: close\r\n"), out)
        self.assertTrue(rest.endswith(b'\r\n\r\n{"status": "alive"}\n'), out)

    def test_pipelined_then_shut_down_gets_every_answer(self):
        """A client that pipelines and shuts its sending side down gets the
        answers to every whole request it sent, then the close."""
        with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3 +
                      b"GET /heal")  # the start of a fourth: never whole
            s.shutdown(socket.SHUT_WR)
            out = read_close(s)
        self.assertEqual(re.findall(rb"^HTTP/1\.1 (\d{3}) ", out, re.M), [b"200"] * 3)
        self.assertTrue(out.endswith(b'\r\n\r\n{"status": "alive"}\n'), out)

    def test_http_versions(self):
        """HTTP/0.x is refused (505, in HTTP/1.0); a later HTTP/1 minor
        version is answered as HTTP/1.1."""
        for req, start, body in (
                (b"GET /healthz HTTP/0.9\r\n\r\n",
                 b"HTTP/1.0 505 HTTP Version Not Supported\r\nConnection: close\r\n",
                 {"error": "only HTTP/1.0 and HTTP/1.1 are served"}),
                (b"GET /healthz HTTP/1.5\r\nConnection: close\r\n\r\n", b"HTTP/1.1 200 OK\r\n",
                 {"status": "alive"})):
            with self.subTest(req=req):
                with socket.create_connection((HOST, self.srv.http_port), timeout=10 * SLOW) as s:
                    s.sendall(req)
                    out = read_close(s)
                self.assertTrue(out.startswith(start), out)
                self.assertEqual(json.loads(out.split(b"\r\n\r\n", 1)[1]), body)


class TestHttpGracefulStop(ServerTestCase):
    """SIGTERM: no new HTTP connection, idle ones closed, a request under
    way answered (with Connection: close) before the exit."""

    def test_sigterm_answers_the_request_under_way(self):
        srv = self.new_server(http=True)
        idle = srv.http_conn()
        self.addCleanup(idle.close)
        self.assertEqual(http_get(idle, "/healthz")[0], 200)  # keep-alive, idle now
        busy = socket.create_connection((HOST, srv.http_port), timeout=10 * SLOW)
        self.addCleanup(busy.close)
        busy.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # not whole yet
        srv.proc.send_signal(signal.SIGTERM)
        until = deadline(20)
        while "shutting down" not in srv.log() and time.monotonic() < until:
            time.sleep(0.01)
        self.assertIn("shutting down", srv.log())
        busy.sendall(b"\r\n")
        # answered, then closed (read_close waits for the close, bounded by
        # the socket's timeout).  Whether the answer says "Connection:
        # close" depends on whether the worker had seen the stop when the
        # request became whole -- the log line is the main thread's, the
        # stop reaches the worker a moment later -- so it is not asserted.
        out = read_close(busy)
        self.assertTrue(out.startswith(b"HTTP/1.1 200 OK\r\n"), out)
        self.assertTrue(out.endswith(b'\r\n\r\n{"status": "alive"}\n'), out)
        self.assertEqual(read_close(idle.sock), b"")  # closed, unanswered: it asked nothing
        self.assertEqual(srv.proc.wait(20 * SLOW), 0)
        assert_clean_stop(srv)
        self.assertTrue(nothing_listening(srv.http_port))
