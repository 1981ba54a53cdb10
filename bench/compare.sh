#!/usr/bin/env bash
# bench/compare.sh -- two builds of sluice side by side in one run, for "no
# regression" claims: the same measurements on each, interleaved in the same
# minutes (the order alternates every round), the median of REPS rounds, and
# the ratio new/old.
#
#   bench/compare.sh OLD_BUILD_DIR [NEW_BUILD_DIR]      (NEW defaults to build)
#
# e.g. against the commit before a change:
#   git worktree add /tmp/sluice-old <commit> && make -C /tmp/sluice-old all build/bench/bench
#   make all build/bench/bench && bench/compare.sh /tmp/sluice-old/build
#
# Measured, each round, for each build:
#   lib hot / lib 1M   libsluice decisions/s, token bucket, one thread, 1,000
#                      hot keys / 1M keys (bench/bench --parts hot,1m)
#   replay             `sluicectl replay` lines/s, one thread, REPLAY_LINES lines
#                      over 100,000 keys (the file is made once, read from
#                      the page cache)
#   RL.ALLOW -P 16     sluiced (--threads 1) requests/s from redis-benchmark,
#                      50 clients, pipeline 16, 100,000 random keys
#   /v1/auth           forward-auth requests/s from wrk (one thread, 50
#                      keep-alive connections, SECS_HTTP s), the original URI
#                      one of 100,000 paths, a rule per path (as bench/http.sh)
#   gRPC               ShouldRateLimit requests/s from h2load (4 connections,
#                      50 streams each, N_GRPC requests; as bench/grpc.sh)
# Each server row has a second: requests per CPU-second of the server during
# the run (/proc's utime + stime), the server's own cost per request, which
# moves far less than the rate on a shared machine.
# (/v1/auth and gRPC only when both builds have --grpc-port.)
# The servers and the benchmarked programs run on CPU 1, the load generator
# on CPU 0 (taskset), when the machine has two CPUs or more.
#
# Environment: REPS (default 5), SECONDS_LIB (default 1), REPLAY_LINES
# (default 3000000), N (requests per redis-benchmark run, default 400000),
# SECS_HTTP (seconds per wrk run, default 3), N_GRPC (default 200000).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=${1:?usage: bench/compare.sh OLD_BUILD_DIR [NEW_BUILD_DIR]}
NEW=${2:-$ROOT/build}
REPS=${REPS:-5}
SECONDS_LIB=${SECONDS_LIB:-1}
REPLAY_LINES=${REPLAY_LINES:-3000000}
N=${N:-400000}
SECS_HTTP=${SECS_HTTP:-3}
N_GRPC=${N_GRPC:-200000}
for d in "$OLD" "$NEW"; do
    for f in sluiced bench/bench; do
        [ -x "$d/$f" ] || { echo "compare.sh: no $d/$f (make all build/bench/bench)" >&2; exit 1; }
    done
    [ -x "$d/sluicectl" ] || [ -x "$d/sluice" ] ||
        { echo "compare.sh: no $d/sluicectl (make all build/bench/bench)" >&2; exit 1; }
done
# tool DIR: the command line tool of a build: sluicectl, or in a build from
# before its rename, sluice
tool() { if [ -x "$1/sluicectl" ]; then echo "$1/sluicectl"; else echo "$1/sluice"; fi; }
command -v redis-benchmark >/dev/null || { echo "compare.sh: no redis-benchmark" >&2; exit 1; }

if [ "$(nproc)" -ge 2 ]; then
    WORK="taskset -c 1"
    LOAD="taskset -c 0"
else
    WORK=""
    LOAD=""
fi
TMP=$(mktemp -d /tmp/sluice-compare.XXXXXX)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

"$NEW/bench/bench" --gen-replay "$REPLAY_LINES" 100000 >"$TMP/trace.txt"

# the fronts' rows need HTTP and gRPC in both builds (and wrk, h2load)
FRONTS=1
for d in "$OLD" "$NEW"; do "$d/sluiced" --help 2>&1 | grep -q -- --grpc-port || FRONTS=; done
command -v wrk >/dev/null && command -v h2load >/dev/null || FRONTS=
cat >"$TMP/rules.yaml" <<'YAML'
domain: bench
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML
cat >"$TMP/auth.lua" <<'LUA'
math.randomseed(1)
request = function()
    return wrk.format("GET", "/v1/auth/bench", {["X-Original-URI"] = "/p/" .. math.random(100000)})
end
LUA
# RateLimitRequest{domain "bench", descriptors [{entries [{user, u1}]}]},
# framed as one gRPC message
python3 - "$TMP/body.bin" <<'PY'
import struct, sys
def field(num, payload):
    return bytes([num << 3 | 2, len(payload)]) + payload
msg = field(1, b"bench") + field(2, field(1, field(1, b"user") + field(2, b"u1")))
open(sys.argv[1], "wb").write(b"\x00" + struct.pack(">I", len(msg)) + msg)
PY

# start_sluiced DIR NAME: starts DIR/sluiced on a free port; sets PORT_<NAME>.
start_sluiced() {
    local port http= hport gport
    port=$("$NEW/bench/bench" --free-port)
    # builds with an HTTP listener: off, so two servers never both want 8390
    "$1/sluiced" --help 2>&1 | grep -q -- --http-port && http="--http-port 0"
    "$1/sluiced" --help 2>&1 | grep -q -- --grpc-port && http="$http --grpc-port 0"
    if [ -n "$FRONTS" ]; then
        hport=$("$NEW/bench/bench" --free-port)
        gport=$("$NEW/bench/bench" --free-port)
        http="--http-port $hport --grpc-port $gport --rules $TMP/rules.yaml"
        eval "HPORT_$2=$hport GPORT_$2=$gport"
    fi
    # shellcheck disable=SC2086 # $http is empty or two words
    $WORK "$1/sluiced" --port "$port" $http --threads 1 --max-memory 1gb >"$TMP/$2.log" 2>&1 &
    PIDS="$PIDS $!"
    eval "SPID_$2=$!"
    for _ in $(seq 100); do
        redis-cli -p "$port" PING >/dev/null 2>&1 && break
        sleep 0.1
    done
    eval "PORT_$2=$port"
}
start_sluiced "$OLD" old
start_sluiced "$NEW" new

# lib DIR: prints "hot many" (M decisions/s)
lib() {
    $WORK "$1/bench/bench" --algo token-bucket --parts hot,1m --seconds "$SECONDS_LIB" 2>&1 |
        awk '$1 == "run" { print $4, $6 }'
}

# replay DIR: prints M lines/s
replay() {
    local t0 t1
    t0=$(date +%s%N)
    $WORK "$(tool "$1")" replay --algo token-bucket --limit 100 --window 10s --threads 1 \
        "$TMP/trace.txt" >/dev/null
    t1=$(date +%s%N)
    awk -v n="$REPLAY_LINES" -v ns="$((t1 - t0))" 'BEGIN { printf "%.3f\n", n / ns * 1000 }'
}

# allow PORT: prints requests/s of RL.ALLOW, pipeline 16
allow() {
    $LOAD redis-benchmark -p "$1" -c 50 -n "$N" -r 100000 -P 16 --csv \
        RL.ALLOW key:__rand_int__ 100 10s 2>/dev/null |
        awk -F'"' 'NR > 1 && $4 != "" { print $4; exit }'
}

# auth HTTP_PORT: prints requests/s of forward-auth and the requests made
auth() {
    $LOAD wrk -t1 -c50 -d"${SECS_HTTP}s" -s "$TMP/auth.lua" "http://127.0.0.1:$1" 2>/dev/null |
        awk '$1 == "Requests/sec:" { r = $2 } $2 == "requests" && $3 == "in" { n = $1 } END { print r, n }'
}

# grpc GRPC_PORT: prints requests/s of ShouldRateLimit
grpc() {
    $LOAD h2load -n "$N_GRPC" -c 4 -m 50 -t 1 -d "$TMP/body.bin" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$1/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" 2>/dev/null |
        sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p'
}

# ticks PID: the process's user + system CPU so far, in clock ticks
HZ=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# percore N T0 T1: N requests over the server's CPU seconds between T0, T1
percore() { awk -v n="$1" -v t="$(($3 - $2))" -v hz="$HZ" 'BEGIN { printf "%.0f\n", (t > 0) ? n / (t / hz) : 0 }'; }

declare -A vals
# run_fronts WHICH NAME KIND: one front's run, its rate and its requests per
# CPU-second of the server (the server's own cost, which a client that
# cannot keep up, or a neighbour on the machine, moves far less than the rate)
run_front() {
    local which=$1 name=$2 kind=$3 pid port t0 t1 rate n
    eval "pid=\$SPID_$name"
    case $kind in
    allow) eval "port=\$PORT_$name" ;;
    auth) eval "port=\$HPORT_$name" ;;
    grpc) eval "port=\$GPORT_$name" ;;
    esac
    t0=$(ticks "$pid")
    case $kind in
    allow) rate=$(allow "$port"); n=$N ;;
    auth) read -r rate n < <(auth "$port") ;;
    grpc) rate=$(grpc "$port"); n=$N_GRPC ;;
    esac
    t1=$(ticks "$pid")
    vals[$which,$kind]+=" $rate"
    vals[$which,${kind}cpu]+=" $(percore "$n" "$t0" "$t1")"
}
measure() { # BUILD DIR NAME
    local which=$1 dir=$2 name=$3 lh lm port
    read -r lh lm < <(lib "$dir")
    vals[$which,libhot]+=" $lh"
    vals[$which,lib1m]+=" $lm"
    vals[$which,replay]+=" $(replay "$dir")"
    run_front "$which" "$name" allow
    if [ -n "$FRONTS" ]; then
        run_front "$which" "$name" auth
        run_front "$which" "$name" grpc
    fi
}

echo "compare.sh: $REPS rounds, old=$OLD new=$NEW, load $(cut -d' ' -f1 /proc/loadavg) at start" >&2
for r in $(seq "$REPS"); do
    if [ $((r % 2)) -eq 1 ]; then
        measure old "$OLD" old
        measure new "$NEW" new
    else
        measure new "$NEW" new
        measure old "$OLD" old
    fi
    echo "  round $r done" >&2
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-28s | %12s | %12s | %7s | %s\n' "measure (median of $REPS)" old new new/old "all rounds (old ; new)"
printf -- '-----------------------------+--------------+--------------+---------+------------------------\n'
for m in libhot lib1m replay allow allowcpu ${FRONTS:+auth authcpu grpc grpccpu}; do
    case $m in
    libhot) label="lib hot keys, M dec/s" ;;
    lib1m) label="lib 1M keys, M dec/s" ;;
    replay) label="replay, M lines/s" ;;
    allow) label="RL.ALLOW -P 16, req/s" ;;
    allowcpu) label="  per server CPU-second" ;;
    auth) label="/v1/auth (wrk), req/s" ;;
    authcpu) label="  per server CPU-second" ;;
    grpc) label="gRPC (h2load), req/s" ;;
    grpccpu) label="  per server CPU-second" ;;
    esac
    o=$(echo "${vals[old,$m]}" | median)
    n=$(echo "${vals[new,$m]}" | median)
    ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.3f", (o > 0) ? n / o : 0 }')
    printf '%-28s | %12s | %12s | %7s |%s ;%s\n' "$label" "$o" "$n" "$ratio" "${vals[old,$m]}" "${vals[new,$m]}"
done
echo "load $(cut -d' ' -f1 /proc/loadavg) at end ($(nproc) CPUs)"
