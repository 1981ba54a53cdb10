/*
 * test_journal.c -- the decision journal (src/server/journal.c,
 * journal_fmt.c): its bytes round trip; a torn last record is dropped and
 * said where; a corrupt record in the middle refuses the replay naming the
 * file and the offset; and on random decision sequences through the local
 * backend (decide, all-or-none batches, resets, a fold into the snapshot
 * halfway, two threads on the same keys) snapshot + journal replay to
 * exactly the live store's state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend_local.h"
#include "journal.h"
#include "journal_fmt.h"
#include "snapshot.h"
#include "sluice.h"
#include "store.h"

static char dir[256], jpath[300], spath[300];

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/sluice-test-journal-%d", (int)getpid());
    mkdir(dir, 0700);
    snprintf(jpath, sizeof jpath, "%s/j", dir);
    snprintf(spath, sizeof spath, "%s/s.snap", dir);
    unlink(jpath);
    unlink(spath);
    char old[320];
    snprintf(old, sizeof old, "%s.old", jpath);
    unlink(old);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static sl_params params_for(int a)
{
    sl_params p = SL_PARAMS_INIT;
    p.algo = (sl_algo)(a % SL_ALGO_COUNT);
    p.limit = 3 + a % 5;
    p.window_ms = 10000;
    if (p.algo == SL_SLIDING_BUCKETS) p.precision = 10;
    if (p.algo == SL_TOKEN_BUCKET || p.algo == SL_LEAKY_BUCKET) p.burst = 4;
    return p;
}

static void done_cb(sl_breq *rq) { (void)rq; }

static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

#define NALGO (SL_ALGO_COUNT * 2)
#define NKEY  12
#define TEND  400000

/* Every (algorithm, key) answers alike in both stores, peeked later. */
static void same_state(sl_store *a, sl_store *b)
{
    char key[32];
    for (int al = 0; al < NALGO; al++) {
        sl_params p = params_for(al);
        for (int k = 0; k < NKEY; k++) {
            int n = snprintf(key, sizeof key, "k%d", k);
            sl_result ra, rb;
            assert_int_equal(sl_peek(a, &p, key, (size_t)n, TEND, 1, &ra), 0);
            assert_int_equal(sl_peek(b, &p, key, (size_t)n, TEND, 1, &rb), 0);
            if (memcmp(&ra, &rb, sizeof ra) != 0)
                fail_msg("algo %d key %s: live remaining %lld reset %lld, replayed remaining "
                         "%lld reset %lld",
                         al, key, (long long)ra.remaining, (long long)ra.reset_after_ms,
                         (long long)rb.remaining, (long long)rb.reset_after_ms);
        }
    }
    sl_store_stats sa, sb;
    sl_store_stats_get(a, &sa);
    sl_store_stats_get(b, &sb);
    assert_int_equal(sa.keys, sb.keys);
}

/* n random requests through backend b at times from *t on; commits the
 * journal every few (a turn). */
static void random_turns(sl_backend *b, int n, int64_t *t)
{
    sl_bchan *ch = sl_backend_channel(b, NULL);
    char key[32], key2[32];
    for (int i = 0; i < n; i++) {
        *t += (int64_t)(rnd() % 300);
        int al = (int)(rnd() % NALGO), k = (int)(rnd() % NKEY);
        sl_params p = params_for(al), p2 = params_for((al + 3) % NALGO);
        int len = snprintf(key, sizeof key, "k%d", k);
        int len2 = snprintf(key2, sizeof key2, "k%d", (k + 1) % NKEY);
        sl_breq rq = {.now_ms = *t, .cb = done_cb, .params = &p, .key = key, .keylen = (size_t)len,
                      .cost = 1 + (int64_t)(rnd() % 2)};
        sl_request reqs[2] = {{&p, key, (size_t)len, 1}, {&p2, key2, (size_t)len2, 1}};
        sl_result res[2];
        switch (rnd() % 10) {
        case 0:
            rq.op = SL_BOP_FORGET;
            rq.algo_lo = (int)p.algo;
            rq.algo_hi = (int)p.algo + 1;
            break;
        case 1:
        case 2:
            rq.op = SL_BOP_DECIDE_ALL;
            rq.reqs = reqs;
            rq.nreqs = p.algo == p2.algo ? 1 : 2;
            rq.results = res;
            break;
        default: rq.op = SL_BOP_DECIDE; break;
        }
        sl_backend_submit(ch, &rq);
        assert_int_equal(rq.rc, 0);
        if (rnd() % 4 == 0) assert_int_equal(sl_journal_commit(), 0);
    }
    assert_int_equal(sl_journal_commit(), 0);
    sl_backend_channel_free(ch);
}

/* A fresh store loaded from the snapshot (if any) and the journal, as a
 * start after a crash loads them. */
static sl_store *replayed(sl_journal_info *info)
{
    sl_store *s = sl_store_new(NULL, NULL);
    uint32_t mark = 0;
    char err[512];
    assert_true(sl__store_load_mark(s, spath, NULL, &mark, err, sizeof err) >= 0);
    if (sl_journal_replay(s, jpath, mark, info, err, sizeof err) != 0) fail_msg("%s", err);
    return s;
}

static void replay_equals_live(void **st)
{
    (void)st;
    for (int round = 0; round < 4; round++) {
        setup(NULL);
        sl_store *live = sl_store_new(NULL, NULL);
        sl_backend *b = sl_backend_local_new(live);
        sl_journal_info info;
        char err[512];
        sl_journal *j = sl_journal_open(live, jpath, spath, round % 2 ? SL_JFSYNC_ALWAYS
                                                                     : SL_JFSYNC_NO,
                                        0, &info, err, sizeof err);
        if (j == NULL) fail_msg("%s", err);
        assert_int_equal(sl_backend_local_record(b, sl_journal_record, j), 0);
        int64_t t = 1000;
        random_turns(b, 300, &t);
        if (round >= 2) { /* a fold halfway: snapshot + a newer journal */
            assert_int_equal(sl_journal_snapshot(j, live, spath, err, sizeof err), 0);
            char old[320];
            snprintf(old, sizeof old, "%s.old", jpath);
            assert_int_not_equal(access(old, F_OK), 0); /* removed once the snapshot held it */
            random_turns(b, 300, &t);
        }
        /* a crash now: what is on disk is all a start has */
        sl_store *back = replayed(&info);
        assert_int_equal(info.torn, 0);
        assert_true(info.records > 0);
        same_state(live, back);
        sl_store_free(back);
        sl_journal_close(j);
        sl_backend_free(b);
        sl_store_free(live);
    }
}

typedef struct worker_arg {
    sl_backend *b;
    uint64_t seed;
    pthread_barrier_t *bar;
} worker_arg;

static void decide_a(sl_bchan *ch, int64_t t)
{
    sl_params p = params_for(1);
    sl_breq rq = {.op = SL_BOP_DECIDE, .now_ms = t, .cb = done_cb, .params = &p, .key = "c",
                  .keylen = 1, .cost = 1};
    sl_backend_submit(ch, &rq);
}

static void *worker(void *arg)
{
    worker_arg *w = arg;
    sl_bchan *ch = sl_backend_channel(w->b, NULL);
    sl_params p = params_for(1); /* one algorithm, two keys: the threads collide */
    uint64_t x = w->seed;
    for (int i = 0; i < 4000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *key = x % 2 ? "a" : "b";
        sl_breq rq = {.op = SL_BOP_DECIDE, .now_ms = 1000 + i, .cb = done_cb, .params = &p,
                      .key = key, .keylen = 1, .cost = 1};
        sl_backend_submit(ch, &rq);
        if (x % 8 == 0 && sl_journal_commit() != 0) return (void *)1;
    }
    if (sl_journal_commit() != 0) return (void *)1;
    /* then, in a set order: thread 0 decides on "c", thread 1 decides on
     * "c" (a key of its own) and writes first, thread 0 writes last -- the file holds the
     * newer state before the older */
    int me = w->seed == 1234567 ? 0 : 1;
    pthread_barrier_wait(w->bar);
    if (me == 0) decide_a(ch, 9000);
    pthread_barrier_wait(w->bar);
    if (me == 1) {
        decide_a(ch, 9001);
        if (sl_journal_commit() != 0) return (void *)1;
    }
    pthread_barrier_wait(w->bar);
    if (me == 0 && sl_journal_commit() != 0) return (void *)1;
    sl_backend_channel_free(ch);
    return NULL;
}

/* Two threads' records of one key reach the file in either order; the
 * replay orders them by number. */
static void replay_equals_live_two_threads(void **st)
{
    (void)st;
    setup(NULL);
    sl_store *live = sl_store_new(NULL, NULL);
    sl_backend *b = sl_backend_local_new(live);
    sl_journal_info info;
    char err[512];
    sl_journal *j =
        sl_journal_open(live, jpath, spath, SL_JFSYNC_EVERYSEC, 0, &info, err, sizeof err);
    if (j == NULL) fail_msg("%s", err);
    sl_backend_local_record(b, sl_journal_record, j);
    pthread_t th[2];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    worker_arg wa[2] = {{b, 1234567, &bar}, {b, 7654321, &bar}};
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, worker, &wa[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
    }
    pthread_barrier_destroy(&bar);
    sl_store *back = replayed(&info);
    sl_params p = params_for(1);
    for (int k = 0; k < 3; k++) {
        const char *key = k == 0 ? "a" : k == 1 ? "b" : "c";
        sl_result ra, rb;
        assert_int_equal(sl_peek(live, &p, key, 1, 9002, 1, &ra), 0);
        assert_int_equal(sl_peek(back, &p, key, 1, 9002, 1, &rb), 0);
        assert_memory_equal(&ra, &rb, sizeof ra);
    }
    sl_store_free(back);
    sl_journal_close(j);
    sl_backend_free(b);
    sl_store_free(live);
}

/* A journal of n decisions on keys k0..k{n-1}; returns the record offsets. */
static void write_journal(int n, size_t *offs)
{
    setup(NULL);
    sl_store *live = sl_store_new(NULL, NULL);
    sl_backend *b = sl_backend_local_new(live);
    sl_journal_info info;
    char err[512];
    sl_journal *j = sl_journal_open(live, jpath, spath, SL_JFSYNC_NO, 0, &info, err, sizeof err);
    if (j == NULL) fail_msg("%s", err);
    sl_backend_local_record(b, sl_journal_record, j);
    sl_bchan *ch = sl_backend_channel(b, NULL);
    sl_params p = params_for(0);
    char key[16];
    for (int i = 0; i < n; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        sl_breq rq = {.op = SL_BOP_DECIDE, .now_ms = 1000, .cb = done_cb, .params = &p,
                      .key = key, .keylen = (size_t)len, .cost = 1};
        sl_backend_submit(ch, &rq);
        assert_int_equal(sl_journal_commit(), 0);
    }
    sl_journal_close(j);
    sl_backend_free(b);
    sl_store_free(live);
    /* the offsets, by the parser */
    FILE *f = fopen(jpath, "r");
    static uint8_t buf[65536];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t off = SL_JOURNAL_HEAD;
    sl_jrec r;
    const char *why;
    for (int i = 0; i < n; i++) {
        assert_int_equal(sl_journal_next(buf, len, &off, &r, &why), 1);
        offs[i] = r.off;
    }
    assert_int_equal(sl_journal_next(buf, len, &off, &r, &why), 0);
    offs[n] = len;
}

static void format_round_trip(void **st)
{
    (void)st;
    uint8_t h[SL_JOURNAL_HEAD];
    uint32_t gen;
    uint64_t base;
    const char *why = NULL;
    sl_journal_head_make(h, 7, 123456789012ull);
    assert_int_equal(sl_journal_head_parse(h, sizeof h, &gen, &base, &why), 0);
    assert_int_equal(gen, 7);
    assert_int_equal(base, 123456789012ull);
    h[20] ^= 1;
    assert_int_equal(sl_journal_head_parse(h, sizeof h, &gen, &base, &why), -1);
    assert_string_equal(why, "head checksum mismatch");

    /* an image of a real record and a "gone", framed and parsed back */
    sl_store *s = sl_store_new(NULL, NULL);
    sl_params p = params_for(2);
    sl_result res;
    assert_int_equal(sl_decide(s, &p, "user:1", 6, 5000, 2, &res), 0);
    uint8_t buf[4096];
    _Atomic uint64_t seq = 41;
    uint64_t got;
    size_t n = sl__store_image(s, (unsigned)p.algo, "user:1", 6, buf + SL_JREC_HDR + SL_JREC_FIXED,
                               sizeof buf - 100, &seq, &got);
    assert_true(n > 16 + 6);
    assert_int_equal(got, 41);
    buf[SL_JREC_HDR] = SL_JREC_IMAGE;
    sl__st64(buf + SL_JREC_HDR + 1, got);
    size_t len = sl_journal_frame(buf, SL_JREC_FIXED + n);
    uint8_t *g = buf + len;
    g[SL_JREC_HDR] = SL_JREC_GONE;
    sl__st64(g + SL_JREC_HDR + 1, 42);
    sl__st16(g + SL_JREC_HDR + SL_JREC_FIXED, (uint16_t)(3 | SL__KIND_SPACE));
    memcpy(g + SL_JREC_HDR + SL_JREC_FIXED + 2, "abc", 3);
    len += sl_journal_frame(g, SL_JREC_FIXED + 5);
    size_t off = 0;
    sl_jrec r;
    assert_int_equal(sl_journal_next(buf, len, &off, &r, &why), 1);
    assert_int_equal(r.type, SL_JREC_IMAGE);
    assert_int_equal(r.seq, 41);
    assert_int_equal(r.imglen, n);
    /* the image put into another store answers as the first */
    sl_store *s2 = sl_store_new(NULL, NULL);
    sl__store_image_apply(s2, r.img);
    sl_result a, b;
    assert_int_equal(sl_peek(s, &p, "user:1", 6, 6000, 1, &a), 0);
    assert_int_equal(sl_peek(s2, &p, "user:1", 6, 6000, 1, &b), 0);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(sl_journal_next(buf, len, &off, &r, &why), 1);
    assert_int_equal(r.type, SL_JREC_GONE);
    assert_int_equal(r.seq, 42);
    assert_int_equal(r.kind, 3 | SL__KIND_SPACE);
    assert_int_equal(r.klen, 3);
    assert_memory_equal(r.key, "abc", 3);
    assert_int_equal(sl_journal_next(buf, len, &off, &r, &why), 0);
    /* absent key: no image, a number all the same */
    assert_int_equal(sl__store_image(s, 0, "nobody", 6, buf, sizeof buf, &seq, &got), 0);
    assert_int_equal(got, 42);
    sl_store_free(s);
    sl_store_free(s2);
}

static void torn_tail(void **st)
{
    (void)st;
    size_t offs[6];
    /* cut in the middle of the last record, then a tail of zeros */
    for (int kind = 0; kind < 2; kind++) {
        write_journal(5, offs);
        if (kind == 0) {
            assert_int_equal(truncate(jpath, (off_t)(offs[4] + 11)), 0);
        } else {
            assert_int_equal(truncate(jpath, (off_t)offs[4]), 0);
            assert_int_equal(truncate(jpath, (off_t)offs[4] + 4096), 0); /* zeros */
        }
        unlink(spath); /* the journal alone: 4 keys */
        sl_journal_info info;
        sl_store *s = replayed(&info);
        assert_int_equal(info.torn, 1);
        assert_string_equal(info.torn_file, jpath);
        assert_int_equal(info.torn_off, offs[4]);
        assert_int_equal(info.records, 4);
        sl_store_stats ss;
        sl_store_stats_get(s, &ss);
        assert_int_equal(ss.keys, 4);
        sl_store_free(s);
    }
}

static void corrupt_middle(void **st)
{
    (void)st;
    size_t offs[6];
    write_journal(5, offs);
    FILE *f = fopen(jpath, "r+");
    fseek(f, (long)offs[2] + 14, SEEK_SET);
    int c = fgetc(f);
    fseek(f, (long)offs[2] + 14, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    sl_store *s = sl_store_new(NULL, NULL);
    sl_journal_info info;
    char err[600], want[600];
    assert_int_equal(sl_journal_replay(s, jpath, 0, &info, err, sizeof err), -1);
    snprintf(want, sizeof want, "journal %s: corrupt record at offset %zu (checksum mismatch)",
             jpath, offs[2]);
    assert_memory_equal(err, want, strlen(want));
    sl_store_stats ss;
    sl_store_stats_get(s, &ss);
    assert_int_equal(ss.keys, 0); /* nothing applied */
    sl_store_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(format_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(corrupt_middle, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_equals_live, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_equals_live_two_threads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
