/*
 * backend.c -- what every backend shares: its error state and the names
 * of --on-backend-error's policies (backend.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "backend.h"

int sl__backend_set_err(sl_backend *b, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->errstr, sizeof b->errstr, fmt, ap);
    va_end(ap);
    b->err = err;
    return err;
}

void sl__backend_clear_err(sl_backend *b)
{
    b->err = 0;
    b->errstr[0] = '\0';
}

void sl__breq_fail(sl_breq *rq, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rq->err, sizeof rq->err, fmt, ap);
    va_end(ap);
    rq->rc = rc;
    rq->cb(rq);
}

const char *sl_backend_policy_name(int policy)
{
    switch (policy) {
    case SL_BACKEND_DENY: return "deny";
    case SL_BACKEND_ALLOW: return "allow";
    case SL_BACKEND_LOCAL: return "local";
    default: return NULL;
    }
}
