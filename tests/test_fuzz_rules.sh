#!/bin/sh
# test_fuzz_rules.sh -- fuzzes the rules loader (src/rules/rules.c) with
# libFuzzer for a bounded time, under ASan and UBSan.
#
#   1. builds tests/fuzz/fuzz_rules.c + src/rules/rules.c + src/lib/params.c
#      with clang -fsanitize=fuzzer,address,undefined, linked with libyaml,
#      into build/fuzz/fuzz_rules;
#   2. replays the seed corpus tests/fuzz/corpus_rules/ (valid Lyft and
#      sluice files, and bad ones: unknown units, tabs, duplicate keys,
#      aliases, binary bytes; add any crash reproducer there once fixed);
#   3. fuzzes for FUZZ_SECONDS (default 20) from a scratch copy of the seeds
#      with the dictionary tests/fuzz/rules.dict.
# Any crash, sanitizer report, leak or timeout fails the test; the input that
# caused it is kept in build/fuzz/ (crash-*, leak-*, timeout-*) and printed.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
OUT=$ROOT/build/fuzz
BIN=$OUT/fuzz_rules
SEEDS=$ROOT/tests/fuzz/corpus_rules
DICT=$ROOT/tests/fuzz/rules.dict
SECONDS_=${FUZZ_SECONDS:-20}
CC_FUZZ=${CC_FUZZ:-clang}
ART=$OUT/rules-   # artifact prefix: kept apart from the other fuzz targets'

if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
    echo "FAIL  no $CC_FUZZ (scripts/deps.sh installs clang and libclang-rt-14-dev)"
    exit 1
fi
mkdir -p "$OUT" || exit 1
WORK=$(mktemp -d) || exit 1
trap 'rm -rf "$WORK"' EXIT

# 1. build
if ! "$CC_FUZZ" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$ROOT/src/rules" -I"$ROOT/include" \
    "$ROOT/tests/fuzz/fuzz_rules.c" "$ROOT/src/rules/rules.c" "$ROOT/src/lib/params.c" \
    -lyaml -o "$BIN" >"$WORK/cc.log" 2>&1; then
    echo "FAIL  building the fuzz target:"
    sed 's/^/        /' "$WORK/cc.log" | head -40
    exit 1
fi
echo "ok    built $BIN"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# show_failure LOG: the end of libFuzzer's report and the saved input.
show_failure() {
    tail -n 40 "$1" | sed 's/^/        /'
    for f in "$ART"crash-* "$ART"leak-* "$ART"timeout-* "$ART"oom-*; do
        [ -e "$f" ] || continue
        echo "        input $f:"
        od -c "$f" | head -20 | sed 's/^/          /'
    done
}
rm -f "$ART"crash-* "$ART"leak-* "$ART"timeout-* "$ART"oom-*

# 2. the seeds, each run once
if [ ! -d "$SEEDS" ] || [ -z "$(ls "$SEEDS")" ]; then
    echo "FAIL  no seed corpus in $SEEDS"
    exit 1
fi
if timeout 120 "$BIN" -runs=0 -artifact_prefix="$ART" "$SEEDS" >"$WORK/seeds.log" 2>&1; then
    echo "ok    $(find "$SEEDS" -type f | wc -l) seed inputs replayed"
else
    echo "FAIL  a seed input fails:"
    show_failure "$WORK/seeds.log"
    exit 1
fi

# 3. fuzz, bounded in time (and in memory and per-input time)
mkdir -p "$WORK/corpus" && cp "$SEEDS"/* "$WORK/corpus/" || exit 1
if timeout $((SECONDS_ + 120)) "$BIN" -max_total_time="$SECONDS_" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -dict="$DICT" -print_final_stats=1 -artifact_prefix="$ART" \
    "$WORK/corpus" >"$WORK/fuzz.log" 2>&1; then
    runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$WORK/fuzz.log")
    cov=$(grep -o 'cov: [0-9]*' "$WORK/fuzz.log" | tail -1)
    echo "ok    fuzzed ${SECONDS_}s: ${runs:-?} inputs, $cov, corpus $(find "$WORK/corpus" -type f | wc -l), no crash"
else
    echo "FAIL  the fuzzer found a failing input (kept in $OUT):"
    show_failure "$WORK/fuzz.log"
    exit 1
fi
