/*
 * fuzz_whatif.c -- libFuzzer target for the line parsers of `sluicectl replay
 * --rules` (src/cli/whatif_parse.c).  The first byte picks the format (even:
 * lines, odd: combined), the rest is one line.  Checks the parsers' promises:
 *
 *   - a request has 1..SL_WHATIF_MAX_DESC descriptors of 1..MAX_ENTRIES
 *     entries, desc[i] == ent[i], a time and cost in range, and every key
 *     and value inside the line or the request's scratch space; the combined
 *     format gives exactly remote_address, method, path, at a whole second;
 *   - a refusal has a message: non-empty, printable, NUL-terminated within
 *     the buffer, and no longer than it;
 *   - the lines format round-trips: the request written back (every byte of
 *     keys and values but letters and digits as %XX, cost=N last) parses to
 *     the same request.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "whatif_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl__whatif_req req, again;
static char line2[SL_WHATIF_MAX_LINE + 1];

static int inside(const char *p, size_t n, const char *lo, size_t len)
{
    return (n == 0 && p != NULL) || (p >= lo && p + n <= lo + len);
}

/* keys_inside: keys too must lie in the line or scratch (the combined
 * format's are its three constant names). */
static void check_request(const sl__whatif_req *r, const char *line, size_t len, int keys_inside)
{
    if (r->ndesc < 1 || r->ndesc > SL_WHATIF_MAX_DESC) abort();
    if (r->cost < 0 || r->cost > SL_MAX_LIMIT) abort();
    if (r->t <= -SL_MAX_TIME_MS || r->t >= SL_MAX_TIME_MS) abort();
    for (int d = 0; d < r->ndesc; d++) {
        if (r->desc[d] != r->ent[d]) abort();
        if (r->nent[d] < 1 || r->nent[d] > SL_WHATIF_MAX_ENTRIES) abort();
        for (int j = 0; j < r->nent[d]; j++) {
            const sl_rule_entry *e = &r->desc[d][j];
            if (keys_inside && !inside(e->key, e->keylen, line, len) &&
                !inside(e->key, e->keylen, r->scratch, sizeof r->scratch))
                abort();
            if (!inside(e->value, e->valuelen, line, len) &&
                !inside(e->value, e->valuelen, r->scratch, sizeof r->scratch))
                abort();
        }
    }
}

static void check_message(const char *err, size_t cap)
{
    size_t n = strnlen(err, cap);
    if (n == 0 || n == cap) abort();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)err[i] < 0x20 || (unsigned char)err[i] > 0x7e) abort();
}

static int same_entry(const sl_rule_entry *a, const sl_rule_entry *b)
{
    return a->keylen == b->keylen && a->valuelen == b->valuelen &&
           memcmp(a->key, b->key, a->keylen) == 0 &&
           (a->valuelen == 0 || memcmp(a->value, b->value, a->valuelen) == 0);
}

/* Appends s as %XX but for letters and digits.  Returns the new end, or
 * NULL if it would not fit before end. */
static char *enc(char *o, const char *end, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int plain = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
        if (end - o < 3) return NULL;
        if (plain) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    return o;
}

/* Writes r back in the lines format and checks it parses to r. */
static void round_trip(const sl__whatif_req *r)
{
    char *o = line2, *end = line2 + SL_WHATIF_MAX_LINE;
    int n = snprintf(o, (size_t)(end - o), "%lld", (long long)r->t);
    o += n;
    for (int d = 0; d < r->ndesc; d++) {
        if (end - o < 1) return;
        *o++ = ' ';
        for (int j = 0; j < r->nent[d]; j++) {
            const sl_rule_entry *e = &r->desc[d][j];
            if (j > 0) {
                if (end - o < 1) return;
                *o++ = ',';
            }
            if ((o = enc(o, end, e->key, e->keylen)) == NULL) return;
            if (end - o < 1) return;
            *o++ = '=';
            if ((o = enc(o, end, e->value, e->valuelen)) == NULL) return;
        }
    }
    if (end - o < 30) return;
    o += snprintf(o, (size_t)(end - o), " cost=%lld", (long long)r->cost);
    char err[256];
    if (sl__whatif_parse_lines(line2, (size_t)(o - line2), &again, err, sizeof err) !=
        SL_WHATIF_REQ)
        abort();
    check_request(&again, line2, (size_t)(o - line2), 1);
    if (again.t != r->t || again.cost != r->cost || again.ndesc != r->ndesc) abort();
    for (int d = 0; d < r->ndesc; d++) {
        if (again.nent[d] != r->nent[d]) abort();
        for (int j = 0; j < r->nent[d]; j++)
            if (!same_entry(&again.desc[d][j], &r->desc[d][j])) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const sl__whatif_format f = (data[0] & 1) ? SL_WHATIF_COMBINED : SL_WHATIF_LINES;
    size_t len = size - 1;
    /* an exact-size copy, so that ASan sees any read past the line */
    char *line = malloc(len ? len : 1);
    if (line == NULL) return 0;
    memcpy(line, data + 1, len);

    char err[128];
    memset(err, 'Z', sizeof err);
    int rc = sl__whatif_parse(f, line, len, &req, err, sizeof err);
    if (rc == SL_WHATIF_BAD) {
        check_message(err, sizeof err);
    } else if (rc == SL_WHATIF_REQ) {
        check_request(&req, line, len, f == SL_WHATIF_LINES);
        if (f == SL_WHATIF_COMBINED) {
            if (req.ndesc != 3 || req.cost != 1 || req.t % 1000 != 0) abort();
            static const char *const keys[3] = {"remote_address", "method", "path"};
            for (int d = 0; d < 3; d++)
                if (req.nent[d] != 1 || req.desc[d][0].keylen != strlen(keys[d]) ||
                    memcmp(req.desc[d][0].key, keys[d], strlen(keys[d])) != 0)
                    abort();
            if (req.desc[0][0].valuelen == 0) abort(); /* the address is never empty */
        } else {
            for (int d = 0; d < req.ndesc; d++)
                for (int j = 0; j < req.nent[d]; j++)
                    if (req.desc[d][j].keylen == 0) abort();
            round_trip(&req);
        }
    } else if (rc != SL_WHATIF_SKIP) {
        abort();
    }
    free(line);
    return 0;
}
