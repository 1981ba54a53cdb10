#!/bin/sh
# test_sluicectl_check.sh -- `sluicectl check PATH...` (docs/operations.md):
#
#   - the examples' rules files (examples/nginx/edge.yaml,
#     examples/envoy/ratelimit-rules.yaml, and every file an example's
#     `--rules` names, Traefik's included): exit 0, one exact line per
#     domain on stdout, nothing on stderr; -v adds a line per rule; -q
#     prints nothing;
#   - what a domain line counts: descriptors, rules (limits), shadow,
#     unlimited, deny all; a folder (one line per domain, each naming its
#     file), an empty folder, a domain in two files refused without
#     --merge-domains (sluiced's message naming both) and one line "merged
#     from 2 files" with it, in every spelling;
#   - bad files: exit 1, stdout empty, stderr exactly the loader's
#     "FILE:LINE:COLUMN: what is wrong" (tests/e2e/test_sluicectl.py shows
#     sluiced logs the same words); a good and a bad PATH together;
#   - usage: no PATH, an unknown option, a bad yes/no -> exit 2 and one
#     `sluicectl: ...` line; --help -> exit 0; sluicectl --help names check
#     and top.
#
# Runs against $SLUICE_BUILD/sluicectl (build/ and build/asan/).
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
need_sluice
cd "$ROOT" || exit 1

# expect NAME WANT_RC WANT_OUT WANT_ERR ARGS...: `sluicectl ARGS` exits
# WANT_RC with exactly WANT_OUT on stdout and WANT_ERR on stderr ("" for
# nothing; each a whole text, without its last newline).
expect() {
    name=$1 want_rc=$2 want_out=$3 want_err=$4
    shift 4
    "$SLUICE" "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ -n "$want_out" ]; then printf '%s\n' "$want_out" >"$T/want_out"; else : >"$T/want_out"; fi
    if [ -n "$want_err" ]; then printf '%s\n' "$want_err" >"$T/want_err"; else : >"$T/want_err"; fi
    if [ "$rc" -eq "$want_rc" ] && cmp -s "$T/out" "$T/want_out" && cmp -s "$T/err" "$T/want_err"; then
        ok "$name"
    else
        bad "$name" "exit $rc (want $want_rc)" "stdout:" "$(diff "$T/want_out" "$T/out" | head -10)" \
            "stderr:" "$(diff "$T/want_err" "$T/err" | head -10)"
    fi
}

# ---- the examples ------------------------------------------------------------

expect "examples/nginx/edge.yaml" 0 \
    "examples/nginx/edge.yaml: OK, domain edge, 2 descriptors, 2 rules" "" \
    check examples/nginx/edge.yaml
expect "examples/envoy/ratelimit-rules.yaml" 0 \
    "examples/envoy/ratelimit-rules.yaml: OK, domain rl, 4 descriptors, 3 rules" "" \
    check examples/envoy/ratelimit-rules.yaml
expect "two PATHs: a line each, in order" 0 \
    "examples/envoy/ratelimit-rules.yaml: OK, domain rl, 4 descriptors, 3 rules
examples/nginx/edge.yaml: OK, domain edge, 2 descriptors, 2 rules" "" \
    check examples/envoy/ratelimit-rules.yaml examples/nginx/edge.yaml
expect "-v: a line per rule" 0 \
    "examples/envoy/ratelimit-rules.yaml: OK, domain rl, 4 descriptors, 3 rules
  rl.source_cluster_proxy.destination_cluster_bar: 10/minute fixed-window (line 13)
  rl.source_cluster_proxy.destination_cluster: 100/minute fixed-window (line 17)
  rl.remote_address: 5/second fixed-window (line 21)" "" \
    check -v examples/envoy/ratelimit-rules.yaml
expect "--verbose after the PATH" 0 \
    "examples/nginx/edge.yaml: OK, domain edge, 2 descriptors, 2 rules
  edge.remote_address: 5/minute fixed-window (line 8)
  edge.path_/login: 3/minute fixed-window (line 12)" "" \
    check examples/nginx/edge.yaml --verbose
expect "-q: nothing on success" 0 "" "" check -q examples/nginx/edge.yaml
expect "--quiet" 0 "" "" check --quiet examples/nginx/edge.yaml

# Every rules file an example starts sluiced with (`sluiced --rules X` in
# its comments, X relative to the example's folder): nginx, Envoy, Traefik.
n=0
for f in examples/*/*; do
    sed -n 's/.*sluiced --rules \([^ `]*\).*/\1/p' "$f" | while read -r rel; do
        p=$(dirname "$f")/$rel
        if "$SLUICE" check -q "$p" 2>"$T/err"; then
            ok "$f: its --rules $rel loads"
        else
            bad "$f: its --rules $rel does not load" "$(cat "$T/err")"
        fi
    done
    grep -q 'sluiced --rules ' "$f" && n=$((n + 1))
done
if [ "$n" -ge 4 ]; then ok "examples naming --rules: $n"; else bad "only $n examples name sluiced --rules"; fi

# ---- what a domain line counts -------------------------------------------------

mkdir -p "$T/kinds"
cat >"$T/kinds/api.yaml" <<'EOF'
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path                      # routes only: no limit
        descriptors:
          - key: verb
            value: POST
            rate_limit:                # two limits: two rules
              - {unit: second, requests_per_unit: 2}
              - {unit: hour, requests_per_unit: 100}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
EOF
expect "descriptors, rules, shadow, unlimited, deny all" 0 \
    "$T/kinds/api.yaml: OK, domain api, 6 descriptors, 6 rules (1 shadow, 1 unlimited, 1 deny all)" "" \
    check "$T/kinds/api.yaml"
expect "-v: several limits, shadow, unlimited, deny all" 0 \
    "$T/kinds/api.yaml: OK, domain api, 6 descriptors, 6 rules (1 shadow, 1 unlimited, 1 deny all)
  api.user: 10/minute fixed-window (line 4)
  api.user.path.verb_POST#1: 2/second fixed-window (line 11)
  api.user.path.verb_POST#2: 100/hour fixed-window (line 12)
  api.beta: 1/minute fixed-window shadow (line 15)
  api.health: unlimited (line 17)
  api.banned: 0/second fixed-window (line 19)" "" \
    check -v "$T/kinds/api.yaml"

# ---- folders ---------------------------------------------------------------------

mkdir -p "$T/dir" "$T/empty"
printf 'domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n' >"$T/dir/b.yaml"
printf 'domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n' >"$T/dir/a.yml"
printf 'not: rules\n' >"$T/dir/notes.txt"
expect "a folder: a line per domain, in file-name order" 0 \
    "$T/dir/a.yml: OK, domain a, 1 descriptor, 1 rule
$T/dir/b.yaml: OK, domain b, 1 descriptor, 1 rule" "" \
    check "$T/dir"
expect "an empty folder" 0 "$T/empty: OK, no rules files (every RL.CHECK answers NO_RULE)" "" \
    check "$T/empty"

mkdir -p "$T/merge"
printf 'domain: m\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n' >"$T/merge/1.yaml"
printf 'domain: m\ndescriptors:\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 2}\n' >"$T/merge/2.yaml"
SPLIT="$T/merge/2.yaml:1:9: domain 'm' is already defined in $T/merge/1.yaml:1:9 (--merge-domains merges them, as Lyft's MERGE_DOMAIN_CONFIG does)"
MERGED="$T/merge/1.yaml: OK, domain m (merged from 2 files), 2 descriptors, 2 rules"
expect "a domain in two files: refused, naming both" 1 "" "$SPLIT" check "$T/merge"
expect "--merge-domains: one domain" 0 "$MERGED" "" check --merge-domains "$T/merge"
expect "--merge-domains yes PATH" 0 "$MERGED" "" check --merge-domains yes "$T/merge"
expect "--merge-domains=on" 0 "$MERGED" "" check --merge-domains=on "$T/merge"
expect "--merge-domains no: refused again" 1 "" "$SPLIT" check --merge-domains no "$T/merge"
expect "--count-denied changes nothing that loads" 1 "" "$SPLIT" check --count-denied "$T/merge"

# ---- bad files -----------------------------------------------------------------

printf 'domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: minite, requests_per_unit: 3}\n' >"$T/unit.yaml"
expect "a misspelt unit: FILE:LINE:COLUMN, exit 1" 1 "" \
    "$T/unit.yaml:4:24: unknown unit 'minite' (expected second, minute, hour, day, week, month or year)" \
    check "$T/unit.yaml"
printf 'domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n' >"$T/dup.yaml"
"$SLUICE" check "$T/dup.yaml" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ] &&
    grep -q "^$T/dup.yaml:5:[0-9]*: " "$T/err"; then
    ok "a duplicate descriptor: one line at its place: $(cat "$T/err")"
else
    bad "a duplicate descriptor" "exit $rc" "$(cat "$T/err")"
fi
printf 'domain: x\ndescriptors: [\n' >"$T/yaml.yaml"
"$SLUICE" check "$T/yaml.yaml" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -q "^$T/yaml.yaml:[0-9]*:[0-9]*: " "$T/err"; then
    ok "broken YAML: $(cat "$T/err")"
else
    bad "broken YAML" "exit $rc" "$(cat "$T/err")"
fi
expect "Envoy's own config is not a rules file" 1 "" \
    "examples/envoy/envoy.yaml:14:1: unknown field 'static_resources' in a rules file (expected domain or descriptors)" \
    check examples/envoy/envoy.yaml
expect "a folder holding a bad file: refused whole" 1 "" \
    "examples/envoy/envoy.yaml:14:1: unknown field 'static_resources' in a rules file (expected domain or descriptors)" \
    check examples/envoy
expect "no such file" 1 "" "$T/none.yaml: No such file or directory" check "$T/none.yaml"
expect "a good and a bad PATH: the good one's line, the bad one's message, exit 1" 1 \
    "examples/nginx/edge.yaml: OK, domain edge, 2 descriptors, 2 rules" \
    "$T/unit.yaml:4:24: unknown unit 'minite' (expected second, minute, hour, day, week, month or year)" \
    check examples/nginx/edge.yaml "$T/unit.yaml"
expect "-q still prints what is wrong" 1 "" "$T/none.yaml: No such file or directory" \
    check -q "$T/none.yaml"

# ---- usage -----------------------------------------------------------------------

expect "no PATH" 2 "" "sluicectl: check needs a rules file or folder (see sluicectl check --help)" check
expect "unknown option" 2 "" "sluicectl: unknown option '--domain' (see sluicectl check --help)" \
    check --domain x examples/nginx/edge.yaml
expect "unknown short option" 2 "" "sluicectl: unknown option '-x' (see sluicectl check --help)" \
    check -x examples/nginx/edge.yaml
expect "bad yes/no" 2 "" "sluicectl: invalid --merge-domains 'maybe': expected yes or no" \
    check --merge-domains=maybe examples/nginx/edge.yaml
expect "-- ends the options" 1 "" "-q: No such file or directory" check -- -q
for a in --help -h; do
    "$SLUICE" check "$a" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] && head -n 1 "$T/out" | grep -q '^usage: sluicectl check ' && [ ! -s "$T/err" ]; then
        ok "sluicectl check $a"
    else
        bad "sluicectl check $a" "exit $rc"
    fi
done
"$SLUICE" --help >"$T/out" 2>&1
if grep -q '^  check ' "$T/out" && grep -q '^  top ' "$T/out" && grep -q '^  replay ' "$T/out"; then
    ok "sluicectl --help lists replay, check and top"
else
    bad "sluicectl --help" "$(cat "$T/out")"
fi

# ---- the man page --------------------------------------------------------------
# every long option of `check --help` and `top --help` is in sluicectl(1),
# under the synopsis of its command
MAN=man/sluicectl.1.in
for cmd in check top; do
    "$SLUICE" "$cmd" --help >"$T/help" 2>&1
    opts=$(grep -o -- '--[a-z][a-z-]*' "$T/help" | grep -v -- '--help' | sort -u)
    [ -n "$opts" ] || bad "sluicectl $cmd --help names no option"
    missing=""
    for o in $opts; do
        troff=$(printf '%s' "$o" | sed 's/-/\\\\-/g')
        grep -q -- "$troff" "$MAN" || missing="$missing $o"
    done
    if grep -q "^\.B sluicectl $cmd\$" "$MAN" && [ -z "$missing" ]; then
        ok "sluicectl(1) has the synopsis of $cmd and its options: $(echo $opts)"
    else
        bad "sluicectl(1) and sluicectl $cmd --help" "missing:$missing"
    fi
done

finish
