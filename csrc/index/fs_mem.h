/* fs_mem.h - growing arrays, and counting what an index allocates.
 *
 * The bottom of the index's own files: it calls only the one door for
 * memory (fs_alloc.h) and knows no index type, so the tables (fs_table.c),
 * the nodes (fs_node.c), the shapes, the trie and the loader all count
 * their memory here without depending on each other.  An index's account
 * is its sl->mem (memory_bytes in the statistics); fs_layout.h's
 * fs_sl_alloc / fs_sl_realloc / fs_sl_free pass it in.
 */
#ifndef FS_MEM_H
#define FS_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "fs_status.h"

/* fs_grow for an array an index owns: the growth is counted in *account
 * (its sl->mem), as fs_mem_realloc counts. */
int fs_grow_counted(uint64_t *account, void *p, size_t *cap, size_t need, size_t elsize);
/* Grow the array *p (of elsize-byte items, capacity *cap) to hold need:
 * capacities double from 8.  FS_OK (also when it already holds need), or
 * FS_ENOMEM with *p and *cap unchanged.  Inline: nearly every call finds
 * the room there (a match() builds its result in a warm workspace), and
 * the test costs less than the call. */
static inline int fs_grow(void *p, size_t *cap, size_t need, size_t elsize)
{
    return need <= *cap ? FS_OK : fs_grow_counted(NULL, p, cap, need, elsize);
}

/* size bytes (FS_MALLOC) counted in *account; NULL when out of memory
 * (nothing counted). */
void *fs_mem_alloc(uint64_t *account, size_t size);
/* fs_mem_alloc of size bytes of zeros (FS_CALLOC: fresh pages from the
 * system are not written again). */
void *fs_mem_calloc(uint64_t *account, size_t size);
/* p (counted as old bytes) resized to size (FS_REALLOC); NULL when out of
 * memory (p and the account unchanged). */
void *fs_mem_realloc(uint64_t *account, void *p, size_t old, size_t size);
/* Free p (counted as size bytes; p may be NULL: nothing done).  Never fails. */
void fs_mem_free(uint64_t *account, void *p, size_t size);

#endif
