/*
 * fuzz_h2.c -- libFuzzer target for sluiced's HTTP/2 alone (src/proto/grpc/
 * h2.c, with its HPACK, hpack.c), through h2.h's API only: bytes a client
 * sends, fed to sl_h2_recv, with trivial stream callbacks -- no gRPC.
 *
 * Input: one byte of options, then the client's bytes.  Option bit 0:
 * prepend the client preface and an empty SETTINGS frame (so the fuzzer
 * works past the magic); bits 1..3: the input is fed in pieces of
 * 1 << (bits + 2) bytes, as reads would split it (what sl_h2_recv leaves is
 * offered again with the next piece); bit 4: a request is answered at its
 * end, inside the callback (else after all the input, those still open);
 * bit 5: the answer has a body and trailers (else headers only); bits 6..7:
 * sl_h2_hold_data (0: not called; 1: its bound SL_H2_WINDOW; 2: a bound of
 * 3 windows; 3: a bound of 1, which counts as SL_H2_WINDOW).
 *
 * Checked besides no crash, leak or sanitizer report (ASan, UBSan):
 *   - h2.h's callback order: per stream, begin once, then fields and data,
 *     end at most once, and closed exactly once, nothing after it; every
 *     stream begun is closed by sl_h2_free at the latest;
 *   - sl_h2_recv takes at most what it was given; 0 only while no whole
 *     frame is there (fewer than 9 bytes, or fewer than 9 + its length, or
 *     the 24 of the preface); once -1, -1 on every later call, with a
 *     reason (sl_h2_error non-empty) unless out of memory;
 *   - what h2 writes is whole frames, the first a SETTINGS (type 4), none
 *     longer than SL_H2_MAX_FRAME, none on stream 0 of a type that needs a
 *     stream (HEADERS, DATA, RST_STREAM), none on a stream for a type that
 *     is the connection's (SETTINGS, PING, GOAWAY);
 *   - with hold_data: the bytes the data callback took of the streams
 *     whose request has not ended (nor the stream closed) never pass the
 *     bound (DATA beyond the windows given ends the connection first).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *why)
{
    fprintf(stderr, "fuzz_h2: %s\n", why);
    __builtin_trap();
}

#define MAXS  512    /* streams tracked; more are checked by count only */
#define MAGIC 0x5eed /* in a stream's user bytes while it is open */

typedef struct user {
    int magic;
    int ended;
    uint64_t held; /* bytes taken since it began, until it ends or closes */
} user;

typedef struct conn {
    sl_h2 *h;
    int answer_at_end, body;
    uint64_t bound, held; /* hold_data's bound (0: none), bytes held in all */
    long begun, closed;
    int n;
    uint32_t id[MAXS];
    int state[MAXS]; /* 1 open, 2 ended, 3 closed */
} conn;

static int slot(conn *c, uint32_t id)
{
    for (int i = 0; i < c->n; i++)
        if (c->id[i] == id) return i;
    return -1;
}

static const uint8_t hdr[] = {0x88};        /* :status 200 */
static const uint8_t tr[] = {0x40, 0x0b, 'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's',
                             0x01, '0'};      /* grpc-status: 0 */
static const uint8_t body[] = {0, 0, 0, 0, 2, 8, 1};

static void answer(conn *c, sl_h2_stream *s)
{
    int rc = c->body ? sl_h2_respond(c->h, s, hdr, sizeof hdr, body, sizeof body, tr, sizeof tr)
                     : sl_h2_respond(c->h, s, hdr, sizeof hdr, NULL, 0, NULL, 0);
    if (rc != 0 && !sl_h2_nomem(c->h)) die("sl_h2_respond failed, not out of memory");
}

static user *checked(conn *c, sl_h2_stream *s, const char *what)
{
    user *u = sl_h2_user(s);
    if (u->magic != MAGIC) die(what);
    int i = slot(c, sl_h2_id(s));
    if (i >= 0 && c->state[i] == 3) die(what);
    return u;
}

static int on_begin(void *arg, sl_h2_stream *s)
{
    conn *c = arg;
    uint32_t id = sl_h2_id(s);
    if (id == 0 || !(id & 1)) die("a client stream with an even or zero id");
    if (slot(c, id) >= 0) die("begin twice for one stream id");
    if (c->n < MAXS) c->id[c->n] = id, c->state[c->n++] = 1;
    user *u = sl_h2_user(s);
    u->magic = MAGIC;
    u->ended = 0;
    u->held = 0;
    c->begun++;
    return 0;
}

static int on_field(void *arg, sl_h2_stream *s, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen)
{
    user *u = checked(arg, s, "a field on a stream not begun, or closed");
    if (u->ended) die("a field after the request's end");
    if (name == NULL || value == NULL) die("a NULL name or value");
    (void)nlen, (void)vlen;
    return 0;
}

static int on_data(void *arg, sl_h2_stream *s, const uint8_t *p, size_t n)
{
    user *u = checked(arg, s, "data on a stream not begun, or closed");
    if (u->ended) die("data after the request's end");
    if (n > 0 && p == NULL) die("data at NULL");
    conn *c = arg;
    u->held += n;
    c->held += n;
    if (c->bound && c->held > c->bound) die("more held than hold_data's bound");
    return 0;
}

static void on_end(void *arg, sl_h2_stream *s)
{
    conn *c = arg;
    user *u = checked(c, s, "end on a stream not begun, or closed");
    if (u->ended) die("end twice");
    u->ended = 1;
    c->held -= u->held;
    u->held = 0;
    int i = slot(c, sl_h2_id(s));
    if (i >= 0) c->state[i] = 2;
    if (c->answer_at_end) answer(c, s);
}

static void on_closed(void *arg, sl_h2_stream *s)
{
    conn *c = arg;
    user *u = checked(c, s, "closed on a stream not begun, or twice");
    int i = slot(c, sl_h2_id(s));
    if (i >= 0) c->state[i] = 3;
    c->held -= u->held;
    u->held = 0;
    u->magic = 0;
    c->closed++;
}

static const sl_h2_cbs cbs = {on_begin, on_field, on_data, on_end, on_closed};

static uint32_t be24(const uint8_t *p) { return (uint32_t)p[0] << 16 | p[1] << 8 | p[2]; }

/* What h2 wrote: whole frames, checked; taken. */
static void check_out(conn *c, int *first)
{
    size_t len;
    const uint8_t *o = sl_h2_out(c->h, &len);
    size_t pos = 0;
    while (pos < len) {
        if (len - pos < 9) die("output ends inside a frame header");
        uint32_t flen = be24(o + pos);
        uint8_t type = o[pos + 3];
        uint32_t sid = ((uint32_t)o[pos + 5] << 24 | (uint32_t)o[pos + 6] << 16 |
                        (uint32_t)o[pos + 7] << 8 | o[pos + 8]) &
                       0x7fffffffu;
        if (flen > SL_H2_MAX_FRAME) die("a frame longer than SL_H2_MAX_FRAME");
        if (len - pos - 9 < flen) die("output ends inside a frame");
        if (*first && type != 4) die("the first frame is not SETTINGS");
        *first = 0;
        if ((type == 0 || type == 1 || type == 3) && sid == 0)
            die("DATA, HEADERS or RST_STREAM on stream 0");
        if ((type == 4 || type == 6 || type == 7) && sid != 0)
            die("SETTINGS, PING or GOAWAY on a stream");
        pos += 9 + flen;
    }
    sl_h2_out_taken(c->h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t opt = data[0];
    static const uint8_t pre[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                 "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    size_t np = (opt & 1) ? sizeof pre - 1 : 0, n = np + size - 1;
    uint8_t *in = malloc(n ? n : 1);
    if (in == NULL) die("memory");
    memcpy(in, pre, np);
    if (size > 1) memcpy(in + np, data + 1, size - 1);
    size_t piece = (size_t)1 << (((opt >> 1) & 7) + 2);

    conn *c = calloc(1, sizeof *c);
    if (c == NULL) die("memory");
    c->answer_at_end = opt & 16;
    c->body = opt & 32;
    c->h = sl_h2_new(&cbs, c, sizeof(user));
    if (c->h == NULL) die("memory");
    static const uint64_t bounds[4] = {0, SL_H2_WINDOW, 3 * SL_H2_WINDOW, 1};
    if (opt >> 6) {
        sl_h2_hold_data(c->h, bounds[opt >> 6]);
        c->bound = bounds[opt >> 6] < SL_H2_WINDOW ? SL_H2_WINDOW : bounds[opt >> 6];
    }
    int first = 1, over = 0;
    size_t have = 0, fed = 0; /* in[fed - have .. fed) is offered */
    while (fed < n && !over) {
        size_t more = n - fed < piece ? n - fed : piece;
        fed += more, have += more;
        for (;;) {
            const uint8_t *p = in + fed - have;
            ssize_t r = sl_h2_recv(c->h, p, have);
            if (r < 0) {
                if (!sl_h2_nomem(c->h)) {
                    const char *why = sl_h2_error(c->h);
                    if (why == NULL || why[0] == '\0') die("a connection error without a reason");
                }
                if (sl_h2_recv(c->h, p, have) != -1) die("a call after -1 did not return -1");
                check_out(c, &first);
                over = 1;
                break;
            }
            if ((size_t)r > have) die("took more bytes than given");
            if (r == 0) {
                if (have >= 24 && have >= 9 && have >= 9 + (size_t)be24(p))
                    die("0 returned with a whole frame there");
                break;
            }
            have -= (size_t)r;
            check_out(c, &first);
        }
        check_out(c, &first);
    }
    if (!over && !c->answer_at_end)
        for (int i = 0; i < c->n; i++) {
            if (c->state[i] != 2) continue;
            sl_h2_stream *s = sl_h2_find(c->h, c->id[i]);
            if (s == NULL) die("a stream ended, not closed, yet not found");
            answer(c, s);
            check_out(c, &first);
        }
    sl_h2_free(c->h);
    if (c->closed != c->begun) die("a stream begun was never closed");
    free(c);
    free(in);
    return 0;
}
