# options.awk -- turns `sluiced --dump-options` (tab-separated: name, short
# flag, value name, config file yes/no, default, value, help) into the
# roff of sluiced(8)'s OPTIONS: one .TP entry per option, its help and
# default as --help gives them.
BEGIN { FS = "\t" }
/^#/ { next }
# Escapes text for roff: backslashes, a leading '.' or quote, and the
# dashes of option names (a word starting with '-').
function roff(s,    out, n, i, w, words) {
    gsub(/\\/, "\\e", s)
    n = split(s, words, " ")
    out = ""
    for (i = 1; i <= n; i++) {
        w = words[i]
        if (w ~ /^\(?-/) gsub(/-/, "\\-", w)
        out = out (i > 1 ? " " : "") w
    }
    if (out ~ /^[.']/) out = "\\&" out
    return out
}
# `x` in the help becomes x in italics.
function ticks(s,    out) {
    out = ""
    while (match(s, /`[^`]*`/)) {
        out = out substr(s, 1, RSTART - 1) "\\fI" substr(s, RSTART + 1, RLENGTH - 2) "\\fR"
        s = substr(s, RSTART + RLENGTH)
    }
    return out s
}
{
    name = $1; short = $2; arg = $3; infile = $4; def = $5; help = $7
    gsub(/-/, "\\-", name)
    tag = "\\fB\\-\\-" name "\\fR"
    if (arg != "") tag = tag " \\fI" roff(arg) "\\fR"
    if (short != "") { gsub(/-/, "\\-", short); tag = tag ", \\fB" short "\\fR" }
    print ".TP"
    print tag
    text = help
    if (def != "") text = text " (default " def ")"
    if (infile == "no") text = text "; flag only"
    text = ticks(roff(text))
    print toupper(substr(text, 1, 1)) substr(text, 2) "."
}
