/*
 * test_pipeline.c -- a pipelined run of RL.ALLOW decided as one batch
 * (resp_commands.c's run, service.h's sl_svc_allow_many, the local
 * backend's DECIDE_MANY over sl_decide_many) answers byte for byte what
 * the same commands answer one at a time.
 *
 * Two servers without a network, each a store, the local backend, one
 * worker's service context and a detached RESP connection: A is fed a
 * seeded random stream of commands -- RL.ALLOW on a few keys (repeats
 * within a run), with and without COST, ALGO and AT, bad ones, RL.PEEK,
 * RL.RESET, MULTI ... EXEC, unknown commands, HELLO 3 / HELLO 2, AUTH as
 * users with and without the right to decide -- in groups of whole
 * commands, each group in one feed (one read: its RL.ALLOW runs are
 * batched); B, with a fresh store, is fed the same commands one per feed
 * (one at a time, the path that existed before batching), each at the
 * time of its group.  The replies, the statistics INFO shows, and the
 * counters the journal's recorder is told of, in order, must be equal;
 * A must have batched.  The clock is the test's: every feed is at a time
 * it chose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"
#include "backend_local.h"
#include "net.h"
#include "resp_commands.h"
#include "service.h"

/* One server: what sluiced's main wires, for one worker. */
typedef struct fx {
    sl_config cfg;
    sl_srv srv;
    sl_svc_ctx svc;
    sl_conn *conn; /* detached: replies go to out */
    sl_buf out;
    sl_buf rec; /* "kind key\n" per counter the recorder was told of */
} fx;

static fx A, B;
static char users_path[64];

static void record(void *arg, unsigned kind, const void *key, size_t klen)
{
    fx *f = arg;
    char head[32];
    snprintf(head, sizeof head, "%u ", kind);
    assert_int_equal(sl_buf_adds(&f->rec, head), 0);
    assert_int_equal(sl_buf_add(&f->rec, key, klen), 0);
    assert_int_equal(sl_buf_adds(&f->rec, "\n"), 0);
}

/* users: with_users 1: the users file below (a login needed); deny_since:
 * --after-crash deny-window's start, INT64_MIN for none. */
static void fx_init(fx *f, int with_users, int64_t deny_since)
{
    char err[512];
    memset(f, 0, sizeof *f);
    f->cfg.max_command = 1 << 20;
    f->cfg.trust_client_time = 1; /* AT t: the decision's time is the client's */
    f->cfg.auth_fail_max = 1000;
    f->cfg.auth_fail_window_ms = 1000;
    f->srv.cfg = &f->cfg;
    f->srv.store = sl_store_new(NULL, NULL);
    assert_non_null(f->srv.store);
    f->srv.backend = sl_backend_local_new(f->srv.store);
    assert_non_null(f->srv.backend);
    assert_int_equal(sl_backend_local_record(f->srv.backend, record, f), 0);
    assert_int_equal(sl_backend_local_deny_window(f->srv.backend, deny_since), 0);
    f->srv.nworkers = 1;
    if (with_users) {
        sl_auth_opts o = {NULL, users_path, 1000, 1000};
        f->srv.auth = sl_auth_new(&o, err, sizeof err);
        if (f->srv.auth == NULL) fail_msg("users file: %s", err);
    }
    assert_int_equal(sl_stats_init(&f->srv.stats, 1), 0);
    if (sl_svc_ctx_init(&f->svc, &f->srv, 0, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    f->conn = sl_conn_detached_new(&sl_resp_proto, &f->svc, &f->cfg, &f->out);
    assert_non_null(f->conn);
}

static void fx_free(fx *f)
{
    sl_conn_detached_free(f->conn);
    sl_svc_ctx_done(&f->svc);
    sl_backend_free(f->srv.backend);
    sl_stats_free(&f->srv.stats);
    sl_auth_free(f->srv.auth);
    sl_store_free(f->srv.store);
    free(f->out.p);
    free(f->rec.p);
    memset(f, 0, sizeof *f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(users_path, sizeof users_path, "/tmp/sluice-test-pipeline-XXXXXX");
    int fd = mkstemp(users_path);
    if (fd < 0) return -1;
    static const char users[] = "user dec on >d +deciding\n"
                                "user rd on >r +reading\n"
                                "user ops on >o +all\n";
    ssize_t w = write(fd, users, sizeof users - 1);
    close(fd);
    return w == (ssize_t)(sizeof users - 1) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(users_path);
    return 0;
}

/* Feeds p[0..n) to f's connection at now: every byte must be used (the
 * stream holds whole commands only). */
static void feed(fx *f, const char *p, size_t n, int64_t now)
{
    size_t used = 0;
    sl_conn_detached_feed(f->conn, p, n, now, &used);
    assert_int_equal(used, n);
}

/* ---- the random stream ------------------------------------------------------ */

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    return (uint32_t)(rng % n);
}

/* Appends one multibulk command of argc arguments to b; returns its start. */
static size_t cmd(sl_buf *b, int argc, const char *const *argv)
{
    size_t at = b->len;
    char head[32];
    snprintf(head, sizeof head, "*%d\r\n", argc);
    assert_int_equal(sl_buf_adds(b, head), 0);
    for (int i = 0; i < argc; i++) {
        snprintf(head, sizeof head, "$%zu\r\n", strlen(argv[i]));
        assert_int_equal(sl_buf_adds(b, head), 0);
        assert_int_equal(sl_buf_adds(b, argv[i]), 0);
        assert_int_equal(sl_buf_adds(b, "\r\n"), 0);
    }
    return at;
}

static const char *const keys[] = {"a", "b", "c", "user:1", "user:2", "k", "x:y", "zz"};
static const char *const algos[] = {"token-bucket",   "gcra",           "fixed-window",
                                    "sliding-log",    "sliding-window", "leaky-bucket",
                                    "sliding-buckets"};

/* One random command at group time now (ms) into b.  Mostly a valid
 * RL.ALLOW (so runs form, longer than SL_SVC_MANY at times); the rest
 * everything that must break a run or answer in its place. */
static void one(sl_buf *b, int64_t now, int with_users)
{
    char lim[16], cost[16], at[32];
    const char *v[20];
    int n = 0;
    uint32_t r = rnd(100);
    snprintf(lim, sizeof lim, "%u", 1 + rnd(4));
    snprintf(cost, sizeof cost, "%u", rnd(3));
    snprintf(at, sizeof at, "%lld", (long long)(now - (int64_t)rnd(3000)));
    if (r < 72) { /* RL.ALLOW key limit window [options] */
        v[n++] = "RL.ALLOW";
        v[n++] = keys[rnd(sizeof keys / sizeof keys[0])];
        v[n++] = lim;
        v[n++] = rnd(2) ? "10s" : "1s";
        if (rnd(4) == 0) v[n++] = "ALGO", v[n++] = algos[rnd(sizeof algos / sizeof algos[0])];
        if (rnd(4) == 0) v[n++] = "COST", v[n++] = cost;
        if (rnd(5) == 0) v[n++] = "AT", v[n++] = at;
        if (rnd(8) == 0) v[n++] = "BURST", v[n++] = "3";
    } else if (r < 80) { /* a bad RL.ALLOW: its error in its place */
        static const char *const bad[][6] = {
            {"RL.ALLOW", "a", "5", NULL},         /* arity */
            {"RL.ALLOW", "a", "x5", "10s", NULL}, /* limit */
            {"RL.ALLOW", "b", "5", "0", NULL},    /* window */
            {"RL.ALLOW", "c", "5", "10s", "ALGO", "nope"},
            {"RL.ALLOW", "a", "5", "10s", "COST", "-1"},
            {"RL.ALLOW", "", "5", "10s", NULL}, /* empty key */
            {"RL.ALLOW", "a", "5", "10s", "AT", "soon"},
            {"RL.ALLOW", "k", "5", "10s", "FROB", NULL},
        };
        const char *const *w = bad[rnd(sizeof bad / sizeof bad[0])];
        while (n < 6 && w[n] != NULL) v[n] = w[n], n++;
    } else if (r < 84) {
        v[n++] = "RL.PEEK", v[n++] = keys[rnd(8)], v[n++] = lim, v[n++] = "10s";
    } else if (r < 87) {
        v[n++] = "RL.RESET", v[n++] = keys[rnd(8)];
    } else if (r < 90) { /* a transaction: its RL.ALLOW queued, run by EXEC */
        const char *m[] = {"MULTI"};
        cmd(b, 1, m);
        const char *d[] = {"RL.ALLOW", keys[rnd(8)], "2", "10s"};
        cmd(b, 4, d);
        const char *e[] = {rnd(4) ? "EXEC" : "DISCARD"};
        cmd(b, 1, e);
        return;
    } else if (r < 92) {
        v[n++] = "NOSUCHCOMMAND", v[n++] = "a";
    } else if (r < 94) {
        v[n++] = "PING";
    } else if (r < 96) {
        v[n++] = "HELLO", v[n++] = rnd(2) ? "3" : "2";
    } else if (with_users) { /* who may decide changes mid-stream */
        static const char *const who[][2] = {{"dec", "d"}, {"rd", "r"}, {"ops", "o"}, {"dec", "x"}};
        const char *const *u = who[rnd(4)];
        v[n++] = "AUTH", v[n++] = u[0], v[n++] = u[1];
    } else {
        v[n++] = "ECHO", v[n++] = "hi";
    }
    cmd(b, n, v);
}

/* The numbers INFO's stats section shows, which batching must not change. */
static void same_stats(const fx *a, const fx *b)
{
    sl_stats_sum x, y;
    sl_stats_sum_get(&a->srv.stats, &x);
    sl_stats_sum_get(&b->srv.stats, &y);
    assert_int_equal(x.commands, y.commands);
    assert_int_equal(x.errors, y.errors);
    for (int k = 0; k < SL_ALGO_COUNT; k++) {
        assert_int_equal(x.decisions[k], y.decisions[k]);
        assert_int_equal(x.allowed[k], y.allowed[k]);
        assert_int_equal(x.denied[k], y.denied[k]);
    }
    for (int k = 0; k < SL_FRONTS; k++) {
        assert_int_equal(x.front_allowed[k], y.front_allowed[k]);
        assert_int_equal(x.front_denied[k], y.front_denied[k]);
    }
    sl_store_stats s, t;
    sl_store_stats_get(a->srv.store, &s);
    sl_store_stats_get(b->srv.store, &t);
    assert_int_equal(s.keys, t.keys);
}

/* HELLO's reply names the connection's id, unique in the process: A's
 * and B's differ.  Each id in b becomes "?" (in place: the digits become
 * spaces after it, so lengths are kept). */
static void mask_ids(sl_buf *b)
{
    static const char id[] = "$2\r\nid\r\n:";
    for (size_t i = 0; i + sizeof id - 1 < b->len; i++) {
        if (memcmp(b->p + i, id, sizeof id - 1) != 0) continue;
        size_t j = i + sizeof id - 1;
        if (j < b->len) b->p[j++] = '?';
        while (j < b->len && b->p[j] >= '0' && b->p[j] <= '9') b->p[j++] = ' ';
    }
}

/* Where two byte strings first differ, printed, then a failure. */
static void same_bytes(const char *what, const sl_buf *x, const sl_buf *y)
{
    size_t i = 0;
    while (i < x->len && i < y->len && x->p[i] == y->p[i]) i++;
    if (i == x->len && i == y->len) return;
    size_t from = i > 80 ? i - 80 : 0;
    print_error("%s differ at byte %zu (batched %zu bytes, one at a time %zu)\n", what, i, x->len,
                y->len);
    print_error("batched:      ...%.*s\n", (int)((x->len > i + 80 ? i + 80 : x->len) - from),
                x->p + from);
    print_error("one at a time: ...%.*s\n", (int)((y->len > i + 80 ? i + 80 : y->len) - from),
                y->p + from);
    fail();
}

/* Runs `groups` groups of the stream from seed on fresh A and B and
 * compares them; returns how many of A's decisions were batched. */
static uint64_t compare_run(uint64_t seed, int groups, int with_users, int64_t deny_since)
{
    fx_init(&A, with_users, deny_since);
    fx_init(&B, with_users, deny_since);
    sl_buf g = {0};
    size_t *starts = NULL, cap = 0;
    int64_t now = 1000000;
    rng = seed;
    for (int k = 0; k < groups; k++) {
        int ncmd = 1 + (int)rnd(rnd(4) == 0 ? 60 : 20);
        size_t nst = 0;
        g.len = 0;
        for (int i = 0; i < ncmd; i++) {
            if (nst + 4 > cap) {
                cap = cap ? 2 * cap : 256;
                starts = realloc(starts, cap * sizeof *starts);
                assert_non_null(starts);
            }
            size_t before = g.len;
            one(&g, now, with_users);
            /* a transaction is three commands: B gets each alone */
            size_t pos = before;
            while (pos < g.len) {
                starts[nst++] = pos;
                const char *s = g.p + pos;
                int argc = atoi(s + 1);
                const char *e = strstr(s, "\r\n") + 2;
                for (int j = 0; j < argc; j++) {
                    size_t len = (size_t)atol(e + 1);
                    e = strstr(e, "\r\n") + 2 + len + 2;
                }
                pos = (size_t)(e - g.p);
            }
        }
        feed(&A, g.p, g.len, now);
        for (size_t i = 0; i < nst; i++) {
            size_t end = i + 1 < nst ? starts[i + 1] : g.len;
            feed(&B, g.p + starts[i], end - starts[i], now);
        }
        now += rnd(700); /* windows of 1 s and 10 s refill between groups */
    }
    mask_ids(&A.out);
    mask_ids(&B.out);
    same_bytes("replies", &A.out, &B.out);
    same_bytes("recorded counters", &A.rec, &B.rec);
    same_stats(&A, &B);
    sl_stats_sum x, y;
    sl_stats_sum_get(&A.srv.stats, &x);
    sl_stats_sum_get(&B.srv.stats, &y);
    assert_int_equal(y.batched, 0); /* one per feed: nothing to batch */
    free(g.p);
    free(starts);
    fx_free(&A);
    fx_free(&B);
    return x.batched;
}

/* ---- the cases ------------------------------------------------------------------ */

/* A short run with its exact replies: the same key three times in one
 * read (the second and third see the first's charge), a bad COST in its
 * place, then more of the run after it. */
static void exact_run(void **state)
{
    (void)state;
    fx_init(&A, 0, INT64_MIN);
    sl_buf in = {0};
    const char *ok[] = {"RL.ALLOW", "k", "2", "10s"};
    const char *bad[] = {"RL.ALLOW", "k", "2", "10s", "COST", "x"};
    const char *other[] = {"RL.ALLOW", "j", "2", "10s"};
    cmd(&in, 4, ok);
    cmd(&in, 4, ok);
    cmd(&in, 4, ok);
    cmd(&in, 6, bad);
    cmd(&in, 4, other);
    cmd(&in, 4, ok);
    feed(&A, in.p, in.len, 5000);
    assert_int_equal(sl_buf_add(&A.out, "", 1), 0);
    assert_string_equal(A.out.p,
                        "*6\r\n:1\r\n:2\r\n:1\r\n:0\r\n:5000\r\n:0\r\n"
                        "*6\r\n:1\r\n:2\r\n:0\r\n:0\r\n:10000\r\n:0\r\n"
                        "*6\r\n:0\r\n:2\r\n:0\r\n:5000\r\n:10000\r\n:0\r\n"
                        "-ERR cost must be an integer between 0 and 1000000000000, got 'x'\r\n"
                        "*6\r\n:1\r\n:2\r\n:1\r\n:0\r\n:5000\r\n:0\r\n"
                        "*6\r\n:0\r\n:2\r\n:0\r\n:5000\r\n:10000\r\n:0\r\n");
    sl_stats_sum x;
    sl_stats_sum_get(&A.srv.stats, &x);
    assert_int_equal(x.batched, 5); /* three, then two after the error */
    assert_int_equal(x.decisions[SL_TOKEN_BUCKET], 5);
    assert_int_equal(x.allowed[SL_TOKEN_BUCKET], 3);
    assert_int_equal(x.denied[SL_TOKEN_BUCKET], 2);
    assert_int_equal(x.errors, 1);
    free(in.p);
    fx_free(&A);
}

/* A run whose calls the service refuses (BURST with an algorithm that has
 * none: sl_params_check's error, not the parser's) among good ones, in
 * two runs of one read, a PING between them; each run has no reply
 * pending before it, so it is answered straight out (run_flush's held
 * path): the replies in order, each error counted once. */
static void run_with_service_errors(void **state)
{
    (void)state;
    fx_init(&A, 0, INT64_MIN);
    sl_buf in = {0};
    const char *ok[] = {"RL.ALLOW", "k", "2", "10s"};
    const char *refused[] = {"RL.ALLOW", "k", "2", "10s", "ALGO", "sliding-log", "BURST", "3"};
    const char *ping[] = {"PING"};
    cmd(&in, 4, ok);
    cmd(&in, 8, refused);
    cmd(&in, 4, ok);
    cmd(&in, 1, ping);
    cmd(&in, 8, refused);
    cmd(&in, 4, ok);
    feed(&A, in.p, in.len, 5000);
    assert_int_equal(sl_buf_add(&A.out, "", 1), 0);
    const char *err = "-ERR burst must be an integer between 1 and 1000000000000, and applies only "
                      "to token-bucket, gcra and leaky-bucket\r\n";
    char want[1024];
    snprintf(want, sizeof want,
             "*6\r\n:1\r\n:2\r\n:1\r\n:0\r\n:5000\r\n:0\r\n%s"
             "*6\r\n:1\r\n:2\r\n:0\r\n:0\r\n:10000\r\n:0\r\n"
             "+PONG\r\n%s"
             "*6\r\n:0\r\n:2\r\n:0\r\n:5000\r\n:10000\r\n:0\r\n",
             err, err);
    assert_string_equal(A.out.p, want);
    sl_stats_sum x;
    sl_stats_sum_get(&A.srv.stats, &x);
    assert_int_equal(x.errors, 2);
    assert_int_equal(x.decisions[SL_TOKEN_BUCKET], 3);
    free(in.p);
    fx_free(&A);
}

/* RL.ALLOW's name is matched first by one 8-byte compare (lookup_hot),
 * the table after: every case of it runs RL.ALLOW, and the names one
 * byte off -- a byte that lower-cases onto '.', 'X' for 'W', '7' for 'w',
 * one byte short or long, "rl.check" of the same length -- are what the
 * table makes of them. */
static void allow_name_any_case(void **state)
{
    (void)state;
    fx_init(&A, 0, INT64_MIN);
    static const char *names[] = {"rl.allow",
                                  "Rl.AlLoW",
                                  "RL.ALLOW",
                                  "RL\x0e" /* | 0x20 is '.' */
                                  "ALLOW",
                                  "RL.ALLOX",
                                  "RL.ALLO",
                                  "RL.ALLOWW",
                                  "RL_ALLOW",
                                  "rl.allo7" /* 'w' ^ 0x40 */,
                                  "rl.check"};
    sl_buf in = {0};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v[] = {names[i], "n", "3", "10s"};
        cmd(&in, 4, v);
    }
    feed(&A, in.p, in.len, 5000);
    assert_int_equal(sl_buf_add(&A.out, "", 1), 0);
    assert_string_equal(A.out.p, "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:3334\r\n:0\r\n"
                                 "*6\r\n:1\r\n:3\r\n:1\r\n:0\r\n:6667\r\n:0\r\n"
                                 "*6\r\n:1\r\n:3\r\n:0\r\n:0\r\n:10000\r\n:0\r\n"
                                 "-ERR unknown command 'RL?ALLOW'\r\n"
                                 "-ERR unknown command 'RL.ALLOX'\r\n"
                                 "-ERR unknown command 'RL.ALLO'\r\n"
                                 "-ERR unknown command 'RL.ALLOWW'\r\n"
                                 "-ERR unknown command 'RL_ALLOW'\r\n"
                                 "-ERR unknown command 'rl.allo7'\r\n"
                                 "-ERR no rules loaded (start sluiced with --rules PATH)\r\n");
    free(in.p);
    fx_free(&A);
}

/* 50 RL.ALLOW of one read on three keys: split into runs of at most
 * SL_SVC_MANY, every one batched, answers as one at a time. */
static void long_run_split(void **state)
{
    (void)state;
    fx_init(&A, 0, INT64_MIN);
    fx_init(&B, 0, INT64_MIN);
    sl_buf in = {0};
    size_t starts[50];
    for (int i = 0; i < 50; i++) {
        const char *v[] = {"RL.ALLOW", keys[i % 3], "20", "10s"};
        starts[i] = cmd(&in, 4, v);
    }
    feed(&A, in.p, in.len, 7000);
    for (int i = 0; i < 50; i++)
        feed(&B, in.p + starts[i], (i < 49 ? starts[i + 1] : in.len) - starts[i], 7000);
    same_bytes("replies", &A.out, &B.out);
    same_bytes("recorded counters", &A.rec, &B.rec);
    same_stats(&A, &B);
    sl_stats_sum x;
    sl_stats_sum_get(&A.srv.stats, &x);
    assert_int_equal(x.batched, 50);
    free(in.p);
    fx_free(&A);
    fx_free(&B);
}

/* The seeded random streams, without users (everyone may decide). */
static void random_streams(void **state)
{
    (void)state;
    uint64_t batched = 0;
    for (uint64_t seed = 1; seed <= 6; seed++)
        batched += compare_run(0x9e3779b97f4a7c15ull * seed, 60, 0, INT64_MIN);
    assert_true(batched > 0);
}

/* With users: AUTH mid-stream changes who may decide; a user without
 * +deciding gets NOPERM for each RL.ALLOW in its place. */
static void random_streams_acl(void **state)
{
    (void)state;
    uint64_t batched = 0;
    for (uint64_t seed = 1; seed <= 4; seed++)
        batched += compare_run(0xbf58476d1ce4e5b9ull * seed, 60, 1, INT64_MIN);
    assert_true(batched > 0);
}

/* --after-crash deny-window: unknown keys answer as full counters inside
 * the window, known ones are decided, batched or not. */
static void random_streams_deny_window(void **state)
{
    (void)state;
    uint64_t batched = 0;
    for (uint64_t seed = 1; seed <= 2; seed++)
        batched += compare_run(0x94d049bb133111ebull * seed, 40, 0, 1000000 - 5000);
    assert_true(batched > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exact_run),
        cmocka_unit_test(long_run_split),
        cmocka_unit_test(random_streams),
        cmocka_unit_test(random_streams_acl),
        cmocka_unit_test(random_streams_deny_window),
        /* last: its connection would shift the client ids the streams mask */
        cmocka_unit_test(run_with_service_errors),
        cmocka_unit_test(allow_name_any_case),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
