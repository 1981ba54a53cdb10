/*
 * grpc.c -- the gRPC protocol module (see grpc.h): HTTP/2 bytes in,
 * ShouldRateLimit and Health/Check answers out, over the service layer.
 *
 * HTTP/2 is h2.c's, one per connection (struct gconn, the connection's
 * pdata, freed by sl_grpc_proto.closed).  run() hands it what the client
 * sent, a frame at a time; a request runs when its stream ends
 * (END_STREAM), and its answer is put on the stream (sl_h2_respond).  The
 * connection's output (sl_h2_out) is written into a reply slot that is
 * opened and completed at once: HTTP/2's bytes must leave in the order
 * they were made (frame order, flow control), so no slot is ever held
 * open for a request in flight.  An answer that comes later (a backend
 * over a network) is put on its stream when it comes and the output
 * flushed into a new slot then.
 *
 * A request in flight (struct greq) names its stream by id, never by
 * pointer: when its answer arrives the stream is looked up again, and an
 * answer for a stream that closed meanwhile (the client reset it, or the
 * connection went) is dropped.  The gconn outlives its connection while
 * requests are in flight (refs).  Each holds its connection open
 * (sl_conn_hold) until its answer was written: net.c counts it as a
 * pending reply, and a stopping server's connection closes only after it.
 *
 * Limits: SL_GRPC_MAX_STREAMS concurrent streams (SETTINGS; h2.c
 * refuses more), counting the calls whose stream was reset while they
 * wait for their backend (orphans: on_begin refuses past the bound),
 * SL_GRPC_MAX_HEADERS bytes of header list (h2.c) and
 * SL_GRPC_MAX_MESSAGE bytes of message per request (RESOURCE_EXHAUSTED,
 * answered as soon as it is known); unfinished bodies held against the
 * connection's window (sl_h2_hold_data: SL_H2_WINDOW bytes a
 * connection); a request begun must be whole within recv-timeout and a
 * connection with nothing open or waiting closes after idle-timeout,
 * whatever frames it sends (set_deadline: net.c's sl_conn_deadline);
 * floods end with ENHANCE_YOUR_CALM (h2.c); and net.c's own: output held
 * for a client that does not read pauses it (the turn's budget,
 * proto.h), checked before each frame.
 *
 * Stopping: net.c calls stop() once the connection's last requests ran;
 * it sends GOAWAY naming the last stream processed, and the calls still
 * waiting for their backend are answered after it, before the connection
 * closes (their holds).  Health/Check answers
 * NOT_SERVING from the moment the server began stopping.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"
#include "grpc.h"
#include "grpc/health/v1/health.pb-c.h"
#include "h2.h"
#include "hpack.h"
#include "ratelimit_headers.h"
#include "rls_wire.h"
#include "service.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride
    rls_desc_override;

/* gRPC status codes (google.rpc.Code). */
enum {
    ST_OK = 0,
    ST_INVALID_ARGUMENT = 3,
    ST_PERMISSION_DENIED = 7,
    ST_UNAUTHENTICATED = 16,
    ST_NOT_FOUND = 5,
    ST_FAILED_PRECONDITION = 9,
    ST_RESOURCE_EXHAUSTED = 8,
    ST_UNIMPLEMENTED = 12,
    ST_INTERNAL = 13,
    ST_UNAVAILABLE = 14,
};

#define PATH_RLS    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define PATH_HEALTH "/grpc.health.v1.Health/Check"
#define RLS_SERVICE "envoy.service.ratelimit.v3.RateLimitService"

typedef struct gstream gstream;

/* One connection's HTTP/2.  Touched by its worker only. */
typedef struct gconn {
    sl_h2 *h2;   /* NULL once the connection is gone */
    sl_conn *c;  /* NULL once the connection is gone */
    int refs;    /* 1 for the connection + 1 per request in flight */
    int in_run;  /* inside run(): its end flushes the output */
    int nomem;   /* output lost: drop the connection */
    sl_turn *t;  /* during run(): the turn's budget */
    int64_t now; /* the clock (ms) of the last run() */
    int nopen;   /* streams open (begun, not closed) */
    int calls;   /* ShouldRateLimit calls waiting for their backend */
    int orphans; /* ... of which their stream closed (reset, refused) */
    /* streams whose request is not whole yet, oldest first (their t0) */
    gstream *partial, *partial_tail;
    int64_t block_since; /* ms: a header block began arriving then, or 0 */
    int64_t idle_since;  /* ms: nothing open nor in flight since then, or 0 */
    int worked;          /* a call began or was answered since set_deadline */
    int dl_kind;         /* the deadline given to net.c: DL_* */
    int64_t dl_at;       /* ... and when it falls (ms) */
} gconn;

enum { DL_NONE, DL_RECV, DL_IDLE };
#define DL_SLACK_MS 1000 /* how late a deadline may fall (set_deadline) */

_Static_assert(SL_GRPC_MAX_STREAMS == SL_H2_MAX_STREAMS, "grpc.h quotes h2.h's bounds");
_Static_assert(SL_GRPC_MAX_HEADERS == SL_H2_MAX_HEADER_LIST, "grpc.h quotes h2.h's bounds");

enum method { M_NONE, M_RLS, M_HEALTH };

#define SMALL 256         /* bytes of a request or answer kept in its stream */
#define ARENA (64 * 1024) /* bytes of the decoding arena (struct scratch) */

/* The worker's scratch (sl_conn_scratch): where protobuf-c decodes a
 * request, bump-allocated and dropped whole after it ran -- no malloc per
 * field.  Beyond ARENA bytes it falls back to malloc. */
typedef struct scratch {
    size_t used;
    _Alignas(16) unsigned char mem[ARENA];
} scratch;

static void *arena_alloc(void *arg, size_t n)
{
    scratch *a = arg;
    n = (n + 15) & ~(size_t)15;
    if (n <= ARENA - a->used) {
        void *p = a->mem + a->used;
        a->used += n;
        return p;
    }
    return malloc(n);
}

static void arena_free(void *arg, void *p)
{
    scratch *a = arg;
    if ((unsigned char *)p >= a->mem && (unsigned char *)p < a->mem + ARENA) return;
    free(p);
}

/* One request stream: its h2.c stream's user bytes, from its HEADERS to
 * its close. */
struct gstream {
    gconn *g;
    sl_h2_stream *s; /* the h2.c stream these bytes are of */
    int32_t id;
    enum method m;
    int post;               /* :method POST */
    int grpc_type;          /* content-type application/grpc[+proto|;...] */
    int want_headers;       /* SL_GRPC_HEADERS_MD given */
    int answered;           /* a response was put on the stream */
    int auth_given;         /* an `authorization` field came (auth[] holds it) */
    int inflight;           /* its call waits for the backend (greq) */
    int64_t t0;             /* ms: its HEADERS came then */
    gstream *pnext, *pprev; /* on g->partial while its request is not whole */
    int on_partial;
    size_t auth_len; /* its length; above sizeof auth: too long to be ours */
    sl_buf in;       /* the request's DATA: prefix and message (in.p: small_in
                        while it fits there, else malloc'd) */
    /* from here on not zeroed when the stream opens (on_begin) */
    char path[96];  /* :path, cut (a longer one is no method of ours); "" */
    char auth[256]; /* "Bearer TOKEN" (sl_auth_bearer), when auth_given */
    /* most calls fit here: no allocation for their bytes (bench/grpc.sh) */
    char small_in[SMALL];
};

/* Takes st off the streams whose request is not whole. */
static void partial_off(gstream *st)
{
    gconn *g = st->g;
    if (!st->on_partial) return;
    if (st->pprev)
        st->pprev->pnext = st->pnext;
    else
        g->partial = st->pnext;
    if (st->pnext)
        st->pnext->pprev = st->pprev;
    else
        g->partial_tail = st->pprev;
    st->on_partial = 0;
}

/* The request's bytes are no longer needed (it was decoded, or refused). */
static void in_free(gstream *st)
{
    if (st->in.p != st->small_in) free(st->in.p);
    st->in = (sl_buf){0};
}

/* A ShouldRateLimit in flight: outlives its stream, never points to it. */
typedef struct greq {
    gconn *g; /* holds a reference */
    int32_t id;
    int want_headers;
} greq;

/* ---- the connection's state -------------------------------------------- */

static void unref(gconn *g)
{
    if (--g->refs > 0) return;
    free(g);
}

static void closed(void *pdata)
{
    gconn *g = pdata;
    if (g == NULL) return;
    sl_h2 *h2 = g->h2;
    g->h2 = NULL; /* the streams' closed callbacks see the connection gone */
    sl_h2_free(h2);
    g->c = NULL;
    unref(g);
}

/* Sends what the connection has to send: one slot, opened and completed
 * now (the file's comment).  After an asynchronous answer this may close
 * and free the connection (proto.h): the caller touches only g after it. */
static void flush(gconn *g)
{
    if (g->c == NULL || g->h2 == NULL) return;
    size_t n;
    const uint8_t *d = sl_h2_out(g->h2, &n);
    if (n == 0) return;
    sl_slot *s = sl_conn_slot(g->c);
    if (s == NULL || sl_buf_add(sl_slot_buf(s), d, n) != 0) g->nomem = 1;
    sl_h2_out_taken(g->h2);
    if (s != NULL) sl_slot_done(s);
}

/* What the connection waits for, as net.c's deadline (sl_conn_deadline),
 * at now: a request begun but not whole -- the oldest stream without its
 * END_STREAM yet, or a header block still arriving -- must be whole
 * within recv-timeout of its start; with no stream open and no call in
 * flight the connection is idle since its last call, and closes after
 * idle-timeout, whatever frames that do no work (PING, SETTINGS, empty
 * ones) it sends meanwhile.  The deadline is set a sixteenth of the
 * timeout (at most DL_SLACK_MS) late, so that a connection busy with
 * calls moves net.c's timer at most once in that long, not every turn. */
static void set_deadline(gconn *g, int64_t now)
{
    if (g->c == NULL || g->h2 == NULL) return;
    const sl_config *cfg = sl_conn_cfg(g->c);
    int64_t since = g->partial != NULL ? g->partial->t0 : 0;
    if (!sl_h2_partial(g->h2))
        g->block_since = 0;
    else if (g->block_since == 0)
        g->block_since = now;
    if (g->block_since != 0 && (since == 0 || g->block_since < since)) since = g->block_since;
    int busy = g->nopen > 0 || g->calls > 0 || since != 0;
    if (busy || g->worked) g->idle_since = 0; /* idle from its last call on */
    g->worked = 0;
    if (!busy && g->idle_since == 0) g->idle_since = now;
    int kind = DL_NONE;
    int64_t at = 0;
    if (since != 0 && cfg->recv_timeout_ms > 0) {
        kind = DL_RECV;
        at = since + cfg->recv_timeout_ms;
    } else if (!busy && cfg->idle_timeout_ms > 0) {
        kind = DL_IDLE;
        at = g->idle_since + cfg->idle_timeout_ms;
    }
    int64_t slack = (kind == DL_RECV ? cfg->recv_timeout_ms : cfg->idle_timeout_ms) / 16;
    if (slack > DL_SLACK_MS) slack = DL_SLACK_MS;
    if (kind == g->dl_kind && (kind == DL_NONE || (g->dl_at >= at && g->dl_at - at <= slack)))
        return; /* the timer set falls late enough, and not too late */
    g->dl_kind = kind;
    g->dl_at = at + slack;
    sl_conn_deadline(g->c,
                     kind == DL_NONE  ? 0
                     : g->dl_at > now ? g->dl_at - now
                                      : 1,
                     kind == DL_IDLE);
}

/* ---- answers --------------------------------------------------------------- */

/* grpc-message: percent-encoded (gRPC's spec: bytes outside 0x20..0x7e,
 * and '%'), cut to fit dst. */
static void pct_encode(char *dst, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch < 0x20 || ch > 0x7e || ch == '%') {
            dst[o++] = '%';
            dst[o++] = hex[ch >> 4];
            dst[o++] = hex[ch & 15];
        } else {
            dst[o++] = (char)ch;
        }
    }
    dst[o] = '\0';
}

/* The fixed fields of an answer, HPACK-coded (hpack.h: no indexing, so
 * the same bytes every time): `:status: 200` (static entry 8) and
 * `content-type: application/grpc` (name: static entry 31); the trailers'
 * `grpc-status: 0`. */
static const uint8_t HDR_OK[] = "\x88\x0f\x10\x10"
                                "application/grpc";
static const uint8_t TRAILER_OK[] = "\x00\x0bgrpc-status\x01"
                                    "0";
#define HDR_OK_LEN     (sizeof HDR_OK - 1)
#define TRAILER_OK_LEN (sizeof TRAILER_OK - 1)

/* Puts an answer on st's stream (h2.c); out of memory drops the
 * connection.  st may be gone after it. */
static void respond(gstream *st, const uint8_t *hdr, size_t hlen, const uint8_t *body, size_t blen,
                    const uint8_t *tr, size_t tlen)
{
    gconn *g = st->g;
    st->answered = 1;
    if (sl_h2_respond(g->h2, st->s, hdr, hlen, body, blen, tr, tlen) != 0) g->nomem = 1;
}

/* Answers st with no message: a trailers-only response carrying the
 * status (gRPC's error form). */
static void answer_status(gstream *st, int code, const char *msg)
{
    if (st->answered) return;
    char cs[16], enc[3 * SL_SVC_ERR + 1];
    snprintf(cs, sizeof cs, "%d", code);
    pct_encode(enc, sizeof enc, msg ? msg : "");
    size_t el = strlen(enc);
    uint8_t b[HDR_OK_LEN + 2 * 6 + sizeof "grpc-status" + sizeof cs + sizeof "grpc-message" +
              sizeof enc + 12];
    size_t n = HDR_OK_LEN;
    memcpy(b, HDR_OK, n);
    n += sl_hpack_put_literal(b + n, 0, "grpc-status", 11, cs, strlen(cs));
    if (el > 0) n += sl_hpack_put_literal(b + n, 0, "grpc-message", 12, enc, el);
    respond(st, b, n, NULL, 0, NULL, 0);
}

/* Answers st with message m (packed with its 5-byte prefix), then
 * grpc-status 0. */
static void answer_message(gstream *st, const ProtobufCMessage *m)
{
    if (st->answered) return;
    /* ShouldRateLimit's answer by hand (rls_wire.h), others by protobuf-c */
    int rls = m->descriptor == &envoy__service__ratelimit__v3__rate_limit_response__descriptor;
    size_t n = rls ? sl_rls_resp_size((const rls_resp *)m, NULL, 0)
                   : protobuf_c_message_get_packed_size(m);
    unsigned char small[SMALL];
    unsigned char *p = 5 + n <= SMALL ? small : malloc(5 + n);
    if (p == NULL) {
        st->g->nomem = 1;
        return;
    }
    p[0] = 0; /* not compressed */
    p[1] = (unsigned char)(n >> 24), p[2] = (unsigned char)(n >> 16);
    p[3] = (unsigned char)(n >> 8), p[4] = (unsigned char)n;
    if (rls)
        sl_rls_resp_pack((const rls_resp *)m, NULL, 0, p + 5);
    else
        protobuf_c_message_pack(m, p + 5);
    respond(st, HDR_OK, HDR_OK_LEN, p, 5 + n, TRAILER_OK, TRAILER_OK_LEN);
    if (p != small) free(p);
}

/* ---- ShouldRateLimit ------------------------------------------------------------ */

static uint32_t clamp_u32(int64_t v)
{
    return v < 0 ? 0 : v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* The published unit nearest a limit's window, and its requests per that
 * unit (docs/envoy.md, "Units"): a Lyft unit that rls.proto has is itself;
 * any other window is written in the largest published unit not longer
 * than it (at least SECOND), the limit scaled to that unit and rounded
 * down, so the figure never promises more than the rule allows. */
static void unit_of(const sl_rule_limit *rl, int64_t limit, rls_limit *out)
{
    static const struct {
        int64_t ms;
        int unit;
    } units[] = {
        {365LL * 86400000,
         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__YEAR},
        {30LL * 86400000,
         ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__MONTH},
        {86400000, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__DAY},
        {3600000, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__HOUR},
        {60000, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__MINUTE},
        {1000, ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__UNIT__SECOND},
    };
    int64_t w = rl->params.window_ms;
    size_t k = 0;
    while (k + 1 < sizeof units / sizeof units[0] && units[k].ms > w) k++;
    out->unit = units[k].unit;
    if (w == units[k].ms || w <= 0) {
        out->requests_per_unit = clamp_u32(limit);
        return;
    }
    /* limit * unit / w, without overflow: limit <= SL_MAX_LIMIT (2^53),
     * unit <= 2^35: in long double's 64-bit mantissa after division */
    long double r = (long double)limit * (long double)units[k].ms / (long double)w;
    out->requests_per_unit = r >= (long double)UINT32_MAX ? UINT32_MAX : (uint32_t)r;
}

/* The gRPC status of a service error (sl_svc_check's rc). */
static int status_of(int rc, const char *msg)
{
    if (msg != NULL && strcmp(msg, sl_svc_no_rules) == 0) return ST_FAILED_PRECONDITION;
    if (rc == SL_ENOMEM || rc == SL_EFULL) return ST_RESOURCE_EXHAUSTED;
    if (rc == SL_EINVAL || rc == SL_EKEY || rc == SL_ECOST || rc == SL_ETIME)
        return ST_INVALID_ARGUMENT;
    return ST_UNAVAILABLE; /* the backend could not decide: Envoy's failure mode applies */
}

/* Writes RL.CHECK's answer r as a RateLimitResponse on st (docs/envoy.md:
 * the mapping). */
static void answer_rls(gstream *st, const greq *q, const sl_svc_reply *r)
{
    if (r->rc < 0) {
        answer_status(st, status_of(r->rc, r->err), r->err);
        return;
    }
    rls_resp resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    rls_status sts[SL_CHECK_MAX_DESC], *stp[SL_CHECK_MAX_DESC];
    rls_limit lim[SL_CHECK_MAX_DESC];
    Google__Protobuf__Duration dur[SL_CHECK_MAX_DESC];
    rls_header hv[SL_RLH_MAX_FIELDS], *hvp[SL_RLH_MAX_FIELDS];
    char text[SL_RLH_CAP]; /* the headers' values */
    resp.overall_code = r->result.allowed
                            ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                            : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
    for (int d = 0; d < r->n && d < SL_CHECK_MAX_DESC; d++) {
        const sl_check_status *cs = &r->st[d];
        rls_status *o = &sts[d];
        *o =
            (rls_status)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
        stp[d] = o;
        /* shadow, quota, elastic: allowed, so OK, as Lyft answers shadow mode */
        o->code = cs->code == SL_CHECK_OVER_LIMIT
                      ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                      : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        if (cs->code == SL_CHECK_NO_RULE) continue; /* no limit: all unset, as Lyft */
        if (cs->code == SL_CHECK_UNLIMITED) {
            o->limit_remaining = UINT32_MAX; /* Lyft's answer for `unlimited` */
            continue;
        }
        lim[d] = (rls_limit)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
        lim[d].name = (char *)(cs->name ? cs->name : "");
        unit_of(cs->rule, cs->limit, &lim[d]);
        o->current_limit = &lim[d];
        o->limit_remaining = clamp_u32(cs->remaining);
        dur[d] = (Google__Protobuf__Duration)GOOGLE__PROTOBUF__DURATION__INIT;
        dur[d].seconds = cs->reset_after_ms / 1000;
        dur[d].nanos = (int32_t)(cs->reset_after_ms % 1000) * 1000000;
        o->duration_until_reset = &dur[d];
    }
    resp.n_statuses = (size_t)r->n;
    resp.statuses = stp;
    if (q->want_headers) { /* /v1/check's headers (docs/envoy.md) */
        sl_rlh o;
        sl_rlh_init(&o, text, sizeof text, 0);
        sl_rlh_check(&o, r->st, r->n, &r->result);
        for (int i = 0; i < o.n; i++) {
            hv[i] = (rls_header)ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
            hv[i].key = (char *)o.name[i], hv[i].value = (char *)o.value[i];
            hvp[i] = &hv[i];
        }
        resp.n_response_headers_to_add = (size_t)o.n;
        resp.response_headers_to_add = hvp;
    }
    answer_message(st, &resp.base);
}

static void on_rls(void *arg, const sl_svc_reply *r)
{
    greq *q = arg;
    gconn *g = q->g;
    g->calls--;
    g->worked = 1;
    if (g->h2 != NULL) {
        sl_h2_stream *s = sl_h2_find(g->h2, (uint32_t)q->id);
        if (s != NULL) { /* else: the client reset it (counted as an orphan) */
            gstream *st = sl_h2_user(s);
            st->inflight = 0;
            answer_rls(st, q, r);
        } else {
            g->orphans--;
        }
        if (!g->in_run) {
            set_deadline(g, g->now);
            flush(g);
        }
    }
    if (g->c != NULL) sl_conn_release(g->c); /* may close it: only g after this */
    free(q);
    unref(g);
}

/* A descriptor's limit override (docs/envoy.md, "Limit overrides") in
 * sluice's units: 0, or -1 for a unit that is none of rls.proto's (UNKNOWN
 * included: envoyproxy/ratelimit has no window for it). */
static int override_of(const rls_desc_override *o, sl_check_override *out)
{
    static const sl_rule_unit unit[] = {
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__SECOND] = SL_UNIT_SECOND,
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__MINUTE] = SL_UNIT_MINUTE,
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR] = SL_UNIT_HOUR,
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__DAY] = SL_UNIT_DAY,
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__MONTH] = SL_UNIT_MONTH,
        [ENVOY__TYPE__V3__RATE_LIMIT_UNIT__YEAR] = SL_UNIT_YEAR,
    };
    unsigned u = (unsigned)o->unit;
    if (u >= sizeof unit / sizeof unit[0] || unit[u] == SL_UNIT_NONE) return -1;
    *out = (sl_check_override){(int64_t)o->requests_per_unit, unit[u]};
    return 0;
}

/* Checks a request's descriptors and runs it (a descriptor's limit
 * override goes to the plan: sl_svc_check_req.over).  Bad input is answered
 * INVALID_ARGUMENT (UNIMPLEMENTED for what sluiced does not do) with a
 * message naming what and where; the backend is not asked then. */
static void run_rls(gstream *st, const rls_req *m)
{
    gconn *g = st->g;
    char err[SL_SVC_ERR];
    sl_rule_entry ent[SL_CHECK_MAX_DESC][SL_RULES_MAX_DEPTH];
    const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
    int ndesc[SL_CHECK_MAX_DESC];
    sl_svc_ctx *x = sl_conn_svc(g->c);
    if (sl_svc_rules(x, NULL) == NULL) {
        answer_status(st, ST_FAILED_PRECONDITION, sl_svc_no_rules);
        return;
    }
    if (m->domain == NULL || m->domain[0] == '\0') {
        answer_status(st, ST_INVALID_ARGUMENT, "rate limit domain must not be empty");
        return;
    }
    sl_check_shape shape = sl_check_shape_desc((int64_t)m->n_descriptors);
    if (shape == SL_CHECK_SHAPE_NONE) {
        answer_status(st, ST_INVALID_ARGUMENT, "rate limit descriptor list must not be empty");
        return;
    }
    if (shape == SL_CHECK_SHAPE_MANY) {
        snprintf(err, sizeof err, "at most %d descriptors in one request, got %zu",
                 SL_CHECK_MAX_DESC, m->n_descriptors);
        answer_status(st, ST_INVALID_ARGUMENT, err);
        return;
    }
    /* hits_addend: the request's (0, unset: 1), or a descriptor's own; the
     * descriptors of one request are decided together, so they must agree */
    int64_t cost = m->hits_addend ? (int64_t)m->hits_addend : 1;
    int64_t dcost = -1;
    int n = (int)m->n_descriptors;
    sl_check_override ov[SL_CHECK_MAX_DESC];
    int any_ov = 0;
    for (int d = 0; d < n; d++) {
        const rls_desc *ds = m->descriptors[d];
        ov[d] = (sl_check_override){0, SL_UNIT_NONE};
        if (ds->limit != NULL && override_of(ds->limit, &ov[d]) != 0) {
            snprintf(err, sizeof err,
                     "descriptor %d: limit override with unit %d: expected SECOND (1), MINUTE "
                     "(2), HOUR (3), DAY (4), MONTH (5) or YEAR (6)",
                     d + 1, (int)ds->limit->unit);
            answer_status(st, ST_INVALID_ARGUMENT, err);
            return;
        }
        any_ov |= ds->limit != NULL;
        if (sl_check_shape_entries((int64_t)ds->n_entries) != SL_CHECK_SHAPE_OK) {
            snprintf(err, sizeof err, "descriptor %d: %zu entries (expected 1 to %d)", d + 1,
                     ds->n_entries, SL_RULES_MAX_DEPTH);
            answer_status(st, ST_INVALID_ARGUMENT, err);
            return;
        }
        int64_t c = ds->hits_addend
                        ? (ds->hits_addend->value > SL_MAX_LIMIT ? SL_MAX_LIMIT + 1
                                                                 : (int64_t)ds->hits_addend->value)
                        : cost;
        if (dcost >= 0 && c != dcost) {
            snprintf(err, sizeof err,
                     "descriptor %d: hits_addend %" PRId64 " differs from descriptor 1's %" PRId64
                     ": the descriptors of one request are decided together, with one cost",
                     d + 1, c, dcost);
            answer_status(st, ST_UNIMPLEMENTED, err);
            return;
        }
        dcost = c;
        for (size_t e = 0; e < ds->n_entries; e++) {
            const char *k = ds->entries[e]->key, *v = ds->entries[e]->value;
            ent[d][e] = (sl_rule_entry){k, strlen(k), v, strlen(v)};
        }
        descs[d] = ent[d];
        ndesc[d] = (int)ds->n_entries;
    }
    if (dcost > SL_MAX_LIMIT) {
        snprintf(err, sizeof err, "hits_addend above %lld", (long long)SL_MAX_LIMIT);
        answer_status(st, ST_INVALID_ARGUMENT, err);
        return;
    }
    greq *q = malloc(sizeof *q);
    if (q == NULL) {
        g->nomem = 1;
        return;
    }
    *q = (greq){g, st->id, st->want_headers};
    g->refs++;
    g->calls++;
    st->inflight = 1;   /* on_rls clears it; a stream closing before is an orphan */
    sl_conn_hold(g->c); /* until on_rls: counted by net.c, waited for by a stop */
    sl_svc_check_req c = {.domain = m->domain,
                          .dlen = strlen(m->domain),
                          .n = n,
                          .descs = descs,
                          .ndesc = ndesc,
                          .over = any_ov ? ov : NULL,
                          .cost = dcost,
                          .at = g->now};
    sl_svc_check(x, &c, on_rls, q);
}

/* ---- Health/Check ---------------------------------------------------------------- */

static void run_health(gstream *st, const Grpc__Health__V1__HealthCheckRequest *m)
{
    if (m->service && m->service[0] && strcmp(m->service, RLS_SERVICE) != 0) {
        answer_status(st, ST_NOT_FOUND, "unknown service");
        return;
    }
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = sl_conn_stopping(st->g->c)
                   ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    answer_message(st, &r.base);
}

/* ---- a request, once its stream ended ------------------------------------------- */

/* Whether st's call may run: with a password configured (auth.c), a
 * ShouldRateLimit must carry `authorization: Bearer TOKEN` metadata of a
 * user in the deciding group, as HTTP's decision endpoints do (Envoy sets
 * it with the rate limit service's initial_metadata).  Otherwise answers
 * UNAUTHENTICATED (none, malformed, wrong, or too many failures from the
 * address) or PERMISSION_DENIED (a user without +deciding) and returns 0. */
static int authorized(gstream *st)
{
    sl_auth *a = sl_conn_svc(st->g->c)->srv->auth;
    if (!sl_auth_required(a)) return 1;
    char host[64], msg[256];
    const sl_auth_user *who = NULL;
    int64_t retry = 0;
    const char *peer = sl_conn_peer_host(st->g->c, host, sizeof host);
    int rc = st->auth_len > sizeof st->auth
                 ? SL_AUTH_MALFORMED
                 : sl_auth_bearer(a, peer, st->auth_given ? st->auth : NULL, st->auth_len,
                                  SL_AUTH_DECIDING, st->g->now, &who, &retry);
    switch (rc) {
    case SL_AUTH_OK: return 1;
    case SL_AUTH_MISSING:
        answer_status(st, ST_UNAUTHENTICATED,
                      "a password is configured: send the metadata authorization: Bearer "
                      "<password> (or Bearer <user>:<password>)");
        return 0;
    case SL_AUTH_MALFORMED:
        answer_status(st, ST_UNAUTHENTICATED,
                      "malformed authorization metadata: expected Bearer <password> or Bearer "
                      "<user>:<password>");
        return 0;
    case SL_AUTH_BLOCKED:
        snprintf(msg, sizeof msg,
                 "too many failed logins from %s: retry in %lld ms (this token was not checked)",
                 peer ? peer : "this client", (long long)retry);
        answer_status(st, ST_UNAUTHENTICATED, msg);
        return 0;
    case SL_AUTH_NOPERM:
        snprintf(msg, sizeof msg, "user '%s' has no permission to decide (it needs +deciding)",
                 who->name);
        answer_status(st, ST_PERMISSION_DENIED, msg);
        return 0;
    default:
        answer_status(st, ST_UNAUTHENTICATED,
                      "invalid bearer token: wrong user or password, or the user is disabled");
        return 0;
    }
}

static void dispatch(gstream *st)
{
    gconn *g = st->g;
    if (st->answered) return;
    if (g->t->cmds > 0) g->t->cmds--;
    sl_stat_inc(&sl_conn_svc(g->c)->st->commands, 1);
    if (!st->post || !st->grpc_type) {
        /* not a gRPC call: gRPC's spec answers 415 to a wrong content-type */
        uint8_t b[8];
        size_t n = sl_hpack_put_literal(b, 8 /* :status */, NULL, 0, st->post ? "415" : "405", 3);
        respond(st, b, n, NULL, 0, NULL, 0);
        return;
    }
    if (st->m == M_NONE) {
        char msg[160];
        snprintf(msg, sizeof msg, "unknown method %s", st->path);
        answer_status(st, ST_UNIMPLEMENTED, msg);
        return;
    }
    if (st->m == M_RLS && !authorized(st)) return;
    const unsigned char *p = (const unsigned char *)st->in.p;
    scratch *a = sl_conn_scratch(g->c);
    ProtobufCAllocator al = {arena_alloc, arena_free, a};
    a->used = 0;
    if (st->in.len < 5) {
        answer_status(st, ST_INTERNAL, "no request message (expected one length-prefixed message)");
        return;
    }
    size_t len = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    if (p[0] != 0) {
        answer_status(st, ST_UNIMPLEMENTED,
                      "compressed messages are not supported (grpc-encoding identity only)");
        return;
    }
    if (len != st->in.len - 5) {
        answer_status(st, ST_INTERNAL,
                      len > st->in.len - 5 ? "request message cut short"
                                           : "more than one request message in a unary call");
        return;
    }
    if (st->m == M_HEALTH) {
        Grpc__Health__V1__HealthCheckRequest *m =
            grpc__health__v1__health_check_request__unpack(&al, len, p + 5);
        in_free(st); /* m lives in the arena (or malloc): p is not needed */
        if (m == NULL) {
            answer_status(st, ST_INVALID_ARGUMENT, "cannot parse the HealthCheckRequest");
            return;
        }
        run_health(st, m);
        grpc__health__v1__health_check_request__free_unpacked(m, &al);
        return;
    }
    /* the fast path first (rls_wire.h: into the arena, nothing to free),
     * protobuf-c for what it leaves */
    size_t used;
    rls_req *m = sl_rls_unpack(p + 5, len, a->mem, ARENA, &used);
    if (m != NULL) {
        a->used = used;
        in_free(st); /* m and all it points to live in the arena */
        run_rls(st, m);
        return;
    }
    m = envoy__service__ratelimit__v3__rate_limit_request__unpack(&al, len, p + 5);
    in_free(st); /* protobuf-c copies what it keeps */
    if (m == NULL) {
        answer_status(st, ST_INVALID_ARGUMENT, "cannot parse the RateLimitRequest");
        return;
    }
    run_rls(st, m);
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m, &al);
}

/* ---- h2.c's callbacks ----------------------------------------------------------- */

static int on_begin(void *arg, sl_h2_stream *s)
{
    gconn *g = arg;
    gstream *st = sl_h2_user(s);
    /* zeroed up to its buffers (~600 bytes a stream, written before read) */
    memset(st, 0, offsetof(gstream, path));
    st->path[0] = '\0';
    st->g = g;
    st->s = s;
    st->id = (int32_t)sl_h2_id(s);
    st->t0 = g->now;
    st->pprev = g->partial_tail;
    if (g->partial_tail)
        g->partial_tail->pnext = st;
    else
        g->partial = st;
    g->partial_tail = st;
    st->on_partial = 1;
    g->nopen++;
    g->worked = 1;
    /* calls whose stream the client reset still wait for their backend:
     * they count against the streams a connection may have at once */
    return g->nopen + g->orphans > SL_GRPC_MAX_STREAMS ? SL_H2_REFUSED_STREAM : 0;
}

static int is(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

static int on_field(void *arg, sl_h2_stream *s, const uint8_t *name, size_t nlen,
                    const uint8_t *value, size_t vlen)
{
    (void)arg;
    gstream *st = sl_h2_user(s); /* h2.c bounds the list (SL_GRPC_MAX_HEADERS) */
    /* by length first: most of a call's fields are none of these */
    switch (nlen) {
    case 7:
        if (is(name, nlen, ":method")) st->post = is(value, vlen, "POST");
        break;
    case 5:
        if (!is(name, nlen, ":path")) break;
        st->m = is(value, vlen, PATH_RLS)      ? M_RLS
                : is(value, vlen, PATH_HEALTH) ? M_HEALTH
                                               : M_NONE;
        if (st->m != M_NONE) break; /* st->path names an unknown method only */
        size_t k = vlen < sizeof st->path - 1 ? vlen : sizeof st->path - 1;
        for (size_t i = 0; i < k; i++)
            st->path[i] = value[i] >= 0x20 && value[i] < 0x7f ? (char)value[i] : '?';
        st->path[k] = '\0';
        break;
    case 12:
        if (is(name, nlen, "content-type"))
            st->grpc_type = vlen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                            (vlen == 16 || value[16] == '+' || value[16] == ';');
        break;
    case 13:
        if (!is(name, nlen, "authorization")) break;
        st->auth_given = 1;
        st->auth_len = vlen;
        if (vlen <= sizeof st->auth) memcpy(st->auth, value, vlen);
        break;
    case sizeof SL_GRPC_HEADERS_MD - 1:
        if (is(name, nlen, SL_GRPC_HEADERS_MD))
            st->want_headers = !is(value, vlen, "0") && !is(value, vlen, "false");
        break;
    default: break;
    }
    return 0;
}

/* A request's DATA: kept in st->in (at most 5 + SL_GRPC_MAX_MESSAGE
 * bytes; h2.c counts them against the connection's window until the
 * request ends: sl_h2_hold_data).  A message larger than that -- by its
 * prefix, or by its bytes -- is answered RESOURCE_EXHAUSTED at once (its
 * stream then closes: what it holds is freed and its window given back). */
static int on_data(void *arg, sl_h2_stream *s, const uint8_t *d, size_t n)
{
    (void)arg;
    gstream *st = sl_h2_user(s);
    if (st->answered) return 0;
    if (st->in.p == NULL) st->in = (sl_buf){st->small_in, 0, SMALL};
    size_t want = 0; /* prefix and message, once the prefix is here */
    if (st->in.len < 5 && st->in.len + n >= 5) {
        uint8_t pre[5];
        memcpy(pre, st->in.p, st->in.len);
        memcpy(pre + st->in.len, d, 5 - st->in.len);
        want = 5 + ((size_t)pre[1] << 24 | (size_t)pre[2] << 16 | (size_t)pre[3] << 8 | pre[4]);
    }
    if (st->in.len + n > 5 + (size_t)SL_GRPC_MAX_MESSAGE ||
        want > 5 + (size_t)SL_GRPC_MAX_MESSAGE) {
        in_free(st);
        partial_off(st);
        char msg[96];
        snprintf(msg, sizeof msg, "request message larger than %d bytes", SL_GRPC_MAX_MESSAGE);
        answer_status(st, ST_RESOURCE_EXHAUSTED, msg); /* st may be gone */
        return 0;
    }
    if (st->in.p == st->small_in && st->in.len + n > SMALL) { /* to the heap */
        /* the size the prefix declared, when known: one allocation */
        size_t cap = want > st->in.len + n ? want : st->in.len + n;
        sl_buf b = {malloc(cap), 0, cap};
        if (b.p == NULL) return SL_H2_INTERNAL_ERROR;
        memcpy(b.p, st->small_in, st->in.len);
        b.len = st->in.len;
        st->in = b;
    }
    if (st->in.p == st->small_in) {
        memcpy(st->small_in + st->in.len, d, n);
        st->in.len += n;
        return 0;
    }
    return sl_buf_add(&st->in, d, n) == 0 ? 0 : SL_H2_INTERNAL_ERROR;
}

static void on_end(void *arg, sl_h2_stream *s)
{
    (void)arg;
    gstream *st = sl_h2_user(s);
    partial_off(st);
    dispatch(st);
}

static void on_closed(void *arg, sl_h2_stream *s)
{
    (void)arg;
    gstream *st = sl_h2_user(s);
    gconn *g = st->g;
    partial_off(st);
    in_free(st);
    g->nopen--;
    if (st->inflight) g->orphans++; /* its call still waits: on_rls drops its answer */
}

static const sl_h2_cbs cbs = {
    .begin = on_begin,
    .field = on_field,
    .data = on_data,
    .end = on_end,
    .closed = on_closed,
};

/* The connection's HTTP/2, made at its first bytes: NULL when out of
 * memory. */
static gconn *conn_state(sl_conn *c)
{
    gconn *g = sl_conn_pdata(c);
    if (g != NULL) return g;
    if ((g = calloc(1, sizeof *g)) == NULL) return NULL;
    g->c = c;
    g->refs = 1;
    if ((g->h2 = sl_h2_new(&cbs, g, sizeof(gstream))) == NULL) {
        free(g);
        return NULL;
    }
    sl_h2_hold_data(g->h2); /* bodies buffered: at most SL_H2_WINDOW a connection */
    sl_conn_set_pdata(c, g);
    return g;
}

/* ---- the protocol ---------------------------------------------------------------- */

static int run(sl_conn *c, const char *p, size_t len, int64_t now, sl_turn *t, size_t *used)
{
    gconn *g = conn_state(c);
    *used = 0;
    if (g == NULL) return SL_PROTO_NOMEM;
    g->in_run = 1;
    g->t = t;
    g->now = now;
    int st = SL_PROTO_AGAIN;
    size_t pos = 0;
    while (pos < len) {
        if (t->cmds == 0 || t->bytes == 0) {
            st = SL_PROTO_TURN;
            break;
        }
        ssize_t rv = sl_h2_recv(g->h2, (const uint8_t *)p + pos, len - pos);
        if (rv < 0) { /* its GOAWAY is in the output, if the error has one */
            if (sl_h2_nomem(g->h2))
                g->nomem = 1;
            else
                sl_conn_protocol_error(c, sl_h2_error(g->h2));
            pos = len;
            st = SL_PROTO_CLOSE;
            break;
        }
        if (rv == 0) break; /* a frame not whole yet: kept by net.c */
        pos += (size_t)rv;
        t->bytes = (size_t)rv >= t->bytes ? 0 : t->bytes - (size_t)rv;
        if (g->nomem) break;
    }
    set_deadline(g, now);
    flush(g);
    g->in_run = 0;
    g->t = NULL;
    *used = pos;
    if (g->nomem) return SL_PROTO_NOMEM;
    if (st != SL_PROTO_CLOSE && sl_h2_done(g->h2))
        st = SL_PROTO_CLOSE; /* GOAWAY sent or received, and no stream left */
    return st;
}

/* Input beyond max-command (net.c): GOAWAY, then the connection closes. */
static void fatal(sl_conn *c, const char *msg)
{
    gconn *g = sl_conn_pdata(c);
    if (g != NULL && g->h2 != NULL) {
        if (sl_h2_goaway(g->h2, SL_H2_ENHANCE_YOUR_CALM, msg) != 0) g->nomem = 1;
        flush(g);
    }
    sl_conn_protocol_error(c, msg);
}

/* The server stops and c's last requests ran: GOAWAY naming the last
 * stream opened, so the client knows which calls to retry elsewhere. */
static void stop(sl_conn *c)
{
    gconn *g = sl_conn_pdata(c);
    if (g == NULL || g->h2 == NULL) return;
    if (sl_h2_goaway(g->h2, SL_H2_NO_ERROR, NULL) != 0) g->nomem = 1;
    flush(g);
}

const sl_proto sl_grpc_proto = {
    .name = "grpc",
    .run = run,
    .fatal = fatal,
    .scratch_size = sizeof(scratch),
    .closed = closed,
    .stop = stop,
    .front = SL_FRONT_GRPC,
    .h2 = 1,
};
