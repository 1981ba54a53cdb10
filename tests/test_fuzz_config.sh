#!/bin/sh
# test_fuzz_config.sh -- fuzzes sluiced's file parsers with libFuzzer, under
# ASan and UBSan: the config file (sl_config_load_file, src/server/config.c;
# parse(write(config)) == config through --dump-options), the users file and
# the password file (sl_auth_new, src/server/auth.c; each user logs in with
# its own password, a refusal names the file).  tests/fuzz/fuzz_config.c
# says what is checked.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.  Any crash, sanitizer report, leak or timeout
# fails the test; the input that caused it is kept in build/fuzz/
# (config-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# shellcheck disable=SC2046 # the source lists are globs, split on purpose
fuzz_target config 50000 "$ROOT/tests/fuzz/fuzz_config.c" \
    $(ls "$ROOT"/src/server/*.c "$ROOT"/src/backend/*.c "$ROOT"/src/backend/redis/*.c \
        "$ROOT"/src/rules/*.c "$ROOT"/src/lib/*.c) \
    -I"$ROOT/src/lib" -I"$ROOT/src/rules" -I"$ROOT/src/backend" -I"$ROOT/src/server" \
    -lhiredis -levent -levent_openssl -lssl -lcrypto -lyaml -lurcu-bp -lz -lpthread
