# fuzz.sh -- the steps every tests/test_fuzz_*.sh takes, sourced by them:
#
#     . "$ROOT/tests/fuzz/fuzz.sh"
#     fuzz_target NAME RUNS CC_ARGS...
#
#   1. builds CC_ARGS (the fuzz target's sources, -I and -l flags; each
#      source compiled once into build/fuzz/obj/, see fuzz_build) with
#      clang -fsanitize=fuzzer,address,undefined into build/fuzz/fuzz_NAME
#      (not a case: a failed build is one, a good one prints a plain line),
#      stack variables zero-initialized so no run depends on stack garbage;
#   2. replays the seed corpus tests/fuzz/corpus_NAME/ once (one case: a
#      regression run, every crash reproducer lives there once fixed);
#   3. explores from a scratch copy of the seeds (one case): RUNS inputs
#      (FUZZ_RUNS overrides it) with a fixed seed (a checksum of NAME;
#      FUZZ_SEED overrides it) and the dictionary tests/fuzz/NAME.dict when
#      there is one, with ASLR off where setarch allows.  No time bound
#      decides the outcome: the same commit explores the same inputs and gets
#      the same result (but where the code under test reads the clock or
#      getrandom itself: docs/testing.md, "Fuzzing").  `timeout` only catches a hang, -timeout (per input)
#      and -rss_limit_mb bound one input.
# Any crash, sanitizer report, leak or timeout fails (returns 1); the input is
# kept in build/fuzz/ (NAME-crash-*, ...) and printed.  Open-ended fuzzing,
# with time and no fixed seed, is `make fuzz` (FUZZ_MODE=open below).
# Needs $ROOT.
#
# FUZZ_MODE=open (what `make fuzz` sets): after the replay, no seeded run
# but fuzzing for FUZZ_SECONDS (0: until stopped), unseeded, into
# build/fuzz/corpus_NAME/, which keeps growing across runs; findings stay
# in build/fuzz/found/ (docs/testing.md says how one becomes a seed and a
# regression test).  FUZZ_ONLY (`make fuzz FUZZ_TARGETS=...`): the target
# names to run; the others are skipped without a word.

fuzz_target() {
    name=$1 runs=${FUZZ_RUNS:-$2}
    shift 2
    if [ -n "${FUZZ_ONLY:-}" ]; then # `make fuzz FUZZ_TARGETS=...`
        case " $FUZZ_ONLY " in *" $name "*) ;; *) return 0 ;; esac
    fi
    OUT=$ROOT/build/fuzz
    BIN=$OUT/fuzz_$name
    SEEDS=$ROOT/tests/fuzz/corpus_$name
    DICT=$ROOT/tests/fuzz/$name.dict
    seed=${FUZZ_SEED:-$(printf '%s' "$name" | cksum | cut -d' ' -f1)}
    CC_FUZZ=${CC_FUZZ:-clang}
    ART=$OUT/$name- # artifact prefix: kept apart from the other targets'

    if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
        echo "FAIL  $name: no $CC_FUZZ (scripts/deps.sh installs clang and libclang-rt-14-dev)"
        return 1
    fi
    mkdir -p "$OUT" || return 1
    [ -n "${WORK:-}" ] && rm -rf "$WORK" # a script's earlier target's
    WORK=$(mktemp -d) || return 1
    trap 'rm -rf "$WORK"' EXIT

    # Stack variables start as zero bytes: what an uninitialized one holds
    # then does not depend on what ran before, so a read of one gives the
    # same result on every run (a NULL pointer, caught; fuzz_hpack's
    # empty Huffman string was such a read)
    zero="-ftrivial-auto-var-init=zero"
    zero="$zero -enable-trivial-auto-var-init-zero-knowing-it-will-be-removed-from-clang"
    echo 'int main(void) { return 0; }' >"$WORK/probe.c"
    # shellcheck disable=SC2086 # $zero: two flags
    "$CC_FUZZ" $zero "$WORK/probe.c" -o "$WORK/probe" 2>/dev/null ||
        zero="-ftrivial-auto-var-init=zero"
    "$CC_FUZZ" $zero "$WORK/probe.c" -o "$WORK/probe" 2>/dev/null || zero=
    if ! fuzz_build "$@" >"$WORK/cc.log" 2>&1; then
        echo "FAIL  $name: building the fuzz target:"
        sed 's/^/        /' "$WORK/cc.log" | head -40
        return 1
    fi
    echo "built $BIN" # not a case: only a failed build counts (as a failure)

    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:abort_on_error=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    rm -f "$ART"crash-* "$ART"leak-* "$ART"timeout-* "$ART"oom-*
    dict=
    [ -f "$DICT" ] && dict=-dict=$DICT
    # ASLR off, so no address (a pointer hashed or compared) steers the
    # exploration; where setarch is missing or not allowed, run as is
    norand=
    if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
        norand="setarch $(uname -m) -R"
    fi

    if [ ! -d "$SEEDS" ] || [ -z "$(ls "$SEEDS")" ]; then
        echo "FAIL  $name: no seed corpus in $SEEDS"
        return 1
    fi
    if timeout 300 $norand "$BIN" -runs=0 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$ART" "$SEEDS" >"$WORK/seeds.log" 2>&1; then
        echo "ok    $name: $(find "$SEEDS" -type f | wc -l) seed inputs replayed"
    else
        echo "FAIL  $name: a seed input fails:"
        fuzz_show_failure "$WORK/seeds.log"
        return 1
    fi

    if [ "${FUZZ_MODE:-}" = open ]; then
        fuzz_open "$name" "$dict"
        return
    fi

    mkdir -p "$WORK/corpus" && cp "$SEEDS"/* "$WORK/corpus/" || return 1
    t0=$(date +%s)
    if timeout 600 $norand "$BIN" -seed="$seed" -runs="$runs" -reload=0 -timeout=10 \
        -rss_limit_mb=2048 -max_len=8192 $dict -print_final_stats=1 -artifact_prefix="$ART" \
        "$WORK/corpus" >"$WORK/fuzz.log" 2>&1; then
        echo "ok    $name: seeded exploration, -seed=$seed -runs=$runs"
        # what it reached, on a line of its own (not part of the case's
        # name): the same on every run of one commit
        echo "      $(grep -o 'cov: [0-9]* ft: [0-9]*' "$WORK/fuzz.log" | tail -1), corpus $(find "$WORK/corpus" -type f | wc -l) inputs, $(($(date +%s) - t0)) s"
    else
        echo "FAIL  $name: the seeded exploration (-seed=$seed -runs=$runs) found a failing input (kept in $OUT):"
        fuzz_show_failure "$WORK/fuzz.log"
        return 1
    fi
    return 0
}

# fuzz_open NAME DICT_FLAG: `make fuzz`'s open-ended run, FUZZ_SECONDS (0:
# until stopped), unseeded, into the corpus build/fuzz/corpus_NAME/ (kept
# across runs, seeded from the checked-in corpus); a failing input goes to
# build/fuzz/found/NAME-crash-* (-leak-, -timeout-, -oom-).
fuzz_open() {
    secs=${FUZZ_SECONDS:-0}
    corpus=$OUT/corpus_$1
    ART=$OUT/found/$1- # kept: the suite's runs clear only build/fuzz/NAME-*
    mkdir -p "$corpus" "$OUT/found" && cp -n "$SEEDS"/* "$corpus/" || return 1
    echo "fuzzing $1 for ${secs}s (0: until stopped) into $corpus"
    if $norand "$BIN" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        $2 -print_final_stats=1 -artifact_prefix="$ART" "$corpus" >"$OUT/$1.log" 2>&1; then
        echo "ok    $1: open-ended fuzzing ($(grep -o 'cov: [0-9]*' "$OUT/$1.log" | tail -1)), no failure"
    else
        echo "FAIL  $1: a failing input (kept in $OUT/found; log $OUT/$1.log):"
        fuzz_show_failure "$OUT/$1.log"
        return 1
    fi
}

# fuzz_build CC_ARGS...: compiles each source of CC_ARGS on its own into
# build/fuzz/obj/ and links them into $BIN.  An object is named by a
# checksum of the whole tree it was compiled from (every .c, .h and .proto
# of src/, include/, proto/ and tests/fuzz/: any change compiles all
# again), its -D and other compile flags (not its -I: no two headers share
# a name) and its path; so the targets that build the server's sources
# (auth, config, grpc, h1, http) compile them once between them, not once
# each (~45 s a target, most of the fuzz layer's time).  Two targets
# compiling one object at once each write their own and rename it into
# place: the same bytes either way.
#
# Every target gets the same compile flags, so that a source several
# targets use is compiled once for all of them: -DSL_RCU_CALLS for all
# (liburcu's read side as calls: what src/lib/reclaim.h asks for under
# UBSan, and what the Makefile's asan build does), not only for the targets
# that build the server (src/lib was compiled twice, once each way).
# -gline-tables-only, not -g: a report's stack still names file:line and
# function (what libFuzzer and the sanitizers print), without the type and
# variable info a debugger wants -- ~15% less compile time (for a
# debugger, rebuild with CFLAGS_FUZZ=-g).
fuzz_build() {
    # shellcheck disable=SC2086 # $zero, $CFLAGS_FUZZ: flags
    set -- -std=c11 -D_GNU_SOURCE ${CFLAGS_FUZZ:--gline-tables-only} -O1 -fno-omit-frame-pointer \
        -fno-sanitize-recover=all $zero -DSL_RCU_CALLS -I"$ROOT/include" "$@"
    tree=$(cd "$ROOT" && find src include proto tests/fuzz \( -name '*.[ch]' -o -name '*.proto' \) |
        LC_ALL=C sort | xargs cat | cksum | cut -d' ' -f1)
    key_flags=
    for a in "$@"; do
        case $a in *.c | -l* | -I*) ;; *) key_flags="$key_flags $a" ;; esac
    done
    mkdir -p "$OUT/obj" || return 1
    objs=
    for a in "$@"; do
        case $a in *.c) ;; *) continue ;; esac
        key=$(printf '%s|%s|%s|%s' "$tree" "$key_flags" "$CC_FUZZ" "$a" | cksum | cut -d' ' -f1)
        o=$OUT/obj/$(basename "$a" .c)-$key.o
        if [ ! -s "$o" ]; then
            cflags=
            for b in "$@"; do
                case $b in *.c | -l*) ;; *) cflags="$cflags $b" ;; esac
            done
            # shellcheck disable=SC2086 # $cflags: flags (no spaces in them)
            "$CC_FUZZ" $cflags -fsanitize=fuzzer-no-link,address,undefined -c "$a" \
                -o "$o.$$" || { rm -f "$o.$$"; return 1; }
            mv -f "$o.$$" "$o" || return 1
        fi
        objs="$objs $o"
    done
    lflags=
    for a in "$@"; do
        case $a in *.c | -I* | -D*) ;; *) lflags="$lflags $a" ;; esac
    done
    # shellcheck disable=SC2086 # lists of paths and flags without spaces
    "$CC_FUZZ" $objs $lflags -fsanitize=fuzzer,address,undefined -o "$BIN"
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
