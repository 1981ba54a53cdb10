/*
 * server.h -- the state sluiced shares between its parts: configuration,
 * the backend, the rules, statistics.  The service layer (service.c), the
 * network layer (net.c), the protocols (src/proto/) and main.c see this;
 * nothing below src/server does.
 */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "sluice.h"
#include "stats.h"

#define SL_SRV_DEFAULT_PORT 6390

#define SL_ADMIN_TOKEN_MAX 1024 /* bytes of the --admin-token-file token */

/* Configuration: every flag has a config-file twin (docs/sluiced.md). */
/* A CIDR block of --trusted-proxies: an IPv4 (family AF_INET, addr[0..4))
 * or IPv6 (AF_INET6, addr[0..16)) network of `bits` leading bits. */
typedef struct sl_cidr {
    int family;
    int bits;
    unsigned char addr[16];
} sl_cidr;

#define SL_CONFIG_MAX_TRUSTED 64 /* CIDR blocks in --trusted-proxies */

typedef struct sl_config {
    char binds[8][64];              /* addresses to listen on; default 127.0.0.1 */
    int nbinds;
    int port;                       /* default SL_SRV_DEFAULT_PORT; 0 = any free;
                                       -1 = none ("off": TLS only) */
    int threads;                    /* worker threads; 0 = one per core */
    uint64_t max_memory;            /* store bound in bytes; default 1 GB */
    int on_store_full;              /* SL_FULL_DENY (default) or SL_FULL_EVICT */
    int max_clients;                /* default 10000 */
    uint64_t max_command;           /* bytes of one command (query buffer); default 1 MB */
    uint64_t max_output;            /* unsent reply bytes per client; default 8 MB */
    uint64_t max_output_total;      /* unsent reply bytes of all clients; 0 = derived from
                                       max_memory (sl_config_output_total) */
    int64_t idle_timeout_ms;        /* 0 = never; default 300 s */
    int64_t send_timeout_ms;        /* replies pending, none taken: close; 0 = never; default 60 s */
    int64_t recv_timeout_ms;        /* a command begun must arrive whole within; 0 = never;
                                       default 10 s */
    char snapshot[1024];            /* "" = no snapshot */
    char rules[1024];               /* "" = no rules (RL.CHECK refused) */
    int watch_rules;                /* reload when the rules change (inotify); default 1 */
    int merge_domains;              /* a domain in several rules files: merged (Lyft's
                                       MERGE_DOMAIN_CONFIG); default 0 = refused */
    int count_denied;               /* RL.CHECK charges denied requests too (Lyft's
                                       counting, SL_RULES_COUNT_DENIED); default 0 */
    char capacity[64];              /* "" = no spare-capacity pool; else N/DURATION */
    sl_params pool;                 /* capacity, parsed: the elastic limits' pool */
    int64_t snapshot_interval_ms;   /* default 60 s */
    char journal[1024];             /* --journal: "" = none (journal.h) */
    int journal_fsync;              /* SL_JFSYNC_* (journal.h); default everysec */
    int after_crash;                /* SL_AFTER_CRASH_*; default trust */
    int trust_client_time;          /* accept AT t */
    int64_t max_client_skew_ms;     /* AT at most this far ahead of the server's
                                       clock; 0 = no bound; default 1 h */
    char config_file[1024];
    int log_level;                  /* SL_LOG_* */
    char requirepass_file[1024];    /* "" = none: the password of the user "default" */
    char users_file[1024];          /* "" = none: users, passwords, groups (auth.h) */
    int protected_mode;             /* refuse a non-loopback bind without a password; default 1 */
    int64_t auth_fail_max;          /* failed logins per address per window; default 10 */
    int64_t auth_fail_window_ms;    /* default 60 s */
    int tls_port;                   /* TLS listener (tls.h) on each bind address; -1 = none
                                       (default); 0 = any free port */
    char tls_cert_file[1024];       /* the server's certificate chain (PEM) */
    char tls_key_file[1024];        /* its private key (PEM, not encrypted) */
    char tls_ca_cert_file[1024];    /* CA(s) that sign client certificates; "" = none */
    int tls_auth_clients;           /* SL_TLS_AUTH_*: client certificates; default yes */
    int http_port;                  /* HTTP listener (src/proto/http) on each bind address;
                                       default SL_HTTP_DEFAULT_PORT; 0 = off;
                                       SL_HTTP_PORT_ANY = any free port */
    char admin_token_file[1024];    /* "" = none: the rules service answers 404 */
    char admin_token[SL_ADMIN_TOKEN_MAX + 1]; /* its bearer token, read at start */
    size_t admin_token_len;         /* 0 = none */
    char user_header[128];          /* forward-auth: the header naming the user; "" = none */
    char trusted_proxies[1024];     /* --trusted-proxies as given ("" = none), for --dump-options */
    int ntrusted;                   /* ... parsed: trusted[0..ntrusted) */
    sl_cidr trusted[SL_CONFIG_MAX_TRUSTED];
    int auth_deny_status;           /* forward-auth's answer to a denied request; default 429 */
    int https_port;                 /* HTTP over TLS (the TLS context above) on each bind
                                       address; 0 = off (default); SL_HTTP_PORT_ANY = any */
    int grpc_port;                  /* gRPC (src/proto/grpc) on each bind address; default
                                       SL_GRPC_DEFAULT_PORT; 0 = off; SL_HTTP_PORT_ANY = any */
    int grpc_tls_port;              /* gRPC over TLS (ALPN h2; the TLS context above) on
                                       each bind address; 0 = off (default); SL_HTTP_PORT_ANY */
    char backend[1024];             /* "local" (default) or redis:// URLs (sl_backend_open) */
    int64_t backend_timeout_ms;     /* the Redis backend: no caller waits longer; default 50 */
    int on_backend_error;           /* sl_backend_policy; default SL_BACKEND_DENY */
    int fleet_size;                 /* on-backend-error local: L and B divided by it; default 1 */
    int deny_cache;                 /* the Redis backend's local deny cache; default 1 */
    int durability;                 /* --durability replicas:N: N; 0 = none (default) */
    int lease;                      /* --lease on: hot keys lease quota from Redis; default 0 */
    /* the gRPC front (src/proto/grpc, docs/envoy.md); the yes/no ones are
     * envoyproxy/ratelimit's settings, also read from its environment
     * variables (config.c) */
    int rls_semantics;              /* SL_RLS_ENVOY (default) or SL_RLS_SLUICE */
    int shadow_mode;                /* SHADOW_MODE: an overall OVER_LIMIT answers OK */
    int quota_mode;                 /* QUOTA_MODE: every limited descriptor in quota mode */
    int limit_headers;              /* LIMIT_RESPONSE_HEADERS_ENABLED */
    char limit_limit_header[128];   /* LIMIT_LIMIT_HEADER; default RateLimit-Limit */
    char limit_remaining_header[128]; /* LIMIT_REMAINING_HEADER; default RateLimit-Remaining */
    char limit_reset_header[128];   /* LIMIT_RESET_HEADER; default RateLimit-Reset */
    int response_dmeta;             /* RESPONSE_DYNAMIC_METADATA */
    int stop_incr_overlimit;        /* STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT */
} sl_config;

/* --after-crash: what a start after an unclean stop, without a journal,
 * answers for keys the snapshot does not hold (backend_local.h). */
#define SL_AFTER_CRASH_TRUST 0 /* as fresh keys (the default) */
#define SL_AFTER_CRASH_DENY  1 /* as at their limit for one window (deny-window) */

/* --rls-semantics: how the gRPC front answers ShouldRateLimit. */
#define SL_RLS_ENVOY  0 /* as envoyproxy/ratelimit does (the default) */
#define SL_RLS_SLUICE 1 /* as RL.CHECK decides, mapped (docs/envoy.md) */

#define SL_HTTP_DEFAULT_PORT 8390 /* SPEC section 8 */
#define SL_HTTP_PORT_ANY     (-1) /* --http-port any: the kernel picks (the log says which) */
#define SL_GRPC_DEFAULT_PORT 8391 /* Envoy's rate limit service (docs/envoy.md) */

/* --tls-auth-clients: whether a TLS client must show a certificate that
 * --tls-ca-cert-file signed (Redis's tls-auth-clients). */
#define SL_TLS_AUTH_NO       0 /* not asked for */
#define SL_TLS_AUTH_YES      1 /* required: a client without one fails the handshake */
#define SL_TLS_AUTH_OPTIONAL 2 /* asked for; checked if shown */

struct sl_live;
struct sl_auth;
struct sl_tls;
struct sl_history;
struct sl_proto;

typedef struct sl_srv {
    const sl_config *cfg;
    sl_backend *backend;            /* where every decision is made (backend.h) */
    sl_store *store;                /* the local backend's store, for snapshots and
                                       expiry (main.c); NULL with another backend */
    struct sl_live *live;           /* the rules (live.h); NULL = started without */
    struct sl_auth *auth;           /* users and failed logins (auth.h); NULL = no auth */
    struct sl_tls *tls;             /* the TLS context (tls.h); NULL = no TLS listener */
    sl_stats stats;                 /* every number INFO shows (stats.h) */
    struct sl_history *history;     /* the status page's recent past (history.h);
                                       NULL: none kept */
    int64_t start_ms;               /* the server's clock (sl_now_ms) at start */
    int nworkers;                   /* worker threads (= stats.nworkers) */
    int port;                       /* the port actually bound; 0 = none (--port off) */
    int tls_port;                   /* the TLS port actually bound; 0 = none */
    int http_port;                  /* the HTTP port actually bound; 0 = none */
    int https_port;                 /* the HTTPS port actually bound; 0 = none */
    const struct sl_proto *grpc;    /* what --grpc-port's clients speak (set by main
                                       before sl_net_start); NULL: no gRPC listener */
    int grpc_port;                  /* the gRPC port actually bound; 0 = none */
    int grpc_tls_port;              /* the gRPC-over-TLS port actually bound; 0 = none */
    _Atomic int clients;            /* connected now */
    _Atomic uint64_t connections;   /* accepted since start */
    _Atomic uint64_t rejected;      /* refused: max clients */
    _Atomic uint64_t cut_output;    /* closed: unsent replies over max_output */
    _Atomic uint64_t cut_idle;      /* closed: idle timeout */
    _Atomic int64_t last_save_ms;   /* wall clock (sl__wall_ms) when the last good
                                       snapshot was written; 0 = none */
    _Atomic int last_save_ok;       /* 1 ok, 0 failed */
    _Atomic uint64_t saves;         /* snapshots written */
    _Atomic uint64_t loaded_keys;   /* keys loaded from the snapshot at start */
    struct sl_journal *journal;     /* --journal (journal.h); NULL: none (set by main
                                       before sl_net_start) */
    uint64_t journal_replayed;      /* records the journal replayed at start */
    int unclean_start;              /* 1: the last stop was unclean (its marker was
                                       there at start) */
} sl_srv;

/* The server's clock, in ms since the epoch: the anchored clock
 * (sl__clock_ms, util.h) -- anchored to the wall clock at start, then
 * steady, so a wall-clock step changes no decision.  Every decision,
 * expiry and uptime uses it; what a person reads (log times, "saved at")
 * uses the wall clock. */
int64_t sl_now_ms(void);

#endif
