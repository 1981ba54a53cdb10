/*
 * fuzz_rules.c -- libFuzzer target for the rules loader (src/rules/rules.c).
 * Feeds arbitrary bytes as one rules file and checks the loader's promises:
 * a set, or no set and a "fuzz.yaml:..." message, never both; and for a set,
 * that every descriptor reached only through exact values is what matching
 * finds for those values, that matching never fails on any descriptor's own
 * path (a wildcard level gets a value its pattern matches), that counting
 * keys stay within SL_MAX_KEY, and that Lyft's statistics names are whole.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char zvalue[SL_RULES_MAX_DEPTH][SL_MAX_KEY + 2]; /* per level */

/* A request for node: its own values, a value under each wildcard, any
 * value for key-only levels.  Returns the number of entries; *exact says
 * whether every level was an exact value. */
static int request_for(const sl_rule_node *node, sl_rule_entry *e, int *exact)
{
    int n = node->depth;
    *exact = 1;
    for (const sl_rule_node *x = node; x && x->depth > 0; x = x->parent) {
        sl_rule_entry *y = &e[x->depth - 1];
        y->key = x->key;
        y->keylen = x->keylen;
        if (x->match == SL_MATCH_EXACT) {
            y->value = x->value;
            y->valuelen = x->valuelen;
        } else if (x->match == SL_MATCH_WILDCARD) {
            /* the pattern with each '*' as "z": a value it matches */
            char *z = zvalue[x->depth - 1];
            for (size_t i = 0; i < x->valuelen; i++) z[i] = x->value[i] == '*' ? 'z' : x->value[i];
            y->value = z;
            y->valuelen = x->valuelen;
            *exact = 0;
        } else {
            y->value = "v";
            y->valuelen = 1;
            *exact = 0;
        }
    }
    return n;
}

static int check_node(const sl_rule_node *node, void *ctx)
{
    const sl_rules *r = ctx;
    if (node->depth == 0) return 0;
    if (node->depth > SL_RULES_MAX_DEPTH) abort();
    sl_rule_entry e[SL_RULES_MAX_DEPTH];
    int exact;
    int n = request_for(node, e, &exact);
    const sl_rule_domain *d = node->domain;
    const sl_rule_node *m = sl_rules_match(r, d->name, d->namelen, e, n);
    if (exact && node->nlimits > 0 && m != node) abort();
    if (exact && node->nlimits == 0 && m != NULL) abort();
    if (m != NULL) {
        if (m->nlimits < 1 || m->depth != n) abort();
        char key[SL_MAX_KEY], text[256];
        for (int i = -1; i < m->nlimits; i++) {
            size_t len = 0;
            int rc = sl_rules_key(m, e, n, i, key, sizeof key, &len);
            if (rc == 0 && (len == 0 || len > SL_MAX_KEY)) abort();
            if (rc != 0 && rc != SL_EKEY) abort();
            if (i >= 0) {
                const sl_rule_limit *l = &m->limits[i];
                if (l->name == NULL || l->name[0] == '\0') abort();
                if (!l->unlimited &&
                    sl_params_check(&(sl_params){
                        l->params.algo, l->params.limit ? l->params.limit : 1, l->params.window_ms,
                        l->params.burst, l->params.precision, 0}) != 0)
                    abort();
                sl_rules_limit_format(l, text, sizeof text);
            }
        }
        size_t mlen = 0;
        int dyn = sl_rules_metric_name(m, e, n, key, sizeof key, &mlen);
        if (dyn != sl_rules_metric_dynamic(m) ||
            strlen(key) != (mlen < sizeof key ? mlen : sizeof key - 1))
            abort();
        sl_rules_node_notes(m, text, sizeof text);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    err[0] = 'x';
    sl_rules *r = sl_rules_load_buffer("fuzz.yaml", (const char *)data, size, err, sizeof err);
    if (r == NULL) {
        if (strncmp(err, "fuzz.yaml:", 10) != 0) abort();
        return 0;
    }
    if (err[0] != '\0') abort();
    if (sl_rules_ndomains(r) != 1) abort();
    sl_rules_ref(r);
    sl_rules_foreach(r, check_node, r);
    sl_rules_unref(r);
    sl_rules_free(r);
    return 0;
}
