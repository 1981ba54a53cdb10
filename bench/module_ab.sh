#!/usr/bin/env bash
# bench/module_ab.sh -- two builds of the sluice module side by side: one
# redis-server per build, both pinned to the same core, redis-benchmark
# (on the other cores) alternating between them run by run, so both see
# the same machine.  Prints each run's server CPU time per request
# (redis-server's main thread, /proc/PID/schedstat) and the medians.
#
#   bench/module_ab.sh A.so B.so [COMMAND ARGS...]
#       default command: RL.ALLOW key:__rand_int__ 100 10s
#   e.g. a build of main against this tree's:
#       git worktree add --detach /tmp/base main && make -C /tmp/base build/sluice.so
#       bench/module_ab.sh /tmp/base/build/sluice.so build/sluice.so RL.ALLOW 'k:__rand_int__' 100 1h
#
# Environment: N (requests per run, default 200000), REPS (runs per build,
# default 8), KEYS (default 100000), CLIENTS (default 50), PIPELINE
# (default 16), CORE (the servers' core, default the last one).  The
# servers listen on free 127.0.0.1 ports and are stopped by their PIDs when
# the script exits; every run is under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
[ $# -ge 2 ] || {
    echo "usage: bench/module_ab.sh A.so B.so [COMMAND ARGS...]" >&2
    exit 2
}
SO_A=$(realpath "$1")
SO_B=$(realpath "$2")
shift 2
CMD=("$@")
[ ${#CMD[@]} -gt 0 ] || CMD=(RL.ALLOW 'key:__rand_int__' 100 10s)
NCPU=$(nproc)
: "${N:=200000}" "${REPS:=8}" "${KEYS:=100000}" "${CLIENTS:=50}" "${PIPELINE:=16}"
: "${CORE:=$((NCPU - 1))}"
CLIENT_CPUS=$(python3 -c "print(','.join(str(c) for c in range($NCPU) if c != $CORE) or '$CORE')")
TMP=$(mktemp -d /tmp/sluice-module-ab.XXXXXX)
PIDS=()

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for t in redis-server redis-benchmark python3 taskset; do
    command -v "$t" >/dev/null || die "$t is not installed"
done
for so in "$SO_A" "$SO_B"; do [ -f "$so" ] || die "no module at $so"; done

# start NAME SO: a redis-server loading SO; sets PORT_NAME and PID_NAME.
start() {
    local port
    port=$(free_port)
    taskset -c "$CORE" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile "$TMP/$1.log" --dir "$TMP" --loadmodule "$2" &
    PIDS+=($!)
    printf -v "PORT_$1" '%s' "$port"
    printf -v "PID_$1" '%s' "$!"
    wait_pong "$port" || die "redis-server with $2 did not start: $(tail -5 "$TMP/$1.log")"
}
start A "$SO_A"
start B "$SO_B"

# run PORT PID: one redis-benchmark run; prints server us per request.
run() {
    local t0 t1
    t0=$(cut -d' ' -f1 "/proc/$2/schedstat")
    timeout 600 taskset -c "$CLIENT_CPUS" redis-benchmark -h 127.0.0.1 -p "$1" -c "$CLIENTS" \
        -n "$N" -r "$KEYS" -P "$PIPELINE" -q "${CMD[@]}" >/dev/null 2>"$TMP/rb.err" ||
        die "redis-benchmark failed: $(tail -3 "$TMP/rb.err")"
    t1=$(cut -d' ' -f1 "/proc/$2/schedstat")
    awk -v d=$((t1 - t0)) -v n="$N" 'BEGIN { printf "%.3f\n", d / 1000 / n }'
}

note "${CMD[*]}: $REPS runs of $N per build, P=$PIPELINE, $KEYS keys, $CLIENTS clients, servers on core $CORE"
for rep in $(seq "$REPS"); do
    if [ $((rep % 2)) = 1 ]; then # each build goes first every other run
        a=$(run "$PORT_A" "$PID_A")
        b=$(run "$PORT_B" "$PID_B")
    else
        b=$(run "$PORT_B" "$PID_B")
        a=$(run "$PORT_A" "$PID_A")
    fi
    echo "run $rep: A $a  B $b  (server us per request)"
    echo "$a $b" >>"$TMP/runs"
done
for e in "$(info_field "$PORT_A" stats total_error_replies)" \
    "$(info_field "$PORT_B" stats total_error_replies)"; do
    [ "$e" = 0 ] || die "a server answered $e errors"
done
python3 - "$TMP/runs" <<'EOF'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
a = statistics.median(r[0] for r in rows)
b = statistics.median(r[1] for r in rows)
print("median: A %.3f  B %.3f us per request; B/A %.3f" % (a, b, b / a))
EOF
