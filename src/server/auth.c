/*
 * auth.c -- users, passwords, command groups and the limiter of failed
 * logins (auth.h).
 *
 * The users file, one user a line (docs/sluiced.md, "The users file"):
 *
 *     # NAME      WORDS: on|off, >PASSWORD, #SHA256, +GROUP
 *     user checkout  >s3cret-one                     +deciding
 *     user grafana   #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 +reading
 *     user ops       >correct-horse >battery-staple  +all
 *
 * Its words are Redis ACL's where they mean the same (on, off, >, #), and
 * a group is +NAME.  The file is parsed into a scratch table; only a file
 * without a single error replaces nothing and is kept (there is nothing to
 * replace: users are read once, at start).  Plaintext passwords live only
 * in the line buffer, which is wiped after each line.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "auth.h"
#include "log.h"
#include "sluice.h"

struct sl_auth {
    sl_auth_user *users; /* nusers of them, in file order */
    int nusers;
    int required;                        /* a password is configured */
    sl_auth_user open;                   /* authentication off: "default", every group */
    unsigned char dummy[SL_AUTH_DIGEST]; /* compared against for a name that is no user */
    sl_store *fails;                     /* failed logins per address (auth.h) */
    sl_params fail_p;                    /* sliding-log, N per window */
    _Atomic uint64_t ok, failed, blocked, denied_cmd;
};

static void say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *err, size_t errlen, const char *fmt, ...)
{
    if (errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void sl__auth_sha256(const void *p, size_t n, unsigned char out[SL_AUTH_DIGEST])
{
    SHA256(p, n, out);
}

/* Printable, bounded copy of a token for messages (never of a password). */
static const char *tok(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n + 4 < cap; i++)
        buf[n++] = (s[i] > ' ' && s[i] < 0x7f) ? s[i] : '?';
    if (n < len && n + 4 <= cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

static int word_is(const char *w, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(w, lit, n) == 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* "deciding", "reading", "admin", "all" -> bits; 0 when unknown. */
static unsigned group_bits(const char *w, size_t n)
{
    if (word_is(w, n, "deciding")) return SL_AUTH_DECIDING;
    if (word_is(w, n, "reading")) return SL_AUTH_READING;
    if (word_is(w, n, "admin")) return SL_AUTH_ADMIN;
    if (word_is(w, n, "all")) return SL_AUTH_ALL;
    return 0;
}

static const sl_auth_user *find(const sl_auth_user *users, int n, const char *name, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(users[i].name) == len && memcmp(users[i].name, name, len) == 0) return &users[i];
    return NULL;
}

/* Parses one "user ..." line (line[0..len), blanks trimmed) into *u.
 * Returns 0, or -1 with "path:ln: ..." in err. */
static int parse_user(const char *path, int ln, const char *line, size_t len,
                      const sl_auth_user *prev, int nprev, sl_auth_user *u, char *err,
                      size_t errlen)
{
    char t[80];
    const char *w[3 + SL_AUTH_MAX_PASSWORDS + 8]; /* more words than any valid line has */
    size_t wl[sizeof w / sizeof w[0]];
    int nw = 0, too_many = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && is_blank(line[i])) i++;
        if (i == len) break;
        size_t b = i;
        while (i < len && !is_blank(line[i])) i++;
        if (nw == (int)(sizeof w / sizeof w[0])) {
            too_many = 1;
            break;
        }
        w[nw] = line + b;
        wl[nw++] = i - b;
    }
    if (!word_is(w[0], wl[0], "user")) {
        say(err, errlen, "%s:%d: expected 'user NAME ...', got '%s'", path, ln,
            tok(w[0], wl[0], t, sizeof t));
        return -1;
    }
    if (nw < 2) {
        say(err, errlen, "%s:%d: 'user' needs a name", path, ln);
        return -1;
    }
    for (size_t i = 0; i < wl[1]; i++) {
        unsigned char ch = (unsigned char)w[1][i];
        if (ch <= ' ' || ch >= 0x7f || wl[1] > SL_AUTH_MAX_NAME) {
            say(err, errlen,
                "%s:%d: invalid user name '%s': 1 to %d printable characters, no blanks", path, ln,
                tok(w[1], wl[1], t, sizeof t), SL_AUTH_MAX_NAME);
            return -1;
        }
    }
    memset(u, 0, sizeof *u);
    memcpy(u->name, w[1], wl[1]);
    u->line = ln;
    const sl_auth_user *dup = find(prev, nprev, w[1], wl[1]);
    if (dup != NULL) {
        say(err, errlen, "%s:%d: user '%s' is defined twice (first at line %d)", path, ln, u->name,
            dup->line);
        return -1;
    }
    if (too_many) {
        say(err, errlen, "%s:%d: too many words for user '%s' (at most %d passwords)", path, ln,
            u->name, SL_AUTH_MAX_PASSWORDS);
        return -1;
    }
    int on = -1;
    for (int k = 2; k < nw; k++) {
        const char *x = w[k];
        size_t n = wl[k];
        if (word_is(x, n, "on") || word_is(x, n, "off")) {
            int v = word_is(x, n, "on");
            if (on >= 0 && on != v) {
                say(err, errlen, "%s:%d: user '%s' is both on and off", path, ln, u->name);
                return -1;
            }
            on = v;
        } else if (x[0] == '>' || x[0] == '#') {
            if (u->npass == SL_AUTH_MAX_PASSWORDS) {
                say(err, errlen, "%s:%d: user '%s' has more than %d passwords", path, ln, u->name,
                    SL_AUTH_MAX_PASSWORDS);
                return -1;
            }
            unsigned char *d = u->pass[u->npass];
            if (x[0] == '>') {
                if (n == 1) {
                    say(err, errlen, "%s:%d: empty password '>' for user '%s' (write >PASSWORD)",
                        path, ln, u->name);
                    return -1;
                }
                sl__auth_sha256(x + 1, n - 1, d);
            } else {
                int ok = n == 1 + 2 * SL_AUTH_DIGEST;
                for (size_t i = 0; ok && i < SL_AUTH_DIGEST; i++) {
                    int hi = hexval(x[1 + 2 * i]), lo = hexval(x[2 + 2 * i]);
                    ok = hi >= 0 && lo >= 0; /* hexval's -1 is not shifted (UB) */
                    if (ok) d[i] = (unsigned char)(hi << 4 | lo);
                }
                if (!ok) {
                    say(err, errlen,
                        "%s:%d: '%s' is not a SHA-256 for user '%s': expected # and %d hex digits "
                        "(sha256sum)",
                        path, ln, tok(x, n, t, sizeof t), u->name, 2 * SL_AUTH_DIGEST);
                    return -1;
                }
            }
            u->npass++;
        } else if (x[0] == '+') {
            unsigned g = group_bits(x + 1, n - 1);
            if (g == 0) {
                say(err, errlen,
                    "%s:%d: unknown group '%s' for user '%s' (expected +deciding, +reading, "
                    "+admin or +all)",
                    path, ln, tok(x, n, t, sizeof t), u->name);
                return -1;
            }
            u->groups |= g;
        } else {
            /* not quoted: a password written without its '>' would end up in a log */
            say(err, errlen,
                "%s:%d: word %d for user '%s' is not on, off, >PASSWORD, #SHA256 or +GROUP (not "
                "shown: it may be a password)",
                path, ln, k + 1, u->name);
            return -1;
        }
    }
    u->on = on != 0;
    if (u->on && u->npass == 0) {
        say(err, errlen,
            "%s:%d: user '%s' has no password (give >PASSWORD or #SHA256, or mark the user off)",
            path, ln, u->name);
        return -1;
    }
    if (u->groups == 0) {
        say(err, errlen, "%s:%d: user '%s' has no group (give +deciding, +reading, +admin or +all)",
            path, ln, u->name);
        return -1;
    }
    return 0;
}

/* Reads the users file into a->users.  Returns 0, or -1 with err. */
static int load_users(sl_auth *a, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        say(err, errlen, "cannot read --users-file '%s': %s", path, strerror(errno));
        return -1;
    }
    sl_auth_user *users = calloc(SL_AUTH_MAX_USERS, sizeof *users);
    char *line = NULL;
    size_t linecap = 0;
    ssize_t got;
    int ln = 0, n = 0, rc = 0;
    if (users == NULL) {
        say(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    errno = 0;
    while (rc == 0 && (got = getline(&line, &linecap, f)) >= 0) {
        ln++;
        size_t len = (size_t)got;
        if (len > SL_AUTH_MAX_LINE) {
            say(err, errlen, "%s:%d: line longer than %d bytes", path, ln, SL_AUTH_MAX_LINE);
            rc = -1;
        } else if (memchr(line, '\0', len) != NULL) {
            say(err, errlen, "%s:%d: NUL byte in line", path, ln);
            rc = -1;
        } else {
            size_t i = 0;
            while (i < len && is_blank(line[i])) i++;
            while (len > i && is_blank(line[len - 1])) len--;
            if (i < len && line[i] != '#') {
                if (n == SL_AUTH_MAX_USERS) {
                    say(err, errlen, "%s:%d: more than %d users", path, ln, SL_AUTH_MAX_USERS);
                    rc = -1;
                } else if (parse_user(path, ln, line + i, len - i, users, n, &users[n], err,
                                      errlen) != 0) {
                    rc = -1;
                } else {
                    n++;
                }
            }
        }
        explicit_bzero(line, linecap);
    }
    if (rc == 0 && ferror(f)) {
        say(err, errlen, "cannot read --users-file '%s': %s", path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && n == 0) {
        say(err, errlen, "%s: no users (write one 'user NAME >PASSWORD +GROUP' line per user)",
            path);
        rc = -1;
    }
    if (line != NULL) explicit_bzero(line, linecap);
    free(line);
    fclose(f);
    if (rc != 0) {
        if (users != NULL) explicit_bzero(users, SL_AUTH_MAX_USERS * sizeof *users);
        free(users);
        return -1;
    }
    a->users = users;
    a->nusers = n;
    return 0;
}

/* Reads the --requirepass-file into *u (the user "default", every group).
 * The password is the whole file less one final newline.  Returns 0 or -1
 * with err. */
static int load_requirepass(const char *path, sl_auth_user *u, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        say(err, errlen, "cannot read --requirepass-file '%s': %s", path, strerror(errno));
        return -1;
    }
    char buf[SL_AUTH_MAX_LINE + 3];
    size_t n = fread(buf, 1, sizeof buf, f);
    int bad = ferror(f);
    fclose(f);
    int rc = -1;
    if (bad) {
        say(err, errlen, "cannot read --requirepass-file '%s': read error", path);
        goto out;
    }
    if (n > 0 && buf[n - 1] == '\n') n--;
    if (n > 0 && buf[n - 1] == '\r') n--;
    if (n > SL_AUTH_MAX_LINE) {
        say(err, errlen, "%s: password longer than %d bytes", path, SL_AUTH_MAX_LINE);
        goto out;
    }
    if (n == 0) {
        say(err, errlen, "%s: the password file is empty", path);
        goto out;
    }
    const char *nl = memchr(buf, '\n', n);
    if (nl != NULL) {
        say(err, errlen, "%s:2: the password must be one line (only a final newline is dropped)",
            path);
        goto out;
    }
    if (memchr(buf, '\0', n) != NULL || memchr(buf, '\r', n) != NULL) {
        say(err, errlen, "%s:1: NUL or CR byte in the password", path);
        goto out;
    }
    memset(u, 0, sizeof *u);
    strcpy(u->name, "default");
    u->groups = SL_AUTH_ALL;
    u->on = 1;
    u->npass = 1;
    sl__auth_sha256(buf, n, u->pass[0]);
    rc = 0;
out:
    explicit_bzero(buf, sizeof buf);
    return rc;
}

sl_auth *sl_auth_new(const sl_auth_opts *o, char *err, size_t errlen)
{
    sl_auth *a = calloc(1, sizeof *a);
    if (a == NULL) {
        say(err, errlen, "out of memory");
        return NULL;
    }
    strcpy(a->open.name, "default");
    a->open.groups = SL_AUTH_ALL;
    a->open.on = 1;
    sl__auth_sha256("sluiced: no such user", 21, a->dummy);

    const char *rp = o->requirepass_file, *uf = o->users_file;
    sl_auth_user req;
    int have_req = rp != NULL && rp[0] != '\0';
    if (have_req && load_requirepass(rp, &req, err, errlen) != 0) goto fail;
    if (uf != NULL && uf[0] != '\0' && load_users(a, uf, err, errlen) != 0) goto fail;
    if (have_req) {
        const sl_auth_user *d = find(a->users, a->nusers, "default", 7);
        if (d != NULL) {
            say(err, errlen,
                "--requirepass-file and %s:%d both set a password for the user 'default': keep "
                "one",
                uf, d->line);
            goto fail;
        }
        sl_auth_user *more = realloc(a->users, (size_t)(a->nusers + 1) * sizeof *more);
        if (more == NULL) {
            say(err, errlen, "out of memory");
            goto fail;
        }
        a->users = more;
        a->users[a->nusers++] = req;
    }
    a->required = a->nusers > 0;

    a->fail_p = (sl_params)SL_PARAMS_INIT;
    a->fail_p.algo = SL_SLIDING_LOG;
    a->fail_p.limit = o->fail_max;
    a->fail_p.window_ms = o->fail_window_ms;
    if (o->fail_max < 1 || o->fail_max > SL_AUTH_MAX_FAILS || sl_params_check(&a->fail_p) != 0) {
        say(err, errlen, "invalid failed-login limit %lld per %lld ms", (long long)o->fail_max,
            (long long)o->fail_window_ms);
        goto fail;
    }
    sl_store_opts so;
    memset(&so, 0, sizeof so);
    so.max_bytes = SL_AUTH_FAIL_MEMORY;
    int serr = 0;
    a->fails = sl_store_new(&so, &serr);
    if (a->fails == NULL) {
        say(err, errlen, "cannot make the store of failed logins: %s", sl_strerror(serr));
        goto fail;
    }
    explicit_bzero(&req, sizeof req);
    return a;
fail:
    explicit_bzero(&req, sizeof req);
    sl_auth_free(a);
    return NULL;
}

void sl_auth_free(sl_auth *a)
{
    if (a == NULL) return;
    if (a->users != NULL) explicit_bzero(a->users, (size_t)a->nusers * sizeof *a->users);
    free(a->users);
    sl_store_free(a->fails);
    free(a);
}

int sl_auth_required(const sl_auth *a) { return a != NULL && a->required; }

int sl_auth_nusers(const sl_auth *a) { return a == NULL || !a->required ? 1 : a->nusers; }

static const sl_auth_user open_default = {"default", SL_AUTH_ALL, 1, 0, {{0}}, 0};

const sl_auth_user *sl_auth_anonymous(const sl_auth *a)
{
    if (a == NULL) return &open_default;
    return a->required ? NULL : &a->open;
}

size_t sl__auth_peer_key(const char *peer, char *key, size_t cap)
{
    unsigned char b[16];
    char text[INET6_ADDRSTRLEN + 4];
    const char *k = "local";
    if (peer != NULL) {
        k = peer;
        if (inet_pton(AF_INET6, peer, b) == 1) {
            static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (memcmp(b, mapped, 12) == 0) {
                inet_ntop(AF_INET, b + 12, text, sizeof text);
            } else {
                memset(b + 8, 0, 8); /* one /64 is what one host is usually given */
                inet_ntop(AF_INET6, b, text, sizeof text);
                strcat(text, "/64");
            }
            k = text;
        }
    }
    size_t n = strlen(k);
    if (n >= cap) n = cap ? cap - 1 : 0;
    if (cap) {
        memcpy(key, k, n);
        key[n] = '\0';
    }
    return n;
}

/* Is pass one of u's passwords?  Compares the digest with every one of u's
 * (or the dummy, for no user) in constant time, so the time depends only
 * on the password's length and u's number of passwords. */
static int password_ok(const sl_auth *a, const sl_auth_user *u, const char *pass, size_t plen)
{
    unsigned char d[SL_AUTH_DIGEST];
    sl__auth_sha256(pass, plen, d);
    int match = 0;
    if (u == NULL || u->npass == 0) {
        (void)CRYPTO_memcmp(d, a->dummy, SL_AUTH_DIGEST);
    } else {
        for (int i = 0; i < u->npass; i++)
            match |= CRYPTO_memcmp(d, u->pass[i], SL_AUTH_DIGEST) == 0;
    }
    explicit_bzero(d, sizeof d);
    return match && u->on;
}

int sl_auth_may_try(sl_auth *a, const char *peer, int64_t now, int64_t *retry_ms)
{
    char key[INET6_ADDRSTRLEN + 8];
    size_t klen = sl__auth_peer_key(peer, key, sizeof key);
    sl_result r;
    *retry_ms = 0;
    if (sl_peek(a->fails, &a->fail_p, key, klen, now, 1, &r) == 0 && !r.allowed) {
        atomic_fetch_add_explicit(&a->blocked, 1, memory_order_relaxed);
        *retry_ms = r.retry_after_ms;
        return SL_AUTH_BLOCKED;
    }
    return SL_AUTH_OK;
}

void sl_auth_failed(sl_auth *a, const char *peer, const char *what, size_t wlen, int64_t now)
{
    char key[INET6_ADDRSTRLEN + 8];
    size_t klen = sl__auth_peer_key(peer, key, sizeof key);
    sl_result r;
    atomic_fetch_add_explicit(&a->failed, 1, memory_order_relaxed);
    char name[SL_AUTH_MAX_NAME + 8];
    size_t nn = wlen < SL_AUTH_MAX_NAME ? wlen : SL_AUTH_MAX_NAME;
    memcpy(name, what, nn);
    name[nn] = '\0';
    if (sl_decide(a->fails, &a->fail_p, key, klen, now, 1, &r) == 0 && r.allowed &&
        r.remaining == 0) {
        sl_result p;
        int64_t wait = sl_peek(a->fails, &a->fail_p, key, klen, now, 1, &p) == 0
                           ? p.retry_after_ms
                           : a->fail_p.window_ms;
        sl_log(SL_LOG_WARN, "too many failed logins: this address is refused for a while",
               "addr=%s user=%s failures=%lld window_ms=%lld retry_ms=%lld", sl_logq(key),
               sl_logq(name), (long long)a->fail_p.limit, (long long)a->fail_p.window_ms,
               (long long)wait);
    } else if (sl_log_enabled(SL_LOG_DEBUG)) {
        sl_log(SL_LOG_DEBUG, "login failed", "addr=%s user=%s", sl_logq(key), sl_logq(name));
    }
}

int sl_auth_login(sl_auth *a, const char *peer, const char *user, size_t ulen, const char *pass,
                  size_t plen, int64_t now, const sl_auth_user **who, int64_t *retry_ms)
{
    if (sl_auth_may_try(a, peer, now, retry_ms) != SL_AUTH_OK) return SL_AUTH_BLOCKED;
    const sl_auth_user *u;
    int ok;
    if (!a->required) { /* Redis's default user: nopass */
        u = ulen == 7 && memcmp(user, "default", 7) == 0 ? &a->open : NULL;
        ok = u != NULL;
    } else {
        u = find(a->users, a->nusers, user, ulen);
        ok = password_ok(a, u, pass, plen);
    }
    if (ok) {
        atomic_fetch_add_explicit(&a->ok, 1, memory_order_relaxed);
        *who = u;
        return SL_AUTH_OK;
    }
    sl_auth_failed(a, peer, user, ulen, now);
    return SL_AUTH_WRONG;
}

int sl_auth_bearer(sl_auth *a, const char *peer, const char *h, size_t hlen, unsigned need,
                   int64_t now, const sl_auth_user **who, int64_t *retry_ms)
{
    *who = NULL;
    if (need == 0 || !sl_auth_required(a)) return SL_AUTH_OK;
    if (h == NULL) return SL_AUTH_MISSING;
    if (hlen < 7 || strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ') return SL_AUTH_MALFORMED;
    size_t i = 6;
    while (i < hlen && h[i] == ' ') i++;
    const char *tok = h + i;
    size_t tlen = hlen - i;
    if (tlen == 0 || memchr(tok, ' ', tlen) != NULL || memchr(tok, '\t', tlen) != NULL)
        return SL_AUTH_MALFORMED;
    const char *colon = memchr(tok, ':', tlen);
    const char *user = colon ? tok : "default", *pass = colon ? colon + 1 : tok;
    size_t ulen = colon ? (size_t)(colon - tok) : 7;
    size_t plen = colon ? tlen - ulen - 1 : tlen;
    int rc = sl_auth_login(a, peer, user, ulen, pass, plen, now, who, retry_ms);
    if (rc != SL_AUTH_OK) return rc;
    if (((*who)->groups & need) != need) {
        sl_auth_count_denied(a);
        return SL_AUTH_NOPERM;
    }
    return SL_AUTH_OK;
}

void sl_auth_expire(sl_auth *a, int64_t now)
{
    if (a != NULL) sl_store_expire(a->fails, now, 10000);
}

void sl_auth_stats_get(const sl_auth *a, sl_auth_stats *out)
{
    memset(out, 0, sizeof *out);
    if (a == NULL) return;
    out->ok = atomic_load_explicit(&a->ok, memory_order_relaxed);
    out->failed = atomic_load_explicit(&a->failed, memory_order_relaxed);
    out->blocked = atomic_load_explicit(&a->blocked, memory_order_relaxed);
    out->denied_cmd = atomic_load_explicit(&a->denied_cmd, memory_order_relaxed);
}

void sl_auth_count_denied(sl_auth *a)
{
    if (a != NULL) atomic_fetch_add_explicit(&a->denied_cmd, 1, memory_order_relaxed);
}
