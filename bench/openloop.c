/* bench/openloop.c -- an open-loop RESP client for latency at an equal
 * offered rate (bench/lease.sh's "open" part).
 *
 * A closed-loop client (redis-benchmark) sends the next request when the
 * last reply came: a faster path is offered more load, and a stall delays
 * the requests that would have been sent meanwhile instead of timing them
 * (coordinated omission).  Here every connection sends on a fixed
 * schedule -- request i at start + i * interval, whatever the replies do
 * -- and a request's latency runs from its scheduled time to its reply, so
 * two paths are compared at the same offered rate and a stall counts for
 * every request it held up.
 *
 *   openloop -p PORT[,PORT...] -r RATE -s SECONDS [-c CONNS] [-k HOTKEYS]
 *            [-K COLDKEYS] [-h HOTPCT] [-x PREFIX] [-S SEED]
 *
 * RATE requests/s to each port over CONNS connections (default 8) for
 * SECONDS; HOTPCT % of them (default 90) on HOTKEYS keys (default 100):
 *     RL.ALLOW PREFIXhot:N 1000000000000 1m ALGO fixed-window
 * the rest on COLDKEYS keys (default 1000000):
 *     RL.ALLOW PREFIXcold:N 100 1m ALGO fixed-window
 * Keys and the hot/cold choice come from a seeded generator (SEED).
 * Output, one line: "sent S replies R errors E hot N P50 P99 P999 MAX cold
 * N P50 P99 P999 MAX" with times in ms from the schedule.  Exit 1 if a
 * reply is missing 10 s after the last send, or a connection falls
 * OUTSTANDING_MAX requests behind (the path cannot carry the rate).
 * Addresses: 127.0.0.1 only. */
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
#define OUTSTANDING_MAX 65536 /* per connection, a power of two */
#define OUT_CAP (1 << 20)
#define IN_CAP (1 << 16)
#define SEND_SLACK_NS 100000 /* 100 us */

typedef struct {
    int fd;
    int64_t next_ns;  /* the next request's scheduled time */
    int64_t interval; /* ns between two of its requests */
    int64_t *sched;   /* ring: scheduled time of each request in flight */
    uint8_t *hot;     /* ring: 1 if it was a hot key's */
    uint32_t head, tail;
    char *out;
    size_t outlen, outoff;
    char in[IN_CAP];
    size_t inlen;
} conn;

/* Appends one RESP array of argc bulk strings to c's output. */
static void put_cmd(conn *c, int argc, const char **argv)
{
    if (c->outlen + 512 > OUT_CAP) die("output buffer full (the server does not read)");
    c->outlen += (size_t)sprintf(c->out + c->outlen, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        c->outlen += (size_t)sprintf(c->out + c->outlen, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, int64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp64);
#define Q(f) (n ? (double)v[(size_t)((double)(n - 1) * (f))] / 1e6 : -1.0)
    printf(" %s %zu %.3f %.3f %.3f %.3f", name, n, Q(0.5), Q(0.99), Q(0.999), Q(1.0));
#undef Q
}

int main(int argc, char **argv)
{
    char *ports = NULL, *prefix = "";
    double rate = 0, secs = 0;
    int conns = 8, hotpct = 90, opt;
    long hotkeys = 100, coldkeys = 1000000;
    bc_name = "openloop";
    while ((opt = getopt(argc, argv, "p:r:s:c:k:K:h:x:S:")) != -1) {
        switch (opt) {
        case 'p': ports = optarg; break;
        case 'r': rate = atof(optarg); break;
        case 's': secs = atof(optarg); break;
        case 'c': conns = atoi(optarg); break;
        case 'k': hotkeys = atol(optarg); break;
        case 'K': coldkeys = atol(optarg); break;
        case 'h': hotpct = atoi(optarg); break;
        case 'x': prefix = optarg; break;
        case 'S': rng_state = strtoull(optarg, NULL, 10) | 1; break;
        default: die("usage: openloop -p PORT[,PORT] -r RATE -s SECONDS [-c CONNS] [-k N] [-K N] [-h PCT] [-x PREFIX] [-S SEED]");
        }
    }
    if (ports == NULL || rate <= 0 || secs <= 0 || secs > 600 || conns < 1 || hotkeys < 1 ||
        coldkeys < 1 || hotpct < 0 || hotpct > 100)
        die("need -p PORTS, -r RATE > 0, -s SECONDS in (0, 600], and sane -c/-k/-K/-h");
    int port[16], np = 0;
    for (char *s = strtok(ports, ","); s != NULL && np < 16; s = strtok(NULL, ",")) port[np++] = atoi(s);
    int nc = np * conns;
    if (nc > MAX_CONNS) die("too many connections");
    conn *cs = calloc((size_t)nc, sizeof *cs);
    int ep = epoll_create1(0);
    if (cs == NULL || ep < 0) die("out of memory");
    int64_t t0 = now_ns() + 100000000; /* start in 100 ms: every socket connected */
    for (int i = 0; i < nc; i++) {
        conn *c = &cs[i];
        c->fd = bc_connect(port[i / conns], ep, (uint32_t)i);
        c->sched = malloc(OUTSTANDING_MAX * sizeof *c->sched);
        c->hot = malloc(OUTSTANDING_MAX);
        c->out = malloc(OUT_CAP);
        if (c->sched == NULL || c->hot == NULL || c->out == NULL) die("out of memory");
        c->interval = (int64_t)(1e9 * conns / rate);
        c->next_ns = t0 + c->interval * (i % conns) / conns; /* spread over the interval */
    }
    size_t cap = (size_t)(rate * secs * np) + 16, nhot = 0, ncold = 0;
    int64_t *lhot = malloc(cap * sizeof *lhot), *lcold = malloc(cap * sizeof *lcold);
    if (lhot == NULL || lcold == NULL) die("out of memory");
    int64_t t_end = t0 + (int64_t)(secs * 1e9), deadline = t_end + 10000000000LL;
    uint64_t sent = 0, replies = 0, errors = 0;
    char key[128], lim[32];
    for (;;) {
        int64_t now = now_ns(), wake = deadline;
        uint64_t inflight = 0;
        for (int i = 0; i < nc; i++) {
            conn *c = &cs[i];
            while (c->next_ns <= now + SEND_SLACK_NS / 2 && c->next_ns < t_end) {
                if (c->tail - c->head >= OUTSTANDING_MAX) {
                    fprintf(stderr, "openloop: %d requests outstanding on one connection: the path "
                                    "does not carry %.0f/s\n", OUTSTANDING_MAX, rate);
                    return 1;
                }
                int hot = (int)(rng() % 100) < hotpct;
                if (hot) {
                    snprintf(key, sizeof key, "%shot:%lu", prefix, (unsigned long)(rng() % (uint64_t)hotkeys));
                    strcpy(lim, "1000000000000");
                } else {
                    snprintf(key, sizeof key, "%scold:%lu", prefix, (unsigned long)(rng() % (uint64_t)coldkeys));
                    strcpy(lim, "100");
                }
                const char *av[] = {"RL.ALLOW", key, lim, "1m", "ALGO", "fixed-window"};
                put_cmd(c, 6, av);
                c->sched[c->tail % OUTSTANDING_MAX] = c->next_ns;
                c->hot[c->tail % OUTSTANDING_MAX] = (uint8_t)hot;
                c->tail++;
                sent++;
                c->next_ns += c->interval;
            }
            while (c->outoff < c->outlen) {
                ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_DONTWAIT);
                if (w <= 0) break;
                c->outoff += (size_t)w;
            }
            if (c->outoff == c->outlen) c->outoff = c->outlen = 0;
            if (c->next_ns < t_end && c->next_ns < wake) wake = c->next_ns;
            inflight += c->tail - c->head;
        }
        if (now >= t_end && inflight == 0) break;
        if (now >= deadline) {
            fprintf(stderr, "openloop: %llu replies missing 10 s after the last send\n",
                    (unsigned long long)inflight);
            return 1;
        }
        struct epoll_event evs[64];
        /* sends due within the next SEND_SLACK_NS go together: a wake-up
         * and a send() per request would cost this client more CPU than
         * the servers it measures (their latency still counts from the
         * schedule) */
        int64_t d = wake - now_ns();
        if (d > 0 && d < SEND_SLACK_NS) d = SEND_SLACK_NS;
        struct timespec ts = {d > 0 ? d / 1000000000 : 0, d > 0 ? d % 1000000000 : 0};
        int n = epoll_pwait2(ep, evs, 64, &ts, NULL);
        if (n < 0 && errno != EINTR) die("epoll_pwait2");
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
                if (c->head == c->tail) die("a reply to no request");
                int64_t lat = at - c->sched[c->head % OUTSTANDING_MAX];
                if (c->hot[c->head % OUTSTANDING_MAX])
                    lhot[nhot++] = lat;
                else
                    lcold[ncold++] = lat;
                c->head++;
                replies++;
                errors += (uint64_t)err;
                off += (size_t)l;
            }
            memmove(c->in, c->in + off, c->inlen - off);
            c->inlen -= off;
        }
    }
    printf("sent %llu replies %llu errors %llu", (unsigned long long)sent, (unsigned long long)replies,
           (unsigned long long)errors);
    report("hot", lhot, nhot);
    report("cold", lcold, ncold);
    printf("\n");
    return errors ? 1 : 0;
}
