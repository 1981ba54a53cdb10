/*
 * test_auth.c -- users, passwords and failed logins (src/server/auth.c):
 * the users file and every one of its errors (FILE:LINE and the reason,
 * nothing kept), the password file, groups, the SHA-256 form, that
 * passwords are compared with CRYPTO_memcmp (interposed here: it counts its
 * calls), and the limiter of failed logins on a clock moved by hand.
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

#include "auth.h"

/* ---- CRYPTO_memcmp, interposed ------------------------------------------ */

/* The executable's definition wins over libcrypto's for auth.o: every
 * password comparison comes through here.  Constant time, as the real one. */
static int memcmp_calls;
static size_t memcmp_last_len;

int CRYPTO_memcmp(const void *a, const void *b, size_t n);
int CRYPTO_memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= x[i] ^ y[i];
    memcmp_calls++;
    memcmp_last_len = n;
    return d;
}

/* ---- helpers ------------------------------------------------------------- */

static char paths[16][64];
static int npaths;

/* Writes text to a new temporary file; returns its path (removed at
 * teardown). */
static const char *file_with(const char *text)
{
    char *p = paths[npaths++];
    snprintf(p, sizeof paths[0], "/tmp/sluice-test-auth-XXXXXX");
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return p;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < npaths; i++) unlink(paths[i]);
    npaths = 0;
    return 0;
}

static sl_auth *make(const char *requirepass, const char *users, int64_t n, int64_t w, char *err,
                     size_t errlen)
{
    sl_auth_opts o = {requirepass, users, n, w};
    err[0] = '\0';
    return sl_auth_new(&o, err, errlen);
}

/* Logs in from peer at now; returns the outcome, *who and *retry. */
static int login(sl_auth *a, const char *peer, const char *user, const char *pass, int64_t now,
                 const sl_auth_user **who, int64_t *retry)
{
    const sl_auth_user *u = NULL;
    int64_t r = -5;
    int rc = sl_auth_login(a, peer, user, strlen(user), pass, strlen(pass), now, &u, &r);
    if (who) *who = u;
    if (retry) *retry = r;
    return rc;
}

static const char *hex(const char *pass)
{
    static char out[2 * SL_AUTH_DIGEST + 1];
    unsigned char d[SL_AUTH_DIGEST];
    sl__auth_sha256(pass, strlen(pass), d);
    for (int i = 0; i < SL_AUTH_DIGEST; i++) sprintf(out + 2 * i, "%02x", d[i]);
    return out;
}

/* ---- the users file ------------------------------------------------------ */

static void users_file(void **state)
{
    (void)state;
    char err[512], text[1024];
    /* sha256("r"), upper case: hex digits of either case */
    char up[2 * SL_AUTH_DIGEST + 1];
    strcpy(up, hex("r"));
    for (char *p = up; *p; p++)
        if (*p >= 'a' && *p <= 'f') *p = (char)(*p - 'a' + 'A');
    snprintf(text, sizeof text,
             "# users of sluiced\n"
             "\n"
             "user dec >d +deciding\n"
             "   user rd #%s +reading   \n"
             "user ops on >one >two >three +all\n"
             "user mix >m +reading +deciding\n"
             "user gone off >g +admin\n"
             "user shut off +reading\n",
             up);
    sl_auth *a = make(NULL, file_with(text), 10, 60000, err, sizeof err);
    assert_non_null(a);
    assert_string_equal(err, "");
    assert_true(sl_auth_required(a));
    assert_int_equal(sl_auth_nusers(a), 6);
    assert_null(sl_auth_anonymous(a)); /* must log in */

    const sl_auth_user *u;
    int64_t retry;
    assert_int_equal(login(a, "10.0.0.1", "dec", "d", 0, &u, NULL), SL_AUTH_OK);
    assert_string_equal(u->name, "dec");
    assert_int_equal(u->groups, SL_AUTH_DECIDING);
    assert_int_equal(login(a, "10.0.0.1", "rd", "r", 0, &u, NULL), SL_AUTH_OK);
    assert_int_equal(u->groups, SL_AUTH_READING);
    for (const char *const *p = (const char *const[]){"one", "two", "three", NULL}; *p; p++) {
        assert_int_equal(login(a, "10.0.0.1", "ops", *p, 0, &u, NULL), SL_AUTH_OK);
        assert_int_equal(u->groups, SL_AUTH_ALL);
    }
    assert_int_equal(login(a, "10.0.0.1", "mix", "m", 0, &u, NULL), SL_AUTH_OK);
    assert_int_equal(u->groups, SL_AUTH_READING | SL_AUTH_DECIDING);
    /* wrong password, another user's password, a user that is off (with
     * its right password), no such user, "default" (not defined here),
     * names are case-sensitive, a password's prefix */
    assert_int_equal(login(a, "10.0.0.2", "dec", "x", 0, &u, &retry), SL_AUTH_WRONG);
    assert_null(u);
    assert_int_equal(login(a, "10.0.0.2", "dec", "r", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.2", "gone", "g", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.2", "nobody", "d", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.2", "default", "d", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.2", "DEC", "d", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.2", "ops", "thre", 0, NULL, NULL), SL_AUTH_WRONG);
    sl_auth_stats st;
    sl_auth_stats_get(a, &st);
    assert_int_equal(st.ok, 6);
    assert_int_equal(st.failed, 7);
    assert_int_equal(st.blocked, 0);
    sl_auth_free(a);
}

/* Every error: exact message with FILE:LINE, and no auth made. */
static void users_file_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want; /* want: after "PATH:" */
    } cases[] = {
        {"user a >x +all\nusr b >y +all\n", "2: expected 'user NAME ...', got 'usr'"},
        {"user\n", "1: 'user' needs a name"},
        {"user a\x01 >x +all\n",
         "1: invalid user name 'a?': 1 to 64 printable characters, no blanks"},
        /* 65 bytes: one too many */
        {"user aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa >x +all\n",
         "1: invalid user name "
         "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa': 1 "
         "to 64 printable characters, no blanks"},
        {"user a >x +all\n# again\nuser a >y +all\n",
         "3: user 'a' is defined twice (first at line 1)"},
        {"user a >x +admn\n",
         "1: unknown group '+admn' for user 'a' (expected +deciding, +reading, +admin or +all)"},
        {"user a > +all\n", "1: empty password '>' for user 'a' (write >PASSWORD)"},
        {"user a #abc +all\n", "1: '#abc' is not a SHA-256 for user 'a': expected # and 64 hex "
                               "digits (sha256sum)"},
        {"user a >1 >2 >3 >4 >5 +all\n", "1: user 'a' has more than 4 passwords"},
        {"user a hunter2 +all\n", "1: word 3 for user 'a' is not on, off, >PASSWORD, #SHA256 or "
                                  "+GROUP (not shown: it may be a password)"},
        {"user a on off >x +all\n", "1: user 'a' is both on and off"},
        {"user a +all\n",
         "1: user 'a' has no password (give >PASSWORD or #SHA256, or mark the user off)"},
        {"user a >x\n", "1: user 'a' has no group (give +deciding, +reading, +admin or +all)"},
        {"user a >x +all +all +all +all +all +all +all +all +all +all +all +all +all +all\n",
         "1: too many words for user 'a' (at most 4 passwords)"},
        {"# only comments\n\n", " no users (write one 'user NAME >PASSWORD +GROUP' line per user)"},
        {"user a >x +all\nuser b >y\0 +all\n", "2: NUL byte in line"},
    };
    char err[512], want[700];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path;
        if (strstr(cases[i].want, "NUL") != NULL) { /* a NUL byte: written by length */
            static const char bytes[] = "user a >x +all\nuser b >y\0 +all\n";
            path = file_with("");
            FILE *f = fopen(path, "w");
            assert_non_null(f);
            fwrite(bytes, 1, sizeof bytes - 1, f);
            fclose(f);
        } else {
            path = file_with(cases[i].text);
        }
        sl_auth *a = make(NULL, path, 10, 60000, err, sizeof err);
        assert_null(a);
        snprintf(want, sizeof want, "%s:%s", path, cases[i].want);
        assert_string_equal(err, want);
        teardown(NULL);
    }
    /* a line too long, and a file that is not there */
    char *big = malloc(SL_AUTH_MAX_LINE + 100);
    assert_non_null(big);
    memset(big, 'a', SL_AUTH_MAX_LINE + 50);
    memcpy(big, "user a >", 8);
    strcpy(big + SL_AUTH_MAX_LINE + 50, " +all\n");
    const char *path = file_with(big);
    free(big);
    assert_null(make(NULL, path, 10, 60000, err, sizeof err));
    snprintf(want, sizeof want, "%s:1: line longer than %d bytes", path, SL_AUTH_MAX_LINE);
    assert_string_equal(err, want);
    assert_null(make(NULL, "/nonexistent/users", 10, 60000, err, sizeof err));
    assert_string_equal(err,
                        "cannot read --users-file '/nonexistent/users': No such file or directory");
}

/* ---- the password file ----------------------------------------------------- */

static void requirepass_file(void **state)
{
    (void)state;
    char err[512], want[600];
    const sl_auth_user *u;
    static const char *const good[] = {"s3cret\n", "s3cret", "s3cret\r\n"};
    for (int i = 0; i < 3; i++) {
        sl_auth *a = make(file_with(good[i]), NULL, 10, 60000, err, sizeof err);
        assert_non_null(a);
        assert_true(sl_auth_required(a));
        assert_int_equal(login(a, "::1", "default", "s3cret", 0, &u, NULL), SL_AUTH_OK);
        assert_string_equal(u->name, "default");
        assert_int_equal(u->groups, SL_AUTH_ALL);
        assert_int_equal(login(a, "::1", "default", "s3cret\n", 0, NULL, NULL), SL_AUTH_WRONG);
        assert_int_equal(login(a, "::1", "default", "s3cre", 0, NULL, NULL), SL_AUTH_WRONG);
        sl_auth_free(a);
    }
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", " the password file is empty"},
        {"\n", " the password file is empty"},
        {"one\ntwo\n", "2: the password must be one line (only a final newline is dropped)"},
        {"a\rb\n", "1: NUL or CR byte in the password"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *path = file_with(bad[i].text);
        assert_null(make(path, NULL, 10, 60000, err, sizeof err));
        snprintf(want, sizeof want, "%s:%s", path, bad[i].want);
        assert_string_equal(err, want);
    }
    teardown(NULL);
    assert_null(make("/nonexistent/pass", NULL, 10, 60000, err, sizeof err));
    assert_string_equal(
        err, "cannot read --requirepass-file '/nonexistent/pass': No such file or directory");

    /* both files: default from the password file, the others from the
     * users file; a users file that also sets default is refused */
    const char *pass = file_with("pw\n");
    sl_auth *a = make(pass, file_with("user dec >d +deciding\n"), 10, 60000, err, sizeof err);
    assert_non_null(a);
    assert_int_equal(sl_auth_nusers(a), 2);
    assert_int_equal(login(a, NULL, "default", "pw", 0, &u, NULL), SL_AUTH_OK);
    assert_int_equal(u->groups, SL_AUTH_ALL);
    assert_int_equal(login(a, NULL, "dec", "d", 0, &u, NULL), SL_AUTH_OK);
    assert_int_equal(u->groups, SL_AUTH_DECIDING);
    sl_auth_free(a);
    const char *users = file_with("user dec >d +deciding\nuser default >x +reading\n");
    assert_null(make(pass, users, 10, 60000, err, sizeof err));
    snprintf(want, sizeof want,
             "--requirepass-file and %s:2 both set a password for the user 'default': keep one",
             users);
    assert_string_equal(err, want);
}

/* No file: every connection is "default" with every group; AUTH default
 * with any password works (Redis's nopass), any other name fails. */
static void open_server(void **state)
{
    (void)state;
    char err[256];
    sl_auth *a = make(NULL, "", 10, 60000, err, sizeof err);
    assert_non_null(a);
    assert_false(sl_auth_required(a));
    const sl_auth_user *anon = sl_auth_anonymous(a);
    assert_non_null(anon);
    assert_string_equal(anon->name, "default");
    assert_int_equal(anon->groups, SL_AUTH_ALL);
    const sl_auth_user *u;
    assert_int_equal(login(a, "127.0.0.1", "default", "anything", 0, &u, NULL), SL_AUTH_OK);
    assert_ptr_equal(u, anon);
    assert_int_equal(login(a, "127.0.0.1", "alice", "x", 0, NULL, NULL), SL_AUTH_WRONG);
    sl_auth_free(a);
    /* no sl_auth at all (a server made without one): the same default */
    assert_non_null(sl_auth_anonymous(NULL));
    assert_int_equal(sl_auth_anonymous(NULL)->groups, SL_AUTH_ALL);
    assert_false(sl_auth_required(NULL));
}

/* ---- constant time ------------------------------------------------------- */

/* Every comparison is CRYPTO_memcmp of whole digests, against every
 * password of the user -- also after a match, and against a dummy for a
 * name that is no user or a user that is off. */
static void compares_digests_in_constant_time(void **state)
{
    (void)state;
    char err[256];
    sl_auth *a = make(NULL, file_with("user ops >one >two >three +all\nuser shut off +reading\n"),
                      1000, 60000, err, sizeof err);
    assert_non_null(a);
    static const struct {
        const char *user, *pass;
        int rc, calls;
    } cases[] = {
        {"ops", "one", SL_AUTH_OK, 3},       {"ops", "three", SL_AUTH_OK, 3},
        {"ops", "x", SL_AUTH_WRONG, 3},      {"ops", "", SL_AUTH_WRONG, 3},
        {"nobody", "one", SL_AUTH_WRONG, 1}, {"shut", "one", SL_AUTH_WRONG, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcmp_calls = 0;
        memcmp_last_len = 0;
        assert_int_equal(login(a, "10.1.1.1", cases[i].user, cases[i].pass, 0, NULL, NULL),
                         cases[i].rc);
        assert_int_equal(memcmp_calls, cases[i].calls);
        assert_int_equal(memcmp_last_len, SL_AUTH_DIGEST);
    }
    sl_auth_free(a);
}

/* ---- failed logins ------------------------------------------------------- */

/* N failures per window per address: the N+1-th attempt is refused
 * without checking -- the right password too -- until the oldest failure
 * is a window old; retry_ms says exactly when. */
static void failures_are_limited(void **state)
{
    (void)state;
    char err[256];
    sl_auth *a = make(NULL, file_with("user u >right +all\n"), 3, 10000, err, sizeof err);
    assert_non_null(a);
    const sl_auth_user *u;
    int64_t retry;
    const int64_t t0 = 1000000;
    assert_int_equal(login(a, "10.0.0.7", "u", "a", t0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.7", "u", "b", t0 + 100, NULL, NULL), SL_AUTH_WRONG);
    /* a success between failures clears nothing */
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 150, &u, NULL), SL_AUTH_OK);
    assert_int_equal(login(a, "10.0.0.7", "nobody", "c", t0 + 200, NULL, NULL), SL_AUTH_WRONG);
    memcmp_calls = 0;
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 300, &u, &retry), SL_AUTH_BLOCKED);
    assert_null(u);
    assert_int_equal(retry, 10000 - 300); /* the first failure leaves the window */
    assert_int_equal(memcmp_calls, 0);    /* the password was not looked at */
    assert_int_equal(login(a, "10.0.0.7", "u", "wrong", t0 + 9999, NULL, &retry), SL_AUTH_BLOCKED);
    assert_int_equal(retry, 1);
    /* another address is not affected */
    assert_int_equal(login(a, "10.0.0.8", "u", "right", t0 + 9999, NULL, NULL), SL_AUTH_OK);
    /* blocked attempts were not counted: at t0 + 10000 one failure has left */
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 10000, &u, NULL), SL_AUTH_OK);
    assert_string_equal(u->name, "u");
    assert_int_equal(login(a, "10.0.0.7", "u", "x", t0 + 10000, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 10050, NULL, &retry), SL_AUTH_BLOCKED);
    assert_int_equal(retry, 50); /* the second failure (t0 + 100) leaves at t0 + 10100 */
    sl_auth_stats st;
    sl_auth_stats_get(a, &st);
    assert_int_equal(st.failed, 4);
    assert_int_equal(st.blocked, 3);
    assert_int_equal(st.ok, 3);
    /* expiry forgets what left its window, and changes no answer */
    sl_auth_expire(a, t0 + 100000);
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 100000, NULL, NULL), SL_AUTH_OK);
    sl_auth_free(a);
}

/* A credential checked outside sl_auth_login (the admin token of
 * /v1/rules) goes through the same limiter: its failures and AUTH's share
 * one count per address, and a blocked address is blocked for both. */
static void other_credentials_share_the_limit(void **state)
{
    (void)state;
    char err[256];
    sl_auth *a = make(NULL, file_with("user u >right +all\n"), 3, 10000, err, sizeof err);
    assert_non_null(a);
    int64_t retry;
    const int64_t t0 = 1000000;
    assert_int_equal(sl_auth_may_try(a, "10.0.0.7", t0, &retry), SL_AUTH_OK);
    assert_int_equal(retry, 0);
    sl_auth_failed(a, "10.0.0.7", "admin-token", 11, t0);
    sl_auth_failed(a, "10.0.0.7", "admin-token", 11, t0 + 10);
    assert_int_equal(sl_auth_may_try(a, "10.0.0.7", t0 + 20, &retry), SL_AUTH_OK);
    assert_int_equal(login(a, "10.0.0.7", "u", "wrong", t0 + 30, NULL, NULL), SL_AUTH_WRONG);
    /* three failures of two kinds: both are refused now, the right password too */
    assert_int_equal(sl_auth_may_try(a, "10.0.0.7", t0 + 40, &retry), SL_AUTH_BLOCKED);
    assert_int_equal(retry, 10000 - 40);
    assert_int_equal(login(a, "10.0.0.7", "u", "right", t0 + 50, NULL, &retry), SL_AUTH_BLOCKED);
    /* per address */
    assert_int_equal(sl_auth_may_try(a, "10.0.0.8", t0 + 50, &retry), SL_AUTH_OK);
    assert_int_equal(login(a, "10.0.0.8", "u", "right", t0 + 50, NULL, NULL), SL_AUTH_OK);
    /* the first failure leaves the window: one more try */
    assert_int_equal(sl_auth_may_try(a, "10.0.0.7", t0 + 10000, &retry), SL_AUTH_OK);
    sl_auth_stats st;
    sl_auth_stats_get(a, &st);
    assert_int_equal(st.failed, 3);
    assert_int_equal(st.blocked, 2);
    sl_auth_free(a);
}

/* One IPv6 /64 is one address for the limiter; IPv4 in IPv6 is IPv4. */
static void peer_keys(void **state)
{
    (void)state;
    char k[80];
    static const char *const cases[][2] = {
        {"10.0.0.7", "10.0.0.7"},
        {"::ffff:10.0.0.7", "10.0.0.7"},
        {"::1", "::/64"},
        {"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
        {"2001:db8:1:2::9", "2001:db8:1:2::/64"},
        {"fe80::1", "fe80::/64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(sl__auth_peer_key(cases[i][0], k, sizeof k), strlen(cases[i][1]));
        assert_string_equal(k, cases[i][1]);
    }
    assert_int_equal(sl__auth_peer_key(NULL, k, sizeof k), 5);
    assert_string_equal(k, "local");

    char err[256];
    sl_auth *a = make(NULL, file_with("user u >p +all\n"), 1, 60000, err, sizeof err);
    assert_non_null(a);
    assert_int_equal(login(a, "2001:db8:1:2::1", "u", "x", 0, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "2001:db8:1:2::ffff", "u", "p", 1, NULL, NULL), SL_AUTH_BLOCKED);
    assert_int_equal(login(a, "2001:db8:1:3::1", "u", "p", 1, NULL, NULL), SL_AUTH_OK);
    assert_int_equal(login(a, "::ffff:192.0.2.1", "u", "x", 2, NULL, NULL), SL_AUTH_WRONG);
    assert_int_equal(login(a, "192.0.2.1", "u", "p", 3, NULL, NULL), SL_AUTH_BLOCKED);
    sl_auth_free(a);
}

/* The SHA-256 is SHA-256 (the FIPS 180-2 "abc" vector), as `sha256sum`
 * writes it for the users file. */
static void sha256_vector(void **state)
{
    (void)state;
    assert_string_equal(hex("abc"),
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(users_file, teardown),
        cmocka_unit_test_teardown(users_file_errors, teardown),
        cmocka_unit_test_teardown(requirepass_file, teardown),
        cmocka_unit_test_teardown(open_server, teardown),
        cmocka_unit_test_teardown(compares_digests_in_constant_time, teardown),
        cmocka_unit_test_teardown(failures_are_limited, teardown),
        cmocka_unit_test_teardown(other_credentials_share_the_limit, teardown),
        cmocka_unit_test_teardown(peer_keys, teardown),
        cmocka_unit_test(sha256_vector),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
