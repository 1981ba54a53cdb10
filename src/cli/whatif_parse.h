/*
 * whatif_parse.h -- the line parsers of `sluicectl replay --rules` (what-if
 * replay of a rules file, docs/replay.md): one input line in, one RL.CHECK
 * request out (a time, a cost and up to SL_WHATIF_MAX_DESC descriptors).
 *
 * Pure functions over bytes: no FILE*, no fd, no allocation, so the unit
 * tests (tests/test_whatif_parse.c) and the fuzzer (tests/fuzz/fuzz_whatif.c)
 * can feed them anything.  Two formats:
 *
 *   lines     T k=v[,k=v...] [k=v[,k=v...] ...] [cost=N]
 *   combined  nginx's default `combined` access log; each line gives the
 *             three descriptors remote_address=ADDR, method=M, path=P
 */
#ifndef SL_WHATIF_PARSE_H
#define SL_WHATIF_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "rules.h"

/* The longest line accepted, in bytes, without its newline (as sluicectl
 * replay's SL_REPLAY_MAX_LINE). */
#define SL_WHATIF_MAX_LINE 65536
/* Descriptors in one request: RL.CHECK's own cap. */
#define SL_WHATIF_MAX_DESC SL_CHECK_MAX_DESC
/* Entries in one descriptor: rules nest at most this deep. */
#define SL_WHATIF_MAX_ENTRIES SL_RULES_MAX_DEPTH

typedef enum sl__whatif_format {
    SL_WHATIF_LINES = 0, /* T k=v[,k=v...] ... [cost=N] */
    SL_WHATIF_COMBINED   /* nginx's combined access log */
} sl__whatif_format;

/* One parsed request, laid out as sl_rules_check takes it: descriptor i is
 * the nent[i] entries desc[i] (desc[i] == ent[i]).  Entries point into the
 * parsed line, or into scratch when the lines format decoded a %XX escape;
 * they are valid while both are.  About 72 KiB: allocate one and reuse it
 * for every line. */
typedef struct sl__whatif_req {
    int64_t t;    /* ms since the epoch */
    int64_t cost; /* 0..SL_MAX_LIMIT; 1 when the line gives none */
    int ndesc;    /* 1..SL_WHATIF_MAX_DESC */
    int nent[SL_WHATIF_MAX_DESC];
    const sl_rule_entry *desc[SL_WHATIF_MAX_DESC];
    sl_rule_entry ent[SL_WHATIF_MAX_DESC][SL_WHATIF_MAX_ENTRIES];
    char scratch[SL_WHATIF_MAX_LINE]; /* decoded keys and values */
} sl__whatif_req;

/* What a parser found. */
#define SL_WHATIF_REQ  1  /* a request: *req is set */
#define SL_WHATIF_SKIP 0  /* a blank line or a comment */
#define SL_WHATIF_BAD  -1 /* malformed: err holds what is wrong */

/*
 * The lines format.  Parses one line of len bytes without its '\n' (a
 * trailing '\r' is ignored).  Fields are separated by spaces or tabs:
 *
 *   T            time in integer ms, as `sluicectl replay`'s T (may be negative,
 *                |T| < SL_MAX_TIME_MS)
 *   k=v,k=v...   one field per descriptor, its entries separated by ','; an
 *                entry is split at its first '=': the key (1 byte at least)
 *                before it, the value (may be empty, may hold more '=')
 *                after it.  In keys and values %XX (two hex digits, either
 *                case) stands for byte XX, so a ',' is written %2C, a '=' in
 *                a key %3D, a space %20, a tab %09, a '%' %25; a '%' not
 *                followed by two hex digits is an error.
 *   cost=N       the last field, when it is one entry whose key is literally
 *                `cost`: the request's cost, 0..SL_MAX_LIMIT (default 1).  A
 *                last descriptor of key cost is written %63ost=...
 *
 * Lines that are blank or whose first non-blank byte is '#' are skipped.
 * Control bytes (below 0x20 but tab, and 0x7f) are errors anywhere; bytes
 * 0x80 and above are ordinary (UTF-8).  At least one descriptor, at most
 * SL_WHATIF_MAX_DESC, each of at most SL_WHATIF_MAX_ENTRIES entries.
 *
 * Returns SL_WHATIF_REQ, SL_WHATIF_SKIP, or SL_WHATIF_BAD with a
 * NUL-terminated message of at most errlen bytes in err (no line number, no
 * "sluicectl:" prefix).  Reads only the len bytes given; allocates nothing.
 */
int sl__whatif_parse_lines(const char *line, size_t len, sl__whatif_req *req, char *err,
                           size_t errlen);

/*
 * nginx's `combined` format:
 *
 *   $remote_addr - $remote_user [$time_local] "$request" $status
 *   $body_bytes_sent "$http_referer" "$http_user_agent"
 *
 * e.g. `192.0.2.1 - - [21/Nov/2026:12:48:07 +0000] "GET /a?id=3 HTTP/1.1"
 * 200 512 "-" "curl/8.0"`.  Gives three descriptors of one entry each, in
 * this order: remote_address=ADDR, method=METHOD, path=PATH, where METHOD is
 * the request's first word and PATH its second word up to (without) the
 * first '?', both byte for byte as logged (no decoding of %XX or of nginx's
 * \xXX escapes).  A request that is not METHOD TARGET [PROTOCOL] (nginx logs
 * "" or "-" for an empty one, escaped bytes for a TLS handshake) gives its
 * first word, perhaps empty, as the method and an empty path.
 *
 * Time: $time_local, dd/Mon/yyyy:HH:MM:SS +hhmm (English month names as
 * nginx writes them), to ms since the epoch with its zone offset applied
 * (seconds resolution: always a multiple of 1000).  Cost 1.
 *
 * Quoted fields end at the first '"' not preceded by a backslash (nginx
 * writes a '"' in them as \x22; other loggers write \").  STATUS must be
 * three digits, BODY_BYTES_SENT digits; anything after the user agent (a
 * space, then fields some configurations append) is ignored.  Fields are
 * separated by single spaces.  Blank lines and lines starting with '#' are
 * skipped; control bytes (tab included: nginx escapes them) are errors.
 *
 * Returns and reports as sl__whatif_parse_lines.
 */
int sl__whatif_parse_combined(const char *line, size_t len, sl__whatif_req *req, char *err,
                              size_t errlen);

/* Either parser, by format. */
int sl__whatif_parse(sl__whatif_format f, const char *line, size_t len, sl__whatif_req *req,
                     char *err, size_t errlen);

/* "lines" or "combined" (len bytes) to *f.  Returns 0, or -1 for any other
 * name. */
int sl__whatif_format_parse(const char *name, size_t len, sl__whatif_format *f);

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (m 1..12, d
 * 1..31; no range check).  Exposed for the tests. */
int64_t sl__whatif_days_from_civil(int64_t y, unsigned m, unsigned d);

#endif
