/*
 * h1.h -- HTTP/1.x request framing: bytes in, one request's parts out, as
 * offsets into those bytes.  No socket, no allocation, no state kept
 * between calls: the HTTP module (http.c) hands it what a connection has
 * sent so far, and a request not yet whole is parsed again from its start
 * when more bytes arrive (bounded: a request line over SL_HTTP_MAX_URI or
 * headers over SL_HTTP_MAX_HEADERS are refused as soon as they are seen).
 * The parsing itself is nodejs's http-parser (Debian's libhttp-parser-dev).
 */
#ifndef SL_H1_H
#define SL_H1_H

#include <stddef.h>
#include <stdint.h>

/* Bounds on one request.  A request line (method, target, version) longer
 * than SL_HTTP_MAX_URI is answered 414, headers (names, values and
 * separators) longer than SL_HTTP_MAX_HEADERS, or more than
 * SL_H1_MAX_FIELDS of them, 431; a body (Content-Length) longer than
 * SL_HTTP_MAX_BODY 413. */
#define SL_HTTP_MAX_URI     8192
#define SL_HTTP_MAX_HEADERS 8192
#define SL_HTTP_MAX_BODY    (64 * 1024)
#define SL_H1_MAX_FIELDS    100

/* Methods, one bit each (routes take a set). */
enum {
    SL_HM_GET = 1 << 0,
    SL_HM_POST = 1 << 1,
    SL_HM_HEAD = 1 << 2,
    SL_HM_PUT = 1 << 3,
    SL_HM_DELETE = 1 << 4,
    SL_HM_OPTIONS = 1 << 5,
    SL_HM_TRACE = 1 << 6,
    SL_HM_CONNECT = 1 << 7,
    SL_HM_PATCH = 1 << 8,
    SL_HM_OTHER = 1 << 9, /* any other method http-parser knows (WebDAV's, ...) */
};

/* A part of the parsed bytes: p[off .. off + len). */
typedef struct sl_h1_span {
    uint32_t off, len;
} sl_h1_span;

typedef struct sl_h1_req {
    unsigned method;         /* an SL_HM_* bit */
    const char *method_name; /* "GET": http-parser's name for it (static) */
    int major, minor;        /* the version as sent */
    int keep_alive;          /* the connection stays open after the answer */
    sl_h1_span target;       /* the request target as sent */
    sl_h1_span body;         /* Content-Length bytes; len 0: none */
    int nfields;
    sl_h1_span name[SL_H1_MAX_FIELDS], value[SL_H1_MAX_FIELDS];
    size_t used; /* bytes of the whole request (head and body) */
    /* a refused request: the status to answer it with, and why */
    int status;
    const char *why;
} sl_h1_req;

enum {
    SL_H1_DONE = 1, /* r holds one whole request, r->used bytes */
    SL_H1_MORE = 0, /* what is there is a request's beginning: wait for more */
    SL_H1_BAD = -1, /* not a request we serve: answer r->status (r->why) and close */
};

/* Parses the request at the start of p[0..len) into *r.  Returns an
 * SL_H1_* value.  A request with Transfer-Encoding: chunked is refused
 * (411: send Content-Length); the version is the caller's to judge.  The
 * spans of r point into p. */
int sl_h1_parse(const char *p, size_t len, sl_h1_req *r);

#endif
