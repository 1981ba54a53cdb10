#!/bin/sh
# test_fuzz_module_load.sh -- fuzzes the Redis module's rdb_load
# (src/module/module.c's type_load: what RESTORE of a DUMP payload reaches)
# through a fake RedisModuleIO with libFuzzer, under ASan
# and UBSan.  The seeds are real DUMPs' module data (every algorithm, alone
# and together), one with its record count raised, one cut short.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (module_load-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
L=$ROOT/src/lib
fuzz_target module_load 500000 "$ROOT/tests/fuzz/fuzz_module_load.c" "$ROOT/src/module/redismodule_api.c" \
    "$ROOT/src/module/holds.c" \
    "$L/args.c" "$L/checkexec.c" "$L/engine.c" "$L/limiter.c" "$L/lone.c" "$L/params.c" \
    "$L/reclaim.c" "$L/siphash.c" "$L/snapshot.c" "$L/store.c" "$L/util.c" \
    -I"$ROOT/src/module" -I"$L" -lurcu-bp -lz -lpthread
