/*
 * fuzz_journal.c -- libFuzzer target for the decision journal's parser
 * (src/server/journal_fmt.c: sl_journal_head_parse, sl_journal_next): a
 * journal file's bytes, parsed as a start parses them, every record found
 * put into a store as the replay puts it.
 *
 * Input: one byte of mode, then the file.  Mode bit 0 set: a valid head is
 * written over the first SL_JOURNAL_HEAD bytes; bit 1 set: each record's
 * checksum is made right before it is parsed (so mutations reach the
 * bodies).  Checked besides no crash, leak or sanitizer report:
 *   - records come in file order, each within the file, and a record
 *     framed again from its body is the same bytes;
 *   - the parse ends at the end of the file, or at a torn tail or a
 *     corrupt record with a reason, at an offset within the file;
 *   - the store holds at most as many keys as records were put in.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "journal_fmt.h"
#include "sluice.h"
#include "snapshot.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *why)
{
    fprintf(stderr, "fuzz_journal: %s\n", why);
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int mode = data[0];
    size_t len = size - 1;
    uint8_t *p = malloc(len ? len : 1);
    if (p == NULL) return 0;
    memcpy(p, data + 1, len);
    if ((mode & 1) && len >= SL_JOURNAL_HEAD) sl_journal_head_make(p, 3, 0);
    uint32_t gen;
    uint64_t base;
    const char *why = NULL;
    if (sl_journal_head_parse(p, len, &gen, &base, &why) != 0) {
        if (why == NULL) die("head refused without a reason");
        free(p);
        return 0;
    }
    sl_store *s = sl_store_new(NULL, NULL);
    size_t off = SL_JOURNAL_HEAD, last = off;
    uint64_t n = 0;
    for (int guard = 0; guard < 100000; guard++) {
        if ((mode & 2) && len - off >= SL_JREC_HDR) {
            size_t blen = sl__ld32(p + off);
            if (blen <= len - off - SL_JREC_HDR) sl_journal_frame(p + off, blen);
        }
        sl_jrec r;
        int k = sl_journal_next(p, len, &off, &r, &why);
        if (k == 0) {
            if (off != len) die("end before the end of the file");
            break;
        }
        if (k < 0) {
            if (why == NULL || off > len || off != last) die("bad record without its place");
            break;
        }
        if (r.off != last || off <= last || off > len) die("record out of order or bounds");
        /* framed again: the same bytes */
        size_t blen = off - last - SL_JREC_HDR;
        uint8_t *again = malloc(off - last);
        if (again == NULL) break;
        memcpy(again + SL_JREC_HDR, p + last + SL_JREC_HDR, blen);
        if (sl_journal_frame(again, blen) != off - last || memcmp(again, p + last, off - last))
            die("framing differs");
        free(again);
        if (r.type == SL_JREC_IMAGE)
            sl__store_image_apply(s, r.img);
        else
            sl__store_image_drop(s, r.kind, r.key, r.klen);
        n++;
        last = off;
    }
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    if (st.keys > n) die("more keys than records");
    sl_store_free(s);
    free(p);
    return 0;
}
