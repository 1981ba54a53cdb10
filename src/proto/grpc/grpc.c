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
 * --max-command bytes of message per request (RESOURCE_EXHAUSTED,
 * answered as soon as it is known; grpc.h), SL_GRPC_MAX_DESC descriptors
 * (counted before decoding: too_many_descriptors); unfinished bodies held
 * (sl_h2_hold_data: --max-command + 5 bytes a connection); a request
 * begun must be whole within recv-timeout and a connection with nothing
 * open or waiting closes after idle-timeout, whatever frames it sends
 * (set_deadline: net.c's sl_conn_deadline); floods end with
 * ENHANCE_YOUR_CALM (h2.c); and net.c's own: output held for a client
 * that does not read pauses it (the turn's budget, proto.h), checked
 * before each frame.
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
#include "rls_meta.h"
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
    ST_UNKNOWN = 2, /* envoyproxy/ratelimit's code for every error it answers */
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

/* A ShouldRateLimit in flight: outlives its stream, never points to it.
 *
 * In envoy semantics a request is one or more calls of the service
 * (sl_svc_check takes at most SL_CHECK_MAX_DESC descriptors): the
 * descriptors the plan sees ("planned": not answered at the front) go in
 * chunks of at most SL_CHECK_MAX_DESC, each answered on its own
 * (struct gchunk), and the answer is written when the last one came.
 * With --stop-cache-key-increment-when-overlimit there are two rounds:
 * a peek (every cost 0), then the charge.  A request of at most
 * SL_CHECK_MAX_DESC descriptors uses the arrays inside greq (one malloc,
 * as in sluice semantics); a larger one allocates its arrays once, sized
 * by the request (at most SL_GRPC_MAX_DESC descriptors). */
typedef struct greq greq;

typedef struct gchunk {
    greq *q;
    int first, count; /* planned descriptors [first, first + count) */
} gchunk;

/* Sets of rules held while a request's chunks are gathered (their statuses
 * point into them); more than this many reloads during one request: the
 * request answers UNKNOWN (never seen: a reload takes longer than a call). */
#define HELD_MAX 4

struct greq {
    gconn *g; /* holds a reference */
    int32_t id;
    int want_headers;
    int envoy;       /* --rls-semantics envoy */
    int n;           /* the request's descriptors */
    int nplan;       /* ... of which the plan sees */
    int round;       /* envoy: 1 the peek (stop-increment), 2 the charge */
    int pending;     /* chunks of this round not answered yet */
    int submitting;  /* inside sl_svc_check: an answer now comes inline */
    int rc;          /* the first error a chunk answered, or 0 */
    char err[256];   /* ... its message */
    int64_t now;     /* ms: the request's clock (every round decides at it) */
    int *idx;        /* planned descriptor k is the request's idx[k] */
    int64_t *cost;   /* each request descriptor's hits (clamped to SL_MAX_LIMIT) */
    unsigned char *over; /* round 1: descriptor would go over its limit */
    struct gstat *st; /* gathered statuses, by request index (several chunks) */
    int known;        /* the request's domain is in the rules: 1, 0, -1 not looked up */
    gchunk *chunks;
    int nchunks;
    sl_rules *held[HELD_MAX]; /* sets st[] points into (split requests) */
    int nheld;
    uint8_t *msg;   /* round 2 of the stop-increment variant: the request's bytes */
    size_t msglen;
    /* a request of at most SL_CHECK_MAX_DESC descriptors: no other allocation */
    int idx_small[SL_CHECK_MAX_DESC];
    int64_t cost_small[SL_CHECK_MAX_DESC];
    unsigned char over_small[SL_CHECK_MAX_DESC];
    gchunk chunk_small;
};

static void greq_free(greq *q)
{
    if (q->idx != q->idx_small) free(q->idx);
    if (q->cost != q->cost_small) free(q->cost);
    if (q->over != q->over_small) free(q->over);
    if (q->chunks != &q->chunk_small) free(q->chunks);
    free(q->st);
    free(q->msg);
    for (int i = 0; i < q->nheld; i++) sl_rules_unref(q->held[i]);
    free(q);
}

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
static void answer_message_dm(gstream *st, const ProtobufCMessage *m, const uint8_t *dmeta,
                              size_t dmeta_len)
{
    if (st->answered) return;
    /* ShouldRateLimit's answer by hand (rls_wire.h), others by protobuf-c */
    int rls = m->descriptor == &envoy__service__ratelimit__v3__rate_limit_response__descriptor;
    size_t n = rls ? sl_rls_resp_size((const rls_resp *)m, dmeta, dmeta_len)
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
        sl_rls_resp_pack((const rls_resp *)m, dmeta, dmeta_len, p + 5);
    else
        protobuf_c_message_pack(m, p + 5);
    respond(st, HDR_OK, HDR_OK_LEN, p, 5 + n, TRAILER_OK, TRAILER_OK_LEN);
    if (p != small) free(p);
}

/* Answers st with message m (packed with its 5-byte prefix), then
 * grpc-status 0. */
static void answer_message(gstream *st, const ProtobufCMessage *m)
{
    answer_message_dm(st, m, NULL, 0);
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
    /* limit * unit / w, without overflow: limit <= SL_MAX_LIMIT (10^12 < 2^40),
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

/* The stream q answers, or NULL when it closed meanwhile (reset by the
 * client, or the connection gone: counted as an orphan, now dropped).
 * Marks the call answered: the caller writes its answer, then done(q). */
static gstream *stream_of(greq *q)
{
    gconn *g = q->g;
    g->calls--;
    g->worked = 1;
    if (g->h2 == NULL) return NULL;
    sl_h2_stream *s = sl_h2_find(g->h2, (uint32_t)q->id);
    if (s == NULL) {
        g->orphans--;
        return NULL;
    }
    gstream *st = sl_h2_user(s);
    st->inflight = 0;
    return st;
}

/* After q's answer was put on its stream (or dropped): sends it, and
 * gives back what q holds.  May close the connection (only g after it). */
static void done(greq *q)
{
    gconn *g = q->g;
    if (g->h2 != NULL && !g->in_run) {
        set_deadline(g, g->now);
        flush(g);
    }
    if (g->c != NULL) sl_conn_release(g->c); /* may close it: only g after this */
    greq_free(q);
    unref(g);
}

static void on_rls(void *arg, const sl_svc_reply *r)
{
    greq *q = arg;
    gstream *st = stream_of(q);
    if (st != NULL) answer_rls(st, q, r);
    done(q);
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

/* --rls-semantics sluice: checks a request's descriptors and runs it (a
 * descriptor's limit override goes to the plan: sl_svc_check_req.over).
 * Bad input is answered INVALID_ARGUMENT (UNIMPLEMENTED for what sluiced
 * does not do) with a message naming what and where; the backend is not
 * asked then. */
static void run_rls_sluice(gstream *st, const rls_req *m)
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
    *q = (greq){.g = g, .id = st->id, .want_headers = st->want_headers};
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
                          .at = g->now,
                          .conc = SL_CHECK_CONC_RATES}; /* no place for a lease id */
    sl_svc_check(x, &c, on_rls, q);
}

/* ---- ShouldRateLimit, envoy semantics ------------------------------------------- *
 *
 * envoyproxy/ratelimit's answers (docs/envoy.md, "Envoy semantics"): its
 * counting (every fixed-window counter charged on every request, then
 * judged `after > L`: sl_svc_check_req.lyft), its hits (a descriptor's own
 * hits_addend, else the request's, at least 1), its statuses, names and
 * whole-second resets, and the overall code as its shouldRateLimitWorker
 * computes it: OVER_LIMIT iff some non-quota descriptor is over, or there
 * are quota descriptors and every one is over; --shadow-mode then answers
 * OK. */

/* envoy.type.v3.RateLimitUnit and RateLimitResponse.RateLimit.Unit (the
 * same numbers) */
enum { EU_UNKNOWN = 0, EU_SECOND, EU_MINUTE, EU_HOUR, EU_DAY, EU_MONTH, EU_YEAR, EU_WEEK };

/* What the answer needs of one descriptor's status, copied at its chunk's
 * callback (the plan, where an override's limit lives, is gone after it;
 * name and meta point into a set of rules greq holds). */
typedef struct gstat {
    sl_check_code code;
    int limited;     /* a limit applies: not NO_RULE, UNLIMITED nor replaced */
    int quota;       /* its node is in quota mode */
    sl_rule_unit unit; /* the limit's unit, SL_UNIT_NONE for a `window` */
    int64_t window_ms;
    const char *name; /* the rule's `name:`, or "" */
    const void *meta; /* its node's metadata (e-meta), or NULL */
    int64_t limit, remaining, reset_after_ms;
} gstat;

static void gstat_of(const sl_check_status *cs, gstat *o)
{
    *o = (gstat){.code = cs->code, .name = ""};
    if (cs->code == SL_CHECK_NO_RULE || cs->code == SL_CHECK_UNLIMITED || cs->rule == NULL ||
        cs->replaced)
        return;
    o->limited = 1;
    /* the peer's isQuotaMode: the limit's quota_mode, shadow or not (an
     * override has none) */
    o->quota = cs->node != NULL && cs->node->quota_mode;
    o->meta = cs->node != NULL ? cs->node->metadata : NULL;
    o->unit = cs->rule->unit;
    o->window_ms = cs->rule->params.window_ms;
    if (cs->rule->named && cs->rule->name != NULL) o->name = cs->rule->name;
    o->limit = cs->limit;
    o->remaining = cs->remaining;
    o->reset_after_ms = cs->reset_after_ms;
}

/* The peer's unit of a rule's unit; EU_UNKNOWN for a `window`. */
static int envoy_unit(sl_rule_unit u)
{
    switch (u) {
    case SL_UNIT_SECOND: return EU_SECOND;
    case SL_UNIT_MINUTE: return EU_MINUTE;
    case SL_UNIT_HOUR: return EU_HOUR;
    case SL_UNIT_DAY: return EU_DAY;
    case SL_UNIT_WEEK: return EU_WEEK;
    case SL_UNIT_MONTH: return EU_MONTH;
    case SL_UNIT_YEAR: return EU_YEAR;
    default: return EU_UNKNOWN;
    }
}

/* The limit of a status s as the peer reports it into *l, and the seconds
 * until its reset: the unit's divider less now_s modulo it (utils.go's
 * CalculateReset), also for a limit of 0; for a rule with a `window` (no
 * unit of the peer's) the nearest published unit (unit_of) and the
 * engine's reset rounded up to whole seconds. */
static int64_t envoy_limit(const gstat *s, int64_t now_s, rls_limit *l)
{
    *l = (rls_limit)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
    l->name = (char *)s->name;
    int eu = envoy_unit(s->unit);
    if (eu == EU_UNKNOWN) {
        sl_rule_limit rl = {.params.window_ms = s->window_ms};
        unit_of(&rl, s->limit, l);
        return (s->reset_after_ms + 999) / 1000;
    }
    l->unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)eu;
    l->requests_per_unit = clamp_u32(s->limit);
    int64_t div = sl_rule_unit_ms(s->unit) / 1000;
    return div - now_s % div;
}

/* Writes resp on st, with the dynamic_metadata --response-dynamic-metadata
 * asks for (passed: the metadata of each descriptor that passed with a
 * limit, by index; NULL when not asked) made from the request's bytes
 * kept in q. */
/* Answers resp, with the peer's dynamic_metadata when passed is given
 * (--response-dynamic-metadata): the request read again from the bytes q
 * kept, passed[i] the metadata of descriptor i if it passed (rls_meta.h). */
static void answer_envoy_message(gstream *st, const greq *q, rls_resp *resp, const void **passed)
{
    if (passed == NULL || q->msg == NULL) {
        answer_message(st, &resp->base);
        return;
    }
    sl_buf b = {0};
    rls_req *m = envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, q->msglen, q->msg);
    if (m == NULL ||
        sl_rls_dmeta(m, (const struct sl_rule_meta *const *)passed, q->n, &b) != 0) {
        answer_status(st, ST_UNKNOWN, "out of memory");
    } else {
        /* an empty Struct is still a field: the peer always sets it */
        answer_message_dm(st, &resp->base, b.p ? (const uint8_t *)b.p : (const uint8_t *)"",
                          b.len);
    }
    if (m != NULL) envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m, NULL);
    free(b.p);
}

/* Answers an envoy request: gs[i] is descriptor i's status (q->n), r the
 * last call's reply when the request was one call (for the headers
 * x-sluice-ratelimit-headers asks for), else NULL. */
static void answer_envoy(gstream *st, const greq *q, const gstat *gs, const sl_svc_reply *r)
{
    const sl_config *cfg = sl_conn_cfg(st->g->c);
    int n = q->n;
    int64_t now_s = q->now / 1000;
    rls_resp resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    /* one block for the n statuses, their limits, durations and pointers */
    struct one {
        rls_status s;
        rls_limit l;
        Google__Protobuf__Duration d;
        int64_t reset;
    } small[SL_CHECK_MAX_DESC], *o = small;
    rls_status *ptr_small[SL_CHECK_MAX_DESC], **ptr = ptr_small;
    if (n > SL_CHECK_MAX_DESC) {
        o = malloc((size_t)n * sizeof *o);
        ptr = malloc((size_t)n * sizeof *ptr);
        if (o == NULL || ptr == NULL) {
            free(o == small ? NULL : o), free(ptr == ptr_small ? NULL : ptr);
            answer_status(st, ST_UNKNOWN, "out of memory");
            return;
        }
    }
    const void *passed_small[SL_CHECK_MAX_DESC], **passed = NULL;
    if (cfg->response_dmeta)
        passed = n <= SL_CHECK_MAX_DESC ? passed_small : calloc((size_t)n, sizeof *passed);
    int failed_rl = 0, failed_q = 0, total_q = 0, min = -1;
    uint32_t minrem = UINT32_MAX;
    for (int i = 0; i < n; i++) {
        const gstat *s = &gs[i];
        rls_status *x = &o[i].s;
        *x = (rls_status)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
        ptr[i] = x;
        if (passed != NULL) passed[i] = NULL;
        if (s->code == SL_CHECK_UNLIMITED) { /* counted nowhere, as the peer's isUnlimited */
            x->code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
            x->limit_remaining = UINT32_MAX;
            continue;
        }
        int over = 0;
        if (s->limited) {
            over = s->code == SL_CHECK_OVER_LIMIT || s->code == SL_CHECK_OVER_QUOTA;
            o[i].reset = envoy_limit(s, now_s, &o[i].l);
            x->current_limit = &o[i].l;
            /* over, or over in shadow mode (the peer's OVER_LIMIT turned
             * OK): nothing remains */
            x->limit_remaining =
                over || s->code == SL_CHECK_SHADOW ? 0 : clamp_u32(s->remaining);
            o[i].d = (Google__Protobuf__Duration)GOOGLE__PROTOBUF__DURATION__INIT;
            o[i].d.seconds = o[i].reset;
            x->duration_until_reset = &o[i].d;
            x->code = over ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                           : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        } else {
            x->code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        }
        /* the peer's minimumDescriptor: the fewest remaining, then the
         * last non-quota OVER_LIMIT */
        int quota = cfg->quota_mode || s->quota;
        if (x->current_limit != NULL && x->limit_remaining < minrem) {
            min = i;
            minrem = x->limit_remaining;
        }
        if (!over && passed != NULL) passed[i] = s->meta; /* the peer's passedDescriptors */
        if (over) {
            if (quota) {
                failed_q++;
            } else {
                failed_rl++;
                min = i;
                minrem = 0;
            }
        }
        total_q += quota;
    }
    int deny = failed_rl > 0 || (total_q > 0 && total_q == failed_q);
    if (deny && cfg->shadow_mode) deny = 0; /* global SHADOW_MODE: statuses kept */
    resp.overall_code = deny ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT
                             : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
    resp.n_statuses = (size_t)n;
    resp.statuses = ptr;
    rls_header hv[SL_RLH_MAX_FIELDS], *hvp[SL_RLH_MAX_FIELDS];
    char text[SL_RLH_CAP]; /* the headers' values */
    if (cfg->limit_headers) { /* the peer's three; they win over sluice's */
        if (min >= 0) {
            const rls_status *x = ptr[min];
            int k = snprintf(text, sizeof text, "%" PRIu32 "%c%" PRIu32 "%c%" PRId64,
                             x->current_limit->requests_per_unit, '\0', x->limit_remaining,
                             '\0', o[min].reset);
            (void)k;
            const char *v1 = text, *v2 = v1 + strlen(v1) + 1, *v3 = v2 + strlen(v2) + 1;
            const char *names[3] = {cfg->limit_limit_header, cfg->limit_remaining_header,
                                    cfg->limit_reset_header};
            const char *vals[3] = {v1, v2, v3};
            for (int i = 0; i < 3; i++) {
                hv[i] = (rls_header)ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
                hv[i].key = (char *)names[i], hv[i].value = (char *)vals[i];
                hvp[i] = &hv[i];
            }
            resp.n_response_headers_to_add = 3;
            resp.response_headers_to_add = hvp;
        }
    } else if (q->want_headers && r != NULL) { /* sluice's (docs/envoy.md) */
        sl_rlh h;
        sl_rlh_init(&h, text, sizeof text, 0);
        sl_rlh_check(&h, r->st, r->n, &r->result);
        for (int i = 0; i < h.n; i++) {
            hv[i] = (rls_header)ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
            hv[i].key = (char *)h.name[i], hv[i].value = (char *)h.value[i];
            hvp[i] = &hv[i];
        }
        resp.n_response_headers_to_add = (size_t)h.n;
        resp.response_headers_to_add = hvp;
    }
    answer_envoy_message(st, q, &resp, passed);
    if (passed != passed_small) free(passed);
    if (o != small) free(o);
    if (ptr != ptr_small) free(ptr);
}

/* Whether descriptor status cs, a peek (cost 0), says that hits more
 * would take its counter over its limit: the peer's `count + hits > L`
 * of STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (remaining = L - count). */
static int would_go_over(const sl_check_status *cs, int64_t hits)
{
    gstat g;
    gstat_of(cs, &g);
    if (!g.limited) return 0;
    if (g.code == SL_CHECK_OVER_LIMIT || g.code == SL_CHECK_OVER_QUOTA || g.code == SL_CHECK_SHADOW)
        return 1;
    return hits > g.remaining;
}

static void submit_round(greq *q, sl_svc_ctx *x, const rls_req *m);

/* Holds the set of rules the plan just used (x's, read right after it
 * was made: nothing ran between), for the statuses gathered from it. */
static void hold_rules(greq *q, sl_svc_ctx *x)
{
    sl_rules *r = x->rules.rules;
    if (r == NULL) return;
    for (int i = 0; i < q->nheld; i++)
        if (q->held[i] == r) return;
    if (q->nheld == HELD_MAX) {
        if (q->rc == 0) {
            q->rc = SL_EINVAL;
            snprintf(q->err, sizeof q->err, "the rules were reloaded %d times during the call",
                     HELD_MAX);
        }
        return;
    }
    q->held[q->nheld++] = sl_rules_ref(r);
}

/* One chunk's answer fewer to wait for; at the last one of a round, the
 * next round or the answer. */
static void chunk_done(greq *q, const sl_svc_reply *r)
{
    if (--q->pending > 0) return;
    gconn *g = q->g;
    if (q->rc == 0 && q->round == 1) { /* the peek is in: the charge */
        q->round = 2;
        int any = 0;
        for (int i = 0; i < q->n; i++) any |= q->over[i];
        if (!any) memset(q->over, 1, (size_t)q->n); /* nobody over: everyone charged */
        rls_req *m = g->c != NULL ? envoy__service__ratelimit__v3__rate_limit_request__unpack(
                                        NULL, q->msglen, q->msg)
                                  : NULL;
        if (m != NULL) {
            submit_round(q, sl_conn_svc(g->c), m);
            envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m, NULL);
            return;
        }
        q->rc = SL_ENOMEM;
        snprintf(q->err, sizeof q->err, "%s", g->c != NULL ? "out of memory" : "");
    }
    gstream *st = stream_of(q);
    if (st != NULL) {
        if (q->rc != 0) {
            answer_status(st, ST_UNKNOWN, q->err);
        } else if (q->st != NULL) {
            answer_envoy(st, q, (const gstat *)q->st, NULL);
        } else { /* one call: its statuses, with those answered at the front */
            gstat gs[SL_CHECK_MAX_DESC];
            int k = 0;
            for (int i = 0; i < q->n; i++) {
                if (k < q->nplan && q->idx[k] == i)
                    gstat_of(&r->st[k++], &gs[i]);
                else
                    gs[i] = (gstat){.code = SL_CHECK_NO_RULE, .name = ""};
            }
            answer_envoy(st, q, gs, r);
        }
    }
    done(q);
}

static void on_chunk(void *arg, const sl_svc_reply *r)
{
    gchunk *ch = arg;
    greq *q = ch->q;
    if (r->rc < 0) {
        if (q->rc == 0) {
            q->rc = r->rc;
            snprintf(q->err, sizeof q->err, "%s", r->err);
        }
    } else if (q->round == 1) {
        for (int k = 0; k < ch->count && k < r->n; k++) {
            int i = q->idx[ch->first + k];
            q->over[i] = (unsigned char)would_go_over(&r->st[k], q->cost[i]);
        }
    } else if (q->st != NULL) { /* gathered: copied now, the plan goes */
        if (q->submitting && q->g->c != NULL) hold_rules(q, sl_conn_svc(q->g->c));
        gstat *gs = (gstat *)q->st;
        for (int k = 0; k < ch->count && k < r->n; k++)
            gstat_of(&r->st[k], &gs[q->idx[ch->first + k]]);
    }
    chunk_done(q, r);
}

/* Sends round q->round of m's planned descriptors, in chunks of at most
 * SL_CHECK_MAX_DESC.  Round 1 (the peek) costs nothing; round 2 charges
 * each descriptor its hits, or, after a peek that found some would go
 * over, only those.  q may be gone when it returns. */
static void submit_round(greq *q, sl_svc_ctx *x, const rls_req *m)
{
    int nch = q->nchunks;
    /* one more than the chunks while sending: an answer coming inline
     * cannot finish q under the loop; a single chunk finishes it itself */
    q->pending = nch > 1 ? nch + 1 : 1;
    for (int c = 0; c < nch; c++) {
        gchunk *ch = &q->chunks[c];
        sl_rule_entry ent_small[SL_CHECK_MAX_DESC * SL_RULES_MAX_DEPTH], *ent = ent_small;
        const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
        int ndesc[SL_CHECK_MAX_DESC];
        sl_check_override ov[SL_CHECK_MAX_DESC];
        int64_t costs[SL_CHECK_MAX_DESC];
        size_t nent = 0;
        for (int k = 0; k < ch->count; k++) nent += m->descriptors[q->idx[ch->first + k]]->n_entries;
        if (nent > sizeof ent_small / sizeof ent_small[0] &&
            (ent = malloc(nent * sizeof *ent)) == NULL) {
            sl_svc_reply e = {.rc = SL_ENOMEM, .err = "out of memory"};
            on_chunk(ch, &e);
            if (nch == 1) return; /* q is gone */
            continue;
        }
        int any_ov = 0;
        size_t at = 0;
        for (int k = 0; k < ch->count; k++) {
            int i = q->idx[ch->first + k];
            const rls_desc *ds = m->descriptors[i];
            ov[k] = (sl_check_override){0, SL_UNIT_NONE};
            if (ds->limit != NULL && q->known) { /* run_rls_envoy checked its unit */
                static const sl_rule_unit unit[] = {
                    [EU_SECOND] = SL_UNIT_SECOND, [EU_MINUTE] = SL_UNIT_MINUTE,
                    [EU_HOUR] = SL_UNIT_HOUR,     [EU_DAY] = SL_UNIT_DAY,
                    [EU_MONTH] = SL_UNIT_MONTH,   [EU_YEAR] = SL_UNIT_YEAR,
                    [EU_WEEK] = SL_UNIT_WEEK,
                };
                ov[k] = (sl_check_override){(int64_t)ds->limit->requests_per_unit,
                                            unit[ds->limit->unit]};
                any_ov = 1;
            }
            for (size_t e = 0; e < ds->n_entries; e++) {
                const char *kk = ds->entries[e]->key, *v = ds->entries[e]->value;
                ent[at + e] = (sl_rule_entry){kk, strlen(kk), v, strlen(v)};
            }
            descs[k] = ent + at;
            ndesc[k] = (int)ds->n_entries;
            at += ds->n_entries;
            costs[k] = q->round == 1 ? 0 : q->over[i] ? q->cost[i] : 0;
        }
        sl_svc_check_req cr = {.domain = m->domain,
                               .dlen = strlen(m->domain),
                               .n = ch->count,
                               .descs = descs,
                               .ndesc = ndesc,
                               .over = any_ov ? ov : NULL,
                               .cost = costs[0],
                               .costs = costs,
                               .lyft = 1,
                               .at = q->now,
                               .conc = SL_CHECK_CONC_RATES}; /* no place for a lease id */
        int gather = q->st != NULL && q->round == 2;
        q->submitting = 1;
        sl_svc_check(x, &cr, on_chunk, ch);
        if (nch == 1) { /* q may be gone: nothing of it after this */
            if (ent != ent_small) free(ent);
            return;
        }
        q->submitting = 0;
        if (gather) hold_rules(q, x); /* async: the set the plan used, held */
        if (ent != ent_small) free(ent);
    }
    chunk_done(q, NULL); /* the loop's own count */
}

/* --rls-semantics envoy: checks a request as the peer does (its errors,
 * UNKNOWN with its texts), answers at the front the descriptors no rule
 * can match (no entries; more entries than any rule has, without an
 * override), and sends the others to the plan (submit_round).  m's bytes
 * (p, len) are kept when a later round or the dynamic metadata needs them. */
static void run_rls_envoy(gstream *st, const rls_req *m, const uint8_t *p, size_t len)
{
    gconn *g = st->g;
    char err[SL_SVC_ERR];
    if (m->domain == NULL || m->domain[0] == '\0') {
        answer_status(st, ST_UNKNOWN, "rate limit domain must not be empty");
        return;
    }
    if (m->n_descriptors == 0) {
        answer_status(st, ST_UNKNOWN, "rate limit descriptor list must not be empty");
        return;
    }
    sl_svc_ctx *x = sl_conn_svc(g->c);
    const sl_rules *rules = sl_svc_rules(x, NULL);
    if (rules == NULL) {
        answer_status(st, ST_UNKNOWN, "no rate limit configuration loaded");
        return;
    }
    const sl_config *cfg = sl_conn_cfg(g->c);
    int n = (int)m->n_descriptors; /* at most SL_GRPC_MAX_DESC */
    greq *q = malloc(sizeof *q);
    if (q == NULL) {
        g->nomem = 1;
        return;
    }
    *q = (greq){.g = g,
                .id = st->id,
                .want_headers = st->want_headers,
                .envoy = 1,
                .n = n,
                .round = cfg->stop_incr_overlimit ? 1 : 2,
                .now = g->now,
                .known = -1};
    if (n <= SL_CHECK_MAX_DESC) {
        q->idx = q->idx_small, q->cost = q->cost_small, q->over = q->over_small;
    } else {
        q->idx = malloc((size_t)n * sizeof *q->idx);
        q->cost = malloc((size_t)n * sizeof *q->cost);
        q->over = malloc((size_t)n);
        q->st = malloc((size_t)n * sizeof *q->st);
        if (q->idx == NULL || q->cost == NULL || q->over == NULL || q->st == NULL) goto nomem;
    }
    /* hits: the descriptor's own (0 allowed), else the request's, at least
     * 1 (the peer's GetHitsAddends); above SL_MAX_LIMIT: SL_MAX_LIMIT,
     * which is over every limit a rule can have */
    int64_t dflt = m->hits_addend ? (int64_t)m->hits_addend : 1;
    for (int i = 0; i < n; i++) {
        const rls_desc *ds = m->descriptors[i];
        int ov = 0;
        if (ds->limit != NULL) {
            if (q->known < 0)
                q->known = sl_rules_find_domain(rules, m->domain, strlen(m->domain)) != NULL;
            unsigned u = (unsigned)ds->limit->unit;
            if (q->known && (u == EU_UNKNOWN || u > EU_WEEK)) {
                /* the peer has no divider for it (its UnitToDivider panics) */
                snprintf(err, sizeof err,
                         "descriptor %d: limit override with unit %u: expected SECOND (1), "
                         "MINUTE (2), HOUR (3), DAY (4), MONTH (5), YEAR (6) or WEEK (7)",
                         i + 1, u);
                answer_status(st, ST_UNKNOWN, err);
                greq_free(q);
                return;
            }
            ov = q->known;
        }
        q->cost[i] = ds->hits_addend ? (ds->hits_addend->value > SL_MAX_LIMIT
                                            ? SL_MAX_LIMIT
                                            : (int64_t)ds->hits_addend->value)
                                     : dflt;
        q->over[i] = 1; /* charged (round 1 may say otherwise) */
        if (q->st != NULL) q->st[i] = (gstat){.code = SL_CHECK_NO_RULE, .name = ""};
        if ((ds->n_entries == 0 || ds->n_entries > SL_RULES_MAX_DEPTH) && !ov)
            continue; /* no rule can match it: OK, no limit (the peer's nil); an
                       * override applies whatever the entries, none included */
        q->idx[q->nplan++] = i;
    }
    if (q->nplan == 0) { /* nothing for the plan: answered now */
        gstat small[SL_CHECK_MAX_DESC];
        if (q->st == NULL)
            for (int i = 0; i < n; i++) small[i] = (gstat){.code = SL_CHECK_NO_RULE, .name = ""};
        answer_envoy(st, q, q->st != NULL ? q->st : small, NULL);
        greq_free(q);
        return;
    }
    q->nchunks = (q->nplan + SL_CHECK_MAX_DESC - 1) / SL_CHECK_MAX_DESC;
    if (q->nchunks == 1) {
        q->chunks = &q->chunk_small;
        free(q->st); /* one call: answered from its reply */
        q->st = NULL;
    } else if ((q->chunks = malloc((size_t)q->nchunks * sizeof *q->chunks)) == NULL) {
        goto nomem;
    }
    for (int c = 0; c < q->nchunks; c++) {
        int first = c * SL_CHECK_MAX_DESC, left = q->nplan - first;
        q->chunks[c] = (gchunk){q, first, left < SL_CHECK_MAX_DESC ? left : SL_CHECK_MAX_DESC};
    }
    if (q->round == 1 || cfg->response_dmeta) { /* read again later */
        if ((q->msg = malloc(len ? len : 1)) == NULL) goto nomem;
        memcpy(q->msg, p, len);
        q->msglen = len;
    }
    g->refs++;
    g->calls++;
    st->inflight = 1;   /* answered by chunk_done; a stream closing before is an orphan */
    sl_conn_hold(g->c); /* until then: counted by net.c, waited for by a stop */
    submit_round(q, x, m);
    return;
nomem:
    answer_status(st, ST_UNKNOWN, "out of memory");
    greq_free(q);
}

static void run_rls(gstream *st, const rls_req *m, const uint8_t *p, size_t len)
{
    if (sl_conn_cfg(st->g->c)->rls_semantics == SL_RLS_SLUICE)
        run_rls_sluice(st, m);
    else
        run_rls_envoy(st, m, p, len);
}

/* ---- Health/Check ---------------------------------------------------------------- */

/* Services "" and "ratelimit" (envoyproxy/ratelimit's name); with
 * --rls-semantics sluice also the service's full name, as before.
 * Others: NOT_FOUND "unknown service", grpc-go's answer. */
static void run_health(gstream *st, const Grpc__Health__V1__HealthCheckRequest *m)
{
    const char *sv = m->service ? m->service : "";
    int sluice = sl_conn_cfg(st->g->c)->rls_semantics == SL_RLS_SLUICE;
    if (sv[0] != '\0' && strcmp(sv, "ratelimit") != 0 && !(sluice && strcmp(sv, RLS_SERVICE) == 0)) {
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

/* A protobuf varint at p[*i..len) into *v: 0, or -1 (cut short, or
 * longer than 10 bytes). */
static int pb_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int sh = 0; *i < len && sh < 70; sh += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << (sh < 64 ? sh : 0);
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* The descriptors (field 2) of the RateLimitRequest p[0..len), counted
 * on its top-level framing without decoding it (so that a request of too
 * many is refused before protobuf-c builds them): those before the
 * framing ends, or breaks (the decoder then refuses the message). */
static size_t count_descriptors(const uint8_t *p, size_t len)
{
    size_t n = 0, i = 0;
    while (i < len) {
        uint64_t tag, v;
        if (pb_varint(p, len, &i, &tag) != 0) return n;
        switch (tag & 7) {
        case 0: /* a varint */
            if (pb_varint(p, len, &i, &v) != 0) return n;
            continue;
        case 1: v = 8; break;
        case 2: /* length-delimited */
            if (pb_varint(p, len, &i, &v) != 0) return n;
            break;
        case 5: v = 4; break;
        default: return n; /* a group, or no wire type */
        }
        if (v > len - i) return n;
        i += (size_t)v;
        n += tag == (2 << 3 | 2);
    }
    return n;
}

/* More than SL_GRPC_MAX_DESC descriptors in st's message p[0..len): 1,
 * answered (grpc.h's texts), else 0. */
static int too_many_descriptors(gstream *st, const uint8_t *p, size_t len)
{
    /* a descriptor takes 2 bytes at least (its tag and length): most
     * messages are too short to hold too many, and are not scanned */
    if (len < 2 * ((size_t)SL_GRPC_MAX_DESC + 1)) return 0;
    size_t n = count_descriptors(p, len);
    if (n <= SL_GRPC_MAX_DESC) return 0;
    in_free(st); /* p is no longer needed; st may be gone after the answer */
    char msg[96];
    if (sl_conn_cfg(st->g->c)->rls_semantics == SL_RLS_SLUICE) {
        snprintf(msg, sizeof msg, "at most %d descriptors in one request, got %zu",
                 SL_CHECK_MAX_DESC, n);
        answer_status(st, ST_INVALID_ARGUMENT, msg);
    } else {
        snprintf(msg, sizeof msg, "%zu descriptors in one request: at most %d", n,
                 SL_GRPC_MAX_DESC);
        answer_status(st, ST_UNKNOWN, msg);
    }
    return 1;
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
    if (too_many_descriptors(st, p + 5, len)) return;
    /* the fast path first (rls_wire.h: into the arena, nothing to free),
     * protobuf-c for what it leaves */
    size_t used;
    rls_req *m = sl_rls_unpack(p + 5, len, a->mem, ARENA, &used);
    if (m != NULL) {
        a->used = used; /* m and all it points to live in the arena */
        run_rls(st, m, p + 5, len);
        in_free(st);
        return;
    }
    m = envoy__service__ratelimit__v3__rate_limit_request__unpack(&al, len, p + 5);
    if (m == NULL) {
        in_free(st);
        answer_status(st, ST_INVALID_ARGUMENT, "cannot parse the RateLimitRequest");
        return;
    }
    run_rls(st, m, p + 5, len);
    in_free(st); /* protobuf-c copied what it keeps */
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

/* A request's DATA: kept in st->in (at most 5 + --max-command bytes;
 * h2.c holds them against the connection's bound until the request ends:
 * sl_h2_hold_data).  A message larger than --max-command -- by its
 * prefix, or by its bytes -- is answered RESOURCE_EXHAUSTED at once, in
 * grpc-go's words (its stream then closes: what it holds is freed and
 * its window given back).  Past small_in the buffer is one allocation of
 * the declared size when that is at most HEAP_FIRST bytes, else grows by
 * doubling up to the declared size: a stream's buffer is never much more
 * than what it sent (a message declared large but never sent costs no
 * more than HEAP_FIRST). */
#define HEAP_FIRST (16 * 1024 + 5)
static int on_data(void *arg, sl_h2_stream *s, const uint8_t *d, size_t n)
{
    (void)arg;
    gstream *st = sl_h2_user(s);
    if (st->answered) return 0;
    if (st->in.p == NULL) st->in = (sl_buf){st->small_in, 0, SMALL};
    uint64_t max = sl_conn_cfg(st->g->c)->max_command;
    size_t have = st->in.len + n, want = 0; /* want: prefix and message, once known */
    if (have >= 5) {
        uint8_t pre[5];
        size_t k = st->in.len < 5 ? st->in.len : 5;
        memcpy(pre, st->in.p, k);
        memcpy(pre + k, d, 5 - k);
        want = 5 + ((size_t)pre[1] << 24 | (size_t)pre[2] << 16 | (size_t)pre[3] << 8 | pre[4]);
    }
    if (want > 5 + max || have > 5 + max) {
        in_free(st);
        partial_off(st);
        char msg[96];
        snprintf(msg, sizeof msg, "grpc: received message larger than max (%zu vs. %" PRIu64 ")",
                 (want > have ? want : have) - 5, max);
        answer_status(st, ST_RESOURCE_EXHAUSTED, msg); /* st may be gone */
        return 0;
    }
    if (st->in.p == st->small_in && have <= SMALL) {
        memcpy(st->small_in + st->in.len, d, n);
        st->in.len = have;
        return 0;
    }
    if (have > st->in.cap) { /* to the heap, or a larger one */
        size_t cap = st->in.p == st->small_in ? HEAP_FIRST : 2 * st->in.cap;
        if (want >= have && cap > want) cap = want;
        if (cap < have) cap = have;
        char *b = st->in.p == st->small_in ? malloc(cap) : realloc(st->in.p, cap);
        if (b == NULL) return SL_H2_INTERNAL_ERROR;
        if (st->in.p == st->small_in) memcpy(b, st->small_in, st->in.len);
        st->in.p = b;
        st->in.cap = cap;
    }
    memcpy(st->in.p + st->in.len, d, n);
    st->in.len = have;
    return 0;
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
    /* unfinished bodies: at most one whole message a connection (on_data) */
    sl_h2_hold_data(g->h2, sl_conn_cfg(c)->max_command + 5);
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
