/*
 * reply.c -- bounded reading of Redis's replies (reply.h).
 *
 * The objects are hiredis's redisReply, made as its own functions make
 * them (the string copied with a NUL after it, an array's element
 * pointers zeroed until filled), so every reader of a reply and
 * freeReplyObject work unchanged; a refused item returns NULL before
 * anything is allocated for it.  hiredis sets a reply's root as the
 * reader's reply as soon as it is made, so a reply refused half-way is
 * freed with the reader: sl__redis_reply_free takes unfilled elements.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"

static sl_redis_rbound *bound_of(const redisReadTask *t) { return t->privdata; }

/* Counts `more` objects for the reply task t belongs to (its root resets
 * the count); 0, or -1 with b->why set when that passes a bound or the
 * reply matches no command. */
static int admit(const redisReadTask *t, size_t more)
{
    sl_redis_rbound *b = bound_of(t);
    if (b == NULL) return 0;
    if (t->parent == NULL) {
        b->objects = 0;
        if (b->ac != NULL && b->ac->replies.head == NULL) {
            snprintf(b->why, sizeof b->why,
                     "a reply that matches no command sent (a reply too many)");
            return -1;
        }
    }
    if (more > SL_REDIS_REPLY_OBJECTS - b->objects) {
        snprintf(b->why, sizeof b->why, "a reply of more than %d objects", SL_REDIS_REPLY_OBJECTS);
        return -1;
    }
    b->objects += more;
    return 0;
}

/* A new object of task t, linked into its parent array; NULL when out of memory. */
static redisReply *make(const redisReadTask *t, int type)
{
    redisReply *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->type = type;
    if (t->parent != NULL) {
        redisReply *p = t->parent->obj;
        p->element[t->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *t, char *s, size_t len)
{
    sl_redis_rbound *b = bound_of(t);
    if (len > SL_REDIS_REPLY_STRING) {
        if (b != NULL)
            snprintf(b->why, sizeof b->why, "a string of %zu bytes (at most %d)", len,
                     SL_REDIS_REPLY_STRING);
        return NULL;
    }
    if (admit(t, 1) != 0) return NULL;
    char *buf = malloc(len + 1);
    if (buf == NULL) return NULL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    redisReply *r = make(t, t->type);
    if (r == NULL) {
        free(buf);
        return NULL;
    }
    r->str = buf;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *t, int n)
{
    sl_redis_rbound *b = bound_of(t);
    if (n < 0 || n > SL_REDIS_REPLY_ELEMENTS) {
        if (b != NULL)
            snprintf(b->why, sizeof b->why, "an array of %d elements (at most %d)", n,
                     SL_REDIS_REPLY_ELEMENTS);
        return NULL;
    }
    if (admit(t, 1 + (size_t)n) != 0) return NULL;
    redisReply **el = NULL;
    if (n > 0 && (el = calloc((size_t)n, sizeof *el)) == NULL) return NULL;
    redisReply *r = make(t, REDIS_REPLY_ARRAY);
    if (r == NULL) {
        free(el);
        return NULL;
    }
    r->element = el;
    r->elements = (size_t)n;
    return r;
}

static void *create_integer(const redisReadTask *t, long long v)
{
    if (admit(t, 1) != 0) return NULL;
    redisReply *r = make(t, REDIS_REPLY_INTEGER);
    if (r != NULL) r->integer = v;
    return r;
}

static void *create_nil(const redisReadTask *t)
{
    if (admit(t, 1) != 0) return NULL;
    return make(t, REDIS_REPLY_NIL);
}

void sl__redis_reply_free(void *reply)
{
    redisReply *r = reply;
    if (r == NULL) return;
    if (r->type == REDIS_REPLY_ARRAY && r->element != NULL)
        for (size_t i = 0; i < r->elements; i++) sl__redis_reply_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

static redisReplyObjectFunctions bounded = {
    create_string, create_array, create_integer, create_nil, sl__redis_reply_free,
};

void sl__redis_reader_bound(redisReader *r, sl_redis_rbound *b)
{
    r->fn = &bounded;
    r->privdata = b;
}

size_t sl__redis_reader_pending(const redisReader *r) { return r->len - r->pos; }

/* ---- reading a reply into its request (reply.h) ------------------------- */

int sl__redis_six(const redisReply *a, size_t i, sl_result *out)
{
    int64_t v[6];
    if (a->elements < i + 6) return -1;
    for (size_t j = 0; j < 6; j++) {
        if (a->element[i + j]->type != REDIS_REPLY_INTEGER) return -1;
        v[j] = a->element[i + j]->integer;
    }
    out->allowed = (int)v[0];
    out->limit = v[1];
    out->remaining = v[2];
    out->retry_after_ms = v[3];
    out->reset_after_ms = v[4];
    out->delay_ms = v[5];
    return 0;
}

int sl__redis_parse_reply(sl_breq *rq, const redisReply *x, int module)
{
    switch (rq->op) {
    case SL_BOP_FORGET:
        if (x->type != REDIS_REPLY_INTEGER) return -1;
        rq->existed = x->integer > 0;
        return 0;
    case SL_BOP_DECIDE_ALL:
        if (module) { /* [all_allowed, [six], [six], ...] */
            if (x->type != REDIS_REPLY_ARRAY || x->elements != 1 + rq->nreqs ||
                x->element[0]->type != REDIS_REPLY_INTEGER)
                return -1;
            rq->all_allowed = x->element[0]->integer != 0;
            for (size_t i = 0; i < rq->nreqs; i++) {
                const redisReply *el = x->element[1 + i];
                if (el->type != REDIS_REPLY_ARRAY || el->elements != 6 ||
                    sl__redis_six(el, 0, &rq->results[i]) != 0)
                    return -1;
            }
            return 0;
        }
        if (x->type != REDIS_REPLY_ARRAY || x->elements != 1 + 6 * rq->nreqs ||
            x->element[0]->type != REDIS_REPLY_INTEGER)
            return -1;
        rq->all_allowed = x->element[0]->integer != 0;
        for (size_t i = 0; i < rq->nreqs; i++)
            if (sl__redis_six(x, 1 + 6 * i, &rq->results[i]) != 0) return -1;
        return 0;
    case SL_BOP_CHECK: {
        const sl_check_plan *plan = rq->plan;
        sl_check_outcome *o = rq->outcome;
        size_t m = 0;
        for (int k = 0; k < plan->nitems; k++)
            m += !plan->items[k].zero && plan->items[k].lead == k;
        size_t nl = 0; /* op C's / RL.HOLDCHECK's leases: seven integers each after the counters' */
        for (int j = 0; j < plan->nleases; j++) nl += plan->leases[j].lead == j;
        if (x->type != REDIS_REPLY_ARRAY || x->elements != 3 + 7 * m + 7 * nl) return -1;
        for (size_t i = 0; i < x->elements; i++)
            if (x->element[i]->type != REDIS_REPLY_INTEGER) return -1;
        memset(o, 0, sizeof *o);
        o->allowed = x->element[0]->integer != 0;
        o->quota_denied = x->element[1]->integer != 0;
        o->pool_charged = x->element[2]->integer != 0;
        size_t i = 3;
        for (int k = 0; k < plan->nitems; k++) {
            if (plan->items[k].zero || plan->items[k].lead != k) continue;
            if (sl__redis_six(x, i, &o->res[k]) != 0) return -1;
            o->stretched[k] = x->element[i + 6]->integer != 0;
            i += 7;
        }
        for (int j = 0; nl > 0 && j < plan->nleases; j++) { /* followers: sl_check_report's */
            if (plan->leases[j].lead != j) continue;
            if (sl__redis_six(x, i, &o->lres[j]) != 0 || x->element[i + 6]->integer < 0) return -1;
            o->lid[j] = o->lres[j].allowed ? (uint64_t)x->element[i + 6]->integer : 0;
            i += 7;
        }
        return 0;
    }
    default:
        if (x->type != REDIS_REPLY_ARRAY || x->elements != 6) return -1;
        return sl__redis_six(x, 0, &rq->result);
    }
}
