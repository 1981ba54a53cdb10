/*
 * test_backend.c -- the backend conformance suite: what backend.h promises,
 * written once and run on every backend of the table backends[]:
 *
 *   local   the local backend (src/backend/backend_local.c), inline;
 *   delay   tests/support/backend_delay.c over the local one: every request
 *           decided at once, answered later from a timer on the channel's
 *           event_base, out of submission order;
 *   redis-module  the same on a second redis-server that has build/sluice.so
 *           loaded (trust-client-time yes, max-client-skew 0, max-memory 0:
 *           no bound, as the local rows' store): the backend
 *           sends the module's commands (RL.ALLOW, RL.PEEK, RL.DECIDEALL,
 *           RL.CHECKPLAN, RL.RESET) instead of the script's, and answers
 *           exactly also past the script's range (SLUICE_MODULE: the
 *           module's path; default: sluice.so next to tests/);
 *   redis   the Redis backend (src/backend/backend_redis.c) on a
 *           redis-server this test starts on a free loopback port (stopped
 *           by its PID at exit), flushed for each fixture.  PROVISIONAL
 *           until the full script (src/backend/redis/sluice.lua, helper
 *           rscript) is merged: only the vector files of fixed-window run
 *           (bkind.fixed_window_only) and only the vectors part
 *           (bkind.parts); the lead enables the rest at the merge.
 *
 * Requests are submitted in windows of several at a time (each with its own
 * sl_breq, which lives until its callback) and the channel's event_base is
 * run until every one has completed; each callback must run exactly once.
 * The key buffer a request names is overwritten right after submit (a
 * backend may read it only during the call).  Per backend:
 *
 *   vectors     every line of $SLUICE_SPEC_DIR/vectors/ as SL_BOP_DECIDE,
 *               all six fields exact (fails when the folder is missing);
 *   model       random traces of DECIDE, PEEK, FORGET and invalid requests
 *               for every algorithm (and all of them on one store) against
 *               the reference model (tests/model.h): random keys (binary,
 *               512 bytes), costs (0, the capacity, above it), times that
 *               also run backwards; FORGET restarts the model of the keys
 *               it names and must say whether state existed;
 *   decide_all  SL_BOP_DECIDE_ALL all-or-none: a batch one request of which
 *               is denied charges none (checked with PEEK), and random
 *               batches against the model;
 *   check       RL.CHECK planned with sl_check_plan_make, executed as
 *               SL_BOP_CHECK, reported with sl_check_report, compared with
 *               sl_rules_check on a fresh local store given the same
 *               sequence (the synchronous reference path); 30 % of them
 *               with per-descriptor costs (0 to 2) and Lyft's counting
 *               asked per request, as the gRPC front asks, against
 *               sl__local_check_exec there;
 *   errors      bad input completes with its rc < 0 and a message, and
 *               changes nothing;
 *   stats       the keys count after N distinct keys, peeks and forgets.
 *
 * SLUICE_SEED=N changes the seeds of the random parts.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "backend.h"
#include "backend_local.h"
#include "backend_redis.h"
#include "check.h"
#include "model.h"
#include "rules.h"
#include "sluice.h"
#include "support/backend_delay.h"
#include "support/rng.h"
#include "support/vectors.h"

#define WAIT_SECONDS 60   /* a window of requests must complete within this */
#define MAX_WINDOW   48   /* requests in flight at once */
#define DELAY_MAX_US 1000 /* the delay backend's largest delay */

__extension__ typedef __int128 i128;

/* ---- the backends under test ---------------------------------------------- */

typedef struct bkind {
    const char *name;
    int delayed;           /* wrap the local backend in backend_delay */
    int redis;             /* the Redis backend instead of the local one: 1, or 2 with
                              its deny cache on, or 3 on a Redis with the module */
    unsigned parts;        /* 1 << index in parts[] of the parts to run; 0 = all */
    int fixed_window_only; /* vectors: only the files of fixed-window */
    int cluster;           /* redis: a Redis Cluster, SLUICE_REDIS_CLUSTER's URL (the row
                              exists only when it is set: tests/e2e/test_cluster.py) */
} bkind;

#define PART_VECTORS 1u /* parts[0] */

static const bkind backends[] = {
    {"local", 0, 0, 0, 0, 0},
    {"delay", 1, 0, 0, 0, 0},
    {"redis", 0, 1, 0, 0, 0}, /* deny cache off: every request decided by the script */
    {"redis-deny-cache", 0, 2, 0, 0, 0},
    {"redis-module", 0, 3, 0, 0, 0}, /* the module's commands: exact past the script's range */
    /* every part but decide_all, whose batches hold keys of several slots:
     * all-or-none is one script call, in one slot, so a cluster refuses
     * them (docs/fleet.md, "Redis Cluster") */
    {"redis-cluster", 0, 1, ~(1u << 2), 0, 1},
};
#define NBACKENDS (sizeof backends / sizeof backends[0])

/* The row on a Redis with the module loaded. */
#define MODULE_ROW(k) ((k)->redis == 3)

/* One backend over a fresh store, with its channel on a fresh event_base. */
typedef struct fx {
    const bkind *k;
    sl_store *store;
    sl_backend *local; /* the local backend over store */
    sl_backend *b;     /* the backend under test: local, or delay over local */
    struct event_base *loop;
    sl_bchan *ch;
    long completed;    /* callbacks run, in order: each request's seq */
    long out_of_order; /* requests completed before one submitted earlier */
    long inline_done;  /* requests completed before submit returned */
} fx;

/* ---- a redis-server for the redis row --------------------------------------- */

static pid_t redis_pids[2]; /* [1]: the one with the module */
static int redis_ports[2];
static int redis_which; /* the fixture's: redis_cmd and DBSIZE go there */
#define redis_pid  redis_pids[redis_which]
#define redis_port redis_ports[redis_which]
static char module_path[4096];

/* The redis-cluster row's masters: SLUICE_REDIS_CLUSTER's host:port list. */
static int cluster_port[16], ncluster;

static double mono_s(void);

/* Each redis-server's output goes to a log of its own (redis_logs[i], in
 * $TMPDIR or /tmp), read for reports: after every case that used it (a
 * report fails the case during which it appeared) and when it stops.  A
 * log is removed once its server stopped cleanly, else kept and named. */
static char redis_logs[2][256];
static long redis_scanned[2]; /* bytes of the log already read for reports */
static int redis_keep[2];     /* a report was found in it: the log is kept */

/* What a sanitizer (in the sanitized module) or Redis itself writes when
 * something is wrong: as tests/e2e/harness.py's REDIS_MARKS. */
static const char *const REDIS_MARKS[] = {
    "ERROR: AddressSanitizer",  "ERROR: LeakSanitizer",   "runtime error:",
    "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer", "REDIS BUG REPORT",
    "crashed by signal",
};

/* Reads what redis-server i wrote to its log since the last call; returns
 * the first mark of REDIS_MARKS found in it (NULL: none), and prints that
 * part of the log (up to 4 KB) to stderr when it finds one.  The last bytes
 * read, fewer than a mark's length, are read again next time: a mark the
 * server was writing is found whole then, and none is found twice. */
static const char *redis_new_report(int i)
{
    FILE *f = fopen(redis_logs[i], "rb");
    if (f == NULL) return NULL;
    size_t longest = 0;
    for (size_t m = 0; m < sizeof REDIS_MARKS / sizeof *REDIS_MARKS; m++)
        if (strlen(REDIS_MARKS[m]) > longest) longest = strlen(REDIS_MARKS[m]);
    const char *found = NULL;
    long end = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (end > redis_scanned[i] && fseek(f, redis_scanned[i], SEEK_SET) == 0) {
        size_t want = (size_t)(end - redis_scanned[i]);
        char *buf = malloc(want + 1);
        assert_non_null(buf);
        size_t n = fread(buf, 1, want, f);
        buf[n] = '\0';
        for (size_t m = 0; found == NULL && m < sizeof REDIS_MARKS / sizeof *REDIS_MARKS; m++) {
            const char *at = memmem(buf, n, REDIS_MARKS[m], strlen(REDIS_MARKS[m]));
            if (at == NULL) continue;
            found = REDIS_MARKS[m];
            fprintf(stderr, "--- %s, from its report:\n%.4096s\n", redis_logs[i], at);
        }
        if (found != NULL) {
            redis_scanned[i] += (long)n;
            redis_keep[i] = 1;
        } else if (n >= longest)
            redis_scanned[i] += (long)(n - (longest - 1));
        free(buf);
    }
    fclose(f);
    return found;
}

/* Stops redis-server i by its PID: SIGTERM, waits up to STOP_SECONDS,
 * then SIGKILL.  Writes into why (why_len bytes) what went wrong -- a
 * forced kill, an exit status other than 0, a report in its log -- and
 * returns -1, or 0 when it stopped cleanly. */
#define STOP_SECONDS 60
static int redis_stop_one(int i, char *why, size_t why_len)
{
    pid_t pid = redis_pids[i];
    int st = 0, rc = 0;
    why[0] = '\0';
    if (pid <= 0) return 0;
    redis_pids[i] = 0;
    kill(pid, SIGTERM);
    double until = mono_s() + STOP_SECONDS;
    pid_t w;
    while ((w = waitpid(pid, &st, WNOHANG)) == 0 && mono_s() < until) usleep(20000);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        snprintf(why, why_len, "did not exit within %ds of SIGTERM: killed", STOP_SECONDS);
        rc = -1;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(why, why_len, "%s %d after SIGTERM", WIFSIGNALED(st) ? "signal" : "exit status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        rc = -1;
    }
    const char *mark = redis_new_report(i);
    if (mark != NULL) {
        size_t len = strlen(why);
        snprintf(why + len, why_len - len, "%s'%s' in its log", len ? "; " : "", mark);
        rc = -1;
    }
    if (rc != 0) {
        fprintf(stderr, "redis-server (pid %d, log kept: %s): %s\n", (int)pid, redis_logs[i], why);
    } else if (!redis_keep[i]) {
        unlink(redis_logs[i]);
    }
    return rc;
}

/* At exit, for a run that did not reach redis_servers_stop_cleanly (a
 * filter, a failed case's longjmp out of main is not one): stops what is
 * left; a problem makes the exit status 1. */
static void redis_stop(void)
{
    int bad = 0;
    char why[256];
    for (int i = 0; i < 2; i++) bad |= redis_stop_one(i, why, sizeof why) != 0;
    if (bad) _exit(1);
}

/* After a case on redis-server i: it is still running, and nothing new in
 * its log is a report. */
static void redis_after_case(int i)
{
    if (redis_pids[i] <= 0) return;
    int st;
    if (waitpid(redis_pids[i], &st, WNOHANG) == redis_pids[i]) {
        redis_pids[i] = 0;
        redis_keep[i] = 1;
        redis_new_report(i);
        fail_msg("redis-server died during the case (%s %d); log kept: %s",
                 WIFSIGNALED(st) ? "signal" : "exit status",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), redis_logs[i]);
    }
    const char *mark = redis_new_report(i);
    if (mark != NULL) fail_msg("redis-server: '%s' in its log, kept: %s", mark, redis_logs[i]);
}

/* In the child about to exec the module's redis-server: a sanitized build's
 * module needs its runtime preloaded into Debian's redis-server, leak checks
 * off (Redis's allocations are not ours), as tests/e2e/test_module.py does. */
static void module_env(void)
{
    const char *lib = strstr(module_path, "/asan/")   ? "libasan.so"
                      : strstr(module_path, "/tsan/") ? "libtsan.so"
                                                      : NULL;
    if (lib == NULL) return;
    char cmd[64], path[4096] = "";
    snprintf(cmd, sizeof cmd, "gcc -print-file-name=%s", lib);
    FILE *p = popen(cmd, "r");
    if (p == NULL || fgets(path, sizeof path, p) == NULL) _exit(126);
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
    setenv("LD_PRELOAD", path, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    setenv("TSAN_OPTIONS", "report_signal_unsafe=0", 1);
}

/* A command on a fresh connection to the redis-server on port: 0 when it
 * answered without an error. */
static int redis_cmd_at(int port, const char *cmd)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (c) redisFree(c);
        return -1;
    }
    redisReply *x = redisCommand(c, cmd);
    int rc = x != NULL && x->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (x) freeReplyObject(x);
    redisFree(c);
    return rc;
}

/* A command to the test's redis-server. */
static int redis_cmd(const char *cmd) { return redis_cmd_at(redis_port, cmd); }

/* DBSIZE of the redis-server on port. */
static uint64_t redis_dbsize_at(int port)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) fail_msg("redis: cannot connect for DBSIZE");
    redisReply *x = redisCommand(c, "DBSIZE");
    if (x == NULL || x->type != REDIS_REPLY_INTEGER) fail_msg("redis: DBSIZE failed");
    uint64_t n = (uint64_t)x->integer;
    freeReplyObject(x);
    redisFree(c);
    return n;
}

/* DBSIZE of the test's redis-server, or the sum of the cluster's masters'. */
static uint64_t redis_dbsize(const bkind *k)
{
    uint64_t n = 0;
    if (!k->cluster) return redis_dbsize_at(redis_port);
    for (int i = 0; i < ncluster; i++) n += redis_dbsize_at(cluster_port[i]);
    return n;
}

/* The cluster's masters from SLUICE_REDIS_CLUSTER
 * ("redis-cluster://127.0.0.1:P1,127.0.0.1:P2,..."), every one flushed. */
static const char *cluster_ready(void)
{
    const char *url = getenv("SLUICE_REDIS_CLUSTER");
    if (url == NULL || strncmp(url, "redis-cluster://", 16) != 0)
        fail_msg("redis-cluster: SLUICE_REDIS_CLUSTER is not a redis-cluster:// URL");
    ncluster = 0;
    for (const char *p = url + 16; p != NULL && *p != '\0' && ncluster < 16;) {
        const char *colon = strchr(p, ':');
        if (colon == NULL) fail_msg("redis-cluster: no :port in %s", url);
        cluster_port[ncluster++] = atoi(colon + 1);
        p = strchr(colon, ',');
        if (p != NULL) p++;
    }
    for (int i = 0; i < ncluster; i++)
        if (redis_cmd_at(cluster_port[i], "FLUSHALL") != 0)
            fail_msg("redis-cluster: FLUSHALL of 127.0.0.1:%d failed", cluster_port[i]);
    return url;
}

/* Starts the redis-server once (a free port: bound, then closed, then
 * given to redis-server; tried again on another if that fails), flushes it
 * for every fixture. */
static void redis_ready(void)
{
    for (int attempt = 0; redis_pid == 0 && attempt < 5; attempt++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        assert_true(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
                    getsockname(s, (struct sockaddr *)&a, &al) == 0);
        close(s);
        redis_port = ntohs(a.sin_port);
        char port[16];
        snprintf(port, sizeof port, "%d", redis_port);
        if (redis_logs[redis_which][0] == '\0') {
            const char *tmp = getenv("TMPDIR");
            snprintf(redis_logs[redis_which], sizeof redis_logs[0],
                     "%s/sluice-test-backend-redis%s-XXXXXX", tmp && *tmp ? tmp : "/tmp",
                     redis_which ? "-module" : "");
            int lfd = mkstemp(redis_logs[redis_which]);
            assert_true(lfd >= 0);
            close(lfd);
        }
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int out = open(redis_logs[redis_which], O_WRONLY | O_APPEND);
            if (out >= 0) dup2(out, 1), dup2(out, 2);
            if (redis_which == 1) {
                module_env();
                execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                       "--save", "", "--appendonly", "no", "--loadmodule", module_path,
                       "trust-client-time", "yes", "max-client-skew", "0", "max-memory", "0",
                       (char *)NULL);
            }
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save",
                   "", "--appendonly", "no", (char *)NULL);
            _exit(127);
        }
        double until = mono_s() + 20;
        while (mono_s() < until && redis_cmd("PING") != 0 && waitpid(pid, NULL, WNOHANG) == 0)
            usleep(20000);
        if (redis_cmd("PING") == 0) {
            redis_pid = pid;
            static int registered;
            if (!registered++) atexit(redis_stop);
        } else {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
    }
    if (redis_pid == 0) {
        redis_keep[redis_which] = 1;
        redis_new_report(redis_which);
        fail_msg("redis: cannot start redis-server (its log, kept: %s)", redis_logs[redis_which]);
    }
    if (redis_cmd("FLUSHALL") != 0) fail_msg("redis: FLUSHALL failed");
}

static fx *fx_new(const bkind *k, unsigned locking)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->k = k;
    sl_store_opts so = {.locking = locking};
    f->store = sl_store_new(&so, NULL);
    assert_non_null(f->store);
    f->local = sl_backend_local_new(f->store);
    assert_non_null(f->local);
    f->b = f->local;
    if (k->redis) {
        char url[1024], err[512];
        if (k->cluster) {
            snprintf(url, sizeof url, "%s", cluster_ready());
        } else {
            redis_which = MODULE_ROW(k);
            redis_ready();
            snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis_port);
        }
        /* generous: the suite asserts answers, never the time they take */
        sl_redis_opts o = {.url = url,
                           .timeout_ms = 10000,
                           .policy = SL_REDIS_DENY,
                           .fleet_size = 1,
                           .deny_cache = k->redis == 2,
                           .trust_client_time = 1};
        f->b = sl_backend_redis_new(&o, err, sizeof err);
        if (f->b == NULL) fail_msg("redis: %s", err);
        sl_redis_info ri; /* the start-up check found the module, or not */
        assert_int_equal(sl_backend_redis_info(f->b, &ri), 0);
        assert_string_equal(ri.path, MODULE_ROW(k) ? "module" : "script");
    }
    if (k->delayed) {
        f->b = backend_delay_new(f->local, 0x64656c6179ULL, DELAY_MAX_US);
        assert_non_null(f->b);
    }
    f->loop = event_base_new();
    assert_non_null(f->loop);
    f->ch = sl_backend_channel(f->b, f->loop);
    if (f->ch == NULL) fail_msg("%s: no channel: %s", k->name, f->b->errstr);
    assert_ptr_equal(f->ch->b, f->b);
    return f;
}

static void fx_free(fx *f)
{
    sl_backend_channel_free(f->ch);
    if (f->b != f->local) sl_backend_free(f->b);
    sl_backend_free(f->local);
    event_base_free(f->loop);
    sl_store_free(f->store);
    free(f);
}

/* A request of the suite: the sl_breq and what its callback saw. */
typedef struct treq {
    sl_breq rq;
    fx *f;
    int calls; /* callbacks run: must end at exactly 1 */
    long seq;  /* order of completion */
} treq;

static void on_done(sl_breq *rq)
{
    treq *t = rq->data;
    assert_ptr_equal(&t->rq, rq);
    t->calls++;
    t->seq = t->f->completed++;
}

/* Submits t (its in fields set by the caller): poisons the out fields
 * first, checks that an inline backend completed before returning and that
 * the delay backend did not. */
static void submit(fx *f, treq *t)
{
    t->f = f;
    t->calls = 0;
    t->seq = -1;
    t->rq.cb = on_done;
    t->rq.data = t;
    t->rq.rc = 12345;
    memset(t->rq.err, 'x', sizeof t->rq.err - 1);
    t->rq.err[sizeof t->rq.err - 1] = '\0';
    memset(&t->rq.result, 0x5a, sizeof t->rq.result);
    t->rq.existed = -7;
    t->rq.all_allowed = -7;
    sl_backend_submit(f->ch, &t->rq);
    if (t->calls > 0) f->inline_done++;
    if (f->b->flags & SL_BACKEND_INLINE)
        assert_int_equal(t->calls, 1);
    else if (f->k->delayed)
        assert_int_equal(t->calls, 0);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs f's event loop until every request of ts[0..n) has completed (a
 * deadline of WAIT_SECONDS), then a little more, and checks each callback
 * ran exactly once.  Counts completions that overtook an earlier one. */
static void wait_all(fx *f, treq **ts, size_t n)
{
    double until = mono_s() + WAIT_SECONDS;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++) left += ts[i]->calls == 0;
        if (left == 0) break;
        if (mono_s() > until)
            fail_msg("%s: %zu of %zu requests not completed after %d s", f->k->name, left, n,
                     WAIT_SECONDS);
        event_base_loop(f->loop, EVLOOP_ONCE);
    }
    event_base_loop(f->loop, EVLOOP_NONBLOCK);
    for (size_t i = 0; i < n; i++) {
        if (ts[i]->calls != 1)
            fail_msg("%s: request %zu completed %d times", f->k->name, i, ts[i]->calls);
        for (size_t j = 0; j < i; j++)
            if (ts[j]->seq > ts[i]->seq) {
                f->out_of_order++;
                break;
            }
    }
}

static void wait_one(fx *f, treq *t) { wait_all(f, &t, 1); }

/* The delay backend must have answered some requests out of order, or the
 * suite did not exercise what it is for. */
static void check_async_exercised(const fx *f)
{
    if (f->k->delayed) {
        if (f->out_of_order == 0)
            fail_msg("%s: every request completed in submission order", f->k->name);
        assert_int_equal(f->inline_done, 0);
    }
}

static const char *msg_of(const sl_breq *rq) { return rq->err[0] ? rq->err : sl_strerror(rq->rc); }

/* Fails unless rq completed with 0. */
static void ok(const treq *t, const char *what)
{
    if (t->rq.rc != 0)
        fail_msg("%s: %s: rc %d (%s)", t->f->k->name, what, t->rq.rc, msg_of(&t->rq));
}

/* ---- randomness ------------------------------------------------------------- */

/* rng, rnd, rnd_in, chance: support/rng.h */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static uint64_t seed_of(uint64_t dflt)
{
    const char *s = getenv("SLUICE_SEED");
    return s != NULL && *s != '\0' ? strtoull(s, NULL, 0) : dflt;
}

static int same_result(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_after_ms == b->reset_after_ms &&
           a->delay_ms == b->delay_ms;
}

static const char *fmt_result(char *buf, size_t cap, const sl_result *r)
{
    snprintf(buf, cap, "%lld %lld %lld %lld %lld %lld", (long long)r->allowed, (long long)r->limit,
             (long long)r->remaining, (long long)r->retry_after_ms, (long long)r->reset_after_ms,
             (long long)r->delay_ms);
    return buf;
}

/* ---- (a) the spec's vectors ------------------------------------------------ */

/* Every file of the vectors folder: each on a fresh backend, its lines
 * submitted together (decided in order, answered in any order). */
static void run_vectors(const bkind *k)
{
    const char *dir = getenv("SLUICE_SPEC_DIR");
    if (dir == NULL || *dir == '\0') fail_msg("SLUICE_SPEC_DIR is not set (tests/run.sh sets it)");
    char vdir[4096];
    snprintf(vdir, sizeof vdir, "%s/vectors", dir);
    char *names[VEC_MAX_FILES], why[4400];
    int nn = vec_names(vdir, names, why, sizeof why);
    if (nn < 0) fail_msg("%s", why);

    vec_file *v = calloc(1, sizeof *v);
    treq *ts = calloc(VEC_MAX_STEPS, sizeof *ts);
    treq **tp = calloc(VEC_MAX_STEPS, sizeof *tp);
    char(*kb)[SL_MAX_KEY + 1] = calloc(VEC_MAX_STEPS, sizeof *kb);
    assert_true(v && ts && tp && kb);
    long lines = 0, ooo = 0;
    int skipped = 0;
    for (int i = 0; i < nn; i++) {
        snprintf(v->path, sizeof v->path, "%.4000s/%.255s", vdir, names[i]);
        vec_load(v);
        if (k->fixed_window_only && v->p.algo != SL_FIXED_WINDOW) { /* PROVISIONAL (backends[]) */
            free(names[i]);
            skipped++;
            continue;
        }
        fx *f = fx_new(k, i & 1 ? SL_LOCK_SHARD : SL_LOCK_RECORD);
        for (int s = 0; s < v->nsteps; s++) {
            const vec_step *st = &v->steps[s];
            treq *t = &ts[s];
            memset(t, 0, sizeof *t);
            memcpy(kb[s], st->key, st->klen);
            t->rq.op = SL_BOP_DECIDE;
            t->rq.params = &v->p;
            t->rq.key = kb[s];
            t->rq.keylen = st->klen;
            t->rq.now_ms = st->t;
            t->rq.cost = st->cost;
            submit(f, t);
            memset(kb[s], '?', sizeof kb[s]); /* the backend may not read it any more */
            tp[s] = t;
        }
        wait_all(f, tp, (size_t)v->nsteps);
        for (int s = 0; s < v->nsteps; s++) {
            const vec_step *st = &v->steps[s];
            const sl_result *r = &ts[s].rq.result;
            int64_t got[6] = {r->allowed,        r->limit,          r->remaining,
                              r->retry_after_ms, r->reset_after_ms, r->delay_ms};
            if (ts[s].rq.rc != 0)
                fail_msg("%s: %s:%d: rc %d (%s)", k->name, v->path, st->line, ts[s].rq.rc,
                         msg_of(&ts[s].rq));
            if (memcmp(got, st->want, sizeof got) != 0)
                fail_msg("%s: %s:%d: expected %lld %lld %lld %lld %lld %lld, got %lld %lld %lld "
                         "%lld %lld %lld",
                         k->name, v->path, st->line, (long long)st->want[0], (long long)st->want[1],
                         (long long)st->want[2], (long long)st->want[3], (long long)st->want[4],
                         (long long)st->want[5], (long long)got[0], (long long)got[1],
                         (long long)got[2], (long long)got[3], (long long)got[4],
                         (long long)got[5]);
            lines++;
        }
        ooo += f->out_of_order;
        fx_free(f);
        free(names[i]);
    }
    print_message("[ info     ] %s: %ld vector lines in %d files exact, %ld answered out of "
                  "order%s\n",
                  k->name, lines, nn - skipped, ooo,
                  skipped ? " (PROVISIONAL: fixed-window files only)" : "");
    if (nn - skipped == 0) fail_msg("%s: no vector file ran", k->name);
    if (k->delayed && ooo == 0) fail_msg("%s: every vector line completed in order", k->name);
    free(v);
    free(ts);
    free(tp);
    free(kb);
}

/* The keys the backend holds: its stats, or for the Redis backend (which
 * cannot know them) the test's redis-server's DBSIZE -- flushed when the
 * fixture was made, so every key there is this test's. */
static uint64_t keys_of(fx *f)
{
    if (f->k->redis) return redis_dbsize(f->k);
    sl_backend_stats st;
    sl_backend_stats_get(f->b, &st);
    return st.keys;
}

/* ---- (b) randomized traces against the model ------------------------------- */

#define NKEYS 8
#define TMIN  (-SL_MAX_TIME_MS + 1)
#define TMAX  (SL_MAX_TIME_MS - 1)

static unsigned char long_key[SL_MAX_KEY];
static const struct {
    const char *name;
    const void *bytes;
    size_t len;
} keys[NKEYS] = {
    {"k0", "k0", 2}, {"k1", "k1", 2}, {"bin\\0x", "bin\0x", 5}, {"long512", long_key, SL_MAX_KEY},
    {"m4", "m4", 2}, {"m5", "m5", 2}, {"m6", "m6", 2},          {"m7", "m7", 2},
};

typedef enum profile { PROF_SMALL, PROF_W1, PROF_HUGE, PROF_WIDE, PROF_DECADE, PROF_COUNT } profile;
static const char *const profile_name[PROF_COUNT] = {"small", "w1", "huge", "wide", "decade"};

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

/* A precision dividing W: the default when it divides, 1, or W. */
static int64_t pick_precision(rng *r, int64_t W)
{
    int c = (int)(rnd(r) % 3);
    if (c == 0 && W % SL_DEFAULT_PRECISION == 0) return 0;
    if (c == 1 && W <= SL_MAX_PRECISION) return W;
    for (int64_t d = min64(W, 64); d > 1; d--)
        if (W % d == 0 && chance(r, 30)) return d;
    return 1;
}

/* Parameters of algo under a profile; bucket refills stay below 2^60 ms. */
static sl_params pick_params(rng *r, sl_algo algo, int log_rejected, profile pr)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = algo;
    p.log_rejected = log_rejected;
    switch (pr) {
    case PROF_W1:
        p.limit = rnd_in(r, 1, 5);
        p.window_ms = 1;
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 10);
        break;
    case PROF_HUGE:
        p.limit = chance(r, 50) ? SL_MAX_LIMIT - 7 : rnd_in(r, SL_MAX_LIMIT / 10, SL_MAX_LIMIT);
        p.window_ms = chance(r, 50) ? rnd_in(r, 1, 86400000) : SL_MAX_WINDOW_MS;
        p.burst = chance(r, 40) ? 0 : chance(r, 50) ? SL_MAX_LIMIT : rnd_in(r, 1, SL_MAX_LIMIT);
        break;
    case PROF_WIDE:
        p.limit = rnd_in(r, 1, 1000);
        p.window_ms = rnd_in(r, 1, 10000000);
        p.burst = chance(r, 30) ? 0 : rnd_in(r, 1, 1000 * p.limit);
        break;
    case PROF_DECADE:
        p.limit = chance(r, 50) ? rnd_in(r, 1, 20) : rnd_in(r, 1, 2000000);
        p.window_ms = SL_MAX_WINDOW_MS;
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 8 * p.limit);
        break;
    case PROF_SMALL:
    default:
        p.limit = rnd_in(r, 1, 10);
        p.window_ms = rnd_in(r, 1, 3000);
        if (chance(r, 50) && p.window_ms >= 10) p.window_ms -= p.window_ms % 10;
        p.burst = chance(r, 50) ? 0 : rnd_in(r, 1, 4 * p.limit);
        break;
    }
    if (!is_bucket(algo)) p.burst = 0;
    if (p.burst > 0 && (i128)p.burst * p.window_ms / p.limit >= (i128)1 << 60) p.burst = p.limit;
    if (algo == SL_SLIDING_BUCKETS) p.precision = pick_precision(r, p.window_ms);
    assert_int_equal(sl_params_check(&p), 0);
    return p;
}

static int64_t pick_cost(rng *r, int64_t full)
{
    int c = (int)(rnd(r) % 100);
    if (c < 5) return 0;
    if (c < 45) return 1;
    if (c < 65) return rnd_in(r, 1, max64(1, full / 4));
    if (c < 80) return rnd_in(r, 1, full);
    if (c < 88) return max64(0, full - rnd_in(r, 0, 2));
    return chance(r, 20) ? SL_MAX_LIMIT : min64(SL_MAX_LIMIT, full + rnd_in(r, 1, 3));
}

/* Mostly forward by steps of every scale, sometimes back. */
static int64_t next_time(rng *r, int64_t t, int64_t W)
{
    int c = (int)(rnd(r) % 100);
    int64_t nt;
    if (c < 10)
        nt = t - rnd_in(r, 1, 2 * W);
    else if (c < 30)
        nt = t;
    else if (c < 50)
        nt = t + rnd_in(r, 1, 3);
    else if (c < 70)
        nt = t + rnd_in(r, 1, max64(1, W / 10));
    else if (c < 90)
        nt = t + rnd_in(r, 1, W);
    else
        nt = t + rnd_in(r, 1, 5 * W);
    return nt < TMIN ? TMIN : nt > TMAX ? TMAX : nt;
}

/* Ways to make a request invalid, and the code each must get. */
static const struct {
    const char *what;
    int rc;
} invalid_kind[] = {
    {"valid", 0},
    {"cost -1", SL_ECOST},
    {"cost SL_MAX_LIMIT + 1", SL_ECOST},
    {"t = SL_MAX_TIME_MS", SL_ETIME},
    {"key of 0 bytes", SL_EKEY},
    {"key of SL_MAX_KEY + 1 bytes", SL_EKEY},
    {"limit 0", SL_ELIMIT},
    {"window 0", SL_EWINDOW},
};
#define INVALID_KINDS ((int)(sizeof invalid_kind / sizeof invalid_kind[0]))

enum { OP_DECIDE, OP_PEEK, OP_FORGET };

/* One request of a window and what the model expects of it. */
typedef struct top {
    treq t;
    int op, algo, key, bad;
    int lo, hi;  /* FORGET */
    sl_params p; /* b.params points here */
    unsigned char kbuf[SL_MAX_KEY + 1];
    sl_result want;
    int want_existed;
} top;

typedef struct trace_ctx {
    const bkind *k;
    const char *label;
    uint64_t seed;
    int index;
    int nalgo;                  /* algorithms in play: p[0..nalgo) */
    sl_params p[SL_ALGO_COUNT]; /* by position */
    model *m[SL_ALGO_COUNT][NKEYS];
    long decides, peeks, forgets, existed, invalid, allowed, denied;
    long out_of_range;   /* Redis rows: traces refused whole (docs/redis-scripts.md) */
    long beyond;         /* the module row: traces past the script's range, played whole */
    uint64_t cache_hits; /* the redis-deny-cache row: requests its deny cache answered */
    int hammer;          /* decisions only, cost 0 or 1, time creeping forward: what a
                            deny cache is for */
} trace_ctx;

#define TWO53 ((i128)1 << 53)

/* Whether p is inside the Redis backend's exact range, as
 * docs/redis-scripts.md states it: B*W <= 2^53 for the buckets, (L+1)*W
 * <= 2^53 for sliding-window, anything for the others. */
static int redis_exact(const sl_params *p)
{
    i128 B = p->burst ? p->burst : p->limit;
    if (is_bucket(p->algo)) return B * p->window_ms <= TWO53;
    if (p->algo == SL_SLIDING_WINDOW) return ((i128)p->limit + 1) * p->window_ms <= TWO53;
    return 1;
}

static int pos_of(const trace_ctx *c, int algo)
{
    for (int i = 0; i < c->nalgo; i++)
        if ((int)c->p[i].algo == algo) return i;
    return -1;
}

static model *model_of(trace_ctx *c, int pi, int key)
{
    if (c->m[pi][key] == NULL) c->m[pi][key] = model_new(&c->p[pi]);
    return c->m[pi][key];
}

static void describe(const trace_ctx *c, const top *o, char *buf, size_t cap)
{
    const char *opn = o->op == OP_DECIDE ? "DECIDE" : o->op == OP_PEEK ? "PEEK" : "FORGET";
    if (o->op == OP_FORGET)
        snprintf(buf, cap, "FORGET %s algorithms [%d, %d)", keys[o->key].name, o->lo, o->hi);
    else
        snprintf(buf, cap,
                 "%s %s t=%lld cost=%lld --algo %s --limit %lld --window %lld --burst %lld "
                 "--precision %lld%s%s%s",
                 opn, keys[o->key].name, (long long)o->t.rq.now_ms, (long long)o->t.rq.cost,
                 model_algo_name(o->p.algo), (long long)c->p[pos_of(c, o->algo)].limit,
                 (long long)c->p[pos_of(c, o->algo)].window_ms,
                 (long long)c->p[pos_of(c, o->algo)].burst,
                 (long long)c->p[pos_of(c, o->algo)].precision,
                 o->p.log_rejected ? " --log-rejected" : "", o->bad ? ", made invalid by " : "",
                 o->bad ? invalid_kind[o->bad].what : "");
}

/* Plays one trace of about nreq requests on a fresh backend in windows. */
static void play_trace(trace_ctx *c, rng *r, profile pr, int nreq)
{
    fx *f = fx_new(c->k, c->index & 1 ? SL_LOCK_SHARD : SL_LOCK_RECORD);
    top *win = calloc(MAX_WINDOW, sizeof *win);
    treq *tp[MAX_WINDOW];
    assert_non_null(win);
    memset(c->m, 0, sizeof c->m);
    int nkeys = (int)rnd_in(r, 1, NKEYS);
    int64_t W = c->p[0].window_ms;
    for (int i = 1; i < c->nalgo; i++) W = min64(W, c->p[i].window_ms);
    int64_t t = pr == PROF_WIDE ? -rnd_in(r, 0, 50 * W) : rnd_in(r, -1000 * W, 1000 * W);
    t = t < TMIN ? TMIN : t > TMAX ? TMAX : t;
    char d[512], a[128], b[128];

    /* The Redis backend refuses parameters past its exact range rather
     * than round: such a trace is one request, refused with the range
     * named, and nothing kept. */
    for (int i = 0; MODULE_ROW(c->k) && i < c->nalgo; i++)
        if (!redis_exact(&c->p[i])) {
            c->beyond++; /* the module is exact in 128 bits: checked against the model */
            break;
        }
    for (int i = 0; c->k->redis && !MODULE_ROW(c->k) && i < c->nalgo; i++) {
        if (redis_exact(&c->p[i])) continue;
        treq *t0 = &win[0].t;
        t0->rq.op = SL_BOP_DECIDE;
        t0->rq.params = &c->p[i];
        t0->rq.key = "k0";
        t0->rq.keylen = 2;
        t0->rq.cost = 1;
        t0->rq.now_ms = t;
        submit(f, t0);
        wait_one(f, t0);
        if (t0->rq.rc != SL_EINVAL || strncmp(t0->rq.err, "range: ", 7) != 0 ||
            strstr(t0->rq.err, "passes 2^53") == NULL)
            fail_msg("%s: %s: parameters past the exact range: rc %d (%s), expected a range "
                     "refusal",
                     c->k->name, c->label, t0->rq.rc, t0->rq.err);
        assert_int_equal(keys_of(f), 0);
        c->out_of_range++;
        fx_free(f);
        free(win);
        return;
    }

    for (int done = 0; done < nreq;) {
        int n = (int)rnd_in(r, 1, MAX_WINDOW);
        for (int i = 0; i < n; i++) {
            top *o = &win[i];
            memset(&o->t, 0, sizeof o->t);
            int pi = (int)rnd_in(r, 0, c->nalgo - 1);
            o->algo = (int)c->p[pi].algo;
            o->key = (int)rnd_in(r, 0, nkeys - 1);
            o->bad = 0;
            o->p = c->p[pi];
            int ch = c->hammer ? 0 : (int)(rnd(r) % 100);
            o->op = ch < 65 ? OP_DECIDE : ch < 82 ? OP_PEEK : ch < 90 ? OP_FORGET : OP_DECIDE;
            if (ch >= 90 && chance(r, 50)) {
                o->bad = (int)rnd_in(r, 1, INVALID_KINDS - 1);
                o->op = chance(r, 30) ? OP_PEEK : OP_DECIDE;
            }
            sl_breq *q = &o->t.rq;
            size_t klen = keys[o->key].len;
            memcpy(o->kbuf, keys[o->key].bytes, klen);
            q->key = (const char *)o->kbuf;
            q->keylen = klen;
            if (o->op == OP_FORGET) {
                q->op = SL_BOP_FORGET;
                if (chance(r, 50)) {
                    o->lo = 0;
                    o->hi = SL_ALGO_COUNT;
                } else {
                    o->lo = o->algo;
                    o->hi = o->algo + 1;
                }
                q->algo_lo = o->lo;
                q->algo_hi = o->hi;
                /* existed: some algorithm in range had decided this key */
                o->want_existed = 0;
                for (int j = 0; j < c->nalgo; j++) {
                    int al = (int)c->p[j].algo;
                    if (al < o->lo || al >= o->hi || c->m[j][o->key] == NULL) continue;
                    if (model_history_len(c->m[j][o->key], o->kbuf, klen) > 0) o->want_existed = 1;
                    model_free(c->m[j][o->key]); /* forgotten: the model restarts */
                    c->m[j][o->key] = NULL;
                }
                continue;
            }
            t = c->hammer ? t + rnd_in(r, 0, max64(1, W / 20)) : next_time(r, t, W);
            q->op = o->op == OP_DECIDE ? SL_BOP_DECIDE : SL_BOP_PEEK;
            q->now_ms = t;
            q->cost = c->hammer ? chance(r, 90) : pick_cost(r, model_capacity(&o->p));
            q->params = &o->p;
            switch (o->bad) {
            case 0: break;
            case 1: q->cost = -1; break;
            case 2: q->cost = SL_MAX_LIMIT + 1; break;
            case 3: q->now_ms = SL_MAX_TIME_MS; break;
            case 4: q->keylen = 0; break;
            case 5:
                memset(o->kbuf, 'z', sizeof o->kbuf);
                q->keylen = SL_MAX_KEY + 1;
                break;
            case 6: o->p.limit = 0; break;
            default: o->p.window_ms = 0; break;
            }
            if (o->bad) continue; /* the model is not told */
            model *m = model_of(c, pi, o->key);
            if (o->op == OP_DECIDE)
                model_decide(m, o->kbuf, klen, q->now_ms, q->cost, &o->want);
            else
                model_peek(m, o->kbuf, klen, q->now_ms, q->cost, &o->want);
            if (model_error(m) != NULL)
                fail_msg("the model contradicts itself: %s", model_error(m));
        }
        for (int i = 0; i < n; i++) {
            submit(f, &win[i].t);
            memset(win[i].kbuf, 0xee, sizeof win[i].kbuf); /* read only during submit */
            tp[i] = &win[i].t;
        }
        wait_all(f, tp, (size_t)n);
        for (int i = 0; i < n; i++) {
            top *o = &win[i];
            const sl_breq *q = &o->t.rq;
            int want_rc = invalid_kind[o->bad].rc;
            int bad = q->rc != want_rc;
            if (!bad && o->bad == 0 && o->op != OP_FORGET) bad = !same_result(&q->result, &o->want);
            if (!bad && o->op == OP_FORGET) bad = q->existed != o->want_existed;
            if (!bad && q->rc < 0 && msg_of(q)[0] == '\0') bad = 1;
            if (bad) {
                describe(c, o, d, sizeof d);
                fail_msg("%s: %s trace %d (seed 0x%llx), request %d of a window of %d: %s\n"
                         "  expected rc %d%s%s%s, existed %d\n  got      rc %d (%s) %s, existed "
                         "%d",
                         c->k->name, c->label, c->index, (unsigned long long)c->seed, i, n, d,
                         want_rc, o->bad || o->op == OP_FORGET ? "" : ", ",
                         o->bad || o->op == OP_FORGET ? "" : fmt_result(a, sizeof a, &o->want), "",
                         o->want_existed, q->rc, msg_of(q), fmt_result(b, sizeof b, &q->result),
                         q->existed);
            }
            if (o->bad) {
                c->invalid++;
            } else if (o->op == OP_FORGET) {
                c->forgets++;
                c->existed += q->existed;
            } else if (o->op == OP_PEEK) {
                c->peeks++;
            } else {
                c->decides++;
                c->allowed += q->result.allowed == 1;
                c->denied += q->result.allowed == 0;
            }
        }
        done += n;
    }

    /* the keys count: exactly the (algorithm, key) pairs decided since
     * their last forget (peeks and refused requests create nothing) */
    uint64_t want = 0;
    for (int j = 0; j < c->nalgo; j++)
        for (int kk = 0; kk < NKEYS; kk++)
            if (c->m[j][kk] != NULL)
                want += model_history_len(c->m[j][kk], keys[kk].bytes, keys[kk].len) > 0;
    if (MODULE_ROW(c->k)) { /* one Redis key holds a key's every algorithm */
        want = 0;
        for (int kk = 0; kk < NKEYS; kk++) {
            int any = 0;
            for (int j = 0; j < c->nalgo; j++)
                any |= c->m[j][kk] != NULL &&
                       model_history_len(c->m[j][kk], keys[kk].bytes, keys[kk].len) > 0;
            want += any;
        }
    }
    uint64_t have = keys_of(f);
    if (have != want)
        fail_msg("%s: %s trace %d: the backend holds %llu keys, %llu pairs were decided",
                 c->k->name, c->label, c->index, (unsigned long long)have,
                 (unsigned long long)want);
    for (int j = 0; j < c->nalgo; j++)
        for (int kk = 0; kk < NKEYS; kk++) model_free(c->m[j][kk]);
    if (c->k->redis) {
        sl_redis_info ri;
        assert_int_equal(sl_backend_redis_info(f->b, &ri), 0);
        c->cache_hits += ri.cache_hits;
    }
    check_async_exercised(f);
    fx_free(f);
    free(win);
}

static void run_model(const bkind *k)
{
    static const struct {
        sl_algo algo;
        int log_rejected;
    } algos[] = {
        {SL_FIXED_WINDOW, 0},    {SL_SLIDING_LOG, 0},  {SL_SLIDING_LOG, 1}, {SL_SLIDING_WINDOW, 0},
        {SL_SLIDING_BUCKETS, 0}, {SL_TOKEN_BUCKET, 0}, {SL_GCRA, 0},        {SL_LEAKY_BUCKET, 0},
    };
    uint64_t seed = seed_of(0x6261636b656e64ULL);
    rng r = {seed};
    trace_ctx c;
    memset(&c, 0, sizeof c);
    c.k = k;
    c.seed = seed;
    char label[96];
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        for (int pr = 0; pr < PROF_COUNT; pr++) {
            snprintf(label, sizeof label, "%s%s/%s", model_algo_name(algos[a].algo),
                     algos[a].log_rejected ? "+log-rejected" : "", profile_name[pr]);
            c.label = label;
            c.nalgo = 1;
            c.p[0] = pick_params(&r, algos[a].algo, algos[a].log_rejected, (profile)pr);
            play_trace(&c, &r, (profile)pr, (int)rnd_in(&r, 200, 500));
            c.index++;
        }
    }
    /* hammering: every algorithm, a few keys, decisions of cost 1 (or 0)
     * at creeping times -- most of them denied, the deny cache's work */
    c.hammer = 1;
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        snprintf(label, sizeof label, "%s%s/hammer", model_algo_name(algos[a].algo),
                 algos[a].log_rejected ? "+log-rejected" : "");
        c.label = label;
        c.nalgo = 1;
        c.p[0] = pick_params(&r, algos[a].algo, algos[a].log_rejected, PROF_SMALL);
        play_trace(&c, &r, PROF_SMALL, 300);
        c.index++;
    }
    c.hammer = 0;
    /* every algorithm on one store, the same keys: FORGET over all of them */
    for (int i = 0; i < 4; i++) {
        profile pr = i % 2 ? PROF_SMALL : PROF_WIDE;
        snprintf(label, sizeof label, "all algorithms/%s", profile_name[pr]);
        c.label = label;
        c.nalgo = SL_ALGO_COUNT;
        int lr = chance(&r, 50);
        for (int a = 0; a < SL_ALGO_COUNT; a++)
            c.p[a] = pick_params(&r, (sl_algo)a, a == SL_SLIDING_LOG ? lr : 0, pr);
        play_trace(&c, &r, pr, 800);
        c.index++;
    }
    print_message("[ info     ] %s: %d traces, %ld decisions (%ld allowed, %ld denied) + %ld "
                  "peeks + %ld forgets (%ld existed) agree with the model, %ld invalid refused, "
                  "%ld traces past the exact range refused, seed 0x%llx\n",
                  k->name, c.index, c.decides, c.allowed, c.denied, c.peeks, c.forgets, c.existed,
                  c.invalid, c.out_of_range, (unsigned long long)seed);
    /* the deny cache answered some requests (each checked above), and only
     * where it is on */
    if (k->redis)
        print_message("[ info     ] %s: %llu answered by the deny cache\n", k->name,
                      (unsigned long long)c.cache_hits);
    assert_true(k->redis == 2 ? c.cache_hits > 0 : c.cache_hits == 0);
    /* only the script's Redis rows refuse, and only the huge profiles; the
     * module answers those traces exactly */
    if (MODULE_ROW(k))
        print_message("[ info     ] %s: %ld traces past the script's exact range agree with the "
                      "model\n",
                      k->name, c.beyond);
    assert_true(k->redis && !MODULE_ROW(k) ? c.out_of_range > 0 && c.out_of_range < c.index / 2
                                           : c.out_of_range == 0);
    assert_true(MODULE_ROW(k) ? c.beyond > 0 : c.beyond == 0);
    assert_true(c.allowed > 0 && c.denied > 0 && c.existed > 0 && c.existed < c.forgets);
}

/* ---- (c) DECIDE_ALL -------------------------------------------------------- */

static void peek_into(fx *f, const sl_params *p, const char *key, int64_t now, int64_t cost,
                      sl_result *out)
{
    treq t;
    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_PEEK;
    t.rq.params = p;
    t.rq.key = key;
    t.rq.keylen = strlen(key);
    t.rq.now_ms = now;
    t.rq.cost = cost;
    submit(f, &t);
    wait_one(f, &t);
    ok(&t, "PEEK");
    *out = t.rq.result;
}

/* A denied member charges nobody; an allowed batch charges everyone. */
static void decide_all_fixed(fx *f)
{
    sl_params fw = SL_PARAMS_INIT, tb = SL_PARAMS_INIT;
    fw.algo = SL_FIXED_WINDOW;
    fw.limit = 3;
    fw.window_ms = 60000;
    tb.algo = SL_TOKEN_BUCKET;
    tb.limit = 2;
    tb.window_ms = 1000;
    const char *names[3] = {"a", "b", "a"}; /* "a" twice: two algorithms, two keys */
    const sl_params *ps[3] = {&fw, &fw, &tb};
    sl_request reqs[3];
    sl_result res[3], before[3], after[3];
    for (int i = 0; i < 3; i++) {
        reqs[i].params = ps[i];
        reqs[i].key = names[i];
        reqs[i].keylen = 1;
        reqs[i].cost = 1;
    }
    treq t;
    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_DECIDE_ALL;
    t.rq.reqs = reqs;
    t.rq.nreqs = 3;
    t.rq.results = res;
    t.rq.now_ms = 1000;
    submit(f, &t);
    wait_one(f, &t);
    ok(&t, "DECIDE_ALL");
    assert_int_equal(t.rq.all_allowed, 1);
    assert_int_equal(res[0].remaining, 2);
    assert_int_equal(res[1].remaining, 2);
    assert_int_equal(res[2].remaining, 1);

    /* b takes 2 more on its own: b is full */
    sl_result br;
    treq u;
    memset(&u, 0, sizeof u);
    u.rq.op = SL_BOP_DECIDE;
    u.rq.params = &fw;
    u.rq.key = "b";
    u.rq.keylen = 1;
    u.rq.cost = 2;
    u.rq.now_ms = 1000;
    submit(f, &u);
    wait_one(f, &u);
    ok(&u, "DECIDE");
    br = u.rq.result;
    assert_int_equal(br.allowed, 1);
    assert_int_equal(br.remaining, 0);

    /* now b denies: neither a (either algorithm) nor b is charged */
    for (int i = 0; i < 3; i++) peek_into(f, ps[i], names[i], 2000, 1, &before[i]);
    memset(res, 0x5a, sizeof res);
    t.rq.now_ms = 2000;
    submit(f, &t);
    wait_one(f, &t);
    ok(&t, "DECIDE_ALL");
    assert_int_equal(t.rq.all_allowed, 0);
    for (int i = 0; i < 3; i++) {
        peek_into(f, ps[i], names[i], 2000, 1, &after[i]);
        assert_true(same_result(&before[i], &after[i])); /* nothing charged */
        assert_true(same_result(&res[i], &before[i]));   /* each answered as if alone */
    }
    assert_int_equal(res[0].allowed, 1);
    assert_int_equal(res[1].allowed, 0);
    assert_int_equal(res[1].retry_after_ms, 58000);
    assert_int_equal(res[2].allowed, 1);
}

/* Random batches against the model: all allowed -> every member decided;
 * else none, and each answered as its peek. */
static void decide_all_random(fx *f, rng *r)
{
    enum { NB = 8, NKEY = 5, BATCHES = 1500 };
    sl_params p[SL_ALGO_COUNT];
    model *m[SL_ALGO_COUNT][NKEY];
    memset(m, 0, sizeof m);
    for (int a = 0; a < SL_ALGO_COUNT; a++) {
        p[a] = pick_params(r, (sl_algo)a, 0, PROF_SMALL);
        for (int k = 0; k < NKEY; k++) m[a][k] = model_new(&p[a]);
    }
    static const char *kn[NKEY] = {"x0", "x1", "x2", "x3", "x4"};
    typedef struct batch {
        treq t;
        sl_request reqs[SL_MAX_BATCH];
        sl_result out[SL_MAX_BATCH], want[SL_MAX_BATCH];
        int algo[SL_MAX_BATCH], key[SL_MAX_BATCH];
        int want_all;
    } batch;
    batch *bs = calloc(NB, sizeof *bs);
    assert_non_null(bs);
    treq *tp[NB];
    int64_t t = 0;
    long all = 0, none = 0;
    for (int done = 0; done < BATCHES;) {
        int nb = (int)rnd_in(r, 1, NB);
        for (int i = 0; i < nb; i++) {
            batch *b = &bs[i];
            memset(&b->t, 0, sizeof b->t);
            int n = (int)rnd_in(r, 1, 6);
            int used[SL_ALGO_COUNT][NKEY] = {{0}};
            t = chance(r, 10) ? t - rnd_in(r, 1, 500) : t + rnd_in(r, 0, 300);
            for (int j = 0; j < n; j++) {
                int a, k;
                do {
                    a = (int)rnd_in(r, 0, SL_ALGO_COUNT - 1);
                    k = (int)rnd_in(r, 0, NKEY - 1);
                } while (used[a][k]);
                used[a][k] = 1;
                b->algo[j] = a;
                b->key[j] = k;
                b->reqs[j].params = &p[a];
                b->reqs[j].key = kn[k];
                b->reqs[j].keylen = 2;
                b->reqs[j].cost = chance(r, 70) ? 1 : rnd_in(r, 0, model_capacity(&p[a]) + 1);
            }
            b->want_all = 1;
            for (int j = 0; j < n; j++) {
                model_peek(m[b->algo[j]][b->key[j]], kn[b->key[j]], 2, t, b->reqs[j].cost,
                           &b->want[j]);
                if (!b->want[j].allowed) b->want_all = 0;
            }
            if (b->want_all)
                for (int j = 0; j < n; j++)
                    model_decide(m[b->algo[j]][b->key[j]], kn[b->key[j]], 2, t, b->reqs[j].cost,
                                 &b->want[j]);
            b->t.rq.op = SL_BOP_DECIDE_ALL;
            b->t.rq.reqs = b->reqs;
            b->t.rq.nreqs = (size_t)n;
            b->t.rq.results = b->out;
            b->t.rq.now_ms = t;
        }
        for (int i = 0; i < nb; i++) {
            submit(f, &bs[i].t);
            tp[i] = &bs[i].t;
        }
        wait_all(f, tp, (size_t)nb);
        for (int i = 0; i < nb; i++) {
            batch *b = &bs[i];
            ok(&b->t, "DECIDE_ALL");
            if (b->t.rq.all_allowed != b->want_all)
                fail_msg("%s: batch at t=%lld: all_allowed %d, the model says %d", f->k->name,
                         (long long)b->t.rq.now_ms, b->t.rq.all_allowed, b->want_all);
            for (size_t j = 0; j < b->t.rq.nreqs; j++)
                if (!same_result(&b->out[j], &b->want[j])) {
                    char x[128], y[128];
                    fail_msg("%s: batch at t=%lld, member %zu (%s %s cost %lld): expected %s, "
                             "got %s",
                             f->k->name, (long long)b->t.rq.now_ms, j,
                             model_algo_name((sl_algo)b->algo[j]), kn[b->key[j]],
                             (long long)b->reqs[j].cost, fmt_result(x, sizeof x, &b->want[j]),
                             fmt_result(y, sizeof y, &b->out[j]));
                }
            if (b->want_all)
                all++;
            else
                none++;
        }
        done += nb;
    }
    for (int a = 0; a < SL_ALGO_COUNT; a++)
        for (int k = 0; k < NKEY; k++) model_free(m[a][k]);
    free(bs);
    print_message("[ info     ] %s: %ld batches charged, %ld refused whole, as the model says\n",
                  f->k->name, all, none);
    assert_true(all > 0 && none > 0);
}

static void run_decide_all(const bkind *k)
{
    fx *f = fx_new(k, SL_LOCK_RECORD);
    decide_all_fixed(f);
    rng r = {seed_of(0x616c6cULL)};
    decide_all_random(f, &r);
    check_async_exercised(f);
    fx_free(f);
}

/* ---- (d) CHECK ------------------------------------------------------------- */

static const char rules_yaml[] =
    "domain: api\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limit:\n"
    "      - unit: second\n"
    "        requests_per_unit: 3\n"
    "      - unit: minute\n"
    "        requests_per_unit: 20\n"
    "  - key: ip\n"
    "    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token-bucket}\n"
    "  - key: shadow\n"
    "    shadow_mode: true\n"
    "    rate_limit: {unit: second, requests_per_unit: 1, name: shadowed}\n"
    "  - key: soft\n"
    "    rate_limit: {unit: second, requests_per_unit: 10, soft: 20%}\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true, name: free}\n"
    "  - key: blocked\n"
    "    rate_limit: {unit: second, requests_per_unit: 0, name: blocklist}\n"
    "  - key: tenant\n"
    "    rate_limit: {unit: second, requests_per_unit: 2, elastic: 4, name: tenant}\n"
    "  - key: team\n"
    "    rate_limit: {unit: second, requests_per_unit: 2, name: team_default}\n"
    "  - key: vip\n"
    "    rate_limit:\n"
    "      unit: second\n"
    "      requests_per_unit: 5\n"
    "      name: vip\n"
    "      replaces:\n"
    "        - name: team_default\n";

static const char *const check_kv[][2] = {
    {"user", "bob"},  {"user", "ann"}, {"ip", "10.0.0.1"}, {"shadow", "s"},
    {"soft", "x"},    {"free", "y"},   {"blocked", "z"},   {"tenant", "t1"},
    {"tenant", "t2"}, {"team", "red"}, {"vip", "yes"},     {"nomatch", "q"},
};
#define NKV ((int)(sizeof check_kv / sizeof check_kv[0]))

static int same_status(const sl_check_status *a, const sl_check_status *b)
{
    if (a->code != b->code || a->rule != b->rule || a->shadow != b->shadow ||
        a->limit != b->limit || a->remaining != b->remaining ||
        a->retry_after_ms != b->retry_after_ms || a->reset_after_ms != b->reset_after_ms ||
        !same_result(&a->result, &b->result))
        return 0;
    if ((a->name == NULL) != (b->name == NULL)) return 0;
    return a->name == NULL || strcmp(a->name, b->name) == 0;
}

static void run_check(const bkind *k)
{
    enum { NW = 8, CHECKS = 1200 };
    char err[512];
    sl_rules *rules =
        sl_rules_load_buffer("conf.yaml", rules_yaml, strlen(rules_yaml), err, sizeof err);
    if (rules == NULL) fail_msg("rules: %s", err);
    sl_params pool;
    assert_int_equal(sl_check_pool_parse("6/1s", &pool, err, sizeof err), 0);
    fx *f = fx_new(k, SL_LOCK_RECORD);
    sl_store *ref = sl_store_new(NULL, NULL); /* the synchronous reference path's */
    assert_non_null(ref);

    typedef struct one {
        treq t;
        sl_check_plan plan;
        sl_check_outcome out;
        int n;
        const char *dom;
        sl_result ref_overall;
        sl_check_status ref_st[SL_CHECK_MAX_DESC];
    } one;
    one *w = calloc(NW, sizeof *w);
    assert_non_null(w);
    treq *tp[NW];
    rng r = {seed_of(0x636865636bULL)};
    int64_t now = 1000000;
    long counts[6] = {0}, denied = 0, refused = 0;
    for (int done = 0; done < CHECKS;) {
        int nw = (int)rnd_in(&r, 1, NW), sub = 0;
        for (int i = 0; i < nw; i++) {
            one *o = &w[sub];
            sl_rule_entry ent[SL_CHECK_MAX_DESC];
            const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
            int ndesc[SL_CHECK_MAX_DESC];
            o->n = (int)rnd_in(&r, 1, 3);
            for (int d = 0; d < o->n; d++) {
                int kv = (int)rnd_in(&r, 0, NKV - 1);
                ent[d] = (sl_rule_entry){check_kv[kv][0], strlen(check_kv[kv][0]), check_kv[kv][1],
                                         strlen(check_kv[kv][1])};
                descs[d] = &ent[d];
                ndesc[d] = 1;
            }
            o->dom = chance(&r, 95) ? "api" : "web";
            /* a cluster keeps a pool a domain (its slot), the reference one
             * in all: one domain there, where the two agree */
            if (k->cluster) o->dom = "api";
            int64_t cost = chance(&r, 80) ? 1 : rnd_in(&r, 0, 4);
            now += chance(&r, 10) ? -rnd_in(&r, 1, 300) : rnd_in(&r, 0, 200);
            const sl_params *pl = chance(&r, 80) ? &pool : NULL;
            char e1[512], e2[512];
            int rc, rrc;
            if (chance(&r, 70)) {
                rc = sl_check_plan_make(rules, pl, o->dom, strlen(o->dom), descs, ndesc, o->n,
                                        cost, now, &o->plan, e1, sizeof e1);
                rrc = sl_rules_check(rules, ref, pl, o->dom, strlen(o->dom), descs, ndesc, o->n,
                                     cost, now, &o->ref_overall, o->ref_st, e2, sizeof e2);
            } else { /* as the gRPC front asks (issue 26): each its own cost, Lyft's counting */
                int64_t costs[SL_CHECK_MAX_DESC];
                for (int d = 0; d < o->n; d++) costs[d] = rnd_in(&r, 0, 2);
                sl_check_input in = {.domain = o->dom,
                                     .dlen = strlen(o->dom),
                                     .n = o->n,
                                     .descs = descs,
                                     .ndesc = ndesc,
                                     .costs = costs,
                                     .lyft = chance(&r, 70),
                                     .pool = pl,
                                     .now_ms = now};
                static sl_check_plan rp;
                sl_check_outcome ro;
                rc = sl_check_plan_build(rules, &in, &o->plan, e1, sizeof e1);
                rrc = sl_check_plan_build(rules, &in, &rp, e2, sizeof e2);
                if (rrc == 0 && (rrc = sl__local_check_exec(ref, &rp, &ro, e2, sizeof e2)) == 0)
                    sl_check_report(&rp, &ro, &o->ref_overall, o->ref_st);
            }
            assert_int_equal(rc, rrc);
            if (rc != 0) {
                refused++;
                continue;
            }
            memset(&o->t, 0, sizeof o->t);
            memset(&o->out, 0x5a, sizeof o->out);
            o->t.rq.op = SL_BOP_CHECK;
            o->t.rq.now_ms = now;
            o->t.rq.plan = &o->plan;
            o->t.rq.outcome = &o->out;
            /* decided now, in this order, on both sides */
            submit(f, &o->t);
            tp[sub++] = &o->t;
        }
        wait_all(f, tp, (size_t)sub);
        for (int i = 0; i < sub; i++) {
            one *o = &w[i];
            ok(&o->t, "CHECK");
            sl_result overall;
            sl_check_status st[SL_CHECK_MAX_DESC];
            sl_check_report(&o->plan, &o->out, &overall, st);
            if (!same_result(&overall, &o->ref_overall)) {
                char x[128], y[128];
                fail_msg("%s: CHECK %s at %lld: overall %s, sl_rules_check says %s", k->name,
                         o->dom, (long long)o->t.rq.now_ms, fmt_result(x, sizeof x, &overall),
                         fmt_result(y, sizeof y, &o->ref_overall));
            }
            for (int d = 0; d < o->n; d++) {
                if (!same_status(&st[d], &o->ref_st[d]))
                    fail_msg("%s: CHECK %s at %lld, descriptor %d: %s %s %lld/%lld, "
                             "sl_rules_check says %s %s %lld/%lld",
                             k->name, o->dom, (long long)o->t.rq.now_ms, d,
                             sl_check_code_name(st[d].code), st[d].name ? st[d].name : "(nil)",
                             (long long)st[d].remaining, (long long)st[d].limit,
                             sl_check_code_name(o->ref_st[d].code),
                             o->ref_st[d].name ? o->ref_st[d].name : "(nil)",
                             (long long)o->ref_st[d].remaining, (long long)o->ref_st[d].limit);
                counts[st[d].code]++;
            }
            denied += !overall.allowed;
        }
        done += nw;
    }
    print_message("[ info     ] %s: %d checks as sl_rules_check answers (%ld denied, %ld refused "
                  "by the plan); statuses OK %ld, OVER_LIMIT %ld, SHADOW %ld, ELASTIC %ld, "
                  "UNLIMITED %ld, NO_RULE %ld\n",
                  k->name, CHECKS, denied, refused, counts[0], counts[1], counts[2], counts[3],
                  counts[4], counts[5]);
    for (int c = 0; c < 6; c++) assert_true(counts[c] > 0); /* every status was seen */
    sl_store_stats rs;
    sl_store_stats_get(ref, &rs);
    assert_int_equal(keys_of(f), rs.keys); /* the same counters exist on both sides */
    check_async_exercised(f);
    free(w);
    sl_store_free(ref);
    fx_free(f);
    sl_rules_free(rules);
}

/* ---- (e) bad input --------------------------------------------------------- */

/* Submits t, expects rc with a message, and that nothing changed: the
 * keys count, and the answer a peek of the key "ok" gets. */
static void refused(fx *f, treq *t, int rc, const char *what)
{
    static const sl_params okp = {SL_FIXED_WINDOW, 5, 10000, 0, 0, 0, 0};
    sl_result before, after;
    peek_into(f, &okp, "ok", 5000, 1, &before);
    uint64_t nk = keys_of(f);
    submit(f, t);
    wait_one(f, t);
    if (t->rq.rc != rc)
        fail_msg("%s: %s: rc %d (%s), expected %d (%s)", f->k->name, what, t->rq.rc, msg_of(&t->rq),
                 rc, sl_strerror(rc));
    const char *msg = msg_of(&t->rq);
    if (msg == NULL || msg[0] == '\0' || strcmp(msg, "unknown error") == 0)
        fail_msg("%s: %s: no message", f->k->name, what);
    assert_int_equal(keys_of(f), nk);
    peek_into(f, &okp, "ok", 5000, 1, &after);
    if (!same_result(&before, &after)) fail_msg("%s: %s changed the key 'ok'", f->k->name, what);
}

static void run_errors(const bkind *k)
{
    fx *f = fx_new(k, SL_LOCK_RECORD);
    static const sl_params okp = {SL_FIXED_WINDOW, 5, 10000, 0, 0, 0, 0};
    sl_params p;
    treq t;
    static char big[SL_MAX_KEY + 1];
    memset(big, 'b', sizeof big);

    /* "ok" exists: two of five used */
    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_DECIDE;
    t.rq.params = &okp;
    t.rq.key = "ok";
    t.rq.keylen = 2;
    t.rq.cost = 2;
    t.rq.now_ms = 5000;
    submit(f, &t);
    wait_one(f, &t);
    ok(&t, "DECIDE ok");

#define DECIDE_BAD(OP, PARAMS, KEY, KLEN, COST, NOW, RC, WHAT)                                     \
    do {                                                                                           \
        memset(&t, 0, sizeof t);                                                                   \
        t.rq.op = (OP);                                                                            \
        t.rq.params = (PARAMS);                                                                    \
        t.rq.key = (KEY);                                                                          \
        t.rq.keylen = (KLEN);                                                                      \
        t.rq.cost = (COST);                                                                        \
        t.rq.now_ms = (NOW);                                                                       \
        refused(f, &t, (RC), (WHAT));                                                              \
    } while (0)

    p = okp;
    p.limit = 0;
    DECIDE_BAD(SL_BOP_DECIDE, &p, "new", 3, 1, 5000, SL_ELIMIT, "DECIDE with limit 0");
    DECIDE_BAD(SL_BOP_DECIDE, &p, "ok", 2, 1, 5000, SL_ELIMIT, "DECIDE of ok with limit 0");
    p = okp;
    p.window_ms = 0;
    DECIDE_BAD(SL_BOP_DECIDE, &p, "ok", 2, 1, 5000, SL_EWINDOW, "DECIDE with window 0");
    p = okp;
    p.burst = 3;
    DECIDE_BAD(SL_BOP_DECIDE, &p, "ok", 2, 1, 5000, SL_EBURST, "DECIDE with a window burst");
    p = okp;
    p.log_rejected = 1;
    DECIDE_BAD(SL_BOP_DECIDE, &p, "ok", 2, 1, 5000, SL_ELOGREJECTED,
               "DECIDE with log-rejected on fixed-window");
    DECIDE_BAD(SL_BOP_PEEK, &okp, "ok", 2, -1, 5000, SL_ECOST, "PEEK of cost -1");
    DECIDE_BAD(SL_BOP_DECIDE, &okp, "ok", 2, SL_MAX_LIMIT + 1, 5000, SL_ECOST,
               "DECIDE of cost SL_MAX_LIMIT + 1");
    DECIDE_BAD(SL_BOP_DECIDE, &okp, "ok", 2, 1, SL_MAX_TIME_MS, SL_ETIME,
               "DECIDE at SL_MAX_TIME_MS");
    DECIDE_BAD(SL_BOP_DECIDE, &okp, "ok", 2, 1, -SL_MAX_TIME_MS, SL_ETIME,
               "DECIDE at -SL_MAX_TIME_MS");
    DECIDE_BAD(SL_BOP_DECIDE, &okp, "", 0, 1, 5000, SL_EKEY, "DECIDE of an empty key");
    DECIDE_BAD(SL_BOP_DECIDE, &okp, big, sizeof big, 1, 5000, SL_EKEY,
               "DECIDE of a key of SL_MAX_KEY + 1 bytes");
    DECIDE_BAD(SL_BOP_PEEK, &okp, big, sizeof big, 1, 5000, SL_EKEY,
               "PEEK of a key of SL_MAX_KEY + 1 bytes");

    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_FORGET;
    t.rq.key = "";
    t.rq.keylen = 0;
    t.rq.algo_lo = 0;
    t.rq.algo_hi = SL_ALGO_COUNT;
    refused(f, &t, SL_EKEY, "FORGET of an empty key");
    t.rq.key = big;
    t.rq.keylen = sizeof big;
    refused(f, &t, SL_EKEY, "FORGET of a key of SL_MAX_KEY + 1 bytes");

    /* DECIDE_ALL: a bad n, a repeated key, one bad member: nothing charged */
    sl_request reqs[SL_MAX_BATCH + 1];
    sl_result res[SL_MAX_BATCH + 1];
    char names[SL_MAX_BATCH + 1][16];
    for (int i = 0; i <= SL_MAX_BATCH; i++) {
        snprintf(names[i], sizeof names[i], "n%d", i);
        reqs[i] = (sl_request){&okp, names[i], strlen(names[i]), 1};
    }
    reqs[0].key = "ok";
    reqs[0].keylen = 2;
    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_DECIDE_ALL;
    t.rq.reqs = reqs;
    t.rq.results = res;
    t.rq.now_ms = 5000;
    t.rq.nreqs = 0;
    refused(f, &t, SL_EINVAL, "DECIDE_ALL of 0 requests");
    t.rq.nreqs = SL_MAX_BATCH + 1;
    refused(f, &t, SL_EINVAL, "DECIDE_ALL of SL_MAX_BATCH + 1 requests");
    reqs[2].key = "ok";
    reqs[2].keylen = 2;
    t.rq.nreqs = 3;
    refused(f, &t, SL_EINVAL, "DECIDE_ALL naming ok twice");
    reqs[2] = (sl_request){&p, names[2], strlen(names[2]), 1};
    p = okp;
    p.limit = 0;
    refused(f, &t, SL_ELIMIT, "DECIDE_ALL with a member of limit 0");
    reqs[2].params = &okp;
    reqs[1].cost = -1;
    refused(f, &t, SL_ECOST, "DECIDE_ALL with a member of cost -1");
    reqs[1].cost = 1;

    /* CHECK: a plan whose second counter cannot be decided (window 0): the
     * batch is refused, nothing charged */
    char err[512];
    sl_rules *rules =
        sl_rules_load_buffer("conf.yaml", rules_yaml, strlen(rules_yaml), err, sizeof err);
    if (rules == NULL) fail_msg("rules: %s", err);
    sl_rule_entry ent = {"user", 4, "bob", 3};
    const sl_rule_entry *descs[1] = {&ent};
    int ndesc[1] = {1};
    sl_check_plan *plan = calloc(1, sizeof *plan);
    sl_check_outcome out;
    assert_non_null(plan);
    assert_int_equal(
        sl_check_plan_make(rules, NULL, "api", 3, descs, ndesc, 1, 1, 5000, plan, err, sizeof err),
        0);
    assert_int_equal(plan->nitems, 2);
    plan->items[1].p.window_ms = 0;
    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_CHECK;
    t.rq.now_ms = 5000;
    t.rq.plan = plan;
    t.rq.outcome = &out;
    refused(f, &t, SL_EWINDOW, "CHECK with a counter of window 0");
    free(plan);
    sl_rules_free(rules);

    memset(&t, 0, sizeof t);
    t.rq.op = SL_BOP_COUNT;
    refused(f, &t, SL_EINVAL, "an unknown op");

    /* and "ok" still has exactly three left */
    sl_result r;
    peek_into(f, &okp, "ok", 5000, 0, &r);
    assert_int_equal(r.remaining, 3);
    assert_int_equal(keys_of(f), 1);
    fx_free(f);
#undef DECIDE_BAD
}

/* ---- (f) stats ------------------------------------------------------------- */

static void run_stats(const bkind *k)
{
    enum { N = 300 };
    fx *f = fx_new(k, SL_LOCK_RECORD);
    sl_params p = SL_PARAMS_INIT;
    p.algo = SL_GCRA;
    p.limit = 3;
    p.window_ms = 1000;
    sl_backend_stats st;
    assert_int_equal(keys_of(f), 0);

    treq *ts = calloc(N, sizeof *ts);
    treq **tp = calloc(N, sizeof *tp);
    char(*kb)[16] = calloc(N, sizeof *kb);
    assert_true(ts && tp && kb);
    for (int op = 0; op < 2; op++) { /* peeks (create nothing), then decides */
        for (int i = 0; i < N; i++) {
            snprintf(kb[i], sizeof kb[i], "s%d", i);
            memset(&ts[i], 0, sizeof ts[i]);
            ts[i].rq.op = op == 0 ? SL_BOP_PEEK : SL_BOP_DECIDE;
            ts[i].rq.params = &p;
            ts[i].rq.key = kb[i];
            ts[i].rq.keylen = strlen(kb[i]);
            ts[i].rq.cost = 1;
            ts[i].rq.now_ms = 100;
            submit(f, &ts[i]);
            memset(kb[i], 0, sizeof kb[i]);
            tp[i] = &ts[i];
        }
        wait_all(f, tp, N);
        for (int i = 0; i < N; i++) ok(&ts[i], op == 0 ? "PEEK" : "DECIDE");
        assert_int_equal(keys_of(f), op == 0 ? 0 : N);
    }
    sl_backend_stats_get(f->b, &st);
    if (!k->redis) assert_true(st.bytes > 0); /* Redis's memory is Redis's: 0 here */
    assert_int_equal(st.evictions, 0);

    /* forget every third key: twice (the second finds nothing) */
    for (int round = 0; round < 2; round++) {
        int n = 0;
        for (int i = 0; i < N; i += 3, n++) {
            snprintf(kb[n], sizeof kb[n], "s%d", i);
            memset(&ts[n], 0, sizeof ts[n]);
            ts[n].rq.op = SL_BOP_FORGET;
            ts[n].rq.key = kb[n];
            ts[n].rq.keylen = strlen(kb[n]);
            ts[n].rq.algo_lo = round == 0 ? SL_GCRA : 0;
            ts[n].rq.algo_hi = round == 0 ? SL_GCRA + 1 : SL_ALGO_COUNT;
            submit(f, &ts[n]);
            tp[n] = &ts[n];
        }
        wait_all(f, tp, (size_t)n);
        for (int i = 0; i < n; i++) {
            ok(&ts[i], "FORGET");
            assert_int_equal(ts[i].rq.existed, round == 0);
        }
        assert_int_equal(keys_of(f), N - n);
    }
    check_async_exercised(f);
    free(ts);
    free(tp);
    free(kb);
    fx_free(f);
}

/* ---- the table of cases ---------------------------------------------------- */

typedef void (*part_fn)(const bkind *k);
static const struct {
    const char *name;
    part_fn fn;
} parts[] = {
    {"vectors", run_vectors}, {"model", run_model},   {"decide_all", run_decide_all},
    {"check", run_check},     {"errors", run_errors}, {"stats", run_stats},
};
#define NPARTS (sizeof parts / sizeof parts[0])

typedef struct tcase {
    const bkind *k;
    part_fn fn;
} tcase;

static void run_case(void **state)
{
    const tcase *c = *state;
    c->fn(c->k);
    if (c->k->redis && !c->k->cluster) redis_after_case(MODULE_ROW(c->k));
}

/* Every redis-server the suite started stops on SIGTERM within its
 * deadline, with status 0, and its log holds no report (REDIS_MARKS): a
 * sanitized module's report at shutdown, or Redis's crash report. */
static void redis_servers_stop_cleanly(void **state)
{
    (void)state;
    int started = 0, bad = 0;
    char why[2][256];
    for (int i = 0; i < 2; i++) {
        started += redis_pids[i] > 0;
        bad |= redis_stop_one(i, why[i], sizeof why[i]) != 0;
    }
    if (bad)
        fail_msg("redis-server: %s%s%s", why[0], why[0][0] && why[1][0] ? "; module's: " : "",
                 why[1]);
    if (started == 0) skip(); /* no Redis row ran (SLUICE_TEST_FILTER) */
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *mp = getenv("SLUICE_MODULE");
    if (mp != NULL && *mp != '\0') { /* else sluice.so of the build that made this test */
        snprintf(module_path, sizeof module_path, "%s", mp);
    } else {
        char self[3072];
        if (realpath(argv[0], self) == NULL) snprintf(self, sizeof self, "%s", argv[0]);
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        snprintf(module_path, sizeof module_path, "%s/../sluice.so", self);
    }
    for (size_t i = 0; i < sizeof long_key; i++) long_key[i] = (unsigned char)(i * 37 + 11);
    static tcase cases[NBACKENDS * NPARTS];
    static char names[NBACKENDS * NPARTS][64];
    static struct CMUnitTest tests[NBACKENDS * NPARTS + 1];
    size_t n = 0;
    for (size_t b = 0; b < NBACKENDS; b++)
        for (size_t p = 0; p < NPARTS; p++) {
            if (backends[b].parts != 0 && !(backends[b].parts & (1u << p))) continue;
            if (backends[b].cluster && getenv("SLUICE_REDIS_CLUSTER") == NULL) continue;
            cases[n] = (tcase){&backends[b], parts[p].fn};
            snprintf(names[n], sizeof names[n], "%s_%s", backends[b].name, parts[p].name);
            tests[n] = (struct CMUnitTest){names[n], run_case, NULL, NULL, &cases[n]};
            n++;
        }
    tests[n++] = (struct CMUnitTest){"redis_servers_stop_cleanly", redis_servers_stop_cleanly, NULL,
                                     NULL, NULL};
    const char *filter = getenv("SLUICE_TEST_FILTER"); /* e.g. "delay_*" */
    if (filter != NULL && *filter != '\0') cmocka_set_test_filter(filter);
    return _cmocka_run_group_tests("backend", tests, n, NULL, NULL);
}
