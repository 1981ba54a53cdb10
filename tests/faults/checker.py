"""checker.py -- reads a history of answers and counts what was admitted over
the limit.  Pure: a list of answers in, counts out; no sockets, no clocks.

An answer (Answer, or any object with these attributes):
  send, recv   client wall-clock times in ms (float) around the request:
               the decision was made somewhere in [send, recv]
  key          the limited key (RL.ALLOW key, or a rule's counter)
  algo         "fixed" (fixed windows aligned to t = 0, SPEC section 2) or
               "sliding" (an exact rolling window (t - W, t]: sliding-log)
  limit, window  L and W (ms) of the key's rule
  outcome      "allowed", "denied" or "error"
  policy       True when the answer came from sluiced's failure policy
  phase        a label (the fault being measured); counts are per phase

The decision time of an answer is unknown inside [send, recv] (widened by
`slack` ms on each side for clocks that may differ by that much).  The
counts are conservative: an answer is over-admitted only if, wherever in
their intervals the decisions really were, the limit was exceeded.

Fixed windows: an allowed answer may belong to any window that its interval
touches, floor((send - slack) / W) .. floor((recv + slack) / W).  Each
window holds L; answers are placed as a bipartite matching (sorted by their
last possible window, each into the earliest window of its range that still
has room: the greedy that places the most).  An answer that fits nowhere is
over-admitted, counted in its last possible window (whose L, and that of
every earlier window of its range, is then full); windows over = distinct
windows with such an answer.

Sliding windows: L + 1 allowed decisions exceed the rolling limit iff they
lie within less than W of each other (sliding-log: an entry at t_j counts
at t while t_j > t - W).  They certainly do iff the latest possible time of
any of them minus the earliest possible time of any of them is below W.
Answers are taken by their latest possible time r (recv + slack); an answer
is over-admitted when its own earliest possible time is above r - W and L
answers already kept (not over-admitted) have an earliest possible time
above r - W (and a latest one <= r): with it they are L + 1 decisions
within less than W.  With exact times (send == recv,
slack 0) this is the sliding-log's own rule.  Windows over: the number of
windows of length W, each starting at an over-admitted answer's r, needed
to cover every over-admitted answer (taken in order: a new one starts when
an answer is at or past the previous start + W).

Unavailable: answers that were errors or failure-policy answers.
"""

import bisect
from collections import namedtuple, defaultdict

Answer = namedtuple("Answer", "send recv key algo limit window outcome policy phase node")
Answer.__new__.__defaults__ = (False, "", -1)

Counts = namedtuple("Counts", "requests allowed denied errors policy unavailable "
                              "over_admitted windows_over keys_over")


def _fixed(allowed, limit, window, slack):
    """(over-admitted, windows over) for one fixed-window key's allowed answers."""
    items = []
    for a in allowed:
        lo = int((a.send - slack) // window)
        hi = int((a.recv + slack) // window)
        items.append((hi, lo))
    items.sort()
    used = defaultdict(int)
    over = 0
    over_windows = set()
    for hi, lo in items:
        w = lo
        while w <= hi and used[w] >= limit:
            w += 1
        if w <= hi:
            used[w] += 1
        else:
            over += 1
            over_windows.add(hi)
    return over, len(over_windows)


def _sliding(allowed, limit, window, slack):
    """(over-admitted, windows over) for one sliding (rolling) key."""
    items = sorted((a.recv + slack, a.send - slack) for a in allowed)
    kept_s = []        # earliest possible times of kept answers, sorted
    over_r = []
    for r, s in items:
        # kept answers all have latest time <= r (taken in order of r); those
        # whose earliest time is above r - W lie with this one within < W
        n = len(kept_s) - bisect.bisect_right(kept_s, r - window)
        if n >= limit and s > r - window:
            over_r.append(r)
        else:
            bisect.insort(kept_s, s)
    windows = 0
    start = None
    for r in over_r:
        if start is None or r >= start + window:
            windows += 1
            start = r
    return len(over_r), windows


def check(history, slack=0.0):
    """{phase: Counts} for every phase in history, plus "*" for all of them.
    keys_over lists the keys (sorted) with an over-admitted answer."""
    by_key = defaultdict(list)
    for a in history:
        by_key[(a.phase, a.key, a.algo, a.limit, a.window)].append(a)
    acc = defaultdict(lambda: defaultdict(int))
    keys_over = defaultdict(set)
    for (phase, key, algo, limit, window), answers in by_key.items():
        allowed = [a for a in answers if a.outcome == "allowed"]
        if algo == "fixed":
            over, wins = _fixed(allowed, limit, window, slack)
        elif algo == "sliding":
            over, wins = _sliding(allowed, limit, window, slack)
        else:
            raise ValueError("key %r: unknown algorithm %r (fixed or sliding)" % (key, algo))
        for p in (phase, "*"):
            c = acc[p]
            c["requests"] += len(answers)
            c["allowed"] += len(allowed)
            c["denied"] += sum(1 for a in answers if a.outcome == "denied")
            c["errors"] += sum(1 for a in answers if a.outcome == "error")
            c["policy"] += sum(1 for a in answers if a.policy and a.outcome != "error")
            c["unavailable"] += sum(1 for a in answers if a.outcome == "error" or a.policy)
            c["over_admitted"] += over
            c["windows_over"] += wins
            if over:
                keys_over[p].add(key)
    out = {}
    for p, c in acc.items():
        out[p] = Counts(c["requests"], c["allowed"], c["denied"], c["errors"], c["policy"],
                        c["unavailable"], c["over_admitted"], c["windows_over"],
                        sorted(keys_over[p]))
    if "*" not in out:
        out["*"] = Counts(0, 0, 0, 0, 0, 0, 0, 0, [])
    return out
