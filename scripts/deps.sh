#!/bin/sh
# deps.sh -- installs the Debian packages sluice needs to build, test and run,
# if any is missing.  Safe to run again: it only installs what `dpkg -s` does
# not report as installed.  Needs no standard input (CI runs it with none).
#
# The one list of every package the project needs (Debian 12 names):
PACKAGES="
build-essential
pkg-config
libcmocka-dev
zlib1g-dev
clang
libclang-rt-14-dev
redis-server
libevent-dev
libjansson-dev
libhttp-parser-dev
libhiredis-dev
python3-redis
libyaml-dev
liburcu-dev
libssl-dev
openssl
faketime
libfaketime
nodejs
npm
man-db
groff-base
systemd
chromium
nginx
prometheus
wrk
libnghttp2-dev
libprotobuf-c-dev
protobuf-c-compiler
python3-grpcio
python3-grpc-tools
nghttp2-client
gdb
"
#   build-essential  gcc, make, libc headers; gcc's ASan/UBSan/TSan runtimes
#   pkg-config       the install test compiles a program with `pkg-config sluice`
#   libcmocka-dev    the C unit tests
#   zlib1g-dev       CRC-32 of snapshot files
#   clang, libclang-rt-14-dev  libFuzzer targets
#   redis-server, libevent-dev, libhiredis-dev, python3-redis
#                    the server (sluiced) and its end-to-end tests
#   libjansson-dev   the HTTP module's JSON (src/proto/http/http.c)
#   libhttp-parser-dev  the HTTP module's request framing (src/proto/http/h1.c)
#   libyaml-dev      rules files (src/rules): the YAML parser
#   liburcu-dev      the store's lock-free readers: freeing what they may
#                    still see (src/lib/reclaim.h)
#   libssl-dev       libcrypto: SHA-256 and constant-time compare of passwords
#                    (src/server/auth.c); libssl: the TLS listeners
#                    (src/server/tls.c), through libevent-dev's
#                    libevent_openssl (bufferevent_openssl, src/server/net.c)
#   openssl          tests/e2e/test_tls.py makes its certificates with it
#   gdb              a sluiced that does not stop on SIGTERM in a test: its
#                    threads' stacks go into the failure (tests/e2e/harness.py)
#   faketime, libfaketime  tests/e2e/test_clock.py steps sluiced's wall clock
#                    (LD_PRELOAD of libfaketimeMT.so.1)
#   nodejs, npm      tests/e2e/test_clients.py runs node-redis and ioredis
#                    (npm ci from tests/e2e/node/package-lock.json); they
#                    need Node.js 20 or later (Debian 12 has 18; NodeSource's
#                    nodejs, which provides npm itself, counts as installed)
#   man-db, groff-base  tests/test_install.sh renders the installed man pages
#                    (man --warnings -l, groff -ww, lexgrog)
#   chromium         tests/test_status_page.sh loads the status page (GET /)
#                    headless, through playwright-core (npm ci from
#                    tests/e2e/browser/package-lock.json)
#   systemd          tests/test_install.sh checks the example unit with
#                    systemd-analyze verify / security (offline: no systemd
#                    need be running)
#   nginx            tests/e2e/test_nginx.py runs examples/nginx/ (auth_request
#                    in front of an upstream, asking sluiced's forward-auth)
#   prometheus       promtool: tests/e2e/test_http_metrics.py checks the
#                    /metrics page with `promtool check metrics`
#   wrk              bench/http.sh's load generator (HTTP against nginx)
#   libnghttp2-dev   the reference peer of the tests of sluiced's own HTTP/2 and
#                    HPACK (tests/test_h2.c, test_hpack.c, fuzz_hpack.c)
#   libprotobuf-c-dev  the gRPC module's messages (protobuf-c's runtime)
#   protobuf-c-compiler  protoc-c: C from proto/*.proto, into build/gen/
#   python3-grpcio   tests/e2e/test_grpc.py's gRPC client
#   python3-grpc-tools  its stubs, generated from proto/ at test time
#   nghttp2-client   h2load: bench/grpc.sh's load generator

set -eu

# installed PKG: PKG is installed, or an installed package provides it
# (NodeSource's nodejs provides npm, and conflicts with Debian's npm).
installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed' && return 0
    dpkg-query -W -f='${Status}|${Provides}\n' 2>/dev/null | sed -n 's/^install ok installed|//p' |
        tr ',' '\n' | sed 's/(.*//; s/[[:space:]]//g' | grep -qxF "$1"
}

missing=""
for p in $PACKAGES; do
    if ! installed "$p"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "deps.sh: installing:$missing" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "deps.sh: not root and no sudo: install these packages by hand:$missing" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
install_pkgs() {
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing </dev/null
}
if ! install_pkgs; then
    echo "deps.sh: install failed; updating the package lists and retrying" >&2
    $SUDO apt-get update -q </dev/null
    install_pkgs
fi
