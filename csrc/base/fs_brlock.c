/* fs_brlock.c - the index's big-reader lock (see fs_brlock.h). */
#include "fs_brlock.h"

#include <string.h>

int fs_brlock_init(fs_brlock *l)
{
    memset(l->stripe, 0, sizeof(l->stripe));
    for (unsigned i = 0; i < FS_STRIPES; i++)
        atomic_init(&l->stripe[i].readers, 0);
    atomic_init(&l->writer, 0);
    return fs_rwlock_init(&l->rw);
}

void fs_brlock_destroy(fs_brlock *l) { fs_rwlock_destroy(&l->rw); }

fs_stripe *fs_brlock_tryrdlock_in(fs_brlock *l)
{
    fs_stripe *s = fs_brlock_mine(l);
    atomic_fetch_add_explicit(&s->readers, 1, memory_order_seq_cst);
    if (FS_LIKELY(!atomic_load_explicit(&l->writer, memory_order_seq_cst)))
        return s;
    /* A writer holds rw (it sets `writer` only then): step back. */
    atomic_fetch_sub_explicit(&s->readers, 1, memory_order_release);
    return NULL;
}

int fs_brlock_tryrdlock(fs_brlock *l) { return fs_brlock_tryrdlock_in(l) != NULL; }

fs_stripe *fs_brlock_rdlock_in(fs_brlock *l)
{
    /* Met a writer: sleep on rw's read side until it lets go, then again. */
    fs_stripe *s;
    while (!(s = fs_brlock_tryrdlock_in(l))) {
        fs_rwlock_rdlock(&l->rw);
        fs_rwlock_rdunlock(&l->rw);
    }
    return s;
}

void fs_brlock_rdlock(fs_brlock *l) { (void)fs_brlock_rdlock_in(l); }

void fs_brlock_rdunlock(fs_brlock *l)
{
    atomic_fetch_sub_explicit(&fs_brlock_mine(l)->readers, 1, memory_order_release);
}

void fs_brlock_rdlock_long(fs_brlock *l) { fs_rwlock_rdlock(&l->rw); }
void fs_brlock_rdunlock_long(fs_brlock *l) { fs_rwlock_rdunlock(&l->rw); }

void fs_brlock_wrlock(fs_brlock *l)
{
    fs_rwlock_wrlock(&l->rw);
    atomic_store_explicit(&l->writer, 1, memory_order_seq_cst);
    /* A stripe at or past `used` has never had a reader: a thread's stripe
     * is counted (seq_cst) before its first add, which precedes its load
     * of `writer`, so a reader that missed our store is counted in the
     * `used` we load after it. */
    unsigned used = fs_stripes_used();
    for (unsigned i = 0; i < used; i++) {
        unsigned spins = 0;
        while (atomic_load_explicit(&l->stripe[i].readers, memory_order_seq_cst) != 0) {
            if (++spins < 128)
                fs_cpu_relax();
            else
                fs_yield();
        }
    }
}

void fs_brlock_wrunlock(fs_brlock *l)
{
    atomic_store_explicit(&l->writer, 0, memory_order_release);
    fs_rwlock_wrunlock(&l->rw);
}

void fs_brlock_child_reset(fs_brlock *l)
{
    for (unsigned i = 0; i < FS_STRIPES; i++)
        atomic_store_explicit(&l->stripe[i].readers, 0, memory_order_relaxed);
    atomic_store_explicit(&l->writer, 0, memory_order_relaxed);
    (void)fs_rwlock_init(&l->rw);
}
