/*
 * resp_info.c -- INFO [section ...]: the server's state as Redis's INFO
 * shows its own, "name:value" lines under "# Section" headers (SPEC
 * section 7; `sluicectl top` parses them).  Sections: server, clients,
 * stats, latency, memory, rules, rulestats, backend (its lines after
 * backend_name are the backend's own: backend.h, ops.info), persistence.
 * File paths are shown to admin users only (path_for).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "config.h"
#include "journal.h"
#include "live.h"
#include "resp_int.h"
#include "util.h"
#include "wait.h"

static void info_line(sl_buf *b, const char *name, unsigned long long v)
{
    char line[160];
    int n = snprintf(line, sizeof line, "%s:%llu\r\n", name, v);
    sl_buf_add(b, line, (size_t)n);
}

static void info_text(sl_buf *b, const char *name, const char *v)
{
    char line[1200];
    int n = snprintf(line, sizeof line, "%s:%s\r\n", name, v);
    if (n > 0) sl_buf_add(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* One line of the backend's (sl_backend_info's callback). */
static void backend_line(void *arg, const char *name, const char *value)
{
    info_text(arg, name, value);
}

static int wants(const sl_resp_cmd *c, const char *section)
{
    if (c->argc < 2) return 1;
    for (int i = 1; i < c->argc; i++)
        if (arg_is(&c->argv[i], section) || arg_is(&c->argv[i], "all") ||
            arg_is(&c->argv[i], "default") || arg_is(&c->argv[i], "everything"))
            return 1;
    return 0;
}

/* One line of INFO rulestats: a rule's name or a per-value name (stats.h),
 * its counts, and for a rule whose names go per value, how many it has and
 * the requests counted past them.  Called under the statistics' lock. */
static void info_rule(const sl_rule_stats *rs, void *arg)
{
    sl_buf *b = arg;
    char line[400];
#define GET(f) (unsigned long long)sl_stat_get((_Atomic uint64_t *)&rs->f)
    int n = snprintf(line, sizeof line,
                     ":matched=%llu,allowed=%llu,denied=%llu,shadow=%llu,elastic=%llu,"
                     "over_quota=%llu",
                     GET(matched), GET(allowed), GET(denied), GET(shadow), GET(elastic),
                     GET(over_quota));
    if (rs->per_value && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n, ",values=%zu,overflow=%llu",
                      atomic_load_explicit((_Atomic size_t *)&rs->nvalues, memory_order_relaxed),
                      GET(overflow));
#undef GET
    if (n <= 0 || (size_t)n >= sizeof line) return; /* cannot happen: 9 numbers */
    sl_resp_raw(b, "rule_");
    sl_buf_add(b, rs->name, strlen(rs->name));
    sl_buf_add(b, line, (size_t)n);
    sl_resp_raw(b, "\r\n");
}

void sl__resp_cmd_info(req *q)
{
    const sl_resp_cmd *c = q->cmd;
    sl_srv *srv = q->x->srv;
    const sl_config *cfg = srv->cfg;
    sl_buf b = {0};
    sl_stats_sum sum;
    sl_backend_stats bs;
    sl_stats_sum_get(&srv->stats, &sum);
    sl_backend_stats_get(srv->backend, &bs);
    if (wants(c, "server")) {
        sl_resp_raw(&b, "# Server\r\n");
        info_text(&b, "sluice_version", SL_VERSION);
        info_text(&b, "redis_version", "7.0.0"); /* for clients that parse it */
        info_line(&b, "process_id", (unsigned long long)getpid());
        info_line(&b, "tcp_port", (unsigned long long)srv->port);
        info_line(&b, "tls_port", (unsigned long long)srv->tls_port);
        info_line(&b, "uptime_in_seconds", (unsigned long long)((q->now - srv->start_ms) / 1000));
        info_line(&b, "threads", (unsigned long long)srv->nworkers);
        info_text(&b, "backend", srv->backend->ops->name);
        info_text(&b, "trust_client_time", cfg->trust_client_time ? "yes" : "no");
        info_line(&b, "max_client_skew_ms", (unsigned long long)cfg->max_client_skew_ms);
        /* the clock decisions use, and how far the wall clock is from it
         * (non-zero after a wall-clock step: docs/sluiced.md, "Time") */
        char skew[32];
        snprintf(skew, sizeof skew, "%lld", (long long)(sl__wall_ms() - q->now));
        info_line(&b, "clock_ms", (unsigned long long)q->now);
        info_text(&b, "wall_clock_offset_ms", skew);
        info_text(&b, "config_file", path_for(q, cfg->config_file));
        info_text(&b, "auth_required", sl_auth_required(srv->auth) ? "yes" : "no");
        info_text(&b, "protected_mode", cfg->protected_mode ? "yes" : "no");
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "clients")) {
        sl_resp_raw(&b, "# Clients\r\n");
        info_line(&b, "connected_clients", (unsigned long long)atomic_load(&srv->clients));
        info_line(&b, "http_clients", (unsigned long long)atomic_load(&srv->stats.http_clients));
        info_line(&b, "maxclients", (unsigned long long)cfg->max_clients);
        info_line(&b, "max_command_bytes", cfg->max_command);
        info_line(&b, "max_output_bytes", cfg->max_output);
        info_line(&b, "max_output_total_bytes", sl_config_output_total(cfg));
        info_line(&b, "client_output_bytes",
                  (unsigned long long)atomic_load(&srv->stats.output_bytes));
        sl_wait_stats ws; /* the waiting room (wait.h) */
        sl_wait_stats_get(srv->wait, &ws);
        info_line(&b, "waiting_clients", (unsigned long long)ws.waiting);
        info_line(&b, "waiters_served", ws.served);
        info_line(&b, "waiters_timed_out", ws.timed_out);
        info_line(&b, "waiters_dropped", ws.dropped);
        info_line(&b, "waiters_refused", ws.refused);
        info_line(&b, "idle_timeout_ms", (unsigned long long)cfg->idle_timeout_ms);
        info_line(&b, "recv_timeout_ms", (unsigned long long)cfg->recv_timeout_ms);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "stats")) {
        uint64_t all_dec = 0, all_ok = 0, all_no = 0;
        sl_resp_raw(&b, "# Stats\r\n");
        info_line(&b, "total_connections_received", atomic_load(&srv->connections));
        info_line(&b, "rejected_connections", atomic_load(&srv->rejected));
        info_line(&b, "total_commands_processed", sum.commands);
        info_line(&b, "error_replies", sum.errors);
        info_line(&b, "protocol_errors", sum.protocol_errors);
        info_line(&b, "clients_cut_output", atomic_load(&srv->cut_output));
        info_line(&b, "clients_cut_output_total", atomic_load(&srv->stats.cut_output_total));
        info_line(&b, "clients_cut_idle", atomic_load(&srv->cut_idle));
        info_line(&b, "clients_cut_recv", atomic_load(&srv->stats.cut_recv));
        info_line(&b, "tls_handshakes", atomic_load(&srv->stats.tls_handshakes));
        info_line(&b, "tls_handshake_failures", atomic_load(&srv->stats.tls_failures));
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            all_dec += sum.decisions[a];
            all_ok += sum.allowed[a];
            all_no += sum.denied[a];
        }
        info_line(&b, "decisions", all_dec);
        info_line(&b, "allowed", all_ok);
        info_line(&b, "denied", all_no);
        info_line(&b, "decisions_batched", sum.batched);
        for (int a = 0; a < SL_ALGO_COUNT; a++) {
            char line[200];
            int n =
                snprintf(line, sizeof line, "algo_%s:decisions=%llu,allowed=%llu,denied=%llu\r\n",
                         sl_algo_name((sl_algo)a), (unsigned long long)sum.decisions[a],
                         (unsigned long long)sum.allowed[a], (unsigned long long)sum.denied[a]);
            sl_buf_add(&b, line, (size_t)n);
        }
        info_line(&b, "checks", sum.checks);
        info_line(&b, "checks_denied", sum.checks_denied);
        info_line(&b, "evicted_keys", bs.evictions);
        info_line(&b, "evicted_at_limit_keys", bs.evicted_at_limit);
        info_line(&b, "expired_keys", bs.expired);
        info_line(&b, "evicted_at_rest_keys", bs.evicted_at_rest);
        info_line(&b, "store_full_refusals", bs.refused);
        sl_auth_stats as;
        sl_auth_stats_get(srv->auth, &as);
        info_line(&b, "auth_ok", as.ok);
        info_line(&b, "acl_access_denied_auth", as.failed);    /* Redis's name: failed logins */
        info_line(&b, "acl_access_denied_cmd", as.denied_cmd); /* NOPERM replies */
        info_line(&b, "auth_blocked", as.blocked);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "latency")) {
        static const int64_t bounds[SL_STATS_LAT_NBOUNDS] = SL_STATS_LAT_BOUNDS_US;
        sl_resp_raw(&b, "# Latency\r\n");
        info_line(&b, "decision_latency_sampled", sum.lat_count);
        info_line(&b, "decision_latency_sample_every", SL_STATS_LAT_SAMPLE);
        info_line(&b, "decision_latency_sum_ns", sum.lat_sum_ns);
        uint64_t cum = 0;
        for (int i = 0; i <= SL_STATS_LAT_NBOUNDS; i++) {
            char name[64];
            cum += sum.lat[i];
            if (i < SL_STATS_LAT_NBOUNDS)
                snprintf(name, sizeof name, "decision_latency_le_%lldus", (long long)bounds[i]);
            else
                snprintf(name, sizeof name, "decision_latency_le_inf");
            info_line(&b, name, cum);
        }
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "memory")) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        sl_resp_raw(&b, "# Memory\r\n");
        info_line(&b, "used_memory", bs.bytes);
        info_line(&b, "maxmemory", bs.max_bytes);
        info_text(&b, "on_store_full", cfg->on_store_full == SL_FULL_DENY ? "deny-new" : "evict");
        info_line(&b, "keys", bs.keys);
        info_line(&b, "max_rss_bytes", (unsigned long long)ru.ru_maxrss * 1024);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "rules")) {
        sl_resp_raw(&b, "# Rules\r\n");
        if (srv->live != NULL) {
            sl_live_info li;
            sl_live_info_get(srv->live, &li);
            info_text(&b, "rules_path", path_for(q, sl_live_path(srv->live)));
            info_line(&b, "rules_version", li.version);
            info_line(&b, "rules_loaded_at_ms", (unsigned long long)li.loaded_at_ms);
            info_line(&b, "rules_domains", (unsigned long long)li.ndomains);
            info_line(&b, "rules_descriptors", (unsigned long long)li.ndescriptors);
            info_line(&b, "rules_reloads", li.reloads);
            info_line(&b, "rules_reload_failures", li.failures);
            info_text(&b, "rules_last_error", path_for(q, li.last_error));
            info_line(&b, "rules_last_error_at_ms", (unsigned long long)li.last_error_ms);
            info_text(&b, "rules_watch", li.watching ? "inotify" : "off");
        } else {
            info_text(&b, "rules_path", "");
            info_line(&b, "rules_version", 0);
        }
        info_text(&b, "rules_capacity", cfg->capacity);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "rulestats")) { /* per rule, by name, across reloads (stats.h) */
        sl_resp_raw(&b, "# Rulestats\r\n");
        info_line(&b, "rules_tracked", srv->stats.nrules);
        info_line(&b, "rules_untracked", sl_stat_get(&srv->stats.untracked));
        sl_stats_foreach_rule(&srv->stats, info_rule, &b);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "backend")) { /* where decisions are made, and what it tells */
        sl_resp_raw(&b, "# Backend\r\n");
        info_text(&b, "backend_name", srv->backend->ops->name);
        sl_backend_info(srv->backend, backend_line, &b);
        sl_resp_raw(&b, "\r\n");
    }
    if (wants(c, "persistence")) {
        sl_resp_raw(&b, "# Persistence\r\n");
        info_text(&b, "snapshot_file", path_for(q, cfg->snapshot));
        info_line(&b, "snapshot_interval_ms", (unsigned long long)cfg->snapshot_interval_ms);
        info_line(&b, "snapshots_written", atomic_load(&srv->saves));
        info_line(&b, "last_snapshot_unix_ms", (unsigned long long)atomic_load(&srv->last_save_ms));
        info_text(&b, "last_snapshot_status", atomic_load(&srv->last_save_ok) ? "ok" : "err");
        info_line(&b, "keys_loaded_at_start", atomic_load(&srv->loaded_keys));
        /* the decision journal (docs/durability.md) */
        uint64_t jbytes = 0, jsyncs = 0;
        if (srv->journal != NULL) sl_journal_counts(srv->journal, &jbytes, &jsyncs);
        info_text(&b, "journal_file", path_for(q, cfg->journal));
        info_text(&b, "journal_fsync", cfg->journal[0] == '\0'                   ? ""
                                       : cfg->journal_fsync == SL_JFSYNC_ALWAYS   ? "always"
                                       : cfg->journal_fsync == SL_JFSYNC_EVERYSEC ? "everysec"
                                                                                  : "no");
        info_line(&b, "journal_bytes_written", jbytes);
        info_line(&b, "journal_fsyncs", jsyncs);
        info_line(&b, "journal_records_replayed", srv->journal_replayed);
        info_text(&b, "after_crash", cfg->after_crash == SL_AFTER_CRASH_DENY ? "deny-window" : "trust");
        info_line(&b, "last_stop_unclean", (unsigned long long)srv->unclean_start);
        sl_resp_raw(&b, "\r\n");
    }
    sl_slot *s;
    sl_buf *out = now_open(q, &s);
    if (out != NULL) { /* RESP3: a verbatim string, as Redis 7 */
        sl_resp_verbatim(out, q->proto, "txt", b.p ? b.p : "", b.len);
        sl_slot_done(s);
    }
    free(b.p);
}
