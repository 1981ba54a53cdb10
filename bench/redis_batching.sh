#!/bin/sh
# bench/redis_batching.sh -- does the Redis backend batch the decisions
# that arrive together?  Starts a redis-server and one sluiced (one
# worker, --backend redis://) on free loopback ports, sluiced under strace,
# sends ROUNDS rounds of PER pipelined RL.ALLOW (each round one client
# write, read back whole before the next), and counts sluiced's writes
# that carry EVALSHA and the EVALSHA calls Redis saw: decisions per script
# call (up to SL_REDIS_BATCH_MAX, 64) and per write (docs/fleet.md,
# "Batching").
#
#   bench/redis_batching.sh [ROUNDS [PER]]      default 20 100
#
# Processes it starts are stopped by their PIDs.  Needs strace, redis-server.
set -eu
ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
B=${B:-$ROOT/build}
ROUNDS=${1:-20}
PER=${2:-100}
T=$(mktemp -d)
RPID= SPID= TPID=
cleanup() {
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null || :
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null || :
    [ -n "$RPID" ] && kill "$RPID" 2>/dev/null || :
    wait 2>/dev/null || :
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(free_port)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$T/redis.log" 2>&1 &
RPID=$!
until redis-cli -p "$RP" PING >/dev/null 2>&1; do sleep 0.05; done
SP=$(free_port)
strace -f -qq -s 48 -e trace=write,writev,sendto,sendmsg -o "$T/trace" \
    "$B/sluiced" --port "$SP" --http-port 0 --threads 1 --trust-client-time --max-client-skew 7d \
    --backend "redis://127.0.0.1:$RP" >"$T/sluiced.log" 2>&1 &
SPID=$!
until redis-cli -p "$SP" PING >/dev/null 2>&1; do sleep 0.05; done
# sluiced's own PID (strace's child; strace does not pass SIGTERM on)
TPID=$(redis-cli -p "$SP" INFO server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
python3 - "$SP" "$ROUNDS" "$PER" <<'PY'
import socket, sys, time
port, rounds, per = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port), timeout=30)
def enc(*a):
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in (str(v).encode() for v in a))
t = int(time.time() * 1000)
for r in range(rounds):
    s.sendall(b"".join(enc("RL.ALLOW", "k%d" % i, 1000000, "10s", "ALGO", "fixed-window", "AT", t)
                       for i in range(per)))
    buf = b""
    while buf.count(b"*6\r\n") < per:
        buf += s.recv(1 << 20)
PY
CALLS=$(redis-cli -p "$RP" INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
kill "$TPID"
wait "$SPID" 2>/dev/null || :
SPID= TPID=
WRITES=$(grep -c 'EVALSHA' "$T/trace" || :)
echo "rounds=$ROUNDS pipelined_per_round=$PER evalsha_calls=$CALLS writes_with_evalsha=$WRITES"
awk -v c="$CALLS" -v w="$WRITES" -v d=$((ROUNDS * PER)) \
    'BEGIN { if (c > 0 && w > 0) printf "decisions per script call: %.1f, per write: %.1f\n", d / c, d / w }'
