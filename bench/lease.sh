#!/usr/bin/env bash
# bench/lease.sh -- leased quota (--lease on, docs/fleet.md "Leases")
# against the per-request path, side by side in one run: three sluiced
# nodes with --lease on, three with --lease off and three on their local
# stores, the six fleet nodes on ONE redis-server, one hot key:
#
#   ON     RL.ALLOW hot 10^12 3650d ALGO fixed-window through the three
#          --lease on nodes at once (one redis-benchmark each)
#   OFF    the same through the three --lease off nodes (every decision a
#          round trip to Redis, batched per loop turn)
#   LOCAL  the same through three nodes on their own stores (no Redis):
#          the speed leases aim at
#
# Throughput: -c CLIENTS -P PIPE per node, decisions/s summed over the three
# nodes; latency: -c CLIENTS -P 1 (each request alone), the worst node's p99.
# Each run REPS times, interleaved (ON, OFF, LOCAL, then rotated), medians.
# "redis us/dec": Redis CPU per decision in that run (/proc).
#
# Then exactness, the same three nodes at once, demand twice the limit, one
# window (ten years: at Redis's clock every request of a run is in it; a
# bucket's is a year, which refills nothing in a run): a fresh key of
# limit LIM for fixed-window and token-bucket, --lease on and off.  After the run every lease is handed
# back (INFO backend_leases_outstanding 0, bounded wait) and the admitted
# count is read from the nodes' INFO (stats allowed): over-admission
# admitted - LIM (must be <= 0), under-admission LIM - admitted (units left
# in Redis although demand was above the limit: what leases stranded).
#
#   bench/lease.sh            full run (a few minutes)
#   bench/lease.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per node per run,
# default 200000; --quick 20000), REPS (3; --quick 1), CLIENTS (16),
# PIPE (16), LIM (100000; --quick 10000), BTO (--backend-timeout, 2s: on
# a loaded 2-core machine Redis's answers can pass the default 50 ms, and
# the policy's denials would be counted as under-admission; the table
# shows how many answers the policy gave).  Servers listen on free
# 127.0.0.1 ports and are stopped by their PIDs on exit; every step runs
# under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/lease.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${N:=20000}" "${REPS:=1}" "${LIM:=10000}"
else
    : "${N:=200000}" "${REPS:=3}" "${LIM:=100000}"
fi
: "${CLIENTS:=16}" "${PIPE:=16}" "${BTO:=2s}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-lease-bench.XXXXXX)
PIDS=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for pid in $PIDS; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for t in redis-server redis-cli redis-benchmark python3; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs redis-server)"
done
timeout 600 make -s -C "$ROOT" "$B/sluiced" >&2
TICK=$(getconf CLK_TCK)

# ---- the servers ----------------------------------------------------------
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" &
REDIS_PID=$!
PIDS="$PIDS $REDIS_PID"
wait_pong "$RPORT" || die "redis-server did not start on port $RPORT: $(tail -5 "$TMP/redis.log")"

# start_sluiced LOG [ARGS...]: prints the port it listens on.
start_sluiced() {
    local log=$1 port='' pid
    shift
    "$SLUICED" --port 0 --http-port 0 --grpc-port 0 --threads 1 "$@" >"$log" 2>&1 &
    pid=$!
    PIDS="$PIDS $pid"
    for _ in $(seq 100); do
        port=$(sed -n 's/.*msg="listening" addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || die "sluiced exited: $(tail -5 "$log")"
        sleep 0.1
    done
    if [ -z "$port" ] || ! wait_pong "$port"; then
        die "sluiced did not start: $(tail -5 "$log")"
    fi
    echo "$port"
}
ON=
OFF=
LOCAL=
for i in 1 2 3; do
    ON="$ON $(start_sluiced "$TMP/on$i.log" --backend "redis://127.0.0.1:$RPORT" \
        --backend-timeout "$BTO" --lease on)"
    OFF="$OFF $(start_sluiced "$TMP/off$i.log" --backend "redis://127.0.0.1:$RPORT" \
        --backend-timeout "$BTO" --lease off)"
    LOCAL="$LOCAL $(start_sluiced "$TMP/local$i.log")"
done
for p in $ON; do
    [ "$(info_field "$p" backend backend_lease)" = on ] || die "node $p: backend_lease is not on"
done
# the fleet's decision is in Redis: a second node sees the first's charge
# shellcheck disable=SC2086
set -- $ON
r=$(cli "$1" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW through Redis answered '$r'" ;; esac
r=$(cli "$2" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 98 0 "*" 0 ") ;; *) die "the second node answered '$r', expected remaining 98" ;; esac

# ---- the runs ---------------------------------------------------------------
# run3 NAME PIPE PORTS KEY [ALGO]: one redis-benchmark per node at once;
# appends "NAME PIPE rps_sum worst_p99 redis_us_per_dec" to $TMP/runs.
run3() {
    local name=$1 pipe=$2 ports=$3 key=$4 algo=${5:-fixed-window} r0 r1 k=0 pids=''
    r0=$(cpu_ticks "$REDIS_PID")
    for p in $ports; do
        k=$((k + 1))
        timeout 600 redis-benchmark -h 127.0.0.1 -p "$p" -c "$CLIENTS" -n "$N" -P "$pipe" \
            --precision 3 --csv RL.ALLOW "$key" 1000000000000 3650d ALGO "$algo" \
            >"$TMP/rb$k.csv" 2>"$TMP/rb$k.err" &
        pids="$pids $!"
    done
    for pid in $pids; do wait "$pid" || die "redis-benchmark failed for $name: $(cat "$TMP"/rb*.err)"; done
    r1=$(cpu_ticks "$REDIS_PID")
    cat "$TMP"/rb[123].csv | tr -d '"\r' | awk -F, -v n="$name" -v P="$pipe" -v rc=$((r1 - r0)) \
        -v tick="$TICK" -v req=$((3 * N)) \
        'NR > 0 && $(NF - 6) + 0 > 0 { s += $(NF - 6); if ($(NF - 1) + 0 > w) w = $(NF - 1) + 0; c++ }
         END { if (c != 3) exit 1; print n, P, s, w, 1e6 * rc / tick / req }' >>"$TMP/runs" ||
        die "no result lines for $name: $(cat "$TMP"/rb[123].csv)"
}
one_test() {
    case $1 in
    0) run3 ON "$PIPE" "$ON" "hot:on" ;;
    1) run3 OFF "$PIPE" "$OFF" "hot:off" ;;
    2) run3 LOCAL "$PIPE" "$LOCAL" "hot:local" ;;
    3) run3 ON 1 "$ON" "hot:on" ;;
    4) run3 OFF 1 "$OFF" "hot:off" ;;
    5) run3 LOCAL 1 "$LOCAL" "hot:local" ;;
    esac
}
note "redis-benchmark: $N requests per node per run, 3 nodes at once, -c $CLIENTS, -P $PIPE and -P 1, $REPS rep(s)..."
load0=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$REPS"); do
    for i in 0 1 2; do one_test $(((i + rep - 1) % 3)); done
    for i in 0 1 2; do one_test $((3 + (i + rep - 1) % 3)); done
    note "  rep $rep done"
done
load1=$(cut -d' ' -f1 /proc/loadavg)

# ---- the tables -------------------------------------------------------------
rversion=$(redis-server --version | awk '{ print $3 }')
echo
echo "== one hot key, 3 sluiced nodes on one Redis ${rversion#v=}: decisions/s (sum of the nodes), median of $REPS =="
echo "   (-c $CLIENTS per node; $(nproc) CPUs shared by Redis, 9 sluiced and 3 clients; load $load0 -> $load1)"
awk '
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { k = $1 " " $2; rps[k] = rps[k] " " $3; p99[k] = p99[k] " " $4; rus[k] = rus[k] " " $5; pipe[$1] = pipe[$1] }
    END {
        label["ON"] = "--lease on  (3 nodes -> Redis)"
        label["OFF"] = "--lease off (3 nodes -> Redis)"
        label["LOCAL"] = "local stores (3 nodes, no Redis)"
        printf "%-34s | %12s | %12s | %14s | %12s\n", "path", "dec/s -P '"$PIPE"'", "redis us/dec", "p99 ms (-P 1)", "dec/s (-P 1)"
        print "-----------------------------------+--------------+--------------+----------------+-------------"
        n = split("ON OFF LOCAL", names, " ")
        for (j = 1; j <= n; j++) {
            k = names[j]; kp = k " '"$PIPE"'"; k1 = k " 1"
            r[k] = median(rps[kp]); q[k] = median(p99[k1]); u[k] = median(rus[kp])
            printf "%-34s | %12.0f | %12.3f | %14.3f | %12.0f\n", label[k], r[k], (k == "LOCAL" ? 0 : u[k]), q[k], median(rps[k1])
        }
        print ""
        printf "%-58s | %8.2fx | %s\n", "goal: --lease on / --lease off, decisions/s >= 10x", r["ON"] / r["OFF"], (r["ON"] >= 10 * r["OFF"] ? "yes" : "NO")
        printf "%-58s | %8.0f%% |\n", "--lease on / local stores", 100 * r["ON"] / r["LOCAL"]
        printf "%-58s | %+8.3f ms | %s\n", "goal: p99 --lease on - p99 --lease off <= 0", q["ON"] - q["OFF"], (q["ON"] <= q["OFF"] ? "yes" : "NO")
    }' "$TMP/runs"
# ---- exactness: demand 2 x LIM in one window --------------------------------
sum_field() { # sum_field PORTS SECTION KEY
    local s=0 p
    for p in $1; do s=$((s + $(info_field "$p" "$2" "$3"))); done
    echo "$s"
}
# exact NAME PORTS ALGO: appends "NAME ALGO admitted over under served
# policy" to $TMP/exact
exact() {
    local name=$1 ports=$2 algo=$3 a0 a1 s0 s1 f0 f1 k=0 pids='' per key w=3650d
    # a bucket's B*W must stay within the script's 2^53: a year (it refills
    # LIM a year: nothing in a run)
    [ "$algo" = fixed-window ] || w=365d
    key="exact:$name:$algo:$RANDOM"
    per=$((2 * LIM / 3 / CLIENTS + 1))
    a0=$(sum_field "$ports" stats allowed)
    s0=$(sum_field "$ports" backend backend_lease_decisions)
    f0=$(sum_field "$ports" backend backend_fallback_deny)
    for p in $ports; do
        k=$((k + 1))
        timeout 600 redis-benchmark -h 127.0.0.1 -p "$p" -c "$CLIENTS" -n $((per * CLIENTS)) \
            -P "$PIPE" -q RL.ALLOW "$key" "$LIM" "$w" ALGO "$algo" >/dev/null 2>"$TMP/ex$k.err" &
        pids="$pids $!"
    done
    for pid in $pids; do
        wait "$pid" || die "redis-benchmark failed (exactness, $name $algo): $(cat "$TMP"/ex*.err)"
    done
    for p in $ports; do # every lease handed back (idle), bounded
        for _ in $(seq 100); do
            [ "$(info_field "$p" backend backend_leases_outstanding)" = 0 ] && break
            sleep 0.05
        done
    done
    a1=$(sum_field "$ports" stats allowed)
    s1=$(sum_field "$ports" backend backend_lease_decisions)
    f1=$(sum_field "$ports" backend backend_fallback_deny)
    local adm=$((a1 - a0))
    echo "$name $algo $adm $((adm - LIM)) $((LIM - adm)) $((s1 - s0)) $((f1 - f0))" >>"$TMP/exact"
}
: >"$TMP/exact"
for algo in fixed-window token-bucket; do
    exact ON "$ON" "$algo"
    exact OFF "$OFF" "$algo"
done

echo
echo "== exactness: 3 nodes at once, demand 2 x $LIM in one window (limit $LIM), -P $PIPE =="
ok=yes
awk -v lim="$LIM" '
    BEGIN { printf "%-6s | %-13s | %9s | %14s | %17s | %12s | %14s\n", "lease", "algorithm", "admitted", "over-admitted", "under-admitted", "from leases", "policy denials" }
    { printf "%-6s | %-13s | %9d | %14d | %8d (%5.2f%%) | %12d | %14d\n", tolower($1), $2, $3, ($4 > 0 ? $4 : 0), ($5 > 0 ? $5 : 0), 100 * ($5 > 0 ? $5 : 0) / lim, $6, $7 }' "$TMP/exact"
while read -r _ _ _ over _ _ _; do [ "$over" -le 0 ] || ok=NO; done <"$TMP/exact"
echo "  no over-admission: $ok"
[ -n "$QUICK" ] && echo "(--quick: counts too small to judge the goals)"
[ "$ok" = yes ] || exit 1
exit 0
