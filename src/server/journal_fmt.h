/*
 * journal_fmt.h -- the decision journal's file format (journal_fmt.c):
 * encoding and a parser that is given bytes and never touches a file or a
 * socket (fuzzed: tests/fuzz/fuzz_journal.c).  journal.c does the I/O.
 *
 * A journal file (little-endian):
 *   head, SL_JOURNAL_HEAD bytes:
 *     "sluice journal\n\0"  16 bytes of magic
 *     u32 version (SL_JOURNAL_VERSION)
 *     u32 gen      the file's generation (journal.c: what a snapshot's mark
 *                  says it folds)
 *     u64 base     the record number the journal was at when this file
 *                  began: records below it are older than the file
 *     u32 crc      CRC-32 (zlib) of the 32 bytes before it
 *     u32 0
 *   records, each:
 *     u32 len      bytes of the body
 *     u32 crc      CRC-32 of len's 4 bytes and the body
 *     body: u8 type, u64 seq (the record's number: sl__store_image), then
 *       SL_JREC_IMAGE  a counter's state, exactly a snapshot record
 *                      (src/lib/snapshot.h)
 *       SL_JREC_GONE   u16 kind (algorithm | 8 for key space 1), the key:
 *                      the counter has no state (RL.RESET dropped it)
 *
 * A record that does not check (length, checksum, body) is a torn tail --
 * what a crash in the middle of a write leaves, dropped with a log line --
 * when nothing valid can follow it: it runs to or past the end of the file
 * with a plausible length, or the rest of the file is zeros, or fewer than
 * 8 bytes are left.  Anywhere else it is corruption, and the start is
 * refused with the file and the offset.
 */
#ifndef SL_JOURNAL_FMT_H
#define SL_JOURNAL_FMT_H

#include <stddef.h>
#include <stdint.h>

#define SL_JOURNAL_MAGIC   "sluice journal\n"
#define SL_JOURNAL_VERSION 1u
#define SL_JOURNAL_HEAD    40
#define SL_JREC_HDR        8                    /* len + crc */
#define SL_JREC_FIXED      9                    /* type + seq */
#define SL_JREC_MAX        (256u * 1024 * 1024) /* a body longer than this is never one */

enum { SL_JREC_IMAGE = 1, SL_JREC_GONE = 2 };

/* One record, as sl_journal_next found it: pointers into the bytes given. */
typedef struct sl_jrec {
    int type;           /* SL_JREC_* */
    uint64_t seq;
    const uint8_t *img; /* IMAGE: the snapshot record */
    size_t imglen;
    unsigned kind;      /* GONE */
    const uint8_t *key; /* GONE */
    size_t klen;
    size_t off;         /* where the record starts in the file */
} sl_jrec;

/* What sl_journal_next returns besides 1 (a record) and 0 (the end). */
#define SL_JTORN    (-1) /* a torn tail at *off: the rest is dropped */
#define SL_JCORRUPT (-2) /* a bad record at *off with more after it */

/* Writes a head for (gen, base) into h (SL_JOURNAL_HEAD bytes). */
void sl_journal_head_make(uint8_t *h, uint32_t gen, uint64_t base);

/* Checks a head.  Returns 0 with *gen and *base, or -1 with *why. */
int sl_journal_head_parse(const uint8_t *p, size_t len, uint32_t *gen, uint64_t *base,
                          const char **why);

/* Frames a body already written at rec + SL_JREC_HDR (blen bytes, type
 * and seq first): fills len and crc.  Returns the record's length. */
size_t sl_journal_frame(uint8_t *rec, size_t blen);

/* The next record of p[0..len) at *off (start at SL_JOURNAL_HEAD).
 * Returns 1 with *r and *off past it, 0 at the end, SL_JTORN or
 * SL_JCORRUPT with *off at the bad record and *why.  Bounded: O(record),
 * or O(rest of the file) once to tell a torn tail of zeros. */
int sl_journal_next(const uint8_t *p, size_t len, size_t *off, sl_jrec *r, const char **why);

#endif
