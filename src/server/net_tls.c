/*
 * net_tls.c -- TLS connections (--tls-port, --https-port, --grpc-tls-port):
 * the glue between net_conn.c's connections and libevent's
 * bufferevent_openssl.
 *
 * A TLS listener's connections are served by the same code as plain
 * ones, with the same protocol, reply slots and limits.  Only their bytes
 * travel differently: through a bufferevent_openssl on the accepted socket
 * (tls.h makes the SSL), which reads and decrypts into its input -- moved
 * as it arrives into c->in, where the usual turn runs it -- and encrypts
 * and writes whatever is appended to its output, which is c->out.  So what
 * waits there counts as the connection's unsent replies, as the plain
 * path's c->out does: the pause, max-output, the total budget (accounted
 * as OpenSSL drains it: on_tls_drained) and send-timeout (the
 * bufferevent's write timeout) all hold; idle-timeout is its read timeout,
 * and recv-timeout also bounds the handshake.  The plain path is
 * untouched: a TLS connection is a non-NULL c->bev, tested where the two
 * differ, with no syscall or allocation added to a plain request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "log.h"
#include "net_int.h"
#include "tls.h"
#include "util.h"

#define TLS_LOG_PER_S 1 /* failed TLS handshakes logged at info per second per worker */

static void on_tls_read(struct bufferevent *bev, void *arg);
static void on_tls_write(struct bufferevent *bev, void *arg);
static void on_tls_event(struct bufferevent *bev, short what, void *arg);
static void on_tls_drained(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg);

/* A TLS connection on fd: its bufferevent_openssl, accepting.  Reading
 * takes at most SL_NET_READ_CHUNK ahead of what the turn consumed, the
 * bufferevent's timeouts are idle-timeout (reading) and send-timeout
 * (writing, while replies wait), and the handshake must be done within
 * recv-timeout: it is the client's first message, and one sent a byte at a
 * time must not hold a connection slot (idle-timeout restarts with every
 * byte).  Returns 0, or -1 (the caller frees what is set). */
int sl__net_tls_start(conn *c)
{
    worker *w = c->w;
    socklen_t sl = sizeof *c->tls_peer;
    if ((c->tls_peer = calloc(1, sizeof *c->tls_peer)) == NULL) return -1;
    if (getpeername(c->fd, (struct sockaddr *)c->tls_peer, &sl) != 0) {
        free(c->tls_peer);
        c->tls_peer = NULL;
    }
    SSL *ssl = sl_tls_ssl_new(w->net->srv->tls, c->proto->h2);
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
    bufferevent_set_timeouts(c->bev, sl__net_idle_tv(c), w->send_tv);
    c->out_cb = evbuffer_add_cb(c->out, on_tls_drained, c);
    if (c->out_cb == NULL || bufferevent_enable(c->bev, EV_READ) != 0) return -1;
    if (sl__net_recv_tv(c) != NULL) {
        event_add(c->recv_ev, sl__net_recv_tv(c));
        c->recv_armed = 1;
    }
    return 0;
}

/* A TLS connection closed before its handshake completed (a client that
 * is not speaking TLS, a certificate refused by either side, a protocol
 * refused, a timeout, a client gone): counted (INFO tls_handshake_failures),
 * logged at info at most TLS_LOG_PER_S a second per worker and at debug
 * otherwise, and closed. */
void sl__net_tls_failed(conn *c, const char *why)
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
               sl__net_conn_peer(c, pb, sizeof pb), w->id, sl_logq(why));
    }
    sl__net_conn_free(c, "tls handshake failed");
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
            sl__net_conn_free(c, "closed after replies");
        return;
    }
    if (sl__net_shed_due(w, c)) return;
    sl_stat_inc(&w->ws->net_in, (uint64_t)n);
    if (evbuffer_add_buffer(c->in, src) != 0) {
        sl__net_conn_free(c, "out of memory");
        return;
    }
    if (w->stopping) {
        c->stop_read += n;
        sl__net_stop_step(c);
        return;
    }
    sl__net_serve(c, NULL, 0, 0);
}

/* OpenSSL took replies from c->out (into the kernel): count them as sent
 * at once, so the budget of all clients sees a draining client shrink. */
static void on_tls_drained(struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
    (void)b;
    conn *c = arg;
    if (info->n_deleted == 0) return;
    sl_stat_inc(&c->w->ws->net_out, (uint64_t)info->n_deleted);
    sl__net_account(c);
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
        if (c->nslots == 0 && c->nheld == 0) sl__net_finish_close(c);
        return;
    }
    if (c->state == C_OPEN) sl__net_unpause(c);
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
        sl__net_recv_deadline(c, 1); /* nothing is arriving: the handshake's deadline is off */
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
        sl__net_tls_failed(c, why);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (what & BEV_EVENT_WRITING) { /* not one byte taken for send-timeout */
            atomic_fetch_add_explicit(&srv->cut_output, 1, memory_order_relaxed);
            sl__net_conn_cut(c, "send-timeout");
        } else if (c->state == C_LINGER) {
            sl__net_conn_free(c, "linger timeout");
        } else if (!c->writing && c->nslots == 0) { /* replies going out or awaited: not idle */
            atomic_fetch_add_explicit(&srv->cut_idle, 1, memory_order_relaxed);
            sl__net_conn_free(c, "idle-timeout");
        }
        return;
    }
    if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) && c->state != C_LINGER) {
        /* the client is done sending; send what is pending, then close.
         * The bufferevent stopped writing at the EOF: start it again. */
        c->eof = 1;
        sl__net_drop(c); /* its waiters leave (wait.h) */
        sl__net_begin_close(c);
        if (sl__net_flush(c) == 0 && evbuffer_get_length(c->out) > 0)
            bufferevent_enable(bev, EV_WRITE);
        return;
    }
    if (c->state == C_LINGER) {
        sl__net_conn_free(c, "closed after replies");
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
    sl__net_conn_free(c, why);
}

/* Stopping: whether a TLS client has sent more than we have decrypted
 * (bytes in the socket, or a record OpenSSL holds) -- stop_step then
 * waits for it through on_tls_read.  A syscall: only when stopping. */
int sl__net_tls_more(conn *c)
{
    int unread = 0;
    if (c->eof) return 0;
    return (ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0) ||
           SSL_pending(bufferevent_openssl_get_ssl(c->bev)) > 0;
}

/* Before our FIN on a TLS connection whose handshake is done: TLS's
 * close_notify, so the client knows the replies are complete. */
void sl__net_tls_close_notify(conn *c)
{
    SSL_shutdown(bufferevent_openssl_get_ssl(c->bev));
    ERR_clear_error();
}
