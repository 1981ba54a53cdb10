#!/usr/bin/env bash
# bench/module.sh -- the sluice Redis module against Redis's own INCR and
# against the token-bucket script, on ONE redis-server pinned to one core,
# side by side in one run, with the same client (redis-benchmark, pinned to
# another core when there is one):
#
#   INCR counter:__rand_int__                     Redis's cheapest write (the floor)
#   EVALSHA <token bucket> 1 bucket:__rand_int__ 100 10000
#                                                 the textbook Lua bucket (bench/server.sh's)
#   RL.ALLOW key:__rand_int__ 100 10s             the module (token bucket, exact), the
#                                                 script's parameters: keys made and freed
#   RL.ALLOW live:__rand_int__ 100 1h             the module where keys live, as INCR's do
#
# Why two module rows: the module frees a key when its state comes to rest
# (its TTL), and a bucket of 100 per 10 s is at rest 100 ms after a request,
# so with these clients and keys most RL.ALLOWs make a key and most keys
# are expired again (a creation, a TTL, an expiry and a free each) -- while
# INCR's counters, once made, are only updated, and the script's hashes
# live a whole window (10 s).  100 per hour rests 36 s after a request: its
# keys live through the run, like INCR's, and compare the same work.  Both
# rows are judged.
#
# over KEYS random keys with CLIENTS clients, without pipelining and with
# -P PIPELINE, REPS times in interleaved order (each rep starts at another
# test); the table shows medians.  Two measures per test: requests a second
# (rps: what the client saw) and the server's CPU time per request (server
# us, from /proc: the CPU time of redis-server's main thread, which runs
# every command, over the run, so 1e6 / server us is decisions per
# core-second, whatever the client costs).
# Goals (issue 9): the module >= 0.9x INCR and >= 8x the script, per core:
# judged on the per-core rate (1 / server us) at each pipeline depth.
#
#   bench/module.sh            full run (a minute or two)
#   bench/module.sh --quick    smoke run: small counts, judges nothing
#   bench/module.sh --floors   also the floors (bench/module_floor.c, built
#                              here): a module command with RL.ALLOW's
#                              arguments that only replies (FLOOR.REPLY),
#                              that also opens the key and writes a module
#                              value (FLOOR.OPEN), and that also sets the
#                              TTL and propagates as RL.ALLOW does
#                              (FLOOR.TTL): what Redis's module machinery
#                              costs before any decision
#
# Environment: B (build dir, default build), N (requests per run, default
# 200000; --quick 20000), REPS (default 3; --quick 1), KEYS (default
# 100000), CLIENTS (default 50), PIPELINE (default 16), CORE (the core
# redis-server is pinned to, default the last one).  redis-server listens on
# a free 127.0.0.1 port and is stopped by its PID when the script exits;
# every step runs under `timeout`.  Exits 0 when the run completed (goals
# met or not), 1 when something failed (the server, or error replies).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
FLOORS=
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    --floors) FLOORS=1 ;;
    *)
        echo "usage: bench/module.sh [--quick] [--floors]" >&2
        exit 2
        ;;
    esac
done
if [ -n "$QUICK" ]; then
    : "${N:=20000}" "${REPS:=1}"
else
    : "${N:=200000}" "${REPS:=3}"
fi
NCPU=$(nproc)
: "${KEYS:=100000}" "${CLIENTS:=50}" "${PIPELINE:=16}" "${CORE:=$((NCPU - 1))}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
MODULE=$BD/sluice.so
TMP=$(mktemp -d /tmp/sluice-module-bench.XXXXXX)
REDIS_PID=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


for t in redis-server redis-cli redis-benchmark python3 taskset; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs redis-server)"
done
timeout 600 make -s -C "$ROOT" "$B/sluice.so" >&2
FLOOR_ARGS=()
if [ -n "$FLOORS" ]; then
    timeout 120 "${CC:-cc}" -std=c11 -O2 -fPIC -shared -fvisibility=hidden -I"$ROOT/src/module" \
        -o "$TMP/floor.so" "$ROOT/bench/module_floor.c" "$ROOT/src/module/redismodule_api.c" ||
        die "could not build bench/module_floor.c"
    FLOOR_ARGS=(--loadmodule "$TMP/floor.so")
fi


# ---- the server: one redis-server, one core -----------------------------------
PORT=$(free_port)
taskset -c "$CORE" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" --loadmodule "$MODULE" "${FLOOR_ARGS[@]}" &
REDIS_PID=$!
wait_pong "$PORT" || die "redis-server did not start: $(tail -5 "$TMP/redis.log")"
# the client on the other cores (all of them but the server's)
CLIENT_CPUS=$(python3 -c "print(','.join(str(c) for c in range($NCPU) if c != $CORE) or '$CORE')")

# The textbook token bucket (bench/textbook_token_bucket.lua).
SHA=$(load_textbook "$PORT")

# Correctness before speed.
r=$(cli "$PORT" evalsha "$SHA" 1 check:lua 100 10000 | tr '\n' ' ')
[ "$r" = "1 99 " ] || die "the Lua bucket answered '$r', expected '1 99'"
r=$(cli "$PORT" RL.ALLOW check:rl 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW answered '$r'" ;; esac
r=$(cli "$PORT" incr check:n)
[ "$r" = 1 ] || die "INCR answered '$r'"

# ---- the runs -------------------------------------------------------------------
# cpu_ns PID: the CPU time of redis-server's main thread, which runs every
# command, in ns (/proc/PID/schedstat: finer than /proc/PID/stat's ticks,
# which are 2.5% of a 200,000-request run at 2 us a request).
cpu_ns() { cut -d' ' -f1 "/proc/$1/schedstat"; }
# run NAME PIPELINE COMMAND...: appends "NAME PIPELINE rps p50 p99 server_us".
run() {
    local name=$1 pipe=$2 out c0 c1
    shift 2
    c0=$(cpu_ns "$REDIS_PID")
    out=$(timeout 600 taskset -c "$CLIENT_CPUS" redis-benchmark -h 127.0.0.1 -p "$PORT" \
        -c "$CLIENTS" -n "$N" -r "$KEYS" -P "$pipe" --precision 3 --csv "$@" 2>"$TMP/rb.err") ||
        die "redis-benchmark failed for $name: $(tail -3 "$TMP/rb.err")"
    c1=$(cpu_ns "$REDIS_PID")
    echo "$out" | tr -d '"\r' | awk -F, -v n="$name" -v p="$pipe" -v sc=$((c1 - c0)) \
        -v req="$N" \
        'NR > 1 && $(NF - 6) + 0 > 0 {
            print n, p, $(NF - 6), $(NF - 3), $(NF - 1), sc / 1000 / req
            f = 1; exit
         }
         END { if (!f) exit 1 }' >>"$TMP/runs" || die "no result line for $name: $out"
}

note "redis-benchmark: $N requests per run, $KEYS keys, $CLIENTS clients, P=1 and P=$PIPELINE, $REPS rep(s); redis-server on core $CORE, client on $CLIENT_CPUS..."
load0=$(cut -d' ' -f1 /proc/loadavg)
one_test() {
    case $1 in
    0) run INCR "$2" INCR 'counter:__rand_int__' ;;
    1) run LUA "$2" EVALSHA "$SHA" 1 'bucket:__rand_int__' 100 10000 ;;
    2) run MODULE "$2" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    3) run LIVE "$2" RL.ALLOW 'live:__rand_int__' 100 1h ;;
    4) run FREPLY "$2" FLOOR.REPLY 'freply:__rand_int__' 100 1h ;;
    5) run FOPEN "$2" FLOOR.OPEN 'fopen:__rand_int__' 100 1h ;;
    6) run FTTL "$2" FLOOR.TTL 'fttl:__rand_int__' 100 1h ;;
    esac
}
NTESTS=4
[ -z "$FLOORS" ] || NTESTS=7
for rep in $(seq "$REPS"); do
    for pipe in 1 "$PIPELINE"; do
        for i in $(seq 0 $((NTESTS - 1))); do
            one_test $(((i + rep - 1) % NTESTS)) "$pipe"
        done
    done
    note "  rep $rep done"
done
load1=$(cut -d' ' -f1 /proc/loadavg)

errs=$(info_field "$PORT" stats total_error_replies)
[ "$errs" = 0 ] || die "redis-server answered $errs errors during the benchmark"
calls=$(cli "$PORT" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_rl\.allow:calls=\([0-9]*\),.*/\1/p')
[ "$calls" = $((4 * REPS * N + 1)) ] || die "RL.ALLOW ran $calls times, expected $((4 * REPS * N + 1))"

# ---- the table ----------------------------------------------------------------------
rversion=$(redis-server --version | awk '{ print $3 }')
echo
echo "== sluice module vs redis-server ${rversion#v=}: redis-benchmark -c $CLIENTS -n $N -r $KEYS, median of $REPS =="
echo "   (one redis-server pinned to core $CORE; $NCPU cores; load $load0 -> $load1)"
awk -v quick="$QUICK" -v floors="$FLOORS" '
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { k = $1 SUBSEP $2; rps[k] = rps[k] " " $3; p50[k] = p50[k] " " $4; p99[k] = p99[k] " " $5
      sus[k] = sus[k] " " $6
      if (!($2 in seenp)) { seenp[$2] = 1; pipes[++np] = $2 } }
    END {
        nn = split(floors ? "INCR LUA MODULE LIVE FREPLY FOPEN FTTL" : "INCR LUA MODULE LIVE", names, " ")
        label["INCR"] = "INCR counter:__rand_int__"
        label["LUA"] = "EVALSHA token bucket (Lua)"
        label["MODULE"] = "RL.ALLOW key 100 10s (module: keys made+freed)"
        label["LIVE"] = "RL.ALLOW key 100 1h (module: keys live)"
        label["FREPLY"] = "(floor) reply only"
        label["FOPEN"] = "(floor) + open key, write value"
        label["FTTL"] = "(floor) + TTL, propagate"
        printf "%-46s | %2s | %9s | %7s | %7s | %9s | %10s | %8s | %7s\n", "test", "P", "rps", "p50 ms", "p99 ms", "server us", "per core/s", "vs INCR", "vs Lua"
        print "-----------------------------------------------+----+-----------+---------+---------+-----------+------------+----------+--------"
        for (i = 1; i <= np; i++) {
            p = pipes[i]
            for (j = 1; j <= nn; j++) { n = names[j]; us[n, p] = median(sus[n SUBSEP p]) }
            for (j = 1; j <= nn; j++) {
                n = names[j]; k = n SUBSEP p
                pc = us[n, p] > 0 ? 1e6 / us[n, p] : 0
                printf "%-46s | %2s | %9.0f | %7.3f | %7.3f | %9.2f | %10.0f | %7.2fx | %6.2fx\n", label[n], p, median(rps[k]),
                    median(p50[k]), median(p99[k]), us[n, p], pc, us["INCR", p] / us[n, p], us["LUA", p] / us[n, p]
            }
        }
        print ""
        printf "%-54s | %9s | %s\n", "goal (per core: 1 / server us)", "measured", "met?"
        print "-------------------------------------------------------+-----------+-----"
        split("LIVE MODULE", rows, " ")
        rowname["LIVE"] = "keys live"
        rowname["MODULE"] = "keys made+freed"
        for (i = 1; i <= np; i++) {
            p = pipes[i]
            for (j = 1; j <= 2; j++) {
                m = rows[j]
                x = us["INCR", p] / us[m, p]
                printf "%-54s | %8.2fx | %s\n", "module (" rowname[m] ") >= 0.9x INCR, P=" p, x, quick ? "(quick: not judged)" : (x >= 0.9 ? "yes" : "NO")
                x = us["LUA", p] / us[m, p]
                printf "%-54s | %8.2fx | %s\n", "module (" rowname[m] ") >= 8x Lua token bucket, P=" p, x, quick ? "(quick: not judged)" : (x >= 8 ? "yes" : "NO")
            }
            printf "%-54s | %8.2fx | %s\n", "(ceiling) Lua token bucket / INCR, P=" p, us["LUA", p] / us["INCR", p], "8x Lua needs this >= 8"
        }
        print ""
        print "server us: redis-server main-thread CPU time per request; per core/s = 1e6 / server us."
        print "vs INCR, vs Lua: per-core rate ratios (the issue goals); rps is what the client saw."
    }' "$TMP/runs"
