/*
 * resp_commands.c -- the RESP protocol module: sluiced's commands (SPEC
 * section 7), from parsed arguments to reply bytes, over the service layer
 * (service.h).  Decisions are the service's; this file reads arguments,
 * checks their syntax, and writes replies.
 *
 * One table (commands[]) drives dispatch, arity errors and COMMAND.  Every
 * request opens a reply slot (proto.h) before it runs and fills it when
 * its answer is known -- at once with the local backend, later with one
 * that answers asynchronously; net.c sends the replies in request order.
 *
 * Every bad argument gets a "-ERR ..." reply naming what is wrong, and the
 * backend is not asked: everything is checked before a decision.
 *
 * Who may run what (auth.h): each connection remembers the user it logged
 * in as (sl_conn_pdata); each row of the table names the command group it
 * needs.  Before a login, with a password configured, only AUTH, HELLO and
 * QUIT run; every other command, known or not, answers "-NOAUTH
 * Authentication required." (SPEC section 7).  A logged-in user without the
 * command's group gets Redis 7.0's "-NOPERM this user has no permissions to
 * run the 'x' command".  File paths in INFO and RL.RULES are shown to
 * admin users only.
 *
 * Protocols: a connection speaks RESP2 until HELLO 3 switches it to RESP3
 * (HELLO 2 switches back).  Replies are framed as Redis 7 frames them on
 * each (resp.h): in RESP3 key/value replies are maps (HELLO, RL.RULES,
 * CONFIG GET), INFO and CLIENT INFO verbatim strings, absent values nulls;
 * the decision arrays of RL.ALLOW, RL.PEEK and RL.CHECK are the same
 * integers on both, so code that reads them reads them the same way.
 *
 * The state of a connection (struct client: its user, protocol, id, name,
 * the transaction it is queueing) is allocated at its first command and
 * freed by net.c through sl_resp_proto.closed.
 *
 * Transactions (MULTI ... EXEC, as Redis): after MULTI each command is
 * checked as Redis checks it before queueing (known, permitted, arity),
 * its bytes as sent are kept in the connection's queue and it answers
 * +QUEUED; one that fails those checks answers its error and dooms the
 * transaction (EXEC then answers EXECABORT).  EXEC opens a slot with the
 * array's header, "*N", then runs the queued commands in order, each
 * opening its own slot as any request does: whether they answer at once or
 * later (a Redis backend), net.c sends the slots in order, so the header
 * and the N replies after it form EXEC's array.  Bounded by
 * SL_RESP_MAX_QUEUED commands and max-command bytes.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "live.h"
#include "proto.h"
#include "resp.h"
#include "resp_commands.h"
#include "resp_int.h"
#include "service.h"
#include "util.h"
#include "wait.h"

/* ---- the state of a connection ----------------------------------------- */

/* What the module keeps per connection (sl_conn_pdata), from its first
 * command on (NULL before, or if that allocation failed: then it is tried
 * again by the commands that need it).  Owned by the connection; touched
 * only by its worker. */
typedef struct client {
    const sl_auth_user *who; /* logged in as (AUTH, HELLO); NULL: not */
    unsigned long long id;   /* CLIENT ID: unique in the process, from 1 */
    int proto;               /* SL_RESP2 or SL_RESP3 */
    int64_t since_ms;        /* the server's clock at its first command (CLIENT INFO's age) */
    char *name;              /* CLIENT SETNAME; NULL: none.  malloc'd, as the two below */
    char *lib_name;          /* CLIENT SETINFO LIB-NAME; NULL: none */
    char *lib_ver;           /* CLIENT SETINFO LIB-VER; NULL: none */
    /* MULTI ... EXEC (see the top of the file) */
    int multi;     /* 1 from MULTI until EXEC or DISCARD */
    int doomed;    /* a command failed to queue: EXEC answers EXECABORT */
    int nqueued;   /* commands in queued (<= SL_RESP_MAX_QUEUED) */
    sl_buf queued; /* their bytes as sent (<= max-command); empty once doomed */
    /* RL.ALLOW's (RL.PEEK's) last arguments, parsed (allow_args) */
    sl__allow_memo memo;
} client;

/* The last id given (CLIENT ID, HELLO's id), as Redis: in the order
 * connections send their first command, from 1. */
static _Atomic unsigned long long last_id;

static void client_free(void *pdata)
{
    client *cl = pdata;
    if (cl == NULL) return;
    free(cl->name);
    free(cl->lib_name);
    free(cl->lib_ver);
    free(cl->queued.p);
    free(cl);
}

const sl_auth_user *sl_resp_conn_user(const sl_conn *c)
{
    const client *cl = sl_conn_pdata(c);
    return cl ? cl->who : NULL;
}

int sl_resp_conn_proto(const sl_conn *c)
{
    const client *cl = sl_conn_pdata(c);
    return cl ? cl->proto : SL_RESP2;
}

/* ---- the request being run --------------------------------------------- */

/* What a command runs with (req) is in resp_int.h, shared with resp_info.c. */

/* q's connection's state, allocated (with its id) if it has none yet;
 * NULL when out of memory. */
static client *client_of(req *q)
{
    if (q->cl == NULL) {
        client *cl = calloc(1, sizeof *cl);
        if (cl == NULL) return NULL;
        cl->id = atomic_fetch_add_explicit(&last_id, 1, memory_order_relaxed) + 1;
        cl->proto = SL_RESP2;
        cl->since_ms = q->now;
        sl_conn_set_pdata(q->c, cl);
        q->cl = cl;
    }
    return q->cl;
}

/* Writes an error reply into slot s and counts it. */
static void slot_err(sl_svc_ctx *x, sl_slot *s, const char *msg)
{
    sl_resp_err(sl_slot_buf(s), msg);
    sl_stat_inc(&x->st->errors, 1);
    sl_slot_done(s);
}

/* "-ERR <fmt>" as this request's reply. */
static void err_reply(req *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void err_reply(req *q, const char *fmt, ...)
{
    char msg[SL_SVC_ERR];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_slot *s = sl_conn_slot(q->c);
    if (s != NULL) slot_err(q->x, s, msg);
}

/* A whole error line ("-CODE text\r\n") as this request's reply. */
static void raw_err(req *q, const char *line)
{
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_resp_raw(sl_slot_buf(s), line);
    sl_stat_inc(&q->x->st->errors, 1);
    sl_slot_done(s);
}

static const char *quote(char *dst, size_t cap, const sl_resp_arg *a)
{
    return sl__quote(dst, cap, a->p, a->len);
}

/* ---- the answers of the service ------------------------------------------ */

/* The service's callbacks get the slot as their argument. */
static void on_fields(void *arg, const sl_svc_reply *r)
{
    sl_slot *s = arg;
    sl_svc_ctx *x = sl_slot_svc(s);
    if (r->rc < 0) {
        slot_err(x, s, r->err);
        return;
    }
    sl_resp_fields_array(sl_slot_buf(s), &r->result);
    sl_slot_done(s);
}

/* A run answered straight out (run_flush): its connection, and where
 * its replies go (sl_conn_out_now's answer). */
typedef struct now_out {
    sl_conn *c;
    sl_buf *b;
} now_out;

/* on_fields for a request held without a slot (run_flush): the reply
 * straight out, then the hold released. */
static void on_fields_now(void *arg, const sl_svc_reply *r)
{
    const now_out *o = arg;
    if (r->rc < 0) {
        sl_resp_err(o->b, r->err);
        sl_stat_inc(&sl_conn_svc(o->c)->st->errors, 1);
    } else {
        sl_resp_fields_array(o->b, &r->result);
    }
    sl_conn_release(o->c);
}

static void on_reset(void *arg, const sl_svc_reply *r)
{
    sl_slot *s = arg;
    if (r->rc < 0) {
        slot_err(sl_slot_svc(s), s, r->err);
        return;
    }
    sl_resp_int(sl_slot_buf(s), r->existed);
    sl_slot_done(s);
}

/* RL.CHECK's reply: the six fields for the most restrictive outcome, then
 * per descriptor [code, rule name (null for NO_RULE), limit, remaining,
 * retry_after_ms, reset_after_ms].  Written when the service answers, maybe
 * later: the protocol comes with the callback (on_check2, on_check3), as
 * the connection may be gone by then. */
static void on_check(sl_slot *s, const sl_svc_reply *r, int proto)
{
    if (r->rc < 0) {
        slot_err(sl_slot_svc(s), s, r->err);
        return;
    }
    sl_buf *b = sl_slot_buf(s);
    sl_resp_array(b, 6 + r->n + (r->nleases > 0));
    sl_resp_fields(b, &r->result);
    for (int d = 0; d < r->n; d++) {
        const sl_check_status *st = &r->st[d];
        sl_resp_raw(b, "*6\r\n");
        sl_resp_bulk_str(b, sl_check_code_name(st->code));
        if (st->name)
            sl_resp_bulk_str(b, st->name);
        else
            sl_resp_null(b, proto);
        sl_resp_int(b, st->limit);
        sl_resp_int(b, st->remaining);
        sl_resp_int(b, st->retry_after_ms);
        sl_resp_int(b, st->reset_after_ms);
    }
    if (r->nleases > 0) { /* a concurrency limit matched: the leases held, [key, id] each */
        int held = 0;
        for (int j = 0; j < r->nleases; j++) held += r->lid[j] != 0;
        sl_resp_array(b, held);
        for (int j = 0; j < r->nleases; j++) {
            if (r->lid[j] == 0) continue;
            sl_resp_raw(b, "*2\r\n");
            sl_resp_bulk(b, r->leases[j].key, r->leases[j].keylen);
            sl_resp_int(b, (long long)r->lid[j]);
        }
    }
    sl_slot_done(s);
}

static void on_check2(void *arg, const sl_svc_reply *r) { on_check(arg, r, SL_RESP2); }
static void on_check3(void *arg, const sl_svc_reply *r) { on_check(arg, r, SL_RESP3); }

/* ---- RL.ALLOW / RL.PEEK ----------------------------------------------------- */

/* AT's value, read by the service's rule (sl__parse_allow's at). */
static int allow_at(void *ctx, const char *s, size_t n, int64_t *out, char *err, size_t errlen)
{
    const req *q = ctx;
    return sl_svc_parse_at(q->x, q->now, s, n, out, err, errlen);
}

/* RL.ALLOW's (RL.PEEK's) arguments of q into *r: 0, or -1 with the
 * client's message in err.  Pure: nothing asked of the backend.  The
 * connection's memo answers a request whose arguments are the last one's
 * (a client sends the same limit and window again and again). */
static int allow_args(req *q, sl__allow_req *r, char *err, size_t errlen)
{
    const sl_resp_cmd *c = q->cmd;
    const sl_resp_arg *key = &c->argv[1];
    sl__arg a[SL__ALLOW_ARGS];
    int n = c->argc - 2 < SL__ALLOW_ARGS ? c->argc - 2 : SL__ALLOW_ARGS;
    for (int i = 0; i < n; i++) a[i] = (sl__arg){c->argv[2 + i].p, c->argv[2 + i].len};
    if (sl__parse_key(key->p, key->len, err, errlen) != 0) return -1;
    if (q->cl != NULL) {
        const sl__allow_req *hit = sl__allow_memo_get(&q->cl->memo, a, n);
        if (hit != NULL) {
            *r = *hit;
            return 0;
        }
        return sl__parse_allow_memo(&q->cl->memo, a, n, allow_at, q, r, err, errlen) < 0 ? -1 : 0;
    }
    return sl__parse_allow(a, n, NULL, allow_at, q, r, err, errlen) < 0 ? -1 : 0;
}

/* RL.ALLOW key limit window [ALGO name] [COST c] [BURST b] [PRECISION p]
 *          [LOGREJECTED] [AT t]   (RL.PEEK: the same, nothing consumed):
 * the grammar is sl__parse_allow's (src/lib/args.c), the module's too */
static void decide(req *q, int commit)
{
    char err[SL_SVC_ERR];
    const sl_resp_arg *key = &q->cmd->argv[1];
    sl__allow_req r;
    if (allow_args(q, &r, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    /* the service checks the parameters: its error names the bad one */
    sl_svc_allow(q->x, key->p, key->len, &r.p, r.cost, r.has_at ? r.at : q->now, commit, on_fields,
                 s);
}

/* ---- a pipelined run of RL.ALLOW, decided as one batch ----------------------- */

/* The worker's scratch (sl_conn_scratch): the command being parsed and
 * run, and the run of RL.ALLOW held back to be decided together.  Shared
 * by the worker's connections: the run is always empty when run() returns. */
typedef struct scratch {
    sl_resp_cmd cmd;
    size_t n;                      /* RL.ALLOW held: calls[0..n) */
    sl_call calls[SL_SVC_MANY];    /* key: into the connection's input, valid during run() */
    sl_params params[SL_SVC_MANY]; /* calls[i].params == &params[i] */
} scratch;

/* Decides the held run (if any) as one batch (sl_svc_allow_many), each
 * answer into a slot opened now, in request order: a held request has
 * no slot yet, and no later request of the connection has opened one,
 * since every other command -- and every reply that is not a held
 * RL.ALLOW's -- flushes the run first.  So the replies are those of the
 * requests run one at a time, in their order. */
typedef struct now_out now_out;
static void on_fields_now(void *arg, const sl_svc_reply *r);

static void run_flush(sl_conn *c)
{
    scratch *sc = sl_conn_scratch(c);
    size_t n = sc->n;
    void *slots[SL_SVC_MANY];
    if (n == 0) return;
    sc->n = 0;
    now_out o = {c, sl_conn_out_now(c)};
    if (o.b != NULL) {
        /* no reply pending before the run: each answer, made during the
         * call (the backend is inline: sl_svc_many_max), goes straight
         * out to o.b -- where it stays while the run is answered: no slot
         * is opened meanwhile -- held as a slot would be (the same bound
         * checks, the same counts) but with no slot to open, queue and
         * free */
        for (size_t i = 0; i < n; i++) {
            sl_conn_hold(c);
            slots[i] = &o;
        }
        sl_svc_allow_many(sl_conn_svc(c), sc->calls, n, slots, on_fields_now);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if ((slots[i] = sl_conn_slot(c)) == NULL) { /* out of memory: net.c drops c */
            n = i;
            break;
        }
    sl_svc_allow_many(sl_conn_svc(c), sc->calls, n, slots, on_fields);
}

/* RL.ALLOW, known to pass its checks (permitted, arity, not in MULTI), on
 * a backend that decides a run at once: held in the run, decided when the
 * run ends -- a command of another kind, a bad argument (its error then
 * follows the run's answers), SL_SVC_MANY of them, or the end of what
 * this read holds (run()).  A bad argument is found now, as the request
 * would have found it alone: nothing else is read to check it. */
static void allow_hold(req *q)
{
    char err[SL_SVC_ERR];
    const sl_resp_arg *key = &q->cmd->argv[1];
    sl__allow_req r;
    if (allow_args(q, &r, err, sizeof err) != 0) {
        run_flush(q->c);
        err_reply(q, "%s", err);
        return;
    }
    scratch *sc = sl_conn_scratch(q->c);
    size_t i = sc->n++;
    sc->params[i] = r.p;
    sc->calls[i] = (sl_call){.params = &sc->params[i],
                             .key = key->p,
                             .keylen = key->len,
                             .now_ms = r.has_at ? r.at : q->now,
                             .cost = r.cost};
    if (sc->n >= SL_SVC_MANY) run_flush(q->c); /* sl_svc_many_max: joins_run checked it */
}

static void cmd_allow(req *q) { decide(q, 1); }
static void cmd_peek(req *q) { decide(q, 0); }

/* ---- RL.WAIT ---------------------------------------------------------------- */

/* RL.WAIT key limit window [ALGO name] [COST c] [BURST b] [PRECISION p]
 *         TIMEOUT ms: RL.ALLOW's request, waiting in the key's line until
 * allowed or until the timeout passes (wait.h, docs/commands-wait.md).
 * Inside MULTI ... EXEC it does not wait (TIMEOUT 0), as Redis runs a
 * blocking command in a transaction.  AT and LOGREJECTED are refused: a
 * waiter is decided at the server's clock as time passes, and each denied
 * try of log-rejected would be charged. */
static void cmd_wait(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    char err[SL_SVC_ERR];
    const sl_resp_arg *key = &c->argv[1];
    sl__arg a[SL__ALLOW_ARGS + 2];
    sl__allow_req r;
    int n = c->argc - 2;
    if (n > SL__ALLOW_ARGS + 2) {
        err_reply(q, "too many arguments for 'rl.wait' command");
        return;
    }
    for (int i = 0; i < n; i++) a[i] = (sl__arg){c->argv[2 + i].p, c->argv[2 + i].len};
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    int k = sl__parse_allow(a, n, "TIMEOUT", allow_at, q, &r, err, sizeof err);
    if (k < 0) {
        err_reply(q, "%s", err);
        return;
    }
    if (k != n - 2) {
        err_reply(q, k == n ? "RL.WAIT needs TIMEOUT ms after the other arguments"
                            : "RL.WAIT takes nothing after TIMEOUT ms");
        return;
    }
    if (r.has_at) {
        err_reply(q, "AT is refused with RL.WAIT: a waiter is decided at the server's clock");
        return;
    }
    if (r.p.log_rejected) {
        err_reply(q, "LOGREJECTED is refused with RL.WAIT: each denied try would be charged");
        return;
    }
    int64_t timeout;
    const sl_config *cfg = sl_conn_cfg(q->c);
    if (sl_wait_parse_timeout(a[k + 1].p, a[k + 1].len, cfg->max_wait_ms, &timeout, err,
                              sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    if (sl_params_check(&r.p) != 0) { /* the service's words for it, nothing charged */
        sl_svc_allow(q->x, key->p, key->len, &r.p, r.cost, q->now, 0, on_fields, s);
        return;
    }
    sl_wait_allow(q->x, q->c, key->p, key->len, &r.p, r.cost, q->now, q->queued ? 0 : timeout,
                  on_fields, s);
}

/* ---- RL.CHECK --------------------------------------------------------------- */

/* RL.CHECK domain [COST c | COSTS c1 .. cN] [AT t] DESCRIPTOR k v [k v ...] [DESCRIPTOR ...]
 * (COSTS: descriptor i's own cost, one per descriptor: docs/rules.md) */
static void cmd_check(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    char qb[80], err[SL_SVC_ERR];
    sl_rule_entry ent[SL_CHECK_MAX_DESC][SL_RULES_MAX_DEPTH];
    const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
    int ndesc[SL_CHECK_MAX_DESC], n = -1, ncosts = -1;
    int64_t cost = 1, at = q->now, costs[SL_CHECK_MAX_DESC];
    unsigned seen = 0;
    for (int i = 2; i < c->argc;) {
        const sl_resp_arg *o = &c->argv[i];
        if (n < 0 && arg_is(o, "COSTS")) {
            if (seen & 2u || ncosts >= 0) {
                err_reply(q, "give COST or COSTS once, not both");
                return;
            }
            for (ncosts = 0, i++; i < c->argc && !arg_is(&c->argv[i], "DESCRIPTOR") &&
                                  !arg_is(&c->argv[i], "AT");
                 i++, ncosts++) {
                if (ncosts == SL_CHECK_MAX_DESC) {
                    err_reply(q, "COSTS gives more than %d costs", SL_CHECK_MAX_DESC);
                    return;
                }
                if (sl__parse_cost(c->argv[i].p, c->argv[i].len, &costs[ncosts], err,
                                   sizeof err) != 0) {
                    err_reply(q, "COSTS: %s", err);
                    return;
                }
            }
            continue;
        }
        if (n < 0 && ncosts >= 0 && arg_is(o, "COST")) {
            err_reply(q, "give COST or COSTS once, not both");
            return;
        }
        if (arg_is(o, "DESCRIPTOR")) {
            n++; /* descriptor n opens: n + 1 of them */
            if (sl_check_shape_desc(n + 1) == SL_CHECK_SHAPE_MANY) {
                err_reply(q, "at most %d descriptors in one RL.CHECK", SL_CHECK_MAX_DESC);
                return;
            }
            descs[n] = ent[n];
            ndesc[n] = 0;
            i++;
            continue;
        }
        if (n < 0 && (arg_is(o, "COST") || arg_is(o, "AT"))) {
            int is_cost = arg_is(o, "COST");
            if ((seen & (1u << is_cost)) || i + 1 >= c->argc) {
                err_reply(q, "option %s given twice or without a value", is_cost ? "COST" : "AT");
                return;
            }
            seen |= 1u << is_cost;
            const sl_resp_arg *v = &c->argv[i + 1];
            int rc = is_cost ? sl__parse_cost(v->p, v->len, &cost, err, sizeof err)
                             : sl_svc_parse_at(q->x, q->now, v->p, v->len, &at, err, sizeof err);
            if (rc != 0) {
                err_reply(q, "%s", err);
                return;
            }
            i += 2;
            continue;
        }
        if (n < 0) {
            err_reply(q, "expected COST, AT or DESCRIPTOR, got '%s'", quote(qb, sizeof qb, o));
            return;
        }
        if (i + 1 >= c->argc) {
            err_reply(q, "descriptor key '%s' has no value", quote(qb, sizeof qb, o));
            return;
        }
        if (sl_check_shape_entries(ndesc[n] + 1) == SL_CHECK_SHAPE_MANY) {
            err_reply(q, "at most %d entries in one descriptor", SL_RULES_MAX_DEPTH);
            return;
        }
        ent[n][ndesc[n]++] = (sl_rule_entry){o->p, o->len, c->argv[i + 1].p, c->argv[i + 1].len};
        i += 2;
    }
    n++;
    for (int d = 0; d < n; d++) {
        if (sl_check_shape_entries(ndesc[d]) == SL_CHECK_SHAPE_NONE) {
            err_reply(q, "descriptor %d has no entries (expected DESCRIPTOR key value ...)", d + 1);
            return;
        }
    }
    if (sl_check_shape_desc(n) == SL_CHECK_SHAPE_NONE) {
        err_reply(q, "RL.CHECK needs at least one DESCRIPTOR");
        return;
    }
    if (ncosts >= 0 && ncosts != n) {
        err_reply(q, "COSTS gives %d costs for %d descriptors (one each)", ncosts, n);
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_check_req r = {.domain = c->argv[1].p,
                          .dlen = c->argv[1].len,
                          .n = n,
                          .descs = descs,
                          .ndesc = ndesc,
                          .cost = ncosts >= 0 ? costs[0] : cost,
                          .costs = ncosts >= 0 ? costs : NULL,
                          .at = at,
                          .conc = SL_CHECK_CONC_LEASE};
    sl_svc_check(q->x, &r, q->proto == SL_RESP3 ? on_check3 : on_check2, s);
}

/* ---- RL.RESET --------------------------------------------------------------- */

/* RL.RESET key [ALGO name] */
static void cmd_reset(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    char qb[80], err[SL_SVC_ERR];
    if (c->argc != 2 && c->argc != 4) {
        err_reply(q, "wrong number of arguments for 'rl.reset' command");
        return;
    }
    const sl_resp_arg *key = &c->argv[1];
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    int lo = 0, hi = SL_ALGO_COUNT;
    if (c->argc == 4) {
        sl_algo a;
        if (!arg_is(&c->argv[2], "ALGO")) {
            err_reply(q, "unknown option '%s' (expected ALGO)", quote(qb, sizeof qb, &c->argv[2]));
            return;
        }
        if (sl__parse_algo(c->argv[3].p, c->argv[3].len, &a, err, sizeof err) != 0) {
            err_reply(q, "%s", err);
            return;
        }
        lo = (int)a;
        hi = lo + 1;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_reset(q->x, key->p, key->len, lo, hi, on_reset, s);
}

/* ---- RL.RULES --------------------------------------------------------------- */

/* Appends one entry per limit of node and of the nodes below it to dom;
 * returns how many.  Each: [name, descriptor, limit, mode, checked, over,
 * shadow_over, elastic] with the counts of this version (sl_rule_counts). */
static int list_limits(sl_buf *dom, const sl_rule_node *node)
{
    int n = 0;
    for (int j = 0; j < node->nlimits; j++, n++) {
        const sl_rule_limit *l = &node->limits[j];
        char desc[300];
        int dl = sl_rules_limit_format(l, desc, sizeof desc);
        if (dl >= 0 && (size_t)dl < sizeof desc)
            sl_rules_node_notes(node, desc + dl, sizeof desc - (size_t)dl);
        sl_resp_raw(dom, "*8\r\n");
        sl_resp_bulk_str(dom, l->name);
        sl_resp_bulk_str(dom, node->path);
        sl_resp_bulk_str(dom, desc);
        sl_resp_bulk_str(dom, node->shadow_mode  ? "shadow"
                              : node->quota_mode ? "quota"
                                                 : "enforce");
        const sl_rule_counts *k = l->counts;
        sl_resp_int(dom, (long long)atomic_load_explicit(&k->checked, memory_order_relaxed));
        sl_resp_int(dom, (long long)atomic_load_explicit(&k->over, memory_order_relaxed));
        sl_resp_int(dom, (long long)atomic_load_explicit(&k->shadow, memory_order_relaxed));
        sl_resp_int(dom, (long long)atomic_load_explicit(&k->elastic, memory_order_relaxed));
    }
    for (int c = 0; c < node->nchildren; c++) n += list_limits(dom, &node->children[c]);
    return n;
}

static void on_reload(void *arg, const sl_svc_reply *r)
{
    sl_slot *s = arg;
    if (r->rc != 0) {
        slot_err(sl_slot_svc(s), s, r->err);
        return;
    }
    sl_resp_int(sl_slot_buf(s), (long long)r->version);
    sl_slot_done(s);
}

/* A rules file's name as q's user may see it: admins the path, others the
 * name below the rules path (or its last component), which says nothing of
 * where on the system it lives. */
static const char *rules_file_for(const req *q, const char *root, const char *file)
{
    if (is_admin(q)) return file;
    size_t n = strlen(root);
    if (n > 0 && strncmp(file, root, n) == 0 && file[n] == '/' && file[n + 1] != '\0')
        return file + n + 1;
    const char *slash = strrchr(file, '/');
    return slash != NULL && slash[1] != '\0' ? slash + 1 : file;
}

/* RL.RULES: what is serving, as a map (RESP2: a flat array of pairs):
 *   version N  loaded_at_ms T  path P  reloads N  reload_failures N
 *   last_error E ("" if the last reload worked)  last_error_at_ms T
 *   domains [[domain, file, [[name, descriptor, limit, mode, checked, over,
 *             shadow_over, elastic], ...]], ...]
 * RL.RULES RELOAD: reloads (on the reload thread: the reply comes later);
 * replies the new version, or an error with FILE:LINE:COLUMN (the old
 * rules keep serving).  RELOAD is for admin users (the table); for the
 * others the listing hides the paths: path and last_error read HIDDEN, and
 * each domain's file its name in the folder. */
static void cmd_rules(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    sl_svc_ctx *x = q->x;
    if (x->srv->live == NULL) {
        err_reply(q, "%s", sl_svc_no_rules);
        return;
    }
    if (c->argc == 2 && arg_is(&c->argv[1], "RELOAD")) {
        sl_slot *s = sl_conn_slot(q->c); /* answered when the reload thread has */
        if (s != NULL) sl_svc_reload(x, "RL.RULES RELOAD", on_reload, s);
        return;
    }
    if (c->argc != 1) {
        err_reply(q, "usage: RL.RULES [RELOAD]");
        return;
    }
    sl_rules *r = sl_svc_rules(x, NULL);
    sl_live_info li;
    sl_live_info_get(x->srv->live, &li);
    sl_slot *s;
    sl_buf *out = now_open(q, &s);
    if (out == NULL) return;
    sl_resp_map(out, q->proto, 8);
    sl_resp_bulk_str(out, "version");
    sl_resp_int(out, (long long)sl_rules_generation(r));
    sl_resp_bulk_str(out, "loaded_at_ms");
    sl_resp_int(out, sl_rules_loaded_at_ms(r));
    const char *root = sl_live_path(x->srv->live);
    sl_resp_bulk_str(out, "path");
    sl_resp_bulk_str(out, path_for(q, root));
    sl_resp_bulk_str(out, "reloads");
    sl_resp_int(out, (long long)li.reloads);
    sl_resp_bulk_str(out, "reload_failures");
    sl_resp_int(out, (long long)li.failures);
    sl_resp_bulk_str(out, "last_error");
    sl_resp_bulk_str(out, path_for(q, li.last_error)); /* it names the file */
    sl_resp_bulk_str(out, "last_error_at_ms");
    sl_resp_int(out, li.last_error_ms);
    sl_resp_bulk_str(out, "domains");
    int nd = sl_rules_ndomains(r);
    sl_resp_array(out, nd);
    for (int i = 0; i < nd; i++) {
        const sl_rule_domain *d = sl_rules_domain(r, i);
        sl_buf dom = {0}; /* the entries, counted as they are written */
        int nlim = list_limits(&dom, &d->root);
        sl_resp_raw(out, "*3\r\n");
        sl_resp_bulk(out, d->name, d->namelen);
        sl_resp_bulk_str(out, rules_file_for(q, root, d->file));
        sl_resp_array(out, nlim);
        sl_buf_add(out, dom.p ? dom.p : "", dom.len);
        free(dom.p);
    }
    sl_slot_done(s);
}

/* ---- small commands --------------------------------------------------------- */

static void reply_raw(req *q, const char *bytes)
{
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    sl_resp_raw(b, bytes);
    sl_slot_done(s);
}

static void reply_bulk(req *q, const sl_resp_arg *a)
{
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    sl_resp_bulk(b, a->p, a->len);
    sl_slot_done(s);
}

static void cmd_ping(req *q)
{
    if (q->cmd->argc == 1)
        reply_raw(q, "+PONG\r\n");
    else if (q->cmd->argc == 2)
        reply_bulk(q, &q->cmd->argv[1]);
    else
        err_reply(q, "wrong number of arguments for 'ping' command");
}

static void cmd_echo(req *q) { reply_bulk(q, &q->cmd->argv[1]); }
static void cmd_quit(req *q) { reply_raw(q, "+OK\r\n"); }

/* ---- AUTH and HELLO ---------------------------------------------------------- */

/* Logs q's connection in as user with pass, at the server's clock (q->now;
 * never a client's AT).  On success the connection and q are that user and
 * 0 is returned; otherwise the error is q's reply and -1 is returned:
 * Redis's WRONGPASS, or, for an address with too many recent failures, an
 * error that says when to retry (the password is then not looked at). */
static int login(req *q, const sl_resp_arg *user, const sl_resp_arg *pass)
{
    sl_auth *a = q->x->srv->auth;
    const sl_auth_user *u = NULL;
    int64_t retry = 0;
    char host[64];
    const char *peer = sl_conn_peer_host(q->c, host, sizeof host);
    int rc;
    if (a != NULL)
        rc = sl_auth_login(a, peer, user->p, user->len, pass->p, pass->len, q->now, &u, &retry);
    else /* no auth configured: "default" is a user without a password */
        rc = arg_is(user, "default") ? (u = sl_auth_anonymous(NULL), SL_AUTH_OK) : SL_AUTH_WRONG;
    if (rc == SL_AUTH_OK) {
        client *cl = client_of(q);
        if (cl == NULL) {
            err_reply(q, "out of memory: not logged in");
            return -1;
        }
        cl->who = u;
        q->who = u;
        return 0;
    }
    if (rc == SL_AUTH_BLOCKED) {
        const sl_config *cfg = q->x->srv->cfg;
        err_reply(q,
                  "too many failed logins from %s: retry in %lld ms (at most %lld failures per "
                  "%lld ms; this password was not checked)",
                  peer ? peer : "this client", (long long)retry, (long long)cfg->auth_fail_max,
                  (long long)cfg->auth_fail_window_ms);
        return -1;
    }
    raw_err(q, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    return -1;
}

/* AUTH password | AUTH username password, as Redis: the one-argument form
 * logs in as "default". */
static void cmd_auth(req *q)
{
    static const sl_resp_arg dflt = {"default", 7};
    const sl_resp_cmd *c = q->cmd;
    if (c->argc > 3) {
        err_reply(q, "syntax error");
        return;
    }
    if (c->argc == 2 && !sl_auth_required(q->x->srv->auth)) {
        err_reply(q, "AUTH <password> called without any password configured for the default "
                     "user. Are you sure your configuration is correct?");
        return;
    }
    const sl_resp_arg *user = c->argc == 2 ? &dflt : &c->argv[1];
    if (login(q, user, &c->argv[c->argc - 1]) == 0) reply_raw(q, "+OK\r\n");
}

/* Parses a in Redis's strict way (string2ll: an optional '-', digits, no
 * leading zero, no '+', no spaces, within a long long).  Returns 0 and sets
 * *out, or -1. */
static int redis_ll(const sl_resp_arg *a, long long *out)
{
    const char *p = a->p;
    size_t n = a->len, i = 0;
    int neg = 0;
    if (n > 0 && p[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n || n - i > 19 || (p[i] == '0' && n - i > 1) || (neg && p[i] == '0')) return -1;
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (unsigned long long)(p[i] - '0'); /* 19 digits: no overflow */
    }
    if (v > (neg ? 9223372036854775808ULL : 9223372036854775807ULL)) return -1;
    *out = neg ? (long long)(0ULL - v) : (long long)v;
    return 0;
}

/* Is a fit to be a connection's name or a CLIENT SETINFO attribute?  As
 * Redis: printable bytes other than space ('!' to '~'), so that a CLIENT
 * INFO line stays one line of space-separated fields.  On no, replies
 * "<what> cannot contain ..." (Redis's words) or, beyond SL_RESP_MAX_NAME
 * bytes, says so, and returns 0. */
static int name_ok(req *q, const sl_resp_arg *a, const char *what)
{
    for (size_t i = 0; i < a->len; i++) {
        if (a->p[i] < '!' || a->p[i] > '~') {
            err_reply(q, "%s cannot contain spaces, newlines or special characters.", what);
            return 0;
        }
    }
    if (a->len > SL_RESP_MAX_NAME) {
        err_reply(q, "%s: at most %d bytes (got %zu)", what, SL_RESP_MAX_NAME, a->len);
        return 0;
    }
    return 1;
}

/* Sets *dst to a copy of a (checked by name_ok), or to NULL for "";
 * returns 0, or -1 when out of memory (*dst unchanged). */
static int set_name(char **dst, const sl_resp_arg *a)
{
    char *v = NULL;
    if (a->len > 0) {
        if ((v = malloc(a->len + 1)) == NULL) return -1;
        memcpy(v, a->p, a->len);
        v[a->len] = '\0';
    }
    free(*dst);
    *dst = v;
    return 0;
}

/* HELLO [protover [AUTH username password] [SETNAME name]], in Redis 7.0's
 * order: the version is checked first (an integer, else an error; 2 or 3,
 * else NOPROTO), then the options' syntax, then AUTH logs in; a connection
 * not logged in by then gets NOAUTH; then the name is checked and set, and
 * only then is the protocol switched (a failure anywhere before changes
 * neither).  The reply, in the protocol now spoken: server, version, proto,
 * id, mode, role, modules -- a map in RESP3, pairs in an array in RESP2.
 * Without a version HELLO answers in the connection's current protocol. */
static void cmd_hello(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    char qb[80];
    long long ver = 0;
    if (c->argc >= 2) {
        if (redis_ll(&c->argv[1], &ver) != 0) {
            err_reply(q, "Protocol version is not an integer or out of range");
            return;
        }
        if (ver != SL_RESP2 && ver != SL_RESP3) {
            raw_err(q, "-NOPROTO unsupported protocol version\r\n");
            return;
        }
    }
    const sl_resp_arg *user = NULL, *pass = NULL, *name = NULL;
    for (int i = 2; i < c->argc; i++) {
        int more = c->argc - 1 - i;
        if (arg_is(&c->argv[i], "AUTH") && more >= 2) {
            user = &c->argv[i + 1];
            pass = &c->argv[i + 2];
            i += 2;
        } else if (arg_is(&c->argv[i], "SETNAME") && more >= 1) {
            name = &c->argv[++i];
        } else {
            err_reply(q, "Syntax error in HELLO option '%s'", quote(qb, sizeof qb, &c->argv[i]));
            return;
        }
    }
    if (user != NULL && login(q, user, pass) != 0) return;
    if (q->who == NULL) {
        raw_err(q, "-NOAUTH HELLO must be called with the client already authenticated, "
                   "otherwise the HELLO AUTH <user> <pass> option can be used to authenticate "
                   "the client and select the RESP protocol version at the same time\r\n");
        return;
    }
    if (name != NULL && !name_ok(q, name, "Client names")) return;
    client *cl = client_of(q);
    if (cl == NULL || (name != NULL && set_name(&cl->name, name) != 0)) {
        err_reply(q, "out of memory");
        return;
    }
    if (ver != 0) cl->proto = q->proto = (int)ver;
    sl_slot *s;
    sl_buf *out = now_open(q, &s);
    if (out == NULL) return;
    sl_resp_map(out, q->proto, 7);
    sl_resp_bulk_str(out, "server");
    sl_resp_bulk_str(out, "sluiced");
    sl_resp_bulk_str(out, "version");
    sl_resp_bulk_str(out, SL_VERSION);
    sl_resp_bulk_str(out, "proto");
    sl_resp_int(out, q->proto);
    sl_resp_bulk_str(out, "id");
    sl_resp_int(out, (long long)cl->id);
    sl_resp_bulk_str(out, "mode");
    sl_resp_bulk_str(out, "standalone");
    sl_resp_bulk_str(out, "role");
    sl_resp_bulk_str(out, "master");
    sl_resp_bulk_str(out, "modules");
    sl_resp_array(out, 0); /* an empty array in RESP3 too, as Redis */
    sl_slot_done(s);
}

static void unknown(req *q, const sl_resp_arg *name)
{
    char qb[80];
    err_reply(q, "unknown command '%s'", quote(qb, sizeof qb, name));
}

/* ---- CLIENT ----------------------------------------------------------------- */

/* CLIENT ID: the connection's id (the one HELLO reports). */
static void client_id(req *q)
{
    client *cl = client_of(q);
    if (cl == NULL) {
        err_reply(q, "out of memory");
        return;
    }
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    sl_resp_int(b, (long long)cl->id);
    sl_slot_done(s);
}

/* CLIENT GETNAME: the name, or a null when none is set. */
static void client_getname(req *q)
{
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    if (q->cl != NULL && q->cl->name != NULL)
        sl_resp_bulk_str(b, q->cl->name);
    else
        sl_resp_null(b, q->proto);
    sl_slot_done(s);
}

/* CLIENT SETNAME name: "" removes the name, as in Redis. */
static void client_setname(req *q)
{
    const sl_resp_arg *name = &q->cmd->argv[2];
    if (!name_ok(q, name, "Client names")) return;
    client *cl = client_of(q);
    if (cl == NULL || set_name(&cl->name, name) != 0) {
        err_reply(q, "out of memory");
        return;
    }
    reply_raw(q, "+OK\r\n");
}

/* CLIENT SETINFO LIB-NAME name | LIB-VER version (Redis 7.2): what client
 * libraries say of themselves on connecting; shown by CLIENT INFO. */
static void client_setinfo(req *q)
{
    const sl_resp_arg *attr = &q->cmd->argv[2], *v = &q->cmd->argv[3];
    char qb[80];
    int is_name = arg_is(attr, "lib-name");
    if (!is_name && !arg_is(attr, "lib-ver")) {
        err_reply(q, "Unrecognized option '%s'", quote(qb, sizeof qb, attr));
        return;
    }
    if (!name_ok(q, v, quote(qb, sizeof qb, attr))) return;
    client *cl = client_of(q);
    if (cl == NULL || set_name(is_name ? &cl->lib_name : &cl->lib_ver, v) != 0) {
        err_reply(q, "out of memory");
        return;
    }
    reply_raw(q, "+OK\r\n");
}

/* CLIENT INFO: one line, with the fields of Redis 7.2's CLIENT INFO in its
 * order (client libraries parse them and some want every one, e.g.
 * redis-py's client_info()).  What sluiced knows is true: id, addr,
 * laddr, fd, name, age (seconds since the connection's first command),
 * idle (0: it is running this command), db, user, resp, lib-name,
 * lib-ver, and flags, sub..., multi, events, cmd, redir, which are what
 * Redis shows for a plain connection; Redis's buffer sizes (qbuf ...
 * tot-mem), which sluiced does not track, read 0.  A verbatim string in
 * RESP3, as Redis. */
static void client_info(req *q)
{
    client *cl = client_of(q);
    if (cl == NULL) {
        err_reply(q, "out of memory");
        return;
    }
    char peer[80], local[80], line[512 + 3 * SL_RESP_MAX_NAME + SL_AUTH_MAX_NAME];
    const char *pa = sl_conn_addr(q->c, 0, peer, sizeof peer);
    const char *la = sl_conn_addr(q->c, 1, local, sizeof local);
    int n = snprintf(line, sizeof line,
                     "id=%llu addr=%s laddr=%s fd=%d name=%s age=%lld idle=0 flags=N db=0 sub=0 "
                     "psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 "
                     "rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd=client|info user=%s "
                     "redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
                     cl->id, pa ? pa : "", la ? la : "", sl_conn_fd(q->c), cl->name ? cl->name : "",
                     (long long)((q->now - cl->since_ms) / 1000), q->who ? q->who->name : "",
                     q->proto, cl->lib_name ? cl->lib_name : "", cl->lib_ver ? cl->lib_ver : "");
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    sl_resp_verbatim(b, q->proto, "txt", line, len);
    sl_slot_done(s);
}

static void client_help(req *q)
{
    static const char *const lines[] = {
        "CLIENT <subcommand> [<arg> ...]. Subcommands are:",
        "GETNAME",
        "    The connection's name, or a null if it has none.",
        "ID",
        "    The connection's id.",
        "INFO",
        "    One line about the connection, with Redis's CLIENT INFO fields.",
        "SETINFO (LIB-NAME <name> | LIB-VER <version>)",
        "    Names the client library and its version (shown by INFO).",
        "SETNAME <name>",
        "    Names the connection (\"\" removes the name).",
        "HELP",
        "    This text.",
    };
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) return;
    sl_resp_array(b, (long long)(sizeof lines / sizeof lines[0]));
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        sl_resp_raw(b, "+");
        sl_resp_raw(b, lines[i]);
        sl_resp_raw(b, "\r\n");
    }
    sl_slot_done(s);
}

/* CLIENT <subcommand> ...: the subcommands client libraries send when they
 * connect (SETNAME, SETINFO), and those that read what they set.  Other
 * subcommands (LIST, KILL, TRACKING, MAINT_NOTIFICATIONS...) get Redis 7.0's
 * "unknown subcommand" error, which the libraries that send them on
 * connecting ignore. */
static void cmd_client(req *q)
{
    static const struct {
        const char *name; /* lower case: errors name it "client|name", as Redis */
        int argc;         /* arguments, CLIENT and the subcommand included */
        void (*run)(req *q);
    } subs[] = {
        {"id", 2, client_id},           {"getname", 2, client_getname},
        {"setname", 3, client_setname}, {"setinfo", 4, client_setinfo},
        {"info", 2, client_info},       {"help", 2, client_help},
    };
    const sl_resp_arg *sub = &q->cmd->argv[1];
    char qb[80];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (!arg_is(sub, subs[i].name)) continue;
        if (q->cmd->argc != subs[i].argc)
            err_reply(q, "wrong number of arguments for 'client|%s' command", subs[i].name);
        else
            subs[i].run(q);
        return;
    }
    err_reply(q, "unknown subcommand '%s'. Try CLIENT HELP.", quote(qb, sizeof qb, sub));
}

/* SELECT db: sluiced has one database, 0; the others get Redis's error for
 * a database beyond its `databases` setting. */
static void cmd_select(req *q)
{
    long long db;
    if (redis_ll(&q->cmd->argv[1], &db) != 0)
        err_reply(q, "value is not an integer or out of range");
    else if (db != 0)
        err_reply(q, "DB index is out of range");
    else
        reply_raw(q, "+OK\r\n");
}

/* CONFIG GET: answers the two settings redis-benchmark asks about, and an
 * empty map for anything else (RESP2: a flat array); CONFIG SET is
 * refused. */
static void cmd_config(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    if (c->argc == 3 && arg_is(&c->argv[1], "GET")) {
        int save = arg_is(&c->argv[2], "save"), aof = arg_is(&c->argv[2], "appendonly");
        sl_slot *s;
        sl_buf *b = now_open(q, &s);
        if (b == NULL) return;
        sl_resp_map(b, q->proto, save || aof);
        if (save || aof) {
            sl_resp_bulk_str(b, save ? "save" : "appendonly");
            sl_resp_bulk_str(b, save ? "" : "no");
        }
        sl_slot_done(s);
        return;
    }
    err_reply(q, "CONFIG supports only GET; sluiced is configured by flags or --config FILE");
}

static void cmd_command(req *q);
static void cmd_multi(req *q);
static void cmd_exec(req *q);
static void cmd_discard(req *q);
static void cmd_watch(req *q);
static void cmd_unwatch(req *q);

/* ---- RL.ACQUIRE / RL.RELEASE / RL.RESERVE / RL.SETTLE (SPEC 10) ------------ */

/* The six fields and a 7th, the lease's or reservation's id, or a null when
 * denied (in the connection's protocol: on_hold2, on_hold3). */
static void on_hold(sl_slot *s, const sl_svc_reply *r, int proto)
{
    if (r->rc < 0) {
        slot_err(sl_slot_svc(s), s, r->err);
        return;
    }
    sl_buf *b = sl_slot_buf(s);
    sl_resp_raw(b, "*7\r\n");
    sl_resp_fields(b, &r->result);
    if (r->hold_id != 0)
        sl_resp_int(b, (int64_t)r->hold_id);
    else
        sl_resp_null(b, proto);
    sl_slot_done(s);
}

static void on_hold2(void *arg, const sl_svc_reply *r) { on_hold(arg, r, SL_RESP2); }
static void on_hold3(void *arg, const sl_svc_reply *r) { on_hold(arg, r, SL_RESP3); }

static void on_settle(void *arg, const sl_svc_reply *r)
{
    sl_slot *s = arg;
    if (r->rc == 0 && !r->existed) {
        slot_err(sl_slot_svc(s), s,
                 "unknown reservation id: never given for this key, settled already, or its "
                 "window ended (then it settled at its estimate)");
        return;
    }
    on_fields(arg, r);
}

/* An id as RL.ACQUIRE and RL.RESERVE give them: 0 when a is not one. */
static uint64_t hold_id_of(const sl_resp_arg *a)
{
    int64_t v;
    return sl_int_parse(a->p, a->len, INT64_MAX, &v) == 0 ? (uint64_t)v : 0;
}

/* RL.ACQUIRE key max [TTL ms] [AT t] */
static void cmd_acquire(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    const sl_resp_arg *key = &c->argv[1], *mx = &c->argv[2];
    char err[SL_SVC_ERR], qb[64];
    int64_t max, ttl = SL_DEFAULT_LEASE_TTL_MS, at = q->now;
    int has_ttl = 0, has_at = 0;
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    if (sl_int_parse(mx->p, mx->len, SL_MAX_CONCURRENCY, &max) != 0 || max < 1) {
        err_reply(q, "max must be an integer between 1 and %d, got '%s'", SL_MAX_CONCURRENCY,
                  quote(qb, sizeof qb, mx));
        return;
    }
    for (int i = 3; i < c->argc; i += 2) {
        const sl_resp_arg *o = &c->argv[i], *v = i + 1 < c->argc ? &c->argv[i + 1] : NULL;
        int is_ttl = arg_is(o, "ttl"), is_at = arg_is(o, "at");
        if (!is_ttl && !is_at) {
            err_reply(q, "unknown option '%s' (RL.ACQUIRE key max [TTL ms] [AT t])",
                      quote(qb, sizeof qb, o));
            return;
        }
        if ((is_ttl && has_ttl) || (is_at && has_at)) {
            err_reply(q, "option %s given twice", is_ttl ? "TTL" : "AT");
            return;
        }
        if (v == NULL) {
            err_reply(q, "option %s needs a value", is_ttl ? "TTL" : "AT");
            return;
        }
        if (is_ttl) {
            has_ttl = 1;
            if (sl_duration_parse(v->p, v->len, &ttl) != 0 || ttl > SL_MAX_LEASE_TTL_MS) {
                err_reply(q, "TTL must be a duration between 1 ms and %lld ms (1d), got '%s'",
                          (long long)SL_MAX_LEASE_TTL_MS, quote(qb, sizeof qb, v));
                return;
            }
        } else {
            has_at = 1;
            if (sl_svc_parse_at(q->x, q->now, v->p, v->len, &at, err, sizeof err) != 0) {
                err_reply(q, "%s", err);
                return;
            }
        }
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_acquire(q->x, key->p, key->len, max, ttl, at, q->proto == SL_RESP3 ? on_hold3 : on_hold2,
                   s);
}

/* RL.RELEASE key id: :1 if held, :0 if not (an id that is no lease's too) */
static void cmd_release(req *q)
{
    const sl_resp_arg *key = &q->cmd->argv[1];
    char err[SL_SVC_ERR];
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_release(q->x, key->p, key->len, hold_id_of(&q->cmd->argv[2]), q->now, on_reset, s);
}

/* RL.RESERVE key limit window COST estimate [ALGO name] [BURST b]
 *            [PRECISION p] [AT t]: RL.ALLOW's grammar, COST required */
static void cmd_reserve(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    char err[SL_SVC_ERR];
    const sl_resp_arg *key = &c->argv[1];
    sl__arg a[SL__ALLOW_ARGS];
    sl__allow_req r;
    int n = c->argc - 2 < SL__ALLOW_ARGS ? c->argc - 2 : SL__ALLOW_ARGS, has_cost = 0;
    for (int i = 0; i < n; i++) a[i] = (sl__arg){c->argv[2 + i].p, c->argv[2 + i].len};
    for (int i = 2; i < n; i++) has_cost |= arg_is(&c->argv[2 + i], "cost");
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0 ||
        sl__parse_allow(a, n, NULL, allow_at, q, &r, err, sizeof err) < 0) {
        err_reply(q, "%s", err);
        return;
    }
    if (!has_cost) {
        err_reply(q, "RL.RESERVE needs COST estimate (RL.RESERVE key limit window COST estimate "
                     "[options])");
        return;
    }
    if (r.p.algo == SL_SLIDING_LOG) {
        err_reply(q, "RL.RESERVE does not take sliding-log: a logged request's cost cannot be "
                     "settled afterwards (use sliding-window or sliding-buckets)");
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_reserve(q->x, key->p, key->len, &r.p, r.cost, r.has_at ? r.at : q->now,
                   q->proto == SL_RESP3 ? on_hold3 : on_hold2, s);
}

/* RL.SETTLE key id actual */
static void cmd_settle(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    const sl_resp_arg *key = &c->argv[1], *act = &c->argv[3];
    char err[SL_SVC_ERR];
    int64_t actual;
    if (sl__parse_key(key->p, key->len, err, sizeof err) != 0 ||
        sl__parse_cost(act->p, act->len, &actual, err, sizeof err) != 0) {
        err_reply(q, "%s", err);
        return;
    }
    sl_slot *s = sl_conn_slot(q->c);
    if (s == NULL) return;
    sl_svc_settle(q->x, key->p, key->len, hold_id_of(&c->argv[2]), actual, q->now, on_settle, s);
}

/* ---- the table -------------------------------------------------------------- */

#define F_CLOSE   1u /* close the connection after the reply (QUIT) */
#define F_NOAUTH  2u /* runs before a login (AUTH, HELLO, QUIT) */
#define F_NOQUEUE 4u /* runs at once inside MULTI, as in Redis (MULTI, EXEC, WATCH...) */

/* The groups of auth.h, short; 0: any logged-in user. */
#define G_DECIDE SL_AUTH_DECIDING
#define G_READ   SL_AUTH_READING
#define G_ADMIN  SL_AUTH_ADMIN

/* A subcommand that needs another group than its command. */
typedef struct subcommand {
    const char *name; /* lower case; NOPERM names it "command|sub", as Redis */
    unsigned group;
} subcommand;

typedef struct command {
    const char *name; /* lower case, as COMMAND lists it */
    size_t namelen;   /* strlen(name): lookup compares lengths first */
    int arity;        /* Redis's convention: N exactly, -N at least N (the name counts) */
    int first_key;    /* for COMMAND: position of the key, 0 = none */
    unsigned flags;   /* F_* */
    unsigned group;   /* G_*: what a user needs to run it; 0 = any logged-in user */
    void (*run)(req *q);
    const subcommand *subs; /* argv[1] values with a group of their own; NULL-ended */
} command;

#define N(name) name, sizeof(name) - 1 /* a command's name and namelen */

static const subcommand rules_subs[] = {{"reload", G_ADMIN}, {NULL, 0}};

static const command commands[] = {
    {N("rl.allow"), -4, 1, 0, G_DECIDE, cmd_allow, NULL},
    {N("rl.peek"), -4, 1, 0, G_READ, cmd_peek, NULL},
    {N("rl.reset"), -2, 1, 0, G_ADMIN, cmd_reset, NULL},
    {N("rl.check"), -5, 0, 0, G_DECIDE, cmd_check, NULL},
    {N("rl.wait"), -6, 1, 0, G_DECIDE, cmd_wait, NULL},
    {N("rl.acquire"), -3, 1, 0, G_DECIDE, cmd_acquire, NULL}, /* SPEC 10: holds */
    {N("rl.release"), 3, 1, 0, G_DECIDE, cmd_release, NULL},
    {N("rl.reserve"), -6, 1, 0, G_DECIDE, cmd_reserve, NULL},
    {N("rl.settle"), 4, 1, 0, G_DECIDE, cmd_settle, NULL},
    {N("rl.rules"), -1, 0, 0, G_READ, cmd_rules, rules_subs},
    {N("ping"), -1, 0, 0, 0, cmd_ping, NULL},
    {N("echo"), 2, 0, 0, 0, cmd_echo, NULL},
    {N("quit"), -1, 0, F_CLOSE | F_NOAUTH | F_NOQUEUE, 0, cmd_quit, NULL},
    {N("info"), -1, 0, 0, G_READ, sl__resp_cmd_info, NULL},
    {N("command"), -1, 0, 0, G_READ, cmd_command, NULL},
    {N("hello"), -1, 0, F_NOAUTH, 0, cmd_hello, NULL},
    {N("auth"), -2, 0, F_NOAUTH, 0, cmd_auth, NULL},
    {N("client"), -2, 0, 0, 0, cmd_client, NULL},
    {N("select"), 2, 0, 0, 0, cmd_select, NULL},
    {N("config"), -2, 0, 0, 0, cmd_config, NULL},
    {N("multi"), 1, 0, F_NOQUEUE, 0, cmd_multi, NULL},
    {N("exec"), 1, 0, F_NOQUEUE, 0, cmd_exec, NULL},
    {N("discard"), 1, 0, F_NOQUEUE, 0, cmd_discard, NULL},
    {N("watch"), -2, 0, F_NOQUEUE, 0, cmd_watch, NULL},
    {N("unwatch"), 1, 0, 0, 0, cmd_unwatch, NULL},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* The command named name, in any case; NULL if none.  Lengths first, then
 * the bytes (sl__resp_same_ci): no libc call for the common commands. */
static const command *lookup(const sl_resp_arg *name)
{
    for (size_t k = 0; k < NCOMMANDS; k++)
        if (commands[k].namelen == name->len &&
            sl__resp_same_ci(name->p, commands[k].name, name->len))
            return &commands[k];
    return NULL;
}

/* lookup(name), with RL.ALLOW -- commands[0], the command a client sends
 * again and again -- found by one comparison of its eight bytes, lower
 * cased (sl__resp_lower8: what sl__resp_same_ci compares), first. */
static inline const command *lookup_hot(const sl_resp_arg *name)
{
    if (name->len == 8) {
        uint64_t w, want;
        memcpy(&w, name->p, 8);
        memcpy(&want, "rl.allow", 8);
        if (sl__resp_lower8(w) == want) return &commands[0];
    }
    return lookup(name);
}

/* One COMMAND entry: name, arity, flags (a set in RESP3), first key, last
 * key, step. */
static void command_entry(sl_buf *out, int proto, const command *k)
{
    sl_resp_raw(out, "*6\r\n");
    sl_resp_bulk_str(out, k->name);
    sl_resp_int(out, k->arity);
    sl_resp_set(out, proto, 1);
    sl_resp_raw(out, "+fast\r\n");
    sl_resp_int(out, k->first_key);
    sl_resp_int(out, k->first_key);
    sl_resp_int(out, k->first_key ? 1 : 0);
}

static void cmd_command(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    sl_slot *s;
    sl_buf *out = now_open(q, &s);
    if (out == NULL) return;
    if (c->argc >= 2 && arg_is(&c->argv[1], "COUNT")) {
        sl_resp_int(out, (long long)NCOMMANDS);
    } else if (c->argc >= 2 && arg_is(&c->argv[1], "DOCS")) {
        sl_resp_map(out, q->proto, 0); /* no docs: redis-cli falls back to plain input */
    } else if (c->argc >= 2 && arg_is(&c->argv[1], "INFO")) {
        sl_resp_array(out, c->argc - 2);
        for (int i = 2; i < c->argc; i++) {
            const command *k = lookup(&c->argv[i]);
            if (k == NULL)
                sl_resp_null_array(out, q->proto);
            else
                command_entry(out, q->proto, k);
        }
    } else {
        sl_resp_array(out, (long long)NCOMMANDS);
        for (size_t k = 0; k < NCOMMANDS; k++) command_entry(out, q->proto, &commands[k]);
    }
    sl_slot_done(s);
}

/* May q's user run command k with q's arguments?  *sub: the subcommand
 * that decided it, or NULL.  Nothing written. */
static int may_run(const req *q, const command *k, const char **sub)
{
    unsigned need = k->group;
    *sub = NULL;
    if (k->subs != NULL && q->cmd->argc >= 2) {
        for (const subcommand *sc = k->subs; sc->name != NULL; sc++) {
            if (arg_is(&q->cmd->argv[1], sc->name)) {
                need = sc->group;
                *sub = sc->name;
                break;
            }
        }
    }
    return need == 0 || (q->who != NULL && (q->who->groups & need) == need);
}

/* May q's user run command k with q's arguments?  If not, the reply
 * (NOPERM, naming the command or "command|sub" as Redis 7.0 does) is
 * written and 0 returned. */
static int permitted(req *q, const command *k)
{
    const char *sub;
    if (may_run(q, k, &sub)) return 1;
    sl_auth_count_denied(q->x->srv->auth);
    char line[160];
    snprintf(line, sizeof line,
             "-NOPERM this user has no permissions to run the '%s%s%s' command\r\n", k->name,
             sub ? "|" : "", sub ? sub : "");
    raw_err(q, line);
    return 0;
}

/* ---- MULTI / EXEC / DISCARD ------------------------------------------------- */

static int in_multi(const req *q) { return q->cl != NULL && q->cl->multi; }

/* Ends cl's transaction, dropping what it queued. */
static void multi_end(client *cl)
{
    cl->multi = 0;
    cl->doomed = 0;
    cl->nqueued = 0;
    free(cl->queued.p);
    cl->queued = (sl_buf){0};
}

/* A command refused before it could be queued (unknown, not permitted,
 * wrong arity, over the bounds): inside MULTI the transaction is doomed, as
 * in Redis, and what it queued is dropped at once (EXEC will run none of
 * it). */
static void doom(req *q)
{
    if (!in_multi(q)) return;
    client *cl = q->cl;
    free(cl->queued.p);
    cl->queued = (sl_buf){0};
    cl->nqueued = 0;
    cl->doomed = 1;
}

/* Queues the command q runs, whose bytes as sent are raw[0..len), and
 * answers +QUEUED; or, past SL_RESP_MAX_QUEUED commands or max-command
 * bytes queued, answers an error saying which and dooms the transaction.
 * A doomed transaction keeps nothing: the command is answered +QUEUED, as
 * Redis answers it, and dropped. */
static void queue(req *q, const char *raw, size_t len)
{
    client *cl = q->cl;
    if (!cl->doomed) {
        uint64_t max = sl_conn_cfg(q->c)->max_command;
        if (cl->nqueued == SL_RESP_MAX_QUEUED) {
            err_reply(q,
                      "transaction too long: at most %d commands between MULTI and EXEC "
                      "(transaction discarded)",
                      SL_RESP_MAX_QUEUED);
            doom(q);
            return;
        }
        if (len > max - cl->queued.len) {
            err_reply(q,
                      "transaction too large: the commands between MULTI and EXEC may hold at "
                      "most max-command (%llu bytes) together (transaction discarded)",
                      (unsigned long long)max);
            doom(q);
            return;
        }
        if (sl_buf_add(&cl->queued, raw, len) != 0) {
            err_reply(q, "out of memory (transaction discarded)");
            doom(q);
            return;
        }
        cl->nqueued++;
    }
    reply_raw(q, "+QUEUED\r\n");
}

static void cmd_multi(req *q)
{
    client *cl = client_of(q);
    if (cl == NULL) {
        err_reply(q, "out of memory");
        return;
    }
    if (cl->multi) { /* as Redis: an error, and the transaction goes on */
        err_reply(q, "MULTI calls can not be nested");
        return;
    }
    multi_end(cl);
    cl->multi = 1;
    reply_raw(q, "+OK\r\n");
}

static void cmd_discard(req *q)
{
    if (!in_multi(q)) {
        err_reply(q, "DISCARD without MULTI");
        return;
    }
    multi_end(q->cl);
    reply_raw(q, "+OK\r\n");
}

static int exec_one(sl_conn *c, const sl_resp_cmd *cmd, const char *raw, size_t rawlen, int64_t now,
                    int queued);

/* EXEC: "*N" in a slot of its own, then the N queued commands run in order,
 * each answering into its own slot (see the top of the file).  The queue
 * is taken from the connection first: a queued command sees the connection
 * out of MULTI, as in Redis.  O(bytes queued) to parse them again. */
static void cmd_exec(req *q)
{
    if (!in_multi(q)) {
        err_reply(q, "EXEC without MULTI");
        return;
    }
    client *cl = q->cl;
    if (cl->doomed) {
        multi_end(cl);
        raw_err(q, "-EXECABORT Transaction discarded because of previous errors.\r\n");
        return;
    }
    sl_buf todo = cl->queued;
    int n = cl->nqueued;
    cl->queued = (sl_buf){0};
    multi_end(cl);
    sl_slot *s;
    sl_buf *b = now_open(q, &s);
    if (b == NULL) { /* out of memory: net.c drops the connection */
        free(todo.p);
        return;
    }
    sl_resp_array(b, n);
    sl_slot_done(s);
    const sl_config *cfg = sl_conn_cfg(q->c);
    size_t max_bulk =
        cfg->max_command < SL_RESP_MAX_BULK ? (size_t)cfg->max_command : (size_t)SL_RESP_MAX_BULK;
    /* the worker's parsed command: EXEC's own arguments are no longer needed */
    sl_resp_cmd *cmd = &((scratch *)sl_conn_scratch(q->c))->cmd;
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t used = 0;
        const char *perr = NULL;
        if (sl_resp_parse(todo.p + pos, todo.len - pos, max_bulk, cmd, &used, &perr) !=
            SL_RESP_OK) { /* cannot happen: these bytes parsed when queued */
            err_reply(q, "internal error: a queued command no longer parses");
            pos = todo.len;
            continue;
        }
        pos += used;
        exec_one(q->c, cmd, NULL, 0, q->now, 1);
    }
    free(todo.p);
}

/* WATCH key ...: refused, clearly (docs/sluiced.md, Transactions); not
 * queued inside MULTI, as Redis does not queue it either. */
static void cmd_watch(req *q)
{
    err_reply(q, "WATCH is not supported: sluiced runs MULTI ... EXEC in order but does not "
                 "watch keys (send MULTI without WATCH)");
}

/* UNWATCH: nothing is ever watched, so it succeeds (redis-py sends it when
 * a pipeline that had WATCHed is reset). */
static void cmd_unwatch(req *q) { reply_raw(q, "+OK\r\n"); }

/* Whether q's command k joins the run of RL.ALLOW decided as one batch
 * (allow_hold): an RL.ALLOW that passes every check exec_one makes
 * (logged in, permitted, arity), not inside MULTI nor from EXEC, on a
 * backend that decides a run at once (sl_svc_many_max > 1).  Every other
 * command takes exec_one's ordinary path, after the run. */
static int joins_run(const req *q, const command *k)
{
    return k != NULL && k->run == cmd_allow && !q->queued && q->who != NULL && !in_multi(q) &&
           q->cmd->argc >= -k->arity && (q->who->groups & k->group) == k->group &&
           sl_svc_many_max(q->x) > 1; /* RL.ALLOW has no subcommand: may_run's test */
}

/* Runs one parsed command, whose bytes as sent are raw[0..rawlen) (kept if
 * it is queued); queued: it comes from EXEC's queue (already counted in the
 * statistics when it was queued; never queued again).  Returns
 * SL_PROTO_CLOSE after QUIT, else SL_PROTO_AGAIN.
 *
 * The checks, in Redis's order: NOAUTH; then unknown command, NOPERM and
 * wrong arity, which inside MULTI doom the transaction; then inside MULTI
 * the command is queued, unless it is one of F_NOQUEUE. */
static int exec_one(sl_conn *c, const sl_resp_cmd *cmd, const char *raw, size_t rawlen, int64_t now,
                    int queued)
{
    req q = {c, sl_conn_svc(c), cmd, now, NULL, sl_conn_pdata(c), SL_RESP2, queued};
    if (q.cl == NULL) client_of(&q); /* its first command; NULL (no memory): tried again */
    if (q.cl != NULL) {
        q.who = q.cl->who;
        q.proto = q.cl->proto;
    }
    if (q.who == NULL) q.who = sl_auth_anonymous(q.x->srv->auth);
    if (!queued) sl_stat_inc(&q.x->st->commands, 1);
    const command *k = lookup_hot(&cmd->argv[0]);
    if (joins_run(&q, k)) {
        allow_hold(&q);
        return SL_PROTO_AGAIN;
    }
    run_flush(c); /* what this command answers follows the run's answers */
    if (q.who == NULL && (k == NULL || !(k->flags & F_NOAUTH))) {
        raw_err(&q, "-NOAUTH Authentication required.\r\n");
        return SL_PROTO_AGAIN;
    }
    if (k == NULL) {
        unknown(&q, &cmd->argv[0]);
        doom(&q);
        return SL_PROTO_AGAIN;
    }
    if (!permitted(&q, k)) {
        doom(&q);
        return SL_PROTO_AGAIN;
    }
    /* RL.CHECK says "no rules" before it looks at its arguments (queued:
     * when EXEC runs it) */
    if (k->run == cmd_check && !in_multi(&q) && sl_svc_rules(q.x, NULL) == NULL) {
        err_reply(&q, "%s", sl_svc_no_rules);
        return SL_PROTO_AGAIN;
    }
    if (k->arity > 0 ? cmd->argc != k->arity : cmd->argc < -k->arity) {
        err_reply(&q, "wrong number of arguments for '%s' command", k->name);
        doom(&q);
        return SL_PROTO_AGAIN;
    }
    if (in_multi(&q) && !(k->flags & F_NOQUEUE)) {
        queue(&q, raw, rawlen);
        return SL_PROTO_AGAIN;
    }
    k->run(&q);
    return (k->flags & F_CLOSE) ? SL_PROTO_CLOSE : SL_PROTO_AGAIN;
}

/* ---- the protocol ----------------------------------------------------------- */

/* A protocol error: its reply, then the connection closes. */
static void fatal(sl_conn *c, const char *msg)
{
    sl_slot *s = sl_conn_slot(c);
    if (s != NULL) {
        sl_resp_err(sl_slot_buf(s), msg);
        sl_slot_done(s);
    }
    sl_conn_protocol_error(c, msg);
}

static int run(sl_conn *c, const char *p, size_t len, int64_t now, sl_turn *t, size_t *usedp)
{
    const sl_config *cfg = sl_conn_cfg(c);
    size_t max_bulk =
        cfg->max_command < SL_RESP_MAX_BULK ? (size_t)cfg->max_command : (size_t)SL_RESP_MAX_BULK;
    size_t pos = 0;
    sl_resp_cmd *cmd = &((scratch *)sl_conn_scratch(c))->cmd; /* the command being run */
    int st = SL_PROTO_AGAIN;
    while (pos < len) {
        if (t->cmds == 0 || t->bytes == 0) {
            st = SL_PROTO_TURN;
            break;
        }
        size_t used = 0;
        const char *perr = NULL;
        int rc = sl_resp_parse(p + pos, len - pos, max_bulk, cmd, &used, &perr);
        if (rc == SL_RESP_AGAIN) break;
        if (rc == SL_RESP_ERROR) {
            run_flush(c);
            fatal(c, perr ? perr : "Protocol error");
            st = SL_PROTO_CLOSE;
            break;
        }
        if (used > cfg->max_command) { /* however it arrived: whole or in pieces */
            run_flush(c);
            fatal(c, "Protocol error: command larger than max-command");
            st = SL_PROTO_CLOSE;
            break;
        }
        pos += used;
        t->bytes = used >= t->bytes ? 0 : t->bytes - used;
        if (cmd->argc == 0) continue; /* an empty line */
        t->cmds--;
        if (exec_one(c, cmd, p + pos - used, used, now, 0) == SL_PROTO_CLOSE) {
            st = SL_PROTO_CLOSE;
            break;
        }
    }
    run_flush(c); /* the held run: its keys point into p */
    *usedp = pos;
    return st;
}

const sl_proto sl_resp_proto = {
    .name = "resp",
    .run = run,
    .fatal = fatal,
    .scratch_size = sizeof(scratch),
    .closed = client_free,
    .front = SL_FRONT_RESP,
    .refuse_line = "-ERR max number of clients reached\r\n",
};
