"""test_cluster.py -- sluiced on a Redis Cluster (--backend
redis-cluster://...: docs/fleet.md, "Redis Cluster"), against a real
3-master cluster the tests start on free loopback ports and stop by PID
(harness.RedisCluster):

  - keys spread over every master, each on the master that serves its
    slot (Redis's own CLUSTER KEYSLOT); INFO prints the masters;
  - the backend conformance suite (tests/test_backend.c's redis-cluster
    row) passes through the cluster;
  - RL.CHECK with the elastic pool is one slot: every key of a domain,
    the pool's too, on its master, and the answers a local node gives;
  - a slot migrated (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT
    NODE) while a client hammers a key in it: ASK and MOVED are followed,
    no decision is lost, none admitted past the limit;
  - a master killed: its slots' decisions follow --on-backend-error, the
    other masters' stay exact;
  - every slot of a master resharded away, then the master stopped: the
    new map is followed, counts continue exactly, the backend stays up;
  - bad URLs and unreachable seeds: a clear message.

Times are the caller's (AT, --trust-client-time), so every reply is exact.
"""
# A heavy fleet test: run once, against the plain build (run_e2e.py).
# sluice-e2e: plain-only

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import BASE, BUILD, SANITIZED, SLOW, SLUICED, RedisCluster, Server

W = 10000  # the window of every limit here, ms

RULES = """domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2, elastic: 4, name: tenant}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, name: shadowed}
"""


def redis_key(key, algo=0, space=0):
    """The Redis key of an RL.ALLOW counter (docs/redis-scripts.md)."""
    return "sl:%d%d:{%s}" % (algo, space, key)


class ClusterTest(unittest.TestCase):

    def cluster(self, module_args=None):
        c = RedisCluster(3, module_args=module_args).start()
        self.addCleanup(c.cleanup)
        return c

    def node(self, c, *args, name=None):
        # --backend-timeout 5s unless the test sets one: the default 50 ms
        # is a bet a loaded machine loses (a sanitized build beside a CPU
        # hog, nodes busy after a reshard), answering by the policy instead
        if "--backend-timeout" not in args:
            args = ("--backend-timeout", "5s") + args
        s = Server("--backend", c.url(), *args, trust_client_time=True,
                   name=name or self.id().split(".")[-1])
        s.start()
        self.addCleanup(s.cleanup)
        s.wait_section("backend", lambda i: i.get("backend_status") == "up", "backend up")
        return s

    @staticmethod
    def allow(conn, key, limit, at):
        return conn.cmd("RL.ALLOW", key, str(limit), "10s", "ALGO", "fixed-window", "AT", str(at))

    def test_keys_spread_over_every_master(self):
        c = self.cluster()
        s = self.node(c)
        info = s.info("backend")
        self.assertEqual(info["backend_url"], c.url())
        self.assertEqual(info["backend_nodes"], "3")
        ports = set()
        shares = 0.0
        for i in range(3):
            fields = dict(f.split("=", 1) for f in info["backend_node%d" % i].split(","))
            self.assertEqual(fields["status"], "up")
            port = int(fields["url"].rsplit(":", 1)[1].split("/")[0])
            ports.add(port)
            shares += float(fields["share"])
            mine = next(r for r in c.nodes if r.port == port)
            self.assertEqual(int(fields["slots"]), sum(e[1] - e[0] + 1 for e in
                                                       mine.cmd("CLUSTER", "SLOTS")
                                                       if e[2][1] == port))
        self.assertEqual(ports, {r.port for r in c.nodes})
        self.assertAlmostEqual(shares, 100.0, delta=0.05)
        keys = ["user:%d" % i for i in range(60)]
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, 5, BASE), [1, 5, 4, 0, W, 0], k)
                self.assertEqual(self.allow(conn, k, 5, BASE), [1, 5, 3, 0, W, 0], k)
        held = {}
        for k in keys:
            owner = c.node_of_slot(c.keyslot(redis_key(k)))
            self.assertEqual(owner.cmd("GET", redis_key(k)), ("%d 2" % BASE).encode(), k)
            held.setdefault(owner.port, 0)
            held[owner.port] += 1
        self.assertEqual(set(held), ports)  # every master holds some
        self.assertEqual(sum(r.cmd("DBSIZE") for r in c.nodes), len(keys))
        self.assertEqual(s.info("backend")["backend_errors"], "0")
        # every key was sent to its master first: sluiced's slot of each is
        # Redis's (a wrong one would have been answered MOVED)
        for r in c.nodes:
            self.assertNotIn(b"errorstat_MOVED", r.cmd("INFO", "errorstats"))

    def test_conformance_suite_through_the_cluster(self):
        c = self.cluster()
        env = dict(os.environ, SLUICE_REDIS_CLUSTER=c.url(), SLUICE_TEST_FILTER="redis-cluster_*")
        env.setdefault("SLUICE_SPEC_DIR", harness.spec_dir())
        p = subprocess.run([os.path.join(BUILD, "tests", "test_backend")], env=env,
                           capture_output=True, timeout=600 * SLOW, stdin=subprocess.DEVNULL)
        out = p.stdout.decode("utf-8", "replace") + p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, out[-4000:])
        for part in ("vectors", "model", "check", "errors", "stats"):
            self.assertIn("[       OK ] redis-cluster_%s\n" % part, out)
        self.assertIn("[  PASSED  ] 5 test(s).", out)

    def test_check_with_the_pool_is_one_slot(self):
        self.check_pool_one_slot(None)

    def test_check_with_the_pool_is_one_slot_on_the_module(self):
        """The same through the module's RL.CHECKPLAN: its pool key too
        carries the domain's tag, or Redis refuses the call (CROSSSLOT)."""
        self.check_pool_one_slot(["trust-client-time", "yes", "max-client-skew", "0"])

    def check_pool_one_slot(self, module_args):
        d = tempfile.mkdtemp(prefix="sluice-rules-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "api.yaml")
        with open(path, "w") as f:
            f.write(RULES)
        c = self.cluster(module_args)
        common = ("--rules", path, "--capacity", "3/1m")
        s = self.node(c, *common)
        ref = Server(*common, trust_client_time=True, name="check_local")
        ref.start()
        self.addCleanup(ref.cleanup)
        kvs = [("user", "bob"), ("user", "ann"), ("tenant", "t1"), ("tenant", "t2"),
               ("shadow", "s"), ("nomatch", "q")]
        denied = stretched = 0
        t = BASE
        with s.raw() as cs, ref.raw() as cr:
            for i in range(40 if SANITIZED else 120):  # a fixed pseudo-random sequence
                x = (i * 7919 + 13) % 1009
                t += (x % 7) * 900
                args = ["RL.CHECK", "api", "AT", str(t), "COST", "1" if x % 10 else "2"]
                for j in range(1 + x % 3):
                    args += ["DESCRIPTOR"] + list(kvs[(x + j * 3) % len(kvs)])
                want = cr.cmd(*args)
                self.assertEqual(cs.cmd(*args), want, "request %d: %s" % (i, args))
                denied += want[0] == 0
                stretched += b"ELASTIC" in repr(want).encode()
        self.assertGreater(denied, 0)
        # every key of the domain, the pool's too, on the master of "api"'s slot
        home = c.node_of_slot(c.keyslot("api"))
        keys = {k.decode() for k in home.cmd("KEYS", "sl:*")}
        self.assertTrue(any(k.endswith("}|spare-capacity") for k in keys), keys)
        for k in keys:
            self.assertTrue(k.startswith("sl:") and k[3:].split(":", 1)[1].startswith("{api}"), k)
        for r in c.nodes:
            if r is not home:
                self.assertEqual(r.cmd("KEYS", "sl:*"), [])
        self.assertEqual(s.info("backend")["backend_errors"], "0")
        self.assertEqual(s.info("backend")["backend_redis_path"],
                         "script" if module_args is None else "module")

    def test_slot_migrated_under_load(self):
        c = self.cluster()
        s = self.node(c, "--deny-cache", "no")  # every decision to Redis: MOVED is seen
        key, hot = "mig", "mig}h"  # Redis keys sl:00:{mig} and sl:00:{mig}h}: one slot
        slot = c.keyslot(redis_key(key))
        self.assertEqual(c.keyslot(redis_key(hot)), slot)
        src = c.node_of_slot(slot)
        dst = next(r for r in c.nodes if r is not src)
        src_id, dst_id = src.cmd("CLUSTER", "MYID").decode(), dst.cmd("CLUSTER", "MYID").decode()
        L, HL = 40, 10 ** 6
        hmax = 1500 if SANITIZED else 6000
        done = threading.Event()
        started = threading.Event()
        bad, sent = [], [0]
        ended = []  # how the hammer ended: "done" (told to), "all" (hmax sent) or its exception

        burst = harness.encode("RL.ALLOW", hot, str(HL), "10s", "ALGO", "fixed-window", "AT",
                               str(BASE)) * 16

        def hammer():  # bursts of 16 pipelined: batches of one slot, redirected whole
            try:
                with s.raw() as conn:
                    for i in range(0, hmax, 16):
                        conn.send(burst)
                        for j, got in enumerate(conn.read_replies(16, timeout=30 * SLOW)):
                            if got != [1, HL, HL - 1 - i - j, 0, W, 0]:
                                bad.append((i + j, got))
                        sent[0] = i + 16
                        started.set()
                        if done.is_set():
                            ended.append("done")
                            return
                ended.append("all")
            except BaseException as e:  # noqa: BLE001 -- the main thread asserts on it
                ended.append("died after %d replies: %r" % (sent[0], e))

        th = threading.Thread(target=hammer)
        th.start()
        answers = []
        try:
            self.assertTrue(started.wait(30 * SLOW), "the hammer never got an answer")
            with s.raw() as conn:
                def ten():
                    for _ in range(10):
                        answers.append(self.allow(conn, key, L, BASE))
                ten()  # on the source
                self.assertEqual(dst.cmd("CLUSTER", "SETSLOT", str(slot), "IMPORTING", src_id), b"OK")
                self.assertEqual(src.cmd("CLUSTER", "SETSLOT", str(slot), "MIGRATING", dst_id), b"OK")
                ten()  # the keys still on the source: it answers
                names = src.cmd("CLUSTER", "GETKEYSINSLOT", str(slot), "100")
                self.assertEqual(sorted(names), sorted([redis_key(key).encode(),
                                                        redis_key(hot).encode()]))
                self.assertEqual(src.cmd("MIGRATE", "127.0.0.1", str(dst.port), "", "0", "5000",
                                         "KEYS", *names), b"OK")
                ten()  # gone from the source: ASK, then ASKING on the target
                for r in (dst, src) + tuple(n for n in c.nodes if n not in (src, dst)):
                    self.assertEqual(r.cmd("CLUSTER", "SETSLOT", str(slot), "NODE", dst_id), b"OK")
                ten()  # the source says MOVED: the map follows
                ten()
        finally:
            done.set()
            th.join(60 * SLOW)
        self.assertFalse(th.is_alive())
        self.assertEqual(bad, [], "the hammer's replies that were not exact")
        # it ended as told (or having sent all it had), every reply read:
        # a hammer that died (a reply missing, a connection closed) fails
        self.assertIn(ended, (["done"], ["all"]), "the hammer")
        if ended == ["all"]:
            self.assertEqual(sent[0], -(-hmax // 16) * 16, "the hammer's replies read")
        for i, got in enumerate(answers):
            want = [1, L, L - 1 - i, 0, W, 0] if i < L else [0, L, 0, W, W, 0]
            self.assertEqual(got, want, "request %d of %d" % (i, len(answers)))
        self.assertEqual(len(answers), 50)
        # the redirections happened and were followed, nothing by the policy
        errs = src.cmd("INFO", "errorstats").decode()
        self.assertIn("errorstat_ASK:count=", errs)
        self.assertIn("errorstat_MOVED:count=", errs)
        self.assertIn("cmdstat_asking:calls=", dst.cmd("INFO", "commandstats").decode())
        info = s.info("backend")
        self.assertEqual(info["backend_fallback_deny"], "0")
        self.assertEqual(dst.cmd("GET", redis_key(key)), ("%d %d" % (BASE, L)).encode())
        self.assertEqual(src.cmd("DBSIZE"), 0)  # (EXISTS there would answer MOVED)

    def test_a_master_killed_its_slots_follow_the_policy(self):
        c = self.cluster()
        s = self.node(c, "--on-backend-error", "deny", "--backend-timeout", "500ms")
        keys = ["tenant:%d" % i for i in range(45)]
        owner = {k: c.node_of_slot(c.keyslot(redis_key(k))) for k in keys}
        victim = c.nodes[1]
        self.assertTrue(any(o is victim for o in owner.values()))
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, 5, BASE), [1, 5, 4, 0, W, 0], k)
        victim.kill()
        node = "url=redis://127.0.0.1:%d/0,status=down" % victim.port
        s.wait_section("backend", lambda i: any(v.startswith(node) for n, v in i.items()
                                        if n.startswith("backend_node")), "the master down")
        denied = 0
        with s.raw() as conn:
            for k in keys:
                got = self.allow(conn, k, 5, BASE + 1)
                if owner[k] is victim:  # --on-backend-error deny
                    self.assertEqual(got, [0, 5, 0, 1000, 1000, 0], k)
                    denied += 1
                else:
                    self.assertEqual(got, [1, 5, 3, 0, W - 1, 0], k)
        self.assertEqual(s.info_int("backend_fallback_deny", "backend"), denied)
        self.assertEqual(s.info("backend")["backend_status"], "down")

    def test_a_master_emptied_then_stopped_is_not_missed(self):
        """Every slot of a master resharded away (redis-cli --cluster
        reshard): sluiced follows MOVED to the new map, counts continue
        exactly; the emptied master stopped, nothing is by the policy and
        the backend stays up (that master serves nothing)."""
        c = self.cluster()
        s = self.node(c, "--deny-cache", "no")
        victim, to = c.nodes[2], c.nodes[0]
        keys = ["org:%d" % i for i in range(45)]
        moved = [k for k in keys if c.node_of_slot(c.keyslot(redis_key(k))) is victim]
        self.assertTrue(moved)
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, 5, BASE), [1, 5, 4, 0, W, 0], k)
        vid, tid = victim.cmd("CLUSTER", "MYID").decode(), to.cmd("CLUSTER", "MYID").decode()
        p = subprocess.run(["redis-cli", "--cluster", "reshard", "127.0.0.1:%d" % to.port,
                            "--cluster-from", vid, "--cluster-to", tid, "--cluster-slots",
                            "16384", "--cluster-yes"], capture_output=True,
                           timeout=120 * SLOW, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        until = harness.deadline(30 * SLOW)
        while any(e[2][1] == victim.port for r in c.nodes for e in r.cmd("CLUSTER", "SLOTS")):
            self.assertLess(time.monotonic(), until, "the victim still serves slots")
            time.sleep(0.05)
        self.assertEqual(victim.cmd("DBSIZE"), 0)
        with s.raw() as conn:
            for k in keys:  # the moved ones through MOVED, then the new map
                self.assertEqual(self.allow(conn, k, 5, BASE + 1), [1, 5, 3, 0, W - 1, 0], k)
        node = "url=redis://127.0.0.1:%d/0,status=up,share=0.00,slots=0" % victim.port
        s.wait_section("backend", lambda i: node in i.values(), "the victim's share at 0")
        victim.stop()
        node = "url=redis://127.0.0.1:%d/0,status=down,share=0.00,slots=0" % victim.port
        info = s.wait_section("backend", lambda i: node in i.values(), "the victim down")
        self.assertEqual(info["backend_status"], "up")
        with s.raw() as conn:
            for k in keys:
                self.assertEqual(self.allow(conn, k, 5, BASE + 2), [1, 5, 2, 0, W - 2, 0], k)
        info = s.info("backend")
        self.assertEqual(info["backend_fallback_deny"], "0")
        self.assertEqual(info["backend_status"], "up")

    def test_a_slot_without_a_master_then_served_again(self):
        """A slot dropped by every node (CLUSTER DELSLOTS): its master
        answers CLUSTERDOWN -- the policy answers, and the map is read
        again, after which that slot's decisions go to the policy without
        asking Redis; the slot given to another master (ADDSLOTS): the map
        is read again and decisions go there."""
        c = self.cluster()
        s = self.node(c, "--deny-cache", "no", "--on-backend-error", "deny")
        key = "lonely"
        slot = c.keyslot(redis_key(key))
        old = c.node_of_slot(slot)
        new = next(r for r in c.nodes if r is not old)
        policy = [0, 5, 0, 1000, 1000, 0]

        def served_by(r):  # every node agrees on the slot's master (None: no master)
            for n in c.nodes:
                owners = [e[2][1] for e in n.cmd("CLUSTER", "SLOTS") if e[0] <= slot <= e[1]]
                if owners != ([r.port] if r else []):
                    return False
            return True

        def wait(pred, what):
            until = harness.deadline(30 * SLOW)
            while not pred():
                self.assertLess(time.monotonic(), until, what)
                time.sleep(0.05)

        def share(r):  # INFO's line of r: its slots in the cluster's own map
            n = sum(e[1] - e[0] + 1 for e in r.cmd("CLUSTER", "SLOTS") if e[2][1] == r.port)
            return "url=redis://127.0.0.1:%d/0,status=up,share=%.2f,slots=%d" % (
                r.port, n * 100 / 16384, n)

        with s.raw() as conn:
            self.assertEqual(self.allow(conn, key, 5, BASE), [1, 5, 4, 0, W, 0])
            for r in c.nodes:
                self.assertEqual(r.cmd("CLUSTER", "DELSLOTS", str(slot)), b"OK")
            wait(lambda: served_by(None), "the slot dropped everywhere")
            self.assertEqual(self.allow(conn, key, 5, BASE), policy)  # CLUSTERDOWN
            self.assertIn(b"errorstat_CLUSTERDOWN:count=1\r\n", old.cmd("INFO", "errorstats"))
            want = share(old)
            s.wait_section("backend", lambda i: want in i.values(), "the map read again: %s" % want)
            self.assertEqual(self.allow(conn, key, 5, BASE), policy)  # not sent
            self.assertIn(b"errorstat_CLUSTERDOWN:count=1\r\n", old.cmd("INFO", "errorstats"))
            self.assertEqual(new.cmd("CLUSTER", "ADDSLOTS", str(slot)), b"OK")
            wait(lambda: served_by(new), "the slot served by its new master")
            got, tries = policy, 0
            while got == policy and tries < 200:  # each asks for the map again (bounded)
                got = self.allow(conn, key, 5, BASE)
                tries += 1
                if got == policy:
                    time.sleep(0.02)
            self.assertEqual(got, [1, 5, 4, 0, W, 0])  # fresh on its new master
        self.assertEqual(new.cmd("GET", redis_key(key)), ("%d 1" % BASE).encode())
        info = s.info("backend")
        self.assertEqual(info["backend_fallback_deny"], str(2 + tries - 1))
        self.assertEqual(info["backend_status"], "up")

    # -- bad configuration --

    def run_sluiced(self, *args):
        p = harness.run_checked([SLUICED, "--port", "0", "--http-port", "0"] + list(args),
                                capture_output=True, timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr.decode("utf-8", "replace")

    def test_bad_urls_and_unreachable_seeds(self):
        cases = [
            ("redis-cluster://", "invalid --backend 'redis-cluster://': expected "
             "redis-cluster://[user:password@]host[:port][,host[:port]...]"),
            ("redis-cluster://127.0.0.1:7000/0", "invalid --backend seed 1: "
             "'redis-cluster://127.0.0.1:7000/0': Redis Cluster has one db: no /db"),
            ("redis-cluster://127.0.0.1:7000,127.0.0.1:0", "invalid --backend seed 2: "
             "'redis-cluster://127.0.0.1:0': the port must be a number 1..65535"),
            ("redis-cluster://u:s3cret@127.0.0.1:x", "invalid --backend seed 1: "
             "'redis-cluster://***@127.0.0.1:x': the port must be a number 1..65535"),
        ]
        for url, want in cases:
            rc, err = self.run_sluiced("--backend", url)
            self.assertEqual(rc, 2, (url, err))
            self.assertIn(want, err, url)
            self.assertNotIn("s3cret", err)
        # --dump-options shows the seeds without the password
        p = harness.run_checked([SLUICED, "--backend", "redis-cluster://u:s3cret@127.0.0.1:7000,"
                            "[::1]:7001", "--dump-options"], capture_output=True,
                                timeout=30 * SLOW, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 0, p.stderr)
        row = [l for l in p.stdout.decode().splitlines() if l.split("\t")[0] == "backend"]
        self.assertEqual(len(row), 1)
        self.assertEqual(row[0].split("\t")[5], "redis-cluster://u:***@127.0.0.1:7000,[::1]:7001")
        port = harness.free_port()
        rc, err = self.run_sluiced("--backend", "redis-cluster://127.0.0.1:%d" % port)
        self.assertEqual(rc, 1, err)
        self.assertIn("cannot connect to Redis Cluster seed redis://127.0.0.1:%d/0" % port, err)


if __name__ == "__main__":
    unittest.main()
