/*
 * test_http_slots.c -- HTTP answers that come after their handler
 * returned: pipelined requests answered in request order, each answer
 * whole and right, when the backend answers later and out of order (the
 * HTTP module's handlers keep nothing on their stack: net.c's reply slots).
 *
 * The real network layer runs in-process, as src/sluiced/main.c wires it
 * (config from sl_config_defaults + flags: RESP on port 0 and HTTP on any
 * port of 127.0.0.1, one worker, --trust-client-time), over
 * tests/support/backend_delay.c: every request is decided at once, in
 * order, and completed later, out of order (or held until released).
 *
 *   answers_in_request_order   one pipeline of decisions (/v1/allow,
 *                              /v1/auth/DOMAIN, POST /v1/check) mixed with
 *                              answers known at once (404, HEAD /healthz):
 *                              every answer in order, with its own values;
 *   answers_after_the_handler  with the backend held, the handlers of every
 *                              request have returned and nothing is sent
 *                              (not even /healthz, behind them); released,
 *                              all the answers come, in order;
 *   client_leaves_while_held   a client that closes while its decisions
 *                              are held: nothing breaks (ASan, TSan), the
 *                              next client is served.
 *
 * Waits are for conditions, each bounded by a deadline (DEADLINE_S).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend_local.h"
#include "buf.h"
#include "config.h"
#include "http.h"
#include "live.h"
#include "net.h"
#include "resp_commands.h"
#include "server.h"
#include "support/backend_delay.h"

#define DEADLINE_S 120.0           /* any wait: generous, for sanitizers on a loaded machine */
#define BASE_MS    1700000000000LL /* `at` of every decision: the same each run */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char rules_file[] = "/tmp/sluice-test-http-slots-XXXXXX";

static void rules_remove(void) { unlink(rules_file); }

/* Domain api: 2 requests a minute per path (what /v1/auth/api/PATH and
 * /v1/check decide). */
static void rules_load(sl_srv *srv)
{
    static const char yaml[] = "domain: api\n"
                               "descriptors:\n"
                               "  - key: path\n"
                               "    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    static int written; /* not the template's last letter: mkstemp's may be an X */
    if (!written) {
        written = 1;
        int fd = mkstemp(rules_file);
        if (fd < 0) fail_msg("mkstemp %s: %s", rules_file, strerror(errno));
        assert_int_equal(write(fd, yaml, sizeof yaml - 1), (ssize_t)(sizeof yaml - 1));
        close(fd);
        atexit(rules_remove);
    }
    char err[SL_LIVE_ERR];
    srv->live = sl_live_new(rules_file);
    assert_non_null(srv->live);
    if (sl_live_reload(srv->live, "test", err, sizeof err) != 0) fail_msg("%s", err);
}

typedef struct server {
    sl_config cfg;
    sl_srv srv;
    sl_net *net;
    sl_backend *local, *delay;
} server;

static server *server_start(uint64_t seed)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    char err[1024];
    char *argv[] = {"sluiced",   "--port",    "0", "--http-port",         "any", "--bind",
                    "127.0.0.1", "--threads", "1", "--trust-client-time", NULL};
    sl_config_defaults(&s->cfg);
    if (sl_config_parse_args(10, argv, &s->cfg, err, sizeof err) != 0) fail_msg("config: %s", err);
    s->srv.cfg = &s->cfg;
    s->srv.store = sl_store_new(NULL, NULL);
    assert_non_null(s->srv.store);
    s->srv.start_ms = sl_now_ms();
    s->local = sl_backend_local_new(s->srv.store);
    s->delay = s->local ? backend_delay_new(s->local, seed, 3000) : NULL;
    assert_non_null(s->delay);
    s->srv.backend = s->delay;
    assert_int_equal(sl_stats_init(&s->srv.stats, 1), 0);
    rules_load(&s->srv);
    s->net = sl_net_start(&s->srv, &sl_resp_proto, &sl_http_proto, err, sizeof err);
    if (s->net == NULL) fail_msg("sl_net_start: %s", err);
    assert_true(s->srv.http_port > 0);
    return s;
}

static void server_stop(server *s)
{
    sl_net_stop(s->net);
    sl_net_join(s->net);
    sl_net_free(s->net);
    sl_live_free(s->srv.live);
    assert_int_equal(backend_delay_inflight(s->delay), 0);
    sl_backend_free(s->delay);
    sl_backend_free(s->local);
    sl_stats_free(&s->srv.stats);
    sl_store_free(s->srv.store);
    free(s);
}

static void wait_submitted(server *s, uint64_t n)
{
    double until = mono_s() + DEADLINE_S;
    while (backend_delay_submitted(s->delay) < n) {
        if (mono_s() > until)
            fail_msg("only %llu of %llu requests reached the backend",
                     (unsigned long long)backend_delay_submitted(s->delay), (unsigned long long)n);
        pause_ms(1);
    }
}

static int client_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const sl_buf *b)
{
    for (size_t off = 0; off < b->len;) {
        ssize_t n = send(fd, b->p + off, b->len - off, MSG_NOSIGNAL);
        assert_true(n > 0);
        off += (size_t)n;
    }
}

/* Reads until the server closes fd (bounded by DEADLINE_S). */
static void read_to_close(int fd, sl_buf *out)
{
    double until = mono_s() + DEADLINE_S;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (mono_s() > until) fail_msg("the server did not close (%zu bytes read)", out->len);
        if (poll(&p, 1, 100) <= 0) continue;
        char tmp[65536];
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0) return;
        assert_int_equal(sl_buf_add(out, tmp, (size_t)n), 0);
    }
}

static void add(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(sl_buf *b, const char *fmt, ...)
{
    char t[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t, sizeof t, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof t);
    assert_int_equal(sl_buf_add(b, t, (size_t)n), 0);
}

/* One answer parsed out of a byte stream. */
typedef struct answer {
    int status;
    const char *head; /* from the status line to the blank line */
    size_t headlen;
    const char *body;
    size_t bodylen;
} answer;

/* The answer at *off of b (HEAD: no body); advances *off. */
static answer next_answer(const sl_buf *b, size_t *off, int head)
{
    answer a;
    const char *p = b->p + *off, *end = b->p + b->len;
    const char *blank = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
    if (blank == NULL) fail_msg("no whole answer at byte %zu", *off);
    assert_memory_equal(p, "HTTP/1.1 ", 9);
    a.status = atoi(p + 9);
    a.head = p;
    a.headlen = (size_t)(blank + 2 - p);
    const char *cl = strstr(p, "\r\nContent-Length: ");
    assert_true(cl != NULL && cl < blank);
    size_t len = strtoul(cl + 18, NULL, 10);
    a.body = blank + 4;
    a.bodylen = head ? 0 : len;
    assert_true(a.body + a.bodylen <= end);
    *off = (size_t)(a.body + a.bodylen - b->p);
    return a;
}

/* Whether answer a has header line "name: value". */
static int has(const answer *a, const char *line)
{
    char t[256];
    snprintf(t, sizeof t, "\r\n%s\r\n", line);
    return memmem(a->head, a->headlen + 2, t, strlen(t)) != NULL;
}

/* The kinds of request in a pipeline, by index. */
enum { ALLOW, NOPE, AUTH, CHECK, HEADZ, NKINDS };

static int kind_of(int i) { return i % NKINDS; }

/* Request i of a pipeline: a decision (its values tell it apart) or an
 * answer known at once. */
static void request(sl_buf *b, int i, int last)
{
    const char *conn = last ? "Connection: close\r\n" : "";
    switch (kind_of(i)) {
    case ALLOW:
        add(b, "GET /v1/allow?key=k%d&limit=%d&window=1m&at=%lld HTTP/1.1\r\nHost: x\r\n%s\r\n", i,
            1000 + i, BASE_MS, conn);
        break;
    case NOPE: add(b, "GET /nope/%d HTTP/1.1\r\nHost: x\r\n%s\r\n", i, conn); break;
    case AUTH: add(b, "GET /v1/auth/api/p%d HTTP/1.1\r\nHost: x\r\n%s\r\n", i % 4, conn); break;
    case CHECK: {
        char body[160];
        int n = snprintf(body, sizeof body,
                         "{\"domain\": \"api\", \"descriptors\": [[{\"key\": \"path\", "
                         "\"value\": \"/c%d\"}]]}",
                         i % 3);
        add(b, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s", n, conn,
            body);
        break;
    }
    default: add(b, "HEAD /healthz HTTP/1.1\r\nHost: x\r\n%s\r\n", conn); break;
    }
}

/* Checks the answers of requests 0..n-1 in out, in order.  seen[k]
 * counts earlier decisions on the same path (auth: 4 paths, check: 3),
 * each allowed twice a minute. */
static void check_answers(const sl_buf *out, int n)
{
    size_t off = 0;
    int auth_seen[4] = {0}, check_seen[3] = {0};
    for (int i = 0; i < n; i++) {
        answer a = next_answer(out, &off, kind_of(i) == HEADZ);
        char want[128];
        switch (kind_of(i)) {
        case ALLOW:
            assert_int_equal(a.status, 200);
            snprintf(want, sizeof want, "\"limit\": %d, \"remaining\": %d,", 1000 + i, 999 + i);
            if (memmem(a.body, a.bodylen, want, strlen(want)) == NULL)
                fail_msg("answer %d: %.*s does not hold %s", i, (int)a.bodylen, a.body, want);
            snprintf(want, sizeof want, "RateLimit-Policy: \"default\";q=%d;w=60", 1000 + i);
            assert_true(has(&a, want));
            break;
        case NOPE:
            assert_int_equal(a.status, 404);
            snprintf(want, sizeof want, "{\"error\": \"no such path: /nope/%d\"}\n", i);
            assert_int_equal(a.bodylen, strlen(want));
            assert_memory_equal(a.body, want, a.bodylen);
            break;
        case AUTH: {
            int k = i % 4, seen = auth_seen[k]++;
            assert_int_equal(a.status, seen < 2 ? 200 : 429);
            assert_int_equal(a.bodylen, 0);
            snprintf(want, sizeof want, "X-RateLimit-Remaining: %d", seen < 2 ? 1 - seen : 0);
            if (!has(&a, want))
                fail_msg("answer %d: no %s in %.*s", i, want, (int)a.headlen, a.head);
            break;
        }
        case CHECK: {
            int k = i % 3, seen = check_seen[k]++;
            assert_int_equal(a.status, seen < 2 ? 200 : 429);
            snprintf(want, sizeof want, "\"allowed\": %s, \"limit\": 2, \"remaining\": %d,",
                     seen < 2 ? "true" : "false", seen < 2 ? 1 - seen : 0);
            if (memmem(a.body, a.bodylen, want, strlen(want)) == NULL)
                fail_msg("answer %d: %.*s does not hold %s", i, (int)a.bodylen, a.body, want);
            break;
        }
        default:
            assert_int_equal(a.status, 200);
            assert_true(has(&a, "Content-Length: 20"));
            break;
        }
        assert_int_equal(has(&a, "Connection: close"), i == n - 1);
    }
    assert_int_equal(off, out->len); /* nothing after the last answer */
}

static void answers_in_request_order(void **state)
{
    (void)state;
    server *s = server_start(7);
    const int n = 400;
    sl_buf in = {0}, out = {0};
    for (int i = 0; i < n; i++) request(&in, i, i == n - 1);
    int fd = client_connect(s->srv.http_port);
    send_all(fd, &in);
    read_to_close(fd, &out);
    close(fd);
    check_answers(&out, n);
    /* the decisions did complete out of order: the slots put them back */
    assert_true(backend_delay_overtakes(s->delay) > 0);
    free(in.p);
    free(out.p);
    server_stop(s);
}

static void answers_after_the_handler(void **state)
{
    (void)state;
    server *s = server_start(11);
    const int n = 10; /* requests 0..8, then HEAD /healthz with Connection: close */
    sl_buf in = {0}, out = {0};
    int ndecisions = 0;
    for (int i = 0; i < n - 1; i++)
        ndecisions += kind_of(i) == ALLOW || kind_of(i) == AUTH || kind_of(i) == CHECK;
    backend_delay_hold(s->delay);
    uint64_t before = backend_delay_submitted(s->delay);
    for (int i = 0; i < n - 1; i++) request(&in, i, 0);
    add(&in, "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    int fd = client_connect(s->srv.http_port);
    send_all(fd, &in);
    /* every decision handed to the backend: each handler has returned */
    wait_submitted(s, before + (uint64_t)ndecisions);
    /* the first request's answer is held, so nothing can be sent yet */
    char c;
    assert_int_equal(recv(fd, &c, 1, MSG_DONTWAIT), -1);
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    backend_delay_release(s->delay);
    read_to_close(fd, &out);
    close(fd);
    size_t off = 0;
    for (int i = 0; i < n - 1; i++) {
        answer a = next_answer(&out, &off, kind_of(i) == HEADZ);
        int want = kind_of(i) == NOPE ? 404 : 200;
        assert_int_equal(a.status, want);
    }
    answer last = next_answer(&out, &off, 1);
    assert_int_equal(last.status, 200);
    assert_true(has(&last, "Connection: close"));
    assert_int_equal(off, out.len);
    free(in.p);
    free(out.p);
    server_stop(s);
}

static void client_leaves_while_held(void **state)
{
    (void)state;
    server *s = server_start(13);
    sl_buf in = {0}, out = {0};
    backend_delay_hold(s->delay);
    uint64_t before = backend_delay_submitted(s->delay);
    for (int i = 0; i < 50; i++) request(&in, i * NKINDS, 0); /* all /v1/allow */
    int fd = client_connect(s->srv.http_port);
    send_all(fd, &in);
    wait_submitted(s, before + 50);
    close(fd); /* gone while its 50 answers are held */
    backend_delay_release(s->delay);
    /* the next client is served: its decision comes after the 50 */
    in.len = 0;
    request(&in, 0, 1);
    fd = client_connect(s->srv.http_port);
    send_all(fd, &in);
    read_to_close(fd, &out);
    close(fd);
    size_t off = 0;
    answer a = next_answer(&out, &off, 0);
    assert_int_equal(a.status, 200);
    assert_int_equal(off, out.len);
    free(in.p);
    free(out.p);
    server_stop(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answers_in_request_order),
        cmocka_unit_test(answers_after_the_handler),
        cmocka_unit_test(client_leaves_while_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
