/*
 * top.c -- `sluicectl top`: a running sluiced's decisions, from its INFO
 * over RESP (hiredis), as a table:
 *
 *     sluiced 0.1.0 at 127.0.0.1:6390, up 65s, 2 threads, backend local
 *     clients 3 of 10000 (1 http), keys 12, rules version 1 (1 domain, 2 descriptors)
 *
 *                 total    allowed     denied   allowed/s   denied/s
 *     all            13         10          3         2.0        1.0
 *     allow           3          2          1         0.0        0.0
 *     check          10          8          2         2.0        1.0
 *
 *     rule                      matched  allowed   denied   shadow  matched/s   denied/s
 *     edge.remote_address            10        8        2        0        3.0        1.0
 *
 * `allow` counts RL.ALLOW and GET /v1/allow; `check` counts RL.CHECK, gRPC's
 * ShouldRateLimit and HTTP's /v1/check and forward-auth -- INFO's decisions
 * and checks.  The totals are the server's since it started; the rates
 * are the difference between this sample and the one before, over the
 * time between them ("-" for the first sample).  Rules are INFO
 * rulestats's lines, most denied per second first.
 *
 * On a terminal the table is redrawn in place every --interval until
 * Ctrl-C; otherwise, or with --once, one sample is printed and the command
 * exits; --count N prints N samples (a blank line between them).
 *
 * Two parts: parse_info, a pure function over INFO's text (no socket), and
 * the command, which asks and prints.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "run.h"
#include "sluice.h"
#include "sluicectl.h"
#include "text.h"

const char sl__top_usage[] =
    "usage: sluicectl top [--host H] [--port P] [--user U] [--password-file F]\n"
    "                     [--interval DUR] [--once | --count N]\n"
    "\n"
    "Shows a running sluiced's decisions -- totals since it started and per\n"
    "second, allowed and denied, overall and per rule --, its clients, rules and\n"
    "backend, from its INFO.  On a terminal the table is redrawn every interval\n"
    "until Ctrl-C; otherwise one sample is printed.\n"
    "\n"
    "Options:\n"
    "  --host H            sluiced's address (default 127.0.0.1)\n"
    "  --port P            its RESP port (default 6390)\n"
    "  --user U            the user to log in as (sluiced --users-file)\n"
    "  --password-file F   AUTH with the password in F (its first line)\n"
    "  --interval DUR      time between samples: seconds (2), or 500ms, 2s, 1m\n"
    "                      (default 1s; 100ms to 1h)\n"
    "  --once              print one sample and exit\n"
    "  --count N           print N samples, an interval apart, and exit\n"
    "  -h, --help          print this text\n"
    "\n"
    "Rows: all = allow + check; allow = RL.ALLOW and GET /v1/allow; check =\n"
    "RL.CHECK, gRPC ShouldRateLimit, /v1/check and forward-auth.  Rates are\n"
    "the change since the previous sample (\"-\" on the first).\n"
    "Exit status: 0 done, 1 sluiced could not be reached or refused, 2 bad usage.\n";

/* ---- INFO's text ----------------------------------------------------------- */

/* One rule's counts (INFO rulestats: rule_NAME:matched=..,allowed=..,...). */
typedef struct top_rule {
    char *name;
    uint64_t matched, allowed, denied, shadow, elastic;
    double matched_s, denied_s; /* per second since the previous sample; < 0: none */
} top_rule;

/* One INFO reply, parsed.  Owns its text (fields point into it) and rules. */
typedef struct top_sample {
    char *text;
    const char **keys, **vals; /* every "key:value" line but the rules' */
    size_t nfields;
    top_rule *rules; /* sorted by name */
    size_t nrules;
    int64_t at_ns; /* monotonic time of the reply */
} top_sample;

static void sample_free(top_sample *s)
{
    free(s->text);
    free(s->keys);
    free(s->vals);
    free(s->rules);
    memset(s, 0, sizeof *s);
}

static int rule_cmp(const void *a, const void *b)
{
    return strcmp(((const top_rule *)a)->name, ((const top_rule *)b)->name);
}

/* Reads "name=N" at *p (p inside a rule line) into *out if the name is
 * `name`; moves *p past it and its comma.  Returns 1 if it was. */
static int rule_field(char **p, const char *name, uint64_t *out)
{
    size_t n = strlen(name);
    if (strncmp(*p, name, n) != 0 || (*p)[n] != '=') return 0;
    char *end;
    *out = strtoull(*p + n + 1, &end, 10);
    *p = *end == ',' ? end + 1 : end;
    return 1;
}

/*
 * Parses INFO's text (len bytes, copied: the caller keeps its own) into *s:
 * each "key:value" line, CRLF or LF, section headers ("# Server") and
 * blank lines skipped; a "rule_NAME:matched=.." line (NAME may hold ':',
 * so the last ":matched=" splits it) into s->rules, sorted by name.
 * Returns 0, or -1 out of memory (s freed).  O(len + rules log rules).
 */
static int parse_info(const char *info, size_t len, top_sample *s)
{
    memset(s, 0, sizeof *s);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += info[i] == '\n';
    s->text = malloc(len + 1);
    s->keys = calloc(lines, sizeof *s->keys);
    s->vals = calloc(lines, sizeof *s->vals);
    s->rules = calloc(lines, sizeof *s->rules);
    if (s->text == NULL || s->keys == NULL || s->vals == NULL || s->rules == NULL) {
        sample_free(s);
        return -1;
    }
    memcpy(s->text, info, len);
    s->text[len] = '\0';
    char *p = s->text, *end = s->text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl != NULL ? nl : end;
        char *next = nl != NULL ? nl + 1 : end;
        if (e > p && e[-1] == '\r') e--;
        *e = '\0';
        if (*p == '\0' || *p == '#') {
            p = next;
            continue;
        }
        if (strncmp(p, "rule_", 5) == 0) {
            char *m = NULL;
            for (char *q = strstr(p, ":matched="); q != NULL; q = strstr(q + 1, ":matched=")) m = q;
            if (m != NULL) {
                top_rule *r = &s->rules[s->nrules++];
                *m = '\0';
                r->name = p + 5;
                char *f = m + 1;
                rule_field(&f, "matched", &r->matched);
                rule_field(&f, "allowed", &r->allowed);
                rule_field(&f, "denied", &r->denied);
                rule_field(&f, "shadow", &r->shadow);
                rule_field(&f, "elastic", &r->elastic);
                r->matched_s = r->denied_s = -1;
                p = next;
                continue;
            }
        }
        char *colon = strchr(p, ':');
        if (colon != NULL) {
            *colon = '\0';
            s->keys[s->nfields] = p;
            s->vals[s->nfields++] = colon + 1;
        }
        p = next;
    }
    qsort(s->rules, s->nrules, sizeof *s->rules, rule_cmp);
    return 0;
}

/* The value of INFO field key, or "" when the reply has none. */
static const char *field(const top_sample *s, const char *key)
{
    for (size_t i = 0; i < s->nfields; i++)
        if (strcmp(s->keys[i], key) == 0) return s->vals[i];
    return "";
}

static uint64_t num(const top_sample *s, const char *key)
{
    return strtoull(field(s, key), NULL, 10);
}

/* ---- the table --------------------------------------------------------------- */

/* Writes a rate into out: "-" without one (rate < 0), else one decimal. */
static const char *rate(char *out, size_t n, double r)
{
    if (r < 0)
        snprintf(out, n, "-");
    else
        snprintf(out, n, "%.1f", r);
    return out;
}

/* Most denied per second first, then most matched per second, then (the
 * first sample: no rates) most denied and matched in all, then by name. */
static int rule_rank(const void *pa, const void *pb)
{
    const top_rule *a = *(const top_rule *const *)pa, *b = *(const top_rule *const *)pb;
    if (a->denied_s != b->denied_s) return a->denied_s > b->denied_s ? -1 : 1;
    if (a->matched_s != b->matched_s) return a->matched_s > b->matched_s ? -1 : 1;
    if (a->denied != b->denied) return a->denied > b->denied ? -1 : 1;
    if (a->matched != b->matched) return a->matched > b->matched ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The change of a counter over secs, or -1 without a previous sample (or
 * after a restart: the counter went down). */
static double per_s(uint64_t now, uint64_t before, int have, double secs)
{
    if (!have || secs <= 0 || now < before) return -1;
    return (double)(now - before) / secs;
}

/* Prints one sample (cur; prev: the one before, or NULL) to stdout.  max_rows
 * bounds the rule rows (0: no bound), with a line saying how many more. */
static void print_sample(top_sample *cur, const top_sample *prev, const char *where,
                         size_t max_rows)
{
    double secs = prev != NULL ? (double)(cur->at_ns - prev->at_ns) / 1e9 : 0;
    int have = prev != NULL;
    char a[32], b[32];

    printf("sluiced %s at %s, up %llus, %llu threads, backend %s\n", field(cur, "sluice_version"),
           where, (unsigned long long)num(cur, "uptime_in_seconds"),
           (unsigned long long)num(cur, "threads"), field(cur, "backend"));
    printf("clients %llu of %llu (%llu http), refused %llu; keys %llu", //
           (unsigned long long)num(cur, "connected_clients"),
           (unsigned long long)num(cur, "maxclients"), (unsigned long long)num(cur, "http_clients"),
           (unsigned long long)num(cur, "rejected_connections"),
           (unsigned long long)num(cur, "keys"));
    if (num(cur, "rules_version") > 0)
        printf("; rules version %llu (%llu domain%s, %llu descriptor%s)",
               (unsigned long long)num(cur, "rules_version"),
               (unsigned long long)num(cur, "rules_domains"),
               num(cur, "rules_domains") == 1 ? "" : "s",
               (unsigned long long)num(cur, "rules_descriptors"),
               num(cur, "rules_descriptors") == 1 ? "" : "s");
    else
        printf("; no rules");
    if (num(cur, "rules_reload_failures") > 0)
        printf(", %llu reloads failed", (unsigned long long)num(cur, "rules_reload_failures"));
    putchar('\n');
    if (field(cur, "rules_last_error")[0] != '\0')
        printf("rules: the last reload failed: %s\n", field(cur, "rules_last_error"));
    if (field(cur, "backend_status")[0] != '\0') {
        printf("backend %s %s %s", field(cur, "backend_name"), field(cur, "backend_url"),
               strcmp(field(cur, "backend_status"), "up") == 0 ? "up" : "DOWN");
        printf(", errors %llu, timeouts %llu, fallback deny %llu allow %llu local %llu\n",
               (unsigned long long)num(cur, "backend_errors"),
               (unsigned long long)num(cur, "backend_timeouts"),
               (unsigned long long)num(cur, "backend_fallback_deny"),
               (unsigned long long)num(cur, "backend_fallback_allow"),
               (unsigned long long)num(cur, "backend_fallback_local"));
        if (field(cur, "backend_last_error")[0] != '\0')
            printf("backend: last error: %s\n", field(cur, "backend_last_error"));
    }

    /* decisions: allow (RL.ALLOW, /v1/allow) and check (RL.CHECK, gRPC, HTTP) */
    uint64_t tot[3][2], was[3][2] = {{0}};
    tot[1][0] = num(cur, "allowed");
    tot[1][1] = num(cur, "denied");
    tot[2][1] = num(cur, "checks_denied");
    tot[2][0] = num(cur, "checks") - tot[2][1];
    if (prev != NULL) {
        was[1][0] = num(prev, "allowed");
        was[1][1] = num(prev, "denied");
        was[2][1] = num(prev, "checks_denied");
        was[2][0] = num(prev, "checks") - was[2][1];
    }
    for (int k = 0; k < 2; k++) {
        tot[0][k] = tot[1][k] + tot[2][k];
        was[0][k] = was[1][k] + was[2][k];
    }
    static const char *const row[3] = {"all", "allow", "check"};
    printf("\n%-8s %12s %12s %12s %12s %12s\n", "", "total", "allowed", "denied", "allowed/s",
           "denied/s");
    for (int i = 0; i < 3; i++)
        printf("%-8s %12llu %12llu %12llu %12s %12s\n", row[i],
               (unsigned long long)(tot[i][0] + tot[i][1]), (unsigned long long)tot[i][0],
               (unsigned long long)tot[i][1],
               rate(a, sizeof a, per_s(tot[i][0], was[i][0], have, secs)),
               rate(b, sizeof b, per_s(tot[i][1], was[i][1], have, secs)));

    if (cur->nrules == 0) return;
    const top_rule **order = malloc(cur->nrules * sizeof *order);
    if (order == NULL) return;
    size_t w = 24;
    for (size_t i = 0; i < cur->nrules; i++) {
        top_rule *r = &cur->rules[i];
        const top_rule *p = NULL;
        if (prev != NULL) {
            top_rule key = {.name = r->name};
            p = bsearch(&key, prev->rules, prev->nrules, sizeof key, rule_cmp);
        }
        r->matched_s = per_s(r->matched, p ? p->matched : 0, p != NULL, secs);
        r->denied_s = per_s(r->denied, p ? p->denied : 0, p != NULL, secs);
        order[i] = r;
        size_t n = strlen(r->name);
        if (n > w) w = n < 60 ? n : 60;
    }
    qsort(order, cur->nrules, sizeof *order, rule_rank);
    printf("\n%-*s %10s %10s %10s %10s %10s %10s\n", (int)w, "rule", "matched", "allowed", "denied",
           "shadow", "matched/s", "denied/s");
    size_t shown = max_rows > 0 && cur->nrules > max_rows ? max_rows : cur->nrules;
    for (size_t i = 0; i < shown; i++) {
        const top_rule *r = order[i];
        printf("%-*s %10llu %10llu %10llu %10llu %10s %10s\n", (int)w, r->name,
               (unsigned long long)r->matched, (unsigned long long)r->allowed,
               (unsigned long long)r->denied, (unsigned long long)r->shadow,
               rate(a, sizeof a, r->matched_s), rate(b, sizeof b, r->denied_s));
    }
    if (shown < cur->nrules) printf("... %zu more rules\n", cur->nrules - shown);
    free(order);
}

/* ---- the command ------------------------------------------------------------- */

typedef struct top_opts {
    const char *host, *user, *password_file;
    int port;
    int64_t interval_ms;
    long count; /* samples; 0: until stopped */
} top_opts;

static const char *const top_values[] = {"host",          "port",     "user",
                                         "password-file", "interval", "count"};

static int takes_value(const char *name, size_t nlen)
{
    return sl__name_in(name, nlen, top_values, sizeof top_values / sizeof top_values[0]);
}

/* --interval's value: a bare number of seconds, or a duration with a unit
 * (sl_duration_parse).  Returns 0, or 2 after printing what is wrong. */
static int parse_interval(const char *v, int64_t *ms)
{
    size_t n = strlen(v);
    int64_t x;
    int ok = sl__looks_numeric(v, n) && v[0] != '-' && n <= 7 ? (x = strtoll(v, NULL, 10) * 1000, 1)
                                                              : sl_duration_parse(v, n, &x) == 0;
    if (!ok || x < 100 || x > 3600000)
        return sl__usage_error("invalid --interval '%s': expected seconds (2) or a duration "
                               "(500ms, 2s, 1m) from 100ms to 1h",
                               v);
    *ms = x;
    return 0;
}

/* Parses a whole number in lo..hi for option name.  Returns 0, or 2 after
 * printing what is wrong. */
static int parse_num(const char *name, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi)
        return sl__usage_error("invalid --%s '%s': expected a number from %ld to %ld", name, v, lo,
                               hi);
    *out = x;
    return 0;
}

/* Fills o.  Returns -1 when --help was printed, 0, or 2 after printing
 * what is wrong. */
static int parse_opts(int argc, char **argv, top_opts *o)
{
    *o = (top_opts){.host = "127.0.0.1", .port = 6390, .interval_ms = 1000, .count = 0};
    sl__args w = {.argc = argc, .argv = argv, .takes = takes_value, .see = "sluicectl top --help"};
    sl__opt op;
    int rc, once = 0, counted = 0;
    while ((rc = sl__opts_next(&w, &op, sl__top_usage)) == 1) {
        long x;
        if (sl__opt_is(&op, "host")) {
            o->host = op.val;
        } else if (sl__opt_is(&op, "port")) {
            if (parse_num("port", op.val, 1, 65535, &x)) return 2;
            o->port = (int)x;
        } else if (sl__opt_is(&op, "user")) {
            o->user = op.val;
        } else if (sl__opt_is(&op, "password-file")) {
            o->password_file = op.val;
        } else if (sl__opt_is(&op, "interval")) {
            if (parse_interval(op.val, &o->interval_ms)) return 2;
        } else if (sl__opt_is(&op, "count")) {
            if (parse_num("count", op.val, 1, 1000000, &o->count)) return 2;
            counted = 1;
        } else if (sl__opt_is(&op, "once")) {
            once = 1;
        } else {
            return sl__usage_error("unknown option '%s' (see %s)", op.arg, w.see);
        }
    }
    if (rc != 0) return rc;
    if (w.file != NULL) return sl__usage_error("unexpected argument '%s' (see %s)", w.file, w.see);
    if (once && counted) return sl__usage_error("--once and --count cannot be used together");
    if (once) o->count = 1;
    if (o->user != NULL && o->password_file == NULL)
        return sl__usage_error("--user needs --password-file (the user's password)");
    return 0;
}

/* The password: the first line of path, without its line end.  Returns 0,
 * or 1 after printing why it cannot be read. */
static int read_password(const char *path, char *pw, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "sluicectl: cannot read --password-file %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (fgets(pw, (int)cap, f) == NULL) pw[0] = '\0';
    fclose(f);
    pw[strcspn(pw, "\r\n")] = '\0';
    if (pw[0] == '\0') {
        fprintf(stderr, "sluicectl: --password-file %s: no password on its first line\n", path);
        return 1;
    }
    return 0;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static volatile sig_atomic_t stop;
static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

/* Sends one command (argv-style) and checks its reply.  Returns the reply
 * (the caller frees it), or NULL after printing what went wrong. */
static redisReply *ask(redisContext *c, const char *where, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (r == NULL) {
        fprintf(stderr, "sluicectl: %s: %s: %s\n", where, argv[0],
                c->errstr[0] ? c->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "sluicectl: %s: %s: %s\n", where, argv[0], r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

int sl__top_main(int argc, char **argv)
{
    top_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;

    char where[300];
    snprintf(where, sizeof where, strchr(o.host, ':') ? "[%s]:%d" : "%s:%d", o.host, o.port);
    char pw[4096];
    if (o.password_file != NULL && read_password(o.password_file, pw, sizeof pw)) return 1;

    redisContext *c = redisConnectWithTimeout(o.host, o.port, (struct timeval){5, 0});
    if (c == NULL || c->err) {
        fprintf(stderr, "sluicectl: cannot connect to sluiced at %s: %s\n", where,
                c ? c->errstr : "out of memory");
        redisFree(c);
        return 1;
    }
    redisSetTimeout(c, (struct timeval){10, 0});
    if (o.password_file != NULL) {
        const char *av[3] = {"AUTH", o.user ? o.user : pw, pw};
        redisReply *r = ask(c, where, o.user ? 3 : 2, av);
        memset(pw, 0, sizeof pw);
        if (r == NULL) {
            redisFree(c);
            return 1;
        }
        freeReplyObject(r);
    }

    int tty = isatty(STDOUT_FILENO);
    long count = o.count ? o.count : tty ? 0 : 1;
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    static char obuf[1 << 16];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf); /* one write a frame: no flicker */

    top_sample prev = {0}, cur;
    int have_prev = 0;
    rc = 0;
    for (long i = 0; !stop && (count == 0 || i < count); i++) {
        if (i > 0) {
            struct timespec ts = {o.interval_ms / 1000, (o.interval_ms % 1000) * 1000000};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop) {
            }
            if (stop) break;
        }
        const char *av[1] = {"INFO"};
        redisReply *r = ask(c, where, 1, av);
        if (r == NULL) {
            rc = 1;
            break;
        }
        if (r->type != REDIS_REPLY_STRING || parse_info(r->str, r->len, &cur) != 0) {
            fprintf(stderr, "sluicectl: %s: INFO: %s\n", where,
                    r->type == REDIS_REPLY_STRING ? "out of memory" : "not a text reply");
            freeReplyObject(r);
            rc = 1;
            break;
        }
        freeReplyObject(r);
        cur.at_ns = mono_ns();
        size_t rows = 0;
        if (tty && count != 1) {
            struct winsize ws;
            fputs("\033[H\033[2J", stdout); /* home, clear */
            if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 12)
                rows = (size_t)ws.ws_row - 12;
            else
                rows = 10;
        } else if (i > 0) {
            putchar('\n');
        }
        print_sample(&cur, have_prev ? &prev : NULL, where, rows);
        if (fflush(stdout) != 0) {
            rc = 1;
            sample_free(&cur);
            break;
        }
        sample_free(&prev);
        prev = cur;
        have_prev = 1;
    }
    sample_free(&prev);
    redisFree(c);
    return rc;
}
