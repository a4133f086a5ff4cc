/* fs_node.c - a node and what it holds: plain subscription ids (a sorted
 * array, inline when there is one), queue groups (name + sorted member
 * ids), in name order (bytes) -- as images store them, and as a row's
 * groups are ordered (fs_result.h).  A node is a trie node (one token) or a table entry (a whole
 * filter; parent NULL).  Memory is counted through fs_mem.h; nodes come
 * from the index's slab (fs_slab.h).  Nothing here calls the tables: the
 * owner of a table removes a node from it before freeing it. */
#include "fs_node.h"

#include <string.h>

#include "fs_layout.h"

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

static size_t node_bytes(int linked, uint32_t toklen)
{
    return (linked ? sizeof(fs_link) : 0) + sizeof(fs_node) + FS_TOK_ALLOC(toklen);
}

static fs_node *node_alloc(fs_sublist *sl, int linked, fs_node *parent, const char *tok,
                           const fs_span *sp)
{
    size_t bytes = node_bytes(linked, sp->len);
    char *block = fs_slab_alloc(&sl->slab, bytes);
    if (!block)
        return NULL;
    sl->mem += bytes;
    fs_node *n = (fs_node *)(block + (linked ? sizeof(fs_link) : 0));
    memset(block, 0, (size_t)((char *)n - block) + sizeof(fs_node));
    if (linked)
        fs_link_of(n)->parent = parent;
    n->linked = (uint8_t)linked;
    n->hash = sp->hash;
    n->toklen = (uint16_t)sp->len;
    n->kind = (uint8_t)sp->kind;
    /* the token's bytes, then zeros to its last word's end: that word
     * zeroed first, in one store, and the copy over it */
    size_t room = FS_TOK_ALLOC(sp->len);
    if (room)
        memset(n->tok + room - 8, 0, 8);
    memcpy(n->tok, tok, sp->len);
    sl->nodes++;
    return n;
}

fs_node *fs_node_new(fs_sublist *sl, fs_node *parent, const char *tok, const fs_span *sp)
{
    return node_alloc(sl, 1, parent, tok, sp);
}

fs_node *fs_entry_new(fs_sublist *sl, const char *tok, const fs_span *sp)
{
    return node_alloc(sl, 0, NULL, tok, sp);
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
    for (uint32_t i = 0; i < fs_ngroups(n); i++)
        group_free(sl, fs_node_group(n, i));
    if (n->groups)
        fs_sl_free(sl, n->groups, fs_groups_bytes(n->groups->cap));
    if (fs_next(n)) {
        fs_sl_free(sl, fs_next(n)->slots, sizeof(fs_slot) * fs_next(n)->cap);
        fs_sl_free(sl, fs_next(n), sizeof(fs_level));
    }
    sl->mem -= node_bytes(n->linked, n->toklen);
    fs_node_block_free(sl, n);
    sl->nodes--;
}

void fs_table_teardown(fs_sublist *sl, fs_level *L)
{
    enum { AHEAD = 8 };
    for (uint32_t i = 0; i < L->cap; i++) {
        if (i + AHEAD < L->cap && L->slots[i + AHEAD].node)
            FS_PREFETCH(L->slots[i + AHEAD].node);
        if (L->slots[i].node)
            fs_node_free(sl, L->slots[i].node);
        L->slots[i].node = NULL;
    }
    L->count = 0;
}

void fs_node_block_free(fs_sublist *sl, fs_node *n)
{
    fs_slab_free(&sl->slab, n->linked ? (void *)fs_link_of(n) : (void *)n, node_bytes(n->linked, n->toklen));
}

/* kept out of its caller, so that the caller's common path needs no frame */
#if defined(_MSC_VER)
#define NODE_OUT_OF_LINE static __declspec(noinline)
#else
#define NODE_OUT_OF_LINE static __attribute__((noinline))
#endif
NODE_OUT_OF_LINE int add_sub_more(fs_sublist *sl, fs_node *n, int64_t id);

/* Insert id into a node's plain set.  1 new, 0 present, FS_ENOMEM. */
int fs_node_add_sub(fs_sublist *sl, fs_node *n, int64_t id)
{
    /* A new node's first id, nearly every insert's, without the frame the
     * rest needs (out of line: ~13 instructions a row of insert_many,
     * callgrind, light). */
    if (n->nsubs == 0 && n->subcap <= 1) {
        n->subs.one = id;
        n->nsubs = 1;
        n->subcap = 1;
        return 1;
    }
    return add_sub_more(sl, n, id);
}

/* fs_node_add_sub into a set that holds an id already. */
NODE_OUT_OF_LINE int add_sub_more(fs_sublist *sl, fs_node *n, int64_t id)
{
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

int fs_node_del_sub(fs_sublist *sl, fs_node *n, int64_t id)
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

/* Does group g's name come before q (bytes; a prefix first)? */
static int name_before(const fs_group *g, const char *q, uint32_t qlen)
{
    uint32_t m = g->name_len < qlen ? g->name_len : qlen;
    int c = m ? memcmp(g->name, q, m) : 0;
    return c < 0 || (c == 0 && g->name_len < qlen);
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
    uint32_t ng = fs_ngroups(n), cap = n->groups ? n->groups->cap : 0;
    uint32_t at = 0;            /* a node's groups are kept in name order */
    while (at < ng && name_before(&n->groups->g[at], q, qlen))
        at++;
    if (ng == cap) {
        uint32_t ncap = cap ? cap * 2 : 1;
        fs_groups *gs = fs_sl_realloc(sl, n->groups, cap ? fs_groups_bytes(cap) : 0, fs_groups_bytes(ncap));
        if (!gs) {
            group_free(sl, &fresh);
            return FS_ENOMEM;
        }
        gs->n = ng;
        gs->cap = ncap;
        n->groups = gs;
    }
    memmove(&n->groups->g[at + 1], &n->groups->g[at], sizeof(fs_group) * (ng - at));
    n->groups->g[at] = fresh;
    n->groups->n++;
    return 1;
}

int fs_node_del_queued(fs_sublist *sl, fs_node *n, const char *q, uint32_t qlen, int64_t id)
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
        /* Drop the group, the others kept in name order; the block is
         * kept (removal never allocates) and freed when the node has no
         * groups left. */
        group_free(sl, g);
        uint32_t gi = (uint32_t)(g - n->groups->g);
        n->groups->n--;
        memmove(g, g + 1, sizeof(fs_group) * (n->groups->n - gi));
        if (n->groups->n == 0) {
            fs_sl_free(sl, n->groups, fs_groups_bytes(n->groups->cap));
            n->groups = NULL;
        }
    }
    return 1;
}
