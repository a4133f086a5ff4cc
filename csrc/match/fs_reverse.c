/* fs_reverse.c - reverse matching: which stored subscriptions could match
 * some subject that a query filter matches, in one order (fs_rresult_sort:
 * by filter, plain before queued, queue, sub_id).  The trie's part is
 * fs_trie_rwalk_locked (fs_trie.c); the tables' entries are tested here. */
#include "fs_match.h"

#include "fs_index.h"
#include "fs_sys.h"
#include "fs_walk.h"

/* Add to sc->hits the literal-table and shape-table entries that the
 * query filter q (tokens in sc->toks) intersects. */
static int rentries_locked(const fs_sublist *sl, const char *q, size_t len, fs_scratch *sc)
{
    const fs_level *L = sl->lit;
    const fs_tokens *qt = &sc->toks;
    int literal = 1;
    for (uint32_t i = 0; i < qt->n; i++)
        literal &= qt->tok[i].kind == FS_TOK_LITERAL;
    if (literal) {    /* a literal query is a subject: the entries are what it matches */
        fs_walk_row p;
        fs_walk_plan_tokens(sl, q, len, qt, NULL, &p);
        return fs_walk_entries(sl, &p, qt, sc, 0);
    }
    fs_tokens et;
    fs_tokens_init(&et);
    fs_error ignored;
    int rc = FS_OK;
    for (uint32_t j = 0; j <= sl->shapes.n && rc == FS_OK; j++) {
        const fs_level *T = j < sl->shapes.n ? &sl->shapes.shape[j]->table : L;
        const fs_slot *slots = fs_lv_slots(sl, T);
        for (uint32_t i = 0; i < T->cap && rc == FS_OK; i++) {
            const fs_node *e = fs_ref_node(sl, slots[i].node);
            if (!e)
                continue;
            rc = fs_tokenize(sl->dialect, e->tok, fs_toklen_of(sl, e), 1, &et, &ignored);
            if (rc == FS_EINVAL) {       /* only a damaged image stores one */
                fs_img_bad(sl);
                rc = FS_OK;
                continue;
            }
            if (rc == FS_OK && fs_filters_intersect(sl->dialect, q, qt, e->tok, &et))
                rc = fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e);
        }
    }
    fs_tokens_free(&et);
    return rc;
}

/* Add to r the subscriptions of part (the index, or a mapped image's
 * live part) that the query filter (tokens in sc->toks) could match;
 * paths are read through sl, the index called. */
static int reverse_part(const fs_sublist *sl, const fs_sublist *part, const char *filter, size_t len,
                        fs_scratch *sc, fs_rresult *r)
{
    int rc = fs_trie_rwalk_locked(part, filter, sc);
    if (rc == FS_OK)
        rc = rentries_locked(part, filter, len, sc);
    for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
        const fs_node *n = sc->hits[k];
        if (part == sl && fs_image_masked(sl, n))
            continue;                   /* moved to the live part */
        /* each count read once with its ids (a mapped image may change) */
        const int64_t *ids;
        uint32_t nids = fs_subs_of(sl, n, &ids), ng = fs_ngroups_of(sl, n);
        for (uint32_t i = 0; rc == FS_OK && i < nids; i++)
            rc = fs_rhit_add(sl, n, NULL, ids[i], r);
        for (uint32_t gi = 0; rc == FS_OK && gi < ng; gi++) {
            const fs_group *g = fs_group_of(sl, n, gi);
            uint32_t gn = fs_gids_of(sl, g, &ids);
            for (uint32_t i = 0; rc == FS_OK && i < gn; i++)
                rc = fs_rhit_add(sl, n, g, ids[i], r);
        }
    }
    return rc;
}

int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                             fs_scratch *sc, fs_rresult *r, fs_error *err)
{
    r->nhits = r->narena = 0;
    int rc = fs_share_inner(sl->dialect, &filter, &len, err);
    if (rc < 0)
        return rc;
    rc = fs_tokenize(sl->dialect, filter, len, 1, &sc->toks, err);
    if (rc < 0)
        return rc;
    fs_brlock_rdlock_long(&sl->lock);
    rc = reverse_part(sl, sl, filter, len, sc, r);
    if (rc == FS_OK && sl->live)
        rc = reverse_part(sl, sl->live, filter, len, sc, r);
    fs_brlock_rdunlock_long(&sl->lock);
    if (rc == FS_OK)
        fs_rresult_sort(r);
    return rc;
}
