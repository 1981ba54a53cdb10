#!/bin/sh
# test_fuzz_grpc.sh -- fuzzes sluiced's gRPC module (src/proto/grpc/:
# its HTTP/2 and HPACK, gRPC's framing, protobuf-c's decoding, ShouldRateLimit
# and Health/Check over a local backend and rules; tests/fuzz/fuzz_grpc.c
# says what is checked) with libFuzzer, under ASan and
# UBSan.
#
# Steps (the messages' C from proto/ by protoc-c, build, replay the seeds,
# a seeded exploration of a fixed
# number of inputs): tests/fuzz/fuzz.sh.  Then the
# hand-written codec of ShouldRateLimit's messages (src/proto/grpc/rls_wire.c)
# against protobuf-c's; then the HPACK decoder
# (src/proto/grpc/hpack.c) against nghttp2's, a seeded exploration each.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (grpc-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
GEN=$(mktemp -d) || exit 1
(cd "$ROOT/proto" && find . -name '*.proto' | sed 's|^\./||' |
    xargs protoc-c -I. --c_out="$GEN") || { echo "FAIL  protoc-c"; exit 1; }
rc=0
fuzz_target grpc 15000 "$ROOT/tests/fuzz/fuzz_grpc.c" \
    $(ls "$ROOT"/src/server/*.c "$ROOT"/src/proto/grpc/*.c "$ROOT"/src/proto/headers/*.c \
        "$ROOT"/src/backend/*.c \
        "$ROOT"/src/backend/redis/*.c \
        "$ROOT"/src/rules/*.c "$ROOT"/src/lib/*.c) $(find "$GEN" -name '*.c') \
    -I"$ROOT/src/lib" -I"$ROOT/src/rules" -I"$ROOT/src/backend" -I"$ROOT/src/server" \
    -I"$ROOT/src/proto/grpc" -I"$ROOT/src/proto/headers" -I"$GEN" \
    -lprotobuf-c -lhiredis -levent -levent_openssl -lssl -lcrypto -lyaml -lurcu-bp -lz \
    -lpthread || rc=1
# the hand-written codec of ShouldRateLimit's messages against protobuf-c's
# (tests/fuzz/fuzz_rls_wire.c)
fuzz_target rls_wire 100000 "$ROOT/tests/fuzz/fuzz_rls_wire.c" "$ROOT/src/proto/grpc/rls_wire.c" \
    $(find "$GEN" -name '*.c') -I"$ROOT/src/proto/grpc" -I"$GEN" -lprotobuf-c || rc=1
# sluiced's HPACK decoder against nghttp2's (tests/fuzz/fuzz_hpack.c)
fuzz_target hpack 100000 "$ROOT/tests/fuzz/fuzz_hpack.c" "$ROOT/src/proto/grpc/hpack.c" \
    -I"$ROOT/src/proto/grpc" -lnghttp2 -lpthread || rc=1
rm -rf "$GEN"
exit $rc
