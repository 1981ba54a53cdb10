/*
 * journal.c -- the decision journal (journal.h): records, group commit,
 * the fsync thread, replay at start and folding into snapshots.  The
 * bytes' format is journal_fmt.c's.
 *
 * Locks: wmu guards the file (fd, size, the write offset, generation,
 * FILE.old's fd) and the list of thread buffers; smu guards the fsync
 * tickets (started, done, syncing).  A thread buffer is its thread's own
 * (no lock); it is written under wmu.  Order: wmu, then smu, never the
 * other way.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "journal.h"
#include "journal_fmt.h"
#include "log.h"
#include "snapshot.h"
#include "store.h"

#define JBUF_START 65536 /* a thread buffer's first size (grows for a large image) */
#define JBUF_KEEP  (1u << 20) /* kept between turns; a larger one is freed after its write */

typedef struct jbuf {
    struct sl_journal *j;
    uint8_t *p;
    size_t len, cap;
    struct jbuf *next; /* j->bufs; guarded by wmu */
} jbuf;

struct sl_journal {
    sl_store *s;
    int mode;
    char path[PATH_MAX], old[PATH_MAX], tmp[PATH_MAX];
    _Atomic uint64_t seq; /* the next record number (sl__store_image) */

    pthread_mutex_t wmu;
    int fd;        /* FILE, appended to (wmu) */
    int old_fd;    /* FILE.old while a snapshot folds it; -1 (wmu) */
    uint64_t size; /* FILE's bytes (wmu) */
    uint32_t gen;  /* FILE's generation (wmu) */
    int broken;    /* a write failed: no more writes (wmu) */
    jbuf *bufs;    /* every thread's buffer (wmu) */
    _Atomic uint64_t bytes;

    pthread_mutex_t smu;
    pthread_cond_t scond;
    uint64_t started, done; /* fsync tickets (smu) */
    int syncing;            /* one fdatasync under way (smu) */
    int sync_err;           /* one failed (smu) */
    int stop;               /* the thread is to stop (smu) */
    _Atomic uint64_t syncs;
    pthread_t thread;
    int has_thread;
};

static _Thread_local jbuf *tl; /* this thread's buffer, or NULL */

static void fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void fsync_dir(const char *path)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int sl_journal_load_snapshot(sl_store *s, const char *snapshot, uint64_t *nkeys, uint32_t *mark,
                             char *err, size_t errlen)
{
    return sl__store_load_mark(s, snapshot, nkeys, mark, err, errlen);
}

/* ---- replay ------------------------------------------------------------- */


typedef struct jfile {
    uint8_t *p;
    size_t len;
    uint32_t gen;
    uint64_t base;
    int used; /* its records are replayed */
} jfile;

typedef struct rref {
    uint64_t seq;
    const uint8_t *body; /* the record's body (type, seq, payload) */
    size_t blen;
} rref;

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const rref *)a)->seq, y = ((const rref *)b)->seq;
    return x < y ? -1 : x > y;
}

int sl_journal_replay(sl_store *s, const char *path, uint32_t mark, sl_journal_info *info,
                      char *err, size_t errlen)
{
    char old[PATH_MAX];
    const char *names[2] = {old, path};
    jfile f[2] = {{0}, {0}};
    rref *refs = NULL;
    size_t nrefs = 0, cap = 0;
    int rc = -1;
    memset(info, 0, sizeof *info);
    if (snprintf(old, sizeof old, "%s.old", path) >= (int)sizeof old) {
        fail(err, errlen, "journal %s: path too long", path);
        return -1;
    }
    info->gen = mark;
    for (int i = 0; i < 2; i++) {
        int r = sl__read_whole("journal", names[i], &f[i].p, &f[i].len, err, errlen);
        if (r < 0) goto out;
        if (r == 1) continue;
        const char *why;
        if (sl_journal_head_parse(f[i].p, f[i].len, &f[i].gen, &f[i].base, &why) != 0) {
            if (f[i].len < SL_JOURNAL_HEAD && i == 1 &&
                memcmp(f[i].p, SL_JOURNAL_MAGIC, f[i].len) == 0) {
                continue; /* a head cut short: nothing was ever written after it */
            }
            fail(err, errlen, "journal %s: at offset 0: %s", names[i], why);
            goto out;
        }
        info->files++;
        if (f[i].gen + 1 > info->gen) info->gen = f[i].gen + 1;
        if (f[i].gen < mark) continue; /* the snapshot folded it */
        f[i].used = 1;
        size_t off = SL_JOURNAL_HEAD;
        sl_jrec jr;
        for (;;) {
            int k = sl_journal_next(f[i].p, f[i].len, &off, &jr, &why);
            if (k == 0) break;
            if (k == SL_JTORN) {
                info->torn = 1;
                snprintf(info->torn_file, sizeof info->torn_file, "%s", names[i]);
                info->torn_off = off;
                info->torn_bytes = f[i].len - off;
                break;
            }
            if (k == SL_JCORRUPT) {
                fail(err, errlen,
                     "journal %s: corrupt record at offset %zu (%s); the records after it "
                     "cannot be trusted: refusing to start (move the file away to start from "
                     "the snapshot alone)",
                     names[i], off, why);
                goto out;
            }
            if (f[i].gen == mark && jr.seq < f[i].base) {
                info->skipped++; /* older than the snapshot's start */
                continue;
            }
            if (nrefs == cap) {
                size_t nc = cap ? cap * 2 : 4096;
                rref *nr = realloc(refs, nc * sizeof *nr);
                if (nr == NULL) {
                    fail(err, errlen, "journal %s: out of memory", names[i]);
                    goto out;
                }
                refs = nr;
                cap = nc;
            }
            refs[nrefs++] = (rref){jr.seq, f[i].p + jr.off + SL_JREC_HDR,
                                   sl__ld32(f[i].p + jr.off)};
        }
    }
    /* two workers' records of one key reach the files in either order: the
     * numbers say which state is the later */
    if (nrefs > 1) qsort(refs, nrefs, sizeof *refs, by_seq);
    for (size_t k = 0; k < nrefs; k++) {
        const uint8_t *b = refs[k].body;
        if (b[0] == SL_JREC_IMAGE)
            sl__store_image_apply(s, b + SL_JREC_FIXED);
        else
            sl__store_image_drop(s, sl__ld16(b + SL_JREC_FIXED), b + SL_JREC_FIXED + 2,
                                 refs[k].blen - SL_JREC_FIXED - 2);
    }
    info->records = nrefs;
    rc = 0;
out:
    free(refs);
    free(f[0].p);
    free(f[1].p);
    return rc;
}

/* ---- files ---------------------------------------------------------------- */

/* Makes a new FILE (through FILE.tmp, fsynced, renamed) of generation gen
 * starting at record base, open for appending.  fd, or -1 with err. */
static int new_file(sl_journal *j, uint32_t gen, uint64_t base, char *err, size_t errlen)
{
    uint8_t h[SL_JOURNAL_HEAD];
    sl_journal_head_make(h, gen, base);
    if (unlink(j->tmp) != 0 && errno != ENOENT) goto bad;
    int fd = open(j->tmp, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) goto bad;
    if (sl__fd_write_all(fd, h, sizeof h) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(j->tmp);
        errno = e;
        goto bad;
    }
    return fd;
bad:
    fail(err, errlen, "journal %s: cannot create %s: %s", j->path, j->tmp, strerror(errno));
    return -1;
}

static void *fsync_thread(void *arg);

sl_journal *sl_journal_open(sl_store *s, const char *path, const char *snapshot, int mode,
                            uint32_t mark, sl_journal_info *info, char *err, size_t errlen)
{
    sl_journal *j = calloc(1, sizeof *j);
    if (j == NULL) {
        fail(err, errlen, "journal %s: out of memory", path);
        return NULL;
    }
    j->s = s;
    j->mode = mode;
    j->fd = j->old_fd = -1;
    if (snprintf(j->path, sizeof j->path, "%s", path) >= (int)sizeof j->path ||
        snprintf(j->old, sizeof j->old, "%s.old", path) >= (int)sizeof j->old ||
        snprintf(j->tmp, sizeof j->tmp, "%s.tmp", path) >= (int)sizeof j->tmp) {
        fail(err, errlen, "journal %s: path too long", path);
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->wmu, NULL);
    pthread_mutex_init(&j->smu, NULL);
    pthread_cond_init(&j->scond, NULL);
    if (sl_journal_replay(s, path, mark, info, err, errlen) != 0) goto bad;
    /* fold what was replayed: the snapshot with mark gen holds every file
     * before it, so the next start skips them all, whichever of the steps
     * below a crash stops at */
    j->gen = info->gen > 0 ? info->gen : 1;
    info->gen = j->gen;
    if (sl__store_save_mark(s, snapshot, j->gen, err, errlen) != 0) goto bad;
    j->fd = new_file(j, j->gen, 0, err, errlen);
    if (j->fd < 0) goto bad;
    if (rename(j->tmp, j->path) != 0) {
        fail(err, errlen, "journal %s: cannot rename %s: %s", path, j->tmp, strerror(errno));
        goto bad;
    }
    if (unlink(j->old) != 0 && errno != ENOENT) {
        fail(err, errlen, "journal %s: cannot remove %s: %s", path, j->old, strerror(errno));
        goto bad;
    }
    fsync_dir(j->path);
    j->size = SL_JOURNAL_HEAD;
    if (mode == SL_JFSYNC_EVERYSEC) {
        if (pthread_create(&j->thread, NULL, fsync_thread, j) != 0) {
            fail(err, errlen, "journal %s: cannot start the fsync thread", path);
            goto bad;
        }
        j->has_thread = 1;
    }
    return j;
bad:
    if (j->fd >= 0) close(j->fd);
    pthread_mutex_destroy(&j->wmu);
    pthread_mutex_destroy(&j->smu);
    pthread_cond_destroy(&j->scond);
    free(j);
    return NULL;
}

/* ---- recording and group commit -------------------------------------------- */

static jbuf *thread_buf(sl_journal *j)
{
    if (tl != NULL && tl->j == j) return tl;
    jbuf *b = calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    b->j = j;
    pthread_mutex_lock(&j->wmu);
    b->next = j->bufs;
    j->bufs = b;
    pthread_mutex_unlock(&j->wmu);
    tl = b;
    return b;
}

static int buf_room(jbuf *b, size_t n)
{
    if (b->cap - b->len >= n) return 0;
    size_t cap = b->cap ? b->cap : JBUF_START;
    while (cap - b->len < n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

void sl_journal_record(void *arg, unsigned kind, const void *key, size_t klen)
{
    sl_journal *j = arg;
    jbuf *b = thread_buf(j);
    if (b == NULL || klen == 0 || klen > SL_MAX_KEY) goto oom;
    size_t want = 16 + SL_MAX_KEY + 256; /* an image's usual most; grown below if not */
    for (;;) {
        if (buf_room(b, SL_JREC_HDR + SL_JREC_FIXED + want) != 0) goto oom;
        uint8_t *rec = b->p + b->len, *bd = rec + SL_JREC_HDR;
        size_t cap = b->cap - b->len - SL_JREC_HDR - SL_JREC_FIXED;
        uint64_t seq;
        size_t n = sl__store_image(j->s, kind, key, klen, bd + SL_JREC_FIXED, cap, &j->seq, &seq);
        if (n > cap) { /* a large sliding log: room for it, and a new image */
            want = n;
            continue;
        }
        if (n == 0) { /* gone */
            bd[0] = SL_JREC_GONE;
            sl__st16(bd + SL_JREC_FIXED, (uint16_t)kind);
            memcpy(bd + SL_JREC_FIXED + 2, key, klen);
            n = 2 + klen;
        } else {
            bd[0] = SL_JREC_IMAGE;
        }
        sl__st64(bd + 1, seq);
        b->len += sl_journal_frame(rec, SL_JREC_FIXED + n);
        return;
    }
oom:
    /* the record is lost: the next commit fails with always */
    pthread_mutex_lock(&j->wmu);
    j->broken = 1;
    pthread_mutex_unlock(&j->wmu);
}

/* Writes b under wmu.  0, or -1 (the journal is broken from then on). */
static int do_write(sl_journal *j, jbuf *b)
{
    int bad = j->broken;
    if (!bad && b->len > 0) {
        if (sl__fd_write_all(j->fd, b->p, b->len) != 0) {
            int e = errno;
            /* no half record before later ones: cut it off */
            if (ftruncate(j->fd, (off_t)j->size) != 0) (void)0;
            sl_log(SL_LOG_ERROR, "journal write failed: no more records are written",
                   "file=%s err=%s", sl_logq(j->path), sl_logq(strerror(e)));
            j->broken = bad = 1;
        } else {
            j->size += b->len;
            atomic_fetch_add_explicit(&j->bytes, b->len, memory_order_relaxed);
        }
    }
    b->len = 0;
    if (b->cap > JBUF_KEEP) {
        free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
    return bad ? -1 : 0;
}

/* Runs (or waits for) an fdatasync that begins after this call.  0, or -1
 * if it failed. */
static int sync_after(sl_journal *j)
{
    pthread_mutex_lock(&j->smu);
    uint64_t need = j->started + 1;
    while (j->done < need) {
        if (j->syncing) {
            pthread_cond_wait(&j->scond, &j->smu);
            continue;
        }
        j->syncing = 1;
        uint64_t n = ++j->started;
        pthread_mutex_unlock(&j->smu);
        pthread_mutex_lock(&j->wmu);
        int fd = j->fd;
        pthread_mutex_unlock(&j->wmu);
        int rc = fdatasync(fd);
        atomic_fetch_add_explicit(&j->syncs, 1, memory_order_relaxed);
        pthread_mutex_lock(&j->smu);
        if (rc != 0 && !j->sync_err) {
            j->sync_err = 1;
            sl_log(SL_LOG_ERROR, "journal fdatasync failed", "file=%s err=%s", sl_logq(j->path),
                   sl_logq(strerror(errno)));
        }
        j->syncing = 0;
        j->done = n;
        pthread_cond_broadcast(&j->scond);
    }
    int bad = j->sync_err;
    pthread_mutex_unlock(&j->smu);
    return bad ? -1 : 0;
}

int sl_journal_commit(void)
{
    jbuf *b = tl;
    if (b == NULL || b->len == 0) return 0;
    sl_journal *j = b->j;
    pthread_mutex_lock(&j->wmu);
    int bad = do_write(j, b);
    pthread_mutex_unlock(&j->wmu);
    if (j->mode != SL_JFSYNC_ALWAYS) return 0;
    if (bad) return -1;
    return sync_after(j);
}

static void *fsync_thread(void *arg)
{
    sl_journal *j = arg;
    uint64_t synced = 0;
    pthread_mutex_lock(&j->smu);
    while (!j->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&j->scond, &j->smu, &ts);
        if (j->stop) break;
        uint64_t now = atomic_load_explicit(&j->bytes, memory_order_relaxed);
        if (now == synced) continue; /* nothing written since the last one */
        pthread_mutex_unlock(&j->smu);
        sync_after(j);
        synced = now;
        pthread_mutex_lock(&j->smu);
    }
    pthread_mutex_unlock(&j->smu);
    return NULL;
}

/* ---- snapshots fold the journal ------------------------------------------- */

int sl_journal_snapshot(sl_journal *j, sl_store *s, const char *snapshot, char *err,
                        size_t errlen)
{
    pthread_mutex_lock(&j->wmu);
    struct stat st;
    /* FILE.old still there: the last fold's snapshot failed; this one folds
     * both (mark = FILE's generation covers FILE.old and FILE's records
     * older than its base) */
    if (j->old_fd < 0 && lstat(j->old, &st) != 0 && !j->broken) {
        uint64_t base = atomic_load_explicit(&j->seq, memory_order_relaxed);
        int fd = new_file(j, j->gen + 1, base, err, errlen);
        if (fd < 0) {
            pthread_mutex_unlock(&j->wmu);
            return -1;
        }
        /* what went to FILE is on disk before anything depends on its fold */
        if (fdatasync(j->fd) != 0 || rename(j->path, j->old) != 0 ||
            rename(j->tmp, j->path) != 0) {
            fail(err, errlen, "journal %s: cannot rotate: %s", j->path, strerror(errno));
            close(fd);
            if (access(j->path, F_OK) != 0) (void)rename(j->old, j->path);
            unlink(j->tmp);
            pthread_mutex_unlock(&j->wmu);
            return -1;
        }
        fsync_dir(j->path);
        j->old_fd = j->fd;
        j->fd = fd;
        j->size = SL_JOURNAL_HEAD;
        j->gen++;
    }
    uint32_t mark = j->gen;
    pthread_mutex_unlock(&j->wmu);
    /* every record in FILE.old was written before this began: the
     * snapshot holds its effect */
    if (sl__store_save_mark(s, snapshot, mark, err, errlen) != 0) return -1;
    pthread_mutex_lock(&j->wmu);
    int rc = 0;
    if (unlink(j->old) != 0 && errno != ENOENT) {
        fail(err, errlen, "journal %s: cannot remove %s: %s", j->path, j->old, strerror(errno));
        rc = -1;
    }
    if (j->old_fd >= 0 && rc == 0) {
        /* no fdatasync may be running on it: sync_after reads fd under wmu,
         * and the old one is no longer j->fd, but one may be under way */
        pthread_mutex_lock(&j->smu);
        while (j->syncing) pthread_cond_wait(&j->scond, &j->smu);
        close(j->old_fd);
        j->old_fd = -1;
        pthread_mutex_unlock(&j->smu);
    }
    pthread_mutex_unlock(&j->wmu);
    return rc;
}

void sl_journal_counts(sl_journal *j, uint64_t *bytes, uint64_t *syncs)
{
    *bytes = atomic_load_explicit(&j->bytes, memory_order_relaxed);
    *syncs = atomic_load_explicit(&j->syncs, memory_order_relaxed);
}

void sl_journal_close(sl_journal *j)
{
    if (j == NULL) return;
    if (j->has_thread) {
        pthread_mutex_lock(&j->smu);
        j->stop = 1;
        pthread_cond_broadcast(&j->scond);
        pthread_mutex_unlock(&j->smu);
        pthread_join(j->thread, NULL);
    }
    pthread_mutex_lock(&j->wmu);
    for (jbuf *b = j->bufs, *n; b != NULL; b = n) {
        n = b->next;
        do_write(j, b);
        if (tl == b) tl = NULL;
        free(b->p);
        free(b);
    }
    j->bufs = NULL;
    if (j->mode != SL_JFSYNC_NO) (void)fdatasync(j->fd);
    close(j->fd);
    if (j->old_fd >= 0) close(j->old_fd);
    pthread_mutex_unlock(&j->wmu);
    pthread_mutex_destroy(&j->wmu);
    pthread_mutex_destroy(&j->smu);
    pthread_cond_destroy(&j->scond);
    free(j);
}
