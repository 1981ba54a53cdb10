#!/bin/sh
# test_fuzz_resp.sh -- fuzzes sluiced's RESP parser (src/proto/resp/resp.c) with
# libFuzzer, under ASan and UBSan.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (resp-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target resp 30000 "$ROOT/tests/fuzz/fuzz_resp.c" "$ROOT/src/proto/resp/resp.c" -I"$ROOT/src/proto/resp"
