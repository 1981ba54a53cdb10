/*
 * resp_write.c -- replies, appended to a buffer (resp.h): RESP2's types,
 * and RESP3's with the RESP2 form Redis gives each of them.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "resp.h"

void sl_resp_raw(sl_buf *b, const char *s) { sl_buf_add(b, s, strlen(s)); }

/* "00".."99": two digits a step, half the divisions. */
static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                               "25262728293031323334353637383940414243444546474849"
                               "50515253545556575859606162636465666768697071727374"
                               "75767778798081828384858687888990919293949596979899";

#define NUM_LEN 23 /* the longest num(): type, '-', 19 digits, CRLF */

/* How many decimal digits u has: four at a step, comparisons in between. */
static unsigned ndigits(unsigned long long u)
{
    unsigned n = 1;
    for (;;) {
        if (u < 10) return n;
        if (u < 100) return n + 1;
        if (u < 1000) return n + 2;
        if (u < 10000) return n + 3;
        u /= 10000;
        n += 4;
    }
}

/* u's digits at d; returns the end. */
static char *put_digits(char *d, unsigned long long u)
{
    char *e = d + ndigits(u), *p = e;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        p -= 2;
        p[0] = pairs[2 * r];
        p[1] = pairs[2 * r + 1];
    }
    if (u >= 10) {
        p[-2] = pairs[2 * u];
        p[-1] = pairs[2 * u + 1];
    } else {
        p[-1] = (char)('0' + u);
    }
    return e;
}

/* u's digits at d, for 100 <= u < 10^8; returns the end.  Eight digits
 * at once in one 64-bit word, as lanes: two of 32 bits (u / 10^4 and
 * u % 10^4), each split by 100 into two of 16 bits, each split by 10 into
 * two bytes -- divisions by multiplying (5243 / 2^19 is exact division by
 * 100 below 43,699, 103 / 2^10 by 10 below 179), the masks keeping each
 * lane's bits from its neighbour's.  The leading zeros are shifted out and
 * the eight bytes stored whole: d has room for them (NUM_LEN).  Byte order
 * matters: a big-endian machine takes put_digits. */
static inline char *put_digits8(char *d, unsigned long long u)
{
    uint64_t x = (u / 10000) | ((uint64_t)(u % 10000) << 32);
    uint64_t q = ((x * 5243) >> 19) & 0x0000007F0000007FULL;
    uint64_t y = q | ((x - 100 * q) << 16);
    uint64_t t = ((y * 103) >> 10) & 0x000F000F000F000FULL;
    uint64_t z = t | ((y - 10 * t) << 8);
    unsigned lz = (unsigned)__builtin_ctzll(z) / 8; /* u >= 1: z != 0 */
    uint64_t a = (z + 0x3030303030303030ULL) >> (8 * lz);
    memcpy(d, &a, 8);
    return d + 8 - lz;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DIGITS8 1
#else
#define DIGITS8 0
#endif

/* Writes a type byte, v, CRLF (":<v>\r\n", "*<n>\r\n", "$<n>\r\n") at d,
 * which has room for NUM_LEN bytes; returns the end.  Inline for the
 * values most replies carry (0 to 999; below 10^8 eight digits at once),
 * a call for the others. */
__attribute__((always_inline)) static inline char *put_num(char *d, char type, long long v)
{
    *d++ = type;
    if (v >= 0 && v < 10) {
        *d++ = (char)('0' + v);
    } else if (v >= 10 && v < 100) {
        d[0] = pairs[2 * v];
        d[1] = pairs[2 * v + 1];
        d += 2;
    } else if (v >= 100 && v < 1000) { /* v * 41 >> 12 is v / 100 below 1000 */
        unsigned h = (unsigned)(v * 41) >> 12, r = (unsigned)v - 100 * h;
        d[0] = (char)('0' + h);
        d[1] = pairs[2 * r];
        d[2] = pairs[2 * r + 1];
        d += 3;
    } else if (DIGITS8 && v >= 0 && v < 100000000) {
        d = put_digits8(d, (unsigned long long)v);
    } else if (v >= 0) {
        d = put_digits(d, (unsigned long long)v);
    } else {
        *d++ = '-';
        d = put_digits(d, 0ULL - (unsigned long long)v);
    }
    d[0] = '\r';
    d[1] = '\n';
    return d + 2;
}

/* One put_num appended to b: one capacity check.  Out of memory: b as it was. */
static void num(sl_buf *b, char type, long long v)
{
    if (sl_buf_reserve(b, NUM_LEN) != 0) return;
    b->len = (size_t)(put_num(b->p + b->len, type, v) - b->p);
}

void sl_resp_int(sl_buf *b, long long v) { num(b, ':', v); }
void sl_resp_array(sl_buf *b, long long n) { num(b, '*', n); }

void sl_resp_bulk(sl_buf *b, const char *s, size_t n)
{
    if (sl_buf_reserve(b, NUM_LEN + n + 2) != 0) return;
    char *d = put_num(b->p + b->len, '$', (long long)n);
    if (n > 0) memcpy(d, s, n);
    d[n] = '\r';
    d[n + 1] = '\n';
    b->len = (size_t)(d + n + 2 - b->p);
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

/* The six fields at d, which has room for 6 * NUM_LEN bytes; returns the end. */
static inline char *put_fields(char *d, const sl_result *r)
{
    d = put_num(d, ':', r->allowed);
    d = put_num(d, ':', r->limit);
    d = put_num(d, ':', r->remaining);
    d = put_num(d, ':', r->retry_after_ms);
    d = put_num(d, ':', r->reset_after_ms);
    return put_num(d, ':', r->delay_ms);
}

void sl_resp_fields(sl_buf *b, const sl_result *r)
{
    if (sl_buf_reserve(b, 6 * NUM_LEN) != 0) return;
    b->len = (size_t)(put_fields(b->p + b->len, r) - b->p);
}

void sl_resp_fields_array(sl_buf *b, const sl_result *r)
{
    if (sl_buf_reserve(b, 4 + 6 * NUM_LEN) != 0) return;
    char *d = b->p + b->len;
    if (DIGITS8 && (uint64_t)r->allowed <= 1) {
        /* "*6\r\n:0\r\n" or "*6\r\n:1\r\n": one store, the digit its byte 5 */
        uint64_t w;
        memcpy(&w, "*6\r\n:0\r\n", 8);
        w += (uint64_t)r->allowed << 40;
        memcpy(d, &w, 8);
        d += 8;
    } else {
        memcpy(d, "*6\r\n", 4);
        d = put_num(d + 4, ':', r->allowed);
    }
    d = put_num(d, ':', r->limit);
    d = put_num(d, ':', r->remaining);
    d = put_num(d, ':', r->retry_after_ms);
    d = put_num(d, ':', r->reset_after_ms);
    b->len = (size_t)(put_num(d, ':', r->delay_ms) - b->p);
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
