#!/bin/sh
# test_fuzz_redis_reply.sh -- fuzzes the Redis backend's reading of replies
# (src/backend/redis/reply.c: hiredis's reader with the bounded reply
# functions, then sl__redis_parse_reply for every kind of request) with
# libFuzzer, under ASan and UBSan: what a hostile or
# broken Redis may send (issue 23, B2 and B3).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs):
# tests/fuzz/fuzz.sh.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target redis_reply 150000 "$ROOT/tests/fuzz/fuzz_redis_reply.c" \
    "$ROOT/src/backend/redis/reply.c" "$ROOT/src/backend/redis/sentinel_reply.c" \
    -I"$ROOT/src/backend" -I"$ROOT/src/rules" \
    -I"$ROOT/src/lib" -lhiredis
