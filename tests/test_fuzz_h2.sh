#!/bin/sh
# test_fuzz_h2.sh -- fuzzes sluiced's HTTP/2 alone (src/proto/grpc/h2.c and
# its HPACK, hpack.c), through h2.h's API with trivial stream callbacks and
# no gRPC, with libFuzzer under ASan and UBSan: the callbacks' order, what
# sl_h2_recv takes, and that what it writes is whole, well-placed frames
# (tests/fuzz/fuzz_h2.c says what is checked).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.  Any crash, sanitizer report, leak or timeout
# fails the test; the input that caused it is kept in build/fuzz/
# (h2-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target h2 80000 "$ROOT/tests/fuzz/fuzz_h2.c" "$ROOT/src/proto/grpc/h2.c" \
    "$ROOT/src/proto/grpc/hpack.c" -I"$ROOT/src/proto/grpc" -lpthread
