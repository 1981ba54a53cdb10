#!/usr/bin/env bash
# bench/peers.sh -- libsluice beside an in-process peer, in the same run:
# rate-limiter-flexible's RateLimiterMemory (Node.js, bench/peers/rlf.js)
# doing bench/bench's throughput run (one thread, token bucket-like limits of
# 4,000 a second, keys "user:NNNNNN", 1,000 hot keys or 1,000,000 keys drawn
# at random, each key made once first).
#
#   bench/peers.sh [BUILD_DIR]          (default build; needs BUILD_DIR/bench/bench)
#
# Rounds interleave the two (ROUNDS, default 3), both pinned to CPU 1 when
# the machine has two CPUs; the table gives medians and sluice / peer.  The
# peer is measured four ways, and the ratio is taken against its best:
#   await  one `await consume(key)` a decision (what a handler does)
#   batch  256 consume() calls, then one await of all (its best case)
# each with a 1-second window (bench/bench's limits: at 1M keys the peer
# forgets a key, by its timer, before the key comes again, so each decision
# makes a key) and a 60-second one (240,000 a minute: it keeps its keys).
# The peer is installed from bench/peers/package-lock.json with `npm ci`
# into BUILD_DIR/bench-peers (once; needs node and npm: scripts/deps.sh).
# Environment: ROUNDS (3), SECONDS_LIB (1, a sluice run), SECONDS_PEER (2).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
SECONDS_LIB=${SECONDS_LIB:-1}
SECONDS_PEER=${SECONDS_PEER:-2}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

[ -x "$BUILD/bench/bench" ] || die "no $BUILD/bench/bench (make build/bench/bench)"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then die "needs node and npm (scripts/deps.sh)"; fi
PEERS=$BUILD/bench-peers
if ! cmp -s "$ROOT/bench/peers/package-lock.json" "$PEERS/package-lock.json" 2>/dev/null ||
    [ ! -d "$PEERS/node_modules/rate-limiter-flexible" ]; then
    mkdir -p "$PEERS"
    cp "$ROOT/bench/peers/package.json" "$ROOT/bench/peers/package-lock.json" "$PEERS/"
    (cd "$PEERS" && timeout 600 npm ci --no-audit --no-fund --loglevel=error >&2) ||
        die "npm ci of rate-limiter-flexible failed"
fi
PIN=()
if [ "$(nproc)" -ge 2 ]; then PIN=(taskset -c 1); fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
lib() { # one sluice run: "hot many" M decisions/s
    timeout 120 "${PIN[@]}" "$BUILD/bench/bench" --algo token-bucket --parts hot,1m \
        --seconds "$SECONDS_LIB" --reps 1 2>/dev/null |
        awk -F'|' '$1 ~ /^token-bucket / && NF > 8 { gsub(/ /, ""); print $2, $3; exit }'
}
peer() { # KEYS MODE WINDOW_S: M decisions/s
    NODE_PATH=$PEERS/node_modules timeout 300 "${PIN[@]}" node "$ROOT/bench/peers/rlf.js" \
        "$1" "$SECONDS_PEER" "$2" "$3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["mdps"])'
}
COLS="lib_hot lib_1m rlf_hot_await_1 rlf_hot_batch_1 rlf_1m_await_1 rlf_1m_batch_1 rlf_1m_await_60 rlf_1m_batch_60"
for r in $(seq "$ROUNDS"); do
    note "round $r of $ROUNDS"
    if [ $((r % 2)) -eq 1 ]; then read -r h m < <(lib); fi
    peer 1000 await 1 >>"$TMP/rlf_hot_await_1"
    peer 1000 batch 1 >>"$TMP/rlf_hot_batch_1"
    peer 1000000 await 1 >>"$TMP/rlf_1m_await_1"
    peer 1000000 batch 1 >>"$TMP/rlf_1m_batch_1"
    peer 1000000 await 60 >>"$TMP/rlf_1m_await_60"
    peer 1000000 batch 60 >>"$TMP/rlf_1m_batch_60"
    if [ $((r % 2)) -eq 0 ]; then read -r h m < <(lib); fi
    if [ -z "${h:-}" ] || [ -z "${m:-}" ]; then die "no result from $BUILD/bench/bench"; fi
    echo "$h" >>"$TMP/lib_hot"
    echo "$m" >>"$TMP/lib_1m"
done
# shellcheck disable=SC2086 # the column names, one word each
python3 - "$TMP" "$ROUNDS" $COLS <<'EOF'
import statistics, sys
d, rounds, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
v = {c: [float(x) for x in open(f"{d}/{c}").read().split()] for c in cols}
med = {c: statistics.median(v[c]) for c in cols}
print(f"bench/peers.sh: median of {rounds} interleaved rounds, M decisions/s, one thread")
print(f"{'':34} | {'hot keys':>9} | {'1M keys':>9} | rounds")
print("-" * 35 + "+-----------+-----------+-------")
def row(name, h, m, rs):
    hs = f"{h:9.3f}" if h is not None else f"{'-':>9}"
    ms = f"{m:9.3f}" if m is not None else f"{'-':>9}"
    print(f"{name:34} | {hs} | {ms} | {rs}")
row("libsluice (sl_allow)", med["lib_hot"], med["lib_1m"],
    "hot " + " ".join(f"{x:.2f}" for x in v["lib_hot"]) + "; 1M " + " ".join(f"{x:.2f}" for x in v["lib_1m"]))
for w in ("1", "60"):
    for mode in ("await", "batch"):
        h = med[f"rlf_hot_{mode}_1"] if w == "1" else None
        m = med[f"rlf_1m_{mode}_{w}"]
        row(f"rate-limiter-flexible {mode}, {w} s", h, m,
            " ".join(f"{x:.3f}" for x in v[f"rlf_1m_{mode}_{w}"]))
best_h = max(med["rlf_hot_await_1"], med["rlf_hot_batch_1"])
best_m = max(med[f"rlf_1m_{m}_{w}"] for m in ("await", "batch") for w in ("1", "60"))
print(f"{'sluice / the peer at its best':34} | {med['lib_hot'] / best_h:8.1f}x | {med['lib_1m'] / best_m:8.1f}x |")
EOF
