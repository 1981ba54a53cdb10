/*
 * redismodule_api.c -- the function pointers of redismodule_api.h and
 * sl_rm_init, which fills them from Redis's GetApi.
 */
#include "redismodule_api.h"

#define SL_RM_DEFINE(ret, name, params) ret(*RedisModule_##name) params;
SL_RM_FUNCS(SL_RM_DEFINE)
#undef SL_RM_DEFINE

int sl_rm_init(RedisModuleCtx *ctx, const char *name, int ver, int apiver)
{
    /* The context's first word is GetApi(name, &pointer): REDISMODULE_OK
     * when Redis has that function. */
    int (*get_api)(const char *, void *);
    void *first = *(void **)ctx;
    *(void **)&get_api = first;
#define SL_RM_FETCH(ret, fname, params)                                                            \
    if (get_api("RedisModule_" #fname, (void *)&RedisModule_##fname) != REDISMODULE_OK)            \
        return REDISMODULE_ERR;
    SL_RM_FUNCS(SL_RM_FETCH)
#undef SL_RM_FETCH
    if (RedisModule_IsModuleNameBusy(name)) return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, ver, apiver);
    return REDISMODULE_OK;
}
