/*
 * h2pool.c -- a per-connection cache of nghttp2's small blocks (h2pool.h).
 *
 * Every block carries a 16-byte header before what nghttp2 sees: its size
 * class, or SL_H2POOL_CLASSES for a block of malloc's own (larger than
 * SL_H2POOL_MAX), with its size for realloc.  A kept block is linked
 * through its payload's first word.
 */
#include <stdlib.h>
#include <string.h>

#include "h2pool.h"

typedef struct hdr {
    size_t cls;  /* size class, or SL_H2POOL_CLASSES: malloc's own */
    size_t size; /* bytes nghttp2 may use */
} hdr;

#define HDR 16 /* sizeof (hdr) rounded to malloc's alignment */
_Static_assert(sizeof(hdr) <= HDR, "a block's header fits its room");

static size_t class_size(size_t cls) { return (size_t)64 << cls; }

static void *pool_malloc(size_t n, void *arg)
{
    sl_h2pool *p = arg;
    size_t cls = 0;
    while (cls < SL_H2POOL_CLASSES && class_size(cls) < n) cls++;
    if (cls < SL_H2POOL_CLASSES && p->free[cls] != NULL) {
        void *b = p->free[cls];
        memcpy(&p->free[cls], b, sizeof(void *));
        p->kept -= class_size(cls);
        return b;
    }
    size_t size = cls < SL_H2POOL_CLASSES ? class_size(cls) : n;
    if (size > SIZE_MAX - HDR) return NULL;
    unsigned char *m = malloc(HDR + size);
    if (m == NULL) return NULL;
    *(hdr *)m = (hdr){cls, size};
    return m + HDR;
}

static hdr *head(void *b) { return (hdr *)((unsigned char *)b - HDR); }

static void pool_free(void *b, void *arg)
{
    sl_h2pool *p = arg;
    if (b == NULL) return;
    hdr *h = head(b);
    if (h->cls < SL_H2POOL_CLASSES && p->kept + h->size <= SL_H2POOL_KEEP) {
        memcpy(b, &p->free[h->cls], sizeof(void *));
        p->free[h->cls] = b;
        p->kept += h->size;
        return;
    }
    free(h);
}

static void *pool_calloc(size_t k, size_t n, void *arg)
{
    if (n != 0 && k > SIZE_MAX / n) return NULL;
    void *b = pool_malloc(k * n, arg);
    if (b != NULL) memset(b, 0, k * n);
    return b;
}

static void *pool_realloc(void *b, size_t n, void *arg)
{
    if (b == NULL) return pool_malloc(n, arg);
    if (n == 0) { /* realloc(p, 0) frees (nghttp2 never asks it) */
        pool_free(b, arg);
        return NULL;
    }
    hdr *h = head(b);
    if (n <= h->size) return b;
    void *r = pool_malloc(n, arg);
    if (r == NULL) return NULL;
    memcpy(r, b, h->size);
    pool_free(b, arg);
    return r;
}

nghttp2_mem sl_h2pool_mem(sl_h2pool *p)
{
    return (nghttp2_mem){p, pool_malloc, pool_free, pool_calloc, pool_realloc};
}

void sl_h2pool_drain(sl_h2pool *p)
{
    for (size_t c = 0; c < SL_H2POOL_CLASSES; c++) {
        while (p->free[c] != NULL) {
            void *b = p->free[c];
            memcpy(&p->free[c], b, sizeof(void *));
            free(head(b));
        }
    }
    p->kept = 0;
}
