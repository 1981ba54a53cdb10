#!/bin/sh
# test_bench_pingpong.sh -- bench/pingpong.c, the core-to-core latency
# bench/goals.sh runs beside its two-thread rounds: built with cc (warnings
# as errors), its arguments refused with exit 2 and the argument named, a
# CPU it cannot pin to refused with exit 1, short real runs on CPUs 0 and 1
# printing its one documented line with positive ns and the count and size
# of its batches (bounded: at most 4096).  Not here: the 60 s cap on a
# partner that stops answering (stopping one thread takes ptrace, which a
# CI container may refuse: a skip there would fail the run; it was checked
# by hand with STALL_S=2 when it was written).  No timing is asserted: the
# ns are only checked to be a number above 0.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
SRC=$ROOT/bench/pingpong.c
PP=$T/pingpong

if ! command -v cc >/dev/null; then
    skip "bench/pingpong.c" "no cc"
    finish
fi
if cc -O2 -std=c11 -Wall -Wextra -Wpedantic -Werror -pthread -o "$PP" "$SRC" 2>"$T/cc.err"; then
    ok "builds with cc -Wall -Wextra -Wpedantic -Werror"
else
    bad "builds with cc -Wall -Wextra -Wpedantic -Werror" "$(cat "$T/cc.err")"
    cc -O2 -pthread -o "$PP" "$SRC" 2>/dev/null || finish
fi

# pp ARGS...: runs the pingpong (bounded); status in $rc, $T/out, $T/err
pp() {
    rc=0
    timeout 120 "$PP" "$@" >"$T/out" 2>"$T/err" || rc=$?
}
USAGE="usage: pingpong CPU_A CPU_B TRIPS   (CPUs 0..1023 and different, TRIPS 1..1000000000)"
# refused NAME FIRST_LINE ARGS...: exit 2, nothing on stdout, stderr FIRST_LINE
# (then the usage line, when FIRST_LINE is not itself the usage)
refused() {
    name=$1 want=$2
    shift 2
    pp "$@"
    if [ "$want" = "$USAGE" ]; then want_err=$USAGE; else want_err="$want
$USAGE"; fi
    if [ "$rc" -eq 2 ] && [ ! -s "$T/out" ] && [ "$(cat "$T/err")" = "$want_err" ]; then
        ok "$name"
    else
        bad "$name" "exit $rc (want 2)" "stderr: $(cat "$T/err")" "want: $want_err" "stdout: $(cat "$T/out")"
    fi
}

# ---- arguments -------------------------------------------------------------
refused "no argument: usage, exit 2" "$USAGE"
refused "two arguments: usage, exit 2" "$USAGE" 0 1
refused "four arguments: usage, exit 2" "$USAGE" 0 1 10 10
refused "CPU_A=x refused, named" "pingpong: CPU_A must be a whole number 0..1023, not 'x'" x 1 10
refused "CPU_A=-1 refused, named" "pingpong: CPU_A must be a whole number 0..1023, not '-1'" -1 1 10
refused "CPU_B=1024 refused (past CPU_SETSIZE), named" \
    "pingpong: CPU_B must be a whole number 0..1023, not '1024'" 0 1024 10
refused "CPU_B=' 1' refused, named" "pingpong: CPU_B must be a whole number 0..1023, not ' 1'" 0 " 1" 10
refused "TRIPS=0 refused, named" "pingpong: TRIPS must be a whole number 1..1000000000, not '0'" 0 1 0
refused "TRIPS=1000000001 refused (bounded), named" \
    "pingpong: TRIPS must be a whole number 1..1000000000, not '1000000001'" 0 1 1000000001
refused "TRIPS=1e6 refused, named" "pingpong: TRIPS must be a whole number 1..1000000000, not '1e6'" 0 1 1e6
refused "TRIPS=18446744073709551617 (overflows) refused" \
    "pingpong: TRIPS must be a whole number 1..1000000000, not '18446744073709551617'" 0 1 18446744073709551617
refused "CPU_A = CPU_B refused" "pingpong: CPU_A and CPU_B must be two different CPUs, not 1 and 1" 1 1 10

# ---- a CPU it cannot pin to -------------------------------------------------
# CPUs are numbered from 0, so the count of configured CPUs is not one
NOCPU=$(getconf _NPROCESSORS_CONF)
if [ "$NOCPU" -lt 1024 ]; then
    pp 0 "$NOCPU" 10
    if [ "$rc" -eq 1 ] && [ ! -s "$T/out" ] &&
        [ "$(cat "$T/err")" = "pingpong: cannot pin thread B to CPU $NOCPU: Invalid argument (not online, or not in this process's cpuset?)" ]; then
        ok "a CPU that does not exist (CPU $NOCPU): exit 1 at once, named"
    else
        bad "a CPU that does not exist (CPU $NOCPU): exit 1 at once, named" "exit $rc" "$(cat "$T/err")"
    fi
else
    skip "a CPU that does not exist: exit 1, named" "1024 CPUs or more"
fi

# ---- real runs --------------------------------------------------------------
if taskset -c 0,1 true 2>/dev/null; then
    # "CPU_A CPU_B TRIPS BATCHES BATCH": 1000 round trips are one batch of
    # 1000, 1 one of 1, 10000 ten of 1000 (BATCH_MIN); 4200000 would be 4200
    # of 1000, past MAX_BATCHES (4096): 4094 of ceil(4200000 / 4096) = 1026
    for args in "0 1 1000 1 1000" "1 0 1 1 1" "0 1 10000 10 1000" "0 1 4200000 4094 1026"; do
        # shellcheck disable=SC2086 # five words
        set -- $args
        pp "$1" "$2" "$3"
        args="$1 $2 $3"
        line="^pingpong: CPUs $1,$2, $3 round trips: [0-9]+\.[0-9] ns one way, cpu/wall [0-9]+ % \(min thread\); $4 batches of $5: median [0-9]+\.[0-9] ns one way$"
        ns=$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "ns") printf "%s ", $i }' "$T/out")
        if [ "$rc" -eq 0 ] && [ "$(grep -c . "$T/out")" = 1 ] && grep -Eq "$line" "$T/out" &&
            [ ! -s "$T/err" ] && awk -v v="$ns" 'BEGIN { split(v, w, " "); exit !(w[1] + 0 > 0 && w[2] + 0 > 0) }'; then
            ok "pingpong $args: exit 0, its one line with ns one way > 0 (whole run and batch median)"
        else
            bad "pingpong $args: exit 0, its one line with ns one way > 0 (whole run and batch median)" "exit $rc" \
                "stdout: $(cat "$T/out")" "stderr: $(cat "$T/err")"
        fi
    done
else
    skip "real runs on CPUs 0 and 1" "cannot run on CPUs 0,1 (nproc says $(nproc))"
fi

finish
