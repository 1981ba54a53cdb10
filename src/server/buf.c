/*
 * buf.c -- growable byte buffers (buf.h).
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"

int sl__buf_grow(sl_buf *b, size_t n)
{
    if (b->cap - b->len >= n) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

int sl_buf_add(sl_buf *b, const void *data, size_t n)
{
    if (sl_buf_reserve(b, n) != 0) return -1;
    if (n > 0) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

int sl_buf_adds(sl_buf *b, const char *s) { return sl_buf_add(b, s, strlen(s)); }
