#!/bin/sh
# test_server_e2e.sh -- sluiced end to end: the Python suite in tests/e2e/
# (stdlib unittest + python3-redis + redis-cli) against $SLUICE_BUILD/sluiced.
# It starts real servers on kernel-chosen 127.0.0.1 ports, stops them by PID
# with SIGTERM (a SIGKILL after the deadline, a crash or a sanitizer report in
# a server's log fails the test that started it), and covers every command (redis-py, redis-cli, an interactive redis-cli on
# a pty), the spec's vectors replayed through RL.ALLOW ... AT t, pipelining,
# 200 concurrent connections, hostile bytes, restarts and snapshots, client
# and memory limits, and configuration.  See tests/e2e/harness.py.
#
# tests/run.sh runs it against build/ and build/asan/ (and build/tsan/) --
# a module's "# sluice-e2e: plain-only / no-tsan / no-asan" line leaves it
# out of a sanitizer's run (run_e2e.py, docs/testing.md) --, and
# counts the line "CASE PASS|FAIL|SKIP <id> <seconds>" run_e2e.py prints for
# each test as one case (docs/testing.md).
# Environment: SLUICE_BUILD, SLUICE_SPEC_DIR, SLUICE_E2E_ARGS (extra
# arguments for run_e2e.py, e.g. "-v" or "-k pipeline"), SLUICE_E2E_LOGS.
# sluice-test: +tsan
# The whole suite is one script: under TSan beside a CPU hog it takes
# twice its quiet ~400 s, so its hang catch-all is longer than the default.
# sluice-test: timeout=1800
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
SLUICE_BUILD=${SLUICE_BUILD:-$ROOT/build}
export SLUICE_ROOT="$ROOT" SLUICE_BUILD

if [ ! -x "$SLUICE_BUILD/sluiced" ]; then
    echo "FAIL  no $SLUICE_BUILD/sluiced (make all)"
    exit 1
fi

# A Python 3 that has python3-redis: Debian's, which a pyenv or venv python3
# earlier on PATH may not see.
PY=
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import redis' >/dev/null 2>&1; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "FAIL  no python3 with the redis module (scripts/deps.sh installs python3-redis)"
    exit 1
fi
command -v redis-cli >/dev/null 2>&1 || {
    echo "FAIL  no redis-cli (scripts/deps.sh installs redis-server, which brings redis-tools)"
    exit 1
}

# Sanitizers: a report fails the test (the harness checks each server's log);
# leaks are checked at each server's clean exit.
case $SLUICE_BUILD in
*/tsan) export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}" ;;
*/asan) export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}" ;;
esac

# Every server's log goes to build/logs/e2e-<variant>/ (kept; tests/run.sh
# clears build/logs at its start); failures also print the logs' ends.
variant=$(basename "$SLUICE_BUILD")
[ "$variant" = build ] && variant=plain
SLUICE_E2E_LOGS=${SLUICE_E2E_LOGS:-$ROOT/build/logs/e2e-$variant}
rm -rf "$SLUICE_E2E_LOGS"
mkdir -p "$SLUICE_E2E_LOGS" || exit 1
export SLUICE_E2E_LOGS
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the source tree

# shellcheck disable=SC2086
exec "$PY" -u "$ROOT/tests/e2e/run_e2e.py" ${SLUICE_E2E_ARGS:-} </dev/null
