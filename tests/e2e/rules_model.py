"""rules_model.py -- an independent model of RL.CHECK, written from the
documentation only (docs/rules.md, README.md's "Rules", SPEC.md §2-3, and
the contract comment that docs/rules.md points to in src/rules/check.h),
never from src/rules/check.c or rules.c.  Pure Python, no I/O: the test
(test_rules_model.py) feeds it the same rules it writes as YAML and the same
requests it sends to sluiced, and compares every reply element.

What it covers (docs/rules-model.md has the list and the questions the
docs left open, with the answer chosen):

  - the algorithms of SPEC §2 in exact integer arithmetic, with the six
    fields of SPEC §3: fixed-window, sliding-window (the weighted
    two-window counter), sliding-log (without log-rejected),
    sliding-buckets, token-bucket (gcra answers the same); not
    leaky-bucket;
  - Lyft matching: domain, nested descriptors, key+value, key only (every
    value its own counter), wildcards (each `*` any run, anywhere in the
    value; the first matching one in file order wins), exact (a wildcard's
    own text included) > wildcard > key-only at each level, greedy (no
    backtracking), depth must equal the number of entries;
    `share_threshold` (a wildcard level counts under its pattern); merged
    domains (`--merge-domains`);
  - several limits per descriptor, all-or-none across every limit of every
    descriptor of a request; the same counter named twice (costs merged);
  - `replaces`, `shadow_mode`, `quota_mode`, `soft: N%`, `elastic` with a
    spare-capacity pool, `unlimited`, `requests_per_unit: 0`, COST; Lyft's
    counting of denied requests (`--count-denied`);
  - the reply: the six overall fields, then per descriptor
    [code, rule name, limit, remaining, retry_after_ms, reset_after_ms].

Rules are given as the plain structure a YAML file holds: a dict per file,
{"domain": ..., "descriptors": [{"key", "value", "shadow_mode",
"quota_mode", "share_threshold", "rate_limit": dict or list of dicts,
"descriptors"}]}.
"""

import collections
import re

FIXED = "fixed-window"
SLIDING = "sliding-window"
LOG = "sliding-log"
BUCKETS = "sliding-buckets"
TOKEN = "token-bucket"
GCRA = "gcra"
ALGORITHMS = (FIXED, SLIDING, LOG, BUCKETS, TOKEN, GCRA)
WINDOW_ALGORITHMS = (FIXED, SLIDING, LOG, BUCKETS)
DEFAULT_PRECISION = 10  # SL_DEFAULT_PRECISION

UNITS = {"second": 1000, "minute": 60000, "hour": 3600000, "day": 86400000,
         "week": 7 * 86400000, "month": 30 * 86400000, "year": 365 * 86400000}
SUFFIX_MS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}

POOL_KEY = "|spare-capacity"


def ceil_div(a, b):
    return -((-a) // b)


def parse_duration(v):
    """SPEC §1: an int is ms; a string may carry ms, s, m, h, d."""
    if isinstance(v, int):
        return v
    for suf in ("ms", "s", "m", "h", "d"):
        if v.endswith(suf) and v[:-len(suf)].isdigit():
            return int(v[:-len(suf)]) * SUFFIX_MS[suf]
    if v.isdigit():
        return int(v)
    raise ValueError("not a duration: %r" % v)


def parse_pct(v):
    if not (isinstance(v, str) and v.endswith("%")):
        raise ValueError("not a percentage: %r" % v)
    return int(v[:-1])


# ---- the algorithms (SPEC §2 and §3) ----------------------------------------
#
# decide(algo, state, t, cost, L, W, B, charge) -> (result, new state)
# result = [allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms]
# state: None for a key never charged, else a tuple whose first item is the
# latest t seen (SPEC §4: time never runs backwards).  A denied request or a
# peek (charge False) leaves the counts as they were.

def _fixed(state, t, c, L, W, charge):
    i = t // W
    count = state[2] if state is not None and state[1] == i else 0
    end = (i + 1) * W - t
    allowed = count + c <= L
    after = count + c if allowed else count   # held after (a peek: would hold)
    if allowed:
        retry = 0
    elif c > L:
        retry = -1
    else:
        retry = end  # the next window starts empty
    reset = 0 if after == 0 else end
    new = (t, i, after) if charge else state
    return [int(allowed), L, max(0, L - after), retry, reset, 0], new


def _sw_first(p, W, lo, R):
    """Smallest e in [lo, W) with floor(p*(W-e)/W) <= R, or None."""
    if R < 0:
        return None
    if p == 0:
        return lo if lo < W else None
    # floor(p*(W-e)/W) <= R  <=>  p*(W-e) <= (R+1)*W - 1
    e = max(lo, W - ((R + 1) * W - 1) // p)
    return e if e < W else None


def _sliding(state, t, c, L, W, charge):
    i = t // W
    e = t - i * W
    n = p = 0
    if state is not None:
        if state[1] == i:
            n, p = state[2], state[3]
        elif state[1] == i - 1:
            p = state[2]
    used = n + p * (W - e) // W
    allowed = used + c <= L
    n_after = n + c if allowed else n   # what the counter holds after (a peek: would hold)
    remaining = max(0, L - n_after - p * (W - e) // W)
    if allowed:
        retry = 0
    elif c > L:
        retry = -1
    else:
        e1 = _sw_first(p, W, e + 1, L - n - c)
        if e1 is not None:
            retry = e1 - e
        else:
            e2 = _sw_first(n, W, 0, L - c)
            retry = W - e + e2 if e2 is not None else 2 * W - e
    # reset: the first moment nothing is in use (remaining = L)
    e1 = _sw_first(p, W, e, 0) if n_after == 0 else None
    if e1 is not None:
        reset = e1 - e
    else:
        e2 = _sw_first(n_after, W, 0, 0)
        reset = W - e + e2 if e2 is not None else 2 * W - e
    new = (t, i, n_after, p) if (charge and allowed) else (
        state if not charge else (t, i, n, p))
    return [int(allowed), L, remaining, retry, reset, 0], new


def _retry_after(parts, S, t, c, L):
    """parts: [(time it leaves, cost)] in leaving order, S their sum: the
    retry_after_ms of cost c at t (0 if it fits now, -1 if never, else when
    the first leaving that makes room happens)."""
    retry = 0
    if S + c > L:
        if c > L:
            retry = -1
        else:
            left = S
            for leave, cost in parts:
                left -= cost
                if left + c <= L:
                    retry = leave - t
                    break
    return retry


def _log(state, t, c, L, W, charge):
    # exact rolling window (t - W, t]: an entry logged at tj counts while tj > t - W
    log = [(tj, cj) for tj, cj in (state[1] if state else ()) if tj > t - W]
    S = sum(cj for _, cj in log)
    allowed = S + c <= L
    if allowed and c > 0:
        log.append((t, c))
    S_after = S + c if allowed else S
    retry = _retry_after([(tj + W, cj) for tj, cj in log], S, t, c, L)
    reset = 0 if S_after == 0 else max(tj for tj, _ in log) + W - t
    new = (t, tuple(log)) if charge else state
    return [int(allowed), L, max(0, L - S_after), retry, reset, 0], new


def _buckets(state, t, c, L, W, P, charge):
    g = W // P
    b = t // g
    counts = {k: v for k, v in (state[1] if state else ()) if k > b - P and v}
    S = sum(counts.values())
    allowed = S + c <= L
    if allowed and c > 0:
        counts[b] = counts.get(b, 0) + c
    S_after = S + c if allowed else S
    parts = [((k + P) * g, v) for k, v in sorted(counts.items())]
    retry = _retry_after(parts, S, t, c, L)
    reset = 0 if S_after == 0 else (max(counts) + P) * g - t
    new = (t, tuple(sorted(counts.items()))) if charge else state
    return [int(allowed), L, max(0, L - S_after), retry, reset, 0], new


def _token(state, t, c, L, W, B, charge):
    # tokens kept exactly, in units of 1/W token: refill is L units a ms
    full = B * W
    if state is None:
        T = full
    else:
        T = min(full, state[1] + (t - state[0]) * L)
    allowed = T >= c * W
    T_after = T - c * W if allowed else T
    remaining = T_after // W
    if allowed:
        retry = 0
    elif c > B:
        retry = -1
    else:
        retry = max(1, ceil_div(c * W - T, L))
    reset = max(0, ceil_div(full - T_after, L))
    new = (t, T_after) if charge else state
    return [int(allowed), B, remaining, retry, reset, 0], new


def decide(algo, state, t, cost, L, W, B=None, charge=True, P=None):
    if state is not None and t < state[0]:
        t = state[0]
    if algo == LOG:
        return _log(state, t, cost, L, W, charge)
    if algo == BUCKETS:
        return _buckets(state, t, cost, L, W, P or DEFAULT_PRECISION, charge)
    if algo == FIXED:
        return _fixed(state, t, cost, L, W, charge)
    if algo == SLIDING:
        return _sliding(state, t, cost, L, W, charge)
    if algo in (TOKEN, GCRA):
        return _token(state, t, cost, L, W, B if B else L, charge)
    raise ValueError("the model does not implement %r" % algo)


# ---- the rules ---------------------------------------------------------------

class Limit:
    def __init__(self, spec, path_name, index, multi):
        self.unlimited = bool(spec.get("unlimited", False))
        self.given_name = spec.get("name")
        self.name = self.given_name or (path_name + ("#%d" % index if multi else ""))
        self.replaces = [r["name"] for r in spec.get("replaces", [])]
        if self.unlimited:
            self.l = self.w = 0
            self.algo = None
            return
        self.l = spec["requests_per_unit"]
        self.w = UNITS[spec["unit"].lower()] if "unit" in spec else parse_duration(spec["window"])
        self.algo = spec.get("algorithm", FIXED)
        self.burst = spec.get("burst")
        self.precision = spec.get("precision")
        self.soft = parse_pct(spec["soft"]) if "soft" in spec else None
        el = spec.get("elastic")
        if el is None:
            self.ceiling = None
        elif isinstance(el, str):
            self.ceiling = self.l + self.l * parse_pct(el) // 100
        else:
            self.ceiling = el
        self.multi = multi

    def effective_l(self):
        """soft: L + floor(L*N/100); else L."""
        return self.l + self.l * self.soft // 100 if self.soft is not None else self.l


def wildcard_re(pattern):
    """docs/rules.md "Matching": each `*` any run of characters (the empty
    one too), the rest as written, the whole value."""
    return re.compile(".*".join(re.escape(p) for p in pattern.split("*")), re.DOTALL)


class Node:
    def __init__(self, spec, domain, parent_path):
        self.key = spec["key"]
        v = spec.get("value")
        self.value = v if v else None
        self.wild = self.value is not None and "*" in self.value
        self.regex = wildcard_re(self.value) if self.wild else None
        self.shadow = bool(spec.get("shadow_mode", False))
        # a shadow descriptor never changes the answer, quota or not
        self.quota = bool(spec.get("quota_mode", False)) and not self.shadow
        self.share = bool(spec.get("share_threshold", False))
        part = self.key + ("_" + self.value if self.value is not None else "")
        self.path = parent_path + "." + part
        rl = spec.get("rate_limit")
        if rl is None:
            self.limits = []
        elif isinstance(rl, list):
            self.limits = [Limit(x, self.path, i + 1, len(rl) > 1) for i, x in enumerate(rl)]
        else:
            self.limits = [Limit(rl, self.path, 1, False)]
        self.children = [Node(c, domain, self.path) for c in spec.get("descriptors", [])]


def match_level(children, key, value, events=None):
    """docs/rules.md "Matching": the same value (a wildcard's own text too),
    else the first matching wildcard in file order, else key only."""
    exact = wild = keyonly = None
    wilds = 0
    for c in children:
        if c.key != key:
            continue
        if c.value is None:
            keyonly = c
        elif c.value == value:
            exact = c
        elif c.wild and c.regex.fullmatch(value):
            wilds += 1
            if wild is None:
                wild = c
    if events is not None:
        if exact and (wild or keyonly):
            events["match: exact before wildcard/key-only"] += 1
        if wild and keyonly and not exact:
            events["match: wildcard before key-only"] += 1
        if wilds > 1 and not exact:
            events["match: first of several wildcards"] += 1
        if not exact and wild and wild.value.rstrip("*").count("*"):
            events["match: a '*' inside the value"] += 1
        if exact and exact.wild:
            events["match: a wildcard's own text, exactly"] += 1
    return exact or wild or keyonly


def _any_path(level, entries):
    """Whether some walk, not only the greedy one, reaches a node with
    limits (only to count the cases where greediness decides)."""
    if not entries:
        return False
    k, v = entries[0]
    for c in level:
        if c.key != k:
            continue
        if c.value is not None and not (c.value == v or (c.wild and c.regex.fullmatch(v))):
            continue
        if len(entries) == 1 and c.limits or _any_path(c.children, entries[1:]):
            return True
    return False


def _holds_longer(a, b):
    """check.h: of two denials (result lists), the one reported holds the
    request longest: the larger retry_after (-1, never, the largest), and
    on equal retries the larger reset_after."""
    if a[3] != b[3]:
        return b[3] != -1 and (a[3] == -1 or a[3] > b[3])
    return a[4] > b[4]


def _frees_sooner(a, b):
    """check.h, quota mode: the smaller retry_after (-1 the largest), and
    on equal retries the larger reset_after."""
    if a[3] != b[3]:
        return a[3] != -1 and (b[3] == -1 or a[3] < b[3])
    return a[4] > b[4]


def _tightness(r):
    """check.h: of allowed answers the most restrictive has the smallest
    remaining, and on equal remaining the larger reset_after (the one the
    next request waits for); first on full ties (min keeps the first)."""
    return (r[2], -r[4])


class RulesModel:
    def __init__(self, files, capacity=None, within_l_at_ceiling=False, count_denied=False,
                 merge_domains=False):
        """files: list of dicts (one per YAML file, in file-name order);
        capacity: None or (N, W ms), the --capacity pool; count_denied:
        sluiced --count-denied (Lyft's counting); merge_domains: sluiced
        --merge-domains (files of one domain are one domain, in order).

        within_l_at_ceiling: in the elastic second try, also decide (and
        report) the elastic limits that were within L at their ceilings.
        The docs put only the limits that denied at their ceilings ("a
        request denied only by elastic limits is decided once more ... with
        those limits at their ceilings"; only an ELASTIC descriptor reports
        limit = the ceiling), so False is the documented answer; True is
        what sluiced answers today (docs/rules-model.md, "Disagreements")."""
        self.domains = {}
        for f in files:
            d = f["domain"]
            if d in self.domains and not merge_domains:
                raise ValueError("domain %r in two files" % d)
            self.domains.setdefault(d, []).extend(
                Node(c, d, d) for c in f.get("descriptors", []))
        self.count_denied = count_denied
        self.capacity = capacity
        self.within_l_at_ceiling = within_l_at_ceiling
        self.state = {}   # (counting key, algorithm) -> state
        # how often each notable case was met (for the test's coverage check)
        self.events = collections.Counter()

    def match(self, domain, entries):
        """The node whose limits apply, or None; self.chain: the nodes of
        its levels, top first."""
        self.chain = []
        level = self.domains.get(domain)
        if level is None or not entries:
            return None
        node = None
        for i, (k, v) in enumerate(entries):
            node = match_level(level, k, v, self.events)
            self.chain.append(node)
            if node is None:
                if i > 0:
                    self.events["match: no rule below a matched level"] += 1
                    if _any_path(self.domains[domain], entries):
                        self.events["match: greedy, a less specific path had a rule"] += 1
                return None
            level = node.children
        if node.limits:
            return node
        if _any_path(self.domains[domain], entries):
            self.events["match: greedy, a less specific path had a rule"] += 1
        return None

    # -- the engine, on the model's store --

    def _decide(self, ckey, lim, t, cost, L, charge):
        sk = (ckey, lim.algo)
        res, new = decide(lim.algo, self.state.get(sk), t, cost, L, lim.w, lim.burst, charge,
                          lim.precision)
        if charge and res[0]:
            self.state[sk] = new
        return res

    def _pool(self, t, cost, charge):
        n, w = self.capacity
        sk = (POOL_KEY, "pool")
        res, new = decide(FIXED, self.state.get(sk), t, cost, n, w, None, charge)
        if charge and res[0]:
            self.state[sk] = new
        return res

    def _lyft(self, k, lim, t, c):
        """docs/rules.md "Counting denied requests the Lyft way": charged
        whatever the answer, then the count after the charge against L."""
        sk = (k[0], lim.algo)
        big = 10 ** 12
        res, new = decide(FIXED, self.state.get(sk), t, c, big, lim.w, None, True)
        self.state[sk] = new
        L = lim.effective_l()
        after = big - res[2]
        if after <= L:
            return [1, L, L - after, 0, res[4], 0]
        return [0, L, 0, -1 if c > L else res[4], res[4], 0]

    def check(self, domain, cost, t, descriptors):
        """One RL.CHECK.  descriptors: list of lists of (key, value).  Returns
        the reply as sluiced's RESP parses (harness.parse_reply): six ints,
        then per descriptor [code bytes, name bytes or None, 4 ints]."""
        nodes, chains = [], []
        for d in descriptors:
            nodes.append(self.match(domain, d))
            chains.append(self.chain)
        replaced = set()
        for n in nodes:
            if n is not None:
                for lim in n.limits:
                    replaced.update(lim.replaces)

        # the counters: key -> [limit, merged cost, kind, descriptors]
        counters = {}
        order = []
        per_desc = []   # per descriptor: None, "unlimited", ("replaced", name), [(ckey, lim)]
        quota_descs = set()
        for i, (d, n, chain) in enumerate(zip(descriptors, nodes, chains)):
            if n is None:
                per_desc.append(None)
                continue
            if any(lim.unlimited for lim in n.limits):
                per_desc.append(("unlimited", n.limits[0].name))
                continue
            counted = [lim for lim in n.limits if lim.given_name is None
                       or lim.given_name not in replaced]
            if any(lim.replaces and lim.given_name in replaced for lim in n.limits):
                self.events["replaces: a replaced limit replaces too"] += 1
            if any(lim.soft is not None and lim.algo in (TOKEN, GCRA) for lim in n.limits):
                self.events["soft: on a token bucket"] += 1
            if len(counted) < len(n.limits):
                self.events["replaces: all of a descriptor" if not counted
                            else "replaces: some limits of a descriptor"] += 1
            if not counted:
                per_desc.append(("replaced", n.limits[0].name))
                continue
            kind = "shadow" if n.shadow else "quota" if n.quota else "enforced"
            if kind == "quota":
                quota_descs.add(i)
            # share_threshold: that level counts under its pattern
            parts = tuple((k, ("*share*", c.value) if c.share else v)
                          for (k, v), c in zip(d, chain))
            if any(c.share for c in chain):
                self.events["share: a level counted under its pattern"] += 1
            mine = []
            for lim in counted:
                ckey = (domain, parts, lim.w if lim.multi else None)
                if (ckey, lim.algo) not in counters:
                    counters[(ckey, lim.algo)] = [lim, 0, kind, set()]
                    order.append((ckey, lim.algo))
                else:
                    self.events["same counter twice: costs merged"] += 1
                    if parts != tuple(d):
                        self.events["share: two values, one counter"] += 1
                counters[(ckey, lim.algo)][1] += cost
                counters[(ckey, lim.algo)][3].add(i)
                mine.append((ckey, lim))
            per_desc.append(mine)

        if len({k[0] for k in order}) < len(order):
            self.events["one window, two algorithms: two counters"] += 1
        never = [0, 0, 0, -1, 0, 0]

        def elastic_ok(k):
            lim, _, kind, _ = counters[k]
            return (kind == "enforced" and self.capacity is not None and lim.l > 0
                    and lim.ceiling is not None)

        def lyft(k):
            lim = counters[k][0]
            return self.count_denied and lim.algo == FIXED and lim.l > 0 and not elastic_ok(k)

        res = {}
        # Lyft's counting: charged first, whatever comes next
        for k in order:
            lim, c, kind, _ = counters[k]
            if lim.l == 0:
                res[k] = list(never)
            elif lyft(k):
                res[k] = self._lyft(k, lim, t, c)
                if not res[k][0] and not (kind == "enforced" and lim.l > 0 and c > lim.l):
                    self.events["count-denied: over, charged"] += 1

        qover = set()

        def all_quota_over():
            for k in res:
                if counters[k][2] == "quota" and not res[k][0]:
                    qover.update(counters[k][3])
            return bool(quota_descs) and qover >= quota_descs

        passed = False
        quota_denied = False
        elastic = set()     # over L, passed at the ceiling on the pool
        ceilings = set()    # decided at their ceilings
        pool_remaining = None
        batch_ran = False
        denied = any(counters[k][2] == "enforced" and not res[k][0] for k in res)
        if not denied and all_quota_over():
            quota_denied = True
        if denied or quota_denied:
            for k in order:
                if k not in res:
                    lim, c, kind, _ = counters[k]
                    res[k] = self._decide(k[0], lim, t, c, lim.effective_l(), False)
                    if kind == "enforced" and not res[k][0]:
                        quota_denied = False
            if self.count_denied and any(lyft(k) for k in order):
                self.events["count-denied: denied, the rest peeked"] += 1
        else:
            out = set()
            while True:
                batch = [k for k in order if counters[k][2] != "shadow" and k not in out
                         and counters[k][0].l > 0 and not lyft(k)]
                if not batch:
                    passed = True
                    break
                batch_ran = True
                for k in batch:
                    lim, c, _, _ = counters[k]
                    res[k] = self._decide(k[0], lim, t, c, lim.effective_l(), False)
                if all(res[k][0] for k in batch):
                    passed = True
                    break
                no = [k for k in batch if not res[k][0]]
                if any(counters[k][2] == "enforced" and not elastic_ok(k) for k in no):
                    break
                quota_no = [k for k in no if counters[k][2] == "quota"]
                if quota_no:
                    self.events["quota: over, out of the batch"] += 1
                    out.update(quota_no)
                    if all_quota_over():
                        quota_denied = True
                        break
                    continue
                # denied only by elastic limits: the second try on the pool
                raised = set(no)
                if self.within_l_at_ceiling:
                    raised.update(k for k in batch if elastic_ok(k))
                res2 = dict(res)
                for k in raised:
                    lim, c, _, _ = counters[k]
                    res2[k] = self._decide(k[0], lim, t, c, lim.ceiling, False)
                pres = self._pool(t, cost, False)
                if all(res2[k][0] for k in batch) and pres[0]:
                    passed = True
                    res = res2
                    elastic = set(no)
                    ceilings = raised
                    self.events["elastic: passed on the pool"] += 1
                    for k in elastic:
                        self.events["elastic: above L on " + k[1]] += 1
                    if any(elastic_ok(k) and k not in elastic for k in batch):
                        self.events["elastic: another elastic limit within L"] += 1
                else:
                    self.events["elastic: second try failed" if pres[0]
                                else "elastic: pool full"] += 1
                break
            if passed:
                for k in batch:
                    lim, c, _, _ = counters[k]
                    L = lim.ceiling if k in ceilings else lim.effective_l()
                    res[k] = self._decide(k[0], lim, t, c, L, True)
                if out:
                    self.events["quota: over, allowed"] += 1
                counted = batch_ran or any(lyft(k) and counters[k][2] != "shadow"
                                           for k in order)
                if counted and self.capacity is not None:
                    pres = self._pool(t, cost, True)   # best effort: a full pool takes nothing
                    if not pres[0]:
                        self.events["pool: full, not charged"] += 1
                    pool_remaining = pres[2]
                for k in elastic:
                    res[k][2] = min(res[k][2], pool_remaining)
        if quota_denied:
            self.events["quota: every one over, denied"] += 1
        for k in order:
            lim, c, kind, _ = counters[k]
            if kind == "shadow" and k not in res:
                res[k] = self._decide(k[0], lim, t, c, lim.effective_l(), passed)

        # statuses
        statuses = []
        results = []   # per descriptor: (code, result6 of the reported limit, counted enforced)
        for d, n, pd in zip(descriptors, nodes, per_desc):
            if pd is None:
                statuses.append([b"NO_RULE", None, 0, 0, 0, 0])
                results.append(None)
                continue
            if isinstance(pd, tuple):
                code = b"UNLIMITED" if pd[0] == "unlimited" else b"OK"
                statuses.append([code, pd[1].encode(), 0, 0, 0, 0])
                results.append(None)
                continue
            items = [(lim, res[(ckey, lim.algo)], (ckey, lim.algo) in elastic) for ckey, lim in pd]
            over = [it for it in items if not it[1][0]]
            if over and len(over) < len(items):
                self.events["several limits: some over, some not"] += 1
            if not over and not passed and not n.shadow:
                self.events["denied by another descriptor: not charged"] += 1
            if any(it[1][3] == -1 for it in over):
                self.events["never (-1): L 0 or cost above the limit"] += 1
            if n.shadow and any(it[0].l == 0 for it in items):
                self.events["shadow: limit 0"] += 1
            if any(it[0].soft for it in items) and any(
                    it[1][0] and it[0].soft and it[1][1] - it[1][2] > it[0].l for it in items):
                self.events["soft: passed above L"] += 1
            if over:
                if n.shadow:
                    code = b"SHADOW"
                elif n.quota and not quota_denied:
                    code = b"OVER_QUOTA"
                else:
                    code = b"OVER_LIMIT"
                pick = over[0]
                for it in over[1:]:
                    if _holds_longer(it[1], pick[1]):
                        pick = it
            elif any(it[2] for it in items):
                code = b"ELASTIC"
                pick = min((it for it in items if it[2]), key=lambda it: _tightness(it[1]))
            else:
                code = b"OK"
                pick = min(items, key=lambda it: _tightness(it[1]))
            r = pick[1]
            statuses.append([code, pick[0].name.encode(), r[1], r[2], r[3], r[4]])
            results.append((code, r, not n.shadow))

        # the overall six fields (enforced descriptors only)
        if not passed:
            best = None
            for x in results:
                if x is None or x[0] != b"OVER_LIMIT":
                    continue
                if best is None:
                    best = x[1]
                elif quota_denied:   # the first to have room again
                    if _frees_sooner(x[1], best):
                        best = x[1]
                elif _holds_longer(x[1], best):
                    best = x[1]
            overall = [0, best[1], best[2], best[3], best[4], 0]
        else:
            best = None
            for x in results:
                if x is None or not x[2] or x[0] not in (b"OK", b"ELASTIC"):
                    continue
                if best is None or _tightness(x[1]) < _tightness(best):
                    best = x[1]
            overall = [1, 0, 0, 0, 0, 0] if best is None else [1, best[1], best[2], 0, best[4], 0]
        return overall + statuses
