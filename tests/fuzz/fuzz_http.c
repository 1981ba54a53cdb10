/*
 * fuzz_http.c -- libFuzzer target for the HTTP request path over a real
 * socket: arbitrary bytes sent by a client to sluiced's network layer
 * (net.c: accepting, reading, reply slots, closing) speaking the HTTP
 * module (src/proto/http/: the framing, the router, the bearer check and
 * every handler) over a local backend, as sluiced runs it -- a net of one
 * worker, its HTTP listener on 127.0.0.1.  A password is
 * configured ("pw"), so the bearer path is fuzzed; the dictionary holds
 * the token.  (fuzz_h1.c fuzzes the same module without sockets.)
 *
 * Per input: a server of its own (its users, store, net), one
 * connection, the bytes written and the client's side shut down, read
 * until the server closes it, then the server stopped.  Promises checked (any
 * broken one aborts, so libFuzzer keeps the input):
 *   - the server closes the connection within a bounded time (a client
 *     that sent everything and closed its side is never kept);
 *   - what it sends is whole HTTP answers (http_answers.h);
 *   - afterwards nothing is left counted: the HTTP connections
 *     (http_clients) and srv.clients are back to 0 (within a bounded
 *     wait: the worker counts them on its own thread).
 * Memory: ASan and LeakSanitizer see every input's allocations freed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "auth.h"
#include "backend_local.h"
#include "config.h"
#include "http.h"
#include "http_answers.h"
#include "net.h"
#include "resp_commands.h"
#include "service.h"

#define MAX_OUT     (1 << 20) /* bytes of answers kept per input */
#define MAX_WAIT_MS 3000      /* the server closes within this, or the input is kept */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_config cfg;
static sl_srv srv;
static sl_net *net;
static struct sockaddr_in laddr;
static char pass_file[] = "/tmp/fuzz-http-pass-XXXXXX";
static char out[MAX_OUT];

static void die(const char *why)
{
    fprintf(stderr, "fuzz_http: %s\n", why);
    __builtin_trap();
}

static void remove_file(void) { unlink(pass_file); }

static void teardown(void)
{
    sl_net_stop(net);
    sl_net_join(net);
    sl_net_free(net);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    sl_auth_free(srv.auth);
}

/* Per input: a server with the password, an empty store and one worker,
 * serving HTTP (and RESP, unused) on 127.0.0.1, any ports. */
static void setup(void)
{
    char err[512];
    memset(&srv, 0, sizeof srv);
    char *argv[] = {"sluiced",
                    "--port",
                    "0",
                    "--http-port",
                    "any",
                    "--bind",
                    "127.0.0.1",
                    "--threads",
                    "1",
                    "--trust-client-time",
                    "--recv-timeout",
                    "2s",
                    "--max-clients",
                    "100",
                    NULL};
    sl_config_defaults(&cfg);
    if (sl_config_parse_args(14, argv, &cfg, err, sizeof err) != 0) die(err);
    cfg.auth_fail_max = 1000;
    cfg.auth_fail_window_ms = 1000;
    sl_auth_opts o = {pass_file, NULL, 1000, 1000};
    srv.auth = sl_auth_new(&o, err, sizeof err);
    if (srv.auth == NULL) die(err);
    srv.cfg = &cfg;
    srv.start_ms = sl_now_ms();
    sl_store_opts so = {0};
    so.max_bytes = 64u << 20;
    srv.store = sl_store_new(&so, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0) die("setup");
    net = sl_net_start(&srv, &sl_resp_proto, &sl_http_proto, err, sizeof err);
    if (net == NULL) die(err);
    laddr.sin_family = AF_INET;
    laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    laddr.sin_port = htons((uint16_t)srv.http_port);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    setup();
    /* Each input a connection from its own source address in 127/8:
     * tens of thousands of connections a run otherwise use up the
     * ephemeral ports of one address in TIME_WAIT ("connect" failed after
     * 43,664 inputs in a CI run). */
    static uint32_t nconn;
    int c = -1, err = 0;
    /* a failed connect is the harness's (the kernel's ports, not the code
     * under test): tried again from the next source address, a few times,
     * and reported with its errno if it keeps failing */
    for (int attempt = 0; c < 0 && attempt < 5; attempt++) {
        uint32_t n = nconn++ % (250u << 16);
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl((127u << 24) | ((1 + (n >> 16)) << 16) | (n & 0xffff));
        int one = 1;
        c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c >= 0 &&
            (setsockopt(c, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one) != 0 ||
             bind(c, (struct sockaddr *)&src, sizeof src) != 0 ||
             connect(c, (struct sockaddr *)&laddr, sizeof laddr) != 0)) {
            err = errno;
            close(c);
            c = -1;
        }
    }
    if (c < 0) {
        fprintf(stderr, "fuzz_http: connect to 127.0.0.1:%d: %s\n", srv.http_port, strerror(err));
        die("connect");
    }
    fcntl(c, F_SETFL, O_NONBLOCK);
    size_t sent = 0, got = 0;
    int eof = 0;
    int64_t until = mono_ms() + MAX_WAIT_MS;
    while (!eof) {
        int moved = 0;
        if (sent < size) {
            ssize_t w = send(c, data + sent, size - sent, MSG_NOSIGNAL);
            if (w > 0) sent += (size_t)w, moved = 1;
            if (w < 0 && errno != EAGAIN) sent = size; /* the server closed early */
            if (sent == size) shutdown(c, SHUT_WR);
        }
        for (;;) {
            char tmp[16384];
            ssize_t r = recv(c, tmp, sizeof tmp, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                eof = 1;
                break;
            }
            if (r < 0) break;
            size_t k = (size_t)r < sizeof out - got ? (size_t)r : sizeof out - got;
            memcpy(out + got, tmp, k);
            got += k;
            moved = 1;
        }
        if (!eof && mono_ms() > until) die("the connection was not closed");
        if (!eof && !moved) {
            struct pollfd pf = {c, POLLIN | (sent < size ? POLLOUT : 0), 0};
            poll(&pf, 1, 10);
        }
    }
    close(c);
    check_answers(out, got, memmem(data, size, "HEAD", 4) != NULL);
    /* the worker forgets the connection on its own thread: soon */
    int64_t gone = mono_ms() + MAX_WAIT_MS;
    while (atomic_load(&srv.stats.http_clients) != 0 || atomic_load(&srv.clients) != 0) {
        if (mono_ms() > gone) die("a closed connection is still counted");
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    teardown();
    return 0;
}
