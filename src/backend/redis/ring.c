/*
 * ring.c -- the consistent-hash ring (ring.h).
 *
 * The ring is one array of (point, node) sorted by point; a lookup is a
 * binary search for the first point >= the tag's hash, the first point
 * when there is none (the circle wraps).  Two nodes' points that collide
 * (1 in 2^64 a pair) are ordered by the nodes' identities, so the answer
 * never depends on the order of the list.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/ring.h"

typedef struct point {
    uint64_t at;
    int node;
} point;

struct sl_ring {
    int n;
    int npoints;
    point *pts;    /* npoints, sorted by (at, identity) */
    double *share; /* n */
    char **ids;    /* n, copied */
};

uint64_t sl_ring_hash(const void *s, size_t len)
{
    const unsigned char *p = s;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* qsort_r's order: by point, then by the nodes' identities (ids). */
static int by_point(const void *a, const void *b, void *ids)
{
    const point *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    char **id = ids;
    return strcmp(id[x->node], id[y->node]);
}

sl_ring *sl_ring_new(const char *const *ids, int n)
{
    if (n < 1 || n > SL_RING_MAX) return NULL;
    sl_ring *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->n = n;
    r->npoints = n * SL_RING_VNODES;
    r->pts = malloc((size_t)r->npoints * sizeof *r->pts);
    r->share = calloc((size_t)n, sizeof *r->share);
    r->ids = calloc((size_t)n, sizeof *r->ids);
    if (r->pts == NULL || r->share == NULL || r->ids == NULL) goto fail;
    for (int i = 0; i < n; i++) {
        if ((r->ids[i] = strdup(ids[i])) == NULL) goto fail;
        char buf[600];
        for (int v = 0; v < SL_RING_VNODES; v++) {
            int len = snprintf(buf, sizeof buf, "%s#%d", ids[i], v);
            if (len < 0 || (size_t)len >= sizeof buf) goto fail;
            r->pts[i * SL_RING_VNODES + v] = (point){sl_ring_hash(buf, (size_t)len), i};
        }
    }
    qsort_r(r->pts, (size_t)r->npoints, sizeof *r->pts, by_point, r->ids);
    /* a point owns the arc from the point before it (exclusive) to itself;
     * the first point's arc wraps from the last (unsigned difference) */
    for (int k = 0; k < r->npoints; k++) {
        uint64_t prev = r->pts[k == 0 ? r->npoints - 1 : k - 1].at;
        uint64_t arc = r->pts[k].at - prev;
        r->share[r->pts[k].node] += (double)arc / 18446744073709551616.0;
    }
    return r;
fail:
    sl_ring_free(r);
    return NULL;
}

void sl_ring_free(sl_ring *r)
{
    if (r == NULL) return;
    if (r->ids != NULL)
        for (int i = 0; i < r->n; i++) free(r->ids[i]);
    free(r->ids);
    free(r->pts);
    free(r->share);
    free(r);
}

int sl_ring_node(const sl_ring *r, const char *tag, size_t len)
{
    uint64_t h = sl_ring_hash(tag, len);
    int lo = 0, hi = r->npoints; /* the answer is in [lo, hi]; hi = none: wrap */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r->pts[mid].at < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return r->pts[lo == r->npoints ? 0 : lo].node;
}

double sl_ring_share(const sl_ring *r, int node)
{
    return node >= 0 && node < r->n ? r->share[node] : 0;
}

int sl_ring_size(const sl_ring *r) { return r->n; }
