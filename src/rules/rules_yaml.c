/*
 * rules_yaml.c -- a rules file as YAML text: passes 1 and 2 of the loader
 * (rules_load.c has the overview and pass 3), and the messages that quote
 * it.
 *
 *   1. the raw bytes: NUL bytes, tabs in indentation (the size is checked
 *      as the file is read, rules_load.c);
 *   2. libyaml's event parser builds a small tree of scalars, lists and maps
 *      (our own, so every node keeps its line and column, depth is capped
 *      while parsing, and an alias is a pointer to its anchor's node; an
 *      anchor names its node only once the node is complete, so an alias
 *      can never make a cycle).
 *
 * The tree lives in the loader's arena for the file (ld->tmp), bounded by
 * SL_RULES_MAX_NODES, SL_RULES_MAX_YAML_DEPTH and SL_RULES_MAX_ANCHORS.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "rules_yaml.h"

/* ---- messages ------------------------------------------------------------- */

int sl__yaml_fail_at(loader *ld, unsigned line, unsigned col, const char *fmt, ...)
{
    if (ld->errlen == 0) return -1;
    int n = snprintf(ld->err, ld->errlen, "%s:%u:%u: ", ld->file, line, col);
    if (n >= 0 && (size_t)n < ld->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int sl__yaml_oom(loader *ld) { return sl__yaml_fail_at(ld, 1, 1, "out of memory"); }

/* Line and column (1-based, columns in characters) of byte offset off. */
static void offset_pos(const char *buf, size_t len, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, c = 1;
    if (off > len) off = len;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* Writes a scalar's text for a message into buf (at least 16 bytes):
 * control bytes as \xNN, cut at a character boundary with "..." past 48. */
const char *sl__yaml_tok_text(const char *s, size_t len, char *buf, size_t cap)
{
    size_t o = 0, i = 0;
    for (; i < len && i < 48 && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    if (i < len) {
        while (o > 0 && ((unsigned char)buf[o - 1] & 0xC0) == 0x80) o--; /* continuation bytes */
        if (o > 0 && (unsigned char)buf[o - 1] >= 0xC0) o--;             /* a lead byte */
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

const char *sl__yaml_tok(const ynode *n, char *buf, size_t cap)
{
    return sl__yaml_tok_text(n->s, n->len, buf, cap);
}

/* "'text'" for a scalar, "a list" or "a map" otherwise. */
const char *sl__yaml_desc(const ynode *n, char *buf, size_t cap)
{
    if (n->type == Y_SEQ) return "a list";
    if (n->type == Y_MAP) return "a map";
    char t[80];
    snprintf(buf, cap, "'%s'", sl__yaml_tok(n, t, sizeof t));
    return buf;
}

/* Pass 1: NUL bytes (binary data) and tabs in indentation, which YAML
 * forbids and which otherwise give confusing messages. */
int sl__yaml_prescan(loader *ld)
{
    const char *nul = ld->len ? memchr(ld->buf, '\0', ld->len) : NULL;
    if (nul != NULL) {
        unsigned l, c;
        offset_pos(ld->buf, ld->len, (size_t)(nul - ld->buf), &l, &c);
        return sl__yaml_fail_at(ld, l, c, "binary data (a NUL byte): not a YAML text file");
    }
    int bol = 1;
    for (size_t i = 0; i < ld->len; i++) {
        char ch = ld->buf[i];
        if (ch == '\n') {
            bol = 1;
        } else if (bol && ch == '\t') {
            unsigned l, c;
            offset_pos(ld->buf, ld->len, i, &l, &c);
            return sl__yaml_fail_at(ld, l, c,
                                    "tab character in indentation (YAML indents with spaces)");
        } else if (ch != ' ') {
            bol = 0;
        }
    }
    return 0;
}

static ynode *new_node(loader *ld, int type, const yaml_mark_t *m)
{
    if (++ld->nodes > SL_RULES_MAX_NODES) {
        sl__yaml_fail_at(ld, (unsigned)m->line + 1, (unsigned)m->column + 1,
                         "more than %d YAML nodes (SL_RULES_MAX_NODES)", SL_RULES_MAX_NODES);
        return NULL;
    }
    ynode *n = sl__arena_alloc(&ld->tmp, sizeof *n);
    if (n == NULL) {
        sl__yaml_oom(ld);
        return NULL;
    }
    n->type = (unsigned char)type;
    n->line = (unsigned)m->line + 1;
    n->col = (unsigned)m->column + 1;
    return n;
}

static int add_node(loader *ld, const ynode *n)
{
    if (ld->depth == 0) {
        ld->root = n;
        return 0;
    }
    ynode *p = ld->stack[ld->depth - 1];
    ycell *c = sl__arena_alloc(&ld->tmp, sizeof *c);
    if (c == NULL) return sl__yaml_oom(ld);
    c->node = n;
    if (p->last)
        p->last->next = c;
    else
        p->first = c;
    p->last = c;
    p->n++;
    return 0;
}

static int add_anchor(loader *ld, const yaml_char_t *name, const ynode *n)
{
    if (name == NULL) return 0;
    if (++ld->nanchors > SL_RULES_MAX_ANCHORS)
        return FAIL(ld, n, "more than %d YAML anchors (SL_RULES_MAX_ANCHORS)",
                    SL_RULES_MAX_ANCHORS);
    anchor *a = sl__arena_alloc(&ld->tmp, sizeof *a);
    if (a == NULL) return sl__yaml_oom(ld);
    a->name = sl__arena_strndup(&ld->tmp, (const char *)name, strlen((const char *)name));
    if (a->name == NULL) return sl__yaml_oom(ld);
    a->node = n;
    a->prev = ld->anchors;
    ld->anchors = a;
    return 0;
}

static int push(loader *ld, int type, const yaml_event_t *ev, const yaml_char_t *anchor_name)
{
    if (ld->depth >= SL_RULES_MAX_YAML_DEPTH)
        return sl__yaml_fail_at(
            ld, (unsigned)ev->start_mark.line + 1, (unsigned)ev->start_mark.column + 1,
            "YAML nested deeper than %d levels (SL_RULES_MAX_YAML_DEPTH)", SL_RULES_MAX_YAML_DEPTH);
    ynode *n = new_node(ld, type, &ev->start_mark);
    if (n == NULL || add_node(ld, n) != 0) return -1;
    const char *a = NULL;
    if (anchor_name != NULL) {
        a = sl__arena_strndup(&ld->tmp, (const char *)anchor_name,
                              strlen((const char *)anchor_name));
        if (a == NULL) return sl__yaml_oom(ld);
    }
    ld->stack[ld->depth] = n;
    ld->stack_anchor[ld->depth] = a;
    ld->depth++;
    return 0;
}

/* libyaml's error, with its position.  Reader errors (bad encoding, control
 * characters) carry a byte offset; the others a mark. */
static int yaml_fail(loader *ld, const yaml_parser_t *p)
{
    unsigned l = 1, c = 1;
    const char *problem = p->problem ? p->problem : "unknown problem";
    switch (p->error) {
    case YAML_MEMORY_ERROR: return sl__yaml_oom(ld);
    case YAML_READER_ERROR:
        offset_pos(ld->buf, ld->len, p->problem_offset, &l, &c);
        if (p->problem_value >= 0)
            return sl__yaml_fail_at(ld, l, c, "binary data or invalid UTF-8: %s (byte 0x%02x)",
                                    problem, (unsigned)p->problem_value & 0xff);
        return sl__yaml_fail_at(ld, l, c, "binary data or invalid UTF-8: %s", problem);
    default: break;
    }
    l = (unsigned)p->problem_mark.line + 1;
    c = (unsigned)p->problem_mark.column + 1;
    /* does the line of the problem hold a tab? */
    const char *hint = "";
    size_t i = 0;
    for (unsigned line = 1; i < ld->len && line < l; i++)
        if (ld->buf[i] == '\n') line++;
    for (; i < ld->len && ld->buf[i] != '\n'; i++) {
        if (ld->buf[i] == '\t') {
            hint = " (the line holds a tab character; YAML wants spaces)";
            break;
        }
    }
    if (p->context)
        return sl__yaml_fail_at(ld, l, c, "YAML syntax error: %s (%s from line %u)%s", problem,
                                p->context, (unsigned)p->context_mark.line + 1, hint);
    return sl__yaml_fail_at(ld, l, c, "YAML syntax error: %s%s", problem, hint);
}

/* Pass 2.  Sets ld->root (NULL for a file without a document). */
int sl__yaml_build_tree(loader *ld)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return sl__yaml_oom(ld);
    yaml_parser_set_input_string(&p, (const unsigned char *)ld->buf, ld->len);
    int rc = 0, docs = 0;
    for (int done = 0; !done && rc == 0;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            rc = yaml_fail(ld, &p);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                rc = sl__yaml_fail_at(ld, (unsigned)ev.start_mark.line + 1,
                                      (unsigned)ev.start_mark.column + 1,
                                      "a second YAML document: a rules file holds one domain");
            break;
        case YAML_SCALAR_EVENT: {
            ynode *n = new_node(ld, Y_SCALAR, &ev.start_mark);
            if (n == NULL) {
                rc = -1;
                break;
            }
            n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
            n->len = ev.data.scalar.length;
            n->s = sl__arena_strndup(&ld->tmp, (const char *)ev.data.scalar.value, n->len);
            if (n->s == NULL)
                rc = sl__yaml_oom(ld);
            else if ((rc = add_node(ld, n)) == 0)
                rc = add_anchor(ld, ev.data.scalar.anchor, n);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
            rc = push(ld, Y_SEQ, &ev, ev.data.sequence_start.anchor);
            break;
        case YAML_MAPPING_START_EVENT:
            rc = push(ld, Y_MAP, &ev, ev.data.mapping_start.anchor);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT: {
            /* an anchor names its node only once the node is complete, so an
             * alias can never make a cycle */
            ld->depth--;
            const char *a = ld->stack_anchor[ld->depth];
            if (a) rc = add_anchor(ld, (const yaml_char_t *)a, ld->stack[ld->depth]);
            break;
        }
        case YAML_ALIAS_EVENT: {
            const char *name = (const char *)ev.data.alias.anchor;
            const anchor *a = ld->anchors;
            while (a && strcmp(a->name, name) != 0) a = a->prev;
            if (a == NULL) {
                char t[80];
                rc = sl__yaml_fail_at(
                    ld, (unsigned)ev.start_mark.line + 1, (unsigned)ev.start_mark.column + 1,
                    "unknown alias '*%s' (no complete node has the anchor '&%s' before it)",
                    sl__yaml_tok_text(name, strlen(name), t, sizeof t), t);
            } else {
                rc = add_node(ld, a->node);
            }
            break;
        }
        default: break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    return rc;
}
