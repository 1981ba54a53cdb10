/* bench/respblast.c -- a light closed-loop RESP client for bench/server.sh's
 * PIN=1 runs (CLIENT=respblast): how many requests one core of a server
 * answers when the client is not the bottleneck.
 *
 * redis-benchmark, pinned to the machine's other core, sets the pace of
 * every server at -P 16 here (its CPU near 100 %): RL.ALLOW and INCR then
 * both measure the client.  This client does the least a pipelining
 * client can: the commands are encoded once, before the run (POOL of them,
 * each key drawn from a seeded generator over KEYS), and sent in runs of
 * PIPE per connection as the previous run's replies all came; a reply is
 * only measured for its length and whether it is an error.
 *
 *   respblast -p PORT -n REQUESTS [-c CONNS] [-P PIPE] [-r KEYS] [-S SEED]
 *             [-t SECONDS] -- ARG...
 *
 * ARG... is the command; "__rand_int__" inside an argument is replaced by
 * a key number below KEYS, 12 digits as redis-benchmark writes it.
 * Output, one line: "done N errors E seconds S rate R p50 P p99 Q" (ms, a
 * request timed from its run's send to the recv that completed it).
 * Exit 1 on an error reply, a reply that is not RESP, or when -t SECONDS
 * (default 120) pass first.  Addresses: 127.0.0.1 only. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

#define MAX_CONNS 256
#define POOL 65536 /* commands encoded before the run */
#define IN_CAP (1 << 16)

typedef struct {
    int fd;
    int pending;       /* replies still due for the run in flight */
    int64_t sent_ns;   /* when that run went */
    uint32_t next_cmd; /* index in the pool */
    char in[IN_CAP];
    size_t inlen;
} conn;

static char *pool;          /* POOL commands, back to back */
static uint32_t pool_off[POOL + 1];

/* Encodes POOL commands of argv[0..argc) into pool. */
static void build_pool(int argc, char **argv, uint64_t keys)
{
    size_t cap = 0;
    for (int i = 0; i < argc; i++) cap += strlen(argv[i]) + 32;
    cap = (cap + 16) * POOL;
    pool = malloc(cap);
    if (pool == NULL) die("out of memory");
    size_t off = 0;
    char arg[1024];
    for (uint32_t k = 0; k < POOL; k++) {
        pool_off[k] = (uint32_t)off;
        off += (size_t)sprintf(pool + off, "*%d\r\n", argc);
        unsigned long key = (unsigned long)(rng() % keys);
        for (int i = 0; i < argc; i++) {
            const char *r = strstr(argv[i], "__rand_int__");
            if (r != NULL) {
                if (strlen(argv[i]) + 16 > sizeof arg) die("argument too long");
                snprintf(arg, sizeof arg, "%.*s%012lu%s", (int)(r - argv[i]), argv[i], key, r + 12);
            } else {
                if (strlen(argv[i]) >= sizeof arg) die("argument too long");
                strcpy(arg, argv[i]);
            }
            off += (size_t)sprintf(pool + off, "$%zu\r\n%s\r\n", strlen(arg), arg);
        }
    }
    pool_off[POOL] = (uint32_t)off;
}

/* Sends c's next run of pipe commands, from the pool. */
static void send_run(conn *c, int pipe)
{
    static char buf[1 << 20];
    size_t n = 0;
    for (int i = 0; i < pipe; i++) {
        uint32_t k = c->next_cmd++ % POOL;
        size_t l = pool_off[k + 1] - pool_off[k];
        if (n + l > sizeof buf) die("a run does not fit the send buffer");
        memcpy(buf + n, pool + pool_off[k], l);
        n += l;
    }
    size_t off = 0;
    while (off < n) { /* a run is small: the socket buffer takes it */
        ssize_t w = send(c->fd, buf + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("send failed");
        off += (size_t)w;
    }
    c->pending = pipe;
    c->sent_ns = now_ns();
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int port = 0, conns = 50, pipe = 16, opt;
    long total = 0;
    uint64_t keys = 100000;
    double limit_s = 120;
    bc_name = "respblast";
    while ((opt = getopt(argc, argv, "p:n:c:P:r:S:t:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'n': total = atol(optarg); break;
        case 'c': conns = atoi(optarg); break;
        case 'P': pipe = atoi(optarg); break;
        case 'r': keys = strtoull(optarg, NULL, 10); break;
        case 'S': rng_state = strtoull(optarg, NULL, 10) | 1; break;
        case 't': limit_s = atof(optarg); break;
        default: die("usage: respblast -p PORT -n REQUESTS [-c CONNS] [-P PIPE] [-r KEYS] [-S SEED] [-t SECONDS] -- ARG...");
        }
    }
    if (port <= 0 || total <= 0 || conns < 1 || conns > MAX_CONNS || pipe < 1 || pipe > 1000 ||
        keys < 1 || limit_s <= 0 || limit_s > 600 || optind >= argc)
        die("need -p PORT, -n REQUESTS > 0, -c in 1..256, -P in 1..1000, -r >= 1, -t in (0, 600], a command");
    build_pool(argc - optind, argv + optind, keys);

    conn *cs = calloc((size_t)conns, sizeof *cs);
    int64_t *lat = malloc((size_t)total * sizeof *lat);
    int ep = epoll_create1(0);
    if (cs == NULL || lat == NULL || ep < 0) die("out of memory");
    for (int i = 0; i < conns; i++) {
        conn *c = &cs[i];
        c->fd = bc_connect(port, ep, (uint32_t)i);
        c->next_cmd = (uint32_t)i * 7919u; /* connections start at different keys */
    }

    long sent = 0, done = 0, errors = 0;
    int64_t t0 = now_ns(), deadline = t0 + (int64_t)(limit_s * 1e9);
    for (int i = 0; i < conns && sent < total; i++) {
        int p = total - sent < pipe ? (int)(total - sent) : pipe;
        send_run(&cs[i], p);
        sent += p;
    }
    while (done < total) {
        struct epoll_event evs[MAX_CONNS];
        int n = epoll_wait(ep, evs, MAX_CONNS, 1000);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int k = 0; k < n; k++) {
            conn *c = &cs[evs[k].data.u32];
            if (!bc_recv(c->fd, c->in, &c->inlen, IN_CAP)) continue;
            int64_t at = now_ns();
            size_t off = 0;
            for (;;) {
                int err = 0;
                long l = value_len(c->in + off, c->inlen - off, &err);
                if (l < 0) die("a reply that is not RESP");
                if (l == 0) break;
                if (c->pending == 0) die("a reply to no request");
                c->pending--;
                lat[done++] = at - c->sent_ns;
                errors += err;
                off += (size_t)l;
            }
            memmove(c->in, c->in + off, c->inlen - off);
            c->inlen -= off;
            if (c->pending == 0 && sent < total) {
                int p = total - sent < pipe ? (int)(total - sent) : pipe;
                send_run(c, p);
                sent += p;
            }
        }
        if (now_ns() > deadline) die("the time limit passed before every reply came");
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    qsort(lat, (size_t)done, sizeof *lat, cmp64);
    printf("done %ld errors %ld seconds %.3f rate %.0f p50 %.3f p99 %.3f\n", done, errors, secs,
           (double)done / secs, (double)lat[(size_t)(done - 1) / 2] / 1e6,
           (double)lat[(size_t)((double)(done - 1) * 0.99)] / 1e6);
    return errors ? 1 : 0;
}
