/*
 * url.c -- the Redis backend's --backend value: redis:// URLs (one, a
 * ring's list, a Redis Cluster's seeds) parsed and checked, each server's
 * identity on a ring, and the value shown without its passwords
 * (backend_redis.h: sl_redis_url_parse, sl_redis_urls_parse; backend.h:
 * sl_backend_url_check, sl_backend_url_shown).  Touches no socket.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/redis_int.h"

/* ---- the URL ------------------------------------------------------------- */

static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) into out (cap bytes, NUL-terminated); -1 when
 * it does not fit or a %XX is malformed. */
static int unescape(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n) return -1;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0) return -1;
            c = h * 16 + l;
            i += 2;
        }
        if (k + 1 >= cap) return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return 0;
}

static int url_fail(char *err, size_t errlen, const char *s, size_t len, const char *what)
{
    /* the URL is quoted without its user:password part */
    const char *at = memchr(s, '@', len);
    if (len > 8 && memcmp(s, "redis://", 8) == 0 && at != NULL)
        snprintf(err, errlen, "'redis://***@%.*s': %s",
                 (int)(len - (size_t)(at + 1 - s) > 200 ? 200 : len - (size_t)(at + 1 - s)), at + 1,
                 what);
    else
        snprintf(err, errlen, "'%.*s': %s", (int)(len > 200 ? 200 : len), s, what);
    return -1;
}

/* u->shown: u without its password. */
void sl__redis_url_show(sl_redis_url *u)
{
    int bracket = strchr(u->host, ':') != NULL;
    snprintf(u->shown, sizeof u->shown, "redis://%s%s%s%s%s:%d/%d", u->user,
             u->pass[0] ? ":***@" : "", bracket ? "[" : "", u->host, bracket ? "]" : "", u->port,
             u->db);
}

/* Every form --backend takes, for the message of a value without one of
 * their schemes (config.c's help says the same). */
#define BACKEND_FORMS                                                                              \
    "use local, redis://[user:password@]host[:port][/db], several redis:// URLs separated by "     \
    "commas (a ring: redis://a:6379,redis://b:6379), "                                             \
    "redis-cluster://[user:password@]host[:port][,host[:port]...] (no :port: 6379), or "           \
    "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name (no :port: 26379)"

/* The message of s[0..len), printable, that starts with no scheme --backend
 * takes: the scheme it has (up to "://"), or that it has none, and every
 * form.  The value is quoted short (its first 80 bytes) so that the whole
 * list fits the callers' buffers; with '@' in it only its scheme is shown. */
static int scheme_fail(char *err, size_t errlen, const char *s, size_t len)
{
    const char *sep = NULL;
    for (size_t i = 0; i + 3 <= len && i <= 32 && sep == NULL; i++)
        if (memcmp(s + i, "://", 3) == 0) sep = s + i + 3;
    int shown =
        memchr(s, '@', len) != NULL ? (sep ? (int)(sep - s) : 0) : (int)(len > 80 ? 80 : len);
    const char *more = (size_t)shown < len ? "..." : "";
    if (sep != NULL)
        snprintf(err, errlen, "'%.*s%s': unknown scheme '%.*s': " BACKEND_FORMS, shown, s, more,
                 (int)(sep - s), s);
    else
        snprintf(err, errlen, "'%.*s%s': no scheme: " BACKEND_FORMS, shown, s, more);
    return -1;
}

int sl_redis_url_parse(const char *s, size_t len, sl_redis_url *u, char *err, size_t errlen)
{
    static const char scheme[] = "redis://";
    memset(u, 0, sizeof *u);
    if (len >= SL_REDIS_URL_MAX) return url_fail(err, errlen, s, len, "longer than 1023 bytes");
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)s[i]))
            return url_fail(err, errlen, s, len, "a space or control byte in the URL");
    if (len >= 9 && strncasecmp(s, "rediss://", 9) == 0)
        return url_fail(err, errlen, s, len,
                        "TLS to Redis (rediss://) is not supported: use redis:// (docs/fleet.md)");
    if (len < sizeof scheme - 1 || strncasecmp(s, scheme, sizeof scheme - 1) != 0)
        return scheme_fail(err, errlen, s, len);
    const char *p = s + sizeof scheme - 1, *end = s + len;
    /* user:password@: up to the last '@' (a password may hold one, escaped or not) */
    const char *at = NULL;
    for (const char *q = p; q < end && *q != '/'; q++)
        if (*q == '@') at = q;
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL)
            return url_fail(err, errlen, s, len,
                            "the part before '@' must be user:password (or :password)");
        if (unescape(p, (size_t)(colon - p), u->user, sizeof u->user) != 0)
            return url_fail(err, errlen, s, len, "malformed or too long user name");
        if (unescape(colon + 1, (size_t)(at - colon - 1), u->pass, sizeof u->pass) != 0)
            return url_fail(err, errlen, s, len, "malformed or too long password");
        if (u->pass[0] == '\0') return url_fail(err, errlen, s, len, "empty password");
        p = at + 1;
    }
    /* host: a name or IPv4 address, or [IPv6] */
    const char *hs = p, *he;
    if (p < end && *p == '[') {
        he = memchr(p, ']', (size_t)(end - p));
        if (he == NULL) return url_fail(err, errlen, s, len, "'[' of an IPv6 host without ']'");
        hs = p + 1;
        p = he + 1;
    } else {
        while (p < end && *p != ':' && *p != '/') p++;
        he = p;
    }
    if (he == hs) return url_fail(err, errlen, s, len, "missing host");
    if ((size_t)(he - hs) >= sizeof u->host) return url_fail(err, errlen, s, len, "host too long");
    for (const char *q = hs; q < he; q++)
        if (!(isalnum((unsigned char)*q) || *q == '.' || *q == '-' || *q == '_' || *q == ':'))
            return url_fail(err, errlen, s, len, "the host holds a character a host cannot");
    memcpy(u->host, hs, (size_t)(he - hs));
    /* [:port], else Redis's own */
    u->port = SL_REDIS_DEFAULT_PORT;
    if (p < end && *p != ':' && *p != '/')
        return url_fail(err, errlen, s, len, "expected :port or /db after the host");
    if (p < end && *p == ':') {
        const char *ps = ++p;
        while (p < end && *p != '/') p++;
        int64_t port;
        if (sl_int_parse(ps, (size_t)(p - ps), 65535, &port) != 0 || port < 1)
            return url_fail(err, errlen, s, len, "the port must be a number 1..65535");
        u->port = (int)port;
    }
    /* [/db] */
    u->db = SL_REDIS_DEFAULT_DB;
    if (p < end) {
        const char *ds = ++p;
        int64_t db;
        if (p == end) return url_fail(err, errlen, s, len, "missing db number after '/'");
        if (sl_int_parse(ds, (size_t)(end - ds), 2147483647, &db) != 0)
            return url_fail(err, errlen, s, len, "the db must be a number 0..2147483647");
        u->db = (int)db;
    }
    sl__redis_url_show(u);
    return 0;
}

void sl__redis_url_id(const sl_redis_url *u, char *buf, size_t cap)
{
    int bracket = strchr(u->host, ':') != NULL;
    snprintf(buf, cap, "%s%s%s:%d/%d", bracket ? "[" : "", u->host, bracket ? "]" : "", u->port,
             u->db);
}

/* Where the element at s[i..len) ends: at the next ',' followed by a
 * scheme (redis:// or rediss://), else at len. */
static size_t element_end(const char *s, size_t len, size_t i)
{
    for (; i < len; i++)
        if (s[i] == ',' && ((len - i - 1 >= 8 && strncasecmp(s + i + 1, "redis://", 8) == 0) ||
                            (len - i - 1 >= 9 && strncasecmp(s + i + 1, "rediss://", 9) == 0)))
            return i;
    return len;
}

/* --backend redis-cluster://[user:password@]host[:port][,host[:port]...]:
 * the seeds, each as a redis:// URL (db 0; no port: 6379) with the one
 * user:password. */
static int cluster_parse(const char *s, size_t len, sl_redis_url *out, int *n, char *err,
                         size_t errlen)
{
    static const char scheme[] = "redis-cluster://";
    const size_t sl = sizeof scheme - 1;
    const char *p = s + sl, *end = s + len, *at = NULL;
    if (len >= SL_REDIS_URL_MAX) {
        snprintf(err, errlen, "'%.200s...': longer than 1023 bytes", s);
        return -1;
    }
    for (const char *q = p; q < end; q++) /* user:password@: up to the last '@' */
        if (*q == '@') at = q;
    const char *hosts = at != NULL ? at + 1 : p;
    const char *shown = at != NULL ? "redis-cluster://***@" : "redis-cluster://";
    if (hosts == end) {
        snprintf(err, errlen,
                 "'%s%.200s': expected redis-cluster://[user:password@]host[:port]"
                 "[,host[:port]...]",
                 shown, hosts);
        return -1;
    }
    int count = 0;
    for (const char *h = hosts; h <= end;) {
        const char *e = memchr(h, ',', (size_t)(end - h));
        if (e == NULL) e = end;
        if (count == SL_RING_MAX) {
            snprintf(err, errlen, "'%s...': more than %d seeds", shown, SL_RING_MAX);
            return -1;
        }
        char url[SL_REDIS_URL_MAX + 16], why[400];
        int k = snprintf(url, sizeof url, "redis://%.*s%.*s", at != NULL ? (int)(at - p + 1) : 0, p,
                         (int)(e - h), h);
        sl_redis_url one, *u = out != NULL ? &out[count] : &one;
        const char *what = NULL;
        if (k < 0 || (size_t)k >= sizeof url)
            what = "longer than 1023 bytes";
        else if (memchr(h, '/', (size_t)(e - h)) != NULL)
            what = "Redis Cluster has one db: no /db";
        else if (sl_redis_url_parse(url, (size_t)k, u, why, sizeof why) != 0)
            what = strstr(why, "': ") != NULL ? strstr(why, "': ") + 3 : why;
        if (what != NULL) {
            snprintf(err, errlen, "seed %d: '%s%.*s': %s", count + 1, shown, (int)(e - h), h, what);
            return -1;
        }
        u->cluster = 1;
        count++;
        h = e + 1;
        if (e == end) break;
    }
    *n = count;
    return 0;
}

/* The message of a redis-sentinel:// URL as a whole: the URL quoted
 * from its hosts on (shown: the scheme, with "***@" when it has a user
 * part), up to 200 bytes of it. */
static int sentinel_fail(char *err, size_t errlen, const char *shown, const char *from,
                         const char *end, const char *what)
{
    size_t n = (size_t)(end - from);
    snprintf(err, errlen, "'%s%.*s%s': %s", shown, (int)(n > 200 ? 200 : n), from,
             n > 200 ? "..." : "", what);
    return -1;
}

#define SENTINEL_FORM "redis-sentinel://[user:password@]host[:port][,host[:port]...]/master-name"

int sl_redis_sentinel_parse(const char *s, size_t len, sl_redis_sentinel *out, char *err,
                            size_t errlen)
{
    static const char scheme[] = "redis-sentinel://";
    const size_t sl = sizeof scheme - 1;
    memset(out, 0, sizeof *out);
    if (len < sl || strncasecmp(s, scheme, sl) != 0) return scheme_fail(err, errlen, s, len);
    const char *p = s + sl, *end = s + len, *at = NULL;
    /* the master's user:password@: up to the last '@' before the first
     * '/' (a '/' of a password is written %2F, as in redis://) */
    const char *slash = memchr(p, '/', (size_t)(end - p));
    for (const char *q = p; q < (slash != NULL ? slash : end); q++)
        if (*q == '@') at = q;
    const char *shown = at != NULL ? "redis-sentinel://***@" : "redis-sentinel://";
    const char *hosts = at != NULL ? at + 1 : p;
    if (len >= SL_REDIS_URL_MAX)
        return sentinel_fail(err, errlen, shown, hosts, end, "longer than 1023 bytes");
    for (size_t i = 0; i < len; i++)
        if (!isgraph((unsigned char)s[i]))
            return sentinel_fail(err, errlen, shown, hosts, end,
                                 "a space or control byte in the URL");
    if (slash == NULL)
        return sentinel_fail(err, errlen, shown, hosts, end,
                             "expected /master-name after the Sentinels (" SENTINEL_FORM ")");
    if (hosts == slash)
        return sentinel_fail(err, errlen, shown, hosts, end,
                             "no Sentinel before '/master-name' (" SENTINEL_FORM ")");
    const char *name = slash + 1;
    if (name == end)
        return sentinel_fail(err, errlen, shown, hosts, end, "missing master name after '/'");
    if (memchr(name, '/', (size_t)(end - name)) != NULL)
        return sentinel_fail(err, errlen, shown, hosts, end,
                             "a master name holds no '/' (no /db: the master's db 0)");
    if ((size_t)(end - name) >= sizeof out->name)
        return sentinel_fail(err, errlen, shown, hosts, end, "master name longer than 255 bytes");
    memcpy(out->name, name, (size_t)(end - name));
    /* the Sentinels, each read as a redis:// URL with the user part (so a
     * bad password is named as redis:// names it) */
    int count = 0;
    for (const char *h = hosts; h < slash;) {
        const char *e = memchr(h, ',', (size_t)(slash - h));
        if (e == NULL) e = slash;
        if (count == SL_REDIS_SENTINELS_MAX) {
            snprintf(err, errlen, "'%s...': more than %d Sentinels", shown, SL_REDIS_SENTINELS_MAX);
            return -1;
        }
        char url[SL_REDIS_URL_MAX + 16], why[400];
        int k = snprintf(url, sizeof url, "redis://%.*s%.*s", at != NULL ? (int)(at - p + 1) : 0, p,
                         (int)(e - h), h);
        sl_redis_url u;
        if (k < 0 || (size_t)k >= sizeof url || sl_redis_url_parse(url, (size_t)k, &u, why, sizeof why) != 0) {
            const char *what = k < 0 || (size_t)k >= sizeof url  ? "longer than 1023 bytes"
                               : strstr(why, "': ") != NULL ? strstr(why, "': ") + 3
                                                              : why;
            snprintf(err, errlen, "Sentinel %d: '%s%.*s': %s", count + 1, shown, (int)(e - h), h,
                     what);
            return -1;
        }
        /* no :port: Sentinel's own (the parse above took Redis's) */
        const char *rb = h < e && *h == '[' ? memchr(h, ']', (size_t)(e - h)) : h;
        int has_port = rb != NULL && memchr(rb, ':', (size_t)(e - rb)) != NULL;
        snprintf(out->at[count].host, sizeof out->at[count].host, "%s", u.host);
        out->at[count].port = has_port ? u.port : SL_REDIS_SENTINEL_PORT;
        for (int j = 0; j < count; j++)
            if (out->at[j].port == out->at[count].port &&
                strcmp(out->at[j].host, out->at[count].host) == 0) {
                int b = strchr(u.host, ':') != NULL;
                snprintf(err, errlen, "Sentinels %d and %d are the same, %s%s%s:%d", j + 1,
                         count + 1, b ? "[" : "", u.host, b ? "]" : "", out->at[count].port);
                return -1;
            }
        if (count == 0) {
            snprintf(out->master.user, sizeof out->master.user, "%s", u.user);
            snprintf(out->master.pass, sizeof out->master.pass, "%s", u.pass);
        }
        count++;
        if (e == slash) break;
        h = e + 1;
        if (h == slash) { /* a trailing comma: an empty Sentinel */
            snprintf(err, errlen, "Sentinel %d: '%s': missing host", count + 1, shown);
            return -1;
        }
    }
    out->n = count;
    out->master.db = 0;
    /* shown: the URL without the password, every Sentinel with its port */
    size_t used = (size_t)snprintf(out->shown, sizeof out->shown, "redis-sentinel://%s%s",
                                   out->master.user, out->master.pass[0] ? ":***@" : "");
    for (int i = 0; i < count && used < sizeof out->shown; i++) {
        int b = strchr(out->at[i].host, ':') != NULL;
        used += (size_t)snprintf(out->shown + used, sizeof out->shown - used, "%s%s%s%s:%d",
                                 i ? "," : "", b ? "[" : "", out->at[i].host, b ? "]" : "",
                                 out->at[i].port);
    }
    if (used < sizeof out->shown)
        snprintf(out->shown + used, sizeof out->shown - used, "/%s", out->name);
    snprintf(out->master.shown, sizeof out->master.shown, "%s", out->shown);
    return 0;
}

int sl_redis_urls_parse(const char *s, size_t len, sl_redis_url *out, int *n, char *err,
                        size_t errlen)
{
    size_t start[SL_RING_MAX + 1], end[SL_RING_MAX + 1];
    int count = 0;
    if (len >= 17 && strncasecmp(s, "redis-sentinel://", 17) == 0) {
        sl_redis_sentinel one;
        *n = 0;
        return sl_redis_sentinel_parse(s, len, &one, err, errlen);
    }
    if (len >= 16 && strncasecmp(s, "redis-cluster://", 16) == 0)
        return cluster_parse(s, len, out, n, err, errlen);
    for (size_t i = 0;; i = end[count - 1] + 1) {
        if (count == SL_RING_MAX) {
            snprintf(err, errlen, "'%.200s...': more than %d servers", s, SL_RING_MAX);
            return -1;
        }
        start[count] = i;
        end[count] = element_end(s, len, i);
        count++;
        if (end[count - 1] == len) break;
    }
    static const char hint[] = " (the servers of a ring are whole URLs separated by commas: "
                               "redis://a:6379,redis://b:6379)";
    char why[512], id[SL_RING_MAX][300];
    if (count == 1) { /* one server: its own message, as ever */
        sl_redis_url one, *u = out != NULL ? &out[0] : &one;
        if (sl_redis_url_parse(s, len, u, why, sizeof why) != 0) {
            /* a wrong scheme's message names the list's form already */
            int list =
                memchr(s, ',', len) != NULL && len >= 8 && strncasecmp(s, "redis://", 8) == 0;
            snprintf(err, errlen, "%s%s", why, list ? hint : "");
            return -1;
        }
        *n = 1;
        return 0;
    }
    for (int k = 0; k < count; k++) {
        const char *e = s + start[k];
        size_t elen = end[k] - start[k];
        sl_redis_url one, *u = out != NULL ? &out[k] : &one;
        if (sl_redis_url_parse(e, elen, u, why, sizeof why) != 0) {
            snprintf(err, errlen, "element %d of %d: %s%s", k + 1, count, why,
                     memchr(e, ',', elen) != NULL ? hint : "");
            return -1;
        }
        sl__redis_url_id(u, id[k], sizeof id[k]);
        for (int j = 0; j < k; j++)
            if (strcmp(id[j], id[k]) == 0) {
                snprintf(err, errlen, "elements %d and %d of %d are the same server %s", j + 1,
                         k + 1, count, id[k]);
                return -1;
            }
    }
    *n = count;
    return 0;
}

int sl_backend_url_check(const char *s, size_t len, char *err, size_t errlen)
{
    int n;
    if (len == 5 && memcmp(s, "local", 5) == 0) return 0;
    return sl_redis_urls_parse(s, len, NULL, &n, err, errlen);
}

void sl_backend_url_shown(const char *url, char *buf, size_t cap)
{
    char why[600];
    int n;
    if (strcmp(url, "local") == 0) {
        snprintf(buf, cap, "local");
        return;
    }
    if (strncasecmp(url, "redis-sentinel://", 17) == 0) {
        sl_redis_sentinel sen;
        snprintf(buf, cap, "%s",
                 sl_redis_sentinel_parse(url, strlen(url), &sen, why, sizeof why) == 0 ? sen.shown
                                                                                      : url);
        return;
    }
    sl_redis_url *u = malloc(SL_RING_MAX * sizeof *u); /* too large for a stack */
    if (u == NULL || sl_redis_urls_parse(url, strlen(url), u, &n, why, sizeof why) != 0) {
        snprintf(buf, cap, "%s", u == NULL ? "(out of memory)" : url);
        free(u);
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    if (u[0].cluster) /* the seeds: redis-cluster://[user:***@]host:port,... */
        used = (size_t)snprintf(buf, cap, "redis-cluster://%s%s", u[0].user,
                                u[0].pass[0] ? ":***@" : "");
    for (int i = 0; i < n && used < cap; i++) {
        const char *hp = strrchr(u[i].shown, '@'); /* host:port/0 of a seed */
        hp = hp != NULL ? hp + 1 : u[i].shown + 8;
        if (u[i].cluster)
            used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", i ? "," : "",
                                     (int)(strrchr(hp, '/') - hp), hp);
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", u[i].shown);
    }
    free(u);
}
