#!/usr/bin/env bash
# bench/server.sh -- sluiced against redis-server, side by side in one run,
# with the same client (redis-benchmark) on the same machine:
#
#   INCR counter:__rand_int__                    on redis-server (the floor)
#   EVALSHA <token bucket> 1 bucket:__rand_int__ 100 10000
#                                                on redis-server (the textbook
#                                                atomic rate limiter in Lua)
#   RL.ALLOW key:__rand_int__ 100 10s            on sluiced (token bucket), and
#                                                on a second sluiced with
#                                                --threads 1 (below)
#   RL.CHECK bench DESCRIPTOR user u:__rand_int__ on sluiced, rules: 100 a minute
#                                                AND 1000 an hour per user (two
#                                                counters, all-or-none)
#
# each over 100,000 random keys with 50 clients, without pipelining and with
# -P 16, repeated REPS times in interleaved order; the table shows the median
# of each column.  PING on each server is measured too, as the ceiling the
# client and the loopback allow (no work behind the reply).  Goals (the issue): RL.ALLOW >= 1.0x INCR and >= 3x the Lua
# bucket; p99 < 1 ms at 50 clients without pipelining.
#
#   bench/server.sh            full run (about 2 minutes)
#   bench/server.sh --quick    smoke run: small counts, judges nothing
#
# Environment: B (build dir, default build), N (requests per run, default
# 300000; --quick 20000), REPS (default 3; --quick 1), KEYS (default 100000),
# CLIENTS (default 50), PIPELINE (default 16), THREADS (sluiced --threads,
# default: its own default, one per core).  PIN=1: every server on CPU 1
# (taskset) with sluiced --threads 1, redis-benchmark on CPU 0 -- the
# like-for-like setting of "pinned to one core", and a goal of its own
# (issue 30: RL.ALLOW >= 1.5x INCR at -P PIPELINE).  BASE=path: another
# sluiced binary (e.g. the main branch's build) run beside this one with
# the same flags, as the row "RL.ALLOW, BASE", interleaved with the rest
# (before/after in one run).  CLIENT=respblast: bench/respblast.c instead
# of redis-benchmark for every run, a client that sends commands encoded
# before the run and only measures replies (with PIN=1, redis-benchmark
# on its one core is slower than the servers at -P 16, so every server
# row measures the client; "client %" shows it).  Both servers listen on free
# 127.0.0.1 ports and are stopped by their PIDs when the script exits; every
# step runs under `timeout`.  Exits 0 when the run completed (goals met or
# not), 1 when something failed (a server, or replies that were errors).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/server.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${N:=20000}" "${REPS:=1}"
else
    : "${N:=300000}" "${REPS:=3}"
fi
: "${KEYS:=100000}" "${CLIENTS:=50}" "${PIPELINE:=16}" "${THREADS:=}" "${PIN:=}" "${BASE:=}"
SRV_PIN=()
CLI_PIN=()
if [ -n "$PIN" ]; then
    [ "$(nproc)" -gt 1 ] || die "PIN=1 needs two CPUs (servers on 1, the client on 0)"
    command -v taskset >/dev/null || die "PIN=1 needs taskset (util-linux)"
    SRV_PIN=(taskset -c 1)
    CLI_PIN=(taskset -c 0)
    THREADS=1
fi
[ -z "$BASE" ] || [ -x "$BASE" ] || die "BASE=$BASE is not an executable sluiced"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-server-bench.XXXXXX)
REDIS_PID=
SLUICED_PID=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for pid in $SLUICED_PID $REDIS_PID; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


for t in redis-server redis-cli redis-benchmark python3; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs redis-server)"
done
timeout 600 make -s -C "$ROOT" "$B/sluiced" >&2
: "${CLIENT:=redis-benchmark}"
RESPBLAST=$BD/bench/respblast
case $CLIENT in
redis-benchmark) ;;
respblast)
    mkdir -p "$BD/bench"
    cc -O2 -o "$RESPBLAST" "$ROOT/bench/respblast.c" || die "cannot build bench/respblast.c"
    ;;
*) die "CLIENT=$CLIENT: redis-benchmark or respblast" ;;
esac


# ---- the servers ----------------------------------------------------------
RPORT=$(free_port)
${SRV_PIN[@]+"${SRV_PIN[@]}"} redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" &
REDIS_PID=$!
wait_pong "$RPORT" || die "redis-server did not start on port $RPORT: $(tail -5 "$TMP/redis.log")"

cat >"$TMP/rules.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      - {unit: minute, requests_per_unit: 100}
      - {unit: hour, requests_per_unit: 1000}
YAML
# start_sluiced LOG [ARGS...]: starts sluiced ($SL_BIN, default $SLUICED)
# on a free port, appends its PID to SLUICED_PID and sets PORT_OUT and
# PID_OUT.
start_sluiced() {
    local log=$1 port='' pid
    shift
    ${SRV_PIN[@]+"${SRV_PIN[@]}"} "${SL_BIN:-$SLUICED}" --port 0 --http-port 0 --grpc-port 0 --rules "$TMP/rules.yaml" "$@" >"$log" 2>&1 &
    pid=$!
    SLUICED_PID="$SLUICED_PID $pid"
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
start_sluiced "$TMP/sluiced.log" ${THREADS:+--threads "$THREADS"}
SPORT=$PORT_OUT
S_PID=$PID_OUT
SBPORT=
SB_PID=
if [ -n "$BASE" ]; then
    SL_BIN=$BASE start_sluiced "$TMP/sluiced-base.log" ${THREADS:+--threads "$THREADS"}
    SBPORT=$PORT_OUT
    SB_PID=$PID_OUT
fi
# The same server with one worker: redis-benchmark takes a whole core of
# this machine, and redis-server answers on one thread, so on 2 cores one
# worker is the like-for-like setting (the default, one per core, also
# competes with the client for its core).  Skipped when THREADS is given.
S1PORT=
S1_PID=
if [ -z "$THREADS" ] && [ "$(nproc)" -gt 1 ]; then
    start_sluiced "$TMP/sluiced1.log" --threads 1
    S1PORT=$PORT_OUT
    S1_PID=$PID_OUT
fi

# The textbook atomic token bucket in Lua (bench/textbook_token_bucket.lua).
SHA=$(load_textbook "$RPORT")

# Correctness before speed: each command answers what it should.
r=$(cli "$RPORT" evalsha "$SHA" 1 check 100 10000 | tr '\n' ' ')
[ "$r" = "1 99 " ] || die "the Lua bucket answered '$r', expected '1 99'"
r=$(cli "$SPORT" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW answered '$r'" ;; esac
r=$(cli "$SPORT" RL.CHECK bench DESCRIPTOR user check | head -1)
[ "$r" = 1 ] || die "RL.CHECK answered '$r'"
r=$(cli "$RPORT" incr check:n)
[ "$r" = 1 ] || die "INCR answered '$r'"

# ---- the runs ---------------------------------------------------------------
TICK=$(getconf CLK_TCK)
# run NAME PORT PID PIPELINE COMMAND...: one redis-benchmark run against the
# server PID listening on PORT; appends "NAME PIPELINE rps p50 p99 client%
# server_us" to $TMP/runs: client% is redis-benchmark's CPU time over the
# run's wall time (near 100: the client, not the server, sets the pace),
# server_us the server's CPU time per request in microseconds.  The CSV's
# rate and latencies are counted from the end, as a test name may hold
# commas.
run() {
    local name=$1 port=$2 pid=$3 pipe=$4 out c0 c1 t
    shift 4
    c0=$(cpu_ticks "$pid")
    if [ "$CLIENT" = respblast ]; then
        # the same load from bench/respblast.c; its line rewritten as the
        # CSV row below reads it: rate at NF-6, p50 at NF-3, p99 at NF-1
        out=$( (
            TIMEFORMAT='%R %U %S'
            time timeout 600 ${CLI_PIN[@]+"${CLI_PIN[@]}"} "$RESPBLAST" -p "$port" -c "$CLIENTS" -n "$N" \
                -r "$KEYS" -P "$pipe" -- "$@" 2>"$TMP/rb.err"
        ) 2>"$TMP/rb.time") || die "respblast failed for $name: $(tail -3 "$TMP/rb.err")"
        out=$(echo "$out" | awk '{ print "test,x"; print "x," $8 ",0,0," $10 ",0," $12 ",0" }')
    else
        out=$( (
            TIMEFORMAT='%R %U %S'
            time timeout 600 ${CLI_PIN[@]+"${CLI_PIN[@]}"} redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$N" \
                -r "$KEYS" -P "$pipe" --precision 3 --csv "$@" 2>"$TMP/rb.err"
        ) 2>"$TMP/rb.time") || die "redis-benchmark failed for $name: $(tail -3 "$TMP/rb.err")"
    fi
    c1=$(cpu_ticks "$pid")
    t=$(tail -1 "$TMP/rb.time")
    echo "$out" | tr -d '"\r' | awk -F, -v n="$name" -v p="$pipe" -v t="$t" -v sc=$((c1 - c0)) \
        -v tick="$TICK" -v req="$N" \
        'NR > 1 && $(NF - 6) + 0 > 0 {
            split(t, w, " ")
            print n, p, $(NF - 6), $(NF - 3), $(NF - 1), 100 * (w[2] + w[3]) / w[1], 1e6 * sc / tick / req
            f = 1; exit
         }
         END { if (!f) exit 1 }' >>"$TMP/runs" || die "no result line for $name: $out"
}

note "$CLIENT: $N requests per run, $KEYS keys, $CLIENTS clients, P=1 and P=$PIPELINE, $REPS rep(s)..."
load0=$(cut -d' ' -f1 /proc/loadavg)
# one_test N PIPE: the N-th test (0-based) of the list, at pipeline PIPE.
TESTS=8
one_test() {
    case $1 in
    0) run INCR "$RPORT" "$REDIS_PID" "$2" INCR 'counter:__rand_int__' ;;
    1) run LUA "$RPORT" "$REDIS_PID" "$2" EVALSHA "$SHA" 1 'bucket:__rand_int__' 100 10000 ;;
    2) run RL.ALLOW "$SPORT" "$S_PID" "$2" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    3) [ -z "$S1PORT" ] || run RL.ALLOW1 "$S1PORT" "$S1_PID" "$2" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    4) run RL.CHECK "$SPORT" "$S_PID" "$2" RL.CHECK bench DESCRIPTOR user 'u:__rand_int__' ;;
    5) run RPING "$RPORT" "$REDIS_PID" "$2" PING ;;
    6) run SPING "$SPORT" "$S_PID" "$2" PING ;;
    7) [ -z "$SBPORT" ] || run RL.ALLOWB "$SBPORT" "$SB_PID" "$2" RL.ALLOW 'key:__rand_int__' 100 10s ;;
    esac
}
# Each rep starts the list at a different test, so that no test always
# runs first (on a shared machine the order was seen to favour the first).
for rep in $(seq "$REPS"); do
    for pipe in 1 "$PIPELINE"; do
        for i in $(seq 0 $((TESTS - 1))); do
            one_test $(((i + (rep - 1) * 3) % TESTS)) "$pipe"
        done
    done
    note "  rep $rep done"
done
load1=$(cut -d' ' -f1 /proc/loadavg)

# Every request was a real decision: no error replies on either server.
s_err=$(info_field "$SPORT" stats error_replies)
s_dec=$(info_field "$SPORT" stats decisions)
r_err=$(info_field "$RPORT" stats total_error_replies)
want_dec=$((2 * REPS * N + 1))
[ "$s_err" = 0 ] || die "sluiced answered $s_err errors during the benchmark"
[ "$r_err" = 0 ] || die "redis-server answered $r_err errors during the benchmark"
[ "$s_dec" = "$want_dec" ] || die "sluiced made $s_dec decisions, expected $want_dec"
if [ -n "$S1PORT" ]; then
    s1_dec=$(info_field "$S1PORT" stats decisions)
    s1_err=$(info_field "$S1PORT" stats error_replies)
    [ "$s1_err" = 0 ] || die "sluiced (1 worker) answered $s1_err errors during the benchmark"
    [ "$s1_dec" = $((2 * REPS * N)) ] || die "sluiced (1 worker) made $s1_dec decisions, expected $((2 * REPS * N))"
fi
if [ -n "$SBPORT" ]; then
    sb_dec=$(info_field "$SBPORT" stats decisions)
    sb_err=$(info_field "$SBPORT" stats error_replies)
    [ "$sb_err" = 0 ] || die "sluiced (BASE) answered $sb_err errors during the benchmark"
    [ "$sb_dec" = $((2 * REPS * N)) ] || die "sluiced (BASE) made $sb_dec decisions, expected $((2 * REPS * N))"
fi
s_batched=$(info_field "$SPORT" stats decisions_batched)

# ---- the table ------------------------------------------------------------------
rversion=$(redis-server --version | awk '{ print $3 }')
sthreads=$(info_field "$SPORT" server threads)
echo
echo "== sluiced vs redis-server ${rversion#v=}: $CLIENT -c $CLIENTS -n $N -r $KEYS, median of $REPS =="
echo "   (one run; same client and machine; $(nproc) cores; sluiced $sthreads threads; load $load0 -> $load1)"
[ -z "$PIN" ] || echo "   (PIN=1: servers on CPU 1, redis-benchmark on CPU 0)"
[ -z "$BASE" ] || echo "   (BASE: $BASE)"
awk -v reps="$REPS" -v sthreads="$sthreads" -v pin="$PIN" -v pipeline="$PIPELINE" '
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { k = $1 SUBSEP $2; rps[k] = rps[k] " " $3; p50[k] = p50[k] " " $4; p99[k] = p99[k] " " $5
      ccpu[k] = ccpu[k] " " $6; sus[k] = sus[k] " " $7
      if (!($2 in seenp)) { seenp[$2] = 1; pipes[++np] = $2 } }
    END {
        nn = split("INCR LUA RL.ALLOW RL.ALLOWB RL.ALLOW1 RL.CHECK RPING SPING", names, " ")
        label["INCR"] = "redis INCR counter:__rand_int__"
        label["LUA"] = "redis EVALSHA token bucket (Lua)"
        label["RL.ALLOW"] = "sluiced RL.ALLOW key:__rand_int__ 100 10s"
        label["RL.ALLOWB"] = "  the same, BASE sluiced"
        label["RL.ALLOW1"] = "  the same, sluiced --threads 1"
        label["RL.CHECK"] = "sluiced RL.CHECK (2 limits) u:__rand_int__"
        label["RPING"] = "(ceiling) redis PING"
        label["SPING"] = "(ceiling) sluiced PING"
        printf "%-42s | %2s | %10s | %7s | %7s | %8s | %7s | %8s | %9s\n", "test", "P", "rps", "p50 ms", "p99 ms", "vs INCR", "vs Lua", "client %", "server us"
        print "-------------------------------------------+----+------------+---------+---------+----------+---------+----------+----------"
        for (i = 1; i <= np; i++)
            for (j = 1; j <= nn; j++) {
                n = names[j]; k = n SUBSEP pipes[i]
                if (!(k in rps)) continue # (reading rps[k] would make it: a row of zeros)
                r[n, pipes[i]] = median(rps[k]); l99[n, pipes[i]] = median(p99[k])
            }
        for (i = 1; i <= np; i++) {
            p = pipes[i]
            for (j = 1; j <= nn; j++) {
                n = names[j]; k = n SUBSEP p
                if (!(k in rps)) continue
                printf "%-42s | %2s | %10.0f | %7.3f | %7.3f | %7.2fx | %6.2fx | %8.0f | %9.2f\n", label[n], p, r[n, p],
                    median(p50[k]), l99[n, p], r[n, p] / r["INCR", p], r[n, p] / r["LUA", p],
                    median(ccpu[k]), median(sus[k])
            }
        }
        print ""
        printf "%-58s | %10s | %s\n", "goal", "measured", "met?"
        print "-----------------------------------------------------------+------------+-----"
        # judged for each sluiced: the default (one worker per core) and,
        # when it ran, one worker; "met" counts the default only if no
        # one-worker run exists, else either setting meeting all of them
        nv = split("RL.ALLOW RL.ALLOW1", vs, " ")
        tag["RL.ALLOW"] = " (" sthreads " workers)"; tag["RL.ALLOW1"] = " (1 worker)"
        for (v = 1; v <= nv; v++) {
            a = vs[v]
            if (!((a SUBSEP 1) in rps)) continue
            badv = 0
            for (i = 1; i <= np; i++) {
                p = pipes[i]
                x = r[a, p] / r["INCR", p]
                printf "%-58s | %9.2fx | %s\n", "RL.ALLOW >= 1.0x INCR, P=" p tag[a], x, (x >= 1.0 ? "yes" : "NO")
                if (x < 1.0) badv++
                x = r[a, p] / r["LUA", p]
                printf "%-58s | %9.2fx | %s\n", "RL.ALLOW >= 3x Lua token bucket, P=" p tag[a], x, (x >= 3.0 ? "yes" : "NO")
                if (x < 3.0) badv++
            }
            x = l99[a, 1]
            printf "%-58s | %7.3f ms | %s\n", "RL.ALLOW p99 < 1 ms, 50 clients, P=1" tag[a], x, (x < 1.0 ? "yes" : "NO")
            if (x >= 1.0) badv++
            if (!badv) good++
        }
        if (pin != "" && (("RL.ALLOW" SUBSEP pipeline) in rps)) {
            x = r["RL.ALLOW", pipeline] / r["INCR", pipeline]
            printf "%-58s | %9.2fx | %s\n", "RL.ALLOW >= 1.5x INCR, P=" pipeline ", pinned to one core", x, (x >= 1.5 ? "yes" : "NO")
            if (("RL.ALLOWB" SUBSEP pipeline) in rps)
                printf "%-58s | %9.2fx |\n", "  (BASE sluiced: " sprintf("%.2fx", r["RL.ALLOWB", pipeline] / r["INCR", pipeline]) " INCR; this / BASE)", r["RL.ALLOW", pipeline] / r["RL.ALLOWB", pipeline]
        }
        printf "\nP=1 ceiling (PING on each server, nothing behind the reply): redis %.0f, sluiced %.0f rps\n",
            r["RPING", 1], r["SPING", 1]
        printf "client %%: redis-benchmark CPU time / wall time (100 = one core busy: the client sets the pace);\n"
        printf "server us: the server process CPU time per request (all its threads)\n"
        c = r["RPING", 1] > r["SPING", 1] ? r["RPING", 1] : r["SPING", 1]
        if (3 * r["LUA", 1] > c)
            printf "(3x Lua at P=1 is %.0f rps, above both PING ceilings: no server can reach it with this client here)\n", 3 * r["LUA", 1]
        printf "server goals met: %s\n", good ? "yes" : "no"
    }' "$TMP/runs"
[ -n "$QUICK" ] && echo "(--quick: counts too small to judge the goals)"
echo "(checked: every RL.ALLOW was a decision ($s_dec counted, ${s_batched:-0} of them in pipelined batches), no error replies on either server)"
exit 0
