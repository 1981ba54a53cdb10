/*
 * rls_meta.c -- RateLimitResponse's dynamic_metadata packed by hand
 * (rls_meta.h says what it holds).
 *
 * google.protobuf.Struct in the wire format: a Struct is its entries
 * (field 1, each a map entry {1: key, 2: Value}); a Value is one field of
 * its oneof (1 null, 2 number as a double, 3 string, 4 bool, 5 Struct,
 * 6 ListValue); a ListValue is its values (field 1).  Every message inside
 * another is written after its length, so each writer runs in two modes on
 * one code path: counting (w.p NULL) and writing.  A nested message is
 * counted once, then written, at each level: O(size x depth).
 *
 * The merge of the passed maps is never built: a merged map is a list of
 * maps, first first, walked in step over their sorted keys; a key's value
 * is the first map's, unless that is a map, when the list of maps under
 * that key (the non-maps skipped) is merged the same way one level down.
 * Each level keeps its list and cursors in one scratch array, allocated
 * once per call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rls_meta.h"
#include "sluice.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_desc;

/* ---- writing, or counting ------------------------------------------------- */

typedef struct wr {
    unsigned char *p; /* NULL: count only */
    size_t n;         /* bytes written (or counted) */
} wr;

static void wbytes(wr *w, const void *s, size_t n)
{
    if (w->p && n) memcpy(w->p + w->n, s, n);
    w->n += n;
}

static void wvarint(wr *w, uint64_t v)
{
    unsigned char b[10];
    size_t k = 0;
    for (; v >= 0x80; v >>= 7) b[k++] = (unsigned char)(v | 0x80);
    b[k++] = (unsigned char)v;
    wbytes(w, b, k);
}

/* every field number here is below 16: a one-byte tag */
static void wtag(wr *w, unsigned num, unsigned wt)
{
    unsigned char t = (unsigned char)(num << 3 | wt);
    wbytes(w, &t, 1);
}

static void wlen(wr *w, unsigned num, const void *s, size_t n)
{
    wtag(w, num, 2);
    wvarint(w, n);
    wbytes(w, s, n);
}

typedef void body_fn(wr *w, const void *arg);

/* Field num holding the message f writes: counted, then (when writing)
 * written after its length. */
static void sub(wr *w, unsigned num, body_fn *f, const void *arg)
{
    wr c = {NULL, 0};
    f(&c, arg);
    wtag(w, num, 2);
    wvarint(w, c.n);
    if (w->p)
        f(w, arg);
    else
        w->n += c.n;
}

/* One Struct entry (Struct field 1): {1: key, 2: the Value f writes}. */
typedef struct ent {
    const char *key;
    size_t keylen;
    body_fn *f;
    const void *arg;
} ent;

static void ent_body(wr *w, const void *a)
{
    const ent *e = a;
    wlen(w, 1, e->key, e->keylen);
    sub(w, 2, e->f, e->arg);
}

static void field(wr *w, const char *key, body_fn *f, const void *arg)
{
    ent e = {key, strlen(key), f, arg};
    sub(w, 1, ent_body, &e);
}

/* ---- a rule's metadata ------------------------------------------------------ */

static void meta_value(wr *w, const void *a);

static void meta_struct(wr *w, const void *a)
{
    const sl_rule_meta *m = a;
    for (size_t i = 0; i < m->n; i++) {
        ent e = {m->entries[i].key, m->entries[i].keylen, meta_value, &m->entries[i].value};
        sub(w, 1, ent_body, &e);
    }
}

static void meta_list(wr *w, const void *a)
{
    const sl_rule_meta *m = a;
    for (size_t i = 0; i < m->n; i++) sub(w, 1, meta_value, &m->items[i]);
}

static void number(wr *w, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(u >> (8 * i));
    wtag(w, 2, 1);
    wbytes(w, b, 8);
}

/* A Value's fields. */
static void meta_value(wr *w, const void *a)
{
    const sl_rule_meta *m = a;
    switch (m->kind) {
    case SL_META_NULL:
        wtag(w, 1, 0);
        wvarint(w, 0);
        break;
    case SL_META_BOOL:
        wtag(w, 4, 0);
        wvarint(w, m->boolean ? 1 : 0);
        break;
    case SL_META_NUMBER: number(w, m->number); break;
    case SL_META_STRING: wlen(w, 3, m->str, m->n); break;
    case SL_META_MAP: sub(w, 5, meta_struct, m); break;
    case SL_META_LIST: sub(w, 6, meta_list, m); break;
    }
}

/* ---- the merge of several ---------------------------------------------------- */

/* Scratch per level: the maps merged there (set by the level above) and
 * each one's cursor. */
typedef struct level {
    const sl_rule_meta **maps;
    size_t *at;
} level;

typedef struct merged {
    level *lv; /* lv[0]: the top; one more per level down */
    int depth; /* this merge's level */
    size_t m;  /* maps in lv[depth].maps */
} merged;

/* Two entries' keys in rules_meta.h's order: bytes, a prefix first. */
static int bytes_order(const sl_rule_meta_entry *a, const sl_rule_meta_entry *b)
{
    size_t n = a->keylen < b->keylen ? a->keylen : b->keylen;
    int c = n ? memcmp(a->key, b->key, n) : 0;
    if (c != 0) return c;
    return a->keylen < b->keylen ? -1 : a->keylen > b->keylen;
}

static void merged_struct(wr *w, const void *a);

static void merged_value(wr *w, const void *a) { sub(w, 5, merged_struct, a); }

/* The merge of lv[depth].maps[0..m): the union of their keys in order. */
static void merged_struct(wr *w, const void *a)
{
    const merged *mg = a;
    const level *L = &mg->lv[mg->depth];
    for (size_t j = 0; j < mg->m; j++) L->at[j] = 0;
    for (;;) {
        const sl_rule_meta_entry *least = NULL;
        for (size_t j = 0; j < mg->m; j++) {
            if (L->at[j] >= L->maps[j]->n) continue;
            const sl_rule_meta_entry *e = &L->maps[j]->entries[L->at[j]];
            if (least == NULL || bytes_order(e, least) < 0) least = e;
        }
        if (least == NULL) return;
        /* the maps holding the key, first first; each cursor moves past it */
        const sl_rule_meta *first = NULL;
        size_t k = 0;
        level *D = &mg->lv[mg->depth + 1];
        for (size_t j = 0; j < mg->m; j++) {
            if (L->at[j] >= L->maps[j]->n) continue;
            const sl_rule_meta_entry *e = &L->maps[j]->entries[L->at[j]];
            if (bytes_order(e, least) != 0) continue;
            L->at[j]++;
            if (first == NULL) first = &e->value;
            if (first->kind == SL_META_MAP && e->value.kind == SL_META_MAP)
                D->maps[k++] = &e->value;
        }
        ent e = {least->key, least->keylen, meta_value, first};
        merged down = {mg->lv, mg->depth + 1, k};
        if (first->kind == SL_META_MAP && k > 1) e.f = merged_value, e.arg = &down;
        sub(w, 1, ent_body, &e);
    }
}

/* ---- the request's part --------------------------------------------------------- */

static void str_value(wr *w, const void *a)
{
    const char *s = a;
    wlen(w, 3, s, strlen(s));
}

static void num_value(wr *w, const void *a) { number(w, *(const double *)a); }

/* "key=value" as a Value */
static void entry_value(wr *w, const void *a)
{
    const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *e = a;
    const char *k = e->key ? e->key : "", *v = e->value ? e->value : "";
    size_t kl = strlen(k), vl = strlen(v);
    wtag(w, 3, 2);
    wvarint(w, kl + 1 + vl);
    wbytes(w, k, kl);
    wbytes(w, "=", 1);
    wbytes(w, v, vl);
}

static void entries_list(wr *w, const void *a)
{
    const rls_desc *d = a;
    for (size_t i = 0; i < d->n_entries; i++) sub(w, 1, entry_value, d->entries[i]);
}

static void entries_value(wr *w, const void *a) { sub(w, 6, entries_list, a); }

/* The override in protobuf's text format, zero fields left out. */
static void limit_text(const rls_desc *d, char *buf, size_t cap)
{
    static const char *const units[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                        "DAY",     "MONTH",  "YEAR"};
    const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride *o =
        d->limit;
    char r[32] = "", u[32] = "";
    if (o->requests_per_unit) snprintf(r, sizeof r, "requests_per_unit:%u", o->requests_per_unit);
    int un = (int)o->unit;
    if (un >= 1 && un <= 6)
        snprintf(u, sizeof u, "unit:%s", units[un]);
    else if (un != 0)
        snprintf(u, sizeof u, "unit:%d", un);
    snprintf(buf, cap, "%s%s%s", r, *r && *u ? " " : "", u);
}

static void desc_struct(wr *w, const void *a)
{
    const rls_desc *d = a;
    field(w, "entries", entries_value, d);
    if (d->hits_addend) {
        double h = (double)d->hits_addend->value;
        field(w, "hitsAddend", num_value, &h);
    }
    if (d->limit) {
        char t[80];
        limit_text(d, t, sizeof t);
        field(w, "limit", str_value, t);
    }
}

static void desc_value(wr *w, const void *a) { sub(w, 5, desc_struct, a); }

static void descs_list(wr *w, const void *a)
{
    const rls_req *r = a;
    for (size_t i = 0; i < r->n_descriptors; i++) sub(w, 1, desc_value, r->descriptors[i]);
}

static void descs_value(wr *w, const void *a) { sub(w, 6, descs_list, a); }

typedef struct top {
    const rls_req *req;
    const merged *meta;      /* NULL: none passed */
    const sl_rule_meta *one; /* the only one passed, or NULL */
} top;

static void top_struct(wr *w, const void *a)
{
    const top *t = a;
    field(w, "descriptors", descs_value, t->req);
    field(w, "domain", str_value, t->req->domain ? t->req->domain : "");
    if (t->req->hits_addend) {
        double h = (double)t->req->hits_addend;
        field(w, "hitsAddend", num_value, &h);
    }
    if (t->one)
        field(w, "metadata", meta_value, t->one);
    else if (t->meta)
        field(w, "metadata", merged_value, t->meta);
}

int sl_rls_dmeta(const rls_req *req, const sl_rule_meta *const *passed, int npassed, sl_buf *out)
{
    size_t m = 0;
    for (int i = 0; i < npassed; i++) m += passed[i] != NULL;
    enum { LEVELS = SL_RULES_META_MAX_DEPTH + 2 };
    level lv[LEVELS];
    void *scratch = NULL;
    merged mg = {lv, 0, m};
    top t = {req, NULL, NULL};
    if (m == 1) {
        for (int i = 0; i < npassed; i++)
            if (passed[i]) t.one = passed[i];
    } else if (m > 1) {
        size_t per = m * (sizeof(const sl_rule_meta *) + sizeof(size_t));
        if ((scratch = malloc(LEVELS * per)) == NULL) return SL_ENOMEM;
        for (int l = 0; l < LEVELS; l++) {
            lv[l].maps = (const sl_rule_meta **)((char *)scratch + (size_t)l * per);
            lv[l].at = (size_t *)(lv[l].maps + m);
        }
        m = 0;
        for (int i = 0; i < npassed; i++)
            if (passed[i]) lv[0].maps[m++] = passed[i];
        t.meta = &mg;
    }
    wr c = {NULL, 0};
    top_struct(&c, &t);
    if (out->cap - out->len < c.n) {
        size_t cap = out->cap * 2 > out->len + c.n ? out->cap * 2 : out->len + c.n;
        char *p = realloc(out->p, cap);
        if (p == NULL) {
            free(scratch);
            return SL_ENOMEM;
        }
        out->p = p, out->cap = cap;
    }
    wr w = {(unsigned char *)out->p + out->len, 0};
    top_struct(&w, &t);
    out->len += w.n;
    free(scratch);
    return 0;
}
