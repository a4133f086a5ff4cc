/* sublist.c - the index itself and its write side: it creates and frees
 * the index, validates each subscription, takes the write lock and routes
 * the filter to the part that holds it -- the literal table, the shape
 * tables (fs_shape.c) or the trie (fs_trie.c) -- all or nothing for a
 * bulk call.  The read side is fs_match.c (one subject), fs_batch.c
 * (many) and fs_reverse.c.  See sublist.h for the layout. */
#include "sublist.h"

#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_index.h"
#include "fs_node.h"
#include "fs_pairs.h"
#include "fs_sys.h"
#include "fs_table.h"
#include "fs_trie.h"

fs_sublist *fs_sublist_new(fs_dialect d)
{
    fs_sublist *sl = FS_MALLOC(sizeof(fs_sublist));
    if (!sl)
        return NULL;
    memset(sl, 0, sizeof(*sl));
    sl->dialect = d;
    fs_level_filter_init(&sl->literals);
    sl->lit = &sl->literals;
    static const fs_span root_span = {0, 0, 0, FS_TOK_LITERAL};
    sl->root = fs_node_new(sl, NULL, "", &root_span);
    if (!sl->root) {
        fs_slab_destroy(&sl->slab);
        FS_FREE(sl);
        return NULL;
    }
    sl->nodes = 0;  /* the root is not counted */
    if (fs_brlock_init(&sl->lock) != 0) {
        fs_slab_destroy(&sl->slab);
        FS_FREE(sl);
        return NULL;
    }
    if (fs_sl_fork_track(sl) != FS_OK) {
        fs_brlock_destroy(&sl->lock);
        fs_slab_destroy(&sl->slab);
        FS_FREE(sl);
        return NULL;
    }
    return sl;
}

/* Frees everything: the trie, the literal table, the shapes, the cache. */
void fs_sublist_free(fs_sublist *sl)
{
    if (!sl)
        return;
    fs_pairs_forget_index();     /* its nodes' addresses may come back in another index */
    fs_sl_fork_untrack(sl);
    fs_sublist_free(sl->live);
    FS_FREE(sl->masked);
    fs_trie_hidden_free(sl);
    if (!sl->img.base) {     /* a mapped image's tables are the caller's bytes */
        fs_trie_free(sl);
        fs_table_teardown(sl, &sl->literals);
        FS_FREE(sl->literals.slots);
        fs_shapes_free(sl);
    }
    fs_slab_destroy(&sl->slab);
    fs_cache_free(sl->cache);
    fs_brlock_destroy(&sl->lock);
    FS_FREE(sl);
}

fs_dialect fs_sublist_dialect(const fs_sublist *sl) { return sl->dialect; }

const char *fs_dialect_name(int d)
{
    return d >= 0 && d < FS_NDIALECTS ? fs_rules((fs_dialect)d)->name : NULL;
}

uint64_t fs_sublist_count(fs_sublist *sl)
{
    fs_brlock_rdlock(&sl->lock);
    uint64_t c = sl->count;
    fs_brlock_rdunlock(&sl->lock);
    return c;
}

uint64_t fs_sublist_generation(fs_sublist *sl)
{
    fs_brlock_rdlock(&sl->lock);
    uint64_t g = sl->generation;
    fs_brlock_rdunlock(&sl->lock);
    return g;
}

/* A validated subscription: the filter's tokens plus where the queue is. */
typedef struct {
    const char *filter;
    uint32_t filter_len;
    int literal;          /* no wildcard: lives in the literal table */
    int shaped;           /* has a shape (fs_shape.h): shape describes it */
    fs_shape_of shape;    /* shape.key: the key in its shape's table, or a
                           * literal's in the literal table */
    const char *queue;    /* NULL: plain */
    uint32_t queue_len;
    fs_shape *shape_hint; /* non-NULL: the index's table of this shape,
                           * found when the row was parsed ahead (NULL: not
                           * looked for, or there was none yet) */
} parsed_spec;

/* Split "$share/G/f", check the queue, tokenize the filter into t. */
static int parse_spec(fs_dialect d, const fs_spec *spec, fs_tokens *t, parsed_spec *out, fs_error *err)
{
    const char *f = spec->filter, *q = spec->queue;
    size_t flen = spec->filter_len, qlen = spec->queue_len;
    if (fs_rules(d)->shares) {
        const char *g, *sf;
        size_t glen, sflen;
        int rc = fs_split_share(f, flen, &g, &glen, &sf, &sflen, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            if (q) {
                err->reason = "both a '$share/' group and a queue given";
                err->pos = 0;
                err->in_queue = 0;
                return FS_EINVAL;
            }
            q = g;
            qlen = glen;
            size_t shift = (size_t)(sf - f);
            f = sf;
            flen = sflen;
            rc = fs_tokenize(d, f, flen, 1, t, err);
            if (rc == FS_EINVAL)
                err->pos += shift;
            if (rc < 0)
                return rc;
            goto tokenized;
        }
    }
    {
        int rc = fs_tokenize(d, f, flen, 1, t, err);
        if (rc < 0)
            return rc;
    }
tokenized:
    if (q) {
        int rc = fs_check_queue(d, q, qlen, err);
        if (rc < 0)
            return rc;
    }
    out->filter = f;
    out->filter_len = (uint32_t)flen;
    /* One pass for a literal, most filters: its key in the literal table
     * as it goes (fs_tokens_key); only a filter with a wildcard is
     * classified. */
    uint64_t key = 0;
    uint32_t i = 0;
    for (; i < t->n && t->tok[i].kind == FS_TOK_LITERAL; i++)
        key += fs_pos_mix(t->tok[i].hash, i);
    out->literal = i == t->n;
    if (out->literal) {
        out->shaped = 0;
        out->shape.key = key;
    } else {
        out->shaped = fs_shape_classify(t, &out->shape);
    }
    out->queue = q;
    out->queue_len = (uint32_t)qlen;
    out->shape_hint = NULL;
    return FS_OK;
}

int fs_spec_parse(fs_dialect d, const fs_spec *spec, fs_tokens *t, fs_parsed *out, fs_error *err)
{
    parsed_spec ps;
    int rc = parse_spec(d, spec, t, &ps, err);
    if (rc == FS_OK)
        *out = (fs_parsed){.filter = ps.filter, .filter_len = ps.filter_len, .queue = ps.queue,
                           .queue_len = ps.queue_len, .literal = ps.literal, .shaped = ps.shaped,
                           .shape = ps.shape};
    return rc;
}

int fs_validate(fs_dialect d, const char *s, size_t len, int is_filter, fs_error *err)
{
    fs_tokens t;
    fs_tokens_init(&t);
    int rc;
    if (is_filter) {
        fs_spec spec = {s, len, NULL, 0, 0};
        parsed_spec ps;
        rc = parse_spec(d, &spec, &t, &ps, err);
    } else {
        rc = fs_tokenize(d, s, len, 0, &t, err);
    }
    fs_tokens_free(&t);
    return rc;
}

/* The one pre-existing level an insert added a child to (every level below
 * it is new), and its capacity before, so that undoing the insert can
 * shrink it back and leave not even memory_bytes changed. */


static void undo_growth(fs_sublist *sl, const fs_growth *g)
{
    if (g->level)        /* a mapped image's growth is its live part's */
        fs_level_restore(&(sl->img.base ? sl->live : sl)->mem, g->level, g->cap);
}

/* The index's table of ps's shape, or NULL: the one found when the row
 * was parsed ahead, else looked for now. */
static fs_shape *shape_of(const fs_sublist *sl, const parsed_spec *ps)
{
    return ps->shape_hint ? ps->shape_hint : fs_shape_find(sl, &ps->shape);
}

/* The entry of keyed table L (the literal table or a shape's) holding
 * ps's filter, or NULL.  For a built index *slot is where the key's probe
 * ended (fs_keyed_seek: where a new entry goes); a mapped image's tables
 * are read through their checks (find_mapped), and *slot says nothing
 * (its writes go to its live part). */
static fs_node *find_mapped(const fs_sublist *sl, const fs_level *L, const parsed_spec *ps, uint32_t *slot)
{
    *slot = UINT32_MAX;
    return (fs_node *)(uintptr_t)fs_keyed_find(sl, L, ps->shape.key, ps->filter, ps->filter_len,
                                               ps->filter + ps->filter_len);
}

FS_ALWAYS_INLINE fs_node *find_entry(const fs_sublist *sl, const fs_level *L, const parsed_spec *ps, uint32_t *slot)
{
    if (FS_LIKELY(!sl->img.base))
        return fs_keyed_seek(L, ps->shape.key, ps->filter, ps->filter_len, slot);
    return find_mapped(sl, L, ps, slot);
}

/* Find the node holding t's subscriptions -- in the literal table, the
 * filter's shape table (then *shp is that shape) or the trie -- or NULL.
 * A shaped filter may still sit in the trie: it went there while the
 * shape budget was spent, or it came from a version 1 image.  *slot: the
 * table slot a new entry of the filter would take (find_entry), or
 * UINT32_MAX when there is no table to take it yet. */
FS_ALWAYS_INLINE fs_node *find_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, fs_shape **shp,
                                      uint32_t *slot)
{
    *shp = NULL;
    *slot = UINT32_MAX;
    if (ps->literal)
        return find_entry(sl, sl->lit, ps, slot);
    if (ps->shaped) {
        fs_shape *sh = shape_of(sl, ps);
        fs_node *e = sh ? find_entry(sl, &sh->table, ps, slot) : NULL;
        if (e) {
            *shp = sh;
            return e;
        }
    }
    fs_node *n = (fs_node *)(uintptr_t)fs_trie_find(sl, t, ps->filter);
    /* A trie node without subscriptions only lies on the way to longer
     * filters (AMQP "a.#.b" makes "a.#"): it holds none of a shaped
     * filter's, which go to their shape's table all the same, whichever
     * came first. */
    return n && ps->shaped && !fs_has_subs(n) ? NULL : n;
}

/* Drop n if it holds nothing any more: from its shape table (sh), the
 * literal table (an entry without links) or the trie (with its emptied
 * ancestors). */
static void prune_node(fs_sublist *sl, fs_node *n, fs_shape *sh)
{
    if (sh) {
        if (!fs_has_subs(n)) {
            fs_shape_del(sl, sh, n);
            fs_node_free(sl, n);
        }
    } else if (n->linked) {
        fs_trie_prune(sl, n);
    } else if (n->nsubs == 0 && fs_ngroups(n) == 0) {
        fs_level_del(&sl->literals, n);
        fs_node_free(sl, n);
        fs_level_shrink(&sl->mem, &sl->literals);
    }
}

/* A new entry for a whole filter in the literal table or a shape table,
 * in slot `slot` if the table does not grow first (find_locked's).
 * Records in g the pre-existing table it grew.  FS_OK or FS_ENOMEM. */
static int new_entry(fs_sublist *sl, const parsed_spec *ps, fs_shape *sh, int fresh_shape, uint32_t slot,
                     fs_growth *g, fs_node **out)
{
    fs_level *L = sh ? &sh->table : &sl->literals;
    uint64_t key = ps->shape.key;
    fs_span whole = {0, ps->filter_len, (uint32_t)key, sh ? FS_NODE_SHAPED : FS_TOK_LITERAL};
    fs_node *n = fs_entry_new(sl, ps->filter, &whole);
    if (!n)
        return FS_ENOMEM;
    if (!fresh_shape) {
        g->level = L;
        g->cap = L->cap;
    }
    /* shape tables are kept half full, the literal table 3/4 (fs_table.c) */
    if (fs_level_add_at(&sl->mem, L, n, (uint32_t)(key >> 32), sh != NULL, slot) < 0) {
        fs_node_free(sl, n);
        return FS_ENOMEM;
    }
    *out = n;
    return FS_OK;
}

static int insert_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         fs_growth *g, int invalidate);
static int remove_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         int invalidate);

/* Insert (remove: 0) or remove (1) every subscription node n of index
 * `from` holds into or from the index `to`, under filter ps.  n may be a
 * mapped image's node whose bytes change meanwhile: its payload is read
 * through the accessors (fs_subs_of ..., fs_layout.h), each count once
 * with what it bounds, so changed bytes copy wrong ids, never read
 * outside the image.  Inserting stops at the first failure and takes back
 * what it added: FS_OK or FS_ENOMEM (`to` unchanged, unless the bytes
 * changed between the two reads).  Removing never fails. */
static int copy_subs(const fs_sublist *from, fs_sublist *to, const fs_tokens *t, const parsed_spec *ps,
                     const fs_node *n, int remove)
{
    parsed_spec q = *ps;
    fs_growth g;
    int rc = FS_OK;
    const int64_t *ids;
    uint32_t nids = fs_subs_of(from, n, &ids), ng = fs_ngroups_of(from, n);
    q.queue = NULL;
    for (uint32_t i = 0; i < nids && rc >= 0; i++)
        rc = remove ? remove_locked(to, t, &q, ids[i], 0) : insert_locked(to, t, &q, ids[i], &g, 0);
    for (uint32_t gi = 0; gi < ng && rc >= 0; gi++) {
        const fs_group *grp = fs_group_of(from, n, gi);
        q.queue_len = fs_gname_of(from, grp, &q.queue);
        uint32_t gn = fs_gids_of(from, grp, &ids);
        for (uint32_t i = 0; i < gn && rc >= 0; i++)
            rc = remove ? remove_locked(to, t, &q, ids[i], 0) : insert_locked(to, t, &q, ids[i], &g, 0);
    }
    if (rc < 0) {
        copy_subs(from, to, t, ps, n, 1);
        return rc;
    }
    return FS_OK;
}

/* Before a mapped image's filter changes: make sure the change can go to
 * the live part, which holds every changed filter whole -- the filter's
 * image entry (if any, and not moved yet) is copied there and masked.
 * FS_OK or FS_ENOMEM (nothing changed that an answer could see). */
static int live_prepare(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps)
{
    if (!sl->live && !(sl->live = fs_sublist_new(sl->dialect)))
        return FS_ENOMEM;
    fs_shape *sh;
    uint32_t slot;
    const fs_node *n = find_locked(sl, t, ps, &sh, &slot);
    if (!n || fs_image_masked(sl, n))
        return FS_OK;
    int rc = copy_subs(sl, sl->live, t, ps, n, 0);
    if (rc == FS_OK && (rc = fs_image_mask(sl, n)) < 0)
        copy_subs(sl, sl->live, t, ps, n, 1);
    return rc;
}

/* An insert or a remove (rc, from the live part) changed a mapped image's
 * set: count it as the built index counts its own. */
static void live_changed(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int inserted, int invalidate)
{
    sl->count = inserted ? sl->count + 1 : sl->count - 1;
    sl->generation++;
    if (inserted)
        sl->inserts++;
    else
        sl->removes++;
    if (sl->cache && invalidate)
        fs_cache_invalidate(sl->cache, sl->dialect, ps->filter, ps->filter_len, t, ps->literal);
}

/* insert_locked on an opened image: into its live part. */
static int insert_live(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                       fs_growth *g, int invalidate)
{
    int rc;
    if ((rc = live_prepare(sl, t, ps)) == FS_OK && (rc = insert_locked(sl->live, t, ps, id, g, 0)) == 1)
        live_changed(sl, t, ps, 1, invalidate);
    return rc;
}

/* Add the subscription, creating its node where it belongs: the literal
 * table, its shape's table (creating the shape while the budget lasts),
 * or the trie.  Caller holds the write lock.  1 new, 0 present,
 * FS_ENOMEM (index unchanged). */
static int insert_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         fs_growth *g, int invalidate)
{
    fs_shape *sh;
    int rc = FS_OK;
    g->level = NULL;
    g->cap = 0;
    if (FS_UNLIKELY(sl->img.base != NULL))
        return insert_live(sl, t, ps, id, g, invalidate);
    uint32_t slot;
    fs_node *n = find_locked(sl, t, ps, &sh, &slot);
    if (!n) {
        int fresh_shape = 0;
        if (ps->shaped && !(sh = shape_of(sl, ps))) {
            if (fs_shape_create(sl, &ps->shape, &sh) < 0)
                return FS_ENOMEM;
            fresh_shape = sh != NULL;
        }
        if (ps->literal || sh) {
            rc = new_entry(sl, ps, sh, fresh_shape, slot, g, &n);
            if (rc < 0) {
                if (fresh_shape)
                    fs_shape_drop_if_empty(sl, sh);
                return rc;
            }
        } else if ((rc = fs_trie_path(sl, t, ps->filter, g, &n)) < 0) {
            goto fail;
        }
    }
    rc = ps->queue ? fs_node_add_queued(sl, n, ps->queue, ps->queue_len, id)
                   : fs_node_add_sub(sl, n, id);
    if (rc < 0)
        goto fail;
    if (rc == 1) {
        sl->count++;
        sl->generation++;
        sl->inserts++;
        if (sl->cache && invalidate)
            fs_cache_invalidate(sl->cache, sl->dialect, ps->filter, ps->filter_len, t, ps->literal);
    }
    return rc;
fail:
    prune_node(sl, n, sh);
    undo_growth(sl, g);
    return rc;
}

static int remove_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         int invalidate)
{
    fs_shape *sh;
    if (sl->img.base) {
        int rc = live_prepare(sl, t, ps);
        if (rc == FS_OK && (rc = remove_locked(sl->live, t, ps, id, 0)) == 1)
            live_changed(sl, t, ps, 0, invalidate);
        return rc;
    }
    uint32_t slot;
    fs_node *n = find_locked(sl, t, ps, &sh, &slot);
    if (!n)
        return 0;
    int rc = ps->queue ? fs_node_del_queued(sl, n, ps->queue, ps->queue_len, id)
                       : fs_node_del_sub(sl, n, id);
    if (rc == 1) {
        sl->count--;
        sl->generation++;
        sl->removes++;
        prune_node(sl, n, sh);
        if (sl->cache && invalidate)
            fs_cache_invalidate(sl->cache, sl->dialect, ps->filter, ps->filter_len, t, ps->literal);
    }
    return rc;
}

int fs_sublist_insert(fs_sublist *sl, const fs_spec *spec, fs_error *err)
{
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = parse_spec(sl->dialect, spec, &t, &ps, err);
    if (rc == FS_OK) {
        fs_growth g;
        fs_brlock_wrlock(&sl->lock);
        rc = insert_locked(sl, &t, &ps, spec->id, &g, 1);
        fs_brlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

int fs_sublist_remove(fs_sublist *sl, const fs_spec *spec, fs_error *err)
{
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = parse_spec(sl->dialect, spec, &t, &ps, err);
    if (rc == FS_OK) {
        fs_brlock_wrlock(&sl->lock);
        rc = remove_locked(sl, &t, &ps, spec->id, 1);
        fs_brlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

/* insert_many parses this many rows ahead of the one it inserts, and
 * fetches the table slots each will probe: a large index's tables are out
 * of cache, and one insert's probe missing after another's was most of a
 * bulk insert (the misses now overlap). */
#define INSERT_AHEAD 4
#define INSERT_RING 8               /* a power of two above INSERT_AHEAD */

/* The slots a parsed row's insert will probe first, fetched (a hint: the
 * table may grow before the insert; nothing for a mapped image, whose
 * inserts go to its live part). */
static void prefetch_slots(fs_sublist *sl, parsed_spec *ps)
{
    const fs_level *L = NULL;
    if (sl->img.base)
        return;
    if (ps->literal) {
        L = &sl->literals;
    } else if (ps->shaped && (ps->shape_hint = fs_shape_find(sl, &ps->shape)) != NULL) {
        L = &ps->shape_hint->table;
    }
    if (L && L->cap)
        FS_PREFETCH(&L->slots[(uint32_t)ps->shape.key & (L->cap - 1)]);
}

/* Rows parsed ahead of the insert: row i in slot i & (INSERT_RING - 1), with
 * its own tokens (so that row i parses again, to undo it, into tokens that
 * had room for it once: that cannot fail) and its parse's status. */
typedef struct {
    fs_tokens t[INSERT_RING];
    parsed_spec ps[INSERT_RING];
    int rc[INSERT_RING];
    fs_error err[INSERT_RING];
} parse_ring;

static void ring_parse(fs_sublist *sl, parse_ring *R, const fs_spec *specs, size_t i)
{
    size_t k = i & (INSERT_RING - 1);
    R->rc[k] = parse_spec(sl->dialect, &specs[i], &R->t[k], &R->ps[k], &R->err[k]);
    if (R->rc[k] == FS_OK)
        prefetch_slots(sl, &R->ps[k]);
}

int fs_sublist_insert_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err)
{
    *changed = 0;
    *bad = 0;
    /* Remember which ones were new and what they grew, to undo them if a
     * later one fails. */
    unsigned char *fresh = FS_MALLOC(n ? n : 1);
    fs_growth *grew = FS_MALLOC(sizeof(fs_growth) * (n ? n : 1));
    parse_ring *R = FS_MALLOC(sizeof(parse_ring));
    if (!fresh || !grew || !R) {
        FS_FREE(fresh);
        FS_FREE(grew);
        FS_FREE(R);
        return FS_ENOMEM;
    }
    for (size_t k = 0; k < INSERT_RING; k++)
        fs_tokens_init(&R->t[k]);
    int rc = FS_OK;
    size_t i;
    fs_brlock_wrlock(&sl->lock);
    uint64_t generation = sl->generation;
    for (i = 0; i < n && i < INSERT_AHEAD; i++)
        ring_parse(sl, R, specs, i);
    for (i = 0; i < n; i++) {
        if (i + INSERT_AHEAD < n)
            ring_parse(sl, R, specs, i + INSERT_AHEAD);
        size_t k = i & (INSERT_RING - 1);
        rc = R->rc[k];
        if (rc < 0)
            *err = R->err[k];
        else
            rc = insert_locked(sl, &R->t[k], &R->ps[k], specs[i].id, &grew[i], 0);
        if (rc < 0)
            break;
        fresh[i] = (unsigned char)rc;
        *changed += (size_t)rc;
        rc = FS_OK;
    }
    fs_error ignored;
    if (rc < 0) {
        *bad = i;
        /* Undo.  Row j parses again into the tokens it parsed into (slot
         * j & (INSERT_RING - 1)), which have room for it, so parse_spec cannot
         * fail here; and removal never allocates. */
        while (i-- > 0) {
            size_t k = i & (INSERT_RING - 1);
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &R->t[k], &R->ps[k], &ignored) == FS_OK)
                remove_locked(sl, &R->t[k], &R->ps[k], specs[i].id, 0);   /* the cache never saw it */
            undo_growth(sl, &grew[i]);
        }
        sl->inserts -= *changed;
        sl->removes -= *changed;
        sl->generation = generation;
        *changed = 0;
    } else if (sl->cache) {
        /* Only a batch that went in whole touches the cache: evict what
         * the new subscriptions match (re-parsing cannot fail now). */
        for (i = 0; i < n; i++) {
            size_t k = i & (INSERT_RING - 1);
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &R->t[k], &R->ps[k], &ignored) == FS_OK)
                fs_cache_invalidate(sl->cache, sl->dialect, R->ps[k].filter, R->ps[k].filter_len, &R->t[k],
                                    R->ps[k].literal);
        }
    }
    fs_brlock_wrunlock(&sl->lock);
    for (size_t k = 0; k < INSERT_RING; k++)
        fs_tokens_free(&R->t[k]);
    FS_FREE(fresh);
    FS_FREE(grew);
    FS_FREE(R);
    return rc;
}

int fs_sublist_remove_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err)
{
    *changed = 0;
    *bad = 0;
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = FS_OK;
    for (size_t i = 0; i < n && rc == FS_OK; i++) {
        rc = parse_spec(sl->dialect, &specs[i], &t, &ps, err);
        if (rc < 0)
            *bad = i;
    }
    if (rc == FS_OK) {
        fs_brlock_wrlock(&sl->lock);
        /* A mapped image moves every filter to its live part first (which
         * may fail, changing no answer); the removals then cannot fail. */
        for (size_t i = 0; sl->img.base && i < n && rc == FS_OK; i++) {
            parse_spec(sl->dialect, &specs[i], &t, &ps, err);
            rc = live_prepare(sl, &t, &ps);
        }
        for (size_t i = 0; i < n && rc == FS_OK; i++) {
            parse_spec(sl->dialect, &specs[i], &t, &ps, err);
            *changed += (size_t)remove_locked(sl, &t, &ps, specs[i].id, 1);
        }
        fs_brlock_wrunlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

int fs_sublist_set_cache(fs_sublist *sl, size_t capacity)
{
    fs_cache *c = NULL;
    if (capacity && !(c = fs_cache_new(capacity)))
        return FS_ENOMEM;
    fs_brlock_wrlock(&sl->lock);
    fs_cache *old = sl->cache;
    sl->cache = c;
    fs_brlock_wrunlock(&sl->lock);
    fs_cache_free(old);
    return FS_OK;
}

void fs_sublist_stats(fs_sublist *sl, fs_stats *st)
{
    fs_brlock_rdlock(&sl->lock);
    st->subscriptions = sl->count;
    st->nodes = sl->nodes;
    st->memory_bytes = sl->mem + sizeof(fs_sublist) + sizeof(uint64_t) * sl->masked_cap;
    st->mapped_bytes = sl->img.len;
    st->live_subscriptions = sl->live ? sl->live->count : 0;
    st->live_bytes = sl->live ? sl->live->mem + sizeof(fs_sublist) : 0;
    st->memory_bytes += st->live_bytes;
    st->inserts = sl->inserts;
    st->removes = sl->removes;
    st->generation = sl->generation;
    memset(&st->cache, 0, sizeof(st->cache));
    if (sl->cache) {
        fs_cache_stats_get(sl->cache, &st->cache);
        st->memory_bytes += st->cache.bytes;
    }
    fs_brlock_rdunlock(&sl->lock);
    /* Each thread counts its matches in its own stripe: the sums. */
    st->matches = st->fanout_total = st->fanout_max = 0;
    for (unsigned i = 0, used = fs_stripes_used(); i < used; i++) {
        const fs_stripe *sp = &sl->lock.stripe[i];
        st->matches += atomic_load_explicit(&sp->matches, memory_order_relaxed);
        st->fanout_total += atomic_load_explicit(&sp->fanout_total, memory_order_relaxed);
        uint64_t m = atomic_load_explicit(&sp->fanout_max, memory_order_relaxed);
        if (m > st->fanout_max)
            st->fanout_max = m;
    }
}
