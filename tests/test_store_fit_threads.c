/*
 * test_store_fit_threads.c -- fitted tables under lock-free readers (store.c,
 * "fitted tables"): two threads decide on their own keys of one shard, the
 * quick way (SL_LOCK_RECORD), while a third adds and forgets keys of the
 * same size in that shard, so that the fitted table is rebuilt and its
 * tombstones reused under the readers.  Every reply is the one a key alone
 * would get (a fixed window that never ends: remaining = L - decisions).
 * Run under ThreadSanitizer too (the name has "thread").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "store.h"
#include "support/fit_deciders.h"

#define CHURN 3000   /* keys the third thread adds, then forgets, a round */
#define CHURN_ROUNDS 8

static _Atomic int churn_done;

static void *churn_loop(void *arg)
{
    sl_store *s = arg;
    sl_params p = decider_params();
    char k[16];
    sl_result r;
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        for (unsigned i = 0; i < CHURN; i++) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_decide(s, &p, k, DECIDER_KLEN, DECIDER_T0, 1, &r) != 0) abort();
        }
        for (unsigned i = 0; i < CHURN; i += (unsigned)round % 2 + 1) {
            snprintf(k, sizeof k, "c%011u", (unsigned)round * CHURN + i);
            if (sl_forget(s, SL_FIXED_WINDOW, k, DECIDER_KLEN) != 1) abort();
        }
    }
    atomic_store(&churn_done, 1);
    return NULL;
}

static void test_readers_while_rebuilt(void **state)
{
    (void)state;
    sl_store_opts o;
    memset(&o, 0, sizeof o);
    o.shards = 1; /* everyone in one shard: one fitted table */
    o.locking = SL_LOCK_RECORD;
    int err = 1;
    sl_store *s = sl_store_new(&o, &err);
    assert_non_null(s);
    decider d[2] = {{.s = s, .id = 0, .done = &churn_done}, {.s = s, .id = 1, .done = &churn_done}};
    pthread_t th[3];
    assert_int_equal(pthread_create(&th[2], NULL, churn_loop, s), 0);
    for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, decider_loop, &d[t]), 0);
    for (int t = 0; t < 3; t++) pthread_join(th[t], NULL);
    assert_int_equal(atomic_load(&churn_done), 1);
    /* every reply exact; every decider key still in the store, at its
     * count: in the fitted table, or in the slab when the rebuild its
     * insert needed gave up on a record another thread held (by design; a
     * slow machine makes that likely: seen once under ASan in a
     * fresh-clone run) */
    assert_true(deciders_check(s, d, 2) > 0); /* the fitted table was in use */
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readers_while_rebuilt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
