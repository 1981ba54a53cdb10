/*
 * ratelimit_headers.h -- the one writer of the headers that tell a client
 * its rate limits: RateLimit-Policy, RateLimit (RFC 9651 lists; the
 * draft-ietf-httpapi-ratelimit-headers), X-RateLimit-Limit, -Remaining,
 * -Reset, X-RateLimit-Delay-Ms and Retry-After (docs/http.md, "The headers
 * of a rules decision"; docs/envoy.md, "RateLimit headers").  HTTP
 * (src/proto/http: /v1/allow, /v1/check, forward-auth) and gRPC
 * (src/proto/grpc: ShouldRateLimit's response_headers_to_add) both write
 * them here, so the bytes are the same on every front.
 *
 * The writer fills a caller's buffer, in one of two forms: HTTP/1.1's
 * "Name: value\r\n" lines, copied as they are into an answer's head, or
 * NUL-ended values listed with their names (name[], value[]), which the
 * gRPC front hands to protobuf as HeaderValues.  No allocation, no
 * callback: a header that does not fit in the buffer is left out and
 * `cut` set (a buffer of SL_RLH_CAP bytes always holds them all).
 */
#ifndef SL_RATELIMIT_HEADERS_H
#define SL_RATELIMIT_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "sluice.h"

/* Headers one call writes at the most: RateLimit-Policy, RateLimit, the
 * X-RateLimit-* trio, and Retry-After or X-RateLimit-Delay-Ms. */
#define SL_RLH_MAX_FIELDS 6
/* Bytes a member's name may take as an sf-string (quotes and a NUL
 * included): the member of a longer name is left out of both lists. */
#define SL_RLH_NAME_MAX (3 * 256 + 8)
/* Bytes the list form ever needs (SL_CHECK_MAX_DESC members of the
 * longest name in two lists, and the numbers): no header is ever cut. */
#define SL_RLH_CAP (2 * SL_CHECK_MAX_DESC * (SL_RLH_NAME_MAX + 64) + 256)

/* Where the headers go.  Set up by sl_rlh_init for one writer call
 * (sl_rlh_check or sl_rlh_decision); read len, cut, n, name[] and value[]
 * after it ran. */
typedef struct sl_rlh {
    char *b;    /* the caller's buffer */
    size_t cap; /* its bytes */
    size_t len; /* bytes written */
    int lines;  /* 1: "Name: value\r\n" each; 0: "value\0" each, listed below */
    int cut;    /* a header did not fit: left out */
    int n;      /* headers written */
    const char *name[SL_RLH_MAX_FIELDS];  /* lines == 0: each header's name (static) */
    const char *value[SL_RLH_MAX_FIELDS]; /* ... and its NUL-ended value, in b */
} sl_rlh;

/* Writes into buf (cap bytes, the caller's, not NUL-ended in the lines
 * form) from its start. */
void sl_rlh_init(sl_rlh *o, char *buf, size_t cap, int lines);

/* The headers of a rules decision: RateLimit-Policy and RateLimit with
 * one member per descriptor whose status st[d] (n of them) names a limit
 * the client is held to (not NO_RULE, UNLIMITED, shadow, nor a replaced
 * limit; a limit reported by several descriptors once, at its first, with
 * the numbers of the most restrictive: sl_check_status_tighter), named by
 * the rule's name; then, from the overall six fields x, the X-RateLimit-*
 * trio (Reset: seconds rounded up); on a denial that can ever be allowed
 * Retry-After (seconds rounded up, at least 1; none when retry_after_ms
 * is -1); on an allowed answer with delay_ms > 0 (a leaky bucket's
 * queue) X-RateLimit-Delay-Ms: delay_ms, in ms.  Nothing at all when no
 * limit applied and x is allowed. */
void sl_rlh_check(sl_rlh *o, const sl_check_status *st, int n, const sl_result *x);

/* The headers of one limit named "default" (/v1/allow, /v1/peek): the two
 * lists with that one member -- window_ms in seconds rounded up, at least
 * 1 -- then r's X-RateLimit-*, Retry-After and X-RateLimit-Delay-Ms, as
 * sl_rlh_check writes them. */
void sl_rlh_decision(sl_rlh *o, const sl_result *r, int64_t window_ms);

/* Decimal text of v into dst (room for 21 bytes, NUL-ended); returns its
 * length.  What every number of these headers is written with. */
size_t sl_rlh_itoa(char *dst, long long v);

/* ceil(ms / 1000) for ms >= 0: seconds never shorter than ms. */
long long sl_rlh_ceil_s(int64_t ms);

#endif
