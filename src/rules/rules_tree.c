/*
 * rules_tree.c -- what the loader (rules_load.c) and the matcher
 * (rules_match.c) both need of a rule tree, and which calls neither: the
 * memory a set and a file's YAML tree live in (an arena, freed in one go),
 * the units of a limit, and whether a node's Lyft statistics name depends
 * on the request (the loader records it, the matcher names by it).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rules_int.h"

/* ---- arena ---------------------------------------------------------------- */

struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define ARENA_CHUNK 65536

/* Returns n zeroed bytes aligned to 8, or NULL.  Large requests get a chunk
 * of their own, linked behind the current one so its free space stays. */
void *sl__arena_alloc(arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n == 0) n = 8;
    chunk *h = a->head;
    if (h == NULL || h->cap - h->used < n) {
        size_t cap = n > ARENA_CHUNK / 4 ? n : ARENA_CHUNK;
        chunk *c = malloc(sizeof *c + cap);
        if (c == NULL) return NULL;
        c->used = 0;
        c->cap = cap;
        if (h != NULL && cap == n) {
            c->next = h->next;
            h->next = c;
        } else {
            c->next = h;
            a->head = c;
        }
        h = c;
    }
    void *p = (char *)h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

char *sl__arena_strndup(arena *a, const char *s, size_t len)
{
    char *p = sl__arena_alloc(a, len + 1);
    if (p == NULL) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

void sl__arena_free(arena *a)
{
    chunk *c = a->head;
    while (c) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

/* ---- units ---------------------------------------------------------------- */

static const struct {
    const char *name;
    int64_t seconds;
} units[SL_UNIT_COUNT] = {
    {"", 0},
    {"second", 1},
    {"minute", 60},
    {"hour", 3600},
    {"day", 86400},
    {"week", 7 * 86400},
    {"month", 30 * 86400}, /* Lyft: fixed 30 days */
    {"year", 365 * 86400}, /* Lyft: fixed 365 days */
};

const char *sl_rule_unit_name(sl_rule_unit u)
{
    return (unsigned)u < SL_UNIT_COUNT ? units[u].name : "";
}

int64_t sl_rule_unit_ms(sl_rule_unit u)
{
    return u > SL_UNIT_NONE && u < SL_UNIT_COUNT ? units[u].seconds * 1000 : 0;
}

sl_rule_unit sl__rule_unit_find(const char *s, size_t len)
{
    for (int u = 1; u < SL_UNIT_COUNT; u++)
        if (strlen(units[u].name) == len && strncasecmp(units[u].name, s, len) == 0)
            return (sl_rule_unit)u;
    return SL_UNIT_NONE;
}

/* ---- Lyft's statistics names --------------------------------------------- */

int sl_rules_metric_dynamic(const sl_rule_node *node)
{
    if (node == NULL) return 0;
    if (node->detailed_metric) return 1;
    for (const sl_rule_node *x = node; x != NULL && x->depth > 0; x = x->parent)
        if (x->value_to_metric && !x->share_threshold && x->match != SL_MATCH_EXACT) return 1;
    return 0;
}
