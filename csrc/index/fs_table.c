/* fs_table.c - the open-addressing hash table every part of the index
 * uses: a trie level's literal children, the literal table, each shape's
 * table (fs_layout.h has the layout).  Linear probing, power-of-two
 * capacities, grown past 3/4 full (shape tables: 1/2), shrunk below 1/8.
 * Keyed tables (the literal table, shape tables) also keep a bitmap of
 * their keys (fs_level.filter).  Memory is counted through fs_mem.h; the
 * tables call nothing else of the index. */
#include "fs_table.h"

#include <assert.h>
#include <string.h>

#include "fs_layout.h"

/* Put e in the first free slot of its probe sequence (the one probe
 * sequence of every table, built or mapped: the image writer places its
 * entries with it too). */
void fs_slot_place(fs_slot *slots, uint32_t cap, fs_slot e)
{
    uint32_t i = fs_probe(slots, cap, e.hash, fs_stop_never, NULL);
    assert(i < cap);                /* the caller made room */
    slots[i] = e;
}

static uint32_t max_load(uint32_t cap)
{
    return cap <= 4 ? cap : cap / 4 * 3;
}

uint32_t fs_table_cap(uint32_t count, int half_full)
{
    uint32_t cap = 0;
    while (count > (half_full ? cap / 2 : max_load(cap)))
        cap = cap ? cap * 2 : 1;
    return cap;
}

const uint64_t fs_no_filter[1] = {0};

void fs_level_filter_init(fs_level *L)
{
    L->stale = 0;
    L->filter = fs_no_filter;
    L->filter_mask = 0;
}

void fs_filter_mark(uint64_t *bits, uint64_t mask, uint32_t hi)
{
    bits[(hi & mask) >> 6] |= (1ull << (hi & 63)) | (1ull << (hi >> 26));
}

static void filter_set(fs_level *L, uint32_t hi)
{
    fs_filter_mark((uint64_t *)(void *)(L->slots + L->cap), L->filter_mask, hi);
}

/* Point a filtered table with slots at its bitmap, which must be all
 * zeros: no bit set, none stale. */
static void filter_point(fs_level *L)
{
    uint64_t nbits = FS_FILTER_BITS(L->cap);
    L->filter = (const uint64_t *)(const void *)(L->slots + L->cap);
    L->filter_mask = nbits - 1;
    L->stale = 0;
}

/* Point a filtered table at its bitmap and set the bit of every entry: no
 * stale bits. */
static void filter_rebuild(fs_level *L)
{
    if (!L->filter)
        return;
    if (!L->cap) {
        fs_level_filter_init(L);
        return;
    }
    memset(L->slots + L->cap, 0, (size_t)(FS_FILTER_BITS(L->cap) / 8));
    filter_point(L);
    for (uint32_t i = 0; i < L->cap; i++)
        if (L->slots[i].node)
            filter_set(L, L->slots[i].len);        /* len holds the key's high half */
}

/* Rehash L into ncap slots (which must hold its entries), each entry's
 * bitmap bits set as it moves.  The new slots and bitmap come zeroed from
 * FS_CALLOC (a large table's fresh pages are not written twice).  FS_OK
 * or FS_ENOMEM (L unchanged). */
int fs_level_resize(uint64_t *mem, fs_level *L, uint32_t ncap)
{
    if (ncap == 0) {               /* only for an empty table */
        fs_mem_free(mem, L->slots, fs_level_bytes(L, L->cap));
        L->slots = NULL;
        L->cap = 0;
        filter_rebuild(L);
        return FS_OK;
    }
    fs_slot *ns = fs_mem_calloc(mem, fs_level_bytes(L, ncap));
    if (!ns)
        return FS_ENOMEM;
    fs_slot *old = L->slots;
    uint32_t ocap = L->cap;
    size_t obytes = fs_level_bytes(L, ocap);
    L->slots = ns;
    L->cap = ncap;
    if (L->filter)
        filter_point(L);
    for (uint32_t i = 0; i < ocap; i++) {
        if (old[i].node) {
            fs_slot_place(ns, ncap, old[i]);
            if (L->filter)
                filter_set(L, old[i].len);         /* len holds the key's high half */
        }
    }
    fs_mem_free(mem, old, obytes);
    return FS_OK;
}

FS_ALWAYS_INLINE int level_add(uint64_t *mem, fs_level *L, fs_node *n, uint32_t check, uint32_t max, uint32_t at)
{
    if (L->count + 1 > max) {
        if (fs_level_resize(mem, L, L->cap ? L->cap * 2 : 1) < 0)
            return FS_ENOMEM;
        at = L->cap;                 /* the slots moved: probe anew */
    }
    if (at >= L->cap || L->slots[at].node)
        at = fs_probe(L->slots, L->cap, n->hash, fs_stop_never, NULL);
    L->slots[at] = (fs_slot){.hash = n->hash, .len = check, .node = n};
    L->count++;
    if (L->filter)
        filter_set(L, check);
    return FS_OK;
}

/* Shape tables are kept at most half full: most of their probes miss
 * (a subject probes every shape of its length, and matches few), and a
 * miss under linear probing scans about (1 + 1/(1-load)^2)/2 slots --
 * 8.5 at 3/4 full, 2.5 at 1/2.  They hold only the wildcard filters,
 * so the extra slots cost little memory.  The literal table holds most
 * filters, so it stays 3/4: its bitmap answers most misses instead. */
int fs_level_add_at(uint64_t *mem, fs_level *L, fs_node *n, uint32_t check, int half_full, uint32_t at)
{
    return level_add(mem, L, n, check, half_full ? L->cap / 2 : max_load(L->cap), at);
}

int fs_level_add_checked(uint64_t *mem, fs_level *L, fs_node *n, uint32_t check, int half_full)
{
    return fs_level_add_at(mem, L, n, check, half_full, UINT32_MAX);
}

int fs_level_add(uint64_t *mem, fs_level *L, fs_node *n)
{
    return level_add(mem, L, n, n->toklen, max_load(L->cap), UINT32_MAX);
}

/* Tables grow past 3/4 full and shrink below 1/8 full, to half their
 * size: after a shrink the table is at most 1/4 full, so churn around
 * either threshold cannot resize back and forth on every operation. */
void fs_level_shrink(uint64_t *mem, fs_level *L)
{
    if (L->cap <= 16 || L->count >= L->cap / 8)
        return;
    uint32_t ncap = L->cap / 2;
    while (ncap > 16 && L->count < ncap / 8)
        ncap /= 2;
    fs_level_resize(mem, L, ncap);          /* best effort: keeps the old table if it fails */
}

/* Remove a literal child (present).  Re-places the rest of its probe
 * cluster so lookups stay correct; never allocates. */
static int stop_at_node(const fs_slot *s, void *n)
{
    return s->node == n;
}

void fs_level_del(fs_level *L, const fs_node *n)
{
    uint32_t mask = L->cap - 1, i = fs_probe(L->slots, L->cap, n->hash, stop_at_node, (void *)(uintptr_t)n);
    assert(i < L->cap && L->slots[i].node == n);
    L->slots[i].node = NULL;
    L->count--;
    /* the rest of the cluster: the slots after i, up to an empty one */
    for (uint32_t k = 1, j = fs_probe_next(i, mask); k < L->cap; k++, j = fs_probe_next(j, mask)) {
        if (!L->slots[j].node)
            break;
        fs_slot e = L->slots[j];
        L->slots[j].node = NULL;
        fs_slot_place(L->slots, L->cap, e);
    }
    /* A removed entry's bit stays set (another entry may share it) until
     * the bitmap is rebuilt: here, in place, once the stale bits could
     * be as many as the live ones -- O(cap) every ~count/2 removals. */
    if (L->filter && ++L->stale > L->count / 2 + 8)
        filter_rebuild(L);
}

void fs_level_restore(uint64_t *mem, fs_level *L, uint32_t cap)
{
    if (L->cap != cap && L->count <= max_load(cap))
        fs_level_resize(mem, L, cap);    /* best effort: keeps the bigger table if it fails */
}

