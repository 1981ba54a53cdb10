#!/usr/bin/env bash
# bench/journal.sh -- what the decision journal costs (docs/durability.md):
# RL.ALLOW key:__rand_int__ 100 10s with redis-benchmark -P PIPELINE over
# KEYS random keys and CLIENTS clients, on three sluiced started side by
# side in one run:
#
#   none       --snapshot only
#   everysec   --journal FILE --journal-fsync everysec   (goal: >= 0.8x none)
#   always     --journal FILE --journal-fsync always     (reported)
#
# REPS rounds in interleaved order (none, everysec, always, none, ...); the
# table shows each one's median decisions/s and its ratio to none, the
# CPU time sluiced spent per decision (user + system, /proc) and its
# ratio to none (decisions per CPU-second: what a busy machine moves
# least), and the journal's bytes written.  The journals live in JDIR (default: a fresh
# directory under /tmp -- the disk that holds it decides what `always`
# costs; tmpfs makes fdatasync free, so say where it ran).
#
#   bench/journal.sh            full run (about a minute)
#   bench/journal.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per round, default
# 300000; --quick 20000), REPS (default 3; --quick 1), KEYS (default
# 100000), CLIENTS (default 50), PIPELINE (default 16), THREADS (sluiced
# --threads; default its own), JDIR.  Every server listens on a free
# 127.0.0.1 port and is stopped by its PID when the script exits.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/journal.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then : "${N:=20000}" "${REPS:=1}"; else : "${N:=300000}" "${REPS:=3}"; fi
: "${KEYS:=100000}" "${CLIENTS:=50}" "${PIPELINE:=16}" "${THREADS:=}"
case $B in /*) BD=$B ;; *) BD=$ROOT/$B ;; esac
SLUICED=$BD/sluiced
[ -x "$SLUICED" ] || die "$SLUICED not built (make)"
command -v redis-benchmark >/dev/null || die "redis-benchmark not found (apt install redis-tools)"
TMP=$(mktemp -d /tmp/sluice-journal-bench.XXXXXX)
JDIR=${JDIR:-$TMP}
PIDS=()
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

MODES=(none everysec always)
declare -A PORT
for m in "${MODES[@]}"; do
    PORT[$m]=$(free_port)
    args=(--port "${PORT[$m]}" --http-port 0 --grpc-port 0 --snapshot "$JDIR/$m.snap")
    [ "$m" = none ] || args+=(--journal "$JDIR/$m.journal" --journal-fsync "$m")
    [ -z "$THREADS" ] || args+=(--threads "$THREADS")
    "$SLUICED" "${args[@]}" >"$TMP/$m.log" 2>&1 &
    PIDS+=($!)
    wait_pong "${PORT[$m]}" || die "sluiced ($m) did not start: $(tail -5 "$TMP/$m.log")"
done

declare -A RES TICKS PID
i=0
for m in "${MODES[@]}"; do PID[$m]=${PIDS[$i]}; i=$((i + 1)); TICKS[$m]=0; done
for r in $(seq "$REPS"); do
    for m in "${MODES[@]}"; do
        t0=$(cpu_ticks "${PID[$m]}")
        out=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "${PORT[$m]}" -c "$CLIENTS" -n "$N" \
            -r "$KEYS" -P "$PIPELINE" -q RL.ALLOW key:__rand_int__ 100 10s) ||
            die "redis-benchmark on $m failed"
        rps=$(printf '%s\n' "$out" | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i < NF; i++) if ($(i + 1) == "requests") v = $i } END { print v }')
        [ -n "$rps" ] || die "no result for $m: $out"
        RES[$m]="${RES[$m]:-} $rps"
        TICKS[$m]=$((TICKS[$m] + $(cpu_ticks "${PID[$m]}") - t0))
        note "round $r $m: $rps decisions/s"
    done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
base=$(printf '%s' "${RES[none]}" | median)
fs=$(stat -f -c %T "$JDIR")
printf 'RL.ALLOW -P %s, %s clients, %s keys, %s rounds, journals on %s (%s)\n' \
    "$PIPELINE" "$CLIENTS" "$KEYS" "$REPS" "$JDIR" "$fs"
hz=$(getconf CLK_TCK)
# CPU per decision: sluiced's user + system time over every round (the
# noise of a shared machine moves decisions/s far more than it moves this)
cpu_us() { awk -v t="${TICKS[$1]}" -v hz="$hz" -v n="$N" -v r="$REPS" 'BEGIN { printf "%.3f", t * 1e6 / hz / (n * r) }'; }
base_cpu=$(cpu_us none)
printf '%-10s %14s %8s %14s %10s %16s\n' mode decisions/s ratio cpu_us/decision cpu_ratio journal_bytes
for m in "${MODES[@]}"; do
    med=$(printf '%s' "${RES[$m]}" | median)
    bytes=-
    [ "$m" = none ] || bytes=$(stat -c %s "$JDIR/$m.journal")
    c=$(cpu_us "$m")
    printf '%-10s %14s %8s %14s %10s %16s\n' "$m" "$med" \
        "$(awk -v a="$med" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')" "$c" \
        "$(awk -v a="$c" -v b="$base_cpu" 'BEGIN { printf "%.2fx", b / a }')" "$bytes"
done
