#!/bin/sh
# test_replay_rules.sh -- `sluicectl replay --rules` (what-if replay of a rules
# file, docs/replay.md) end to end:
#
#   - exact answers for a small rules file and trace: OK, OVER_LIMIT, SHADOW,
#     UNLIMITED, NO_RULE, a block list (limit 0), two limits on one
#     descriptor (all or none), a denied request not charged to its other
#     descriptors, %XX escapes, costs, ELASTIC with --capacity; from standard
#     input, from a FILE, and reformatted (tabs, CRLF, comments, no final
#     newline); nginx's combined format (zones, IPv6 with ip_prefix);
#   - --summary: standard output unchanged, the per-rule table and the most
#     denied counting keys on standard error;
#   - sluiced's loader options, --merge-domains and --count-denied: every
#     spelling (bare, yes|no after, =VALUE), exact answers with and without
#     (tests/e2e/test_replay_rules.py compares them with sluiced's);
#   - errors, each with exit status 2 and one `sluicectl: ...` line: option
#     misuse (--algo or --threads with --rules, missing --domain, ...), a bad
#     rules file (its FILE:LINE:COLUMN message), an unknown domain, malformed
#     lines (every line before answered); a request RL.CHECK would refuse
#     is answered ERR and the run goes on;
#   - --max-memory, a large input read as a file and as a pipe;
#   - the progress bar: drawn on a terminal (a pty from util-linux `script`)
#     for a file of 16 MiB or more, and cleared; never when standard error
#     is a file, nor for a small file.
#
# Runs against $SLUICE_BUILD/sluicectl (tests/run.sh runs it for build/ and
# build/asan/).  Prints one line per check; exits 1 if any failed.
# shellcheck disable=SC2086
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
need_sluice

# same NAME WANT GOT RC: the run exited 0 and printed exactly WANT.
same() {
    if [ "$4" -eq 0 ] && cmp -s "$2" "$3"; then
        ok "$1"
    else
        bad "$1" "exit status $4" "$(head -c 2000 "$T/err" 2>/dev/null)" \
            "$(diff "$2" "$3" | head -20)"
    fi
}

# ---- a small rules file and trace, exact answers ---------------------------

cat >"$T/rules.yaml" <<'EOF'
domain: api
descriptors:
  - key: user                          # every user: 2 a minute
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /beta                       # a soft launch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: tenant                        # two limits, all or none
    rate_limit:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 4}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: bulk
    rate_limit: {unit: second, requests_per_unit: 1, elastic: 3, name: bulk jobs}
EOF

cat >"$T/trace" <<'EOF'
# t  descriptors...             [cost=N]
0 user=bob path=/login
1000 user=bob path=/login
2000 user=bob
3000 user=bob
4000 path=/beta
4001 path=/beta
4002 path=/health
4003 color=red
5000 tenant=acme cost=2
5001 tenant=acme cost=2
6000 tenant=acme cost=2
6001 user=carol tenant=acme
6002 user=carol
6003 user=carol
7000 blocked=yes user=dave
7001 user=dave
8000 user=a%20b%2Cc
8001 user=a%20b%2Cc
8002 user=a%20b%2Cc
9000 bulk=nightly
9001 bulk=nightly
9002 bulk=nightly
EOF

# Why each answer is what it is:
#  1-2   /login allows 1 an hour; the 2nd request is denied by it, and bob's
#        descriptor, OK, is not charged (all or none) ...
#  3-4   ... so bob has 1 left at t=2000, none at 3000
#  5-6   /beta is in shadow mode: over its limit it says SHADOW, still allowed
#  7-8   /health is unlimited; color has no rule
#  9-11  tenant: 3 a second AND 4 a minute, cost 2: the 2nd is over 3/s; the
#        3rd (a new second) fits both, leaving 0 of 4/minute
#  12-14 carol's request is denied by tenant's minute limit, so carol is not
#        charged: she still has 2 (1 left after 6002, then 0)
#  15-16 limit 0: denied, never (retry -1); dave's OK is not charged
#  17-19 %20 and %2C: the user "a b,c"
#  20-22 bulk: 1 a second (elastic up to 3, but no --capacity pool here)
cat >"$T/want" <<'EOF'
1 1 0 0 3600000 0 OK:api.user OK:api.path_/login
0 1 0 3599000 3599000 0 OK:api.user OVER_LIMIT:api.path_/login
1 2 0 0 58000 0 OK:api.user
0 2 0 57000 57000 0 OVER_LIMIT:api.user
1 0 0 0 0 0 OK:api.path_/beta
1 0 0 0 0 0 SHADOW:api.path_/beta
1 0 0 0 0 0 UNLIMITED:api.path_/health
1 0 0 0 0 0 NO_RULE:-
1 3 1 0 1000 0 OK:api.tenant#1
0 3 1 999 999 0 OVER_LIMIT:api.tenant#1
1 4 0 0 54000 0 OK:api.tenant#2
0 4 0 53999 53999 0 OK:api.user OVER_LIMIT:api.tenant#2
1 2 1 0 53998 0 OK:api.user
1 2 0 0 53997 0 OK:api.user
0 0 0 -1 0 0 OVER_LIMIT:api.blocked OK:api.user
1 2 1 0 52999 0 OK:api.user
1 2 1 0 52000 0 OK:api.user
1 2 0 0 51999 0 OK:api.user
0 2 0 51998 51998 0 OVER_LIMIT:api.user
1 1 0 0 1000 0 OK:bulk%20jobs
0 1 0 999 999 0 OVER_LIMIT:bulk%20jobs
0 1 0 998 998 0 OVER_LIMIT:bulk%20jobs
EOF
RR="replay --rules $T/rules.yaml --domain api"

"$SLUICE" $RR <"$T/trace" >"$T/got" 2>"$T/err"
same "rules trace (stdin)" "$T/want" "$T/got" $?
"$SLUICE" $RR "$T/trace" >"$T/got" 2>"$T/err"
same "rules trace (FILE)" "$T/want" "$T/got" $?
"$SLUICE" replay --domain=api --rules="$T/rules.yaml" --log-format=lines - <"$T/trace" >"$T/got" 2>"$T/err"
same "rules trace (--opt=value, FILE '-', --log-format lines)" "$T/want" "$T/got" $?
# tabs, CRLF, comment and blank lines between requests, no final newline
grep -v '^#' "$T/trace" |
    awk '{ gsub(/ /, "\t"); print "# a comment 0 k=v"; print ""; print "  " $0 "\r" }' >"$T/messy0"
printf '%s' "$(cat "$T/messy0")" >"$T/messy"
"$SLUICE" $RR <"$T/messy" >"$T/got" 2>"$T/err"
same "rules trace (tabs, CRLF, comments, no final newline)" "$T/want" "$T/got" $?

# --capacity: the 2nd bulk request passes above its limit on the spare pool
# (limit = the ceiling 3, remaining = the pool's room), the 3rd finds the
# pool (2 a second, the 1st request took one) full.
head -n 20 "$T/want" >"$T/want_cap"
cat >>"$T/want_cap" <<'EOF'
1 3 0 0 999 0 ELASTIC:bulk%20jobs
0 1 0 998 998 0 OVER_LIMIT:bulk%20jobs
EOF
"$SLUICE" $RR --capacity 2/1s <"$T/trace" >"$T/got" 2>"$T/err"
same "--capacity 2/1s: ELASTIC, then the pool is full" "$T/want_cap" "$T/got" $?

# ---- nginx's combined format ---------------------------------------------

cat >"$T/edge.yaml" <<'EOF'
domain: edge
descriptors:
  - key: remote_address              # each /24 (IPv4) or /64 (IPv6): 2 a second
    ip_prefix: {ipv4: 24, ipv6: 64}
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: method
    value: POST
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 5}
EOF
cat >"$T/access.log" <<'EOF'
192.0.2.1 - - [21/Nov/2026:12:48:07 +0000] "GET /api/users?id=3 HTTP/1.1" 200 512 "-" "curl/8.0"
192.0.2.7 - - [21/Nov/2026:12:48:07 +0000] "GET /api/users?id=4 HTTP/1.1" 200 512 "-" "curl/8.0"
192.0.2.1 - - [21/Nov/2026:12:48:07 +0000] "POST /api/orders HTTP/1.1" 201 64 "-" "curl/8.0"
2001:db8::1 - - [21/Nov/2026:13:48:07 +0100] "POST /login HTTP/1.1" 302 0 "https://example.com/" "Mozilla/5.0"
2001:db8::2 - - [21/Nov/2026:04:48:08 -0800] "POST /login HTTP/1.1" 302 0 "-" "Mozilla/5.0"
192.0.2.1 - - [21/Nov/2026:12:48:08 +0000] "GET /static/app.js HTTP/1.1" 200 9000 "-" "Mozilla/5.0"
EOF
# 3: the 3rd request of 192.0.2.0/24 in 12:48:07 (its POST is not charged);
# 4-5: 13:48:07 +0100 is 12:48:07Z, 04:48:08 -0800 is 12:48:08Z; one /64;
# the 2nd POST of the minute is denied.
cat >"$T/want" <<'EOF'
1 2 1 0 1000 0 OK:edge.remote_address NO_RULE:- OK:edge.path_/api/*
1 2 0 0 1000 0 OK:edge.remote_address NO_RULE:- OK:edge.path_/api/*
0 2 0 1000 1000 0 OVER_LIMIT:edge.remote_address OK:edge.method_POST OK:edge.path_/api/*
1 1 0 0 53000 0 OK:edge.remote_address OK:edge.method_POST NO_RULE:-
0 1 0 52000 52000 0 OK:edge.remote_address OVER_LIMIT:edge.method_POST NO_RULE:-
1 2 1 0 1000 0 OK:edge.remote_address NO_RULE:- NO_RULE:-
EOF
RE="replay --rules $T/edge.yaml --domain edge --log-format combined"
"$SLUICE" $RE "$T/access.log" >"$T/got" 2>"$T/err"
same "combined log: zones, IPv6 /64, query strings dropped" "$T/want" "$T/got" $?

# ---- --summary -------------------------------------------------------------

"$SLUICE" $RR --capacity 2/1s --summary "$T/trace" >"$T/got" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && cmp -s "$T/want_cap" "$T/got"; then
    ok "--summary leaves standard output alone"
else
    bad "--summary stdout" "exit $rc" "$(diff "$T/want_cap" "$T/got" | head)"
fi
# the table, without the time line (it varies)
grep -v '^  time ' "$T/err" >"$T/sum"
cat >"$T/sumwant" <<'EOF'

sluicectl replay summary: rules RULES, domain api, capacity 2/1s
  requests               22   (23 lines read)
  allowed                15   68.2%
  denied                  7   31.8%
  descriptors            26   OK 15, OVER_LIMIT 7, SHADOW 1, ELASTIC 1, UNLIMITED 1, NO_RULE 1, OVER_QUOTA 0
  keys                   10   (counters in the store)
  rules (a descriptor counts for the limit its answer names; elsewhere: passed it, denied by another):
       matched    allowed     denied  elsewhere     shadow    elastic  rule (limit)
            12          7          2          3          0          0  api.user (2/minute fixed-window)
             2          1          1          0          0          0  api.path_/login (1/hour fixed-window)
             2          2          0          0          1          0  api.path_/beta (1/minute fixed-window)
             1          1          0          0          0          0  api.path_/health (unlimited)
             2          1          1          0          0          0  api.tenant#1 (3/second fixed-window)
             2          1          1          0          0          0  api.tenant#2 (4/minute fixed-window)
             1          0          1          0          0          0  api.blocked (0/second fixed-window)
             3          2          1          0          0          1  bulk jobs (1/second fixed-window elastic=3)
             1                                                         no rule
  top 8 counting keys by denials (OVER_LIMIT + SHADOW):
        denied     shadow  key
             1          0  api|blocked=yes
             1          0  api|bulk=nightly
             0          1  api|path=/beta
             1          0  api|path=/login
             1          0  api|tenant=acme#1000
             1          0  api|tenant=acme#60000
             1          0  api|user=a b,c
             1          0  api|user=bob
EOF
sed -i "s|RULES|$T/rules.yaml|" "$T/sumwant"
if cmp -s "$T/sumwant" "$T/sum"; then
    ok "--summary: totals, a row per rule, the most denied counting keys"
else
    bad "--summary table" "$(diff "$T/sumwant" "$T/sum")"
fi
grep -q '^  time  .* M requests/s$' "$T/err" && ok "--summary: a time line" || bad "--summary time line"

# the top list keeps 10, most denied first: user uN sends 2 + N, N denied
awk 'BEGIN { for (u = 1; u <= 14; u++) for (i = 0; i < 2 + u; i++) printf "%d user=u%02d\n", i, u }' >"$T/in"
"$SLUICE" $RR --summary "$T/in" >/dev/null 2>"$T/err"
top=$(sed -n '/top 10 counting keys/,$p' "$T/err" | awk 'NR > 2 { print $1 ":" $3 }' | tr '\n' ' ')
if [ "$top" = "14:api|user=u14 13:api|user=u13 12:api|user=u12 11:api|user=u11 10:api|user=u10 9:api|user=u09 8:api|user=u08 7:api|user=u07 6:api|user=u06 5:api|user=u05 " ]; then
    ok "--summary: the 10 most denied keys, in order"
else
    bad "--summary top 10" "got: $top" "$(cat "$T/err")"
fi

# More denied keys than the list tracks (4096): a hot user denied 58 times
# first, then 6000 users denied once each; the hot one stays on top, exact,
# and the list says its counts may be short for keys that came in late.
awk 'BEGIN { for (i = 0; i < 60; i++) printf "%d user=hot\n", i;
    for (u = 0; u < 6000; u++) for (i = 0; i < 3; i++) printf "100 user=u%d\n", u }' >"$T/in"
"$SLUICE" $RR --summary "$T/in" >/dev/null 2>"$T/err"
rc=$?
first=$(sed -n '/top 10 counting keys/{n;n;p}' "$T/err")
if [ $rc -eq 0 ] && [ "$(echo $first)" = "58 0 api|user=hot" ] &&
    grep -q '(and up to 1 more before it was tracked)' "$T/err" &&
    grep -q 'more than 4096 keys were denied' "$T/err"; then
    ok "--summary: 6001 denied keys in a bounded list, the hot key exact on top"
else
    bad "--summary beyond 4096 keys" "exit $rc, first '$first'" "$(tail -14 "$T/err")"
fi

# ---- sluiced's loader options: --merge-domains, --count-denied ----------------

# One domain in two files (Lyft's MERGE_DOMAIN_CONFIG); `a` at 2 a minute,
# `b` at 10.  The third request is denied by a: all-or-none leaves b
# uncharged (7 left after the fourth), Lyft's counting charges it (6 left).
mkdir "$T/lyft"
printf 'domain: api\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 2}\n' >"$T/lyft/a.yaml"
printf 'domain: api\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 10}\n' >"$T/lyft/b.yaml"
printf '0 a=1 b=1\n1 a=1 b=1\n2 a=1 b=1\n3 b=1\n' >"$T/lyft.trace"
cat >"$T/lyft.want" <<'EOF'
1 2 1 0 60000 0 OK:api.a OK:api.b
1 2 0 0 59999 0 OK:api.a OK:api.b
0 2 0 59998 59998 0 OVER_LIMIT:api.a OK:api.b
1 10 7 0 59997 0 OK:api.b
EOF
sed '4s/ 7 / 6 /' "$T/lyft.want" >"$T/lyft.want_counted"
RL="replay --rules $T/lyft --domain api"
for flags in "--merge-domains" "--merge-domains yes" "--merge-domains=yes" "--merge-domains=on" \
    "--merge-domains true --count-denied no" "--merge-domains 1 --count-denied=no" \
    "--merge-domains --count-denied=off" "--merge-domains --count-denied --count-denied no"; do
    "$SLUICE" $RL $flags "$T/lyft.trace" >"$T/got" 2>"$T/err"
    same "$flags: merged, all or none" "$T/lyft.want" "$T/got" $?
done
for flags in "--merge-domains --count-denied" "--merge-domains --count-denied yes" \
    "--count-denied=yes --merge-domains" "--count-denied=true --merge-domains=1" \
    "--merge-domains --count-denied on" "--merge-domains --count-denied no --count-denied"; do
    "$SLUICE" $RL $flags "$T/lyft.trace" >"$T/got" 2>"$T/err"
    same "$flags: merged, Lyft's counting" "$T/lyft.want_counted" "$T/got" $?
done
# a bare flag before FILE: FILE is not its value; from standard input too
"$SLUICE" $RL --merge-domains --count-denied "$T/lyft.trace" >"$T/got" 2>"$T/err"
same "--count-denied FILE: a bare flag, then the file" "$T/lyft.want_counted" "$T/got" $?
"$SLUICE" $RL --merge-domains --count-denied <"$T/lyft.trace" >"$T/got" 2>"$T/err"
same "--count-denied at the end, standard input" "$T/lyft.want_counted" "$T/got" $?
"$SLUICE" replay --rules "$T/lyft" --help >"$T/out"
if grep -q -- '--merge-domains yes|no' "$T/out" && grep -q -- '--count-denied yes|no' "$T/out" &&
    grep -q "MERGE_DOMAIN_CONFIG" "$T/out"; then
    ok "--help: --merge-domains and --count-denied"
else
    bad "--help: --merge-domains and --count-denied" "$(cat "$T/out")"
fi

# ---- errors: options ---------------------------------------------------------

# opt_error NAME PHRASE ARGS...: exit 2, one line "sluicectl: ...PHRASE...", no stdout.
opt_error() {
    name=$1
    phrase=$2
    shift 2
    "$SLUICE" "$@" <"$T/trace" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 2 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
        grep -q '^sluicectl: ' "$T/err" && grep -qF -- "$phrase" "$T/err"; then
        ok "error: $name -> $(head -c 160 "$T/err")"
    else
        bad "error: $name (sluicectl $*)" "want exit 2, one line with '$phrase' on stderr, empty stdout" \
            "got exit $rc, stderr: $(head -c 600 "$T/err")" "stdout: $(head -c 200 "$T/out")"
    fi
}

opt_error "missing --domain" "sluicectl: missing --domain (the rules domain every request is checked in)" \
    replay --rules "$T/rules.yaml"
opt_error "--algo with --rules" \
    "sluicectl: --algo cannot be used with --rules (each rule of the file sets its own algorithm and limit)" \
    $RR --algo token-bucket
opt_error "--limit=5 with --rules" "sluicectl: --limit cannot be used with --rules" $RR --limit=5
opt_error "--window with --rules" "sluicectl: --window cannot be used with --rules" $RR --window 1s
opt_error "--log-rejected with --rules" "sluicectl: --log-rejected cannot be used with --rules" $RR --log-rejected
opt_error "--threads with --rules" \
    "sluicectl: --threads cannot be used with --rules (rules are decided in input order, on one thread)" \
    $RR --threads 2
opt_error "--domain without --rules" "sluicectl: --domain needs --rules PATH" replay --domain api
opt_error "--log-format without --rules" "sluicectl: --log-format needs --rules PATH" \
    replay --algo gcra --limit 1 --window 1s --log-format combined
opt_error "bad --log-format" "sluicectl: unknown log format 'json' (expected lines or combined)" \
    $RR --log-format json
opt_error "bad --capacity" "sluicectl: --capacity: capacity '5000' must be N/DURATION" $RR --capacity 5000
opt_error "bad --max-memory" "sluicectl: --max-memory must be a number of bytes" $RR --max-memory 12q
opt_error "--rules without a value" "sluicectl: option '--rules' needs a value" replay --domain api --rules
opt_error "unknown option" "sluicectl: unknown option '--bogus'" $RR --bogus
opt_error "two files" "sluicectl: only one FILE may be given" $RR "$T/trace" "$T/trace"
opt_error "missing file" "sluicectl: cannot open '$T/nonexistent'" $RR "$T/nonexistent"
opt_error "missing rules file" "sluicectl: $T/none.yaml: " replay --rules "$T/none.yaml" --domain api
opt_error "unknown domain" "sluicectl: domain 'apx' is not in $T/rules.yaml (it defines: api)" \
    replay --rules "$T/rules.yaml" --domain apx
opt_error "bad --count-denied" "sluicectl: invalid --count-denied 'maybe': expected yes or no" \
    $RR --count-denied=maybe
opt_error "bad --merge-domains" "sluicectl: invalid --merge-domains '': expected yes or no" \
    $RR --merge-domains=
opt_error "--count-denied without --rules" \
    "sluicectl: --count-denied needs --rules PATH (what-if replay of a rules file)" replay --count-denied
opt_error "--merge-domains without --rules" "sluicectl: --merge-domains needs --rules PATH" \
    replay --algo gcra --limit 1 --window 1s --merge-domains=no
opt_error "a domain in two files, no --merge-domains" \
    "sluicectl: $T/lyft/b.yaml:1:9: domain 'api' is already defined in $T/lyft/a.yaml:1:9 (--merge-domains merges them" \
    $RL --count-denied
opt_error "a domain in two files, --merge-domains no" "domain 'api' is already defined in" \
    $RL --merge-domains no

# a bad rules file: its FILE:LINE:COLUMN message
printf 'domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minutes, requests_per_unit: 2}\n' >"$T/bad.yaml"
opt_error "bad rules file" "sluicectl: $T/bad.yaml:4:" replay --rules "$T/bad.yaml" --domain api
if grep -q "^sluicectl: $T/bad.yaml:4:[0-9]*: unknown unit 'minutes'" "$T/err"; then
    ok "bad rules file: FILE:LINE:COLUMN: what is wrong"
else
    bad "bad rules file message" "$(cat "$T/err")"
fi

for a in --help -h; do
    "$SLUICE" replay --rules "$T/rules.yaml" "$a" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q '^usage: sluicectl replay --rules PATH --domain D' "$T/out" &&
        grep -q 'CODE:RULE' "$T/out"; then
        ok "sluicectl replay --rules PATH $a"
    else
        bad "sluicectl replay --rules PATH $a" "exit $rc" "$(head -5 "$T/out")"
    fi
done
if "$SLUICE" replay --help | grep -q 'sluicectl replay --rules PATH --domain D'; then
    ok "sluicectl replay --help names the --rules form"
else
    bad "sluicectl replay --help names the --rules form"
fi

# ---- errors: malformed lines -------------------------------------------------

# line_error NAME N PHRASE FILE ARGS...: FILE is answered up to line N-1 as
# those lines alone would be, then exit 2 with one line "sluicectl: line N: PHRASE".
line_error() {
    name=$1
    n=$2
    phrase=$3
    input=$4
    shift 4
    head -n $((n - 1)) "$input" >"$T/before"
    "$SLUICE" "$@" <"$T/before" >"$T/want" 2>/dev/null
    "$SLUICE" "$@" <"$input" >"$T/got" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 2 ] && cmp -s "$T/want" "$T/got" && [ "$(wc -l <"$T/err")" -eq 1 ] &&
        grep -qF -- "sluicectl: line $n: $phrase" "$T/err"; then
        ok "bad line: $name -> $(head -c 160 "$T/err")"
    else
        bad "bad line: $name" "want exit 2, 'sluicectl: line $n: $phrase', the lines before answered" \
            "got exit $rc, stderr: $(head -c 300 "$T/err")" \
            "stdout: $(wc -l <"$T/got") lines, want $(wc -l <"$T/want")"
    fi
}

# with_bad NAME PHRASE: the bad line's bytes on stdin come after 4 good lines
# of the trace (line 5), then a good line that must not be answered.
with_bad() {
    { head -n 5 "$T/trace"; cat; printf '\n9000 user=bob\n'; } >"$T/in"
    line_error "$1" 6 "$2" "$T/in" $RR
}
printf '5' | with_bad "missing descriptor" "missing descriptor (expected: T key=value[,key=value...] ... [cost=N])"
printf 'x user=bob' | with_bad "bad time" "time 'x' is not an integer (T must be milliseconds)"
printf '5 userbob' | with_bad "no '='" "descriptor 1: entry 'userbob' has no '=' (expected key=value)"
printf '5 user=a =b' | with_bad "empty key" "descriptor 2: entry '=b' has an empty key"
printf '5 user=%%zz' | with_bad "bad escape" "descriptor 1: bad escape '%zz' in 'user=%zz'"
printf '5 user=a cost=-1' | with_bad "cost -1" "cost '-1' is out of range (0 to 1000000000000)"
printf '5 user=a\000' | with_bad "NUL byte" "NUL byte at column 9 (binary data?)"
printf '5 %s' "$(awk 'BEGIN { for (i = 0; i < 17; i++) printf "a=%d ", i }')" |
    with_bad "17 descriptors" "more than 16 descriptors (RL.CHECK takes at most 16)"
printf '5 a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1,j=1,k=1,l=1,m=1,n=1,o=1,p=1,q=1' |
    with_bad "17 entries" "descriptor 1 has more than 16 entries (rules nest at most 16 deep)"

# A request RL.CHECK would refuse (9 tenants of 2 limits: 18 counters, more
# than 16) is answered ERR, as sluiced answers -ERR to it, and the run goes
# on.  (A counting key over 512 bytes is not refused: it takes the digest
# form, src/rules/check.h.)
{ head -n 5 "$T/trace"; printf '5 tenant=a tenant=b tenant=c tenant=d tenant=e tenant=f tenant=g tenant=h tenant=i\n'; printf '9000 user=bob\n'; } >"$T/in"
head -n 5 "$T/trace" | "$SLUICE" $RR >"$T/want" 2>/dev/null
{ head -n 5 "$T/trace"; printf '9000 user=bob\n'; } | "$SLUICE" $RR | tail -n 1 >"$T/last" 2>/dev/null
"$SLUICE" $RR <"$T/in" >"$T/got" 2>"$T/err"
rc=$?
w=$(wc -l <"$T/want")
if [ "$rc" -eq 0 ] && [ "$(head -n "$w" "$T/got")" = "$(cat "$T/want")" ] &&
    [ "$(sed -n "$((w + 1))p" "$T/got")" = "ERR more than 16 limits in one request" ] &&
    [ "$(sed -n "$((w + 2))p" "$T/got")" = "$(cat "$T/last")" ] && [ "$(wc -l <"$T/got")" -eq $((w + 2)) ] &&
    grep -qF "sluicectl: 1 request answered ERR, as RL.CHECK would refuse them; the first at line 6: more than 16 limits" "$T/err"; then
    ok "a request RL.CHECK refuses (18 limits): ERR line, the run goes on"
else
    bad "a request RL.CHECK refuses (18 limits)" "exit $rc" "$(cat "$T/got" | head -8)" "$(head -c 300 "$T/err")"
fi
printf '5 %s' "$(printf '%070000d' 0)" | with_bad "line of 70000 bytes" "line is longer than 65536 bytes"

# combined: line 3 is bad
{ head -n 2 "$T/access.log"; printf '192.0.2.1 - - [21/Nov/2026:12:48:07 +0000] "GET / HTTP/1.1" 200 0 "-" "curl\n'; tail -n 1 "$T/access.log"; } >"$T/in"
line_error "combined: unterminated user agent" 3 "unterminated user agent '\"curl' (no closing '\"')" "$T/in" $RE
{ head -n 2 "$T/access.log"; printf '192.0.2.1 - - [21/Foo/2026:12:48:07 +0000] "GET / HTTP/1.1" 200 0 "-" "-"\n'; } >"$T/in"
line_error "combined: bad month" 3 "bad month 'Foo' in time '21/Foo/2026:12:48:07 +0000'" "$T/in" $RE
{ head -n 2 "$T/access.log"; printf '192.0.2.1 - - [21/Nov/2026:12:48:07 +0000] "GET / HTTP/1.1" 200 0\n'; } >"$T/in"
line_error "combined: common log format (no referer)" 3 "missing referer" "$T/in" $RE
line_error "combined: a lines-format trace" 2 "expected ' - ' after the remote address '0'" "$T/trace" $RE

# ---- --max-memory, large inputs -----------------------------------------------

# Every counter is remembered by default: user 'first' at t=0, 100000 other
# users, then 'first' twice more in the same minute: the last is denied.
awk 'BEGIN { print "0 user=first"; for (i = 0; i < 100000; i++) printf "1 user=k%d\n", i;
    print "2 user=first"; print "3 user=first" }' >"$T/in"
"$SLUICE" $RR "$T/in" >"$T/got" 2>"$T/err"
rc=$?
last=$(tail -n 1 "$T/got")
if [ $rc -eq 0 ] && [ "$last" = "0 2 0 59997 59997 0 OVER_LIMIT:api.user" ]; then
    ok "every counter remembered without --max-memory (100001 keys)"
else
    bad "every counter remembered" "exit $rc, last answer '$last'" "$(cat "$T/err")"
fi
"$SLUICE" $RR --max-memory 256k "$T/in" >"$T/got" 2>"$T/err"
rc=$?
n=$(wc -l <"$T/got")
if [ $rc -eq 0 ] && [ "$n" -eq 100003 ] && grep -q 'warning: [0-9]* counters were evicted' "$T/err"; then
    ok "--max-memory 256k: 100003 answers, evictions reported"
else
    bad "--max-memory 256k" "exit $rc, $n answers" "$(head -c 500 "$T/err")"
fi

# A file of 16 MiB or more (many read blocks): as a file and through a pipe
# the same answers; and the progress bar rules.
awk 'BEGIN { s = 12345; for (i = 0; i < 700000; i++) { s = (s * 16807) % 2147483647;
    printf "%d user=user%d,x=padding-padding tenant=t%d\n", i * 7, s % 3000, s % 7 } }' >"$T/big"
size=$(wc -c <"$T/big")
"$SLUICE" $RR "$T/big" >"$T/big.file" 2>"$T/err.file"
rc1=$?
cat "$T/big" | "$SLUICE" $RR >"$T/big.pipe" 2>"$T/err.pipe"
rc2=$?
n=$(wc -l <"$T/big.file")
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$n" -eq 700000 ] && cmp -s "$T/big.file" "$T/big.pipe"; then
    ok "700000 lines ($size bytes): file and pipe give the same answers"
else
    bad "700000 lines, file vs pipe" "exit $rc1/$rc2, $n lines" "$(head -c 300 "$T/err.file")"
fi
if [ "$size" -ge 16777216 ] && [ ! -s "$T/err.file" ] && [ ! -s "$T/err.pipe" ]; then
    ok "no progress bar when standard error is not a terminal"
else
    bad "no progress bar off a terminal" "size $size" "$(head -c 300 "$T/err.file" | od -c | head -5)"
fi

if ! command -v script >/dev/null 2>&1; then
    bad "progress bar" "no 'script' (util-linux) to make a pty"
else
    # standard error on a pty, standard output to a file
    script -qec "'$SLUICE' $RR '$T/big' >'$T/big.pty'" /dev/null </dev/null >"$T/pty" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && cmp -s "$T/big.file" "$T/big.pty" &&
        grep -q 'sluicectl replay: \[[#.]*\] *[0-9.]*% of [0-9.]* MiB, [0-9.]* M lines/s' "$T/pty" &&
        [ "$(tail -c 4 "$T/pty" | od -An -c | tr -d ' ')" = "\\r033[K" ]; then
        ok "progress bar on a terminal for a $size-byte file, cleared at the end"
    else
        bad "progress bar on a pty" "exit $rc" "$(od -c "$T/pty" | head -8)"
    fi
    # a small file: no bar
    script -qec "'$SLUICE' $RR '$T/trace' >'$T/small.pty'" /dev/null </dev/null >"$T/pty" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ ! -s "$T/pty" ]; then
        ok "no progress bar for a small file, even on a terminal"
    else
        bad "no progress bar for a small file" "exit $rc" "$(od -c "$T/pty" | head -4)"
    fi
    # standard input from a pipe: no bar (no size to show)
    script -qec "cat '$T/big' | '$SLUICE' $RR >/dev/null" /dev/null </dev/null >"$T/pty" 2>&1
    if [ ! -s "$T/pty" ]; then
        ok "no progress bar for a pipe"
    else
        bad "no progress bar for a pipe" "$(od -c "$T/pty" | head -4)"
    fi
fi

# ---- quota mode in the summary ---------------------------------------------
# Two quota descriptors, the first over on the third request: it answers
# OVER_QUOTA (the other has room, so the request passes), and the summary
# counts it among the descriptors' answers.
cat >"$T/quota.yaml" <<'EOF'
domain: q
descriptors:
  - {key: backend, value: primary, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: backend, value: fallback, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 3}}
EOF
printf '1000 backend=primary backend=fallback\n%.0s' 1 2 3 >"$T/qtrace"
"$SLUICE" replay --rules "$T/quota.yaml" --domain q --summary "$T/qtrace" >"$T/got" 2>"$T/err"
rc=$?
if [ $rc -eq 0 ] && sed -n 3p "$T/got" | grep -q '^1 .* OVER_QUOTA:q.backend_primary OK:q.backend_fallback$' &&
    grep -q -F 'OK 5, OVER_LIMIT 0, SHADOW 0, ELASTIC 0, UNLIMITED 0, NO_RULE 0, OVER_QUOTA 1' "$T/err"; then
    ok "quota mode: the third request passes with OVER_QUOTA, counted in the summary"
else
    bad "quota mode in the summary" "exit $rc" "$(cat "$T/got")" "$(grep descriptors "$T/err")"
fi

finish
