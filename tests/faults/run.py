#!/usr/bin/python3
"""run.py -- runs a fault schedule (topology x fault x mode) and prints a
Jepsen-style table of what the clients were told (docs/faults.md).

    /usr/bin/python3 tests/faults/run.py --schedule bounded   # the test command's round
    /usr/bin/python3 tests/faults/run.py --schedule long      # make faults: 50 of each kind
    /usr/bin/python3 tests/faults/run.py --count 10 --topology sentinel --fault stall

For each mode (MODES, or --mode) and topology, the topology is started
once; each fault kind is a phase of its own with keys of its own: clients
run, the fault is injected `count` times (inject, hold, heal, wait until
the topology is whole again, a gap), the clients stop, and the checker
counts the phase's history.  With --assert the run fails (exit 1) when the
harness did not work: a history incomplete, a fault not healed (the
topology not whole again within its bound), a process that did not stop
cleanly, a proxy thread left -- or over-admission in a mode whose row says
expect_zero.  Over-admission in the other modes is measured and printed,
never asserted.
"""

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import checker  # noqa: E402
import topo  # noqa: E402
from load import Load, Plan  # noqa: E402

# The modes: (name, the topologies it applies to, extra sluiced flags,
# expect_zero).  `{dir}` in a flag is the topology's scratch folder.  The
# hook for durability: a mode's row with expect_zero=True makes every
# schedule -- the bounded round in the test command included -- assert 0
# over-admitted requests with it (docs/faults.md, "With durability on").
#
# A fifth element, when there, is the mode's load (Load's rate and burst,
# Plan's fixed, keys, hot, hot_algos and limits): --lease on leases only
# keys hot on a node (SL_LEASE_HOT decisions in 100 ms on one connection),
# which the default 150 requests/s over 9 keys and 3 nodes never makes;
# LEASE_LOAD sends 5 requests at once to one node, 80 % of them split
# between a fixed-window key of L = 500 per 2 s and a token-bucket key of
# B = L = 60 per 250 ms (~360/s each against 250/s and 240/s), so leases of
# both kinds are taken, spent, handed back and held at every fault, and
# both keys are at their limit (docs/faults.md, "Leases under faults").
# --hot picks other algorithms for the hot share (LEASE_LIMITS).
LEASE_LIMITS = {"fixed": (500, 2000), "bucket": (60, 250), "gcra": (60, 250),
                "swindow": (500, 2000)}
LEASE_LOAD = dict(rate=900, burst=5, fixed=LEASE_LIMITS["fixed"], keys=1, hot=0.8,
                  hot_algos=("fixed", "bucket"), limits=LEASE_LIMITS)

MODES = [
    ("none", ("single", "sentinel", "cluster"), [], False),
    ("lease+replicas:1", ("sentinel",), ["--lease", "on", "--durability", "replicas:1",
                                         "--backend-timeout", "250ms"], True, LEASE_LOAD),
    ("replicas:1", ("sentinel", "cluster"), ["--durability", "replicas:1",
                                             "--backend-timeout", "250ms"], True),
    ("journal-always", ("single",), ["--journal", "{dir}/journal",
                                     "--journal-fsync", "always"], True),
    ("deny-window", ("single",), ["--after-crash", "deny-window"], True),
]

# schedule -> (faults of each kind, warm-up s, gap between faults s, settle s, rate)
SCHEDULES = {
    "bounded": (1, 1.0, 0.2, 0.3, 150),
    "medium": (10, 1.5, 0.5, 0.5, 150),
    "long": (50, 1.5, 0.5, 0.5, 150),
}


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def run_phase(t, fault, mode, count, warm, gap, settle, rate, run_id, prof=None):
    """One fault kind on a started topology (prof: the mode's load, as
    LEASE_LOAD).  Returns (Counts, row facts, problems, history)."""
    inject, heal = t.faults()[fault]
    phase = "%s:%s:%s:%s" % (run_id, t.name, fault, mode)
    prof = prof or {}
    plan = Plan(phase, **{k: prof[k] for k in ("fixed", "keys", "hot", "hot_algos", "limits")
                          if k in prof})
    load = Load(t, plan, rate=prof.get("rate", rate), burst=prof.get("burst", 1),
                seed=hash(phase) & 0xffff).start()
    problems = []
    injected = healed = 0
    info_before = t.fallbacks()
    lease_before = t.lease_decisions()
    holding_before = t.killed_holding
    failovers_before = t.failovers()
    effects_before = t.effects
    try:
        time.sleep(warm)
        t0 = time.monotonic()
        for k in range(count):
            what = inject(k)
            injected += 1
            time.sleep(t.HOLD[fault])
            heal(k)
            not_whole = t.ready()
            if not_whole:
                problems += ["after %r: %s" % (what, p) for p in not_whole]
            else:
                healed += 1
            log("%s %s/%d: %s, whole again after %.1fs" % (t.name, fault, k + 1, what,
                                                           time.monotonic() - t0))
            time.sleep(gap)
            t0 = time.monotonic()
        time.sleep(settle)
    finally:
        problems += load.stop()
    # how each node reaches Redis at the end (docs/fleet.md, "Through the
    # module"): "mixed" means some connections use the module and others the
    # script, whose counters are different keys -- a cause of over-admission
    paths = set()
    for s in t.nodes:
        try:
            p = topo.info_of(s.port, "backend").get("backend_redis_path")
        except (OSError, EOFError, TimeoutError, AssertionError):
            p = "?"
        if p:
            paths.add(p)
    try:
        info_policy = t.fallbacks() - info_before
    except (OSError, EOFError, TimeoutError, AssertionError, ValueError):
        info_policy = -1
    try:
        lease_decisions = t.lease_decisions() - lease_before
    except (OSError, EOFError, TimeoutError, AssertionError, ValueError):
        lease_decisions = -1
    hist = load.history()
    counts = checker.check(hist, slack=SLACK_MS)[phase] if hist else checker.check([])["*"]
    # per algorithm: allowed, denied, over-admitted, failure-policy answers
    # (the checker on that algorithm's answers)
    by_algo = {}
    for algo in sorted(set(x.algo for x in hist)):
        ca = checker.check([x for x in hist if x.algo == algo], slack=SLACK_MS)[phase]
        by_algo[algo] = [ca.allowed, ca.denied, ca.over_admitted, ca.policy]
    facts = dict(injected=injected, healed=healed, redis_paths=sorted(paths), by_algo=by_algo,
                 failovers=t.failovers() - failovers_before,
                 effects=t.effects - effects_before,
                 info_policy=info_policy, lease_decisions=lease_decisions,
                 killed_holding=t.killed_holding - holding_before)
    return counts, facts, problems, hist


SLACK_MS = 2.0


def run_topology(tname, mode, flags, expect_zero, a, count, warm, gap, settle, rate, run_id,
                 want_faults, prof=None):
    """Starts one topology in one mode, runs a phase of each fault kind,
    stops it.  Returns (rows, problems, history)."""
    rows, problems, history = [], [], []
    cls = topo.TOPOLOGIES[tname]
    kw = {"backend": a.sentinel_backend, "module": a.module} if tname == "sentinel" else {}
    t = cls([], **kw)
    t.tag = "" if mode == "none" else "".join(c for c in mode if c.isalnum()) + "-"
    t.mode_flags = [f.replace("{dir}", t.dir) for f in flags]
    tstart = time.monotonic()
    try:
        t.start()
        log("%s (%s) started in %.1fs" % (tname, mode, time.monotonic() - tstart))
        for fault in t.faults():
            if want_faults and fault not in want_faults:
                continue
            c, facts, ps, hist = run_phase(t, fault, mode, count, warm, gap, settle, rate,
                                           run_id, prof)
            history += hist
            problems += ["%s/%s/%s: %s" % (tname, fault, mode, p) for p in ps]
            if expect_zero and c.over_admitted:
                problems.append("%s/%s/%s: %d over-admitted (expected 0) on %s"
                                % (tname, fault, mode, c.over_admitted,
                                   ", ".join(c.keys_over[:5])))
            if facts["injected"] != count or facts["healed"] != count:
                problems.append("%s/%s/%s: %d of %d faults injected, %d healed"
                                % (tname, fault, mode, facts["injected"], count,
                                   facts["healed"]))
            if tname == "sentinel" and a.module and facts["redis_paths"] != ["module"]:
                problems.append("%s/%s/%s: backend_redis_path %s at the end, not module"
                                % (tname, fault, mode, "/".join(facts["redis_paths"])))
            if c.requests == 0:
                problems.append("%s/%s/%s: no request recorded" % (tname, fault, mode))
            rows.append(dict(fault=fault, topology=tname, mode=mode, faults=count,
                             requests=c.requests, allowed=c.allowed,
                             over_admitted=c.over_admitted, windows_over=c.windows_over,
                             unavailable=c.unavailable, errors=c.errors, policy=c.policy,
                             expect_zero=expect_zero, flags=list(flags), **facts))
    except Exception as e:  # noqa: BLE001 -- reported as a problem of the run, then stop
        problems.append("%s/%s: %s\n%s" % (tname, mode, str(e)[:3000],
                                            traceback.format_exc()[-3000:]))
    finally:
        stop_problems = t.stop()
        problems += ["%s/%s stop: %s" % (tname, mode, p) for p in stop_problems]
        log("%s (%s) done in %.1fs, stopped%s" % (tname, mode, time.monotonic() - tstart,
                                                  " with problems" if stop_problems
                                                  else " cleanly"))
    return rows, problems, history


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="bounded")
    ap.add_argument("--count", type=int, help="faults of each kind (default: the schedule's)")
    ap.add_argument("--topology", default="single,sentinel,cluster",
                    help="comma-separated: single, sentinel, cluster")
    ap.add_argument("--fault", default="", help="comma-separated fault kinds (default: all "
                    "a topology offers: kill-sluiced, kill-master, stall, partition)")
    ap.add_argument("--mode", action="append", default=[],
                    help="NAME=FLAGS (extra sluiced flags, split on spaces) replaces MODES; "
                    "NAME+=FLAGS also asserts 0 over-admitted (with --assert)")
    ap.add_argument("--sentinel-backend", default="redis://{proxy}",
                    help="backend URL template for the sentinel topology ({proxy}, "
                    "{sentinel}, {master})")
    ap.add_argument("--rate", type=int, help="requests a second, all clients together "
                    "(a lease mode's too)")
    ap.add_argument("--hot", help="lease modes: comma-separated algorithms whose key gets the "
                    "hot share (fixed, bucket, gcra, swindow; default fixed,bucket)")
    ap.add_argument("--module", action="store_true",
                    help="load build/sluice.so in the sentinel topology's Redis servers: "
                    "sluiced's module path (RL.LEASE); a node not on it at a phase's end is "
                    "a problem")
    ap.add_argument("--assert", dest="check", action="store_true",
                    help="exit 1 unless the harness worked (and expect_zero modes are 0)")
    ap.add_argument("--parallel", action="store_true",
                    help="run the topologies at the same time (one thread each)")
    ap.add_argument("--json", help="write the rows (and problems) to this file")
    ap.add_argument("--history", help="write every answer, one JSON array a line, here")
    a = ap.parse_args(argv)

    count, warm, gap, settle, rate = SCHEDULES[a.schedule]
    count = a.count if a.count is not None else count
    rate = a.rate or rate
    modes = MODES
    if a.mode:
        modes = []
        for m in a.mode:
            name, sep, flags = m.partition("=")
            zero = name.endswith("+")
            flags = flags.split()
            prof = dict(LEASE_LOAD) if "--lease" in flags else None
            modes.append((name.rstrip("+"), ("single", "sentinel", "cluster"), flags, zero, prof))
    if a.hot or a.rate:
        modes = [m[:4] + (dict(m[4], **({"hot_algos": tuple(a.hot.split(","))} if a.hot else {}),
                               **({"rate": a.rate} if a.rate else {})),)
                 if len(m) > 4 and m[4] else m for m in modes]
        for m in modes:
            for h in (m[4].get("hot_algos", ()) if len(m) > 4 and m[4] else ()):
                if h not in LEASE_LIMITS:
                    ap.error("--hot: %r is not one of %s" % (h, ", ".join(sorted(LEASE_LIMITS))))
    want_faults = [f for f in a.fault.split(",") if f]
    run_id = "%x" % random.getrandbits(32)
    rows = []
    problems = []
    hist_out = open(a.history, "w") if a.history else None
    started = time.monotonic()
    jobs = []
    for m in modes:
        mode, tops, flags, expect_zero = m[:4]
        for tname in [x for x in a.topology.split(",") if x]:
            if tname in tops:
                jobs.append((tname, mode, flags, expect_zero, m[4] if len(m) > 4 else None))
    results = [None] * len(jobs)

    def job(i):
        tname, mode, flags, expect_zero, prof = jobs[i]
        results[i] = run_topology(tname, mode, flags, expect_zero, a, count, warm, gap, settle,
                                  rate, run_id, want_faults, prof)
    if a.parallel:
        threads = [threading.Thread(target=job, args=(i,), name=jobs[i][0])
                   for i in range(len(jobs))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    else:
        for i in range(len(jobs)):
            job(i)
    for r, ps, hist in results:
        rows += r
        problems += ps
        if hist_out:
            for x in hist:
                hist_out.write(json.dumps(list(x)) + "\n")
    if hist_out:
        hist_out.close()
    # every process started, stopped: sluiced nodes, redis-servers, Sentinels
    for proc, what in ([(x.proc, x.name) for x in topo.harness.STARTED] +
                       [(x.proc, "redis-server :%s" % x.port) for x in topo.harness.REDIS_STARTED] +
                       [(x.proc, "sentinel :%s" % x.port) for x in topo.SENTINELS]):
        if proc is not None and proc.poll() is None:
            problems.append("still running after the run: %s (pid %d)" % (what, proc.pid))
    print(table(rows))
    for r in rows:
        if r["lease_decisions"] or "--lease" in r.get("flags", ()):
            print("LEASE %s/%s/%s: %d decisions paid by leases, %d node(s) killed holding leases"
                  % (r["topology"], r["fault"], r["mode"], r["lease_decisions"],
                     r["killed_holding"]))
        print("ALGO %s/%s/%s: %s" % (r["topology"], r["fault"], r["mode"], ", ".join(
            "%s %d allowed %d denied %d over" % (k, v[0], v[1], v[2])
            for k, v in sorted(r["by_algo"].items()))))
        extra = r["failovers"] - (r["faults"] if r["fault"] == "kill-master" else 0)
        if extra:
            print("NOTE %s/%s/%s: %d failover(s) that no kill-master asked for (a fault or the "
                  "load made a master look dead; Redis's logs)" % (r["topology"], r["fault"],
                                                                   r["mode"], extra))
        if "mixed" in r["redis_paths"]:
            print("NOTE %s/%s/%s: a node's backend_redis_path was mixed at the end (module and "
                  "script connections: two counters a key)" % (r["topology"], r["fault"], r["mode"]))
    print("total %.1fs, %d faults injected" % (time.monotonic() - started,
                                              sum(r["injected"] for r in rows)))
    for p in problems:
        print("PROBLEM %s" % p)
    # sluiced's logs: kept when something went wrong, else removed (unless
    # the caller named the folder, SLUICE_E2E_LOGS)
    if problems:
        print("logs kept in %s" % topo.harness.LOG_DIR)
    elif not os.environ.get("SLUICE_E2E_LOGS"):
        shutil.rmtree(topo.harness.LOG_DIR, True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rows=rows, problems=problems), f, indent=1)
    return 1 if (a.check and problems) else 0


def table(rows):
    head = ["fault", "topology", "mode", "faults", "requests", "over-admitted", "windows over",
            "unavailable", "policy (INFO)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| %s | %s | %s | %d | %d | %d | %d | %d | %s |" % (
            r["fault"], r["topology"], r["mode"], r["faults"], r["requests"],
            r["over_admitted"], r["windows_over"], r["unavailable"],
            "%d (%d)" % (r["policy"], r["info_policy"])))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
