/*
 * rules_load.c -- loads rules files (Lyft ratelimit's YAML format plus sluice's
 * extensions) into an immutable, reference-counted rule set.  Matching a
 * request against the set is rules_match.c; docs/rules.md is the user's side
 * of both.  Also here: reading files and directories, sl_rules_ref /
 * sl_rules_unref (freeing is the set's arena, rules_tree.c) and the
 * accessors of what a load recorded.
 *
 * Loading is three passes over one file, all bounded by named caps:
 *
 *   1. the raw bytes: the size (before anything is read into memory when the
 *      file system knows it, here), NUL bytes, tabs in indentation
 *      (rules_yaml.c);
 *   2. libyaml's event parser builds a small tree of scalars, lists and maps
 *      (our own, so every node keeps its line and column, depth is capped
 *      while parsing, and an alias is a pointer to its anchor's node:
 *      rules_yaml.c);
 *   3. the schema walk (here) turns the tree into the model, checking every
 *      field: types, units, ranges, unknown and duplicate keys, duplicate
 *      siblings; then each node's lookup tables, and merged domains.
 *
 * The first problem found stops the load with "FILE:LINE:COLUMN: message";
 * the set being built is freed, so there is never a partial result.
 *
 * The model lives in one arena per set (freed in one go); each YAML tree in
 * an arena per file.  Invariant of a loaded set: siblings are unique by
 * (key, value) among those with a value and by key among the others, and
 * each node's lookup tables (exact and wildcard values by key and value,
 * key-only by key) are sorted, with the wildcards also kept in file order,
 * so matching is a binary search per level plus a scan of the wildcards,
 * and never allocates.  With SL_RULES_MERGE_DOMAINS a later file's
 * descriptors join its domain's root (merge_domain).  Once the loader returns
 * a set, nothing writes to it but its reference count and its limits'
 * sl_rule_counts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <yaml.h>

#include "rules_meta.h"
#include "rules_yaml.h"
#include "sluice.h"
#include "util.h"

/* ---- the set -------------------------------------------------------------- */

static _Atomic uint64_t generations; /* sets loaded by this process */

/* ---- reading -------------------------------------------------------------- */

/* What a file of mode m is, for messages: "a FIFO", "a directory", ... */
static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symlink";
    return "not a file";
}

/* "PATH: REASON" for a path that could not be followed (stat or open failed
 * with e), saying what the path is when that explains the reason: "No such
 * file or directory (a dangling symlink)", "Too many levels of symbolic
 * links (a symlink loop)". */
static void path_fail(const char *path, int e, char *err, size_t errlen)
{
    struct stat lst;
    const char *what = "";
    if (e == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
        what = " (a dangling symlink)";
    else if (e == ELOOP)
        what = " (a symlink loop)";
    snprintf(err, errlen, "%s: %s%s", path, strerror(e), what);
}

/* Reads a whole regular file of at most SL_RULES_MAX_FILE bytes into *out
 * (malloc'd), following symbolic links.  Anything else -- a FIFO, a device,
 * a directory, a socket, a dangling link or a loop -- is refused with its
 * path and what it is, and never opened for reading in a way that can
 * block: the path is checked with stat(2) first, then opened with
 * O_NONBLOCK and checked again on the descriptor (it may have been swapped
 * in between), so a FIFO put in a file's place cannot hang the caller.
 * The size is checked before reading.  Returns 0 or -1 with a message. */
static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        path_fail(path, errno, err, errlen);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        path_fail(path, errno, err, errlen);
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
        close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size > SL_RULES_MAX_FILE) {
        snprintf(err, errlen,
                 "%s:1:1: file too large: %lld bytes (the limit is %u bytes, SL_RULES_MAX_FILE)",
                 path, (long long)st.st_size, (unsigned)SL_RULES_MAX_FILE);
        close(fd);
        return -1;
    }
    size_t cap = (size_t)st.st_size + 1, len = 0; /* +1: sees a file that grew */
    char *buf = malloc(cap);
    if (buf == NULL) goto nomem;
    for (;;) {
        if (len == cap) {
            if (cap > SL_RULES_MAX_FILE) break;
            size_t ncap =
                cap * 2 > (size_t)SL_RULES_MAX_FILE + 1 ? (size_t)SL_RULES_MAX_FILE + 1 : cap * 2;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) goto nomem;
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (len > SL_RULES_MAX_FILE) {
        snprintf(err, errlen,
                 "%s:1:1: file too large: more than %u bytes (the limit, SL_RULES_MAX_FILE)", path,
                 (unsigned)SL_RULES_MAX_FILE);
        free(buf);
        return -1;
    }
    *out = buf;
    *outlen = len;
    return 0;
nomem:
    snprintf(err, errlen, "%s: out of memory", path);
    free(buf);
    close(fd);
    return -1;
}

/* ---- pass 3: the schema --------------------------------------------------- */

/* Counts a visited YAML node: aliases may make a small file a big tree. */
static int visit(loader *ld, const ynode *n)
{
    if (++ld->visits > SL_RULES_MAX_NODES)
        return FAIL(ld, n, "more than %d YAML nodes with aliases expanded (SL_RULES_MAX_NODES)",
                    SL_RULES_MAX_NODES);
    return 0;
}

static int is_null(const ynode *n)
{
    if (n == NULL) return 1;
    if (n->type != Y_SCALAR || !n->plain) return 0;
    return n->len == 0 || strcmp(n->s, "~") == 0 || strcmp(n->s, "null") == 0 ||
           strcmp(n->s, "Null") == 0 || strcmp(n->s, "NULL") == 0;
}

/* The fields of a map.  vals[i] is the value of names[i], or NULL when the
 * field is absent or null.  Unknown and repeated keys are errors. */
static int get_fields(loader *ld, const ynode *map, const char *const *names, int nnames,
                      const char *what, const char *expected, const ynode **vals)
{
    const ynode *keys[16] = {0};
    for (int i = 0; i < nnames; i++) vals[i] = NULL;
    for (const ycell *c = map->first; c && c->next; c = c->next->next) {
        const ynode *k = c->node, *v = c->next->node;
        char t[80], d[96];
        if (visit(ld, k) != 0 || visit(ld, v) != 0) return -1;
        if (k->type != Y_SCALAR)
            return FAIL(ld, k, "the keys of %s must be field names, not %s", what,
                        sl__yaml_desc(k, d, sizeof d));
        int i = 0;
        while (i < nnames && strcmp(names[i], k->s) != 0) i++;
        if (i == nnames || strlen(names[i]) != k->len)
            return FAIL(ld, k, "unknown field '%s' in %s (expected %s)",
                        sl__yaml_tok(k, t, sizeof t), what, expected);
        if (keys[i])
            return FAIL(ld, k, "duplicate key '%s' (first at line %u, column %u)", names[i],
                        keys[i]->line, keys[i]->col);
        keys[i] = k;
        vals[i] = is_null(v) ? NULL : v;
    }
    return 0;
}

/* A string field: any scalar without control characters (a quoted "\0" or
 * "\x01" is one; they would cut or garble names in listings). */
static int get_string(loader *ld, const ynode *v, const char *field, const char **s, size_t *len)
{
    char d[96];
    if (v->type != Y_SCALAR)
        return FAIL(ld, v, "%s must be a string, not %s", field, sl__yaml_desc(v, d, sizeof d));
    for (size_t i = 0; i < v->len; i++) {
        unsigned char c = (unsigned char)v->s[i];
        if (c < 0x20 || c == 0x7f)
            return FAIL(ld, v, "%s %s holds a control character (\\x%02x)", field,
                        sl__yaml_desc(v, d, sizeof d), c);
    }
    *s = v->s;
    *len = v->len;
    return 0;
}

static int get_bool(loader *ld, const ynode *v, const char *field, int *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No",
                                     "NO",    "off",   "Off",   "OFF"};
    char d[96];
    if (v->type == Y_SCALAR && v->plain) {
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
            if (strcmp(v->s, yes[i]) == 0) {
                *out = 1;
                return 0;
            }
            if (strcmp(v->s, no[i]) == 0) {
                *out = 0;
                return 0;
            }
        }
    }
    return FAIL(ld, v, "%s must be true or false, not %s", field, sl__yaml_desc(v, d, sizeof d));
}

static int all_digits(const char *s, size_t len)
{
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* A whole number in min..max, written plainly (not quoted). */
static int get_int(loader *ld, const ynode *v, const char *field, int64_t min, int64_t max,
                   int64_t *out)
{
    char t[80], d[96];
    if (v->type != Y_SCALAR)
        return FAIL(ld, v, "%s must be a whole number, not %s", field,
                    sl__yaml_desc(v, d, sizeof d));
    if (!v->plain)
        return FAIL(ld, v, "%s must be a whole number, not the quoted string '%s'", field,
                    sl__yaml_tok(v, t, sizeof t));
    if (v->len > 1 && v->s[0] == '-' && all_digits(v->s + 1, v->len - 1))
        return FAIL(ld, v, "negative %s '%s' (expected %lld to %lld)", field,
                    sl__yaml_tok(v, t, sizeof t), (long long)min, (long long)max);
    if (!all_digits(v->s, v->len))
        return FAIL(ld, v, "%s must be a whole number from %lld to %lld, not '%s'", field,
                    (long long)min, (long long)max, sl__yaml_tok(v, t, sizeof t));
    if (v->len > 1 && v->s[0] == '0')
        return FAIL(ld, v, "%s '%s' has a leading zero (YAML 1.1 reads that as octal)", field,
                    sl__yaml_tok(v, t, sizeof t));
    int64_t x;
    if (sl_int_parse(v->s, v->len, max, &x) != 0)
        return FAIL(ld, v, "%s '%s' is too large (at most %lld)", field,
                    sl__yaml_tok(v, t, sizeof t), (long long)max);
    if (x < min)
        return FAIL(ld, v, "%s must be from %lld to %lld, not '%s'", field, (long long)min,
                    (long long)max, sl__yaml_tok(v, t, sizeof t));
    *out = x;
    return 0;
}

static int is_pct(const ynode *v)
{
    return v->type == Y_SCALAR && v->len >= 1 && v->s[v->len - 1] == '%';
}

/* "N%" with N a whole number in min..max. */
static int get_pct(loader *ld, const ynode *v, const char *field, int64_t min, int64_t max,
                   int64_t *out)
{
    char d[96];
    int64_t x;
    if (!is_pct(v) || !all_digits(v->s, v->len - 1) || (v->len > 2 && v->s[0] == '0') ||
        sl_int_parse(v->s, v->len - 1, max, &x) != 0 || x < min)
        return FAIL(ld, v, "%s must be a percentage from %lld%% to %lld%% such as 10%%, not %s",
                    field, (long long)min, (long long)max, sl__yaml_desc(v, d, sizeof d));
    *out = x;
    return 0;
}

/* Lyft upper-cases the unit before looking it up: any case is accepted. */
static int get_unit(loader *ld, const ynode *v, sl_rule_unit *out)
{
    char t[80], d[96];
    if (v->type == Y_SCALAR) {
        sl_rule_unit u = sl__rule_unit_find(v->s, v->len);
        if (u != SL_UNIT_NONE) {
            *out = u;
            return 0;
        }
        return FAIL(ld, v,
                    "unknown unit '%s' (expected second, minute, hour, day, week, month or year)",
                    sl__yaml_tok(v, t, sizeof t));
    }
    return FAIL(ld, v, "unit must be one of second, minute, hour, day, week, month or year, not %s",
                sl__yaml_desc(v, d, sizeof d));
}

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

enum {
    L_UNIT,
    L_RPU,
    L_UNLIMITED,
    L_NAME,
    L_REPLACES,
    L_ALGORITHM,
    L_WINDOW,
    L_BURST,
    L_PRECISION,
    L_SOFT,
    L_ELASTIC,
    L_CONC,
    L_CONC_TTL,
    L_N
};
static const char *const limit_fields[L_N] = {
    "unit",  "requests_per_unit", "unlimited", "name",    "replaces", "algorithm", "window",
    "burst", "precision",         "soft",      "elastic",  "concurrency", "concurrency_ttl",
};
#define LIMIT_EXPECTED                                                                             \
    "unit, requests_per_unit, unlimited, name, replaces, algorithm, window, burst, precision, "    \
    "soft, elastic, concurrency or concurrency_ttl"

static int load_replaces(loader *ld, sl_rule_limit *lim, const ynode *v)
{
    char d[96];
    if (v->type != Y_SEQ)
        return FAIL(ld, v, "replaces must be a list of '- name: ...', not %s",
                    sl__yaml_desc(v, d, sizeof d));
    const char **names = sl__arena_alloc(&ld->set->mem, (v->n ? v->n : 1) * sizeof *names);
    if (names == NULL) return sl__yaml_oom(ld);
    int i = 0;
    for (const ycell *c = v->first; c; c = c->next, i++) {
        static const char *const fields[] = {"name"};
        const ynode *item = c->node, *val[1];
        if (visit(ld, item) != 0) return -1;
        if (item->type != Y_MAP)
            return FAIL(ld, item, "each replaces entry must be a map '- name: ...', not %s",
                        sl__yaml_desc(item, d, sizeof d));
        if (get_fields(ld, item, fields, 1, "a replaces entry", "name", val) != 0) return -1;
        const char *s = NULL;
        size_t len = 0;
        if (val[0] == NULL) return FAIL(ld, item, "a replaces entry needs a name");
        if (get_string(ld, val[0], "name", &s, &len) != 0) return -1;
        if (len == 0) return FAIL(ld, val[0], "a replaces entry needs a non-empty name");
        if (lim->named && strcmp(s, lim->name) == 0)
            return FAIL(ld, val[0], "a limit cannot replace itself ('%s')", lim->name);
        if ((names[i] = sl__arena_strndup(&ld->set->mem, s, len)) == NULL) return sl__yaml_oom(ld);
    }
    lim->replaces = names;
    lim->nreplaces = i;
    return 0;
}

/* concurrency: N and concurrency_ttl of a rate_limit map (SPEC 10, docs/
 * rules.md) onto its node: at most one per descriptor.  Returns 0, or -1
 * (failed). */
static int load_concurrency(loader *ld, sl_rule_node *node, const ynode *map, const ynode *const *f)
{
    char d[96];
    if (f[L_CONC] == NULL)
        return FAIL(ld, f[L_CONC_TTL], "concurrency_ttl needs concurrency: N beside it");
    if (node->concurrency > 0)
        return FAIL(ld, f[L_CONC],
                    "concurrency given twice on one descriptor (the other at line %u)",
                    node->concurrency_line);
    if (get_int(ld, f[L_CONC], "concurrency", 1, SL_MAX_CONCURRENCY, &node->concurrency) != 0)
        return -1;
    node->concurrency_ttl_ms = SL_DEFAULT_LEASE_TTL_MS;
    const ynode *w = f[L_CONC_TTL];
    if (w != NULL && (w->type != Y_SCALAR ||
                      sl_duration_parse(w->s, w->len, &node->concurrency_ttl_ms) != 0 ||
                      node->concurrency_ttl_ms > SL_MAX_LEASE_TTL_MS))
        return FAIL(ld, w,
                    "concurrency_ttl must be a duration from 1ms to 1d such as 30s, not %s",
                    sl__yaml_desc(w, d, sizeof d));
    node->concurrency_line = map->line;
    return 0;
}

/* One rate_limit map into lim.  Returns 0, 1 when the map holds only a
 * concurrency limit (put on node; lim is not a limit), or -1 (failed). */
static int load_limit(loader *ld, sl_rule_node *node, sl_rule_limit *lim, const ynode *map)
{
    const ynode *f[L_N];
    char t[80], d[96];
    if (map->type != Y_MAP)
        return FAIL(ld, map,
                    "each rate_limit must be a map (unit: ..., requests_per_unit: ...), "
                    "not %s",
                    sl__yaml_desc(map, d, sizeof d));
    if (get_fields(ld, map, limit_fields, L_N, "a rate_limit", LIMIT_EXPECTED, f) != 0) return -1;
    if ((f[L_CONC] || f[L_CONC_TTL]) && load_concurrency(ld, node, map, f) != 0) return -1;
    if (f[L_CONC] && !f[L_UNIT] && !f[L_WINDOW] && !f[L_RPU]) {
        for (int i = 0; i < L_CONC; i++)
            if (f[i])
                return FAIL(ld, f[i],
                            "%s needs a rate (unit and requests_per_unit) beside concurrency",
                            limit_fields[i]);
        return 1; /* concurrency alone */
    }
    lim->line = map->line;
    lim->column = map->col;
    if (f[L_NAME]) {
        const char *s = NULL;
        size_t len = 0;
        if (get_string(ld, f[L_NAME], "name", &s, &len) != 0) return -1;
        if (len && (lim->name = sl__arena_strndup(&ld->set->mem, s, len)) == NULL)
            return sl__yaml_oom(ld);
        lim->named = len > 0;
    }
    if (f[L_REPLACES] && load_replaces(ld, lim, f[L_REPLACES]) != 0) return -1;
    if (f[L_UNLIMITED] && get_bool(ld, f[L_UNLIMITED], "unlimited", &lim->unlimited) != 0)
        return -1;
    if (lim->unlimited) {
        /* Lyft refuses a unit beside unlimited, and ignores requests_per_unit */
        if (f[L_UNIT]) return FAIL(ld, f[L_UNIT], "unit must not be given with unlimited: true");
        for (int i = L_ALGORITHM; i < L_N; i++)
            if (f[i] && i != L_CONC && i != L_CONC_TTL)
                return FAIL(ld, f[i], "%s cannot be combined with unlimited: true",
                            limit_fields[i]);
        if (f[L_RPU]) {
            int64_t ignored;
            if (get_int(ld, f[L_RPU], "requests_per_unit", 0, SL_MAX_LIMIT, &ignored) != 0)
                return -1;
        }
        return 0;
    }

    sl_params *p = &lim->params;
    p->algo = SL_FIXED_WINDOW; /* Lyft's only algorithm */
    if (f[L_UNIT] && f[L_WINDOW])
        return FAIL(ld, f[L_WINDOW], "give either unit or window, not both");
    if (f[L_UNIT]) {
        if (get_unit(ld, f[L_UNIT], &lim->unit) != 0) return -1;
        p->window_ms = sl_rule_unit_ms(lim->unit);
    } else if (f[L_WINDOW]) {
        const ynode *w = f[L_WINDOW];
        if (w->type != Y_SCALAR || sl_duration_parse(w->s, w->len, &p->window_ms) != 0)
            return FAIL(ld, w,
                        "window must be a duration from 1ms to 10 years such as 90s "
                        "(an integer of ms, or with a unit ms, s, m, h, d, w, y), not %s",
                        sl__yaml_desc(w, d, sizeof d));
    } else {
        return FAIL(ld, map,
                    "rate_limit needs a unit (second, minute, hour, day, week, month or year) "
                    "or a window (such as 90s)");
    }
    if (f[L_RPU] == NULL) return FAIL(ld, map, "rate_limit has no requests_per_unit");
    if (get_int(ld, f[L_RPU], "requests_per_unit", 0, SL_MAX_LIMIT, &p->limit) != 0) return -1;
    if (f[L_ALGORITHM]) {
        const ynode *a = f[L_ALGORITHM];
        if (a->type != Y_SCALAR)
            return FAIL(ld, a, "algorithm must be a name such as token-bucket, not %s",
                        sl__yaml_desc(a, d, sizeof d));
        if (sl_algo_parse(a->s, a->len, &p->algo) != 0)
            return FAIL(ld, a,
                        "unknown algorithm '%s' (expected fixed-window, sliding-log, "
                        "sliding-window, sliding-buckets, token-bucket, gcra or leaky-bucket)",
                        sl__yaml_tok(a, t, sizeof t));
    }
    if (f[L_BURST]) {
        if (!is_bucket(p->algo))
            return FAIL(ld, f[L_BURST],
                        "burst applies only to token-bucket, gcra and leaky-bucket, not %s",
                        sl_algo_name(p->algo));
        if (get_int(ld, f[L_BURST], "burst", 1, SL_MAX_LIMIT, &p->burst) != 0) return -1;
    }
    if (f[L_PRECISION]) {
        if (p->algo != SL_SLIDING_BUCKETS)
            return FAIL(ld, f[L_PRECISION], "precision applies only to sliding-buckets, not %s",
                        sl_algo_name(p->algo));
        if (get_int(ld, f[L_PRECISION], "precision", 1, SL_MAX_PRECISION, &p->precision) != 0)
            return -1;
    }
    if (p->algo == SL_SLIDING_BUCKETS) {
        int64_t prec = p->precision ? p->precision : SL_DEFAULT_PRECISION;
        if (p->window_ms % prec != 0)
            return FAIL(ld, f[L_PRECISION] ? f[L_PRECISION] : map,
                        "the window of %lld ms is not a multiple of the precision %lld "
                        "(sliding-buckets splits it into that many equal buckets)",
                        (long long)p->window_ms, (long long)prec);
    }
    sl_params check = *p;
    if (check.limit == 0) check.limit = 1; /* 0 is allowed in rules: nothing passes */
    int rc = sl_params_check(&check);
    if (rc != 0) return FAIL(ld, map, "%s", sl_strerror(rc));

    lim->soft_limit = p->limit;
    if (f[L_SOFT] && f[L_ELASTIC])
        return FAIL(ld, f[L_ELASTIC], "soft and elastic cannot be combined on one limit");
    if (f[L_SOFT]) {
        if (get_pct(ld, f[L_SOFT], "soft", 0, SL_RULES_MAX_PCT, &lim->soft_pct) != 0) return -1;
        lim->soft_limit = p->limit + p->limit * lim->soft_pct / 100; /* <= 11 * 10^12 */
        if (lim->soft_limit > SL_MAX_LIMIT) lim->soft_limit = SL_MAX_LIMIT;
    }
    if (f[L_ELASTIC]) {
        const ynode *e = f[L_ELASTIC];
        if (p->algo == SL_TOKEN_BUCKET || p->algo == SL_GCRA || p->algo == SL_LEAKY_BUCKET)
            return FAIL(ld, e,
                        "elastic needs an algorithm that counts requests in a window "
                        "(fixed-window, sliding-window, sliding-log, sliding-buckets), not %s",
                        sl_algo_name(p->algo));
        if (is_pct(e)) {
            if (get_pct(ld, e, "elastic", 1, SL_RULES_MAX_PCT, &lim->elastic_pct) != 0) return -1;
            lim->elastic_limit = p->limit + p->limit * lim->elastic_pct / 100;
            if (lim->elastic_limit > SL_MAX_LIMIT) lim->elastic_limit = SL_MAX_LIMIT;
            if (lim->elastic_limit <= p->limit)
                return FAIL(ld, e, "elastic %s adds nothing to a limit of %lld",
                            sl__yaml_tok(e, t, sizeof t), (long long)p->limit);
        } else {
            if (get_int(ld, e, "elastic", 1, SL_MAX_LIMIT, &lim->elastic_limit) != 0) return -1;
            if (lim->elastic_limit <= p->limit)
                return FAIL(ld, e,
                            "elastic ceiling %lld must be above the limit %lld "
                            "(or a percentage such as 50%%)",
                            (long long)lim->elastic_limit, (long long)p->limit);
        }
    }
    return 0;
}

/* rate_limit: one map, or (sluice) a list of them, all of which apply. */
static int load_limits(loader *ld, sl_rule_node *node, const ynode *v)
{
    char d[96];
    size_t n = 1;
    if (v->type == Y_SEQ) {
        n = v->n;
        if (n == 0) return FAIL(ld, v, "rate_limit is an empty list");
        if (n > SL_RULES_MAX_LIMITS)
            return FAIL(ld, v, "more than %d limits on one descriptor (SL_RULES_MAX_LIMITS)",
                        SL_RULES_MAX_LIMITS);
    } else if (v->type != Y_MAP) {
        return FAIL(ld, v,
                    "rate_limit must be a map (unit: ..., requests_per_unit: ...) or a list of "
                    "them, not %s",
                    sl__yaml_desc(v, d, sizeof d));
    }
    sl_rule_limit *lims = sl__arena_alloc(&ld->set->mem, n * sizeof *lims);
    if (lims == NULL) return sl__yaml_oom(ld);
    const ycell *c = v->type == Y_SEQ ? v->first : NULL;
    size_t nall = n;
    for (size_t i = 0, k = 0; k < nall; k++) {
        const ynode *m = c ? c->node : v;
        if (c) {
            if (visit(ld, m) != 0) return -1;
            c = c->next;
        }
        int rc = load_limit(ld, node, &lims[i], m);
        if (rc < 0) return -1;
        if (rc == 1) { /* a concurrency limit alone: not a rate limit */
            memset(&lims[i], 0, sizeof lims[i]);
            n--;
            continue;
        }
        /* zeroed by the arena: counts start at 0 */
        if ((lims[i].counts = sl__arena_alloc(&ld->set->mem, sizeof *lims[i].counts)) == NULL)
            return sl__yaml_oom(ld);
        if (n > 1 && lims[i].unlimited)
            return FAIL(ld, m, "unlimited cannot be combined with other limits on one descriptor");
        for (size_t j = 0; j < i; j++) {
            if (lims[j].params.algo == lims[i].params.algo &&
                lims[j].params.window_ms == lims[i].params.window_ms)
                return FAIL(ld, m,
                            "two limits of one descriptor with the same algorithm and window "
                            "(%s, %lld ms; the other at line %u)",
                            sl_algo_name(lims[i].params.algo), (long long)lims[i].params.window_ms,
                            lims[j].line);
        }
        i++;
    }
    for (size_t i = 0; i < n; i++) {
        if (lims[i].named) continue;
        if (n == 1) {
            lims[i].name = node->path;
        } else {
            size_t len = strlen(node->path) + 16;
            char *s = sl__arena_alloc(&ld->set->mem, len);
            if (s == NULL) return sl__yaml_oom(ld);
            snprintf(s, len, "%s#%zu", node->path, i + 1);
            lims[i].name = s;
        }
    }
    node->limits = lims;
    node->nlimits = (int)n;
    return 0;
}

/* ip_prefix: N (IPv6 /N, IPv4 /min(N, 32)) or {ipv4: N, ipv6: M}. */
static int load_ip_prefix(loader *ld, sl_rule_node *node, const ynode *v)
{
    int64_t x;
    if (v->type == Y_MAP) {
        static const char *const fields[] = {"ipv4", "ipv6"};
        const ynode *f[2];
        if (get_fields(ld, v, fields, 2, "ip_prefix", "ipv4 or ipv6", f) != 0) return -1;
        if (f[0] == NULL && f[1] == NULL) return FAIL(ld, v, "ip_prefix needs ipv4, ipv6 or both");
        if (f[0]) {
            if (get_int(ld, f[0], "ip_prefix ipv4", 0, 32, &x) != 0) return -1;
            node->ip4_prefix = (int)x;
        }
        if (f[1]) {
            if (get_int(ld, f[1], "ip_prefix ipv6", 0, 128, &x) != 0) return -1;
            node->ip6_prefix = (int)x;
        }
        return 0;
    }
    if (get_int(ld, v, "ip_prefix", 0, 128, &x) != 0) return -1;
    node->ip6_prefix = (int)x;
    node->ip4_prefix = x < 32 ? (int)x : 32;
    return 0;
}

static int load_descriptors(loader *ld, sl_rule_node *parent, const ynode *list);

enum {
    D_KEY,
    D_VALUE,
    D_RATE_LIMIT,
    D_DESCRIPTORS,
    D_SHADOW,
    D_QUOTA,
    D_DETAILED,
    D_VALUE_TO_METRIC,
    D_SHARE,
    D_METADATA,
    D_IP_PREFIX,
    D_N
};
static const char *const desc_fields[D_N] = {
    "key",        "value",           "rate_limit",      "descriptors",     "shadow_mode",
    "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "metadata",
    "ip_prefix",
};
#define DESC_EXPECTED                                                                              \
    "key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, "              \
    "value_to_metric, share_threshold, metadata or ip_prefix"

static int load_descriptor(loader *ld, const sl_rule_node *parent, sl_rule_node *node,
                           const ynode *map)
{
    const ynode *f[D_N];
    char d[96];
    if (map->type != Y_MAP)
        return FAIL(ld, map, "each descriptor must be a map (key: ..., value: ...), not %s",
                    sl__yaml_desc(map, d, sizeof d));
    if (++ld->set->nrules > SL_RULES_MAX_RULES)
        return FAIL(ld, map, "more than %d descriptors (SL_RULES_MAX_RULES)", SL_RULES_MAX_RULES);
    if (get_fields(ld, map, desc_fields, D_N, "a descriptor", DESC_EXPECTED, f) != 0) return -1;
    node->parent = parent;
    node->domain = parent->domain;
    node->depth = parent->depth + 1;
    node->line = map->line;
    node->column = map->col;
    node->ip4_prefix = node->ip6_prefix = -1;

    const char *s = NULL, *val = NULL;
    size_t len = 0, vlen = 0;
    if (f[D_KEY] == NULL) return FAIL(ld, map, "descriptor has no key");
    if (get_string(ld, f[D_KEY], "key", &s, &len) != 0) return -1;
    if (len == 0) return FAIL(ld, f[D_KEY], "descriptor has an empty key");
    if (len > SL_MAX_KEY)
        return FAIL(ld, f[D_KEY], "key longer than %d bytes (SL_MAX_KEY)", SL_MAX_KEY);
    if ((node->key = sl__arena_strndup(&ld->set->mem, s, len)) == NULL) return sl__yaml_oom(ld);
    node->keylen = len;
    node->match = SL_MATCH_ANY;
    if (f[D_VALUE]) { /* Lyft: an empty value is no value */
        if (get_string(ld, f[D_VALUE], "value", &val, &vlen) != 0) return -1;
        if (vlen > SL_MAX_KEY)
            return FAIL(ld, f[D_VALUE], "value longer than %d bytes (SL_MAX_KEY)", SL_MAX_KEY);
        if (vlen > 0) {
            /* Lyft: a '*' anywhere makes a wildcard, each '*' any run */
            const char *star = memchr(val, '*', vlen);
            node->match = star ? SL_MATCH_WILDCARD : SL_MATCH_EXACT;
            node->valuelen = vlen;
            if ((node->value = sl__arena_strndup(&ld->set->mem, val, vlen)) == NULL)
                return sl__yaml_oom(ld);
            if (star) { /* the matcher's fixed ends */
                node->sl__whead = (size_t)(star - val);
                node->sl__wtail = vlen - 1 - (size_t)((const char *)memrchr(val, '*', vlen) - val);
            }
        }
    }
    /* Lyft's full key: parent.key or parent.key_value (the value as written) */
    size_t plen = strlen(parent->path), n = plen + 1 + len + (vlen ? 1 + vlen : 0) + 1;
    char *path = sl__arena_alloc(&ld->set->mem, n);
    if (path == NULL) return sl__yaml_oom(ld);
    if (vlen)
        snprintf(path, n, "%s.%s_%.*s", parent->path, node->key, (int)vlen, val);
    else
        snprintf(path, n, "%s.%s", parent->path, node->key);
    node->path = path;

    if (f[D_SHADOW] && get_bool(ld, f[D_SHADOW], "shadow_mode", &node->shadow_mode) != 0) return -1;
    if (f[D_QUOTA] && get_bool(ld, f[D_QUOTA], "quota_mode", &node->quota_mode) != 0) return -1;
    if (f[D_DETAILED] &&
        get_bool(ld, f[D_DETAILED], "detailed_metric", &node->detailed_metric) != 0)
        return -1;
    if (f[D_VALUE_TO_METRIC] &&
        get_bool(ld, f[D_VALUE_TO_METRIC], "value_to_metric", &node->value_to_metric) != 0)
        return -1;
    if (f[D_SHARE]) {
        if (get_bool(ld, f[D_SHARE], "share_threshold", &node->share_threshold) != 0) return -1;
        /* Lyft refuses it where no value is shared: without a '*' */
        if (node->share_threshold && node->match != SL_MATCH_WILDCARD) {
            char vt[80];
            if (node->match == SL_MATCH_ANY)
                return FAIL(ld, f[D_SHARE],
                            "share_threshold needs a wildcard value (one with '*'), "
                            "and descriptor '%s' has no value",
                            sl__yaml_tok_text(node->key, node->keylen, vt, sizeof vt));
            return FAIL(ld, f[D_SHARE],
                        "share_threshold needs a wildcard value (one with '*'), not '%s'",
                        sl__yaml_tok_text(node->value, node->valuelen, vt, sizeof vt));
        }
    }
    node->metric_dynamic = sl_rules_metric_dynamic(node); /* its ancestors are loaded */
    if (f[D_METADATA]) { /* Lyft hands it to Envoy (gRPC's dynamic_metadata) */
        if (sl__rules_meta_load(ld, f[D_METADATA], &node->metadata) != 0) return -1;
        node->has_metadata = 1;
    }
    if (f[D_IP_PREFIX] && load_ip_prefix(ld, node, f[D_IP_PREFIX]) != 0) return -1;
    if (f[D_RATE_LIMIT] && load_limits(ld, node, f[D_RATE_LIMIT]) != 0) return -1;
    if (f[D_DESCRIPTORS]) {
        if (node->depth >= SL_RULES_MAX_DEPTH)
            return FAIL(ld, f[D_DESCRIPTORS],
                        "descriptors nested deeper than %d levels (SL_RULES_MAX_DEPTH)",
                        SL_RULES_MAX_DEPTH);
        if (load_descriptors(ld, node, f[D_DESCRIPTORS]) != 0) return -1;
    }
    return 0;
}

/* ---- lookup tables -------------------------------------------------------- */

static int ptr_order(const sl_rule_node *a, const sl_rule_node *b) { return a < b ? -1 : a > b; }

/* by key, value, then file order (siblings share one array) */
static int cmp_key_value(const void *x, const void *y)
{
    const sl_rule_node *a = *(const sl_rule_node *const *)x, *b = *(const sl_rule_node *const *)y;
    int c = bytes_cmp(a->key, a->keylen, b->key, b->keylen);
    if (c == 0) c = bytes_cmp(a->value, a->valuelen, b->value, b->valuelen);
    return c ? c : ptr_order(a, b);
}

/* Sorts one table of siblings by (key, value) and refuses two with the same
 * key and value. */
static int sort_unique(loader *ld, const sl_rule_node **v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_key_value);
    for (int i = 1; i < n; i++) {
        const sl_rule_node *a = v[i - 1], *b = v[i];
        if (bytes_cmp(a->key, a->keylen, b->key, b->keylen) != 0 ||
            bytes_cmp(a->value, a->valuelen, b->value, b->valuelen) != 0)
            continue;
        char k[80], val[80];
        sl__yaml_tok_text(b->key, b->keylen, k, sizeof k);
        if (b->match == SL_MATCH_ANY)
            return sl__yaml_fail_at(ld, b->line, b->column,
                                    "duplicate descriptor: key '%s' without a value again "
                                    "(first at line %u)",
                                    k, a->line);
        return sl__yaml_fail_at(
            ld, b->line, b->column,
            "duplicate descriptor: key '%s' value '%s' again (first at line %u)", k,
            sl__yaml_tok_text(b->value, b->valuelen, val, sizeof val), a->line);
    }
    return 0;
}

/* Builds node's lookup tables (rules_int.h): exact children by (key,
 * value), wildcard children in file order, key-only children by key.
 * Refuses duplicate siblings (the wildcards through a sorted copy).
 * O(n log n). */
static int build_index(loader *ld, sl_rule_node *node)
{
    struct sl__rule_index *ix = sl__arena_alloc(&ld->set->mem, sizeof *ix);
    if (ix == NULL) return sl__yaml_oom(ld);
    int n = node->nchildren, ne = 0, nw = 0, na = 0;
    for (int i = 0; i < n; i++) {
        sl_rule_match m = node->children[i].match;
        ne += m == SL_MATCH_EXACT;
        nw += m == SL_MATCH_WILDCARD;
        na += m == SL_MATCH_ANY;
    }
    ix->exact = sl__arena_alloc(&ld->set->mem, (size_t)(ne + nw + na + 1) * sizeof(sl_rule_node *));
    const sl_rule_node **wsorted = sl__arena_alloc(&ld->tmp, (size_t)(nw + 1) * sizeof *wsorted);
    if (ix->exact == NULL || wsorted == NULL) return sl__yaml_oom(ld);
    ix->wild = ix->exact + ne;
    ix->any = ix->wild + nw;
    for (int i = 0; i < n; i++) {
        const sl_rule_node *c = &node->children[i];
        if (c->match == SL_MATCH_EXACT) {
            ix->exact[ix->nexact++] = c;
        } else if (c->match == SL_MATCH_WILDCARD) {
            wsorted[ix->nwild] = c;
            ix->wild[ix->nwild++] = c; /* file order */
        } else {
            ix->any[ix->nany++] = c;
        }
    }
    if (sort_unique(ld, ix->exact, ne) != 0 || sort_unique(ld, wsorted, nw) != 0 ||
        sort_unique(ld, ix->any, na) != 0)
        return -1;
    node->sl__index = ix;
    return 0;
}

static int load_descriptors(loader *ld, sl_rule_node *parent, const ynode *list)
{
    char d[96];
    if (list != NULL) {
        if (list->type != Y_SEQ)
            return FAIL(ld, list, "descriptors must be a list (- key: ...), not %s",
                        sl__yaml_desc(list, d, sizeof d));
        if (list->n > SL_RULES_MAX_RULES)
            return FAIL(ld, list, "more than %d descriptors (SL_RULES_MAX_RULES)",
                        SL_RULES_MAX_RULES);
        sl_rule_node *kids = sl__arena_alloc(&ld->set->mem, (list->n ? list->n : 1) * sizeof *kids);
        if (kids == NULL) return sl__yaml_oom(ld);
        parent->children = kids;
        int i = 0;
        for (const ycell *c = list->first; c; c = c->next, i++) {
            if (visit(ld, c->node) != 0) return -1;
            parent->nchildren = i + 1; /* the tables below see only loaded nodes */
            if (load_descriptor(ld, parent, &kids[i], c->node) != 0) return -1;
        }
    }
    return build_index(ld, parent);
}

/* The child of parent (a domain's root, its index built) that has c's key
 * and value, or NULL.  O(log children), O(wildcards) for a wildcard. */
static const sl_rule_node *same_child(const sl_rule_node *parent, const sl_rule_node *c)
{
    const struct sl__rule_index *ix = parent->sl__index;
    if (c->match == SL_MATCH_WILDCARD) {
        for (int i = 0; i < ix->nwild; i++)
            if (bytes_cmp(ix->wild[i]->key, ix->wild[i]->keylen, c->key, c->keylen) == 0 &&
                bytes_cmp(ix->wild[i]->value, ix->wild[i]->valuelen, c->value, c->valuelen) == 0)
                return ix->wild[i];
        return NULL;
    }
    const sl_rule_node *const *v = c->match == SL_MATCH_ANY ? ix->any : ix->exact;
    int lo = 0, hi = c->match == SL_MATCH_ANY ? ix->nany : ix->nexact;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int d = bytes_cmp(v[mid]->key, v[mid]->keylen, c->key, c->keylen);
        if (d == 0) d = bytes_cmp(v[mid]->value, v[mid]->valuelen, c->value, c->valuelen);
        if (d == 0) return v[mid];
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* SL_RULES_MERGE_DOMAINS: the descriptors of this file (list) added to dom,
 * which an earlier file defined, after its own -- as Lyft's
 * MERGE_DOMAIN_CONFIG does.  A descriptor both files define (key and value)
 * is an error naming the other file.  The top-level nodes move to one new
 * array, so their children's parent pointers are set again. */
static int merge_domain(loader *ld, sl_rule_domain *dom, const ynode *list)
{
    sl_rule_node *old = &dom->root, add;
    memset(&add, 0, sizeof add);
    add.match = SL_MATCH_ROOT;
    add.path = dom->name;
    add.domain = dom;
    add.ip4_prefix = add.ip6_prefix = -1;
    if (load_descriptors(ld, &add, list) != 0) return -1;
    for (int i = 0; i < add.nchildren; i++) {
        const sl_rule_node *c = &add.children[i], *o = same_child(old, c);
        if (o == NULL) continue;
        char k[80], v[80];
        sl__yaml_tok_text(c->key, c->keylen, k, sizeof k);
        if (c->match == SL_MATCH_ANY)
            return sl__yaml_fail_at(
                ld, c->line, c->column,
                "duplicate descriptor: key '%s' without a value, already in domain "
                "'%s' of %s (line %u)",
                k, dom->name, dom->file, o->line);
        return sl__yaml_fail_at(
            ld, c->line, c->column,
            "duplicate descriptor: key '%s' value '%s', already in domain '%s' of %s "
            "(line %u)",
            k, sl__yaml_tok_text(c->value, c->valuelen, v, sizeof v), dom->name, dom->file,
            o->line);
    }
    int n = old->nchildren + add.nchildren;
    sl_rule_node *kids = sl__arena_alloc(&ld->set->mem, (size_t)(n ? n : 1) * sizeof *kids);
    if (kids == NULL) return sl__yaml_oom(ld);
    if (old->nchildren) memcpy(kids, old->children, (size_t)old->nchildren * sizeof *kids);
    if (add.nchildren)
        memcpy(kids + old->nchildren, add.children, (size_t)add.nchildren * sizeof *kids);
    for (int i = 0; i < n; i++) {
        kids[i].parent = old;
        for (int j = 0; j < kids[i].nchildren; j++)
            ((sl_rule_node *)&kids[i].children[j])->parent = &kids[i];
    }
    old->children = kids;
    old->nchildren = n;
    dom->nfiles++;
    return build_index(ld, old);
}

/* The file's tree into the next domain of the set (or, merging, into the
 * domain an earlier file defined). */
static int load_domain(loader *ld)
{
    static const char *const fields[] = {"domain", "descriptors"};
    const ynode *root = ld->root, *f[2];
    char d[96], t[80];
    if (root == NULL)
        return sl__yaml_fail_at(ld, 1, 1,
                                "empty file: expected a map with 'domain' and 'descriptors'");
    if (root->type != Y_MAP)
        return FAIL(ld, root, "a rules file must be a map with 'domain' and 'descriptors', not %s",
                    sl__yaml_desc(root, d, sizeof d));
    if (get_fields(ld, root, fields, 2, "a rules file", "domain or descriptors", f) != 0) return -1;
    if (f[0] == NULL) return FAIL(ld, root, "rules file has no domain");
    const char *s = NULL;
    size_t len = 0;
    if (get_string(ld, f[0], "domain", &s, &len) != 0) return -1;
    if (len == 0) return FAIL(ld, f[0], "domain is empty");
    if (len > SL_MAX_KEY)
        return FAIL(ld, f[0], "domain longer than %d bytes (SL_MAX_KEY)", SL_MAX_KEY);
    sl_rules *set = ld->set;
    for (int i = 0; i < set->ndomains; i++) {
        sl_rule_domain *o = &set->domains[i];
        if (bytes_cmp(o->name, o->namelen, s, len) != 0) continue;
        if (set->flags & SL_RULES_MERGE_DOMAINS) return merge_domain(ld, o, f[1]);
        return FAIL(ld, f[0],
                    "domain '%s' is already defined in %s:%u:%u (--merge-domains merges "
                    "them, as Lyft's MERGE_DOMAIN_CONFIG does)",
                    sl__yaml_tok(f[0], t, sizeof t), o->file, o->line, o->column);
    }
    sl_rule_domain *dom = &set->domains[set->ndomains];
    memset(dom, 0, sizeof *dom);
    if ((dom->name = sl__arena_strndup(&set->mem, s, len)) == NULL ||
        (dom->file = sl__arena_strndup(&set->mem, ld->file, strlen(ld->file))) == NULL)
        return sl__yaml_oom(ld);
    dom->namelen = len;
    dom->nfiles = 1;
    dom->line = f[0]->line;
    dom->column = f[0]->col;
    sl_rule_node *r = &dom->root;
    r->match = SL_MATCH_ROOT;
    r->path = dom->name;
    r->domain = dom;
    r->ip4_prefix = r->ip6_prefix = -1;
    r->line = root->line;
    r->column = root->col;
    if (load_descriptors(ld, r, f[1]) != 0) return -1;
    set->ndomains++;
    return 0;
}

/* One file's bytes into set.  Returns 0 or -1 with err set. */
static int load_one(sl_rules *set, const char *file, const char *buf, size_t len, char *err,
                    size_t errlen)
{
    loader ld;
    memset(&ld, 0, sizeof ld);
    ld.file = file;
    ld.buf = buf;
    ld.len = len;
    ld.err = err;
    ld.errlen = errlen;
    ld.set = set;
    if (errlen) err[0] = '\0';
    int rc;
    if (len > SL_RULES_MAX_FILE)
        rc = sl__yaml_fail_at(
            &ld, 1, 1, "file too large: %zu bytes (the limit is %u bytes, SL_RULES_MAX_FILE)", len,
            (unsigned)SL_RULES_MAX_FILE);
    else if ((rc = sl__yaml_prescan(&ld)) == 0 && (rc = sl__yaml_build_tree(&ld)) == 0)
        rc = load_domain(&ld);
    sl__arena_free(&ld.tmp);
    if (rc != 0 && errlen && err[0] == '\0') snprintf(err, errlen, "%s: invalid rules", file);
    return rc;
}

/* ---- sets ----------------------------------------------------------------- */

static sl_rules *set_new(const char *source, int nfiles)
{
    sl_rules *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    atomic_init(&r->refs, 1);
    r->source = sl__arena_strndup(&r->mem, source, strlen(source));
    r->domains_cap = nfiles;
    r->domains = sl__arena_alloc(&r->mem, (size_t)(nfiles ? nfiles : 1) * sizeof *r->domains);
    if (r->source == NULL || r->domains == NULL) {
        sl__arena_free(&r->mem);
        free(r);
        return NULL;
    }
    return r;
}

static void set_destroy(sl_rules *r)
{
    sl__arena_free(&r->mem);
    free(r);
}

static int cmp_domain(const void *x, const void *y)
{
    const sl_rule_domain *a = *(const sl_rule_domain *const *)x,
                         *b = *(const sl_rule_domain *const *)y;
    return bytes_cmp(a->name, a->namelen, b->name, b->namelen);
}

/* Completes a loaded set: the domain table, generation, time. */
static int set_finish(sl_rules *r)
{
    r->by_name = sl__arena_alloc(&r->mem, (size_t)(r->ndomains + 1) * sizeof *r->by_name);
    if (r->by_name == NULL) return -1;
    for (int i = 0; i < r->ndomains; i++) r->by_name[i] = &r->domains[i];
    qsort(r->by_name, (size_t)r->ndomains, sizeof *r->by_name, cmp_domain);
    r->loaded_at_ms = sl__wall_ms();
    r->generation = atomic_fetch_add(&generations, 1) + 1;
    return 0;
}

#define FLAGS_KNOWN (SL_RULES_MERGE_DOMAINS | SL_RULES_COUNT_DENIED)

sl_rules *sl_rules_load_buffer(const char *name, const char *data, size_t len, char *err,
                               size_t errlen)
{
    return sl_rules_load_buffer_flags(name, data, len, 0, err, errlen);
}

sl_rules *sl_rules_load_buffer_flags(const char *name, const char *data, size_t len, unsigned flags,
                                     char *err, size_t errlen)
{
    if (name == NULL || (data == NULL && len > 0) || (flags & ~FLAGS_KNOWN)) {
        if (errlen) snprintf(err, errlen, "invalid argument");
        return NULL;
    }
    sl_rules *r = set_new(name, 1);
    if (r == NULL) {
        if (errlen) snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    r->flags = flags;
    if (load_one(r, name, data ? data : "", len, err, errlen) != 0 || set_finish(r) != 0) {
        if (errlen && err[0] == '\0') snprintf(err, errlen, "%s: out of memory", name);
        set_destroy(r);
        return NULL;
    }
    if (errlen) err[0] = '\0';
    return r;
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int is_rules_name(const char *s)
{
    size_t n = strlen(s);
    if (s[0] == '.') return 0; /* hidden, and Kubernetes' ..data, ..2024_... */
    return (n > 5 && strcmp(s + n - 5, ".yaml") == 0) || (n > 4 && strcmp(s + n - 4, ".yml") == 0);
}

static void free_names(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The rules files of dir -- every visible name ending in .yaml or .yml,
 * whatever it is -- as full paths sorted by name.  Nothing is skipped for
 * what it turns out to be: an entry that cannot be read as a regular file
 * (a dangling link, a FIFO, a directory named x.yaml) fails the load when
 * read_file reaches it, rather than making the set silently one domain
 * short.  Returns 0 or -1. */
static int list_dir(const char *dir, char ***out, int *nout, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    char **v = NULL;
    int n = 0, cap = 0;
    size_t dlen = strlen(dir);
    int slash = dlen > 0 && dir[dlen - 1] == '/';
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_rules_name(e->d_name)) continue;
        size_t len = dlen + 1 + strlen(e->d_name) + 1;
        char *p = malloc(len);
        if (p == NULL) goto nomem;
        snprintf(p, len, "%s%s%s", dir, slash ? "" : "/", e->d_name);
        if (n == SL_RULES_MAX_FILES) {
            free(p);
            snprintf(err, errlen, "%s: more than %d rules files (SL_RULES_MAX_FILES)", dir,
                     SL_RULES_MAX_FILES);
            closedir(d);
            free_names(v, n);
            return -1;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (nv == NULL) {
                free(p);
                goto nomem;
            }
            v = nv;
        }
        v[n++] = p;
    }
    closedir(d);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    *nout = n;
    return 0;
nomem:
    snprintf(err, errlen, "%s: out of memory", dir);
    closedir(d);
    free_names(v, n);
    return -1;
}

sl_rules *sl_rules_load(const char *path, char *err, size_t errlen)
{
    return sl_rules_load_flags(path, 0, err, errlen);
}

sl_rules *sl_rules_load_flags(const char *path, unsigned flags, char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (path == NULL || (flags & ~FLAGS_KNOWN)) {
        snprintf(err, errlen, "invalid argument");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        path_fail(path, errno, err, errlen);
        return NULL;
    }
    char **files = NULL;
    int nfiles = 1;
    if (S_ISDIR(st.st_mode)) {
        if (list_dir(path, &files, &nfiles, err, errlen) != 0) return NULL;
    }
    sl_rules *r = set_new(path, nfiles);
    if (r == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        free_names(files, files ? nfiles : 0);
        return NULL;
    }
    r->flags = flags;
    uint64_t total = 0;
    int rc = 0;
    for (int i = 0; i < nfiles && rc == 0; i++) {
        const char *file = files ? files[i] : path;
        char *buf = NULL;
        size_t len = 0;
        if ((rc = read_file(file, &buf, &len, err, errlen)) != 0) break;
        total += len;
        if (total > SL_RULES_MAX_TOTAL) {
            snprintf(err, errlen,
                     "%s:1:1: the rules files total more than %u bytes (SL_RULES_MAX_TOTAL)", file,
                     (unsigned)SL_RULES_MAX_TOTAL);
            rc = -1;
        } else {
            rc = load_one(r, file, buf, len, err, errlen);
        }
        free(buf);
    }
    free_names(files, files ? nfiles : 0);
    if (rc == 0 && set_finish(r) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    if (rc != 0) {
        set_destroy(r);
        return NULL;
    }
    err[0] = '\0';
    return r;
}

sl_rules *sl_rules_ref(sl_rules *r)
{
    if (r) atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void sl_rules_unref(sl_rules *r)
{
    if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) set_destroy(r);
}

void sl_rules_free(sl_rules *r) { sl_rules_unref(r); }

uint64_t sl_rules_generation(const sl_rules *r) { return r ? r->generation : 0; }
int64_t sl_rules_loaded_at_ms(const sl_rules *r) { return r ? r->loaded_at_ms : 0; }
const char *sl_rules_source(const sl_rules *r) { return r ? r->source : NULL; }
size_t sl_rules_count(const sl_rules *r) { return r ? r->nrules : 0; }
unsigned sl_rules_flags(const sl_rules *r) { return r ? r->flags : 0; }
int sl_rules_ndomains(const sl_rules *r) { return r ? r->ndomains : 0; }

const sl_rule_domain *sl_rules_domain(const sl_rules *r, int i)
{
    return r && i >= 0 && i < r->ndomains ? &r->domains[i] : NULL;
}
