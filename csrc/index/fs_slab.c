/* fs_slab.c - size-class blocks carved from chunks (see fs_slab.h). */
#include "fs_slab.h"

#include <stdint.h>
#include <string.h>

#include "fs_alloc.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct fs_slab_chunk {
    fs_slab_chunk *next;
    size_t bytes;                  /* of blocks, after this header */
};

/* The header is a multiple of 8 bytes, so blocks stay 8-byte aligned. */
_Static_assert(sizeof(fs_slab_chunk) % 8 == 0, "chunk header keeps blocks aligned");

static void push_free(fs_slab *s, void *p, size_t size)
{
    void **head = &s->free[size / 8 - 1];
    *(void **)p = *head;
    *head = p;
    POISON(p, size);
}

/* Start a new chunk that holds at least size bytes; the old chunk's tail
 * goes on the free list of its size, so no byte is lost. */
static int new_chunk(fs_slab *s, size_t size)
{
    size_t bytes = s->next_chunk ? s->next_chunk : FS_SLAB_FIRST_CHUNK;
    while (bytes < size)
        bytes *= 2;
    fs_slab_chunk *c = FS_MALLOC(sizeof(fs_slab_chunk) + bytes);
    if (!c)
        return -1;
    size_t tail = (size_t)(s->end - s->bump);
    if (tail >= 8) {
        UNPOISON(s->bump, tail);
        push_free(s, s->bump, tail);
    }
    c->next = s->chunks;
    c->bytes = bytes;
    s->chunks = c;
    s->bump = (char *)(c + 1);
    s->end = s->bump + bytes;
    POISON(s->bump, bytes);
    if (bytes < FS_SLAB_LAST_CHUNK)
        s->next_chunk = bytes * 2;
    return 0;
}

void *fs_slab_alloc(fs_slab *s, size_t size)
{
    if (size > FS_SLAB_MAX_BYTES)
        return FS_MALLOC(size);
    if (fs_alloc_should_fail())
        return NULL;
    void **head = &s->free[size / 8 - 1];
    void *p = *head;
    if (p) {
        UNPOISON(p, size);
        *head = *(void **)p;
        return p;
    }
    if ((size_t)(s->end - s->bump) < size && new_chunk(s, size) != 0)
        return NULL;
    p = s->bump;
    s->bump += size;
    UNPOISON(p, size);
    return p;
}

void fs_slab_free(fs_slab *s, void *p, size_t size)
{
    if (!p)
        return;
    if (size > FS_SLAB_MAX_BYTES)
        FS_FREE(p);
    else
        push_free(s, p, size);
}

void fs_slab_destroy(fs_slab *s)
{
    for (fs_slab_chunk *c = s->chunks, *next; c; c = next) {
        next = c->next;
        UNPOISON(c + 1, c->bytes);
        FS_FREE(c);
    }
    memset(s, 0, sizeof(*s));
}
