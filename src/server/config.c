/*
 * config.c -- sluiced's settings from flags and a config file (config.h).
 *
 * One table, opts[], describes every option once: its name (the flag is
 * "--" + name, the file key is the name), the field of sl_config it sets
 * and what kind of value that field takes, its range, the name of its
 * value, its default as the docs write it, and its line of help.  From it
 * come the parser (flags and file lines both go through set_option(), so
 * the two can never disagree on what a value means), `--help`
 * (sl_config_usage), `--dump-options` (sl_config_dump: the table and the
 * values a command line gives, which tests/test_options.sh checks
 * docs/sluiced.md's option table against) and the OPTIONS of sluiced(8).
 * Numbers are parsed by length (sl_int_parse), never with atoi/strtol, and
 * every error quotes the token.
 *
 * Adding an option: its field in sl_config (server.h) and its default in
 * sl_config_defaults(), then one row in opts[], where --help should list
 * it.  A value of a built-in kind (INT, SIZE, DUR, BOOL, PATH: a field of
 * that type, checked at compile time) needs nothing else; any other value
 * is CUSTOM(set, show) with a function that parses it into the config and
 * one that prints it back.  Then a row in docs/sluiced.md's option table
 * (tests/test_options.sh names what is missing or differs, and checks that
 * the row's default is the real one).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "backend.h"
#include "config.h"
#include "check.h"
#include "journal.h"
#include "log.h"
#include "util.h"

#define KB 1024LL
#define MB (1024LL * KB)
#define GB (1024LL * MB)

/* Where a value came from, for messages: the flag or file:line. */
typedef struct origin {
    const char *file; /* NULL: the command line */
    int line;
    int binds_reset; /* this source has already replaced the bind list */
} origin;

enum opt_kind {
    K_INT,      /* decimal integer in [min, max], into an int */
    K_SIZE,     /* bytes: integer with an optional b/k/kb/m/mb/g/gb suffix (k = 1024), in
                   [min, max], into a uint64_t */
    K_DURATION, /* 0, or an integer with a unit (ms, s, m, h, d): ms into an int64_t */
    K_PATH,     /* a file name, into a char array */
    K_BOOL,     /* yes/no into an int; a bare flag means yes */
    K_CUSTOM,   /* parsed by the row's own set() */
    K_ACTION,   /* takes no value: --help, --version, --dump-options */
};

typedef struct opt opt;

/* A K_CUSTOM option's parser: sets v[0..vlen) in c, or returns -1 with a
 * message in err (fail(), naming the option as o says). */
typedef int opt_set_fn(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                       char *err, size_t errlen);
/* Writes the option's value in c as a flag would give it (cap bytes). */
typedef void opt_show_fn(const sl_config *c, char *buf, size_t cap);

struct opt {
    const char *name;   /* the flag is "--" + name, the config-file key is name */
    char short_flag;    /* also "-" + this letter; 0: none */
    enum opt_kind kind; /* what the value is; the macros below set it */
    size_t off, size;   /* the sl_config field a built-in kind sets */
    int64_t min, max;   /* K_INT, K_SIZE: the accepted range */
    int flag_only;      /* 1: refused in a config file */
    const char *arg;    /* the value's name in --help ("N", "BYTES"); none for K_ACTION */
    const char *def;    /* the default as --help and docs/sluiced.md write it; NULL: none */
    const char *zero;   /* K_DURATION: what 0 means; NULL: "never" */
    const char *help;   /* what it does, one sentence (--help wraps it) */
    opt_set_fn *set;    /* K_CUSTOM: the parser */
    opt_show_fn *show;  /* how --dump-options shows the value; NULL: by its kind */
    int action;         /* K_ACTION: what sl_config_parse_args returns for it */
    const char *env;    /* envoyproxy/ratelimit's environment variable that also sets it
                           (a flag wins over it, it wins over the config file); NULL: none */
};

/* The field f of sl_config, which must be of the type the kind stores:
 * a row naming a field of another type does not compile. */
/* clang-format off */
#define FIELD(f, type)                                                                             \
    .off = _Generic(((sl_config *)0)->f, type: offsetof(sl_config, f)),                           \
    .size = sizeof(((sl_config *)0)->f)
/* clang-format on */
#define INT(f)              .kind = K_INT, FIELD(f, int)
#define SIZE(f)             .kind = K_SIZE, FIELD(f, uint64_t), .arg = "BYTES"
#define DUR(f)              .kind = K_DURATION, FIELD(f, int64_t), .arg = "DUR"
#define BOOL(f)             .kind = K_BOOL, FIELD(f, int), .arg = "yes|no"
#define PATH(f)             .kind = K_PATH, FIELD(f, char *)
#define CUSTOM(setf, showf) .kind = K_CUSTOM, .set = setf, .show = showf
#define ACTION(rc)          .kind = K_ACTION, .action = rc, .flag_only = 1

static opt_set_fn set_user_header, set_trusted_proxies;
static opt_set_fn set_journal_fsync, set_after_crash; /* the journal (journal.h) */
static opt_show_fn show_journal_fsync, show_after_crash;
static opt_set_fn set_rls_semantics, set_header_name; /* the gRPC front's answers */
static opt_show_fn show_rls_semantics, show_limit_limit_header, show_limit_remaining_header,
    show_limit_reset_header;
static opt_set_fn set_grpc_port, set_grpc_tls_port; /* gRPC (src/proto/grpc) */
static opt_show_fn show_grpc_port, show_grpc_tls_port;
static opt_set_fn set_user_header, set_trusted_proxies, set_backend, set_backend_timeout,
    set_on_backend_error;
static opt_show_fn show_backend, show_backend_timeout, show_on_backend_error;
static opt_set_fn set_durability; /* the Redis backend's WAIT (src/backend/redis/durable.c) */
static opt_show_fn show_durability;
static opt_show_fn show_trusted_proxies, show_user_header;
static opt_set_fn set_port, set_tls_port, set_http_port, set_https_port, set_tls_auth_clients, set_bind, set_on_store_full,
    set_capacity, set_auth_fail_limit, set_log_level;
static opt_show_fn show_port, show_tls_port, show_http_port, show_https_port, show_tls_auth_clients, show_bind, show_on_store_full,
    show_output_total, show_capacity, show_auth_fail_limit, show_log_level;

/* Every option, in the order --help lists them. */
static const opt opts[] = {
    {.name = "port",
     CUSTOM(set_port, show_port),
     .arg = "N|off",
     .def = "6390",
     .help = "TCP port; 0 = any free port; off = no plain listener (TLS only, with --tls-port)"},
    {.name = "bind",
     CUSTOM(set_bind, show_bind),
     .arg = "ADDR[,ADDR...]",
     .def = "127.0.0.1",
     .help = "addresses to listen on, IPv4 or IPv6; repeatable; 0.0.0.0 or :: for every "
             "interface"},
    {.name = "threads",
     INT(threads),
     .min = 0,
     .max = SL_CONFIG_MAX_THREADS,
     .arg = "N",
     .def = "0",
     .help = "worker threads; 0 = one per CPU this process may use"},
    {.name = "max-memory",
     SIZE(max_memory),
     .min = 0,
     .max = 1024 * 1024 * GB,
     .def = "1gb",
     .help = "memory bound of the limiter state; 0 = none"},
    {.name = "on-store-full",
     CUSTOM(set_on_store_full, show_on_store_full),
     .arg = "deny-new|evict",
     .def = "deny-new",
     .help = "when the bound is reached and every key that could go still holds a limit: refuse "
             "new keys, or evict the least restricted"},
    {.name = "max-clients",
     INT(max_clients),
     .min = 1,
     .max = SL_CONFIG_MAX_CLIENTS,
     .arg = "N",
     .def = "10000",
     .help = "connections at once"},
    {.name = "max-command",
     SIZE(max_command),
     .min = KB,
     .max = 512 * MB,
     .def = "1mb",
     .help = "size of one command"},
    {.name = "max-output",
     SIZE(max_output),
     .min = KB,
     .max = 1024 * GB,
     .def = "8mb",
     .help = "unsent replies held for one client"},
    {.name = "max-output-total",
     SIZE(max_output_total),
     .min = MB,
     .max = 1024 * GB,
     .show = show_output_total,
     .def = "a quarter of --max-memory, at least 16mb; 256mb when --max-memory is 0",
     .help = "unsent replies held for all clients; over it the clients holding the most are cut"},
    {.name = "idle-timeout",
     DUR(idle_timeout_ms),
     .def = "300s",
     .zero = "never",
     .help = "close a client silent this long"},
    {.name = "send-timeout",
     DUR(send_timeout_ms),
     .def = "60s",
     .zero = "never",
     .help = "close a client that takes none of its pending replies for this long"},
    {.name = "recv-timeout",
     DUR(recv_timeout_ms),
     .def = "10s",
     .zero = "never",
     .help = "close a client whose command, once begun, has not arrived whole within DUR"},
    {.name = "snapshot",
     PATH(snapshot),
     .arg = "FILE",
     .def = "none",
     .help = "save the limiter state to FILE and load it at start"},
    {.name = "snapshot-interval",
     DUR(snapshot_interval_ms),
     .def = "60s",
     .zero = "only at shutdown",
     .help = "save every DUR"},
    {.name = "journal",
     PATH(journal),
     .arg = "FILE",
     .def = "none",
     .help = "append every decision's new state to FILE and replay it at start after the "
             "snapshot (needs --snapshot, which folds it; local backend only)"},
    {.name = "journal-fsync",
     CUSTOM(set_journal_fsync, show_journal_fsync),
     .arg = "always|everysec|no",
     .def = "everysec",
     .help = "always: no reply leaves before its decisions are on disk; everysec: fdatasync "
             "once a second; no: write only"},
    {.name = "after-crash",
     CUSTOM(set_after_crash, show_after_crash),
     .arg = "deny-window|trust",
     .def = "trust",
     .help = "after an unclean stop without a journal: deny-window answers keys the snapshot "
             "does not hold as at their limit for one window of their rule; trust, as fresh"},
    {.name = "rules",
     PATH(rules),
     .arg = "PATH",
     .def = "none",
     .help = "rules for RL.CHECK: a YAML file or a folder of them (docs/rules.md); reloaded on "
             "SIGHUP, RL.RULES RELOAD and, unless --watch-rules no, when the files change"},
    {.name = "watch-rules",
     BOOL(watch_rules),
     .def = "yes",
     .help = "watch the rules with inotify"},
    {.name = "merge-domains",
     BOOL(merge_domains),
     .def = "no",
     .help = "a domain in several rules files is one domain, their descriptors together "
             "(Lyft's MERGE_DOMAIN_CONFIG); no: refused, naming both files"},
    {.name = "count-denied",
     BOOL(count_denied),
     .def = "no",
     .help = "Lyft's counting: RL.CHECK charges every matched fixed-window counter of denied "
             "requests too; no: all-or-none, a denied request is charged to none"},
    {.name = "capacity",
     CUSTOM(set_capacity, show_capacity),
     .arg = "N/DUR",
     .def = "none",
     .help = "spare-capacity pool for `elastic` rules: N requests per DUR through RL.CHECK in "
             "all"},
    {.name = "backend",
     CUSTOM(set_backend, show_backend),
     .arg = "local|URL",
     .def = "local",
     .help = "where the counters live: local (this process), or "
             "redis://[user:password@]host[:port][/db], shared by every node on it; several "
             "redis:// URLs separated by commas: a consistent-hash ring over those servers; "
             "redis-cluster://[user:password@]host[:port][,host[:port]...]: a Redis Cluster "
             "(no :port: 6379; docs/fleet.md); "
             "redis-sentinel://[user:password@]SENTINELS/master-name, SENTINELS being "
             "host[:port][,host[:port]...]: the master Redis Sentinel names, followed on "
             "failover (no :port: 26379)"},
    {.name = "backend-timeout",
     CUSTOM(set_backend_timeout, show_backend_timeout),
     .arg = "DUR",
     .def = "50ms",
     .help = "the Redis backend: no request waits longer for Redis (1ms..60s); then "
             "--on-backend-error answers"},
    {.name = "on-backend-error",
     CUSTOM(set_on_backend_error, show_on_backend_error),
     .arg = "deny|allow|local",
     .def = "deny",
     .help = "the Redis backend, when Redis cannot answer: deny, allow, or decide on this "
             "node's own store with L and B divided by --fleet-size"},
    {.name = "fleet-size",
     INT(fleet_size),
     .min = 1,
     .max = 100000,
     .arg = "N",
     .def = "1",
     .help = "nodes sharing the Redis backend: --on-backend-error local divides L and B by N "
             "(rounded down, at least 1)"},
    {.name = "deny-cache",
     BOOL(deny_cache),
     .def = "yes",
     .help = "the Redis backend: deny locally, without asking Redis, while a denial Redis gave "
             "still holds"},
    {.name = "lease",
     BOOL(lease),
     .def = "no",
     .help = "the Redis backend: a node leases units of a hot key's limit from Redis and "
             "spends them here, never more than the limit fleet-wide (docs/fleet.md, \"Leases\")"},
    {.name = "durability",
     CUSTOM(set_durability, show_durability),
     .arg = "none|replicas:N",
     .def = "none",
     .help = "the Redis backend: replicas:N, an allowed answer waits until Redis's WAIT N says N "
             "replicas have its decision (one WAIT a batch); short of N within "
             "--backend-timeout, --on-backend-error answers instead"},
    {.name = "trust-client-time",
     BOOL(trust_client_time),
     .def = "no",
     .help = "accept a caller's time (RL.ALLOW ... AT t)"},
    {.name = "requirepass-file",
     PATH(requirepass_file),
     .arg = "FILE",
     .def = "none",
     .help = "clients must AUTH with the password in FILE (the user \"default\", who may run "
             "every command)"},
    {.name = "users-file",
     PATH(users_file),
     .arg = "FILE",
     .def = "none",
     .help = "users, their passwords and command groups (docs/sluiced.md, \"The users file\")"},
    {.name = "auth-fail-limit",
     CUSTOM(set_auth_fail_limit, show_auth_fail_limit),
     .arg = "N/DUR",
     .def = "10/1m",
     .help = "failed logins per client address in DUR; beyond, AUTH is refused unchecked until "
             "one is DUR old"},
    {.name = "protected-mode",
     BOOL(protected_mode),
     .def = "yes",
     .help = "refuse to listen beyond loopback without a password"},
    {.name = "max-client-skew",
     DUR(max_client_skew_ms),
     .def = "1h",
     .zero = "no bound",
     .help = "with --trust-client-time, refuse AT t more than DUR ahead of the server's clock"},
    {.name = "tls-port",
     CUSTOM(set_tls_port, show_tls_port),
     .arg = "N",
     .def = "none",
     .help = "also listen for TLS (1.2 and 1.3) on port N of each --bind address; 0 = any free "
             "port"},
    {.name = "http-port",
     CUSTOM(set_http_port, show_http_port),
     .arg = "N|any",
     .def = "8390",
     .help = "also serve HTTP/1.1 (docs/http.md) on port N of each --bind address; 0 = off; "
             "any = any free port"},
    {.name = "grpc-port",
     CUSTOM(set_grpc_port, show_grpc_port),
     .arg = "N|any",
     .def = "8391",
     .help = "also serve Envoy's rate limit service over gRPC (docs/envoy.md) on port N of each "
             "--bind address; 0 = off; any = any free port"},
    {.name = "rls-semantics",
     CUSTOM(set_rls_semantics, show_rls_semantics),
     .arg = "envoy|sluice",
     .def = "envoy",
     .help = "how the gRPC front answers ShouldRateLimit: as envoyproxy/ratelimit does (its "
             "counting, names, whole-second resets, codes), or sluice's RL.CHECK mapped onto it "
             "(docs/envoy.md)"},
    {.name = "shadow-mode",
     BOOL(shadow_mode),
     .def = "no",
     .env = "SHADOW_MODE",
     .help = "gRPC, envoy semantics: an overall OVER_LIMIT answers OK (the statuses kept)"},
    {.name = "quota-mode",
     BOOL(quota_mode),
     .def = "no",
     .env = "QUOTA_MODE",
     .help = "gRPC, envoy semantics: every descriptor with a limit is in quota mode"},
    {.name = "limit-response-headers-enabled",
     BOOL(limit_headers),
     .def = "no",
     .env = "LIMIT_RESPONSE_HEADERS_ENABLED",
     .help = "gRPC, envoy semantics: answer the limit, remaining and reset headers of the "
             "descriptor closest to its limit"},
    {.name = "limit-limit-header",
     CUSTOM(set_header_name, show_limit_limit_header),
     .arg = "NAME",
     .def = "RateLimit-Limit",
     .env = "LIMIT_LIMIT_HEADER",
     .help = "the name of that limit header"},
    {.name = "limit-remaining-header",
     CUSTOM(set_header_name, show_limit_remaining_header),
     .arg = "NAME",
     .def = "RateLimit-Remaining",
     .env = "LIMIT_REMAINING_HEADER",
     .help = "the name of that remaining header"},
    {.name = "limit-reset-header",
     CUSTOM(set_header_name, show_limit_reset_header),
     .arg = "NAME",
     .def = "RateLimit-Reset",
     .env = "LIMIT_RESET_HEADER",
     .help = "the name of that reset header"},
    {.name = "response-dynamic-metadata",
     BOOL(response_dmeta),
     .def = "no",
     .env = "RESPONSE_DYNAMIC_METADATA",
     .help = "gRPC, envoy semantics: answer dynamic_metadata (the domain, descriptors and the "
             "metadata of the rules that passed)"},
    {.name = "stop-cache-key-increment-when-overlimit",
     BOOL(stop_incr_overlimit),
     .def = "no",
     .env = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
     .help = "gRPC, envoy semantics: when some descriptor would go over its limit, charge only "
             "those"},
    {.name = "grpc-tls-port",
     CUSTOM(set_grpc_tls_port, show_grpc_tls_port),
     .arg = "N|any",
     .def = "0",
     .help = "also serve it over TLS (--tls-cert-file etc.; ALPN h2) on port N of each --bind "
             "address; 0 = off; any = any free port"},
    {.name = "admin-token-file",
     PATH(admin_token_file),
     .arg = "FILE",
     .def = "none",
     .help = "the rules service (HTTP /v1/rules) answers requests that carry \"Authorization: "
             "Bearer TOKEN\" with the token in FILE; none: it answers 404"},
    {.name = "user-header",
     CUSTOM(set_user_header, show_user_header),
     .arg = "NAME",
     .def = "none",
     .help = "forward-auth (/v1/auth/DOMAIN): the request header whose value is the descriptor "
             "user"},
    {.name = "trusted-proxies",
     CUSTOM(set_trusted_proxies, show_trusted_proxies),
     .arg = "CIDR[,CIDR...]",
     .def = "none",
     .help = "forward-auth: peers whose X-Forwarded-For, X-Real-IP, X-Original-* and "
             "X-Forwarded-Method/-Uri are believed"},
    {.name = "auth-deny-status",
     INT(auth_deny_status),
     .min = 400,
     .max = 499,
     .arg = "N",
     .def = "429",
     .help = "forward-auth's status for a denied request (403 for nginx's auth_request)"},
    {.name = "https-port",
     CUSTOM(set_https_port, show_https_port),
     .arg = "N|any",
     .def = "0",
     .help = "also serve HTTP/1.1 over TLS (--tls-cert-file etc.) on port N of each --bind "
             "address; 0 = off; any = any free port"},
    {.name = "tls-cert-file",
     PATH(tls_cert_file),
     .arg = "FILE",
     .def = "none",
     .help = "the server's certificate chain (PEM), for --tls-port"},
    {.name = "tls-key-file",
     PATH(tls_key_file),
     .arg = "FILE",
     .def = "none",
     .help = "its private key (PEM, not encrypted)"},
    {.name = "tls-ca-cert-file",
     PATH(tls_ca_cert_file),
     .arg = "FILE",
     .def = "none",
     .help = "CA certificates that sign the clients' certificates"},
    {.name = "tls-auth-clients",
     CUSTOM(set_tls_auth_clients, show_tls_auth_clients),
     .arg = "yes|no|optional",
     .def = "yes",
     .help = "TLS clients must show a certificate of those CAs (yes, as Redis), may (optional), "
             "or are not asked (no)"},
    {.name = "config",
     PATH(config_file),
     .flag_only = 1,
     .arg = "FILE",
     .def = "none",
     .help = "read options from FILE; flags override it"},
    {.name = "log-level",
     CUSTOM(set_log_level, show_log_level),
     .arg = "LEVEL",
     .def = "info",
     .help = "debug, info, warn or error"},
    {.name = "help",
     .short_flag = 'h',
     ACTION(SL_CONFIG_HELP),
     .help = "print this list of options and exit"},
    {.name = "version",
     .short_flag = 'v',
     ACTION(SL_CONFIG_VERSION),
     .help = "print the version and exit"},
    {.name = "dump-options",
     ACTION(SL_CONFIG_DUMP),
     .help = "print every option as a tab-separated line (name, short flag, value's name, "
             "config file or not, default, the value this command line gives it, help) and exit"},
};
#define NOPTS (sizeof opts / sizeof opts[0])

/* set_option copies every path into a field of one size */
#define SAME_SIZE(f) (sizeof((sl_config *)0)->f == sizeof((sl_config *)0)->config_file)
_Static_assert(SAME_SIZE(snapshot) && SAME_SIZE(journal) && SAME_SIZE(rules) && SAME_SIZE(requirepass_file) &&
                   SAME_SIZE(users_file) && SAME_SIZE(tls_cert_file) && SAME_SIZE(tls_key_file) &&
                   SAME_SIZE(tls_ca_cert_file) && SAME_SIZE(admin_token_file),
               "path fields differ in size");

void sl_config_defaults(sl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->binds[0], "127.0.0.1");
    cfg->nbinds = 1;
    cfg->port = SL_SRV_DEFAULT_PORT;
    cfg->threads = 0;
    cfg->max_memory = (uint64_t)GB;
    cfg->on_store_full = SL_FULL_DENY; /* never reset a limit to make room (docs/sluiced.md) */
    cfg->max_clients = 10000;
    cfg->max_command = (uint64_t)MB;
    cfg->max_output = 8 * (uint64_t)MB;
    cfg->idle_timeout_ms = 300000;
    cfg->send_timeout_ms = 60000;
    cfg->recv_timeout_ms = 10000;
    cfg->snapshot_interval_ms = 60000;
    cfg->journal_fsync = SL_JFSYNC_EVERYSEC;
    cfg->after_crash = SL_AFTER_CRASH_TRUST;
    cfg->max_client_skew_ms = 3600000;
    strcpy(cfg->backend, "local");
    cfg->backend_timeout_ms = 50;
    cfg->on_backend_error = SL_BACKEND_DENY;
    cfg->fleet_size = 1;
    cfg->deny_cache = 1;
    cfg->log_level = SL_LOG_INFO;
    cfg->watch_rules = 1;
    cfg->protected_mode = 1;
    cfg->auth_fail_max = 10;
    cfg->auth_fail_window_ms = 60000;
    cfg->tls_port = -1;
    cfg->http_port = SL_HTTP_DEFAULT_PORT;
    cfg->grpc_port = SL_GRPC_DEFAULT_PORT;
    cfg->auth_deny_status = 429;
    cfg->https_port = 0;
    cfg->grpc_tls_port = 0;
    cfg->tls_auth_clients = SL_TLS_AUTH_YES; /* as Redis's tls-auth-clients */
    cfg->rls_semantics = SL_RLS_ENVOY;
    strcpy(cfg->limit_limit_header, "RateLimit-Limit"); /* envoyproxy/ratelimit's */
    strcpy(cfg->limit_remaining_header, "RateLimit-Remaining");
    strcpy(cfg->limit_reset_header, "RateLimit-Reset");
}

uint64_t sl_config_output_total(const sl_config *cfg)
{
    if (cfg->max_output_total > 0) return cfg->max_output_total;
    if (cfg->max_memory == 0) return SL_CONFIG_OUTPUT_TOTAL_UNBOUNDED;
    uint64_t v = cfg->max_memory / 4;
    return v > SL_CONFIG_OUTPUT_TOTAL_MIN ? v : SL_CONFIG_OUTPUT_TOTAL_MIN;
}

static void fail(char *err, size_t errlen, const origin *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail(char *err, size_t errlen, const origin *o, const char *fmt, ...)
{
    size_t n = 0;
    if (errlen == 0) return;
    if (o->file != NULL) {
        int k = snprintf(err, errlen, "%s:%d: ", o->file, o->line);
        n = k < 0 ? 0 : (size_t)k < errlen ? (size_t)k : errlen - 1;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - n, fmt, ap);
    va_end(ap);
}

/* How an option is named in messages: "--port" on the command line, "port"
 * in a file. */
static const char *dash(const origin *o) { return o->file ? "" : "--"; }

/* Printable, bounded copy of a token for messages. */
static const char *tok(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++)
        buf[n++] = (s[i] >= ' ' && s[i] < 0x7f) ? s[i] : '?';
    if (n < len && n + 4 <= cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* Bytes with an optional suffix: sl__size_parse (util.h), k = kb = 1024,
 * m = mb = 2^20, g = gb = 2^30, as `sluicectl replay --max-memory` reads them. */
static int parse_size(const char *s, size_t len, int64_t *out)
{
    uint64_t v;
    if (sl__size_parse(s, len, &v) != 0) return -1;
    *out = (int64_t)v; /* at most INT64_MAX */
    return 0;
}

/* "0" (never / off), or a duration with an explicit unit: a bare number
 * would be milliseconds by SPEC section 1, which for a timeout reads like
 * seconds to most people, so it is refused rather than guessed. */
static int parse_duration(const char *s, size_t len, int64_t *out, int *needs_unit)
{
    *needs_unit = 0;
    if (len == 1 && s[0] == '0') {
        *out = 0;
        return 0;
    }
    if (len > 0 && s[len - 1] >= '0' && s[len - 1] <= '9') {
        *needs_unit = 1;
        return -1;
    }
    return sl_duration_parse(s, len, out) == 0 ? 0 : -1;
}

static int parse_bool(const char *s, size_t len, int *out)
{
    static const char *const yes[] = {"yes", "true", "on", "1"};
    static const char *const no[] = {"no", "false", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strlen(yes[i]) == len && strncasecmp(s, yes[i], len) == 0) return *out = 1, 0;
        if (strlen(no[i]) == len && strncasecmp(s, no[i], len) == 0) return *out = 0, 0;
    }
    return -1;
}

/* Adds the addresses in s[0..len) (separated by commas or blanks) to the
 * bind list; the first bind of a source replaces the list it inherited. */
static int add_binds(sl_config *c, const char *s, size_t len, origin *o, char *err, size_t errlen)
{
    char t[80];
    if (!o->binds_reset) {
        c->nbinds = 0;
        o->binds_reset = 1;
    }
    size_t i = 0;
    int added = 0;
    while (i < len) {
        while (i < len && (s[i] == ',' || s[i] == ' ' || s[i] == '\t')) i++;
        if (i == len) break;
        size_t b = i;
        while (i < len && s[i] != ',' && s[i] != ' ' && s[i] != '\t') i++;
        size_t n = i - b;
        const char *a = s + b;
        if (n >= 2 && a[0] == '[' && a[n - 1] == ']') a++, n -= 2; /* [::1] */
        char addr[64];
        unsigned char bin[16];
        if (n == 0 || n >= sizeof addr) goto bad;
        memcpy(addr, a, n);
        addr[n] = '\0';
        if (inet_pton(AF_INET, addr, bin) != 1 && inet_pton(AF_INET6, addr, bin) != 1) goto bad;
        for (int k = 0; k < c->nbinds; k++)
            if (strcmp(c->binds[k], addr) == 0) goto next; /* listed twice: once is enough */
        if (c->nbinds == SL_CONFIG_MAX_BINDS) {
            fail(err, errlen, o, "too many %sbind addresses at '%s' (at most %d)", dash(o),
                 tok(s + b, i - b, t, sizeof t), SL_CONFIG_MAX_BINDS);
            return -1;
        }
        strcpy(c->binds[c->nbinds++], addr);
    next:
        added++;
        continue;
    bad:
        fail(err, errlen, o, "invalid %sbind '%s': expected an IPv4 or IPv6 address", dash(o),
             tok(s + b, i - b, t, sizeof t));
        return -1;
    }
    if (added == 0) {
        fail(err, errlen, o, "%sbind needs at least one address", dash(o));
        return -1;
    }
    return 0;
}

/* The --config row: read before every other flag, never in a file. */
static int is_config(const opt *op)
{
    return op->kind == K_PATH && op->off == offsetof(sl_config, config_file);
}

/* Sets option op to the value v[0..vlen) in c.  Returns 0 or -1 with err. */
static int set_option(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o, char *err,
                      size_t errlen)
{
    char t[80];
    int64_t x;
    int needs_unit, b;
    const char *d = dash(o);
    char *field = (char *)c + op->off;
    switch (op->kind) {
    case K_INT:
        if (sl_int_parse(v, vlen, op->max, &x) != 0 || x < op->min) {
            fail(err, errlen, o, "invalid %s%s '%s': expected an integer %lld..%lld", d, op->name,
                 tok(v, vlen, t, sizeof t), (long long)op->min, (long long)op->max);
            return -1;
        }
        *(int *)(void *)field = (int)x;
        return 0;
    case K_SIZE:
        if (parse_size(v, vlen, &x) != 0 || x < op->min || x > op->max) {
            fail(err, errlen, o,
                 "invalid %s%s '%s': expected bytes %lld..%lld, with an optional suffix "
                 "k, m or g (k = kb = 1024)",
                 d, op->name, tok(v, vlen, t, sizeof t), (long long)op->min, (long long)op->max);
            return -1;
        }
        *(uint64_t *)(void *)field = (uint64_t)x;
        return 0;
    case K_DURATION:
        if (parse_duration(v, vlen, &x, &needs_unit) != 0) {
            const char *zero = op->zero != NULL ? op->zero : "never";
            if (needs_unit)
                fail(err, errlen, o,
                     "invalid %s%s '%s': give a unit (ms, s, m, h or d), or 0 for %s", d, op->name,
                     tok(v, vlen, t, sizeof t), zero);
            else
                fail(err, errlen, o,
                     "invalid %s%s '%s': expected a duration such as 500ms, 30s, 5m or 1h, "
                     "or 0 for %s",
                     d, op->name, tok(v, vlen, t, sizeof t), zero);
            return -1;
        }
        *(int64_t *)(void *)field = x;
        return 0;
    case K_PATH:
        if (vlen == 0 || vlen >= op->size || memchr(v, '\0', vlen) != NULL) {
            fail(err, errlen, o, "invalid %s%s '%s': expected a file name of 1..%zu bytes", d,
                 op->name, tok(v, vlen, t, sizeof t), op->size - 1);
            return -1;
        }
        memcpy(field, v, vlen);
        field[vlen] = '\0';
        return 0;
    case K_BOOL:
        if (parse_bool(v, vlen, &b) != 0) {
            fail(err, errlen, o, "invalid %s%s '%s': expected yes or no", d, op->name,
                 tok(v, vlen, t, sizeof t));
            return -1;
        }
        *(int *)(void *)field = b;
        return 0;
    case K_CUSTOM: return op->set(c, op, v, vlen, o, err, errlen);
    case K_ACTION: return 0;
    }
    return 0;
}

static int set_bind(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o, char *err,
                    size_t errlen)
{
    (void)op;
    return add_binds(c, v, vlen, o, err, errlen);
}

/* N/DUR: N failed logins per client address in DUR. */
static int set_auth_fail_limit(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                               char *err, size_t errlen)
{
    char t[80];
    const char *slash = memchr(v, '/', vlen);
    int64_t n = 0, w = 0;
    int needs_unit;
    if (slash == NULL || sl_int_parse(v, (size_t)(slash - v), SL_AUTH_MAX_FAILS, &n) != 0 ||
        n < 1 || parse_duration(slash + 1, vlen - (size_t)(slash + 1 - v), &w, &needs_unit) != 0 ||
        w == 0) {
        fail(err, errlen, o,
             "invalid %s%s '%s': expected N/DURATION (N failed logins per client address "
             "in DURATION, N from 1 to %d), e.g. 10/1m",
             dash(o), op->name, tok(v, vlen, t, sizeof t), SL_AUTH_MAX_FAILS);
        return -1;
    }
    c->auth_fail_max = n;
    c->auth_fail_window_ms = w;
    return 0;
}

/* N/DUR: the elastic rules' pool (sl_check_pool_parse). */
static int set_capacity(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                        char *err, size_t errlen)
{
    char t[80], buf[sizeof c->capacity], why[160];
    sl_params pool;
    if (vlen >= sizeof buf || memchr(v, '\0', vlen) != NULL) {
        fail(err, errlen, o, "invalid %s%s '%s': expected N/DURATION, e.g. 5000/1s", dash(o),
             op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    memcpy(buf, v, vlen);
    buf[vlen] = '\0';
    if (sl_check_pool_parse(buf, &pool, why, sizeof why) != 0) {
        fail(err, errlen, o, "invalid %s%s: %s", dash(o), op->name, why);
        return -1;
    }
    memcpy(c->capacity, buf, vlen + 1);
    c->pool = pool;
    return 0;
}

/* --backend: local, or redis:// URLs (one, or a ring's) checked whole now
 * (sl_backend_url_check names the bad element and part); reaching them is
 * main's, at start. */
static int set_backend(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                       char *err, size_t errlen)
{
    char why[600];
    if (vlen == 5 && memcmp(v, "local", 5) == 0) {
        strcpy(c->backend, "local");
        return 0;
    }
    if (memchr(v, '\0', vlen) != NULL || vlen >= sizeof c->backend) {
        fail(err, errlen, o, "invalid %s%s: a NUL byte, or longer than %zu bytes", dash(o),
             op->name, sizeof c->backend - 1);
        return -1;
    }
    if (sl_backend_url_check(v, vlen, why, sizeof why) != 0) {
        fail(err, errlen, o, "invalid %s%s %s", dash(o), op->name, why);
        return -1;
    }
    memcpy(c->backend, v, vlen);
    c->backend[vlen] = '\0';
    return 0;
}

static int set_backend_timeout(sl_config *c, const opt *op, const char *v, size_t vlen,
                               origin *o, char *err, size_t errlen)
{
    char t[80];
    int64_t ms;
    int needs_unit = 0;
    if (parse_duration(v, vlen, &ms, &needs_unit) != 0 || ms < 1 || ms > 60000) {
        fail(err, errlen, o, "invalid %s%s '%s': expected a duration 1ms..60s, such as 50ms",
             dash(o), op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    c->backend_timeout_ms = ms;
    return 0;
}

static int set_on_backend_error(sl_config *c, const opt *op, const char *v, size_t vlen,
                                origin *o, char *err, size_t errlen)
{
    char t[80];
    for (int p = 0; p < SL_BACKEND_POLICIES; p++) {
        const char *name = sl_backend_policy_name(p);
        if (strlen(name) == vlen && memcmp(v, name, vlen) == 0) {
            c->on_backend_error = p;
            return 0;
        }
    }
    fail(err, errlen, o, "invalid %s%s '%s': expected deny, allow or local", dash(o), op->name,
         tok(v, vlen, t, sizeof t));
    return -1;
}

/* none, or replicas:N with N 1..SL_DURABILITY_REPLICAS_MAX. */
static int set_durability(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                          char *err, size_t errlen)
{
    char t[80];
    int64_t n;
    if (vlen == 4 && memcmp(v, "none", 4) == 0) {
        c->durability = 0;
        return 0;
    }
    if (vlen > 9 && memcmp(v, "replicas:", 9) == 0 &&
        sl_int_parse(v + 9, vlen - 9, SL_DURABILITY_REPLICAS_MAX, &n) == 0 && n >= 1) {
        c->durability = (int)n;
        return 0;
    }
    fail(err, errlen, o, "invalid %s%s '%s': expected none, or replicas:N with N 1..%d", dash(o),
         op->name, tok(v, vlen, t, sizeof t), SL_DURABILITY_REPLICAS_MAX);
    return -1;
}

/* A port: 0..65535; with off (--port only), no listener (-1). */
static int port_value(const opt *op, const char *v, size_t vlen, origin *o, int off_word,
                      int *out, char *err, size_t errlen)
{
    char t[80];
    int64_t x;
    if (off_word && vlen == 3 && strncasecmp(v, "off", 3) == 0) {
        *out = -1;
        return 0;
    }
    if (sl_int_parse(v, vlen, 65535, &x) != 0) {
        fail(err, errlen, o, "invalid %s%s '%s': expected an integer 0..65535%s", dash(o),
             op->name, tok(v, vlen, t, sizeof t),
             off_word ? ", or off (no plain listener: TLS only)" : "");
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int set_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o, char *err,
                    size_t errlen)
{
    return port_value(op, v, vlen, o, 1, &c->port, err, errlen);
}

static int set_tls_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                        char *err, size_t errlen)
{
    return port_value(op, v, vlen, o, 0, &c->tls_port, err, errlen);
}

/* SPEC section 8: 0 turns HTTP off; "any" lets the kernel pick a free
 * port (what --port 0 does for RESP; tests use it).  --http-port and
 * --https-port into *dst. */
static int http_port_value(const opt *op, const char *v, size_t vlen, origin *o, int *dst,
                           char *err, size_t errlen)
{
    char t[80];
    int64_t x;
    if (vlen == 3 && strncasecmp(v, "any", 3) == 0) {
        *dst = SL_HTTP_PORT_ANY;
        return 0;
    }
    if (sl_int_parse(v, vlen, 65535, &x) != 0) {
        fail(err, errlen, o,
             "invalid %s%s '%s': expected an integer 0..65535 (0 = off), or any (a free port)",
             dash(o), op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    *dst = (int)x;
    return 0;
}

/* Whether v[0..vlen) is an HTTP header name (RFC 9110 token) of 1..cap-1
 * characters. */
static int is_header_name(const char *v, size_t vlen, size_t cap)
{
    size_t i;
    for (i = 0; i < vlen; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL)))
            break;
    }
    return vlen > 0 && i == vlen && vlen < cap;
}

/* envoy|sluice */
static int set_rls_semantics(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                             char *err, size_t errlen)
{
    char t[80];
    if (vlen == 5 && memcmp(v, "envoy", 5) == 0) {
        c->rls_semantics = SL_RLS_ENVOY;
        return 0;
    }
    if (vlen == 6 && memcmp(v, "sluice", 6) == 0) {
        c->rls_semantics = SL_RLS_SLUICE;
        return 0;
    }
    fail(err, errlen, o, "invalid %s%s '%s': expected envoy or sluice", dash(o), op->name,
         tok(v, vlen, t, sizeof t));
    return -1;
}

static void show_rls_semantics(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->rls_semantics == SL_RLS_SLUICE ? "sluice" : "envoy");
}

/* The field of c a --limit-*-header option sets (op's name tells which). */
static char *header_field(sl_config *c, const opt *op)
{
    return strcmp(op->name, "limit-limit-header") == 0       ? c->limit_limit_header
           : strcmp(op->name, "limit-remaining-header") == 0 ? c->limit_remaining_header
                                                             : c->limit_reset_header;
}

/* --limit-limit-header and its two siblings: a header name. */
static int set_header_name(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                           char *err, size_t errlen)
{
    char t[80];
    char *dst = header_field(c, op);
    if (!is_header_name(v, vlen, sizeof c->limit_limit_header)) {
        fail(err, errlen, o,
             "invalid %s%s '%s': expected a header name (1..%zu letters, digits or "
             "!#$%%&'*+-.^_`|~)",
             dash(o), op->name, tok(v, vlen, t, sizeof t), sizeof c->limit_limit_header - 1);
        return -1;
    }
    memcpy(dst, v, vlen);
    dst[vlen] = '\0';
    return 0;
}

static void show_limit_limit_header(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->limit_limit_header);
}

static void show_limit_remaining_header(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->limit_remaining_header);
}

static void show_limit_reset_header(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->limit_reset_header);
}

/* An HTTP header name (RFC 9110 token): 1..127 of its characters. */
static int set_user_header(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                           char *err, size_t errlen)
{
    char t[80];
    if (!is_header_name(v, vlen, sizeof c->user_header)) {
        fail(err, errlen, o,
             "invalid %s%s '%s': expected a header name (1..%zu letters, digits or "
             "!#$%%&'*+-.^_`|~)",
             dash(o), op->name, tok(v, vlen, t, sizeof t), sizeof c->user_header - 1);
        return -1;
    }
    memcpy(c->user_header, v, vlen);
    c->user_header[vlen] = '\0';
    return 0;
}

/* One "ADDR[/BITS]" (n bytes) into *out; 0 or -1. */
static int cidr_parse(const char *s, size_t n, sl_cidr *out)
{
    char a[INET6_ADDRSTRLEN + 1];
    const char *slash = memchr(s, '/', n);
    size_t alen = slash ? (size_t)(slash - s) : n;
    if (alen == 0 || alen >= sizeof a) return -1;
    memcpy(a, s, alen);
    a[alen] = '\0';
    sl_cidr c = {0};
    if (inet_pton(AF_INET, a, c.addr) == 1)
        c.family = AF_INET, c.bits = 32;
    else if (inet_pton(AF_INET6, a, c.addr) == 1)
        c.family = AF_INET6, c.bits = 128;
    else
        return -1;
    if (slash != NULL) {
        int64_t b;
        if (sl_int_parse(slash + 1, n - alen - 1, c.bits, &b) != 0) return -1;
        c.bits = (int)b;
    }
    for (int i = c.bits; i < 128; i++) /* the host bits: 0, so a match is a compare */
        c.addr[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
    *out = c;
    return 0;
}

/* --trusted-proxies: a comma-separated list of CIDR blocks (spaces around
 * the commas allowed); "" or "none" empties it.  Replaces the list: the
 * last one given wins, whole or not at all. */
static int set_trusted_proxies(sl_config *c, const opt *op, const char *v, size_t vlen,
                               origin *o, char *err, size_t errlen)
{
    char t[80];
    sl_cidr list[SL_CONFIG_MAX_TRUSTED];
    int n = 0;
    if (vlen >= sizeof c->trusted_proxies || memchr(v, '\0', vlen) != NULL) {
        fail(err, errlen, o, "invalid %s%s: longer than %zu bytes", dash(o), op->name,
             sizeof c->trusted_proxies - 1);
        return -1;
    }
    int none = vlen == 0 || (vlen == 4 && strncasecmp(v, "none", 4) == 0);
    for (size_t i = 0; !none && i <= vlen;) {
        size_t j = i;
        while (j < vlen && v[j] != ',') j++;
        size_t a = i, b = j;
        while (a < b && v[a] == ' ') a++;
        while (b > a && v[b - 1] == ' ') b--;
        if (n == SL_CONFIG_MAX_TRUSTED) {
            fail(err, errlen, o, "invalid %s%s: more than %d blocks", dash(o), op->name,
                 SL_CONFIG_MAX_TRUSTED);
            return -1;
        }
        if (cidr_parse(v + a, b - a, &list[n]) != 0) {
            fail(err, errlen, o,
                 "invalid %s%s: '%s' is not an address or CIDR block (expected e.g. "
                 "127.0.0.1, 10.0.0.0/8 or ::1/128)",
                 dash(o), op->name, tok(v + a, b - a, t, sizeof t));
            return -1;
        }
        n++;
        i = j + 1;
    }
    memcpy(c->trusted, list, (size_t)n * sizeof list[0]);
    c->ntrusted = n;
    memcpy(c->trusted_proxies, v, vlen);
    c->trusted_proxies[vlen] = '\0';
    if (none) c->trusted_proxies[0] = '\0';
    return 0;
}

static void show_user_header(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->user_header);
}

static void show_trusted_proxies(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->trusted_proxies);
}

static int set_http_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                         char *err, size_t errlen)
{
    return http_port_value(op, v, vlen, o, &c->http_port, err, errlen);
}

static int set_grpc_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                         char *err, size_t errlen)
{
    return http_port_value(op, v, vlen, o, &c->grpc_port, err, errlen);
}

static int set_grpc_tls_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                             char *err, size_t errlen)
{
    return http_port_value(op, v, vlen, o, &c->grpc_tls_port, err, errlen);
}

static int set_https_port(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                          char *err, size_t errlen)
{
    return http_port_value(op, v, vlen, o, &c->https_port, err, errlen);
}

/* Redis's words: yes, no or optional. */
static int set_tls_auth_clients(sl_config *c, const opt *op, const char *v, size_t vlen,
                                origin *o, char *err, size_t errlen)
{
    char t[80];
    int b;
    if (vlen == 8 && strncasecmp(v, "optional", 8) == 0) {
        c->tls_auth_clients = SL_TLS_AUTH_OPTIONAL;
    } else if (parse_bool(v, vlen, &b) == 0) {
        c->tls_auth_clients = b ? SL_TLS_AUTH_YES : SL_TLS_AUTH_NO;
    } else {
        fail(err, errlen, o, "invalid %s%s '%s': expected yes, no or optional", dash(o), op->name,
             tok(v, vlen, t, sizeof t));
        return -1;
    }
    return 0;
}

static int set_on_store_full(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                             char *err, size_t errlen)
{
    char t[80];
    if (vlen == 8 && memcmp(v, "deny-new", 8) == 0) {
        c->on_store_full = SL_FULL_DENY;
    } else if (vlen == 5 && memcmp(v, "evict", 5) == 0) {
        c->on_store_full = SL_FULL_EVICT;
    } else {
        fail(err, errlen, o, "invalid %s%s '%s': expected deny-new or evict", dash(o), op->name,
             tok(v, vlen, t, sizeof t));
        return -1;
    }
    return 0;
}

static int set_journal_fsync(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                             char *err, size_t errlen)
{
    char t[80];
    if (vlen == 6 && memcmp(v, "always", 6) == 0) {
        c->journal_fsync = SL_JFSYNC_ALWAYS;
    } else if (vlen == 8 && memcmp(v, "everysec", 8) == 0) {
        c->journal_fsync = SL_JFSYNC_EVERYSEC;
    } else if (vlen == 2 && memcmp(v, "no", 2) == 0) {
        c->journal_fsync = SL_JFSYNC_NO;
    } else {
        fail(err, errlen, o, "invalid %s%s '%s': expected always, everysec or no", dash(o),
             op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    return 0;
}

static int set_after_crash(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                           char *err, size_t errlen)
{
    char t[80];
    if (vlen == 11 && memcmp(v, "deny-window", 11) == 0) {
        c->after_crash = SL_AFTER_CRASH_DENY;
    } else if (vlen == 5 && memcmp(v, "trust", 5) == 0) {
        c->after_crash = SL_AFTER_CRASH_TRUST;
    } else {
        fail(err, errlen, o, "invalid %s%s '%s': expected deny-window or trust", dash(o),
             op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    return 0;
}

static int set_log_level(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o,
                         char *err, size_t errlen)
{
    char t[80];
    int lv;
    if (sl_log_level_parse(v, vlen, &lv) != 0) {
        fail(err, errlen, o, "invalid %s%s '%s': expected debug, info, warn or error", dash(o),
             op->name, tok(v, vlen, t, sizeof t));
        return -1;
    }
    c->log_level = lv;
    return 0;
}

/* ---- showing values (--dump-options) --------------------------------- */

/* ms as the largest unit that divides it exactly: 300000 -> "5m". */
static void show_ms(char *buf, size_t cap, int64_t ms)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    if (ms == 0) {
        snprintf(buf, cap, "0");
        return;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms % units[i].ms == 0) {
            snprintf(buf, cap, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
            return;
        }
    }
    snprintf(buf, cap, "%lldms", (long long)ms);
}

/* Bytes as the largest suffix that divides them exactly: 1 << 30 -> "1gb". */
static void show_bytes(char *buf, size_t cap, uint64_t v)
{
    if (v != 0 && v % (uint64_t)GB == 0)
        snprintf(buf, cap, "%llugb", (unsigned long long)(v / (uint64_t)GB));
    else if (v != 0 && v % (uint64_t)MB == 0)
        snprintf(buf, cap, "%llumb", (unsigned long long)(v / (uint64_t)MB));
    else if (v != 0 && v % (uint64_t)KB == 0)
        snprintf(buf, cap, "%llukb", (unsigned long long)(v / (uint64_t)KB));
    else
        snprintf(buf, cap, "%llu", (unsigned long long)v);
}

static void show_bind(const sl_config *c, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->nbinds && n < cap; i++) {
        int k = snprintf(buf + n, cap - n, "%s%s", i ? "," : "", c->binds[i]);
        if (k < 0) break;
        n += (size_t)k;
    }
}

/* The budget in force: --max-output-total, or the one derived from
 * --max-memory when it was not given. */
static void show_output_total(const sl_config *c, char *buf, size_t cap)
{
    show_bytes(buf, cap, sl_config_output_total(c));
}

/* The URLs without their passwords (--dump-options is not a place for them). */
static void show_backend(const sl_config *c, char *buf, size_t cap)
{
    sl_backend_url_shown(c->backend, buf, cap);
}

static void show_backend_timeout(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lldms", (long long)c->backend_timeout_ms);
}

static void show_on_backend_error(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", sl_backend_policy_name(c->on_backend_error));
}

static void show_durability(const sl_config *c, char *buf, size_t cap)
{
    if (c->durability > 0)
        snprintf(buf, cap, "replicas:%d", c->durability);
    else
        snprintf(buf, cap, "%s", ""); /* none, as an unset path shows */
}

static void show_capacity(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->capacity);
}

static void show_auth_fail_limit(const sl_config *c, char *buf, size_t cap)
{
    char w[32];
    show_ms(w, sizeof w, c->auth_fail_window_ms);
    snprintf(buf, cap, "%lld/%s", (long long)c->auth_fail_max, w);
}

static void show_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->port < 0)
        snprintf(buf, cap, "off");
    else
        snprintf(buf, cap, "%d", c->port);
}

static void show_tls_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->tls_port < 0)
        snprintf(buf, cap, "%s", ""); /* none, as an unset path shows */
    else
        snprintf(buf, cap, "%d", c->tls_port);
}

static void show_http_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->http_port == SL_HTTP_PORT_ANY)
        snprintf(buf, cap, "any");
    else
        snprintf(buf, cap, "%d", c->http_port);
}

static void show_grpc_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->grpc_port == SL_HTTP_PORT_ANY)
        snprintf(buf, cap, "any");
    else
        snprintf(buf, cap, "%d", c->grpc_port);
}

static void show_grpc_tls_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->grpc_tls_port == SL_HTTP_PORT_ANY)
        snprintf(buf, cap, "any");
    else
        snprintf(buf, cap, "%d", c->grpc_tls_port);
}

static void show_https_port(const sl_config *c, char *buf, size_t cap)
{
    if (c->https_port == SL_HTTP_PORT_ANY)
        snprintf(buf, cap, "any");
    else
        snprintf(buf, cap, "%d", c->https_port);
}

static void show_tls_auth_clients(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s",
             c->tls_auth_clients == SL_TLS_AUTH_YES  ? "yes"
             : c->tls_auth_clients == SL_TLS_AUTH_NO ? "no"
                                                     : "optional");
}

static void show_on_store_full(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->on_store_full == SL_FULL_DENY ? "deny-new" : "evict");
}

static void show_journal_fsync(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s",
             c->journal_fsync == SL_JFSYNC_ALWAYS     ? "always"
             : c->journal_fsync == SL_JFSYNC_EVERYSEC ? "everysec"
                                                      : "no");
}

static void show_after_crash(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", c->after_crash == SL_AFTER_CRASH_DENY ? "deny-window" : "trust");
}

static void show_log_level(const sl_config *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", sl_log_level_name(c->log_level));
}

/* Writes op's value in c to buf (cap bytes), as its flag would take it. */
static void show_option(const sl_config *c, const opt *op, char *buf, size_t cap)
{
    const char *field = (const char *)c + op->off;
    buf[0] = '\0';
    if (op->show != NULL) {
        op->show(c, buf, cap);
        return;
    }
    switch (op->kind) {
    case K_INT: snprintf(buf, cap, "%d", *(const int *)(const void *)field); break;
    case K_SIZE: show_bytes(buf, cap, *(const uint64_t *)(const void *)field); break;
    case K_DURATION: show_ms(buf, cap, *(const int64_t *)(const void *)field); break;
    case K_PATH: snprintf(buf, cap, "%s", field); break;
    case K_BOOL: snprintf(buf, cap, "%s", *(const int *)(const void *)field ? "yes" : "no"); break;
    case K_CUSTOM:
    case K_ACTION: break;
    }
}

static const opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].name) == len && memcmp(opts[i].name, name, len) == 0) return &opts[i];
    return NULL;
}

static const opt *find_short(char letter)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (opts[i].short_flag != 0 && opts[i].short_flag == letter) return &opts[i];
    return NULL;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

int sl_config_load_file(const char *path, sl_config *cfg, char *err, size_t errlen)
{
    origin o = {path, 0, 0};
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(errno));
        return -1;
    }
    sl_config tmp = *cfg;
    char *line = NULL;
    size_t linecap = 0;
    ssize_t got;
    char t[80];
    int rc = 0;
    errno = 0;
    while ((got = getline(&line, &linecap, f)) >= 0) {
        o.line++;
        size_t len = (size_t)got;
        if (len > SL_CONFIG_MAX_LINE) {
            fail(err, errlen, &o, "line longer than %d bytes", SL_CONFIG_MAX_LINE);
            rc = -1;
            break;
        }
        if (memchr(line, '\0', len) != NULL) {
            fail(err, errlen, &o, "NUL byte in line");
            rc = -1;
            break;
        }
        size_t i = 0;
        while (i < len && is_blank(line[i])) i++;
        while (len > i && is_blank(line[len - 1])) len--;
        if (i == len || line[i] == '#') continue;
        size_t nb = i;
        while (i < len && !is_blank(line[i])) i++;
        const char *name = line + nb;
        size_t nlen = i - nb;
        while (i < len && is_blank(line[i])) i++;
        const char *val = line + i;
        size_t vlen = len - i;
        if (vlen >= 2 && val[0] == '"' && val[vlen - 1] == '"') val++, vlen -= 2;
        const opt *op = find_opt(name, nlen);
        if (op == NULL || op->flag_only) {
            if (op != NULL && is_config(op))
                fail(err, errlen, &o, "'config' cannot be used inside a config file");
            else
                fail(err, errlen, &o, "unknown option '%s'", tok(name, nlen, t, sizeof t));
            rc = -1;
            break;
        }
        if (op->kind == K_BOOL && vlen == 0) {
            val = "yes";
            vlen = 3;
        }
        if (vlen == 0) {
            fail(err, errlen, &o, "%s needs a value", op->name);
            rc = -1;
            break;
        }
        if (set_option(&tmp, op, val, vlen, &o, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "cannot read config file '%s': %s", path, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc == 0) *cfg = tmp;
    return rc;
}

/* Splits argv[*i] ("--name", "--name=value", or a short flag such as -h)
 * into its option and value, taking the value from argv[*i + 1] when
 * needed.  A yes/no option takes the next word as its value unless that
 * starts with '-' (sluiced takes no other words), so `--watch-rules no`
 * and `--watch-rules maybe` are both read as the value given.  Returns the
 * option, or NULL with err set. */
static const opt *next_arg(int argc, char **argv, int *i, const char **val, size_t *vlen, char *err,
                           size_t errlen)
{
    const char *a = argv[*i];
    char t[80];
    origin o = {NULL, 0, 0};
    if (a[0] == '-' && a[1] != '-' && a[1] != '\0' && a[2] == '\0') {
        const opt *op = find_short(a[1]);
        if (op != NULL) {
            *val = "";
            *vlen = 0;
            return op;
        }
    }
    if (strncmp(a, "--", 2) != 0) {
        fail(err, errlen, &o, "unexpected argument '%s' (options start with --)",
             tok(a, strlen(a), t, sizeof t));
        return NULL;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    const opt *op = find_opt(name, nlen);
    if (op == NULL) {
        fail(err, errlen, &o, "unknown option '--%s'", tok(name, nlen, t, sizeof t));
        return NULL;
    }
    if (eq != NULL) {
        if (op->kind == K_ACTION) {
            fail(err, errlen, &o, "--%s takes no value", op->name);
            return NULL;
        }
        *val = eq + 1;
        *vlen = strlen(eq + 1);
    } else if (op->kind == K_ACTION) {
        *val = "";
        *vlen = 0;
    } else if (op->kind == K_BOOL) {
        if (*i + 1 < argc && argv[*i + 1][0] != '-') {
            *val = argv[++*i];
            *vlen = strlen(*val);
        } else {
            *val = "yes"; /* a bare flag */
            *vlen = 3;
        }
    } else if (*i + 1 < argc) {
        *val = argv[++*i];
        *vlen = strlen(*val);
    } else {
        fail(err, errlen, &o, "--%s needs a value", op->name);
        return NULL;
    }
    return op;
}

/* Reads the --admin-token-file token into c: the whole file less one final
 * newline ("\n" or "\r\n"), 1 to SL_ADMIN_TOKEN_MAX visible ASCII bytes (a
 * space could never arrive whole in a header).  Returns 0, or -1 with err
 * naming the file. */
static int read_admin_token(sl_config *c, char *err, size_t errlen)
{
    c->admin_token_len = 0;
    c->admin_token[0] = '\0';
    if (c->admin_token_file[0] == '\0') return 0;
    const char *f = c->admin_token_file;
    FILE *fp = fopen(f, "re");
    if (fp == NULL) {
        snprintf(err, errlen, "--admin-token-file %s: cannot read it: %s", f, strerror(errno));
        return -1;
    }
    char buf[SL_ADMIN_TOKEN_MAX + 3];
    size_t n = fread(buf, 1, sizeof buf, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        snprintf(err, errlen, "--admin-token-file %s: cannot read it", f);
        return -1;
    }
    if (n > 0 && buf[n - 1] == '\n') n--;
    if (n > 0 && buf[n - 1] == '\r') n--;
    if (n == 0) {
        snprintf(err, errlen, "--admin-token-file %s is empty: write the token in it", f);
        return -1;
    }
    if (n > SL_ADMIN_TOKEN_MAX) {
        snprintf(err, errlen, "--admin-token-file %s: the token is longer than %d bytes", f,
                 SL_ADMIN_TOKEN_MAX);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] <= ' ' || (unsigned char)buf[i] >= 0x7f) {
            snprintf(err, errlen,
                     "--admin-token-file %s: byte %zu of the token is a space, a control "
                     "character or not ASCII (a bearer token is printable ASCII)",
                     f, i + 1);
            return -1;
        }
    memcpy(c->admin_token, buf, n);
    c->admin_token[n] = '\0';
    c->admin_token_len = n;
    return 0;
}

/* What no single option can say wrong: the listeners and TLS taken
 * together.  Returns 0, or -1 with err (options named as flags). */
static int check_listeners(const sl_config *c, char *err, size_t errlen)
{
    int tls = c->tls_port >= 0, https = c->https_port != 0 || c->grpc_tls_port != 0;
    if (c->port < 0 && !tls) {
        snprintf(err, errlen,
                 "--port off leaves nothing to listen on: give --tls-port N (with its "
                 "certificate and key) for TLS only");
        return -1;
    }
    if ((tls || https) && (c->tls_cert_file[0] == '\0' || c->tls_key_file[0] == '\0')) {
        snprintf(err, errlen,
                 "--%s needs --tls-cert-file and --tls-key-file (the server's "
                 "certificate and its private key)",
                 tls                  ? "tls-port"
                 : c->https_port != 0 ? "https-port"
                                      : "grpc-tls-port");
        return -1;
    }
    if (!tls && !https && (c->tls_cert_file[0] != '\0' || c->tls_key_file[0] != '\0' ||
                 c->tls_ca_cert_file[0] != '\0')) {
        snprintf(err, errlen,
                 "%s is given but --tls-port is not: add --tls-port N for a TLS listener "
                 "(sluiced would otherwise serve in clear only)",
                 c->tls_cert_file[0]  ? "--tls-cert-file"
                 : c->tls_key_file[0] ? "--tls-key-file"
                                      : "--tls-ca-cert-file");
        return -1;
    }
    if (tls && c->tls_port != 0 && c->tls_port == c->port) {
        snprintf(err, errlen, "--tls-port %d is also --port: give them different ports",
                 c->tls_port);
        return -1;
    }
    if (c->http_port > 0 && (c->http_port == c->port || (tls && c->http_port == c->tls_port))) {
        snprintf(err, errlen, "--http-port %d is also --%s: give them different ports",
                 c->http_port, c->http_port == c->port ? "port" : "tls-port");
        return -1;
    }
    if (c->https_port > 0 &&
        (c->https_port == c->port || (tls && c->https_port == c->tls_port) ||
         c->https_port == c->http_port)) {
        snprintf(err, errlen, "--https-port %d is also --%s: give them different ports",
                 c->https_port,
                 c->https_port == c->port        ? "port"
                 : c->https_port == c->http_port ? "http-port"
                                                 : "tls-port");
        return -1;
    }
    if (c->grpc_port > 0 &&
        (c->grpc_port == c->port || (tls && c->grpc_port == c->tls_port) ||
         c->grpc_port == c->http_port || (https && c->grpc_port == c->https_port))) {
        snprintf(err, errlen, "--grpc-port %d is also --%s: give them different ports",
                 c->grpc_port,
                 c->grpc_port == c->port        ? "port"
                 : c->grpc_port == c->http_port ? "http-port"
                 : c->grpc_port == c->tls_port  ? "tls-port"
                                                : "https-port");
        return -1;
    }
    if (c->grpc_tls_port > 0 &&
        (c->grpc_tls_port == c->port || (tls && c->grpc_tls_port == c->tls_port) ||
         c->grpc_tls_port == c->http_port || c->grpc_tls_port == c->https_port ||
         c->grpc_tls_port == c->grpc_port)) {
        snprintf(err, errlen, "--grpc-tls-port %d is also --%s: give them different ports",
                 c->grpc_tls_port,
                 c->grpc_tls_port == c->port         ? "port"
                 : c->grpc_tls_port == c->http_port  ? "http-port"
                 : c->grpc_tls_port == c->grpc_port  ? "grpc-port"
                 : c->grpc_tls_port == c->https_port ? "https-port"
                                                     : "tls-port");
        return -1;
    }
    if ((tls || https) && c->tls_auth_clients != SL_TLS_AUTH_NO && c->tls_ca_cert_file[0] == '\0') {
        snprintf(err, errlen,
                 "--tls-auth-clients %s%s needs --tls-ca-cert-file, the CA that signs the "
                 "clients' certificates; or give --tls-auth-clients no to ask clients for none",
                 c->tls_auth_clients == SL_TLS_AUTH_YES ? "yes" : "optional",
                 c->tls_auth_clients == SL_TLS_AUTH_YES ? " (the default, as Redis's)" : "");
        return -1;
    }
    return 0;
}

/* Go's strconv.ParseBool, which envoyproxy/ratelimit's settings use:
 * 1 t T TRUE true True, 0 f F FALSE false False.  0 or -1. */
static int parse_go_bool(const char *s, int *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (int i = 0; i < 6; i++) {
        if (strcmp(s, yes[i]) == 0) return *out = 1, 0;
        if (strcmp(s, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

/* Applies the environment variables of the options that have one (opt.env)
 * to c: after the config file, before the flags.  A yes/no variable takes
 * Go's spellings (parse_go_bool), as envoyproxy/ratelimit reads it; any
 * other goes through the option's own parser.  An empty variable is as
 * good as unset (envconfig's habit: its default stays).  Returns 0, or -1
 * with err naming the variable and quoting its value. */
static int apply_env(sl_config *c, char *err, size_t errlen)
{
    char t[80], why[256];
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *op = &opts[i];
        const char *v = op->env ? getenv(op->env) : NULL;
        if (v == NULL || v[0] == '\0') continue;
        if (op->kind == K_BOOL) {
            int b;
            if (parse_go_bool(v, &b) != 0) {
                snprintf(err, errlen,
                         "invalid environment variable %s='%s': expected true or false (1, t, "
                         "T, TRUE, true, True, 0, f, F, FALSE, false or False)",
                         op->env, tok(v, strlen(v), t, sizeof t));
                return -1;
            }
            *(int *)(void *)((char *)c + op->off) = b;
            continue;
        }
        origin o = {NULL, 0, 0};
        if (set_option(c, op, v, strlen(v), &o, why, sizeof why) != 0) {
            snprintf(err, errlen, "invalid environment variable %s (--%s): %s", op->env,
                     op->name, why);
            return -1;
        }
    }
    return 0;
}

int sl_config_parse_args(int argc, char **argv, sl_config *cfg, char *err, size_t errlen)
{
    sl_config tmp = *cfg;
    const char *val;
    size_t vlen;
    int dump = 0;

    /* First pass: --help, --version, --config (the file comes before the
     * flags); --dump-options waits until everything else has parsed. */
    for (int i = 1; i < argc; i++) {
        const opt *op = next_arg(argc, argv, &i, &val, &vlen, err, errlen);
        if (op == NULL) return -1;
        if (op->kind == K_ACTION && op->action == SL_CONFIG_DUMP)
            dump = 1;
        else if (op->kind == K_ACTION)
            return op->action;
        if (is_config(op)) {
            origin o = {NULL, 0, 0};
            if (set_option(&tmp, op, val, vlen, &o, err, errlen) != 0) return -1;
        }
    }
    if (tmp.config_file[0] != '\0' && sl_config_load_file(tmp.config_file, &tmp, err, errlen) != 0)
        return -1;

    if (apply_env(&tmp, err, errlen) != 0) return -1;
    origin o = {NULL, 0, 0};
    for (int i = 1; i < argc; i++) {
        const opt *op = next_arg(argc, argv, &i, &val, &vlen, err, errlen);
        if (op == NULL) return -1;
        if (is_config(op)) continue;
        if (set_option(&tmp, op, val, vlen, &o, err, errlen) != 0) return -1;
    }
    if (check_listeners(&tmp, err, errlen) != 0) return -1;
    /* the token is read to start, not to print the options */
    if (!dump && read_admin_token(&tmp, err, errlen) != 0) return -1;
    *cfg = tmp;
    return dump ? SL_CONFIG_DUMP : 0;
}

/* ---- --help and --dump-options ---------------------------------------- */

#define HELP_WIDTH  79 /* columns of --help */
#define HELP_INDENT 26 /* where an option's help starts */

/* Writes s word by word from column col, breaking lines before HELP_WIDTH
 * and starting each new one at column indent.  Returns the column it
 * ends at. */
static size_t put_wrapped(FILE *f, const char *s, size_t col, size_t indent)
{
    while (*s != '\0') {
        while (*s == ' ') s++;
        size_t n = strcspn(s, " ");
        if (n == 0) break;
        if (col > indent && col + 1 + n > HELP_WIDTH) {
            fprintf(f, "\n%*s", (int)indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(s, 1, n, f);
        col += n;
        s += n;
    }
    return col;
}

/* op's help as --help, --dump-options and sluiced(8) give it: its sentence
 * and, for a duration, what 0 means. */
static void describe(const opt *op, char *buf, size_t cap)
{
    if (op->kind == K_DURATION)
        snprintf(buf, cap, "%s; 0 = %s", op->help, op->zero != NULL ? op->zero : "never");
    else
        snprintf(buf, cap, "%s", op->help);
}

void sl_config_usage(FILE *f)
{
    char text[1024], flag[64];
    fputs("usage: sluiced [options]\n"
          "\n"
          "sluiced is a rate-limit server speaking the Redis protocol (RESP2 and RESP3).\n",
          f);
    size_t col = put_wrapped(f, "Options other than", 0, 0);
    size_t nflag = 0, seen = 0;
    for (size_t i = 0; i < NOPTS; i++) nflag += opts[i].flag_only != 0;
    for (size_t i = 0; i < NOPTS; i++) { /* "--a, --b and --c" */
        if (!opts[i].flag_only) continue;
        seen++;
        if (seen > 1 && seen == nflag) col = put_wrapped(f, "and", col, 0);
        snprintf(flag, sizeof flag, "--%s%s", opts[i].name, seen + 1 < nflag ? "," : "");
        col = put_wrapped(f, flag, col, 0);
    }
    put_wrapped(f, "may also be set in a config file as `name value`.", col, 0);
    fputs("\n\n", f);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *op = &opts[i];
        int n = fprintf(f, "  --%s%s%s", op->name, op->arg ? " " : "", op->arg ? op->arg : "");
        if (op->short_flag) n += fprintf(f, ", -%c", op->short_flag);
        if (n + 1 >= HELP_INDENT) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
        } else {
            fprintf(f, "%*s", HELP_INDENT - n, "");
        }
        describe(op, text, sizeof text);
        if (op->def != NULL) {
            size_t len = strlen(text);
            snprintf(text + len, sizeof text - len, " (default %s)", op->def);
        }
        if (op->env != NULL) {
            size_t len = strlen(text);
            snprintf(text + len, sizeof text - len, "; environment %s", op->env);
        }
        put_wrapped(f, text, HELP_INDENT, HELP_INDENT);
        fputc('\n', f);
    }
    fputs("\n", f);
    put_wrapped(f,
                "A yes|no option alone means yes; its value is the next word or follows '=' "
                "(--watch-rules no, --watch-rules=no); true/false, on/off and 1/0 are taken too.  "
                "BYTES take k, m or g (or kb, mb, gb): k = 1024, m = 2^20, g = 2^30.  DUR takes a "
                "unit: 500ms, 30s, 5m, 1h, 1d.  Signals: TERM/INT save and exit; HUP reloads the "
                "rules.",
                0, 0);
    fputs("\nDocumentation: sluiced(8), docs/sluiced.md\n", f);
}

void sl_config_dump(FILE *f, const sl_config *cfg)
{
    char value[1200], text[1024], t[1200];
    fputs("# name\tshort\tvalue-name\tconfig-file\tdefault\tvalue\thelp\n", f);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *op = &opts[i];
        show_option(cfg, op, value, sizeof value);
        describe(op, text, sizeof text);
        char letter[3] = {op->short_flag ? '-' : '\0', op->short_flag, '\0'};
        fprintf(f, "%s\t%s\t%s\t%s\t%s\t", op->name, letter, op->arg ? op->arg : "",
                op->flag_only ? "no" : "yes", op->def ? op->def : "");
        fprintf(f, "%s\t%s\n", tok(value, strlen(value), t, sizeof t), text);
    }
}
