/*
 * test_h2.c -- sluiced's HTTP/2 server side (src/proto/grpc/h2.c) against
 * nghttp2's client session, the independent peer (many streams, windows
 * smaller than the answers, a client without a dynamic table, PING), and
 * against raw frames for each error RFC 9113 names: the GOAWAY or
 * RST_STREAM code a client sees.  No socket: bytes are handed across.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>

#include "h2.h"

/* ---- the server under test: answers each request when it ends ---------- */

typedef struct req {
    char path[64];
    uint8_t *body; /* what the request sent (malloc'd) */
    size_t blen;
} req;

typedef struct server {
    sl_h2 *h;
    int begun, ended, closed;
    int defer;          /* 1: do not answer at the end */
    size_t answer_size; /* bytes of each answer's body: the request's own if 0 */
    uint32_t last_end;  /* the stream that ended last */
} server;

static const uint8_t HDR[] = "\x88\x0f\x10\x10"
                             "application/grpc"; /* :status 200, content-type */
static const uint8_t TRAILER[] = "\x00\x0bgrpc-status\x01"
                                 "0";

static int s_begin(void *arg, sl_h2_stream *s)
{
    server *sv = arg;
    memset(sl_h2_user(s), 0, sizeof(req));
    sv->begun++;
    return 0;
}

static int s_field(void *arg, sl_h2_stream *s, const uint8_t *name, size_t nlen,
                   const uint8_t *value, size_t vlen)
{
    (void)arg;
    req *r = sl_h2_user(s);
    if (nlen == 5 && memcmp(name, ":path", 5) == 0 && vlen < sizeof r->path)
        memcpy(r->path, value, vlen);
    return 0;
}

static int s_data(void *arg, sl_h2_stream *s, const uint8_t *p, size_t n)
{
    (void)arg;
    req *r = sl_h2_user(s);
    r->body = realloc(r->body, r->blen + n);
    assert_non_null(r->body);
    memcpy(r->body + r->blen, p, n);
    r->blen += n;
    return 0;
}

static void s_end(void *arg, sl_h2_stream *s)
{
    server *sv = arg;
    req *r = sl_h2_user(s);
    sv->ended++;
    sv->last_end = sl_h2_id(s);
    if (sv->defer) return;
    if (sv->answer_size) {
        uint8_t *b = malloc(sv->answer_size);
        assert_non_null(b);
        for (size_t i = 0; i < sv->answer_size; i++) b[i] = (uint8_t)(i * 7);
        assert_int_equal(sl_h2_respond(sv->h, s, HDR, sizeof HDR - 1, b, sv->answer_size, TRAILER,
                                       sizeof TRAILER - 1),
                         0);
        free(b);
    } else {
        assert_int_equal(sl_h2_respond(sv->h, s, HDR, sizeof HDR - 1, r->body, r->blen, TRAILER,
                                       sizeof TRAILER - 1),
                         0);
    }
}

static void s_closed(void *arg, sl_h2_stream *s)
{
    server *sv = arg;
    req *r = sl_h2_user(s);
    free(r->body);
    r->body = NULL;
    sv->closed++;
}

static const sl_h2_cbs scbs = {s_begin, s_field, s_data, s_end, s_closed};

/* ---- nghttp2's client ---------------------------------------------------------- */

#define MAXS 400

typedef struct client {
    nghttp2_session *s;
    int status[MAXS]; /* :status per stream / 2 */
    int grpc_status[MAXS];
    uint8_t *body[MAXS];
    size_t blen[MAXS];
    int closed[MAXS];
    uint32_t close_code[MAXS];
    int ping_acks, settings_acks, goaways;
    uint32_t goaway_last;
} client;

static int c_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    (void)s, (void)flags;
    client *c = arg;
    int i = f->hd.stream_id / 2;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) c->status[i] = atoi((const char *)value);
    if (nlen == 11 && memcmp(name, "grpc-status", 11) == 0)
        c->grpc_status[i] = (int)(vlen == 1 ? value[0] - '0' : -1);
    return 0;
}

static int c_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n,
                  void *arg)
{
    (void)s, (void)flags;
    client *c = arg;
    int i = id / 2;
    c->body[i] = realloc(c->body[i], c->blen[i] + n);
    memcpy(c->body[i] + c->blen[i], d, n);
    c->blen[i] += n;
    return 0;
}

static int c_close(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
    (void)s;
    client *c = arg;
    c->closed[id / 2] = 1;
    c->close_code[id / 2] = code;
    return 0;
}

static int c_frame(nghttp2_session *s, const nghttp2_frame *f, void *arg)
{
    (void)s;
    client *c = arg;
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) c->ping_acks++;
    if (f->hd.type == NGHTTP2_SETTINGS && (f->hd.flags & NGHTTP2_FLAG_ACK)) c->settings_acks++;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        c->goaways++;
        c->goaway_last = (uint32_t)f->goaway.last_stream_id;
    }
    return 0;
}

typedef struct src {
    const uint8_t *p;
    size_t len, off;
} src;

static ssize_t c_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                      nghttp2_data_source *ds, void *arg)
{
    (void)s, (void)id, (void)arg;
    src *b = ds->ptr;
    size_t n = b->len - b->off < len ? b->len - b->off : len;
    memcpy(buf, b->p + b->off, n);
    b->off += n;
    if (b->off == b->len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void client_new(client *c, const nghttp2_settings_entry *iv, size_t niv)
{
    memset(c, 0, sizeof *c);
    nghttp2_session_callbacks *cb;
    assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
    nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, c_frame);
    assert_int_equal(nghttp2_session_client_new(&c->s, cb, c), 0);
    nghttp2_session_callbacks_del(cb);
    assert_int_equal(nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, niv), 0);
}

static void client_free(client *c)
{
    nghttp2_session_del(c->s);
    for (int i = 0; i < MAXS; i++) free(c->body[i]);
}

static int32_t call(client *c, const char *path, src *body)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)":authority", (uint8_t *)"sluice", 10, 6, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    nghttp2_data_provider dp = {.source.ptr = body, .read_callback = c_read};
    int32_t id = nghttp2_submit_request(c->s, NULL, nv, 5, body ? &dp : NULL, NULL);
    assert_true(id > 0);
    return id;
}

/* Moves bytes both ways until neither side has any; the server's input
 * is taken a frame at a time, as grpc.c does.  Returns 0, or -1 once the
 * server ended the connection. */
static int pump(client *c, server *sv)
{
    static uint8_t *in;
    static size_t inlen, incap;
    for (int round = 0; round < 100000; round++) {
        int moved = 0;
        const uint8_t *d;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c->s, &d)) > 0) {
            if (inlen + (size_t)n > incap) {
                incap = (inlen + (size_t)n) * 2;
                in = realloc(in, incap);
                assert_non_null(in);
            }
            memcpy(in + inlen, d, (size_t)n);
            inlen += (size_t)n;
            moved = 1;
        }
        size_t pos = 0;
        int dead = 0;
        while (pos < inlen) {
            ssize_t r = sl_h2_recv(sv->h, in + pos, inlen - pos);
            if (r < 0) {
                dead = 1;
                pos = inlen;
                break;
            }
            if (r == 0) break;
            pos += (size_t)r;
        }
        memmove(in, in + pos, inlen - pos);
        inlen -= pos;
        size_t olen;
        const uint8_t *o = sl_h2_out(sv->h, &olen);
        if (olen > 0) {
            assert_int_equal(nghttp2_session_mem_recv(c->s, o, olen), (ssize_t)olen);
            sl_h2_out_taken(sv->h);
            moved = 1;
        }
        if (dead) {
            inlen = 0;
            return -1;
        }
        if (!moved) return 0;
    }
    fail_msg("the peers never settled");
    return -1;
}

static void server_new(server *sv)
{
    memset(sv, 0, sizeof *sv);
    sv->h = sl_h2_new(&scbs, sv, sizeof(req));
    assert_non_null(sv->h);
}

/* 300 calls at once on one connection: 100 streams at a time (our
 * SETTINGS), each echoed with its trailers; the client keeps no dynamic
 * table (HEADER_TABLE_SIZE 0: our blocks start with a size update). */
static void many_calls_one_connection(void **state)
{
    (void)state;
    server sv;
    client c;
    server_new(&sv);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0}};
    client_new(&c, iv, 1);
    static uint8_t bodies[300][16];
    src srcs[300];
    int32_t ids[300];
    for (int i = 0; i < 300; i++) {
        snprintf((char *)bodies[i], sizeof bodies[i], "call%03d", i);
        srcs[i] = (src){bodies[i], 7, 0};
        ids[i] = call(&c, "/a.B/C", &srcs[i]);
    }
    assert_int_equal(pump(&c, &sv), 0);
    for (int i = 0; i < 300; i++) {
        int k = ids[i] / 2;
        assert_int_equal(c.status[k], 200);
        assert_int_equal(c.grpc_status[k], 0);
        assert_int_equal(c.blen[k], 7);
        assert_memory_equal(c.body[k], bodies[i], 7);
        assert_true(c.closed[k]);
        assert_int_equal(c.close_code[k], 0);
    }
    assert_int_equal(sv.begun, 300);
    assert_int_equal(sv.closed, 300);
    assert_int_equal(c.settings_acks, 1);
    /* PING is answered with its payload */
    assert_int_equal(nghttp2_submit_ping(c.s, NGHTTP2_FLAG_NONE, (const uint8_t *)"12345678"), 0);
    assert_int_equal(pump(&c, &sv), 0);
    assert_int_equal(c.ping_acks, 1);
    /* GOAWAY names the last stream */
    assert_int_equal(sl_h2_goaway(sv.h, SL_H2_NO_ERROR, NULL), 0);
    assert_int_equal(pump(&c, &sv), 0);
    assert_int_equal(c.goaways, 1);
    assert_int_equal(c.goaway_last, (uint32_t)ids[299]);
    assert_true(sl_h2_done(sv.h));
    sl_h2_free(sv.h);
    client_free(&c);
}

/* Windows smaller than what goes through them: the client's stream window
 * of 100 bytes and 70,000-byte answers (ours wait for its WINDOW_UPDATEs),
 * and 200,000-byte requests (the client waits for ours). */
static void flow_control_both_ways(void **state)
{
    (void)state;
    server sv;
    client c;
    server_new(&sv);
    sv.answer_size = 70000;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 100},
                                   {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 20000}};
    client_new(&c, iv, 2);
    static uint8_t big[200000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13);
    src srcs[3];
    int32_t ids[3];
    for (int i = 0; i < 3; i++) {
        srcs[i] = (src){big, sizeof big, 0};
        ids[i] = call(&c, "/a.B/C", &srcs[i]);
    }
    assert_int_equal(pump(&c, &sv), 0);
    for (int i = 0; i < 3; i++) {
        int k = ids[i] / 2;
        assert_int_equal(c.status[k], 200);
        assert_int_equal(c.grpc_status[k], 0);
        assert_int_equal(c.blen[k], 70000);
        for (size_t j = 0; j < 70000; j++)
            if (c.body[k][j] != (uint8_t)(j * 7)) fail_msg("answer byte %zu differs", j);
        assert_true(c.closed[k]);
    }
    assert_int_equal(sv.ended, 3);
    assert_int_equal(sv.closed, 3);
    sl_h2_free(sv.h);
    client_free(&c);
}

/* ---- raw frames ---------------------------------------------------------------------- */

typedef struct rframe {
    uint8_t type, flags;
    uint32_t id;
    const uint8_t *p;
    size_t len;
} rframe;

static size_t put_frame(uint8_t *o, uint8_t type, uint8_t flags, uint32_t id, const void *p,
                        size_t len)
{
    o[0] = (uint8_t)(len >> 16), o[1] = (uint8_t)(len >> 8), o[2] = (uint8_t)len;
    o[3] = type, o[4] = flags;
    o[5] = (uint8_t)(id >> 24), o[6] = (uint8_t)(id >> 16), o[7] = (uint8_t)(id >> 8),
    o[8] = (uint8_t)id;
    if (len) memcpy(o + 9, p, len);
    return 9 + len;
}

/* A request's header block: POST, a path, literals without indexing */
static const uint8_t BLOCK[] = {0x83, 0x86, 0x04, 0x02, '/', 'x'};

/* Feeds the preface, an empty SETTINGS and in[0..n) to a new server;
 * returns what sl_h2_recv ended with (0, or -1: the connection ended)
 * and the server's frames in out (its own, the frames' payloads point into
 * a static buffer). */
static int raw(server *sv, const uint8_t *in, size_t n, rframe *out, int *nout)
{
    static uint8_t buf[1 << 20];
    static uint8_t got[1 << 16];
    size_t k = 0;
    memcpy(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    k = 24 + put_frame(buf + 24, 4, 0, 0, NULL, 0);
    memcpy(buf + k, in, n);
    k += n;
    server_new(sv);
    int rc = 0;
    for (size_t pos = 0; pos < k;) {
        ssize_t r = sl_h2_recv(sv->h, buf + pos, k - pos);
        if (r < 0) {
            rc = -1;
            break;
        }
        if (r == 0) break;
        pos += (size_t)r;
    }
    size_t olen;
    const uint8_t *o = sl_h2_out(sv->h, &olen);
    assert_true(olen <= sizeof got);
    memcpy(got, o, olen);
    *nout = 0;
    for (size_t pos = 0; pos + 9 <= olen;) {
        size_t len = (size_t)got[pos] << 16 | (size_t)got[pos + 1] << 8 | got[pos + 2];
        assert_true(pos + 9 + len <= olen);
        out[(*nout)++] = (rframe){got[pos + 3], got[pos + 4],
                                  (uint32_t)got[pos + 5] << 24 | (uint32_t)got[pos + 6] << 16 |
                                      (uint32_t)got[pos + 7] << 8 | got[pos + 8],
                                  got + pos + 9, len};
        pos += 9 + len;
    }
    return rc;
}

static uint32_t u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The GOAWAY among f: its error code, or -1 when none came. */
static long goaway_code(const rframe *f, int n)
{
    for (int i = 0; i < n; i++)
        if (f[i].type == 7) return (long)u32(f[i].p + 4);
    return -1;
}

/* The RST_STREAM on stream id among f: its code, or -1. */
static long rst_code(const rframe *f, int n, uint32_t id)
{
    for (int i = 0; i < n; i++)
        if (f[i].type == 3 && f[i].id == id) return (long)u32(f[i].p);
    return -1;
}

/* Connection errors: the GOAWAY code RFC 9113 names for each. */
static void connection_errors(void **state)
{
    (void)state;
    static uint8_t big[16385];
    const uint8_t settings5[5] = {0}, ping7[7] = {0}, wu0[4] = {0},
                  wumax[4] = {0x7f, 0xff, 0xff, 0xff};
    const uint8_t bad_hpack[1] = {0x80};
    const uint8_t padded[4] = {10, 0x82, 0x86, 0x84};
    const uint8_t win_big[6] = {0, 4, 0x80, 0, 0, 0};
    const uint8_t frame_small[6] = {0, 5, 0, 0, 0, 100};
    const uint8_t push2[6] = {0, 2, 0, 0, 0, 2};
    uint8_t in[40000];
    static const struct {
        const char *what;
        long code;
    } want[] = {
        {"DATA on stream 0", 1},
        {"HEADERS on an even stream", 1},
        {"a frame over 16384 bytes", 6},
        {"SETTINGS of 5 bytes", 6},
        {"SETTINGS ACK with a payload", 6},
        {"PING of 7 bytes", 6},
        {"PING on a stream", 1},
        {"WINDOW_UPDATE of 0 on the connection", 1},
        {"the connection's window past 2^31-1", 3},
        {"a malformed header block", 9},
        {"CONTINUATION without HEADERS", 1},
        {"a header block cut by PING", 1},
        {"DATA on an idle stream", 1},
        {"RST_STREAM on an idle stream", 1},
        {"padding longer than the frame", 1},
        {"SETTINGS_INITIAL_WINDOW_SIZE of 2^31", 3},
        {"SETTINGS_MAX_FRAME_SIZE of 5", 1},
        {"SETTINGS_ENABLE_PUSH of 2", 1},
        {"PUSH_PROMISE", 1},
        {"GOAWAY of 4 bytes", 6},
        {"HEADERS on stream 0", 1},
        {"PRIORITY of 4 bytes on an idle stream", 6},
        {"PRIORITY of an idle stream on itself", 1},
    };
    for (size_t t = 0; t < sizeof want / sizeof want[0]; t++) {
        size_t k = 0;
        switch (t) {
        case 0: k = put_frame(in, 0, 0, 0, "x", 1); break;
        case 1: k = put_frame(in, 1, 4, 2, BLOCK, sizeof BLOCK); break;
        case 2: k = put_frame(in, 0, 0, 1, big, sizeof big); break;
        case 3: k = put_frame(in, 4, 0, 0, settings5, 5); break;
        case 4: k = put_frame(in, 4, 1, 0, settings5, 5); break;
        case 5: k = put_frame(in, 6, 0, 0, ping7, 7); break;
        case 6: k = put_frame(in, 6, 0, 1, "12345678", 8); break;
        case 7: k = put_frame(in, 8, 0, 0, wu0, 4); break;
        case 8: k = put_frame(in, 8, 0, 0, wumax, 4); break;
        case 9: k = put_frame(in, 1, 4, 1, bad_hpack, 1); break;
        case 10: k = put_frame(in, 9, 4, 1, BLOCK, sizeof BLOCK); break;
        case 11:
            k = put_frame(in, 1, 0, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 6, 0, 0, "12345678", 8);
            break;
        case 12: k = put_frame(in, 0, 0, 5, "x", 1); break;
        case 13: k = put_frame(in, 3, 0, 5, wu0, 4); break;
        case 14: k = put_frame(in, 1, 4 | 8, 1, padded, sizeof padded); break;
        case 15: k = put_frame(in, 4, 0, 0, win_big, 6); break;
        case 16: k = put_frame(in, 4, 0, 0, frame_small, 6); break;
        case 17: k = put_frame(in, 4, 0, 0, push2, 6); break;
        case 18: k = put_frame(in, 5, 4, 1, BLOCK, sizeof BLOCK); break;
        case 19: k = put_frame(in, 7, 0, 0, wu0, 4); break;
        case 20: k = put_frame(in, 1, 4, 0, BLOCK, sizeof BLOCK); break;
        case 21: k = put_frame(in, 2, 0, 1, wu0, 4); break;
        case 22: k = put_frame(in, 2, 0, 3, "\0\0\0\x03\x10", 5); break;
        }
        server sv;
        rframe f[64];
        int nf;
        int rc = raw(&sv, in, k, f, &nf);
        if (rc != -1 || goaway_code(f, nf) != want[t].code)
            fail_msg("%s: rc %d, GOAWAY code %ld, want %ld", want[t].what, rc, goaway_code(f, nf),
                     want[t].code);
        assert_true(sl_h2_done(sv.h));
        assert_int_equal(sl_h2_recv(sv.h, in, k), -1); /* over for good */
        sl_h2_free(sv.h);
    }
    /* the first frame must be SETTINGS */
    memcpy(in, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    size_t k = 24 + put_frame(in + 24, 6, 0, 0, "12345678", 8);
    server sv;
    server_new(&sv);
    assert_int_equal(sl_h2_recv(sv.h, in, k), 24);
    assert_int_equal(sl_h2_recv(sv.h, in + 24, k - 24), -1);
    sl_h2_free(sv.h);
    /* not HTTP/2 at all: over, without a GOAWAY (only our SETTINGS) */
    server_new(&sv);
    assert_int_equal(sl_h2_recv(sv.h, (const uint8_t *)"GET / HTTP/1.1\r\n", 16), -1);
    size_t olen;
    const uint8_t *o = sl_h2_out(sv.h, &olen);
    assert_int_equal(olen, 9 + 18);
    assert_int_equal(o[3], 4);
    sl_h2_free(sv.h);
    /* a preface in pieces waits for its rest */
    server_new(&sv);
    assert_int_equal(sl_h2_recv(sv.h, (const uint8_t *)"PRI * HTTP", 10), 0);
    sl_h2_free(sv.h);
}

/* Stream errors: RST_STREAM with RFC 9113's code, the connection goes on
 * (a later call on it is answered). */
static void stream_errors(void **state)
{
    (void)state;
    uint8_t in[70000];
    const uint8_t wu0[4] = {0}, prio_self[5] = {0, 0, 0, 1, 16}, prio4[4] = {0};
    static const struct {
        const char *what;
        uint32_t id;
        long code;
    } want[] = {
        {"WINDOW_UPDATE of 0 on a stream", 1, 1},
        {"PRIORITY on itself", 1, 1},
        {"PRIORITY of 4 bytes", 1, 6},
        {"trailers without END_STREAM", 1, 1},
        {"DATA after END_STREAM", 1, 5},
        {"the 101st stream", 201, 7},
        {"a header list over 16 KiB", 1, 11},
        {"HEADERS depending on itself", 1, 1},
    };
    for (size_t t = 0; t < sizeof want / sizeof want[0]; t++) {
        size_t k = 0;
        int defer = 0;
        switch (t) {
        case 0:
            k = put_frame(in, 1, 4, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 8, 0, 1, wu0, 4);
            break;
        case 1:
            k = put_frame(in, 1, 4, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 2, 0, 1, prio_self, 5);
            break;
        case 2:
            k = put_frame(in, 1, 4, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 2, 0, 1, prio4, 4);
            break;
        case 3:
            k = put_frame(in, 1, 4, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 1, 4, 1, BLOCK, sizeof BLOCK);
            break;
        case 4:
            defer = 1; /* the stream stays half-closed: no answer */
            k = put_frame(in, 1, 4 | 1, 1, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 0, 0, 1, "x", 1);
            break;
        case 5:
            for (uint32_t i = 0; i < 101; i++)
                k += put_frame(in + k, 1, 4, 1 + 2 * i, BLOCK, sizeof BLOCK);
            k += put_frame(in + k, 3, 0, 1, "\0\0\0\x08", 4); /* a place again: 1 cancelled */
            break;
        case 6: {
            uint8_t blk[20000];
            size_t b = 0;
            for (int j = 0; j < 3; j++) { /* x: 6000 bytes, three times */
                blk[b++] = 0x00, blk[b++] = 1, blk[b++] = 'x';
                blk[b++] = 0x7f, blk[b++] = (uint8_t)((6000 - 127) & 0x7f) | 0x80,
                blk[b++] = (uint8_t)((6000 - 127) >> 7);
                memset(blk + b, 'v', 6000);
                b += 6000;
            }
            k = put_frame(in, 1, 0, 1, blk, 16384);
            k += put_frame(in + k, 9, 4, 1, blk + 16384, b - 16384);
            break;
        }
        case 7: {
            uint8_t blk[5 + sizeof BLOCK] = {0, 0, 0, 1, 16};
            memcpy(blk + 5, BLOCK, sizeof BLOCK);
            k = put_frame(in, 1, 4 | 0x20, 1, blk, sizeof blk);
            break;
        }
        }
        /* then a call on a fresh stream, answered */
        uint32_t next = want[t].id + 2;
        k += put_frame(in + k, 1, 4 | 1, next, BLOCK, sizeof BLOCK);
        server sv;
        rframe f[300];
        int nf;
        memset(&sv, 0, sizeof sv);
        int rc;
        if (defer) { /* raw() with the server deferring its answers */
            static uint8_t buf[100000];
            memcpy(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
            size_t n = 24 + put_frame(buf + 24, 4, 0, 0, NULL, 0);
            memcpy(buf + n, in, k);
            n += k;
            server_new(&sv);
            sv.defer = 1;
            size_t pos = 0;
            ssize_t r;
            while (pos < n && (r = sl_h2_recv(sv.h, buf + pos, n - pos)) > 0) pos += (size_t)r;
            rc = pos == n ? 0 : -1;
            size_t olen;
            const uint8_t *o = sl_h2_out(sv.h, &olen);
            nf = 0;
            for (size_t p = 0; p + 9 <= olen;) {
                size_t len = (size_t)o[p] << 16 | (size_t)o[p + 1] << 8 | o[p + 2];
                f[nf++] = (rframe){o[p + 3], o[p + 4], u32(o + p + 5) & 0x7fffffff, o + p + 9, len};
                p += 9 + len;
            }
            assert_int_equal(sv.last_end, next);
        } else {
            rc = raw(&sv, in, k, f, &nf);
        }
        if (rc != 0 || rst_code(f, nf, want[t].id) != want[t].code || goaway_code(f, nf) != -1)
            fail_msg("%s: rc %d, RST_STREAM code %ld (want %ld), GOAWAY %ld", want[t].what, rc,
                     rst_code(f, nf, want[t].id), want[t].code, goaway_code(f, nf));
        if (!defer) { /* the call after it: HEADERS, DATA, trailers */
            int seen = 0;
            for (int i = 0; i < nf; i++)
                if (f[i].id == next && f[i].type == 1 && (f[i].flags & 1)) seen = 1;
            if (!seen) fail_msg("%s: the next call was not answered", want[t].what);
        }
        sl_h2_free(sv.h);
    }
}

/* After our GOAWAY a new stream is ignored: no callback, no answer. */
static void ignored_after_goaway(void **state)
{
    (void)state;
    uint8_t in[200];
    size_t k = put_frame(in, 1, 4 | 1, 1, BLOCK, sizeof BLOCK);
    server sv;
    rframe f[16];
    int nf;
    assert_int_equal(raw(&sv, in, k, f, &nf), 0);
    assert_int_equal(sv.ended, 1);
    assert_int_equal(sl_h2_goaway(sv.h, SL_H2_NO_ERROR, NULL), 0);
    assert_int_equal(sl_h2_goaway(sv.h, SL_H2_NO_ERROR, NULL), 0); /* once */
    sl_h2_out_taken(sv.h);
    k = put_frame(in, 1, 4 | 1, 3, BLOCK, sizeof BLOCK);
    k += put_frame(in + k, 0, 1, 3, "x", 1); /* and its DATA */
    for (size_t pos = 0; pos < k;) {
        ssize_t r = sl_h2_recv(sv.h, in + pos, k - pos);
        assert_true(r > 0);
        pos += (size_t)r;
    }
    assert_int_equal(sv.begun, 1);
    size_t olen;
    sl_h2_out(sv.h, &olen);
    assert_int_equal(olen, 0);
    assert_true(sl_h2_done(sv.h));
    sl_h2_free(sv.h);
}

/* The client resets a stream before it ends: closed, never answered. */
static void client_reset(void **state)
{
    (void)state;
    uint8_t in[200];
    const uint8_t cancel[4] = {0, 0, 0, 8};
    size_t k = put_frame(in, 1, 4, 1, BLOCK, sizeof BLOCK);
    k += put_frame(in + k, 3, 0, 1, cancel, 4);
    k += put_frame(in + k, 0, 1, 1, "x", 1); /* DATA after it: ignored */
    server sv;
    rframe f[16];
    int nf;
    assert_int_equal(raw(&sv, in, k, f, &nf), 0);
    assert_int_equal(sv.begun, 1);
    assert_int_equal(sv.closed, 1);
    assert_int_equal(sv.ended, 0);
    assert_int_equal(goaway_code(f, nf), -1);
    assert_int_equal(rst_code(f, nf, 1), -1);
    sl_h2_free(sv.h);
}

/* ---- floods (h2.h, "Floods") ------------------------------------------------------- */

/* Feeds the preface, an empty SETTINGS and in[0..n) to sv (new), taking
 * the server's output as it comes (so any number of answers fit).
 * Returns what sl_h2_recv ended with (0, or -1: the connection ended) and
 * sets *goaway to the code of the GOAWAY it sent (-1: none), *wu to the
 * sum of its WINDOW_UPDATEs on the connection. */
static int feed(server *sv, uint64_t hold, const uint8_t *in, size_t n, long *goaway, uint64_t *wu)
{
    static uint8_t pre[64];
    size_t k = 24 + put_frame(pre + 24, 4, 0, 0, NULL, 0);
    memcpy(pre, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    server_new(sv);
    if (hold) sl_h2_hold_data(sv->h, hold);
    *goaway = -1;
    if (wu) *wu = 0;
    int rc = 0;
    for (int part = 0; part < 2 && rc == 0; part++) {
        const uint8_t *p = part ? in : pre;
        size_t len = part ? n : k;
        for (size_t pos = 0; pos < len;) {
            ssize_t r = sl_h2_recv(sv->h, p + pos, len - pos);
            size_t olen;
            const uint8_t *o = sl_h2_out(sv->h, &olen);
            for (size_t q = 0; q + 9 <= olen;) {
                size_t fl = (size_t)o[q] << 16 | (size_t)o[q + 1] << 8 | o[q + 2];
                uint32_t id = u32(o + q + 5) & 0x7fffffff;
                if (o[q + 3] == 7) *goaway = (long)u32(o + q + 13);
                if (o[q + 3] == 8 && id == 0 && wu) *wu += u32(o + q + 9);
                q += 9 + fl;
            }
            sl_h2_out_taken(sv->h);
            if (r < 0) {
                rc = -1;
                break;
            }
            if (r == 0) break;
            pos += (size_t)r;
        }
    }
    return rc;
}

/* What each flood frame looks like, and what one counts. */
enum flood {
    RAPID_RESET,
    EMPTY_DATA,
    EMPTY_HEADERS,
    PRIORITY,
    UNKNOWN,
    IDLE_WINDOW_UPDATE,
    PING_ACK,
    NFLOODS
};

/* n frames of flood f after one open stream (1), in buf; returns bytes. */
static size_t flood(uint8_t *buf, enum flood f, int n)
{
    const uint8_t cancel[4] = {0, 0, 0, 8}, prio[5] = {0, 0, 0, 0, 16}, one[4] = {0, 0, 0, 1};
    size_t k = put_frame(buf, 1, 4, 1, BLOCK, sizeof BLOCK); /* stream 1 stays open */
    for (int i = 0; i < n; i++) {
        uint32_t id = 3 + 2 * (uint32_t)i;
        switch (f) {
        case RAPID_RESET: /* a call opened and cancelled at once: one frame of debt each */
            k += put_frame(buf + k, 1, 4, id, BLOCK, sizeof BLOCK);
            k += put_frame(buf + k, 3, 0, id, cancel, 4);
            break;
        case EMPTY_DATA: k += put_frame(buf + k, 0, 0, 1, NULL, 0); break;
        case EMPTY_HEADERS: k += put_frame(buf + k, 1, 4, id, NULL, 0); break;
        case PRIORITY: k += put_frame(buf + k, 2, 0, 1, prio, 5); break;
        case UNKNOWN: k += put_frame(buf + k, 0x42, 0, 0, NULL, 0); break;
        case IDLE_WINDOW_UPDATE: k += put_frame(buf + k, 8, 0, 0, one, 4); break;
        case PING_ACK: k += put_frame(buf + k, 6, 1, 0, "12345678", 8); break;
        default: break;
        }
    }
    return k;
}

/* Each kind of frame that does no work is counted: as many as the bound
 * allows keep the connection; one more ends it with GOAWAY
 * ENHANCE_YOUR_CALM (a reset counts 2, so half as many). */
static void floods_are_calmed(void **state)
{
    (void)state;
    static uint8_t buf[1 << 21];
    static const char *name[NFLOODS] = {"rapid reset",     "empty DATA",     "empty HEADERS",
                                        "PRIORITY",        "unknown frames", "idle WINDOW_UPDATE",
                                        "unasked PING ACK"};
    for (int f = 0; f < NFLOODS; f++) {
        int allowed = f == RAPID_RESET ? SL_H2_MAX_WASTE / 2 : SL_H2_MAX_WASTE;
        if (f == EMPTY_HEADERS) allowed = SL_H2_MAX_STREAMS - 1; /* each opens a stream */
        for (int extra = 0; extra < 2; extra++) {
            server sv;
            long code;
            size_t k = flood(buf, (enum flood)f, allowed + extra);
            sv.defer = 0;
            int rc = feed(&sv, 0, buf, k, &code, NULL);
            if (extra == 0 && (rc != 0 || code != -1))
                fail_msg("%s: %d frames ended the connection (rc %d, GOAWAY %ld)", name[f], allowed,
                         rc, code);
            if (extra == 1 && f != EMPTY_HEADERS && (rc != -1 || code != SL_H2_ENHANCE_YOUR_CALM))
                fail_msg("%s: %d frames kept the connection (rc %d, GOAWAY %ld)", name[f],
                         allowed + 1, rc, code);
            sl_h2_free(sv.h);
        }
    }
    /* empty HEADERS past the stream limit: refused, and counted until calm */
    server sv;
    long code;
    size_t k = flood(buf, EMPTY_HEADERS, 2 * SL_H2_MAX_WASTE);
    assert_int_equal(feed(&sv, 0, buf, k, &code, NULL), -1);
    assert_int_equal(code, SL_H2_ENHANCE_YOUR_CALM);
    sl_h2_free(sv.h);
}

/* An empty CONTINUATION flood: a header block in more than
 * SL_H2_MAX_CONTINUATIONS frames ends the connection (ENHANCE_YOUR_CALM);
 * that many is fine. */
static void continuation_flood(void **state)
{
    (void)state;
    static uint8_t buf[1 << 20];
    for (int extra = 0; extra < 2; extra++) {
        size_t k = put_frame(buf, 1, 1, 1, BLOCK, 2); /* END_STREAM, not END_HEADERS */
        int n = SL_H2_MAX_CONTINUATIONS + extra;
        for (int i = 0; i < n - 1; i++) k += put_frame(buf + k, 9, 0, 1, NULL, 0);
        k += put_frame(buf + k, 9, 4, 1, BLOCK + 2, sizeof BLOCK - 2);
        server sv;
        long code;
        int rc = feed(&sv, 0, buf, k, &code, NULL);
        if (extra == 0) {
            assert_int_equal(rc, 0);
            assert_int_equal(code, -1);
            assert_int_equal(sv.ended, 1); /* the block was whole: the call ran */
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(code, SL_H2_ENHANCE_YOUR_CALM);
            assert_int_equal(sv.begun, 0);
        }
        sl_h2_free(sv.h);
    }
    /* 100,000 empty CONTINUATIONs: over at the 33rd */
    size_t k = put_frame(buf, 1, 0, 1, BLOCK, 2);
    for (int i = 0; i < 100000 && k + 9 <= sizeof buf; i++)
        k += put_frame(buf + k, 9, 0, 1, NULL, 0);
    server sv;
    long code;
    assert_int_equal(feed(&sv, 0, buf, k, &code, NULL), -1);
    assert_int_equal(code, SL_H2_ENHANCE_YOUR_CALM);
    assert_true(sl_h2_done(sv.h));
    sl_h2_free(sv.h);
}

/* Calls answered pay their debt back: a client resetting one call in
 * three (each reset counts 2, each answer pays 1) is never cut, over
 * many times SL_H2_MAX_WASTE resets. */
static void answered_calls_pay_back(void **state)
{
    (void)state;
    static uint8_t buf[1 << 21];
    const uint8_t cancel[4] = {0, 0, 0, 8};
    size_t k = 0;
    int resets = 0;
    for (uint32_t i = 0; i < 9000; i++) {
        uint32_t id = 1 + 2 * i;
        if (i % 3 == 2) { /* opened, then cancelled before its end */
            k += put_frame(buf + k, 1, 4, id, BLOCK, sizeof BLOCK);
            k += put_frame(buf + k, 3, 0, id, cancel, 4);
            resets++;
        } else { /* a whole call, answered */
            k += put_frame(buf + k, 1, 4 | 1, id, BLOCK, sizeof BLOCK);
        }
    }
    assert_true(resets > 2 * SL_H2_MAX_WASTE);
    server sv;
    long code;
    assert_int_equal(feed(&sv, 0, buf, k, &code, NULL), 0);
    assert_int_equal(code, -1);
    assert_int_equal(sv.ended, 6000);
    sl_h2_free(sv.h);
}

/* hold_data: DATA the caller took stays counted against the connection's
 * window until its request ends or its stream closes.  A stream holding
 * 60,000 bytes leaves 5,535 to every other; DATA past the window ends the
 * connection (FLOW_CONTROL_ERROR); the client resetting the stream frees
 * its body (the closed callback) and gives its window back. */
static void held_bodies_and_reset(void **state)
{
    (void)state;
    static uint8_t buf[1 << 18], chunk[16384];
    const uint8_t cancel[4] = {0, 0, 0, 8};
    size_t k = put_frame(buf, 1, 4, 1, BLOCK, sizeof BLOCK);
    for (int i = 0; i < 4; i++) k += put_frame(buf + k, 0, 0, 1, chunk, 15000); /* 60,000 */
    k += put_frame(buf + k, 1, 4, 3, BLOCK, sizeof BLOCK);
    k += put_frame(buf + k, 0, 0, 3, chunk, 5535); /* the window's rest */
    server sv;
    long code;
    uint64_t wu;
    assert_int_equal(feed(&sv, SL_H2_WINDOW, buf, k, &code, &wu), 0);
    assert_int_equal(code, -1);
    assert_int_equal(wu, 0); /* all of it held: nothing given back */
    /* the client resets stream 1: its 60,000 bytes are freed and given back */
    k = put_frame(buf, 3, 0, 1, cancel, 4);
    size_t olen;
    assert_int_equal(sl_h2_recv(sv.h, buf, k), (ssize_t)k);
    assert_int_equal(sv.closed, 1);
    const uint8_t *o = sl_h2_out(sv.h, &olen);
    assert_int_equal(olen, 13);
    assert_int_equal(o[3], 8);
    assert_int_equal(u32(o + 5), 0);
    assert_int_equal(u32(o + 9), 60000);
    sl_h2_out_taken(sv.h);
    /* stream 3 ends: its bytes are no longer held */
    k = put_frame(buf, 0, 1, 3, NULL, 0);
    assert_int_equal(sl_h2_recv(sv.h, buf, k), (ssize_t)k);
    assert_int_equal(sv.ended, 1);
    sl_h2_free(sv.h);

    /* a client ignoring the window: one byte past it ends the connection */
    k = put_frame(buf, 1, 4, 1, BLOCK, sizeof BLOCK);
    for (int i = 0; i < 4; i++) k += put_frame(buf + k, 0, 0, 1, chunk, 15000);
    k += put_frame(buf + k, 1, 4, 3, BLOCK, sizeof BLOCK);
    k += put_frame(buf + k, 0, 0, 3, chunk, 5536);
    assert_int_equal(feed(&sv, 1000, buf, k, &code, &wu), -1); /* below the window: as it */
    assert_int_equal(code, SL_H2_FLOW_CONTROL_ERROR);
    sl_h2_free(sv.h);

    /* without hold_data the window is given back as it is used */
    k = put_frame(buf, 1, 4, 1, BLOCK, sizeof BLOCK);
    for (int i = 0; i < 4; i++) k += put_frame(buf + k, 0, 0, 1, chunk, 15000);
    assert_int_equal(feed(&sv, 0, buf, k, &code, &wu), 0);
    assert_int_equal(wu, 45000);
    sl_h2_free(sv.h);
}

/* A client following the server's windows over sv (fed the preface and
 * SETTINGS, hold_data set): streams 1, 3 .. 2 * ns - 1 open, then each
 * sends want bytes of DATA round robin in frames of at most 16,384, as
 * far as the connection's and its own window let it, END_STREAM after
 * the last when end.  Returns the DATA bytes sent; *granted is the
 * connection window the server gave in all (65,535 and its
 * WINDOW_UPDATEs on stream 0). */
#define FOLLOW_MAX 8
static uint64_t follow_windows(server *sv, int ns, size_t want, int end, uint64_t *granted)
{
    static uint8_t buf[16384 + 64], chunk[16384];
    int64_t sw[FOLLOW_MAX]; /* the streams' windows */
    size_t sent[FOLLOW_MAX] = {0};
    uint64_t total = 0;
    *granted = SL_H2_WINDOW;
    assert_true(ns <= FOLLOW_MAX);
    for (int i = 0; i < ns; i++) {
        size_t k = put_frame(buf, 1, 4, (uint32_t)(1 + 2 * i), BLOCK, sizeof BLOCK);
        assert_int_equal(sl_h2_recv(sv->h, buf, k), (ssize_t)k);
        sw[i] = SL_H2_WINDOW;
    }
    for (int moved = 1; moved;) { /* bounded: each round sends, or it ends */
        moved = 0;
        for (int i = 0; i < ns; i++) {
            size_t olen;
            const uint8_t *o = sl_h2_out(sv->h, &olen);
            for (size_t q = 0; q + 9 <= olen;) { /* the windows the server gave */
                size_t fl = (size_t)o[q] << 16 | (size_t)o[q + 1] << 8 | o[q + 2];
                uint32_t id = u32(o + q + 5) & 0x7fffffff;
                if (o[q + 3] == 8 && id == 0) *granted += u32(o + q + 9);
                if (o[q + 3] == 8 && id != 0) sw[(id - 1) / 2] += u32(o + q + 9);
                q += 9 + fl;
            }
            sl_h2_out_taken(sv->h);
            int64_t cw = (int64_t)(*granted - total);
            size_t n = want - sent[i];
            if ((int64_t)n > cw) n = (size_t)cw;
            if ((int64_t)n > sw[i]) n = (size_t)sw[i];
            if (n > sizeof chunk) n = sizeof chunk;
            int last = end && sent[i] + n == want;
            if (n == 0) continue;
            size_t k = put_frame(buf, 0, last ? 1 : 0, (uint32_t)(1 + 2 * i), chunk, n);
            assert_int_equal(sl_h2_recv(sv->h, buf, k), (ssize_t)k);
            sent[i] += n, total += n, sw[i] -= (int64_t)n;
            moved = 1;
        }
    }
    return total;
}

/* hold_data with a bound above the window: the connection's window is
 * given back while the bytes held plus the client's window stay within
 * it.  Streams that never end: the client sends exactly the bound and
 * is given no more; a stream ending gives back what it held.  One body
 * longer than the window goes through (its stream's window is given
 * back as it sends). */
static void held_bodies_within_a_bound(void **state)
{
    (void)state;
    static const uint64_t bound = 200005;
    server sv;
    long code;
    uint64_t granted, wu;
    /* 4 streams x 100,000 bytes, never ending: 200,005 of them held */
    assert_int_equal(feed(&sv, bound, NULL, 0, &code, NULL), 0);
    sv.defer = 1;
    assert_int_equal(follow_windows(&sv, 4, 100000, 0, &granted), bound);
    assert_int_equal(granted, bound);
    assert_int_equal(sv.ended, 0);
    /* one byte more is beyond the window: FLOW_CONTROL_ERROR */
    static uint8_t buf[64];
    size_t k = put_frame(buf, 0, 0, 7, "x", 1);
    assert_int_equal(sl_h2_recv(sv.h, buf, k), -1);
    size_t olen;
    const uint8_t *o = sl_h2_out(sv.h, &olen);
    assert_int_equal(olen, 9 + 8 + strlen("DATA beyond the connection's window"));
    assert_int_equal(o[3], 7);
    assert_int_equal(u32(o + 13), SL_H2_FLOW_CONTROL_ERROR);
    sl_h2_free(sv.h);

    /* the same, then stream 1 ends: its bytes are given back, no more */
    assert_int_equal(feed(&sv, bound, NULL, 0, &code, NULL), 0);
    sv.defer = 1;
    assert_int_equal(follow_windows(&sv, 4, 100000, 0, &granted), bound);
    size_t held1 = ((req *)sl_h2_user(sl_h2_find(sv.h, 1)))->blen;
    assert_true(held1 > 0 && held1 < 100000);
    k = put_frame(buf, 0, 1, 1, NULL, 0);
    assert_int_equal(sl_h2_recv(sv.h, buf, k), (ssize_t)k);
    assert_int_equal(sv.ended, 1);
    o = sl_h2_out(sv.h, &olen);
    assert_int_equal(olen, 13);
    assert_int_equal(o[3], 8);
    assert_int_equal(u32(o + 5), 0);
    assert_int_equal(u32(o + 9), held1);
    sl_h2_out_taken(sv.h);
    sl_h2_free(sv.h);

    /* one body of 150,000 bytes, more than a window: it ends */
    assert_int_equal(feed(&sv, bound, NULL, 0, &code, NULL), 0);
    sv.defer = 1;
    assert_int_equal(follow_windows(&sv, 1, 150000, 1, &granted), 150000);
    assert_int_equal(sv.ended, 1);
    sl_h2_free(sv.h);

    /* bound == SL_H2_WINDOW: nothing held is given back, as before */
    assert_int_equal(feed(&sv, SL_H2_WINDOW, NULL, 0, &code, &wu), 0);
    sv.defer = 1;
    assert_int_equal(follow_windows(&sv, 4, 100000, 0, &granted), SL_H2_WINDOW);
    assert_int_equal(granted, SL_H2_WINDOW);
    sl_h2_free(sv.h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_calls_one_connection),  cmocka_unit_test(flow_control_both_ways),
        cmocka_unit_test(connection_errors),          cmocka_unit_test(stream_errors),
        cmocka_unit_test(ignored_after_goaway),       cmocka_unit_test(client_reset),
        cmocka_unit_test(floods_are_calmed),          cmocka_unit_test(continuation_flood),
        cmocka_unit_test(answered_calls_pay_back),    cmocka_unit_test(held_bodies_and_reset),
        cmocka_unit_test(held_bodies_within_a_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
