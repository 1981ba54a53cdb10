/*
 * sentinel.c -- redis-sentinel://: the master found through Redis
 * Sentinel, and followed when it changes (docs/fleet.md, "Redis
 * Sentinel").
 *
 * The backend has one node, the master.  At start the Sentinels are asked
 * in the URL's order, synchronously, `SENTINEL get-master-addr-by-name
 * NAME`: the first that names a master gives it, and the master gets the
 * start-up check of any redis:// server plus `ROLE` (backend_redis.c);
 * no Sentinel naming one, or a master that is not one, refuses the start.
 *
 * Running, every connection to the master asks first: each time a
 * channel connects (sl__redis_connect_now), it asks the Sentinels, in
 * order, on its own loop (one async connection at a time, each within
 * SL_REDIS_HANDSHAKE_MS), then connects to the master named, whose
 * handshake begins with ROLE (conn.c: anything but a master drops the
 * connection).  A lost connection, a handshake that fails, a ROLE that is
 * not master, a READONLY or LOADING reply (conn.c, sl__redis_demoted)
 * make the channel DOWN: its requests go to --on-backend-error at once,
 * and after the backoff of any lost connection (SL_REDIS_BACKOFF_BASE
 * doubling up to SL_REDIS_BACKOFF_CAP, with jitter) it asks the Sentinels
 * again.  No Sentinel answering is the same: DOWN, the backoff, a new
 * round.  So nothing loops faster than the backoff, and a failover is
 * followed once the Sentinels name the new master.
 *
 * A master ROLE confirmed at another address than the last one confirmed
 * counts one failover followed (INFO backend_sentinel_failovers, /metrics
 * sluice_backend_sentinel_failovers_total), whichever channel saw it
 * first.  sluiced does not subscribe to +switch-master: the connection a
 * failover breaks (Sentinel kills the old master's clients, or the master
 * is dead) is what starts the asking.
 *
 * Threads: a channel's asking is its worker's only; the shared part
 * (struct sl_sentinel) is read-only but for what its lock guards and its
 * counters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <hiredis/adapters/libevent.h>

#include "redis/redis_int.h"
#include "redis/sentinel.h"

struct sl_sentinel {
    sl_redis_sentinel cfg;       /* the URL: read only while the backend runs */
    pthread_mutex_t lock;        /* guards master */
    char master[SL_SENTINEL_HOST + 8]; /* host:port of the master ROLE last confirmed */
    _Atomic uint64_t failovers;  /* times it was confirmed at another address */
    _Atomic uint64_t asked;      /* SENTINEL get-master-addr-by-name sent, all channels */
};

/* A channel's asking (rchan.sen): one Sentinel connection at a time. */
struct sl_sentinel_ask {
    rchan *ch;
    struct sl_sentinel *s;
    redisAsyncContext *ac; /* to Sentinel `next`; NULL when not asking */
    int next;              /* the Sentinel being asked, 0..cfg.n */
    struct event *timer;   /* its deadline */
    sl_redis_rbound rb;    /* its connection's reply bounds (redis/reply.h) */
    int have;              /* url holds a master not yet connected to */
    sl_redis_url url;      /* the master to connect to: cfg.master, at the host named */
    char why[240];         /* this round's last failure, for the message */
};

static void addr_of(char *buf, size_t cap, const char *host, int port)
{
    int b = strchr(host, ':') != NULL;
    snprintf(buf, cap, "%s%s%s:%d", b ? "[" : "", host, b ? "]" : "", port);
}

struct sl_sentinel *sl__sentinel_new(const sl_redis_sentinel *cfg)
{
    struct sl_sentinel *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->cfg = *cfg;
    return s;
}

void sl__sentinel_free(struct sl_sentinel *s)
{
    if (s == NULL) return;
    pthread_mutex_destroy(&s->lock);
    free(s);
}

const char *sl__sentinel_shown(const struct sl_sentinel *s) { return s->cfg.shown; }

/* ---- at start ------------------------------------------------------------ */

int sl__sentinel_start(redis *r, sl_redis_url *master, char *err, size_t errlen)
{
    struct sl_sentinel *s = r->sentinel;
    int64_t ms = r->o.timeout_ms > SL_REDIS_HANDSHAKE_MS ? r->o.timeout_ms : SL_REDIS_HANDSHAKE_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    char whys[600] = "", at[SL_SENTINEL_HOST + 8];
    size_t used = 0;
    for (int i = 0; i < s->cfg.n; i++) {
        char why[300], host[SL_SENTINEL_HOST];
        int port = 0, rc = -1;
        addr_of(at, sizeof at, s->cfg.at[i].host, s->cfg.at[i].port);
        redisContext *c = redisConnectWithTimeout(s->cfg.at[i].host, s->cfg.at[i].port, tv);
        if (c == NULL || c->err) {
            snprintf(why, sizeof why, "connect: %.200s", c ? c->errstr : "out of memory");
        } else {
            redisSetTimeout(c, tv);
            sl_redis_rbound rb = {0};
            sl__redis_reader_bound(c->reader, &rb);
            redisReply *x = redisCommand(c, "SENTINEL get-master-addr-by-name %s", s->cfg.name);
            atomic_fetch_add(&s->asked, 1);
            rc = sl__sentinel_addr_says(x, host, &port, why, sizeof why);
            if (x == NULL) snprintf(why, sizeof why, "%.200s", c->errstr[0] ? c->errstr : rb.why);
            if (rc == 0) snprintf(why, sizeof why, "knows no master '%.200s'", s->cfg.name);
            if (x != NULL) freeReplyObject(x);
        }
        if (c != NULL) redisFree(c);
        if (rc == 1) {
            *master = s->cfg.master;
            snprintf(master->host, sizeof master->host, "%s", host);
            master->port = port;
            sl__redis_url_show(master);
            addr_of(s->master, sizeof s->master, host, port);
            return 0;
        }
        if (used < sizeof whys)
            used += (size_t)snprintf(whys + used, sizeof whys - used, "%sSentinel %s: %s",
                                     i ? "; " : "", at, why);
    }
    snprintf(err, errlen, "no Sentinel of %s named the master '%s': %s", s->cfg.shown, s->cfg.name,
             whys);
    return -1;
}

/* ---- a channel's asking -------------------------------------------------- */

static void ask_next(struct sl_sentinel_ask *a);

/* The Sentinel being asked failed (why): its connection closed (free_it:
 * by us; else hiredis frees it), the next one asked. */
static void failed(struct sl_sentinel_ask *a, int free_it, const char *why)
{
    redisAsyncContext *ac = a->ac;
    char at[SL_SENTINEL_HOST + 8];
    a->ac = NULL;
    evtimer_del(a->timer);
    if (free_it && ac != NULL) redisAsyncFree(ac); /* in a callback: freed after it */
    addr_of(at, sizeof at, a->s->cfg.at[a->next].host, a->s->cfg.at[a->next].port);
    snprintf(a->why, sizeof a->why, "Sentinel %.100s: %.80s", at, why);
    a->next++;
    ask_next(a);
}

static void on_addr(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    struct sl_sentinel_ask *a = ac->data;
    const redisReply *x = reply;
    char host[SL_SENTINEL_HOST], why[300];
    int port;
    if (x == NULL || a->ac != ac) return;
    int rc = sl__sentinel_addr_says(x, host, &port, why, sizeof why);
    if (rc != 1) {
        if (rc == 0) snprintf(why, sizeof why, "knows no master '%.200s'", a->s->cfg.name);
        failed(a, 1, why);
        return;
    }
    a->ac = NULL; /* done with it: freed once this returns */
    evtimer_del(a->timer);
    redisAsyncFree(ac);
    a->url = a->s->cfg.master;
    snprintf(a->url.host, sizeof a->url.host, "%s", host);
    a->url.port = port;
    sl__redis_url_show(&a->url);
    a->have = 1;
    sl__redis_connect_now(a->ch);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct sl_sentinel_ask *a = ac->data;
    char why[260];
    if (status == REDIS_OK || a->ac != ac) return;
    snprintf(why, sizeof why, "connect: %.200s", ac->errstr);
    failed(a, 0, why); /* hiredis frees ac after this returns */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct sl_sentinel_ask *a = ac->data;
    char why[260];
    (void)status;
    if (a->ac != ac) return; /* closed by us */
    snprintf(why, sizeof why, "connection lost: %.200s",
             a->rb.why[0] ? a->rb.why : ac->errstr[0] ? ac->errstr : "closed");
    failed(a, 0, why);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    char why[80];
    snprintf(why, sizeof why, "no answer within %d ms", SL_REDIS_HANDSHAKE_MS);
    failed(arg, 1, why);
}

/* The read event of a Sentinel connection: as conn.c's, what the reader
 * buffers is bounded (a string claiming gigabytes is refused early). */
static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct sl_sentinel_ask *a = arg;
    redisAsyncContext *ac = a->ac;
    if (ac == NULL) return;
    redisAsyncHandleRead(ac);
    if (a->ac != ac || sl__redis_reader_pending(ac->c.reader) <= SL_REDIS_REPLY_PENDING) return;
    failed(a, 1, "reply refused: an item too long");
}

/* Asks Sentinel a->next, or the next that can be asked; past the last,
 * the channel goes DOWN (its backoff, then a new round). */
static void ask_next(struct sl_sentinel_ask *a)
{
    struct sl_sentinel *s = a->s;
    for (; a->next < s->cfg.n; a->next++) {
        redisAsyncContext *ac = redisAsyncConnect(s->cfg.at[a->next].host, s->cfg.at[a->next].port);
        char at[SL_SENTINEL_HOST + 8];
        addr_of(at, sizeof at, s->cfg.at[a->next].host, s->cfg.at[a->next].port);
        if (ac == NULL || ac->err) {
            snprintf(a->why, sizeof a->why, "Sentinel %.100s: connect: %.80s", at,
                     ac ? ac->errstr : "out of memory");
            if (ac != NULL) redisAsyncFree(ac);
            continue;
        }
        ac->data = a;
        if (redisLibeventAttach(ac, a->ch->loop) != REDIS_OK) {
            snprintf(a->why, sizeof a->why, "Sentinel %.100s: cannot attach to the event loop", at);
            redisAsyncFree(ac);
            continue;
        }
        memset(&a->rb, 0, sizeof a->rb);
        a->rb.ac = ac;
        sl__redis_reader_bound(ac->c.reader, &a->rb);
        redisLibeventEvents *ev = ac->ev.data;
        event_del(ev->rev);
        event_assign(ev->rev, a->ch->loop, ac->c.fd, EV_READ, on_read, a);
        event_add(ev->rev, NULL);
        redisAsyncSetConnectCallback(ac, on_connect);
        redisAsyncSetDisconnectCallback(ac, on_disconnect);
        a->ac = ac;
        atomic_fetch_add(&s->asked, 1);
        redisAsyncCommand(ac, on_addr, NULL, "SENTINEL get-master-addr-by-name %s", s->cfg.name);
        struct timeval tv = {SL_REDIS_HANDSHAKE_MS / 1000, SL_REDIS_HANDSHAKE_MS % 1000 * 1000};
        evtimer_add(a->timer, &tv);
        return;
    }
    char why[400];
    snprintf(why, sizeof why, "no Sentinel named the master '%.60s' (%s)", s->cfg.name, a->why);
    sl__redis_go_down(a->ch, why);
}

const sl_redis_url *sl__sentinel_target(rchan *ch)
{
    struct sl_sentinel_ask *a = ch->sen;
    if (a == NULL) {
        if ((a = calloc(1, sizeof *a)) == NULL ||
            (a->timer = evtimer_new(ch->loop, on_timer, a)) == NULL) {
            free(a);
            sl__redis_go_down(ch, "out of memory");
            return NULL;
        }
        a->ch = ch;
        a->s = ch->r->sentinel;
        ch->sen = a;
    }
    if (a->have) {
        a->have = 0;
        return &a->url;
    }
    if (a->ac == NULL) { /* a new round, from the first Sentinel */
        a->next = 0;
        a->why[0] = '\0';
        ask_next(a);
    }
    return NULL;
}

void sl__sentinel_confirmed(rchan *ch)
{
    struct sl_sentinel_ask *a = ch->sen;
    char addr[sizeof a->s->master];
    if (a == NULL) return;
    addr_of(addr, sizeof addr, a->url.host, a->url.port);
    pthread_mutex_lock(&a->s->lock);
    if (strcmp(a->s->master, addr) != 0) {
        if (a->s->master[0] != '\0') atomic_fetch_add(&a->s->failovers, 1);
        snprintf(a->s->master, sizeof a->s->master, "%s", addr);
    }
    pthread_mutex_unlock(&a->s->lock);
}

void sl__sentinel_chan_free(rchan *ch)
{
    struct sl_sentinel_ask *a = ch->sen;
    if (a == NULL) return;
    redisAsyncContext *ac = a->ac;
    a->ac = NULL;
    if (ac != NULL) redisAsyncFree(ac); /* its callbacks see a->ac != ac: nothing */
    event_free(a->timer);
    free(a);
    ch->sen = NULL;
}

/* ---- what INFO and /metrics show ----------------------------------------- */

void sl__sentinel_master(redis *r, char *out, size_t n)
{
    struct sl_sentinel *s = r->sentinel;
    pthread_mutex_lock(&s->lock);
    snprintf(out, n, "%s", s->master);
    pthread_mutex_unlock(&s->lock);
}

void sl__sentinel_info_lines(redis *r, void (*line)(void *arg, const char *name, const char *value),
                             void *arg)
{
    struct sl_sentinel *s = r->sentinel;
    char v[64], master[sizeof s->master];
    pthread_mutex_lock(&s->lock);
    snprintf(master, sizeof master, "%s", s->master);
    pthread_mutex_unlock(&s->lock);
    line(arg, "backend_sentinel_master_name", s->cfg.name);
    line(arg, "backend_sentinel_master", master);
    snprintf(v, sizeof v, "%llu", (unsigned long long)atomic_load(&s->failovers));
    line(arg, "backend_sentinel_failovers", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)atomic_load(&s->asked));
    line(arg, "backend_sentinel_asked", v);
}

int sl__sentinel_metrics(redis *r, struct evbuffer *out)
{
    struct sl_sentinel *s = r->sentinel;
    return evbuffer_add_printf(
               out,
               "# HELP sluice_backend_sentinel_failovers_total Redis Sentinel failovers followed "
               "(the master confirmed at another address).\n"
               "# TYPE sluice_backend_sentinel_failovers_total counter\n"
               "sluice_backend_sentinel_failovers_total %llu\n",
               (unsigned long long)atomic_load(&s->failovers)) < 0
               ? -1
               : 0;
}
