/* fs_fork.c - the core's fork handlers: a child of fork() may use every
 * index, create new ones and run batches, whatever other threads of the
 * parent were doing at the moment of the fork.
 *
 * The danger is a lock copied into the child while a thread that does not
 * exist there holds it: the child then waits for it forever.  Re-creating
 * a lock in the child would be no better: a write in progress would leave
 * the index half-changed.  So the prepare handler waits until no thread is
 * inside any index or the output pool, by taking every lock registered
 * with it (fs_fork.h), in this one order:
 *
 *   1. the registry's mutex (no index is created or freed meanwhile);
 *   2. the objects' locks, oldest first: the write lock of every live
 *      index (registered by the index layer, fs_layout.c).  A thread that
 *      holds two index locks at once (a batch with an also, fs_batch.c)
 *      takes them in this order too (fs_fork_entry.seq), or the handler
 *      could hold the older one while waiting for that thread's newer.  That also waits
 *      out every holder of a cache shard's spin lock, which is only ever
 *      taken with its index's read or write lock held;
 *   3. the process-wide locks' mutex, then those locks by their order:
 *      the output pool's mutex (fs_idbuf.c, order 1), which is taken with
 *      an index lock held, never the other way round; the worker pool's
 *      mutex (fs_pool.c, order 2), which is never held while another lock
 *      is taken, nor taken with one held.
 *
 * The registry names none of them: each registers itself, so it sits in
 * the base layer with no call up to the layers that use it.  A process-wide
 * lock is created and registered in one step under the mutex of step 3
 * (fs_fork_register_once, in place of its module's once-flag), so a fork()
 * waits for a first use in progress instead of copying it half done.
 *
 * The parent releases them in the reverse order.  The child re-creates
 * each index's lock instead of releasing it (fs_brlock_child_reset: its
 * rwlock re-created, its stripes' reader counts zeroed -- a parent thread
 * may have been between a reader's add and its back-off): a glibc rwlock counts the
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
#include "fs_fork.h"

#include "fs_status.h"
#include "fs_sys.h"

static fs_mutex registry_mu;             /* the objects' list */
static fs_fork_entry *objects;           /* newest first */
static uint64_t tracked;                 /* the last object's seq */
static fs_mutex wide_mu;                 /* the process-wide locks' list */
static fs_fork_entry *wide;              /* by ascending order */
static fs_once_flag registry_once = FS_ONCE_INIT;
static int handlers_ok;

static void fork_prepare(void)
{
    fs_mutex_lock(&registry_mu);
    /* Oldest first: the list is newest first, so walk from its tail. */
    fs_fork_entry *tail = objects;
    while (tail && tail->next)
        tail = tail->next;
    for (fs_fork_entry *e = tail; e; e = e->prev)
        e->prepare(e->arg);
    fs_mutex_lock(&wide_mu);
    for (fs_fork_entry *e = wide; e; e = e->next)
        e->prepare(e->arg);
}

/* The reverse order of fork_prepare, calling each entry's `parent` (after)
 * or `child` callback. */
static void fork_release(int child)
{
    fs_fork_entry *last = wide;
    while (last && last->next)
        last = last->next;
    for (fs_fork_entry *e = last; e; e = e->prev)
        (child ? e->child : e->parent)(e->arg);
    fs_mutex_unlock(&wide_mu);
    for (fs_fork_entry *e = objects; e; e = e->next)
        (child ? e->child : e->parent)(e->arg);
    fs_mutex_unlock(&registry_mu);
}

static void fork_after(void) { fork_release(0); }
/* In the child, the only thread. */
static void fork_child(void) { fork_release(1); }

static void registry_init(void)
{
    fs_mutex_init(&registry_mu);
    fs_mutex_init(&wide_mu);
    handlers_ok = fs_atfork(fork_prepare, fork_after, fork_child) == 0;
}

int fs_fork_ready(void)
{
    fs_once(&registry_once, registry_init);
    return handlers_ok;
}

int fs_fork_track(fs_fork_entry *e)
{
    if (!fs_fork_ready())
        return FS_ENOMEM;    /* registering fork handlers fails only for want of memory */
    fs_mutex_lock(&registry_mu);
    e->seq = ++tracked;
    e->prev = NULL;
    e->next = objects;
    if (objects)
        objects->prev = e;
    objects = e;
    fs_mutex_unlock(&registry_mu);
    return FS_OK;
}

void fs_fork_untrack(fs_fork_entry *e)
{
    fs_mutex_lock(&registry_mu);
    if (e->prev)
        e->prev->next = e->next;
    else
        objects = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
    fs_mutex_unlock(&registry_mu);
}

int fs_fork_register_once(fs_fork_entry *e, void (*init)(void))
{
    if (atomic_load_explicit(&e->done, memory_order_acquire))
        return e->rc;
    int ok = fs_fork_ready();          /* wide_mu is initialised either way */
    fs_mutex_lock(&wide_mu);
    if (!atomic_load_explicit(&e->done, memory_order_relaxed)) {
        init();
        if (ok) {
            fs_fork_entry **at = &wide, *before = NULL;
            while (*at && (*at)->order <= e->order) {
                before = *at;
                at = &(*at)->next;
            }
            e->prev = before;
            e->next = *at;
            if (*at)
                (*at)->prev = e;
            *at = e;
        }
        e->rc = ok ? FS_OK : FS_ENOMEM;
        atomic_store_explicit(&e->done, 1, memory_order_release);
    }
    fs_mutex_unlock(&wide_mu);
    return e->rc;
}
