/*
 * test_live_threads.c -- rules reloaded while threads decide on them
 * (src/server/live.c).  Readers hammer sl_rules_check through their own
 * sl_live_cache while a writer swaps the rules file between two versions
 * and reloads, and now and then writes a broken file.  Every decision must
 * succeed and come whole from one set: the rule's name and its limit always
 * belong together (set A: "set_a", 1000000; set B: "set_b", 2000000).  A
 * broken file never replaces a set.  Run under TSan by tests/run.sh (the
 * name contains "thread").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "backend_local.h"
#include "check.h"
#include "live.h"
#include "log.h"
#include "rules.h"

#define READERS 3
#define CHECKS  2000000 /* per reader, at most: readers stop when the writer is done */
#define SWAPS   200
#define BETWEEN 300     /* checks the writer waits for between two swaps */

static const char set_a[] = "domain: api\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {name: set_a, unit: hour, requests_per_unit: 1000000}\n";
static const char set_b[] = "domain: api\n"
                            "descriptors:\n"
                            "  - key: user\n"
                            "    rate_limit: {name: set_b, unit: hour, requests_per_unit: 2000000}\n";
static const char broken[] = "domain: api\n"
                             "descriptors:\n"
                             "  - key: user\n"
                             "    rate_limit: {name: set_c, unit: hour, requests_per_unit: -3}\n";

typedef struct shared {
    sl_live *live;
    sl_store *store;
    _Atomic int done;
    _Atomic long bad; /* decisions that failed or mixed two sets */
    _Atomic long seen_a, seen_b;
    _Atomic long checks;
} shared;

/* Writes text to path atomically (a new file renamed over the old one),
 * as editors and deploy tools do. */
static void put(const char *dir, const char *path, const char *text)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/.tmp-rules", dir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
}

static void *reader(void *arg)
{
    shared *sh = arg;
    sl_live_cache cache = {0};
    char user[32];
    unsigned id = (unsigned)(uintptr_t)pthread_self();
    for (int i = 0; i < CHECKS && !atomic_load(&sh->done); i++) {
        sl_rules *r = sl_live_get(sh->live, &cache);
        snprintf(user, sizeof user, "u%u-%d", id % 1000, i % 64);
        sl_rule_entry e = {"user", 4, user, strlen(user)};
        const sl_rule_entry *d[1] = {&e};
        int nd[1] = {1};
        sl_result ov;
        sl_check_status st[1];
        char err[256];
        int rc = sl_rules_check(r, sh->store, NULL, "api", 3, d, nd, 1, 1, 1000 + i, &ov, st,
                                err, sizeof err);
        int ok = rc == 0 && ov.allowed == 1 && st[0].code == SL_CHECK_OK && st[0].name != NULL;
        if (ok && strcmp(st[0].name, "set_a") == 0 && st[0].limit == 1000000)
            atomic_fetch_add(&sh->seen_a, 1);
        else if (ok && strcmp(st[0].name, "set_b") == 0 && st[0].limit == 2000000)
            atomic_fetch_add(&sh->seen_b, 1);
        else
            atomic_fetch_add(&sh->bad, 1);
        atomic_fetch_add(&sh->checks, 1);
    }
    sl_live_cache_drop(&cache);
    return NULL;
}

static void reload_under_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-live-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512], err[SL_LIVE_ERR];
    snprintf(path, sizeof path, "%s/api.yaml", dir);
    put(dir, path, set_a);

    shared sh;
    memset(&sh, 0, sizeof sh);
    sl_store_opts so = {0};
    int serr = 0;
    sh.store = sl_store_new(&so, &serr);
    assert_non_null(sh.store);
    sh.live = sl_live_new(path);
    assert_non_null(sh.live);
    assert_int_equal(sl_live_reload(sh.live, "test", err, sizeof err), 0);

    pthread_t t[READERS];
    for (int i = 0; i < READERS; i++) assert_int_equal(pthread_create(&t[i], NULL, reader, &sh), 0);
    int good = 1, refused = 0;
    for (int i = 0; i < SWAPS; i++) {
        if (i % 10 == 9) {
            put(dir, path, broken);
            if (sl_live_reload(sh.live, "test", err, sizeof err) != 0) refused++;
            assert_non_null(strstr(err, "api.yaml:4:62: negative requests_per_unit '-3'"));
        }
        put(dir, path, i % 2 ? set_a : set_b);
        if (sl_live_reload(sh.live, "test", err, sizeof err) == 0) good++;
        /* let the readers decide on this set for a while (bounded: they
         * stop on their own after CHECKS) */
        long mark = atomic_load(&sh.checks) + BETWEEN;
        while (atomic_load(&sh.checks) < mark && atomic_load(&sh.checks) < (long)READERS * CHECKS)
            sched_yield();
    }
    atomic_store(&sh.done, 1);
    for (int i = 0; i < READERS; i++) pthread_join(t[i], NULL);

    assert_int_equal(atomic_load(&sh.bad), 0);
    assert_int_equal(atomic_load(&sh.seen_a) + atomic_load(&sh.seen_b), atomic_load(&sh.checks));
    /* each set served decisions after each swap */
    assert_true(atomic_load(&sh.seen_a) >= SWAPS / 2);
    assert_true(atomic_load(&sh.seen_b) >= SWAPS / 2);
    sl_live_info li;
    sl_live_info_get(sh.live, &li);
    assert_int_equal(li.reloads, (uint64_t)good);
    assert_int_equal(li.failures, (uint64_t)refused);
    assert_int_equal(refused, SWAPS / 10);
    assert_string_equal(li.last_error, ""); /* the last reload was good */
    sl_live_free(sh.live);
    sl_store_free(sh.store);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    sl_log_set_level(SL_LOG_ERROR + 1); /* quiet: 200 reloads */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reload_under_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
