#!/bin/sh
# test_fuzz_resp.sh -- fuzzes sluiced's RESP parser (src/proto/resp/resp.c) with
# libFuzzer for a bounded time, under ASan and UBSan.
#
# Steps (build, replay the seeds, fuzz for FUZZ_SECONDS, default 30 s):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (crash-*, leak-*, timeout-*) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target resp 200000 "$ROOT/tests/fuzz/fuzz_resp.c" "$ROOT/src/proto/resp/resp.c" -I"$ROOT/src/proto/resp"
