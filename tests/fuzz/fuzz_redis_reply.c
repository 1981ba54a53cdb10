/*
 * fuzz_redis_reply.c -- libFuzzer target for reading Redis's replies: the
 * bytes a Redis server (or anything pretending to be one) sends go
 * through hiredis's reader with the backend's bounded reply functions
 * (src/backend/redis/reply.c), and every reply read goes through
 * sl__redis_parse_reply as the answer to each kind of request the backend
 * sends (DECIDE, PEEK, FORGET, DECIDE_ALL by the script and by the
 * module, CHECK), and as a Sentinel's SENTINEL get-master-addr-by-name and
 * a master's ROLE (redis/sentinel.h).  Checks, aborting so libFuzzer
 * keeps the input:
 *   - no reply holds more than the bounds (SL_REDIS_REPLY_ELEMENTS per
 *     array, SL_REDIS_REPLY_OBJECTS in all, SL_REDIS_REPLY_STRING per
 *     string), and every refusal says why;
 *   - a reply parses or is refused, never read past (ASan), and an
 *     accepted one sets what its request reads: a CHECK's outcome fields
 *     are 0 or 1, a DECIDE_ALL's nreqs results all set.
 * The first input byte picks the feed's chunk size (replies split across
 * reads as they arrive from a socket), the second the DECIDE_ALL's nreqs
 * and the CHECK plan's counters.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "redis/reply.h"
#include "redis/sentinel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sl_check_plan plan;
static sl_check_outcome outcome;

static size_t objects(const redisReply *r)
{
    size_t n = 1;
    if (r->type == REDIS_REPLY_ARRAY) {
        if (r->elements > SL_REDIS_REPLY_ELEMENTS) __builtin_trap();
        for (size_t i = 0; i < r->elements; i++) n += objects(r->element[i]);
    } else if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
               r->type == REDIS_REPLY_ERROR) {
        if (r->len > SL_REDIS_REPLY_STRING || r->str == NULL || r->str[r->len] != '\0')
            __builtin_trap();
    }
    return n;
}

/* Reads x as a Sentinel's and a master's answer (redis/sentinel.h): a
 * master found has a host of allowed bytes and a port 1..65535; a
 * refusal says why and gives nothing. */
static void parse_sentinel(const redisReply *x)
{
    char host[SL_SENTINEL_HOST], why[300];
    int port;
    why[0] = '\0';
    int rc = sl__sentinel_addr_says(x, host, &port, why, sizeof why);
    if (rc == 1 && (host[0] == '\0' || strlen(host) >= SL_SENTINEL_HOST || port < 1 ||
                    port > 65535 || strcspn(host, " /\r\n") != strlen(host)))
        __builtin_trap();
    if (rc != 1 && (host[0] != '\0' || port != 0)) __builtin_trap();
    if (rc == -1 && why[0] == '\0') __builtin_trap();
    why[0] = '\0';
    if (sl__sentinel_role_says(x, why, sizeof why) != 1 && why[0] == '\0') __builtin_trap();
}

/* Reads x as the answer to each kind of request. */
static void parse_all(const redisReply *x, int nreqs, int nitems)
{
    parse_sentinel(x);
    static sl_params p;
    sl_result results[SL_MAX_BATCH];
    for (int op = 0; op < SL_BOP_COUNT; op++) {
        for (int module = 0; module < 2; module++) {
            sl_breq rq;
            memset(&rq, 0, sizeof rq);
            rq.op = (sl_bop)op;
            rq.params = &p;
            rq.nreqs = (size_t)nreqs;
            memset(results, 0xa5, sizeof results);
            rq.results = results;
            rq.plan = &plan;
            rq.outcome = &outcome;
            plan.nitems = nitems;
            for (int k = 0; k < nitems; k++) {
                plan.items[k].lead = k % 3 == 2 ? k - 1 : k; /* some share a counter */
                plan.items[k].zero = k % 5 == 4;
            }
            if (sl__redis_parse_reply(&rq, x, module) != 0) continue;
            if (op == SL_BOP_CHECK &&
                (outcome.allowed > 1 || outcome.quota_denied > 1 || outcome.pool_charged > 1))
                __builtin_trap();
            if (op == SL_BOP_DECIDE_ALL)
                for (int i = 0; i < nreqs; i++)
                    if (results[i].limit == (int64_t)0xa5a5a5a5a5a5a5a5ULL &&
                        results[i].allowed == (int)0xa5a5a5a5)
                        __builtin_trap(); /* accepted without setting it */
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    size_t chunk = 1 + data[0] % 64;
    int nreqs = 1 + data[1] % SL_MAX_BATCH;
    int nitems = data[1] / SL_MAX_BATCH % (SL_MAX_BATCH + 1);
    data += 2, size -= 2;

    redisReader *r = redisReaderCreate();
    if (r == NULL) return 0;
    sl_redis_rbound b;
    memset(&b, 0, sizeof b);
    sl__redis_reader_bound(r, &b);
    size_t fed = 0;
    int failed = 0;
    while (fed < size && !failed) {
        size_t n = size - fed < chunk ? size - fed : chunk;
        if (redisReaderFeed(r, (const char *)data + fed, n) != REDIS_OK) break;
        fed += n;
        for (;;) {
            void *reply = NULL;
            if (redisReaderGetReply(r, &reply) != REDIS_OK) {
                /* a refusal of ours says why; otherwise hiredis's own
                 * protocol error */
                if (r->err == REDIS_ERR_OOM && b.why[0] == '\0') __builtin_trap();
                failed = 1;
                break;
            }
            if (reply == NULL) break;
            if (objects(reply) > SL_REDIS_REPLY_OBJECTS) __builtin_trap();
            parse_all(reply, nreqs, nitems);
            sl__redis_reply_free(reply);
        }
    }
    redisReaderFree(r);
    return 0;
}
