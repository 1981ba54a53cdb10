/*
 * whatif_parse.c -- the line parsers of `sluicectl replay --rules`; the formats
 * are described in whatif_parse.h and docs/replay.md.
 *
 * Each parser makes one pass over (pointer, length), fills a caller-owned
 * request whose entries point into the line (or into the request's scratch
 * space for decoded %XX escapes), and allocates nothing.  Messages quote the
 * offending token, cut to QUOTE_MAX bytes with bytes outside printable ASCII
 * written \xNN, so a message is always one short printable line.
 */
#include "whatif_parse.h"

#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "text.h"

/* Control bytes: below 0x20, and DEL.  The lines format takes tabs as
 * blanks (is_ctl); in nginx's logs a tab would have been escaped (is_ctl_any). */
static int is_ctl_any(unsigned char c) { return c < 0x20 || c == 0x7f; }
static int is_ctl(unsigned char c) { return is_ctl_any(c) && c != '\t'; }
static int is_blank(unsigned char c) { return c == ' ' || c == '\t'; }

/* The first control byte (is_ctl_any) in [p, e), or e.  Eight bytes at a
 * time while none is below 0x20 or is 0x7f (text.h), then byte by byte. */
static const unsigned char *find_ctl(const unsigned char *p, const unsigned char *e)
{
    p = sl__skip_words(p, e, 0x20);
    while (p < e && !is_ctl_any(*p)) p++;
    return p;
}

/* The message for the control byte at p (l: the line's start). */
static int ctl_error(const unsigned char *l, const unsigned char *p, char *err, size_t errlen)
{
    sl__ctl_message(err, errlen, *p, (size_t)(p - l) + 1);
    return SL_WHATIF_BAD;
}

static int too_long(char *err, size_t errlen)
{
    snprintf(err, errlen, "line is longer than %d bytes", SL_WHATIF_MAX_LINE);
    return SL_WHATIF_BAD;
}

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int sl__whatif_format_parse(const char *name, size_t len, sl__whatif_format *f)
{
    if (len == 5 && memcmp(name, "lines", 5) == 0) {
        *f = SL_WHATIF_LINES;
        return 0;
    }
    if (len == 8 && memcmp(name, "combined", 8) == 0) {
        *f = SL_WHATIF_COMBINED;
        return 0;
    }
    return -1;
}

int sl__whatif_parse(sl__whatif_format f, const char *line, size_t len, sl__whatif_req *req,
                     char *err, size_t errlen)
{
    return f == SL_WHATIF_COMBINED ? sl__whatif_parse_combined(line, len, req, err, errlen)
                                   : sl__whatif_parse_lines(line, len, req, err, errlen);
}

/* ---- the lines format ---------------------------------------------------- */

/* Points *out at the bytes of [s, e) with %XX escapes decoded: at s itself
 * when there is no '%', else at a copy written at *sc (advanced past it).
 * Returns 0, or -1 with the bad escape in [*bad, *bad + *badlen): a '%' not
 * followed by two hex digits, and what follows it (up to 2 bytes). */
static int decode(const unsigned char *s, const unsigned char *e, const char **out, size_t *outlen,
                  char **sc, const unsigned char **bad, size_t *badlen)
{
    const unsigned char *pct = memchr(s, '%', (size_t)(e - s));
    if (pct == NULL) {
        *out = (const char *)s;
        *outlen = (size_t)(e - s);
        return 0;
    }
    char *o = *sc, *start = o;
    memcpy(o, s, (size_t)(pct - s));
    o += pct - s;
    for (const unsigned char *p = pct; p < e;) {
        if (*p != '%') {
            *o++ = (char)*p++;
            continue;
        }
        int hi = e - p >= 3 ? hexval(p[1]) : -1, lo = e - p >= 3 ? hexval(p[2]) : -1;
        if (hi < 0 || lo < 0) {
            *bad = p;
            *badlen = e - p < 3 ? (size_t)(e - p) : 3;
            return -1;
        }
        *o++ = (char)(hi * 16 + lo);
        p += 3;
    }
    *out = start;
    *outlen = (size_t)(o - start);
    *sc = o;
    return 0;
}

/* Parses the descriptor field [s, e) (no blank, no control byte) as
 * descriptor number req->ndesc.  Returns 0, or SL_WHATIF_BAD with err set. */
static int parse_desc(const unsigned char *s, const unsigned char *e, sl__whatif_req *req,
                      char **sc, char *err, size_t errlen)
{
    const int d = req->ndesc;
    const unsigned char *const field = s;
    char q[SL__QBUF];
    int n = 0;
    for (;;) {
        const unsigned char *comma = memchr(s, ',', (size_t)(e - s));
        if (comma == NULL) comma = e;
        if (comma == s) {
            snprintf(err, errlen, "descriptor %d: empty entry in '%s' (a ',' too many)", d + 1,
                     sl__quote(field, (size_t)(e - field), q));
            return SL_WHATIF_BAD;
        }
        if (n == SL_WHATIF_MAX_ENTRIES) {
            snprintf(err, errlen,
                     "descriptor %d has more than %d entries (rules nest at most %d deep)", d + 1,
                     SL_WHATIF_MAX_ENTRIES, SL_WHATIF_MAX_ENTRIES);
            return SL_WHATIF_BAD;
        }
        const unsigned char *eq = memchr(s, '=', (size_t)(comma - s)), *bad = NULL;
        size_t blen = 0;
        if (eq == NULL) {
            snprintf(err, errlen, "descriptor %d: entry '%s' has no '=' (expected key=value)",
                     d + 1, sl__quote(s, (size_t)(comma - s), q));
            return SL_WHATIF_BAD;
        }
        if (eq == s) {
            snprintf(err, errlen, "descriptor %d: entry '%s' has an empty key", d + 1,
                     sl__quote(s, (size_t)(comma - s), q));
            return SL_WHATIF_BAD;
        }
        sl_rule_entry *en = &req->ent[d][n];
        if (decode(s, eq, &en->key, &en->keylen, sc, &bad, &blen) != 0 ||
            decode(eq + 1, comma, &en->value, &en->valuelen, sc, &bad, &blen) != 0) {
            char q2[SL__QBUF];
            snprintf(err, errlen,
                     "descriptor %d: bad escape '%s' in '%s' (%%XX with two hex digits; a '%%' "
                     "is %%25)",
                     d + 1, sl__quote(bad, blen, q), sl__quote(s, (size_t)(comma - s), q2));
            return SL_WHATIF_BAD;
        }
        n++;
        if (comma == e) break;
        s = comma + 1;
    }
    req->nent[d] = n;
    req->desc[d] = req->ent[d];
    req->ndesc = d + 1;
    return 0;
}

int sl__whatif_parse_lines(const char *line, size_t len, sl__whatif_req *req, char *err,
                           size_t errlen)
{
    const unsigned char *const l = (const unsigned char *)line;
    const unsigned char *p = l, *e = l + len, *tok;
    char q[SL__QBUF];
    char *sc = req->scratch;

    if (len > SL_WHATIF_MAX_LINE) return too_long(err, errlen);
    if (p < e && e[-1] == '\r') e--; /* CRLF line ends */
    while (p < e && is_blank(*p)) p++;
    if (p == e || *p == '#') return SL_WHATIF_SKIP;

    /* T */
    tok = p;
    while (p < e && !is_blank(*p) && !is_ctl(*p)) p++;
    if (p < e && is_ctl(*p)) return ctl_error(l, p, err, errlen);
    {
        size_t n = (size_t)(p - tok);
        int neg = *tok == '-';
        int64_t t;
        if (sl_int_parse((const char *)tok + neg, n - (size_t)neg, SL_MAX_TIME_MS - 1, &t) != 0) {
            if (sl__looks_numeric(tok, n))
                snprintf(err, errlen, "time '%s' is out of range (|T| must be below %lld ms)",
                         sl__quote(tok, n, q), (long long)SL_MAX_TIME_MS);
            else
                snprintf(err, errlen, "time '%s' is not an integer (T must be milliseconds)",
                         sl__quote(tok, n, q));
            return SL_WHATIF_BAD;
        }
        req->t = neg ? -t : t;
    }

    /* descriptors, and perhaps cost=N last */
    req->ndesc = 0;
    req->cost = 1;
    for (;;) {
        while (p < e && is_blank(*p)) p++;
        if (p == e) break;
        if (is_ctl(*p)) return ctl_error(l, p, err, errlen);
        tok = p;
        while (p < e && !is_blank(*p) && !is_ctl(*p)) p++;
        if (p < e && is_ctl(*p)) return ctl_error(l, p, err, errlen);
        const unsigned char *after = p;
        while (after < e && is_blank(*after)) after++;
        size_t n = (size_t)(p - tok);
        if (after == e && n >= 5 && memcmp(tok, "cost=", 5) == 0 && memchr(tok, ',', n) == NULL) {
            const unsigned char *v = tok + 5;
            size_t vn = n - 5;
            if (sl_int_parse((const char *)v, vn, SL_MAX_LIMIT, &req->cost) != 0) {
                if (sl__looks_numeric(v, vn))
                    snprintf(err, errlen, "cost '%s' is out of range (0 to %lld)", sl__quote(v, vn, q),
                             (long long)SL_MAX_LIMIT);
                else
                    snprintf(err, errlen, "cost '%s' is not an integer", sl__quote(v, vn, q));
                return SL_WHATIF_BAD;
            }
            break;
        }
        if (req->ndesc == SL_WHATIF_MAX_DESC) {
            snprintf(err, errlen, "more than %d descriptors (RL.CHECK takes at most %d)",
                     SL_WHATIF_MAX_DESC, SL_WHATIF_MAX_DESC);
            return SL_WHATIF_BAD;
        }
        if (parse_desc(tok, p, req, &sc, err, errlen) != 0) return SL_WHATIF_BAD;
    }
    if (req->ndesc == 0) {
        snprintf(err, errlen,
                 "missing descriptor (expected: T key=value[,key=value...] ... "
                 "[cost=N])");
        return SL_WHATIF_BAD;
    }
    return SL_WHATIF_REQ;
}

/* ---- nginx's combined format --------------------------------------------- */

int64_t sl__whatif_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    /* Howard Hinnant's days_from_civil: years start in March, so the leap
     * day is the last day of a year; 146097 days per 400-year era. */
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;                                   /* 0..399 */
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* 0..365 */
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* 0..146096 */
    return era * 146097 + doe - 719468;
}

static int digits(const unsigned char *s, size_t n, unsigned *out)
{
    unsigned v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return 0;
}

/* $time_local, "dd/Mon/yyyy:HH:MM:SS +hhmm" (n bytes), to ms since the
 * epoch.  Returns 0, or SL_WHATIF_BAD with err set. */
static int parse_time_local(const unsigned char *s, size_t n, int64_t *ms, char *err, size_t errlen)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const unsigned char mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    char q[SL__QBUF], q2[SL__QBUF];
    unsigned d, y, hh, mi, ss, zh, zm, mon = 0;
    if (n != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' ||
        s[20] != ' ' || digits(s, 2, &d) || digits(s + 7, 4, &y) || digits(s + 12, 2, &hh) ||
        digits(s + 15, 2, &mi) || digits(s + 18, 2, &ss)) {
        snprintf(err, errlen, "bad time '%s' (expected dd/Mon/yyyy:HH:MM:SS +hhmm)",
                 sl__quote(s, n, q));
        return SL_WHATIF_BAD;
    }
    for (unsigned i = 0; i < 12 && mon == 0; i++)
        if (memcmp(s + 3, months + 3 * i, 3) == 0) mon = i + 1;
    if (mon == 0) {
        snprintf(err, errlen, "bad month '%s' in time '%s' (expected Jan, Feb, ... Dec)",
                 sl__quote(s + 3, 3, q2), sl__quote(s, n, q));
        return SL_WHATIF_BAD;
    }
    if ((s[21] != '+' && s[21] != '-') || digits(s + 22, 2, &zh) || digits(s + 24, 2, &zm) ||
        zh > 23 || zm > 59) {
        snprintf(err, errlen, "bad zone '%s' in time '%s' (expected +hhmm or -hhmm)",
                 sl__quote(s + 21, 5, q2), sl__quote(s, n, q));
        return SL_WHATIF_BAD;
    }
    unsigned last = mdays[mon - 1] + (mon == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0));
    if (d < 1 || d > last) {
        snprintf(err, errlen, "bad day %u in time '%s' (%.3s %u has %u days)", d, sl__quote(s, n, q),
                 months + 3 * (mon - 1), y, last);
        return SL_WHATIF_BAD;
    }
    if (hh > 23 || mi > 59 || ss > 59) {
        snprintf(err, errlen, "bad time of day '%s' in time '%s' (00:00:00 to 23:59:59)",
                 sl__quote(s + 12, 8, q2), sl__quote(s, n, q));
        return SL_WHATIF_BAD;
    }
    int64_t zone = ((int64_t)zh * 3600 + zm * 60) * (s[21] == '-' ? -1 : 1);
    int64_t secs = sl__whatif_days_from_civil(y, mon, d) * 86400 + hh * 3600 + mi * 60 + ss;
    *ms = (secs - zone) * 1000;
    return 0;
}

/* At p, a '"': returns the closing '"' (one not preceded by a backslash
 * that escapes it), or NULL if there is none before e. */
static const unsigned char *end_quote(const unsigned char *p, const unsigned char *e)
{
    for (p++; p < e; p++) {
        if (*p == '\\') {
            p++; /* whatever follows is escaped */
            continue;
        }
        if (*p == '"') return p;
    }
    return NULL;
}

static void set_entry(sl__whatif_req *req, int d, const char *key, size_t klen,
                      const unsigned char *v, size_t vlen)
{
    req->ent[d][0] = (sl_rule_entry){key, klen, (const char *)v, vlen};
    req->nent[d] = 1;
    req->desc[d] = req->ent[d];
}

#define COMBINED "ADDR - USER [TIME] \"REQUEST\" STATUS BYTES \"REFERER\" \"USER_AGENT\""

int sl__whatif_parse_combined(const char *line, size_t len, sl__whatif_req *req, char *err,
                              size_t errlen)
{
    const unsigned char *const l = (const unsigned char *)line;
    const unsigned char *p = l, *e = l + len, *tok, *x;
    char q[SL__QBUF];

    if (len > SL_WHATIF_MAX_LINE) return too_long(err, errlen);
    if (p < e && e[-1] == '\r') e--;
    x = p;
    while (x < e && is_blank(*x)) x++;
    if (x == e || *x == '#') return SL_WHATIF_SKIP;
    if ((x = find_ctl(p, e)) < e) return ctl_error(l, x, err, errlen);

    /* $remote_addr - $remote_user [ */
    if (*p == ' ') {
        snprintf(err, errlen,
                 "the line starts with a space (expected nginx's combined format: " COMBINED ")");
        return SL_WHATIF_BAD;
    }
    const unsigned char *addr = p;
    p = memchr(p, ' ', (size_t)(e - p));
    if (p == NULL || e - p < 3 || memcmp(p, " - ", 3) != 0) {
        snprintf(err, errlen,
                 "expected ' - ' after the remote address '%s' (nginx's combined "
                 "format: " COMBINED ")",
                 sl__quote(addr, (size_t)((p ? p : e) - addr), q));
        return SL_WHATIF_BAD;
    }
    const size_t addrlen = (size_t)(p - addr);
    p += 3;
    tok = memmem(p, (size_t)(e - p), " [", 2); /* the user may be empty */
    if (tok == NULL) {
        snprintf(err, errlen,
                 "missing ' [TIME]' after the remote user (nginx's combined format: " COMBINED ")");
        return SL_WHATIF_BAD;
    }
    p = tok + 2;

    /* $time_local] */
    tok = p;
    p = memchr(p, ']', (size_t)(e - p));
    if (p == NULL) {
        snprintf(err, errlen, "unterminated time '[%s' (no ']')", sl__quote(tok, (size_t)(e - tok), q));
        return SL_WHATIF_BAD;
    }
    if (parse_time_local(tok, (size_t)(p - tok), &req->t, err, errlen) != 0) return SL_WHATIF_BAD;
    p++;

    /* "$request" */
    if (e - p < 2 || p[0] != ' ' || p[1] != '"') {
        snprintf(err, errlen, "expected ' \"REQUEST\"' after the time, got '%s'",
                 sl__quote(p, (size_t)(e - p), q));
        return SL_WHATIF_BAD;
    }
    p++;
    const unsigned char *rq = p + 1, *rqe = end_quote(p, e);
    if (rqe == NULL) {
        snprintf(err, errlen, "unterminated request '%s' (no closing '\"')",
                 sl__quote(p, (size_t)(e - p), q));
        return SL_WHATIF_BAD;
    }
    p = rqe + 1;

    /* $status $body_bytes_sent */
    unsigned status;
    if (p == e || *p != ' ') {
        snprintf(err, errlen, "expected ' STATUS' after the request, got '%s'",
                 sl__quote(p, (size_t)(e - p), q));
        return SL_WHATIF_BAD;
    }
    tok = p + 1;
    p = memchr(tok, ' ', (size_t)(e - tok));
    if (p == NULL) p = e;
    if (p - tok != 3 || digits(tok, 3, &status) != 0) {
        snprintf(err, errlen, "bad status '%s' (expected three digits)",
                 sl__quote(tok, (size_t)(p - tok), q));
        return SL_WHATIF_BAD;
    }
    tok = p == e ? p : p + 1;
    p = tok;
    while (p < e && *p != ' ') p++;
    x = tok;
    while (x < p && *x >= '0' && *x <= '9') x++;
    if (tok == p || x != p) {
        snprintf(err, errlen, "bad body_bytes_sent '%s' (expected a number)",
                 sl__quote(tok, (size_t)(p - tok), q));
        return SL_WHATIF_BAD;
    }

    /* "$http_referer" "$http_user_agent" [anything] */
    static const char *const names[2] = {"referer", "user agent"};
    for (int f = 0; f < 2; f++) {
        if (e - p < 2 || p[0] != ' ' || p[1] != '"') {
            snprintf(err, errlen,
                     "missing %s (expected ' \"...\"', got '%s'; nginx's combined "
                     "format: " COMBINED ")",
                     names[f], sl__quote(p, (size_t)(e - p), q));
            return SL_WHATIF_BAD;
        }
        tok = p + 1;
        p = end_quote(tok, e);
        if (p == NULL) {
            snprintf(err, errlen, "unterminated %s '%s' (no closing '\"')", names[f],
                     sl__quote(tok, (size_t)(e - tok), q));
            return SL_WHATIF_BAD;
        }
        p++;
    }
    if (p < e && *p != ' ') {
        snprintf(err, errlen, "unexpected '%s' right after the user agent's closing '\"'",
                 sl__quote(p, (size_t)(e - p), q));
        return SL_WHATIF_BAD;
    }

    /* METHOD TARGET[?QUERY] [PROTOCOL] */
    const unsigned char *sp = memchr(rq, ' ', (size_t)(rqe - rq));
    const unsigned char *path = rqe, *pathe = rqe;
    if (sp != NULL) {
        path = sp + 1;
        pathe = memchr(path, ' ', (size_t)(rqe - path));
        if (pathe == NULL) pathe = rqe;
        const unsigned char *qm = memchr(path, '?', (size_t)(pathe - path));
        if (qm != NULL) pathe = qm;
    } else {
        sp = rqe;
    }
    set_entry(req, 0, "remote_address", 14, addr, addrlen);
    set_entry(req, 1, "method", 6, rq, (size_t)(sp - rq));
    set_entry(req, 2, "path", 4, path, (size_t)(pathe - path));
    req->ndesc = 3;
    req->cost = 1;
    return SL_WHATIF_REQ;
}
