/*
 * module_floor.c -- what a Redis module command costs before it decides
 * anything: bench/module.sh --floors loads it next to sluice.so and runs its
 * commands with RL.ALLOW's arguments (key limit window), so the table shows
 * how much of RL.ALLOW's time is Redis's module machinery and how much is
 * the module's own.  Not part of sluice: built by the benchmark only.
 *
 *   FLOOR.REPLY key limit window   replies RL.ALLOW's six integers, touches
 *                                  no key
 *   FLOOR.OPEN  key limit window   + opens the key for writing, makes a
 *                                  module value of RL.ALLOW's size (88 bytes)
 *                                  or writes one byte of the one it holds
 *   FLOOR.TTL   key limit window   + sets the key's TTL at an absolute time
 *                                  (an hour on) and propagates the command
 *                                  verbatim, as RL.ALLOW does
 *
 * The type's RDB methods save nothing: the benchmark's server never saves.
 */
#include <stdint.h>

#include "redismodule_api.h"

#define VALUE_BYTES 88 /* sizeof(rlval) in src/module/module.c */

static RedisModuleType *floor_type;

static void *floor_load(RedisModuleIO *io, int encver)
{
    (void)encver;
    (void)RedisModule_LoadUnsigned(io);
    return RedisModule_Calloc(1, VALUE_BYTES);
}

static void floor_save(RedisModuleIO *io, void *value)
{
    (void)value;
    RedisModule_SaveUnsigned(io, 0);
}

static void floor_free(void *value) { RedisModule_Free(value); }

/* RL.ALLOW's reply to a first request of 100 per hour. */
static void reply_six(RedisModuleCtx *ctx)
{
    static const long long six[6] = {1, 100, 99, 0, 36000, 0};
    RedisModule_ReplyWithArray(ctx, 6);
    for (int i = 0; i < 6; i++) RedisModule_ReplyWithLongLong(ctx, six[i]);
}

static int cmd_reply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    if (argc != 4) return RedisModule_WrongArity(ctx);
    reply_six(ctx);
    return REDISMODULE_OK;
}

/* Opens argv[1] and makes or writes its value; with ttl, also sets its TTL
 * and propagates the command verbatim. */
static int open_and_write(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, int ttl)
{
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long now = RedisModule_Milliseconds();
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_WRITE);
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_ModuleTypeSetValue(key, floor_type, RedisModule_Calloc(1, VALUE_BYTES));
    } else if (RedisModule_ModuleTypeGetType(key) == floor_type) {
        uint8_t *v = RedisModule_ModuleTypeGetValue(key);
        v[8]++;
    } else {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
    }
    if (ttl) RedisModule_SetAbsExpire(key, now + 3600000);
    RedisModule_CloseKey(key);
    if (ttl) RedisModule_ReplicateVerbatim(ctx);
    reply_six(ctx);
    return REDISMODULE_OK;
}

static int cmd_open(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return open_and_write(ctx, argv, argc, 0);
}

static int cmd_ttl(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return open_and_write(ctx, argv, argc, 1);
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    if (sl_rm_init(ctx, "sluicefloor", 1, REDISMODULE_APIVER_1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION_1,
        .rdb_load = floor_load,
        .rdb_save = floor_save,
        .free = floor_free,
    };
    if ((floor_type = RedisModule_CreateDataType(ctx, "slufloor1", 0, &tm)) == NULL)
        return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "floor.reply", cmd_reply, "write fast", 1, 1, 1) ||
        RedisModule_CreateCommand(ctx, "floor.open", cmd_open, "write deny-oom fast", 1, 1, 1) ||
        RedisModule_CreateCommand(ctx, "floor.ttl", cmd_ttl, "write deny-oom fast", 1, 1, 1))
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
