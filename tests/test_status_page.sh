#!/bin/sh
# test_status_page.sh -- sluiced's status page (GET /) in a real browser:
# Debian's Chromium, headless, driven by playwright-core (npm, locked in
# tests/e2e/browser/, installed with `npm ci` into build/e2e-browser).
#
# A server with a small rules file gets known traffic -- RL.CHECK over RESP
# (a tenant allowed 3, one with a hostile value, a rule of two limits),
# RL.ALLOW without a rule, and GET /v1/allow with a hostile key -- then
# tests/e2e/browser/status_page.js loads the page and checks: no console
# error, script error or failed request; every decision's chart and the
# totals per front drew exactly that traffic; each rule's chart drew
# exactly its own (the page's record and the canvas's pixels), headed by
# its limit's size and window; the header shows the clients per front, the
# backend with its keys and the decisions per second; the most-limited keys
# appear verbatim as text and ran nothing; the page refreshes itself;
# nothing is fetched from elsewhere.  The screenshot is kept as
# build/test-artifacts/status.png.
#
# The JSON behind it (/v1/status) is checked under every build by
# tests/e2e/test_http_status.py; this runs once, against build/.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
SLUICED=$BUILD/sluiced
NODE_SRC=$ROOT/tests/e2e/browser
NODE_DIR=$ROOT/build/e2e-browser
ART=$ROOT/build/test-artifacts
CHROMIUM=/usr/bin/chromium

if [ ! -x "$SLUICED" ]; then
    bad "no $SLUICED (build first)"
    finish
fi
if [ ! -x "$CHROMIUM" ]; then
    bad "Chromium not found at $CHROMIUM: the status page test needs Debian's chromium (scripts/deps.sh installs it)"
    finish
fi
for tool in node npm redis-cli curl; do
    if ! command -v $tool >/dev/null 2>&1; then
        bad "$tool not found: the status page test needs it (scripts/deps.sh installs it)"
        finish
    fi
done

# ---- playwright-core, installed once per lock file ---------------------------
mkdir -p "$NODE_DIR" "$ART"
if ! cmp -s "$NODE_SRC/package-lock.json" "$NODE_DIR/.installed" ||
    [ ! -f "$NODE_DIR/node_modules/playwright-core/package.json" ]; then
    cp "$NODE_SRC/package.json" "$NODE_SRC/package-lock.json" "$NODE_DIR/"
    if (cd "$NODE_DIR" && timeout 600 npm ci --no-audit --no-fund --prefer-offline --loglevel=error \
        --cache "$NODE_DIR/.npm-cache") >"$T/npm.log" 2>&1 </dev/null; then
        cp "$NODE_SRC/package-lock.json" "$NODE_DIR/.installed"
    else
        bad "npm ci of playwright-core in $NODE_DIR" "$(tail -20 "$T/npm.log")"
        finish
    fi
fi
cp "$NODE_SRC/status_page.js" "$NODE_DIR/"

# ---- a server with known traffic ----------------------------------------------
cat >"$T/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 3, name: tenant}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1, name: path_limit}
  - key: remote_address
    rate_limit:
      - {unit: minute, requests_per_unit: 100}
      - {unit: hour, requests_per_unit: 2000, algorithm: token-bucket}
EOF
: >"$T/sluiced.log" # before the poll below reads it
"$SLUICED" --port 0 --http-port any --grpc-port 0 --bind 127.0.0.1 --rules "$T/api.yaml" \
    >"$T/sluiced.log" 2>&1 </dev/null &
PID=$!
i=0
HP= RP=
while [ $i -lt 150 ]; do
    HP=$(sed -n 's/.*msg="listening" addr=127\.0\.0\.1:\([0-9]*\) .*http=yes.*/\1/p' "$T/sluiced.log")
    RP=$(grep -v 'http=yes\|tls=yes' "$T/sluiced.log" | sed -n 's/.*msg="listening" addr=127\.0\.0\.1:\([0-9]*\) .*/\1/p')
    [ -n "$HP" ] && [ -n "$RP" ] && grep -q 'msg="ready"' "$T/sluiced.log" && break
    kill -0 $PID 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
if [ -z "$HP" ] || [ -z "$RP" ]; then
    bad "sluiced started with --http-port any" "$(cat "$T/sluiced.log")"
    kill $PID 2>/dev/null
    wait $PID 2>/dev/null
    finish
fi
ok "sluiced serves HTTP on 127.0.0.1:$HP"

HOSTILE_TENANT='<img src=x onerror="window.pwned=1">'
# as a counting key writes it: '=' in a value is %3D (sl_rules_key)
HOSTILE_TENANT_KEYED='<img src%3Dx onerror%3D"window.pwned%3D1">'
HOSTILE_KEY='<script>window.pwned=2</script>&amp;'
check() { redis-cli -p "$RP" RL.CHECK api DESCRIPTOR "$1" "$2" 2>&1 | head -1; }
got=
for n in 1 2 3 4 5; do got="$got$(check tenant acme)"; done
for n in 1 2 3 4; do got="$got$(check tenant "$HOSTILE_TENANT")"; done
for n in 1 2; do got="$got$(check path /login)"; done
for n in 1 2; do got="$got$(check remote_address 10.0.0.1)"; done
# RL.CHECK's first field: 1 allowed, 0 denied
if [ "$got" = "1110011101011" ]; then ok "RL.CHECK traffic sent (3+3+1+2 allowed, 2+1+1 denied)"; else bad "RL.CHECK traffic" "got $got"; fi
# the quick start's RL.ALLOW, no rule involved
got=
for n in 1 2 3 4 5 6 7; do got="$got$(redis-cli -p "$RP" RL.ALLOW user:42 5 1h 2>&1 | head -1)"; done
if [ "$got" = "1111100" ]; then ok "RL.ALLOW traffic sent (5 allowed, 2 denied)"; else bad "RL.ALLOW traffic" "got $got"; fi
codes=
for n in 1 2 3; do
    codes="$codes $(curl -s -o /dev/null -w '%{http_code}' --get --data-urlencode "key=$HOSTILE_KEY" \
        --data 'limit=1&window=1h' "http://127.0.0.1:$HP/v1/allow")"
done
if [ "$codes" = " 200 429 429" ]; then ok "GET /v1/allow traffic sent (1 allowed, 2 denied)"; else bad "GET /v1/allow traffic" "got$codes"; fi

cat >"$T/expect.json" <<EOF
{"rules": {"api.tenant": {"allowed": 6, "denied": 3}, "api.path": {"allowed": 1, "denied": 1},
           "api.remote_address#1": {"allowed": 2, "denied": 0},
           "api.remote_address#2": {"allowed": 2, "denied": 0}},
 "labels": {"api.tenant": "tenant \u2014 3 / minute", "api.path": "path_limit \u2014 1 / minute",
            "api.remote_address#1": "api.remote_address \u2014 100 / minute",
            "api.remote_address#2": "api.remote_address \u2014 2000 / hour, token-bucket"},
 "all": {"allowed": 15, "denied": 8},
 "fronts": {"resp": {"allowed": 14, "denied": 6}, "http": {"allowed": 1, "denied": 2},
            "grpc": {"allowed": 0, "denied": 0}},
 "backend": "local",
 "keys": [{"key": "api|tenant=acme", "denied": 2},
          {"key": $(printf '%s' "$HOSTILE_KEY" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'), "denied": 2},
          {"key": $(printf 'api|tenant=%s' "$HOSTILE_TENANT_KEYED" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))'), "denied": 1},
          {"key": "api|path=/login", "denied": 1}]}
EOF

# the traffic's redis-cli connections closed, as the server sees it: the
# page's header counts the clients per front (resp 0 expected); bounded
resp_left=
for n in $(seq 1 100); do
    resp_left=$(curl -s "http://127.0.0.1:$HP/v1/status" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["clients"]["resp"])' 2>/dev/null)
    [ "$resp_left" = 0 ] && break
    sleep 0.1
done
if [ "$resp_left" = 0 ]; then ok "the traffic's RESP connections are closed"; else bad "the traffic's RESP connections are closed" "resp clients: '$resp_left'"; fi

# ---- the browser ---------------------------------------------------------------
rm -f "$ART/status.png"
(cd "$NODE_DIR" && timeout 120 node status_page.js "http://127.0.0.1:$HP/" "$T/expect.json" \
    "$ART/status.png") >"$T/node.out" 2>&1 </dev/null
st=$?
while IFS= read -r line; do
    case $line in
    "PASS "*) ok "${line#PASS }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
    esac
done <"$T/node.out"
if [ $st -ne 0 ] && ! grep -q '^FAIL ' "$T/node.out"; then
    bad "status_page.js exited with status $st" "$(tail -30 "$T/node.out")"
fi
# The screenshot is for a person to look at, not a check: said, not counted.
if [ -s "$ART/status.png" ]; then echo "info  build/test-artifacts/status.png kept"; else echo "info  no build/test-artifacts/status.png"; fi

kill -TERM $PID
wait $PID
st=$?
if [ $st -eq 0 ]; then ok "sluiced exits 0 after SIGTERM"; else bad "sluiced exited $st" "$(tail -20 "$T/sluiced.log")"; fi
finish
