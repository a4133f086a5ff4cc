/* fs_pool.h - the process's pool of worker threads, which outlives the
 * batches that use it.
 *
 *   pool:  mu, work (cond), idle count, threads (a list, never joined)
 *          queue --> task --> task --> NULL     (oldest first)
 *   task:  fn(arg, index) for index = 0 .. want-1, each on some worker;
 *          given = indexes handed out so far, done = of those, returned
 *
 * A batch used to start its threads and join them (~50-100 us, and a
 * thread's start-up page faults, per batch).  Now a batch posts a task
 * asking for n workers; idle workers take its indexes one by one and run
 * fn; a worker that finds no task parks on a condition variable and uses
 * no CPU.  The pool grows when a task asks for more workers than are idle
 * (the first batch at a thread count, or batches running side by side)
 * and never shrinks: after the first batch, a batch creates no thread.
 *
 * The task's owner ends it with fs_pool_join, which takes back the
 * indexes not handed out yet (the work may be done before every worker
 * came) and waits for the fn calls that did start to return.  fn must
 * not wait for another index of its task to start (a task may run on one
 * worker only), and may itself tell the owner that the work is done (the
 * owner's own condition variable), before returning.
 *
 * Fork: the fork registry (fs_fork.h) holds the pool's mutex across fork(); the
 * child starts with an empty pool (its parent's workers do not exist
 * there) and grows its own on its first batch.
 *
 * All memory (a record per thread) comes from FS_MALLOC, so fault
 * injection covers it. */
#ifndef FS_POOL_H
#define FS_POOL_H

#include "fs_sys.h"

/* Never more workers than this, whatever the tasks ask for. */
#define FS_POOL_MAX_THREADS 256

typedef struct fs_pool_task fs_pool_task;
struct fs_pool_task {
    void (*fn)(void *arg, unsigned index);
    void *arg;
    unsigned want, given, done;   /* under the pool's mutex */
    fs_pool_task *next;        /* the queue: the pool's */
};

/* Post t (fn, arg set) for want workers (>= 1), starting threads so that
 * enough are idle if it can.  t must stay where it is until
 * fs_pool_join.  FS_OK; FS_ENOMEM (t not posted) when a new thread's
 * record could not be allocated, or the pool has no thread at all and the
 * system would start none.  With fewer threads than asked (the system's
 * limit, or FS_POOL_MAX_THREADS), t runs on what there is. */
int fs_pool_submit(fs_pool_task *t, unsigned want);

/* End t: the indexes not handed out yet never run; wait for those that
 * were to return.  Returns how many were handed out.  t may be freed
 * then. */
unsigned fs_pool_join(fs_pool_task *t);

/* Threads in the pool now, and how many of them are idle (tests). */
void fs_pool_status(unsigned *threads, unsigned *idle);


#endif
