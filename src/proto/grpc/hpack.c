/*
 * hpack.c -- HPACK's decoder and the encoder's pieces (hpack.h).
 *
 * The dynamic table: entries' bytes (name then value) are appended to mem,
 * the oldest evicted from the ring's tail.  Evicting only drops an entry;
 * when an entry would not fit after mem's last byte, the live ones move
 * to mem's start first.  Live bytes are at most SL_HPACK_TABLE and an
 * entry at most as much, so 2 * SL_HPACK_TABLE of mem always holds them,
 * and a move happens at most once per SL_HPACK_TABLE bytes inserted:
 * O(1) amortised a byte.
 *
 * Huffman: RFC 7541's code is canonical (codes of one length are
 * consecutive, in symbol order, and each length's first code follows the
 * previous length's last), so appendix B is written here as each
 * symbol's code length only, and the codes are rebuilt from that
 * (tests/test_hpack.c holds the result to nghttp2's encoder).  Decoding
 * reads a 32-bit window: a code of up to 8 bits is found with one look-up
 * of the window's first byte (most bytes of paths and names), a longer one
 * by comparing the window with each longer length's end.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpack.h"

/* ---- the static table (RFC 7541 appendix A) ---------------------------- */

typedef struct sfield {
    const char *name, *value;
    uint8_t nlen, vlen;
} sfield;

#define SF(n, v)                                                                                   \
    {                                                                                              \
        n, v, sizeof(n) - 1, sizeof(v) - 1                                                         \
    }
static const sfield stable[SL_HPACK_STATIC + 1] = {
    {0},
    SF(":authority", ""),
    SF(":method", "GET"),
    SF(":method", "POST"),
    SF(":path", "/"),
    SF(":path", "/index.html"),
    SF(":scheme", "http"),
    SF(":scheme", "https"),
    SF(":status", "200"),
    SF(":status", "204"),
    SF(":status", "206"),
    SF(":status", "304"),
    SF(":status", "400"),
    SF(":status", "404"),
    SF(":status", "500"),
    SF("accept-charset", ""),
    SF("accept-encoding", "gzip, deflate"),
    SF("accept-language", ""),
    SF("accept-ranges", ""),
    SF("accept", ""),
    SF("access-control-allow-origin", ""),
    SF("age", ""),
    SF("allow", ""),
    SF("authorization", ""),
    SF("cache-control", ""),
    SF("content-disposition", ""),
    SF("content-encoding", ""),
    SF("content-language", ""),
    SF("content-length", ""),
    SF("content-location", ""),
    SF("content-range", ""),
    SF("content-type", ""),
    SF("cookie", ""),
    SF("date", ""),
    SF("etag", ""),
    SF("expect", ""),
    SF("expires", ""),
    SF("from", ""),
    SF("host", ""),
    SF("if-match", ""),
    SF("if-modified-since", ""),
    SF("if-none-match", ""),
    SF("if-range", ""),
    SF("if-unmodified-since", ""),
    SF("last-modified", ""),
    SF("link", ""),
    SF("location", ""),
    SF("max-forwards", ""),
    SF("proxy-authenticate", ""),
    SF("proxy-authorization", ""),
    SF("range", ""),
    SF("referer", ""),
    SF("refresh", ""),
    SF("retry-after", ""),
    SF("server", ""),
    SF("set-cookie", ""),
    SF("strict-transport-security", ""),
    SF("transfer-encoding", ""),
    SF("user-agent", ""),
    SF("vary", ""),
    SF("via", ""),
    SF("www-authenticate", ""),
};

/* ---- Huffman (RFC 7541 appendix B) ---------------------------------------- */

#define EOS 256

/* Each symbol's code length in bits, symbols 0..255 and EOS. */
static const uint8_t code_len[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, /* 0 */
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, /* 16 */
    6,  10, 10, 12, 13, 6,  8,  11, 10, 10, 8,  11, 8,  6,  6,  6,  /* ' ' */
    5,  5,  5,  6,  6,  6,  6,  6,  6,  6,  7,  8,  15, 6,  12, 10, /* '0' */
    13, 6,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  7,  /* '@' */
    7,  7,  7,  7,  7,  7,  7,  7,  8,  7,  8,  13, 19, 13, 14, 6,  /* 'P' */
    15, 5,  6,  5,  6,  5,  6,  6,  6,  5,  7,  7,  6,  6,  6,  5,  /* '`' */
    6,  7,  6,  5,  5,  6,  7,  7,  7,  7,  7,  15, 11, 14, 13, 28, /* 'p' */
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, /* 128 */
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, /* 144 */
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, /* 160 */
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, /* 176 */
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, /* 192 */
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, /* 208 */
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, /* 224 */
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, /* 240 */
    30,                                                             /* EOS */
};

#define MAXLEN 30

/* The decoding tables, built once from code_len. */
static uint16_t fast[256];          /* by a window's first byte: sym << 4 | len
                                       (len <= 8), or 0: a longer code */
static uint64_t limit[MAXLEN + 1];  /* codes of length L are the windows
                                       below limit[L] (left-aligned in 32
                                       bits) not below limit[L - 1] */
static uint32_t first[MAXLEN + 1];  /* length L's first code */
static uint16_t offset[MAXLEN + 1]; /* its first symbol's place in sorted */
static uint16_t sorted[257];        /* the symbols by (length, symbol) */
static pthread_once_t huff_once = PTHREAD_ONCE_INIT;

static void huff_build(void)
{
    unsigned count[MAXLEN + 1] = {0};
    for (int s = 0; s <= EOS; s++) count[code_len[s]]++;
    uint32_t code = 0;
    unsigned k = 0;
    for (int len = 1; len <= MAXLEN; len++) {
        first[len] = code;
        offset[len] = (uint16_t)k;
        for (int s = 0; s <= EOS; s++)
            if (code_len[s] == len) sorted[k++] = (uint16_t)s;
        code += count[len];
        limit[len] = (uint64_t)code << (32 - len);
        if (len <= 8)
            for (uint32_t c = first[len]; c < code; c++) {
                uint16_t sym = sorted[offset[len] + (c - first[len])];
                for (uint32_t b = c << (8 - len); b < (c + 1) << (8 - len); b++)
                    fast[b] = (uint16_t)(sym << 4 | len);
            }
        code <<= 1;
    }
}

long sl_hpack_huff_decode(const uint8_t *p, size_t n, uint8_t *out)
{
    pthread_once(&huff_once, huff_build);
    const uint8_t *end = p + n;
    uint8_t *o = out;
    uint64_t acc = 0; /* the next bits, left-aligned */
    int bits = 0;     /* how many */
    for (;;) {
        while (bits <= 56 && p < end) {
            acc |= (uint64_t)*p++ << (56 - bits);
            bits += 8;
        }
        if (bits == 0) break;
        uint32_t w = (uint32_t)(acc >> 32);
        unsigned f = fast[w >> 24], len, sym;
        if (f != 0) {
            len = f & 15;
            sym = f >> 4;
        } else {
            len = 9;
            while (len <= MAXLEN && (uint64_t)w >= limit[len]) len++;
            if (len > MAXLEN) return SL_HPACK_ERR; /* cannot be: the code is complete */
            sym = sorted[offset[len] + ((w >> (32 - len)) - first[len])];
        }
        if ((int)len > bits) { /* the rest is padding: EOS's first bits, < 8 of them */
            if (bits > 7 || (w >> (32 - bits)) != (1u << bits) - 1) return SL_HPACK_ERR;
            break;
        }
        if (sym == EOS) return SL_HPACK_ERR;
        *o++ = (uint8_t)sym;
        acc <<= len;
        bits -= (int)len;
    }
    return (long)(o - out);
}

/* ---- the dynamic table ------------------------------------------------------ */

void sl_hpack_init(sl_hpack *d)
{
    memset(d, 0, sizeof *d);
    d->max = SL_HPACK_TABLE;
}

void sl_hpack_free(sl_hpack *d)
{
    free(d->mem);
    free(d->str);
    d->mem = d->str = NULL;
}

/* The entry i places from the newest (0: the newest); i < d->n. */
static sl_hpack_entry *entry(sl_hpack *d, unsigned i)
{
    return &d->ent[(d->head + SL_HPACK_ENTRIES - i) % SL_HPACK_ENTRIES];
}

static void evict_to(sl_hpack *d, size_t max)
{
    while (d->size > max) {
        sl_hpack_entry *e = entry(d, d->n - 1);
        d->size -= (size_t)e->nlen + e->vlen + 32;
        d->n--;
    }
    if (d->n == 0) d->end = 0;
}

/* Inserts (name, value), neither in d->mem (the caller copies a name
 * from the table first).  Returns 0 or SL_HPACK_NOMEM. */
static int insert(sl_hpack *d, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    size_t sz = nlen + vlen + 32;
    if (sz > d->max) { /* larger than the table: empties it (RFC 7541 4.4) */
        evict_to(d, 0);
        return 0;
    }
    evict_to(d, d->max - sz);
    if (d->mem == NULL && (d->mem = malloc(2 * SL_HPACK_TABLE)) == NULL) return SL_HPACK_NOMEM;
    if (d->end + nlen + vlen > 2 * SL_HPACK_TABLE) { /* move the live entries down */
        size_t start = d->n ? entry(d, d->n - 1)->off : d->end;
        memmove(d->mem, d->mem + start, d->end - start);
        for (unsigned i = 0; i < d->n; i++) entry(d, i)->off -= (uint32_t)start;
        d->end -= start;
    }
    d->head = (d->head + 1) % SL_HPACK_ENTRIES;
    d->n++;
    sl_hpack_entry *e = entry(d, 0);
    e->off = (uint32_t)d->end;
    e->nlen = (uint16_t)nlen;
    e->vlen = (uint16_t)vlen;
    memcpy(d->mem + d->end, name, nlen);
    memcpy(d->mem + d->end + nlen, value, vlen);
    d->end += nlen + vlen;
    d->size += sz;
    return 0;
}

/* The field at index i (1-based: static, then dynamic); 0 when there is
 * none. */
static int lookup(sl_hpack *d, uint32_t i, const uint8_t **name, size_t *nlen,
                  const uint8_t **value, size_t *vlen)
{
    if (i == 0) return 0;
    if (i <= SL_HPACK_STATIC) {
        *name = (const uint8_t *)stable[i].name, *nlen = stable[i].nlen;
        *value = (const uint8_t *)stable[i].value, *vlen = stable[i].vlen;
        return 1;
    }
    i -= SL_HPACK_STATIC + 1;
    if (i >= d->n) return 0;
    sl_hpack_entry *e = entry(d, i);
    *name = d->mem + e->off, *nlen = e->nlen;
    *value = d->mem + e->off + e->nlen, *vlen = e->vlen;
    return 1;
}

/* ---- decoding -------------------------------------------------------------------- */

/* An integer with a `prefix`-bit prefix at *p; at most 2^28 (more is no
 * size or index a block can mean).  Returns 0 or SL_HPACK_ERR. */
static int get_int(const uint8_t **p, const uint8_t *end, int prefix, uint32_t *v)
{
    uint32_t mask = (1u << prefix) - 1, x = **p & mask;
    (*p)++;
    if (x < mask) {
        *v = x;
        return 0;
    }
    for (int shift = 0; shift <= 21; shift += 7) {
        if (*p == end) return SL_HPACK_ERR;
        uint8_t b = *(*p)++;
        x += (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return SL_HPACK_ERR;
}

/* Room in d->str for n more bytes after its first `used`. */
static int str_room(sl_hpack *d, size_t used, size_t n)
{
    if (d->str != NULL && used + n <= d->strcap) return 0;
    size_t cap = d->strcap ? d->strcap : 256;
    while (cap < used + n) cap *= 2;
    uint8_t *s = realloc(d->str, cap);
    if (s == NULL) return SL_HPACK_NOMEM;
    d->str = s;
    d->strcap = cap;
    return 0;
}

/* A string literal at *p: raw (pointing into the block) or Huffman-decoded
 * into d->str at *used (which grows; *s points there, but d->str may move
 * with the next string: the caller places it again by offset).  *s is
 * never NULL, even for an empty string.  Returns 0 or an SL_HPACK_ code. */
static int get_str(sl_hpack *d, const uint8_t **p, const uint8_t *end, size_t *used,
                   const uint8_t **s, size_t *len)
{
    if (*p == end) return SL_HPACK_ERR;
    int huff = **p & 0x80;
    uint32_t n;
    if (get_int(p, end, 7, &n) != 0 || n > (size_t)(end - *p)) return SL_HPACK_ERR;
    if (!huff) {
        *s = *p, *len = n;
        *p += n;
        return 0;
    }
    int rc = str_room(d, *used, (size_t)n * 8 / 5 + 1);
    if (rc != 0) return rc;
    long k = -1;
    sl_hpack_memo *m = NULL;
    if (n <= SL_HPACK_MEMO_MAX) { /* decoded lately? */
        for (unsigned i = 0; i < SL_HPACK_MEMO; i++)
            if (d->memo[i].clen == n && memcmp(d->memo[i].coded, *p, n) == 0) {
                m = &d->memo[i];
                memcpy(d->str + *used, m->dec, m->dlen);
                k = m->dlen;
                break;
            }
    }
    if (m == NULL) {
        if ((k = sl_hpack_huff_decode(*p, n, d->str + *used)) < 0) return SL_HPACK_ERR;
        if (n <= SL_HPACK_MEMO_MAX && n > 0) { /* remembered, in place of the oldest */
            m = &d->memo[d->memo_next++ % SL_HPACK_MEMO];
            m->clen = (uint8_t)n;
            m->dlen = (uint8_t)k;
            memcpy(m->coded, *p, n);
            memcpy(m->dec, d->str + *used, (size_t)k);
        }
    }
    /* an empty one points at "": d->str may move under a pointer into it,
     * and the caller re-places only strings that took room there */
    *s = k ? d->str + *used : (const uint8_t *)"";
    *p += n;
    *len = (size_t)k;
    *used += (size_t)k;
    return 0;
}

int sl_hpack_decode(sl_hpack *d, const uint8_t *p, size_t n, sl_hpack_field_fn fn, void *arg)
{
    if (n == 0) return 0; /* p may be NULL then */
    const uint8_t *end = p + n;
    int fields = 0, stop = 0;
    /* d->str's strings are placed by offset: a Huffman value may grow it */
    while (p < end) {
        uint8_t b = *p;
        const uint8_t *name, *value;
        size_t nlen, vlen, used = 0;
        uint32_t i;
        if (b & 0x80) { /* indexed field */
            if (get_int(&p, end, 7, &i) != 0 || !lookup(d, i, &name, &nlen, &value, &vlen))
                return SL_HPACK_ERR;
        } else if ((b & 0xe0) == 0x20) { /* dynamic table size update */
            if (fields || get_int(&p, end, 5, &i) != 0 || i > SL_HPACK_TABLE) return SL_HPACK_ERR;
            d->max = i;
            evict_to(d, i);
            continue;
        } else { /* a literal: with incremental indexing (01), or not (0000, 0001) */
            int index = (b & 0xc0) == 0x40;
            if (get_int(&p, end, index ? 6 : 4, &i) != 0) return SL_HPACK_ERR;
            size_t name_at = 0;
            int name_in_str = 0;
            if (i == 0) {
                size_t before = used;
                int rc = get_str(d, &p, end, &used, &name, &nlen);
                if (rc != 0) return rc;
                name_in_str = used != before, name_at = before;
            } else {
                const uint8_t *v0;
                size_t v0len;
                if (!lookup(d, i, &name, &nlen, &v0, &v0len)) return SL_HPACK_ERR;
                if (index && i > SL_HPACK_STATIC) { /* insert may move it: copy */
                    int rc = str_room(d, used, nlen);
                    if (rc != 0) return rc;
                    memcpy(d->str + used, name, nlen);
                    name_in_str = 1, name_at = used;
                    used += nlen;
                }
            }
            size_t value_at = used;
            int rc = get_str(d, &p, end, &used, &value, &vlen);
            if (rc != 0) return rc;
            if (used != value_at) value = d->str + value_at; /* str may have moved */
            if (name_in_str) name = d->str + name_at;
            if (index && (rc = insert(d, name, nlen, value, vlen)) != 0) return rc;
        }
        fields = 1;
        if (!stop && fn(arg, name, nlen, value, vlen) != 0) stop = 1;
    }
    return 0;
}

/* ---- encoding ---------------------------------------------------------------------- */

size_t sl_hpack_put_int(uint8_t *out, uint32_t v, int prefix, uint8_t high)
{
    uint32_t mask = (1u << prefix) - 1;
    if (v < mask) {
        out[0] = (uint8_t)(high | v);
        return 1;
    }
    out[0] = (uint8_t)(high | mask);
    v -= mask;
    size_t k = 1;
    while (v >= 0x80) {
        out[k++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[k++] = (uint8_t)v;
    return k;
}

size_t sl_hpack_put_literal(uint8_t *out, unsigned name_idx, const char *name, size_t nlen,
                            const char *value, size_t vlen)
{
    size_t k = sl_hpack_put_int(out, name_idx, 4, 0x00);
    if (name_idx == 0) {
        k += sl_hpack_put_int(out + k, (uint32_t)nlen, 7, 0x00);
        memcpy(out + k, name, nlen);
        k += nlen;
    }
    k += sl_hpack_put_int(out + k, (uint32_t)vlen, 7, 0x00);
    memcpy(out + k, value, vlen);
    return k + vlen;
}
