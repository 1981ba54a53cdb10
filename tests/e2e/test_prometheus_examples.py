"""examples/prometheus and examples/grafana (docs/operations.md) against
Prometheus's own tool and a real sluiced's /metrics:

  - `promtool check config` of prometheus.yml (which loads alerts.yml),
    `promtool check rules` of alerts.yml, `promtool test rules` of
    alerts_test.yml (each alert firing, and not, on sluiced-shaped series);
  - the dashboard (examples/grafana/sluice.json) is JSON with a Prometheus
    datasource variable that every panel and query uses, and every PromQL
    expression parses (promtool checks them as recording rules, Grafana's
    $variables replaced);
  - every metric name the alerts and the dashboard use is on a real
    sluiced's /metrics -- one with rules and a Redis backend has them all,
    one without rules and with the local backend all but the backend's --,
    and every `label="value"` they match on is a value sluiced writes;
  - the scrape target's port is sluiced's default --http-port.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

import harness
from harness import RedisServer, Server

PROMTOOL = "/usr/bin/promtool"
PROM = os.path.join(harness.ROOT, "examples", "prometheus")
DASH = os.path.join(harness.ROOT, "examples", "grafana", "sluice.json")

RULES = """domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
"""

SELECTOR_RE = re.compile(r'\b(sluice_[a-zA-Z0-9_]+)\s*\{([^}]*)\}')
MATCHER_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"')


def promtool(*args):
    p = subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, cwd=PROM,
                       timeout=120 * harness.SLOW)
    return p.returncode, p.stdout + p.stderr


def alert_exprs():
    """(alert, expr) of every rule of alerts.yml, read as it is written:
    `- alert: NAME`, then `expr: EXPR` or `expr: |` and the lines indented
    under it.  (promtool checks the YAML; this only finds the exprs.)"""
    with open(os.path.join(PROM, "alerts.yml")) as f:
        lines = f.read().splitlines()
    out, name, i = [], None, 0
    while i < len(lines):
        l = lines[i]
        m = re.match(r"^\s*- alert: (\S+)$", l)
        if m:
            name = m.group(1)
        m = re.match(r"^(\s*)expr: (.*)$", l)
        if m and m.group(2) != "|":
            out.append((name, m.group(2)))
        elif m:
            body, ind = [], len(m.group(1))
            while i + 1 < len(lines) and (not lines[i + 1].strip() or
                                          len(lines[i + 1]) - len(lines[i + 1].lstrip()) > ind):
                i += 1
                body.append(lines[i].strip())
            out.append((name, " ".join(body).strip()))
        i += 1
    assert len(out) == 8 and all(n for n, _ in out), out
    return out


def dashboard_exprs(dash):
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def metrics(port):
    """{metric name: [(labels dict, value)]} of GET /metrics; a family with
    no samples (# TYPE only) is there with an empty list."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            out.setdefault(line.split()[2], [])
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = dict(MATCHER_RE.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, m.group(3)))
    return out


def used(exprs):
    """{metric name: {(label, value) matched with =}} over exprs."""
    names = {}
    for _, e in exprs:
        for n in re.findall(r'\b(sluice_[a-zA-Z0-9_]+)\b', e):
            names.setdefault(n, set())
        for n, sel in SELECTOR_RE.findall(e):
            for k, v in MATCHER_RE.findall(sel):
                if k not in ("instance", "job"):
                    names[n].add((k, v))
    return names


class PromtoolChecks(unittest.TestCase):

    def test_scrape_config(self):
        rc, out = promtool("check", "config", "prometheus.yml")
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS: prometheus.yml is valid prometheus config file syntax", out)
        self.assertIn("SUCCESS: 1 rule files found", out)
        with open(os.path.join(PROM, "prometheus.yml")) as f:
            text = f.read()
        self.assertIn('targets: ["127.0.0.1:8390"]', text)
        self.assertIn("metrics_path: /metrics", text)
        p = harness.run_checked([harness.SLUICED, "--dump-options"], text=True)
        self.assertRegex(p.stdout, r"(?m)^http-port\t.*\t8390\t")

    def test_alert_rules(self):
        rc, out = promtool("check", "rules", "alerts.yml")
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS: 8 rules found", out)

    def test_alert_unit_tests(self):
        rc, out = promtool("test", "rules", "alerts_test.yml")
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS", out)
        # every alert has a test case
        with open(os.path.join(PROM, "alerts_test.yml")) as f:
            tests = f.read()
        for name, _ in alert_exprs():
            self.assertIn("alertname: %s\n" % name, tests)

    def test_dashboard(self):
        with open(DASH) as f:
            dash = json.load(f)
        var = [v for v in dash["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual([(v["name"], v["query"]) for v in var], [("datasource", "prometheus")])
        ds = {"type": "prometheus", "uid": "${datasource}"}
        exprs = dashboard_exprs(dash)
        self.assertGreaterEqual(len(exprs), 15)
        for p in dash["panels"]:
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"], ds, p["title"])
            self.assertTrue(p["targets"], p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"], ds, p["title"])
        titles = " | ".join(p["title"] for p in dash["panels"])
        for want in ("allowed and denied", "by rule", "latency", "Clients", "Backend"):
            self.assertIn(want.lower(), titles.lower())
        # every expression parses: promtool checks them as recording rules
        d = tempfile.mkdtemp(prefix="sluice-dash-")
        self.addCleanup(shutil.rmtree, d, True)
        lines = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (_, e) in enumerate(exprs):
            e = (e.replace("$__rate_interval", "5m").replace("$__range", "1h")
                 .replace("$instance", ".*"))
            lines += ["      - record: dashboard:expr_%d" % i, "        expr: %s" % json.dumps(e)]
        path = os.path.join(d, "dash.yml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        rc, out = promtool("check", "rules", path)
        self.assertEqual(rc, 0, out)
        self.assertIn("SUCCESS: %d rules found" % len(exprs), out)


class NamesOnRealMetrics(unittest.TestCase):
    """Every name the alerts and dashboard use, on a real /metrics."""

    def setUp(self):
        with open(DASH) as f:
            self.used = used(alert_exprs() + dashboard_exprs(json.load(f)))
        self.assertIn("sluice_backend_up", self.used)
        self.assertIn("sluice_rule_requests_total", self.used)

    def test_without_rules_local_backend(self):
        s = Server(http=True, name="metrics-plain").start()
        self.addCleanup(s.cleanup)
        have = metrics(s.http_port)
        missing = sorted(n for n in self.used
                         if n not in have and not n.startswith("sluice_backend_"))
        self.assertEqual(missing, [])
        self.assertEqual(have["sluice_clients_max"], [({}, "10000")])
        harness.assert_clean_stop(s)

    def test_with_rules_and_a_redis_backend(self):
        d = tempfile.mkdtemp(prefix="sluice-prom-")
        self.addCleanup(shutil.rmtree, d, True)
        rules = os.path.join(d, "edge.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        r = RedisServer().start()
        self.addCleanup(r.cleanup)
        s = Server("--rules", rules, "--backend", r.url(), "--max-clients", "77", http=True,
                   name="metrics-redis").start()
        self.addCleanup(s.cleanup)
        with s.raw() as c:  # samples for the rule's outcomes
            c.cmd("RL.CHECK", "edge", "DESCRIPTOR", "ip", "1")
            c.cmd("RL.CHECK", "edge", "DESCRIPTOR", "ip", "1")
        have = metrics(s.http_port)
        self.assertEqual(sorted(n for n in self.used if n not in have), [])
        self.assertEqual(have["sluice_clients_max"], [({}, "77")])
        # every label value matched with = is one sluiced writes
        for name, matchers in sorted(self.used.items()):
            for k, v in sorted(matchers):
                with self.subTest(name=name, label=k, value=v):
                    self.assertIn(v, {labels.get(k) for labels, _ in have[name]})
        harness.assert_clean_stop(s)


if __name__ == "__main__":
    unittest.main()
