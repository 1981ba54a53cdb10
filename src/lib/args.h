/*
 * args.h -- the request values of RL.ALLOW, RL.PEEK and RL.RESET as a
 * client types them, parsed with the messages the client is told
 * (internal: sluiced's service layer and the Redis module, src/module,
 * both parse with these, so both answer a bad value with the same words).
 *
 * Each parses one value of n bytes at s: 0 and *out, or -1 with the
 * message in err (errlen bytes; *out may be written).  Pure: no state.
 * sl__parse_allow parses the whole of RL.ALLOW's request after its key.
 */
#ifndef SL_ARGS_H
#define SL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

int sl__parse_key(const char *s, size_t n, char *err, size_t errlen);
int sl__parse_limit(const char *s, size_t n, int64_t *out, char *err, size_t errlen);
int sl__parse_window(const char *s, size_t n, int64_t *out, char *err, size_t errlen);
int sl__parse_algo(const char *s, size_t n, sl_algo *out, char *err, size_t errlen);
int sl__parse_cost(const char *s, size_t n, int64_t *out, char *err, size_t errlen);
int sl__parse_burst(const char *s, size_t n, int64_t *out, char *err, size_t errlen);
int sl__parse_precision(const char *s, size_t n, int64_t *out, char *err, size_t errlen);

/* AT t for a request otherwise decided at `now`: refused with the message
 * `refused` unless trusted; a t that is not an integer in
 * (-SL_MAX_TIME_MS, SL_MAX_TIME_MS) is SL_ETIME's message; a t more than
 * max_skew ms ahead of now (max_skew > 0) is refused, naming t, how far
 * ahead, now and the bound.  *out is written only on success. */
int sl__parse_at(int trusted, int64_t max_skew, const char *refused, int64_t now, const char *s,
                 size_t n, int64_t *out, char *err, size_t errlen);

/* A client's argument: len bytes at p, not NUL-terminated. */
typedef struct sl__arg {
    const char *p;
    size_t len;
} sl__arg;

/* RL.ALLOW's (and RL.PEEK's) request after its key: "limit window [ALGO a]
 * [COST c] [BURST b] [PRECISION p] [LOGREJECTED] [AT t]", each option at
 * most once, in any order, names in any case. */
typedef struct sl__allow_req {
    sl_params p;  /* limit, window and the options; the rest SL_PARAMS_INIT's */
    int64_t cost; /* 1 unless COST */
    int has_at;   /* AT t was given: at */
    int64_t at;
} sl__allow_req;

/* How AT's value is read where AT is taken (sluiced: its flags; the
 * module: its load arguments): 0 and *out, or -1 with the message in err.
 * Called only when a request carries AT, with the caller's ctx. */
typedef int (*sl__at_parse)(void *ctx, const char *s, size_t n, int64_t *out, char *err,
                            size_t errlen);

/* Arguments past the key that can matter: the limit, the window, every
 * option with its value (11), and one more, which is then an error or the
 * stop word.  A caller may pass at most this many (copying no more). */
#define SL__ALLOW_ARGS 14

/* Parses a[0..n) as RL.ALLOW's request after its key (above) into *q.  AT
 * is an option when at is not NULL (read by at(at_ctx, ...)).  stop, when
 * not NULL, is a word that ends the request where an option could start
 * (RL.DECIDEALL's REQ).  Returns how many arguments the request took (the
 * stop word's index, or n), or -1 with the client's message in err: the
 * first wrong argument, left to right, as sluiced and the module word it. */
int sl__parse_allow(const sl__arg *a, int n, const char *stop, sl__at_parse at, void *at_ctx,
                    sl__allow_req *q, char *err, size_t errlen);

/* The last request a caller parsed (one connection's, say): its bytes
 * after the key and what sl__parse_allow made of them.  Zero it before
 * its first use.  One entry: bounded by its size. */
#define SL__ALLOW_MEMO_BYTES 48 /* the bytes of the arguments, all together */
typedef struct sl__allow_memo {
    int n; /* arguments remembered; 0: none */
    unsigned char len[SL__ALLOW_ARGS];
    char bytes[SL__ALLOW_MEMO_BYTES]; /* theirs, one after another */
    sl__allow_req req;                /* what they parse to */
} sl__allow_memo;

/* sl__parse_allow(a, n, NULL, at, at_ctx, q, err, errlen) -- the same
 * answer and the same *q or message for every input -- with m remembering
 * the last request parsed without error: when a[0..n) are its bytes, *q is
 * its result and nothing is parsed again.  A request with AT is never
 * remembered (at's answer depends on at_ctx: the clock), nor one whose
 * bytes do not fit; an error leaves m as it was.  Use one m with one `at`. */
int sl__parse_allow_memo(sl__allow_memo *m, const sl__arg *a, int n, sl__at_parse at, void *at_ctx,
                         sl__allow_req *q, char *err, size_t errlen);
/* Its hit alone: m's parsed request when a[0..n) are its bytes, else NULL
 * (nothing parsed: then sl__parse_allow_memo).  Three arguments, no call:
 * the cheap test a caller makes first. */
const sl__allow_req *sl__allow_memo_get(const sl__allow_memo *m, const sl__arg *a, int n);

/* Writes at most cap-1 printable bytes of s into dst for quoting client
 * input in messages (other bytes become '?', a cut is marked "..."). */
const char *sl__quote(char *dst, size_t cap, const char *s, size_t n);

/* The full parsers behind sl_int_parse and sl_duration_parse's fast paths
 * (params.c): the same answers for every input; for tests. */
int sl__int_parse_full(const char *s, size_t len, int64_t max, int64_t *out);
int sl__duration_parse_full(const char *s, size_t len, int64_t *ms);

#endif
