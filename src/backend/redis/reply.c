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
        snprintf(b->why, sizeof b->why, "a reply of more than %d objects",
                 SL_REDIS_REPLY_OBJECTS);
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
