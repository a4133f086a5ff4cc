/* fs_fork.c - the core's fork handlers: a child of fork() may use every
 * index, create new ones and run batches, whatever other threads of the
 * parent were doing at the moment of the fork.
 *
 * The danger is a lock copied into the child while a thread that does not
 * exist there holds it: the child then waits for it forever.  Re-creating
 * a lock in the child would be no better: a write in progress would leave
 * the index half-changed.  So the prepare handler waits until no thread is
 * inside any index or the output pool, by taking, in this one order:
 *
 *   1. the registry's mutex (no index is created or freed meanwhile);
 *   2. the write lock of every live index, oldest first.  That also waits
 *      out every holder of a cache shard's spin lock, which is only ever
 *      taken with its index's read or write lock held;
 *   3. the output pool's mutex (fs_idbuf.c), which is taken with an index
 *      lock held, never the other way round;
 *   4. the worker pool's mutex (fs_pool.c), which is never held while
 *      another lock is taken, nor taken with one held.
 *
 * The parent releases them in the reverse order.  The child re-creates
 * each index's lock instead of releasing it: a glibc rwlock counts the
 * readers and writers that were waiting for it in the lock word itself (a
 * waiting reader registers before it sleeps, and is handed the lock when
 * the writer leaves), and those threads do not exist in the child, so an
 * unlocked copy would stay read-held forever.  Re-creating it is sound
 * here, as the issue warned it is not in general, because the prepare
 * handler held it for writing: no change to the index was in progress.  One
 * registration covers all three, so their order cannot depend on which was
 * first used (the system runs prepare handlers in the reverse order of
 * registration: two registrations would order the pool's mutex before or
 * after the index locks depending on which came first, and a batch worker
 * holding a read lock while waiting for the pool would deadlock the fork).
 *
 * The worker pool (fs_pool.c) starts empty in the child: the parent's
 * workers do not exist there, and the tasks queued for them belong to
 * batches of the parent's other threads.  The child's first batch starts
 * its own workers.
 *
 * Other per-process state needs no handler: a thread's workspace is
 * reached only through its own thread-specific slot, and the forking
 * thread's own is idle (it is in fork(), not in a match); the others' are
 * unreachable in the child, as their threads are. */
#include "fs_internal.h"

#include "fs_idbuf.h"
#include "fs_pool.h"
#include "fs_sys.h"

static fs_mutex registry_mu;
static fs_sublist *registry_head;        /* newest first */
static fs_once_flag registry_once = FS_ONCE_INIT;
static int handlers_ok;

static void fork_prepare(void)
{
    fs_mutex_lock(&registry_mu);
    /* Oldest first: the list is newest first, so walk from its tail. */
    fs_sublist *tail = registry_head;
    while (tail && tail->fork_next)
        tail = tail->fork_next;
    for (fs_sublist *sl = tail; sl; sl = sl->fork_prev)
        fs_rwlock_wrlock(&sl->lock);
    fs_idpool_fork_prepare();
    fs_pool_fork_prepare();
}

static void fork_after(void)
{
    fs_pool_fork_parent();
    fs_idpool_fork_after();
    for (fs_sublist *sl = registry_head; sl; sl = sl->fork_next)
        fs_rwlock_wrunlock(&sl->lock);
    fs_mutex_unlock(&registry_mu);
}

/* In the child, the only thread: fresh locks, then the pool and registry.
 * (fs_rwlock_init cannot fail here: glibc's allocates nothing.) */
static void fork_child(void)
{
    fs_pool_fork_child();
    fs_idpool_fork_after();
    for (fs_sublist *sl = registry_head; sl; sl = sl->fork_next)
        (void)fs_rwlock_init(&sl->lock);
    fs_mutex_unlock(&registry_mu);
}

static void registry_init(void)
{
    fs_mutex_init(&registry_mu);
    handlers_ok = fs_atfork(fork_prepare, fork_after, fork_child) == 0;
}

int fs_fork_ready(void)
{
    fs_once(&registry_once, registry_init);
    return handlers_ok;
}

int fs_fork_track(fs_sublist *sl)
{
    if (!fs_fork_ready())
        return FS_ENOMEM;    /* registering fork handlers fails only for want of memory */
    fs_mutex_lock(&registry_mu);
    sl->fork_prev = NULL;
    sl->fork_next = registry_head;
    if (registry_head)
        registry_head->fork_prev = sl;
    registry_head = sl;
    fs_mutex_unlock(&registry_mu);
    return FS_OK;
}

void fs_fork_untrack(fs_sublist *sl)
{
    fs_mutex_lock(&registry_mu);
    if (sl->fork_prev)
        sl->fork_prev->fork_next = sl->fork_next;
    else
        registry_head = sl->fork_next;
    if (sl->fork_next)
        sl->fork_next->fork_prev = sl->fork_prev;
    sl->fork_prev = sl->fork_next = NULL;
    fs_mutex_unlock(&registry_mu);
}
