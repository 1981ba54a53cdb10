/*
 * hpack.h -- HPACK (RFC 7541) for sluiced's HTTP/2 (h2.c): the decoder of
 * a client's header blocks, and the few pieces of encoding the server's
 * answers need.  Bytes in, fields out: no socket, no HTTP/2 framing.
 *
 * The decoder keeps its dynamic table within SL_HPACK_TABLE bytes (RFC
 * 7541's size: name + value + 32 an entry), the default of
 * SETTINGS_HEADER_TABLE_SIZE, which sluiced never changes; a client's
 * dynamic table size updates may lower it, never raise it past that.
 * Huffman-coded strings are decoded with the canonical code of RFC 7541
 * appendix B; the last SL_HPACK_MEMO short ones are remembered, coded and
 * decoded, so a string a client sends again is not decoded again (an
 * encoder that never indexes :path -- nghttp2's, so Envoy's and h2load's
 * -- sends the same coded path every call: ~2k instructions of Huffman
 * decoding a call, against a comparison of its ~45 bytes).  Any malformed block is SL_HPACK_ERR: a
 * COMPRESSION_ERROR, after which the decoder's state is unusable (the connection ends).
 *
 * The encoder never indexes: an answer's fields are indexed static entries
 * or literals without indexing (no Huffman), so it keeps no table -- an
 * answer is 2 or 3 fields, each a few bytes, and a table would save a few
 * bytes a call for state to keep in step with the client's settings.
 */
#ifndef SL_HPACK_H
#define SL_HPACK_H

#include <stddef.h>
#include <stdint.h>

#define SL_HPACK_TABLE   4096                  /* bytes of the dynamic table, at most */
#define SL_HPACK_ENTRIES (SL_HPACK_TABLE / 32) /* entries, at most */
#define SL_HPACK_STATIC  61                    /* entries of the static table (appendix A) */

enum {
    SL_HPACK_ERR = -1,   /* malformed: COMPRESSION_ERROR */
    SL_HPACK_NOMEM = -2, /* out of memory */
};

/* One field of a block, handed to the caller's function: the bytes are
 * valid during the call only.  Returns 0 to go on; nonzero stops the
 * calls for this block (the block is still decoded to its end, as the
 * table's state needs). */
typedef int (*sl_hpack_field_fn)(void *arg, const uint8_t *name, size_t nlen, const uint8_t *value,
                                 size_t vlen);

typedef struct sl_hpack_entry {
    uint32_t off;  /* where its name starts in mem (its value follows) */
    uint16_t nlen; /* bytes of its name */
    uint16_t vlen; /* bytes of its value */
} sl_hpack_entry;

/* A Huffman string decoded lately: its coded bytes and what they decode to
 * (at most 8/5 as many: the shortest code is 5 bits). */
#define SL_HPACK_MEMO     4  /* strings remembered */
#define SL_HPACK_MEMO_MAX 96 /* coded bytes of one, at most */
typedef struct sl_hpack_memo {
    uint8_t clen, dlen; /* coded bytes, decoded bytes; clen 0: unused */
    uint8_t coded[SL_HPACK_MEMO_MAX];
    uint8_t dec[SL_HPACK_MEMO_MAX * 8 / 5 + 1];
} sl_hpack_memo;

/* A decoder: sl_hpack_init, free with sl_hpack_free. */
typedef struct sl_hpack {
    uint8_t *mem;                         /* 2 * SL_HPACK_TABLE bytes (lazily) */
    size_t end;                           /* bytes of mem in use, the newest last */
    sl_hpack_entry ent[SL_HPACK_ENTRIES]; /* a ring, newest at head */
    unsigned head, n;                     /* ring index of the newest; entries */
    size_t size;                          /* RFC 7541 size of the entries */
    size_t max;                           /* the size bound now (<= SL_HPACK_TABLE) */
    uint8_t *str;                         /* decoded strings of the field at hand */
    size_t strcap;                        /* bytes of str */
    sl_hpack_memo memo[SL_HPACK_MEMO];    /* Huffman strings decoded lately */
    unsigned memo_next;                   /* the one replaced next */
} sl_hpack;

void sl_hpack_init(sl_hpack *d);
void sl_hpack_free(sl_hpack *d);

/* Decodes one whole header block p[0..n), calling fn(arg, ...) for each
 * field in order (until it returns nonzero).  Returns 0, SL_HPACK_ERR
 * (malformed: the decoder is unusable afterwards) or SL_HPACK_NOMEM. */
int sl_hpack_decode(sl_hpack *d, const uint8_t *p, size_t n, sl_hpack_field_fn fn, void *arg);

/* Decodes a Huffman-coded string p[0..n) into out, which has room for
 * n * 8 / 5 bytes (the shortest code is 5 bits); returns its length, or
 * SL_HPACK_ERR (EOS inside, a padding longer than 7 bits or not EOS's
 * leading ones). */
long sl_hpack_huff_decode(const uint8_t *p, size_t n, uint8_t *out);

/* ---- encoding: into out, which has room (the sizes say how much) -------- */

/* An integer with an N-bit prefix (RFC 7541 5.1), the byte's other bits
 * `high`: at most 1 + 5 bytes for a 32-bit value.  Returns bytes written. */
size_t sl_hpack_put_int(uint8_t *out, uint32_t v, int prefix, uint8_t high);

/* A literal field without indexing (RFC 7541 6.2.2), its name the static
 * entry name_idx (1..61) or, when 0, the literal name; no Huffman.
 * Writes at most 2 * 6 + nlen + vlen bytes; returns bytes written. */
size_t sl_hpack_put_literal(uint8_t *out, unsigned name_idx, const char *name, size_t nlen,
                            const char *value, size_t vlen);

#endif
