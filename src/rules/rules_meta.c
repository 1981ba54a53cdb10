/*
 * rules_meta.c -- a descriptor's `metadata:` turned from the file's YAML
 * tree into the set's metadata tree (rules_meta.h says what each YAML value
 * becomes, and why: the peer reads it with yaml.v2 and structpb).
 *
 * The walk is recursive, bounded by SL_RULES_META_MAX_DEPTH; every value
 * it builds and every key and string byte it copies is counted against
 * the set's totals (SL_RULES_META_MAX_VALUES, SL_RULES_META_MAX_BYTES)
 * before it is copied, so an alias repeated many times stops at the bound.
 * Maps are sorted by key once here, so that the gRPC front encodes them in
 * one order and merges them with a walk in step (rls_meta.c).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_meta.h"
#include "rules_yaml.h"

/* ---- yaml.v2's resolution of a plain scalar ------------------------------- */

enum { R_STR, R_NULL, R_BOOL, R_INT, R_UINT, R_FLOAT };

typedef struct resolved {
    int kind; /* R_* */
    int b;
    int64_t i;
    uint64_t u;
    double f;
} resolved;

static int eq(const char *s, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(s, lit, n) == 0;
}

static int any_of(const char *s, size_t n, const char *const *lits, size_t nlits)
{
    for (size_t i = 0; i < nlits; i++)
        if (eq(s, n, lits[i])) return 1;
    return 0;
}

static int digit_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'z') return c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
    return 99;
}

/* Go's strconv.ParseUint(s, base, 64) of underscore-free s: base 0 reads a
 * 0b / 0o / 0x prefix (with a digit after it) or a leading 0 (octal). */
static int go_parse_uint(const char *s, size_t n, int base, uint64_t *out)
{
    if (n == 0) return -1;
    if (base == 0) {
        base = 10;
        if (s[0] == '0') {
            char c = n >= 3 ? (char)(s[1] | 0x20) : 0;
            if (c == 'b' || c == 'o' || c == 'x') {
                base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
                s += 2, n -= 2;
            } else {
                base = 8;
                s += 1, n -= 1; /* "0" alone: nothing left, 0 */
            }
        }
    }
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        int d = digit_value(s[i]);
        if (d >= base) return -1;
        if (x > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return -1;
        x = x * (uint64_t)base + (uint64_t)d;
    }
    *out = x;
    return 0;
}

/* Go's strconv.ParseInt(s, base, 64): an optional sign, then ParseUint. */
static int go_parse_int(const char *s, size_t n, int base, int64_t *out)
{
    if (n == 0) return -1;
    int neg = s[0] == '-';
    if (s[0] == '+' || s[0] == '-') s++, n--;
    uint64_t u;
    if (go_parse_uint(s, n, base, &u) != 0) return -1;
    if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

static size_t digits(const char *s, size_t n, size_t i)
{
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i;
}

/* yaml.v2's float syntax, ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$,
 * then strtod; a value out of range (an infinity) is not a float, as Go's
 * ParseFloat fails on it. */
static int yaml_float(const char *s, size_t n, double *out)
{
    size_t i = 0, j;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i < n && s[i] == '.') {
        if ((j = digits(s, n, i + 1)) == i + 1) return -1;
        i = j;
    } else {
        if ((j = digits(s, n, i)) == i) return -1;
        i = j;
        if (i < n && s[i] == '.') i = digits(s, n, i + 1);
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if ((j = digits(s, n, i)) == i) return -1;
        i = j;
    }
    if (i != n || n > 400) return -1;
    char buf[401];
    memcpy(buf, s, n);
    buf[n] = '\0';
    double f = strtod(buf, NULL);
    if (isinf(f)) return -1;
    *out = f;
    return 0;
}

/* Go's ParseFloat of a scalar starting with '.': ".5", ".5e3", with '_'
 * only between digits. */
static int dot_float(const char *s, size_t n, double *out)
{
    char buf[401];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_') {
            int before = i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9';
            int after = i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9';
            if (!before || !after) return -1;
            continue;
        }
        if (k == sizeof buf - 1) return -1;
        buf[k++] = s[i];
    }
    return yaml_float(buf, k, out);
}

/* How yaml.v2 (v2.4.0's resolve) reads the plain scalar s[0..n): its
 * first byte picks what it may be (sign or digit: a number; y n t f o ~
 * and their capitals: a word of the table; '.': a float), anything else
 * or no match is a string. */
static void resolve(const char *s, size_t n, resolved *r)
{
    static const char *const yes[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                      "True", "TRUE", "on",  "On",  "ON"};
    static const char *const no[] = {"n",     "N",     "no",  "No",  "NO", "false",
                                     "False", "FALSE", "off", "Off", "OFF"};
    static const char *const nul[] = {"~", "null", "Null", "NULL"};
    static const char *const nan[] = {".nan", ".NaN", ".NAN"};
    static const char *const inf[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"};
    static const char *const ninf[] = {"-.inf", "-.Inf", "-.INF"};
    memset(r, 0, sizeof *r);
    r->kind = R_STR;
    if (n == 0 || any_of(s, n, nul, 4)) {
        r->kind = R_NULL;
        return;
    }
    if (any_of(s, n, yes, 11) || any_of(s, n, no, 11)) {
        r->kind = R_BOOL;
        r->b = any_of(s, n, yes, 11);
        return;
    }
    if (any_of(s, n, nan, 3) || any_of(s, n, inf, 6) || any_of(s, n, ninf, 3)) {
        r->kind = R_FLOAT;
        r->f = any_of(s, n, nan, 3) ? NAN : any_of(s, n, inf, 6) ? INFINITY : -INFINITY;
        return;
    }
    char c = s[0];
    if (c == '.') {
        if (dot_float(s, n, &r->f) == 0) r->kind = R_FLOAT;
        return;
    }
    if (!(c == '+' || c == '-' || (c >= '0' && c <= '9')) || n > 400) return;
    char plain[401]; /* without its underscores */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '_') plain[k++] = s[i];
    if (go_parse_int(plain, k, 0, &r->i) == 0) {
        r->kind = R_INT;
    } else if (go_parse_uint(plain, k, 0, &r->u) == 0) {
        r->kind = R_UINT;
    } else if (yaml_float(plain, k, &r->f) == 0) {
        r->kind = R_FLOAT;
    } else if (k >= 2 && plain[0] == '0' && plain[1] == 'b') {
        if (go_parse_int(plain + 2, k - 2, 2, &r->i) == 0)
            r->kind = R_INT;
        else if (go_parse_uint(plain + 2, k - 2, 2, &r->u) == 0)
            r->kind = R_UINT;
    } else if (k >= 3 && memcmp(plain, "-0b", 3) == 0) {
        plain[2] = '-'; /* "-" + the rest, base 2 */
        if (go_parse_int(plain + 2, k - 2, 2, &r->i) == 0) r->kind = R_INT;
    }
}

/* Go's fmt "%v" of a float64: the shortest digits that read back as f,
 * in %e form when the exponent is below -4 or at least 6 (at least two
 * exponent digits), else in %f form.  Writes at most 32 bytes. */
static void go_float_text(double f, char *out, size_t cap)
{
    if (isnan(f)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f > 0 ? "+Inf" : "-Inf");
        return;
    }
    char e[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, f);
    /* e: [-]d[.ddd]e[+-]XX */
    const char *m = e;
    int neg = *m == '-';
    if (neg) m++;
    char dg[24];
    int nd = 0;
    const char *x = m;
    for (; *x && *x != 'e'; x++)
        if (*x != '.') dg[nd++] = *x;
    int exp = atoi(x + 1);
    while (nd > 1 && dg[nd - 1] == '0') nd--;
    if (f == 0) exp = 0;
    char *o = out;
    char *end = out + cap - 1;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (o < end) *o++ = (ch);                                                                  \
    } while (0)
    if (neg) PUT('-');
    if (exp < -4 || exp >= 6) {
        PUT(dg[0]);
        if (nd > 1) {
            PUT('.');
            for (int i = 1; i < nd; i++) PUT(dg[i]);
        }
        char t[16];
        snprintf(t, sizeof t, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        for (char *q = t; *q; q++) PUT(*q);
    } else if (exp >= 0) {
        for (int i = 0; i <= exp; i++) PUT(i < nd ? dg[i] : '0');
        if (nd > exp + 1) {
            PUT('.');
            for (int i = exp + 1; i < nd; i++) PUT(dg[i]);
        }
    } else {
        PUT('0');
        PUT('.');
        for (int i = 0; i < -exp - 1; i++) PUT('0');
        for (int i = 0; i < nd; i++) PUT(dg[i]);
    }
#undef PUT
    *o = '\0';
}

/* ---- the walk -------------------------------------------------------------- */

/* The set's running totals against the bounds. */
static int count_value(loader *ld, const ynode *at)
{
    if (++ld->set->meta_values > SL_RULES_META_MAX_VALUES)
        return FAIL(ld, at, "more than %d metadata values in the rules (SL_RULES_META_MAX_VALUES)",
                    SL_RULES_META_MAX_VALUES);
    return 0;
}

static int count_bytes(loader *ld, const ynode *at, size_t n)
{
    ld->set->meta_bytes += n;
    if (ld->set->meta_bytes > SL_RULES_META_MAX_BYTES)
        return FAIL(ld, at,
                    "more than %u bytes of metadata keys and strings in the rules "
                    "(SL_RULES_META_MAX_BYTES)",
                    SL_RULES_META_MAX_BYTES);
    return 0;
}

static int value(loader *ld, const ynode *v, int depth, sl_rule_meta *out);

/* A map key's string: at the top of `metadata:` its text (null: ""),
 * deeper down Go's "%v" of its value (a quoted key is its text). */
static int key_text(loader *ld, const ynode *k, int top, const char **s, size_t *n, char *tmp,
                    size_t cap)
{
    char d[96];
    if (k->type != Y_SCALAR)
        return FAIL(ld, k, "metadata keys must be strings, numbers or booleans, not %s",
                    sl__yaml_desc(k, d, sizeof d));
    if (k->plain && eq(k->s, k->len, "<<"))
        return FAIL(ld, k, "YAML merge keys (<<) are not supported in metadata");
    *s = k->s, *n = k->len;
    if (!k->plain) return 0;
    resolved r;
    resolve(k->s, k->len, &r);
    if (r.kind == R_NULL) {
        *s = top ? "" : "<nil>";
        *n = strlen(*s);
        return 0;
    }
    if (top || r.kind == R_STR) return 0;
    if (r.kind == R_BOOL)
        snprintf(tmp, cap, "%s", r.b ? "true" : "false");
    else if (r.kind == R_INT)
        snprintf(tmp, cap, "%lld", (long long)r.i);
    else if (r.kind == R_UINT)
        snprintf(tmp, cap, "%llu", (unsigned long long)r.u);
    else
        go_float_text(r.f, tmp, cap);
    *s = tmp, *n = strlen(tmp);
    return 0;
}

static int cmp_entry(const void *x, const void *y)
{
    const sl_rule_meta_entry *a = x, *b = y;
    return bytes_cmp(a->key, a->keylen, b->key, b->keylen);
}

typedef struct keyref {
    const char *key;
    size_t len, idx; /* idx: file order */
} keyref;

static int cmp_keyref(const void *x, const void *y)
{
    const keyref *a = x, *b = y;
    int c = bytes_cmp(a->key, a->len, b->key, b->len);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

/* A YAML map into out; keys unique, entries sorted. */
static int map_value(loader *ld, const ynode *map, int depth, sl_rule_meta *out)
{
    size_t n = map->n / 2;
    out->kind = SL_META_MAP;
    out->n = n;
    if (n == 0) return 0;
    sl_rule_meta_entry *e = sl__arena_alloc(&ld->set->mem, n * sizeof *e);
    const ynode **keys = sl__arena_alloc(&ld->tmp, n * sizeof *keys);
    keyref *order = sl__arena_alloc(&ld->tmp, n * sizeof *order);
    if (e == NULL || keys == NULL || order == NULL) return sl__yaml_oom(ld);
    size_t i = 0;
    for (const ycell *c = map->first; c && c->next; c = c->next->next, i++) {
        const char *s = "";
        size_t len = 0;
        char tmp[48];
        if (key_text(ld, c->node, depth == 1, &s, &len, tmp, sizeof tmp) != 0) return -1;
        if (count_bytes(ld, c->node, len) != 0) return -1;
        if ((e[i].key = sl__arena_strndup(&ld->set->mem, s, len)) == NULL) return sl__yaml_oom(ld);
        e[i].keylen = len;
        keys[i] = c->node;
        if (value(ld, c->next->node, depth + 1, &e[i].value) != 0) return -1;
    }
    /* a key twice (as strings: 1 and "1" deeper down are one key): sorted
     * by key then file order, the pair whose second key comes first in the
     * file is named.  O(n log n). */
    for (i = 0; i < n; i++) order[i] = (keyref){e[i].key, e[i].keylen, i};
    qsort(order, n, sizeof *order, cmp_keyref);
    size_t bad = n, first = 0;
    for (i = 1; i < n; i++)
        if (bytes_cmp(order[i].key, order[i].len, order[i - 1].key, order[i - 1].len) == 0 &&
            order[i].idx < bad)
            bad = order[i].idx, first = order[i - 1].idx;
    if (bad < n) {
        /* the first of the run of equal keys is the one the file gave first */
        for (size_t j = 0; j < n; j++)
            if (j < first && bytes_cmp(e[j].key, e[j].keylen, e[bad].key, e[bad].keylen) == 0)
                first = j;
        char t[80];
        return FAIL(ld, keys[bad], "duplicate key '%s' in metadata (first at line %u, column %u)",
                    sl__yaml_tok_text(e[bad].key, e[bad].keylen, t, sizeof t), keys[first]->line,
                    keys[first]->col);
    }
    qsort(e, n, sizeof *e, cmp_entry);
    out->entries = e;
    return 0;
}

static int value(loader *ld, const ynode *v, int depth, sl_rule_meta *out)
{
    if (count_value(ld, v) != 0) return -1;
    if (v->type != Y_SCALAR && depth > SL_RULES_META_MAX_DEPTH)
        return FAIL(ld, v, "metadata nested deeper than %d levels (SL_RULES_META_MAX_DEPTH)",
                    SL_RULES_META_MAX_DEPTH);
    if (v->type == Y_MAP) return map_value(ld, v, depth, out);
    if (v->type == Y_SEQ) {
        out->kind = SL_META_LIST;
        out->n = v->n;
        if (v->n == 0) return 0;
        sl_rule_meta *items = sl__arena_alloc(&ld->set->mem, v->n * sizeof *items);
        if (items == NULL) return sl__yaml_oom(ld);
        size_t i = 0;
        for (const ycell *c = v->first; c; c = c->next)
            if (value(ld, c->node, depth + 1, &items[i++]) != 0) return -1;
        out->items = items;
        return 0;
    }
    resolved r = {R_STR, 0, 0, 0, 0};
    if (v->plain) resolve(v->s, v->len, &r);
    switch (r.kind) {
    case R_NULL: out->kind = SL_META_NULL; return 0;
    case R_BOOL:
        out->kind = SL_META_BOOL;
        out->boolean = r.b;
        return 0;
    case R_INT:
        out->kind = SL_META_NUMBER;
        out->number = (double)r.i;
        return 0;
    case R_UINT:
        out->kind = SL_META_NUMBER;
        out->number = (double)r.u;
        return 0;
    case R_FLOAT:
        out->kind = SL_META_NUMBER;
        out->number = r.f;
        return 0;
    default: break;
    }
    if (count_bytes(ld, v, v->len) != 0) return -1;
    out->kind = SL_META_STRING;
    out->n = v->len;
    if ((out->str = sl__arena_strndup(&ld->set->mem, v->s, v->len)) == NULL)
        return sl__yaml_oom(ld);
    return 0;
}

int sl__rules_meta_load(loader *ld, const ynode *v, const sl_rule_meta **out)
{
    char d[96];
    *out = NULL;
    if (v->type != Y_MAP)
        return FAIL(ld, v, "metadata must be a map (name: value ...), not %s",
                    sl__yaml_desc(v, d, sizeof d));
    if (v->n == 0) return 0; /* the peer: an empty map is no metadata */
    sl_rule_meta *m = sl__arena_alloc(&ld->set->mem, sizeof *m);
    if (m == NULL) return sl__yaml_oom(ld);
    if (value(ld, v, 1, m) != 0) return -1;
    *out = m;
    return 0;
}

const sl_rule_meta *sl_rule_meta_get(const sl_rule_meta *map, const char *key, size_t klen)
{
    if (map == NULL || map->kind != SL_META_MAP) return NULL;
    size_t lo = 0, hi = map->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const sl_rule_meta_entry *e = &map->entries[mid];
        int c = bytes_cmp(e->key, e->keylen, key, klen);
        if (c == 0) return &e->value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
