/* fs_tuning.h - the core's settings and counters for tests and
 * measurements, by name: what a test shrinks so that a small batch takes
 * the threaded path, turns off to compare two forms of one step, or
 * counts to show that a path was taken.  None is for production use:
 * each is process-wide, and is set while no other thread calls the core.
 * The one table of them, with what each means, is fs_tuning.c's; the
 * binding reaches them by name (topicmatch._tuning), so that a new one is
 * a row there, not a function in each layer above. */
#ifndef FS_TUNING_H
#define FS_TUNING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fs_match.h"

/* How the binding's match() makes its first call into the index
 * (fs_sublist_match_small's how): FS_MATCH_NO_WAIT, or, for tests,
 * FS_MATCH_CACHE_ONLY (every walk then made in the second call). */
extern fs_match_how fs_match_first_how;

/* The batch thread policy's constants (fs_column.c), 0 for their
 * defaults: tests shrink them so that small batches take the threaded
 * path's every turn. */
typedef struct {
    size_t min_rows_per_thread;   /* FS_COLUMN_CHUNK_ROWS */
    size_t block_rows;            /* the threads' blocks: sized as the batch runs */
    unsigned cpus;                /* the processors this process may run on (fs_cpus) */
    size_t feed_rows;             /* FS_COLUMN_FEED_ROWS */
} fs_column_policy;
extern fs_column_policy fs_column_tuned;

/* FS_VERIFY_FULL's check of an image (fs_image_open) runs on threads for
 * images of this many bytes and more (16 MiB; tests set it lower): below
 * it, the threads' hand-over would cost more than they gain. */
extern size_t fs_image_parallel_min;

/* save() and to_bytes() of a built index write a keyed table of this
 * many entries or more (131,072) on threads (the process's,
 * fs_index_threads), and make the image's pages ready on a thread beside
 * sorting the largest table, where one is that large (fs_image_write.c;
 * tests set it lower, so that a small index takes that path).  0: never. */
extern size_t fs_image_write_par_entries;
/* How many tables were written so (a counter: tests show the path taken;
 * atomic, as two threads may each save an index at once). */
extern atomic_uint_least64_t fs_image_write_threaded;

/* The room the binding's to_bytes() writes an image into, in bytes;
 * -1: fs_image_size_hint's (tests make it too small). */
extern int64_t fs_image_room;

/* name's current value into *value: FS_OK, or FS_EINVAL where no setting
 * or counter has that name. */
int fs_tuning_get(const char *name, int64_t *value);
/* Set name to value: FS_OK, or FS_EINVAL where no setting has that name
 * (a counter's is one), or value is outside its range. */
int fs_tuning_set(const char *name, int64_t value);

#endif
