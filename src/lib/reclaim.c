/*
 * reclaim.c -- retiring blocks until no reader can see them (reclaim.h).
 */
#include "reclaim.h"

#include <stdlib.h>

#ifdef SL__TSAN
void __tsan_acquire(void *addr);
char sl__reclaim_sync;
#endif

typedef struct retired {
    struct rcu_head head; /* first: the callback gets its address */
    void *block;
} retired;

/* A grace period has passed: for TSan, everything readers and the
 * retiring thread did before it happens before what follows. */
static inline void after_grace(void)
{
#ifdef SL__TSAN
    __tsan_acquire(&sl__reclaim_sync);
#endif
}

static void retired_free(struct rcu_head *head)
{
    after_grace(); /* before reading the node, which the retiring thread wrote */
    retired *r = (retired *)(void *)head;
    free(r->block);
    free(r);
}

void sl__retire(void *block)
{
    if (block == NULL) return;
    retired *r = malloc(sizeof *r);
    if (r == NULL) { /* no node for the queue: wait out the readers here */
        urcu_bp_synchronize_rcu();
        after_grace();
        free(block);
        return;
    }
    r->block = block;
#ifdef SL__TSAN
    /* liburcu's queue is not instrumented: what this thread did to the
     * block and the node happens before the free */
    __tsan_release(&sl__reclaim_sync);
#endif
    urcu_bp_call_rcu(&r->head, retired_free);
}

void sl__reclaim_wait(void)
{
    urcu_bp_synchronize_rcu();
    after_grace();
}
