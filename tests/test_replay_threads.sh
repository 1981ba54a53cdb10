#!/bin/sh
# test_replay_threads.sh -- `sluicectl replay --threads N` gives the answers of
# one thread, byte for byte, for every algorithm; a malformed line stops it
# at the same place; and answers stream out while input is still arriving.
# Runs against build/, build/asan/ and, for the threads, build/tsan/.
# sluice-test: +tsan
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
BUILD=${SLUICE_BUILD:-$ROOT/build}
SLUICE=$BUILD/sluicectl
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
fails=0
ok() { echo "ok    $1"; }
bad() {
    fails=$((fails + 1))
    echo "FAIL  $1"
    shift
    for l in "$@"; do printf '%s\n' "$l" | sed 's/^/        /'; done
}
[ -x "$SLUICE" ] || { echo "FAIL  no $SLUICE"; exit 1; }

# Fewer lines under ThreadSanitizer, which is slow.
case $BUILD in */tsan) LINES=40000 ;; *) LINES=300000 ;; esac

# LINES requests over 3000 keys, 1 to 4 per ms, costs 0..3, some keys hot,
# times of some keys running backwards now and then.
awk -v n="$LINES" 'BEGIN { s = 7; t = 1700000000000
    for (i = 0; i < n; i++) {
        s = (s * 16807) % 2147483647; k = s % 3000; if (s % 5 == 0) k = s % 7
        if (s % 3 == 0) t += 1
        tt = t; if (s % 97 == 0) tt = t - 5000
        printf "%.0f user:%d %d\n", tt, k, s % 4 } }' >"$T/in"

for algo in fixed-window sliding-log sliding-window sliding-buckets token-bucket gcra leaky-bucket; do
    case $algo in
    sliding-buckets) args="--limit 40 --window 2s --precision 20" ;;
    token-bucket | gcra | leaky-bucket) args="--limit 20 --window 1s --burst 30" ;;
    sliding-log) args="--limit 20 --window 1s --log-rejected" ;;
    *) args="--limit 20 --window 1s" ;;
    esac
    # shellcheck disable=SC2086
    "$SLUICE" replay --algo $algo $args --threads 1 "$T/in" >"$T/one" 2>"$T/err" ||
        bad "$algo --threads 1" "$(cat "$T/err")"
    for n in 2 3 4; do
        # shellcheck disable=SC2086
        "$SLUICE" replay --algo $algo $args --threads $n "$T/in" >"$T/many" 2>"$T/err"
        rc=$?
        if [ $rc -eq 0 ] && cmp -s "$T/one" "$T/many"; then
            ok "$algo: --threads $n answers as --threads 1 ($LINES lines)"
        else
            bad "$algo: --threads $n differs from --threads 1" "exit $rc: $(cat "$T/err")" \
                "$(cmp "$T/one" "$T/many")"
        fi
    done
done

# A malformed line after many good ones: same answers, same error.
{ cat "$T/in"; echo "12 k x"; echo "13 k"; } >"$T/bad"
for n in 1 2 4; do
    "$SLUICE" replay --algo gcra --limit 5 --window 1s --threads $n "$T/bad" >"$T/out.$n" 2>"$T/err.$n"
    echo $? >"$T/rc.$n"
done
want_err="sluicectl: line $((LINES + 1)): cost 'x' is not an integer"
for n in 1 2 4; do
    if [ "$(cat "$T/rc.$n")" = 2 ] && [ "$(cat "$T/err.$n")" = "$want_err" ] &&
        [ "$(wc -l <"$T/out.$n")" -eq "$LINES" ] && cmp -s "$T/out.1" "$T/out.$n"; then
        ok "malformed line $((LINES + 1)) with --threads $n: $LINES answers, then the error"
    else
        bad "malformed line with --threads $n" "exit $(cat "$T/rc.$n"): $(cat "$T/err.$n")" \
            "$(wc -l <"$T/out.$n") answers"
    fi
done

# Streaming: the answer to a line comes out before the next line is sent.
# A handshake through FIFOs, no clock: the second line is written only
# after the first answer has been read, so a replay that held its output
# until more input (or EOF) came would never answer and the bounded read
# (`timeout`) would come back empty.
for n in 1 2; do
    rm -f "$T/sin" "$T/sout"
    mkfifo "$T/sin" "$T/sout" || exit 1
    timeout 300 "$SLUICE" replay --algo fixed-window --limit 1 --window 1s --threads $n \
        <"$T/sin" >"$T/sout" 2>"$T/serr" &
    pid=$!
    exec 3>"$T/sin" 4<"$T/sout"
    printf '0 a\n' >&3
    first=$(timeout 120 head -n 1 <&4)
    printf '1 a\n' >&3
    exec 3>&-
    second=$(timeout 120 cat <&4)
    exec 4<&-
    wait $pid
    rc=$?
    if [ $rc -eq 0 ] && [ "$first" = "1 1 0 0 1000 0" ] && [ "$second" = "0 1 0 999 999 0" ]; then
        ok "streaming with --threads $n: first answer before the second line was sent"
    else
        bad "streaming with --threads $n" "first '$first' (want it while the input is open)" \
            "then '$second', exit $rc: $(cat "$T/serr")"
    fi
done

[ "$fails" -eq 0 ]
