/* fs_guard.h - an object's close() against the calls in flight on it: which
 * calls are inside, and whether it is closed (the Python layer's Sublist:
 * close() frees the index at once, after the calls already inside).
 *
 * A call adds one to busy, then reads closed; close() sets closed, then
 * waits for busy to be zero.  Both sequentially consistent (the add before
 * the load, the store before the loads): either the call sees closed and
 * backs out, or close() sees the call and waits for it.  closed: 0 open, 1
 * closing, 2 closed (its memory gone).  The depth (fs_guard_depth): how
 * many guarded calls, on any object, the calling thread is inside, so that
 * a close() from inside one (a __del__ or a signal handler run by such a
 * call) refuses rather than waits for itself.  Everything here is inline,
 * the depth a thread-local of each file that includes this header: only
 * the extension calls the guard, so its count is the one that matters.
 */
#ifndef FS_GUARD_H
#define FS_GUARD_H

#include <stdatomic.h>

#include "fs_sys.h"

typedef struct {
    atomic_uint busy;
    atomic_int closed;
} fs_guard;

static inline unsigned *fs_guard_depth(void)
{
    static FS_THREAD_LOCAL unsigned depth;
    return &depth;
}

/* 0 with the call counted inside, -1 (nothing counted) when g is closed. */
static inline int fs_guard_enter(fs_guard *g)
{
    atomic_fetch_add(&g->busy, 1u);
    if (atomic_load(&g->closed)) {
        atomic_fetch_sub(&g->busy, 1u);
        return -1;
    }
    (*fs_guard_depth())++;
    return 0;
}

static inline void fs_guard_leave(fs_guard *g)
{
    (*fs_guard_depth())--;
    atomic_fetch_sub_explicit(&g->busy, 1u, memory_order_release);
}

/* 1 once close() has begun. */
static inline int fs_guard_closed(fs_guard *g)
{
    return atomic_load_explicit(&g->closed, memory_order_relaxed) != 0;
}

/* 1 when close() may wait for the calls inside: this thread is inside
 * none, or none is inside g. */
static inline int fs_guard_may_wait(fs_guard *g)
{
    return *fs_guard_depth() == 0 || atomic_load(&g->busy) == 0;
}

/* 1 for the one close() that takes g from open to closing, else 0. */
static inline int fs_guard_start_close(fs_guard *g)
{
    int open = 0;
    return atomic_compare_exchange_strong(&g->closed, &open, 1);
}

/* Until no call is inside (the calls in flight finish; new ones back out). */
static inline void fs_guard_wait_idle(fs_guard *g)
{
    for (unsigned spins = 0; atomic_load_explicit(&g->busy, memory_order_acquire); spins++)
        if (spins > 64)
            fs_yield();
}

/* g's memory is gone: a second close() may return. */
static inline void fs_guard_set_closed(fs_guard *g)
{
    atomic_store_explicit(&g->closed, 2, memory_order_release);
}

/* A second close() while the first one frees: until it is done. */
static inline void fs_guard_wait_closed(fs_guard *g)
{
    while (atomic_load_explicit(&g->closed, memory_order_acquire) != 2)
        fs_yield();
}

#endif
