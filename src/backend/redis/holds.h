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

/* The hash tag of a lease key (docs/commands-holds.md, "The lease tag"): the
 * length of its first bytes that are the tag.  For a key of RL.CHECK's
 * lease form -- "<domain>|...|conc", or the long form "...|conc#~" and
 * 64 hex digits (check.h, SL_CHECK_LEASE_SUFFIX) with the domain whole
 * before the suffix -- the domain as the domain's counters carry it
 * (check.c: as many bytes as the domain has unescaped, at most
 * SL_RULES_KEY_PREFIX: the bytes before the first '|' less two for each
 * '%'), so a check's leases share its counters' slot and ring member;
 * for any other key, len (the whole key).  O(len), no allocation. */
size_t sl__redis_lease_tag(const char *key, size_t len);

/* Writes hold key "sl:h" kind ":{" key[0..tag) "}" key[tag..len) into buf
 * (KEYBUF bytes) and returns its length, len + 8.  One name for one
 * (kind, key): the names of two different keys differ whatever '{' or
 * '}' they hold, for tag = len (the name ends in '}') and for tag =
 * sl__redis_lease_tag() < len (it ends in the suffix, and the tag is a
 * function of the key's bytes before its first '|', which a '}' moved
 * across does not change: docs/commands-holds.md). */
size_t sl__redis_hold_name(char *buf, char kind, const char *key, size_t len, size_t tag);

/* Appends a lease's hold key of key (kind 'h': the hash, 'l': the leases)
 * to c's keys and arguments: sl__redis_hold_name with the lease tag, the
 * same for RL.ACQUIRE / RL.RELEASE on key and for RL.CHECK's leases on
 * it (a reservation's keys carry the whole key: holds.c). */
void sl__redis_hold_key(struct cmd *c, char kind, const char *key, size_t len);

/* Appends the two keys of RL.CHECK's lease j of plan (its hh, then its
 * hl): the one place both paths (the script's op C, the module's
 * RL.HOLDCHECK) name them. */
void sl__redis_check_lease_keys(struct cmd *c, const sl_check_plan *plan, int j);

/* Builds e's command: the script's op LA / LR / RV / ST, or on the
 * module's path (module 1) the module's command. */
void sl__redis_cmd_holds(struct cmd *c, const redis *r, const pend *e, int module);

/* RL.HOLDRESERVE / RL.HOLDSETTLE on the module's path (module_cmd.c). */
void sl__redis_cmd_module_hold(struct cmd *c, const redis *r, const pend *e);

/* Reads a good (not error) reply of a hold request into rq: 0, or -1
 * when it is not one the script or the module gives. */
int sl__redis_parse_holds(sl_breq *rq, const redisReply *x);

#endif
