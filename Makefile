# sluice -- build.  `make` builds libsluice (static + shared), the server
# `sluiced` and the command line tool `sluicectl`; `make check` builds and runs every test (plain, ASan+UBSan, TSan);
# `make bench` runs the benchmarks.  Outputs go under build/ (never committed).
#
# Variants share these rules and differ by output folder and flags:
#     make                     build/         -O2 -g
#     make asan                build/asan/    ASan + UBSan (all of it, tests too)
#     make tsan                build/tsan/    ThreadSanitizer
# which is the same as `make B=build/asan CFLAGS=... LDFLAGS=... all tests`.

CC      ?= cc
VERSION := 0.1.0
# The shared library's soname is libsluice.so.$(SOVERSION): raised when the
# ABI breaks.  Installed as $(SO_REAL), with the soname and libsluice.so
# linking to it.
SOVERSION := 0
SO_REAL   := libsluice.so.$(VERSION)

# Where `make install` puts things: each may be set on the command line, and
# DESTDIR is put before all of them (a staging root, as packagers use).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/sluice
# The Redis module, where Debian's Redis modules go (/usr/lib/redis/modules)
MODULEDIR  ?= $(LIBDIR)/redis/modules
# Run after installing the shared library into the real system as root
# (not with DESTDIR, not as another user): `make install LDCONFIG=:` skips it.
LDCONFIG   ?= ldconfig

WARN    := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes
CFLAGS  ?= -O2 -g
LDFLAGS ?=
# -MMD -MP: each object records the headers it read (build/**/*.d), so a
# changed header rebuilds exactly what includes it.
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -MMD -MP
# liburcu-bp: reclaiming what the store's lock-free readers may still see
# (src/lib/reclaim.h).  Its read side touches a thread-local word of
# liburcu's; TLS descriptors make that a load in the shared library too
# (~6.5 ns a decision with the default dialect's __tls_get_addr calls,
# ~2 ns with descriptors, measured with a two-line loop).
LDLIBS  := -lurcu-bp -lz -lpthread
ifeq ($(shell uname -m),x86_64)
BASE_CFLAGS += -mtls-dialect=gnu2
endif

# Where outputs go (the variants below set it).
B       ?= build

# ---- layers -----------------------------------------------------------
# Each layer compiles with only the include paths it may use, so a wrong
# include fails to compile (tests/test_layers.sh proves it).  Dependencies
# point one way, down this list (docs/architecture.md):
#     lib       src/lib          the library: sees only itself
#     rules     src/rules        + lib
#     backend   src/backend      + rules
#     server    src/server       + backend      (the service layer, net, live)
#     proto     src/proto/NAME   + server       (RESP, HTTP, gRPC)
#     sluiced   src/sluiced      + proto        (main: wires it all)
#     cli       src/cli          lib + rules + backend (+ hiredis, an external library: top)
#     module    src/module       lib            (build/sluice.so, the Redis module)
INC_lib     := -Iinclude -Isrc/lib
INC_rules   := $(INC_lib) -Isrc/rules
INC_backend := $(INC_rules) -Isrc/backend
INC_server  := $(INC_backend) -Isrc/server
INC_proto   := $(INC_server) -Isrc/proto/resp -Isrc/proto/http -Isrc/proto/grpc -Isrc/proto/headers \
               -I$(B)/gen
INC_sluiced := $(INC_proto) -Isrc/sluiced
INC_cli     := $(INC_backend) -Isrc/cli
INC_module  := $(INC_lib) -Isrc/module
INC_tests   := $(INC_proto) -Isrc/cli -Itests
# libsluice.so exports only the public API: sluice.h marks its
# declarations visible; everything else (the sl__ names) is hidden.
LIB_VIS     := -fvisibility=hidden

ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
              -DSL_RCU_CALLS
TSAN_FLAGS := -O1 -g -fsanitize=thread

LIB_SRC := $(wildcard src/lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
CLI_SRC := $(wildcard src/cli/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
# The CLI's parts without main(), for unit tests of the tool's parsers
# (without top.o, the one part that talks to a server: hiredis).
CLI_PARTS := $(filter-out $(B)/src/cli/sluicectl.o $(B)/src/cli/top.o,$(CLI_OBJ))
# `sluicectl top` asks a running sluiced over RESP with hiredis.
CLI_LIBS  := -lhiredis
# Rules files (src/rules): the YAML loader and matcher, RL.CHECK's plan.
RULES_SRC := $(wildcard src/rules/*.c)
RULES_OBJ := $(RULES_SRC:%.c=$(B)/%.o)
RULES_LIBS := -lyaml
# Backends (src/backend): where decisions are made.
# The Redis backend (hiredis, libevent) is the server's only: the tool and
# the rules' tests link the others.
BACKEND_SRC := $(filter-out src/backend/backend_redis.c,$(wildcard src/backend/*.c))
# The Redis backend: backend_redis.c and its parts by concern in
# src/backend/redis/ (redis_int.h).  Its socket-free parts (the replies'
# reader, the ring, the slots) are unit-tested alone.
REDIS_SRC   := $(wildcard src/backend/redis/*.c)
REDIS_PARTS := $(patsubst %,$(B)/src/backend/redis/%.o,reply ring slots)
BACKEND_OBJ := $(BACKEND_SRC:%.c=$(B)/%.o)
REDIS_OBJ   := $(B)/src/backend/backend_redis.o $(REDIS_SRC:%.c=$(B)/%.o)
# sluiced: the service layer and net (src/server), the protocols
# (src/proto/*), and main (src/sluiced).  Its parts without main() are
# linked into its tests.
SRV_SRC := $(wildcard src/server/*.c) $(wildcard src/proto/*/*.c)
SRV_OBJ := $(SRV_SRC:%.c=$(B)/%.o)
SRV_PARTS := $(SRV_OBJ) $(BACKEND_OBJ) $(REDIS_OBJ) $(RULES_OBJ)
# libevent_openssl + libssl: the TLS listeners (src/server/tls.c, net.c);
# libcrypto: also the passwords' SHA-256 (src/server/auth.c).
# libjansson: the HTTP module's JSON (src/proto/http); libhttp_parser:
# its request framing (src/proto/http/h1.c).
# libhiredis: the Redis backend (src/backend/backend_redis.c, src/backend/redis/).
SRV_LIBS := -levent -levent_openssl -lssl -lcrypto -ljansson -lhttp_parser -lhiredis
# The Redis module (src/module): the library's objects and the module's,
# one shared object Redis loads (--loadmodule build/sluice.so).
MODULE_SRC := $(wildcard src/module/*.c)
MODULE_OBJ := $(MODULE_SRC:%.c=$(B)/%.o)
# gRPC (src/proto/grpc): HTTP/2 of its own (h2.c, hpack.c); its messages with
# protobuf-c, from proto/*.proto by protoc-c into $(B)/gen/ (never
# committed).  The generated C builds without -Wpedantic -Werror: it is
# protoc-c's, not ours.
PROTO_SRC := $(shell find proto -name '*.proto')
PROTO_GEN := $(PROTO_SRC:proto/%.proto=$(B)/gen/%.pb-c.c)
PROTO_OBJ := $(PROTO_GEN:%.c=%.o)
SRV_PARTS += $(PROTO_OBJ)
SRV_LIBS += -lprotobuf-c
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
# tests/support/vectors.c: the spec's vector files, read by any test (libsluice only)
TEST_SUPPORT := $(filter-out $(TEST_SRC),$(wildcard tests/*.c)) tests/support/vectors.c
TEST_SUPPORT_OBJ := $(TEST_SUPPORT:%.c=$(B)/%.o)

.PHONY: all lib cli sluiced module tests check asan tsan run faults bench fuzz install uninstall man clean fmt print-layer
.SECONDARY: # keep objects made by chained rules (tests/*.o)
all: lib cli sluiced module

lib: $(B)/libsluice.a $(B)/libsluice.so
cli: $(B)/sluicectl $(B)/sluice
sluiced: $(B)/sluiced
module: $(B)/sluice.so
tests: $(TEST_BIN)

# One compile rule; the layer's include paths come from the object's folder.
$(B)/src/lib/%.o:     LAYER := $(INC_lib) $(LIB_VIS)
$(B)/src/rules/%.o:   LAYER := $(INC_rules)
$(B)/src/backend/%.o: LAYER := $(INC_backend)
$(B)/src/server/%.o:  LAYER := $(INC_server)
$(B)/src/proto/%.o:   LAYER := $(INC_proto)
$(B)/src/sluiced/%.o: LAYER := $(INC_sluiced)
$(B)/src/cli/%.o:     LAYER := $(INC_cli)
$(B)/src/module/%.o:  LAYER := $(INC_module) $(LIB_VIS)
$(B)/tests/%.o:       LAYER := $(INC_tests)
$(B)/bench/%.o:       LAYER := $(INC_lib)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(LAYER) -c $< -o $@

$(B)/gen/%.pb-c.c $(B)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(B)/gen
	protoc-c -Iproto --c_out=$(B)/gen $<

$(B)/gen/%.o: $(B)/gen/%.c
	$(CC) -std=c11 $(CFLAGS) -fPIC -I$(B)/gen -c $< -o $@

# the protocol modules include the generated headers: made first
$(filter $(B)/src/proto/%,$(SRV_OBJ)) $(B)/src/sluiced/main.o $(TEST_SRC:%.c=$(B)/%.o): | $(PROTO_GEN)

-include $(shell find $(B)/src $(B)/tests $(B)/bench -type f -name '*.d' 2>/dev/null)
# An object without its .d (a build tree older than -MMD, a .d removed) is
# rebuilt: which headers it read is unknown, so it may be stale.
NO_DEPS := $(shell find $(B)/src $(B)/tests $(B)/bench -type f -name '*.o' 2>/dev/null | \
	while read o; do [ -f "$${o%.o}.d" ] || echo "$$o"; done)
$(NO_DEPS): FORCE
.PHONY: FORCE
FORCE:

# `make -s print-layer L=server`: a layer's compile flags (tests/test_layers.sh).
print-layer:
	@echo $(BASE_CFLAGS) $(INC_$(L))

$(B)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libsluice.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libsluice.so.$(SOVERSION) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# sluicectl replay --rules and check load rules with src/rules (libyaml),
# replay --rules decides with the local backend; top speaks RESP (hiredis).
$(B)/sluicectl: $(CLI_OBJ) $(RULES_OBJ) $(BACKEND_OBJ) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(CLI_LIBS) $(RULES_LIBS) $(LDLIBS)

# Exports only RedisModule_OnLoad (everything else is hidden).
$(B)/sluice.so: $(MODULE_OBJ) $(LIB_OBJ)
	$(CC) -shared $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The tool's old name, in the build tree only and for one release: a link
# that runs sluicectl, which then notes its new name on stderr.  Never
# installed (Debian's package "sluice" owns /usr/bin/sluice).
$(B)/sluice: $(B)/sluicectl
	ln -sf sluicectl $@

$(B)/tests/%: $(B)/tests/%.o $(TEST_SUPPORT_OBJ) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) -lcmocka $(LDLIBS)

# The status page is built into status.o (an assembler .incbin of the file).
$(B)/src/proto/http/status.o: src/proto/http/status.html
# The Redis backend's script is built into redis/script.o the same way.
$(B)/src/backend/redis/script.o: src/backend/redis/sluice.lua

$(B)/sluiced: $(B)/src/sluiced/main.o $(SRV_PARTS) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SRV_LIBS) $(RULES_LIBS) $(LDLIBS)

# Unit tests of code outside the library link the parts they test:
# add one line per such test.
$(B)/tests/test_replay_parse: $(CLI_PARTS) $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_replay_parse: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_whatif_parse: $(B)/src/cli/whatif_parse.o $(B)/src/cli/text.o
# the module's plan parser: module.c included whole, these beside it
$(B)/tests/test_module_plan: $(B)/src/module/holds.o $(B)/src/module/redismodule_api.o
$(B)/tests/test_resp: $(B)/src/proto/resp/resp.o $(B)/src/proto/resp/resp_write.o \
                     $(B)/src/server/buf.o
$(B)/tests/test_commands: $(SRV_PARTS)
$(B)/tests/test_commands: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_pipeline: $(SRV_PARTS)
$(B)/tests/test_pipeline: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_service: $(SRV_PARTS)
$(B)/tests/test_service: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_backend: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_backend: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_backend_redis: $(SRV_PARTS)
$(B)/tests/test_sentinel: $(SRV_PARTS)
$(B)/tests/test_sentinel: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_ring: $(REDIS_PARTS)
$(B)/tests/test_slots: $(REDIS_PARTS)
$(B)/tests/test_backend_redis: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_slots_threads: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_slots_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_wait: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_wait: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_grpc_wire: $(B)/src/proto/grpc/rls_wire.o $(PROTO_OBJ)
$(B)/tests/test_grpc_wire: LDLIBS += -lprotobuf-c
# dynamic_metadata (src/proto/grpc/rls_meta.c) from rules' metadata, read
# back by protobuf-c
$(B)/tests/test_rls_meta: $(B)/src/proto/grpc/rls_meta.o $(B)/src/proto/grpc/rls_wire.o $(B)/src/server/buf.o \
                         $(PROTO_OBJ) $(RULES_OBJ)
$(B)/tests/test_rls_meta: LDLIBS += -lprotobuf-c $(RULES_LIBS)
$(B)/tests/test_rules_meta: $(RULES_OBJ)
$(B)/tests/test_rules_meta: LDLIBS += $(RULES_LIBS)
# HTTP/2 and HPACK (src/proto/grpc/h2.c, hpack.c) against nghttp2, the
# independent peer: nghttp2 is the tests' only, never sluiced's
$(B)/tests/test_hpack: $(B)/src/proto/grpc/hpack.o
$(B)/tests/test_hpack: LDLIBS += -lnghttp2
$(B)/tests/test_h2: $(B)/src/proto/grpc/h2.o $(B)/src/proto/grpc/hpack.o
$(B)/tests/test_h2: LDLIBS += -lnghttp2
$(B)/tests/test_http_slots: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_http_slots: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_live_threads: $(SRV_PARTS)
$(B)/tests/test_live_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_reload_threads: $(SRV_PARTS)
$(B)/tests/test_reload_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_stats_threads: $(SRV_PARTS)
$(B)/tests/test_stats_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
# the decision journal over the local backend (src/server/journal.c)
$(B)/tests/test_journal: $(B)/src/server/journal.o $(B)/src/server/journal_fmt.o \
                         $(B)/src/server/log.o $(BACKEND_OBJ) $(RULES_OBJ)
$(B)/tests/test_journal: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_history: $(B)/src/server/history.o $(B)/src/server/stats.o $(RULES_OBJ)
$(B)/tests/test_history: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_history_threads: $(B)/src/server/history.o $(B)/src/server/stats.o $(RULES_OBJ)
$(B)/tests/test_history_threads: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_http_ready: $(SRV_PARTS)
$(B)/tests/test_http_ready: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
# The RateLimit headers' one writer (src/proto/headers), alone.
$(B)/tests/test_ratelimit_headers: $(B)/src/proto/headers/ratelimit_headers.o $(RULES_OBJ)
$(B)/tests/test_ratelimit_headers: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_h1: $(B)/src/proto/http/h1.o
$(B)/tests/test_h1: LDLIBS += -lhttp_parser
$(B)/tests/test_auth: $(B)/src/server/auth.o $(B)/src/server/log.o
$(B)/tests/test_auth: LDLIBS += -lcrypto
$(B)/tests/test_auth_threads: $(B)/src/server/auth.o $(B)/src/server/log.o
$(B)/tests/test_auth_threads: LDLIBS += -lcrypto
$(B)/tests/test_rules: $(RULES_OBJ)
$(B)/tests/test_rules: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_check: $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_check: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_check_envoy: $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_check_envoy: LDLIBS += $(RULES_LIBS)
# The Redis script tests (sluice.lua against the local engine): sync hiredis.
$(B)/tests/test_redis_scripts: $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_redis_scripts: LDLIBS += -lhiredis $(RULES_LIBS)

$(B)/bench/bench: $(B)/bench/bench.o $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

asan:
	$(MAKE) B=build/asan CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" all tests

# TSAN_TESTS: the test binaries to build (default all; tests/run.sh names
# the few it runs under TSan)
tsan:
	$(MAKE) B=build/tsan CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" all $(or $(TSAN_TESTS),tests)

# The whole test suite: plain build, then ASan+UBSan, then TSan for the
# threaded tests.  tests/run.sh prints "N passed, N failed" and fails if any did.
check:
	./tests/run.sh

bench: $(B)/bench/bench $(B)/sluicectl
	./bench/run.sh

# Open-ended fuzzing, apart from the suite (whose fuzzing is seeded and
# bounded, tests/fuzz/fuzz.sh): every target of tests/test_fuzz_*.sh in
# turn for FUZZ_SECONDS each (0: until stopped -- then name one target),
# unseeded, growing build/fuzz/corpus_NAME/; a failing input stays in
# build/fuzz/ (NAME-crash-*, ...).  FUZZ_TARGETS: names to run (e.g.
# "hpack h2"), default all.  docs/testing.md says how a finding becomes a
# seed and a regression test.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?=
fuzz:
	@rc=0; for t in tests/test_fuzz_*.sh; do \
	    FUZZ_MODE=open FUZZ_SECONDS="$(FUZZ_SECONDS)" FUZZ_ONLY="$(FUZZ_TARGETS)" \
	        sh "$$t" || rc=1; \
	done; exit $$rc

run:
	./scripts/run.sh

# The fault harness's long schedule (docs/faults.md): 50 faults of each
# kind on each topology, a table of over-admitted requests at the end.
faults: all
	SLUICE_BUILD=$(CURDIR)/$(B) /usr/bin/python3 tests/faults/run.py --schedule long --parallel

# ---- install ------------------------------------------------------------
# Man pages: man/*.in with the version put in; sluiced(8)'s OPTIONS come
# from the option table itself (`sluiced --dump-options`), so they list
# exactly what sluiced takes.
MAN_PAGES := $(B)/man/sluiced.8 $(B)/man/sluicectl.1 $(B)/man/libsluice.3
man: $(MAN_PAGES)

$(B)/man/sluiced.8: man/sluiced.8.in man/options.awk $(B)/sluiced
	@mkdir -p $(dir $@)
	$(B)/sluiced --dump-options | awk -f man/options.awk >$@.options
	awk -v v=$(VERSION) 'FNR == NR { o = o $$0 "\n"; next } /^@OPTIONS@$$/ { printf "%s", o; next } \
	    { gsub(/@VERSION@/, v); print }' $@.options $< >$@.tmp
	rm -f $@.options
	mv $@.tmp $@

$(B)/man/%: man/%.in
	@mkdir -p $(dir $@)
	sed 's/@VERSION@/$(VERSION)/g' $< >$@.tmp
	mv $@.tmp $@

# The files made at install time carry the install paths.  sluice.pc's
# Libs gets -Wl,-rpath,${libdir} when LIBDIR is not one of the system's
# library folders (e.g. PREFIX=$HOME/.local), so that a program built with
# `pkg-config --libs sluice` finds libsluice.so there without LD_LIBRARY_PATH.
$(B)/sluice.pc: sluice.pc.in Makefile
	rpath=' -Wl,-rpath,$${libdir}'; \
	case '$(LIBDIR)' in \
	/lib | /lib64 | /usr/lib | /usr/lib64 | /usr/local/lib | /lib/*-linux-gnu* | \
	/usr/lib/*-linux-gnu* | /lib/ | /usr/lib/ | /usr/local/lib/) rpath= ;; \
	esac; \
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e "s|@RPATH@|$$rpath|g" \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' $< >$@
$(B)/sluiced.service: examples/sluiced.service.in Makefile
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' $< >$@
# Made anew at each install, so a PREFIX given then is the one they hold.
.PHONY: $(B)/sluice.pc $(B)/sluiced.service

# `make install [PREFIX=/usr/local] [DESTDIR=/staging/root]`:
#   sbin/sluiced             the server: a daemon an administrator or systemd
#                            starts, documented in section 8 (as sshd, nginx)
#   bin/sluicectl            the command line tool (never bin/sluice: that is
#                            Debian's unrelated package "sluice")
#   lib/$(SO_REAL)   the shared library; libsluice.so.0 (its soname)
#                            and libsluice.so (for -lsluice) link to it
#   lib/libsluice.a          the static library
#   include/sluice.h, lib/pkgconfig/sluice.pc
#   lib/redis/modules/sluice.so   the Redis module (MODULEDIR)
#   share/man/man8/sluiced.8, man1/sluicectl.1, man3/libsluice.3
#   share/doc/sluice/examples/sluiced.service   a hardened systemd unit
# then ldconfig when installing into the real system as root.
install: all man $(B)/sluice.pc $(B)/sluiced.service
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(LIBDIR) \
	    $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1 \
	    $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR)/examples \
	    $(DESTDIR)$(MODULEDIR)
	install -m 755 $(B)/sluiced $(DESTDIR)$(SBINDIR)/sluiced
	install -m 755 $(B)/sluicectl $(DESTDIR)$(BINDIR)/sluicectl
	install -m 644 include/sluice.h $(DESTDIR)$(INCLUDEDIR)/sluice.h
	install -m 644 $(B)/libsluice.a $(DESTDIR)$(LIBDIR)/libsluice.a
	install -m 755 $(B)/libsluice.so $(DESTDIR)$(LIBDIR)/$(SO_REAL)
	ln -sf $(SO_REAL) $(DESTDIR)$(LIBDIR)/libsluice.so.$(SOVERSION)
	ln -sf libsluice.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libsluice.so
	install -m 644 $(B)/sluice.pc $(DESTDIR)$(PKGCONFIGDIR)/sluice.pc
	install -m 755 $(B)/sluice.so $(DESTDIR)$(MODULEDIR)/sluice.so
	install -m 644 $(B)/man/sluicectl.1 $(DESTDIR)$(MANDIR)/man1/sluicectl.1
	install -m 644 $(B)/man/libsluice.3 $(DESTDIR)$(MANDIR)/man3/libsluice.3
	install -m 644 $(B)/man/sluiced.8 $(DESTDIR)$(MANDIR)/man8/sluiced.8
	install -m 644 $(B)/sluiced.service $(DESTDIR)$(DOCDIR)/examples/sluiced.service
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then \
	    echo "$(LDCONFIG)"; $(LDCONFIG); \
	else \
	    echo "not running ldconfig (DESTDIR set, or not root)"; \
	fi

# Removes what `make install` put there (same PREFIX and DESTDIR).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/sluiced $(DESTDIR)$(BINDIR)/sluicectl \
	    $(DESTDIR)$(INCLUDEDIR)/sluice.h $(DESTDIR)$(LIBDIR)/libsluice.a \
	    $(DESTDIR)$(LIBDIR)/libsluice.so $(DESTDIR)$(LIBDIR)/libsluice.so.$(SOVERSION) \
	    $(DESTDIR)$(LIBDIR)/$(SO_REAL) \
	    $(DESTDIR)$(PKGCONFIGDIR)/sluice.pc $(DESTDIR)$(MANDIR)/man1/sluicectl.1 \
	    $(DESTDIR)$(MANDIR)/man3/libsluice.3 $(DESTDIR)$(MANDIR)/man8/sluiced.8 \
	    $(DESTDIR)$(DOCDIR)/examples/sluiced.service $(DESTDIR)$(MODULEDIR)/sluice.so
	-rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null
	-rmdir $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(LIBDIR)/redis 2>/dev/null
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then $(LDCONFIG); fi

fmt:
	clang-format -i $(wildcard include/*.h src/*/*.c src/*/*.h src/proto/*/*.[ch] tests/*.c bench/*.c)

clean:
	rm -rf build
