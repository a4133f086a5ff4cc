/* fs_alloc.c - allocation with optional fault injection (see fs_alloc.h). */
#include "fs_alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "fs_bits.h"

/* Atomic: a batch's threads allocate too, and a walk over a threaded
 * match_many must count their attempts exactly (relaxed order is enough:
 * only the counts matter, and the walk reads them after joining). */
static _Atomic uint64_t fail_at;   /* 0: injection off; else the attempt number to fail */
static _Atomic uint64_t attempts;  /* allocation attempts since fs_fault_inject() */
static _Atomic uint64_t injected;  /* failures injected since fs_fault_inject() */

int fs_alloc_should_fail(void)
{
    uint64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (FS_LIKELY(at == 0))
        return 0;
    if (atomic_fetch_add_explicit(&attempts, 1, memory_order_relaxed) + 1 == at) {
        atomic_fetch_add_explicit(&injected, 1, memory_order_relaxed);
        return 1;
    }
    return 0;
}

void *fs_malloc(size_t size)
{
    if (fs_alloc_should_fail())
        return NULL;
    return malloc(size ? size : 1);
}

/* calloc rather than malloc and memset: a large block comes from fresh
 * pages, zeros already, which calloc does not write again. */
void *fs_calloc(size_t n, size_t size)
{
    if (fs_alloc_should_fail())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *fs_realloc(void *ptr, size_t size)
{
    if (fs_alloc_should_fail())
        return NULL;
    return realloc(ptr, size ? size : 1);
}

void fs_free(void *ptr) { free(ptr); }

void fs_fault_inject(uint64_t nth)
{
    atomic_store(&fail_at, 0);
    atomic_store(&attempts, 0);
    atomic_store(&injected, 0);
    atomic_store(&fail_at, nth);
}

uint64_t fs_fault_injected(void) { return atomic_load(&injected); }
uint64_t fs_fault_counted(void) { return atomic_load(&attempts); }
