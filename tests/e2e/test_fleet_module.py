"""test_fleet_module.py -- sluiced's Redis backend through the sluice module
(docs/module.md, "sluiced's Redis backend"): against a redis-server that
has build/sluice.so loaded, sluiced sends the module's commands
(RL.ALLOW, RL.PEEK, RL.DECIDEALL, RL.CHECKPLAN, RL.RESET) instead of the
script's EVALSHA, and says so in INFO (backend_redis_path).

What a user would notice:
- the same trace of RL.ALLOW / RL.PEEK / RL.RESET / RL.CHECK requests
  (every algorithm, client time running forwards and back) gets the same
  replies from sluiced on the module, sluiced on the scripts and a local
  sluiced;
- parameters past the script's exact range (docs/redis-scripts.md) are
  refused on the script path and answered exactly on the module's;
- each Redis holds only its own path's keys (sl:m... of type sluice-rl on
  the module, the script's sl:<algo><space>: keys on the other);
- a module loaded into a Redis sluiced is connected to takes effect when
  sluiced reconnects.
"""
# A heavy fleet test: run once, against the plain build (run_e2e.py).
# sluice-e2e: plain-only

import random
import shutil
import tempfile
import os
import time
import unittest

import harness
from harness import BASE, RespError

ALGOS = ["fixed-window", "sliding-log", "sliding-window", "sliding-buckets", "token-bucket",
         "gcra", "leaky-bucket"]
RULES = ("domain: fm\n"
         "descriptors:\n"
         "  - key: user\n"
         "    rate_limit:\n"
         "      - {unit: second, requests_per_unit: 4}\n"
         "      - {unit: minute, requests_per_unit: 9}\n")
STEPS = 250 if harness.SANITIZED else 900


def wait_path(node, want, timeout=20):
    """Polls sluiced's INFO backend until backend_redis_path is `want`
    (bounded); returns the last INFO."""
    until = harness.deadline(timeout * harness.SLOW)
    while True:
        info = node.info("backend")
        if info.get("backend_redis_path") == want or time.monotonic() >= until:
            return info
        time.sleep(0.02)


def redis_keys(r):
    return sorted(r.cmd("KEYS", "*"))


class ModuleBackendTest(unittest.TestCase):

    def redis(self, **kw):
        r = harness.RedisServer(**kw).start()
        self.addCleanup(r.cleanup)  # stops it and scans its log (harness.REDIS_MARKS)
        return r

    def node(self, *args, trust=True, name="", http=False):
        s = harness.Server(*args, trust_client_time=trust, name="%s-%s" % (self.id(), name),
                           http=http)
        s.start()
        self.addCleanup(s.cleanup)
        return s

    def rules(self):
        d = tempfile.mkdtemp(prefix="sluice-fm-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "fm.yaml")
        with open(path, "w") as f:
            f.write(RULES)
        return path

    def three(self):
        """sluiced on the module, on the scripts, and local, with the same
        rules; the two Redis servers."""
        rm = self.redis(module_args=["trust-client-time", "yes", "max-client-skew", "0",
                                     "max-memory", "0"])
        rs = self.redis()
        rules = self.rules()
        common = ("--backend-timeout", "5s", "--rules", rules, "--threads", 2)
        nm = self.node("--backend", rm.url(), *common, name="module", http=True)
        ns = self.node("--backend", rs.url(), *common, name="script", http=True)
        nl = self.node("--rules", rules, name="local")
        return rm, rs, nm, ns, nl

    def test_same_replies_as_the_scripts_and_local(self):
        rm, rs, nm, ns, nl = self.three()
        self.assertEqual(wait_path(nm, "module")["backend_redis_path"], "module")
        self.assertEqual(nm.info("backend")["backend_name"], "redis")
        self.assertEqual(wait_path(ns, "script")["backend_redis_path"], "script")
        rng = random.Random(0x6d6f64)
        t = BASE
        trace = []
        for _ in range(STEPS):
            t += rng.choice([0, 1, 7, 50, 400, 3000, -200])  # client time, also backwards
            key = rng.choice(["a", "b", "c{x}", "d\x00e"])
            algo = rng.choice(ALGOS)
            L = rng.choice([1, 3, 10])
            W = rng.choice([1000, 5000])
            op = rng.random()
            if op < 0.06:
                trace.append(["RL.RESET", key] + (["ALGO", algo] if rng.random() < 0.5 else []))
                continue
            if op < 0.16:
                trace.append(["RL.CHECK", "fm", "AT", t, "COST", rng.choice([1, 2]),
                              "DESCRIPTOR", "user", rng.choice(["u1", "u2"])])
                continue
            cmd = ["RL.PEEK" if op < 0.3 else "RL.ALLOW", key, L, W, "ALGO", algo,
                   "COST", rng.choice([0, 1, 1, 1, 2, L + 1]), "AT", t]
            if algo in ("token-bucket", "gcra", "leaky-bucket") and rng.random() < 0.3:
                cmd += ["BURST", L * 2]
            if algo == "sliding-buckets" and rng.random() < 0.3:
                cmd += ["PRECISION", rng.choice([2, 5])]
            if algo == "sliding-log" and rng.random() < 0.3:
                cmd += ["LOGREJECTED"]
            trace.append(cmd)
        replies = {}
        for name, n in (("module", nm), ("script", ns), ("local", nl)):
            with n.raw(timeout=30) as c:
                replies[name] = [c.cmd(*cmd, timeout=30 * harness.SLOW) for cmd in trace]
        allowed = 0
        for i, cmd in enumerate(trace):
            self.assertFalse(isinstance(replies["local"][i], RespError), (cmd, replies["local"][i]))
            self.assertEqual(replies["module"][i], replies["local"][i], "step %d: %r" % (i, cmd))
            self.assertEqual(replies["script"][i], replies["local"][i], "step %d: %r" % (i, cmd))
            allowed += cmd[0] == "RL.ALLOW" and replies["local"][i][0] == 1
        self.assertGreater(allowed, 0)
        # each Redis holds only its path's keys
        mkeys, skeys = redis_keys(rm), redis_keys(rs)
        self.assertTrue(mkeys and all(k.startswith(b"sl:m") for k in mkeys), mkeys[:5])
        self.assertIn(b"sl:m0:{a}", mkeys)
        self.assertIn(b"sl:m1:{fm}", [k[:10] for k in mkeys])
        self.assertEqual(rm.cmd("TYPE", "sl:m0:{a}"), b"sluice-rl")
        self.assertTrue(skeys and not any(k.startswith(b"sl:m") for k in skeys), skeys[:5])
        # every request went to Redis, none to the failure policy
        for n, conns in ((nm, 2), (ns, 0)):
            info = n.info("backend")
            self.assertEqual((info["backend_errors"], info["backend_fallback_deny"]), ("0", "0"))
            h = n.http_conn()
            h.request("GET", "/metrics")
            page = h.getresponse().read().decode()
            h.close()
            # two workers: a connection each, both on the module's path or neither
            self.assertIn("\nsluice_backend_module_connections %d\n" % conns, page)

    def test_exact_past_the_scripts_range(self):
        rm, rs, nm, ns, nl = self.three()
        wait_path(nm, "module")
        # B*W = 3e9 * 3.6e6 = 1.08e16 > 2^53: the script refuses, the module
        # (128-bit) answers as the local engine
        for cmd in (["RL.ALLOW", "big", 3000000000, "1h", "ALGO", "token-bucket", "COST", 5,
                     "AT", BASE],
                    ["RL.ALLOW", "big", 3000000000, "1h", "ALGO", "token-bucket", "COST",
                     2999999990, "AT", BASE + 1],
                    ["RL.ALLOW", "big", 3000000000, "1h", "ALGO", "token-bucket", "COST", 7,
                     "AT", BASE + 2],
                    ["RL.ALLOW", "sw", 2600000000, "1h", "ALGO", "sliding-window", "COST", 9,
                     "AT", BASE]):
            want = nl.raw().cmd(*cmd)
            self.assertFalse(isinstance(want, RespError), want)
            self.assertEqual(nm.raw().cmd(*cmd), want, cmd)
            got = ns.raw().cmd(*cmd)
            self.assertIsInstance(got, RespError, cmd)
            self.assertIn("passes 2^53, the Redis backend's exact range", got.line)
            if cmd[7] == 2999999990:  # all but 10 of the bucket, to the token
                self.assertEqual(want[:3], [1, 3000000000, 10])  # 5 left, refilled to full first

    def test_module_loaded_later_takes_effect_on_reconnect(self):
        r = self.redis(loadable=True)
        n = self.node("--backend", r.url(), "--backend-timeout", "5s", trust=False, name="late")
        self.assertEqual(wait_path(n, "script")["backend_redis_path"], "script")
        self.assertEqual(n.raw().cmd("RL.ALLOW", "k", 5, "1h"), [1, 5, 4, 0, 720000, 0])
        self.assertEqual(redis_keys(r), [b"sl:40:{k}"])
        self.assertEqual(r.cmd("MODULE", "LOAD", harness.MODULE), b"OK")
        # still the script: the path is found at connect
        self.assertEqual(n.raw().cmd("RL.ALLOW", "k", 5, "1h")[:3], [1, 5, 3])
        self.assertEqual(n.info("backend")["backend_redis_path"], "script")
        # sluiced's connections dropped: it reconnects and finds the module
        r.cmd("CLIENT", "KILL", "TYPE", "normal")
        info = wait_path(n, "module")
        self.assertEqual(info["backend_redis_path"], "module")
        self.assertEqual(n.info("backend")["backend_status"], "up")
        # a key new to the module's namespace: its state starts afresh there
        self.assertEqual(n.raw().cmd("RL.ALLOW", "k", 5, "1h"), [1, 5, 4, 0, 720000, 0])
        self.assertEqual(r.cmd("TYPE", "sl:m0:{k}"), b"sluice-rl")
        self.assertEqual(sorted(redis_keys(r)), [b"sl:40:{k}", b"sl:m0:{k}"])

    def test_a_module_refusing_client_time_leaves_the_scripts(self):
        # a module that refuses client time is not used by a node that
        # trusts client time: the scripts take AT as the node does
        rm = self.redis(module_args=[])
        n = self.node("--backend", rm.url(), "--backend-timeout", "5s", name="no-at")
        self.assertEqual(wait_path(n, "script")["backend_redis_path"], "script")
        self.assertEqual(n.raw().cmd("RL.ALLOW", "k", 5, "1h", "AT", BASE),
                         [1, 5, 4, 0, 720000, 0])
        self.assertEqual(redis_keys(rm), [b"sl:40:{k}"])


if __name__ == "__main__":
    unittest.main()
