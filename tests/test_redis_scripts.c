/*
 * test_redis_scripts.c -- src/backend/redis/sluice.lua, the Redis
 * backend's one script, against the local engine (docs/redis-scripts.md).
 *
 * Starts its own redis-server on a free loopback port (fork + exec, no
 * persistence, stopped by its PID at the end; fails, naming the cause, when
 * redis-server cannot run), loads the script with SCRIPT LOAD and calls it
 * with EVALSHA per the ABI (keys built as the C side builds them, binary):
 *
 *   vectors     every line of $SLUICE_SPEC_DIR/vectors/, six fields exact;
 *   traces      random traces per algorithm (costs 0, 1, the capacity,
 *               above it; times that also run backwards; binary keys with
 *               '{', '}' and NUL; peeks among decisions) against sl_decide /
 *               sl_peek on a local store and the reference model
 *               (tests/model.h): identical replies;
 *   carryover   the same with L, W, B, P changed up and down mid-trace
 *               (local engine only: the model knows one set of parameters);
 *   decide_all  op A against sl_decide_all, and a batch with one denied
 *               member charging none and writing nothing;
 *   check       op C against sl__local_check_exec on plans of a rule set;
 *   exec        op C against the executor (src/lib/checkexec.h) on random
 *               flat plans: flags, quota masks, L = 0 masks, costs, times;
 *   range       parameters, kept counts and times past the exact range are
 *               refused with the SLUICE message and write nothing; the
 *               largest in-range values decide exactly as the local engine;
 *   server_time now = "": a fresh key's reply is sane, a second call sees
 *               the first;
 *   expiry      PTTL after a write covers reset_after_ms (and an hour with
 *               client time); with server time a key of a tiny window is
 *               gone once it has passed (bounded wait).
 *
 * SLUICE_SEED=N changes the random seeds.  SLUICE_REDIS_BENCH=N also times
 * N token-bucket decisions through EVALSHA (one client, no pipelining) and
 * prints decisions/s (bench/redis_script.sh measures with redis-benchmark).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <hiredis/hiredis.h>

#include "backend_local.h"
#include "check.h"
#include "checkexec.h"
#include "model.h"
#include "rules.h"
#include "sluice.h"

#define SCRIPT_PATH   "src/backend/redis/sluice.lua"
#define START_SECONDS 10 /* redis-server must answer PING within this */
#define TWO53         9007199254740992LL
#define HOUR_MS       3600000LL
#define MAX_LINE      4096

static pid_t redis_pid = -1;
static redisContext *rc;
static char sha[48];

/* ---- small helpers ------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int64_t rin(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static void seed(uint64_t salt)
{
    const char *s = getenv("SLUICE_SEED");
    rng_state = (s && *s ? strtoull(s, NULL, 0) : 0x736c756963650aULL) ^ salt;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *fmt_res(const sl_result *r, char *buf, size_t n)
{
    snprintf(buf, n, "%lld %lld %lld %lld %lld %lld", (long long)r->allowed, (long long)r->limit,
             (long long)r->remaining, (long long)r->retry_after_ms, (long long)r->reset_after_ms,
             (long long)r->delay_ms);
    return buf;
}

static int same_res(const sl_result *a, const sl_result *b)
{
    return a->allowed == b->allowed && a->limit == b->limit && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_after_ms == b->reset_after_ms &&
           a->delay_ms == b->delay_ms;
}

static const char *fmt_params(const sl_params *p, char *buf, size_t n)
{
    snprintf(buf, n, "%s L=%lld W=%lld B=%lld P=%lld%s", model_algo_name(p->algo),
             (long long)p->limit, (long long)p->window_ms, (long long)p->burst,
             (long long)p->precision, p->log_rejected ? " log-rejected" : "");
    return buf;
}

/* ---- the server ----------------------------------------------------------- */

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Starts redis-server on port; 0, or -1 with the reason printed. */
static int start_redis(int port)
{
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a killed test does not leave it running */
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        char *argv[] = {"redis-server", "--port",      p,    "--bind",
                        "127.0.0.1",    "--save",      "",   "--appendonly",
                        "no",           "--daemonize", "no", NULL};
        execvp(argv[0], argv);
        int e = errno;
        if (write(pfd[1], &e, sizeof e) < 0) _exit(126);
        _exit(127);
    }
    close(pfd[1]);
    int e = 0;
    ssize_t got = read(pfd[0], &e, sizeof e);
    close(pfd[0]);
    if (got > 0) {
        waitpid(pid, NULL, 0);
        print_error("cannot run redis-server: %s (the redis-server package; scripts/deps.sh)\n",
                    strerror(e));
        return -2;
    }
    redis_pid = pid;
    int64_t deadline = now_ms() + START_SECONDS * 1000;
    while (now_ms() < deadline) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            redis_pid = -1;
            print_error("redis-server on port %d exited at start (status %d)\n", port, status);
            return -1;
        }
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
            freeReplyObject(r);
            if (ok) {
                rc = c;
                return 0;
            }
        }
        redisFree(c);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    print_error("redis-server on port %d did not answer PING within %d s\n", port, START_SECONDS);
    return -1;
}

static void stop_redis(void)
{
    if (rc) redisFree(rc);
    rc = NULL;
    if (redis_pid > 0) {
        kill(redis_pid, SIGTERM);
        waitpid(redis_pid, NULL, 0);
    }
    redis_pid = -1;
}

static int load_script(void)
{
    FILE *f = fopen(SCRIPT_PATH, "r");
    if (f == NULL) {
        char cwd[1024];
        print_error("cannot open %s (from %s): %s\n", SCRIPT_PATH,
                    getcwd(cwd, sizeof cwd) ? cwd : "?", strerror(errno));
        return -1;
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %b", text, n);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    else
        print_error("SCRIPT LOAD failed: %s\n", r ? r->str : rc->errstr);
    freeReplyObject(r);
    return ok ? 0 : -1;
}

static int group_setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    for (int attempt = 0; attempt < 3; attempt++) { /* a port taken between free_port and bind */
        int port = free_port(), r = port > 0 ? start_redis(port) : -1;
        if (r == 0) return load_script();
        if (r == -2) break;
    }
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    stop_redis();
    return 0;
}

static redisReply *cmd(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (r == NULL) fail_msg("redis: %s", rc->errstr);
    return r;
}

static void flushall(void) { freeReplyObject(cmd("FLUSHALL")); }

/* ---- the ABI --------------------------------------------------------------- */

/* The Redis key of (algo, key): "sl:" algo space ":{" key "}" (the whole
 * key is the hash tag). */
static size_t rkey(char *out, const sl_params *p, const void *key, size_t klen)
{
    int n = sprintf(out, "sl:%d%d:{", (int)p->algo, p->space ? 1 : 0);
    memcpy(out + n, key, klen);
    out[n + klen] = '}';
    return (size_t)n + klen + 1;
}

#define MAX_CALLS  64 /* keys of one script call: op M's most */
#define RANGE_TAIL " passes 2^53, the Redis backend's exact range (docs/redis-scripts.md)"

typedef struct call {
    const sl_params *p;
    const void *key;
    size_t klen;
    int64_t cost;
} call;

/* EVALSHA op now with the calls.  now NULL: server time.  Returns the
 * reply (the caller frees it); an error reply is returned as it is. */
static redisReply *evalsha(char op, const int64_t *now, const call *c, size_t n)
{
    enum { MAXA = 4 + MAX_CALLS + 2 + MAX_CALLS * 7 };
    const char *argv[MAXA];
    size_t lens[MAXA];
    static char keys[MAX_CALLS][SL_MAX_KEY + 16], nums[MAX_CALLS * 7 + 2][112];
    assert_true(n <= MAX_CALLS);
    size_t a = 0, k = 0;
    argv[a] = "EVALSHA", lens[a++] = 7;
    argv[a] = sha, lens[a++] = 40;
    snprintf(nums[k], sizeof nums[k], "%zu", n);
    argv[a] = nums[k], lens[a++] = strlen(nums[k++]);
    for (size_t i = 0; i < n; i++) {
        argv[a] = keys[i];
        lens[a++] = rkey(keys[i], c[i].p, c[i].key, c[i].klen);
    }
    static char opbuf[2];
    opbuf[0] = op;
    argv[a] = opbuf, lens[a++] = 1;
    if (now)
        snprintf(nums[k], sizeof nums[k], "%lld", (long long)*now);
    else
        nums[k][0] = '\0';
    argv[a] = nums[k], lens[a++] = strlen(nums[k++]);
    for (size_t i = 0; i < n; i++) {
        const sl_params *p = c[i].p;
        int64_t f[7] = {p->algo,      p->limit,        p->window_ms, p->burst,
                        p->precision, p->log_rejected, c[i].cost};
        if (op == 'B') { /* the 6 parameters as one argument, then the cost */
            snprintf(nums[k], sizeof nums[k], "%lld %lld %lld %lld %lld %lld", (long long)f[0],
                     (long long)f[1], (long long)f[2], (long long)f[3], (long long)f[4],
                     (long long)f[5]);
            argv[a] = nums[k], lens[a++] = strlen(nums[k++]);
            snprintf(nums[k], sizeof nums[k], "%lld", (long long)f[6]);
            argv[a] = nums[k], lens[a++] = strlen(nums[k++]);
            continue;
        }
        for (int j = 0; j < 7; j++) {
            snprintf(nums[k], sizeof nums[k], "%lld", (long long)f[j]);
            argv[a] = nums[k], lens[a++] = strlen(nums[k++]);
        }
    }
    redisReply *r = redisCommandArgv(rc, (int)a, argv, lens);
    if (r == NULL) fail_msg("redis: %s", rc->errstr);
    return r;
}

/* Fills out[0..n) (and *all for A) from a script reply; fails on an error
 * reply or a malformed one. */
static void parse_reply(redisReply *r, char op, size_t n, sl_result *out, int *all)
{
    if (r->type == REDIS_REPLY_ERROR) fail_msg("script error: %s", r->str);
    size_t want = op == 'A' ? 1 + 6 * n : 6, off = op == 'A';
    if (r->type != REDIS_REPLY_ARRAY || r->elements != want)
        fail_msg("script reply: type %d with %zu elements, want an array of %zu", r->type,
                 r->elements, want);
    for (size_t i = 0; i < want; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            fail_msg("script reply element %zu is not an integer", i);
    if (all) *all = op == 'A' ? (int)r->element[0]->integer : -1;
    for (size_t i = 0; i < n; i++) {
        sl_result *o = &out[i];
        o->allowed = r->element[off + 6 * i]->integer;
        o->limit = r->element[off + 6 * i + 1]->integer;
        o->remaining = r->element[off + 6 * i + 2]->integer;
        o->retry_after_ms = r->element[off + 6 * i + 3]->integer;
        o->reset_after_ms = r->element[off + 6 * i + 4]->integer;
        o->delay_ms = r->element[off + 6 * i + 5]->integer;
    }
}

/* One D or P through the script. */
static void script_one(char op, const int64_t *now, const sl_params *p, const void *key,
                       size_t klen, int64_t cost, sl_result *out)
{
    call c = {p, key, klen, cost};
    redisReply *r = evalsha(op, now, &c, 1);
    parse_reply(r, op, 1, out, NULL);
    freeReplyObject(r);
}

/* The error text of a call that must be refused. */
static void expect_refused(char op, const int64_t *now, const call *c, size_t n, const char *want)
{
    redisReply *r = evalsha(op, now, c, n);
    if (r->type != REDIS_REPLY_ERROR)
        fail_msg("expected the error '%s', got reply type %d", want, r->type);
    if (strcmp(r->str, want) != 0) fail_msg("error\n  got  '%s'\n  want '%s'", r->str, want);
    freeReplyObject(r);
}

static long long dbsize(void)
{
    redisReply *r = cmd("DBSIZE");
    long long n = r->integer;
    freeReplyObject(r);
    return n;
}

/* A dump of the whole database (every key, its type, value and TTL
 * present or not): equal before and after means nothing was written. */
static char *db_dump(void)
{
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = '\0';
    redisReply *ks = cmd("KEYS *");
    for (size_t i = 0; i < ks->elements; i++) {
        redisReply *k = ks->element[i];
        redisReply *d = cmd("DUMP %b", k->str, k->len);
        redisReply *t = cmd("PTTL %b", k->str, k->len);
        size_t need = len + k->len + d->len + 64;
        if (need > cap) {
            cap = need * 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        memcpy(out + len, k->str, k->len);
        len += k->len;
        out[len++] = '=';
        memcpy(out + len, d->str, d->len);
        len += d->len;
        len += (size_t)sprintf(out + len, " ttl:%s;", t->integer >= 0 ? "yes" : "no");
        out[len] = '\0';
        freeReplyObject(d);
        freeReplyObject(t);
    }
    freeReplyObject(ks);
    return out;
}

/* ---- (a) the spec's vectors ------------------------------------------------ */

static const char *parse_args(char *s, sl_params *p)
{
    static char why[300];
    char *save = NULL;
    *p = (sl_params)SL_PARAMS_INIT;
    for (char *tok = strtok_r(s, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (strcmp(tok, "--log-rejected") == 0) {
            p->log_rejected = 1;
            continue;
        }
        char *v = strtok_r(NULL, " \t", &save);
        int64_t x = 0;
        int r = v == NULL ? -1 : 0;
        if (r == 0 && strcmp(tok, "--algo") == 0)
            r = sl_algo_parse(v, strlen(v), &p->algo);
        else if (r == 0 && strcmp(tok, "--window") == 0)
            r = sl_duration_parse(v, strlen(v), &p->window_ms);
        else if (r == 0 && (r = sl_int_parse(v, strlen(v), INT64_MAX, &x)) == 0) {
            if (strcmp(tok, "--limit") == 0)
                p->limit = x;
            else if (strcmp(tok, "--burst") == 0)
                p->burst = x;
            else if (strcmp(tok, "--precision") == 0)
                p->precision = x;
            else
                r = -1;
        }
        if (r != 0) {
            snprintf(why, sizeof why, "bad args token '%s'", tok);
            return why;
        }
    }
    return sl_params_check(p) == 0 ? NULL : "args fail sl_params_check";
}

static void run_vector_file(const char *path, long *lines)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) fail_msg("%s: cannot open: %s", path, strerror(errno));
    flushall();
    char line[MAX_LINE];
    int lineno = 0, have_args = 0;
    sl_params p;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "# args:", 7) == 0) {
            const char *why = parse_args(line + 7, &p);
            if (why) fail_msg("%s:%d: %s", path, lineno, why);
            have_args = 1;
            continue;
        }
        if (line[strspn(line, " \t")] == '\0' || line[0] == '#') continue;
        char *bar = strchr(line, '|');
        if (bar == NULL || !have_args) fail_msg("%s:%d: not a request line", path, lineno);
        *bar = '\0';
        char key[SL_MAX_KEY + 1];
        long long t, cost = 1, w[6];
        int n = sscanf(line, "%lld %512s %lld", &t, key, &cost);
        if (n < 2) fail_msg("%s:%d: request is not 'T KEY [COST]'", path, lineno);
        if (sscanf(bar + 1, "%lld %lld %lld %lld %lld %lld", &w[0], &w[1], &w[2], &w[3], &w[4],
                   &w[5]) != 6)
            fail_msg("%s:%d: expected reply is not six integers", path, lineno);
        sl_result got, want = {w[0], w[1], w[2], w[3], w[4], w[5]};
        int64_t now = t;
        script_one('D', &now, &p, key, strlen(key), cost, &got);
        char a[128], b[128];
        if (!same_res(&got, &want))
            fail_msg("%s:%d: got %s, want %s", path, lineno, fmt_res(&got, a, sizeof a),
                     fmt_res(&want, b, sizeof b));
        (*lines)++;
    }
    fclose(f);
    if (!have_args) fail_msg("%s: no '# args:' line", path);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_vectors(void **state)
{
    (void)state;
    const char *dir = getenv("SLUICE_SPEC_DIR");
    if (dir == NULL || *dir == '\0') fail_msg("SLUICE_SPEC_DIR is not set (tests/run.sh sets it)");
    char vdir[2048];
    snprintf(vdir, sizeof vdir, "%s/vectors", dir);
    DIR *d = opendir(vdir);
    if (d == NULL) fail_msg("cannot open %s: %s", vdir, strerror(errno));
    char *names[256];
    int nn = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".txt") != 0) continue;
        if (nn < 256) names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    if (nn == 0) fail_msg("no vector files in %s", vdir);
    qsort(names, (size_t)nn, sizeof names[0], by_name);
    long lines = 0;
    for (int i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", vdir, names[i]);
        run_vector_file(path, &lines);
        free(names[i]);
    }
    print_message("vectors: %d files, %ld lines\n", nn, lines);
}

/* ---- (b) random traces against the local engine and the model -------------- */

/* The keys of a trace: binary, with the hash tag's braces and NUL bytes. */
static const struct {
    const char *k;
    size_t len;
} trace_keys[] = {
    {"a", 1}, {"{x}", 3}, {"k\0}{\0", 6}, {"}", 1}, {"user:\xff\x00\x01{42", 10},
};
#define NKEYS (sizeof trace_keys / sizeof trace_keys[0])

/* Random parameters of algorithm a (log_rejected as given).  big: larger
 * limits and windows. */
static void rand_params(sl_params *p, sl_algo a, int log_rejected)
{
    static const int64_t windows[] = {1, 2, 3, 7, 10, 60, 100, 250, 1000, 60000};
    *p = (sl_params)SL_PARAMS_INIT;
    p->algo = a;
    p->limit = rnd() % 4 == 0 ? rin(1, 2000) : rin(1, 12);
    p->window_ms = windows[rnd() % (sizeof windows / sizeof windows[0])];
    if (a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET)
        p->burst = rnd() % 2 ? 0 : rin(1, 20);
    if (a == SL_SLIDING_BUCKETS) {
        static const int64_t ps[] = {0, 1, 2, 3, 4, 5, 10};
        p->precision = ps[rnd() % 7];
        int64_t P = p->precision ? p->precision : 10;
        p->window_ms = P * rin(1, 300);
    }
    if (a == SL_SLIDING_LOG) p->log_rejected = log_rejected;
    assert_int_equal(sl_params_check(p), 0);
}

static int64_t capacity(const sl_params *p) { return model_capacity(p); }

static int64_t rand_cost(const sl_params *p)
{
    int64_t cap = capacity(p);
    switch (rnd() % 8) {
    case 0: return 0;
    case 1: return cap;
    case 2: return cap + 1;
    case 3: return rin(0, cap + 2);
    default: return 1;
    }
}

/* The next time: mostly forward by a little or by windows, sometimes back. */
static int64_t next_time(int64_t t, int64_t W)
{
    switch (rnd() % 10) {
    case 0: return t - rin(0, 2 * W + 3);
    case 1: return t + rin(W, 3 * W);
    case 2: return t;
    default: return t + rin(0, W / 3 + 1);
    }
}

/* One trace of n requests of algorithm a; change: new parameters (same
 * algorithm) every few requests, compared with the local engine only;
 * else also with the model. */
static void trace(sl_algo a, int log_rejected, int n, int change, int64_t t0)
{
    flushall();
    int err;
    sl_store *s = sl_store_new(NULL, &err);
    assert_non_null(s);
    sl_params p;
    rand_params(&p, a, log_rejected);
    model *m = change ? NULL : model_new(&p);
    int64_t t = t0;
    for (int i = 0; i < n; i++) {
        if (change && rnd() % 6 == 0) rand_params(&p, a, log_rejected);
        t = next_time(t, p.window_ms);
        size_t ki = rnd() % NKEYS;
        const void *key = trace_keys[ki].k;
        size_t klen = trace_keys[ki].len;
        int64_t cost = rand_cost(&p);
        int peek = rnd() % 5 == 0;
        sl_result want, got, mod;
        int lrc = peek ? sl_peek(s, &p, key, klen, t, cost, &want)
                       : sl_decide(s, &p, key, klen, t, cost, &want);
        assert_int_equal(lrc, 0);
        script_one(peek ? 'P' : 'D', &t, &p, key, klen, cost, &got);
        char b1[128], b2[128], b3[160];
        if (!same_res(&got, &want))
            fail_msg("%s, request %d (%s key %zu at %lld cost %lld): script %s, local %s",
                     fmt_params(&p, b3, sizeof b3), i, peek ? "peek" : "decide", ki, (long long)t,
                     (long long)cost, fmt_res(&got, b1, sizeof b1), fmt_res(&want, b2, sizeof b2));
        if (m) {
            if (peek)
                model_peek(m, key, klen, t, cost, &mod);
            else
                model_decide(m, key, klen, t, cost, &mod);
            if (model_error(m)) fail_msg("model: %s", model_error(m));
            if (!same_res(&got, &mod))
                fail_msg("%s, request %d (key %zu at %lld cost %lld): script %s, model %s",
                         fmt_params(&p, b3, sizeof b3), i, ki, (long long)t, (long long)cost,
                         fmt_res(&got, b1, sizeof b1), fmt_res(&mod, b2, sizeof b2));
        }
    }
    if (m) model_free(m);
    sl_store_free(s);
}

static const struct {
    sl_algo a;
    int lr;
} algos[] = {
    {SL_FIXED_WINDOW, 0},    {SL_SLIDING_LOG, 0},  {SL_SLIDING_LOG, 1}, {SL_SLIDING_WINDOW, 0},
    {SL_SLIDING_BUCKETS, 0}, {SL_TOKEN_BUCKET, 0}, {SL_GCRA, 0},        {SL_LEAKY_BUCKET, 0},
};
#define NALGOS (sizeof algos / sizeof algos[0])

static void test_traces(void **state)
{
    (void)state;
    seed(1);
    for (size_t i = 0; i < NALGOS; i++)
        for (int k = 0; k < 6; k++)
            trace(algos[i].a, algos[i].lr, 150, 0, k % 2 ? rin(-5000000, 5000000) : 1700000000000);
}

static void test_carryover(void **state)
{
    (void)state;
    seed(2);
    for (size_t i = 0; i < NALGOS; i++)
        for (int k = 0; k < 8; k++) trace(algos[i].a, algos[i].lr, 200, 1, rin(-100000, 100000));
}

/* ---- (c) decide-all --------------------------------------------------------- */

static void test_decide_all(void **state)
{
    (void)state;
    seed(3);
    flushall();
    int err;
    sl_store *s = sl_store_new(NULL, &err);
    assert_non_null(s);

    /* One denied member charges none and writes nothing, not even clocks. */
    sl_params fw = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = 1000};
    sl_params tb = {.algo = SL_TOKEN_BUCKET, .limit = 1, .window_ms = 1000};
    call c[2] = {{&fw, "a", 1, 1}, {&tb, "b", 1, 2}};
    int64_t now = 100;
    sl_result out[2], r;
    int all;
    redisReply *rep = evalsha('A', &now, c, 2);
    parse_reply(rep, 'A', 2, out, &all);
    freeReplyObject(rep);
    char b1[128];
    assert_int_equal(all, 0);
    assert_string_equal(fmt_res(&out[0], b1, sizeof b1), "1 5 4 0 900 0");
    assert_string_equal(fmt_res(&out[1], b1, sizeof b1), "0 1 1 -1 0 0");
    assert_int_equal(dbsize(), 0);
    script_one('P', &now, &fw, "a", 1, 1, &r);
    assert_string_equal(fmt_res(&r, b1, sizeof b1), "1 5 4 0 900 0");
    /* ... and with the denied one fitting, both are charged. */
    c[1].cost = 1;
    rep = evalsha('A', &now, c, 2);
    parse_reply(rep, 'A', 2, out, &all);
    freeReplyObject(rep);
    assert_int_equal(all, 1);
    assert_string_equal(fmt_res(&out[0], b1, sizeof b1), "1 5 4 0 900 0");
    assert_string_equal(fmt_res(&out[1], b1, sizeof b1), "1 1 0 0 1000 0");
    assert_int_equal(dbsize(), 2);
    flushall();

    /* Random batches (and single decisions between them) vs sl_decide_all. */
    sl_params pool[NKEYS * 2];
    for (size_t i = 0; i < NKEYS * 2; i++) {
        size_t ai = rnd() % NALGOS;
        rand_params(&pool[i], algos[ai].a, algos[ai].lr);
    }
    int64_t t = 5000;
    int denied = 0, charged = 0;
    for (int round = 0; round < 300; round++) {
        t = next_time(t, 300);
        size_t n = (size_t)rin(1, 5), idx[5], used = 0;
        sl_request req[5];
        call cl[5];
        while (used < n) { /* distinct (key, algorithm) pairs */
            size_t pi = rnd() % (NKEYS * 2), ki = pi % NKEYS, dup = 0;
            for (size_t j = 0; j < used; j++)
                dup |= idx[j] % NKEYS == ki && pool[idx[j]].algo == pool[pi].algo;
            if (dup) continue;
            idx[used] = pi;
            int64_t cost = rand_cost(&pool[pi]);
            req[used] = (sl_request){&pool[pi], trace_keys[ki].k, trace_keys[ki].len, cost};
            cl[used] = (call){&pool[pi], trace_keys[ki].k, trace_keys[ki].len, cost};
            used++;
        }
        sl_result want[5], got[5];
        int wall, gall;
        assert_int_equal(sl_decide_all(s, req, n, t, want, &wall), 0);
        rep = evalsha('A', &t, cl, n);
        parse_reply(rep, 'A', n, got, &gall);
        freeReplyObject(rep);
        assert_int_equal(gall, wall);
        denied += !wall;
        charged += wall;
        for (size_t i = 0; i < n; i++) {
            char b2[128], b3[160];
            if (!same_res(&got[i], &want[i]))
                fail_msg("round %d member %zu (%s): script %s, local %s", round, i,
                         fmt_params(cl[i].p, b3, sizeof b3), fmt_res(&got[i], b1, sizeof b1),
                         fmt_res(&want[i], b2, sizeof b2));
        }
        if (rnd() % 2) { /* a single decision in between */
            size_t pi = rnd() % (NKEYS * 2), ki = pi % NKEYS;
            int64_t cost = rand_cost(&pool[pi]);
            sl_result w1, g1;
            assert_int_equal(
                sl_decide(s, &pool[pi], trace_keys[ki].k, trace_keys[ki].len, t, cost, &w1), 0);
            script_one('D', &t, &pool[pi], trace_keys[ki].k, trace_keys[ki].len, cost, &g1);
            assert_true(same_res(&g1, &w1));
        }
    }
    /* both outcomes were exercised */
    assert_true(denied > 0);
    assert_true(charged > 0);
    sl_store_free(s);
}

/* Op M: random batches of up to MAX_CALLS independent decisions (keys may
 * repeat: a later one sees the earlier charge) against sl_decide one by
 * one; a member past the exact range is an error element that writes
 * nothing, and the others stand. */
/* Op M, or op B (M's decisions with two arguments a key), against
 * sl_decide one by one. */
static void many_trace(char op)
{
    seed(5);
    flushall();
    int err;
    sl_store *s = sl_store_new(NULL, &err);
    assert_non_null(s);
    sl_params pool[NKEYS * 2];
    for (size_t i = 0; i < NKEYS * 2; i++) {
        size_t ai = rnd() % NALGOS;
        rand_params(&pool[i], algos[ai].a, algos[ai].lr);
    }
    int64_t t = 5000;
    long allowed = 0, denied = 0;
    for (int round = 0; round < 60; round++) {
        t = next_time(t, 300);
        size_t n = (size_t)rin(1, MAX_CALLS);
        call cl[MAX_CALLS];
        sl_result want[MAX_CALLS];
        for (size_t i = 0; i < n; i++) {
            size_t pi = rnd() % (NKEYS * 2), ki = pi % NKEYS;
            int64_t cost = rand_cost(&pool[pi]);
            cl[i] = (call){&pool[pi], trace_keys[ki].k, trace_keys[ki].len, cost};
            assert_int_equal(
                sl_decide(s, &pool[pi], trace_keys[ki].k, trace_keys[ki].len, t, cost, &want[i]),
                0);
        }
        redisReply *rep = evalsha(op, &t, cl, n);
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != n)
            fail_msg("round %d: %c reply type %d with %zu elements, want %zu", round, op, rep->type,
                     rep->elements, n);
        for (size_t i = 0; i < n; i++) {
            redisReply one = {.type = REDIS_REPLY_ARRAY, .elements = 6};
            one.element = rep->element[i]->element;
            if (rep->element[i]->type != REDIS_REPLY_ARRAY) fail_msg("member %zu: not an array", i);
            one.elements = rep->element[i]->elements;
            sl_result got;
            parse_reply(&one, 'D', 1, &got, NULL);
            char b1[128], b2[128], b3[160];
            if (!same_res(&got, &want[i]))
                fail_msg("op %c round %d member %zu (%s): script %s, local %s", op, round, i,
                         fmt_params(cl[i].p, b3, sizeof b3), fmt_res(&got, b1, sizeof b1),
                         fmt_res(&want[i], b2, sizeof b2));
            allowed += got.allowed;
            denied += !got.allowed;
        }
        freeReplyObject(rep);
    }
    assert_true(allowed > 0 && denied > 0);

    /* A refused member: its error in place, nothing of it written, the
     * member after it decided. */
    flushall();
    sl_params ok = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = 1000};
    sl_params big = {.algo = SL_TOKEN_BUCKET, .limit = 1000000000000LL, .window_ms = 100000};
    call c[3] = {{&ok, "a", 1, 1}, {&big, "b", 1, 1}, {&ok, "a", 1, 1}};
    int64_t now = 100;
    redisReply *rep = evalsha(op, &now, c, 3);
    assert_int_equal(rep->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->elements, 3);
    assert_int_equal(rep->element[1]->type, REDIS_REPLY_ERROR);
    assert_string_equal(rep->element[1]->str, "SLUICE range: B*W = 100000000000000000" RANGE_TAIL);
    assert_int_equal(rep->element[2]->type, REDIS_REPLY_ARRAY);
    assert_int_equal(rep->element[2]->element[2]->integer, 3); /* remaining: 5 - 2 */
    freeReplyObject(rep);
    assert_int_equal(dbsize(), 1);
    sl_store_free(s);
}

static void test_many(void **state)
{
    (void)state;
    many_trace('M');
    many_trace('B');
}

/* ---- op C: RL.CHECK in one call ------------------------------------------- */

/* Every RL.CHECK feature, on every algorithm a rule may use: two limits on
 * one descriptor, shadow, soft, L = 0 (enforced and quota), elastic (fixed-
 * and sliding-window) on the pool, quota mode (with shadow too), replaces. */
static const char check_yaml[] =
    "domain: api\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limit:\n"
    "      - {unit: second, requests_per_unit: 3}\n"
    "      - {unit: minute, requests_per_unit: 20, algorithm: sliding-window}\n"
    "  - {key: ip, rate_limit: {unit: second, requests_per_unit: 2, algorithm: token-bucket}}\n"
    "  - {key: gc, rate_limit: {unit: second, requests_per_unit: 4, algorithm: gcra, burst: 6}}\n"
    "  - {key: lb, rate_limit: {unit: second, requests_per_unit: 3, algorithm: leaky-bucket}}\n"
    "  - {key: lg, rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding-log}}\n"
    "  - {key: sb, rate_limit: {unit: second, requests_per_unit: 4, algorithm: sliding-buckets,\n"
    "     precision: 4}}\n"
    "  - {key: shadow, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 1}}\n"
    "  - {key: soft, rate_limit: {unit: second, requests_per_unit: 5, soft: 20%}}\n"
    "  - {key: blocked, rate_limit: {unit: second, requests_per_unit: 0, name: blocklist}}\n"
    "  - {key: qzero, quota_mode: true, rate_limit: {unit: second, requests_per_unit: 0}}\n"
    "  - {key: tenant, rate_limit: {unit: second, requests_per_unit: 2, elastic: 4}}\n"
    "  - {key: tsw, rate_limit: {unit: second, requests_per_unit: 2, elastic: 200%,\n"
    "     algorithm: sliding-window}}\n"
    "  - {key: qa, quota_mode: true, rate_limit: {unit: second, requests_per_unit: 2}}\n"
    "  - {key: qb, quota_mode: true, rate_limit: {unit: second, requests_per_unit: 3,\n"
    "     algorithm: sliding-window}}\n"
    "  - {key: sq, quota_mode: true, shadow_mode: true,\n"
    "     rate_limit: {unit: second, requests_per_unit: 1}}\n"
    "  - {key: team, rate_limit: {unit: second, requests_per_unit: 2, name: team_default}}\n"
    "  - key: vip\n"
    "    rate_limit: {unit: second, requests_per_unit: 5, name: vip,\n"
    "                 replaces: [{name: team_default}]}\n";

static const char *const check_kv[][2] = {
    {"user", "bob"}, {"user", "ann"}, {"ip", "1"},     {"gc", "g"},    {"lb", "l"},
    {"lg", "x"},     {"sb", "s"},     {"shadow", "s"}, {"soft", "x"},  {"blocked", "z"},
    {"qzero", "q"},  {"tenant", "t"}, {"tsw", "t"},    {"qa", "a"},    {"qb", "b"},
    {"qa", "a2"},    {"sq", "x"},     {"team", "red"}, {"vip", "yes"}, {"nomatch", "q"},
};
#define NCHECK_KV ((int)(sizeof check_kv / sizeof check_kv[0]))

/* A flat plan (src/lib/checkexec.h) as op C takes it (docs/redis-scripts.md),
 * run by the script: item k on the Redis key rk[k] (rl[k] bytes), the pool
 * on rk[x->n].  The outcome goes to o (res and stretched by the items'
 * slots), or the error reply's text to err (returns -1 then). */
static int script_cx(const sl__cx_plan *x, char (*rk)[SL_MAX_KEY + 16], const size_t *rl,
                     sl__cx_out *o, char *err, size_t errlen)
{
    enum { MAXA = 3 + SL_MAX_BATCH + 1 + 7 + SL_MAX_BATCH * 12 + 7 + 1 };
    const char *argv[MAXA];
    size_t lens[MAXA];
    static char nums[MAXA][24];
    const sl__cx_item *it = x->it;
    int m = x->n;
    size_t a = 0, nn = 0;
#define NUM(v)                                                                                     \
    do {                                                                                           \
        snprintf(nums[nn], sizeof nums[nn], "%lld", (long long)(v));                               \
        argv[a] = nums[nn], lens[a++] = strlen(nums[nn++]);                                        \
    } while (0)
    argv[a] = "EVALSHA", lens[a++] = 7;
    argv[a] = sha, lens[a++] = 40;
    NUM(m + (x->pool != NULL));
    for (int i = 0; i < m + (x->pool != NULL); i++) argv[a] = rk[i], lens[a++] = rl[i];
    argv[a] = "C", lens[a++] = 1;
    NUM(x->now_ms);
    NUM(m);
    NUM(x->pool != NULL);
    NUM(x->denied_never);
    NUM(x->qall);
    NUM(x->zmask);
    for (int i = 0; i <= m; i++) {
        const sl__cx_item *t = i < m ? &it[i] : x->pool;
        if (t == NULL) break;
        const sl_params *p = t->p;
        int64_t f[12] = {p->algo, p->limit,  p->window_ms, p->burst, p->precision, p->log_rejected,
                         t->cost, t->shadow, t->quota,     t->lyft,  t->ceiling,   t->qmask};
        for (int j = 0; j < (i < m ? 12 : 7); j++) NUM(f[j]);
    }
    NUM(0); /* nl: no leases (the executor's plan has none) */
#undef NUM
    redisReply *r = redisCommandArgv(rc, (int)a, argv, lens);
    if (r == NULL) fail_msg("redis: %s", rc->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s", r->str);
        freeReplyObject(r);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 + 7 * (size_t)m)
        fail_msg("C reply: type %d with %zu elements, want %d", r->type, r->elements, 3 + 7 * m);
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER) fail_msg("C reply element %zu", i);
    o->allowed = (int)r->element[0]->integer;
    o->quota_denied = (int)r->element[1]->integer;
    o->pool_charged = (int)r->element[2]->integer;
    for (int i = 0; i < m; i++) {
        redisReply **e = r->element + 3 + 7 * i;
        sl_result *y = &o->res[it[i].slot];
        y->allowed = (int)e[0]->integer;
        y->limit = e[1]->integer;
        y->remaining = e[2]->integer;
        y->retry_after_ms = e[3]->integer;
        y->reset_after_ms = e[4]->integer;
        y->delay_ms = e[5]->integer;
        o->stretched[it[i].slot] = (unsigned char)e[6]->integer;
    }
    freeReplyObject(r);
    return 0;
}

/* The plan as op C takes it -- made flat as the local backend makes it
 * for the executor (sl__local_check_flat) -- run by the script: the
 * outcome, or the error reply's text in err (returns -1 then). */
static int script_check(const sl_check_plan *plan, sl_check_outcome *o, char *err, size_t errlen)
{
    static char keys[SL_MAX_BATCH + 1][SL_MAX_KEY + 16];
    size_t lens[SL_MAX_BATCH + 1];
    sl__cx_item xi[SL_MAX_BATCH], pool;
    sl__cx_plan x;
    sl__local_check_flat(NULL, plan, xi, &pool, &x);
    for (int i = 0; i < x.n; i++) {
        const sl_check_item *t = &plan->items[xi[i].slot];
        /* the tag is the domain: "sl:" a s ":{" domain "}" rest */
        int n = sprintf(keys[i], "sl:%d1:{", (int)t->p.algo);
        memcpy(keys[i] + n, t->key, t->taglen);
        keys[i][n + t->taglen] = '}';
        memcpy(keys[i] + n + t->taglen + 1, t->key + t->taglen, t->keylen - t->taglen);
        lens[i] = (size_t)n + t->keylen + 1;
    }
    if (plan->has_pool)
        lens[x.n] = rkey(keys[x.n], &plan->pool, SL_CHECK_POOL_KEY, strlen(SL_CHECK_POOL_KEY));
    memset(o, 0, sizeof *o);
    sl__cx_out xo = {.res = o->res, .stretched = o->stretched};
    if (script_cx(&x, keys, lens, &xo, err, errlen) != 0) return -1;
    o->allowed = xo.allowed;
    o->quota_denied = xo.quota_denied;
    o->pool_charged = xo.pool_charged;
    return 0;
}

/* What each branch of a CHECK was seen doing (all must be, or the test
 * did not exercise op C). */
typedef struct check_seen {
    long allowed, denied, quota_denied, pool_charged, stretched, lyft, shadow_charged, followers,
        zero, peeked_denied;
} check_seen;

/* n random RL.CHECK requests on rules (flags: sl_rules_load_buffer_flags'),
 * each executed by op C and by sl__local_check_exec on a local store, in
 * the same order: identical outcomes.  mixed: each request picks Lyft's
 * counting or not (sl_check_input.lyft) and each descriptor its own cost,
 * 0 to 2, and a user's value is now and then 600 bytes (a digest key). */
static void check_trace(unsigned flags, int mixed, int n, check_seen *seen)
{
    char err[512];
    sl_rules *rules = sl_rules_load_buffer_flags("check.yaml", check_yaml, strlen(check_yaml),
                                                 flags, err, sizeof err);
    if (rules == NULL) fail_msg("rules: %s", err);
    sl_params pool;
    assert_int_equal(sl_check_pool_parse("6/1s", &pool, err, sizeof err), 0);
    sl_store *s = sl_store_new(NULL, NULL);
    assert_non_null(s);
    static sl_check_plan plan;
    int64_t now = 1000000;
    flushall();
    for (int q = 0; q < n; q++) {
        sl_rule_entry ent[SL_CHECK_MAX_DESC];
        const sl_rule_entry *descs[SL_CHECK_MAX_DESC];
        int ndesc[SL_CHECK_MAX_DESC];
        int nd = (int)rin(1, 4);
        for (int d = 0; d < nd; d++) {
            /* a repeat of an earlier descriptor now and then: one counter, costs merged */
            int kv = d > 0 && rin(0, 9) == 0 ? -1 : (int)rin(0, NCHECK_KV - 1);
            if (kv < 0) {
                ent[d] = ent[rin(0, d - 1)];
            } else {
                ent[d] = (sl_rule_entry){check_kv[kv][0], strlen(check_kv[kv][0]), check_kv[kv][1],
                                         strlen(check_kv[kv][1])};
            }
            descs[d] = &ent[d];
            ndesc[d] = 1;
        }
        int64_t cost = rin(0, 9) < 8 ? 1 : rin(0, 4);
        now += rin(0, 9) == 0 ? -rin(1, 300) : rin(0, 150);
        const sl_params *pl = rin(0, 4) ? &pool : NULL;
        int64_t costs[SL_CHECK_MAX_DESC];
        static char longv[2][600];
        for (int d = 0; mixed && d < nd; d++) {
            costs[d] = rin(0, 2);
            if (strcmp(ent[d].key, "user") == 0 && rin(0, 3) == 0) {
                int w = (int)rin(0, 1);
                memset(longv[w], 'a' + w, sizeof longv[w]);
                ent[d].value = longv[w];
                ent[d].valuelen = sizeof longv[w];
            }
        }
        sl_check_input in = {.domain = "api",
                             .dlen = 3,
                             .n = nd,
                             .descs = descs,
                             .ndesc = ndesc,
                             .cost = cost,
                             .costs = mixed ? costs : NULL,
                             .lyft = mixed && rin(0, 1),
                             .pool = pl,
                             .now_ms = now};
        int rcp = sl_check_plan_build(rules, &in, &plan, err, sizeof err);
        assert_int_equal(rcp, 0);
        sl_check_outcome want, got;
        if (sl__local_check_exec(s, &plan, &want, err, sizeof err) != 0)
            fail_msg("request %d: local: %s", q, err);
        if (script_check(&plan, &got, err, sizeof err) != 0)
            fail_msg("request %d: op C refused: %s", q, err);
        if (got.allowed != want.allowed || got.quota_denied != want.quota_denied ||
            got.pool_charged != want.pool_charged)
            fail_msg("request %d at %lld: op C allowed %d quota_denied %d pool_charged %d, local "
                     "%d %d %d",
                     q, (long long)now, got.allowed, got.quota_denied, got.pool_charged,
                     want.allowed, want.quota_denied, want.pool_charged);
        for (int k = 0; k < plan.nitems; k++) {
            const sl_check_item *t = &plan.items[k];
            seen->followers += t->lead != k;
            seen->zero += t->zero;
            if (t->zero || t->lead != k) continue;
            char b1[128], b2[128];
            if (!same_res(&got.res[k], &want.res[k]) || got.stretched[k] != want.stretched[k])
                fail_msg("request %d at %lld, limit %s: op C %s stretched %d, local %s "
                         "stretched %d",
                         q, (long long)now, t->rl->name, fmt_res(&got.res[k], b1, sizeof b1),
                         got.stretched[k], fmt_res(&want.res[k], b2, sizeof b2), want.stretched[k]);
            seen->stretched += got.stretched[k];
            seen->lyft += t->lyft;
            seen->shadow_charged += t->shadow && got.allowed;
            seen->peeked_denied += !got.allowed && !t->lyft;
        }
        seen->allowed += got.allowed;
        seen->denied += !got.allowed;
        seen->quota_denied += got.quota_denied;
        seen->pool_charged += got.pool_charged;
    }
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(dbsize(), (long long)st.keys); /* the same counters on both sides */
    sl_store_free(s);
    sl_rules_free(rules);
}

static void test_check(void **state)
{
    (void)state;
    seed(6);
    check_seen seen = {0};
    check_trace(0, 0, 1500, &seen);
    check_seen lyft = {0};
    check_trace(SL_RULES_COUNT_DENIED, 0, 1500, &lyft);
    /* Lyft's counting per request, per-descriptor costs (0 among them),
     * long keys: what the gRPC front asks (issue 26) */
    check_seen mixed = {0};
    check_trace(0, 1, 1500, &mixed);
    assert_true(mixed.lyft > 0 && mixed.denied > 0 && mixed.allowed > 0);
    assert_true(mixed.followers > 0 && mixed.quota_denied > 0);
    print_message("[ info     ] op C: %ld allowed, %ld denied (%ld every quota descriptor over), "
                  "%ld on the pool (%ld limits stretched), %ld shadow charges, %ld repeated "
                  "counters, %ld L = 0; with Lyft's counting %ld Lyft-counted, %ld denied\n",
                  seen.allowed, seen.denied, seen.quota_denied, seen.pool_charged, seen.stretched,
                  seen.shadow_charged, seen.followers, seen.zero, lyft.lyft, lyft.denied);
    assert_true(seen.allowed > 0 && seen.denied > 0 && seen.quota_denied > 0);
    assert_true(seen.pool_charged > 0 && seen.stretched > 0 && seen.shadow_charged > 0);
    assert_true(seen.followers > 0 && seen.zero > 0 && seen.peeked_denied > 0);
    assert_true(lyft.lyft > 0 && lyft.denied > 0 && lyft.allowed > 0 && lyft.quota_denied > 0);

    /* A refusal writes nothing: a sliding-window limit whose elastic
     * ceiling passes the exact range, in a request whose other counters
     * would be charged first. */
    static const char big_yaml[] =
        "domain: big\n"
        "descriptors:\n"
        "  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n"
        "  - {key: h, rate_limit: {unit: day, requests_per_unit: 1000, elastic: 200000000,\n"
        "     algorithm: sliding-window}}\n";
    char err[512];
    sl_rules *rules = sl_rules_load_buffer_flags("big.yaml", big_yaml, strlen(big_yaml),
                                                 SL_RULES_COUNT_DENIED, err, sizeof err);
    if (rules == NULL) fail_msg("rules: %s", err);
    sl_params pool;
    assert_int_equal(sl_check_pool_parse("6/1s", &pool, err, sizeof err), 0);
    sl_rule_entry ea = {"a", 1, "x", 1}, eh = {"h", 1, "y", 1};
    const sl_rule_entry *descs[2] = {&ea, &eh};
    int ndesc[2] = {1, 1};
    static sl_check_plan plan;
    assert_int_equal(sl_check_plan_make(rules, &pool, "big", 3, descs, ndesc, 2, 1, 5000, &plan,
                                        err, sizeof err),
                     0);
    assert_true(plan.items[0].lyft && plan.items[1].elastic);
    flushall();
    sl_check_outcome o;
    assert_int_equal(script_check(&plan, &o, err, sizeof err), -1);
    assert_string_equal(err, "SLUICE range: (L+1)*W = 17280000086400000" RANGE_TAIL);
    assert_int_equal(dbsize(), 0);
    sl_rules_free(rules);
}

/* ---- op C against the executor: random flat plans ------------------------ */

/* n random flat plans (src/lib/checkexec.h) -- combinations of flags,
 * masks, costs and times that no rule set is needed for -- each run by
 * the executor on a local store and by op C, in the same order, on the
 * same counters: identical replies, field by field. */
static void test_exec(void **state)
{
    (void)state;
    enum { NC = 16, N = 3000 };
    seed(7);
    flushall();
    sl_store *s = sl_store_new(NULL, NULL);
    assert_non_null(s);
    /* the counters plans draw from: every algorithm twice, space 1 */
    sl_params cp[NC], pool;
    char ckey[NC][16];
    for (int c = 0; c < NC; c++) {
        rand_params(&cp[c], (sl_algo)(c % SL_ALGO_COUNT), (int)(rnd() % 2));
        if (cp[c].algo == SL_FIXED_WINDOW && cp[c].window_ms > 1000) cp[c].window_ms = 1000;
        cp[c].space = 1;
        snprintf(ckey[c], sizeof ckey[c], "c%d", c);
    }
    rand_params(&pool, SL_FIXED_WINDOW, 0);
    pool.limit = 40;
    pool.window_ms = 1000;
    pool.space = 1;
    static char rk[SL_MAX_BATCH + 1][SL_MAX_KEY + 16];
    size_t rl[SL_MAX_BATCH + 1];
    long allowed = 0, denied = 0, quota_denied = 0, pool_charged = 0, stretched = 0, lyft = 0;
    int64_t now = 1000000;
    for (int q = 0; q < N; q++) {
        sl__cx_item xi[SL_MAX_BATCH], xp;
        int pick[NC];
        for (int c = 0; c < NC; c++) pick[c] = c;
        int m = (int)rin(1, 6), nd = (int)rin(1, 4);
        sl__cx_plan x = {.store = s, .it = xi, .n = m};
        x.now_ms = now += rin(0, 9) == 0 ? -rin(1, 300) : rin(0, 150);
        x.denied_never = rin(0, 19) == 0;
        for (int k = 0; k < m; k++) {
            int j = (int)rin(k, NC - 1), c = pick[j];
            pick[j] = pick[k], pick[k] = c;
            sl__cx_item *t = &xi[k];
            int window = cp[c].algo == SL_FIXED_WINDOW || cp[c].algo == SL_SLIDING_WINDOW;
            *t = (sl__cx_item){.p = &cp[c], .cost = rin(0, 9) < 8 ? 1 : rin(0, 4), .slot = k};
            t->shadow = rin(0, 6) == 0;
            t->quota = !t->shadow && rin(0, 3) == 0;
            t->lyft = cp[c].algo == SL_FIXED_WINDOW && rin(0, 2) == 0;
            if (window && !t->shadow && !t->quota && !t->lyft)
                t->ceiling = cp[c].limit + rin(1, 2 * cp[c].limit);
            if (t->quota) t->qmask = 1u << rin(0, nd - 1) | (rin(0, 3) ? 0 : 1u << rin(0, nd - 1));
            x.qall |= t->qmask;
            t->key = ckey[c];
            t->keylen = strlen(ckey[c]);
            rl[k] = rkey(rk[k], &cp[c], t->key, t->keylen);
            lyft += t->lyft;
        }
        if (rin(0, 9) == 0) x.zmask = 1u << rin(0, nd - 1);
        x.qall |= x.zmask;
        if (rin(0, 9) < 7) {
            xp = (sl__cx_item){.p = &pool, .cost = rin(0, 9) < 8 ? 1 : rin(0, 3), .slot = -1};
            xp.key = SL_CHECK_POOL_KEY;
            xp.keylen = strlen(SL_CHECK_POOL_KEY);
            rl[m] = rkey(rk[m], &pool, xp.key, xp.keylen);
            x.pool = &xp;
        }
        sl_result wres[SL_MAX_BATCH] = {{0}}, gres[SL_MAX_BATCH] = {{0}};
        unsigned char wst[SL_MAX_BATCH] = {0}, gst[SL_MAX_BATCH] = {0};
        sl__cx_out want = {.res = wres, .stretched = wst}, got = {.res = gres, .stretched = gst};
        char err[512];
        int xrc = sl__cx_run(&x, &want);
        if (xrc != 0) fail_msg("plan %d: executor: %s (item %d)", q, sl_strerror(xrc), want.bad);
        if (script_cx(&x, rk, rl, &got, err, sizeof err) != 0)
            fail_msg("plan %d: op C refused: %s", q, err);
        if (got.allowed != want.allowed || got.quota_denied != want.quota_denied ||
            got.pool_charged != want.pool_charged)
            fail_msg("plan %d at %lld: op C allowed %d quota_denied %d pool_charged %d, executor "
                     "%d %d %d",
                     q, (long long)now, got.allowed, got.quota_denied, got.pool_charged,
                     want.allowed, want.quota_denied, want.pool_charged);
        for (int k = 0; k < m; k++) {
            char b1[128], b2[128], b3[128];
            if (!same_res(&gres[k], &wres[k]) || gst[k] != wst[k])
                fail_msg("plan %d at %lld, counter %d (%s): op C %s stretched %d, executor %s "
                         "stretched %d",
                         q, (long long)now, k, fmt_params(xi[k].p, b3, sizeof b3),
                         fmt_res(&gres[k], b1, sizeof b1), gst[k], fmt_res(&wres[k], b2, sizeof b2),
                         wst[k]);
            stretched += gst[k];
        }
        allowed += got.allowed;
        denied += !got.allowed;
        quota_denied += got.quota_denied;
        pool_charged += got.pool_charged;
    }
    print_message("[ info     ] executor vs op C: %ld plans allowed, %ld denied (%ld every quota "
                  "descriptor over), %ld on the pool (%ld counters stretched), %ld Lyft-counted\n",
                  allowed, denied, quota_denied, pool_charged, stretched, lyft);
    assert_true(allowed > 0 && denied > 0 && quota_denied > 0);
    assert_true(pool_charged > 0 && stretched > 0 && lyft > 0);
    sl_store_stats st;
    sl_store_stats_get(s, &st);
    assert_int_equal(dbsize(), (long long)st.keys); /* the same counters on both sides */
    sl_store_free(s);
}

/* ---- (d) the exact range ---------------------------------------------------- */

/* A call that must be refused with want and change nothing. */
static void refused_writes_nothing(char op, const int64_t *now, const call *c, size_t n,
                                   const char *want)
{
    char *before = db_dump();
    expect_refused(op, now, c, n, want);
    char *after = db_dump();
    assert_string_equal(after, before);
    free(before);
    free(after);
}

/* n requests of p on key at times near t0 with big random costs, the
 * script against the local engine. */
static void exact_trace(const sl_params *p, int64_t t0, int64_t span, int n)
{
    flushall();
    int err;
    sl_store *s = sl_store_new(NULL, &err);
    assert_non_null(s);
    int64_t cap = capacity(p), t = t0;
    for (int i = 0; i < n; i++) {
        int64_t cost;
        switch (rnd() % 5) {
        case 0: cost = cap; break;
        case 1: cost = cap - (int64_t)(rnd() % 3); break;
        case 2: cost = rin(0, cap); break;
        case 3: cost = cap + 1; break;
        default: cost = rin(0, 3); break;
        }
        if (cost > SL_MAX_LIMIT) cost = SL_MAX_LIMIT;
        if (cost < 0) cost = 0;
        int64_t step = rin(-span / 4, span);
        if (t + step < TWO53 && t + step > -TWO53) t += step;
        int peek = rnd() % 5 == 0;
        sl_result want, got;
        assert_int_equal(peek ? sl_peek(s, p, "big", 3, t, cost, &want)
                              : sl_decide(s, p, "big", 3, t, cost, &want),
                         0);
        script_one(peek ? 'P' : 'D', &t, p, "big", 3, cost, &got);
        char b1[128], b2[128], b3[160];
        if (!same_res(&got, &want))
            fail_msg("%s, request %d at %lld cost %lld: script %s, local %s",
                     fmt_params(p, b3, sizeof b3), i, (long long)t, (long long)cost,
                     fmt_res(&got, b1, sizeof b1), fmt_res(&want, b2, sizeof b2));
    }
    sl_store_free(s);
}

static void test_range(void **state)
{
    (void)state;
    seed(4);
    flushall();
    int64_t t = 1000;
    char want[512];

    /* Buckets: B*W = 2^53 exactly is in, 2^53 + W is out. */
    sl_algo buckets[] = {SL_TOKEN_BUCKET, SL_GCRA, SL_LEAKY_BUCKET};
    for (int i = 0; i < 3; i++) {
        sl_params in = {.algo = buckets[i], .limit = 3, .window_ms = 2097152, .burst = 4294967296};
        sl_params out = in;
        out.burst = 4294967297;
        call c = {&out, "k", 1, 1};
        refused_writes_nothing('D', &t, &c, 1, "SLUICE range: B*W = 9007199256838144" RANGE_TAIL);
        refused_writes_nothing('P', &t, &c, 1, "SLUICE range: B*W = 9007199256838144" RANGE_TAIL);
        /* an existing key is left as it was */
        sl_result r;
        script_one('D', &t, &in, "k", 1, 5, &r);
        assert_int_equal(r.allowed, 1);
        refused_writes_nothing('D', &t, &c, 1, "SLUICE range: B*W = 9007199256838144" RANGE_TAIL);
        /* a batch with one refused member writes nothing */
        call two[2] = {{&in, "k2", 2, 1}, c};
        refused_writes_nothing('A', &t, two, 2, "SLUICE range: B*W = 9007199256838144" RANGE_TAIL);
        /* the limit alone (B = 0 means L) */
        sl_params byl = {.algo = buckets[i], .limit = 1000000000000, .window_ms = 315576000000};
        c.p = &byl;
        refused_writes_nothing('D', &t, &c, 1,
                               "SLUICE range: B*W = 315576000000000000000000" RANGE_TAIL);
        /* the largest in range decide exactly: L small and large */
        in.limit = rnd() % 2 ? 1 : 1000000000000;
        exact_trace(&in, TWO53 - 40000000000LL, 4000000, 60);
        in.limit = 7;
        exact_trace(&in, -TWO53 + 1, 1LL << 40, 60);
        sl_params w10y = {.algo = buckets[i], .limit = 28542, .window_ms = 315576000000};
        exact_trace(&w10y, 0, 315576000000 / 20000, 60); /* B*W just below 2^53 */
    }

    /* sliding-window: (L+1)*W, and a kept count*W after W grows. */
    sl_params sw = {.algo = SL_SLIDING_WINDOW, .limit = 4294967296, .window_ms = 2097152};
    call c = {&sw, "w", 1, 1};
    refused_writes_nothing('D', &t, &c, 1, "SLUICE range: (L+1)*W = 9007199256838144" RANGE_TAIL);
    sw.limit = 4294967295;
    exact_trace(&sw, TWO53 - 1 - 100000000, 3000000, 80);
    sl_params big = {.algo = SL_SLIDING_WINDOW, .limit = 1000000000000, .window_ms = 8000};
    sl_result r;
    int64_t t0 = 0, t1 = 16000;
    script_one('D', &t0, &big, "w2", 2, 1000000000000, &r);
    assert_int_equal(r.allowed, 1);
    sl_params wide = {.algo = SL_SLIDING_WINDOW, .limit = 1000, .window_ms = 16000};
    c = (call){&wide, "w2", 2, 1};
    refused_writes_nothing(
        'D', &t1, &c, 1,
        "SLUICE range: the previous window's count*W = 16000000000000000" RANGE_TAIL);

    /* The window algorithms have no parameter bound: the largest values. */
    sl_params fw = {.algo = SL_FIXED_WINDOW, .limit = SL_MAX_LIMIT, .window_ms = SL_MAX_WINDOW_MS};
    exact_trace(&fw, TWO53 - 1 - 4 * SL_MAX_WINDOW_MS, SL_MAX_WINDOW_MS / 3, 60);
    sl_params sb = {.algo = SL_SLIDING_BUCKETS,
                    .limit = SL_MAX_LIMIT,
                    .window_ms = SL_MAX_WINDOW_MS,
                    .precision = 60};
    exact_trace(&sb, -TWO53 + 1, SL_MAX_WINDOW_MS / 7, 60);
    sl_params sl = {.algo = SL_SLIDING_LOG, .limit = SL_MAX_LIMIT, .window_ms = SL_MAX_WINDOW_MS};
    exact_trace(&sl, TWO53 - 1 - 4 * SL_MAX_WINDOW_MS, SL_MAX_WINDOW_MS / 5, 60);
    sl.log_rejected = 1;
    exact_trace(&sl, -TWO53 + 1, SL_MAX_WINDOW_MS / 5, 60);

    /* Times: |now| < 2^53. */
    int64_t far[] = {TWO53, -TWO53, TWO53 + 1};
    for (int i = 0; i < 3; i++) {
        c = (call){&fw, "t", 1, 1};
        snprintf(want, sizeof want, "SLUICE range: |now| = %lld" RANGE_TAIL,
                 (long long)(far[i] < 0 ? -far[i] : far[i]));
        refused_writes_nothing('D', &far[i], &c, 1, want);
    }
    int64_t edge = TWO53 - 1;
    script_one('D', &edge, &fw, "t", 1, 1, &r);
    assert_int_equal(r.allowed, 1);
}

/* ---- (e) server time and expiry --------------------------------------------- */

static long long pttl(const sl_params *p, const char *key)
{
    char k[SL_MAX_KEY + 16];
    size_t n = rkey(k, p, key, strlen(key));
    redisReply *r = cmd("PTTL %b", k, n);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static void test_server_time(void **state)
{
    (void)state;
    flushall();
    /* A 10-year window: the next boundary is years away (2030). */
    sl_params fw = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = SL_MAX_WINDOW_MS};
    sl_result r;
    script_one('D', NULL, &fw, "s", 1, 1, &r);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.limit, 5);
    assert_int_equal(r.remaining, 4);
    assert_int_equal(r.retry_after_ms, 0);
    assert_true(r.reset_after_ms > 0 && r.reset_after_ms <= SL_MAX_WINDOW_MS);
    assert_int_equal(r.delay_ms, 0);
    script_one('D', NULL, &fw, "s", 1, 2, &r);
    assert_int_equal(r.allowed, 1);
    assert_int_equal(r.remaining, 2);
    script_one('P', NULL, &fw, "s", 1, 3, &r);
    assert_int_equal(r.allowed, 0);
    assert_int_equal(r.remaining, 2);
    /* token bucket: the second call sees the first */
    sl_params tb = {.algo = SL_TOKEN_BUCKET, .limit = 1, .window_ms = SL_MAX_WINDOW_MS, .burst = 5};
    script_one('D', NULL, &tb, "s", 1, 2, &r);
    assert_int_equal(r.remaining, 3);
    script_one('D', NULL, &tb, "s", 1, 2, &r);
    assert_int_equal(r.remaining, 1);
}

static void test_expiry(void **state)
{
    (void)state;
    flushall();
    /* Client time: at least an hour, and at least reset_after_ms. */
    sl_params fw = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = 10};
    sl_params fw2h = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = 2 * HOUR_MS};
    sl_params sl = {.algo = SL_SLIDING_LOG, .limit = 5, .window_ms = 3 * HOUR_MS};
    const sl_params *ps[] = {&fw, &fw2h, &sl};
    for (int i = 0; i < 3; i++) {
        int64_t t = 7, before = now_ms();
        sl_result r;
        script_one('D', &t, ps[i], "e", 1, 1, &r);
        long long ttl = pttl(ps[i], "e"), waited = now_ms() - before;
        int64_t floor_ms = r.reset_after_ms > HOUR_MS ? r.reset_after_ms : HOUR_MS;
        if (ttl > floor_ms || ttl < floor_ms - waited - 1)
            fail_msg("%s: PTTL %lld after a write with reset_after %lld (%lld ms passed)",
                     model_algo_name(ps[i]->algo), ttl, (long long)r.reset_after_ms, waited);
    }
    /* Server time: reset_after_ms (at least 1 ms), then gone. */
    flushall();
    sl_params tiny = {.algo = SL_FIXED_WINDOW, .limit = 5, .window_ms = 50};
    int64_t before = now_ms();
    sl_result r;
    script_one('D', NULL, &tiny, "g", 1, 1, &r);
    long long ttl = pttl(&tiny, "g"), waited = now_ms() - before;
    assert_true(r.reset_after_ms >= 1 && r.reset_after_ms <= 50);
    if (ttl > r.reset_after_ms || ttl < r.reset_after_ms - waited - 1)
        fail_msg("PTTL %lld after a write with reset_after %lld (%lld ms passed)", ttl,
                 (long long)r.reset_after_ms, waited);
    int64_t deadline = now_ms() + 5000;
    char k[64];
    size_t kn = rkey(k, &tiny, "g", 1);
    long long exists = 1;
    while (exists && now_ms() < deadline) {
        redisReply *e = cmd("EXISTS %b", k, kn);
        exists = e->integer;
        freeReplyObject(e);
        if (exists) {
            struct timespec ts = {0, 5 * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    assert_int_equal(exists, 0);
    /* A denied request on a fresh key (cost above capacity) keeps 1 ms. */
    script_one('D', NULL, &tiny, "h", 1, 6, &r);
    assert_int_equal(r.retry_after_ms, -1);
    assert_int_equal(r.reset_after_ms, 0);
    assert_true(pttl(&tiny, "h") <= 1);
}

/* ---- bench (SLUICE_REDIS_BENCH=N) ------------------------------------------- */

static long bench_n;

/* A measurement, not a check: run only on request. */
static void test_bench(void **state)
{
    (void)state;
    long n = bench_n > 10000000 ? 10000000 : bench_n;
    flushall();
    sl_params tb = {.algo = SL_TOKEN_BUCKET, .limit = 1000, .window_ms = 1000};
    int64_t t0 = now_ms();
    sl_result r;
    for (long i = 0; i < n; i++) {
        char key[16];
        int64_t t = 1000 + i / 100;
        snprintf(key, sizeof key, "k%ld", i % 1000);
        script_one('D', &t, &tb, key, strlen(key), 1, &r);
    }
    int64_t ms = now_ms() - t0;
    print_message("bench: %ld token-bucket decisions in %lld ms: %.0f/s (one client)\n", n,
                  (long long)ms, ms ? n * 1000.0 / (double)ms : 0.0);
}

int main(void)
{
    const char *e = getenv("SLUICE_REDIS_BENCH");
    bench_n = e ? atol(e) : 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),     cmocka_unit_test(test_traces),
        cmocka_unit_test(test_carryover),   cmocka_unit_test(test_decide_all),
        cmocka_unit_test(test_many),        cmocka_unit_test(test_check),
        cmocka_unit_test(test_exec),        cmocka_unit_test(test_range),
        cmocka_unit_test(test_server_time), cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_bench),
    };
    size_t n = sizeof tests / sizeof tests[0];
    return _cmocka_run_group_tests("test_redis_scripts", tests, bench_n > 0 ? n : n - 1,
                                   group_setup, group_teardown);
}
