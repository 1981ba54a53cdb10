/*
 * siphash.c -- SipHash-c-d, written from the description in "SipHash: a fast
 * short-input PRF" (Aumasson & Bernstein, INDOCRYPT 2012).
 *
 * State: four 64-bit words v0..v3, initialised from the key k0, k1 xor the
 * constants "somepseudorandomlygeneratedbytes".  Each 8-byte little-endian
 * message word m is absorbed as v3 ^= m, c SipRounds, v0 ^= m.  The last
 * word holds the 0..7 leftover bytes and, in its top byte, the length mod
 * 256.  Finalisation: v2 ^= 0xff, d SipRounds, output v0 ^ v1 ^ v2 ^ v3.
 *
 * This is the general c-d form and SipHash-2-4; SipHash-1-3, on the
 * decision path, is inline in siphash.h.
 */
#include "siphash.h"

#include <string.h>

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }


typedef struct sipstate {
    uint64_t v0, v1, v2, v3;
} sipstate;

/* One SipRound: two ARX half-rounds mixing (v0, v1) and (v2, v3), then the
 * cross terms. */
static inline void sipround(sipstate *s)
{
    s->v0 += s->v1;
    s->v1 = rotl(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = rotl(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = rotl(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = rotl(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = rotl(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = rotl(s->v2, 32);
}

static inline void sip_init(sipstate *s, const uint8_t key[16])
{
    uint64_t k0 = sl__sip_le64(key), k1 = sl__sip_le64(key + 8);
    s->v0 = k0 ^ 0x736f6d6570736575ULL; /* "somepseu" */
    s->v1 = k1 ^ 0x646f72616e646f6dULL; /* "dorandom" */
    s->v2 = k0 ^ 0x6c7967656e657261ULL; /* "lygenera" */
    s->v3 = k1 ^ 0x7465646279746573ULL; /* "tedbytes" */
}

/* The final word: the leftover bytes, length mod 256 in the top byte. */
static inline uint64_t last_word(const uint8_t *p, size_t len)
{
    uint64_t b = (uint64_t)(len & 0xff) << 56;
    size_t left = len & 7;
    for (size_t i = 0; i < left; i++) b |= (uint64_t)p[i] << (8 * i);
    return b;
}

/* The body for constant c and d: with inline and constant arguments the
 * round loops unroll in sl__siphash24. */
static inline uint64_t siphash_cd(const uint8_t key[16], const void *data, size_t len, int c, int d)
{
    const uint8_t *p = data;
    const uint8_t *end = p + (len & ~(size_t)7);
    sipstate s;
    sip_init(&s, key);
    for (; p < end; p += 8) {
        uint64_t m = sl__sip_le64(p);
        s.v3 ^= m;
        for (int i = 0; i < c; i++) sipround(&s);
        s.v0 ^= m;
    }
    uint64_t b = last_word(p, len);
    s.v3 ^= b;
    for (int i = 0; i < c; i++) sipround(&s);
    s.v0 ^= b;
    s.v2 ^= 0xff;
    for (int i = 0; i < d; i++) sipround(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t sl__siphash(const uint8_t key[16], const void *data, size_t len, int c, int d)
{
    return siphash_cd(key, data, len, c, d);
}

uint64_t sl__siphash24(const uint8_t key[16], const void *data, size_t len)
{
    return siphash_cd(key, data, len, 2, 4);
}

/* ---- SipHash-2-4 with a 128-bit output, streaming -------------------------
 *
 * The paper's 128-bit mode: v1 ^= 0xee after the key, v2 ^= 0xee (not 0xff)
 * before the first 4 finalisation rounds, whose v0^v1^v2^v3 is the first
 * half; then v1 ^= 0xdd and 4 more rounds for the second.  Fed in pieces
 * of any size: up to 7 bytes wait in `tail` for the rest of their word. */

void sl__sip128_init(sl__sip128 *h, const uint8_t key[16])
{
    sipstate s;
    sip_init(&s, key);
    h->v[0] = s.v0;
    h->v[1] = s.v1 ^ 0xee;
    h->v[2] = s.v2;
    h->v[3] = s.v3;
    h->tail = 0;
    h->len = 0;
}

/* Absorbs the word m with 2 compression rounds. */
static inline void sip128_word(sl__sip128 *h, uint64_t m)
{
    sipstate s = {h->v[0], h->v[1], h->v[2], h->v[3] ^ m};
    sipround(&s);
    sipround(&s);
    h->v[0] = s.v0 ^ m;
    h->v[1] = s.v1;
    h->v[2] = s.v2;
    h->v[3] = s.v3;
}

void sl__sip128_update(sl__sip128 *h, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0 && (h->len & 7) != 0) { /* finish the pending word */
        h->tail |= (uint64_t)*p++ << (8 * (h->len & 7));
        h->len++;
        len--;
        if ((h->len & 7) == 0) {
            sip128_word(h, h->tail);
            h->tail = 0;
        }
    }
    for (; len >= 8; p += 8, len -= 8, h->len += 8) sip128_word(h, sl__sip_le64(p));
    for (; len > 0; len--, h->len++) h->tail |= (uint64_t)*p++ << (8 * (h->len & 7));
}

void sl__sip128_final(const sl__sip128 *h, uint8_t out[16])
{
    uint64_t b = h->tail | (uint64_t)(h->len & 0xff) << 56;
    sipstate s = {h->v[0], h->v[1], h->v[2], h->v[3] ^ b};
    sipround(&s);
    sipround(&s);
    s.v0 ^= b;
    s.v2 ^= 0xee;
    for (int i = 0; i < 4; i++) sipround(&s);
    uint64_t r = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(r >> (8 * i));
    s.v1 ^= 0xdd;
    for (int i = 0; i < 4; i++) sipround(&s);
    r = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
    for (int i = 0; i < 8; i++) out[8 + i] = (uint8_t)(r >> (8 * i));
}
