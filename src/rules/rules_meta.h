/*
 * rules_meta.h -- a descriptor's `metadata:` (Lyft's field, handed to Envoy
 * in the gRPC reply's dynamic_metadata: src/proto/grpc/rls_meta.h), as the
 * loader keeps it: a small immutable tree of the values protobuf's
 * google.protobuf.Value holds, built from the YAML as envoyproxy/ratelimit
 * builds it (gopkg.in/yaml.v2, then structpb.NewStruct).  docs/rules.md
 * ("metadata") is the user's side.
 *
 * How a YAML value becomes a metadata value (yaml.v2's resolution of a
 * plain -- unquoted, not block -- scalar; every other scalar is a string):
 *
 *   null    empty, ~, null, Null, NULL
 *   bool    y Y yes Yes YES true True TRUE on On ON;
 *           n N no No NO false False FALSE off Off OFF (no other case)
 *   number  yaml.v2's ints (decimal, 0x hex, 0o or leading-0 octal, 0b
 *           binary, a sign, '_' between digits; int64, else uint64) and
 *           floats ([-+](.N|N[.N])[eE[-+]N], .inf, -.inf, .nan and their
 *           case forms), every one a double as protobuf holds it
 *   string  anything else, as written (timestamps included: yaml.v2 keeps
 *           them as strings)
 *   map     a YAML map; keys are strings: at the top of `metadata:` a key
 *           is its text as written (a null key is ""), deeper down Go's
 *           fmt "%v" of the key's value (1.0 -> "1", yes -> "true",
 *           ~ -> "<nil>"), as the peer's convertMap writes them
 *   list    a YAML list
 *
 * An empty `metadata: {}` or a null one is no metadata (node->metadata is
 * NULL), as for the peer.  Refused, with "FILE:LINE:COLUMN: ...": a key
 * that is a map or a list, a key twice in one map (after conversion to
 * its string), the merge key "<<", and the bounds below.
 *
 * Lifetime: the rule set's (the set's arena); read-only once loaded.
 */
#ifndef SLUICE_RULES_META_H
#define SLUICE_RULES_META_H

#include <stddef.h>

/* Bounds.  docs/rules.md quotes these names.  Depth: maps and lists
 * nested in one `metadata:`, the metadata map itself being level 1.
 * Values (maps, lists and scalars, the metadata maps included) and bytes
 * (keys and strings) are counted over the whole set, each use of an alias
 * again. */
#define SL_RULES_META_MAX_DEPTH  16         /* nesting in one `metadata:` */
#define SL_RULES_META_MAX_VALUES 65536      /* metadata values in a set */
#define SL_RULES_META_MAX_BYTES  (1u << 20) /* metadata key and string bytes in a set */

typedef enum sl_rule_meta_kind {
    SL_META_NULL = 0,
    SL_META_BOOL,
    SL_META_NUMBER,
    SL_META_STRING,
    SL_META_MAP,
    SL_META_LIST
} sl_rule_meta_kind;

struct sl_rule_meta_entry;

/* One value.  Only the fields of its kind are set. */
typedef struct sl_rule_meta {
    sl_rule_meta_kind kind;
    int boolean;     /* BOOL: 0 or 1 */
    double number;   /* NUMBER */
    const char *str; /* STRING: the bytes, NUL-terminated (may hold NULs: use n) */
    size_t n;        /* STRING: bytes; MAP: entries; LIST: items */
    const struct sl_rule_meta_entry *entries; /* MAP: sorted by key (bytes, as memcmp,
                                                 a prefix first), keys unique */
    const struct sl_rule_meta *items;         /* LIST: in file order */
} sl_rule_meta;

typedef struct sl_rule_meta_entry {
    const char *key; /* NUL-terminated (may hold NULs: use keylen) */
    size_t keylen;
    sl_rule_meta value;
} sl_rule_meta_entry;

/* The value of key (klen bytes) in map, or NULL (no such key, or map is
 * not a MAP).  O(log entries). */
const sl_rule_meta *sl_rule_meta_get(const sl_rule_meta *map, const char *key, size_t klen);

/* ---- internal to the loader (rules_load.c) ------------------------------- */

struct loader;
struct ynode;

/* Builds the metadata of a descriptor from its `metadata:` value v (not
 * NULL, not null) into the set ld loads, and sets *out (NULL for an empty
 * map).  0, or -1 with "FILE:LINE:COLUMN: ..." in ld's error (not a map,
 * a bound passed, a bad key, out of memory). */
int sl__rules_meta_load(struct loader *ld, const struct ynode *v, const sl_rule_meta **out);

#endif /* SLUICE_RULES_META_H */
