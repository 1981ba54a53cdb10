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

/* Configuration: every flag has a config-file twin (docs/sluiced.md). */
typedef struct sl_config {
    char binds[8][64];              /* addresses to listen on; default 127.0.0.1 */
    int nbinds;
    int port;                       /* default SL_SRV_DEFAULT_PORT; 0 = any free */
    int threads;                    /* worker threads; 0 = one per core */
    uint64_t max_memory;            /* store bound in bytes; default 1 GB */
    int on_store_full;              /* SL_FULL_DENY (default) or SL_FULL_EVICT */
    int max_clients;                /* default 10000 */
    uint64_t max_command;           /* bytes of one command (query buffer); default 1 MB */
    uint64_t max_output;            /* unsent reply bytes per client; default 8 MB */
    int64_t idle_timeout_ms;        /* 0 = never; default 300 s */
    int64_t send_timeout_ms;        /* replies pending, none taken: close; 0 = never; default 60 s */
    char snapshot[1024];            /* "" = no snapshot */
    char rules[1024];               /* "" = no rules (RL.CHECK refused) */
    int watch_rules;                /* reload when the rules change (inotify); default 1 */
    char capacity[64];              /* "" = no spare-capacity pool; else N/DURATION */
    sl_params pool;                 /* capacity, parsed: the elastic limits' pool */
    int64_t snapshot_interval_ms;   /* default 60 s */
    int trust_client_time;          /* accept AT t */
    char config_file[1024];
    int log_level;                  /* SL_LOG_* */
} sl_config;

struct sl_live;

typedef struct sl_srv {
    const sl_config *cfg;
    sl_backend *backend;            /* where every decision is made (backend.h) */
    sl_store *store;                /* the local backend's store, for snapshots and
                                       expiry (main.c); NULL with another backend */
    struct sl_live *live;           /* the rules (live.h); NULL = started without */
    sl_stats stats;                 /* every number INFO shows (stats.h) */
    int64_t start_ms;               /* wall clock at start */
    int nworkers;                   /* worker threads (= stats.nworkers) */
    int port;                       /* the port actually bound */
    _Atomic int clients;            /* connected now */
    _Atomic uint64_t connections;   /* accepted since start */
    _Atomic uint64_t rejected;      /* refused: max clients */
    _Atomic uint64_t cut_output;    /* closed: unsent replies over max_output */
    _Atomic uint64_t cut_idle;      /* closed: idle timeout */
    _Atomic int64_t last_save_ms;   /* wall clock of the last good snapshot; 0 = none */
    _Atomic int last_save_ok;       /* 1 ok, 0 failed */
    _Atomic uint64_t saves;         /* snapshots written */
    _Atomic uint64_t loaded_keys;   /* keys loaded from the snapshot at start */
} sl_srv;

/* Wall clock in ms. */
int64_t sl_now_ms(void);

#endif
