"""The status page's JSON, GET /v1/status (docs/http.md, "The status page"),
and the page itself as bytes (GET /): per rule, decisions per second that
add up exactly to the traffic sent (waited for with a deadline: the
server samples once a second), the most-limited keys with hostile and
non-UTF-8 keys carried as JSON strings, the rules' version and last
reload error, and a page that loads nothing from elsewhere.

Every decision, rules or not (the quick start's RL.ALLOW and /v1/allow):
the totals per front (RESP, HTTP, gRPC) exactly as sent, the decisions
per second adding up to them, and a rate over the recent seconds that is
what those seconds hold (never a number that depends on the machine's
speed); each limit of a rule of several named by its size and window
(the rule names themselves unchanged); the clients connected per front;
the backend: local, or Redis (its URL, up or down, the scripts or the
module, the answers --on-backend-error gave).

The page in a real browser is tests/test_status_page.sh (plain build only)."""

import json
import os
import shutil
import tempfile
import time
from urllib.parse import quote

import harness
from harness import RawConn, RedisServer, ServerTestCase, deadline

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

    def wait_status(self, pred, what, seconds=15, srv=None):
        """Polls /v1/status (of srv, by default the class's server) until
        pred(json) holds; fails with the last answer at the deadline."""
        until = deadline(seconds)
        st = None
        while time.monotonic() < until:
            _, _, st = self.status(srv)
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
        # and team_shadow's counts, kept under their descriptor paths
        # (api.tenant, api.team) as envoyproxy/ratelimit names statistics;
        # both count a minute: the 8 checks in one
        harness.wait_window_room(60, 3)
        with self.srv.raw() as c:
            got = [self.check(c, tenant="acme") for _ in range(5)]
            got += [self.check(c, team="red") for _ in range(3)]
        self.assertEqual(got, [1, 1, 1, 0, 0, 1, 1, 1])  # shadow: over, let through
        want = {"api.tenant": {"allowed": 3, "denied": 2, "shadow": 0, "elastic": 0},
                "api.team": {"allowed": 1, "denied": 0, "shadow": 2, "elastic": 0}}
        st = self.wait_status(lambda s: self.totals(s) == want, "per-rule counts %s" % want)
        h = st["history"]
        self.assertEqual(h["seconds"], 300)
        self.assertEqual(h["rules_max"], 16)
        for s in h["series"]:
            for k in SERIES:
                self.assertEqual(len(s[k]), 300, (s["rule"], k))
        # the busiest first, and each total is what its ring holds
        self.assertEqual([s["rule"] for s in h["series"]], ["api.tenant", "api.team"])
        # the page's heading is the rule's name, "counted as" its path
        self.assertEqual([(s["base"], s["label"]) for s in h["series"]],
                         [("tenant", "tenant \u2014 3 / minute"),
                          ("team_shadow", "team_shadow \u2014 1 / minute")])
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
        # nothing decided yet: every front at 0, and the fronts it serves
        d = st["decisions"]
        self.assertEqual((d["allowed"], d["denied"]), (0, 0))
        self.assertEqual(sorted(d["fronts"]), ["grpc", "http", "resp"])
        for name, f in d["fronts"].items():
            self.assertEqual((f["allowed"], f["denied"]), (0, 0), name)
        self.assertEqual(d["fronts"]["grpc"]["port"], 0)  # --grpc-port 0: off
        self.assertEqual(len(d["per_second"]["allowed"]), 300)
        self.assertEqual(sum(d["per_second"]["allowed"]) + sum(d["per_second"]["denied"]), 0)

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


# A rule of two limits (named #1 and #2 by the rules), one of a single
# limit with a name of its own, both counted by RL.CHECK and gRPC.
RULES_WINDOWS = """domain: api
descriptors:
  - key: remote_address
    rate_limit:
      - {unit: minute, requests_per_unit: 100}
      - {unit: hour, requests_per_unit: 2000, algorithm: token-bucket}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, name: tenant}
  - key: path
    rate_limit: {window: 90s, requests_per_unit: 4}
"""


class TestEveryDecision(StatusCase):
    """Every decision, whatever front it came by and whether a rule made
    it: one server per test, so its totals are exactly what the test sent."""

    def server(self, *args, grpc=False):
        return self.new_server(*args, http=True, grpc=grpc)

    def rules_file(self, text):
        d = tempfile.mkdtemp(prefix="sluice-status-all-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "api.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def allow_http(self, srv, key, limit, n):
        """n GET /v1/allow of key on one keep-alive connection: their codes."""
        c = srv.http_conn()
        try:
            codes = []
            for _ in range(n):
                c.request("GET", "/v1/allow?key=%s&limit=%d&window=1h" % (quote(key), limit))
                r = c.getresponse()
                r.read()
                codes.append(r.status)
            return codes
        finally:
            c.close()

    def sampled(self, st):
        """Every decision per second over the ring, summed: (allowed, denied)."""
        ps = st["decisions"]["per_second"]
        return sum(ps["allowed"]), sum(ps["denied"])

    def check_recent(self, st):
        """The rate over the recent seconds is what those seconds hold,
        whatever the machine's speed: seconds is how many were sampled (at
        most 60), and allowed/denied are the last `seconds` of the ring."""
        d = st["decisions"]
        ps, r = d["per_second"], d["recent"]
        self.assertEqual(ps["end"], st["history"]["end"])
        self.assertEqual(r["seconds"], min(60, ps["end"] - ps["first"] + 1), r)
        self.assertGreaterEqual(r["seconds"], 1)
        n = r["seconds"]
        self.assertEqual(r["allowed"], sum(ps["allowed"][-n:]))
        self.assertEqual(r["denied"], sum(ps["denied"][-n:]))
        self.assertAlmostEqual(r["allowed_per_s"], r["allowed"] / n)
        self.assertAlmostEqual(r["denied_per_s"], r["denied"] / n)

    def test_the_quick_start_without_rules(self):
        # the README's quick start: RL.ALLOW over RESP and /v1/allow, 60 decisions
        srv = self.server()
        with srv.raw() as c:
            got = [c.cmd("RL.ALLOW", "user:42", 5, "10s")[0] for _ in range(30)]
        self.assertEqual(got, [1] * 5 + [0] * 25)
        self.assertEqual(self.allow_http(srv, "a", 12, 30), [200] * 12 + [429] * 18)
        want = {"resp": {"allowed": 5, "denied": 25}, "http": {"allowed": 12, "denied": 18},
                "grpc": {"allowed": 0, "denied": 0}}
        st = self.wait_status(lambda s: self.sampled(s) == (17, 43), "60 decisions sampled",
                              srv=srv)
        d = st["decisions"]
        self.assertEqual({k: {"allowed": f["allowed"], "denied": f["denied"]}
                          for k, f in d["fronts"].items()}, want)
        self.assertEqual((d["allowed"], d["denied"]), (17, 43))
        self.assertEqual(d["fronts"]["resp"]["port"], srv.port)
        self.assertEqual(d["fronts"]["http"]["port"], srv.http_port)
        self.check_recent(st)
        self.assertIsNone(st["rules"])
        self.assertEqual(st["history"]["series"], [])  # no rule decided: the totals above did

    def test_every_front_with_rules_and_the_windows_named(self):
        import test_grpc as G
        import grpc
        srv = self.server("--rules", self.rules_file(RULES_WINDOWS), grpc=True)
        with srv.raw() as c:
            got = [c.cmd("RL.CHECK", "api", "DESCRIPTOR", "remote_address", "10.0.0.1")[0]
                   for _ in range(4)]
            got += [c.cmd("RL.ALLOW", "k", 2, "1h")[0] for _ in range(3)]
        self.assertEqual(got, [1, 1, 1, 1, 1, 1, 0])
        self.assertEqual(self.allow_http(srv, "h", 1, 3), [200, 429, 429])
        ch = grpc.insecure_channel("%s:%d" % (harness.HOST, srv.grpc_port))
        self.addCleanup(ch.close)
        stub = G.rls_pb2_grpc.RateLimitServiceStub(ch)
        R = G.rls_pb2.RateLimitResponse
        harness.wait_window_room(60, 5)  # tenant counts a minute: its 5 calls in one
        codes = [stub.ShouldRateLimit(G.request("api", [("tenant", "acme")]),
                                      timeout=10 * harness.SLOW).overall_code for _ in range(5)]
        codes += [stub.ShouldRateLimit(G.request("api", [("path", "/x")]),
                                       timeout=10 * harness.SLOW).overall_code]
        self.assertEqual(codes, [R.OK] * 3 + [R.OVER_LIMIT] * 2 + [R.OK])
        want = {"resp": {"allowed": 6, "denied": 1}, "http": {"allowed": 1, "denied": 2},
                "grpc": {"allowed": 4, "denied": 2}}
        st = self.wait_status(lambda s: self.sampled(s) == (11, 5), "16 decisions sampled",
                              srv=srv)
        d = st["decisions"]
        self.assertEqual({k: {"allowed": f["allowed"], "denied": f["denied"]}
                          for k, f in d["fronts"].items()}, want)
        self.assertEqual((d["allowed"], d["denied"]), (11, 5))
        self.assertEqual(d["fronts"]["grpc"]["port"], srv.grpc_port)
        self.check_recent(st)
        # each limit named by its size and window; the rule names as they were
        st = self.wait_status(lambda s: len(s["history"]["series"]) == 4, "4 series", srv=srv)
        got = {s["rule"]: (s["base"], s["label"], s["limit"]) for s in st["history"]["series"]}
        self.assertEqual(got, {
            "api.remote_address#1": (
                "api.remote_address", "api.remote_address \u2014 100 / minute",
                {"unlimited": False, "requests": 100, "window_ms": 60000, "unit": "minute",
                 "algorithm": "fixed-window", "text": "100 / minute"}),
            "api.remote_address#2": (
                "api.remote_address", "api.remote_address \u2014 2000 / hour, token-bucket",
                {"unlimited": False, "requests": 2000, "window_ms": 3600000, "unit": "hour",
                 "algorithm": "token-bucket", "text": "2000 / hour, token-bucket"}),
            "api.tenant": ("tenant", "tenant \u2014 3 / minute",
                       {"unlimited": False, "requests": 3, "window_ms": 60000, "unit": "minute",
                        "algorithm": "fixed-window", "text": "3 / minute"}),
            "api.path": ("api.path", "api.path \u2014 4 / 90s",
                         {"unlimited": False, "requests": 4, "window_ms": 90000, "unit": None,
                          "algorithm": "fixed-window", "text": "4 / 90s"}),
        })
        # RL.CHECK still names the limit as the rules do
        with srv.raw() as c:
            reply = c.cmd("RL.CHECK", "api", "DESCRIPTOR", "remote_address", "10.0.0.1")
        self.assertEqual(reply[6][:2], [b"OK", b"api.remote_address#1"], reply)

    def test_clients_by_front(self):
        import test_grpc as G
        import grpc
        srv = self.server(grpc=True)
        ch = grpc.insecure_channel("%s:%d" % (harness.HOST, srv.grpc_port))
        self.addCleanup(ch.close)
        G.health_pb2_grpc.HealthStub(ch).Check(G.health_pb2.HealthCheckRequest(),
                                               timeout=10 * harness.SLOW)  # connected
        held = [RawConn(srv.port) for _ in range(2)]
        for c in held:
            self.addCleanup(c.close)
            self.assertEqual(c.cmd("PING"), b"PONG")
        # the status request's own connection is the one HTTP client
        want = {"connected": 4, "max": 10000, "resp": 2, "http": 1, "grpc": 1}
        st = self.wait_status(lambda s: s["clients"] == want, "clients %s" % want, srv=srv)
        self.assertEqual(st["clients"], want)
        held[0].close()
        ch.close()
        want = {"connected": 2, "max": 10000, "resp": 1, "http": 1, "grpc": 0}
        self.wait_status(lambda s: s["clients"] == want, "clients %s" % want, srv=srv)

    def test_local_backend(self):
        srv = self.server("--max-memory", "64mb")
        with srv.raw() as c:
            for k in ("a", "b", "c"):
                c.cmd("RL.ALLOW", k, 5, "1h")
        _, _, st = self.status(srv)
        info = srv.info("memory")
        self.assertEqual(st["backend"], {"name": "local", "keys": 3,
                                         "bytes": int(info["used_memory"]),
                                         "max_bytes": 64 << 20})

    def redis(self, **kw):
        r = RedisServer(**kw).start()
        self.addCleanup(r.cleanup)
        return r

    def test_redis_backend_up_then_down(self):
        r = self.redis()
        srv = self.server("--backend", r.url(), "--backend-timeout", "1s")
        st = self.wait_status(lambda s: s["backend"]["up"], "the Redis backend up", srv=srv)
        b = st["backend"]
        self.assertEqual((b["name"], b["url"], b["nodes"], b["path"], b["on_error"]),
                         ("redis", r.url() + "/0", 1, "script", "deny"))
        self.assertEqual(b["fallback"], {"deny": 0, "allow": 0, "local": 0})
        self.assertIsNone(b["last_error"])
        self.assertEqual(b["down_since_ms"], 0)
        with srv.raw() as c:
            got = [c.cmd("RL.ALLOW", "rk", 2, "1h")[0] for _ in range(3)]
        self.assertEqual(got, [1, 1, 0])
        r.stop()
        with srv.raw() as c:
            got = c.cmd("RL.ALLOW", "rk", 2, "1h")[0]  # answered by --on-backend-error deny
        self.assertEqual(got, 0)
        st = self.wait_status(lambda s: not s["backend"]["up"], "the Redis backend down", srv=srv)
        b = st["backend"]
        self.assertEqual(b["fallback"], {"deny": 1, "allow": 0, "local": 0})
        self.assertGreater(b["down_since_ms"], 0)
        self.assertIsInstance(b["last_error"], str)
        # every decision counted, the policy's answer too
        self.assertEqual((st["decisions"]["fronts"]["resp"]["allowed"],
                          st["decisions"]["fronts"]["resp"]["denied"]), (2, 2))

    def test_redis_backend_on_the_module(self):
        r = self.redis(module_args=[])
        srv = self.server("--backend", r.url())
        st = self.wait_status(lambda s: s["backend"]["up"] and s["backend"]["path"] == "module",
                              "the Redis backend up, on the module", srv=srv)
        self.assertEqual((st["backend"]["name"], st["backend"]["url"]), ("redis", r.url() + "/0"))
        self.assertGreaterEqual(st["backend"]["module_channels"], 1)


if __name__ == "__main__":
    import unittest
    unittest.main()
