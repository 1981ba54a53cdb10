/*
 * text.h -- small text helpers shared by the `sluicectl` command's parts
 * (replay.c, whatif.c, whatif_parse.c): quoting a bad token for a message,
 * fast decimal output, the option walk, and writing a buffer out whole.  No
 * state; only sl__write_all touches a descriptor.
 */
#ifndef SL_CLI_TEXT_H
#define SL_CLI_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sluice.h"

#define SL__QUOTE_MAX 40                      /* bytes of a token quoted in a message */
#define SL__QBUF      (SL__QUOTE_MAX * 4 + 4) /* what sl__quote may write */

/* Writes tok (len bytes) into out (SL__QBUF bytes) with bytes outside
 * printable ASCII, and '\\', as \xNN, cut to SL__QUOTE_MAX bytes with "..."
 * after.  Returns out. */
const char *sl__quote(const void *tok, size_t len, char *out);

/* The same, cut to max bytes instead: out holds max * 4 + 4 bytes. */
const char *sl__quote_n(const void *tok, size_t len, size_t max, char *out);

/* Writes to err (errlen bytes) what is wrong with a line holding control
 * byte c at column col (from 1): "NUL byte at column 7 (binary data?)". */
void sl__ctl_message(char *err, size_t errlen, unsigned char c, size_t col);

/* Whether tok (len bytes) is "-?[0-9]+": a number, if perhaps out of
 * range -- to say "out of range" rather than "not a number". */
int sl__looks_numeric(const void *tok, size_t len);

/* A walk over the arguments of a `sluicectl replay` mode, the shape both
 * modes take: at most one FILE ("-" is one), "--" ending the options,
 * -h/--help, and --name, --name=value or --name value -- and, for a yes/no
 * option (flag), --name (yes), --name=VALUE or --name yes|no, as sluiced
 * takes them (a word after the flag is its value only if it is a yes/no
 * word: sl__bool_parse).  Set argc, argv, takes, see and perhaps flag; the
 * rest starts zero. */
typedef struct sl__args {
    int argc;
    char **argv;
    int (*takes)(const char *name, size_t nlen); /* does --name take a value? */
    int (*flag)(const char *name, size_t nlen);  /* is --name yes/no? NULL: none is */
    const char *see;                             /* named by an unknown option's
                                                    message, e.g. "sluicectl replay --help" */
    int i;                                       /* arguments used (0: none yet) */
    int only_files;                              /* after "--" */
    const char *file;                            /* the FILE, or NULL */
    int many;                                    /* 1: any number of FILEs, each
                                                    returned as it comes (3) */
} sl__args;

/* One option: argv's word, the name after "--" (nlen bytes), its value. */
typedef struct sl__opt {
    const char *arg, *name, *val; /* val: NULL for an option without one */
    size_t nlen;
} sl__opt;

/* Parses a yes/no word as sluiced does: yes, true, on, 1 -> 1; no, false,
 * off, 0 -> 0 (any case).  Returns 0, or -1 for any other word. */
int sl__bool_parse(const char *s, size_t len, int *out);

/* The next option into *o, taking FILE arguments into w->file on the way
 * (with w->many, returning each FILE instead: 3, the FILE in o->arg).
 * A flag's o->val is its yes/no word, or NULL when bare (yes).
 * Returns 1 (an option), 2 (-h or --help), 3 (a FILE, with many), 0 (no
 * more arguments), or -1 with what is wrong, whole, in err (errlen bytes). */
int sl__args_next(sl__args *w, sl__opt *o, char *err, size_t errlen);

/* Skips p forward, eight bytes at a time, while no byte of the word is
 * below lo (at most 0x80) or is 0x7f (DEL); returns where byte-by-byte
 * scanning must take over (a word holding such a byte, or fewer than 8
 * bytes before e).  The classic "has a byte less than n" and "has a zero
 * byte" word tricks, exact for whether any byte matches. */
static inline const unsigned char *sl__skip_words(const unsigned char *p, const unsigned char *e,
                                                  unsigned lo)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (e - p >= 8) {
        uint64_t w, y;
        memcpy(&w, p, 8);
        y = w ^ (0x7f * ones);
        if ((((w - lo * ones) & ~w) | ((y - ones) & ~y)) & highs) break;
        p += 8;
    }
    return p;
}

/* write(2)s n bytes whole, retrying short writes and EINTR.  Returns 0, or
 * the errno of the failed write. */
int sl__write_all(int fd, const char *p, size_t n);

extern const char sl__digit_pairs[201];

/* Appends v in decimal at o; returns the end.  At most 20 bytes. */
static inline char *sl__put_i64(char *o, int64_t v)
{
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        *o++ = '-';
        u = 0 - u;
    }
    if (u < 10) {
        *o++ = (char)('0' + u);
        return o;
    }
    char tmp[20], *q = tmp + sizeof tmp;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        q -= 2;
        memcpy(q, sl__digit_pairs + 2 * r, 2);
    }
    if (u >= 10) {
        q -= 2;
        memcpy(q, sl__digit_pairs + 2 * u, 2);
    } else {
        *--q = (char)('0' + u);
    }
    size_t n = (size_t)(tmp + sizeof tmp - q);
    memcpy(o, q, n);
    return o + n;
}

/* Appends the six fields of r (SPEC 3) separated by spaces, as `sluicectl
 * replay` prints them; returns the end.  At most SL__RESULT_MAX bytes. */
#define SL__RESULT_MAX (6 * 21)
static inline char *sl__put_result(char *p, const sl_result *r)
{
    const int64_t f[6] = {r->allowed,        r->limit,          r->remaining,
                          r->retry_after_ms, r->reset_after_ms, r->delay_ms};
    p = sl__put_i64(p, f[0]);
    for (int i = 1; i < 6; i++) {
        *p++ = ' ';
        p = sl__put_i64(p, f[i]);
    }
    return p;
}

#endif
