/*
 * test_commands.c -- sluiced's commands without a network: RESP bytes in
 * through the RESP module (src/proto/resp/) on a detached connection,
 * exact RESP bytes out.  Bad arguments get an "-ERR" naming the problem and
 * leave the key's state as it was.
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

#include "backend_local.h"
#include "live.h"
#include "net.h"
#include "resp.h"
#include "resp_commands.h"
#include "rules.h"
#include "service.h"

static sl_config cfg;
static sl_srv srv;
static sl_svc_ctx svc;
static sl_conn *conn; /* detached: replies go to sink */
static sl_buf sink;
#define ws (srv.stats.workers[0])

static int setup(void **state)
{
    (void)state;
    char err[256];
    memset(&cfg, 0, sizeof(cfg));
    memset(&srv, 0, sizeof(srv));
    cfg.max_command = 1 << 20;
    srv.cfg = &cfg;
    srv.store = sl_store_new(NULL, NULL);
    srv.backend = srv.store ? sl_backend_local_new(srv.store) : NULL;
    srv.nworkers = 1;
    if (srv.backend == NULL || sl_stats_init(&srv.stats, 1) != 0) return -1;
    if (sl_svc_ctx_init(&svc, &srv, 0, NULL, err, sizeof err) != 0) return -1;
    conn = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, &sink);
    return conn ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    sl_conn_detached_free(conn);
    sl_svc_ctx_done(&svc);
    sl_backend_free(srv.backend);
    sl_stats_free(&srv.stats);
    sl_store_free(srv.store);
    free(sink.p);
    memset(&sink, 0, sizeof sink);
    return 0;
}

/* Runs a space-separated command (sent inline, as telnet would) at time
 * now through the RESP module; returns its reply (static). */
static const char *run(const char *line, int64_t now)
{
    static char copy[1024], reply[65536];
    snprintf(copy, sizeof(copy), "%s\r\n", line);
    size_t used = 0;
    sink.len = 0;
    sl_conn_detached_feed(conn, copy, strlen(copy), now, &used);
    assert_int_equal(used, strlen(copy));
    assert_true(sink.len < sizeof(reply));
    memcpy(reply, sink.p, sink.len);
    reply[sink.len] = '\0';
    return reply;
}

#define REPLY(line, now, want) assert_string_equal(run(line, now), want)

static void allow_and_peek(void **state)
{
    (void)state;
    /* the token-bucket vector: 3 tokens, 1 per second */
    REPLY("RL.ALLOW x 1 1000 BURST 3", 0, "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:1000\r\n:0\r\n");
    REPLY("RL.PEEK x 1 1000 BURST 3", 0, "*6\r\n:1\r\n:3\r\n:1\r\n:0\r\n:2000\r\n:0\r\n");
    REPLY("rl.allow x 1 1s burst 3", 0, "*6\r\n:1\r\n:3\r\n:1\r\n:0\r\n:2000\r\n:0\r\n");
    REPLY("RL.ALLOW x 1 1000 BURST 3", 0, "*6\r\n:1\r\n:3\r\n:0\r\n:0\r\n:3000\r\n:0\r\n");
    REPLY("RL.ALLOW x 1 1000 BURST 3", 0, "*6\r\n:0\r\n:3\r\n:0\r\n:1000\r\n:3000\r\n:0\r\n");
    REPLY("RL.ALLOW x 1 1000 BURST 3 COST 4", 0, "*6\r\n:0\r\n:3\r\n:0\r\n:-1\r\n:3000\r\n:0\r\n");
    /* leaky bucket tells how long to wait */
    REPLY("RL.ALLOW q 1 1s ALGO leaky-bucket BURST 3", 0, "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:1000\r\n:0\r\n");
    REPLY("RL.ALLOW q 1 1s ALGO leaky-bucket BURST 3", 0, "*6\r\n:1\r\n:3\r\n:1\r\n:0\r\n:2000\r\n:1000\r\n");
    /* the same key under another algorithm is another state */
    REPLY("RL.ALLOW x 3 1m ALGO fixed-window", 0, "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:60000\r\n:0\r\n");
    assert_int_equal(sl_stat_get(&ws.decisions[SL_TOKEN_BUCKET]), 5);
    assert_int_equal(sl_stat_get(&ws.denied[SL_TOKEN_BUCKET]), 2);
}

static void reset(void **state)
{
    (void)state;
    REPLY("RL.ALLOW r 5 10s", 0, "*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:2000\r\n:0\r\n");
    REPLY("RL.ALLOW r 5 10s ALGO gcra", 0, "*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:2000\r\n:0\r\n");
    REPLY("RL.RESET r ALGO gcra", 0, ":1\r\n");
    REPLY("RL.RESET r ALGO gcra", 0, ":0\r\n");
    REPLY("RL.RESET r", 0, ":1\r\n"); /* every algorithm: the token bucket was left */
    REPLY("RL.RESET r", 0, ":0\r\n");
    REPLY("RL.ALLOW r 5 10s", 0, "*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:2000\r\n:0\r\n");
}

static void errors_name_the_problem(void **state)
{
    (void)state;
    REPLY("RL.ALLOW k 5 10s ALGO tokenbucket", 0, "-ERR unknown algorithm 'tokenbucket'\r\n");
    REPLY("RL.ALLOW k 0 10s", 0, "-ERR limit must be an integer between 1 and 1000000000000\r\n");
    REPLY("RL.ALLOW k abc 10s", 0, "-ERR limit must be an integer between 1 and 1000000000000\r\n");
    REPLY("RL.ALLOW k 1000000000001 10s", 0,
          "-ERR limit must be an integer between 1 and 1000000000000\r\n");
    assert_non_null(strstr(run("RL.ALLOW k 5 10x", 0), "-ERR window must be"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s COST -1", 0), "-ERR cost must be"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s COST", 0), "-ERR option COST needs a value"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s COST 1 COST 2", 0), "given twice"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s FOO 1", 0), "-ERR unknown option 'FOO'"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s ALGO fixed-window BURST 3", 0), "-ERR burst"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s ALGO sliding-buckets PRECISION 7", 0),
                           "-ERR precision"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s LOGREJECTED", 0), "-ERR log-rejected"));
    assert_non_null(strstr(run("RL.ALLOW k 5 10s AT 5", 0), "-ERR AT is refused"));
    assert_non_null(strstr(run("RL.ALLOW k 5", 0), "-ERR wrong number of arguments"));
    assert_non_null(strstr(run("NOSUCH a b", 0), "-ERR unknown command 'NOSUCH'"));
    /* none of it touched the key */
    REPLY("RL.PEEK k 5 10s", 0, "*6\r\n:1\r\n:5\r\n:4\r\n:0\r\n:2000\r\n:0\r\n");
}

static void trusted_client_time(void **state)
{
    (void)state;
    cfg.trust_client_time = 1;
    REPLY("RL.ALLOW t 3 60000 ALGO fixed-window AT 10800000", 999,
          "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:60000\r\n:0\r\n");
    REPLY("RL.ALLOW t 3 60000 ALGO fixed-window AT 10865000", 999,
          "*6\r\n:1\r\n:3\r\n:2\r\n:0\r\n:55000\r\n:0\r\n");
    cfg.trust_client_time = 0;
}

static void small_commands(void **state)
{
    (void)state;
    REPLY("PING", 0, "+PONG\r\n");
    REPLY("PING hello", 0, "$5\r\nhello\r\n");
    REPLY("ECHO hi", 0, "$2\r\nhi\r\n");
    REPLY("QUIT", 0, "+OK\r\n");
    assert_non_null(strstr(run("HELLO 2", 0), "$7\r\nsluiced\r\n"));
    assert_non_null(strstr(run("HELLO 3", 0), "-NOPROTO"));
    assert_non_null(strstr(run("COMMAND", 0), "rl.allow"));
    REPLY("COMMAND COUNT", 0, ":15\r\n"); /* AUTH is the 15th */
    const char *info = run("INFO", 0);
    assert_non_null(strstr(info, "# Server\r\n"));
    assert_non_null(strstr(info, "# Clients\r\n"));
    assert_non_null(strstr(info, "# Stats\r\n"));
    assert_non_null(strstr(info, "# Memory\r\n"));
    assert_non_null(strstr(info, "algo_token-bucket:decisions="));
    info = run("INFO memory", 0);
    assert_null(strstr(info, "# Server"));
    assert_non_null(strstr(info, "used_memory:"));
    info = run("INFO latency", 0);
    assert_non_null(strstr(info, "decision_latency_sample_every:16\r\n"));
    assert_non_null(strstr(info, "decision_latency_le_inf:"));
    assert_null(strstr(info, "# Stats"));
}

static void check_with_rules(void **state)
{
    (void)state;
    REPLY("RL.CHECK api DESCRIPTOR user bob", 0,
          "-ERR no rules loaded (start sluiced with --rules PATH)\r\n");
    static const char yaml[] = "domain: api\n"
                               "descriptors:\n"
                               "  - key: user\n"
                               "    rate_limit: {unit: minute, requests_per_unit: 2}\n"
                               "  - key: path\n"
                               "    value: /login\n"
                               "    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    char path[] = "/tmp/sluice-test-rules-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, yaml, sizeof(yaml) - 1), (ssize_t)(sizeof(yaml) - 1));
    close(fd);
    char err[SL_LIVE_ERR];
    srv.live = sl_live_new(path);
    assert_non_null(srv.live);
    if (sl_live_reload(srv.live, "test", err, sizeof(err)) != 0) fail_msg("%s", err);
    /* two descriptors: both within their limits, both charged */
    const char *r = run("RL.CHECK api DESCRIPTOR user bob DESCRIPTOR path /login", 0);
    assert_memory_equal(r, "*8\r\n:1\r\n", 8);
    assert_non_null(strstr(r, "*6\r\n$2\r\nOK\r\n"));
    /* the /login hour is used up: denied, and bob is not charged */
    r = run("RL.CHECK api DESCRIPTOR user bob DESCRIPTOR path /login", 1000);
    assert_memory_equal(r, "*8\r\n:0\r\n", 8);
    assert_non_null(strstr(r, "$10\r\nOVER_LIMIT\r\n"));
    r = run("RL.CHECK api DESCRIPTOR user bob", 2000); /* bob still has his second */
    assert_memory_equal(r, "*7\r\n:1\r\n:2\r\n:0\r\n", 16);
    /* no rule for this descriptor: NO_RULE, nil name */
    r = run("RL.CHECK api DESCRIPTOR team red", 0);
    assert_non_null(strstr(r, "$7\r\nNO_RULE\r\n$-1\r\n"));
    assert_non_null(strstr(run("RL.CHECK api COST x DESCRIPTOR user bob", 0), "-ERR cost must be"));
    assert_non_null(strstr(run("RL.CHECK api DESCRIPTOR user bob team", 0), "has no value"));
    assert_non_null(strstr(run("RL.CHECK api FOO 1 DESCRIPTOR user bob", 0), "expected COST, AT"));

    /* RL.RULES lists what serves */
    r = run("RL.RULES", 0);
    assert_memory_equal(r, "*16\r\n$7\r\nversion\r\n:", 17);
    /* bob: checked 3 times (the second denied by /login, not by his limit) */
    assert_non_null(strstr(r, "*8\r\n$8\r\napi.user\r\n$8\r\napi.user\r\n$21\r\n2/minute fixed-window\r\n"
                              "$7\r\nenforce\r\n:3\r\n:0\r\n:0\r\n:0\r\n"));
    assert_non_null(strstr(r, "$15\r\napi.path_/login\r\n$19\r\n1/hour fixed-window\r\n"
                              "$7\r\nenforce\r\n:2\r\n:1\r\n:0\r\n:0\r\n"));
    assert_non_null(strstr(r, "$10\r\nlast_error\r\n$0\r\n\r\n"));
    assert_non_null(strstr(run("RL.RULES FOO", 0), "-ERR usage: RL.RULES [RELOAD]"));
    const char *info = run("INFO rules", 0);
    assert_non_null(strstr(info, "rules_reloads:1\r\n"));
    assert_non_null(strstr(info, "rules_last_error:\r\n"));

    /* a broken file: refused with its position, the old rules keep serving */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minutes, "
          "requests_per_unit: 2}\n",
          f);
    fclose(f);
    r = run("RL.RULES RELOAD", 0);
    assert_non_null(strstr(r, "-ERR rules not reloaded, version "));
    assert_non_null(strstr(r, ":4:24: unknown unit 'minutes'"));
    r = run("RL.CHECK api DESCRIPTOR user carol", 0);
    assert_non_null(strstr(r, "$8\r\napi.user\r\n:2\r\n:1\r\n"));
    info = run("INFO rules", 0);
    assert_non_null(strstr(info, "rules_reload_failures:1\r\n"));
    assert_non_null(strstr(info, "unknown unit 'minutes'"));

    /* fixed: the new set serves at once, under its own name */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {name: per_user, unit: "
          "minute, requests_per_unit: 5}\n",
          f);
    fclose(f);
    r = run("RL.RULES RELOAD", 0);
    assert_int_equal(r[0], ':');
    r = run("RL.CHECK api DESCRIPTOR user carol", 0);
    assert_non_null(strstr(r, "$8\r\nper_user\r\n:5\r\n:3\r\n")); /* counts kept: 2 used */
    info = run("INFO rules", 0);
    assert_non_null(strstr(info, "rules_last_error:\r\n"));
    assert_non_null(strstr(info, "rules_reloads:2\r\n"));

    sl_live_cache_drop(&svc.rules);
    sl_live_free(srv.live);
    srv.live = NULL;
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(allow_and_peek, setup, teardown),
        cmocka_unit_test_setup_teardown(reset, setup, teardown),
        cmocka_unit_test_setup_teardown(errors_name_the_problem, setup, teardown),
        cmocka_unit_test_setup_teardown(trusted_client_time, setup, teardown),
        cmocka_unit_test_setup_teardown(small_commands, setup, teardown),
        cmocka_unit_test_setup_teardown(check_with_rules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
