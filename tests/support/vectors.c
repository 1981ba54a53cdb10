/*
 * vectors.c -- the spec's vector files read for the tests (vectors.h).
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

#include "vectors.h"

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
void vec_load(vec_file *v)
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
        if (!have_args) fail_msg("%s:%d: a request before the args line", v->path, lineno);
        if (v->nsteps == VEC_MAX_STEPS) fail_msg("%s:%d: too many lines", v->path, lineno);
        vec_step *s = &v->steps[v->nsteps++];
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

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int vec_names(const char *vdir, char **names, char *why, size_t whylen)
{
    DIR *d = opendir(vdir);
    if (d == NULL) {
        snprintf(why, whylen, "cannot open %s: %s", vdir, strerror(errno));
        return -1;
    }
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".txt") != 0) continue;
        if (n == VEC_MAX_FILES) {
            closedir(d);
            snprintf(why, whylen, "more than %d vector files", VEC_MAX_FILES);
            return -1;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n < 1) {
        snprintf(why, whylen, "no vector files (*.txt) in %s", vdir);
        return -1;
    }
    qsort(names, (size_t)n, sizeof names[0], by_name);
    return n;
}
