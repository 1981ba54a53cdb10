/*
 * snapshot.c -- the store's state in a file, so a restart loses nothing.
 *
 * Format (little-endian), version 1:
 *   "sluice snapshot\n"  16 bytes of magic
 *   u32 version, u32 mark (0, or the journal generation the snapshot
 *   folds: sl__store_save_mark; readers before it ignored this word)
 *   records: u16 meta (key length - 1 | algorithm << 10 | flags << 13:
 *            SL__REC_SPACE marks a key of space 1, SL__REC_LIMIT one at its
 *            limit -- a bit files written before it existed leave 0, which
 *            only makes such a key look less restricted), u16 reset code,
 *            i64 clock, u32 state bytes, key, state (sl__state_dump)
 *   u64 record count, u32 CRC-32 (zlib) of every byte before it
 *
 * Saving copies one shard at a time under its lock into memory (decisions
 * on other shards go on; each shard is consistent in itself), writes
 * PATH.tmp, fsyncs it, renames it over PATH and fsyncs the directory.  When
 * PATH is a symbolic link the save goes through it: PATH is the link's
 * final target, its .tmp is made beside the target, and the link stays a
 * link.  sl_store_save_check makes and removes that .tmp, so a server can
 * find an unwritable place at start rather than at its first save.
 * Loading reads the whole file and checks magic, version, length, checksum
 * and every record before inserting anything: a bad file is refused whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "engine.h"
#include "snapshot.h"
#include "store.h"

#define SNAP_MAGIC "sluice snapshot\n"
#define SNAP_VERSION 1u
#define SNAP_HEAD 24   /* magic + version + reserved */
#define SNAP_TAIL 12   /* count + crc */
#define SNAP_REC_HDR 16

static void fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

typedef struct snap_buf {
    uint8_t *p;
    size_t len, cap;
    int oom;
    uint64_t records;
    const sl__shard *sh; /* the shard being dumped (its records' clocks) */
} snap_buf;

static uint8_t *snap_room(snap_buf *b, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap - b->len < n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = 1;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    uint8_t *at = b->p + b->len;
    b->len += n;
    return at;
}

/* The bytes of r's record in the file (held r). */
static size_t rec_len(const uint8_t *r)
{
    return SNAP_REC_HDR + sl__rec_klen(r) + sl__state_dump_len(r);
}

/* Writes r's record (rec_len(r) bytes) at p; clock is r's clock (the
 * file keeps it whole, whatever the header keeps: store.h). */
static void rec_write(const uint8_t *r, int64_t clock, uint8_t *p)
{
    size_t klen = sl__rec_klen(r), slen = sl__state_dump_len(r);
    /* the lock bit is about this moment (the record is held while dumped) */
    sl__st16(p, (uint16_t)(sl__rec_meta(r) & ~SL__REC_LOCK));
    sl__st16(p + 2, sl__ld16(r + 2)); /* reset code */
    sl__st64(p + 4, (uint64_t)clock);
    sl__st32(p + 12, (uint32_t)slen);
    memcpy(p + SNAP_REC_HDR, sl__rec_key(r), klen);
    sl__state_dump(r, p + SNAP_REC_HDR + klen);
}

static int dump_record(const uint8_t *r, void *ctx)
{
    snap_buf *b = ctx;
    uint8_t *p = snap_room(b, rec_len(r));
    if (p == NULL) return -1;
    rec_write(r, sl__rec_clock(b->sh, r), p);
    b->records++;
    return 0;
}

int sl__fd_write_all(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

#define SNAP_MAX_LINKS 40 /* symbolic links followed, as the kernel's own limit */

/* Where a save of path writes: path itself, or through symbolic links
 * (resolved one by one, a relative one against its link's directory) the
 * final target, which need not exist yet.  Fills target and tmp (target
 * ".tmp").  Returns 0, or -1 with err set. */
static int save_paths(const char *path, char *target, char *tmp, char *err, size_t errlen)
{
    char link[PATH_MAX], dir[PATH_MAX];
    if (snprintf(target, PATH_MAX, "%s", path) >= PATH_MAX) goto toolong;
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(target, &st) != 0 || !S_ISLNK(st.st_mode)) break;
        if (hops == SNAP_MAX_LINKS) {
            fail(err, errlen, "snapshot %s: %s", path, strerror(ELOOP));
            return -1;
        }
        ssize_t n = readlink(target, link, sizeof link - 1);
        if (n < 0) {
            fail(err, errlen, "snapshot %s: cannot read the link %s: %s", path, target,
                 strerror(errno));
            return -1;
        }
        link[n] = '\0';
        snprintf(dir, sizeof dir, "%s", target);
        if (link[0] != '/' && snprintf(target, PATH_MAX, "%s/%s", dirname(dir), link) >= PATH_MAX)
            goto toolong;
        if (link[0] == '/') memcpy(target, link, (size_t)n + 1);
    }
    if (snprintf(tmp, PATH_MAX, "%s.tmp", target) >= PATH_MAX) goto toolong;
    return 0;
toolong:
    fail(err, errlen, "snapshot %s: path too long", path);
    return -1;
}

/* Creates tmp afresh for writing: whatever was there (a leftover of a
 * crash, or something planted: a link, a FIFO) is removed first, and
 * O_EXCL makes sure the file opened is the new one.  Returns the fd, or -1
 * with errno set. */
static int create_tmp(const char *tmp)
{
    if (unlink(tmp) != 0 && errno != ENOENT) return -1;
    return open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
}

int sl_store_save_check(const char *path, char *err, size_t errlen)
{
    char target[PATH_MAX], tmp[PATH_MAX], dir[PATH_MAX];
    if (path == NULL) {
        fail(err, errlen, "invalid argument");
        return -1;
    }
    if (save_paths(path, target, tmp, err, errlen) != 0) return -1;
    snprintf(dir, sizeof dir, "%s", target);
    const char *d = dirname(dir);
    struct stat st;
    if (stat(d, &st) != 0) {
        fail(err, errlen, "snapshot %s: its directory %s: %s", path, d, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fail(err, errlen, "snapshot %s: its directory %s: %s", path, d, strerror(ENOTDIR));
        return -1;
    }
    int fd = create_tmp(tmp);
    if (fd < 0) {
        fail(err, errlen, "snapshot %s: cannot create a file in %s: %s", path, d, strerror(errno));
        return -1;
    }
    close(fd);
    if (unlink(tmp) != 0) {
        fail(err, errlen, "snapshot %s: cannot remove %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    return 0;
}

int sl_store_save(sl_store *s, const char *path, char *err, size_t errlen)
{
    return sl__store_save_mark(s, path, 0, err, errlen);
}

int sl__store_save_mark(sl_store *s, const char *path, uint32_t mark, char *err, size_t errlen)
{
    char target[PATH_MAX], tmp[PATH_MAX];
    if (save_paths(path, target, tmp, err, errlen) != 0) return -1;
    int fd = create_tmp(tmp);
    if (fd < 0) {
        fail(err, errlen, "snapshot %s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    uint8_t head[SNAP_HEAD];
    memcpy(head, SNAP_MAGIC, 16);
    sl__st32(head + 16, SNAP_VERSION);
    sl__st32(head + 20, mark);
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, head, SNAP_HEAD);
    int bad = sl__fd_write_all(fd, head, SNAP_HEAD);
    snap_buf b = {0};
    for (unsigned i = 0; i < sl__store_nshards(s) && !bad; i++) {
        sl__shard *sh = sl__store_shard_at(s, i);
        b.len = 0;
        b.sh = sh;
        sl__shard_lock(sh);
        sl__shard_foreach(sh, dump_record, &b);
        sl__shard_unlock(sh);
        if (b.oom) break;
        if (b.len == 0) continue; /* (zlib's crc32 restarts when given NULL) */
        crc = crc32(crc, b.p, (uInt)b.len);
        bad = sl__fd_write_all(fd, b.p, b.len);
    }
    uint8_t tail[SNAP_TAIL];
    sl__st64(tail, b.records);
    crc = crc32(crc, tail, 8);
    sl__st32(tail + 8, (uint32_t)crc);
    int oom = b.oom;
    free(b.p);
    if (!bad && !oom) bad = sl__fd_write_all(fd, tail, SNAP_TAIL);
    if (!bad && !oom) bad = fsync(fd);
    int saved = errno;
    if (close(fd) != 0 && !bad) bad = -1, saved = errno;
    if (bad || oom || rename(tmp, target) != 0) {
        if (!bad && !oom) saved = errno;
        fail(err, errlen, "snapshot %s: cannot write: %s", path,
             oom ? "out of memory" : strerror(saved));
        unlink(tmp);
        return -1;
    }
    /* make the rename itself durable */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", target);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int sl__read_whole(const char *what, const char *path, uint8_t **out, size_t *len, char *err,
                   size_t errlen)
{
    /* O_NONBLOCK: a FIFO in the file's place is refused below, not waited
     * on */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 1;
        fail(err, errlen, "%s %s: cannot open: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(err, errlen, "%s %s: not a regular file", what, path);
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *p = malloc(n ? n : 1);
    if (p == NULL) {
        fail(err, errlen, "%s %s: out of memory reading %zu bytes", what, path, n);
        close(fd);
        return -1;
    }
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    *out = p;
    *len = got;
    return 0;
}

/* Checks the record at p (avail bytes there): returns its length, or 0
 * with *why set. */
static size_t rec_check(const uint8_t *p, size_t avail, const char **why)
{
    *why = NULL;
    if (avail < SNAP_REC_HDR) {
        *why = "cut short";
        return 0;
    }
    uint16_t meta = sl__ld16(p);
    size_t klen = (size_t)(meta & 0x3ff) + 1;
    unsigned algo = (meta >> 10) & 7;
    size_t slen = sl__ld32(p + 12);
    int64_t clock = (int64_t)sl__ld64(p + 4);
    if (algo >= SL_ALGO_COUNT) *why = "unknown algorithm";
    else if (klen > SL_MAX_KEY) *why = "key longer than 512 bytes";
    else if (avail - SNAP_REC_HDR < klen || avail - SNAP_REC_HDR - klen < slen)
        *why = "runs past the end of the file";
    else if (clock <= -SL_MAX_TIME_MS || clock >= SL_MAX_TIME_MS) *why = "time out of range";
    else if (sl__state_load_len(algo, p + SNAP_REC_HDR + klen, slen) == 0)
        *why = "malformed state";
    return *why ? 0 : SNAP_REC_HDR + klen + slen;
}

/* Puts a checked record (rec_check) into s, replacing the key's record. */
static void rec_insert(sl_store *s, const uint8_t *p)
{
    uint16_t meta = sl__ld16(p);
    size_t klen = (size_t)(meta & 0x3ff) + 1;
    unsigned algo = (meta >> 10) & 7;
    size_t slen = sl__ld32(p + 12);
    int64_t clock = (int64_t)sl__ld64(p + 4);
    const uint8_t *key = p + SNAP_REC_HDR, *st = key + klen;
    size_t room = sl__state_load_len(algo, st, slen);
    unsigned kind = algo | ((meta >> 13) & SL__REC_SPACE ? SL__KIND_SPACE : 0);
    uint64_t h = sl__store_hash(s, kind, key, klen);
    sl__shard *sh = sl__store_shard(s, h);
    sl__shard_lock(sh);
    uint8_t *r = sl__shard_find(sh, h, kind, key, klen);
    if (r) sl__shard_remove(sh, h, r);
    r = sl__shard_insert(sh, h, kind, key, klen, room, clock);
    if (r && sl__state_load(sh, r, st, slen, clock) != 0) {
        sl__shard_remove(sh, h, r);
        r = NULL;
    }
    if (r) {
        memcpy(r + 2, p + 2, 2); /* the reset code, as saved */
        sl__rec_set_flags(r, sl__rec_flags(r) | (meta >> 13));
        sl__rec_unlock(r);
    }
    sl__shard_unlock(sh);
}

/* Walks the records of a checked file; with insert == 0 only validates. */
static int walk(sl_store *s, const char *path, const uint8_t *p, size_t len, uint64_t count,
                int insert, char *err, size_t errlen)
{
    size_t pos = SNAP_HEAD, end = len - SNAP_TAIL;
    for (uint64_t k = 0; k < count; k++) {
        const char *why;
        size_t n = rec_check(p + pos, end - pos, &why);
        if (n == 0) {
            if (end - pos < SNAP_REC_HDR)
                fail(err, errlen, "snapshot %s: record %llu at byte %zu is cut short", path,
                     (unsigned long long)k + 1, pos);
            else
                fail(err, errlen, "snapshot %s: record %llu at byte %zu: %s", path,
                     (unsigned long long)k + 1, pos, why);
            return -1;
        }
        if (insert) rec_insert(s, p + pos);
        pos += n;
    }
    if (pos != end) {
        fail(err, errlen, "snapshot %s: %zu unexpected bytes after the last record", path,
             end - pos);
        return -1;
    }
    return 0;
}

int sl_store_load(sl_store *s, const char *path, uint64_t *nkeys, char *err, size_t errlen)
{
    return sl__store_load_mark(s, path, nkeys, NULL, err, errlen);
}

int sl__store_load_mark(sl_store *s, const char *path, uint64_t *nkeys, uint32_t *mark, char *err,
                        size_t errlen)
{
    if (mark) *mark = 0;
    uint8_t *p = NULL;
    size_t len = 0;
    int rc = sl__read_whole("snapshot", path, &p, &len, err, errlen);
    if (rc != 0) return rc;
    rc = -1;
    if (len < SNAP_HEAD + SNAP_TAIL || memcmp(p, SNAP_MAGIC, 16) != 0) {
        if (len >= 16 && memcmp(p, SNAP_MAGIC, 16) == 0)
            fail(err, errlen, "snapshot %s: truncated (%zu bytes)", path, len);
        else
            fail(err, errlen, "snapshot %s: not a sluice snapshot (bad magic)", path);
    } else if (sl__ld32(p + 16) != SNAP_VERSION) {
        fail(err, errlen, "snapshot %s: version %u is not supported (this build reads version %u)",
             path, sl__ld32(p + 16), SNAP_VERSION);
    } else if ((uint32_t)crc32(crc32(0L, Z_NULL, 0), p, (uInt)(len - 4)) != sl__ld32(p + len - 4)) {
        fail(err, errlen,
             "snapshot %s: checksum mismatch: the file is corrupt or truncated (%zu bytes)", path,
             len);
    } else {
        uint64_t count = sl__ld64(p + len - SNAP_TAIL);
        if (walk(s, path, p, len, count, 0, err, errlen) == 0) {
            walk(s, path, p, len, count, 1, err, errlen);
            if (nkeys) *nkeys = count;
            if (mark) *mark = sl__ld32(p + 20);
            rc = 0;
        }
    }
    free(p);
    return rc;
}

/* ---- one record at a time: the journal (snapshot.h) --------------------- */

size_t sl__store_image(sl_store *s, unsigned kind, const void *key, size_t klen, uint8_t *buf,
                       size_t cap, _Atomic uint64_t *seq, uint64_t *seq_out)
{
    uint8_t *r = NULL;
    uint16_t m = 0;
    uint64_t h;
    int64_t clock = 0;
    sl__shard *sh = NULL;
    /* held (by either way), the record's image and its number are one
     * moment: no decision on the key falls between them */
    if (sl__store_quick(s)) {
        sl__grabbed g = sl__store_grab_key(s, kind, key, klen, &h, &m);
        if (g.rec != NULL && sl__grabbed_clock(g, INT64_MIN, &clock))
            r = g.rec;
        else if (g.rec != NULL) /* a wide record, or a walk under way: the sure way */
            sl__rec_release(g.rec, m);
    }
    if (r == NULL) {
        r = sl__store_lookup(s, kind, key, klen, &sh, &h);
        if (r != NULL) {
            m = sl__rec_meta(r);
            clock = sl__rec_clock(sh, r);
        }
    }
    *seq_out = atomic_fetch_add_explicit(seq, 1, memory_order_relaxed);
    size_t n = r ? rec_len(r) : 0;
    if (r != NULL && n <= cap) rec_write(r, clock, buf);
    if (r != NULL) sl__rec_release(r, m);
    if (sh != NULL) sl__shard_unlock(sh);
    return n;
}

size_t sl__store_image_check(const uint8_t *p, size_t len, const char **why)
{
    size_t n = rec_check(p, len, why);
    if (n != 0 && n != len) {
        *why = "unexpected bytes after the record";
        return 0;
    }
    return n;
}

void sl__store_image_apply(sl_store *s, const uint8_t *p) { rec_insert(s, p); }

int sl__store_image_drop(sl_store *s, unsigned kind, const void *key, size_t klen)
{
    uint64_t h = sl__store_hash(s, kind, key, klen);
    sl__shard *sh = sl__store_shard(s, h);
    sl__shard_lock(sh);
    uint8_t *r = sl__shard_find(sh, h, kind, key, klen);
    if (r != NULL) sl__shard_remove(sh, h, r);
    sl__shard_unlock(sh);
    return r != NULL;
}
