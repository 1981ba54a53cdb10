/*
 * check_int.h -- what POST /v1/check (check.c) and forward-auth (fauth.c)
 * share: one RL.CHECK through the service layer (sl_svc_check) and its
 * answer -- the headers of a rules decision and, for /v1/check, the JSON
 * body.  Not an API: the HTTP module's own.
 */
#ifndef SL_HTTP_CHECK_INT_H
#define SL_HTTP_CHECK_INT_H

#include <stdint.h>

#include "http_int.h"

/* How a rules decision is answered. */
typedef struct sl_http_check {
    sl_hans a;       /* the answer */
    int json;        /* 1: /v1/check's JSON body, 200 / 429; 0: forward-auth: empty body */
    int deny_status; /* json == 0: the status of a denial (--auth-deny-status) */
} sl_http_check;

/* Decides q (sl_svc_check; read only during the call) and answers c->a
 * as c says: the decision's headers (sl_http_check_headers), then for
 * JSON the six fields and "statuses"; 503 with a JSON error when the
 * server has no rules, 400 for a request the rules refuse (too many
 * limits, a key too long).  c is read only during the call: the decision
 * in flight keeps a copy in the slot's data (sl_slot_data). */
void sl_http_check_run(http_worker *hw, const sl_http_check *c, const sl_svc_check_req *q);

/* The headers of a rules decision (docs/http.md, "POST /v1/check"), after
 * h's: sl_rlh_check (ratelimit_headers.h) of r's statuses and overall six
 * fields.  No header at all when no limit applied and the request is
 * allowed. */
void sl_http_check_headers(sl_hhdrs *h, const sl_svc_reply *r);

/* The endpoints (routes in http.c): POST /v1/check (check.c), and
 * /v1/auth/DOMAIN, any method (fauth.c). */
sl_http_handler sl_http_v1_check, sl_http_v1_auth;

#endif
