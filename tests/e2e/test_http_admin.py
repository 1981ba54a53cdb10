"""The rules service (docs/http.md, "The rules service"): GET /v1/rules,
GET|PUT|DELETE /v1/rules/<domain> behind --admin-token-file's bearer token,
as an operator's client sees it -- exact statuses, headers and JSON.

What a change does is asserted where it matters: the file on disk (its
exact bytes) and the serving decisions (RL.CHECK over RESP), before and
after -- a refused body changes neither, a good one decides the very next
request, and survives a restart."""

import http.client
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import unittest

from harness import (HOST, SANITIZED, SLOW, SLUICED, RespError, Server, assert_clean_stop, deadline,
                     run_checked)

TOKEN = "t0ken-of-the-rules-service"

API = """domain: api
descriptors:
  - key: user
    rate_limit: {name: %s, unit: hour, requests_per_unit: %d}
"""


def api_rules(name, limit):
    return API % (name, limit)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class AdminCase(unittest.TestCase):
    """A server of the test's own on a rules directory (or file) of its own."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-admin-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.rules = os.path.join(self.dir, "rules")
        os.mkdir(self.rules)
        self.api = os.path.join(self.rules, "api.yaml")
        write(self.api, api_rules("v1", 5))
        self.token_file = os.path.join(self.dir, "token")
        write(self.token_file, TOKEN + "\n")

    def start(self, *args, rules=None, token=True):
        argv = ["--rules", rules or self.rules] + list(args)
        if token:
            argv += ["--admin-token-file", self.token_file]
        s = Server(*argv, name=self.id().split(".")[-1], http=True)
        s.start()
        self.addCleanup(s.kill)
        return s

    def call(self, s, method, path, body=None, token=TOKEN, headers=None):
        """One request on a new connection: (status, headers dict, body bytes)."""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        c = http.client.HTTPConnection(HOST, s.http_port, timeout=20 * SLOW)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, {k: v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def jcall(self, s, method, path, body=None, **kw):
        """call(), its body parsed as the JSON it must be."""
        status, h, b = self.call(s, method, path, body, **kw)
        self.assertEqual(h.get("Content-Type"), "application/json", (method, path, b))
        return status, h, json.loads(b)

    def put(self, s, domain, text, ctype="application/yaml", **kw):
        return self.jcall(s, "PUT", "/v1/rules/" + domain, text.encode(),
                          headers={"Content-Type": ctype}, **kw)

    def rule(self, s, domain="api", key="user", value="bob"):
        """(code, rule name or None, limit) of one RL.CHECK's only descriptor."""
        with s.raw() as c:
            r = c.cmd("RL.CHECK", domain, "DESCRIPTOR", key, value)
        self.assertNotIsInstance(r, RespError, r)
        return r[6][0].decode(), r[6][1] and r[6][1].decode(), r[6][2]


class TestNoToken(AdminCase):

    def test_every_admin_endpoint_says_how_to_turn_it_on_without_a_token_file(self):
        # 403, not 404: the path is right (a client should not look for
        # another one, a cache not keep the answer), and no token helps
        s = self.start(token=False)
        off = {"error": "the rules service is off: start sluiced with --admin-token-file FILE "
                        "to turn it on (docs/http.md, The rules service)"}
        for method, path in [("GET", "/v1/rules"), ("GET", "/v1/rules/api"),
                             ("PUT", "/v1/rules/api"), ("DELETE", "/v1/rules/api"),
                             ("POST", "/v1/rules"), ("GET", "/v1/rules/a%2Fb")]:
            for token in (None, TOKEN):
                status, h, body = self.jcall(s, method, path, token=token)
                self.assertEqual((status, body), (403, off), (method, path, token))
                self.assertNotIn("WWW-Authenticate", h)
        self.assertEqual(read(self.api), api_rules("v1", 5).encode())
        self.assertEqual(self.rule(s), ("OK", "v1", 5))


class TestTokenFile(unittest.TestCase):
    """A token file that cannot be used refuses the start, naming it."""

    def refused(self, path):
        r = run_checked([SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0", "--admin-token-file", path],
                        capture_output=True, timeout=30 * SLOW)
        self.assertEqual(r.returncode, 2, r)
        return r.stderr.decode()

    def test_missing_empty_and_spaced_token_files_refuse_to_start(self):
        d = tempfile.mkdtemp(prefix="sluice-admin-")
        self.addCleanup(shutil.rmtree, d, True)
        missing = os.path.join(d, "nope")
        self.assertEqual(self.refused(missing),
                         "sluiced: --admin-token-file %s: cannot read it: No such file or "
                         "directory\nTry 'sluiced --help'.\n" % missing)
        empty = os.path.join(d, "empty")
        write(empty, "\n")
        self.assertEqual(self.refused(empty),
                         "sluiced: --admin-token-file %s is empty: write the token in it\n"
                         "Try 'sluiced --help'.\n" % empty)
        spaced = os.path.join(d, "spaced")
        write(spaced, "two words\n")
        self.assertEqual(self.refused(spaced),
                         "sluiced: --admin-token-file %s: byte 4 of the token is a space, a "
                         "control character or not ASCII (a bearer token is printable ASCII)\n"
                         "Try 'sluiced --help'.\n" % spaced)


class TestRulesService(AdminCase):

    def setUp(self):
        super().setUp()
        self.srv = self.start()

    def test_no_or_wrong_token_is_401_and_changes_nothing(self):
        # 24 wrong tokens from one address: past the default --auth-fail-limit
        # (10), which the admin token counts against (test_http_attack.py)
        s = self.start("--auth-fail-limit", "100/60s")
        missing = {"error": "the rules service needs \"Authorization: Bearer TOKEN\" (the token "
                            "of --admin-token-file)"}
        for method, path, body in [("GET", "/v1/rules", None), ("GET", "/v1/rules/api", None),
                                   ("PUT", "/v1/rules/api", api_rules("evil", 1000)),
                                   ("DELETE", "/v1/rules/api", None)]:
            data = body.encode() if body else None
            ct = {"Content-Type": "application/yaml"}
            status, h, got = self.jcall(s, method, path, data, token=None, headers=ct)
            self.assertEqual((status, got), (401, missing), (method, path))
            self.assertEqual(h["WWW-Authenticate"], 'Bearer realm="sluiced"')
            for wrong in ("nope", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), ""):
                status, h, got = self.jcall(s, method, path, data, token=wrong, headers=ct)
                self.assertEqual((status, got), (401, {"error": "wrong bearer token"}),
                                 (method, path, wrong))
                self.assertEqual(h["WWW-Authenticate"],
                                 'Bearer realm="sluiced", error="invalid_token"')
            # not a bearer scheme at all
            status, _, got = self.jcall(s, method, path, data, token=None,
                                        headers=dict(ct, Authorization="Basic " + TOKEN))
            self.assertEqual((status, got), (401, {"error": "wrong bearer token"}))
        self.assertEqual(read(self.api), api_rules("v1", 5).encode())
        self.assertEqual(self.rule(s), ("OK", "v1", 5))

    def test_get_lists_the_domains_and_the_version(self):
        status, _, body = self.jcall(self.srv, "GET", "/v1/rules")
        self.assertEqual(status, 200)
        self.assertEqual(body, {"version": 1, "path": self.rules, "directory": True,
                                "domains": [{"domain": "api", "file": self.api, "files": 1}]})

    def test_get_a_domain_as_json_and_as_yaml(self):
        status, h, body = self.jcall(self.srv, "GET", "/v1/rules/api")
        self.assertEqual((status, h["X-Rules-Version"]), (200, "1"))
        self.assertEqual(body, {"domain": "api", "file": self.api, "version": 1,
                                "source": api_rules("v1", 5)})
        status, h, raw = self.call(self.srv, "GET", "/v1/rules/api",
                                   headers={"Accept": "application/yaml"})
        self.assertEqual((status, h["Content-Type"], raw),
                         (200, "application/yaml", api_rules("v1", 5).encode()))
        status, _, body = self.jcall(self.srv, "GET", "/v1/rules/nope")
        self.assertEqual((status, body), (404, {"error": "no domain 'nope' in the serving rules"}))

    def assert_unchanged(self):
        self.assertEqual(read(self.api), api_rules("v1", 5).encode())
        self.assertEqual(sorted(os.listdir(self.rules)), ["api.yaml"])
        self.assertEqual(self.rule(self.srv), ("OK", "v1", 5))
        self.assertEqual(self.jcall(self.srv, "GET", "/v1/rules")[2]["domains"],
                         [{"domain": "api", "file": self.api, "files": 1}])

    def test_bad_bodies_are_400_with_the_loaders_message_and_change_nothing(self):
        s = self.srv
        cases = [
            ("domain: api\ndescriptors:\n  - key: [user\n",
             "api.yaml:4:1: YAML syntax error: did not find expected ',' or ']' (while parsing "
             "a flow sequence from line 3)"),
            (api_rules("v2", -5),
             "api.yaml:4:59: negative requests_per_unit '-5' (expected 0 to 1000000000000)"),
            ("domain: web\ndescriptors: []\n",
             "api.yaml:1:9: the body is domain 'web', the path names domain 'api': they must "
             "be the same"),
            ("", "api.yaml:1:1: empty file: expected a map with 'domain' and 'descriptors'"),
        ]
        for text, msg in cases:
            status, _, body = self.put(s, "api", text)
            self.assertEqual((status, body), (400, {"error": msg}), text)
            self.assert_unchanged()
        status, _, body = self.put(s, "api", '{"domain": "api",\n "descriptors": [}',
                                   ctype="application/json")
        self.assertEqual((status, body),
                         (400, {"error": "api.yaml:2:18: invalid JSON: unexpected token near '}'"}))
        status, _, body = self.put(s, "api", api_rules("v2", 6), ctype="text/plain")
        self.assertEqual((status, body), (415, {"error": "Content-Type must be application/yaml "
                                                         "or application/json"}))
        self.assert_unchanged()

    def test_good_rules_decide_the_next_request_and_survive_a_restart(self):
        s = self.srv
        status, _, body = self.put(s, "api", api_rules("v2", 7))
        self.assertEqual(status, 200, body)
        self.assertEqual((body["domain"], body["file"], body["status"]), ("api", self.api, "serving"))
        self.assertGreater(body["version"], 1)
        self.assertEqual(self.rule(s), ("OK", "v2", 7))  # no wait: the answer came after the swap
        self.assertEqual(read(self.api), api_rules("v2", 7).encode())
        self.assertEqual(self.jcall(s, "GET", "/v1/rules")[2]["version"], body["version"])
        # a new domain as JSON: libyaml reads JSON, YAML's subset
        web = {"domain": "web", "descriptors": [
            {"key": "ip", "rate_limit": {"name": "w1", "unit": "minute", "requests_per_unit": 3}}]}
        status, _, body = self.put(s, "web", json.dumps(web), ctype="application/json; charset=utf-8")
        self.assertEqual((status, body["file"]), (200, os.path.join(self.rules, "web.yaml")), body)
        self.assertEqual(self.rule(s, "web", "ip", "10.0.0.1"), ("OK", "w1", 3))
        self.assertEqual(json.loads(read(os.path.join(self.rules, "web.yaml"))), web)
        for i in range(3):
            self.assertEqual(self.rule(s, "web", "ip", "10.0.0.2")[0], "OK")
        self.assertEqual(self.rule(s, "web", "ip", "10.0.0.2"), ("OVER_LIMIT", "w1", 3))
        self.assertEqual(sorted(os.listdir(self.rules)), ["api.yaml", "web.yaml"])  # no temporaries
        # restart on the same rules path: the same decisions
        assert_clean_stop(s)
        s2 = self.start()
        self.assertEqual(self.rule(s2), ("OK", "v2", 7))
        self.assertEqual(self.rule(s2, "web", "ip", "10.0.0.1"), ("OK", "w1", 3))

    def test_delete_removes_the_domain_and_its_file(self):
        s = self.srv
        self.assertEqual(self.put(s, "web", "domain: web\ndescriptors:\n  - key: ip\n"
                                            "    rate_limit: {unit: minute, requests_per_unit: 2}\n")[0], 200)
        self.assertEqual(self.rule(s, "web", "ip", "a")[0], "OK")
        status, _, body = self.jcall(s, "DELETE", "/v1/rules/web")
        self.assertEqual((status, body["status"], body["file"]),
                         (200, "deleted", os.path.join(self.rules, "web.yaml")), body)
        self.assertEqual(self.rule(s, "web", "ip", "a"), ("NO_RULE", None, 0))
        self.assertEqual(sorted(os.listdir(self.rules)), ["api.yaml"])
        status, _, body = self.jcall(s, "DELETE", "/v1/rules/web")
        self.assertEqual((status, body), (404, {"error": "no domain 'web' in the serving rules"}))
        self.assertEqual(self.rule(s), ("OK", "v1", 5))

    def test_a_set_refused_as_a_whole_puts_the_file_back(self):
        # a broken file on disk that the serving set does not have: any
        # reload now fails, so the PUT's set is refused and undone
        broken = os.path.join(self.rules, "broken.yaml")
        write(broken, "domain: [\n")
        status, _, body = self.put(self.srv, "api", api_rules("v3", 9))
        self.assertEqual(status, 409, body)
        self.assertTrue(body["error"].startswith(
            "the rules with this change do not load; nothing changed: %s:2:1: " % broken), body)
        self.assertEqual(read(self.api), api_rules("v1", 5).encode())
        self.assertEqual(self.rule(self.srv), ("OK", "v1", 5))

    def test_methods_and_names(self):
        s = self.srv
        status, h, body = self.jcall(s, "POST", "/v1/rules/api")
        self.assertEqual((status, h["Allow"], body),
                         (405, "GET, PUT, DELETE", {"error": "method not allowed: use GET, PUT, "
                                                              "DELETE"}))
        status, h, body = self.jcall(s, "DELETE", "/v1/rules")
        self.assertEqual((status, h["Allow"]), (405, "GET"))
        status, _, body = self.put(s, "a%20b", "domain: a b\ndescriptors: []\n")
        self.assertEqual((status, body), (400, {"error": "domain 'a b' cannot name a new rules "
                                                         "file: use letters, digits, '_', '-' "
                                                         "and '.' (not first), at most 200 bytes"}))
        self.assertEqual(sorted(os.listdir(self.rules)), ["api.yaml"])

    def test_concurrent_puts_leave_one_whole_file_that_serves(self):
        s = self.srv
        rounds = 5 if SANITIZED else 15
        bodies = {api_rules("c%d_%d" % (t, i), 10 + t * 100 + i)
                  for t in range(4) for i in range(rounds)}
        errors = []

        def worker(t):
            try:
                for i in range(rounds):
                    status, _, body = self.put(s, "api", api_rules("c%d_%d" % (t, i),
                                                                    10 + t * 100 + i))
                    if status != 200:
                        errors.append((status, body))
            except Exception as e:  # reported below, in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120 * SLOW)
        self.assertFalse(any(th.is_alive() for th in threads), "PUTs still running")
        self.assertEqual(errors, [])
        text = read(self.api).decode()
        self.assertIn(text, bodies)  # one whole body, never a mix
        name = text.split("name: ")[1].split(",")[0]
        limit = int(text.split("requests_per_unit: ")[1].split("}")[0])
        self.assertEqual(self.rule(s), ("OK", name, limit))  # and it is what serves
        self.assertEqual(sorted(os.listdir(self.rules)), ["api.yaml"])

    def test_clients_that_hang_up_before_the_answer(self):
        # the answer comes from the reload thread later; the connection may
        # be gone by then (its reply slot is orphaned): nothing breaks
        s = self.srv
        n = 10 if SANITIZED else 30
        for i in range(n):
            body = api_rules("h%d" % i, 20 + i).encode()
            with socket.create_connection((HOST, s.http_port), timeout=10 * SLOW) as c:
                c.sendall(b"PUT /v1/rules/api HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                          + TOKEN.encode() + b"\r\nContent-Type: application/yaml\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
        status, _, body = self.put(s, "api", api_rules("after", 3))
        self.assertEqual(status, 200, body)
        # the hung-up PUTs may still be landing (on other workers): wait
        # until the disk and the serving rules agree, each a whole body
        bodies = {api_rules("h%d" % i, 20 + i) for i in range(n)} | {api_rules("after", 3)}
        until = deadline(20)
        while True:
            text = read(self.api).decode()
            self.assertIn(text, bodies)
            name = text.split("name: ")[1].split(",")[0]
            limit = int(text.split("requests_per_unit: ")[1].split("}")[0])
            got = self.rule(s)
            # a hung-up PUT still being written shows as its temporary file
            files = sorted(os.listdir(self.rules))
            if (got == ("OK", name, limit) and files == ["api.yaml"]) or \
                    time.monotonic() > until:
                break
            time.sleep(0.05)
        self.assertEqual(got, ("OK", name, limit))
        self.assertEqual(files, ["api.yaml"])

class TestRulesPathIsAFile(AdminCase):
    """--rules FILE holds one domain: PUT may replace it, nothing else."""

    def test_put_replaces_the_one_domain_and_refuses_others(self):
        s = self.start(rules=self.api)
        status, _, body = self.put(s, "web", "domain: web\ndescriptors: []\n")
        self.assertEqual((status, body), (409, {
            "error": "the rules path %s is one file, holding domain 'api': it cannot hold 'web' "
                     "too (give --rules a directory to add and remove domains)" % self.api}))
        status, _, body = self.jcall(s, "DELETE", "/v1/rules/api")
        self.assertEqual((status, body), (409, {
            "error": "the rules path %s is one file, holding domain 'api': deleting it would "
                     "leave no rules to load (give --rules a directory to add and remove "
                     "domains)" % self.api}))
        self.assertEqual(read(self.api), api_rules("v1", 5).encode())
        self.assertEqual(self.rule(s), ("OK", "v1", 5))
        status, _, body = self.put(s, "api", api_rules("v2", 8))
        self.assertEqual((status, body["file"]), (200, self.api), body)
        self.assertEqual(self.rule(s), ("OK", "v2", 8))
        self.assertEqual(read(self.api), api_rules("v2", 8).encode())
        status, _, body = self.jcall(s, "GET", "/v1/rules")
        self.assertEqual((body["path"], body["directory"]), (self.api, False))


if __name__ == "__main__":
    unittest.main()
