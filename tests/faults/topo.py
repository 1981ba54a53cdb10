"""topo.py -- the fault harness's topologies, built from tests/e2e/harness.py's
servers (free loopback ports, stopped by PID, logs scanned):

  sentinel  one Redis master, one replica, one Sentinel (`redis-server
            FILE.conf --sentinel`), 3 sluiced.  Each sluiced reaches Redis
            through a Proxy of its own (proxy.py) that connects to the
            master Sentinel names at that moment, so a failover is followed
            and a partition can cut one node.  The backend URL is a
            template: `redis://{proxy}` (default), or e.g.
            `redis-sentinel://{sentinel}/m` once sluiced speaks Sentinel
            (then the partition fault has nothing to cut: not offered).
            With module=True (run.py --module) both servers load
            build/sluice.so: the nodes are on the module's path.
  cluster   a Redis Cluster of 3 masters with a replica each, build/sluice.so
            loaded in every node, 3 sluiced with `redis-cluster://{seeds}`.
  single    one sluiced, local store, `--snapshot FILE`.

Each topology offers faults by name: a fault is inject(i) -> a description,
then heal(i); ready() waits (bounded) until the topology is whole again and
returns what is still wrong (empty when healthy).  stop() stops everything
by PID and returns every problem found (a forced kill, a crash, a sanitizer
or Redis crash report, a proxy thread left).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import harness  # noqa: E402
from harness import HOST, RawConn, RespError  # noqa: E402
from proxy import Proxy  # noqa: E402

RULES = ("domain: faults\n"
         "descriptors:\n"
         "  - key: user\n"
         "    rate_limit: {unit: second, requests_per_unit: %d}\n")
CHECK_LIMIT = 10
CHECK_WINDOW = 1000


def wait_for(pred, timeout, step=0.05):
    """Polls pred() until it is true (returns True) or timeout seconds
    (scaled for sanitizers) pass (returns False).  Exceptions count as false."""
    until = harness.deadline(timeout)
    while True:
        try:
            if pred():
                return True
        except (OSError, EOFError, TimeoutError, AssertionError, ValueError):
            pass
        if time.monotonic() >= until:
            return False
        time.sleep(step)


def rcmd(port, *args, timeout=2):
    with RawConn(port, timeout=timeout) as c:
        return c.cmd(*args, timeout=timeout)


def info_of(port, section=None):
    v = rcmd(port, "INFO", section) if section else rcmd(port, "INFO")
    if not isinstance(v, bytes):
        raise AssertionError("INFO on %d: %r" % (port, v))
    return harness.parse_info(v)


SENTINELS = []  # every Sentinel started, for run.py's last check


def stopped(pid, timeout=5):
    """True once /proc says pid is stopped (state T), within timeout s."""
    def state():
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    return wait_for(lambda: state() in ("T", "t"), timeout, step=0.01)


def fallbacks(port):
    """INFO backend_fallback_deny + _allow + _local of one sluiced (0 on the
    local store, which has none)."""
    info = info_of(port, "backend")
    return sum(int(info.get("backend_fallback_" + k, 0) or 0) for k in ("deny", "allow", "local"))


def leased(port):
    """(INFO backend_lease_decisions, backend_leases_outstanding) of one
    sluiced: decisions a lease paid, leases held now (0, 0 without --lease)."""
    info = info_of(port, "backend")
    return (int(info.get("backend_lease_decisions", 0) or 0),
            int(info.get("backend_leases_outstanding", 0) or 0))



# Ports the nodes listen on, kept below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default): a node
# killed with -9 restarts on its port, and while it is down a client's
# outgoing connection must not be given that port as its own.
_PORTS_TAKEN = set()
_PORTS_LOCK = threading.Lock()


def _bindable(p):
    sk = socket.socket()
    try:
        sk.bind((harness.HOST, p))
        return True
    except OSError:
        return False
    finally:
        sk.close()


def listen_port(lo=20000, hi=32000, bus=False):
    """A free loopback port in [lo, hi) not handed out before by this
    process; with bus, its cluster bus port (+10000) free and kept too."""
    rng = random.Random()
    with _PORTS_LOCK:
        for _ in range(1000):
            p = rng.randrange(lo, hi)
            ps = [p, p + 10000] if bus else [p]
            if any(x in _PORTS_TAKEN or not _bindable(x) for x in ps):
                continue
            _PORTS_TAKEN.update(ps)
            return p
    raise RuntimeError("no free port in [%d, %d)" % (lo, hi))


def redis_at(port, **kw):
    """A harness.RedisServer that will listen on port (its restarts too)."""
    r = harness.RedisServer(**kw)
    r.port = port
    return r

class Sentinel:
    """One Sentinel (the redis-server binary with --sentinel) watching master
    `m`; stopped by its PID (SIGTERM, a wait, SIGKILL is a problem)."""

    def __init__(self, master_port, down_after_ms=1500, failover_timeout_ms=2000):
        self.dir = tempfile.mkdtemp(prefix="sluice-sentinel-")
        self.master_port = master_port
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.port = None
        self.proc = None
        self.log_path = os.path.join(self.dir, "sentinel.log")
        self.problems = []
        SENTINELS.append(self)

    def start(self):
        self.port = listen_port()
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind %s\ndaemonize no\nprotected-mode no\ndir %s\n"
                    "sentinel monitor m %s %d 1\n"
                    "sentinel down-after-milliseconds m %d\n"
                    "sentinel failover-timeout m %d\n"
                    % (self.port, HOST, self.dir, HOST, self.master_port,
                       self.down_after_ms, self.failover_timeout_ms))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(["redis-server", conf, "--sentinel"],
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        if not wait_for(lambda: rcmd(self.port, "PING") == b"PONG", 15):
            raise AssertionError("sentinel did not start:\n%s" % self.log()[-3000:])
        return self

    def master(self):
        """(host, port) of the master Sentinel names now."""
        v = rcmd(self.port, "SENTINEL", "get-master-addr-by-name", "m")
        return v[0].decode(), int(v[1])

    def replicas(self):
        """[{field: value}] of SENTINEL replicas m."""
        out = []
        for r in rcmd(self.port, "SENTINEL", "replicas", "m"):
            out.append({r[i].decode(): r[i + 1].decode() for i in range(0, len(r), 2)})
        return out

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        problems = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                rc = self.proc.wait(harness.STOP_SECONDS * harness.SLOW)
                if rc != 0:
                    problems.append("sentinel: exit status %s after SIGTERM" % rc)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                problems.append("sentinel: did not exit after SIGTERM, killed")
        text = self.log()
        marks = [m for m in harness.REDIS_MARKS if m in text]
        if marks:
            problems.append("sentinel log: %s" % ", ".join(marks))
        if not problems:
            shutil.rmtree(self.dir, True)
        return problems


class Topology:
    """What every topology shares: its sluiced nodes, the rules file, the
    kill -9 / restart fault of a sluiced node, and stop()."""

    name = "?"
    tag = ""  # the mode's, in the nodes' log names: topologies of several modes run at once
    # how long a fault lasts before it is healed (s); a stall stays below
    # Sentinel's down-after (1.5 s) and the cluster's node timeout (1 s)
    HOLD = {"kill-sluiced": 0.3, "kill-master": 0.0, "stall": 0.3, "partition": 0.6}

    def __init__(self, mode_flags=(), nodes=3):
        self.mode_flags = list(mode_flags)
        self.n = nodes
        self.dir = tempfile.mkdtemp(prefix="sluice-faults-")
        self.rules = os.path.join(self.dir, "rules.yaml")
        with open(self.rules, "w") as f:
            f.write(RULES % CHECK_LIMIT)
        self.nodes = []
        self.proxies = []
        self.problems = []      # found while running (a restart that failed, ...)
        self.fallback_carry = 0  # policy answers counted by nodes before they were killed
        self.lease_carry = 0     # --lease on: decisions leases paid on nodes before they were killed
        self.killed_holding = 0  # nodes killed while INFO said they held leases
        self.effects = 0         # injections seen to take effect (a process dead or
                                 # stopped, a connection cut, a failover logged)

    def faults(self):
        """{name: (inject, heal)}."""
        return {"kill-sluiced": (self.kill_sluiced, self.restart_sluiced)}

    def node_args(self, i):
        return []

    def start_nodes(self):
        for i in range(self.n):
            s = harness.Server("--rules", self.rules, "--threads", "1",
                               *(self.node_args(i) + self.mode_flags),
                               port=listen_port(),
                               name="%s-%snode%d" % (self.name, self.tag, i))
            s.start()
            self.nodes.append(s)

    def kill_sluiced(self, k):
        i = k % len(self.nodes)
        s = self.nodes[i]
        s.want_port = s.port  # the restart keeps the port the clients know
        try:
            self.fallback_carry += fallbacks(s.port)
        except (OSError, EOFError, TimeoutError, AssertionError, ValueError):
            pass
        try:
            served, held = leased(s.port)
            self.lease_carry += served
            self.killed_holding += 1 if held > 0 else 0
        except (OSError, EOFError, TimeoutError, AssertionError, ValueError):
            pass
        s.kill()              # SIGKILL by PID (outside unittest: a real kill -9)
        if s.proc.returncode == -9:
            self.effects += 1
        return "kill -9 sluiced node%d (pid %d)" % (i, s.pid)

    def restart_sluiced(self, k):
        s = self.nodes[k % len(self.nodes)]
        problems = s.check()  # the killed run's log: no crash, no report
        if problems:
            self.problems.append("%s before kill: %s" % (s.name, "; ".join(problems)))
        s.start()

    def failovers(self):
        """Failovers so far, as Redis logged them (0 without Redis)."""
        return 0

    def fallbacks(self):
        """Failure-policy answers so far, every node's INFO together (a
        killed node's count as read just before the kill)."""
        return self.fallback_carry + sum(fallbacks(s.port) for s in self.nodes)

    def lease_decisions(self):
        """Decisions leases paid so far, every node's INFO together (a killed
        node's as read just before the kill)."""
        return self.lease_carry + sum(leased(s.port)[0] for s in self.nodes)

    def backend_up(self):
        return all(info_of(s.port, "backend").get("backend_status") in ("up", None)
                   for s in self.nodes)

    def ready(self, timeout=30):
        """What is not yet whole, after waiting up to timeout s: [] = healthy."""
        if not wait_for(lambda: all(s.running() for s in self.nodes) and self.backend_up(),
                        timeout):
            return ["%s: a sluiced not running or its backend not up" % self.name]
        return []

    def stop(self):
        problems = list(self.problems)
        for s in self.nodes:
            try:
                s.cleanup()
            except AssertionError as e:
                problems.append(str(e)[:3000])
        for p in self.proxies:
            problems += p.stop()
        problems += self.stop_redis()
        if not problems:
            shutil.rmtree(self.dir, True)
        return problems

    def stop_redis(self):
        return []


class Single(Topology):
    """One sluiced on its local store, saving to a snapshot."""
    name = "single"

    def __init__(self, mode_flags=(), snapshot_interval=None):
        super().__init__(mode_flags, nodes=1)
        self.snapshot_interval = snapshot_interval

    def node_args(self, i):
        a = ["--snapshot", os.path.join(self.dir, "state.snap")]
        if self.snapshot_interval:
            a += ["--snapshot-interval", self.snapshot_interval]
        return a

    def start(self):
        self.start_nodes()
        return self


class SentinelTopo(Topology):
    """Redis master + replica + Sentinel; 3 sluiced through their proxies."""
    name = "sentinel"

    def __init__(self, mode_flags=(), backend="redis://{proxy}", module=False):
        super().__init__(mode_flags)
        self.backend = backend
        self.module = module  # build/sluice.so in both servers: sluiced's module path
        self.redis = []
        self.sentinel = None
        self.partition_modes = ["blackhole", "drop", "delay"]

    def faults(self):
        f = super().faults()
        f["kill-master"] = (self.kill_master, self.restart_master)
        f["stall"] = (self.stall, self.unstall)
        if "{proxy}" in self.backend:
            f["partition"] = (self.partition, self.unpartition)
        return f

    def master_server(self):
        host, port = self.sentinel.master()
        return next(r for r in self.redis if r.port == port)

    def start(self):
        margs = [] if self.module else None
        a = redis_at(listen_port(), module_args=margs).start()
        b = redis_at(listen_port(), module_args=margs).start()
        self.redis = [a, b]
        b.cmd("REPLICAOF", HOST, a.port)
        if not wait_for(lambda: info_of(b.port, "replication").get("master_link_status") == "up",
                        15):
            raise AssertionError("the replica never synced")
        self.sentinel = Sentinel(a.port).start()
        if not wait_for(lambda: any(r["port"] == str(b.port) for r in self.sentinel.replicas()),
                        20):
            raise AssertionError("Sentinel never saw the replica:\n%s"
                                 % self.sentinel.log()[-3000:])
        self.proxies = [Proxy(self.sentinel.master, name="proxy%d" % i) for i in range(self.n)]
        self.start_nodes()
        return self

    def node_args(self, i):
        url = self.backend.format(proxy=self.proxies[i].addr(),
                                  sentinel="%s:%d" % (HOST, self.sentinel.port),
                                  master="%s:%d" % self.sentinel.master())
        return ["--backend", url]

    def kill_master(self, k):
        m = self.master_server()
        self._killed = m
        m.kill()
        if m.proc.returncode == -9:
            self.effects += 1
        return "kill -9 redis master :%d (failover by Sentinel)" % m.port

    def restart_master(self, k):
        m = self._killed
        if not wait_for(lambda: self.sentinel.master()[1] != m.port, 30):
            self.problems.append("Sentinel did not fail over from :%d" % m.port)
            m.start()
            return
        new = self.master_server()
        m.start()
        m.cmd("REPLICAOF", HOST, new.port)

    def stall(self, k):
        m = self.master_server()
        self._stalled = m
        m.pause()
        if stopped(m.proc.pid):
            self.effects += 1
        return "SIGSTOP redis master :%d" % m.port

    def unstall(self, k):
        self._stalled.resume()

    def partition(self, k):
        i = k % self.n
        mode = self.partition_modes[(k // self.n) % len(self.partition_modes)]
        cut = self.proxies[i].set_mode(mode, delay_ms=200 if mode == "delay" else 0)
        if cut:
            self.effects += 1
        return "partition node%d from redis: %s" % (i, mode + (" 200ms" if mode == "delay" else ""))

    def unpartition(self, k):
        self.proxies[k % self.n].set_mode("forward")

    def ready(self, timeout=40):
        def whole():
            port = self.sentinel.master()[1]
            if not all(r.running() for r in self.redis):
                return False
            if info_of(port, "replication").get("role") != "master":
                return False
            rep = next(r for r in self.redis if r.port != port)
            if info_of(rep.port, "replication").get("master_link_status") != "up":
                return False
            reps = self.sentinel.replicas()
            if not any(r["port"] == str(rep.port) and "s_down" not in r["flags"]
                       and "disconnected" not in r["flags"]
                       and r.get("master-link-status") == "ok" for r in reps):
                return False
            return True
        if not wait_for(whole, timeout):
            return ["sentinel: master+replica+Sentinel not whole again"]
        return super().ready(timeout)

    def failovers(self):
        return self.sentinel.log().count("+switch-master")

    def stop_redis(self):
        problems = []
        if self.sentinel:
            problems += self.sentinel.stop()
        for r in self.redis:
            try:
                r.cleanup()
            except AssertionError as e:
                problems.append(str(e)[:3000])
        return problems


class ClusterTopo(Topology):
    """A Redis Cluster of 3 masters with a replica each, the module loaded."""
    name = "cluster"
    NODE_TIMEOUT_MS = 1000

    def __init__(self, mode_flags=(), backend="redis-cluster://{seeds}"):
        super().__init__(mode_flags)
        self.backend = backend
        self.redis = []

    def faults(self):
        f = super().faults()
        f["kill-master"] = (self.kill_master, self.restart_master)
        f["stall"] = (self.stall, self.unstall)
        return f

    def start(self):
        self.redis = [redis_at(listen_port(10000, 22000, bus=True), cluster=True, module_args=[])
                      for _ in range(6)]
        for r in self.redis:
            r.start()
            r.cmd("CONFIG", "SET", "cluster-node-timeout", str(self.NODE_TIMEOUT_MS))
        p = subprocess.run(["redis-cli", "--cluster", "create"] +
                           ["%s:%d" % (HOST, r.port) for r in self.redis] +
                           ["--cluster-replicas", "1", "--cluster-yes"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError("redis-cli --cluster create: %s%s" % (p.stdout, p.stderr))
        if self.ready_redis(60):
            raise AssertionError("the cluster never became whole")
        self.start_nodes()
        return self

    def node_args(self, i):
        seeds = ",".join("%s:%d" % (HOST, r.port) for r in self.redis[:3])
        return ["--backend", self.backend.format(seeds=seeds)]

    def masters(self):
        """The running masters serving slots, from a live node's CLUSTER SLOTS."""
        for r in self.redis:
            if r.running():
                slots = r.cmd("CLUSTER", "SLOTS")
                ports = sorted({e[2][1] for e in slots})
                return [x for x in self.redis if x.port in ports]
        return []

    def ready_redis(self, timeout):
        def whole():
            if not all(r.running() for r in self.redis):
                return False
            for r in self.redis:
                info = r.cmd("CLUSTER", "INFO")
                if b"cluster_state:ok" not in info:
                    return False
                slots = r.cmd("CLUSTER", "SLOTS")
                if sum(e[1] - e[0] + 1 for e in slots) != 16384:
                    return False
                # every range served by a master and one replica, both up
                if any(len(e) < 4 for e in slots):
                    return False
            for r in self.redis:
                rep = info_of(r.port, "replication")
                if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                    return False
            return True
        return [] if wait_for(whole, timeout) else ["cluster: not whole again"]

    def kill_master(self, k):
        ms = self.masters()
        m = ms[k % len(ms)]
        self._killed = m
        m.kill()
        if m.proc.returncode == -9:
            self.effects += 1
        return "kill -9 cluster master :%d (failover by the cluster)" % m.port

    def restart_master(self, k):
        m = self._killed

        def failed_over():
            live = next(r for r in self.redis if r.running())
            slots = live.cmd("CLUSTER", "SLOTS")
            return (sum(e[1] - e[0] + 1 for e in slots) == 16384
                    and all(e[2][1] != m.port for e in slots))
        if not wait_for(failed_over, 30):
            self.problems.append("cluster did not fail over from :%d" % m.port)
        m.start()  # same port, same nodes.conf: it rejoins as a replica

    def stall(self, k):
        ms = self.masters()
        m = ms[k % len(ms)]
        self._stalled = m
        m.pause()
        if stopped(m.proc.pid):
            self.effects += 1
        return "SIGSTOP cluster master :%d" % m.port

    def unstall(self, k):
        self._stalled.resume()

    def ready(self, timeout=40):
        return self.ready_redis(timeout) or super().ready(timeout)

    def failovers(self):
        return sum(r.log().count("Failover election won") for r in self.redis)

    def stop_redis(self):
        problems = []
        for r in self.redis:
            try:
                r.cleanup()
            except AssertionError as e:
                problems.append(str(e)[:3000])
        return problems


TOPOLOGIES = {"single": Single, "sentinel": SentinelTopo, "cluster": ClusterTopo}
