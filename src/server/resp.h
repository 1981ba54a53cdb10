/*
 * resp.h -- where request bytes are parsed: a RESP2 command parser.
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

#endif
