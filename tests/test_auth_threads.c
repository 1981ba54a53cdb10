/*
 * test_auth_threads.c -- logins from several threads at once, as sluiced's
 * workers make them (src/server/auth.c; run under TSan too): guesses from
 * one address are checked at most N + (threads - 1) times in a window (a
 * guess between another thread's check and its count may still be
 * checked: docs/sluiced.md, "Failed logins"), every other one is refused
 * unchecked, and a right password from another address always logs in.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"

#define THREADS 4
#define TRIES   2000 /* guesses per thread */
#define FAILS   10

static sl_auth *auth;

typedef struct counts {
    int id;
    int wrong, blocked, ok, other_ok;
} counts;

static void *guess(void *arg)
{
    counts *c = arg;
    char pass[32];
    const sl_auth_user *u;
    int64_t retry;
    for (int i = 0; i < TRIES; i++) {
        int n = snprintf(pass, sizeof pass, "guess-%d-%d", c->id, i);
        int rc = sl_auth_login(auth, "10.9.9.9", "u", 1, pass, (size_t)n, 5000, &u, &retry);
        c->wrong += rc == SL_AUTH_WRONG;
        c->blocked += rc == SL_AUTH_BLOCKED;
        c->ok += rc == SL_AUTH_OK;
        /* another address, the right password: never held up */
        char peer[32];
        snprintf(peer, sizeof peer, "10.8.%d.%d", c->id, i % 250);
        rc = sl_auth_login(auth, peer, "u", 1, "right", 5, 5000, &u, &retry);
        c->other_ok += rc == SL_AUTH_OK && strcmp(u->name, "u") == 0;
    }
    return NULL;
}

static void guesses_from_threads(void **state)
{
    (void)state;
    char path[] = "/tmp/sluice-test-auth-threads-XXXXXX", err[256];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "user u >right +all\n";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    sl_auth_opts o = {NULL, path, FAILS, 3600 * 1000};
    auth = sl_auth_new(&o, err, sizeof err);
    unlink(path);
    assert_non_null(auth);

    pthread_t t[THREADS];
    counts c[THREADS];
    memset(c, 0, sizeof c);
    for (int i = 0; i < THREADS; i++) {
        c[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, guess, &c[i]), 0);
    }
    int wrong = 0, blocked = 0, ok = 0, other_ok = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        wrong += c[i].wrong;
        blocked += c[i].blocked;
        ok += c[i].ok;
        other_ok += c[i].other_ok;
    }
    assert_int_equal(ok, 0);
    assert_true(wrong >= FAILS);
    assert_true(wrong <= FAILS + THREADS - 1);
    assert_int_equal(wrong + blocked, THREADS * TRIES);
    assert_int_equal(other_ok, THREADS * TRIES);
    sl_auth_stats st;
    sl_auth_stats_get(auth, &st);
    assert_int_equal(st.failed, (uint64_t)wrong);
    assert_int_equal(st.blocked, (uint64_t)blocked);
    assert_int_equal(st.ok, (uint64_t)THREADS * TRIES);
    sl_auth_free(auth);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(guesses_from_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
