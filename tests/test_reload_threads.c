/*
 * test_reload_threads.c -- the rules' reload thread and the workers'
 * inboxes (src/server/live.c): RL.RULES RELOAD's path without a network.
 *
 * Worker threads, each with its own event loop and inbox as net.c's
 * workers have, ask for reloads while others do.  Every answer must arrive
 * exactly once, on the asking worker's own thread, never before the ask
 * returns, and come from a reload that started after the ask (its version
 * is newer than the one serving when it was asked: the files were read
 * after the ask).  A FIFO in the rules file's place is answered with an
 * error at once.  An inbox freed with answers due runs them there.  A
 * change (sl_live_change) serves before its answer, or is undone.  Run
 * under TSan by tests/run.sh (the name contains "thread").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <event2/event.h>

#include "live.h"
#include "log.h"
#include "rules.h"
#include "util.h"

#define WORKERS 3
#define ASKS    40 /* per worker, one after another */

static const char good[] = "domain: api\n"
                           "descriptors:\n"
                           "  - key: user\n"
                           "    rate_limit: {unit: hour, requests_per_unit: 10}\n";

static char dir[64], path[128];

static void put(const char *text)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s/.tmp", dir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/sluice-reload-XXXXXX");
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(path, sizeof path, "%s/api.yaml", dir);
    put(good);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

/* One ask's answer, as the callback saw it. */
typedef struct answer {
    int calls;
    int rc;
    uint64_t version;
    char err[SL_LIVE_ERR];
    pthread_t thread;
} answer;

static void on_answer(void *arg, int rc, uint64_t version, const char *err)
{
    answer *a = arg;
    a->calls++;
    a->rc = rc;
    a->version = version;
    a->thread = pthread_self();
    snprintf(a->err, sizeof a->err, "%s", err);
}

/* Runs loop until a has its answer, at most 20 s.  0, or -1 on time out. */
static int wait_answer(struct event_base *loop, const answer *a)
{
    int64_t until = sl__mono_ms() + 20000;
    while (a->calls == 0 && sl__mono_ms() < until) event_base_loop(loop, EVLOOP_ONCE);
    return a->calls ? 0 : -1;
}

static struct event_base *new_loop(void)
{
    struct event_config *ec = event_config_new();
    assert_non_null(ec);
    event_config_set_flag(ec, EVENT_BASE_FLAG_NOLOCK); /* as net.c's workers */
    struct event_base *b = event_base_new_with_config(ec);
    event_config_free(ec);
    assert_non_null(b);
    return b;
}

typedef struct worker {
    sl_live *live;
    pthread_t self;
    _Atomic long bad; /* answers that broke a rule above; the reason in why */
    char why[256];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    struct event_base *loop = new_loop();
    char err[128];
    sl_live_inbox *in = sl_live_inbox_new(w->live, loop, err, sizeof err);
    for (int i = 0; i < ASKS && in != NULL && atomic_load(&w->bad) == 0; i++) {
        sl_live_info li;
        sl_live_info_get(w->live, &li);
        answer a = {0};
        if (sl_live_ask(in, "RL.RULES RELOAD", on_answer, &a) != 0)
            snprintf(w->why, sizeof w->why, "ask %d refused", i);
        else if (a.calls != 0)
            snprintf(w->why, sizeof w->why, "ask %d answered before it returned", i);
        else if (wait_answer(loop, &a) != 0)
            snprintf(w->why, sizeof w->why, "ask %d: no answer within 20 s", i);
        else if (!pthread_equal(a.thread, pthread_self()))
            snprintf(w->why, sizeof w->why, "ask %d answered on another thread", i);
        else if (a.rc != 0)
            snprintf(w->why, sizeof w->why, "ask %d: %.200s", i, a.err);
        else if (a.version <= li.version)
            snprintf(w->why, sizeof w->why, "ask %d: version %llu, not newer than %llu", i,
                     (unsigned long long)a.version, (unsigned long long)li.version);
        else
            continue;
        atomic_fetch_add(&w->bad, 1);
    }
    if (in == NULL) {
        snprintf(w->why, sizeof w->why, "no inbox: %s", err);
        atomic_fetch_add(&w->bad, 1);
    }
    sl_live_inbox_free(in);
    event_base_free(loop);
    return NULL;
}

/* Workers ask at the same time; every answer follows the rules above, and
 * asks made together may share a reload (never more reloads than asks). */
static void concurrent_asks(void **state)
{
    (void)state;
    char err[SL_LIVE_ERR];
    sl_live *l = sl_live_new(path);
    assert_non_null(l);
    assert_int_equal(sl_live_reload(l, "start", err, sizeof err), 0);
    assert_int_equal(sl_live_start(l, err, sizeof err), 0);
    worker w[WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++) {
        w[i].live = l;
        assert_int_equal(pthread_create(&w[i].self, NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(w[i].self, NULL);
    for (int i = 0; i < WORKERS; i++)
        if (atomic_load(&w[i].bad)) fail_msg("worker %d: %s", i, w[i].why);
    sl_live_info li;
    sl_live_info_get(l, &li);
    assert_int_equal(li.failures, 0);
    assert_true(li.reloads >= 2);                            /* the start, then at least one */
    assert_true(li.reloads <= 1 + (uint64_t)WORKERS * ASKS); /* coalesced at most */
    sl_live_free(l);
}

/* A FIFO in the rules file's place: the ask is answered with the error
 * promptly (nothing waits for a writer), the old rules keep serving, and a
 * kick (SIGHUP) does not block its caller either. */
static void fifo_is_answered_at_once(void **state)
{
    (void)state;
    char err[SL_LIVE_ERR], want[300];
    sl_live *l = sl_live_new(path);
    assert_non_null(l);
    assert_int_equal(sl_live_reload(l, "start", err, sizeof err), 0);
    assert_int_equal(sl_live_start(l, err, sizeof err), 0);
    struct event_base *loop = new_loop();
    sl_live_inbox *in = sl_live_inbox_new(l, loop, err, sizeof err);
    assert_non_null(in);
    sl_live_info li;
    sl_live_info_get(l, &li);
    uint64_t v1 = li.version;

    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    int64_t t0 = sl__mono_ms();
    sl_live_kick(l, "SIGHUP");
    answer a = {0};
    assert_int_equal(sl_live_ask(in, "RL.RULES RELOAD", on_answer, &a), 0);
    assert_int_equal(wait_answer(loop, &a), 0);
    assert_true(sl__mono_ms() - t0 < 5000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.rc, -1);
    assert_int_equal(a.version, v1); /* what keeps serving */
    snprintf(want, sizeof want, "%s: not a regular file (a FIFO)", path);
    assert_string_equal(a.err, want);
    sl_live_info_get(l, &li);
    assert_int_equal(li.version, v1);
    assert_int_equal(li.ndomains, 1);
    assert_string_equal(li.last_error, want);

    assert_int_equal(unlink(path), 0);
    put(good);
    sl_live_inbox_free(in);
    event_base_free(loop);
    sl_live_free(l);
}

/* An inbox freed while its asks are due (a worker stopping at its
 * deadline): each callback runs exactly once, there and then -- with its
 * answer if the reload thread has given it, else "the server is stopping"
 * -- and the reload thread never touches the inbox again. */
static void inbox_freed_with_asks_due(void **state)
{
    (void)state;
    char err[SL_LIVE_ERR];
    sl_live *l = sl_live_new(path);
    assert_non_null(l);
    assert_int_equal(sl_live_reload(l, "start", err, sizeof err), 0);
    assert_int_equal(sl_live_start(l, err, sizeof err), 0);
    sl_live_info li;
    sl_live_info_get(l, &li);
    int stopping = 0, answered = 0;
    for (int round = 0; round < 50; round++) {
        struct event_base *loop = new_loop();
        sl_live_inbox *in = sl_live_inbox_new(l, loop, err, sizeof err);
        assert_non_null(in);
        answer a[4];
        memset(a, 0, sizeof a);
        for (int i = 0; i < 4; i++)
            assert_int_equal(sl_live_ask(in, "RL.RULES RELOAD", on_answer, &a[i]), 0);
        if (round % 2) usleep(200); /* some rounds give the thread time to answer */
        sl_live_inbox_free(in);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(a[i].calls, 1);
            if (a[i].rc == 0) {
                answered++;
                assert_true(a[i].version > li.version);
            } else {
                stopping++;
                assert_string_equal(a[i].err, "the server is stopping");
            }
        }
        event_base_free(loop);
    }
    assert_int_equal(stopping + answered, 200);
    sl_live_free(l); /* joins the thread after whatever reload it runs */
}

/* What one sl_live_change's callbacks saw and do. */
typedef struct edit {
    const char *text; /* apply writes it as the rules file; NULL: apply refuses */
    int applied, undone;
    int sleep_us; /* apply takes this long */
} edit;

static int edit_apply(void *arg, const struct sl_rules *serving, const char *p, char *err,
                      size_t errlen)
{
    edit *e = arg;
    assert_non_null(serving);
    assert_string_equal(p, path);
    if (e->sleep_us) usleep((useconds_t)e->sleep_us);
    if (e->text == NULL) {
        snprintf(err, errlen, "refused by apply");
        return -1;
    }
    put(e->text);
    e->applied++;
    return 0;
}

static void edit_undo(void *arg)
{
    edit *e = arg;
    put(good);
    e->undone++;
}

/* sl_live_change: a good change serves before its answer; a change whose
 * set is refused is undone and changes nothing; one that apply refuses
 * reloads nothing; an inbox freed while its change runs waits for it. */
static void changes_apply_undo_and_wait(void **state)
{
    (void)state;
    char err[SL_LIVE_ERR];
    sl_live *l = sl_live_new(path);
    assert_non_null(l);
    assert_int_equal(sl_live_reload(l, "start", err, sizeof err), 0);
    assert_int_equal(sl_live_start(l, err, sizeof err), 0);
    struct event_base *loop = new_loop();
    sl_live_inbox *in = sl_live_inbox_new(l, loop, err, sizeof err);
    assert_non_null(in);
    sl_live_info li;
    sl_live_info_get(l, &li);
    uint64_t v1 = li.version, reloads = li.reloads, failures = li.failures;

    static const char better[] = "domain: api\n"
                                 "descriptors:\n"
                                 "  - key: user\n"
                                 "    rate_limit: {unit: hour, requests_per_unit: 20}\n";
    edit e1 = {better, 0, 0, 0};
    sl_live_edit le = {edit_apply, edit_undo, &e1};
    answer a = {0};
    assert_int_equal(sl_live_change(in, "test", &le, on_answer, &a), 0);
    assert_int_equal(wait_answer(loop, &a), 0);
    assert_int_equal(a.rc, 0);
    assert_true(a.version > v1);
    sl_live_info_get(l, &li);
    assert_int_equal(li.version, a.version); /* serving when answered */
    assert_int_equal(e1.applied, 1);
    assert_int_equal(e1.undone, 0);
    uint64_t v2 = a.version;

    edit e2 = {"domain: api\ndescriptors: nope\n", 0, 0, 0};
    le.arg = &e2;
    memset(&a, 0, sizeof a);
    assert_int_equal(sl_live_change(in, "test", &le, on_answer, &a), 0);
    assert_int_equal(wait_answer(loop, &a), 0);
    assert_int_equal(a.rc, -1);
    assert_int_equal(a.version, v2);
    assert_non_null(strstr(a.err, "api.yaml:2:14: "));
    assert_int_equal(e2.applied, 1);
    assert_int_equal(e2.undone, 1);
    sl_live_info_get(l, &li);
    assert_int_equal(li.version, v2);
    assert_int_equal(li.failures, failures + 1);

    edit e3 = {NULL, 0, 0, 0};
    le.arg = &e3;
    memset(&a, 0, sizeof a);
    assert_int_equal(sl_live_change(in, "test", &le, on_answer, &a), 0);
    assert_int_equal(wait_answer(loop, &a), 0);
    assert_int_equal(a.rc, -1);
    assert_string_equal(a.err, "refused by apply");
    sl_live_info_get(l, &li);
    assert_int_equal(li.version, v2);
    assert_int_equal(li.reloads, reloads + 1);
    assert_int_equal(li.failures, failures + 1);

    /* freed while a slow change may be running: it finishes first */
    for (int round = 0; round < 20; round++) {
        edit e4 = {better, 0, 0, 2000};
        le.arg = &e4;
        memset(&a, 0, sizeof a);
        assert_int_equal(sl_live_change(in, "test", &le, on_answer, &a), 0);
        if (round % 2) usleep(500);
        sl_live_inbox_free(in);
        assert_int_equal(a.calls, 1);
        if (a.rc == 0)
            assert_int_equal(e4.applied, 1);
        else {
            assert_string_equal(a.err, "the server is stopping");
            assert_int_equal(e4.applied, 0);
        }
        in = sl_live_inbox_new(l, loop, err, sizeof err);
        assert_non_null(in);
    }
    sl_live_inbox_free(in);
    event_base_free(loop);
    sl_live_free(l);
}

int main(void)
{
    sl_log_set_level(SL_LOG_ERROR + 1); /* quiet: hundreds of reloads */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(concurrent_asks, setup, teardown),
        cmocka_unit_test_setup_teardown(fifo_is_answered_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(inbox_freed_with_asks_due, setup, teardown),
        cmocka_unit_test_setup_teardown(changes_apply_undo_and_wait, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
