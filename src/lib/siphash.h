/*
 * siphash.h -- SipHash-c-d (Aumasson & Bernstein, 2012), a keyed 64-bit PRF.
 *
 * The store hashes client-chosen keys with a secret per-process seed, so an
 * attacker who cannot see the seed cannot aim keys at one hash slot.  The
 * store uses SipHash-1-3 (one compression round per 8-byte word, three
 * finalisation rounds: the speed/margin trade Rust and Python make for hash
 * tables); SipHash-2-4 is the paper's conservative choice, kept for tests and
 * for deriving sub-keys.
 *
 * Keys are 16 bytes, read as two little-endian 64-bit words; input is read
 * as little-endian words whatever the host byte order, so outputs match the
 * published vectors everywhere.
 *
 * SipHash-1-3 is on every decision's path, so it is here, inline and
 * unrolled: about 14 instructions a round, 5 rounds for a key of 8..15
 * bytes, and the last 0..7 bytes read with at most two loads that stay
 * inside the input.
 */
#ifndef SL_SIPHASH_H
#define SL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* SipHash with c compression and d finalisation rounds (c, d >= 1). */
uint64_t sl__siphash(const uint8_t key[16], const void *data, size_t len, int c, int d);

/* SipHash-2-4, rounds unrolled. */
uint64_t sl__siphash24(const uint8_t key[16], const void *data, size_t len);

/* SipHash-2-4 with the paper's 128-bit output, fed in pieces: init, any
 * number of updates (the result is that of their bytes in one piece),
 * final.  For digests of inputs that are built piecewise and may be long
 * (check.h: counting keys longer than SL_MAX_KEY).  The 16 bytes are the
 * two 64-bit halves, each little-endian: the reference's byte order. */
typedef struct sl__sip128 {
    uint64_t v[4];
    uint64_t tail; /* the bytes of an unfinished word */
    uint64_t len;  /* bytes absorbed */
} sl__sip128;

void sl__sip128_init(sl__sip128 *h, const uint8_t key[16]);
void sl__sip128_update(sl__sip128 *h, const void *data, size_t len);
void sl__sip128_final(const sl__sip128 *h, uint8_t out[16]);

/* ---- SipHash-1-3, inline ------------------------------------------------- */

/* Inlined even where the compiler would rather call: the hot path's callers
 * want the rounds in their own body. */
#if defined(__GNUC__)
#define SL__HOT_INLINE static inline __attribute__((always_inline))
#else
#define SL__HOT_INLINE static inline
#endif

/* The initial state v0..v3 for a key: the key's two words xor the constants
 * "somepseudorandomlygeneratedbytes".  Callers that hash often with one key
 * keep this instead of the key (sl__siphash13_v). */
typedef struct sl__sipkey {
    uint64_t v[4];
} sl__sipkey;

static inline uint64_t sl__sip_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t sl__sip_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline void sl__sipkey_init(sl__sipkey *k, const uint8_t key[16])
{
    uint64_t k0 = sl__sip_le64(key), k1 = sl__sip_le64(key + 8);
    k->v[0] = k0 ^ 0x736f6d6570736575ULL; /* "somepseu" */
    k->v[1] = k1 ^ 0x646f72616e646f6dULL; /* "dorandom" */
    k->v[2] = k0 ^ 0x6c7967656e657261ULL; /* "lygenera" */
    k->v[3] = k1 ^ 0x7465646279746573ULL; /* "tedbytes" */
}

#define SL__ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
/* One SipRound on the locals v0..v3. */
#define SL__SIPROUND                                                                               \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = SL__ROTL(v1, 13);                                                                     \
        v1 ^= v0;                                                                                  \
        v0 = SL__ROTL(v0, 32);                                                                     \
        v2 += v3;                                                                                  \
        v3 = SL__ROTL(v3, 16);                                                                     \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = SL__ROTL(v3, 21);                                                                     \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = SL__ROTL(v1, 17);                                                                     \
        v1 ^= v2;                                                                                  \
        v2 = SL__ROTL(v2, 32);                                                                     \
    } while (0)

/* The final word of a message of len bytes whose last len % 8 bytes end at
 * end: those bytes, and len mod 256 in the top byte.  Never reads outside
 * the message: a message of 8 bytes or more gives its last 8 bytes in one
 * load; a shorter one is read as two overlapping 4-byte loads, or for 1..3
 * bytes as three single bytes. */
SL__HOT_INLINE uint64_t sl__sip_last(const uint8_t *end, size_t len)
{
    size_t left = len & 7;
    uint64_t b = (uint64_t)(len & 0xff) << 56;
    if (left == 0) return b;
    if (len >= 8) return b | sl__sip_le64(end - 8) >> (64 - 8 * left);
    const uint8_t *p = end - left;
    if (left >= 4) return b | sl__sip_le32(p) | (uint64_t)sl__sip_le32(end - 4) << (8 * (left - 4));
    return b | p[0] | (uint64_t)p[left / 2] << (8 * (left / 2)) |
           (uint64_t)p[left - 1] << (8 * (left - 1));
}

/* SipHash-1-3 of data with the key state k. */
SL__HOT_INLINE uint64_t sl__siphash13_v(const sl__sipkey *k, const void *data, size_t len)
{
    const uint8_t *p = data, *end = p + (len & ~(size_t)7);
    uint64_t v0 = k->v[0], v1 = k->v[1], v2 = k->v[2], v3 = k->v[3];
    for (; p < end; p += 8) {
        uint64_t m = sl__sip_le64(p);
        v3 ^= m;
        SL__SIPROUND;
        v0 ^= m;
    }
    uint64_t b = sl__sip_last((const uint8_t *)data + len, len);
    v3 ^= b;
    SL__SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SL__SIPROUND;
    SL__SIPROUND;
    SL__SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* SipHash-1-3 of data with a 16-byte key. */
static inline uint64_t sl__siphash13(const uint8_t key[16], const void *data, size_t len)
{
    sl__sipkey k;
    sl__sipkey_init(&k, key);
    return sl__siphash13_v(&k, data, len);
}

#endif
