#!/bin/sh
# test_fuzz_auth.sh -- fuzzes the AUTH / HELLO path of sluiced (the RESP
# commands over src/server/auth.c, on a detached connection) with libFuzzer
# under ASan and UBSan, against a model of who the
# connection is (tests/fuzz/fuzz_auth.c says what is checked).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (auth-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# shellcheck disable=SC2046 # the source lists are globs, split on purpose
fuzz_target auth 20000 "$ROOT/tests/fuzz/fuzz_auth.c" \
    $(ls "$ROOT"/src/server/*.c "$ROOT"/src/proto/resp/*.c "$ROOT"/src/backend/*.c "$ROOT"/src/backend/redis/*.c \
        "$ROOT"/src/rules/*.c "$ROOT"/src/lib/*.c) \
    -I"$ROOT/src/lib" -I"$ROOT/src/rules" -I"$ROOT/src/backend" -I"$ROOT/src/server" \
    -I"$ROOT/src/proto/resp" -lhiredis -levent -levent_openssl -lssl -lcrypto -lyaml -lurcu-bp -lz -lpthread
