/*
 * net.c -- listeners, worker threads and client connections (see net.h).
 *
 * Threads.  One acceptor thread runs an event_base with an evconnlistener
 * per address; it checks max-clients, sets TCP_NODELAY and writes the new
 * fd into the pipe of the worker with the fewest connections.  We chose one
 * acceptor over SO_REUSEPORT listeners per worker because (1) a second
 * sluiced started by mistake on the same port would, with SO_REUSEPORT,
 * bind successfully and silently take half the connections (with its own
 * limiter state) instead of failing with "Address already in use";
 * (2) connections go to the least-loaded worker rather than wherever the
 * kernel's 4-tuple hash sends them; (3) stopping means closing one set of
 * sockets, never resetting connections queued on one worker's listener.
 * The cost, a pipe write per connection, is paid once per connection, not
 * per request.  Accepting is not on the main thread so that a long snapshot
 * write there never delays new clients.
 *
 * Workers.  Each owns an event_base, the connections handed to it and a few
 * scratch buffers shared by its connections (a 64 KB read buffer, the reply
 * batch, the parsed command): one client's requests are run start to finish
 * before the next client's, so one set suffices and an idle connection
 * costs no buffer memory at all.  Nothing is shared between workers except
 * the store (locked per shard inside libsluice) and atomic counters.
 *
 * The request path.  On a read event: one read(2) into the worker's read
 * buffer; one clock read; every complete command parsed in place (no copy)
 * and run, its reply appended to the batch; then the whole batch is sent
 * with one send(2).  Only what does not fit in the kernel's socket buffer
 * goes to the connection's output evbuffer (sent on EV_WRITE); only the tail
 * of an incomplete command goes to its input evbuffer.  Commands buffered
 * there are parsed from the first chain directly and, when one straddles
 * chains, only that much more is pulled up (doubling, so a large command
 * costs amortised O(its size)).
 *
 * Limits.  Per loop turn a client gets at most SL_NET_TURN_CMDS commands,
 * SL_NET_TURN_BYTES of input or SL_NET_TURN_OUT of replies built (the
 * reply that crosses it is kept whole); if more is buffered, its reading is paused
 * and a zero timer resumes it after the next poll, so every other ready
 * client runs first (a flood cannot starve anyone).
 *
 * Output is bounded per client and in all.  What a client holds (held():
 * unsent replies, replies done behind an earlier slot, a slot's size per
 * request in flight, and while it is served the batch being built for it)
 * is checked as each reply is made: past out_pause (SL_NET_OUT_PAUSE) the
 * turn runs no further command (the protocol sees its budget spent); if
 * after the send it still holds more than out_pause, the client is paused
 * (paused_out): it is not read and none of the commands it already sent
 * runs until its replies drain -- then the resume timer runs them as a
 * turn of their own.  So a client that pipelines without reading is held
 * by TCP's own flow control at out_pause plus one reply (a reply may be
 * larger than the bound by itself: it is sent, and nothing more runs
 * until it is).  One whose replies exceed max-output after a batch is cut
 * at once; one that accepts none of its pending replies for send-timeout
 * is cut; one that sends nothing for idle-timeout is cut; one whose
 * command, once begun, is not whole within recv-timeout is cut.  A command
 * (or input without a complete one) beyond max-command is a protocol
 * error.
 *
 * Requests in flight at a backend that answers later (Redis) hold more
 * than their slot: their request context, a CHECK's plan, the backend's
 * entry and command.  The service tells what each holds as it submits it
 * (service.h: charge; on_charge here), and it weighs on the request's
 * slot -- the connection's last, pending one -- until the slot is done:
 * counted in held() (max-output, the total below) though not in the pause
 * bound, and once a connection's weigh SL_NET_INFLIGHT_MAX, its turn ends
 * and it is neither read nor run (paused_wait) until some are answered
 * (unpause).  A connection freed with requests in flight leaves their
 * weight in the total as its worker's (orphan_bytes) until each is
 * answered, so closing never frees room its requests still take.
 *
 * The budget of all clients (max-output-total).  Each connection's held()
 * bytes are counted, when they change after a turn or a send (account()),
 * in the server's total (stats.output_bytes, an atomic) and in its
 * worker's size classes (hold[]: bytes held by connections holding
 * [2^b, 2^(b+1)) bytes).  A worker that takes the total over the budget
 * sends every worker a shed token through its pipe; each then cuts its
 * clients of the size classes that, from the largest down, hold the
 * excess across all workers, largest first, until the total is within the
 * budget (shed()).  The fast path -- every reply sent at once -- holds
 * nothing and touches none of it.
 *
 * Memory back to the system.  Buffers are freed as they drain (evbuffer
 * chains; the batch beyond SCRATCH_KEEP; pooled slots beyond SLOT_KEEP
 * and SLOT_POOL_MAX); SL_NET_TRIM_MS after SL_NET_TRIM_BYTES released, malloc_trim
 * returns free pages to the kernel, at most once per SL_NET_TRIM_MS.
 *
 * TLS (--tls-port).  A TLS listener beside each plain one; its
 * connections are served by the same code, with the same protocol, reply
 * slots and limits.  Only their bytes travel differently: through a
 * libevent bufferevent_openssl on the accepted socket (tls.h makes the
 * SSL), which reads and decrypts into its input -- moved as it arrives into
 * c->in, where the usual turn runs it -- and encrypts and writes whatever
 * is appended to its output, which is c->out.  So what waits there counts
 * as the connection's unsent replies, as the plain path's c->out does:
 * the pause, max-output, the total budget (accounted as OpenSSL drains
 * it: on_tls_drained) and send-timeout (the bufferevent's write timeout)
 * all hold; idle-timeout is its read timeout, and recv-timeout also bounds
 * the handshake.  The plain path is untouched: a TLS connection is a
 * non-NULL c->bev, tested where the two differ, with no syscall or
 * allocation added to a plain request.
 *
 * HTTP (--http-port, --https-port).  A second protocol (net->http, given
 * to sl_net_start) on listeners of their own, accepted by the same
 * acceptor: a connection from one is marked (PIPE_HTTP) and served by the
 * same code with that protocol -- the reply slots answer its pipelined
 * requests in order, HTTPS is the TLS path above.  Its timeouts are
 * never unbounded (SL_NET_HTTP_TIMEOUT_MS), and an HTTP client beyond
 * max-clients is not closed at once but served uncounted (PIPE_REFUSED),
 * for the protocol to answer its request with a refusal it can read (503)
 * -- at most SL_NET_REFUSED_MAX such at once (net->nrefused), each for at
 * most SL_NET_REFUSED_MS; beyond, it is closed at accept.  So the count
 * of connections is one for every front (srv->clients: RESP, TLS, HTTP,
 * HTTPS, gRPC), and what is held beyond it is bounded too: the refused
 * cannot take the descriptors the counted ones were promised.
 * Stopping, a connection whose request is under way is read until that
 * request is whole (the protocol answers it with Connection: close).
 *
 * Closing.  QUIT, protocol errors, end of input and shutdown all close the
 * same way: stop reading, send what is pending, then close -- but if the
 * client still has bytes in flight to us, first shutdown(SHUT_WR) and read
 * and discard until its FIN (at most SL_NET_LINGER_MS), because closing a
 * socket with unread input makes the kernel send a reset that can destroy
 * replies the client has not read yet.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "config.h"
#include "log.h"
#include "net.h"
#include "proto.h"
#include "tls.h"
#include "util.h"

#define MAX_LISTENERS    16
#define BACKLOG          511
#define SCRATCH_KEEP     (1024 * 1024)      /* reply-batch capacity kept between batches */
#define LINGER_MAX_BYTES (64 * 1024 * 1024) /* time (SL_NET_LINGER_MS) is the real bound */
#define SLOT_KEEP        (16 * 1024)        /* a pooled slot keeps at most this much buffer */
#define SLOT_POOL_MAX    1024               /* free slots a worker keeps for reuse */
#define HOLD_CLASSES     48                 /* size classes of held output: 2^0 .. 2^47+ bytes */
#define SHED_LOG_PER_S   10 /* cut clients logged one by one per second per worker */
#define RECV_LOG_PER_S   1  /* recv-timeout cuts logged at info per second per worker */
#define TLS_LOG_PER_S    1  /* failed TLS handshakes logged at info per second per worker */

/* What the acceptor (and shed_request) write into a worker's pipe besides fds. */
#define PIPE_STOP    -1        /* stop gracefully; always the last */
#define PIPE_SHED    -2        /* the output of all clients is over max-output-total */
#define PIPE_TLS     (1 << 30) /* or'ed into an fd: it came from a TLS listener */
#define PIPE_HTTP    (1 << 29) /* ... from an HTTP listener (--http-port, --https-port) */
#define PIPE_REFUSED (1 << 28) /* ... beyond max-clients: HTTP answers it 503, uncounted */
#define PIPE_GRPC    (1 << 27) /* ... from a gRPC listener (--grpc-port): speaks srv->grpc */
#define PIPE_FLAGS   (PIPE_TLS | PIPE_HTTP | PIPE_REFUSED | PIPE_GRPC)

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
    const sl_proto *proto; /* what it speaks: the net's proto, HTTP, or gRPC */
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
    unsigned http : 1;        /* from an HTTP listener: speaks net->http */
    unsigned refused : 1;     /* beyond max-clients (HTTP): not counted, answered 503 */
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
    struct sl_conn *prev, *next;
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
    sl_svc_ctx svc;      /* this worker's service context (service.h) */
    sl_svc_ctx *svcp;    /* &svc, or a detached connection's context */
    void *scratch;       /* the protocol's (proto.h: scratch_size) */
    void *hscratch;      /* HTTP's */
    sl_slot *free_slots; /* reply slots ready for reuse */
    size_t nfree_slots;  /* how many */
    conn *serving;       /* the connection whose input is being run: replies
                            of its first pending slot go straight to batch */
    sl_turn *turn;       /* serving's budget in this turn */
    _Atomic int nconns;  /* +1 by the acceptor on hand-off, -1 here on close */
    conn *conns;         /* every connection of this worker */
    int stopping;
    int svc_ok;                                                    /* svc is initialised */
    const struct timeval *idle_tv, *send_tv, *linger_tv, *recv_tv; /* NULL = none */
    /* HTTP connections' idle-timeout and recv-timeout: never unbounded
     * (http.h: SL_HTTP_TIMEOUT_MS), and idle no longer than a request may
     * take to arrive */
    const struct timeval *hidle_tv, *hrecv_tv;
    const struct timeval *refused_tv; /* a refused HTTP client's (SL_NET_REFUSED_MS) */
    sl_buf batch;             /* replies of the commands being run */
    _Atomic int shed_pending; /* a PIPE_SHED token is on its way to this worker */
    size_t orphan_bytes;      /* what requests of closed connections still hold in
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
    const sl_proto *proto;        /* what the clients speak */
    const sl_proto *http;         /* what the HTTP listeners' clients speak; NULL: none */
    size_t out_pause;             /* effective SL_NET_OUT_PAUSE */
    uint64_t out_total_max;       /* max-output-total, effective (sl_config_output_total) */
    _Atomic int64_t last_trim_ms; /* monotonic ms of the last malloc_trim */
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
    int ltls[MAX_LISTENERS];   /* 1: a TLS listener */
    int lhttp[MAX_LISTENERS];  /* 1: an HTTP listener */
    int lhttps[MAX_LISTENERS]; /* 1: and it is HTTPS (ltls too) */
    int lgrpc[MAX_LISTENERS];  /* 1: a gRPC listener (--grpc-port): srv->grpc */
    struct evconnlistener *lev[MAX_LISTENERS];
    char addrs[MAX_LISTENERS][80];
    int64_t last_reject_log_ms;
    int64_t last_accept_err_log_ms;
    /* refused HTTP clients being answered (PIPE_REFUSED): +1 by the
     * acceptor, -1 by their worker on close; at most SL_NET_REFUSED_MAX */
    _Atomic int nrefused;
};

int64_t sl_now_ms(void) { return sl__clock_ms(); }

static int would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

/* ss as "ip:port" ("[ip6]:port", as Redis writes addresses) in buf; NULL
 * if it is neither IPv4 nor IPv6 or does not fit. */
static const char *format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char host[INET6_ADDRSTRLEN];
    int n = -1;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        if (inet_ntop(AF_INET, &a->sin_addr, host, sizeof host))
            n = snprintf(buf, cap, "%s:%u", host, ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        if (inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host))
            n = snprintf(buf, cap, "[%s]:%u", host, ntohs(a->sin6_port));
    }
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* One end of socket fd, as format_sockaddr writes it: the peer's, or with
 * local our own; NULL if it cannot be read.  A syscall: for logs and rare
 * commands. */
static const char *sock_addr(int fd, int local, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd < 0 || (local ? getsockname(fd, (struct sockaddr *)&ss, &sl)
                         : getpeername(fd, (struct sockaddr *)&ss, &sl)) != 0)
        return NULL;
    return format_sockaddr(&ss, buf, cap);
}

/* The client's address for debug logs (a syscall: only when logging). */
static const char *peer(int fd, char *buf, size_t cap)
{
    const char *a = sock_addr(fd, 0, buf, cap);
    return a ? a : "?";
}

/* The client of c, for logs: the address a TLS connection kept at
 * accept, else read now (a syscall: only when logging). */
static const char *conn_peer(const struct sl_conn *c, char *buf, size_t cap)
{
    if (c->tls_peer == NULL) return peer(c->fd, buf, cap);
    const char *a = format_sockaddr(c->tls_peer, buf, cap);
    return a ? a : "?";
}

/* ---- connections ----------------------------------------------------- */

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void on_resume(evutil_socket_t fd, short what, void *arg);
static void on_recv_deadline(evutil_socket_t fd, short what, void *arg);
static void on_tls_read(struct bufferevent *bev, void *arg);
static void on_tls_write(struct bufferevent *bev, void *arg);
static void on_tls_event(struct bufferevent *bev, short what, void *arg);
static void on_tls_drained(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg);
static void tls_failed(conn *c, const char *why);
static int after_async(conn *c);
static void maybe_exit(worker *w);
static void stop_step(conn *c);
static void conn_free(conn *c, const char *why);
static void conn_cut(conn *c, const char *why);

/* c's idle-timeout and recv-timeout (NULL: none). */
static const struct timeval *idle_tv(const conn *c)
{
    return c->refused ? c->w->refused_tv : c->http ? c->w->hidle_tv : c->w->idle_tv;
}
static const struct timeval *recv_tv(const conn *c)
{
    return c->refused ? c->w->refused_tv : c->http ? c->w->hrecv_tv : c->w->recv_tv;
}

/* Output bytes c holds for its client: unsent replies, replies waiting
 * behind an earlier slot, and a slot's own size for each pending one (and
 * each request held without one: sl_conn_hold).  The pause bound
 * (out_pause) is on these. */
static size_t held_out(const conn *c)
{
    return evbuffer_get_length(c->out) + c->slot_bytes + (c->nslots + c->nheld) * sizeof(sl_slot);
}

/* Everything c holds: its output, and what its requests in flight at a
 * backend hold (wait_bytes).  max-output and max-output-total are on this. */
static size_t held(const conn *c) { return held_out(c) + c->wait_bytes; }

/* Whether c's requests in flight hold as much as a connection may
 * (SL_NET_INFLIGHT_MAX): it runs and reads nothing more until some are
 * answered. */
static int waiting(const conn *c) { return c->wait_bytes >= SL_NET_INFLIGHT_MAX; }

/* While c is being served: once what it holds, the batch being built for
 * it included, is over its pause bound, or its requests in flight hold
 * SL_NET_INFLIGHT_MAX, the turn runs no further command (its budget is
 * spent: proto.h).  The reply that crossed the bound is kept whole. */
static void check_bound(conn *c)
{
    worker *w = c->w;
    if (w->serving == c && w->turn != NULL &&
        (held_out(c) + w->batch.len > w->net->out_pause || w->batch.len > SL_NET_TURN_OUT ||
         waiting(c)))
        w->turn->cmds = 0;
}

static void account_orphans(worker *w, int64_t d);

/* The service's charge (service.h): a request of the connection being
 * served went to a backend that answers later, holding `bytes` until it
 * does; they weigh on its slot -- the last opened, still pending: the
 * protocol opens a request's slot, then submits it -- until it is done.
 * A request without a pending slot (sl_conn_hold's) is not weighed. */
static void on_charge(void *arg, size_t bytes)
{
    worker *w = arg;
    conn *c = w->serving;
    if (c == NULL || c->tail == NULL || c->tail->done || bytes > UINT32_MAX - c->tail->weight)
        return;
    c->tail->weight += (uint32_t)bytes;
    c->wait_bytes += bytes;
    check_bound(c);
}

/* Slot s is answered: its request's weight leaves its connection (or,
 * orphaned, the worker's orphans). */
static void unweigh(sl_slot *s)
{
    if (s->weight == 0) return;
    if (s->c != NULL)
        s->c->wait_bytes -= s->weight;
    else
        account_orphans(s->w, -(int64_t)s->weight);
    s->weight = 0;
}

/* ---- reply slots (proto.h) ------------------------------------------- */

static void slot_free(sl_slot *s)
{
    worker *w = s->w;
    if (w->nfree_slots >= SLOT_POOL_MAX) { /* the pool is full: back to malloc */
        free(s->buf.p);
        free(s);
        return;
    }
    s->buf.len = 0;
    if (s->buf.cap > SLOT_KEEP) {
        free(s->buf.p);
        s->buf.p = NULL;
        s->buf.cap = 0;
    }
    s->next = w->free_slots;
    w->free_slots = s;
    w->nfree_slots++;
}

sl_slot *sl_conn_slot(conn *c)
{
    worker *w = c->w;
    sl_slot *s = w->free_slots;
    if (s != NULL) {
        w->free_slots = s->next;
        w->nfree_slots--;
    } else if ((s = calloc(1, sizeof *s)) == NULL) {
        return NULL;
    }
    s->w = w;
    s->c = c;
    s->done = 0;
    s->weight = 0;
    memset(&s->data, 0, sizeof s->data);
    s->next = NULL;
    if (c->tail)
        c->tail->next = s;
    else
        c->head = s;
    c->tail = s;
    c->nslots++;
    check_bound(c); /* a request in flight holds its slot */
    return s;
}

sl_buf *sl_slot_buf(sl_slot *s)
{
    conn *c = s->c;
    /* the first pending reply of the connection being served: straight
     * into the batch that goes out at the end of this turn */
    if (c != NULL && c->head == s) {
        if (c->sink != NULL) return c->sink;
        if (c->w->serving == c) return &c->w->batch;
    }
    return &s->buf;
}

void sl_slot_done(sl_slot *s)
{
    conn *c = s->c;
    s->done = 1;
    unweigh(s);
    if (c == NULL) { /* orphaned: the connection is gone */
        slot_free(s);
        return;
    }
    if (s != c->head) { /* waits for an earlier reply */
        c->slot_bytes += s->buf.len;
        check_bound(c);
        return;
    }
    worker *w = c->w;
    int serving = w->serving == c || c->sink != NULL; /* replies go to a buffer */
    sl_buf *dst = c->sink ? c->sink : &w->batch;
    int rc = 0;
    while (c->head != NULL && c->head->done) {
        sl_slot *h = c->head;
        c->head = h->next;
        if (c->head == NULL) c->tail = NULL;
        c->nslots--;
        if (h != s) c->slot_bytes -= h->buf.len;
        if (h->buf.len > 0 && rc == 0)
            rc = serving ? sl_buf_add(dst, h->buf.p, h->buf.len)
                         : evbuffer_add(c->out, h->buf.p, h->buf.len);
        slot_free(h);
    }
    if (rc != 0) c->oom = 1; /* a reply is lost: flush drops the connection */
    if (!serving)
        after_async(c);
    else
        check_bound(c);
}

void sl_conn_hold(conn *c)
{
    c->nheld++;
    check_bound(c);
}

void sl_conn_release(conn *c)
{
    c->nheld--;
    if (c->w->serving == c || c->sink != NULL)
        check_bound(c);
    else
        after_async(c); /* may close c: its last request was answered */
}

void *sl_slot_data(sl_slot *s) { return s->data.b; }
sl_svc_ctx *sl_conn_svc(conn *c) { return c->w->svcp; }
sl_svc_ctx *sl_slot_svc(sl_slot *s) { return s->w->svcp; }
void *sl_conn_scratch(conn *c) { return c->http ? c->w->hscratch : c->w->scratch; }
int sl_conn_stopping(const conn *c) { return c->w->stopping; }
int sl_conn_refused(const conn *c) { return c->refused; }
const sl_config *sl_conn_cfg(const conn *c) { return c->w->net->cfg; }
void *sl_conn_pdata(const conn *c) { return c->pdata; }
void sl_conn_set_pdata(conn *c, void *p) { c->pdata = p; }

const char *sl_conn_peer_host(const conn *c, char *buf, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (c->fd < 0 || cap == 0 || getpeername(c->fd, (struct sockaddr *)&ss, &sl) != 0) return NULL;
    const void *a = NULL;
    if (ss.ss_family == AF_INET) a = &((struct sockaddr_in *)&ss)->sin_addr;
    if (ss.ss_family == AF_INET6) a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
    return a != NULL && inet_ntop(ss.ss_family, a, buf, (socklen_t)cap) != NULL ? buf : NULL;
}

const char *sl_conn_addr(const conn *c, int local, char *buf, size_t cap)
{
    return sock_addr(c->fd, local, buf, cap);
}

int sl_conn_fd(const conn *c) { return c->fd; }

/* Detaches c's pending slots: the done ones are freed, the ones still in
 * flight are left to their backend's completion, which frees them. */
static void orphan_slots(conn *c)
{
    sl_slot *s = c->head, *next;
    size_t weight = 0;
    for (; s != NULL; s = next) {
        next = s->next;
        s->c = NULL;
        weight += s->weight;
        if (s->done) slot_free(s);
    }
    c->head = c->tail = NULL;
    c->nslots = 0;
    c->slot_bytes = 0;
    c->wait_bytes = 0;
    /* still held until answered: counted in the total, as the worker's */
    if (weight > 0 && c->sink == NULL) account_orphans(c->w, (int64_t)weight);
}

/* ---- the output budget, memory back to the system -------------------- */

static int hold_class(size_t n)
{
    int b = 63 - __builtin_clzll((unsigned long long)n);
    return b < HOLD_CLASSES ? b : HOLD_CLASSES - 1;
}

/* Moves a connection's count in w's size classes from `from` bytes to `to`. */
static void hold_move(worker *w, size_t from, size_t to)
{
    if (from > 0) {
        _Atomic uint64_t *h = &w->hold[hold_class(from)];
        atomic_store_explicit(h, atomic_load_explicit(h, memory_order_relaxed) - from,
                              memory_order_relaxed);
    }
    if (to > 0) sl_stat_inc(&w->hold[hold_class(to)], to);
}

static void trim_later(worker *w, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(w->trim_ev, &tv);
}

/* Memory back to the system: SL_NET_TRIM_MS after w released
 * SL_NET_TRIM_BYTES of buffers (whatever it releases meanwhile rides
 * along), malloc_trim, but never twice within SL_NET_TRIM_MS in the process
 * (it walks every arena, taking each one's lock): too soon, it is put off
 * to the end of the interval.  glibc's malloc_trim returns the free pages
 * of every arena, those inside the heaps included; elsewhere there is
 * none, and the allocator does what it does. */
static void on_trim(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    worker *w = arg;
    sl_net *net = w->net;
    int64_t now = sl__mono_ms();
    int64_t last = atomic_load_explicit(&net->last_trim_ms, memory_order_relaxed);
    if (now - last < SL_NET_TRIM_MS ||
        !atomic_compare_exchange_strong(&net->last_trim_ms, &last, now)) {
        int64_t wait = SL_NET_TRIM_MS - (now - last);
        trim_later(w, wait < 1 || wait > SL_NET_TRIM_MS ? SL_NET_TRIM_MS : wait);
        return;
    }
    w->released = 0;
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* w freed n bytes of buffers: counts them towards a trim (on_trim). */
static void release(worker *w, size_t n)
{
    w->released += n;
    if (w->released >= SL_NET_TRIM_BYTES && w->trim_ev != NULL &&
        !evtimer_pending(w->trim_ev, NULL))
        trim_later(w, SL_NET_TRIM_MS);
}

/* Asks every worker to shed: one PIPE_SHED token each, not sent again
 * until that worker has run shed(). */
static void shed_request(sl_net *net)
{
    for (int i = 0; i < net->nworkers; i++) {
        worker *w = net->workers[i];
        if (atomic_exchange(&w->shed_pending, 1)) continue;
        int v = PIPE_SHED;
        if (write(w->pipe[1], &v, sizeof v) != (ssize_t)sizeof v) /* full: ask again later */
            atomic_store(&w->shed_pending, 0);
    }
}

/* Counts c in the totals as holding `now` bytes: the server's total
 * (stats.output_bytes) and its worker's size classes.  Taking the total
 * over max-output-total asks the workers to shed; a release may trim.
 * Nothing to do, and nothing done, when the count did not change -- the
 * fast path, where every reply was sent at once, holds 0. */
static void account_as(conn *c, size_t now)
{
    if (now == c->acct) return;
    worker *w = c->w;
    sl_net *net = w->net;
    hold_move(w, c->acct, now);
    int64_t d = (int64_t)now - (int64_t)c->acct;
    c->acct = now;
    int64_t total =
        atomic_fetch_add_explicit(&net->srv->stats.output_bytes, d, memory_order_relaxed) + d;
    if (d < 0)
        release(w, (size_t)-d);
    else if ((uint64_t)total > net->out_total_max)
        shed_request(net);
}

static void account(conn *c) { account_as(c, held(c)); }

/* Requests of closed connections still in flight hold d bytes more (or
 * less): counted in the total as the worker's own, so closing
 * connections never frees room that their requests still take; no
 * connection is cut for them -- they end by their backend's answer or
 * timeout. */
static void account_orphans(worker *w, int64_t d)
{
    w->orphan_bytes = (size_t)((int64_t)w->orphan_bytes + d);
    atomic_fetch_add_explicit(&w->net->srv->stats.output_bytes, d, memory_order_relaxed);
    if (d < 0) release(w, (size_t)-d);
}

/* The floor of the size classes to cut: the largest 2^b such that the
 * connections of all workers holding 2^b bytes or more hold `excess` in
 * all (1 if even all of them hold less). */
static size_t shed_floor(const sl_net *net, uint64_t excess)
{
    uint64_t sum = 0;
    for (int b = HOLD_CLASSES - 1; b > 0; b--) {
        for (int i = 0; i < net->nworkers; i++)
            sum += atomic_load_explicit(&net->workers[i]->hold[b], memory_order_relaxed);
        if (sum >= excess) return (size_t)1 << b;
    }
    return 1;
}

/* A warn line per client cut over max-output-total, at most
 * SHED_LOG_PER_S a second per worker; `unlogged` counts those cut since
 * the last line without one of their own. */
static void log_cut(worker *w, conn *c, int64_t total)
{
    int64_t now = sl__mono_ms();
    if (now - w->cut_log_ms >= 1000) {
        w->cut_log_ms = now;
        w->cut_log_n = 0;
    }
    if (w->cut_log_n >= SHED_LOG_PER_S) {
        w->cut_unlogged++;
        return;
    }
    w->cut_log_n++;
    char pb[80];
    sl_log(SL_LOG_WARN, "max-output-total reached: cutting the client holding the most output",
           "client=%s worker=%d held=%zu output_total=%lld max_output_total=%llu unlogged=%llu",
           conn_peer(c, pb, sizeof pb), w->id, c->acct, (long long)total,
           (unsigned long long)w->net->out_total_max, (unsigned long long)w->cut_unlogged);
    w->cut_unlogged = 0;
}

/* A PIPE_SHED token, or a shed request seen before serving a client
 * (shed_due): while the output of all clients is over max-output-total,
 * cuts this worker's clients in the size classes that hold the excess
 * (shed_floor), the one holding the most first.  Every worker does the
 * same, each re-reading the total, so together they cut the largest
 * holders across the server, to within a size class, and stop as soon as
 * the total is back within the budget.  O(clients) per cut; runs only
 * over the budget.  Returns 1 if `watch` (may be NULL) was cut. */
static int shed(worker *w, const conn *watch)
{
    sl_net *net = w->net;
    _Atomic int64_t *total = &net->srv->stats.output_bytes;
    int watch_cut = 0;
    atomic_store(&w->shed_pending, 0);
    int64_t t = atomic_load_explicit(total, memory_order_relaxed);
    if (t <= (int64_t)net->out_total_max) return 0;
    size_t floor = shed_floor(net, (uint64_t)t - net->out_total_max);
    while ((t = atomic_load_explicit(total, memory_order_relaxed)) > (int64_t)net->out_total_max) {
        conn *big = NULL;
        for (conn *c = w->conns; c != NULL; c = c->next)
            if (c->acct >= floor && (big == NULL || c->acct > big->acct)) big = c;
        if (big == NULL) break;
        log_cut(w, big, t);
        atomic_fetch_add_explicit(&net->srv->stats.cut_output_total, 1, memory_order_relaxed);
        watch_cut |= big == watch;
        conn_cut(big, "max-output-total");
    }
    return watch_cut;
}

/* Before c is served: a shed asked of this worker runs now, not when its
 * PIPE_SHED token comes round -- a worker serving a batch of ready clients
 * would otherwise build a reply for each of them first, and the total
 * could overshoot max-output-total by a batch of replies instead of one
 * per worker.  One relaxed load when nothing is asked.  Returns 1 if c
 * itself was cut (c is freed). */
static int shed_due(worker *w, const conn *c)
{
    if (!atomic_load_explicit(&w->shed_pending, memory_order_relaxed)) return 0;
    return shed(w, c);
}

/* ---- detached connections (net.h) ------------------------------------ */

sl_conn *sl_conn_detached_new(const sl_proto *proto, sl_svc_ctx *x, const sl_config *cfg,
                              sl_buf *sink)
{
    sl_net *net = calloc(1, sizeof *net);
    worker *w = calloc(1, sizeof *w);
    conn *c = calloc(1, sizeof *c);
    void *scratch = calloc(1, proto->scratch_size ? proto->scratch_size : 1);
    if (net == NULL || w == NULL || c == NULL || scratch == NULL) {
        free(net), free(w), free(c), free(scratch);
        return NULL;
    }
    net->cfg = cfg;
    net->proto = proto;
    w->net = net;
    w->svcp = x;
    w->ws = x->st;
    w->scratch = scratch;
    c->w = w;
    c->proto = proto;
    c->fd = -1;
    c->sink = sink;
    return c;
}

int sl_conn_detached_feed(sl_conn *c, const char *p, size_t len, int64_t now, size_t *used)
{
    sl_turn t = {SIZE_MAX, SIZE_MAX};
    return c->proto->run(c, p, len, now, &t, used);
}

void sl_conn_detached_free(sl_conn *c)
{
    if (c == NULL) return;
    worker *w = c->w;
    orphan_slots(c);
    while (w->free_slots != NULL) {
        sl_slot *s = w->free_slots;
        w->free_slots = s->next;
        free(s->buf.p);
        free(s);
    }
    w->nfree_slots = 0;
    if (c->proto->closed) c->proto->closed(c->pdata);
    free(w->scratch);
    free(w->net);
    free(w);
    free(c);
}

/* Closes c at once and frees it.  `why` names the reason for the debug log. */
static void conn_free(conn *c, const char *why)
{
    worker *w = c->w;
    sl_srv *srv = w->net->srv;
    if (sl_log_enabled(SL_LOG_DEBUG)) {
        char pb[80];
        sl_log(SL_LOG_DEBUG, "client closed", "client=%s worker=%d reason=%s",
               conn_peer(c, pb, sizeof pb), w->id, sl_logq(why));
    }
    orphan_slots(c);
    size_t in = evbuffer_get_length(c->in);
    account_as(c, 0);
    if (c->bev != NULL) {
        evbuffer_remove_cb_entry(c->out, c->out_cb);
        /* frees the SSL and closes the socket (BEV_OPT_CLOSE_ON_FREE), at
         * once or when the loop next runs if it is inside its callbacks */
        bufferevent_free(c->bev);
    } else {
        event_free(c->rev);
        event_free(c->wev);
        evbuffer_free(c->out);
        close(c->fd);
    }
    event_free(c->resume);
    event_free(c->recv_ev);
    if (c->pdl_ev != NULL) event_free(c->pdl_ev);
    evbuffer_free(c->in);
    free(c->tls_peer);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->proto->closed) c->proto->closed(c->pdata);
    int counted = !c->refused, http = c->http, grpc = c->proto == srv->grpc;
    free(c);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    if (counted)
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(&w->net->nrefused, 1, memory_order_relaxed);
    if (counted && http)
        atomic_fetch_sub_explicit(&srv->stats.http_clients, 1, memory_order_relaxed);
    else if (counted && grpc)
        atomic_fetch_sub_explicit(&srv->stats.grpc_clients, 1, memory_order_relaxed);
    if (in > 0) release(w, in);
    if (w->stopping && w->conns == NULL) maybe_exit(w);
}

/* Cuts c, a client that does not read its replies: closed with a reset
 * (SO_LINGER 0), so that the kernel drops the replies queued for it at
 * once rather than keep them, and the socket, for as long as the client
 * keeps its window shut. */
static void conn_cut(conn *c, const char *why)
{
    struct linger lg = {1, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    conn_free(c, why);
}

/* A TLS connection on fd: its bufferevent_openssl, accepting.  Reading
 * takes at most SL_NET_READ_CHUNK ahead of what the turn consumed, the
 * bufferevent's timeouts are idle-timeout (reading) and send-timeout
 * (writing, while replies wait), and the handshake must be done within
 * recv-timeout: it is the client's first message, and one sent a byte at a
 * time must not hold a connection slot (idle-timeout restarts with every
 * byte).  Returns 0, or -1 (the caller frees what is set). */
static int tls_start(conn *c)
{
    worker *w = c->w;
    socklen_t sl = sizeof *c->tls_peer;
    if ((c->tls_peer = calloc(1, sizeof *c->tls_peer)) == NULL) return -1;
    if (getpeername(c->fd, (struct sockaddr *)c->tls_peer, &sl) != 0) {
        free(c->tls_peer);
        c->tls_peer = NULL;
    }
    SSL *ssl = sl_tls_ssl_new(w->net->srv->tls, c->proto == w->net->srv->grpc);
    if (ssl == NULL) return -1;
    /* on failure it frees ssl (BEV_OPT_CLOSE_ON_FREE) but leaves the fd */
    c->bev = bufferevent_openssl_socket_new(w->base, c->fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                            BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) return -1;
    c->out = bufferevent_get_output(c->bev);
    /* a client that closes without TLS's close_notify has simply left */
    bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    bufferevent_setcb(c->bev, on_tls_read, on_tls_write, on_tls_event, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, SL_NET_READ_CHUNK);
    bufferevent_set_timeouts(c->bev, idle_tv(c), w->send_tv);
    c->out_cb = evbuffer_add_cb(c->out, on_tls_drained, c);
    if (c->out_cb == NULL || bufferevent_enable(c->bev, EV_READ) != 0) return -1;
    if (recv_tv(c) != NULL) {
        event_add(c->recv_ev, recv_tv(c));
        c->recv_armed = 1;
    }
    return 0;
}

/* A connection handed over by the acceptor: fd, with the PIPE_* flags it
 * came with. */
static void conn_new(worker *w, int fd, int flags)
{
    sl_srv *srv = w->net->srv;
    conn *c = calloc(1, sizeof *c);
    int ok = 0, tls = (flags & PIPE_TLS) != 0;
    if (c != NULL) {
        c->w = w;
        c->fd = fd;
        c->http = (flags & PIPE_HTTP) != 0;
        c->refused = (flags & PIPE_REFUSED) != 0;
        c->proto = c->http                ? w->net->http
                   : (flags & PIPE_GRPC) ? srv->grpc
                                         : w->net->proto;
        c->in = evbuffer_new();
        c->resume = evtimer_new(w->base, on_resume, c);
        c->recv_ev = evtimer_new(w->base, on_recv_deadline, c);
        if (c->in && c->resume && c->recv_ev) {
            if (tls) {
                ok = tls_start(c) == 0;
            } else {
                c->out = evbuffer_new();
                c->rev = event_new(w->base, fd, EV_READ | EV_PERSIST, on_read, c);
                c->wev = event_new(w->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
                ok = c->out && c->rev && c->wev && event_add(c->rev, idle_tv(c)) == 0;
            }
        }
    }
    if (!ok) {
        sl_log(SL_LOG_ERROR, "cannot serve a client: out of memory", "worker=%d", w->id);
        if (c != NULL) {
            if (c->rev) event_free(c->rev);
            if (c->wev) event_free(c->wev);
            if (c->resume) event_free(c->resume);
            if (c->recv_ev) event_free(c->recv_ev);
            if (c->in) evbuffer_free(c->in);
            free(c->tls_peer);
            if (c->bev) {
                if (c->out_cb) evbuffer_remove_cb_entry(c->out, c->out_cb);
                bufferevent_free(c->bev); /* closes fd */
                fd = -1;
            } else if (c->out) {
                evbuffer_free(c->out);
            }
            free(c);
        }
        if (fd >= 0) close(fd);
        atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
        if (!(flags & PIPE_REFUSED))
            atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        else
            atomic_fetch_sub_explicit(&w->net->nrefused, 1, memory_order_relaxed);
        return;
    }
    if (c->http && !c->refused)
        atomic_fetch_add_explicit(&srv->stats.http_clients, 1, memory_order_relaxed);
    else if (c->proto == srv->grpc && !c->refused)
        atomic_fetch_add_explicit(&srv->stats.grpc_clients, 1, memory_order_relaxed);
    c->reading = 1;
    c->next = w->conns;
    if (w->conns) w->conns->prev = c;
    w->conns = c;
    if (sl_log_enabled(SL_LOG_DEBUG)) {
        char pb[80];
        sl_log(SL_LOG_DEBUG, "client connected",
               tls ? "client=%s worker=%d tls=yes" : "client=%s worker=%d", peer(fd, pb, sizeof pb),
               w->id);
    }
}

/* Reads c iff it is open and not paused. */
static void update_reading(conn *c)
{
    if (c->state != C_OPEN) return;
    int want = !c->paused_turn && !c->paused_out && !c->paused_wait &&
               c->nslots + c->nheld < SL_NET_MAX_SLOTS &&
               (!c->w->stopping || c->stop_more); /* stopping: stop_step reads what is left */
    if (want && !c->reading) {
        if (c->bev != NULL)
            bufferevent_enable(c->bev, EV_READ);
        else
            event_add(c->rev, idle_tv(c));
    } else if (!want && c->reading) {
        if (c->bev != NULL)
            bufferevent_disable(c->bev, EV_READ);
        else
            event_del(c->rev);
    }
    c->reading = (unsigned)want;
}

/* Stops running commands for c: what is pending is still sent, then c is
 * closed (by flush). */
static void begin_close(conn *c)
{
    if (c->state != C_OPEN) return;
    c->state = C_CLOSING;
    if (c->reading) {
        if (c->bev != NULL)
            bufferevent_disable(c->bev, EV_READ);
        else
            event_del(c->rev);
    }
    c->reading = 0;
    event_del(c->resume);
    c->paused_turn = 0;
    if (c->recv_armed) event_del(c->recv_ev);
    c->recv_armed = 0;
    evbuffer_drain(c->in, evbuffer_get_length(c->in));
}

/* Everything is sent: close, lingering first if the client is still
 * sending (see the top of the file).  Returns -1 (c freed) or 0. */
static int finish_close(conn *c)
{
    int unread = 0;
    if (c->bev != NULL && c->tls_ready && !c->eof) {
        /* TLS's close_notify before our FIN, so the client knows the
         * replies are complete (written at once: nothing waits in out) */
        SSL_shutdown(bufferevent_openssl_get_ssl(c->bev));
        ERR_clear_error();
    }
    if (c->eof || ioctl(c->fd, FIONREAD, &unread) != 0 || unread == 0) {
        conn_free(c, c->eof ? "client closed" : "closed after replies");
        return -1;
    }
    shutdown(c->fd, SHUT_WR);
    c->state = C_LINGER;
    if (c->bev != NULL) {
        bufferevent_set_timeouts(c->bev, c->w->linger_tv, NULL);
        bufferevent_enable(c->bev, EV_READ);
    } else {
        if (c->writing) event_del(c->wev);
        event_add(c->rev, c->w->linger_tv);
    }
    c->writing = 0;
    c->reading = 1;
    return 0;
}

/* Sends the worker's reply batch for c: straight to the socket when
 * nothing is queued before it, the rest into c->out.  Then applies the
 * output limits.  Returns 0, or -1 when c was freed. */
static int flush(conn *c)
{
    worker *w = c->w;
    sl_net *net = w->net;
    sl_buf *b = &w->batch;
    if (c->oom) {
        b->len = 0;
        conn_free(c, "out of memory");
        return -1;
    }
    if (b->len > 0) {
        size_t off = 0;
        if (c->bev == NULL && evbuffer_get_length(c->out) == 0) {
            ssize_t n = send(c->fd, b->p, b->len, MSG_NOSIGNAL);
            if (n < 0) {
                if (!would_block(errno)) {
                    b->len = 0;
                    conn_free(c, "write error");
                    return -1;
                }
                n = 0;
            }
            off = (size_t)n;
            sl_stat_inc(&w->ws->net_out, (uint64_t)n);
        }
        int rc = off < b->len ? evbuffer_add(c->out, b->p + off, b->len - off) : 0;
        b->len = 0;
        if (b->cap > SCRATCH_KEEP) {
            release(w, b->cap);
            free(b->p);
            b->p = NULL;
            b->cap = 0;
        }
        if (rc != 0) {
            conn_free(c, "out of memory");
            return -1;
        }
    }
    size_t pending = held(c);
    if (pending > net->cfg->max_output) {
        atomic_fetch_add_explicit(&net->srv->cut_output, 1, memory_order_relaxed);
        conn_cut(c, "max-output");
        return -1;
    }
    account_as(c, pending);
    if (pending == 0) return c->state == C_CLOSING ? finish_close(c) : 0;
    if (!c->writing && evbuffer_get_length(c->out) > 0) {
        if (c->bev == NULL) event_add(c->wev, w->send_tv); /* TLS: the bufferevent writes */
        c->writing = 1;
    }
    if (held_out(c) > net->out_pause && !c->paused_out) {
        c->paused_out = 1;
        update_reading(c);
    }
    return 0;
}

void sl_conn_protocol_error(conn *c, const char *msg)
{
    worker *w = c->w;
    sl_stat_inc(&w->ws->protocol_errors, 1);
    if (sl_log_enabled(SL_LOG_DEBUG)) {
        char pb[80];
        sl_log(SL_LOG_DEBUG, "protocol error", "client=%s worker=%d err=%s",
               conn_peer(c, pb, sizeof pb), w->id, sl_logq(msg));
    }
}

/* Runs the complete requests in p[0..len) through the protocol, with c as
 * the connection being served (its first pending reply goes straight into
 * the batch).  Sets *usedp to the bytes consumed. */
static int run(conn *c, const char *p, size_t len, int64_t now, sl_turn *t, size_t *usedp)
{
    worker *w = c->w;
    w->serving = c;
    w->turn = t;
    /* the front its decisions count under (stats.h) */
    w->svcp->front = c->http                         ? SL_FRONT_HTTP
                     : c->proto == w->net->srv->grpc ? SL_FRONT_GRPC
                                                     : SL_FRONT_RESP;
    int st = c->proto->run(c, p, len, now, t, usedp);
    w->serving = NULL;
    w->turn = NULL;
    return st;
}

/* Runs the commands buffered in c->in: parses the first chain in place and
 * pulls up only as much as a command straddling chains needs. */
static int run_buffered(conn *c, int64_t now, sl_turn *t)
{
    for (;;) {
        size_t total = evbuffer_get_length(c->in);
        if (total == 0) return SL_PROTO_AGAIN;
        struct evbuffer_iovec v;
        if (evbuffer_peek(c->in, -1, NULL, &v, 1) < 1) return SL_PROTO_AGAIN;
        size_t used = 0;
        int st = run(c, v.iov_base, v.iov_len, now, t, &used);
        if (st == SL_PROTO_CLOSE) return st;
        evbuffer_drain(c->in, used);
        if (st == SL_PROTO_TURN) return st;
        size_t left = v.iov_len - used; /* the start of an incomplete command */
        total -= used;
        if (left == total) return SL_PROTO_AGAIN; /* all we have: wait for more */
        size_t want = left * 2 > left + 1024 ? left * 2 : left + 1024;
        if (want > total) want = total;
        if (evbuffer_pullup(c->in, (ev_ssize_t)want) == NULL) return SL_PROTO_NOMEM;
    }
}

/* The recv-timeout of c after a turn: none while c->in is empty (every
 * command it sent was whole); started when a command begins to arrive,
 * and started again when a turn completed commands (what is left is a
 * newer command); otherwise kept, so the clock of a command that trickles
 * in is never reset by its own bytes.  No cost while c->in stays empty. */
static void recv_deadline(conn *c, int progressed)
{
    const struct timeval *tv = recv_tv(c);
    if (tv == NULL || c->state != C_OPEN) return;
    if (evbuffer_get_length(c->in) == 0) {
        if (c->recv_armed) event_del(c->recv_ev);
        c->recv_armed = 0;
    } else if (!c->recv_armed || progressed) {
        event_add(c->recv_ev, tv);
        c->recv_armed = 1;
    }
}

/* Runs what c has read -- fresh[0..n) just read into the worker's read
 * buffer, after whatever c->in holds -- and sends the replies.  A turn
 * ends at the budget or at c's output bound (check_bound); what it leaves
 * in c->in runs in a turn of its own, from the resume timer, once c's
 * output is within its bound.  With `all` (stopping), there is no budget
 * but the bound, and the caller (stop_step) goes on.  Returns 0, or -1
 * when c was freed. */
static int serve(conn *c, const char *fresh, size_t n, int all)
{
    worker *w = c->w;
    sl_net *net = w->net;
    int64_t now = sl_now_ms(); /* once per turn: every command of it sees this time */
    sl_turn t = {SL_NET_TURN_CMDS, SL_NET_TURN_BYTES};
    if (all) t.cmds = t.bytes = SIZE_MAX;
    size_t had = evbuffer_get_length(c->in);
    int st;
    if (had == 0 && n > 0) {
        size_t used = 0;
        st = run(c, fresh, n, now, &t, &used); /* in place: the common case */
        if (st != SL_PROTO_CLOSE && used < n && evbuffer_add(c->in, fresh + used, n - used) != 0)
            st = SL_PROTO_NOMEM;
    } else {
        st =
            n > 0 && evbuffer_add(c->in, fresh, n) != 0 ? SL_PROTO_NOMEM : run_buffered(c, now, &t);
    }

    switch (st) {
    case SL_PROTO_NOMEM:
        w->batch.len = 0;
        conn_free(c, "out of memory");
        return -1;
    case SL_PROTO_CLOSE: begin_close(c); break;
    case SL_PROTO_TURN: c->paused_turn = 1; break;
    case SL_PROTO_AGAIN:
        c->paused_turn = 0;
        if (evbuffer_get_length(c->in) > net->cfg->max_command) {
            w->serving = c;
            c->proto->fatal(c, "Protocol error: command larger than max-command");
            w->serving = NULL;
            begin_close(c);
        }
        break;
    }
    recv_deadline(c, evbuffer_get_length(c->in) < had + n);
    if (flush(c) != 0) return -1;
    if (waiting(c)) c->paused_wait = 1; /* resumed as its requests are answered (unpause) */
    if (c->paused_turn && !c->paused_out && !c->paused_wait && !all && c->state == C_OPEN)
        event_add(c->resume, &(struct timeval){0, 0}); /* after the next poll */
    update_reading(c);
    return 0;
}

/* C_LINGER: discard input until the client's FIN, an error, too much, or
 * the linger timeout. */
static void linger_read(conn *c, short what)
{
    if (what & EV_TIMEOUT) {
        conn_free(c, "linger timeout");
        return;
    }
    ssize_t n = read(c->fd, c->w->rbuf, sizeof c->w->rbuf);
    if (n < 0 && would_block(errno)) return;
    if (n > 0) c->discarded += (size_t)n;
    if (n <= 0 || c->discarded > LINGER_MAX_BYTES) conn_free(c, "closed after replies");
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    worker *w = c->w;
    if (c->state == C_LINGER) {
        linger_read(c, what);
        return;
    }
    if (what & EV_TIMEOUT) {
        if (c->writing) return; /* replies still going out: not idle */
        atomic_fetch_add_explicit(&w->net->srv->cut_idle, 1, memory_order_relaxed);
        conn_free(c, "idle-timeout");
        return;
    }
    if (shed_due(w, c)) return;
    ssize_t n = read(fd, w->rbuf, sizeof w->rbuf);
    if (n < 0) {
        if (!would_block(errno)) conn_free(c, "read error");
        return;
    }
    if (n == 0) { /* the client is done sending; send what is pending, then close */
        c->eof = 1;
        begin_close(c);
        flush(c);
        return;
    }
    sl_stat_inc(&w->ws->net_in, (uint64_t)n);
    serve(c, w->rbuf, (size_t)n, 0);
}

/* The commands c sent and we have not run yet, as a turn of their own
 * (after a turn's budget, or once c's output drained). */
static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    conn *c = arg;
    if (c->state != C_OPEN || c->paused_out || c->paused_wait) return;
    if (shed_due(c->w, c)) return;
    if (c->w->stopping)
        stop_step(c);
    else
        serve(c, NULL, 0, 0);
}

/* c's output drained: if within its bound, c may run and be read again --
 * first what it already sent, from the resume timer. */
static void unpause(conn *c)
{
    int go = 0;
    if (c->paused_out && held_out(c) <= c->w->net->out_pause) {
        c->paused_out = 0;
        go = 1;
    }
    if (c->paused_wait && !waiting(c)) {
        c->paused_wait = 0;
        go = 1;
    }
    if (go && !c->paused_out && !c->paused_wait && c->state == C_OPEN &&
        (c->paused_turn || c->w->stopping))
        event_add(c->resume, &(struct timeval){0, 0});
    update_reading(c);
}

/* Cuts c for recv-timeout: counted (cut_recv), logged at info at most
 * RECV_LOG_PER_S a second per worker with msg, then freed.  net.c's own
 * deadline and a protocol's (sl_conn_deadline) both end here. */
static void recv_cut(conn *c, const char *msg)
{
    worker *w = c->w;
    atomic_fetch_add_explicit(&w->net->srv->stats.cut_recv, 1, memory_order_relaxed);
    int64_t now = sl__mono_ms();
    if (now - w->recv_log_ms >= 1000) {
        w->recv_log_ms = now;
        w->recv_log_n = 0;
    }
    if (w->recv_log_n++ < RECV_LOG_PER_S && sl_log_enabled(SL_LOG_INFO)) {
        char pb[80];
        sl_log(SL_LOG_INFO, msg,
               "client=%s worker=%d partial_bytes=%zu recv_timeout_ms=%lld protocol=%s",
               conn_peer(c, pb, sizeof pb), w->id, evbuffer_get_length(c->in),
               (long long)w->net->cfg->recv_timeout_ms, c->proto->name);
    }
    conn_free(c, "recv-timeout");
}

/* recv-timeout: a command began to arrive that long ago and is not whole.
 * While we are not reading c (its output, its turn), the wait is ours,
 * not the client's: the deadline starts again.  For a TLS connection
 * whose handshake is not done, the handshake is what did not arrive. */
static void on_recv_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    conn *c = arg;
    c->recv_armed = 0;
    if (c->state != C_OPEN) return;
    if (c->bev != NULL && !c->tls_ready) {
        tls_failed(c, "no handshake within recv-timeout");
        return;
    }
    if (!c->reading) {
        event_add(c->recv_ev, recv_tv(c));
        c->recv_armed = 1;
        return;
    }
    recv_cut(c, "client cut: a command did not arrive whole within recv-timeout");
}

/* The protocol's deadline passed (sl_conn_deadline, proto.h): c is cut as
 * recv-timeout or idle-timeout cuts it. */
static void on_proto_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    conn *c = arg;
    worker *w = c->w;
    if (c->state != C_OPEN) return;
    if (!c->pdl_idle && !c->reading) { /* we are not reading c: our wait */
        sl_conn_deadline(c, c->pdl_ms, 0);
        return;
    }
    if (c->pdl_idle) {
        atomic_fetch_add_explicit(&w->net->srv->cut_idle, 1, memory_order_relaxed);
        conn_free(c, "idle-timeout (the protocol's: no request)");
        return;
    }
    recv_cut(c, "client cut: a request did not arrive whole within recv-timeout");
}

void sl_conn_deadline(conn *c, int64_t ms, int idle)
{
    if (c->sink != NULL) return; /* detached: no event loop */
    if (ms <= 0) {
        if (c->pdl_ev != NULL) event_del(c->pdl_ev);
        return;
    }
    if (c->pdl_ev == NULL && (c->pdl_ev = evtimer_new(c->w->base, on_proto_deadline, c)) == NULL)
        return; /* out of memory: net.c's own timeouts still hold */
    c->pdl_ms = ms;
    c->pdl_idle = idle;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(c->pdl_ev, &tv);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;
    worker *w = c->w;
    if (what & EV_TIMEOUT) { /* not one byte taken for send-timeout */
        atomic_fetch_add_explicit(&w->net->srv->cut_output, 1, memory_order_relaxed);
        conn_cut(c, "send-timeout");
        return;
    }
    int n = evbuffer_write(c->out, fd);
    if (n < 0) {
        if (!would_block(errno)) conn_free(c, "write error");
        return;
    }
    sl_stat_inc(&w->ws->net_out, (uint64_t)n);
    account(c);
    if (evbuffer_get_length(c->out) > 0) return;
    event_del(c->wev);
    c->writing = 0;
    if (c->state == C_CLOSING) {
        if (c->nslots == 0 && c->nheld == 0) finish_close(c);
        return;
    }
    unpause(c);
}

/* After replies completed outside a turn (an asynchronous backend): applies
 * the output limits, starts sending, closes a closing connection whose
 * last reply went out, resumes reading.  Returns 0, or -1 when c was freed. */
static int after_async(conn *c)
{
    if (flush(c) != 0) return -1;
    unpause(c);
    return 0;
}

/* ---- TLS connections ------------------------------------------------- */

/* A TLS connection closed before its handshake completed (a client that
 * is not speaking TLS, a certificate refused by either side, a protocol
 * refused, a timeout, a client gone): counted (INFO tls_handshake_failures),
 * logged at info at most TLS_LOG_PER_S a second per worker and at debug
 * otherwise, and closed. */
static void tls_failed(conn *c, const char *why)
{
    worker *w = c->w;
    sl_stat_inc(&w->net->srv->stats.tls_failures, 1);
    int64_t now = sl__mono_ms();
    if (now - w->tls_log_ms >= 1000) {
        w->tls_log_ms = now;
        w->tls_log_n = 0;
    }
    int level = w->tls_log_n < TLS_LOG_PER_S ? SL_LOG_INFO : SL_LOG_DEBUG;
    if (sl_log_enabled(level)) {
        char pb[80];
        if (level == SL_LOG_INFO) w->tls_log_n++;
        sl_log(level, "TLS handshake failed", "client=%s worker=%d err=%s",
               conn_peer(c, pb, sizeof pb), w->id, sl_logq(why));
    }
    conn_free(c, "tls handshake failed");
}

/* Decrypted input arrived: onto c->in, and run as the plain path runs a
 * read.  Stopping, it is what stop_step waits for.  Closing or
 * lingering, it is thrown away. */
static void on_tls_read(struct bufferevent *bev, void *arg)
{
    conn *c = arg;
    worker *w = c->w;
    struct evbuffer *src = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(src);
    if (c->state != C_OPEN) {
        evbuffer_drain(src, n);
        c->discarded += n;
        if (c->state == C_LINGER && c->discarded > LINGER_MAX_BYTES)
            conn_free(c, "closed after replies");
        return;
    }
    if (shed_due(w, c)) return;
    sl_stat_inc(&w->ws->net_in, (uint64_t)n);
    if (evbuffer_add_buffer(c->in, src) != 0) {
        conn_free(c, "out of memory");
        return;
    }
    if (w->stopping) {
        c->stop_read += n;
        stop_step(c);
        return;
    }
    serve(c, NULL, 0, 0);
}

/* OpenSSL took replies from c->out (into the kernel): count them as sent
 * at once, so the budget of all clients sees a draining client shrink. */
static void on_tls_drained(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)b;
    conn *c = arg;
    if (info->n_deleted == 0) return;
    sl_stat_inc(&c->w->ws->net_out, (uint64_t)info->n_deleted);
    account(c);
}

/* c->out is empty (the bufferevent's write low-water mark, 0): as the
 * plain path's on_write when its output drained. */
static void on_tls_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn *c = arg;
    if (evbuffer_get_length(c->out) > 0) return;
    c->writing = 0;
    if (c->state == C_CLOSING) {
        if (c->nslots == 0 && c->nheld == 0) finish_close(c);
        return;
    }
    if (c->state == C_OPEN) unpause(c);
}

/* The handshake done, the end of the client's input, a timeout, an error. */
static void on_tls_event(struct bufferevent *bev, short what, void *arg)
{
    conn *c = arg;
    worker *w = c->w;
    sl_srv *srv = w->net->srv;
    if (what & BEV_EVENT_CONNECTED) {
        c->tls_ready = 1;
        sl_stat_inc(&srv->stats.tls_handshakes, 1);
        recv_deadline(c, 1); /* nothing is arriving: the handshake's deadline is off */
        return;
    }
    if (!c->tls_ready) {
        char why[256];
        if (what & BEV_EVENT_TIMEOUT) {
            snprintf(why, sizeof why, "no handshake within %s",
                     what & BEV_EVENT_WRITING ? "send-timeout" : "idle-timeout");
        } else {
            unsigned long errs[4], e;
            int n = 0;
            while ((e = bufferevent_get_openssl_error(bev)) != 0)
                if (n < 4) errs[n++] = e;
            sl_tls_why(bufferevent_openssl_get_ssl(bev), errs, n, why, sizeof why);
        }
        tls_failed(c, why);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (what & BEV_EVENT_WRITING) { /* not one byte taken for send-timeout */
            atomic_fetch_add_explicit(&srv->cut_output, 1, memory_order_relaxed);
            conn_cut(c, "send-timeout");
        } else if (c->state == C_LINGER) {
            conn_free(c, "linger timeout");
        } else if (!c->writing) { /* replies still going out: not idle */
            atomic_fetch_add_explicit(&srv->cut_idle, 1, memory_order_relaxed);
            conn_free(c, "idle-timeout");
        }
        return;
    }
    if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) && c->state != C_LINGER) {
        /* the client is done sending; send what is pending, then close.
         * The bufferevent stopped writing at the EOF: start it again. */
        c->eof = 1;
        begin_close(c);
        if (flush(c) == 0 && evbuffer_get_length(c->out) > 0) bufferevent_enable(bev, EV_WRITE);
        return;
    }
    if (c->state == C_LINGER) {
        conn_free(c, "closed after replies");
        return;
    }
    /* an error, or the end while writing: the client is gone */
    unsigned long errs[4], e;
    int n = 0;
    while ((e = bufferevent_get_openssl_error(bev)) != 0)
        if (n < 4 && ERR_GET_LIB(e) != 0) errs[n++] = e;
    char why[200] = "write error", reason[160];
    if (n > 0)
        snprintf(why, sizeof why, "tls error: %s",
                 sl_tls_why(NULL, errs, n, reason, sizeof reason));
    else if (what & BEV_EVENT_READING)
        snprintf(why, sizeof why, "read error");
    conn_free(c, why);
}

/* Stopping: whether a TLS client has sent more than we have decrypted
 * (bytes in the socket, or a record OpenSSL holds) -- stop_step then
 * waits for it through on_tls_read.  A syscall: only when stopping. */
static int tls_more(conn *c)
{
    int unread = 0;
    if (c->eof) return 0;
    return (ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0) ||
           SSL_pending(bufferevent_openssl_get_ssl(c->bev)) > 0;
}

/* ---- workers --------------------------------------------------------- */

/* Stops one connection gracefully: runs every complete command it has
 * sent before now -- buffered, or already waiting in the socket (up to
 * SL_NET_STOP_READ bytes since the stop) -- then closes it after the
 * replies.  Within c's output bound: paused by it, c goes on from
 * on_resume once its replies drain (or is dropped at the stop deadline). */
static void stop_step(conn *c)
{
    worker *w = c->w;
    const char *p = NULL;
    size_t n = 0;
    c->stop_more = 0;
    for (;;) {
        if (serve(c, p, n, 1) != 0) return;
        if (c->state != C_OPEN || c->paused_out || c->paused_wait) return;
        p = NULL, n = 0;
        if (c->paused_turn) continue; /* stopped at the bound, and all of it sent */
        if (c->stop_read >= SL_NET_STOP_READ) break;
        if (c->http && evbuffer_get_length(c->in) > 0 && (c->bev == NULL || c->tls_ready)) {
            /* HTTP: a request under way is waited for (its answer says
             * Connection: close, and ends the connection), within the stop
             * deadline */
            c->stop_more = 1;
            update_reading(c);
            return;
        }
        if (c->bev != NULL) { /* TLS: what is left arrives through on_tls_read */
            if (!c->tls_ready || !tls_more(c)) break;
            c->stop_more = 1;
            update_reading(c);
            return;
        }
        ssize_t got = read(c->fd, w->rbuf, sizeof w->rbuf);
        if (got <= 0) {
            if (got == 0) c->eof = 1;
            break;
        }
        c->stop_read += (size_t)got;
        sl_stat_inc(&w->ws->net_in, (uint64_t)got);
        p = w->rbuf, n = (size_t)got;
    }
    if (c->proto->stop != NULL) { /* its last word (HTTP/2's GOAWAY), sent with the rest */
        w->serving = c;
        c->proto->stop(c);
        w->serving = NULL;
    }
    begin_close(c);
    flush(c);
}

/* A stopping worker with no connection left ends its loop once no request
 * of its is in flight at the backend (closed connections' requests
 * included: their answers free their orphaned slots), checked every
 * millisecond until then; the stop deadline bounds the wait. */
static void on_exit_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    maybe_exit(arg);
}

static void maybe_exit(worker *w)
{
    if (w->svcp->inflight == 0) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    struct timeval tv = {0, 1000};
    evtimer_add(w->exit_ev, &tv);
}

/* Graceful stop of one worker: every connection is stopped, and the loop
 * ends when the last one is closed (and its requests answered) or at the
 * deadline. */
static void worker_begin_stop(worker *w)
{
    if (w->stopping) return;
    w->stopping = 1;
    struct timeval tv = {SL_NET_STOP_MS / 1000, (SL_NET_STOP_MS % 1000) * 1000};
    evtimer_add(w->stop_ev, &tv);
    conn *next;
    for (conn *c = w->conns; c != NULL; c = next) {
        next = c->next; /* stop_step frees at most c */
        if (c->state == C_OPEN) stop_step(c);
    }
    if (w->conns == NULL) maybe_exit(w);
}

static void on_stop_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    worker *w = arg;
    int left = 0;
    for (conn *c = w->conns; c != NULL; c = c->next) left++;
    if (left > 0)
        sl_log(SL_LOG_WARN, "shutdown: dropping clients with unsent replies",
               "worker=%d clients=%d", w->id, left);
    while (w->conns != NULL) conn_free(w->conns, "shutdown deadline");
    event_base_loopexit(w->base, NULL);
}

/* The pipe: fds from the acceptor, then PIPE_STOP (always last); and
 * PIPE_SHED tokens from any worker (shed_request). */
static void on_pipe(evutil_socket_t pfd, short what, void *arg)
{
    (void)what;
    worker *w = arg;
    int fds[256];
    ssize_t n = read(pfd, fds, sizeof fds);
    for (ssize_t i = 0; i < n / (ssize_t)sizeof fds[0]; i++) {
        if (fds[i] >= 0)
            conn_new(w, fds[i] & ~PIPE_FLAGS, fds[i] & PIPE_FLAGS);
        else if (fds[i] == PIPE_SHED)
            shed(w, NULL);
        else
            worker_begin_stop(w);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    event_base_dispatch(w->base);
    while (w->conns != NULL) conn_free(w->conns, "worker exit");
    return NULL;
}

static const struct timeval *common_timeout(struct event_base *b, int64_t ms)
{
    if (ms <= 0) return NULL;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
    return event_base_init_common_timeout(b, &tv);
}

static void worker_free(worker *w)
{
    if (w == NULL) return;
    /* the service context first: closing its backend channel answers the
     * requests still in flight, which frees their slots into the pool */
    if (w->svc_ok) sl_svc_ctx_done(&w->svc);
    while (w->free_slots != NULL) {
        sl_slot *s = w->free_slots;
        w->free_slots = s->next;
        free(s->buf.p);
        free(s);
    }
    if (w->exit_ev) event_free(w->exit_ev);
    if (w->trim_ev) event_free(w->trim_ev);
    if (w->pipe_ev) event_free(w->pipe_ev);
    if (w->stop_ev) event_free(w->stop_ev);
    if (w->base) event_base_free(w->base);
    if (w->pipe[0] >= 0) close(w->pipe[0]);
    if (w->pipe[1] >= 0) close(w->pipe[1]);
    free(w->batch.p);
    free(w->scratch);
    free(w->hscratch);
    free(w);
}

static worker *worker_new(sl_net *net, int id, char *err, size_t errlen)
{
    worker *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->net = net;
    w->id = id;
    w->ws = &net->srv->stats.workers[id];
    w->pipe[0] = w->pipe[1] = -1;
    struct event_config *ec = event_config_new();
    if (ec != NULL) {
        /* each base is used by one thread only: no locks */
        event_config_set_flag(ec, EVENT_BASE_FLAG_NOLOCK);
        w->base = event_base_new_with_config(ec);
        event_config_free(ec);
    }
    if (w->base == NULL || pipe2(w->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start worker %d: %s", id,
                 w->base ? strerror(errno) : "event_base_new failed");
        worker_free(w);
        return NULL;
    }
    w->pipe_ev = event_new(w->base, w->pipe[0], EV_READ | EV_PERSIST, on_pipe, w);
    w->stop_ev = evtimer_new(w->base, on_stop_deadline, w);
    w->exit_ev = evtimer_new(w->base, on_exit_check, w);
    w->trim_ev = evtimer_new(w->base, on_trim, w);
    w->idle_tv = common_timeout(w->base, net->cfg->idle_timeout_ms);
    w->send_tv = common_timeout(w->base, net->cfg->send_timeout_ms);
    w->recv_tv = common_timeout(w->base, net->cfg->recv_timeout_ms);
    int64_t hrecv =
        net->cfg->recv_timeout_ms > 0 ? net->cfg->recv_timeout_ms : SL_NET_HTTP_TIMEOUT_MS;
    int64_t hidle = net->cfg->idle_timeout_ms > 0 && net->cfg->idle_timeout_ms < hrecv
                        ? net->cfg->idle_timeout_ms
                        : hrecv;
    w->hrecv_tv = common_timeout(w->base, hrecv);
    w->hidle_tv = common_timeout(w->base, hidle);
    w->refused_tv = common_timeout(w->base, SL_NET_REFUSED_MS);
    w->linger_tv = common_timeout(w->base, SL_NET_LINGER_MS);
    if (!w->pipe_ev || !w->stop_ev || !w->exit_ev || !w->trim_ev ||
        event_add(w->pipe_ev, NULL) != 0 || (net->cfg->idle_timeout_ms > 0 && !w->idle_tv) ||
        (net->cfg->send_timeout_ms > 0 && !w->send_tv) ||
        (net->cfg->recv_timeout_ms > 0 && !w->recv_tv) || !w->linger_tv || !w->hrecv_tv ||
        !w->hidle_tv || !w->refused_tv) {
        snprintf(err, errlen, "cannot start worker %d: out of memory", id);
        worker_free(w);
        return NULL;
    }
    if (sl_svc_ctx_init(&w->svc, net->srv, id, w->base, err, errlen) != 0) {
        worker_free(w);
        return NULL;
    }
    w->svc_ok = 1;
    w->svcp = &w->svc;
    w->svc.charge = on_charge; /* requests in flight weigh on their connection */
    w->svc.charge_arg = w;
    size_t scratch = net->proto->scratch_size; /* RESP's and gRPC's connections share it */
    if (net->srv->grpc != NULL && net->srv->grpc->scratch_size > scratch)
        scratch = net->srv->grpc->scratch_size;
    w->scratch = calloc(1, scratch ? scratch : 1);
    if (net->http != NULL)
        w->hscratch = calloc(1, net->http->scratch_size ? net->http->scratch_size : 1);
    if (w->scratch == NULL || (net->http != NULL && w->hscratch == NULL)) {
        snprintf(err, errlen, "cannot start worker %d: out of memory", id);
        worker_free(w);
        return NULL;
    }
    return w;
}

/* ---- the acceptor ---------------------------------------------------- */

static worker *pick_worker(sl_net *net)
{
    unsigned start = net->next_worker++;
    worker *best = NULL;
    int best_n = 0;
    for (int i = 0; i < net->nworkers; i++) {
        worker *w = net->workers[(start + (unsigned)i) % (unsigned)net->nworkers];
        int n = atomic_load_explicit(&w->nconns, memory_order_relaxed);
        if (best == NULL || n < best_n) best = w, best_n = n;
    }
    return best;
}

/* Takes one accepted connection (PIPE_TLS, PIPE_HTTP: from which kind of
 * listener): refuses it over max-clients, else hands it to a worker.  A
 * refused RESP client gets the error line and is closed; a refused TLS
 * one is closed without it, which it could not read before a handshake
 * (one is not spent on a client that is refused anyway).  A refused HTTP
 * client (TLS or not) is handed over uncounted, to have its request
 * answered 503 (http.c) within SL_NET_REFUSED_MS -- unless
 * SL_NET_REFUSED_MAX are already being answered: then it is closed, as a
 * refused TLS client is, so that refusing never takes more descriptors
 * than that. */
static void hand_off(sl_net *net, int fd, int flags)
{
    sl_srv *srv = net->srv;
    int n = atomic_fetch_add_explicit(&srv->clients, 1, memory_order_relaxed);
    if (n >= net->cfg->max_clients) {
        static const char msg[] = "-ERR max number of clients reached\r\n";
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&srv->rejected, 1, memory_order_relaxed);
        int64_t now = sl_now_ms();
        if (now - net->last_reject_log_ms >= 1000) { /* at most one line a second */
            net->last_reject_log_ms = now;
            sl_log(SL_LOG_WARN, "max-clients reached: refusing connections", "max_clients=%d",
                   net->cfg->max_clients);
        }
        /* the acceptor alone adds to nrefused: no race past the bound */
        int answer = (flags & PIPE_HTTP) &&
                     atomic_load_explicit(&net->nrefused, memory_order_relaxed) <
                         SL_NET_REFUSED_MAX;
        if (!answer) { /* the error line is RESP's: not for TLS, HTTP or gRPC */
            if (!(flags & (PIPE_TLS | PIPE_HTTP | PIPE_GRPC)) &&
                send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                /* best effort */
            }
            close(fd);
            return;
        }
        atomic_fetch_add_explicit(&net->nrefused, 1, memory_order_relaxed);
        flags |= PIPE_REFUSED;
    } else {
        atomic_fetch_add_explicit(&srv->connections, 1, memory_order_relaxed);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    worker *w = pick_worker(net);
    atomic_fetch_add_explicit(&w->nconns, 1, memory_order_relaxed);
    int v = fd | flags;
    if (write(w->pipe[1], &v, sizeof v) != (ssize_t)sizeof v) { /* worker far behind */
        sl_log(SL_LOG_WARN, "worker busy: dropping a new connection", "worker=%d err=%s", w->id,
               sl_logq(strerror(errno)));
        close(fd);
        atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
        if (!(flags & PIPE_REFUSED))
            atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        else
            atomic_fetch_sub_explicit(&net->nrefused, 1, memory_order_relaxed);
    }
}

/* The PIPE_* flags of listener i's connections. */
static int listener_flags(const sl_net *net, int i)
{
    return (net->ltls[i] ? PIPE_TLS : 0) | (net->lhttp[i] ? PIPE_HTTP : 0) |
           (net->lgrpc[i] ? PIPE_GRPC : 0);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    (void)sa, (void)salen;
    sl_net *net = arg;
    int lfd = evconnlistener_get_fd(l);
    for (int i = 0; i < net->nlisteners; i++)
        if (net->lfds[i] == lfd) {
            hand_off(net, fd, listener_flags(net, i));
            return;
        }
    close(fd); /* cannot happen: every listener is in lfds */
}

static void on_backoff_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    sl_net *net = arg;
    if (atomic_load(&net->stopped)) return;
    for (int i = 0; i < net->nlisteners; i++)
        if (net->lev[i]) evconnlistener_enable(net->lev[i]);
}

/* accept(2) failed: most likely out of file descriptors.  Pause accepting
 * for a moment rather than spin on a listener that stays readable. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)l;
    sl_net *net = arg;
    int e = EVUTIL_SOCKET_ERROR();
    int64_t now = sl_now_ms();
    if (now - net->last_accept_err_log_ms >= 1000) {
        net->last_accept_err_log_ms = now;
        sl_log(SL_LOG_WARN, "accept failed", "err=%s", sl_logq(strerror(e)));
    }
    for (int i = 0; i < net->nlisteners; i++)
        if (net->lev[i]) evconnlistener_disable(net->lev[i]);
    struct timeval tv = {0, SL_NET_ACCEPT_BACKOFF_MS * 1000};
    evtimer_add(net->backoff_ev, &tv);
}

/* The stop, in order: connections the kernel has already completed are
 * accepted and handed off (closing a listener would reset them, requests
 * and all), the listeners are closed, and only then is each worker told to
 * stop -- through the same pipe, so it sees every connection first. */
static void on_acc_pipe(evutil_socket_t pfd, short what, void *arg)
{
    (void)what;
    sl_net *net = arg;
    int v[16];
    if (read(pfd, v, sizeof v) < 0 && !would_block(errno)) return;
    if (!atomic_load(&net->stopped)) return;
    for (int i = 0; i < net->nlisteners; i++) {
        if (net->lev[i] == NULL) continue;
        int lfd = evconnlistener_get_fd(net->lev[i]);
        for (int k = 0; k < BACKLOG; k++) {
            int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) break;
            hand_off(net, fd, listener_flags(net, i));
        }
        evconnlistener_free(net->lev[i]); /* closes the socket */
        net->lev[i] = NULL;
        net->lfds[i] = -1;
    }
    int stop = PIPE_STOP;
    for (int i = 0; i < net->nworkers; i++) {
        /* a full pipe empties as its worker reads it; keep trying */
        while (write(net->workers[i]->pipe[1], &stop, sizeof stop) != (ssize_t)sizeof stop) {
            if (!would_block(errno)) break;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    event_base_loopexit(net->acc_base, NULL);
}

static void *acceptor_main(void *arg)
{
    sl_net *net = arg;
    event_base_dispatch(net->acc_base);
    return NULL;
}

/* Formats "host:port" ("[host]:port" for IPv6). */
static void format_addr(char *buf, size_t cap, const char *host, int port)
{
    if (strchr(host, ':') != NULL)
        snprintf(buf, cap, "[%s]:%d", host, port);
    else
        snprintf(buf, cap, "%s:%d", host, port);
}

/* Creates, binds and listens on one socket for host:*port.  If *port is 0
 * the kernel picks one and *port is set.  opt is the option that asked for
 * the port ("--http-port"), named in every error: "cannot listen on
 * 127.0.0.1:8390 (--http-port): Address already in use".  Returns the fd
 * or -1 with err. */
static int listen_on(const char *host, int *port, const char *opt, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    char addr[80], where[112];
    format_addr(addr, sizeof addr, host, *port);
    snprintf(where, sizeof where, "%s (%s)", addr, opt);
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)*port);
        sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)*port);
        sl = sizeof *a6;
    } else {
        snprintf(err, errlen, "cannot listen on %s: not an IPv4 or IPv6 address", where);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", where, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* restart over TIME_WAIT */
    if (ss.ss_family == AF_INET6) /* so that "::" and "0.0.0.0" can both be bound */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, BACKLOG) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", where, strerror(errno));
        close(fd);
        return -1;
    }
    if (*port == 0) {
        sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            *port = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    }
    return fd;
}

/* ---- the net --------------------------------------------------------- */

/* Start-up failed after some threads started: stop them. */
static void stop_threads(sl_net *net)
{
    if (net->acc_started) {
        sl_net_stop(net);
    } else {
        int stop = PIPE_STOP;
        for (int i = 0; i < net->nworkers; i++)
            if (write(net->workers[i]->pipe[1], &stop, sizeof stop) < 0) {
            }
    }
    sl_net_join(net);
}

int sl_net_default_workers(const sl_config *cfg)
{
    return cfg->threads > 0 ? cfg->threads : sl__cpu_count();
}

sl_net *sl_net_start(sl_srv *srv, const sl_proto *proto, const sl_proto *http, char *err,
                     size_t errlen)
{
    const sl_config *cfg = srv->cfg;
    sl_net *net = calloc(1, sizeof *net);
    if (net == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    net->srv = srv;
    net->cfg = cfg;
    net->proto = proto;
    net->http = http;
    net->acc_pipe[0] = net->acc_pipe[1] = -1;
    for (int i = 0; i < MAX_LISTENERS; i++) net->lfds[i] = -1;
    net->out_pause = SL_NET_OUT_PAUSE;
    if (net->out_pause > cfg->max_output / 2) net->out_pause = (size_t)(cfg->max_output / 2);
    net->out_total_max = sl_config_output_total(cfg);

    /* listeners first: a port in use must fail before anything starts.
     * The plain ones (unless --port off), then the TLS ones (--tls-port);
     * port 0 is chosen by the first bind and kept for the others. */
    if (cfg->tls_port >= 0 && srv->tls == NULL) {
        snprintf(err, errlen, "--tls-port: no TLS context");
        goto fail;
    }
    /* kinds: 0 plain, 1 TLS, 2 HTTP, 3 HTTPS (--http-port, --https-port: 0
     * is off, "any" is 0 here) */
    int hport = http == NULL || cfg->http_port == 0  ? -1
                : cfg->http_port == SL_HTTP_PORT_ANY ? 0
                                                     : cfg->http_port;
    int https = http == NULL || cfg->https_port == 0  ? -1
                : cfg->https_port == SL_HTTP_PORT_ANY ? 0
                                                      : cfg->https_port;
    if (https >= 0 && srv->tls == NULL) {
        snprintf(err, errlen, "--https-port: no TLS context");
        goto fail;
    }
    /* kinds 4 and 5: gRPC, and gRPC over TLS (--grpc-port, --grpc-tls-port;
     * srv->grpc, set by main) */
    int grpc = srv->grpc == NULL || cfg->grpc_port == 0  ? -1
               : cfg->grpc_port == SL_HTTP_PORT_ANY ? 0
                                                    : cfg->grpc_port;
    int grpcs = srv->grpc == NULL || cfg->grpc_tls_port == 0 ? -1
                : cfg->grpc_tls_port == SL_HTTP_PORT_ANY     ? 0
                                                             : cfg->grpc_tls_port;
    if (grpcs >= 0 && srv->tls == NULL) {
        snprintf(err, errlen, "--grpc-tls-port: no TLS context");
        goto fail;
    }
    int ports[6] = {cfg->port, cfg->tls_port, hport, https, grpc, grpcs};
    static const char *const opts[6] = {"--port",       "--tls-port",  "--http-port",
                                        "--https-port", "--grpc-port", "--grpc-tls-port"};
    for (int kind = 0; kind < 6; kind++) {
        for (int i = 0; ports[kind] >= 0 && i < cfg->nbinds && net->nlisteners < MAX_LISTENERS;
             i++) {
            int fd = listen_on(cfg->binds[i], &ports[kind], opts[kind], err, errlen);
            if (fd < 0) goto fail;
            net->lfds[net->nlisteners] = fd;
            net->ltls[net->nlisteners] = kind == 1 || kind == 3 || kind == 5;
            net->lhttp[net->nlisteners] = kind == 2 || kind == 3;
            net->lhttps[net->nlisteners] = kind == 3;
            net->lgrpc[net->nlisteners] = kind == 4 || kind == 5;
            format_addr(net->addrs[net->nlisteners], sizeof net->addrs[0], cfg->binds[i],
                        ports[kind]);
            net->nlisteners++;
        }
    }
    if (net->nlisteners == 0) {
        snprintf(err, errlen, "no address to listen on");
        goto fail;
    }
    srv->port = cfg->port >= 0 ? ports[0] : 0;
    srv->tls_port = cfg->tls_port >= 0 ? ports[1] : 0;
    srv->http_port = hport >= 0 ? ports[2] : 0;
    srv->https_port = https >= 0 ? ports[3] : 0;
    srv->grpc_port = grpc >= 0 ? ports[4] : 0;
    srv->grpc_tls_port = grpcs >= 0 ? ports[5] : 0;

    int n = srv->stats.nworkers;
    net->workers = calloc((size_t)n, sizeof *net->workers);
    if (net->workers == NULL || n < 1) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    srv->nworkers = n;
    for (int i = 0; i < n; i++) {
        net->workers[i] = worker_new(net, i, err, errlen);
        if (net->workers[i] == NULL) goto fail;
        net->nworkers++;
    }

    net->acc_base = event_base_new();
    if (net->acc_base == NULL || pipe2(net->acc_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start the acceptor: %s", strerror(errno));
        goto fail;
    }
    net->acc_pipe_ev =
        event_new(net->acc_base, net->acc_pipe[0], EV_READ | EV_PERSIST, on_acc_pipe, net);
    net->backoff_ev = evtimer_new(net->acc_base, on_backoff_done, net);
    if (!net->acc_pipe_ev || !net->backoff_ev || event_add(net->acc_pipe_ev, NULL) != 0) {
        snprintf(err, errlen, "cannot start the acceptor: out of memory");
        goto fail;
    }
    for (int i = 0; i < net->nlisteners; i++) {
        net->lev[i] =
            evconnlistener_new(net->acc_base, on_accept, net,
                               LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, net->lfds[i]);
        if (net->lev[i] == NULL) {
            snprintf(err, errlen, "cannot listen on %s: out of memory", net->addrs[i]);
            goto fail;
        }
        evconnlistener_set_error_cb(net->lev[i], on_accept_error);
    }

    /* threads: with every signal blocked, so signals go to the caller */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int i = 0; i < net->nworkers && rc == 0; i++) {
        rc = pthread_create(&net->workers[i]->tid, NULL, worker_main, net->workers[i]);
        if (rc == 0) net->workers[i]->started = 1;
    }
    if (rc == 0) {
        rc = pthread_create(&net->acc_tid, NULL, acceptor_main, net);
        if (rc == 0) net->acc_started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start threads: %s", strerror(rc));
        stop_threads(net);
        goto fail;
    }
    return net;

fail:
    sl_net_free(net);
    return NULL;
}

void sl_net_stop(sl_net *net)
{
    int stop = -1;
    if (atomic_exchange(&net->stopped, 1)) return;
    /* the acceptor passes the stop on to the workers (on_acc_pipe); a full
     * pipe is fine: its reader is due to run and checks `stopped` */
    if (write(net->acc_pipe[1], &stop, sizeof stop) < 0) {
    }
}

void sl_net_join(sl_net *net)
{
    if (net->acc_started) pthread_join(net->acc_tid, NULL);
    net->acc_started = 0;
    for (int i = 0; i < net->nworkers; i++) {
        if (net->workers[i]->started) pthread_join(net->workers[i]->tid, NULL);
        net->workers[i]->started = 0;
    }
}

void sl_net_free(sl_net *net)
{
    if (net == NULL) return;
    for (int i = 0; i < net->nlisteners; i++) {
        if (net->lev[i])
            evconnlistener_free(net->lev[i]);
        else if (net->lfds[i] >= 0)
            close(net->lfds[i]);
    }
    if (net->acc_pipe_ev) event_free(net->acc_pipe_ev);
    if (net->backoff_ev) event_free(net->backoff_ev);
    if (net->acc_base) event_base_free(net->acc_base);
    if (net->acc_pipe[0] >= 0) close(net->acc_pipe[0]);
    if (net->acc_pipe[1] >= 0) close(net->acc_pipe[1]);
    for (int i = 0; i < net->nworkers; i++) worker_free(net->workers[i]);
    free(net->workers);
    free(net);
}

int sl_net_naddrs(const sl_net *net) { return net->nlisteners; }

const char *sl_net_addr(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners ? net->addrs[i] : "";
}

int sl_net_addr_tls(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners && net->ltls[i] && !net->lhttp[i];
}

int sl_net_addr_http(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners && net->lhttp[i] && !net->lhttps[i];
}

int sl_net_addr_https(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners && net->lhttps[i];
}

int sl_net_addr_grpc(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners && net->lgrpc[i];
}
