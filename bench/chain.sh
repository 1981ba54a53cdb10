#!/usr/bin/env bash
# bench/chain.sh -- how many cache misses a 1M-key decision waits for, one
# after another, measured by time (issue 30: "one miss where there were
# two"; this VM has no PMU, so perf cannot count them, and cachegrind's
# count in bench/misses.sh is of lines touched, not of waits: a record
# straddling two adjacent lines counts two misses, fetched together).
#
#   bench/chain.sh BUILD [BUILD...]       (each BUILD dir needs bench/bench)
#
# For ROUNDS rounds (6), pinned with `taskset -c $CPU` (1): each build's
# `bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1`
# (the builds in the order given in odd rounds, reversed in even ones), then
# bench/chase.c over CHASE_MB (256) MB -- far past the 32 MB L3: DRAM -- and
# over L3_MB (8) MB -- an L3 hit --, LOADS (2e7) dependent loads each.  From
# the bench's "  run token-bucket  hot X  many Y ..." line: X and Y, M
# decisions/s on 1,000 hot keys and on 1M keys.  Printed: every command as
# run (`+ ...`), the load average before and after, then a table of each
# build's medians -- hot and 1M M/s, ns a hot decision (1000 / X) and a 1M
# decision (1000 / Y) (medians of the rounds' ns), the chase's DRAM ns a
# load (median of the rounds) -- and
#
#     dependent misses a decision by time = (ns 1M - ns hot) / DRAM ns
#
# from those medians, then every run's values round by round, with that
# round's own quotient and the CPU share (cpu/wall) of its runs.
#
# What the number means: the time a 1M-key decision spends beyond a hot
# one, in units of one DRAM round trip -- how many misses it waited for in
# a row.  Caveats:
#   - the hot path is not the 1M path minus its misses: a 1M key can take
#     more probe steps (a longer walk, a second table), so the extra time
#     is not all waiting, which pushes the number up;
#   - misses that overlap -- issued together (a record across two lines),
#     or one overlapped with computation by a prefetch, or with the next
#     decision's work by the out-of-order core (decisions in the loop are
#     independent) -- cost about one; the number is then below the true
#     count of misses.  That is the point (the waits are what a user
#     pays), but it is not a count of lines fetched;
#   - the chase is on 4 KB pages (MADV_NOHUGEPAGE), as the store's fitted
#     tables are, so each of its loads includes a TLB miss as a 1M-key
#     decision's do; a 256 MB chase has more page-table entries to miss on
#     than a store of 1M keys, so its page walks may cost more (compare
#     CHASE_MB=40);
#   - a 1M-key store is about the L3's size (23-31 MB resident against
#     32 MB: bench/bench --parts mem), so some of a decision's loads hit the L3
#     (~13 ns, the L3 chase) when no other process crowds it: the number is
#     in DRAM round trips, not a count of loads that went to DRAM;
#   - all of it is wall-clock time on a shared 2-core VM: another process
#     on the core inflates every ns.  The cpu/wall column says when (below
#     ~95 % the round is suspect); the rounds' quotients share their round's
#     load, the medians do not cancel it.
#
# Environment: ROUNDS (6, 1..99), CPU (1), CHASE_MB (256), L3_MB (8), LOADS
# (20000000), CHASE (a chase program taking "MB LOADS"; default: bench/chase.c
# built here with `cc -O2` into a temporary directory).  Exit 0 when all was
# measured, 1 on an error (a missing or broken build, a failed run, output
# without its number), 2 on a bad argument.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

usage() {
    note "usage: bench/chain.sh BUILD [BUILD...]   (environment: ROUNDS CPU CHASE_MB L3_MB LOADS CHASE)"
    exit 2
}
bad_arg() {
    note "bench/chain.sh: $*"
    exit 2
}
[ $# -ge 1 ] || usage
ROUNDS=${ROUNDS:-6}
CPU=${CPU:-1}
CHASE_MB=${CHASE_MB:-256}
L3_MB=${L3_MB:-8}
LOADS=${LOADS:-20000000}
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || bad_arg "ROUNDS must be a count of 1 to 99, not '$ROUNDS'"
[[ $CPU =~ ^[0-9]+$ ]] || bad_arg "CPU must be one CPU number, not '$CPU'"
[[ $CHASE_MB =~ ^[1-9][0-9]{0,4}$ ]] || bad_arg "CHASE_MB must be megabytes, 1 to 99999, not '$CHASE_MB'"
[[ $L3_MB =~ ^[1-9][0-9]{0,4}$ ]] || bad_arg "L3_MB must be megabytes, 1 to 99999, not '$L3_MB'"
[[ $LOADS =~ ^[1-9][0-9]{0,9}$ ]] || bad_arg "LOADS must be a count of 1 to 9999999999, not '$LOADS'"

# Everything is checked before the first run: a missing piece costs no
# minutes of benchmarking.
BUILDS=()
for b in "$@"; do
    [ -d "$b" ] || die "no build dir $b"
    b=$(cd "$b" && pwd)
    [ -x "$b/bench/bench" ] || die "no $b/bench/bench (make build/bench/bench in its tree)"
    BUILDS+=("$b")
done
command -v taskset >/dev/null || die "needs taskset (util-linux)"
taskset -c "$CPU" true 2>/dev/null || die "cannot pin to CPU=$CPU (taskset -c $CPU failed; nproc says $(nproc))"
command -v python3 >/dev/null || die "needs python3 (for the table)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# run WHAT OUT CMD...: CMD's stdout and stderr into OUT, or an error naming
# WHAT and the command, with the end of its output
run() {
    local what=$1 out=$2 rc=0
    shift 2
    show "$@"
    "$@" >"$out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        note "bench/chain.sh: $what failed (exit status $rc): $*"
        tail -n 20 "$out" | sed 's/^/    /' >&2
        exit 1
    fi
}
# unparsable WHAT OUT MSG: the error for output without its number
unparsable() {
    note "bench/chain.sh: $1 printed $3; its output:"
    sed 's/^/    /' "$2" >&2
    exit 1
}
# positive V: whether V is a number > 0
positive() { awk -v v="$1" 'BEGIN { exit !(v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0) }'; }

if [ -n "${CHASE:-}" ]; then
    [ -x "$CHASE" ] || die "CHASE=$CHASE is not an executable program"
else
    command -v cc >/dev/null || die "needs cc to build bench/chase.c (or CHASE=a chase program)"
    CHASE=$TMP/chase
fi

echo "bench/chain.sh: dependent misses a decision, by time; ${#BUILDS[@]} build(s), $ROUNDS rounds, order alternating; CPU $CPU"
echo "load before: $(cat /proc/loadavg) ($(nproc) CPUs)"
if [ "$CHASE" = "$TMP/chase" ]; then
    run "building bench/chase.c" "$TMP/cc.out" cc -O2 -o "$CHASE" "$ROOT/bench/chase.c"
fi

# bench_run R B: one bench/bench run of build B in round R; appends
# "R B HOT MANY SHARE" to $TMP/runs (SHARE: the smaller cpu/wall % of its
# hot1 and many1 runs, "-" if its details table gives none)
bench_run() {
    local out=$TMP/bench.out line hot many share
    run "the run of $2/bench/bench" "$out" \
        timeout 300 taskset -c "$CPU" "$2/bench/bench" --algo token-bucket --parts hot,1m --seconds 1 --reps 1
    line=$(awk '$1 == "run" && $2 == "token-bucket" {
                    for (i = 3; i < NF; i++) {
                        if ($i == "hot" && h == "") h = $(i + 1)
                        if ($i == "many" && m == "") m = $(i + 1)
                    }
                    print h, m; exit }' "$out")
    read -r hot many <<<"${line:-x x}"
    if ! positive "$hot" || ! positive "$many"; then
        unparsable "$2/bench/bench" "$out" "no '  run token-bucket  hot X  many Y' line with X and Y > 0"
    fi
    # the details table's last column: "hot1 many1 hot2 many2" cpu/wall %
    share=$(awk -F'|' '$1 ~ /^details / { d = 1; next }
                       d && $1 ~ /^token-bucket / { split($NF, w, " ")
                           if (w[1] ~ /^[0-9]+$/ && w[2] ~ /^[0-9]+$/) print (w[1] + 0 < w[2] + 0 ? w[1] : w[2]); exit }' "$out")
    echo "$1 $2 $hot $many ${share:--}" >>"$TMP/runs"
}
# chase_run R KIND MB: one chase; appends "R KIND NS SHARE" to $TMP/chases
chase_run() {
    local out=$TMP/chase.out line ns share
    run "the chase over $3 MB ($CHASE)" "$out" timeout 120 taskset -c "$CPU" "$CHASE" "$3" "$LOADS"
    line=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^ns\/load,?$/) { n = $(i - 1); break }
                  for (i = 1; i < NF; i++) if ($i == "cpu/wall") s = $(i + 1) }
                n != "" { print n, (s == "" ? "-" : s); exit }' "$out")
    read -r ns share <<<"${line:-x x}"
    positive "$ns" || unparsable "the chase over $3 MB" "$out" "no 'N ns/load' with N > 0"
    echo "$1 $2 $ns $share" >>"$TMP/chases"
}

: >"$TMP/runs"
: >"$TMP/chases"
for r in $(seq "$ROUNDS"); do
    note "round $r of $ROUNDS"
    if [ $((r % 2)) -eq 1 ]; then
        for ((i = 0; i < ${#BUILDS[@]}; i++)); do bench_run "$r" "${BUILDS[i]}"; done
    else
        for ((i = ${#BUILDS[@]} - 1; i >= 0; i--)); do bench_run "$r" "${BUILDS[i]}"; done
    fi
    chase_run "$r" dram "$CHASE_MB"
    chase_run "$r" l3 "$L3_MB"
done
echo "load after: $(cat /proc/loadavg)"

python3 - "$TMP" "$ROUNDS" "$CPU" "$CHASE_MB" "$L3_MB" "$LOADS" "${BUILDS[@]}" <<'EOF'
import statistics, sys
d, rounds, cpu, chase_mb, l3_mb, loads = sys.argv[1:7]
builds = sys.argv[7:]
runs = [l.split() for l in open(f"{d}/runs")]          # round build hot many share
chases = [l.split() for l in open(f"{d}/chases")]      # round kind ns share
med = statistics.median
dram = {int(r): float(ns) for r, k, ns, s in chases if k == "dram"}
l3 = {int(r): float(ns) for r, k, ns, s in chases if k == "l3"}
cshare = {(int(r), k): s for r, k, ns, s in chases}

def misses(ns_hot, ns_1m, dram_ns):
    return (ns_1m - ns_hot) / dram_ns

def table(head, rows, left=1):  # the first `left` columns flush left, numbers right
    w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    fmt = lambda r: " | ".join([r[i].ljust(w[i]) if i < left else r[i].rjust(w[i]) for i in range(len(r))])
    print(fmt(head))
    print("-+-".join("-" * x for x in w))
    for r in rows:
        print(fmt(r))

dram_med, l3_med = med(dram.values()), med(l3.values())
rows = []
for b in dict.fromkeys(builds):  # each build once, in the order given
    mine = [r for r in runs if r[1] == b]
    hot = [float(r[2]) for r in mine]
    many = [float(r[3]) for r in mine]
    ns_hot = med([1000 / x for x in hot])
    ns_1m = med([1000 / x for x in many])
    rows.append((b, f"{med(hot):.2f}", f"{med(many):.2f}", f"{ns_hot:.1f}", f"{ns_1m:.1f}",
                 f"{dram_med:.1f}", f"{misses(ns_hot, ns_1m, dram_med):.2f}"))
print(f"\nmedians of {rounds} rounds (bench/bench token bucket, one call a decision, 1 s a run;"
      f" pinned to CPU {cpu}):")
table(("build", "hot M/s", "1M M/s", "ns hot", "ns 1M", "DRAM ns", "misses by time"), rows)
print(f"misses by time = (ns 1M - ns hot) / DRAM ns, of the medians; DRAM ns: a dependent load"
      f" in a {chase_mb} MB chase on 4 KB pages ({loads} loads), median {dram_med:.1f} ns;"
      f" L3 ({l3_mb} MB): median {l3_med:.1f} ns")

rows = []
for r in runs:
    rnd, b, hot, many, share = int(r[0]), r[1], float(r[2]), float(r[3]), r[4]
    ns_hot, ns_1m = 1000 / hot, 1000 / many
    rows.append((str(rnd), b, f"{hot:.2f}", f"{many:.2f}", f"{ns_hot:.1f}", f"{ns_1m:.1f}",
                 f"{dram[rnd]:.1f}", f"{misses(ns_hot, ns_1m, dram[rnd]):.2f}",
                 f"{share} / {cshare[(rnd, 'dram')]}"))
print("\nround by round, in run order (misses: the round's own quotient; cpu/wall %: the bench's"
      " smaller of hot and 1M / the DRAM chase's):")
table(("round", "build", "hot M/s", "1M M/s", "ns hot", "ns 1M", "DRAM ns", "misses",
       "cpu/wall %"), rows, 2)
print("L3 ns, round by round: " + " ".join(f"{l3[r]:.1f}" for r in sorted(l3)))
EOF
