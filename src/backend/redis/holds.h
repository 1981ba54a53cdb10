/*
 * holds.h -- leases and reservations on the Redis backend (holds.c): the
 * checks, the commands and the replies of SL_BOP_ACQUIRE .. SL_BOP_SETTLE.
 * Included by the backend's files only (after redis_int.h).
 */
#ifndef SL_REDIS_HOLDS_H
#define SL_REDIS_HOLDS_H

#include "redis/redis_int.h"

/* 1 for SL_BOP_ACQUIRE, RELEASE, RESERVE, SETTLE. */
int sl__redis_is_hold(int op);

/* The local backend's checks of a hold request, in its order: 0 or the
 * SL_E* code (nothing sent). */
int sl__redis_hold_check(const sl_breq *rq);

/* Appends key "sl:h" kind ":{" key "}" to c's keys and arguments (kind 'h':
 * the hash, 'l': the leases): a hold key of the script's path, the same
 * for RL.ACQUIRE / RL.RELEASE on key and for RL.CHECK's leases on it. */
void sl__redis_hold_key(struct cmd *c, char kind, const char *key, size_t len);

/* Builds e's command: the script's op LA / LR / RV / ST, or on the
 * module's path (module 1) the module's command. */
void sl__redis_cmd_holds(struct cmd *c, const redis *r, const pend *e, int module);

/* RL.HOLDRESERVE / RL.HOLDSETTLE on the module's path (module_cmd.c). */
void sl__redis_cmd_module_hold(struct cmd *c, const redis *r, const pend *e);

/* Reads a good (not error) reply of a hold request into rq: 0, or -1
 * when it is not one the script or the module gives. */
int sl__redis_parse_holds(sl_breq *rq, const redisReply *x);

#endif
