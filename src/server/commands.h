/*
 * commands.h -- what sluiced does with one parsed command: RL.ALLOW,
 * RL.PEEK, RL.RESET, RL.CHECK, RL.RULES, PING, ECHO, QUIT, INFO, COMMAND, HELLO (SPEC section 7).
 * No sockets here: a command comes in as arguments, its reply goes out as
 * RESP bytes appended to a buffer, so every reply is testable without a
 * network (tests/test_commands.c).
 */
#ifndef SL_COMMANDS_H
#define SL_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#include "resp.h"
#include "server.h"

/* A growable output buffer.  Owned by the caller; free with free(b->p). */
typedef struct sl_buf {
    char *p;
    size_t len, cap;
} sl_buf;

/* Appends n bytes; returns 0 or -1 (out of memory: b unchanged). */
int sl_buf_add(sl_buf *b, const void *data, size_t n);

#define SL_CMD_OK 0
#define SL_CMD_CLOSE 1 /* QUIT: send the reply, then close */

/* Executes cmd at wall-clock time now_ms for a client served by worker
 * stats ws, appending the reply to out.  Never fails on bad input: errors
 * are RESP error replies ("-ERR ...").  Returns SL_CMD_OK or SL_CMD_CLOSE. */
int sl_cmd_exec(sl_srv *srv, sl_worker_stats *ws, const sl_resp_cmd *cmd, int64_t now_ms,
                sl_buf *out);

/* Gives back what a worker thread holds (its reference to the rules);
 * call when the thread is done executing commands. */
void sl_cmd_thread_done(void);

#endif
