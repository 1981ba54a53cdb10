# shellcheck shell=bash
# bench/lib.sh -- what the benchmark scripts share (sourced, not run):
# messages, free ports, talking to a RESP server, CPU time of a process,
# and the textbook token bucket every Redis comparison runs.
#
#   note MSG...                  to standard error
#   die MSG...                   "bench/NAME.sh: MSG" and exit 1
#   free_port                    a free 127.0.0.1 port, now
#   cli PORT ARGS...             redis-cli on 127.0.0.1:PORT, bounded in time
#   wait_pong PORT               waits (bounded) until PORT answers PING; 1 if not
#   info_field PORT SECTION KEY  one INFO field's value
#   cpu_ticks PID                user + system CPU time of PID, in clock ticks
#   load_textbook PORT           SCRIPT LOADs bench/textbook_token_bucket.lua
#                                on PORT and prints its SHA (dies if it fails)

BENCH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

note() { printf '%s\n' "$*" >&2; }
die() {
    note "bench/$(basename "$0"): $*"
    exit 1
}
# show CMD...: prints "+ CMD", the command exactly as it will run, quoted where needed, for a reader to rerun
show() {
    local a
    printf '+'
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then printf ' %s' "$a"; else printf ' %q' "$a"; fi
    done
    printf '\n'
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cli() { timeout 30 redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
wait_pong() {
    for _ in $(seq 100); do
        [ "$(cli "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    return 1
}
info_field() { cli "$1" info "$2" | tr -d '\r' | awk -F: -v k="$3" '$1 == k { print $2 }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
load_textbook() {
    local sha
    sha=$(cli "$1" script load "$(cat "$BENCH_LIB_DIR/textbook_token_bucket.lua")" | tr -d '\r')
    [ ${#sha} -eq 40 ] || die "SCRIPT LOAD of the textbook token bucket failed: $sha"
    printf '%s\n' "$sha"
}
