/*
 * reclaim.h -- freeing memory that threads may still be reading (internal).
 *
 * The quick decision path (sl__store_grab) reads a shard's table, page
 * directory and pages without the shard lock, while the lock's holder may
 * replace the table (growth), the directory (growth) or free a page.  What
 * was replaced is not freed at once but retired: freed once every thread
 * that was reading when it was retired has stopped (read-copy-update).
 *
 * This is liburcu's "bulletproof" flavour (urcu-bp), the one meant for
 * libraries: any thread may read without registering first.  Its read-side
 * critical section is two stores to a thread-local word (about 2 ns;
 * Linux's membarrier(2) moves the fences to the side that frees), and a
 * retired block is freed by liburcu's call_rcu thread.
 *
 * ThreadSanitizer cannot see the order membarrier gives, so under TSan the
 * end of each read and each deferred free are annotated as a release and an
 * acquire on one address: the grace period is what makes that true.
 */
#ifndef SL_RECLAIM_H
#define SL_RECLAIM_H

/* liburcu's read side inline, not a call -- except under UBSan
 * (SL_RCU_CALLS, set by the Makefile's asan build): liburcu declares its
 * per-thread reader 128-byte aligned but hands out readers at 32-byte
 * offsets, which UBSan reports wherever the inline code lands. */
#if !defined(_LGPL_SOURCE) && !defined(SL_RCU_CALLS)
#define _LGPL_SOURCE
#endif
#include <urcu-bp.h>

#if defined(__SANITIZE_THREAD__)
#define SL__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SL__TSAN 1
#endif
#endif

#ifdef SL__TSAN
void __tsan_release(void *addr);
extern char sl__reclaim_sync;
#endif

/* Starts a read-side critical section: until sl__read_end, nothing the
 * thread can reach through the store's published pointers is freed.  May
 * nest.  Must not block. */
static inline void sl__read_begin(void)
{
    urcu_bp_read_lock();
}

static inline void sl__read_end(void)
{
#ifdef SL__TSAN
    __tsan_release(&sl__reclaim_sync);
#endif
    urcu_bp_read_unlock();
}

/* Frees block (from malloc) once no critical section that began before
 * this call is still running.  Does not wait, unless out of memory (then
 * it waits for that point and frees at once).  NULL is ignored. */
void sl__retire(void *block);

/* Waits until every critical section that began before this call has
 * ended (a grace period: ~1 us to a few us, readers' sections being a
 * table walk), after which whatever was unpublished before the call may be
 * freed by the caller.  The store frees its own retired blocks this way
 * (store.c, "limbo"), so that the memory they hold is counted and bounded.
 * Must not be called inside a critical section. */
void sl__reclaim_wait(void);

#endif
