/* fs_image.c - the index as a mapped image (fs_image.h; docs/FORMAT.md,
 * version 3): the writer lays the index's structs out in one buffer with
 * offsets for pointers; opening points an index at such a buffer; the
 * full verification (verify_image) lives here too, so that what is written
 * and what is accepted are side by side.  The checks that make following
 * an offset safe while matching (fs_img_node_checked, fs_img_level_checked)
 * are the index layer's, below this one (fs_layout.c), as is the set of
 * masked nodes of the live part; the walk over the live part is fs_walk.c's.
 */
#include "fs_image.h"

#include <stdlib.h>
#include <string.h>


#include "fs_alloc.h"
#include "fs_index.h"
#include "fs_pool.h"
#include "fs_checksum.h"
#include "fs_entry.h"
#include "fs_header.h"
#include "fs_sys.h"

/* The root block, after the 48-byte header: the index's own fields. */
typedef struct {
    uint64_t nodes;           /* trie nodes and table entries (fs_sublist.nodes) */
    uint64_t root;            /* the trie's root node */
    uint64_t literals;        /* the literal table's level */
    uint64_t objects_end;     /* objects lie in [FS_IMG_OBJECTS, objects_end) = 48 + P */
    uint64_t nshapes;
    uint64_t shape[FS_SHAPE_MAX];                  /* fs_shape structs, canonical order */
    uint64_t probe[FS_SHAPE_MAX_TOKENS + 2];       /* as fs_shapes.probe[0] */
} img_root;

_Static_assert(FS_SERIAL_HEADER + sizeof(img_root) <= FS_IMG_OBJECTS, "root block fits before the objects");
_Static_assert(sizeof(void *) == 8, "the image's structs are a 64-bit host's");
_Static_assert(sizeof(fs_node) == 32 && sizeof(fs_link) == 16 && sizeof(fs_slot) == 16, "image layout");

static int host_little_endian(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* Call add(ctx, n) for every node of sl holding subscriptions -- its
 * trie's, then its literal table's and its shapes' -- except a mapped
 * image's masked ones.  A trie node with children comes after the nodes
 * below it: inserted in this order into an empty index, a filter that a
 * shape could hold but that sits in the trie because its node was there
 * for longer filters (AMQP "#" under "#.c") lands in the trie again.
 * FS_OK or add's failure. */
static int each_node(const fs_sublist *sl, int (*add)(void *, const fs_sublist *, const fs_node *), void *ctx)
{
    const fs_node **stack = NULL, **later = NULL;
    size_t n = 0, cap = 0, nlater = 0, cap_later = 0;
    uint64_t budget = sl->nodes + 1;
    int rc = fs_push_node(&stack, &n, &cap, sl->root);
    while (rc == FS_OK && n && budget--) {
        const fs_node *x = stack[--n];
        const fs_level *L = fs_down(sl, x);
        if (x != sl->root && fs_has_subs(x) && !fs_image_masked(sl, x))
            rc = L && (L->count || L->one || L->rest) ? fs_push_node(&later, &nlater, &cap_later, x) : add(ctx, sl, x);
        if (rc == FS_OK)
            rc = fs_trie_push_children(sl, x, &stack, &n, &cap);
    }
    while (rc == FS_OK && nlater)       /* deepest first: pushed after their ancestors */
        rc = add(ctx, sl, later[--nlater]);
    FS_FREE(stack);
    FS_FREE(later);
    for (uint32_t j = 0; j <= sl->shapes.n && rc == FS_OK; j++) {
        const fs_level *L = j < sl->shapes.n ? &sl->shapes.shape[j]->table : sl->lit;
        const fs_slot *slots = fs_lv_slots(sl, L);
        for (uint32_t i = 0; i < L->cap && rc == FS_OK; i++) {
            const fs_node *e = fs_ref_node(sl, slots[i].node);
            if (e && !fs_image_masked(sl, e))
                rc = add(ctx, sl, e);
        }
    }
    return rc;
}

typedef struct {
    fs_sublist *to;
    char *path;               /* FS_MAX_SUBJECT + 1 bytes: a node's filter */
    char *shared;             /* as many: "$share/G/" and the filter (thaw_group_spec) */
} thaw_ctx;

/* The insert of a queue group's members, *sp (the group's name as its
 * queue): as it is, or -- the group on a filter that itself starts
 * "$share/" (MQTT: inserted as "$share/G/$share/...") -- in the form
 * inserts take, the filter "$share/G/f" without a queue (a queue and a
 * "$share/" filter together are refused).  FS_OK, or FS_EINVAL: no insert
 * made this (a damaged image's). */
static int thaw_group_spec(thaw_ctx *c, fs_dialect d, fs_spec *sp)
{
    if (!fs_share_prefixed(d, sp->filter, sp->filter_len))
        return FS_OK;
    size_t n = FS_SHARE_PREFIX_LEN + sp->queue_len + 1 + sp->filter_len;
    if (n > FS_MAX_SUBJECT || memchr(sp->queue, '/', sp->queue_len))
        return FS_EINVAL;
    char *o = c->shared;
    memcpy(o, FS_SHARE_PREFIX, FS_SHARE_PREFIX_LEN);
    memcpy(o + FS_SHARE_PREFIX_LEN, sp->queue, sp->queue_len);
    o[FS_SHARE_PREFIX_LEN + sp->queue_len] = '/';
    memcpy(o + FS_SHARE_PREFIX_LEN + sp->queue_len + 1, sp->filter, sp->filter_len);
    *sp = (fs_spec){.filter = o, .filter_len = n, .queue = NULL, .queue_len = 0, .id = sp->id};
    return FS_OK;
}

static int thaw_add(void *pctx, const fs_sublist *sl, const fs_node *n)
{
    thaw_ctx *c = pctx;
    size_t len = fs_path_bytes(sl, n);
    if (len > FS_MAX_SUBJECT) {         /* a damaged image's path */
        fs_img_bad(sl);
        return FS_EBADDATA;
    }
    fs_path_write(sl, n, c->path, c->path + len);
    fs_error err;
    int rc = FS_OK;
    /* each count read once with what it bounds (fs_once8, fs_layout.h) */
    const int64_t *ids;
    uint32_t nids = fs_subs_of(sl, n, &ids), ng = fs_ngroups_of(sl, n);
    for (uint32_t i = 0; i < nids && rc >= 0; i++) {
        fs_spec sp = {.filter = c->path, .filter_len = len, .id = ids[i]};
        rc = fs_sublist_insert(c->to, &sp, &err);
    }
    for (uint32_t gi = 0; gi < ng && rc >= 0; gi++) {
        const fs_group *g = fs_group_of(sl, n, gi);
        const char *name;
        uint32_t name_len = fs_gname_of(sl, g, &name), gn = fs_gids_of(sl, g, &ids);
        fs_spec sp = {.filter = c->path, .filter_len = len, .queue = name, .queue_len = name_len, .id = 0};
        rc = thaw_group_spec(c, sl->dialect, &sp);
        for (uint32_t i = 0; i < gn && rc >= 0; i++) {
            sp.id = ids[i];
            rc = fs_sublist_insert(c->to, &sp, &err);
        }
    }
    if (rc == FS_EINVAL) {              /* a filter or name inserts refuse: damaged */
        fs_img_bad(sl);
        return FS_EBADDATA;
    }
    return rc < 0 ? rc : FS_OK;
}

int fs_image_thaw(fs_sublist *sl, fs_sublist **out)
{
    *out = NULL;
    thaw_ctx c = {.to = fs_sublist_new(sl->dialect), .path = FS_MALLOC(2 * ((size_t)FS_MAX_SUBJECT + 1))};
    c.shared = c.path ? c.path + FS_MAX_SUBJECT + 1 : NULL;
    int rc = c.to && c.path ? FS_OK : FS_ENOMEM;
    fs_brlock_rdlock_long(&sl->lock);
    if (rc == FS_OK)
        rc = each_node(sl, thaw_add, &c);
    if (rc == FS_OK && sl->live)
        rc = each_node(sl->live, thaw_add, &c);
    if (rc == FS_EBADDATA)             /* the live part too holds what the image held */
        fs_img_bad(sl);
    if (rc == FS_OK && atomic_load(&sl->damaged))
        rc = FS_EBADDATA;
    fs_brlock_rdunlock_long(&sl->lock);
    FS_FREE(c.path);
    if (rc < 0) {
        fs_sublist_free(c.to);
        return rc;
    }
    *out = c.to;
    return FS_OK;
}

int fs_image_damaged(const fs_sublist *sl) { return atomic_load(&((fs_sublist *)(uintptr_t)sl)->damaged); }

/* ============================================================ write */

/* The image being written.  Every byte past len is zero, so that an
 * object is written only where it is not zero: a file's fresh bytes are
 * zeros; memory is zeroed as it is obtained, in one call for all of it,
 * not object by object. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
    fs_filebuf *file;     /* non-NULL: the bytes are this file's pages */
} wbuf;

/* Make the buffer at least need bytes.  FS_OK, or -1 (wb->oom). */
static int wb_grow(wbuf *wb, size_t need)
{
    if (wb->file) {
        if (fs_filebuf_grow(wb->file, need) != FS_OK)
            return wb->oom = 1, -1;
        wb->p = wb->file->p;
        wb->cap = wb->file->cap;
        return FS_OK;
    }
    size_t ncap = wb->cap ? wb->cap : 4096;
    while (ncap < need)
        ncap *= 2;
    char *np = FS_REALLOC(wb->p, ncap);
    if (!np)
        return wb->oom = 1, -1;
    fs_pages_huge(np + wb->len, ncap - wb->len);     /* the part still to write */
    memset(np + wb->cap, 0, ncap - wb->cap);
    wb->p = np;
    wb->cap = ncap;
    return FS_OK;
}

/* Before the first byte: room for about size bytes, zeros, so that an
 * image that fits is never moved or grown as it is written.  In memory, a
 * large block of fresh pages, which calloc need not write (those the
 * image does not reach are never touched); a file is made that size (and
 * cut to the image's at the end).  FS_OK, or -1 (wb->oom). */
static int wb_reserve(wbuf *wb, size_t size)
{
    if (wb->cap >= size)
        return FS_OK;
    if (wb->file)
        return wb_grow(wb, size);
    char *np = FS_CALLOC(size, 1);
    if (!np)
        return wb->oom = 1, -1;
    fs_pages_huge(np, size);
    FS_FREE(wb->p);         /* nothing written yet */
    wb->p = np;
    wb->cap = size;
    return FS_OK;
}

/* Room for size more bytes at an 8-byte boundary, zeros: its offset (0
 * when out of memory, or the file cannot grow: wb->oom). */
static inline uint64_t wb_alloc(wbuf *wb, size_t size)
{
    size_t at = (wb->len + 7) & ~(size_t)7;
    if (wb->oom || at + size < at)
        return wb->oom = 1, 0;
    if (at + size > wb->cap && wb_grow(wb, at + size) < 0)
        return 0;
    wb->len = at + size;
    return at;
}

#define AT(wb, off, type) ((type *)(void *)((wb)->p + (off)))

/* Every table is written in one order that depends only on its entries:
 * by home slot in the written table (hash & (cap - 1)), then by key (the
 * slot's hash and check word), then by bytes.  Placing entries in home
 * order fills the slots front to back, and lays the nodes out in the
 * order their slots name them, so that writing a table, and reading it
 * back to verify it, touch memory in sequence: a byte order of the
 * filters put every slot write and every node read at a random place (it
 * was most of a large save).  The index's own table gives that order
 * almost as it is (entries_by_cluster): no sort of the whole table. */
typedef struct {
    const fs_sublist *sl;
    wbuf w;
    fs_slot *sorted;          /* one level's entries, in writing order */
    size_t cap_sorted;
    fs_slot *scratch;         /* room for sorting them */
    size_t cap_scratch;
    uint32_t *counts;         /* their buckets' sizes */
    size_t cap_counts;
} writer;

static int node_tok_cmp(const fs_node *a, const fs_node *b)
{
    size_t m = a->toklen < b->toklen ? a->toklen : b->toklen;
    int c = memcmp(a->tok, b->tok, m);
    return c ? c : (a->toklen > b->toklen) - (a->toklen < b->toklen);
}

static int slot_before(const fs_slot *a, const fs_slot *b, uint32_t mask)
{
    uint32_t ha = a->hash & mask, hb = b->hash & mask;
    if (ha != hb)
        return ha < hb;
    if (a->hash != b->hash)
        return a->hash < b->hash;
    if (a->len != b->len)
        return a->len < b->len;
    return node_tok_cmp(a->node, b->node) < 0;
}

/* Sort a bucket or a cluster of entries by slot_before: by insertion when
 * short (a bucket holds about two, a cluster a few); a long one (keys made
 * to collide) by merging, so that no input costs more than n log n. */
static void sort_bucket(fs_slot *a, fs_slot *tmp, size_t n, uint32_t mask)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            fs_slot x = a[i];
            size_t j = i;
            for (; j > 0 && slot_before(&x, &a[j - 1], mask); j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    sort_bucket(a, tmp, h, mask);
    sort_bucket(a + h, tmp, n - h, mask);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = slot_before(&a[j], &a[i], mask) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, k * sizeof(*a));
}

/* A cluster's entries in writing order: most are already (checked in one
 * pass over what was just copied), the others sorted. */
static inline void sort_run(fs_slot *a, fs_slot *tmp, size_t n, uint32_t mask)
{
    for (size_t i = 1; i < n; i++)
        if (slot_before(&a[i], &a[i - 1], mask)) {
            sort_bucket(a, tmp, n, mask);
            return;
        }
}

/* Table L's entries in writing order (W->sorted[0..L->count)), into a
 * table of another capacity (cap): bucketed by the top bits of their home
 * slot there (about two entries a bucket), then each bucket sorted:
 * linear in the entries, reading each node's bytes only where two keys
 * are equal.  W's arrays have room for L->count.  FS_OK or FS_ENOMEM. */
static int entries_by_bucket(writer *W, const fs_level *L, uint32_t cap)
{
    size_t n = L->count;
    uint32_t mask = cap - 1, shift = 0;
    while ((cap >> shift) > 1 && (cap >> shift) > n / 2)
        shift++;
    size_t nb = (size_t)(cap >> shift);       /* buckets: a power of two, at most max(n/2, 1) */
    if (nb + 1 > W->cap_counts && fs_grow(&W->counts, &W->cap_counts, nb + 1, sizeof(uint32_t)) < 0)
        return FS_ENOMEM;
    memset(W->counts, 0, (nb + 1) * sizeof(uint32_t));
    size_t k = 0;
    for (uint32_t i = 0; i < L->cap && k < n; i++)
        if (L->slots[i].node) {
            W->scratch[k++] = L->slots[i];
            W->counts[((L->slots[i].hash & mask) >> shift) + 1]++;
        }
    for (size_t b = 0; b < nb; b++)
        W->counts[b + 1] += W->counts[b];
    for (size_t i = 0; i < k; i++)
        W->sorted[W->counts[(W->scratch[i].hash & mask) >> shift]++] = W->scratch[i];
    /* counts[b] is now bucket b's end */
    for (size_t b = 0, lo = 0; b < nb; lo = W->counts[b++])
        if (W->counts[b] - lo > 1)
            sort_bucket(W->sorted + lo, W->scratch, W->counts[b] - lo, mask);
    return FS_OK;
}

/* Table L's entries in writing order, L being at the capacity it is
 * written at (a table that only grew is: its capacity follows from its
 * count) and not full.  Under linear probing, which slots are full does
 * not depend on the order of insertion, and an entry lies in the run of
 * full slots (its cluster) that holds its home; so the written table has
 * L's clusters, and since writing order is by home first, it is L's
 * slot order but inside each cluster (where an entry inserted later lies
 * past those before it, about a slot) and for the cluster that wraps
 * round the end: its entries before the first free slot whose home is
 * above their slot come last, after those past the last free slot.  So
 * L is read once, in slot order, and each cluster checked and, out of
 * order, sorted alone -- no counts, no entry moved across the table. */
static void entries_by_cluster(writer *W, const fs_level *L)
{
    const fs_slot *s = L->slots;
    uint32_t mask = L->cap - 1, first = 0, last = mask;
    while (s[first].node)
        first++;
    while (s[last].node)
        last--;
    size_t k = 0, wrapped = 0, lo;
    for (uint32_t i = 0; i < first; i++) {
        if ((s[i].hash & mask) > i)
            W->scratch[wrapped++] = s[i];
        else
            W->sorted[k++] = s[i];
    }
    /* scratch[0..wrapped) is taken: the sorts below merge past it */
    sort_run(W->sorted, W->scratch + wrapped, k, mask);
    lo = k;
    for (uint32_t i = first + 1; i < last; i++) {
        if (s[i].node) {
            W->sorted[k++] = s[i];
        } else {
            sort_run(W->sorted + lo, W->scratch + wrapped, k - lo, mask);
            lo = k;
        }
    }
    sort_run(W->sorted + lo, W->scratch + wrapped, k - lo, mask);   /* ended by the last free slot */
    lo = k;
    for (uint32_t i = last + 1; i <= mask; i++)
        W->sorted[k++] = s[i];
    memcpy(W->sorted + k, W->scratch, wrapped * sizeof(fs_slot));
    sort_run(W->sorted + lo, W->scratch, k + wrapped - lo, mask);
}

/* The entries of table L, to be written into a table of capacity cap, in
 * writing order (W->sorted[0..L->count)). */
static int sorted_entries(writer *W, const fs_level *L, uint32_t cap, size_t *count)
{
    *count = 0;
    size_t n = L->count;
    if (n > W->cap_sorted && fs_grow(&W->sorted, &W->cap_sorted, n, sizeof(fs_slot)) < 0)
        return FS_ENOMEM;
    if (n > W->cap_scratch && fs_grow(&W->scratch, &W->cap_scratch, n, sizeof(fs_slot)) < 0)
        return FS_ENOMEM;
    /* A table not at its written capacity (left larger by removals) or
     * full (at most 4 slots) has other clusters, or none to start from. */
    if (L->cap == cap && n < cap)
        entries_by_cluster(W, L);
    else if (entries_by_bucket(W, L, cap) < 0)
        return FS_ENOMEM;
    *count = n;
    return FS_OK;
}

/* Copy bytes to a fresh 8-aligned object; its offset (0: out of memory). */
static uint64_t put_bytes(writer *W, const void *src, size_t n, size_t room)
{
    uint64_t off = wb_alloc(&W->w, room);
    if (off && n)
        memcpy(W->w.p + off, src, n);
    return off;
}

/* A node (a trie node when parent_off is not ~0: with its link) and its
 * payload; its offset, 0 when out of memory.  The next level is linked by
 * the caller. */
static uint64_t write_node(writer *W, const fs_node *n, uint64_t parent_off, int trie)
{
    size_t tok = FS_TOK_ALLOC(n->toklen);
    uint64_t block = wb_alloc(&W->w, (trie ? sizeof(fs_link) : 0) + sizeof(fs_node) + tok);
    if (!block)
        return 0;
    uint64_t off = block + (trie ? sizeof(fs_link) : 0);
    fs_node *x = AT(&W->w, off, fs_node);
    memcpy(x, n, sizeof(fs_node) + tok);
    x->linked = (uint8_t)(FS_LINK_IMAGE | (trie ? FS_LINK_TRIE : 0));
    x->groups = NULL;
    if (trie)
        AT(&W->w, block, fs_link)->parent = (fs_node *)(uintptr_t)parent_off;
    const int64_t *ids = fs_node_ids(n);
    if (n->nsubs <= 1) {
        x->subcap = n->nsubs;
        x->subs.one = n->nsubs ? ids[0] : 0;
    } else {
        uint64_t at = put_bytes(W, ids, sizeof(int64_t) * n->nsubs, sizeof(int64_t) * n->nsubs);
        if (!at)
            return 0;
        x = AT(&W->w, off, fs_node);
        x->subcap = n->nsubs;
        x->subs.one = (int64_t)(at - off);
    }
    uint32_t ng = fs_ngroups(n);
    if (!ng)
        return off;
    uint64_t G = wb_alloc(&W->w, sizeof(fs_groups) + sizeof(fs_group) * ng);
    if (!G)
        return 0;
    AT(&W->w, G, fs_groups)->n = AT(&W->w, G, fs_groups)->cap = ng;
    for (uint32_t i = 0; i < ng; i++) {
        const fs_group *g = fs_node_group(n, i);
        uint64_t name = put_bytes(W, fs_group_name(g), g->name_len, FS_TOK_ALLOC(g->name_len ? g->name_len : 1));
        uint64_t gids = put_bytes(W, fs_group_ids(g), sizeof(int64_t) * g->n, sizeof(int64_t) * g->n);
        if (!name || !gids)
            return 0;
        uint64_t at = G + sizeof(fs_groups) + sizeof(fs_group) * i;
        fs_group *y = AT(&W->w, at, fs_group);
        y->name = (char *)(uintptr_t)(name - at);
        y->ids = (int64_t *)(uintptr_t)(gids - at);
        y->name_len = g->name_len;
        y->name_hash = g->name_hash;
        y->n = g->n;
        y->cap = 0;
    }
    AT(&W->w, off, fs_node)->groups = (fs_groups *)(uintptr_t)(G - off);
    return off;
}

/* The level at lv_off for table L: fresh slots of the canonical capacity
 * and, for a keyed table, its bitmap; entries are placed later, in writing
 * order (sorted_entries), by place_entry.  Its slots' offset, 0 when out
 * of memory (or for no slots). */
static uint64_t level_begin(writer *W, uint64_t lv_off, const fs_level *L, int half_full)
{
    uint32_t cap = fs_table_cap(L->count, half_full);
    uint64_t bits = L->filter && cap ? FS_FILTER_BITS(cap) : 0;
    uint64_t slots = cap ? wb_alloc(&W->w, sizeof(fs_slot) * cap + bits / 8) : 0;
    fs_level *y = AT(&W->w, lv_off, fs_level);
    memset(y, 0, sizeof(*y));
    y->slots = (fs_slot *)(uintptr_t)slots;
    y->cap = slots ? cap : 0;
    y->count = slots ? L->count : 0;
    if (bits && slots) {
        y->filter = (const uint64_t *)(uintptr_t)(slots + sizeof(fs_slot) * cap);
        y->filter_mask = bits - 1;
    }
    return slots;
}

/* Place slot e (its node already written) in the level at lv_off by the
 * one probe sequence (fs_slot_place), and mark a keyed table's bitmap
 * unless it is marked already (marked: copied whole from the index's).
 * With next (the slot after the last placed), entries come in writing
 * order, so e's first free slot is its home or next: the slots fill front
 * to back without a probe, but for a cluster that wraps round the end. */
static void place_entry(writer *W, uint64_t lv_off, fs_slot e, uint32_t *next, int marked)
{
    fs_level *y = AT(&W->w, lv_off, fs_level);
    fs_slot *ys = AT(&W->w, (uintptr_t)y->slots, fs_slot);
    uint32_t home = e.hash & (y->cap - 1), at = next && *next > home ? *next : home;
    if (next && at < y->cap && !ys[at].node) {
        ys[at] = e;
        *next = at + 1;
    } else {
        fs_slot_place(ys, y->cap, e);
    }
    if (y->filter && !marked)
        fs_filter_mark(AT(&W->w, (uintptr_t)y->filter, uint64_t), y->filter_mask, e.len);
}

/* Copy table L's bitmap into the level at lv_off when it is the one its
 * entries mark: the same capacity, and no bits left by removals.  Marking
 * entry by entry sets a bit at random in a bitmap as large as the slots
 * (1 byte a slot): a cache miss each, most of a large table's writing. */
static int copy_bitmap(writer *W, uint64_t lv_off, const fs_level *L)
{
    const fs_level *y = AT(&W->w, lv_off, fs_level);
    if (!y->filter || !L->filter || L->stale || L->cap != y->cap || L->filter_mask != y->filter_mask)
        return 0;
    memcpy(AT(&W->w, (uintptr_t)y->filter, uint64_t), L->filter, (size_t)(y->filter_mask + 1) / 8);
    return 1;
}

/* A keyed table (the literal table, a shape's) into the level at lv_off:
 * each entry's node, then its slot, in writing order.  The next nodes are
 * fetched ahead: the index holds them anywhere in memory. */
static int write_table(writer *W, uint64_t lv_off, const fs_level *L, int half_full)
{
    uint64_t slots = level_begin(W, lv_off, L, half_full);
    if (!L->count)
        return FS_OK;
    size_t n;
    uint32_t next = 0;
    if (!slots || sorted_entries(W, L, fs_table_cap(L->count, half_full), &n) < 0)
        return FS_ENOMEM;
    int marked = copy_bitmap(W, lv_off, L);
    enum { AHEAD = 8 };
    for (size_t k = 0; k < n; k++) {
        if (k + 2 * AHEAD < n) {
            FS_PREFETCH(W->sorted[k + 2 * AHEAD].node);
            FS_PREFETCH((const char *)W->sorted[k + 2 * AHEAD].node + 64);
        }
        if (k + AHEAD < n) {          /* fetched by now: what it points to */
            const fs_node *a = W->sorted[k + AHEAD].node;
            if (a->subcap > 1)
                FS_PREFETCH(a->subs.many);
            if (a->groups)
                FS_PREFETCH(a->groups);
        }
        fs_slot e = W->sorted[k];
        uint64_t eo = write_node(W, e.node, 0, 0);
        if (!eo)
            return FS_ENOMEM;
        e.node = (fs_node *)(uintptr_t)eo;
        place_entry(W, lv_off, e, &next, marked);
    }
    return FS_OK;
}

/* One trie node to write: where it goes in its parent's level. */
typedef struct {
    const fs_node *n;
    uint64_t parent, lv;      /* the parent's offset and its level's */
    uint32_t len;             /* a literal child's slot check word */
    int where;                /* 0 a literal child, 1 the one child, 2 the rest child */
} trie_frame;

/* The trie, depth first over an explicit stack (a trie may be 32,000
 * levels deep): each node, then its level, its children placed as they
 * are written -- a level's literal children in writing order.  The root's
 * offset, 0 when out of memory. */
static uint64_t write_trie(writer *W, const fs_node *root)
{
    trie_frame *stack = NULL;
    size_t n = 0, cap = 0;
    uint64_t root_off = 0;
    int rc = fs_grow(&stack, &cap, 1, sizeof(trie_frame));
    if (rc == FS_OK)
        stack[n++] = (trie_frame){.n = root};
    while (rc == FS_OK && n) {
        trie_frame f = stack[--n];
        uint64_t off = write_node(W, f.n, f.parent, 1);
        if (!off) {
            rc = FS_ENOMEM;
            break;
        }
        if (f.n == root)
            root_off = off;
        else if (f.where == 0)
            place_entry(W, f.lv, (fs_slot){.hash = f.n->hash, .len = f.len, .node = (fs_node *)(uintptr_t)off},
                        NULL, 0);
        else if (f.where == 1)
            AT(&W->w, f.lv, fs_level)->one = (fs_node *)(uintptr_t)off;
        else
            AT(&W->w, f.lv, fs_level)->rest = (fs_node *)(uintptr_t)off;
        const fs_level *L = fs_next(f.n);
        if (!L || (!L->count && !L->one && !L->rest))
            continue;
        uint64_t lv = wb_alloc(&W->w, sizeof(fs_level));
        size_t nlit = 0;
        if (!lv || (!level_begin(W, lv, L, 0) && L->count) ||
            (L->count && sorted_entries(W, L, fs_table_cap(L->count, 0), &nlit) < 0) ||
            fs_grow(&stack, &cap, n + nlit + 2, sizeof(trie_frame)) < 0) {
            rc = FS_ENOMEM;
            break;
        }
        AT(&W->w, off - sizeof(fs_link), fs_link)->next = (fs_level *)(uintptr_t)lv;
        /* popped in the order: literal children (writing order), one, rest */
        if (L->rest)
            stack[n++] = (trie_frame){.n = L->rest, .parent = off, .lv = lv, .where = 2};
        if (L->one)
            stack[n++] = (trie_frame){.n = L->one, .parent = off, .lv = lv, .where = 1};
        for (size_t k = nlit; k-- > 0;)
            stack[n++] = (trie_frame){.n = W->sorted[k].node, .parent = off, .lv = lv, .len = W->sorted[k].len,
                                      .where = 0};
    }
    FS_FREE(stack);
    return rc == FS_OK ? root_off : 0;
}

static int write_locked(writer *W, const fs_sublist *sl)
{
    wb_alloc(&W->w, FS_IMG_OBJECTS);          /* header and root block, zeroed */
    if (W->w.oom)
        return FS_ENOMEM;
    uint64_t root = write_trie(W, sl->root);
    uint64_t lit = root ? wb_alloc(&W->w, sizeof(fs_level)) : 0;
    if (!lit || write_table(W, lit, &sl->literals, 0) < 0)
        return FS_ENOMEM;
    uint64_t shapes[FS_SHAPE_MAX];
    for (uint32_t j = 0; j < sl->shapes.n; j++) {
        const fs_shape *sh = sl->shapes.shape[j];
        shapes[j] = wb_alloc(&W->w, sizeof(fs_shape));
        if (!shapes[j] || write_table(W, shapes[j] + offsetof(fs_shape, table), &sh->table, 1) < 0)
            return FS_ENOMEM;
        fs_shape *y = AT(&W->w, shapes[j], fs_shape);
        y->onemask = sh->onemask;
        y->ntoks = sh->ntoks;
        y->rest = sh->rest;
        y->first_wild = sh->first_wild;
    }
    if (wb_alloc(&W->w, FS_SERIAL_TRAILER) == 0)      /* the checksum's room */
        return FS_ENOMEM;
    W->w.len -= FS_SERIAL_TRAILER;
    img_root *R = AT(&W->w, FS_SERIAL_HEADER, img_root);
    R->nodes = sl->nodes;
    R->root = root;
    R->literals = lit;
    R->objects_end = W->w.len;
    R->nshapes = sl->shapes.n;
    memcpy(R->shape, shapes, sizeof(uint64_t) * sl->shapes.n);
    memcpy(R->probe, sl->shapes.probe[0], sizeof(R->probe));
    unsigned char *h = (unsigned char *)W->w.p;
    fs_header_put(h, &(fs_file_header){.version = FS_IMAGE_VERSION,
                                       .flags = (uint16_t)fs_dialect_code(sl->dialect),
                                       .payload = W->w.len - FS_SERIAL_HEADER,
                                       .subs = sl->count,
                                       .literals = sl->literals.count,
                                       .nodes = sl->nodes});
    fs_le_put(h + W->w.len, fs_serial_checksum(h, W->w.len), FS_SERIAL_TRAILER);
    W->w.len += FS_SERIAL_TRAILER;
    return FS_OK;
}

/* What a keyed table holds beyond the capacity it is written at: removals
 * leave a table larger (it shrinks below 1/8 full only). */
static uint64_t level_excess(const fs_level *L, int half_full)
{
    uint32_t cap = fs_table_cap(L->count, half_full);
    return L->cap > cap ? fs_level_bytes(L, L->cap) - fs_level_bytes(L, cap) : 0;
}

/* About the size of sl's image, for the writer's first room: the image
 * holds the index's objects, so its size is about the index's memory (a
 * little under it for a built index), less what the keyed tables hold
 * beyond their written capacity; with a sixteenth more, so that an image
 * a little over it is rarely grown. */
static size_t image_size_about(const fs_sublist *sl)
{
    uint64_t extra = level_excess(&sl->literals, 0), m = sl->mem;
    for (uint32_t j = 0; j < sl->shapes.n; j++)
        extra += level_excess(&sl->shapes.shape[j]->table, 1);
    m = m > extra ? m - extra : 0;
    m += m / 16 + FS_IMG_OBJECTS + 4096;
    return m < SIZE_MAX ? (size_t)m : SIZE_MAX;
}

static void writer_free(writer *W)
{
    FS_FREE(W->sorted);
    FS_FREE(W->scratch);
    FS_FREE(W->counts);
}

/* Write sl's image into W (memory, or a file's pages).  FS_OK, FS_ENOMEM,
 * FS_EBADDATA (a damaged opened image). */
static int write_image(fs_sublist *sl, writer *W)
{
    fs_brlock_rdlock(&sl->lock);
    int unchanged = sl->img.base && !sl->live;
    fs_brlock_rdunlock(&sl->lock);
    if (unchanged) {                    /* an unchanged image is its own image */
        if (fs_image_damaged(sl))
            return FS_EBADDATA;
        (void)wb_reserve(&W->w, sl->img.len);     /* its failure is wb_alloc's */
        uint64_t at = wb_alloc(&W->w, sl->img.len);
        if (W->w.oom)
            return FS_ENOMEM;
        memcpy(W->w.p + at, sl->img.base, sl->img.len);
        return FS_OK;
    }
    if (sl->img.base) {                 /* changed: the merged set, built */
        fs_sublist *merged;
        int rc = fs_image_thaw(sl, &merged);
        if (rc == FS_OK) {
            rc = write_image(merged, W);
            fs_sublist_free(merged);
        }
        return rc;
    }
    fs_brlock_rdlock_long(&sl->lock);
    W->sl = sl;
    int rc = wb_reserve(&W->w, image_size_about(sl));
    if (rc == FS_OK)
        rc = write_locked(W, sl);
    fs_brlock_rdunlock_long(&sl->lock);
    return rc < 0 || W->w.oom ? FS_ENOMEM : FS_OK;
}

int fs_image_write(fs_sublist *sl, char **out, size_t *len)
{
    writer W;
    memset(&W, 0, sizeof(W));
    int rc = write_image(sl, &W);
    writer_free(&W);
    if (rc < 0) {
        FS_FREE(W.w.p);
        *out = NULL;
        *len = 0;
        return rc;
    }
    *out = W.w.p;
    *len = W.w.len;
    return FS_OK;
}

int fs_image_save(fs_sublist *sl, const char *path, int durable)
{
    fs_filebuf fb;
    int rc = fs_filebuf_open(&fb, path);
    if (rc == FS_ENOSYS)                /* no file mappings: the caller writes fs_image_write's */
        return rc;
    if (rc != FS_OK)
        return FS_EIO;
    writer W;
    memset(&W, 0, sizeof(W));
    W.w.file = &fb;
    rc = write_image(sl, &W);
    writer_free(&W);
    if (fs_filebuf_close(&fb, rc == FS_OK ? W.w.len : 0, durable) != FS_OK && rc == FS_OK)
        rc = FS_EIO;
    return rc;
}

/* ============================================================ open */

int fs_image_is(const char *data, size_t len)
{
    return fs_header_is((const unsigned char *)data, len, FS_IMAGE_VERSION);
}

uint64_t fs_image_bytes(const fs_sublist *sl) { return sl->img.base ? sl->img.len : 0; }

/* Table slots fetched ahead by verify_table. */
#define VERIFY_AHEAD 24

typedef struct {
    fs_sublist *sl;
    fs_error *err;
    fs_tokens t;
    uint64_t nseen;           /* bytes of seen, a power of two */
    _Atomic uint8_t *seen;    /* a bit per 8 bytes of the image: nodes reached */
    int shared;               /* seen is marked by other threads too */
    uint64_t subs, nodes, literals;
} verifier;

static int vbad(verifier *v, const char *why, uint64_t pos)
{
    v->err->reason = why;
    v->err->pos = (size_t)pos;
    v->err->in_queue = 0;
    return FS_EBADDATA;
}

static uint32_t count_literal(const fs_tokens *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n; i++)
        n += t->tok[i].kind == FS_TOK_LITERAL;
    return n;
}


/* The node at offset ref, stored at `from` (a slot, a link), reached once
 * (a second link to it: damaged).  Refusals name the link's position. */
static int reach(verifier *v, const void *from, const fs_node *ref, const fs_node **out)
{
    uint64_t off = (uint64_t)(uintptr_t)ref;
    const fs_node *n = fs_img_node_checked(v->sl, off);
    if (!n)
        return vbad(v, "node outside the image", fs_img_off(v->sl, from));
    _Atomic uint8_t *w = &v->seen[off >> 6];
    uint8_t bit = (uint8_t)(1u << ((off >> 3) & 7)), was;
    if (v->shared) {                  /* of two threads reaching it, one sees the other's bit */
        was = atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
    } else {
        was = atomic_load_explicit(w, memory_order_relaxed);
        atomic_store_explicit(w, (uint8_t)(was | bit), memory_order_relaxed);
    }
    if (was & bit)
        return vbad(v, "node reached twice", fs_img_off(v->sl, from));
    v->nodes++;
    *out = n;
    return FS_OK;
}

/* A node's subscriptions as inserts leave them: plain ids strictly
 * increasing, queue groups in strictly increasing name order, each a
 * valid name, non-empty, members strictly increasing.  toklen: the
 * entry's token length, read once (fs_toklen_of; any for a trie node).
 * The payload is read through the accessors, each count once with what
 * it bounds: a file rewritten under the check gives a wrong verdict,
 * never a read outside the image (fs_once8, fs_layout.h). */
static int verify_subs(verifier *v, const fs_node *n, uint32_t toklen, int entry)
{
    const fs_sublist *sl = v->sl;
    uint64_t at = fs_img_off(sl, n);
    const int64_t *ids;
    uint32_t nids = fs_subs_of(sl, n, &ids), ng = fs_ngroups_of(sl, n);
    for (uint32_t i = 1; i < nids; i++)
        if (ids[i] <= ids[i - 1])
            return vbad(v, "ids not in strictly increasing order", at);
    v->subs += nids;
    const char *empty_why = "table entry without subscriptions";
    const char *why = entry ? fs_entry_subs_why(sl->dialect, n->tok, toklen, nids, ng, empty_why) : NULL;
    if (why)
        return vbad(v, why, at);
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (uint32_t gi = 0; gi < ng; gi++) {
        const fs_group *g = fs_group_of(sl, n, gi);
        const char *name;
        uint32_t name_len = fs_gname_of(sl, g, &name);
        fs_error qe;
        if (fs_check_queue(sl->dialect, name, name_len, &qe) < 0)
            return vbad(v, qe.reason, at);
        if (g->name_hash != fs_hash(name, name_len))
            return vbad(v, "queue name hash does not match", at);
        if (gi > 0 && !fs_gname_after(prev, prev_len, name, name_len))
            return vbad(v, FS_GROUPS_ORDER_WHY, at);
        prev = name;
        prev_len = name_len;
        const int64_t *m;
        uint32_t gn = fs_gids_of(sl, g, &m);
        for (uint32_t i = 1; i < gn; i++)
            if (m[i] <= m[i - 1])
                return vbad(v, "ids not in strictly increasing order", at);
        v->subs += gn;
    }
    return FS_OK;
}

/* Every slot of a table: count entries, each reached once, each found by
 * its own lookup (so at its place in the probe sequence, its key or token
 * hash right), with its bitmap bits set. */
/* Slots [lo, hi) of a table (L: its level, copied out of the image and
 * checked; sh: its shape, NULL for the literal table): each entry a valid
 * filter of the table's kind, keyed right, where its key leads, with its
 * subscriptions as inserts leave them.  *count: the occupied slots. */
static int verify_slots(verifier *v, const fs_level *L, const fs_shape *sh, uint32_t lo, uint32_t hi,
                        uint32_t *count)
{
    fs_sublist *sl = v->sl;
    const fs_slot *slots = fs_lv_slots(sl, L);
    for (uint32_t i = lo; i < hi; i++) {
        /* This writer lays a table's nodes out in slot order, but an
         * image of an older one (nodes in byte order) or of another
         * writer may put them anywhere: each node a cache miss.  Fetch
         * some ahead, so that misses overlap (this pass is memory-bound:
         * 2.6x faster on light's 2M filters, with byte-ordered nodes). */
        if (i + VERIFY_AHEAD < hi && slots[i + VERIFY_AHEAD].node) {
            uint64_t ahead = (uint64_t)(uintptr_t)slots[i + VERIFY_AHEAD].node;
            FS_PREFETCH(fs_ref_addr(sl, slots[i + VERIFY_AHEAD].node));
            FS_PREFETCH(fs_ref_addr(sl, slots[i + VERIFY_AHEAD].node) + 64);     /* its token's tail */
            FS_PREFETCH((const void *)&v->seen[(ahead >> 6) & (v->nseen - 1)]);
            if (L->filter)         /* its bitmap word (fs_lv_may_hold), from the slot's key */
                FS_PREFETCH(&fs_lv_filter(sl, L)[(slots[i + VERIFY_AHEAD].len & L->filter_mask) >> 6]);
        }
        if (!slots[i].node)
            continue;
        (*count)++;
        const fs_node *e;
        int rc = reach(v, &slots[i], slots[i].node, &e);
        if (rc < 0)
            return rc;
        uint64_t at = fs_img_off(sl, e);
        if (e->linked & FS_LINK_TRIE)
            return vbad(v, "trie node in a table", at);
        uint32_t elen = fs_toklen_of(sl, e);
        fs_error fe;
        if ((rc = fs_tokenize(sl->dialect, e->tok, elen, 1, &v->t, &fe)) < 0)
            return rc == FS_ENOMEM ? rc : vbad(v, "invalid filter in a table", at);
        fs_shape_of of;
        int shaped = fs_shape_classify(&v->t, &of);
        uint64_t key = shaped ? of.key : fs_tokens_key(v->t.tok, 0, v->t.n, 0);
        if (sh ? !shaped || of.ntoks != sh->ntoks || of.rest != sh->rest || of.onemask != sh->onemask
               : shaped || v->t.n != count_literal(&v->t))
            return vbad(v, sh ? "filter in the wrong shape's table" : "wildcard filter in the literal table", at);
        if (e->kind != (sh ? FS_NODE_SHAPED : FS_TOK_LITERAL) || e->hash != (uint32_t)key ||
            slots[i].hash != (uint32_t)key || slots[i].len != (uint32_t)(key >> 32))
            return vbad(v, "entry's key does not match its filter", at);
        if (fs_keyed_find(sl, L, key, e->tok, elen, e->tok + elen) != e || !fs_lv_may_hold(sl, L, key))
            return vbad(v, "entry not where its key leads", at);
        if ((rc = verify_subs(v, e, elen, 1)) < 0)
            return rc;
    }
    return FS_OK;
}

/* The level at Lm copied once and the copy checked (the file may be
 * rewritten under the check: fs_once8, fs_layout.h); the copy is read
 * from then on, the mapped level only names positions. */
static int level_copy(verifier *v, const fs_level *Lm, fs_level *out)
{
    memcpy(out, Lm, sizeof(*out));
    return fs_img_level_ok(v->sl, out) ? FS_OK : vbad(v, "level outside the image", fs_img_off(v->sl, Lm));
}

static int verify_table(verifier *v, const fs_level *Lm, const fs_shape *sh)
{
    fs_level lv;
    uint32_t count = 0;
    int rc = level_copy(v, Lm, &lv);
    if (rc == FS_OK)
        rc = verify_slots(v, &lv, sh, 0, lv.cap, &count);
    if (rc == FS_OK && count != lv.count)
        rc = vbad(v, "table count does not match its slots", fs_img_off(v->sl, Lm));
    return rc;
}

/* Is the trie filter of node n also kept by a shape table?  (Then it is
 * stored twice.)  Rebuilds the filter into buf. */
static int trie_filter_in_shape(verifier *v, const fs_node *n, char *buf)
{
    fs_sublist *sl = v->sl;
    size_t len = fs_path_bytes(sl, n);
    if (len > FS_MAX_SUBJECT)           /* buf's room: longer only if the file changed under the check */
        return vbad(v, "trie path too long or not reaching the root", fs_img_off(sl, n));
    fs_path_write(sl, n, buf, buf + len);
    fs_error fe;
    int rc = fs_tokenize(sl->dialect, buf, len, 1, &v->t, &fe);
    if (rc < 0)
        return rc == FS_ENOMEM ? rc : vbad(v, "invalid filter in the trie", fs_img_off(sl, n));
    if (count_literal(&v->t) == v->t.n)
        return vbad(v, "literal filter in the trie", fs_img_off(sl, n));
    fs_shape_of of;
    if (!fs_shape_classify(&v->t, &of))
        return FS_OK;
    const fs_shape *sh = fs_shape_find(sl, &of);
    if (sh && fs_keyed_find(sl, &sh->table, of.key, buf, (uint32_t)len, buf + len))
        return vbad(v, "filter both in a shape table and in the trie", fs_img_off(sl, n));
    return FS_OK;
}

/* A trie node to check, with the length of its filter (carried down: a
 * path rebuilt per node would cost O(depth^2) on a 30,000-level chain). */
typedef struct {
    const fs_node *n;
    size_t len;
} vframe;

/* The nodes still to check (verify_trie's explicit stack). */
typedef struct {
    vframe *f;
    size_t n, cap;
} vstack;

static int vpush(vstack *s, const fs_node *x, size_t len)
{
    if (s->n == s->cap && fs_grow(&s->f, &s->cap, s->n + 1, sizeof(vframe)) < 0)
        return FS_ENOMEM;
    s->f[s->n++] = (vframe){.n = x, .len = len};
    return FS_OK;
}

/* The literal children of x, in its level L (the checked copy of the
 * mapped Lm): each linked to x, a valid token found by its own lookup,
 * pushed with its filter's length (below: x's filter and a separator);
 * then the level's count against its slots. */
static int verify_literal_children(verifier *v, const fs_node *x, const fs_level *Lm, const fs_level *L,
                                   size_t below, vstack *stack)
{
    fs_sublist *sl = v->sl;
    const fs_slot *slots = fs_lv_slots(sl, L);
    uint32_t count = 0;
    for (uint32_t i = 0; i < L->cap; i++) {
        if (!slots[i].node)
            continue;
        count++;
        const fs_node *c;
        int rc = reach(v, &slots[i], slots[i].node, &c);
        if (rc < 0)
            return rc;
        uint32_t clen = fs_toklen_of(sl, c), chash = c->hash;
        fs_error fe;
        if (!(c->linked & FS_LINK_TRIE) || fs_up(sl, c) != x || c->kind != FS_TOK_LITERAL ||
            fs_check_literal(sl->dialect, (const unsigned char *)c->tok, clen, 0, &fe) < 0 ||
            chash != fs_hash(c->tok, clen) || slots[i].hash != chash || slots[i].len != clen ||
            fs_level_find(sl, L, c->tok, clen, chash) != c)
            return vbad(v, "trie node not where its parent and token lead", fs_img_off(sl, c));
        if ((rc = vpush(stack, c, below + clen)) < 0)
            return rc;
    }
    if (count != L->count)
        return vbad(v, "table count does not match its slots", fs_img_off(sl, Lm));
    return FS_OK;
}

/* The wildcard children of x (the one-level wildcard, then the rest
 * wildcard), as verify_literal_children's, reached through the mapped
 * level's fields. */
static int verify_wild_children(verifier *v, const fs_node *x, const fs_level *Lm, const fs_level *L,
                                size_t below, vstack *stack)
{
    fs_sublist *sl = v->sl;
    int rc = FS_OK;
    for (int w = 0; w < 2 && rc == FS_OK; w++) {
        const fs_node *ref = w ? L->rest : L->one, *c;
        if (!ref)
            continue;
        if ((rc = reach(v, w ? (const void *)&Lm->rest : (const void *)&Lm->one, ref, &c)) < 0)
            break;
        fs_tok_kind want = w ? FS_TOK_REST : FS_TOK_ONE;
        uint32_t clen = fs_toklen_of(sl, c);
        if (!(c->linked & FS_LINK_TRIE) || fs_up(sl, c) != x || c->kind != want ||
            fs_token_kind(sl->dialect, c->tok, clen) != want || c->hash != fs_hash(c->tok, clen))
            rc = vbad(v, "wildcard node not where its parent leads", fs_img_off(sl, c));
        else
            rc = vpush(stack, c, below + clen);
    }
    return rc;
}

/* The trie, depth first over an explicit stack: every node reached once,
 * linked to its parent, of the kind its place says, found by its own
 * lookup, holding subscriptions or children (inserts prune the rest). */
static int verify_trie(verifier *v)
{
    fs_sublist *sl = v->sl;
    const fs_dialect_rules *R = fs_rules(sl->dialect);
    vstack stack = {.f = NULL, .n = 0, .cap = 0};
    char *buf = FS_MALLOC(FS_MAX_SUBJECT + 1);
    int rc = buf ? vpush(&stack, sl->root, 0) : FS_ENOMEM;
    while (rc == FS_OK && stack.n) {
        vframe f = stack.f[--stack.n];
        const fs_node *x = f.n;
        uint64_t at = fs_img_off(sl, x);
        if (x != sl->root) {
            if (atomic_load(&sl->damaged) || f.len > R->max_len) {
                rc = vbad(v, "trie path too long or not reaching the root", at);
                break;
            }
            if (fs_has_subs(x) && ((rc = verify_subs(v, x, 0, 0)) < 0 || (rc = trie_filter_in_shape(v, x, buf)) < 0))
                break;
        }
        /* a child's filter: this one's, a separator (not below the root), its token */
        size_t below = x == sl->root ? 0 : f.len + 1;
        const fs_level *Lm = fs_down(sl, x);
        if (!Lm) {
            if (atomic_load(&sl->damaged))
                rc = vbad(v, "level outside the image", at);
            else if (x != sl->root && !fs_has_subs(x))
                rc = vbad(v, "empty trie node", at);
            continue;
        }
        fs_level lv;                    /* a checked copy, as verify_table's */
        memcpy(&lv, Lm, sizeof(lv));
        if (!fs_img_level_ok(sl, &lv)) {
            rc = vbad(v, "level outside the image", at);
            break;
        }
        const fs_level *L = &lv;
        if (x != sl->root && !fs_has_subs(x) && !L->count && !L->one && !L->rest) {
            rc = vbad(v, "empty trie node", at);
            break;
        }
        if (x->kind == FS_TOK_REST && !R->rest_anywhere && (L->count || L->one || L->rest)) {
            rc = vbad(v, "rest wildcard with children", at);
            break;
        }
        if ((rc = verify_literal_children(v, x, Lm, L, below, &stack)) == FS_OK)
            rc = verify_wild_children(v, x, Lm, L, below, &stack);
    }
    FS_FREE(stack.f);
    FS_FREE(buf);
    return rc;
}

/* Every invariant of docs/FORMAT.md, "Invariants of a mapped image". */
/* seen for sl's image, zeroed, with the root marked (it was reached at
 * open); FS_ENOMEM. */
static int seen_init(verifier *v)
{
    size_t seen_bytes = 64;
    while (seen_bytes < (size_t)(v->sl->img.len >> 6) + 1)
        seen_bytes *= 2;
    v->nseen = seen_bytes;
    v->seen = FS_MALLOC(seen_bytes);
    if (!v->seen)
        return FS_ENOMEM;
    memset((void *)v->seen, 0, seen_bytes);
    uint64_t ro = fs_img_off(v->sl, v->sl->root);
    v->seen[ro >> 6] = (uint8_t)(1u << ((ro >> 3) & 7));
    return FS_OK;
}

static int root_ok(verifier *v)
{
    const fs_sublist *sl = v->sl;
    if (!(sl->root->linked & FS_LINK_TRIE) || fs_up(sl, sl->root) || fs_has_subs(sl->root) || sl->root->toklen)
        return vbad(v, "the trie's root is not a bare root node", fs_img_off(sl, sl->root));
    return FS_OK;
}

/* Shape j's own fields, as fs_shape_create leaves them, in canonical order
 * after shape j - 1, and not empty. */
static int shape_ok(verifier *v, uint32_t j)
{
    const fs_sublist *sl = v->sl;
    const fs_shape *sh = sl->shapes.shape[j];
    uint64_t at = fs_img_off(sl, sh);
    fs_shape_of of = {.onemask = sh->onemask, .ntoks = sh->ntoks, .rest = sh->rest, .key = 0};
    if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->ntoks < 64 && sh->onemask >> sh->ntoks) ||
        (!sh->onemask && !sh->rest) || sh->first_wild != ((sh->onemask & 1) || (sh->rest && sh->ntoks == 0)))
        return vbad(v, "invalid shape", at);
    if (j && !fs_shape_before(sl->shapes.shape[j - 1], &of))
        return vbad(v, "shapes not in canonical order", at);
    if (!sh->table.count)
        return vbad(v, "empty shape", at);
    return FS_OK;
}

/* What follows the tables: the probe sets, the trie, the counts. */
static int verify_rest(verifier *v)
{
    fs_sublist *sl = v->sl;
    fs_file_header hd;
    fs_header_read((const unsigned char *)sl->img.base, &hd);
    uint64_t probe[FS_SHAPE_MAX_TOKENS + 2];
    fs_shapes_probes(sl, probe);
    if (memcmp(probe, sl->shapes.probe[0], sizeof(probe)) != 0)
        return vbad(v, "probe sets do not match the shapes", FS_SERIAL_HEADER);
    int rc = verify_trie(v);
    if (rc == FS_OK && v->subs != hd.subs)
        rc = vbad(v, "subscription count does not match the header", FS_HDR_SUBS);
    if (rc == FS_OK && v->literals != hd.literals)
        rc = vbad(v, "literal count does not match the header", FS_HDR_LITERALS);
    if (rc == FS_OK && v->nodes != sl->nodes)
        rc = vbad(v, "node count does not match the header", FS_HDR_NODES);
    if (rc == FS_OK && atomic_load(&sl->damaged))
        rc = vbad(v, "offset outside the image", 0);
    return rc;
}

/* Every invariant, in one thread, in the order docs/FORMAT.md lists them:
 * the first broken one is the error. */
static int verify_in_order(fs_sublist *sl, fs_error *err)
{
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = sl;
    v.err = err;
    fs_tokens_init(&v.t);
    int rc = seen_init(&v);
    if (rc == FS_OK)
        rc = root_ok(&v);
    if (rc == FS_OK)
        rc = verify_table(&v, sl->lit, NULL);
    v.literals = v.nodes;
    for (uint32_t j = 0; j < sl->shapes.n && rc == FS_OK; j++)
        if ((rc = shape_ok(&v, j)) == FS_OK)
            rc = verify_table(&v, &sl->shapes.shape[j]->table, sl->shapes.shape[j]);
    if (rc == FS_OK)
        rc = verify_rest(&v);
    fs_tokens_free(&v.t);
    FS_FREE((void *)v.seen);
    return rc;
}

/* ---- the tables on several threads
 *
 * The tables hold almost every node, and their entries are independent:
 * their slots are cut into units that threads take one by one (the
 * process's worker pool, fs_pool.h, and the opening thread), each with a
 * verifier of its own and the one shared seen bitmap, marked atomically.
 * The checksum (a pending one) runs beside them, on the first worker.
 * This pass proves an image good; it does not name what is wrong with a
 * bad one.  Where any unit fails, whatever the reason, the whole check
 * runs again in one thread (verify_in_order), so that the error is the
 * one the order of the checks gives, whatever the threads' timing. */

/* Slots of a unit; and below this many bytes an image is checked in one
 * thread (the threads' hand-over would cost more than they gain). */
#define VERIFY_UNIT_SLOTS 16384
size_t fs_image_parallel_min = (size_t)16 << 20;

typedef struct {
    uint32_t table, lo, hi;
} vunit;

typedef struct {
    fs_pool_task task;
    fs_sublist *sl;
    _Atomic uint8_t *seen;
    uint64_t nseen;
    const fs_level *levels;           /* the tables' checked copies: 0 the literal table, 1 + j shape j */
    const vunit *units;
    uint32_t *counts;                 /* each unit's occupied slots */
    size_t nunits;
    atomic_size_t next;               /* the next unit to take */
    atomic_int failed;
    atomic_uint_fast64_t subs, nodes;
    int sum_pending, sum_done;        /* sum_done: set by the worker of index 0, read after the join */
    uint64_t sum;
} vjob;

static void vjob_work(vjob *J)
{
    fs_error e;
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = J->sl;
    v.err = &e;
    v.seen = J->seen;
    v.nseen = J->nseen;
    v.shared = 1;
    fs_tokens_init(&v.t);
    for (;;) {
        size_t u = atomic_fetch_add(&J->next, 1);
        if (u >= J->nunits || atomic_load_explicit(&J->failed, memory_order_relaxed))
            break;
        const vunit *U = &J->units[u];
        uint32_t c = 0;
        const fs_shape *sh = U->table ? J->sl->shapes.shape[U->table - 1] : NULL;
        if (verify_slots(&v, &J->levels[U->table], sh, U->lo, U->hi, &c) < 0) {
            atomic_store(&J->failed, 1);
            break;
        }
        J->counts[u] = c;
    }
    atomic_fetch_add(&J->subs, v.subs);
    atomic_fetch_add(&J->nodes, v.nodes);
    fs_tokens_free(&v.t);
}

static void vjob_run(void *arg, unsigned index)
{
    vjob *J = arg;
    if (index == 0 && J->sum_pending) {
        const char *h = J->sl->img.base;
        J->sum = fs_serial_checksum(h, J->sl->img.len - FS_SERIAL_TRAILER);
        J->sum_done = 1;
    }
    vjob_work(J);
}

/* The image's checksum: FS_OK, or FS_EBADDATA naming it.  sum: of the
 * bytes before it (computed here when *have is 0). */
static int checksum_check(const char *data, size_t len, const uint64_t *sum, fs_error *err)
{
    uint64_t got = sum ? *sum : fs_serial_checksum(data, len - FS_SERIAL_TRAILER);
    if (fs_le_get((const unsigned char *)data + len - FS_SERIAL_TRAILER, FS_SERIAL_TRAILER) == got)
        return FS_OK;
    err->reason = "checksum mismatch";      /* of [0, len - 8): what it sums ends here */
    err->pos = len - FS_SERIAL_TRAILER;
    err->in_queue = 0;
    return FS_EBADDATA;
}

/* 1: not proven good (verify_in_order says why), else as verify_in_order.
 * *sum_pending: the checksum is to be checked too (here, beside the
 * tables); cleared once it has been. */
static int verify_threads(fs_sublist *sl, unsigned threads, int *sum_pending, fs_error *err)
{
    vjob J;
    memset(&J, 0, sizeof(J));
    fs_level levels[1 + FS_SHAPE_MAX];
    verifier v;
    memset(&v, 0, sizeof(v));
    v.sl = sl;
    v.err = err;
    fs_tokens_init(&v.t);
    vunit *units = NULL;
    uint32_t *counts = NULL;
    int rc = seen_init(&v) == FS_OK && root_ok(&v) == FS_OK && level_copy(&v, sl->lit, &levels[0]) == FS_OK ? FS_OK : 1;
    size_t nunits = rc == FS_OK ? (levels[0].cap + VERIFY_UNIT_SLOTS - 1) / VERIFY_UNIT_SLOTS : 0;
    for (uint32_t j = 0; j < sl->shapes.n && rc == FS_OK; j++) {
        if (shape_ok(&v, j) != FS_OK || level_copy(&v, &sl->shapes.shape[j]->table, &levels[1 + j]) != FS_OK)
            rc = 1;
        else
            nunits += (levels[1 + j].cap + VERIFY_UNIT_SLOTS - 1) / VERIFY_UNIT_SLOTS;
    }
    if (rc == FS_OK) {
        units = FS_MALLOC(sizeof(vunit) * (nunits ? nunits : 1));
        counts = FS_MALLOC(sizeof(uint32_t) * (nunits ? nunits : 1));
        rc = units && counts ? FS_OK : 1;
    }
    if (rc == FS_OK) {
        size_t k = 0;
        for (uint32_t t = 0; t <= sl->shapes.n; t++)
            for (uint32_t lo = 0; lo < levels[t].cap; lo += VERIFY_UNIT_SLOTS)
                units[k++] = (vunit){.table = t, .lo = lo,
                                 .hi = levels[t].cap - lo < VERIFY_UNIT_SLOTS ? levels[t].cap : lo + VERIFY_UNIT_SLOTS};
        J.task.fn = vjob_run;
        J.task.arg = &J;
        J.sl = sl;
        J.seen = v.seen;
        J.nseen = v.nseen;
        J.levels = levels;
        J.units = units;
        J.counts = counts;
        J.nunits = nunits;
        J.sum_pending = *sum_pending;
        int posted = fs_pool_submit(&J.task, threads - 1) == FS_OK;
        vjob_work(&J);                          /* the opening thread takes units too */
        if (posted)
            fs_pool_join(&J.task);
        if (*sum_pending) {
            rc = checksum_check(sl->img.base, sl->img.len, J.sum_done ? &J.sum : NULL, err);
            *sum_pending = 0;
        }
        if (rc == FS_OK && atomic_load(&J.failed))
            rc = 1;
        if (rc == FS_OK) {
            uint32_t got[1 + FS_SHAPE_MAX] = {0};
            for (size_t u = 0; u < nunits; u++)
                got[units[u].table] += counts[u];
            for (uint32_t t = 0; t <= sl->shapes.n && rc == FS_OK; t++)
                if (got[t] != levels[t].count)
                    rc = 1;
            v.subs = atomic_load(&J.subs);
            v.nodes = atomic_load(&J.nodes);
            v.literals = got[0];
        }
    }
    if (rc == FS_OK)
        rc = verify_rest(&v);
    fs_tokens_free(&v.t);
    FS_FREE((void *)v.seen);
    FS_FREE(units);
    FS_FREE(counts);
    return rc;
}

/* Every invariant (FS_VERIFY_FULL), on up to `threads` threads where the
 * image is big enough; sum_pending: the checksum too (the caller deferred
 * it, to run beside the tables).  A mismatched checksum is the error
 * whatever else is wrong, as when it is checked first. */
static int verify_image(fs_sublist *sl, unsigned threads, int sum_pending, fs_error *err)
{
    int rc = 1;
    if (threads > 1 && sl->img.len >= fs_image_parallel_min)
        rc = verify_threads(sl, threads, &sum_pending, err);
    if (rc != 1)
        return rc;
    if (sum_pending && (rc = checksum_check(sl->img.base, sl->img.len, NULL, err)) < 0)
        return rc;
    return verify_in_order(sl, err);
}

/* Copy the literal table's level and the shapes out of the mapping into
 * sl (check_and_copy says why), checking the copies as the open checked the
 * mapping.  FS_OK, FS_ENOMEM, or FS_EBADDATA when the copy differs from
 * what was checked (the file changed meanwhile). */
static int copy_tables(fs_sublist *sl)
{
    memcpy(&sl->literals, sl->lit, sizeof(fs_level));
    if (!fs_img_level_ok(sl, &sl->literals) || !(sl->literals.filter || !sl->literals.cap))
        return FS_EBADDATA;
    sl->lit = &sl->literals;
    for (uint32_t j = 0; j < sl->shapes.n; j++) {
        fs_shape *sh = fs_slab_alloc(&sl->slab, sizeof(fs_shape));
        if (!sh)
            return FS_ENOMEM;
        memcpy(sh, sl->shapes.shape[j], sizeof(fs_shape));
        sl->shapes.shape[j] = sh;
        if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->onemask >> sh->ntoks) ||
            (!sh->table.filter && sh->table.cap) || !fs_img_level_ok(sl, &sh->table))
            return FS_EBADDATA;
    }
    fs_shapes_hide_probes(&sl->shapes);      /* from the copies, as checked */
    return FS_OK;
}

/* Refuse the image for `why` at byte at -- or for its checksum, when the
 * check of the checksum was put off (sum_pending) and it does not match:
 * a checksum checked first would have been the error. */
static int refuse(const char *data, size_t len, int sum_pending, const char *why, size_t at, fs_error *err)
{
    if (sum_pending && checksum_check(data, len, NULL, err) < 0)
        return FS_EBADDATA;
    err->reason = why;
    err->pos = at;
    err->in_queue = 0;
    return FS_EBADDATA;
}

/* How version 3 refuses a header (docs/FORMAT.md, "Invariants of an
 * image", 1): a flag outside the dialect's bits is an unknown dialect. */
static const fs_header_rules V3_HEADER = {
    .min_len = FS_IMG_OBJECTS + FS_SERIAL_TRAILER,
    .vmin = FS_IMAGE_VERSION,
    .vmax = FS_IMAGE_VERSION,
    .short_why = "image shorter than its header and root block",
    .magic_why = "bad magic",
    .version_why = "not a version 3 image",
    .flags_why = "unknown dialect",
    .dialect_why = "unknown dialect",
    .reserved_why = "reserved field not zero",
};

/* The refusals of fs_image_open's steps: each step's data, len, err and
 * sum_pending (0 until the header says whether the checksum is put off). */
#define FAIL(why, at) return refuse(data, len, sum_pending, (why), (at), err)

/* The header and the root block, before anything is mapped: this host and
 * this buffer can map the image, the header's fields are known and agree
 * with the image's size, the root block's counts are bounded.  The
 * checksum is checked here, or put off (*sum_pending_out) when a full
 * check on threads will run it beside the tables'. */
static int check_header(const char *data, size_t len, int verify, unsigned threads, fs_file_header *hd,
                        fs_dialect *d, img_root *R, int *sum_pending_out, fs_error *err)
{
    const unsigned char *h = (const unsigned char *)data;
    int sum_pending = 0;
    if (!host_little_endian())
        FAIL("a version 3 image maps only on little-endian hosts", FS_HDR_VERSION);
    if (((uintptr_t)data & 7) != 0)
        FAIL("image not 8-byte aligned in memory", 0);
    if (fs_header_get(h, len, &V3_HEADER, hd, d, err) < 0)
        return FS_EBADDATA;
    uint64_t P = hd->payload;
    if (P != len - FS_SERIAL_HEADER - FS_SERIAL_TRAILER)
        FAIL("payload length does not match the image's size", FS_HDR_PAYLOAD);
    /* A full check on threads puts the checksum off, to run beside the
     * tables' check (verify_image); every refusal from here checks it
     * first (refuse). */
    sum_pending = verify == FS_VERIFY_FULL && threads > 1 && len >= fs_image_parallel_min;
    *sum_pending_out = sum_pending;
    if (verify != FS_VERIFY_NONE && !sum_pending && checksum_check(data, len, NULL, err) < 0)
        return FS_EBADDATA;
    memcpy(R, h + FS_SERIAL_HEADER, sizeof(*R));
    if (R->objects_end != FS_SERIAL_HEADER + P)
        FAIL("objects' end does not match the payload", FS_SERIAL_HEADER);
    if (R->nshapes > FS_SHAPE_MAX)
        FAIL("more filter shapes than an index holds", FS_SERIAL_HEADER);
    uint64_t known = R->nshapes == 64 ? ~0ull : (1ull << R->nshapes) - 1;
    for (uint32_t k = 0; k < FS_SHAPE_MAX_TOKENS + 2; k++)
        if ((R->probe[k] & ~known) || fs_popcount64(R->probe[k]) > FS_SHAPE_MAX_PROBES)
            FAIL("probe set names a shape the image lacks", FS_SERIAL_HEADER);
    if (hd->nodes != R->nodes)
        FAIL("node count does not match the header", FS_HDR_NODES);
    /* Walks bound their work by the node count (a loop in a damaged image
     * stops there): it cannot exceed what the image could hold. */
    if (R->nodes > len / sizeof(fs_node))
        FAIL("node count exceeds what the image could hold", FS_HDR_NODES);
    return FS_OK;
}

/* Map sl (new, without a root) onto the image: the root block's offsets
 * (root node, literal table, shapes) inside the image and the shapes'
 * fields in range, then sl's root, tables, counts.  NULL, or why the
 * root block is refused (at FS_SERIAL_HEADER); sl is unchanged then but
 * for img and the shapes checked so far (the caller frees it). */
static const char *map_sections(fs_sublist *sl, const char *data, size_t len, const fs_file_header *hd,
                                const img_root *R)
{
    sl->img.base = data;
    sl->img.len = len;
    sl->img.nodes_end = R->objects_end;
    const fs_node *root = fs_img_node_checked(sl, R->root);
    const fs_level *lit = fs_img_level_checked(sl, R->literals);
    if (!(root && (root->linked & FS_LINK_TRIE) && lit && (lit->filter || !lit->cap)))
        return "root block's offsets outside the image";
    for (uint32_t j = 0; j < R->nshapes; j++) {
        if (!fs_img_holds(sl, R->shape[j], sizeof(fs_shape)) ||
            !fs_img_level_checked(sl, R->shape[j] + offsetof(fs_shape, table)))
            return "root block's offsets outside the image";
        const fs_shape *sh = (const fs_shape *)(const void *)(data + R->shape[j]);
        /* the walk derives keys from these without looking further: they
         * index arrays of FS_SHAPE_MAX_TOKENS + 1 */
        if (sh->ntoks > FS_SHAPE_MAX_TOKENS || sh->rest > 1 || (sh->onemask >> sh->ntoks) ||
            (!sh->table.filter && sh->table.cap))
            return "invalid shape";
        sl->shapes.shape[j] = (fs_shape *)(uintptr_t)sh;
    }
    sl->root = (fs_node *)(uintptr_t)root;
    sl->lit = lit;
    sl->shapes.n = (uint32_t)R->nshapes;
    memcpy(sl->shapes.probe[0], R->probe, sizeof(R->probe));
    fs_shapes_hide_probes(&sl->shapes);      /* in memory only: the '$' topics' sets */
    sl->count = hd->subs;
    sl->nodes = R->nodes;
    return NULL;
}

/* The mapped sl's full check (verify FS_VERIFY_FULL), then its tables
 * copied out of the mapping.  FS_OK, or the error (err set); the caller
 * frees sl then. */
static int check_and_copy(fs_sublist *sl, int verify, unsigned threads, int sum_pending, fs_error *err)
{
    if (verify == FS_VERIFY_FULL) {
        int rc = verify_image(sl, threads, sum_pending, err);
        if (rc < 0)
            return rc;
    }
    /* Every walk reads the literal table's and the shapes' fields (their
     * caps, masks, offsets, token counts) again and again: they are
     * copied out of the mapping here, once, and the copies checked, so a
     * file rewritten in place under the mapping cannot change them between
     * a check and a use (fs_once8 in fs_layout.h says why).  The copies
     * live in the index's slab, freed with it. */
    int rc = copy_tables(sl);
    if (rc == FS_EBADDATA) {
        err->reason = "root block's offsets outside the image";
        err->pos = FS_SERIAL_HEADER;
    }
    return rc;
}

int fs_image_open(const char *data, size_t len, int verify, unsigned threads, fs_sublist **out, fs_error *err)
{
    *out = NULL;
    err->in_queue = 0;
    fs_dialect d = FS_NATS;       /* check_header's when it succeeds (gcc -O1 cannot tell) */
    fs_file_header hd;
    img_root R;
    int sum_pending = 0;
    int rc = check_header(data, len, verify, threads, &hd, &d, &R, &sum_pending, err);
    if (rc < 0)
        return rc;
    fs_sublist *sl = fs_sublist_new(d);
    if (!sl)
        return FS_ENOMEM;
    fs_node_free(sl, sl->root);           /* the image has its own */
    sl->root = NULL;
    const char *why = map_sections(sl, data, len, &hd, &R);
    if (why) {
        fs_sublist_free(sl);
        FAIL(why, FS_SERIAL_HEADER);
    }
    /* The root's '$' levels (MQTT), apart in memory, as inserts keep them */
    if ((rc = check_and_copy(sl, verify, threads, sum_pending, err)) < 0 || (rc = fs_trie_hide_roots(sl)) < 0) {
        fs_sublist_free(sl);
        return rc;
    }
    *out = sl;
    return FS_OK;
}
#undef FAIL
