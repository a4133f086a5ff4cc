/* fs_pairs.c - each thread's cache of merged node pairs (fs_pairs.h). */
#include "fs_pairs.h"

#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_match.h"

typedef struct {
    fs_pair_key key;
    uint64_t epoch;            /* fs_pairs_forget_index's count when merged */
    int64_t *ids;
    size_t cap;
    int used;
} pair_slot;

struct fs_pairs {
    pair_slot slot[FS_PAIRS_SLOTS];
};

/* Bumped when an index is freed: entries merged before it are stale. */
static atomic_uint_fast64_t freed_epoch;

void fs_pairs_forget_index(void)
{
    /* relaxed: whoever matches an index made after this free got its
     * pointer through some synchronisation after the free, so it reads
     * this count or a later one */
    atomic_fetch_add_explicit(&freed_epoch, 1, memory_order_relaxed);
}

#if FS_TLS_COPY_OK

/* The thread's cache, made on its first use: freed by fs_pairs_free_mine. */
static FS_THREAD_LOCAL fs_pairs *pairs_mine;

static int key_eq(const fs_pair_key *x, const fs_pair_key *y)
{
    return x->index == y->index && x->generation == y->generation && x->a == y->a && x->b == y->b &&
           x->na == y->na && x->nb == y->nb;
}

static size_t slot_of(const fs_pair_key *k)
{
    uint64_t h = ((uint64_t)(uintptr_t)k->a ^ ((uint64_t)(uintptr_t)k->b >> 4)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 58) & (FS_PAIRS_SLOTS - 1);   /* the top six bits: 64 slots */
}

int64_t *fs_pairs_find(const fs_pair_key *key, int *fresh)
{
    size_t n = key->na + key->nb;
    fs_pairs *p = pairs_mine;
    if (FS_UNLIKELY(p == NULL)) {
        /* only a thread with a workspace, whose destructor frees this */
        if (fs_workspace_mine == NULL || n > FS_PAIRS_MAX_IDS || !(p = FS_MALLOC(sizeof(fs_pairs))))
            return NULL;
        memset(p, 0, sizeof(*p));
        pairs_mine = p;
    }
    uint64_t epoch = atomic_load_explicit(&freed_epoch, memory_order_relaxed);
    pair_slot *s = &p->slot[slot_of(key)];
    if (s->used && s->epoch == epoch && key_eq(&s->key, key)) {
        *fresh = 0;
        return s->ids;
    }
    if (n > FS_PAIRS_MAX_IDS)
        return NULL;
    if (n > s->cap) {
        int64_t *ids = FS_MALLOC(sizeof(int64_t) * n);
        if (!ids)
            return NULL;
        FS_FREE(s->ids);
        s->ids = ids;
        s->cap = n;
    }
    s->key = *key;
    s->epoch = epoch;
    s->used = 1;
    *fresh = 1;
    return s->ids;
}

void fs_pairs_free_mine(void)
{
    fs_pairs *p = pairs_mine;
    if (!p)
        return;
    pairs_mine = NULL;
    for (size_t k = 0; k < FS_PAIRS_SLOTS; k++)
        FS_FREE(p->slot[k].ids);
    FS_FREE(p);
}

#else   /* no thread-local copy (fs_sys.h): no cache; every row merges */

int64_t *fs_pairs_find(const fs_pair_key *key, int *fresh)
{
    (void)key;
    *fresh = 0;
    return NULL;
}

void fs_pairs_free_mine(void) {}

#endif
