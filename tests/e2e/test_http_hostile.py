"""HTTP's protections (docs/http.md, "Protections"; docs/security.md,
"HTTP"): bearer tokens on the decision endpoints when a password is
configured, HTTPS (--https-port) with the server's TLS context, HTTP
connections counted against --max-clients and shown in INFO, and hostile
clients: slowloris, malformed request lines, pipelining.

Every answer is read as a client reads it: status, exact headers, exact
JSON."""

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile

from harness import BASE, HOST, ServerTestCase, parse_info

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
