/*
 * main.c -- sluiced: wires the parts together and owns the process's life.
 *
 *     config (+ protected mode) -> users -> TLS -> store (+ snapshot load)
 *            -> local backend -> statistics -> rules
 *            -> net (acceptor + workers, speaking RESP) -> main loop
 *
 * The main thread runs its own event_base for what is neither network nor
 * decision: signals (TERM/INT stop, HUP asks for a rules reload), the
 * rules' inotify watch (live.c), the periodic snapshot and active expiry.
 * A snapshot write may take a while on a large store; it blocks only this
 * thread, never the workers or the acceptor.  Rules reloads after the
 * first run on live.c's reload thread, so a slow or hostile rules file
 * holds up neither a worker nor a signal.
 *
 * At start, before any client: the snapshot's place is checked by a real
 * write (sl_store_save_check), then the snapshot and the rules are loaded;
 * any of them failing refuses the start (exit status 1).
 *
 * Shutdown order matters for "restarts lose nothing": stop accepting, let
 * the workers finish the replies of commands already read and close, join
 * them, and only then write the snapshot -- so it holds every decision a
 * client was told about.
 *
 * Time: decisions, expiry and snapshots use the server's clock (sl_now_ms,
 * the anchored clock of util.h).  main() anchors it to the wall clock before
 * anything reads it, and moves it once more only if a loaded snapshot holds
 * later times than that (so the clock never runs backwards across a
 * restart); after that only the steady clock moves it.  The expiry timer
 * also watches the wall clock and logs when it steps away.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "auth.h"
#include "backend.h"
#include "backend_local.h"
#include "config.h"
#include "grpc.h"
#include "history.h"
#include "http.h"
#include "journal.h"
#include "live.h"
#include "log.h"
#include "net.h"
#include "resp_commands.h"
#include "server.h"
#include "sluice.h"
#include "store.h"
#include "tls.h"
#include "util.h"

#define EXPIRE_EVERY_MS    100
#define EXPIRE_MAX_RECORDS 10000
#define FULL_WARN_MS       1000 /* "store full" is logged at most this often */
#define FD_RESERVE         64 /* descriptors kept for listeners, pipes, logs, snapshot */
#define FD_PER_WORKER      8  /* and per worker: its pipe, event base, backend channel (5 used) */
#define WALL_STEP_LOG_MS   1000 /* a wall-clock step this large is logged */
#define HISTORY_LAG_MS     5    /* the history's sample, after each second begins */

typedef struct app {
    sl_config cfg;
    sl_srv srv;
    sl_net *net;
    struct event_base *base;
    struct event *history_ev; /* samples the status page's history each second */
    int stopping;
    int64_t wall_offset_ms; /* wall clock - server's clock, as last logged */
    int64_t full_checked_ms; /* when the store was last checked for "store full" */
    uint64_t refused_seen;   /* its stats then: refused requests ... */
    uint64_t at_limit_seen;  /* ... and evictions of keys at their limit */
    sl_journal *journal;     /* --journal; NULL: none */
    char marker[1100];       /* --snapshot's ".running": here while sluiced runs, so a
                                start that finds it knows the last stop was unclean */
} app;

/* Writes the snapshot, updates the INFO fields, logs.  Returns 0 or -1. */
static int save_snapshot(app *a, const char *why)
{
    char err[512];
    int64_t t0 = sl__mono_ms();
    if ((a->journal ? sl_journal_snapshot(a->journal, a->srv.store, a->cfg.snapshot, err,
                                          sizeof err)
                    : sl_store_save(a->srv.store, a->cfg.snapshot, err, sizeof err)) != 0) {
        atomic_store(&a->srv.last_save_ok, 0);
        sl_log(SL_LOG_ERROR, "snapshot save failed", "file=%s reason=%s err=%s",
               sl_logq(a->cfg.snapshot), why, sl_logq(err));
        return -1;
    }
    int64_t t1 = sl__mono_ms();
    sl_store_stats st;
    sl_store_stats_get(a->srv.store, &st);
    atomic_store(&a->srv.last_save_ms, sl__wall_ms()); /* for a person: wall time */
    atomic_store(&a->srv.last_save_ok, 1);
    atomic_fetch_add(&a->srv.saves, 1);
    sl_log(SL_LOG_INFO, "snapshot saved", "file=%s reason=%s keys=%llu ms=%lld",
           sl_logq(a->cfg.snapshot), why, (unsigned long long)st.keys, (long long)(t1 - t0));
    return 0;
}

static void on_snapshot_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    app *a = arg;
    if (!a->stopping) save_snapshot(a, "periodic");
}

/* Arms the history's sampler for just after the next second of the
 * server's clock begins (history.h counts into the second before). */
static void history_arm(app *a)
{
    int64_t ms = 1000 - sl_now_ms() % 1000 + HISTORY_LAG_MS;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    event_add(a->history_ev, &tv);
}

static void on_history_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    app *a = arg;
    sl_history_sample(a->srv.history, &a->srv.stats, sl_now_ms());
    history_arm(a);
}

/* Logs a step of the wall clock away from the server's clock (an NTP
 * correction, a VM restore, `date -s`), once per step of WALL_STEP_LOG_MS or
 * more.  Nothing else changes: decisions keep the server's clock. */
static void watch_wall_clock(app *a)
{
    int64_t off = sl__wall_ms() - sl_now_ms();
    int64_t step = off - a->wall_offset_ms;
    if (step > -WALL_STEP_LOG_MS && step < WALL_STEP_LOG_MS) return;
    a->wall_offset_ms = off;
    sl_log(SL_LOG_WARN, "wall clock stepped: decisions keep the server's clock",
           "step_ms=%lld wall_clock_offset_ms=%lld", (long long)step, (long long)off);
}

/* Every EXPIRE_EVERY_MS: the wall-clock watch, then active expiry, which
 * drops keys whose reset time has passed by the server's clock.  Not with
 * --trust-client-time: keys then live on the clients' clocks, which may
 * lag the server's, and a key judged expired by the server's clock may
 * still be inside its window for its client; expiry then happens only
 * under memory pressure, judged at the inserting request's time. */
static void on_expire_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    app *a = arg;
    int64_t now = sl_now_ms();
    sl_auth_expire(a->srv.auth, now); /* failed logins: always the server's clock */
    watch_wall_clock(a);
    if (!a->srv.cfg->trust_client_time) sl_store_expire(a->srv.store, now, EXPIRE_MAX_RECORDS);
    if (now - a->full_checked_ms < FULL_WARN_MS) return;
    a->full_checked_ms = now;
    /* The store at its bound with nothing at rest to drop: say so, at most
     * once a second (INFO keeps the counts). */
    sl_store_stats st;
    sl_store_stats_get(a->srv.store, &st);
    if (st.refused == a->refused_seen && st.evicted_at_limit == a->at_limit_seen) return;
    sl_log(SL_LOG_WARN,
           a->cfg.on_store_full == SL_FULL_DENY
               ? "store full: every key that could go still holds a limit; new keys refused"
               : "store full: keys at their limit evicted (their limits restart)",
           "max_memory=%llu keys=%llu refused=%llu evicted=%llu evicted_at_limit=%llu",
           (unsigned long long)st.max_bytes, (unsigned long long)st.keys,
           (unsigned long long)(st.refused - a->refused_seen), (unsigned long long)st.evictions,
           (unsigned long long)st.evicted_at_limit);
    a->refused_seen = st.refused;
    a->at_limit_seen = st.evicted_at_limit;
}

/* After a snapshot loaded: if its keys have seen times later than the
 * server's clock -- the wall clock stepped back while sluiced was down, or
 * while it ran before (its clock went on and its keys hold those times) --
 * the clock is moved up to the latest of them, so it never runs backwards
 * across a restart; otherwise every key at its limit would stay denied
 * until the wall clock caught up.  The time the server was down is then
 * not counted (it cannot be known).  Not with --trust-client-time: keys
 * then hold the clients' times, which say nothing of the server's clock. */
static void clock_after_load(app *a)
{
    if (a->cfg.trust_client_time) return;
    int64_t latest = sl_store_latest_time(a->srv.store), now = sl_now_ms();
    if (latest <= now) return;
    sl__clock_anchor(latest);
    sl_log(SL_LOG_WARN,
           "the snapshot holds later times than the wall clock: the server's clock "
           "starts at the latest of them",
           "behind_ms=%lld clock_ms=%lld", (long long)(latest - now), (long long)latest);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    app *a = arg;
    if (sig == SIGHUP) {
        if (a->srv.live != NULL)
            sl_live_kick(a->srv.live, "SIGHUP"); /* on the reload thread */
        else
            sl_log(SL_LOG_INFO, "SIGHUP: no rules to reload (started without --rules)", NULL);
        return;
    }
    if (a->stopping) return;
    a->stopping = 1;
    sl_log(SL_LOG_INFO, "shutting down", "signal=%s clients=%d", sig == SIGTERM ? "TERM" : "INT",
           atomic_load(&a->srv.clients));
    sl_net_stop(a->net);
    event_base_loopbreak(a->base);
}

/* Makes room for max-clients descriptors, the refused HTTP clients being
 * answered beside them (net.h: SL_NET_REFUSED_MAX), FD_RESERVE and
 * FD_PER_WORKER for each worker: raises the soft limit up to the hard one,
 * else lowers max-clients (as redis-server does) and says so. */
static void fit_fd_limit(sl_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    const rlim_t reserve = FD_RESERVE + SL_NET_REFUSED_MAX +
                           (rlim_t)FD_PER_WORKER * (rlim_t)sl_net_default_workers(cfg);
    rlim_t need = (rlim_t)cfg->max_clients + reserve;
    if (rl.rlim_cur >= need) return;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = old;
    if (rl.rlim_cur >= need) return;
    int fit = rl.rlim_cur > reserve ? (int)(rl.rlim_cur - reserve) : 1;
    sl_log(SL_LOG_WARN, "open-file limit too low for max-clients: lowering max-clients",
           "max_clients=%d nofile=%llu new_max_clients=%d", cfg->max_clients,
           (unsigned long long)rl.rlim_cur, fit);
    cfg->max_clients = fit;
}

/* Is addr (as --bind holds it) a loopback address: 127.0.0.0/8, ::1, or
 * 127.0.0.0/8 mapped into IPv6? */
static int is_loopback(const char *addr)
{
    unsigned char b[16];
    static const unsigned char v6_lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (inet_pton(AF_INET, addr, b) == 1) return b[0] == 127;
    if (inet_pton(AF_INET6, addr, b) != 1) return 0;
    return memcmp(b, v6_lo, 16) == 0 || (memcmp(b, mapped, 12) == 0 && b[12] == 127);
}

/* The first --bind address beyond loopback, or NULL. */
static const char *beyond_loopback(const sl_config *cfg)
{
    for (int i = 0; i < cfg->nbinds; i++)
        if (!is_loopback(cfg->binds[i])) return cfg->binds[i];
    return NULL;
}

/* Protected mode, as redis-server's, but at start: listening beyond
 * loopback with no password configured is refused before any socket is
 * made.  Returns 0, or -1 with the message written to stderr. */
static int protected_mode_check(const sl_config *cfg)
{
    const char *addr = beyond_loopback(cfg);
    if (!cfg->protected_mode || addr == NULL || cfg->requirepass_file[0] != '\0' ||
        cfg->users_file[0] != '\0')
        return 0;
    fprintf(stderr,
            "sluiced: refusing to listen on %s without a password (protected mode): anyone who "
            "can reach it could reset any limit and reload the rules.\n"
            "Either set a password (--requirepass-file FILE, or --users-file FILE: see "
            "docs/security.md), or, if a firewall lets only trusted clients reach it, start "
            "with --protected-mode no.\n",
            addr);
    return -1;
}

/* Warns when a file of passwords can be read by every user of the machine
 * (a users file may hold only hashes, but a SHA-256 of a weak password is
 * guessed offline quickly). */
static void warn_if_readable(const char *opt, const char *path)
{
    struct stat st;
    if (path[0] == '\0' || stat(path, &st) != 0 || (st.st_mode & 0007) == 0) return;
    sl_log(SL_LOG_WARN, "a password file is readable by every user: chmod o-rwx it",
           "option=%s file=%s mode=%04o", opt, sl_logq(path), (unsigned)(st.st_mode & 07777));
}

/* The Redis backend's state changes: one log line each (not per request). */
static void on_backend_state(void *arg, int up, const char *url, const char *what)
{
    const sl_config *cfg = arg;
    if (up)
        sl_log(SL_LOG_INFO, "Redis backend up: decisions go to Redis", "url=%s", sl_logq(url));
    else
        sl_log(SL_LOG_WARN, "Redis backend down: requests go to --on-backend-error",
               "url=%s why=%s on_backend_error=%s", sl_logq(url), sl_logq(what),
               sl_backend_policy_name(cfg->on_backend_error));
}

/* Which path a Redis server's decisions take: one line per server at
 * start, one per change (a reconnect found the module loaded or gone: the
 * two keep their counters under different keys, docs/fleet.md). */
static void on_backend_path(void *arg, const char *url, int module, const char *why, int changed)
{
    (void)arg;
    int level = changed || (!module && why[0] != '\0') ? SL_LOG_WARN : SL_LOG_INFO;
    const char *msg = module           ? "sluice module found: decisions use its RL.* commands"
                      : why[0] == '\0' ? "no sluice module: decisions use the Lua script"
                                       : "sluice module not usable: decisions use the Lua script";
    sl_log(level, msg, "url=%s%s%s%s", sl_logq(url), why[0] ? " why=" : "",
           why[0] ? sl_logq(why) : "", changed ? " changed=yes" : "");
}

/* The backend --backend names: the local one over the store, or Redis
 * (reached now: an unreachable host or a refused password stops the
 * start).  NULL with err set. */
static sl_backend *make_backend(app *a, char *err, size_t errlen)
{
    sl_backend_opts o = {
        .url = a->cfg.backend,
        .store = a->srv.store,
        .timeout_ms = a->cfg.backend_timeout_ms,
        .policy = (sl_backend_policy)a->cfg.on_backend_error,
        .fleet_size = a->cfg.fleet_size,
        .deny_cache = a->cfg.deny_cache,
        .durability = a->cfg.durability,
        .lease = a->cfg.lease,
        .trust_client_time = a->cfg.trust_client_time,
        .local_max_bytes = a->cfg.max_memory,
        .local_on_full = (unsigned)a->cfg.on_store_full,
        .on_state = on_backend_state,
        .on_path = on_backend_path,
        .state_arg = &a->cfg,
    };
    sl_backend *b = sl_backend_open(&o, err, errlen);
    sl_backend_state in;
    if (b != NULL && sl_backend_state_get(b, &in) == 0)
        sl_log(SL_LOG_INFO, "Redis backend", "url=%s timeout_ms=%lld on_backend_error=%s "
               "fleet_size=%d deny_cache=%s", sl_logq(in.url), (long long)in.timeout_ms,
               in.policy, a->cfg.fleet_size, in.deny_cache ? "yes" : "no");
    return b;
}

static void fmt_duration(char *buf, size_t cap, int64_t ms)
{
    if (ms == 0)
        snprintf(buf, cap, "0");
    else if (ms % 1000 == 0)
        snprintf(buf, cap, "%llds", (long long)(ms / 1000));
    else
        snprintf(buf, cap, "%lldms", (long long)ms);
}

int main(int argc, char **argv)
{
    static app a; /* static: zeroed, and large sl_config off the stack */
    char err[1024];

    sl_config_defaults(&a.cfg);
    int rc = sl_config_parse_args(argc, argv, &a.cfg, err, sizeof err);
    if (rc == SL_CONFIG_HELP) {
        sl_config_usage(stdout);
        return 0;
    }
    if (rc == SL_CONFIG_VERSION) {
        printf("sluiced %s\n", SL_VERSION);
        return 0;
    }
    if (rc == SL_CONFIG_DUMP) {
        sl_config_dump(stdout, &a.cfg);
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "sluiced: %s\nTry 'sluiced --help'.\n", err);
        return 2;
    }
    sl__clock_anchor(sl__wall_ms()); /* before anything reads the server's clock */
    if (protected_mode_check(&a.cfg) != 0) return 2;
    sl_auth_opts ao = {a.cfg.requirepass_file, a.cfg.users_file, a.cfg.auth_fail_max,
                       a.cfg.auth_fail_window_ms};
    a.srv.auth = sl_auth_new(&ao, err, sizeof err);
    if (a.srv.auth == NULL) {
        fprintf(stderr, "sluiced: %s\n", err);
        return 2;
    }
    sl_log_set_level(a.cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    fit_fd_limit(&a.cfg);
    sl_log(SL_LOG_INFO, "sluiced starting", "version=%s pid=%ld", SL_VERSION, (long)getpid());
    warn_if_readable("--requirepass-file", a.cfg.requirepass_file);
    warn_if_readable("--users-file", a.cfg.users_file);
    if (sl_auth_required(a.srv.auth))
        sl_log(SL_LOG_INFO, "authentication on", "users=%d fail_limit=%lld/%lldms",
               sl_auth_nusers(a.srv.auth), (long long)a.cfg.auth_fail_max,
               (long long)a.cfg.auth_fail_window_ms);
    if (a.cfg.tls_port >= 0 || a.cfg.https_port != 0 ||
        a.cfg.grpc_tls_port != 0) { /* the certificate and key, before any state is loaded */
        char what[512];
        int expired = 0;
        a.srv.tls = sl_tls_new(&a.cfg, err, sizeof err);
        if (a.srv.tls == NULL) {
            fprintf(stderr, "sluiced: %s\n", err);
            sl_auth_free(a.srv.auth);
            return 2;
        }
        sl_tls_describe(a.srv.tls, what, sizeof what, &expired);
        sl_log(expired ? SL_LOG_WARN : SL_LOG_INFO,
               expired ? "TLS on, but the certificate is not valid now: clients will refuse it"
                       : "TLS on",
               "cert=%s %s", sl_logq(a.cfg.tls_cert_file), what);
    }
    if (beyond_loopback(&a.cfg) != NULL && sl_auth_required(a.srv.auth) && a.cfg.port >= 0)
        sl_log(SL_LOG_WARN,
               a.cfg.tls_port >= 0 ? "listening beyond loopback: passwords and limits cross the "
                                     "network in clear on the plain port (--port off: TLS only)"
                                   : "listening beyond loopback: passwords and limits cross the "
                                     "network in clear (no TLS on this port)",
               "addr=%s", beyond_loopback(&a.cfg));
    else if (beyond_loopback(&a.cfg) != NULL)
        sl_log(SL_LOG_WARN, "listening beyond loopback without a password (--protected-mode no)",
               "addr=%s", beyond_loopback(&a.cfg));

    /* One malloc arena: the store's records are made and freed by every
     * worker, and glibc keeps what a thread frees in the arena that made
     * it, so with an arena per worker a flood of mid-size records (1-64 KB)
     * held up to twice --max-memory (measured: 16 MB RSS for 8 MB of
     * records with two workers, 10.7 MB with one arena).  Nothing on the
     * request path allocates, so one arena costs no contention there. */
    mallopt(M_ARENA_MAX, 1);

    /* the journal folds into the snapshot, and the marker lives beside it */
    if ((a.cfg.journal[0] != '\0' || a.cfg.after_crash == SL_AFTER_CRASH_DENY) &&
        (a.cfg.snapshot[0] == '\0' || strcmp(a.cfg.backend, "local") != 0)) {
        sl_log(SL_LOG_ERROR, "refusing to start", "err=%s",
               sl_logq(a.cfg.journal[0] != '\0'
                           ? "--journal needs --snapshot (the journal folds into it) and the "
                             "local backend"
                           : "--after-crash deny-window needs --snapshot (a marker beside it "
                             "tells an unclean stop) and the local backend"));
        return 1;
    }
    int unclean = 0;
    if (a.cfg.snapshot[0] != '\0') {
        snprintf(a.marker, sizeof a.marker, "%s.running", a.cfg.snapshot);
        unclean = access(a.marker, F_OK) == 0;
    }

    sl_store_opts so;
    memset(&so, 0, sizeof so);
    so.max_bytes = (size_t)a.cfg.max_memory;
    so.on_full = (unsigned)a.cfg.on_store_full;
    int serr = 0;
    a.srv.cfg = &a.cfg;
    a.srv.store = sl_store_new(&so, &serr);
    if (a.srv.store == NULL) {
        sl_log(SL_LOG_ERROR, "cannot create the store", "max_memory=%llu err=%s",
               (unsigned long long)a.cfg.max_memory, sl_logq(sl_strerror(serr)));
        return 1;
    }
    atomic_store(&a.srv.last_save_ok, 1); /* nothing has failed yet (as redis reports) */

    /* The place of the snapshot, checked now rather than at the first save
     * (which may be an hour away, or the shutdown, losing the state). */
    if (a.cfg.snapshot[0] != '\0' && sl_store_save_check(a.cfg.snapshot, err, sizeof err) != 0) {
        sl_log(SL_LOG_ERROR, "cannot write the snapshot: refusing to start",
               "file=%s err=%s hint=%s", sl_logq(a.cfg.snapshot), sl_logq(err),
               sl_logq("create the directory or let this user write in it, or choose another "
                       "--snapshot"));
        sl_store_free(a.srv.store);
        return 1;
    }
    if (a.cfg.snapshot[0] != '\0') {
        uint64_t nkeys = 0;
        int64_t t0 = sl__mono_ms();
        uint32_t mark = 0;
        int lr = sl_journal_load_snapshot(a.srv.store, a.cfg.snapshot, &nkeys, &mark, err,
                                          sizeof err);
        if (lr < 0) {
            char hint[1200];
            snprintf(hint, sizeof hint,
                     "nothing was loaded; to start with empty limiter state, move %s away "
                     "(its state will be lost)",
                     a.cfg.snapshot);
            sl_log(SL_LOG_ERROR, "cannot load the snapshot: refusing to start",
                   "file=%s err=%s hint=%s", sl_logq(a.cfg.snapshot), sl_logq(err), sl_logq(hint));
            sl_store_free(a.srv.store);
            return 1;
        }
        if (lr == 1) {
            sl_log(SL_LOG_INFO, "no snapshot yet: starting empty", "file=%s",
                   sl_logq(a.cfg.snapshot));
        } else {
            atomic_store(&a.srv.loaded_keys, nkeys);
            sl_log(SL_LOG_INFO, "snapshot loaded", "file=%s keys=%llu ms=%lld",
                   sl_logq(a.cfg.snapshot), (unsigned long long)nkeys,
                   (long long)(sl__mono_ms() - t0));
        }
        if (a.cfg.journal[0] != '\0') {
            sl_journal_info ji;
            t0 = sl__mono_ms();
            a.journal = sl_journal_open(a.srv.store, a.cfg.journal, a.cfg.snapshot,
                                        a.cfg.journal_fsync, mark, &ji, err, sizeof err);
            if (a.journal == NULL) {
                sl_log(SL_LOG_ERROR, "cannot replay the journal: refusing to start",
                       "file=%s err=%s", sl_logq(a.cfg.journal), sl_logq(err));
                sl_store_free(a.srv.store);
                return 1;
            }
            a.srv.journal_replayed = ji.records;
            if (ji.torn)
                sl_log(SL_LOG_WARN, "journal: a torn last record dropped (a crash in the middle "
                       "of a write)", "file=%s offset=%zu bytes=%zu", sl_logq(ji.torn_file),
                       ji.torn_off, ji.torn_bytes);
            sl_log(SL_LOG_INFO, "journal replayed", "file=%s files=%d records=%llu "
                   "already_in_snapshot=%llu generation=%u fsync=%s ms=%lld",
                   sl_logq(a.cfg.journal), ji.files, (unsigned long long)ji.records,
                   (unsigned long long)ji.skipped, ji.gen,
                   a.cfg.journal_fsync == SL_JFSYNC_ALWAYS     ? "always"
                   : a.cfg.journal_fsync == SL_JFSYNC_EVERYSEC ? "everysec"
                                                               : "no",
                   (long long)(sl__mono_ms() - t0));
        }
        if (lr == 0 || a.journal != NULL) clock_after_load(&a);
    }
    a.srv.start_ms = sl_now_ms();
    a.wall_offset_ms = sl__wall_ms() - a.srv.start_ms;

    a.srv.backend = make_backend(&a, err, sizeof err);
    if (a.srv.backend == NULL) {
        /* one line, the log's: what failed and what to do (no retry at
         * start: a node that cannot decide must not look started) */
        int redis = strcmp(a.cfg.backend, "local") != 0;
        sl_log(SL_LOG_ERROR, "cannot use the backend: refusing to start", "err=%s%s%s",
               sl_logq(err), redis ? " hint=" : "",
               redis ? sl_logq("sluiced does not retry at start: start Redis or correct "
                               "--backend, then start sluiced again (once running, it "
                               "reconnects by itself and answers by --on-backend-error while "
                               "Redis is down)")
                     : "");
        sl_store_free(a.srv.store);
        return 1;
    }
    if (a.journal != NULL) sl_backend_local_record(a.srv.backend, sl_journal_record, a.journal);
    a.srv.journal = a.journal;
    a.srv.unclean_start = unclean;
    if (unclean && a.journal != NULL)
        sl_log(SL_LOG_INFO, "the last stop was unclean: the journal's replay holds what it "
               "decided", "marker=%s after_crash=%s", sl_logq(a.marker),
               a.cfg.after_crash == SL_AFTER_CRASH_DENY ? "deny-window (not needed)" : "trust");
    else if (unclean && a.cfg.after_crash == SL_AFTER_CRASH_DENY) {
        sl_backend_local_deny_window(a.srv.backend, a.srv.start_ms);
        sl_log(SL_LOG_WARN, "the last stop was unclean: keys the snapshot does not hold are "
               "denied for one window of their limit", "marker=%s after_crash=deny-window",
               sl_logq(a.marker));
    } else if (unclean)
        sl_log(SL_LOG_WARN, "the last stop was unclean: decisions since the last snapshot are "
               "forgotten", "marker=%s after_crash=trust", sl_logq(a.marker));
    if (a.marker[0] != '\0') {
        int mfd = open(a.marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (mfd < 0) {
            sl_log(SL_LOG_ERROR, "cannot create the marker: refusing to start", "file=%s err=%s",
                   sl_logq(a.marker), sl_logq(strerror(errno)));
            return 1;
        }
        (void)fsync(mfd);
        close(mfd);
    }
    if (sl_stats_init(&a.srv.stats, sl_net_default_workers(&a.cfg)) != 0 ||
        (a.srv.history = sl_history_new(a.srv.stats.nworkers)) == NULL) {
        sl_log(SL_LOG_ERROR, "out of memory", NULL);
        return 1;
    }
    if (a.cfg.rules[0] != '\0') {
        a.srv.live = sl_live_new(a.cfg.rules);
        if (a.srv.live != NULL) {
            sl_live_on_load(a.srv.live, sl_stats_on_rules_load, &a.srv.stats);
            sl_live_set_flags(a.srv.live, (a.cfg.merge_domains ? SL_RULES_MERGE_DOMAINS : 0u) |
                                              (a.cfg.count_denied ? SL_RULES_COUNT_DENIED : 0u));
        }
        if (a.srv.live == NULL || sl_live_reload(a.srv.live, "start", err, sizeof err) != 0) {
            sl_log(SL_LOG_ERROR, "cannot load the rules: refusing to start", "path=%s err=%s",
                   sl_logq(a.cfg.rules), sl_logq(a.srv.live ? err : "out of memory"));
            sl_live_free(a.srv.live);
            sl_store_free(a.srv.store);
            return 1;
        }
        /* later reloads run on their own thread: never on a worker's loop,
         * never in the way of a signal */
        if (sl_live_start(a.srv.live, err, sizeof err) != 0) {
            sl_log(SL_LOG_ERROR, err, NULL);
            sl_live_free(a.srv.live);
            sl_store_free(a.srv.store);
            return 1;
        }
    }

    a.base = event_base_new();
    if (a.base == NULL) {
        sl_log(SL_LOG_ERROR, "cannot create the main event loop", NULL);
        return 1;
    }
    /* signal events before the threads exist; the threads block all signals */
    struct event *sigs[3];
    const int signums[3] = {SIGTERM, SIGINT, SIGHUP};
    for (int i = 0; i < 3; i++) {
        sigs[i] = evsignal_new(a.base, signums[i], on_signal, &a);
        if (sigs[i] == NULL || event_add(sigs[i], NULL) != 0) {
            sl_log(SL_LOG_ERROR, "cannot install signal handlers", NULL);
            return 1;
        }
    }

    /* before the workers exist: they read whether it is on */
    if (a.srv.live != NULL && a.cfg.watch_rules &&
        sl_live_watch(a.srv.live, a.base, err, sizeof err) != 0)
        sl_log(SL_LOG_WARN, "not watching the rules: reload with SIGHUP or RL.RULES RELOAD",
               "path=%s err=%s", sl_logq(a.cfg.rules), sl_logq(err));

    a.srv.grpc = &sl_grpc_proto; /* --grpc-port's clients (src/proto/grpc) */
    a.net = sl_net_start(&a.srv, &sl_resp_proto, &sl_http_proto, err, sizeof err);
    if (a.net == NULL) {
        sl_log(SL_LOG_ERROR, err, NULL);
        return 1;
    }

    struct timeval tv = {0, EXPIRE_EVERY_MS * 1000};
    struct event *expire_ev = event_new(a.base, -1, EV_PERSIST, on_expire_timer, &a);
    if (expire_ev) event_add(expire_ev, &tv);
    a.history_ev = evtimer_new(a.base, on_history_timer, &a);
    if (a.history_ev) history_arm(&a);
    struct event *snap_ev = NULL;
    if (a.cfg.snapshot[0] != '\0' && a.cfg.snapshot_interval_ms > 0) {
        struct timeval stv = {(time_t)(a.cfg.snapshot_interval_ms / 1000),
                              (suseconds_t)(a.cfg.snapshot_interval_ms % 1000) * 1000};
        snap_ev = event_new(a.base, -1, EV_PERSIST, on_snapshot_timer, &a);
        if (snap_ev) event_add(snap_ev, &stv);
    }

    char d1[32], d2[32];
    for (int i = 0; i < sl_net_naddrs(a.net); i++)
        sl_log(SL_LOG_INFO, "listening",
               sl_net_addr_grpc(a.net, i) && sl_net_addr_tls(a.net, i)
                   ? "addr=%s threads=%d grpc=yes tls=yes"
               : sl_net_addr_grpc(a.net, i)  ? "addr=%s threads=%d grpc=yes"
               : sl_net_addr_tls(a.net, i)   ? "addr=%s threads=%d tls=yes"
               : sl_net_addr_https(a.net, i) ? "addr=%s threads=%d https=yes"
               : sl_net_addr_http(a.net, i)  ? "addr=%s threads=%d http=yes"
                                             : "addr=%s threads=%d",
               sl_net_addr(a.net, i), a.srv.nworkers);
    fmt_duration(d1, sizeof d1, a.cfg.snapshot_interval_ms);
    if (a.cfg.snapshot[0] != '\0')
        sl_log(SL_LOG_INFO, "snapshot", "file=%s interval=%s", sl_logq(a.cfg.snapshot), d1);
    else
        sl_log(SL_LOG_INFO, "snapshot off: state is lost at exit (set --snapshot FILE)", NULL);
    fmt_duration(d1, sizeof d1, a.cfg.idle_timeout_ms);
    fmt_duration(d2, sizeof d2, a.cfg.send_timeout_ms);
    sl_log(SL_LOG_INFO, "limits",
           "max_clients=%d max_memory=%llu on_store_full=%s max_command=%llu max_output=%llu "
           "idle_timeout=%s send_timeout=%s trust_client_time=%s max_client_skew_ms=%lld",
           a.cfg.max_clients, (unsigned long long)a.cfg.max_memory,
           a.cfg.on_store_full == SL_FULL_DENY ? "deny-new" : "evict",
           (unsigned long long)a.cfg.max_command, (unsigned long long)a.cfg.max_output, d1, d2,
           a.cfg.trust_client_time ? "yes" : "no", (long long)a.cfg.max_client_skew_ms);
    char hint[160];
    if (a.srv.port != 0)
        snprintf(hint, sizeof hint, "try: redis-cli -p %d RL.ALLOW user:42 5 10s", a.srv.port);
    else
        snprintf(hint, sizeof hint,
                 "try: redis-cli --tls --cacert CA.crt -p %d RL.ALLOW user:42 5 10s",
                 a.srv.tls_port);
    sl_log(SL_LOG_INFO, "ready", "hint=%s", sl_logq(hint));

    event_base_dispatch(a.base);

    /* stopping: workers finish replies, then the snapshot sees every decision */
    sl_net_join(a.net);
    sl_log(SL_LOG_INFO, "clients closed", NULL);
    int status = 0;
    if (a.cfg.snapshot[0] != '\0' && save_snapshot(&a, "shutdown") != 0) status = 1;
    sl_journal_close(a.journal);
    /* a clean stop: the snapshot holds everything (else the marker stays) */
    if (status == 0 && a.marker[0] != '\0' && unlink(a.marker) != 0 && errno != ENOENT)
        sl_log(SL_LOG_WARN, "cannot remove the marker", "file=%s err=%s", sl_logq(a.marker),
               sl_logq(strerror(errno)));

    sl_net_free(a.net);
    if (snap_ev) event_free(snap_ev);
    if (expire_ev) event_free(expire_ev);
    if (a.history_ev) event_free(a.history_ev);
    for (int i = 0; i < 3; i++) event_free(sigs[i]);
    sl_live_free(a.srv.live); /* its events first, then the base */
    event_base_free(a.base);
    sl_backend_free(a.srv.backend);
    sl_stats_free(&a.srv.stats);
    sl_history_free(a.srv.history);
    sl_store_free(a.srv.store);
    sl_auth_free(a.srv.auth);
    sl_tls_free(a.srv.tls); /* after the workers' connections */
    sl_log(SL_LOG_INFO, "bye", "status=%d", status);
    return status;
}
