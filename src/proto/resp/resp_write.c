/*
 * resp_write.c -- replies, appended to a buffer (resp.h): RESP2's types,
 * and RESP3's with the RESP2 form Redis gives each of them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "resp.h"

void sl_resp_raw(sl_buf *b, const char *s) { sl_buf_add(b, s, strlen(s)); }

/* A type byte, an integer, CRLF: ":<v>\r\n", "*<n>\r\n", "$<n>\r\n". */
static void num(sl_buf *b, char type, long long v)
{
    char tmp[32], *e = tmp + sizeof tmp, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    *--p = '\n';
    *--p = '\r';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    *--p = type;
    sl_buf_add(b, p, (size_t)(e - p));
}

void sl_resp_int(sl_buf *b, long long v) { num(b, ':', v); }
void sl_resp_array(sl_buf *b, long long n) { num(b, '*', n); }

void sl_resp_bulk(sl_buf *b, const char *s, size_t n)
{
    num(b, '$', (long long)n);
    sl_buf_add(b, s, n);
    sl_buf_add(b, "\r\n", 2);
}

void sl_resp_bulk_str(sl_buf *b, const char *s) { sl_resp_bulk(b, s, strlen(s)); }
void sl_resp_nil(sl_buf *b) { sl_buf_add(b, "$-1\r\n", 5); }

void sl_resp_err(sl_buf *b, const char *msg)
{
    char line[512];
    size_t n = strlen(msg);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, msg, n);
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\r' || line[i] == '\n') line[i] = ' ';
    sl_buf_add(b, "-ERR ", 5);
    sl_buf_add(b, line, n);
    sl_buf_add(b, "\r\n", 2);
}

void sl_resp_fields(sl_buf *b, const sl_result *r)
{
    num(b, ':', r->allowed);
    num(b, ':', r->limit);
    num(b, ':', r->remaining);
    num(b, ':', r->retry_after_ms);
    num(b, ':', r->reset_after_ms);
    num(b, ':', r->delay_ms);
}

/* ---- RESP3 ------------------------------------------------------------------ */

void sl_resp_null(sl_buf *b, int proto)
{
    if (proto == SL_RESP3)
        sl_buf_add(b, "_\r\n", 3);
    else
        sl_resp_nil(b);
}

void sl_resp_null_array(sl_buf *b, int proto)
{
    if (proto == SL_RESP3)
        sl_buf_add(b, "_\r\n", 3);
    else
        sl_buf_add(b, "*-1\r\n", 5);
}

void sl_resp_map(sl_buf *b, int proto, long long npairs)
{
    if (proto == SL_RESP3)
        num(b, '%', npairs);
    else
        num(b, '*', 2 * npairs);
}

void sl_resp_set(sl_buf *b, int proto, long long n) { num(b, proto == SL_RESP3 ? '~' : '*', n); }

void sl_resp_verbatim(sl_buf *b, int proto, const char *fmt, const char *s, size_t n)
{
    if (proto != SL_RESP3) {
        sl_resp_bulk(b, s, n);
        return;
    }
    num(b, '=', (long long)(n + 4));
    sl_buf_add(b, fmt, 3);
    sl_buf_add(b, ":", 1);
    sl_buf_add(b, s, n);
    sl_buf_add(b, "\r\n", 2);
}

void sl_resp_bool(sl_buf *b, int proto, int v)
{
    if (proto == SL_RESP3)
        sl_buf_add(b, v ? "#t\r\n" : "#f\r\n", 4);
    else
        num(b, ':', v ? 1 : 0);
}

void sl_resp_double(sl_buf *b, int proto, double d)
{
    char tmp[40];
    int n;
    if (isnan(d))
        n = snprintf(tmp, sizeof tmp, "nan");
    else if (isinf(d))
        n = snprintf(tmp, sizeof tmp, "%s", d > 0 ? "inf" : "-inf");
    else
        n = snprintf(tmp, sizeof tmp, "%.17g", d); /* at most 24 bytes */
    if (proto != SL_RESP3) {
        sl_resp_bulk(b, tmp, (size_t)n);
        return;
    }
    sl_buf_add(b, ",", 1);
    sl_buf_add(b, tmp, (size_t)n);
    sl_buf_add(b, "\r\n", 2);
}
