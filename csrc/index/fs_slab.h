/* fs_slab.h - an index's nodes and table entries, carved from chunks.
 *
 * Why: every subscription's table entry (and every trie node) was its own
 * malloc -- ~200 of insert_many's ~1,600 instructions per filter, plus
 * malloc's header on each 40-70 byte block.  A node's size is a multiple of
 * 8 (fs_node plus its token padded to whole words), so blocks up to
 * FS_SLAB_MAX_BYTES come from one free list per 8-byte size, refilled from
 * chunks that double from FS_SLAB_FIRST_CHUNK (a small index stays small)
 * to FS_SLAB_LAST_CHUNK bytes; bigger blocks go to FS_MALLOC.  A freed
 * block goes back on its size's list, so memory freed by removals is
 * reused by later inserts of the index but returned to the system only
 * when the index is freed (fs_slab_destroy).
 *
 * Not thread-safe: an index allocates nodes only under its write lock (or
 * while it is being built, before anyone else sees it).  Chunks come from
 * FS_MALLOC, and every block counts as an allocation attempt of fault
 * injection (fs_alloc_should_fail), so a walk fails each node's
 * allocation as it did when each was a malloc; under AddressSanitizer free
 * blocks and unused chunk tails are poisoned, so a use after free inside
 * the slab is still reported.
 */
#ifndef FS_SLAB_H
#define FS_SLAB_H

#include <stddef.h>

#define FS_SLAB_MAX_BYTES 256
#define FS_SLAB_FIRST_CHUNK 1024
#define FS_SLAB_LAST_CHUNK (64 * 1024)

typedef struct fs_slab_chunk fs_slab_chunk;

typedef struct {
    void *free[FS_SLAB_MAX_BYTES / 8];   /* by size / 8 - 1: freed blocks, linked
                                          * through their first word */
    char *bump, *end;                     /* the newest chunk's unused tail */
    fs_slab_chunk *chunks;                /* every chunk, newest first */
    size_t next_chunk;                    /* bytes of the next chunk */
} fs_slab;

/* A block of size bytes (a multiple of 8, at least 8), 8-byte aligned;
 * NULL when out of memory. */
void *fs_slab_alloc(fs_slab *s, size_t size);
/* Give back a block from fs_slab_alloc(s, size) (p may be NULL). */
void fs_slab_free(fs_slab *s, void *p, size_t size);
/* Free every chunk (blocks still out included) and empty s. */
void fs_slab_destroy(fs_slab *s);

#endif
