#!/bin/sh
# tests/run.sh -- builds and runs every test of sluice; ends with the line
# "N passed, N failed" and exits nonzero if any failed.
#
#   1. finds the spec (SLUICE_SPEC_DIR, else <repo>/../shared/spec, else
#      /work/shared/spec) and exports SLUICE_SPEC_DIR; none found is a FAIL
#   2. builds three variants, each build a test of its own:
#        plain  build/        -O2
#        asan   build/asan/   ASan + UBSan
#        tsan   build/tsan/   ThreadSanitizer
#   3. runs, each under `timeout` with no standard input:
#        plain/test_*   every C test (cmocka)
#        asan/test_*    every C test again
#        tsan/test_*    the C tests whose name contains "thread", and test_store
#        tests/*.sh     every shell test, once against build/ and once against
#                       build/asan/ (SLUICE_BUILD says which); a script with the
#                       line "# sluice-test: plain-only" runs against build/
#                       only, one with "# sluice-test: +tsan" also against
#                       build/tsan/
#   Each test prints PASS or FAIL; a failure shows the end of its log (all logs
#   are kept in build/logs/).
#
# Environment: SLUICE_TEST_TIMEOUT (seconds per test, default 600),
# JOBS (make -j, default 2), SLUICE_SPEC_DIR.
set -u

ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd) || exit 1
cd "$ROOT" || exit 1
TIMEOUT=${SLUICE_TEST_TIMEOUT:-600}
JOBS=${JOBS:-2}
LOGS=$ROOT/build/logs
rm -rf "$LOGS"
mkdir -p "$LOGS" || exit 1

passed=0
failed=0
failures=""

now() { date +%s; }

pass() {
    passed=$((passed + 1))
    echo "PASS  $1${2:+  ($2)}"
}

# fail NAME WHY [LOG]
fail() {
    failed=$((failed + 1))
    failures="$failures $1"
    echo "FAIL  $1  ($2)"
    if [ -n "${3:-}" ] && [ -s "$3" ]; then
        echo "      --- last lines of $3:"
        tail -n 40 "$3" | sed 's/^/      | /'
    fi
}

# run NAME COMMAND...: runs a test with a timeout, no stdin, output to a log.
run() {
    name=$1
    shift
    log=$LOGS/$(echo "$name" | tr '/ ' '__').log
    t0=$(now)
    timeout -k 10 "$TIMEOUT" "$@" </dev/null >"$log" 2>&1
    rc=$?
    secs=$(($(now) - t0))
    if [ "$rc" -eq 0 ]; then
        pass "$name" "${secs}s"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        fail "$name" "timed out after ${TIMEOUT}s" "$log"
    else
        fail "$name" "exit status $rc after ${secs}s" "$log"
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
    fail "spec" "no spec found: set SLUICE_SPEC_DIR, or put shared/spec beside the repo (tried '${spec:-<repo>/../shared/spec, /work/shared/spec}')"
    SLUICE_SPEC_DIR=${spec:-/nonexistent/shared/spec}
fi
export SLUICE_SPEC_DIR

# ---- 2. builds ----------------------------------------------------------
built=""
is_built() { case " $built " in *" $1 "*) return 0 ;; esac; return 1; }
dir_of() { if [ "$1" = plain ]; then echo build; else echo "build/$1"; fi; }

for v in plain asan tsan; do
    case $v in
        plain) target="all tests" ;;
        *) target=$v ;;
    esac
    log=$LOGS/build_$v.log
    t0=$(now)
    # No stale test binary may pass for a fresh one: relink them all.
    for f in "$(dir_of "$v")"/tests/test_*; do
        case $f in *.o) ;; *) rm -f "$f" ;; esac
    done
    # shellcheck disable=SC2086
    if make -k -j"$JOBS" $target </dev/null >"$log" 2>&1; then
        pass "build/$v" "$(($(now) - t0))s"
    else
        fail "build/$v" "make $target failed; the tests that built still run" "$log"
    fi
    [ -x "$(dir_of "$v")/sluice" ] && built="$built $v"
done


export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

# ---- 3. C tests ---------------------------------------------------------
for v in plain asan tsan; do
    d=$(dir_of "$v")
    for src in tests/test_*.c; do
        [ -e "$src" ] || continue
        t=$(basename "$src" .c)
        if [ "$v" = tsan ]; then
            case $t in *thread* | test_store) ;; *) continue ;; esac
        fi
        if [ -x "$d/tests/$t" ]; then
            run "$v/$t" "$d/tests/$t"
        else
            fail "$v/$t" "not built: $d/tests/$t (see build/logs/build_$v.log)"
        fi
    done
done

# ---- 3. shell tests -----------------------------------------------------
for sh in tests/*.sh; do
    [ "$sh" = tests/run.sh ] && continue
    t=$(basename "$sh" .sh)
    variants="plain asan"
    grep -q '^# sluice-test: plain-only' "$sh" && variants=plain
    grep -q '^# sluice-test: +tsan' "$sh" && variants="$variants tsan"
    for v in $variants; do
        if ! is_built "$v"; then
            fail "$v/$t" "$(dir_of "$v")/sluice not built"
            continue
        fi
        run "$v/$t" env SLUICE_ROOT="$ROOT" SLUICE_BUILD="$ROOT/$(dir_of "$v")" sh "$sh"
    done
done

[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
