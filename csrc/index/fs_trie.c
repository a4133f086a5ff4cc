/* fs_trie.c - the trie, for the filters no table holds: shapes past the
 * budget, filters deeper than FS_SHAPE_MAX_TOKENS, version 1 images, and
 * AMQP binding keys with a '#' before their end or several '#'.  A level
 * is a table of literal children plus the one-level and the rest wildcard
 * child; matching walks it breadth first over an explicit frontier (no
 * recursion in proportion to the input).
 *
 * AMQP's '#' (zero or more words, anywhere) makes the trie a
 * nondeterministic automaton: a '#' node may consume a word and stay, or
 * be skipped.  Walked naively -- trying every way to split the words among
 * the '#'s, as RabbitMQ 3.x did -- "#.#.#.#" against 128 words takes
 * seconds.  Here the frontier after word i is a *set* of nodes: each
 * (node, position) state is visited at most once (a hash set per step
 * drops repeats), so a walk costs O(words x trie nodes reached) whatever
 * the number of '#'. */
#include "fs_trie.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_index.h"

/* Room in sl->hidden_roots for one more.  FS_OK or FS_ENOMEM. */
static int hidden_room(fs_sublist *sl)
{
    return fs_grow_counted(&sl->mem, (void *)&sl->hidden_roots, &sl->cap_hidden_roots,
                           (size_t)sl->nhidden_roots + 1, sizeof(fs_node *));
}

int fs_trie_hide_root(fs_sublist *sl, const fs_node *c)
{
    if (!fs_first_level_hidden(sl->dialect, c->tok, c->toklen))
        return FS_OK;
    if (hidden_room(sl) < 0)
        return FS_ENOMEM;
    sl->hidden_roots[sl->nhidden_roots++] = c;
    return FS_OK;
}

int fs_trie_hide_roots(fs_sublist *sl)
{
    const fs_level *L = fs_down(sl, sl->root);
    if (!L)
        return FS_OK;
    const fs_slot *slots;
    uint32_t cap = fs_lv_get(sl, L, &slots);
    for (uint32_t i = 0; i < cap; i++) {
        const fs_node *c = fs_ref_node(sl, slots[i].node);
        if (c && fs_trie_hide_root(sl, c) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* n, a root child going away, out of sl->hidden_roots (if there). */
static void unhide_root(fs_sublist *sl, const fs_node *n)
{
    for (uint32_t h = 0; h < sl->nhidden_roots; h++)
        if (sl->hidden_roots[h] == n) {
            sl->hidden_roots[h] = sl->hidden_roots[--sl->nhidden_roots];
            return;
        }
}

void fs_trie_hidden_free(fs_sublist *sl)
{
    fs_mem_free(&sl->mem, (void *)sl->hidden_roots, sizeof(fs_node *) * sl->cap_hidden_roots);
    sl->hidden_roots = NULL;
    sl->nhidden_roots = 0;
    sl->cap_hidden_roots = 0;
}

/* Create the trie path of t.  FS_OK (*out its last node) or FS_ENOMEM
 * (*out the deepest node reached, for pruning).  A root child for a first
 * level the tokenizer hid (t->hidden) joins sl->hidden_roots. */
int fs_trie_path(fs_sublist *sl, const fs_tokens *t, const char *filter, fs_growth *g, fs_node **out)
{
    fs_node *n = sl->root;
    for (uint32_t i = 0; i < t->n; i++) {
        const fs_span *sp = &t->tok[i];
        int fresh_level = !fs_tnext(n);
        *out = n;
        if (fresh_level) {
            fs_link_of(n)->next = fs_sl_alloc(sl, sizeof(fs_level));
            if (!fs_tnext(n))
                return FS_ENOMEM;
            memset(fs_tnext(n), 0, sizeof(fs_level));
        }
        fs_level *L = fs_tnext(n);
        fs_node *child;
        if (sp->kind == FS_TOK_ONE) child = L->one;
        else if (sp->kind == FS_TOK_REST) child = L->rest;
        else child = (fs_node *)(uintptr_t)fs_level_find(sl, L, filter + sp->off, sp->len, sp->hash);
        uint32_t hidden = i == 0 && t->hidden;
        if (!child) {
            if (hidden && hidden_room(sl) < 0)
                return FS_ENOMEM;
            child = fs_node_new(sl, n, filter + sp->off, sp);
            if (!child)
                return FS_ENOMEM;
            if (!fresh_level && !g->level) {
                g->level = L;
                g->cap = L->cap;
            }
            if (sp->kind == FS_TOK_ONE) L->one = child;
            else if (sp->kind == FS_TOK_REST) L->rest = child;
            else if (fs_level_add(&sl->mem, L, child) < 0) {
                fs_node_free(sl, child);
                return FS_ENOMEM;
            }
            if (hidden)
                sl->hidden_roots[sl->nhidden_roots++] = child;
        }
        n = child;
    }
    *out = n;
    return FS_OK;
}

/* A trie node that holds nothing and has no children. */
static inline int node_empty(const fs_node *n)
{
    return n->nsubs == 0 && fs_ngroups(n) == 0 &&
           (!fs_next(n) || (fs_next(n)->count == 0 && !fs_next(n)->one && !fs_next(n)->rest));
}

/* Remove empty nodes from n upwards (never the root), then free the
 * level of the node it stops at if that level is left empty. */
void fs_trie_prune(fs_sublist *sl, fs_node *n)
{
    while (n != sl->root && node_empty(n)) {
        fs_node *parent = fs_parent(n);
        fs_level *L = fs_next(parent);
        if (parent == sl->root)
            unhide_root(sl, n);
        if (n->kind == FS_TOK_ONE) L->one = NULL;
        else if (n->kind == FS_TOK_REST) L->rest = NULL;
        else {
            fs_level_del(L, n);
            fs_level_shrink(&sl->mem, L);
        }
        fs_node_free(sl, n);
        n = parent;
    }
    if (fs_next(n) && fs_next(n)->count == 0 && !fs_next(n)->one && !fs_next(n)->rest) {
        fs_sl_free(sl, fs_next(n)->slots, sizeof(fs_slot) * fs_next(n)->cap);
        fs_sl_free(sl, fs_next(n), sizeof(fs_level));
        fs_link_of(n)->next = NULL;
    }
}

/* ---- AMQP */

/* The open-addressing set sc->seen holds the nodes of the frontier being
 * built, arr[0..n); make it empty with room for want nodes. */
/* The level just built (sc->next) becomes the frontier; the old frontier's
 * buffer is kept for the next level.  Both walks step levels this way. */
static inline void next_becomes_front(fs_scratch *sc)
{
    const fs_node **tmp = sc->front;
    sc->front = sc->next;
    sc->next = tmp;
    size_t tcap = sc->cap_front;
    sc->cap_front = sc->cap_next;
    sc->cap_next = tcap;
    sc->nfront = sc->nnext;
}

static int seen_reset(fs_scratch *sc, size_t want)
{
    size_t cap = 16;
    while (cap < 2 * want)
        cap *= 2;
    if (cap > sc->cap_seen) {
        const fs_node **ns = FS_REALLOC(sc->seen, sizeof(fs_node *) * cap);
        if (!ns)
            return FS_ENOMEM;
        sc->seen = ns;
        sc->cap_seen = cap;
    }
    sc->act_seen = cap;
    memset(sc->seen, 0, sizeof(fs_node *) * cap);
    return FS_OK;
}

static inline size_t seen_slot(const fs_scratch *sc, const fs_node *x)
{
    uint64_t h = (uint64_t)(uintptr_t)x * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (sc->act_seen - 1);
}

/* Add x to the frontier arr (and the set) unless it is there already. */
static int front_add(fs_scratch *sc, const fs_node ***arr, size_t *n, size_t *cap, const fs_node *x)
{
    size_t i = seen_slot(sc, x);
    while (sc->seen[i]) {
        if (sc->seen[i] == x)
            return FS_OK;
        i = (i + 1) & (sc->act_seen - 1);
    }
    if (fs_push_node(arr, n, cap, x) < 0)
        return FS_ENOMEM;
    if (2 * *n > sc->act_seen) {          /* rehash from the frontier itself */
        if (seen_reset(sc, *n) < 0)
            return FS_ENOMEM;
        for (size_t k = 0; k < *n; k++) {
            size_t j = seen_slot(sc, (*arr)[k]);
            while (sc->seen[j])
                j = (j + 1) & (sc->act_seen - 1);
            sc->seen[j] = (*arr)[k];
        }
    } else {
        sc->seen[i] = x;
    }
    return FS_OK;
}

/* Push x's children onto the stack v: its literal children, then its one
 * and rest wildcard children.  FS_OK or FS_ENOMEM. */
int fs_trie_push_children(const fs_sublist *sl, const fs_node *x, const fs_node ***v, size_t *n, size_t *cap)
{
    const fs_level *L = fs_down(sl, x);
    if (!L)
        return FS_OK;
    const fs_slot *slots;
    uint32_t ncap = fs_lv_get(sl, L, &slots);      /* once: a mapped level may change */
    for (uint32_t i = 0; i < ncap; i++) {
        const fs_node *c = fs_ref_node(sl, slots[i].node);
        if (c && fs_push_node(v, n, cap, c) < 0)
            return FS_ENOMEM;
    }
    const fs_node *one = fs_lv_one(sl, L), *rest = fs_lv_rest(sl, L);
    if (one && fs_push_node(v, n, cap, one) < 0)
        return FS_ENOMEM;
    if (rest && fs_push_node(v, n, cap, rest) < 0)
        return FS_ENOMEM;
    return FS_OK;
}

/* A trie node to look at in fs_trie_each_shaped, with what its path
 * above it says: the token count, the one-level wildcards' positions,
 * whether a rest wildcard came before. */
typedef struct {
    const fs_node *n;
    uint64_t onemask;
    uint32_t at;              /* n's token index: its parent's depth */
    uint32_t rest_above;
} shaped_frame;

static int push_shaped(shaped_frame **v, size_t *n, size_t *cap, shaped_frame f)
{
    if (*n == *cap && fs_grow(v, cap, *n + 1, sizeof(shaped_frame)) < 0)
        return FS_ENOMEM;
    (*v)[(*n)++] = f;
    return FS_OK;
}

int fs_trie_each_shaped(const fs_sublist *sl, int (*fn)(void *, const fs_node *, const fs_shape_of *),
                        void *ctx)
{
    shaped_frame *stack = NULL;
    size_t n = 0, cap = 0;
    uint64_t budget = sl->nodes + 1;
    int rc = push_shaped(&stack, &n, &cap, (shaped_frame){.n = sl->root});
    while (rc == FS_OK && n) {
        shaped_frame f = stack[--n];
        if (!budget--) {             /* more nodes than the index has: a mapped image's loop */
            fs_img_bad(sl);
            rc = FS_EBADDATA;
            break;
        }
        const fs_node *x = f.n;
        uint32_t depth = 0, rest_above = f.rest_above;
        uint64_t mask = f.onemask;
        if (x != sl->root) {
            uint32_t rest = x->kind == FS_TOK_REST;
            if (x->kind == FS_TOK_ONE && f.at < 64)
                mask |= 1ull << f.at;
            depth = f.at + 1;
            /* the filter's shape, as fs_shape_classify finds it from its tokens */
            if (fs_has_subs(x) && !f.rest_above && depth - rest <= FS_SHAPE_MAX_TOKENS && (mask || rest)) {
                fs_shape_of of = {.onemask = mask, .ntoks = depth - rest, .rest = rest, .key = 0};
                if ((rc = fn(ctx, x, &of)) != FS_OK)
                    break;
            }
            rest_above |= rest;
        }
        const fs_level *L = fs_down(sl, x);
        if (!L)
            continue;
        shaped_frame c = {.onemask = mask, .at = depth, .rest_above = rest_above};
        const fs_slot *slots;
        uint32_t ncap = fs_lv_get(sl, L, &slots);      /* once: a mapped level may change */
        for (uint32_t i = 0; i < ncap && rc == FS_OK; i++)
            if ((c.n = fs_ref_node(sl, slots[i].node)) != NULL)
                rc = push_shaped(&stack, &n, &cap, c);
        if (rc == FS_OK && (c.n = fs_lv_one(sl, L)) != NULL)
            rc = push_shaped(&stack, &n, &cap, c);
        if (rc == FS_OK && (c.n = fs_lv_rest(sl, L)) != NULL)
            rc = push_shaped(&stack, &n, &cap, c);
    }
    FS_FREE(stack);
    return rc;
}

/* One more node visited by a walk over a whole subtree: 0 once more nodes
 * were visited than the index has (a mapped image's loop: marked damaged). */
static inline int fs_visit(const fs_sublist *sl, uint64_t *budget)
{
    if (*budget) {
        --*budget;
        return 1;
    }
    fs_img_bad(sl);
    return 0;
}

/* Close the frontier under "skip a '#'": a node's '#' child matches with
 * zero more words (appended, so chains "#.#" are followed too). */
static int close_front(const fs_sublist *sl, fs_scratch *sc, const fs_node ***arr, size_t *n, size_t *cap)
{
    for (size_t k = 0; k < *n; k++) {
        const fs_level *L = fs_down(sl, (*arr)[k]);
        const fs_node *rest = L ? fs_lv_rest(sl, L) : NULL;
        if (rest && front_add(sc, arr, n, cap, rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

static int trie_walk_amqp(const fs_sublist *sl, const char *s, const fs_tokens *t, fs_scratch *sc)
{
    const char *end = t->n ? s + t->tok[t->n - 1].off + t->tok[t->n - 1].len : s;
    sc->nfront = 0;
    if (seen_reset(sc, 1) < 0 || front_add(sc, &sc->front, &sc->nfront, &sc->cap_front, sl->root) < 0 ||
        close_front(sl, sc, &sc->front, &sc->nfront, &sc->cap_front) < 0)
        return FS_ENOMEM;
    for (uint32_t i = 0; i < t->n && sc->nfront; i++) {
        const fs_span *sp = &t->tok[i];
        sc->nnext = 0;
        if (seen_reset(sc, sc->nfront) < 0)
            return FS_ENOMEM;
        for (size_t k = 0; k < sc->nfront; k++) {
            const fs_node *x = sc->front[k];
            /* '#' takes this word too and stays where it is */
            if (x->kind == FS_TOK_REST && front_add(sc, &sc->next, &sc->nnext, &sc->cap_next, x) < 0)
                return FS_ENOMEM;
            const fs_level *L = fs_down(sl, x);
            if (!L)
                continue;
            const fs_node *c = L->count ? fs_level_find_within(sl, L, s + sp->off, sp->len, sp->hash, end) : NULL;
            if (c && front_add(sc, &sc->next, &sc->nnext, &sc->cap_next, c) < 0)
                return FS_ENOMEM;
            const fs_node *one = fs_lv_one(sl, L);
            if (one && front_add(sc, &sc->next, &sc->nnext, &sc->cap_next, one) < 0)
                return FS_ENOMEM;
        }
        if (close_front(sl, sc, &sc->next, &sc->nnext, &sc->cap_next) < 0)
            return FS_ENOMEM;
        next_becomes_front(sc);
    }
    /* The frontier is a set: each matching node is pushed once. */
    for (size_t k = 0; k < sc->nfront; k++)
        if (fs_has_subs(sc->front[k]) && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, sc->front[k]) < 0)
            return FS_ENOMEM;
    return FS_OK;
}

/* AMQP reverse match over the trie: every node holding subscriptions,
 * its filter rebuilt and tested against the query with
 * fs_filters_intersect (polynomial; reverse matching is not a hot path).
 * Uses sc->next as the explicit stack. */
static int trie_rwalk_amqp(const fs_sublist *sl, const char *q, fs_scratch *sc)
{
    char path[FS_AMQP_MAX_KEY + 1];
    fs_tokens pt;
    fs_tokens_init(&pt);
    fs_error ignored;
    int rc = FS_OK;
    sc->nhits = 0;
    sc->nnext = 0;
    if (fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, sl->root) < 0)
        return FS_ENOMEM;
    uint64_t budget = sl->nodes + 1;     /* a mapped image's loop stops here */
    while (rc == FS_OK && sc->nnext && fs_visit(sl, &budget)) {
        const fs_node *x = sc->next[--sc->nnext];
        if (x != sl->root && fs_has_subs(x)) {
            size_t len = fs_path_bytes(sl, x);
            if (len <= FS_AMQP_MAX_KEY) {     /* always: keys are checked on the way in */
                fs_path_write(sl, x, path, path + len);
                rc = fs_tokenize(FS_AMQP, path, len, 1, &pt, &ignored);
                if (rc == FS_EINVAL)          /* only a damaged image stores one */
                    fs_img_bad(sl);
                if (rc == FS_OK && fs_filters_intersect(FS_AMQP, q, &sc->toks, path, &pt))
                    rc = fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, x);
            }
        }
        if (rc == FS_OK)
            rc = fs_trie_push_children(sl, x, &sc->next, &sc->nnext, &sc->cap_next);
    }
    fs_tokens_free(&pt);
    return rc == FS_EINVAL ? FS_OK : rc;
}

/* A level with no children: where the root's wildcard children are read
 * for a subject whose first level no wildcard matches. */
static const fs_level no_children;

/* The level whose wildcard children a first level may reach: L's own, or
 * none where the tokenizer decided that no first-level wildcard matches
 * it (hide: fs_tokens.hidden, MQTT's '$' rule) -- a table the walks index
 * by the decision instead of testing the rule. */
static inline const fs_level *wild_of(const fs_level *L, uint32_t hide)
{
    const fs_level *const by[2] = {L, &no_children};
    return by[hide];
}

/* One node's step of trie_walk_if for the token sp: its level L's rest
 * child to the hits, its one child and the literal child of sp to the
 * next front -- the wildcard children read from W (L, or wild_of's
 * choice at the root). */
FS_ALWAYS_INLINE int walk_step(const fs_sublist *sl, int mapped, const fs_level *L, const fs_level *W,
                               const char *s, const fs_span *sp, const char *end, fs_scratch *sc)
{
    /* A rest-wildcard node is a leaf, so it exists only while it holds
     * subscriptions: no need to look inside it here. */
    const fs_node *rest = fs_lv_rest(sl, W), *one = fs_lv_one(sl, W);
    if (rest && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, rest) < 0)
        return FS_ENOMEM;
    if (one && fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, one) < 0)
        return FS_ENOMEM;
    const fs_node *c = fs_level_find_within_if(sl, mapped, L, s + sp->off, sp->len, sp->hash, end);
    if (c && fs_push_node(&sc->next, &sc->nnext, &sc->cap_next, c) < 0)
        return FS_ENOMEM;
    return FS_OK;
}

/* The next front (sc->next) becomes the front, 1; or 0 (the image marked
 * damaged) once the fronts reached more nodes than the index has: a valid
 * trie's fronts hold distinct nodes, each of one depth, all of them
 * together at most the index's nodes, where a mapped image's loop could
 * double the front every token. */
static inline int front_advance(const fs_sublist *sl, fs_scratch *sc, uint64_t *reached)
{
    *reached += sc->nnext;
    if (*reached > sl->nodes + 1) {
        fs_img_bad(sl);
        return 0;
    }
    next_becomes_front(sc);
    return 1;
}

/* fs_trie_walk_locked past the AMQP case, for mapped = fs_img_mapped(sl),
 * a constant in each copy: a built index's levels and tokens read as
 * they are, a mapped image's checked.  The root's step comes first, on
 * its own: its wildcard children are wild_of's, by t->hidden. */
FS_ALWAYS_INLINE int trie_walk_if(const fs_sublist *sl, int mapped, const char *s, const fs_tokens *t,
                                  fs_scratch *sc, const fs_dialect_rules *R)
{
    const fs_level *L0 = fs_down_if(sl, mapped, sl->root);
    if (!L0)
        return FS_OK;
    int zero_rest = R->rest_min == 0;           /* MQTT: "a/#" matches "a" */
    const fs_span *last = &t->tok[t->n - 1];
    const char *end = s + last->off + last->len;
    sc->nnext = 0;
    if (walk_step(sl, mapped, L0, wild_of(L0, t->hidden), s, &t->tok[0], end, sc) < 0)
        return FS_ENOMEM;
    uint64_t reached = 0;
    if (!front_advance(sl, sc, &reached))
        return FS_OK;
    for (uint32_t i = 1; i < t->n && sc->nfront; i++) {
        const fs_span *sp = &t->tok[i];
        sc->nnext = 0;
        for (size_t k = 0; k < sc->nfront; k++) {
            const fs_level *L = fs_down_if(sl, mapped, sc->front[k]);
            if (L && walk_step(sl, mapped, L, L, s, sp, end, sc) < 0)
                return FS_ENOMEM;
        }
        if (!front_advance(sl, sc, &reached))
            return FS_OK;
    }
    for (size_t k = 0; k < sc->nfront; k++) {
        const fs_node *n = sc->front[k];
        if (fs_has_subs(n) && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
            return FS_ENOMEM;
        /* MQTT: "a/#" also matches "a" itself. */
        const fs_level *L = zero_rest ? fs_down_if(sl, mapped, n) : NULL;
        const fs_node *rest = L ? fs_lv_rest(sl, L) : NULL;
        if (rest && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

int fs_trie_walk_locked(const fs_sublist *sl, const char *s, const fs_tokens *t, fs_scratch *sc)
{
    const fs_dialect_rules *R = fs_rules(sl->dialect);
    if (R->rest_anywhere)
        return fs_down(sl, sl->root) ? trie_walk_amqp(sl, s, t, sc) : FS_OK;
    return fs_img_mapped(sl) ? trie_walk_if(sl, 1, s, t, sc, R) : trie_walk_if(sl, 0, s, t, sc, R);
}

/* Take out of v[from..*n) the nodes of hidden[0..nhidden) (each there at
 * most once; the order of v is not kept).  The reverse walk passes the
 * root's hidden children (sl->hidden_roots) where a wildcard in the
 * query's first level reaches the root's children, none elsewhere: MQTT's
 * '$' rule as a set taken away, no token read. */
static void take_out(const fs_node **v, size_t from, size_t *n, const fs_node *const *hidden, uint32_t nhidden)
{
    for (uint32_t h = 0; h < nhidden; h++)
        for (size_t k = from; k < *n; k++)
            if (v[k] == hidden[h]) {
                v[k] = v[--*n];
                break;
            }
}

/* Push every node below n (not n itself) onto sc->hits but those below
 * n's children hidden[0..nhidden) (take_out's) and those themselves.
 * Uses sc->next as the explicit stack. */
static int push_descendants(const fs_sublist *sl, const fs_node *n, const fs_node *const *hidden,
                            uint32_t nhidden, fs_scratch *sc)
{
    sc->nnext = 0;
    if (fs_trie_push_children(sl, n, &sc->next, &sc->nnext, &sc->cap_next) < 0)
        return FS_ENOMEM;
    take_out(sc->next, 0, &sc->nnext, hidden, nhidden);
    uint64_t budget = sl->nodes;         /* n's descendants; a mapped image's loop stops here */
    while (sc->nnext && fs_visit(sl, &budget)) {
        const fs_node *x = sc->next[--sc->nnext];
        if (fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, x) < 0)
            return FS_ENOMEM;
        if (fs_trie_push_children(sl, x, &sc->next, &sc->nnext, &sc->cap_next) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* The query exhausted with the front's nodes aligned: their filters end
 * there too, and (zero_rest) those with a rest wildcard below.  Inlined:
 * fs_trie_rwalk_locked is a reverse match's walk. */
FS_ALWAYS_INLINE int rwalk_ends(const fs_sublist *sl, int zero_rest, fs_scratch *sc)
{
    for (size_t k = 0; k < sc->nfront; k++) {
        const fs_node *n = sc->front[k];
        if (fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
            return FS_ENOMEM;
        /* MQTT "a/#" matches "a" too -- but "/#" cannot match "", which
         * is not a valid topic. */
        int empty_topic = fs_up(sl, n) == sl->root && n->toklen == 0;
        const fs_level *L = zero_rest && !empty_topic ? fs_down(sl, n) : NULL;
        const fs_node *rest = L ? fs_lv_rest(sl, L) : NULL;
        if (rest && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, rest) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* Collect into sc->hits every node whose filter intersects the query
 * filter q (tokenized in sc->toks).  Nodes on the front are at depth i,
 * aligned with q's first i tokens. */
int fs_trie_rwalk_locked(const fs_sublist *sl, const char *q, fs_scratch *sc)
{
    const fs_tokens *t = &sc->toks;
    const fs_dialect_rules *R = fs_rules(sl->dialect);
    if (R->rest_anywhere)
        return trie_rwalk_amqp(sl, q, sc);
    int zero_rest = R->rest_min == 0;           /* MQTT: "a/#" matches "a" */
    sc->nhits = 0;
    sc->nfront = 0;
    if (fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, sl->root) < 0)
        return FS_ENOMEM;
    /* The frontier is processed depth by depth, like walk_locked; the
     * "next" array is borrowed by push_descendants, so collect the next
     * depth into a separate region at the end of front instead. */
    /* MQTT's '$' rule, at the root's step only, both ways: the query's
     * first level hidden (t->hidden, the tokenizer's) reaches none of the
     * root's wildcard children (wild_of), and a wildcard there reaches
     * none of the root's hidden children (sl->hidden_roots, taken out). */
    uint32_t hide = t->hidden, nhidden = sl->nhidden_roots;
    for (uint32_t i = 0; i < t->n && sc->nfront; i++, hide = 0, nhidden = 0) {
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
                if (zero_rest && !root && !empty_topic && fs_has_subs(n) &&
                    fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, n) < 0)
                    return FS_ENOMEM;
                if (push_descendants(sl, n, sl->hidden_roots, nhidden, sc) < 0)
                    return FS_ENOMEM;
                continue;
            }
            const fs_level *L = fs_down(sl, n);
            if (!L)
                continue;
            /* A stored rest-wildcard matches whatever the query's remaining
             * 1+ tokens match; the root's, unless the tokenizer decided that
             * no first-level wildcard matches the query's first level (its
             * literal starts with '$' in MQTT: t->hidden). */
            const fs_level *W = wild_of(L, hide);
            const fs_node *rest = fs_lv_rest(sl, W), *one = fs_lv_one(sl, W);
            if (rest && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, rest) < 0)
                return FS_ENOMEM;
            if (one && fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, one) < 0)
                return FS_ENOMEM;
            if (sp->kind == FS_TOK_ONE) {
                const fs_slot *slots;
                uint32_t ncap = fs_lv_get(sl, L, &slots);
                size_t from = sc->nfront;
                for (uint32_t s = 0; s < ncap; s++) {
                    const fs_node *c = fs_ref_node(sl, slots[s].node);
                    if (c && fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, c) < 0)
                        return FS_ENOMEM;
                }
                take_out(sc->front, from, &sc->nfront, sl->hidden_roots, nhidden);
            } else {
                const fs_node *c = fs_level_find(sl, L, q + sp->off, sp->len, sp->hash);
                if (c && fs_push_node(&sc->front, &sc->nfront, &sc->cap_front, c) < 0)
                    return FS_ENOMEM;
            }
        }
        memmove(sc->front, sc->front + end, sizeof(fs_node *) * (sc->nfront - end));
        sc->nfront -= end;
        if (sc->nfront > sl->nodes + 1) {     /* a mapped image's loop (see fs_trie_walk_locked) */
            fs_img_bad(sl);
            return FS_OK;
        }
    }
    /* Query exhausted with nodes aligned: those filters end here too.  A
     * query ending in a rest-wildcard was fully handled in the loop. */
    if (t->n && t->tok[t->n - 1].kind == FS_TOK_REST)
        return FS_OK;
    return rwalk_ends(sl, zero_rest, sc);
}

const fs_node *fs_trie_find(const fs_sublist *sl, const fs_tokens *t, const char *filter)
{
    const fs_node *n = sl->root;
    for (uint32_t i = 0; i < t->n && n; i++) {
        const fs_span *sp = &t->tok[i];
        const fs_level *L = fs_down(sl, n);
        if (!L) return NULL;
        if (sp->kind == FS_TOK_ONE) n = fs_lv_one(sl, L);
        else if (sp->kind == FS_TOK_REST) n = fs_lv_rest(sl, L);
        else n = fs_level_find(sl, L, filter + sp->off, sp->len, sp->hash);
    }
    return n;
}

/* Free the whole trie without a stack: descend to a childless node, free
 * it, climb to the parent.  Each level's scan position is kept in its cap
 * field (the level is being destroyed anyway), so the walk is linear. */
void fs_trie_free(fs_sublist *sl)
{
    fs_node *n = sl->root;
    while (n) {
        fs_level *L = fs_tnext(n);
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
            fs_link_of(n)->next = NULL;
        }
        fs_node *parent = fs_parent(n);
        if (n->subcap > 1) FS_FREE(n->subs.many);
        for (uint32_t i = 0; i < fs_ngroups(n); i++) {
            FS_FREE(fs_node_group(n, i)->name);
            FS_FREE(fs_node_group(n, i)->ids);
        }
        FS_FREE(n->groups);
        fs_node_block_free(sl, n);
        n = parent;
    }
    sl->root = NULL;
}
