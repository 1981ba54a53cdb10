"""load.py -- the clients: threads that send RL.ALLOW (fixed-window and
sliding-log keys of known L per W; for lease modes also token-bucket,
gcra or sliding-window keys, Plan's hot_algos) and RL.CHECK (the rules file's domain
`faults`, user descriptors: L = topo.CHECK_LIMIT per second, a fixed window)
to the topology's sluiced nodes at a bounded rate, for as long as the run
lasts, and record every answer (checker.Answer): client wall-clock times
around it, key, algorithm, L, W, outcome, whether it has the failure
policy's shape.

The failure policy (`--on-backend-error deny`, the default) answers
`[0, L, 0, 1000, 1000, 0]` (docs/fleet.md, "When Redis fails"); no other
count is per answer.  A real denial has those six numbers only when its
retry and reset both are exactly 1000 ms: a fixed window denied exactly
1000 ms before its end (a chance of 1 in W per denial), a sliding log
whose L entries share one millisecond.  Such a denial would be counted as
unavailable, never as admitted.

Every read has a deadline (REPLY_TIMEOUT): a request that gets no answer
is an error, the connection is dropped and made again for the next one.
"""

import random
import threading
import time

import checker
import topo
from harness import RawConn, RespError, encode

REPLY_TIMEOUT = 3.0


# RL.ALLOW's ALGO for each of the checker's algorithms
ALGO = {"fixed": "fixed-window", "sliding": "sliding-log", "bucket": "token-bucket",
        "gcra": "gcra", "swindow": "sliding-window"}


class Plan:
    """The keys of one phase: `keys` of each kind, named after the phase.

    hot > 0: that share of the requests goes to the first key of each
    algorithm in hot_algos, split evenly (the rest at random over every
    op).  An algorithm of hot_algos other than fixed and sliding adds a
    key of its own to each of the `keys` (L per W from `limits`)."""

    def __init__(self, phase, fixed=(20, 4000), sliding=(20, 4000), keys=3, hot=0.0,
                 hot_algos=("fixed",), limits=None):
        self.phase = phase
        self.ops = []
        self.hot = hot
        self.hot_ops = []
        extra = [a for a in hot_algos if a not in ("fixed", "sliding")]
        for i in range(keys):
            self.ops.append(("allow", "fixed", "%s:f%d" % (phase, i)) + tuple(fixed))
            self.ops.append(("allow", "sliding", "%s:s%d" % (phase, i)) + tuple(sliding))
            self.ops.append(("check", "fixed", "%s-u%d" % (phase, i),
                             topo.CHECK_LIMIT, topo.CHECK_WINDOW))
            for a in extra:
                self.ops.append(("allow", a, "%s:%s%d" % (phase, a, i)) + tuple(limits[a]))
        for a in hot_algos:
            self.hot_ops.append(next(op for op in self.ops if op[0] == "allow" and op[1] == a))

    def pick(self, rnd):
        if self.hot > 0 and rnd.random() < self.hot:
            return rnd.choice(self.hot_ops)
        return rnd.choice(self.ops)


def classify(reply, limit):
    """(outcome, policy) of a decision's reply (its first six fields)."""
    if isinstance(reply, RespError) or not isinstance(reply, list) or len(reply) < 6:
        return "error", False
    six = reply[:6]
    policy = six == [0, limit, 0, 1000, 1000, 0]
    return ("allowed" if six[0] == 1 else "denied"), policy


class Load:
    """`threads` client threads, together about `rate` requests a second,
    spread at random over plan's ops and the topology's nodes."""

    def __init__(self, topology, plan, rate=150, threads=3, seed=1, burst=1):
        self.burst = burst  # requests sent at once (pipelined) to one node, one key
        self.topo = topology
        self.plan = plan
        self.rate = rate
        self.nthreads = threads
        self.stop_ev = threading.Event()
        self.histories = [[] for _ in range(threads)]
        self.sent = [0] * threads
        self.threads = []
        self.seed = seed

    def start(self):
        for i in range(self.nthreads):
            t = threading.Thread(target=self._client, args=(i,), name="client%d" % i, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        """Stops the clients; returns what is wrong with the history (a
        thread that did not end, a request sent without its answer recorded)."""
        self.stop_ev.set()
        problems = []
        for t in self.threads:
            t.join(REPLY_TIMEOUT * 4)
            if t.is_alive():
                problems.append("%s did not stop" % t.name)
        for i, h in enumerate(self.histories):
            if len(h) != self.sent[i]:
                problems.append("client%d: %d sent, %d recorded" % (i, self.sent[i], len(h)))
            bad = [a for a in h if not a.send <= a.recv]
            if bad:
                problems.append("client%d: %d answers received before sent" % (i, len(bad)))
        return problems

    def history(self):
        return [a for h in self.histories for a in h]

    def _client(self, idx):
        rnd = random.Random(self.seed * 1000 + idx)
        conns = {}
        interval = self.nthreads * self.burst / float(self.rate)
        nxt = time.monotonic()
        hist = self.histories[idx]
        while not self.stop_ev.is_set():
            now = time.monotonic()
            if now < nxt:
                self.stop_ev.wait(nxt - now)
                continue
            nxt = max(nxt + interval, now - 1.0)
            kind, algo, key, limit, window = self.plan.pick(rnd)
            ni = rnd.randrange(len(self.topo.nodes))
            node = self.topo.nodes[ni]
            if kind == "allow":
                argv = ("RL.ALLOW", key, limit, window, "ALGO", ALGO[algo])
                hkey = key
            else:
                argv = ("RL.CHECK", "faults", "DESCRIPTOR", "user", key)
                hkey = "faults|user=" + key
            n = self.burst
            self.sent[idx] += n
            send = time.time() * 1000.0
            got = 0
            try:
                c = conns.get(ni)
                if c is None or c.port != node.port:
                    if c is not None:
                        c.close()
                    c = RawConn(node.port, timeout=REPLY_TIMEOUT)
                    c.port = node.port
                    conns[ni] = c
                c.send(encode(*argv) * n)
                while got < n:
                    reply = c.read_reply(timeout=REPLY_TIMEOUT)
                    recv = time.time() * 1000.0
                    outcome, policy = classify(reply, limit)
                    hist.append(checker.Answer(send, recv, hkey, algo, limit, window, outcome,
                                               policy, self.plan.phase, ni))
                    got += 1
            except (OSError, EOFError, TimeoutError, ValueError):
                recv = time.time() * 1000.0
                c = conns.pop(ni, None)
                if c is not None:
                    c.close()
                for _ in range(n - got):
                    hist.append(checker.Answer(send, recv, hkey, algo, limit, window, "error",
                                               False, self.plan.phase, ni))
        for c in conns.values():
            c.close()
