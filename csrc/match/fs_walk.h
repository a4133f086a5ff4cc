/* fs_walk.h - the one walk: which stored filters a subject matches, and
 * how their queue groups merge.  match() (fs_match.c, one subject), the
 * batch (fs_batch.c, a block of rows) and reverse matching of a literal
 * query (fs_reverse.c) all go through these steps, so each rule of the
 * probe sequence is written once, here:
 *
 *   plan     tokenize (which decides MQTT's '$' rule: fs_tokens.hidden);
 *            the literal table's key and every shape key of the
 *            subject's length, from the probe sets the decision picks,
 *            that the shape's bitmap lets through; prefetch their slots
 *   fetch    prefetch the entries the slots point to -- worth it only
 *            where other rows' work hides the wait: the batch plans a
 *            block of rows, fetches them all, then collects them all
 *   collect  verify the entries (literal table, then shapes in bit
 *            order), then walk the trie (fs_trie.c), into sc->hits
 *
 * Static inline: both paths compile the steps into their own loops (a
 * call per row per step would add ~2% to the batch's instructions).
 * Caller holds the index's read lock throughout.
 */
#ifndef FS_WALK_H
#define FS_WALK_H

#include "fs_bits.h"
#include "fs_index.h"

/* A subject's plan: what collect will probe. */
typedef struct {
    const char *s;
    size_t len;
    int literal;                            /* 1: probe the literal table */
    uint64_t literal_key;
    uint64_t shapes;                        /* bit j: probe shape j */
    uint64_t keys[FS_SHAPE_MAX_PROBES];     /* their keys, in bit order */
} fs_walk_row;

/* The mixes of a subject's first tokens (fs_shape_mixes), which its
 * literal key and every shape key are made from: the same in any index of
 * the dialect, so a row planned in two indexes (a batch's also) mixes once. */
typedef struct {
    uint64_t m[FS_SHAPE_MAX_TOKENS + 1], P[FS_SHAPE_MAX_TOKENS + 1];
} fs_walk_mixes;

static inline void fs_walk_mix(const fs_tokens *t, fs_walk_mixes *x)
{
    fs_shape_mixes(t->tok, t->n < FS_SHAPE_MAX_TOKENS ? t->n : FS_SHAPE_MAX_TOKENS, x->m, x->P);
    x->m[FS_SHAPE_MAX_TOKENS] = 0;      /* the wildcard of a shape without one (fs_shapes.key_wild) */
}

/* The subject's key (mixes m, prefix sums P) in shape j of S, by the
 * shapes' recipe (fs_shapes.key_ntoks): the sum of its mixes at the
 * shape's literal positions.  (A plan split on key_more once a row, to
 * leave this test out of the common copy, cost light 5 instructions a row
 * more.) */
static inline uint64_t fs_walk_shape_key(const fs_shapes *S, uint32_t j, const uint64_t *m, const uint64_t *P)
{
    uint64_t key = P[S->key_ntoks[j]] - m[S->key_wild[j]];
    if (FS_UNLIKELY((S->key_more >> j) & 1)) {
        /* (read again from the shape, which a mapped image's file holds:
         * cut to the positions m has, so that a file rewritten under its
         * mapping after the open's checks cannot send the read past m) */
        uint64_t more = S->shape[j]->onemask & ((UINT64_C(1) << FS_SHAPE_MAX_TOKENS) - 1);
        for (more &= more - 1; more; more &= more - 1)
            key -= m[fs_ctz64(more)];
    }
    return key;
}

/* fs_walk_plan_tokens, for mapped = fs_img_mapped(sl), a constant in each
 * copy: the img.base test of fs_lv_may_hold and fs_lv_slots once a row,
 * not once a shape (each shape's store of its key may alias sl, so the
 * compiler read it again per shape: ~18 instructions a row on light and
 * heavy). */
FS_ALWAYS_INLINE void fs_walk_plan_tokens_if(const fs_sublist *sl, int mapped, const char *s, size_t len,
                                             const fs_tokens *t, const fs_walk_mixes *mixed, fs_walk_row *p)
{
    const fs_shapes *S = &sl->shapes;
    const fs_level *lit = sl->lit;
    p->s = s;
    p->len = len;
    p->shapes = 0;
    p->literal = 0;
    p->literal_key = 0;
    uint32_t nt = t->n;
    /* The row is the tokenizer's decision (fs_tokens.hidden): MQTT's '$'
     * topics probe no shape that starts with a wildcard (the trie's half
     * of the rule is its root's wildcard children, fs_trie.c). */
    uint64_t bits = S->probe[t->hidden][nt > FS_SHAPE_MAX_TOKENS ? FS_SHAPE_MAX_TOKENS + 1 : nt];
    if (!bits && !lit->count)
        return;
    uint32_t need = nt < FS_SHAPE_MAX_TOKENS ? nt : FS_SHAPE_MAX_TOKENS;
    fs_walk_mixes own;
    if (!mixed) {
        fs_walk_mix(t, &own);
        mixed = &own;
    }
    const uint64_t *m = mixed->m, *P = mixed->P;
    if (lit->count) {
        uint64_t key = fs_tokens_key(t->tok, need, nt, P[need]);
        p->literal_key = key;
        p->literal = fs_lv_may_hold_if(sl, mapped, lit, key);
        if (p->literal)
            FS_PREFETCH(&fs_lv_slots_if(sl, mapped, lit)[(uint32_t)key & (lit->cap - 1)]);
    }
    /* Only the probes the shape's bitmap lets through go on: most stop
     * here, without touching their table. */
    uint32_t q = 0;
    uint64_t probe = 0;
    for (uint64_t w = bits; w; w &= w - 1) {
        uint32_t j = fs_ctz64(w);
        const fs_shape *sh = S->shape[j];
        uint64_t key = fs_walk_shape_key(S, j, m, P);
        if (!fs_lv_may_hold_if(sl, mapped, &sh->table, key))
            continue;
        probe |= w & (0 - w);
        p->keys[q++] = key;
        FS_PREFETCH(&fs_lv_slots_if(sl, mapped, &sh->table)[(uint32_t)key & (sh->table.cap - 1)]);
    }
    p->shapes = probe;
}

/* Plan the subject s (tokens t, already tokenized; mixed: their mixes, or
 * NULL to make them here if a probe needs them) and prefetch the slots it
 * will probe. */
static inline void fs_walk_plan_tokens(const fs_sublist *sl, const char *s, size_t len,
                                       const fs_tokens *t, const fs_walk_mixes *mixed, fs_walk_row *p)
{
    if (fs_img_mapped(sl))
        fs_walk_plan_tokens_if(sl, 1, s, len, t, mixed, p);
    else
        fs_walk_plan_tokens_if(sl, 0, s, len, t, mixed, p);
}

/* Tokenize the subject s into t, then plan it in sl (into p) and, if
 * also is not NULL, in also (into also_p; one dialect: the tokens and
 * their mixes serve both).  FS_OK; FS_EINVAL (with err) for an invalid
 * subject; FS_ENOMEM. */
static inline int fs_walk_plan(const fs_sublist *sl, const fs_sublist *also, const char *s, size_t len,
                               fs_tokens *t, fs_walk_row *p, fs_walk_row *also_p, fs_error *err)
{
    int rc = fs_tokenize(sl->dialect, s, len, 0, t, err);
    if (rc != FS_OK)
        return rc;
    if (!also) {
        fs_walk_plan_tokens(sl, s, len, t, NULL, p);
        return rc;
    }
    fs_walk_mixes x;
    fs_walk_mix(t, &x);
    fs_walk_plan_tokens(sl, s, len, t, &x, p);
    fs_walk_plan_tokens(also, s, len, t, &x, also_p);
    return rc;
}

/* The planned slots have arrived: prefetch the entries they point to. */
static inline void fs_walk_fetch(const fs_sublist *sl, const fs_walk_row *p)
{
    const fs_shapes *S = &sl->shapes;
    const fs_level *lit = sl->lit;
    /* Each table's cap is read once, here, and 0 skips it: the plan read
     * the same table earlier, and a mapped image's file cut shorter since
     * reads as zeros now (csrc/base/fs_fault.h), where cap - 1 would be a
     * mask of all ones. */
    uint32_t cap = lit->cap;
    if (p->literal && cap) {
        const fs_slot *e = &fs_lv_slots(sl, lit)[(uint32_t)p->literal_key & (cap - 1)];
        if (e->node && e->hash == (uint32_t)p->literal_key)
            FS_PREFETCH(fs_ref_addr(sl, e->node));
    }
    uint32_t q = 0;
    for (uint64_t w = p->shapes; w; w &= w - 1, q++) {
        const fs_level *L = &S->shape[fs_ctz64(w)]->table;
        cap = L->cap;
        if (!cap)
            continue;
        const fs_slot *e = &fs_lv_slots(sl, L)[(uint32_t)p->keys[q] & (cap - 1)];
        if (e->node && e->hash == (uint32_t)p->keys[q]) {
            FS_PREFETCH(fs_ref_addr(sl, e->node));
            FS_PREFETCH(fs_ref_addr(sl, e->node) + 64);
        }
    }
}

/* fs_walk_entries, for mapped = fs_img_mapped(sl), a constant in each copy. */
FS_ALWAYS_INLINE int fs_walk_entries_if(const fs_sublist *sl, int mapped, const fs_walk_row *p, const fs_tokens *t,
                                        fs_scratch *sc, int first_only)
{
    const fs_shapes *S = &sl->shapes;
    const char *end = p->s + p->len;
    if (p->literal) {
        const fs_node *e = fs_keyed_find_if(sl, mapped, sl->lit, p->literal_key, p->s, (uint32_t)p->len, end);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
        if (e && first_only)
            return FS_OK;
    }
    char sep = fs_sep(sl->dialect);
    uint32_t q = 0;
    for (uint64_t w = p->shapes; w; w &= w - 1, q++) {
        const fs_node *e = fs_shape_probe_slots(sl, mapped, S->shape[fs_ctz64(w)], p->keys[q], sep, p->s,
                                                t->tok, end);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
        if (e && first_only)
            return FS_OK;
    }
    return FS_OK;
}

/* Append to sc->hits the table entries the planned subject matches: the
 * literal table's, then each shape's.  first_only: stop at the first
 * (entries always hold subscriptions).  A built index's entries are read
 * as they are, a mapped image's through the checks (fs_img_mapped). */
static inline int fs_walk_entries(const fs_sublist *sl, const fs_walk_row *p, const fs_tokens *t,
                                  fs_scratch *sc, int first_only)
{
    return fs_img_mapped(sl) ? fs_walk_entries_if(sl, 1, p, t, sc, first_only)
                             : fs_walk_entries_if(sl, 0, p, t, sc, first_only);
}

/* The rest of fs_walk_collect for an image with a live part (fs_walk.c):
 * drop the masked entries from sc->hits, walk the image's trie (then drop
 * its masked nodes), then add the live part's hits. */
int fs_walk_image_rest(const fs_sublist *sl, const char *s, size_t len, const fs_tokens *t,
                       fs_scratch *sc, int first_only);

/* sc->hits = every node whose subscriptions match the planned subject.
 * first_only: at least one, if any (has_interest): the trie is walked
 * only when no entry matched.  Always inlined: gcc made it a function of
 * its own, whose call, register saves and restores cost more than the
 * call to fs_walk_entries that it leaves (light: ~5 instructions a row of
 * the batch; fs_walk_entries always inlined too made emit_row a function,
 * +20). */
FS_ALWAYS_INLINE int fs_walk_collect(const fs_sublist *sl, const fs_walk_row *p, const fs_tokens *t,
                                  fs_scratch *sc, int first_only)
{
    sc->nhits = 0;
    /* A mapped image changed since opening may have moved the first entry
     * found to its live part: it stops at none. */
    if (fs_walk_entries(sl, p, t, sc, first_only && !sl->live) < 0)
        return FS_ENOMEM;
    if (sl->live)
        return fs_walk_image_rest(sl, p->s, p->len, t, sc, first_only);
    if (first_only && sc->nhits)
        return FS_OK;
    /* A root without a level is a trie without filters (the tables hold
     * them all: light's and heavy's every one), which the walk would
     * answer with nothing at the price of a call into a large function
     * (its register saves and restores: ~33 instructions a row). */
    if (!fs_down(sl, sl->root))
        return FS_OK;
    return fs_trie_walk_locked(sl, p->s, t, sc);
}

#endif
