/*
 * config.c -- sluiced's settings from flags and a config file (config.h).
 *
 * One table describes every option once: its name (the flag is "--" + name,
 * the file key is the name), what kind of value it takes and its range.
 * Flags and file lines both go through set_option(), so the two can never
 * disagree on what a value means.  Numbers are parsed by length
 * (sl_int_parse), never with atoi/strtol, and every error quotes the token.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "config.h"
#include "check.h"
#include "log.h"
#include "util.h"

enum opt_id {
    OPT_PORT,
    OPT_BIND,
    OPT_THREADS,
    OPT_MAX_MEMORY,
    OPT_MAX_CLIENTS,
    OPT_MAX_COMMAND,
    OPT_MAX_OUTPUT,
    OPT_MAX_OUTPUT_TOTAL,
    OPT_IDLE_TIMEOUT,
    OPT_SEND_TIMEOUT,
    OPT_RECV_TIMEOUT,
    OPT_SNAPSHOT,
    OPT_RULES,
    OPT_WATCH_RULES,
    OPT_MERGE_DOMAINS,
    OPT_COUNT_DENIED,
    OPT_CAPACITY,
    OPT_SNAPSHOT_INTERVAL,
    OPT_TRUST_CLIENT_TIME,
    OPT_MAX_CLIENT_SKEW,
    OPT_LOG_LEVEL,
    OPT_REQUIREPASS_FILE,
    OPT_USERS_FILE,
    OPT_PROTECTED_MODE,
    OPT_AUTH_FAIL_LIMIT,
    OPT_TLS_PORT,
    OPT_TLS_CERT_FILE,
    OPT_TLS_KEY_FILE,
    OPT_TLS_CA_CERT_FILE,
    OPT_TLS_AUTH_CLIENTS,
    OPT_CONFIG,
    OPT_HELP,
    OPT_VERSION,
};

enum opt_kind {
    K_INT,      /* decimal integer in [min, max] */
    K_SIZE,     /* bytes: integer with an optional b/k/kb/m/mb/g/gb suffix (k = 1024) */
    K_DURATION, /* 0, or an integer with a unit (ms, s, m, h, d) */
    K_STRING,   /* a path */
    K_BOOL,     /* yes/no; a bare flag means yes */
    K_BIND,     /* list of addresses */
    K_LEVEL,    /* log level */
    K_NONE,     /* takes no value (--help, --version) */
};

typedef struct opt {
    const char *name;
    enum opt_id id;
    enum opt_kind kind;
    int64_t min, max;
    int in_file; /* allowed in a config file */
} opt;

#define KB 1024LL
#define MB (1024LL * KB)
#define GB (1024LL * MB)

static const opt opts[] = {
    {"port", OPT_PORT, K_INT, 0, 65535, 1},
    {"bind", OPT_BIND, K_BIND, 0, 0, 1},
    {"threads", OPT_THREADS, K_INT, 0, SL_CONFIG_MAX_THREADS, 1},
    {"max-memory", OPT_MAX_MEMORY, K_SIZE, 0, 1024 * 1024 * GB, 1},
    {"max-clients", OPT_MAX_CLIENTS, K_INT, 1, SL_CONFIG_MAX_CLIENTS, 1},
    {"max-command", OPT_MAX_COMMAND, K_SIZE, KB, 512 * MB, 1},
    {"max-output", OPT_MAX_OUTPUT, K_SIZE, KB, 1024 * GB, 1},
    {"max-output-total", OPT_MAX_OUTPUT_TOTAL, K_SIZE, MB, 1024 * GB, 1},
    {"idle-timeout", OPT_IDLE_TIMEOUT, K_DURATION, 0, 0, 1},
    {"send-timeout", OPT_SEND_TIMEOUT, K_DURATION, 0, 0, 1},
    {"recv-timeout", OPT_RECV_TIMEOUT, K_DURATION, 0, 0, 1},
    {"snapshot", OPT_SNAPSHOT, K_STRING, 0, 0, 1},
    {"rules", OPT_RULES, K_STRING, 0, 0, 1},
    {"watch-rules", OPT_WATCH_RULES, K_BOOL, 0, 0, 1},
    {"merge-domains", OPT_MERGE_DOMAINS, K_BOOL, 0, 0, 1},
    {"count-denied", OPT_COUNT_DENIED, K_BOOL, 0, 0, 1},
    {"capacity", OPT_CAPACITY, K_STRING, 0, 0, 1},
    {"snapshot-interval", OPT_SNAPSHOT_INTERVAL, K_DURATION, 0, 0, 1},
    {"trust-client-time", OPT_TRUST_CLIENT_TIME, K_BOOL, 0, 0, 1},
    {"max-client-skew", OPT_MAX_CLIENT_SKEW, K_DURATION, 0, 0, 1},
    {"log-level", OPT_LOG_LEVEL, K_LEVEL, 0, 0, 1},
    {"requirepass-file", OPT_REQUIREPASS_FILE, K_STRING, 0, 0, 1},
    {"users-file", OPT_USERS_FILE, K_STRING, 0, 0, 1},
    {"protected-mode", OPT_PROTECTED_MODE, K_BOOL, 0, 0, 1},
    {"auth-fail-limit", OPT_AUTH_FAIL_LIMIT, K_STRING, 0, 0, 1},
    {"tls-port", OPT_TLS_PORT, K_INT, 0, 65535, 1},
    {"tls-cert-file", OPT_TLS_CERT_FILE, K_STRING, 0, 0, 1},
    {"tls-key-file", OPT_TLS_KEY_FILE, K_STRING, 0, 0, 1},
    {"tls-ca-cert-file", OPT_TLS_CA_CERT_FILE, K_STRING, 0, 0, 1},
    {"tls-auth-clients", OPT_TLS_AUTH_CLIENTS, K_STRING, 0, 0, 1},
    {"config", OPT_CONFIG, K_STRING, 0, 0, 0},
    {"help", OPT_HELP, K_NONE, 0, 0, 0},
    {"version", OPT_VERSION, K_NONE, 0, 0, 0},
};
#define NOPTS (sizeof opts / sizeof opts[0])

/* set_option copies every path into a field of one size */
#define SAME_SIZE(f) (sizeof((sl_config *)0)->f == sizeof((sl_config *)0)->config_file)
_Static_assert(SAME_SIZE(snapshot) && SAME_SIZE(rules) && SAME_SIZE(requirepass_file) &&
                   SAME_SIZE(users_file) && SAME_SIZE(tls_cert_file) && SAME_SIZE(tls_key_file) &&
                   SAME_SIZE(tls_ca_cert_file),
               "path fields differ in size");

void sl_config_defaults(sl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->binds[0], "127.0.0.1");
    cfg->nbinds = 1;
    cfg->port = SL_SRV_DEFAULT_PORT;
    cfg->threads = 0;
    cfg->max_memory = (uint64_t)GB;
    cfg->max_clients = 10000;
    cfg->max_command = (uint64_t)MB;
    cfg->max_output = 8 * (uint64_t)MB;
    cfg->idle_timeout_ms = 300000;
    cfg->send_timeout_ms = 60000;
    cfg->recv_timeout_ms = 10000;
    cfg->snapshot_interval_ms = 60000;
    cfg->max_client_skew_ms = 3600000;
    cfg->log_level = SL_LOG_INFO;
    cfg->watch_rules = 1;
    cfg->protected_mode = 1;
    cfg->auth_fail_max = 10;
    cfg->auth_fail_window_ms = 60000;
    cfg->tls_port = -1;
    cfg->tls_auth_clients = SL_TLS_AUTH_YES; /* as Redis's tls-auth-clients */
}

uint64_t sl_config_output_total(const sl_config *cfg)
{
    if (cfg->max_output_total > 0) return cfg->max_output_total;
    if (cfg->max_memory == 0) return SL_CONFIG_OUTPUT_TOTAL_UNBOUNDED;
    uint64_t v = cfg->max_memory / 4;
    return v > SL_CONFIG_OUTPUT_TOTAL_MIN ? v : SL_CONFIG_OUTPUT_TOTAL_MIN;
}

/* Where a value came from, for messages: the flag or file:line. */
typedef struct origin {
    const char *file; /* NULL: the command line */
    int line;
    int binds_reset; /* this source has already replaced the bind list */
} origin;

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
 * m = mb = 2^20, g = gb = 2^30, as `sluice replay --max-memory` reads them. */
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

/* Sets option o to the value v[0..vlen) in c.  Returns 0 or -1 with err. */
static int set_option(sl_config *c, const opt *op, const char *v, size_t vlen, origin *o, char *err,
                      size_t errlen)
{
    char t[80];
    int64_t x;
    int needs_unit;
    const char *d = dash(o);
    if (op->id == OPT_PORT && vlen == 3 && strncasecmp(v, "off", 3) == 0) {
        c->port = -1; /* no plain listener: TLS only */
        return 0;
    }
    switch (op->kind) {
    case K_INT:
        if (sl_int_parse(v, vlen, op->max, &x) != 0 || x < op->min) {
            if (op->id == OPT_PORT) {
                fail(err, errlen, o,
                     "invalid %s%s '%s': expected an integer %lld..%lld, or off (no plain "
                     "listener: TLS only)",
                     d, op->name, tok(v, vlen, t, sizeof t), (long long)op->min,
                     (long long)op->max);
                return -1;
            }
            fail(err, errlen, o, "invalid %s%s '%s': expected an integer %lld..%lld", d, op->name,
                 tok(v, vlen, t, sizeof t), (long long)op->min, (long long)op->max);
            return -1;
        }
        break;
    case K_SIZE:
        if (parse_size(v, vlen, &x) != 0 || x < op->min || x > op->max) {
            fail(err, errlen, o,
                 "invalid %s%s '%s': expected bytes %lld..%lld, with an optional suffix "
                 "k, m or g (k = kb = 1024)",
                 d, op->name, tok(v, vlen, t, sizeof t), (long long)op->min, (long long)op->max);
            return -1;
        }
        break;
    case K_DURATION:
        if (parse_duration(v, vlen, &x, &needs_unit) != 0) {
            const char *zero = op->id == OPT_SNAPSHOT_INTERVAL ? "only at shutdown"
                               : op->id == OPT_MAX_CLIENT_SKEW ? "no bound"
                                                               : "never";
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
        break;
    default: x = 0; break;
    }

    switch (op->id) {
    case OPT_PORT: c->port = (int)x; break;
    case OPT_TLS_PORT: c->tls_port = (int)x; break;
    case OPT_THREADS: c->threads = (int)x; break;
    case OPT_MAX_MEMORY: c->max_memory = (uint64_t)x; break;
    case OPT_MAX_CLIENTS: c->max_clients = (int)x; break;
    case OPT_MAX_COMMAND: c->max_command = (uint64_t)x; break;
    case OPT_MAX_OUTPUT: c->max_output = (uint64_t)x; break;
    case OPT_MAX_OUTPUT_TOTAL: c->max_output_total = (uint64_t)x; break;
    case OPT_IDLE_TIMEOUT: c->idle_timeout_ms = x; break;
    case OPT_SEND_TIMEOUT: c->send_timeout_ms = x; break;
    case OPT_RECV_TIMEOUT: c->recv_timeout_ms = x; break;
    case OPT_SNAPSHOT_INTERVAL: c->snapshot_interval_ms = x; break;
    case OPT_MAX_CLIENT_SKEW: c->max_client_skew_ms = x; break;
    case OPT_BIND: return add_binds(c, v, vlen, o, err, errlen);
    case OPT_SNAPSHOT:
    case OPT_RULES:
    case OPT_REQUIREPASS_FILE:
    case OPT_USERS_FILE:
    case OPT_TLS_CERT_FILE:
    case OPT_TLS_KEY_FILE:
    case OPT_TLS_CA_CERT_FILE:
    case OPT_CONFIG: {
        char *dst = op->id == OPT_SNAPSHOT           ? c->snapshot
                    : op->id == OPT_RULES            ? c->rules
                    : op->id == OPT_REQUIREPASS_FILE ? c->requirepass_file
                    : op->id == OPT_USERS_FILE       ? c->users_file
                    : op->id == OPT_TLS_CERT_FILE    ? c->tls_cert_file
                    : op->id == OPT_TLS_KEY_FILE     ? c->tls_key_file
                    : op->id == OPT_TLS_CA_CERT_FILE ? c->tls_ca_cert_file
                                                     : c->config_file;
        /* every path field has the same size */
        size_t cap = sizeof c->config_file;
        if (vlen == 0 || vlen >= cap || memchr(v, '\0', vlen) != NULL) {
            fail(err, errlen, o, "invalid %s%s '%s': expected a file name of 1..%zu bytes", d,
                 op->name, tok(v, vlen, t, sizeof t), cap - 1);
            return -1;
        }
        memcpy(dst, v, vlen);
        dst[vlen] = '\0';
        break;
    }
    case OPT_TRUST_CLIENT_TIME:
    case OPT_PROTECTED_MODE:
    case OPT_MERGE_DOMAINS:
    case OPT_COUNT_DENIED:
    case OPT_WATCH_RULES: {
        int b;
        if (parse_bool(v, vlen, &b) != 0) {
            fail(err, errlen, o, "invalid %s%s '%s': expected yes or no", d, op->name,
                 tok(v, vlen, t, sizeof t));
            return -1;
        }
        if (op->id == OPT_WATCH_RULES)
            c->watch_rules = b;
        else if (op->id == OPT_PROTECTED_MODE)
            c->protected_mode = b;
        else if (op->id == OPT_MERGE_DOMAINS)
            c->merge_domains = b;
        else if (op->id == OPT_COUNT_DENIED)
            c->count_denied = b;
        else
            c->trust_client_time = b;
        break;
    }
    case OPT_TLS_AUTH_CLIENTS: { /* Redis's words: yes, no or optional */
        int b;
        if (vlen == 8 && strncasecmp(v, "optional", 8) == 0) {
            c->tls_auth_clients = SL_TLS_AUTH_OPTIONAL;
        } else if (parse_bool(v, vlen, &b) == 0) {
            c->tls_auth_clients = b ? SL_TLS_AUTH_YES : SL_TLS_AUTH_NO;
        } else {
            fail(err, errlen, o, "invalid %s%s '%s': expected yes, no or optional", d, op->name,
                 tok(v, vlen, t, sizeof t));
            return -1;
        }
        break;
    }
    case OPT_AUTH_FAIL_LIMIT: { /* N/DUR: N failed logins per address in DUR */
        const char *slash = memchr(v, '/', vlen);
        int64_t n = 0, w = 0;
        if (slash == NULL || sl_int_parse(v, (size_t)(slash - v), SL_AUTH_MAX_FAILS, &n) != 0 ||
            n < 1 ||
            parse_duration(slash + 1, vlen - (size_t)(slash + 1 - v), &w, &needs_unit) != 0 ||
            w == 0) {
            fail(err, errlen, o,
                 "invalid %s%s '%s': expected N/DURATION (N failed logins per client address "
                 "in DURATION, N from 1 to %d), e.g. 10/1m",
                 d, op->name, tok(v, vlen, t, sizeof t), SL_AUTH_MAX_FAILS);
            return -1;
        }
        c->auth_fail_max = n;
        c->auth_fail_window_ms = w;
        break;
    }
    case OPT_CAPACITY: {
        char buf[sizeof c->capacity], why[160];
        sl_params pool;
        if (vlen >= sizeof buf || memchr(v, '\0', vlen) != NULL) {
            fail(err, errlen, o, "invalid %s%s '%s': expected N/DURATION, e.g. 5000/1s", d,
                 op->name, tok(v, vlen, t, sizeof t));
            return -1;
        }
        memcpy(buf, v, vlen);
        buf[vlen] = '\0';
        if (sl_check_pool_parse(buf, &pool, why, sizeof why) != 0) {
            fail(err, errlen, o, "invalid %s%s: %s", d, op->name, why);
            return -1;
        }
        memcpy(c->capacity, buf, vlen + 1);
        c->pool = pool;
        break;
    }
    case OPT_LOG_LEVEL: {
        int lv;
        if (sl_log_level_parse(v, vlen, &lv) != 0) {
            fail(err, errlen, o, "invalid %s%s '%s': expected debug, info, warn or error", d,
                 op->name, tok(v, vlen, t, sizeof t));
            return -1;
        }
        c->log_level = lv;
        break;
    }
    case OPT_HELP:
    case OPT_VERSION: break;
    }
    return 0;
}

static const opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].name) == len && memcmp(opts[i].name, name, len) == 0) return &opts[i];
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
        if (op == NULL || !op->in_file) {
            if (op != NULL && op->id == OPT_CONFIG)
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

/* Splits argv[*i] ("--name" or "--name=value") into its option and value,
 * taking the value from argv[*i + 1] when needed.  Returns the option, or
 * NULL with err set. */
static const opt *next_arg(int argc, char **argv, int *i, const char **val, size_t *vlen, char *err,
                           size_t errlen)
{
    const char *a = argv[*i];
    char t[80];
    origin o = {NULL, 0, 0};
    if (strcmp(a, "-h") == 0) return find_opt("help", 4);
    if (strcmp(a, "-v") == 0) return find_opt("version", 7);
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
        if (op->kind == K_NONE) {
            fail(err, errlen, &o, "--%s takes no value", op->name);
            return NULL;
        }
        *val = eq + 1;
        *vlen = strlen(eq + 1);
    } else if (op->kind == K_NONE) {
        *val = "";
        *vlen = 0;
    } else if (op->kind == K_BOOL) {
        int b; /* `--protected-mode no`: a yes/no word after the flag is its value */
        if (*i + 1 < argc && parse_bool(argv[*i + 1], strlen(argv[*i + 1]), &b) == 0) {
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

/* What no single option can say wrong: the listeners and TLS taken
 * together.  Returns 0, or -1 with err (options named as flags). */
static int check_listeners(const sl_config *c, char *err, size_t errlen)
{
    int tls = c->tls_port >= 0;
    if (c->port < 0 && !tls) {
        snprintf(err, errlen,
                 "--port off leaves nothing to listen on: give --tls-port N (with its "
                 "certificate and key) for TLS only");
        return -1;
    }
    if (tls && (c->tls_cert_file[0] == '\0' || c->tls_key_file[0] == '\0')) {
        snprintf(err, errlen,
                 "--tls-port needs --tls-cert-file and --tls-key-file (the server's "
                 "certificate and its private key)");
        return -1;
    }
    if (!tls && (c->tls_cert_file[0] != '\0' || c->tls_key_file[0] != '\0' ||
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
    if (tls && c->tls_auth_clients != SL_TLS_AUTH_NO && c->tls_ca_cert_file[0] == '\0') {
        snprintf(err, errlen,
                 "--tls-auth-clients %s%s needs --tls-ca-cert-file, the CA that signs the "
                 "clients' certificates; or give --tls-auth-clients no to ask clients for none",
                 c->tls_auth_clients == SL_TLS_AUTH_YES ? "yes" : "optional",
                 c->tls_auth_clients == SL_TLS_AUTH_YES ? " (the default, as Redis's)" : "");
        return -1;
    }
    return 0;
}

int sl_config_parse_args(int argc, char **argv, sl_config *cfg, char *err, size_t errlen)
{
    sl_config tmp = *cfg;
    const char *val;
    size_t vlen;

    /* First pass: --help, --version, --config (the file comes before the flags). */
    for (int i = 1; i < argc; i++) {
        const opt *op = next_arg(argc, argv, &i, &val, &vlen, err, errlen);
        if (op == NULL) return -1;
        if (op->id == OPT_HELP) return SL_CONFIG_HELP;
        if (op->id == OPT_VERSION) return SL_CONFIG_VERSION;
        if (op->id == OPT_CONFIG) {
            origin o = {NULL, 0, 0};
            if (set_option(&tmp, op, val, vlen, &o, err, errlen) != 0) return -1;
        }
    }
    if (tmp.config_file[0] != '\0' && sl_config_load_file(tmp.config_file, &tmp, err, errlen) != 0)
        return -1;

    origin o = {NULL, 0, 0};
    for (int i = 1; i < argc; i++) {
        const opt *op = next_arg(argc, argv, &i, &val, &vlen, err, errlen);
        if (op == NULL) return -1;
        if (op->id == OPT_CONFIG) continue;
        if (set_option(&tmp, op, val, vlen, &o, err, errlen) != 0) return -1;
    }
    if (check_listeners(&tmp, err, errlen) != 0) return -1;
    *cfg = tmp;
    return 0;
}

void sl_config_usage(FILE *f)
{
    fputs("usage: sluiced [options]\n"
          "\n"
          "sluiced is a rate-limit server speaking the Redis protocol (RESP2).\n"
          "Every option may also be set in a config file as `name value`.\n"
          "\n"
          "  --port N                TCP port (default 6390; 0 = any free port; off = no\n"
          "                          plain listener: TLS only, with --tls-port)\n"
          "  --bind ADDR[,ADDR...]   addresses to listen on, IPv4 or IPv6; repeatable\n"
          "                          (default 127.0.0.1; 0.0.0.0 or :: for every interface)\n"
          "  --threads N             worker threads (default 0 = one per CPU this process may use)\n"
          "  --max-memory BYTES      memory bound of the limiter state (default 1gb; 0 = none)\n"
          "  --max-clients N         connections at once (default 10000)\n"
          "  --max-command BYTES     size of one command (default 1mb)\n"
          "  --max-output BYTES      unsent replies held for one client (default 8mb)\n"
          "  --max-output-total BYTES\n"
          "                          unsent replies held for all clients; over it the\n"
          "                          clients holding the most are cut (default: a quarter\n"
          "                          of --max-memory, at least 16mb; 256mb if it is 0)\n"
          "  --idle-timeout DUR      close a client silent this long (default 300s; 0 = never)\n"
          "  --send-timeout DUR      close a client that takes none of its pending replies\n"
          "                          for this long (default 60s; 0 = never)\n"
          "  --recv-timeout DUR      close a client whose command, once begun, has not\n"
          "                          arrived whole within DUR (default 10s; 0 = never)\n"
          "  --snapshot FILE         save the limiter state to FILE and load it at start\n"
          "  --snapshot-interval DUR save every DUR (default 60s; 0 = only at shutdown)\n"
          "  --rules PATH            rules for RL.CHECK: a YAML file or a folder of them\n"
          "                          (docs/rules.md); reloaded on SIGHUP, RL.RULES RELOAD\n"
          "                          and, unless --watch-rules no, when the files change\n"
          "  --watch-rules yes|no    watch the rules with inotify (default yes)\n"
          "  --merge-domains yes|no  a domain in several rules files is one domain, their\n"
          "                          descriptors together (Lyft's MERGE_DOMAIN_CONFIG;\n"
          "                          default no: refused, naming both files)\n"
          "  --count-denied yes|no   Lyft's counting: RL.CHECK charges every matched\n"
          "                          fixed-window counter of denied requests too\n"
          "                          (default no: all-or-none, a denied request is\n"
          "                          charged to none)\n"
          "  --capacity N/DUR        spare-capacity pool for `elastic` rules: N requests\n"
          "                          per DUR through RL.CHECK in all (default: none)\n"
          "  --trust-client-time     accept a caller's time (RL.ALLOW ... AT t)\n"
          "  --requirepass-file FILE clients must AUTH with the password in FILE (the user\n"
          "                          \"default\", who may run every command)\n"
          "  --users-file FILE       users, their passwords and command groups\n"
          "                          (docs/sluiced.md, \"The users file\")\n"
          "  --auth-fail-limit N/DUR failed logins per client address in DUR; beyond, AUTH\n"
          "                          is refused unchecked until one is DUR old (default 10/1m)\n"
          "  --protected-mode yes|no refuse to listen beyond loopback without a password\n"
          "                          (default yes)\n"
          "  --max-client-skew DUR   with --trust-client-time, refuse AT t more than DUR\n"
          "                          ahead of the server's clock (default 1h; 0 = no bound)\n",
          f);
    /* two strings: a C11 compiler need not take one longer than 4095 bytes */
    fputs("  --tls-port N            also listen for TLS on port N on each --bind address\n"
          "                          (default: none; 0 = any free port); TLS 1.2 and 1.3\n"
          "  --tls-cert-file FILE    the server's certificate chain (PEM), for --tls-port\n"
          "  --tls-key-file FILE     its private key (PEM, not encrypted)\n"
          "  --tls-ca-cert-file FILE CA certificates that sign the clients' certificates\n"
          "  --tls-auth-clients yes|no|optional\n"
          "                          TLS clients must show a certificate of those CAs (yes,\n"
          "                          the default, as Redis), may (optional), or are not\n"
          "                          asked (no)\n"
          "  --config FILE           read options from FILE; flags override it\n"
          "  --log-level LEVEL       debug, info, warn or error (default info)\n"
          "  --help                  show this text\n"
          "  --version               show the version\n"
          "\n"
          "BYTES take k, m or g (or kb, mb, gb): k = 1024, m = 2^20, g = 2^30.  DUR takes\n"
          "a unit: 500ms, 30s, 5m, 1h, 1d.  Signals: TERM/INT save and exit; HUP reloads\n"
          "the rules.\n"
          "Documentation: docs/sluiced.md\n",
          f);
}
