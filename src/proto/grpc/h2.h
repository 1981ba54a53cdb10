/*
 * h2.h -- the server side of HTTP/2 (RFC 9113) that gRPC's unary calls
 * use, for sluiced's gRPC module (grpc.c).  Bytes in, callbacks out,
 * frames appended to an output buffer: no socket.
 *
 * What it does: the client's preface; SETTINGS both ways (ours:
 * SL_H2_MAX_STREAMS concurrent streams, SL_H2_MAX_HEADER_LIST bytes of
 * header list, no RFC 7540 priorities; the frame size and windows are
 * the defaults) and their ACK; HEADERS + CONTINUATION (HPACK, hpack.h)
 * with padding and priority (parsed, ignored); DATA with padding; flow
 * control both ways (we give back what a client sent once half a window
 * is used; our DATA waits for the client's windows); PING (ACK);
 * RST_STREAM; PRIORITY (checked, ignored); GOAWAY both ways; stream
 * states and RFC 9113's errors: a connection error sends GOAWAY with its
 * code and ends the connection, a stream error RST_STREAM; a stream past
 * SL_H2_MAX_STREAMS is refused (REFUSED_STREAM).
 *
 * Floods (RFC 9113 10.5; CVE-2023-44487 "rapid reset", CVE-2019-9512..18,
 * CVE-2024-27316): frames that make us do something for nothing are
 * counted as the client's debt -- 2 for each RST_STREAM it sends, 1 for a
 * stream refused, an empty DATA (without END_STREAM), HEADERS or
 * CONTINUATION frame, a PRIORITY, a frame of an unknown type, a
 * WINDOW_UPDATE when no answer waits for one, a PING ACK (we send no
 * PING), DATA on a closed stream -- and each call answered whole pays 1
 * back (the debt never goes below 0: no credit is banked).  A debt past
 * SL_H2_MAX_WASTE ends the connection with GOAWAY ENHANCE_YOUR_CALM, as
 * does a header block in more than SL_H2_MAX_CONTINUATIONS CONTINUATION
 * frames.  So a client that resets fewer than a third of its calls is
 * never cut, and a flood is cut after about a thousand frames.  PING and
 * SETTINGS are answered (their ACKs are output, held by net.c's bounds).
 *
 * Request bodies (sl_h2_hold_data): the caller may ask that DATA it took
 * stay counted against a bound of its own (at least SL_H2_WINDOW) until
 * the stream's request ends or the stream closes: the connection's
 * WINDOW_UPDATEs give back held bytes only while what is held plus the
 * window the client may still send stays within the bound, so a client
 * can have at most that many bytes of unfinished bodies in the caller's
 * buffers, whatever the number of streams.
 *
 * What it leaves out (gRPC's unary calls need none of it): server push,
 * RFC 7540's priority tree, CONNECT, a settings ACK timeout.  Frames on a
 * stream that closed are ignored (RFC 9113 5.1 allows it; a stream we
 * reset may still have frames in flight), but counted ("Floods").
 *
 * A stream carries user_size bytes of the caller's (sl_h2_new), valid
 * from the begin callback to the closed one.  The caller may answer
 * (sl_h2_respond) inside a callback -- the data callback included, before
 * the request ended: the stream then closes (RST_STREAM NO_ERROR) and the
 * rest of its DATA is not read into memory -- or later.
 */
#ifndef SL_H2_H
#define SL_H2_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hpack.h"

#define SL_H2_MAX_STREAMS       100         /* SETTINGS_MAX_CONCURRENT_STREAMS */
#define SL_H2_MAX_HEADER_LIST   (16 * 1024) /* SETTINGS_MAX_HEADER_LIST_SIZE */
#define SL_H2_MAX_FRAME         16384       /* frame payload we take: the default */
#define SL_H2_WINDOW            65535       /* our receive windows: the default */
#define SL_H2_MAX_BLOCK         (64 * 1024) /* bytes of one header block */
#define SL_H2_MAX_CONTINUATIONS 32          /* CONTINUATION frames of one header block */
#define SL_H2_MAX_WASTE         1000        /* frames that do no work a client may owe */

/* RFC 9113's error codes. */
enum sl_h2_code {
    SL_H2_NO_ERROR = 0,
    SL_H2_PROTOCOL_ERROR = 1,
    SL_H2_INTERNAL_ERROR = 2,
    SL_H2_FLOW_CONTROL_ERROR = 3,
    SL_H2_STREAM_CLOSED = 5,
    SL_H2_FRAME_SIZE_ERROR = 6,
    SL_H2_REFUSED_STREAM = 7,
    SL_H2_CANCEL = 8,
    SL_H2_COMPRESSION_ERROR = 9,
    SL_H2_ENHANCE_YOUR_CALM = 11,
};

typedef struct sl_h2 sl_h2;
typedef struct sl_h2_stream sl_h2_stream;

/* What the caller hears.  A callback returning nonzero (an sl_h2_code)
 * resets the stream with it.  After `end` or after an answer
 * (sl_h2_respond) the stream may be gone: touch it no more. */
typedef struct sl_h2_cbs {
    /* a request's HEADERS opened stream s: set its user bytes (not zeroed) */
    int (*begin)(void *arg, sl_h2_stream *s);
    /* one of its request fields (not its trailers'): valid during the call */
    int (*field)(void *arg, sl_h2_stream *s, const uint8_t *name, size_t nlen, const uint8_t *value,
                 size_t vlen);
    /* bytes of its DATA (padding removed) */
    int (*data)(void *arg, sl_h2_stream *s, const uint8_t *p, size_t n);
    /* the request is complete (END_STREAM) */
    void (*end)(void *arg, sl_h2_stream *s);
    /* s closes (answered, reset by either side, or the connection freed):
     * free what its user bytes hold */
    void (*closed)(void *arg, sl_h2_stream *s);
} sl_h2_cbs;

/* A server connection: SETTINGS queued in its output.  user_size: bytes
 * of the caller's in each stream.  NULL when out of memory. */
sl_h2 *sl_h2_new(const sl_h2_cbs *cb, void *arg, size_t user_size);
/* Frees h, closing its streams (the closed callback for each). */
void sl_h2_free(sl_h2 *h);

/* Processes what starts p[0..n): the preface or one whole frame.  Returns
 * the bytes it took (0: no whole frame yet), or -1: the connection is
 * over (a connection error -- its GOAWAY is in the output, unless the
 * client spoke no HTTP/2 at all -- or out of memory: sl_h2_nomem), after
 * which every call returns -1.  sl_h2_error says why. */
ssize_t sl_h2_recv(sl_h2 *h, const uint8_t *p, size_t n);
const char *sl_h2_error(const sl_h2 *h);
int sl_h2_nomem(const sl_h2 *h);

/* The output made so far, and taking it: the caller sends out[0..len)
 * and calls sl_h2_out_taken. */
const uint8_t *sl_h2_out(const sl_h2 *h, size_t *len);
void sl_h2_out_taken(sl_h2 *h);

/* Stream s's id and user bytes; the open stream of that id, or NULL. */
uint32_t sl_h2_id(const sl_h2_stream *s);
void *sl_h2_user(sl_h2_stream *s);
sl_h2_stream *sl_h2_find(sl_h2 *h, uint32_t id);

/* Answers s: a HEADERS frame of the HPACK block hdr, then body as DATA
 * (as far as the client's windows let it now; the rest and the trailers
 * wait for its WINDOW_UPDATEs, copied), then the trailers' block tr with
 * END_STREAM; without body and tr, hdr ends the stream.  s closes once
 * all of it was sent (at once in the usual case: the closed callback runs
 * inside this call).  Returns 0, or -1 when out of memory (the
 * connection is then over). */
int sl_h2_respond(sl_h2 *h, sl_h2_stream *s, const uint8_t *hdr, size_t hlen, const uint8_t *body,
                  size_t blen, const uint8_t *tr, size_t tlen);

/* Resets s (RST_STREAM with code); s closes. */
void sl_h2_reset(sl_h2 *h, sl_h2_stream *s, uint32_t code);

/* Sends GOAWAY with code and debug text msg (may be NULL), naming the
 * last stream the client opened; streams it opens later are ignored.  At
 * most once; returns 0 or -1 when out of memory. */
int sl_h2_goaway(sl_h2 *h, uint32_t code, const char *msg);

/* From now on, DATA taken by the data callback is held until its
 * stream's request ends (END_STREAM: the end callback) or the stream
 * closes, and the caller holds at most bound bytes of unfinished request
 * bodies per connection (bound < SL_H2_WINDOW counts as SL_H2_WINDOW):
 * the connection's WINDOW_UPDATEs give back held bytes only while the
 * bytes held plus the window the client may still send stay within
 * bound -- with bound == SL_H2_WINDOW, none: held bytes stay counted
 * against the connection's receive window.  A client sending more waits
 * for requests to end.  A stream's own window is given back as it sends
 * (one body may be longer than SL_H2_WINDOW), so the caller must bound a
 * stream's body below bound (answering early past its bound), or it
 * could never end. */
void sl_h2_hold_data(sl_h2 *h, uint64_t bound);

/* 1: a header block is arriving (HEADERS without END_HEADERS, waiting for
 * its CONTINUATION): a request has begun that is not whole, though no
 * stream callback ran yet. */
int sl_h2_partial(const sl_h2 *h);

/* 1: nothing more will be done -- a connection error, or GOAWAY sent or
 * received and no stream open. */
int sl_h2_done(const sl_h2 *h);

#endif
