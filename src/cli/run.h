/*
 * run.h -- what the two modes of `sluicectl replay` share: replay.c (one
 * limit, --algo) and whatif.c (a rules file, --rules).  The walk over
 * their options with its messages, --max-memory, opening the input,
 * reading it, the buffered output of the answers, and the summary's
 * arithmetic (key hash, percentages, the top-N list).  Everything that
 * prints goes to stderr as "sluicectl: ...", the answers alone to stdout.
 */
#ifndef SL_CLI_RUN_H
#define SL_CLI_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "sluice.h"
#include "text.h"

/* ---- options ------------------------------------------------------------ */

/* Prints "sluicectl: <message>" to stderr; returns 2, the exit status of a bad
 * option. */
__attribute__((format(printf, 1, 2))) int sl__usage_error(const char *fmt, ...);

/* The next option of the walk w (text.h) into *o.  Returns 1 (an option),
 * 0 (no more arguments), -1 after printing usage to stdout (-h, --help),
 * or 2 after printing what is wrong. */
int sl__opts_next(sl__args *w, sl__opt *o, const char *usage);

/* Whether name (nlen bytes) is one of the n strings of list. */
int sl__name_in(const char *name, size_t nlen, const char *const *list, size_t n);

/* Whether option o is --s. */
static inline int sl__opt_is(const sl__opt *o, const char *s)
{
    return strlen(s) == o->nlen && memcmp(o->name, s, o->nlen) == 0;
}

/* The most --max-memory may be: 2^50 bytes, sluiced's bound too. */
#define SL__MAX_MEMORY ((uint64_t)1 << 50)

/* Parses --max-memory's value v (sl__size_parse: k = 1024, m = 2^20,
 * g = 2^30) into *out.  Returns 0, or 2 after printing what is wrong. */
int sl__opt_max_memory(const char *v, size_t *out);

/* ---- input -------------------------------------------------------------- */

/* Opens FILE for reading: NULL or "-" is standard input (fd 0).  Returns
 * the descriptor with *name set for messages ("standard input" or FILE),
 * or -1 after printing why it cannot be opened. */
int sl__input_open(const char *file, const char **name);

/* read(2) of up to n bytes, again after EINTR.  Returns what read(2) does. */
ssize_t sl__read(int fd, void *buf, size_t n);

/* ---- the store ---------------------------------------------------------- */

/* Prints why a store or limiter could not be made (err, an SL_E* code;
 * max_memory: --max-memory's bytes, 0 if not given).  Returns the exit
 * status: 1 out of memory, 2 otherwise. */
int sl__store_failed(int err, size_t max_memory);

/* Warns on stderr, if n > 0, that n `what` ("keys", "counters") were
 * evicted to stay under --max-memory. */
void sl__warn_evicted(uint64_t n, const char *what);

/* ---- output ------------------------------------------------------------- */

#define SL__OUT_FLUSH (1u << 16) /* write(2) once this much output is pending */
#define SL__OUT_SLACK 4096       /* room past SL__OUT_FLUSH: any one sl__out_reserve */

/* Answers waiting to be written to fd.  Set fd, and before/ctx if wanted,
 * the rest zero. */
typedef struct sl__out {
    int fd;
    size_t len;
    int failed;                /* errno of a failed write, or 0 */
    void (*before)(void *ctx); /* called before each write, or NULL */
    void *ctx;
    char buf[SL__OUT_FLUSH + SL__OUT_SLACK];
} sl__out;

/* Writes everything pending.  Returns 0, or -1 with o->failed set (and
 * later calls write nothing and return -1). */
int sl__out_flush(sl__out *o);

/* Makes room for n <= SL__OUT_SLACK bytes; returns where they go.  A failed
 * flush drops what was pending (the caller stops at its next flush). */
static inline char *sl__out_reserve(sl__out *o, size_t n)
{
    if (o->len + n > sizeof o->buf && sl__out_flush(o) != 0) o->len = 0;
    return o->buf + o->len;
}

/* ---- the summary -------------------------------------------------------- */

/* FNV-1a of n bytes: the summary's key tables. */
static inline uint64_t sl__fnv1a(const void *k, size_t n)
{
    const unsigned char *p = k;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* Writes part/whole as "12.3%" (rounded to a tenth; 0.0% when whole is 0)
 * into out (n bytes). */
void sl__pct(char *out, size_t n, uint64_t part, uint64_t whole);

/* Prints the summary's first three lines to f: requests (and the lines
 * read), allowed and denied with their shares, labels padded to width. */
void sl__print_totals(FILE *f, int width, uint64_t requests, uint64_t allowed, uint64_t lines);

/* Inserts item into top[0..ntop), kept ordered by better(a, b, ctx) (a
 * ranks before b) and at most max long: an item ranking below a full list
 * is dropped.  Returns the new ntop.  O(max) an item. */
size_t sl__top_insert(const void **top, size_t ntop, size_t max, const void *item,
                      int (*better)(const void *a, const void *b, const void *ctx),
                      const void *ctx);

#endif
