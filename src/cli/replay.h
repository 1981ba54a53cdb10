/*
 * replay.h -- `sluicectl replay`: decide every request of a recorded trace
 * (SPEC section 6).
 *
 * Two parts, usable apart:
 *   - the line parser, a pure function over bytes (no FILE*, no fd), so tests
 *     and fuzzers can feed it anything;
 *   - the command, which reads a file descriptor in large blocks, parses each
 *     line, decides it with sl_allow on one limiter and store (spread over
 *     threads by key, same answers) and writes the six-integer answers in
 *     large blocks.
 */
#ifndef SL_REPLAY_H
#define SL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

/* The longest line accepted, in bytes, without its newline.  A longer line
 * is an error (it cannot be a valid request: a key is at most SL_MAX_KEY). */
#define SL_REPLAY_MAX_LINE 65536

/* One parsed request.  key points into the parsed line (not owned). */
typedef struct sl__replay_req {
    int64_t t;       /* ms */
    const char *key; /* klen bytes, 1..SL_MAX_KEY */
    size_t klen;
    int64_t cost; /* 1 when the line gives none */
} sl__replay_req;

/* What sl__replay_parse_line found. */
#define SL_REPLAY_REQ  1  /* a request: *req is set */
#define SL_REPLAY_SKIP 0  /* a blank line or a comment */
#define SL_REPLAY_BAD  -1 /* malformed: err holds what is wrong */

/*
 * Parses one line of len bytes, without its '\n' (a trailing '\r' is
 * ignored).  Fields are separated by spaces or tabs: `T KEY [COST]`, T an
 * integer (optionally negative) with |T| < SL_MAX_TIME_MS, KEY 1..SL_MAX_KEY
 * bytes of anything but spaces, tabs and control bytes, COST an integer in
 * 0..SL_MAX_LIMIT.  Lines that are blank or whose first non-blank byte is '#'
 * are skipped.  A line longer than SL_REPLAY_MAX_LINE is malformed, whatever
 * it holds.
 *
 * Returns SL_REPLAY_REQ, SL_REPLAY_SKIP, or SL_REPLAY_BAD with a
 * NUL-terminated message of at most errlen bytes in err (no line number, no
 * "sluicectl:" prefix), e.g. "cost 'x' is not an integer".  Reads only the len
 * bytes given; allocates nothing.
 */
int sl__replay_parse_line(const char *line, size_t len, sl__replay_req *req, char *err,
                          size_t errlen);

/* `sluicectl replay ARGS...`: argv[0] is "replay".  Returns the exit status:
 * 0 done, 2 bad option or malformed input line (SPEC section 6), 1 other
 * failure (out of memory, read or write error). */
int sl__replay_main(int argc, char **argv);

/* The usage text of `sluicectl replay`. */
extern const char sl__replay_usage[];

#endif
