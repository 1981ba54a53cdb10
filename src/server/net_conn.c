/*
 * net_conn.c -- client connections (net.h, net_int.h): the request path
 * from a read to the send of its replies, the turn's budget, timeouts,
 * closing, and connections without a socket.
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
 * Output is bounded per client (the total of all clients is
 * net_budget.c's).  What a client holds (sl__net_held(): unsent replies, replies
 * done behind an earlier slot, a slot's size per request in flight, and
 * while it is served the batch being built for it) is checked as each
 * reply is made: past out_pause (SL_NET_OUT_PAUSE) the turn runs no
 * further command (the protocol sees its budget spent); if after the send
 * it still holds more than out_pause, the client is paused (paused_out):
 * it is not read and none of the commands it already sent runs until its
 * replies drain -- then the resume timer runs them as a turn of their
 * own.  So a client that pipelines without reading is held by TCP's own
 * flow control at out_pause plus one reply (a reply may be larger than the
 * bound by itself: it is sent, and nothing more runs until it is).  One
 * whose replies exceed max-output after a batch is cut at once; one that
 * accepts none of its pending replies for send-timeout is cut; one that
 * sends nothing for idle-timeout is cut; one whose command, once begun, is
 * not whole within recv-timeout is cut.  A command (or input without a
 * complete one) beyond max-command is a protocol error.  Requests in
 * flight at a backend that answers later weigh on the connection too
 * (net_slot.c): once they hold SL_NET_INFLIGHT_MAX, its turn ends and it
 * is neither read nor run (paused_wait) until some are answered (unpause).
 *
 * Protocols.  A connection speaks the protocol of the listener it came
 * from (net_listen.c: its front, c->fi); what differs between protocols is
 * in their sl_proto (proto.h), read here: the front its decisions count
 * under, timeouts that are never unbounded (HTTP's), a client beyond
 * max-clients served uncounted for its protocol to refuse (c->refused,
 * within SL_NET_REFUSED_MS), and at stop a request under way read until
 * whole.
 *
 * Closing.  QUIT, protocol errors, end of input and shutdown all close the
 * same way: stop reading, send what is pending, then close -- but if the
 * client still has bytes in flight to us, first shutdown(SHUT_WR) and read
 * and discard until its FIN (at most SL_NET_LINGER_MS), because closing a
 * socket with unread input makes the kernel send a reset that can destroy
 * replies the client has not read yet.
 *
 * A TLS connection (net_tls.c) is a non-NULL c->bev, tested here where the
 * two paths differ, with no syscall or allocation added to a plain request.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "journal.h"
#include "log.h"
#include "net_int.h"
#include "util.h"

#define SCRATCH_KEEP   (1024 * 1024) /* reply-batch capacity kept between batches */
#define RECV_LOG_PER_S 1             /* recv-timeout cuts logged at info per second per worker */

int64_t sl_now_ms(void) { return sl__clock_ms(); }

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

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void on_resume(evutil_socket_t fd, short what, void *arg);
static void on_recv_deadline(evutil_socket_t fd, short what, void *arg);
static void stop_step(conn *c);
static void conn_free(conn *c, const char *why);

/* c's idle-timeout and recv-timeout (NULL: none). */
static const struct timeval *idle_tv(const conn *c)
{
    return c->refused ? c->w->refused_tv : c->w->idle_tv[c->fi];
}
static const struct timeval *recv_tv(const conn *c)
{
    return c->refused ? c->w->refused_tv : c->w->recv_tv[c->fi];
}

/* The gauge of a front's connections (stats.h: HTTP's, gRPC's); NULL:
 * none of its own (RESP's are srv->clients). */
static _Atomic int64_t *front_clients(sl_srv *srv, int front)
{
    switch (front) {
    case SL_FRONT_HTTP: return &srv->stats.http_clients;
    case SL_FRONT_GRPC: return &srv->stats.grpc_clients;
    default: return NULL;
    }
}

/* ---- what a protocol asks of its connection (proto.h) ---------------- */

sl_svc_ctx *sl_conn_svc(conn *c) { return c->w->svcp; }
void *sl_conn_scratch(conn *c) { return c->w->scratch[c->fi]; }
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
    net->protos[0] = proto;
    w->net = net;
    w->svcp = x;
    w->ws = x->st;
    w->scratch[0] = scratch;
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
    sl__net_orphan_slots(c);
    sl__net_slot_pool_free(w);
    if (c->proto->closed) c->proto->closed(c->pdata);
    free(w->scratch[0]);
    free(w->net);
    free(w);
    free(c);
}

/* Takes c off its worker's list of connections whose replies wait for the
 * turn's journal write. */
static void undefer(conn *c)
{
    if (!c->deferred) return;
    if (c->dprev != NULL)
        c->dprev->dnext = c->dnext;
    else
        c->w->deferred = c->dnext;
    if (c->dnext != NULL) c->dnext->dprev = c->dprev;
    c->deferred = 0;
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
    sl__net_orphan_slots(c);
    undefer(c);
    size_t in = evbuffer_get_length(c->in);
    sl__net_account_as(c, 0);
    /* uncounted before the socket closes: a client that sees its close
     * (EOF) and then asks INFO finds itself gone from connected_clients */
    int counted = !c->refused;
    _Atomic int64_t *gauge = front_clients(srv, c->proto->front);
    if (counted) {
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        if (gauge != NULL) atomic_fetch_sub_explicit(gauge, 1, memory_order_relaxed);
    }
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
    free(c);
    atomic_fetch_sub_explicit(&w->nconns, 1, memory_order_relaxed);
    if (!counted) atomic_fetch_sub_explicit(&w->net->nrefused, 1, memory_order_relaxed);
    if (in > 0) sl__net_release(w, in);
    if (w->stopping && w->conns == NULL) sl__net_maybe_exit(w);
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

/* A connection handed over by the acceptor: fd, with the PIPE_* flags it
 * came with. */
void sl__net_conn_new(worker *w, int fd, int flags)
{
    sl_srv *srv = w->net->srv;
    conn *c = calloc(1, sizeof *c);
    int ok = 0, tls = (flags & PIPE_TLS) != 0;
    if (c != NULL) {
        c->w = w;
        c->fd = fd;
        c->fi = (unsigned)(flags & PIPE_FRONT) >> PIPE_FRONT_SHIFT;
        c->refused = (flags & PIPE_REFUSED) != 0;
        c->proto = w->net->protos[c->fi];
        c->in = evbuffer_new();
        c->resume = evtimer_new(w->base, on_resume, c);
        c->recv_ev = evtimer_new(w->base, on_recv_deadline, c);
        if (c->in && c->resume && c->recv_ev) {
            if (tls) {
                ok = sl__net_tls_start(c) == 0;
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
    _Atomic int64_t *gauge = front_clients(srv, c->proto->front);
    if (gauge != NULL && !c->refused) atomic_fetch_add_explicit(gauge, 1, memory_order_relaxed);
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
        sl__net_tls_close_notify(c);
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
    if (b->len > 0 && w->journal && c->bev == NULL) {
        /* the decisions behind these replies go to the journal first, in
         * one write for the whole turn: the replies wait in c->out for it
         * (sl__net_end_turn) */
        int rc = evbuffer_add(c->out, b->p, b->len);
        b->len = 0;
        if (rc != 0) {
            conn_free(c, "out of memory");
            return -1;
        }
        if (!c->deferred) {
            c->deferred = 1;
            c->dprev = NULL;
            c->dnext = w->deferred;
            if (w->deferred != NULL) w->deferred->dprev = c;
            w->deferred = c;
        }
    } else if (b->len > 0) {
        size_t off = 0;
        /* the decisions behind these replies, to the journal first (with
         * --journal-fsync always: on disk); if that fails none may leave */
        if (sl_journal_commit() != 0) {
            b->len = 0;
            conn_free(c, "journal write failed");
            return -1;
        }
        if (c->bev == NULL && evbuffer_get_length(c->out) == 0) {
            ssize_t n = send(c->fd, b->p, b->len, MSG_NOSIGNAL);
            if (n < 0) {
                if (!sl__would_block(errno)) {
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
            sl__net_release(w, b->cap);
            free(b->p);
            b->p = NULL;
            b->cap = 0;
        }
        if (rc != 0) {
            conn_free(c, "out of memory");
            return -1;
        }
    }
    size_t pending = sl__net_held(c);
    if (pending > net->cfg->max_output) {
        atomic_fetch_add_explicit(&net->srv->cut_output, 1, memory_order_relaxed);
        conn_cut(c, "max-output");
        return -1;
    }
    sl__net_account_as(c, pending);
    if (pending == 0) return c->state == C_CLOSING ? finish_close(c) : 0;
    if (!c->writing && !c->deferred && evbuffer_get_length(c->out) > 0) {
        if (c->bev == NULL) event_add(c->wev, w->send_tv); /* TLS: the bufferevent writes */
        c->writing = 1;
    }
    if (sl__net_held_out(c) > net->out_pause && !c->paused_out) {
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
    sl__net_serving(w, c);
    w->turn = t;
    /* the front its decisions count under (stats.h) */
    w->svcp->front = c->proto->front;
    int st = c->proto->run(c, p, len, now, t, usedp);
    sl__net_serving(w, NULL);
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
            sl__net_serving(w, c);
            c->proto->fatal(c, "Protocol error: command larger than max-command");
            sl__net_serving(w, NULL);
            begin_close(c);
        }
        break;
    }
    recv_deadline(c, evbuffer_get_length(c->in) < had + n);
    if (flush(c) != 0) return -1;
    if (sl__net_waiting(c)) c->paused_wait = 1; /* resumed as its requests are answered (unpause) */
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
    if (n < 0 && sl__would_block(errno)) return;
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
        /* replies still going out, or awaited (RL.WAIT): not idle */
        if (c->writing || c->nslots > 0) return;
        atomic_fetch_add_explicit(&w->net->srv->cut_idle, 1, memory_order_relaxed);
        conn_free(c, "idle-timeout");
        return;
    }
    if (sl__net_shed_due(w, c)) return;
    ssize_t n = read(fd, w->rbuf, sizeof w->rbuf);
    if (n < 0) {
        if (!sl__would_block(errno)) conn_free(c, "read error");
        return;
    }
    if (n == 0) { /* the client is done sending; send what is pending, then close */
        c->eof = 1;
        sl__net_drop(c); /* its waiters leave (wait.h) */
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
    if (sl__net_shed_due(c->w, c)) return;
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
    if (c->paused_out && sl__net_held_out(c) <= c->w->net->out_pause) {
        c->paused_out = 0;
        go = 1;
    }
    if (c->paused_wait && !sl__net_waiting(c)) {
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
        sl__net_tls_failed(c, "no handshake within recv-timeout");
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
    /* replies queued in this turn wait for its journal write: with a
     * journal, what this thread decided so far is written first */
    if (w->journal && sl_journal_commit() != 0) {
        conn_free(c, "journal write failed");
        return;
    }
    int n = evbuffer_write(c->out, fd);
    if (n < 0) {
        if (!sl__would_block(errno)) conn_free(c, "write error");
        return;
    }
    sl_stat_inc(&w->ws->net_out, (uint64_t)n);
    sl__net_account(c);
    if (evbuffer_get_length(c->out) > 0) return;
    event_del(c->wev);
    c->writing = 0;
    if (c->state == C_CLOSING) {
        if (c->nslots == 0 && c->nheld == 0) finish_close(c);
        return;
    }
    unpause(c);
}

void sl__net_end_turn(worker *w)
{
    if (w->deferred == NULL) return;
    /* one write (and with --journal-fsync always, one fsync) for every
     * decision of the turn; if it fails, none of their replies may leave */
    int bad = sl_journal_commit() != 0;
    while (w->deferred != NULL) {
        conn *c = w->deferred;
        undefer(c);
        if (bad) {
            conn_free(c, "journal write failed");
            continue;
        }
        if (c->writing) continue; /* on_write sends it */
        int n = evbuffer_write(c->out, c->fd);
        if (n < 0) {
            if (!sl__would_block(errno)) {
                conn_free(c, "write error");
                continue;
            }
            n = 0;
        }
        sl_stat_inc(&w->ws->net_out, (uint64_t)n);
        sl__net_account(c);
        if (evbuffer_get_length(c->out) > 0) {
            event_add(c->wev, w->send_tv);
            c->writing = 1;
        } else if (c->state == C_CLOSING && c->nslots == 0 && c->nheld == 0) {
            finish_close(c);
        }
    }
}

/* After replies completed outside a turn (an asynchronous backend): applies
 * the output limits, starts sending, closes a closing connection whose
 * last reply went out, resumes reading.  Returns 0, or -1 when c was freed. */
int sl__net_after_async(conn *c)
{
    if (flush(c) != 0) return -1;
    unpause(c);
    return 0;
}

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
        if (c->proto->stop_waits && evbuffer_get_length(c->in) > 0 &&
            (c->bev == NULL || c->tls_ready)) {
            /* a request under way is waited for (its answer -- HTTP's says
             * Connection: close -- ends the connection), within the stop
             * deadline */
            c->stop_more = 1;
            update_reading(c);
            return;
        }
        if (c->bev != NULL) { /* TLS: what is left arrives through on_tls_read */
            if (!c->tls_ready || !sl__net_tls_more(c)) break;
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
        sl__net_serving(w, c);
        c->proto->stop(c);
        sl__net_serving(w, NULL);
    }
    begin_close(c);
    flush(c);
}

/* ---- for the TLS glue and the workers (net_int.h) --------------------- */

/* Thin wrappers: the plain path above calls the static functions directly,
 * as it did when the network layer was one file. */
void sl__net_conn_free(conn *c, const char *why) { conn_free(c, why); }
void sl__net_conn_cut(conn *c, const char *why) { conn_cut(c, why); }
const char *sl__net_conn_peer(const conn *c, char *buf, size_t cap)
{
    return conn_peer(c, buf, cap);
}
const char *sl__net_format_sockaddr(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    return format_sockaddr(ss, buf, cap);
}
const struct timeval *sl__net_idle_tv(const conn *c) { return idle_tv(c); }
const struct timeval *sl__net_recv_tv(const conn *c) { return recv_tv(c); }
int sl__net_serve(conn *c, const char *fresh, size_t n, int all) { return serve(c, fresh, n, all); }
int sl__net_flush(conn *c) { return flush(c); }
void sl__net_begin_close(conn *c) { begin_close(c); }
int sl__net_finish_close(conn *c) { return finish_close(c); }
void sl__net_unpause(conn *c) { unpause(c); }
void sl__net_recv_deadline(conn *c, int progressed) { recv_deadline(c, progressed); }
void sl__net_stop_step(conn *c) { stop_step(c); }
