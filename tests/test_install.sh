#!/bin/sh
# test_install.sh -- `make install PREFIX=...` gives a usable library: the
# header, libsluice.a, libsluice.so, the `sluice` tool and sluice.pc, so that
# a program builds with `pkg-config --cflags --libs sluice` (shared, and
# static with --static) and as C++, and runs.
# sluice-test: plain-only
set -u

ROOT=${SLUICE_ROOT:-$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)}
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
PREFIX=$T/prefix
fails=0
ok() { echo "ok    $1"; }
bad() {
    fails=$((fails + 1))
    echo "FAIL  $1"
    [ -n "${2:-}" ] && sed 's/^/        /' "$2" | tail -n 30
}

if make -C "$ROOT" install PREFIX="$PREFIX" >"$T/make.log" 2>&1 </dev/null; then
    ok "make install PREFIX=$PREFIX"
else
    bad "make install" "$T/make.log"
    exit 1
fi
for f in include/sluice.h lib/libsluice.a lib/libsluice.so lib/libsluice.so.0 bin/sluice \
    lib/pkgconfig/sluice.pc; do
    if [ -e "$PREFIX/$f" ]; then ok "installed $f"; else bad "missing $PREFIX/$f"; fi
done

export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
v=$(pkg-config --modversion sluice 2>"$T/pc.log")
want=$(sed -n 's/^#define SL_VERSION "\(.*\)"/\1/p' "$ROOT/include/sluice.h")
if [ -n "$v" ] && [ "$v" = "$want" ]; then ok "pkg-config --modversion sluice: $v"; else bad "pkg-config version '$v', header says '$want'" "$T/pc.log"; fi
cflags=$(pkg-config --cflags sluice)
libs=$(pkg-config --libs sluice)
echo "      pkg-config --cflags --libs sluice: $cflags $libs"

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

# shared
# shellcheck disable=SC2086
if cc -std=c99 -Wall -Wextra -Wpedantic -Werror -o "$T/hello" "$T/hello.c" $cflags $libs \
    >"$T/cc.log" 2>&1; then
    ok "cc hello.c \$(pkg-config --cflags --libs sluice)"
    out=$(LD_LIBRARY_PATH="$PREFIX/lib" "$T/hello" 2>&1)
    if [ "$out" = "1 1 1 0" ]; then ok "hello (shared) prints '1 1 1 0'"; else bad "hello (shared) printed '$out'"; fi
    if ldd "$T/hello" | grep -q "$PREFIX/lib/libsluice.so.0" ||
        LD_LIBRARY_PATH="$PREFIX/lib" ldd "$T/hello" | grep -q "$PREFIX/lib/libsluice.so.0"; then
        ok "hello links libsluice.so.0 from the prefix"
    else
        bad "hello does not use $PREFIX/lib/libsluice.so.0"
    fi
else
    bad "cc hello.c with pkg-config flags" "$T/cc.log"
fi

# static: the archive and Libs.private
static_libs=$(pkg-config --static --libs sluice)
case " $static_libs " in *" -lpthread "*) ok "pkg-config --static --libs has -lpthread" ;; *) bad "pkg-config --static --libs sluice: '$static_libs'" ;; esac
# shellcheck disable=SC2086,SC2046
if cc -std=c99 -o "$T/hello_static" "$T/hello.c" $cflags -L"$PREFIX/lib" -Wl,-Bstatic -lsluice \
    -Wl,-Bdynamic $(pkg-config --static --libs-only-l sluice | sed 's/-lsluice//') >"$T/cc.log" 2>&1; then
    out=$("$T/hello_static" 2>&1)
    if [ "$out" = "1 1 1 0" ]; then ok "hello (static libsluice.a) prints '1 1 1 0'"; else bad "hello (static) printed '$out'"; fi
else
    bad "static link with libsluice.a" "$T/cc.log"
fi

# the header is C++-clean
cp "$T/hello.c" "$T/hello.cc"
# shellcheck disable=SC2086
if command -v c++ >/dev/null 2>&1; then
    if c++ -Wall -Wextra -Werror -o "$T/hello_cc" "$T/hello.cc" $cflags $libs >"$T/cc.log" 2>&1 &&
        [ "$(LD_LIBRARY_PATH="$PREFIX/lib" "$T/hello_cc")" = "1 1 1 0" ]; then
        ok "hello as C++"
    else
        bad "hello as C++" "$T/cc.log"
    fi
fi

# the installed tool
out=$("$PREFIX/bin/sluice" --version 2>&1)
if [ "$out" = "sluice $want" ]; then ok "installed sluice --version: $out"; else bad "installed sluice --version: '$out'"; fi

[ "$fails" -eq 0 ]
