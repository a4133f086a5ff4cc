/* fs_layout.c - reading the layout safely (fs_layout.h): the checks that
 * make following a mapped image's offset safe (fs_img_node_checked,
 * fs_img_level_checked, called by the walks as they reach a node or a
 * level), the set of image nodes moved to the live part, and the index's
 * lock in the fork registry.  serial/ writes (fs_image_write.c), opens
 * (fs_image.c) and verifies (fs_image_verify.c) images; these are what matching an opened one needs, in the index
 * layer, so that the walks above it never call up into the image's file. */
#include "fs_layout.h"

#include "fs_alloc.h"

/* A node's ids and queue groups lie inside the image (fs_img_node_checked). */
static int payload_inside(const fs_sublist *sl, uint64_t off, const fs_node *n)
{
    /* The writer puts a node's payload after it (a group's name and ids
     * after the group): an offset is forward, which also keeps node +
     * offset from wrapping around. */
    if (n->subcap <= 1) {
        if (n->nsubs > n->subcap)
            return 0;
    } else if (n->subs.one < (int64_t)sizeof(fs_node) ||
               !fs_img_holds(sl, off + (uint64_t)n->subs.one, (uint64_t)n->nsubs * 8)) {
        return 0;
    }
    if (!n->groups)
        return 1;
    uint64_t G = off + (uint64_t)(uintptr_t)n->groups;
    if ((uintptr_t)n->groups < sizeof(fs_node) || G < off || !fs_img_holds(sl, G, sizeof(fs_groups)))
        return 0;
    const fs_groups *gs = (const fs_groups *)(const void *)(sl->img.base + G);
    uint32_t ng = fs_once32(&gs->n);      /* once: it bounds the loop's reads */
    if (ng == 0 || !fs_img_holds(sl, G, sizeof(fs_groups) + (uint64_t)ng * sizeof(fs_group)))
        return 0;
    for (uint32_t i = 0; i < ng; i++) {
        uint64_t g = G + sizeof(fs_groups) + (uint64_t)i * sizeof(fs_group);
        const fs_group *p = &gs->g[i];
        if (p->cap != 0 || p->n == 0 || (uintptr_t)p->name < sizeof(fs_group) ||
            (uintptr_t)p->ids < sizeof(fs_group) ||
            !fs_img_holds(sl, g + (uint64_t)(uintptr_t)p->name, FS_TOK_ALLOC(p->name_len)) ||
            !fs_img_holds(sl, g + (uint64_t)(uintptr_t)p->ids, (uint64_t)p->n * 8))
            return 0;
    }
    return 1;
}

const fs_node *fs_img_node_checked(const fs_sublist *sl, uint64_t off)
{
    if (fs_img_holds(sl, off, sizeof(fs_node))) {
        const fs_node *n = (const fs_node *)(const void *)(sl->img.base + off);
        if ((n->linked & FS_LINK_IMAGE) && fs_img_holds(sl, off, sizeof(fs_node) + FS_TOK_ALLOC(n->toklen)) &&
            (!(n->linked & FS_LINK_TRIE) || fs_img_holds(sl, off - sizeof(fs_link), sizeof(fs_link))) &&
            payload_inside(sl, off, n))
            return n;
    }
    fs_img_bad(sl);
    return NULL;
}

int fs_img_level_ok(const fs_sublist *sl, const fs_level *L)
{
    uint64_t bits = L->filter ? L->filter_mask + 1 : 0;
    return (L->cap & (L->cap - 1)) == 0 && L->count <= L->cap &&
           (L->cap ? fs_img_holds(sl, (uintptr_t)L->slots, (uint64_t)L->cap * sizeof(fs_slot)) : !L->slots) &&
           (!L->filter || (L->cap && bits >= 64 && (bits & (bits - 1)) == 0 &&
                           fs_img_holds(sl, (uintptr_t)L->filter, bits / 8)));
}

const fs_level *fs_img_level_checked(const fs_sublist *sl, uint64_t off)
{
    if (fs_img_holds(sl, off, sizeof(fs_level))) {
        const fs_level *L = (const fs_level *)(const void *)(sl->img.base + off);
        if (fs_img_level_ok(sl, L))
            return L;
    }
    fs_img_bad(sl);
    return NULL;
}


/* ---- a mapped node's payload, each field read once (fs_layout.h) */

static const int64_t no_ids[1];
const fs_group fs_no_group = {(char *)(uintptr_t)"", (int64_t *)(uintptr_t)no_ids, 0, 0, 0, 1};

/* The `size` mapped bytes at `rel` past the record `owner` (of owner_size
 * bytes), where a mapped record's payload lies: NULL, the index marked bad,
 * unless the offset points past the record and the bytes lie inside the
 * mapping.  The one check of every accessor below. */
static const char *img_past(const fs_sublist *sl, const void *owner, size_t owner_size,
                            uint64_t rel, uint64_t size)
{
    uint64_t at = fs_img_off(sl, owner) + rel;
    if (rel >= owner_size && fs_img_holds(sl, at, size))
        return sl->img.base + at;
    fs_img_bad(sl);
    return NULL;
}

uint32_t fs_img_subs(const fs_sublist *sl, const fs_node *n, const int64_t **ids)
{
    uint32_t cap = fs_once32(&n->subcap), cnt = fs_once32(&n->nsubs);
    *ids = &n->subs.one;
    if (cap <= 1) {
        if (cnt <= cap)
            return cnt;
        fs_img_bad(sl);
        return 0;
    }
    const char *p = img_past(sl, n, sizeof(fs_node), fs_once64(&n->subs.one), (uint64_t)cnt * 8);
    if (!p)
        return 0;
    *ids = (const int64_t *)(const void *)p;
    return cnt;
}

uint32_t fs_img_groups(const fs_sublist *sl, const fs_node *n, const fs_groups **gs)
{
    uint64_t rel = fs_oncep(&n->groups);
    *gs = NULL;
    if (!rel)
        return 0;
    const fs_groups *p = (const fs_groups *)(const void *)img_past(sl, n, sizeof(fs_node), rel,
                                                                   sizeof(fs_groups));
    if (!p)
        return 0;
    uint32_t cnt = fs_once32(&p->n);
    if (!img_past(sl, n, sizeof(fs_node), rel, sizeof(fs_groups) + (uint64_t)cnt * sizeof(fs_group)))
        return 0;
    *gs = p;
    return cnt;
}

uint32_t fs_img_gname(const fs_sublist *sl, const fs_group *g, const char **name)
{
    uint32_t len = fs_once32(&g->name_len);
    const char *p = img_past(sl, g, sizeof(fs_group), fs_oncep(&g->name), FS_TOK_ALLOC(len));
    *name = p ? p : fs_no_group.name;
    return p ? len : 0;
}

uint32_t fs_img_gids(const fs_sublist *sl, const fs_group *g, const int64_t **ids)
{
    uint32_t cnt = fs_once32(&g->n);
    const char *p = img_past(sl, g, sizeof(fs_group), fs_oncep(&g->ids), (uint64_t)cnt * 8);
    *ids = p ? (const int64_t *)(const void *)p : no_ids;
    return p ? cnt : 0;
}


/* ============================================================ live part */

static uint64_t mask_slot(uint64_t off, uint64_t cap)
{
    return ((off >> 3) * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1);
}

int fs_image_masked(const fs_sublist *sl, const fs_node *n)
{
    /* an image's node by its address, not by its flag byte (which may change) */
    if (!sl->masked_n || !fs_img_owns(sl, n))
        return 0;
    uint64_t off = fs_img_off(sl, n);
    for (uint64_t i = mask_slot(off, sl->masked_cap);; i = (i + 1) & (sl->masked_cap - 1)) {
        if (sl->masked[i] == off)
            return 1;
        if (!sl->masked[i])
            return 0;
    }
}

int fs_image_mask(fs_sublist *sl, const fs_node *n)
{
    if (2 * (sl->masked_n + 1) > sl->masked_cap) {
        uint64_t ncap = sl->masked_cap ? 2 * sl->masked_cap : 64;
        uint64_t *nm = FS_MALLOC((size_t)ncap * sizeof(uint64_t));
        if (!nm)
            return FS_ENOMEM;
        memset(nm, 0, (size_t)ncap * sizeof(uint64_t));
        for (uint64_t k = 0; k < sl->masked_cap; k++) {
            uint64_t off = sl->masked[k];
            if (!off)
                continue;
            uint64_t i = mask_slot(off, ncap);
            while (nm[i])
                i = (i + 1) & (ncap - 1);
            nm[i] = off;
        }
        FS_FREE(sl->masked);
        sl->masked = nm;
        sl->masked_cap = ncap;
    }
    uint64_t off = fs_img_off(sl, n), i = mask_slot(off, sl->masked_cap);
    while (sl->masked[i])
        i = (i + 1) & (sl->masked_cap - 1);
    sl->masked[i] = off;
    sl->masked_n++;
    return FS_OK;
}


/* ============================================================ fork */

static void sl_lock(void *sl) { fs_brlock_wrlock(&((fs_sublist *)sl)->lock); }
static void sl_unlock(void *sl) { fs_brlock_wrunlock(&((fs_sublist *)sl)->lock); }
/* In the child: a fresh lock instead of a release (fs_fork.c says why):
 * fs_brlock_child_reset re-creates its rwlock and zeroes its stripes'
 * reader counts (a parent thread may have been between a reader's add and
 * its back-off). */
static void sl_relock(void *sl) { fs_brlock_child_reset(&((fs_sublist *)sl)->lock); }

int fs_sl_fork_track(fs_sublist *sl)
{
    sl->fork = (fs_fork_entry){.prepare = sl_lock, .parent = sl_unlock, .child = sl_relock, .arg = sl};
    return fs_fork_track(&sl->fork);
}

void fs_sl_fork_untrack(fs_sublist *sl) { fs_fork_untrack(&sl->fork); }
