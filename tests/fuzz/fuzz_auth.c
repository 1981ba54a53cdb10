/*
 * fuzz_auth.c -- libFuzzer target for the AUTH / HELLO path: arbitrary
 * bytes run through the RESP module (src/proto/resp/resp_commands.c) on a
 * fresh detached connection of a server with a password file and a users
 * file (src/server/auth.c), one command at a time, each checked against a
 * small model of who the connection is:
 *   - it starts logged out; it becomes user U only by an AUTH or HELLO 2|3
 *     AUTH naming U with one of U's passwords while its address has fewer
 *     than FAILS failures, and a failed login leaves it as it was
 *     (sl_resp_conn_user is compared with the model after every command);
 *   - it starts in RESP2; only a HELLO 2 or HELLO 3 that succeeds (a valid
 *     login if it has AUTH, logged in, a valid SETNAME if any) switches
 *     it, and its reply is then a RESP3 map or a RESP2 array of 14
 *     (sl_resp_conn_proto is compared with the model after every command);
 *   - logged out, every command but AUTH, HELLO and QUIT answers exactly
 *     "-NOAUTH Authentication required.";
 *   - logged in, a command outside the user's groups answers "-NOPERM ...",
 *     and a NOPERM answers only such a command;
 *   - a wrong login answers exactly WRONGPASS, and past FAILS failures a
 *     login answers "too many failed logins" whatever the password;
 *   - no reply to a non-admin user holds a file path (the config and
 *     snapshot paths below) unless the input itself sent that text earlier
 *     (a connection name CLIENT INFO shows back), and every command gets a
 *     reply;
 *   - inside MULTI a command changes nothing: it answers +QUEUED, or an
 *     error (unknown, NOPERM, arity) after which EXEC answers EXECABORT;
 *     EXEC answers "*N" with N the commands queued, then each queued
 *     command's reply, held to every promise above as if it had been sent
 *     then (an AUTH or HELLO queued logs in or switches at EXEC, not
 *     before).
 * Any broken promise aborts, so libFuzzer keeps the input.
 *
 * Each input gets a server of its own (users, stores, service context),
 * freed after it: inputs do not depend on each other, and libFuzzer's leak
 * check sees every allocation an input leaves behind.  (A store kept alive
 * across inputs would also trip it falsely: a sliding log's buffer pointer
 * sits unaligned inside its record, where LeakSanitizer does not look.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "backend_local.h"
#include "net.h"
#include "resp.h"
#include "resp_commands.h"
#include "service.h"

#define FAILS      5 /* --auth-fail-limit FAILS/1s */
#define SECRET_DIR "/secret-dir-of-the-fuzzer"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_config cfg;
static sl_srv srv;
static sl_svc_ctx svc;
static sl_buf sink;
static sl_resp_cmd cmd, qcmd;
static const int64_t now = 1000000000000;
static char pass_file[] = "/tmp/fuzz-auth-pass-XXXXXX",
            users_file[] = "/tmp/fuzz-auth-users-XXXXXX";

/* The model's users: the files below say the same. */
static const struct {
    const char *name, *pass, *pass2;
    unsigned groups;
    int on;
} users[] = {
    {"default", "pw", NULL, SL_AUTH_ALL, 1}, {"dec", "d", NULL, SL_AUTH_DECIDING, 1},
    {"rd", "r", "r2", SL_AUTH_READING, 1},   {"adm", "a", NULL, SL_AUTH_ADMIN, 1},
    {"off", "o", NULL, SL_AUTH_ALL, 0},
};
#define NUSERS (sizeof users / sizeof users[0])

static void die(const char *why)
{
    fprintf(stderr, "fuzz_auth: %s\n", why);
    __builtin_trap();
}

static void write_file(char *path, const char *text)
{
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die("temp file");
    close(fd);
}

static void remove_files(void)
{
    unlink(pass_file);
    unlink(users_file);
}

/* Once: the two files (removed at exit). */
static void setup_files(void)
{
    char text[512], hex[2 * SL_AUTH_DIGEST + 1];
    unsigned char d[SL_AUTH_DIGEST];
    sl__auth_sha256("r2", 2, d);
    for (int i = 0; i < SL_AUTH_DIGEST; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    write_file(pass_file, "pw\n");
    snprintf(text, sizeof text,
             "user dec >d +deciding\nuser rd >r #%s +reading\nuser adm >a +admin\n"
             "user off off >o +all\n",
             hex);
    write_file(users_file, text);
    atexit(remove_files);
}

/* Per input: a server with those users and empty stores. */
static void setup(void)
{
    char err[512];
    memset(&cfg, 0, sizeof cfg);
    memset(&srv, 0, sizeof srv);
    sl_auth_opts o = {pass_file, users_file, FAILS, 1000};
    srv.auth = sl_auth_new(&o, err, sizeof err);
    if (srv.auth == NULL) die(err);
    cfg.max_command = 1 << 20;
    cfg.auth_fail_max = FAILS;
    cfg.auth_fail_window_ms = 1000;
    strcpy(cfg.config_file, SECRET_DIR "/sluiced.conf");
    strcpy(cfg.snapshot, SECRET_DIR "/state.snap");
    srv.cfg = &cfg;
    sl_store_opts so = {0};
    so.max_bytes = 64u << 20;
    srv.store = sl_store_new(&so, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0 ||
        sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0)
        die("setup");
}

static void teardown(void)
{
    sl_svc_ctx_done(&svc);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    sl_auth_free(srv.auth);
    free(sink.p);
    memset(&sink, 0, sizeof sink);
}

static int is(const sl_resp_arg *a, const char *lit)
{
    size_t n = strlen(lit);
    return a->len == n && strncasecmp(a->p, lit, n) == 0;
}

static int same(const sl_resp_arg *a, const char *lit)
{
    return lit != NULL && a->len == strlen(lit) && memcmp(a->p, lit, a->len) == 0;
}

/* The user u names with password p, or -1. */
static int check(const sl_resp_arg *u, const sl_resp_arg *p)
{
    for (size_t i = 0; i < NUSERS; i++)
        if (same(u, users[i].name))
            return users[i].on && (same(p, users[i].pass) || same(p, users[i].pass2)) ? (int)i : -1;
    return -1;
}

/* Would sluiced keep a as a connection's name (HELLO ... SETNAME)? */
static int name_ok(const sl_resp_arg *a)
{
    for (size_t i = 0; i < a->len; i++)
        if (a->p[i] < '!' || a->p[i] > '~') return 0;
    return a->len <= SL_RESP_MAX_NAME;
}

/* The group a command needs (0: any logged-in user); -1 unknown. */
static int group_of(const sl_resp_cmd *c)
{
    const sl_resp_arg *n = &c->argv[0];
    static const char *const deciding[] = {"rl.allow",   "rl.check",   "rl.wait",   "rl.acquire",
                                           "rl.release", "rl.reserve", "rl.settle"};
    for (size_t i = 0; i < sizeof deciding / sizeof deciding[0]; i++)
        if (is(n, deciding[i])) return SL_AUTH_DECIDING;
    if (is(n, "rl.rules"))
        return c->argc >= 2 && is(&c->argv[1], "reload") ? SL_AUTH_ADMIN : SL_AUTH_READING;
    if (is(n, "rl.peek") || is(n, "info") || is(n, "command")) return SL_AUTH_READING;
    if (is(n, "rl.reset")) return SL_AUTH_ADMIN;
    static const char *const any[] = {"ping",    "echo",   "quit",   "hello", "auth",
                                      "client",  "select", "config", "multi", "exec",
                                      "discard", "watch",  "unwatch"};
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (is(n, any[i])) return 0;
    return -1;
}

static int starts(const char *r, size_t n, const char *lit)
{
    return n >= strlen(lit) && memcmp(r, lit, strlen(lit)) == 0;
}

static const char noauth[] = "-NOAUTH Authentication required.\r\n";
static const char wrongpass[] =
    "-WRONGPASS invalid username-password pair or user is disabled.\r\n";

/* The model: who the connection is, its failed logins, its protocol, and
 * the transaction it queues (MULTI: the commands, as offsets into the
 * input, and whether one failed to queue). */
static int who, fails, proto, multi, doomed, nqueued;
static size_t qoff[SL_RESP_MAX_QUEUED], qlen[SL_RESP_MAX_QUEUED];

/* Command c, run now (sent outside MULTI, or run by EXEC), answered
 * r[0..n): held to the promises at the top; buf[0..off) is the input so
 * far (for the leak check).  last: no command ran after it, so conn is as
 * c left it (not so for the commands of an EXEC but its last). */
static void check_run(const sl_resp_cmd *c, const char *r, size_t n, const char *buf, size_t off,
                      sl_conn *conn, int last)
{
    int g = group_of(c);
    const sl_resp_arg *a = c->argv;
    int is_auth = is(&a[0], "auth"), is_hello = is(&a[0], "hello");
    int was = who;

    /* what the model expects of a login */
    const sl_resp_arg *u = NULL, *p = NULL, *name = NULL;
    int syntax_ok = 1, hello_ver = 0;
    if (is_auth && c->argc >= 2 && c->argc <= 3) {
        static const sl_resp_arg dflt = {"default", 7};
        u = c->argc == 2 ? &dflt : &a[1];
        p = &a[c->argc - 1];
    } else if (is_hello && (c->argc < 2 || same(&a[1], "2") || same(&a[1], "3"))) {
        hello_ver = c->argc < 2 ? proto : a[1].p[0] - '0';
        for (int i = 2; i < c->argc && syntax_ok; i++) {
            int more = c->argc - 1 - i;
            if (is(&a[i], "auth") && more >= 2) {
                u = &a[i + 1];
                p = &a[i + 2];
                i += 2;
            } else if (is(&a[i], "setname") && more >= 1) {
                name = &a[++i];
            } else {
                syntax_ok = 0;
            }
        }
        if (!syntax_ok) u = p = NULL, hello_ver = 0;
    }
    int login_ok = u == NULL;
    if (u != NULL) {
        if (fails >= FAILS) {
            if (!starts(r, n, "-ERR too many failed logins from")) die("not blocked");
        } else if (check(u, p) >= 0) {
            login_ok = 1;
            who = check(u, p);
            if (is_auth && !(n == 5 && memcmp(r, "+OK\r\n", 5) == 0)) die("AUTH not +OK");
        } else {
            fails++;
            if (n != sizeof wrongpass - 1 || memcmp(r, wrongpass, n) != 0) die("not WRONGPASS");
        }
    }
    const sl_auth_user *got = sl_resp_conn_user(conn);
    if (last && (who < 0 ? got != NULL : got == NULL || strcmp(got->name, users[who].name) != 0))
        die("the connection is not who the model says");
    if (hello_ver != 0 && login_ok && who >= 0 && (name == NULL || name_ok(name))) {
        proto = hello_ver;
        if (!(proto == SL_RESP3 ? starts(r, n, "%7\r\n") : starts(r, n, "*14\r\n")))
            die("a HELLO that worked did not answer in its protocol");
    }
    if (last && sl_resp_conn_proto(conn) != proto)
        die("the connection's protocol is not the model's");

    if (was < 0 && !is_auth && !is_hello && !is(&a[0], "quit")) {
        if (n != sizeof noauth - 1 || memcmp(r, noauth, n) != 0) die("not NOAUTH");
    } else if (was >= 0 && g > 0) {
        int allowed = (users[was].groups & (unsigned)g) != 0;
        if (allowed == starts(r, n, "-NOPERM")) die("NOPERM where allowed, or not where not");
    }
    if (starts(r, n, "-NOPERM") && !(was >= 0 && g > 0)) die("NOPERM out of place");
    /* an echo of what the input itself sent (a command, or a name it set
     * earlier that CLIENT INFO shows back) is not a leak */
    if ((was < 0 || !(users[was].groups & SL_AUTH_ADMIN)) && memmem(r, n, SECRET_DIR, 10) &&
        !memmem(buf, off, SECRET_DIR, 10))
        die("a path shown to a non-admin");
}

/* The length of the one reply at r[0..n) (RESP2 or RESP3), or 0 if it is
 * not whole there.  For EXEC's array: each element checked on its own. */
static size_t reply_len(const char *r, size_t n)
{
    const char *e = memmem(r, n, "\r\n", 2);
    if (n == 0 || e == NULL) return 0;
    size_t pos = (size_t)(e - r) + 2;
    long long v = strtoll(r + 1, NULL, 10);
    switch (r[0]) {
    case '$':
    case '=':
        if (v < 0) return pos;
        return n - pos >= (size_t)v + 2 ? pos + (size_t)v + 2 : 0;
    case '*':
    case '~':
    case '%':
        if (v < 0) return pos;
        for (long long i = 0; i < (r[0] == '%' ? 2 * v : v); i++) {
            size_t k = reply_len(r + pos, n - pos);
            if (k == 0) return 0;
            pos += k;
        }
        return pos;
    default: return pos;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setup_files();
        ready = 1;
    }
    setup();
    sl_conn *c = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, &sink);
    if (c == NULL) die("out of memory");
    who = -1, fails = 0, proto = SL_RESP2, multi = 0, doomed = 0, nqueued = 0;
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        size_t used = 0, fed = 0;
        const char *perr = NULL;
        int rc = sl_resp_parse(buf + off, size - off, 1 << 20, &cmd, &used, &perr);
        if (rc != SL_RESP_OK) break; /* incomplete, or a protocol error: not this target's */
        sink.len = 0;
        int st = sl_conn_detached_feed(c, buf + off, used, now, &fed);
        if (fed != used) die("a whole command was not consumed");
        off += used;
        if (cmd.argc == 0) {
            if (sink.len != 0) die("a reply to an empty line");
            continue;
        }
        const char *r = sink.p;
        size_t n = sink.len;
        if (n == 0 || !strchr("+-:$*%_=~", r[0])) die("no reply");
        const sl_resp_arg *a0 = &cmd.argv[0];
        int noqueue = is(a0, "multi") || is(a0, "exec") || is(a0, "discard") || is(a0, "watch") ||
                      is(a0, "quit");
        if (multi && !noqueue) { /* queued, or refused: nothing changes */
            int g = group_of(&cmd), forbidden = g > 0 && !(users[who].groups & (unsigned)g);
            int refused; /* the refusal this command may get, if any */
            if (g < 0)
                refused = starts(r, n, "-ERR unknown command");
            else if (forbidden)
                refused = starts(r, n, "-NOPERM");
            else
                refused = starts(r, n, "-ERR wrong number of arguments") ||
                          starts(r, n, "-ERR transaction too");
            if (n == 9 && memcmp(r, "+QUEUED\r\n", 9) == 0) {
                if (g < 0 || forbidden) die("queued an unknown or forbidden command");
                if (!doomed) {
                    qoff[nqueued] = off - used;
                    qlen[nqueued++] = used;
                }
            } else if (refused) {
                doomed = 1;
                nqueued = 0;
            } else {
                die("inside MULTI: neither +QUEUED nor a refusal");
            }
            const sl_auth_user *got = sl_resp_conn_user(c);
            if (got == NULL || strcmp(got->name, users[who].name) != 0 ||
                sl_resp_conn_proto(c) != proto)
                die("a queued command changed the connection");
            continue;
        }
        if (multi && is(a0, "exec") && cmd.argc == 1) {
            multi = 0;
            if (doomed) {
                static const char abort[] =
                    "-EXECABORT Transaction discarded because of previous errors.\r\n";
                if (n != sizeof abort - 1 || memcmp(r, abort, n) != 0) die("not EXECABORT");
                doomed = 0;
                continue;
            }
            char head[32];
            int hl = snprintf(head, sizeof head, "*%d\r\n", nqueued);
            if (!starts(r, n, head)) die("EXEC's array does not count the commands queued");
            size_t pos = (size_t)hl;
            for (int i = 0; i < nqueued; i++) { /* each as if run alone */
                size_t u = 0;
                const char *qe = NULL;
                if (sl_resp_parse(buf + qoff[i], qlen[i], 1 << 20, &qcmd, &u, &qe) != SL_RESP_OK)
                    die("a queued command does not parse");
                size_t k = reply_len(r + pos, n - pos);
                if (k == 0) die("EXEC's array holds fewer replies than commands");
                check_run(&qcmd, r + pos, k, buf, off, c, i == nqueued - 1);
                pos += k;
            }
            if (pos != n) die("EXEC's array holds more than its replies");
            nqueued = 0;
            continue;
        }
        check_run(&cmd, r, n, buf, off, c, 1);
        if (is(a0, "multi") && n == 5 && memcmp(r, "+OK\r\n", 5) == 0) {
            if (multi || who < 0) die("MULTI nested, or before a login");
            multi = 1;
        }
        if (multi && is(a0, "discard") && n == 5 && memcmp(r, "+OK\r\n", 5) == 0)
            multi = doomed = nqueued = 0;
        if (multi && starts(r, n, "-ERR wrong number")) /* MULTI x, EXEC x, WATCH...: as Redis */
            doomed = 1, nqueued = 0;
        if (st == SL_PROTO_CLOSE) break; /* QUIT */
    }
    sl_conn_detached_free(c);
    teardown();
    return 0;
}
