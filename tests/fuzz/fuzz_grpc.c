/*
 * fuzz_grpc.c -- libFuzzer target for the gRPC module (src/proto/grpc/):
 * bytes a client sends -> sluiced's HTTP/2 (h2.c, hpack.c) -> gRPC framing ->
 * protobuf-c decoding -> ShouldRateLimit / Health/Check over a local
 * backend and a rules file -> the answers.  No socket: a detached
 * connection (net.h) whose replies go to a buffer.
 *
 * Input: one byte of options, then the client's bytes.  Option bit 0:
 * prepend the HTTP/2 client preface and an empty SETTINGS frame (so the
 * fuzzer works past the magic); bits 1..3: the input is fed in pieces of
 * 1 << (bits + 2) bytes, as reads would split it.
 *
 * Checked, besides what ASan and UBSan find (leaks included: every
 * connection is freed after its input):
 *   - what the server wrote is whole HTTP/2 frames, the first a SETTINGS,
 *     none longer than the default SETTINGS_MAX_FRAME_SIZE (16384);
 *   - what the protocol leaves unconsumed, unless it closed, is a frame not
 *     whole yet (net.c offers it again with the next bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_local.h"
#include "grpc.h"
#include "live.h"
#include "net.h"
#include "service.h"
#include "stats.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_config cfg;
static sl_srv srv;
static sl_svc_ctx svc;
static char rules_file[] = "/tmp/fuzz-grpc-rules-XXXXXX";

static const char rules[] = "domain: api\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
                            "  - key: s\n"
                            "    shadow_mode: true\n"
                            "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
                            "  - key: u\n"
                            "    rate_limit: {unlimited: true}\n"
                            "  - key: w\n"
                            "    rate_limit: {window: 90s, requests_per_unit: 7}\n";

static void die(const char *why)
{
    fprintf(stderr, "fuzz_grpc: %s\n", why);
    __builtin_trap();
}

static void remove_file(void) { unlink(rules_file); }

/* Once: the rules, a store, one worker's service context. */
static void setup(void)
{
    char err[512];
    int fd = mkstemp(rules_file);
    if (fd < 0 || write(fd, rules, sizeof rules - 1) != (ssize_t)(sizeof rules - 1))
        die("rules file");
    close(fd);
    atexit(remove_file);
    cfg.max_command = 1 << 20;
    cfg.max_clients = 100;
    cfg.max_client_skew_ms = 3600000;
    srv.cfg = &cfg;
    sl_store_opts so = {0};
    so.max_bytes = 64u << 20;
    srv.store = sl_store_new(&so, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    srv.live = sl_live_new(rules_file);
    if (srv.backend == NULL || srv.live == NULL || sl_stats_init(&srv.stats, 1) != 0 ||
        sl_live_reload(srv.live, "fuzz", err, sizeof err) != 0 ||
        sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0)
        die("setup");
}

/* The server's bytes are whole frames, the first a SETTINGS. */
static void check_frames(const sl_buf *b)
{
    size_t pos = 0;
    int first = 1;
    while (pos < b->len) {
        if (b->len - pos < 9) die("a frame header cut short");
        const unsigned char *h = (const unsigned char *)b->p + pos;
        size_t n = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
        if (n > 16384) die("a frame over SETTINGS_MAX_FRAME_SIZE");
        if (first && h[3] != 4) die("the first frame is not SETTINGS");
        first = 0;
        if (b->len - pos - 9 < n) die("a frame payload cut short");
        pos += 9 + n;
    }
}

/* 1: p[0..n) (input from offset `at` of the connection) holds a whole
 * frame -- or, at offset 0, a whole client preface -- that the protocol
 * should have taken. */
static int whole_frame_left(const char *p, size_t n, size_t at)
{
    if (at == 0) return n >= 24;
    if (n < 9) return 0;
    const unsigned char *h = (const unsigned char *)p;
    size_t len = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
    return len <= 16384 && n >= 9 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                  "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    if (!ready) {
        setup();
        ready = 1;
    }
    if (size == 0) return 0;
    unsigned opt = data[0];
    data++, size--;
    sl_buf sink = {0}, in = {0};
    if ((opt & 1) && sl_buf_add(&in, preface, sizeof preface - 1) != 0) die("memory");
    if (sl_buf_add(&in, data, size) != 0) die("memory");
    size_t piece = (size_t)1 << (((opt >> 1) & 7) + 2);
    sl_conn *c = sl_conn_detached_new(&sl_grpc_proto, &svc, &cfg, &sink);
    if (c == NULL) die("memory");
    int64_t now = 1800000000000;
    /* as net.c does: what the protocol leaves (a frame not whole yet) is
     * offered again with the next piece */
    for (size_t pos = 0, end = 0; pos < in.len;) {
        end = end + piece < in.len ? end + piece : in.len;
        size_t n = end - pos, used = 0;
        int st = sl_conn_detached_feed(c, in.p + pos, n, now, &used);
        if (st == SL_PROTO_CLOSE || st == SL_PROTO_NOMEM) break;
        if (used > n) die("more consumed than given");
        pos += used;
        if (!whole_frame_left(in.p + pos, end - pos, pos)) {
            if (end == in.len) break; /* the input ends inside a frame */
        } else {
            die("a whole frame left unconsumed without a close");
        }
        now += 7;
    }
    check_frames(&sink);
    sl_conn_detached_free(c);
    free(sink.p);
    free(in.p);
    return 0;
}
