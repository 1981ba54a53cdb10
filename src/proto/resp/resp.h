/*
 * resp.h -- RESP, both ways: where request bytes are parsed (resp.c) and
 * how replies are written (resp_write.c), in RESP2 or RESP3.
 *
 * It never touches a socket: feed it the bytes a client has sent so far and
 * it answers "here is one complete command", "need more bytes", or "protocol
 * error" (after which the connection cannot be resynchronised and is
 * closed).  Arguments point into the caller's buffer (no copy, no
 * allocation).  Both forms redis-server accepts are parsed: multibulk
 * (`*N\r\n$len\r\n...`) and inline (`PING\r\n`, as telnet sends).
 */
#ifndef SL_RESP_H
#define SL_RESP_H

#include <stddef.h>

#include "sluice.h"

#define SL_RESP_MAX_ARGS 1024          /* arguments in one command */
#define SL_RESP_MAX_BULK (1024 * 1024) /* bytes in one argument */
#define SL_RESP_MAX_INLINE (64 * 1024) /* bytes in one inline command line */

typedef struct sl_resp_arg {
    const char *p; /* into the caller's buffer; not NUL-terminated */
    size_t len;
} sl_resp_arg;

typedef struct sl_resp_cmd {
    int argc;
    sl_resp_arg argv[SL_RESP_MAX_ARGS];
} sl_resp_cmd;

#define SL_RESP_OK 1    /* one command parsed; *used bytes consumed */
#define SL_RESP_AGAIN 0 /* incomplete: call again with more bytes */
#define SL_RESP_ERROR -1 /* protocol error: *err says what; close the connection */

/* Parses the first command in buf[0..len).  On SL_RESP_OK fills cmd (argc
 * may be 0 for an empty inline line, which the caller skips) and sets *used.
 * On SL_RESP_ERROR sets *err to a static message (without "ERR ").
 * max_bulk caps one argument's length (<= SL_RESP_MAX_BULK).
 * Work is O(bytes of the command): bulk payloads are skipped, not scanned. */
int sl_resp_parse(const char *buf, size_t len, size_t max_bulk, sl_resp_cmd *cmd, size_t *used,
                  const char **err);

/* ---- the reply writer (resp_write.c) ------------------------------------ */

struct sl_buf;

/* The protocol versions a connection may speak (HELLO 2 / HELLO 3).  Every
 * connection starts in RESP2.  Requests are the same in both; replies
 * differ only where RESP3 has a type of its own (a map, a set, a null...),
 * so the writers below that take `proto` write that type in RESP3 and what
 * Redis writes for it in RESP2; the others are the same in both. */
#define SL_RESP2 2
#define SL_RESP3 3

/* Each appends one value to b; an allocation failure leaves b as it was
 * (net.c then drops the connection when it notices the lost reply). */
void sl_resp_raw(struct sl_buf *b, const char *s);              /* bytes as given */
void sl_resp_int(struct sl_buf *b, long long v);                /* :v */
void sl_resp_array(struct sl_buf *b, long long n);              /* *n (a header) */
void sl_resp_bulk(struct sl_buf *b, const char *s, size_t n);   /* $n s */
void sl_resp_bulk_str(struct sl_buf *b, const char *s);
void sl_resp_nil(struct sl_buf *b); /* $-1 (RESP2's null) */
/* "-ERR msg"; CR and LF in msg become spaces (an error is one line), and
 * msg is cut at 511 bytes. */
void sl_resp_err(struct sl_buf *b, const char *msg);
/* The six fields of SPEC section 3, as six integers (no array header):
 * the same in both protocols. */
void sl_resp_fields(struct sl_buf *b, const sl_result *r);
/* RL.ALLOW's reply: "*6", then sl_resp_fields's six, written at once (one
 * capacity check, no copy). */
void sl_resp_fields_array(struct sl_buf *b, const sl_result *r);

/* RESP3 types, with their RESP2 form (what Redis sends a RESP2 client):
 *   null          _            $-1 (a null bulk string)
 *   null_array    _            *-1 (where RESP2 has a null array)
 *   map header    %n           *2n (the n pairs follow, key then value)
 *   set header    ~n           *n
 *   verbatim      =len fmt:s   $n s  (fmt: 3 bytes, "txt" or "mkd")
 *   bool          #t / #f      :1 / :0
 *   double        ,d           $n d  (d as printf's %.17g: exact; inf,
 *                                     -inf and nan spelled so)
 * proto is SL_RESP2 or SL_RESP3. */
void sl_resp_null(struct sl_buf *b, int proto);
void sl_resp_null_array(struct sl_buf *b, int proto);
void sl_resp_map(struct sl_buf *b, int proto, long long npairs);
void sl_resp_set(struct sl_buf *b, int proto, long long n);
void sl_resp_verbatim(struct sl_buf *b, int proto, const char *fmt, const char *s, size_t n);
void sl_resp_bool(struct sl_buf *b, int proto, int v);
void sl_resp_double(struct sl_buf *b, int proto, double d);

#endif
