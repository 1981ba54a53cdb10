/*
 * args.c -- request values as clients type them (args.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

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

/* The options of RL.ALLOW and RL.PEEK, in the order the error names them. */
enum allow_opt { OPT_ALGO, OPT_COST, OPT_BURST, OPT_PRECISION, OPT_LOGREJECTED, OPT_AT, NOPTS };
static const char *const allow_opts[NOPTS] = {
    [OPT_ALGO] = "ALGO",
    [OPT_COST] = "COST",
    [OPT_BURST] = "BURST",
    [OPT_PRECISION] = "PRECISION",
    [OPT_LOGREJECTED] = "LOGREJECTED",
    [OPT_AT] = "AT",
};

static int arg_is(const sl__arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

int sl__parse_allow(const sl__arg *a, int n, const char *stop, sl__at_parse at, void *at_ctx,
                    sl__allow_req *q, char *err, size_t errlen)
{
    char qb[80];
    memset(q, 0, sizeof *q);
    q->p = (sl_params)SL_PARAMS_INIT;
    q->cost = 1;
    if (sl__parse_limit(a[0].p, a[0].len, &q->p.limit, err, errlen) != 0 ||
        sl__parse_window(a[1].p, a[1].len, &q->p.window_ms, err, errlen) != 0)
        return -1;
    unsigned seen = 0;
    int i;
    for (i = 2; i < n; i++) {
        if (stop && arg_is(&a[i], stop)) break;
        int which = 0;
        while (which < NOPTS && !arg_is(&a[i], allow_opts[which])) which++;
        if (which == NOPTS || (which == OPT_AT && at == NULL)) {
            snprintf(err, errlen, "unknown option '%s' (expected ALGO, COST, BURST, PRECISION, %s)",
                     sl__quote(qb, sizeof qb, a[i].p, a[i].len),
                     at ? "LOGREJECTED or AT" : "or LOGREJECTED");
            return -1;
        }
        if (seen & (1u << which)) {
            snprintf(err, errlen, "option %s given twice", allow_opts[which]);
            return -1;
        }
        seen |= 1u << which;
        if (which == OPT_LOGREJECTED) {
            q->p.log_rejected = 1;
            continue;
        }
        if (i + 1 >= n) {
            snprintf(err, errlen, "option %s needs a value", allow_opts[which]);
            return -1;
        }
        const sl__arg *v = &a[++i];
        int rc = 0;
        switch ((enum allow_opt)which) {
        case OPT_ALGO: rc = sl__parse_algo(v->p, v->len, &q->p.algo, err, errlen); break;
        case OPT_COST: rc = sl__parse_cost(v->p, v->len, &q->cost, err, errlen); break;
        case OPT_BURST: rc = sl__parse_burst(v->p, v->len, &q->p.burst, err, errlen); break;
        case OPT_PRECISION:
            rc = sl__parse_precision(v->p, v->len, &q->p.precision, err, errlen);
            break;
        case OPT_AT:
            rc = at(at_ctx, v->p, v->len, &q->at, err, errlen);
            q->has_at = 1;
            break;
        case OPT_LOGREJECTED:
        case NOPTS: break;
        }
        if (rc != 0) return -1;
    }
    return i;
}

/* Whether the n bytes at x and y are equal: by loads of 8, 4 or 1 bytes
 * from each side that together cover the n bytes (the last overlaps the
 * one before unless n is a multiple of its size), never reading past
 * either; no call (the memo's hit path stays a leaf). */
static inline int same_bytes(const char *x, const char *y, size_t n)
{
    if (n >= 8) {
        uint64_t a, b;
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&a, x + i, 8);
            memcpy(&b, y + i, 8);
            if (a != b) return 0;
        }
        memcpy(&a, x + n - 8, 8);
        memcpy(&b, y + n - 8, 8);
        return a == b;
    }
    if (n >= 4) {
        uint32_t a, b, c, d;
        memcpy(&a, x, 4);
        memcpy(&b, y, 4);
        memcpy(&c, x + n - 4, 4);
        memcpy(&d, y + n - 4, 4);
        return ((a ^ b) | (c ^ d)) == 0;
    }
    if (n == 0) return 1;
    /* 1 to 3 bytes: the first, the middle and the last cover them */
    return x[0] == y[0] && x[n / 2] == y[n / 2] && x[n - 1] == y[n - 1];
}

/* Whether a[0..n) are m's request, byte for byte. */
static int memo_same(const sl__allow_memo *m, const sl__arg *a, int n)
{
    if (m->n != n) return 0;
    const char *b = m->bytes;
    for (int i = 0; i < n; i++) {
        size_t len = a[i].len;
        if (len != m->len[i] || !same_bytes(a[i].p, b, len)) return 0;
        b += len;
    }
    return 1;
}

/* sl__parse_allow_memo's miss: parse, and remember a request that may be. */
__attribute__((noinline)) static int memo_parse(sl__allow_memo *m, const sl__arg *a, int n,
                                                sl__at_parse at, void *at_ctx, sl__allow_req *q,
                                                char *err, size_t errlen)
{
    int rc = sl__parse_allow(a, n, NULL, at, at_ctx, q, err, errlen);
    if (rc < 0 || q->has_at || n > SL__ALLOW_ARGS) return rc;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (a[i].len > SL__ALLOW_MEMO_BYTES - total) return rc; /* too long to remember */
        total += a[i].len;
    }
    char *b = m->bytes;
    for (int i = 0; i < n; i++) {
        m->len[i] = (unsigned char)a[i].len;
        memcpy(b, a[i].p, a[i].len);
        b += a[i].len;
    }
    m->n = n;
    m->req = *q;
    return rc;
}

const sl__allow_req *sl__allow_memo_get(const sl__allow_memo *m, const sl__arg *a, int n)
{
    return n > 0 && memo_same(m, a, n) ? &m->req : NULL;
}

int sl__parse_allow_memo(sl__allow_memo *m, const sl__arg *a, int n, sl__at_parse at, void *at_ctx,
                         sl__allow_req *q, char *err, size_t errlen)
{
    const sl__allow_req *hit = sl__allow_memo_get(m, a, n);
    if (hit != NULL) {
        *q = *hit;
        return n;
    }
    return memo_parse(m, a, n, at, at_ctx, q, err, errlen);
}
