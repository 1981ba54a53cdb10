/*
 * net_int.h -- what the files of the network layer share (internal to
 * src/server/net*.c; the rest of sluiced sees net.h and proto.h only).
 *
 * The network layer, by concern:
 *     net.c         the net: worker threads, their pipes, start and stop
 *     net_conn.c    connections: the request path (read, run, send),
 *                   timeouts, closing, detached connections
 *     net_slot.c    reply slots (proto.h) and what requests in flight weigh
 *     net_budget.c  the output budget of all clients (max-output-total),
 *                   memory back to the system
 *     net_tls.c     TLS connections (bufferevent_openssl)
 *     net_listen.c  listeners: which protocol each speaks, binding, the
 *                   acceptor
 * No file knows a protocol: what differs between them is in their sl_proto
 * (proto.h), and which listener speaks which is net_listen.c's table.
 *
 * The hot path (one read, its requests run, one send) stays within
 * net_conn.c and net_slot.c; what it asks of the others -- the budget's
 * fast checks, the bounds -- is inline here, so splitting the files added
 * no call to a request.
 */
#ifndef SL_NET_INT_H
#define SL_NET_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "net.h"
#include "proto.h"

#define MAX_LISTENERS    16
#define BACKLOG          511
#define LINGER_MAX_BYTES (64 * 1024 * 1024) /* time (SL_NET_LINGER_MS) is the real bound */
#define HOLD_CLASSES     48                 /* size classes of held output: 2^0 .. 2^47+ bytes */

/* The protocols a net serves, each on listeners of its own (net_listen.c):
 * sl_net_start's proto, its http, and srv->grpc.  A connection knows its
 * front by index (conn.fi): net->protos[fi] is what it speaks. */
#define NET_FRONTS 3

/* What the acceptor (and shed_request) write into a worker's pipe besides fds. */
#define PIPE_STOP        -1        /* stop gracefully; always the last */
#define PIPE_SHED        -2        /* the output of all clients is over max-output-total */
#define PIPE_TLS         (1 << 30) /* or'ed into an fd: it came from a TLS listener */
#define PIPE_REFUSED     (1 << 29) /* ... beyond max-clients: its protocol refuses it, uncounted */
#define PIPE_FRONT_SHIFT 27        /* ... and the front of its listener, in two bits */
#define PIPE_FRONT       (3 << PIPE_FRONT_SHIFT)
#define PIPE_FLAGS       (PIPE_TLS | PIPE_REFUSED | PIPE_FRONT)

enum conn_state {
    C_OPEN,    /* reading and running commands */
    C_CLOSING, /* no more commands; sending what is pending, then closing */
    C_LINGER,  /* all sent and FIN sent; discarding input until the client's FIN */
};

typedef struct worker worker;
typedef struct sl_conn conn;

/* One request's place in its connection's reply order (proto.h). */
struct sl_slot {
    worker *w;
    conn *c;    /* NULL: orphaned, its connection is gone */
    sl_buf buf; /* the reply, unless written straight into the batch */
    int done;
    uint32_t weight; /* bytes its request holds in flight at a backend (on_charge);
                        in the padding after done: a slot stays 80 bytes */
    union {
        int64_t align;
        void *palign;
        unsigned char b[SL_SLOT_DATA];
    } data;        /* the protocol's (sl_slot_data) */
    sl_slot *next; /* the connection's FIFO, or the worker's free pool */
};

struct sl_conn {
    worker *w;
    const sl_proto *proto; /* what it speaks: net->protos[fi] */
    int fd;
    enum conn_state state;
    unsigned reading : 1;     /* rev is added */
    unsigned writing : 1;     /* wev is added (output pending) */
    unsigned paused_turn : 1; /* turn budget spent; resume timer pending */
    unsigned paused_out : 1;  /* too much unsent output; not reading */
    unsigned eof : 1;         /* the client closed its side */
    unsigned oom : 1;         /* a reply could not be stored: drop at flush */
    unsigned recv_armed : 1;  /* recv_ev is added: a command is arriving */
    unsigned tls_ready : 1;   /* TLS: the handshake is done */
    unsigned stop_more : 1;   /* stopping: more input is on its way (stop_step) */
    unsigned fi : 2;          /* its front (NET_FRONTS): the listener it came from */
    unsigned refused : 1;     /* beyond max-clients: not counted, for its protocol to refuse
                                 (proto.refuse_in_band) */
    unsigned paused_wait : 1; /* its requests in flight hold SL_NET_INFLIGHT_MAX: the turn
                                 ended, not read, resumed as they are answered */
    sl_buf *sink;             /* detached (no socket): replies go here */
    size_t discarded;         /* C_LINGER: bytes thrown away */
    size_t acct;              /* held() as last counted in the totals (account) */
    size_t stop_read;         /* stopping: bytes read since the stop */
    struct event *rev, *wev, *resume;
    struct event *recv_ev;             /* the recv-timeout of the command arriving */
    struct event *pdl_ev;              /* the protocol's deadline (sl_conn_deadline), made
                                          at its first use */
    int64_t pdl_ms;                    /* ... its length (ms) */
    int pdl_idle;                      /* ... 1: an idle-timeout, 0: a recv-timeout */
    struct evbuffer *in;               /* an incomplete command, or input beyond a turn */
    struct evbuffer *out;              /* replies the kernel did not take yet (TLS: the
                                          bufferevent's output, which it owns) */
    struct bufferevent *bev;           /* TLS: its bytes go through it; NULL: plain */
    struct evbuffer_cb_entry *out_cb;  /* TLS: on_tls_drained on out */
    struct sockaddr_storage *tls_peer; /* TLS: the client's address, read at accept: a
                                          failed handshake's log names it even once the
                                          client has gone (NULL: unknown) */
    sl_slot *head, *tail;              /* reply slots not yet sent, in request order */
    size_t nslots;                     /* how many */
    size_t nheld;                      /* requests in flight without a slot
                                          (sl_conn_hold): counted as slots */
    size_t slot_bytes;                 /* replies done but waiting behind an earlier slot */
    size_t wait_bytes;                 /* what its requests in flight at a backend hold
                                          (the weights of its slots not done) */
    void *pdata;                       /* the protocol's word (proto.h: sl_conn_pdata) */
    void (*drop)(void *);              /* sl_conn_on_drop's hook (proto.h); NULL: none */
    void *drop_arg;
    struct sl_conn *prev, *next;
    struct sl_conn *dprev, *dnext; /* on w->deferred: replies held for the turn's end */
    int deferred;                  /* ... is on it */
};

struct worker {
    sl_net *net;
    int id;
    pthread_t tid;
    int started;
    struct event_base *base;
    int pipe[2]; /* fds from the acceptor; -1 = stop */
    struct event *pipe_ev;
    struct event *stop_ev; /* the shutdown deadline */
    struct event *exit_ev; /* stopping: re-checks for requests in flight */
    sl_worker_stats *ws;
    sl_svc_ctx svc;            /* this worker's service context (service.h) */
    sl_svc_ctx *svcp;          /* &svc, or a detached connection's context */
    void *scratch[NET_FRONTS]; /* each front's protocol's (proto.h: scratch_size);
                                  NULL for a front without listeners */
    sl_slot *free_slots;       /* reply slots ready for reuse */
    size_t nfree_slots;        /* how many */
    conn *serving;             /* the connection whose input is being run: replies
                                  of its first pending slot go straight to batch */
    size_t serving_out;        /* evbuffer_get_length(serving->out), as it stays
                                  while serving runs (sl__net_serving) */
    sl_turn *turn;             /* serving's budget in this turn */
    _Atomic int nconns;        /* +1 by the acceptor on hand-off, -1 here on close */
    conn *conns;               /* every connection of this worker */
    int stopping;
    int svc_ok; /* svc is initialised */
    /* each front's idle-timeout and recv-timeout (NULL = none): the
     * configured ones, or never unbounded for a protocol that asks
     * (proto.timeout_ms), and idle then no longer than a request may take
     * to arrive */
    const struct timeval *idle_tv[NET_FRONTS], *recv_tv[NET_FRONTS];
    const struct timeval *send_tv, *linger_tv; /* NULL = none */
    const struct timeval *refused_tv;          /* a refused client's (SL_NET_REFUSED_MS) */
    sl_buf batch;                              /* replies of the commands being run */
    int journal;                               /* --journal: replies wait for the turn's one
                                                  journal write (sl__net_end_turn) */
    conn *deferred;                            /* connections whose replies wait for it */
    _Atomic int shed_pending;                  /* a PIPE_SHED token is on its way to this worker */
    size_t orphan_bytes;                       /* what requests of closed connections still hold in
                                                  flight (their slots' weights), counted in the total */
    /* bytes held by this worker's connections holding [2^b, 2^(b+1)) bytes
     * (the last class: more); written by this worker only, read by any */
    _Atomic uint64_t hold[HOLD_CLASSES];
    size_t released;       /* bytes released since the last malloc_trim */
    struct event *trim_ev; /* a malloc_trim put off (SL_NET_TRIM_MS) */
    int64_t cut_log_ms;    /* monotonic ms: the second of cut_log_n */
    int cut_log_n;         /* max-output-total cuts logged in that second */
    uint64_t cut_unlogged; /* ... and not logged one by one since the last line */
    int64_t recv_log_ms;   /* monotonic ms: the last recv-timeout line */
    int recv_log_n;
    int64_t tls_log_ms; /* monotonic ms: the second of tls_log_n */
    int tls_log_n;      /* failed handshakes logged at info in that second */
    char rbuf[SL_NET_READ_CHUNK];
};

struct sl_net {
    sl_srv *srv;
    const sl_config *cfg;
    const sl_proto *protos[NET_FRONTS]; /* what each front's clients speak; NULL: none */
    size_t out_pause;                   /* effective SL_NET_OUT_PAUSE */
    uint64_t out_total_max;             /* max-output-total, effective (sl_config_output_total) */
    _Atomic int64_t last_trim_ms;       /* monotonic ms of the last malloc_trim */
    _Atomic int stopped;
    int nworkers;
    worker **workers;
    unsigned next_worker; /* tie-break rotation; acceptor thread only */

    /* the acceptor */
    pthread_t acc_tid;
    int acc_started;
    struct event_base *acc_base;
    int acc_pipe[2];
    struct event *acc_pipe_ev;
    struct event *backoff_ev;
    int nlisteners;
    int lfds[MAX_LISTENERS];
    int lkind[MAX_LISTENERS]; /* what listener i is: net_listen.c's table */
    struct evconnlistener *lev[MAX_LISTENERS];
    char addrs[MAX_LISTENERS][80];
    int64_t last_reject_log_ms;
    int64_t last_accept_err_log_ms;
    /* refused clients being answered (PIPE_REFUSED): +1 by the acceptor,
     * -1 by their worker on close; at most SL_NET_REFUSED_MAX */
    _Atomic int nrefused;
};

static inline int sl__would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

/* ---- net_conn.c ---- */

/* A connection handed over by the acceptor: fd, with the PIPE_* flags it
 * came with (out of memory: closed, and counted out again). */
void sl__net_conn_new(worker *w, int fd, int flags);
/* Closes c at once and frees it.  `why` names the reason for the debug log. */
void sl__net_conn_free(conn *c, const char *why);
/* Cuts c, a client that does not read its replies: closed with a reset. */
void sl__net_conn_cut(conn *c, const char *why);
/* The client of c, for logs ("?" when unknown; a syscall). */
const char *sl__net_conn_peer(const conn *c, char *buf, size_t cap);
/* ss as "ip:port" ("[ip6]:port"), or NULL. */
const char *sl__net_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap);
/* c's idle-timeout and recv-timeout (NULL: none). */
const struct timeval *sl__net_idle_tv(const conn *c);
const struct timeval *sl__net_recv_tv(const conn *c);
/* The request path's steps the TLS glue shares: see net_conn.c. */
int sl__net_serve(conn *c, const char *fresh, size_t n, int all);
int sl__net_flush(conn *c);
void sl__net_begin_close(conn *c);
int sl__net_finish_close(conn *c);
void sl__net_unpause(conn *c);
void sl__net_recv_deadline(conn *c, int progressed);
int sl__net_after_async(conn *c);
/* Stops c gracefully (the server is stopping): runs what it sent, then
 * closes it after the replies. */
void sl__net_stop_step(conn *c);

/* ---- net_slot.c ---- */

/* The service's charge (service.h): see net_slot.c; arg is the worker. */
void sl__net_on_charge(void *arg, size_t bytes);
/* Detaches c's pending slots (c is closing). */
void sl__net_orphan_slots(conn *c);
/* c's client went (EOF, or c is being freed): its drop hook runs, once
 * (proto.h: sl_conn_on_drop). */
void sl__net_drop(conn *c);
/* Frees w's pool of free slots. */
void sl__net_slot_pool_free(worker *w);

/* ---- net_budget.c ---- */

/* Moves c's count in the totals to `now` bytes (account_as's slow path). */
void sl__net_account_move(conn *c, size_t now);
/* Requests of closed connections still in flight hold d bytes more (or less). */
void sl__net_account_orphans(worker *w, int64_t d);
/* w freed n bytes of buffers: counts them towards a trim. */
void sl__net_release(worker *w, size_t n);
/* The malloc_trim timer's callback (arg: the worker). */
void sl__net_on_trim(evutil_socket_t fd, short what, void *arg);
/* Cuts w's clients while the output of all is over max-output-total;
 * returns 1 if `watch` (may be NULL) was cut. */
int sl__net_shed(worker *w, const conn *watch);

/* ---- net_tls.c ---- */

/* c's bufferevent_openssl, accepting; 0, or -1 (the caller frees what is set). */
int sl__net_tls_start(conn *c);
/* A TLS connection closed before its handshake completed: counted, logged, freed. */
void sl__net_tls_failed(conn *c, const char *why);
/* Before our FIN: TLS's close_notify. */
void sl__net_tls_close_notify(conn *c);
/* Stopping: whether a TLS client has sent more than was decrypted. */
int sl__net_tls_more(conn *c);

/* ---- net.c ---- */

/* A stopping worker with no connection left ends its loop once no request
 * of its is in flight. */
void sl__net_maybe_exit(worker *w);
/* The end of one turn of w's loop (the events one poll returned, all run):
 * with a journal, its records are written in one go (group commit) and
 * then the replies held for it go out (net_conn.c). */
void sl__net_end_turn(worker *w);

/* ---- net_listen.c ---- */

/* Binds every listener srv->cfg asks for (net->protos set), naming the
 * option of a port that fails; writes the ports chosen to srv.  0, or -1
 * with err. */
int sl__net_listen(sl_net *net, char *err, size_t errlen);
/* The acceptor's event base, pipe and listener events (after the
 * workers): 0, or -1 with err. */
int sl__net_acceptor_new(sl_net *net, char *err, size_t errlen);
void *sl__net_acceptor_main(void *arg);

/* ---- inline: on the request path ---- */

/* Output bytes c holds for its client: unsent replies, replies waiting
 * behind an earlier slot, and a slot's own size for each pending one (and
 * each request held without one: sl_conn_hold).  The pause bound
 * (out_pause) is on these. */
static inline size_t sl__net_held_out(const conn *c)
{
    return evbuffer_get_length(c->out) + c->slot_bytes + (c->nslots + c->nheld) * sizeof(sl_slot);
}

/* Everything c holds: its output, and what its requests in flight at a
 * backend hold (wait_bytes).  max-output and max-output-total are on this. */
static inline size_t sl__net_held(const conn *c) { return sl__net_held_out(c) + c->wait_bytes; }

/* Whether c's requests in flight hold as much as a connection may
 * (SL_NET_INFLIGHT_MAX): it runs and reads nothing more until some are
 * answered. */
static inline int sl__net_waiting(const conn *c) { return c->wait_bytes >= SL_NET_INFLIGHT_MAX; }

/* While c is being served: once what it holds, the batch being built for
 * it included, is over its pause bound, or its requests in flight hold
 * SL_NET_INFLIGHT_MAX, the turn runs no further command (its budget is
 * spent: proto.h).  The reply that crossed the bound is kept whole. */
static inline void sl__net_check_bound(conn *c)
{
    worker *w = c->w;
    if (w->serving == c && w->turn != NULL &&
        (w->serving_out + c->slot_bytes + (c->nslots + c->nheld) * sizeof(sl_slot) + w->batch.len >
             w->net->out_pause ||
         w->batch.len > SL_NET_TURN_OUT || sl__net_waiting(c)))
        w->turn->cmds = 0;
}
/* c is (c != NULL) or is no longer (NULL) the connection w serves.  While
 * it is, its replies go to w->batch, never to c->out, so c->out's length
 * is read once here rather than at every bound check (sl__net_held_out's
 * first term, in sl__net_check_bound). */
static inline void sl__net_serving(worker *w, conn *c)
{
    w->serving = c;
    w->serving_out = c != NULL ? evbuffer_get_length(c->out) : 0;
}

/* Counts c in the totals as holding `now` bytes (net_budget.c).  Nothing
 * to do, and nothing done, when the count did not change -- the fast
 * path, where every reply was sent at once, holds 0. */
static inline void sl__net_account_as(conn *c, size_t now)
{
    if (now != c->acct) sl__net_account_move(c, now);
}

static inline void sl__net_account(conn *c) { sl__net_account_as(c, sl__net_held(c)); }

/* Before c is served: a shed asked of this worker runs now, not when its
 * PIPE_SHED token comes round -- a worker serving a batch of ready clients
 * would otherwise build a reply for each of them first, and the total
 * could overshoot max-output-total by a batch of replies instead of one
 * per worker.  One relaxed load when nothing is asked.  Returns 1 if c
 * itself was cut (c is freed). */
static inline int sl__net_shed_due(worker *w, const conn *c)
{
    if (!atomic_load_explicit(&w->shed_pending, memory_order_relaxed)) return 0;
    return sl__net_shed(w, c);
}

#endif
