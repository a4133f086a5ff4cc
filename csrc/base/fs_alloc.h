/* fs_alloc.h - the one door for memory.
 *
 * Every allocation of the C core goes through FS_MALLOC / FS_CALLOC /
 * FS_REALLOC / FS_FREE, so that a test can make the N-th allocation fail
 * (fault injection) and check that the operation reports FS_ENOMEM, leaks
 * nothing and leaves the index unchanged.  The countdown is process-global and
 * atomic, so a walk also covers a batch's threads (whichever thread makes
 * the n-th allocation gets the failure); when it is off (the default) the
 * cost is one well-predicted branch per allocation.
 */
#ifndef FS_ALLOC_H
#define FS_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *fs_malloc(size_t size);
/* n * size bytes of zeros (NULL when n * size overflows). */
void *fs_calloc(size_t n, size_t size);
void *fs_realloc(void *ptr, size_t size);
void fs_free(void *ptr);

/* 1 when fault injection fails this allocation attempt.  For allocators
 * built on these (fs_slab.c): each of their allocations counts as an
 * attempt, as if it were a malloc, so a walk still reaches them. */
int fs_alloc_should_fail(void);

#define FS_MALLOC(size) fs_malloc(size)
#define FS_CALLOC(n, size) fs_calloc((n), (size))
#define FS_REALLOC(ptr, size) fs_realloc((ptr), (size))
#define FS_FREE(ptr) fs_free(ptr)

/* Fault injection.  fs_fault_inject(n) with n >= 1 makes the n-th allocation
 * from now fail (and only that one); n = 0 turns injection off.
 * fs_fault_injected() returns how many allocations were failed since the
 * last fs_fault_inject() call, and fs_fault_counted() how many allocations
 * were attempted since then (so a test can walk n over all of them). */
void fs_fault_inject(uint64_t nth);
uint64_t fs_fault_injected(void);
uint64_t fs_fault_counted(void);

#endif
