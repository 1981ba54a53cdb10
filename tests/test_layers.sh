#!/bin/sh
# test_layers.sh -- the layering is enforced by the build (docs/architecture.md):
#
#   1. each layer compiles with only the include paths it may use: a file in
#      a layer that includes a header of a layer above it fails to compile,
#      and the same file including a header it may use compiles (so the
#      refusal is the include, not a broken command);
#   2. libsluice.so exports the public sl_ API and no internal sl__ name;
#   3. headers are tracked: touching a header rebuilds what includes it.
#
# The flags come from the Makefile itself (`make -s print-layer L=...`), so
# this tests what the build really does.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
cd "$ROOT" || exit 1
CC=${CC:-cc}

flags() { make -s --no-print-directory print-layer L="$1"; }

# compiles LAYER DIR HEADER: writes DIR/layer_probe_XXX.c including HEADER and
# compiles it with LAYER's flags, from the repository root as make does.
# Returns the compiler's status; its output goes to $T/cc.log.
compiles() {
    layer=$1 dir=$2 header=$3
    src=$dir/.layer_probe_$$.c
    printf '#include "%s"\nint layer_probe(void);\nint layer_probe(void) { return 0; }\n' \
        "$header" >"$src"
    # shellcheck disable=SC2046
    $CC $(flags "$layer") -c "$src" -o "$T/probe.o" >"$T/cc.log" 2>&1
    rc=$?
    rm -f "$src" "$T/probe.d"
    return $rc
}

# refused LAYER DIR HEADER / allowed LAYER DIR HEADER: one check each.
refused() {
    if compiles "$1" "$2" "$3"; then
        bad "$2 (layer $1) includes $3 and it compiled: the layer can see above itself"
    elif grep -q "$3: No such file" "$T/cc.log"; then
        ok "$2 (layer $1) cannot include $3"
    else
        bad "$2 (layer $1) including $3 failed for another reason" "$(cat "$T/cc.log")"
    fi
}
allowed() {
    if compiles "$1" "$2" "$3"; then
        ok "$2 (layer $1) may include $3"
    else
        bad "$2 (layer $1) cannot include $3, which it may use" "$(cat "$T/cc.log")"
    fi
}

# lib sees only lib
allowed lib src/lib store.h
refused lib src/lib server.h
refused lib src/lib rules.h
refused lib src/lib backend.h
refused lib src/lib resp.h
# rules sees lib
allowed rules src/rules store.h
refused rules src/rules backend.h
refused rules src/rules service.h
# backend sees lib and rules
allowed backend src/backend check.h
refused backend src/backend service.h
refused backend src/backend net.h
# server sees lib, rules, backend -- not the protocols
allowed server src/server backend_local.h
refused server src/server resp.h
refused server src/server resp_commands.h
# protocols see the server
allowed proto src/proto/resp service.h
allowed proto src/proto/resp proto.h
# the sluice command sees lib, rules and the local backend, not the server
allowed cli src/cli backend_local.h
refused cli src/cli service.h
# the Redis module sees the library only
allowed module src/module lone.h
allowed module src/module args.h
refused module src/module service.h
refused module src/module backend.h
refused module src/module rules.h

# the backend seam (backend.h) is the server's only way to a backend: only
# src/backend/ includes the Redis backend's header, and sluiced's main
# reaches the store through the library's public API, not its internals
outside=$(grep -rl '#include "backend_redis.h"' src --include='*.c' --include='*.h' | grep -v '^src/backend/')
if [ -z "$outside" ]; then
    ok "only src/backend/ includes backend_redis.h"
else
    bad "backend_redis.h is included outside src/backend/" "$outside"
fi
internal=$(grep -rn 'sl__store_\|sl__shard' src/sluiced)
if [ -z "$internal" ]; then
    ok "src/sluiced uses no sl__store_* or sl__shard* name"
else
    bad "src/sluiced uses the store's internals" "$internal"
fi

# sluice.so, the Redis module: its entry point, and no internal name
MSO=build/sluice.so
if [ ! -f "$MSO" ]; then
    bad "no $MSO (make all first)"
else
    nm -D --defined-only "$MSO" | awk '{print $3}' >"$T/msyms"
    if grep -qx RedisModule_OnLoad "$T/msyms" && ! grep -q '^sl__' "$T/msyms"; then
        ok "$MSO exports RedisModule_OnLoad and no sl__ symbol"
    else
        bad "$MSO exports the wrong symbols" "$(grep -v '^sl_[^_]' "$T/msyms" | head -10)"
    fi
fi

# libsluice.so: the public API only
SO=build/libsluice.so
if [ ! -f "$SO" ]; then
    bad "no $SO (make all first)"
else
    nm -D --defined-only "$SO" | awk '{print $3}' >"$T/syms"
    n_public=$(grep -c '^sl_[^_]' "$T/syms")
    internal=$(grep '^sl__' "$T/syms" | head -5)
    if [ "$n_public" -ge 20 ] && grep -qx sl_allow "$T/syms" && grep -qx sl_decide_all "$T/syms"; then
        ok "$SO exports the public API ($n_public sl_ symbols, sl_allow and sl_decide_all among them)"
    else
        bad "$SO exports $n_public public symbols" "$(head -20 "$T/syms")"
    fi
    if [ -z "$internal" ]; then
        ok "$SO exports no sl__ symbol"
    else
        bad "$SO exports internal symbols" "$internal"
    fi
    other=$(grep -v '^sl_' "$T/syms" | grep -v '^_' | head -5)
    if [ -z "$other" ]; then
        ok "$SO exports nothing but sl_ names"
    else
        bad "$SO exports names outside the sl_ prefix" "$other"
    fi
fi

# header tracking: every object records the headers it read
if [ -f build/src/lib/store.d ] && grep -q 'src/lib/store.h' build/src/lib/store.d &&
    [ -f build/src/proto/resp/resp_commands.d ] &&
    grep -q 'src/server/service.h' build/src/proto/resp/resp_commands.d; then
    ok "objects carry their header dependencies (-MMD)"
else
    bad "no header dependency files under build/ (-MMD)"
fi
if make -s -q build/src/server/service.o 2>/dev/null; then
    # up to date now: a newer header must make it out of date
    cp -p src/server/stats.h "$T/stats.h.keep"
    touch src/server/stats.h
    if make -s -q build/src/server/service.o 2>/dev/null; then
        bad "touching src/server/stats.h does not rebuild service.o"
    else
        ok "touching src/server/stats.h makes service.o out of date"
    fi
    touch -r "$T/stats.h.keep" src/server/stats.h
else
    bad "build/src/server/service.o is not up to date (make all first)"
fi

# docs/architecture.md names every folder under src/ (a new one must be
# placed on the map) and no folder that is gone
missing=
for d in $(find src -mindepth 1 -type d | sort); do
    grep -q "$d/" docs/architecture.md || missing="$missing $d"
done
gone=
for d in $(grep -o 'src/[a-z_/]*/' docs/architecture.md | sed 's#/$##' | sort -u); do
    [ -d "$d" ] || gone="$gone $d"
done
if [ -z "$missing$gone" ]; then
    ok "docs/architecture.md names every folder under src/, and only those"
else
    bad "docs/architecture.md: folders not on its map:${missing:- none}; named but gone:${gone:- none}"
fi

# an object without its .d is rebuilt (its headers are unknown)
if [ -f build/src/lib/params.o ] && [ -f build/src/lib/params.d ]; then
    mv build/src/lib/params.d "$T/params.d.keep"
    if make -s -q build/src/lib/params.o 2>/dev/null; then
        bad "build/src/lib/params.o without its .d is taken as up to date"
    else
        ok "an object without its .d is out of date"
    fi
    mv "$T/params.d.keep" build/src/lib/params.d
else
    bad "build/src/lib/params.o or its .d missing (make all first)"
fi

finish
