#!/bin/sh
# test_fuzz_journal.sh -- fuzzes the decision journal's parser
# (src/server/journal_fmt.c) with libFuzzer, under ASan and UBSan: every
# record it accepts lies within the file, frames back to the same bytes and
# goes into a store; a bad one is refused with a reason at its offset
# (tests/fuzz/fuzz_journal.c says what is checked).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# shellcheck disable=SC2046 # the source list is a glob, split on purpose
fuzz_target journal 15000 "$ROOT/tests/fuzz/fuzz_journal.c" "$ROOT/src/server/journal_fmt.c" \
    $(ls "$ROOT"/src/lib/*.c | grep -v '/args\.c$') -I"$ROOT/src/lib" -I"$ROOT/src/server" \
    -lurcu-bp -lz -lpthread
