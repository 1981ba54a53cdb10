"""test_backend_redis.py -- sluiced on the Redis backend (--backend redis://,
docs/fleet.md), against real redis-server processes the tests start on free
loopback ports and stop by PID (harness.RedisServer):

  - two nodes on one Redis share one fixed-window limit exactly;
  - the deny cache answers a denial Redis gave without asking Redis again
    (Redis's EVALSHA count does not move), with Redis's own reply, and
    counts the hit in INFO;
  - faults: Redis killed during a pipelined load, under each policy
    (deny, allow, local) -- every reply arrives, each as the policy says;
    Redis stalled (SIGSTOP), then resumed; Redis restarted -- decisions
    return to it and a key's count continues there; Redis answering
    errors (OOM) -- counted, the policy applied;
  - bad configuration: a malformed URL, an unreachable host, a wrong
    password -- a clear message naming what is wrong, once; a scheme
    --backend does not take -- every form it does;
  - a URL without :port means Redis's own, 6379 (one URL, a ring's, a
    cluster's seeds, [::1]), against redis-servers on 6379 at loopback
    addresses of their own (127.0.0.N);
  - the log says, once per server, whether decisions go through the sluice
    module or the Lua script, and once more when a reconnect finds a
    module loaded since.

Only fixed-window is used: until the merge the script is the provisional
one (src/backend/redis/sluice.lua), which has no other algorithm.  Times are
the caller's (AT, --trust-client-time), so every reply is exact.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import BASE, SANITIZED, SLOW, SLUICED, RawConn, RedisServer, RespError, Server

import redis as redis_py

W = 10000  # the window of every limit here, ms

# RL.CHECK's rules: fixed-window only (the provisional script's), with two
# limits on one descriptor, a shadow limit, a blocked one (L = 0), an
# elastic one on the --capacity pool, and Lyft's `replaces`.
RULES = """domain: api
descriptors:
  - key: user
    rate_limit:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: shadowed}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0, name: blocklist}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, elastic: 4, name: tenant}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 2, name: team_default}
  - key: vip
    rate_limit:
      unit: minute
      requests_per_unit: 3
      name: vip
      replaces: [{name: team_default}]
"""



def fw_count(conn, key):
    """The count a fixed-window counter holds in Redis (docs/redis-scripts.md:
    the string "clock count")."""
    v = conn.cmd("GET", key)
    assert isinstance(v, bytes), "no fixed-window state at %s: %r" % (key, v)
    return int(v.split()[1])

# Every form --backend takes, as the message of a scheme it does not take lists them.
FORMS = ("use local, redis://[user:password@]host[:port][/db], several redis:// URLs "
         "separated by commas (a ring: redis://a:6379,redis://b:6379), "
         "redis-cluster://[user:password@]host[:port][,host[:port]...] (no :port: 6379), or "
         "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name "
         "(no :port: 26379)")


def free_at(host, port):
    """Whether host:port can be bound now (nothing listens there)."""
    s = socket.socket()
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class RedisOn6379(RedisServer):
    """A redis-server on Redis's own port, 6379, at a loopback address of
    its own, 127.0.0.N (N drawn until one has 6379 -- and with `cluster`,
    its bus port 16379 -- free: bounded), so that a URL without :port
    reaches it whatever else runs on 127.0.0.1.  Stopped and scanned as
    every RedisServer (cleanup, by PID)."""

    def __init__(self, cluster=False):
        super().__init__()
        self.host = None
        self.port = 6379
        self.on_cluster = cluster

    def start(self, timeout=15):
        for _ in range(40):
            host = "127.0.0.%d" % random.randint(2, 254)
            if not free_at(host, 6379) or (self.on_cluster and not free_at(host, 16379)):
                continue
            argv = ["redis-server", "--port", "6379", "--bind", host, "--save", "",
                    "--dir", self.dir, "--appendonly", "no", "--daemonize", "no",
                    "--protected-mode", "no"]
            if self.on_cluster:
                argv += ["--cluster-enabled", "yes", "--cluster-config-file",
                         os.path.join(self.dir, "nodes-%s.conf" % host)]
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
            log.close()
            self.host = host
            until = harness.deadline(timeout)
            while time.monotonic() < until and self.proc.poll() is None:
                try:
                    if self.cmd("PING") is True:
                        return self
                except redis_py.exceptions.ConnectionError:
                    pass
                time.sleep(0.02)
            self.stop()
            problems = self.check()
            if problems:
                raise AssertionError("redis-server at %s:6379 did not start: %s\n%s"
                                     % (host, "; ".join(problems), self.log()[-4000:]))
        raise AssertionError("no 127.0.0.N:6379 free to start a redis-server on\n"
                             + self.log()[-4000:])

    def cmd(self, *args):
        c = redis_py.Redis(host=self.host, port=6379, socket_timeout=10 * SLOW)
        try:
            return c.execute_command(*args)
        finally:
            c.close()


class RedisBackendTest(unittest.TestCase):

    def redis(self, **kw):
        r = RedisServer(**kw).start()
        self.addCleanup(r.cleanup)
        return r

    def node(self, r, *args, http=False, name=None):
        """A sluiced on r's Redis (client time trusted), up: every worker
        connected.  --backend-timeout is 30 s unless args name one: the
        default 50 ms fires on a busy machine (a CPU hog beside the suite)
        and answers by the policy where a case expects Redis's answer; a
        case about the timeout passes its own."""
        if "--backend-timeout" not in args:
            args = args + ("--backend-timeout", "30s")
        s = Server("--backend", r.url(), *args, trust_client_time=True, http=http,
                   name=name or self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        self.wait_status(s, "up")
        return s

    def wait_status(self, s, want, timeout=20):
        until = harness.deadline(timeout)
        got = None
        while time.monotonic() < until:
            got = s.info("backend").get("backend_status")
            if got == want:
                return
            time.sleep(0.02)
        self.fail("INFO backend_status stayed %r, expected %r" % (got, want))

    @staticmethod
    def allow(c, key, limit, at, cost=1):
        return c.cmd("RL.ALLOW", key, str(limit), "10s", "ALGO", "fixed-window", "COST", str(cost),
                     "AT", str(at))

    @staticmethod
    def evalsha_calls(r):
        for line in r.cmd("INFO", "commandstats").decode().splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    # -- the fleet --

    def test_two_nodes_share_one_limit(self):
        r = self.redis()
        a = self.node(r, http=True, name="node_a")
        b = self.node(r, name="node_b")
        with a.raw() as ca, b.raw() as cb:
            for i in range(8):
                got = self.allow(ca if i % 2 == 0 else cb, "shared", 5, BASE)
                want = [1, 5, 4 - i, 0, W, 0] if i < 5 else [0, 5, 0, W, W, 0]
                self.assertEqual(got, want, "request %d of 8 through node %s" % (i, "ab"[i % 2]))
            # the next window: both nodes see it fresh, in Redis
            self.assertEqual(self.allow(cb, "shared", 5, BASE + W), [1, 5, 4, 0, W, 0])
            self.assertEqual(self.allow(ca, "shared", 5, BASE + W), [1, 5, 3, 0, W, 0])
        self.assertEqual(fw_count(r, "sl:00:{shared}"), 2)
        info = a.info("backend")
        self.assertEqual(info["backend_name"], "redis")
        self.assertEqual(info["backend_url"], "redis://127.0.0.1:%d/0" % r.port)
        self.assertEqual(info["backend_on_error"], "deny")
        self.assertEqual(info["backend_fallback_deny"], "0")
        self.assertEqual(info["backend_errors"], "0")
        h = a.http_conn()
        h.request("GET", "/metrics")
        page = h.getresponse().read().decode()
        self.assertIn("\nsluice_backend_up 1\n", page)
        self.assertIn('\nsluice_backend_fallback_total{policy="deny"} 0\n', page)
        lint = subprocess.run(["promtool", "check", "metrics"], input=page.encode(),
                              capture_output=True, timeout=60 * SLOW)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)

    def test_fleet_hammered_admits_exactly_the_limit(self):
        """Clients hammering one key through two nodes at once, over three
        windows: per window, exactly L admitted (demand is above it), with
        the deny cache on."""
        r = self.redis()
        nodes = [self.node(r, name="hammer_a"), self.node(r, name="hammer_b")]
        L, clients, per = 50, 4, (30 if SANITIZED else 60)
        for win in range(3):
            at = BASE + win * W
            counts = []

            def hammer(node):
                with node.raw(timeout=60) as c:
                    c.send(b"".join(harness.encode("RL.ALLOW", "hot", str(L), "10s", "ALGO",
                                                   "fixed-window", "AT", str(at))
                                    for _ in range(per)))
                    got = c.read_replies(per, timeout=60)
                counts.append(sum(1 for v in got if v[0] == 1))

            threads = [threading.Thread(target=hammer, args=(nodes[i % 2],))
                       for i in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120 * SLOW)
            self.assertEqual(len(counts), clients, "a client did not finish")
            self.assertEqual(sum(counts), L, "window %d: admitted per client %s" % (win, counts))

    def test_deny_cache(self):
        r = self.redis()
        a = self.node(r, "--threads", "1", name="cache_on")
        b = self.node(r, "--threads", "1", "--deny-cache", "off", name="cache_off")
        with a.raw() as ca, b.raw() as cb:
            self.assertEqual(self.allow(ca, "dc", 2, BASE), [1, 2, 1, 0, W, 0])
            self.assertEqual(self.allow(ca, "dc", 2, BASE), [1, 2, 0, 0, W, 0])
            self.assertEqual(self.allow(ca, "dc", 2, BASE), [0, 2, 0, W, W, 0])  # Redis's
            self.assertEqual(a.info("backend")["backend_deny_cache_hits"], "0")
            calls = self.evalsha_calls(r)
            # a second later, cost 1 then 2: denied here, Redis not asked
            cached = self.allow(ca, "dc", 2, BASE + 1000)
            self.assertEqual(cached, [0, 2, 0, W - 1000, W - 1000, 0])
            self.assertEqual(self.allow(ca, "dc", 2, BASE + 1000, cost=2),
                             [0, 2, 0, W - 1000, W - 1000, 0])
            self.assertEqual(self.evalsha_calls(r), calls, "the deny cache asked Redis")
            self.assertEqual(a.info("backend")["backend_deny_cache_hits"], "2")
            # what Redis itself answers at that time: the same
            self.assertEqual(self.allow(cb, "dc", 2, BASE + 1000), cached)
            self.assertEqual(self.evalsha_calls(r), calls + 1)
            self.assertEqual(b.info("backend")["backend_deny_cache_hits"], "0")
            # a cost below the cached denial's is Redis's to answer
            self.assertEqual(self.allow(ca, "dc", 3, BASE + 1000), [1, 3, 0, 0, W - 1000, 0])
            # the denial has passed: Redis again
            self.assertEqual(self.allow(ca, "dc", 2, BASE + W), [1, 2, 1, 0, W, 0])
            self.assertEqual(a.info("backend")["backend_deny_cache_hits"], "2")

    def test_pipelined_burst_batched(self):
        """A pipelined burst of N RL.ALLOW from one client reaches Redis in
        fewer than N script calls (op M: the decisions of one loop turn in
        one call), every reply exact and in order; an RL.RESET inside the
        burst still comes between the decisions before and after it."""
        r = self.redis()
        # a backend timeout far beyond the test's: the default 50 ms ran out
        # once on a loaded machine, and the policy's deny answered
        s = self.node(r, "--threads", "1", "--deny-cache", "off", "--backend-timeout", "30s")
        n = 150 if SANITIZED else 400
        burst = []
        want = []
        for i in range(n):
            key, L = ("ba", 100) if i % 3 else ("bb", 40)
            burst.append(("RL.ALLOW", key, str(L), "10s", "ALGO", "fixed-window", "AT", str(BASE)))
        counts = {"ba": 0, "bb": 0}
        for _, key, L, *_ in burst:
            L = int(L)
            if counts[key] < L:
                counts[key] += 1
                want.append([1, L, L - counts[key], 0, W, 0])
            else:
                want.append([0, L, 0, W, W, 0])
        # the same key reset inside the burst: decided after what came before
        burst += [("RL.ALLOW", "bc", "2", "10s", "ALGO", "fixed-window", "AT", str(BASE))] * 3
        want += [[1, 2, 1, 0, W, 0], [1, 2, 0, 0, W, 0], [0, 2, 0, W, W, 0]]
        burst.append(("RL.RESET", "bc"))
        want.append(1)
        burst.append(("RL.ALLOW", "bc", "2", "10s", "ALGO", "fixed-window", "AT", str(BASE)))
        want.append([1, 2, 1, 0, W, 0])
        calls = self.evalsha_calls(r)
        with s.raw() as c:
            c.send(b"".join(harness.encode(*cmd) for cmd in burst))
            got = [c.read_reply(timeout=30) for _ in burst]
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertEqual(g, w, "reply %d of the burst (%s)" % (i, burst[i]))
        sent = self.evalsha_calls(r) - calls
        decisions = len(burst) - 1
        self.assertLess(sent, decisions, "%d decisions took %d script calls" % (decisions, sent))
        self.assertEqual(s.info("backend")["backend_errors"], "0")

    def test_check_through_two_nodes_answers_as_one_local_node(self):
        """A sequence of RL.CHECK requests, alternately through two nodes on
        one Redis, gets exactly the replies one node on its local store
        gives the same sequence."""
        d = tempfile.mkdtemp(prefix="sluice-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "api.yaml")
        with open(path, "w") as f:
            f.write(RULES)
        r = self.redis()
        common = ("--rules", path, "--capacity", "3/1m")
        a = self.node(r, *common, name="check_a")
        b = self.node(r, *common, name="check_b")
        ref = Server(*common, trust_client_time=True, name="check_local")
        ref.start()
        self.addCleanup(ref.cleanup)
        kvs = [("user", "bob"), ("user", "ann"), ("shadow", "s"), ("blocked", "z"),
               ("tenant", "t1"), ("team", "red"), ("vip", "yes"), ("nomatch", "q")]
        seq = []
        t = BASE
        for i in range(60 if SANITIZED else 240):  # a fixed pseudo-random sequence
            x = (i * 7919 + 13) % 1009
            t += (x % 7) * 900
            descs = [kvs[(x + j * 3) % len(kvs)] for j in range(1 + x % 3)]
            cost = 1 if x % 10 else 2
            seq.append((t, cost, descs))
        denied = 0
        with a.raw() as ca, b.raw() as cb, ref.raw() as cr:
            for i, (at, cost, descs) in enumerate(seq):
                args = ["RL.CHECK", "api", "AT", str(at), "COST", str(cost)]
                for k, v in descs:
                    args += ["DESCRIPTOR", k, v]
                want = cr.cmd(*args)
                got = (ca if i % 2 == 0 else cb).cmd(*args)
                self.assertEqual(got, want, "request %d: %s" % (i, args))
                denied += want[0] == 0  # the overall answer's `allowed`
        self.assertGreater(denied, 0)
        self.assertLess(denied, len(seq))
        for n in (a, b):
            self.assertEqual(n.info("backend")["backend_errors"], "0")

    # -- faults --

    def test_check_falls_back_as_a_whole(self):
        """RL.CHECK with Redis stalled: the whole request is decided by the
        policy -- with `local`, on the node's own store at L / --fleet-size."""
        d = tempfile.mkdtemp(prefix="sluice-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "api.yaml")
        with open(path, "w") as f:
            f.write("domain: api\ndescriptors:\n  - key: user\n"
                    "    rate_limit: {unit: second, requests_per_unit: 3}\n")
        r = self.redis()
        s = self.node(r, "--rules", path, "--on-backend-error", "local", "--fleet-size", "3",
                      "--threads", "1", "--backend-timeout", "50ms")
        check = ("RL.CHECK", "api", "AT", str(BASE), "DESCRIPTOR", "user", "bob")
        with s.raw(timeout=30) as c:
            self.assertEqual(c.cmd(*check), [1, 3, 2, 0, 1000, 0, [b"OK", b"api.user", 3, 2, 0, 1000]])
            r.pause()
            try:
                self.assertEqual(c.cmd(*check),
                                 [1, 1, 0, 0, 1000, 0, [b"OK", b"api.user", 1, 0, 0, 1000]])
                self.assertEqual(c.cmd(*check), [0, 1, 0, 1000, 1000, 0,
                                                 [b"OVER_LIMIT", b"api.user", 1, 0, 1000, 1000]])
            finally:
                r.resume()
            self.wait_status(s, "up")
            # the request that timed out had reached Redis's socket, and
            # Redis ran it when it woke (docs/fleet.md, "Strictness"): this is
            # 3 of 3.  The second paused request reached Redis too when it
            # came while the node was reconnecting (requests are sent behind
            # the handshake; the reconnect's jittered backoff may be ~0 ms):
            # then Redis has counted 3 already and this one is over -- never
            # fewer than Redis was sent, never more than the limit
            got = c.cmd(*check)
            self.assertIn(got, ([1, 3, 0, 0, 1000, 0, [b"OK", b"api.user", 3, 0, 0, 1000]],
                                [0, 3, 0, 1000, 1000, 0,
                                 [b"OVER_LIMIT", b"api.user", 3, 0, 1000, 1000]]))
        self.assertEqual(s.info("backend")["backend_fallback_local"], "2")

    def test_redis_killed_under_load_each_policy(self):
        """A pipelined load in flight (Redis stopped first, so every request
        of it is sent and waiting), then Redis killed: every request is
        answered at once by the policy, exactly; later ones too."""
        n = 40 if SANITIZED else 300
        L = 1000000
        policy_load = {
            "deny": lambda i: [0, L, 0, 1000, 1000, 0],
            "allow": lambda i: [1, L, 0, 0, 0, 0],
            # the local engine with L / --fleet-size 2
            "local": lambda i: [1, L // 2, L // 2 - 1 - i, 0, W, 0],
        }
        policy_after = {
            "deny": [[0, 4, 0, 1000, 1000, 0]] * 3,
            "allow": [[1, 4, 0, 0, 0, 0]] * 3,
            "local": [[1, 2, 1, 0, W, 0], [1, 2, 0, 0, W, 0], [0, 2, 0, W, W, 0]],
        }
        for policy, want in policy_after.items():
            with self.subTest(policy=policy):
                r = self.redis()
                # a timeout far beyond the test's: the answers come from the kill
                s = self.node(r, "--on-backend-error", policy, "--fleet-size", "2",
                              "--backend-timeout", "60s", "--threads", "1",
                              name="killed_" + policy)
                with s.raw(timeout=30) as c:
                    self.assertEqual(self.allow(c, "warm", 4, BASE), [1, 4, 3, 0, W, 0])
                    r.pause()
                    c.send(b"".join(harness.encode("RL.ALLOW", "load", str(L), "10s", "ALGO",
                                                   "fixed-window", "AT", str(BASE))
                                    for _ in range(n)))
                    s.wait_info("backend_inflight", lambda v: v == n, section="backend",
                                what="(the load in flight)")
                    r.kill()
                    got = c.read_replies(n, timeout=30)  # every reply arrives
                    for i, v in enumerate(got):
                        self.assertEqual(v, policy_load[policy](i), "%s: load reply %d" % (policy, i))
                    self.wait_status(s, "down")
                    for i, w in enumerate(want):
                        self.assertEqual(self.allow(c, "after", 4, BASE), w,
                                         "%s: request %d with Redis gone" % (policy, i))
                    self.assertEqual(
                        c.cmd("RL.RESET", "after"),
                        RespError("ERR the Redis backend redis://127.0.0.1:%d/0 is unreachable: "
                                  "nothing was reset" % r.port))
                info = s.info("backend")
                self.assertEqual(info["backend_fallback_" + policy], str(n + 3))
                self.assertEqual(info["backend_inflight"], "0")
                for p in policy_after:
                    if p != policy:
                        self.assertEqual(info["backend_fallback_" + p], "0")
                self.assertTrue(info["backend_last_error"].startswith("connect: ") or
                                info["backend_last_error"].startswith("connection lost: "), info)
                self.assertIn("Redis backend down: requests go to --on-backend-error", s.log())
                harness.assert_clean_stop(s)

    def test_redis_stalled_then_resumed(self):
        r = self.redis()
        s = self.node(r, "--backend-timeout", "50ms", "--threads", "1")
        with s.raw(timeout=30) as c:
            self.assertEqual(self.allow(c, "st", 4, BASE), [1, 4, 3, 0, W, 0])
            r.pause()
            try:
                # the first waits out the timeout, the rest are answered at once
                for i in range(3):
                    self.assertEqual(self.allow(c, "stalled", 4, BASE), [0, 4, 0, 1000, 1000, 0],
                                     "request %d to a stalled Redis" % i)
                info = s.info("backend")
                self.assertGreaterEqual(int(info["backend_timeouts"]), 1)
                self.assertEqual(info["backend_status"], "down")
                self.assertEqual(info["backend_last_error"],
                                 "no answer within --backend-timeout 50 ms")
            finally:
                r.resume()
            self.wait_status(s, "up")
            self.assertEqual(self.allow(c, "st", 4, BASE), [1, 4, 2, 0, W, 0])
        self.assertGreaterEqual(int(s.info("backend")["backend_reconnects"]), 1)

    def test_redis_restarted_decisions_return(self):
        d = tempfile.mkdtemp(prefix="sluice-aof-")
        self.addCleanup(shutil.rmtree, d, True)
        r = self.redis(appendonly_dir=d)
        # a backend timeout far beyond the test's (a stopped Redis refuses at
        # once): the default 50 ms ran out once on a loaded machine at the
        # first request after the restart, and the policy's deny answered
        s = self.node(r, "--threads", "1", "--backend-timeout", "30s")
        with s.raw(timeout=30) as c:
            self.assertEqual(self.allow(c, "rk", 5, BASE), [1, 5, 4, 0, W, 0])
            self.assertEqual(self.allow(c, "rk", 5, BASE), [1, 5, 3, 0, W, 0])
            r.stop()
            self.wait_status(s, "down")
            self.assertEqual(self.allow(c, "rk", 5, BASE), [0, 5, 0, 1000, 1000, 0])
            r.start()
            self.wait_status(s, "up")
            # the count continues in Redis (its append-only file kept it)
            self.assertEqual(self.allow(c, "rk", 5, BASE), [1, 5, 2, 0, W, 0])
        self.assertEqual(fw_count(r, "sl:00:{rk}"), 3)
        self.assertGreaterEqual(int(s.info("backend")["backend_reconnects"]), 1)
        self.assertIn("Redis backend up: decisions go to Redis", s.log())

    def test_redis_error_replies(self):
        r = self.redis()
        s = self.node(r, "--threads", "1")
        with s.raw() as c:
            self.assertEqual(self.allow(c, "oom", 4, BASE), [1, 4, 3, 0, W, 0])
            r.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
            r.cmd("CONFIG", "SET", "maxmemory", "1")
            self.assertEqual(self.allow(c, "oom", 4, BASE), [0, 4, 0, 1000, 1000, 0])
            info = s.info("backend")
            # Redis's words, as it wrote them from inside the script
            self.assertIn("OOM command not allowed when used memory > 'maxmemory'",
                          info["backend_last_error"])
            self.assertEqual(info["backend_errors"], "1")
            self.assertEqual(info["backend_fallback_deny"], "1")
            self.assertEqual(info["backend_status"], "up")  # an error reply is not a lost Redis
            r.cmd("CONFIG", "SET", "maxmemory", "0")
            self.assertEqual(self.allow(c, "oom", 4, BASE), [1, 4, 2, 0, W, 0])
            # the script flushed: NOSCRIPT, loaded again, the request sent again
            self.assertEqual(r.cmd("SCRIPT", "FLUSH"), b"OK")
            self.assertEqual(self.allow(c, "oom", 4, BASE), [1, 4, 1, 0, W, 0])
            self.assertEqual(self.allow(c, "oom", 4, BASE), [1, 4, 0, 0, W, 0])
            self.assertEqual(s.info("backend")["backend_errors"], "1")
        self.assertIn(b"errorstat_NOSCRIPT:count=1\r\n", r.cmd("INFO", "errorstats"))

    def test_noscript_resend_keeps_a_reset_in_order(self):
        """Redis lost the script (SCRIPT FLUSH) while a pipelined RL.ALLOW,
        RL.RESET, RL.ALLOW of one key were in flight: the decisions sent
        again after loading it still come before and after the reset, as
        sent (RL.RESET goes through the script too, so it is sent again in
        its place: a bare DEL ran before the resent decision and the key
        kept its charge)."""
        r = self.redis()
        s = self.node(r, "--threads", "1", "--deny-cache", "off", "--backend-timeout", "30s")
        with s.raw(timeout=30) as c:
            self.assertEqual(self.allow(c, "nk", 4, BASE), [1, 4, 3, 0, W, 0])
            self.assertEqual(c.cmd("RL.RESET", "nk"), 1)
            self.assertEqual(r.cmd("SCRIPT", "FLUSH"), b"OK")
            burst = [("RL.ALLOW", "nk", "4", "10s", "ALGO", "fixed-window", "AT", str(BASE)),
                     ("RL.RESET", "nk"),
                     ("RL.ALLOW", "nk", "4", "10s", "ALGO", "fixed-window", "AT", str(BASE))]
            c.send(b"".join(harness.encode(*cmd) for cmd in burst))
            got = [c.read_reply(timeout=30) for _ in burst]
            self.assertEqual(got, [[1, 4, 3, 0, W, 0], 1, [1, 4, 3, 0, W, 0]])
            self.assertEqual(self.allow(c, "nk", 4, BASE), [1, 4, 2, 0, W, 0])
        self.assertEqual(s.info("backend")["backend_errors"], "0")
        self.assertIn(b"errorstat_NOSCRIPT:count=", r.cmd("INFO", "errorstats"))

    # -- bad configuration --

    def run_sluiced(self, *args):
        p = harness.run_checked([SLUICED, "--port", "0", "--http-port", "0"] + list(args),
                                capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_bad_urls(self):
        cases = [
            ("redis://127.0.0.1:0", "'redis://127.0.0.1:0': the port must be a number 1..65535"),
            ("redis://127.0.0.1:65536", "the port must be a number 1..65535"),
            ("redis://127.0.0.1:6379/x", "the db must be a number 0..2147483647"),
            ("redis://127.0.0.1:6379/", "missing db number after '/'"),
            ("redis://:6379", "missing host"),
            ("redis://user@127.0.0.1:6379", "the part before '@' must be user:password"),
            ("redis://[::1]:6379x", "the port must be a number 1..65535"),
            ("rediss://127.0.0.1:6379", "TLS to Redis (rediss://) is not supported"),
        ]
        for url, want in cases:
            rc, err = self.run_sluiced("--backend", url)
            self.assertEqual(rc, 2, (url, err))
            self.assertIn("sluiced: invalid --backend ", err)
            self.assertIn(want, err, url)
        # a scheme --backend does not take, or none: every form it takes
        for value, want in [
                ("http://127.0.0.1:6379", "'http://127.0.0.1:6379': unknown scheme 'http://'"),
                ("redis+sentinel://u:s3cret@h", "'redis+sentinel://...': unknown scheme "
                 "'redis+sentinel://'"),
                ("127.0.0.1:6379", "'127.0.0.1:6379': no scheme"),
                ("http://a:1,redis://b:2", "element 1 of 2: 'http://a:1': unknown scheme "
                 "'http://'")]:
            rc, err = self.run_sluiced("--backend", value)
            self.assertEqual((rc, err), (2, "sluiced: invalid --backend %s: %s\n"
                                         "Try 'sluiced --help'.\n" % (want, FORMS)), value)
        rc, err = self.run_sluiced("--backend", "redis://u:s3cret@127.0.0.1:99999")
        self.assertEqual(rc, 2, err)
        self.assertIn("invalid --backend 'redis://***@127.0.0.1:99999': the port", err)
        self.assertNotIn("s3cret", err)

    def test_unreachable_and_wrong_password(self):
        port = harness.free_port()
        rc, err = self.run_sluiced("--backend", "redis://127.0.0.1:%d" % port)
        self.assertEqual(rc, 1, err)
        # said once, in the log, with what happens next
        self.assertEqual(err.count("cannot connect to Redis"), 1, err)
        self.assertIn(' level=error msg="cannot use the backend: refusing to start" '
                      'err="cannot connect to Redis at redis://127.0.0.1:%d/0: Connection refused" '
                      'hint="sluiced does not retry at start: start Redis or correct --backend, '
                      'then start sluiced again (once running, it reconnects by itself and '
                      'answers by --on-backend-error while Redis is down)"\n' % port, err)
        r = self.redis(password="right-one")
        rc, err = self.run_sluiced("--backend", r.url("wrong-one"))
        self.assertEqual(rc, 1, err)
        self.assertEqual(err.count("refused AUTH"), 1, err)
        self.assertIn('err="Redis at redis://:***@127.0.0.1:%d/0 refused AUTH (wrong user or '
                      'password?): WRONGPASS' % r.port, err)
        self.assertNotIn("wrong-one", err)
        # the right one works
        s = Server("--backend", r.url("right-one"), trust_client_time=True, name="right_password")
        s.start()
        self.addCleanup(s.cleanup)
        self.wait_status(s, "up")
        with s.raw() as c:
            self.assertEqual(self.allow(c, "pw", 2, BASE), [1, 2, 1, 0, W, 0])

    # -- no :port: Redis's own, 6379 --

    def on_6379(self, cluster=False):
        r = RedisOn6379(cluster=cluster).start()
        self.addCleanup(r.cleanup)
        return r

    def test_a_url_without_port_means_6379(self):
        r = self.on_6379()
        s = self.node_at("redis://%s" % r.host)
        info = s.info("backend")
        self.assertEqual((info["backend_url"], info["backend_status"]),
                         ("redis://%s:6379/0" % r.host, "up"))
        with s.raw() as c:
            self.assertEqual(self.allow(c, "p", 3, BASE), [1, 3, 2, 0, W, 0])
        self.assertEqual(fw_count(r, "sl:00:{p}"), 1)

    def test_a_ring_without_ports_means_6379_each(self):
        a, b = self.on_6379(), self.on_6379()
        s = self.node_at("redis://%s,redis://%s/2" % (a.host, b.host))
        info = s.info("backend")
        self.assertEqual((info["backend_nodes"], info["backend_status"]), ("2", "up"))
        self.assertTrue(info["backend_node0"].startswith(
            "url=redis://%s:6379/0,status=up," % a.host), info)
        self.assertTrue(info["backend_node1"].startswith(
            "url=redis://%s:6379/2,status=up," % b.host), info)

    def test_cluster_seeds_and_ipv6_without_ports_mean_6379(self):
        r = self.on_6379(cluster=True)
        self.assertEqual(r.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383"), b"OK")
        until = harness.deadline(20)
        while b"cluster_state:ok" not in r.cmd("CLUSTER", "INFO") and time.monotonic() < until:
            time.sleep(0.05)
        s = self.node_at("redis-cluster://%s" % r.host)
        info = s.info("backend")
        self.assertEqual((info["backend_url"], info["backend_status"]),
                         ("redis-cluster://%s:6379" % r.host, "up"))
        with s.raw() as c:
            self.assertEqual(self.allow(c, "p", 3, BASE), [1, 3, 2, 0, W, 0])
        self.assertEqual(fw_count(r, "sl:00:{p}"), 1)
        # [::1] (its 6379 may be another's: the value sluiced would use is read)
        p = harness.run_checked([SLUICED, "--backend", "redis://[::1]", "--dump-options"],
                                capture_output=True, timeout=30 * SLOW)
        row = [l for l in p.stdout.decode().splitlines() if l.startswith("backend\t")]
        self.assertEqual(row[0].split("\t")[5], "redis://[::1]:6379/0")

    def node_at(self, url):
        s = Server("--backend", url, trust_client_time=True, name=self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        self.wait_status(s, "up")
        return s

    # -- the module, found or not: said once per server --

    def path_lines(self, s):
        return re.findall(r"level=\w+ msg=\"[^\"]*(?:sluice module|Lua script)[^\n]*", s.log())

    def test_the_log_says_module_or_script_once_per_server(self):
        rm = self.redis(module_args=["trust-client-time", "yes"])
        rs = self.redis()
        s = self.node(rm, "--threads", "2")
        self.assertEqual(self.path_lines(s), [
            'level=info msg="sluice module found: decisions use its RL.* commands" '
            'url=redis://127.0.0.1:%d/0' % rm.port])
        s = Server("--backend", "%s,%s" % (rm.url(), rs.url()), "--threads", "2",
                   trust_client_time=True, name="ring_paths")
        s.start()
        self.addCleanup(s.cleanup)
        # up: every connection (two a server) has made its handshake
        self.wait_status(s, "up")
        self.assertEqual(self.path_lines(s), [
            'level=info msg="sluice module found: decisions use its RL.* commands" '
            'url=redis://127.0.0.1:%d/0' % rm.port,
            'level=info msg="no sluice module: decisions use the Lua script" '
            'url=redis://127.0.0.1:%d/0' % rs.port])

    def test_a_module_it_cannot_use_is_said_with_why(self):
        rm = self.redis(module_args=[])  # no trust-client-time: AT refused
        s = self.node(rm)
        self.assertEqual(self.path_lines(s), [
            'level=warn msg="sluice module not usable: decisions use the Lua script" '
            'url=redis://127.0.0.1:%d/0 why="RL.PEEK: ERR AT is refused: this server decides at '
            'its own clock (load the sluice module with trust-client-time yes to accept client '
            'times)"' % rm.port])

    def test_a_module_loaded_later_is_said_at_the_reconnect(self):
        r = self.redis(loadable=True)
        s = self.node(r, "--threads", "2")
        self.assertEqual(r.cmd("MODULE", "LOAD", harness.MODULE, "trust-client-time", "yes"),
                         b"OK")
        r.cmd("CLIENT", "KILL", "TYPE", "normal")
        found = ('level=warn msg="sluice module found: decisions use its RL.* commands" '
                 'url=redis://127.0.0.1:%d/0 changed=yes' % r.port)
        until = harness.deadline(20 * SLOW)
        while found not in self.path_lines(s) and time.monotonic() < until:
            time.sleep(0.02)
        self.wait_status(s, "up")
        until = harness.deadline(20 * SLOW)  # every connection back, on the module
        while s.info("backend").get("backend_redis_path") != "module" and time.monotonic() < until:
            time.sleep(0.02)
        self.assertEqual(s.info("backend")["backend_redis_path"], "module")
        self.assertEqual(self.path_lines(s), [
            'level=info msg="no sluice module: decisions use the Lua script" '
            'url=redis://127.0.0.1:%d/0' % r.port, found])


if __name__ == "__main__":
    unittest.main()
