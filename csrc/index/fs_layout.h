/* fs_layout.h - the index's data layout (tables, nodes, shapes, the
 * trie; the diagram is in sublist.h) and reading it, built in memory or
 * mapped from an image ("reading a mapped image" below; the checks behind
 * it are fs_layout.c's).  The index layer's own API over it is
 * fs_index.h; the functions of the tables, nodes and trie are declared in
 * their own headers (fs_table.h, fs_node.h, fs_trie.h; memory accounting:
 * fs_mem.h).  Not part of the public C API; see sublist.h for that. */
#ifndef FS_LAYOUT_H
#define FS_LAYOUT_H

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "fs_bits.h"
#include "fs_brlock.h"
#include "fs_fork.h"
#include "fs_mem.h"
#include "fs_node.h"
#include "fs_scratch.h"
#include "fs_shape.h"
#include "fs_slab.h"
#include "fs_sys.h"
#include "fs_table.h"
#include "fs_token.h"

typedef struct fs_cache fs_cache;

struct fs_slot {
    uint32_t hash;
    uint32_t len;
    fs_node *node;       /* NULL: empty slot */
};

typedef struct fs_level {
    fs_slot *slots;      /* open addressing, linear probing, cap a power of 2 */
    uint32_t cap, count;
    fs_node *one;        /* the '*' / '+' child */
    fs_node *rest;       /* the '>' / '#' child */
    /* Keyed tables only (filter != NULL): a bitmap after the slots, in
     * the same allocation, of FS_FILTER_BITS(cap) bits -- a Bloom filter
     * of two bits in one word: an entry whose key's high half is h sets,
     * in word (h mod bits) / 64, bits h mod 64 and h >> 26.  A subject's
     * probe finding either clear cannot hit, so it is skipped before the
     * table is touched.  Removals leave their bits (stale) until the
     * table is rebuilt. */
    const uint64_t *filter;   /* the bitmap (fs_no_filter while cap is 0) */
    uint64_t filter_mask;     /* its bits - 1 */
    uint32_t stale;
} fs_level;

/* The bitmap of a filtered table with no slots: nothing may be there. */
extern const uint64_t fs_no_filter[1];

/* The bitmap of a filtered table: 8 bits per slot, at least one word.  A
 * shape table at most half full has 16 or more bits per entry: with two
 * bits per entry in one word, ~1.5% false positives (one bit at 4 bits
 * per slot let 9.5% of light's missing probes through: 0.73 wasted table
 * probes per subject, ~1 mispredicted branch).  Light, 100k subscriptions,
 * one thread, interleaved: 281-293 -> 270-273 ns/subject, +0.8 B/sub.
 * ~300 KB for all of light's shapes: it stays in L2 while the slots do
 * not. */
#define FS_FILTER_BITS(cap) ((cap) >= 8 ? (uint64_t)(cap) * 8 : 64u)

/* Bytes of a table's allocation of cap slots (and its bitmap). */
static inline size_t fs_level_bytes(const fs_level *L, uint32_t cap)
{
    return sizeof(fs_slot) * cap + (L->filter && cap ? (size_t)(FS_FILTER_BITS(cap) / 8) : 0);
}

/* Might a filtered table hold an entry of this key?  0: certainly not. */
static inline int fs_filter_word_holds(uint64_t w, uint32_t h)
{
    return (int)((w >> (h & 63)) & (w >> (h >> 26)) & 1);
}
static inline int fs_level_may_hold(const fs_level *L, uint64_t key)
{
    uint32_t h = (uint32_t)(key >> 32);
    return fs_filter_word_holds(L->filter[(h & L->filter_mask) >> 6], h);
}

/* The one probe sequence of every table, built or mapped (the image
 * writer places its entries with it too): linear probing, the slot after
 * slot i being fs_probe_next(i, cap - 1), cap a power of two. */
static inline uint32_t fs_probe_next(uint32_t i, uint32_t mask) { return (i + 1) & mask; }

/* A probe's key test: 1 stops the probe at slot s (the entry sought, or
 * one the caller acts on), 0 goes on.  ctx is the caller's. */
typedef int (*fs_slot_stop)(const fs_slot *s, void *ctx);

/* Every lookup, insert and removal of a table goes through this: the
 * index of the first slot, in the probe sequence from `from` & (cap - 1),
 * that is empty or that stop accepts; cap when it went through all cap
 * slots (or cap is 0) and stopped at none.  An empty slot ends every
 * probe: an entry is never placed past one.  stop is a constant at every
 * call and the body is inlined, so each caller gets its own loop with its
 * test in place (as the tokenizer's scan() gets its flags). */
FS_ALWAYS_INLINE uint32_t fs_probe(const fs_slot *slots, uint32_t cap, uint32_t from, fs_slot_stop stop, void *ctx)
{
    if (!cap)
        return 0;
    uint32_t mask = cap - 1, first = from & mask, i = first;
    do {
        if (!slots[i].node || stop(&slots[i], ctx))
            return i;
    } while ((i = fs_probe_next(i, mask)) != first);    /* back at the first: all cap slots seen */
    return cap;
}

/* A stop that never accepts: fs_probe then finds the first empty slot. */
static inline int fs_stop_never(const fs_slot *s, void *ctx)
{
    (void)s;
    (void)ctx;
    return 0;
}

typedef struct {
    char *name;
    int64_t *ids;        /* sorted */
    uint32_t name_len, name_hash;
    uint32_t n, cap;     /* cap 0: a mapped image's group, whose name and ids
                          * are offsets from the group (fs_group_name/ids) */
} fs_group;

/* A node's queue groups: the counts and the groups in one allocation, so
 * that a node without groups -- nearly every node -- pays one pointer
 * (light's entries are 64 bytes with the filter: one cache line). */
typedef struct {
    uint32_t n, cap;
    fs_group g[];
} fs_groups;

static inline size_t fs_groups_bytes(uint32_t cap) { return sizeof(fs_groups) + sizeof(fs_group) * cap; }

/* A trie node's links.  They sit just before the node, and only trie
 * nodes (the root included) have them: the entries of the literal and
 * shape tables, which hold most subscriptions, are allocated without,
 * 16 bytes smaller. */
typedef struct {
    fs_node *parent;
    fs_level *next;
} fs_link;

struct fs_node {
    union {
        int64_t one;     /* subcap <= 1: the single id lives here */
        int64_t *many;   /* sorted */
    } subs;
    fs_groups *groups;   /* NULL: none */
    uint32_t nsubs, subcap;
    uint32_t hash;
    uint16_t toklen;     /* a token, or a whole literal filter: <= 65,535 */
    uint8_t kind;        /* fs_tok_kind */
    uint8_t linked;      /* 1: a trie node, an fs_link before it; 0: a table entry */
    char tok[];
};

static inline fs_link *fs_link_of(const fs_node *n)
{
    return (fs_link *)(uintptr_t)((const char *)n - sizeof(fs_link));
}
/* p + an image's offset, in integers: a damaged offset cannot overflow a
 * pointer before the check that refuses it (fs_img_node_checked). */
static inline const void *fs_img_plus(const void *p, uint64_t off)
{
    return (const void *)((uintptr_t)p + (uintptr_t)off);
}

/* fs_node.linked: bit 0, a trie node (fs_link before it); bit 1, a node
 * of a mapped image, whose links and payload are offsets (fs_up, fs_down,
 * fs_node_ids, fs_node_group below read either kind). */
#define FS_LINK_TRIE 1u
#define FS_LINK_IMAGE 2u

/* A built trie node's parent / next level; NULL for a table entry.  For
 * the writes, which never see a mapped node; the reads use fs_up/fs_down. */
static inline fs_node *fs_parent(const fs_node *n) { return n->linked ? fs_link_of(n)->parent : NULL; }
static inline fs_level *fs_next(const fs_node *n) { return n->linked ? fs_link_of(n)->next : NULL; }
/* The next level of a node known to be in the trie (the walks' hot path). */
static inline fs_level *fs_tnext(const fs_node *n)
{
    assert(n->linked);
    return fs_link_of(n)->next;
}

/* One shape's table (see fs_shape.h).  Allocated on its own so that
 * pointers to it stay valid while other shapes come and go. */
typedef struct {
    fs_level table;       /* slot.hash, slot.len: low, high 32 bits of the key */
    uint64_t onemask;
    uint32_t ntoks, rest;
    uint32_t first_wild;  /* starts with a wildcard: never matches MQTT '$'
                           * topics (kept for the image's bytes; the walk
                           * reads probe[1] instead) */
} fs_shape;

typedef struct {
    fs_shape *shape[FS_SHAPE_MAX];          /* canonical order */
    uint32_t n;
    /* probe[hidden][k] (k clamped to FS_SHAPE_MAX_TOKENS + 1): bit j set
     * when a subject of k tokens must probe shape[j].  hidden is the
     * tokenizer's decision (fs_tokens.hidden): probe[1] is probe[0] less
     * the shapes that start with a wildcard, for MQTT's '$' topics, so the
     * walk picks a row and never tests the rule.  probe[0] is the image's
     * probe sets; probe[1] is derived from it in memory
     * (fs_shapes_hide_probes), never written. */
    uint64_t probe[2][FS_SHAPE_MAX_TOKENS + 2];
    /* The walk's recipe for a subject's key in shape[j], the sum of the
     * subject's mixes at the shape's literal positions (fs_shape.h):
     * P[key_ntoks[j]] less m[key_wild[j]], the mix at its first one-level
     * wildcard (FS_SHAPE_MAX_TOKENS for a shape without one: a mix of 0),
     * less, for the shapes of key_more, the mixes at its other wildcards.
     * Derived from the checked shapes with probe[1], in memory only: two
     * byte loads a shape where the wildcard mask's loop cost ~7
     * instructions a wildcard and a test. */
    uint8_t key_ntoks[FS_SHAPE_MAX], key_wild[FS_SHAPE_MAX];
    uint64_t key_more;
} fs_shapes;

/* A mapped image (fs_image.c, docs/FORMAT.md version 4): the index's own
 * structs, laid out in one buffer, with offsets where a built index has
 * pointers.  base NULL: the index is built in memory. */
typedef struct {
    const char *base;     /* the image's first byte (8-byte aligned) */
    uint64_t len;         /* its bytes: every offset is checked against it */
    uint64_t nodes_end;   /* objects lie in [FS_IMG_OBJECTS, nodes_end) */
} fs_img;

struct fs_sublist {
    /* readers: match(), batches, stats (fast side), serializing, thawing,
     * reverse_match (long side); writers: every change, set_cache, the
     * cache reclaim, fork().  Its stripes also hold the match counts. */
    fs_brlock lock;
    fs_dialect dialect;
    fs_node *root;        /* the trie: filters with a wildcard */
    /* The root's literal children whose level no first-level wildcard
     * matches (MQTT's '$' levels, "$SYS"), kept apart as mosquitto keeps
     * its '$' topics: the reverse walk takes them out of a wildcard's
     * reach without reading a token.  Decided where the filter was
     * tokenized (fs_tokens.hidden, in fs_trie_path), or where a loaded or
     * mapped trie is read (fs_trie_hide_root); in memory only, never in
     * an image.  A built index's or a mapped image's (its nodes). */
    const fs_node **hidden_roots;
    uint32_t nhidden_roots;
    size_t cap_hidden_roots;
    fs_level literals;    /* whole literal filters -> entry (parent NULL), keyed
                           * like a shape without wildcards (fs_tokens_key),
                           * with a bitmap of its keys */
    const fs_level *lit;  /* the literal table read by the walks: &literals,
                           * or the image's */
    fs_img img;           /* a mapped image's bytes (base NULL: none) */
    _Atomic int damaged;  /* a mapped image failed a bounds check (fs_img_bad) */
    /* A mapped image changes through a live part: a built index of its
     * own (NULL until the first change) that holds every filter changed
     * since opening -- the filter's image entry is copied over whole and
     * masked (its offset in the set masked), so each filter's
     * subscriptions are in one place.  fs_image.c. */
    fs_sublist *live;
    uint64_t *masked;     /* open addressing, 0: empty slot */
    uint64_t masked_cap, masked_n;
    fs_shapes shapes;     /* filters with wildcards, by shape (fs_shape.c) */
    fs_cache *cache;      /* CLOCK cache of match results; NULL when disabled */
    fs_slab slab;         /* the blocks of every node and table entry */
    uint64_t count;       /* subscriptions */
    uint64_t nodes;
    uint64_t mem;         /* bytes allocated for the index */
    uint64_t generation;
    uint64_t inserts, removes;
    fs_fork_entry fork;   /* its lock in the fork registry (fs_layout.c) */
};


/* ---- reading a mapped image (serial/: fs_image_write.c writes it,
 * fs_image.c opens it; the checks
 * are fs_layout.c's)
 * A mapped image holds the index's own structs, with offsets from the
 * image's first byte where a built index holds pointers: fs_level's slots,
 * filter, one and rest, fs_slot's node, fs_link's parent and next (0:
 * none).  The walks turn them into pointers through these functions, which
 * hand back a built index's pointers unchanged.  No offset is followed
 * unchecked: a node, a level and everything they point to are checked to
 * lie inside the image when the walk reaches them (fs_img_node,
 * fs_img_level); one that does not marks the index damaged (the call then
 * fails: FS_EBADDATA) and reads as absent, so the walk goes on safely. */

#define FS_IMG_OBJECTS 1024u   /* the first object's offset: header and root block before */

/* A mapped image's field, loaded exactly once.  The file under a mapping
 * can be rewritten while a walk reads it (`cp bigger.img live.img`: the
 * bytes change and no read faults), so a field checked and then read again
 * may hold another value the second time: every offset and count of a
 * mapped image that decides an address or a size is loaded once with
 * these, checked, and only the checked copy is used (volatile: the
 * compiler may not load it again instead of keeping the copy).  Changed
 * bytes then give wrong answers or a damaged image (the Cython layer's
 * check after the call raises ImageChangedError), never a read or a write
 * outside the mapping or a buffer. */
static inline uint8_t fs_once8(const void *p) { return *(const volatile uint8_t *)p; }
static inline uint16_t fs_once16(const void *p) { return *(const volatile uint16_t *)p; }
static inline uint32_t fs_once32(const void *p) { return *(const volatile uint32_t *)p; }
static inline uint64_t fs_once64(const void *p) { return *(const volatile uint64_t *)p; }
static inline uintptr_t fs_oncep(const void *p) { return *(const volatile uintptr_t *)p; }

/* Does p point into sl's mapped image?  (A built index: never.)  Which
 * layout a node or group has is decided by where it is, never by a byte
 * of the mapping, which may change. */
static inline int fs_img_owns(const fs_sublist *sl, const void *p)
{
    return (uintptr_t)p - (uintptr_t)sl->img.base < sl->img.len;
}

/* Does sl map an image?  0: a built index (a live part included), whose
 * nodes, levels and groups are all its own, so fs_img_owns is 0 for every
 * pointer (img.base NULL, img.len 0), and nothing of it changes under a
 * reader holding the lock.
 *
 * The readers on the hot paths (the _if forms below: fs_subs_of_if, ...)
 * take this as `mapped`; a walk that decides it once per call and calls
 * an FS_ALWAYS_INLINE body with the constant 0 or 1 (fs_hits_merge,
 * fs_row_groups, the batch's emit, fs_walk_entries, the trie walk) gets,
 * for a built index, the plain field reads with no check at all, and for
 * a mapped one every node decided by its address as before: the checks
 * cost only the indexes that need them.  The forms without _if are the
 * same with mapped 1 (decided per node). */
static inline int fs_img_mapped(const fs_sublist *sl)
{
    return sl->img.base != NULL;
}

/* fs_img_owns, where mapped is fs_img_mapped(sl) (or 1). */
static inline int fs_img_owns_if(const fs_sublist *sl, int mapped, const void *p)
{
    return mapped && fs_img_owns(sl, p);
}

/* The offset of p, a pointer into the mapped image. */
static inline uint64_t fs_img_off(const fs_sublist *sl, const void *p)
{
    return (uint64_t)((const char *)p - sl->img.base);
}

/* Mark the image damaged (the running call and every later one fail). */
static inline void fs_img_bad(const fs_sublist *sl)
{
    atomic_store_explicit(&((fs_sublist *)(uintptr_t)sl)->damaged, 1, memory_order_relaxed);
}

/* Is [off, off + size) inside the image's objects, off 8-byte aligned? */
static inline int fs_img_holds(const fs_sublist *sl, uint64_t off, uint64_t size)
{
    return (off & 7) == 0 && off >= FS_IMG_OBJECTS && off <= sl->img.nodes_end &&
           size <= sl->img.nodes_end - off;
}

/* The node at offset off, checked whole (fs_layout.c); NULL for 0 or for a
 * node that is not all inside the image (marked damaged). */
const fs_node *fs_img_node_checked(const fs_sublist *sl, uint64_t off);
const fs_level *fs_img_level_checked(const fs_sublist *sl, uint64_t off);
/* Are level L's slots and bitmap inside the image, its counts sound?  (L
 * itself may be a copy: fs_image.c checks its copies of the tables with
 * it.)  1 or 0; marks nothing. */
int fs_img_level_ok(const fs_sublist *sl, const fs_level *L);

static inline const fs_node *fs_img_node(const fs_sublist *sl, const fs_node *ref)
{
    return ref ? fs_img_node_checked(sl, (uint64_t)(uintptr_t)ref) : NULL;
}

/* A stored node link -- a slot's node, a level's one or rest child --
 * as a pointer. */
static inline const fs_node *fs_ref_node(const fs_sublist *sl, const fs_node *ref)
{
    return sl->img.base ? fs_img_node(sl, ref) : ref;
}
static inline const fs_node *fs_ref_node_if(const fs_sublist *sl, int mapped, const fs_node *ref)
{
    return mapped ? fs_ref_node(sl, ref) : ref;
}

/* Where a stored link points, for a prefetch only: not checked, never
 * read (integer arithmetic: a damaged offset cannot overflow a pointer). */
static inline const char *fs_ref_addr(const fs_sublist *sl, const void *ref)
{
    return (const char *)((uintptr_t)sl->img.base + (uintptr_t)ref);
}

/* The slots and the bitmap of a level the walk holds (checked when the
 * level was reached). */
/* The _if forms take mapped (fs_img_mapped(sl), or 1: see there) as a
 * constant.  Mapped 1 adds img.base without testing it (NULL adds
 * nothing), so a walk's copy for a built index and its copy for a mapped
 * one differ and stay apart: with the test in both, gcc merged the plan's
 * two copies into one that tested img.base once a shape (~4 instructions
 * a shape, ~30 a row on light). */
FS_ALWAYS_INLINE const fs_slot *fs_lv_slots_if(const fs_sublist *sl, int mapped, const fs_level *L)
{
    return mapped ? (const fs_slot *)fs_img_plus(sl->img.base, (uintptr_t)L->slots) : L->slots;
}
static inline const fs_slot *fs_lv_slots(const fs_sublist *sl, const fs_level *L)
{
    return fs_lv_slots_if(sl, fs_img_mapped(sl), L);
}
static inline const uint64_t *fs_lv_filter(const fs_sublist *sl, const fs_level *L)
{
    if (!sl->img.base)
        return L->filter;
    return L->cap ? (const uint64_t *)fs_img_plus(sl->img.base, (uintptr_t)L->filter) : fs_no_filter;
}
static inline const fs_node *fs_lv_one(const fs_sublist *sl, const fs_level *L) { return fs_ref_node(sl, L->one); }
static inline const fs_node *fs_lv_rest(const fs_sublist *sl, const fs_level *L) { return fs_ref_node(sl, L->rest); }

/* A trie node's parent (NULL: a table entry, or the root) and next level
 * (NULL: none), for the reads. */
static inline const fs_node *fs_up(const fs_sublist *sl, const fs_node *n)
{
    if (!fs_img_owns(sl, n)) {
        if (!(n->linked & FS_LINK_TRIE))
            return NULL;
        const fs_node *p = fs_link_of(n)->parent;
        return (n->linked & FS_LINK_IMAGE) ? fs_img_node(sl, p) : p;
    }
    /* A mapped node lies at FS_IMG_OBJECTS or after: the link before it
     * is inside the mapping whatever its flag byte says now. */
    if (!(fs_once8(&n->linked) & FS_LINK_TRIE))
        return NULL;
    return fs_img_node(sl, (const fs_node *)fs_oncep(&fs_link_of(n)->parent));
}
static inline const fs_level *fs_down_if(const fs_sublist *sl, int mapped, const fs_node *n)
{
    if (!fs_img_owns_if(sl, mapped, n)) {
        if (!(n->linked & FS_LINK_TRIE))
            return NULL;
        const fs_level *L = fs_link_of(n)->next;
        if (!(n->linked & FS_LINK_IMAGE) || !L)
            return L;
        return fs_img_level_checked(sl, (uint64_t)(uintptr_t)L);
    }
    if (!(fs_once8(&n->linked) & FS_LINK_TRIE))
        return NULL;
    uint64_t off = fs_oncep(&fs_link_of(n)->next);
    return off ? fs_img_level_checked(sl, off) : NULL;
}
static inline const fs_level *fs_down(const fs_sublist *sl, const fs_node *n) { return fs_down_if(sl, 1, n); }

/* Is n a trie node (a link before it)?  A mapped node's flag, read once. */
static inline int fs_is_trie(const fs_sublist *sl, const fs_node *n)
{
    return (fs_img_owns(sl, n) ? fs_once8(&n->linked) : n->linked) & FS_LINK_TRIE;
}

/* A mapped node's token length, read once, with its bytes checked to lie
 * in the image (0, the image marked damaged, when they do not); a built
 * node's as it is. */
static inline uint32_t fs_toklen_of_if(const fs_sublist *sl, int mapped, const fs_node *n)
{
    if (!fs_img_owns_if(sl, mapped, n))
        return n->toklen;
    uint32_t len = fs_once16(&n->toklen);
    if (fs_img_holds(sl, fs_img_off(sl, n), sizeof(fs_node) + FS_TOK_ALLOC(len)))
        return len;
    fs_img_bad(sl);
    return 0;
}
static inline uint32_t fs_toklen_of(const fs_sublist *sl, const fs_node *n) { return fs_toklen_of_if(sl, 1, n); }

/* May the len bytes of node n's token be read (compared: whole words, up
 * to FS_TOK_ALLOC(len))?  Always for a built node. */
static inline int fs_tok_fits_if(const fs_sublist *sl, int mapped, const fs_node *n, uint32_t len)
{
    return !fs_img_owns_if(sl, mapped, n) ||
           fs_img_holds(sl, fs_img_off(sl, n), sizeof(fs_node) + FS_TOK_ALLOC(len));
}

/* A level's slots (*slots) and their number, its cap: a mapped level's
 * read once and checked (0, the image marked damaged, when they do not
 * lie in the image); a built level's, or a mapped table copied at open
 * (fs_image.c: the literal table and the shapes), as they are. */
static inline uint32_t fs_lv_get_if(const fs_sublist *sl, int mapped, const fs_level *L, const fs_slot **slots)
{
    if (!fs_img_owns_if(sl, mapped, L)) {
        *slots = mapped ? fs_lv_slots(sl, L) : L->slots;
        return L->cap;
    }
    uint32_t cap = fs_once32(&L->cap);
    uint64_t off = fs_oncep(&L->slots);
    if (!cap)
        return 0;
    if ((cap & (cap - 1)) || !fs_img_holds(sl, off, (uint64_t)cap * sizeof(fs_slot))) {
        fs_img_bad(sl);
        return 0;
    }
    *slots = (const fs_slot *)(const void *)(sl->img.base + off);
    return cap;
}
static inline uint32_t fs_lv_get(const fs_sublist *sl, const fs_level *L, const fs_slot **slots)
{
    return fs_lv_get_if(sl, 1, L, slots);
}

/* The deepest a filter's trie path goes: a path longer than this in a
 * mapped image is a loop (marked damaged). */
#define FS_MAX_DEPTH (FS_MAX_SUBJECT / 2 + 1)

/* The number of tokens of node n's filter: the trie nodes from n up to,
 * not counting, the root (the node without a parent: a built index's or
 * an image's, so that an image's and its live part's nodes read alike);
 * 0 for the root, and for a mapped image's path that loops (marked
 * damaged). */
static inline uint32_t fs_path_depth(const fs_sublist *sl, const fs_node *n)
{
    uint32_t d = 0;
    for (const fs_node *p = n, *up; (up = fs_up(sl, p)) != NULL; p = up)
        if (++d > FS_MAX_DEPTH) {
            fs_img_bad(sl);
            return 0;
        }
    return d;
}

/* The bytes of node n's filter: a table entry's whole filter, or a trie
 * node's tokens joined by the separator (0 for the root). */
static inline size_t fs_path_bytes(const fs_sublist *sl, const fs_node *n)
{
    if (!fs_is_trie(sl, n))
        return fs_toklen_of(sl, n);
    uint32_t d = fs_path_depth(sl, n);
    size_t len = 0;
    for (uint32_t i = 0; i < d && n; i++, n = fs_up(sl, n))
        len += fs_toklen_of(sl, n) + 1u;
    return len ? len - 1 : 0;
}

/* Write node n's filter ending at end, never before start (end - start:
 * fs_path_bytes of them).  A mapped image changed since fs_path_bytes
 * read it may have another path now: what does not fit is left out, and
 * the bytes not written are zeros (the answer is wrong, never outside). */
static inline void fs_path_write(const fs_sublist *sl, const fs_node *n, char *start, char *end)
{
    if (!fs_is_trie(sl, n)) {
        size_t len = fs_toklen_of(sl, n);
        if (len > (size_t)(end - start)) {
            fs_img_bad(sl);
            len = (size_t)(end - start);
        }
        memcpy(end - len, n->tok, len);
        memset(start, 0, (size_t)(end - len - start));
        return;
    }
    char sep = fs_sep(sl->dialect);
    uint32_t d = fs_path_depth(sl, n);
    for (uint32_t i = 0; i < d && n; i++, n = fs_up(sl, n)) {
        size_t len = fs_toklen_of(sl, n);
        if (len + (i + 1 < d) > (size_t)(end - start)) {
            fs_img_bad(sl);
            break;
        }
        end -= len;
        memcpy(end, n->tok, len);
        if (i + 1 < d)
            *--end = sep;
    }
    memset(start, 0, (size_t)(end - start));
}

/* ---- the index's lock in the fork registry (fs_layout.c): fork() waits
 * until no thread is inside any live index.  FS_OK, or FS_ENOMEM when the
 * fork handlers could not be registered (fs_sublist_new then fails:
 * MemoryError).  Untrack before the index's lock is destroyed. */
int fs_sl_fork_track(fs_sublist *sl);
void fs_sl_fork_untrack(fs_sublist *sl);

/* ---- a mapped image's live part (fs_layout.c; the walk over it is
 * fs_walk.c's) */
/* Was image node n's filter moved to the live part? */
int fs_image_masked(const fs_sublist *sl, const fs_node *n);
/* Mark it moved (write lock held).  FS_OK or FS_ENOMEM. */
int fs_image_mask(fs_sublist *sl, const fs_node *n);

/* The index's memory account is sl->mem (fs_mem.h counts it). */
static inline void *fs_sl_alloc(fs_sublist *sl, size_t size) { return fs_mem_alloc(&sl->mem, size); }
static inline void *fs_sl_realloc(fs_sublist *sl, void *p, size_t old, size_t size)
{
    return fs_mem_realloc(&sl->mem, p, old, size);
}
static inline void fs_sl_free(fs_sublist *sl, void *p, size_t size) { fs_mem_free(&sl->mem, p, size); }

/* Might a filtered table hold an entry of this key?  0: certainly not. */
FS_ALWAYS_INLINE int fs_lv_may_hold_if(const fs_sublist *sl, int mapped, const fs_level *L, uint64_t key)
{
    if (!mapped)
        return fs_level_may_hold(L, key);
    uint32_t h = (uint32_t)(key >> 32);
    /* A mapped level's fields are each read once: a file cut shorter under
     * the mapping reads as zeros from one read to the next (csrc/base/
     * fs_fault.h), and a mask read before must not index fs_no_filter's
     * one word.  Zeros read after an old mask stay inside the old bitmap's
     * span (offset 0, the same mask). */
    uint32_t cap = L->cap;
    uint64_t mask = L->filter_mask;
    if (!cap)
        return 0;
    return fs_filter_word_holds(((const uint64_t *)fs_img_plus(sl->img.base, (uintptr_t)L->filter))[(h & mask) >> 6], h);
}
static inline int fs_lv_may_hold(const fs_sublist *sl, const fs_level *L, uint64_t key)
{
    return fs_lv_may_hold_if(sl, fs_img_mapped(sl), L, key);
}

/* A node's payload.  A mapped image's node holds offsets from itself (from
 * the group, for a group's name and ids) where a built one holds pointers;
 * fs_img_node checked every one of them when the walk reached the node. */
static inline const fs_groups *fs_node_groups(const fs_node *n)
{
    if (n->linked & FS_LINK_IMAGE)
        return (const fs_groups *)fs_img_plus(n, (uintptr_t)n->groups);
    return n->groups;
}
static inline uint32_t fs_ngroups(const fs_node *n) { return n->groups ? fs_node_groups(n)->n : 0; }
static inline fs_group *fs_node_group(const fs_node *n, uint32_t i)
{
    return (fs_group *)(uintptr_t)&fs_node_groups(n)->g[i];
}
static inline const char *fs_group_name(const fs_group *g)
{
    return g->cap ? g->name : (const char *)fs_img_plus(g, (uintptr_t)g->name);
}
static inline const int64_t *fs_group_ids(const fs_group *g)
{
    return g->cap ? g->ids : (const int64_t *)fs_img_plus(g, (uintptr_t)g->ids);
}

static inline int fs_has_subs(const fs_node *n) { return n->nsubs || n->groups; }

static inline const int64_t *fs_node_ids(const fs_node *n)
{
    if (n->subcap <= 1)
        return &n->subs.one;
    if (n->linked & FS_LINK_IMAGE)
        return (const int64_t *)fs_img_plus(n, (uint64_t)n->subs.one);
    return n->subs.many;
}

/* ---- a node's payload, safe on a mapped image whose bytes change (see
 * fs_once8): each count and offset read once, checked against the image,
 * and only the checked copy used.  A payload that no longer lies in the
 * image reads as empty and marks it damaged.  For a built node, the plain
 * fields.  Every reader of a payload that may be an image's goes through
 * these, and takes each count once (a buffer sized by one read and
 * filled by another could overflow). */
uint32_t fs_img_subs(const fs_sublist *sl, const fs_node *n, const int64_t **ids);
uint32_t fs_img_groups(const fs_sublist *sl, const fs_node *n, const fs_groups **gs);
uint32_t fs_img_gname(const fs_sublist *sl, const fs_group *g, const char **name);
uint32_t fs_img_gids(const fs_sublist *sl, const fs_group *g, const int64_t **ids);
/* The empty group: what a group index past a changed node's groups reads. */
extern const fs_group fs_no_group;

/* Each in an _if form (mapped: fs_img_mapped, see there) and a plain one
 * (mapped 1). */
/* Node n's plain ids (*ids) and how many. */
static inline uint32_t fs_subs_of_if(const fs_sublist *sl, int mapped, const fs_node *n, const int64_t **ids)
{
    if (!fs_img_owns_if(sl, mapped, n)) {
        *ids = fs_node_ids(n);
        return n->nsubs;
    }
    return fs_img_subs(sl, n, ids);
}
static inline uint32_t fs_subs_of(const fs_sublist *sl, const fs_node *n, const int64_t **ids)
{
    return fs_subs_of_if(sl, 1, n, ids);
}
/* Node n's plain ids, how many (fs_subs_of without the ids). */
static inline uint32_t fs_nsubs_of_if(const fs_sublist *sl, int mapped, const fs_node *n)
{
    if (!fs_img_owns_if(sl, mapped, n))
        return n->nsubs;
    const int64_t *ids;
    return fs_img_subs(sl, n, &ids);
}
static inline uint32_t fs_nsubs_of(const fs_sublist *sl, const fs_node *n) { return fs_nsubs_of_if(sl, 1, n); }
/* Node n's queue groups: how many. */
static inline uint32_t fs_ngroups_of_if(const fs_sublist *sl, int mapped, const fs_node *n)
{
    if (!fs_img_owns_if(sl, mapped, n))
        return fs_ngroups(n);
    const fs_groups *gs;
    return fs_img_groups(sl, n, &gs);
}
static inline uint32_t fs_ngroups_of(const fs_sublist *sl, const fs_node *n) { return fs_ngroups_of_if(sl, 1, n); }
/* Node n's group i (i below a count fs_ngroups_of gave): fs_no_group when
 * a mapped node has fewer now. */
static inline const fs_group *fs_group_of_if(const fs_sublist *sl, int mapped, const fs_node *n, uint32_t i)
{
    if (!fs_img_owns_if(sl, mapped, n))
        return fs_node_group(n, i);
    const fs_groups *gs;
    return i < fs_img_groups(sl, n, &gs) ? &gs->g[i] : &fs_no_group;
}
static inline const fs_group *fs_group_of(const fs_sublist *sl, const fs_node *n, uint32_t i)
{
    return fs_group_of_if(sl, 1, n, i);
}
/* Group g's name (*name) and its length. */
static inline uint32_t fs_gname_of_if(const fs_sublist *sl, int mapped, const fs_group *g, const char **name)
{
    if (!fs_img_owns_if(sl, mapped, g)) {
        *name = fs_group_name(g);
        return g->name_len;
    }
    return fs_img_gname(sl, g, name);
}
static inline uint32_t fs_gname_of(const fs_sublist *sl, const fs_group *g, const char **name)
{
    return fs_gname_of_if(sl, 1, g, name);
}
/* Group g's members (*ids) and how many. */
static inline uint32_t fs_gids_of_if(const fs_sublist *sl, int mapped, const fs_group *g, const int64_t **ids)
{
    if (!fs_img_owns_if(sl, mapped, g)) {
        *ids = fs_group_ids(g);
        return g->n;
    }
    return fs_img_gids(sl, g, ids);
}
static inline uint32_t fs_gids_of(const fs_sublist *sl, const fs_group *g, const int64_t **ids)
{
    return fs_gids_of_if(sl, 1, g, ids);
}

/* fs_probe's test for the finds below: a slot whose (hash, len) is (a, b)
 * and whose node's token -- a trie child's, or a keyed entry's whole
 * filter -- is the len bytes tok (readable up to end).  The node, as read
 * for the comparison, goes to found. */
typedef struct {
    const fs_sublist *sl;
    int mapped;
    uint32_t a, b, len;
    const char *tok, *end;
    const fs_node *found;
} fs_tok_probe;

static inline int fs_stop_at_tok(const fs_slot *s, void *ctx)
{
    fs_tok_probe *p = ctx;
    if (s->hash != p->a || s->len != p->b)
        return 0;
    const fs_node *n = fs_ref_node_if(p->sl, p->mapped, s->node);
    if (!n || n->toklen != p->len || !fs_tok_fits_if(p->sl, p->mapped, n, p->len) ||
        !fs_tok_eq_within(n->tok, p->tok, p->len, p->end))
        return 0;
    p->found = n;
    return 1;
}

/* The child for a literal token, or NULL.  end: how far the bytes from tok
 * may be read (tok + len at least). */
static inline const fs_node *fs_level_find_within_if(const fs_sublist *sl, int mapped, const fs_level *L,
                                                     const char *tok, uint32_t len, uint32_t h, const char *end)
{
    const fs_slot *slots;
    uint32_t cap = fs_lv_get_if(sl, mapped, L, &slots);
    if (!cap)
        return NULL;
    fs_tok_probe p = {.sl = sl, .mapped = mapped, .a = h, .b = len, .len = len, .tok = tok, .end = end};
    fs_probe(slots, cap, h, fs_stop_at_tok, &p);
    return p.found;
}
static inline const fs_node *fs_level_find_within(const fs_sublist *sl, const fs_level *L, const char *tok,
                                                  uint32_t len, uint32_t h, const char *end)
{
    return fs_level_find_within_if(sl, 1, L, tok, len, h, end);
}

static inline const fs_node *fs_level_find(const fs_sublist *sl, const fs_level *L, const char *tok,
                                           uint32_t len, uint32_t h)
{
    return fs_level_find_within(sl, L, tok, len, h, tok + len);
}

/* The entry of a keyed table (the literal table, a shape table: slot.hash
 * and slot.len hold the key's low and high halves) whose whole filter is
 * the len bytes f (readable up to end), or NULL. */
static inline const fs_node *fs_keyed_find_if(const fs_sublist *sl, int mapped, const fs_level *L, uint64_t key,
                                              const char *f, uint32_t len, const char *end)
{
    const fs_slot *slots;
    uint32_t cap = fs_lv_get_if(sl, mapped, L, &slots);
    if (!cap)
        return NULL;
    fs_tok_probe p = {.sl = sl, .mapped = mapped, .a = (uint32_t)key, .b = (uint32_t)(key >> 32), .len = len,
                      .tok = f, .end = end};
    fs_probe(slots, cap, (uint32_t)key, fs_stop_at_tok, &p);
    return p.found;
}
static inline const fs_node *fs_keyed_find(const fs_sublist *sl, const fs_level *L, uint64_t key,
                                           const char *f, uint32_t len, const char *end)
{
    return fs_keyed_find_if(sl, 1, L, key, f, len, end);
}

/* fs_keyed_find for a write, on a built table (writes never see a mapped
 * one), which also says where the key would go: the entry, or NULL with
 * *slot the first empty slot of the key's probe -- where fs_level_add_at
 * puts the new entry while the table stays as it is -- or L->cap when
 * the table has no slots (or none empty).  A key the bitmap has not seen
 * is compared with no entry: the probe only looks for the empty slot (the
 * bitmap has no false negatives; the walk trusts it the same way). */
static inline fs_node *fs_keyed_seek(const fs_level *L, uint64_t key, const char *f, uint32_t len, uint32_t *slot)
{
    if (!fs_level_may_hold(L, key)) {
        *slot = fs_probe(L->slots, L->cap, (uint32_t)key, fs_stop_never, NULL);
        return NULL;
    }
    fs_tok_probe p = {.a = (uint32_t)key, .b = (uint32_t)(key >> 32), .len = len, .tok = f, .end = f + len};
    *slot = fs_probe(L->slots, L->cap, (uint32_t)key, fs_stop_at_tok, &p);
    return (fs_node *)(uintptr_t)p.found;
}

static inline int fs_push_node(const fs_node ***v, size_t *n, size_t *cap, const fs_node *x)
{
    if (*n == *cap && fs_grow(v, cap, *n + 1, sizeof(fs_node *)) < 0)
        return FS_ENOMEM;
    (*v)[(*n)++] = x;
    return FS_OK;
}

/* The node's group named q, or NULL. */
static inline fs_group *fs_node_find_group(const fs_node *n, const char *q, uint32_t qlen, uint32_t qh)
{
    for (uint32_t i = 0; i < fs_ngroups(n); i++) {
        fs_group *g = fs_node_group(n, i);
        if (g->name_hash == qh && g->name_len == qlen && memcmp(g->name, q, qlen) == 0)
            return g;
    }
    return NULL;
}

#endif
