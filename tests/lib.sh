# lib.sh -- what the shell tests share, sourced after they set ROOT:
#
#     . "$ROOT/tests/lib.sh"
#
# sets BUILD ($SLUICE_BUILD or build/), SLUICE (the sluice binary in it) and
# T (a scratch folder removed at exit); `ok NAME` and `bad NAME DETAIL...`
# print one line per check and count them; `finish` prints the count and
# exits 1 if any check failed.

BUILD=${SLUICE_BUILD:-$ROOT/build}
SLUICE=$BUILD/sluice
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT

checks=0
fails=0
ok() {
    checks=$((checks + 1))
    echo "ok    $1"
}
# bad NAME DETAIL...: each DETAIL line indented under the FAIL line
bad() {
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL  $1"
    shift
    for l in "$@"; do printf '%s\n' "$l" | sed 's/^/        /'; done
}
finish() {
    echo "$checks checks, $fails failed"
    [ "$fails" -eq 0 ]
    exit
}
# need_sluice: fails at once without a built sluice
need_sluice() {
    if [ ! -x "$SLUICE" ]; then
        echo "FAIL  no $SLUICE (build first)"
        exit 1
    fi
}
