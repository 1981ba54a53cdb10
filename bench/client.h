/* bench/client.h -- what the load generators of bench/ share (openloop.c,
 * respblast.c, h2blast.c): stopping with a message, the monotonic clock in
 * ns, a seeded generator, and the length of one RESP reply.  Each is a
 * program of one file, built by its script with `cc -O2`; this header is
 * included once by each. */
#ifndef SL_BENCH_CLIENT_H
#define SL_BENCH_CLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

/* The program's name in its messages: set by main. */
static const char *bc_name = "bench";

/* Stops the program: exit status 1, the message on stderr. */
static _Noreturn void die(const char *m)
{
    fprintf(stderr, "%s: %s\n", bc_name, m);
    exit(1);
}

static __attribute__((unused)) int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static __attribute__((unused)) uint64_t rng(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ULL;
}

/* A connection to 127.0.0.1:port with TCP_NODELAY, added to epoll set ep
 * for input with idx as its data; stops the program when it fails. */
static __attribute__((unused)) int bc_connect(int port, int ep, uint32_t idx)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) die("cannot connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = idx};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
    return fd;
}

/* Reads what fd holds into buf[*len..cap) without waiting: 1 when bytes
 * came (*len grown), 0 when none; stops the program when the server
 * closed the connection. */
static __attribute__((unused)) int bc_recv(int fd, void *buf, size_t *len, size_t cap)
{
    ssize_t r = recv(fd, (char *)buf + *len, cap - *len, MSG_DONTWAIT);
    if (r == 0) die("the server closed a connection");
    if (r < 0) return 0;
    *len += (size_t)r;
    return 1;
}

/* Length of the one RESP value at p[0..n), 0 if incomplete, -1 if bad;
 * *err set when it is an error reply.  Enough for the replies the
 * benchmarks ask for (integers, simple strings, errors, bulk strings and
 * arrays of them). */
static __attribute__((unused)) long value_len(const char *p, size_t n, int *err)
{
    const char *e = memchr(p, '\n', n);
    if (e == NULL) return 0;
    long head = e - p + 1;
    switch (p[0]) {
    case '-': *err = 1; /* fall through */
    case '+':
    case ':': return head;
    case '$': {
        long len = atol(p + 1);
        if (len < 0) return head;
        return (size_t)(head + len + 2) <= n ? head + len + 2 : 0;
    }
    case '*': {
        long cnt = atol(p + 1), off = head;
        for (long i = 0; i < cnt; i++) {
            long l = value_len(p + off, n - (size_t)off, err);
            if (l <= 0) return l;
            off += l;
        }
        return off;
    }
    default: return -1;
    }
}

#endif
