# sluice -- build.  `make` builds libsluice (static + shared) and the `sluice`
# tool; `make check` builds and runs every test (plain, ASan+UBSan, TSan);
# `make bench` runs the benchmarks.  Outputs go under build/ (never committed).
#
# Variants share these rules and differ by output folder and flags:
#     make                     build/         -O2 -g
#     make asan                build/asan/    ASan + UBSan (all of it, tests too)
#     make tsan                build/tsan/    ThreadSanitizer
# which is the same as `make B=build/asan CFLAGS=... LDFLAGS=... all tests`.

PREFIX  ?= /usr/local
CC      ?= cc
VERSION := 0.1.0

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

# ---- layers -----------------------------------------------------------
# Each layer compiles with only the include paths it may use, so a wrong
# include fails to compile (tests/test_layers.sh proves it).  Dependencies
# point one way, down this list (docs/architecture.md):
#     lib       src/lib          the library: sees only itself
#     rules     src/rules        + lib
#     backend   src/backend      + rules
#     server    src/server       + backend      (the service layer, net, live)
#     proto     src/proto/NAME   + server       (RESP today)
#     sluiced   src/sluiced      + proto        (main: wires it all)
#     cli       src/cli          lib + rules + backend
INC_lib     := -Iinclude -Isrc/lib
INC_rules   := $(INC_lib) -Isrc/rules
INC_backend := $(INC_rules) -Isrc/backend
INC_server  := $(INC_backend) -Isrc/server
INC_proto   := $(INC_server) -Isrc/proto/resp
INC_sluiced := $(INC_proto) -Isrc/sluiced
INC_cli     := $(INC_backend) -Isrc/cli
INC_tests   := $(INC_proto) -Isrc/cli -Itests
# libsluice.so exports only the public API: sluice.h marks its
# declarations visible; everything else (the sl__ names) is hidden.
LIB_VIS     := -fvisibility=hidden

ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
              -DSL_RCU_CALLS
TSAN_FLAGS := -O1 -g -fsanitize=thread

B       ?= build
LIB_SRC := $(wildcard src/lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
CLI_SRC := $(wildcard src/cli/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
# The CLI's parts without main(), for unit tests of the tool's parsers.
CLI_PARTS := $(filter-out $(B)/src/cli/sluice.o,$(CLI_OBJ))
# Rules files (src/rules): the YAML loader and matcher, RL.CHECK's plan.
RULES_SRC := $(wildcard src/rules/*.c)
RULES_OBJ := $(RULES_SRC:%.c=$(B)/%.o)
RULES_LIBS := -lyaml
# Backends (src/backend): where decisions are made.
BACKEND_SRC := $(wildcard src/backend/*.c)
BACKEND_OBJ := $(BACKEND_SRC:%.c=$(B)/%.o)
# sluiced: the service layer and net (src/server), the protocols
# (src/proto/*), and main (src/sluiced).  Its parts without main() are
# linked into its tests.
SRV_SRC := $(wildcard src/server/*.c) $(wildcard src/proto/*/*.c)
SRV_OBJ := $(SRV_SRC:%.c=$(B)/%.o)
SRV_PARTS := $(SRV_OBJ) $(BACKEND_OBJ) $(RULES_OBJ)
SRV_LIBS := -levent -lcrypto
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
TEST_SUPPORT := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_SUPPORT_OBJ := $(TEST_SUPPORT:%.c=$(B)/%.o)

.PHONY: all lib cli sluiced tests check asan tsan run bench install clean fmt print-layer
.SECONDARY: # keep objects made by chained rules (tests/*.o)
all: lib cli sluiced

lib: $(B)/libsluice.a $(B)/libsluice.so
cli: $(B)/sluice
sluiced: $(B)/sluiced
tests: $(TEST_BIN)

# One compile rule; the layer's include paths come from the object's folder.
$(B)/src/lib/%.o:     LAYER := $(INC_lib) $(LIB_VIS)
$(B)/src/rules/%.o:   LAYER := $(INC_rules)
$(B)/src/backend/%.o: LAYER := $(INC_backend)
$(B)/src/server/%.o:  LAYER := $(INC_server)
$(B)/src/proto/%.o:   LAYER := $(INC_proto)
$(B)/src/sluiced/%.o: LAYER := $(INC_sluiced)
$(B)/src/cli/%.o:     LAYER := $(INC_cli)
$(B)/tests/%.o:       LAYER := $(INC_tests)
$(B)/bench/%.o:       LAYER := $(INC_lib)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(LAYER) -c $< -o $@

-include $(shell find $(B) -name '*.d' 2>/dev/null)

# `make -s print-layer L=server`: a layer's compile flags (tests/test_layers.sh).
print-layer:
	@echo $(BASE_CFLAGS) $(INC_$(L))

$(B)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/libsluice.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libsluice.so.0 $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# sluice replay --rules decides with src/rules and the local backend, hence libyaml.
$(B)/sluice: $(CLI_OBJ) $(RULES_OBJ) $(BACKEND_OBJ) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(RULES_LIBS) $(LDLIBS)

$(B)/tests/%: $(B)/tests/%.o $(TEST_SUPPORT_OBJ) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) -lcmocka $(LDLIBS)

$(B)/sluiced: $(B)/src/sluiced/main.o $(SRV_PARTS) $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SRV_LIBS) $(RULES_LIBS) $(LDLIBS)

# Unit tests of code outside the library link the parts they test:
# add one line per such test.
$(B)/tests/test_replay_parse: $(CLI_PARTS) $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_replay_parse: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_whatif_parse: $(B)/src/cli/whatif_parse.o $(B)/src/cli/text.o
$(B)/tests/test_resp: $(B)/src/proto/resp/resp.o $(B)/src/proto/resp/resp_write.o \
                     $(B)/src/server/buf.o
$(B)/tests/test_commands: $(SRV_PARTS)
$(B)/tests/test_commands: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_service: $(SRV_PARTS)
$(B)/tests/test_service: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_backend: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_backend: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_slots_threads: $(SRV_PARTS) $(B)/tests/support/backend_delay.o
$(B)/tests/test_slots_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_live_threads: $(SRV_PARTS)
$(B)/tests/test_live_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_reload_threads: $(SRV_PARTS)
$(B)/tests/test_reload_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_stats_threads: $(SRV_PARTS)
$(B)/tests/test_stats_threads: LDLIBS += $(SRV_LIBS) $(RULES_LIBS)
$(B)/tests/test_auth: $(B)/src/server/auth.o $(B)/src/server/log.o
$(B)/tests/test_auth: LDLIBS += -lcrypto
$(B)/tests/test_auth_threads: $(B)/src/server/auth.o $(B)/src/server/log.o
$(B)/tests/test_auth_threads: LDLIBS += -lcrypto
$(B)/tests/test_rules: $(RULES_OBJ)
$(B)/tests/test_rules: LDLIBS += $(RULES_LIBS)
$(B)/tests/test_check: $(RULES_OBJ) $(BACKEND_OBJ)
$(B)/tests/test_check: LDLIBS += $(RULES_LIBS)

$(B)/bench/bench: $(B)/bench/bench.o $(B)/libsluice.a
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

asan:
	$(MAKE) B=build/asan CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" all tests

tsan:
	$(MAKE) B=build/tsan CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" all tests

# The whole test suite: plain build, then ASan+UBSan, then TSan for the
# threaded tests.  tests/run.sh prints "N passed, N failed" and fails if any did.
check:
	./tests/run.sh

bench: $(B)/bench/bench $(B)/sluice
	./bench/run.sh

run:
	./scripts/run.sh

# sluice.pc is made from sluice.pc.in at install time: it carries PREFIX.
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/sluice.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(B)/libsluice.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(B)/libsluice.so $(DESTDIR)$(PREFIX)/lib/libsluice.so.$(VERSION)
	ln -sf libsluice.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libsluice.so.0
	ln -sf libsluice.so.0 $(DESTDIR)$(PREFIX)/lib/libsluice.so
	install -m 755 $(B)/sluice $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' sluice.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sluice.pc

fmt:
	clang-format -i $(wildcard include/*.h src/*/*.c src/*/*.h src/proto/*/*.[ch] tests/*.c bench/*.c)

clean:
	rm -rf build
