/*
 * test_commands.c -- sluiced's commands without a network: RESP bytes in
 * through the RESP module (src/proto/resp/) on a detached connection,
 * exact RESP bytes out.  Bad arguments get an "-ERR" naming the problem and
 * leave the key's state as it was.  Every command's reply is checked in
 * RESP2 and, after HELLO 3, in RESP3 (resp3_* tests).
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

/* Runs the command of argc arguments (NULL-ended list of strings, sent as a
 * multibulk, so arguments may hold spaces or be empty) on connection cn at
 * time 0; returns its reply (static). */
static const char *runv_on(sl_conn *cn, const char *arg0, ...)
{
    static char req[4096], reply[65536];
    const char *args[32];
    int argc = 0;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a != NULL && argc < 32; a = va_arg(ap, const char *))
        args[argc++] = a;
    va_end(ap);
    size_t n = (size_t)snprintf(req, sizeof req, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += (size_t)snprintf(req + n, sizeof req - n, "$%zu\r\n%s\r\n", strlen(args[i]), args[i]);
    assert_true(n < sizeof req);
    size_t used = 0;
    sink.len = 0;
    sl_conn_detached_feed(cn, req, n, 0, &used);
    assert_int_equal(used, n);
    assert_true(sink.len < sizeof(reply));
    memcpy(reply, sink.p, sink.len);
    reply[sink.len] = '\0';
    return reply;
}

#define runv(...)         runv_on(conn, __VA_ARGS__, NULL)
#define REPLYV(want, ...) assert_string_equal(runv_on(conn, __VA_ARGS__, NULL), want)

/* The connection's id (CLIENT ID). */
static long long client_id(sl_conn *cn)
{
    const char *r = runv_on(cn, "CLIENT", "ID", NULL);
    assert_int_equal(r[0], ':');
    return strtoll(r + 1, NULL, 10);
}

/* CLIENT INFO's line for a detached connection (no socket: no addresses,
 * fd -1), as a reply in protocol proto (RESP3: a verbatim string). */
static const char *client_info_reply(int proto, long long id, const char *name, long long age,
                                     const char *lib_name, const char *lib_ver)
{
    static char line[1024], want[1100];
    int n = snprintf(line, sizeof line,
                     "id=%lld addr= laddr= fd=-1 name=%s age=%lld idle=0 flags=N db=0 sub=0 psub=0 "
                     "ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 "
                     "oll=0 omem=0 tot-mem=0 events=r cmd=client|info user=default redir=-1 "
                     "resp=%d lib-name=%s lib-ver=%s\n",
                     id, name, age, proto, lib_name, lib_ver);
    if (proto == 3)
        snprintf(want, sizeof want, "=%d\r\ntxt:%s\r\n", n + 4, line);
    else
        snprintf(want, sizeof want, "$%d\r\n%s\r\n", n, line);
    return want;
}

/* HELLO's reply for protocol proto and id: a map in RESP3, pairs in RESP2. */
static const char *hello_reply(int proto, long long id)
{
    static char want[512];
    snprintf(want, sizeof want,
             "%s\r\n$6\r\nserver\r\n$7\r\nsluiced\r\n$7\r\nversion\r\n$%zu\r\n%s\r\n"
             "$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:%lld\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
             "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n",
             proto == 3 ? "%7" : "*14", strlen(SL_VERSION), SL_VERSION, proto, id);
    return want;
}

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
    REPLY("HELLO 4", 0, "-NOPROTO unsupported protocol version\r\n");
    assert_non_null(strstr(run("COMMAND", 0), "rl.allow"));
    REPLY("COMMAND COUNT", 0, ":24\r\n"); /* UNWATCH is the 24th (RL.ACQUIRE .. RL.SETTLE: holds) */
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

    /* RESP3: RL.RULES is a map, NO_RULE's name a null; all else the same */
    char *r2 = strdup(run("RL.RULES", 0));
    assert_memory_equal(run("HELLO 3", 0), "%7\r\n", 4);
    r = run("RL.RULES", 0);
    assert_memory_equal(r, "%8\r\n$7\r\nversion\r\n:", 17);
    assert_memory_equal(r2, "*16\r\n", 5);
    assert_string_equal(r + 4, r2 + 5);
    assert_memory_equal(run("HELLO 2", 0), "*14\r\n", 5);
    char *c2 = strdup(run("RL.CHECK api DESCRIPTOR user dave DESCRIPTOR team red", 0));
    assert_memory_equal(run("HELLO 3", 0), "%7\r\n", 4);
    r = run("RL.CHECK api DESCRIPTOR user erin DESCRIPTOR team red", 0); /* erin: as dave */
    char *no_rule = strstr(c2, "$7\r\nNO_RULE\r\n$-1\r\n");
    assert_non_null(no_rule);
    /* the same bytes but the null: RESP2's "$-1" is RESP3's "_" */
    size_t head = (size_t)(no_rule - c2) + strlen("$7\r\nNO_RULE\r\n");
    assert_memory_equal(r, c2, head);
    assert_memory_equal(r + head, "_\r\n", 3);
    assert_string_equal(r + head + 3, c2 + head + 5);
    free(r2);
    free(c2);

    sl_live_cache_drop(&svc.rules);
    sl_live_free(srv.live);
    srv.live = NULL;
    unlink(path);
}

/* HELLO 3 switches the connection to RESP3 and HELLO 2 back; HELLO alone
 * answers in the current protocol; a refused HELLO changes nothing. */
static void resp3_hello(void **state)
{
    (void)state;
    long long id = client_id(conn);
    assert_true(id > 0);
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP2);
    REPLY("HELLO", 0, hello_reply(2, id));
    REPLY("HELLO 3", 0, hello_reply(3, id));
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP3);
    REPLY("HELLO", 0, hello_reply(3, id)); /* no version: the current one */
    /* refused versions: Redis's errors, and the protocol stays RESP3 */
    REPLY("HELLO 4", 0, "-NOPROTO unsupported protocol version\r\n");
    REPLY("HELLO 1", 0, "-NOPROTO unsupported protocol version\r\n");
    REPLY("HELLO -1", 0, "-NOPROTO unsupported protocol version\r\n");
    REPLY("HELLO 2x", 0, "-ERR Protocol version is not an integer or out of range\r\n");
    REPLY("HELLO 03", 0, "-ERR Protocol version is not an integer or out of range\r\n");
    REPLY("HELLO 99999999999999999999", 0,
          "-ERR Protocol version is not an integer or out of range\r\n");
    REPLYV("-ERR Protocol version is not an integer or out of range\r\n", "HELLO", "");
    REPLY("HELLO 2 FOO", 0, "-ERR Syntax error in HELLO option 'FOO'\r\n");
    REPLY("HELLO 2 SETNAME", 0, "-ERR Syntax error in HELLO option 'SETNAME'\r\n");
    REPLYV("-ERR Client names cannot contain spaces, newlines or special characters.\r\n", "HELLO",
           "2", "SETNAME", "a b");
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP3);
    REPLY("CLIENT GETNAME", 0, "_\r\n"); /* and no name was set */
    /* HELLO 2 SETNAME: back to RESP2, named */
    REPLY("HELLO 2 SETNAME app", 0, hello_reply(2, id));
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP2);
    REPLY("CLIENT GETNAME", 0, "$3\r\napp\r\n");
    REPLY("hello 3 setname app2", 0, hello_reply(3, id));
    REPLY("CLIENT GETNAME", 0, "$4\r\napp2\r\n");
    /* HELLO 3 AUTH default (no password configured: default logs in) */
    REPLY("HELLO 3 AUTH default anything", 0, hello_reply(3, id));
    assert_string_equal(sl_resp_conn_user(conn)->name, "default");
    REPLY("HELLO 3 AUTH nobody x", 0,
          "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
    assert_int_equal(client_id(conn), id); /* one id for the connection's life */
}

/* The replies that RESP3 frames differently (maps, nulls, sets, verbatim
 * strings), exactly, on both protocols; and the ones it does not (the
 * decision arrays, integers, simple strings, errors): the same bytes. */
static void resp3_replies(void **state)
{
    (void)state;
    static const char *const same[] = {
        "RL.ALLOW k 3 1000",
        "RL.PEEK k 3 1000",
        "RL.RESET k",
        "PING",
        "PING hi",
        "ECHO x",
        "SELECT 0",
        "RL.ALLOW k 0 1000",
        "NOSUCH",
        "COMMAND COUNT",
        "CLIENT ID",
        "CLIENT SETNAME n",
    };
    const char *r2[sizeof same / sizeof same[0]];
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) r2[i] = strdup(run(same[i], 0));
    REPLY("CLIENT SETNAME", 0, "-ERR wrong number of arguments for 'client|setname' command\r\n");
    REPLYV("+OK\r\n", "CLIENT", "SETNAME", "");

    /* RESP2 */
    REPLY("CONFIG GET save", 0, "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    REPLY("CONFIG GET appendonly", 0, "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    REPLY("CONFIG GET nosuch", 0, "*0\r\n");
    REPLY("COMMAND DOCS", 0, "*0\r\n");
    REPLY("COMMAND INFO rl.peek nosuch", 0,
          "*2\r\n*6\r\n$7\r\nrl.peek\r\n:-4\r\n*1\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*-1\r\n");
    REPLY("CLIENT GETNAME", 0, "$-1\r\n");
    char body[4096], want[4200];
    const char *info = run("INFO clients", 0);
    assert_memory_equal(info, "$", 1);
    const char *nl = strstr(info, "\r\n");
    size_t blen = strtoul(info + 1, NULL, 10);
    assert_true(blen < sizeof body);
    memcpy(body, nl + 2, blen);
    body[blen] = '\0';
    assert_non_null(strstr(body, "# Clients\r\nconnected_clients:"));
    long long id = client_id(conn);
    REPLY("CLIENT INFO", 0, client_info_reply(2, id, "", 0, "", ""));

    /* RESP3 */
    REPLY("HELLO 3", 0, hello_reply(3, id));
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        assert_string_equal(run(same[i], 0), r2[i]);
        free((void *)r2[i]);
    }
    REPLYV("+OK\r\n", "CLIENT", "SETNAME", "");
    REPLY("CONFIG GET save", 0, "%1\r\n$4\r\nsave\r\n$0\r\n\r\n");
    REPLY("CONFIG GET appendonly", 0, "%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n");
    REPLY("CONFIG GET nosuch", 0, "%0\r\n");
    REPLY("COMMAND DOCS", 0, "%0\r\n");
    REPLY("COMMAND INFO rl.peek nosuch", 0,
          "*2\r\n*6\r\n$7\r\nrl.peek\r\n:-4\r\n~1\r\n+fast\r\n:1\r\n:1\r\n:1\r\n_\r\n");
    assert_memory_equal(run("COMMAND", 0), "*24\r\n*6\r\n$8\r\nrl.allow\r\n:-4\r\n~1\r\n", 31);
    REPLY("CLIENT GETNAME", 0, "_\r\n");
    snprintf(want, sizeof want, "=%zu\r\ntxt:%s\r\n", blen + 4, body);
    REPLY("INFO clients", 0, want);
    REPLY("CLIENT INFO", 0, client_info_reply(3, id, "", 0, "", ""));
    /* errors are the same lines */
    REPLY("RL.ALLOW k 5", 0, "-ERR wrong number of arguments for 'rl.allow' command\r\n");
    REPLY("CLIENT NOSUCH", 0, "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n");

    /* and HELLO 2 brings RESP2's framing back */
    REPLY("HELLO 2", 0, hello_reply(2, id));
    REPLY("CONFIG GET nosuch", 0, "*0\r\n");
    REPLY("CLIENT GETNAME", 0, "$-1\r\n");
}

/* CLIENT's subcommands and SELECT, with Redis's replies and errors. */
static void client_and_select(void **state)
{
    (void)state;
    REPLY("CLIENT GETNAME", 0, "$-1\r\n");
    REPLY("CLIENT SETNAME checkout-7", 0, "+OK\r\n");
    REPLY("CLIENT GETNAME", 0, "$10\r\ncheckout-7\r\n");
    static const char bad[] = "-ERR Client names cannot contain spaces, newlines or special "
                              "characters.\r\n";
    REPLYV(bad, "CLIENT", "SETNAME", "a b");
    REPLYV(bad, "CLIENT", "SETNAME", "a\nb");
    REPLYV(bad, "CLIENT", "SETNAME", "caf\xc3\xa9");
    char longname[SL_RESP_MAX_NAME + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    char want[700];
    snprintf(want, sizeof want, "-ERR Client names: at most %d bytes (got %d)\r\n",
             SL_RESP_MAX_NAME, SL_RESP_MAX_NAME + 1);
    REPLYV(want, "CLIENT", "SETNAME", longname);
    longname[SL_RESP_MAX_NAME] = '\0'; /* exactly the bound: kept */
    REPLYV("+OK\r\n", "CLIENT", "SETNAME", longname);
    snprintf(want, sizeof want, "$%d\r\n%s\r\n", SL_RESP_MAX_NAME, longname);
    REPLY("CLIENT GETNAME", 0, want);
    REPLY("CLIENT GETNAME x", 0, "-ERR wrong number of arguments for 'client|getname' command\r\n");
    REPLY("CLIENT SETNAME a b", 0,
          "-ERR wrong number of arguments for 'client|setname' command\r\n");
    REPLY("CLIENT", 0, "-ERR wrong number of arguments for 'client' command\r\n");

    REPLY("CLIENT SETINFO LIB-NAME redis-py", 0, "+OK\r\n");
    REPLY("client setinfo lib-ver 5.0.1", 0, "+OK\r\n");
    REPLY("CLIENT SETINFO LIB-FOO x", 0, "-ERR Unrecognized option 'LIB-FOO'\r\n");
    REPLYV("-ERR LIB-NAME cannot contain spaces, newlines or special characters.\r\n", "CLIENT",
           "SETINFO", "LIB-NAME", "my lib");
    REPLY("CLIENT SETINFO LIB-NAME", 0,
          "-ERR wrong number of arguments for 'client|setinfo' command\r\n");
    long long id = client_id(conn);
    REPLY("CLIENT INFO", 0, client_info_reply(2, id, longname, 0, "redis-py", "5.0.1"));
    /* age: seconds since the connection's first command (at 0 here) */
    REPLY("CLIENT INFO", 7999, client_info_reply(2, id, longname, 7, "redis-py", "5.0.1"));
    REPLY("CLIENT SETINFO LIB-VER 5.0.2", 0, "+OK\r\n"); /* replaced */
    REPLY("CLIENT INFO", 0, client_info_reply(2, id, longname, 0, "redis-py", "5.0.2"));
    REPLYV("+OK\r\n", "CLIENT", "SETNAME", ""); /* "" removes the name */
    REPLY("CLIENT GETNAME", 0, "$-1\r\n");
    assert_memory_equal(run("CLIENT HELP", 0), "*13\r\n+CLIENT <subcommand>", 21);
    REPLY("CLIENT LIST", 0, "-ERR unknown subcommand 'LIST'. Try CLIENT HELP.\r\n");
    REPLY("CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type none", 0,
          "-ERR unknown subcommand 'MAINT_NOTIFICATIONS'. Try CLIENT HELP.\r\n");

    REPLY("SELECT 0", 0, "+OK\r\n");
    REPLY("SELECT 1", 0, "-ERR DB index is out of range\r\n");
    REPLY("SELECT -1", 0, "-ERR DB index is out of range\r\n");
    REPLY("SELECT 00", 0, "-ERR value is not an integer or out of range\r\n");
    REPLY("SELECT x", 0, "-ERR value is not an integer or out of range\r\n");
    REPLY("SELECT", 0, "-ERR wrong number of arguments for 'select' command\r\n");
}

/* Each connection has its own state: protocol, name, id; freeing it frees
 * that (the ASan build's leak check sees it). */
static void resp3_per_connection(void **state)
{
    (void)state;
    sl_conn *other = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, &sink); /* one sink */
    assert_non_null(other);
    assert_string_equal(runv("HELLO", "3", "SETNAME", "one"), hello_reply(3, client_id(conn)));
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP3);
    assert_int_equal(sl_resp_conn_proto(other), SL_RESP2);
    assert_true(client_id(other) != client_id(conn));
    assert_string_equal(runv_on(other, "CLIENT", "GETNAME", NULL), "$-1\r\n");
    assert_string_equal(runv_on(other, "RL.CHECK", "api", "DESCRIPTOR", "a", "b", NULL),
                        "-ERR no rules loaded (start sluiced with --rules PATH)\r\n");
    REPLY("CLIENT GETNAME", 0, "$3\r\none\r\n");
    sl_conn_detached_free(other);
    /* a new connection: its state from its first command on, with the next id */
    sl_conn *fresh = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, &sink);
    assert_non_null(fresh);
    assert_null(sl_conn_pdata(fresh));
    long long last = client_id(conn);
    assert_string_equal(runv_on(fresh, "PING", NULL), "+PONG\r\n");
    assert_non_null(sl_conn_pdata(fresh));
    assert_int_equal(client_id(fresh), last + 2); /* "other" had last + 1 */
    assert_null(sl_resp_conn_user(fresh));
    assert_int_equal(sl_resp_conn_proto(fresh), SL_RESP2);
    sl_conn_detached_free(fresh);
}

/* Feeds bytes (several commands, as a client pipelines them) to cn at time
 * 0; returns every reply (static). */
static const char *feed_on(sl_conn *cn, const char *bytes, int *status)
{
    static char reply[65536];
    size_t used = 0, n = strlen(bytes);
    sink.len = 0;
    int st = sl_conn_detached_feed(cn, bytes, n, 0, &used);
    if (status != NULL) *status = st;
    assert_int_equal(used, n);
    assert_true(sink.len < sizeof(reply));
    memcpy(reply, sink.p, sink.len);
    reply[sink.len] = '\0';
    return reply;
}

#define FEED(bytes, want) assert_string_equal(feed_on(conn, bytes, NULL), want)

#define TB2_1    "*6\r\n:1\r\n:2\r\n:1\r\n:0\r\n:500\r\n:0\r\n"    /* token bucket 2/s: 1st */
#define TB2_2    "*6\r\n:1\r\n:2\r\n:0\r\n:0\r\n:1000\r\n:0\r\n"   /* 2nd */
#define TB2_3    "*6\r\n:0\r\n:2\r\n:0\r\n:500\r\n:1000\r\n:0\r\n" /* 3rd: denied */
#define TB2_FULL TB2_1 /* a peek of an untouched key: as the 1st, nothing consumed */

/* MULTI ... EXEC: +OK, +QUEUED per command, nothing decided until EXEC,
 * which answers an array of the replies the same commands give outside a
 * transaction, in order; then the connection is out of MULTI. */
static void transactions_run_in_order(void **state)
{
    (void)state;
    sl_conn *other = sl_conn_detached_new(&sl_resp_proto, &svc, &cfg, &sink);
    assert_non_null(other);
    REPLY("MULTI", 0, "+OK\r\n");
    REPLY("RL.ALLOW t 2 1000", 0, "+QUEUED\r\n");
    REPLY("RL.ALLOW t 2 1000", 0, "+QUEUED\r\n");
    REPLY("RL.ALLOW t 2 1000", 0, "+QUEUED\r\n");
    REPLY("PING", 0, "+QUEUED\r\n");
    REPLY("ECHO hi", 0, "+QUEUED\r\n");
    /* queued, not run: another connection sees the key untouched */
    assert_string_equal(runv_on(other, "RL.PEEK", "t", "2", "1000", NULL), TB2_FULL);
    REPLY("EXEC", 0, "*5\r\n" TB2_1 TB2_2 TB2_3 "+PONG\r\n$2\r\nhi\r\n");
    /* the same commands outside a transaction: the same replies */
    REPLY("RL.ALLOW u 2 1000", 0, TB2_1);
    REPLY("RL.ALLOW u 2 1000", 0, TB2_2);
    REPLY("RL.ALLOW u 2 1000", 0, TB2_3);
    REPLY("PING", 0, "+PONG\r\n"); /* out of MULTI */
    /* in one write, as redis-py and node-redis send it; multibulk and inline */
    FEED("MULTI\r\n*4\r\n$8\r\nRL.ALLOW\r\n$1\r\nv\r\n$1\r\n2\r\n$4\r\n1000\r\n"
         "RL.ALLOW v 2 1000\r\nEXEC\r\nPING\r\n",
         "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n" TB2_1 TB2_2 "+PONG\r\n");
    /* an empty transaction */
    FEED("MULTI\r\nEXEC\r\n", "+OK\r\n*0\r\n");
    /* the statistics count each command once: MULTI, 2 queued, EXEC */
    uint64_t before = sl_stat_get(&ws.commands);
    FEED("MULTI\r\nPING\r\nPING\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+PONG\r\n+PONG\r\n");
    assert_int_equal(sl_stat_get(&ws.commands), before + 4);
    sl_conn_detached_free(other);
}

/* Redis's errors, word for word: EXEC and DISCARD without MULTI, nested
 * MULTI (the transaction goes on); a command that cannot be queued
 * (unknown, wrong arity) answers its error and EXEC answers EXECABORT,
 * running nothing; an error while running is one element of EXEC's array
 * and the others still run; DISCARD drops the queue; WATCH is refused,
 * UNWATCH accepted; QUIT inside MULTI closes at once. */
static void transaction_errors(void **state)
{
    (void)state;
    REPLY("EXEC", 0, "-ERR EXEC without MULTI\r\n");
    REPLY("DISCARD", 0, "-ERR DISCARD without MULTI\r\n");
    REPLY("MULTI x", 0, "-ERR wrong number of arguments for 'multi' command\r\n");
    FEED("MULTI\r\nMULTI\r\nPING\r\nEXEC\r\n",
         "+OK\r\n-ERR MULTI calls can not be nested\r\n+QUEUED\r\n*1\r\n+PONG\r\n");

    /* failed to queue: EXECABORT, and nothing ran */
    FEED("MULTI\r\nRL.ALLOW d 2 1000\r\nNOSUCH x\r\nPING\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n-ERR unknown command 'NOSUCH'\r\n+QUEUED\r\n"
         "-EXECABORT Transaction discarded because of previous errors.\r\n");
    FEED("MULTI\r\nRL.ALLOW d 2 1000\r\nECHO\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n-ERR wrong number of arguments for 'echo' command\r\n"
         "-EXECABORT Transaction discarded because of previous errors.\r\n");
    FEED("MULTI\r\nRL.ALLOW d\r\nEXEC x\r\nEXEC\r\n",
         "+OK\r\n-ERR wrong number of arguments for 'rl.allow' command\r\n"
         "-ERR wrong number of arguments for 'exec' command\r\n"
         "-EXECABORT Transaction discarded because of previous errors.\r\n");
    REPLY("RL.PEEK d 2 1000", 0, TB2_FULL);
    REPLY("EXEC", 0, "-ERR EXEC without MULTI\r\n");

    /* failed while running: an element of the array; the rest runs */
    FEED("MULTI\r\nRL.ALLOW e 0 1000\r\nRL.ALLOW e 2 1000\r\nRL.ALLOW e 2 1000 ALGO nope\r\n"
         "RL.ALLOW e 2 1000\r\nRL.CHECK api DESCRIPTOR a b\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*5\r\n"
         "-ERR limit must be an integer between 1 and 1000000000000\r\n" TB2_1
         "-ERR unknown algorithm 'nope'\r\n" TB2_2
         "-ERR no rules loaded (start sluiced with --rules PATH)\r\n");

    /* DISCARD: nothing runs */
    FEED("MULTI\r\nRL.ALLOW f 2 1000\r\nDISCARD\r\nRL.PEEK f 2 1000\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n+OK\r\n" TB2_FULL "-ERR EXEC without MULTI\r\n");
    FEED("MULTI\r\nNOSUCH\r\nDISCARD\r\nPING\r\n",
         "+OK\r\n-ERR unknown command 'NOSUCH'\r\n+OK\r\n+PONG\r\n");

    /* WATCH: refused, in MULTI too (not queued, not dooming); UNWATCH: +OK */
    static const char watch_err[] =
        "-ERR WATCH is not supported: sluiced runs MULTI ... EXEC in order but does not watch "
        "keys (send MULTI without WATCH)\r\n";
    REPLY("WATCH k", 0, watch_err);
    REPLY("UNWATCH", 0, "+OK\r\n");
    char want[512];
    snprintf(want, sizeof want, "+OK\r\n%s+QUEUED\r\n*1\r\n+OK\r\n", watch_err);
    FEED("MULTI\r\nWATCH k\r\nUNWATCH\r\nEXEC\r\n", want);

    /* QUIT inside MULTI: +OK and the connection closes, its queue freed
     * (the ASan build's leak check sees it) */
    int st = 0;
    assert_string_equal(feed_on(conn, "MULTI\r\nRL.ALLOW q 2 1000\r\nQUIT\r\n", &st),
                        "+OK\r\n+QUEUED\r\n+OK\r\n");
    assert_int_equal(st, SL_PROTO_CLOSE);
}

/* The bounds: SL_RESP_MAX_QUEUED commands and max-command bytes queued;
 * one more answers an error naming the bound and dooms the transaction,
 * whose queue is dropped at once. */
static void transaction_bounds(void **state)
{
    (void)state;
    static char many[(SL_RESP_MAX_QUEUED + 3) * 6 + 64], want[(SL_RESP_MAX_QUEUED + 1) * 9 + 64];
    size_t n = 0, w = 0;
    n += (size_t)sprintf(many + n, "MULTI\r\n");
    w += (size_t)sprintf(want + w, "+OK\r\n");
    for (int i = 0; i < SL_RESP_MAX_QUEUED; i++) {
        n += (size_t)sprintf(many + n, "PING\r\n");
        w += (size_t)sprintf(want + w, "+QUEUED\r\n");
    }
    many[n] = '\0';
    want[w] = '\0';
    FEED(many, want);
    REPLY("PING", 0,
          "-ERR transaction too long: at most 1024 commands between MULTI and EXEC (transaction "
          "discarded)\r\n");
    REPLY("PING", 0, "+QUEUED\r\n"); /* as Redis: a doomed transaction still answers +QUEUED */
    REPLY("EXEC", 0, "-EXECABORT Transaction discarded because of previous errors.\r\n");

    /* exactly the bound: runs */
    char *queued = strdup(feed_on(conn, many, NULL)); /* +OK and 1024 +QUEUED, as above */
    assert_non_null(queued);
    assert_int_equal(strlen(queued), 5 + 9 * SL_RESP_MAX_QUEUED);
    free(queued);
    w = (size_t)sprintf(want, "%s", "*1024\r\n");
    for (int i = 0; i < SL_RESP_MAX_QUEUED; i++) w += (size_t)sprintf(want + w, "+PONG\r\n");
    REPLY("EXEC", 0, want);

    /* max-command bytes in all: 47 + 47 > 64 */
    cfg.max_command = 64;
    FEED("MULTI\r\nECHO aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
         "ECHO aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nPING\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n-ERR transaction too large: the commands between MULTI and EXEC may "
         "hold at most max-command (64 bytes) together (transaction discarded)\r\n+QUEUED\r\n"
         "-EXECABORT Transaction discarded because of previous errors.\r\n");
    /* within it: runs */
    FEED("MULTI\r\nECHO aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nPING\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
         "+PONG\r\n");
    cfg.max_command = 1 << 20;
    /* a connection freed in the middle of a transaction frees its queue
     * (the ASan build's leak check) */
    FEED("MULTI\r\nPING\r\nRL.ALLOW x 1 1000\r\n", "+OK\r\n+QUEUED\r\n+QUEUED\r\n");
}

/* RESP3: EXEC's array holds each reply in the connection's protocol; HELLO,
 * AUTH and SELECT are queued and run by EXEC, as in Redis, and a HELLO
 * there switches the protocol of the replies after it. */
static void transaction_resp3(void **state)
{
    (void)state;
    long long id = client_id(conn);
    assert_string_equal(runv("HELLO", "3"), hello_reply(3, id));
    static char want[4096];
    snprintf(want, sizeof want,
             "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*5\r\n_\r\n" TB2_1
             "%s$-1\r\n+OK\r\n",
             hello_reply(2, id));
    FEED("MULTI\r\nCLIENT GETNAME\r\nRL.ALLOW r 2 1000\r\nHELLO 2\r\nCLIENT GETNAME\r\nSELECT 0\r\n"
         "EXEC\r\n",
         want);
    assert_int_equal(sl_resp_conn_proto(conn), SL_RESP2);
    /* AUTH runs when EXEC does (here: no password configured, Redis's error) */
    FEED("MULTI\r\nAUTH pw\r\nSELECT 1\r\nEXEC\r\n",
         "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-ERR AUTH <password> called without any password "
         "configured for the default user. Are you sure your configuration is correct?\r\n"
         "-ERR DB index is out of range\r\n");
    /* HELLO 3 queued: EXEC's header in RESP2 (as sent then), what follows in RESP3 */
    snprintf(want, sizeof want, "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n%s_\r\n", hello_reply(3, id));
    FEED("MULTI\r\nHELLO 3\r\nCLIENT GETNAME\r\nEXEC\r\n", want);
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
        cmocka_unit_test_setup_teardown(resp3_hello, setup, teardown),
        cmocka_unit_test_setup_teardown(resp3_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(client_and_select, setup, teardown),
        cmocka_unit_test_setup_teardown(resp3_per_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(transactions_run_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(transaction_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(transaction_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(transaction_resp3, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
