/* fs_pairs.c - each thread's cache of merged node pairs (fs_pairs.h). */
#include "fs_pairs.h"

#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_status.h"

typedef struct {
    fs_pair_key key;
    uint64_t epoch;            /* fs_pairs_forget_index's count when merged */
    int used;
} pair_slot;

/* One block, made with the thread's workspace: a call never allocates
 * here, so a match that runs out of memory fails where it always did (the
 * workspace), never silently in the cache.  The ids' pages are touched
 * only where a slot is used. */
struct fs_pairs {
    pair_slot slot[FS_PAIRS_SLOTS];
    int64_t ids[FS_PAIRS_SLOTS][FS_PAIRS_MAX_IDS];
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

/* The thread's cache, made with its workspace (fs_pairs_make_mine). */
static FS_THREAD_LOCAL fs_pairs *pairs_mine;

static int key_eq(const fs_pair_key *x, const fs_pair_key *y)
{
    return x->index == y->index && x->generation == y->generation && x->a == y->a && x->b == y->b &&
           x->na == y->na && x->nb == y->nb;
}

static size_t slot_of(const fs_pair_key *k)
{
    uint64_t h = k->place * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> (64 - FS_PAIRS_SLOT_BITS));   /* the top bits: a slot */
}

int fs_pairs_make_mine(void)
{
    if (pairs_mine)
        return FS_OK;
    fs_pairs *p = FS_MALLOC(sizeof(fs_pairs));
    if (!p)
        return FS_ENOMEM;
    memset(p->slot, 0, sizeof(p->slot));
    pairs_mine = p;
    return FS_OK;
}

int64_t *fs_pairs_find(const fs_pair_key *key, int *fresh)
{
    fs_pairs *p = pairs_mine;
    if (FS_UNLIKELY(p == NULL) || key->na + key->nb > FS_PAIRS_MAX_IDS)
        return NULL;
    uint64_t epoch = atomic_load_explicit(&freed_epoch, memory_order_relaxed);
    size_t k = slot_of(key);
    pair_slot *s = &p->slot[k];
    if (s->used && s->epoch == epoch && key_eq(&s->key, key)) {
        *fresh = 0;
        return p->ids[k];
    }
    s->key = *key;
    s->epoch = epoch;
    s->used = 1;
    *fresh = 1;
    return p->ids[k];
}

void fs_pairs_free_mine(void)
{
    fs_pairs *p = pairs_mine;
    if (!p)
        return;
    pairs_mine = NULL;
    FS_FREE(p);
}

#else   /* no thread-local copy (fs_sys.h): no cache; every row merges */

int fs_pairs_make_mine(void) { return FS_OK; }

int64_t *fs_pairs_find(const fs_pair_key *key, int *fresh)
{
    (void)key;
    *fresh = 0;
    return NULL;
}

void fs_pairs_free_mine(void) {}

#endif
