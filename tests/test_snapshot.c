/*
 * test_snapshot.c -- sl_store_save / sl_store_load: a restart loses nothing
 * (every key of every algorithm answers the same after a round trip), and a
 * damaged file is refused whole with a message that says what is wrong.
 * A snapshot path that is a symbolic link is written through (the link
 * stays); sl_store_save_check finds a place that cannot be written before
 * the first save does.  sl_store_latest_time gives the latest clock of the
 * keys loaded (what sluiced starts its clock at when the wall clock is
 * behind them).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sluice.h"

#define NKEYS 300

static char path[256];

static sl_params params_for(int a)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = (sl_algo)(a % SL_ALGO_COUNT);
    p.limit = 5 + a % 7;
    p.window_ms = 60000;
    if (p.algo == SL_SLIDING_BUCKETS) p.precision = 60;
    if (p.algo == SL_TOKEN_BUCKET || p.algo == SL_LEAKY_BUCKET) p.burst = 9;
    if (p.algo == SL_SLIDING_LOG && a % 2) p.log_rejected = 1;
    return p;
}

/* Fills a store with NKEYS keys under every algorithm, some at their limit. */
static sl_store *filled(void)
{
    sl_store *s = sl_store_new(NULL, NULL);
    char key[32];
    for (int a = 0; a < SL_ALGO_COUNT * 2; a++) {
        sl_params p = params_for(a);
        for (int k = 0; k < NKEYS; k++) {
            int n = snprintf(key, sizeof(key), "k%d:%d", a, k);
            for (int i = 0; i < k % 12; i++) {
                sl_result r;
                assert_int_equal(sl_decide(s, &p, key, (size_t)n, 1000 + i * 700 + k, 1 + i % 3, &r), 0);
            }
        }
    }
    return s;
}

/* Every key answers the same in both stores (peek at a later time). */
static void same_answers(sl_store *a, sl_store *b)
{
    char key[32];
    for (int al = 0; al < SL_ALGO_COUNT * 2; al++) {
        sl_params p = params_for(al);
        for (int k = 0; k < NKEYS; k++) {
            int n = snprintf(key, sizeof(key), "k%d:%d", al, k);
            for (int64_t t = 9000; t < 80000; t += 7000) {
                sl_result ra, rb;
                assert_int_equal(sl_peek(a, &p, key, (size_t)n, t, 2, &ra), 0);
                assert_int_equal(sl_peek(b, &p, key, (size_t)n, t, 2, &rb), 0);
                if (memcmp(&ra, &rb, sizeof(ra)) != 0)
                    fail_msg("%s key %s at %lld differs after reload", sl_algo_name(p.algo), key,
                             (long long)t);
            }
        }
    }
}

static void round_trip(void **state)
{
    (void)state;
    sl_store *a = filled();
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    sl_store *b = sl_store_new(NULL, NULL);
    uint64_t n = 0;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), 0);
    sl_store_stats sa, sb;
    sl_store_stats_get(a, &sa);
    sl_store_stats_get(b, &sb);
    assert_int_equal(n, sa.keys);
    assert_int_equal(sb.keys, sa.keys);
    same_answers(a, b);
    sl_store_free(a);
    sl_store_free(b);
}

/* A key in both spaces comes back as two keys with their own counts. */
static void spaces_round_trip(void **state)
{
    (void)state;
    sl_store *a = sl_store_new(NULL, NULL);
    sl_params p0 = SL_PARAMS_INIT, p1;
    p0.algo = SL_TOKEN_BUCKET;
    p0.limit = 10;
    p0.window_ms = 60000;
    p1 = p0;
    p1.space = 1;
    sl_result r;
    assert_int_equal(sl_decide(a, &p0, "both", 4, 1000, 2, &r), 0);
    assert_int_equal(sl_decide(a, &p1, "both", 4, 1000, 7, &r), 0);
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    sl_store *b = sl_store_new(NULL, NULL);
    uint64_t n = 0;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 2);
    assert_int_equal(sl_peek(b, &p0, "both", 4, 1000, 0, &r), 0);
    assert_int_equal(r.remaining, 8);
    assert_int_equal(sl_peek(b, &p1, "both", 4, 1000, 0, &r), 0);
    assert_int_equal(r.remaining, 3);
    sl_store_free(a);
    sl_store_free(b);
}

static size_t file_size(void)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return (size_t)n;
}

static void rewrite(size_t keep, long flip_at)
{
    FILE *f = fopen(path, "rb");
    uint8_t *p = malloc(keep);
    assert_int_equal(fread(p, 1, keep, f), keep);
    fclose(f);
    if (flip_at >= 0) p[flip_at] ^= 0x5a;
    f = fopen(path, "wb");
    fwrite(p, 1, keep, f);
    fclose(f);
    free(p);
}

/* A damaged file is refused, with a message naming the file and the
 * problem, and the store it was loaded into is unchanged. */
static void refuse(const char *what, const char *phrase)
{
    sl_store *b = sl_store_new(NULL, NULL);
    sl_params p = params_for(0);
    sl_result r;
    sl_decide(b, &p, "already", 7, 1, 1, &r);
    char err[512] = "";
    uint64_t n = 12345;
    assert_int_equal(sl_store_load(b, path, &n, err, sizeof(err)), -1);
    if (strstr(err, phrase) == NULL || strstr(err, path) == NULL)
        fail_msg("%s: message '%s' does not say '%s' and the path", what, err, phrase);
    sl_store_stats st;
    sl_store_stats_get(b, &st);
    assert_int_equal(st.keys, 1); /* nothing half-loaded */
    sl_store_free(b);
}

static void damaged_files(void **state)
{
    (void)state;
    sl_store *a = filled();
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    size_t full = file_size();

    rewrite(full, (long)(full / 2)); /* one flipped byte in the middle */
    refuse("flipped byte", "checksum mismatch");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(full - 100, -1); /* cut short */
    refuse("truncated", "checksum mismatch");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(30, -1); /* only the header survives */
    refuse("header only", "truncated");

    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    rewrite(full, 0); /* magic */
    refuse("bad magic", "not a sluice snapshot");

    FILE *f = fopen(path, "wb");
    fputs("hello, I am not a snapshot at all, just text\n", f);
    fclose(f);
    refuse("text", "not a sluice snapshot");

    unlink(path);
    sl_store *b = sl_store_new(NULL, NULL);
    assert_int_equal(sl_store_load(b, path, NULL, err, sizeof(err)), 1); /* absent: start empty */
    sl_store_free(b);
    sl_store_free(a);
}

/* An empty store, and one whose keys all sit in one shard of many, round
 * trip too (empty shards must not disturb the checksum). */
static void sparse_stores(void **state)
{
    (void)state;
    char err[512];
    for (int keys = 0; keys <= 1; keys++) {
        sl_store *a = sl_store_new(NULL, NULL);
        sl_params p = params_for(0);
        sl_result r;
        if (keys) sl_decide(a, &p, "only", 4, 5, 1, &r);
        assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
        sl_store *b = sl_store_new(NULL, NULL);
        uint64_t n = 99;
        if (sl_store_load(b, path, &n, err, sizeof(err)) != 0) fail_msg("%s", err);
        assert_int_equal(n, (uint64_t)keys);
        sl_store_free(a);
        sl_store_free(b);
    }
}

static void unwritable(void **state)
{
    (void)state;
    sl_store *a = sl_store_new(NULL, NULL);
    char err[512] = "";
    assert_int_equal(sl_store_save(a, "/nonexistent-dir/x/snap", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x/snap"));
    sl_store_free(a);
}

/* A fresh directory for one test (mode 0755, so nobody may enter it). */
static void temp_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/sluice-test-snapdir-XXXXXX");
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
}

/* How many entries dir has, besides . and .. */
static int entries_in(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int n = -1;
    assert_int_equal(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

static void remove_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A snapshot path that is a symbolic link -- relative, absolute, a chain of
 * two, to a file that does not exist yet -- is written through: the target
 * gets the state, the link stays a link pointing where it did, and the
 * temporary file is made (and gone) beside the target, not the link. */
static void save_through_symlink(void **state)
{
    (void)state;
    char dir[64], real[128], target[160], link1[160], link2[160], abs_link[160], buf[256];
    temp_dir(dir, sizeof dir);
    snprintf(real, sizeof real, "%s/real", dir);
    assert_int_equal(mkdir(real, 0755), 0);
    snprintf(target, sizeof target, "%s/state.snap", real);
    snprintf(link1, sizeof link1, "%s/link1.snap", dir);
    snprintf(link2, sizeof link2, "%s/link2.snap", dir);
    snprintf(abs_link, sizeof abs_link, "%s/abs.snap", dir);
    assert_int_equal(symlink("real/state.snap", link1), 0); /* dangling until the first save */
    assert_int_equal(symlink("link1.snap", link2), 0);
    assert_int_equal(symlink(target, abs_link), 0);

    sl_store *a = filled();
    char err[512];
    const char *links[] = {link1, link2, abs_link};
    for (int i = 0; i < 3; i++) {
        if (sl_store_save_check(links[i], err, sizeof err) != 0) fail_msg("%s", err);
        if (sl_store_save(a, links[i], err, sizeof err) != 0) fail_msg("%s", err);
        struct stat st;
        assert_int_equal(lstat(links[i], &st), 0);
        assert_true(S_ISLNK(st.st_mode)); /* still a link ... */
        ssize_t n = readlink(links[i], buf, sizeof buf - 1);
        assert_true(n > 0);
        buf[n] = '\0';
        assert_string_equal(buf, i == 0 ? "real/state.snap" : i == 1 ? "link1.snap" : target);
        assert_int_equal(lstat(target, &st), 0); /* ... to the file written */
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(entries_in(real), 1);  /* no .tmp left beside it */
        assert_int_equal(entries_in(dir), 4);   /* real/ and the three links */
        sl_store *b = sl_store_new(NULL, NULL); /* and it loads, through the link */
        uint64_t keys = 0;
        if (sl_store_load(b, links[i], &keys, err, sizeof err) != 0) fail_msg("%s", err);
        same_answers(a, b);
        sl_store_free(b);
        assert_int_equal(unlink(target), 0);
    }
    /* a loop is refused, naming the path */
    snprintf(buf, sizeof buf, "%s/loop.snap", dir);
    assert_int_equal(symlink("loop.snap", buf), 0);
    assert_int_equal(sl_store_save(a, buf, err, sizeof err), -1);
    assert_non_null(strstr(err, "loop.snap: Too many levels of symbolic links"));
    assert_int_equal(sl_store_save_check(buf, err, sizeof err), -1);
    sl_store_free(a);
    remove_tree(dir);
}

/* sl_store_save_check: a good place passes and is left as it was; a missing
 * directory, a file where the directory should be, a link whose target's
 * directory is missing fail with the path and the reason.  alarm(): a FIFO
 * left at the .tmp name is replaced, not opened and waited on. */
static void save_check(void **state)
{
    (void)state;
    char dir[64], p[160], q[200], want[400], err[512];
    temp_dir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/state.snap", dir);
    if (sl_store_save_check(p, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(entries_in(dir), 0); /* the test file is gone */

    snprintf(q, sizeof q, "%s.tmp", p); /* something planted at the .tmp name */
    assert_int_equal(mkfifo(q, 0600), 0);
    alarm(30);
    if (sl_store_save_check(p, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(mkfifo(q, 0600), 0);
    sl_store *a = sl_store_new(NULL, NULL);
    if (sl_store_save(a, p, err, sizeof err) != 0) fail_msg("%s", err);
    /* and a FIFO in the snapshot's place is refused at load, not waited on */
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(sl_store_load(a, p, NULL, err, sizeof err), -1);
    snprintf(want, sizeof want, "snapshot %s: not a regular file", p);
    assert_string_equal(err, want);
    alarm(0);
    assert_int_equal(unlink(p), 0);
    sl_store_free(a);

    snprintf(p, sizeof p, "%s/no/such/state.snap", dir);
    assert_int_equal(sl_store_save_check(p, err, sizeof err), -1);
    snprintf(want, sizeof want, "snapshot %s: its directory %s/no/such: No such file or directory",
             p, dir);
    assert_string_equal(err, want);

    snprintf(q, sizeof q, "%s/file", dir);
    FILE *f = fopen(q, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(p, sizeof p, "%s/file/state.snap", dir);
    assert_int_equal(sl_store_save_check(p, err, sizeof err), -1);
    snprintf(want, sizeof want, "snapshot %s: its directory %s/file: Not a directory", p, dir);
    assert_string_equal(err, want);

    snprintf(p, sizeof p, "%s/link.snap", dir); /* the target's directory is what counts */
    assert_int_equal(symlink("gone/state.snap", p), 0);
    assert_int_equal(sl_store_save_check(p, err, sizeof err), -1);
    snprintf(want, sizeof want, "snapshot %s: its directory %s/gone: No such file or directory", p,
             dir);
    assert_string_equal(err, want);
    remove_tree(dir);
}

/* A directory the server may not write in.  Root writes through mode bits,
 * so as root the check runs in a child that has become nobody (65534); the
 * message comes back through a pipe.  This is what the check is for: it
 * tries a real write, so whatever forbids writing is found. */
static void save_check_read_only_dir(void **state)
{
    (void)state;
    char dir[64], p[160], want[400], got[512] = "";
    temp_dir(dir, sizeof dir);
    assert_int_equal(chmod(dir, 0555), 0);
    snprintf(p, sizeof p, "%s/state.snap", dir);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
        char e[512];
        int rc = sl_store_save_check(p, e, sizeof e);
        ssize_t w = write(fds[1], e, strlen(e));
        _exit(rc == -1 && w >= 0 ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], got, sizeof got - 1);
    got[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3) fail_msg("could not become nobody");
    assert_int_equal(WEXITSTATUS(status), 0);
    snprintf(want, sizeof want, "snapshot %s: cannot create a file in %s: Permission denied", p,
             dir);
    assert_string_equal(got, want);
    assert_int_equal(chmod(dir, 0755), 0);
    remove_tree(dir);
}

/* The latest time of any key: none in an empty store, then the largest of
 * the keys' clocks, the same after a round trip; a forgotten key's time
 * goes with it. */
static void latest_time(void **state)
{
    (void)state;
    sl_store *a = sl_store_new(NULL, NULL);
    assert_int_equal(sl_store_latest_time(a), INT64_MIN);
    sl_params p = params_for(0);
    sl_result r;
    assert_int_equal(sl_decide(a, &p, "early", 5, 1000, 1, &r), 0);
    assert_int_equal(sl_decide(a, &p, "late", 4, 987654, 1, &r), 0);
    assert_int_equal(sl_decide(a, &p, "middle", 6, 5000, 1, &r), 0);
    assert_int_equal(sl_store_latest_time(a), 987654);
    char err[512];
    assert_int_equal(sl_store_save(a, path, err, sizeof(err)), 0);
    sl_store *b = sl_store_new(NULL, NULL);
    assert_int_equal(sl_store_load(b, path, NULL, err, sizeof(err)), 0);
    assert_int_equal(sl_store_latest_time(b), 987654);
    assert_int_equal(sl_forget(b, p.algo, "late", 4), 1);
    assert_int_equal(sl_store_latest_time(b), 5000);
    sl_store_free(a);
    sl_store_free(b);
}

int main(void)
{
    snprintf(path, sizeof(path), "/tmp/sluice-test-snapshot.%d", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),    cmocka_unit_test(spaces_round_trip),
        cmocka_unit_test(damaged_files), cmocka_unit_test(sparse_stores),
        cmocka_unit_test(unwritable),    cmocka_unit_test(save_through_symlink),
        cmocka_unit_test(save_check),    cmocka_unit_test(save_check_read_only_dir),
        cmocka_unit_test(latest_time),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    return rc;
}
