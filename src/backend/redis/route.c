/*
 * route.c -- which server a request goes to: with a ring, the owner of its
 * hash tag (ring.c); in a Redis Cluster, the master of its slot in the
 * worker's map (slots.c), read from CLUSTER SLOTS at start and again after
 * a MOVED, a CLUSTERDOWN or a lost master, with MOVED / ASK / TRYAGAIN
 * followed up to SL_REDIS_REDIRECTS times within a request's deadline.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/holds.h"
#include "redis/redis_int.h"

/* ---- Redis Cluster -------------------------------------------------------- */

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
        sl__redis_url_show(&nd->url);
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
    if (w->c[i] == NULL && (w->c[i] = sl__redis_conn_new(w->r, &w->r->node[i], w->loop)) != NULL) {
        w->c[i]->w = w;
        sl__redis_connect_now(w->c[i]);
    }
    return w->c[i];
}

/* Reads a CLUSTER SLOTS reply (asked of host `asked`, which an empty or
 * "?" address means) into map, adding the masters to r->node.  0, or -1
 * when the reply is not one (map is then partly written). */
int sl__redis_parse_slots(redis *r, const redisReply *x, const char *asked, sl_slotmap *map)
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
    if (sl__redis_parse_slots(r, reply, ch->node->url.host, m) != 0) {
        atomic_fetch_add(&r->errors, 1);
        const redisReply *x = reply;
        sl__redis_set_last_error(r, "CLUSTER SLOTS: %.200s",
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
void sl__redis_cluster_refresh(wchan *w)
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

int sl__redis_redirect(rchan *ch, pend *e, const char *err)
{
    int moved = strncmp(err, "MOVED ", 6) == 0, ask = strncmp(err, "ASK ", 4) == 0;
    if (!sl__redis_is_redirect(err)) return 0;
    /* a lone DECIDE sent as the open batch: ch's batch is done with it here */
    int flushed = e->flushed;
    e->flushed = 0;
    follow(ch, e, err, moved, ask);
    if (flushed) sl__redis_batch_done(ch);
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
            sl__redis_cluster_refresh(w);
        }
        to = node >= 0 ? conn_get(w, node) : NULL;
    }
    if (to == NULL || to->ac == NULL || e->redirects >= SL_REDIS_REDIRECTS) {
        atomic_fetch_add(&r->errors, 1);
        sl__redis_set_last_error(r, "%.200s%s", err,
                       e->redirects >= SL_REDIS_REDIRECTS ? " (too many redirections)" : "");
        sl__redis_by_policy(ch, e->rq, e->key, e->reqs);
        sl__redis_pend_put(ch, e);
        return;
    }
    e->redirects++;
    e->ch = to;
    sl__redis_link_pend(to, e);
    if (ask) redisAsyncCommand(to->ac, NULL, NULL, "ASKING");
    if (sl__redis_send_pend(to, e) != 0) {
        sl__redis_unlink_pend(to, e);
        sl__redis_by_policy(to, e->rq, e->key, e->reqs);
        sl__redis_pend_put(to, e);
        return;
    }
    if (e == to->head) sl__redis_arm_timer(to);
}

/* The slot of one Redis key. */
static int slot_of_key(int algo, int space, const char *key, size_t len, size_t tag)
{
    char buf[KEYBUF];
    return sl_key_slot(buf, sl__redis_key(buf, algo, space, key, len, tag));
}

/* The slot so far after one more key's: -1 once two differ. */
static int same_slot(int slot, int next) { return slot == -2 || slot == next ? next : -1; }

/* The cluster slot every Redis key of rq is in (SPEC section 9: a
 * request's keys share one tag), -1 when they are in several (a key
 * starting with '}' makes Redis hash the whole key), 0 when rq is
 * malformed (submit refuses it). */
int sl__redis_request_slot(const redis *r, const sl_breq *rq)
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
    case SL_BOP_ACQUIRE: /* holds.c: a lease's keys carry the key's lease tag, */
    case SL_BOP_RELEASE: /* a reservation's the key */
    case SL_BOP_RESERVE:
    case SL_BOP_SETTLE:
        if (rq->key == NULL || rq->keylen == 0 || rq->keylen > SL_MAX_KEY) return 0;
        return slot_of_key(0, 0, rq->key, rq->keylen,
                           rq->op == SL_BOP_ACQUIRE || rq->op == SL_BOP_RELEASE
                               ? sl__redis_lease_tag(rq->key, rq->keylen)
                               : rq->keylen);
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
            size_t tag, n = sl__redis_pool_user_key(u, r, plan, &tag);
            SAME(slot_of_key((int)plan->pool.algo, plan->pool.space, u, n, tag));
        }
        /* the leases: under the domain's tag too (holds.c), so in its slot */
        if (plan->nleases < 0 || plan->nleases > SL_CHECK_MAX_DESC) return 0;
        for (int j = 0; j < plan->nleases && slot != -1; j++) {
            const sl_check_lease *ls = &plan->leases[j];
            if (ls->lead != j) continue;
            if (ls->keylen == 0 || ls->keylen > SL_MAX_KEY) return 0;
            SAME(slot_of_key(0, 0, ls->key, ls->keylen, sl__redis_lease_tag(ls->key, ls->keylen)));
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
    int slot = sl__redis_request_slot(w->r, rq);
    int node = slot >= 0 ? w->map->node[slot] : -1;
    rchan *ch = node >= 0 ? conn_get(w, node) : NULL;
    if (ch != NULL) {
        sl__redis_submit(ch, rq, TO_REDIS);
        return;
    }
    if (slot >= 0) sl__redis_cluster_refresh(w);
    for (int i = 0; i < w->n; i++) /* any connection: it only checks rq and answers */
        if (w->c[i] != NULL) {
            sl__redis_submit(w->c[i], rq, slot < 0 ? CROSSSLOT : NO_MASTER);
            return;
        }
    sl__breq_fail(rq, SL_ENOMEM, "out of memory");
}

/* The hash tag of rq, which names the node that owns it: the key for
 * DECIDE, PEEK, FORGET, RESERVE and SETTLE (every Redis key they touch is
 * "{key}"), its lease tag for ACQUIRE and RELEASE (holds.c), the first
 * request's key for DECIDE_ALL (redis_submit refuses one whose keys are
 * on several nodes), the domain for CHECK (every counter of a plan
 * carries it: check.h; its leases too: holds.c), its first lease's tag
 * for a CHECK of leases alone.  *len = 0 when rq touches no key (a CHECK
 * of L = 0 counters only): any node will do. */
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
        if (rq->plan != NULL && rq->plan->nleases > 0 && rq->plan->leases[0].keylen <= SL_MAX_KEY) {
            const sl_check_lease *ls = &rq->plan->leases[0];
            *len = sl__redis_lease_tag(ls->key, ls->keylen);
            return ls->key;
        }
        *len = 0;
        return NULL;
    case SL_BOP_ACQUIRE:
    case SL_BOP_RELEASE:
        *len = rq->key != NULL && rq->keylen <= SL_MAX_KEY
                   ? sl__redis_lease_tag(rq->key, rq->keylen)
                   : 0;
        return rq->key;
    default: *len = rq->key != NULL ? rq->keylen : 0; return rq->key;
    }
}

/* 0 when every lease of CHECK rq is on ring node `node` (the one of its
 * counters), else the index + 1 of the first lease that is not: a lease
 * key whose lease tag is not its domain's counters' tag (a domain that
 * does not fit whole before a long key's suffix: holds.c). */
static int lease_elsewhere(const sl_ring *ring, const sl_breq *rq, int node)
{
    const sl_check_plan *plan = rq->plan;
    for (int j = 0; plan != NULL && j < plan->nleases && j < SL_CHECK_MAX_DESC; j++) {
        const sl_check_lease *ls = &plan->leases[j];
        if (ls->lead != j || ls->keylen == 0 || ls->keylen > SL_MAX_KEY) continue;
        size_t t = sl__redis_lease_tag(ls->key, ls->keylen);
        if (sl_ring_node(ring, ls->key, t) != node) return j + 1;
    }
    return 0;
}

/* Routes rq to the connection of the node that owns its hash tag. */
void sl__redis_route(sl_bchan *c, sl_breq *rq)
{
    wchan *w = (wchan *)c;
    if (w->r->cluster) {
        cluster_submit(w, rq);
        return;
    }
    if (w->n == 1) {
        sl__redis_submit(w->c[0], rq, TO_REDIS);
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
    if (rq->op == SL_BOP_CHECK && len > 0) {
        int j = lease_elsewhere(w->r->ring, rq, node);
        if (j > 0) { /* one script call holds the leases and the rates */
            const char *name = rq->plan->lim[j - 1].name;
            sl__breq_fail(rq, SL_EINVAL,
                          "rule %.*s: its leases and its domain's counters are on different "
                          "Redis servers of the ring (a domain too long for its lease key): "
                          "decided all-or-none only on one (docs/rules.md)",
                          (int)strcspn(name, "#"), name);
            return;
        }
    }
    sl__redis_submit(w->c[node], rq, TO_REDIS);
}
