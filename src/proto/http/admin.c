/*
 * admin.c -- the rules service (docs/http.md, "The rules service"):
 * GET /v1/rules, GET|PUT|DELETE /v1/rules/<domain>, behind the bearer
 * token of --admin-token-file (none configured: every one answers 403
 * with how to turn the service on).
 *
 * A PUT's body is checked on the worker first, alone, by the rules loader
 * itself (sl_rules_load_buffer_flags: the same parser and the same
 * "FILE:LINE:COLUMN: what is wrong" as a reload), and its `domain:` must be
 * the one the path names: a bad body is refused there and nothing is
 * touched.  A good one goes to the rules' reload thread (sl_live_change):
 * there, with no other reload running, the domain's file is written
 * atomically (a hidden temporary file in the same directory, fsync,
 * rename, fsync of the directory) and the whole set reloaded; if that set
 * is refused (a conflict with another file), the old bytes are put back.
 * The answer is written when the reload's answer reaches this worker's
 * inbox, so it comes after the new set serves.  DELETE removes the
 * domain's file the same way.
 *
 * A request waiting for its answer may lose its connection: its reply
 * slot is then orphaned (proto.h), and the answer written into it is
 * thrown away by net.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth.h"
#include "config.h"
#include "http_int.h"
#include "live.h"
#include "log.h"
#include "rules.h"
#include "service.h"

#define PREFIX "/v1/rules/"

/* A PUT or DELETE waiting for the reload thread.  Owned by the request
 * until done_change frees it. */
typedef struct admin_op {
    sl_hans a; /* the answer (its slot outlives the connection) */
    int del;   /* DELETE; else PUT */
    char domain[SL_MAX_KEY + 1];
    char *body; /* PUT: the new file's bytes (owned) */
    size_t len;
    /* set on the reload thread by apply_change, read after its answer */
    int status;            /* the HTTP status of a change refused before writing */
    int applied;           /* the files were changed (and maybe put back) */
    char target[PATH_MAX]; /* the domain's file */
    char *old;             /* its bytes before (owned); NULL: it did not exist */
    size_t oldlen;
    mode_t mode; /* of the new file: the old one's, or 0644 */
} admin_op;

/* ---- the token ---------------------------------------------------------------- */

/* 1 when the Authorization header holds "Bearer <token>" with the
 * configured token.  The two tokens are compared as SHA-256 digests with
 * CRYPTO_memcmp, so the time taken says nothing of either's bytes nor of
 * their lengths. */
static int token_ok(const sl_config *cfg, const char *auth)
{
    if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0) return 0;
    const char *t = auth + 7;
    while (*t == ' ') t++;
    unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
    unsigned la = 0, lb = 0;
    if (!EVP_Digest(t, strlen(t), a, &la, EVP_sha256(), NULL) ||
        !EVP_Digest(cfg->admin_token, cfg->admin_token_len, b, &lb, EVP_sha256(), NULL) || la != lb)
        return 0;
    return CRYPTO_memcmp(a, b, la) == 0;
}

/* Lets the request through (0), or answers it (-1): 403 saying how to
 * turn the service on when no token is configured, 401 without the right
 * one.  A wrong token is a failed login of the client (sl_hreq_client_host), counted by
 * auth.c's limiter with every other credential's: past --auth-fail-limit
 * the client's tokens are refused unchecked (401, Retry-After), as the
 * bearer tokens of the other endpoints are. */
static int guard(http_worker *hw, const sl_hreq *req)
{
    if (hw->cfg->admin_token_len == 0) {
        /* 403, not 404: the path is right, so a client should not look
         * for another, nor a cache keep the answer (a 404 is heuristically
         * cacheable, RFC 9110 15.1); a token will not help either: sluiced
         * must be started with one (Prometheus's lifecycle API, when off,
         * answers 403 the same way) */
        sl_http_send_error(&req->a, 403, "Forbidden",
                           "the rules service is off: start sluiced with --admin-token-file "
                           "FILE to turn it on (docs/http.md, The rules service)");
        return -1;
    }
    const char *auth = sl_hreq_header(req, "Authorization");
    sl_auth *au = hw->svc->srv->auth;
    char hb[64];
    const char *host = sl_hreq_client_host(hw->cfg, req, hb, sizeof hb);
    int64_t now = sl_now_ms(), retry = 0;
    if (auth != NULL && au != NULL && sl_auth_may_try(au, host, now, &retry) != SL_AUTH_OK) {
        sl_http_send_blocked(req, hw->cfg, host, retry);
        return -1;
    }
    if (token_ok(hw->cfg, auth)) return 0;
    if (auth != NULL && au != NULL) sl_auth_failed(au, host, "admin-token", 11, now);
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    if (auth == NULL) {
        sl_hhdrs_add(&h, "WWW-Authenticate", "Bearer realm=\"sluiced\"");
        sl_http_send_error_h(
            &req->a, &h, 401, "Unauthorized",
            "the rules service needs \"Authorization: Bearer TOKEN\" (the token of "
            "--admin-token-file)");
    } else {
        sl_hhdrs_add(&h, "WWW-Authenticate", "Bearer realm=\"sluiced\", error=\"invalid_token\"");
        sl_http_send_error_h(&req->a, &h, 401, "Unauthorized", "wrong bearer token");
    }
    return -1;
}

static void method_not_allowed(const sl_hreq *req, const char *allow)
{
    char msg[96];
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_add(&h, "Allow", allow);
    snprintf(msg, sizeof msg, "method not allowed: use %s", allow);
    sl_http_send_error_h(&req->a, &h, 405, "Method Not Allowed", msg);
}

/* ---- files ------------------------------------------------------------------------ */

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads the regular file at path (at most SL_RULES_MAX_FILE bytes) into a
 * new buffer (*out, NUL-terminated, *len bytes) and its mode.  Opened
 * non-blocking, so a FIFO put there cannot hang the caller.  Returns 0 or
 * -1 with errno set (EFBIG: too large; EINVAL: not a regular file). */
static int slurp(const char *path, char **out, size_t *len, mode_t *mode)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) goto fail;
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        goto fail;
    }
    if (st.st_size > (off_t)SL_RULES_MAX_FILE) {
        errno = EFBIG;
        goto fail;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *b = malloc(cap);
    if (b == NULL) goto fail;
    for (;;) {
        if (n + 1 == cap) { /* grown since fstat: bounded all the same */
            if (cap > SL_RULES_MAX_FILE) {
                free(b);
                errno = EFBIG;
                goto fail;
            }
            char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                goto fail;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(b);
            goto fail;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    b[n] = '\0';
    *out = b;
    *len = n;
    if (mode) *mode = st.st_mode & 07777;
    return 0;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* fsyncs the directory holding path, so a rename or unlink in it lasts. */
static int sync_dir_of(const char *path)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Replaces path with data (len bytes, mode) atomically: the file is either
 * the old one or the whole new one, whatever crashes when.  A hidden
 * temporary file (the loader and the watcher skip hidden names) in the
 * same directory, written, fsynced, renamed over path, then the directory
 * fsynced.  A symbolic link at path is replaced by the file.  Returns 0,
 * or -1 with a message in err and path untouched. */
static int write_atomic(const char *path, const char *data, size_t len, mode_t mode, char *err,
                        size_t errlen)
{
    static _Atomic unsigned seq;
    char d[PATH_MAX], b[PATH_MAX], tmp[PATH_MAX + 64];
    snprintf(d, sizeof d, "%s", path);
    snprintf(b, sizeof b, "%s", path);
    int n = snprintf(tmp, sizeof tmp, "%s/.%s.sluiced-%ld-%u.tmp", dirname(d), basename(b),
                     (long)getpid(), seq++);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) goto fail;
        off += (size_t)w;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0) goto fail; /* fchmod: not the umask's */
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    if (sync_dir_of(path) != 0) {
        /* renamed: the new file serves; only its lasting a crash is in doubt */
        sl_log(SL_LOG_WARN, "cannot fsync the rules directory", "file=%s err=%s", sl_logq(path),
               sl_logq(strerror(errno)));
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
    return -1;
}

/* A domain that names its own new file, <domain>.yaml: letters, digits,
 * '_', '-' and '.', not first. */
static int file_name_ok(const char *domain)
{
    if (domain[0] == '\0' || domain[0] == '.' || strlen(domain) > 200) return 0;
    for (const char *p = domain; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return 0;
    return 1;
}

/* Which file holds op->domain, for the set serving (NULL: none) and the
 * rules path: op->target, or op->status and a message in err.  In a
 * directory, the domain's own file, or <domain>.yaml for a new one (which
 * must not exist yet: it would hold another domain, or none that loads).
 * A rules path that is one file holds one domain: only that one may be
 * replaced, and nothing deleted. */
static int find_target(admin_op *op, const sl_rules *serving, const char *path, char *err,
                       size_t errlen)
{
    const sl_rule_domain *d =
        serving ? sl_rules_find_domain(serving, op->domain, strlen(op->domain)) : NULL;
    if (d != NULL && d->nfiles > 1) {
        op->status = 409;
        snprintf(err, errlen,
                 "domain '%s' is merged from %d files (--merge-domains): change them on disk",
                 op->domain, d->nfiles);
        return -1;
    }
    if (!is_dir(path)) {
        if (d == NULL || op->del) {
            op->status = 409;
            if (op->del && d != NULL)
                snprintf(err, errlen,
                         "the rules path %s is one file, holding domain '%s': deleting it would "
                         "leave no rules to load (give --rules a directory to add and remove "
                         "domains)",
                         path, op->domain);
            else
                snprintf(err, errlen,
                         "the rules path %s is one file, holding domain '%s': it cannot hold "
                         "'%s' too (give --rules a directory to add and remove domains)",
                         path,
                         serving && sl_rules_ndomains(serving) ? sl_rules_domain(serving, 0)->name
                                                               : "",
                         op->domain);
            return -1;
        }
        snprintf(op->target, sizeof op->target, "%s", path);
        return 0;
    }
    if (d != NULL) {
        snprintf(op->target, sizeof op->target, "%s", d->file);
        return 0;
    }
    if (op->del) {
        op->status = 404;
        snprintf(err, errlen, "no domain '%s' in the serving rules", op->domain);
        return -1;
    }
    if (!file_name_ok(op->domain)) {
        op->status = 400;
        snprintf(err, errlen,
                 "domain '%s' cannot name a new rules file: use letters, digits, '_', '-' and "
                 "'.' (not first), at most 200 bytes",
                 op->domain);
        return -1;
    }
    size_t pl = strlen(path);
    snprintf(op->target, sizeof op->target, "%s%s%s.yaml", path,
             pl && path[pl - 1] == '/' ? "" : "/", op->domain);
    struct stat st;
    if (lstat(op->target, &st) == 0) {
        op->status = 409;
        snprintf(err, errlen,
                 "%s exists but holds no domain '%s' of the serving rules: move it away or fix "
                 "it first",
                 op->target, op->domain);
        return -1;
    }
    return 0;
}

/* sl_live_edit.apply, on the reload thread: finds the file, keeps its
 * bytes for undo_change, writes or removes it. */
static int apply_change(void *arg, const sl_rules *serving, const char *path, char *err,
                        size_t errlen)
{
    admin_op *op = arg;
    if (find_target(op, serving, path, err, errlen) != 0) return -1;
    op->mode = 0644;
    if (slurp(op->target, &op->old, &op->oldlen, &op->mode) != 0) {
        if (errno != ENOENT || op->del) {
            op->status = 500;
            snprintf(err, errlen, "cannot read %s: %s", op->target,
                     errno == EINVAL ? "not a regular file" : strerror(errno));
            return -1;
        }
        op->old = NULL;
    }
    if (op->del) {
        if (unlink(op->target) != 0) {
            op->status = 500;
            snprintf(err, errlen, "cannot remove %s: %s", op->target, strerror(errno));
            return -1;
        }
        if (sync_dir_of(op->target) != 0)
            sl_log(SL_LOG_WARN, "cannot fsync the rules directory", "file=%s err=%s",
                   sl_logq(op->target), sl_logq(strerror(errno)));
    } else if (write_atomic(op->target, op->body, op->len, op->mode, err, errlen) != 0) {
        op->status = 500;
        return -1;
    }
    op->applied = 1;
    sl_log(SL_LOG_INFO, op->del ? "rules file removed over HTTP" : "rules file written over HTTP",
           "domain=%s file=%s bytes=%zu", sl_logq(op->domain), sl_logq(op->target),
           op->del ? (size_t)0 : op->len);
    return 0;
}

/* sl_live_edit.undo: the set with the change was refused; the file goes
 * back to what it was. */
static void undo_change(void *arg)
{
    admin_op *op = arg;
    char err[SL_LIVE_ERR];
    int rc = op->old ? write_atomic(op->target, op->old, op->oldlen, op->mode, err, sizeof err)
                     : unlink(op->target);
    if (rc != 0 && op->old == NULL) snprintf(err, sizeof err, "%s", strerror(errno));
    if (rc != 0)
        sl_log(SL_LOG_ERROR, "cannot put a rules file back after a refused change",
               "file=%s err=%s", sl_logq(op->target), sl_logq(err));
    else
        sl_log(SL_LOG_INFO, "rules file put back: the change was refused", "file=%s",
               sl_logq(op->target));
}

/* ---- answers that come later ------------------------------------------------------ */

static void op_free(admin_op *op)
{
    free(op->body);
    free(op->old);
    free(op);
}

/* The reload thread's answer, on the worker's thread. */
static void done_change(void *arg, int rc, uint64_t version, const char *err)
{
    admin_op *op = arg;
    const sl_hans *a = &op->a;
    if (rc == 0) {
        sl_http_send_json(a, 200, "OK",
                          json_pack("{s:s,s:s,s:s,s:I}", "domain", op->domain, "file", op->target,
                                    "status", op->del ? "deleted" : "serving", "version",
                                    (json_int_t)version));
    } else if (op->applied) { /* the whole set was refused and the file put back */
        char msg[SL_LIVE_ERR + 128];
        snprintf(msg, sizeof msg, "the rules with this change do not load; nothing changed: %s",
                 err);
        sl_http_send_error(a, 409, "Conflict", msg);
    } else if (op->status != 0) {
        static const char *const reasons[] = {"Bad Request", "Not Found", "Conflict",
                                              "Internal Server Error"};
        int s = op->status;
        sl_http_send_error(a, s, reasons[s == 400 ? 0 : s == 404 ? 1 : s == 409 ? 2 : 3], err);
    } else { /* never asked: the server is stopping */
        sl_http_send_error(a, 503, "Service Unavailable", err);
    }
    op_free(op);
}

/* Hands op to the reload thread; answers at once if it cannot. */
static void ask_change(http_worker *hw, const sl_hreq *req, admin_op *op)
{
    sl_svc_ctx *x = hw->svc;
    op->a = req->a;
    sl_live_edit e = {apply_change, undo_change, op};
    if (x->inbox == NULL || sl_live_change(x->inbox, op->del ? "DELETE /v1/rules" : "PUT /v1/rules",
                                           &e, done_change, op) != 0) {
        sl_http_send_error(&req->a, 503, "Service Unavailable",
                           "the rules cannot be changed now (out of memory, or the server is "
                           "stopping)");
        op_free(op);
    }
}

/* ---- the endpoints ---------------------------------------------------------------- */

/* GET /v1/rules (http_int.h): the rules path, the version serving and its domains. */
void sl_http_rules_list(http_worker *hw, const sl_hreq *req)
{
    if (guard(hw, req) != 0) return;
    if (req->method != SL_HM_GET) {
        method_not_allowed(req, "GET");
        return;
    }
    sl_live *l = hw->svc->srv->live;
    const char *why = NULL;
    sl_rules *r = l ? sl_svc_rules(hw->svc, &why) : NULL;
    json_t *doms = json_array();
    for (int i = 0; i < sl_rules_ndomains(r); i++) {
        const sl_rule_domain *d = sl_rules_domain(r, i);
        json_array_append_new(doms, json_pack("{s:s%,s:s,s:i}", "domain", d->name, d->namelen,
                                              "file", d->file, "files", d->nfiles));
    }
    json_t *o = json_pack("{s:I,s:o,s:b,s:o}", "version", (json_int_t)sl_rules_generation(r),
                          "path", l ? json_string(sl_live_path(l)) : json_null(), "directory",
                          l ? is_dir(sl_live_path(l)) : 0, "domains", doms);
    sl_http_send_json(&req->a, 200, "OK", o);
}

/* The media type of a Content-Type or Accept value, lowercase, without
 * parameters, into buf. */
static const char *media_type(const char *v, char *buf, size_t cap)
{
    size_t n = 0;
    if (v != NULL) {
        while (*v == ' ') v++;
        while (v[n] && v[n] != ';' && v[n] != ',' && v[n] != ' ' && n + 1 < cap) {
            buf[n] = (char)(v[n] >= 'A' && v[n] <= 'Z' ? v[n] + 32 : v[n]);
            n++;
        }
    }
    buf[n] = '\0';
    return buf;
}

static int is_yaml_type(const char *t)
{
    return strcmp(t, "application/yaml") == 0 || strcmp(t, "application/x-yaml") == 0 ||
           strcmp(t, "text/yaml") == 0 || strcmp(t, "text/x-yaml") == 0;
}

/* Whether the Accept header asks for YAML before JSON: its first media type. */
static int wants_yaml(const sl_hreq *req)
{
    char t[64];
    const char *a = sl_hreq_header(req, "Accept");
    return is_yaml_type(media_type(a, t, sizeof t));
}

/* GET /v1/rules/<domain>: the domain's file as it is on disk, with the
 * version serving. */
static void get_domain(http_worker *hw, const sl_hreq *req, const char *domain)
{
    const char *why = NULL;
    sl_rules *r = hw->svc->srv->live ? sl_svc_rules(hw->svc, &why) : NULL;
    const sl_rule_domain *d = r ? sl_rules_find_domain(r, domain, strlen(domain)) : NULL;
    char msg[PATH_MAX + 256];
    if (d == NULL) {
        snprintf(msg, sizeof msg, "no domain '%s' in the serving rules", domain);
        sl_http_send_error(&req->a, 404, "Not Found", msg);
        return;
    }
    if (d->nfiles > 1) {
        snprintf(msg, sizeof msg,
                 "domain '%s' is merged from %d files (--merge-domains): read them on disk", domain,
                 d->nfiles);
        sl_http_send_error(&req->a, 409, "Conflict", msg);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    if (slurp(d->file, &text, &len, NULL) != 0) {
        snprintf(msg, sizeof msg, "cannot read %s: %s", d->file,
                 errno == EINVAL ? "not a regular file" : strerror(errno));
        sl_http_send_error(&req->a, 500, "Internal Server Error", msg);
        return;
    }
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_int(&h, "X-Rules-Version", (long long)sl_rules_generation(r));
    if (wants_yaml(req)) {
        sl_http_send(&req->a, 200, "OK", &h, "application/yaml", text, len);
        free(text);
        return;
    }
    json_t *src = json_stringn(text, len);
    free(text);
    if (src == NULL) {
        snprintf(msg, sizeof msg,
                 "%s is not UTF-8 text: ask for it with \"Accept: application/yaml\"", d->file);
        sl_http_send_error(&req->a, 500, "Internal Server Error", msg);
        return;
    }
    sl_http_send_json_h(&req->a, &h, 200, "OK",
                        json_pack("{s:s,s:s,s:I,s:o}", "domain", domain, "file", d->file, "version",
                                  (json_int_t)sl_rules_generation(r), "source", src));
}

/* The name a body's messages give it: the base name of the file it would
 * replace (or create), as a reload's messages name the file. */
static void body_name(http_worker *hw, const char *domain, char *buf, size_t cap)
{
    const char *why = NULL;
    sl_live *l = hw->svc->srv->live;
    sl_rules *r = sl_svc_rules(hw->svc, &why);
    const sl_rule_domain *d = r ? sl_rules_find_domain(r, domain, strlen(domain)) : NULL;
    char p[PATH_MAX];
    if (d != NULL)
        snprintf(p, sizeof p, "%s", d->file);
    else if (!is_dir(sl_live_path(l)))
        snprintf(p, sizeof p, "%s", sl_live_path(l));
    else
        snprintf(p, sizeof p, "%s.yaml", domain);
    snprintf(buf, cap, "%s", basename(p));
}

/* PUT /v1/rules/<domain>: the body checked here, then written and loaded
 * on the reload thread. */
static void put_domain(http_worker *hw, const sl_hreq *req, const char *domain)
{
    char t[64], name[256], err[SL_LIVE_ERR + 256];
    const char *ct = sl_hreq_header(req, "Content-Type");
    media_type(ct, t, sizeof t);
    int json = strcmp(t, "application/json") == 0;
    if (!json && !is_yaml_type(t)) {
        sl_http_send_error(&req->a, 415, "Unsupported Media Type",
                           "Content-Type must be application/yaml or application/json");
        return;
    }
    size_t len = req->body_len;
    char *body = malloc(len + 1);
    if (body == NULL) {
        sl_http_send_error(&req->a, 500, "Internal Server Error", "out of memory");
        return;
    }
    memcpy(body, req->body, len);
    body[len] = '\0';
    body_name(hw, domain, name, sizeof name);
    if (json) { /* JSON's own syntax first; then the loader reads it as YAML, its superset */
        json_error_t je;
        json_t *j = json_loadb(body, len, 0, &je);
        if (j == NULL) {
            snprintf(err, sizeof err, "%s:%d:%d: invalid JSON: %s", name, je.line < 1 ? 1 : je.line,
                     je.column < 1 ? 1 : je.column, je.text);
            free(body);
            sl_http_send_error(&req->a, 400, "Bad Request", err);
            return;
        }
        json_decref(j);
    }
    const sl_config *c = hw->cfg;
    unsigned flags = (c->merge_domains ? SL_RULES_MERGE_DOMAINS : 0) |
                     (c->count_denied ? SL_RULES_COUNT_DENIED : 0);
    sl_rules *r = sl_rules_load_buffer_flags(name, body, len, flags, err, sizeof err);
    if (r == NULL) {
        free(body);
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    const sl_rule_domain *d = sl_rules_domain(r, 0);
    if (strlen(domain) != d->namelen || memcmp(domain, d->name, d->namelen) != 0) {
        snprintf(err, sizeof err,
                 "%s:%u:%u: the body is domain '%s', the path names domain '%s': they must be "
                 "the same",
                 name, d->line, d->column, d->name, domain);
        sl_rules_unref(r);
        free(body);
        sl_http_send_error(&req->a, 400, "Bad Request", err);
        return;
    }
    sl_rules_unref(r);
    admin_op *op = calloc(1, sizeof *op);
    if (op == NULL) {
        free(body);
        sl_http_send_error(&req->a, 500, "Internal Server Error", "out of memory");
        return;
    }
    snprintf(op->domain, sizeof op->domain, "%s", domain);
    op->body = body;
    op->len = len;
    ask_change(hw, req, op);
}

/* /v1/rules/<domain> (http_int.h): GET, PUT, DELETE.  The domain is URL-decoded. */
static int hexval(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes s's %XX (a '%' without two hex digits after it stays as it is;
 * '+' stays a '+', as in a path) into d (room for strlen(s) + 1); returns
 * the decoded length (a %00 counts: a NUL inside). */
static size_t path_decode(char *d, const char *s)
{
    size_t o = 0;
    for (; *s != '\0'; s++) {
        int h = s[0] == '%' ? hexval(s[1]) : -1, l = h >= 0 ? hexval(s[2]) : -1;
        if (l >= 0) {
            d[o++] = (char)(h * 16 + l);
            s += 2;
        } else {
            d[o++] = *s;
        }
    }
    d[o] = '\0';
    return o;
}

void sl_http_rules_domain(http_worker *hw, const sl_hreq *req)
{
    const char *path = req->path;
    if (guard(hw, req) != 0) return;
    unsigned m = req->method;
    if (m != SL_HM_GET && m != SL_HM_PUT && m != SL_HM_DELETE) {
        method_not_allowed(req, "GET, PUT, DELETE");
        return;
    }
    char dec[SL_HTTP_MAX_URI + 1], domain[SL_MAX_KEY + 1];
    size_t n = path_decode(dec, path + strlen(PREFIX));
    char qb[80], msg[256];
    if (n == 0 || n > SL_MAX_KEY || strlen(dec) != n || strchr(dec, '/') != NULL) {
        snprintf(msg, sizeof msg,
                 "no such path: %s (a domain is 1 to %d bytes, without '/' or NUL)",
                 sl__quote(qb, sizeof qb, path, strlen(path)), SL_MAX_KEY);
        sl_http_send_error(&req->a, 404, "Not Found", msg);
        return;
    }
    memcpy(domain, dec, n + 1);
    if (hw->svc->srv->live == NULL && m != SL_HM_GET) {
        sl_http_send_error(&req->a, 409, "Conflict",
                           "sluiced was started without --rules: there is no rules path to "
                           "change");
        return;
    }
    if (m == SL_HM_GET) {
        get_domain(hw, req, domain);
    } else if (m == SL_HM_PUT) {
        put_domain(hw, req, domain);
    } else {
        admin_op *op = calloc(1, sizeof *op);
        if (op == NULL) {
            sl_http_send_error(&req->a, 500, "Internal Server Error", "out of memory");
        } else {
            op->del = 1;
            snprintf(op->domain, sizeof op->domain, "%s", domain);
            ask_change(hw, req, op);
        }
    }
}
