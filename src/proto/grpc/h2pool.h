/*
 * h2pool.h -- nghttp2's allocations for one connection through a small
 * cache of freed blocks (grpc.c hands sl_h2pool_mem to its session).
 *
 * A call makes and frees ~10 small blocks inside nghttp2 (its stream, the
 * answer's frames and header copies); through malloc that was ~2k
 * instructions of ~18k a call (callgrind, bench/grpc.sh).  Freed blocks of
 * up to SL_H2POOL_MAX bytes wait in a free list per size class for the
 * connection's next calls, at most SL_H2POOL_KEEP bytes of them (the
 * memory a busy connection holds beyond what it uses); larger blocks and
 * blocks beyond that bound go to malloc and free.  One connection's, so
 * one thread's: no lock.
 */
#ifndef SL_H2POOL_H
#define SL_H2POOL_H

#include <stddef.h>

#include <nghttp2/nghttp2.h>

#define SL_H2POOL_CLASSES 6 /* 64, 128, ... 2048 bytes */
#define SL_H2POOL_MAX     (64 << (SL_H2POOL_CLASSES - 1))
#define SL_H2POOL_KEEP    (32 * 1024) /* bytes of freed blocks kept */

typedef struct sl_h2pool {
    void *free[SL_H2POOL_CLASSES]; /* freed blocks by class, linked through
                                      their first word */
    size_t kept;                   /* bytes of the blocks in free[] */
} sl_h2pool;

/* The allocator nghttp2_session_server_new3 takes, drawing on p (which
 * must outlive the session). */
nghttp2_mem sl_h2pool_mem(sl_h2pool *p);

/* Frees the blocks p keeps; call after the session using p was deleted. */
void sl_h2pool_drain(sl_h2pool *p);

#endif
