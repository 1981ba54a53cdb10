#!/bin/sh
# test_fuzz_snapshot.sh -- fuzzes the snapshot loader (sl_store_load,
# src/lib/snapshot.c) with libFuzzer, under ASan and UBSan: a refused file
# leaves the store empty and is named in the message; an accepted one saves
# and loads back to the same records (tests/fuzz/fuzz_snapshot.c says what
# is checked).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.  Any crash, sanitizer report, leak or timeout
# fails the test; the input that caused it is kept in build/fuzz/
# (snapshot-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# libsluice without args.c (sluiced's and sluicectl's argument helpers)
# shellcheck disable=SC2046 # the source list is a glob, split on purpose
fuzz_target snapshot 15000 "$ROOT/tests/fuzz/fuzz_snapshot.c" \
    $(ls "$ROOT"/src/lib/*.c | grep -v '/args\.c$') -I"$ROOT/src/lib" -lurcu-bp -lz -lpthread
