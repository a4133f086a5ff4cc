/* fs_result.h - what one subject matched, as both the index and the
 * result cache hold it.  Below both: it depends on neither. */
#ifndef FS_RESULT_H
#define FS_RESULT_H

#include <stddef.h>
#include <stdint.h>

/* A group in a match result.  Byte ranges index fs_result.arena; members
 * index fs_result.ids. */
typedef struct {
    size_t name_off, name_len;
    size_t filter_off, filter_len;   /* MQTT: the group's filter; NATS: 0, 0 */
    size_t members_off, members_len;
    uint32_t key_hash;               /* identifies the group for queue picks */
    int64_t subject_pick;            /* the member picked for a row keyed by its own
                                      * subject (fs_result_pick_for_subject): a cached
                                      * result then picks in O(1), not O(members) */
} fs_group_out;

/* What one subject matched: ids[0..nplain) are the plain subscriptions,
 * then each group's members, in the one order below. */
typedef struct {
    int64_t *ids;
    size_t nids, cap_ids, nplain;
    fs_group_out *groups;
    size_t ngroups, cap_groups;
    char *arena;
    size_t narena, cap_arena;
} fs_result;

/* Is the result holding more than a typical call needs?  (A kept
 * workspace's is then freed: fs_workspace_release, fs_workspace_trim.) */
static inline int fs_result_oversized(const fs_result *r)
{
    return r->cap_ids > 65536 || r->cap_arena > 1u << 20 || r->cap_groups > 4096;
}

/* ---- queue picks (queues="pick"): rendezvous hashing.
 * Each member of a matching group gets a weight from (the row's pick seed,
 * its sub_id); the member with the highest weight is delivered (ties: the
 * smaller sub_id).  The choice so depends only on the SET of matching
 * members, the key and the group -- never on insertion order or on where a
 * filter is stored (trie, shape or literal table), so an index rebuilt in
 * any order, loaded from an image or cut into shards picks the same member.
 * Adding or removing one member moves only the keys that member wins or
 * held.  src/topicmatch/_reference.py restates the rule independently.
 *
 * fs_pick_seed folds the row's key hash (fs_hash of its key, or of the
 * subject) and the group's key (fs_group_key); fs_pick_weight scores a
 * member.  Both are fmix64 (MurmurHash3's finalizer, public domain). */
static inline uint64_t fs_pick_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline uint64_t fs_pick_seed(uint32_t keyhash, uint32_t group_key)
{
    return fs_pick_mix(((uint64_t)keyhash << 32) | group_key);
}

static inline uint64_t fs_pick_weight(uint64_t seed, int64_t id)
{
    return fs_pick_mix(seed ^ ((uint64_t)id * 0x9E3779B97F4A7C15ull));
}

/* The running best of a pick: feed it members in any order. */
typedef struct {
    uint64_t weight;
    int64_t id;
    int any;
} fs_pick_best;

static inline void fs_pick_offer(fs_pick_best *b, uint64_t seed, const int64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t w = fs_pick_weight(seed, ids[i]);
        if (!b->any || w > b->weight || (w == b->weight && ids[i] < b->id)) {
            b->weight = w;
            b->id = ids[i];
            b->any = 1;
        }
    }
}

/* The member picked among ids[0..n), n >= 1. */
static inline int64_t fs_pick(uint64_t seed, const int64_t *ids, size_t n)
{
    fs_pick_best b = {0, 0, 0};
    fs_pick_offer(&b, seed, ids, n);
    return b.id;
}

/* ---- the order of a row's ids: one rule, for every path.
 * A row (a result, or a match_many row) depends only on the set of
 * subscriptions that match -- never on insertion order, where a filter is
 * stored (literal table, shape, trie), the cache, threads, an image round
 * trip or sharding:
 *   1. the plain subscriptions' ids ascending by value (an id on two
 *      matching filters twice, side by side; dedupe keeps one), so the
 *      rows of shards merge into the unsharded row by value alone;
 *   2. then the queue groups, by (queue name bytes, filter bytes) -- NATS
 *      and AMQP key a group by its name alone (merged across filters),
 *      MQTT by (name, filter) -- each group's members ascending.
 * A node holds its ids sorted and its groups in name order (fs_node.c), so
 * nothing is sorted where one node contributes (fs_hits_plain, inline:
 * a copy); otherwise the others' ids are merged on the stack (one other
 * node's are read in place) and put between the stretches of the biggest
 * node's, which are copied eight at a time (fs_hits_merge), and a merged
 * group's parts are merged by value (fs_runs_add).  fs_result.c applies
 * the rule (fs_hits_merge, fs_row_groups); src/topicmatch/_reference.py
 * restates it independently. */

/* Merge the sorted run[0..m) into the sorted ids[0..have), which has room
 * for have + m: ids[0..have + m) is sorted.  From the back, so nothing is
 * moved that is not past where the run goes.  A run of one id, or one id
 * in ids (about half of the small runs of heavy's rows are one id), goes
 * in between the other's stretch, moved a store per id, where the merge
 * picks between two runs per id (heavy's match_many: 3,086 -> 3,056
 * instructions a row; the same for up to two or four ids measured 3,062
 * and 3,069: their loops cost more than they save).  Each path writes
 * ids[0..have + m) once each, keeps each run's order and reads within
 * both counts, sorted or not (the callers check what a mapped image's
 * runs give). */
static inline void fs_ids_merge(int64_t *ids, size_t have, const int64_t *run, size_t m)
{
    size_t i = have, j = m, o = have + m;
    if (!have || ids[have - 1] <= run[0]) {          /* appended as it is */
        for (size_t k = 0; k < m; k++)
            ids[have + k] = run[k];
        return;
    }
    if (m == 1) {                                    /* ids[have - 1] > x: moved up */
        int64_t x = run[0];
        do {
            ids[i] = ids[i - 1];
            i--;
        } while (i && ids[i - 1] > x);
        ids[i] = x;
        return;
    }
    if (have == 1) {                                 /* x > run[0]: the run around it */
        int64_t x = ids[0];
        size_t k = 0;
        for (; k < m && run[k] < x; k++)
            ids[k] = run[k];
        ids[k] = x;
        for (; k < m; k++)
            ids[k + 1] = run[k];
        return;
    }
    while (i && j) {
        int64_t a = ids[i - 1], b = run[j - 1];
        int from_ids = a > b;                        /* equal: the run's first */
        ids[--o] = from_ids ? a : b;
        i -= (size_t)from_ids;
        j -= (size_t)!from_ids;
    }
    while (j) {
        --j;
        ids[j] = run[j];
    }
}

/* Runs merged one by one up to this many; past it, a row's runs are
 * appended and the whole sorted once (merging k runs one by one costs
 * O(n k)). */
#define FS_MERGE_RUNS 16

/* A row's ids being put together from sorted runs, at ids[0..n). */
typedef struct {
    size_t n;
    unsigned runs;
} fs_runs;

/* Sort ids[0..n) ascending, in place (heapsort: no memory). */
void fs_ids_sort(int64_t *ids, size_t n);

/* Add the sorted run[0..m) to the row at ids (room for n + m). */
static inline void fs_runs_add(fs_runs *r, int64_t *ids, const int64_t *run, size_t m)
{
    if (!m)
        return;
    if (r->runs < FS_MERGE_RUNS) {
        fs_ids_merge(ids, r->n, run, m);
    } else {
        for (size_t k = 0; k < m; k++)
            ids[r->n + k] = run[k];
    }
    r->runs++;
    r->n += m;
}

/* The row's runs are all added: ids[0..r->n) sorted. */
static inline void fs_runs_end(const fs_runs *r, int64_t *ids)
{
    if (r->runs > FS_MERGE_RUNS)
        fs_ids_sort(ids, r->n);
}

void fs_result_init(fs_result *r);
void fs_result_free(fs_result *r);
/* Fill each group's subject_pick for the subject whose fs_hash is
 * subject_hash (the pick of a row without a key of its own). */
void fs_result_pick_for_subject(fs_result *r, uint32_t subject_hash);

/* ---- building results from a walk's hits (fs_result.c), for the match
 * layer and the batch pipeline: these read the index's layout. */
#include "fs_layout.h"

/* Build r from the matched nodes in sc->hits, in the row's order
 * (fs_result.h).  FS_OK or FS_ENOMEM. */
int fs_build_result(const fs_sublist *sl, fs_scratch *sc, fs_result *r);
/* The same without the groups' key_hash (left 0): for a result that no
 * queue pick will read -- match()'s answer when there is no cache to keep
 * it -- whose caller then skips a hash per group. */
int fs_build_result_unpicked(const fs_sublist *sl, fs_scratch *sc, fs_result *r);
/* fs_hits_plain writes the plain ids of hits (their nsubs summed: room
 * for that many) to ids in the row's order -- ascending (fs_result.h) --
 * and returns how many.  Never fails: it needs no memory.  Inline, so
 * that a row of one node (most rows) pays a copy and a predictable
 * branch; fs_hits_merge (fs_result.c) orders the rows of several.  On
 * nodes of sl's mapped image whose ids are out of order (verify=False) it
 * writes exactly as many, each once, never outside ids: in their stored
 * order, or, where a merge finds the disorder, with sl marked damaged. */
size_t fs_hits_merge(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, int64_t *ids, size_t room);
/* 1 (the default): fs_hits_merge uses its AVX2 form where it was built
 * and the processor has it; 0: its scalar form everywhere.  For tests
 * alone: both forms must give the same rows, and a machine with AVX2 would
 * otherwise never run the scalar one. */
extern int fs_merge_simd;
/* Put reverse matches in their order: filter bytes, plain before queued,
 * queue name bytes, sub_id.  Never fails. */
void fs_rresult_sort(fs_rresult *r);
int fs_result_copy(fs_result *dst, const fs_result *src);
/* r = the answer of one index holding both a's and b's subscriptions (a
 * and b built by fs_build_result, from two indexes of one dialect): the
 * plain ids merged, and groups of one key (by_name: the name, as NATS and
 * AMQP merge them; else name and filter) merged into one group, all in the
 * row's order.  once: each id once per list, as an AMQP result has them.
 * Queue picks are made afterwards, over the merged members: so a row of a
 * group whose members the two indexes share picks as one index would.
 * FS_OK or FS_ENOMEM. */
int fs_result_merge(fs_result *r, const fs_result *a, const fs_result *b, int by_name, int once);
/* Keep the first occurrence of each id in ids[0..*n), in order, and set
 * *n to how many are kept.  Runs longer than 48 use *set (grown as needed;
 * the caller frees it) as a hash set.  FS_OK, or FS_ENOMEM with ids and
 * *n unchanged. */
int fs_ids_dedupe(int64_t *ids, size_t *n, int64_t **set, size_t *cap_set);
/* Each id at most once among r's plain ids and once in each group's
 * members (fs_ids_dedupe on each, the first occurrence kept), the groups'
 * members moved up to stay packed.  FS_OK or FS_ENOMEM (r unchanged). */
int fs_result_dedupe(fs_result *r);
/* Append one reverse-match row (n's filter, g's name or none, id). */
int fs_rhit_add(const fs_sublist *sl, const fs_node *n, const fs_group *g, int64_t id, fs_rresult *r);
int fs_put_path(const fs_sublist *sl, const fs_node *n, char **arena, size_t *len, size_t *cap);
int fs_arena_put(char **arena, size_t *len, size_t *cap, const char *p, size_t n);
/* A hash identifying a result group (NATS: its name; MQTT: name and filter),
 * stable across processes: queue picks are made from it. */
uint32_t fs_group_key(const fs_sublist *sl, const fs_node *n, const fs_group *g);
/* The plain ids of a row's hits, in the row's order (fs_hits_merge: several).
 * room: how many ids may be written, the hits' counts summed (fs_nsubs_of)
 * by the caller; a mapped image changed since then writes no more (and is
 * marked damaged).  mapped: fs_img_mapped(sl) (fs_layout.h), or 1; 0 for a
 * built index, whose counts cannot change under the read lock: not cut. */
static inline size_t fs_hits_plain_if(const fs_sublist *sl, int mapped, const fs_node *const *hits, size_t nhits,
                                      int64_t *ids, size_t room)
{
    if (nhits == 1) {            /* one node: its ids are sorted already */
        const int64_t *src;
        size_t n = fs_subs_of_if(sl, mapped, hits[0], &src);
        if (mapped && n > room) {
            fs_img_bad(sl);
            n = room;
        }
        if (n)
            memcpy(ids, src, sizeof(int64_t) * n);
        return n;
    }
    return nhits ? fs_hits_merge(sl, hits, nhits, ids, room) : 0;
}
static inline size_t fs_hits_plain(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, int64_t *ids,
                                   size_t room)
{
    return fs_hits_plain_if(sl, 1, hits, nhits, ids, room);
}

/* A row's hits' plain ids counted in one pass of the caller's (the batch's
 * emit counts its groups in the same loop), for fs_hits_plain_tallied: no
 * second pass over the hits to count them again or find the biggest. */
typedef struct {
    size_t total;        /* the hits' plain ids: the room for them */
    size_t runs;         /* the hits holding any */
    size_t big;          /* the first hit holding the most, */
    uint32_t nbig;       /* how many */
} fs_hits_tally;

/* Count hit k, holding m plain ids (fs_nsubs_of_if), into t. */
static inline void fs_hits_tally_add(fs_hits_tally *t, size_t k, uint32_t m)
{
    t->total += m;
    t->runs += m != 0;
    if (m > t->nbig) {
        t->nbig = m;
        t->big = k;
    }
}

/* fs_hits_merge with the counts of t (t->runs >= 2; t->total ids of room).
 * The same bounds and checks: a mapped image's runs are cut to what t
 * counted, its merged row checked for ascending order. */
size_t fs_hits_merge_tallied(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, const fs_hits_tally *t,
                             int64_t *ids);

/* fs_hits_plain_if with the counts of t (room: t->total): a row whose ids
 * one hit holds is a copy of them, inline. */
static inline size_t fs_hits_plain_tallied_if(const fs_sublist *sl, int mapped, const fs_node *const *hits,
                                              size_t nhits, const fs_hits_tally *t, int64_t *ids)
{
    if (t->runs == 1) {          /* one node holds ids: they are sorted already */
        const int64_t *src;
        size_t n = fs_subs_of_if(sl, mapped, hits[t->big], &src);
        if (mapped && n > t->nbig) {
            fs_img_bad(sl);
            n = t->nbig;
        }
        if (n)
            memcpy(ids, src, sizeof(int64_t) * n);
        return n;
    }
    return t->runs ? fs_hits_merge_tallied(sl, hits, nhits, t, ids) : 0;
}


#endif
