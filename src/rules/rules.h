/*
 * rules.h -- rules files: limits written once, in YAML, in the format of
 * Lyft's (Envoy's) ratelimit service, with sluice's extensions.  See
 * docs/rules.md for the format; this header is the C side.  Where: the
 * loader, sl_rules_ref / sl_rules_unref and the accessors (sl_rules_generation
 * .. sl_rules_domain) are in rules_load.c; sl_rules_find_domain,
 * sl_rules_match, sl_rules_key, sl_rules_foreach and sl_rules_limit_format in
 * rules_match.c; the set's private layout they share in rules_int.h.
 *
 * The loader reads a file, or every *.yaml / *.yml file of a directory, with
 * libyaml, validates all of it and returns an immutable rule set -- or NULL
 * and one message "FILE:LINE:COLUMN: what is wrong".  Nothing is ever half
 * loaded.  It never touches a socket or the store.
 *
 * A rule set is a tree per domain.  A request names a domain and an ordered
 * list of (key, value) entries (a Lyft "descriptor"); sl_rules_match walks
 * the tree one entry per level, preferring at each level, as Lyft does
 *
 *     1. a child with the same key and value           (exact; a wildcard
 *                                                       child's own text too)
 *     2. the first child, in file order, with the key and a value holding
 *        '*' that the value matches ('*' matches any run of bytes, the
 *        empty one too: `foo*`, `bar*b`, `foo*bar*baz`)
 *     3. a child with the key and no value             (any value)
 *
 * without backtracking, and answers the node reached by the last entry if
 * it carries limits.  sl_rules_key then builds the counting key
 * "domain|key=value|key2=value2" from the request's own values, so a node
 * without a value counts every value separately -- except at a wildcard
 * level with `share_threshold`, which writes the pattern instead, so every
 * value it matches shares one counter.
 *
 * Ownership and threads: a set is immutable once loaded, so any number of
 * threads may match against it at once.  It is reference counted: the
 * loader returns it holding one reference; sl_rules_ref takes another (a
 * reader, before using a set it did not load), sl_rules_unref drops one and
 * frees the set with the last.  A server swaps in a new set while requests
 * still running on the old one finish with it.  Every pointer into a set
 * (nodes, limits, names) lives as long as the set.
 */
#ifndef SLUICE_RULES_H
#define SLUICE_RULES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Caps.  docs/rules.md quotes these names. */
#define SL_RULES_MAX_FILE       (4u << 20)  /* bytes in one file: refused before parsing */
#define SL_RULES_MAX_TOTAL      (64u << 20) /* bytes in all the files of a directory */
#define SL_RULES_MAX_FILES      1024        /* rules files in a directory */
#define SL_RULES_MAX_DEPTH      16          /* descriptor nesting; entries in a request */
#define SL_RULES_KEY_PREFIX     446         /* readable bytes of a long key's digest form:
                                               SL_MAX_KEY - strlen("#~") - 64 hex digits */
#define SL_RULES_MAX_YAML_DEPTH 64          /* YAML nesting of lists and maps */
#define SL_RULES_MAX_RULES      100000      /* descriptors in a set */
#define SL_RULES_MAX_NODES      1000000     /* YAML nodes in a file, aliases expanded */
#define SL_RULES_MAX_ANCHORS    1024        /* YAML anchors (&name) in a file */
#define SL_RULES_MAX_LIMITS     8           /* limits on one descriptor */
#define SL_RULES_MAX_PCT        1000        /* soft and elastic percentages */

/* Loading options (sl_rules_load_flags).  The set keeps them
 * (sl_rules_flags): a reload is given the same ones by its caller. */
/* a domain in several files is one domain, their descriptors together
 * (Lyft's MERGE_DOMAIN_CONFIG); without it, an error naming both files */
#define SL_RULES_MERGE_DOMAINS 0x1u
/* Lyft's counting: RL.CHECK charges every matched fixed-window counter of
 * every request, denied ones too (check.h); without it, all-or-none */
#define SL_RULES_COUNT_DENIED 0x2u

/* Lyft's units: fixed lengths, no calendar (month = 30 days, year = 365). */
typedef enum sl_rule_unit {
    SL_UNIT_NONE = 0, /* the limit gave a `window` instead */
    SL_UNIT_SECOND,
    SL_UNIT_MINUTE,
    SL_UNIT_HOUR,
    SL_UNIT_DAY,
    SL_UNIT_WEEK,
    SL_UNIT_MONTH,
    SL_UNIT_YEAR,
    SL_UNIT_COUNT
} sl_rule_unit;

/* "second", "minute", ...; "" for SL_UNIT_NONE. */
const char *sl_rule_unit_name(sl_rule_unit u);
/* The unit's length in ms (Lyft's fixed lengths); 0 for SL_UNIT_NONE or
 * a value out of range. */
int64_t sl_rule_unit_ms(sl_rule_unit u);

/* What one limit has decided since its set loaded (RL.RULES shows them;
 * a reload starts new counts).  The one mutable part of a loaded set:
 * relaxed atomics, added to by sl_rules_check from any thread. */
typedef struct sl_rule_counts {
    _Atomic uint64_t checked; /* requests that matched the limit */
    _Atomic uint64_t over;    /* ... that it found over (OVER_LIMIT; L = 0 included) */
    _Atomic uint64_t shadow;  /* ... over, but allowed: shadow mode */
    _Atomic uint64_t elastic; /* ... over L, allowed on the spare pool */
} sl_rule_counts;

/* One limit of a descriptor.  RL.CHECK applies every limit of the matched
 * node: the request passes only if all pass, and then all are charged. */
typedef struct sl_rule_limit {
    const char *name;            /* `name:` if given, else derived: the node's path,
                                    with "#1", "#2"... when the node has several limits */
    int named;                   /* 1 if the name was given in the file */
    int unlimited;               /* Lyft's `unlimited: true`: passes, counts nothing;
                                    the other fields below are zero */
    sl_params params;            /* algo (default fixed-window), limit L, window_ms W,
                                    burst, precision, as sl_decide takes them --
                                    except that L may be 0 here: nothing passes, and
                                    the caller must not pass L = 0 to sl_decide */
    sl_rule_unit unit;           /* the unit W came from, or SL_UNIT_NONE for `window` */
    int64_t soft_pct;            /* `soft: N%`: 0..SL_RULES_MAX_PCT; 0 = a hard limit */
    int64_t soft_limit;          /* L + floor(L * soft_pct / 100): what may pass */
    int64_t elastic_limit;       /* `elastic`: ceiling above L while the server's
                                    spare pool has room; 0 = not elastic */
    int64_t elastic_pct;         /* the percentage, if elastic was given as one */
    const char *const *replaces; /* names of limits this one replaces (Lyft) */
    int nreplaces;
    unsigned line, column; /* of the rate_limit map in its file */
    sl_rule_counts *counts; /* never NULL in a loaded set */
    struct sl_rule_stats *stats; /* the server's counters for this limit's name
                                    (src/server/stats.h; opaque here), bound
                                    once before the set serves; NULL = none */
} sl_rule_limit;

typedef enum sl_rule_match {
    SL_MATCH_ROOT = 0, /* a domain's root: no key */
    SL_MATCH_EXACT,    /* key and value */
    SL_MATCH_WILDCARD, /* key and a value holding '*': value holds the pattern as
                          written, each '*' matching any run of bytes */
    SL_MATCH_ANY       /* key only: every value, each counted separately */
} sl_rule_match;

struct sl_rule_domain;
struct sl__rule_index;

/* A descriptor of a rules file.  Read-only. */
typedef struct sl_rule_node {
    const char *key; /* NUL-terminated; NULL for a root */
    size_t keylen;
    const char *value; /* EXACT: the value; WILDCARD: the pattern, '*'s
                          included; ANY and ROOT: NULL */
    size_t valuelen;
    sl_rule_match match;
    const char *path;                  /* Lyft's full key: "domain.key_value.key2" */
    const struct sl_rule_node *parent; /* NULL for a root */
    const struct sl_rule_domain *domain;
    int depth;                           /* 0 for a root, 1 for top-level descriptors */
    const struct sl_rule_node *children; /* in file order */
    int nchildren;
    const sl_rule_limit *limits; /* none: the node only routes */
    int nlimits;
    int shadow_mode;                        /* decide and count, but always answer OK */
    int quota_mode;                         /* Lyft: over its limit, the descriptor does
                                               not deny unless every quota-mode
                                               descriptor of the request is over (check.h) */
    int share_threshold;                    /* Lyft: a WILDCARD level whose values share
                                               one counter (the key holds the pattern) */
    int detailed_metric;                    /* Lyft: per-value statistics */
    int value_to_metric;                    /* Lyft: this level's value in the metric name */
    int metric_dynamic;                     /* sl_rules_metric_dynamic(node), set once by
                                               the loader: RL.CHECK asks this field, so a
                                               node without either field costs nothing */
    int has_metadata;                       /* Lyft's `metadata:` was given, even empty
                                               (RL.RULES notes it) */
    const struct sl_rule_meta *metadata;    /* its values (rules_meta.h), for the gRPC
                                               reply's dynamic_metadata; NULL when none
                                               or an empty map; the set's lifetime */
    int ip4_prefix;                         /* `ip_prefix`: mask IPv4 values to this many */
    int ip6_prefix;                         /*   bits before counting; -1 = not set */
    unsigned line, column;                  /* of the descriptor in its file */
    int64_t concurrency;                    /* `concurrency: N` (SPEC 10): leases in
                                               flight, 1..SL_MAX_CONCURRENCY; 0 = none */
    int64_t concurrency_ttl_ms;             /* `concurrency_ttl`, default
                                               SL_DEFAULT_LEASE_TTL_MS */
    unsigned concurrency_line;              /* of the rate_limit map that gave it */
    const struct sl__rule_index *sl__index; /* internal: lookup tables */
    size_t sl__whead, sl__wtail;            /* internal, WILDCARD: the bytes before the
                                               first '*' and after the last */
} sl_rule_node;

typedef struct sl_rule_domain {
    const char *name; /* NUL-terminated */
    size_t namelen;
    const char *file;      /* the (first) file that defined it */
    int nfiles;            /* files that define it: 1, more with SL_RULES_MERGE_DOMAINS */
    unsigned line, column; /* of the domain's name */
    sl_rule_node root;     /* root.children: the top-level descriptors */
} sl_rule_domain;

/* One entry of a request's descriptor.  Bytes need not be NUL-terminated. */
typedef struct sl_rule_entry {
    const char *key;
    size_t keylen;
    const char *value;
    size_t valuelen;
} sl_rule_entry;

typedef struct sl_rules sl_rules;

/* Loads path: a file, or every *.yaml / *.yml file of a directory in byte
 * order of their names (hidden names, such as Kubernetes' "..data", skipped;
 * symbolic links followed).  One domain per file; a domain in two files is
 * an error naming both (unless SL_RULES_MERGE_DOMAINS, sl_rules_load_flags).
 * A directory without rules files gives an empty set.
 * Only regular files are read: a rules name that is anything else -- a
 * dangling link, a link loop, a FIFO, a device, a directory named x.yaml --
 * or cannot be opened fails the whole load ("PATH: not a regular file (a
 * FIFO)", "PATH: No such file or directory (a dangling symlink)",
 * "PATH: Permission denied"); nothing is opened in a way that can block.
 *
 * Returns a new set holding one reference, with err set to "", or NULL with
 * a message in err ("FILE:LINE:COLUMN: what is wrong", or "PATH: ..." when
 * the file cannot be read at all).  O(size of the files); reads no clock but
 * the wall clock for sl_rules_loaded_at_ms. */
sl_rules *sl_rules_load(const char *path, char *err, size_t errlen);

/* As sl_rules_load, with SL_RULES_* options (0 = sl_rules_load).  With
 * SL_RULES_MERGE_DOMAINS, files naming one domain add their descriptors to
 * it in file-name order; two of them defining the same descriptor (key and
 * value) is an error naming both files.  Unknown bits are SL_EINVAL's
 * "invalid argument". */
sl_rules *sl_rules_load_flags(const char *path, unsigned flags, char *err, size_t errlen);

/* As sl_rules_load, for one file already in memory (len bytes, any bytes);
 * name is the file name used in messages and in sl_rule_domain.file. */
sl_rules *sl_rules_load_buffer(const char *name, const char *data, size_t len, char *err,
                               size_t errlen);
/* ... with SL_RULES_* options. */
sl_rules *sl_rules_load_buffer_flags(const char *name, const char *data, size_t len, unsigned flags,
                                     char *err, size_t errlen);

/* Reference counting (atomic).  sl_rules_ref returns r.  sl_rules_unref and
 * sl_rules_free (the same thing) drop one reference and free the set with
 * the last one; NULL is ignored. */
sl_rules *sl_rules_ref(sl_rules *r);
void sl_rules_unref(sl_rules *r);
void sl_rules_free(sl_rules *r);

/* 1 for the first set this process loads, one more for each later one. */
uint64_t sl_rules_generation(const sl_rules *r);
/* Wall-clock time of the load, ms since the epoch. */
int64_t sl_rules_loaded_at_ms(const sl_rules *r);
/* The path given to the loader. */
const char *sl_rules_source(const sl_rules *r);
/* Number of descriptors in the set. */
size_t sl_rules_count(const sl_rules *r);
/* The SL_RULES_* options it was loaded with. */
unsigned sl_rules_flags(const sl_rules *r);

/* Domains, in load order (file name order). */
int sl_rules_ndomains(const sl_rules *r);
const sl_rule_domain *sl_rules_domain(const sl_rules *r, int i);
/* The domain named (name, len), or NULL.  O(log domains). */
const sl_rule_domain *sl_rules_find_domain(const sl_rules *r, const char *name, size_t len);

/* The node whose limits apply to a request of n entries in domain, or NULL
 * when no rule applies (unknown domain, no match at some level, or the node
 * reached has no limits).  Lyft's matching, described at the top.  Costs
 * O(n log siblings) plus a scan of the wildcard siblings; no allocation. */
const sl_rule_node *sl_rules_match(const sl_rules *r, const char *domain, size_t dlen,
                                   const sl_rule_entry *entries, int n);

/* Writes the counting key of limit number `limit` of node for the request
 * entries (the same n entries that matched node, n == node->depth) into buf:
 *
 *     domain|key=value|key2=value2[#W]
 *
 * Values are the request's own, so a key-only or wildcard node counts each
 * value separately; a level whose node has share_threshold writes its
 * pattern instead (every value it matches shares the counter); a level
 * whose node has ip_prefix has its IP value masked to the prefix and
 * printed canonically (values that are not IP addresses count as they
 * are).  '%', '|', '=' and '#' in any part are written as %25, %7C, %3D,
 * %23, so different requests never share a key.  "#W" (W = the window in
 * ms) is added when the node has several limits; limit = -1 gives the key
 * without it.  Not NUL-terminated.
 *
 * A key that would exceed SL_MAX_KEY bytes is written in the digest form
 * (check.h, "Long keys"): its first SL_RULES_KEY_PREFIX bytes, "#~" and a
 * 256-bit digest of all of it in hex, SL_MAX_KEY bytes in all.
 *
 * Returns 0 and sets *len; SL_EKEY if the key does not fit cap (a cap of
 * SL_MAX_KEY or more always fits); SL_EINVAL if n or limit do not fit node. */
int sl_rules_key(const sl_rule_node *node, const sl_rule_entry *entries, int n, int limit,
                 char *buf, size_t cap, size_t *len);

/* Writes the counting key of a limit override (check.h) of window_ms for
 * the request entries (n of them, n >= 0: any number) in domain dom:
 *
 *     domain|key=value|key2=value2#override/W
 *
 * every part escaped as sl_rules_key does, the request's own values (no
 * node: no pattern, no ip_prefix).  No rule's key can be one of these:
 * after '#' a rule's key holds only digits.  Not NUL-terminated.  Long
 * keys in the digest form, as sl_rules_key's.  Returns 0 and sets *len;
 * SL_EKEY if the key does not fit cap (below SL_MAX_KEY); SL_EINVAL on a
 * bad argument. */
int sl_rules_override_key(const sl_rule_domain *dom, const sl_rule_entry *entries, int n,
                          int64_t window_ms, char *buf, size_t cap, size_t *len);

/* Calls fn for every node of every domain, depth first in file order
 * (domains in load order, each root first).  Stops at the first nonzero
 * return of fn and returns it; 0 when all were visited.  For RL.RULES. */
int sl_rules_foreach(const sl_rules *r, int (*fn)(const sl_rule_node *node, void *ctx), void *ctx);

/* Describes a limit in one line, e.g. "10/minute fixed-window",
 * "100/90s token-bucket burst=150 soft=10%", "unlimited".  Writes at most
 * cap bytes including the NUL; returns what snprintf returns. */
int sl_rules_limit_format(const sl_rule_limit *l, char *buf, size_t cap);

/* Describes what of a node's Lyft fields RL.RULES should mention, appended
 * to a limit's description: "" for most nodes, else e.g.
 * " share_threshold detailed_metric metadata: not applicable" (the field
 * that changes nothing in sluice says so; detailed_metric and
 * value_to_metric name the per-value statistics of INFO rulestats).
 * Writes at most cap bytes including the NUL; returns what snprintf
 * returns. */
int sl_rules_node_notes(const sl_rule_node *node, char *buf, size_t cap);

/* Lyft's statistics name for a request that matched node (the same n
 * entries): "domain.key_value.key2..." as Lyft builds it -- node->path,
 * except that `detailed_metric` on node puts every level's value in it
 * (share_threshold levels keep their pattern), and `value_to_metric` on a
 * key-only or wildcard level (without share_threshold) puts that level's
 * value in it.  Returns 1 when the name depends on the request's values
 * (such a node: sl_rules_metric_dynamic), 0 when it is node->path; writes
 * at most cap bytes (NUL-terminated, cut if longer) and sets *len to the
 * untruncated length.  Pure; no allocation. */
int sl_rules_metric_name(const sl_rule_node *node, const sl_rule_entry *entries, int n, char *buf,
                         size_t cap, size_t *len);
/* Whether node's statistics name depends on the request (detailed_metric on
 * node, or value_to_metric on a key-only or wildcard level above it). */
int sl_rules_metric_dynamic(const sl_rule_node *node);

#endif /* SLUICE_RULES_H */
