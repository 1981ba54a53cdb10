/*
 * resp.c -- RESP2 command parser (see resp.h).
 *
 * Hand-written rather than hiredis's redisReader: the reader builds a
 * malloc'd reply object per argument, which costs more than the decision it
 * carries (bench/ measures both); this parser allocates nothing and returns
 * slices of the input.  It is fuzzed (tests/fuzz_resp.c) and re-parses an
 * incomplete command from its start when more bytes arrive, which is cheap
 * because bulk payloads are skipped by length, never scanned.
 */
#include <stdint.h>
#include <string.h>

#include "resp.h"

#define NUM_MAX 20 /* digits and sign of a length line */

/* "\r\n" as the high half of a 32-bit load of "xy\r\n", and as a 16-bit
 * load: parse_fast reads the bytes in little-endian order (x86, arm64);
 * elsewhere it is not used. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FAST_LE 1
#else
#define FAST_LE 0
#endif
#define LINE_END ((uint32_t)'\r' << 16 | (uint32_t)'\n' << 24)
#define CRLF16   ((uint16_t)('\r' | '\n' << 8))

/* Parses the decimal integer in p[0..n) (optional leading '-').  Returns 0
 * and sets *out, or -1. */
static int parse_len(const char *p, size_t n, long long *out)
{
    int neg = 0;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        p++;
        n--;
    }
    if (n == 0 || n > 18) return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

/* Reads a "<c><integer>\r\n" line at buf[pos].  Returns SL_RESP_OK with
 * *val and *pos past the line, SL_RESP_AGAIN, or SL_RESP_ERROR.  The full
 * reading, for every line read_len_line's fast path leaves to it. */
__attribute__((noinline)) static int read_len_line_full(const char *buf, size_t len, size_t *pos,
                                                        long long *val)
{
    size_t start = *pos + 1, avail = len - start;
    size_t scan = avail < NUM_MAX + 2 ? avail : NUM_MAX + 2;
    const char *cr = memchr(buf + start, '\r', scan);
    if (cr == NULL) return avail > NUM_MAX + 1 ? SL_RESP_ERROR : SL_RESP_AGAIN;
    size_t n = (size_t)(cr - (buf + start));
    if (start + n + 1 >= len) return SL_RESP_AGAIN; /* the '\n' not here yet */
    if (buf[start + n + 1] != '\n') return SL_RESP_ERROR;
    if (parse_len(buf + start, n, val) != 0) return SL_RESP_ERROR;
    *pos = start + n + 2;
    return SL_RESP_OK;
}

/* read_len_line_full's answer, with a fast path for what clients send: 1
 * to LEN_FAST digits then "\r\n", all here.  That line is one the full
 * reading accepts with the same value and end (its '\r' is the first, well
 * within NUM_MAX + 2 bytes; parse_len takes up to 18 digits), so only the
 * other lines -- a sign, a partial line, anything odd -- take the full
 * reading, which alone decides AGAIN and every error.  No memchr and no
 * call: a length of 1-3 digits costs a few instructions a digit. */
#define LEN_FAST 18
__attribute__((always_inline)) static inline int read_len_line(const char *buf, size_t len,
                                                               size_t *pos, long long *val)
{
    size_t start = *pos + 1, i = start, lim = len - start > LEN_FAST ? start + LEN_FAST : len;
    long long v = 0;
    unsigned d;
    while (i < lim && (d = (unsigned)(unsigned char)buf[i] - '0') <= 9) {
        v = v * 10 + (long long)d;
        i++;
    }
    if (i > start && i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n') {
        *val = v;
        *pos = i + 2;
        return SL_RESP_OK;
    }
    return read_len_line_full(buf, len, pos, val);
}

/* The common command whole in buf: "*<1-9>\r\n", then each argument
 * "$<1 or 2 digits>\r\n<bytes>\r\n", within max_bulk.  Returns 1 with cmd
 * and *used set -- what parse_multibulk gives for these bytes, as each
 * step is one it takes with the same outcome -- or 0 at the first byte
 * that is anything else (a longer length, a sign, a partial command, any
 * error): parse_multibulk then reads the command from its start and alone
 * decides AGAIN and every error.  One test of the bytes left per step. */
static inline int parse_fast(const char *buf, size_t len, size_t max_bulk, sl_resp_cmd *cmd,
                             size_t *used)
{
    if (len < 4) return 0;
    uint32_t w;
    memcpy(&w, buf, 4);
    unsigned count = ((w >> 8) & 0xff) - '1'; /* count - 1 */
    if (count > 8 || (w & 0xffff0000u) != LINE_END) return 0;
    count++;
    size_t pos = 4;
    for (unsigned i = 0; i < count; i++) {
        /* "$d\r\n" + at least "\r\n": 6 bytes, or 7 with a second digit */
        if (len - pos < 6) return 0;
        memcpy(&w, buf + pos, 4);
        size_t blen = ((w >> 8) & 0xff) - (unsigned)'0', q;
        if ((w & 0xffff00ffu) == (LINE_END | '$') && blen <= 9) { /* "$d\r\n" */
            q = pos + 4;
        } else { /* "$dd\r\n" */
            unsigned d = (w >> 16 & 0xff) - (unsigned)'0';
            if ((w & 0xff000000u) != ('\r' << 24) || (w & 0xffu) != '$' || blen > 9 || d > 9 ||
                len - pos < 7 || buf[pos + 4] != '\n')
                return 0;
            blen = blen * 10 + d;
            q = pos + 5;
        }
        if (blen > max_bulk || len - q < blen + 2) return 0;
        uint16_t e;
        memcpy(&e, buf + q + blen, 2);
        if (e != CRLF16) return 0;
        cmd->argv[i].p = buf + q;
        cmd->argv[i].len = blen;
        pos = q + blen + 2;
    }
    cmd->argc = (int)count;
    *used = pos;
    return 1;
}

__attribute__((noinline)) static int parse_multibulk(const char *buf, size_t len, size_t max_bulk,
                                                     sl_resp_cmd *cmd, size_t *used,
                                                     const char **err)
{
    size_t pos = 0;
    long long count;
    int rc = read_len_line(buf, len, &pos, &count);
    if (rc != SL_RESP_OK) {
        *err = "Protocol error: invalid multibulk length";
        return rc;
    }
    if (count > SL_RESP_MAX_ARGS) {
        *err = "Protocol error: too many arguments (at most 1024)";
        return SL_RESP_ERROR;
    }
    cmd->argc = 0;
    for (long long i = 0; i < count; i++) {
        if (pos >= len) return SL_RESP_AGAIN;
        if (buf[pos] != '$') {
            *err = "Protocol error: expected '$' before a bulk argument";
            return SL_RESP_ERROR;
        }
        long long blen;
        rc = read_len_line(buf, len, &pos, &blen);
        if (rc == SL_RESP_AGAIN) return rc;
        if (rc != SL_RESP_OK || blen < 0) {
            *err = "Protocol error: invalid bulk length";
            return SL_RESP_ERROR;
        }
        if ((unsigned long long)blen > max_bulk) {
            *err = "Protocol error: argument longer than the server accepts";
            return SL_RESP_ERROR;
        }
        if (len - pos < (size_t)blen + 2) return SL_RESP_AGAIN;
        if (buf[pos + (size_t)blen] != '\r' || buf[pos + (size_t)blen + 1] != '\n') {
            *err = "Protocol error: bulk argument not followed by CRLF";
            return SL_RESP_ERROR;
        }
        cmd->argv[cmd->argc].p = buf + pos;
        cmd->argv[cmd->argc].len = (size_t)blen;
        cmd->argc++;
        pos += (size_t)blen + 2;
    }
    *used = pos; /* count <= 0: an empty command, skipped like redis-server does */
    return SL_RESP_OK;
}

__attribute__((noinline)) static int parse_inline(const char *buf, size_t len, sl_resp_cmd *cmd,
                                                  size_t *used, const char **err)
{
    size_t scan = len < SL_RESP_MAX_INLINE + 2 ? len : SL_RESP_MAX_INLINE + 2;
    const char *nl = memchr(buf, '\n', scan);
    if (nl == NULL) {
        /* a line holds at most SL_RESP_MAX_INLINE bytes, then "\r\n" or
         * "\n": one byte more may still be that line's '\r' */
        if (len > SL_RESP_MAX_INLINE + 1) {
            *err = "Protocol error: too big inline request";
            return SL_RESP_ERROR;
        }
        return SL_RESP_AGAIN;
    }
    size_t end = (size_t)(nl - buf);
    *used = end + 1;
    if (end > 0 && buf[end - 1] == '\r') end--;
    if (end > SL_RESP_MAX_INLINE) {
        *err = "Protocol error: too big inline request";
        return SL_RESP_ERROR;
    }
    cmd->argc = 0;
    for (size_t i = 0; i < end;) {
        while (i < end && (buf[i] == ' ' || buf[i] == '\t')) i++;
        if (i == end) break;
        size_t s = i;
        while (i < end && buf[i] != ' ' && buf[i] != '\t') i++;
        if (cmd->argc == SL_RESP_MAX_ARGS) {
            *err = "Protocol error: too many arguments (at most 1024)";
            return SL_RESP_ERROR;
        }
        cmd->argv[cmd->argc].p = buf + s;
        cmd->argv[cmd->argc].len = i - s;
        cmd->argc++;
    }
    return SL_RESP_OK;
}

int sl_resp_parse(const char *buf, size_t len, size_t max_bulk, sl_resp_cmd *cmd, size_t *used,
                  const char **err)
{
    if (len == 0) return SL_RESP_AGAIN;
    if (max_bulk > SL_RESP_MAX_BULK) max_bulk = SL_RESP_MAX_BULK;
    if (buf[0] == '*') {
        if (FAST_LE && parse_fast(buf, len, max_bulk, cmd, used)) return SL_RESP_OK;
        return parse_multibulk(buf, len, max_bulk, cmd, used, err);
    }
    return parse_inline(buf, len, cmd, used, err);
}
