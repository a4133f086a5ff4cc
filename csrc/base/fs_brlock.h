/* fs_brlock.h - the index's lock: a reader/writer lock whose read side
 * writes only the reading thread's own cache line (a "big-reader" lock).
 *
 *   fs_brlock ─┬─ rw        a writer-preferring fs_rwlock: writers hold it
 *              │            for writing; long readers for reading; a fast
 *              │            reader that meets a writer sleeps on it
 *              ├─ writer    1 while a writer holds rw (readers only read it)
 *              └─ stripe[FS_STRIPES]   one cache line per thread stripe
 *                   (fs_sys.h): the stripe's fast readers inside, and the
 *                   index's per-stripe match counts (fs_match.c)
 *
 * Why: an OS reader/writer lock's read acquire and release each write the lock
 * word, one line shared by every reader, so match() from two threads took
 * turns with that line.  Here a fast reader adds one to its stripe's count,
 * then checks `writer`; a writer takes rw, sets `writer`, then waits for
 * every used stripe's count to be zero.  Both orders are sequentially
 * consistent (the reader's add before its load, the writer's store before
 * its loads), so either the reader sees the writer and backs off -- drops
 * its count and sleeps on rw's read side until the writer is done -- or
 * the writer sees the reader and waits for it.
 *
 * Properties kept from the rwlock it replaces:
 *  - writers are preferred: once `writer` is set no new fast reader
 *    enters, and rw (glibc: PREFER_WRITER_NONRECURSIVE) holds new long
 *    readers behind a waiting writer;
 *  - not recursive, for reading either (a second read hold while a writer
 *    waits would wait for that writer, which waits for the first hold);
 *  - fork: fs_fork.c's prepare handler takes every index's write lock,
 *    which waits out every reader; in the child fs_brlock_child_reset
 *    re-creates rw and zeroes the counts (a parent thread may have been
 *    between its add and its back-off at the fork).
 *
 * Fast reads are for bounded work (a match, a batch's ROWS_PER_LOCK rows,
 * stats): a writer spins, then yields, while they finish.  Work that may
 * hold the lock for long (serializing, thawing an image, reverse_match)
 * takes the long read side, on which a writer sleeps. */
#ifndef FS_BRLOCK_H
#define FS_BRLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "fs_bits.h"
#include "fs_sys.h"

/* 128 bytes: the fields lie in one 64-byte line whatever the allocation's
 * alignment (16 at least), and never in a neighbour's. */
typedef struct {
    atomic_uint readers;                            /* fast read holds */
    _Atomic uint64_t matches, fanout_total, fanout_max;
    char pad[128 - 4 * sizeof(uint64_t)];
} fs_stripe;

typedef struct {
    fs_rwlock rw;
    atomic_int writer;
    char pad[64];
    fs_stripe stripe[FS_STRIPES];
} fs_brlock;

/* 0, or -1 when the system is out of resources (rw's init). */
int fs_brlock_init(fs_brlock *l);
void fs_brlock_destroy(fs_brlock *l);
/* Fast read hold (bounded work). */
void fs_brlock_rdlock(fs_brlock *l);
/* The same, but only if no writer holds or waits for the lock: 1 when
 * held, 0 (nothing held) when a writer is there.  For a caller that must
 * not wait while it holds something a writer may need (the GIL). */
int fs_brlock_tryrdlock(fs_brlock *l);
void fs_brlock_rdunlock(fs_brlock *l);
/* The two fast read holds for a caller that keeps the stripe its hold is
 * counted in (match(): its lookup's hit and its match count go to the
 * same stripe, found once a call): the stripe, or NULL from the try when
 * a writer is there (nothing held).  fs_brlock_rdunlock_in(stripe) lets
 * go, inline: it drops the very count the hold added, whichever code
 * computes thread stripes. */
fs_stripe *fs_brlock_rdlock_in(fs_brlock *l);
fs_stripe *fs_brlock_tryrdlock_in(fs_brlock *l);
static inline void fs_brlock_rdunlock_in(fs_stripe *s)
{
    atomic_fetch_sub_explicit(&s->readers, 1, memory_order_release);
}
/* Long read hold (a writer sleeps meanwhile). */
void fs_brlock_rdlock_long(fs_brlock *l);
void fs_brlock_rdunlock_long(fs_brlock *l);
void fs_brlock_wrlock(fs_brlock *l);
void fs_brlock_wrunlock(fs_brlock *l);
/* In a fork child, the prepare handler having held the write lock:
 * unlocked again, with no reader. */
void fs_brlock_child_reset(fs_brlock *l);
/* The calling thread's stripe. */
static inline fs_stripe *fs_brlock_mine(fs_brlock *l) { return &l->stripe[fs_thread_stripe()]; }
/* A stripe's number (fs_sys.h), from its place in l. */
static inline unsigned fs_brlock_stripe_no(const fs_brlock *l, const fs_stripe *s)
{
    return (unsigned)(s - l->stripe);
}

#endif
