#!/usr/bin/env bash
# bench/redis_script.sh -- what one decision costs Redis: sluice's script
# (src/backend/redis/sluice.lua, token-bucket, server time) against the
# textbook token bucket (bench/textbook_token_bucket.lua: HMGET, HSET,
# PEXPIRE), each called by EVALSHA per request, side by side in one run.
#
#   bench/redis_script.sh            N=200000 requests per run, ROUNDS=2
#
# redis-server is started here on a free 127.0.0.1 port (no persistence)
# and stopped by its PID on exit.  redis-benchmark drives it: 50 clients,
# no pipelining, 10,000 random keys, capacity 100 refilled at 100/s (so
# most requests are allowed).  Printed per run: decisions/s, p99 latency
# (ms), Redis's CPU per decision (used_cpu_user + used_cpu_sys growth
# over the run / N, microseconds: the script, the command and the network
# I/O), and the time inside the script alone (INFO commandstats'
# usec_per_call for EVALSHA).  On a shared machine the first three move
# with the neighbours' load; the last is the steadiest.  Every step runs
# under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
N=${N:-200000}
ROUNDS=${ROUNDS:-2}
for t in redis-server redis-cli redis-benchmark python3; do
    command -v "$t" >/dev/null || die "$t is not installed"
done
TMP=$(mktemp -d)
REDIS_PID=
cleanup() {
    [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" &
REDIS_PID=$!
rcli() { cli "$PORT" "$@"; }
wait_pong "$PORT" || die "redis-server did not start on port $PORT"

SLUICE_SHA=$(rcli script load "$(cat "$ROOT/src/backend/redis/sluice.lua")" | tr -d '\r')
TEXT_SHA=$(load_textbook "$PORT")

cpu() { rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }

# run NAME ARGS...: one redis-benchmark run; prints the table row.
run() {
    local name=$1 c0 c1 csv
    shift
    rcli flushall >/dev/null
    rcli config resetstat >/dev/null
    c0=$(cpu)
    csv=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$PORT" --csv -n "$N" -c 50 -r 10000 "$@" |
        tr -d '"\r' | awk -F, 'NR > 1 { print $(NF - 6), $(NF - 1) }' | tail -1)
    c1=$(cpu)
    local errs
    errs=$(rcli info errorstats | tr -d '\r' | grep -c '^errorstat' || true)
    [ "$errs" = 0 ] || { echo "redis_script.sh: $name: the script answered errors" >&2; rcli info errorstats >&2; exit 1; }
    local inside
    inside=$(rcli info commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
    set -- $csv
    awk -v n="$name" -v rps="$1" -v p99="$2" -v c0="$c0" -v c1="$c1" -v N="$N" -v ins="$inside" \
        'BEGIN { printf "%-36s | %11.0f | %7.3f | %10.2f | %9.2f\n", n, rps, p99, (c1 - c0) * 1e6 / N, ins }'
}

echo "== Redis $(redis-server --version | awk '{ print $3 }'), 127.0.0.1:$PORT, $N requests a run, 50 clients, EVALSHA per request =="
printf '%-36s | %11s | %7s | %10s | %9s\n' "script" "decisions/s" "p99 ms" "CPU us/dec" "script us"
printf -- '-------------------------------------+-------------+---------+------------+----------\n'
for _ in $(seq "$ROUNDS"); do
    run "sluice.lua token-bucket" evalsha "$SLUICE_SHA" 1 'sl:40:{user:__rand_int__}' \
        D '' 4 100 1000 0 0 0 1
    run "textbook token bucket (HMGET/HSET)" evalsha "$TEXT_SHA" 1 'tb:user:__rand_int__' 100 1000
done
