/*
 * redis_int.h -- what the files of the Redis backend share
 * (src/backend/backend_redis.c and the .c files of src/backend/redis/; only they
 * include it): the backend, its nodes, a worker's channel and its
 * connections, the requests in flight, the command being built, and each
 * file's functions the others call.  The overview is at the top of
 * backend_redis.c.
 */
#ifndef SL_REDIS_INT_H
#define SL_REDIS_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend_redis.h"
#include "redis/reply.h"
#include "redis/ring.h"
#include "redis/slots.h"
#include "util.h"

/* The script, src/backend/redis/sluice.lua, as bytes in the binary (script.c). */
extern const char sl_redis_script[], sl_redis_script_end[];

#define SHA_LEN 40
#define NFIELDS 7 /* per key: algo L W B P log_rejected cost */

/* the key of the handshake's RL.PEEK: read, never made (sl__redis_probe_key) */
#define PROBE_KEY "sl:m0:{sluice-probe}"

enum { DOWN, CONNECTING, UP };

/* One Redis server of the backend (one, or a ring's, in the list's order). */
typedef struct rnode {
    sl_redis_url url;
    char id[300];    /* "host:port/db": its place on the ring (ring.h) */
    _Atomic int nup; /* channels whose connection to it is UP */
    _Atomic int up;  /* the state last reported (on_state) */
    _Atomic int64_t down_since_ms;
    int module_at_start;   /* its start-up check found the module: new connections' path */
    int hold_at_start;     /* ... and its RL.HOLDCHECK (RL.CHECK's leases): rchan.holdcheck */
    _Atomic int path_told; /* the path last told (on_path): 0 none yet, 1 script, 2 module */
} rnode;

typedef struct redis {
    sl_backend base;
    _Atomic int nnodes;           /* 1..SL_RING_MAX, a cluster's 1..SL_REDIS_MASTERS_MAX */
    rnode *node;                  /* SL_REDIS_MASTERS_MAX; [0, nnodes) in use, each set once */
    sl_ring *ring;                /* which node owns a hash tag; NULL with one node */
    int cluster;                  /* redis-cluster://: node[] are the masters found */
    sl_slotmap *map;              /* cluster: the latest slot map a channel read (lock) */
    sl_redis_url seed;            /* cluster: the first seed (the masters' user, password) */
    char shown[SL_REDIS_URL_MAX]; /* every node's URL without its password, by commas */
    sl_redis_opts o;
    char sha[SHA_LEN + 1]; /* the script's, from SCRIPT LOAD at start (one for every node) */
    sl_store *store;       /* SL_REDIS_LOCAL's own store (the engine's calls) */
    _Atomic int nchan;     /* worker channels (each holds a connection per node) */
    _Atomic int nconn;     /* connections (rchan), every worker's to every node */
    _Atomic int nmod;      /* connections whose path is the module (rchan.module) */
    _Atomic uint64_t errors, timeouts, reconnects, cache_hits, inflight;
    _Atomic uint64_t fallback[3];
    /* --durability replicas:N (durable.c): WAITs sent, those that did not
     * confirm N replicas in time, allowed answers the policy replaced */
    _Atomic uint64_t waits, waits_short, replaced;
    /* --lease on (lease.c): leases taken and ended, units leased, handed
     * back (Redis's count), expired unspent; decisions a lease answered */
    _Atomic uint64_t lease_leases, lease_ended, lease_units, lease_returned, lease_expired,
        lease_served;
    pthread_mutex_t lock; /* guards last_error */
    char last_error[256];
    struct sl_sentinel *sentinel; /* redis-sentinel://: the Sentinels, the master followed
                                     (redis/sentinel.c); NULL otherwise */
} redis;

typedef struct rchan rchan;
typedef struct pend pend;
typedef struct wgroup wgroup;

/* DECIDEs sent (or to be sent) as one op B call. */
typedef struct batch {
    rchan *ch;
    int n;
    int resent;  /* sent again once after NOSCRIPT */
    int64_t now; /* every member's time (client time) */
    int slot;    /* a cluster's: every member's slot (a call is one slot); else -1 */
    pend *m[SL_REDIS_BATCH_MAX];
    struct batch *next; /* the pool */
} batch;

/* One request sent to Redis (or about to be). */
struct pend {
    sl_breq *rq;
    rchan *ch;
    int64_t deadline; /* monotonic ms */
    int resent;       /* sent again once after NOSCRIPT */
    int redirects;    /* cluster: MOVED / ASK / TRYAGAIN followed (SL_REDIS_REDIRECTS) */
    int flushed;      /* a lone DECIDE sent as the open batch (busy counts it) */
    int module;       /* sent as the module's command (its reply's form) */
    uint32_t gen;     /* its cache slot's generation when it was sent */
    int latest;       /* its time was the latest this channel had sent: no key
                         of it can have a later clock, so Redis decides it at
                         that time (the deny cache keeps only such answers) */
    struct pend *prev, *next; /* the pending list; held (durable.c): the group's list */
    wgroup *wg;               /* --durability: the group it was last sent in; NULL: none */
    long long lease_want;     /* DECIDE: > 0, sent as op T asking this many units (lease.c) */
    char key[SL_MAX_KEY];     /* DECIDE, PEEK, FORGET: the key, copied */
    char *keys;               /* DECIDE_ALL: every key, copied (malloc) */
    sl_request *reqs;         /* DECIDE_ALL: rq->reqs pointing at keys (malloc) */
};

/* A denial Redis gave, for the deny cache. */
typedef struct denial {
    size_t klen; /* 0: empty slot */
    sl_params p;
    int64_t cost;
    int64_t t0;       /* the request's time */
    int64_t clock;    /* the latest time a request of the key was decided at
                         here (>= t0): the local engine's key clock, which
                         denials answered from the cache move */
    int64_t retry_at; /* t0 + retry_after_ms */
    int64_t reset_at; /* t0 + reset_after_ms */
    int64_t limit, remaining;
    uint32_t gen; /* bumped by each FORGET of a key of the slot: an answer
                     sent before it is not kept (it outlives klen = 0) */
    char key[SL_MAX_KEY];
} denial;

/* One worker's connection to one node: its own pending list, batch,
 * deny cache, backoff and state. */
struct rchan {
    redis *r;
    rnode *node;
    struct wchan *w; /* the worker's channel this connection is part of */
    struct event_base *loop;
    redisAsyncContext *ac; /* NULL when DOWN */
    int state;
    int closing;              /* being freed: answers are errors */
    int attempt;              /* reconnects since the last UP */
    int was_up;               /* has been UP once: the next connection is a reconnect */
    int module;               /* the path: 1 the module's commands, 0 the script (the
                                 last handshake's finding; the start-up check's at first) */
    int has_cmd;              /* this handshake: COMMAND INFO found RL.CHECKPLAN (1), not
                                 (0), or was refused (-1, why in no_module) */
    int holdcheck;            /* the module has RL.HOLDCHECK: RL.CHECK takes leases on the
                                 module's path (the last handshake's finding, as module) */
    char no_module[320];      /* this handshake: why the module is not the path ("": none) */
    int64_t hs_deadline;      /* CONNECTING: monotonic ms; 0 = none */
    pend *head, *tail, *free; /* sent, oldest first; the pool */
    struct event *timer;      /* the next deadline */
    struct event *retry;      /* the next connection */
    uint64_t rng;             /* splitmix64, for the jitter */
    denial *cache;            /* SL_REDIS_CACHE_SLOTS, or NULL when off */
    int64_t latest_sent;      /* the latest now_ms of a request sent (INT64_MIN: none) */
    sl_check_plan *lplan;     /* SL_REDIS_LOCAL: a CHECK's plan with L and B divided */
    struct cmd *cmd;          /* the command being built (sl__redis_send_pend) */
    batch *open;              /* DECIDEs not sent yet; NULL: none */
    int busy;                 /* batches (M, or a lone D) in flight: open waits for them */
    batch *free_batch;        /* the pool */
    struct event *flush;      /* active while open: sends it at the end of the turn */
    size_t npend;             /* entries on the pending list (SL_REDIS_PENDING_MAX) */
    sl_redis_rbound rb;       /* the connection's reply bounds (redis/reply.h) */
    /* --durability replicas:N (durable.c) */
    wgroup *wopen;            /* this turn's writing commands: their WAIT not sent yet */
    wgroup *whead, *wtail;    /* groups whose WAIT is sent, oldest first */
    wgroup *wfree;            /* the pool */
    struct event *wait_ev;    /* active while wopen: sends its WAIT at the end of the turn */
    struct sl_sentinel_ask *sen; /* redis-sentinel://: this connection's asking; NULL before */
    struct sl_lease_tab *lease;  /* --lease on: its leases (lease.c); NULL when off */
};

/* --durability replicas:N: the commands that may write (DECIDE,
 * DECIDE_ALL, CHECK) one loop turn sent on one connection, and the WAIT N
 * sent after them; their allowed answers are held until its reply. */
enum { W_OPEN, W_SENT, W_DONE };
struct wgroup {
    rchan *ch;
    redisAsyncContext *ac; /* the connection they were sent on */
    int64_t deadline;      /* monotonic ms: its earliest member's */
    int state;             /* W_OPEN: no WAIT yet; W_SENT; W_DONE: ok says how it went */
    int ok;                /* W_DONE: WAIT said N replicas have the writes, in time */
    int refs;              /* members not yet answered, + 1 while its WAIT is unanswered */
    pend *held, *held_tail; /* allowed answers waiting for the WAIT (pend.next) */
    wgroup *next;          /* the channel's W_SENT list, or its pool */
};

/* A worker's channel: a connection per node, node i's at c[i] (a
 * cluster's: made when a master is first needed; NULL before). */
typedef struct wchan {
    sl_bchan base;
    redis *r;
    struct event_base *loop;
    sl_slotmap *map; /* cluster: this worker's slot map (MOVED updates it) */
    int refreshing;  /* cluster: a CLUSTER SLOTS in flight */
    int n;
    rchan *c[];
} wchan;

static inline uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}


#define KEYBUF (SL_MAX_KEY + 8 + sizeof SL_CHECK_POOL_KEY) /* a cluster's pool key fits */

/* A command being built: its arguments point into this buffer (one per
 * channel; hiredis copies a command out before it returns). */
enum {
    CMD_KEYS = SL_REDIS_BATCH_MAX > SL_MAX_BATCH + 1 ? SL_REDIS_BATCH_MAX : SL_MAX_BATCH + 1,
    CMD_ARGS = 8 + CMD_KEYS * (1 + NFIELDS + 5)
};
struct cmd {
    int argc, nkeys;
    const char *argv[CMD_ARGS];
    size_t len[CMD_ARGS];
    char num[CMD_ARGS][24];
    char key[CMD_KEYS][KEYBUF];
    char par[CMD_KEYS][112]; /* op B: a key's 6 parameters as one argument */
};

static inline void cmd_str(struct cmd *c, const char *s, size_t n)
{
    c->argv[c->argc] = s;
    c->len[c->argc++] = n;
}

static inline void cmd_int(struct cmd *c, int64_t v)
{
    c->len[c->argc] = (size_t)snprintf(c->num[c->argc], sizeof c->num[0], "%lld", (long long)v);
    c->argv[c->argc] = c->num[c->argc];
    c->argc++;
}

/* Where sl__redis_submit sends a valid request. */
enum { TO_REDIS, NO_MASTER /* the policy answers */, CROSSSLOT /* refused */ };

extern const sl_backend_ops sl__redis_ops; /* backend_redis.c */

/* backend_redis.c */
void sl__redis_set_last_error(redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
rchan *sl__redis_conn_new(redis *r, rnode *n, struct event_base *loop);
void sl__redis_submit(rchan *ch, sl_breq *rq, int where);

/* url.c */
void sl__redis_url_show(sl_redis_url *u);

/* conn.c */
void sl__redis_go_down(rchan *ch, const char *why);
void sl__redis_on_retry(evutil_socket_t fd, short what, void *arg);
void sl__redis_on_script_load(redisAsyncContext *ac, void *reply, void *privdata);
void sl__redis_probe_key(char *out, size_t cap, const sl_slotmap *map, int i);
int sl__redis_cmdinfo_says(const redisReply *x, char *why, size_t cap);
int sl__redis_probe_says(const redisReply *x, char *why, size_t cap);
/* The path the handshake's probe (RL.PEEK) says for a connection whose
 * Redis has RL.CHECKPLAN or not (has_cmd 1, or 0 / -1): 1 the module's, 0
 * the script's (why says what was seen), -1 neither yet: a cluster state
 * that passes (CLUSTERDOWN, TRYAGAIN, MASTERDOWN, BUSY) -- the connection is
 * made again, never put on the script's path beside the module's. */
int sl__redis_probe_path(int has_cmd, const redisReply *x, char *why, size_t cap);
void sl__redis_tell_path(redis *r, rnode *n, int module, const char *why);
void sl__redis_set_path(rchan *ch, int module);
void sl__redis_connect_now(rchan *ch);
void sl__redis_arm_timer(rchan *ch);
void sl__redis_on_timer(evutil_socket_t fd, short what, void *arg);

/* send.c */
void sl__redis_pend_put(rchan *ch, pend *e);
/* Links e at the tail of ch's pending list, counted in flight (and the
 * reverse, which also clears e's links). */
void sl__redis_link_pend(rchan *ch, pend *e);
void sl__redis_unlink_pend(rchan *ch, pend *e);
int sl__redis_send_pend(rchan *ch, pend *e);
int sl__redis_is_redirect(const char *err);
void sl__redis_flush_open(rchan *ch);
void sl__redis_batch_done(rchan *ch);
void sl__redis_on_flush(evutil_socket_t fd, short what, void *arg);
int sl__redis_queue(rchan *ch, pend *e);

/* fallback.c */
void sl__redis_by_policy(rchan *ch, sl_breq *rq, const char *key, const sl_request *reqs);

/* deny_cache.c */
size_t sl__redis_slot_of(const char *key, size_t klen, int space);
int sl__redis_cache_answer(rchan *ch, sl_breq *rq);
void sl__redis_cache_after(rchan *ch, const pend *e);
void sl__redis_cache_forget(rchan *ch, const char *key, size_t klen);

/* script.c */
size_t sl__redis_key(char *buf, int algo, int space, const char *key, size_t len, size_t t);
void sl__redis_cmd_fields(struct cmd *c, const sl_params *p, int64_t cost);
size_t sl__redis_pool_user_key(char *u, const redis *r, const sl_check_plan *plan, size_t *taglen);
int sl__redis_check_masks(const sl_check_plan *plan, int *lead, int64_t *qmask, int64_t *qall,
                          int64_t *zmask);
void sl__redis_cmd_plan_head(struct cmd *c, const sl_check_plan *plan, int m, int64_t qall,
                             int64_t zmask);
void sl__redis_cmd_plan_item(struct cmd *c, const sl_check_item *t, int64_t qmask);
void sl__redis_cmd_script(struct cmd *c, const redis *r, const pend *e);
void sl__redis_cmd_batch(struct cmd *c, const redis *r, const batch *b);
void sl__redis_cmd_lease_return(struct cmd *c, const redis *r, const char *key, size_t klen,
                                const sl_params *p, int64_t back, int64_t taken, int64_t tag);

/* module_cmd.c */
void sl__redis_cmd_module(struct cmd *c, const redis *r, const pend *e);
void sl__redis_cmd_module_lease_return(struct cmd *c, const char *key, size_t klen,
                                       const sl_params *p, int64_t back, int64_t tag);

/* route.c */
int sl__redis_parse_slots(redis *r, const redisReply *x, const char *asked, sl_slotmap *map);
void sl__redis_cluster_refresh(wchan *w);
int sl__redis_redirect(rchan *ch, pend *e, const char *err);
int sl__redis_request_slot(const redis *r, const sl_breq *rq);
void sl__redis_route(sl_bchan *c, sl_breq *rq);

/* durable.c */
int sl__redis_durable_join(rchan *ch, pend *e);
int sl__redis_durable_take(rchan *ch, pend *e);
void sl__redis_durable_leave(pend *e);
void sl__redis_on_wait_turn(evutil_socket_t fd, short what, void *arg);
int64_t sl__redis_durable_deadline(const rchan *ch);
void sl__redis_durable_expire(rchan *ch, int64_t now);
void sl__redis_durable_free(rchan *ch);

/* sentinel.c (redis-sentinel://) */
struct sl_sentinel *sl__sentinel_new(const sl_redis_sentinel *cfg);
void sl__sentinel_free(struct sl_sentinel *s);
const char *sl__sentinel_shown(const struct sl_sentinel *s);
/* At start: the first Sentinel naming the master gives it, into *master
 * (the URL's user and password, that host and port).  0, or -1 with err
 * naming every Sentinel's failure. */
int sl__sentinel_start(redis *r, sl_redis_url *master, char *err, size_t errlen);
/* sl__redis_connect_now's first step: the master a round of asking
 * found, to connect to now; or NULL while the Sentinels are asked (their
 * answer calls sl__redis_connect_now again; none answering makes ch DOWN). */
const sl_redis_url *sl__sentinel_target(rchan *ch);
/* ch's handshake found its server a master (ROLE): counts a failover when
 * it is at another address than the last confirmed. */
void sl__sentinel_confirmed(rchan *ch);
void sl__sentinel_chan_free(rchan *ch);
void sl__sentinel_info_lines(redis *r, void (*line)(void *arg, const char *name, const char *value),
                             void *arg);
int sl__sentinel_metrics(redis *r, struct evbuffer *out);
/* The master the Sentinels last named and ROLE confirmed, host:port ("" before one). */
void sl__sentinel_master(redis *r, char *out, size_t n);

/* conn.c, for send.c: an error reply err on ch's connection ac saying the
 * server is no longer a writable master (READONLY, LOADING) drops the
 * connection when the master is followed through Sentinel (redis-sentinel://),
 * so that the next asks the Sentinels again; nothing otherwise. */
void sl__redis_demoted(rchan *ch, const redisAsyncContext *ac, const char *err);

/* info.c */
void sl__redis_info_lines(sl_backend *b,
                          void (*line)(void *arg, const char *name, const char *value), void *arg);
int sl__redis_metrics(sl_backend *b, struct evbuffer *out);

#endif
