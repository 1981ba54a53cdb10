/*
 * test_slots_threads.c -- pipelined RESP replies go out in request order
 * when the backend answers later and out of order (net.c's reply slots).
 *
 * The real network layer runs in-process, as src/sluiced/main.c wires it
 * (config from sl_config_defaults + flags: port 0 on 127.0.0.1, 2 worker
 * threads, --trust-client-time), with tests/support/backend_delay.c over a
 * local backend: every request is decided at once, in order, and answered
 * after a random 0-3 ms, out of order.  Clients are plain TCP sockets.
 * Each pipeline's replies must equal, byte for byte, what the same
 * pipeline gets from a detached connection over a plain local backend
 * (tests/test_commands.c's way, no sockets, inline): ordering is kept and
 * the asynchronous path changes no reply.  Both load the same rules file,
 * and mixed pipelines switch protocols (HELLO 3, HELLO 2) between RL.CHECKs
 * still in flight: each reply is framed in the protocol of its request
 * (HELLO's ids, which differ between the two connections, are masked).
 *
 *   ordered_replies          one client, 2000 mixed commands in one write
 *                            (also against a second server on the plain
 *                            local backend);
 *   many_clients             4 threads, each its own connection and pipeline;
 *   client_leaves_in_flight  clients that reset or close their socket while
 *                            all their requests are held in flight: no crash
 *                            (no report under ASan/TSan), later clients served;
 *   quit_mid_pipeline        QUIT after requests still in flight: every reply
 *                            before it, then +OK, then the close; nothing
 *                            after QUIT runs;
 *   stop_waits_for_in_flight sl_net_stop with requests in flight: their
 *                            replies are still sent before the close.
 *
 * Waits are for conditions, each bounded by a deadline (DEADLINE_S); no
 * test depends on how long anything takes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
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
#include "live.h"
#include "log.h"
#include "net.h"
#include "resp_commands.h"
#include "service.h"
#include "support/backend_delay.h"
#include "support/rng.h"

#define DEADLINE_S   120.0 /* any wait: generous, for sanitizers on a loaded machine */
#define DELAY_MAX_US 3000
#define NCMDS        2000
#define NCLIENTS     4
/* Requests held in flight on one connection: fewer than stop it being read
 * (its pending slots count against SL_NET_OUT_PAUSE: about 800 of them, at
 * 80 bytes a slot). */
#define HELD_CMDS 700

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

/* ---- the rules both servers load -------------------------------------------- */

static char rules_file[] = "/tmp/sluice-test-slots-rules-XXXXXX";

static void rules_remove(void) { unlink(rules_file); }

/* The rules (a path, written once, removed at exit) loaded into a new
 * sl_live for srv. */
static void rules_load(sl_srv *srv)
{
    static const char yaml[] = "domain: api\n"
                               "descriptors:\n"
                               "  - key: user\n"
                               "    rate_limit: {unit: second, requests_per_unit: 3}\n";
    static int written; /* not the template's last letter: mkstemp's may be an X */
    if (!written) {
        written = 1;
        int fd = mkstemp(rules_file);
        if (fd < 0)
            fail_msg("mkstemp %s: %s", rules_file, strerror(errno));
        assert_int_equal(write(fd, yaml, sizeof yaml - 1), (ssize_t)(sizeof yaml - 1));
        close(fd);
        atexit(rules_remove);
    }
    char err[SL_LIVE_ERR];
    srv->live = sl_live_new(rules_file);
    assert_non_null(srv->live);
    if (sl_live_reload(srv->live, "test", err, sizeof err) != 0) fail_msg("%s", err);
}

/* ---- a server, wired as main.c wires sluiced ------------------------------ */

typedef struct server {
    sl_config cfg;
    sl_srv srv;
    sl_net *net;
    sl_backend *local;
    sl_backend *delay; /* NULL: the server decides on the local backend */
} server;

static server *server_start(int delayed, uint64_t seed)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    char err[1024];
    char *argv[] = {"sluiced",   "--port",    "0", "--bind",
                    "127.0.0.1", "--threads", "2", "--trust-client-time",
                    NULL};
    sl_config_defaults(&s->cfg);
    if (sl_config_parse_args(8, argv, &s->cfg, err, sizeof err) != 0) fail_msg("config: %s", err);
    assert_int_equal(s->cfg.port, 0);
    assert_int_equal(s->cfg.threads, 2);
    assert_int_equal(s->cfg.trust_client_time, 1);
    s->srv.cfg = &s->cfg;
    s->srv.store = sl_store_new(NULL, NULL);
    assert_non_null(s->srv.store);
    s->srv.start_ms = sl_now_ms();
    s->local = sl_backend_local_new(s->srv.store);
    assert_non_null(s->local);
    s->srv.backend = s->local;
    if (delayed) {
        s->delay = backend_delay_new(s->local, seed, DELAY_MAX_US);
        assert_non_null(s->delay);
        s->srv.backend = s->delay;
    }
    assert_int_equal(sl_stats_init(&s->srv.stats, sl_net_default_workers(&s->cfg)), 0);
    rules_load(&s->srv);
    s->net = sl_net_start(&s->srv, &sl_resp_proto, NULL, err, sizeof err);
    if (s->net == NULL) fail_msg("sl_net_start: %s", err);
    assert_int_equal(s->srv.nworkers, 2);
    assert_true(s->srv.port > 0);
    return s;
}

static void server_stop(server *s)
{
    sl_net_stop(s->net);
    sl_net_join(s->net);
    sl_net_free(s->net);
    sl_live_free(s->srv.live);
    if (s->delay != NULL) {
        assert_int_equal(backend_delay_inflight(s->delay), 0);
        sl_backend_free(s->delay);
    }
    sl_backend_free(s->local);
    sl_stats_free(&s->srv.stats);
    sl_store_free(s->srv.store);
    free(s);
}

/* Waits until the delay backend has been asked `n` requests in all. */
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

/* Waits until the workers have run `n` commands in all. */
static void wait_commands(server *s, uint64_t n)
{
    double until = mono_s() + DEADLINE_S;
    for (;;) {
        uint64_t got = 0;
        for (int i = 0; i < s->srv.stats.nworkers; i++)
            got += sl_stat_get(&s->srv.stats.workers[i].commands);
        if (got >= n) return;
        if (mono_s() > until)
            fail_msg("only %llu of %llu commands ran", (unsigned long long)got,
                     (unsigned long long)n);
        pause_ms(1);
    }
}

static void wait_idle(server *s)
{
    double until = mono_s() + DEADLINE_S;
    while (backend_delay_inflight(s->delay) > 0 || atomic_load(&s->srv.clients) > 0) {
        if (mono_s() > until)
            fail_msg("still %zu requests in flight, %d clients", backend_delay_inflight(s->delay),
                     atomic_load(&s->srv.clients));
        pause_ms(1);
    }
}

/* ---- the reference: a detached connection over a plain local backend ------ */

/* Runs in[0..len) through the RESP module on a detached connection over a
 * fresh local backend (inline); its replies go to *out.  Returns the
 * protocol status (SL_PROTO_CLOSE after QUIT). */
static int reference(const char *in, size_t len, sl_buf *out)
{
    char err[256];
    sl_config cfg;
    sl_config_defaults(&cfg);
    cfg.trust_client_time = 1;
    sl_srv srv;
    memset(&srv, 0, sizeof srv);
    srv.cfg = &cfg;
    srv.store = sl_store_new(NULL, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    assert_non_null(srv.backend);
    assert_int_equal(sl_stats_init(&srv.stats, 1), 0);
    rules_load(&srv);
    sl_svc_ctx svc;
    if (sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    sl_conn *c = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, out);
    assert_non_null(c);
    size_t used = 0;
    /* at the server's clock, as the live server: AT is checked against it */
    int st = sl_conn_detached_feed(c, in, len, sl_now_ms(), &used);
    if (st != SL_PROTO_CLOSE) assert_int_equal(used, len);
    sl_conn_detached_free(c);
    sl_svc_ctx_done(&svc);
    sl_live_free(srv.live);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    return st;
}

/* ---- pipelines ------------------------------------------------------------ */

/* rng, rnd, rnd_in: support/rng.h */

/* Appends one command, each argument a bulk string (printf-style words
 * separated by spaces; no argument holds a space). */
static void cmd(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void cmd(sl_buf *b, const char *fmt, ...)
{
    char line[512], head[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    int argc = 0;
    for (char *p = line; *p; p++)
        if (*p != ' ' && (p == line || p[-1] == ' ')) argc++;
    snprintf(head, sizeof head, "*%d\r\n", argc);
    assert_int_equal(sl_buf_adds(b, head), 0);
    char *save = NULL;
    for (char *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        snprintf(head, sizeof head, "$%zu\r\n", strlen(w));
        assert_int_equal(sl_buf_adds(b, head), 0);
        assert_int_equal(sl_buf_adds(b, w), 0);
        assert_int_equal(sl_buf_adds(b, "\r\n"), 0);
    }
}

static const char *const algos[] = {"fixed-window",    "sliding-log",  "sliding-window",
                                    "sliding-buckets", "token-bucket", "gcra",
                                    "leaky-bucket"};

/* Appends n commands on keys "<prefix>:k0".."k5" to b.  With only_async,
 * every command is one the backend answers (valid RL.ALLOW, RL.PEEK,
 * RL.RESET); otherwise PING, ECHO, unknown commands, wrong arities, bad
 * arguments, RL.CHECK, CONFIG GET and protocol switches (HELLO 3, HELLO 2)
 * are mixed in.  Returns how many of them reach the backend (counting
 * only RL.ALLOW, RL.PEEK and RL.RESET). */
static int gen(rng *r, const char *prefix, int n, int only_async, sl_buf *b)
{
    static int64_t t = 1000000000; /* AT times: mostly forward, sometimes back */
    int async = 0;
    for (int i = 0; i < n; i++) {
        int c = (int)(rnd(r) % 100);
        if (only_async && c >= 70) c = (int)(rnd(r) % 70);
        int k = (int)rnd_in(r, 0, 5);
        const char *algo = algos[rnd(r) % 7];
        int64_t limit = rnd_in(r, 1, 5), cost = rnd(r) % 4 == 0 ? rnd_in(r, 0, 3) : 1;
        const char *window = rnd(r) % 2 ? "1000" : "10s";
        t += rnd(r) % 10 == 0 ? -rnd_in(r, 1, 2000) : rnd_in(r, 0, 400);
        if (!only_async && rnd(r) % 8 == 0) { /* replies RESP3 frames its own way */
            int w = (int)(rnd(r) % 4);
            if (w == 0)
                cmd(b, "HELLO %d", rnd(r) % 2 ? 3 : 2);
            else if (w == 1)
                cmd(b, "CONFIG GET save");
            else /* a NO_RULE row: a null name, $-1 or _ */
                cmd(b, "RL.CHECK api AT %lld DESCRIPTOR user %s-u%d DESCRIPTOR team red",
                    (long long)t, prefix, k);
            continue;
        }
        if (c < 45) {
            cmd(b, "RL.ALLOW %s:k%d %lld %s ALGO %s AT %lld COST %lld", prefix, k, (long long)limit,
                window, algo, (long long)t, (long long)cost);
            async++;
        } else if (c < 60) {
            cmd(b, "rl.peek %s:k%d %lld %s ALGO %s AT %lld", prefix, k, (long long)limit, window,
                algo, (long long)t);
            async++;
        } else if (c < 70) {
            if (rnd(r) % 2)
                cmd(b, "RL.RESET %s:k%d", prefix, k);
            else
                cmd(b, "RL.RESET %s:k%d ALGO %s", prefix, k, algo);
            async++;
        } else if (c < 76) {
            if (rnd(r) % 2)
                cmd(b, "PING");
            else
                cmd(b, "PING p%d", i);
        } else if (c < 84) {
            cmd(b, "ECHO %d", i);
        } else if (c < 88) {
            cmd(b, "NOSUCH%d a b", i % 7);
        } else if (c < 92) {
            cmd(b, rnd(r) % 2 ? "ECHO" : "RL.ALLOW %s:k%d 5", prefix, k);
        } else if (c < 96) {
            cmd(b, "RL.ALLOW %s:k%d 0 10s AT %lld", prefix, k, (long long)t);
        } else {
            cmd(b, "RL.ALLOW %s:k%d 5 10s ALGO fixed-window BURST 3 AT %lld", prefix, k,
                (long long)t);
        }
    }
    return async;
}

/* ---- a client ------------------------------------------------------------- */

static int client_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* One exchange: writes in[0..inlen) (one write, then the rest as the socket
 * takes it) while reading replies, until `want` bytes have arrived, or
 * with tail until what arrived ends with tail[0..want) (the last reply:
 * HELLO's ids make the length vary), or with until_eof until the server
 * closes.  Thread-safe (no cmocka): returns 0, or -1 with why in err. */
typedef struct xchg {
    int port;
    const char *in;
    size_t inlen;
    size_t want;
    const char *tail;
    int until_eof;
    sl_buf out;
    int eof;
    char err[256];
} xchg;

static int exchange(xchg *x)
{
    int fd = client_connect(x->port);
    if (fd < 0) {
        snprintf(x->err, sizeof x->err, "connect: %s", strerror(errno));
        return -1;
    }
    size_t sent = 0;
    double until = mono_s() + DEADLINE_S;
    char buf[65536];
    int rc = 0;
    while (x->until_eof ? !x->eof
           : x->tail
               ? x->out.len < x->want || memcmp(x->out.p + x->out.len - x->want, x->tail, x->want)
               : x->out.len < x->want) {
        if (mono_s() > until) {
            snprintf(x->err, sizeof x->err, "deadline: %zu of %zu bytes sent, %zu received", sent,
                     x->inlen, x->out.len);
            rc = -1;
            break;
        }
        if (sent < x->inlen) {
            ssize_t n = send(fd, x->in + sent, x->inlen - sent, MSG_NOSIGNAL);
            if (n > 0) sent += (size_t)n;
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                snprintf(x->err, sizeof x->err, "send: %s", strerror(errno));
                rc = -1;
                break;
            }
        }
        struct pollfd p = {fd, (short)(POLLIN | (sent < x->inlen ? POLLOUT : 0)), 0};
        if (poll(&p, 1, 100) < 0 && errno != EINTR) {
            snprintf(x->err, sizeof x->err, "poll: %s", strerror(errno));
            rc = -1;
            break;
        }
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (sl_buf_add(&x->out, buf, (size_t)n) != 0) {
                snprintf(x->err, sizeof x->err, "out of memory");
                rc = -1;
                break;
            }
        } else if (n == 0) {
            x->eof = 1;
            if (!x->until_eof) {
                snprintf(x->err, sizeof x->err, "the server closed after %zu of %zu bytes",
                         x->out.len, x->want);
                rc = -1;
            }
            break;
        } else if (errno != EAGAIN && errno != EINTR) {
            snprintf(x->err, sizeof x->err, "recv: %s", strerror(errno));
            rc = -1;
            break;
        }
    }
    close(fd);
    return rc;
}

/* The first offset where a and b differ, for messages. */
static size_t diff_at(const sl_buf *a, const sl_buf *b)
{
    size_t i = 0;
    while (i < a->len && i < b->len && a->p[i] == b->p[i]) i++;
    return i;
}

/* At most 100 bytes of b from offset `from`, for messages. */
static int shown(const sl_buf *b, size_t from)
{
    size_t n = b->len > from ? b->len - from : 0;
    return (int)(n < 100 ? n : 100);
}

static void same_bytes(const sl_buf *got, const sl_buf *want, const char *who)
{
    if (got->len == want->len && memcmp(got->p, want->p, got->len) == 0) return;
    size_t at = diff_at(got, want);
    size_t from = at > 40 ? at - 40 : 0;
    fail_msg("%s: replies differ at byte %zu (got %zu bytes, want %zu):\n  got  ...%.*s\n"
             "  want ...%.*s",
             who, at, got->len, want->len, shown(got, from), got->p ? got->p + from : "",
             shown(want, from), want->p ? want->p + from : "");
}

/* Replaces the id in every HELLO reply of b by '#' (the two connections
 * compared have ids of their own). */
static void mask_ids(sl_buf *b)
{
    static const char key[] = "$2\r\nid\r\n:";
    size_t w = 0;
    for (size_t r = 0; r < b->len;) {
        if (b->len - r >= sizeof key - 1 && memcmp(b->p + r, key, sizeof key - 1) == 0) {
            memmove(b->p + w, b->p + r, sizeof key - 1);
            w += sizeof key - 1;
            r += sizeof key - 1;
            while (r < b->len && b->p[r] >= '0' && b->p[r] <= '9') r++;
            b->p[w++] = '#'; /* after the digits: w stays behind r */
        } else {
            b->p[w++] = b->p[r++];
        }
    }
    b->len = w;
}

/* The last reply of out: ECHO's "$n\r\n<text>\r\n" for the pipeline's last
 * command, ECHO text.  Its length. */
static size_t echo_reply(char *dst, size_t cap, const char *text)
{
    int n = snprintf(dst, cap, "$%zu\r\n%s\r\n", strlen(text), text);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* One pipeline over one connection, compared with the reference; an ECHO
 * after it marks the end of the replies. */
static void run_pipeline(server *s, const sl_buf *in0, const char *who)
{
    sl_buf in = {0}, want = {0};
    char tail[64];
    assert_int_equal(sl_buf_add(&in, in0->p, in0->len), 0);
    cmd(&in, "ECHO end-of-run");
    reference(in.p, in.len, &want);
    xchg x = {.port = s->srv.port,
              .in = in.p,
              .inlen = in.len,
              .want = echo_reply(tail, sizeof tail, "end-of-run"),
              .tail = tail};
    if (exchange(&x) != 0) fail_msg("%s: %s", who, x.err);
    mask_ids(&x.out);
    mask_ids(&want);
    same_bytes(&x.out, &want, who);
    free(in.p);
    free(x.out.p);
    free(want.p);
}

/* ---- the cases ------------------------------------------------------------ */

static void ordered_replies(void **state)
{
    (void)state;
    rng r = {0x6f7264ULL};
    sl_buf in = {0};
    gen(&r, "one", NCMDS, 0, &in);
    cmd(&in, "ECHO end-of-pipeline");
    sl_buf ref = {0}; /* the mix has RL.CHECKs answered in each protocol */
    reference(in.p, in.len, &ref);
    assert_non_null(memmem(ref.p, ref.len, "%7\r\n$6\r\nserver", 14));
    assert_non_null(memmem(ref.p, ref.len, "NO_RULE\r\n_\r\n", 12));
    assert_non_null(memmem(ref.p, ref.len, "NO_RULE\r\n$-1\r\n", 14));
    free(ref.p);

    server *s = server_start(1, 1);
    run_pipeline(s, &in, "delay backend");
    /* the replies above were completed out of order, yet came in order */
    uint64_t over = backend_delay_overtakes(s->delay);
    print_message("[ info     ] %zu bytes of %d commands; %llu of %llu backend answers "
                  "overtook an earlier one\n",
                  in.len, NCMDS + 1, (unsigned long long)over,
                  (unsigned long long)backend_delay_submitted(s->delay));
    assert_true(over > 0);
    wait_idle(s);
    server_stop(s);

    s = server_start(0, 0); /* the plain local backend, over sockets too */
    run_pipeline(s, &in, "local backend");
    server_stop(s);
    free(in.p);
}

static void *client_thread(void *arg)
{
    xchg *x = arg;
    if (exchange(x) != 0 && x->err[0] == '\0') snprintf(x->err, sizeof x->err, "failed");
    return NULL;
}

static void many_clients(void **state)
{
    (void)state;
    server *s = server_start(1, 2);
    sl_buf in[NCLIENTS], want[NCLIENTS];
    char tails[NCLIENTS][64];
    xchg x[NCLIENTS];
    pthread_t tid[NCLIENTS];
    memset(in, 0, sizeof in);
    memset(want, 0, sizeof want);
    memset(x, 0, sizeof x);
    for (int i = 0; i < NCLIENTS; i++) {
        rng r = {0x6d616e79ULL + (uint64_t)i};
        char prefix[16];
        snprintf(prefix, sizeof prefix, "c%d", i);
        gen(&r, prefix, NCMDS, 0, &in[i]);
        cmd(&in[i], "ECHO end-of-%s", prefix);
        reference(in[i].p, in[i].len, &want[i]);
        char end[32];
        snprintf(end, sizeof end, "end-of-%s", prefix);
        x[i] = (xchg){.port = s->srv.port,
                      .in = in[i].p,
                      .inlen = in[i].len,
                      .want = echo_reply(tails[i], sizeof tails[i], end),
                      .tail = tails[i]};
    }
    for (int i = 0; i < NCLIENTS; i++)
        assert_int_equal(pthread_create(&tid[i], NULL, client_thread, &x[i]), 0);
    for (int i = 0; i < NCLIENTS; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < NCLIENTS; i++) {
        char who[32];
        snprintf(who, sizeof who, "client %d", i);
        if (x[i].err[0]) fail_msg("%s: %s", who, x[i].err);
        mask_ids(&x[i].out);
        mask_ids(&want[i]);
        same_bytes(&x[i].out, &want[i], who);
        free(x[i].out.p);
        free(in[i].p);
        free(want[i].p);
    }
    assert_true(backend_delay_overtakes(s->delay) > 0);
    wait_idle(s);
    server_stop(s);
}

/* Sends in[] on a new connection and leaves it open; returns the fd. */
static int send_all(server *s, const sl_buf *in)
{
    int fd = client_connect(s->srv.port);
    assert_true(fd >= 0);
    size_t sent = 0;
    double until = mono_s() + DEADLINE_S;
    while (sent < in->len) {
        if (mono_s() > until) fail_msg("cannot send the pipeline");
        ssize_t n = send(fd, in->p + sent, in->len - sent, MSG_NOSIGNAL);
        if (n > 0) sent += (size_t)n;
        if (n < 0 && errno != EAGAIN && errno != EINTR) fail_msg("send: %s", strerror(errno));
        if (n <= 0) {
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, 100);
        }
    }
    return fd;
}

static void client_leaves_in_flight(void **state)
{
    (void)state;
    server *s = server_start(1, 3);
    for (int how = 0; how < 2; how++) { /* 0: reset (RST), 1: close (FIN) */
        rng r = {0x6c65617665ULL + (uint64_t)how};
        sl_buf in = {0};
        char prefix[16];
        snprintf(prefix, sizeof prefix, "gone%d", how);
        int n = gen(&r, prefix, HELD_CMDS, 1, &in);
        uint64_t base = backend_delay_submitted(s->delay);
        backend_delay_hold(s->delay);
        int fd = send_all(s, &in);
        wait_submitted(s, base + (uint64_t)n); /* every request is in flight, held */
        assert_int_equal(backend_delay_inflight(s->delay), (size_t)n);
        if (how == 0) {
            struct linger lg = {1, 0}; /* close() sends a reset */
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(fd);
        if (how == 0) { /* the server notices the reset while all is in flight */
            double until = mono_s() + DEADLINE_S;
            while (atomic_load(&s->srv.clients) > 0) {
                if (mono_s() > until) fail_msg("the server kept a reset connection");
                pause_ms(1);
            }
            assert_int_equal(backend_delay_inflight(s->delay), (size_t)n);
        }
        backend_delay_release(s->delay);
        wait_idle(s); /* every answer delivered (or discarded), the client gone */
        free(in.p);

        /* and the next client is served as usual */
        rng r2 = {0x6e657874ULL + (uint64_t)how};
        sl_buf next = {0};
        snprintf(prefix, sizeof prefix, "next%d", how);
        gen(&r2, prefix, 500, 0, &next);
        run_pipeline(s, &next, "a client after one that left");
        free(next.p);
    }
    server_stop(s);
}

static void quit_mid_pipeline(void **state)
{
    (void)state;
    server *s = server_start(1, 4);
    rng r = {0x71756974ULL};
    sl_buf in = {0};
    int n = gen(&r, "q", 600, 1, &in); /* all answered by the backend, held */
    cmd(&in, "PING before-quit");
    cmd(&in, "QUIT");
    size_t upto = in.len;
    cmd(&in, "RL.ALLOW afterquit 3 1m AT 1000"); /* never runs */
    cmd(&in, "PING after-quit");

    sl_buf want = {0};
    assert_int_equal(reference(in.p, in.len, &want), SL_PROTO_CLOSE);
    assert_true(want.len > 5 && memcmp(want.p + want.len - 5, "+OK\r\n", 5) == 0);
    sl_buf want_upto = {0};
    reference(in.p, upto, &want_upto);
    same_bytes(&want, &want_upto, "the reference (nothing after QUIT runs)");

    backend_delay_hold(s->delay);
    xchg x = {.port = s->srv.port, .in = in.p, .inlen = in.len, .until_eof = 1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, client_thread, &x), 0);
    wait_submitted(s, (uint64_t)n);
    wait_commands(s, 600 + 2); /* QUIT has run while everything before it is in flight */
    assert_int_equal(backend_delay_inflight(s->delay), (size_t)n);
    backend_delay_release(s->delay);
    pthread_join(tid, NULL);
    if (x.err[0]) fail_msg("%s", x.err);
    assert_true(x.eof);
    same_bytes(&x.out, &want, "QUIT after requests in flight");
    free(x.out.p);

    /* the RL.ALLOW after QUIT charged nothing: a fresh key's answer */
    sl_buf peek = {0}, fresh = {0};
    cmd(&peek, "RL.PEEK afterquit 3 1m AT 1000");
    reference(peek.p, peek.len, &fresh);
    run_pipeline(s, &peek, "a peek after QUIT");
    assert_memory_equal(fresh.p, "*6\r\n:1\r\n:3\r\n:2\r\n", 16);
    wait_idle(s);
    server_stop(s);
    free(in.p);
    free(want.p);
    free(want_upto.p);
    free(peek.p);
    free(fresh.p);
}

static void stop_waits_for_in_flight(void **state)
{
    (void)state;
    server *s = server_start(1, 5);
    rng r = {0x73746f70ULL};
    sl_buf in = {0}, want = {0};
    int n = gen(&r, "stop", 800, 1, &in);
    reference(in.p, in.len, &want);
    backend_delay_hold(s->delay);
    xchg x = {.port = s->srv.port, .in = in.p, .inlen = in.len, .until_eof = 1};
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, client_thread, &x), 0);
    wait_submitted(s, (uint64_t)n);
    sl_net_stop(s->net); /* returns at once: the workers wait for the answers */
    backend_delay_release(s->delay);
    pthread_join(tid, NULL);
    if (x.err[0]) fail_msg("%s", x.err);
    assert_true(x.eof);
    same_bytes(&x.out, &want, "replies in flight at sl_net_stop");
    server_stop(s); /* sl_net_stop again: idempotent */
    free(x.out.p);
    free(in.p);
    free(want.p);
}

/* A client resets with requests in flight, then the server stops: the
 * worker waits for their answers (or its stop deadline), and closing the
 * backend channel answers what is still held -- nothing leaks (ASan's leak
 * check), nothing is used after it is freed. */
static void stop_with_orphans_in_flight(void **state)
{
    (void)state;
    server *s = server_start(1, 6);
    rng r = {0x6f727068ULL};
    sl_buf in = {0};
    int n = gen(&r, "orphan", 200, 1, &in);
    backend_delay_hold(s->delay);
    int fd = send_all(s, &in);
    wait_submitted(s, (uint64_t)n);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    double until = mono_s() + DEADLINE_S;
    while (atomic_load(&s->srv.clients) > 0) {
        if (mono_s() > until) fail_msg("the server kept a reset connection");
        pause_ms(1);
    }
    assert_int_equal(backend_delay_inflight(s->delay), (size_t)n);
    sl_net_stop(s->net);
    sl_net_join(s->net);
    backend_delay_release(s->delay);
    sl_net_free(s->net); /* closes the channels: what was held is answered */
    sl_live_free(s->srv.live);
    assert_int_equal(backend_delay_inflight(s->delay), 0);
    s->net = NULL;
    sl_backend_free(s->delay);
    sl_backend_free(s->local);
    sl_stats_free(&s->srv.stats);
    sl_store_free(s->srv.store);
    free(s);
    free(in.p);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* net.h: the caller ignores SIGPIPE */
    sl_log_set_level(SL_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ordered_replies),          cmocka_unit_test(many_clients),
        cmocka_unit_test(client_leaves_in_flight),  cmocka_unit_test(quit_mid_pipeline),
        cmocka_unit_test(stop_waits_for_in_flight),
        cmocka_unit_test(stop_with_orphans_in_flight),
    };
    const char *filter = getenv("SLUICE_TEST_FILTER");
    if (filter != NULL && *filter != '\0') cmocka_set_test_filter(filter);
    return cmocka_run_group_tests_name("slots", tests, NULL, NULL);
}
