#!/usr/bin/env bash
# bench/bounded.sh -- a bounded store (sluiced's kind) on fitted tables
# against the old path (handle table + slab, sl__store_fit_off) in the
# same build, alternating, pinned to one CPU:
#   bench/bounded.c        1M 16-byte token-bucket keys in a 1 GB store:
#                          fill, then 4M sl_decide on random keys;
#   bench/bounded_churn.c  a 32 MB store taking 3M keys while older ones
#                          come to rest: inserts at the bound, keys held.
#
#   bench/bounded.sh [BUILD_DIR]     (default build; needs libsluice.a)
#
# Environment: ROUNDS (5), CPU (1).  Prints every run's line; read the
# medians off them (the machine is shared: docs/status.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${1:-$ROOT/build}
ROUNDS=${ROUNDS:-5}
CPU=${CPU:-1}
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || die "ROUNDS must be 1 to 99, not '$ROUNDS'"
[ -f "$B/libsluice.a" ] || die "no $B/libsluice.a (make $B/libsluice.a)"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for p in bounded bounded_churn; do
    cc -O2 -g -I"$ROOT/include" "$ROOT/bench/$p.c" "$B/libsluice.a" -lurcu-bp -lz -lpthread -lm \
        -o "$TMP/$p"
done
for p in bounded bounded_churn; do
    for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
        for m in $order; do timeout 300 taskset -c "$CPU" "$TMP/$p" "$m"; done
    done
done
