"""RL.CHECK against an independent model (rules_model.py, written from the
docs, not from src/rules/check.c): random rule sets (nested descriptors,
exact / wildcard (a '*' anywhere, several) / key-only values, several
limits, shadow, quota, share_threshold, soft, elastic, unlimited,
replaces, a limit of 0; some seeds with --count-denied, some with a domain
in two files and --merge-domains) and random requests (several
descriptors, repeated ones, costs, unknown domains, wrong depths), every
element of every reply compared.  Deterministic: a fixed list of seeds,
each named on failure with the rules file, the request and both replies.

The model checks itself first: SPEC's vector files for the algorithms it
implements, and the worked examples of docs/rules.md and README.md."""

# sluice-e2e: no-tsan
# One server per seed, one connection at a time, no reload: the model
# comparison is logic, checked by the plain and ASan builds; TSan would see one
# worker serve one client.

import collections
import os
import random
import shutil
import tempfile
import unittest

import harness
from harness import BASE, Server, assert_clean_stop, encode
import rules_model as M

SEEDS = list(range(1, 81))          # odd seeds run with a --capacity pool,
                                    # seeds 2 mod 4 with --count-denied,
                                    # seeds 4 mod 8 with --merge-domains
REQUESTS = 400                      # per seed

# Before 2026-11-23 sluiced decided, in the elastic second try, every elastic
# limit at its ceiling, also those within L, which then answered OK with the
# ceiling's numbers (a `remaining` that could be false).  Fixed in
# src/backend/backend_local.c; test_elastic_within_l_reports_at_l below
# fails on the old way, and the model (within_l_at_ceiling=False) follows the
# documented one (docs/rules-model.md).

KEYS = ["a", "b", "c"]
VALUES = ["x", "y", "xa", "xb", "xab", "ya", "z"]
WILDS = ["x*", "xa*", "y*", "*", "x*b", "*a*", "x*a*b", "*b"]
SUFFIXES = ["", "a", "b", "ab", "q"]
WINDOWS = [("unit", "second"), ("window", "2s"), ("window", "5s"), ("window", "500ms"),
           ("unit", "minute"), ("window", "10s"), ("window", 1500)]
EVENTS = [  # rules_model.RulesModel.events
    "match: exact before wildcard/key-only", "match: wildcard before key-only",
    "match: first of several wildcards", "match: greedy, a less specific path had a rule",
    "match: a '*' inside the value", "match: a wildcard's own text, exactly",
    "share: a level counted under its pattern", "share: two values, one counter",
    "quota: over, out of the batch", "quota: over, allowed", "quota: every one over, denied",
    "count-denied: over, charged", "count-denied: denied, the rest peeked",
    "match: no rule below a matched level",
    "replaces: all of a descriptor", "replaces: a replaced limit replaces too",
    "soft: on a token bucket", "replaces: some limits of a descriptor",
    "same counter twice: costs merged", "elastic: passed on the pool",
    "elastic: another elastic limit within L", "elastic: second try failed",
    "elastic: pool full", "elastic: above L on fixed-window",
    "elastic: above L on sliding-window", "elastic: above L on sliding-log",
    "elastic: above L on sliding-buckets", "pool: full, not charged",
    "several limits: some over, some not",
    "denied by another descriptor: not charged", "never (-1): L 0 or cost above the limit",
    "shadow: limit 0", "soft: passed above L", "one window, two algorithms: two counters"]
CODES = (b"OK", b"OVER_LIMIT", b"SHADOW", b"ELASTIC", b"UNLIMITED", b"NO_RULE", b"OVER_QUOTA")


# ---- random rules -------------------------------------------------------------

def gen_limit(rng, taken):
    """One rate_limit dict; taken = {(algorithm, window)} of its siblings."""
    for _ in range(50):
        algo = rng.choices([M.FIXED, M.SLIDING, M.LOG, M.BUCKETS, M.TOKEN], [6, 3, 2, 2, 2])[0]
        wkind, wval = rng.choice(WINDOWS)
        w = M.UNITS[wval] if wkind == "unit" else M.parse_duration(wval)
        if (algo, w) not in taken:
            break
    else:
        return None
    taken.add((algo, w))
    lim = {wkind: wval}
    lim["requests_per_unit"] = 0 if rng.random() < 0.04 else rng.randint(1, 5)
    if algo != M.FIXED or rng.random() < 0.2:
        lim["algorithm"] = algo
    L = lim["requests_per_unit"]
    if algo == M.BUCKETS and rng.random() < 0.7:
        lim["precision"] = rng.choice([2, 4, 5, 10])
    if algo == M.TOKEN:
        if L > 0 and rng.random() < 0.4:
            lim["burst"] = L + rng.randint(0, 3)
        if L > 0 and rng.random() < 0.12:    # a bucket's soft L: its rate, and B if unset
            lim["soft"] = "%d%%" % rng.choice([0, 50, 100])
    elif L > 0:
        r = rng.random()
        if r < 0.12:
            lim["soft"] = "%d%%" % rng.choice([0, 10, 50, 100, 200])
        elif r < 0.35:
            if rng.random() < 0.5:
                lim["elastic"] = L + rng.randint(1, 3)
            else:
                pct = rng.choice([50, 100, 200])
                if L * pct // 100 >= 1:
                    lim["elastic"] = "%d%%" % pct
    return lim


def gen_rate_limit(rng):
    if rng.random() < 0.06:
        return {"unlimited": True}
    n = 1 if rng.random() < 0.7 else rng.randint(2, 3)
    taken = set()
    lims = [x for x in (gen_limit(rng, taken) for _ in range(n)) if x]
    if n == 1 and rng.random() < 0.8:
        return lims[0]
    return lims


def gen_level(rng, depth):
    nodes = []
    for k in rng.sample(KEYS, rng.randint(1, 3 if depth == 0 else 2)):
        vals = [None] if rng.random() < 0.6 else []
        vals += rng.sample(VALUES, rng.randint(0, 2))
        vals += rng.sample(WILDS, rng.choice([0, 0, 1, 2]))
        if not vals:
            vals = [None]
        for v in vals:
            node = {"key": k}
            if v is not None:
                node["value"] = v
            nested = depth < 2 and rng.random() < 0.3
            if rng.random() < 0.1:
                node["shadow_mode"] = True
            if rng.random() < 0.15:
                node["quota_mode"] = True
            if v is not None and "*" in v and rng.random() < 0.35:
                node["share_threshold"] = True
            if not nested or rng.random() < 0.3:
                node["rate_limit"] = gen_rate_limit(rng)
            if nested:
                node["descriptors"] = gen_level(rng, depth + 1)
            nodes.append(node)
    return nodes


def all_limits(nodes):
    for n in nodes:
        rl = n.get("rate_limit")
        for lim in (rl if isinstance(rl, list) else [rl] if rl else []):
            yield lim
        yield from all_limits(n.get("descriptors", []))


def gen_rules(rng):
    files = []
    for d in range(rng.randint(1, 3)):
        descs = gen_level(rng, 0)
        lims = list(all_limits(descs))
        targets = []
        for i, lim in enumerate(lims):
            if rng.random() < 0.25:
                lim["name"] = "d%d_t%d" % (d, i)
                targets.append(lim)
        for i, lim in enumerate(lims):
            # any limit may replace (chains and cycles included), never itself
            others = [x for x in targets if x is not lim]
            if lim.get("unlimited") or not others or rng.random() > 0.2:
                continue
            if "name" not in lim and rng.random() < 0.5:
                lim["name"] = "d%d_r%d" % (d, i)
            lim["replaces"] = [{"name": t["name"]}
                               for t in rng.sample(others, min(len(others), rng.randint(1, 2)))]
        files.append({"domain": "d%d" % d, "descriptors": descs})
    return files


# ---- YAML ---------------------------------------------------------------------

def y_scalar(k, v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if k in ("key", "value", "name"):
        return '"%s"' % v
    return v


def y_limit(lim):
    parts = []
    for k, v in lim.items():
        if k == "replaces":
            parts.append("replaces: [%s]" % ", ".join('{name: "%s"}' % r["name"] for r in v))
        else:
            parts.append("%s: %s" % (k, y_scalar(k, v)))
    return "{" + ", ".join(parts) + "}"


def y_nodes(nodes, ind):
    out = []
    for n in nodes:
        out.append("%s- key: %s" % (ind, y_scalar("key", n["key"])))
        sub = ind + "  "
        if "value" in n:
            out.append("%svalue: %s" % (sub, y_scalar("value", n["value"])))
        for flag in ("shadow_mode", "quota_mode", "share_threshold"):
            if n.get(flag):
                out.append("%s%s: true" % (sub, flag))
        rl = n.get("rate_limit")
        if isinstance(rl, list):
            out.append("%srate_limit:" % sub)
            out += ["%s  - %s" % (sub, y_limit(x)) for x in rl]
        elif rl is not None:
            out.append("%srate_limit: %s" % (sub, y_limit(rl)))
        if n.get("descriptors"):
            out.append("%sdescriptors:" % sub)
            out += y_nodes(n["descriptors"], sub + "  ")
    return out


def to_yaml(f):
    return "\n".join(["domain: %s" % f["domain"], "descriptors:"]
                     + y_nodes(f["descriptors"], "  ")) + "\n"


# ---- random requests -----------------------------------------------------------

def gen_entries(rng, tree):
    entries = []
    level = tree
    while len(entries) < 4:
        node = rng.choice(level) if level and rng.random() > 0.08 else None
        key = node["key"] if node else rng.choice(KEYS)
        v = node.get("value") if node else None
        if v and "*" not in v and rng.random() < 0.7:
            value = v
        elif v and "*" in v and rng.random() < 0.04:
            value = v               # a wildcard's own text
        elif v and "*" in v and rng.random() < 0.7:
            value = "".join(p + (rng.choice(SUFFIXES) if i else "")
                            for i, p in enumerate(v.split("*")))
        else:
            value = rng.choice(VALUES)
        if not value:
            value = rng.choice(VALUES)
        entries.append((key, value))
        if node and node.get("descriptors") and rng.random() < 0.85:
            level = node["descriptors"]
        elif rng.random() < 0.07:
            level = []          # one entry too many
        else:
            break
    return entries


def gen_requests(rng, files, n):
    trees = {}
    for f in files:
        trees.setdefault(f["domain"], []).extend(f["descriptors"])
    t = BASE + rng.randint(0, 999)
    out = []
    for _ in range(n):
        t += rng.randint(0, 300) if rng.random() < 0.95 else rng.randint(1000, 8000)
        domain = rng.choice(sorted(trees)) if rng.random() < 0.93 else "nodomain"
        tree = trees.get(domain, [])
        descs = []
        for _ in range(rng.choices([1, 2, 3], [5, 3, 2])[0]):
            if descs and rng.random() < 0.12:
                descs.append(list(rng.choice(descs)))      # the same counter twice
            else:
                descs.append(gen_entries(rng, tree))
        cost = rng.choices([1, 2, 3, 0, 6], [75, 10, 5, 5, 5])[0]
        out.append((domain, cost, t, descs))
    return out


def command(domain, cost, t, descs):
    args = ["RL.CHECK", domain]
    if cost != 1:
        args += ["COST", cost]
    args += ["AT", t]
    for d in descs:
        args.append("DESCRIPTOR")
        for k, v in d:
            args += [k, v]
    return args


# ---- the tests -----------------------------------------------------------------

class TestModelSelfCheck(unittest.TestCase):
    """The model against the spec's vectors and the docs' worked examples,
    with no server: a wrong model would make the random test meaningless."""

    def test_spec_vectors(self):
        ran = []
        for name, (L, W, opts), rows in harness.load_vectors():
            o = dict(zip(opts[::2], opts[1::2]))
            if "LOGREJECTED" in opts or o.get("ALGO") not in M.ALGORITHMS:
                continue
            state = {}
            for i, (t, key, cost, want) in enumerate(rows):
                got, state[key] = M.decide(o["ALGO"], state.get(key), t,
                                           1 if cost is None else cost, int(L), int(W),
                                           int(o["BURST"]) if "BURST" in o else None, True,
                                           int(o["PRECISION"]) if "PRECISION" in o else None)
                self.assertEqual(got, want, "%s line %d" % (name, i + 1))
            ran.append(o["ALGO"])
        self.assertEqual(sorted(set(ran)), sorted(M.ALGORITHMS))

    def test_readme_rl_check_example(self):
        rules = [{"domain": "api", "descriptors": [
            {"key": "user", "rate_limit": {"unit": "minute", "requests_per_unit": 2}},
            {"key": "path", "value": "/login",
             "rate_limit": {"unit": "hour", "requests_per_unit": 1}}]}]
        m = M.RulesModel(rules)
        t = 12 * 3600000 + 48 * 60000 + 7115      # 12:48:07.115
        d = [[("user", "bob")], [("path", "/login")]]
        self.assertEqual(m.check("api", 1, t, d), [
            1, 1, 0, 0, 712885, 0,
            [b"OK", b"api.user", 2, 1, 0, 52885],
            [b"OK", b"api.path_/login", 1, 0, 0, 712885]])
        self.assertEqual(m.check("api", 1, t + 7, d), [
            0, 1, 0, 712878, 712878, 0,
            [b"OK", b"api.user", 2, 0, 0, 52878],
            [b"OVER_LIMIT", b"api.path_/login", 1, 0, 712878, 712878]])

    def test_elastic_example(self):
        # docs/rules.md: L 3, ceiling 5, --capacity 6/1m
        rules = [{"domain": "api", "descriptors": [
            {"key": "tenant", "rate_limit": {"unit": "minute", "requests_per_unit": 3,
                                             "elastic": 5}}]}]
        m = M.RulesModel(rules, capacity=(6, 60000))
        got = [m.check("api", 1, 0, [[("tenant", "a")]])[6][0] for _ in range(6)]
        self.assertEqual(got, [b"OK"] * 3 + [b"ELASTIC"] * 2 + [b"OVER_LIMIT"])
        got = [m.check("api", 1, 0, [[("tenant", "b")]])[6][0] for _ in range(4)]
        self.assertEqual(got, [b"OK"] * 3 + [b"OVER_LIMIT"])

    def test_replaces_and_matching_examples(self):
        rules = [{"domain": "api", "descriptors": [
            {"key": "team", "rate_limit": {"unit": "minute", "requests_per_unit": 2,
                                           "name": "team_default"}},
            {"key": "vip", "rate_limit": {"unit": "minute", "requests_per_unit": 100,
                                          "name": "vip",
                                          "replaces": [{"name": "team_default"}]}}]},
                 {"domain": "edge", "descriptors": [
                     {"key": "remote_address",
                      "rate_limit": {"unit": "second", "requests_per_unit": 10}},
                     {"key": "remote_address", "value": "50.0.0.5",
                      "rate_limit": {"unit": "second", "requests_per_unit": 0}},
                     {"key": "path", "value": "/api/*",
                      "rate_limit": {"unit": "second", "requests_per_unit": 100}}]}]
        m = M.RulesModel(rules)
        for _ in range(2):
            m.check("api", 1, 0, [[("team", "red")]])
        r = m.check("api", 1, 0, [[("team", "red")], [("vip", "yes")]])
        self.assertEqual(r[6], [b"OK", b"team_default", 0, 0, 0, 0])
        self.assertEqual(r[7], [b"OK", b"vip", 100, 99, 0, 60000])
        r = m.check("edge", 1, 0, [[("remote_address", "50.0.0.5")], [("path", "/api/x")]])
        self.assertEqual(r[:6], [0, 0, 0, -1, 0, 0])
        self.assertEqual(r[6], [b"OVER_LIMIT", b"edge.remote_address_50.0.0.5", 0, 0, -1, 0])
        self.assertEqual(r[7][:2], [b"OK", b"edge.path_/api/*"])
        self.assertEqual(m.check("edge", 1, 0, [[("path", "/apix")]])[6][0], b"NO_RULE")


ELASTIC_RULES = """domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1, elastic: 4}
"""


class TestElasticWithinL(unittest.TestCase):
    """Where sluiced and the docs part: a request denied only by an elastic
    limit (tenant a, over its L of 1) passes on the pool, and another
    elastic limit of the same request, within its own L (tenant b), answers
    OK with its ceiling's numbers, limit 4 and remaining 3 -- yet b's next
    request at the same t is denied (the pool of 2 is full), so by SPEC §3
    `remaining` should be 0.  The docs raise to the ceiling only the limits
    that denied ("those limits"; "such a descriptor answers ELASTIC, with
    limit = the ceiling"), which answers b at its L: OK, 1, 0."""

    def test_model_on_the_example(self):
        rules = [{"domain": "api", "descriptors": [
            {"key": "tenant", "rate_limit": {"unit": "minute", "requests_per_unit": 1,
                                             "elastic": 4}}]}]
        for server_way, b_status, overall in (
                (False, [b"OK", b"api.tenant", 1, 0, 0, 60000], [1, 4, 0, 0, 60000, 0]),
                (True, [b"OK", b"api.tenant", 4, 3, 0, 60000], [1, 4, 0, 0, 60000, 0])):
            m = M.RulesModel(rules, (2, 60000), within_l_at_ceiling=server_way)
            m.check("api", 1, 0, [[("tenant", "a")]])
            r = m.check("api", 1, 0, [[("tenant", "a")], [("tenant", "b")]])
            self.assertEqual(r[:6], overall)
            self.assertEqual(r[6], [b"ELASTIC", b"api.tenant", 4, 0, 0, 60000])
            self.assertEqual(r[7], b_status)
            self.assertEqual(m.check("api", 1, 0, [[("tenant", "b")]])[6][0], b"OVER_LIMIT")

    def test_elastic_within_l_reports_at_l(self):
        d = tempfile.mkdtemp(prefix="sluice-model-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "api.yaml")
        with open(path, "w") as f:
            f.write(ELASTIC_RULES)
        srv = Server("--rules", path, "--capacity", "2/1m", trust_client_time=True,
                     name="elastic-within-l")
        srv.start()
        self.addCleanup(srv.kill)
        t = BASE
        with srv.raw() as c:
            c.cmd("RL.CHECK", "api", "AT", t, "DESCRIPTOR", "tenant", "a")
            r = c.cmd("RL.CHECK", "api", "AT", t, "DESCRIPTOR", "tenant", "a",
                      "DESCRIPTOR", "tenant", "b")
            after = c.cmd("RL.CHECK", "api", "AT", t, "DESCRIPTOR", "tenant", "b")
        srv.stop()
        assert_clean_stop(srv)
        self.assertEqual(after[6][0], b"OVER_LIMIT")      # b had no room left
        self.assertEqual(r[6], [b"ELASTIC", b"api.tenant", 4, 0, 0, 60000])
        # within L: its own numbers (the old way said 4, 3: its ceiling's)
        self.assertEqual(r[7], [b"OK", b"api.tenant", 1, 0, 0, 60000])


class TestRulesModel(unittest.TestCase):

    def run_seed(self, seed, seen):
        rng = random.Random(seed)
        files = gen_rules(rng)
        capacity = None
        args = []
        if seed % 2:
            n, w = rng.randint(3, 12), rng.choice(["1s", "2s", "5s", "10s"])
            capacity = (n, M.parse_duration(w))
            args = ["--capacity", "%d/%s" % (n, w)]
        count_denied = seed % 4 == 2
        if count_denied:
            args.append("--count-denied")
        names = [f["domain"] for f in files]
        if seed % 8 == 4:
            # the first domain in two files: its top-level descriptors split
            f0 = files[0]
            cut = rng.randint(0, len(f0["descriptors"]))
            files = [{"domain": f0["domain"], "descriptors": f0["descriptors"][:cut]},
                     {"domain": f0["domain"], "descriptors": f0["descriptors"][cut:]}] + files[1:]
            names = [f0["domain"], f0["domain"] + "z"] + names[1:]  # after it by name
            args.append("--merge-domains")
        reqs = gen_requests(rng, files, REQUESTS)
        d = tempfile.mkdtemp(prefix="sluice-model-")
        self.addCleanup(shutil.rmtree, d, True)
        yaml_text = ""
        for name, f in zip(names, files):
            text = to_yaml(f)
            yaml_text += "# %s.yaml\n%s" % (name, text)
            with open(os.path.join(d, name + ".yaml"), "w") as fh:
                fh.write(text)
        srv = Server("--rules", d, *args, trust_client_time=True, name="model-seed-%d" % seed)
        srv.start()
        self.addCleanup(srv.kill)
        model = M.RulesModel(files, capacity, within_l_at_ceiling=False,
                             count_denied=count_denied, merge_domains=seed % 8 == 4)
        cmds = [command(*r) for r in reqs]
        with srv.raw(timeout=30) as c:
            c.send(b"".join(encode(*a) for a in cmds))
            got = c.read_replies(len(cmds), timeout=60)
        for i, (req, cmd, reply) in enumerate(zip(reqs, cmds, got)):
            want = model.check(*req)
            if reply != want:
                ctx = "\n".join("  #%d %s -> %r" % (j, " ".join(map(str, cmds[j])), got[j])
                                for j in range(max(0, i - 8), i))
                self.fail("seed %d, request #%d differs from the model\n"
                          "options: %s\nrules:\n%s\nthe requests before it:\n%s\n"
                          "request: %s\nsluiced: %r\nmodel:   %r"
                          % (seed, i, " ".join(args) or "none", yaml_text, ctx,
                             " ".join(map(str, cmd)), reply, want))
            seen["requests denied"] += want[0] == 0
            seen["requests"] += 1
            for st in want[6:]:
                seen["code " + st[0].decode()] += 1
        seen.update(model.events)
        srv.stop()
        assert_clean_stop(srv)

    def test_random_rule_sets_against_the_model(self):
        seen = collections.Counter()
        for seed in SEEDS:
            with self.subTest(seed=seed):
                self.run_seed(seed, seen)
        # The generator must reach every code and every case the model
        # knows, or agreeing with it proves little.
        want = ["code " + c.decode() for c in CODES] + EVENTS
        missing = [w for w in want if not seen[w]]
        self.assertEqual(missing, [], "cases never met in %d seeds: %s" % (len(SEEDS), seen))
        self.assertGreater(seen["requests denied"], seen["requests"] // 20, seen)
        if os.environ.get("SLUICE_MODEL_STATS"):
            print("\n".join("  %6d  %s" % (v, k) for k, v in sorted(seen.items())))


if __name__ == "__main__":
    unittest.main()
