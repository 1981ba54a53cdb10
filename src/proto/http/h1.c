/*
 * h1.c -- HTTP/1.x request framing on http-parser (h1.h).
 *
 * One request per call: a fresh parser runs over the bytes and pauses
 * itself at the end of the first message, so what it returns is exactly
 * that request's length; the callbacks record the spans of the target,
 * each header's name and value, and the body.  A request that is not
 * whole leaves the parser at the end of the bytes having reported the
 * spans seen so far, so its bounds are checked before it is whole.
 *
 * http-parser is lenient where RFC 9112 is strict, and each leniency is
 * a request smuggled past a proxy that reads the same bytes the strict
 * way: "Content-Length : 35" was honoured (a proxy ignores it and sends
 * the 35 bytes on as a second request, which this server took as body).
 * So the head's raw bytes are also checked here (strict_head), after
 * http-parser and on the same bytes: every line ends with CRLF (no bare
 * LF, no CR elsewhere), no header line begins with whitespace (obs-fold),
 * a field name is tokens up to its colon (no whitespace before it), a
 * value holds no control byte but HT, and the body's length is never
 * ambiguous -- one Content-Length of digits only, no Content-Length with
 * Transfer-Encoding, no Transfer-Encoding but a lone "chunked" (411).
 * Each is answered 400 and the connection closed (http.c), so nothing
 * after it is read as a request.  What http-parser refuses by itself
 * keeps its own reason.
 */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "h1.h"

typedef struct h1_state {
    sl_h1_req *r;
    const char *base;
    size_t head;  /* bytes of header names and values so far */
    int in_value; /* the last header callback was a value */
} h1_state;

static sl_h1_span span(const h1_state *s, const char *at, size_t n)
{
    return (sl_h1_span){(uint32_t)(at - s->base), (uint32_t)n};
}

static int refuse(sl_h1_req *r, int status, const char *why)
{
    r->status = status;
    r->why = why;
    return -1;
}

static int on_url(http_parser *hp, const char *at, size_t n)
{
    h1_state *s = hp->data;
    sl_h1_req *r = s->r;
    if (r->target.len == 0)
        r->target = span(s, at, n);
    else
        r->target.len += (uint32_t)n;
    if (r->target.len > SL_HTTP_MAX_URI)
        return refuse(r, 414, "request target longer than SL_HTTP_MAX_URI bytes");
    return 0;
}

/* Every header byte counts against SL_HTTP_MAX_HEADERS, with ": " and
 * CRLF (4) per field. */
static int grow_head(h1_state *s, size_t n)
{
    s->head += n;
    if (s->head > SL_HTTP_MAX_HEADERS)
        return refuse(s->r, 431, "request headers longer than SL_HTTP_MAX_HEADERS bytes");
    return 0;
}

static int on_field(http_parser *hp, const char *at, size_t n)
{
    h1_state *s = hp->data;
    sl_h1_req *r = s->r;
    if (s->in_value || r->nfields == 0) { /* a new field */
        if (r->nfields == SL_H1_MAX_FIELDS)
            return refuse(r, 431, "more than SL_H1_MAX_FIELDS request headers");
        r->name[r->nfields] = span(s, at, n);
        r->value[r->nfields] = span(s, at + n, 0);
        r->nfields++;
        s->in_value = 0;
        return grow_head(s, n + 4);
    }
    r->name[r->nfields - 1].len += (uint32_t)n;
    return grow_head(s, n);
}

static int on_value(http_parser *hp, const char *at, size_t n)
{
    h1_state *s = hp->data;
    sl_h1_req *r = s->r;
    if (r->nfields == 0) return 0; /* cannot happen: a value follows a name */
    sl_h1_span *v = &r->value[r->nfields - 1];
    if (!s->in_value)
        *v = span(s, at, n);
    else
        v->len += (uint32_t)n;
    s->in_value = 1;
    return grow_head(s, n);
}

static int on_headers_complete(http_parser *hp)
{
    h1_state *s = hp->data;
    sl_h1_req *r = s->r;
    if (hp->flags & F_CHUNKED)
        return refuse(r, 411, "chunked request bodies are not taken: send Content-Length");
    if ((hp->flags & F_CONTENTLENGTH) && hp->content_length > SL_HTTP_MAX_BODY)
        return refuse(r, 413, "request body longer than SL_HTTP_MAX_BODY bytes");
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t n)
{
    h1_state *s = hp->data;
    sl_h1_req *r = s->r;
    if (r->body.len == 0)
        r->body = span(s, at, n);
    else
        r->body.len += (uint32_t)n;
    return 0;
}

static int on_message_complete(http_parser *hp)
{
    http_parser_pause(hp, 1); /* one request per call */
    return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* A tchar of RFC 9110 section 5.6.2: what a field name is made of. */
static int is_tchar(unsigned char ch)
{
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) return 1;
    return ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* s[0..n) without the spaces and tabs around it equals lower-case w,
 * ignoring case. */
static int value_is(const char *s, size_t n, const char *w)
{
    while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    return n == strlen(w) && strncasecmp(s, w, n) == 0;
}

/* The strict reading of the head at p[0..len) (the file's comment): 0 if
 * nothing in it is refused (yet: a head still arriving is checked as far
 * as it goes), or -1 with r->status and r->why set.  start: where the
 * request line begins (after the one empty line tolerated).  O(the head's
 * length): the head is parsed again from its start as it grows anyway. */
static int strict_head(const char *p, size_t len, size_t start, sl_h1_req *r)
{
    int ncl = 0, nte = 0, te_chunked = 0;
    for (size_t i = start, line = 0; i < len; line++) {
        const char *s = p + i, *lf = memchr(s, '\n', len - i);
        size_t n = lf ? (size_t)(lf - s) : len - i; /* s[0..n): the line, without LF */
        if (lf != NULL && (n == 0 || s[n - 1] != '\r'))
            return refuse(r, 400, "bare LF: a line must end with CRLF (RFC 9112 section 2.2)");
        size_t body = lf != NULL || (n > 0 && s[n - 1] == '\r') ? n - 1 : n; /* without CR */
        if ((line > 0 || lf != NULL) && memchr(s, '\r', body) != NULL)
            return refuse(r, 400, "bare CR: a CR only ends a line (RFC 9112 section 2.2)");
        i += n + (lf != NULL);
        if (line == 0) continue;       /* the request line: http-parser's */
        if (lf != NULL && body == 0) { /* the empty line: the head is whole */
            if (ncl > 0 && nte > 0)
                return refuse(r, 400,
                              "both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)");
            if (nte > 0 && !(nte == 1 && te_chunked))
                return refuse(r, 400,
                              "Transfer-Encoding other than chunked (RFC 9112 section 6.3)");
            if (nte > 0)
                return refuse(r, 411, "chunked request bodies are not taken: send Content-Length");
            return 0;
        }
        if (body > 0 && (s[0] == ' ' || s[0] == '\t'))
            return refuse(r, 400,
                          "obs-fold: a header line begins with whitespace (RFC 9112 section 5.2)");
        const char *colon = memchr(s, ':', body);
        size_t nlen = colon ? (size_t)(colon - s) : body;
        for (size_t k = 0; k < nlen; k++) {
            unsigned char ch = (unsigned char)s[k];
            if (is_tchar(ch)) continue;
            size_t w = k;
            while (w < nlen && (s[w] == ' ' || s[w] == '\t')) w++;
            if (colon != NULL && w == nlen)
                return refuse(r, 400,
                              "whitespace between a header name and its colon (RFC 9112 "
                              "section 5.1)");
            return refuse(r, 400, "invalid character in a header name");
        }
        if (colon == NULL) {
            if (lf != NULL) return refuse(r, 400, "header line without a colon");
            continue; /* the name is still arriving */
        }
        if (nlen == 0) return refuse(r, 400, "empty header name");
        const char *v = colon + 1;
        size_t vn = body - nlen - 1;
        for (size_t k = 0; k < vn; k++) {
            unsigned char ch = (unsigned char)v[k];
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                return refuse(r, 400, "invalid character in a header value");
        }
        if (lf == NULL) continue; /* the value is still arriving */
        if (nlen == 14 && strncasecmp(s, "Content-Length", 14) == 0) {
            if (++ncl > 1) return refuse(r, 400, "more than one Content-Length header");
            size_t k = 0, d = 0;
            while (k < vn && (v[k] == ' ' || v[k] == '\t')) k++;
            while (k < vn && v[k] >= '0' && v[k] <= '9') k++, d++;
            while (k < vn && (v[k] == ' ' || v[k] == '\t')) k++;
            if (d == 0 || k != vn)
                return refuse(r, 400, "invalid content-length: not a number of bytes");
        } else if (nlen == 17 && strncasecmp(s, "Transfer-Encoding", 17) == 0) {
            nte++;
            te_chunked = value_is(v, vn, "chunked");
        }
    }
    return 0;
}

static unsigned method_bit(unsigned m)
{
    switch (m) {
    case HTTP_GET: return SL_HM_GET;
    case HTTP_POST: return SL_HM_POST;
    case HTTP_HEAD: return SL_HM_HEAD;
    case HTTP_PUT: return SL_HM_PUT;
    case HTTP_DELETE: return SL_HM_DELETE;
    case HTTP_OPTIONS: return SL_HM_OPTIONS;
    case HTTP_TRACE: return SL_HM_TRACE;
    case HTTP_CONNECT: return SL_HM_CONNECT;
    case HTTP_PATCH: return SL_HM_PATCH;
    }
    return SL_HM_OTHER;
}

int sl_h1_parse(const char *p, size_t len, sl_h1_req *r)
{
    http_parser hp;
    h1_state s = {r, p, 0, 0};
    r->target = r->body = (sl_h1_span){0, 0};
    r->nfields = 0;
    r->status = 0;
    r->why = NULL;
    r->used = 0;
    /* one empty line before a request is tolerated (RFC 9112 section
     * 2.2), as http-parser would any number: more is not a client's */
    int lf = 0;
    for (size_t i = 0; i < len && (p[i] == '\r' || p[i] == '\n') && lf < 2; i++) lf += p[i] == '\n';
    if (lf >= 2) return refuse(r, 400, "empty lines before the request line"), SL_H1_BAD;
    http_parser_init(&hp, HTTP_REQUEST);
    hp.data = &s;
    size_t n = http_parser_execute(&hp, &settings, p, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&hp);
    if (r->status != 0 && r->status != 411) return SL_H1_BAD; /* a bound of ours */
    /* the strict reading, past the one empty line let by (411: its head is whole) */
    size_t start = len > 1 && p[0] == '\r' && p[1] == '\n' ? 2 : 0;
    if ((e == HPE_OK || e == HPE_PAUSED || r->status == 411) &&
        strict_head(p, e == HPE_PAUSED ? n : len, start, r) != 0)
        return SL_H1_BAD;
    if (r->status != 0) return SL_H1_BAD;
    if (e == HPE_PAUSED || (e == HPE_OK && hp.upgrade)) {
        /* whole (an Upgrade or CONNECT request ends at its head: the
         * answer, not a tunnel, follows) */
        r->used = n;
        r->method = method_bit(hp.method);
        r->method_name = http_method_str((enum http_method)hp.method);
        r->major = hp.http_major;
        r->minor = hp.http_minor;
        r->keep_alive = http_should_keep_alive(&hp) && !hp.upgrade;
        if (r->target.len == 0) return refuse(r, 400, "malformed request: no target"), SL_H1_BAD;
        return SL_H1_DONE;
    }
    if (e == HPE_OK) {
        /* a beginning: more of it fits the bounds, or it is a request line
         * too long to have been seen as one (http-parser's own bound on a
         * head is far above ours) */
        if (n > SL_HTTP_MAX_URI + SL_HTTP_MAX_HEADERS + SL_HTTP_MAX_BODY + 64)
            return refuse(r, 431, "request head longer than its bounds"), SL_H1_BAD;
        return SL_H1_MORE;
    }
    if (e == HPE_INVALID_CONTENT_LENGTH && n < len && isdigit((unsigned char)p[n]))
        return refuse(r, 413, "request body longer than SL_HTTP_MAX_BODY bytes"), SL_H1_BAD;
    if (e == HPE_HEADER_OVERFLOW)
        return refuse(r, 431, "request headers longer than SL_HTTP_MAX_HEADERS bytes"), SL_H1_BAD;
    if (e == HPE_INVALID_VERSION)
        return refuse(r, 505, "only HTTP/1.0 and HTTP/1.1 are served"), SL_H1_BAD;
    return refuse(r, 400, http_errno_description(e)), SL_H1_BAD;
}
