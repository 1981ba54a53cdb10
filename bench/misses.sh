#!/usr/bin/env bash
# bench/misses.sh -- cache misses per decision at 1M keys, by cachegrind
# (perf's counters are not available in this VM): builds bench/misses.c
# against each build's libsluice.a, runs it under cachegrind with 0 and D
# decisions after filling N keys, and prints the difference per decision:
# instructions (Ir), data reads (Dr), first-level read misses (D1mr) and
# last-level read misses (DLmr).  The last level is given explicitly (32 MB,
# 16-way, this VM's L3): cachegrind's own guess here was a 256 MB
# direct-mapped cache, in which 1M keys never miss.
#
#   bench/misses.sh BUILD_DIR [BUILD_DIR...]
#
# Environment: N (keys, default 1000000), D (decisions, default 500000),
# KL (key bytes, default 16), LL (cachegrind's --LL, default 33554432,16,64).
# Counts, not latency: two misses issued together (a slot straddling two
# lines) count two but cost about one; a miss that depends on another's
# data (a table slot, then the record it names) costs both.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-1000000} D=${D:-500000} KL=${KL:-16} LL=${LL:-33554432,16,64}
[ $# -ge 1 ] || { echo "usage: bench/misses.sh BUILD_DIR [BUILD_DIR...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench/misses.sh: valgrind is missing" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
i=0
for b in "$@"; do
    i=$((i + 1))
    src=$(cd "$b/.." && pwd)
    cc -O2 -g -I"$src/include" "$ROOT/bench/misses.c" "$b/libsluice.a" -lurcu-bp -lz -lpthread \
        -o "$TMP/misses$i"
    for d in 0 "$D"; do
        valgrind --tool=cachegrind --cache-sim=yes --LL="$LL" \
            --cachegrind-out-file="$TMP/cg$i.$d" "$TMP/misses$i" "$N" "$d" "$KL" >/dev/null 2>&1
    done
    awk -v b="$b" -v d="$D" '
        /^summary:/ { for (k = 2; k <= NF; k++) v[FILENAME, k] = $k; f[++nf] = FILENAME }
        END { split("Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw", ev, " ")
              printf "%s: per decision", b
              for (k = 2; k <= 10; k++)
                  if (ev[k-1] == "Ir" || ev[k-1] == "Dr" || ev[k-1] == "D1mr" || ev[k-1] == "DLmr")
                      printf "  %s %.2f", ev[k-1], (v[f[2], k] - v[f[1], k]) / d
              printf "\n" }' "$TMP/cg$i.0" "$TMP/cg$i.$D"
done
