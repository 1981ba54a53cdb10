/*
 * rules_int.h -- private to src/rules/: what the loader (rules_load.c,
 * rules_yaml.c), the matcher (rules_match.c) and what both use
 * (rules_tree.c) share, and no other file includes.  The set's layout (struct sl_rules),
 * each node's lookup tables (struct sl__rule_index) and bytes_cmp, the one
 * order those tables are sorted in by the loader and searched in by the
 * matcher -- kept here so the two cannot disagree.
 *
 * rules_load.c writes these structures while it builds a set; once the
 * loader returns the set, nothing writes to them again but the reference
 * count (refs, atomic) and the limits' sl_rule_counts, and rules_match.c
 * only reads.
 */
#ifndef SLUICE_RULES_INT_H
#define SLUICE_RULES_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rules.h"

/* The set's memory: a list of chunks freed in one go.  struct chunk and the
 * allocator are in rules_tree.c. */
typedef struct chunk chunk;

typedef struct arena {
    chunk *head;
} arena;

struct sl__rule_index {
    const sl_rule_node **exact; /* EXACT children by (key, value) */
    const sl_rule_node **wild;  /* WILDCARD children in file order (Lyft also looks
                                   a wildcard's own text up exactly: a value
                                   holding '*' is compared with each first) */
    const sl_rule_node **any;   /* ANY children by key */
    int nexact, nwild, nany;
};

struct sl_rules {
    _Atomic long refs;
    uint64_t generation;
    int64_t loaded_at_ms; /* wall clock, ms since the epoch */
    arena mem;            /* everything below */
    const char *source;
    sl_rule_domain *domains; /* load order */
    int ndomains, domains_cap;
    const sl_rule_domain **by_name; /* sorted by name */
    size_t nrules;                  /* descriptors */
    unsigned flags;                 /* SL_RULES_* it was loaded with */
    size_t meta_values, meta_bytes; /* metadata built so far (rules_meta.h's bounds) */
};

/* Orders byte strings as memcmp does, a prefix before the longer string;
 * NULL is fine with length 0.  O(shorter length). */
static inline int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c != 0) return c;
    return alen < blen ? -1 : alen > blen;
}

/* n zeroed bytes aligned to 8 in a, or NULL (out of memory).  Large
 * requests get a chunk of their own. */
void *sl__arena_alloc(arena *a, size_t n);
/* A NUL-terminated copy of s[0..len) in a, or NULL. */
char *sl__arena_strndup(arena *a, const char *s, size_t len);
/* Frees everything allocated in a; a is empty again. */
void sl__arena_free(arena *a);

/* The unit named s[0..len) in any case ("Minute"), or SL_UNIT_NONE. */
sl_rule_unit sl__rule_unit_find(const char *s, size_t len);

#endif /* SLUICE_RULES_INT_H */
