/*
 * rls_wire.c -- RateLimitRequest decoded and RateLimitResponse encoded by
 * hand (rls_wire.h says why and what is promised).
 *
 * The decoder walks each message's fields once to count its repeated ones
 * (protobuf-c sizes its arrays the same way), then once to fill them,
 * bump-allocating from the caller's buffer.  It never guesses: a byte it
 * does not expect ends the fast path (NULL) and protobuf-c decides.
 *
 * The encoder writes fields in number order and leaves out proto3's zero
 * values (0, an empty or NULL string, a NULL message), as protobuf-c does;
 * a nested message's length is its size, computed before it is written.
 * dynamic_metadata comes packed already (rls_meta.c) and is copied.
 */
#include <string.h>

#include "rls_wire.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest rls_req;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse rls_resp;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus rls_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit rls_limit;
typedef Envoy__Config__Core__V3__HeaderValue rls_header;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor rls_desc;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry rls_entry;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride
    rls_override;

/* ---- decoding ------------------------------------------------------------ */

/* The caller's buffer, taken from the front. */
typedef struct bump {
    unsigned char *p;
    size_t left;
} bump;

static void *take(bump *b, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > b->left) return NULL;
    void *r = b->p;
    b->p += n;
    b->left -= n;
    return r;
}

/* Bytes still to read. */
typedef struct rd {
    const uint8_t *p, *end;
} rd;

/* One field: its number, wire type, and value (varint) or bytes. */
typedef struct fld {
    unsigned num, wt;
    uint64_t v;
    rd sub;
} fld;

/* A varint of at most max bytes (protobuf-c: 10 for a value, 5 for a
 * length); bits beyond 64 are dropped, as protobuf-c drops them. */
static inline int varint(rd *r, uint64_t *v, int max)
{
    uint64_t x = 0;
    for (int i = 0; i < max && r->p < r->end; i++) {
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Reads r's next field into f: 1, 0 at r's end, -1 for what the fast path
 * leaves to protobuf-c (a field number above 15 -- none of ours -- a wire
 * type other than varint and length-delimited, bytes cut short). */
static inline int next(rd *r, fld *f)
{
    if (r->p == r->end) return 0;
    uint8_t t = *r->p++;
    if (t & 0x80) return -1;
    f->num = t >> 3u, f->wt = t & 7u;
    if (f->wt == 0) return varint(r, &f->v, 10) == 0 ? 1 : -1;
    uint64_t n;
    if (f->wt != 2 || varint(r, &n, 5) != 0 || n > (uint64_t)(r->end - r->p)) return -1;
    f->sub = (rd){r->p, r->p + n};
    r->p += n;
    return 1;
}

/* How many fields numbered num r holds (a repeated field's length), or -1
 * as next. */
static long count(rd r, unsigned num)
{
    fld f = {0};
    long n = 0;
    int k;
    while ((k = next(&r, &f)) > 0) n += f.num == num;
    return k < 0 ? -1 : n;
}

/* Whether f is field num with wire type wt, seen for the first time
 * (*seen: a bit per field number). */
static int once(const fld *f, unsigned wt, unsigned *seen)
{
    if (f->wt != wt || (*seen & 1u << f->num)) return 0;
    *seen |= 1u << f->num;
    return 1;
}

static char *str(bump *b, const rd *s)
{
    size_t n = (size_t)(s->end - s->p);
    char *d = take(b, n + 1);
    if (d == NULL) return NULL;
    memcpy(d, s->p, n);
    d[n] = '\0';
    return d;
}

static rls_entry *entry(bump *b, rd r)
{
    rls_entry *e = take(b, sizeof *e);
    if (e == NULL) return NULL;
    *e = (rls_entry)ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    unsigned seen = 0;
    fld f = {0};
    int k;
    while ((k = next(&r, &f)) > 0) {
        if ((f.num != 1 && f.num != 2) || !once(&f, 2, &seen)) return NULL;
        char *s = str(b, &f.sub);
        if (s == NULL) return NULL;
        *(f.num == 1 ? &e->key : &e->value) = s;
    }
    return k < 0 ? NULL : e;
}

static rls_override * override(bump *b, rd r)
{
    rls_override *o = take(b, sizeof *o);
    if (o == NULL) return NULL;
    *o = (rls_override)
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
    unsigned seen = 0;
    fld f = {0};
    int k;
    while ((k = next(&r, &f)) > 0) {
        if ((f.num != 1 && f.num != 2) || !once(&f, 0, &seen)) return NULL;
        if (f.num == 1)
            o->requests_per_unit = (uint32_t)f.v;
        else
            o->unit = (Envoy__Type__V3__RateLimitUnit)(int32_t)(uint32_t)f.v;
    }
    return k < 0 ? NULL : o;
}

static Google__Protobuf__UInt64Value *u64value(bump *b, rd r)
{
    Google__Protobuf__UInt64Value *u = take(b, sizeof *u);
    if (u == NULL) return NULL;
    *u = (Google__Protobuf__UInt64Value)GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    unsigned seen = 0;
    fld f = {0};
    int k;
    while ((k = next(&r, &f)) > 0) {
        if (f.num != 1 || !once(&f, 0, &seen)) return NULL;
        u->value = f.v;
    }
    return k < 0 ? NULL : u;
}

static rls_desc *descriptor(bump *b, rd r)
{
    rls_desc *d = take(b, sizeof *d);
    long n = count(r, 1);
    if (d == NULL || n < 0) return NULL;
    *d = (rls_desc)ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    if (n > 0 && (d->entries = take(b, (size_t)n * sizeof *d->entries)) == NULL) return NULL;
    unsigned seen = 0;
    fld f = {0};
    while (next(&r, &f) > 0) { /* count() saw every field whole */
        if (f.num == 1 && f.wt == 2) {
            if ((d->entries[d->n_entries++] = entry(b, f.sub)) == NULL) return NULL;
        } else if (f.num == 2 && once(&f, 2, &seen)) {
            if ((d->limit = override(b, f.sub)) == NULL) return NULL;
        } else if (f.num == 3 && once(&f, 2, &seen)) {
            if ((d->hits_addend = u64value(b, f.sub)) == NULL) return NULL;
        } else {
            return NULL;
        }
    }
    return d;
}

rls_req *sl_rls_unpack(const uint8_t *p, size_t len, void *buf, size_t cap, size_t *used)
{
    bump b = {buf, cap};
    rd r = {p, p + len};
    rls_req *m = take(&b, sizeof *m);
    long n = count(r, 2);
    if (m == NULL || n < 0) return NULL;
    *m = (rls_req)ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    if (n > 0 && (m->descriptors = take(&b, (size_t)n * sizeof *m->descriptors)) == NULL)
        return NULL;
    unsigned seen = 0;
    fld f = {0};
    while (next(&r, &f) > 0) {
        if (f.num == 1 && once(&f, 2, &seen)) {
            if ((m->domain = str(&b, &f.sub)) == NULL) return NULL;
        } else if (f.num == 2 && f.wt == 2) {
            if ((m->descriptors[m->n_descriptors++] = descriptor(&b, f.sub)) == NULL) return NULL;
        } else if (f.num == 3 && once(&f, 0, &seen)) {
            m->hits_addend = (uint32_t)f.v;
        } else {
            return NULL;
        }
    }
    *used = cap - b.left;
    return m;
}

/* ---- encoding ------------------------------------------------------------ */

/* 7 bits a byte: ceil(bits of v / 7), at least 1 */
static size_t vsize(uint64_t v) { return (size_t)(64 - __builtin_clzll(v | 1) + 6) / 7; }

static uint8_t *vput(uint8_t *o, uint64_t v)
{
    for (; v >= 0x80; v >>= 7) *o++ = (uint8_t)(v | 0x80);
    *o++ = (uint8_t)v;
    return o;
}

/* int32 and enum values: a negative one is sign-extended to 10 bytes */
static uint64_t i32(int32_t v) { return (uint64_t)(int64_t)v; }

/* A field's size with its one-byte tag (every field number here is below
 * 16): a varint, a length-delimited body of n bytes, a string. */
static size_t fv(uint64_t v) { return v ? 1 + vsize(v) : 0; }
static size_t fl(size_t n) { return 1 + vsize(n) + n; }
static size_t fs(const char *s) { return s && *s ? fl(strlen(s)) : 0; }

static uint8_t *pv(uint8_t *o, unsigned num, uint64_t v)
{
    if (v == 0) return o;
    *o++ = (uint8_t)(num << 3);
    return vput(o, v);
}

static uint8_t *pl(uint8_t *o, unsigned num, size_t n)
{
    *o++ = (uint8_t)(num << 3 | 2);
    return vput(o, n);
}

static uint8_t *ps(uint8_t *o, unsigned num, const char *s)
{
    if (s == NULL || *s == '\0') return o;
    size_t n = strlen(s);
    o = pl(o, num, n);
    memcpy(o, s, n);
    return o + n;
}

static size_t limit_size(const rls_limit *l)
{
    return fv(l->requests_per_unit) + fv(i32(l->unit)) + fs(l->name);
}

static size_t dur_size(const Google__Protobuf__Duration *d)
{
    return fv((uint64_t)d->seconds) + fv(i32(d->nanos));
}

/* A status's size, its limit's (*ls) and its duration's (*ds) */
static size_t status_sizes(const rls_status *s, size_t *ls, size_t *ds)
{
    *ls = s->current_limit ? limit_size(s->current_limit) : 0;
    *ds = s->duration_until_reset ? dur_size(s->duration_until_reset) : 0;
    return fv(i32(s->code)) + (s->current_limit ? fl(*ls) : 0) + fv(s->limit_remaining) +
           (s->duration_until_reset ? fl(*ds) : 0);
}

static size_t header_size(const rls_header *h) { return fs(h->key) + fs(h->value); }

size_t sl_rls_resp_size(const rls_resp *m, const uint8_t *dmeta, size_t dmeta_len)
{
    size_t n = fv(i32(m->overall_code));
    size_t ls, ds;
    for (size_t i = 0; i < m->n_statuses; i++) n += fl(status_sizes(m->statuses[i], &ls, &ds));
    for (size_t i = 0; i < m->n_response_headers_to_add; i++)
        n += fl(header_size(m->response_headers_to_add[i]));
    for (size_t i = 0; i < m->n_request_headers_to_add; i++)
        n += fl(header_size(m->request_headers_to_add[i]));
    if (dmeta) n += fl(dmeta_len);
    return n;
}

static uint8_t *put_header(uint8_t *o, unsigned num, const rls_header *h)
{
    o = pl(o, num, header_size(h));
    o = ps(o, 1, h->key);
    return ps(o, 2, h->value);
}

static uint8_t *put_status(uint8_t *o, const rls_status *s)
{
    size_t ls, ds;
    o = pl(o, 2, status_sizes(s, &ls, &ds));
    o = pv(o, 1, i32(s->code));
    if (s->current_limit) {
        const rls_limit *l = s->current_limit;
        o = pl(o, 2, ls);
        o = pv(o, 1, l->requests_per_unit);
        o = pv(o, 2, i32(l->unit));
        o = ps(o, 3, l->name);
    }
    o = pv(o, 3, s->limit_remaining);
    if (s->duration_until_reset) {
        const Google__Protobuf__Duration *d = s->duration_until_reset;
        o = pl(o, 4, ds);
        o = pv(o, 1, (uint64_t)d->seconds);
        o = pv(o, 2, i32(d->nanos));
    }
    return o;
}

size_t sl_rls_resp_pack(const rls_resp *m, const uint8_t *dmeta, size_t dmeta_len, uint8_t *out)
{
    uint8_t *o = pv(out, 1, i32(m->overall_code));
    for (size_t i = 0; i < m->n_statuses; i++) o = put_status(o, m->statuses[i]);
    for (size_t i = 0; i < m->n_response_headers_to_add; i++)
        o = put_header(o, 3, m->response_headers_to_add[i]);
    for (size_t i = 0; i < m->n_request_headers_to_add; i++)
        o = put_header(o, 4, m->request_headers_to_add[i]);
    if (dmeta) {
        o = pl(o, 6, dmeta_len);
        if (dmeta_len) memcpy(o, dmeta, dmeta_len);
        o += dmeta_len;
    }
    return (size_t)(o - out);
}
