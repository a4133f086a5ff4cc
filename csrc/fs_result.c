/* fs_result.c - turning matched nodes into results: the ids, the queue
 * groups (NATS and AMQP merge them by name across nodes, MQTT keeps (name,
 * filter) pairs), their filters' text and the keys queue picks hash.
 * AMQP delivers once per sub_id: its results are deduplicated here. */
#include <string.h>

#include "fs_alloc.h"
#include "fs_internal.h"
#include "fs_walk.h"

void fs_result_init(fs_result *r) { memset(r, 0, sizeof(*r)); }

void fs_result_pick_for_subject(fs_result *r, uint32_t subject_hash)
{
    for (size_t gi = 0; gi < r->ngroups; gi++) {
        fs_group_out *g = &r->groups[gi];
        g->subject_pick = fs_pick(fs_pick_seed(subject_hash, g->key_hash), r->ids + g->members_off,
                                  g->members_len);
    }
}

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
    if (!fs_parent(n))      /* a literal-table entry holds its whole filter */
        return fs_arena_put(arena, len, cap, n->tok, n->toklen);
    size_t total = 0;
    for (const fs_node *p = n; p != sl->root; p = fs_parent(p))
        total += p->toklen + 1;
    total -= 1;
    if (fs_grow(arena, cap, *len + total, 1) < 0)
        return FS_ENOMEM;
    char *end = *arena + *len + total;
    char sep = fs_sep(sl->dialect);
    for (const fs_node *p = n; p != sl->root; p = fs_parent(p)) {
        end -= p->toklen;
        memcpy(end, p->tok, p->toklen);
        if (fs_parent(p) != sl->root)
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

int fs_hits_merge_groups(const fs_sublist *sl, const fs_node *const *hits, size_t nhits)
{
    if (!fs_groups_merge(sl->dialect))
        return 0;
    size_t grouped = 0;
    for (size_t k = 0; k < nhits && grouped < 2; k++)
        grouped += fs_ngroups(hits[k]) != 0;
    return grouped > 1;
}

int fs_group_repeats(const fs_node *const *hits, size_t k, const fs_group *g)
{
    for (size_t j = 0; j < k; j++)
        if (fs_ngroups(hits[j]) && fs_node_find_group(hits[j], g->name, g->name_len, g->name_hash))
            return 1;
    return 0;
}

uint32_t fs_group_key(const fs_sublist *sl, const fs_node *n, const fs_group *g)
{
    uint64_t h = g->name_hash;
    if (!fs_groups_merge(sl->dialect)) {
        /* The group is (name, filter): fold in the filter's token hashes,
         * last to first -- the same whether the filter lives in the trie
         * (one token per node) or in a table entry (the whole filter). */
        if (fs_parent(n)) {
            for (const fs_node *p = n; p != sl->root; p = fs_parent(p))
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

/* Keep the first occurrence of each id by pairwise comparison. */
static size_t dedupe_pairwise(int64_t *ids, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < kept && ids[j] != ids[i])
            j++;
        if (j == kept)
            ids[kept++] = ids[i];
    }
    return kept;
}

int fs_ids_dedupe(int64_t *ids, size_t *n, int64_t **set, size_t *cap_set)
{
    size_t len = *n;
    if (len <= 48) {
        *n = dedupe_pairwise(ids, len);
        return FS_OK;
    }
    size_t cap = 64;
    while (cap < 2 * len)
        cap *= 2;
    if (fs_grow(set, cap_set, 2 * cap, sizeof(int64_t)) < 0)
        return FS_ENOMEM;
    int64_t *slots = *set;
    memset(slots, 0, sizeof(int64_t) * 2 * cap);
    size_t kept = 0;
    for (size_t i = 0; i < len; i++) {
        size_t h = (size_t)(((uint64_t)ids[i] * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            if (!slots[2 * h]) {
                slots[2 * h] = 1;
                slots[2 * h + 1] = ids[i];
                ids[kept++] = ids[i];
                break;
            }
            if (slots[2 * h + 1] == ids[i])
                break;
        }
    }
    *n = kept;
    return FS_OK;
}

/* AMQP: each sub_id once among the plain ids and once in each group.
 * Ids of one node are unique already, so one hit needs nothing.  The hash
 * set is sized for the longest run up front: FS_OK or FS_ENOMEM (r is then
 * left as built, and the caller fails the whole call). */
static int dedupe_result(fs_result *r, size_t nhits)
{
    if (nhits < 2)
        return FS_OK;
    int64_t *set = NULL;
    size_t cap_set = 0, longest = r->nplain;
    for (size_t gi = 0; gi < r->ngroups; gi++)
        if (r->groups[gi].members_len > longest)
            longest = r->groups[gi].members_len;
    if (longest > 48) {
        size_t cap = 64;
        while (cap < 2 * longest)
            cap *= 2;
        if (fs_grow(&set, &cap_set, 2 * cap, sizeof(int64_t)) < 0)
            return FS_ENOMEM;
    }
    size_t nplain = r->nplain;
    fs_ids_dedupe(r->ids, &nplain, &set, &cap_set);        /* cannot fail: the set has room */
    size_t at = nplain;
    for (size_t gi = 0; gi < r->ngroups; gi++) {
        fs_group_out *o = &r->groups[gi];
        size_t m = o->members_len;
        fs_ids_dedupe(r->ids + o->members_off, &m, &set, &cap_set);
        memmove(r->ids + at, r->ids + o->members_off, sizeof(int64_t) * m);
        o->members_off = at;
        o->members_len = m;
        at += m;
    }
    r->nplain = nplain;
    r->nids = at;
    FS_FREE(set);
    return FS_OK;
}

/* Build r from sc->hits: the plain ids, then each merged group
 * (fs_walk.h: NATS and AMQP merge by name across nodes, MQTT groups are
 * (name, filter) pairs, one per node). */
int fs_build_result(const fs_sublist *sl, const fs_scratch *sc, fs_result *r)
{
    r->nids = r->nplain = r->ngroups = r->narena = 0;
    for (size_t k = 0; k < sc->nhits; k++)
        if (put_ids(r, fs_node_ids(sc->hits[k]), sc->hits[k]->nsubs) < 0)
            return FS_ENOMEM;
    r->nplain = r->nids;
    int nats = fs_groups_merge(sl->dialect);
    int merge = -1;
    for (size_t k = 0; k < sc->nhits; k++) {
        const fs_node *n = sc->hits[k];
        for (uint32_t gi = 0; gi < fs_ngroups(n); gi++) {
            const fs_group *g = fs_node_group(n, gi);
            if (fs_group_merged_before(sl, sc->hits, sc->nhits, k, g, &merge))
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
            size_t k2 = k;
            for (const fs_group *part = g; part; part = fs_group_next_part(sc->hits, sc->nhits, merge, g, &k2))
                if (put_ids(r, part->ids, part->n) < 0)
                    return FS_ENOMEM;
            o->members_len = r->nids - o->members_off;
            r->ngroups++;
        }
    }
    if (fs_rules(sl->dialect)->once_per_id)
        return dedupe_result(r, sc->nhits);
    return FS_OK;
}

int fs_result_copy(fs_result *dst, const fs_result *src)
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

void fs_rresult_init(fs_rresult *r) { memset(r, 0, sizeof(*r)); }

void fs_rresult_free(fs_rresult *r)
{
    FS_FREE(r->hits);
    FS_FREE(r->arena);
    fs_rresult_init(r);
}

int fs_rhit_add(const fs_sublist *sl, const fs_node *n, const fs_group *g, int64_t id, fs_rresult *r)
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
