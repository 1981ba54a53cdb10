"""checker.py -- reads a history of answers and counts what was admitted over
the limit.  Pure: a list of answers in, counts out; no sockets, no clocks.

An answer (Answer, or any object with these attributes):
  send, recv   client wall-clock times in ms (float) around the request:
               the decision was made somewhere in [send, recv]
  key          the limited key (RL.ALLOW key, or a rule's counter)
  algo         "fixed" (fixed windows aligned to t = 0, SPEC section 2),
               "sliding" (an exact rolling window (t - W, t]: sliding-log),
               "bucket" or "gcra" (token-bucket, gcra: B = L, refill L per W,
               starts full) or "swindow" (sliding-window, the weighted
               two-window counter)
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

Buckets (token-bucket and gcra: SPEC section 2 gives them the same
decisions): a bucket of B = L tokens, refilled continuously at L per W and
full at the start, holds at any time t0 at most B tokens, so over any
interval [t0, t1] it admits at most B + L * (t1 - t0) / W (each admission
takes a token that was there at t0 or came in since).  n allowed decisions
exceed it for certain iff n > B + L * (r - x) / W where r is the latest
possible time of any of them and x the earliest possible time of any of
them.  Answers are taken by r; an answer is over-admitted when, for some x
at or below its own earliest time, it and the kept answers whose earliest
time is >= x are more than B + L * (r - x) / W (a prefix-add, prefix-max
tree over the answers' earliest times finds the worst x in log time).
Kept answers only, as for sliding windows: an over-admitted answer does
not count against later ones.  The bound holds for any x, so the count is
conservative: every answer counted is over the bucket's limit wherever in
their intervals the decisions were.  Windows over: as sliding windows.

Sliding windows (sliding-window, swindow): an approximation, so there is
no exact rolling bound; what SPEC section 2's rule does give exactly:
(1) the count of window i (n) never passes L, so the allowed answers of
each aligned window are at most L: the fixed-window rule above; and (2) at
every admission at time t = i*W + e, the admissions of window i up to t
plus floor(p * (W - e) / W) are at most L, p the admissions of window
i - 1 (the state's p is at least what was admitted then: a leased unit is
counted when taken, and handed back only into its own window's n).  (2)
is checked conservatively: for an answer whose interval lies in one window
i, the kept answers of window i that were certainly decided before it
(latest time <= its earliest time) plus itself, plus floor(P * (W - e) /
W) with e its latest possible offset and P = min(L, answers certainly in
window i - 1), must not pass L.  Over-admitted: the larger of the two
counts (each is a lower bound on the answers over; their sum could count
one answer twice); windows over: that count's.

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
    return len(over_r), _runs(over_r, window)


class _PrefixMax:
    """Values v[0..n-1]; add(i, d) adds d to v[0..i], top(i) is max(v[0..i]).
    A lazy segment tree: O(log n) each."""

    def __init__(self, values):
        self.n = len(values)
        size = 1
        while size < self.n:
            size *= 2
        self.size = size
        self.mx = [float("-inf")] * (2 * size)
        self.lz = [0.0] * (2 * size)
        for i, v in enumerate(values):
            self.mx[size + i] = v
        for i in range(size - 1, 0, -1):
            self.mx[i] = max(self.mx[2 * i], self.mx[2 * i + 1])

    def _add(self, node, lo, hi, i, d):
        if lo > i:
            return
        if hi <= i:
            self.mx[node] += d
            self.lz[node] += d
            return
        mid = (lo + hi) // 2
        self._add(2 * node, lo, mid, i, d)
        self._add(2 * node + 1, mid + 1, hi, i, d)
        self.mx[node] = max(self.mx[2 * node], self.mx[2 * node + 1]) + self.lz[node]

    def _top(self, node, lo, hi, i):
        if lo > i:
            return float("-inf")
        if hi <= i:
            return self.mx[node]
        mid = (lo + hi) // 2
        return max(self._top(2 * node, lo, mid, i),
                   self._top(2 * node + 1, mid + 1, hi, i)) + self.lz[node]

    def add(self, i, d):
        self._add(1, 0, self.size - 1, i, d)

    def top(self, i):
        return self._top(1, 0, self.size - 1, i)


def _runs(over_r, window):
    """Windows of length W (each starting at an over-admitted answer's r)
    needed to cover them all."""
    windows = 0
    start = None
    for r in sorted(over_r):
        if start is None or r >= start + window:
            windows += 1
            start = r
    return windows


def _bucket(allowed, limit, window, slack):
    """(over-admitted, windows over) for one token-bucket or gcra key
    (B = L tokens, L per W): see the module's text, "Buckets"."""
    if not allowed:
        return 0, 0
    base = min(a.send for a in allowed) - slack
    # times relative to base: small numbers, exact for whole milliseconds
    items = sorted((a.recv + slack - base, a.send - slack - base) for a in allowed)
    xs = sorted(set(s for _, s in items))
    idx = {x: i for i, x in enumerate(xs)}
    # v(x) = W * (kept answers with earliest time >= x) + L * x; the answer
    # (r, s) is over iff W + max over x <= s of v(x) - L * r > B * W
    tree = _PrefixMax([limit * x for x in xs])
    over_r = []
    for r, s in items:
        i = idx[s]
        if window + tree.top(i) - limit * r > limit * window:
            over_r.append(r + base)
        else:
            tree.add(i, window)
    return len(over_r), _runs(over_r, window)


def _swindow(allowed, limit, window, slack):
    """(over-admitted, windows over) for one sliding-window key: see the
    module's text, "Sliding windows"."""
    over1, wins1 = _fixed(allowed, limit, window, slack)
    certain = defaultdict(int)      # window index -> answers certainly in it
    items = []
    for a in allowed:
        s, r = a.send - slack, a.recv + slack
        i = int(s // window)
        if int(r // window) == i:
            certain[i] += 1
            items.append((r, s, i))
    items.sort()
    kept_r = defaultdict(list)      # window index -> latest times of kept answers, sorted
    over_r = []
    for r, s, i in items:
        before = bisect.bisect_right(kept_r[i], s)
        p = min(limit, certain.get(i - 1, 0))
        e = r - i * window
        if before + 1 + (p * (window - e)) // window > limit:
            over_r.append(r)
        else:
            bisect.insort(kept_r[i], r)
    if len(over_r) > over1:
        return len(over_r), _runs(over_r, window)
    return over1, wins1


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
        elif algo in ("bucket", "gcra"):
            over, wins = _bucket(allowed, limit, window, slack)
        elif algo == "swindow":
            over, wins = _swindow(allowed, limit, window, slack)
        else:
            raise ValueError("key %r: unknown algorithm %r (fixed, sliding, bucket, gcra or "
                             "swindow)" % (key, algo))
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
