/*
 * args.c -- request values as clients type them (args.h).
 */
#include <ctype.h>
#include <stdio.h>

#include "args.h"

const char *sl__quote(char *dst, size_t cap, const char *s, size_t n)
{
    size_t k = n < cap - 4 ? n : cap - 4, i;
    for (i = 0; i < k; i++) dst[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (k < n) dst[i++] = '.', dst[i++] = '.', dst[i++] = '.';
    dst[i] = '\0';
    return dst;
}

static int bad(char *err, size_t errlen, int code, const char *s, size_t n)
{
    char q[80];
    snprintf(err, errlen, "%s, got '%s'", sl_strerror(code), sl__quote(q, sizeof q, s, n));
    return -1;
}

static int parse_int(const char *s, size_t n, int64_t max, int allow_neg, int64_t *out)
{
    if (allow_neg && n > 1 && s[0] == '-') {
        int64_t v;
        if (sl_int_parse(s + 1, n - 1, max, &v) != 0) return -1;
        *out = -v;
        return 0;
    }
    return sl_int_parse(s, n, max, out);
}

int sl__parse_key(const char *s, size_t n, char *err, size_t errlen)
{
    (void)s;
    if (n == 0 || n > SL_MAX_KEY) {
        snprintf(err, errlen, "%s", sl_strerror(SL_EKEY));
        return -1;
    }
    return 0;
}

int sl__parse_limit(const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    if (parse_int(s, n, SL_MAX_LIMIT, 0, out) != 0 || *out < 1) {
        snprintf(err, errlen, "%s", sl_strerror(SL_ELIMIT));
        return -1;
    }
    return 0;
}

int sl__parse_window(const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    if (sl_duration_parse(s, n, out) != 0) return bad(err, errlen, SL_EWINDOW, s, n);
    return 0;
}

int sl__parse_algo(const char *s, size_t n, sl_algo *out, char *err, size_t errlen)
{
    char lower[32], q[80];
    size_t k = n < sizeof lower ? n : sizeof lower;
    for (size_t i = 0; i < k; i++) lower[i] = (char)tolower((unsigned char)s[i]);
    if (n > sizeof lower || sl_algo_parse(lower, k, out) != 0) {
        snprintf(err, errlen, "unknown algorithm '%s'", sl__quote(q, sizeof q, s, n));
        return -1;
    }
    return 0;
}

int sl__parse_cost(const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    if (parse_int(s, n, SL_MAX_LIMIT, 0, out) != 0) return bad(err, errlen, SL_ECOST, s, n);
    return 0;
}

int sl__parse_burst(const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    if (parse_int(s, n, SL_MAX_LIMIT, 0, out) != 0 || *out < 1)
        return bad(err, errlen, SL_EBURST, s, n);
    return 0;
}

int sl__parse_precision(const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    if (parse_int(s, n, SL_MAX_PRECISION, 0, out) != 0 || *out < 1)
        return bad(err, errlen, SL_EPRECISION, s, n);
    return 0;
}

int sl__parse_at(int trusted, int64_t max_skew, const char *refused, int64_t now, const char *s,
                 size_t n, int64_t *out, char *err, size_t errlen)
{
    int64_t at;
    if (!trusted) {
        snprintf(err, errlen, "%s", refused);
        return -1;
    }
    if (parse_int(s, n, SL_MAX_TIME_MS - 1, 1, &at) != 0) return bad(err, errlen, SL_ETIME, s, n);
    /* both within +-2^62: the difference cannot overflow */
    if (max_skew > 0 && at - now > max_skew) {
        snprintf(err, errlen,
                 "AT %lld is %lld ms ahead of the server's clock (%lld); --max-client-skew "
                 "allows at most %lld ms",
                 (long long)at, (long long)(at - now), (long long)now, (long long)max_skew);
        return -1;
    }
    *out = at;
    return 0;
}
