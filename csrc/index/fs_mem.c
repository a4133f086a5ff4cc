/* fs_mem.c - growing arrays, and an index's memory account (see fs_mem.h). */
#include "fs_mem.h"

#include "fs_alloc.h"

int fs_grow_counted(uint64_t *account, void *p, size_t *cap, size_t need, size_t elsize)
{
    if (need <= *cap)
        return FS_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *np = FS_REALLOC(*(void **)p, ncap * elsize);
    if (!np)
        return FS_ENOMEM;
    if (account)
        *account = *account - *cap * elsize + ncap * elsize;
    *(void **)p = np;
    *cap = ncap;
    return FS_OK;
}

void *fs_mem_alloc(uint64_t *account, size_t size)
{
    void *p = FS_MALLOC(size);
    if (p)
        *account += size;
    return p;
}

void *fs_mem_calloc(uint64_t *account, size_t size)
{
    void *p = FS_CALLOC(1, size);
    if (p)
        *account += size;
    return p;
}

void *fs_mem_realloc(uint64_t *account, void *p, size_t old, size_t size)
{
    void *np = FS_REALLOC(p, size);
    if (np)
        *account = *account - old + size;
    return np;
}

void fs_mem_free(uint64_t *account, void *p, size_t size)
{
    if (p) {
        FS_FREE(p);
        *account -= size;
    }
}
