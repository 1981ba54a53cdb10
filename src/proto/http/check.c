/*
 * check.c -- POST /v1/check (SPEC section 8): RL.CHECK as JSON.  The body
 * is parsed with jansson into the descriptors RL.CHECK takes, decided by
 * the service layer (sl_svc_check, the very call RESP's RL.CHECK makes),
 * and answered with the overall six fields, one status per descriptor and
 * the RateLimit headers of the rules that applied.  The answer is shared
 * with forward-auth (fauth.c): check_int.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check_int.h"
#include "http_int.h"
#include "service.h"
#include "wait.h"

/* ---- the answer ------------------------------------------------------------- */

void sl_http_check_headers(sl_hhdrs *h, const sl_svc_reply *r)
{
    sl_rlh o;
    sl_hhdrs_rlh(h, &o);
    sl_rlh_check(&o, r->st, r->n, &r->result);
    sl_hhdrs_took(h, &o);
}

static json_t *statuses(const sl_svc_reply *r)
{
    json_t *a = json_array();
    for (int d = 0; a && d < r->n; d++) {
        const sl_check_status *st = &r->st[d];
        json_t *o = json_pack("{s:s,s:o,s:I,s:I,s:I,s:I}", "code", sl_check_code_name(st->code),
                              "rule", st->name ? json_string(st->name) : json_null(), "limit",
                              (json_int_t)st->limit, "remaining", (json_int_t)st->remaining,
                              "retry_after_ms", (json_int_t)st->retry_after_ms, "reset_after_ms",
                              (json_int_t)st->reset_after_ms);
        if (o == NULL || json_array_append_new(a, o) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* The reason phrase of a denial's status (--auth-deny-status). */
static const char *deny_reason(int status)
{
    switch (status) {
    case 429: return "Too Many Requests";
    case 403: return "Forbidden";
    case 401: return "Unauthorized";
    case 503: return "Service Unavailable";
    }
    return status >= 500 ? "Server Error" : "Client Error";
}

static void on_checked(void *arg, const sl_svc_reply *r)
{
    sl_http_check cc = *(const sl_http_check *)arg, *c = &cc;
    if (r->rc < 0) {
        if (r->rc == SL_ENOMEM || r->rc == SL_EFULL) /* EFULL: the waiting room's bounds */
            sl_http_send_error(&c->a, 503, "Service Unavailable", r->err);
        else
            sl_http_send_error(&c->a, 400, "Bad Request", r->err);
        return;
    }
    const sl_result *x = &r->result;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_http_check_headers(&h, r);
    if (!c->json) {
        if (x->allowed)
            sl_http_send(&c->a, 200, "OK", &h, NULL, NULL, 0);
        else
            sl_http_send(&c->a, c->deny_status, deny_reason(c->deny_status), &h, NULL, NULL, 0);
        return;
    }
    json_t *st = statuses(r);
    json_t *o =
        st == NULL ? NULL
                   : json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:o}", "allowed", x->allowed != 0, "limit",
                               (json_int_t)x->limit, "remaining", (json_int_t)x->remaining,
                               "retry_after_ms", (json_int_t)x->retry_after_ms, "reset_after_ms",
                               (json_int_t)x->reset_after_ms, "delay_ms", (json_int_t)x->delay_ms,
                               "statuses", st);
    if (o != NULL && r->nleases > 0) { /* a concurrency limit matched: the leases held */
        json_t *ls = json_array();
        for (int j = 0; ls != NULL && j < r->nleases; j++) {
            if (r->lid[j] == 0) continue;
            json_t *l = json_pack("{s:s%,s:I}", "key", r->leases[j].key, r->leases[j].keylen,
                                  "id", (json_int_t)r->lid[j]);
            if (l == NULL || json_array_append_new(ls, l) != 0) {
                json_decref(ls);
                ls = NULL;
            }
        }
        if (ls == NULL || json_object_set_new(o, "leases", ls) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    if (x->allowed)
        sl_http_send_json_h(&c->a, &h, 200, "OK", o);
    else
        sl_http_send_json_h(&c->a, &h, 429, "Too Many Requests", o);
}

void sl_http_check_run(http_worker *hw, const sl_http_check *c, const sl_svc_check_req *q)
{
    const char *why;
    if (sl_svc_rules(hw->svc, &why) == NULL) {
        sl_http_send_error(&c->a, 503, "Service Unavailable", why);
        return;
    }
    /* the answer may come after this returns: its state in the slot */
    sl_http_check *cc = sl_slot_data(c->a.slot);
    *cc = *c;
    sl_svc_check(hw->svc, q, on_checked, cc);
}

/* As sl_http_check_run, waiting up to wait ms in the line of the domain
 * and the first descriptor (wait.h: sl_wait_check). */
static void check_wait(http_worker *hw, sl_conn *conn, const sl_http_check *c,
                       const sl_svc_check_req *q, int64_t now, int64_t wait)
{
    const char *why;
    if (sl_svc_rules(hw->svc, &why) == NULL) {
        sl_http_send_error(&c->a, 503, "Service Unavailable", why);
        return;
    }
    sl_http_check *cc = sl_slot_data(c->a.slot);
    *cc = *c;
    sl_wait_check(hw->svc, conn, q, now, wait, on_checked, cc);
}

/* ---- POST /v1/check --------------------------------------------------------- */

/* The body's descriptors, as RL.CHECK takes them; strings borrowed from
 * the parsed JSON. */
typedef struct check_body {
    const char *domain;
    size_t dlen;
    int n;
    int ndesc[SL_CHECK_MAX_DESC];
    const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
    sl_rule_entry ent[SL_CHECK_MAX_DESC][SL_RULES_MAX_DEPTH];
    int64_t cost, at;
    int ncosts; /* "costs": one per descriptor; -1: none */
    int64_t costs[SL_CHECK_MAX_DESC];
} check_body;

/* Reads the JSON number v of field `name` as the decimal text the RESP
 * parsers take, so their messages are the ones a client gets. */
static int int_field(const json_t *v, const char *name, char *txt, size_t cap, char *err,
                     size_t errlen)
{
    if (!json_is_integer(v)) {
        snprintf(err, errlen, "%s must be an integer", name);
        return -1;
    }
    snprintf(txt, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return 0;
}

/* One descriptor entry {"key": K, "value": V} at descriptors[d][i]. */
static int parse_entry(check_body *b, int d, int i, const json_t *e, char *err, size_t errlen)
{
    char qb[80];
    if (!json_is_object(e)) {
        snprintf(err, errlen, "descriptors[%d][%d] must be an object {\"key\": K, \"value\": V}", d,
                 i);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)e, k, v)
    {
        if (strcmp(k, "key") != 0 && strcmp(k, "value") != 0) {
            snprintf(err, errlen,
                     "descriptors[%d][%d] has an unknown field '%s' (expected key "
                     "and value)",
                     d, i, sl__quote(qb, sizeof qb, k, strlen(k)));
            return -1;
        }
    }
    static const char *const f[2] = {"key", "value"};
    const json_t *s[2];
    for (int j = 0; j < 2; j++) {
        s[j] = json_object_get(e, f[j]);
        if (!json_is_string(s[j])) {
            snprintf(err, errlen, "descriptors[%d][%d].%s must be a string%s", d, i, f[j],
                     s[j] == NULL ? " (it is missing)" : "");
            return -1;
        }
    }
    b->ent[d][i] = (sl_rule_entry){json_string_value(s[0]), json_string_length(s[0]),
                                   json_string_value(s[1]), json_string_length(s[1])};
    return 0;
}

/* The body's fields into *b; 0, or -1 with the client's message in err. */
static int parse_body(http_worker *hw, const json_t *root, int64_t now, check_body *b, char *err,
                      size_t errlen)
{
    char qb[80], txt[32];
    if (!json_is_object(root)) {
        snprintf(err, errlen,
                 "the body must be a JSON object {\"domain\": D, \"descriptors\": "
                 "[[{\"key\": K, \"value\": V}, ...], ...]}");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)root, k, v)
    {
        if (strcmp(k, "domain") && strcmp(k, "descriptors") && strcmp(k, "cost") &&
            strcmp(k, "costs") && strcmp(k, "at")) {
            snprintf(err, errlen,
                     "unknown field '%s' (expected domain, descriptors, cost, costs or at)",
                     sl__quote(qb, sizeof qb, k, strlen(k)));
            return -1;
        }
    }
    b->ncosts = -1;
    if ((v = json_object_get(root, "costs")) != NULL) { /* descriptor i's own cost */
        const json_t *ds0 = json_object_get(root, "descriptors");
        if (json_object_get(root, "cost") != NULL) {
            snprintf(err, errlen, "give cost or costs, not both");
            return -1;
        }
        if (!json_is_array(v) || !json_is_array(ds0) ||
            json_array_size(v) != json_array_size(ds0) || json_array_size(v) > SL_CHECK_MAX_DESC) {
            snprintf(err, errlen, "costs must be an array of integers, one per descriptor");
            return -1;
        }
        b->ncosts = (int)json_array_size(v);
        for (int i = 0; i < b->ncosts; i++) {
            char name[24];
            snprintf(name, sizeof name, "costs[%d]", i);
            if (int_field(json_array_get(v, (size_t)i), name, txt, sizeof txt, err, errlen) != 0 ||
                sl__parse_cost(txt, strlen(txt), &b->costs[i], err, errlen) != 0)
                return -1;
        }
    }
    const json_t *dom = json_object_get(root, "domain");
    if (!json_is_string(dom)) {
        snprintf(err, errlen, "domain must be a string%s", dom == NULL ? " (it is missing)" : "");
        return -1;
    }
    b->domain = json_string_value(dom);
    b->dlen = json_string_length(dom);
    b->cost = 1;
    b->at = now;
    if ((v = json_object_get(root, "cost")) != NULL &&
        (int_field(v, "cost", txt, sizeof txt, err, errlen) != 0 ||
         sl__parse_cost(txt, strlen(txt), &b->cost, err, errlen) != 0))
        return -1;
    if ((v = json_object_get(root, "at")) != NULL &&
        (int_field(v, "at", txt, sizeof txt, err, errlen) != 0 ||
         sl_svc_parse_at(hw->svc, now, txt, strlen(txt), &b->at, err, errlen) != 0))
        return -1;
    const json_t *ds = json_object_get(root, "descriptors");
    sl_check_shape shape =
        json_is_array(ds) ? sl_check_shape_desc((int64_t)json_array_size(ds)) : SL_CHECK_SHAPE_NONE;
    if (shape == SL_CHECK_SHAPE_NONE) {
        snprintf(err, errlen,
                 "descriptors must be a non-empty array of descriptors "
                 "([[{\"key\": K, \"value\": V}, ...], ...])%s",
                 ds == NULL ? " (it is missing)" : "");
        return -1;
    }
    if (shape == SL_CHECK_SHAPE_MANY) {
        snprintf(err, errlen, "at most %d descriptors in one RL.CHECK, got %zu", SL_CHECK_MAX_DESC,
                 json_array_size(ds));
        return -1;
    }
    b->n = (int)json_array_size(ds);
    for (int d = 0; d < b->n; d++) {
        const json_t *one = json_array_get(ds, (size_t)d);
        shape = json_is_array(one) ? sl_check_shape_entries((int64_t)json_array_size(one))
                                   : SL_CHECK_SHAPE_NONE;
        if (shape == SL_CHECK_SHAPE_NONE) {
            snprintf(err, errlen,
                     "descriptors[%d] must be a non-empty array of entries "
                     "[{\"key\": K, \"value\": V}, ...]",
                     d);
            return -1;
        }
        if (shape == SL_CHECK_SHAPE_MANY) {
            snprintf(err, errlen, "descriptors[%d]: at most %d entries in one descriptor", d,
                     SL_RULES_MAX_DEPTH);
            return -1;
        }
        b->ndesc[d] = (int)json_array_size(one);
        b->descs[d] = b->ent[d];
        for (int i = 0; i < b->ndesc[d]; i++)
            if (parse_entry(b, d, i, json_array_get(one, (size_t)i), err, errlen) != 0) return -1;
    }
    return 0;
}

void sl_http_v1_check(http_worker *hw, const sl_hreq *req)
{
    char err[SL_SVC_ERR];
    int64_t wait = -1; /* ?wait=ms: the whole check waits (wait.h) */
    if (req->query != NULL && req->query[0] != '\0') {
        if (strncmp(req->query, "wait=", 5) != 0) {
            sl_http_send_error(&req->a, 400, "Bad Request",
                               "POST /v1/check takes no query string but wait=ms: send the "
                               "request as the JSON body");
            return;
        }
        const char *v = req->query + 5;
        if (sl_wait_parse_timeout(v, strlen(v), hw->cfg->max_wait_ms, &wait, err, sizeof err) !=
            0) {
            sl_http_send_error(&req->a, 400, "Bad Request", err);
            return;
        }
        if (hw->cfg->count_denied) {
            sl_http_send_error(&req->a, 400, "Bad Request",
                               "wait is refused: this server charges denied checks "
                               "(--count-denied), so each try would be charged");
            return;
        }
    }
    size_t len = req->body_len;
    const char *data = len ? req->body : "";
    json_error_t je;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        snprintf(err, sizeof err, "the body is not JSON: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    check_body *b = malloc(sizeof *b);
    if (b == NULL) {
        json_decref(root);
        sl_http_send_error(&req->a, 503, "Service Unavailable", "out of memory");
        return;
    }
    int64_t now = sl_now_ms();
    if (parse_body(hw, root, now, b, err, sizeof err) != 0) {
        sl_http_send_error(&req->a, 400, "Bad Request", err);
    } else {
        sl_http_check c = {req->a, 1, 0};
        sl_svc_check_req q = {.domain = b->domain,
                              .dlen = b->dlen,
                              .n = b->n,
                              .descs = b->descs,
                              .ndesc = b->ndesc,
                              .cost = b->ncosts > 0 ? b->costs[0] : b->cost,
                              .costs = b->ncosts > 0 ? b->costs : NULL,
                              .at = b->at,
                              .conc = SL_CHECK_CONC_LEASE};
        if (wait >= 0 && b->at != now)
            sl_http_send_error(&req->a, 400, "Bad Request",
                               "at is refused with wait: a waiter is decided at the server's "
                               "clock");
        else if (wait >= 0)
            check_wait(hw, req->conn, &c, &q, now, wait);
        else
            sl_http_check_run(hw, &c, &q);
    }
    free(b);
    json_decref(root);
}
