/*
 * resp_write.c -- RESP2 replies, appended to a buffer (resp.h).
 */
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
