/* sublist.c - the trie: insert, remove with pruning, match, reverse match.
 * See sublist.h for the layout. */
#include "sublist.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_cache.h"
#include "fs_internal.h"

/* --------------------------------------------------------- small helpers */

/* Grow *p (an array of elsize-byte items with capacity *cap) to hold need. */
int fs_grow(void *p, size_t *cap, size_t need, size_t elsize)
{
    if (need <= *cap)
        return FS_OK;
    size_t ncap = *cap ? *cap : 8;
    while (ncap < need)
        ncap *= 2;
    void *np = FS_REALLOC(*(void **)p, ncap * elsize);
    if (!np)
        return FS_ENOMEM;
    *(void **)p = np;
    *cap = ncap;
    return FS_OK;
}

void *fs_sl_alloc(fs_sublist *sl, size_t size)
{
    void *p = FS_MALLOC(size);
    if (p)
        sl->mem += size;
    return p;
}

void *fs_sl_realloc(fs_sublist *sl, void *p, size_t old, size_t size)
{
    void *np = FS_REALLOC(p, size);
    if (np)
        sl->mem = sl->mem - old + size;
    return np;
}

void fs_sl_free(fs_sublist *sl, void *p, size_t size)
{
    if (p) {
        FS_FREE(p);
        sl->mem -= size;
    }
}

/* Binary search in a sorted id array: index of id, or of where it goes. */
static uint32_t ids_find(const int64_t *ids, uint32_t n, int64_t id, int *found)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < n && ids[lo] == id;
    return lo;
}


static inline int node_empty(const fs_node *n)
{
    return n->nsubs == 0 && n->ngroups == 0 &&
           (!n->next || (n->next->count == 0 && !n->next->one && !n->next->rest));
}

/* ---------------------------------------------------------------- levels */

/* Token equality without a libc call: tokens are short. */


static void slot_place(fs_slot *slots, uint32_t cap, fs_slot e)
{
    uint32_t mask = cap - 1, i = e.hash & mask;
    while (slots[i].node)
        i = (i + 1) & mask;
    slots[i] = e;
}

static uint32_t max_load(uint32_t cap)
{
    return cap <= 4 ? cap : cap / 4 * 3;
}

/* Add a literal child.  FS_OK or FS_ENOMEM (level unchanged). */
/* Rehash L into ncap slots (which must hold its entries).  FS_OK or
 * FS_ENOMEM (L unchanged). */
static int level_resize(fs_sublist *sl, fs_level *L, uint32_t ncap)
{
    if (ncap == 0) {               /* only for an empty table */
        fs_sl_free(sl, L->slots, sizeof(fs_slot) * L->cap);
        L->slots = NULL;
        L->cap = 0;
        return FS_OK;
    }
    fs_slot *ns = fs_sl_alloc(sl, sizeof(fs_slot) * ncap);
    if (!ns)
        return FS_ENOMEM;
    memset(ns, 0, sizeof(fs_slot) * ncap);
    for (uint32_t i = 0; i < L->cap; i++)
        if (L->slots[i].node)
            slot_place(ns, ncap, L->slots[i]);
    fs_sl_free(sl, L->slots, sizeof(fs_slot) * L->cap);
    L->slots = ns;
    L->cap = ncap;
    return FS_OK;
}

static int level_add(fs_sublist *sl, fs_level *L, fs_node *n, uint32_t check, uint32_t max)
{
    if (L->count + 1 > max && level_resize(sl, L, L->cap ? L->cap * 2 : 1) < 0)
        return FS_ENOMEM;
    fs_slot e = {n->hash, check, n};
    slot_place(L->slots, L->cap, e);
    L->count++;
    return FS_OK;
}

/* Shape tables are kept at most half full: most of their probes miss
 * (a subject probes every shape of its length, and matches few), and a
 * miss under linear probing scans about (1 + 1/(1-load)^2)/2 slots --
 * 8.5 at 3/4 full, 2.5 at 1/2.  They hold only the wildcard filters,
 * so the extra slots cost little memory. */
int fs_level_add_checked(fs_sublist *sl, fs_level *L, fs_node *n, uint32_t check)
{
    return level_add(sl, L, n, check, L->cap / 2);
}

int fs_level_add(fs_sublist *sl, fs_level *L, fs_node *n)
{
    return level_add(sl, L, n, n->toklen, max_load(L->cap));
}

/* Tables grow past 3/4 full and shrink below 1/8 full, to half their
 * size: after a shrink the table is at most 1/4 full, so churn around
 * either threshold cannot resize back and forth on every operation. */
void fs_level_shrink(fs_sublist *sl, fs_level *L)
{
    if (L->cap <= 16 || L->count >= L->cap / 8)
        return;
    uint32_t ncap = L->cap / 2;
    while (ncap > 16 && L->count < ncap / 8)
        ncap /= 2;
    level_resize(sl, L, ncap);          /* best effort: keeps the old table if it fails */
}

/* Remove a literal child (present).  Re-places the rest of its probe
 * cluster so lookups stay correct; never allocates. */
void fs_level_del(fs_level *L, const fs_node *n)
{
    uint32_t mask = L->cap - 1, i = n->hash & mask;
    while (L->slots[i].node != n)
        i = (i + 1) & mask;
    L->slots[i].node = NULL;
    L->count--;
    for (uint32_t k = 1, j = (i + 1) & mask; k < L->cap; k++, j = (j + 1) & mask) {
        if (!L->slots[j].node)
            break;
        fs_slot e = L->slots[j];
        L->slots[j].node = NULL;
        slot_place(L->slots, L->cap, e);
    }
}

/* ----------------------------------------------------------------- nodes */

fs_node *fs_node_new(fs_sublist *sl, fs_node *parent, const char *tok, const fs_span *sp)
{
    fs_node *n = fs_sl_alloc(sl, sizeof(fs_node) + FS_TOK_ALLOC(sp->len));
    if (!n)
        return NULL;
    memset(n, 0, sizeof(fs_node));
    n->parent = parent;
    n->hash = sp->hash;
    n->toklen = (uint16_t)sp->len;
    n->kind = (uint8_t)sp->kind;
    memcpy(n->tok, tok, sp->len);
    memset(n->tok + sp->len, 0, FS_TOK_ALLOC(sp->len) - sp->len);
    sl->nodes++;
    return n;
}

static void group_free(fs_sublist *sl, fs_group *g)
{
    fs_sl_free(sl, g->name, g->name_len ? g->name_len : 1);
    fs_sl_free(sl, g->ids, sizeof(int64_t) * g->cap);
}

/* Free a node's own contents and the node (children must be gone). */
void fs_node_free(fs_sublist *sl, fs_node *n)
{
    if (n->subcap > 1)
        fs_sl_free(sl, n->subs.many, sizeof(int64_t) * n->subcap);
    for (uint32_t i = 0; i < n->ngroups; i++)
        group_free(sl, &n->groups[i]);
    fs_sl_free(sl, n->groups, sizeof(fs_group) * n->gcap);
    if (n->next) {
        fs_sl_free(sl, n->next->slots, sizeof(fs_slot) * n->next->cap);
        fs_sl_free(sl, n->next, sizeof(fs_level));
    }
    fs_sl_free(sl, n, sizeof(fs_node) + FS_TOK_ALLOC(n->toklen));
    sl->nodes--;
}

/* Remove empty nodes from n upwards (never the root); a literal-table
 * entry is dropped from the table when empty. */
void fs_prune(fs_sublist *sl, fs_node *n)
{
    if (n != sl->root && !n->parent) {      /* an entry of the literal table */
        if (node_empty(n)) {
            fs_level_del(&sl->literals, n);
            fs_node_free(sl, n);
            fs_level_shrink(sl, &sl->literals);
        }
        return;
    }
    while (n != sl->root && node_empty(n)) {
        fs_node *parent = n->parent;
        fs_level *L = parent->next;
        if (n->kind == FS_TOK_ONE) L->one = NULL;
        else if (n->kind == FS_TOK_REST) L->rest = NULL;
        else {
            fs_level_del(L, n);
            fs_level_shrink(sl, L);
        }
        fs_node_free(sl, n);
        n = parent;
    }
    if (n->next && n->next->count == 0 && !n->next->one && !n->next->rest) {
        fs_sl_free(sl, n->next->slots, sizeof(fs_slot) * n->next->cap);
        fs_sl_free(sl, n->next, sizeof(fs_level));
        n->next = NULL;
    }
}

/* Insert id into a node's plain set.  1 new, 0 present, FS_ENOMEM. */
int fs_node_add_sub(fs_sublist *sl, fs_node *n, int64_t id)
{
    if (n->nsubs == 0 && n->subcap <= 1) {
        n->subs.one = id;
        n->nsubs = 1;
        n->subcap = 1;
        return 1;
    }
    int found;
    uint32_t at = ids_find(fs_node_ids(n), n->nsubs, id, &found);
    if (found)
        return 0;
    if (n->nsubs == UINT32_MAX)
        return FS_ENOMEM;
    if (n->nsubs == n->subcap) {
        uint32_t ncap = n->subcap <= 1 ? 4 : n->subcap * 2;
        int64_t *ids;
        if (n->subcap <= 1) {
            ids = fs_sl_alloc(sl, sizeof(int64_t) * ncap);
            if (!ids) return FS_ENOMEM;
            ids[0] = n->subs.one;
        } else {
            ids = fs_sl_realloc(sl, n->subs.many, sizeof(int64_t) * n->subcap, sizeof(int64_t) * ncap);
            if (!ids) return FS_ENOMEM;
        }
        n->subs.many = ids;
        n->subcap = ncap;
    }
    int64_t *ids = n->subcap <= 1 ? &n->subs.one : n->subs.many;
    memmove(ids + at + 1, ids + at, sizeof(int64_t) * (n->nsubs - at));
    ids[at] = id;
    n->nsubs++;
    return 1;
}

static int node_del_sub(fs_sublist *sl, fs_node *n, int64_t id)
{
    int found;
    int64_t *ids = n->subcap <= 1 ? &n->subs.one : n->subs.many;
    uint32_t at = ids_find(ids, n->nsubs, id, &found);
    if (!found)
        return 0;
    memmove(ids + at, ids + at + 1, sizeof(int64_t) * (n->nsubs - at - 1));
    n->nsubs--;
    if (n->nsubs <= 1 && n->subcap > 1) {
        /* Back to the inline id, as before the array was needed: memory
         * follows the live set, and an undone insert leaves no trace. */
        int64_t *many = n->subs.many;
        uint32_t cap = n->subcap;
        n->subs.one = n->nsubs ? many[0] : 0;
        n->subcap = n->nsubs;
        fs_sl_free(sl, many, sizeof(int64_t) * cap);
    }
    return 1;
}


static int group_add(fs_sublist *sl, fs_group *g, int64_t id)
{
    int found;
    uint32_t at = ids_find(g->ids, g->n, id, &found);
    if (found)
        return 0;
    if (g->n == UINT32_MAX)
        return FS_ENOMEM;
    if (g->n == g->cap) {
        uint32_t ncap = g->cap ? g->cap * 2 : 2;
        int64_t *ids = fs_sl_realloc(sl, g->ids, sizeof(int64_t) * g->cap, sizeof(int64_t) * ncap);
        if (!ids) return FS_ENOMEM;
        g->ids = ids;
        g->cap = ncap;
    }
    memmove(g->ids + at + 1, g->ids + at, sizeof(int64_t) * (g->n - at));
    g->ids[at] = id;
    g->n++;
    return 1;
}

/* Insert id into the node's group q, creating the group if needed.
 * 1 new, 0 present, FS_ENOMEM (node unchanged). */
int fs_node_add_queued(fs_sublist *sl, fs_node *n, const char *q, uint32_t qlen, int64_t id)
{
    uint32_t qh = fs_hash(q, qlen);
    fs_group *g = fs_node_find_group(n, q, qlen, qh);
    if (g)
        return group_add(sl, g, id);
    fs_group fresh = {0};
    fresh.name = fs_sl_alloc(sl, qlen ? qlen : 1);
    if (!fresh.name)
        return FS_ENOMEM;
    memcpy(fresh.name, q, qlen);
    fresh.name_len = qlen;
    fresh.name_hash = qh;
    if (group_add(sl, &fresh, id) < 0) {
        group_free(sl, &fresh);
        return FS_ENOMEM;
    }
    if (n->ngroups == n->gcap) {
        uint32_t ncap = n->gcap ? n->gcap * 2 : 1;
        fs_group *gs = fs_sl_realloc(sl, n->groups, sizeof(fs_group) * n->gcap, sizeof(fs_group) * ncap);
        if (!gs) {
            group_free(sl, &fresh);
            return FS_ENOMEM;
        }
        n->groups = gs;
        n->gcap = ncap;
    }
    n->groups[n->ngroups++] = fresh;
    return 1;
}

static int node_del_queued(fs_sublist *sl, fs_node *n, const char *q, uint32_t qlen, int64_t id)
{
    fs_group *g = fs_node_find_group(n, q, qlen, fs_hash(q, qlen));
    if (!g)
        return 0;
    int found;
    uint32_t at = ids_find(g->ids, g->n, id, &found);
    if (!found)
        return 0;
    memmove(g->ids + at, g->ids + at + 1, sizeof(int64_t) * (g->n - at - 1));
    if (--g->n == 0) {
        /* Drop the group; its slot is reused, the block is kept (removal
         * never allocates) and freed when the node has no groups left. */
        group_free(sl, g);
        *g = n->groups[--n->ngroups];
        if (n->ngroups == 0) {
            fs_sl_free(sl, n->groups, sizeof(fs_group) * n->gcap);
            n->groups = NULL;
            n->gcap = 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------- create / destroy */

fs_sublist *fs_sublist_new(fs_dialect d)
{
    fs_sublist *sl = FS_MALLOC(sizeof(fs_sublist));
    if (!sl)
        return NULL;
    memset(sl, 0, sizeof(*sl));
    sl->dialect = d;
    static const fs_span root_span = {0, 0, 0, FS_TOK_LITERAL};
    sl->root = fs_node_new(sl, NULL, "", &root_span);
    if (!sl->root) {
        FS_FREE(sl);
        return NULL;
    }
    sl->nodes = 0;  /* the root is not counted */
    if (pthread_rwlock_init(&sl->lock, NULL) != 0) {
        FS_FREE(sl->root);
        FS_FREE(sl);
        return NULL;
    }
    return sl;
}

/* Free the whole trie without a stack: descend to a childless node, free
 * it, climb to the parent.  Each level's scan position is kept in its cap
 * field (the level is being destroyed anyway), so the walk is linear. */
void fs_sublist_free(fs_sublist *sl)
{
    if (!sl)
        return;
    fs_node *n = sl->root;
    while (n) {
        fs_level *L = n->next;
        fs_node *child = NULL;
        if (L) {
            while (L->cap > 0 && !child) {
                fs_slot *s = &L->slots[L->cap - 1];
                child = s->node;
                s->node = NULL;
                if (!child) L->cap--;
            }
            if (!child && L->one) { child = L->one; L->one = NULL; }
            if (!child && L->rest) { child = L->rest; L->rest = NULL; }
        }
        if (child) {
            n = child;
            continue;
        }
        if (L) {
            FS_FREE(L->slots);
            FS_FREE(L);
            n->next = NULL;
        }
        fs_node *parent = n->parent;
        if (n->subcap > 1) FS_FREE(n->subs.many);
        for (uint32_t i = 0; i < n->ngroups; i++) {
            FS_FREE(n->groups[i].name);
            FS_FREE(n->groups[i].ids);
        }
        FS_FREE(n->groups);
        FS_FREE(n);
        n = parent;
    }
    for (uint32_t i = 0; i < sl->literals.cap; i++)
        if (sl->literals.slots[i].node)
            fs_node_free(sl, sl->literals.slots[i].node);
    FS_FREE(sl->literals.slots);
    fs_shapes_free(sl);
    fs_cache_free(sl->cache);
    pthread_rwlock_destroy(&sl->lock);
    FS_FREE(sl);
}

fs_dialect fs_sublist_dialect(const fs_sublist *sl) { return sl->dialect; }

uint64_t fs_sublist_count(fs_sublist *sl)
{
    pthread_rwlock_rdlock(&sl->lock);
    uint64_t c = sl->count;
    pthread_rwlock_unlock(&sl->lock);
    return c;
}

uint64_t fs_sublist_generation(fs_sublist *sl)
{
    pthread_rwlock_rdlock(&sl->lock);
    uint64_t g = sl->generation;
    pthread_rwlock_unlock(&sl->lock);
    return g;
}

/* ------------------------------------------------------- insert / remove */

/* A validated subscription: the filter's tokens plus where the queue is. */
typedef struct {
    const char *filter;
    uint32_t filter_len;
    int literal;          /* no wildcard: lives in the literal table */
    int shaped;           /* has a shape (fs_shape.h): shape describes it */
    fs_shape_of shape;
    const char *queue;    /* NULL: plain */
    uint32_t queue_len;
} parsed_spec;

/* Split "$share/G/f", check the queue, tokenize the filter into t. */
static int parse_spec(fs_dialect d, const fs_spec *spec, fs_tokens *t, parsed_spec *out, fs_error *err)
{
    const char *f = spec->filter, *q = spec->queue;
    size_t flen = spec->filter_len, qlen = spec->queue_len;
    if (d == FS_MQTT) {
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
    out->shaped = fs_shape_classify(t, &out->shape);
    out->literal = 1;
    for (uint32_t i = 0; i < t->n; i++)
        if (t->tok[i].kind != FS_TOK_LITERAL)
            out->literal = 0;
    out->queue = q;
    out->queue_len = (uint32_t)qlen;
    return FS_OK;
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
typedef struct {
    fs_level *level;
    uint32_t cap;
} growth;

static void undo_growth(fs_sublist *sl, const growth *g)
{
    if (g->level && g->level->cap != g->cap && g->level->count <= max_load(g->cap))
        level_resize(sl, g->level, g->cap);   /* best effort: keeps the bigger table if it fails */
}

/* Find the node holding t's subscriptions -- in the literal table, the
 * filter's shape table (then *shp is that shape) or the trie -- or NULL.
 * A shaped filter may still sit in the trie: it went there while the
 * shape budget was spent, or it came from a version 1 image. */
static fs_node *find_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, fs_shape **shp)
{
    *shp = NULL;
    if (ps->literal)
        return fs_level_find(&sl->literals, ps->filter, ps->filter_len, fs_hash(ps->filter, ps->filter_len));
    if (ps->shaped) {
        fs_shape *sh = fs_shape_find(sl, &ps->shape);
        fs_node *e = sh ? fs_shape_lookup(sh, ps->filter, ps->filter_len, ps->shape.key) : NULL;
        if (e) {
            *shp = sh;
            return e;
        }
    }
    const char *filter = ps->filter;
    fs_node *n = sl->root;
    for (uint32_t i = 0; i < t->n && n; i++) {
        const fs_span *sp = &t->tok[i];
        fs_level *L = n->next;
        if (!L) return NULL;
        if (sp->kind == FS_TOK_ONE) n = L->one;
        else if (sp->kind == FS_TOK_REST) n = L->rest;
        else n = fs_level_find(L, filter + sp->off, sp->len, sp->hash);
    }
    return n;
}

/* Drop n if it holds nothing any more: from its shape table (sh), the
 * literal table or the trie. */
static void prune_node(fs_sublist *sl, fs_node *n, fs_shape *sh)
{
    if (!sh) {
        fs_prune(sl, n);
    } else if (!fs_has_subs(n)) {
        fs_shape_del(sl, sh, n);
        fs_node_free(sl, n);
    }
}

/* A new entry for a whole filter in the literal table or a shape table.
 * Records in g the pre-existing table it grew.  FS_OK or FS_ENOMEM. */
static int new_entry(fs_sublist *sl, const parsed_spec *ps, fs_shape *sh, int fresh_shape,
                     growth *g, fs_node **out)
{
    fs_level *L = sh ? &sh->table : &sl->literals;
    uint64_t key = sh ? ps->shape.key : fs_hash(ps->filter, ps->filter_len);
    fs_span whole = {0, ps->filter_len, (uint32_t)key, sh ? FS_NODE_SHAPED : FS_TOK_LITERAL};
    fs_node *n = fs_node_new(sl, NULL, ps->filter, &whole);
    if (!n)
        return FS_ENOMEM;
    if (!fresh_shape) {
        g->level = L;
        g->cap = L->cap;
    }
    if ((sh ? fs_shape_add(sl, sh, n, key) : fs_level_add(sl, L, n)) < 0) {
        fs_node_free(sl, n);
        return FS_ENOMEM;
    }
    *out = n;
    return FS_OK;
}

/* Create the trie path of t.  FS_OK (*out its last node) or FS_ENOMEM
 * (*out the deepest node reached, for pruning). */
static int trie_path(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, growth *g, fs_node **out)
{
    fs_node *n = sl->root;
    for (uint32_t i = 0; i < t->n; i++) {
        const fs_span *sp = &t->tok[i];
        int fresh_level = !n->next;
        *out = n;
        if (fresh_level) {
            n->next = fs_sl_alloc(sl, sizeof(fs_level));
            if (!n->next)
                return FS_ENOMEM;
            memset(n->next, 0, sizeof(fs_level));
        }
        fs_level *L = n->next;
        fs_node *child;
        if (sp->kind == FS_TOK_ONE) child = L->one;
        else if (sp->kind == FS_TOK_REST) child = L->rest;
        else child = fs_level_find(L, ps->filter + sp->off, sp->len, sp->hash);
        if (!child) {
            child = fs_node_new(sl, n, ps->filter + sp->off, sp);
            if (!child)
                return FS_ENOMEM;
            if (!fresh_level && !g->level) {
                g->level = L;
                g->cap = L->cap;
            }
            if (sp->kind == FS_TOK_ONE) L->one = child;
            else if (sp->kind == FS_TOK_REST) L->rest = child;
            else if (fs_level_add(sl, L, child) < 0) {
                fs_node_free(sl, child);
                return FS_ENOMEM;
            }
        }
        n = child;
    }
    *out = n;
    return FS_OK;
}

/* Add the subscription, creating its node where it belongs: the literal
 * table, its shape's table (creating the shape while the budget lasts),
 * or the trie.  Caller holds the write lock.  1 new, 0 present,
 * FS_ENOMEM (index unchanged). */
static int insert_locked(fs_sublist *sl, const fs_tokens *t, const parsed_spec *ps, int64_t id,
                         growth *g, int invalidate)
{
    fs_shape *sh;
    int rc = FS_OK;
    g->level = NULL;
    g->cap = 0;
    fs_node *n = find_locked(sl, t, ps, &sh);
    if (!n) {
        int fresh_shape = 0;
        if (ps->shaped && !(sh = fs_shape_find(sl, &ps->shape))) {
            if (fs_shape_create(sl, &ps->shape, &sh) < 0)
                return FS_ENOMEM;
            fresh_shape = sh != NULL;
        }
        if (ps->literal || sh) {
            rc = new_entry(sl, ps, sh, fresh_shape, g, &n);
            if (rc < 0) {
                if (fresh_shape)
                    fs_shape_drop_if_empty(sl, sh);
                return rc;
            }
        } else if ((rc = trie_path(sl, t, ps, g, &n)) < 0) {
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
    fs_node *n = find_locked(sl, t, ps, &sh);
    if (!n)
        return 0;
    int rc = ps->queue ? node_del_queued(sl, n, ps->queue, ps->queue_len, id)
                       : node_del_sub(sl, n, id);
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
        growth g;
        pthread_rwlock_wrlock(&sl->lock);
        rc = insert_locked(sl, &t, &ps, spec->id, &g, 1);
        pthread_rwlock_unlock(&sl->lock);
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
        pthread_rwlock_wrlock(&sl->lock);
        rc = remove_locked(sl, &t, &ps, spec->id, 1);
        pthread_rwlock_unlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

int fs_sublist_insert_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err)
{
    *changed = 0;
    *bad = 0;
    /* Remember which ones were new and what they grew, to undo them if a
     * later one fails. */
    unsigned char *fresh = FS_MALLOC(n ? n : 1);
    growth *grew = FS_MALLOC(sizeof(growth) * (n ? n : 1));
    if (!fresh || !grew) {
        FS_FREE(fresh);
        FS_FREE(grew);
        return FS_ENOMEM;
    }
    fs_tokens t;
    parsed_spec ps;
    fs_tokens_init(&t);
    int rc = FS_OK;
    size_t i;
    pthread_rwlock_wrlock(&sl->lock);
    uint64_t generation = sl->generation;
    for (i = 0; i < n; i++) {
        rc = parse_spec(sl->dialect, &specs[i], &t, &ps, err);
        if (rc == FS_OK)
            rc = insert_locked(sl, &t, &ps, specs[i].id, &grew[i], 0);
        if (rc < 0)
            break;
        fresh[i] = (unsigned char)rc;
        *changed += (size_t)rc;
        rc = FS_OK;
    }
    if (rc < 0) {
        *bad = i;
        /* Undo.  Tokens already have room for every filter before i, so
         * parse_spec cannot fail here, and removal never allocates. */
        fs_error ignored;
        while (i-- > 0) {
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &t, &ps, &ignored) == FS_OK)
                remove_locked(sl, &t, &ps, specs[i].id, 0);   /* the cache never saw it */
            undo_growth(sl, &grew[i]);
        }
        sl->inserts -= *changed;
        sl->removes -= *changed;
        sl->generation = generation;
        *changed = 0;
    } else if (sl->cache) {
        /* Only a batch that went in whole touches the cache: evict what
         * the new subscriptions match (re-parsing cannot fail now). */
        fs_error ignored;
        for (i = 0; i < n; i++)
            if (fresh[i] && parse_spec(sl->dialect, &specs[i], &t, &ps, &ignored) == FS_OK)
                fs_cache_invalidate(sl->cache, sl->dialect, ps.filter, ps.filter_len, &t, ps.literal);
    }
    pthread_rwlock_unlock(&sl->lock);
    fs_tokens_free(&t);
    FS_FREE(fresh);
    FS_FREE(grew);
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
        pthread_rwlock_wrlock(&sl->lock);
        for (size_t i = 0; i < n; i++) {
            parse_spec(sl->dialect, &specs[i], &t, &ps, err);
            *changed += (size_t)remove_locked(sl, &t, &ps, specs[i].id, 1);
        }
        pthread_rwlock_unlock(&sl->lock);
    }
    fs_tokens_free(&t);
    return rc;
}

/* ------------------------------------------------------------------ match */

void fs_scratch_init(fs_scratch *sc)
{
    memset(sc, 0, sizeof(*sc));
    fs_tokens_init(&sc->toks);
}

void fs_scratch_free(fs_scratch *sc)
{
    fs_tokens_free(&sc->toks);
    FS_FREE(sc->front);
    FS_FREE(sc->next);
    FS_FREE(sc->hits);
    fs_scratch_init(sc);
}



/* Collect into sc->hits every node whose subscriptions match the tokenized
 * subject s.  Caller holds the read lock. */
int fs_walk_locked(const fs_sublist *sl, const char *s, size_t len, uint32_t hash, fs_scratch *sc)
{
    const fs_tokens *t = &sc->toks;
    sc->nhits = 0;
    if (sl->literals.count) {
        const fs_node *e = fs_level_find_within(&sl->literals, s, (uint32_t)len, hash, s + len);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
    }
    if (sl->shapes.n && fs_shapes_collect(sl, s, len, t, sc) < 0)
        return FS_ENOMEM;
    return fs_trie_walk_locked(sl, s, t, sc);
}

int fs_trie_walk_locked(const fs_sublist *sl, const char *s, const fs_tokens *t, fs_scratch *sc)
{
    int mqtt = sl->dialect == FS_MQTT;
    int dollar = mqtt && s[0] == '$';
    if (!sl->root->next)
        return FS_OK;
    const fs_span *last = &t->tok[t->n - 1];
    const char *end = s + last->off + last->len;
    sc->nfront = 0;
    if (fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, sl->root) < 0)
        return FS_ENOMEM;
    for (uint32_t i = 0; i < t->n && sc->nfront; i++) {
        const fs_span *sp = &t->tok[i];
        int wild_ok = !(dollar && i == 0);
        sc->nnext = 0;
        for (size_t k = 0; k < sc->nfront; k++) {
            const fs_level *L = sc->front[k]->next;
            if (!L)
                continue;
            /* A rest-wildcard node is a leaf, so it exists only while it
             * holds subscriptions: no need to look inside it here. */
            if (wild_ok && L->rest &&
                fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, L->rest) < 0)
                return FS_ENOMEM;
            if (wild_ok && L->one &&
                fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, L->one) < 0)
                return FS_ENOMEM;
            const fs_node *c = fs_level_find_within(L, s + sp->off, sp->len, sp->hash, end);
            if (c && fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, c) < 0)
                return FS_ENOMEM;
        }
        const fs_node **tmp = sc->front;
        sc->front = sc->next;
        sc->next = tmp;
        size_t tcap = sc->cap_front;
        sc->cap_front = sc->cap_next;
        sc->cap_next = tcap;
        sc->nfront = sc->nnext;
    }
    for (size_t k = 0; k < sc->nfront; k++) {
        const fs_node *n = sc->front[k];
        if (fs_has_subs(n) && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
            return FS_ENOMEM;
        /* MQTT: "a/#" also matches "a" itself. */
        if (mqtt && n->next && n->next->rest &&
            fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n->next->rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

void fs_result_init(fs_result *r) { memset(r, 0, sizeof(*r)); }

void fs_result_free(fs_result *r)
{
    FS_FREE(r->ids);
    FS_FREE(r->groups);
    FS_FREE(r->arena);
    fs_result_init(r);
}

int fs_arena_put(char **arena, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (n == 0)
        return FS_OK;
    if (fs_grow(arena, cap, *len + n, 1) < 0)
        return FS_ENOMEM;
    memcpy(*arena + *len, p, n);
    *len += n;
    return FS_OK;
}

/* Write the filter of node n (its path from the root) into an arena. */
int fs_put_path(const fs_sublist *sl, const fs_node *n, char **arena, size_t *len, size_t *cap)
{
    if (n == sl->root)
        return FS_OK;
    if (!n->parent)      /* a literal-table entry holds its whole filter */
        return fs_arena_put(arena, len, cap, n->tok, n->toklen);
    size_t total = 0;
    for (const fs_node *p = n; p != sl->root; p = p->parent)
        total += p->toklen + 1;
    total -= 1;
    if (fs_grow(arena, cap, *len + total, 1) < 0)
        return FS_ENOMEM;
    char *end = *arena + *len + total;
    char sep = sl->dialect == FS_NATS ? '.' : '/';
    for (const fs_node *p = n; p != sl->root; p = p->parent) {
        end -= p->toklen;
        memcpy(end, p->tok, p->toklen);
        if (p->parent != sl->root)
            *--end = sep;
    }
    *len += total;
    return FS_OK;
}

static int put_ids(fs_result *r, const int64_t *ids, size_t n)
{
    if (n == 0)               /* r->ids may still be NULL: no memcpy(NULL, ...) */
        return FS_OK;
    if (fs_grow(&r->ids, &r->cap_ids, r->nids + n, sizeof(int64_t)) < 0)
        return FS_ENOMEM;
    memcpy(r->ids + r->nids, ids, sizeof(int64_t) * n);
    r->nids += n;
    return FS_OK;
}

int fs_group_repeats(const fs_sublist *sl, const fs_node *const *hits, size_t k, const fs_group *g)
{
    if (sl->dialect != FS_NATS)
        return 0;
    for (size_t j = 0; j < k; j++)
        if (hits[j]->ngroups && fs_node_find_group(hits[j], g->name, g->name_len, g->name_hash))
            return 1;
    return 0;
}

uint32_t fs_group_key(const fs_sublist *sl, const fs_node *n, const fs_group *g)
{
    uint64_t h = g->name_hash;
    if (sl->dialect == FS_MQTT) {
        /* The group is (name, filter): fold in the filter's token hashes,
         * last to first -- the same whether the filter lives in the trie
         * (one token per node) or in a table entry (the whole filter). */
        if (n->parent) {
            for (const fs_node *p = n; p != sl->root; p = p->parent)
                h = (h ^ p->hash) * 0x9E3779B97F4A7C15ull;
        } else {
            const char *f = n->tok;
            size_t end = n->toklen;
            for (;;) {
                size_t start = end;
                while (start > 0 && f[start - 1] != '/')
                    start--;
                h = (h ^ fs_hash(f + start, end - start)) * 0x9E3779B97F4A7C15ull;
                if (start == 0)
                    break;
                end = start - 1;
            }
        }
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Build r from sc->hits.  NATS groups merge by name across nodes; MQTT
 * groups are (name, filter) pairs, one per node. */
static int build_result(const fs_sublist *sl, const fs_scratch *sc, fs_result *r)
{
    r->nids = r->nplain = r->ngroups = r->narena = 0;
    for (size_t k = 0; k < sc->nhits; k++)
        if (put_ids(r, fs_node_ids(sc->hits[k]), sc->hits[k]->nsubs) < 0)
            return FS_ENOMEM;
    r->nplain = r->nids;
    int nats = sl->dialect == FS_NATS;
    for (size_t k = 0; k < sc->nhits; k++) {
        const fs_node *n = sc->hits[k];
        for (uint32_t gi = 0; gi < n->ngroups; gi++) {
            const fs_group *g = &n->groups[gi];
            if (fs_group_repeats(sl, sc->hits, k, g))     /* merged into an earlier node's group */
                continue;
            if (fs_grow(&r->groups, &r->cap_groups, r->ngroups + 1, sizeof(fs_group_out)) < 0)
                return FS_ENOMEM;
            fs_group_out *o = &r->groups[r->ngroups];
            memset(o, 0, sizeof(*o));
            o->name_off = r->narena;
            o->name_len = g->name_len;
            o->key_hash = fs_group_key(sl, n, g);
            if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, g->name, g->name_len) < 0)
                return FS_ENOMEM;
            if (!nats) {
                o->filter_off = r->narena;
                if (fs_put_path(sl, n, &r->arena, &r->narena, &r->cap_arena) < 0)
                    return FS_ENOMEM;
                o->filter_len = r->narena - o->filter_off;
            }
            o->members_off = r->nids;
            if (put_ids(r, g->ids, g->n) < 0)
                return FS_ENOMEM;
            if (nats) {
                /* Gather the same-named group from the later nodes. */
                for (size_t k2 = k + 1; k2 < sc->nhits; k2++) {
                    const fs_node *n2 = sc->hits[k2];
                    const fs_group *g2 = fs_node_find_group(n2, g->name, g->name_len, g->name_hash);
                    if (g2 && put_ids(r, g2->ids, g2->n) < 0)
                        return FS_ENOMEM;
                }
            }
            o->members_len = r->nids - o->members_off;
            r->ngroups++;
        }
    }
    return FS_OK;
}

void fs_count_matches(fs_sublist *sl, uint64_t matches, uint64_t fanout, uint64_t fanout_max)
{
    atomic_fetch_add_explicit(&sl->matches, matches, memory_order_relaxed);
    atomic_fetch_add_explicit(&sl->fanout_total, fanout, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit(&sl->fanout_max, memory_order_relaxed);
    while (fanout_max > cur &&
           !atomic_compare_exchange_weak_explicit(&sl->fanout_max, &cur, fanout_max,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static void count_match(fs_sublist *sl, uint64_t fanout) { fs_count_matches(sl, 1, fanout, fanout); }

int fs_compute_locked(fs_sublist *sl, const char *s, size_t len, uint32_t hash,
                      fs_scratch *sc, fs_result *r, fs_error *err)
{
    int rc = fs_tokenize(sl->dialect, s, len, 0, &sc->toks, err);
    if (rc == FS_OK)
        rc = fs_walk_locked(sl, s, len, hash, sc);
    if (rc == FS_OK)
        rc = build_result(sl, sc, r);
    if (rc == FS_OK && sl->cache)
        fs_cache_put(sl->cache, s, len, hash, &sc->toks, r);
    return rc;
}

static int result_copy(fs_result *dst, const fs_result *src)
{
    if (fs_grow(&dst->ids, &dst->cap_ids, src->nids, sizeof(int64_t)) < 0 ||
        fs_grow(&dst->groups, &dst->cap_groups, src->ngroups, sizeof(fs_group_out)) < 0 ||
        fs_grow(&dst->arena, &dst->cap_arena, src->narena, 1) < 0)
        return FS_ENOMEM;
    if (src->nids) memcpy(dst->ids, src->ids, sizeof(int64_t) * src->nids);
    if (src->ngroups) memcpy(dst->groups, src->groups, sizeof(fs_group_out) * src->ngroups);
    if (src->narena) memcpy(dst->arena, src->arena, src->narena);
    dst->nids = src->nids;
    dst->nplain = src->nplain;
    dst->ngroups = src->ngroups;
    dst->narena = src->narena;
    return FS_OK;
}

int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                     fs_scratch *sc, fs_result *r, fs_error *err)
{
    uint32_t hash = fs_hash(subject, len);
    int rc;
    pthread_rwlock_rdlock(&sl->lock);
    fs_cache_shard *held;
    const fs_result *cached = sl->cache ? fs_cache_get(sl->cache, subject, len, hash, 1, &held) : NULL;
    if (cached) {
        rc = result_copy(r, cached);
        fs_cache_release(held);
    } else {
        rc = fs_compute_locked(sl, subject, len, hash, sc, r, err);
    }
    pthread_rwlock_unlock(&sl->lock);
    if (rc == FS_OK)
        count_match(sl, r->nids);
    return rc;
}

int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                        fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue,
                        fs_error *err)
{
    *nplain = *nqueue = 0;
    uint32_t hash = fs_hash(subject, len);
    int rc = FS_OK;
    pthread_rwlock_rdlock(&sl->lock);
    fs_cache_shard *held;
    const fs_result *cached = sl->cache ? fs_cache_get(sl->cache, subject, len, hash, 1, &held) : NULL;
    if (cached) {
        *nplain = cached->nplain;
        *nqueue = cached->nids - cached->nplain;
        fs_cache_release(held);
    } else if (sl->cache) {
        /* Fill the cache: the next question about this subject is cheap. */
        fs_result r;
        fs_result_init(&r);
        rc = fs_compute_locked(sl, subject, len, hash, sc, &r, err);
        *nplain = r.nplain;
        *nqueue = r.nids - r.nplain;
        fs_result_free(&r);
    } else {
        rc = fs_tokenize(sl->dialect, subject, len, 0, &sc->toks, err);
        if (rc == FS_OK)
            rc = fs_walk_locked(sl, subject, len, hash, sc);
        for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
            const fs_node *n = sc->hits[k];
            *nplain += n->nsubs;
            for (uint32_t gi = 0; gi < n->ngroups; gi++)
                *nqueue += n->groups[gi].n;
        }
    }
    pthread_rwlock_unlock(&sl->lock);
    if (rc == FS_OK)
        count_match(sl, *nplain + *nqueue);
    return rc;
}

int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, fs_error *err)
{
    pthread_rwlock_rdlock(&sl->lock);
    int cached = sl->cache != NULL;
    pthread_rwlock_unlock(&sl->lock);
    if (cached) {
        /* With a cache the whole answer is worth computing: it is kept,
         * and the next question about this subject is one lookup. */
        uint64_t nplain, nqueue;
        int rc = fs_sublist_interest(sl, subject, len, sc, &nplain, &nqueue, err);
        return rc < 0 ? rc : nplain + nqueue > 0;
    }
    uint32_t hash = fs_hash(subject, len);
    int rc = fs_tokenize(sl->dialect, subject, len, 0, &sc->toks, err);
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&sl->lock);
    if (sl->literals.count &&
        fs_level_find_within(&sl->literals, subject, (uint32_t)len, hash, subject + len)) {
        rc = 1;
    } else {
        /* The shapes one by one, stopping at the first entry (entries
         * always hold subscriptions), then the trie. */
        const fs_tokens *t = &sc->toks;
        const fs_shapes *S = &sl->shapes;
        uint32_t k = t->n, need = k < FS_SHAPE_MAX_TOKENS ? k : FS_SHAPE_MAX_TOKENS;
        uint64_t bits = S->probe[k > FS_SHAPE_MAX_TOKENS ? FS_SHAPE_MAX_TOKENS + 1 : k];
        uint64_t m[FS_SHAPE_MAX_TOKENS], P[FS_SHAPE_MAX_TOKENS + 1];
        int dollar = sl->dialect == FS_MQTT && subject[0] == '$';
        char sep = sl->dialect == FS_NATS ? '.' : '/';
        rc = 0;
        if (bits)
            fs_shape_mixes(t->tok, need, m, P);
        for (; bits && !rc; bits &= bits - 1) {
            const fs_shape *sh = S->shape[__builtin_ctzll(bits)];
            rc = !(dollar && sh->first_wild) &&
                 fs_shape_probe(sh, fs_shape_subject_key(sh, m, P), sep, subject, t->tok, subject + len);
        }
        if (!rc) {
            sc->nhits = 0;
            rc = fs_trie_walk_locked(sl, subject, t, sc);
            if (rc == FS_OK)
                rc = sc->nhits > 0;
        }
    }
    pthread_rwlock_unlock(&sl->lock);
    if (rc >= 0)
        count_match(sl, 0);
    return rc;
}

int fs_sublist_set_cache(fs_sublist *sl, size_t capacity)
{
    fs_cache *c = NULL;
    if (capacity && !(c = fs_cache_new(capacity)))
        return FS_ENOMEM;
    pthread_rwlock_wrlock(&sl->lock);
    fs_cache *old = sl->cache;
    sl->cache = c;
    pthread_rwlock_unlock(&sl->lock);
    fs_cache_free(old);
    return FS_OK;
}

/* Add to sc->hits the literal-table and shape-table entries that the
 * query filter q (tokens in sc->toks) intersects. */
static int rentries_locked(const fs_sublist *sl, const char *q, size_t len, fs_scratch *sc)
{
    const fs_level *L = &sl->literals;
    const fs_tokens *qt = &sc->toks;
    int literal = 1;
    for (uint32_t i = 0; i < qt->n; i++)
        literal &= qt->tok[i].kind == FS_TOK_LITERAL;
    if (literal) {
        /* A literal query is a subject: the entries are what it matches. */
        const fs_node *e = fs_level_find(L, q, (uint32_t)len, fs_hash(q, len));
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
        return fs_shapes_collect(sl, q, len, qt, sc);
    }
    fs_tokens et;
    fs_tokens_init(&et);
    fs_error ignored;
    int rc = FS_OK;
    for (uint32_t j = 0; j <= sl->shapes.n && rc == FS_OK; j++) {
        const fs_level *T = j < sl->shapes.n ? &sl->shapes.shape[j]->table : L;
        for (uint32_t i = 0; i < T->cap && rc == FS_OK; i++) {
            const fs_node *e = T->slots[i].node;
            if (!e)
                continue;
            rc = fs_tokenize(sl->dialect, e->tok, e->toklen, 1, &et, &ignored);
            if (rc == FS_OK && fs_filters_intersect(sl->dialect, q, qt, e->tok, &et))
                rc = fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e);
        }
    }
    fs_tokens_free(&et);
    return rc;
}

/* ---------------------------------------------------------- reverse match */

void fs_rresult_init(fs_rresult *r) { memset(r, 0, sizeof(*r)); }

void fs_rresult_free(fs_rresult *r)
{
    FS_FREE(r->hits);
    FS_FREE(r->arena);
    fs_rresult_init(r);
}

/* Push every node below n (not n itself) onto sc->hits, skipping, when
 * skip_dollar, literal children of n whose token starts with '$'.  Uses
 * sc->next as the explicit stack. */
static int push_descendants(const fs_node *n, int skip_dollar, fs_scratch *sc)
{
    sc->nnext = 0;
    if (fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, n) < 0)
        return FS_ENOMEM;
    while (sc->nnext) {
        const fs_node *x = sc->next[--sc->nnext];
        if (x != n && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, x) < 0)
            return FS_ENOMEM;
        const fs_level *L = x->next;
        if (!L)
            continue;
        for (uint32_t i = 0; i < L->cap; i++) {
            const fs_node *c = L->slots[i].node;
            if (c && !(skip_dollar && x == n && c->toklen && c->tok[0] == '$') &&
                fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, c) < 0)
                return FS_ENOMEM;
        }
        if (L->one && fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, L->one) < 0)
            return FS_ENOMEM;
        if (L->rest && fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, L->rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* Collect into sc->hits every node whose filter intersects the query
 * filter q (tokenized in sc->toks).  Nodes on the front are at depth i,
 * aligned with q's first i tokens. */
static int rwalk_locked(const fs_sublist *sl, const char *q, fs_scratch *sc)
{
    const fs_tokens *t = &sc->toks;
    int mqtt = sl->dialect == FS_MQTT;
    sc->nhits = 0;
    sc->nfront = 0;
    if (fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, sl->root) < 0)
        return FS_ENOMEM;
    /* The frontier is processed depth by depth, like walk_locked; the
     * "next" array is borrowed by push_descendants, so collect the next
     * depth into a separate region at the end of front instead. */
    for (uint32_t i = 0; i < t->n && sc->nfront; i++) {
        const fs_span *sp = &t->tok[i];
        int root = i == 0;
        size_t end = sc->nfront;
        for (size_t k = 0; k < end; k++) {
            const fs_node *n = sc->front[k];
            if (sp->kind == FS_TOK_REST) {
                /* '>' matches 1+ tokens: everything below n; MQTT '#' also
                 * n itself (0 tokens), except the root and except where
                 * that would be the one-empty-level topic "" (invalid). */
                int empty_topic = i == 1 && (t->tok[0].len == 0 || (n->kind == FS_TOK_LITERAL && n->toklen == 0));
                if (mqtt && !root && !empty_topic && fs_has_subs(n) &&
                    fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
                    return FS_ENOMEM;
                if (push_descendants(n, mqtt && root, sc) < 0)
                    return FS_ENOMEM;
                continue;
            }
            const fs_level *L = n->next;
            if (!L)
                continue;
            int q_dollar = mqtt && root && sp->kind == FS_TOK_LITERAL && sp->len && q[sp->off] == '$';
            /* A stored rest-wildcard matches whatever the query's remaining
             * 1+ tokens match. */
            if (L->rest && !q_dollar && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, L->rest) < 0)
                return FS_ENOMEM;
            if (L->one && !q_dollar && fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, L->one) < 0)
                return FS_ENOMEM;
            if (sp->kind == FS_TOK_ONE) {
                for (uint32_t s = 0; s < L->cap; s++) {
                    const fs_node *c = L->slots[s].node;
                    if (c && !(mqtt && root && c->toklen && c->tok[0] == '$') &&
                        fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, c) < 0)
                        return FS_ENOMEM;
                }
            } else {
                const fs_node *c = fs_level_find(L, q + sp->off, sp->len, sp->hash);
                if (c && fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, c) < 0)
                    return FS_ENOMEM;
            }
        }
        memmove(sc->front, sc->front + end, sizeof(fs_node *) * (sc->nfront - end));
        sc->nfront -= end;
    }
    /* Query exhausted with nodes aligned: those filters end here too.  A
     * query ending in a rest-wildcard was fully handled in the loop. */
    if (t->n && t->tok[t->n - 1].kind == FS_TOK_REST)
        return FS_OK;
    for (size_t k = 0; k < sc->nfront; k++) {
        const fs_node *n = sc->front[k];
        if (fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
            return FS_ENOMEM;
        /* MQTT "a/#" matches "a" too -- but "/#" cannot match "", which
         * is not a valid topic. */
        int empty_topic = n->parent == sl->root && n->toklen == 0;
        if (mqtt && !empty_topic && n->next && n->next->rest &&
            fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n->next->rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

static int rhit_add(const fs_sublist *sl, const fs_node *n, const fs_group *g, int64_t id, fs_rresult *r)
{
    if (fs_grow(&r->hits, &r->cap_hits, r->nhits + 1, sizeof(fs_rhit)) < 0)
        return FS_ENOMEM;
    fs_rhit *h = &r->hits[r->nhits];
    memset(h, 0, sizeof(*h));
    h->id = id;
    h->filter_off = r->narena;
    if (fs_put_path(sl, n, &r->arena, &r->narena, &r->cap_arena) < 0)
        return FS_ENOMEM;
    h->filter_len = r->narena - h->filter_off;
    if (g) {
        h->has_queue = 1;
        h->queue_off = r->narena;
        h->queue_len = g->name_len;
        if (fs_arena_put(&r->arena, &r->narena, &r->cap_arena, g->name, g->name_len) < 0)
            return FS_ENOMEM;
    }
    r->nhits++;
    return FS_OK;
}

int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                             fs_scratch *sc, fs_rresult *r, fs_error *err)
{
    r->nhits = r->narena = 0;
    if (sl->dialect == FS_MQTT) {
        const char *g, *f;
        size_t glen, flen;
        int rc = fs_split_share(filter, len, &g, &glen, &f, &flen, err);
        if (rc < 0)
            return rc;
        if (rc == 1) {
            filter = f;
            len = flen;
        }
    }
    int rc = fs_tokenize(sl->dialect, filter, len, 1, &sc->toks, err);
    if (rc < 0)
        return rc;
    pthread_rwlock_rdlock(&sl->lock);
    rc = rwalk_locked(sl, filter, sc);
    if (rc == FS_OK)
        rc = rentries_locked(sl, filter, len, sc);
    for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
        const fs_node *n = sc->hits[k];
        const int64_t *ids = fs_node_ids(n);
        for (uint32_t i = 0; rc == FS_OK && i < n->nsubs; i++)
            rc = rhit_add(sl, n, NULL, ids[i], r);
        for (uint32_t gi = 0; rc == FS_OK && gi < n->ngroups; gi++)
            for (uint32_t i = 0; rc == FS_OK && i < n->groups[gi].n; i++)
                rc = rhit_add(sl, n, &n->groups[gi], n->groups[gi].ids[i], r);
    }
    pthread_rwlock_unlock(&sl->lock);
    return rc;
}

/* ------------------------------------------------------------------ misc */

void fs_sublist_stats(fs_sublist *sl, fs_stats *st)
{
    pthread_rwlock_rdlock(&sl->lock);
    st->subscriptions = sl->count;
    st->nodes = sl->nodes;
    st->memory_bytes = sl->mem + sizeof(fs_sublist);
    st->inserts = sl->inserts;
    st->removes = sl->removes;
    st->generation = sl->generation;
    memset(&st->cache, 0, sizeof(st->cache));
    if (sl->cache) {
        fs_cache_stats_get(sl->cache, &st->cache);
        st->memory_bytes += st->cache.bytes;
    }
    pthread_rwlock_unlock(&sl->lock);
    st->matches = atomic_load_explicit(&sl->matches, memory_order_relaxed);
    st->fanout_total = atomic_load_explicit(&sl->fanout_total, memory_order_relaxed);
    st->fanout_max = atomic_load_explicit(&sl->fanout_max, memory_order_relaxed);
}

int fs_subject_matches(fs_dialect d, const char *filter, size_t flen,
                       const char *subject, size_t slen, int *which, fs_error *err)
{
    fs_tokens ft, st;
    fs_tokens_init(&ft);
    fs_tokens_init(&st);
    int rc;
    *which = 0;
    if (d == FS_MQTT) {
        const char *g, *f;
        size_t glen, l;
        rc = fs_split_share(filter, flen, &g, &glen, &f, &l, err);
        if (rc < 0)
            goto done;
        if (rc == 1) {
            filter = f;
            flen = l;
        }
    }
    rc = fs_tokenize(d, filter, flen, 1, &ft, err);
    if (rc < 0)
        goto done;
    *which = 1;
    rc = fs_tokenize(d, subject, slen, 0, &st, err);
    if (rc < 0)
        goto done;
    rc = fs_tokens_match(d, filter, &ft, subject, &st);
done:
    fs_tokens_free(&ft);
    fs_tokens_free(&st);
    return rc;
}

/* ------------------------------------------------------ per-thread memory */

static pthread_key_t workspace_key;
static pthread_once_t workspace_once = PTHREAD_ONCE_INIT;
static int workspace_key_ok;

static void workspace_destroy(void *p)
{
    fs_workspace *w = p;
    fs_scratch_free(&w->sc);
    fs_result_free(&w->r);
    FS_FREE(w);
}

static void workspace_key_create(void)
{
    workspace_key_ok = pthread_key_create(&workspace_key, workspace_destroy) == 0;
}

fs_workspace *fs_workspace_get(void)
{
    pthread_once(&workspace_once, workspace_key_create);
    if (!workspace_key_ok)
        return NULL;
    fs_workspace *w = pthread_getspecific(workspace_key);
    if (!w) {
        w = FS_MALLOC(sizeof(fs_workspace));
        if (!w)
            return NULL;
        fs_scratch_init(&w->sc);
        fs_result_init(&w->r);
        w->busy = 0;
        if (pthread_setspecific(workspace_key, w) != 0) {
            FS_FREE(w);
            return NULL;
        }
    }
    return w;
}

fs_workspace *fs_workspace_acquire(fs_workspace *spare)
{
    fs_workspace *w = fs_workspace_get();
    if (w && !w->busy) {
        w->busy = 1;
        return w;
    }
    if (!w)
        return NULL;
    fs_scratch_init(&spare->sc);
    fs_result_init(&spare->r);
    spare->busy = 1;
    return spare;
}

void fs_workspace_release(fs_workspace *w, fs_workspace *spare)
{
    if (w == spare) {
        fs_scratch_free(&w->sc);
        fs_result_free(&w->r);
        return;
    }
    w->busy = 0;
    fs_workspace_trim(w);
}

void fs_workspace_trim(fs_workspace *w)
{
    if (w->r.cap_ids > 65536 || w->r.cap_arena > 1u << 20 || w->r.cap_groups > 4096)
        fs_result_free(&w->r);
    if (w->sc.cap_front > 65536 || w->sc.cap_next > 65536 || w->sc.cap_hits > 65536 ||
        w->sc.toks.cap > 4096)
        fs_scratch_free(&w->sc);
}
