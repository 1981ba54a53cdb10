/*
 * sentinel_reply.c -- what a Sentinel and a master answer, read
 * (sentinel.h).  Touches no socket; every string is read by its length
 * (hiredis adds a NUL, but a string may hold NULs of its own).
 */
#include <stdio.h>
#include <string.h>

#include "redis/sentinel.h"

/* Whether s[0..n) is a port, 1..65535: digits only (no sign, no space),
 * read by length. */
static int port_of(const char *s, size_t n, int *port)
{
    long v = 0;
    if (n == 0 || n > 5) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535) return -1;
    *port = (int)v;
    return 0;
}

/* A string reply's kind, for a message. */
static const char *type_name(int type)
{
    switch (type) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_INTEGER: return "an integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    case REDIS_REPLY_ERROR: return "an error";
    default: return "a reply of another type";
    }
}

int sl__sentinel_addr_says(const redisReply *x, char *host, int *port, char *why, size_t cap)
{
    host[0] = '\0';
    *port = 0;
    if (x == NULL) {
        snprintf(why, cap, "no answer");
        return -1;
    }
    if (x->type == REDIS_REPLY_NIL) return 0;
    if (x->type == REDIS_REPLY_ERROR) {
        snprintf(why, cap, "%.*s", (int)(x->len > 200 ? 200 : x->len), x->str);
        if (why[0] == '\0') /* empty, or a NUL first */
            snprintf(why, cap, "an error without a message");
        return -1;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 2 || x->element == NULL) {
        if (x->type == REDIS_REPLY_ARRAY)
            snprintf(why, cap, "an array of %zu elements, not [host, port]", x->elements);
        else
            snprintf(why, cap, "%s, not [host, port]", type_name(x->type));
        return -1;
    }
    const redisReply *h = x->element[0], *p = x->element[1];
    if (h == NULL || p == NULL || h->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING) {
        snprintf(why, cap, "[%s, %s], not two strings [host, port]",
                 h != NULL ? type_name(h->type) : "nothing",
                 p != NULL ? type_name(p->type) : "nothing");
        return -1;
    }
    if (h->len == 0 || h->len >= SL_SENTINEL_HOST) {
        snprintf(why, cap, "a host of %zu bytes (1..%d)", h->len, SL_SENTINEL_HOST - 1);
        return -1;
    }
    for (size_t i = 0; i < h->len; i++) {
        char c = h->str[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':')) {
            snprintf(why, cap, "the host holds a byte a host cannot (0x%02x)", (unsigned char)c);
            return -1;
        }
    }
    if (port_of(p->str, p->len, port) != 0) {
        snprintf(why, cap, "a port of %zu bytes that is not a number 1..65535", p->len);
        *port = 0;
        return -1;
    }
    memcpy(host, h->str, h->len);
    host[h->len] = '\0';
    return 1;
}

int sl__sentinel_role_says(const redisReply *x, char *why, size_t cap)
{
    if (x == NULL) {
        snprintf(why, cap, "ROLE: no answer");
        return 0;
    }
    if (x->type == REDIS_REPLY_ERROR) {
        snprintf(why, cap, "ROLE: %.*s", (int)(x->len > 200 ? 200 : x->len), x->str);
        return 0;
    }
    const redisReply *r = x->type == REDIS_REPLY_ARRAY && x->elements >= 1 && x->element != NULL
                              ? x->element[0]
                              : NULL;
    if (r == NULL || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) {
        snprintf(why, cap, "ROLE: %s, not a role", type_name(x->type));
        return 0;
    }
    if (r->len == 6 && memcmp(r->str, "master", 6) == 0) return 1;
    if ((r->len == 5 && memcmp(r->str, "slave", 5) == 0) ||
        (r->len == 7 && memcmp(r->str, "replica", 7) == 0))
        snprintf(why, cap, "ROLE: a replica, not the master");
    else if (r->len == 8 && memcmp(r->str, "sentinel", 8) == 0)
        snprintf(why, cap, "ROLE: a Sentinel, not the master");
    else
        snprintf(why, cap, "ROLE: a role of %zu bytes that is not master", r->len);
    return 0;
}
