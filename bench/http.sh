#!/usr/bin/env bash
# bench/http.sh -- sluiced's HTTP endpoints against nginx, side by side in
# one run, with the same client (wrk) on the same machine:
#
#   nginx  return 204                     one nginx worker answering at once:
#                                         the ceiling of an HTTP hop here
#   sluiced GET /v1/allow?key=k<N>&...    a decision per request (token
#                                         bucket, 100,000 random keys)
#   sluiced /v1/auth/bench                forward-auth as a proxy asks it: the
#                                         original URI in X-Original-URI (one
#                                         of 100,000 random paths), the rules
#                                         limit per path
#   nginx + auth_request -> sluiced       nginx (one worker) serving an empty
#                                         static file, asking sluiced's
#                                         /v1/auth/bench first (keep-alive)
#   nginx limit_req                       nginx's own limiter (one worker,
#                                         a zone keyed by $uri) before the
#                                         same empty file
#
# (Not `return 204` behind auth_request or limit_req: nginx runs `return`
# in its rewrite phase, before both, so neither would run at all.)
#
# wrk runs on CPU 0 with one thread and CLIENTS connections (keep-alive) for
# SECONDS each run; every server (nginx and sluiced, --threads 1) on CPU 1.
# The runs are interleaved REPS times (the order rotates each round) and
# the table shows the median requests/s and the median p99 latency of each
# row, with the ratio to nginx's plain 204.  Goal (issue "7 of 10"):
# /v1/auth >= 0.7x nginx's 204.
#
#   bench/http.sh            full run (about 2 minutes)
#   bench/http.sh --quick    smoke run: 1 s runs, 1 round; judges nothing
#
# Environment: B (build dir, default build), REPS (default 3; --quick 1),
# SECS (seconds per wrk run, default 5; --quick 1), CLIENTS (default 50).  Every
# server listens on a free 127.0.0.1 port and is stopped by its PID when
# the script exits; every step runs under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
B=${B:-build}
QUICK=
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
elif [ -n "${1:-}" ]; then
    echo "usage: bench/http.sh [--quick]" >&2
    exit 2
fi
if [ -n "$QUICK" ]; then
    : "${REPS:=1}" "${SECS:=1}"
else
    : "${REPS:=3}" "${SECS:=${SECONDS_RUN:-5}}"
fi
: "${CLIENTS:=50}"
case $B in
/*) BD=$B ;;
*) BD=$ROOT/$B ;;
esac
SLUICED=$BD/sluiced
TMP=$(mktemp -d /tmp/sluice-http-bench.XXXXXX)
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


NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx is not installed (scripts/deps.sh installs it)"
for t in wrk curl python3; do
    command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh installs it)"
done
timeout 600 make -s -C "$ROOT" "$B/sluiced" >&2

if [ "$(nproc)" -ge 2 ]; then
    WORK="taskset -c 1"
    LOAD="taskset -c 0"
else
    WORK=""
    LOAD=""
fi

# wait_http URL: until it answers at all (any status), or fail
wait_http() {
    for _ in $(seq 100); do
        curl -s -o /dev/null --max-time 1 "$1" && return 0
        sleep 0.1
    done
    return 1
}

# ---- sluiced ----------------------------------------------------------------
cat >"$TMP/rules.yaml" <<'YAML'
domain: bench
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000}
YAML
SPORT=$(free_port)
SHTTP=$(free_port)
$WORK "$SLUICED" --port "$SPORT" --http-port "$SHTTP" --grpc-port 0 --threads 1 \
    --rules "$TMP/rules.yaml" >"$TMP/sluiced.log" 2>&1 &
PIDS="$PIDS $!"
wait_http "http://127.0.0.1:$SHTTP/healthz" || die "sluiced did not start: $(tail -5 "$TMP/sluiced.log")"

# ---- nginx: three servers in one nginx (one worker) -------------------------
NPLAIN=$(free_port)
NAUTH=$(free_port)
NLIMIT=$(free_port)
mkdir -p "$TMP/nginx/logs" "$TMP/nginx/www"
: >"$TMP/nginx/www/empty"
chmod 755 "$TMP" "$TMP/nginx" "$TMP/nginx/www" # nginx, started as root, serves as nobody
cat >"$TMP/nginx/nginx.conf" <<NGINX
daemon off;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    keepalive_requests 1000000;
    limit_req_zone \$uri zone=bench:16m rate=1000000r/s;
    upstream sluiced { server 127.0.0.1:$SHTTP; keepalive 64; }
    server {
        listen 127.0.0.1:$NPLAIN;
        location / { return 204; }
    }
    server {
        listen 127.0.0.1:$NLIMIT;
        root $TMP/nginx/www;
        location / { limit_req zone=bench burst=1000000 nodelay; limit_req_status 429; try_files /empty =404; }
    }
    server {
        listen 127.0.0.1:$NAUTH;
        root $TMP/nginx/www;
        location / { auth_request /_sluice; try_files /empty =404; }
        location = /_sluice {
            internal;
            proxy_pass http://sluiced/v1/auth/bench;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI \$request_uri;
            proxy_set_header X-Original-Method \$request_method;
        }
    }
}
NGINX
$WORK "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" >"$TMP/nginx/out.log" 2>&1 &
PIDS="$PIDS $!"
wait_http "http://127.0.0.1:$NPLAIN/" || die "nginx did not start: $(cat "$TMP/nginx/out.log" "$TMP/nginx/logs/error.log")"

# ---- the runs ---------------------------------------------------------------
# wrk scripts: a random key or path per request, over 100,000
cat >"$TMP/allow.lua" <<'LUA'
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/v1/allow?key=k" .. math.random(100000) .. "&limit=1000000&window=1s")
end
LUA
cat >"$TMP/auth.lua" <<'LUA'
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/v1/auth/bench", {["X-Original-URI"] = "/p/" .. math.random(100000)})
end
LUA
cat >"$TMP/path.lua" <<'LUA'
math.randomseed(os.time())
request = function()
    return wrk.format("GET", "/p/" .. math.random(100000))
end
LUA

ROWS=("nginx return 204" "sluiced /v1/allow" "sluiced /v1/auth" "nginx + auth_request -> sluiced" "nginx limit_req")
URLS=("http://127.0.0.1:$NPLAIN/" "http://127.0.0.1:$SHTTP" "http://127.0.0.1:$SHTTP"
    "http://127.0.0.1:$NAUTH" "http://127.0.0.1:$NLIMIT")
SCRIPTS=("$TMP/path.lua" "$TMP/allow.lua" "$TMP/auth.lua" "$TMP/path.lua" "$TMP/path.lua")

# the statuses each row must answer (all allowed: the limits are far above
# the load), checked once before timing, so a row that answers 404 or 429
# is an error, not a fast number
check_row() {
    local got
    case $1 in
    1) got=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$SHTTP/v1/allow?key=k1&limit=1000000&window=1s") ;;
    2) got=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Original-URI: /p/1' "http://127.0.0.1:$SHTTP/v1/auth/bench") ;;
    *) got=$(curl -s -o /dev/null -w '%{http_code}' "${URLS[$1]}/p/1") ;;
    esac
    case "$1:$got" in
    0:204 | 1:200 | 2:200 | 3:200 | 4:200) ;;
    *) die "${ROWS[$1]} answered $got before the run" ;;
    esac
}
for i in "${!ROWS[@]}"; do check_row "$i"; done

# run I ROUND: one wrk run of row I, appends "rps p99_ms non2xx" to TMP/r.I
run() {
    local i=$1 out rps p99 bad
    out=$(timeout $((SECS + 30)) $LOAD wrk -t1 -c"$CLIENTS" -d"${SECS}s" --latency \
        -s "${SCRIPTS[$i]}" "${URLS[$i]}" 2>&1) || die "wrk failed on ${ROWS[$i]}: $out"
    rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')
    p99=$(printf '%s\n' "$out" | awk '$1 == "99%" {
        v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
        if (u == "us") v /= 1000; else if (u == "s") v *= 1000
        printf "%.3f", v }')
    bad=$(printf '%s\n' "$out" | awk '/Non-2xx or 3xx responses:/ { print $NF }')
    [ -n "$rps" ] || die "no Requests/sec from wrk on ${ROWS[$i]}: $out"
    echo "$rps ${p99:-nan} ${bad:-0}" >>"$TMP/r.$i"
}

note "bench/http.sh: ${#ROWS[@]} rows x $REPS rounds of ${SECS}s, $CLIENTS connections, wrk on CPU 0, servers on CPU 1"
n=${#ROWS[@]}
for ((round = 0; round < REPS; round++)); do
    for ((k = 0; k < n; k++)); do
        run $(((k + round) % n))
    done
done

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
base=$(awk '{ print $1 }' "$TMP/r.0" | median)
printf '\n%-34s %12s %9s %10s %8s\n' "HTTP, $CLIENTS conns, 1 wrk thread" "requests/s" "x 204" "p99 ms" "non-2xx"
for i in "${!ROWS[@]}"; do
    rps=$(awk '{ print $1 }' "$TMP/r.$i" | median)
    p99=$(awk '{ print $2 }' "$TMP/r.$i" | median)
    bad=$(awk '{ s += $3 } END { print s }' "$TMP/r.$i")
    printf '%-34s %12.0f %9.2f %10.3f %8d\n' "${ROWS[$i]}" "$rps" "$(echo "$rps $base" | awk '{ printf "%.4f", $1 / $2 }')" "$p99" "$bad"
done
auth=$(awk '{ print $1 }' "$TMP/r.2" | median)
viaa=$(awk '{ print $1 }' "$TMP/r.3" | median)
lreq=$(awk '{ print $1 }' "$TMP/r.4" | median)
ratio=$(echo "$auth $base" | awk '{ printf "%.2f", $1 / $2 }')
met=no
awk -v r="$ratio" 'BEGIN { exit !(r >= 0.7) }' && met=yes
printf '\ngoal /v1/auth >= 0.7x nginx 204: %sx (%s)\n' "$ratio" "$met"
printf 'auth_request through sluiced vs limit_req: %.2fx the throughput (%.1f us more per request)\n' \
    "$(echo "$viaa $lreq" | awk '{ print $1 / $2 }')" \
    "$(echo "$viaa $lreq" | awk '{ print (1e6 / $1) - (1e6 / $2) }')"
printf 'load average: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
