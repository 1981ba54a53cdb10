#!/bin/sh
# tests/run.sh -- builds and runs every test of sluice, counts every test
# CASE, and ends with the line "N passed, N failed" (", N skipped" added
# when any were skipped) alone on the last line; exits nonzero iff anything
# failed.  docs/testing.md describes it.
#
#   1. finds the spec (SLUICE_SPEC_DIR, else <repo>/../shared/spec, else
#      /work/shared/spec) and exports SLUICE_SPEC_DIR; none found is a failure
#   2. builds three variants (a failed build is one failure and says which; a
#      good one is printed with its time, not counted):
#        plain  build/        -O2
#        asan   build/asan/   ASan + UBSan
#        tsan   build/tsan/   ThreadSanitizer (the test binaries of the
#                             tsan C tests only)
#   3. runs, JOBS (default 2) at a time -- one more while an e2e suite runs,
#      never more than JOBS e2e suites (SLUICE_TEST_E2E_EXTRA, below) --,
#      each under `timeout` with no standard
#      input and its output in build/logs/<variant>_<test>.log, printed
#      together when it finishes:
#        plain/test_*   every C test (tests/test_*.c -> build/tests/test_*)
#        asan/test_*    every C test again
#        tsan/test_*    the C tests whose name contains "thread", test_store, and
#                       test_fit_model (which runs only its threaded cases there)
#        tests/test_*.sh  every shell test, once against build/ and once against
#                       build/asan/ (SLUICE_BUILD says which); a script with the
#                       line "# sluice-test: plain-only" runs against build/
#                       only, one with "# sluice-test: +tsan" also against
#                       build/tsan/
#                       a script with "# sluice-test: timeout=N" may run N
#                       seconds instead of SLUICE_TEST_TIMEOUT (a hang
#                       catch-all, never a timing assertion)
#      tests/lib.sh, tests/run.sh and tests/fuzz/fuzz.sh are helpers, not tests.
#   4. counts the cases of each test (tests/cases.awk): each cmocka case; each
#      "ok"/"FAIL"/"SKIP" line of a shell test; each "CASE" line of the Python
#      e2e suite; a test that exits nonzero without a failing case, times out,
#      or (cmocka, e2e) runs no case is one failure.  Under CI=true a skipped
#      case is a failure.  Prints the failed cases, the time of each layer,
#      then the count.
#
# Environment: SLUICE_TEST_TIMEOUT (seconds per test, default 600), JOBS
# (tests at a time and make -j, default 2), SLUICE_TEST_E2E_EXTRA (tests
# beside them while an e2e suite runs, default 1), SLUICE_SPEC_DIR, CI (true: skips
# fail), SLUICE_TEST_ONLY (space-separated shell patterns of test names, e.g.
# "plain/test_store */test_server_e2e": runs only those, and builds only
# their variants), SLUICE_TEST_VERBOSE=1 (print every case, not only the
# failed and skipped ones).
set -u

ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd) || exit 1
cd "$ROOT" || exit 1
TIMEOUT=${SLUICE_TEST_TIMEOUT:-600}
JOBS=${JOBS:-2}
case $JOBS in '' | *[!0-9]* | 0) JOBS=2 ;; esac
# An e2e suite spends much of its time waiting -- on sleeps between the
# halves of a command, on recv- and idle-timeouts and Redis's WAIT to
# expire, on servers starting and stopping (test_durability_wait: 2.5 s of
# CPU in 25 s) --, so while one runs, this many more tests run beside the
# JOBS (default 1; 0: JOBS at a time, whatever runs); the e2e suites
# themselves stay JOBS at a time (next_job).  Never a timing
# assertion: the suite passes beside a CPU hog on both cores.
E2E_EXTRA=${SLUICE_TEST_E2E_EXTRA:-1}
case $E2E_EXTRA in '' | *[!0-9]*) E2E_EXTRA=1 ;; esac
ONLY=${SLUICE_TEST_ONLY:-}
VERBOSE=${SLUICE_TEST_VERBOSE:-0}
CI_STRICT=0
[ "${CI:-}" = true ] && CI_STRICT=1
LOGS=$ROOT/build/logs
TIMES=$ROOT/build/test-times # each test's duration last time: longest first
rm -rf "$LOGS"
mkdir -p "$LOGS" || exit 1
STATE=$LOGS/.run # the runner's own files
mkdir -p "$STATE" || exit 1

passed=0
failed=0
skipped=0
FAILED_LIST=$STATE/failed # the failed cases' names, one a line
: >"$FAILED_LIST"

ms() { date +%s%3N; }
secs() { awk -v ms="$1" 'BEGIN { printf "%.1fs", ms / 1000 }'; }
T_START=$(ms)

# tally PASS|FAIL|SKIP NAME DETAIL: one case counted outside any test's log
# (the spec, a build)
tally() {
    case $1 in
        PASS) passed=$((passed + 1)) ;;
        SKIP) skipped=$((skipped + 1)) ;;
        *)
            failed=$((failed + 1))
            echo "$2" >>"$FAILED_LIST"
            ;;
    esac
    echo "$1  $2  ($3)"
}

# show_tail LOG: the end of a log, indented
show_tail() {
    if [ -s "$1" ]; then
        echo "      --- last lines of $1:"
        tail -n 40 "$1" | sed 's/^/      | /'
    fi
}

# ---- 1. the spec --------------------------------------------------------
spec=""
if [ -n "${SLUICE_SPEC_DIR:-}" ]; then
    spec=$SLUICE_SPEC_DIR
elif [ -d "$ROOT/../shared/spec" ]; then
    spec=$ROOT/../shared/spec
elif [ -d /work/shared/spec ]; then
    spec=/work/shared/spec
fi
if [ -n "$spec" ] && [ -d "$spec/vectors" ]; then
    SLUICE_SPEC_DIR=$(cd "$spec" && pwd)
    echo "spec: $SLUICE_SPEC_DIR ($(ls "$SLUICE_SPEC_DIR"/vectors | wc -l) vector files)"
else
    tally FAIL spec "no spec found: set SLUICE_SPEC_DIR, or put shared/spec beside the repo (tried '${spec:-<repo>/../shared/spec, /work/shared/spec}')"
    SLUICE_SPEC_DIR=${spec:-/nonexistent/shared/spec}
fi
export SLUICE_SPEC_DIR
[ "$CI_STRICT" = 1 ] && echo "CI=true: a skipped test case counts as a failure"
[ -n "$ONLY" ] && echo "only: $ONLY (SLUICE_TEST_ONLY)"

# ---- the plan: every test, one line "layer|name|kind|variant|path" ------
dir_of() { if [ "$1" = plain ]; then echo build; else echo "build/$1"; fi; }
selected() { # NAME: matches SLUICE_TEST_ONLY (or it is unset)
    [ -z "$ONLY" ] && return 0
    for p in $ONLY; do
        # shellcheck disable=SC2254
        case $1 in $p) return 0 ;; esac
    done
    return 1
}
PLAN=$STATE/plan
: >"$PLAN"
for v in plain asan tsan; do
    for src in tests/test_*.c; do
        [ -e "$src" ] || continue
        t=$(basename "$src" .c)
        if [ "$v" = tsan ]; then
            case $t in *thread* | test_store | test_fit_model) ;; *) continue ;; esac
        fi
        selected "$v/$t" && echo "$v C|$v/$t|c|$v|$(dir_of "$v")/tests/$t" >>"$PLAN"
    done
done
for sh in tests/test_*.sh; do
    [ -e "$sh" ] || continue
    t=$(basename "$sh" .sh)
    variants="plain asan"
    grep -q '^# sluice-test: plain-only' "$sh" && variants=plain
    grep -q '^# sluice-test: +tsan' "$sh" && variants="$variants tsan"
    for v in $variants; do
        case $t in
            *e2e*) layer="e2e $v" ;;
            test_fuzz_*) layer=fuzz ;;
            *) layer=shell ;;
        esac
        selected "$v/$t" && echo "$layer|$v/$t|sh|$v|$sh" >>"$PLAN"
    done
done

# ---- 2. builds ----------------------------------------------------------
TIMINGS=$STATE/timings # "layer|start ms|end ms|cases" per test or build
: >"$TIMINGS"
built=""
is_built() { case " $built " in *" $1 "*) return 0 ;; esac; return 1; }

for v in plain asan tsan; do
    cut -d'|' -f4 "$PLAN" | grep -qx "$v" || continue
    only= # TSan: only the test binaries that run under it (the plan's)
    case $v in
        plain) target="all tests" ;;
        tsan)
            target=tsan
            only="TSAN_TESTS=$(awk -F'|' '$3 == "c" && $4 == "tsan" { print $5 }' "$PLAN" | tr '\n' ' ')"
            ;;
        *) target=$v ;;
    esac
    log=$LOGS/build_$v.log
    t0=$(ms)
    # No stale test binary may pass for a fresh one: relink them all.
    for f in "$(dir_of "$v")"/tests/test_*; do
        case $f in *.o) ;; *) rm -f "$f" ;; esac
    done
    # shellcheck disable=SC2086
    if make -k -j"$JOBS" $target ${only:+"$only"} </dev/null >"$log" 2>&1; then
        echo "built $v ($(dir_of "$v")/) in $(secs $(($(ms) - t0)))"
    else
        tally FAIL "build/$v" "make $target failed after $(secs $(($(ms) - t0))); the tests that built still run"
        show_tail "$log"
    fi
    echo "builds|$t0|$(ms)|0" >>"$TIMINGS"
    [ -x "$(dir_of "$v")/sluicectl" ] && built="$built $v"
done

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

# ---- 3. the tests, JOBS at a time ---------------------------------------
# test_timeout SCRIPT: the seconds SCRIPT may run -- TIMEOUT, or more where
# it says "# sluice-test: timeout=N" (the e2e suite: hundreds of cases in
# one script).  Never less than TIMEOUT.
test_timeout() {
    n=$(sed -n 's/^# sluice-test: timeout=\([0-9][0-9]*\)$/\1/p' "$1" | head -n 1)
    if [ -n "$n" ] && [ "$n" -gt "$TIMEOUT" ]; then echo "$n"; else echo "$TIMEOUT"; fi
}
MAX_TIMEOUT=$TIMEOUT # the longest any test may take: bounds reap's wait
for sh in tests/test_*.sh; do
    [ -e "$sh" ] || continue
    t=$(test_timeout "$sh")
    [ "$t" -gt "$MAX_TIMEOUT" ] && MAX_TIMEOUT=$t
done

# start_job ID LAYER NAME KIND VARIANT PATH: runs one test in the background;
# it writes STATE/ID.rc ("status start-ms end-ms") last, which says it ended.
start_job() {
    id=$1 name=$3 kind=$4 v=$5 path=$6
    log=$LOGS/$(echo "$name" | tr '/ ' '__').log
    echo "$2|$name|$kind|$v|$path|$log" >"$STATE/$id.job"
    (
        t0=$(ms)
        why=""
        if [ "$kind" = c ] && [ ! -x "$path" ]; then
            why="not built: $path (see build/logs/build_$v.log)"
        elif [ "$kind" = sh ] && ! is_built "$v"; then
            why="$(dir_of "$v")/sluicectl not built (see build/logs/build_$v.log)"
        fi
        if [ -n "$why" ]; then
            echo "$why" >"$log"
            echo "$why" >"$STATE/$id.why"
            rc=126
        else
            if [ "$kind" = c ]; then
                timeout -k 10 "$TIMEOUT" "$path" </dev/null >"$log" 2>&1 &
            else
                timeout -k 10 "$(test_timeout "$path")" env SLUICE_ROOT="$ROOT" \
                    SLUICE_BUILD="$ROOT/$(dir_of "$v")" sh "$path" </dev/null >"$log" 2>&1 &
            fi
            echo $! >"$STATE/$id.pid"
            wait $!
            rc=$?
        fi
        echo "$rc $t0 $(ms)" >"$STATE/$id.rc.tmp" && mv "$STATE/$id.rc.tmp" "$STATE/$id.rc"
    ) </dev/null &
}

# finish_job ID: counts a finished test's cases and prints them
finish_job() {
    id=$1
    IFS='|' read -r layer name kind v path log <"$STATE/$id.job"
    read -r rc t0 t1 <"$STATE/$id.rc"
    took=$(secs $((t1 - t0)))
    if [ -s "$STATE/$id.why" ]; then
        why=$(cat "$STATE/$id.why")
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        why="timed out after ${took}"
    elif [ "$rc" -gt 128 ]; then
        why="killed by signal $((rc - 128)) after $took"
    else
        why="exit status $rc after $took"
    fi
    cases=$STATE/$id.cases
    awk -v kind="$kind" -v prefix="$name" -v rc="$rc" -v why="$why" -v ci="$CI_STRICT" \
        -f tests/cases.awk "$log" >"$cases"
    p=$(grep -c '^PASS' "$cases")
    f=$(grep -c '^FAIL' "$cases")
    s=$(grep -c '^SKIP' "$cases")
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    counts="$p passed"
    [ "$f" -gt 0 ] && counts="$counts, $f failed"
    [ "$s" -gt 0 ] && counts="$counts, $s skipped"
    if [ "$f" -gt 0 ]; then
        status=FAIL
    elif [ "$s" -gt 0 ]; then
        status=SKIP
    else
        status=PASS
    fi
    printf '%-4s  %-32s %-30s %s\n' "$status" "$name" "$counts" "$took"
    if [ "$VERBOSE" = 1 ]; then
        pat='.'
    else
        pat='^FAIL\|^SKIP'
    fi
    grep "$pat" "$cases" | awk -F'\t' '{ printf "      %s  %s%s\n", $1, $2, ($3 != "" ? "  (" $3 ")" : "") }'
    if [ "$f" -gt 0 ]; then
        grep '^FAIL' "$cases" | cut -f2 >>"$FAILED_LIST"
        show_tail "$log"
    fi
    echo "$layer|$t0|$t1|$((p + f + s))" >>"$TIMINGS"
    echo "$name $((t1 - t0))" >>"$STATE/times"
}

# Longest first (by last run's times, else e2e and fuzz first), so that the
# long tests do not start last.
ORDER=$STATE/order
awk -F'|' -v times="$TIMES" '
    BEGIN { while ((getline l < times) > 0) { split(l, a, " "); last[a[1]] = a[2] } }
    { d = ($2 in last) ? last[$2] : ($1 ~ /^e2e/ ? 600000 : $1 == "fuzz" ? 60000 : 0)
      printf "%d|%d|%s\n", d, NR, $0 }' "$PLAN" | sort -t'|' -k1,1nr -k2,2n | cut -d'|' -f3- >"$ORDER"

running="" # ids of the tests running now
nrunning=0
# reap: waits (bounded) until a running test ends, and finishes it
reap() {
    polls=0
    while [ "$polls" -lt $(((MAX_TIMEOUT + 60) * 5)) ]; do
        for id in $running; do
            [ -e "$STATE/$id.rc" ] || continue
            wait "$(cat "$STATE/$id.sub")" 2>/dev/null
            finish_job "$id"
            running=$(echo " $running " | sed "s/ $id / /")
            nrunning=$((nrunning - 1))
            return 0
        done
        polls=$((polls + 1))
        sleep 0.2
    done
    echo "run.sh: no test ended within ${MAX_TIMEOUT}s + 60s; stopping" >&2
    stop_all
    exit 2
}
stop_all() {
    for id in $running; do
        [ -s "$STATE/$id.pid" ] && kill -TERM "-$(cat "$STATE/$id.pid")" 2>/dev/null
    done
}
trap 'stop_all; echo "run.sh: interrupted; the running tests were stopped" >&2; exit 130' INT TERM

# next_job: the first test of PENDING that may start now, removed from it
# (its line on stdout; nothing if none may).  JOBS at a time, and
# E2E_EXTRA more while an e2e suite runs -- never more than JOBS e2e suites
# at once, so the extra one is a test that works the CPU while the suites
# wait.
PENDING=$STATE/pending
cp "$ORDER" "$PENDING"
next_job() {
    e2e=0
    for id in $running; do
        case $(cut -d'|' -f1 "$STATE/$id.job") in e2e*) e2e=$((e2e + 1)) ;; esac
    done
    cap=$JOBS
    [ "$e2e" -gt 0 ] && cap=$((JOBS + E2E_EXTRA))
    [ "$nrunning" -ge "$cap" ] && return 0
    awk -F'|' -v e2e="$e2e" -v jobs="$JOBS" -v out="$PENDING.new" '
        !done && ($1 !~ /^e2e/ || e2e < jobs) { print; done = 1; next }
        { print > out }
        END { close(out) }' "$PENDING"
    if [ -e "$PENDING.new" ]; then mv "$PENDING.new" "$PENDING"; else : >"$PENDING"; fi
}

n=0
while [ -s "$PENDING" ]; do
    job=$(next_job)
    if [ -z "$job" ]; then
        reap
        continue
    fi
    IFS='|' read -r j_layer j_name j_kind j_v j_path <<EOF_JOB
$job
EOF_JOB
    n=$((n + 1))
    start_job "$n" "$j_layer" "$j_name" "$j_kind" "$j_v" "$j_path"
    echo $! >"$STATE/$n.sub"
    running="$running $n"
    nrunning=$((nrunning + 1))
done
while [ "$nrunning" -gt 0 ]; do reap; done
trap - INT TERM
[ -s "$STATE/times" ] && [ -z "$ONLY" ] && cp "$STATE/times" "$TIMES"

# ---- 4. the count -------------------------------------------------------
if [ -s "$FAILED_LIST" ]; then
    nf=$(wc -l <"$FAILED_LIST")
    echo "failed ($nf):"
    head -n 60 "$FAILED_LIST" | sed 's/^/  /'
    [ "$nf" -gt 60 ] && echo "  ... and $((nf - 60)) more (above)"
fi
echo "time per layer (busy: the sum of its tests' times; span: its first start to its last end):"
awk -F'|' -v plan="$PLAN" -v total="$(($(ms) - T_START))" '
    BEGIN { order[++k] = "builds"; seen["builds"] = 1
        while ((getline l < plan) > 0) { split(l, a, "|"); if (!(a[1] in seen)) { seen[a[1]] = 1; order[++k] = a[1] } } }
    { if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2; if ($3 > hi[$1]) hi[$1] = $3
      busy[$1] += $3 - $2; jobs[$1]++; cases[$1] += $4 }
    END {
        printf "  %-12s %5s %6s %9s %9s\n", "layer", "tests", "cases", "busy", "span"
        for (i = 1; i <= k; i++) { L = order[i]; if (!(L in jobs)) continue
            printf "  %-12s %5d %6s %8.1fs %8.1fs\n", L, jobs[L], L == "builds" ? "-" : cases[L],
                busy[L] / 1000, (hi[L] - lo[L]) / 1000 }
        printf "  %-12s %5s %6s %9s %8.1fs\n", "total", "", "", "", total / 1000
    }' "$TIMINGS"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
