#!/usr/bin/env bash
# bench/holds.sh -- what a concurrency lease costs (docs/commands-holds.md,
# "Numbers"): RL.ACQUIRE + RL.RELEASE pairs against RL.ALLOW pairs, with
# redis-benchmark -P PIPELINE over KEYS random keys and CLIENTS clients,
# against ONE sluiced (local backend):
#
#   allow    RL.ALLOW key:__rand_int__ 100 10s
#   acquire  RL.ACQUIRE key:__rand_int__ 100000 TTL 1s
#   release  RL.RELEASE key:__rand_int__ __rand_int__
#
# redis-benchmark sends one command line, so a release cannot name the id
# its acquire got: releases name random ids, which mostly miss (:0) -- the
# lookup a release makes (the key's group, a binary search of its leases)
# without the memmove a hit adds (a few entries: at these rates a key
# holds about one live lease, TTL 1 s).  A pair's rate is then
# 1 / (1/acquire + 1/release), against RL.ALLOW's rate / 2 (goal:
# >= 0.5x).  REPS rounds in interleaved order (allow, acquire, release,
# then again), medians; and sluiced's CPU time per command (user +
# system, /proc/PID/stat), summed per pair: what a noisy shared machine
# moves least.
#
#   bench/holds.sh            full run (about a minute)
#   bench/holds.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per round, default
# 300000; --quick 20000), REPS (default 5; --quick 1), KEYS (default
# 100000), CLIENTS (default 50), PIPELINE (default 16), THREADS (sluiced
# --threads; default its own).  The server listens on a free 127.0.0.1
# port and is stopped by its PID when the script exits.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/holds.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then : "${N:=20000}" "${REPS:=1}"; else : "${N:=300000}" "${REPS:=5}"; fi
: "${KEYS:=100000}" "${CLIENTS:=50}" "${PIPELINE:=16}" "${THREADS:=}"
case $B in /*) BD=$B ;; *) BD=$ROOT/$B ;; esac
SLUICED=$BD/sluiced
[ -x "$SLUICED" ] || die "$SLUICED not built (make)"
command -v redis-benchmark >/dev/null || die "redis-benchmark not found (apt install redis-tools)"
TMP=$(mktemp -d /tmp/sluice-holds-bench.XXXXXX)
SPID=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -n "$SPID" ]; then
        kill "$SPID" 2>/dev/null || true
        wait "$SPID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

PORT=$(free_port)
args=(--port "$PORT" --http-port 0 --grpc-port 0)
[ -z "$THREADS" ] || args+=(--threads "$THREADS")
"$SLUICED" "${args[@]}" >"$TMP/sluiced.log" 2>&1 &
SPID=$!
wait_pong "$PORT" || die "sluiced did not start: $(tail -5 "$TMP/sluiced.log")"

MODES=(allow acquire release)
declare -A CMD RES TICKS
CMD[allow]="RL.ALLOW key:__rand_int__ 100 10s"
CMD[acquire]="RL.ACQUIRE key:__rand_int__ 100000 TTL 1s"
CMD[release]="RL.RELEASE key:__rand_int__ __rand_int__"
for m in "${MODES[@]}"; do TICKS[$m]=0; done
for r in $(seq "$REPS"); do
    for m in "${MODES[@]}"; do
        t0=$(cpu_ticks "$SPID")
        # shellcheck disable=SC2086 # the command's words
        out=$(timeout 300 redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$CLIENTS" -n "$N" \
            -r "$KEYS" -P "$PIPELINE" -q ${CMD[$m]}) || die "redis-benchmark ($m) failed"
        rps=$(printf '%s\n' "$out" | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i < NF; i++) if ($(i + 1) == "requests") v = $i } END { print v }')
        [ -n "$rps" ] || die "no result for $m: $out"
        RES[$m]="${RES[$m]:-} $rps"
        TICKS[$m]=$((TICKS[$m] + $(cpu_ticks "$SPID") - t0))
        note "round $r $m: $rps/s"
    done
done
# the server answered every command: not a stream of errors
cli "$PORT" RL.ACQUIRE probe 1 TTL 1s | head -1 | grep -qx 1 || die "RL.ACQUIRE does not answer"

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
hz=$(getconf CLK_TCK)
cpu_us() { awk -v t="${TICKS[$1]}" -v hz="$hz" -v n="$N" -v r="$REPS" 'BEGIN { printf "%.3f", t * 1e6 / hz / (n * r) }'; }
a=$(printf '%s' "${RES[allow]}" | median)
q=$(printf '%s' "${RES[acquire]}" | median)
l=$(printf '%s' "${RES[release]}" | median)
ca=$(cpu_us allow) cq=$(cpu_us acquire) cl=$(cpu_us release)
printf 'one sluiced, -P %s, %s clients, %s keys, %s requests x %s rounds\n' \
    "$PIPELINE" "$CLIENTS" "$KEYS" "$N" "$REPS"
printf '%-10s %14s %16s\n' command median/s cpu_us/command
for m in "${MODES[@]}"; do
    printf '%-10s %14s %16s\n' "$m" "$(printf '%s' "${RES[$m]}" | median)" "$(cpu_us "$m")"
done
awk -v a="$a" -v q="$q" -v l="$l" -v ca="$ca" -v cq="$cq" -v cl="$cl" 'BEGIN {
    ap = a / 2; hp = 1 / (1 / q + 1 / l)
    printf "%-24s %12s %14s\n", "pairs", "pairs/s", "cpu_us/pair"
    printf "%-24s %12.0f %14.3f\n", "RL.ALLOW x2", ap, 2 * ca
    printf "%-24s %12.0f %14.3f\n", "RL.ACQUIRE+RL.RELEASE", hp, cq + cl
    printf "ratio (goal >= 0.5x): %.2fx by pairs/s, %.2fx by CPU per pair\n", hp / ap, 2 * ca / (cq + cl)
}'
