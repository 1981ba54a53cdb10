/*
 * backend_redis.h -- the Redis backend: every decision made by one Lua
 * script (src/backend/redis/sluice.lua, the script ABI of
 * docs/redis-scripts.md) in a Redis server that many sluiced nodes share,
 * so a limit holds across the whole fleet (docs/fleet.md).
 *
 * One hiredis async connection per channel (per worker) and per server, on
 * that worker's libevent loop: one server, the servers of a consistent-hash
 * ring (redis://a,redis://b: a decision goes to the owner of its hash tag,
 * redis/ring.h), or the masters of a Redis Cluster (redis-cluster://: the
 * owner of its slot, redis/slots.h; MOVED and ASK followed).  A request is one EVALSHA (FORGET: one DEL); its answer
 * comes later, from the loop.  Nothing waits longer than the timeout: a
 * request whose reply has not come by then is answered by the failure
 * policy, and the connection is dropped (a stalled Redis is treated as a
 * dead one) and made again with exponential backoff and full jitter.
 * While a channel has no connection its requests go to the policy at once.
 *
 * A local deny cache per channel answers "denied" without asking Redis
 * while a denial Redis gave is known to still hold (docs/fleet.md).
 *
 * Threads: a channel is used by its worker only; the counters
 * (sl_backend_redis_info) may be read from any thread.
 *
 * Only src/backend/ includes this header: the server reaches the backend
 * through backend.h (sl_backend_open, and the ops' info, metrics, state).
 * Its parts are under src/backend/redis/ (redis_int.h lists them).
 */
#ifndef SL_BACKEND_REDIS_H
#define SL_BACKEND_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "redis/ring.h"

#define SL_REDIS_URL_MAX      1024 /* bytes of a --backend URL */
#define SL_REDIS_DEFAULT_DB   0
#define SL_REDIS_DEFAULT_PORT 6379 /* a URL without :port (as redis-cli and Redis URLs) */
#define SL_REDIS_BACKOFF_BASE 100  /* ms: the first reconnect waits up to this */
#define SL_REDIS_BACKOFF_CAP  5000 /* ms: no reconnect waits longer */
#define SL_REDIS_HANDSHAKE_MS 1000 /* AUTH, SELECT and SCRIPT LOAD must answer within */
#define SL_REDIS_DENY_RETRY   1000 /* ms: retry_after of a policy denial */
#define SL_REDIS_CACHE_SLOTS  256  /* deny-cache entries per channel */
#define SL_REDIS_BATCH_MAX    64   /* decisions of one loop turn in one script call (op M) */
/* Requests one connection to Redis may have waiting for it (sent, or in
 * the open batch): while Redis is slow or stopped, a request beyond this
 * is answered by the policy at once, as when Redis is down, so what waits
 * for one server (the commands hiredis buffers, their entries) stays
 * bounded per worker.  Redis answering at 1M/s with 1 ms of latency has
 * ~1,000 of a worker's requests in flight. */
#define SL_REDIS_PENDING_MAX  2048
#define SL_REDIS_REDIRECTS    5    /* Redis Cluster: redirections one request follows */
#define SL_REDIS_MASTERS_MAX  1024 /* Redis Cluster: masters one backend talks to (Redis
                                      Cluster's own advice: ~1,000 nodes at most) */

/* What a request gets when Redis cannot answer (--on-backend-error,
 * backend.h's sl_backend_policy). */
typedef sl_backend_policy sl_redis_policy;
#define SL_REDIS_DENY  SL_BACKEND_DENY  /* denied: allowed 0, limit L, remaining 0, retry and
                                           reset SL_REDIS_DENY_RETRY, delay 0 */
#define SL_REDIS_ALLOW SL_BACKEND_ALLOW /* allowed: allowed 1, limit L, remaining 0, retry 0,
                                           reset 0, delay 0 */
#define SL_REDIS_LOCAL SL_BACKEND_LOCAL /* decided on this node's own store, L and B divided
                                           by the fleet size */

/* A parsed redis://[user:password@]host[:port][/db] (no port: 6379). */
typedef struct sl_redis_url {
    char host[256];               /* a name, an IPv4 address, or an IPv6 address (no brackets) */
    int port;                     /* 1..65535 */
    int db;                       /* 0.. */
    char user[256];               /* "" = none: AUTH password */
    char pass[512];               /* "" = no AUTH */
    char shown[SL_REDIS_URL_MAX]; /* the URL without the password, for messages */
    int cluster;                  /* 1: a seed of redis-cluster:// (db 0) */
} sl_redis_url;

/* Parses s[0..len) as a --backend redis:// URL (user and password may be
 * percent-encoded; without :port, SL_REDIS_DEFAULT_PORT).  Returns 0, or -1
 * with a message "'URL': what" naming the part that is wrong (the scheme --
 * then every form --backend takes --, the host, the port, the db); the URL
 * is quoted without its user:password. */
int sl_redis_url_parse(const char *s, size_t len, sl_redis_url *u, char *err, size_t errlen);

/* Parses s[0..len) as --backend's list of servers: one redis:// URL, or
 * several separated by commas (a ring: docs/fleet.md, "Several Redis
 * servers"); a comma followed by a scheme starts the next URL, so a
 * password may still hold a comma.  Fills out[0..*n) (out: SL_RING_MAX
 * entries, or NULL to check only).  Returns 0, or -1 with a message: one
 * URL's as sl_redis_url_parse's; in a list "element K of N: " and the
 * URL's, or which two elements name the same server (host:port/db), or
 * more than SL_RING_MAX servers.  redis-cluster://[user:password@]host[:port]
 * [,host[:port]...] gives the seeds of a Redis Cluster (docs/fleet.md,
 * "Redis Cluster"), each a URL with .cluster = 1 and db 0; an error names
 * the seed ("seed K: ...").  A redis-sentinel:// URL is checked as
 * sl_redis_sentinel_parse checks it and gives no server here (*n = 0). */
int sl_redis_urls_parse(const char *s, size_t len, sl_redis_url *out, int *n, char *err,
                        size_t errlen);

/* Redis Sentinel (redis-sentinel://): the Sentinels asked, in order, for
 * the master of one name (docs/fleet.md, "Redis Sentinel"). */
#define SL_REDIS_SENTINELS_MAX 16    /* Sentinels one URL may name */
#define SL_REDIS_SENTINEL_PORT 26379 /* a Sentinel without :port (Sentinel's own) */
#define SL_REDIS_MASTER_NAME   256   /* bytes of a master's name, with its NUL */

/* A parsed redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name. */
typedef struct sl_redis_sentinel {
    sl_redis_url master; /* the master's user and password (AUTH), db 0; host "" and
                            port 0: the Sentinels tell where it is */
    char name[SL_REDIS_MASTER_NAME];
    int n; /* Sentinels, 1..SL_REDIS_SENTINELS_MAX */
    struct {
        char host[256]; /* a name, IPv4, or IPv6 without brackets */
        int port;       /* 1..65535 */
    } at[SL_REDIS_SENTINELS_MAX];
    char shown[SL_REDIS_URL_MAX]; /* the URL without the password */
} sl_redis_sentinel;

/* Parses s[0..len) as a redis-sentinel:// URL (the user and password, the
 * master's, may be percent-encoded, as redis://'s; a Sentinel without
 * :port: SL_REDIS_SENTINEL_PORT; the Sentinels themselves are asked
 * without AUTH).  Returns 0, or -1 with a message naming what is wrong:
 * "'URL': what" for the whole URL, "Sentinel K: 'redis-sentinel://host':
 * what" for one Sentinel, which two Sentinels are the same host:port; the
 * password is never quoted.  Touches no socket. */
int sl_redis_sentinel_parse(const char *s, size_t len, sl_redis_sentinel *out, char *err,
                            size_t errlen);

/* The server's identity "host:port/db" ([IPv6]), its place on a ring. */
void sl__redis_url_id(const sl_redis_url *u, char *buf, size_t cap);

/* How to reach Redis and what to do when it cannot answer: backend.h's
 * sl_backend_opts (its store is not used: SL_REDIS_LOCAL makes its own). */
typedef sl_backend_opts sl_redis_opts;

/* Connects to Redis once, synchronously, to check the URL, the password,
 * the db and the script (SCRIPT LOAD); then the backend, whose channels
 * connect on their loops.  NULL with a message in err naming the URL
 * (without its password) and what failed. */
sl_backend *sl_backend_redis_new(const sl_redis_opts *o, char *err, size_t errlen);

/* The backend's state and counters (since start): backend.h's
 * sl_backend_state (nodes: 1, or a ring's, sl_backend_redis_node). */
typedef sl_backend_state sl_redis_info;

/* Fills *out for a Redis backend and returns 0; -1 for another backend. */
int sl_backend_redis_info(sl_backend *b, sl_redis_info *out);

/* One server of the backend (a ring's node). */
typedef struct sl_redis_node_info {
    char url[SL_REDIS_URL_MAX]; /* without the password */
    int up;                     /* 1: every channel has its connection to it */
    int64_t down_since_ms;      /* wall clock when it went down; 0 when up */
    double share;               /* of the ring, 0..1 (1 with one server); a cluster's: of
                                   the slots, in the latest map */
    int slots;                  /* a cluster's master: the slots it serves; -1 otherwise */
} sl_redis_node_info;

/* Fills *out with node i (0..nodes-1, in --backend's order) and returns
 * 0; -1 for another backend or i out of range. */
int sl_backend_redis_node(sl_backend *b, int i, sl_redis_node_info *out);

#endif
