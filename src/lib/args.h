/*
 * args.h -- the request values of RL.ALLOW, RL.PEEK and RL.RESET as a
 * client types them, parsed with the messages the client is told
 * (internal: sluiced's service layer and the Redis module, src/module,
 * both parse with these, so both answer a bad value with the same words).
 *
 * Each parses one value of n bytes at s: 0 and *out, or -1 with the
 * message in err (errlen bytes; *out may be written).  Pure: no state.
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

/* Writes at most cap-1 printable bytes of s into dst for quoting client
 * input in messages (other bytes become '?', a cut is marked "..."). */
const char *sl__quote(char *dst, size_t cap, const char *s, size_t n);

#endif
