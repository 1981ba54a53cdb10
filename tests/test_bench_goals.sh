#!/bin/sh
# test_bench_goals.sh -- bench/goals.sh, issue 30's goal table, without
# benchmarking anything: two stub build dirs whose bench/bench prints
# bench/bench's two tables with numbers set here, one line of numbers a
# call, and a stub pingpong (PINGPONG=) printing set ns one way.  Checked:
# the argument errors (exit 2, or 1 and the missing path named, before any
# run), the order of the runs (base, new, then new, base; the pingpong
# before each round's two-thread runs), the commands printed, the medians,
# ratios and verdicts of the table, the core-to-core row and its note, a
# stub that fails or prints no number, and -- with PINGPONG unset --
# bench/pingpong.c built and its line read.  No timing is asserted.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
GOALS=$ROOT/bench/goals.sh

# stub DIR: DIR/bench/bench, printing the tables with the next line of
# DIR/one.vals (hot 1M fill) for --parts hot,1m or DIR/two.vals (own-keys
# own-stores) for --parts 2t; a line "FAIL" exits 3; every call is logged
stub() {
    mkdir -p "$1/bench"
    cat >"$1/bench/bench" <<'EOF'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)
echo "$(basename "$d") $*" >>"$STUB_LOG"
case "$*" in
    *"--parts hot,1m"*) f=one ;;
    *"--parts 2t"*) f=two ;;
    *) exit 9 ;;
esac
n=$(($(cat "$d/n.$f" 2>/dev/null || echo 0) + 1))
echo "$n" >"$d/n.$f"
line=$(sed -n "${n}p" "$d/$f.vals")
if [ "$line" = FAIL ] || [ -z "$line" ]; then echo "stub: asked to fail" >&2; exit 3; fi
# shellcheck disable=SC2086 # the numbers, one word each
set -- $line
if [ $f = one ]; then h=$1 m=$2 fill=$3 sh=- ok=- os=-; else h=- m=- fill=- sh=19.00 ok="$1 (9.00)" os="$2 (10.00)"; fi
# the real bench prints its "run" line on stderr (bench/chain.sh reads it)
printf '  run %-16s hot %6s  many %6s  2thr hot -1.00 / -1.00  many -1.00  batched hot -1.00  many -1.00 M/s\n' \
    token-bucket "$h" "$m" >&2
cat <<TABLE
sluice bench: 1.00 s per run, best of 1; 1000 hot keys, 1000000 many keys; keys "user:NNNNNN" (11 bytes)

algorithm        |  hot keys |   1M keys |  hot keys |   1M keys |  hot keys |   1M keys | bytes/key             | goal                       | met?
                 | 1 thr M/s | 1 thr M/s |   batched |   batched | 2 thr M/s | 2 thr M/s | alloc / rss           |                            |
-----------------+-----------+-----------+-----------+-----------+-----------+-----------+-----------------------+----------------------------+------
token-bucket     |     $h |      $m |         - |         - |         - |         - | -                     | >=20 hot, >=5 many, <=32 B | no

details          |      2 thr hot M/s |      2 thr hot M/s |      2 thr hot M/s | 2 thr many |      1 thr M/s |     allowed % | fill M/s |  stats B |     1thr M/CPU-s | cpu/wall % (min thread)
                 |  shared: agg (min) | own keys: agg(min) | own store: agg(min) |    min M/s |  rec locks h/m |    hot / many |     many |  per key |       hot / many | hot1 many1 hot2 many2
token-bucket     |       $sh |       $ok |      $os |       2.45 |  -1.00 / -1.00 |             - |     $fill |        - |      0.00 / 0.00 | 100 100 100 100

all goals met: no
TABLE
EOF
    chmod +x "$1/bench/bench"
}
# fresh: stub builds $T/base and $T/new with the values given
fresh() { # BASE_ONE BASE_TWO NEW_ONE NEW_TWO (lines separated by ;)
    rm -rf "$T/base" "$T/new"
    stub "$T/base"
    stub "$T/new"
    printf '%s\n' "$1" | tr ';' '\n' >"$T/base/one.vals"
    printf '%s\n' "$2" | tr ';' '\n' >"$T/base/two.vals"
    printf '%s\n' "$3" | tr ';' '\n' >"$T/new/one.vals"
    printf '%s\n' "$4" | tr ';' '\n' >"$T/new/two.vals"
    : >"$STUB_LOG"
}
STUB_LOG=$T/calls
PP_DIR=$T
export STUB_LOG PP_DIR
# the stub pingpong: "pingpong A B TRIPS" logged; prints the next line of
# $T/pp.vals ("NS SHARE BATCH") as its ns one way, cpu/wall % and median of
# its batches; "FAIL" exits 4
cat >"$T/pingpong" <<'EOF'
#!/bin/sh
echo "pingpong $*" >>"$STUB_LOG"
n=$(($(cat "$PP_DIR/n.pp" 2>/dev/null || echo 0) + 1))
echo "$n" >"$PP_DIR/n.pp"
line=$(sed -n "${n}p" "$PP_DIR/pp.vals")
if [ "$line" = FAIL ] || [ -z "$line" ]; then echo "pingpong: asked to fail" >&2; exit 4; fi
# shellcheck disable=SC2086 # three words
set -- $line
echo "pingpong: CPUs 0,1, 2000000 round trips: $1 ns one way, cpu/wall $2 % (min thread); 2000 batches of 1000: median $3 ns one way"
EOF
chmod +x "$T/pingpong"
# pp_vals LINES: the stub pingpong's values (lines separated by ;)
pp_vals() { printf '%s\n' "$1" | tr ';' '\n' >"$T/pp.vals"; }
PP="61.3 99 60.1;210.0 97 205.5;58.5 98 57.9"
pp_vals "$PP"
# goals ENV... -- ARGS...: runs bench/goals.sh with the stub pingpong (from
# its first value); status in $rc, $T/out, $T/err; the stubs' calls (this
# run's only) in $STUB_LOG
goals() {
    rc=0
    rm -f "$T/n.pp"
    : >"$STUB_LOG"
    env PINGPONG="$T/pingpong" "$@" >"$T/out" 2>"$T/err" || rc=$?
}
# expect NAME RC ERR_LINE: exit status and stderr's last line, nothing run
expect() {
    got=$(tail -n 1 "$T/err")
    if [ "$rc" -eq "$2" ] && [ "$got" = "$3" ] && [ ! -s "$STUB_LOG" ] && [ ! -s "$T/out" ]; then
        ok "$1"
    else
        bad "$1" "exit $rc (want $2), stderr: $(cat "$T/err")" "want: $3" \
            "stub calls: $(cat "$STUB_LOG")" "stdout: $(cat "$T/out")"
    fi
}

ONE_B="10.00 1.00 1.50;12.00 1.20 1.40;11.00 0.90 1.60"
TWO_B="18.00 20.00;19.00 19.00;20.00 25.00"
ONE_N="10.50 1.70 0.80;10.00 1.50 0.90;11.00 1.80 0.70"
TWO_N="28.50 30.00;27.00 30.00;29.00 29.00"

# ---- arguments -------------------------------------------------------------
fresh "$ONE_B" "$TWO_B" "$ONE_N" "$TWO_N"
goals "$GOALS"
expect "no argument: usage, exit 2" 2 \
    "usage: bench/goals.sh BASE_BUILD [NEW_BUILD]   (environment: ROUNDS CPU PAIR PINGPONG_TRIPS KEYBYTES MISSES PEERS CHAIN)"
goals "$GOALS" "$T/base" "$T/new" "$T/new"
expect "three arguments: usage, exit 2" 2 \
    "usage: bench/goals.sh BASE_BUILD [NEW_BUILD]   (environment: ROUNDS CPU PAIR PINGPONG_TRIPS KEYBYTES MISSES PEERS CHAIN)"
goals ROUNDS=0 "$GOALS" "$T/base" "$T/new"
expect "ROUNDS=0 refused, exit 2" 2 "bench/goals.sh: ROUNDS must be a count of 1 to 99, not '0'"
goals ROUNDS=100 "$GOALS" "$T/base" "$T/new"
expect "ROUNDS=100 refused (bounded), exit 2" 2 "bench/goals.sh: ROUNDS must be a count of 1 to 99, not '100'"
goals CPU=0,1 "$GOALS" "$T/base" "$T/new"
expect "CPU=0,1 refused, exit 2" 2 "bench/goals.sh: CPU must be one CPU number, not '0,1'"
for v in 1,1 0,00; do
    goals PAIR=$v "$GOALS" "$T/base" "$T/new"
    expect "PAIR=$v (one CPU twice) refused before any run, exit 2" 2 \
        "bench/goals.sh: PAIR must be two different CPUs (the pingpong needs two), not '$v'"
done
NOCPU=$(getconf _NPROCESSORS_CONF)
goals PAIR=0,$NOCPU "$GOALS" "$T/base" "$T/new"
expect "PAIR=0,$NOCPU (no CPU $NOCPU) named before any run, exit 1" 1 \
    "bench/goals.sh: cannot run on PAIR=0,$NOCPU (taskset -c $NOCPU failed; nproc says $(nproc))"
goals KEYBYTES=yes "$GOALS" "$T/base" "$T/new"
expect "KEYBYTES=yes refused, exit 2" 2 "bench/goals.sh: KEYBYTES must be 0 or 1, not 'yes'"
goals CHAIN=yes "$GOALS" "$T/base" "$T/new"
expect "CHAIN=yes refused, exit 2" 2 "bench/goals.sh: CHAIN must be 0 or 1, not 'yes'"
goals CHAIN_ROUNDS=0 "$GOALS" "$T/base" "$T/new"
expect "CHAIN_ROUNDS=0 refused, exit 2" 2 "bench/goals.sh: CHAIN_ROUNDS must be a count of 1 to 99, not '0'"
for v in 0 1000000001 -5 2e6 abc; do
    goals PINGPONG_TRIPS=$v "$GOALS" "$T/base" "$T/new"
    expect "PINGPONG_TRIPS=$v refused, exit 2" 2 \
        "bench/goals.sh: PINGPONG_TRIPS must be a count of 1 to 1000000000, not '$v'"
done
goals "$GOALS" "$T/nothere" "$T/new"
expect "missing build dir named, exit 1" 1 "bench/goals.sh: no build dir $T/nothere"
rm "$T/new/bench/bench"
goals "$GOALS" "$T/base" "$T/new"
expect "missing NEW/bench/bench named before any run" 1 \
    "bench/goals.sh: no $T/new/bench/bench (make build/bench/bench in its tree)"
fresh "$ONE_B" "$TWO_B" "$ONE_N" "$TWO_N"
goals KEYBYTES=1 "$GOALS" "$T/base" "$T/new"
expect "KEYBYTES=1 without NEW/sluicectl named before any run" 1 \
    "bench/goals.sh: KEYBYTES=1: no $T/new/sluicectl (make build/sluicectl)"
goals MISSES=1 "$GOALS" "$T/base" "$T/new"
expect "MISSES=1 without BASE/libsluice.a named before any run" 1 \
    "bench/goals.sh: MISSES=1: no $T/base/libsluice.a (make build/libsluice.a)"
: >"$STUB_LOG"
rc=0
env PINGPONG="$T/nopingpong" "$GOALS" "$T/base" "$T/new" >"$T/out" 2>"$T/err" || rc=$?
expect "PINGPONG not a program: named before any run" 1 \
    "bench/goals.sh: PINGPONG=$T/nopingpong is not an executable program"
# a PATH with what goals.sh runs before its first bench, and no cc
mkdir -p "$T/nocc"
for c in bash dirname basename taskset true nproc; do
    for d in /usr/local/bin /usr/bin /bin; do
        if [ -x "$d/$c" ]; then ln -sf "$d/$c" "$T/nocc/$c" && break; fi
    done
done
: >"$STUB_LOG"
rc=0
env -u PINGPONG PATH="$T/nocc" "$GOALS" "$T/base" "$T/new" >"$T/out" 2>"$T/err" || rc=$?
expect "no cc and no PINGPONG: named before any run" 1 \
    "bench/goals.sh: needs cc to build bench/pingpong.c, the core-to-core latency of step 2 (apt install gcc)"

# ---- a whole run on the stubs ----------------------------------------------
fresh "$ONE_B" "$TWO_B" "$ONE_N" "$TWO_N"
goals ROUNDS=3 CPU=0 PAIR=0,1 "$GOALS" "$T/base" "$T/new"
if [ "$rc" -eq 0 ]; then ok "a run on the stubs exits 0"; else bad "a run on the stubs exits 0" "exit $rc: $(cat "$T/err")"; fi

want="base --algo token-bucket --parts hot,1m --seconds 1 --reps 1
new --algo token-bucket --parts hot,1m --seconds 1 --reps 1
new --algo token-bucket --parts hot,1m --seconds 1 --reps 1
base --algo token-bucket --parts hot,1m --seconds 1 --reps 1
base --algo token-bucket --parts hot,1m --seconds 1 --reps 1
new --algo token-bucket --parts hot,1m --seconds 1 --reps 1
pingpong 0 1 2000000
base --algo token-bucket --parts 2t --seconds 1 --reps 1
new --algo token-bucket --parts 2t --seconds 1 --reps 1
pingpong 0 1 2000000
new --algo token-bucket --parts 2t --seconds 1 --reps 1
base --algo token-bucket --parts 2t --seconds 1 --reps 1
pingpong 0 1 2000000
base --algo token-bucket --parts 2t --seconds 1 --reps 1
new --algo token-bucket --parts 2t --seconds 1 --reps 1"
if [ "$(cat "$STUB_LOG")" = "$want" ]; then
    ok "runs alternate: base new, new base, base new; one thread, then two, each pair after a pingpong"
else
    bad "runs alternate: base new, new base, base new; one thread, then two, each pair after a pingpong" \
        "got:" "$(cat "$STUB_LOG")"
fi

want="+ timeout 300 taskset -c 0 $T/base/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 300 taskset -c 0 $T/new/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 300 taskset -c 0 $T/new/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 300 taskset -c 0 $T/base/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 300 taskset -c 0 $T/base/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 300 taskset -c 0 $T/new/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1
+ timeout 900 $T/pingpong 0 1 2000000
+ timeout 300 taskset -c 0,1 $T/base/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1
+ timeout 300 taskset -c 0,1 $T/new/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1
+ timeout 900 $T/pingpong 0 1 2000000
+ timeout 300 taskset -c 0,1 $T/new/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1
+ timeout 300 taskset -c 0,1 $T/base/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1
+ timeout 900 $T/pingpong 0 1 2000000
+ timeout 300 taskset -c 0,1 $T/base/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1
+ timeout 300 taskset -c 0,1 $T/new/bench/bench --algo token-bucket --parts 2t --seconds 1 --reps 1"
if [ "$(grep '^+ ' "$T/out")" = "$want" ]; then
    ok "every command printed as run"
else
    bad "every command printed as run" "got:" "$(grep '^+ ' "$T/out")"
fi
if [ "$(grep -c '^load before: [0-9.]* [0-9.]* [0-9.]* ' "$T/out")" = 1 ] &&
    [ "$(grep -c '^load after: [0-9.]* [0-9.]* [0-9.]* ' "$T/out")" = 1 ]; then
    ok "load average printed before and after"
else
    bad "load average printed before and after" "$(cat "$T/out")"
fi

# medians: base hot 11.00, 1M 1.00, fill 1.50; new 10.50, 1.70, 0.80;
# own/sep per round: base 0.90 1.00 0.80, new 0.95 0.90 1.00; pingpong
# 61.3 210.0 58.5 ns (median 61.3), batch medians 60.1 205.5 57.9,
# cpu/wall 99 97 98
want="quantity                          |   base |    new | new/base |          goal | met | values, round by round
----------------------------------+--------+--------+----------+---------------+-----+-------------------------
1M keys, one call a decision, M/s |  1.000 |  1.700 |   1.700x |  >= 1.6x base | yes | base 1.00 1.20 0.90; new 1.70 1.50 1.80; new/base 1.70 1.25 2.00
hot keys, M/s                     | 11.000 | 10.500 |   0.955x | >= 0.97x base |  no | base 10.00 12.00 11.00; new 10.50 10.00 11.00; new/base 1.05 0.83 1.00
fill of 1M new keys, M/s          |  1.500 |  0.800 |   0.533x |             - |   - | base 1.50 1.40 1.60; new 0.80 0.90 0.70; new/base 0.53 0.64 0.44
2 threads, own keys, M/s          | 19.000 | 28.500 |   1.500x |             - |   - | base 18.00 19.00 20.00; new 28.50 27.00 29.00; new/base 1.58 1.42 1.45
2 threads, own stores, M/s        | 20.000 | 30.000 |   1.500x |             - |   - | base 20.00 19.00 25.00; new 30.00 30.00 29.00; new/base 1.50 1.58 1.16
2 threads, own keys / own stores  |  0.900 |  0.950 |        - |    new >= 0.9 | yes | base 0.90 1.00 0.80; new 0.95 0.90 1.00
core to core, one way, ns (0,1)   | 61.300 | 61.300 |        - |             - |   - | 61.3 210.0 58.5; batch medians 60.1 205.5 57.9; cpu/wall % 99 97 98
core to core: bench/pingpong.c on CPUs 0,1 before each round's two 2t runs; near ~40-60 ns, far ~200 ns: in the far mode the two-thread ratio falls for any code whose threads write shared lines; below ~95 cpu/wall the batch medians (1000-trip batches) still show the mode
goals met: 2 of 3; missed: hot keys, M/s (0.955x)"
got=$(sed -n '/^quantity /,$p' "$T/out")
if [ "$got" = "$want" ]; then
    ok "table: medians, new/base, goals and verdicts"
else
    bad "table: medians, new/base, goals and verdicts" "got:" "$got" "want:" "$want"
fi

# ---- PAIR and PINGPONG_TRIPS reach the pingpong and the row's label ----------
NAME="PAIR=1,0 PINGPONG_TRIPS=500: pingpong 1 0 500, the row labelled (1,0)"
fresh "10.00 1.00 1.50" "18.00 20.00" "10.50 1.70 0.80" "28.50 30.00"
pp_vals "75.3 88 44.4"
if taskset -c 1,0 true 2>/dev/null; then
    goals ROUNDS=1 CPU=0 PAIR=1,0 PINGPONG_TRIPS=500 "$GOALS" "$T/base" "$T/new"
    got=$(grep '^core to core, one way' "$T/out" | sed 's/  */ /g')
    if [ "$rc" -eq 0 ] && grep -qx "+ timeout 900 $T/pingpong 1 0 500" "$T/out" &&
        [ "$got" = "core to core, one way, ns (1,0) | 75.300 | 75.300 | - | - | - | 75.3; batch medians 44.4; cpu/wall % 88" ]; then
        ok "$NAME"
    else
        bad "$NAME" "exit $rc" "got: $got" "$(cat "$T/out")" "$(cat "$T/err")"
    fi
else
    skip "$NAME" "cannot run on CPUs 1,0"
fi
pp_vals "$PP"

# ---- CHAIN=1: bench/chain.sh's row, on the same stubs and a stub chase ------
# goals' round 1 takes line 1 of one.vals, chain.sh's round 1 line 2 (base
# then new): base 10 M/s hot, 1 M/s 1M -> (1000 - 100) / 150 = 6.00; new 20
# and 5 -> (200 - 50) / 150 = 1.00
cat >"$T/chase" <<'EOF'
#!/bin/sh
echo "chase: $1 MB, 4194304 lines, $2 dependent loads, 4 KB pages: 150.0 ns/load, cpu/wall 99 % (ended on line 7)"
EOF
chmod +x "$T/chase"
fresh "11.00 1.00 1.50;10.00 1.00 1.50" "$TWO_B" "10.50 1.70 0.80;20.00 5.00 0.80" "$TWO_N"
goals ROUNDS=1 CHAIN=1 CHAIN_ROUNDS=1 CHASE="$T/chase" CPU=0 PAIR=0,1 "$GOALS" "$T/base" "$T/new"
want="misses a 1M-key decision waits for, by time | 6.000 | 1.000 | 0.167x | new <= 1.1 | yes | bench/chain.sh: (ns 1M - ns hot) / DRAM ns"
got=$(grep '^misses a 1M-key' "$T/out" | sed 's/  */ /g')
if [ "$rc" -eq 0 ] && [ "$got" = "$want" ] &&
    grep -q "^+ env CHASE=$T/chase ROUNDS=1 CPU=0 timeout 1800 $ROOT/bench/chain.sh $T/base $T/new\$" "$T/out"; then
    ok "CHAIN=1: chain.sh run with the builds, its misses in the table"
else
    bad "CHAIN=1: chain.sh run with the builds, its misses in the table" "exit $rc" "got: $got" "want: $want" \
        "$(cat "$T/out")" "$(cat "$T/err")"
fi

# ---- a stub that fails, or prints no number ---------------------------------
fresh "$ONE_B" "$TWO_B" "10.50 1.70 0.80;FAIL" "$TWO_N"
goals ROUNDS=2 CPU=0 "$GOALS" "$T/base" "$T/new"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/goals.sh: the new build's run failed (exit status 3): timeout 300 taskset -c 0 $T/new/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1" "$T/err" &&
    grep -qx '    stub: asked to fail' "$T/err" && [ "$(grep -c . "$STUB_LOG")" = 3 ] &&
    ! grep -q '^quantity' "$T/out"; then
    ok "a failed run stops it: exit 1, the command and its stderr, no table"
else
    bad "a failed run stops it: exit 1, the command and its stderr, no table" "exit $rc" "$(cat "$T/err")"
fi
fresh "10.00 - 1.50" "$TWO_B" "$ONE_N" "$TWO_N"
goals ROUNDS=1 CPU=0 "$GOALS" "$T/base" "$T/new"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/goals.sh: $T/base/bench/bench printed no number under \"algorithm: 1M keys / 1 thr M/s\" (got '-'); its output:" "$T/err" &&
    ! grep -q '^quantity' "$T/out"; then
    ok "a run with no number in a column: exit 1 naming the column"
else
    bad "a run with no number in a column: exit 1 naming the column" "exit $rc" "$(cat "$T/err")"
fi
fresh "$ONE_B" "$TWO_B" "$ONE_N" "$TWO_N"
pp_vals "61.3 99 60.1;FAIL"
goals ROUNDS=2 CPU=0 "$GOALS" "$T/base" "$T/new"
NAME="a failed pingpong stops it before its round's runs: exit 1, the command and its stderr, no table"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/goals.sh: the pingpong failed (exit status 4): timeout 900 $T/pingpong 0 1 2000000" "$T/err" &&
    grep -qx '    pingpong: asked to fail' "$T/err" && [ "$(grep -c 'parts 2t' "$STUB_LOG")" = 2 ] &&
    ! grep -q '^quantity' "$T/out"; then
    ok "$NAME"
else
    bad "$NAME" "exit $rc" "$(cat "$T/err")" "calls: $(cat "$STUB_LOG")"
fi
for v in "fast 99 60.1" "0 99 60.1" "-3.5 99 60.1"; do
    fresh "$ONE_B" "$TWO_B" "$ONE_N" "$TWO_N"
    pp_vals "$v"
    goals ROUNDS=1 CPU=0 "$GOALS" "$T/base" "$T/new"
    NAME="a pingpong printing '${v%% *} ns one way': exit 1, its output shown"
    if [ "$rc" -eq 1 ] &&
        grep -qx "bench/goals.sh: the pingpong printed no 'N ns one way' with N > 0; its output:" "$T/err" &&
        grep -q "^    pingpong: CPUs 0,1, 2000000 round trips: ${v%% *} ns one way" "$T/err" &&
        ! grep -q '^quantity' "$T/out"; then
        ok "$NAME"
    else
        bad "$NAME" "exit $rc" "$(cat "$T/err")"
    fi
done
pp_vals "$PP"

# ---- bench/pingpong.c itself: built by the script, its line read -------------
NAME="PINGPONG unset: bench/pingpong.c built with cc, run on PAIR, its ns in the row"
if ! command -v cc >/dev/null; then
    skip "$NAME" "no cc"
elif ! taskset -c 0,1 true 2>/dev/null; then
    skip "$NAME" "cannot run on CPUs 0,1"
else
    fresh "10.00 1.00 1.50" "18.00 20.00" "10.50 1.70 0.80" "28.50 30.00"
    rc=0
    env -u PINGPONG ROUNDS=1 CPU=0 PAIR=0,1 PINGPONG_TRIPS=1000 "$GOALS" "$T/base" "$T/new" >"$T/out" 2>"$T/err" || rc=$?
    row=$(grep '^core to core, one way' "$T/out" | sed 's/  */ /g')
    ns=$(printf '%s\n' "$row" | awk -F' [|] ' '{ print $2 }')
    if [ "$rc" -eq 0 ] && grep -q "^+ cc -O2 -pthread -o [^ ]*/pingpong $ROOT/bench/pingpong.c$" "$T/out" &&
        grep -q "^+ timeout 900 [^ ]*/pingpong 0 1 1000$" "$T/out" &&
        printf '%s\n' "$row" |
        grep -Eq '^core to core, one way, ns \(0,1\) \| [0-9]+\.[0-9]{3} \| [0-9]+\.[0-9]{3} \| - \| - \| - \| [0-9]+\.[0-9]; batch medians [0-9]+\.[0-9]; cpu/wall % [0-9]+$' &&
        awk -v v="$ns" 'BEGIN { exit !(v + 0 > 0) }'; then
        ok "$NAME"
    else
        bad "$NAME" "exit $rc" "row: $row" "$(cat "$T/out")" "$(cat "$T/err")"
    fi
fi

finish
