#!/bin/sh
# replay-demo.sh -- what-if replay, from a fresh clone: installs what is missing
# (scripts/deps.sh), builds (make), and replays the sample trace shipped in
# examples/ with a candidate limit, printing a readable summary.
#
#   ./scripts/replay-demo.sh                          the sample trace, the default limit
#   ./scripts/replay-demo.sh TRACE [REPLAY OPTIONS]   another trace and/or limit, e.g.
#   ./scripts/replay-demo.sh examples/sample-trace.txt --algo sliding-log --limit 100 --window 1m
#
# The answers (one line per request, SPEC section 6) are written to
# build/replay-answers.txt; the summary comes from `sluicectl replay --summary`.
set -eu

ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
cd "$ROOT"

./scripts/deps.sh
make -s -j2 all

TRACE=${1:-examples/sample-trace.txt}
[ $# -gt 0 ] && shift
if [ $# -eq 0 ]; then
    set -- --algo token-bucket --limit 10 --window 1s --burst 20
fi
OUT=build/replay-answers.txt

echo "sluice: an exact rate limiter.  Replaying a recorded trace with a candidate limit:"
echo
echo "    build/sluicectl replay $* $TRACE"
echo
grep '^#' "$TRACE" | head -n 5 | sed 's/^/    /'
echo
build/sluicectl replay "$@" --summary "$TRACE" >"$OUT" 2>build/replay-summary.txt || {
    rc=$?
    cat build/replay-summary.txt >&2
    exit "$rc"
}

echo "The first requests and their answers:"
grep -v '^[[:space:]]*#' "$TRACE" | grep -v '^[[:space:]]*$' | head -n 12 >build/replay-head.txt
head -n 12 "$OUT" | paste build/replay-head.txt - | awk -F '\t' '
    BEGIN { printf "    %-40s %s\n", "T KEY [COST]", "ALLOWED LIMIT REMAINING RETRY_AFTER_MS RESET_AFTER_MS DELAY_MS" }
    { printf "    %-40s %s\n", $1, $2 }'
echo "    ... all $(wc -l <"$OUT" | tr -d ' ') answers are in $OUT"
cat build/replay-summary.txt
