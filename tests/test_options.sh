#!/bin/sh
# test_options.sh -- sluiced's options as a user meets them, read from the
# one table that defines them (src/server/config.c), which
# `sluiced --dump-options` prints -- never from a list written here:
#
#   - docs/sluiced.md's option table has a row for every option and no
#     other, each spelled as the table spells it (`--name VALUE`, the short
#     flag), with its config-file twin (or none for a flag-only option) and
#     the table's default; `sluiced --help` lists each the same way;
#   - every default is the real one: giving it changes no value (a
#     default "none" is an empty value);
#   - every option takes `--name VALUE`, `--name=VALUE` and its config-file
#     line `name VALUE` alike;
#   - every yes/no option takes every documented spelling -- bare `--name`,
#     `--name WORD` and `--name=WORD` for yes/no/true/false/on/off/1/0 in
#     either case, `name` and `name WORD` in a config file -- and gives the
#     value it says, and refuses any other word with exit status 2 and the
#     message naming it.
#
# Each check looks at the value the parsed command line gives the option,
# the sixth field of `--dump-options`: exactly what sluiced would run with.
#
# One case per kind of check, not one per option (a table of options is a
# few behaviours): each kind goes over every option it applies to, and
# fails listing every option that failed it (`miss KIND WHAT`, then
# `verdict KIND NAME`); a kind that met no option at all fails too.
set -u
ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
SLUICED=$BUILD/sluiced
[ -x "$SLUICED" ] || {
    echo "FAIL  no $SLUICED (build first)"
    exit 1
}
TAB=$(printf '\t')
US=$(printf '\037') # what `read` splits the rows on: a tab would merge empty fields

# value NAME ARGS...: the value option NAME gets from `sluiced ARGS...`;
# fails (status 1) when sluiced refuses the arguments.
value() {
    name=$1
    shift
    "$SLUICED" "$@" --dump-options >"$T/dump" 2>"$T/err" || return 1
    awk -F "$TAB" -v n="$name" '$1 == n { print $6; found = 1 } END { exit !found }' "$T/dump"
}

# miss KIND WHAT...: one failure of check KIND (kept in a file: checks run
# in subshells too); seen KIND: one option went through check KIND.
miss() {
    kind=$1
    shift
    for l in "$@"; do printf '%s\n' "$l"; done >>"$T/miss.$kind"
}
seen() { echo . >>"$T/seen.$1"; }
# verdict KIND NAME: the one case of check KIND: ok when it went over at
# least one option and missed none, else FAIL with every miss.
verdict() {
    n=0
    [ -f "$T/seen.$1" ] && n=$(grep -c . "$T/seen.$1")
    if [ "$n" -eq 0 ]; then
        bad "$2" "no option went through this check"
    elif [ -s "$T/miss.$1" ]; then
        bad "$2 ($n checked)" "$(cat "$T/miss.$1")"
    else
        ok "$2 ($n checked)"
    fi
}

if ! "$SLUICED" --dump-options >"$T/table" 2>"$T/err"; then
    bad "sluiced --dump-options" "$(cat "$T/err")"
    finish
fi
grep -v '^#' "$T/table" >"$T/rows"
tr '\t' '\037' <"$T/rows" >"$T/rows.us"
nrows=$(grep -c . "$T/rows")
if [ "$nrows" -ge 20 ] && ! awk -F "$TAB" 'NF != 7' "$T/rows" | grep -q .; then
    ok "--dump-options: $nrows options, seven fields each"
else
    bad "--dump-options: $nrows rows, or a row without seven fields" "$(head -3 "$T/rows")"
fi

# ---- docs/sluiced.md's option table --------------------------------------
# Its rows: from the header `| flag | config file | default | meaning |` to
# the first line that is not a table row; "\|" is a '|' inside a cell.
awk '/^\| flag \| config file \| default \| meaning \|$/ { t = 1; next }
     t && !/^\|/ { exit }
     t && /^\|---/ { next }
     t { gsub(/\\\|/, "\001"); n = split($0, c, "|")
         for (i = 2; i <= 4; i++) { gsub(/^ +| +$/, "", c[i]); gsub("\001", "|", c[i]) }
         print c[2] "\t" c[3] "\t" c[4] }' "$ROOT/docs/sluiced.md" >"$T/doc"
ndoc=$(grep -c . "$T/doc")
[ "$ndoc" -gt 0 ] || bad "docs/sluiced.md: no option table found"

# The table's own spelling of each row, in the docs' markdown.
while IFS="$US" read -r name short arg infile def val help; do
    flag="\`--$name${arg:+ $arg}\`${short:+, \`$short\`}"
    seen docs
    row=$(awk -F "$TAB" -v f="$flag" '$1 == f' "$T/doc")
    if [ -z "$row" ]; then
        miss docs "no row $flag; its rows: $(cut -f1 "$T/doc" | grep -F -- "--$name" | tr '\n' ' ' || echo none)"
        continue
    fi
    twin=$(printf '%s\n' "$row" | cut -f2)
    ddef=$(printf '%s\n' "$row" | cut -f3 | tr -d '`')
    if [ "$infile" = yes ]; then
        case $twin in
        "\`$name\`" | "\`$name "*) twin_ok=1 ;;
        *) twin_ok=0 ;;
        esac
        [ "$arg" = "yes|no" ] && { [ "$twin" = "\`$name yes|no\`" ] || twin_ok=0; }
    else
        [ "$twin" = "—" ] && twin_ok=1 || twin_ok=0
    fi
    if [ "$twin_ok" != 1 ] || [ "$ddef" != "$def" ]; then
        miss docs "$flag: config file column '$twin' (config file: $infile)," \
            "    default column '$ddef', the table says '$def'"
    fi
done <"$T/rows.us"
verdict docs "docs/sluiced.md: a row for every option, with its config-file twin and default"
cut -f1 "$T/doc" | while IFS= read -r f; do
    seen docs_extra
    n=$(printf '%s\n' "$f" | sed -n 's/^`--\([a-z-]*\).*/\1/p')
    if [ -z "$n" ] || ! cut -f1 "$T/rows" | grep -qx -- "$n"; then
        miss docs_extra "docs/sluiced.md documents $f, which sluiced does not have"
    fi
done
verdict docs_extra "docs/sluiced.md documents no option sluiced does not have"

# ---- --help ----------------------------------------------------------------
"$SLUICED" --help >"$T/help" 2>&1
while IFS="$US" read -r name short arg infile def val help; do
    want="  --$name${arg:+ $arg}${short:+, $short}"
    seen help
    if ! grep -q -x -F -- "$want" "$T/help" && ! grep -q -F -- "$want  " "$T/help"; then
        miss help "--help does not list '$want'"
    fi
done <"$T/rows.us"
verdict help "--help lists every option as the table spells it"

# ---- defaults are real; --name V, --name=V and the file's `name V` agree ----
cut -f6- "$T/table" >"$T/values.default"
while IFS="$US" read -r name short arg infile def val help; do
    [ -z "$arg" ] && continue # --help, --version, --dump-options take no value
    case $def in
    none)
        seen defaults
        [ -z "$val" ] || miss defaults "--$name defaults to '$val', the table says none"
        case $arg in
        FILE | PATH) v=$T/some-file ;;
        N/DUR) v=7/3s ;;
        *) v= ;;
        esac
        ;;
    *)
        v=$def
        if [ "$name" = max-output-total ]; then
            v= # its default is a description, checked below
        elif "$SLUICED" "--$name=$def" --dump-options 2>"$T/err" >"$T/dump.given"; then
            seen defaults
            cut -f6- "$T/dump.given" >"$T/values.given"
            cmp -s "$T/values.default" "$T/values.given" ||
                miss defaults "--$name=$def, its stated default, changes the values:" \
                    "$(diff "$T/values.default" "$T/values.given" | sed 's/^/    /')"
        else
            seen defaults
            miss defaults "--$name=$def, its stated default, is refused: $(cat "$T/err")"
        fi
        ;;
    esac
    [ -z "$v" ] && continue
    : >"$T/some-file"
    # A TLS file means something only with a TLS listener and its other
    # files (sluiced refuses it alone, which test_tls.py checks): give them.
    case $name in
    tls-cert-file) set -- --tls-port 0 --tls-key-file "$T/some-file" --tls-auth-clients no ;;
    tls-key-file) set -- --tls-port 0 --tls-cert-file "$T/some-file" --tls-auth-clients no ;;
    tls-ca-cert-file) set -- --tls-port 0 --tls-cert-file "$T/some-file" --tls-key-file "$T/some-file" ;;
    *) set -- ;;
    esac
    a=$(value "$name" "$@" "--$name" "$v") || a="refused: $(cat "$T/err")"
    b=$(value "$name" "$@" "--$name=$v") || b="refused: $(cat "$T/err")"
    if [ "$infile" = yes ]; then
        printf '%s %s\n' "$name" "$v" >"$T/conf"
        c=$(value "$name" "$@" --config "$T/conf") || c="refused: $(cat "$T/err")"
    else
        c=$a
    fi
    seen forms
    if [ "$a" != "$b" ] || [ "$a" != "$c" ] || case $a in refused*) true ;; *) false ;; esac; then
        miss forms "--$name $v gives '$a', --$name=$v '$b', the file ('$name $v', $infile) '$c'"
    fi
done <"$T/rows.us"
verdict defaults "every stated default is the real one (giving it changes no value)"
verdict forms "every option: --name V, --name=V and the config file's 'name V' give one value"
# max-output-total's default is a description: a quarter of --max-memory,
# at least 16mb; 256mb when --max-memory is 0.
for mm in 1gb:256mb 4gb:1gb 32mb:16mb 0:256mb; do
    got=$(value max-output-total --max-memory "${mm%%:*}") || got="refused: $(cat "$T/err")"
    seen derived
    [ "$got" = "${mm#*:}" ] ||
        miss derived "--max-memory ${mm%%:*}: max-output-total '$got', want ${mm#*:}"
done
verdict derived "max-output-total's default: a quarter of --max-memory, at least 16mb, 256mb for 0"

# ---- every spelling of every yes/no option ---------------------------------
grep "$TAB\\(yes|no\\)$TAB" "$T/rows" | cut -f1 >"$T/bools"
nb=$(grep -c . "$T/bools")
[ "$nb" -ge 5 ] || miss spell "only $nb yes/no options in the table: $(tr '\n' ' ' <"$T/bools")"
# spell KIND NAME WANT ARGS...: option NAME is WANT after `sluiced ARGS...`
spell() {
    kind=$1 name=$2 want=$3
    shift 3
    seen "$kind"
    if got=$(value "$name" "$@"); then
        [ "$got" = "$want" ] || miss "$kind" "$name is '$got' after: $*, want $want"
    else
        miss "$kind" "sluiced $* refused: $(head -1 "$T/err")"
    fi
}
while read -r name; do
    def=$(awk -F "$TAB" -v n="$name" '$1 == n { print $5 }' "$T/rows")
    other=yes
    [ "$def" = yes ] && other=no
    # Bare: yes, alone, before another flag, and last.
    spell spell "$name" yes "--$name"
    spell spell "$name" yes "--$name" --port 7001
    spell spell "$name" yes --port 7001 "--$name"
    for w in yes no YES No true false TRUE False on off ON Off 1 0; do
        case $w in yes | YES | true | TRUE | on | ON | 1) want=yes ;; *) want=no ;; esac
        spell spell "$name" $want "--$name" "$w"
        spell spell "$name" $want "--$name=$w"
        printf '%s %s\n' "$name" "$w" >"$T/conf"
        spell spell "$name" $want --config "$T/conf"
    done
    printf '# only the name\n%s\n' "$name" >"$T/conf"
    spell spell "$name" yes --config "$T/conf"
    # The flag overrides the file, both ways.
    printf '%s %s\n' "$name" "$other" >"$T/conf"
    spell override "$name" "$def" --config "$T/conf" "--$name" "$def"
    spell override "$name" "$def" "--$name=$def" --config "$T/conf"
    # Any other word is refused, naming it, and nothing starts.
    for bad_args in "--$name maybe" "--$name=maybe" "--$name="; do
        seen refuse
        # shellcheck disable=SC2086
        "$SLUICED" $bad_args --dump-options >"$T/out" 2>"$T/err"
        rc=$?
        w=${bad_args#*[ =]}
        want="sluiced: invalid --$name '$w': expected yes or no"
        if [ "$rc" -ne 2 ] || [ "$(head -1 "$T/err")" != "$want" ] || [ -s "$T/out" ]; then
            miss refuse "sluiced $bad_args: exit $rc, '$(head -1 "$T/err")', want: $want"
        fi
    done
    printf 'port 7001\n%s maybe\n' "$name" >"$T/conf"
    seen refuse
    "$SLUICED" --config "$T/conf" --dump-options >"$T/out" 2>"$T/err"
    rc=$?
    want="sluiced: $T/conf:2: invalid $name 'maybe': expected yes or no"
    if [ "$rc" -ne 2 ] || [ "$(head -1 "$T/err")" != "$want" ]; then
        miss refuse "'$name maybe' in a file: exit $rc, '$(head -1 "$T/err")', want: $want"
    fi
done <"$T/bools"
verdict spell "yes/no options ($nb): bare, and yes/no/true/false/on/off/1/0 in any case, in flags and files"
verdict override "yes/no options: the flag overrides the config file, both ways"
verdict refuse "yes/no options: any other word refused with exit 2, naming it (flag and file:line)"

finish
