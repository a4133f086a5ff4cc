/* fs_fork.h - the fork registry (fs_fork.c): a child of fork() may use
 * every lock of the core, because the registry's handlers take each
 * registered lock before fork() and make it usable again on both sides.
 *
 * It knows no topicmatch type: whatever holds a lock registers an entry with
 * three callbacks (take it; release it in the parent; make it usable in
 * the child, where the threads that held or awaited it do not exist).
 *
 *   objects (an index's lock)   fs_fork_track / fs_fork_untrack, for the
 *                               object's life; taken oldest first
 *   process-wide locks          fs_fork_register_once, for good; taken
 *                               after every object's, by ascending order
 *
 * The parent releases them in the reverse order, and the child's callbacks
 * run in the reverse order too. */
#ifndef FS_FORK_H
#define FS_FORK_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct fs_fork_entry {
    void (*prepare)(void *arg);   /* take the lock (before fork) */
    void (*parent)(void *arg);    /* release it (in the parent, after) */
    void (*child)(void *arg);     /* make it usable (in the child) */
    void *arg;
    int order;                    /* process-wide locks: taken in ascending order */
    uint64_t seq;                 /* objects: when tracked (fs_fork_track), ascending: the
                                   * prepare handler takes their locks in this order, so a
                                   * caller holding two takes them in it too */
    struct fs_fork_entry *prev, *next;   /* the registry's (its mutex held) */
    _Atomic int done;             /* process-wide: initialised (fs_fork_register_once) */
    int rc;                       /* and its registration's status */
} fs_fork_entry;

/* 1 when the fork handlers are registered (done once, on first call), else
 * 0 (registering them failed: only for want of memory). */
int fs_fork_ready(void);
/* An object's lock, until fs_fork_untrack (before the lock is destroyed).
 * FS_OK, or FS_ENOMEM when the handlers could not be registered.  Its
 * callers must not hold a registered lock: the handlers, holding the
 * registry, wait for every lock. */
int fs_fork_track(fs_fork_entry *e);
void fs_fork_untrack(fs_fork_entry *e);
/* A process-wide lock: the first call runs init (which creates the lock)
 * and registers e for the rest of the process (e lives as long), both
 * under the mutex the handlers take before any process-wide lock, so that
 * a fork() waits for an init in progress; later calls return at once.  Use
 * it instead of a once-flag for the lock's module.  May be called with an
 * object's lock held (process-wide locks are taken after every object's).
 * FS_OK, or FS_ENOMEM when the handlers could not be registered (init has
 * run; e is not registered). */
int fs_fork_register_once(fs_fork_entry *e, void (*init)(void));

#endif
