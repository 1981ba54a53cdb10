#!/bin/sh
# test_faults.sh -- the fault harness (tests/faults/, docs/faults.md), bounded:
# the checker's unit tests (tests/faults/test_checker.py, one case each), then
# one short round (tests/faults/run.py --schedule bounded: one fault of each
# kind on each topology -- single, sentinel, cluster --, the topologies at
# the same time) and what can be asserted of it today:
# - each row (topology x fault x mode): the fault injected and healed (the
#   topology whole again within its bound), the clients' history complete
#   (every request sent has its answer recorded), requests recorded;
# - each topology stopped cleanly by PID (sluiced and redis-server exit 0
#   on SIGTERM, no crash or sanitizer report in their logs, Sentinel too,
#   no proxy thread left), nothing left running;
# - a mode whose row in run.py's MODES says expect_zero (durability on):
#   0 over-admitted requests.  With durability off ("none") the
#   over-admission is measured and printed, not asserted.
# - a lease mode: leases paid decisions, and its load's fixed-window and
#   token-bucket keys met their limits (real denials) in every phase.
# Heavy (3 topologies, 10 redis-servers): the plain build only.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
PY=/usr/bin/python3

for f in "$BUILD/sluiced" "$BUILD/sluice.so"; do
    [ -e "$f" ] || { echo "FAIL  no $f (build first)"; exit 1; }
done
for p in redis-server redis-cli; do
    command -v "$p" >/dev/null || { echo "FAIL  no $p"; exit 1; }
done

# 1. the checker's unit tests, one case each
(cd "$ROOT/tests/faults" && "$PY" -m unittest -v test_checker) >"$T/unit.log" 2>&1
unit_rc=$?
awk '/ \.\.\. ok$/ { n = $1; sub(/^\(/, "", $2); sub(/\)$/, "", $2); print "ok    checker:" $2 }
     / \.\.\. (FAIL|ERROR)$/ { sub(/^\(/, "", $2); sub(/\)$/, "", $2); print "FAIL  checker:" $2 }' \
    "$T/unit.log" >"$T/unit.cases"
while IFS= read -r line; do
    case $line in
    ok*) ok "${line#ok    }" ;;
    FAIL*) bad "${line#FAIL  }" "$(cat "$T/unit.log")" ;;
    esac
done <"$T/unit.cases"
if [ "$unit_rc" -ne 0 ] && ! grep -q '^FAIL' "$T/unit.cases"; then
    bad "checker:unittest" "exit $unit_rc" "$(cat "$T/unit.log")"
fi
grep -q . "$T/unit.cases" || bad "checker:unittest" "no case ran" "$(cat "$T/unit.log")"

# 2. one bounded round
start=$(date +%s)
SLUICE_BUILD=$BUILD SLUICE_E2E_LOGS=$T/logs "$PY" "$ROOT/tests/faults/run.py" \
    --schedule bounded --parallel --json "$T/round.json" >"$T/round.out" 2>"$T/round.err"
rc=$?
end=$(date +%s)
sed 's/^/info  /' "$T/round.out"
echo "info  bounded round: $((end - start))s"
if [ ! -s "$T/round.json" ]; then
    bad "round:ran" "run.py exit $rc, no rows" "$(tail -50 "$T/round.err")"
    finish
fi
"$PY" - "$T/round.json" "$T/round.err" "$ROOT/tests/faults" >"$T/round.cases" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows, problems = d["rows"], d["problems"]
err = open(sys.argv[2]).read()[-4000:]
used = set()

def case(name, good, detail=""):
    if good:
        print("ok    %s" % name)
    else:
        print("FAIL  %s" % name)
        for l in detail.splitlines():
            print("        " + l)

# one row for every fault each topology offers (kill-sluiced on every one;
# kill-master and stall with Redis; partition through the Sentinel proxies)
want = {"single": ["kill-sluiced"], "sentinel": ["kill-sluiced", "kill-master", "stall", "partition"],
        "cluster": ["kill-sluiced", "kill-master", "stall"]}
# ... in every mode of run.py's MODES that applies to the topology
sys.path.insert(0, sys.argv[3])
import run
modes = {t: sorted(m[0] for m in run.MODES if t in m[1]) for t in want}
have = {}
for r in rows:
    have.setdefault((r["topology"], r["mode"]), []).append(r["fault"])
for t, faults in sorted(want.items()):
    got = {m: sorted(have.get((t, m), [])) for m in modes[t]}
    seen = sorted(m for (tt, m) in have if tt == t)
    case("round:%s:faults" % t, seen == modes[t] and all(f == sorted(faults) for f in got.values()),
         "rows: %r (modes %r), want %r in modes %r\n%s"
         % (got, seen, faults, modes[t], "\n".join(problems) + "\n" + err))
for r in rows:
    key = "%s/%s/%s" % (r["topology"], r["fault"], r["mode"])
    mine = [p for p in problems if p.startswith(key + ":")]
    used.update(mine)
    case("round:%s" % key,
         not mine and r["injected"] == r["faults"] == r["healed"] and r["requests"] > 0,
         "\n".join(mine) + "\n%r" % r)
    # each fault seen to take effect: the process died of SIGKILL or was
    # stopped (state T), the proxy held or reset a connection; a master's
    # death was followed by a failover in Redis's own log
    case("round:%s:took-effect" % key,
         r["effects"] == r["faults"] and (r["fault"] != "kill-master" or
                                          r["failovers"] >= r["faults"]),
         "%d of %d faults seen to take effect, %d failovers logged"
         % (r["effects"], r["faults"], r["failovers"]))
    print("info  %s: %d requests, %d over-admitted in %d windows, %d unavailable "
          "(%d failure-policy answers; INFO counted %d) -- measured"
          % (key, r["requests"], r["over_admitted"], r["windows_over"], r["unavailable"],
             r["policy"], r["info_policy"]))
    # --lease on: leases were taken and paid decisions in the phase (the
    # load makes one key hot on each node), so the fault met leases
    if "--lease" in r.get("flags", ()):
        case("lease:%s" % key, r["lease_decisions"] > 0,
             "%d decisions paid by leases (INFO backend_lease_decisions)" % r["lease_decisions"])
        print("info  %s: %d decisions paid by leases, %d node(s) killed holding leases"
              % (key, r["lease_decisions"], r["killed_holding"]))
        # the lease load's bucket key (tests/faults/run.py, LEASE_LOAD) met its
        # limit: real denials, not the policy's (else 0 over could not fail)
        for algo in ("fixed", "bucket"):
            a, d, o, pol = r["by_algo"].get(algo, [0, 0, 0, 0])
            case("lease:%s:%s-at-limit" % (key, algo), d - pol > 0,
                 "%s: %d allowed, %d denied (%d by the policy), %d over" % (algo, a, d, pol, o))
    if r["expect_zero"]:
        case("zero:%s" % key, r["over_admitted"] == 0,
             "%d over-admitted with durability on" % r["over_admitted"])
for t in sorted(want):
    mine = [p for p in problems if p.startswith(t + "/") and p not in used]
    used.update(mine)
    case("round:%s:stopped" % t, not mine, "\n".join(mine))
rest = [p for p in problems if p not in used]
case("round:nothing-left", not rest, "\n".join(rest))
EOF
[ $? -eq 0 ] || bad "round:checks" "$(cat "$T/round.cases")"
# the cases through lib.sh's tally (FAIL lines' details, indented, as they are)
while IFS= read -r line; do
    case $line in
    "ok    "*) ok "${line#ok    }" ;;
    "FAIL  "*) bad "${line#FAIL  }" ;;
    *) printf '%s\n' "$line" ;;
    esac
done <"$T/round.cases"
finish
