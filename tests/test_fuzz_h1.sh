#!/bin/sh
# test_fuzz_h1.sh -- fuzzes sluiced's HTTP framing without sockets
# (tests/fuzz/fuzz_h1.c: bytes, in pieces, -> the HTTP module on a detached
# connection -> its answers; what is checked is said there) with libFuzzer
# under ASan and UBSan.  tests/test_fuzz_http.sh fuzzes
# the same module over real sockets.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (h1-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target h1 8000 "$ROOT/tests/fuzz/fuzz_h1.c" \
    $(ls "$ROOT"/src/server/*.c "$ROOT"/src/proto/resp/*.c "$ROOT"/src/proto/http/*.c \
        "$ROOT"/src/proto/headers/*.c \
        "$ROOT"/src/backend/*.c "$ROOT"/src/backend/redis/*.c "$ROOT"/src/rules/*.c "$ROOT"/src/lib/*.c) \
    -I"$ROOT/src/lib" -I"$ROOT/src/rules" -I"$ROOT/src/backend" -I"$ROOT/src/server" \
    -I"$ROOT/src/proto/resp" -I"$ROOT/src/proto/http" -I"$ROOT/src/proto/headers" -I"$ROOT/tests/fuzz" \
    -lhiredis -levent -levent_openssl -lssl -lcrypto -ljansson -lhttp_parser -lyaml -lurcu-bp -lz -lpthread
