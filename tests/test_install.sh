#!/bin/sh
# test_install.sh -- `make install` gives what a user and a packager expect:
#
#   - with DESTDIR (a staging root): sbin/sluiced, bin/sluicectl (and no
#     bin/sluice, Debian's package's name), the library (the real file with
#     soname libsluice.so.0, its two links, the archive), the header,
#     sluice.pc, the three man pages, the systemd unit and the Redis
#     module (lib/redis/modules/sluice.so), and no ldconfig;
#   - the installed sluiced and sluicectl answer --version;
#   - each man page renders with no groff warning (`man --warnings -l`,
#     `groff -ww`), has a NAME line lexgrog reads, is found by name in its
#     section, and sluiced(8) lists every option sluiced has;
#   - a program builds with pkg-config (sysroot: the stage), shared and as
#     C++; the README's static recipe (`cc -static ... pkg-config --static`)
#     makes a program with no dynamic dependency at all, which runs with
#     every libsluice.so removed; and `pkg-config --static` with no
#     libsluice.so in sight links libsluice.a (readelf: no libsluice NEEDED);
#   - the systemd unit passes `systemd-analyze verify` with no message and
#     `systemd-analyze security` at an exposure of 2.0 or less, and keeps
#     the hardening the README promises;
#   - without DESTDIR, as root, ldconfig runs (as another user it does not),
#     and `make uninstall` removes every file;
#   - the README's `make install PREFIX=$HOME/.local` (HOME a scratch
#     folder), its `export PKG_CONFIG_PATH=...` and its `cc hello.c
#     $(pkg-config --cflags --libs sluice)` on its C example, as written:
#     the program runs with no LD_LIBRARY_PATH (sluice.pc's rpath) and
#     answers as the README says; the installed sluice.so loads into a
#     redis-server (--loadmodule) and answers RL.ALLOW; `make uninstall
#     PREFIX=$HOME/.local` removes every file.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
. "$ROOT/tests/lib.sh"
STAGE=$T/stage
P=/usr/local
S=$STAGE$P
want=$(sed -n 's/^#define SL_VERSION "\(.*\)"/\1/p' "$ROOT/include/sluice.h")

# A stand-in for ldconfig that records each call.
cat >"$T/ldconfig" <<EOF
#!/bin/sh
echo "ldconfig \$*" >>"$T/ldconfig.calls"
EOF
chmod +x "$T/ldconfig"

if make -C "$ROOT" install DESTDIR="$STAGE" PREFIX=$P LDCONFIG="$T/ldconfig" >"$T/make.log" 2>&1 </dev/null; then
    ok "make install DESTDIR=$STAGE PREFIX=$P"
else
    bad "make install DESTDIR=... PREFIX=$P" "$(tail -30 "$T/make.log")"
    finish
fi
if [ ! -e "$T/ldconfig.calls" ]; then ok "no ldconfig with DESTDIR"; else bad "ldconfig ran with DESTDIR" "$(cat "$T/ldconfig.calls")"; fi

# ---- the files ---------------------------------------------------------------
for f in sbin/sluiced bin/sluicectl; do
    if [ -f "$S/$f" ] && [ -x "$S/$f" ]; then ok "installed $f (executable)"; else bad "no executable $S/$f"; fi
done
for f in include/sluice.h lib/libsluice.a lib/libsluice.so.$want lib/pkgconfig/sluice.pc \
    lib/redis/modules/sluice.so \
    share/man/man8/sluiced.8 share/man/man1/sluicectl.1 share/man/man3/libsluice.3 \
    share/doc/sluice/examples/sluiced.service; do
    if [ -f "$S/$f" ] && [ ! -L "$S/$f" ]; then ok "installed $f"; else bad "missing $S/$f"; fi
done
if [ ! -e "$S/bin/sluice" ] && [ ! -e "$S/sbin/sluice" ]; then
    ok "no bin/sluice (the name of Debian's unrelated package)"
else
    bad "bin/sluice installed: it collides with Debian's package sluice"
fi
for l in "libsluice.so.0:libsluice.so.$want" "libsluice.so:libsluice.so.0"; do
    link=${l%%:*} target=${l#*:}
    if [ -L "$S/lib/$link" ] && [ "$(readlink "$S/lib/$link")" = "$target" ]; then
        ok "lib/$link -> $target"
    else
        bad "lib/$link is not a link to $target" "$(ls -l "$S/lib/" 2>&1)"
    fi
done
soname=$(readelf -d "$S/lib/libsluice.so.$want" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libsluice.so.0 ]; then ok "SONAME libsluice.so.0"; else bad "SONAME '$soname', want libsluice.so.0"; fi

# ---- the programs, from where they are installed ---------------------------
out=$("$S/sbin/sluiced" --version 2>&1)
if [ "$out" = "sluiced $want" ]; then ok "installed sluiced --version: $out"; else bad "installed sluiced --version: '$out'"; fi
out=$("$S/bin/sluicectl" --version 2>&1)
if [ "$out" = "sluicectl $want" ]; then ok "installed sluicectl --version: $out"; else bad "installed sluicectl --version: '$out'"; fi

# ---- the man pages -------------------------------------------------------------
for page in man8/sluiced.8:sluiced:8 man1/sluicectl.1:sluicectl:1 man3/libsluice.3:libsluice:3; do
    file=$S/share/man/${page%%:*} rest=${page#*:}
    name=${rest%%:*} sec=${rest#*:}
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$file" >"$T/page.txt" 2>"$T/page.err"
    rc=$?
    groff -ww -man -Tutf8 -z "$file" 2>>"$T/page.err"
    if [ "$rc" -eq 0 ] && [ ! -s "$T/page.err" ] && [ "$(grep -c . "$T/page.txt")" -gt 20 ]; then
        ok "man -l $name.$sec: $(grep -c . "$T/page.txt") lines, no warning"
    else
        bad "man -l $name.$sec: exit $rc" "$(head -10 "$T/page.err")"
    fi
    whatis=$(lexgrog "$file" 2>&1)
    case $whatis in
    *": \"$name - "*) ok "lexgrog $name.$sec: ${whatis#*: }" ;;
    *) bad "lexgrog $name.$sec: $whatis" ;;
    esac
    found=$(man -M "$S/share/man" -w "$sec" "$name" 2>&1)
    if [ "$found" = "$file" ]; then ok "man -w $sec $name finds $found"; else bad "man -w $sec $name: '$found'"; fi
    if [ "$name" = sluiced ]; then
        "$S/sbin/sluiced" --dump-options | grep -v '^#' | cut -f1 >"$T/names"
        missing=$(while read -r n; do grep -q -- "^ *--$n\\b" "$T/page.txt" || echo "--$n"; done <"$T/names")
        if [ -s "$T/names" ] && [ -z "$missing" ]; then
            ok "sluiced(8) lists all $(grep -c . "$T/names") options"
        else
            bad "sluiced(8) lacks options: $missing"
        fi
    fi
done

# ---- building against it: pkg-config over the stage ------------------------
export PKG_CONFIG_PATH="$S/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$STAGE"
v=$(pkg-config --modversion sluice 2>"$T/pc.log")
if [ -n "$v" ] && [ "$v" = "$want" ]; then ok "pkg-config --modversion sluice: $v"; else bad "pkg-config version '$v', header says '$want'" "$(cat "$T/pc.log")"; fi
cflags=$(pkg-config --cflags sluice)
libs=$(pkg-config --libs sluice)
static_libs=$(pkg-config --static --libs sluice)
echo "      pkg-config --cflags --libs [--static] sluice: $cflags $libs [$static_libs]"
case " $static_libs " in
*" -lsluice "*"-lurcu-bp "*"-lz "*) ok "pkg-config --static --libs: libsluice, then liburcu-bp and zlib" ;;
*) bad "pkg-config --static --libs sluice: '$static_libs'" ;;
esac

cat >"$T/hello.c" <<'EOF'
/* 3 per second, token bucket: three pass, the fourth is denied. */
#include <stdio.h>
#include <sluice.h>

int main(void)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_TOKEN_BUCKET;
    p.limit = 3;
    p.window_ms = 1000;
    int err = 0;
    sl_limiter *lim = sl_limiter_new(&p, NULL, &err);
    if (lim == NULL) {
        fprintf(stderr, "sl_limiter_new: %s\n", sl_strerror(err));
        return 1;
    }
    for (int i = 0; i < 4; i++) {
        sl_result r;
        if (sl_allow(lim, "user:42", 7, 0, 1, &r) != 0) return 1;
        printf("%lld%s", (long long)r.allowed, i < 3 ? " " : "\n");
    }
    sl_limiter_free(lim);
    return 0;
}
EOF
needs_libsluice() { readelf -d "$1" 2>/dev/null | grep '(NEEDED)' | grep -q 'libsluice'; }

# shared
# shellcheck disable=SC2086
if cc -std=c99 -Wall -Wextra -Wpedantic -Werror -o "$T/hello" "$T/hello.c" $cflags $libs \
    >"$T/cc.log" 2>&1; then
    out=$(LD_LIBRARY_PATH="$S/lib" "$T/hello" 2>&1)
    if [ "$out" = "1 1 1 0" ]; then ok "hello (shared) prints '1 1 1 0'"; else bad "hello (shared) printed '$out'"; fi
    if LD_LIBRARY_PATH="$S/lib" ldd "$T/hello" | grep -q "$S/lib/libsluice.so.0"; then
        ok "hello (shared) loads libsluice.so.0 from the stage"
    else
        bad "hello does not use $S/lib/libsluice.so.0" "$(LD_LIBRARY_PATH="$S/lib" ldd "$T/hello")"
    fi
else
    bad "cc hello.c \$(pkg-config --cflags --libs sluice)" "$(cat "$T/cc.log")"
fi

# the header is C++-clean
cp "$T/hello.c" "$T/hello.cc"
# shellcheck disable=SC2086
if c++ -Wall -Wextra -Werror -o "$T/hello_cc" "$T/hello.cc" $cflags $libs >"$T/cc.log" 2>&1 &&
    [ "$(LD_LIBRARY_PATH="$S/lib" "$T/hello_cc")" = "1 1 1 0" ]; then
    ok "hello as C++"
else
    bad "hello as C++" "$(cat "$T/cc.log")"
fi

# The README's static recipe, as written there, with libsluice.so installed
# beside the archive.
recipe=$(grep '^cc -static hello\.c \$(pkg-config .*--static sluice)' "$ROOT/README.md")
if [ -n "$recipe" ] && (cd "$T" && sh -c "$recipe -o hello_static") >"$T/cc.log" 2>&1; then
    if readelf -d "$T/hello_static" 2>/dev/null | grep -q '(NEEDED)'; then
        bad "README's static recipe made a dynamic program" "$(readelf -d "$T/hello_static" | grep NEEDED)"
    else
        ok "README's '$recipe': no dynamic dependency ($(ldd "$T/hello_static" 2>&1 | sed 's/^[[:space:]]*//'))"
    fi
else
    bad "README's static recipe '$recipe'" "$(cat "$T/cc.log")"
fi

# No libsluice.so in sight: the shared program stops working, the static
# one does not, and pkg-config --static links the archive.
mkdir "$T/hidden"
mv "$S"/lib/libsluice.so* "$T/hidden/"
if LD_LIBRARY_PATH="$S/lib" "$T/hello" >/dev/null 2>&1; then
    bad "hello (shared) still runs with every libsluice.so removed: the check below proves nothing"
else
    ok "with libsluice.so* removed, hello (shared) no longer runs"
fi
out=$("$T/hello_static" 2>&1)
if [ "$out" = "1 1 1 0" ]; then ok "hello (static) prints '1 1 1 0' with no libsluice.so anywhere"; else bad "hello (static) printed '$out'"; fi
# shellcheck disable=SC2046
if cc -std=c99 -o "$T/hello_archive" "$T/hello.c" $(pkg-config --cflags --libs --static sluice) \
    >"$T/cc.log" 2>&1; then
    out=$(LD_LIBRARY_PATH="$S/lib" "$T/hello_archive" 2>&1)
    if [ "$out" = "1 1 1 0" ] && ! needs_libsluice "$T/hello_archive"; then
        ok "pkg-config --static with no libsluice.so: libsluice.a linked, prints '1 1 1 0'"
    else
        bad "pkg-config --static with no libsluice.so: printed '$out'" "$(readelf -d "$T/hello_archive" | grep NEEDED)"
    fi
else
    bad "cc hello.c \$(pkg-config --cflags --libs --static sluice) with no libsluice.so" "$(cat "$T/cc.log")"
fi
mv "$T/hidden"/* "$S/lib/"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# ---- the systemd unit ------------------------------------------------------------
UNIT=$S/share/doc/sluice/examples/sluiced.service
if grep -qx "ExecStart=$P/sbin/sluiced --snapshot /var/lib/sluiced/state.snap" "$UNIT"; then
    ok "unit: ExecStart runs $P/sbin/sluiced, snapshot in /var/lib/sluiced"
else
    bad "unit: ExecStart" "$(grep '^ExecStart' "$UNIT")"
fi
for key in DynamicUser=yes NoNewPrivileges=yes StateDirectory=sluiced ProtectSystem=strict \
    ProtectHome=yes PrivateTmp=yes CapabilityBoundingSet=; do
    if grep -qx "$key" "$UNIT"; then ok "unit: $key"; else bad "unit lacks $key"; fi
done
if command -v systemd-analyze >/dev/null 2>&1; then
    # systemd checks that ExecStart is executable: point it at the staged
    # sluiced, and MANPATH at the staged pages (Documentation=man:sluiced(8)).
    sed "s|^ExecStart=$P/sbin/|ExecStart=$S/sbin/|" "$UNIT" >"$T/sluiced.service"
    MANPATH=$S/share/man systemd-analyze verify "$T/sluiced.service" >"$T/verify.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && [ ! -s "$T/verify.log" ]; then
        ok "systemd-analyze verify: no message"
    else
        bad "systemd-analyze verify: exit $rc" "$(cat "$T/verify.log")"
    fi
    systemd-analyze security --offline=true --threshold=20 "$T/sluiced.service" >"$T/security.log" 2>&1
    rc=$?
    level=$(sed -n 's/.*Overall exposure level.*: \([0-9.]*\).*/\1/p' "$T/security.log")
    if [ "$rc" -eq 0 ] && [ -n "$level" ]; then
        ok "systemd-analyze security: exposure $level (at most 2.0)"
    else
        bad "systemd-analyze security: exit $rc, exposure '$level' (want at most 2.0)" "$(tail -5 "$T/security.log")"
    fi
else
    skip "systemd-analyze verify" "no systemd-analyze (Debian package systemd; scripts/deps.sh installs it)"
fi

# ---- into the system, as root: ldconfig; then uninstall ----------------------
PREFIX=$T/prefix
if make -C "$ROOT" install PREFIX="$PREFIX" LDCONFIG="$T/ldconfig" >"$T/make.log" 2>&1 </dev/null; then
    calls=$(cat "$T/ldconfig.calls" 2>/dev/null)
    if [ "$(id -u)" -eq 0 ]; then
        if [ "$calls" = "ldconfig " ]; then ok "make install as root without DESTDIR runs ldconfig once"; else bad "as root without DESTDIR, ldconfig calls: '$calls'"; fi
    else
        if [ -z "$calls" ]; then ok "make install as a user runs no ldconfig"; else bad "ldconfig ran as a user: '$calls'"; fi
    fi
    out=$("$PREFIX/sbin/sluiced" --version 2>&1)
    if [ "$out" = "sluiced $want" ]; then ok "sluiced --version from $PREFIX/sbin"; else bad "$PREFIX/sbin/sluiced --version: '$out'"; fi
    make -C "$ROOT" uninstall PREFIX="$PREFIX" LDCONFIG="$T/ldconfig" >"$T/make.log" 2>&1 </dev/null
    left=$(find "$PREFIX" ! -type d)
    if [ -z "$left" ]; then ok "make uninstall removes every file"; else bad "make uninstall left files" "$left"; fi
else
    bad "make install PREFIX=$PREFIX" "$(tail -30 "$T/make.log")"
fi

# ---- the README's $HOME/.local install, word for word ------------------------
H=$T/home
mkdir -p "$H/src"
inst=$(sed -n 's/.*# or: \(make install PREFIX=\$HOME\/\.local\) .*/\1/p' "$ROOT/README.md")
exp=$(grep -o 'export PKG_CONFIG_PATH=\$HOME/\.local/lib/pkgconfig' "$ROOT/README.md" | head -1)
build=$(grep -x 'cc hello\.c \$(pkg-config --cflags --libs sluice)' "$ROOT/README.md")
awk '/^```c$/ { f = 1; next } /^```$/ { f = 0 } f' "$ROOT/README.md" >"$H/src/hello.c"
echo "      README: '$inst'; '$exp'; '$build'"
if [ -z "$inst" ] || [ -z "$exp" ] || [ -z "$build" ] || [ ! -s "$H/src/hello.c" ]; then
    bad "the README's \$HOME/.local install: commands not found (install '$inst', env '$exp', cc '$build')"
elif (cd "$ROOT" && env HOME="$H" LDCONFIG="$T/ldconfig" sh -c "$inst") >"$T/make.log" 2>&1 </dev/null; then
    L=$H/.local
    ok "README's '$inst' (HOME=$H)"
    if [ -f "$L/lib/redis/modules/sluice.so" ]; then ok "sluice.so installed as lib/redis/modules/sluice.so"; else bad "no $L/lib/redis/modules/sluice.so" "$(find "$L" -name '*.so*')"; fi
    # the program, built as the README says, run with no library path at all
    if (cd "$H/src" && env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH HOME="$H" sh -c "$exp; $build") \
        >"$T/cc.log" 2>&1; then
        out=$(cd "$H/src" && env -u LD_LIBRARY_PATH ./a.out 2>&1)
        if [ "$(echo "$out" | grep -c '^allowed 1, ')" -eq 3 ] && [ "$(echo "$out" | grep -c '^allowed 0, ')" -eq 1 ]; then
            ok "hello.c built as the README says runs without LD_LIBRARY_PATH: three allowed, one denied"
        else
            bad "hello.c (\$HOME/.local) printed" "$out"
        fi
        if env -u LD_LIBRARY_PATH ldd "$H/src/a.out" | grep -q "=> $L/lib/libsluice.so.0 "; then
            ok "it loads $L/lib/libsluice.so.0 (rpath $(readelf -d "$H/src/a.out" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'))"
        else
            bad "hello.c (\$HOME/.local) does not load the installed library" "$(env -u LD_LIBRARY_PATH ldd "$H/src/a.out")"
        fi
    else
        bad "README's '$exp; $build' in \$HOME/.local" "$(cat "$T/cc.log")"
    fi
    # without the README's export, pkg-config does not find sluice: the line is needed
    if (cd "$H/src" && env -u PKG_CONFIG_PATH HOME="$H" pkg-config --exists sluice) 2>/dev/null; then
        skip "PKG_CONFIG_PATH needed" "a sluice.pc is installed in the system's pkg-config path: cannot tell"
    else
        ok "without the README's export, pkg-config finds no sluice: the export is needed"
    fi
    # the installed module loads into Redis and answers (a unix socket only:
    # no TCP port)
    if command -v redis-server >/dev/null 2>&1; then
        redis-server --port 0 --unixsocket "$T/redis.sock" --save '' --appendonly no \
            --dir "$T" --loadmodule "$L/lib/redis/modules/sluice.so" >"$T/redis.log" 2>&1 </dev/null &
        rpid=$!
        n=0
        while [ "$n" -lt 300 ] && ! redis-cli -s "$T/redis.sock" PING >/dev/null 2>&1 && kill -0 "$rpid" 2>/dev/null; do
            sleep 0.1
            n=$((n + 1))
        done
        got=$(redis-cli -s "$T/redis.sock" RL.ALLOW user:42 5 10s 2>&1 | tr '\n' ' ')
        if [ "$got" = "1 5 4 0 2000 0 " ]; then
            ok "redis-server --loadmodule $L/lib/redis/modules/sluice.so: RL.ALLOW user:42 5 10s answers 1 5 4 0 2000 0"
        else
            bad "redis-server with the installed sluice.so: RL.ALLOW answered '$got'" "$(tail -20 "$T/redis.log")"
        fi
        redis-cli -s "$T/redis.sock" SHUTDOWN NOSAVE >/dev/null 2>&1
        kill "$rpid" 2>/dev/null
        wait "$rpid" 2>/dev/null
    else
        bad "no redis-server (Debian package redis-server; scripts/deps.sh installs it)"
    fi
    (cd "$ROOT" && env HOME="$H" LDCONFIG="$T/ldconfig" make uninstall 'PREFIX=$(HOME)/.local') >"$T/make.log" 2>&1 </dev/null
    left=$(find "$L" ! -type d)
    if [ -z "$left" ]; then ok "make uninstall PREFIX=\$HOME/.local removes every file, sluice.so too"; else bad "make uninstall (\$HOME/.local) left files" "$left"; fi
else
    bad "README's '$inst'" "$(tail -30 "$T/make.log")"
fi

finish
