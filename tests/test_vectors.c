/*
 * test_vectors.c -- every worked example of the spec, through the library.
 *
 * Reads each file of $SLUICE_SPEC_DIR/vectors/ (never a copy: the spec is the
 * contract), takes its `# args:` line as the parameters and each
 * `T KEY [COST] | ALLOWED LIMIT REMAINING RETRY_AFTER_MS RESET_AFTER_MS DELAY_MS`
 * line as one request and its exact answer.  Three ways per file, each on a
 * fresh store:
 *   decide   sl_decide, all six fields exact;
 *   limiter  the same through sl_limiter_new / sl_allow;
 *   peek     sl_peek before each sl_decide gives the same answer (nothing
 *            consumed: a second peek agrees too) -- the whole answer, except
 *            with log-rejected, where a denied decide logs and peek does not.
 * A failure names the vector file and line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"
#include "support/vectors.h"

static const char *spec_dir(void)
{
    const char *d = getenv("SLUICE_SPEC_DIR");
    return d && *d ? d : NULL;
}

static void check_answer(const vec_file *v, const vec_step *s, const char *how, int rc,
                         const sl_result *r)
{
    if (rc != 0)
        fail_msg("%s:%d: %s '%s' returned %d (%s)", v->path, s->line, how, s->text, rc,
                 sl_strerror(rc));
    int64_t got[6] = {r->allowed,        r->limit,          r->remaining,
                      r->retry_after_ms, r->reset_after_ms, r->delay_ms};
    if (memcmp(got, s->want, sizeof got) != 0)
        fail_msg("%s:%d: %s '%s': expected %lld %lld %lld %lld %lld %lld, got %lld %lld %lld "
                 "%lld %lld %lld",
                 v->path, s->line, how, s->text, (long long)s->want[0], (long long)s->want[1],
                 (long long)s->want[2], (long long)s->want[3], (long long)s->want[4],
                 (long long)s->want[5], (long long)got[0], (long long)got[1], (long long)got[2],
                 (long long)got[3], (long long)got[4], (long long)got[5]);
}

static vec_file *load(void **state)
{
    vec_file *v = *state;
    vec_load(v);
    return v;
}

static void test_decide(void **state)
{
    vec_file *v = load(state);
    int err = 0;
    sl_store *st = sl_store_new(NULL, &err);
    assert_non_null(st);
    for (int i = 0; i < v->nsteps; i++) {
        const vec_step *s = &v->steps[i];
        sl_result r;
        memset(&r, 0x5a, sizeof r);
        int rc = sl_decide(st, &v->p, s->key, s->klen, s->t, s->cost, &r);
        check_answer(v, s, "sl_decide", rc, &r);
    }
    sl_store_free(st);
}

static void test_limiter(void **state)
{
    vec_file *v = load(state);
    int err = 0;
    sl_limiter *l = sl_limiter_new(&v->p, NULL, &err);
    if (l == NULL) fail_msg("%s: sl_limiter_new: %s", v->path, sl_strerror(err));
    for (int i = 0; i < v->nsteps; i++) {
        const vec_step *s = &v->steps[i];
        sl_result r;
        memset(&r, 0x5a, sizeof r);
        int rc = sl_allow(l, s->key, s->klen, s->t, s->cost, &r);
        check_answer(v, s, "sl_allow", rc, &r);
    }
    sl_limiter_free(l);
}

static void test_peek(void **state)
{
    vec_file *v = load(state);
    int err = 0;
    sl_store *st = sl_store_new(NULL, &err);
    assert_non_null(st);
    for (int i = 0; i < v->nsteps; i++) {
        const vec_step *s = &v->steps[i];
        sl_result p1, p2, r;
        int rc1 = sl_peek(st, &v->p, s->key, s->klen, s->t, s->cost, &p1);
        int rc2 = sl_peek(st, &v->p, s->key, s->klen, s->t, s->cost, &p2);
        int rc = sl_decide(st, &v->p, s->key, s->klen, s->t, s->cost, &r);
        check_answer(v, s, "sl_decide after sl_peek", rc, &r);
        if (rc1 != 0 || rc2 != 0)
            fail_msg("%s:%d: sl_peek '%s' returned %d, %d", v->path, s->line, s->text, rc1, rc2);
        if (memcmp(&p1, &p2, sizeof p1) != 0)
            fail_msg("%s:%d: a second sl_peek '%s' answered differently: peek changed state",
                     v->path, s->line, s->text);
        if (v->p.log_rejected) {
            if (p1.allowed != r.allowed)
                fail_msg("%s:%d: sl_peek '%s' says allowed=%lld, sl_decide %lld", v->path, s->line,
                         s->text, (long long)p1.allowed, (long long)r.allowed);
        } else {
            check_answer(v, s, "sl_peek", 0, &p1);
        }
    }
    sl_store_free(st);
}

int main(void)
{
    const char *dir = spec_dir();
    if (dir == NULL) {
        fprintf(stderr, "test_vectors: SLUICE_SPEC_DIR is not set (tests/run.sh sets it)\n");
        return 1;
    }
    char vdir[4096];
    snprintf(vdir, sizeof vdir, "%s/vectors", dir);
    char *names[VEC_MAX_FILES], why[4400];
    int n = vec_names(vdir, names, why, sizeof why);
    if (n < 0) {
        fprintf(stderr, "test_vectors: %s\n", why);
        return 1;
    }

    static const struct {
        const char *how;
        CMUnitTestFunction fn;
    } kinds[] = {{"decide", test_decide}, {"limiter", test_limiter}, {"peek", test_peek}};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    struct CMUnitTest *tests = calloc((size_t)(n * nk), sizeof *tests);
    vec_file **vecs = calloc((size_t)(n * nk), sizeof *vecs);
    char **tnames = calloc((size_t)(n * nk), sizeof *tnames);
    if (!tests || !vecs || !tnames) return 1;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < nk; k++) {
            int j = i * nk + k;
            vecs[j] = calloc(1, sizeof(vec_file));
            tnames[j] = malloc(300);
            if (!vecs[j] || !tnames[j]) return 1;
            snprintf(vecs[j]->path, sizeof vecs[j]->path, "%.4000s/%.255s", vdir, names[i]);
            snprintf(vecs[j]->name, sizeof vecs[j]->name, "%s", names[i]);
            snprintf(tnames[j], 300, "%s %s", kinds[k].how, names[i]);
            tests[j].name = tnames[j];
            tests[j].test_func = kinds[k].fn;
            tests[j].initial_state = vecs[j];
        }
    }
    printf("test_vectors: %d vector files in %s\n", n, vdir);
    int failed = _cmocka_run_group_tests("vectors", tests, (size_t)(n * nk), NULL, NULL);
    for (int j = 0; j < n * nk; j++) {
        free(vecs[j]);
        free(tnames[j]);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(tests);
    free(vecs);
    free(tnames);
    return failed ? 1 : 0;
}
