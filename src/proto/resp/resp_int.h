/*
 * resp_int.h -- what the files of the RESP module share (resp_commands.c,
 * resp_info.c; only they include it): the request a command runs with,
 * the small helpers every command uses, and the commands that live
 * outside resp_commands.c.
 */
#ifndef SL_RESP_INT_H
#define SL_RESP_INT_H

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "proto.h"
#include "resp.h"
#include "service.h"

typedef struct client client; /* a connection's state (resp_commands.c) */

/* The request being run: one command of one connection. */
typedef struct req {
    sl_conn *c;
    sl_svc_ctx *x;
    const sl_resp_cmd *cmd;
    int64_t now;
    const sl_auth_user *who; /* the connection's user; NULL: not logged in */
    client *cl;              /* the connection's state; NULL only if it could not be allocated */
    int proto;               /* what replies are framed in: SL_RESP2 or SL_RESP3 */
    int queued;              /* 1: run by EXEC from the transaction's queue */
} req;

/* What a non-admin user sees in place of a file path. */
#define HIDDEN "(hidden: admin only)"

static inline int is_admin(const req *q)
{
    return q->who != NULL && (q->who->groups & SL_AUTH_ADMIN);
}

/* A file path as q's user may see it: admins see it, others HIDDEN (an
 * unset path stays ""). */
static inline const char *path_for(const req *q, const char *path)
{
    return path[0] == '\0' || is_admin(q) ? path : HIDDEN;
}

/* Opens a slot for an answer that is known now; NULL when out of memory
 * (the connection is then dropped by net.c: see reply_now's callers). */
static inline sl_buf *now_open(req *q, sl_slot **s)
{
    *s = sl_conn_slot(q->c);
    return *s ? sl_slot_buf(*s) : NULL;
}

/* The 8 bytes of w with ASCII 'A'..'Z' made lower case, the others as
 * they are: per byte, the high bit of (low 7 bits + c) says whether they
 * reach a bound, with no carry into the next byte. */
static inline uint64_t sl__resp_lower8(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t h = w & ~high;
    uint64_t ge_a = h + ones * (0x80 - 'A'); /* high bit: >= 'A' */
    uint64_t gt_z = h + ones * (0x7f - 'Z'); /* high bit: > 'Z' */
    return w | (((ge_a ^ gt_z) & ~w & high) >> 2);
}

/* Whether the n bytes at a and b are equal, ASCII letters in any case:
 * strncasecmp's answer in the C locale (sluiced's), inline, eight bytes a
 * step. */
static inline int sl__resp_same_ci(const char *a, const char *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (sl__resp_lower8(x) != sl__resp_lower8(y)) return 0;
    }
    for (; i < n; i++) {
        unsigned x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x - 'A' < 26u) x += 'a' - 'A';
        if (y - 'A' < 26u) y += 'a' - 'A';
        if (x != y) return 0;
    }
    return 1;
}

/* Whether argument a is lit, case-insensitively. */
static inline int arg_is(const sl_resp_arg *a, const char *lit)
{
    size_t n = strlen(lit);
    return a->len == n && sl__resp_same_ci(a->p, lit, n);
}

/* INFO [section ...] (resp_info.c). */
void sl__resp_cmd_info(req *q);

#endif
