/* fs_image_thaw.c - an opened image (and the changes made to it since)
 * back into a built index, by inserting every subscription it holds into
 * a fresh one (fs_image.h, fs_image_thaw), each filter placed where the
 * set's rule puts it (fs_shapes_choose): what to_bytes and save write for
 * a changed image or a built index placed otherwise, and the version 1-2
 * dump of an image. */
#include "fs_image.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_index.h"

/* Call add(ctx, n) for every node of sl holding subscriptions -- its
 * trie's, then its literal table's and its shapes' -- except a mapped
 * image's masked ones.  FS_OK or add's failure. */
static int each_node(const fs_sublist *sl, int (*add)(void *, const fs_sublist *, const fs_node *), void *ctx)
{
    const fs_node **stack = NULL;
    size_t n = 0, cap = 0;
    uint64_t budget = sl->nodes + 1;
    int rc = fs_push_node(&stack, &n, &cap, sl->root);
    while (rc == FS_OK && n && budget--) {
        const fs_node *x = stack[--n];
        if (x != sl->root && fs_has_subs(x) && !fs_image_masked(sl, x))
            rc = add(ctx, sl, x);
        if (rc == FS_OK)
            rc = fs_trie_push_children(sl, x, &stack, &n, &cap);
    }
    FS_FREE(stack);
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

/* The shapes of the filters a thaw inserts (the set's shapes, for
 * fs_shapes_choose). */
typedef struct {
    const fs_sublist *sl;
    fs_shape_of *v;
    size_t n, cap;
} shape_list;

static int shape_push(shape_list *c, const fs_shape_of *of)
{
    if (c->n == c->cap && fs_grow(&c->v, &c->cap, c->n + 1, sizeof(fs_shape_of)) < 0)
        return FS_ENOMEM;
    c->v[c->n++] = *of;
    return FS_OK;
}

static int note_trie_shape(void *p, const fs_node *x, const fs_shape_of *of)
{
    shape_list *c = p;
    return fs_image_masked(c->sl, x) ? FS_OK : shape_push(c, of);
}

/* Add to c the shapes of what sl holds: each shape table with an entry
 * not masked, each shaped filter in the trie.  FS_OK, FS_ENOMEM,
 * FS_EBADDATA. */
static int note_shapes(shape_list *c, const fs_sublist *sl)
{
    c->sl = sl;
    for (uint32_t j = 0; j < sl->shapes.n; j++) {
        const fs_shape *sh = sl->shapes.shape[j];
        const fs_slot *slots = fs_lv_slots(sl, &sh->table);
        for (uint32_t i = 0; i < sh->table.cap; i++) {
            const fs_node *e = fs_ref_node(sl, slots[i].node);
            if (e && !fs_image_masked(sl, e)) {
                fs_shape_of of = {.onemask = sh->onemask, .ntoks = sh->ntoks, .rest = sh->rest};
                if (shape_push(c, &of) < 0)
                    return FS_ENOMEM;
                break;
            }
        }
    }
    return fs_trie_each_shaped(sl, note_trie_shape, c);
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

/* Give `to` (empty) a table for each shape that fs_shapes_choose keeps of
 * what sl (and its live part) holds, so that the inserts that follow
 * place every filter where the rule says, in any order: a kept shape's
 * filters in its table (an insert does not stop at a trie node that only
 * leads to longer filters), the others in the trie (a shape not kept does
 * not fit beside the kept ones, so fs_shape_create refuses it).  FS_OK,
 * FS_ENOMEM, FS_EBADDATA. */
static int make_kept_shapes(const fs_sublist *sl, fs_sublist *to)
{
    shape_list c = {0};
    unsigned char *keep = NULL;
    int rc = note_shapes(&c, sl);
    if (rc == FS_OK && sl->live)
        rc = note_shapes(&c, sl->live);
    if (rc == FS_OK && c.n && !(keep = FS_MALLOC(c.n)))
        rc = FS_ENOMEM;
    if (rc == FS_OK && c.n)
        fs_shapes_choose(sl->dialect, c.v, c.n, keep);
    for (size_t i = 0; i < c.n && rc == FS_OK; i++) {
        fs_shape *sh;
        if (keep[i] && !fs_shape_find(to, &c.v[i]) && (rc = fs_shape_create(to, &c.v[i], &sh)) == FS_OK && !sh)
            rc = FS_EBADDATA;        /* cannot be: the kept shapes fit the budget */
    }
    FS_FREE(keep);
    FS_FREE(c.v);
    return rc;
}

int fs_image_thaw(fs_sublist *sl, fs_sublist **out)
{
    *out = NULL;
    thaw_ctx c = {.to = fs_sublist_new(sl->dialect), .path = FS_MALLOC(2 * ((size_t)FS_MAX_SUBJECT + 1))};
    c.shared = c.path ? c.path + FS_MAX_SUBJECT + 1 : NULL;
    int rc = c.to && c.path ? FS_OK : FS_ENOMEM;
    fs_brlock_rdlock_long(&sl->lock);
    if (rc == FS_OK)
        rc = make_kept_shapes(sl, c.to);
    if (rc == FS_OK)
        rc = each_node(sl, thaw_add, &c);
    if (rc == FS_OK && sl->live)
        rc = each_node(sl->live, thaw_add, &c);
    if (rc == FS_EBADDATA && sl->img.base)     /* the live part too holds what the image held */
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
