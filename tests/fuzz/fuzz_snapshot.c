/*
 * fuzz_snapshot.c -- libFuzzer target for the snapshot loader
 * (sl_store_load, src/lib/snapshot.c): a file's bytes, loaded into a fresh
 * store as sluiced loads its --snapshot at start.  The input is written to
 * a file (in /dev/shm when there is one) and read through the real
 * function.
 *
 * Input: one byte of mode, then the file.  Mode bit 0 set: the file's
 * CRC-32 (its last 4 bytes) is made right first, so mutations get past the
 * checksum to the records; clear: the file as it is.
 * Checked besides no crash, leak or sanitizer report:
 *   - refused: a message naming the file, and the store left empty (a bad
 *     file is refused whole: nothing inserted);
 *   - accepted: *nkeys is the record count the file's tail gives, and the
 *     store holds at most that many keys (a key may come twice);
 *   - saved and loaded again, it is the same: save(load(F)) = F1, and
 *     load(F1) holds as many keys as F1 has records, and save(load(F1))
 *     has the same records as F1 (as a multiset: the order of a save
 *     follows the store's hash table).
 * The stores hash with a fixed seed, so a run does not depend on chance.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz_dir.h"
#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *why)
{
    fprintf(stderr, "fuzz_snapshot: %s\n", why);
    __builtin_trap();
}

#define HEAD 24 /* snapshot.c's SNAP_HEAD, SNAP_TAIL and SNAP_REC_HDR */
#define TAIL 12
#define REC_HDR 16

/* The input and a second file, in fuzz_dir.h's directory. */
static const char path[] = "fuzz-input.snap", path2[] = "fuzz-again.snap";

static void write_file(const char *p, const void *bytes, size_t n)
{
    FILE *f = fopen(p, "w");
    if (f == NULL || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) die("temp file");
}

static uint8_t *read_all(const char *p, size_t *n)
{
    FILE *f = fopen(p, "r");
    if (f == NULL) die("reading a saved snapshot");
    size_t cap = 4096, len = 0;
    uint8_t *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    if (b == NULL) die("memory");
    fclose(f);
    *n = len;
    return b;
}

static sl_store *store(void)
{
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.fixed_seed = 1;
    memcpy(o.seed, "fuzz_snapshot.c!", 16);
    int err = 0;
    sl_store *s = sl_store_new(&o, &err);
    if (s == NULL) die("memory");
    return s;
}

static uint64_t keys(sl_store *s)
{
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    return st.keys;
}

static uint64_t ld64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A saved file's records, each a pointer and a length, in file order. */
typedef struct recs {
    size_t n;
    const uint8_t **p;
    size_t *len;
} recs;

static recs records_of(const uint8_t *f, size_t n)
{
    if (n < HEAD + TAIL) die("a saved snapshot shorter than its head and tail");
    uint64_t count = ld64(f + n - TAIL);
    recs r = {0, calloc(count + 1, sizeof(uint8_t *)), calloc(count + 1, sizeof(size_t))};
    if (r.p == NULL || r.len == NULL) die("memory");
    size_t pos = HEAD;
    for (uint64_t k = 0; k < count; k++) {
        if (n - TAIL - pos < REC_HDR) die("a saved snapshot cut short");
        size_t klen = (size_t)(f[pos] | (f[pos + 1] & 3) << 8) + 1;
        size_t slen = (size_t)f[pos + 12] | (size_t)f[pos + 13] << 8 | (size_t)f[pos + 14] << 16 |
                      (size_t)f[pos + 15] << 24;
        size_t len = REC_HDR + klen + slen;
        if (n - TAIL - pos < len) die("a saved snapshot's record runs past its end");
        r.p[r.n] = f + pos;
        r.len[r.n++] = len;
        pos += len;
    }
    if (pos != n - TAIL) die("a saved snapshot with bytes after its records");
    return r;
}

static int same_records(recs *a, recs *b)
{
    if (a->n != b->n) return 0;
    /* each record of a, found in b and struck off: O(n^2), n is small */
    char *used = calloc(b->n + 1, 1);
    if (used == NULL) die("memory");
    int ok = 1;
    for (size_t i = 0; i < a->n && ok; i++) {
        size_t j = 0;
        while (j < b->n &&
               (used[j] || b->len[j] != a->len[i] || memcmp(b->p[j], a->p[i], a->len[i]) != 0))
            j++;
        if (j == b->n) ok = 0;
        else used[j] = 1;
    }
    free(used);
    return ok;
}

static void recs_free(recs *r)
{
    free(r->p);
    free(r->len);
}

/* save(s) into path2, read back whole. */
static uint8_t *save(sl_store *s, size_t *n)
{
    char err[512] = "";
    if (sl_store_save(s, path2, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_snapshot: %s\n", err);
        die("a loaded store could not be saved");
    }
    return read_all(path2, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    fuzz_dir_enter("snapshot", path, path2);
    size_t n = size - 1;
    uint8_t *f = malloc(n ? n : 1);
    if (f == NULL) die("memory");
    if (n) memcpy(f, data + 1, n);
    if ((data[0] & 1) && n >= 4) {
        uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), f, (uInt)(n - 4));
        for (int i = 0; i < 4; i++) f[n - 4 + i] = (uint8_t)(c >> 8 * i);
    }
    write_file(path, f, n);

    sl_store *s = store();
    uint64_t nkeys = 0;
    char err[512] = "";
    int rc = sl_store_load(s, path, &nkeys, err, sizeof err);
    if (rc == -1) {
        if (err[0] == '\0') die("refused without a message");
        if (strstr(err, path) == NULL) die("a refusal's message does not name the file");
        if (keys(s) != 0) die("a refused snapshot left keys in the store");
    } else if (rc == 0) {
        if (n < HEAD + TAIL || nkeys != ld64(f + n - TAIL))
            die("*nkeys is not the file's record count");
        if (keys(s) > nkeys) die("more keys than records");
        size_t n1, n2;
        uint8_t *f1 = save(s, &n1);
        sl_store *s2 = store();
        if (sl_store_load(s2, path2, &nkeys, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_snapshot: %s\n", err);
            die("a saved snapshot is refused");
        }
        if (keys(s2) != keys(s)) die("a saved snapshot loads to another number of keys");
        recs r1 = records_of(f1, n1);
        if (r1.n != keys(s)) die("a save with another number of records than keys");
        uint8_t *f2 = save(s2, &n2);
        recs r2 = records_of(f2, n2);
        if (!same_records(&r1, &r2)) die("save(load(save(x))) has other records than save(x)");
        recs_free(&r1);
        recs_free(&r2);
        free(f1);
        free(f2);
        sl_store_free(s2);
    } else {
        die("an existing file reported missing");
    }
    sl_store_free(s);
    free(f);
    return 0;
}
