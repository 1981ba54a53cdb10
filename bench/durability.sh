#!/usr/bin/env bash
# bench/durability.sh -- what --durability replicas:1 costs (issue 27, goal:
# >= 0.5x the decisions/s of --durability none), in one run, interleaved,
# medians.  One Redis master with one replica (both redis-server, loopback),
# and a second such pair with build/sluice.so loaded in both (the module
# path); over each master two sluiced --threads 1, one with --durability
# none and one with --durability replicas:1 (a WAIT 1 after each batch's
# writes, on the same connection):
#
#   SCRIPT-NONE  SCRIPT-WAIT1   the Lua script's path (op B batches)
#   MODULE-NONE  MODULE-WAIT1   the module's path (RL.ALLOW per decision)
#
# Each run: redis-benchmark -P 16 (CLIENTS clients, 16 commands in flight
# each) RL.ALLOW key:__rand_int__ 100 10s over KEYS random keys.  Printed:
# decisions/s, p50 and p99 (ms) per configuration, the WAIT-on/off ratio per
# path, and the INFO counters of the WAIT nodes (WAITs sent, short, answers
# replaced: with a healthy replica, short and replaced should be 0).
#
#   bench/durability.sh            full run (about 3 minutes)
#   bench/durability.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per run, default
# 200000; --quick 20000), REPS (default 3; --quick 1), KEYS (100000),
# CLIENTS (20), PIPE (16).  Servers listen on free 127.0.0.1 ports and are
# stopped by their PIDs on exit; every step runs under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/durability.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${N:=20000}" "${REPS:=1}"
else
    : "${N:=200000}" "${REPS:=3}"
fi
: "${KEYS:=100000}" "${CLIENTS:=20}" "${PIPE:=16}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-durability-bench.XXXXXX)
PIDS=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for pid in $PIDS; do
        kill -CONT "$pid" 2>/dev/null || true
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
timeout 600 make -s -C "$ROOT" "$B/sluiced" "$B/sluice.so" >&2

# ---- the servers ----------------------------------------------------------
# start_redis NAME [ARGS...]: a redis-server; sets PORT_OUT.
start_redis() {
    local name=$1 port
    shift
    port=$(free_port)
    mkdir -p "$TMP/$name"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile "$TMP/$name/redis.log" --dir "$TMP/$name" "$@" &
    PIDS="$PIDS $!"
    wait_pong "$port" || die "redis-server $name did not start: $(tail -5 "$TMP/$name/redis.log")"
    PORT_OUT=$port
}
# wait_replica MASTER_PORT: until the master counts one replica online.
wait_replica() {
    for _ in $(seq 200); do
        cli "$1" info replication | tr -d '\r' | grep -q '^slave0:.*state=online' && return 0
        sleep 0.1
    done
    die "the replica of 127.0.0.1:$1 never came online"
}
start_redis master
SMPORT=$PORT_OUT
start_redis replica --replicaof 127.0.0.1 "$SMPORT"
start_redis mmaster --loadmodule "$BD/sluice.so"
MMPORT=$PORT_OUT
start_redis mreplica --loadmodule "$BD/sluice.so" --replicaof 127.0.0.1 "$MMPORT"
wait_replica "$SMPORT"
wait_replica "$MMPORT"

# start_sluiced LOG [ARGS...]: sets PORT_OUT.
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
    PORT_OUT=$port
}
start_sluiced "$TMP/sn.log" --backend "redis://127.0.0.1:$SMPORT" --durability none
SN=$PORT_OUT
start_sluiced "$TMP/sw.log" --backend "redis://127.0.0.1:$SMPORT" --durability replicas:1
SW=$PORT_OUT
start_sluiced "$TMP/mn.log" --backend "redis://127.0.0.1:$MMPORT" --durability none
MN=$PORT_OUT
start_sluiced "$TMP/mw.log" --backend "redis://127.0.0.1:$MMPORT" --durability replicas:1
MW=$PORT_OUT

# one INFO field's whole value (bench/lib.sh's info_field cuts at a second colon)
info_field() { cli "$1" info "$2" | tr -d '\r' | awk -v k="$3" 'index($0, k ":") == 1 { print substr($0, length(k) + 2) }'; }

# Correctness before speed: the WAIT nodes answer, and their WAITs are counted.
for p in "$SW" "$MW"; do
    r=$(cli "$p" RL.ALLOW check:$p 100 10s | tr '\n' ' ')
    case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW on 127.0.0.1:$p answered '$r'" ;; esac
    [ "$(info_field "$p" backend backend_durability)" = replicas:1 ] || die "no replicas:1 on $p"
    [ "$(info_field "$p" backend backend_durability_waits)" -ge 1 ] || die "no WAIT sent by $p"
    [ "$(info_field "$p" backend backend_durability_replaced)" = 0 ] || die "$p replaced an answer"
done
[ "$(info_field "$MW" backend backend_redis_path)" = module ] || die "the module's node is not on it"
[ "$(info_field "$SW" backend backend_redis_path)" = script ] || die "the script's node is not on it"

# ---- the runs ---------------------------------------------------------------
# run NAME PORT: one redis-benchmark run; appends "NAME rps p50 p99" to $TMP/runs.
run() {
    local name=$1 port=$2 out
    out=$(timeout 600 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$N" -P "$PIPE" \
        -r "$KEYS" --precision 3 --csv RL.ALLOW 'key:__rand_int__' 100 10s 2>"$TMP/rb.err") ||
        die "redis-benchmark failed for $name: $(tail -3 "$TMP/rb.err")"
    echo "$out" | tr -d '"\r' | awk -F, -v n="$name" \
        'NR > 1 && $(NF - 6) + 0 > 0 { print n, $(NF - 6), $(NF - 3), $(NF - 1); f = 1; exit }
         END { if (!f) exit 1 }' >>"$TMP/runs" || die "no result line for $name: $out"
}
NAMES=(SCRIPT-NONE SCRIPT-WAIT1 MODULE-NONE MODULE-WAIT1)
PORTS=("$SN" "$SW" "$MN" "$MW")
note "redis-benchmark: $N requests per run, -P $PIPE, $CLIENTS clients, $KEYS keys, $REPS rep(s)..."
load0=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$REPS"); do
    for i in 0 1 2 3; do
        j=$(((i + rep - 1) % 4))
        run "${NAMES[$j]}" "${PORTS[$j]}"
    done
    note "  rep $rep done"
done
load1=$(cut -d' ' -f1 /proc/loadavg)

# ---- the table ----------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
med() { awk -v n="$1" -v c="$2" '$1 == n { print $c }' "$TMP/runs" | median; }
printf '\n%-14s %14s %9s %9s\n' config "decisions/s" "p50 ms" "p99 ms"
for n in "${NAMES[@]}"; do
    printf '%-14s %14.0f %9.3f %9.3f\n' "$n" "$(med "$n" 2)" "$(med "$n" 3)" "$(med "$n" 4)"
done
sr=$(awk -v a="$(med SCRIPT-WAIT1 2)" -v b="$(med SCRIPT-NONE 2)" 'BEGIN { printf "%.2f", a / b }')
mr=$(awk -v a="$(med MODULE-WAIT1 2)" -v b="$(med MODULE-NONE 2)" 'BEGIN { printf "%.2f", a / b }')
printf '\nreplicas:1 / none: script %sx, module %sx (goal >= 0.5x)\n' "$sr" "$mr"
for p in "$SW" "$MW"; do
    printf 'node 127.0.0.1:%s: WAITs %s, short %s, answers replaced %s, decisions per WAIT %s\n' "$p" \
        "$(info_field "$p" backend backend_durability_waits)" \
        "$(info_field "$p" backend backend_durability_waits_short)" \
        "$(info_field "$p" backend backend_durability_replaced)" \
        "$(awk -v w="$(info_field "$p" backend backend_durability_waits)" -v n="$((N * REPS))" \
            'BEGIN { printf "%.1f", w ? n / w : 0 }')"
done
printf 'load average %s -> %s (%s CPUs)\n' "$load0" "$load1" "$(nproc)"
if [ -z "$QUICK" ]; then
    awk -v s="$sr" -v m="$mr" 'BEGIN { exit !(s >= 0.5 && m >= 0.5) }' ||
        note "goal missed: replicas:1 below 0.5x of none"
fi
