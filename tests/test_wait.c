/*
 * test_wait.c -- the waiting room (src/server/wait.c) in-process, on the
 * real network layer with 2 worker threads, over tests/support/
 * backend_delay.c: every decision answers later, out of order, as Redis
 * would -- the path where a head's question is in flight while others
 * arrive, leave or time out.  Clients are plain TCP sockets; the server's
 * clock is read in this process (sl_now_ms), so arrival times are known.
 *
 *   fifo_across_workers   NWAITERS clients (spread over both workers) wait
 *                         on one key of one unit per WINDOW_MS: each is
 *                         allowed, and each is served after the one that
 *                         arrived before it (on the server's clock);
 *   leave_in_flight       clients that close while their head's question
 *                         is held in flight, and while queued behind it:
 *                         no crash, no report (ASan, TSan), every waiter
 *                         accounted (dropped), the room empty, and a later
 *                         waiter served;
 *   stop_answers_waiters  sl_net_stop with waiters of long timeouts: each
 *                         gets its denial before its connection closes;
 *   bounds                one more than --max-waiters-per-key: the error.
 *
 * Waits are for conditions, each bounded (DEADLINE_S); the only time
 * assertion is an order of two instants of the server's own clock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend_local.h"
#include "config.h"
#include "log.h"
#include "net.h"
#include "resp_commands.h"
#include "service.h"
#include "support/backend_delay.h"
#include "wait.h"

#define DEADLINE_S 120.0 /* any wait: generous, for sanitizers on a loaded machine */
#define NWAITERS   8
#define WINDOW_MS  60

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a server, wired as main.c wires sluiced ------------------------------ */

typedef struct server {
    sl_config cfg;
    sl_srv srv;
    sl_net *net;
    sl_backend *local, *delay;
} server;

static server *server_start(void)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    char err[1024];
    char *argv[] = {"sluiced",   "--port",    "0", "--bind", "127.0.0.1", "--threads",
                    "2",         "--max-waiters-per-key", "12", NULL};
    sl_config_defaults(&s->cfg);
    if (sl_config_parse_args(9, argv, &s->cfg, err, sizeof err) != 0) fail_msg("config: %s", err);
    s->srv.cfg = &s->cfg;
    s->srv.store = sl_store_new(NULL, NULL);
    assert_non_null(s->srv.store);
    s->srv.start_ms = sl_now_ms();
    s->local = sl_backend_local_new(s->srv.store);
    assert_non_null(s->local);
    s->delay = backend_delay_new(s->local, 42, 2000);
    assert_non_null(s->delay);
    s->srv.backend = s->delay;
    assert_int_equal(sl_stats_init(&s->srv.stats, 2), 0);
    s->net = sl_net_start(&s->srv, &sl_resp_proto, NULL, err, sizeof err);
    if (s->net == NULL) fail_msg("sl_net_start: %s", err);
    assert_non_null(s->srv.wait);
    return s;
}

static void server_stop(server *s)
{
    sl_net_stop(s->net);
    sl_net_join(s->net);
    sl_net_free(s->net);
    assert_null(s->srv.wait);
    assert_int_equal(backend_delay_inflight(s->delay), 0);
    sl_backend_free(s->delay);
    sl_backend_free(s->local);
    sl_stats_free(&s->srv.stats);
    sl_store_free(s->srv.store);
    free(s);
}

static sl_wait_stats room(server *s)
{
    sl_wait_stats st;
    sl_wait_stats_get(s->srv.wait, &st);
    return st;
}

/* Waits until pred(room) holds. */
#define WAIT_FOR(s, cond, what)                                                                    \
    do {                                                                                           \
        double until_ = mono_s() + DEADLINE_S;                                                     \
        for (;;) {                                                                                 \
            sl_wait_stats st = room(s);                                                            \
            if (cond) break;                                                                       \
            if (mono_s() > until_)                                                                 \
                fail_msg("%s: waiting %lld served %llu dropped %llu", what,                        \
                         (long long)st.waiting, (unsigned long long)st.served,                     \
                         (unsigned long long)st.dropped);                                          \
            pause_ms(1);                                                                           \
        }                                                                                          \
    } while (0)

/* ---- clients ---------------------------------------------------------------- */

static int client_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_cmd(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sends one command (words separated by single spaces) as RESP. */
static void send_cmd(int fd, const char *fmt, ...)
{
    char line[256], out[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *words[32];
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(line, " ", &save); w && n < 32; w = strtok_r(NULL, " ", &save))
        words[n++] = w;
    size_t len = (size_t)snprintf(out, sizeof out, "*%d\r\n", n);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(out + len, sizeof out - len, "$%zu\r\n%s\r\n", strlen(words[i]),
                                words[i]);
    assert_int_equal(send(fd, out, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads until what arrived holds a whole six-field reply ("*6" and six
 * integer lines) or an error line; returns it NUL-ended in buf ("" at EOF). */
static void read_reply(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    double until = mono_s() + DEADLINE_S;
    for (;;) {
        buf[len] = '\0';
        int lines = 0;
        for (const char *p = buf; (p = strstr(p, "\r\n")) != NULL; p += 2) lines++;
        if ((len > 0 && buf[0] == '-' && lines >= 1) || lines >= 7) return;
        if (mono_s() > until) fail_msg("no whole reply: '%s'", buf);
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n <= 0) {
            buf[len] = '\0';
            return;
        }
        len += (size_t)n;
    }
}

/* The six integers of a reply "*6\r\n:a\r\n..." into f. */
static void fields(const char *reply, long long f[6])
{
    const char *p = reply;
    assert_memory_equal(p, "*6\r\n", 4);
    p += 4;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(*p, ':');
        f[i] = strtoll(p + 1, (char **)&p, 10);
        p += 2;
    }
}

/* ---- the cases ---------------------------------------------------------------- */

static void fifo_across_workers(void **state)
{
    (void)state;
    server *s = server_start();
    int fd[NWAITERS];
    int64_t before[NWAITERS], after[NWAITERS];
    int ctl = client_connect(s->srv.port);
    char buf[512];
    send_cmd(ctl, "RL.ALLOW fifo 1 %d", WINDOW_MS); /* the unit is taken: all must wait */
    read_reply(ctl, buf, sizeof buf);
    for (int i = 0; i < NWAITERS; i++) {
        fd[i] = client_connect(s->srv.port); /* the acceptor spreads them over both workers */
        before[i] = sl_now_ms();
        send_cmd(fd[i], "RL.WAIT fifo 1 %d TIMEOUT 60000", WINDOW_MS);
        WAIT_FOR(s, (uint64_t)st.waiting + st.served >= (uint64_t)i + 1, "arrival");
        after[i] = sl_now_ms();
    }
    int64_t prev_hi = INT64_MIN;
    for (int i = 0; i < NWAITERS; i++) {
        long long f[6];
        read_reply(fd[i], buf, sizeof buf);
        fields(buf, f);
        assert_int_equal(f[0], 1); /* allowed, limit 1, remaining 0, retry 0 */
        assert_int_equal(f[1], 1);
        assert_int_equal(f[2], 0);
        assert_int_equal(f[3], 0);
        /* served at arrival + delay: in [before + delay, after + delay] */
        int64_t lo = before[i] + f[5], hi = after[i] + f[5];
        if (lo <= prev_hi)
            fail_msg("waiter %d may have been served before waiter %d (%lld <= %lld)", i, i - 1,
                     (long long)lo, (long long)prev_hi);
        prev_hi = hi;
        close(fd[i]);
    }
    assert_int_equal(room(s).waiting, 0);
    assert_int_equal(room(s).served, NWAITERS);
    close(ctl);
    server_stop(s);
}

static void leave_in_flight(void **state)
{
    (void)state;
    server *s = server_start();
    char buf[512];
    int ctl = client_connect(s->srv.port);
    send_cmd(ctl, "RL.ALLOW gone 1 1h");
    read_reply(ctl, buf, sizeof buf);
    backend_delay_hold(s->delay); /* the head's question stays in flight */
    int a = client_connect(s->srv.port), b = client_connect(s->srv.port),
        c = client_connect(s->srv.port);
    send_cmd(a, "RL.WAIT gone 1 1h TIMEOUT 60000");
    WAIT_FOR(s, st.waiting == 1, "the head");
    send_cmd(b, "RL.WAIT gone 1 1h TIMEOUT 60000");
    send_cmd(c, "RL.WAIT gone 1 1h TIMEOUT 60000");
    WAIT_FOR(s, st.waiting == 3, "two behind it");
    close(b); /* queued: leaves at once */
    close(a); /* its question in flight: answered into nothing */
    WAIT_FOR(s, st.dropped == 1 && st.waiting == 2, "b dropped");
    backend_delay_release(s->delay);
    WAIT_FOR(s, st.dropped == 2 && st.waiting == 1, "a dropped once answered");
    /* c is the head now, asking every retry_after: it times out only at
     * its deadline; send one that waits 0 behind it and close c */
    close(c);
    WAIT_FOR(s, st.waiting == 0 && st.dropped == 3, "c dropped");
    int d = client_connect(s->srv.port);
    send_cmd(d, "RL.WAIT other 1 1h TIMEOUT 0");
    read_reply(d, buf, sizeof buf);
    long long f[6];
    fields(buf, f);
    assert_int_equal(f[0], 1); /* the room still serves */
    close(d);
    close(ctl);
    server_stop(s);
}

static void stop_answers_waiters(void **state)
{
    (void)state;
    server *s = server_start();
    char buf[512];
    int fd[4];
    int ctl = client_connect(s->srv.port);
    send_cmd(ctl, "RL.ALLOW stop 1 1h");
    read_reply(ctl, buf, sizeof buf);
    for (int i = 0; i < 4; i++) {
        fd[i] = client_connect(s->srv.port);
        send_cmd(fd[i], "RL.WAIT stop 1 1h TIMEOUT 60000");
        WAIT_FOR(s, st.waiting == i + 1, "arrival");
    }
    sl_net_stop(s->net); /* each waiter answered now, as at its deadline */
    for (int i = 0; i < 4; i++) {
        long long f[6];
        read_reply(fd[i], buf, sizeof buf);
        fields(buf, f);
        assert_int_equal(f[0], 0);
        assert_int_equal(f[2], 0);
        assert_true(f[3] >= 1);
        close(fd[i]);
    }
    close(ctl);
    sl_net_join(s->net);
    sl_net_free(s->net);
    s->net = NULL;
    assert_int_equal(backend_delay_inflight(s->delay), 0);
    sl_backend_free(s->delay);
    sl_backend_free(s->local);
    sl_stats_free(&s->srv.stats);
    sl_store_free(s->srv.store);
    free(s);
}

static void bounds(void **state)
{
    (void)state;
    server *s = server_start();
    char buf[512];
    int ctl = client_connect(s->srv.port);
    send_cmd(ctl, "RL.ALLOW full 1 1h");
    read_reply(ctl, buf, sizeof buf);
    int fd[13];
    for (int i = 0; i < 12; i++) {
        fd[i] = client_connect(s->srv.port);
        send_cmd(fd[i], "RL.WAIT full 1 1h TIMEOUT 60000");
    }
    WAIT_FOR(s, st.waiting == 12, "twelve in line");
    fd[12] = client_connect(s->srv.port);
    send_cmd(fd[12], "RL.WAIT full 1 1h TIMEOUT 60000");
    read_reply(fd[12], buf, sizeof buf);
    assert_string_equal(buf, "-ERR too many waiters on this key: at most 12 wait in one line "
                             "(max-waiters-per-key); retry later\r\n");
    assert_int_equal(room(s).refused, 1);
    for (int i = 0; i < 13; i++) close(fd[i]);
    WAIT_FOR(s, st.waiting == 0, "all dropped");
    close(ctl);
    server_stop(s);
}

static void parse_timeout(void **state)
{
    (void)state;
    char err[256];
    int64_t v = -1;
    assert_int_equal(sl_wait_parse_timeout("0", 1, 1000, &v, err, sizeof err), 0);
    assert_int_equal(v, 0);
    assert_int_equal(sl_wait_parse_timeout("2s", 2, 5000, &v, err, sizeof err), 0);
    assert_int_equal(v, 2000);
    assert_int_equal(sl_wait_parse_timeout("2s", 2, 1999, &v, err, sizeof err), -1);
    assert_string_equal(err, "TIMEOUT 2000 ms is above the server's max-wait (1999 ms)");
    assert_int_equal(sl_wait_parse_timeout("-1", 2, 1999, &v, err, sizeof err), -1);
    assert_string_equal(err,
                        "invalid TIMEOUT: expected milliseconds (or a duration: 500ms, 2s), got '-1'");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* net.h: the caller ignores SIGPIPE */
    sl_log_set_level(SL_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_timeout),        cmocka_unit_test(fifo_across_workers),
        cmocka_unit_test(leave_in_flight),      cmocka_unit_test(stop_answers_waiters),
        cmocka_unit_test(bounds),
    };
    const char *filter = getenv("SLUICE_TEST_FILTER");
    if (filter != NULL && *filter != '\0') cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("wait", tests, NULL, NULL);
}
