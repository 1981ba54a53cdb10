/*
 * h2.c -- the server side of HTTP/2 for gRPC (h2.h).
 *
 * Input is taken a whole frame at a time (the caller keeps a partial
 * one and offers it again with more bytes), so a frame's payload is read
 * in place; only a header block split by CONTINUATION is gathered into
 * `block`.  Streams are found by id in a small hash (at most
 * SL_H2_MAX_STREAMS are open); a closed one goes back to a free list.
 *
 * Stream states, client-initiated only: idle -> open (HEADERS) ->
 * half-closed remote (END_STREAM) -> closed once our answer went.  An
 * answer that ends before the request does (the caller may answer early)
 * closes the stream with RST_STREAM NO_ERROR (RFC 9113 8.1).  A stream id
 * at most last_id without a stream is closed: its frames are ignored
 * (RFC 9113 5.1 allows that; a stream reset here may have frames in
 * flight).
 *
 * Flow control: our windows stay SL_H2_WINDOW; what a client sends is
 * given back (WINDOW_UPDATE) once half of a window was used -- the
 * connection's always, a stream's while it still sends.  Our DATA spends
 * the client's stream and connection windows; what does not fit waits,
 * copied, in its stream (queued on `blocked`), with the trailers, for
 * WINDOW_UPDATE or SETTINGS.
 *
 * With hold_data, the bytes of a stream's DATA the caller took (s->held)
 * count against the connection's window until its request ends or it
 * closes: the connection's WINDOW_UPDATE gives back what was received as
 * far as h->held (all streams' held bytes) plus the window the client
 * then has stays within h->hold_bound.  The client's window is
 * SL_H2_WINDOW - h->recv_used, so what may be given back is
 * recv_used - (held + SL_H2_WINDOW - hold_bound), at most recv_used; with
 * hold_bound == SL_H2_WINDOW that is recv_used - held: nothing held is
 * given back.
 *
 * Floods: h->waste is the client's debt of frames that did no work (h2.h);
 * waste() adds to it and ends the connection past SL_H2_MAX_WASTE.
 */
#include <stdlib.h>
#include <string.h>

#include "h2.h"

enum ftype {
    F_DATA = 0,
    F_HEADERS = 1,
    F_PRIORITY = 2,
    F_RST_STREAM = 3,
    F_SETTINGS = 4,
    F_PUSH_PROMISE = 5,
    F_PING = 6,
    F_GOAWAY = 7,
    F_WINDOW_UPDATE = 8,
    F_CONTINUATION = 9,
};

enum {
    FL_END_STREAM = 0x1,
    FL_ACK = 0x1,
    FL_END_HEADERS = 0x4,
    FL_PADDED = 0x8,
    FL_PRIORITY = 0x20,
};

#define PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define PREFACE_LEN 24
#define BUCKETS     64 /* of the stream hash */
#define KEEP_FREE   16 /* closed streams kept for the next ones */
#define MAX_WINDOW  0x7fffffff

struct sl_h2_stream {
    uint32_t id;
    uint8_t remote_closed;                /* END_STREAM received */
    uint8_t answered;                     /* sl_h2_respond called */
    int64_t send_window;                  /* bytes of DATA the client takes now */
    uint32_t recv_used;                   /* bytes received since our last WINDOW_UPDATE */
    uint64_t held;                        /* hold_data: bytes the caller holds (h2.h) */
    sl_h2_stream *hnext;                  /* hash chain, or the free list */
    sl_h2_stream *qnext;                  /* on h->blocked */
    uint8_t *pend;                        /* blocked: body's rest then trailers (malloc'd) */
    size_t pend_body, pend_off, pend_len; /* pend: body bytes, sent, all */
    _Alignas(16) unsigned char user[];
};

struct sl_h2 {
    const sl_h2_cbs *cb;
    void *arg;
    size_t user_size;
    int preface_ok;   /* the client's preface came */
    int settings_ok;  /* its first SETTINGS came */
    int dead;         /* a connection error: all is over */
    int nomem;        /* ... because memory ran out */
    const char *err;  /* why it is over */
    uint32_t last_id; /* the highest stream id the client opened */
    int goaway_sent;  /* and streams above goaway_last are ignored */
    uint32_t goaway_last;
    int goaway_recv;
    int64_t send_window;  /* the connection's, for our DATA */
    uint32_t recv_used;   /* connection bytes received since a WINDOW_UPDATE */
    uint64_t held;        /* the open streams' held bytes (hold_data) */
    uint64_t hold_bound;  /* held + the client's window stay within it */
    int hold_data;        /* sl_h2_hold_data was called */
    unsigned waste;       /* the client's debt of frames that did no work (h2.h) */
    unsigned cont_frames; /* CONTINUATION frames of the block arriving */
    uint32_t peer_window; /* the client's SETTINGS_INITIAL_WINDOW_SIZE */
    uint32_t peer_frame;  /* its SETTINGS_MAX_FRAME_SIZE */
    int table_update;     /* the client set HEADER_TABLE_SIZE: our next block
                             starts with a size update (to 0: we never index) */
    uint32_t cont_id;     /* a header block continues on this stream, or 0 */
    uint8_t cont_flags;   /* its HEADERS' flags */
    int cont_selfdep;     /* its priority named itself */
    uint8_t *block;       /* the block so far */
    size_t block_len, block_cap;
    sl_hpack dec;
    sl_h2_stream *bucket[BUCKETS];
    size_t nstreams;
    sl_h2_stream *blocked, *blocked_tail; /* answers waiting for windows */
    sl_h2_stream *free_list;
    int nfree;
    uint8_t *out; /* frames to send */
    size_t out_len, out_cap;
};

/* ---- output ---------------------------------------------------------------------- */

static int out_room(sl_h2 *h, size_t n)
{
    if (h->out_len + n <= h->out_cap) return 0;
    size_t cap = h->out_cap ? h->out_cap : 1024;
    while (cap < h->out_len + n) cap *= 2;
    uint8_t *p = realloc(h->out, cap);
    if (p == NULL) {
        h->nomem = h->dead = 1;
        h->err = "out of memory";
        return -1;
    }
    h->out = p;
    h->out_cap = cap;
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Appends a frame's 9-byte header; the caller appends its payload (room
 * made for it here). */
static int frame_hdr(sl_h2 *h, size_t len, uint8_t type, uint8_t flags, uint32_t id)
{
    if (out_room(h, 9 + len) != 0) return -1;
    uint8_t *p = h->out + h->out_len;
    p[0] = (uint8_t)(len >> 16), p[1] = (uint8_t)(len >> 8), p[2] = (uint8_t)len;
    p[3] = type, p[4] = flags;
    put32(p + 5, id);
    h->out_len += 9;
    return 0;
}

static int frame(sl_h2 *h, uint8_t type, uint8_t flags, uint32_t id, const void *pl, size_t len)
{
    if (frame_hdr(h, len, type, flags, id) != 0) return -1;
    if (len) memcpy(h->out + h->out_len, pl, len);
    h->out_len += len;
    return 0;
}

static int frame_u32(sl_h2 *h, uint8_t type, uint32_t id, uint32_t v)
{
    uint8_t b[4];
    put32(b, v);
    return frame(h, type, 0, id, b, 4);
}

const uint8_t *sl_h2_out(const sl_h2 *h, size_t *len)
{
    *len = h->out_len;
    return h->out;
}

void sl_h2_out_taken(sl_h2 *h) { h->out_len = 0; }

/* ---- errors ---------------------------------------------------------------------- */

/* A connection error: GOAWAY with code, then nothing more.  Returns -1. */
static int conn_error(sl_h2 *h, uint32_t code, const char *why)
{
    if (h->dead) return -1;
    uint8_t b[8];
    put32(b, h->last_id);
    put32(b + 4, code);
    size_t n = strlen(why);
    if (frame_hdr(h, 8 + n, F_GOAWAY, 0, 0) == 0) {
        memcpy(h->out + h->out_len, b, 8);
        memcpy(h->out + h->out_len + 8, why, n);
        h->out_len += 8 + n;
    }
    h->goaway_sent = 1;
    h->goaway_last = h->last_id;
    h->dead = 1;
    if (!h->nomem) h->err = why;
    return -1;
}

const char *sl_h2_error(const sl_h2 *h) { return h->err ? h->err : "no error"; }
int sl_h2_nomem(const sl_h2 *h) { return h->nomem; }

/* ---- streams --------------------------------------------------------------------- */

uint32_t sl_h2_id(const sl_h2_stream *s) { return s->id; }
void *sl_h2_user(sl_h2_stream *s) { return s->user; }

static sl_h2_stream **slot_of(sl_h2 *h, uint32_t id) { return &h->bucket[(id >> 1) % BUCKETS]; }

sl_h2_stream *sl_h2_find(sl_h2 *h, uint32_t id)
{
    sl_h2_stream *s = *slot_of(h, id);
    while (s && s->id != id) s = s->hnext;
    return s;
}

static sl_h2_stream *stream_open(sl_h2 *h, uint32_t id)
{
    sl_h2_stream *s = h->free_list;
    if (s != NULL) {
        h->free_list = s->hnext;
        h->nfree--;
    } else if ((s = malloc(sizeof *s + h->user_size)) == NULL) {
        return NULL;
    }
    memset(s, 0, sizeof *s); /* the user bytes are begin's to set */
    s->id = id;
    s->send_window = h->peer_window;
    sl_h2_stream **b = slot_of(h, id);
    s->hnext = *b;
    *b = s;
    h->nstreams++;
    return s;
}

/* Gives the client back the connection's window it used, once half of
 * it is used, as far as what the caller holds plus the client's window
 * stay within hold_bound (h2.c's head): 0, or -1 out of memory. */
static int give_back(sl_h2 *h)
{
    if (h->recv_used < SL_H2_WINDOW / 2) return 0;
    uint64_t n = h->recv_used, keep = 0; /* keep: of recv_used, what stays used */
    if (h->held + SL_H2_WINDOW > h->hold_bound) keep = h->held + SL_H2_WINDOW - h->hold_bound;
    n = keep >= n ? 0 : n - keep;
    if (n == 0) return 0;
    if (frame_u32(h, F_WINDOW_UPDATE, 0, (uint32_t)n) != 0) return -1;
    h->recv_used -= (uint32_t)n;
    return 0;
}

/* s's request ended or s closes: the caller no longer holds its DATA. */
static int release(sl_h2 *h, sl_h2_stream *s)
{
    if (s->held == 0) return 0;
    h->held -= s->held;
    s->held = 0;
    return give_back(h);
}

/* The client made us work for nothing (h2.h, "Floods"): n more of debt.
 * Returns 0, or -1 once the debt passed SL_H2_MAX_WASTE (GOAWAY
 * ENHANCE_YOUR_CALM, why says of what). */
static int waste(sl_h2 *h, unsigned n, const char *why)
{
    h->waste += n;
    if (h->waste <= SL_H2_MAX_WASTE) return 0;
    return conn_error(h, SL_H2_ENHANCE_YOUR_CALM, why);
}

/* Closes s: the caller's callback, then s is freed (or kept for reuse). */
static void stream_close(sl_h2 *h, sl_h2_stream *s)
{
    sl_h2_stream **pp = slot_of(h, s->id);
    while (*pp != s) pp = &(*pp)->hnext;
    *pp = s->hnext;
    if (s->pend != NULL) { /* off the blocked queue */
        sl_h2_stream **q = &h->blocked, *prev = NULL;
        while (*q != s) prev = *q, q = &(*q)->qnext;
        *q = s->qnext;
        if (h->blocked_tail == s) h->blocked_tail = prev;
        free(s->pend);
    }
    release(h, s);
    h->nstreams--;
    h->cb->closed(h->arg, s);
    if (h->nfree < KEEP_FREE) {
        s->hnext = h->free_list;
        h->free_list = s;
        h->nfree++;
    } else {
        free(s);
    }
}

void sl_h2_reset(sl_h2 *h, sl_h2_stream *s, uint32_t code)
{
    frame_u32(h, F_RST_STREAM, s->id, code);
    stream_close(h, s);
}

/* ---- answers --------------------------------------------------------------------- */

/* A header block as HEADERS (+ CONTINUATION past the client's frame size),
 * flags END_STREAM or 0. */
static int put_block(sl_h2 *h, uint32_t id, const uint8_t *p, size_t n, uint8_t flags)
{
    size_t upd = h->table_update ? 1 : 0; /* a size update to 0: we never index */
    h->table_update = 0;
    size_t total = n + upd, off = 0;
    uint8_t type = F_HEADERS;
    for (;;) {
        size_t len = total - off < h->peer_frame ? total - off : h->peer_frame;
        int last = off + len == total;
        if (frame_hdr(h, len, type, (type == F_HEADERS ? flags : 0) | (last ? FL_END_HEADERS : 0),
                      id) != 0)
            return -1;
        uint8_t *o = h->out + h->out_len;
        size_t from = off;
        if (upd && from == 0) *o++ = 0x20, from = 1;
        memcpy(o, p + (from - upd), off + len - from);
        h->out_len += len;
        if (last) return 0;
        off += len;
        type = F_CONTINUATION;
    }
}

/* Sends what of s's pending body the windows allow, then, the body all
 * sent, its trailers; returns 1 when all went, 0 when it waits, -1 out of
 * memory. */
static int send_pending(sl_h2 *h, sl_h2_stream *s)
{
    while (s->pend_off < s->pend_body) {
        int64_t win = s->send_window < h->send_window ? s->send_window : h->send_window;
        if (win <= 0) return 0;
        size_t n = s->pend_body - s->pend_off;
        if ((int64_t)n > win) n = (size_t)win;
        if (n > h->peer_frame) n = h->peer_frame;
        if (frame(h, F_DATA, 0, s->id, s->pend + s->pend_off, n) != 0) return -1;
        s->pend_off += n;
        s->send_window -= (int64_t)n;
        h->send_window -= (int64_t)n;
    }
    size_t tlen = s->pend_len - s->pend_body;
    if (tlen == 0) return frame(h, F_DATA, FL_END_STREAM, s->id, NULL, 0) == 0 ? 1 : -1;
    return put_block(h, s->id, s->pend + s->pend_body, tlen, FL_END_STREAM) == 0 ? 1 : -1;
}

/* s sent its last frame: it closes (RST_STREAM NO_ERROR first if the
 * client is still sending). */
static void answered(sl_h2 *h, sl_h2_stream *s)
{
    if (!s->remote_closed)
        frame_u32(h, F_RST_STREAM, s->id, SL_H2_NO_ERROR);
    else if (h->waste > 0) /* a call answered whole pays back a frame of debt */
        h->waste--;
    stream_close(h, s);
}

int sl_h2_respond(sl_h2 *h, sl_h2_stream *s, const uint8_t *hdr, size_t hlen, const uint8_t *body,
                  size_t blen, const uint8_t *tr, size_t tlen)
{
    if (h->dead || s->answered) return h->nomem ? -1 : 0;
    s->answered = 1;
    int ends = body == NULL && tr == NULL;
    if (put_block(h, s->id, hdr, hlen, ends ? FL_END_STREAM : 0) != 0) return -1;
    if (ends) {
        answered(h, s);
        return 0;
    }
    /* the usual case: all of the body fits the windows, and one frame */
    int64_t win = s->send_window < h->send_window ? s->send_window : h->send_window;
    if ((int64_t)blen <= win && blen <= h->peer_frame) {
        if (blen > 0 || tr == NULL) {
            if (frame(h, F_DATA, tr == NULL ? FL_END_STREAM : 0, s->id, body, blen) != 0) return -1;
            s->send_window -= (int64_t)blen;
            h->send_window -= (int64_t)blen;
        }
        if (tr != NULL && put_block(h, s->id, tr, tlen, FL_END_STREAM) != 0) return -1;
        answered(h, s);
        return 0;
    }
    /* what does not fit now waits in s */
    if ((s->pend = malloc(blen + tlen + 1)) == NULL) {
        h->nomem = h->dead = 1;
        h->err = "out of memory";
        return -1;
    }
    if (blen) memcpy(s->pend, body, blen);
    if (tlen) memcpy(s->pend + blen, tr, tlen);
    s->pend_body = blen;
    s->pend_len = blen + tlen;
    s->pend_off = 0;
    s->qnext = NULL;
    if (h->blocked_tail)
        h->blocked_tail->qnext = s;
    else
        h->blocked = s;
    h->blocked_tail = s;
    int rc = send_pending(h, s);
    if (rc < 0) return -1;
    if (rc == 1) answered(h, s);
    return 0;
}

/* The windows grew: the waiting answers go as far as they can now. */
static int unblock(sl_h2 *h)
{
    sl_h2_stream *s = h->blocked;
    while (s != NULL) {
        sl_h2_stream *next = s->qnext; /* s may close */
        int rc = send_pending(h, s);
        if (rc < 0) return -1;
        if (rc == 1) answered(h, s);
        s = next;
    }
    return 0;
}

/* ---- the connection ---------------------------------------------------------------- */

sl_h2 *sl_h2_new(const sl_h2_cbs *cb, void *arg, size_t user_size)
{
    sl_h2 *h = calloc(1, sizeof *h);
    if (h == NULL) return NULL;
    h->cb = cb;
    h->arg = arg;
    h->user_size = (user_size + 15) & ~(size_t)15;
    h->send_window = 65535;
    h->peer_window = 65535;
    h->peer_frame = 16384;
    h->hold_bound = UINT64_MAX; /* no hold_data: everything is given back */
    sl_hpack_init(&h->dec);
    uint8_t s[18];
    static const uint16_t ids[3] = {0x3 /* MAX_CONCURRENT_STREAMS */,
                                    0x6 /* MAX_HEADER_LIST_SIZE */,
                                    0x9 /* NO_RFC7540_PRIORITIES */};
    const uint32_t vals[3] = {SL_H2_MAX_STREAMS, SL_H2_MAX_HEADER_LIST, 1};
    for (int i = 0; i < 3; i++) {
        s[6 * i] = (uint8_t)(ids[i] >> 8), s[6 * i + 1] = (uint8_t)ids[i];
        put32(s + 6 * i + 2, vals[i]);
    }
    if (frame(h, F_SETTINGS, 0, 0, s, sizeof s) != 0) {
        free(h->out);
        free(h);
        return NULL;
    }
    return h;
}

void sl_h2_free(sl_h2 *h)
{
    if (h == NULL) return;
    for (int i = 0; i < BUCKETS; i++)
        while (h->bucket[i] != NULL) stream_close(h, h->bucket[i]);
    while (h->free_list != NULL) {
        sl_h2_stream *s = h->free_list;
        h->free_list = s->hnext;
        free(s);
    }
    sl_hpack_free(&h->dec);
    free(h->block);
    free(h->out);
    free(h);
}

int sl_h2_goaway(sl_h2 *h, uint32_t code, const char *msg)
{
    if (h->goaway_sent) return 0;
    size_t n = msg ? strlen(msg) : 0;
    if (frame_hdr(h, 8 + n, F_GOAWAY, 0, 0) != 0) return -1;
    put32(h->out + h->out_len, h->last_id);
    put32(h->out + h->out_len + 4, code);
    if (n) memcpy(h->out + h->out_len + 8, msg, n);
    h->out_len += 8 + n;
    h->goaway_sent = 1;
    h->goaway_last = h->last_id;
    return 0;
}

void sl_h2_hold_data(sl_h2 *h, uint64_t bound)
{
    h->hold_data = 1;
    h->hold_bound = bound > SL_H2_WINDOW ? bound : SL_H2_WINDOW;
}

int sl_h2_partial(const sl_h2 *h) { return h->cont_id != 0; }

int sl_h2_done(const sl_h2 *h)
{
    return h->dead || ((h->goaway_sent || h->goaway_recv) && h->nstreams == 0);
}

/* ---- frames in ----------------------------------------------------------------------- */

/* What a header block's fields go to. */
typedef struct fields {
    sl_h2 *h;
    sl_h2_stream *s; /* NULL: decoded for HPACK's state only */
    size_t list;     /* header list size so far (RFC 9113 6.5.2) */
    uint32_t reset;  /* nonzero: reset s with it once the block is decoded */
} fields;

static int on_field(void *arg, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    fields *f = arg;
    if (f->s == NULL) return 1;
    f->list += nlen + vlen + 32;
    int rc = f->list > SL_H2_MAX_HEADER_LIST
                 ? SL_H2_ENHANCE_YOUR_CALM /* past what our SETTINGS said */
                 : f->h->cb->field(f->h->arg, f->s, name, nlen, value, vlen);
    if (rc == 0) return 0;
    f->reset = (uint32_t)rc;
    return 1;
}

/* A whole header block for stream id. */
static int header_block(sl_h2 *h, uint32_t id, uint8_t flags, int selfdep, const uint8_t *p,
                        size_t n)
{
    fields f = {h, NULL, 0, 0};
    sl_h2_stream *s = sl_h2_find(h, id);
    int fresh = 0;
    if (s == NULL && id > h->last_id) { /* a new stream */
        h->last_id = id;
        if (!(h->goaway_sent && id > h->goaway_last) && h->nstreams < SL_H2_MAX_STREAMS) {
            if ((s = stream_open(h, id)) == NULL) {
                h->nomem = h->dead = 1;
                h->err = "out of memory";
                return -1;
            }
            fresh = 1;
            int rc = h->cb->begin(h->arg, s);
            if (rc != 0) f.reset = (uint32_t)rc;
            f.s = f.reset ? NULL : s;
        } else if (!(h->goaway_sent && id > h->goaway_last)) {
            if (frame_u32(h, F_RST_STREAM, id, SL_H2_REFUSED_STREAM) != 0) return -1;
            if (waste(h, 1, "too many streams refused (beyond SETTINGS_MAX_CONCURRENT_STREAMS)") !=
                0)
                return -1;
        }
    }
    int rc = sl_hpack_decode(&h->dec, p, n, on_field, &f);
    if (rc == SL_HPACK_NOMEM) {
        h->nomem = h->dead = 1;
        h->err = "out of memory";
        return -1;
    }
    if (rc != 0) return conn_error(h, SL_H2_COMPRESSION_ERROR, "malformed header block (HPACK)");
    if (s == NULL) return 0; /* closed, refused or after our GOAWAY: ignored */
    if (!fresh) {            /* trailers: they end the request, or it is malformed */
        if (s->remote_closed)
            f.reset = SL_H2_STREAM_CLOSED;
        else if (!(flags & FL_END_STREAM))
            f.reset = SL_H2_PROTOCOL_ERROR;
    }
    if (selfdep) f.reset = SL_H2_PROTOCOL_ERROR;
    if (f.reset) {
        sl_h2_reset(h, s, f.reset);
        return f.reset == SL_H2_REFUSED_STREAM
                   ? waste(h, 1, "too many streams refused (calls in flight)")
                   : 0;
    }
    if (flags & FL_END_STREAM) {
        s->remote_closed = 1;
        if (s->answered) { /* answered early: its RST_STREAM is sent */
            stream_close(h, s);
            return 0;
        }
        if (release(h, s) != 0) return -1;
        h->cb->end(h->arg, s);
    }
    return 0;
}

/* The payload of a padded frame, without its padding: 0, or -1 (a
 * connection error). */
static int unpad(sl_h2 *h, uint8_t flags, const uint8_t **p, size_t *n)
{
    if (!(flags & FL_PADDED)) return 0;
    if (*n < 1) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "padded frame without its length");
    size_t pad = (*p)[0];
    if (pad >= *n) return conn_error(h, SL_H2_PROTOCOL_ERROR, "padding longer than the frame");
    (*p)++;
    *n -= 1 + pad;
    return 0;
}

static int on_headers(sl_h2 *h, uint32_t id, uint8_t flags, const uint8_t *p, size_t n)
{
    if (id == 0 || !(id & 1))
        return conn_error(h, SL_H2_PROTOCOL_ERROR, "HEADERS on stream 0 or an even stream");
    if (unpad(h, flags, &p, &n) != 0) return -1;
    int selfdep = 0;
    if (flags & FL_PRIORITY) {
        if (n < 5)
            return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "HEADERS too short for its priority");
        selfdep = (get32(p) & MAX_WINDOW) == id;
        p += 5, n -= 5;
    }
    if (n == 0 && waste(h, 1, "too many empty HEADERS frames") != 0) return -1;
    if (flags & FL_END_HEADERS) return header_block(h, id, flags, selfdep, p, n);
    if (n > SL_H2_MAX_BLOCK)
        return conn_error(h, SL_H2_ENHANCE_YOUR_CALM, "header block too large");
    if (n > h->block_cap) {
        uint8_t *b = realloc(h->block, n);
        if (b == NULL) {
            h->nomem = h->dead = 1;
            h->err = "out of memory";
            return -1;
        }
        h->block = b;
        h->block_cap = n;
    }
    if (n) memcpy(h->block, p, n);
    h->block_len = n;
    h->cont_id = id;
    h->cont_frames = 0;
    h->cont_flags = flags;
    h->cont_selfdep = selfdep;
    return 0;
}

static int on_continuation(sl_h2 *h, uint32_t id, uint8_t flags, const uint8_t *p, size_t n)
{
    if (id != h->cont_id) return conn_error(h, SL_H2_PROTOCOL_ERROR, "unexpected CONTINUATION");
    if (++h->cont_frames > SL_H2_MAX_CONTINUATIONS)
        return conn_error(h, SL_H2_ENHANCE_YOUR_CALM,
                          "a header block in too many CONTINUATION frames");
    if (n == 0 && waste(h, 1, "too many empty CONTINUATION frames") != 0) return -1;
    if (h->block_len + n > SL_H2_MAX_BLOCK)
        return conn_error(h, SL_H2_ENHANCE_YOUR_CALM, "header block too large");
    if (h->block_len + n > h->block_cap) {
        size_t cap = h->block_cap * 2 > h->block_len + n ? h->block_cap * 2 : h->block_len + n;
        uint8_t *b = realloc(h->block, cap);
        if (b == NULL) {
            h->nomem = h->dead = 1;
            h->err = "out of memory";
            return -1;
        }
        h->block = b;
        h->block_cap = cap;
    }
    if (n) memcpy(h->block + h->block_len, p, n);
    h->block_len += n;
    if (!(flags & FL_END_HEADERS)) return 0;
    h->cont_id = 0;
    return header_block(h, id, h->cont_flags, h->cont_selfdep, h->block, h->block_len);
}

static int data_frame(sl_h2 *h, uint32_t id, uint8_t flags, const uint8_t *p, size_t n)
{
    if (id == 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "DATA on stream 0");
    if (id > h->last_id) return conn_error(h, SL_H2_PROTOCOL_ERROR, "DATA on an idle stream");
    size_t whole = n; /* padding counts against the windows too */
    if (h->recv_used + whole > SL_H2_WINDOW)
        return conn_error(h, SL_H2_FLOW_CONTROL_ERROR, "DATA beyond the connection's window");
    h->recv_used += (uint32_t)whole; /* given back by on_data, once held is known */
    if (unpad(h, flags, &p, &n) != 0) return -1;
    if (n == 0 && !(flags & FL_END_STREAM) && waste(h, 1, "too many empty DATA frames") != 0)
        return -1;
    sl_h2_stream *s = sl_h2_find(h, id);
    if (s == NULL) /* closed: ignored */
        return waste(h, 1, "too many DATA frames on closed streams");
    if (s->remote_closed) {
        sl_h2_reset(h, s, SL_H2_STREAM_CLOSED);
        return 0;
    }
    if (s->recv_used + whole > SL_H2_WINDOW) {
        sl_h2_reset(h, s, SL_H2_FLOW_CONTROL_ERROR);
        return 0;
    }
    s->recv_used += (uint32_t)whole;
    if (!(flags & FL_END_STREAM) && s->recv_used >= SL_H2_WINDOW / 2) {
        if (frame_u32(h, F_WINDOW_UPDATE, id, s->recv_used) != 0) return -1;
        s->recv_used = 0;
    }
    if (n > 0 && !s->answered) {
        int rc = h->cb->data(h->arg, s, p, n);
        if (rc != 0) {
            sl_h2_reset(h, s, (uint32_t)rc);
            return 0;
        }
        if (sl_h2_find(h, id) != s) return 0; /* the caller answered it early: closed */
        if (h->hold_data && !s->answered) {   /* the caller holds n more bytes */
            s->held += n;
            h->held += n;
        }
    }
    if (flags & FL_END_STREAM) {
        s->remote_closed = 1;
        if (s->answered) {
            stream_close(h, s);
            return 0;
        }
        if (release(h, s) != 0) return -1;
        h->cb->end(h->arg, s);
    }
    return 0;
}

/* DATA, then the connection's window given back (as far as what is held
 * allows). */
static int on_data(sl_h2 *h, uint32_t id, uint8_t flags, const uint8_t *p, size_t n)
{
    if (data_frame(h, id, flags, p, n) != 0) return -1;
    return give_back(h);
}

static int on_settings(sl_h2 *h, uint32_t id, uint8_t flags, const uint8_t *p, size_t n)
{
    if (id != 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "SETTINGS on a stream");
    if (flags & FL_ACK)
        return n == 0 ? 0 : conn_error(h, SL_H2_FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
    if (n % 6 != 0) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6");
    int grew = 0;
    for (size_t i = 0; i < n; i += 6) {
        unsigned k = (unsigned)p[i] << 8 | p[i + 1];
        uint32_t v = get32(p + i + 2);
        switch (k) {
        case 0x1: h->table_update = 1; break; /* HEADER_TABLE_SIZE */
        case 0x2:                             /* ENABLE_PUSH */
        case 0x8:                             /* ENABLE_CONNECT_PROTOCOL */
        case 0x9:                             /* NO_RFC7540_PRIORITIES */
            if (v > 1) return conn_error(h, SL_H2_PROTOCOL_ERROR, "SETTINGS value not 0 or 1");
            break;
        case 0x4: { /* INITIAL_WINDOW_SIZE: applies to the open streams too */
            if (v > MAX_WINDOW)
                return conn_error(h, SL_H2_FLOW_CONTROL_ERROR,
                                  "SETTINGS_INITIAL_WINDOW_SIZE too large");
            int64_t delta = (int64_t)v - h->peer_window;
            for (int b = 0; b < BUCKETS; b++)
                for (sl_h2_stream *s = h->bucket[b]; s; s = s->hnext) {
                    s->send_window += delta;
                    if (s->send_window > MAX_WINDOW)
                        return conn_error(h, SL_H2_FLOW_CONTROL_ERROR,
                                          "a stream's window overflows");
                }
            grew |= delta > 0;
            h->peer_window = v;
            break;
        }
        case 0x5: /* MAX_FRAME_SIZE */
            if (v < 16384 || v > 0xffffff)
                return conn_error(h, SL_H2_PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
            h->peer_frame = v;
            break;
        default: break; /* MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE, unknown */
        }
    }
    h->settings_ok = 1;
    if (frame(h, F_SETTINGS, FL_ACK, 0, NULL, 0) != 0) return -1;
    return grew ? unblock(h) : 0;
}

static int on_window_update(sl_h2 *h, uint32_t id, const uint8_t *p, size_t n)
{
    if (n != 4) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes");
    uint32_t inc = get32(p) & MAX_WINDOW;
    if (id == 0) {
        if (inc == 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
        if (h->send_window + inc > MAX_WINDOW)
            return conn_error(h, SL_H2_FLOW_CONTROL_ERROR, "the connection's window overflows");
        h->send_window += inc;
        if (h->blocked == NULL)
            return waste(h, 1, "too many WINDOW_UPDATE frames with nothing to send");
        return unblock(h);
    }
    if (id > h->last_id)
        return conn_error(h, SL_H2_PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
    sl_h2_stream *s = sl_h2_find(h, id);
    if (s == NULL || s->pend == NULL) {
        if (waste(h, 1, "too many WINDOW_UPDATE frames with nothing to send") != 0) return -1;
        if (s == NULL) return 0;
    }
    if (inc == 0 || s->send_window + inc > MAX_WINDOW) {
        sl_h2_reset(h, s, inc == 0 ? SL_H2_PROTOCOL_ERROR : SL_H2_FLOW_CONTROL_ERROR);
        return 0;
    }
    s->send_window += inc;
    return s->pend != NULL ? unblock(h) : 0;
}

/* One frame: its header read, its payload p[0..n). */
static int on_frame(sl_h2 *h, uint8_t type, uint8_t flags, uint32_t id, const uint8_t *p, size_t n)
{
    if (h->cont_id != 0 && type != F_CONTINUATION)
        return conn_error(h, SL_H2_PROTOCOL_ERROR, "a header block cut by another frame");
    if (!h->settings_ok && (type != F_SETTINGS || (flags & FL_ACK)))
        return conn_error(h, SL_H2_PROTOCOL_ERROR, "the first frame is not SETTINGS");
    switch (type) {
    case F_DATA: return on_data(h, id, flags, p, n);
    case F_HEADERS: return on_headers(h, id, flags, p, n);
    case F_CONTINUATION: return on_continuation(h, id, flags, p, n);
    case F_SETTINGS: return on_settings(h, id, flags, p, n);
    case F_WINDOW_UPDATE: return on_window_update(h, id, p, n);
    case F_PRIORITY: { /* parsed, checked, ignored */
        if (id == 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "PRIORITY on stream 0");
        if (waste(h, 1, "too many PRIORITY frames") != 0) return -1;
        sl_h2_stream *s = sl_h2_find(h, id);
        uint32_t code = n != 5                          ? SL_H2_FRAME_SIZE_ERROR
                        : (get32(p) & MAX_WINDOW) == id ? SL_H2_PROTOCOL_ERROR
                                                        : 0;
        if (code == 0) return 0;
        if (s != NULL) { /* a stream error */
            sl_h2_reset(h, s, code);
            return 0;
        }
        if (id > h->last_id) /* idle: no RST_STREAM may name it (RFC 9113 6.4) */
            return conn_error(h, code,
                              code == SL_H2_FRAME_SIZE_ERROR ? "PRIORITY not 5 bytes"
                                                             : "PRIORITY of a stream on itself");
        return 0; /* a closed stream's: ignored */
    }
    case F_RST_STREAM: {
        if (id == 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "RST_STREAM on stream 0");
        if (n != 4) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes");
        if (id > h->last_id)
            return conn_error(h, SL_H2_PROTOCOL_ERROR, "RST_STREAM on an idle stream");
        sl_h2_stream *s = sl_h2_find(h, id);
        if (s != NULL) stream_close(h, s);
        return waste(h, 2, "too many streams reset by the client (rapid reset)");
    }
    case F_PING:
        if (id != 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "PING on a stream");
        if (n != 8) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "PING not 8 bytes");
        if (flags & FL_ACK) return waste(h, 1, "too many PING ACKs (we sent no PING)");
        return frame(h, F_PING, FL_ACK, 0, p, 8);
    case F_GOAWAY:
        if (id != 0) return conn_error(h, SL_H2_PROTOCOL_ERROR, "GOAWAY on a stream");
        if (n < 8) return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes");
        h->goaway_recv = 1;
        return 0;
    case F_PUSH_PROMISE: return conn_error(h, SL_H2_PROTOCOL_ERROR, "PUSH_PROMISE from a client");
    default: /* unknown types are ignored (RFC 9113 4.1) */
        return waste(h, 1, "too many frames of unknown types");
    }
}

ssize_t sl_h2_recv(sl_h2 *h, const uint8_t *p, size_t n)
{
    if (h->dead) return -1;
    if (!h->preface_ok) {
        size_t k = n < PREFACE_LEN ? n : PREFACE_LEN;
        if (memcmp(p, PREFACE, k) != 0) { /* not HTTP/2: no GOAWAY (RFC 9113 3.4) */
            h->dead = 1;
            h->err = "not the HTTP/2 client preface";
            return -1;
        }
        if (k < PREFACE_LEN) return 0;
        h->preface_ok = 1;
        return PREFACE_LEN;
    }
    if (n < 9) return 0;
    size_t len = (size_t)p[0] << 16 | (size_t)p[1] << 8 | p[2];
    if (len > SL_H2_MAX_FRAME)
        return conn_error(h, SL_H2_FRAME_SIZE_ERROR, "frame larger than SETTINGS_MAX_FRAME_SIZE");
    if (n < 9 + len) return 0;
    if (on_frame(h, p[3], p[4], get32(p + 5) & MAX_WINDOW, p + 9, len) != 0) return -1;
    return (ssize_t)(9 + len);
}
