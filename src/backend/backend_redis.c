/*
 * backend_redis.c -- the Redis backend (backend_redis.h).
 *
 * A channel is one hiredis async connection on its worker's event_base,
 * in one of three states: DOWN (no connection; a timer will make one),
 * CONNECTING (made; AUTH, SELECT and SCRIPT LOAD sent, not yet answered)
 * and UP.  Requests are sent in CONNECTING too: hiredis queues them behind
 * the handshake, and they are answered in order.
 *
 * Every request sent is one pooled entry (pend) on the channel's list,
 * oldest first, with its deadline; Redis answers a connection's commands
 * in order, so the oldest entry's deadline is the next to pass, and one
 * timer per channel watches it (and the handshake's).  When a deadline
 * passes, the connection is freed: hiredis then calls every callback still
 * pending with a NULL reply, and each of those requests is answered by the
 * policy -- so nothing waits past its deadline, and no late reply is ever
 * read.  Then the channel is DOWN and reconnects after
 * random(0, min(SL_REDIS_BACKOFF_CAP, SL_REDIS_BACKOFF_BASE * 2^n)) ms.
 *
 * Batching: the DECIDEs a channel gets during one loop turn are queued
 * (the open batch) and sent as ONE script call (op B: op M's n decisions
 * in order, two arguments a key) when the turn's other callbacks have run:
 * the first of a turn makes the channel's flush event active, and libevent
 * runs an event made active during a turn after those already active, in
 * the same turn -- so a lone request on an idle channel is sent in its own
 * turn, as a plain D.  While a batch is in flight (busy), the next ones
 * wait in the open batch for its answer, so a busy channel sends few,
 * large batches; a full batch (SL_REDIS_BATCH_MAX) goes at once.  Every
 * other request sends the open batch first, so Redis runs a connection's
 * commands in the order they were submitted.  With client time the
 * members of a batch share one `now`: a request with another time sends
 * the open batch and opens a new one.  Each member keeps its own pend
 * (deadline, policy, deny cache), answered in order from the reply's
 * elements.  hiredis writes whatever a turn appended in one write.
 *
 * Several servers: a worker's channel (wchan) holds one such connection
 * (rchan) per server, each with everything above of its own; a request
 * goes to one of them -- with a ring, the owner of its hash tag
 * (redis/ring.c); in a Redis Cluster, the master of its slot in the
 * worker's map (redis/slots.c), read from CLUSTER SLOTS at start and again
 * after a MOVED, a CLUSTERDOWN or a lost master.  A cluster's batches hold
 * one slot's DECIDEs (a call's keys may not span slots), and requests
 * follow MOVED / ASK / TRYAGAIN up to SL_REDIS_REDIRECTS times within
 * their deadline (redirect; a batch's members each alone).
 *
 * RL.CHECK is one script call too (op C): the plan's counters and flags
 * in, the outcome out (cmd_check, redis/reply.c's sl__redis_parse_reply).
 *
 * On a Redis with the sluice module loaded (docs/module.md) a channel
 * sends the module's commands instead (cmd_module: RL.ALLOW, RL.PEEK,
 * RL.DECIDEALL, RL.CHECKPLAN, RL.RESET on keys "sl:m" space ":{" tag "}"
 * rest, apart from the script's), one RL.ALLOW per DECIDE with no batch.
 * The path is found at each handshake (COMMAND INFO RL.CHECKPLAN, then a
 * probe RL.PEEK: on_cmdinfo, on_probe) and kept in rchan.module; a
 * request remembers the path it was sent on (pend.module) to read its
 * reply.
 *
 * The deny cache (one fixed table per channel, direct-mapped by the key):
 * a denial (key, parameters, cost c, retry_after d) answered at the
 * request's time t0 is kept as absolute times, and a later request for the
 * same key, parameters and cost c (in a fixed window, any cost from c to
 * L) at t < t0 + d is denied here, with
 * retry_after and reset_after counted down from those times; a request on
 * the key with other parameters or another cost goes to Redis and, being
 * a decision that may charge, drops the entry.  (A larger cost is denied
 * too, but its own retry_after is Redis's to say -- except in a fixed
 * window, where every cost up to L gets the same answer.)  A denial answered
 * here does not move the key's clock in Redis: with client time running
 * backwards a later request may be decided at an earlier time than the
 * local engine would, which never lets more through (docs/fleet.md).  t0 is
 * the request's time (the caller's with --trust-client-time, else this
 * node's clock when it sent the request, which is before Redis decided: so
 * an entry ends no later than the denial it copies).
 */
#include <ctype.h>
#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "backend_local.h"
#include "backend_redis.h"
#include "redis/reply.h"
#include "redis/ring.h"
#include "redis/slots.h"
#include "util.h"

/* The script, src/backend/redis/sluice.lua, as bytes in the binary (the
 * Makefile makes this object depend on it; the path is the source tree's,
 * where make runs). */
__asm__(".section .rodata\n"
        ".global sl_redis_script\n"
        ".type sl_redis_script, @object\n"
        ".balign 16\n"
        "sl_redis_script:\n"
        ".incbin \"src/backend/redis/sluice.lua\"\n"
        ".global sl_redis_script_end\n"
        "sl_redis_script_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char sl_redis_script[], sl_redis_script_end[];

#define SHA_LEN 40
#define NFIELDS 7 /* per key: algo L W B P log_rejected cost */

/* the key of the handshake's RL.PEEK: read, never made (probe_key) */
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
    pthread_mutex_t lock; /* guards last_error */
    char last_error[256];
} redis;

typedef struct rchan rchan;
typedef struct pend pend;

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
    struct pend *prev, *next;
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
    char no_module[320];      /* this handshake: why the module is not the path ("": none) */
    int64_t hs_deadline;      /* CONNECTING: monotonic ms; 0 = none */
    pend *head, *tail, *free; /* sent, oldest first; the pool */
    struct event *timer;      /* the next deadline */
    struct event *retry;      /* the next connection */
    uint64_t rng;             /* splitmix64, for the jitter */
    denial *cache;            /* SL_REDIS_CACHE_SLOTS, or NULL when off */
    int64_t latest_sent;      /* the latest now_ms of a request sent (INT64_MIN: none) */
    sl_check_plan *lplan;     /* SL_REDIS_LOCAL: a CHECK's plan with L and B divided */
    struct cmd *cmd;          /* the command being built (send_pend) */
    batch *open;              /* DECIDEs not sent yet; NULL: none */
    int busy;                 /* batches (M, or a lone D) in flight: open waits for them */
    batch *free_batch;        /* the pool */
    struct event *flush;      /* active while open: sends it at the end of the turn */
    size_t npend;             /* entries on the pending list (SL_REDIS_PENDING_MAX) */
    sl_redis_rbound rb;       /* the connection's reply bounds (redis/reply.h) */
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

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void set_last_error(redis *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_last_error(redis *r, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&r->lock);
    va_start(ap, fmt);
    vsnprintf(r->last_error, sizeof r->last_error, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&r->lock);
}

/* ---- the URL ------------------------------------------------------------- */

static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) into out (cap bytes, NUL-terminated); -1 when
 * it does not fit or a %XX is malformed. */
static int unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n) return -1;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0) return -1;
            c = h * 16 + l;
            i += 2;
        }
        if (k + 1 >= cap) return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return 0;
}

static int url_fail(char *err, size_t errlen, const char *s, size_t len, const char *what)
{
    /* the URL is quoted without its user:password part */
    const char *at = memchr(s, '@', len);
    if (len > 8 && memcmp(s, "redis://", 8) == 0 && at != NULL)
        snprintf(err, errlen, "'redis://***@%.*s': %s",
                 (int)(len - (size_t)(at + 1 - s) > 200 ? 200 : len - (size_t)(at + 1 - s)), at + 1,
                 what);
    else
        snprintf(err, errlen, "'%.*s': %s", (int)(len > 200 ? 200 : len), s, what);
    return -1;
}

/* u->shown: u without its password. */
static void url_show(sl_redis_url *u)
{
    int bracket = strchr(u->host, ':') != NULL;
    snprintf(u->shown, sizeof u->shown, "redis://%s%s%s%s%s:%d/%d", u->user,
             u->pass[0] ? ":***@" : "", bracket ? "[" : "", u->host, bracket ? "]" : "", u->port,
             u->db);
}

/* Every form --backend takes, for the message of a value without one of
 * their schemes (config.c's help says the same). */
#define BACKEND_FORMS                                                                              \
    "use local, redis://[user:password@]host[:port][/db], several redis:// URLs separated by "     \
    "commas (a ring: redis://a:6379,redis://b:6379), or "                                          \
    "redis-cluster://[user:password@]host[:port][,host[:port]...] (no :port: 6379)"

/* The message of s[0..len), printable, that starts with no scheme --backend
 * takes: the scheme it has (up to "://"), or that it has none, and every
 * form.  The value is quoted short (its first 80 bytes) so that the whole
 * list fits the callers' buffers; with '@' in it only its scheme is shown. */
static int scheme_fail(char *err, size_t errlen, const char *s, size_t len)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 3 <= len && i <= 32 && sep == NULL; i++)
        if (memcmp(s + i, "://", 3) == 0) sep = s + i + 3;
    int shown =
        memchr(s, '@', len) != NULL ? (sep ? (int)(sep - s) : 0) : (int)(len > 80 ? 80 : len);
    const char *more = (size_t)shown < len ? "..." : "";
    if (sep != NULL)
        snprintf(err, errlen, "'%.*s%s': unknown scheme '%.*s': " BACKEND_FORMS, shown, s, more,
                 (int)(sep - s), s);
    else
        snprintf(err, errlen, "'%.*s%s': no scheme: " BACKEND_FORMS, shown, s, more);
    return -1;
}

int sl_redis_url_parse(const char *s, size_t len, sl_redis_url *u, char *err, size_t errlen)
{
    static const char scheme[] = "redis://";
    memset(u, 0, sizeof *u);
    if (len >= SL_REDIS_URL_MAX) return url_fail(err, errlen, s, len, "longer than 1023 bytes");
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)s[i]))
            return url_fail(err, errlen, s, len, "a space or control byte in the URL");
    if (len >= 9 && strncasecmp(s, "rediss://", 9) == 0)
        return url_fail(err, errlen, s, len,
                        "TLS to Redis (rediss://) is not supported: use redis:// (docs/fleet.md)");
    if (len < sizeof scheme - 1 || strncasecmp(s, scheme, sizeof scheme - 1) != 0)
        return scheme_fail(err, errlen, s, len);
    const char *p = s + sizeof scheme - 1, *end = s + len;
    /* user:password@: up to the last '@' (a password may hold one, escaped or not) */
    const char *at = NULL;
    for (const char *q = p; q < end && *q != '/'; q++)
        if (*q == '@') at = q;
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL)
            return url_fail(err, errlen, s, len,
                            "the part before '@' must be user:password (or :password)");
        if (unescape(p, (size_t)(colon - p), u->user, sizeof u->user) != 0)
            return url_fail(err, errlen, s, len, "malformed or too long user name");
        if (unescape(colon + 1, (size_t)(at - colon - 1), u->pass, sizeof u->pass) != 0)
            return url_fail(err, errlen, s, len, "malformed or too long password");
        if (u->pass[0] == '\0') return url_fail(err, errlen, s, len, "empty password");
        p = at + 1;
    }
    /* host: a name or IPv4 address, or [IPv6] */
    const char *hs = p, *he;
    if (p < end && *p == '[') {
        he = memchr(p, ']', (size_t)(end - p));
        if (he == NULL) return url_fail(err, errlen, s, len, "'[' of an IPv6 host without ']'");
        hs = p + 1;
        p = he + 1;
    } else {
        while (p < end && *p != ':' && *p != '/') p++;
        he = p;
    }
    if (he == hs) return url_fail(err, errlen, s, len, "missing host");
    if ((size_t)(he - hs) >= sizeof u->host) return url_fail(err, errlen, s, len, "host too long");
    for (const char *q = hs; q < he; q++)
        if (!(isalnum((unsigned char)*q) || *q == '.' || *q == '-' || *q == '_' || *q == ':'))
            return url_fail(err, errlen, s, len, "the host holds a character a host cannot");
    memcpy(u->host, hs, (size_t)(he - hs));
    /* [:port], else Redis's own */
    u->port = SL_REDIS_DEFAULT_PORT;
    if (p < end && *p != ':' && *p != '/')
        return url_fail(err, errlen, s, len, "expected :port or /db after the host");
    if (p < end && *p == ':') {
        const char *ps = ++p;
        while (p < end && *p != '/') p++;
        int64_t port;
        if (sl_int_parse(ps, (size_t)(p - ps), 65535, &port) != 0 || port < 1)
            return url_fail(err, errlen, s, len, "the port must be a number 1..65535");
        u->port = (int)port;
    }
    /* [/db] */
    u->db = SL_REDIS_DEFAULT_DB;
    if (p < end) {
        const char *ds = ++p;
        int64_t db;
        if (p == end) return url_fail(err, errlen, s, len, "missing db number after '/'");
        if (sl_int_parse(ds, (size_t)(end - ds), 2147483647, &db) != 0)
            return url_fail(err, errlen, s, len, "the db must be a number 0..2147483647");
        u->db = (int)db;
    }
    url_show(u);
    return 0;
}

void sl__redis_url_id(const sl_redis_url *u, char *buf, size_t cap)
{
    int bracket = strchr(u->host, ':') != NULL;
    snprintf(buf, cap, "%s%s%s:%d/%d", bracket ? "[" : "", u->host, bracket ? "]" : "", u->port,
             u->db);
}

/* Where the element at s[i..len) ends: at the next ',' followed by a
 * scheme (redis:// or rediss://), else at len. */
static size_t element_end(const char *s, size_t len, size_t i)
{
    for (; i < len; i++)
        if (s[i] == ',' && ((len - i - 1 >= 8 && strncasecmp(s + i + 1, "redis://", 8) == 0) ||
                            (len - i - 1 >= 9 && strncasecmp(s + i + 1, "rediss://", 9) == 0)))
            return i;
    return len;
}

/* --backend redis-cluster://[user:password@]host[:port][,host[:port]...]:
 * the seeds, each as a redis:// URL (db 0; no port: 6379) with the one
 * user:password. */
static int cluster_parse(const char *s, size_t len, sl_redis_url *out, int *n, char *err,
                         size_t errlen)
{
    static const char scheme[] = "redis-cluster://";
    const size_t sl = sizeof scheme - 1;
    const char *p = s + sl, *end = s + len, *at = NULL;
    if (len >= SL_REDIS_URL_MAX) {
        snprintf(err, errlen, "'%.200s...': longer than 1023 bytes", s);
        return -1;
    }
    for (const char *q = p; q < end; q++) /* user:password@: up to the last '@' */
        if (*q == '@') at = q;
    const char *hosts = at != NULL ? at + 1 : p;
    const char *shown = at != NULL ? "redis-cluster://***@" : "redis-cluster://";
    if (hosts == end) {
        snprintf(err, errlen,
                 "'%s%.200s': expected redis-cluster://[user:password@]host[:port]"
                 "[,host[:port]...]",
                 shown, hosts);
        return -1;
    }
    int count = 0;
    for (const char *h = hosts; h <= end;) {
        const char *e = memchr(h, ',', (size_t)(end - h));
        if (e == NULL) e = end;
        if (count == SL_RING_MAX) {
            snprintf(err, errlen, "'%s...': more than %d seeds", shown, SL_RING_MAX);
            return -1;
        }
        char url[SL_REDIS_URL_MAX + 16], why[400];
        int k = snprintf(url, sizeof url, "redis://%.*s%.*s", at != NULL ? (int)(at - p + 1) : 0, p,
                         (int)(e - h), h);
        sl_redis_url one, *u = out != NULL ? &out[count] : &one;
        const char *what = NULL;
        if (k < 0 || (size_t)k >= sizeof url)
            what = "longer than 1023 bytes";
        else if (memchr(h, '/', (size_t)(e - h)) != NULL)
            what = "Redis Cluster has one db: no /db";
        else if (sl_redis_url_parse(url, (size_t)k, u, why, sizeof why) != 0)
            what = strstr(why, "': ") != NULL ? strstr(why, "': ") + 3 : why;
        if (what != NULL) {
            snprintf(err, errlen, "seed %d: '%s%.*s': %s", count + 1, shown, (int)(e - h), h, what);
            return -1;
        }
        u->cluster = 1;
        count++;
        h = e + 1;
        if (e == end) break;
    }
    *n = count;
    return 0;
}

int sl_redis_urls_parse(const char *s, size_t len, sl_redis_url *out, int *n, char *err,
                        size_t errlen)
{
    size_t start[SL_RING_MAX + 1], end[SL_RING_MAX + 1];
    int count = 0;
    if (len >= 16 && strncasecmp(s, "redis-cluster://", 16) == 0)
        return cluster_parse(s, len, out, n, err, errlen);
    for (size_t i = 0;; i = end[count - 1] + 1) {
        if (count == SL_RING_MAX) {
            snprintf(err, errlen, "'%.200s...': more than %d servers", s, SL_RING_MAX);
            return -1;
        }
        start[count] = i;
        end[count] = element_end(s, len, i);
        count++;
        if (end[count - 1] == len) break;
    }
    static const char hint[] = " (the servers of a ring are whole URLs separated by commas: "
                               "redis://a:6379,redis://b:6379)";
    char why[512], id[SL_RING_MAX][300];
    if (count == 1) { /* one server: its own message, as ever */
        sl_redis_url one, *u = out != NULL ? &out[0] : &one;
        if (sl_redis_url_parse(s, len, u, why, sizeof why) != 0) {
            /* a wrong scheme's message names the list's form already */
            int list =
                memchr(s, ',', len) != NULL && len >= 8 && strncasecmp(s, "redis://", 8) == 0;
            snprintf(err, errlen, "%s%s", why, list ? hint : "");
            return -1;
        }
        *n = 1;
        return 0;
    }
    for (int k = 0; k < count; k++) {
        const char *e = s + start[k];
        size_t elen = end[k] - start[k];
        sl_redis_url one, *u = out != NULL ? &out[k] : &one;
        if (sl_redis_url_parse(e, elen, u, why, sizeof why) != 0) {
            snprintf(err, errlen, "element %d of %d: %s%s", k + 1, count, why,
                     memchr(e, ',', elen) != NULL ? hint : "");
            return -1;
        }
        sl__redis_url_id(u, id[k], sizeof id[k]);
        for (int j = 0; j < k; j++)
            if (strcmp(id[j], id[k]) == 0) {
                snprintf(err, errlen, "elements %d and %d of %d are the same server %s", j + 1,
                         k + 1, count, id[k]);
                return -1;
            }
    }
    *n = count;
    return 0;
}

int sl_backend_url_check(const char *s, size_t len, char *err, size_t errlen)
{
    int n;
    if (len == 5 && memcmp(s, "local", 5) == 0) return 0;
    return sl_redis_urls_parse(s, len, NULL, &n, err, errlen);
}

void sl_backend_url_shown(const char *url, char *buf, size_t cap)
{
    char why[600];
    int n;
    if (strcmp(url, "local") == 0) {
        snprintf(buf, cap, "local");
        return;
    }
    sl_redis_url *u = malloc(SL_RING_MAX * sizeof *u); /* too large for a stack */
    if (u == NULL || sl_redis_urls_parse(url, strlen(url), u, &n, why, sizeof why) != 0) {
        snprintf(buf, cap, "%s", u == NULL ? "(out of memory)" : url);
        free(u);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    if (u[0].cluster) /* the seeds: redis-cluster://[user:***@]host:port,... */
        used = (size_t)snprintf(buf, cap, "redis-cluster://%s%s", u[0].user,
                                u[0].pass[0] ? ":***@" : "");
    for (int i = 0; i < n && used < cap; i++) {
        const char *hp = strrchr(u[i].shown, '@'); /* host:port/0 of a seed */
        hp = hp != NULL ? hp + 1 : u[i].shown + 8;
        if (u[i].cluster)
            used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", i ? "," : "",
                                     (int)(strrchr(hp, '/') - hp), hp);
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", u[i].shown);
    }
    free(u);
}

/* ---- state --------------------------------------------------------------- */

/* Reports a change of a node's state (on_state, with the node's URL):
 * down when a channel loses its connection to it, up when every channel
 * has one again. */
static void report(rchan *ch, int going_up, const char *what)
{
    redis *r = ch->r;
    rnode *n = ch->node;
    if (going_up && atomic_load(&n->nup) < atomic_load(&r->nchan)) return;
    if (atomic_exchange(&n->up, going_up) == going_up) return;
    atomic_store(&n->down_since_ms, going_up ? 0 : sl__wall_ms());
    if (r->o.on_state != NULL) r->o.on_state(r->o.state_arg, going_up, n->url.shown, what);
}

static void arm_timer(rchan *ch);
static void connect_now(rchan *ch);
static void drop(rchan *ch, const char *why);
static void cluster_refresh(struct wchan *w);

/* The channel has no connection: the next one after the backoff. */
static void go_down(rchan *ch, const char *why)
{
    redis *r = ch->r;
    if (ch->state == UP) atomic_fetch_sub(&ch->node->nup, 1);
    ch->state = DOWN;
    ch->ac = NULL;
    ch->hs_deadline = 0;
    if (ch->closing) return;
    if (r->nnodes > 1)
        set_last_error(r, "%s: %s", ch->node->url.shown, why);
    else
        set_last_error(r, "%s", why);
    report(ch, 0, why);
    if (r->cluster) cluster_refresh(ch->w); /* a master lost: the topology may have changed */
    int n = ch->attempt < 16 ? ch->attempt : 16;
    int64_t cap = (int64_t)SL_REDIS_BACKOFF_BASE << n;
    if (cap > SL_REDIS_BACKOFF_CAP) cap = SL_REDIS_BACKOFF_CAP;
    int64_t ms = (int64_t)(rnd(&ch->rng) % (uint64_t)(cap + 1));
    ch->attempt++;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ch->retry, &tv);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    connect_now(arg);
}

/* ---- answers ------------------------------------------------------------- */

static void pend_put(rchan *ch, pend *e)
{
    free(e->keys);
    free(e->reqs);
    e->keys = NULL;
    e->reqs = NULL;
    e->rq = NULL;
    e->next = ch->free;
    ch->free = e;
}

static void unlink_pend(rchan *ch, pend *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        ch->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        ch->tail = e->prev;
    e->prev = e->next = NULL;
    ch->npend--;
    atomic_fetch_sub(&ch->r->inflight, 1);
}

static sl_params scaled(const redis *r, const sl_params *p)
{
    sl_params q = *p;
    int64_t n = r->o.fleet_size;
    q.limit = p->limit / n > 0 ? p->limit / n : 1;
    if (p->burst != 0) q.burst = p->burst / n > 0 ? p->burst / n : 1;
    return q;
}

static void policy_result(const redis *r, const sl_params *p, sl_result *out)
{
    memset(out, 0, sizeof *out);
    out->limit = p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA || p->algo == SL_LEAKY_BUCKET
                     ? (p->burst ? p->burst : p->limit)
                     : p->limit;
    if (r->o.policy == SL_REDIS_ALLOW) {
        out->allowed = 1;
    } else {
        out->retry_after_ms = SL_REDIS_DENY_RETRY;
        out->reset_after_ms = SL_REDIS_DENY_RETRY;
    }
}

/* RL.CHECK by the policy: the whole request (its plan's every counter). */
static void check_by_policy(rchan *ch, sl_breq *rq)
{
    redis *r = ch->r;
    const sl_check_plan *plan = rq->plan;
    sl_check_outcome *o = rq->outcome;
    if (r->o.policy == SL_REDIS_LOCAL) {
        /* the plan with every L and B divided by the fleet size */
        if (ch->lplan == NULL && (ch->lplan = malloc(sizeof *ch->lplan)) == NULL) {
            sl__breq_fail(rq, SL_ENOMEM, "out of memory");
            return;
        }
        *ch->lplan = *plan;
        for (int k = 0; k < plan->nitems; k++) ch->lplan->items[k].p = scaled(r, &plan->items[k].p);
        if (plan->has_pool) ch->lplan->pool = scaled(r, &plan->pool);
        int rc = sl__local_check_exec(r->store, ch->lplan, o, rq->err, sizeof rq->err);
        rq->rc = rc < 0 ? rc : 0;
        rq->cb(rq);
        return;
    }
    memset(o, 0, sizeof *o);
    o->allowed = r->o.policy == SL_REDIS_ALLOW;
    for (int k = 0; k < plan->nitems; k++) policy_result(r, &plan->items[k].p, &o->res[k]);
    rq->cb(rq);
}

/* Answers rq by the policy (Redis could not): rq's key is key (a copy, or
 * the caller's during submit), reqs DECIDE_ALL's requests. */
static void by_policy(rchan *ch, sl_breq *rq, const char *key, const sl_request *reqs)
{
    redis *r = ch->r;
    rq->rc = 0;
    rq->err[0] = '\0';
    if (rq->op == SL_BOP_FORGET) {
        sl__breq_fail(rq, SL_EINVAL, "the Redis backend %s is unreachable: nothing was reset",
                      ch->node->url.shown);
        return;
    }
    atomic_fetch_add(&r->fallback[r->o.policy], 1);
    if (rq->op == SL_BOP_CHECK) {
        check_by_policy(ch, rq);
        return;
    }
    if (r->o.policy == SL_REDIS_LOCAL) {
        sl_params p;
        sl_params ps[SL_MAX_BATCH];
        sl_request lr[SL_MAX_BATCH];
        int rc;
        switch (rq->op) {
        case SL_BOP_DECIDE:
        case SL_BOP_PEEK:
            p = scaled(r, rq->params);
            rc = rq->op == SL_BOP_DECIDE
                     ? sl_decide(r->store, &p, key, rq->keylen, rq->now_ms, rq->cost, &rq->result)
                     : sl_peek(r->store, &p, key, rq->keylen, rq->now_ms, rq->cost, &rq->result);
            break;
        default: /* DECIDE_ALL */
            for (size_t i = 0; i < rq->nreqs; i++) {
                ps[i] = scaled(r, reqs[i].params);
                lr[i] = reqs[i];
                lr[i].params = &ps[i];
            }
            rc = sl_decide_all(r->store, lr, rq->nreqs, rq->now_ms, rq->results, &rq->all_allowed);
            break;
        }
        rq->rc = rc < 0 ? rc : 0;
        rq->cb(rq);
        return;
    }
    if (rq->op == SL_BOP_DECIDE_ALL) {
        for (size_t i = 0; i < rq->nreqs; i++) policy_result(r, reqs[i].params, &rq->results[i]);
        rq->all_allowed = r->o.policy == SL_REDIS_ALLOW;
    } else {
        policy_result(r, rq->params, &rq->result);
    }
    rq->cb(rq);
}

/* ---- the deny cache ------------------------------------------------------ */

static size_t slot_of(const char *key, size_t klen, int space)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)space;
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return (size_t)(h % SL_REDIS_CACHE_SLOTS);
}

static int same_params(const sl_params *a, const sl_params *b)
{
    return a->algo == b->algo && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->burst == b->burst && a->precision == b->precision &&
           a->log_rejected == b->log_rejected && a->space == b->space;
}

/* Answers rq from the cache when a denial there still holds: 1, else 0. */
static int cache_answer(rchan *ch, sl_breq *rq)
{
    if (ch->cache == NULL) return 0;
    denial *d = &ch->cache[slot_of(rq->key, rq->keylen, rq->params->space)];
    if (d->klen == 0 || d->klen != rq->keylen || memcmp(d->key, rq->key, rq->keylen) != 0)
        return 0;
    /* a key's time never runs back: the cache's denials moved its clock
     * to d->clock, which Redis has not seen -- a request going there is
     * decided at that time at least (with client time; Redis's own clock
     * is past it anyway) */
    if (d->p.algo == rq->params->algo && d->p.space == rq->params->space && rq->now_ms < d->clock)
        rq->now_ms = d->clock; /* the same state: (key, algorithm, space) */
    int64_t t = rq->now_ms;
    /* the same cost; in a fixed window also a larger one up to L, whose
     * answer is the same field for field (the count only resets at the
     * window's end) */
    int cost_ok = rq->cost == d->cost ||
                  (d->p.algo == SL_FIXED_WINDOW && rq->cost > d->cost && rq->cost <= d->limit);
    if (!same_params(&d->p, rq->params) || !cost_ok || t >= d->retry_at) {
        /* another request on the key goes to Redis: if it is charged, the
         * denial kept here would no longer be Redis's answer, number for
         * number -- drop it (Redis's reply may keep a new one) */
        if (rq->op == SL_BOP_DECIDE || t >= d->retry_at) d->klen = 0;
        return 0;
    }
    if (rq->op == SL_BOP_DECIDE) d->clock = t; /* a denial moves the clock; a peek does not */
    sl_result *o = &rq->result;
    o->allowed = 0;
    o->limit = d->limit;
    o->remaining = d->remaining;
    o->retry_after_ms = d->retry_at - t;
    o->reset_after_ms = d->reset_at > t ? d->reset_at - t : 0;
    o->delay_ms = 0;
    rq->rc = 0;
    rq->err[0] = '\0';
    atomic_fetch_add(&ch->r->cache_hits, 1);
    rq->cb(rq);
    return 1;
}

/* Keeps Redis's denial of rq (key: its copy) when it can be reused
 * exactly: a retry time, and not log-rejected (whose denials are logged). */
static void cache_keep(rchan *ch, const sl_breq *rq, const char *key, uint32_t gen)
{
    const sl_result *o = &rq->result;
    if (ch->cache == NULL || o->allowed || o->retry_after_ms <= 0 || rq->params->log_rejected)
        return;
    /* Every field must hold until retry_at: retry and reset are absolute
     * times, but `remaining` (below the cost while denied) only stays put
     * for a cost of at most 1 (it is 0) or in a fixed window (the window's
     * count does not move before its end); a bucket refilling under a
     * larger denied cost shows a growing remaining, which only Redis knows. */
    if (rq->cost > 1 && rq->params->algo != SL_FIXED_WINDOW) return;
    denial *d = &ch->cache[slot_of(key, rq->keylen, rq->params->space)];
    if (d->gen != gen) return; /* the key was forgotten since it was sent */
    d->klen = rq->keylen;
    memcpy(d->key, key, rq->keylen);
    d->p = *rq->params;
    d->cost = rq->cost;
    d->t0 = d->clock = rq->now_ms;
    d->retry_at = rq->now_ms + o->retry_after_ms;
    d->reset_at = rq->now_ms + o->reset_after_ms;
    d->limit = o->limit;
    d->remaining = o->remaining;
}

/* The deny cache after Redis's answer to DECIDE e: an allowed request may
 * have charged its key, so a denial kept for the key (from a request sent
 * before it, answered before it) no longer holds -- dropped; a denial is
 * kept only when no request with a later time has been sent since (one
 * could have moved the key's clock into a later window, which a kept
 * denial would not know). */
static void cache_after(rchan *ch, const pend *e)
{
    const sl_breq *rq = e->rq;
    if (ch->cache == NULL) return;
    if (rq->result.allowed) {
        denial *d = &ch->cache[slot_of(e->key, rq->keylen, rq->params->space)];
        if (d->klen == rq->keylen && d->p.space == rq->params->space &&
            memcmp(d->key, e->key, rq->keylen) == 0)
            d->klen = 0;
        return;
    }
    if (e->latest && rq->now_ms >= ch->latest_sent) cache_keep(ch, rq, e->key, e->gen);
}

/* Drops the cache's entry of key (RL.RESET on this node). */
static void cache_forget(rchan *ch, const char *key, size_t klen)
{
    if (ch->cache == NULL) return;
    for (int space = 0; space < 2; space++) {
        denial *d = &ch->cache[slot_of(key, klen, space)];
        if (d->klen == klen && memcmp(d->key, key, klen) == 0) d->klen = 0;
        d->gen++;
    }
}

/* ---- sending ------------------------------------------------------------- */

/* Writes the Redis key of (algo, space, key[0..len), tag t) into buf
 * (docs/redis-scripts.md): "sl:" a s ":{" key[0..t) "}" key[t..len). */
static size_t redis_key(char *buf, int algo, int space, const char *key, size_t len, size_t t)
{
    memcpy(buf, "sl:", 3);
    buf[3] = (char)('0' + algo);
    buf[4] = (char)('0' + space);
    buf[5] = ':';
    buf[6] = '{';
    memcpy(buf + 7, key, t);
    buf[7 + t] = '}';
    memcpy(buf + 8 + t, key + t, len - t);
    return len + 8;
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

static void cmd_str(struct cmd *c, const char *s, size_t n)
{
    c->argv[c->argc] = s;
    c->len[c->argc++] = n;
}

static void cmd_int(struct cmd *c, int64_t v)
{
    c->len[c->argc] = (size_t)snprintf(c->num[c->argc], sizeof c->num[0], "%lld", (long long)v);
    c->argv[c->argc] = c->num[c->argc];
    c->argc++;
}

static void cmd_key(struct cmd *c, int algo, int space, const char *key, size_t len, size_t tag)
{
    char *k = c->key[c->nkeys++];
    cmd_str(c, k, redis_key(k, algo, space, key, len, tag));
}

/* EVALSHA sha n: the start of every script call of n keys. */
static void cmd_evalsha(struct cmd *c, const redis *r, size_t nkeys)
{
    c->argc = c->nkeys = 0;
    cmd_str(c, "EVALSHA", 7);
    cmd_str(c, r->sha, SHA_LEN);
    cmd_int(c, (int64_t)nkeys);
}

static void cmd_now(struct cmd *c, const redis *r, int64_t now_ms)
{
    if (r->o.trust_client_time)
        cmd_int(c, now_ms);
    else
        cmd_str(c, "", 0);
}

/* The 7 fields of one key (docs/redis-scripts.md). */
static void cmd_fields(struct cmd *c, const sl_params *p, int64_t cost)
{
    cmd_int(c, p->algo);
    cmd_int(c, p->limit);
    cmd_int(c, p->window_ms);
    cmd_int(c, p->burst);
    cmd_int(c, p->precision);
    cmd_int(c, p->log_rejected);
    cmd_int(c, cost);
}

static const char pool_key[] = SL_CHECK_POOL_KEY;

/* The pool's key as a user key of plan into u (SL_MAX_KEY + sizeof
 * pool_key bytes), its tag's length in *taglen: "|spare-capacity", its own
 * tag; or in a cluster "<domain>|spare-capacity" with the domain as tag --
 * the domain's slot, so that the plan is one slot (one pool a domain:
 * docs/fleet.md).  Returns its length.  Both paths' keys are made from it
 * (redis_key, cmd_mkey). */
static size_t pool_user_key(char *u, const redis *r, const sl_check_plan *plan, size_t *taglen)
{
    for (int k = 0; r->cluster && k < plan->nitems; k++) {
        const sl_check_item *t = &plan->items[k];
        if (t->zero || t->lead != k || t->taglen > t->keylen) continue;
        memcpy(u, t->key, t->taglen);
        memcpy(u + t->taglen, pool_key, sizeof pool_key - 1);
        *taglen = t->taglen;
        return t->taglen + sizeof pool_key - 1;
    }
    memcpy(u, pool_key, sizeof pool_key - 1);
    *taglen = sizeof pool_key - 1;
    return sizeof pool_key - 1;
}

/* RL.CHECK's op C (docs/redis-scripts.md): every counter of the plan that
 * is not L = 0 and not a repeat, then the pool; lead[] gets the plan's
 * item of each key sent, in order. */
/* Op C's counters and masks: lead[] gets the plan's item of each counter
 * sent, in order (returns how many), qmask[] each leader's quota
 * descriptors, *qall and *zmask the plan's. */
static int check_masks(const sl_check_plan *plan, int *lead, int64_t *qmask, int64_t *qall,
                       int64_t *zmask)
{
    const sl_check_item *it = plan->items;
    int m = 0;
    *qall = *zmask = 0;
    for (int k = 0; k < plan->nitems; k++) qmask[k] = 0;
    for (int k = 0; k < plan->nitems; k++) {
        int64_t bitd = (int64_t)1 << it[k].desc;
        if (it[k].quota) *qall |= bitd;
        if (it[k].quota && it[k].zero) *zmask |= bitd;
        if (it[k].quota && !it[k].zero) qmask[it[k].lead] |= bitd;
        if (!it[k].zero && it[k].lead == k) lead[m++] = k;
    }
    return m;
}

/* The plan's header after its time, the same for the script's op C and
 * RL.CHECKPLAN: m pool denied_never qall zmask. */
static void cmd_plan_head(struct cmd *c, const sl_check_plan *plan, int m, int64_t qall,
                          int64_t zmask)
{
    cmd_int(c, m);
    cmd_int(c, plan->has_pool);
    cmd_int(c, plan->denied_never);
    cmd_int(c, qall);
    cmd_int(c, zmask);
}

/* One counter's fields, the same on both paths: algo L W B P log_rejected
 * cost shadow quota lyft ceiling qmask. */
static void cmd_plan_item(struct cmd *c, const sl_check_item *t, int64_t qmask)
{
    cmd_fields(c, &t->p, t->cost);
    cmd_int(c, t->shadow);
    cmd_int(c, t->quota);
    cmd_int(c, t->lyft);
    cmd_int(c, t->elastic ? t->rl->elastic_limit : 0);
    cmd_int(c, qmask);
}

static void cmd_check(struct cmd *c, const redis *r, const sl_check_plan *plan, int *lead)
{
    const sl_check_item *it = plan->items;
    int64_t qall, zmask, qmask[SL_MAX_BATCH];
    int m = check_masks(plan, lead, qmask, &qall, &zmask);
    cmd_evalsha(c, r, (size_t)m + (plan->has_pool ? 1 : 0));
    for (int i = 0; i < m; i++) {
        const sl_check_item *t = &it[lead[i]];
        cmd_key(c, (int)t->p.algo, t->p.space, t->key, t->keylen, t->taglen);
    }
    if (plan->has_pool) {
        char u[KEYBUF];
        size_t tag, n = pool_user_key(u, r, plan, &tag);
        cmd_key(c, (int)plan->pool.algo, plan->pool.space, u, n, tag);
    }
    cmd_str(c, "C", 1);
    cmd_now(c, r, plan->now_ms);
    cmd_plan_head(c, plan, m, qall, zmask);
    for (int i = 0; i < m; i++) cmd_plan_item(c, &it[lead[i]], qmask[lead[i]]);
    if (plan->has_pool) cmd_fields(c, &plan->pool, plan->cost);
}

/* Builds e's command for the script (docs/redis-scripts.md): one
 * EVALSHA of op D, P, A or C; FORGET's DEL of the key's every algorithm. */
static void cmd_script(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    int lead[SL_MAX_BATCH];

    switch (rq->op) {
    case SL_BOP_FORGET:
        c->argc = c->nkeys = 0;
        cmd_str(c, "DEL", 3);
        for (int a = rq->algo_lo; a < rq->algo_hi; a++)
            cmd_key(c, a, 0, e->key, rq->keylen, rq->keylen);
        break;
    case SL_BOP_CHECK: cmd_check(c, r, rq->plan, lead); break;
    case SL_BOP_DECIDE_ALL:
        cmd_evalsha(c, r, rq->nreqs);
        for (size_t i = 0; i < rq->nreqs; i++) {
            const sl_request *q = &e->reqs[i];
            cmd_key(c, (int)q->params->algo, q->params->space, q->key, q->keylen, q->keylen);
        }
        cmd_str(c, "A", 1);
        cmd_now(c, r, rq->now_ms);
        for (size_t i = 0; i < rq->nreqs; i++) cmd_fields(c, e->reqs[i].params, e->reqs[i].cost);
        break;
    default: /* DECIDE, PEEK */
        cmd_evalsha(c, r, 1);
        cmd_key(c, (int)rq->params->algo, rq->params->space, e->key, rq->keylen, rq->keylen);
        cmd_str(c, rq->op == SL_BOP_DECIDE ? "D" : "P", 1);
        cmd_now(c, r, rq->now_ms);
        cmd_fields(c, rq->params, rq->cost);
        break;
    }
}

/* Builds batch b's command (n >= 2 DECIDEs): one op B call (op M's
 * decisions, two arguments a key). */
static void cmd_batch(struct cmd *c, const redis *r, const batch *b)
{
    cmd_evalsha(c, r, (size_t)b->n);
    for (int i = 0; i < b->n; i++) {
        const pend *e = b->m[i];
        const sl_breq *rq = e->rq;
        cmd_key(c, (int)rq->params->algo, rq->params->space, e->key, rq->keylen, rq->keylen);
    }
    cmd_str(c, "B", 1);
    cmd_now(c, r, b->now);
    for (int i = 0; i < b->n; i++) {
        const sl_params *p = b->m[i]->rq->params;
        int len = snprintf(c->par[i], sizeof c->par[i], "%d %lld %lld %lld %lld %d", (int)p->algo,
                           (long long)p->limit, (long long)p->window_ms, (long long)p->burst,
                           (long long)p->precision, p->log_rejected);
        cmd_str(c, c->par[i], (size_t)len);
        cmd_int(c, b->m[i]->rq->cost);
    }
}

/* ---- the module's commands (docs/module.md, "sluiced's Redis backend") ---- */

/* The Redis key of (space, key[0..len), tag t) on the module path:
 * "sl:m" s ":{" key[0..t) "}" key[t..len).  The scripts' keys are "sl:"
 * digit digit ":", so the two paths never name one Redis key; the hash
 * tag is the script's, so a key maps to the same Cluster slot on both. */
static void cmd_mkey(struct cmd *c, int space, const char *key, size_t len, size_t t)
{
    char *k = c->key[c->nkeys++];
    memcpy(k, "sl:m", 4);
    k[4] = (char)('0' + space);
    k[5] = ':';
    k[6] = '{';
    memcpy(k + 7, key, t);
    k[7 + t] = '}';
    memcpy(k + 8 + t, key + t, len - t);
    cmd_str(c, k, len + 8);
}

/* AT now_ms, with client time (the module loaded with trust-client-time
 * yes: the handshake checked); nothing with Redis's clock. */
static void cmd_at(struct cmd *c, const redis *r, int64_t now_ms)
{
    if (!r->o.trust_client_time) return;
    cmd_str(c, "AT", 2);
    cmd_int(c, now_ms);
}

/* limit window ALGO a COST c [BURST b] [PRECISION p] [LOGREJECTED]: a
 * request's arguments after its key, as RL.ALLOW takes them. */
static void cmd_request(struct cmd *c, const sl_params *p, int64_t cost)
{
    const char *algo = sl_algo_name(p->algo);
    cmd_int(c, p->limit);
    cmd_int(c, p->window_ms);
    cmd_str(c, "ALGO", 4);
    cmd_str(c, algo, strlen(algo));
    cmd_str(c, "COST", 4);
    cmd_int(c, cost);
    if (p->burst != 0) {
        cmd_str(c, "BURST", 5);
        cmd_int(c, p->burst);
    }
    if (p->precision != 0) {
        cmd_str(c, "PRECISION", 9);
        cmd_int(c, p->precision);
    }
    if (p->log_rejected) cmd_str(c, "LOGREJECTED", 11);
}

/* Builds e's command for the module: RL.ALLOW (D), RL.PEEK (P),
 * RL.DECIDEALL (A), RL.CHECKPLAN (C), RL.RESET (forget). */
static void cmd_module(struct cmd *c, const redis *r, const pend *e)
{
    const sl_breq *rq = e->rq;
    c->argc = c->nkeys = 0;
    switch (rq->op) {
    case SL_BOP_FORGET: /* the service resets one algorithm or all of them */
        cmd_str(c, "RL.RESET", 8);
        cmd_mkey(c, 0, e->key, rq->keylen, rq->keylen);
        if (rq->algo_hi - rq->algo_lo == 1) {
            const char *algo = sl_algo_name((sl_algo)rq->algo_lo);
            cmd_str(c, "ALGO", 4);
            cmd_str(c, algo, strlen(algo));
        }
        break;
    case SL_BOP_CHECK: {
        const sl_check_plan *plan = rq->plan;
        int lead[SL_MAX_BATCH];
        int64_t qall, zmask, qmask[SL_MAX_BATCH];
        int m = check_masks(plan, lead, qmask, &qall, &zmask);
        cmd_str(c, "RL.CHECKPLAN", 12);
        cmd_at(c, r, plan->now_ms);
        cmd_plan_head(c, plan, m, qall, zmask);
        for (int i = 0; i < m; i++) {
            const sl_check_item *t = &plan->items[lead[i]];
            cmd_mkey(c, t->p.space, t->key, t->keylen, t->taglen);
            cmd_plan_item(c, t, qmask[lead[i]]);
        }
        if (plan->has_pool) {
            char u[KEYBUF];
            size_t tag, n = pool_user_key(u, r, plan, &tag);
            cmd_mkey(c, plan->pool.space, u, n, tag);
            cmd_fields(c, &plan->pool, plan->cost);
        }
        break;
    }
    case SL_BOP_DECIDE_ALL:
        cmd_str(c, "RL.DECIDEALL", 12);
        cmd_at(c, r, rq->now_ms);
        for (size_t i = 0; i < rq->nreqs; i++) {
            const sl_request *q = &e->reqs[i];
            cmd_str(c, "REQ", 3);
            cmd_mkey(c, q->params->space, q->key, q->keylen, q->keylen);
            cmd_request(c, q->params, q->cost);
        }
        break;
    default: /* DECIDE, PEEK */
        cmd_str(c, rq->op == SL_BOP_DECIDE ? "RL.ALLOW" : "RL.PEEK",
                rq->op == SL_BOP_DECIDE ? 8 : 7);
        cmd_mkey(c, rq->params->space, e->key, rq->keylen, rq->keylen);
        cmd_request(c, rq->params, rq->cost);
        cmd_at(c, r, rq->now_ms);
        break;
    }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends e's command on ch's connection.  Returns 0, or -1 when hiredis
 * refused it (the connection is going). */
static int send_pend(rchan *ch, pend *e)
{
    struct cmd *c = ch->cmd;
    e->module = ch->module;
    if (ch->module)
        cmd_module(c, ch->r, e);
    else
        cmd_script(c, ch->r, e);
    return redisAsyncCommandArgv(ch->ac, on_reply, e, c->argc, c->argv, c->len) == REDIS_OK ? 0
                                                                                            : -1;
}

static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* Sends batch b (n >= 2 DECIDEs) as one op B call (op M's decisions, two
 * arguments a key): 0, or -1 as send_pend. */
static int send_batch(rchan *ch, batch *b)
{
    struct cmd *c = ch->cmd;
    cmd_batch(c, ch->r, b);
    return redisAsyncCommandArgv(ch->ac, on_batch_reply, b, c->argc, c->argv, c->len) == REDIS_OK
               ? 0
               : -1;
}

static void on_script_load(redisAsyncContext *ac, void *reply, void *privdata);

static void batch_done(rchan *ch);
static int redirect(rchan *ch, pend *e, const char *err);
static int request_slot(const struct redis *r, const sl_breq *rq);

/* MOVED, ASK or TRYAGAIN: an answer a cluster request follows (redirect). */
static int is_redirect(const char *err)
{
    return strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0 ||
           strncmp(err, "TRYAGAIN", 8) == 0;
}

/* hiredis's callback of a request's command: 0 when it was sent again
 * (NOSCRIPT), else 1 (answered, e freed). */
static int reply_one(redisAsyncContext *ac, void *reply, void *privdata);

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    pend *e = privdata;
    rchan *ch = e->ch;
    int flushed = e->flushed;
    if (reply_one(ac, reply, e) && flushed) batch_done(ch);
}

static int reply_one(redisAsyncContext *ac, void *reply, void *privdata)
{
    pend *e = privdata;
    rchan *ch = e->ch;
    redis *r = ch->r;
    sl_breq *rq = e->rq;
    const redisReply *x = reply;
    unlink_pend(ch, e);
    if (x == NULL) { /* the connection went (lost, timed out, or the channel closing) */
        if (ch->closing)
            sl__breq_fail(rq, SL_EINVAL, "channel closed with the request in flight");
        else
            by_policy(ch, rq, e->key, e->reqs);
        pend_put(ch, e);
        return 1;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        if (r->cluster && redirect(ch, e, x->str)) return 0; /* e went on: MOVED, ASK */
        if (strncmp(x->str, "NOSCRIPT", 8) == 0 && !e->resent && ch->ac == ac) {
            /* Redis lost the script (SCRIPT FLUSH, a restart behind a
             * proxy): load it again, then this request, in that order */
            e->resent = 1;
            redisAsyncCommand(ac, on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                              (size_t)(sl_redis_script_end - sl_redis_script));
            e->prev = ch->tail;
            e->next = NULL;
            if (ch->tail)
                ch->tail->next = e;
            else
                ch->head = e;
            ch->tail = e;
            ch->npend++;
            atomic_fetch_add(&r->inflight, 1);
            if (send_pend(ch, e) == 0) return 0;
            unlink_pend(ch, e);
        } else if (strncmp(x->str, "SLUICE ", 7) == 0) { /* the script refused the request */
            sl__breq_fail(rq, SL_EINVAL, "%s", x->str + 7);
            pend_put(ch, e);
            return 1;
        } else if (e->module && strncmp(x->str, "ERR ", 4) == 0 &&
                   strncmp(x->str, "ERR unknown command", 19) != 0) {
            /* the module refused the request (sluiced's message: the
             * engine's, or AT past the module's max-client-skew) */
            sl__breq_fail(rq, SL_EINVAL, "%s", x->str + 4);
            pend_put(ch, e);
            return 1;
        }
        atomic_fetch_add(&r->errors, 1);
        set_last_error(r, "%.200s", x->str);
        /* a slot no master serves: the map is stale (a topology change) */
        if (r->cluster && strncmp(x->str, "CLUSTERDOWN", 11) == 0) cluster_refresh(ch->w);
        by_policy(ch, rq, e->key, e->reqs);
        pend_put(ch, e);
        return 1;
    }
    rq->rc = 0;
    rq->err[0] = '\0';
    if (sl__redis_parse_reply(rq, x, e->module) != 0) {
        atomic_fetch_add(&r->errors, 1);
        set_last_error(r, "a reply the script ABI does not allow (type %d)", x->type);
        by_policy(ch, rq, e->key, e->reqs);
    } else {
        /* a peek's time is no key's clock: only decisions are kept */
        if (rq->op == SL_BOP_DECIDE) cache_after(ch, e);
        rq->cb(rq);
    }
    pend_put(ch, e);
    arm_timer(ch);
    return 1;
}

/* Answers e's request, whose connection went (or was never there). */
static void answer_lost(rchan *ch, pend *e)
{
    if (ch->closing)
        sl__breq_fail(e->rq, SL_EINVAL, "channel closed with the request in flight");
    else
        by_policy(ch, e->rq, e->key, e->reqs);
}

static void batch_put(rchan *ch, batch *b)
{
    b->next = ch->free_batch;
    ch->free_batch = b;
}

/* Every member of b by the policy (or failed, the channel closing);
 * error: an error reply answered them all. */
static void batch_lost(rchan *ch, batch *b, const char *error)
{
    for (int i = 0; i < b->n; i++) {
        pend *e = b->m[i];
        unlink_pend(ch, e);
        if (error != NULL) {
            atomic_fetch_add(&ch->r->errors, 1);
            set_last_error(ch->r, "%.200s", error);
        }
        answer_lost(ch, e);
        pend_put(ch, e);
    }
    batch_put(ch, b);
}

/* hiredis's callback of a batch: its members answered in order. */
static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    batch *b = privdata;
    rchan *ch = b->ch;
    const redisReply *x = reply;
    if (x == NULL) { /* the connection went */
        batch_lost(ch, b, NULL);
        batch_done(ch);
        return;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        if (strncmp(x->str, "NOSCRIPT", 8) == 0 && !b->resent && ch->ac == ac) {
            b->resent = 1; /* load the script again, then the batch (as on_reply) */
            redisAsyncCommand(ac, on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                              (size_t)(sl_redis_script_end - sl_redis_script));
            if (send_batch(ch, b) == 0) return;
        }
        if (ch->r->cluster && is_redirect(x->str)) { /* each member follows it alone */
            for (int i = 0; i < b->n; i++) {
                unlink_pend(ch, b->m[i]);
                redirect(ch, b->m[i], x->str);
            }
            batch_put(ch, b);
            arm_timer(ch);
            batch_done(ch);
            return;
        }
        batch_lost(ch, b, x->str);
        arm_timer(ch);
        batch_done(ch);
        return;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements != (size_t)b->n) {
        char why[80];
        snprintf(why, sizeof why, "a reply the script ABI does not allow (type %d)", x->type);
        batch_lost(ch, b, why);
        arm_timer(ch);
        batch_done(ch);
        return;
    }
    for (int i = 0; i < b->n; i++) {
        pend *e = b->m[i];
        sl_breq *rq = e->rq;
        const redisReply *el = x->element[i];
        unlink_pend(ch, e);
        if (el->type == REDIS_REPLY_ERROR && strncmp(el->str, "SLUICE ", 7) == 0) {
            sl__breq_fail(rq, SL_EINVAL, "%s", el->str + 7); /* the script refused this one */
        } else if (el->type == REDIS_REPLY_ARRAY && el->elements == 6 &&
                   sl__redis_six(el, 0, &rq->result) == 0) {
            rq->rc = 0;
            rq->err[0] = '\0';
            cache_after(ch, e);
            rq->cb(rq);
        } else {
            atomic_fetch_add(&ch->r->errors, 1);
            set_last_error(ch->r, "%.200s",
                           el->type == REDIS_REPLY_ERROR ? el->str
                                                         : "a reply the script ABI does not allow");
            by_policy(ch, rq, e->key, NULL);
        }
        pend_put(ch, e);
    }
    batch_put(ch, b);
    arm_timer(ch);
    batch_done(ch);
}

/* Sends the open batch, if any: a lone DECIDE as D, more as one M. */
static void flush_open(rchan *ch)
{
    batch *b = ch->open;
    if (b == NULL) return;
    ch->open = NULL;
    if (ch->ac == NULL) { /* the connection went */
        batch_lost(ch, b, NULL);
        return;
    }
    if (b->n == 1) {
        pend *e = b->m[0];
        batch_put(ch, b);
        e->flushed = 1;
        if (send_pend(ch, e) != 0) {
            unlink_pend(ch, e);
            answer_lost(ch, e);
            pend_put(ch, e);
            return;
        }
        ch->busy++;
        return;
    }
    if (send_batch(ch, b) != 0) {
        batch_lost(ch, b, NULL);
        return;
    }
    ch->busy++;
}

/* A batch was answered: the open one goes when none is left in flight. */
static void batch_done(rchan *ch)
{
    ch->busy--;
    if (ch->busy == 0) flush_open(ch);
}

/* The end of a loop turn with DECIDEs queued: they go now, unless a batch
 * is in flight -- then they wait for its answer (batch_done) and gather
 * what comes meanwhile, so a busy channel sends few, large batches. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    if (ch->busy == 0 || ch->ac == NULL) flush_open(ch);
}

/* Queues DECIDE e (linked, not sent) in the open batch; 0, or -1 when out
 * of memory (e is then the caller's to send). */
static int queue(rchan *ch, pend *e)
{
    batch *b = ch->open;
    int64_t now = ch->r->o.trust_client_time ? e->rq->now_ms : 0;
    int slot = ch->r->cluster ? request_slot(ch->r, e->rq) : -1;
    if (b != NULL && (b->n == SL_REDIS_BATCH_MAX || b->now != now || b->slot != slot)) {
        flush_open(ch); /* full, another time or slot: what came first goes first */
        b = NULL;
    }
    if (b == NULL) {
        if ((b = ch->free_batch) != NULL)
            ch->free_batch = b->next;
        else if ((b = malloc(sizeof *b)) == NULL)
            return -1;
        b->ch = ch;
        b->n = 0;
        b->resent = 0;
        b->now = now;
        b->slot = slot;
        ch->open = b;
        event_active(ch->flush, EV_TIMEOUT, 0);
    }
    b->m[b->n++] = e;
    return 0;
}

/* ---- the connection ------------------------------------------------------ */

/* Frees ch's connection (why: for the log): every request in flight is
 * answered by the policy, then the channel is DOWN. */
static void drop(rchan *ch, const char *why)
{
    redisAsyncContext *ac = ch->ac;
    if (ac == NULL) return;
    go_down(ch, why); /* first: answers given below may submit again */
    redisAsyncFree(ac);
}

static void on_script_load(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    const redisReply *x = reply;
    if (x == NULL || ch->ac != ac) return;
    char why[300];
    if (x->type != REDIS_REPLY_STRING || x->len != SHA_LEN ||
        memcmp(x->str, ch->r->sha, SHA_LEN) != 0) {
        snprintf(why, sizeof why, "SCRIPT LOAD: %.200s",
                 x->type == REDIS_REPLY_ERROR ? x->str : "not the script's SHA1");
        atomic_fetch_add(&ch->r->errors, 1);
        drop(ch, why);
        return;
    }
}

/* The key of the handshake's probe for node i into out: PROBE_KEY, or in
 * a cluster (map) "sl:m0:{sluice-probe-N}" with the first N whose slot
 * the map gives node i -- a key of another master's slot would get MOVED,
 * read as "no module".  PROBE_KEY when none is found. */
static void probe_key(char *out, size_t cap, const sl_slotmap *map, int i)
{
    for (int n = 0; map != NULL && n < 4 * SL_SLOTS; n++) {
        int len = snprintf(out, cap, "sl:m0:{sluice-probe-%d}", n);
        if (map->node[sl_key_slot(out, (size_t)len)] == i) return;
    }
    snprintf(out, cap, "%s", PROBE_KEY);
}

/* COMMAND INFO RL.CHECKPLAN's reply: 1 the module's command is there, 0
 * not ([nil]: no module, or an older one), -1 Redis refused to say (an
 * ACL's NOPERM: its error into why). */
static int cmdinfo_says(const redisReply *x, char *why, size_t cap)
{
    why[0] = '\0';
    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 1 &&
        x->element[0]->type == REDIS_REPLY_ARRAY)
        return 1;
    if (x == NULL || x->type != REDIS_REPLY_ERROR) return 0;
    snprintf(why, cap, "COMMAND INFO: %.280s", x->str);
    return -1;
}

/* The probe RL.PEEK's reply: 1 the module answered, else 0 with what it
 * answered into why (an AT refused: the module was loaded without
 * trust-client-time; an ACL's NOPERM). */
static int probe_says(const redisReply *x, char *why, size_t cap)
{
    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 6) return 1;
    snprintf(why, cap, "RL.PEEK: %.280s",
             x == NULL                      ? "no answer"
             : x->type == REDIS_REPLY_ERROR ? x->str
                                            : "an unexpected reply");
    return 0;
}

/* Tells on_path node n's path (module 1: the module's commands; 0: the
 * script, why says what was seen when a module may be there), when it is
 * the first told or differs from the last: once per server and per change,
 * however many connections find it. */
static void tell_path(redis *r, rnode *n, int module, const char *why)
{
    int now = module ? 2 : 1, before = atomic_exchange(&n->path_told, now);
    if (before == now || r->o.on_path == NULL) return;
    r->o.on_path(r->o.state_arg, n->url.shown, module, why, before != 0);
}

/* Sets ch's path (1: the module's commands) and the count INFO shows. */
static void set_path(rchan *ch, int module)
{
    if (ch->module == module) return;
    ch->module = module;
    atomic_fetch_add(&ch->r->nmod, module ? 1 : -1);
}

/* COMMAND INFO RL.CHECKPLAN's reply: [nil] without the module (or without
 * the command: an older one), an error when the user may not ask. */
static void on_cmdinfo(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    const redisReply *x = reply;
    if (x == NULL || ch->ac != ac) return;
    ch->has_cmd = cmdinfo_says(x, ch->no_module, sizeof ch->no_module);
}

/* The probe's reply, the handshake's last: the module is the path when it
 * has RL.CHECKPLAN and answered RL.PEEK (so this user may call it and, with
 * client time, the module takes AT); then the channel is UP. */
static void on_probe(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    const redisReply *x = reply;
    if (x == NULL || ch->ac != ac) return;
    int module = ch->has_cmd == 1 && probe_says(x, ch->no_module, sizeof ch->no_module);
    set_path(ch, module);
    tell_path(ch->r, ch->node, module, ch->no_module);
    if (ch->state == CONNECTING) {
        ch->state = UP;
        ch->hs_deadline = 0;
        ch->attempt = 0;
        if (ch->was_up) atomic_fetch_add(&ch->r->reconnects, 1);
        ch->was_up = 1;
        atomic_fetch_add(&ch->node->nup, 1);
        report(ch, 1, "connected");
        arm_timer(ch);
    }
}

/* AUTH's and SELECT's replies: an error drops the connection. */
static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata)
{
    rchan *ch = ac->data;
    const redisReply *x = reply;
    if (x == NULL || ch->ac != ac || x->type != REDIS_REPLY_ERROR) return;
    char why[300];
    snprintf(why, sizeof why, "%s: %.200s", (const char *)privdata, x->str);
    atomic_fetch_add(&ch->r->errors, 1);
    drop(ch, why);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    rchan *ch = ac->data;
    if (status == REDIS_OK || ch->ac != ac) return;
    char why[300];
    snprintf(why, sizeof why, "connect: %.200s", ac->errstr);
    atomic_fetch_add(&ch->r->errors, 1);
    go_down(ch, why); /* hiredis frees ac after this returns */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rchan *ch = ac->data;
    (void)status;
    if (ch->ac != ac) return; /* freed by us: go_down has run */
    char why[300];
    if (ch->rb.why[0] != '\0') /* the reader refused a reply (redis/reply.h) */
        snprintf(why, sizeof why, "reply refused: %s", ch->rb.why);
    else
        snprintf(why, sizeof why, "connection lost: %.200s", ac->errstr[0] ? ac->errstr : "closed");
    atomic_fetch_add(&ch->r->errors, 1);
    go_down(ch, why);
}

/* The read event of ch's connection (in place of the libevent adapter's):
 * hiredis reads and answers what came; then, if the connection is still
 * there and its reader holds more unparsed bytes than one reply sluice
 * reads can take (a string claiming gigabytes arrives a read at a time,
 * and hiredis would buffer it all), the connection is dropped. */
static void on_redis_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    redisAsyncContext *ac = ch->ac;
    if (ac == NULL) return;
    redisAsyncHandleRead(ac);
    if (ch->ac != ac || sl__redis_reader_pending(ac->c.reader) <= SL_REDIS_REPLY_PENDING) return;
    char why[200];
    snprintf(why, sizeof why, "reply refused: an item of more than %d bytes",
             SL_REDIS_REPLY_STRING);
    atomic_fetch_add(&ch->r->errors, 1);
    drop(ch, why);
}

/* Makes ch's connection and sends the handshake (its answers come later). */
static void connect_now(rchan *ch)
{
    redis *r = ch->r;
    const sl_redis_url *u = &ch->node->url;
    redisAsyncContext *ac = redisAsyncConnect(u->host, u->port);
    char why[300];
    if (ac == NULL || ac->err) {
        snprintf(why, sizeof why, "connect: %.200s", ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        atomic_fetch_add(&r->errors, 1);
        go_down(ch, why);
        return;
    }
    ac->data = ch;
    if (redisLibeventAttach(ac, ch->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        go_down(ch, "connect: cannot attach to the event loop");
        return;
    }
    /* replies are read with bounds (redis/reply.h), and each read is
     * followed by the check of what the reader buffers (on_redis_read) */
    memset(&ch->rb, 0, sizeof ch->rb);
    ch->rb.ac = ac;
    sl__redis_reader_bound(ac->c.reader, &ch->rb);
    redisLibeventEvents *ev = ac->ev.data;
    event_del(ev->rev);
    event_assign(ev->rev, ch->loop, ac->c.fd, EV_READ, on_redis_read, ch);
    event_add(ev->rev, NULL);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ch->ac = ac;
    ch->state = CONNECTING;
    ch->hs_deadline = sl__mono_ms() + SL_REDIS_HANDSHAKE_MS;
    if (u->pass[0] != '\0' && u->user[0] != '\0')
        redisAsyncCommand(ac, on_handshake, (void *)"AUTH", "AUTH %s %s", u->user, u->pass);
    else if (u->pass[0] != '\0')
        redisAsyncCommand(ac, on_handshake, (void *)"AUTH", "AUTH %s", u->pass);
    if (u->db != 0) redisAsyncCommand(ac, on_handshake, (void *)"SELECT", "SELECT %d", u->db);
    redisAsyncCommand(ac, on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                      (size_t)(sl_redis_script_end - sl_redis_script));
    /* which path: requests sent before these answers take the last one */
    ch->has_cmd = 0;
    ch->no_module[0] = '\0';
    redisAsyncCommand(ac, on_cmdinfo, NULL, "COMMAND INFO RL.CHECKPLAN");
    char key[64];
    probe_key(key, sizeof key, r->cluster ? ch->w->map : NULL, (int)(ch->node - r->node));
    if (r->o.trust_client_time)
        redisAsyncCommand(ac, on_probe, NULL, "RL.PEEK %s 1 1000 AT %lld", key,
                          (long long)sl__wall_ms());
    else
        redisAsyncCommand(ac, on_probe, NULL, "RL.PEEK %s 1 1000", key);
    arm_timer(ch);
}

/* Arms ch's timer for the next deadline: the handshake's, the oldest request's. */
static void arm_timer(rchan *ch)
{
    int64_t next = ch->hs_deadline;
    if (ch->head != NULL && (next == 0 || ch->head->deadline < next)) next = ch->head->deadline;
    if (next == 0) {
        evtimer_del(ch->timer);
        return;
    }
    int64_t ms = next - sl__mono_ms();
    if (ms < 0) ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 + 500};
    evtimer_add(ch->timer, &tv);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    rchan *ch = arg;
    int64_t now = sl__mono_ms();
    char why[200];
    if (ch->hs_deadline != 0 && now >= ch->hs_deadline) {
        snprintf(why, sizeof why, "no answer to the handshake within %d ms", SL_REDIS_HANDSHAKE_MS);
        atomic_fetch_add(&ch->r->errors, 1);
        drop(ch, why);
        return;
    }
    if (ch->head != NULL && now >= ch->head->deadline) {
        uint64_t n = 0;
        for (pend *e = ch->head; e != NULL; e = e->next) n += now >= e->deadline;
        atomic_fetch_add(&ch->r->timeouts, n);
        snprintf(why, sizeof why, "no answer within --backend-timeout %lld ms",
                 (long long)ch->r->o.timeout_ms);
        drop(ch, why);
        return;
    }
    arm_timer(ch);
}

/* ---- Redis Cluster -------------------------------------------------------- */

static rchan *conn_new(redis *r, rnode *n, struct event_base *loop);
/* Where submit sends a valid request. */
enum { TO_REDIS, NO_MASTER /* the policy answers */, CROSSSLOT /* refused */ };
static void submit(rchan *ch, sl_breq *rq, int where);

/* The index in r->node of the master at host[0..hlen):port, added (with
 * the first seed's user and password) when new; -1 when SL_REDIS_MASTERS_MAX are
 * known already or the host does not fit.  Any thread: takes r->lock. */
static int node_add(redis *r, const char *host, size_t hlen, int port)
{
    int found = -1;
    pthread_mutex_lock(&r->lock);
    int n = atomic_load(&r->nnodes);
    for (int i = 0; i < n && found < 0; i++)
        if (r->node[i].url.port == port && strlen(r->node[i].url.host) == hlen &&
            memcmp(r->node[i].url.host, host, hlen) == 0)
            found = i;
    if (found < 0 && n < SL_REDIS_MASTERS_MAX && hlen > 0 && hlen < sizeof r->node[0].url.host) {
        rnode *nd = &r->node[n];
        nd->url = r->seed;
        memcpy(nd->url.host, host, hlen);
        nd->url.host[hlen] = '\0';
        nd->url.port = port;
        nd->url.db = 0;
        url_show(&nd->url);
        sl__redis_url_id(&nd->url, nd->id, sizeof nd->id);
        atomic_store(&nd->up, 1);        /* until a connection to it is lost */
        atomic_store(&r->nnodes, n + 1); /* published whole: readers take [0, nnodes) */
        found = n;
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

/* w's connection to node i, made (and connecting) when it is the first
 * request for that master; NULL when out of memory. */
static rchan *conn_get(wchan *w, int i)
{
    if (w->c[i] == NULL && (w->c[i] = conn_new(w->r, &w->r->node[i], w->loop)) != NULL) {
        w->c[i]->w = w;
        connect_now(w->c[i]);
    }
    return w->c[i];
}

/* Reads a CLUSTER SLOTS reply (asked of host `asked`, which an empty or
 * "?" address means) into map, adding the masters to r->node.  0, or -1
 * when the reply is not one (map is then partly written). */
static int parse_slots(redis *r, const redisReply *x, const char *asked, sl_slotmap *map)
{
    if (x == NULL || x->type != REDIS_REPLY_ARRAY) return -1;
    sl_slotmap_clear(map);
    for (size_t i = 0; i < x->elements; i++) {
        const redisReply *e = x->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            return -1;
        const redisReply *m = e->element[2];
        if (m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER || m->element[1]->integer < 1 ||
            m->element[1]->integer > 65535)
            return -1;
        const char *host = m->element[0]->str;
        size_t hlen = m->element[0]->len;
        if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
            host = asked;
            hlen = strlen(asked);
        }
        int node = node_add(r, host, hlen, (int)m->element[1]->integer);
        if (node < 0 || e->element[0]->integer < 0 || e->element[1]->integer >= SL_SLOTS ||
            sl_slotmap_set(map, (int)e->element[0]->integer, (int)e->element[1]->integer, node) !=
                0)
            return -1;
    }
    return 0;
}

/* CLUSTER SLOTS's answer on ch: w's map (and the backend's, for INFO and
 * channels made later) replaced; every master in it gets its connection. */
static void on_slots(redisAsyncContext *ac, void *reply, void *privdata)
{
    rchan *ch = privdata;
    wchan *w = ch->w;
    redis *r = ch->r;
    (void)ac;
    w->refreshing = 0;
    if (reply == NULL || ch->closing) return;
    sl_slotmap *m = malloc(sizeof *m); /* 32 KiB: not on the stack; once per topology change */
    if (m == NULL) return;
    if (parse_slots(r, reply, ch->node->url.host, m) != 0) {
        atomic_fetch_add(&r->errors, 1);
        const redisReply *x = reply;
        set_last_error(r, "CLUSTER SLOTS: %.200s",
                       x->type == REDIS_REPLY_ERROR ? x->str : "not a slot map");
        free(m);
        return;
    }
    memcpy(w->map, m, sizeof *m);
    pthread_mutex_lock(&r->lock);
    memcpy(r->map, m, sizeof *m);
    pthread_mutex_unlock(&r->lock);
    unsigned char used[SL_REDIS_MASTERS_MAX] = {0};
    for (int i = 0; i < SL_SLOTS; i++)
        if (m->node[i] >= 0) used[m->node[i]] = 1;
    for (int i = 0; i < SL_REDIS_MASTERS_MAX; i++)
        if (used[i]) conn_get(w, i);
    free(m);
}

/* Asks for the slot map again, on w's first connection that is up (one
 * CLUSTER SLOTS in flight a worker; none when no connection is up -- the
 * next loss or MOVED asks again). */
static void cluster_refresh(wchan *w)
{
    if (w == NULL || w->refreshing) return;
    for (int i = 0; i < w->n; i++) {
        rchan *ch = w->c[i];
        if (ch == NULL || ch->ac == NULL || ch->state != UP || ch->closing) continue;
        if (redisAsyncCommand(ch->ac, on_slots, ch, "CLUSTER SLOTS") == REDIS_OK) w->refreshing = 1;
        return;
    }
}

/* A cluster's redirection of e (already unlinked from ch) by the error
 * reply err: MOVED (the slot's master updated in the map, a refresh
 * asked), ASK (ASKING then the command, to that master, this once) or
 * TRYAGAIN (the same master again); e is sent there, keeping its
 * deadline.  Past SL_REDIS_REDIRECTS, or to a master with no connection,
 * the policy answers.  1 when err was one of those (e sent or answered),
 * 0 for any other error (e untouched). */
static void follow(rchan *ch, pend *e, const char *err, int moved, int ask);

static int redirect(rchan *ch, pend *e, const char *err)
{
    int moved = strncmp(err, "MOVED ", 6) == 0, ask = strncmp(err, "ASK ", 4) == 0;
    if (!is_redirect(err)) return 0;
    /* a lone DECIDE sent as the open batch: ch's batch is done with it here */
    int flushed = e->flushed;
    e->flushed = 0;
    follow(ch, e, err, moved, ask);
    if (flushed) batch_done(ch);
    return 1;
}

/* redirect's work: e sent where err says, or answered by the policy. */
static void follow(rchan *ch, pend *e, const char *err, int moved, int ask)
{
    redis *r = ch->r;
    wchan *w = ch->w;
    rchan *to = ch;
    if (moved || ask) { /* "MOVED <slot> <host>:<port>" */
        const char *p = err + (moved ? 6 : 4), *sp = strchr(p, ' ');
        const char *colon = sp != NULL ? strrchr(sp + 1, ':') : NULL;
        int64_t slot, port;
        int node = -1;
        if (sp != NULL && colon != NULL &&
            sl_int_parse(p, (size_t)(sp - p), SL_SLOTS - 1, &slot) == 0 &&
            sl_int_parse(colon + 1, strlen(colon + 1), 65535, &port) == 0 && port > 0) {
            /* no host (":6380", an unknown endpoint): the one that answered */
            const char *host = colon > sp + 1 ? sp + 1 : ch->node->url.host;
            size_t hlen = colon > sp + 1 ? (size_t)(colon - sp - 1) : strlen(host);
            node = node_add(r, host, hlen, (int)port);
        }
        if (node >= 0 && moved) {
            w->map->node[slot] = (int16_t)node;
            cluster_refresh(w);
        }
        to = node >= 0 ? conn_get(w, node) : NULL;
    }
    if (to == NULL || to->ac == NULL || e->redirects >= SL_REDIS_REDIRECTS) {
        atomic_fetch_add(&r->errors, 1);
        set_last_error(r, "%.200s%s", err,
                       e->redirects >= SL_REDIS_REDIRECTS ? " (too many redirections)" : "");
        by_policy(ch, e->rq, e->key, e->reqs);
        pend_put(ch, e);
        return;
    }
    e->redirects++;
    e->ch = to;
    e->prev = to->tail;
    e->next = NULL;
    if (to->tail)
        to->tail->next = e;
    else
        to->head = e;
    to->tail = e;
    to->npend++;
    atomic_fetch_add(&r->inflight, 1);
    if (ask) redisAsyncCommand(to->ac, NULL, NULL, "ASKING");
    if (send_pend(to, e) != 0) {
        unlink_pend(to, e);
        by_policy(to, e->rq, e->key, e->reqs);
        pend_put(to, e);
        return;
    }
    if (e == to->head) arm_timer(to);
}

/* The slot of one Redis key. */
static int slot_of_key(int algo, int space, const char *key, size_t len, size_t tag)
{
    char buf[KEYBUF];
    return sl_key_slot(buf, redis_key(buf, algo, space, key, len, tag));
}

/* The slot so far after one more key's: -1 once two differ. */
static int same_slot(int slot, int next) { return slot == -2 || slot == next ? next : -1; }

/* The cluster slot every Redis key of rq is in (SPEC section 9: a
 * request's keys share one tag), -1 when they are in several (a key
 * starting with '}' makes Redis hash the whole key), 0 when rq is
 * malformed (submit refuses it). */
static int request_slot(const redis *r, const sl_breq *rq)
{
    int slot = -2; /* -2: no key yet; -1: two slots */
#define SAME(x) slot = same_slot(slot, (x))
    switch (rq->op) {
    case SL_BOP_DECIDE:
    case SL_BOP_PEEK:
        if (rq->params == NULL || rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY ||
            rq->params->algo < 0 || rq->params->algo >= SL_ALGO_COUNT)
            return 0;
        return slot_of_key((int)rq->params->algo, rq->params->space, rq->key, rq->keylen,
                           rq->keylen);
    case SL_BOP_FORGET:
        if (rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY || rq->algo_lo < 0 ||
            rq->algo_hi > SL_ALGO_COUNT)
            return 0;
        for (int a = rq->algo_lo; a < rq->algo_hi && slot != -1; a++)
            SAME(slot_of_key(a, 0, rq->key, rq->keylen, rq->keylen));
        break;
    case SL_BOP_DECIDE_ALL:
        if (rq->reqs == NULL || rq->nreqs == 0 || rq->nreqs > SL_MAX_BATCH) return 0;
        for (size_t i = 0; i < rq->nreqs && slot != -1; i++) {
            const sl_request *q = &rq->reqs[i];
            if (q->params == NULL || q->key == NULL || q->keylen == 0 || q->keylen > SL_MAX_KEY ||
                q->params->algo < 0 || q->params->algo >= SL_ALGO_COUNT)
                return 0;
            SAME(slot_of_key((int)q->params->algo, q->params->space, q->key, q->keylen, q->keylen));
        }
        break;
    case SL_BOP_CHECK: {
        const sl_check_plan *plan = rq->plan;
        if (plan == NULL || plan->nitems < 0 || plan->nitems > SL_MAX_BATCH) return 0;
        for (int k = 0; k < plan->nitems && slot != -1; k++) {
            const sl_check_item *t = &plan->items[k];
            if (t->zero || t->lead != k) continue;
            if (t->keylen == 0 || t->keylen > SL_MAX_KEY || t->taglen > t->keylen ||
                t->p.algo < 0 || t->p.algo >= SL_ALGO_COUNT)
                return 0;
            SAME(slot_of_key((int)t->p.algo, t->p.space, t->key, t->keylen, t->taglen));
        }
        if (plan->has_pool && slot != -1) {
            char u[KEYBUF];
            size_t tag, n = pool_user_key(u, r, plan, &tag);
            SAME(slot_of_key((int)plan->pool.algo, plan->pool.space, u, n, tag));
        }
        break;
    }
    default: return 0;
    }
#undef SAME
    return slot == -2 ? 0 : slot;
}

/* Routes rq in a cluster: to the connection of its slot's master, or by
 * the policy when the map has none (asking for the map again). */
static void cluster_submit(wchan *w, sl_breq *rq)
{
    int slot = request_slot(w->r, rq);
    int node = slot >= 0 ? w->map->node[slot] : -1;
    rchan *ch = node >= 0 ? conn_get(w, node) : NULL;
    if (ch != NULL) {
        submit(ch, rq, TO_REDIS);
        return;
    }
    if (slot >= 0) cluster_refresh(w);
    for (int i = 0; i < w->n; i++) /* any connection: it only checks rq and answers */
        if (w->c[i] != NULL) {
            submit(w->c[i], rq, slot < 0 ? CROSSSLOT : NO_MASTER);
            return;
        }
    sl__breq_fail(rq, SL_ENOMEM, "out of memory");
}

/* ---- the seam ------------------------------------------------------------ */

/* Frees ch: what is in flight or queued is answered "channel closed". */
static void conn_free(rchan *ch)
{
    if (ch == NULL) return;
    ch->closing = 1;
    if (ch->ac != NULL) {
        redisAsyncContext *ac = ch->ac;
        go_down(ch, "closing");
        redisAsyncFree(ac); /* answers what is in flight: "channel closed" */
    }
    flush_open(ch); /* this turn's DECIDEs, never sent: "channel closed" */
    set_path(ch, 0);
    atomic_fetch_sub(&ch->r->nconn, 1);
    event_free(ch->timer);
    event_free(ch->retry);
    event_free(ch->flush);
    while (ch->free_batch != NULL) {
        batch *b = ch->free_batch;
        ch->free_batch = b->next;
        free(b);
    }
    while (ch->free != NULL) {
        pend *e = ch->free;
        ch->free = e->next;
        free(e);
    }
    free(ch->lplan);
    free(ch->cmd);
    free(ch->cache);
    free(ch);
}

/* A worker's connection to node n on loop, not connected yet; NULL when
 * out of memory. */
static rchan *conn_new(redis *r, rnode *n, struct event_base *loop)
{
    rchan *ch = calloc(1, sizeof *ch);
    if (ch == NULL) return NULL;
    ch->r = r;
    ch->node = n;
    ch->loop = loop;
    ch->latest_sent = INT64_MIN;
    ch->rng = (uint64_t)sl__mono_ns() ^ ((uintptr_t)ch * 0x9e3779b97f4a7c15ULL);
    if (r->o.deny_cache) ch->cache = calloc(SL_REDIS_CACHE_SLOTS, sizeof *ch->cache);
    ch->cmd = malloc(sizeof *ch->cmd);
    ch->flush = event_new(loop, -1, 0, on_flush, ch);
    ch->timer = evtimer_new(loop, on_timer, ch);
    ch->retry = evtimer_new(loop, on_retry, ch);
    if ((r->o.deny_cache && ch->cache == NULL) || ch->timer == NULL || ch->retry == NULL ||
        ch->cmd == NULL || ch->flush == NULL) {
        if (ch->timer) event_free(ch->timer);
        if (ch->retry) event_free(ch->retry);
        if (ch->flush) event_free(ch->flush);
        free(ch->cache);
        free(ch->cmd);
        free(ch);
        return NULL;
    }
    atomic_fetch_add(&r->nconn, 1);
    set_path(ch, n->module_at_start);
    return ch;
}

static sl_bchan *redis_channel(sl_backend *b, void *loop)
{
    redis *r = (redis *)b;
    if (loop == NULL) {
        sl__backend_set_err(b, SL_EINVAL, "the Redis backend needs an event loop");
        return NULL;
    }
    /* a cluster's masters may grow (node_add): room for every one */
    int n = r->cluster ? SL_REDIS_MASTERS_MAX : atomic_load(&r->nnodes);
    wchan *w = calloc(1, sizeof *w + (size_t)n * sizeof w->c[0]);
    if (w != NULL && r->cluster && (w->map = malloc(sizeof *w->map)) != NULL) {
        pthread_mutex_lock(&r->lock);
        memcpy(w->map, r->map, sizeof *w->map);
        pthread_mutex_unlock(&r->lock);
    }
    if (w == NULL || (r->cluster && w->map == NULL)) {
        if (w != NULL) free(w);
        sl__backend_set_err(b, SL_ENOMEM, "out of memory");
        return NULL;
    }
    w->base.b = b;
    w->r = r;
    w->loop = loop;
    w->n = n;
    int known = atomic_load(&r->nnodes); /* a cluster's: the masters found so far */
    for (int i = 0; i < known; i++)
        if ((w->c[i] = conn_new(r, &r->node[i], loop)) == NULL) {
            while (i > 0) conn_free(w->c[--i]);
            free(w->map);
            free(w);
            sl__backend_set_err(b, SL_ENOMEM, "out of memory");
            return NULL;
        } else {
            w->c[i]->w = w;
        }
    /* counted before the first connects: a node is up when every channel's
     * connection to it is */
    atomic_fetch_add(&r->nchan, 1);
    for (int i = 0; i < known; i++) connect_now(w->c[i]);
    return &w->base;
}

static void redis_channel_free(sl_bchan *c)
{
    wchan *w = (wchan *)c;
    for (int i = 0; i < w->n; i++) conn_free(w->c[i]);
    atomic_fetch_sub(&w->r->nchan, 1);
    free(w->map);
    free(w);
}

/* The checks the local engine makes, in its order: 0 or the SL_E* code. */
static int valid_one(const sl_params *p, const char *key, size_t klen, int64_t now, int64_t cost)
{
    int rc = sl_params_check(p);
    if (rc != 0) return rc;
    if (key == NULL || klen == 0 || klen > SL_MAX_KEY) return SL_EKEY;
    if (cost < 0 || cost > SL_MAX_LIMIT) return SL_ECOST;
    if (now <= -SL_MAX_TIME_MS || now >= SL_MAX_TIME_MS) return SL_ETIME;
    return 0;
}

static int valid_all(const sl_breq *rq)
{
    if (rq->reqs == NULL || rq->results == NULL || rq->nreqs == 0 || rq->nreqs > SL_MAX_BATCH)
        return SL_EINVAL;
    for (size_t i = 0; i < rq->nreqs; i++) {
        const sl_request *q = &rq->reqs[i];
        int rc = valid_one(q->params, q->key, q->keylen, rq->now_ms, q->cost);
        if (rc != 0) return rc;
        for (size_t j = 0; j < i; j++) /* one state may not be charged twice */
            if (rq->reqs[j].params->algo == q->params->algo &&
                rq->reqs[j].params->space == q->params->space && rq->reqs[j].keylen == q->keylen &&
                memcmp(rq->reqs[j].key, q->key, q->keylen) == 0)
                return SL_EINVAL;
    }
    return 0;
}

/* RL.CHECK's plan as the script takes it: every counter's parameters
 * valid, the time in range (what the local engine checks first). */
static int valid_plan(const sl_check_plan *plan)
{
    if (plan->nitems < 0 || plan->nitems > SL_MAX_BATCH || plan->n < 1 ||
        plan->n > SL_CHECK_MAX_DESC)
        return SL_EINVAL;
    for (int k = 0; k < plan->nitems; k++) {
        const sl_check_item *t = &plan->items[k];
        if (t->zero || t->lead != k) continue;
        int rc = valid_one(&t->p, t->key, t->keylen, plan->now_ms, t->cost);
        if (rc != 0) return rc;
    }
    if (plan->has_pool) return valid_one(&plan->pool, "p", 1, plan->now_ms, plan->cost);
    return 0;
}

/* Submits rq on ch (where: TO_REDIS); in a cluster, a valid rq whose
 * slot has no master is answered by the policy (NO_MASTER), one whose keys
 * are in several slots is refused (CROSSSLOT). */
static void submit(rchan *ch, sl_breq *rq, int where)
{
    redis *r = ch->r;
    int rc = 0;
    rq->err[0] = '\0';
    switch (rq->op) {
    case SL_BOP_DECIDE:
    case SL_BOP_PEEK:
        if (rq->params == NULL) {
            rc = SL_EINVAL;
            break;
        }
        rc = valid_one(rq->params, rq->key, rq->keylen, rq->now_ms, rq->cost);
        if (rc == 0 && cache_answer(ch, rq)) return;
        break;
    case SL_BOP_FORGET:
        if (rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY)
            rc = SL_EKEY;
        else if (rq->algo_lo < 0 || rq->algo_hi > SL_ALGO_COUNT || rq->algo_lo >= rq->algo_hi)
            rc = SL_EINVAL;
        else
            cache_forget(ch, rq->key, rq->keylen);
        break;
    case SL_BOP_DECIDE_ALL:
        rc = valid_all(rq);
        for (size_t i = 0; rc == 0 && i < rq->nreqs; i++) /* they may charge: see the top */
            cache_forget(ch, rq->reqs[i].key, rq->reqs[i].keylen);
        break;
    case SL_BOP_CHECK:
        /* the plan's counters are space 1, which no request the deny
         * cache answers (space 0) shares: nothing there to drop */
        rc = rq->plan == NULL || rq->outcome == NULL ? SL_EINVAL : valid_plan(rq->plan);
        break;
    default: rc = SL_EINVAL; break;
    }
    if (rc != 0) {
        rq->rc = rc;
        rq->cb(rq);
        return;
    }
    if (where == CROSSSLOT) {
        sl__breq_fail(rq, SL_EINVAL,
                      "the keys of this request are in several Redis Cluster slots: "
                      "decided all-or-none only in one (docs/fleet.md, \"Redis Cluster\")");
        return;
    }
    if (ch->ac == NULL || where == NO_MASTER) { /* DOWN (or no master known): the policy */
        by_policy(ch, rq, rq->key, rq->reqs);
        return;
    }
    if (ch->npend >= SL_REDIS_PENDING_MAX) {
        /* Redis is not keeping up (slow, or stopped until the timeout
         * drops it): what waits for it is bounded, the rest is the
         * policy's, as when it is down */
        atomic_fetch_add(&r->errors, 1);
        set_last_error(r,
                       "%d requests wait for Redis on one connection (the bound): "
                       "answered by the policy",
                       SL_REDIS_PENDING_MAX);
        by_policy(ch, rq, rq->key, rq->reqs);
        return;
    }
    pend *e = ch->free;
    if (e != NULL)
        ch->free = e->next;
    else if ((e = calloc(1, sizeof *e)) == NULL) {
        sl__breq_fail(rq, SL_ENOMEM, "out of memory");
        return;
    }
    e->rq = rq;
    e->ch = ch;
    e->resent = 0;
    e->redirects = 0;
    e->flushed = 0;
    e->keys = NULL;
    e->reqs = NULL;
    if (rq->op == SL_BOP_DECIDE_ALL) { /* the keys, copied: the caller's may go */
        size_t total = 0;
        for (size_t i = 0; i < rq->nreqs; i++) total += rq->reqs[i].keylen;
        e->keys = malloc(total);
        e->reqs = malloc(rq->nreqs * sizeof *e->reqs);
        if (e->keys == NULL || e->reqs == NULL) {
            pend_put(ch, e);
            sl__breq_fail(rq, SL_ENOMEM, "out of memory");
            return;
        }
        for (size_t i = 0, off = 0; i < rq->nreqs; i++) {
            e->reqs[i] = rq->reqs[i];
            memcpy(e->keys + off, rq->reqs[i].key, rq->reqs[i].keylen);
            e->reqs[i].key = e->keys + off;
            off += rq->reqs[i].keylen;
        }
    } else if (rq->op != SL_BOP_CHECK) { /* a CHECK's plan lives until its answer */
        memcpy(e->key, rq->key, rq->keylen);
    }
    if (ch->cache != NULL && rq->op == SL_BOP_DECIDE)
        e->gen = ch->cache[slot_of(e->key, rq->keylen, rq->params->space)].gen;
    int64_t t = rq->op == SL_BOP_CHECK ? rq->plan->now_ms : rq->now_ms;
    e->latest = t >= ch->latest_sent;
    if (e->latest) ch->latest_sent = t;
    e->deadline = sl__mono_ms() + r->o.timeout_ms;
    e->prev = ch->tail;
    e->next = NULL;
    if (ch->tail)
        ch->tail->next = e;
    else
        ch->head = e;
    ch->tail = e;
    ch->npend++;
    atomic_fetch_add(&r->inflight, 1);
    /* the script's batches; the module's RL.ALLOWs go as they come (hiredis
     * writes a turn's commands in one write, Redis reads them in one) */
    if (rq->op == SL_BOP_DECIDE && !ch->module && queue(ch, e) == 0) {
        if (e == ch->head) arm_timer(ch);
        return;
    }
    flush_open(ch); /* this turn's DECIDEs before it: Redis runs them in order */
    if (ch->ac == NULL || send_pend(ch, e) != 0) {
        unlink_pend(ch, e);
        by_policy(ch, rq, e->key, e->reqs);
        pend_put(ch, e);
        return;
    }
    if (e == ch->head) arm_timer(ch);
}

/* The hash tag of rq, which names the node that owns it: the key for
 * DECIDE, PEEK and FORGET (every Redis key they touch is "{key}"), the
 * first request's key for DECIDE_ALL (redis_submit refuses one whose
 * keys are on several nodes), the domain for CHECK (every
 * counter of a plan carries it: check.h).  *len = 0 when rq touches no
 * key (a CHECK of L = 0 counters only): any node will do. */
static const char *tag_of(const sl_breq *rq, size_t *len)
{
    switch (rq->op) {
    case SL_BOP_DECIDE_ALL:
        *len = rq->nreqs > 0 && rq->reqs != NULL ? rq->reqs[0].keylen : 0;
        return *len ? rq->reqs[0].key : NULL;
    case SL_BOP_CHECK:
        for (int k = 0; rq->plan != NULL && k < rq->plan->nitems; k++) {
            const sl_check_item *t = &rq->plan->items[k];
            if (t->zero || t->lead != k) continue;
            *len = t->taglen;
            return t->key;
        }
        *len = 0;
        return NULL;
    default: *len = rq->key != NULL ? rq->keylen : 0; return rq->key;
    }
}

/* Routes rq to the connection of the node that owns its hash tag. */
static void redis_submit(sl_bchan *c, sl_breq *rq)
{
    wchan *w = (wchan *)c;
    if (w->r->cluster) {
        cluster_submit(w, rq);
        return;
    }
    if (w->n == 1) {
        submit(w->c[0], rq, TO_REDIS);
        return;
    }
    size_t len;
    const char *tag = tag_of(rq, &len);
    int node = len > 0 ? sl_ring_node(w->r->ring, tag, len) : 0;
    if (rq->op == SL_BOP_DECIDE_ALL && rq->reqs != NULL && rq->nreqs <= SL_MAX_BATCH) {
        /* all-or-none is one script call on one server */
        for (size_t i = 1; i < rq->nreqs; i++) {
            const sl_request *q = &rq->reqs[i];
            if (q->key != NULL && q->keylen > 0 &&
                sl_ring_node(w->r->ring, q->key, q->keylen) != node) {
                sl__breq_fail(rq, SL_EINVAL,
                              "keys %zu and 1 are on different Redis servers of the ring: "
                              "decided all-or-none only on one",
                              i + 1);
                return;
            }
        }
    }
    submit(w->c[node], rq, TO_REDIS);
}

static void redis_stats(sl_backend *b, sl_backend_stats *out)
{
    (void)b;
    memset(out, 0, sizeof *out); /* Redis keeps the state: INFO of Redis tells */
}

static void redis_free_all(redis *r);

static void redis_free(sl_backend *b) { redis_free_all((redis *)b); }

static void info_lines(sl_backend *b, void (*line)(void *arg, const char *name, const char *value),
                       void *arg);
static int metrics(sl_backend *b, struct evbuffer *out);

static const sl_backend_ops redis_ops = {
    "redis",     redis_channel, redis_channel_free, redis_submit,          redis_stats,
    redis_free,  info_lines,    metrics,            sl_backend_redis_info,
};

/* One command on the start-up check's connection: the reply, or NULL with
 * err set ("what: why"). */
static redisReply *start_cmd(redisContext *c, const char *shown, const char *what, char *err,
                             size_t errlen, int argc, const char **argv, const size_t *argvlen)
{
    redisReply *x = redisCommandArgv(c, argc, argv, argvlen);
    if (x == NULL) {
        snprintf(err, errlen, "Redis at %s: %s: %s", shown, what,
                 c->errstr[0] ? c->errstr : "no answer");
        return NULL;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "Redis at %s refused %s: %s", shown, what, x->str);
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

/* The handshake's test for the module on the start-up check's connection:
 * 1 when RL.CHECKPLAN exists and RL.PEEK answers (with AT when client
 * time is trusted), else 0 -- an error (no such command, an ACL's NOPERM)
 * is "no module", with what Redis said into why ("": no module at all). */
static int start_probe(redisContext *c, int trust_client_time, const char *key, char *why,
                       size_t cap)
{
    redisReply *x = redisCommand(c, "COMMAND INFO RL.CHECKPLAN");
    int ok = cmdinfo_says(x, why, cap) == 1;
    if (x != NULL) freeReplyObject(x);
    if (!ok) return 0;
    x = trust_client_time
            ? redisCommand(c, "RL.PEEK %s 1 1000 AT %lld", key, (long long)sl__wall_ms())
            : redisCommand(c, "RL.PEEK %s 1 1000", key);
    ok = probe_says(x, why, cap);
    if (x != NULL) freeReplyObject(x);
    return ok;
}

/* The start-up check of one node nd: reachable, the password, the db, the
 * script (its SHA1 into sha), the module (nd->module_at_start, told to
 * on_path).  0, or -1 with err set. */
static int check_node(redis *r, rnode *nd, const char *probe, const sl_redis_opts *o, char *sha,
                      char *err, size_t errlen)
{
    const sl_redis_url *u = &nd->url;
    int64_t timeout_ms = o->timeout_ms;
    int64_t ms = timeout_ms > SL_REDIS_HANDSHAKE_MS ? timeout_ms : SL_REDIS_HANDSHAKE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(u->host, u->port, tv);
    redisReply *x = NULL;
    int ok = 0;
    if (c == NULL || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", u->shown,
                 c ? c->errstr : "out of memory");
        goto out;
    }
    redisSetTimeout(c, tv);
    sl_redis_rbound rb = {0}; /* the reply bounds here too (no async context to check) */
    sl__redis_reader_bound(c->reader, &rb);
    if (u->pass[0] != '\0') {
        const char *av[3] = {"AUTH", u->user, u->pass};
        size_t al[3] = {4, strlen(u->user), strlen(u->pass)};
        int user = u->user[0] != '\0';
        const char **a = user ? av : (const char *[]){"AUTH", u->pass};
        const size_t *l = user ? al : (const size_t[]){4, strlen(u->pass)};
        if ((x = start_cmd(c, u->shown, "AUTH (wrong user or password?)", err, errlen, user ? 3 : 2,
                           a, l)) == NULL)
            goto out;
        freeReplyObject(x);
    }
    if (u->db != 0) {
        char db[16];
        int n = snprintf(db, sizeof db, "%d", u->db);
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)n};
        if ((x = start_cmd(c, u->shown, "SELECT of the db", err, errlen, 2, av, al)) == NULL)
            goto out;
        freeReplyObject(x);
    }
    const char *av[3] = {"SCRIPT", "LOAD", sl_redis_script};
    size_t al[3] = {6, 4, (size_t)(sl_redis_script_end - sl_redis_script)};
    if ((x = start_cmd(c, u->shown, "SCRIPT LOAD", err, errlen, 3, av, al)) == NULL) goto out;
    if (x->type != REDIS_REPLY_STRING || x->len != SHA_LEN) {
        snprintf(err, errlen, "Redis at %s: SCRIPT LOAD did not answer a SHA1", u->shown);
        freeReplyObject(x);
        goto out;
    }
    memcpy(sha, x->str, SHA_LEN);
    freeReplyObject(x);
    char why[320];
    nd->module_at_start = start_probe(c, o->trust_client_time, probe, why, sizeof why);
    tell_path(r, nd, nd->module_at_start, why);
    ok = 1;
out:
    if (c != NULL) redisFree(c);
    return ok ? 0 : -1;
}

/* A cluster's slot map at start: CLUSTER SLOTS from the first of the n
 * seeds u[] that answers, into r->map and r->node (the masters).  0, or
 * -1 with err set (the last seed's failure). */
static int cluster_start(redis *r, const sl_redis_url *u, int n, char *err, size_t errlen)
{
    int64_t ms = r->o.timeout_ms > SL_REDIS_HANDSHAKE_MS ? r->o.timeout_ms : SL_REDIS_HANDSHAKE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    for (int i = 0; i < n; i++) {
        redisContext *c = redisConnectWithTimeout(u[i].host, u[i].port, tv);
        redisReply *x = NULL;
        if (c == NULL || c->err) {
            snprintf(err, errlen, "cannot connect to Redis Cluster seed %s: %s", u[i].shown,
                     c ? c->errstr : "out of memory");
            if (c != NULL) redisFree(c);
            continue;
        }
        redisSetTimeout(c, tv);
        sl_redis_rbound rb = {0}; /* the reply bounds (redis/reply.h) */
        sl__redis_reader_bound(c->reader, &rb);
        if (u[i].pass[0] != '\0') {
            x = u[i].user[0] != '\0' ? redisCommand(c, "AUTH %s %s", u[i].user, u[i].pass)
                                     : redisCommand(c, "AUTH %s", u[i].pass);
            int bad = x == NULL || x->type == REDIS_REPLY_ERROR;
            snprintf(err, errlen,
                     "Redis Cluster seed %s refused AUTH (wrong user or password?): %s", u[i].shown,
                     x == NULL ? c->errstr
                     : bad     ? x->str
                               : "");
            if (x != NULL) freeReplyObject(x);
            if (bad) {
                redisFree(c);
                continue;
            }
        }
        x = redisCommand(c, "CLUSTER SLOTS");
        int rc = parse_slots(r, x, u[i].host, r->map);
        if (rc != 0)
            snprintf(err, errlen, "Redis Cluster seed %s: CLUSTER SLOTS: %s", u[i].shown,
                     x == NULL                      ? c->errstr
                     : x->type == REDIS_REPLY_ERROR ? x->str
                                                    : "not a slot map");
        if (x != NULL) freeReplyObject(x);
        redisFree(c);
        if (rc == 0 && atomic_load(&r->nnodes) == 0) {
            snprintf(err, errlen, "Redis Cluster seed %s: no slot has a master", u[i].shown);
            return -1;
        }
        if (rc == 0) return 0;
        sl_slotmap_clear(r->map);
    }
    return -1;
}

static void redis_free_all(redis *r)
{
    sl_store_free(r->store);
    sl_ring_free(r->ring);
    free(r->map);
    free(r->node);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

sl_backend *sl_backend_redis_new(const sl_redis_opts *o, char *err, size_t errlen)
{
    redis *r = calloc(1, sizeof *r);
    sl_redis_url *u = calloc(SL_RING_MAX, sizeof *u);
    if (r == NULL || u == NULL || pthread_mutex_init(&r->lock, NULL) != 0) {
        snprintf(err, errlen, "out of memory");
        free(r);
        free(u);
        return NULL;
    }
    char why[600];
    int n = 0;
    if (sl_redis_urls_parse(o->url, strlen(o->url), u, &n, why, sizeof why) != 0) {
        snprintf(err, errlen, "invalid --backend %s", why);
        free(u);
        redis_free_all(r);
        return NULL;
    }
    r->o = *o;
    r->o.url = NULL;
    if (r->o.timeout_ms < 1) r->o.timeout_ms = 1;
    if (r->o.fleet_size < 1) r->o.fleet_size = 1;
    r->node = calloc(u[0].cluster ? SL_REDIS_MASTERS_MAX : SL_RING_MAX, sizeof *r->node);
    if (r->node != NULL && u[0].cluster) { /* the masters, from a seed's CLUSTER SLOTS */
        r->cluster = 1;
        r->seed = u[0];
        size_t used = (size_t)snprintf(r->shown, sizeof r->shown, "redis-cluster://%s%s", u[0].user,
                                       u[0].pass[0] ? ":***@" : "");
        for (int i = 0; i < n && used < sizeof r->shown; i++)
            used += (size_t)snprintf(r->shown + used, sizeof r->shown - used, "%s%s%s%s:%d",
                                     i ? "," : "", strchr(u[i].host, ':') ? "[" : "", u[i].host,
                                     strchr(u[i].host, ':') ? "]" : "", u[i].port);
        if ((r->map = malloc(sizeof *r->map)) == NULL) {
            snprintf(err, errlen, "out of memory");
        } else if (cluster_start(r, u, n, err, errlen) != 0) {
            free(u);
            redis_free_all(r);
            return NULL;
        }
        n = 0; /* the masters are in r->node already */
    }
    if (!r->cluster) atomic_store(&r->nnodes, n);
    const char *ids[SL_RING_MAX];
    for (int i = 0; r->node != NULL && i < n; i++) {
        rnode *nd = &r->node[i];
        nd->url = u[i];
        sl__redis_url_id(&u[i], nd->id, sizeof nd->id);
        ids[i] = nd->id;
        atomic_store(&nd->up, 1); /* reachable now (below); the channels connect next */
        size_t used = strlen(r->shown);
        snprintf(r->shown + used, sizeof r->shown - used, "%s%s", i ? "," : "", u[i].shown);
    }
    free(u);
    if (r->node == NULL || (r->cluster && r->map == NULL) ||
        (n > 1 && (r->ring = sl_ring_new(ids, n)) == NULL)) {
        snprintf(err, errlen, "out of memory");
        redis_free_all(r);
        return NULL;
    }
    /* the start-up check of every node: the script is the same text, so
     * its SHA1 is the same on every server */
    for (int i = 0; i < atomic_load(&r->nnodes); i++) {
        char probe[64];
        probe_key(probe, sizeof probe, r->cluster ? r->map : NULL, i);
        if (check_node(r, &r->node[i], probe, o, r->sha, err, errlen) != 0) {
            redis_free_all(r);
            return NULL;
        }
    }
    if (r->o.policy == SL_REDIS_LOCAL) {
        sl_store_opts so = {.max_bytes = (size_t)o->local_max_bytes, .on_full = o->local_on_full};
        r->store = sl_store_new(&so, NULL);
        if (r->store == NULL) {
            snprintf(err, errlen, "out of memory");
            redis_free_all(r);
            return NULL;
        }
    }
    r->base.ops = &redis_ops;
    r->base.flags = 0;
    /* its entry and its command in hiredis's output buffer (with the
     * callback's node): a CHECK's command, the longest, is ~1 KB */
    r->base.req_bytes = sizeof(pend) + 1024;
    return &r->base;
}

sl_backend *sl_backend_open(const sl_backend_opts *o, char *err, size_t errlen)
{
    if (strcmp(o->url, "local") == 0) {
        sl_backend *b = sl_backend_local_new(o->store);
        if (b == NULL) snprintf(err, errlen, "out of memory");
        return b;
    }
    return sl_backend_redis_new(o, err, errlen);
}

/* Whether node i decides anything: every server of one Redis or a ring;
 * in a cluster, a master that serves a slot in the latest map (one that
 * lost its slots -- a failover, a migration -- no longer counts). */
static int serves(redis *r, int i)
{
    int any = 0;
    if (!r->cluster) return 1;
    pthread_mutex_lock(&r->lock);
    for (int k = 0; k < SL_SLOTS && !any; k++) any = r->map->node[k] == i;
    pthread_mutex_unlock(&r->lock);
    return any;
}

int sl_backend_redis_info(sl_backend *b, sl_redis_info *out)
{
    if (b == NULL || b->ops != &redis_ops) return -1;
    redis *r = (redis *)b;
    memset(out, 0, sizeof *out);
    snprintf(out->url, sizeof out->url, "%s", r->shown);
    out->up = 1; /* up while every node is; down since the first that is not */
    for (int i = 0; i < r->nnodes; i++) {
        int64_t since = atomic_load(&r->node[i].down_since_ms);
        if (atomic_load(&r->node[i].up) || !serves(r, i)) continue;
        if (out->up || (since != 0 && since < out->down_since_ms)) out->down_since_ms = since;
        out->up = 0;
    }
    out->nodes = r->nnodes;
    out->errors = atomic_load(&r->errors);
    out->timeouts = atomic_load(&r->timeouts);
    out->reconnects = atomic_load(&r->reconnects);
    for (int i = 0; i < 3; i++) out->fallback[i] = atomic_load(&r->fallback[i]);
    out->cache_hits = atomic_load(&r->cache_hits);
    out->inflight = atomic_load(&r->inflight);
    out->policy = sl_backend_policy_name(r->o.policy);
    out->timeout_ms = r->o.timeout_ms;
    out->fleet_size = r->o.fleet_size;
    out->deny_cache = r->o.deny_cache;
    int nconn = atomic_load(&r->nconn), nmod = atomic_load(&r->nmod), at_start = 0;
    for (int i = 0; i < r->nnodes; i++) at_start += r->node[i].module_at_start;
    out->path = nconn == 0      ? (at_start == 0 ? "script" : at_start == r->nnodes ? "module" : "mixed")
                : nmod == 0     ? "script"
                : nmod == nconn ? "module"
                                : "mixed";
    out->module_channels = nmod;
    pthread_mutex_lock(&r->lock);
    snprintf(out->last_error, sizeof out->last_error, "%s", r->last_error);
    pthread_mutex_unlock(&r->lock);
    return 0;
}

int sl_backend_redis_node(sl_backend *b, int i, sl_redis_node_info *out)
{
    if (b == NULL || b->ops != &redis_ops) return -1;
    redis *r = (redis *)b;
    if (i < 0 || i >= r->nnodes) return -1;
    memset(out, 0, sizeof *out);
    snprintf(out->url, sizeof out->url, "%s", r->node[i].url.shown);
    out->up = atomic_load(&r->node[i].up);
    out->down_since_ms = atomic_load(&r->node[i].down_since_ms);
    out->share = r->ring != NULL ? sl_ring_share(r->ring, i) : 1.0;
    out->slots = -1;
    if (r->cluster) { /* the slots it serves in the latest map */
        int slots = 0;
        pthread_mutex_lock(&r->lock);
        for (int k = 0; k < SL_SLOTS; k++) slots += r->map->node[k] == i;
        pthread_mutex_unlock(&r->lock);
        out->share = (double)slots / SL_SLOTS;
        out->slots = slots;
    }
    return 0;
}

/* INFO's Backend section (backend.h: ops.info): the state, the options,
 * the counters, then one line per server, each with its share of the
 * ring (a cluster's master: of the slots, and their number). */
static void info_lines(sl_backend *b, void (*line)(void *arg, const char *name, const char *value),
                       void *arg)
{
    sl_redis_info ri;
    char v[SL_REDIS_URL_MAX + 64];
    if (sl_backend_redis_info(b, &ri) != 0) return;
#define NUM(name, x) (snprintf(v, sizeof v, "%llu", (unsigned long long)(x)), line(arg, name, v))
    line(arg, "backend_url", ri.url);
    line(arg, "backend_status", ri.up ? "up" : "down");
    NUM("backend_down_since_unix_ms", ri.down_since_ms);
    NUM("backend_timeout_ms", ri.timeout_ms);
    line(arg, "backend_on_error", ri.policy);
    NUM("backend_fleet_size", ri.fleet_size);
    line(arg, "backend_deny_cache", ri.deny_cache ? "yes" : "no");
    line(arg, "backend_redis_path", ri.path);
    NUM("backend_errors", ri.errors);
    NUM("backend_timeouts", ri.timeouts);
    NUM("backend_reconnects", ri.reconnects);
    NUM("backend_fallback_deny", ri.fallback[SL_REDIS_DENY]);
    NUM("backend_fallback_allow", ri.fallback[SL_REDIS_ALLOW]);
    NUM("backend_fallback_local", ri.fallback[SL_REDIS_LOCAL]);
    NUM("backend_deny_cache_hits", ri.cache_hits);
    NUM("backend_inflight", ri.inflight);
    line(arg, "backend_last_error", ri.last_error);
    NUM("backend_nodes", ri.nodes);
#undef NUM
    sl_redis_node_info ni;
    for (int i = 0; sl_backend_redis_node(b, i, &ni) == 0; i++) {
        char name[32];
        snprintf(name, sizeof name, "backend_node%d", i);
        int len = snprintf(v, sizeof v, "url=%s,status=%s,share=%.2f", ni.url,
                           ni.up ? "up" : "down", ni.share * 100);
        if (ni.slots >= 0 && len > 0 && (size_t)len < sizeof v) /* a cluster's */
            snprintf(v + len, sizeof v - (size_t)len, ",slots=%d", ni.slots);
        line(arg, name, v);
    }
}

static int metrics(sl_backend *b, struct evbuffer *out)
{
    sl_redis_info in;
    if (sl_backend_redis_info(b, &in) != 0) return 0;
    int rc = 0;
#define FAMILY(name, type, help)                                                                   \
    rc |= evbuffer_add_printf(out, "# HELP " name " " help "\n# TYPE " name " " type "\n") < 0
#define SAMPLE(fmt, ...) rc |= evbuffer_add_printf(out, fmt "\n", __VA_ARGS__) < 0
    FAMILY("sluice_backend_up", "gauge", "1 while every worker has its Redis connection.");
    SAMPLE("sluice_backend_up %d", in.up);
    FAMILY("sluice_backend_down_since_seconds", "gauge",
           "Wall-clock time the Redis backend went down; 0 when up.");
    SAMPLE("sluice_backend_down_since_seconds %.3f", (double)in.down_since_ms / 1e3);
    FAMILY("sluice_backend_errors_total", "counter", "Redis error replies and lost connections.");
    SAMPLE("sluice_backend_errors_total %llu", (unsigned long long)in.errors);
    FAMILY("sluice_backend_timeouts_total", "counter",
           "Requests Redis did not answer within --backend-timeout.");
    SAMPLE("sluice_backend_timeouts_total %llu", (unsigned long long)in.timeouts);
    FAMILY("sluice_backend_reconnects_total", "counter", "Redis connections made again.");
    SAMPLE("sluice_backend_reconnects_total %llu", (unsigned long long)in.reconnects);
    FAMILY("sluice_backend_fallback_total", "counter",
           "Requests answered by --on-backend-error, by policy.");
    for (int i = 0; i < 3; i++)
        SAMPLE("sluice_backend_fallback_total{policy=\"%s\"} %llu", sl_backend_policy_name(i),
               (unsigned long long)in.fallback[i]);
    FAMILY("sluice_backend_deny_cache_hits_total", "counter",
           "Requests the local deny cache denied without asking Redis.");
    SAMPLE("sluice_backend_deny_cache_hits_total %llu", (unsigned long long)in.cache_hits);
    FAMILY("sluice_backend_inflight", "gauge", "Requests sent to Redis, not yet answered.");
    SAMPLE("sluice_backend_inflight %llu", (unsigned long long)in.inflight);
    FAMILY("sluice_backend_module_connections", "gauge",
           "Redis connections sending the sluice module's commands instead of the script.");
    SAMPLE("sluice_backend_module_connections %d", in.module_channels);
#undef FAMILY
#undef SAMPLE
    return rc ? -1 : 0;
}
