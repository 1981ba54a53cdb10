#!/bin/sh
# run.sh -- the main job, from a fresh clone: installs what is missing
# (scripts/deps.sh), builds (make), and runs sluiced in the foreground on
# 127.0.0.1:6390 with its state kept in build/sluiced.snapshot (so a restart
# hands nobody a fresh burst).  Ctrl-C stops it (the state is saved first).
#
#   ./scripts/run.sh                    the defaults
#   ./scripts/run.sh --port 7000 ...    any sluiced option (build/sluiced --help)
set -eu

ROOT=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
cd "$ROOT"

./scripts/deps.sh
make -s -j2 all

PORT=6390
prev=""
for a in "$@"; do
    [ "$prev" = "--port" ] && PORT=$a
    prev=$a
done

cat <<TXT
sluiced, the sluice rate-limit server, is starting on 127.0.0.1:$PORT.
Any Redis client can ask it for decisions; from another terminal try:

    redis-cli -p $PORT RL.ALLOW user:42 5 10s
    redis-cli -p $PORT RL.ALLOW user:42 5 10s ALGO sliding-window
    redis-cli -p $PORT RL.PEEK  user:42 5 10s
    redis-cli -p $PORT INFO stats

Each answer is six integers: allowed, limit, remaining, retry_after_ms,
reset_after_ms, delay_ms.  Ctrl-C stops the server (state is saved to
build/sluiced.snapshot and loaded at the next start).

TXT
exec build/sluiced --snapshot build/sluiced.snapshot "$@"
