/* bench/h2blast.c -- a light closed-loop gRPC client for bench/grpc.sh:
 * how many ShouldRateLimit calls one core of sluiced answers when the
 * client is not the bottleneck.
 *
 * h2load runs nghttp2's whole client per request (its HPACK, its stream
 * objects, a callback per frame) and on this machine's one client core it
 * sends ~120k requests/s: sluiced then sits a third idle, wakes for a few
 * requests at a time, and its CPU per request is the price of small
 * batches, not of gRPC.  redis-benchmark, on the RESP side, sends
 * prepared bytes.  This client does what redis-benchmark does, for
 * HTTP/2: each connection keeps STREAMS requests in flight, a request is
 * a prepared HEADERS frame and a DATA frame (END_STREAM), and an answer is
 * counted when its trailers (a HEADERS frame with END_STREAM) arrive.
 *
 * What a real client does, it does: the connection preface and SETTINGS
 * (its stream window set to 2^31-1 and the connection's raised by
 * WINDOW_UPDATE, as gRPC clients do), SETTINGS and PING acknowledged, the
 * server's connection window respected for its DATA, HPACK with the
 * dynamic table -- the first request on a connection inserts :path,
 * :authority, content-type and te, later ones name them by index, as
 * Envoy's and grpc-go's encoders do.  It does not decode the server's
 * header blocks (it need not keep their dynamic table: it never reads
 * them); each answer's DATA must be a gRPC message whose RateLimitResponse
 * starts with overall_code OK (field 1 = 1), else it stops with an error.
 *
 *   h2blast -p PORT -n REQUESTS -f BODY [-c CONNS] [-m STREAMS] [-t SECONDS]
 *
 * BODY is the request's DATA: the 5-byte gRPC prefix and the message.
 * Output, one line: "done N seconds S rate R".  Exit 1 on a GOAWAY,
 * RST_STREAM, a non-OK answer, or when -t SECONDS (default 120) pass
 * first.  Addresses: 127.0.0.1 only. */
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

#define MAX_CONNS 64
#define OUT_CAP (1 << 20)
#define IN_CAP (1 << 18)
#define PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

typedef struct {
    int fd;
    uint32_t next_id;   /* the next stream id (odd) */
    long inflight;      /* requests sent, trailers not yet seen */
    int64_t send_win;   /* the server's connection window for our DATA */
    uint64_t recv_used; /* DATA bytes received since our last WINDOW_UPDATE */
    int first_sent;     /* the indexing header block went */
    unsigned char out[OUT_CAP];
    size_t outlen, outoff;
    unsigned char in[IN_CAP];
    size_t inlen;
} conn;

static unsigned char body[4096];
static size_t body_len;
static unsigned char hb_first[256], hb_next[16]; /* header blocks */
static size_t hb_first_len, hb_next_len;

/* Appends a frame header and payload to c's output. */
static void put_frame(conn *c, int type, int flags, uint32_t id, const void *p, size_t n)
{
    if (c->outlen + 9 + n > OUT_CAP) die("output buffer full (the server does not read)");
    unsigned char *o = c->out + c->outlen;
    o[0] = (unsigned char)(n >> 16), o[1] = (unsigned char)(n >> 8), o[2] = (unsigned char)n;
    o[3] = (unsigned char)type, o[4] = (unsigned char)flags;
    o[5] = (unsigned char)(id >> 24 & 0x7f), o[6] = (unsigned char)(id >> 16);
    o[7] = (unsigned char)(id >> 8), o[8] = (unsigned char)id;
    if (n) memcpy(o + 9, p, n);
    c->outlen += 9 + n;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* HPACK string literal, not Huffman coded, short (< 127 bytes) */
static size_t hp_str(unsigned char *o, const char *s)
{
    size_t n = strlen(s);
    if (n >= 127) die("header too long");
    o[0] = (unsigned char)n;
    memcpy(o + 1, s, n);
    return n + 1;
}

static void build_header_blocks(int port)
{
    char auth[32];
    snprintf(auth, sizeof auth, "127.0.0.1:%d", port);
    unsigned char *o = hb_first;
    size_t n = 0;
    o[n++] = 0x83; /* :method POST (static 3) */
    o[n++] = 0x86; /* :scheme http (static 6) */
    o[n++] = 0x44; /* :path, literal with indexing, name static 4 */
    n += hp_str(o + n, PATH);
    o[n++] = 0x41; /* :authority, name static 1 */
    n += hp_str(o + n, auth);
    o[n++] = 0x5f; /* content-type, name static 31 */
    n += hp_str(o + n, "application/grpc");
    o[n++] = 0x40; /* te, a new name */
    n += hp_str(o + n, "te");
    n += hp_str(o + n, "trailers");
    hb_first_len = n;
    /* the dynamic table now holds, newest first: te 62, content-type 63,
     * :authority 64, :path 65 */
    const unsigned char next[] = {0x83, 0x86, 0x80 | 65, 0x80 | 64, 0x80 | 63, 0x80 | 62};
    memcpy(hb_next, next, sizeof next);
    hb_next_len = sizeof next;
}

static void send_request(conn *c)
{
    uint32_t id = c->next_id;
    c->next_id += 2;
    if (c->next_id > 0x7ffffff0u) die("stream ids ran out on a connection");
    if (!c->first_sent) {
        put_frame(c, 1, 0x4, id, hb_first, hb_first_len); /* HEADERS, END_HEADERS */
        c->first_sent = 1;
    } else {
        put_frame(c, 1, 0x4, id, hb_next, hb_next_len);
    }
    put_frame(c, 0, 0x1, id, body, body_len); /* DATA, END_STREAM */
    c->send_win -= (int64_t)body_len;
    c->inflight++;
}

static void flush(conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno != EAGAIN && errno != EINTR) die("send failed");
            break;
        }
        c->outoff += (size_t)w;
    }
    if (c->outoff == c->outlen) c->outoff = c->outlen = 0;
}

/* Takes the whole frames in c->in; returns the answers completed. */
static long take_frames(conn *c)
{
    long done = 0;
    size_t off = 0;
    while (c->inlen - off >= 9) {
        const unsigned char *f = c->in + off;
        size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        int type = f[3], flags = f[4];
        uint32_t id = ((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]) & 0x7fffffffu;
        if (len + 9 > IN_CAP) die("a frame larger than the input buffer");
        if (c->inlen - off < 9 + len) break;
        const unsigned char *p = f + 9;
        switch (type) {
        case 0: /* DATA: one gRPC message, overall_code OK */
            c->recv_used += len;
            if (len > 0 && (len < 7 || p[0] != 0 || p[5] != 0x08 || p[6] != 0x01))
                die("an answer that is not overall_code OK");
            break;
        case 1: /* HEADERS: the trailers end the stream */
            if (!(flags & 0x4)) die("a header block in CONTINUATION frames (not expected here)");
            if (flags & 0x1) {
                c->inflight--;
                done++;
            }
            break;
        case 3: die("RST_STREAM from the server");
        case 4: /* SETTINGS */
            if (!(flags & 0x1)) put_frame(c, 4, 0x1, 0, NULL, 0);
            break;
        case 6: /* PING */
            if (!(flags & 0x1)) put_frame(c, 6, 0x1, 0, p, len);
            break;
        case 7: die("GOAWAY from the server");
        case 8: /* WINDOW_UPDATE: only the connection's matters here */
            if (len == 4 && id == 0)
                c->send_win += (int64_t)(((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                                          (uint32_t)p[2] << 8 | p[3]) & 0x7fffffffu);
            break;
        default: break;
        }
        off += 9 + len;
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    if (c->recv_used > (1u << 30)) { /* give the server its connection window back */
        unsigned char w[4];
        put_u32(w, (uint32_t)c->recv_used);
        put_frame(c, 8, 0, 0, w, 4);
        c->recv_used = 0;
    }
    return done;
}

int main(int argc, char **argv)
{
    int port = 0, conns = 4, streams = 50, opt;
    long total = 0;
    double limit_s = 120;
    const char *bodyfile = NULL;
    bc_name = "h2blast";
    while ((opt = getopt(argc, argv, "p:n:f:c:m:t:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'n': total = atol(optarg); break;
        case 'f': bodyfile = optarg; break;
        case 'c': conns = atoi(optarg); break;
        case 'm': streams = atoi(optarg); break;
        case 't': limit_s = atof(optarg); break;
        default: die("usage: h2blast -p PORT -n REQUESTS -f BODY [-c CONNS] [-m STREAMS] [-t SECONDS]");
        }
    }
    if (port <= 0 || total <= 0 || bodyfile == NULL || conns < 1 || conns > MAX_CONNS ||
        streams < 1 || streams > 100 || limit_s <= 0 || limit_s > 600)
        die("need -p PORT, -n REQUESTS > 0, -f BODY, -c in 1..64, -m in 1..100, -t in (0, 600]");
    FILE *bf = fopen(bodyfile, "rb");
    if (bf == NULL) die("cannot open the body file");
    body_len = fread(body, 1, sizeof body, bf);
    fclose(bf);
    if (body_len < 5) die("the body file holds no gRPC message");
    build_header_blocks(port);

    conn *cs = calloc((size_t)conns, sizeof *cs);
    int ep = epoll_create1(0);
    if (cs == NULL || ep < 0) die("out of memory");
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    for (int i = 0; i < conns; i++) {
        conn *c = &cs[i];
        c->fd = bc_connect(port, ep, (uint32_t)i);
        c->next_id = 1;
        c->send_win = 65535;
        memcpy(c->out, preface, sizeof preface - 1);
        c->outlen = sizeof preface - 1;
        unsigned char s[6] = {0, 4}; /* SETTINGS_INITIAL_WINDOW_SIZE */
        put_u32(s + 2, 0x7fffffffu);
        put_frame(c, 4, 0, 0, s, sizeof s);
        unsigned char w[4];
        put_u32(w, 0x7fffffffu - 65535);
        put_frame(c, 8, 0, 0, w, 4);
    }

    long sent = 0, done = 0;
    int64_t t0 = now_ns(), deadline = t0 + (int64_t)(limit_s * 1e9);
    while (done < total) {
        for (int i = 0; i < conns; i++) {
            conn *c = &cs[i];
            while (c->inflight < streams && sent < total && c->send_win >= (int64_t)body_len) {
                send_request(c);
                sent++;
            }
            flush(c);
        }
        struct epoll_event evs[MAX_CONNS];
        int n = epoll_wait(ep, evs, MAX_CONNS, 1000);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int k = 0; k < n; k++) {
            conn *c = &cs[evs[k].data.u32];
            if (!bc_recv(c->fd, c->in, &c->inlen, IN_CAP)) continue;
            done += take_frames(c);
        }
        if (now_ns() > deadline) die("the time limit passed before every answer came");
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    printf("done %ld seconds %.3f rate %.0f\n", done, secs, (double)done / secs);
    return 0;
}
