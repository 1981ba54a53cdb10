/*
 * rules_yaml.h -- private to the rules loader (rules_load.c, rules_yaml.c):
 * one file being loaded (loader), the YAML tree rules_yaml.c builds from
 * its text, and the messages that point into it ("FILE:LINE:COLUMN: ...").
 */
#ifndef SLUICE_RULES_YAML_H
#define SLUICE_RULES_YAML_H

#include <stddef.h>

#include "rules_int.h"

enum { Y_SCALAR, Y_SEQ, Y_MAP };

typedef struct ycell ycell;

typedef struct ynode {
    unsigned char type;
    unsigned char plain; /* a plain scalar: not quoted, not a block */
    unsigned line, col;  /* 1-based; col counts characters */
    union {
        struct {
            const char *s; /* NUL-terminated copy */
            size_t len;
        };
        struct {
            ycell *first, *last; /* maps: key, value, key, value... */
            size_t n;
        };
    };
} ynode;

struct ycell {
    const ynode *node;
    ycell *next;
};

typedef struct anchor {
    const char *name;
    const ynode *node;
    struct anchor *prev;
} anchor;

/* One file being loaded. */
typedef struct loader {
    const char *file; /* name in messages */
    const char *buf;  /* its bytes */
    size_t len;
    char *err;
    size_t errlen;
    sl_rules *set;
    arena tmp; /* the YAML tree */
    /* tree building */
    ynode *stack[SL_RULES_MAX_YAML_DEPTH];
    const char *stack_anchor[SL_RULES_MAX_YAML_DEPTH];
    int depth;
    const ynode *root;
    anchor *anchors;
    size_t nanchors;
    size_t nodes;  /* YAML nodes built */
    size_t visits; /* YAML nodes visited by the schema walk */
} loader;

/* "FILE:LINE:COLUMN: message" into ld->err; returns -1. */
int sl__yaml_fail_at(loader *ld, unsigned line, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FAIL(ld, node, ...) sl__yaml_fail_at((ld), (node)->line, (node)->col, __VA_ARGS__)
/* "out of memory" at 1:1; returns -1. */
int sl__yaml_oom(loader *ld);
/* Writes a scalar's text for a message into buf (at least 16 bytes):
 * control bytes as \xNN, cut at a character boundary with "..." past 48. */
const char *sl__yaml_tok_text(const char *s, size_t len, char *buf, size_t cap);
/* A scalar node's text, as sl__yaml_tok_text writes it. */
const char *sl__yaml_tok(const ynode *n, char *buf, size_t cap);
/* "'text'" for a scalar, "a list" or "a map" otherwise. */
const char *sl__yaml_desc(const ynode *n, char *buf, size_t cap);

/* Pass 1 over ld->buf: NUL bytes and tabs in indentation.  0 or -1. */
int sl__yaml_prescan(loader *ld);
/* Pass 2: libyaml's events to a tree in ld->tmp; sets ld->root (NULL for a
 * file without a document).  0 or -1. */
int sl__yaml_build_tree(loader *ld);

#endif /* SLUICE_RULES_YAML_H */
