"""POST /v1/check (SPEC section 8, docs/http.md): RL.CHECK as JSON.

The reference is RESP: the same requests, at the same times, sent as
RL.CHECK to a second server with the same rules must give the same six
fields and the same statuses, descriptor by descriptor.  The RateLimit
headers are parsed as RFC 9651 lists (sf_list.py, written from the RFC).

Times are exact: both servers trust client time and every request carries
at = BASE + offset (BASE is a multiple of a day).

Several limits on one request (TestHeadersOfSeveralLimits: one descriptor
with several limits, several descriptors, one rule for two values; and
TestForwardAuthSeveralLimits through /v1/auth): the X-RateLimit trio is the
limit that holds the next request longest, as rules_model.py (from the
docs) answers, and a leaky bucket's delay is X-RateLimit-Delay-Ms."""

import copy
import json
import os
import random
import time

import rules_model as M
from harness import BASE, ServerTestCase
from sf_list import parse_list

RULES = r"""
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: tenant
    value: trial*
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2, name: 'acme "users" \ café'}
"""

ACME = 'acme "users" \\ café'
ACME_SF = '"acme \\"users\\" \\\\ caf%C3%A9"'  # the name as an sf-string, on the wire


def d(*pairs):
    """One descriptor from key, value, key, value..."""
    return [{"key": pairs[i], "value": pairs[i + 1]} for i in range(0, len(pairs), 2)]


class TestHttpCheck(ServerTestCase):
    HTTP = True

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-http-check-")
        cls.rules = os.path.join(cls.dir, "api.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES)
        cls.SERVER_ARGS = ("--rules", cls.rules)
        super().setUpClass()

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def post(self, body, path="/v1/check", conn=None):
        """POST body (an object: sent as JSON; bytes: as is); returns
        (status, headers as a dict, the parsed JSON answer)."""
        c = conn or self.conn
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read()
        self.assertEqual(r.getheader("Content-Type"), "application/json", raw)
        return r.status, {k: v for k, v in r.getheaders()}, json.loads(raw)

    def check(self, descs, at, cost=None, domain="api", conn=None):
        body = {"domain": domain, "descriptors": descs, "at": BASE + at}
        if cost is not None:
            body["cost"] = cost
        return self.post(body, conn=conn)

    def test_answer_is_six_fields_then_statuses_in_request_order(self):
        status, h, body = self.check([d("user", "ann"), d("path", "/nothing"), d("path", "/free")],
                                     at=0)
        self.assertEqual(status, 200)
        self.assertEqual(list(body), ["allowed", "limit", "remaining", "retry_after_ms",
                                      "reset_after_ms", "delay_ms", "statuses"])
        self.assertEqual(body, {
            "allowed": True, "limit": 3, "remaining": 2, "retry_after_ms": 0,
            "reset_after_ms": 1000, "delay_ms": 0,
            "statuses": [
                {"code": "OK", "rule": "api.user", "limit": 3, "remaining": 2,
                 "retry_after_ms": 0, "reset_after_ms": 1000},
                {"code": "NO_RULE", "rule": None, "limit": 0, "remaining": 0,
                 "retry_after_ms": 0, "reset_after_ms": 0},
                {"code": "UNLIMITED", "rule": "api.path_/free", "limit": 0, "remaining": 0,
                 "retry_after_ms": 0, "reset_after_ms": 0}]})
        self.assertEqual(list(body["statuses"][0]), ["code", "rule", "limit", "remaining",
                                                     "retry_after_ms", "reset_after_ms"])
        # only the descriptor with a limit is a policy; NO_RULE and UNLIMITED are not
        self.assertEqual(parse_list(h["RateLimit-Policy"]), [("api.user", {"q": 3, "w": 1})])
        self.assertEqual(parse_list(h["RateLimit"]), [("api.user", {"r": 2, "t": 1})])
        self.assertEqual((h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"],
                          h["X-RateLimit-Reset"]), ("3", "2", "1"))
        self.assertNotIn("Retry-After", h)

    def test_denied_is_429_with_every_policy_and_the_most_restrictive_numbers(self):
        for i in range(2):
            status, h, body = self.check([d("user", "bo"), d("path", "/login")], at=100 + i)
            self.assertEqual((status, body["allowed"]), (200, True))
        status, h, body = self.check([d("user", "bo"), d("path", "/login")], at=500)
        self.assertEqual(status, 429)
        self.assertEqual([s["code"] for s in body["statuses"]], ["OK", "OVER_LIMIT"])
        # the denial: /login's 2 a minute, full again at BASE + 60 s
        self.assertEqual([body[k] for k in ("allowed", "limit", "remaining", "retry_after_ms",
                                             "reset_after_ms", "delay_ms")],
                         [False, 2, 0, 59500, 59500, 0])
        self.assertEqual(parse_list(h["RateLimit-Policy"]),
                         [("api.user", {"q": 3, "w": 1}), ("api.path_/login", {"q": 2, "w": 60})])
        # user's numbers are a peek (a denied request charges nothing): 3 - 2 - 1 = 0
        self.assertEqual(parse_list(h["RateLimit"]),
                         [("api.user", {"r": 0, "t": 1}), ("api.path_/login", {"r": 0, "t": 60})])
        self.assertEqual((h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"],
                          h["X-RateLimit-Reset"], h["Retry-After"]), ("2", "0", "60", "60"))

    def test_name_is_an_escaped_sf_string(self):
        status, h, body = self.check([d("tenant", "acme", "user", "cy")], at=0)
        self.assertEqual((status, body["statuses"][0]["rule"]), (200, ACME))
        self.assertEqual(h["RateLimit-Policy"], ACME_SF + ";q=2;w=3600")
        self.assertEqual(parse_list(h["RateLimit-Policy"]),
                         [("acme \"users\" \\ caf%C3%A9", {"q": 2, "w": 3600})])
        self.assertEqual(h["RateLimit"], ACME_SF + ";r=1;t=3600")

    def test_shadow_is_never_a_policy(self):
        status, h, body = self.check([d("tenant", "trial-s")], at=7000)
        self.assertEqual((status, body["statuses"][0]["code"]), (200, "OK"))
        status, h, body = self.check([d("tenant", "trial-s")], at=7001)
        self.assertEqual((status, body["statuses"][0]["code"]), (200, "SHADOW"))
        for k in ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "Retry-After"):
            self.assertNotIn(k, h)

    def test_never_allowed_has_no_retry_after(self):
        status, h, body = self.check([d("path", "/blocked")], at=0)
        self.assertEqual((status, body["retry_after_ms"], body["limit"]), (429, -1, 0))
        self.assertNotIn("Retry-After", h)
        self.assertEqual(parse_list(h["RateLimit-Policy"]),
                         [("api.path_/blocked", {"q": 0, "w": 1})])
        self.assertEqual(h["X-RateLimit-Limit"], "0")
        # cost above the limit: -1 too
        status, h, body = self.check([d("user", "huge")], at=0, cost=4)
        self.assertEqual((status, body["retry_after_ms"]), (429, -1))
        self.assertNotIn("Retry-After", h)

    def test_retry_after_rounds_up(self):
        """acme's users: fixed-window 2 an hour; denied at 3600000 - r ms
        the retry is r ms, said in whole seconds rounded up."""
        hour = 3600000
        for r, want in ((999, "1"), (1000, "1"), (1001, "2")):
            user = "round%d" % r
            desc = [d("tenant", "acme", "user", user)]
            self.assertEqual(self.check(desc, at=0, cost=2)[0], 200)
            status, h, body = self.check(desc, at=hour - r)
            self.assertEqual((status, body["retry_after_ms"], body["reset_after_ms"]),
                             (429, r, r), r)
            self.assertEqual(h["Retry-After"], want, r)
            self.assertEqual(h["X-RateLimit-Reset"], want, r)
            self.assertEqual(parse_list(h["RateLimit"])[0][1], {"r": 0, "t": int(want)}, r)
            # waiting exactly retry_after_ms is allowed (SPEC section 3)
            self.assertEqual(self.check(desc, at=hour)[0], 200, r)

    def test_unknown_domain_allows_without_headers(self):
        status, h, body = self.check([d("user", "x")], at=0, domain="nosuch")
        self.assertEqual(status, 200)
        self.assertEqual(body["statuses"][0]["code"], "NO_RULE")
        for k in ("RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining",
                  "X-RateLimit-Reset", "Retry-After"):
            self.assertNotIn(k, h)

    def test_bad_bodies_are_400_naming_what_and_where(self):
        cases = [
            (b"", "the body is not JSON: '[' or '{' expected near end of file (line 1, column 0)"),
            (b"{\"domain\": \"api\",", None),
            ([1], "the body must be a JSON object {\"domain\": D, \"descriptors\": "
                  "[[{\"key\": K, \"value\": V}, ...], ...]}"),
            ({"descriptors": [d("a", "b")]}, "domain must be a string (it is missing)"),
            ({"domain": 5, "descriptors": [d("a", "b")]}, "domain must be a string"),
            ({"domain": "api"}, "descriptors must be a non-empty array of descriptors "
                                "([[{\"key\": K, \"value\": V}, ...], ...]) (it is missing)"),
            ({"domain": "api", "descriptors": []}, "descriptors must be a non-empty array of "
             "descriptors ([[{\"key\": K, \"value\": V}, ...], ...])"),
            ({"domain": "api", "descriptors": [d("a", "b"), []]},
             "descriptors[1] must be a non-empty array of entries [{\"key\": K, \"value\": V}, ...]"),
            ({"domain": "api", "descriptors": [d("a", "b"), [{"key": 1, "value": "v"}]]},
             "descriptors[1][0].key must be a string"),
            ({"domain": "api", "descriptors": [d("a", "b", "c", "d") + [{"key": "e"}]]},
             "descriptors[0][2].value must be a string (it is missing)"),
            ({"domain": "api", "descriptors": [[{"key": "a", "value": "b", "x": 1}]]},
             "descriptors[0][0] has an unknown field 'x' (expected key and value)"),
            ({"domain": "api", "descriptors": [["a"]]},
             "descriptors[0][0] must be an object {\"key\": K, \"value\": V}"),
            ({"domain": "api", "descriptors": [d("a", "b")] * 17},
             "at most 16 descriptors in one RL.CHECK, got 17"),
            ({"domain": "api", "descriptors": [d("a", "b")], "colour": 1},
             "unknown field 'colour' (expected domain, descriptors, cost, costs or at)"),
            ({"domain": "api", "descriptors": [d("a", "b")], "cost": "1"},
             "cost must be an integer"),
            ({"domain": "api", "descriptors": [d("a", "b")], "cost": 1.5},
             "cost must be an integer"),
            ({"domain": "api", "descriptors": [d("a", "b")], "cost": -1}, None),
            ({"domain": "api", "descriptors": [d("a", "b")], "at": "now"}, "at must be an integer"),
            (b'{"domain": "api", "domain": "b", "descriptors": [[{"key": "a", "value": "b"}]]}',
             None),
        ]
        for body, want in cases:
            status, h, got = self.post(body)
            self.assertEqual(status, 400, body)
            self.assertEqual(list(got), ["error"], body)
            if want is not None:
                self.assertEqual(got["error"], want, body)
            self.assertNotIn("RateLimit", h)
        # the RESP words for a bad cost
        status, _, got = self.post({"domain": "api", "descriptors": [d("a", "b")], "cost": -1})
        with self.srv.raw() as c:
            resp = c.cmd("RL.CHECK", "api", "COST", "-1", "DESCRIPTOR", "a", "b")
        self.assertEqual("ERR " + got["error"], resp.line)

    def test_only_post(self):
        self.conn.request("GET", "/v1/check")
        r = self.conn.getresponse()
        body = json.loads(r.read())
        self.assertEqual((r.status, r.getheader("Allow"), body),
                         (405, "POST", {"error": "method not allowed: use POST"}))

    def test_same_decisions_as_rl_check_over_resp(self):
        """The same sequence to this server over HTTP and to a second one
        over RESP: every answer equal, field by field."""
        ref = self.new_server("--rules", self.rules, trust_client_time=True)
        seq = []
        for i in range(12):
            at = 3 * 86400000 + i * 137  # after every other test's times
            descs = [d("user", "u%d" % (i % 3))]
            if i % 2:
                descs.append(d("path", "/login"))
            if i % 3 == 0:
                descs.append(d("tenant", "acme", "user", "u%d" % (i % 3)))
            if i in (4, 5, 9):
                descs.append(d("tenant", "trial-x"))
            if i == 7:
                descs.append(d("path", "/blocked"))
            seq.append((descs, at, 2 if i == 5 else None))
        codes, statuses = set(), set()
        with ref.raw() as c:
            for descs, at, cost in seq:
                status, h, body = self.check(descs, at, cost=cost, domain="api")
                args = ["RL.CHECK", "api", "AT", BASE + at]
                if cost is not None:
                    args += ["COST", cost]
                for one in descs:
                    args.append("DESCRIPTOR")
                    for e in one:
                        args += [e["key"], e["value"]]
                reply = c.cmd(*args)
                want_six = reply[:6]
                got_six = [int(body["allowed"])] + [body[k] for k in (
                    "limit", "remaining", "retry_after_ms", "reset_after_ms", "delay_ms")]
                self.assertEqual(got_six, want_six, (descs, at))
                self.assertEqual(status, 200 if want_six[0] else 429)
                want_st = [[s[0].decode(), None if s[1] is None else s[1].decode()] + s[2:]
                           for s in reply[6:]]
                got_st = [[s["code"], s["rule"], s["limit"], s["remaining"], s["retry_after_ms"],
                           s["reset_after_ms"]] for s in body["statuses"]]
                self.assertEqual(got_st, want_st, (descs, at))
                codes.update(x[0] for x in got_st)
                statuses.add(status)
        # the sequence meets every kind of answer it is meant to compare
        self.assertEqual(statuses, {200, 429})
        self.assertTrue({"OK", "OVER_LIMIT", "SHADOW"} <= codes, codes)


class TestHttpCheckWithoutRules(ServerTestCase):
    HTTP = True

    def test_no_rules_is_503(self):
        c = self.srv.http_conn()
        self.addCleanup(c.close)
        c.request("POST", "/v1/check",
                  body=json.dumps({"domain": "a", "descriptors": [d("k", "v")]}))
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())),
                         (503, {"error": "no rules loaded (start sluiced with --rules PATH)"}))


# ---- several limits on one request: which one the headers tell ----------------
#
# docs/http.md, "The headers of a rules decision": X-RateLimit-Limit,
# -Remaining and -Reset describe one limit, and no header tells a time
# before which a request could pass: on a denial the limit that holds the
# request longest (Reset >= Retry-After), on a pass the one with the fewest
# left and, among those, the one that resets last.  The expected headers
# come from rules_model.py (written from the docs, not from check.c), and
# the waits from probing that model: the same request a little later.

SEVERAL = {"domain": "two", "descriptors": [
    # one descriptor, two limits: 1 per 2 s and 2 per 6 s
    {"key": "user", "rate_limit": [{"window": "2s", "requests_per_unit": 1},
                                   {"window": "6s", "requests_per_unit": 2}]},
    # two descriptors, a limit each
    {"key": "a", "rate_limit": {"window": "2s", "requests_per_unit": 1}},
    {"key": "b", "rate_limit": {"window": "6s", "requests_per_unit": 2}},
    # three algorithms on one descriptor
    {"key": "mix", "rate_limit": [
        {"algorithm": "sliding-window", "window": "2s", "requests_per_unit": 2},
        {"algorithm": "token-bucket", "window": "6s", "requests_per_unit": 3},
        {"algorithm": "sliding-log", "window": "4s", "requests_per_unit": 2}]},
    # a queue: leaky bucket of 4, drained 2 per 2 s (one a second)
    {"key": "lb", "rate_limit": {"algorithm": "leaky-bucket", "window": "2s",
                                 "requests_per_unit": 2, "burst": 4}},
    {"key": "fw", "rate_limit": {"window": "2s", "requests_per_unit": 1}},
]}

# window of each limit, by the name the docs give it (docs/rules.md)
WINDOWS = {"two.user#1": 2000, "two.user#2": 6000, "two.a": 2000, "two.b": 6000,
           "two.mix#1": 2000, "two.mix#2": 6000, "two.mix#3": 4000, "two.lb": 2000,
           "two.fw": 2000}
HEADER_NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
                "Retry-After", "X-RateLimit-Delay-Ms")


def ceil_s(ms):
    return -(-ms // 1000)


def tighter_status(a, b):
    """docs/http.md: of two statuses of one limit, the member shows a denial
    before a pass, the longer hold between denials, the fewer left (then
    the later reset) between passes -- the overall answer's order."""
    ao, bo = a[0] == b"OVER_LIMIT", b[0] == b"OVER_LIMIT"
    if ao != bo:
        return ao
    if ao:
        return M._holds_longer(a[1:], b[1:])
    return M._tightness(a[1:]) < M._tightness(b[1:])


def model_headers(reply):
    """The headers docs/http.md promises for an RL.CHECK reply (the model's):
    (RateLimit-Policy members, RateLimit members, {name: value or None})."""
    six, sts = reply[:6], reply[6:]
    members = {}  # name -> the status shown: one member per limit, the most restrictive
    for s in sts:
        code, name, limit = s[0], s[1], s[2]
        if name is None or code in (b"NO_RULE", b"UNLIMITED") or (code == b"OK" and limit == 0):
            continue
        name = name.decode()
        if name not in members or tighter_status(s, members[name]):
            members[name] = s
    pol, now = [], []
    for name, (code, _, limit, rem, _retry, reset) in members.items():  # first-seen order
        pol.append((name, {"q": limit, "w": max(1, ceil_s(WINDOWS[name]))}))
        now.append((name, {"r": rem, "t": ceil_s(reset)}))
    h = dict.fromkeys(HEADER_NAMES)
    if pol or not six[0]:
        h["X-RateLimit-Limit"] = str(six[1])
        h["X-RateLimit-Remaining"] = str(six[2])
        h["X-RateLimit-Reset"] = str(ceil_s(six[4]))
    if not six[0] and six[3] >= 0:
        h["Retry-After"] = str(max(1, ceil_s(six[3])))
    if six[0] and six[5] > 0:
        h["X-RateLimit-Delay-Ms"] = str(six[5])
    return pol, now, h


def model_wait(model, descs, t, cost):
    """The smallest d >= 0 such that the same request at t + d passes, by the
    model (a copy: the model itself is left as it is); -1 if never within
    2^40 ms.  Waiting never hurts (no algorithm of SPEC section 2 counts
    against a caller who waits), so the passing delays are an interval."""
    def passes(d):
        return copy.deepcopy(model).check("two", cost, t + d, descs)[0] == 1
    if passes(0):
        return 0
    hi = 1
    while not passes(hi):
        hi *= 2
        if hi > 1 << 40:
            return -1
    lo = hi // 2  # fails at lo (or lo = 0), passes at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


class TestHeadersOfSeveralLimits(ServerTestCase):
    HTTP = True

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-http-several-")
        cls.rules = os.path.join(cls.dir, "two.yaml")
        with open(cls.rules, "w") as f:
            json.dump(SEVERAL, f)  # JSON is YAML (flow style)
        cls.SERVER_ARGS = ("--rules", cls.rules)
        super().setUpClass()

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def check(self, descs, at, cost=1):
        """POST /v1/check in domain two at BASE + at; descs: [[(k, v), ...], ...].
        Returns (status, headers, body)."""
        body = {"domain": "two", "at": BASE + at, "cost": cost,
                "descriptors": [[{"key": k, "value": v} for k, v in one] for one in descs]}
        self.conn.request("POST", "/v1/check", body=json.dumps(body).encode())
        r = self.conn.getresponse()
        raw = r.read()
        return r.status, {k: v for k, v in r.getheaders()}, json.loads(raw)

    def trio(self, h):
        return tuple(h.get(k) for k in ("X-RateLimit-Limit", "X-RateLimit-Remaining",
                                         "X-RateLimit-Reset", "Retry-After"))

    def test_one_descriptor_two_limits_tells_the_longer_wait(self):
        """1 per 2 s and 2 per 6 s on one descriptor (windows from BASE)."""
        bob = [[("user", "bob")]]
        status, h, _ = self.check(bob, at=0)
        # the 2 s window is spent, the 6 s one has 1 left: back in 2 s
        self.assertEqual((status,) + self.trio(h), (200, "1", "0", "2", None))
        status, h, _ = self.check(bob, at=2000)
        # both spent: the next request passes when the 6 s window ends, in 4 s
        self.assertEqual((status,) + self.trio(h), (200, "2", "0", "4", None))
        self.assertEqual(parse_list(h["RateLimit"]), [("two.user#2", {"r": 0, "t": 4})])
        self.assertEqual(parse_list(h["RateLimit-Policy"]), [("two.user#2", {"q": 2, "w": 6})])
        status, h, _ = self.check(bob, at=3000)
        self.assertEqual((status,) + self.trio(h), (429, "2", "0", "3", "3"))
        self.assertEqual(parse_list(h["RateLimit"]), [("two.user#2", {"r": 0, "t": 3})])
        self.assertEqual(self.check(bob, at=5999)[0], 429)
        self.assertEqual(self.check(bob, at=6000)[0], 200)

    def test_two_descriptors_tell_the_longer_wait(self):
        ab = [[("a", "x")], [("b", "y")]]
        status, h, _ = self.check(ab, at=0)
        self.assertEqual((status,) + self.trio(h), (200, "1", "0", "2", None))
        status, h, _ = self.check(ab, at=2000)
        self.assertEqual((status,) + self.trio(h), (200, "2", "0", "4", None))
        self.assertEqual(parse_list(h["RateLimit"]),
                         [("two.a", {"r": 0, "t": 2}), ("two.b", {"r": 0, "t": 4})])
        status, h, _ = self.check(ab, at=3000)
        self.assertEqual((status,) + self.trio(h), (429, "2", "0", "3", "3"))
        self.assertEqual(parse_list(h["RateLimit"]),
                         [("two.a", {"r": 0, "t": 1}), ("two.b", {"r": 0, "t": 3})])

    def test_leaky_bucket_delay_is_a_header_in_ms(self):
        """SPEC section 2: delay = ceil(level * W / L) ms, here level * 1000."""
        got = []
        for at in (10000, 10001, 10001, 10001, 10001):
            status, h, body = self.check([[("lb", "q")]], at=at)
            got.append((status, h.get("X-RateLimit-Delay-Ms"), body["delay_ms"]))
        self.assertEqual(got, [(200, None, 0), (200, "999", 999), (200, "1999", 1999),
                               (200, "2999", 2999), (429, None, 0)])
        # beside a fixed window with less left: the window's numbers, the queue's delay
        status, h, body = self.check([[("lb", "r")], [("fw", "r")]], at=10000)
        self.assertEqual((status, h.get("X-RateLimit-Delay-Ms")), (200, None))
        status, h, body = self.check([[("lb", "r")]], at=10000)
        self.assertEqual((status, h.get("X-RateLimit-Delay-Ms")), (200, "1000"))
        status, h, body = self.check([[("lb", "r")], [("fw", "s")]], at=10000)
        self.assertEqual((status,) + self.trio(h) + (h.get("X-RateLimit-Delay-Ms"),),
                         (200, "1", "0", "2", None, "2000"))
        self.assertEqual(body["delay_ms"], 2000)

    def test_headers_follow_the_model(self):
        """A seeded sequence over every limit but the queue: each answer's
        headers are the model's, a denial's Retry-After is the model's wait
        and X-RateLimit-Reset is not shorter, a pass with nothing left names
        a time at which the next request passes, and the X-RateLimit trio is
        one of the RateLimit members."""
        model = M.RulesModel([{"domain": "two", "descriptors": [
            x for x in SEVERAL["descriptors"] if x["key"] not in ("lb", "fw")]}])
        rng = random.Random(20261128)
        singles = [[("user", "m0")], [("user", "m1")], [("a", "m")], [("b", "m")],
                   [("mix", "m0")], [("mix", "m1")]]
        t = 86400000  # a multiple of every window; keys of its own
        seen = set()
        for i in range(300):
            t += rng.choice((0, 0, 1, 250, 400, 999, 1000, 1500, 2000, 3001))
            descs = rng.sample(singles, rng.choice((1, 1, 2, 2, 3)))
            cost = rng.choice((1, 1, 1, 2))
            status, h, body = self.check(descs, at=t, cost=cost)
            reply = model.check("two", cost, BASE + t, descs)
            pol, now, want = model_headers(reply)
            what = "request %d at %d: %r cost %d -> %r" % (i, t, descs, cost, reply)
            self.assertEqual(status, 200 if reply[0] else 429, what)
            self.assertEqual({k: h.get(k) for k in HEADER_NAMES}, want, what)
            self.assertEqual(parse_list(h["RateLimit-Policy"]), pol, what)
            self.assertEqual(parse_list(h["RateLimit"]), now, what)
            limit, rem, reset = (int(h[k]) for k in ("X-RateLimit-Limit",
                                                     "X-RateLimit-Remaining",
                                                     "X-RateLimit-Reset"))
            # one limit: a member with these very numbers
            self.assertIn((limit, rem, reset),
                          [(p[1]["q"], n[1]["r"], n[1]["t"]) for p, n in zip(pol, now)], what)
            if not reply[0] and reply[3] >= 0:
                wait = model_wait(model, descs, BASE + t, cost)
                self.assertEqual(int(h["Retry-After"]), max(1, ceil_s(wait)), what)
                self.assertGreaterEqual(reset, int(h["Retry-After"]), what)
                seen.add("denied")
                if len(descs) > 1 or descs[0][0][0] in ("user", "mix"):
                    seen.add("denied, several limits")
            elif reply[0] and rem == 0:
                # the next request (cost 1) passes once X-RateLimit-Reset is over
                wait = model_wait(model, descs, BASE + t, 1)
                self.assertLessEqual(wait, reset * 1000, what)
                seen.add("passed, nothing left")
                if reset * 1000 - 1000 < wait:
                    seen.add("passed, Reset is the next request's wait")
        self.assertEqual(seen, {"denied", "denied, several limits", "passed, nothing left",
                                "passed, Reset is the next request's wait"})


# Forward-auth (and gRPC, test_grpc.py) decide at the server's clock: token
# buckets of one token make the first answer exact whenever it comes (a full
# bucket, one request: back to full in exactly W / L).
FAUTH = {"domain": "edge", "descriptors": [
    {"key": "user", "value": "one*", "rate_limit": [
        {"algorithm": "token-bucket", "window": "1h", "requests_per_unit": 1},
        {"algorithm": "token-bucket", "window": "3h", "requests_per_unit": 1}]},
    {"key": "user", "value": "two*",
     "rate_limit": {"algorithm": "token-bucket", "window": "3h", "requests_per_unit": 1}},
    {"key": "path", "value": "/two",
     "rate_limit": {"algorithm": "token-bucket", "window": "1h", "requests_per_unit": 1}},
    {"key": "user", "value": "lb*", "rate_limit": {"algorithm": "leaky-bucket", "window": "1h",
                                                   "requests_per_unit": 1, "burst": 3}},
]}


class TestForwardAuthSeveralLimits(ServerTestCase):
    HTTP = True
    TRUST = False

    @classmethod
    def setUpClass(cls):
        cls.class_dir("sluice-http-fauth-several-")
        cls.rules = os.path.join(cls.dir, "edge.yaml")
        with open(cls.rules, "w") as f:
            json.dump(FAUTH, f)
        cls.SERVER_ARGS = ("--rules", cls.rules, "--user-header", "X-User")
        super().setUpClass()

    def setUp(self):
        self.conn = self.srv.http_conn()
        self.addCleanup(self.conn.close)

    def auth(self, path, user):
        """GET /v1/auth/edge<path> as user; returns (status, headers)."""
        self.conn.request("GET", "/v1/auth/edge" + path, headers={"X-User": user})
        r = self.conn.getresponse()
        self.assertEqual(r.read(), b"")
        return r.status, {k: v for k, v in r.getheaders()}

    def trio(self, h):
        return tuple(h.get(k) for k in ("X-RateLimit-Limit", "X-RateLimit-Remaining",
                                         "X-RateLimit-Reset", "Retry-After",
                                         "X-RateLimit-Delay-Ms"))

    def test_one_descriptor_two_limits(self):
        status, h = self.auth("/x", "one-a")
        # both buckets empty: the 1 h one is full in 3600 s, the 3 h one in 10800 s
        self.assertEqual((status,) + self.trio(h), (200, "1", "0", "10800", None, None))
        self.assertEqual(parse_list(h["RateLimit"]), [("edge.user_one*#2", {"r": 0, "t": 10800})])
        self.assertEqual(parse_list(h["RateLimit-Policy"]),
                         [("edge.user_one*#2", {"q": 1, "w": 10800})])
        status, h = self.auth("/x", "one-a")
        self.assertEqual(status, 429)
        # the 3 h bucket holds it: a bucket of one is full when it has its token
        self.assertEqual(h["X-RateLimit-Reset"], h["Retry-After"])
        self.assertTrue(3600 < int(h["Retry-After"]) <= 10800, h)
        self.assertEqual(parse_list(h["RateLimit"]),
                         [("edge.user_one*#2", {"r": 0, "t": int(h["Retry-After"])})])

    def test_two_descriptors(self):
        status, h = self.auth("/two", "two-a")
        self.assertEqual((status,) + self.trio(h), (200, "1", "0", "10800", None, None))
        self.assertEqual(parse_list(h["RateLimit"]), [("edge.path_/two", {"r": 0, "t": 3600}),
                                                      ("edge.user_two*", {"r": 0, "t": 10800})])

    def test_leaky_bucket_delay(self):
        start = time.monotonic()
        status, h = self.auth("/x", "lb-a")
        self.assertEqual((status,) + self.trio(h), (200, "3", "2", "3600", None, None))
        status, h = self.auth("/x", "lb-a")
        elapsed = int((time.monotonic() - start) * 1000) + 1
        # queued behind the first, drained for the ms between the two
        self.assertEqual(status, 200)
        self.assertTrue(3600000 - elapsed - 1 <= int(h["X-RateLimit-Delay-Ms"]) <= 3600000, h)
