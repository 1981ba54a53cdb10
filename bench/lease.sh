#!/usr/bin/env bash
# bench/lease.sh -- leased quota (--lease on, docs/fleet.md "Leases")
# against the per-request path, side by side in one run: three sluiced
# nodes with --lease on, three with --lease off and three on their local
# stores, the six fleet nodes on ONE redis-server, one hot key:
#
#   ON     RL.ALLOW hot 10^12 3650d ALGO fixed-window through the three
#          --lease on nodes at once (one redis-benchmark each)
#   OFF    the same through the three --lease off nodes (every decision a
#          round trip to Redis, batched per loop turn)
#   LOCAL  the same through three nodes on their own stores (no Redis):
#          the speed leases aim at
#
# Throughput: -c CLIENTS -P PIPE per node, decisions/s summed over the three
# nodes; latency: -c CLIENTS -P 1 (each request alone), the worst node's p99.
# Each run REPS times, interleaved (ON, OFF, LOCAL, then rotated), medians.
# "redis us/dec": Redis CPU per decision in that run (/proc).
#
# Then exactness, the same three nodes at once, demand twice the limit, one
# window (ten years: at Redis's clock every request of a run is in it; a
# bucket's is a year, which refills nothing in a run): a fresh key of
# limit LIM for fixed-window and token-bucket, --lease on and off.  After the run every lease is handed
# back (INFO backend_leases_outstanding 0, bounded wait) and the admitted
# count is read from the nodes' INFO (stats allowed): over-admission
# admitted - LIM (must be <= 0), under-admission LIM - admitted (units left
# in Redis although demand was above the limit: what leases stranded).
#
# Then latency at an equal offered rate ("open"): bench/openloop.c, an
# open-loop client, sends ORATE requests/s to each node on a fixed schedule
# (OSECS s, OCONNS connections a node; 90 % on the HOTKEYS hot keys, the
# rest over the COLDKEYS cold ones, as "mix"), each request timed from
# its scheduled send to its reply, so a stall counts for every request it
# held up and both paths carry the same load (a closed-loop client offers
# a faster path more).  ON and OFF alternate, REPS times; medians of p99.
#
#   bench/lease.sh            full run (a few minutes)
#   bench/lease.sh --quick    smoke run: small counts, judges nothing
#   bench/lease.sh --module   (or PATH_MODE=module) the same on the module's
#                             path: redis-server loads $B/sluice.so, so the
#                             ON and OFF nodes decide with RL.ALLOW / RL.LEASE
#                             (INFO backend_redis_path must say module on
#                             every one; without it, script)
#
# Exactness covers fixed-window, sliding-window, token-bucket and gcra on
# either path (the module leases all four; sliding-buckets leases on the
# script's path only and is not in the table).
#
# Environment: B (build dir, default build), N (requests per node per run,
# default 200000; --quick 20000), REPS (3; --quick 1), CLIENTS (16),
# PIPE (16), LIM (100000; --quick 10000), BTO (--backend-timeout, 2s: on
# a loaded 2-core machine Redis's answers can pass the default 50 ms, and
# the policy's denials would be counted as under-admission; the table
# shows how many answers the policy gave).  Servers listen on free
# 127.0.0.1 ports and are stopped by their PIDs on exit; every step runs
# under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
ONLY="hot mix open exact"
PATH_MODE=${PATH_MODE:-script}
while [ $# -gt 0 ]; do
    case $1 in
    --quick) QUICK=1 ;;
    --module) PATH_MODE=module ;;
    --only)
        [ $# -ge 2 ] || { echo "bench/lease.sh: --only needs a list, e.g. 'hot exact'" >&2; exit 2; }
        ONLY=$2
        shift
        for w in $ONLY; do
            case $w in hot | mix | open | exact) ;; *)
                echo "bench/lease.sh: --only: '$w' is not hot, mix, open or exact" >&2
                exit 2
                ;;
            esac
        done
        ;;
    *)
        echo "usage: bench/lease.sh [--quick] [--module] [--only 'hot mix open exact']" >&2
        exit 2
        ;;
    esac
    shift
done
case $PATH_MODE in script | module) ;; *)
    echo "bench/lease.sh: PATH_MODE must be script or module, not '$PATH_MODE'" >&2
    exit 2
    ;;
esac
want() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -n "$QUICK" ]; then
    : "${N:=20000}" "${REPS:=1}" "${LIM:=10000}"
else
    : "${N:=200000}" "${REPS:=3}" "${LIM:=100000}"
fi
: "${HOTKEYS:=100}" "${COLDKEYS:=1000000}" "${HOTPCT:=90}"
if [ -n "$QUICK" ]; then : "${OSECS:=1}"; else : "${OSECS:=5}"; fi
: "${ORATE:=10000}" "${OCONNS:=8}"
NHOT=$((N * HOTPCT / 100))
NCOLD=$((N - NHOT))
: "${CLIENTS:=16}" "${PIPE:=16}" "${BTO:=2s}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-lease-bench.XXXXXX)
PIDS=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    [ -f "$TMP/pids" ] && PIDS="$PIDS $(cat "$TMP/pids")"
    for pid in $PIDS; do
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
MODARGS=()
if [ "$PATH_MODE" = module ]; then
    timeout 600 make -s -C "$ROOT" "$B/sluice.so" >&2
    [ -e "$BD/sluice.so" ] || die "no $BD/sluice.so after make"
    MODARGS=(--loadmodule "$BD/sluice.so")
fi
OPENLOOP=$BD/bench/openloop
if want open; then
    mkdir -p "$BD/bench"
    cc -O2 -o "$OPENLOOP" "$ROOT/bench/openloop.c" || die "cannot build bench/openloop.c"
fi
TICK=$(getconf CLK_TCK)

# ---- the servers ----------------------------------------------------------
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no \
    --logfile "$TMP/redis.log" --dir "$TMP" "${MODARGS[@]}" &
REDIS_PID=$!
PIDS="$PIDS $REDIS_PID"
wait_pong "$RPORT" || die "redis-server did not start on port $RPORT: $(tail -5 "$TMP/redis.log")"

# start_sluiced LOG [ARGS...]: prints the port it listens on; its PID goes
# to $TMP/pids (this runs in a subshell: $PIDS would not see it) and to
# LOG.pid.
start_sluiced() {
    local log=$1 port='' pid
    shift
    : >"$log"
    "$SLUICED" --port 0 --http-port 0 --grpc-port 0 --threads 1 "$@" >"$log" 2>&1 &
    pid=$!
    echo "$pid" >>"$TMP/pids"
    echo "$pid" >"$log.pid"
    for _ in $(seq 100); do
        port=$(sed -n 's/.*msg="listening" addr=127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || die "sluiced exited: $(tail -5 "$log")"
        sleep 0.1
    done
    if [ -z "$port" ] || ! wait_pong "$port"; then
        die "sluiced did not start: $(tail -5 "$log")"
    fi
    echo "$port"
}
ON=
OFF=
LOCAL=
for i in 1 2 3; do
    ON="$ON $(start_sluiced "$TMP/on$i.log" --backend "redis://127.0.0.1:$RPORT" \
        --backend-timeout "$BTO" --lease on)"
    OFF="$OFF $(start_sluiced "$TMP/off$i.log" --backend "redis://127.0.0.1:$RPORT" \
        --backend-timeout "$BTO" --lease off)"
    LOCAL="$LOCAL $(start_sluiced "$TMP/local$i.log")"
done
for p in $ON; do
    [ "$(info_field "$p" backend backend_lease)" = on ] || die "node $p: backend_lease is not on"
done
# every fleet node on the path asked for (a node with --threads 1 has one
# connection: module or script, never mixed)
for p in $ON $OFF; do
    v=$(info_field "$p" backend backend_redis_path)
    [ "$v" = "$PATH_MODE" ] || die "node $p: backend_redis_path is '$v', not $PATH_MODE"
done
# the fleet's decision is in Redis: a second node sees the first's charge
# shellcheck disable=SC2086
set -- $ON
r=$(cli "$1" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 99 0 "*" 0 ") ;; *) die "RL.ALLOW through Redis answered '$r'" ;; esac
r=$(cli "$2" RL.ALLOW check 100 10s | tr '\n' ' ')
case $r in "1 100 98 0 "*" 0 ") ;; *) die "the second node answered '$r', expected remaining 98" ;; esac

# ---- the runs ---------------------------------------------------------------
ON_PIDS=$(cat "$TMP"/on[123].log.pid)
OFF_PIDS=$(cat "$TMP"/off[123].log.pid)
LOCAL_PIDS=$(cat "$TMP"/local[123].log.pid)
ports_of() { case $1 in ON) echo "$ON" ;; OFF) echo "$OFF" ;; LOCAL) echo "$LOCAL" ;; esac }
pids_of() { case $1 in ON) echo "$ON_PIDS" ;; OFF) echo "$OFF_PIDS" ;; LOCAL) echo "$LOCAL_PIDS" ;; esac }
sum_ticks() { # sum_ticks PIDS: their CPU time, in ticks
    local s=0 p
    for p in $1; do s=$((s + $(cpu_ticks "$p"))); done
    echo "$s"
}
sum_field() { # sum_field PORTS SECTION KEY: a field summed over the nodes (none: 0)
    local s=0 p v
    for p in $1; do
        v=$(info_field "$p" "$2" "$3")
        s=$((s + ${v:-0}))
    done
    echo "$s"
}
# rb OUT PORT N PIPE [redis-benchmark args...]: one redis-benchmark in the
# background, its CSV to OUT.csv (its errors to OUT.err)
rb() {
    local out=$1 port=$2 n=$3 pipe=$4
    shift 4
    timeout 600 redis-benchmark -h 127.0.0.1 -p "$port" -c "$CLIENTS" -n "$n" -P "$pipe" \
        --precision 3 --csv "$@" >"$out.csv" 2>"$out.err" &
    RB_PIDS="$RB_PIDS $!"
}
# run SCEN NAME PIPE: one redis-benchmark per node at once (SCEN hot: one
# hot key), or two per node (SCEN mix: HOTKEYS hot keys, COLDKEYS cold
# ones); appends "SCEN NAME PIPE dec/s p99_hot p99_cold redis_us/dec
# dec/cpu-s from_leases" to $TMP/runs.  dec/s: hot, the nodes' rates
# summed (as measured before); mix, all decisions over the wall time (the
# hot and cold clients do not end together).  p99: the worst process's.
# dec/cpu-s: decisions per CPU-second of the three nodes and Redis.
run() {
    local scen=$1 name=$2 pipe=$3 ports npids lname r0 r1 n0 n1 l0 l1 t0 t1 k=0 total pid
    ports=$(ports_of "$name")
    npids=$(pids_of "$name")
    lname=$(echo "$name" | tr '[:upper:]' '[:lower:]')
    rm -f "$TMP"/rb[hc]*.csv
    RB_PIDS=
    l0=$(sum_field "$ports" backend backend_lease_decisions)
    r0=$(cpu_ticks "$REDIS_PID")
    n0=$(sum_ticks "$npids")
    t0=$(date +%s%N)
    for p in $ports; do
        k=$((k + 1))
        if [ "$scen" = hot ]; then
            rb "$TMP/rbh$k" "$p" "$N" "$pipe" RL.ALLOW "hot:$lname" 1000000000000 3650d ALGO fixed-window
        else
            rb "$TMP/rbh$k" "$p" "$NHOT" "$pipe" -r "$HOTKEYS" \
                RL.ALLOW "mixhot:$lname:__rand_int__" 1000000000000 1m ALGO fixed-window
            rb "$TMP/rbc$k" "$p" "$NCOLD" "$pipe" -r "$COLDKEYS" \
                RL.ALLOW "cold:$lname:__rand_int__" 100 1m ALGO fixed-window
        fi
    done
    for pid in $RB_PIDS; do
        wait "$pid" || die "redis-benchmark failed for $scen $name: $(cat "$TMP"/rb[hc]*.err)"
    done
    t1=$(date +%s%N)
    r1=$(cpu_ticks "$REDIS_PID")
    n1=$(sum_ticks "$npids")
    l1=$(sum_field "$ports" backend backend_lease_decisions)
    if [ "$scen" = hot ]; then total=$((3 * N)); else total=$((3 * (NHOT + NCOLD))); fi
    awk -F, -v sc="$scen" -v n="$name" -v P="$pipe" -v rc=$((r1 - r0)) \
        -v nc=$((n1 - n0)) -v tick="$TICK" -v req="$total" -v ns=$((t1 - t0)) -v lz=$((l1 - l0)) '
        FNR == 1 { hot = FILENAME ~ /rbh[0-9]*\.csv$/ }
        { gsub(/["\r]/, "") }
        $(NF - 6) + 0 > 0 {
            s += $(NF - 6); c++
            if (hot && $(NF - 1) + 0 > wh) wh = $(NF - 1) + 0
            if (!hot && $(NF - 1) + 0 > wc) wc = $(NF - 1) + 0
        }
        END {
            if (c != (sc == "hot" ? 3 : 6)) exit 1
            if (sc == "hot") { rate = s; wc = wh } else rate = req / (ns / 1e9)
            print sc, n, P, rate, wh, wc, 1e6 * rc / tick / req, req / ((rc + nc) / tick), lz / req
        }' "$TMP"/rb[hc]*.csv >>"$TMP/runs" ||
        die "no result lines for $scen $name: $(cat "$TMP"/rb[hc]*.csv)"
}
one_test() { # one_test SCEN I: I in 0..5 (hot) or 0..3 (mix)
    if [ "$1" = hot ]; then
        case $2 in
        0) run hot ON "$PIPE" ;;
        1) run hot OFF "$PIPE" ;;
        2) run hot LOCAL "$PIPE" ;;
        3) run hot ON 1 ;;
        4) run hot OFF 1 ;;
        5) run hot LOCAL 1 ;;
        esac
    else
        case $2 in
        0) run mix ON "$PIPE" ;;
        1) run mix OFF "$PIPE" ;;
        2) run mix ON 1 ;;
        3) run mix OFF 1 ;;
        esac
    fi
}
: >"$TMP/runs"
load0=$(cut -d' ' -f1 /proc/loadavg)
if want hot; then
    note "one hot key: redis-benchmark, $N requests per node per run, 3 nodes at once, -c $CLIENTS, -P $PIPE and -P 1, $REPS rep(s)..."
    for rep in $(seq "$REPS"); do
        for i in 0 1 2; do one_test hot $(((i + rep - 1) % 3)); done
        for i in 0 1 2; do one_test hot $((3 + (i + rep - 1) % 3)); done
        note "  rep $rep done"
    done
fi
load1=$(cut -d' ' -f1 /proc/loadavg)
if want mix; then
    note "$HOTKEYS hot keys among $COLDKEYS cold: $NHOT hot + $NCOLD cold requests per node per run, 3 nodes at once, -P $PIPE and -P 1, $REPS rep(s)..."
    for rep in $(seq "$REPS"); do
        for i in 0 1; do one_test mix $(((i + rep - 1) % 2)); done
        for i in 0 1; do one_test mix $((2 + (i + rep - 1) % 2)); done
        note "  rep $rep done"
    done
fi
load2=$(cut -d' ' -f1 /proc/loadavg)
# open NAME REP: one open-loop run through the three nodes of NAME at once;
# appends "NAME p99_hot p99_cold p999_hot p999_cold" to $TMP/open
open_run() {
    local name=$1 rep=$2 lname r
    lname=$(echo "$name" | tr '[:upper:]' '[:lower:]')
    r=$(timeout 120 "$OPENLOOP" -p "$(ports_of "$name" | xargs | tr ' ' ',')" -r "$ORATE" \
        -s "$OSECS" -c "$OCONNS" -k "$HOTKEYS" -K "$COLDKEYS" -h "$HOTPCT" -x "open$rep:$lname:" \
        -S "$rep") || die "openloop failed through $name: $r"
    echo "$r" | awk -v n="$name" '{ print n, $10, $16, $11, $17 }' >>"$TMP/open"
}
: >"$TMP/open"
if want open; then
    note "open loop: $ORATE requests/s to each node for $OSECS s ($HOTPCT % on $HOTKEYS hot keys), $REPS rep(s)..."
    for rep in $(seq "$REPS"); do
        if [ $((rep % 2)) = 1 ]; then open_run ON "$rep"; open_run OFF "$rep"; else open_run OFF "$rep"; open_run ON "$rep"; fi
        note "  rep $rep done"
    done
fi
load3=$(cut -d' ' -f1 /proc/loadavg)

# ---- the tables -------------------------------------------------------------
rversion=$(redis-server --version | awk '{ print $3 }')
# shellcheck disable=SC2016 # awk's program
MEDFN='
    function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }'
# shellcheck disable=SC2016 # awk's program
MEDIAN=$MEDFN'
    { k = $1 " " $2 " " $3; rps[k] = rps[k] " " $4; ph[k] = ph[k] " " $5; pc[k] = pc[k] " " $6
      rus[k] = rus[k] " " $7; dpc[k] = dpc[k] " " $8; fl[k] = fl[k] " " $9 }'
if want hot; then
    echo
    echo "== one hot key, 3 sluiced nodes on one Redis ${rversion#v=} ($PATH_MODE path): median of $REPS =="
    echo "   (-c $CLIENTS per node; $(nproc) CPUs shared by Redis, 9 sluiced and 3 clients; load $load0 -> $load1)"
    awk "$MEDIAN"'
    END {
        label["ON"] = "--lease on  (3 nodes -> Redis)"
        label["OFF"] = "--lease off (3 nodes -> Redis)"
        label["LOCAL"] = "local stores (3 nodes, no Redis)"
        printf "%-34s | %12s | %12s | %14s | %14s | %12s\n", "path", "dec/s -P '"$PIPE"'", "redis us/dec", "dec/CPU-s", "p99 ms (-P 1)", "dec/s (-P 1)"
        print "-----------------------------------+--------------+--------------+----------------+----------------+-------------"
        n = split("ON OFF LOCAL", names, " ")
        for (j = 1; j <= n; j++) {
            k = names[j]; kp = "hot " k " '"$PIPE"'"; k1 = "hot " k " 1"
            r[k] = median(rps[kp]); q[k] = median(ph[k1]); u[k] = median(rus[kp]); d[k] = median(dpc[kp])
            printf "%-34s | %12.0f | %12.3f | %14.0f | %14.3f | %12.0f\n", label[k], r[k], (k == "LOCAL" ? 0 : u[k]), d[k], q[k], median(rps[k1])
        }
        print ""
        printf "%-58s | %8.2fx | %s\n", "goal: --lease on / --lease off, decisions/s >= 10x", r["ON"] / r["OFF"], (r["ON"] >= 10 * r["OFF"] ? "yes" : "NO")
        printf "%-58s | %8.2fx |\n", "--lease on / --lease off, decisions per CPU-second", d["ON"] / d["OFF"]
        printf "%-58s | %8.0f%% |\n", "--lease on / local stores", 100 * r["ON"] / r["LOCAL"]
        printf "%-58s | %+8.3f ms | %s\n", "goal: p99 --lease on - p99 --lease off <= 0", q["ON"] - q["OFF"], (q["ON"] <= q["OFF"] ? "yes" : "NO")
    }' "$TMP/runs"
fi
if want mix; then
    echo
    echo "== $HOTKEYS hot keys among $COLDKEYS cold, 3 sluiced nodes on one Redis ${rversion#v=} ($PATH_MODE path): median of $REPS =="
    echo "   (per node: $NHOT requests over the hot keys, $NCOLD over the cold, at once, -c $CLIENTS each; load $load1 -> $load2)"
    awk "$MEDIAN"'
    END {
        label["ON"] = "--lease on  (3 nodes -> Redis)"
        label["OFF"] = "--lease off (3 nodes -> Redis)"
        printf "%-31s | %11s | %12s | %10s | %11s | %9s | %9s | %8s\n", "path", "dec/s -P '"$PIPE"'", "redis us/dec", "dec/CPU-s", "from leases", "p99 hot", "p99 cold", "(-P 1)"
        print "--------------------------------+-------------+--------------+------------+-------------+-----------+-----------+---------"
        n = split("ON OFF", names, " ")
        for (j = 1; j <= n; j++) {
            k = names[j]; kp = "mix " k " '"$PIPE"'"; k1 = "mix " k " 1"
            u[k] = median(rus[kp]); qh[k] = median(ph[k1]); qc[k] = median(pc[k1])
            printf "%-31s | %11.0f | %12.3f | %10.0f | %10.1f%% | %6.3f ms | %6.3f ms |\n", label[k], median(rps[kp]), u[k], median(dpc[kp]), 100 * median(fl[kp]), qh[k], qc[k]
        }
        print ""
        printf "%-58s | %8.2fx | %s\n", "goal: Redis CPU per decision, --lease off / on >= 5x", u["OFF"] / u["ON"], (u["OFF"] >= 5 * u["ON"] ? "yes" : "NO")
        w["ON"] = qh["ON"] > qc["ON"] ? qh["ON"] : qc["ON"]; w["OFF"] = qh["OFF"] > qc["OFF"] ? qh["OFF"] : qc["OFF"]
        printf "%-58s | %+8.3f ms | %s\n", "goal: worst p99 --lease on - --lease off <= 0", w["ON"] - w["OFF"], (w["ON"] <= w["OFF"] ? "yes" : "NO")
    }' "$TMP/runs"
fi
if want open; then
    echo
    echo "== open loop, equal offered rate ($PATH_MODE path): $ORATE requests/s to each of 3 nodes, $HOTPCT % on $HOTKEYS hot keys: median of $REPS =="
    echo "   (latency from each request's scheduled send, ms; load $load2 -> $load3)"
    awk "$MEDFN"'
    { h[$1] = h[$1] " " $2; c[$1] = c[$1] " " $3; h9[$1] = h9[$1] " " $4; c9[$1] = c9[$1] " " $5 }
    END {
        printf "%-31s | %9s | %9s | %10s | %10s\n", "path", "p99 hot", "p99 cold", "p99.9 hot", "p99.9 cold"
        print "--------------------------------+-----------+-----------+------------+-----------"
        n = split("ON OFF", names, " ")
        for (j = 1; j <= n; j++) {
            k = names[j]
            qh[k] = median(h[k]); qc[k] = median(c[k])
            printf "%-31s | %9.3f | %9.3f | %10.3f | %10.3f\n", (k == "ON" ? "--lease on  (3 nodes -> Redis)" : "--lease off (3 nodes -> Redis)"), qh[k], qc[k], median(h9[k]), median(c9[k])
        }
        print ""
        w["ON"] = qh["ON"] > qc["ON"] ? qh["ON"] : qc["ON"]; w["OFF"] = qh["OFF"] > qc["OFF"] ? qh["OFF"] : qc["OFF"]
        printf "%-58s | %+8.3f ms | %s\n", "goal: worst p99 --lease on - --lease off <= 0", w["ON"] - w["OFF"], (w["ON"] <= w["OFF"] ? "yes" : "NO")
    }' "$TMP/open"
fi
# ---- exactness: demand 2 x LIM in one window --------------------------------
# exact NAME PORTS ALGO: appends "NAME ALGO admitted over under served
# policy" to $TMP/exact
exact() {
    local name=$1 ports=$2 algo=$3 a0 a1 s0 s1 f0 f1 k=0 pids='' per key w=3650d
    # a bucket's B*W must stay within the script's 2^53: a year (it refills
    # LIM a year: nothing in a run)
    [ "$algo" = fixed-window ] || w=365d
    key="exact:$name:$algo:$RANDOM"
    per=$((2 * LIM / 3 / CLIENTS + 1))
    a0=$(sum_field "$ports" stats allowed)
    s0=$(sum_field "$ports" backend backend_lease_decisions)
    f0=$(sum_field "$ports" backend backend_fallback_deny)
    for p in $ports; do
        k=$((k + 1))
        timeout 600 redis-benchmark -h 127.0.0.1 -p "$p" -c "$CLIENTS" -n $((per * CLIENTS)) \
            -P "$PIPE" -q RL.ALLOW "$key" "$LIM" "$w" ALGO "$algo" >/dev/null 2>"$TMP/ex$k.err" &
        pids="$pids $!"
    done
    for pid in $pids; do
        wait "$pid" || die "redis-benchmark failed (exactness, $name $algo): $(cat "$TMP"/ex*.err)"
    done
    for p in $ports; do # every lease handed back (idle), bounded
        for _ in $(seq 100); do
            [ "$(info_field "$p" backend backend_leases_outstanding)" = 0 ] && break
            sleep 0.05
        done
    done
    a1=$(sum_field "$ports" stats allowed)
    s1=$(sum_field "$ports" backend backend_lease_decisions)
    f1=$(sum_field "$ports" backend backend_fallback_deny)
    local adm=$((a1 - a0))
    echo "$name $algo $adm $((adm - LIM)) $((LIM - adm)) $((s1 - s0)) $((f1 - f0))" >>"$TMP/exact"
}
: >"$TMP/exact"
ok=yes
if want exact; then
    for algo in fixed-window sliding-window token-bucket gcra; do
        exact ON "$ON" "$algo"
        exact OFF "$OFF" "$algo"
    done
    echo
    echo "== exactness ($PATH_MODE path): 3 nodes at once, demand 2 x $LIM in one window (limit $LIM), -P $PIPE =="
    awk -v lim="$LIM" '
        BEGIN { printf "%-6s | %-14s | %9s | %14s | %17s | %12s | %14s\n", "lease", "algorithm", "admitted", "over-admitted", "under-admitted", "from leases", "policy denials" }
        { printf "%-6s | %-14s | %9d | %14d | %8d (%5.2f%%) | %12d | %14d\n", tolower($1), $2, $3, ($4 > 0 ? $4 : 0), ($5 > 0 ? $5 : 0), 100 * ($5 > 0 ? $5 : 0) / lim, $6, $7 }' "$TMP/exact"
    while read -r _ _ _ over _ _ _; do [ "$over" -le 0 ] || ok=NO; done <"$TMP/exact"
    echo "  no over-admission: $ok"
fi
[ -n "$QUICK" ] && echo "(--quick: counts too small to judge the goals)"
[ "$ok" = yes ] || exit 1
exit 0
