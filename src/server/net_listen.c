/*
 * net_listen.c -- listeners and the acceptor: which ports sluiced listens
 * on, which protocol each one's clients speak, binding (a port that fails
 * names its option), and the thread that accepts connections and hands
 * them to the workers.
 *
 * The choice of protocol.  A net serves up to NET_FRONTS protocols, its
 * fronts (net->protos: sl_net_start's proto and http, and srv->grpc), each
 * on a plain and a TLS listener per bind address; `kinds` below is the one
 * table that says which option asks for which port and which front its
 * clients speak.  Everything else that differs between protocols is in
 * their sl_proto (proto.h); no other file of the network layer names one.
 *
 * One acceptor thread runs an event_base with an evconnlistener per
 * address; it checks max-clients, sets TCP_NODELAY and writes the new fd,
 * with its front and TLS in the high bits (PIPE_*), into the pipe of the
 * worker with the fewest connections.  We chose one acceptor over
 * SO_REUSEPORT listeners per worker because (1) a second sluiced started by
 * mistake on the same port would, with SO_REUSEPORT, bind successfully and
 * silently take half the connections (with its own limiter state) instead
 * of failing with "Address already in use"; (2) connections go to the
 * least-loaded worker rather than wherever the kernel's 4-tuple hash sends
 * them; (3) stopping means closing one set of sockets, never resetting
 * connections queued on one worker's listener.  The cost, a pipe write per
 * connection, is paid once per connection, not per request.  Accepting is
 * not on the main thread so that a long snapshot write there never delays
 * new clients.
 *
 * Beyond max-clients.  A client of a protocol that refuses in band
 * (proto.refuse_in_band: HTTP's 503) is not closed at once but served
 * uncounted (PIPE_REFUSED) for its protocol to answer with a refusal it can
 * read -- at most SL_NET_REFUSED_MAX such at once (net->nrefused), each for
 * at most SL_NET_REFUSED_MS; beyond, it is closed at accept.  So the count
 * of connections is one for every front (srv->clients: RESP, TLS, HTTP,
 * HTTPS, gRPC), and what is held beyond it is bounded too: the refused
 * cannot take the descriptors the counted ones were promised.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "net_int.h"

/* The listeners' kinds, in the order they are bound and listed
 * (sl_net_addr): each a front's plain or TLS port. */
enum { K_PORT, K_TLS, K_HTTP, K_HTTPS, K_GRPC, K_GRPC_TLS, NKINDS };
static const struct kind {
    const char *opt; /* the option that asks for the port, named in its errors */
    int front;       /* what its clients speak: net->protos[front] */
    int tls;         /* 1: TLS (srv->tls) */
} kinds[NKINDS] = {
    [K_PORT] = {"--port", 0, 0},      [K_TLS] = {"--tls-port", 0, 1},
    [K_HTTP] = {"--http-port", 1, 0}, [K_HTTPS] = {"--https-port", 1, 1},
    [K_GRPC] = {"--grpc-port", 2, 0}, [K_GRPC_TLS] = {"--grpc-tls-port", 2, 1},
};

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

/* Takes one accepted connection (PIPE_TLS, PIPE_FRONT: from which kind of
 * listener): refuses it over max-clients, else hands it to a worker.  A
 * refused client gets its protocol's refuse_line (RESP's error line) and
 * is closed; a refused TLS one is closed without it, which it could not
 * read before a handshake (one is not spent on a client that is refused
 * anyway).  A refused client of a protocol that refuses in band (HTTP;
 * TLS or not) is handed over uncounted, to have its request answered
 * (HTTP's 503, http.c) within SL_NET_REFUSED_MS -- unless
 * SL_NET_REFUSED_MAX are already being answered: then it is closed, as a
 * refused TLS client is, so that refusing never takes more descriptors
 * than that. */
static void hand_off(sl_net *net, int fd, int flags)
{
    sl_srv *srv = net->srv;
    const sl_proto *proto = net->protos[(flags & PIPE_FRONT) >> PIPE_FRONT_SHIFT];
    int n = atomic_fetch_add_explicit(&srv->clients, 1, memory_order_relaxed);
    if (n >= net->cfg->max_clients) {
        atomic_fetch_sub_explicit(&srv->clients, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&srv->rejected, 1, memory_order_relaxed);
        int64_t now = sl_now_ms();
        if (now - net->last_reject_log_ms >= 1000) { /* at most one line a second */
            net->last_reject_log_ms = now;
            sl_log(SL_LOG_WARN, "max-clients reached: refusing connections", "max_clients=%d",
                   net->cfg->max_clients);
        }
        /* the acceptor alone adds to nrefused: no race past the bound */
        int answer =
            proto->refuse_in_band &&
            atomic_load_explicit(&net->nrefused, memory_order_relaxed) < SL_NET_REFUSED_MAX;
        if (!answer) { /* a refuse line is not for TLS */
            if (!(flags & PIPE_TLS) && proto->refuse_line != NULL &&
                send(fd, proto->refuse_line, strlen(proto->refuse_line),
                     MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
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
    const struct kind *k = &kinds[net->lkind[i]];
    return (k->tls ? PIPE_TLS : 0) | k->front << PIPE_FRONT_SHIFT;
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
    if (read(pfd, v, sizeof v) < 0 && !sl__would_block(errno)) return;
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
            if (!sl__would_block(errno)) break;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    event_base_loopexit(net->acc_base, NULL);
}

void *sl__net_acceptor_main(void *arg)
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

/* The port of kind k srv->cfg asks for: -1 none (the option is off or
 * its front has no protocol), 0 any. */
static int kind_port(const sl_net *net, int k)
{
    const sl_config *cfg = net->cfg;
    if (net->protos[kinds[k].front] == NULL) return -1;
    int port = k == K_PORT    ? cfg->port
               : k == K_TLS   ? cfg->tls_port
               : k == K_HTTP  ? cfg->http_port
               : k == K_HTTPS ? cfg->https_port
               : k == K_GRPC  ? cfg->grpc_port
                              : cfg->grpc_tls_port;
    if (k == K_PORT || k == K_TLS) return port;                  /* -1 off, 0 any */
    return port == 0 ? -1 : port == SL_HTTP_PORT_ANY ? 0 : port; /* 0 off, "any" */
}

int sl__net_listen(sl_net *net, char *err, size_t errlen)
{
    sl_srv *srv = net->srv;
    const sl_config *cfg = net->cfg;
    int ports[NKINDS];
    for (int k = 0; k < NKINDS; k++) ports[k] = kind_port(net, k);
    /* a TLS port without a TLS context (checked in the table's order) */
    for (int k = 0; k < NKINDS; k++)
        if (kinds[k].tls && ports[k] >= 0 && srv->tls == NULL) {
            snprintf(err, errlen, "%s: no TLS context", kinds[k].opt);
            return -1;
        }
    /* the plain ones (unless --port off), then the TLS ones (--tls-port),
     * and so on down the table; port 0 is chosen by the first bind and
     * kept for the others */
    for (int k = 0; k < NKINDS; k++) {
        for (int i = 0; ports[k] >= 0 && i < cfg->nbinds && net->nlisteners < MAX_LISTENERS; i++) {
            int fd = listen_on(cfg->binds[i], &ports[k], kinds[k].opt, err, errlen);
            if (fd < 0) return -1;
            net->lfds[net->nlisteners] = fd;
            net->lkind[net->nlisteners] = k;
            format_addr(net->addrs[net->nlisteners], sizeof net->addrs[0], cfg->binds[i], ports[k]);
            net->nlisteners++;
        }
    }
    if (net->nlisteners == 0) {
        snprintf(err, errlen, "no address to listen on");
        return -1;
    }
    srv->port = ports[K_PORT] >= 0 ? ports[K_PORT] : 0;
    srv->tls_port = ports[K_TLS] >= 0 ? ports[K_TLS] : 0;
    srv->http_port = ports[K_HTTP] >= 0 ? ports[K_HTTP] : 0;
    srv->https_port = ports[K_HTTPS] >= 0 ? ports[K_HTTPS] : 0;
    srv->grpc_port = ports[K_GRPC] >= 0 ? ports[K_GRPC] : 0;
    srv->grpc_tls_port = ports[K_GRPC_TLS] >= 0 ? ports[K_GRPC_TLS] : 0;
    return 0;
}

int sl__net_acceptor_new(sl_net *net, char *err, size_t errlen)
{
    net->acc_base = event_base_new();
    if (net->acc_base == NULL || pipe2(net->acc_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, errlen, "cannot start the acceptor: %s", strerror(errno));
        return -1;
    }
    net->acc_pipe_ev =
        event_new(net->acc_base, net->acc_pipe[0], EV_READ | EV_PERSIST, on_acc_pipe, net);
    net->backoff_ev = evtimer_new(net->acc_base, on_backoff_done, net);
    if (!net->acc_pipe_ev || !net->backoff_ev || event_add(net->acc_pipe_ev, NULL) != 0) {
        snprintf(err, errlen, "cannot start the acceptor: out of memory");
        return -1;
    }
    for (int i = 0; i < net->nlisteners; i++) {
        net->lev[i] =
            evconnlistener_new(net->acc_base, on_accept, net,
                               LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, net->lfds[i]);
        if (net->lev[i] == NULL) {
            snprintf(err, errlen, "cannot listen on %s: out of memory", net->addrs[i]);
            return -1;
        }
        evconnlistener_set_error_cb(net->lev[i], on_accept_error);
    }
    return 0;
}

int sl_net_naddrs(const sl_net *net) { return net->nlisteners; }

const char *sl_net_addr(const sl_net *net, int i)
{
    return i >= 0 && i < net->nlisteners ? net->addrs[i] : "";
}

/* Whether listener i is of kind a or b. */
static int addr_is(const sl_net *net, int i, int a, int b)
{
    return i >= 0 && i < net->nlisteners && (net->lkind[i] == a || net->lkind[i] == b);
}

int sl_net_addr_tls(const sl_net *net, int i) { return addr_is(net, i, K_TLS, K_GRPC_TLS); }
int sl_net_addr_http(const sl_net *net, int i) { return addr_is(net, i, K_HTTP, K_HTTP); }
int sl_net_addr_https(const sl_net *net, int i) { return addr_is(net, i, K_HTTPS, K_HTTPS); }
int sl_net_addr_grpc(const sl_net *net, int i) { return addr_is(net, i, K_GRPC, K_GRPC_TLS); }
