/*
 * net.c -- the network layer's threads (see net.h): the worker threads,
 * their pipes from the acceptor, start-up and the graceful stop.  The
 * rest of the layer, by concern, is listed in net_int.h: connections
 * (net_conn.c), reply slots (net_slot.c), the output budget
 * (net_budget.c), TLS (net_tls.c), listeners and the acceptor
 * (net_listen.c).
 *
 * Threads.  One acceptor thread owns the listening sockets and hands each
 * accepted connection, through a pipe, to the worker with the fewest
 * connections (net_listen.c says why one acceptor); each worker runs its
 * own event_base and serves its connections start to finish.
 *
 * Workers.  Each owns an event_base, the connections handed to it and a few
 * scratch buffers shared by its connections (a 64 KB read buffer, the reply
 * batch, each protocol's scratch, e.g. the parsed command): one client's
 * requests are run start to finish before the next client's, so one set
 * suffices and an idle connection costs no buffer memory at all.  Nothing
 * is shared between workers except the store (locked per shard inside
 * libsluice) and atomic counters.
 *
 * Stopping.  The acceptor accepts what the kernel already completed,
 * closes its listeners and sends each worker PIPE_STOP last through its
 * pipe; the worker then stops each connection (sl__net_stop_step: what it
 * sent is run and answered, then it is closed) and ends its loop when the
 * last is gone and no request of its is in flight, or at SL_NET_STOP_MS.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "net_int.h"
#include "util.h"

/* A stopping worker with no connection left ends its loop once no request
 * of its is in flight at the backend (closed connections' requests
 * included: their answers free their orphaned slots), checked every
 * millisecond until then; the stop deadline bounds the wait. */
static void on_exit_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    sl__net_maybe_exit(arg);
}

void sl__net_maybe_exit(worker *w)
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
        next = c->next; /* sl__net_stop_step frees at most c */
        if (c->state == C_OPEN) sl__net_stop_step(c);
    }
    if (w->conns == NULL) sl__net_maybe_exit(w);
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
    while (w->conns != NULL) sl__net_conn_free(w->conns, "shutdown deadline");
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
            sl__net_conn_new(w, fds[i] & ~PIPE_FLAGS, fds[i] & PIPE_FLAGS);
        else if (fds[i] == PIPE_SHED)
            sl__net_shed(w, NULL);
        else
            worker_begin_stop(w);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    /* one turn at a time, so that its end can group the journal's writes
     * (Redis's beforeSleep); without a journal the end does nothing */
    while (event_base_loop(w->base, EVLOOP_ONCE) == 0 && !event_base_got_exit(w->base) &&
           !event_base_got_break(w->base))
        sl__net_end_turn(w);
    sl__net_end_turn(w);
    while (w->conns != NULL) sl__net_conn_free(w->conns, "worker exit");
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
    sl__net_slot_pool_free(w);
    if (w->exit_ev) event_free(w->exit_ev);
    if (w->trim_ev) event_free(w->trim_ev);
    if (w->pipe_ev) event_free(w->pipe_ev);
    if (w->stop_ev) event_free(w->stop_ev);
    if (w->base) event_base_free(w->base);
    if (w->pipe[0] >= 0) close(w->pipe[0]);
    if (w->pipe[1] >= 0) close(w->pipe[1]);
    free(w->batch.p);
    for (int f = 0; f < NET_FRONTS; f++) free(w->scratch[f]);
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
    w->trim_ev = evtimer_new(w->base, sl__net_on_trim, w);
    w->send_tv = common_timeout(w->base, net->cfg->send_timeout_ms);
    w->journal = net->cfg->journal[0] != '\0';
    w->refused_tv = common_timeout(w->base, SL_NET_REFUSED_MS);
    w->linger_tv = common_timeout(w->base, SL_NET_LINGER_MS);
    int tv_ok = (net->cfg->send_timeout_ms <= 0 || w->send_tv) && w->linger_tv && w->refused_tv;
    for (int f = 0; f < NET_FRONTS; f++) {
        int64_t idle = net->cfg->idle_timeout_ms, recv = net->cfg->recv_timeout_ms;
        const sl_proto *p = net->protos[f];
        if (p != NULL && p->timeout_ms > 0) { /* never unbounded, idle no longer than recv */
            if (recv <= 0) recv = p->timeout_ms;
            if (idle <= 0 || idle > recv) idle = recv;
        }
        w->idle_tv[f] = common_timeout(w->base, idle);
        w->recv_tv[f] = common_timeout(w->base, recv);
        tv_ok &= (idle <= 0 || w->idle_tv[f]) && (recv <= 0 || w->recv_tv[f]);
    }
    if (!w->pipe_ev || !w->stop_ev || !w->exit_ev || !w->trim_ev ||
        event_add(w->pipe_ev, NULL) != 0 || !tv_ok) {
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
    w->svc.charge = sl__net_on_charge; /* requests in flight weigh on their connection */
    w->svc.charge_arg = w;
    for (int f = 0; f < NET_FRONTS; f++) {
        const sl_proto *p = net->protos[f];
        if (p == NULL) continue;
        if ((w->scratch[f] = calloc(1, p->scratch_size ? p->scratch_size : 1)) == NULL) {
            snprintf(err, errlen, "cannot start worker %d: out of memory", id);
            worker_free(w);
            return NULL;
        }
    }
    return w;
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
    net->protos[0] = proto; /* the fronts: net_listen.c's table says which listeners speak each */
    net->protos[1] = http;
    net->protos[2] = srv->grpc;
    net->acc_pipe[0] = net->acc_pipe[1] = -1;
    for (int i = 0; i < MAX_LISTENERS; i++) net->lfds[i] = -1;
    net->out_pause = SL_NET_OUT_PAUSE;
    if (net->out_pause > cfg->max_output / 2) net->out_pause = (size_t)(cfg->max_output / 2);
    net->out_total_max = sl_config_output_total(cfg);

    /* listeners first: a port in use must fail before anything starts */
    if (sl__net_listen(net, err, errlen) != 0) goto fail;

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

    if (sl__net_acceptor_new(net, err, errlen) != 0) goto fail;

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
        rc = pthread_create(&net->acc_tid, NULL, sl__net_acceptor_main, net);
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
