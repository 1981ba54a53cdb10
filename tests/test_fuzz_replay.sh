#!/bin/sh
# test_fuzz_replay.sh -- fuzzes `sluicectl replay`'s line parser
# (sl__replay_parse_line, src/cli/replay.c) with libFuzzer, under ASan and
# UBSan: replay.h's contract on what it accepts, a message on every refusal,
# and parse(write(request)) == request (tests/fuzz/fuzz_replay.c says what
# is checked).
#
# Steps (build, replay the seeds, a seeded exploration of a fixed number of
# inputs): tests/fuzz/fuzz.sh.  Any crash, sanitizer report, leak or timeout
# fails the test; the input that caused it is kept in build/fuzz/
# (replay-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
# the command's other parts and libsluice (args.c is sluiced's, and its
# sl__quote is text.c's twin)
# shellcheck disable=SC2046 # the source list is a glob, split on purpose
fuzz_target replay 500000 "$ROOT/tests/fuzz/fuzz_replay.c" "$ROOT/src/cli/replay.c" \
    "$ROOT/src/cli/run.c" "$ROOT/src/cli/text.c" $(ls "$ROOT"/src/lib/*.c | grep -v '/args\.c$') \
    -I"$ROOT/src/cli" -I"$ROOT/src/lib" -lurcu-bp -lz -lpthread
