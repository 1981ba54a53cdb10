#!/bin/sh
# test_fuzz_api.sh -- drives libsluice's stateful API (the store, the holds
# table, sl_decide_all / sl_decide_many, a snapshot round trip) with
# libFuzzer, under ASan and UBSan, as a hostile caller would: keys, parameters,
# costs and times at and past their limits, against stores and holds tables
# bounded and not (tests/fuzz/fuzz_api.c says what is checked: documented
# return codes, answers within their ranges, the memory bounds, a forgotten
# key answering as fresh, no more keys than were decided).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# shellcheck disable=SC2046 # the source list is a glob, split on purpose
fuzz_target api 3000 "$ROOT/tests/fuzz/fuzz_api.c" \
    $(ls "$ROOT"/src/lib/*.c | grep -v '/args\.c$') -I"$ROOT/src/lib" \
    -lurcu-bp -lz -lpthread
