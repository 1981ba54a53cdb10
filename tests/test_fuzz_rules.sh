#!/bin/sh
# test_fuzz_rules.sh -- fuzzes the rules loader (src/rules/rules_load.c,
# rules_yaml.c, rules_tree.c), and
# the matcher (rules_match.c) on every set it loads, with libFuzzer, under
# ASan and UBSan.
#
# Steps (build, replay the seeds, a seeded exploration of a fixed
# number of inputs):
# tests/fuzz/fuzz.sh.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (rules-crash-*, ...) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/fuzz/fuzz.sh"
fuzz_target rules 50000 "$ROOT/tests/fuzz/fuzz_rules.c" "$ROOT/src/rules/rules_load.c" \
    "$ROOT/src/rules/rules_yaml.c" "$ROOT/src/rules/rules_tree.c" "$ROOT/src/rules/rules_match.c" \
    "$ROOT/src/rules/rules_meta.c" \
    "$ROOT/src/lib/params.c" "$ROOT/src/lib/siphash.c" -I"$ROOT/src/rules" -I"$ROOT/src/lib" -lyaml
