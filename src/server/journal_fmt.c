/*
 * journal_fmt.c -- the decision journal's bytes (journal_fmt.h): heads,
 * framing, and the parser.  No I/O: journal.c reads and writes the files,
 * tests/fuzz/fuzz_journal.c feeds the parser whatever it likes.
 */
#include <string.h>
#include <zlib.h>

#include "journal_fmt.h"
#include "snapshot.h"
#include "store.h"

static uint32_t crc_of(const uint8_t *p, size_t n)
{
    return (uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)n);
}

void sl_journal_head_make(uint8_t *h, uint32_t gen, uint64_t base)
{
    memset(h, 0, SL_JOURNAL_HEAD);
    memcpy(h, SL_JOURNAL_MAGIC, 16); /* with its NUL */
    sl__st32(h + 16, SL_JOURNAL_VERSION);
    sl__st32(h + 20, gen);
    sl__st64(h + 24, base);
    sl__st32(h + 32, crc_of(h, 32));
}

int sl_journal_head_parse(const uint8_t *p, size_t len, uint32_t *gen, uint64_t *base,
                          const char **why)
{
    if (len < SL_JOURNAL_HEAD || memcmp(p, SL_JOURNAL_MAGIC, 16) != 0) {
        *why = "not a sluice journal (bad magic)";
        return -1;
    }
    if (sl__ld32(p + 16) != SL_JOURNAL_VERSION) {
        *why = "unsupported version";
        return -1;
    }
    if (sl__ld32(p + 32) != crc_of(p, 32)) {
        *why = "head checksum mismatch";
        return -1;
    }
    *gen = sl__ld32(p + 20);
    *base = sl__ld64(p + 24);
    return 0;
}

size_t sl_journal_frame(uint8_t *rec, size_t blen)
{
    sl__st32(rec, (uint32_t)blen);
    uLong c = crc32(crc32(0L, Z_NULL, 0), rec, 4);
    c = crc32(c, rec + SL_JREC_HDR, (uInt)blen);
    sl__st32(rec + 4, (uint32_t)c);
    return SL_JREC_HDR + blen;
}

/* Whether p[from..len) is all zero bytes. */
static int zeros(const uint8_t *p, size_t from, size_t len)
{
    for (size_t i = from; i < len; i++)
        if (p[i] != 0) return 0;
    return 1;
}

/* Checks a body whose checksum is right. */
static int body(const uint8_t *b, size_t n, sl_jrec *r, const char **why)
{
    if (n < SL_JREC_FIXED) {
        *why = "record too short";
        return -1;
    }
    r->type = b[0];
    r->seq = sl__ld64(b + 1);
    const uint8_t *q = b + SL_JREC_FIXED;
    size_t m = n - SL_JREC_FIXED;
    if (r->type == SL_JREC_IMAGE) {
        if (sl__store_image_check(q, m, why) == 0) return -1;
        r->img = q;
        r->imglen = m;
        return 0;
    }
    if (r->type == SL_JREC_GONE) {
        if (m < 3 || m - 2 > SL_MAX_KEY) {
            *why = "bad key length";
            return -1;
        }
        r->kind = sl__ld16(q);
        if ((r->kind & 7u) >= SL_ALGO_COUNT || (r->kind & ~(7u | SL__KIND_SPACE)) != 0) {
            *why = "unknown algorithm";
            return -1;
        }
        r->key = q + 2;
        r->klen = m - 2;
        return 0;
    }
    *why = "unknown record type";
    return -1;
}

int sl_journal_next(const uint8_t *p, size_t len, size_t *off, sl_jrec *r, const char **why)
{
    size_t o = *off;
    *why = NULL;
    memset(r, 0, sizeof *r);
    if (o >= len) return 0;
    r->off = o;
    if (len - o < SL_JREC_HDR) {
        *why = "record header cut short";
        return SL_JTORN;
    }
    size_t n = sl__ld32(p + o);
    if (n > SL_JREC_MAX) {
        *why = "impossible record length";
        return zeros(p, o, len) ? SL_JTORN : SL_JCORRUPT;
    }
    if (len - o - SL_JREC_HDR < n) {
        *why = "record runs past the end of the file";
        return SL_JTORN;
    }
    size_t end = o + SL_JREC_HDR + n;
    uLong c = crc32(crc32(0L, Z_NULL, 0), p + o, 4);
    c = crc32(c, p + o + SL_JREC_HDR, (uInt)n);
    if ((uint32_t)c != sl__ld32(p + o + 4)) {
        *why = "checksum mismatch";
        return end == len || zeros(p, o, len) ? SL_JTORN : SL_JCORRUPT;
    }
    if (body(p + o + SL_JREC_HDR, n, r, why) != 0) return SL_JCORRUPT;
    r->off = o;
    *off = end;
    return 1;
}
