/*
 * reply.h -- bounded reading of Redis's replies: the reply objects hiredis
 * builds for the backend's connections, with limits on what one reply may
 * claim, checked before anything is allocated for it.
 *
 * hiredis 0.14 (Debian's) has no bound of its own on a reply: `*2147483647`
 * makes it allocate 16 GB of element pointers, `$2147483647` makes it
 * buffer input until 2 GB arrived, and a reply that matches no command
 * aborts the process (an assertion in redisProcessCallbacks).  Its reader
 * takes the functions that build reply objects (redisReplyObjectFunctions):
 * these build hiredis's own redisReply (freeReplyObject frees them) and
 * refuse, by returning NULL -- hiredis then fails the read, frees the
 * connection, and every command in flight gets a NULL reply --
 *   - an array claiming more than SL_REDIS_REPLY_ELEMENTS elements, or
 *     taking the reply's objects past SL_REDIS_REPLY_OBJECTS;
 *   - a string longer than SL_REDIS_REPLY_STRING;
 *   - with an async context to watch (sl_redis_rbound.ac), a reply that
 *     begins while no command waits for one: it can only be a reply too
 *     many (sluice sends no SUBSCRIBE or MONITOR), and hiredis would abort.
 * A string's claimed length is known before its bytes arrive, but hiredis
 * asks for the object only once they are all buffered: the owner checks
 * sl_redis_reader_pending after each read (the reader holds at most one
 * unfinished item, so it never legitimately holds more than
 * SL_REDIS_REPLY_PENDING unparsed bytes).
 *
 * And reading a reply into the request it answers (sl__redis_parse_reply).
 *
 * No sockets: a reader is fed bytes (the fuzz target does just that).
 */
#ifndef SL_REDIS_REPLY_H
#define SL_REDIS_REPLY_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/read.h>

#include "backend.h"

/* Elements one array of a reply may claim: CLUSTER SLOTS of a map cut in
 * every slot is the largest sluice reads (16,384 ranges). */
#define SL_REDIS_REPLY_ELEMENTS 16384
/* Objects one reply may hold in all (every element, nested ones too,
 * claimed ones counted as claimed): ~48 bytes each, 12 MB at most. */
#define SL_REDIS_REPLY_OBJECTS (256 * 1024)
/* Bytes of one string (a status, an error, a bulk string): the longest
 * sluice reads are error messages, node ids and addresses. */
#define SL_REDIS_REPLY_STRING (64 * 1024)
/* Unparsed bytes a reader may hold: one string at its bound, its header. */
#define SL_REDIS_REPLY_PENDING (SL_REDIS_REPLY_STRING + 64)

/* A reader's limits and what it found; reader->privdata points at it.
 * Owned by the reader's owner, which outlives the reader. */
typedef struct sl_redis_rbound {
    const redisAsyncContext *ac; /* NULL: do not check replies against commands */
    size_t objects;              /* of the reply being read */
    char why[160];               /* the refusal, for the log; "" = none */
} sl_redis_rbound;

/* Gives reader r the bounded reply functions with b's limits (b->ac may
 * be set later, once the async context is known). */
void sl__redis_reader_bound(redisReader *r, sl_redis_rbound *b);

/* Unparsed bytes r holds: above SL_REDIS_REPLY_PENDING, a reply claims
 * more than any sluice reads (the owner drops the connection). */
size_t sl__redis_reader_pending(const redisReader *r);

/* Frees a reply object of these functions (as freeReplyObject). */
void sl__redis_reply_free(void *reply);

/* Reads six integers (SPEC section 3's fields) of array reply a from
 * element i into out: 0, or -1 when a has not six integers there. */
int sl__redis_six(const redisReply *a, size_t i, sl_result *out);

/* Reads a good (not error) reply to request rq into rq's out fields
 * (module: the module's command answered it, else the script): 0, or -1
 * when it is not what the script ABI / the module's reply says
 * (docs/redis-scripts.md) -- any type, any shape, never read past what
 * the reply holds. */
int sl__redis_parse_reply(sl_breq *rq, const redisReply *x, int module);

#endif
