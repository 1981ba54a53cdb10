"""GET /metrics and GET /readyz (SPEC section 8, docs/http.md "Metrics and
health"), as Prometheus and a probe see them: the page passes Debian's
`promtool check metrics`, and its counters are exactly the traffic sent
through RESP and HTTP -- decisions by algorithm and outcome, RL.CHECK by
rule (with its domain) and outcome (allowed, denied, over_quota in quota
mode, shadow in shadow mode) and elastic passes, per-value names, the latency
histogram's count, keys, memory, reloads ok / failed across a good and a
bad SIGHUP, the rules version, clients per protocol.  /readyz answers 200
while rules serve (a refused reload keeps it so); its 503 cases, which a
running server with the local backend cannot reach, are in
tests/test_http_ready.c.

The server runs one worker (--threads 1), so the sampled latency histogram
counts exactly one decision in 16 (SL_STATS_LAT_SAMPLE), and client time is
trusted: every decision is at BASE, so the counts do not depend on the
clock."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import BASE, RespError, ServerTestCase, deadline

PROMTOOL = "/usr/bin/promtool"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LAT_SAMPLE = 16  # SL_STATS_LAT_SAMPLE (src/server/stats.h)
ALGOS = ["fixed-window", "sliding-log", "sliding-window", "sliding-buckets", "token-bucket",
         "gcra", "leaky-bucket"]

API = """domain: api
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 5}
  - key: path
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: route
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: qa
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: qb
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1, elastic: 2, name: stretchy}
"""
WEB = """domain: web
descriptors:
  - key: ip
    rate_limit: {name: %s, unit: second, requests_per_unit: 1}
"""

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_exposition(text):
    """Parses the text format 0.0.4 into ({(name, frozenset(labels)): float},
    {family: type}).  AssertionError on anything it cannot read, a sample
    of a family without its TYPE line before it, or a series given twice."""
    samples, types = {}, {}
    for n, line in enumerate(text.split("\n"), 1):
        if line == "":
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if name in types:
                raise AssertionError("line %d: TYPE of %s twice" % (n, name))
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if m is None:
            raise AssertionError("line %d: not a sample: %r" % (n, line))
        name, labels, value = m.group(1), {}, float(m.group(3))
        rest = m.group(2) or ""
        while rest:
            lm = LABEL_RE.match(rest)
            if lm is None:
                raise AssertionError("line %d: bad labels: %r" % (n, line))
            labels[lm.group(1)] = unescape(lm.group(2))
            rest = rest[lm.end():]
        fam = re.sub(r'_(bucket|sum|count)$', "", name) if name not in types else name
        if fam not in types:
            raise AssertionError("line %d: %s before its TYPE line" % (n, name))
        key = (name, frozenset(labels.items()))
        if key in samples:
            raise AssertionError("line %d: series given twice: %r" % (n, line))
        samples[key] = value
    return samples, types


class Metrics:
    def __init__(self, samples):
        self.samples = samples

    def get(self, name, **labels):
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            raise AssertionError("no series %s%r on the page" % (name, labels))
        return self.samples[key]

    def series(self, name):
        """{frozenset(labels): value} of every series named name."""
        return {k[1]: v for k, v in self.samples.items() if k[0] == name}


class TestHttpMetrics(ServerTestCase):
    HTTP = True

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-metrics-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.rules = os.path.join(self.dir, "rules")
        os.mkdir(self.rules)
        with open(os.path.join(self.rules, "api.yaml"), "w") as f:
            f.write(API)
        with open(os.path.join(self.rules, "web.yaml"), "w") as f:
            f.write(WEB % "login_limit")

    def server(self, *args):
        return self.new_server("--rules", self.rules, "--watch-rules=no", "--capacity", "100/1m",
                               *args, http=True,
                               trust_client_time=True, threads=1)

    def http(self, s, path):
        """GET path: (status, headers, body bytes)."""
        c = s.http_conn()
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, {k: v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def scrape(self, s):
        """The page, checked by promtool and parsed."""
        status, h, body = self.http(s, "/metrics")
        self.assertEqual(status, 200, body)
        self.assertEqual(h["Content-Type"], CONTENT_TYPE)
        self.promtool(body)
        samples, types = parse_exposition(body.decode("utf-8"))
        self.types = types
        return Metrics(samples)

    def promtool(self, body):
        if not os.access(PROMTOOL, os.X_OK):
            self.fail("%s not found: install Debian's prometheus package "
                      "(scripts/deps.sh lists it)" % PROMTOOL)
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                           timeout=60)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, b""),
                         "promtool check metrics refused the page")

    def wait_metric(self, s, name, want, what, **labels):
        until = deadline(20)
        v = None
        while time.monotonic() < until:
            v = self.scrape(s).get(name, **labels)
            if v == want:
                return
            time.sleep(0.02)
        self.fail("%s: %s%r stayed at %s, not %s\n%s" % (what, name, labels, v, want, s.log()))

    def check(self, c, domain, key, value):
        r = c.cmd("RL.CHECK", domain, "AT", BASE, "DESCRIPTOR", key, value)
        self.assertNotIsInstance(r, RespError, r)
        return r[0]

    def test_counters_match_the_traffic(self):
        s = self.server()
        resp = s.sole_client()  # the one RESP client from here on
        self.addCleanup(resp.close)
        sent = 0
        # RL.ALLOW over RESP: 20 allowed, 5 denied (fixed-window)
        for i in range(25):
            r = resp.cmd("RL.ALLOW", "ra", 20, "1m", "ALGO", "fixed-window", "AT", BASE)
            self.assertEqual(r[0], 1 if i < 20 else 0)
        sent += 25
        # GET /v1/allow over HTTP: 4 allowed, 6 denied (sliding-log)
        c = s.http_conn()
        self.addCleanup(c.close)
        for i in range(10):
            c.request("GET", "/v1/allow?key=ha&limit=4&window=1m&algo=sliding-log&at=%d" % BASE)
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200 if i < 4 else 429)
        sent += 10
        # RL.CHECK: per_user allows 5 of 7; api.path (shadow) 2 of 6, the
        # other 4 shadow-denied but answered allowed; login_limit in web
        # 1 of 2.  Named rules are counted under their descriptor path, as
        # envoyproxy/ratelimit names its statistics (docs/rules.md)
        got = [self.check(resp, "api", "user", "alice") for _ in range(7)]
        self.assertEqual(got, [1] * 5 + [0] * 2)
        got = [self.check(resp, "api", "path", "/x") for _ in range(6)]
        self.assertEqual(got, [1] * 6)
        got = [self.check(resp, "web", "ip", "10.0.0.1") for _ in range(2)]
        self.assertEqual(got, [1, 0])
        # per-value names (value_to_metric): route a twice, route "b\"\\" once
        for v in ("a", "a", 'b"\\'):
            self.assertEqual(self.check(resp, "api", "route", v), 1)
        # quota mode: qa over on the second request but qb is not, so the
        # request passes and qa counts it over_quota
        for _ in range(2):
            r = resp.cmd("RL.CHECK", "api", "AT", BASE, "DESCRIPTOR", "qa", "x",
                         "DESCRIPTOR", "qb", "x")
            self.assertNotIsInstance(r, RespError, r)
            self.assertEqual(r[0], 1)
        # elastic: 1 within the limit, 1 more on the spare pool (up to 2), then denied
        got = [self.check(resp, "api", "tenant", "t") for _ in range(3)]
        self.assertEqual(got, [1, 1, 0])
        sent += 7 + 6 + 2 + 3 + 2 + 3

        m = self.scrape(s)
        for a in ALGOS:
            want = {"fixed-window": (20, 5), "sliding-log": (4, 6)}.get(a, (0, 0))
            self.assertEqual((m.get("sluice_decisions_total", algorithm=a, outcome="allowed"),
                              m.get("sluice_decisions_total", algorithm=a, outcome="denied")),
                             want, a)
        self.assertEqual(len(m.series("sluice_decisions_total")), 2 * len(ALGOS))
        self.assertEqual(m.get("sluice_checks_total", outcome="allowed"), 5 + 6 + 1 + 3 + 2 + 2)
        self.assertEqual(m.get("sluice_checks_total", outcome="denied"), 2 + 1 + 1)

        def rule(domain, name):
            return {o: m.get("sluice_rule_requests_total", domain=domain, rule=name, outcome=o)
                    for o in ("allowed", "denied", "over_quota", "shadow")}

        self.assertEqual(rule("api", "api.user"),
                         {"allowed": 5, "denied": 2, "over_quota": 0, "shadow": 0})
        self.assertEqual(rule("api", "api.path"),
                         {"allowed": 2, "denied": 0, "over_quota": 0, "shadow": 4})
        self.assertEqual(rule("api", "api.route"),
                         {"allowed": 3, "denied": 0, "over_quota": 0, "shadow": 0})
        self.assertEqual(rule("web", "web.ip"),
                         {"allowed": 1, "denied": 1, "over_quota": 0, "shadow": 0})
        self.assertEqual(rule("api", "api.qa"),
                         {"allowed": 1, "denied": 0, "over_quota": 1, "shadow": 0})
        self.assertEqual(rule("api", "api.qb"),
                         {"allowed": 2, "denied": 0, "over_quota": 0, "shadow": 0})
        self.assertEqual(rule("api", "api.tenant"),
                         {"allowed": 2, "denied": 1, "over_quota": 0, "shadow": 0})
        self.assertEqual(len(m.series("sluice_rule_requests_total")), 7 * 4)
        self.assertEqual(m.get("sluice_rule_elastic_total", domain="api", rule="api.tenant"), 1)
        self.assertEqual(m.get("sluice_rule_elastic_total", domain="api", rule="api.user"), 0)
        # no series under a rule's `name:`
        self.assertEqual([k for k in m.series("sluice_rule_requests_total")
                          if dict(k)["rule"] in ("per_user", "login_limit", "stretchy")], [])
        self.assertEqual(len(m.series("sluice_rule_elastic_total")), 7)
        values = {(dict(k)["name"], dict(k)["outcome"]): v
                  for k, v in m.series("sluice_rule_value_requests_total").items()
                  if dict(k)["outcome"] in ("allowed", "denied")}
        self.assertEqual(values, {("api.route_a", "allowed"): 2, ("api.route_a", "denied"): 0,
                                  ('api.route_b"\\', "allowed"): 1,
                                  ('api.route_b"\\', "denied"): 0})
        self.assertEqual(m.get("sluice_rule_value_overflow_total", domain="api",
                               rule="api.route"), 0)

        # the histogram: one decision in 16 timed, buckets cumulative
        self.assertEqual(self.types["sluice_decision_latency_seconds"], "histogram")
        count = m.get("sluice_decision_latency_seconds_count")
        self.assertEqual(sent, 58)
        self.assertEqual(count, sent // LAT_SAMPLE)
        buckets = sorted((float(dict(k)["le"]), v)
                         for k, v in m.series("sluice_decision_latency_seconds_bucket").items())
        self.assertEqual(len(buckets), 14)
        self.assertEqual(buckets[-1], (float("inf"), count))
        self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))
        self.assertEqual(buckets[0][0], 1e-6)
        self.assertGreater(m.get("sluice_decision_latency_seconds_sum"), 0)
        info = s.info()
        self.assertEqual(count, int(info["decision_latency_sampled"]))
        self.assertAlmostEqual(m.get("sluice_decision_latency_seconds_sum"),
                               int(info["decision_latency_sum_ns"]) / 1e9, places=9)

        # keys: ra, ha, and the rules' counters; memory as INFO has it
        self.assertEqual(m.get("sluice_keys"), int(info["keys"]))
        self.assertGreaterEqual(m.get("sluice_keys"), 2)
        self.assertEqual(m.get("sluice_memory_bytes"), int(info["used_memory"]))
        self.assertEqual(m.get("sluice_memory_max_bytes"), int(info["maxmemory"]))
        self.assertEqual(m.get("sluice_evictions_total"), 0)
        self.assertEqual(m.get("sluice_clients", protocol="resp"), 1)
        # the HTTP gauge is kept by the listener (stats.h http_clients): at
        # least the connection this page came on
        self.assertGreaterEqual(m.get("sluice_clients", protocol="http"), 1)
        self.assertEqual(m.get("sluice_rules_version"), 1)
        self.assertEqual(m.get("sluice_rules_reloads_total", result="ok"), 1)
        self.assertEqual(m.get("sluice_rules_reloads_total", result="failed"), 0)
        self.assertEqual(m.get("sluice_metrics_omitted", what="rules"), 0)
        self.assertEqual(m.get("sluice_metrics_omitted", what="values"), 0)

    def test_clients_by_protocol(self):
        """A gRPC connection counts as grpc, not as a RESP client."""
        s = self.new_server(http=True, grpc=True, threads=1)
        m = self.scrape(s)
        resp0 = m.get("sluice_clients", protocol="resp")
        self.assertEqual(m.get("sluice_clients", protocol="grpc"), 0)
        g = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=10)
        self.addCleanup(g.close)
        g.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        g.recv(9)  # the server's SETTINGS: the connection is accepted and counted
        m = self.scrape(s)
        self.assertEqual(m.get("sluice_clients", protocol="grpc"), 1)
        self.assertEqual(m.get("sluice_clients", protocol="resp"), resp0)

    def test_reloads_and_readyz(self):
        s = self.server()
        status, h, body = self.http(s, "/readyz")
        self.assertEqual((status, h["Content-Type"]), (200, "application/json"))
        self.assertEqual(json.loads(body),
                         {"status": "ready", "rules_version": 1, "backend": "local"})
        with s.raw() as c:
            self.assertEqual(self.check(c, "web", "ip", "x"), 1)
        # a good reload: the rule renamed (its `name:`, its descriptor the same)
        with open(os.path.join(self.rules, "web.yaml"), "w") as f:
            f.write(WEB % "login_v2")
        os.kill(s.pid, signal.SIGHUP)
        self.wait_metric(s, "sluice_rules_reloads_total", 2, "after a good SIGHUP", result="ok")
        m = self.scrape(s)
        self.assertEqual(m.get("sluice_rules_version"), 2)
        self.assertEqual(m.get("sluice_rules_reloads_total", result="failed"), 0)
        # statistics are named by the descriptor path, not by `name:`: the
        # series of web.ip goes on counting through the rename, and neither
        # name labels a series
        self.assertEqual(m.get("sluice_rule_requests_total", domain="web", rule="web.ip",
                               outcome="allowed"), 1)
        for name in ("login_limit", "login_v2"):
            self.assertNotIn(frozenset({("domain", "web"), ("rule", name),
                                        ("outcome", "allowed")}),
                             m.series("sluice_rule_requests_total"))
        # a bad reload: refused, counted, the old rules keep serving and ready
        with open(os.path.join(self.rules, "web.yaml"), "w") as f:
            f.write("domain: web\ndescriptors: [\n")
        os.kill(s.pid, signal.SIGHUP)
        self.wait_metric(s, "sluice_rules_reloads_total", 1, "after a bad SIGHUP",
                         result="failed")
        m = self.scrape(s)
        self.assertEqual(m.get("sluice_rules_version"), 2)
        self.assertEqual(m.get("sluice_rules_reloads_total", result="ok"), 2)
        status, _, body = self.http(s, "/readyz")
        self.assertEqual((status, json.loads(body)),
                         (200, {"status": "ready", "rules_version": 2, "backend": "local"}))
        # HEAD and a wrong method
        c = s.http_conn()
        self.addCleanup(c.close)
        c.request("POST", "/metrics", body=b"")
        r = c.getresponse()
        self.assertEqual((r.status, r.getheader("Allow"), json.loads(r.read())),
                         (405, "GET, HEAD", {"error": "method not allowed: use GET, HEAD"}))

    def test_without_rules(self):
        s = self.srv  # the class's server: no --rules
        status, _, body = self.http(s, "/readyz")
        self.assertEqual((status, json.loads(body)),
                         (200, {"status": "ready", "rules_version": 0, "backend": "local"}))
        m = self.scrape(s)
        self.assertEqual(m.get("sluice_rules_version"), 0)
        self.assertEqual(m.get("sluice_rules_reloads_total", result="ok"), 0)
        self.assertEqual(m.series("sluice_rule_requests_total"), {})
        self.assertEqual(self.types["sluice_rule_requests_total"], "counter")
