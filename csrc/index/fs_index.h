/* fs_index.h - the index layer's own API, over its layout (fs_layout.h):
 * the shape tables (fs_shape.c) and probing them, with the tables, nodes
 * and trie (fs_table.h, fs_node.h, fs_trie.h).  The files above the index
 * (match, batch, the API, serial) include this header; the public C API
 * is sublist.h. */
#ifndef FS_INDEX_H
#define FS_INDEX_H

#include "fs_layout.h"
#include "fs_node.h"
#include "fs_scratch.h"
#include "fs_shape.h"
#include "fs_table.h"
#include "fs_trie.h"

/* ---- shape tables (fs_shape.c); the write lock is held where they change */

/* THE RULE of which shapes get tables, decided by the set of filters
 * alone: the one function that the image writer, the thaw and any bulk
 * builder ask (docs/FORMAT.md, "One image for one set").
 *
 * of[0..n): the shapes of a set of filters (fs_shape_classify's; keys
 * ignored; duplicates allowed), in any order.  Sorts them into the
 * canonical order (token count, then rest, then the one-level wildcards'
 * mask, as fs_shapes.shape is kept) and, in that order, keeps a shape --
 * keep[i] = 1, its filters get a table -- when it fits the budget beside
 * the shapes kept before it: fewer than FS_SHAPE_MAX kept, and fewer than
 * FS_SHAPE_MAX_PROBES kept that a subject of any one length probes.  The
 * others (keep[i] = 0) leave their filters in the trie.  Equal shapes get
 * the same answer.  Returns the number of distinct shapes kept (at most
 * FS_SHAPE_MAX).  Never fails, never allocates.
 *
 * Where every shape of the set fits the budget, all are kept, which is
 * what inserts in any order make; past it, inserts keep shapes first come
 * first served (fs_shape_create) and the image writer places the filters
 * by this rule instead (fs_shapes_placed_canonically, fs_image_thaw). */
uint32_t fs_shapes_choose(fs_dialect d, fs_shape_of *of, size_t n, unsigned char *keep);
/* Is every filter of the built index sl where fs_shapes_choose puts it:
 * every shape it holds a table for kept, every filter with a shape that
 * the trie holds (fs_trie_each_shaped) of a shape not kept?  1 yes, 0 no,
 * FS_ENOMEM.  O(trie nodes) when no shaped filter is in the trie, as in
 * every set within the budget. */
int fs_shapes_placed_canonically(const fs_sublist *sl);
/* The shape like `of`, or NULL. */
fs_shape *fs_shape_find(const fs_sublist *sl, const fs_shape_of *of);
/* A new empty shape like `of` (which must not exist yet): FS_OK with *out
 * set, FS_OK with *out NULL when the shape budget is spent (the filter
 * goes to the trie), or FS_ENOMEM. */
int fs_shape_create(fs_sublist *sl, const fs_shape_of *of, fs_shape **out);
/* Free a shape that has no entries (a no-op otherwise). */
void fs_shape_drop_if_empty(fs_sublist *sl, fs_shape *sh);
/* Does shape a come before the shape like b in the canonical order? */
int fs_shape_before(const fs_shape *a, const fs_shape_of *b);
/* The probe sets (fs_shapes.probe[0]) of the index's shapes, into probe. */
void fs_shapes_probes(const fs_sublist *sl, uint64_t *probe);
/* S->probe[1], the probe sets of a subject whose first level no wildcard
 * matches (fs_tokens.hidden: MQTT's '$' topics), from S->probe[0]: less
 * the shapes that start with a wildcard; and the walk's key recipes
 * (fs_shapes.key_ntoks), from the shapes.  Wherever probe[0] is set. */
void fs_shapes_hide_probes(fs_shapes *S);
/* The entry for filter f (whose key is key), or NULL. */
fs_node *fs_shape_lookup(const fs_sublist *sl, const fs_shape *sh, const char *f, uint32_t flen, uint64_t key);
/* Add entry n.  FS_OK or FS_ENOMEM (table unchanged). */
int fs_shape_add(fs_sublist *sl, fs_shape *sh, fs_node *n, uint64_t key);
/* Remove entry n (not freed); an emptied shape is dropped.  Never fails. */
void fs_shape_del(fs_sublist *sl, fs_shape *sh, fs_node *n);
/* Do entry e's literal tokens equal the subject's (tokens t) at their
 * positions?  The entry's key has already matched the subject's.  flen:
 * the entry's filter bytes, read once (fs_toklen_of): only those are read. */
int fs_shape_entry_matches(const fs_shape *sh, const fs_node *e, uint32_t flen, char sep, const char *s,
                           const fs_span *t, const char *s_end);
void fs_shapes_free(fs_sublist *sl);

/* Per-token mixes m[0..n) and their prefix sums P[0..n] of a subject. */
static inline void fs_shape_mixes(const fs_span *tok, uint32_t n, uint64_t *m, uint64_t *P)
{
    P[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        m[i] = fs_pos_mix(tok[i].hash, i);
        P[i + 1] = P[i] + m[i];
    }
}

/* fs_probe's test for fs_shape_probe_slots: a slot whose key is (lo, hi)
 * and whose entry the subject (s, its tokens t, bytes up to end) matches
 * in shape sh; the entry, as read for the comparison, goes to found. */
typedef struct {
    const fs_sublist *sl;
    int mapped;
    const fs_shape *sh;
    uint32_t lo, hi;
    char sep;
    const char *s, *end;
    const fs_span *t;
    const fs_node *found;
} fs_shape_probe;

static inline int fs_stop_at_entry(const fs_slot *slot, void *ctx)
{
    fs_shape_probe *p = ctx;
    if (slot->hash != p->lo || slot->len != p->hi)
        return 0;
    const fs_node *e = fs_ref_node_if(p->sl, p->mapped, slot->node);
    if (!e || !fs_shape_entry_matches(p->sh, e, fs_toklen_of_if(p->sl, p->mapped, e), p->sep, p->s, p->t, p->end))
        return 0;
    p->found = e;
    return 1;
}

/* The entry of shape sh that the subject (tokens t, bytes up to end)
 * matches, given its key in that shape; NULL when none does (one filter
 * per shape can match a subject).  mapped: fs_img_mapped(sl)
 * (fs_layout.h). */
static inline const fs_node *fs_shape_probe_slots(const fs_sublist *sl, int mapped, const fs_shape *sh,
                                                  uint64_t key, char sep, const char *s, const fs_span *t,
                                                  const char *end)
{
    const fs_slot *slots;
    uint32_t cap = fs_lv_get_if(sl, mapped, &sh->table, &slots);
    fs_shape_probe p = {.sl = sl, .mapped = mapped, .sh = sh, .lo = (uint32_t)key, .hi = (uint32_t)(key >> 32),
                        .sep = sep, .s = s, .end = end, .t = t};
    fs_probe(slots, cap, (uint32_t)key, fs_stop_at_entry, &p);
    return p.found;
}

#endif
