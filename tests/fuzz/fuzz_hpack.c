/*
 * fuzz_hpack.c -- libFuzzer target for sluiced's HPACK decoder
 * (src/proto/grpc/hpack.c) against nghttp2's, the independent peer.
 *
 * Input: one byte of mode, then the rest.
 *   - mode bit 0 clear: the rest is header blocks, each a length byte and
 *     that many bytes, decoded in turn by ours and by nghttp2's inflater
 *     (one table each, kept across blocks until an error): ours may refuse
 *     a block (then that decoder is done), but a block ours accepts,
 *     nghttp2 accepts too, with the same fields in the same order.
 *   - mode bit 0 set: the rest describes header lists (records: a flags
 *     byte, a name length byte, the name, a value length byte, the value);
 *     nghttp2's deflater codes them, a table size change now and then, and
 *     ours must decode exactly those fields.
 * Besides: no NULL name or value handed over, and no crash, leak or
 * sanitizer report (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "hpack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *why)
{
    fprintf(stderr, "fuzz_hpack: %s\n", why);
    __builtin_trap();
}

#define MAXF 256

typedef struct list {
    int n;
    const uint8_t *name[MAXF], *value[MAXF];
    size_t nlen[MAXF], vlen[MAXF];
    uint8_t *copy[MAXF];
} list;

static int collect(void *arg, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    list *l = arg;
    /* hpack.h's contract: never a NULL pointer, even for an empty string
     * (an empty Huffman string once came out as an uninitialized one) */
    if (name == NULL || value == NULL) die("the decoder handed a NULL pointer");
    if (l->n >= MAXF) return 1;
    uint8_t *c = malloc(nlen + vlen + 1);
    if (c == NULL) die("memory");
    if (nlen) memcpy(c, name, nlen);
    if (vlen) memcpy(c + nlen, value, vlen);
    l->copy[l->n] = c;
    l->name[l->n] = c, l->nlen[l->n] = nlen;
    l->value[l->n] = c + nlen, l->vlen[l->n] = vlen;
    l->n++;
    return 0;
}

static void list_free(list *l)
{
    for (int i = 0; i < l->n; i++) free(l->copy[i]);
    l->n = 0;
}

static int same(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* Arbitrary blocks: ours accepting means nghttp2 accepts the same. */
static void arbitrary(const uint8_t *p, size_t n)
{
    sl_hpack d;
    sl_hpack_init(&d);
    nghttp2_hd_inflater *inf;
    if (nghttp2_hd_inflate_new(&inf) != 0) die("memory");
    int ours_ok = 1, theirs_ok = 1;
    while (n > 0 && ours_ok) {
        size_t len = p[0] < n - 1 ? p[0] : n - 1;
        const uint8_t *b = p + 1;
        p += 1 + len, n -= 1 + len;
        list mine = {0};
        int rc = sl_hpack_decode(&d, b, len, collect, &mine);
        if (rc == SL_HPACK_NOMEM) die("memory");
        ours_ok = rc == 0;
        int k = 0, ok = 1;
        size_t pos = 0;
        while (theirs_ok) {
            nghttp2_nv nv;
            int fl = 0;
            ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, b + pos, len - pos, 1);
            if (r < 0) {
                theirs_ok = 0;
                break;
            }
            pos += (size_t)r;
            if (fl & NGHTTP2_HD_INFLATE_EMIT) {
                if (k < mine.n && !(same(nv.name, nv.namelen, mine.name[k], mine.nlen[k]) &&
                                    same(nv.value, nv.valuelen, mine.value[k], mine.vlen[k])))
                    ok = 0;
                k++;
            }
            if (fl & NGHTTP2_HD_INFLATE_FINAL) {
                nghttp2_hd_inflate_end_headers(inf);
                break;
            }
            if (r == 0 && !(fl & NGHTTP2_HD_INFLATE_EMIT)) { /* stuck: not a whole block */
                theirs_ok = 0;
                break;
            }
        }
        if (ours_ok) {
            if (!theirs_ok) die("ours accepted a block nghttp2 refuses");
            if (!ok || k != mine.n) die("ours decoded other fields than nghttp2");
        }
        list_free(&mine);
    }
    nghttp2_hd_inflate_del(inf);
    sl_hpack_free(&d);
}

/* Header lists through nghttp2's deflater: ours decodes them exactly. */
static void lists(const uint8_t *p, size_t n)
{
    nghttp2_hd_deflater *df;
    if (nghttp2_hd_deflate_new(&df, 4096) != 0) die("memory");
    sl_hpack d;
    sl_hpack_init(&d);
    static uint8_t out[1 << 17];
    while (n > 0) {
        nghttp2_nv nv[16];
        size_t k = 0;
        while (n >= 3 && k < 16) {
            uint8_t fl = p[0];
            size_t nl = p[1] < n - 2 ? p[1] : n - 2;
            const uint8_t *name = p + 2;
            p += 2 + nl, n -= 2 + nl;
            size_t vl = n > 0 ? (p[0] < n - 1 ? p[0] : n - 1) : 0;
            const uint8_t *value = n > 0 ? p + 1 : p;
            if (n > 0) p += 1 + vl, n -= 1 + vl;
            nv[k++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, nl, vl,
                                   fl & 1 ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE};
            if (fl & 2) { /* the table resized before this list */
                if (nghttp2_hd_deflate_change_table_size(df, (size_t)(fl >> 2) * 64) != 0)
                    die("memory");
            }
            if (fl & 0x80) break; /* the list ends here */
        }
        if (k == 0) break;
        ssize_t len = nghttp2_hd_deflate_hd(df, out, sizeof out, nv, k);
        if (len < 0) die("nghttp2 could not deflate");
        list mine = {0};
        if (sl_hpack_decode(&d, out, (size_t)len, collect, &mine) != 0)
            die("ours refused nghttp2's block");
        if ((size_t)mine.n != k) die("ours decoded another number of fields");
        for (size_t i = 0; i < k; i++)
            if (!same(nv[i].name, nv[i].namelen, mine.name[i], mine.nlen[i]) ||
                !same(nv[i].value, nv[i].valuelen, mine.value[i], mine.vlen[i]))
                die("ours decoded another field than nghttp2 coded");
        list_free(&mine);
    }
    sl_hpack_free(&d);
    nghttp2_hd_deflate_del(df);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    if (data[0] & 1)
        lists(data + 1, size - 1);
    else
        arbitrary(data + 1, size - 1);
    return 0;
}
