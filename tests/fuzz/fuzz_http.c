/*
 * fuzz_http.c -- libFuzzer target for the HTTP request path: arbitrary
 * bytes sent by a real client socket to the HTTP module (src/proto/http/)
 * -- the real evhttp of sl_http_side on a private event_base, accepting
 * from a loopback listening socket, its router (on_request: bounds, the
 * bearer check, routes) and every handler -- over a service context with
 * a local backend, as sluiced's workers run it.  A password is configured
 * ("pw"), so the bearer path is fuzzed; the dictionary holds the token.
 *
 * Per input: a server of its own (users, store, service context, the
 * HTTP side), the bytes written and the client's side shut down, the loop
 * run until the server closes the connection.  Promises checked (any
 * broken one aborts, so libFuzzer keeps the input):
 *   - the server closes the connection within a bounded time (a client
 *     that sent everything and closed its side is never kept);
 *   - everything it sends is a sequence of whole HTTP answers: a status
 *     line (HTTP/N.N: evhttp's own 400s repeat the request's version as
 *     read, e.g. HTTP/1.2, HTTP/1.-1; the router's are HTTP/1.0 or 1.1)
 *     with a 3-digit
 *     status, headers, and a body of exactly Content-Length bytes (to the
 *     close for HTTP/1.0 or Connection: close; none for a HEAD);
 *   - an answer whose Content-Type is application/json has a body that
 *     parses as one JSON object, with "error" a string on every 4xx/5xx;
 *   - a 200 or 429 from /v1/allow carries the X-RateLimit-* headers;
 *   - afterwards nothing is left counted: the HTTP side's connections
 *     (http_clients) and srv.clients are back to 0.
 * Memory: ASan and LeakSanitizer see every input's allocations freed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
#include "http.h"
#include "net.h"
#include "service.h"

#define MAX_OUT     (1 << 20) /* bytes of answers kept per input */
#define MAX_WAIT_MS 3000      /* the server closes within this, or the input is kept */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_config cfg;
static sl_srv srv;
static sl_svc_ctx svc;
static int lfd = -1;
static struct sockaddr_in laddr;
static char pass_file[] = "/tmp/fuzz-http-pass-XXXXXX";
static char out[MAX_OUT];

static void die(const char *why)
{
    fprintf(stderr, "fuzz_http: %s\n", why);
    __builtin_trap();
}

static void remove_file(void) { unlink(pass_file); }

/* Once: the password file and the listening socket (127.0.0.1, any port). */
static void setup_once(void)
{
    int fd = mkstemp(pass_file);
    if (fd < 0 || write(fd, "pw\n", 3) != 3) die("password file");
    close(fd);
    atexit(remove_file);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof laddr;
    laddr.sin_family = AF_INET;
    laddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&laddr, sizeof laddr) != 0 ||
        listen(lfd, 64) != 0 || getsockname(lfd, (struct sockaddr *)&laddr, &len) != 0)
        die("listening socket");
}

/* Per input: a server with the password, an empty store, one worker. */
static void setup(void)
{
    char err[512];
    memset(&cfg, 0, sizeof cfg);
    memset(&srv, 0, sizeof srv);
    sl_auth_opts o = {pass_file, NULL, 1000, 1000};
    srv.auth = sl_auth_new(&o, err, sizeof err);
    if (srv.auth == NULL) die(err);
    cfg.max_command = 1 << 20;
    cfg.max_clients = 100;
    cfg.auth_fail_max = 1000;
    cfg.auth_fail_window_ms = 1000;
    cfg.trust_client_time = 1;
    cfg.max_client_skew_ms = 3600000;
    cfg.recv_timeout_ms = 2000;
    srv.cfg = &cfg;
    sl_store_opts so = {0};
    so.max_bytes = 64u << 20;
    srv.store = sl_store_new(&so, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0 ||
        sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0)
        die("setup");
}

static void teardown(void)
{
    sl_svc_ctx_done(&svc);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    sl_auth_free(srv.auth);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The value of header `name` in the header block h[0..n), or NULL; its
 * length in *vlen. */
static const char *header(const char *h, size_t n, const char *name, size_t *vlen)
{
    size_t k = strlen(name);
    for (const char *p = h; p < h + n;) {
        const char *eol = memmem(p, (size_t)(h + n - p), "\r\n", 2);
        if (eol == NULL) eol = h + n;
        if ((size_t)(eol - p) > k && p[k] == ':' && strncasecmp(p, name, k) == 0) {
            const char *v = p + k + 1;
            while (v < eol && *v == ' ') v++;
            *vlen = (size_t)(eol - v);
            return v;
        }
        p = eol + 2;
    }
    return NULL;
}

/* Checks out[0..n): whole answers, one after another.  head: the input
 * holds a HEAD request, whose answer has the headers of a GET (its
 * Content-Length) without the body. */
static void check_answers(size_t n, int head)
{
    size_t off = 0;
    while (off < n) {
        const char *a = out + off;
        size_t left = n - off;
        const char *end = memmem(a, left, "\r\n\r\n", 4);
        if (end == NULL) die("an answer's headers are not whole");
        /* HTTP/N.N: evhttp's own errors (a 400 for a bad header line)
         * repeat the request's version as its sscanf read it (HTTP/1.2,
         * HTTP/1.-1); the router's answers are HTTP/1.0 or 1.1 */
        const char *p = a + 5, *eol = memmem(a, left, "\r\n", 2);
        if (left < 13 || memcmp(a, "HTTP/", 5) != 0 || eol == NULL) die("no HTTP status line");
        while (p < eol && ((*p >= '0' && *p <= '9') || *p == '-' || *p == '.')) p++;
        if (p == a + 5 || p + 4 > eol || *p != ' ') die("no HTTP/N.N status line");
        int status = 0;
        for (int i = 1; i < 4; i++) {
            if (p[i] < '0' || p[i] > '9') die("a status that is not 3 digits");
            status = status * 10 + (p[i] - '0');
        }
        const char *h = memmem(a, left, "\r\n", 2) + 2;
        size_t hn = (size_t)(end - h) + 2, vlen = 0;
        const char *cl = header(h, hn, "Content-Length", &vlen);
        size_t body_len = 0;
        if (cl != NULL) {
            char num[24];
            if (vlen == 0 || vlen >= sizeof num) die("a bad Content-Length");
            memcpy(num, cl, vlen);
            num[vlen] = '\0';
            body_len = strtoul(num, NULL, 10);
        } else {
            /* without a length, only an answer the close ends: HTTP/1.0,
             * or Connection: close (evhttp's own errors to a HEAD) */
            const char *conn = header(h, hn, "Connection", &vlen);
            if (memcmp(a, "HTTP/1.0 ", 9) != 0 &&
                !(conn != NULL && vlen == 5 && strncasecmp(conn, "close", 5) == 0))
                die("an answer without Content-Length that the close does not end");
            body_len = left - (size_t)(end + 4 - a);
        }
        const char *body = end + 4;
        size_t after = left - (size_t)(body - a);
        if (head && (after == 0 || (after >= 5 && memcmp(body, "HTTP/", 5) == 0)))
            body_len = 0; /* the answer to a HEAD */
        if (body_len > after) die("an answer's body is cut short");
        const char *ct = header(h, hn, "Content-Type", &vlen);
        if (ct != NULL && vlen == 16 && memcmp(ct, "application/json", 16) == 0 && body_len > 0) {
            json_error_t je;
            json_t *j = json_loadb(body, body_len, 0, &je);
            if (j == NULL || !json_is_object(j)) die("a JSON answer that is not a JSON object");
            if (status >= 400 && status != 429 && !json_is_string(json_object_get(j, "error")))
                die("an error answer without an \"error\" string");
            if ((status == 200 || status == 429) && json_object_get(j, "allowed") != NULL &&
                (header(h, hn, "X-RateLimit-Limit", &vlen) == NULL ||
                 header(h, hn, "X-RateLimit-Remaining", &vlen) == NULL ||
                 header(h, hn, "RateLimit", &vlen) == NULL))
                die("a decision without its rate-limit headers");
            json_decref(j);
        }
        off += (size_t)(body - a) + body_len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup_once();
        ready = 1;
    }
    setup();
    char err[256];
    struct event_base *base = event_base_new();
    int tls = 0;
    void *side = base ? sl_http_side.start(base, &svc, &cfg, &lfd, &tls, 1, err, sizeof err) : NULL;
    if (side == NULL) die("cannot start the HTTP side");

    /* Each input a connection from its own source address in 127/8:
     * tens of thousands of connections a run otherwise use up the
     * ephemeral ports of one address in TIME_WAIT ("connect" failed after
     * 43,664 inputs in a CI run). */
    static uint32_t nconn;
    uint32_t n = nconn++ % (250u << 16);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl((127u << 24) | ((1 + (n >> 16)) << 16) | (n & 0xffff));
    int one = 1;
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || setsockopt(c, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one) != 0 ||
        bind(c, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(c, (struct sockaddr *)&laddr, sizeof laddr) != 0)
        die("connect");
    fcntl(c, F_SETFL, O_NONBLOCK);
    size_t sent = 0, got = 0;
    int eof = 0;
    int64_t until = mono_ms() + MAX_WAIT_MS;
    while (!eof) {
        if (sent < size) {
            ssize_t w = send(c, data + sent, size - sent, MSG_NOSIGNAL);
            if (w > 0) sent += (size_t)w;
            if (w < 0 && errno != EAGAIN) sent = size; /* the server closed early */
            if (sent == size) shutdown(c, SHUT_WR);
        }
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
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
        }
        if (!eof && mono_ms() > until) die("the connection was not closed");
    }
    close(c);
    check_answers(got, memmem(data, size, "HEAD", 4) != NULL);
    /* what is left of the connection is freed when the loop next runs */
    for (int i = 0; i < 4; i++) event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    if (atomic_load(&srv.stats.http_clients) != 0 || atomic_load(&srv.clients) != 0)
        die("a closed connection is still counted");
    sl_http_side.stop(side);
    event_base_free(base);
    teardown();
    return 0;
}
