/*
 * fuzz_h1.c -- libFuzzer target for the HTTP framing itself, without a
 * socket: bytes -> the HTTP protocol module (src/proto/http/: h1.c's
 * parsing, the router, the bearer check, every handler) on a detached
 * connection (net.h) over a local backend -> the answers it wrote.
 *
 * The bytes arrive in pieces, as a socket would deliver them: the first
 * byte sets the piece size (1 to 64), and what the module leaves unread
 * is handed to it again with the next piece, as net.c does, so a request
 * is parsed again from its start as it grows.  A password is configured
 * ("pw"; the dictionary holds it).  Promises checked (any broken one
 * aborts, so libFuzzer keeps the input):
 *   - the module never reads past what it was given, and what it leaves
 *     unread stays within a request's bounds (h1.h) plus a piece;
 *   - what it wrote is whole HTTP answers (http_answers.h), and only the
 *     last says Connection: close when the module asked to close;
 *   - nothing is answered for input that holds no whole request line.
 * Memory: ASan and LeakSanitizer see every input's allocations freed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "backend_local.h"
#include "buf.h"
#include "config.h"
#include "http.h"
#include "http_answers.h"
#include "net.h"
#include "service.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char pass_file[] = "/tmp/fuzz-h1-pass-XXXXXX";

static void die(const char *why)
{
    fprintf(stderr, "fuzz_h1: %s\n", why);
    __builtin_trap();
}

static void remove_file(void) { unlink(pass_file); }

#define BOUND (SL_HTTP_MAX_URI + SL_HTTP_MAX_HEADERS + SL_HTTP_MAX_BODY + 64 + 64)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        int fd = mkstemp(pass_file);
        if (fd < 0 || write(fd, "pw\n", 3) != 3) die("password file");
        close(fd);
        atexit(remove_file);
        ready = 1;
    }
    if (size == 0) return 0;
    size_t piece = 1 + data[0] % 64;
    data++, size--;

    char err[512];
    sl_config cfg;
    sl_srv srv;
    sl_svc_ctx svc;
    memset(&srv, 0, sizeof srv);
    sl_config_defaults(&cfg);
    cfg.trust_client_time = 1;
    cfg.auth_fail_max = 1000;
    sl_auth_opts o = {pass_file, NULL, 1000, 1000};
    srv.auth = sl_auth_new(&o, err, sizeof err);
    if (srv.auth == NULL) die(err);
    srv.cfg = &cfg;
    sl_store_opts so = {0};
    so.max_bytes = 64u << 20;
    srv.store = sl_store_new(&so, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0 ||
        sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0)
        die("setup");
    sl_buf sink = {0};
    sl_conn *c = sl_conn_detached_new(&sl_http_proto, &svc, &cfg, &sink);
    if (c == NULL) die("detached connection");

    /* what the module has not read yet, and the pieces as they come */
    char *pending = malloc(size + 1);
    size_t npend = 0, off = 0;
    int st = SL_PROTO_AGAIN;
    while (off < size && st != SL_PROTO_CLOSE) {
        size_t n = size - off < piece ? size - off : piece;
        memcpy(pending + npend, data + off, n);
        npend += n;
        off += n;
        size_t used = 0;
        st = sl_conn_detached_feed(c, pending, npend, sl_now_ms(), &used);
        if (st == SL_PROTO_NOMEM) die("out of memory");
        if (used > npend) die("read past the bytes given");
        memmove(pending, pending + used, npend - used);
        npend -= used;
        if (st == SL_PROTO_AGAIN && npend > BOUND) die("an unread request beyond its bounds");
    }
    free(pending);
    if (memmem(data, size, "\n", 1) == NULL && sink.len > 0 && st != SL_PROTO_CLOSE)
        die("an answer to input without a line");
    size_t last = check_answers(sink.p, sink.len, memmem(data, size, "HEAD", 4) != NULL);
    if (st == SL_PROTO_CLOSE) { /* the last answer says so */
        const char *a = sink.p + last,
                   *end = sink.len ? memmem(a, sink.len - last, "\r\n\r\n", 4) : NULL;
        if (end == NULL ||
            memmem(a, (size_t)(end + 2 - a), "\r\nConnection: close\r\n", 21) == NULL)
            die("closed without an answer saying Connection: close");
    }
    sl_conn_detached_free(c);
    free(sink.p);
    sl_svc_ctx_done(&svc);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    sl_auth_free(srv.auth);
    return 0;
}
