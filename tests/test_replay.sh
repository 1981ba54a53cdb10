#!/bin/sh
# test_replay.sh -- `sluicectl replay` end to end (SPEC sections 5 and 6).
#
#   - every vector file of $SLUICE_SPEC_DIR/vectors/: the request parts fed to
#     `sluicectl replay <its args>` give exactly the expected parts -- from
#     standard input, from a FILE, and reformatted (tabs, CRLF, comments, blank
#     lines, no final newline);
#   - bad options: exit status 2, `sluicectl: <what is wrong>`, nothing on stdout;
#   - malformed lines: exit status 2, `sluicectl: line N: <what is wrong>`, and
#     every line before N answered exactly as a run of those lines alone;
#   - large inputs across read-block boundaries, pipes vs files, --summary,
#     --max-memory, and that every key is remembered by default.
#
# Runs against $SLUICE_BUILD/sluicectl (tests/run.sh runs it for build/ and
# build/asan/).  Prints one line per check; exits 1 if any failed.
# Argument lists are kept in variables and split on purpose:
# shellcheck disable=SC2086
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
SPEC=${SLUICE_SPEC_DIR:-}
need_sluice
if [ -z "$SPEC" ] || [ ! -d "$SPEC/vectors" ]; then
    echo "FAIL  SLUICE_SPEC_DIR is not set to the spec folder (got '$SPEC'); tests/run.sh sets it"
    exit 1
fi

# ---- the spec's vectors --------------------------------------------------

# same NAME WANT GOT RC: the run exited 0 and printed exactly WANT.
same() {
    if [ "$4" -eq 0 ] && cmp -s "$2" "$3"; then
        ok "$1"
    else
        bad "$1" "exit status $4" "$(head -c 2000 "$T/err" 2>/dev/null)" \
            "$(diff "$2" "$3" | head -20)"
    fi
}

nvec=0
for f in "$SPEC"/vectors/*.txt; do
    [ -e "$f" ] || continue
    nvec=$((nvec + 1))
    name=$(basename "$f" .txt)
    args=$(sed -n 's/^# args:[[:space:]]*//p' "$f")
    if [ -z "$args" ]; then
        bad "vector $name" "no '# args:' line"
        continue
    fi
    grep -v '^#' "$f" | grep '|' | sed 's/[[:space:]]*|.*$//' >"$T/req"
    grep -v '^#' "$f" | grep '|' | sed 's/^.*|[[:space:]]*//; s/[[:space:]]*$//' >"$T/want"

    # shellcheck disable=SC2086
    "$SLUICE" replay $args <"$T/req" >"$T/got" 2>"$T/err"
    same "vector $name (stdin)" "$T/want" "$T/got" $?

    # shellcheck disable=SC2086
    "$SLUICE" replay $args "$T/req" >"$T/got" 2>"$T/err"
    same "vector $name (FILE)" "$T/want" "$T/got" $?

    # tabs, CRLF, comment and blank lines between requests, no final newline
    awk '{ gsub(/ /, "\t"); print "# a comment 0 k"; print ""; print "  " $0 "\r" }' \
        "$T/req" >"$T/messy0"
    printf '%s' "$(cat "$T/messy0")" >"$T/messy"
    # shellcheck disable=SC2086
    "$SLUICE" replay $args <"$T/messy" >"$T/got" 2>"$T/err"
    same "vector $name (tabs, CRLF, comments, no final newline)" "$T/want" "$T/got" $?
done
if [ "$nvec" -lt 1 ]; then
    bad "vector files" "none in $SPEC/vectors"
fi

# ---- bad options ---------------------------------------------------------

# opt_error NAME PHRASE ARGS...: exit 2, "sluicectl: ...PHRASE..." on stderr, no stdout.
opt_error() {
    name=$1
    phrase=$2
    shift 2
    printf '0 k\n1 k\n' | "$SLUICE" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 2 ] && [ ! -s "$T/out" ] && grep -q '^sluicectl: ' "$T/err" &&
        grep -qF -- "$phrase" "$T/err"; then
        ok "option error: $name -> $(head -n 1 "$T/err")"
    else
        bad "option error: $name (sluicectl $*)" "want exit 2, '$phrase' on stderr, empty stdout" \
            "got exit $rc, stderr: $(head -c 500 "$T/err")" "stdout: $(head -c 200 "$T/out")"
    fi
}

R="replay --algo token-bucket --window 1000"
# shellcheck disable=SC2086
{
    opt_error "bad algo" "unknown algorithm 'tokenbucket'" replay --algo tokenbucket --limit 5 --window 1000
    opt_error "limit 0" "limit must be an integer between 1 and 1000000000000, got '0'" $R --limit 0
    opt_error "limit -1" "limit must be an integer between 1 and 1000000000000, got '-1'" $R --limit -1
    opt_error "limit 1e13" "limit must be an integer between 1 and 1000000000000, got '1e13'" $R --limit 1e13
    opt_error "limit 10^12+1" "limit must be an integer" $R --limit 1000000000001
    opt_error "limit abc" "limit must be an integer between 1 and 1000000000000, got 'abc'" $R --limit abc
    opt_error "limit empty" "limit must be an integer" $R --limit ''
    opt_error "window 0" "window must be a duration" replay --algo gcra --limit 5 --window 0
    opt_error "window 10x" "got '10x'" replay --algo gcra --limit 5 --window 10x
    opt_error "window -5s" "window must be a duration" replay --algo gcra --limit 5 --window -5s
    opt_error "window 11y" "window must be a duration" replay --algo gcra --limit 5 --window 11y
    opt_error "precision not dividing window" "window 1000 ms is not divisible by precision 3" \
        replay --algo sliding-buckets --limit 4 --window 1000 --precision 3
    opt_error "default precision not dividing window" "not divisible by precision 10" \
        replay --algo sliding-buckets --limit 4 --window 15
    opt_error "precision 0" "precision must be an integer between 1 and 65535" \
        replay --algo sliding-buckets --limit 4 --window 1000 --precision 0
    opt_error "precision on token-bucket" "--precision applies only to sliding-buckets" \
        $R --limit 5 --precision 10
    opt_error "burst on fixed-window" "--burst applies only to token-bucket, gcra and leaky-bucket" \
        replay --algo fixed-window --limit 5 --window 1000 --burst 10
    opt_error "burst 0" "burst must be an integer between 1" $R --limit 5 --burst 0
    opt_error "log-rejected on gcra" "--log-rejected applies only to sliding-log" \
        replay --algo gcra --limit 5 --window 1000 --log-rejected
    opt_error "unknown option" "unknown option '--bogus'" $R --limit 5 --bogus
    opt_error "unknown short option" "unknown option '-x'" $R --limit 5 -x
    opt_error "option without value" "option '--limit' needs a value" $R --limit
    opt_error "flag with a value" "takes no value" $R --limit 5 --summary=yes
    opt_error "missing --algo" "missing --algo" replay --limit 5 --window 1000
    opt_error "missing --limit" "missing --limit" $R
    opt_error "missing --window" "missing --window" replay --algo gcra --limit 5
    opt_error "threads 0" "threads must be an integer between 1 and 64, got '0'" $R --limit 5 --threads 0
    opt_error "max-memory junk" "--max-memory must be a number of bytes" $R --limit 5 --max-memory 12q
    opt_error "max-memory unknown suffix" "--max-memory must be a number of bytes" $R --limit 5 --max-memory 1kib
    opt_error "max-memory over 2^50" "--max-memory must be a number of bytes up to 2^50" $R --limit 5 --max-memory 1048577g
    opt_error "two files" "only one FILE" $R --limit 5 /dev/null /dev/null
    opt_error "missing file" "cannot open '$T/nonexistent'" $R --limit 5 "$T/nonexistent"
    opt_error "unknown command" "unknown command 'replya'" replya --algo gcra
}
"$SLUICE" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -q 'usage: sluicectl' "$T/err"; then ok "no command: usage, exit 2"; else bad "no command" "exit $rc"; fi

for a in --help -h; do
    "$SLUICE" replay "$a" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q '^usage: sluicectl replay --algo ALGO --limit L --window W' "$T/out"; then
        ok "sluicectl replay $a"
    else
        bad "sluicectl replay $a" "exit $rc"
    fi
done
if "$SLUICE" --help >"$T/out" 2>&1 && grep -q 'replay' "$T/out"; then ok "sluicectl --help"; else bad "sluicectl --help"; fi
v=$("$SLUICE" --version)
case $v in "sluicectl "[0-9]*.[0-9]*) ok "sluicectl --version: $v" ;; *) bad "sluicectl --version" "got '$v'" ;; esac

# The old name, for one release: build/sluice runs sluicectl, with the same
# output and status, and one line more on stderr saying what it is called now.
OLD_NOTE="sluice: note: this command is now called sluicectl; the name 'sluice' goes away in the next release"
printf '0 k\n0 k\nnot a line\n' >"$T/old.in"
"$SLUICE" replay --algo gcra --limit 1 --window 1s "$T/old.in" >"$T/new.out" 2>"$T/new.err"
new_rc=$?
if [ -L "$BUILD/sluice" ]; then
    "$BUILD/sluice" replay --algo gcra --limit 1 --window 1s "$T/old.in" >"$T/old.out" 2>"$T/old.err"
    old_rc=$?
    { echo "$OLD_NOTE"; cat "$T/new.err"; } >"$T/old.want"
    if [ "$old_rc" -eq "$new_rc" ] && [ "$new_rc" -eq 2 ] && cmp -s "$T/old.out" "$T/new.out" &&
        cmp -s "$T/old.err" "$T/old.want"; then
        ok "build/sluice (old name): sluicectl's answers and status, and the note first on stderr"
    else
        bad "build/sluice (old name): exit $old_rc (sluicectl $new_rc)" "stderr: $(cat "$T/old.err")" \
            "stdout: $(cat "$T/old.out")"
    fi
    if [ "$("$BUILD/sluice" --version 2>"$T/old.err")" = "$v" ] && [ "$(cat "$T/old.err")" = "$OLD_NOTE" ]; then
        ok "build/sluice --version: '$v' and the one-line note"
    else
        bad "build/sluice --version" "$(cat "$T/old.err")"
    fi
else
    bad "no $BUILD/sluice: the old name must keep working in the build tree for this release"
fi
if grep -q '^sluicectl: line 3: ' "$T/new.err" && ! grep -q 'sluice: note' "$T/new.err"; then
    ok "sluicectl itself prints no note"
else
    bad "sluicectl prints: $(cat "$T/new.err")"
fi

# ---- malformed lines -----------------------------------------------------

LINE_ARGS="replay --algo fixed-window --limit 2 --window 1000"
# Five good lines (two are a comment and a blank line) come before the bad one,
# which is line 6; a good line after it must not be answered.
printf '# a trace\n0 a\n1 a\n\n2 b 3\n' >"$T/head"
# shellcheck disable=SC2086
"$SLUICE" $LINE_ARGS <"$T/head" >"$T/head.want" 2>"$T/err" || bad "good head" "$(cat "$T/err")"

# line_error NAME N PHRASE FILE: FILE is answered up to line N-1, then exit 2
# with "sluicectl: line N: ...PHRASE..." on stderr.
line_error() {
    name=$1
    n=$2
    phrase=$3
    input=$4
    head -n $((n - 1)) "$input" >"$T/before"
    # shellcheck disable=SC2086
    "$SLUICE" $LINE_ARGS <"$T/before" >"$T/want" 2>/dev/null
    # shellcheck disable=SC2086
    "$SLUICE" $LINE_ARGS <"$input" >"$T/got" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 2 ] && cmp -s "$T/want" "$T/got" &&
        grep -q "^sluicectl: line $n: " "$T/err" && grep -qF -- "$phrase" "$T/err" &&
        [ "$(wc -l <"$T/err")" -eq 1 ]; then
        ok "bad line: $name -> $(head -c 150 "$T/err")"
    else
        bad "bad line: $name" "want exit 2, 'sluicectl: line $n: ...$phrase...', the lines before answered" \
            "got exit $rc, stderr: $(head -c 300 "$T/err")" \
            "stdout: $(wc -l <"$T/got") lines, want $(wc -l <"$T/want"): $(diff "$T/want" "$T/got" | head -5)"
    fi
}

# with_bad NAME PHRASE: reads the bad line's bytes on stdin; builds head + bad
# line + a good line and checks it.
with_bad() {
    { cat "$T/head"; cat; printf '\n3 a\n'; } >"$T/in"
    line_error "$1" 6 "$2" "$T/in"
}
key513=$(printf '%0513d' 0 | tr 0 k)
key512=$(printf '%0512d' 0 | tr 0 k)

printf '5' | with_bad "missing key" "missing key"
printf '5   \t ' | with_bad "missing key (trailing blanks)" "missing key"
printf '5 %s' "$key513" | with_bad "key of 513 bytes" "key is longer than 512 bytes"
printf '5 k x' | with_bad "cost x" "cost 'x' is not an integer"
printf '5 k -1' | with_bad "cost -1" "cost '-1' is out of range"
printf '5 k 1000000000001' | with_bad "cost 10^12+1" "cost '1000000000001' is out of range"
printf '5 k 2.5' | with_bad "cost 2.5" "cost '2.5' is not an integer"
printf '5 k 1 extra' | with_bad "extra field" "unexpected extra field 'extra'"
printf '5 k\000 1' | with_bad "NUL byte in line" "NUL byte at column 4"
printf '\001\377\376\033[0m\002\003' | with_bad "binary junk" "control byte 0x01 at column 1"
printf '5 k\r1' | with_bad "CR inside a line" "control byte 0x0d"
printf 'abc k' | with_bad "time abc" "time 'abc' is not an integer"
printf '1.5 k' | with_bad "time 1.5" "time '1.5' is not an integer"
printf '4611686018427387904 k' | with_bad "time 2^62" "time '4611686018427387904' is out of range"
printf '99999999999999999999999999 k' | with_bad "time 10^26" "is out of range"
printf '5 %s' "$(printf '%070000d' 0)" | with_bad "line of 70000 bytes" "line is longer than 65536 bytes"
printf '%70000s1 k' '' | with_bad "70000 blanks" "line is longer than 65536 bytes"

# the first line is bad: nothing answered
printf '5 k x\n0 a\n' >"$T/in"
line_error "first line bad" 1 "cost 'x'" "$T/in"
# the last line is bad and has no newline: still a line
printf '0 a\n1 a\n5 k x' >"$T/in"
line_error "last line bad, no newline" 3 "cost 'x'" "$T/in"
# a bad line far into the input, past several read blocks
awk 'BEGIN { for (i = 0; i < 250000; i++) printf "%d user:%d\n", i, i % 1000; print "x y"; print "1 a" }' >"$T/in"
line_error "line 250001 of a large input" 250001 "time 'x' is not an integer" "$T/in"

# ---- accepted edge cases -------------------------------------------------

# expect NAME WANT ARGS...: stdin from $T/in; exit 0 and stdout exactly WANT.
expect() {
    name=$1
    want=$2
    shift 2
    "$SLUICE" "$@" <"$T/in" >"$T/got" 2>"$T/err"
    rc=$?
    printf '%s\n' "$want" >"$T/want"
    [ -z "$want" ] && : >"$T/want"
    same "$name" "$T/want" "$T/got" "$rc"
}

printf '0 k\n0 k' >"$T/in"
expect "final line without newline is answered" "1 2 1 0 1000 0
1 2 0 0 1000 0" $LINE_ARGS
printf '5 %s\n5 %s\n5 %s\n' "$key512" "$key512" "$key512" >"$T/in"
expect "key of 512 bytes" "1 2 1 0 995 0
1 2 0 0 995 0
0 2 0 995 995 0" $LINE_ARGS
printf -- '-1500 k\n-1001 k\n-1000 k\n' >"$T/in"
expect "negative times" "1 2 1 0 500 0
1 2 0 0 1 0
1 2 1 0 1000 0" $LINE_ARGS
printf '0 caf\303\251\n0 caf\303\251 0\n0 caf\303\251 2\n' >"$T/in"
expect "UTF-8 key, cost 0 and 2" "1 2 1 0 1000 0
1 2 1 0 1000 0
0 2 1 1000 1000 0" $LINE_ARGS
: >"$T/in"
expect "empty input" "" $LINE_ARGS
printf '\n# only comments\n   \n' >"$T/in"
expect "only comments and blank lines" "" $LINE_ARGS
printf '0 k\n500 k\n999 k\n1000 k\n' >"$T/in"
"$SLUICE" replay --algo gcra --limit 2 --window 1000 <"$T/in" >"$T/w1" 2>"$T/err"
expect "--window 1s equals --window 1000, --opt=value form" "$(cat "$T/w1")" \
    replay --algo=gcra --limit=2 --window=1s
expect "FILE '-' is standard input" "$(cat "$T/w1")" replay --algo gcra --limit 2 --window 1000 -

# ---- large inputs ----------------------------------------------------------

# 300000 requests over 5000 keys (about 6 MB: several read blocks); a pipe
# (short reads) and a file (long reads) must give the same answers.
awk 'BEGIN { s = 12345; for (i = 0; i < 300000; i++) { s = (s * 16807) % 2147483647;
    printf "%d user:%d %d\n", i * 3, s % 5000, s % 3 } }' >"$T/big"
BIG_ARGS="replay --algo sliding-log --limit 5 --window 10s"
# shellcheck disable=SC2086
"$SLUICE" $BIG_ARGS "$T/big" >"$T/big.file" 2>"$T/err"
rc1=$?
# shellcheck disable=SC2086
cat "$T/big" | "$SLUICE" $BIG_ARGS >"$T/big.pipe" 2>"$T/err"
rc2=$?
n=$(wc -l <"$T/big.file")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$n" -eq 300000 ] && cmp -s "$T/big.file" "$T/big.pipe"; then
    ok "300000 lines: file and pipe give the same 300000 answers"
else
    bad "300000 lines, file vs pipe" "exit $rc1/$rc2, $n lines" "$(cat "$T/err")"
fi

# --summary: stdout unchanged, a summary on stderr
# shellcheck disable=SC2086
"$SLUICE" $BIG_ARGS --summary "$T/big" >"$T/big.sum" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && cmp -s "$T/big.file" "$T/big.sum" && grep -q 'requests *300000' "$T/err" &&
    grep -q 'keys *5000' "$T/err" && grep -q 'top 10 keys by denied requests' "$T/err"; then
    ok "--summary leaves stdout alone, reports totals on stderr"
else
    bad "--summary" "exit $rc" "$(head -20 "$T/err")"
fi
allowed=$(grep -c '^1 ' "$T/big.file")
if grep -q "allowed *$allowed " "$T/err"; then
    ok "--summary counts the allowed answers ($allowed)"
else
    bad "--summary allowed count" "want $allowed" "$(head -5 "$T/err")"
fi

# The default --threads follows the CPUs the process may run on (its affinity
# mask, as taskset sets it): pinned to one CPU, one thread, as --summary's
# time line says.  An explicit --threads wins, and --max-memory means one.
# threads_of ARGS...: the thread count --summary reports for 4000 requests.
threads_of() {
    awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%d k%d\n", i, i % 50 }' |
        "$@" --summary 2>&1 >/dev/null | sed -n 's/^  time .*, \([0-9]*\) threads*$/\1/p'
}
R1="$SLUICE replay --algo fixed-window --limit 5 --window 1s"
cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
if ! command -v taskset >/dev/null 2>&1; then
    bad "default threads under taskset" "no taskset (util-linux)"
else
    # shellcheck disable=SC2086
    pinned=$(threads_of taskset -c "$cpu" $R1)
    # shellcheck disable=SC2086
    pinned3=$(threads_of taskset -c "$cpu" $R1 --threads 3)
    if [ "$pinned" = 1 ] && [ "$pinned3" = 3 ]; then
        ok "taskset -c $cpu: 1 thread by default, --threads 3 gives 3 (--summary)"
    else
        bad "threads under taskset -c $cpu" "want 1 and 3, got '$pinned' and '$pinned3'"
    fi
fi
# shellcheck disable=SC2086
mm=$(threads_of $R1 --threads 3 --max-memory 1m)
if [ "$mm" = 1 ]; then
    ok "--max-memory: 1 thread (--summary)"
else
    bad "--max-memory threads" "want 1, got '$mm'"
fi

# Every key is remembered: key 'first' at t=0, 200000 other keys, then
# 'first' again in the same window must be denied (limit 1).
awk 'BEGIN { print "0 first"; for (i = 0; i < 200000; i++) printf "1 k%d\n", i; print "2 first" }' >"$T/in"
"$SLUICE" replay --algo fixed-window --limit 1 --window 1h <"$T/in" >"$T/got" 2>"$T/err"
rc=$?
last=$(tail -n 1 "$T/got")
if [ $rc -eq 0 ] && [ "$last" = "0 1 0 3599998 3599998 0" ]; then
    ok "every key remembered without --max-memory (200001 keys)"
else
    bad "every key remembered" "exit $rc, last answer '$last'" "$(cat "$T/err")"
fi

# --max-memory bounds the store: the run completes, one answer per line.
"$SLUICE" replay --algo fixed-window --limit 1 --window 1h --max-memory 256k <"$T/in" >"$T/got" 2>"$T/err"
rc=$?
n=$(wc -l <"$T/got")
if [ $rc -eq 0 ] && [ "$n" -eq 200002 ]; then
    ok "--max-memory 256k: 200002 answers ($(head -c 120 "$T/err" | tr '\n' ' '))"
else
    bad "--max-memory 256k" "exit $rc, $n answers" "$(head -c 500 "$T/err")"
fi

finish
