/*
 * check.c -- `sluicectl check [options] PATH...`: loads each rules file or
 * folder exactly as sluiced's --rules does (sl_rules_load_flags, src/rules,
 * with --merge-domains as sluiced takes it) and says, per domain, what it
 * holds:
 *
 *     examples/nginx/edge.yaml: OK, domain edge, 2 descriptors, 2 rules
 *
 * or prints sluiced's own message for what is wrong, alone on its line on
 * standard error ("FILE:LINE:COLUMN: what is wrong"; "PATH: ..." when the
 * file cannot be read), the same words sluiced logs as err= when it refuses
 * the file at start or on a reload.  Nothing touches a server: like
 * `nginx -t` or `promtool check rules`, it is for before a deploy.
 *
 * Exit status: 0 every PATH loads, 1 one does not, 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "run.h"
#include "sluicectl.h"
#include "text.h"

const char sl__check_usage[] =
    "usage: sluicectl check [--merge-domains[=yes|no]] [-v] [-q] PATH...\n"
    "\n"
    "Loads each rules file or folder of them (PATH) as sluiced --rules PATH\n"
    "would, without a server.  For each domain it prints one line,\n"
    "  FILE: OK, domain NAME, N descriptors, M rules (S shadow, U unlimited, Z deny all)\n"
    "(the parenthesis only for what there is), or, for a file sluiced would\n"
    "refuse, sluiced's own message on standard error:\n"
    "  FILE:LINE:COLUMN: what is wrong\n"
    "A rule is one limit: what INFO rulestats and /metrics count by name.\n"
    "\n"
    "Options:\n"
    "  --merge-domains [yes|no]  a domain in several files is one domain, as\n"
    "                            sluiced --merge-domains (default no: refused)\n"
    "  --count-denied [yes|no]   accepted as sluiced takes it; changes nothing\n"
    "                            in what loads\n"
    "  -v, --verbose             also one line per rule: its name, its limit\n"
    "  -q, --quiet               print nothing on success\n"
    "  -h, --help                print this text\n"
    "\n"
    "Exit status: 0 every PATH loads, 1 one does not, 2 bad usage.\n";

/* What one domain holds, counted over its nodes. */
typedef struct dom_counts {
    size_t descriptors; /* nodes below the root */
    size_t rules;       /* limits */
    size_t shadow;      /* limits on shadow_mode descriptors */
    size_t unlimited;   /* `unlimited: true` */
    size_t deny_all;    /* requests_per_unit: 0 */
} dom_counts;

typedef struct walk {
    const sl_rules *r;
    dom_counts *c; /* one per domain */
    int dom;       /* the domain being walked: -1 before the first root */
    int verbose;   /* pass 2: print a line per rule */
    int print;     /* pass 2 (1) or pass 1 (0) */
} walk;

/* The domain line: FILE: OK, domain NAME[ (merged from N files)], ... */
static void print_domain(const sl_rule_domain *d, const dom_counts *c)
{
    printf("%s: OK, domain %s", d->file, d->name);
    if (d->nfiles > 1) printf(" (merged from %d files)", d->nfiles);
    printf(", %zu descriptor%s, %zu rule%s", c->descriptors, c->descriptors == 1 ? "" : "s",
           c->rules, c->rules == 1 ? "" : "s");
    const struct {
        size_t n;
        const char *what;
    } extra[] = {{c->shadow, "shadow"}, {c->unlimited, "unlimited"}, {c->deny_all, "deny all"}};
    int first = 1;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        if (extra[i].n == 0) continue;
        printf("%s%zu %s", first ? " (" : ", ", extra[i].n, extra[i].what);
        first = 0;
    }
    fputs(first ? "\n" : ")\n", stdout);
}

/* sl_rules_foreach's callback: pass 1 counts, pass 2 prints.  Nodes come
 * domain by domain, each root first. */
static int visit(const sl_rule_node *n, void *ctx)
{
    walk *w = ctx;
    if (n->depth == 0) {
        w->dom++;
        if (w->print) print_domain(n->domain, &w->c[w->dom]);
        return 0;
    }
    dom_counts *c = &w->c[w->dom];
    if (!w->print) {
        c->descriptors++;
        for (int i = 0; i < n->nlimits; i++) {
            const sl_rule_limit *l = &n->limits[i];
            c->rules++;
            c->shadow += n->shadow_mode != 0;
            c->unlimited += l->unlimited != 0;
            c->deny_all += !l->unlimited && l->params.limit == 0;
        }
        return 0;
    }
    if (!w->verbose) return 0;
    for (int i = 0; i < n->nlimits; i++) {
        const sl_rule_limit *l = &n->limits[i];
        char desc[256], notes[256];
        sl_rules_limit_format(l, desc, sizeof desc);
        sl_rules_node_notes(n, notes, sizeof notes);
        printf("  %s: %s%s%s%s (line %u)\n", l->name, desc, n->shadow_mode ? " shadow" : "",
               n->quota_mode ? " quota" : "", notes, l->line);
    }
    return 0;
}

/* Loads and reports one PATH.  Returns 0 (it loads) or 1. */
static int check_one(const char *path, unsigned flags, int verbose, int quiet)
{
    char err[1024];
    sl_rules *r = sl_rules_load_flags(path, flags, err, sizeof err);
    if (r == NULL) {
        fflush(stdout); /* the lines before it first, when both go to one place */
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int nd = sl_rules_ndomains(r);
    if (!quiet && nd == 0)
        printf("%s: OK, no rules files (every RL.CHECK answers NO_RULE)\n", path);
    if (!quiet && nd > 0) {
        dom_counts *c = calloc((size_t)nd, sizeof *c);
        if (c == NULL) {
            sl_rules_unref(r);
            fprintf(stderr, "sluicectl: out of memory\n");
            return 1;
        }
        walk w = {.r = r, .c = c, .dom = -1, .verbose = verbose};
        sl_rules_foreach(r, visit, &w);
        w.dom = -1;
        w.print = 1;
        sl_rules_foreach(r, visit, &w);
        free(c);
    }
    sl_rules_unref(r);
    return 0;
}

static const char *const check_flags[] = {"merge-domains", "count-denied", "verbose", "quiet"};

static int is_flag(const char *name, size_t nlen)
{
    return sl__name_in(name, nlen, check_flags, 2);
}
static int takes_value(const char *name, size_t nlen)
{
    (void)name;
    (void)nlen;
    return 0;
}

int sl__check_main(int argc, char **argv)
{
    sl__args w = {.argc = argc,
                  .argv = argv,
                  .takes = takes_value,
                  .flag = is_flag,
                  .see = "sluicectl check --help",
                  .many = 1};
    sl__opt op;
    unsigned flags = 0;
    int verbose = 0, quiet = 0, rc, npaths = 0;
    const char **paths = calloc((size_t)(argc > 0 ? argc : 1), sizeof *paths);
    if (paths == NULL) {
        fprintf(stderr, "sluicectl: out of memory\n");
        return 1;
    }
    /* -v and -q are the two short options: sl__args knows long ones only */
    w.i = 1;
    while (1) {
        const char *a = w.i < argc ? argv[w.i] : NULL;
        if (a != NULL && !w.only_files && (strcmp(a, "-v") == 0 || strcmp(a, "-q") == 0)) {
            if (a[1] == 'v')
                verbose = 1;
            else
                quiet = 1;
            w.i++;
            continue;
        }
        rc = sl__opts_next(&w, &op, sl__check_usage);
        if (rc == 3) {
            paths[npaths++] = op.arg;
            continue;
        }
        if (rc != 1) break;
        if (sl__opt_is(&op, "verbose")) {
            verbose = 1;
        } else if (sl__opt_is(&op, "quiet")) {
            quiet = 1;
        } else if (sl__opt_is(&op, "merge-domains") || sl__opt_is(&op, "count-denied")) {
            int yes = 1;
            if (op.val != NULL && sl__bool_parse(op.val, strlen(op.val), &yes) != 0) {
                free(paths);
                return sl__usage_error("invalid --%.*s '%s': expected yes or no", (int)op.nlen,
                                       op.name, op.val);
            }
            if (sl__opt_is(&op, "merge-domains"))
                flags = yes ? flags | SL_RULES_MERGE_DOMAINS : flags & ~SL_RULES_MERGE_DOMAINS;
        } else {
            free(paths);
            return sl__usage_error("unknown option '%s' (see %s)", op.arg, w.see);
        }
    }
    if (rc != 0) { /* -1: --help printed; 2: what is wrong printed */
        free(paths);
        return rc < 0 ? 0 : rc;
    }
    if (npaths == 0) {
        free(paths);
        return sl__usage_error("check needs a rules file or folder (see sluicectl check --help)");
    }
    int failed = 0;
    for (int i = 0; i < npaths; i++) failed |= check_one(paths[i], flags, verbose, quiet);
    free(paths);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluicectl: cannot write the report to standard output\n");
        return 1;
    }
    return failed;
}
