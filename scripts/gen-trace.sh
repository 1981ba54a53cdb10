#!/bin/sh
# gen-trace.sh -- writes a realistic request trace for `sluicectl replay` to
# standard output: two minutes of traffic to a small web API.
#
#   ./scripts/gen-trace.sh [SECONDS [SEED]] > examples/sample-trace.txt
#
# Who sends what (rates are means; arrivals are random):
#   user:<name>          10 signed-in users, one request every 2 to 8 s;
#                        user:dave also uploads now and then (cost 5)
#   ip:198.51.100.<n>    6 anonymous clients, one request every 10 s
#   svc:report-builder   a batch job: a burst of 30 requests (cost 2) every 30 s
#   ip:203.0.113.66      a scraper hammering about 25 requests a second
# Times are integer ms since the Unix epoch, from 2026-01-01T00:00:00Z, in
# order (printed with %.0f: mawk's %d stops at 2^31).  Deterministic: the
# same SECONDS and SEED give the same trace with any POSIX awk (the random
# numbers are a Park-Miller generator, exact in awk's doubles).  sh + awk + sort only.
set -eu
SECONDS_=${1:-120}
SEED=${2:-42}

cat <<HDR
# sluice sample trace: $SECONDS_ s of requests to a small web API (scripts/gen-trace.sh $SECONDS_ $SEED).
# Format, one request a line: T KEY [COST]; T in ms since the Unix epoch (from 2026-01-01T00:00:00Z), COST default 1.
# Keys: 10 signed-in users (user:*; user:dave uploads at cost 5), 6 anonymous clients (ip:198.51.100.*),
# a report job bursting 30 requests of cost 2 every 30 s (svc:report-builder), and a scraper
# hammering about 25 requests a second (ip:203.0.113.66).
# Try: build/sluicectl replay --algo token-bucket --limit 10 --window 1s --burst 20 --summary examples/sample-trace.txt
HDR

awk -v secs="$SECONDS_" -v seed="$SEED" '
function rnd() { s = (s * 16807) % 2147483647; return s / 2147483647 }
# exponential inter-arrival time with the given mean, in ms (>= 1)
function gap(mean_ms,   u, g) {
    u = rnd(); if (u <= 0) u = 1e-9
    g = int(-log(u) * mean_ms); return g < 1 ? 1 : g
}
function emit(t, key, cost) {
    if (cost == 1) printf "%.0f %s\n", T0 + t, key
    else printf "%.0f %s %d\n", T0 + t, key, cost
}
BEGIN {
    T0 = 1767225600000; end = secs * 1000; s = seed % 2147483646 + 1
    split("alice bob carol dave erin frank grace heidi ivan judy", users, " ")
    for (i = 1; i <= 10; i++) {
        mean = 2000 + (i % 4) * 2000
        for (t = gap(mean); t < end; t += gap(mean)) emit(t, "user:" users[i], 1)
    }
    for (t = gap(20000); t < end; t += gap(20000)) emit(t, "user:dave", 5)
    for (i = 1; i <= 6; i++)
        for (t = gap(10000); t < end; t += gap(10000)) emit(t, "ip:198.51.100." (10 * i + 3), 1)
    for (b = 5000; b < end; b += 30000)
        for (j = 0; j < 30; j++) emit(b + j * 40 + int(rnd() * 30), "svc:report-builder", 2)
    for (t = gap(40); t < end; t += gap(40)) emit(t, "ip:203.0.113.66", 1)
}' | LC_ALL=C sort -s -n -k1,1
