/*
 * http_answers.h -- what the HTTP fuzz targets (fuzz_http.c over a socket,
 * fuzz_h1.c without one) check of the bytes sluiced answered: a sequence
 * of whole HTTP/1.x answers, each a status line (HTTP/1.0 or 1.1, a
 * 3-digit status), headers with Date and Content-Length, and a body of
 * exactly Content-Length bytes (none for a HEAD); nothing after one that
 * says Connection: close; an application/json body is one JSON object,
 * with "error" a string on every 4xx/5xx but 429; a decision (a JSON
 * "allowed") carries X-RateLimit-Limit, X-RateLimit-Remaining and
 * RateLimit.  The including file defines die(why), which must not return.
 */
#ifndef SL_FUZZ_HTTP_ANSWERS_H
#define SL_FUZZ_HTTP_ANSWERS_H

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static void die(const char *why);

/* The value of header `name` in the header block h[0..n), or NULL; its
 * length in *vlen. */
static const char *header(const char *h, size_t n, const char *name, size_t *vlen)
{
    size_t k = strlen(name);
    for (const char *p = h; p < h + n;) {
        const char *eol = memmem(p, (size_t)(h + n - p), "\r\n", 2);
        if (eol == NULL) eol = h + n;
        if ((size_t)(eol - p) > k && p[k] == ':' && strncasecmp(p, name, k) == 0) {
            const char *v = p + k + 1;
            while (v < eol && *v == ' ') v++;
            *vlen = (size_t)(eol - v);
            return v;
        }
        p = eol + 2;
    }
    return NULL;
}

/* Checks out[0..n): whole answers, one after another.  head: the input
 * holds a HEAD request, whose answer has the headers of a GET (its
 * Content-Length) without the body. */
static size_t check_answers(const char *out, size_t n, int head)
{
    size_t off = 0, last = 0;
    while (off < n) {
        last = off;
        const char *a = out + off;
        size_t left = n - off;
        const char *end = memmem(a, left, "\r\n\r\n", 4);
        if (end == NULL) die("an answer's headers are not whole");
        /* HTTP/1.0 or HTTP/1.1, a space, three digits */
        const char *p = a + 8, *eol = memmem(a, left, "\r\n", 2);
        if (left < 13 || eol == NULL ||
            (memcmp(a, "HTTP/1.1 ", 9) != 0 && memcmp(a, "HTTP/1.0 ", 9) != 0))
            die("no HTTP/1.x status line");
        int status = 0;
        for (int i = 1; i < 4; i++) {
            if (p[i] < '0' || p[i] > '9') die("a status that is not 3 digits");
            status = status * 10 + (p[i] - '0');
        }
        const char *h = memmem(a, left, "\r\n", 2) + 2;
        size_t hn = (size_t)(end - h) + 2, vlen = 0;
        const char *cl = header(h, hn, "Content-Length", &vlen);
        size_t body_len = 0;
        if (cl != NULL) {
            char num[24];
            if (vlen == 0 || vlen >= sizeof num) die("a bad Content-Length");
            memcpy(num, cl, vlen);
            num[vlen] = '\0';
            body_len = strtoul(num, NULL, 10);
        } else {
            die("an answer without Content-Length");
        }
        const char *body = end + 4;
        size_t after = left - (size_t)(body - a);
        if (head && (after == 0 || (after >= 5 && memcmp(body, "HTTP/", 5) == 0)))
            body_len = 0; /* the answer to a HEAD */
        const char *conn = header(h, hn, "Connection", &vlen);
        int closing = conn != NULL && vlen == 5 && strncasecmp(conn, "close", 5) == 0;
        if (closing && body_len < after && !(head && body_len == 0))
            die("bytes after an answer that said Connection: close");
        if (header(h, hn, "Date", &vlen) == NULL) die("an answer without Date");
        if (body_len > after) die("an answer's body is cut short");
        const char *ct = header(h, hn, "Content-Type", &vlen);
        if (ct != NULL && vlen == 16 && memcmp(ct, "application/json", 16) == 0 && body_len > 0) {
            json_error_t je;
            json_t *j = json_loadb(body, body_len, 0, &je);
            if (j == NULL || !json_is_object(j)) die("a JSON answer that is not a JSON object");
            if (status >= 400 && status != 429 && !json_is_string(json_object_get(j, "error")))
                die("an error answer without an \"error\" string");
            if ((status == 200 || status == 429) && json_object_get(j, "allowed") != NULL &&
                (header(h, hn, "X-RateLimit-Limit", &vlen) == NULL ||
                 header(h, hn, "X-RateLimit-Remaining", &vlen) == NULL ||
                 header(h, hn, "RateLimit", &vlen) == NULL))
                die("a decision without its rate-limit headers");
            json_decref(j);
        }
        off += (size_t)(body - a) + body_len;
    }
    return last;
}

#endif
