/* fs_image_write.c - the index written as a mapped image (sublist.h;
 * docs/FORMAT.md, version 4): the index's structs laid out in one buffer,
 * or a file's pages, with offsets for pointers, every table in one order
 * that depends only on its entries; a large table on the worker pool's
 * threads (table_threads), the same bytes.  The reader and its checks are
 * fs_image.c and fs_image_verify.c; the root block's layout, shared with
 * the reader, fs_image_root.h. */
#include "fs_image.h"
#include "fs_image_write.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_checksum.h"
#include "fs_header.h"
#include "fs_image_root.h"
#include "fs_index.h"
#include "fs_pool.h"
#include "fs_sys.h"
#include "fs_tuning.h"
#include "sublist.h"

/* The image being written.  An object is written only where it is not
 * zero, so the room wb_alloc hands out reads as zeros: a file's fresh
 * bytes are zeros, memory of our own is zeroed as it is obtained (in one
 * call for all of it, not object by object), and a caller's memory
 * (fs_image_write_in: the bytes object to_bytes returns), which holds
 * anything, is cleared by wb_alloc as it hands it out -- in order, a
 * step ahead of the writes, so that its pages are touched once, not in a
 * pass of their own. */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
    int part;             /* a part of another writer's bytes (fs_imgw_part): never grows */
    int borrowed;         /* p is the caller's: never freed, grown or moved; past zeroed, anything */
    size_t zeroed;        /* borrowed: bytes [len, zeroed) are zeros already (wb_alloc) */
    fs_filebuf *file;     /* non-NULL: the bytes are this file's pages */
    int writeback;        /* the file is saved durably: start writing what is final */
} wbuf;

/* Bytes [from, to) of the image are final: where the file is saved
 * durably, start writing them to disk now, so that the disk works while
 * the rest is written and the close's fsync has less left to wait for. */
static void wb_settled(const wbuf *wb, size_t from, size_t to)
{
    if (wb->file && wb->writeback && to > from)
        fs_filebuf_start_writeback(wb->file, from, to);
}

/* How much of a table's nodes is handed to the disk at a time. */
#define WRITEBACK_STEP ((size_t)8 << 20)

/* The room of a borrowed buffer too small for need bytes: memory of our
 * own, zeroed, with what was written so far.  FS_OK, or -1 (wb->oom). */
static int wb_unborrow(wbuf *wb, size_t need)
{
    size_t ncap = wb->cap > 4096 ? wb->cap : 4096;
    while (ncap < need)
        ncap *= 2;
    char *np = FS_CALLOC(ncap, 1);
    if (!np)
        return wb->oom = 1, -1;
    fs_pages_huge(np, ncap);
    if (wb->len)
        memcpy(np, wb->p, wb->len);
    wb->p = np;
    wb->cap = ncap;
    wb->borrowed = 0;
    return FS_OK;
}

/* Make the buffer at least need bytes.  FS_OK, or -1 (wb->oom). */
static int wb_grow(wbuf *wb, size_t need)
{
    if (wb->part)
        return wb->oom = 1, -1;
    if (wb->file) {
        if (fs_filebuf_grow(wb->file, need) != FS_OK)
            return wb->oom = 1, -1;
        wb->p = wb->file->p;
        wb->cap = wb->file->cap;
        return FS_OK;
    }
    if (wb->borrowed)
        return wb_unborrow(wb, need);
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
 * cut to the image's at the end), its pages made ready in one call up to
 * likely, the size expected (past it, as they are written).  A caller's
 * room (borrowed) is kept as it is.  FS_OK, or -1 (wb->oom). */
static int wb_reserve(wbuf *wb, size_t size, size_t likely)
{
    if (wb->cap >= size)
        return FS_OK;
    if (wb->file) {             /* only the likely part populated: the margin is zeroed only if used */
        if (fs_filebuf_grow_populating(wb->file, size, likely) != FS_OK)
            return wb->oom = 1, -1;
        wb->p = wb->file->p;
        wb->cap = wb->file->cap;
        return FS_OK;
    }
    if (wb->borrowed)           /* the caller's room: left only if the image outgrows it (wb_alloc) */
        return FS_OK;
    char *np = FS_CALLOC(size, 1);
    if (!np)
        return wb->oom = 1, -1;
    fs_pages_huge(np, size);
    FS_FREE(wb->p);         /* nothing written yet */
    wb->p = np;
    wb->cap = size;
    return FS_OK;
}

/* How much of a borrowed buffer is cleared at a time, ahead of the
 * writes: a call of memset an object (about two an entry) was an eighth
 * of to_bytes' instructions.  A step of about ten entries, and under the
 * size from which glibc's memset turns to `rep stosb` (2 KiB): no faster
 * here, and counted a byte an instruction under callgrind, which would
 * hide what the step saves from bench/cg_image.py. */
#define ZERO_STEP ((size_t)1 << 10)

/* A borrowed buffer's bytes up to at least `to` cleared, a step at a time
 * (never past its room). */
static void wb_zero_to(wbuf *wb, size_t to)
{
    size_t end = to + ZERO_STEP < wb->cap ? to + ZERO_STEP : wb->cap;
    memset(wb->p + wb->zeroed, 0, end - wb->zeroed);
    wb->zeroed = end;
}

/* Bytes [lo, hi) of the room (cut to it) made ready before anything is
 * written there, so that a thread can do it beside other work: a file's
 * pages populated (fs_filebuf_populate), a borrowed buffer zeroed (its
 * zeros are the writer's to make; in wb_zero_to's steps), memory of our
 * own (calloc's fresh pages, zeros already) touched a byte a page.  The
 * caller of a borrowed buffer's says how far it is zeroed (wb->zeroed). */
static void wb_ready(const wbuf *wb, size_t lo, size_t hi)
{
    if (hi > wb->cap)
        hi = wb->cap;
    if (wb->file) {
        fs_filebuf_populate(wb->file, lo, hi);
    } else if (wb->borrowed) {
        for (size_t at = lo; at < hi; at += ZERO_STEP)
            memset(wb->p + at, 0, hi - at < ZERO_STEP ? hi - at : ZERO_STEP);
    } else {
        volatile char *p = wb->p;
        for (size_t at = lo; at < hi; at += 4096)
            p[at] = 0;
    }
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
    if (wb->borrowed && at + size > wb->zeroed)
        wb_zero_to(wb, at + size);
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
    unsigned threads;         /* the process's, for a large table (write_table); 0 or 1: this one */
    const fs_level *pre_of;   /* the largest table, sorted already (write_built) into pre */
    fs_slot *pre;
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

/* Node n's payload written for its copy at off: its ids when more than
 * one (an array; the copy's subs.one its offset from the copy) and its
 * groups.  off, or 0 when out of memory. */
static uint64_t write_payload(writer *W, const fs_node *n, uint64_t off)
{
    if (n->nsubs > 1) {
        uint64_t at = put_bytes(W, fs_node_ids(n), sizeof(int64_t) * n->nsubs, sizeof(int64_t) * n->nsubs);
        if (!at)
            return 0;
        AT(&W->w, off, fs_node)->subs.one = (int64_t)(at - off);
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

/* A node (a trie node when trie: with its link, parent_off its parent's
 * offset) and its payload; its offset, 0 when out of memory.  The next
 * level is linked by the caller.  Copied into each caller: a table's
 * entry, nearly always one id and no groups, is written without a call
 * (a call an entry was a tenth of a save's instructions); the payload,
 * where there is one, by write_payload. */
FS_ALWAYS_INLINE uint64_t write_node(writer *W, const fs_node *n, uint64_t parent_off, int trie)
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
    x->subcap = n->nsubs;
    x->subs.one = n->nsubs == 1 ? fs_node_ids(n)[0] : 0;      /* more than one: write_payload's */
    if (trie)
        AT(&W->w, block, fs_link)->parent = (fs_node *)(uintptr_t)parent_off;
    return FS_LIKELY(n->nsubs <= 1 && !n->groups) ? off : write_payload(W, n, off);
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

/* ---- a large table on threads.  Its entries are cut into chunks that the
 * process's threads (the worker pool's and this one) take in turn; a
 * thread lays its chunk out (each node's bytes, so its offset from the
 * chunk's start: node_bytes), learns where the chunk starts once the
 * chunk before has, and writes it into a part of the writer's bytes of
 * its own (wb_part), its nodes still in its cache from the layout -- a
 * layout pass of its own, apart from the writing, read each node from
 * memory twice and was 14-16% of a threaded to_bytes (perf).  This thread
 * then places the slots: a slot needs only its entry's key and offset.
 * The bytes are the one-thread writer's: the same write_node at the same
 * offsets.  (The bulk builder, fs_build.c, writes its large tables into
 * parts too, through fs_imgw_part.) */

/* Writing a table on threads pays from this many entries (the tuning
 * table's image_write_par_entries), on a machine of more than one. */
static int on_threads(const writer *W, size_t n)
{
    return W->threads > 1 && fs_image_write_par_entries && n >= fs_image_write_par_entries;
}

/* Entries es[0..n) are written in turn, read where the index holds
 * them (anywhere in memory): entry k + 16's node, k + 8's payload, are
 * fetched as entry k is written. */
FS_ALWAYS_INLINE void fetch_ahead(const fs_slot *es, size_t k, size_t n)
{
    enum { AHEAD = 8 };
    if (k + 2 * AHEAD < n) {
        FS_PREFETCH(es[k + 2 * AHEAD].node);
        FS_PREFETCH((const char *)es[k + 2 * AHEAD].node + 64);
    }
    if (k + AHEAD < n) {          /* fetched by now: what it points to */
        const fs_node *a = es[k + AHEAD].node;
        if (a->subcap > 1)
            FS_PREFETCH(a->subs.many);
        if (a->groups)
            FS_PREFETCH(a->groups);
    }
}

/* The bytes write_node takes for table entry n and its payload (every
 * object a multiple of 8 bytes: they follow each other). */
FS_ALWAYS_INLINE uint64_t node_bytes(const fs_node *n)
{
    uint64_t b = sizeof(fs_node) + FS_TOK_ALLOC(n->toklen) + (n->nsubs > 1 ? sizeof(int64_t) * n->nsubs : 0);
    uint32_t ng = fs_ngroups(n);
    if (ng)
        b += fs_groups_bytes(ng);
    for (uint32_t i = 0; i < ng; i++) {
        const fs_group *g = fs_node_group(n, i);
        b += FS_TOK_ALLOC(g->name_len ? g->name_len : 1) + sizeof(int64_t) * g->n;
    }
    return b;
}
_Static_assert(sizeof(fs_node) % 8 == 0 && sizeof(fs_group) % 8 == 0 && sizeof(fs_groups) % 8 == 0,
               "node_bytes adds objects that wb_alloc aligns to 8");

/* Entries es[0..n) laid out from 0: entry k at off[k].  Their bytes. */
static uint64_t table_layout(const fs_slot *es, size_t n, uint64_t *off)
{
    enum { AHEAD = 16 };
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        if (k + 2 * AHEAD < n)
            FS_PREFETCH(es[k + 2 * AHEAD].node);
        if (k + AHEAD < n && es[k + AHEAD].node->groups)     /* fetched by now: its groups */
            FS_PREFETCH(es[k + AHEAD].node->groups);
        off[k] = at;
        at += node_bytes(es[k].node);
    }
    return at;
}

/* A part of w's bytes [at, end) (allocated in w, or room past its end that
 * no one else writes) for one thread's run of objects: it never grows (an
 * object past end fails it).  Bytes w has not zeroed (a borrowed buffer's)
 * are zeroed by the part as it allocates them, as w's own are. */
static void wb_part(wbuf *P, const wbuf *w, uint64_t at, uint64_t end)
{
    memset(P, 0, sizeof(*P));
    P->p = w->p;
    P->len = (size_t)at;
    P->cap = (size_t)end;
    P->part = 1;
    P->borrowed = w->borrowed;
    P->zeroed = w->borrowed && w->zeroed < end ? (w->zeroed > at ? w->zeroed : (size_t)at) : (size_t)end;
}

typedef struct {
    fs_pool_task task;
    const wbuf *w;
    const fs_slot *es;
    uint64_t *off;              /* entry k's offset */
    uint64_t *ends;             /* ends[c]: where chunk c - 1 ends (ends[0]: the first's start) */
    uint64_t room;              /* parts end by here (the writer's room); a chunk past it is not written */
    size_t n, chunk;
    size_t known;               /* ends[0..known] are known; under mu */
    atomic_size_t next;
    atomic_int failed;
    fs_mutex mu;
    fs_cond cv;
} table_job;

/* Chunk c laid out (at its start, once chunk c - 1's end is known) and
 * written, where it fits in the room. */
static void table_chunk(table_job *J, size_t c)
{
    size_t lo = c * J->chunk, hi = J->n - lo < J->chunk ? J->n : lo + J->chunk;
    uint64_t bytes = table_layout(J->es + lo, hi - lo, J->off + lo);
    fs_mutex_lock(&J->mu);
    while (J->known < c)                /* chunk c - 1 was taken before: it is running */
        fs_cond_wait(&J->cv, &J->mu);
    uint64_t at = J->ends[c];
    J->ends[c + 1] = at + bytes;
    J->known = c + 1;
    fs_cond_broadcast(&J->cv);
    fs_mutex_unlock(&J->mu);
    for (size_t k = lo; k < hi; k++)
        J->off[k] += at;
    if (at + bytes > J->room)
        return;                         /* this thread's caller writes it (table_threads) */
    writer P;
    memset(&P, 0, sizeof(P));
    wb_part(&P.w, J->w, at, at + bytes);
    for (size_t k = lo; k < hi; k++) {
        fetch_ahead(J->es, k, hi);
        if (write_node(&P, J->es[k].node, 0, 0) != J->off[k]) {
            atomic_store(&J->failed, 1);          /* cannot be: a size not as laid out */
            return;
        }
    }
    wb_settled(J->w, (size_t)at, (size_t)(at + bytes));      /* to disk now, where durable */
}

static void table_run(void *arg, unsigned index)
{
    table_job *J = arg;
    (void)index;
    for (size_t c; (c = atomic_fetch_add(&J->next, 1)) * J->chunk < J->n;)
        table_chunk(J, c);              /* every chunk taken is laid out: the next waits for it */
}

/* The entries the job's parts did not write (past the room, rare: the room
 * is about the image's size), from entry k on, by this thread, the room
 * growing as they are written.  FS_OK or FS_ENOMEM. */
static int table_rest(writer *W, const fs_slot *es, size_t k, size_t n, const uint64_t *off)
{
    for (; k < n; k++)
        if (write_node(W, es[k].node, 0, 0) != off[k])
            return FS_ENOMEM;
    return FS_OK;
}

/* Entries es[0..n) written on the writer's threads, this one among them,
 * then their slots placed.  Chunks of at most 2,048 entries (the
 * builder's), at least four a thread.  FS_OK or FS_ENOMEM. */
static int table_threads(writer *W, uint64_t lv_off, const fs_slot *es, size_t n, int marked)
{
    size_t chunk = n / (4 * (size_t)W->threads), nchunks;
    chunk = chunk < 1 ? 1 : chunk > 2048 ? 2048 : chunk;
    nchunks = (n + chunk - 1) / chunk;
    table_job J = {.task = {.fn = table_run}, .w = &W->w, .es = es, .n = n, .chunk = chunk, .room = W->w.cap};
    J.off = FS_MALLOC(sizeof(uint64_t) * n);
    J.ends = FS_MALLOC(sizeof(uint64_t) * (nchunks + 1));
    if (!J.off || !J.ends || W->w.oom) {
        FS_FREE(J.off);
        FS_FREE(J.ends);
        return W->w.oom = 1, FS_ENOMEM;
    }
    J.task.arg = &J;
    J.ends[0] = (W->w.len + 7) & ~(uint64_t)7;            /* where wb_alloc puts the first */
    atomic_init(&J.next, 0);
    atomic_init(&J.failed, 0);
    fs_mutex_init(&J.mu);
    fs_cond_init(&J.cv);
    int posted = fs_pool_submit(&J.task, W->threads - 1) == FS_OK;
    table_run(&J, 0);
    if (posted)
        fs_pool_join(&J.task);
    fs_cond_destroy(&J.cv);
    fs_mutex_destroy(&J.mu);
    size_t c = 0;                       /* the chunks written: those within the room */
    while (c < nchunks && J.ends[c + 1] <= J.room)
        c++;
    W->w.len = (size_t)J.ends[c];       /* theirs, written by the parts (and zeroed) */
    if (W->w.borrowed && W->w.zeroed < W->w.len)
        W->w.zeroed = W->w.len;
    int rc = atomic_load(&J.failed) ? FS_ENOMEM : table_rest(W, es, c * chunk, n, J.off);
    uint32_t next = 0;
    for (size_t k = 0; k < n && rc == FS_OK; k++) {
        fs_slot e = es[k];
        e.node = (fs_node *)(uintptr_t)J.off[k];
        place_entry(W, lv_off, e, &next, marked);
    }
    if (rc == FS_OK)
        atomic_fetch_add_explicit(&fs_image_write_threaded, 1, memory_order_relaxed);
    FS_FREE(J.off);
    FS_FREE(J.ends);
    return rc;
}

/* Entries es[0..n) written, each node then its slot, on this thread.
 * The next nodes are fetched ahead: the index holds them anywhere in
 * memory. */
static int table_here(writer *W, uint64_t lv_off, const fs_slot *es, size_t n, int marked)
{
    uint32_t next = 0;
    /* each node is final once written */
    size_t started = W->w.len;
    for (size_t k = 0; k < n; k++) {
        if (W->w.len - started >= WRITEBACK_STEP) {
            wb_settled(&W->w, started, W->w.len);
            started = W->w.len & ~(size_t)4095;    /* a page still being written goes next time */
        }
        fetch_ahead(es, k, n);
        fs_slot e = es[k];
        uint64_t eo = write_node(W, e.node, 0, 0);
        if (!eo)
            return FS_ENOMEM;
        e.node = (fs_node *)(uintptr_t)eo;
        place_entry(W, lv_off, e, &next, marked);
    }
    wb_settled(&W->w, started, W->w.len);
    return FS_OK;
}

/* A keyed table (the literal table, a shape's) into the level at lv_off:
 * each entry's node, then its slot, in writing order; a large one on
 * threads (table_threads). */
static int write_table(writer *W, uint64_t lv_off, const fs_level *L, int half_full)
{
    uint64_t slots = level_begin(W, lv_off, L, half_full);
    if (!L->count)
        return FS_OK;
    size_t n = L->count;
    if (!slots || (L != W->pre_of && sorted_entries(W, L, fs_table_cap(L->count, half_full), &n) < 0))
        return FS_ENOMEM;
    const fs_slot *es = L == W->pre_of ? W->pre : W->sorted;
    int marked = copy_bitmap(W, lv_off, L);
    /* the slots are final once the last entry is placed */
    size_t nodes_from = W->w.len;
    int rc = on_threads(W, n) ? table_threads(W, lv_off, es, n, marked) : table_here(W, lv_off, es, n, marked);
    wb_settled(&W->w, slots, nodes_from);
    return rc;
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

/* The fs_shape at `at` (its table written already) takes sh's fields. */
static void shape_fields(writer *W, uint64_t at, const fs_shape *sh)
{
    fs_shape *y = AT(&W->w, at, fs_shape);
    y->onemask = sh->onemask;
    y->ntoks = sh->ntoks;
    y->rest = sh->rest;
    y->first_wild = sh->first_wild;
}

/* The image's end: the checksum's room, the root block (T, and the probe
 * sets and shapes of `shapes`), the header and the checksum. */
static int write_end(writer *W, const fs_img_totals *T, const fs_shapes *shapes)
{
    if (wb_alloc(&W->w, FS_SERIAL_TRAILER) == 0)      /* the checksum's room */
        return FS_ENOMEM;
    W->w.len -= FS_SERIAL_TRAILER;
    img_root *R = AT(&W->w, FS_SERIAL_HEADER, img_root);
    R->nodes = T->nodes;
    R->root = T->root;
    R->literals = T->lit;
    R->objects_end = W->w.len;
    R->nshapes = shapes->n;
    memcpy(R->shape, T->shapes, sizeof(uint64_t) * shapes->n);
    memcpy(R->probe, shapes->probe[0], sizeof(R->probe));
    unsigned char *h = (unsigned char *)W->w.p;
    fs_header_put(h, &(fs_file_header){.version = FS_IMAGE_VERSION,
                                       .flags = (uint16_t)fs_dialect_code(T->dialect),
                                       .payload = W->w.len - FS_SERIAL_HEADER,
                                       .subs = T->subs,
                                       .literals = T->literals,
                                       .nodes = T->nodes});
    fs_le_put(h + W->w.len, fs_checksum_blocks(FS_IMAGE_VERSION, h, W->w.len, W->threads), FS_SERIAL_TRAILER);
    W->w.len += FS_SERIAL_TRAILER;
    return FS_OK;
}

void fs_image_as_version(char *img, size_t len, unsigned version, unsigned threads)
{
    unsigned char *h = (unsigned char *)img;
    if (fs_header_version(h) == version)
        return;
    fs_header_set_version(h, version);
    fs_le_put(h + len - FS_SERIAL_TRAILER, fs_checksum_blocks(version, h, len - FS_SERIAL_TRAILER, threads),
              FS_SERIAL_TRAILER);
}

static int write_locked(writer *W, const fs_sublist *sl)
{
    wb_alloc(&W->w, FS_IMG_OBJECTS);          /* header and root block, zeroed */
    if (W->w.oom)
        return FS_ENOMEM;
    fs_img_totals T = {.dialect = sl->dialect, .subs = sl->count, .literals = sl->literals.count,
                       .nodes = sl->nodes};
    T.root = write_trie(W, sl->root);
    wb_settled(&W->w, FS_IMG_OBJECTS, W->w.len);
    T.lit = T.root ? wb_alloc(&W->w, sizeof(fs_level)) : 0;
    if (!T.lit || write_table(W, T.lit, &sl->literals, 0) < 0)
        return FS_ENOMEM;
    for (uint32_t j = 0; j < sl->shapes.n; j++) {
        const fs_shape *sh = sl->shapes.shape[j];
        T.shapes[j] = wb_alloc(&W->w, sizeof(fs_shape));
        if (!T.shapes[j] || write_table(W, T.shapes[j] + offsetof(fs_shape, table), &sh->table, 1) < 0)
            return FS_ENOMEM;
        shape_fields(W, T.shapes[j], sh);
    }
    return write_end(W, &T, &sl->shapes);
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

/* The size expected, without image_size_about's margin (light's image is
 * 0.999 of the index's memory). */
static size_t image_size_likely(size_t about)
{
    return about / 17 * 16;
}

static void writer_free(writer *W)
{
    FS_FREE(W->pre);
    FS_FREE(W->sorted);
    FS_FREE(W->scratch);
    FS_FREE(W->counts);
}

/* The image's pages made ready on threads, in runs taken in turn
 * (wb_ready). */
#define READY_RUN ((size_t)4 << 20)
typedef struct {
    fs_pool_task task;
    const wbuf *w;
    size_t to;
    atomic_size_t next;
} ready_job;

static void ready_run(void *arg, unsigned index)
{
    ready_job *J = arg;
    (void)index;
    for (size_t lo; (lo = atomic_fetch_add(&J->next, 1) * READY_RUN) < J->to;)
        wb_ready(J->w, lo, J->to - lo < READY_RUN ? J->to : lo + READY_RUN);
}

/* The largest keyed table of sl (*half_full: a shape's). */
static const fs_level *largest_table(const fs_sublist *sl, int *half_full)
{
    const fs_level *big = &sl->literals;
    *half_full = 0;
    for (uint32_t j = 0; j < sl->shapes.n; j++)
        if (sl->shapes.shape[j]->table.count > big->count) {
            big = &sl->shapes.shape[j]->table;
            *half_full = 1;
        }
    return big;
}

/* Room for about `about` bytes, its first `likely` made ready by the pool's
 * threads while this one sorts table L into writing order (W->pre; the
 * sort reads only the index, the pages only the kernel and the writer's
 * zeros), then helps them.  Measured on 2M light-like filters, 2 threads:
 * the populating was 28% of save, the sort 12% (perf, cpu-clock); to_bytes'
 * first touch of its bytes 37%.  FS_OK or FS_ENOMEM. */
static int ready_beside_sort(writer *W, size_t about, size_t likely, const fs_level *L, int half_full)
{
    if (wb_reserve(&W->w, about, 0) < 0)
        return FS_ENOMEM;
    ready_job J = {.task = {.fn = ready_run}, .w = &W->w, .to = likely < W->w.cap ? likely : W->w.cap};
    J.task.arg = &J;
    atomic_init(&J.next, 0);
    int posted = fs_pool_submit(&J.task, W->threads - 1) == FS_OK;
    size_t n;
    int rc = sorted_entries(W, L, fs_table_cap(L->count, half_full), &n);
    ready_run(&J, 0);
    if (posted)
        fs_pool_join(&J.task);
    if (W->w.borrowed && J.to > W->w.zeroed)
        W->w.zeroed = J.to;
    if (rc == FS_OK) {                  /* the trie's levels sort into W->sorted meanwhile */
        W->pre = W->sorted;
        W->pre_of = L;
        W->sorted = NULL;
        W->cap_sorted = 0;
    }
    return rc;
}

/* Write the built index sl (its lock held) into W, room reserved first
 * at about its size.  FS_OK or FS_ENOMEM. */
static int write_built(writer *W, fs_sublist *sl)
{
    W->sl = sl;
    size_t about = image_size_about(sl), likely = image_size_likely(about);
    int half_full;
    const fs_level *big = largest_table(sl, &half_full);
    int rc = on_threads(W, big->count) ? ready_beside_sort(W, about, likely, big, half_full)
                                       : wb_reserve(&W->w, about, likely);
    return rc == FS_OK ? write_locked(W, sl) : rc;
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
        (void)wb_reserve(&W->w, sl->img.len, sl->img.len);     /* its failure is wb_alloc's */
        uint64_t at = wb_alloc(&W->w, sl->img.len);
        if (W->w.oom)
            return FS_ENOMEM;
        memcpy(W->w.p + at, sl->img.base, sl->img.len);
        /* (an image opened as version 3: written as the writers' version) */
        fs_image_as_version(W->w.p + at, sl->img.len, FS_IMAGE_VERSION, W->threads);
        return FS_OK;
    }
    fs_brlock_rdlock_long(&sl->lock);
    /* A built index whose filters sit where the set's rule puts them
     * (fs_shapes_choose: every set within the shape budget) is written as
     * it is; one placed otherwise (shapes past the budget kept first come
     * first served, a version 1-2 image's placement) and a changed image
     * are built again, placed by the rule, and that is written. */
    int placed_here = sl->img.base ? 0 : fs_shapes_placed_canonically(sl), rc = placed_here;
    if (placed_here == 1)
        rc = write_built(W, sl);
    fs_brlock_rdunlock_long(&sl->lock);
    if (placed_here == 0) {             /* the set, placed by the rule */
        fs_sublist *placed;
        if ((rc = fs_image_thaw(sl, &placed)) != FS_OK)
            return rc;
        fs_brlock_rdlock_long(&placed->lock);
        rc = write_built(W, placed);
        fs_brlock_rdunlock_long(&placed->lock);
        fs_sublist_free(placed);
    }
    return rc < 0 || W->w.oom ? FS_ENOMEM : FS_OK;
}

int fs_image_write_in(fs_sublist *sl, char *buf, size_t cap, char **out, size_t *len)
{
    writer W;
    memset(&W, 0, sizeof(W));
    W.threads = fs_index_threads();
    if (buf && ((uintptr_t)buf & 7) == 0) {      /* objects are stored 8-aligned */
        W.w.p = buf;
        W.w.cap = cap;
        W.w.borrowed = 1;           /* nothing of it zeroed yet: W.w.zeroed 0 */
    }
    int rc = write_image(sl, &W);
    writer_free(&W);
    if (rc < 0) {
        if (!W.w.borrowed)
            FS_FREE(W.w.p);
        *out = NULL;
        *len = 0;
        return rc;
    }
    *out = W.w.p;
    *len = W.w.len;
    return FS_OK;
}

int fs_image_write(fs_sublist *sl, char **out, size_t *len)
{
    return fs_image_write_in(sl, NULL, 0, out, len);
}

size_t fs_image_size_hint(fs_sublist *sl)
{
    fs_brlock_rdlock_long(&sl->lock);
    size_t n = sl->img.base ? (size_t)sl->img.len : image_size_about(sl);
    if (sl->img.base && sl->live) {              /* a thaw's image: about both */
        size_t more = image_size_about(sl->live);
        n = n + more >= n ? n + more : SIZE_MAX;
    }
    fs_brlock_rdunlock_long(&sl->lock);
    return n;
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
    W.w.writeback = durable;
    W.threads = fs_index_threads();
    rc = write_image(sl, &W);
    writer_free(&W);
    if (fs_filebuf_close(&fb, rc == FS_OK ? W.w.len : 0, durable) != FS_OK && rc == FS_OK)
        rc = FS_EIO;
    return rc;
}

/* ---- the writer's parts, for a writer of an image that has no built
 * index for its tables (fs_image_write.h; the bulk builder, fs_build.c) */

struct fs_imgw {
    writer W;
    fs_filebuf fb;
};

fs_imgw *fs_imgw_new(void)
{
    fs_imgw *X = FS_MALLOC(sizeof(fs_imgw));
    if (X)
        memset(X, 0, sizeof(*X));
    return X;
}

int fs_imgw_file(fs_imgw *X, const char *path)
{
    int rc = fs_filebuf_open(&X->fb, path);
    if (rc == FS_OK)
        X->W.w.file = &X->fb;
    return rc == FS_OK || rc == FS_ENOSYS ? rc : FS_EIO;
}

int fs_imgw_begin(fs_imgw *X, size_t size_about, size_t now)
{
    if (wb_reserve(&X->W.w, size_about, now) == FS_OK)
        wb_alloc(&X->W.w, FS_IMG_OBJECTS);        /* header and root block: at 0 */
    return X->W.w.oom ? FS_ENOMEM : FS_OK;
}

void fs_imgw_touch(const fs_imgw *X, size_t from, size_t to) { wb_ready(&X->W.w, from, to); }

uint64_t fs_imgw_trie(fs_imgw *X, const fs_node *root) { return write_trie(&X->W, root); }

uint64_t fs_imgw_alloc(fs_imgw *X, size_t size) { return wb_alloc(&X->W.w, size); }

uint64_t fs_imgw_level(fs_imgw *X, uint64_t lv_off, uint32_t count, int half_full)
{
    fs_level L;
    memset(&L, 0, sizeof(L));
    fs_level_filter_init(&L);             /* a keyed table: with its bitmap */
    L.count = count;
    return level_begin(&X->W, lv_off, &L, half_full);
}

uint64_t fs_imgw_node(fs_imgw *X, const fs_node *n) { return write_node(&X->W, n, 0, 0); }

uint64_t fs_imgw_node_bytes(const fs_node *n) { return node_bytes(n); }

void fs_imgw_place(fs_imgw *X, uint64_t lv_off, fs_slot e, uint32_t *next)
{
    place_entry(&X->W, lv_off, e, next, 0);
}

fs_imgw *fs_imgw_part(const fs_imgw *X, uint64_t at, uint64_t end)
{
    fs_imgw *P = fs_imgw_new();
    if (P)
        wb_part(&P->W.w, &X->W.w, at, end);
    return P;
}

void fs_imgw_part_free(fs_imgw *P)
{
    writer_free(&P->W);
    FS_FREE(P);
}

void fs_imgw_shape(fs_imgw *X, uint64_t at, const fs_shape *sh) { shape_fields(&X->W, at, sh); }

int fs_imgw_end(fs_imgw *X, const fs_img_totals *T, const fs_shapes *shapes, unsigned threads)
{
    X->W.threads = threads;
    return X->W.w.oom ? FS_ENOMEM : write_end(&X->W, T, shapes);
}

int fs_imgw_close(fs_imgw *X, int ok, int durable, char **out, size_t *len)
{
    int rc = FS_OK;
    writer_free(&X->W);
    if (X->W.w.file) {
        if (fs_filebuf_close(&X->fb, ok ? X->W.w.len : 0, durable) != FS_OK && ok)
            rc = FS_EIO;
    } else if (ok && out) {
        *out = X->W.w.p;
        *len = X->W.w.len;
        X->W.w.p = NULL;
    }
    if (!X->W.w.file)
        FS_FREE(X->W.w.p);
    FS_FREE(X);
    return rc;
}
