/* fs_alloc.c - allocation with optional fault injection (see fs_alloc.h). */
#include "fs_alloc.h"

#include <stdlib.h>

#include "fs_bits.h"

static uint64_t fail_at;      /* 0: injection off; else the attempt number to fail */
static uint64_t attempts;     /* allocation attempts since fs_fault_inject() */
static uint64_t injected;     /* failures injected since fs_fault_inject() */

static int should_fail(void)
{
    if (FS_LIKELY(fail_at == 0))
        return 0;
    if (++attempts == fail_at) {
        injected++;
        return 1;
    }
    return 0;
}

void *fs_malloc(size_t size)
{
    if (should_fail())
        return NULL;
    return malloc(size ? size : 1);
}

void *fs_realloc(void *ptr, size_t size)
{
    if (should_fail())
        return NULL;
    return realloc(ptr, size ? size : 1);
}

void fs_free(void *ptr) { free(ptr); }

void fs_fault_inject(uint64_t nth)
{
    fail_at = nth;
    attempts = 0;
    injected = 0;
}

uint64_t fs_fault_injected(void) { return injected; }
uint64_t fs_fault_counted(void) { return attempts; }
