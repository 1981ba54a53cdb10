/*
 * fit_info.h -- what store.h shows of a fitted table, for the fitted-table
 * tests (test_store_fit, and through fit_deciders.h the thread tests).
 * Header only; include it after "sluice.h" and "store.h".
 */
#ifndef SL_TEST_FIT_INFO_H
#define SL_TEST_FIT_INFO_H

#include <stddef.h>

/* The fitted table of records of (kind, klen) of shard 0, as store.h sees
 * it under the shard lock. */
static inline sl__fit_info fit_info_of(sl_store *s, unsigned kind, size_t klen)
{
    sl__fit_info fi;
    sl__shard *sh = sl__store_shard_at(s, 0);
    sl__shard_lock(sh);
    sl__shard_fit_info(sh, kind, klen, &fi);
    sl__shard_unlock(sh);
    return fi;
}

#endif
