"""--backend redis-sentinel:// (docs/fleet.md, "Redis Sentinel"): the master
found through Redis's own Sentinel (Debian's redis-server run as
`redis-server FILE.conf --sentinel`), and followed when the Sentinel
promotes a replica.

  - TestSentinelStart: a master with a password and a replica, one
    Sentinel monitoring the master (`m`) and, as if it were one, the
    replica (`r`): decisions through the master the Sentinel names (its
    password sent, never shown), INFO's Sentinel lines; the starts that are
    refused and their exact messages -- bad URLs, no Sentinel reachable, a
    name no Sentinel knows, a wrong password, a server named that is not a
    master (ROLE).
  - TestSentinelFailover: a master and a replica, one Sentinel (quorum 1,
    down-after 1 s), the URL naming a dead Sentinel first; the master
    killed with -9: the Sentinel promotes the replica and sluiced follows --
    decisions are made in Redis again (polled, bounded), with the state the
    replica had, and INFO and /metrics show the new master and one failover
    followed.

Every wait polls for an event with a deadline scaled by SLOW; nothing
asserts a duration.  Every process is stopped by its PID (RedisServer's
cleanup), and its log scanned.
"""
# sluice-e2e: plain-only
import http.client
import json
import os
import subprocess
import time
import unittest

import harness
from harness import HOST, SLOW, SLUICED, RedisServer, Server


class Sentinel(RedisServer):
    """A Redis Sentinel on a free loopback port: `redis-server FILE
    --sentinel`, FILE written here with a `sentinel monitor` line for each
    (name, host, port, quorum) of `monitors`, a short down-after and
    failover timeout, and `auth-pass` when the master has a password.
    Stopped and scanned as every RedisServer (by PID)."""

    def __init__(self, monitors, auth=None):
        super().__init__()
        self.monitors = monitors
        self.auth = auth

    def start(self, timeout=15):
        self.port = self.port or harness.free_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        lines = ["port %d" % self.port, "bind %s" % HOST, "protected-mode no",
                 "dir %s" % self.dir, "daemonize no"]
        for name, host, port, quorum in self.monitors:
            lines += ["sentinel monitor %s %s %d %d" % (name, host, port, quorum),
                      "sentinel down-after-milliseconds %s 1000" % name,
                      "sentinel failover-timeout %s 5000" % name,
                      "sentinel parallel-syncs %s 1" % name]
            if self.auth:
                lines.append("sentinel auth-pass %s %s" % (name, self.auth))
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["redis-server", conf, "--sentinel"],
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        until = harness.deadline(timeout)
        while time.monotonic() < until and self.proc.poll() is None:
            try:
                if self.cmd("PING") == b"PONG":
                    return self
            except (OSError, EOFError, TimeoutError):
                pass
            time.sleep(0.02)
        self.stop()
        raise AssertionError("redis-sentinel did not start: %s\n%s"
                             % ("; ".join(self.check()), self.log()[-4000:]))


def wait_until(what, pred, timeout=30):
    """Polls pred() (every 50 ms) until it is true; AssertionError naming
    what after timeout x SLOW seconds.  Returns pred()'s value."""
    until = harness.deadline(timeout)
    last = None
    while time.monotonic() < until:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError("%s: not within %gs (last: %r)" % (what, timeout * SLOW, last))


def replica_of(replica, master):
    """Makes replica a replica of master and waits until its link is up."""
    replica.cmd("REPLICAOF", HOST, str(master.port))
    wait_until("replica linked to its master",
               lambda: b"master_link_status:up" in replica.cmd("INFO", "replication"))


def run_sluiced(*args):
    p = harness.run_checked([SLUICED, "--port", "0", "--http-port", "0", "--grpc-port", "0"]
                            + list(args), capture_output=True, timeout=60 * SLOW,
                            stdin=subprocess.DEVNULL)
    return p.returncode, p.stderr.decode("utf-8", "replace")


FORM = "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name"


class TestSentinelStart(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.master = RedisServer(password="s3cret").start()
        cls.replica = RedisServer(password="s3cret").start()
        cls.replica.cmd("CONFIG", "SET", "masterauth", "s3cret")
        replica_of(cls.replica, cls.master)
        cls.sentinel = Sentinel([("m", HOST, cls.master.port, 1),
                                 ("r", HOST, cls.replica.port, 1)], auth="s3cret").start()

    @classmethod
    def tearDownClass(cls):
        problems = []
        for r in (cls.sentinel, cls.replica, cls.master):
            try:
                r.cleanup()
            except AssertionError as e:
                problems.append(str(e))
        if problems:
            raise AssertionError("\n".join(problems))

    def url(self, name="m", password="s3cret", sentinels=None):
        auth = ":%s@" % password if password else ""
        return "redis-sentinel://%s%s/%s" % (auth, sentinels or "%s:%d" % (HOST, self.sentinel.port),
                                            name)

    def test_decisions_through_the_master_named(self):
        s = Server("--backend", self.url(), name="sentinel_start")
        s.start()
        self.addCleanup(s.cleanup)
        with s.raw() as c:
            got = [c.cmd("RL.ALLOW", "start:k", "2", "60s")[0] for _ in range(3)]
        self.assertEqual(got, [1, 1, 0])
        # the decisions are in the master's Redis (the script's key)
        self.assertNotEqual(self.master.cmd("KEYS", "sl:*{start:k}*"), [])
        info = s.info("backend")
        self.assertEqual(info["backend_url"], "redis-sentinel://:***@%s:%d/m"
                         % (HOST, self.sentinel.port))
        self.assertEqual(info["backend_status"], "up")
        self.assertEqual(info["backend_sentinel_master_name"], "m")
        self.assertEqual(info["backend_sentinel_master"], "%s:%d" % (HOST, self.master.port))
        self.assertEqual(info["backend_sentinel_failovers"], "0")
        self.assertEqual(info["backend_node0"], "url=redis-sentinel://:***@%s:%d/m,status=up,"
                         "share=100.00" % (HOST, self.sentinel.port))
        with s.raw() as c:
            self.assertNotIn(b"s3cret", c.cmd("INFO", "all"))
        self.assertNotIn("s3cret", s.log().split("\n", 1)[1])  # past the argv line

    def test_bad_urls_refused(self):
        cases = [
            ("redis-sentinel://127.0.0.1:26379",
             "'redis-sentinel://127.0.0.1:26379': expected /master-name after the Sentinels "
             "(%s)" % FORM),
            ("redis-sentinel://u:s3cret@127.0.0.1:26379/",
             "'redis-sentinel://***@127.0.0.1:26379/': missing master name after '/'"),
            ("redis-sentinel:///m",
             "'redis-sentinel:///m': no Sentinel before '/master-name' (%s)" % FORM),
            ("redis-sentinel://127.0.0.1:26379/m/1",
             "'redis-sentinel://127.0.0.1:26379/m/1': a master name holds no '/' (no /db: the "
             "master's db 0)"),
            ("redis-sentinel://127.0.0.1:26379,127.0.0.1:0/m",
             "Sentinel 2: 'redis-sentinel://127.0.0.1:0': the port must be a number 1..65535"),
            ("redis-sentinel://:s3cret@127.0.0.1:x/m",
             "Sentinel 1: 'redis-sentinel://***@127.0.0.1:x': the port must be a number "
             "1..65535"),
            ("redis-sentinel://u@127.0.0.1/m",
             "Sentinel 1: 'redis-sentinel://***@127.0.0.1': the part before '@' must be "
             "user:password (or :password)"),
            ("redis-sentinel://127.0.0.1,127.0.0.1:26379/m",
             "Sentinels 1 and 2 are the same, 127.0.0.1:26379"),
        ]
        for url, want in cases:
            rc, err = run_sluiced("--backend", url)
            self.assertEqual((rc, err), (2, "sluiced: invalid --backend %s\n"
                                         "Try 'sluiced --help'.\n" % want), url)
            self.assertNotIn("s3cret", err)

    def refused(self, url, want):
        """sluiced refuses to start on url, once, with err="want"."""
        rc, err = run_sluiced("--backend", url)
        self.assertEqual(rc, 1, err)
        self.assertEqual(err.count('msg="cannot use the backend: refusing to start"'), 1, err)
        self.assertIn(' err="%s" ' % want, err)
        self.assertNotIn("s3cret", err.replace(url, ""))

    def test_no_sentinel_reachable_refuses_the_start(self):
        # as redis:// refuses an unreachable Redis: nothing checked, and
        # sluiced does not retry at start (docs/fleet.md)
        a, b = harness.free_port(), harness.free_port()
        self.refused(self.url(sentinels="%s:%d,%s:%d" % (HOST, a, HOST, b)),
                     "no Sentinel of redis-sentinel://:***@%s:%d,%s:%d/m named the master 'm': "
                     "Sentinel %s:%d: connect: Connection refused; Sentinel %s:%d: connect: "
                     "Connection refused" % (HOST, a, HOST, b, HOST, a, HOST, b))

    def test_unknown_name_wrong_password_and_a_replica_refused(self):
        sp = self.sentinel.port
        self.refused(self.url(name="nope"),
                     "no Sentinel of redis-sentinel://:***@%s:%d/nope named the master 'nope': "
                     "Sentinel %s:%d: knows no master 'nope'" % (HOST, sp, HOST, sp))
        rc, err = run_sluiced("--backend", self.url(password="wrong-one"))
        self.assertEqual(rc, 1, err)
        self.assertIn('err="Redis at redis://:***@%s:%d/0 refused AUTH (wrong user or password?): '
                      'WRONGPASS' % (HOST, self.master.port), err)
        self.assertNotIn("wrong-one", err.replace(self.url(password="wrong-one"), ""))
        # `r` is the replica, which this Sentinel was told is a master: ROLE says not
        self.refused(self.url(name="r"),
                     "Redis at redis://:***@%s:%d/0, the master a Sentinel of "
                     "redis-sentinel://:***@%s:%d/r named: ROLE: a replica, not the master"
                     % (HOST, self.replica.port, HOST, sp))


class TestSentinelFailover(unittest.TestCase):

    def setUp(self):
        self.master = RedisServer().start()
        self.addCleanup(self.master.cleanup)
        self.replica = RedisServer().start()
        self.addCleanup(self.replica.cleanup)
        replica_of(self.replica, self.master)
        self.sentinel = Sentinel([("mm", HOST, self.master.port, 1)]).start()
        self.addCleanup(self.sentinel.cleanup)
        # a failover needs the Sentinel to know the replica (from the master's INFO)
        wait_until("the Sentinel knows the replica",
                   lambda: any(str(self.replica.port).encode() in r
                               for r in self.sentinel.cmd("SENTINEL", "REPLICAS", "mm")))

    def test_follows_a_failover(self):
        dead = harness.free_port()
        s = Server("--backend", "redis-sentinel://%s:%d,%s:%d/mm"
                   % (HOST, dead, HOST, self.sentinel.port), "--on-backend-error", "deny",
                   name="sentinel_failover", http=True)
        s.start()
        self.addCleanup(s.cleanup)
        with s.raw() as c:
            got = [c.cmd("RL.ALLOW", "fo:k", "3", "1h")[0] for _ in range(4)]
        self.assertEqual(got, [1, 1, 1, 0])
        info = s.info("backend")
        self.assertEqual(info["backend_sentinel_master"], "%s:%d" % (HOST, self.master.port))
        self.assertEqual(info["backend_sentinel_failovers"], "0")
        # the replica has every write before the master dies (so the
        # state that follows is known: durability is not this test's)
        def offsets():
            m = self.master.cmd("INFO", "replication").decode()
            r = self.replica.cmd("INFO", "replication").decode()
            mo = [l for l in m.split("\r\n") if l.startswith("master_repl_offset:")]
            ro = [l for l in r.split("\r\n") if l.startswith("slave_repl_offset:")]
            return mo and ro and mo[0].split(":")[1] == ro[0].split(":")[1]
        wait_until("the replica caught up", offsets)

        self.master.kill()  # -9
        # while no master answers the policy denies; then a new key is
        # allowed again: a decision made in Redis, on the new master
        n = [0]

        def decided_in_redis():
            n[0] += 1
            with s.raw() as c:
                return c.cmd("RL.ALLOW", "fo:new:%d" % n[0], "5", "1h")[0] == 1
        wait_until("a decision made in Redis after the failover", decided_in_redis, timeout=90)
        # every worker's connection follows (each after its own backoff)
        wait_until("every worker connected to the new master",
                   lambda: s.info("backend")["backend_status"] == "up", timeout=60)
        info = s.info("backend")
        self.assertEqual(info["backend_sentinel_master"], "%s:%d" % (HOST, self.replica.port))
        self.assertEqual(info["backend_sentinel_failovers"], "1")
        self.assertEqual(self.replica.cmd("ROLE")[0], b"master")
        # the promoted replica had the key's state: still at its limit
        with s.raw() as c:
            self.assertEqual(c.cmd("RL.ALLOW", "fo:k", "3", "1h")[0], 0)
        conn = http.client.HTTPConnection(HOST, s.http_port, timeout=10 * SLOW)
        conn.request("GET", "/metrics")
        page = conn.getresponse().read().decode()
        conn.close()
        self.assertIn("# TYPE sluice_backend_sentinel_failovers_total counter\n"
                      "sluice_backend_sentinel_failovers_total 1\n", page)
        # the status page names the master decisions go to now, not only
        # the Sentinels' URL
        conn = http.client.HTTPConnection(HOST, s.http_port, timeout=10 * SLOW)
        conn.request("GET", "/v1/status")
        backend = json.loads(conn.getresponse().read())["backend"]
        conn.close()
        self.assertEqual(backend["url"], "redis-sentinel://%s:%d,%s:%d/mm"
                         % (HOST, dead, HOST, self.sentinel.port))
        self.assertEqual(backend["master"], "%s:%d" % (HOST, self.replica.port))


if __name__ == "__main__":
    unittest.main()
