"""envoyproxy/ratelimit's own test expectations, asked of sluiced's gRPC
front with its defaults (Envoy semantics) over python3-grpcio.

Each case is named after the peer's test it follows (test/integration,
test/config, test/service, test/limiter, test/redis, test/server and the
README's examples; tests/e2e/envoy/README.md maps them) and compares the
WHOLE RateLimitResponse with `==` against the message the peer would send:
unset and zero fields differ.  Our fixtures are in tests/e2e/envoy/ (and
tests/e2e/lyft/integration, read-only); none is a copy of the peer's.

Client schema: the stubs are built at test time from proto/ (as
test_grpc.py does) into a private descriptor pool, with what upstream's
rls.proto has and proto/ may not yet (Unit WEEK = 7, dynamic_metadata = 6)
added to that copy, so that an answer carrying them decodes into fields
compared by `==`, not into unknown bytes.

Time: the peer's duration_until_reset is {seconds: div - now % div}; each
expected message is built for every whole second from just before to just
after the call (two values at most on a quick call), and sequences that
count wait (bounded) until their window has the seconds they need left."""
# The peer's answers, asked once, against the plain build (run_e2e.py): the
# same code paths run under ASan and TSan in test_grpc.py's envoy cases,
# test_grpc_caps.py and test_grpc_hostile.py; this module's time is mostly
# its servers and its waits for a window's start.
# sluice-e2e: plain-only

import contextlib
import difflib
import os
import random
import re
import shutil
import tempfile
import time
import unittest

import harness
from harness import HOST, SLOW, Server, RedisServer

import grpc
import grpc_tools
from grpc_tools import protoc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

# seconds: how far sluiced's clock may be from this process's (expect)
CLOCK_SLACK = 0.1 * SLOW

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "envoy")
LYFT_INTEGRATION = os.path.join(HERE, "lyft", "integration")
TIMEOUT = 20 * SLOW

# ---- stubs: proto/ (plus upstream's WEEK and dynamic_metadata) in a private pool --------

STUBS = tempfile.mkdtemp(prefix="sluice-envoy-stubs-")


def _build_pool():
    src = os.path.join(STUBS, "src")
    shutil.copytree(os.path.join(harness.ROOT, "proto"), src)
    rls = os.path.join(src, "envoy", "service", "ratelimit", "v3", "rls.proto")
    with open(rls) as f:
        text = f.read()
    if not re.search(r"\bWEEK\s*=\s*7", text):
        text = re.sub(r"(YEAR\s*=\s*6;)", r"\1\n      WEEK = 7;", text, count=1)
    if "dynamic_metadata" not in text:
        text = text.replace('import "google/protobuf/duration.proto";',
                            'import "google/protobuf/duration.proto";\n'
                            'import "google/protobuf/struct.proto";', 1)
        text = re.sub(r"(repeated\s+envoy\.config\.core\.v3\.HeaderValue\s+request_headers_to_add\s*=\s*4;)",
                      r"\1\n  bytes raw_body = 5;\n  google.protobuf.Struct dynamic_metadata = 6;",
                      text, count=1)
    with open(rls, "w") as f:
        f.write(text)
    out = os.path.join(STUBS, "set.pb")
    inc = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", "-I" + inc, "-I" + src, "--include_imports",
                      "--descriptor_set_out=" + out,
                      "envoy/service/ratelimit/v3/rls.proto", "grpc/health/v1/health.proto"])
    if rc != 0:
        raise RuntimeError("grpc_tools.protoc failed (%d)" % rc)
    fds = descriptor_pb2.FileDescriptorSet()
    with open(out, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        return factory.GetPrototype(pool.FindMessageTypeByName(name))
    return cls


_cls = _build_pool()
shutil.rmtree(STUBS, True)
Request = _cls("envoy.service.ratelimit.v3.RateLimitRequest")
R = _cls("envoy.service.ratelimit.v3.RateLimitResponse")
Status = _cls("envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus")
Limit = _cls("envoy.service.ratelimit.v3.RateLimitResponse.RateLimit")
Header = _cls("envoy.config.core.v3.HeaderValue")
HealthReq = _cls("grpc.health.v1.HealthCheckRequest")
HealthResp = _cls("grpc.health.v1.HealthCheckResponse")

OK, OVER = 1, 2
SECOND, MINUTE, HOUR, DAY, MONTH, YEAR, WEEK = 1, 2, 3, 4, 5, 6, 7
DIV = {SECOND: 1, MINUTE: 60, HOUR: 3600, DAY: 86400, WEEK: 7 * 86400,
       MONTH: 30 * 86400, YEAR: 365 * 86400}
U32 = 2 ** 32 - 1
SERVING = 1
RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def req(domain, *descs, hits=None, dhits=None, overrides=None):
    """descs: lists of (key, value); hits: the request's hits_addend; dhits:
    each descriptor's own hits_addend (None: unset); overrides: each
    descriptor's (requests_per_unit, unit) or None."""
    r = Request(domain=domain)
    if hits is not None:
        r.hits_addend = hits
    for i, d in enumerate(descs):
        x = r.descriptors.add()
        for k, v in d:
            e = x.entries.add()
            e.key, e.value = k, v
        if dhits is not None and dhits[i] is not None:
            x.hits_addend.value = dhits[i]
        if overrides is not None and overrides[i] is not None:
            x.limit.requests_per_unit, x.limit.unit = overrides[i]
    return r


def st(code, rpu=None, unit=None, remaining=0, name=""):
    """A DescriptorStatus builder: a function of the time (whole seconds)."""
    def build(now):
        s = Status(code=code, limit_remaining=remaining)
        if rpu is not None:
            s.current_limit.SetInParent()
            s.current_limit.requests_per_unit = rpu
            s.current_limit.unit = unit
            s.current_limit.name = name
            s.duration_until_reset.SetInParent()
            s.duration_until_reset.seconds = DIV[unit] - now % DIV[unit]
        return s
    return build


NONE = st(OK)                      # no limit: OK, no current_limit, 0
UNLIMITED = st(OK, remaining=U32)  # unlimited: OK, no current_limit, 2^32-1


def resp(overall, *statuses, headers=None, metadata=None):
    """headers: a function now -> [(key, value)]; metadata: a function
    filling response.dynamic_metadata (a Struct)."""
    def build(now):
        r = R(overall_code=overall)
        for s in statuses:
            r.statuses.add().CopyFrom(s(now))
        for k, v in (headers(now) if headers else []):
            h = r.response_headers_to_add.add()
            h.key, h.value = k, v
        if metadata is not None:
            r.dynamic_metadata.SetInParent()
            metadata(r.dynamic_metadata)
        return r
    return build


def reset_header(unit, names=("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"),
                 limit=None, remaining=None):
    def h(now):
        return [(names[0], str(limit)), (names[1], str(remaining)),
                (names[2], str(DIV[unit] - now % DIV[unit]))]
    return h


def one_line(m):
    return "{%s}" % text_format.MessageToString(m, as_one_line=True)


def diff(want, got):
    """The lines that differ between two messages' text forms, on one line:
    `-` what the peer sends, `+` what came."""
    a = text_format.MessageToString(want).splitlines()
    b = text_format.MessageToString(got).splitlines()
    out = [l for l in difflib.unified_diff(a, b, lineterm="", n=0)
           if l[:1] in "-+" and not l.startswith(("---", "+++"))]
    return "; ".join(re.sub(r"\s+", " ", l) for l in out)


@contextlib.contextmanager
def environment(**kw):
    saved = {k: os.environ.get(k) for k in kw}
    os.environ.update(kw)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class EnvoyCase(unittest.TestCase):
    """A test with servers of its own: serve(rules, *flags, env={}) starts
    sluiced with --grpc-port any (stopped by PID at cleanup) and returns a
    client."""

    BACKEND = None  # a RedisServer class attribute for the Redis runs

    def serve(self, rules, *flags, env=None, name=None):
        args = []
        if rules is not None:
            args += ["--rules", rules]
        if self.BACKEND is not None:
            args += ["--backend", self.BACKEND.url()]
        srv = Server(*(args + list(flags)), grpc=True, name=name or self.id().split(".")[-1])
        with environment(**(env or {})):
            srv.start()
        self.addCleanup(srv.cleanup)
        ch = grpc.insecure_channel("%s:%d" % (HOST, srv.grpc_port))
        self.addCleanup(ch.close)
        self.srv = srv
        self.rpc = ch.unary_unary(RLS, request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=R.FromString)
        self.health = ch.unary_unary("/grpc.health.v1.Health/Check",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=HealthResp.FromString)
        return self.rpc

    def call(self, request):
        try:
            return self.rpc(request, timeout=TIMEOUT)
        except grpc.RpcError as e:
            self.fail("expected an answer, got %s %r" % (e.code(), e.details()))

    def expect(self, request, build, what=""):
        """Calls and asserts the answer equals build(s) for a whole second s
        from just before to just after the call, CLOCK_SLACK either side:
        sluiced reads its clock once per loop turn, from the monotonic clock
        and the wall clock at its start, so its second may differ from
        this process's near a second's edge."""
        t0 = int(time.time() - CLOCK_SLACK)
        got = self.call(request)
        t1 = int(time.time() + CLOCK_SLACK)
        wants = [build(s) for s in range(t0, t1 + 1)]
        if got not in wants:
            self.fail("%s%s\nexpected %s\n     got %s" % (what + ": " if what else "",
                                                         diff(wants[-1], got),
                                                         one_line(wants[-1]), one_line(got)))
        return got

    def expect_error(self, request, code, details):
        with self.assertRaises(grpc.RpcError) as cm:
            self.rpc(request, timeout=TIMEOUT)
        self.assertEqual((cm.exception.code(), cm.exception.details()), (code, details))

    def charge(self, domain, entries, n):
        """Puts n hits on one descriptor's counter (the answer is not the
        point here; the call after it is)."""
        self.call(req(domain, entries, hits=n))


def uniq():
    return str(random.getrandbits(48))


# ---- test/integration/integration_test.go ----------------------------------------------

class TestIntegration(EnvoyCase):
    """testBasicBaseConfig, testShareThreshold: the peer's integration
    domains (basic, another, share-threshold-test), one fresh server each."""

    FLAGS = ()
    STOP = False
    RULES = LYFT_INTEGRATION
    SUFFIX = ""  # "_local": the keys of the peer's local-cache runs (getCacheKey)

    def setUp(self):
        self.serve(self.RULES, *self.FLAGS)

    def k(self, key):
        return key + self.SUFFIX

    def test_TestBasicConfig_unknown_domain(self):
        """integration_test.go testBasicBaseConfig: domain foo, hello=world."""
        self.expect(req("foo", [(self.k("hello"), "world")], hits=1), resp(OK, NONE))

    def test_TestBasicConfig_first_limit(self):
        """integration_test.go testBasicBaseConfig: basic key1=foo, 50/second, 49 left."""
        self.expect(req("basic", [(self.k("key1"), "foo")], hits=1),
                    resp(OK, st(OK, 50, SECOND, 49)))

    def test_TestBasicConfig_over_limit_one_key(self):
        """integration_test.go testBasicBaseConfig: 25 hits on another key2=random
        (20/minute): 19..0 left, then OVER_LIMIT with 0 left."""
        v = uniq()
        harness.wait_window_room(60, 5)  # 25 calls at most: well within 5 s
        for i in range(25):
            code, left = (OVER, 0) if i >= 20 else (OK, 20 - (i + 1))
            self.expect(req("another", [(self.k("key2"), v)], hits=1),
                        resp(code, st(code, 20, MINUTE, left)), "hit %d" % (i + 1))

    def test_TestBasicConfig_over_limit_two_keys(self):
        """integration_test.go testBasicBaseConfig: 15 hits on key2 (20/minute)
        and key3 (10/hour) of one request: key3 denies from the 11th; key2
        keeps counting (or, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
        stays at 10 left)."""
        v = uniq()
        harness.wait_window_room(60, 5)  # 25 calls at most: well within 5 s
        for i in range(15):
            code, left1, left2 = OK, 20 - (i + 1), 10 - (i + 1)
            if i >= 10:
                code, left2 = OVER, 0
                if self.STOP:
                    left1 = 10
            self.expect(req("another", [(self.k("key2"), v)], [(self.k("key3"), v)], hits=1),
                        resp(code, st(OK, 20, MINUTE, left1), st(code, 10, HOUR, left2)),
                        "hit %d" % (i + 1))

    def test_TestBasicConfig_duration_until_reset(self):
        """integration_test.go testBasicBaseConfig: key4=durTest (20/day) twice,
        2 s apart: the reset counts down in whole seconds."""
        harness.wait_window_room(86400, 5)  # 19 then 18 left: both calls in one day
        a = self.expect(req("another", [(self.k("key4"), "durTest")], hits=1),
                        resp(OK, st(OK, 20, DAY, 19)))
        time.sleep(2)
        b = self.expect(req("another", [(self.k("key4"), "durTest")], hits=1),
                        resp(OK, st(OK, 20, DAY, 18)))
        if b.statuses[0].duration_until_reset.seconds < 86400 - 3 * SLOW:  # not a new day
            self.assertLess(b.statuses[0].duration_until_reset.seconds,
                            a.statuses[0].duration_until_reset.seconds)

    def test_TestShareThreshold(self):
        """integration_test.go testShareThreshold: files/* shares one 10/hour
        counter (files/b.csv after 10 of files/a.pdf is OVER_LIMIT);
        files_no_share/* counts each value apart (9 left each)."""
        harness.wait_window_room(3600, 30)
        for i in range(10):
            self.expect(req("share-threshold-test", [("files", "files/a.pdf")], hits=1),
                        resp(OK, st(OK, 10, HOUR, 9 - i)), "hit %d" % (i + 1))
        self.expect(req("share-threshold-test", [("files", "files/b.csv")], hits=1),
                    resp(OVER, st(OVER, 10, HOUR, 0)))
        base = uniq()
        for i in range(10):
            self.expect(req("share-threshold-test",
                            [("files_no_share", "files_no_share/%s-%d" % (base, i))], hits=1),
                        resp(OK, st(OK, 10, HOUR, 9)))


class TestIntegrationStopCacheKeyIncrement(TestIntegration):
    """testBasicBaseConfig ...WithstopCacheKeyIncrementWhenOverlimitConfig."""
    FLAGS = ("--stop-cache-key-increment-when-overlimit=yes",)
    STOP = True


class TestIntegrationRedis(TestIntegration):
    """The same on the Redis backend (the peer's tests run on Redis)."""

    @classmethod
    def setUpClass(cls):
        cls.BACKEND = RedisServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.BACKEND.cleanup()


class TestIntegrationRedisStopCacheKeyIncrement(TestIntegrationRedis):
    FLAGS = ("--stop-cache-key-increment-when-overlimit=yes",)
    STOP = True


class TestIntegrationLocalCache(TestIntegration):
    """The peer's WithLocalCache runs of testBasicBaseConfig: the same
    answers, asked with its "_local" keys (getCacheKey) of our own copy of
    its integration domains; LOCAL_CACHE_SIZE_IN_BYTES itself answers
    nothing differently (a key known over is OVER_LIMIT with 0 left)."""

    RULES = os.path.join(FIX, "integration_local")
    SUFFIX = "_local"
    test_TestShareThreshold = None  # the peer runs it without a local cache only


class TestIntegrationLocalCacheStopCacheKeyIncrement(TestIntegrationLocalCache):
    """...WithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig: only
    the case the setting changes."""

    FLAGS = ("--stop-cache-key-increment-when-overlimit=yes",)
    STOP = True
    test_TestBasicConfig_unknown_domain = None
    test_TestBasicConfig_first_limit = None
    test_TestBasicConfig_over_limit_one_key = None
    test_TestBasicConfig_duration_until_reset = None


class TestIntegrationStopCacheKeyIncrementEnv(EnvoyCase):
    """The peer's setting as an environment variable."""

    def test_TestBasicConfig_over_limit_two_keys_env(self):
        """integration_test.go testBasicBaseConfig (stopCacheKeyIncrement
        variant) with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true in the
        environment."""
        self.serve(LYFT_INTEGRATION, env={"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"})
        v = uniq()
        harness.wait_window_room(60, 5)  # 25 calls at most: well within 5 s
        for i in range(12):
            code, left1, left2 = OK, 20 - (i + 1), 10 - (i + 1)
            if i >= 10:
                code, left1, left2 = OVER, 10, 0
            self.expect(req("another", [("key2", v)], [("key3", v)], hits=1),
                        resp(code, st(OK, 20, MINUTE, left1), st(code, 10, HOUR, left2)),
                        "hit %d" % (i + 1))


class TestBasicReloadConfig(EnvoyCase):
    def test_TestBasicReloadConfig(self):
        """integration_test.go testConfigReload: domain reload is unknown (OK,
        no limit); a reload.yaml written into the watched rules folder makes
        key1 50/second (49 left); removing it reloads again (unknown)."""
        d = tempfile.mkdtemp(prefix="sluice-envoy-reload-")
        self.addCleanup(shutil.rmtree, d, True)
        for f in os.listdir(LYFT_INTEGRATION):
            shutil.copy(os.path.join(LYFT_INTEGRATION, f), d)
        self.serve(d)
        self.expect(req("reload", [("block", "foo")], hits=1), resp(OK, NONE))
        shutil.copy(os.path.join(FIX, "reload", "reload.yaml"), os.path.join(d, "reload.yaml"))
        # the new domain shows in the answer once loaded (bounded); zero-cost
        # peeks (hits_addend 0 on the descriptor) count nothing meanwhile
        self.wait_answer(lambda r: r.statuses[0].HasField("current_limit"),
                         req("reload", [("one_per_minute", "x")], dhits=[0]), "the reload")
        self.expect(req("reload", [("key1", "foo")], hits=1), resp(OK, st(OK, 50, SECOND, 49)))
        self.expect(req("reload", [("block", "foo")], hits=1), resp(OVER, st(OVER, 0, SECOND, 0)))
        os.unlink(os.path.join(d, "reload.yaml"))
        self.wait_answer(lambda r: not r.statuses[0].HasField("current_limit"),
                         req("reload", [("one_per_minute", "x")], dhits=[0]), "the removal")
        self.expect(req("reload", [("key1", "foo")], hits=1), resp(OK, NONE))

    def wait_answer(self, pred, request, what):
        until = time.monotonic() + 30 * SLOW
        while True:
            got = self.call(request)
            if pred(got):
                return
            if time.monotonic() > until:
                self.fail("%s never showed in the answers: %s" % (what, one_line(got)))
            time.sleep(0.1)


# ---- test/config/config_test.go, as ShouldRateLimit shows it ----------------------------

def config_case(fixture, domain, entries, build, peer, hits=1, overrides=None, flags=()):
    def test(self):
        self.serve(os.path.join(FIX, fixture), *flags)
        self.expect(req(domain, entries, hits=hits,
                        overrides=[overrides] if overrides else None), build)
    test.__doc__ = "config_test.go %s: %s %r -> the peer's answer." % (peer, domain, entries)
    return test


BASIC = [
    ("foo_domain_empty_descriptor", "foo_domain", [], resp(OK, NONE)),
    ("empty_descriptor", "test-domain", [], resp(OK, NONE)),
    ("key1_something", "test-domain", [("key1", "something")], resp(OK, NONE)),
    ("key1_value1", "test-domain", [("key1", "value1")], resp(OK, NONE)),
    ("key2_value2_subkey", "test-domain", [("key2", "value2"), ("subkey", "subvalue")],
     resp(OK, NONE)),
    ("key5_value5_subkey5", "test-domain", [("key5", "value5"), ("subkey5", "subvalue")],
     resp(OK, NONE)),
    ("subkey1_default", "test-domain", [("key1", "value1"), ("subkey1", "something")],
     resp(OK, st(OK, 5, SECOND, 4))),
    ("subkey1_subvalue1", "test-domain", [("key1", "value1"), ("subkey1", "subvalue1")],
     resp(OK, st(OK, 10, SECOND, 9))),
    ("key2_something", "test-domain", [("key2", "something")], resp(OK, st(OK, 20, MINUTE, 19))),
    ("key2_value2", "test-domain", [("key2", "value2")], resp(OK, st(OK, 30, MINUTE, 29))),
    ("key2_value3_whitelisted", "test-domain", [("key2", "value3")], resp(OK, NONE)),
    ("key3_no_name", "test-domain", [("key3", "foo")], resp(OK, st(OK, 1, HOUR, 0))),
    ("key4_named", "test-domain", [("key4", "foo")],
     resp(OK, st(OK, 1, DAY, 0, name="key4_rate_limit"))),
    ("key5_subkey5", "test-domain", [("key5", "value5"), ("subkey5", "subvalue5")],
     resp(OK, st(OK, 25, DAY, 24))),
    ("key6_unlimited", "test-domain", [("key6", "foo")], resp(OK, UNLIMITED)),
    ("key7_detailed_metric", "test-domain", [("key7", "unspecified_value")],
     resp(OK, st(OK, 70, MINUTE, 69))),
    ("key3_over", "test-domain", [("key3", "bar")], resp(OVER, st(OVER, 1, HOUR, 0)), 2),
    ("key7_another_value", "test-domain", [("key7", "another_value")],
     resp(OK, st(OK, 70, MINUTE, 69))),
]

WILDCARD = [
    ("noVal", [("noVal", "foo1")], st(OK, 20, MINUTE, 19)),
    ("noVal_foo2", [("noVal", "foo2")], st(OK, 20, MINUTE, 19)),
    ("wild_foo1", [("wild", "foo1")], st(OK, 20, MINUTE, 19)),
    ("nested_wild", [("nestedWild", "val1"), ("wild", "goo2")], st(OK, 20, MINUTE, 19)),
    ("no_match", [("wild", "bar")], NONE),
    ("non_wildcard_not_eager", [("noWild", "foo1")], NONE),
    ("middle", [("midWild", "bar123b")], st(OK, 20, MINUTE, 19)),
    ("middle_barab", [("midWild", "barab")], st(OK, 20, MINUTE, 19)),
    ("middle_empty", [("midWild", "barb")], st(OK, 20, MINUTE, 19)),
    ("middle_no_suffix", [("midWild", "bara")], NONE),
    ("middle_no_prefix", [("midWild", "xbarb")], NONE),
    ("multi", [("multiWild", "foo123bar456baz")], st(OK, 10, MINUTE, 9)),
    ("multi_tight", [("multiWild", "foobarbaz")], st(OK, 10, MINUTE, 9)),
    ("multi_missing_middle", [("multiWild", "foo123baz")], NONE),
    ("multi_missing_prefix", [("multiWild", "bar456baz")], NONE),
]

UNITS = [("SECOND", "second", 10, SECOND), ("MINUTE", "minute", 20, MINUTE),
         ("HOUR", "hour", 30, HOUR), ("DAY", "day", 40, DAY), ("WEEK", "week", 70, WEEK),
         ("MONTH", "month", 80, MONTH), ("YEAR", "year", 90, YEAR)]


class TestConfig(EnvoyCase):
    """test/config/config_test.go: what GetLimit returns, as the answer shows it."""


for _row in BASIC:
    _name, _dom, _entries, _build = _row[:4]
    setattr(TestConfig, "test_TestBasicConfig_" + _name,
            config_case("basic_config", _dom, _entries, _build, "TestBasicConfig",
                        hits=_row[4] if len(_row) > 4 else 1))
for _name, _entries, _s in WILDCARD:
    setattr(TestConfig, "test_TestWildcardConfig_" + _name,
            config_case("wildcard", "test-domain", _entries, resp(OK, _s), "TestWildcardConfig"))
for _name, _key, _rpu, _unit in UNITS:
    setattr(TestConfig, "test_TestBasicConfig_unit_" + _name,
            config_case("units", "test-domain", [(_key, "x")],
                        resp(OK, st(OK, _rpu, _unit, _rpu - 1)), "TestBasicConfig (every unit)"))

setattr(TestConfig, "test_TestConfigLimitOverride_unknown_domain",
        config_case("basic_config", "foo_domain", [("key1", "value1")], resp(OK, NONE),
                    "TestConfigLimitOverride", overrides=(10, DAY)))
setattr(TestConfig, "test_TestConfigLimitOverride_no_rule_matches",
        config_case("basic_config", "test-domain", [("nothing", "here")],
                    resp(OK, st(OK, 10, DAY, 9)), "TestConfigLimitOverride", overrides=(10, DAY)))


class TestConfigCounting(EnvoyCase):
    """Config cases that take several calls on one server."""

    def test_TestConfigLimitOverride(self):
        """config_test.go TestConfigLimitOverride: an override 10/DAY, then
        42/HOUR on the same entries, then another value.  Each unit counts
        apart, at every hour of the day: the peer's Redis key (entries and
        window start) is shared by the day's and the hour's windows in the
        first hour of a day, sluiced's (entries and unit) is not -- a
        difference kept on purpose (docs/migrating-from-envoy-ratelimit.md);
        the case asked 40 then and so failed from 00:00 to 01:00 UTC."""
        self.serve(os.path.join(FIX, "basic_config"))
        harness.wait_window_room(3600, 20)
        e = [("key1", "value1"), ("subkey1", "something")]
        self.expect(req("test-domain", e, hits=1, overrides=[(10, DAY)]),
                    resp(OK, st(OK, 10, DAY, 9)))
        self.expect(req("test-domain", e, hits=1, overrides=[(42, HOUR)]),
                    resp(OK, st(OK, 42, HOUR, 41)))
        self.expect(req("test-domain", [("key1", "value1"), ("subkey1", "something_else")],
                        hits=1, overrides=[(42, HOUR)]), resp(OK, st(OK, 42, HOUR, 41)))

    def test_TestConfigLimitOverride_no_entries(self):
        """config_impl.go GetLimit, as TestConfigLimitOverride exercises it:
        in a domain of the rules an override is returned before the entries
        are looked at, so a descriptor with none is limited by it and
        counted (the peer's cache key is then "test-domain_<window>"); in
        an unknown domain (TestConfigLimitOverride's first row) no limit."""
        self.serve(os.path.join(FIX, "basic_config"))
        harness.wait_window_room(60, 5)
        self.expect(req("test-domain", [], overrides=[(5, MINUTE)]), resp(OK, st(OK, 5, MINUTE, 4)))
        self.expect(req("test-domain", [], overrides=[(5, MINUTE)]), resp(OK, st(OK, 5, MINUTE, 3)))
        self.expect(req("foo_domain", [], overrides=[(5, MINUTE)]), resp(OK, NONE))

    def test_TestDomainMerge(self):
        """config_test.go TestDomainMerge: with --merge-domains (the peer's
        MERGE_DOMAIN_CONFIG) both files' limits of test-domain apply; an
        empty descriptor, or an unknown domain, has no limit."""
        self.serve(os.path.join(FIX, "merge"), "--merge-domains")
        self.expect(req("foo_domain", []), resp(OK, NONE))
        self.expect(req("test-domain", []), resp(OK, NONE))
        self.expect(req("test-domain", [("key1", "value1")]), resp(OK, st(OK, 10, MINUTE, 9)))
        self.expect(req("test-domain", [("key2", "value2")]), resp(OK, st(OK, 20, MINUTE, 19)))

    def test_TestWildcardConfig_values_count_apart(self):
        """config_test.go TestWildcardConfig: wild=foo1 and wild=foo2 match one
        rule (foo*) but, without share_threshold, count apart."""
        self.serve(os.path.join(FIX, "wildcard"))
        harness.wait_window_room(60, 10)
        self.expect(req("test-domain", [("wild", "foo1")], hits=1), resp(OK, st(OK, 20, MINUTE, 19)))
        self.expect(req("test-domain", [("wild", "foo2")], hits=1), resp(OK, st(OK, 20, MINUTE, 19)))
        self.expect(req("test-domain", [("wild", "foo1")], hits=1), resp(OK, st(OK, 20, MINUTE, 18)))

    def test_TestShareThreshold(self):
        """config_test.go TestShareThreshold: values matching one
        share_threshold wildcard share one counter (trailing, nested, middle
        and multiple *); an explicit value keeps its own limit."""
        self.serve(os.path.join(FIX, "share_threshold"))
        harness.wait_window_room(3600, 20)
        rows = [([("files", "files/a.pdf")], 100, 99), ([("files", "files/b.csv")], 100, 98),
                ([("nested", "parent"), ("files", "nested/x")], 200, 199),
                ([("nested", "parent"), ("files", "nested/y")], 200, 198),
                ([("file", "test1")], 50, 49), ([("file", "test2")], 100, 99),
                ([("file", "test3")], 100, 98),
                ([("midpath", "/api/foo/v1")], 100, 99), ([("midpath", "/apiv1")], 100, 98),
                ([("multiroute", "svc1ep2rpc")], 50, 49), ([("multiroute", "svcXepYrpc")], 50, 48),
                ([("unshared", "u/1")], 10, 9), ([("unshared", "u/2")], 10, 9)]
        for entries, rpu, left in rows:
            self.expect(req("test-domain", entries, hits=1), resp(OK, st(OK, rpu, HOUR, left)),
                        repr(entries))

    def test_TestShadowModeConfig(self):
        """config_test.go TestShadowModeConfig: over a shadow_mode limit the
        status is OK with 0 left; over a plain one, OVER_LIMIT."""
        self.serve(os.path.join(FIX, "shadowmode"))
        self.expect(req("test-domain", [("key1", "value1"), ("subkey1", "subvalue1")], hits=11),
                    resp(OK, st(OK, 10, SECOND, 0)))
        self.expect(req("test-domain", [("key1", "value1"), ("subkey1", "something")], hits=6),
                    resp(OVER, st(OVER, 5, SECOND, 0)))
        self.expect(req("test-domain", [("key2", "something")], hits=21),
                    resp(OK, st(OK, 20, MINUTE, 0)))
        self.expect(req("test-domain", [("key2", "value2")], hits=31),
                    resp(OVER, st(OVER, 30, MINUTE, 0)))

    def test_TestMetadata(self):
        """config_test.go TestMetadata, with RESPONSE_DYNAMIC_METADATA (the
        service's ratelimitToMetadata): domain, each descriptor's entries as
        "k=v", the passed limits' metadata."""
        self.serve(os.path.join(FIX, "metadata"), "--response-dynamic-metadata=yes")

        def md(entries, meta):
            def fill(s):
                s.fields["domain"].string_value = "test-domain"
                lv = s.fields["descriptors"].list_value
                d = lv.values.add().struct_value
                el = d.fields["entries"].list_value
                for k, v in entries:
                    el.values.add().string_value = "%s=%s" % (k, v)
                meta(s.fields["metadata"].struct_value)
            return fill

        def m1(s):
            s.fields["name"].string_value = "service_1"

        def m2(s):
            s.fields["service_with_quota"].struct_value.fields["name"].string_value = "service_2"
        e1 = [("key1", "value1"), ("subkey1", "something")]
        self.expect(req("test-domain", e1), resp(OK, st(OK, 5, SECOND, 4), metadata=md(e1, m1)))
        e2 = [("key2", "something")]
        self.expect(req("test-domain", e2), resp(OK, st(OK, 20, MINUTE, 19), metadata=md(e2, m2)))

    def test_TestMetadata_not_sent_by_default(self):
        """config_test.go TestMetadata: the peer sends dynamic_metadata only
        with RESPONSE_DYNAMIC_METADATA (default false)."""
        self.serve(os.path.join(FIX, "metadata"))
        self.expect(req("test-domain", [("key2", "something")]), resp(OK, st(OK, 20, MINUTE, 19)))


class TestReadme(EnvoyCase):
    def test_README_Example7_replaces(self):
        """README.md "Replaces", Example 7: with both rules matched, the
        replaced limit (specific_limit) is no limit at all -- no
        current_limit, nothing counted -- and the replacing one applies."""
        self.serve(os.path.join(FIX, "replaces"))
        self.expect(req("example7", [("key_1", "value_1"), ("user", "bkthomps")],
                        [("key_2", "value_2"), ("user", "bkthomps")], hits=1),
                    resp(OK, NONE, st(OK, 10, SECOND, 9)))

    def test_README_Example7_replacing_alone(self):
        """README.md Example 7: the replacing limit alone applies (10/second)."""
        self.serve(os.path.join(FIX, "replaces"))
        self.expect(req("example7", [("key_2", "value_2"), ("user", "bkthomps")], hits=1),
                    resp(OK, st(OK, 10, SECOND, 9)))

    def test_README_Example7_not_replaced_alone(self):
        """README.md Example 7: the named limit alone applies (5/second)."""
        self.serve(os.path.join(FIX, "replaces"))
        self.expect(req("example7", [("key_1", "value_1"), ("user", "bkthomps")], hits=1),
                    resp(OK, st(OK, 5, SECOND, 4, name="specific_limit")))


class SharedEnvoyCase(EnvoyCase):
    """One server for the class (RULES, FLAGS), stopped by PID in
    tearDownClass, which fails the class unless it exits cleanly: for rows
    that each ask their own entries, so that they cannot disturb each
    other's counts."""

    RULES = None
    FLAGS = ()

    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--rules", cls.RULES, *cls.FLAGS, grpc=True, name=cls.__name__)
        cls.srv.start()
        cls.ch = grpc.insecure_channel("%s:%d" % (HOST, cls.srv.grpc_port))
        cls.rpc = cls.ch.unary_unary(RLS, request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=R.FromString)

    @classmethod
    def tearDownClass(cls):
        cls.ch.close()
        harness.assert_clean_stop(cls.srv)

    def rows(self, domain, rows):
        """rows: (entries, status builder); each asked once with hits 1."""
        for entries, s in rows:
            self.expect(req(domain, entries, hits=1), resp(s(0).code, s), repr(entries))


class TestConfigGetLimit(SharedEnvoyCase):
    """config_test.go's GetLimit cases whose configurations are inline Go
    (TestDetailedMetric, TestValueToMetric_*, TestWildcardStatsBehavior):
    the peer asserts the limit found (and statistics names, which gRPC does
    not show); each limit found is a status with it, none is no limit."""

    RULES = os.path.join(FIX, "getlimit")

    def test_TestDetailedMetric(self):
        """config_test.go TestDetailedMetric: each sub-test's request finds
        its limit (detailed_metric only names statistics)."""
        self.rows("nested", [
            ([("key-1", "value-1")], st(OK, 100, MINUTE, 99)),
            ([("key-1", "value-1"), ("key-2", "value-2")], st(OK, 5, MINUTE, 4)),
            ([("key_1", "value-for-key-1")], st(OK, 500, MINUTE, 499)),
            ([("key_2", "key-2-value")], st(OK, 5000, MINUTE, 4999)),
            ([("key_2", "key-2-value"), ("key_3", "requested-key3-value")], st(OK, 5, MINUTE, 4)),
            ([("key_2", "specific-id"), ("key_3", "requested-key3-value")],
             st(OK, 100, MINUTE, 99)),
            ([("key_2", "key-2-value"), ("key_3", "other")], NONE),  # key_3 alone: no limit
        ])

    def test_TestValueToMetric(self):
        """config_test.go TestValueToMetric_UsesRuntimeValuesInStats,
        _DefaultKeyIncludesValueAtThatLevel, _MidLevelOnly, _NoFlag_Unchanged,
        _DoesNotOverrideDetailedMetric, _WithConfiguredValues, _WithWildcard,
        _WithEmptyValue, _FullKeyMatchesStatsKey: the limit each finds
        (empty values match a key-only descriptor)."""
        self.rows("vtm", [
            ([("route", "draw"), ("http_method", "GET"), ("subject_id", "123")],
             st(OK, 60, MINUTE, 59)),
            ([("route", ""), ("http_method", "GET"), ("subject_id", "123")],
             st(OK, 60, MINUTE, 59)),
            ([("route", "draw"), ("http_method", ""), ("subject_id", "123")],
             st(OK, 60, MINUTE, 59)),
            ([("route", ""), ("http_method", ""), ("subject_id", "123")], st(OK, 60, MINUTE, 59)),
            ([("user", "alice"), ("action", "readfile"), ("resource", "documents")],
             st(OK, 100, MINUTE, 99)),
            ([("user", "bob"), ("action", "readdata"), ("resource", "database")],
             st(OK, 100, MINUTE, 99)),
            ([("user", "bob"), ("action", "write"), ("resource", "database")], NONE),
        ])
        self.rows("vtm-d", [
            ([("k1", "A"), ("k2", "foo")], st(OK, 1, SECOND, 0)),
            ([("k1", "X"), ("k2", "Y"), ("k3", "Z")], st(OK, 1, SECOND, 0)),
        ])
        self.rows("vtm-configured", [
            ([("route", "api"), ("http_method", "GET"), ("subject_id", "user123")],
             st(OK, 60, MINUTE, 59)),
            ([("route", "api"), ("http_method", "POST"), ("subject_id", "user456")],
             st(OK, 30, MINUTE, 29)),
            ([("route", "api"), ("http_method", "PUT"), ("subject_id", "user456")], NONE),
            ([("plain", "api"), ("http_method", "GET"), ("subject_id", "user123")],
             st(OK, 60, MINUTE, 59)),
        ])

    def test_TestWildcardStatsBehavior(self):
        """config_test.go TestWildcardStatsBehavior: foo* and foo*bar* with no
        flag, value_to_metric, share_threshold (one counter for every value),
        both, and value_to_metric on a child."""
        harness.wait_window_room(60, 3)  # s and sv: two calls in one minute
        self.rows("wsb", [
            ([("w", "foo1")], st(OK, 20, MINUTE, 19)),
            ([("w", "foo2")], st(OK, 20, MINUTE, 19)),
            ([("v", "foo1")], st(OK, 20, MINUTE, 19)),
            ([("s", "foo1")], st(OK, 20, MINUTE, 19)),
            ([("s", "foo2")], st(OK, 20, MINUTE, 18)),
            ([("sv", "foo1")], st(OK, 20, MINUTE, 19)),
            ([("sv", "foo2")], st(OK, 20, MINUTE, 18)),
            ([("o", "foo1"), ("other", "bar"), ("limit", "X")], st(OK, 20, MINUTE, 19)),
            ([("m", "foo123bar456")], st(OK, 20, MINUTE, 19)),
            ([("m", "fooXbarY")], st(OK, 20, MINUTE, 19)),
            ([("m", "fooXbaY")], NONE),
            ([("mv", "foo123bar456")], st(OK, 20, MINUTE, 19)),
        ])


class TestShareThresholdMore(SharedEnvoyCase):
    """config_test.go TestShareThreshold's cases share_threshold/ leaves out,
    and base_limiter_test.go TestGenerateCacheKeysWithShareThreshold: which
    values share one counter (the peer's cache key writes a shared level's
    pattern, every other level's value)."""

    RULES = os.path.join(FIX, "share_more")

    def test_TestShareThreshold_more(self):
        harness.wait_window_room(3600, 20)
        self.rows("test-domain", [
            ([("files", "files/c.txt")], st(OK, 100, HOUR, 99)),
            ([("files", "top/file1.txt"), ("files", "nested/file1.txt")],
             st(OK, 300, HOUR, 299)),
            ([("files", "top/file2.pdf"), ("files", "nested/sub2.csv")],
             st(OK, 300, HOUR, 298)),
            ([("route", "api/v1"), ("method", "GET")], st(OK, 60, HOUR, 59)),
            ([("route", "api/v2"), ("method", "GET")], st(OK, 60, HOUR, 58)),
            ([("route", "api/v1"), ("method", "POST")], st(OK, 60, HOUR, 59)),
            ([("service", "svc/user"), ("endpoint", "get")], st(OK, 80, HOUR, 79)),
            ([("service", "svc/other"), ("endpoint", "get")], st(OK, 80, HOUR, 78)),
            ([("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
             st(OK, 120, HOUR, 119)),
            ([("path", "path/bar"), ("file", "file/doc1"), ("type", "pdf")],
             st(OK, 120, HOUR, 118)),
            ([("path", "path/foo"), ("file", "file/doc2"), ("type", "pdf")],
             st(OK, 120, HOUR, 119)),
            ([("user", "user/alice"), ("resource", "res/file1"), ("action", "read")],
             st(OK, 150, HOUR, 149)),
            ([("user", "user/bob"), ("resource", "res/file2"), ("action", "read")],
             st(OK, 150, HOUR, 148)),
            ([("user", "user/bob"), ("resource", "res/file2"), ("action", "write")],
             st(OK, 150, HOUR, 149)),
            ([("midpath", "/api/v1")], st(OK, 100, HOUR, 99)),
            ([("midpath", "/api-beta-v1")], st(OK, 100, HOUR, 98)),
            ([("midpath", "/apiXYZv1")], st(OK, 100, HOUR, 97)),
            ([("midpath", "/api/v2")], NONE),
            ([("multiroute", "svcAepBrpc")], st(OK, 50, HOUR, 49)),
            ([("multiroute", "svcXXXepYYYrpc")], st(OK, 50, HOUR, 48)),
            ([("multiroute", "svceprpc")], st(OK, 50, HOUR, 47)),
            ([("multiroute", "svcABCrpc")], NONE),
            ([("midroute", "/api/v2")], st(OK, 80, HOUR, 79)),
            ([("midroute", "/api-beta-v2")], st(OK, 80, HOUR, 78)),
            ([("tenant", "t1prod"), ("resource", "resAv2")], st(OK, 60, HOUR, 59)),
            ([("tenant", "t99prod"), ("resource", "resBBBv2")], st(OK, 60, HOUR, 58)),
        ])


class TestReadmeExamples(SharedEnvoyCase):
    """README.md's configuration examples 1 to 11 (readme/, our own files of
    their shapes), asked as the README describes each."""

    RULES = os.path.join(FIX, "readme")

    def test_README_Example1(self):
        self.rows("mongo_cps", [([("database", "users")], st(OK, 500, SECOND, 499)),
                                ([("database", "default")], st(OK, 500, SECOND, 499)),
                                ([("database", "other")], NONE)])

    def test_README_Example2(self):
        """Two descriptors of one request: 5 marketing messages a day to a
        number, 100 messages a day to it; each number counts apart."""
        for number in ("2061111111", "2062222222"):
            self.expect(req("messaging", [("message_type", "marketing"), ("to_number", number)],
                            [("to_number", number)], hits=1),
                        resp(OK, st(OK, 5, DAY, 4), st(OK, 100, DAY, 99)), number)

    def test_README_Example3(self):
        """Any address 10 a second; 50.0.0.5 (its own value, limit 0) is
        denied, its reset the end of the second."""
        self.rows("edge_proxy_per_ip", [([("remote_address", "50.0.0.1")], st(OK, 10, SECOND, 9)),
                                        ([("remote_address", "50.0.0.5")], st(OVER, 0, SECOND, 0))])

    def test_README_Example4(self):
        """A descriptor of two entries matches only a configuration two deep."""
        e = [("key", "value"), ("subkey", "subvalue")]
        self.rows("example4a", [(e, NONE)])
        self.rows("example4", [(e, st(OK, 300, SECOND, 299))])

    def test_README_Example5(self):
        self.rows("internal", [([("ldap", "x")], UNLIMITED),
                               ([("azure", "x")], st(OK, 100, MINUTE, 99))])

    def test_README_Example6(self):
        """user-a's limit is in shadow mode: OK with 0 left once over;
        user-b's is enforced."""
        self.expect(req("example6", [("service", "auth-service"), ("user", "user-a")], hits=11),
                    resp(OK, st(OK, 10, SECOND, 0)))
        self.expect(req("example6", [("service", "auth-service"), ("user", "user-b")], hits=21),
                    resp(OVER, st(OVER, 20, SECOND, 0)))

    def test_README_Example7_not_affected(self):
        """"the limit of the original will not be changed": after a request
        where the named limit was replaced, it was not charged (5 a second,
        4 left after one hit of its own, in that second or the next)."""
        k1 = [("key_1", "value_1"), ("user", "bkthomps")]
        k2 = [("key_2", "value_2"), ("user", "bkthomps")]
        harness.wait_window_room(1, 0.5)
        self.expect(req("example7", k1, k2, hits=1), resp(OK, NONE, st(OK, 10, SECOND, 9)),
                    "replaced")
        self.expect(req("example7", k1, hits=1),
                    resp(OK, st(OK, 5, SECOND, 4, name="specific_limit")), "not charged")

    def test_README_Example8(self):
        self.rows("example8", [([("key1", "unspecified_value")], st(OK, 10, MINUTE, 9)),
                               ([("key1", "unspecified_value2")], st(OK, 10, MINUTE, 9)),
                               ([("key1", "value1")], st(OK, 20, MINUTE, 19))])

    def test_README_Example9(self):
        self.rows("example9", [
            ([("key1", "value1")], st(OK, 20, MINUTE, 19)),
            ([("key1", "valueXYZ")], st(OK, 20, MINUTE, 19)),
            ([("path", "/api/123/action")], st(OK, 20, MINUTE, 19)),
            ([("path", "/api/user-id/action")], st(OK, 20, MINUTE, 19)),
            ([("path", "/api/123/other")], NONE),
            ([("route", "/api/v1/resource/123/action")], st(OK, 20, MINUTE, 19)),
            ([("route", "/api/v2/resource/456/action")], st(OK, 20, MINUTE, 19)),
        ])

    def test_README_Example10(self):
        self.rows("example10", [
            ([("route", "api"), ("http_method", "GET"), ("subject_id", "123")],
             st(OK, 60, MINUTE, 59)),
            ([("route", "web"), ("http_method", "POST"), ("subject_id", "456")],
             st(OK, 60, MINUTE, 59)),
        ])
        self.rows("example10_wildcard", [
            ([("user", "alice"), ("action", "readfile"), ("resource", "documents")],
             st(OK, 100, MINUTE, 99))])

    def test_README_Example11(self):
        """files/*: 5 of files/a.pdf and 5 of files/b.csv spend the shared 10,
        files/c.txt is then over; files_no_share/*: 10 of one value leave
        another its own 10."""
        harness.wait_window_room(3600, 20)
        for i, v in enumerate(["files/a.pdf"] * 5 + ["files/b.csv"] * 5):
            self.expect(req("example11", [("files", v)], hits=1),
                        resp(OK, st(OK, 10, HOUR, 9 - i)), "hit %d" % (i + 1))
        self.expect(req("example11", [("files", "files/c.txt")], hits=1),
                    resp(OVER, st(OVER, 10, HOUR, 0)))
        for i in range(10):
            self.expect(req("example11", [("files_no_share", "files_no_share/a.pdf")], hits=1),
                        resp(OK, st(OK, 10, HOUR, 9 - i)), "hit %d" % (i + 1))
        self.expect(req("example11", [("files_no_share", "files_no_share/b.csv")], hits=1),
                    resp(OK, st(OK, 10, HOUR, 9)))
        self.rows("example11_metrics", [([("route", "api/v1"), ("method", "GET")],
                                         st(OK, 60, MINUTE, 59))])


# ---- test/service/ratelimit_test.go --------------------------------------------------------

SERVICE = os.path.join(FIX, "service")
QUOTA = os.path.join(FIX, "quota")
FB, HW = [("foo", "bar")], [("hello", "world")]


class TestService(EnvoyCase):
    def over_fb(self, domain="different-domain"):
        """foo=bar (10/minute) at its limit, so the next hit is over."""
        harness.wait_window_room(60, 10)
        self.charge(domain, FB, 10)

    def test_TestService(self):
        """ratelimit_test.go TestService: no limit, then foo=bar over its
        named limit beside hello=world without one."""
        self.serve(SERVICE)
        self.expect(req("test-domain", HW, hits=1), resp(OK, NONE))
        self.over_fb()
        self.expect(req("different-domain", FB, HW, hits=1),
                    resp(OVER, st(OVER, 10, MINUTE, 0, name="key_name"), NONE))
        self.expect(req("different-domain", HW, FB, hits=1),
                    resp(OVER, NONE, st(OVER, 10, MINUTE, 0, name="key_name")))

    def test_TestServiceGlobalShadowMode(self):
        """ratelimit_test.go TestServiceGlobalShadowMode (--shadow-mode): the
        overall code is OK, the statuses are kept."""
        self.serve(SERVICE, "--shadow-mode=yes")
        self.over_fb()
        self.expect(req("different-domain", FB, HW, hits=1),
                    resp(OK, st(OVER, 10, MINUTE, 0, name="key_name"), NONE))

    def test_TestServiceGlobalShadowMode_env(self):
        """ratelimit_test.go TestServiceGlobalShadowMode: SHADOW_MODE=true in
        the environment, as the peer's test sets it."""
        self.serve(SERVICE, env={"SHADOW_MODE": "true"})
        self.over_fb()
        self.expect(req("different-domain", FB, HW, hits=1),
                    resp(OK, st(OVER, 10, MINUTE, 0, name="key_name"), NONE))

    def test_TestServiceGlobalShadowMode_bad_env(self):
        """settings.go (envconfig, strconv.ParseBool): SHADOW_MODE=maybe is a
        start error naming the variable."""
        srv = Server("--rules", SERVICE, grpc=True, name="bad-env")
        with environment(SHADOW_MODE="maybe"):
            with self.assertRaises(AssertionError) as cm:
                srv.start(timeout=10)
        self.addCleanup(srv.cleanup)
        self.assertIn("SHADOW_MODE", str(cm.exception).split("\n", 1)[1])

    def test_TestRuleShadowMode(self):
        """ratelimit_test.go TestRuleShadowMode: both limits shadow, both over:
        OK statuses with 0 left, overall OK."""
        self.serve(SERVICE)
        harness.wait_window_room(60, 10)
        self.charge("shadow-domain", FB, 10)
        self.charge("shadow-domain", HW, 10)
        self.expect(req("shadow-domain", FB, HW, hits=1),
                    resp(OK, st(OK, 10, MINUTE, 0), st(OK, 10, MINUTE, 0)))

    def test_TestMixedRuleShadowMode(self):
        """ratelimit_test.go TestMixedRuleShadowMode: a shadow limit over is
        OK, a plain one over is OVER_LIMIT, overall OVER_LIMIT."""
        self.serve(SERVICE)
        harness.wait_window_room(60, 10)
        self.charge("shadow-domain", FB, 10)
        self.charge("shadow-domain", [("plain", "world")], 10)
        self.expect(req("shadow-domain", FB, [("plain", "world")], hits=1),
                    resp(OVER, st(OK, 10, MINUTE, 0), st(OVER, 10, MINUTE, 0)))

    def headers_case(self, names, *flags, env=None):
        self.serve(SERVICE, *flags, env=env)
        harness.wait_window_room(60, 10)
        self.charge("different-domain", [("anon", "bar")], 10)
        self.expect(req("different-domain", [("anon", "bar")], HW, hits=1),
                    resp(OVER, st(OVER, 10, MINUTE, 0), NONE,
                         headers=reset_header(MINUTE, names, 10, 0)))

    def test_TestServiceWithCustomRatelimitHeaders(self):
        """ratelimit_test.go TestServiceWithCustomRatelimitHeaders, its
        environment variables as the peer's test sets them."""
        names = ("A-Ratelimit-Limit", "A-Ratelimit-Remaining", "A-Ratelimit-Reset")
        self.headers_case(names, env={"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
                                      "LIMIT_LIMIT_HEADER": names[0],
                                      "LIMIT_REMAINING_HEADER": names[1],
                                      "LIMIT_RESET_HEADER": names[2]})

    def test_TestServiceWithCustomRatelimitHeaders_flags(self):
        """ratelimit_test.go TestServiceWithCustomRatelimitHeaders, as flags."""
        names = ("A-Ratelimit-Limit", "A-Ratelimit-Remaining", "A-Ratelimit-Reset")
        self.headers_case(names, "--limit-response-headers-enabled=yes",
                          "--limit-limit-header", names[0], "--limit-remaining-header", names[1],
                          "--limit-reset-header", names[2])

    def test_TestServiceWithDefaultRatelimitHeaders(self):
        """ratelimit_test.go TestServiceWithDefaultRatelimitHeaders: the
        RateLimit-* names."""
        self.headers_case(("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"),
                          "--limit-response-headers-enabled=yes")

    def test_TestServiceWithDefaultRatelimitHeaders_env(self):
        """ratelimit_test.go TestServiceWithDefaultRatelimitHeaders:
        LIMIT_RESPONSE_HEADERS_ENABLED=1 (ParseBool) in the environment."""
        self.headers_case(("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"),
                          env={"LIMIT_RESPONSE_HEADERS_ENABLED": "1"})

    def test_TestServiceWithDefaultRatelimitHeaders_flag_wins(self):
        """A flag given wins over the environment variable (the brief):
        --limit-response-headers-enabled=no beats LIMIT_RESPONSE_HEADERS_ENABLED=true."""
        self.serve(SERVICE, "--limit-response-headers-enabled=no",
                   env={"LIMIT_RESPONSE_HEADERS_ENABLED": "true"})
        self.expect(req("different-domain", [("anon", "bar")], hits=1),
                    resp(OK, st(OK, 10, MINUTE, 9)))

    def test_TestServiceWithDefaultRatelimitHeaders_closest_limit(self):
        """ratelimit.go shouldRateLimitWorker: without a denial the headers
        show the descriptor with the fewest left."""
        self.serve(SERVICE, "--limit-response-headers-enabled=yes")
        harness.wait_window_room(60, 10)
        self.charge("different-domain", [("anon", "bar")], 6)
        self.expect(req("different-domain", FB, [("anon", "bar")], hits=1),
                    resp(OK, st(OK, 10, MINUTE, 9, name="key_name"), st(OK, 10, MINUTE, 3),
                         headers=reset_header(MINUTE, limit=10, remaining=3)))

    def test_TestService_config_load_failure(self):
        """ratelimit_test.go TestService: a configuration that fails to load
        leaves the one loaded serving (the peer logs config_load_error):
        a file the peer refuses (an empty domain) is written into the rules
        folder and a reload asked (RL.RULES RELOAD, refused); the answers
        stay those of the loaded rules, in either order of descriptors."""
        d = tempfile.mkdtemp(prefix="sluice-envoy-loadfail-")
        self.addCleanup(shutil.rmtree, d, True)
        for f in os.listdir(SERVICE):
            shutil.copy(os.path.join(SERVICE, f), d)
        self.serve(d, "--watch-rules=no")
        self.expect(req("different-domain", FB, HW, hits=1),
                    resp(OK, st(OK, 10, MINUTE, 9, name="key_name"), NONE))
        with open(os.path.join(d, "bad.yaml"), "w") as f:
            f.write('domain: ""\ndescriptors:\n  - {key: foo, rate_limit: {unit: minute, '
                    'requests_per_unit: 1}}\n')
        with self.srv.raw() as c:
            got = c.cmd("RL.RULES", "RELOAD")
        self.assertIsInstance(got, harness.RespError, got)
        self.assertIn("keeps serving", str(got))
        harness.wait_window_room(60, 5)
        self.charge("different-domain", FB, 10)
        self.expect(req("different-domain", HW, FB, hits=1),
                    resp(OVER, NONE, st(OVER, 10, MINUTE, 0, name="key_name")))

    def test_TestEmptyDomain(self):
        """ratelimit_test.go TestEmptyDomain: gRPC UNKNOWN with the peer's text."""
        self.serve(SERVICE)
        self.expect_error(req("", HW, hits=1), grpc.StatusCode.UNKNOWN,
                          "rate limit domain must not be empty")

    def test_TestEmptyDescriptors(self):
        """ratelimit_test.go TestEmptyDescriptors: gRPC UNKNOWN with the peer's text."""
        self.serve(SERVICE)
        self.expect_error(req("test-domain", hits=1), grpc.StatusCode.UNKNOWN,
                          "rate limit descriptor list must not be empty")

    def test_TestInitialLoadError(self):
        """ratelimit_test.go TestInitialLoadError: no configuration loaded
        (sluiced without --rules): UNKNOWN with the peer's text."""
        self.serve(None)
        self.expect_error(req("test-domain", HW, hits=1), grpc.StatusCode.UNKNOWN,
                          "no rate limit configuration loaded")

    def test_TestUnlimited(self):
        """ratelimit_test.go TestUnlimited: a limit, none, unlimited (OK,
        no current_limit, 4294967295 left)."""
        self.serve(SERVICE)
        self.expect(req("some-domain", FB, HW, [("baz", "qux")], hits=1),
                    resp(OK, st(OK, 10, MINUTE, 9), NONE, UNLIMITED))

    # -- quota mode

    def quota(self, *flags, env=None, over=()):
        self.serve(QUOTA, *flags, env=env)
        harness.wait_window_room(60, 10)
        for entries, n in over:
            self.charge("quota-domain", entries, n)

    def test_TestServiceGlobalQuotaMode(self):
        """ratelimit_test.go TestServiceGlobalQuotaMode (--quota-mode): every
        limit is a quota; all over -> OVER_LIMIT."""
        self.quota("--quota-mode=yes", over=[(FB, 10), (HW, 5)])
        self.expect(req("quota-domain", FB, HW, hits=1),
                    resp(OVER, st(OVER, 10, MINUTE, 0), st(OVER, 5, MINUTE, 0)))

    def test_TestServiceGlobalQuotaMode_some_over(self):
        """ratelimit.go: under global QUOTA_MODE one quota over of two -> overall OK."""
        self.quota("--quota-mode=yes", over=[(FB, 10)])
        self.expect(req("quota-domain", FB, HW, hits=1),
                    resp(OK, st(OVER, 10, MINUTE, 0), st(OK, 5, MINUTE, 4)))

    def test_TestServiceGlobalQuotaMode_env(self):
        """ratelimit_test.go TestServiceGlobalQuotaMode: QUOTA_MODE=True in the
        environment."""
        self.quota(env={"QUOTA_MODE": "True"}, over=[(FB, 10)])
        self.expect(req("quota-domain", FB, HW, hits=1),
                    resp(OK, st(OVER, 10, MINUTE, 0), st(OK, 5, MINUTE, 4)))

    def test_TestServicePerDescriptorQuotaMode(self):
        """ratelimit_test.go TestServicePerDescriptorQuotaMode: a plain limit
        over -> OVER_LIMIT, the quota under it OK."""
        self.quota(over=[([("regular", "limit")], 5)])
        self.expect(req("quota-domain", [("regular", "limit")], [("quota", "limit")], hits=1),
                    resp(OVER, st(OVER, 5, MINUTE, 0), st(OK, 3, MINUTE, 2)))

    def test_TestServiceMixedPerDescriptorModes(self):
        """ratelimit_test.go TestServiceMixedPerDescriptorModes: the only quota
        over (status OVER_LIMIT) -> every quota over -> OVER_LIMIT."""
        self.quota(over=[([("quota", "limit")], 3)])
        self.expect(req("quota-domain", [("regular", "limit")], [("quota", "limit")], hits=1),
                    resp(OVER, st(OK, 5, MINUTE, 4), st(OVER, 3, MINUTE, 0)))

    def test_TestServiceMixedPerDescriptorModesUnderLimit(self):
        """ratelimit_test.go TestServiceMixedPerDescriptorModesUnderLimit."""
        self.quota()
        self.expect(req("quota-domain", [("regular", "limit")], [("quota", "limit")], hits=1),
                    resp(OK, st(OK, 5, MINUTE, 4), st(OK, 3, MINUTE, 2)))

    def test_TestServiceQuotaModeOnlyAllOverTheLimit(self):
        """ratelimit_test.go TestServiceQuotaModeOnlyAllOverTheLimit."""
        self.quota(over=[([("quota1", "limit")], 5), ([("quota2", "limit")], 3)])
        self.expect(req("quota-domain", [("quota1", "limit")], [("quota2", "limit")], hits=1),
                    resp(OVER, st(OVER, 5, MINUTE, 0), st(OVER, 3, MINUTE, 0)))

    def test_TestServiceQuotaModeOnlySomeOverTheLimit(self):
        """ratelimit_test.go TestServiceQuotaModeOnlySomeOverTheLimit: the
        quota over keeps OVER_LIMIT as its status; overall OK."""
        self.quota(over=[([("quota1", "limit")], 5)])
        self.expect(req("quota-domain", [("quota1", "limit")], [("quota2", "limit")], hits=1),
                    resp(OK, st(OVER, 5, MINUTE, 0), st(OK, 3, MINUTE, 2)))

    def test_TestServiceQuotaModeWithShadowMode(self):
        """ratelimit_test.go TestServiceQuotaModeWithShadowMode (SHADOW_MODE):
        all quotas over, overall OK."""
        self.quota(env={"SHADOW_MODE": "true"},
                   over=[([("quota1", "limit")], 5), ([("quota2", "limit")], 3)])
        self.expect(req("quota-domain", [("quota1", "limit")], [("quota2", "limit")], hits=1),
                    resp(OK, st(OVER, 5, MINUTE, 0), st(OVER, 3, MINUTE, 0)))

    def test_TestServiceMixedModeWithShadowMode(self):
        """ratelimit_test.go TestServiceMixedModeWithShadowMode."""
        self.quota("--shadow-mode=yes",
                   over=[([("regular", "limit")], 5), ([("quota", "limit")], 3)])
        self.expect(req("quota-domain", [("regular", "limit")], [("quota", "limit")], hits=1),
                    resp(OK, st(OVER, 5, MINUTE, 0), st(OVER, 3, MINUTE, 0)))

    # -- dynamic metadata

    def metadata_case(self, second, over, meta, statuses, flags=(), env=None):
        self.quota(*flags, env=env, over=over)
        first = ("mregular", "limit")

        def fill(s):
            s.fields["domain"].string_value = "quota-domain"
            for k, v in (first, second):
                d = s.fields["descriptors"].list_value.values.add().struct_value
                d.fields["entries"].list_value.values.add().string_value = "%s=%s" % (k, v)
            s.fields["hitsAddend"].number_value = 1
            for k, v in meta:
                s.fields["metadata"].struct_value.fields[k].string_value = v
        self.expect(req("quota-domain", [first], [second], hits=1),
                    resp(OK, *statuses, metadata=fill))

    def test_TestMetadataReturnedForPassedDescriptors(self):
        """ratelimit_test.go TestMetadataReturnedForPassedDescriptors (QUOTA_MODE
        and RESPONSE_DYNAMIC_METADATA): only the passed limit's metadata."""
        self.metadata_case(("mquota", "limit"), [([("mquota", "limit")], 5)],
                           [("name", "service_1")],
                           [st(OK, 10, MINUTE, 9), st(OVER, 5, MINUTE, 0)],
                           env={"QUOTA_MODE": "true", "RESPONSE_DYNAMIC_METADATA": "true"})

    def test_TestMetadataReturnedForAllPassedDescriptors(self):
        """ratelimit_test.go TestMetadataReturnedForAllPassedDescriptors: both
        passed, both metadata merged."""
        self.metadata_case(("mother", "limit"), [],
                           [("name", "service_1"), ("some_other_name", "service_2")],
                           [st(OK, 10, MINUTE, 9), st(OK, 5, MINUTE, 4)],
                           flags=("--quota-mode=yes", "--response-dynamic-metadata=yes"))

    def test_TestOverlappingMetadataReturnsTheFirstValue(self):
        """ratelimit_test.go TestOverlappingMetadataReturnsTheFirstValue."""
        self.metadata_case(("mquota", "limit"), [], [("name", "service_1")],
                           [st(OK, 10, MINUTE, 9), st(OK, 5, MINUTE, 4)],
                           flags=("--quota-mode=yes", "--response-dynamic-metadata=yes"))


# ---- test/redis/fixed_cache_impl_test.go, test/limiter/base_limiter_test.go -------------

FIXED = os.path.join(FIX, "fixed_cache")
D = "domain"


class TestFixedCache(EnvoyCase):
    FLAGS = ()

    def setUp(self):
        self.serve(FIXED, *self.FLAGS)
        harness.wait_window_room(60, 15)

    def test_TestRedis_hits(self):
        """fixed_cache_impl_test.go testRedis: key=value at 4, one hit -> 5 left."""
        self.charge(D, [("key", "value")], 4)
        self.expect(req(D, [("key", "value")], hits=1), resp(OK, st(OK, 10, MINUTE, 5)))

    def test_TestRedis_per_descriptor_hits_addend_0_1(self):
        """fixed_cache_impl_test.go testRedis: hits_addend [0, 1] on (no limit,
        10/minute at 10) -> OK no limit, OVER_LIMIT."""
        e2 = [("key2", "value2"), ("subkey2", "subvalue2")]
        self.charge(D, e2, 10)
        self.expect(req(D, [("key2", "value2")], e2, dhits=[0, 1]),
                    resp(OVER, NONE, st(OVER, 10, MINUTE, 0)))

    def test_TestRedis_per_descriptor_hits_addend_0_on_exhausted(self):
        """fixed_cache_impl_test.go testRedis: [0, 1] on (10/hour at 11, 10/day
        at 12): a zero-hit check of an exhausted counter is OVER_LIMIT too."""
        e1, e2 = [("key3", "value3")], [("key3", "value3"), ("subkey3", "subvalue3")]
        self.charge(D, e1, 11)
        self.charge(D, e2, 12)
        self.expect(req(D, e1, e2, dhits=[0, 1]),
                    resp(OVER, st(OVER, 10, HOUR, 0), st(OVER, 10, DAY, 0)))

    def test_TestNearLimit(self):
        """fixed_cache_impl_test.go TestNearLimit: key4 15/hour from 10: 4 left,
        2 left, then over; hits_addend 3 and 2 on 20 and 8 (key5, key6)."""
        e = [("key4", "value4")]
        self.charge(D, e, 10)
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 4)))
        self.charge(D, e, 1)
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 2)))
        self.charge(D, e, 2)
        self.expect(req(D, e, hits=1), resp(OVER, st(OVER, 15, HOUR, 0)))
        self.expect(req(D, [("key6", "value6")], hits=5), resp(OK, st(OK, 8, MINUTE, 3)))
        self.expect(req(D, [("key6", "value6")], hits=2), resp(OK, st(OK, 8, MINUTE, 1)))

    def test_TestNearLimit_hits_addend_over(self):
        """fixed_cache_impl_test.go TestNearLimit: 20 at 16 + 3 -> 1 left; at 19
        + 3 -> over; at 15 + 7 -> over; 10 at 27 + 3 -> over (denied hits
        are charged: 27 came from denied calls)."""
        for key, lim, before, hits, want in (("key7", 20, 16, 3, st(OK, 20, MINUTE, 1)),
                                             ("key8", 20, 19, 3, st(OVER, 20, MINUTE, 0)),
                                             ("key9", 20, 15, 7, st(OVER, 20, MINUTE, 0)),
                                             ("key10", 10, 27, 3, st(OVER, 10, MINUTE, 0))):
            e = [(key, "value" + key[3:])]
            for _ in range(before // 9):
                self.charge(D, e, 9)
            if before % 9:
                self.charge(D, e, before % 9)
            self.expect(req(D, e, hits=hits), resp(want(0).code, want), key)

    def test_TestNearLimit_hits_addend_3(self):
        """fixed_cache_impl_test.go TestNearLimit: 20 at 2, hits_addend 3 ->
        15 left (key13 here: the peer's key5 is 20/second)."""
        self.charge(D, [("key13", "value13")], 2)
        self.expect(req(D, [("key13", "value13")], hits=3), resp(OK, st(OK, 20, MINUTE, 15)))

    def test_TestOverLimitWithLocalCacheShadowRule(self):
        """fixed_cache_impl_test.go TestOverLimitWithLocalCacheShadowRule and
        base_limiter_test.go TestGetResponseStatus*ShadowMode: a shadow_mode
        limit (15/hour, key12 here) from 10: OK 4 left, OK 2 left, then over
        it OK with 0 left, twice (the local cache's answer is the same)."""
        harness.wait_window_room(3600, 15)
        e = [("key12", "value12")]
        self.charge(D, e, 10)
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 4)))
        self.charge(D, e, 1)
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 2)))
        self.charge(D, e, 2)
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 0)))
        self.expect(req(D, e, hits=1), resp(OK, st(OK, 15, HOUR, 0)))

    def test_TestGetResponseStatusOverLimit_remaining_zero(self):
        """base_limiter_test.go TestGetResponseStatusOverLimit: a denied
        status has limit_remaining 0, and the denied hits count (the next
        call is denied too)."""
        e = [("key11", "value11")]
        self.expect(req(D, e, hits=21), resp(OVER, st(OVER, 20, MINUTE, 0)))
        self.expect(req(D, e, hits=1), resp(OVER, st(OVER, 20, MINUTE, 0)))

    def test_TestGetResponseStatusBelowLimit(self):
        """base_limiter_test.go TestGetResponseStatusBelowLimit: 10 at 9 ...
        remaining = limit - count after the hit."""
        self.expect(req(D, [("key", "value")], hits=6), resp(OK, st(OK, 10, MINUTE, 4)))

    def test_TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig(self):
        """fixed_cache_impl_test.go TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig
        without the setting: every key is charged, allowed or not."""
        self.precharge_45()
        self.expect(req(D, [("key4", "value4")], [("key5", "value5")], dhits=[2, 2]),
                    resp(OVER, st(OK, 15, HOUR, 0), st(OVER, 14, HOUR, 0)))
        # key4 went to 15: the next single hit is over
        self.expect(req(D, [("key4", "value4")], dhits=[1]), resp(OVER, st(OVER, 15, HOUR, 0)))

    def precharge_45(self):
        harness.wait_window_room(3600, 15)
        self.charge(D, [("key4", "value4")], 10)
        self.charge(D, [("key5", "value5")], 10)
        self.expect(req(D, [("key4", "value4")], [("key5", "value5")], dhits=[1, 1]),
                    resp(OK, st(OK, 15, HOUR, 4), st(OK, 14, HOUR, 3)))
        self.expect(req(D, [("key4", "value4")], [("key5", "value5")], dhits=[2, 2]),
                    resp(OK, st(OK, 15, HOUR, 2), st(OK, 14, HOUR, 1)))


class TestFixedCacheStopCacheKeyIncrement(TestFixedCache):
    FLAGS = ("--stop-cache-key-increment-when-overlimit=yes",)

    def test_TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig(self):
        """fixed_cache_impl_test.go TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig:
        (15/hour, 14/hour) from (10, 10): [1,1] -> 4, 3 left; [2,2] -> 2, 1;
        [2,2] -> key5 would go over: only key5 is charged (key4 stays at 13,
        2 left), key5 OVER_LIMIT."""
        self.precharge_45()
        self.expect(req(D, [("key4", "value4")], [("key5", "value5")], dhits=[2, 2]),
                    resp(OVER, st(OK, 15, HOUR, 2), st(OVER, 14, HOUR, 0)))
        # key4 stayed at 13: two more fit
        self.expect(req(D, [("key4", "value4")], dhits=[2]), resp(OK, st(OK, 15, HOUR, 0)))


# ---- caps, health -------------------------------------------------------------------------

class TestCaps(EnvoyCase):
    def setUp(self):
        self.serve(os.path.join(FIX, "caps"))

    def test_TestCaps_20_descriptors(self):
        """The peer answers any number of descriptors (20 here)."""
        self.expect(req("caps", *[[("d", "v%d" % i)] for i in range(20)], hits=1),
                    resp(OK, *[st(OK, 100, HOUR, 99)] * 20))

    def test_TestCaps_20_entries_with_override(self):
        """20 entries with a limit override (config_impl.go GetLimit: the
        override applies whatever the entries)."""
        self.expect(req("caps", [("k%d" % i, "v") for i in range(20)], hits=1,
                        overrides=[(5, HOUR)]), resp(OK, st(OK, 5, HOUR, 4)))

    def test_TestCaps_long_value(self):
        """A value making the cache key longer than 512 bytes is answered."""
        self.expect(req("caps", [("d", "x" * 600)], hits=1), resp(OK, st(OK, 100, HOUR, 99)))


class TestHealth(EnvoyCase):
    def setUp(self):
        self.serve(os.path.join(FIX, "caps"))

    def test_TestGrpcHealthCheck_ratelimit(self):
        """health_test.go TestGrpcHealthCheck: service "ratelimit" SERVING."""
        self.assertEqual(self.health(HealthReq(service="ratelimit"), timeout=TIMEOUT),
                         HealthResp(status=SERVING))

    def test_TestGrpcHealthCheck_overall(self):
        """grpc-go's health server: service "" SERVING."""
        self.assertEqual(self.health(HealthReq(), timeout=TIMEOUT), HealthResp(status=SERVING))

    def test_TestGrpcHealthCheck_unknown(self):
        """grpc-go's health server: an unknown service is NOT_FOUND."""
        with self.assertRaises(grpc.RpcError) as cm:
            self.health(HealthReq(service="other"), timeout=TIMEOUT)
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.NOT_FOUND, "unknown service"))


if __name__ == "__main__":
    unittest.main()
