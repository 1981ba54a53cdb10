/*
 * conn.c -- the Redis backend's connection state machine: one hiredis
 * async connection per worker and server, DOWN -> CONNECTING (AUTH,
 * SELECT, SCRIPT LOAD, the module probe) -> UP, dropped when a deadline
 * passes and made again after an exponential backoff with full jitter;
 * each state change reported once (on_state), each server's path (the
 * module's commands or the script) told once (on_path).  The overview is
 * at the top of backend_redis.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libevent.h>

#include "redis/lease.h"
#include "redis/redis_int.h"
#include "redis/sentinel.h"

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

static void drop(rchan *ch, const char *why);

/* The channel has no connection: the next one after the backoff. */
void sl__redis_go_down(rchan *ch, const char *why)
{
    redis *r = ch->r;
    if (ch->state == UP) atomic_fetch_sub(&ch->node->nup, 1);
    ch->state = DOWN;
    ch->ac = NULL;
    ch->hs_deadline = 0;
    if (ch->closing) return;
    if (r->nnodes > 1)
        sl__redis_set_last_error(r, "%s: %s", ch->node->url.shown, why);
    else
        sl__redis_set_last_error(r, "%s", why);
    report(ch, 0, why);
    if (r->cluster)
        sl__redis_cluster_refresh(ch->w); /* a master lost: the topology may have changed */
    int n = ch->attempt < 16 ? ch->attempt : 16;
    int64_t cap = (int64_t)SL_REDIS_BACKOFF_BASE << n;
    if (cap > SL_REDIS_BACKOFF_CAP) cap = SL_REDIS_BACKOFF_CAP;
    int64_t ms = (int64_t)(rnd(&ch->rng) % (uint64_t)(cap + 1));
    ch->attempt++;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ch->retry, &tv);
}

void sl__redis_on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    sl__redis_connect_now(arg);
}

/* ---- the connection ------------------------------------------------------ */

/* Frees ch's connection (why: for the log): every request in flight is
 * answered by the policy, then the channel is DOWN. */
static void drop(rchan *ch, const char *why)
{
    redisAsyncContext *ac = ch->ac;
    if (ac == NULL) return;
    sl__redis_go_down(ch, why); /* first: answers given below may submit again */
    redisAsyncFree(ac);
}

void sl__redis_on_script_load(redisAsyncContext *ac, void *reply, void *privdata)
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
void sl__redis_probe_key(char *out, size_t cap, const sl_slotmap *map, int i)
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
int sl__redis_cmdinfo_says(const redisReply *x, char *why, size_t cap)
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
int sl__redis_probe_says(const redisReply *x, char *why, size_t cap)
{
    if (x != NULL && x->type == REDIS_REPLY_ARRAY && x->elements == 6) return 1;
    snprintf(why, cap, "RL.PEEK: %.280s",
             x == NULL                      ? "no answer"
             : x->type == REDIS_REPLY_ERROR ? x->str
                                            : "an unexpected reply");
    return 0;
}

int sl__redis_probe_path(int has_cmd, const redisReply *x, char *why, size_t cap)
{
    if (has_cmd != 1) return 0; /* why: what COMMAND INFO said */
    if (x != NULL && x->type == REDIS_REPLY_ERROR) {
        /* A Cluster node that does not serve the probe's slot -- a master
         * that became a replica -- redirects it (MOVED, ASK).  Redis checks
         * the command and the user's permissions before it redirects, so
         * RL.PEEK is there: the path is the module's.  A slot no master
         * serves yet (CLUSTERDOWN), a slot moving (TRYAGAIN), a master
         * without its replicas (MASTERDOWN), a busy script (BUSY): nothing
         * is known about the module -- ask again on a new connection.
         * Judged "script" instead, this connection would count its keys
         * apart from the module's connections (two counters for one key:
         * the fault harness saw it over-admit after failovers). */
        static const char *const moved[] = {"MOVED ", "ASK "};
        static const char *const passing[] = {"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY"};
        for (size_t i = 0; i < sizeof moved / sizeof moved[0]; i++)
            if (strncmp(x->str, moved[i], strlen(moved[i])) == 0) return 1;
        for (size_t i = 0; i < sizeof passing / sizeof passing[0]; i++)
            if (strncmp(x->str, passing[i], strlen(passing[i])) == 0) {
                snprintf(why, cap, "RL.PEEK: %.280s", x->str);
                return -1;
            }
    }
    return sl__redis_probe_says(x, why, cap);
}

/* Tells on_path node n's path (module 1: the module's commands; 0: the
 * script, why says what was seen when a module may be there), when it is
 * the first told or differs from the last: once per server and per change,
 * however many connections find it. */
void sl__redis_tell_path(redis *r, rnode *n, int module, const char *why)
{
    int now = module ? 2 : 1, before = atomic_exchange(&n->path_told, now);
    if (before == now || r->o.on_path == NULL) return;
    r->o.on_path(r->o.state_arg, n->url.shown, module, why, before != 0);
}

/* Sets ch's path (1: the module's commands) and the count INFO shows. */
void sl__redis_set_path(rchan *ch, int module)
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
    ch->has_cmd = sl__redis_cmdinfo_says(x, ch->no_module, sizeof ch->no_module);
}

/* COMMAND INFO RL.LEASE's reply (--lease on): whether the module's path
 * leases (lease.c); an older module, or a user who may not ask: it does
 * not, and decides per request. */
static void on_lease_cmdinfo(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    char why[8];
    if (reply == NULL || ch->ac != ac) return;
    sl__redis_lease_module(ch, sl__redis_cmdinfo_says(reply, why, sizeof why) == 1);
}

/* COMMAND INFO RL.HOLDCHECK's reply: whether the module takes RL.CHECK's
 * concurrency leases (an older one, or a user who may not ask: it does
 * not, and such a check is refused: backend_redis.c). */
static void on_holdcheck_cmdinfo(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    char why[8];
    if (reply == NULL || ch->ac != ac) return;
    ch->holdcheck = sl__redis_cmdinfo_says(reply, why, sizeof why) == 1;
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
    if (x->type == REDIS_REPLY_ERROR && strncmp(x->str, "LOADING", 7) == 0) {
        /* a Redis still reading its RDB or AOF after a restart answers
         * nothing but LOADING: not up yet, try again after the backoff */
        drop(ch, "Redis is loading its dataset (LOADING)");
        return;
    }
    /* the module's path, the script's, or ask again (sl__redis_probe_path) */
    int path = sl__redis_probe_path(ch->has_cmd, x, ch->no_module, sizeof ch->no_module);
    if (path < 0) { /* a passing state of the cluster, not an answer about the module */
        char why[300];
        snprintf(why, sizeof why, "module probe: %.200s", ch->no_module);
        drop(ch, why);
        return;
    }
    int module = path == 1;
    sl__redis_set_path(ch, module);
    sl__redis_tell_path(ch->r, ch->node, module, ch->no_module);
    if (ch->state == CONNECTING) {
        ch->state = UP;
        ch->hs_deadline = 0;
        ch->attempt = 0;
        if (ch->was_up) atomic_fetch_add(&ch->r->reconnects, 1);
        ch->was_up = 1;
        atomic_fetch_add(&ch->node->nup, 1);
        report(ch, 1, "connected");
        sl__redis_arm_timer(ch);
    }
}

/* ROLE's reply (redis-sentinel://, the handshake's first after AUTH):
 * anything but a master drops the connection, and the next asks the
 * Sentinels again (redis/sentinel.c). */
static void on_role(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    rchan *ch = ac->data;
    char why[300];
    if (reply == NULL || ch->ac != ac) return;
    if (sl__sentinel_role_says(reply, why, sizeof why) == 1) {
        sl__sentinel_confirmed(ch);
        return;
    }
    atomic_fetch_add(&ch->r->errors, 1);
    drop(ch, why);
}

void sl__redis_demoted(rchan *ch, const redisAsyncContext *ac, const char *err)
{
    if (ch->r->sentinel == NULL || ch->ac != ac) return;
    if (strncmp(err, "READONLY", 8) == 0 || strncmp(err, "LOADING", 7) == 0) {
        char why[300];
        snprintf(why, sizeof why, "no longer the master (%.200s)", err);
        drop(ch, why);
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
    sl__redis_go_down(ch, why); /* hiredis frees ac after this returns */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    rchan *ch = ac->data;
    (void)status;
    if (ch->ac != ac) return; /* freed by us: sl__redis_go_down has run */
    char why[300];
    if (ch->rb.why[0] != '\0') /* the reader refused a reply (redis/reply.h) */
        snprintf(why, sizeof why, "reply refused: %s", ch->rb.why);
    else
        snprintf(why, sizeof why, "connection lost: %.200s", ac->errstr[0] ? ac->errstr : "closed");
    atomic_fetch_add(&ch->r->errors, 1);
    sl__redis_go_down(ch, why);
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
void sl__redis_connect_now(rchan *ch)
{
    redis *r = ch->r;
    const sl_redis_url *u = &ch->node->url;
    if (r->sentinel != NULL && (u = sl__sentinel_target(ch)) == NULL)
        return; /* the Sentinels are asked first; their answer calls this again */
    redisAsyncContext *ac = redisAsyncConnect(u->host, u->port);
    char why[300];
    if (ac == NULL || ac->err) {
        snprintf(why, sizeof why, "connect: %.200s", ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        atomic_fetch_add(&r->errors, 1);
        sl__redis_go_down(ch, why);
        return;
    }
    ac->data = ch;
    if (redisLibeventAttach(ac, ch->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        sl__redis_go_down(ch, "connect: cannot attach to the event loop");
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
    if (r->sentinel != NULL) redisAsyncCommand(ac, on_role, NULL, "ROLE");
    if (u->db != 0) redisAsyncCommand(ac, on_handshake, (void *)"SELECT", "SELECT %d", u->db);
    redisAsyncCommand(ac, sl__redis_on_script_load, NULL, "SCRIPT LOAD %b", sl_redis_script,
                      (size_t)(sl_redis_script_end - sl_redis_script));
    /* which path: requests sent before these answers take the last one */
    ch->has_cmd = 0;
    ch->no_module[0] = '\0';
    redisAsyncCommand(ac, on_cmdinfo, NULL, "COMMAND INFO RL.CHECKPLAN");
    redisAsyncCommand(ac, on_holdcheck_cmdinfo, NULL, "COMMAND INFO RL.HOLDCHECK");
    if (ch->lease != NULL) { /* --lease on: the module leases when it has RL.LEASE */
        sl__redis_lease_module(ch, 0);
        redisAsyncCommand(ac, on_lease_cmdinfo, NULL, "COMMAND INFO RL.LEASE");
    }
    char key[64];
    sl__redis_probe_key(key, sizeof key, r->cluster ? ch->w->map : NULL, (int)(ch->node - r->node));
    if (r->o.trust_client_time)
        redisAsyncCommand(ac, on_probe, NULL, "RL.PEEK %s 1 1000 AT %lld", key,
                          (long long)sl__wall_ms());
    else
        redisAsyncCommand(ac, on_probe, NULL, "RL.PEEK %s 1 1000", key);
    sl__redis_arm_timer(ch);
}

/* Arms ch's timer for the next deadline: the handshake's, the oldest
 * request's, the oldest WAIT's (--durability). */
void sl__redis_arm_timer(rchan *ch)
{
    int64_t next = ch->hs_deadline, w = sl__redis_durable_deadline(ch);
    if (ch->head != NULL && (next == 0 || ch->head->deadline < next)) next = ch->head->deadline;
    if (w != 0 && (next == 0 || w < next)) next = w; /* --durability: a WAIT's (durable.c) */
    if (next == 0) {
        evtimer_del(ch->timer);
        return;
    }
    int64_t ms = next - sl__mono_ms();
    if (ms < 0) ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 + 500};
    evtimer_add(ch->timer, &tv);
}

void sl__redis_on_timer(evutil_socket_t fd, short what, void *arg)
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
    sl__redis_durable_expire(ch, now); /* held answers whose WAIT is late: the policy's */
    if (ch->head != NULL && now >= ch->head->deadline) {
        uint64_t n = 0;
        for (pend *e = ch->head; e != NULL; e = e->next) n += now >= e->deadline;
        atomic_fetch_add(&ch->r->timeouts, n);
        snprintf(why, sizeof why, "no answer within --backend-timeout %lld ms",
                 (long long)ch->r->o.timeout_ms);
        drop(ch, why);
        return;
    }
    sl__redis_arm_timer(ch);
}
