# fuzz.sh -- the steps every tests/test_fuzz_*.sh takes, sourced by them:
#
#     . "$ROOT/tests/fuzz/fuzz.sh"
#     fuzz_target NAME DEFAULT_SECONDS CC_ARGS...
#
#   1. builds CC_ARGS (the fuzz target's sources, -I and -l flags) with
#      clang -fsanitize=fuzzer,address,undefined into build/fuzz/fuzz_NAME;
#   2. replays the seed corpus tests/fuzz/corpus_NAME/ once (a regression
#      run: add any crash reproducer there once fixed);
#   3. fuzzes for FUZZ_SECONDS (default DEFAULT_SECONDS) from a scratch copy
#      of the seeds with the dictionary tests/fuzz/NAME.dict, bounded in
#      total time, per-input time and memory.
# Any crash, sanitizer report, leak or timeout fails (returns 1); the input
# is kept in build/fuzz/ (NAME-crash-*, ...) and printed.  Needs $ROOT.

fuzz_target() {
    name=$1 def_seconds=$2
    shift 2
    OUT=$ROOT/build/fuzz
    BIN=$OUT/fuzz_$name
    SEEDS=$ROOT/tests/fuzz/corpus_$name
    DICT=$ROOT/tests/fuzz/$name.dict
    secs=${FUZZ_SECONDS:-$def_seconds}
    CC_FUZZ=${CC_FUZZ:-clang}
    ART=$OUT/$name- # artifact prefix: kept apart from the other targets'

    if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
        echo "FAIL  no $CC_FUZZ (scripts/deps.sh installs clang and libclang-rt-14-dev)"
        return 1
    fi
    mkdir -p "$OUT" || return 1
    WORK=$(mktemp -d) || return 1
    trap 'rm -rf "$WORK"' EXIT

    if ! "$CC_FUZZ" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
        -I"$ROOT/include" "$@" -o "$BIN" >"$WORK/cc.log" 2>&1; then
        echo "FAIL  building the fuzz target:"
        sed 's/^/        /' "$WORK/cc.log" | head -40
        return 1
    fi
    echo "ok    built $BIN"

    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    rm -f "$ART"crash-* "$ART"leak-* "$ART"timeout-* "$ART"oom-*

    if [ ! -d "$SEEDS" ] || [ -z "$(ls "$SEEDS")" ]; then
        echo "FAIL  no seed corpus in $SEEDS"
        return 1
    fi
    if timeout 120 "$BIN" -runs=0 -artifact_prefix="$ART" "$SEEDS" >"$WORK/seeds.log" 2>&1; then
        echo "ok    $(find "$SEEDS" -type f | wc -l) seed inputs replayed"
    else
        echo "FAIL  a seed input fails:"
        fuzz_show_failure "$WORK/seeds.log"
        return 1
    fi

    mkdir -p "$WORK/corpus" && cp "$SEEDS"/* "$WORK/corpus/" || return 1
    if timeout $((secs + 120)) "$BIN" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len=8192 -dict="$DICT" -print_final_stats=1 -artifact_prefix="$ART" \
        "$WORK/corpus" >"$WORK/fuzz.log" 2>&1; then
        runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$WORK/fuzz.log")
        cov=$(grep -o 'cov: [0-9]*' "$WORK/fuzz.log" | tail -1)
        echo "ok    fuzzed ${secs}s: ${runs:-?} inputs, $cov, corpus $(find "$WORK/corpus" -type f | wc -l), no crash"
    else
        echo "FAIL  the fuzzer found a failing input (kept in $OUT):"
        fuzz_show_failure "$WORK/fuzz.log"
        return 1
    fi
    return 0
}

# fuzz_show_failure LOG: the end of libFuzzer's report and the saved input.
fuzz_show_failure() {
    tail -n 40 "$1" | sed 's/^/        /'
    for f in "$ART"crash-* "$ART"leak-* "$ART"timeout-* "$ART"oom-*; do
        [ -e "$f" ] || continue
        echo "        input $f:"
        od -c "$f" | head -20 | sed 's/^/          /'
    done
}
