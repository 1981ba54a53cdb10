#!/bin/sh
# test_fuzz_http.sh -- fuzzes sluiced's HTTP request path over a real socket
# (net.c and src/proto/http/: the framing, the router, the bearer check and
# every handler, over a local backend; tests/fuzz/fuzz_http.c says what is
# checked) with libFuzzer, under ASan and UBSan.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (http-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target http 5000 "$ROOT/tests/fuzz/fuzz_http.c" \
    $(ls "$ROOT"/src/server/*.c "$ROOT"/src/proto/resp/*.c "$ROOT"/src/proto/http/*.c \
        "$ROOT"/src/proto/headers/*.c \
        "$ROOT"/src/backend/*.c "$ROOT"/src/backend/redis/*.c "$ROOT"/src/rules/*.c "$ROOT"/src/lib/*.c) \
    -I"$ROOT/src/lib" -I"$ROOT/src/rules" -I"$ROOT/src/backend" -I"$ROOT/src/server" \
    -I"$ROOT/src/proto/resp" -I"$ROOT/src/proto/http" -I"$ROOT/src/proto/headers" -I"$ROOT/tests/fuzz" \
    -lhiredis -levent -levent_openssl -lssl -lcrypto -ljansson -lhttp_parser -lyaml -lurcu-bp -lz -lpthread
