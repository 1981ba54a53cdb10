#!/usr/bin/env bash
# bench/run.sh -- the whole benchmark: libsluice (bench/bench), `sluicectl replay`
# lines per second, and redis-server started in the same run as the peer.
#
#   bench/run.sh            full run (a few minutes)
#   bench/run.sh --quick    smoke run: small sizes, too small to judge goals
#
# Environment: B (build dir, default build), REPLAY_LINES (default 10000000),
# REPLAY_KEYS (default 100000), REPLAY_RUNS (default 3), REDIS_KEYS (default
# 1000000).  Every step runs under `timeout`; redis-server listens on a free
# 127.0.0.1 port and is stopped by its PID when the script exits.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=--quick
elif [ -n "${1:-}" ]; then
    echo "usage: bench/run.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${REPLAY_LINES:=200000}" "${REPLAY_KEYS:=10000}" "${REPLAY_RUNS:=1}" "${REDIS_KEYS:=100000}"
else
    : "${REPLAY_LINES:=10000000}" "${REPLAY_KEYS:=100000}" "${REPLAY_RUNS:=3}" "${REDIS_KEYS:=1000000}"
fi
LOG_KEYS=2000 # sorted sets of 500 members: the textbook sliding log, 500/hour
KEY_BYTES=11  # "user:NNNNNN", the keys bench.c uses too

case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
BENCH=$BD/bench/bench
SLUICE=$BD/sluicectl
TMP=$(mktemp -d /tmp/sluice-bench.XXXXXX)
REDIS_PID=

cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

note() { printf '%s\n' "$*" >&2; }
# Seconds since the epoch with microseconds (bash 5).
clock() { printf '%s' "$EPOCHREALTIME"; }
# Value of `name` in the key=value results file written by bench (or "-").
ours() {
    awk -v k="$1" '$1 == k { v = $2; f = 1 }
        END { if (!f) print "-"; else if (v == int(v)) print v; else printf "%.2f\n", v }' "$TMP/results.txt"
}

timeout 600 make -s -C "$ROOT" "$B/bench/bench" "$B/sluicectl" >&2

# ---- 1. the library ---------------------------------------------------------
echo "== libsluice (bench/bench $QUICK) =="
timeout 1200 "$BENCH" $QUICK --results "$TMP/results.txt" 2>"$TMP/bench.err" || {
    cat "$TMP/bench.err" >&2
    exit 1
}

# ---- 2. sluicectl replay ----------------------------------------------------
# One ms per 1,000 lines, keys uniform over REPLAY_KEYS: a key sees about
# 1000 * 1000 / REPLAY_KEYS requests per second (10/s at 100k keys).  The
# limits below allow twice that, so most lines are allowed.
note "generating $REPLAY_LINES replay lines over $REPLAY_KEYS keys..."
timeout 120 "$BENCH" --gen-replay "$REPLAY_LINES" "$REPLAY_KEYS" >"$TMP/replay.txt"
per_key_per_s=$((1000000 / REPLAY_KEYS))
[ "$per_key_per_s" -ge 1 ] || per_key_per_s=1
L1=$((2 * per_key_per_s))

replay_args() {
    case $1 in
    sliding-buckets) echo "--limit $((60 * L1)) --window 60000 --precision 60" ;;
    *) echo "--limit $L1 --window 1000" ;;
    esac
}

echo
echo "== sluicectl replay: $REPLAY_LINES lines, $REPLAY_KEYS keys, best of $REPLAY_RUNS =="
printf '%-16s | %-44s | %9s | %7s | %8s | %s\n' algorithm "options" "M lines/s" allowed goal "met?"
printf -- '-----------------+----------------------------------------------+-----------+---------+----------+-----\n'
for algo in fixed-window sliding-log sliding-window sliding-buckets token-bucket gcra leaky-bucket; do
    args=$(replay_args "$algo")
    # Correctness first (not timed): one output line per input line.
    # shellcheck disable=SC2086
    timeout 300 "$SLUICE" replay --algo "$algo" $args "$TMP/replay.txt" >"$TMP/replay.out"
    out_lines=$(wc -l <"$TMP/replay.out")
    if [ "$out_lines" -ne "$REPLAY_LINES" ]; then
        echo "sluicectl replay --algo $algo: $out_lines output lines for $REPLAY_LINES input lines" >&2
        exit 1
    fi
    allowed=$(awk '$1 == 1 { a++ } END { printf "%.1f%%", 100 * a / NR }' "$TMP/replay.out")
    best=0
    for _ in $(seq "$REPLAY_RUNS"); do
        t0=$(clock)
        # shellcheck disable=SC2086
        timeout 300 "$SLUICE" replay --algo "$algo" $args "$TMP/replay.txt" >/dev/null
        t1=$(clock)
        best=$(awk -v n="$REPLAY_LINES" -v a="$t0" -v b="$t1" -v best="$best" \
            'BEGIN { r = n / (b - a) / 1e6; print (r > best ? r : best) }')
    done
    met=$(awk -v r="$best" 'BEGIN { print (r >= 5 ? "yes" : "no") }')
    printf '%-16s | %-44s | %9.2f | %7s | %8s | %s\n' "$algo" "$args" "$best" "$allowed" ">=5 M/s" "$met"
    echo "replay.$algo $best" >>"$TMP/results.txt"
done
rm -f "$TMP/replay.out"

# ---- 3. the peer: redis-server, started here --------------------------------
PORT=
rcli() { timeout 60 redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
used_memory() { rcli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'; }

# Loads `bench --gen-redis KIND N` with redis-cli --pipe and prints the
# growth of used_memory minus `subtract` bytes, divided by `per`.
redis_bytes() {
    local kind=$1 n=$2 per=$3 subtract=$4 m0 m1
    rcli flushall >/dev/null
    m0=$(used_memory)
    "$BENCH" --gen-redis "$kind" "$n" |
        timeout 300 redis-cli -h 127.0.0.1 -p "$PORT" --pipe >"$TMP/pipe.log"
    m1=$(used_memory)
    awk -v a="$m0" -v b="$m1" -v s="$subtract" -v p="$per" 'BEGIN { printf "%.1f", (b - a - s) / p }'
}

# M requests/s of one redis-benchmark test (CSV: the rate is the 7th field
# from the end, as the test name may hold commas).
redis_rps() {
    timeout 120 redis-benchmark -h 127.0.0.1 -p "$PORT" --csv "$@" 2>/dev/null |
        tr -d '"\r' | awk -F, 'NR > 1 && $(NF - 6) + 0 > 0 { printf "%.3f", $(NF - 6) / 1e6; exit }'
}

# A textbook token bucket in Lua: HMGET/HSET of tokens and ts, server clock.
LUA='local c=tonumber(ARGV[1]) local r=tonumber(ARGV[2]) local t=redis.call("TIME") local now=t[1]*1000+math.floor(t[2]/1000) local v=redis.call("HMGET",KEYS[1],"tokens","ts") local k=tonumber(v[1]) or c local ts=tonumber(v[2]) or now k=math.min(c,k+(now-ts)*r) local ok=0 if k>=1 then k=k-1 ok=1 end redis.call("HSET",KEYS[1],"tokens",k,"ts",now) return ok'

peer_redis() {
    local r_hset r_set r_zset incr_c50 incr_p32 lua_p32 sha version n_incr=1000000 n_lua=300000
    [ -n "$QUICK" ] && n_incr=100000 n_lua=30000
    PORT=$("$BENCH" --free-port)
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile "$TMP/redis.log" --dir "$TMP" &
    REDIS_PID=$!
    for _ in $(seq 100); do
        [ "$(rcli ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    [ "$(rcli ping)" = PONG ] || { echo "redis-server did not start on port $PORT" >&2; exit 1; }

    note "loading redis: $REDIS_KEYS hashes, $REDIS_KEYS strings, $LOG_KEYS sorted sets of 500..."
    r_hset=$(redis_bytes hset "$REDIS_KEYS" "$REDIS_KEYS" $((REDIS_KEYS * KEY_BYTES)))
    r_set=$(redis_bytes set "$REDIS_KEYS" "$REDIS_KEYS" $((REDIS_KEYS * KEY_BYTES)))
    r_zset=$(redis_bytes zset "$LOG_KEYS" $((LOG_KEYS * 500)) 0)
    rcli flushall >/dev/null

    note "redis-benchmark..."
    incr_c50=$(redis_rps -t incr -n "$n_incr" -c 50)
    incr_p32=$(redis_rps -t incr -n "$n_incr" -c 50 -P 32)
    sha=$(rcli script load "$LUA" | tr -d '\r')
    lua_p32=$(redis_rps -n "$n_lua" -c 50 -P 32 -r 1000 evalsha "$sha" 1 'user:__rand_int__' 4000 4)
    version=$(redis-server --version | awk '{ print $3 }')

    echo
    echo "== peer: redis-server ${version#v=} on 127.0.0.1:$PORT, same run (pid $REDIS_PID) =="
    printf '%-46s | %16s | %s\n' "what" "redis" "sluice (alloc / rss)"
    printf -- '-----------------------------------------------+------------------+---------------------\n'
    printf '%-46s | %14s B | %s / %s B\n' "token-bucket state per key (HSET tokens ts)" "$r_hset" \
        "$(ours token-bucket.bytes_alloc)" "$(ours token-bucket.bytes_rss)"
    printf '%-46s | %14s B | %s / %s B\n' "gcra state per key (SET key tat)" "$r_set" \
        "$(ours gcra.bytes_alloc)" "$(ours gcra.bytes_rss)"
    printf '%-46s | %14s B | %s / %s B\n' "sliding-log per logged request (ZSET, 500/key)" "$r_zset" \
        "$(ours sliding-log.bytes_per_req_alloc)" "$(ours sliding-log.bytes_per_req_rss)"
    printf '%-46s | %12s M/s |\n' "INCR, 50 clients" "${incr_c50:--}"
    printf '%-46s | %12s M/s |\n' "INCR, 50 clients, pipeline 32" "${incr_p32:--}"
    printf '%-46s | %12s M/s | %s M/s (in-process, 1 thread)\n' \
        "Lua token bucket, 1000 keys, pipeline 32" "${lua_p32:--}" "$(ours token-bucket.hot1)"
    echo "(redis bytes: used_memory growth minus the keys' own $KEY_BYTES bytes, per key; per"
    echo " logged request: growth / ($LOG_KEYS x 500), keys included, as for sluice)"

    kill "$REDIS_PID"
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=
}

if command -v redis-server >/dev/null && command -v redis-cli >/dev/null &&
    command -v redis-benchmark >/dev/null; then
    peer_redis
else
    echo
    echo "== peer: redis-server not installed (scripts/deps.sh installs it); skipped =="
fi

# ---- 4. the goals, in one table --------------------------------------------
echo
echo "== summary: the issue's goals (2 thr = aggregate / 2, per thread) =="
awk '
    { v[$1] = $2 }
    function row(goal, x, ok) {
        printf "%-56s | %10s | %s\n", goal, x, ok ? "yes" : "NO"
        if (!ok) bad++
    }
    function max(a, b) { return a > b ? a : b }
    END {
        printf "%-56s | %10s | %s\n", "goal", "measured", "met?"
        print "---------------------------------------------------------+------------+-----"
        n = split("token-bucket gcra fixed-window", A, " ")
        for (i = 1; i <= n; i++) {
            a = A[i]
            if ((a ".hot1") in v) row(a " hot keys, 1 thr >= 20 M/s", sprintf("%.2f", v[a ".hot1"]), v[a ".hot1"] >= 20)
            if ((a ".hot2") in v) row(a " hot keys, 2 thr >= 20 M/s/thr", sprintf("%.2f", v[a ".hot2"] / 2), v[a ".hot2"] / 2 >= 20)
            if ((a ".many1") in v) row(a " 1M keys, 1 thr >= 5 M/s", sprintf("%.2f", v[a ".many1"]), v[a ".many1"] >= 5)
            if ((a ".many1_batched") in v) row(a " 1M keys, 1 thr >= 5 M/s, sl_allow_many", sprintf("%.2f", v[a ".many1_batched"]), v[a ".many1_batched"] >= 5)
            if ((a ".many2") in v) row(a " 1M keys, 2 thr >= 5 M/s/thr", sprintf("%.2f", v[a ".many2"] / 2), v[a ".many2"] / 2 >= 5)
            if ((a ".bytes_alloc") in v) {
                b = max(v[a ".bytes_alloc"], v[a ".bytes_rss"])
                row(a " <= 32 B/key beyond key", sprintf("%.1f", b), b <= 32)
            }
        }
        if ("sliding-log.bytes_per_req_alloc" in v) {
            b = max(v["sliding-log.bytes_per_req_alloc"], v["sliding-log.bytes_per_req_rss"])
            row("sliding-log <= 4.5 B per logged request", sprintf("%.2f", b), b <= 4.5)
        }
        if ("sliding-buckets.p60_bytes_alloc" in v) {
            b = max(v["sliding-buckets.p60_bytes_alloc"], v["sliding-buckets.p60_bytes_rss"])
            row("sliding-buckets P=60 <= 256 B/key", sprintf("%.1f", b), b <= 256)
        }
        for (k in v) if (k ~ /^replay\./) {
            if (!("lo" in r) || v[k] < r["lo"]) { r["lo"] = v[k]; r["algo"] = substr(k, 8) }
        }
        if ("lo" in r) row("replay >= 5 M lines/s (slowest: " r["algo"] ")", sprintf("%.2f", r["lo"]), r["lo"] >= 5)
        printf "\nall goals met: %s\n", bad ? "no" : "yes"
    }' "$TMP/results.txt"

# ---- 5. the server: sluiced against redis-server (bench/server.sh) ---------
# Its own servers, ports and table; see "sluiced against redis-server" in
# bench/README.md.
echo
B="$B" timeout 1800 "$ROOT/bench/server.sh" $QUICK
