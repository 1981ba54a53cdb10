/*
 * redismodule_api.h -- the part of Redis's module API the sluice module
 * uses, declared from the documented API (the module API reference:
 * RedisModule_Init, the function table reached through RedisModule_GetApi,
 * commands, keys, module data types, replies, replication).  Debian ships
 * no redismodule.h; this is not a copy of it, only what module.c needs.
 *
 * How loading works: Redis calls the module's RedisModule_OnLoad(ctx, argv,
 * argc).  The first word of the context is Redis's GetApi function, which
 * maps an API name ("RedisModule_OpenKey") to its function pointer;
 * sl_rm_init fetches every function listed in SL_RM_FUNCS below into the
 * pointers of the same names, then registers the module's name.
 *
 * ABI facts used (stable since API version 1):
 *   - return codes REDISMODULE_OK 0, REDISMODULE_ERR 1;
 *   - key open modes READ 1, WRITE 2; key types EMPTY 0 .. MODULE 6;
 *   - REDISMODULE_NO_EXPIRE -1 for SetExpire / GetExpire;
 *   - key types HASH 3, ZSET 5; HashGet / HashSet's flag CFIELDS (1<<2),
 *     the fields then C strings; ZsetAdd's flags 0 in: add or update;
 *   - RedisModuleTypeMethods: a version, then the callbacks in the order
 *     below (version 1 reads up to `free`; later fields are read only by
 *     later versions, so version 1 is enough for this module);
 *   - context flags (GetContextFlags): REPLICATED (1<<12), the command came
 *     from the master; LOADING (1<<13), the server is loading (AOF replay);
 *     SLAVE (1<<3), this server is a replica; AOF (1<<6), the AOF is on
 *     (aof_state is not off: also while the first rewrite is pending);
 *   - server events (SubscribeToServerEvent): an event is {id, data
 *     version}; ids REPLICATION_ROLE_CHANGED 0, REPLICA_CHANGE 6,
 *     FORK_CHILD 13 (subevents BORN 0, DIED 1: fired in the parent when a
 *     child -- an RDB save, a full sync's, an AOF rewrite's -- starts and
 *     ends), each at data version 1.
 */
#ifndef SL_REDISMODULE_API_H
#define SL_REDISMODULE_API_H

#include <stddef.h>
#include <stdint.h>

#define REDISMODULE_OK                    0
#define REDISMODULE_ERR                   1
#define REDISMODULE_APIVER_1              1
#define REDISMODULE_TYPE_METHOD_VERSION_1 1

#define REDISMODULE_READ  (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

#define REDISMODULE_KEYTYPE_EMPTY  0
#define REDISMODULE_KEYTYPE_HASH   3
#define REDISMODULE_KEYTYPE_ZSET   5
#define REDISMODULE_KEYTYPE_MODULE 6

/* HashGet / HashSet: the fields given as C strings (NULL ends the list). */
#define REDISMODULE_HASH_CFIELDS (1 << 2)

#define REDISMODULE_NO_EXPIRE -1

/* SetModuleOptions: the module checks IsIOError after its RDB reads, so a
 * short or malformed read fails the load (RESTORE answers an error) instead
 * of Redis panicking (available since Redis 6.0). */
#define REDISMODULE_OPTIONS_HANDLE_IO_ERRORS (1 << 0)

#define REDISMODULE_CTX_FLAGS_SLAVE      (1 << 3)
#define REDISMODULE_CTX_FLAGS_AOF        (1 << 6)
#define REDISMODULE_CTX_FLAGS_REPLICATED (1 << 12)
#define REDISMODULE_CTX_FLAGS_LOADING    (1 << 13)

#define REDISMODULE_ERRORMSG_WRONGTYPE                                                             \
    "WRONGTYPE Operation against a key holding the wrong kind of value"

typedef long long mstime_t;

/* Opaque to modules. */
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleType RedisModuleType;
typedef struct RedisModuleIO RedisModuleIO;
typedef struct RedisModuleDigest RedisModuleDigest;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;

#define REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED 0
#define REDISMODULE_EVENT_REPLICA_CHANGE           6
#define REDISMODULE_EVENT_FORK_CHILD               13
#define REDISMODULE_SUBEVENT_FORK_CHILD_BORN       0
#define REDISMODULE_SUBEVENT_FORK_CHILD_DIED       1

typedef struct RedisModuleEvent {
    uint64_t id;      /* REDISMODULE_EVENT_* */
    uint64_t dataver; /* the version of what `data` points to */
} RedisModuleEvent;

typedef void (*RedisModuleEventCallback)(RedisModuleCtx *ctx, RedisModuleEvent eid,
                                         uint64_t subevent, void *data);

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

typedef void *(*RedisModuleTypeLoadFunc)(RedisModuleIO *rdb, int encver);
typedef void (*RedisModuleTypeSaveFunc)(RedisModuleIO *rdb, void *value);
typedef void (*RedisModuleTypeRewriteFunc)(RedisModuleIO *aof, RedisModuleString *key, void *value);
typedef size_t (*RedisModuleTypeMemUsageFunc)(const void *value);
typedef void (*RedisModuleTypeDigestFunc)(RedisModuleDigest *digest, void *value);
typedef void (*RedisModuleTypeFreeFunc)(void *value);

typedef struct RedisModuleTypeMethods {
    uint64_t version;
    RedisModuleTypeLoadFunc rdb_load;
    RedisModuleTypeSaveFunc rdb_save;
    RedisModuleTypeRewriteFunc aof_rewrite;
    RedisModuleTypeMemUsageFunc mem_usage;
    RedisModuleTypeDigestFunc digest;
    RedisModuleTypeFreeFunc free;
} RedisModuleTypeMethods;

/* X(return type, name without "RedisModule_", parameters) */
#define SL_RM_FUNCS(X)                                                                             \
    X(int, IsModuleNameBusy, (const char *name))                                                   \
    X(void, SetModuleAttribs, (RedisModuleCtx * ctx, const char *name, int ver, int apiver))       \
    X(int, CreateCommand,                                                                          \
      (RedisModuleCtx * ctx, const char *name, RedisModuleCmdFunc fn, const char *flags,           \
       int firstkey, int lastkey, int keystep))                                                    \
    X(RedisModuleType *, CreateDataType,                                                           \
      (RedisModuleCtx * ctx, const char *name, int encver, RedisModuleTypeMethods *methods))       \
    X(int, ModuleTypeSetValue, (RedisModuleKey * key, RedisModuleType * mt, void *value))          \
    X(RedisModuleType *, ModuleTypeGetType, (RedisModuleKey * key))                                \
    X(void *, ModuleTypeGetValue, (RedisModuleKey * key))                                          \
    X(RedisModuleKey *, OpenKey, (RedisModuleCtx * ctx, RedisModuleString * name, int mode))       \
    X(void, CloseKey, (RedisModuleKey * key))                                                      \
    X(int, KeyType, (RedisModuleKey * key))                                                        \
    X(int, DeleteKey, (RedisModuleKey * key))                                                      \
    X(int, SetExpire, (RedisModuleKey * key, mstime_t expire))                                     \
    X(int, SetAbsExpire, (RedisModuleKey * key, mstime_t expire))                                  \
    X(long long, Milliseconds, (void))                                                             \
    X(int, GetContextFlags, (RedisModuleCtx * ctx))                                                \
    X(const char *, StringPtrLen, (const RedisModuleString *str, size_t *len))                     \
    X(int, WrongArity, (RedisModuleCtx * ctx))                                                     \
    X(int, ReplyWithError, (RedisModuleCtx * ctx, const char *err))                                \
    X(int, ReplyWithArray, (RedisModuleCtx * ctx, long len))                                       \
    X(int, ReplyWithLongLong, (RedisModuleCtx * ctx, long long ll))                                \
    X(int, ReplyWithSimpleString, (RedisModuleCtx * ctx, const char *msg))                         \
    X(int, ReplicateVerbatim, (RedisModuleCtx * ctx))                                              \
    X(int, Replicate, (RedisModuleCtx * ctx, const char *cmdname, const char *fmt, ...))           \
    X(void, EmitAOF, (RedisModuleIO * io, const char *cmdname, const char *fmt, ...))              \
    X(int, IsKeysPositionRequest, (RedisModuleCtx * ctx))                                          \
    X(void, KeyAtPos, (RedisModuleCtx * ctx, int pos))                                             \
    X(void, SaveUnsigned, (RedisModuleIO * io, uint64_t value))                                    \
    X(uint64_t, LoadUnsigned, (RedisModuleIO * io))                                                \
    X(void, SaveStringBuffer, (RedisModuleIO * io, const char *str, size_t len))                   \
    X(char *, LoadStringBuffer, (RedisModuleIO * io, size_t * lenptr))                             \
    X(void, LogIOError, (RedisModuleIO * io, const char *level, const char *fmt, ...))             \
    X(int, IsIOError, (RedisModuleIO * io))                                                        \
    X(void, SetModuleOptions, (RedisModuleCtx * ctx, int options))                                 \
    X(RedisModuleCtx *, GetContextFromIO, (RedisModuleIO * io))                                    \
    X(void, Log, (RedisModuleCtx * ctx, const char *level, const char *fmt, ...))                  \
    X(void *, Alloc, (size_t bytes))                                                               \
    X(void *, Calloc, (size_t nmemb, size_t size))                                                 \
    X(void, Free, (void *ptr))                                                                     \
    X(int, SubscribeToServerEvent,                                                                 \
      (RedisModuleCtx * ctx, RedisModuleEvent event, RedisModuleEventCallback callback))           \
    X(RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx * ctx, const char *section))     \
    X(void, FreeServerInfo, (RedisModuleCtx * ctx, RedisModuleServerInfoData * data))              \
    X(long long, ServerInfoGetFieldSigned,                                                         \
      (RedisModuleServerInfoData * data, const char *field, int *out_err))                        \
    X(RedisModuleString *, CreateStringFromLongLong, (RedisModuleCtx * ctx, long long ll))         \
    X(void, FreeString, (RedisModuleCtx * ctx, RedisModuleString * str))                           \
    X(int, StringToLongLong, (const RedisModuleString *str, long long *ll))                        \
    X(mstime_t, GetExpire, (RedisModuleKey * key))                                                 \
    X(size_t, ValueLength, (RedisModuleKey * key))                                                 \
    X(int, HashGet, (RedisModuleKey * key, int flags, ...))                                        \
    X(int, HashSet, (RedisModuleKey * key, int flags, ...))                                        \
    X(int, ZsetAdd, (RedisModuleKey * key, double score, RedisModuleString *ele, int *flagsptr))   \
    X(int, ZsetRem, (RedisModuleKey * key, RedisModuleString * ele, int *deleted))                 \
    X(int, ZsetFirstInScoreRange,                                                                  \
      (RedisModuleKey * key, double min, double max, int minex, int maxex))                        \
    X(int, ZsetLastInScoreRange,                                                                   \
      (RedisModuleKey * key, double min, double max, int minex, int maxex))                        \
    X(RedisModuleString *, ZsetRangeCurrentElement, (RedisModuleKey * key, double *score))         \
    X(void, ZsetRangeStop, (RedisModuleKey * key))                                                 \
    X(int, ZsetRangeEndReached, (RedisModuleKey * key))

#define SL_RM_DECLARE(ret, name, params) extern ret(*RedisModule_##name) params;
SL_RM_FUNCS(SL_RM_DECLARE)
#undef SL_RM_DECLARE

/* What RedisModule_Init does: fetches every function above from ctx's
 * GetApi, refuses a module name already loaded, registers name.  Returns
 * REDISMODULE_OK, or REDISMODULE_ERR when a function is missing (a Redis
 * older than the API this module needs) or the name is taken. */
int sl_rm_init(RedisModuleCtx *ctx, const char *name, int ver, int apiver);

#endif
