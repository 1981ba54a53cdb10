/*
 * rules_match.c -- answers requests from a rule set rules_load.c has loaded:
 * the domain by name (sl_rules_find_domain), the node whose limits apply
 * (sl_rules_match: Lyft's exact value, else the first wildcard in file order
 * that matches, else key only, one request entry per level, no
 * backtracking), the counting key of a limit (sl_rules_key: the request's
 * values -- a share_threshold level's pattern --, IP prefixes masked,
 * separators escaped), Lyft's statistics name (sl_rules_metric_name), and
 * listing (sl_rules_foreach, sl_rules_limit_format, sl_rules_node_notes).
 *
 * Invariants kept: nothing here writes to a set or allocates, so any number
 * of threads may use one set at once; and every part of a counting key has
 * its separators escaped, so two different requests never share a key
 * unless a share_threshold level says they do (or, for keys longer than
 * SL_MAX_KEY, two of them meet in a 256-bit digest: check.h, "Long
 * keys").  It relies on the loader's
 * invariant (rules_load.c): siblings are unique and
 * each node's lookup tables are sorted by bytes_cmp, so a level is a binary
 * search.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "rules_int.h"
#include "siphash.h"
#include "sluice.h"

/* ---- domains -------------------------------------------------------------- */

const sl_rule_domain *sl_rules_find_domain(const sl_rules *r, const char *name, size_t len)
{
    if (r == NULL || (name == NULL && len > 0)) return NULL;
    int lo = 0, hi = r->ndomains;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const sl_rule_domain *d = r->by_name[mid];
        int c = bytes_cmp(d->name, d->namelen, name, len);
        if (c == 0) return d;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- matching ------------------------------------------------------------- */

/* Does v (vn bytes) match the wildcard node c's pattern?  Each '*' matches
 * any run of bytes, the empty one too; the rest must be there as written,
 * in order: the c->sl__whead bytes before the first '*' start v, the
 * c->sl__wtail bytes after the last end it (both measured at load, so a
 * pattern that cannot match is mostly refused by one memcmp), and each part
 * between is found, leftmost, in what is left between them (leftmost is
 * never wrong: a later find only leaves less room to the parts after it).
 * No allocation; O(vn * parts) at worst. */
static int glob_match(const sl_rule_node *c, const char *v, size_t vn)
{
    const char *p = c->value;
    size_t pn = c->valuelen, head = c->sl__whead, tail = c->sl__wtail;
    if (vn < head + tail || memcmp(v, p, head) != 0 ||
        memcmp(v + vn - tail, p + pn - tail, tail) != 0)
        return 0;
    const char *s = v + head, *end = v + vn - tail; /* what the middle parts share */
    const char *q = p + head + 1, *last = p + pn - tail - 1;
    while (q < last) {
        const char *star = memchr(q, '*', (size_t)(last - q) + 1);
        size_t seg = (size_t)(star - q);
        if (seg > 0) {
            const char *at = memmem(s, (size_t)(end - s), q, seg);
            if (at == NULL) return 0;
            s = at + seg;
        }
        q = star + 1;
    }
    return 1;
}

/* The child of node that entry e selects, as Lyft does: the same key and
 * value (a wildcard child's own text included), else the first wildcard
 * child in file order whose pattern the value matches, else the key-only
 * child; NULL if none. */
static const sl_rule_node *child_for(const sl_rule_node *node, const sl_rule_entry *e)
{
    const struct sl__rule_index *ix = node->sl__index;
    if (ix == NULL) return NULL;
    int lo = 0, hi = ix->nexact;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const sl_rule_node *c = ix->exact[mid];
        int d = bytes_cmp(c->key, c->keylen, e->key, e->keylen);
        if (d == 0) d = bytes_cmp(c->value, c->valuelen, e->value, e->valuelen);
        if (d == 0) return c;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* a value holding '*' may be a wildcard's own text: Lyft's exact step */
    if (ix->nwild > 0 && e->valuelen > 0 && memchr(e->value, '*', e->valuelen) != NULL) {
        for (int i = 0; i < ix->nwild; i++) {
            const sl_rule_node *c = ix->wild[i];
            if (bytes_cmp(c->key, c->keylen, e->key, e->keylen) == 0 &&
                bytes_cmp(c->value, c->valuelen, e->value, e->valuelen) == 0)
                return c;
        }
    }
    for (int i = 0; i < ix->nwild; i++) {
        const sl_rule_node *c = ix->wild[i];
        if (bytes_cmp(c->key, c->keylen, e->key, e->keylen) == 0 &&
            glob_match(c, e->value ? e->value : "", e->valuelen))
            return c;
    }
    lo = 0;
    hi = ix->nany;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const sl_rule_node *c = ix->any[mid];
        int d = bytes_cmp(c->key, c->keylen, e->key, e->keylen);
        if (d == 0) return c;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const sl_rule_node *sl_rules_match(const sl_rules *r, const char *domain, size_t dlen,
                                   const sl_rule_entry *entries, int n)
{
    if (entries == NULL || n < 1 || n > SL_RULES_MAX_DEPTH) return NULL;
    const sl_rule_domain *d = sl_rules_find_domain(r, domain, dlen);
    if (d == NULL) return NULL;
    const sl_rule_node *node = &d->root;
    for (int i = 0; i < n && node; i++) {
        const sl_rule_entry *e = &entries[i];
        if ((e->key == NULL && e->keylen) || (e->value == NULL && e->valuelen)) return NULL;
        node = child_for(node, e);
    }
    return node && (node->nlimits > 0 || node->concurrency > 0) ? node : NULL;
}

/* ---- counting keys -------------------------------------------------------- */

/* Where a key's bytes go.  The first pass writes them to p (max bytes at
 * most: over when they do not fit).  The digest pass (h set) writes the
 * first max bytes to p -- the readable prefix -- and every byte to the
 * two digests through stage. */
typedef struct kbuf {
    char *p;
    size_t n, max;
    int over;
    sl__sip128 *h; /* the digest pass: h[0], h[1]; NULL: the first pass */
    size_t ns;     /* bytes in stage */
    uint8_t stage[64];
} kbuf;

static void kflush(kbuf *b)
{
    sl__sip128_update(&b->h[0], b->stage, b->ns);
    sl__sip128_update(&b->h[1], b->stage, b->ns);
    b->ns = 0;
}

static void kbyte(kbuf *b, unsigned char c)
{
    if (b->h != NULL) {
        b->stage[b->ns++] = c;
        if (b->ns == sizeof b->stage) kflush(b);
        if (b->n < b->max) b->p[b->n++] = (char)c;
    } else if (b->n < b->max) {
        b->p[b->n++] = (char)c;
    } else {
        b->over = 1;
    }
}

/* Whether c is written %XX in a key (esc): the separators and '%'. */
static inline int kesc(unsigned char c)
{
    return c == '%' || c == '|' || c == '=' || c == '#';
}

/* Appends s, escaping the separators when esc.  The first pass (most
 * keys: short, nothing to escape) copies each run of plain bytes at once;
 * the digest pass goes a byte at a time through kbyte. */
static void kput(kbuf *b, const char *s, size_t len, int esc)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i = 0;
    while (i < len && !b->over) {
        size_t j = i;
        if (esc)
            while (j < len && !kesc((unsigned char)s[j])) j++;
        else
            j = len;
        if (b->h == NULL) {
            if (j - i > b->max - b->n) {
                b->over = 1;
                return;
            }
            memcpy(b->p + b->n, s + i, j - i);
            b->n += j - i;
        } else {
            for (size_t k = i; k < j; k++) kbyte(b, (unsigned char)s[k]);
        }
        if (j == len) return;
        unsigned char c = (unsigned char)s[j];
        kbyte(b, '%');
        kbyte(b, (unsigned char)hex[c >> 4]);
        kbyte(b, (unsigned char)hex[c & 15]);
        i = j + 1;
    }
}

_Static_assert(SL_RULES_KEY_PREFIX + 2 + 64 == SL_MAX_KEY, "the digest form is SL_MAX_KEY bytes");

/* The two fixed SipHash keys of the digest form (check.h, "Long keys").
 * Never to change: counters already kept (a snapshot, Redis) are named
 * with them. */
static const uint8_t digest_key[2][16] = {
    {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '1'},
    {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '2'}};

/* Builds a key with build(b, ctx) into buf: as built when it fits in
 * SL_MAX_KEY (and cap) bytes, else -- cap permitting -- in the digest form
 * of exactly SL_MAX_KEY bytes: its first SL_RULES_KEY_PREFIX bytes, "#~",
 * and 64 lowercase hex digits of SipHash-2-4-128 of the whole key under
 * digest_key[0] then under digest_key[1] (check.h says why no two keys
 * meet).  A second pass of build, so only long keys pay for the digest;
 * no allocation whatever the key's length. */
static int key_make(void (*build)(kbuf *b, const void *ctx), const void *ctx, char *buf, size_t cap,
                    size_t *len)
{
    kbuf b = {buf, 0, cap < SL_MAX_KEY ? cap : SL_MAX_KEY, 0, NULL, 0, {0}};
    build(&b, ctx);
    if (!b.over) {
        *len = b.n;
        return 0;
    }
    if (cap < SL_MAX_KEY) return SL_EKEY;
    sl__sip128 h[2];
    sl__sip128_init(&h[0], digest_key[0]);
    sl__sip128_init(&h[1], digest_key[1]);
    kbuf d = {buf, 0, SL_RULES_KEY_PREFIX, 0, h, 0, {0}};
    build(&d, ctx);
    kflush(&d);
    uint8_t dig[32];
    sl__sip128_final(&h[0], dig);
    sl__sip128_final(&h[1], dig + 16);
    static const char hex[] = "0123456789abcdef";
    char *o = buf + SL_RULES_KEY_PREFIX;
    *o++ = '#';
    *o++ = '~';
    for (int i = 0; i < 32; i++) {
        *o++ = hex[dig[i] >> 4];
        *o++ = hex[dig[i] & 15];
    }
    *len = (size_t)(o - buf);
    return 0;
}

static void mask_bits(unsigned char *a, int bytes, int prefix)
{
    for (int i = 0; i < bytes; i++) {
        int keep = prefix - i * 8;
        if (keep >= 8) continue;
        a[i] &= keep <= 0 ? 0 : (unsigned char)(0xFF << (8 - keep));
    }
}

/* If v is an IP address and a prefix applies to its family, writes the
 * masked address in canonical form to out and returns its length; else 0.
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) count as IPv4. */
static size_t mask_ip(const char *v, size_t len, int p4, int p6, char *out, size_t cap)
{
    char s[INET6_ADDRSTRLEN];
    unsigned char a[16];
    if (len == 0 || len >= sizeof s || cap < INET6_ADDRSTRLEN) return 0;
    memcpy(s, v, len);
    s[len] = '\0';
    if (memchr(s, ':', len) == NULL) {
        if (p4 < 0 || inet_pton(AF_INET, s, a) != 1) return 0;
    } else {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (inet_pton(AF_INET6, s, a) != 1) return 0;
        if (memcmp(a, mapped, sizeof mapped) != 0) {
            if (p6 < 0) return 0;
            mask_bits(a, 16, p6);
            return inet_ntop(AF_INET6, a, out, (socklen_t)cap) ? strlen(out) : 0;
        }
        if (p4 < 0) return 0;
        memmove(a, a + 12, 4);
    }
    mask_bits(a, 4, p4);
    /* dotted quad by hand: inet_ntop goes through snprintf, a measurable
     * share of a replay of an access log */
    char *o = out;
    for (int i = 0; i < 4; i++) {
        unsigned b = a[i];
        if (i) *o++ = '.';
        if (b >= 100) *o++ = (char)('0' + b / 100);
        if (b >= 10) *o++ = (char)('0' + b / 10 % 10);
        *o++ = (char)('0' + b % 10);
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* A rule key's parts (sl_rules_key's arguments, checked). */
typedef struct rule_key {
    const sl_rule_node *node;
    const sl_rule_node *const *lv; /* the node's levels, root's child first */
    const sl_rule_entry *entries;
    int n, limit;
} rule_key;

static void build_rule_key(kbuf *b, const void *ctx)
{
    const rule_key *k = ctx;
    const sl_rule_domain *dom = k->node->domain;
    kput(b, dom->name, dom->namelen, 1);
    for (int i = 0; i < k->n; i++) {
        const sl_rule_entry *e = &k->entries[i];
        const sl_rule_node *l = k->lv[i];
        kput(b, "|", 1, 0);
        kput(b, l->key, l->keylen, 1);
        kput(b, "=", 1, 0);
        if (l->share_threshold) {
            /* every value the pattern matches shares this counter.  Still
             * one counter per node: the only request value equal to the
             * pattern's text is the pattern itself, which this node takes
             * first (child_for's exact step) */
            kput(b, l->value, l->valuelen, 1);
            continue;
        }
        char ip[INET6_ADDRSTRLEN];
        size_t iplen = 0;
        if (l->ip4_prefix >= 0 || l->ip6_prefix >= 0)
            iplen = mask_ip(e->value, e->valuelen, l->ip4_prefix, l->ip6_prefix, ip, sizeof ip);
        if (iplen)
            kput(b, ip, iplen, 1);
        else
            kput(b, e->value, e->valuelen, 1);
    }
    if (k->limit >= 0 && k->node->nlimits > 1) {
        char w[24];
        int wl =
            snprintf(w, sizeof w, "#%lld", (long long)k->node->limits[k->limit].params.window_ms);
        kput(b, w, (size_t)wl, 0);
    }
}

int sl_rules_key(const sl_rule_node *node, const sl_rule_entry *entries, int n, int limit,
                 char *buf, size_t cap, size_t *len)
{
    if (node == NULL || entries == NULL || buf == NULL || len == NULL) return SL_EINVAL;
    if (n < 1 || n != node->depth || limit < -1 || limit >= node->nlimits) return SL_EINVAL;
    const sl_rule_node *lv[SL_RULES_MAX_DEPTH];
    const sl_rule_node *x = node;
    for (int i = n - 1; i >= 0; i--, x = x->parent) lv[i] = x;
    for (int i = 0; i < n; i++) {
        const sl_rule_entry *e = &entries[i];
        if ((e->value == NULL && e->valuelen) || (e->key == NULL && e->keylen) ||
            bytes_cmp(e->key, e->keylen, lv[i]->key, lv[i]->keylen) != 0)
            return SL_EINVAL;
    }
    rule_key k = {node, lv, entries, n, limit};
    return key_make(build_rule_key, &k, buf, cap, len);
}

/* An override key's parts (sl_rules_override_key's arguments, checked). */
typedef struct over_key {
    const sl_rule_domain *dom;
    const sl_rule_entry *entries;
    int n;
    int64_t window_ms;
} over_key;

static void build_over_key(kbuf *b, const void *ctx)
{
    const over_key *k = ctx;
    kput(b, k->dom->name, k->dom->namelen, 1);
    for (int i = 0; i < k->n; i++) {
        const sl_rule_entry *e = &k->entries[i];
        kput(b, "|", 1, 0);
        kput(b, e->key, e->keylen, 1);
        kput(b, "=", 1, 0);
        kput(b, e->value, e->valuelen, 1);
    }
    char w[40];
    int wl = snprintf(w, sizeof w, "#override/%lld", (long long)k->window_ms);
    kput(b, w, (size_t)wl, 0);
}

int sl_rules_override_key(const sl_rule_domain *dom, const sl_rule_entry *entries, int n,
                          int64_t window_ms, char *buf, size_t cap, size_t *len)
{
    if (dom == NULL || entries == NULL || buf == NULL || len == NULL || n < 0 || window_ms <= 0)
        return SL_EINVAL;
    for (int i = 0; i < n; i++) {
        const sl_rule_entry *e = &entries[i];
        if ((e->value == NULL && e->valuelen) || (e->key == NULL && e->keylen)) return SL_EINVAL;
    }
    over_key k = {dom, entries, n, window_ms};
    return key_make(build_over_key, &k, buf, cap, len);
}

/* ---- listing -------------------------------------------------------------- */

static int visit_node(const sl_rule_node *n, int (*fn)(const sl_rule_node *, void *), void *ctx)
{
    int rc = fn(n, ctx);
    for (int i = 0; rc == 0 && i < n->nchildren; i++) rc = visit_node(&n->children[i], fn, ctx);
    return rc;
}

int sl_rules_foreach(const sl_rules *r, int (*fn)(const sl_rule_node *node, void *ctx), void *ctx)
{
    if (r == NULL || fn == NULL) return 0;
    int rc = 0;
    for (int i = 0; rc == 0 && i < r->ndomains; i++) rc = visit_node(&r->domains[i].root, fn, ctx);
    return rc;
}

/* "90s", "1500ms", "2h": the largest unit that divides ms. */
static void format_window(int64_t ms, char *buf, size_t cap)
{
    static const struct {
        int64_t ms;
        const char *u;
    } u[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        if (ms % u[i].ms == 0) {
            snprintf(buf, cap, "%lld%s", (long long)(ms / u[i].ms), u[i].u);
            return;
        }
    }
    snprintf(buf, cap, "%lldms", (long long)ms);
}

int sl_rules_limit_format(const sl_rule_limit *l, char *buf, size_t cap)
{
    if (l == NULL) return snprintf(buf, cap, "%s", "");
    if (l->unlimited) return snprintf(buf, cap, "unlimited");
    const sl_params *p = &l->params;
    char w[32], b[48] = "", pr[48] = "", s[48] = "", e[64] = "";
    if (l->unit != SL_UNIT_NONE)
        snprintf(w, sizeof w, "%s", sl_rule_unit_name(l->unit));
    else
        format_window(p->window_ms, w, sizeof w);
    if (p->burst) snprintf(b, sizeof b, " burst=%lld", (long long)p->burst);
    if (p->precision) snprintf(pr, sizeof pr, " precision=%lld", (long long)p->precision);
    if (l->soft_pct) snprintf(s, sizeof s, " soft=%lld%%", (long long)l->soft_pct);
    if (l->elastic_pct)
        snprintf(e, sizeof e, " elastic=%lld%%(%lld)", (long long)l->elastic_pct,
                 (long long)l->elastic_limit);
    else if (l->elastic_limit)
        snprintf(e, sizeof e, " elastic=%lld", (long long)l->elastic_limit);
    return snprintf(buf, cap, "%lld/%s %s%s%s%s%s", (long long)p->limit, w, sl_algo_name(p->algo),
                    b, pr, s, e);
}

int sl_rules_node_notes(const sl_rule_node *node, char *buf, size_t cap)
{
    if (node == NULL) return snprintf(buf, cap, "%s", "");
    /* what RL.RULES cannot show otherwise.  metadata goes to Envoy in
     * the gRPC reply's dynamic_metadata (rules_meta.h), and a RESP reply
     * has no place for it -- "not applicable" here, on RESP; the two
     * metric fields name Lyft's per-value statistics (sl_rules_metric_name),
     * which INFO rulestats keeps beside the rule's own */
    return snprintf(buf, cap, "%s%s%s%s%s", node->share_threshold ? " share_threshold" : "",
                    node->quota_mode ? " quota_mode" : "",
                    node->detailed_metric ? " detailed_metric" : "",
                    node->value_to_metric ? " value_to_metric" : "",
                    node->has_metadata ? " metadata: not applicable" : "");
}

/* ---- Lyft's statistics names --------------------------------------------- */

typedef struct mbuf {
    char *p;
    size_t n, cap;
} mbuf;

static void mput(mbuf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++, b->n++)
        if (b->n + 1 < b->cap) b->p[b->n] = s[i];
}

int sl_rules_metric_name(const sl_rule_node *node, const sl_rule_entry *entries, int n, char *buf,
                         size_t cap, size_t *len)
{
    if (node == NULL || entries == NULL || buf == NULL || len == NULL || n != node->depth || n < 1)
        return SL_EINVAL;
    const sl_rule_node *lv[SL_RULES_MAX_DEPTH];
    const sl_rule_node *x = node;
    for (int i = n - 1; i >= 0; i--, x = x->parent) lv[i] = x;
    int dynamic = sl_rules_metric_dynamic(node);
    mbuf b = {buf, 0, cap};
    if (!dynamic) {
        mput(&b, node->path, strlen(node->path));
    } else {
        const sl_rule_domain *dom = node->domain;
        int shared = 0; /* Lyft builds a detailed name two ways: with or without them */
        for (int i = 0; i < n; i++) shared |= lv[i]->share_threshold;
        mput(&b, dom->name, dom->namelen);
        for (int i = 0; i < n; i++) {
            const sl_rule_entry *e = &entries[i];
            const sl_rule_node *l = lv[i];
            const char *v = NULL;
            size_t vl = 0;
            if (l->share_threshold) { /* the pattern, always */
                v = l->value;
                vl = l->valuelen;
            } else if (node->detailed_metric || l->match == SL_MATCH_EXACT || l->value_to_metric) {
                v = e->value;
                vl = e->valuelen;
            } else if (l->match == SL_MATCH_WILDCARD) {
                v = l->value;
                vl = l->valuelen;
            }
            mput(&b, ".", 1);
            mput(&b, e->key, e->keylen);
            /* Lyft writes "key_" for an empty value only in a detailed name
             * without shared levels */
            if (vl > 0 || (node->detailed_metric && !shared)) mput(&b, "_", 1);
            mput(&b, v, vl);
        }
    }
    if (cap > 0) buf[b.n < cap ? b.n : cap - 1] = '\0';
    *len = b.n;
    return dynamic;
}
