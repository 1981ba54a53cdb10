"""Forward-auth, /v1/auth/DOMAIN (SPEC section 8, docs/http.md
"Forward-auth"): the descriptors a proxy's request becomes, whom sluiced
believes (--trusted-proxies), --user-header, the statuses (200, 429,
--auth-deny-status) and the headers, over IPv4 and IPv6.

Which descriptors a request became is read from the answer: every rule
below has a name, and RateLimit-Policy lists the rules that matched (parsed
as an RFC 9651 list by sf_list.py).  Also the exact requests Traefik's
ForwardAuth and Envoy's ext_authz HTTP service send (neither runs here)."""

import http.client
import os
import re

from harness import HOST, ROOT, SLUICED, ServerTestCase, run_checked, wait_window_room
from sf_list import parse_list

BIG = "{unit: hour, requests_per_unit: 100000, name: %s}"
RULES = """
domain: edge
descriptors:
  - {key: remote_address, value: 127.0.0.1, rate_limit: %(v4)s}
  - {key: remote_address, value: "::1", rate_limit: %(v6)s}
  - {key: remote_address, value: 203.0.113.7, rate_limit: %(client)s}
  - {key: remote_address, value: "2001:db8::7", rate_limit: %(client6)s}
  - {key: remote_address, value: 10.0.0.9, rate_limit: %(ten)s}
  - {key: method, value: GET, rate_limit: %(get)s}
  - {key: method, value: DELETE, rate_limit: %(delete)s}
  - {key: method, value: POST, rate_limit: %(post)s}
  - {key: path, value: /shop, rate_limit: %(shop)s}
  - {key: path, value: '/caf\\xC3\\xA9', rate_limit: %(cafe)s}
  - {key: path, value: "", rate_limit: %(nopath)s}
  - {key: path, value: /login, rate_limit: {unit: hour, requests_per_unit: 2, name: path-login}}
  - {key: path, value: /never, rate_limit: {unit: hour, requests_per_unit: 0, name: path-never}}
  - {key: user, value: alice, rate_limit: %(alice)s}
""" % {k: BIG % n for k, n in (
    ("v4", "addr-v4-loopback"), ("v6", "addr-v6-loopback"), ("client", "addr-client"),
    ("client6", "addr-client6"), ("ten", "addr-ten"), ("get", "method-get"),
    ("delete", "method-delete"), ("post", "method-post"), ("shop", "path-shop"),
    ("cafe", "path-cafe"), ("nopath", "path-none"), ("alice", "user-alice"))}

NO_HEADERS = ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining",
              "X-RateLimit-Reset", "Retry-After")


def auth(conn, path="/v1/auth/edge", method="GET", headers=()):
    """One forward-auth request; headers: (name, value) pairs, repeats
    allowed, a bytes value sent as is.  Returns (status, reason, headers as
    a dict, body bytes)."""
    conn.putrequest(method, path, skip_accept_encoding=True)
    for k, v in headers:
        conn.putheader(k, v)
    conn.endheaders()
    r = conn.getresponse()
    body = r.read()
    return r.status, r.reason, {k: v for k, v in r.getheaders()}, body


def example_value(name, key):
    """The value of the first `key: value` line of examples/NAME: what the
    example tells the proxy to send, so the tests send the same."""
    with open(os.path.join(ROOT, "examples", name)) as f:
        m = re.search(r"^\s*%s:\s*(\S+)\s*$" % re.escape(key), f.read(), re.M)
    assert m is not None, "no %s in examples/%s" % (key, name)
    return m.group(1)


def policies(h):
    """The names RateLimit-Policy lists, in order."""
    return [name for name, _ in parse_list(h.get("RateLimit-Policy", ""))]


class AuthCase(ServerTestCase):
    HTTP = True
    TRUST = False
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-http-auth-")
        cls.rules = os.path.join(cls.dir, "edge.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--rules", cls.rules) + cls.EXTRA
        super().setUpClass()

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def names(self, **kw):
        status, _, h, body = auth(self.conn, **kw)
        self.assertEqual((status, body), (200, b""), kw)
        return policies(h)


class TestAuthBehindTrustedProxy(AuthCase):
    EXTRA = ("--trusted-proxies", "127.0.0.1/32, 10.0.0.0/8", "--user-header", "X-User")

    def test_nginx_request_becomes_replays_descriptors(self):
        self.assertEqual(self.names(headers=[("X-Real-IP", "203.0.113.7"),
                                             ("X-Original-Method", "DELETE"),
                                             ("X-Original-URI", "/shop?id=3&x=/login")]),
                         ["addr-client", "method-delete", "path-shop"])

    def test_x_forwarded_for_walks_from_the_right_past_trusted_proxies(self):
        cases = [
            ("203.0.113.7", "addr-client"),
            ("203.0.113.7, 10.0.0.9", "addr-client"),         # through a trusted hop
            ("127.0.0.1, 203.0.113.7", "addr-client"),        # the client's own claim is ignored
            ("garbage, 203.0.113.7", "addr-client"),          # never read that far
            ("203.0.113.7, garbage", "addr-v4-loopback"),     # a bad hop: the peer, as nginx
            ("10.0.0.9,10.0.0.8", "addr-ten"),                # all trusted: the left-most
            ("2001:DB8:0::7", "addr-client6"),                # written canonically
            ("::ffff:203.0.113.7", "addr-client"),            # IPv4-mapped: the IPv4 address
        ]
        for xff, want in cases:
            got = self.names(headers=[("X-Forwarded-For", xff), ("X-Original-URI", "/shop")])
            self.assertEqual(got[0], want, xff)

    def test_several_x_forwarded_for_headers_are_one_list(self):
        got = self.names(headers=[("X-Forwarded-For", "203.0.113.7"),
                                  ("X-Forwarded-For", "10.0.0.9")])
        self.assertEqual(got[0], "addr-client")

    def test_more_than_16_x_forwarded_for_headers_are_not_believed(self):
        hops = [("X-Forwarded-For", "10.0.0.9")] * 16
        self.assertEqual(self.names(headers=[("X-Forwarded-For", "203.0.113.7")] + hops)[0],
                         "addr-v4-loopback")
        self.assertEqual(self.names(headers=[("X-Forwarded-For", "203.0.113.7")] + hops[1:])[0],
                         "addr-client")

    def test_x_forwarded_for_wins_over_x_real_ip(self):
        got = self.names(headers=[("X-Real-IP", "2001:db8::7"),
                                  ("X-Forwarded-For", "203.0.113.7")])
        self.assertEqual(got[0], "addr-client")
        self.assertEqual(self.names(headers=[("X-Real-IP", "2001:db8::7")])[0], "addr-client6")
        self.assertEqual(self.names(headers=[("X-Real-IP", "not an address")])[0],
                         "addr-v4-loopback")

    def test_traefik_forward_auth_request(self):
        """Traefik's ForwardAuth: the original request's method, URI and
        client in X-Forwarded-Method, -Uri and -For, sent as a GET to the
        configured address (examples/traefik/)."""
        address = example_value("traefik/dynamic.yml", "address")
        self.assertEqual(address, '"http://127.0.0.1:8390/v1/auth/edge"')
        got = self.names(headers=[("X-Forwarded-Method", "POST"), ("X-Forwarded-Proto", "http"),
                                  ("X-Forwarded-Host", "shop.example"),
                                  ("X-Forwarded-Uri", "/shop?q=1"),
                                  ("X-Forwarded-For", "203.0.113.7")])
        self.assertEqual(got, ["addr-client", "method-post", "path-shop"])

    def test_envoy_ext_authz_request_through_a_trusted_envoy(self):
        """Envoy with use_remote_address appends the client's address to
        X-Forwarded-For (after whatever the client wrote there)."""
        prefix = example_value("envoy/envoy.yaml", "path_prefix")
        self.assertEqual(prefix, "/v1/auth/edge")
        got = self.names(method="POST", path=prefix + "/shop?id=3",
                         headers=[("X-Forwarded-For", "10.0.0.9, 203.0.113.7")])
        self.assertEqual(got, ["addr-client", "method-post", "path-shop"])

    def test_x_original_wins_over_x_forwarded(self):
        got = self.names(headers=[("X-Forwarded-Method", "POST"), ("X-Original-Method", "DELETE"),
                                  ("X-Forwarded-Uri", "/login"), ("X-Original-URI", "/shop")])
        self.assertEqual(got, ["addr-v4-loopback", "method-delete", "path-shop"])

    def test_user_header(self):
        base = [("X-Original-URI", "/shop"), ("X-Original-Method", "POST")]
        self.assertEqual(self.names(headers=base + [("X-User", "alice")]),
                         ["addr-v4-loopback", "method-post", "path-shop", "user-alice"])
        self.assertEqual(self.names(headers=base + [("x-user", "alice")])[-1], "user-alice")
        # absent or empty: no user descriptor, as replay (whose log has none) sees it
        self.assertEqual(self.names(headers=base),
                         ["addr-v4-loopback", "method-post", "path-shop"])
        self.assertEqual(self.names(headers=base + [("X-User", "")]),
                         ["addr-v4-loopback", "method-post", "path-shop"])

    def test_path_bytes_as_nginx_logs_them(self):
        """nginx's access log writes a byte >= 0x7f as \\xXX: forward-auth's
        path descriptor is those same bytes."""
        got = self.names(headers=[("X-Original-URI", "/caf\xc3\xa9?x".encode("latin-1"))])
        self.assertEqual(got[-1], "path-cafe")

    def test_unknown_domain_allows_with_no_headers(self):
        status, _, h, body = auth(self.conn, path="/v1/auth/nosuch",
                                  headers=[("X-Original-URI", "/login")])
        self.assertEqual((status, body), (200, b""))
        for k in NO_HEADERS:
            self.assertNotIn(k, h)

    def test_any_method(self):
        for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"):
            status, _, h, body = auth(self.conn, method=m, headers=[("X-Original-URI", "/shop")])
            self.assertEqual((status, body), (200, b""), m)
            self.assertIn("path-shop", policies(h), m)

    def test_no_domain_is_404(self):
        status, _, h, body = auth(self.conn, path="/v1/auth/")
        self.assertEqual((status, body), (404, b'{"error": "no domain: use /v1/auth/DOMAIN"}\n'))


class TestAuthFromUntrustedPeer(AuthCase):
    """No --trusted-proxies: nothing forwarded is believed; the request
    stands for itself (Envoy's path_prefix form gives the path)."""

    def test_forwarded_headers_are_ignored(self):
        got = self.names(method="DELETE", path="/v1/auth/edge/shop?x=1",
                         headers=[("X-Forwarded-For", "203.0.113.7"),
                                  ("X-Real-IP", "203.0.113.7"),
                                  ("X-Original-Method", "POST"), ("X-Original-URI", "/login"),
                                  ("X-Forwarded-Method", "POST"), ("X-Forwarded-Uri", "/login")])
        self.assertEqual(got, ["addr-v4-loopback", "method-delete", "path-shop"])

    def test_envoy_ext_authz_request(self):
        """Envoy's ext_authz HTTP service: the original method, and
        path_prefix + the original path and query as the target
        (examples/envoy/)."""
        prefix = example_value("envoy/envoy.yaml", "path_prefix")
        self.assertEqual(self.names(method="POST", path=prefix + "/shop?id=3"),
                         ["addr-v4-loopback", "method-post", "path-shop"])
        self.assertEqual(self.names(path="/v1/auth/edge"),
                         ["addr-v4-loopback", "method-get", "path-none"])

    def test_user_header_unset_means_no_user(self):
        got = self.names(path="/v1/auth/edge/shop", headers=[("X-User", "alice")])
        self.assertEqual(got, ["addr-v4-loopback", "method-get", "path-shop"])


class TestAuthDecisions(AuthCase):
    """Each test its own server: the counts start at zero."""

    def login(self, conn, n):
        """n requests to /login (2 an hour, fixed window): in one hour."""
        wait_window_room(3600, 3)
        return [auth(conn, headers=[("X-Original-URI", "/login")]) for _ in range(n)]

    def fresh(self, *args):
        srv = self.new_server("--rules", self.rules, "--trusted-proxies", "127.0.0.1", *args,
                              http=True)
        conn = srv.http_conn()
        self.addCleanup(conn.close)
        return conn

    def assert_denied_headers(self, h):
        self.assertEqual(parse_list(h["RateLimit-Policy"])[-1], ("path-login", {"q": 2, "w": 3600}))
        name, params = parse_list(h["RateLimit"])[-1]
        self.assertEqual((name, params["r"]), ("path-login", 0))
        self.assertTrue(1 <= params["t"] <= 3600, params)
        self.assertEqual((h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"]), ("2", "0"))
        # fixed-window, denied: room again when the window ends, which is when it is full
        self.assertEqual(h["Retry-After"], h["X-RateLimit-Reset"])
        self.assertEqual(h["X-RateLimit-Reset"], str(params["t"]))

    def test_429_after_the_limit(self):
        conn = self.fresh()
        answers = self.login(conn, 3)
        self.assertEqual([(s, r, b) for s, r, _, b in answers],
                         [(200, "OK", b""), (200, "OK", b""), (429, "Too Many Requests", b"")])
        self.assertEqual([a[2]["X-RateLimit-Remaining"] for a in answers[:2]], ["1", "0"])
        self.assertNotIn("Retry-After", answers[1][2])
        self.assert_denied_headers(answers[2][2])

    def test_deny_status_403_for_nginx(self):
        conn = self.fresh("--auth-deny-status", "403")
        answers = self.login(conn, 3)
        self.assertEqual([(s, r, b) for s, r, _, b in answers],
                         [(200, "OK", b""), (200, "OK", b""), (403, "Forbidden", b"")])
        self.assert_denied_headers(answers[2][2])

    def test_never_allowed_has_no_retry_after(self):
        conn = self.fresh()
        status, _, h, body = auth(conn, headers=[("X-Original-URI", "/never")])
        self.assertEqual((status, body), (429, b""))
        self.assertNotIn("Retry-After", h)
        self.assertEqual(parse_list(h["RateLimit-Policy"])[-1], ("path-never", {"q": 0, "w": 3600}))


class TestAuthIPv6(AuthCase):
    """A server on 127.0.0.1 and ::1; clients over IPv6."""
    EXTRA = ("--bind", "127.0.0.1,::1")

    def v6(self):
        c = http.client.HTTPConnection("::1", self.srv.http_port, timeout=10)
        self.addCleanup(c.close)
        return c

    def test_ipv6_peer_is_the_address(self):
        status, _, h, body = auth(self.v6(), headers=[("X-Forwarded-For", "203.0.113.7")])
        self.assertEqual(status, 200)
        self.assertEqual(policies(h)[0], "addr-v6-loopback")

    def test_trusted_ipv6_proxy(self):
        srv = self.new_server("--rules", self.rules, "--bind", "127.0.0.1,::1",
                              "--trusted-proxies", "::1/128", http=True)
        c6 = http.client.HTTPConnection("::1", srv.http_port, timeout=10)
        c4 = http.client.HTTPConnection(HOST, srv.http_port, timeout=10)
        self.addCleanup(c6.close)
        self.addCleanup(c4.close)
        xff = [("X-Forwarded-For", "2001:db8::7")]
        self.assertEqual(policies(auth(c6, headers=xff)[2])[0], "addr-client6")
        # the IPv4 loopback is not in ::1/128
        self.assertEqual(policies(auth(c4, headers=xff)[2])[0], "addr-v4-loopback")


class TestAuthOptions(ServerTestCase):
    def refused(self, *args):
        p = run_checked([SLUICED, *args, "--dump-options"], capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 2, p)
        return p.stderr.decode().splitlines()[0]

    def test_bad_values_are_refused_naming_them(self):
        self.assertEqual(self.refused("--trusted-proxies", "127.0.0.1, 10.0.0.0/33"),
                         "sluiced: invalid --trusted-proxies: '10.0.0.0/33' is not an address or "
                         "CIDR block (expected e.g. 127.0.0.1, 10.0.0.0/8 or ::1/128)")
        self.assertEqual(self.refused("--trusted-proxies", "localhost"),
                         "sluiced: invalid --trusted-proxies: 'localhost' is not an address or "
                         "CIDR block (expected e.g. 127.0.0.1, 10.0.0.0/8 or ::1/128)")
        self.assertEqual(self.refused("--user-header", "X User"),
                         "sluiced: invalid --user-header 'X User': expected a header name "
                         "(1..127 letters, digits or !#$%&'*+-.^_`|~)")
        self.assertEqual(self.refused("--auth-deny-status", "200"),
                         "sluiced: invalid --auth-deny-status '200': expected an integer 400..499")
