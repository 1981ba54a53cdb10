/*
 * stats.h -- every number sluiced reports, kept in one place: INFO reads
 * them today, /metrics and the status page will read the same.
 *
 *   - per worker (sl_worker_stats, one cache-line-padded shard each,
 *     written only by its worker with relaxed stores, summed by readers):
 *     commands, error replies, protocol errors, bytes in and out,
 *     decisions by algorithm and outcome, and a decision-latency
 *     histogram;
 *   - per rule, by the rule's statistics name (sl_rule_stats): matched,
 *     allowed, denied, over_quota (over, in quota mode, and not what
 *     denied), shadow (over, but in shadow mode), elastic (passed above L
 *     on the spare pool).  The statistics name is Lyft's: the limit's
 *     descriptor path (sl_rule_node.path, "domain.key_value.key2"), with
 *     "#N" after it on a node of several limits -- never its `name:`,
 *     which envoyproxy/ratelimit uses only for `replaces` and
 *     current_limit.name.  Kept by name across rules reloads: a reload
 *     binds the new set's limits to the entries of their names
 *     (sl_stats_bind), so a rule's numbers go on counting through any
 *     number of reloads.
 *     (RL.RULES's own per-set counts, sl_rule_counts, still restart with
 *     each set, as documented.)  Entries are never freed before the server
 *     exits; at most SL_STATS_MAX_RULES names are tracked.
 *   - per value, for a rule whose descriptor names its statistics by the
 *     request's values (Lyft's detailed_metric / value_to_metric,
 *     sl_rules_metric_name): one more entry per name Lyft would use, found
 *     from the rule's entry (sl_stats_value_entry), counted as well as the
 *     rule's own.  At most SL_STATS_MAX_VALUES names per rule: past them a
 *     request counts under the rule's name only, and in its `overflow`.
 *     Per-value entries live in the same table, by name, as the rules'.
 *   - per limit override (a descriptor given its limit with the request,
 *     check.h): one entry per name envoyproxy/ratelimit gives it, its
 *     descriptorKey "domain.key_value.key2" (sl_stats_override_entries),
 *     held as a per-value name of an entry named after the domain (whose
 *     root no limit has): at most SL_STATS_MAX_VALUES override names per
 *     domain; past them, or for a name too long, the request counts under
 *     the domain's entry, and in its `overflow`.
 *   - per front (the protocol a decision came in by: RESP, HTTP, gRPC),
 *     in the worker's shard: decisions allowed and denied -- RL.ALLOW and
 *     GET /v1/allow's (not RL.PEEK), and RL.CHECK, POST /v1/check,
 *     forward-auth and ShouldRateLimit's, one each whatever the number of
 *     limits; the status page's totals and its decisions per second
 *     (history.h);
 *   - reloads ok / failed;
 *   - the network layer's: the reply bytes held for all clients (the
 *     max-output-total budget), clients cut over it, clients cut for a
 *     command not whole within recv-timeout; HTTP and gRPC clients
 *     connected now.
 *
 * The latency histogram is sampled: one decision in SL_STATS_LAT_SAMPLE per
 * worker is timed (CLOCK_MONOTONIC, from the request's submission to its
 * completion: for the local backend, the store's work), so timing costs a
 * fraction of a clock read per decision.  Buckets are upper bounds in
 * microseconds, SL_STATS_LAT_BOUNDS_US, plus +Inf.
 */
#ifndef SL_STATS_H
#define SL_STATS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"
#include "sluice.h"

struct sl_rules;

#define SL_STATS_LAT_SAMPLE  16
#define SL_STATS_LAT_NBOUNDS 13
#define SL_STATS_LAT_BOUNDS_US                                                                     \
    {                                                                                              \
        1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000                                \
    }
#define SL_STATS_MAX_RULES 100000
/* per-value names (detailed_metric, value_to_metric) one rule may have, and
 * the longest (bytes, as INFO writes them: sl_stats_value_entry) */
#define SL_STATS_MAX_VALUES 1000
#define SL_STATS_MAX_NAME   512

/* The fronts a decision comes in by (src/proto/): net.c tells the service
 * which one it is running (sl_svc_ctx.front).  Appended only. */
enum { SL_FRONT_RESP, SL_FRONT_HTTP, SL_FRONT_GRPC, SL_FRONTS };
/* "resp", "http", "grpc": by SL_FRONT_* */
extern const char *const sl_front_names[SL_FRONTS];

/* One worker's counters.  Written only by their worker (relaxed atomic
 * stores of load+1, which compile to plain moves), read by anyone. */
typedef struct sl_worker_stats {
    _Atomic uint64_t commands;
    _Atomic uint64_t decisions[SL_ALGO_COUNT];
    _Atomic uint64_t allowed[SL_ALGO_COUNT];
    _Atomic uint64_t denied[SL_ALGO_COUNT];
    _Atomic uint64_t errors;          /* error replies */
    _Atomic uint64_t protocol_errors; /* connections closed for bad frames */
    _Atomic uint64_t net_in;          /* bytes read from clients */
    _Atomic uint64_t net_out;         /* bytes written to clients */
    _Atomic uint64_t checks;          /* RL.CHECK decisions */
    _Atomic uint64_t checks_denied;
    _Atomic uint64_t batched;                       /* RL.ALLOW decided in a batch of two or more
                                                       (service.h: sl_svc_allow_many) */
    _Atomic uint64_t front_allowed[SL_FRONTS];      /* decisions allowed, by front (see the top) */
    _Atomic uint64_t front_denied[SL_FRONTS];       /* ... denied */
    _Atomic uint64_t lat[SL_STATS_LAT_NBOUNDS + 1]; /* sampled decisions per bucket */
    _Atomic uint64_t lat_sum_ns;                    /* their total time */
    unsigned lat_tick;                              /* the worker's sampling counter */
    char pad[64];
} sl_worker_stats;

static inline void sl_stat_inc(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* One decision of front (SL_FRONT_*) in worker shard w: allowed or not. */
static inline void sl_stats_decided(sl_worker_stats *w, int front, int allowed)
{
    if (front < 0 || front >= SL_FRONTS) front = SL_FRONT_RESP;
    sl_stat_inc(allowed ? &w->front_allowed[front] : &w->front_denied[front], 1);
}

static inline uint64_t sl_stat_get(_Atomic uint64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

struct sl_stats_values;

/* One rule's numbers, by name, across reloads -- or one per-value name's.
 * Any worker adds (relaxed atomic adds).  matched = allowed + denied +
 * over_quota + shadow. */
typedef struct sl_rule_stats {
    _Atomic uint64_t matched;                 /* requests that evaluated the limit */
    _Atomic uint64_t allowed;                 /* ... and the limit allowed (elastic included) */
    _Atomic uint64_t denied;                  /* ... it was over, enforced (L = 0 included), or in
                                                 quota mode with every quota descriptor over */
    _Atomic uint64_t over_quota;              /* ... it was over, in quota mode, and the request
                                                 was not denied for it (OVER_QUOTA) */
    _Atomic uint64_t shadow;                  /* ... it was over, in shadow mode: allowed anyway */
    _Atomic uint64_t elastic;                 /* ... it passed above L on the spare pool */
    _Atomic uint64_t overflow;                /* ... its per-value name was not tracked (over
                                                 SL_STATS_MAX_VALUES, too long, table full) */
    _Atomic(struct sl_stats_values *) values; /* its per-value names (read without
                                                 a lock); NULL until the first */
    _Atomic size_t nvalues;                   /* names in values: written under
                                                 sl_stats.mu, read by anyone */
    int per_value;                            /* bound to a node that names its statistics
                                                 per value (INFO shows values= and
                                                 overflow=); under sl_stats.mu */
    uint64_t hash;                            /* of name */
    char name[];                              /* NUL-terminated */
} sl_rule_stats;

typedef struct sl_stats {
    int nworkers;
    sl_worker_stats *workers; /* nworkers shards */
    pthread_mutex_t mu;       /* guards the rule table's shape (not the counts) */
    sl_rule_stats **rules;    /* open addressing by name; cap a power of two */
    size_t nrules, cap;
    struct sl_stats_values *retired; /* per-value tables outgrown: freed at exit
                                        (a worker may still be reading one) */
    sl_rule_stats *domains;          /* not in the table, named "": its per-value
                                        names are the domains' override entries
                                        (sl_stats_override_entries) */
    _Atomic uint64_t untracked;      /* limits not bound: over SL_STATS_MAX_RULES */
    _Atomic uint64_t reloads_ok;
    _Atomic uint64_t reloads_failed;
    /* the network layer's (net.c), any worker adds */
    _Atomic int64_t output_bytes;      /* replies held for all clients now (a gauge) */
    _Atomic uint64_t cut_output_total; /* clients closed: over max-output-total */
    _Atomic uint64_t cut_recv;         /* clients closed: a command not whole in recv-timeout */
    _Atomic uint64_t tls_handshakes;   /* TLS handshakes completed */
    _Atomic uint64_t tls_failures;     /* TLS connections closed before their handshake completed */
    _Atomic int64_t http_clients;      /* HTTP(S) connections now (a gauge; src/proto/http) */
    _Atomic int64_t grpc_clients;      /* gRPC connections now (a gauge; src/proto/grpc) */
} sl_stats;

/* Initialises s with nworkers zeroed shards.  Returns 0 or -1 (no memory). */
int sl_stats_init(sl_stats *s, int nworkers);
void sl_stats_free(sl_stats *s);

/* Binds every limit of set r (before it serves: the set is still being
 * built) to the entry of its name, creating entries for new names.
 * Thread-safe against other binds and readers. */
void sl_stats_bind(sl_stats *s, struct sl_rules *r);

/* The hook for sl_live_on_load (live.h), arg = the sl_stats: binds a new
 * set (r) before it serves and counts the load, or counts a refused one
 * (r = NULL). */
void sl_stats_on_rules_load(void *arg, struct sl_rules *r);

/* The entry to count a request of rule rs under its per-value name, for a
 * limit of a node with metric_dynamic (rules.h): name (len bytes, any
 * bytes) as sl_rules_metric_name wrote it, with "#nth" appended when nth >
 * 0 (the limit's number on a node of several, as the rule's own derived
 * name has it).  The name is kept as INFO writes it: bytes outside '!'..'~'
 * and '%', ':', ',' as %XX.  Returns rs itself when that name is rs's own;
 * the entry of that name (created if new, shared with any entry of the same
 * name); or NULL when it is not tracked -- rs already has
 * SL_STATS_MAX_VALUES names, the name is longer than SL_STATS_MAX_NAME, the
 * table is full or memory is out -- and the caller counts rs->overflow.
 * Lock-free for a name rs already has (O(length of the name)); a new name
 * takes the table's lock.  Any thread. */
sl_rule_stats *sl_stats_value_entry(sl_stats *s, sl_rule_stats *rs, const char *name, size_t len,
                                    int nth);

/* Gives each limit override of plan (check.h: an item whose limit is
 * plan->over[d]) the statistics entry envoyproxy/ratelimit counts it
 * under: plan->over[d].stats = the entry of descriptorKey(domain, descs[d])
 * -- "domain.key_value.key2": descs[d]'s entries joined by '.', each "key",
 * or "key_value" when the value is not empty -- kept as a per-value name
 * (written as INFO writes it) of the domain's entry (named (domain, dlen),
 * created at the first override, values= and overflow= in INFO).  Past
 * SL_STATS_MAX_VALUES names of that domain, or for a name longer than
 * SL_STATS_MAX_NAME, the item gets the domain's entry and its overflow
 * counts one (here, when planned); when even that is not tracked (the
 * table full, no memory) the item keeps NULL and is not counted.  The
 * caller counts the entries as any limit's (service.c, count_rules).
 * Called before the request is submitted, while descs (the caller's
 * bytes) are there, and only for a request with overrides; lock-free for
 * names already known, a new name takes the table's lock.  Any thread. */
struct sl_check_plan;
void sl_stats_override_entries(sl_stats *s, struct sl_check_plan *plan, const char *domain,
                               size_t dlen, const sl_rule_entry *const *descs, const int *ndesc);

/* Calls fn for every tracked rule, in no particular order, under the
 * table's lock (fn must not call back into s). */
void sl_stats_foreach_rule(sl_stats *s, void (*fn)(const sl_rule_stats *rs, void *arg), void *arg);

/* Copies up to max of rs's per-value entries (its names past the rule's
 * own, sl_stats_value_entry) into out, in no particular order.  Returns
 * how many rs has, which may be more than max.  Lock-free (as a worker
 * finds a name): any thread, while others add names. */
size_t sl_stats_values_list(const sl_rule_stats *rs, const sl_rule_stats **out, size_t max);

/* Records one sampled latency of ns nanoseconds in worker shard w. */
void sl_stats_latency(sl_worker_stats *w, int64_t ns);

/* The totals of every shard, for readers. */
typedef struct sl_stats_sum {
    uint64_t commands, errors, protocol_errors, net_in, net_out, checks, checks_denied, batched;
    uint64_t decisions[SL_ALGO_COUNT], allowed[SL_ALGO_COUNT], denied[SL_ALGO_COUNT];
    uint64_t lat[SL_STATS_LAT_NBOUNDS + 1], lat_count, lat_sum_ns;
    uint64_t front_allowed[SL_FRONTS], front_denied[SL_FRONTS];
} sl_stats_sum;

void sl_stats_sum_get(const sl_stats *s, sl_stats_sum *out);

#endif
