/*
 * hold.c -- POST /v1/acquire, /v1/release, /v1/reserve, /v1/settle
 * (SPEC section 10 over HTTP, docs/commands-holds.md): RL.ACQUIRE,
 * RL.RELEASE, RL.RESERVE and RL.SETTLE with a JSON body.  Every value is
 * turned into the text the RESP commands take and parsed by the same
 * parsers (args.h), so a bad value gets the same words on both.
 *
 * Answers: a decision is the six fields by name (as /v1/allow's) with the
 * decision headers, plus "id" (an integer, or null when denied) for
 * acquire and reserve; 200 allowed, 429 denied.  Release answers 200
 * {"released": true|false}; settle 200 with the six fields, or 400 for an
 * unknown id.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "http_int.h"
#include "service.h"
#include "util.h"

enum { H_ACQUIRE, H_RELEASE, H_RESERVE, H_SETTLE };

/* A request in flight, in its slot's data (the answer may come later). */
typedef struct hold_req {
    sl_hans a;
    int64_t wh; /* the window for the decision headers (ms: the window, or
                   the TTL) << 2 | H_*: a slot's data holds 24 bytes */
} hold_req;

_Static_assert(sizeof(hold_req) <= SL_SLOT_DATA, "hold_req fits a slot's data");

static void on_hold(void *arg, const sl_svc_reply *r)
{
    hold_req *q = arg;
    sl_hans a = q->a;
    int what = (int)(q->wh & 3);
    int64_t window_ms = q->wh >> 2;
    if (r->rc < 0) {
        sl_http_send_error(&a, r->rc == SL_ENOMEM ? 503 : 400,
                           r->rc == SL_ENOMEM ? "Service Unavailable" : "Bad Request", r->err);
        return;
    }
    if (what == H_RELEASE) {
        sl_http_send_json(&a, 200, "OK", json_pack("{s:b}", "released", r->existed != 0));
        return;
    }
    if (what == H_SETTLE && !r->existed) {
        sl_http_send_error(&a, 400, "Bad Request",
                           "unknown reservation id: never given for this key, settled already, "
                           "or its window ended (then it settled at its estimate)");
        return;
    }
    const sl_result *x = &r->result;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_http_decision_headers(&h, x, window_ms);
    json_t *o = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I}", "allowed", x->allowed != 0, "limit",
                          (json_int_t)x->limit, "remaining", (json_int_t)x->remaining,
                          "retry_after_ms", (json_int_t)x->retry_after_ms, "reset_after_ms",
                          (json_int_t)x->reset_after_ms, "delay_ms", (json_int_t)x->delay_ms);
    if (o != NULL && what != H_SETTLE)
        json_object_set_new(o, "id",
                            r->hold_id ? json_integer((json_int_t)r->hold_id) : json_null());
    if (x->allowed || what == H_SETTLE)
        sl_http_send_json_h(&a, &h, 200, "OK", o);
    else
        sl_http_send_json_h(&a, &h, 429, "Too Many Requests", o);
}

/* A body's field as the text a RESP argument would be: a string as it
 * is, an integer in decimal.  NULL (and *n = 0) when absent; -1 after
 * writing the message when it is another type. */
static int field_text(const json_t *root, const char *name, char *buf, size_t cap, const char **out,
                      size_t *n, char *err, size_t errlen)
{
    const json_t *v = json_object_get(root, name);
    *out = NULL;
    *n = 0;
    if (v == NULL) return 0;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        *n = json_string_length(v);
        return 0;
    }
    if (json_is_integer(v)) {
        int k = snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        *out = buf;
        *n = (size_t)k;
        return 0;
    }
    snprintf(err, errlen, "%s must be %s", name,
             strcmp(name, "key") == 0 ? "a string" : "an integer (or a string)");
    return -1;
}

/* The fields a body may hold, per endpoint (NULL-ended), for the message
 * naming an unknown one. */
static const char *const acquire_fields[] = {"key", "max", "ttl_ms", "at", NULL};
static const char *const release_fields[] = {"key", "id", NULL};
static const char *const reserve_fields[] = {"key",   "limit",     "window", "estimate", "algo",
                                             "burst", "precision", "at",     NULL};
static const char *const settle_fields[] = {"key", "id", "actual", NULL};

static int known_fields(const json_t *root, const char *const *names, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    char qb[64];
    json_object_foreach((json_t *)root, k, v)
    {
        int ok = 0;
        for (const char *const *n = names; *n && !ok; n++) ok = strcmp(*n, k) == 0;
        if (!ok) {
            size_t off = (size_t)snprintf(err, errlen, "unknown field '%s' (expected",
                                          sl__quote(qb, sizeof qb, k, strlen(k)));
            for (const char *const *n = names; *n && off < errlen; n++)
                off +=
                    (size_t)snprintf(err + off, errlen - off, "%s %s", n == names ? "" : ",", *n);
            if (off < errlen) snprintf(err + off, errlen - off, ")");
            return -1;
        }
    }
    return 0;
}

/* The parsed fields of a body: up to 8 values as text. */
typedef struct hold_body {
    const char *v[8];
    size_t n[8];
    char num[8][24];
} hold_body;

static void run(http_worker *hw, const sl_hreq *req, int what)
{
    static const char *const *const names[] = {acquire_fields, release_fields, reserve_fields,
                                               settle_fields};
    static const char *const paths[] = {"/v1/acquire", "/v1/release", "/v1/reserve", "/v1/settle"};
    char err[SL_SVC_ERR], qb[64];
    sl_svc_ctx *x = hw->svc;
    if (req->query != NULL && req->query[0] != '\0') {
        snprintf(err, sizeof err,
                 "POST %s takes no query string: send the request as the JSON body", paths[what]);
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    json_error_t je;
    json_t *root =
        json_loadb(req->body_len ? req->body : "", req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL || !json_is_object(root)) {
        if (root == NULL)
            snprintf(err, sizeof err, "the body is not JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
        else
            snprintf(err, sizeof err, "the body must be a JSON object");
        json_decref(root);
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    hold_body b;
    const char *const *f = names[what];
    int bad = known_fields(root, f, err, sizeof err);
    size_t nf = 0;
    for (; f[nf] != NULL && !bad; nf++)
        bad = field_text(root, f[nf], b.num[nf], sizeof b.num[nf], &b.v[nf], &b.n[nf], err,
                         sizeof err);
    int64_t now = sl_now_ms(), at = now;
    for (size_t i = 0; !bad && i < (what == H_RESERVE ? 4u : what == H_ACQUIRE ? 2u : nf); i++)
        if (b.v[i] == NULL) {
            snprintf(err, sizeof err, "missing field %s", f[i]);
            bad = 1;
        }
    if (!bad) bad = sl__parse_key(b.v[0], b.n[0], err, sizeof err) != 0;
    hold_req *q = sl_slot_data(req->a.slot);
    q->a = req->a;
    q->wh = 1000 << 2 | what;
    int64_t v1 = 0, v2 = 0, id = 0;
    sl__allow_req ar;
    switch (bad ? -1 : what) {
    case H_ACQUIRE:
        v2 = SL_DEFAULT_LEASE_TTL_MS;
        if (sl_int_parse(b.v[1], b.n[1], SL_MAX_CONCURRENCY, &v1) != 0 || v1 < 1) {
            snprintf(err, sizeof err, "max must be an integer between 1 and %d, got '%s'",
                     SL_MAX_CONCURRENCY, sl__quote(qb, sizeof qb, b.v[1], b.n[1]));
            bad = 1;
        } else if (b.v[2] &&
                   (sl_duration_parse(b.v[2], b.n[2], &v2) != 0 || v2 > SL_MAX_LEASE_TTL_MS)) {
            snprintf(err, sizeof err,
                     "TTL must be a duration between 1 ms and %lld ms (1d), got '%s'",
                     (long long)SL_MAX_LEASE_TTL_MS, sl__quote(qb, sizeof qb, b.v[2], b.n[2]));
            bad = 1;
        } else if (b.v[3]) {
            bad = sl_svc_parse_at(x, now, b.v[3], b.n[3], &at, err, sizeof err) != 0;
        }
        if (bad) break;
        q->wh = v2 << 2 | what;
        sl_svc_acquire(x, b.v[0], b.n[0], v1, v2, at, on_hold, q);
        break;
    case H_RELEASE:
        if (sl_int_parse(b.v[1], b.n[1], INT64_MAX, &id) != 0) id = 0; /* no lease's id */
        sl_svc_release(x, b.v[0], b.n[0], (uint64_t)id, now, on_hold, q);
        break;
    case H_RESERVE: {
        /* RL.RESERVE's arguments, for sl__parse_allow: its words for each */
        static const char *const opt[] = {"ALGO", "BURST", "PRECISION"};
        sl__arg a[SL__ALLOW_ARGS];
        int n = 0;
        a[n++] = (sl__arg){b.v[1], b.n[1]};
        a[n++] = (sl__arg){b.v[2], b.n[2]};
        a[n++] = (sl__arg){"COST", 4};
        a[n++] = (sl__arg){b.v[3], b.n[3]};
        for (int i = 0; i < 3; i++)
            if (b.v[4 + i]) {
                a[n++] = (sl__arg){opt[i], strlen(opt[i])};
                a[n++] = (sl__arg){b.v[4 + i], b.n[4 + i]};
            }
        bad = sl__parse_allow(a, n, NULL, NULL, NULL, &ar, err, sizeof err) < 0 ||
              (b.v[7] && sl_svc_parse_at(x, now, b.v[7], b.n[7], &at, err, sizeof err) != 0);
        if (!bad && ar.p.algo == SL_SLIDING_LOG) {
            snprintf(err, sizeof err,
                     "RL.RESERVE does not take sliding-log: a logged request's cost cannot be "
                     "settled afterwards (use sliding-window or sliding-buckets)");
            bad = 1;
        }
        if (bad) break;
        q->wh = ar.p.window_ms << 2 | what;
        sl_svc_reserve(x, b.v[0], b.n[0], &ar.p, ar.cost, at, on_hold, q);
        break;
    }
    case H_SETTLE:
        bad = sl__parse_cost(b.v[2], b.n[2], &v1, err, sizeof err) != 0;
        if (bad) break;
        if (sl_int_parse(b.v[1], b.n[1], INT64_MAX, &id) != 0) id = 0;
        sl_svc_settle(x, b.v[0], b.n[0], (uint64_t)id, v1, now, on_hold, q);
        break;
    default: break;
    }
    if (bad) sl_http_send_error(&req->a, 400, "Bad Request", err);
    json_decref(root); /* the service read the key during the call, or copied it */
}

void sl_http_v1_acquire(http_worker *hw, const sl_hreq *req) { run(hw, req, H_ACQUIRE); }
void sl_http_v1_release(http_worker *hw, const sl_hreq *req) { run(hw, req, H_RELEASE); }
void sl_http_v1_reserve(http_worker *hw, const sl_hreq *req) { run(hw, req, H_RESERVE); }
void sl_http_v1_settle(http_worker *hw, const sl_hreq *req) { run(hw, req, H_SETTLE); }
