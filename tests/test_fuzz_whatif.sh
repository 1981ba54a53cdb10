#!/bin/sh
# test_fuzz_whatif.sh -- fuzzes the line parsers of `sluice replay --rules`
# (src/cli/whatif_parse.c: the lines format and nginx's combined format) with
# libFuzzer, under ASan and UBSan.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (whatif-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target whatif 100000 "$ROOT/tests/fuzz/fuzz_whatif.c" "$ROOT/src/cli/whatif_parse.c" "$ROOT/src/cli/text.c" \
    "$ROOT/src/lib/params.c" -I"$ROOT/src/cli" -I"$ROOT/src/rules"
