#!/usr/bin/env bash
# bench/fleet.sh -- sluiced nodes deciding through one Redis (--backend
# redis://) against the textbook design, side by side in one run, with the
# same client (redis-benchmark, 50 clients) and the same redis-server:
#
#   LUA      EVALSHA <token bucket> 1 bucket:__rand_int__ 100 10000
#            the clients call a textbook token-bucket script on Redis
#            directly, one EVALSHA per request (the same script as
#            bench/server.sh)
#   FLEET    RL.ALLOW key:__rand_int__ 100 10s  on sluiced --backend redis://
#            (token bucket, exact, Redis's clock; sluiced --threads 1)
#   MODULE   the same on a sluiced whose Redis (a second redis-server, same
#            CPU) has build/sluice.so loaded: the backend sends RL.ALLOW
#            to the module instead of the script (docs/module.md); "redis
#            us/dec" is that Redis's CPU
#   LOCAL    the same on a sluiced with its local store (no Redis): the
#            price of the extra hop
#
# over KEYS random keys, P=1 (one request in flight per client), repeated
# REPS times in interleaved order, medians.  For each run it measures the
# client's rate and latency, and the CPU time redis-server spent (from
# /proc): "redis us/dec" is Redis CPU per decision, "dec per redis-CPU-s"
# its inverse.  The goal ("sluiced + Redis >= 1.5x the textbook path's
# throughput at equal Redis CPU") is judged on decisions per Redis CPU
# second: on this 2-core machine the client, Redis and sluiced cannot each
# have a core, so raw rates compare the scheduler as much as the designs;
# the raw rates are printed too.
#
# Then the over-admission count, in the same run: two sluiced nodes on the
# same Redis, each hammered by its own redis-benchmark at once on HOT keys
# with a fixed window of HOTL per second; the allowed decisions of both
# nodes (their INFO) must not pass HOT x HOTL per window spanned -- and with
# demand far above the limit, should reach it in every whole window.
#
#   bench/fleet.sh            full run (about 5 minutes)
#   bench/fleet.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per run, default
# 200000; --quick 10000), REPS (default 3; --quick 1), KEYS (100000),
# CLIENTS (50), HOT (20), HOTL (50).  Servers listen on free 127.0.0.1 ports
# and are stopped by their PIDs on exit; every step runs under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/fleet.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${N:=10000}" "${REPS:=1}"
else
    : "${N:=200000}" "${REPS:=3}"
fi
: "${KEYS:=100000}" "${CLIENTS:=50}" "${HOT:=20}" "${HOTL:=50}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-fleet-bench.XXXXXX)
PIDS=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for pid in $PIDS; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


for t in redis-server redis-cli redis-benchmark python3 taskset; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs redis-server)"
done
timeout 600 make -s -C "$ROOT" "$B/sluiced" "$B/sluice.so" >&2

TICK=$(getconf CLK_TCK)
NCPU=$(nproc)
# pinning: the client on CPU 0, the servers on the last CPU (the same one
# for Redis and sluiced: the point is Redis's CPU per decision)
SCPU=$((NCPU - 1))

# ---- the servers ----------------------------------------------------------
RPORT=$(free_port)
taskset -c "$SCPU" redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" &
REDIS_PID=$!
PIDS="$PIDS $REDIS_PID"
wait_pong "$RPORT" || die "redis-server did not start on port $RPORT: $(tail -5 "$TMP/redis.log")"
MPORT=$(free_port)
taskset -c "$SCPU" redis-server --port "$MPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/mredis.log" --dir "$TMP" --loadmodule "$BD/sluice.so" &
MREDIS_PID=$!
PIDS="$PIDS $MREDIS_PID"
wait_pong "$MPORT" || die "redis-server (module) did not start: $(tail -5 "$TMP/mredis.log")"

# start_sluiced LOG [ARGS...]: sets PORT_OUT and PID_OUT.
start_sluiced() {
    local log=$1 port='' pid
    shift
    taskset -c "$SCPU" "$SLUICED" --port 0 --http-port 0 --grpc-port 0 --threads 1 "$@" >"$log" 2>&1 &
    pid=$!
    PIDS="$PIDS $pid"
    for _ in $(seq 100); do
        port=$(sed -n 's/.*msg="listening" addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || die "sluiced exited: $(tail -5 "$log")"
        sleep 0.1
    done
    if [ -z "$port" ] || ! wait_pong "$port"; then
        die "sluiced did not start: $(tail -5 "$log")"
    fi
    PORT_OUT=$port
    PID_OUT=$pid
}
start_sluiced "$TMP/fleet1.log" --backend "redis://127.0.0.1:$RPORT"
F1PORT=$PORT_OUT
F1_PID=$PID_OUT
start_sluiced "$TMP/fleet2.log" --backend "redis://127.0.0.1:$RPORT"
F2PORT=$PORT_OUT
start_sluiced "$TMP/fleetm.log" --backend "redis://127.0.0.1:$MPORT"
FMPORT=$PORT_OUT
FM_PID=$PID_OUT
start_sluiced "$TMP/local.log"
LPORT=$PORT_OUT
L_PID=$PID_OUT

# The textbook atomic token bucket (bench/textbook_token_bucket.lua).
SHA=$(load_textbook "$RPORT")

# Correctness before speed: each path answers what it should, and the
# fleet's decision is in Redis (the second node sees the first's charge).
r=$(cli "$RPORT" evalsha "$SHA" 1 check 100 10000 | tr '\n' ' ')
[ "$r" = "1 99 " ] || die "the Lua bucket answered '$r', expected '1 99'"
r=$(cli "$F1PORT" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW through Redis answered '$r'" ;; esac
r=$(cli "$F2PORT" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 98 0 "*" 0 ") ;; *) die "the second node answered '$r', expected remaining 98" ;; esac
r=$(info_field "$FMPORT" backend backend_redis_path)
[ "$r" = module ] || die "sluiced on the module's Redis says backend_redis_path:$r"
r=$(info_field "$F1PORT" backend backend_redis_path)
[ "$r" = script ] || die "sluiced on the plain Redis says backend_redis_path:$r"
r=$(cli "$FMPORT" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW through the module answered '$r'" ;; esac
[ "$(cli "$MPORT" TYPE 'sl:m0:{check}')" = sluice-rl ] || die "no module key for 'check'"
r=$(cli "$LPORT" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW (local) answered '$r'" ;; esac

# ---- the runs ---------------------------------------------------------------
# run NAME PORT PID RPID: one redis-benchmark run (pinned to CPU 0) against
# PORT; appends "NAME rps p50 p99 redis_us_per_dec server_us_per_dec" to
# $TMP/runs (server: the process PID answering, sluiced or Redis itself;
# redis: RPID, the Redis behind it).
run() {
    local name=$1 port=$2 pid=$3 rpid=$4 out r0 r1 s0 s1
    shift 4
    r0=$(cpu_ticks "$rpid")
    s0=$(cpu_ticks "$pid")
    out=$(timeout 600 taskset -c 0 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$N" \
        -r "$KEYS" --precision 3 --csv "$@" 2>"$TMP/rb.err") ||
        die "redis-benchmark failed for $name: $(tail -3 "$TMP/rb.err")"
    r1=$(cpu_ticks "$rpid")
    s1=$(cpu_ticks "$pid")
    echo "$out" | tr -d '"\r' | awk -F, -v n="$name" -v rc=$((r1 - r0)) -v sc=$((s1 - s0)) \
        -v tick="$TICK" -v req="$N" \
        'NR > 1 && $(NF - 6) + 0 > 0 {
            print n, $(NF - 6), $(NF - 3), $(NF - 1), 1e6 * rc / tick / req, 1e6 * sc / tick / req
            f = 1; exit
         }
         END { if (!f) exit 1 }' >>"$TMP/runs" || die "no result line for $name: $out"
}
TESTS=4
one_test() {
    case $1 in
    0) run LUA "$RPORT" "$REDIS_PID" "$REDIS_PID" EVALSHA "$SHA" 1 'bucket:__rand_int__' 100 10000 ;;
    1) run FLEET "$F1PORT" "$F1_PID" "$REDIS_PID" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    2) run MODULE "$FMPORT" "$FM_PID" "$MREDIS_PID" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    3) run LOCAL "$LPORT" "$L_PID" "$REDIS_PID" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    esac
}
note "redis-benchmark: $N requests per run, $KEYS keys, $CLIENTS clients, P=1, $REPS rep(s)..."
load0=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$REPS"); do
    for i in $(seq 0 $((TESTS - 1))); do
        one_test $(((i + rep - 1) % TESTS))
    done
    note "  rep $rep done"
done

# ---- over-admission: two nodes, hot keys, demand far above the limit ------
HN=$((N / 2))
a0=$(($(info_field "$F1PORT" stats allowed) + $(info_field "$F2PORT" stats allowed)))
d0=$(($(info_field "$F1PORT" stats decisions) + $(info_field "$F2PORT" stats decisions)))
t0=$(date +%s%N)
timeout 600 taskset -c 0 redis-benchmark -h 127.0.0.1 -p "$F1PORT" -c $((CLIENTS / 2)) -n "$HN" \
    -r "$HOT" -q RL.ALLOW 'hot:__rand_int__' "$HOTL" 1s ALGO fixed-window >/dev/null 2>&1 &
b1=$!
timeout 600 taskset -c 0 redis-benchmark -h 127.0.0.1 -p "$F2PORT" -c $((CLIENTS / 2)) -n "$HN" \
    -r "$HOT" -q RL.ALLOW 'hot:__rand_int__' "$HOTL" 1s ALGO fixed-window >/dev/null 2>&1 &
b2=$!
wait "$b1" || die "redis-benchmark (node 1, hot keys) failed"
wait "$b2" || die "redis-benchmark (node 2, hot keys) failed"
t1=$(date +%s%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
allowed=$(($(info_field "$F1PORT" stats allowed) + $(info_field "$F2PORT" stats allowed) - a0))
decided=$(($(info_field "$F1PORT" stats decisions) + $(info_field "$F2PORT" stats decisions) - d0))
ms=$(((t1 - t0) / 1000000))
# the fixed windows (1 s, aligned on Redis's clock) a run of ms touches: at
# most ceil(ms/1000) + 1; whole windows inside it: at least floor(ms/1000) - 1
wmax=$(((ms + 999) / 1000 + 1))
wmin=$((ms / 1000 - 1))
[ "$wmin" -ge 0 ] || wmin=0
amax=$((HOT * HOTL * wmax))
amin=$((HOT * HOTL * wmin))
f1err=$(info_field "$F1PORT" stats error_replies)
f2err=$(info_field "$F2PORT" stats error_replies)
hits=$(($(info_field "$F1PORT" backend backend_deny_cache_hits) + \
    $(info_field "$F2PORT" backend backend_deny_cache_hits)))

# ---- the table ------------------------------------------------------------------
rversion=$(redis-server --version | awk '{ print $3 }')
echo
echo "== sluiced + Redis ${rversion#v=} vs the textbook Lua path: redis-benchmark -c $CLIENTS -n $N -r $KEYS, P=1, median of $REPS =="
echo "   (one run; client on CPU 0, servers on CPU $SCPU; sluiced --threads 1; load $load0 -> $load1)"
awk '
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { rps[$1] = rps[$1] " " $2; p50[$1] = p50[$1] " " $3; p99[$1] = p99[$1] " " $4
      rus[$1] = rus[$1] " " $5; sus[$1] = sus[$1] " " $6 }
    END {
        label["LUA"] = "clients -> Redis EVALSHA token bucket"
        label["FLEET"] = "clients -> sluiced -> Redis (RL.ALLOW)"
        label["MODULE"] = "clients -> sluiced -> Redis module"
        label["LOCAL"] = "clients -> sluiced, local store"
        printf "%-40s | %9s | %7s | %7s | %12s | %18s | %13s\n", "path", "rps", "p50 ms", "p99 ms", "redis us/dec", "dec per redis-CPU-s", "server us/dec"
        print "-----------------------------------------+-----------+---------+---------+--------------+--------------------+--------------"
        n = split("LUA FLEET MODULE LOCAL", names, " ")
        for (j = 1; j <= n; j++) {
            k = names[j]
            if (!(k in rps)) continue
            r[k] = median(rps[k]); l50[k] = median(p50[k]); l99[k] = median(p99[k]); ru[k] = median(rus[k])
            printf "%-40s | %9.0f | %7.3f | %7.3f | %12.2f | %18s | %13.2f\n", label[k], r[k], l50[k], l99[k], \
                (k == "LOCAL" ? 0 : ru[k]), (k == "LOCAL" || ru[k] == 0 ? "-" : sprintf("%.0f", 1e6 / ru[k])), median(sus[k])
        }
        print ""
        eff = (ru["FLEET"] > 0 && ru["LUA"] > 0) ? ru["LUA"] / ru["FLEET"] : 0
        printf "%-62s | %9.2fx | %s\n", "goal: decisions per Redis CPU-s, fleet / textbook >= 1.5x", eff, (eff >= 1.5 ? "yes" : "NO")
        printf "%-62s | %9.2fx |\n", "raw rate, fleet / textbook (shared cores: see the header)", r["FLEET"] / r["LUA"]
        printf "%-62s | %+8.3f ms |\n", "latency price of the hop: fleet p50 - local p50", l50["FLEET"] - l50["LOCAL"]
        printf "%-62s | %+8.3f ms |\n", "                           fleet p99 - local p99", l99["FLEET"] - l99["LOCAL"]
        if ("MODULE" in r && ru["MODULE"] > 0) {
            printf "%-62s | %9.2fx |\n", "module path / script path: decisions per Redis CPU-s", ru["FLEET"] / ru["MODULE"]
            printf "%-62s | %9.2fx |\n", "module path / script path: raw rate", r["MODULE"] / r["FLEET"]
            printf "%-62s | %+8.3f ms |\n", "module path p50 - script path p50", l50["MODULE"] - l50["FLEET"]
            printf "%-62s | %+8.3f ms |\n", "module path p99 - script path p99", l99["MODULE"] - l99["FLEET"]
        }
    }' "$TMP/runs"
echo
echo "over-admission, two nodes at once on $HOT hot keys, fixed window $HOTL per 1 s, ${ms} ms:"
echo "  decisions $decided, allowed $allowed; bound for the windows spanned: <= $amax (and >= $amin with demand above the limit)"
echo "  deny-cache hits (both nodes): $hits; error replies: node1 $f1err, node2 $f2err"
ok=yes
[ "$allowed" -le "$amax" ] || ok=NO
[ "$f1err" = 0 ] && [ "$f2err" = 0 ] || ok=NO
echo "  no over-admission, no errors: $ok"
[ -n "$QUICK" ] && echo "(--quick: counts too small to judge the goals)"
[ "$ok" = yes ] || exit 1
exit 0
