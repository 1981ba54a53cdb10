/*
 * proto.h -- what a protocol module (under src/proto/) plugs into net.c, and the
 * reply slots net.c gives it ("net.c" here: the network layer, net.c and
 * its parts, net_int.h).  Each protocol is one sl_proto: its callbacks,
 * and the few ways net.c serves its connections differently (front,
 * timeout_ms, refuse_line, refuse_in_band, stop_waits, h2), so that the
 * network layer itself names no protocol.
 *
 * net.c owns sockets, buffers, fairness and limits; a protocol owns its
 * bytes: it parses requests out of what a connection has sent and writes
 * replies.  For each request it runs, in order, a protocol opens a reply
 * slot (sl_conn_slot), and when the answer is known -- at once, or later
 * when a backend answers asynchronously -- writes the whole reply into
 * sl_slot_buf(slot) and calls sl_slot_done(slot).  net.c sends replies in
 * slot order, whatever order they complete in, batched into one write per
 * loop turn as far as they are ready.
 *
 * Rules for a protocol:
 *   - write a slot's reply in one go (sl_slot_buf, the bytes, then
 *     sl_slot_done) without returning to the event loop in between;
 *   - after sl_slot_done, do not touch the connection again in that
 *     callback (the last reply may let net.c close and free it);
 *   - requests still in flight when their connection closes complete into
 *     orphaned slots that net.c discards.
 * Pending slots count against the connection's output cap (max-output)
 * and, beyond SL_NET_MAX_SLOTS, stop the connection being read.  A
 * request submitted to a backend that answers later weighs on the last
 * slot opened (what it holds in flight: service.h's charge), so a
 * protocol opens a request's slot before submitting it.
 *
 * net.c may spend a turn's budget while a request runs (t->cmds = 0, when
 * the connection's replies passed its output bound): the protocol checks
 * the budget before each request and stops there, as for any spent
 * budget; the request that crossed the bound completes.
 */
#ifndef SL_PROTO_H
#define SL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "service.h"

typedef struct sl_conn sl_conn;
typedef struct sl_slot sl_slot;

/* A client's budget in one loop turn (net.h: SL_NET_TURN_*). */
typedef struct sl_turn {
    size_t cmds, bytes;
} sl_turn;

/* What running a slice of input ended with. */
enum sl_proto_status {
    SL_PROTO_AGAIN, /* everything complete was run; waiting for more bytes */
    SL_PROTO_TURN,  /* the turn's budget is spent; complete requests may remain */
    SL_PROTO_CLOSE, /* QUIT or a protocol error: close after the replies */
    SL_PROTO_NOMEM, /* out of memory: drop the connection */
};

typedef struct sl_proto {
    const char *name; /* "resp" */
    /* Runs the complete requests at the start of p[0..len) at time now
     * (wall clock, ms, read once per turn), within budget t (decrement
     * t->cmds per request and t->bytes by what is consumed; stop before a
     * request when either is 0, even if it became 0 during the previous
     * request -- see above).  Sets *used
     * to the bytes consumed; returns an sl_proto_status.  p is valid only
     * during the call. */
    int (*run)(sl_conn *c, const char *p, size_t len, int64_t now, sl_turn *t, size_t *used);
    /* Answers a framing failure found by net.c (input beyond max-command)
     * with a last reply; the connection is then closed. */
    void (*fatal)(sl_conn *c, const char *msg);
    /* Bytes of per-worker scratch the protocol wants (sl_conn_scratch):
     * e.g. the parsed command being run. */
    size_t scratch_size;
    /* Called once as a connection is freed, with its pdata (possibly
     * NULL): frees what the protocol keeps for that connection.  NULL:
     * nothing to free. */
    void (*closed)(void *pdata);
    /* The server is stopping and c's last requests ran (net.c's stop):
     * the protocol may write a last word into a slot -- HTTP/2's GOAWAY
     * (src/proto/grpc/).  The connection then closes after its replies.
     * NULL: nothing to say. */
    void (*stop)(sl_conn *c);

    /* How net.c serves the protocol's connections: the same for every
     * protocol but for these (all zero: as RESP's). */
    int front; /* what its decisions and clients count under (stats.h: SL_FRONT_*) */
    /* Its idle-timeout and recv-timeout are never unbounded: when not
     * configured, this many ms (and idle-timeout no longer than
     * recv-timeout).  HTTP's: SL_NET_HTTP_TIMEOUT_MS.  0: as configured. */
    int64_t timeout_ms;
    /* Sent to a client beyond max-clients on a plain socket before it is
     * closed (a TLS client could not read it before a handshake): RESP's
     * error line.  NULL: closed without a word. */
    const char *refuse_line;
    /* 1: a client beyond max-clients is served uncounted instead, at most
     * SL_NET_REFUSED_MAX at once, each for at most SL_NET_REFUSED_MS, for
     * the protocol to refuse its request (sl_conn_refused: HTTP's 503). */
    unsigned refuse_in_band : 1;
    /* 1: stopping, a request under way (partly read) is read until whole,
     * within the stop deadline, and answered (HTTP's with Connection:
     * close) rather than cut. */
    unsigned stop_waits : 1;
    /* 1: over TLS, ALPN selects "h2" (tls.h: HTTP/2, gRPC). */
    unsigned h2 : 1;
} sl_proto;

/* Opens the next reply slot of c; NULL when out of memory. */
sl_slot *sl_conn_slot(sl_conn *c);
/* Where to write the slot's reply. */
sl_buf *sl_slot_buf(sl_slot *s);
/* The slot's reply is complete (see the rules above). */
void sl_slot_done(sl_slot *s);
/* Where a reply made now goes straight to when c has no slot pending and
 * is being served (or is detached): what sl_slot_buf gives its first
 * slot.  NULL otherwise.  A protocol answering at once may write there,
 * between sl_conn_hold and sl_conn_release, instead of opening a slot. */
sl_buf *sl_conn_out_now(sl_conn *c);
/* Requests whose answers wait for something other than a backend (the
 * waiting room: RL.WAIT, wait.h) ask to be told if c's client goes while
 * they wait -- c is freed, or its client's end is read (EOF): fn(arg) is
 * called once, on the worker's thread, from inside net.c, and the hook is
 * cleared first; fn must not complete slots then (it marks its requests,
 * which complete on later events).  One hook per connection: its owner
 * keeps its requests in a list of its own (sl_conn_drop_arg reads the
 * arg set; fn NULL clears the hook). */
void sl_conn_on_drop(sl_conn *c, void (*fn)(void *), void *arg);
void *sl_conn_drop_arg(const sl_conn *c);
/* A request of c in flight that holds no reply slot -- HTTP/2's answers
 * leave through the session's own output, in its order, so a call waiting
 * for its backend cannot hold a place in the slot queue (src/proto/grpc/)
 * -- held and released by the protocol: counted as a pending slot is
 * (the output bound, SL_NET_MAX_SLOTS), and a closing c (the server
 * stopping) is closed only once none is held, within the stop deadline.
 * sl_conn_release ends one, after the protocol wrote its answer; after it,
 * as after sl_slot_done, do not touch c again in that callback (the last
 * one may let net.c close and free it). */
void sl_conn_hold(sl_conn *c);
void sl_conn_release(sl_conn *c);
/* A protocol that keeps partial requests itself rather than in net.c's
 * input (HTTP/2's streams: src/proto/grpc/) sets its own deadline: c is
 * cut in ms milliseconds, as recv-timeout cuts (idle 0) or idle-timeout
 * cuts (idle 1), unless the protocol moves it again or clears it (ms 0)
 * first.  A recv deadline that passes while net.c is not reading c (its
 * output backs up) starts again: that wait is ours.  No-op when detached. */
void sl_conn_deadline(sl_conn *c, int64_t ms, int idle);
/* SL_SLOT_DATA bytes of the slot's own (zeroed when it opens, aligned
 * for pointers and 64-bit integers), the protocol's until sl_slot_done: e.g. what a request
 * answered later needs, as the argument of its completion. */
#define SL_SLOT_DATA 24
void *sl_slot_data(sl_slot *s);

/* The worker's service context, for c's requests, and for the request of
 * slot s (also when s is orphaned). */
sl_svc_ctx *sl_conn_svc(sl_conn *c);
sl_svc_ctx *sl_slot_svc(sl_slot *s);
/* The worker's scratch for the protocol (proto.scratch_size bytes, zeroed
 * once): shared by every connection of the worker, valid during run. */
void *sl_conn_scratch(sl_conn *c);
/* The server's limits for c. */
const sl_config *sl_conn_cfg(const sl_conn *c);
/* One word the protocol keeps per connection (resp_commands.c: its state
 * of the connection -- who logged in, the protocol version, the name);
 * NULL when the connection opens; handed to proto.closed when the
 * connection is freed.  Only the connection's worker touches it. */
void *sl_conn_pdata(const sl_conn *c);
void sl_conn_set_pdata(sl_conn *c, void *p);
/* The client's address without its port ("10.0.0.7", "::1") in buf, or
 * NULL when it has none (a detached connection) or it cannot be read.  A
 * syscall: for rare commands (AUTH), not per request. */
const char *sl_conn_peer_host(const sl_conn *c, char *buf, size_t cap);
/* One end of c's socket as Redis's CLIENT INFO writes it, "ip:port"
 * ("[ip6]:port"): the client's (local 0) or sluiced's (local 1), in buf;
 * NULL as above.  And c's socket, -1 when it has none.  For CLIENT INFO. */
const char *sl_conn_addr(const sl_conn *c, int local, char *buf, size_t cap);
int sl_conn_fd(const sl_conn *c);
/* Whether the server is stopping (its answers should say so: HTTP's
 * Connection: close; a gRPC health check answers "not serving"), and
 * whether c came beyond max-clients (an HTTP client, not counted: its one
 * request is answered with a refusal). */
int sl_conn_stopping(const sl_conn *c);
int sl_conn_refused(const sl_conn *c);
/* Counts a protocol error (a connection closed for bad framing) and logs it. */
void sl_conn_protocol_error(sl_conn *c, const char *msg);

#endif
