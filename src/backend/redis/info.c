/*
 * info.c -- what the Redis backend tells of itself through the seam
 * (backend.h: ops.info, ops.metrics, ops.state): its state and counters
 * (sl_backend_redis_info), each server's (sl_backend_redis_node), INFO's
 * Backend lines and the /metrics families.  Any thread.
 */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "redis/redis_int.h"

/* Whether node i decides anything: every server of one Redis or a ring;
 * in a cluster, a master that serves a slot in the latest map (one that
 * lost its slots -- a failover, a migration -- no longer counts). */
static int serves(redis *r, int i)
{
    int any = 0;
    if (!r->cluster) return 1;
    pthread_mutex_lock(&r->lock);
    for (int k = 0; k < SL_SLOTS && !any; k++) any = r->map->node[k] == i;
    pthread_mutex_unlock(&r->lock);
    return any;
}

int sl_backend_redis_info(sl_backend *b, sl_redis_info *out)
{
    if (b == NULL || b->ops != &sl__redis_ops) return -1;
    redis *r = (redis *)b;
    memset(out, 0, sizeof *out);
    snprintf(out->url, sizeof out->url, "%s", r->shown);
    out->up = 1; /* up while every node is; down since the first that is not */
    for (int i = 0; i < r->nnodes; i++) {
        int64_t since = atomic_load(&r->node[i].down_since_ms);
        if (atomic_load(&r->node[i].up) || !serves(r, i)) continue;
        if (out->up || (since != 0 && since < out->down_since_ms)) out->down_since_ms = since;
        out->up = 0;
    }
    out->nodes = r->nnodes;
    out->errors = atomic_load(&r->errors);
    out->timeouts = atomic_load(&r->timeouts);
    out->reconnects = atomic_load(&r->reconnects);
    for (int i = 0; i < 3; i++) out->fallback[i] = atomic_load(&r->fallback[i]);
    out->cache_hits = atomic_load(&r->cache_hits);
    out->inflight = atomic_load(&r->inflight);
    out->policy = sl_backend_policy_name(r->o.policy);
    out->timeout_ms = r->o.timeout_ms;
    out->fleet_size = r->o.fleet_size;
    out->deny_cache = r->o.deny_cache;
    int nconn = atomic_load(&r->nconn), nmod = atomic_load(&r->nmod), at_start = 0;
    for (int i = 0; i < r->nnodes; i++) at_start += r->node[i].module_at_start;
    out->path = nconn == 0      ? (at_start == 0           ? "script"
                                   : at_start == r->nnodes ? "module"
                                                           : "mixed")
                : nmod == 0     ? "script"
                : nmod == nconn ? "module"
                                : "mixed";
    out->module_channels = nmod;
    pthread_mutex_lock(&r->lock);
    snprintf(out->last_error, sizeof out->last_error, "%s", r->last_error);
    pthread_mutex_unlock(&r->lock);
    if (r->sentinel != NULL) sl__sentinel_master(r, out->master, sizeof out->master);
    return 0;
}

int sl_backend_redis_node(sl_backend *b, int i, sl_redis_node_info *out)
{
    if (b == NULL || b->ops != &sl__redis_ops) return -1;
    redis *r = (redis *)b;
    if (i < 0 || i >= r->nnodes) return -1;
    memset(out, 0, sizeof *out);
    snprintf(out->url, sizeof out->url, "%s", r->node[i].url.shown);
    out->up = atomic_load(&r->node[i].up);
    out->down_since_ms = atomic_load(&r->node[i].down_since_ms);
    out->share = r->ring != NULL ? sl_ring_share(r->ring, i) : 1.0;
    out->slots = -1;
    if (r->cluster) { /* the slots it serves in the latest map */
        int slots = 0;
        pthread_mutex_lock(&r->lock);
        for (int k = 0; k < SL_SLOTS; k++) slots += r->map->node[k] == i;
        pthread_mutex_unlock(&r->lock);
        out->share = (double)slots / SL_SLOTS;
        out->slots = slots;
    }
    return 0;
}

/* INFO's Backend section (backend.h: ops.info): the state, the options,
 * the counters, then one line per server, each with its share of the
 * ring (a cluster's master: of the slots, and their number). */
void sl__redis_info_lines(sl_backend *b,
                          void (*line)(void *arg, const char *name, const char *value), void *arg)
{
    sl_redis_info ri;
    char v[SL_REDIS_URL_MAX + 64];
    if (sl_backend_redis_info(b, &ri) != 0) return;
#define NUM(name, x) (snprintf(v, sizeof v, "%llu", (unsigned long long)(x)), line(arg, name, v))
    line(arg, "backend_url", ri.url);
    line(arg, "backend_status", ri.up ? "up" : "down");
    NUM("backend_down_since_unix_ms", ri.down_since_ms);
    NUM("backend_timeout_ms", ri.timeout_ms);
    line(arg, "backend_on_error", ri.policy);
    NUM("backend_fleet_size", ri.fleet_size);
    line(arg, "backend_deny_cache", ri.deny_cache ? "yes" : "no");
    line(arg, "backend_redis_path", ri.path);
    NUM("backend_errors", ri.errors);
    NUM("backend_timeouts", ri.timeouts);
    NUM("backend_reconnects", ri.reconnects);
    NUM("backend_fallback_deny", ri.fallback[SL_REDIS_DENY]);
    NUM("backend_fallback_allow", ri.fallback[SL_REDIS_ALLOW]);
    NUM("backend_fallback_local", ri.fallback[SL_REDIS_LOCAL]);
    NUM("backend_deny_cache_hits", ri.cache_hits);
    NUM("backend_inflight", ri.inflight);
    redis *r = (redis *)b; /* --durability (durable.c) */
    if (r->o.durability > 0)
        snprintf(v, sizeof v, "replicas:%d", r->o.durability);
    else
        snprintf(v, sizeof v, "none");
    line(arg, "backend_durability", v);
    NUM("backend_durability_waits", atomic_load(&r->waits));
    NUM("backend_durability_waits_short", atomic_load(&r->waits_short));
    NUM("backend_durability_replaced", atomic_load(&r->replaced));
    line(arg, "backend_lease", r->o.lease ? "on" : "off"); /* --lease (lease.c) */
    uint64_t taken = atomic_load(&r->lease_leases), ended = atomic_load(&r->lease_ended);
    NUM("backend_leases_outstanding", taken > ended ? taken - ended : 0);
    NUM("backend_leases_taken", taken);
    NUM("backend_lease_units_leased", atomic_load(&r->lease_units));
    NUM("backend_lease_units_returned", atomic_load(&r->lease_returned));
    NUM("backend_lease_units_expired", atomic_load(&r->lease_expired));
    NUM("backend_lease_decisions", atomic_load(&r->lease_served));
    line(arg, "backend_last_error", ri.last_error);
    NUM("backend_nodes", ri.nodes);
#undef NUM
    sl_redis_node_info ni;
    for (int i = 0; sl_backend_redis_node(b, i, &ni) == 0; i++) {
        char name[32];
        snprintf(name, sizeof name, "backend_node%d", i);
        int len = snprintf(v, sizeof v, "url=%s,status=%s,share=%.2f", ni.url,
                           ni.up ? "up" : "down", ni.share * 100);
        if (ni.slots >= 0 && len > 0 && (size_t)len < sizeof v) /* a cluster's */
            snprintf(v + len, sizeof v - (size_t)len, ",slots=%d", ni.slots);
        line(arg, name, v);
    }
    if (((redis *)b)->sentinel != NULL) sl__sentinel_info_lines((redis *)b, line, arg);
}

int sl__redis_metrics(sl_backend *b, struct evbuffer *out)
{
    sl_redis_info in;
    if (sl_backend_redis_info(b, &in) != 0) return 0;
    int rc = 0;
#define FAMILY(name, type, help)                                                                   \
    rc |= evbuffer_add_printf(out, "# HELP " name " " help "\n# TYPE " name " " type "\n") < 0
#define SAMPLE(fmt, ...) rc |= evbuffer_add_printf(out, fmt "\n", __VA_ARGS__) < 0
    FAMILY("sluice_backend_up", "gauge", "1 while every worker has its Redis connection.");
    SAMPLE("sluice_backend_up %d", in.up);
    FAMILY("sluice_backend_down_since_seconds", "gauge",
           "Wall-clock time the Redis backend went down; 0 when up.");
    SAMPLE("sluice_backend_down_since_seconds %.3f", (double)in.down_since_ms / 1e3);
    FAMILY("sluice_backend_errors_total", "counter", "Redis error replies and lost connections.");
    SAMPLE("sluice_backend_errors_total %llu", (unsigned long long)in.errors);
    FAMILY("sluice_backend_timeouts_total", "counter",
           "Requests Redis did not answer within --backend-timeout.");
    SAMPLE("sluice_backend_timeouts_total %llu", (unsigned long long)in.timeouts);
    FAMILY("sluice_backend_reconnects_total", "counter", "Redis connections made again.");
    SAMPLE("sluice_backend_reconnects_total %llu", (unsigned long long)in.reconnects);
    FAMILY("sluice_backend_fallback_total", "counter",
           "Requests answered by --on-backend-error, by policy.");
    for (int i = 0; i < 3; i++)
        SAMPLE("sluice_backend_fallback_total{policy=\"%s\"} %llu", sl_backend_policy_name(i),
               (unsigned long long)in.fallback[i]);
    FAMILY("sluice_backend_deny_cache_hits_total", "counter",
           "Requests the local deny cache denied without asking Redis.");
    SAMPLE("sluice_backend_deny_cache_hits_total %llu", (unsigned long long)in.cache_hits);
    FAMILY("sluice_backend_inflight", "gauge", "Requests sent to Redis, not yet answered.");
    SAMPLE("sluice_backend_inflight %llu", (unsigned long long)in.inflight);
    redis *r = (redis *)b; /* --durability (durable.c) */
    FAMILY("sluice_backend_durability_waits_total", "counter",
           "WAITs sent after a batch's writes (--durability replicas:N).");
    SAMPLE("sluice_backend_durability_waits_total %llu", (unsigned long long)atomic_load(&r->waits));
    FAMILY("sluice_backend_durability_waits_short_total", "counter",
           "WAITs that did not confirm N replicas within --backend-timeout.");
    SAMPLE("sluice_backend_durability_waits_short_total %llu",
           (unsigned long long)atomic_load(&r->waits_short));
    FAMILY("sluice_backend_durability_replaced_total", "counter",
           "Allowed answers replaced by --on-backend-error's: their WAIT fell short.");
    SAMPLE("sluice_backend_durability_replaced_total %llu",
           (unsigned long long)atomic_load(&r->replaced));
    uint64_t taken = atomic_load(&r->lease_leases), ended = atomic_load(&r->lease_ended);
    FAMILY("sluice_backend_leases_outstanding", "gauge",
           "Leases of quota this node holds (--lease on).");
    SAMPLE("sluice_backend_leases_outstanding %llu",
           (unsigned long long)(taken > ended ? taken - ended : 0));
    FAMILY("sluice_backend_leases_total", "counter", "Leases of quota taken from Redis.");
    SAMPLE("sluice_backend_leases_total %llu", (unsigned long long)taken);
    FAMILY("sluice_backend_lease_units_total", "counter",
           "Units of quota leased, handed back unspent, or expired unspent.");
    SAMPLE("sluice_backend_lease_units_total{what=\"leased\"} %llu",
           (unsigned long long)atomic_load(&r->lease_units));
    SAMPLE("sluice_backend_lease_units_total{what=\"returned\"} %llu",
           (unsigned long long)atomic_load(&r->lease_returned));
    SAMPLE("sluice_backend_lease_units_total{what=\"expired\"} %llu",
           (unsigned long long)atomic_load(&r->lease_expired));
    FAMILY("sluice_backend_lease_decisions_total", "counter",
           "Decisions answered from a lease, without asking Redis.");
    SAMPLE("sluice_backend_lease_decisions_total %llu",
           (unsigned long long)atomic_load(&r->lease_served));
    FAMILY("sluice_backend_module_connections", "gauge",
           "Redis connections sending the sluice module's commands instead of the script.");
    SAMPLE("sluice_backend_module_connections %d", in.module_channels);
#undef FAMILY
#undef SAMPLE
    if (((redis *)b)->sentinel != NULL) rc |= sl__sentinel_metrics((redis *)b, out) != 0;
    return rc ? -1 : 0;
}
