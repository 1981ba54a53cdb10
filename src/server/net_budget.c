/*
 * net_budget.c -- the output budget of all clients (max-output-total), and
 * memory back to the system.
 *
 * Each connection's held() bytes (net_int.h: unsent replies, replies done
 * behind an earlier slot, slots pending, what its requests in flight
 * weigh) are counted, when they change after a turn or a send
 * (sl__net_account), in the server's total (stats.output_bytes, an atomic)
 * and in its worker's size classes (hold[]: bytes held by connections
 * holding [2^b, 2^(b+1)) bytes).  A worker that takes the total over the
 * budget sends every worker a shed token through its pipe; each then cuts
 * its clients of the size classes that, from the largest down, hold the
 * excess across all workers, largest first, until the total is within the
 * budget (shed()).  The fast path -- every reply sent at once -- holds
 * nothing and touches none of it (its check is inline: net_int.h).
 *
 * Memory back to the system.  Buffers are freed as they drain (evbuffer
 * chains; the batch beyond SCRATCH_KEEP; pooled slots beyond SLOT_KEEP
 * and SLOT_POOL_MAX); SL_NET_TRIM_MS after SL_NET_TRIM_BYTES released, malloc_trim
 * returns free pages to the kernel, at most once per SL_NET_TRIM_MS.
 */
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "log.h"
#include "net_int.h"
#include "util.h"

#define SHED_LOG_PER_S 10 /* cut clients logged one by one per second per worker */

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
void sl__net_on_trim(evutil_socket_t fd, short what, void *arg)
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

void sl__net_release(worker *w, size_t n) { release(w, n); }

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

/* Counts c in the totals as holding `now` bytes, now != c->acct
 * (sl__net_account_as: the fast path is inline): the server's total
 * (stats.output_bytes) and its worker's size classes.  Taking the total
 * over max-output-total asks the workers to shed; a release may trim. */
void sl__net_account_move(conn *c, size_t now)
{
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

/* Requests of closed connections still in flight hold d bytes more (or
 * less): counted in the total as the worker's own, so closing
 * connections never frees room that their requests still take; no
 * connection is cut for them -- they end by their backend's answer or
 * timeout. */
void sl__net_account_orphans(worker *w, int64_t d)
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
           sl__net_conn_peer(c, pb, sizeof pb), w->id, c->acct, (long long)total,
           (unsigned long long)w->net->out_total_max, (unsigned long long)w->cut_unlogged);
    w->cut_unlogged = 0;
}

/* A PIPE_SHED token, or a shed request seen before serving a client
 * (sl__net_shed_due): while the output of all clients is over max-output-total,
 * cuts this worker's clients in the size classes that hold the excess
 * (shed_floor), the one holding the most first.  Every worker does the
 * same, each re-reading the total, so together they cut the largest
 * holders across the server, to within a size class, and stop as soon as
 * the total is back within the budget.  O(clients) per cut; runs only
 * over the budget.  Returns 1 if `watch` (may be NULL) was cut. */
int sl__net_shed(worker *w, const conn *watch)
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
        sl__net_conn_cut(big, "max-output-total");
    }
    return watch_cut;
}

/* Before c is served: a shed asked of this worker runs now, not when its
 * PIPE_SHED token comes round -- a worker serving a batch of ready clients
 * would otherwise build a reply for each of them first, and the total
 * could overshoot max-output-total by a batch of replies instead of one
 * per worker.  One relaxed load when nothing is asked.  Returns 1 if c
 * itself was cut (c is freed). */
