"""The status page's JSON, GET /v1/status (docs/http.md, "The status page"),
and the page itself as bytes (GET /): per rule, decisions per second that
add up exactly to the traffic sent (waited for with a deadline: the
server samples once a second), the most-limited keys with hostile and
non-UTF-8 keys carried as JSON strings, the rules' version and last
reload error, and a page that loads nothing from elsewhere.

The page in a real browser is tests/test_status_page.sh (plain build only)."""

import json
import os
import time

from harness import RawConn, ServerTestCase, deadline

RULES = """domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, name: tenant}
  - key: team
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, name: team_shadow}
"""

SERIES = ("allowed", "denied", "shadow", "elastic")


class StatusCase(ServerTestCase):
    HTTP = True
    TRUST = False

    def status(self, srv=None):
        """GET /v1/status (of srv, by default the class's server) as
        (status code, headers dict, parsed JSON)."""
        c = (srv or self.srv).http_conn()
        try:
            c.request("GET", "/v1/status")
            r = c.getresponse()
            body = r.read()
            return r.status, dict(r.getheaders()), json.loads(body)
        finally:
            c.close()

    def totals(self, st):
        """{rule: {series: sum}} of a /v1/status answer."""
        return {s["rule"]: {k: sum(s[k]) for k in SERIES} for s in st["history"]["series"]}

    def wait_status(self, pred, what, seconds=15):
        """Polls /v1/status until pred(json) holds; fails with the last
        answer at the deadline."""
        until = deadline(seconds)
        st = None
        while time.monotonic() < until:
            _, _, st = self.status()
            if pred(st):
                return st
            time.sleep(0.05)
        self.fail("%s: not seen within the deadline; last /v1/status: %s"
                  % (what, json.dumps(st)[:2000]))

    def check(self, c, **descriptor):
        args = ["RL.CHECK", "api"]
        for k, v in descriptor.items():
            args += ["DESCRIPTOR", k, v]
        return c.cmd(*args)[0]


class TestStatusWithRules(StatusCase):

    @classmethod
    def setUpClass(cls):
        d = cls.class_dir("sluice-status-")
        cls.rules_path = os.path.join(d, "api.yaml")
        with open(cls.rules_path, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--rules", cls.rules_path)
        super().setUpClass()

    def test_counts_per_rule_match_the_traffic(self):
        # tests in this class share the server: this one owns rules tenant
        # and team_shadow's counts
        with self.srv.raw() as c:
            got = [self.check(c, tenant="acme") for _ in range(5)]
            got += [self.check(c, team="red") for _ in range(3)]
        self.assertEqual(got, [1, 1, 1, 0, 0, 1, 1, 1])  # shadow: over, let through
        want = {"tenant": {"allowed": 3, "denied": 2, "shadow": 0, "elastic": 0},
                "team_shadow": {"allowed": 1, "denied": 0, "shadow": 2, "elastic": 0}}
        st = self.wait_status(lambda s: self.totals(s) == want, "per-rule counts %s" % want)
        h = st["history"]
        self.assertEqual(h["seconds"], 300)
        self.assertEqual(h["rules_max"], 16)
        for s in h["series"]:
            for k in SERIES:
                self.assertEqual(len(s[k]), 300, (s["rule"], k))
        # the busiest first, and each total is what its ring holds
        self.assertEqual([s["rule"] for s in h["series"]], ["tenant", "team_shadow"])
        self.assertEqual([s["total"] for s in h["series"]], [5, 3])
        # the newest second is the last: no count is later than it, and a
        # later sample moves it on without counting anything twice
        end = h["end"]
        self.assertLessEqual(end * 1000, st["now_ms"])
        st2 = self.wait_status(lambda s: s["history"]["end"] > end, "a later sample")
        self.assertEqual(self.totals(st2), want)
        shift = st2["history"]["end"] - end
        for a, b in zip(st["history"]["series"], st2["history"]["series"]):
            self.assertEqual(a["allowed"][shift:], b["allowed"][:300 - shift], a["rule"])

    def test_most_limited_keys_are_hostile_bytes_carried_verbatim(self):
        hostile = '<script>alert("x")</script>\u00e9&amp;'
        c = self.srv.http_conn()
        self.addCleanup(c.close)
        from urllib.parse import quote
        codes = []
        for _ in range(4):
            c.request("GET", "/v1/allow?key=%s&limit=1&window=1h" % quote(hostile, safe=""))
            r = c.getresponse()
            r.read()
            codes.append(r.status)
        self.assertEqual(codes, [200, 429, 429, 429])
        # a key that is not UTF-8: its high bytes as \\xNN, flagged binary
        with self.srv.raw() as rc:
            for _ in range(3):
                rc.cmd("RL.ALLOW", b"bin\xff\xfekey", 1, "1h")
        want_hostile = {"key": hostile, "denied": 3, "error": 0, "truncated": False,
                        "binary": False}
        want_bin = {"key": "bin\\xFF\\xFEkey", "denied": 2, "error": 0, "truncated": False,
                    "binary": True}
        st = self.wait_status(lambda s: want_hostile in s["top_keys"] and want_bin in s["top_keys"],
                              "the hostile keys among the top keys")
        keys = st["top_keys"]
        counts = [k["denied"] for k in keys]
        self.assertEqual(counts, sorted(counts, reverse=True))
        self.assertLess(keys.index(want_hostile), keys.index(want_bin))

    def test_rules_version_and_last_reload_error(self):
        code, headers, st = self.status()
        self.assertEqual(code, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(headers["Cache-Control"], "no-store")
        self.assertEqual(st["rules"]["path"], self.rules_path)
        self.assertIsNone(st["rules"]["last_error"])
        version = st["rules"]["version"]
        self.assertGreaterEqual(version, 1)
        self.assertGreaterEqual(st["uptime_s"], 0)
        with open(self.rules_path, "w") as f:
            f.write("domain: api\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight}\n")
        try:
            with self.srv.raw() as c:
                err = c.cmd("RL.RULES", "RELOAD")
            prefix = "ERR rules not reloaded, version %d keeps serving: " % version
            self.assertTrue(err.line.startswith(prefix), err)
            _, _, st = self.status()
            self.assertEqual(st["rules"]["version"], version)
            self.assertEqual(st["rules"]["last_error"], err.line[len(prefix):])
            self.assertIn(self.rules_path, st["rules"]["last_error"])
            self.assertEqual(st["rules"]["failures"], 1)
            self.assertGreater(st["rules"]["last_error_ms"], 0)
        finally:
            with open(self.rules_path, "w") as f:
                f.write(RULES)
            with self.srv.raw() as c:
                self.assertEqual(c.cmd("RL.RULES", "RELOAD"), version + 1)
        _, _, st = self.status()
        self.assertEqual(st["rules"]["version"], version + 1)
        self.assertIsNone(st["rules"]["last_error"])


class TestStatusPage(StatusCase):
    """No rules: the page and the JSON still answer."""

    def get(self, method, path):
        c = self.srv.http_conn()
        try:
            c.request(method, path)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def test_without_rules(self):
        _, _, st = self.status(self.new_server(http=True))  # fresh: nothing denied yet
        self.assertIsNone(st["rules"])
        self.assertEqual(st["history"]["series"], [])
        self.assertEqual(st["top_keys"], [])

    def test_the_page_is_one_self_contained_file(self):
        code, headers, body = self.get("GET", "/")
        self.assertEqual(code, 200)
        self.assertEqual(headers["Content-Type"], "text/html; charset=utf-8")
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
        self.assertEqual(
            headers["Content-Security-Policy"],
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")
        self.assertEqual(int(headers["Content-Length"]), len(body))
        text = body.decode("utf-8")
        self.assertTrue(text.startswith("<!DOCTYPE html>"), text[:40])
        self.assertTrue(text.rstrip().endswith("</html>"), text[-40:])
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "src", "proto", "http",
                               "status.html"), "rb") as f:
            self.assertEqual(body, f.read())  # the file, built in, whole
        # nothing from elsewhere, and nothing written as markup
        for bad in ("http://", "https://", "src=", "innerHTML", "outerHTML", "insertAdjacentHTML",
                    "document.write", "eval("):
            self.assertNotIn(bad, text)
        self.assertIn('fetch("/v1/status"', text)
        code, headers, body = self.get("HEAD", "/")
        self.assertEqual((code, body), (200, b""))

    def test_methods_and_paths(self):
        for path in ("/", "/v1/status"):
            code, headers, body = self.get("POST", path)
            self.assertEqual(code, 405, path)
            self.assertEqual(headers["Allow"], "GET, HEAD", path)
            self.assertEqual(json.loads(body), {"error": "method not allowed: use GET, HEAD"})
        code, _, body = self.get("GET", "/index.html")
        self.assertEqual(code, 404)
        self.assertEqual(json.loads(body), {"error": "no such path: /index.html"})

    def test_keys_of_allow_without_rules(self):
        with RawConn(self.srv.port) as c:
            for _ in range(3):
                c.cmd("RL.ALLOW", "plain:key", 1, "1h")
        self.wait_status(lambda s: {"key": "plain:key", "denied": 2, "error": 0,
                                    "truncated": False, "binary": False} in s["top_keys"],
                         "plain:key with 2 denials")


if __name__ == "__main__":
    import unittest
    unittest.main()
