/*
 * sentinel.h -- reading what Redis Sentinel and a master it names answer
 * (redis-sentinel://, redis/sentinel.c): SENTINEL get-master-addr-by-name's
 * reply and ROLE's.  Each takes a reply hiredis built (through the bounded
 * reader, redis/reply.h) and never reads past what it holds, whatever its
 * type or shape: a Sentinel is a peer like Redis, and what it says is
 * checked before sluiced connects anywhere.
 *
 * No sockets: tests/test_sentinel.c and the fuzz target
 * (tests/fuzz/fuzz_redis_reply.c) feed these replies read from bytes.
 */
#ifndef SL_REDIS_SENTINEL_H
#define SL_REDIS_SENTINEL_H

#include <stddef.h>

#include <hiredis/hiredis.h>

/* Bytes of a master's host as a Sentinel may give it (a name, an IPv4 or
 * an IPv6 address), with its NUL: as sl_redis_url.host. */
#define SL_SENTINEL_HOST 256

/* SENTINEL get-master-addr-by-name's reply x: 1 with the master's host
 * (into host, SL_SENTINEL_HOST bytes) and port (1..65535); 0 when the
 * Sentinel knows no master of that name (a nil reply: RESP2's null array
 * or null string); -1 for anything else -- an error reply, another type,
 * an array of other than two strings, a host empty, too long or holding a
 * character a host cannot, a port not a number 1..65535 -- with what was
 * wrong into why (cap bytes, never empty). */
int sl__sentinel_addr_says(const redisReply *x, char *host, int *port, char *why, size_t cap);

/* ROLE's reply x: 1 when the server says it is a master (an array whose
 * first element is the string "master"); else 0 with what it is into why
 * (cap bytes): "a replica", "a Sentinel", Redis's error, or a reply ROLE
 * cannot give. */
int sl__sentinel_role_says(const redisReply *x, char *why, size_t cap);

#endif
