#!/bin/sh
# test_readme.sh -- the README stays true: its C example compiles against
# the library and runs, its `sluice replay` example prints what the README
# shows, and the two set-up commands it gives exist; then
# tests/readme_blocks.py runs every other command block of README.md and
# docs/fleet.md as written (each in private namespaces), or finds it listed
# there with why it cannot run in a test.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
BUILD=${SLUICE_BUILD:-$ROOT/build}
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
cd "$ROOT" || exit 1
fails=0
ok() { echo "ok    $1"; }
bad() {
    fails=$((fails + 1))
    echo "FAIL  $1"
    [ -n "${2:-}" ] && sed 's/^/        /' "$2" | head -20
}

# The C example: the only ```c block.
awk '/^```c$/ { f = 1; next } /^```$/ { f = 0 } f' README.md >"$T/example.c"
if [ -s "$T/example.c" ] &&
    cc -std=c99 -Wall -Wextra -Werror -Iinclude -o "$T/example" "$T/example.c" \
        "$BUILD/libsluice.a" -lurcu-bp -lpthread >"$T/cc.log" 2>&1; then
    out=$("$T/example")
    if [ "$(echo "$out" | grep -c '^allowed 1')" -eq 3 ] && echo "$out" | grep -q '^allowed 0'; then
        ok "README's C example builds and runs (three allowed, one denied)"
    else
        bad "README's C example printed: $out"
    fi
else
    bad "README's C example does not build" "$T/cc.log"
fi

# The console example: the command after '$ ' (two lines) and its output.
awk '/^```console$/ { f = 1; next } /^```$/ { f = 0 } f' README.md >"$T/console"
cmd=$(sed -n '1,2p' "$T/console" | sed 's/^\$ //; s/^ *//' | tr '\n' ' ')
sed -n '3,$p' "$T/console" >"$T/want"
(cd "$ROOT" && sh -c "$cmd") >"$T/got" 2>&1
if [ -s "$T/want" ] && cmp -s "$T/want" "$T/got"; then
    ok "README's replay example prints what it shows"
else
    bad "README's replay example: $cmd" "$T/got"
fi

# Exactly two set-up commands, and they are there.
n=$(grep -c '^\./scripts/[a-z]*\.sh$' README.md)
if [ "$n" -eq 2 ] && grep -qx './scripts/run.sh' README.md && grep -qx './scripts/test.sh' README.md &&
    [ -x scripts/run.sh ] && [ -x scripts/test.sh ]; then
    ok "README gives ./scripts/run.sh and ./scripts/test.sh, and both exist"
else
    bad "README's set-up commands ($n found)"
fi
if grep -q 'scripts/test.sh' .ci/run; then ok ".ci/run runs scripts/test.sh"; else bad ".ci/run does not run scripts/test.sh"; fi

# Every command block of README.md and docs/fleet.md, run or listed; its
# ok/FAIL lines are this test's (the runner counts them).
SLUICE_BUILD=$BUILD /usr/bin/python3 tests/readme_blocks.py >"$T/blocks.log" 2>&1
rc=$?
cat "$T/blocks.log"
nfail=$(grep -c '^FAIL  ' "$T/blocks.log")
fails=$((fails + nfail))
if [ "$rc" -ne 0 ] && [ "$nfail" -eq 0 ]; then
    bad "tests/readme_blocks.py exited $rc" "$T/blocks.log"
fi

[ "$fails" -eq 0 ]
