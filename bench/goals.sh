#!/usr/bin/env bash
# bench/goals.sh -- issue 30's goal table in one command: a base build (the
# issue's commit, e9bf021) and a new one, interleaved in the same run.
#
#   bench/goals.sh BASE_BUILD [NEW_BUILD]     (NEW_BUILD: this tree's build/)
#
# Each build dir needs bench/bench (make build/bench/bench).  Runs:
#   1. ROUNDS rounds (6) of `bench/bench --algo token-bucket --parts hot,1m
#      --seconds 1 --reps 1`, pinned to CPU $CPU (1), base then new in odd
#      rounds, new then base in even ones; from each run: hot keys and 1M
#      keys (one call a decision, M/s) and the fill of 1M new keys (inserts);
#   2. ROUNDS rounds of `--parts 2t` on CPUs $PAIR (0,1), same order: two
#      threads each on its own keys of one store, and each on its own store;
#      before each round's two runs, bench/pingpong.c on the same CPUs
#      (PINGPONG_TRIPS round trips, 2000000): how long a cache line takes
#      from one of them to the other that round (the whole run's mean, and
#      the median of its batches of >= 1000 trips, which a process taking a
#      core for a while spoils less).  This VM's two vCPUs are placed either
#      near (~40-60 ns one way) or far (~200 ns) by the hypervisor, and
#      anything two threads both write costs that much more in the far
#      mode, so the two-thread ratio moves with the mode; the table shows
#      each round's ns beside the ratio;
#   3. switched on by the environment, the other goals, by their own scripts:
#      KEYBYTES=1  bench/keybytes.sh NEW_BUILD (needs NEW_BUILD/sluicectl)
#      MISSES=1    bench/misses.sh BASE_BUILD NEW_BUILD (cachegrind: slow;
#                  LL defaults to a 4 MB last level here, where 1M keys fit
#                  in neither build, so the table's misses show)
#      PEERS=1     bench/peers.sh NEW_BUILD (ROUNDS=$PEERS_ROUNDS, 3)
#      CHAIN=1     bench/chain.sh BASE_BUILD NEW_BUILD (ROUNDS=$CHAIN_ROUNDS, 3):
#                  the misses a 1M-key decision waits for, one after
#                  another, by time -- the nearest this VM (no PMU) comes to
#                  "perf's view"; MISSES=1 counts lines touched instead
# and prints one table: medians of each build, new / base, the issue's goal,
# met or not, and every round's values.  Every command is printed as run
# (`+ ...`), and the load average before and after.  bench/pingpong.c is
# built with `cc -O2 -pthread` into a temporary directory, unless PINGPONG
# names a program taking "CPU_A CPU_B TRIPS" (the test's stub).  Exit 0 when
# everything was measured (met or not), 1 on an error, 2 on a bad argument.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

usage() {
    note "usage: bench/goals.sh BASE_BUILD [NEW_BUILD]   (environment: ROUNDS CPU PAIR PINGPONG_TRIPS KEYBYTES MISSES PEERS CHAIN)"
    exit 2
}
bad_arg() {
    note "bench/goals.sh: $*"
    exit 2
}
if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
ROUNDS=${ROUNDS:-6}
CPU=${CPU:-1}
PAIR=${PAIR:-0,1}
PEERS_ROUNDS=${PEERS_ROUNDS:-3}
CHAIN_ROUNDS=${CHAIN_ROUNDS:-3}
PINGPONG_TRIPS=${PINGPONG_TRIPS:-2000000}
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || bad_arg "ROUNDS must be a count of 1 to 99, not '$ROUNDS'"
[[ $PEERS_ROUNDS =~ ^[1-9][0-9]?$ ]] || bad_arg "PEERS_ROUNDS must be a count of 1 to 99, not '$PEERS_ROUNDS'"
[[ $CPU =~ ^[0-9]+$ ]] || bad_arg "CPU must be one CPU number, not '$CPU'"
[[ $PAIR =~ ^[0-9]+,[0-9]+$ ]] || bad_arg "PAIR must be two CPU numbers as A,B, not '$PAIR'"
[ $((10#${PAIR%,*})) -ne $((10#${PAIR#*,})) ] || bad_arg "PAIR must be two different CPUs (the pingpong needs two), not '$PAIR'"
[[ $CHAIN_ROUNDS =~ ^[1-9][0-9]?$ ]] || bad_arg "CHAIN_ROUNDS must be a count of 1 to 99, not '$CHAIN_ROUNDS'"
[[ $PINGPONG_TRIPS =~ ^([1-9][0-9]{0,8}|1000000000)$ ]] ||
    bad_arg "PINGPONG_TRIPS must be a count of 1 to 1000000000, not '$PINGPONG_TRIPS'"
for v in KEYBYTES MISSES PEERS CHAIN; do
    [[ ${!v:-0} =~ ^[01]$ ]] || bad_arg "$v must be 0 or 1, not '${!v}'"
done

abs_build() { # DIR: its absolute path, or an error naming it
    [ -d "$1" ] || die "no build dir $1"
    (cd "$1" && pwd)
}
BASE=$(abs_build "$1")
NEW=$(abs_build "${2:-$ROOT/build}")
# Everything a part needs is checked before the first run, so a missing
# piece costs no minutes of benchmarking.
for b in "$BASE" "$NEW"; do
    [ -x "$b/bench/bench" ] || die "no $b/bench/bench (make build/bench/bench in its tree)"
done
command -v taskset >/dev/null || die "needs taskset (util-linux)"
taskset -c "$CPU" true 2>/dev/null || die "cannot pin to CPU=$CPU (taskset -c $CPU failed; nproc says $(nproc))"
# each CPU alone: a mask of two succeeds when either one is usable
for c in "${PAIR%,*}" "${PAIR#*,}"; do
    taskset -c "$c" true 2>/dev/null || die "cannot run on PAIR=$PAIR (taskset -c $c failed; nproc says $(nproc))"
done
if [ "${KEYBYTES:-0}" = 1 ]; then
    [ -x "$NEW/sluicectl" ] || die "KEYBYTES=1: no $NEW/sluicectl (make build/sluicectl)"
fi
if [ "${MISSES:-0}" = 1 ]; then
    for b in "$BASE" "$NEW"; do
        [ -f "$b/libsluice.a" ] || die "MISSES=1: no $b/libsluice.a (make build/libsluice.a)"
        [ -f "$b/../include/sluice.h" ] || die "MISSES=1: no $b/../include/sluice.h"
    done
    command -v valgrind >/dev/null || die "MISSES=1: needs valgrind (apt install valgrind)"
fi
if [ "${PEERS:-0}" = 1 ]; then
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then die "PEERS=1: needs node and npm (scripts/deps.sh)"; fi
fi
if [ "${CHAIN:-0}" = 1 ] && [ -z "${CHASE:-}" ]; then
    command -v cc >/dev/null || die "CHAIN=1: needs cc to build bench/chase.c (apt install gcc)"
fi
if [ -n "${PINGPONG:-}" ]; then
    [ -x "$PINGPONG" ] || die "PINGPONG=$PINGPONG is not an executable program"
else
    command -v cc >/dev/null || die "needs cc to build bench/pingpong.c, the core-to-core latency of step 2 (apt install gcc)"
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# table_cells FILE: bench/bench's tables as "section<TAB>header<TAB>value"
# lines, one per column of the first token-bucket row under each table's
# two header lines ("algorithm" and "details"); header = "line 1 / line 2".
table_cells() {
    awk -F'|' '
        function trim(s) { gsub(/^ +| +$/, "", s); return s }
        $1 ~ /^(algorithm|details) / {
            sec = trim($1); for (i = 2; i <= NF; i++) h1[sec, i] = trim($i); second = 1; next }
        second { for (i = 2; i <= NF; i++) h[sec, i] = h1[sec, i] " / " trim($i); second = 0; row = 1; next }
        row && $1 ~ /^token-bucket / {
            for (i = 2; i <= NF; i++) printf "%s\t%s\t%s\n", sec, h[sec, i], trim($i); row = 0 }' "$1"
}
# cell FILE BUILD SECTION HEADER: the first number of that cell (a "27.1
# (13.2)" cell gives 27.1); dies, showing the output, unless it is > 0
cell() {
    local v
    v=$(table_cells "$1" | awk -F'\t' -v s="$3" -v h="$4" '$1 == s && $2 == h { split($3, w, " "); print w[1]; exit }')
    if ! awk -v v="$v" 'BEGIN { exit !(v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0) }'; then
        note "bench/goals.sh: $2/bench/bench printed no number under \"$3: $4\" (got '${v}'); its output:"
        sed 's/^/    /' "$1" >&2
        exit 1
    fi
    printf '%s\n' "$v"
}
# bench WHO BUILD OUT CPUS PARTS: one bench/bench run into OUT, or an error
bench() {
    local cmd=(timeout 300 taskset -c "$4" "$2/bench/bench" --algo token-bucket --parts "$5" --seconds 1 --reps 1)
    show "${cmd[@]}"
    local rc=0
    "${cmd[@]}" >"$3" 2>"$3.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        note "bench/goals.sh: the $1 build's run failed (exit status $rc): ${cmd[*]}"
        tail -n 20 "$3.err" | sed 's/^/    /' >&2
        exit 1
    fi
}
# order R: "base new" in odd rounds, "new base" in even ones
order() { if [ $(($1 % 2)) -eq 1 ]; then echo base new; else echo new base; fi; }
dir_of() { if [ "$1" = base ]; then echo "$BASE"; else echo "$NEW"; fi; }

echo "bench/goals.sh: issue 30's goals; base $BASE, new $NEW; $ROUNDS rounds, order alternating"
echo "load before: $(cat /proc/loadavg) ($(nproc) CPUs)"
if [ -z "${PINGPONG:-}" ]; then
    PINGPONG=$TMP/pingpong
    show cc -O2 -pthread -o "$PINGPONG" "$ROOT/bench/pingpong.c"
    cc -O2 -pthread -o "$PINGPONG" "$ROOT/bench/pingpong.c" >"$TMP/cc.out" 2>&1 || {
        note "bench/goals.sh: building bench/pingpong.c failed:"
        sed 's/^/    /' "$TMP/cc.out" >&2
        exit 1
    }
fi
# pingpong: one run of the pingpong on $PAIR; appends its one-way ns (the
# first "N ns one way") to $TMP/pp.ns, and its cpu/wall % and the median of
# its batches ("median N ns") to $TMP/pp.share and $TMP/pp.batch ("-" for
# either it does not print)
pingpong() {
    local cmd=(timeout 900 "$PINGPONG" "${PAIR%,*}" "${PAIR#*,}" "$PINGPONG_TRIPS") rc=0 line ns share batch
    show "${cmd[@]}"
    "${cmd[@]}" >"$TMP/pp.out" 2>"$TMP/pp.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        note "bench/goals.sh: the pingpong failed (exit status $rc): ${cmd[*]}"
        tail -n 20 "$TMP/pp.err" | sed 's/^/    /' >&2
        exit 1
    fi
    line=$(awk '{ for (i = 1; i < NF; i++) {
                      if (n == "" && $(i + 1) == "ns" && $(i + 2) ~ /^one/) n = $i
                      if ($i == "cpu/wall") s = $(i + 1)
                      if ($i == "median" && $(i + 2) == "ns") m = $(i + 1) } }
                n != "" { print n, (s ~ /^[0-9]+$/ ? s : "-"), (m ~ /^[0-9]+(\.[0-9]+)?$/ ? m : "-"); exit }' "$TMP/pp.out")
    read -r ns share batch <<<"${line:-x x x}"
    if ! awk -v v="$ns" 'BEGIN { exit !(v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0) }'; then
        note "bench/goals.sh: the pingpong printed no 'N ns one way' with N > 0; its output:"
        sed 's/^/    /' "$TMP/pp.out" "$TMP/pp.err" >&2
        exit 1
    fi
    note "$(cat "$TMP/pp.out")"
    echo "$ns" >>"$TMP/pp.ns"
    echo "$share" >>"$TMP/pp.share"
    echo "$batch" >>"$TMP/pp.batch"
}

for r in $(seq "$ROUNDS"); do
    note "one thread, round $r of $ROUNDS"
    for w in $(order "$r"); do
        b=$(dir_of "$w")
        bench "$w" "$b" "$TMP/out" "$CPU" hot,1m
        cell "$TMP/out" "$b" algorithm "hot keys / 1 thr M/s" >>"$TMP/$w.hot"
        cell "$TMP/out" "$b" algorithm "1M keys / 1 thr M/s" >>"$TMP/$w.many"
        cell "$TMP/out" "$b" details "fill M/s / many" >>"$TMP/$w.fill"
    done
done
for r in $(seq "$ROUNDS"); do
    note "two threads, round $r of $ROUNDS"
    pingpong
    for w in $(order "$r"); do
        b=$(dir_of "$w")
        bench "$w" "$b" "$TMP/out" "$PAIR" 2t
        cell "$TMP/out" "$b" details "2 thr hot M/s / own keys: agg(min)" >>"$TMP/$w.own"
        cell "$TMP/out" "$b" details "2 thr hot M/s / own store: agg(min)" >>"$TMP/$w.sep"
    done
done

# The optional parts: each script's own output is shown whole, then the
# number its goal is judged on is taken from it.
# run_part OUT CMD...: runs CMD (bounded), its output to stdout and OUT
run_part() {
    local out=$1
    shift
    local rc=0
    show "$@"
    "$@" >"$out" || rc=$?
    [ "$rc" -eq 0 ] || die "failed (exit status $rc): $*"
    cat "$out"
}
# with_env VAR...: "env VAR=value ..." for each VAR set in the environment,
# so that the printed command names the knobs the script will read
with_env() {
    local v
    printf '%s\n' env
    for v in "$@"; do if [ -n "${!v+x}" ]; then printf '%s\n' "$v=${!v}"; fi; done
}
if [ "${KEYBYTES:-0}" = 1 ]; then
    mapfile -t e < <(with_env N RUNS ALGOS)
    run_part "$TMP/keybytes" "${e[@]}" timeout 1800 "$ROOT/bench/keybytes.sh" "$NEW"
    # rows: BUILD ALGO RSS KB RSS KB B-a-key BEYOND-KEY
    awk 'NR > 1 && NF >= 8 { print $2, $NF }' "$TMP/keybytes" >"$TMP/keybytes.rows"
    [ -s "$TMP/keybytes.rows" ] || die "bench/keybytes.sh printed no row"
fi
if [ "${MISSES:-0}" = 1 ]; then
    mapfile -t e < <(with_env N D KL)
    run_part "$TMP/misses" "${e[@]}" LL="${LL:-4194304,16,64}" timeout 3600 "$ROOT/bench/misses.sh" "$BASE" "$NEW"
    # lines: "BUILD: per decision  Ir X  Dr X  D1mr X  DLmr X", base first
    awk '{ for (i = 1; i < NF; i++) if ($i == "DLmr") print $(i + 1) }' "$TMP/misses" >"$TMP/misses.rows"
    [ "$(wc -l <"$TMP/misses.rows")" -eq 2 ] || die "bench/misses.sh printed no DLmr for both builds"
fi
if [ "${PEERS:-0}" = 1 ]; then
    mapfile -t e < <(with_env SECONDS_LIB SECONDS_PEER)
    run_part "$TMP/peers" "${e[@]}" ROUNDS="$PEERS_ROUNDS" timeout 1800 "$ROOT/bench/peers.sh" "$NEW"
    # last row: "sluice / the peer at its best | HOTx | 1Mx |"
    awk -F'|' '$1 ~ /^sluice \/ the peer/ { gsub(/[ x]/, "", $3); print $3 }' "$TMP/peers" >"$TMP/peers.rows"
    [ -s "$TMP/peers.rows" ] || die "bench/peers.sh printed no 'sluice / the peer at its best' row"
fi
if [ "${CHAIN:-0}" = 1 ]; then
    mapfile -t e < <(with_env CHASE_MB L3_MB LOADS CHASE)
    run_part "$TMP/chain" "${e[@]}" ROUNDS="$CHAIN_ROUNDS" CPU="$CPU" timeout 1800 "$ROOT/bench/chain.sh" "$BASE" "$NEW"
    # medians table rows: "BUILD | hot | 1M | ns hot | ns 1M | DRAM ns | misses", base first
    awk -F'|' -v b="$BASE" -v n="$NEW" 'NF == 7 { g = $1; gsub(/ /, "", g); if (g == b || g == n) { m = $7; gsub(/ /, "", m); print m } }' \
        "$TMP/chain" | head -n 2 >"$TMP/chain.rows"
    [ "$(wc -l <"$TMP/chain.rows")" -eq 2 ] || die "bench/chain.sh printed no 'misses by time' for both builds"
fi

echo "load after: $(cat /proc/loadavg)"
python3 - "$TMP" "$ROUNDS" "${LL:-4194304,16,64}" "${N:-1000000}" "$PAIR" <<'EOF'
import os, statistics, sys
d, rounds, ll, nkeys, cpu_pair = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def vals(name):
    return [float(x) for x in open(os.path.join(d, name)).read().split()]

rows, met, judged, missed = [], 0, 0, []

def row(name, b, n, ratio, goal, ok, rounds_text):
    global met, judged
    f = lambda x, p=3: "-" if x is None else f"{x:.{p}f}"
    if ok is not None:
        judged += 1
        met += ok
        if not ok:
            missed.append(f"{name} ({f(ratio) + 'x' if ratio is not None else f(n)})")
    rows.append((name, f(b), f(n), "-" if ratio is None else f"{ratio:.3f}x", goal,
                 "-" if ok is None else ("yes" if ok else "no"), rounds_text))

def rt(b, n, ratios=False):
    t = "base " + " ".join(f"{x:.2f}" for x in b) + "; new " + " ".join(f"{x:.2f}" for x in n)
    if ratios:  # each round's pair ran back to back: its ratio shares its load
        t += "; new/base " + " ".join(f"{y / x:.2f}" for x, y in zip(b, n))
    return t

def pair(name, key, goal=None, at_least=None):
    b, n = vals(f"base.{key}"), vals(f"new.{key}")
    mb, mn = statistics.median(b), statistics.median(n)
    ratio = mn / mb
    row(name, mb, mn, ratio, goal or "-", None if at_least is None else ratio >= at_least, rt(b, n, True))

pair("1M keys, one call a decision, M/s", "many", ">= 1.6x base", 1.6)
pair("hot keys, M/s", "hot", ">= 0.97x base", 0.97)
pair("fill of 1M new keys, M/s", "fill")
pair("2 threads, own keys, M/s", "own")
pair("2 threads, own stores, M/s", "sep")
# the two-thread goal: own keys / own stores within each run, median of runs
own = {w: [o / s for o, s in zip(vals(f"{w}.own"), vals(f"{w}.sep"))] for w in ("base", "new")}
mo = {w: statistics.median(own[w]) for w in own}
row("2 threads, own keys / own stores", mo["base"], mo["new"], None, "new >= 0.9",
    mo["new"] >= 0.9, rt(own["base"], own["new"]))
# the round's core-to-core trip, measured once before its two runs: one
# value a round, for both builds, so the same median in both columns
pp = vals("pp.ns")
pp_share = open(f"{d}/pp.share").read().split()
pp_batch = open(f"{d}/pp.batch").read().split()
mp = statistics.median(pp)
row(f"core to core, one way, ns ({cpu_pair})", mp, mp, None, "-", None,
    " ".join(f"{x:.1f}" for x in pp) + "; batch medians " + " ".join(pp_batch) + "; cpu/wall % " + " ".join(pp_share))
if os.path.exists(f"{d}/keybytes.rows"):
    for line in open(f"{d}/keybytes.rows"):
        algo, beyond = line.split()
        v = float(beyond)
        row(f"B a 16-byte key beyond it, {algo}", None, v, None, "new <= 24", v <= 24, "bench/keybytes.sh")
if os.path.exists(f"{d}/misses.rows"):
    b, n = vals("misses.rows")
    row(f"LL misses a decision, {nkeys} keys, LL {ll}", b, n, n / b if b > 0 else None,
        "new <= base - 1", n <= b - 1, "bench/misses.sh")
if os.path.exists(f"{d}/chain.rows"):
    b, n = vals("chain.rows")
    row("misses a 1M-key decision waits for, by time", b, n, n / b if b > 0 else None,
        "new <= 1.1", n <= 1.1, "bench/chain.sh: (ns 1M - ns hot) / DRAM ns")
if os.path.exists(f"{d}/peers.rows"):
    v = vals("peers.rows")[0]
    row("1M keys, new / rate-limiter-flexible's best", None, v, None, "new >= 10", v >= 10,
        "bench/peers.sh")

head = ("quantity", "base", "new", "new/base", "goal", "met", "values, round by round")
w = [max(len(r[i]) for r in rows + [head]) for i in range(6)]
print(f"\nmedians, rounds: {rounds} (bench/bench, token bucket, 1 s a run; one thread pinned, two threads on two CPUs):")
fmt = lambda r: " | ".join([r[0].ljust(w[0])] + [r[i].rjust(w[i]) for i in range(1, 6)] + [r[6]])
print(fmt(head))
print("-+-".join("-" * x for x in w) + "-+-" + "-" * 24)
for r in rows:
    print(fmt(r))
print(f"core to core: bench/pingpong.c on CPUs {cpu_pair} before each round's two 2t runs; near ~40-60 ns,"
      " far ~200 ns: in the far mode the two-thread ratio falls for any code whose threads write shared lines;"
      " below ~95 cpu/wall the batch medians (1000-trip batches) still show the mode")
print(f"goals met: {met} of {judged}" + (f"; missed: {', '.join(missed)}" if missed else ""))
EOF
