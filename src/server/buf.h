/*
 * buf.h -- a growable byte buffer: replies being built, batches of them.
 */
#ifndef SL_BUF_H
#define SL_BUF_H

#include <stddef.h>

/* Owned by whoever holds it; free with free(b->p).  {0} is empty. */
typedef struct sl_buf {
    char *p;
    size_t len, cap;
} sl_buf;

/* Appends n bytes; returns 0 or -1 (out of memory: b unchanged).
 * Amortised O(n): the capacity doubles. */
int sl_buf_add(sl_buf *b, const void *data, size_t n);

/* Appends a NUL-terminated string. */
int sl_buf_adds(sl_buf *b, const char *s);

/* Makes room for n more bytes (grown as sl_buf_add grows it); returns 0 or
 * -1 (out of memory: b unchanged).  For a writer that then writes up to n
 * bytes at b->p + b->len itself and adds what it wrote to b->len: one
 * capacity check for a whole reply, not one a piece. */
int sl__buf_grow(sl_buf *b, size_t n);
static inline int sl_buf_reserve(sl_buf *b, size_t n)
{
    return b->cap - b->len >= n ? 0 : sl__buf_grow(b, n);
}

#endif
