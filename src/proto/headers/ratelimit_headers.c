/*
 * ratelimit_headers.c -- the RateLimit headers of a decision, written once
 * for every front (ratelimit_headers.h): HTTP/1.1 lines or a list of NUL-
 * ended values, into the caller's buffer.  Bounded work: at most
 * SL_CHECK_MAX_DESC members of two lists, each name escaped once per list.
 */
#include <string.h>

#include "ratelimit_headers.h"

void sl_rlh_init(sl_rlh *o, char *buf, size_t cap, int lines)
{
    o->b = buf;
    o->cap = cap;
    o->len = 0;
    o->lines = lines;
    o->cut = 0;
    o->n = 0;
}

size_t sl_rlh_itoa(char *dst, long long v)
{
    char t[24];
    size_t n = 0, o = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        t[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) dst[o++] = '-';
    while (n > 0) dst[o++] = t[--n];
    dst[o] = '\0';
    return o;
}

long long sl_rlh_ceil_s(int64_t ms) { return (long long)((ms + 999) / 1000); }

/* Writes s (n bytes) as an RFC 9651 sf-string into dst (cap bytes, NUL
 * ended): quotes around, '"' and '\' escaped by a backslash, and each byte
 * outside 0x20..0x7E -- and '%' itself -- as %XX (upper-case hex), which
 * an sf-string cannot hold raw.  Returns dst, or NULL when it does not fit. */
static char *sf_string(char *dst, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (cap < 3) return NULL;
    dst[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (o + 5 > cap) return NULL; /* room for the longest (3) and the closing '"', NUL */
        if (ch == '"' || ch == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)ch;
        } else if (ch < 0x20 || ch > 0x7e || ch == '%') {
            dst[o++] = '%';
            dst[o++] = hex[ch >> 4];
            dst[o++] = hex[ch & 15];
        } else {
            dst[o++] = (char)ch;
        }
    }
    dst[o++] = '"';
    dst[o] = '\0';
    return dst;
}

/* Opens header `name` (nlen bytes) at o->len: "Name: " in the lines form,
 * nothing in the list form. */
static void open_header(sl_rlh *o, const char *name, size_t nlen)
{
    if (!o->lines) return;
    memcpy(o->b + o->len, name, nlen);
    memcpy(o->b + o->len + nlen, ": ", 2);
    o->len += nlen + 2;
}

/* Closes the header `name` whose value began at vstart: "\r\n", or a NUL
 * and its place in the list.  The caller made room for 2 bytes. */
static void close_header(sl_rlh *o, const char *name, size_t vstart)
{
    if (o->lines) {
        memcpy(o->b + o->len, "\r\n", 2);
        o->len += 2;
    } else {
        o->b[o->len++] = '\0';
        o->name[o->n] = name;
        o->value[o->n] = o->b + vstart;
    }
    o->n++;
}

/* Header `name` with the value v (vlen bytes); left out (cut) when it
 * does not fit. */
static void put(sl_rlh *o, const char *name, const char *v, size_t vlen)
{
    size_t nlen = strlen(name);
    if (o->len + nlen + vlen + 4 > o->cap || o->n == SL_RLH_MAX_FIELDS) {
        o->cut = 1;
        return;
    }
    open_header(o, name, nlen);
    size_t vstart = o->len;
    memcpy(o->b + o->len, v, vlen);
    o->len += vlen;
    close_header(o, name, vstart);
}

static void put_int(sl_rlh *o, const char *name, long long v)
{
    char t[24];
    put(o, name, t, sl_rlh_itoa(t, v));
}

/* Writes "NAME;K1=V1;K2=V2" (name: sn bytes, an sf-string; k1, k2: ";x=")
 * at d, which has room for sn + 48 bytes (two numbers of at most 20);
 * returns the end. */
static char *member(char *d, const char *name, size_t sn, const char *k1, long long v1,
                    const char *k2, long long v2)
{
    memcpy(d, name, sn);
    d += sn;
    memcpy(d, k1, 3);
    d += 3;
    d += sl_rlh_itoa(d, v1);
    memcpy(d, k2, 3);
    d += 3;
    d += sl_rlh_itoa(d, v2);
    return d;
}

/* The headers every decision carries: the X-RateLimit-* trio of r
 * (Reset: seconds rounded up); on a denial that can ever be allowed,
 * Retry-After (seconds rounded up, at least 1; none when retry_after_ms
 * is -1); on an allowed answer with delay_ms > 0 (a leaky bucket's
 * queue), X-RateLimit-Delay-Ms: delay_ms, in ms. */
static void overall(sl_rlh *o, const sl_result *r)
{
    put_int(o, "X-RateLimit-Limit", (long long)r->limit);
    put_int(o, "X-RateLimit-Remaining", (long long)r->remaining);
    put_int(o, "X-RateLimit-Reset", sl_rlh_ceil_s(r->reset_after_ms));
    if (!r->allowed && r->retry_after_ms >= 0) {
        long long s = sl_rlh_ceil_s(r->retry_after_ms);
        put_int(o, "Retry-After", s < 1 ? 1 : s);
    }
    /* leaky-bucket's queue: in ms, as exact as the JSON's delay_ms (a
     * shaping delay is mostly below a second; docs/http.md) */
    if (r->allowed && r->delay_ms > 0) put_int(o, "X-RateLimit-Delay-Ms", (long long)r->delay_ms);
}

void sl_rlh_decision(sl_rlh *o, const sl_result *r, int64_t window_ms)
{
    static const char def[] = "\"default\"";
    char v[128];
    long long w = sl_rlh_ceil_s(window_ms);
    if (w < 1) w = 1;
    char *e = member(v, def, 9, ";q=", (long long)r->limit, ";w=", w);
    put(o, "RateLimit-Policy", v, (size_t)(e - v));
    e = member(v, def, 9, ";r=", (long long)r->remaining, ";t=", sl_rlh_ceil_s(r->reset_after_ms));
    put(o, "RateLimit", v, (size_t)(e - v));
    overall(o, r);
}

/* Whether status st is a limit the client is held to. */
static int shown(const sl_check_status *st)
{
    if (st->rule == NULL || st->name == NULL || st->shadow) return 0;
    if (st->code == SL_CHECK_NO_RULE || st->code == SL_CHECK_UNLIMITED) return 0;
    return !(st->code == SL_CHECK_OK && st->limit == 0); /* a replaced limit */
}

/* The status that descriptor d's member shows, or NULL when it has none:
 * a limit reported by several descriptors (one rule, two values) has one
 * member, at its first descriptor, with the numbers of the most
 * restrictive of them (sl_check_status_tighter) -- on a denial, the one
 * that blocks. */
static const sl_check_status *pick(const sl_check_status *sts, int n, int d)
{
    const sl_check_status *st = &sts[d];
    if (!shown(st)) return NULL;
    for (int e = 0; e < d; e++)
        if (shown(&sts[e]) && sts[e].rule == st->rule) return NULL; /* listed there */
    for (int e = d + 1; e < n; e++)
        if (shown(&sts[e]) && sts[e].rule == st->rule && sl_check_status_tighter(&sts[e], st))
            st = &sts[e];
    return st;
}

/* Writes the header `hname` whose value is the list of the shown
 * statuses, each NAME;q=LIMIT;w=WINDOW_S (now == 0) or
 * NAME;r=REMAINING;t=RESET_S (now == 1); returns how many members.  A
 * member whose name is too long for SL_RLH_NAME_MAX is left out; a list
 * that does not fit is left out whole (cut). */
static int add_list(sl_rlh *o, const sl_check_status *sts, int n, const char *hname, int now)
{
    size_t nlen = strlen(hname), start = o->len;
    int members = 0;
    char name[SL_RLH_NAME_MAX];
    if (start + nlen + 4 > o->cap || o->n == SL_RLH_MAX_FIELDS) {
        o->cut = 1;
        return 0;
    }
    open_header(o, hname, nlen);
    size_t vstart = o->len;
    for (int d = 0; d < n; d++) {
        const sl_check_status *st = pick(sts, n, d);
        if (st == NULL) continue;
        if (sf_string(name, sizeof name, st->name, strlen(st->name)) == NULL) continue;
        size_t sn = strlen(name);
        if (o->len + sn + 2 + 2 * 24 + 8 + 2 > o->cap) { /* cannot fit: no header */
            o->len = start;
            o->cut = 1;
            return 0;
        }
        if (members++ > 0) o->b[o->len++] = ',', o->b[o->len++] = ' ';
        long long w = sl_rlh_ceil_s(st->rule->params.window_ms);
        char *e = o->b + o->len;
        if (now)
            e = member(e, name, sn, ";r=", (long long)st->remaining,
                       ";t=", sl_rlh_ceil_s(st->reset_after_ms));
        else
            e = member(e, name, sn, ";q=", (long long)st->limit, ";w=", w < 1 ? 1 : w);
        o->len = (size_t)(e - o->b);
    }
    if (members == 0) {
        o->len = start;
        return 0;
    }
    close_header(o, hname, vstart);
    return members;
}

void sl_rlh_check(sl_rlh *o, const sl_check_status *st, int n, const sl_result *x)
{
    int any = add_list(o, st, n, "RateLimit-Policy", 0) > 0;
    if (any) add_list(o, st, n, "RateLimit", 1);
    if (!any && x->allowed) return; /* no limit applied: nothing to tell */
    overall(o, x);
}
