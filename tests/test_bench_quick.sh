#!/bin/sh
# test_bench_quick.sh -- the benchmark still runs: a short smoke run of
# bench/bench (every algorithm, every part, tiny sizes) that fails on any
# library error.  It asserts no timing: numbers are printed, not judged.
# sluice-test: plain-only
set -u
ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
BUILD=${SLUICE_BUILD:-$ROOT/build}
make -C "$ROOT" -s B="$BUILD" "$BUILD/bench/bench" >/dev/null || exit 1
exec "$BUILD/bench/bench" --quick
