/*
 * test_hpack.c -- sluiced's HPACK (src/proto/grpc/hpack.c) against RFC
 * 7541's examples and against nghttp2's encoder and decoder, the
 * independent peer: random header lists deflated by nghttp2 come out of
 * ours as they went in, through table size changes; what ours encodes
 * nghttp2 decodes; every malformed block is an error.
 * tests/fuzz/fuzz_hpack.c does the same on arbitrary input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>

#include "hpack.h"

/* What a block decoded to. */
typedef struct got {
    int n;
    char name[64][512];
    char value[64][512];
    size_t nlen[64], vlen[64];
} got;

static int collect(void *arg, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    got *g = arg;
    if (g->n >= 64 || nlen > 512 || vlen > 512) return 1;
    memcpy(g->name[g->n], name, nlen);
    memcpy(g->value[g->n], value, vlen);
    g->nlen[g->n] = nlen, g->vlen[g->n] = vlen;
    g->n++;
    return 0;
}

static void field_is(const got *g, int i, const char *name, const char *value)
{
    assert_true(i < g->n);
    assert_int_equal(g->nlen[i], strlen(name));
    assert_memory_equal(g->name[i], name, strlen(name));
    assert_int_equal(g->vlen[i], strlen(value));
    assert_memory_equal(g->value[i], value, strlen(value));
}

static got *decode(sl_hpack *d, const uint8_t *p, size_t n, int want)
{
    static got g;
    memset(&g, 0, sizeof g);
    assert_int_equal(sl_hpack_decode(d, p, n, collect, &g), want);
    return &g;
}

/* RFC 7541 C.4: three requests, Huffman-coded, sharing the dynamic table */
static void rfc_requests_with_huffman(void **state)
{
    (void)state;
    sl_hpack d;
    sl_hpack_init(&d);
    static const uint8_t r1[] = {0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5,
                                 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff};
    got *g = decode(&d, r1, sizeof r1, 0);
    assert_int_equal(g->n, 4);
    field_is(g, 0, ":method", "GET");
    field_is(g, 1, ":scheme", "http");
    field_is(g, 2, ":path", "/");
    field_is(g, 3, ":authority", "www.example.com");
    assert_int_equal(d.size, 57);
    static const uint8_t r2[] = {0x82, 0x86, 0x84, 0xbe, 0x58, 0x86,
                                 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf};
    g = decode(&d, r2, sizeof r2, 0);
    assert_int_equal(g->n, 5);
    field_is(g, 3, ":authority", "www.example.com");
    field_is(g, 4, "cache-control", "no-cache");
    assert_int_equal(d.size, 110);
    static const uint8_t r3[] = {0x82, 0x87, 0x85, 0xbf, 0x40, 0x88, 0x25, 0xa8,
                                 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f, 0x89, 0x25,
                                 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf};
    g = decode(&d, r3, sizeof r3, 0);
    assert_int_equal(g->n, 5);
    field_is(g, 1, ":scheme", "https");
    field_is(g, 2, ":path", "/index.html");
    field_is(g, 3, ":authority", "www.example.com");
    field_is(g, 4, "custom-key", "custom-value");
    assert_int_equal(d.size, 164);
    /* the same request again: its Huffman strings come from the memo */
    g = decode(&d, r1, sizeof r1, 0);
    field_is(g, 3, ":authority", "www.example.com");
    sl_hpack_free(&d);
}

/* RFC 7541 C.1: integers */
static void rfc_integers(void **state)
{
    (void)state;
    uint8_t b[8];
    assert_int_equal(sl_hpack_put_int(b, 10, 5, 0xe0), 1);
    assert_int_equal(b[0], 0xea);
    assert_int_equal(sl_hpack_put_int(b, 1337, 5, 0x00), 3);
    assert_memory_equal(b, "\x1f\x9a\x0a", 3);
    assert_int_equal(sl_hpack_put_int(b, 42, 8, 0x00), 1);
    assert_int_equal(b[0], 42);
    assert_int_equal(sl_hpack_put_int(b, 0xffffffffu, 7, 0x00), 6);
}

/* Eviction: a table of 100 bytes holds two 34-byte entries; a third
 * evicts the oldest, and indexing past the table is an error. */
static void eviction_and_size_updates(void **state)
{
    (void)state;
    sl_hpack d;
    sl_hpack_init(&d);
    /* size update 100 (31 + 69), then n1: v1, n2: v2 with indexing */
    static const uint8_t b1[] = {0x3f, 0x45, 0x40, 2, 'n', '1', 0, 0x40, 2, 'n', '2', 0};
    got *g = decode(&d, b1, sizeof b1, 0);
    assert_int_equal(g->n, 2);
    assert_int_equal(d.size, 68);
    static const uint8_t b2[] = {0xbe, 0xbf}; /* 62: the newest, 63: the oldest */
    g = decode(&d, b2, sizeof b2, 0);
    field_is(g, 0, "n2", "");
    field_is(g, 1, "n1", "");
    /* n3 evicts n1; its name from the table's entry 62 (n2) */
    static const uint8_t b3[] = {0x7e, 2, 'v', '3', 0xbe, 0xbf};
    g = decode(&d, b3, sizeof b3, 0);
    field_is(g, 0, "n2", "v3");
    field_is(g, 1, "n2", "v3");
    field_is(g, 2, "n2", "");
    static const uint8_t b4[] = {0xc0}; /* 64: gone */
    decode(&d, b4, sizeof b4, SL_HPACK_ERR);
    sl_hpack_free(&d);
    /* an entry larger than the table empties it; a size update of 0 too */
    sl_hpack_init(&d);
    static const uint8_t b5[] = {0x40, 1, 'a', 1, 'b', 0x20, 0xbe};
    decode(&d, b5, sizeof b5, SL_HPACK_ERR); /* the update comes after a field */
    sl_hpack_free(&d);
    sl_hpack_init(&d);
    static const uint8_t b6[] = {0x40, 1, 'a', 1, 'b'};
    decode(&d, b6, sizeof b6, 0);
    static const uint8_t b7[] = {0x20, 0xbe};
    decode(&d, b7, sizeof b7, SL_HPACK_ERR); /* emptied by the update */
    assert_int_equal(d.n, 0);
    sl_hpack_free(&d);
    sl_hpack_init(&d);
    static const uint8_t b8[] = {0x3f, 0x02, 0x40, 1, 'a', 1, 'b', 0xbe}; /* max 33: too small */
    decode(&d, b8, sizeof b8, SL_HPACK_ERR);
    assert_int_equal(d.n, 0);
    sl_hpack_free(&d);
}

/* Every malformed block is SL_HPACK_ERR. */
static void malformed_blocks(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        uint8_t b[8];
        size_t n;
    } bad[] = {
        {"index 0", {0x80}, 1},
        {"index past the tables", {0xbe}, 1},
        {"a size update above 4096", {0x3f, 0xe2, 0x1f}, 3},
        {"an integer cut short", {0xff}, 1},
        {"an integer too long", {0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 6},
        {"a string past the block", {0x00, 0x05, 'a'}, 3},
        {"a literal cut after its name", {0x00, 0x01, 'a'}, 3},
        {"a literal without its name", {0x00}, 1},
        {"EOS in a Huffman string", {0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00}, 7},
        {"11 bits of padding", {0x00, 0x82, 0x1f, 0xff, 0x00}, 5},
        {"padding not EOS's ones", {0x00, 0x81, 0x18, 0x00}, 4},
        {"a literal name index past the tables", {0x0f, 0x30, 0x00}, 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sl_hpack d;
        sl_hpack_init(&d);
        got g = {0};
        int rc = sl_hpack_decode(&d, bad[i].b, bad[i].n, collect, &g);
        if (rc != SL_HPACK_ERR) fail_msg("%s: %d, not an error", bad[i].what, rc);
        sl_hpack_free(&d);
    }
    /* and the good neighbours of three of them */
    sl_hpack d;
    sl_hpack_init(&d);
    static const uint8_t ok[] = {0x00, 0x81, 0x1f, 0x00, 0x3f, 0xe1, 0x1f};
    got *g = decode(&d, ok, 4, 0); /* "a" with 3 bits of padding, empty value */
    field_is(g, 0, "a", "");
    g = decode(&d, ok + 4, 3, 0); /* a size update to exactly 4096 */
    assert_int_equal(g->n, 0);
    sl_hpack_free(&d);
}

/* ---- against nghttp2 -------------------------------------------------------- */

static uint64_t rnd_state = 0x9e3779b97f4a7c15u;
static uint32_t rnd(void)
{
    rnd_state ^= rnd_state << 13, rnd_state ^= rnd_state >> 7, rnd_state ^= rnd_state << 17;
    return (uint32_t)(rnd_state >> 11);
}

static const char *common_names[] = {
    ":path",      ":method",       "content-type", "grpc-timeout",
    "user-agent", "authorization", "te",           "x-sluice-ratelimit-headers"};

/* nghttp2's deflater -> ours, 300 blocks of random fields (any byte in a
 * value, names from a list or random), some never indexed, the table
 * resized now and then. */
static void nghttp2_to_ours(void **state)
{
    (void)state;
    nghttp2_hd_deflater *df;
    assert_int_equal(nghttp2_hd_deflate_new(&df, 4096), 0);
    sl_hpack d;
    sl_hpack_init(&d);
    static char names[16][40], values[16][300];
    static uint8_t out[64 * 1024];
    for (int block = 0; block < 300; block++) {
        if (rnd() % 10 == 0)
            assert_int_equal(nghttp2_hd_deflate_change_table_size(df, rnd() % 4097), 0);
        nghttp2_nv nv[16];
        size_t n = 1 + rnd() % 15;
        for (size_t i = 0; i < n; i++) {
            size_t nl, vl = rnd() % (rnd() % 4 ? 40 : 300);
            if (rnd() % 2) {
                const char *c = common_names[rnd() % 8];
                nl = strlen(c);
                memcpy(names[i], c, nl);
            } else {
                nl = 1 + rnd() % 39;
                for (size_t k = 0; k < nl; k++) names[i][k] = (char)('a' + rnd() % 26);
            }
            for (size_t k = 0; k < vl; k++)
                values[i][k] = (char)(rnd() % 3 ? 0x20 + rnd() % 95 : rnd() % 256);
            nv[i] = (nghttp2_nv){(uint8_t *)names[i], (uint8_t *)values[i], nl, vl,
                                 rnd() % 5 ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX};
        }
        ssize_t len = nghttp2_hd_deflate_hd(df, out, sizeof out, nv, n);
        assert_true(len > 0);
        got *g = decode(&d, out, (size_t)len, 0);
        assert_int_equal(g->n, (int)n);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(g->nlen[i], nv[i].namelen);
            assert_memory_equal(g->name[i], nv[i].name, nv[i].namelen);
            assert_int_equal(g->vlen[i], nv[i].valuelen);
            if (nv[i].valuelen) assert_memory_equal(g->value[i], nv[i].value, nv[i].valuelen);
        }
    }
    sl_hpack_free(&d);
    nghttp2_hd_deflate_del(df);
}

/* Every byte value Huffman-coded by nghttp2 (after twenty '0's, so the
 * Huffman form is the shorter one and nghttp2 takes it: each of appendix
 * B's codes is met) decodes to itself. */
static void every_byte_huffman(void **state)
{
    (void)state;
    nghttp2_hd_deflater *df;
    assert_int_equal(nghttp2_hd_deflate_new(&df, 0), 0);
    sl_hpack d;
    sl_hpack_init(&d);
    uint8_t out[256];
    for (int c = 0; c < 256; c++) {
        uint8_t v[21];
        memset(v, '0', 20);
        v[20] = (uint8_t)c;
        nghttp2_nv nv = {(uint8_t *)"x", v, 1, 21, NGHTTP2_NV_FLAG_NO_INDEX};
        ssize_t len = nghttp2_hd_deflate_hd(df, out, sizeof out, &nv, 1);
        assert_true(len > 0 && len < 3 + 21); /* the value Huffman-coded */
        got *g = decode(&d, out, (size_t)len, 0);
        assert_int_equal(g->n, 1);
        assert_int_equal(g->vlen[0], 21);
        assert_memory_equal(g->value[0], v, 21);
    }
    /* and straight through the Huffman decoder: the lower-case alphabet */
    static const char abc[] = "abcdefghijklmnopqrstuvwxyz/.-_0123456789";
    nghttp2_nv nv = {(uint8_t *)"x", (uint8_t *)abc, 1, sizeof abc - 1, NGHTTP2_NV_FLAG_NO_INDEX};
    ssize_t len = nghttp2_hd_deflate_hd(df, out, sizeof out, &nv, 1);
    /* never indexed, new name "x", then the value Huffman-coded */
    assert_true(len > 4 && out[0] == 0x10 && out[1] == 1 && out[2] == 'x' && (out[3] & 0x80));
    uint8_t dec[128];
    size_t vlen = out[3] & 0x7f;
    assert_int_equal(len, 4 + vlen);
    assert_int_equal(sl_hpack_huff_decode(out + 4, vlen, dec), sizeof abc - 1);
    assert_memory_equal(dec, abc, sizeof abc - 1);
    sl_hpack_free(&d);
    nghttp2_hd_deflate_del(df);
}

/* Ours -> nghttp2's inflater: literals, long ones, and indexed statics. */
static void ours_to_nghttp2(void **state)
{
    (void)state;
    nghttp2_hd_inflater *inf;
    assert_int_equal(nghttp2_hd_inflate_new(&inf), 0);
    static char big[1000];
    memset(big, 'q', sizeof big);
    uint8_t b[2048];
    size_t n = sl_hpack_put_int(b, 8, 7, 0x80); /* :status: 200 */
    n += sl_hpack_put_literal(b + n, 31, NULL, 0, "application/grpc", 16);
    n += sl_hpack_put_literal(b + n, 0, "grpc-status", 11, "0", 1);
    n += sl_hpack_put_literal(b + n, 0, "grpc-message", 12, big, sizeof big);
    const char *want[4][2] = {
        {":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "0"}, {0}};
    size_t pos = 0;
    int k = 0;
    for (;;) {
        nghttp2_nv nv;
        int fl = 0;
        ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, b + pos, n - pos, 1);
        assert_true(r >= 0);
        pos += (size_t)r;
        if (fl & NGHTTP2_HD_INFLATE_EMIT) {
            if (k < 3) {
                assert_int_equal(nv.namelen, strlen(want[k][0]));
                assert_memory_equal(nv.name, want[k][0], nv.namelen);
                assert_int_equal(nv.valuelen, strlen(want[k][1]));
                assert_memory_equal(nv.value, want[k][1], nv.valuelen);
            } else {
                assert_int_equal(nv.valuelen, sizeof big);
                assert_memory_equal(nv.value, big, sizeof big);
            }
            k++;
        }
        if (fl & NGHTTP2_HD_INFLATE_FINAL) break;
    }
    assert_int_equal(k, 4);
    assert_int_equal(pos, n);
    nghttp2_hd_inflate_end_headers(inf);
    /* nothing was indexed: nghttp2's table is empty */
    assert_int_equal(nghttp2_hd_inflate_get_num_table_entries(inf), 61);
    nghttp2_hd_inflate_del(inf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rfc_requests_with_huffman), cmocka_unit_test(rfc_integers),
        cmocka_unit_test(eviction_and_size_updates), cmocka_unit_test(malformed_blocks),
        cmocka_unit_test(nghttp2_to_ours),           cmocka_unit_test(every_byte_huffman),
        cmocka_unit_test(ours_to_nghttp2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
