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

#endif
