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
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice.h"

#define MAX_VECTOR_FILES 256
#define MAX_STEPS        1024

typedef struct step {
    int line;       /* in the vector file */
    char text[640]; /* the request part, for messages */
    int64_t t, cost;
    char key[SL_MAX_KEY + 1];
    size_t klen;
    int64_t want[6];
} step;

typedef struct vector {
    char path[4400];
    char name[256];
    sl_params p;
    int nsteps;
    step steps[MAX_STEPS];
} vector;

static const char *spec_dir(void)
{
    const char *d = getenv("SLUICE_SPEC_DIR");
    return d && *d ? d : NULL;
}

/* Parses "--algo X --limit N ..." into p.  Returns NULL or what is wrong. */
static const char *parse_args(char *s, sl_params *p)
{
    static char why[300];
    char *save = NULL;
    int have_algo = 0, have_limit = 0, have_window = 0;
    *p = (sl_params)SL_PARAMS_INIT;
    for (char *tok = strtok_r(s, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *v = NULL;
        if (strcmp(tok, "--log-rejected") == 0) {
            p->log_rejected = 1;
            continue;
        }
        if (strncmp(tok, "--", 2) != 0 || (v = strtok_r(NULL, " \t", &save)) == NULL) {
            snprintf(why, sizeof why, "bad args token '%s'", tok);
            return why;
        }
        int64_t x = 0;
        int rc;
        if (strcmp(tok, "--algo") == 0) {
            rc = sl_algo_parse(v, strlen(v), &p->algo);
            have_algo = 1;
        } else if (strcmp(tok, "--window") == 0) {
            rc = sl_duration_parse(v, strlen(v), &p->window_ms);
            have_window = 1;
        } else {
            rc = sl_int_parse(v, strlen(v), INT64_MAX, &x);
            if (strcmp(tok, "--limit") == 0) {
                p->limit = x;
                have_limit = 1;
            } else if (strcmp(tok, "--burst") == 0) {
                p->burst = x;
            } else if (strcmp(tok, "--precision") == 0) {
                p->precision = x;
            } else {
                snprintf(why, sizeof why, "unknown option '%s'", tok);
                return why;
            }
        }
        if (rc != 0) {
            snprintf(why, sizeof why, "bad value '%s' for %s", v, tok);
            return why;
        }
    }
    if (!have_algo || !have_limit || !have_window) return "args lack --algo, --limit or --window";
    if (sl_params_check(p) != 0) return "args fail sl_params_check";
    return NULL;
}

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *out = v;
    return 0;
}

/* Loads one vector file; fails the test (naming file:line) if malformed. */
static void load_vector(vector *v)
{
    FILE *f = fopen(v->path, "r");
    if (f == NULL) fail_msg("%s: cannot open: %s", v->path, strerror(errno));
    char line[4096];
    int lineno = 0, have_args = 0;
    v->nsteps = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "# args:", 7) == 0) {
            const char *why = parse_args(line + 7, &v->p);
            if (why) fail_msg("%s:%d: %s", v->path, lineno, why);
            have_args = 1;
            continue;
        }
        if (line[strspn(line, " \t")] == '\0' || line[0] == '#') continue;
        char *bar = strchr(line, '|');
        if (bar == NULL) fail_msg("%s:%d: no '|' in a request line", v->path, lineno);
        if (v->nsteps == MAX_STEPS) fail_msg("%s:%d: too many lines", v->path, lineno);
        step *s = &v->steps[v->nsteps++];
        *bar = '\0';
        s->line = lineno;
        snprintf(s->text, sizeof s->text, "%.600s", line);
        for (size_t k = strlen(s->text);
             k > 0 && (s->text[k - 1] == ' ' || s->text[k - 1] == '\t');)
            s->text[--k] = '\0';

        char *save = NULL, *tok[4];
        int n = 0;
        for (char *t = strtok_r(line, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
            if (n < 4)
                tok[n++] = t;
            else
                n++;
        if (n < 2 || n > 3) fail_msg("%s:%d: request is not 'T KEY [COST]'", v->path, lineno);
        s->cost = 1;
        if (parse_i64(tok[0], &s->t) || (n == 3 && parse_i64(tok[2], &s->cost)))
            fail_msg("%s:%d: bad number in request", v->path, lineno);
        s->klen = strlen(tok[1]);
        if (s->klen > SL_MAX_KEY) fail_msg("%s:%d: key too long", v->path, lineno);
        memcpy(s->key, tok[1], s->klen);

        n = 0;
        for (char *t = strtok_r(bar + 1, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
            if (n == 6 || parse_i64(t, &s->want[n]))
                fail_msg("%s:%d: expected reply is not six integers", v->path, lineno);
            n++;
        }
        if (n != 6) fail_msg("%s:%d: expected reply is not six integers", v->path, lineno);
    }
    fclose(f);
    if (!have_args) fail_msg("%s: no '# args:' line", v->path);
    if (v->nsteps == 0) fail_msg("%s: no request lines", v->path);
}

static void check_answer(const vector *v, const step *s, const char *how, int rc,
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

static vector *load(void **state)
{
    vector *v = *state;
    load_vector(v);
    return v;
}

static void test_decide(void **state)
{
    vector *v = load(state);
    int err = 0;
    sl_store *st = sl_store_new(NULL, &err);
    assert_non_null(st);
    for (int i = 0; i < v->nsteps; i++) {
        const step *s = &v->steps[i];
        sl_result r;
        memset(&r, 0x5a, sizeof r);
        int rc = sl_decide(st, &v->p, s->key, s->klen, s->t, s->cost, &r);
        check_answer(v, s, "sl_decide", rc, &r);
    }
    sl_store_free(st);
}

static void test_limiter(void **state)
{
    vector *v = load(state);
    int err = 0;
    sl_limiter *l = sl_limiter_new(&v->p, NULL, &err);
    if (l == NULL) fail_msg("%s: sl_limiter_new: %s", v->path, sl_strerror(err));
    for (int i = 0; i < v->nsteps; i++) {
        const step *s = &v->steps[i];
        sl_result r;
        memset(&r, 0x5a, sizeof r);
        int rc = sl_allow(l, s->key, s->klen, s->t, s->cost, &r);
        check_answer(v, s, "sl_allow", rc, &r);
    }
    sl_limiter_free(l);
}

static void test_peek(void **state)
{
    vector *v = load(state);
    int err = 0;
    sl_store *st = sl_store_new(NULL, &err);
    assert_non_null(st);
    for (int i = 0; i < v->nsteps; i++) {
        const step *s = &v->steps[i];
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

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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
    DIR *d = opendir(vdir);
    if (d == NULL) {
        fprintf(stderr, "test_vectors: cannot open %s: %s\n", vdir, strerror(errno));
        return 1;
    }
    char *names[MAX_VECTOR_FILES];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".txt") != 0) continue;
        if (n == MAX_VECTOR_FILES) {
            fprintf(stderr, "test_vectors: more than %d vector files\n", MAX_VECTOR_FILES);
            return 1;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n < 1) {
        fprintf(stderr, "test_vectors: no vector files (*.txt) in %s\n", vdir);
        return 1;
    }
    qsort(names, (size_t)n, sizeof names[0], by_name);

    static const struct {
        const char *how;
        CMUnitTestFunction fn;
    } kinds[] = {{"decide", test_decide}, {"limiter", test_limiter}, {"peek", test_peek}};
    const int nk = (int)(sizeof kinds / sizeof kinds[0]);
    struct CMUnitTest *tests = calloc((size_t)(n * nk), sizeof *tests);
    vector **vecs = calloc((size_t)(n * nk), sizeof *vecs);
    char **tnames = calloc((size_t)(n * nk), sizeof *tnames);
    if (!tests || !vecs || !tnames) return 1;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < nk; k++) {
            int j = i * nk + k;
            vecs[j] = calloc(1, sizeof(vector));
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
