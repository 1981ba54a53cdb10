/*
 * lease.h -- --lease on: a connection's leases of quota (lease.c).  A node
 * takes n units of a hot key's allowance in one script call (op T: the
 * request that asked, plus up to n - cost more), spends them here without
 * asking Redis, and hands back what is left (op R) when the lease is idle,
 * ends, or its slot is wanted.  docs/fleet.md, "Leases", has the protocol
 * and why the fleet never admits more than the limit.
 */
#ifndef SL_REDIS_LEASE_H
#define SL_REDIS_LEASE_H

#define SL_LEASE_SLOTS    256  /* keys a connection (a worker's to a node) may hold leases on */
#define SL_LEASE_TICK_MS  100  /* the period a key's decisions are counted over */
#define SL_LEASE_HOT      8    /* decisions in a tick that make a key hot here: it leases */
#define SL_LEASE_MIN      8    /* units a first lease asks for */
#define SL_LEASE_MAX      8192 /* the most units one lease asks for */
#define SL_LEASE_IDLE_MS  50   /* a lease not used for this long is handed back */
#define SL_LEASE_EARLY_MS 60   /* token-bucket, gcra: handed back this long before its end,
                                  so that R reaches Redis while the units can go back */
#define SL_LEASE_SWEEP_MS 25   /* how often a connection looks over its leases */
#define SL_LEASE_RECHECK_MS 20 /* a denial the deny cache holds is asked of Redis again
                                  after this long: units other nodes hand back are seen */

struct rchan;
struct pend;
struct sl_breq;
struct redisReply;

typedef struct sl_lease_tab sl_lease_tab;

/* A connection's table and its sweep timer (on the connection's loop);
 * NULL when out of memory. */
sl_lease_tab *sl__redis_lease_new(struct rchan *ch);
/* Hands back what is held (when the connection can still send) and frees. */
void sl__redis_lease_free(struct rchan *ch, sl_lease_tab *t);

/* A DECIDE rq (valid) on ch: -1 when a lease answered it (its callback
 * has run); 0 when it goes to Redis as today; n > 0 when it goes as op T
 * asking for n units in all (its cost included).  *fresh is set to 1 when
 * the deny cache must not answer it (0, or n > 0): a leasing key's denial
 * is asked of Redis again every SL_LEASE_RECHECK_MS, since units leased
 * elsewhere may have come back. */
long long sl__redis_lease_decide(struct rchan *ch, struct sl_breq *rq, int *fresh);

/* Reads op T's reply x to e (9 integers) into e's request and records the
 * lease: 0, or -1 when x is not such a reply. */
int sl__redis_lease_reply(struct rchan *ch, const struct pend *e, const struct redisReply *x);

#endif
