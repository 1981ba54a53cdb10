#!/usr/bin/env bash
# bench/keybytes.sh -- bytes a key costs beyond its own bytes, as a user
# would see it: the resident memory of `sluicectl replay` after N distinct
# keys, minus that after N lines of one key (the same input size, so the
# reader's buffers, the output and the program itself cancel out), over N.
#
#   bench/keybytes.sh [BUILD_DIR...]     (default build; several: side by side)
#
# Keys are "user:NNNNNNNNNNN" (16 bytes), one request each at one time, one
# thread (`--threads 1`: one store).  Environment: N (1000000), ALGOS
# (token-bucket fixed-window sliding-window), RUNS (3: the median is kept;
# a max RSS varies by a few pages run to run).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${N:-1000000}
ALGOS=${ALGOS:-token-bucket fixed-window sliding-window}
RUNS=${RUNS:-3}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
[ $# -gt 0 ] || set -- "$ROOT/build"
for b in "$@"; do [ -x "$b/sluicectl" ] || die "no $b/sluicectl (make all)"; done
[ -x /usr/bin/time ] || die "needs /usr/bin/time (apt install time)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 - "$N" "$TMP" <<'EOF'
import sys
n, d = int(sys.argv[1]), sys.argv[2]
with open(f"{d}/many", "w") as f:
    f.writelines(f"1000 user:{i:011d}\n" for i in range(n))
with open(f"{d}/one", "w") as f:
    f.writelines("1000 user:00000000000\n" for _ in range(n))
EOF
rss() { # BUILD ALGO FILE: max RSS in KB, median of RUNS
    local b=$1 a=$2 f=$3 i
    for i in $(seq "$RUNS"); do
        /usr/bin/time -f %M -o "$TMP/t$i" timeout 300 "$b/sluicectl" replay --threads 1 \
            --algo "$a" --limit 100 --window 60s "$f" >/dev/null
        cat "$TMP/t$i"
    done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
printf '%-40s %-16s %12s %12s %10s %12s\n' build algorithm "RSS N keys" "RSS 1 key" "B a key" "beyond key"
for b in "$@"; do
    for a in $ALGOS; do
        many=$(rss "$b" "$a" "$TMP/many")
        one=$(rss "$b" "$a" "$TMP/one")
        awk -v b="$b" -v a="$a" -v m="$many" -v o="$one" -v n="$N" 'BEGIN {
            per = (m - o) * 1024 / n
            printf "%-40s %-16s %9d KB %9d KB %10.1f %12.1f\n", b, a, m, o, per, per - 16 }'
    done
done
