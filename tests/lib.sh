# lib.sh -- what the shell tests share, sourced after they set ROOT:
#
#     . "$ROOT/tests/lib.sh"
#
# sets BUILD ($SLUICE_BUILD or build/), SLUICE (the sluicectl binary in it) and
# T (a scratch folder removed at exit); `ok NAME`, `bad NAME DETAIL...` and
# `skip NAME WHY` print one line per check ("ok    NAME", "FAIL  NAME",
# "SKIP  NAME: WHY": tests/run.sh counts each line as a test case) and tally
# them in a file, so that checks made in a subshell (a pipe, $(...)) count
# too; `finish` prints the tally and exits 1 if any check failed.

BUILD=${SLUICE_BUILD:-$ROOT/build}
SLUICE=$BUILD/sluicectl
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT

TALLY=$T/.lib-tally
: >"$TALLY" || exit 1
ok() {
    echo ok >>"$TALLY"
    echo "ok    $1"
}
# bad NAME DETAIL...: each DETAIL line indented under the FAIL line
bad() {
    echo bad >>"$TALLY"
    echo "FAIL  $1"
    shift
    for l in "$@"; do printf '%s\n' "$l" | sed 's/^/        /'; done
}
# skip NAME WHY: a check that cannot run here (a skip fails under CI=true)
skip() {
    echo skip >>"$TALLY"
    echo "SKIP  $1: $2"
}
finish() {
    checks=$(grep -c . "$TALLY")
    fails=$(grep -c '^bad' "$TALLY")
    skips=$(grep -c '^skip' "$TALLY")
    if [ "$skips" -eq 0 ]; then
        echo "$checks checks, $fails failed"
    else
        echo "$checks checks, $fails failed, $skips skipped"
    fi
    [ "$fails" -eq 0 ]
    exit
}
# need_sluice: fails at once without a built sluicectl
need_sluice() {
    if [ ! -x "$SLUICE" ]; then
        echo "FAIL  no $SLUICE (build first)"
        exit 1
    fi
}
