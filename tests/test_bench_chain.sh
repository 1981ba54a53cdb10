#!/bin/sh
# test_bench_chain.sh -- bench/chain.sh, dependent misses a decision by
# time, without benchmarking anything: two stub build dirs whose
# bench/bench prints a run line and a details table with numbers set here,
# and a stub chase (CHASE=) printing set ns a load.  Checked: the argument
# errors (exit 2, or 1 with the missing piece named, before any run), the
# order of the runs (builds alternating, then the two chases, each round),
# the commands printed, the medians, ns and misses of the table and each
# round's values, a run that fails or prints no number, and -- with CHASE
# unset -- bench/chase.c built and its line read (over 1 MB, 1000 loads).
# No timing is asserted.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
CHAIN=$ROOT/bench/chain.sh

# stub DIR: DIR/bench/bench, printing bench/bench's run line (to stderr, as
# it does) and details row with the next line of DIR/vals ("HOT MANY": M/s);
# a line "FAIL" exits 3, "JUNK" prints no run line; every call is logged
stub() {
    mkdir -p "$1/bench"
    cat >"$1/bench/bench" <<'EOF'
#!/bin/sh
d=$(cd "$(dirname "$0")/.." && pwd)
echo "$(basename "$d") $*" >>"$STUB_LOG"
n=$(($(cat "$d/n" 2>/dev/null || echo 0) + 1))
echo "$n" >"$d/n"
line=$(sed -n "${n}p" "$d/vals")
if [ "$line" = FAIL ] || [ -z "$line" ]; then echo "stub: asked to fail" >&2; exit 3; fi
if [ "$line" = JUNK ]; then echo "stub: no numbers today"; exit 0; fi
# shellcheck disable=SC2086 # the numbers, one word each
set -- $line
echo "sluice bench: 1.00 s per run, best of 1; 1000 hot keys, 1000000 many keys"
printf '  run %-16s hot %6.2f  many %6.2f  2thr hot %6.2f / %6.2f  many %6.2f  batched hot %6.2f  many %6.2f M/s\n' \
    token-bucket "$1" "$2" -1 -1 -1 -1 -1 >&2
cat <<TABLE

details          |      2 thr hot M/s | 2 thr many |      1 thr M/s | fill M/s |     1thr M/CPU-s | cpu/wall % (min thread)
                 |  shared: agg (min) |    min M/s |  rec locks h/m |     many |       hot / many | hot1 many1 hot2 many2
token-bucket     |                  - |          - |  -1.00 / -1.00 |     2.00 |      0.00 / 0.00 |  100    97    0     0
TABLE
EOF
    chmod +x "$1/bench/bench"
}
# the stub chase: "chase MB LOADS" logged; prints the next line of
# $T/dram.vals (MB 256) or $T/l3.vals (any other MB) as its ns a load
cat >"$T/chase" <<'EOF'
#!/bin/sh
echo "chase $*" >>"$STUB_LOG"
if [ "$1" = 256 ]; then f=dram; else f=l3; fi
n=$(($(cat "$CHASE_DIR/n.$f" 2>/dev/null || echo 0) + 1))
echo "$n" >"$CHASE_DIR/n.$f"
ns=$(sed -n "${n}p" "$CHASE_DIR/$f.vals")
if [ "$ns" = FAIL ] || [ -z "$ns" ]; then echo "chase: asked to fail" >&2; exit 4; fi
echo "chase: $1 MB, 4194304 lines, $2 dependent loads, 4 KB pages: $ns ns/load, cpu/wall 99 % (ended on line 7)"
EOF
chmod +x "$T/chase"
CHASE_DIR=$T
STUB_LOG=$T/calls
export STUB_LOG CHASE_DIR

# fresh A_VALS B_VALS DRAM L3: stub builds $T/a and $T/b and the chase's
# values (lines separated by ;)
fresh() {
    rm -rf "$T/a" "$T/b" "$T"/n.*
    stub "$T/a"
    stub "$T/b"
    printf '%s\n' "$1" | tr ';' '\n' >"$T/a/vals"
    printf '%s\n' "$2" | tr ';' '\n' >"$T/b/vals"
    printf '%s\n' "$3" | tr ';' '\n' >"$T/dram.vals"
    printf '%s\n' "$4" | tr ';' '\n' >"$T/l3.vals"
    : >"$STUB_LOG"
}
# chain ENV... ARGS...: runs bench/chain.sh; status in $rc, $T/out, $T/err
chain() {
    rc=0
    env CHASE="$T/chase" "$@" >"$T/out" 2>"$T/err" || rc=$?
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

# a: hot 20 25 10 M/s = 50 40 100 ns (median 50); 1M 5 4 6.4 M/s = 200 250
# 156.25 ns (median 200); b: hot 50 ns, 1M 400 ns every round; DRAM 150 100
# 200 ns (median 150): a (200 - 50) / 150 = 1.00, b (400 - 50) / 150 = 2.33
A="20 5;25 4;10 6.4"
B="20 2.5;20 2.5;20 2.5"
DRAM="150;100;200"
L3="12;14;11"

# ---- arguments -------------------------------------------------------------
fresh "$A" "$B" "$DRAM" "$L3"
chain "$CHAIN"
expect "no argument: usage, exit 2" 2 \
    "usage: bench/chain.sh BUILD [BUILD...]   (environment: ROUNDS CPU CHASE_MB L3_MB LOADS CHASE)"
for r in 0 -1 abc 1.5 100; do
    chain ROUNDS=$r "$CHAIN" "$T/a" "$T/b"
    expect "ROUNDS=$r refused, exit 2" 2 "bench/chain.sh: ROUNDS must be a count of 1 to 99, not '$r'"
done
chain CPU=0,1 "$CHAIN" "$T/a"
expect "CPU=0,1 refused, exit 2" 2 "bench/chain.sh: CPU must be one CPU number, not '0,1'"
chain LOADS=0 "$CHAIN" "$T/a"
expect "LOADS=0 refused, exit 2" 2 "bench/chain.sh: LOADS must be a count of 1 to 9999999999, not '0'"
chain "$CHAIN" "$T/a" "$T/nothere"
expect "missing build dir named, exit 1" 1 "bench/chain.sh: no build dir $T/nothere"
rm "$T/b/bench/bench"
chain "$CHAIN" "$T/a" "$T/b"
expect "missing BUILD/bench/bench named before any run" 1 \
    "bench/chain.sh: no $T/b/bench/bench (make build/bench/bench in its tree)"
fresh "$A" "$B" "$DRAM" "$L3"
rc=0
env CHASE="$T/nochase" "$CHAIN" "$T/a" >"$T/out" 2>"$T/err" || rc=$?
expect "CHASE not a program: named before any run" 1 \
    "bench/chain.sh: CHASE=$T/nochase is not an executable program"

# ---- a whole run on the stubs ----------------------------------------------
fresh "$A" "$B" "$DRAM" "$L3"
chain ROUNDS=3 CPU=0 LOADS=1000 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 0 ]; then ok "a run on the stubs exits 0"; else bad "a run on the stubs exits 0" "exit $rc: $(cat "$T/err")"; fi

want="a --algo token-bucket --parts hot,1m --seconds 1 --reps 1
b --algo token-bucket --parts hot,1m --seconds 1 --reps 1
chase 256 1000
chase 8 1000
b --algo token-bucket --parts hot,1m --seconds 1 --reps 1
a --algo token-bucket --parts hot,1m --seconds 1 --reps 1
chase 256 1000
chase 8 1000
a --algo token-bucket --parts hot,1m --seconds 1 --reps 1
b --algo token-bucket --parts hot,1m --seconds 1 --reps 1
chase 256 1000
chase 8 1000"
if [ "$(cat "$STUB_LOG")" = "$want" ]; then
    ok "runs alternate: a b, b a, a b; then the DRAM and L3 chases, each round"
else
    bad "runs alternate: a b, b a, a b; then the DRAM and L3 chases, each round" "got:" "$(cat "$STUB_LOG")"
fi

ba="+ timeout 300 taskset -c 0 $T/a/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1"
bb="+ timeout 300 taskset -c 0 $T/b/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1"
ch="+ timeout 120 taskset -c 0 $T/chase 256 1000
+ timeout 120 taskset -c 0 $T/chase 8 1000"
want="$ba
$bb
$ch
$bb
$ba
$ch
$ba
$bb
$ch"
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

want="build | hot M/s | 1M M/s | ns hot | ns 1M | DRAM ns | misses by time
$T/a | 20.00 | 5.00 | 50.0 | 200.0 | 150.0 | 1.00
$T/b | 20.00 | 2.50 | 50.0 | 400.0 | 150.0 | 2.33"
# compare with the columns' padding squeezed: the numbers are what matter
squeeze() { sed 's/  */ /g'; }
got=$(sed -n '/^build /,/^misses by time =/p' "$T/out" | sed '$d' | grep -v '^-*-+-')
if [ "$(printf '%s\n' "$got" | squeeze)" = "$(printf '%s\n' "$want" | squeeze)" ]; then
    ok "table: medians of M/s and ns, DRAM ns, misses by time (a 1.00, b 2.33)"
else
    bad "table: medians of M/s and ns, DRAM ns, misses by time (a 1.00, b 2.33)" "got:" "$got" "want:" "$want"
fi
if grep -qx 'misses by time = (ns 1M - ns hot) / DRAM ns, of the medians; DRAM ns: a dependent load in a 256 MB chase on 4 KB pages (1000 loads), median 150.0 ns; L3 (8 MB): median 12.0 ns' "$T/out"; then
    ok "the formula, the chase's size and the L3 median said under the table"
else
    bad "the formula, the chase's size and the L3 median said under the table" "$(cat "$T/out")"
fi

# each round's own quotient: a (200-50)/150, (250-40)/100, (156.25-100)/200;
# b (400-50)/150, /100, /200; cpu/wall: the stub's 97 (min of 100, 97) / 99
want="1 $T/a 20.00 5.00 50.0 200.0 150.0 1.00 97 / 99
1 $T/b 20.00 2.50 50.0 400.0 150.0 2.33 97 / 99
2 $T/b 20.00 2.50 50.0 400.0 100.0 3.50 97 / 99
2 $T/a 25.00 4.00 40.0 250.0 100.0 2.10 97 / 99
3 $T/a 10.00 6.40 100.0 156.2 200.0 0.28 97 / 99
3 $T/b 20.00 2.50 50.0 400.0 200.0 1.75 97 / 99"
got=$(sed -n '/^round |/,$p' "$T/out" | sed '1d;$d' | grep -v '^-*-+-' | sed 's/  */ /g; s/ | / /g')
if [ "$got" = "$want" ]; then
    ok "round by round: each run's values, the round's own misses, cpu/wall"
else
    bad "round by round: each run's values, the round's own misses, cpu/wall" "got:" "$got" "want:" "$want"
fi
if [ "$(tail -n 1 "$T/out")" = "L3 ns, round by round: 12.0 14.0 11.0" ]; then
    ok "L3 ns round by round"
else
    bad "L3 ns round by round" "got: $(tail -n 1 "$T/out")"
fi

# ---- a run that fails, or prints no number ----------------------------------
fresh "$A" "20 2.5;FAIL" "$DRAM" "$L3"
chain ROUNDS=2 CPU=0 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/chain.sh: the run of $T/b/bench/bench failed (exit status 3): timeout 300 taskset -c 0 $T/b/bench/bench --algo token-bucket --parts hot,1m --seconds 1 --reps 1" "$T/err" &&
    grep -qx '    stub: asked to fail' "$T/err" && [ "$(grep -c . "$STUB_LOG")" = 5 ] &&
    ! grep -q '^build ' "$T/out"; then
    ok "a failed bench run stops it: exit 1, the command and its output, no table"
else
    bad "a failed bench run stops it: exit 1, the command and its output, no table" "exit $rc" "$(cat "$T/err")"
fi
fresh "JUNK" "$B" "$DRAM" "$L3"
chain ROUNDS=1 CPU=0 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/chain.sh: $T/a/bench/bench printed no '  run token-bucket  hot X  many Y' line with X and Y > 0; its output:" "$T/err" &&
    grep -qx '    stub: no numbers today' "$T/err" && ! grep -q '^build ' "$T/out"; then
    ok "a bench run without its run line: exit 1, its output shown"
else
    bad "a bench run without its run line: exit 1, its output shown" "exit $rc" "$(cat "$T/err")"
fi
fresh "20 0" "$B" "$DRAM" "$L3"
chain ROUNDS=1 CPU=0 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 1 ] && grep -q "^bench/chain.sh: $T/a/bench/bench printed no '  run token-bucket" "$T/err"; then
    ok "a run line with 0 M/s refused (no division by zero)"
else
    bad "a run line with 0 M/s refused (no division by zero)" "exit $rc" "$(cat "$T/err")"
fi
fresh "$A" "$B" "150" "FAIL"
chain ROUNDS=1 CPU=0 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/chain.sh: the chase over 8 MB ($T/chase) failed (exit status 4): timeout 120 taskset -c 0 $T/chase 8 20000000" "$T/err" &&
    ! grep -q '^build ' "$T/out"; then
    ok "a failed chase stops it: exit 1, the command named"
else
    bad "a failed chase stops it: exit 1, the command named" "exit $rc" "$(cat "$T/err")"
fi
fresh "$A" "$B" "fast" "12"
chain ROUNDS=1 CPU=0 "$CHAIN" "$T/a" "$T/b"
if [ "$rc" -eq 1 ] &&
    grep -qx "bench/chain.sh: the chase over 256 MB printed no 'N ns/load' with N > 0; its output:" "$T/err"; then
    ok "a chase without its number: exit 1, its output shown"
else
    bad "a chase without its number: exit 1, its output shown" "exit $rc" "$(cat "$T/err")"
fi

# ---- bench/chase.c itself: built by the script, its line read ---------------
if command -v cc >/dev/null; then
    fresh "$A" "$B" "$DRAM" "$L3"
    rc=0
    env -u CHASE CHASE_MB=1 L3_MB=1 LOADS=1000 ROUNDS=1 CPU=0 "$CHAIN" "$T/a" >"$T/out" 2>"$T/err" || rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^+ cc -O2 -o [^ ]*/chase $ROOT/bench/chase.c$" "$T/out" &&
        grep -q "^+ timeout 120 taskset -c 0 [^ ]*/chase 1 1000$" "$T/out" &&
        squeeze <"$T/out" | grep -q "^$T/a | 20.00 | 5.00 | 50.0 | 200.0 | [0-9][0-9.]* | -*[0-9][0-9.]*$"; then
        ok "CHASE unset: bench/chase.c built with cc -O2, run, its ns a load read"
    else
        bad "CHASE unset: bench/chase.c built with cc -O2, run, its ns a load read" "exit $rc" \
            "$(cat "$T/out")" "$(cat "$T/err")"
    fi
else
    skip "CHASE unset: bench/chase.c built with cc -O2, run, its ns a load read" "no cc"
fi

finish
