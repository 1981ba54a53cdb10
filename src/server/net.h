/*
 * net.h -- where sluiced meets sockets: listeners, worker threads and
 * client connections, on libevent (the network layer: src/server/net.c and
 * its parts by concern, listed in net_int.h).
 *
 * One acceptor thread owns the listening sockets (every address in
 * cfg->binds) and hands each accepted connection to the worker thread with
 * the fewest connections; each worker runs its own event_base and serves its
 * connections start to finish: read, hand the bytes to the protocol
 * (proto.h: parse and run, src/proto/resp/ or, on the HTTP listeners,
 * src/proto/http/), send the replies in request
 * order (reply slots).  All workers share the one backend (backend.h).  The
 * choices and the limits are described in docs/sluiced.md.
 *
 * Threads: sl_net_start, sl_net_stop, sl_net_join and sl_net_free are
 * called from one thread (main).  The caller must ignore SIGPIPE before
 * sl_net_start; the threads it starts block every signal, so signals are
 * delivered to the caller's thread.
 */
#ifndef SL_NET_H
#define SL_NET_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "server.h"

/* Reading and fairness. */
#define SL_NET_READ_CHUNK (64 * 1024) /* bytes asked of one read(2) */
#define SL_NET_TURN_BYTES (64 * 1024) /* input consumed per client per loop turn */
#define SL_NET_TURN_CMDS  1024        /* commands run per client per loop turn */
/* Replies built for one client per loop turn: a client whose commands are
 * costly to answer (INFO, RL.RULES) ends its turn once this much is built,
 * so one round over many such clients stays short for everyone else. */
#define SL_NET_TURN_OUT (16 * 1024)
/* Backpressure: a client's turn ends as soon as the replies held for it
 * (in user space: the kernel's socket buffer is full by then) pass this
 * many bytes; while they still do after the send, it is neither read nor
 * served -- not even the commands it already sent -- until they are sent.
 * Effective value: min(this, max_output / 2). */
#define SL_NET_OUT_PAUSE (64 * 1024)
/* Memory back to the system: malloc_trim SL_NET_TRIM_MS after a worker
 * released this many bytes of buffers, at most once per SL_NET_TRIM_MS in
 * the process. */
#define SL_NET_TRIM_BYTES (1024 * 1024)
#define SL_NET_TRIM_MS    1000
/* Closing: after the last reply, how long to wait for the client's FIN
 * while discarding what it still sends (so the kernel does not turn the
 * close into a reset that could destroy replies not yet read). */
#define SL_NET_LINGER_MS 1000
/* Shutdown: how long sl_net_stop lets workers finish replies, and how much
 * input that already reached a client's socket is still read and run. */
#define SL_NET_STOP_MS   2000
#define SL_NET_STOP_READ (256 * 1024)
/* Reply slots (proto.h): a client with more requests than this in flight
 * is not read until some are answered. */
#define SL_NET_MAX_SLOTS 4096
/* Requests in flight at a backend that answers later (Redis): what they
 * hold -- each its context, a CHECK its plan (~20 KB), the backend its
 * entry and command (~2.6 KB for an RL.ALLOW): service.h's charge -- is
 * counted as the connection's (max-output, max-output-total, which
 * counts the requests of closed connections too until they are
 * answered), and once a connection's requests hold this much, its turn ends and
 * it is neither read nor run until some are answered.  ~400 RL.ALLOWs
 * (six full Redis batches) or ~50 RL.CHECKs per connection. */
#define SL_NET_INFLIGHT_MAX (1024 * 1024)
/* Accept errors (e.g. out of file descriptors): pause accepting this long. */
#define SL_NET_ACCEPT_BACKOFF_MS 100

/* HTTP's connections (its sl_proto.timeout_ms: a protocol whose timeouts
 * are never unbounded): without --recv-timeout, a request not whole this
 * long after it began is cut, and a connection idle this long (or
 * --idle-timeout if shorter) is closed. */
#define SL_NET_HTTP_TIMEOUT_MS 10000

/* HTTP clients beyond max-clients (a protocol's sl_proto.refuse_in_band)
 * are served uncounted only to have their request answered 503
 * (sl_conn_refused): at most SL_NET_REFUSED_MAX of
 * them at once, each for at most SL_NET_REFUSED_MS (idle and request
 * deadline); any more are closed as they are accepted, as a refused TLS
 * or gRPC client is.  So every front together holds at most max-clients +
 * SL_NET_REFUSED_MAX connections, and the open-file limit is made to
 * leave room for both (main.c). */
#define SL_NET_REFUSED_MAX 16
#define SL_NET_REFUSED_MS  1000

typedef struct sl_net sl_net;

/* The number of worker threads for cfg: --threads, or one per CPU this
 * process may run on (its affinity mask and cgroup CPU quota: sl__cpu_count).
 * The caller sizes srv->stats with it before sl_net_start. */
int sl_net_default_workers(const sl_config *cfg);

/* Binds every address of srv->cfg (IPv4 and IPv6; port 0 picks a free port,
 * written to srv->port; none with --port off), and with --tls-port a TLS
 * listener on each too (srv->tls, tls.h, must be made first; the port goes
 * to srv->tls_port); starts srv->stats.nworkers worker threads, each
 * with its service context (service.h) and backend channel, and the
 * acceptor.  Clients speak `proto` (src/proto/).  With http (NULL: none)
 * and --http-port other than 0, each bind address also gets an HTTP
 * listener (srv->http_port), and with --https-port an HTTPS one (its TLS
 * as --tls-port's), whose clients speak http on the same workers, slots
 * and limits; an HTTP client beyond max-clients is served uncounted, for
 * the protocol to refuse (sl_conn_refused).
 * Returns the net, or NULL with a message in err, e.g.
 * "cannot listen on 127.0.0.1:6390 (--port): Address already in use" (the
 * option that asked for the port in parentheses: --port, --tls-port,
 * --http-port, --https-port, --grpc-port, --grpc-tls-port); nothing is
 * left running then. */
sl_net *sl_net_start(sl_srv *srv, const sl_proto *proto, const sl_proto *http, char *err,
                     size_t errlen);

/* Starts a graceful stop and returns at once: no more connections are
 * accepted; each worker runs the complete commands its clients sent before
 * the stop (already read, or already in the socket: up to SL_NET_STOP_READ
 * bytes a client), sends their replies, then closes its connections.  Workers
 * give up on replies not sent within SL_NET_STOP_MS.  Only write(2) is
 * called, so this may be called from a signal handler.  Idempotent. */
void sl_net_stop(sl_net *net);

/* Waits for every thread to exit (after sl_net_stop). */
void sl_net_join(sl_net *net);

/* A connection without a socket, to run a protocol in-process (the unit
 * tests do): its replies are appended to *sink in request order as they
 * complete.  Its requests run on context x (not owned) with cfg's limits.
 * Free it only once every request it started has completed.  NULL when
 * out of memory. */
sl_conn *sl_conn_detached_new(const sl_proto *proto, sl_svc_ctx *x, const sl_config *cfg,
                              sl_buf *sink);
/* Runs p[0..len) as one turn without budget; returns the protocol's
 * status (proto.h) and sets *used. */
int sl_conn_detached_feed(sl_conn *c, const char *p, size_t len, int64_t now, size_t *used);
void sl_conn_detached_free(sl_conn *c);

/* Frees the net.  After sl_net_join. */
void sl_net_free(sl_net *net);

/* The "host:port" of listener i (i < sl_net_naddrs), e.g. "[::1]:6390";
 * the plain listeners first, then the TLS ones (sl_net_addr_tls: 1), then
 * the HTTP ones (sl_net_addr_http: 1), then the HTTPS ones
 * (sl_net_addr_https: 1). */
int sl_net_naddrs(const sl_net *net);
const char *sl_net_addr(const sl_net *net, int i);
int sl_net_addr_tls(const sl_net *net, int i);
int sl_net_addr_http(const sl_net *net, int i);
int sl_net_addr_https(const sl_net *net, int i);
/* 1: listener i is a gRPC one (--grpc-port, srv->grpc), listed last. */
int sl_net_addr_grpc(const sl_net *net, int i);

#endif
