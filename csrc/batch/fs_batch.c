/* fs_batch.c - batch matching, on one thread or several (see fs_batch.h). */
#include "fs_batch.h"

#include <assert.h>
#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_groups.h"
#include "fs_index.h"
#include "fs_pool.h"
#include "fs_sys.h"
#include "fs_walk.h"

/* Rows per read-lock hold: writers wait at most this long, and a cancel
 * request is seen this often. */
#define ROWS_PER_LOCK 1024

/* Copy ids: a loop for the usual one or two, memcpy for long runs. */
static inline void copy_ids(int64_t *dst, const int64_t *src, size_t n)
{
    if (n <= 4)
        for (size_t i = 0; i < n; i++) dst[i] = src[i];
    else
        memcpy(dst, src, sizeof(int64_t) * n);
}

/* How many ids emit() writes for r: its plain ids, and per queues its
 * members ("all"), one per group ("pick") or none ("none"). */
static inline size_t emit_count(const fs_result *r, int queues)
{
    size_t extra = queues == FS_QUEUES_ALL ? r->nids - r->nplain
                 : queues == FS_QUEUES_PICK ? r->ngroups : 0;
    return r->nplain + extra;
}

/* Write r's emit_count(r, queues) ids at dst (room made by the caller);
 * returns the end of what it wrote.  by_subject: the row's pick key is its
 * subject and r's subject_pick are filled (fs_compute_locked): the picks
 * are read, not recomputed over every member. */
FS_ALWAYS_INLINE int64_t *emit_to(const fs_result *r, int queues, uint32_t keyhash, int by_subject,
                                  int64_t *dst)
{
    size_t ncopy = queues == FS_QUEUES_ALL ? r->nids : r->nplain;
    copy_ids(dst, r->ids, ncopy);
    dst += ncopy;
    if (queues == FS_QUEUES_PICK)
        for (size_t gi = 0; gi < r->ngroups; gi++) {
            const fs_group_out *g = &r->groups[gi];
            *dst++ = by_subject ? g->subject_pick
                                : fs_pick(fs_pick_seed(keyhash, g->key_hash), r->ids + g->members_off,
                                          g->members_len);
        }
    return dst;
}

/* Emit a row from a built (or cached) result (emit_to, room made here). */
FS_ALWAYS_INLINE int emit(const fs_result *r, int queues, uint32_t keyhash, int by_subject,
                          fs_idbuf *out)
{
    size_t n = emit_count(r, queues);
    if (n == 0)               /* out->ids may still be NULL: no NULL + 0 */
        return FS_OK;
    if (fs_idbuf_room(out, n) < 0)
        return FS_ENOMEM;
    out->n = (size_t)(emit_to(r, queues, keyhash, by_subject, out->ids + out->n) - out->ids);
    return FS_OK;
}

static inline int put(fs_idbuf *out, const int64_t *ids, size_t n)
{
    if (n == 0)               /* out->ids may still be NULL: no NULL + 0 */
        return FS_OK;
    if (fs_idbuf_room(out, n) < 0)
        return FS_ENOMEM;
    copy_ids(out->ids + out->n, ids, n);
    out->n += n;
    return FS_OK;
}

/* One group of a row being emitted from its parts (one per node holding
 * it): queues="pick" offers each part's members to one rendezvous choice,
 * queues="all" merges them by value (fs_runs) after out's ids. */
typedef struct {
    uint64_t seed;           /* pick: the row's and the group's (fs_pick_seed) */
    fs_pick_best best;
    fs_runs runs;
} group_emit;

static inline void group_start(group_emit *ge, const fs_sublist *sl, const fs_node *n, const fs_group *g,
                               int queues, uint32_t keyhash)
{
    ge->seed = queues == FS_QUEUES_PICK ? fs_pick_seed(keyhash, fs_group_key(sl, n, g)) : 0;
    ge->best = (fs_pick_best){0, 0, 0};
    ge->runs = (fs_runs){0, 0};
}

/* Add a part: its members read once, their count making the room. */
FS_ALWAYS_INLINE int group_part_if(const fs_sublist *sl, int mapped, group_emit *ge, const fs_group *part,
                                   int queues, fs_idbuf *out)
{
    const int64_t *gids;
    uint32_t gn = fs_gids_of_if(sl, mapped, part, &gids);
    if (queues == FS_QUEUES_PICK) {
        fs_pick_offer(&ge->best, ge->seed, gids, gn);
        return FS_OK;
    }
    if (!gn)                 /* out->ids may still be NULL: no NULL + 0 */
        return FS_OK;
    if (fs_idbuf_room(out, ge->runs.n + gn) < 0)
        return FS_ENOMEM;
    if (ge->runs.n) {
        fs_runs_add(&ge->runs, out->ids + out->n, gids, gn);
    } else {                 /* the first part (most groups' only one): copied, as fs_runs_add would */
        copy_ids(out->ids + out->n, gids, gn);
        ge->runs = (fs_runs){gn, 1};
    }
    return FS_OK;
}

static inline int group_end(group_emit *ge, int queues, fs_idbuf *out)
{
    if (queues == FS_QUEUES_PICK)
        return put(out, &ge->best.id, 1);
    if (ge->runs.n) {
        fs_runs_end(&ge->runs, out->ids + out->n);
        out->n += ge->runs.n;
    }
    return FS_OK;
}

/* The groups of a row where one node holds them all (most grouped rows:
 * heavy's 2,259 grouped rows of 3,000 hold ~1.3 grouped nodes each, 1,404
 * of them one): its groups are in name order and no two share a name
 * (fs_node.c), so each is a group of the row by itself, emitted as it
 * comes -- what fs_row_groups and the loop of emit_hits_if give such a
 * row, without the refs.  A mapped node whose groups changed since they
 * were counted reads as fewer (fs_group_of_if). */
FS_ALWAYS_INLINE int emit_node_groups_if(const fs_sublist *sl, int mapped, const fs_node *n, int queues,
                                         uint32_t keyhash, fs_idbuf *out)
{
    uint32_t ng = fs_ngroups_of_if(sl, mapped, n);
    for (uint32_t gi = 0; gi < ng; gi++) {
        const fs_group *g = fs_group_of_if(sl, mapped, n, gi);
        group_emit ge;
        group_start(&ge, sl, n, g, queues, keyhash);
        if (group_part_if(sl, mapped, &ge, g, queues, out) < 0 || group_end(&ge, queues, out) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* The groups of a row where two nodes hold them, in a dialect that merges
 * same-named groups (NATS; fs_groups_merge): the row's order of them
 * (fs_group_pair, which fs_row_groups takes for such a row too), emitted
 * as it comes, without refs or sorting (heavy: 750 rows). */
FS_ALWAYS_INLINE int emit_two_groups_if(const fs_sublist *sl, int mapped, const fs_node *a, const fs_node *b,
                                        int queues, uint32_t keyhash, fs_idbuf *out)
{
    fs_group_pair pr = fs_group_pair_start(sl, mapped, a, b);
    while (fs_group_pair_next(sl, mapped, &pr)) {
        group_emit ge;
        group_start(&ge, sl, pr.ga ? a : b, pr.ga ? pr.ga : pr.gb, queues, keyhash);
        if ((pr.ga && group_part_if(sl, mapped, &ge, pr.ga, queues, out) < 0) ||
            (pr.gb && group_part_if(sl, mapped, &ge, pr.gb, queues, out) < 0) || group_end(&ge, queues, out) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* emit_hits, for mapped = fs_img_mapped(sl), a constant in each copy: a
 * built index's nodes read as they are, a mapped image's checked. */
FS_ALWAYS_INLINE int emit_hits_if(const fs_sublist *sl, int mapped, fs_scratch *sc, int queues, uint32_t keyhash,
                                  fs_idbuf *out)
{
    const fs_node *const *hits = sc->hits;
    size_t nhits = sc->nhits;
    fs_hits_tally t = {0, 0, 0, 0};                   /* one pass: the plain ids and the groups */
    size_t grouped = 0, first = 0, second = 0;        /* most rows have no groups: no call for them */
    if (nhits == 1) {                /* most rows that match (light: 1,500 of 3,000): no loop */
        uint32_t m = fs_nsubs_of_if(sl, mapped, hits[0]);
        t = (fs_hits_tally){m, m != 0, 0, m};
        grouped = hits[0]->groups != NULL;
    } else {
        for (size_t k = 0; k < nhits; k++) {
            fs_hits_tally_add(&t, k, fs_nsubs_of_if(sl, mapped, hits[k]));
            if (hits[k]->groups != NULL) {
                second = grouped == 1 ? k : second;
                first = grouped++ ? first : k;
            }
        }
    }
    if (t.total) {
        if (fs_idbuf_room(out, t.total) < 0)
            return FS_ENOMEM;
        out->n += fs_hits_plain_tallied_if(sl, mapped, hits, nhits, &t, out->ids + out->n);
    }
    if (queues == FS_QUEUES_NONE || !grouped)
        return FS_OK;
    if (grouped == 1)
        return emit_node_groups_if(sl, mapped, hits[first], queues, keyhash, out);
    if (grouped == 2 && fs_groups_merge(sl->dialect))
        return emit_two_groups_if(sl, mapped, hits[first], hits[second], queues, keyhash, out);
    size_t nrefs;
    if (fs_row_groups(sl, sc, &nrefs) < 0)
        return FS_ENOMEM;
    for (size_t j = 0, end; j < nrefs; j = end) {
        end = fs_row_group_end(sc, j, nrefs);
        const fs_node *n = hits[sc->grefs[j].hit];
        group_emit ge;
        group_start(&ge, sl, n, fs_group_of_if(sl, mapped, n, sc->grefs[j].group), queues, keyhash);
        for (size_t p = j; p < end; p++) {          /* its parts, one per node */
            const fs_group *part = fs_group_of_if(sl, mapped, hits[sc->grefs[p].hit], sc->grefs[p].group);
            if (group_part_if(sl, mapped, &ge, part, queues, out) < 0)
                return FS_ENOMEM;
        }
        if (group_end(&ge, queues, out) < 0)
            return FS_ENOMEM;
    }
    return FS_OK;
}

/* Emit a row straight from the matched nodes (no cache to fill), in the
 * order emit() gives for the built result (fs_result.h): the plain ids,
 * then each merged group's members (fs_walk.h), groups in the order
 * fs_row_groups gives them. */
static int emit_hits(const fs_sublist *sl, fs_scratch *sc, int queues, uint32_t keyhash, fs_idbuf *out)
{
    return fs_img_mapped(sl) ? emit_hits_if(sl, 1, sc, queues, keyhash, out)
                             : emit_hits_if(sl, 0, sc, queues, keyhash, out);
}

static int any_groups(const fs_sublist *sl, const fs_scratch *sc)
{
    for (size_t k = 0; k < sc->nhits; k++)
        if (fs_ngroups_of(sl, sc->hits[k]))
            return 1;
    return 0;
}

/* ------------------------------------------------------- the pipeline */

/* A block of rows goes through three passes, so that the memory each
 * needs is requested for the whole block before any row waits on it:
 *   plan:   tokenize, hash, compute every shape key; prefetch the slots
 *   fetch:  the slots have arrived: prefetch the entries they point to
 *   match:  verify the entries (now cached), walk the trie, emit
 * BLOCK_ROWS was measured, not guessed: builds with TOPICMATCH_BLOCK_ROWS=N
 * (setup.py), light's first 200,000 publishes, match_many over Arrow, one
 * thread, three interleaved rounds (medians of 3 in each), ns/subject:
 *     N = 1: 432-450   8: 453-461   16: 442-475   32: 466-487
 *     N = 64: 430-472   128: 461-473
 * -- alike within the machine's noise, even N = 1.  At 100k subscriptions
 * the probes are not what waits: callgrind counts ~1,200 instructions per
 * subject (tokenize ~390, keys and bitmaps of ~8 shapes ~330, emit), run
 * at ~2.5 per cycle; the rest is mispredicted branches (~8 per subject,
 * mostly the bitmaps' answers), not misses.  32 stays: it
 * keeps the plan (keys, tokens) in L1 and hides misses where the tables
 * do outgrow the caches (millions of subscriptions). */
#ifndef FS_BLOCK_ROWS
#define FS_BLOCK_ROWS 32
#endif
#define BLOCK_ROWS FS_BLOCK_ROWS

enum { ROW_NULL = 0, ROW_INVALID = 1, ROW_OK = 2 };

typedef struct {
    fs_walk_row plan[BLOCK_ROWS];
    fs_walk_row also[BLOCK_ROWS];           /* the same subjects' plans in the job's also */
    fs_tokens toks[BLOCK_ROWS];
    int state[BLOCK_ROWS];
    uint32_t hash[BLOCK_ROWS];              /* with a cache: the subjects' (its key) */
    const fs_cache_bucket *bucket[BLOCK_ROWS];  /* and their buckets, */
    const fs_result *hit[BLOCK_ROWS];       /* what they found (NULL: no row) */
} block;

/* With a cache, a block's plan is the rows' subjects and hashes, and the
 * entries their buckets point to are prefetched, so a hit finds its entry
 * in L1 (hot1k, cache_size=4096, 50,000 rows, one thread, interleaved
 * medians: 52.6-53.5 -> 47.0-47.8 ns/subject; prefetching the buckets
 * first as well gained nothing: 46.3-47.5). */
FS_ALWAYS_INLINE void plan_cached_rows_of(const fs_sublist *sl, const fs_strings *subjects, size_t i, size_t n,
                                          block *b)
{
    for (size_t k = 0; k < n; k++) {
        fs_walk_row *r = &b->plan[k];
        b->state[k] = fs_strings_get(subjects, i + k, &r->s, &r->len) ? ROW_OK : ROW_NULL;
        b->hash[k] = b->state[k] == ROW_OK ? fs_cache_hash(r->s, r->len) : 0;
    }
    fs_cache_buckets(sl->cache, b->hash, n, b->bucket);
}

static void plan_cached_rows(const fs_sublist *sl, const fs_strings *subjects, size_t i, size_t n, block *b)
{
    /* The common column, Arrow with 32-bit offsets and no nulls, read
     * through a copy whose layout the compiler sees: fs_strings_get's
     * tests of it fold away (~10 instructions a row fewer). */
    if (subjects->layout == FS_STR_ARROW && !subjects->validity && subjects->off32) {
        fs_strings s = *subjects;
        s.layout = FS_STR_ARROW;
        s.validity = NULL;
        plan_cached_rows_of(sl, &s, i, n, b);
        return;
    }
    plan_cached_rows_of(sl, subjects, i, n, b);
}

/* The walk's plan and fetch steps over a block of rows (fs_walk.h), in
 * sl and, where the job has one, in also (fs_walk_plan: one tokenizing
 * and one mixing serve both). */
static int plan_rows(const fs_sublist *sl, const fs_sublist *also, const fs_strings *subjects, size_t i,
                     size_t n, block *b)
{
    for (size_t k = 0; k < n; k++) {
        const char *s;
        size_t len;
        b->state[k] = ROW_NULL;
        if (!fs_strings_get(subjects, i + k, &s, &len))
            continue;
        fs_error err;
        int rc = fs_walk_plan(sl, also, s, len, &b->toks[k], &b->plan[k], &b->also[k], &err);
        if (rc == FS_ENOMEM)
            return rc;
        b->state[k] = rc < 0 ? ROW_INVALID : ROW_OK;
    }
    for (size_t k = 0; k < n; k++)
        if (b->state[k] == ROW_OK) {
            fs_walk_fetch(sl, &b->plan[k]);
            if (also)
                fs_walk_fetch(also, &b->also[k]);
        }
    return FS_OK;
}

/* What matching rows needs besides the rows: the thread's workspace, a
 * block's plan and the dedupe set, set up once per thread (a batch's
 * threads run it over many small blocks) and the match counts, flushed
 * into the index's once at the end. */
typedef struct {
    fs_workspace spare, *w;
    block *b;
    fs_idbuf set;
    fs_scratch also_sc;              /* a row's walk of the job's also, */
    fs_result also_r, both;          /* its answer, and the two answers as one */
    uint64_t matched, fanout, fanout_max;
} row_matcher;

static int matcher_open(row_matcher *m)
{
    memset(m, 0, sizeof(*m));
    m->b = FS_MALLOC(sizeof(block));
    if (!m->b)
        return FS_ENOMEM;
    m->w = fs_workspace_acquire(&m->spare);
    if (!m->w) {
        FS_FREE(m->b);
        return FS_ENOMEM;
    }
    for (size_t k = 0; k < BLOCK_ROWS; k++)
        fs_tokens_init(&m->b->toks[k]);
    fs_scratch_init(&m->also_sc);
    fs_result_init(&m->also_r);
    fs_result_init(&m->both);
    return FS_OK;
}

static void matcher_close(fs_sublist *sl, row_matcher *m)
{
    for (size_t k = 0; k < BLOCK_ROWS; k++)
        fs_tokens_free(&m->b->toks[k]);
    FS_FREE(m->b);
    m->set.n = m->set.cap;      /* a hash set: any of its slots may be written */
    fs_idbuf_free(&m->set);
    fs_scratch_free(&m->also_sc);
    fs_result_free(&m->also_r);
    fs_result_free(&m->both);
    fs_count_matches(sl, m->matched, m->fanout, m->fanout_max);
    fs_workspace_release(m->w, &m->spare);
}

/* One call's rows and what to do with them: fs_match_rows' parameters,
 * fixed for the whole call.  row_end and invalid are the rows' from begin
 * (row i's are row_end[i - begin], invalid[i - begin]). */
typedef struct {
    fs_sublist *sl;
    fs_sublist *also;    /* NULL, or a second index answered with sl as one (fs_match_rows) */
    const fs_strings *subjects, *keys;
    size_t begin, end;
    int queues;
    int dedupe;          /* 1 also where the dialect delivers once per id */
    int once;            /* the dialect delivers each sub_id once (the rules' once_per_id) */
    int64_t *row_end;
    uint8_t *invalid;
    fs_idbuf *out;
    const atomic_int *cancel;
} rows_job;

/* What a matcher_run uses of its matcher, read into locals once per call
 * (the inlined functions below take their address, nothing else does, so
 * they stay in registers), and the match counts it adds up. */
typedef struct {
    block *b;
    fs_workspace *w;
    fs_idbuf *set;           /* the dedupe set */
    fs_scratch *also_sc;     /* with the job's also: its walk, */
    fs_result *also_r, *both;    /* its answer and the merged one */
} rows_parts;
typedef struct {
    uint64_t matched, fanout, fanout_max;
} rows_counts;

/* The hash that row i's queue picks are made from: its key's, or its
 * subject's -- none for a row of a cached index without a key, whose
 * result holds its subject's picks (emit_to's by_subject); *keyed 1 when
 * the row has a key.  0 unless picking. */
static inline uint32_t row_pick_hash(const rows_job *job, const block *b, size_t k, size_t i, int cached_index,
                                     int *keyed)
{
    *keyed = 0;
    if (job->queues != FS_QUEUES_PICK)
        return 0;
    const fs_walk_row *r = &b->plan[k];
    const char *key;
    size_t klen;
    *keyed = job->keys && fs_strings_get(job->keys, i, &key, &klen);
    return *keyed ? fs_hash(key, klen) : cached_index ? 0 : fs_hash(r->s, r->len);
}

/* Emit a row from the hits of a walk of sl (sl: the job's index or its
 * also) in sc: straight from the hits, or through the built result r. */
static inline int emit_walked(const rows_job *job, const fs_sublist *sl, fs_scratch *sc, fs_result *r,
                              uint32_t keyhash)
{
    if (job->once && job->queues != FS_QUEUES_NONE && any_groups(sl, sc)) {
        /* AMQP picks among deduplicated members, as the built (and cached)
         * result has them. */
        int rc = fs_build_result(sl, sc, r);
        return rc == FS_OK ? emit(r, job->queues, keyhash, 0, job->out) : rc;
    }
    return emit_hits(sl, sc, job->queues, keyhash, job->out);
}

/* Emit a row both of the job's indexes matched: each one's result built
 * (their nodes are read through their own index), then merged as one
 * index's would be (fs_result_merge), and the queue picks made over the
 * merged groups. */
static int emit_both(const rows_job *job, const rows_parts *p, uint32_t keyhash)
{
    int rc = fs_build_result(job->sl, &p->w->sc, &p->w->r);
    if (rc == FS_OK)
        rc = fs_build_result(job->also, p->also_sc, p->also_r);
    if (rc == FS_OK)
        rc = fs_result_merge(p->both, &p->w->r, p->also_r, fs_groups_merge(job->sl->dialect), job->once);
    return rc == FS_OK ? emit(p->both, job->queues, keyhash, 0, job->out) : rc;
}

/* Emit the answer of planned row k (row i) of a cached index into
 * job->out: the cached result (hit: the caller looked it up), or a result
 * computed (and cached) now.  FS_OK, FS_EINVAL (nothing emitted) for a
 * subject the tokenizer refused, FS_ENOMEM. */
static inline int emit_cached_row(const rows_job *job, const rows_parts *p, size_t k, size_t i,
                                  const fs_result *hit)
{
    fs_workspace *w = p->w;
    block *b = p->b;
    const fs_walk_row *r = &b->plan[k];
    int keyed;
    uint32_t keyhash = row_pick_hash(job, b, k, i, 1, &keyed);
    if (hit)
        return emit(hit, job->queues, keyhash, !keyed, job->out);
    fs_error err;
    int rc = fs_compute_locked(job->sl, r->s, r->len, b->hash[k], &w->sc, &w->r, &err);
    return rc == FS_OK ? emit(&w->r, job->queues, keyhash, !keyed, job->out) : rc;
}

/* Emit the answer of planned row k (row i) from the walk's hits (an index
 * without a cache, or a job with an also, where a row that only one index
 * matched is emitted from its hits).  FS_OK or FS_ENOMEM. */
static inline int emit_walked_row(const rows_job *job, const rows_parts *p, size_t k, size_t i)
{
    fs_workspace *w = p->w;
    block *b = p->b;
    const fs_walk_row *r = &b->plan[k];
    int keyed;
    uint32_t keyhash = row_pick_hash(job, b, k, i, 0, &keyed);
    int rc = fs_walk_collect(job->sl, r, &b->toks[k], &w->sc, 0);
    if (FS_UNLIKELY(rc != FS_OK))
        return rc;
    if (job->also) {
        if ((rc = fs_walk_collect(job->also, &b->also[k], &b->toks[k], p->also_sc, 0)) != FS_OK)
            return rc;
        if (p->also_sc->nhits && w->sc.nhits)
            return emit_both(job, p, keyhash);
        if (p->also_sc->nhits)
            return emit_walked(job, job->also, p->also_sc, p->also_r, keyhash);
    }
    return emit_walked(job, job->sl, &w->sc, &w->r, keyhash);
}

/* A valid row's flag and end (its ids end at end).  The arrays are
 * arguments so that match_cached_block_if can pass the copies it keeps in
 * registers. */
static inline void row_close(uint8_t *invalid, int64_t *row_end, size_t at, size_t end)
{
    invalid[at] = 0;
    row_end[at] = (int64_t)end;
}

/* rows valid rows matched, with ids ids in all and at most most in one:
 * into the match counts c. */
static inline void count_rows(rows_counts *c, uint64_t rows, uint64_t ids, uint64_t most)
{
    c->matched += rows;
    c->fanout += ids;
    if (most > c->fanout_max)
        c->fanout_max = most;
}

/* A valid row is done, its ids at out->ids[before .. out->n): its end, its
 * flag, and the match counts into c. */
static inline void row_done(const rows_job *job, rows_counts *c, size_t at, size_t before)
{
    size_t end = job->out->n;
    row_close(job->invalid, job->row_end, at, end);
    count_rows(c, 1, end - before, end - before);
}

/* Row i of the job, whose emit (from out->n = before) returned rc: a
 * null or invalid row (FS_EINVAL: planned so, or refused by the tokenizer
 * on the cache's path) gets no ids and is not counted; a valid row's ids
 * are deduplicated if asked, and its end, flag and counts written.  FS_OK
 * or rc, an FS_ENOMEM. */
static inline int row_finish(const rows_job *job, const rows_parts *p, rows_counts *c, size_t i, size_t before,
                             int rc)
{
    fs_idbuf *out = job->out;
    size_t at = i - job->begin;
    if (FS_UNLIKELY(rc != FS_OK)) {
        if (rc != FS_EINVAL)
            return rc;
        job->invalid[at] = 1;
        job->row_end[at] = (int64_t)out->n;
        return FS_OK;
    }
    /* Only when the row emitted: with nothing emitted yet, out->ids may be
     * NULL, and NULL + 0 is undefined. */
    if (job->dedupe && out->n > before) {
        size_t kept = out->n - before;
        if ((rc = fs_ids_dedupe(out->ids + before, &kept, &p->set->ids, &p->set->cap)) != FS_OK)
            return rc;
        out->n = before + kept;
    }
    row_done(job, c, at, before);
    return FS_OK;
}

/* Match planned row k of the block, row i of the job, from the walk's hits
 * (emit_walked_row, then row_finish).  The state is decided here once, so
 * the common row neither reads its invalid flag back nor tests it.
 *
 * The walk's rows and the cache's have a function each (this one and
 * match_cached_row), each emit path with one caller.  When one match_row
 * served both (a flag saying which), match_cached_block_if's three copies
 * and matcher_run's loop made four callers of it, and GCC 12 -O3 no
 * longer inlined the emit of both paths into matcher_run: the uncached
 * rows of match_many light and heavy paid a call to it (76 instructions
 * a row in it alone, callgrind; light 1,145.1 -> 1,178.6 a row). */
static inline int match_walked_row(const rows_job *job, const rows_parts *p, rows_counts *c, size_t k, size_t i)
{
    size_t before = job->out->n;
    int rc = p->b->state[k] == ROW_OK ? emit_walked_row(job, p, k, i) : FS_EINVAL;
    return row_finish(job, p, c, i, before, rc);
}

/* match_walked_row's counterpart for a cached index's row (hit: its
 * cached answer, or NULL for a miss or a null or invalid row).  Not
 * inlined (GCC 12 keeps it one function for match_cached_block_if's three
 * copies): the rows that are not a plain hit (a miss, a null or invalid
 * row, a deduped job's row) are the rare ones. */
static int match_cached_row(const rows_job *job, const rows_parts *p, rows_counts *c, size_t k, size_t i,
                            const fs_result *hit)
{
    size_t before = job->out->n;
    int rc = p->b->state[k] == ROW_OK ? emit_cached_row(job, p, k, i, hit) : FS_EINVAL;
    return row_finish(job, p, c, i, before, rc);
}

/* A planned block of a cached index's rows, queues a constant in each copy
 * (match_cached_block).  Lookups run ahead, in row order, up to the first
 * miss (their entries were prefetched by the plan), with the ids their
 * hits will emit summed, so that one fs_idbuf_room makes room for them
 * all, and the hits' match counts (rows, ids, the most ids a row) added
 * once for the run; then each hit is written by emit_to with the output's
 * end, its ids and the rows' arrays in locals -- no room check, no reload
 * of them after each id or flag written (an int64_t store may alias the
 * output's size_t n, a uint8_t store anything).  The miss is then computed
 * and cached (match_cached_row) before the next row is looked up, so
 * lookups, fills and the CLOCK bits see the rows in order, as one row at a
 * time would.  A null or invalid row goes through match_cached_row too,
 * and so does every row of a job that dedupes, each looked up just
 * before it is matched. */
FS_ALWAYS_INLINE int match_cached_block_if(const rows_job *job, const rows_parts *p, rows_counts *c, size_t i,
                                           size_t n, int queues, fs_cache_tally *tally)
{
    block *b = p->b;
    fs_idbuf *out = job->out;
    if (job->dedupe) {
        for (size_t k = 0; k < n; k++) {
            const fs_walk_row *r = &b->plan[k];
            const fs_result *hit = b->state[k] == ROW_OK
                                 ? fs_cache_get_from(b->bucket[k], r->s, r->len, b->hash[k], tally) : NULL;
            int rc = match_cached_row(job, p, c, k, i + k, hit);
            if (rc != FS_OK)
                return rc;
        }
        return FS_OK;
    }
    int64_t *row_end = job->row_end;
    uint8_t *invalid = job->invalid;
    size_t at0 = i - job->begin;
    for (size_t k = 0; k < n;) {
        size_t need = 0, most = 0, nhits = 0, m = k;
        for (; m < n; m++) {
            const fs_walk_row *r = &b->plan[m];
            const fs_result *hit = NULL;
            if (b->state[m] == ROW_OK &&
                !(hit = fs_cache_get_from(b->bucket[m], r->s, r->len, b->hash[m], tally)))
                break;                          /* row m missed: matched in order, below */
            b->hit[m] = hit;
            if (hit) {
                size_t e = emit_count(hit, queues);
                need += e;
                most = e > most ? e : most;
                nhits++;
            }
        }
        if (need && fs_idbuf_room(out, need) < 0)
            return FS_ENOMEM;
        count_rows(c, nhits, need, most);
        size_t end = out->n;
        int64_t *ids = out->ids;      /* NULL while nothing was emitted: then need is 0 */
        for (; k < m; k++) {
            const fs_result *hit = b->hit[k];
            if (FS_UNLIKELY(!hit)) {  /* a null row (no lookup) */
                out->n = end;
                int rc = match_cached_row(job, p, c, k, i + k, NULL);
                if (rc != FS_OK)
                    return rc;
                end = out->n;
                continue;
            }
            if (need) {               /* ids may be NULL: no NULL + 0 */
                int keyed;
                uint32_t keyhash = row_pick_hash(job, b, k, i + k, 1, &keyed);
                end = (size_t)(emit_to(hit, queues, keyhash, !keyed, ids + end) - ids);
            }
            row_close(invalid, row_end, at0 + k, end);
        }
        out->n = end;
        if (k < n) {              /* the miss */
            int rc = match_cached_row(job, p, c, k, i + k, NULL);
            if (rc != FS_OK)
                return rc;
            k++;
        }
    }
    return FS_OK;
}

/* Always inlined into its one caller, matcher_run: once the walk's path
 * was inlined there whole, GCC 12 made this a function of its own, which
 * cost hot1k 5.1 instructions a row (callgrind; its three copies read the
 * job through a pointer, and a copy of the job into locals there cost
 * more still, +3.3). */
FS_ALWAYS_INLINE int match_cached_block(const rows_job *job, const rows_parts *p, rows_counts *c, size_t i,
                                        size_t n, fs_cache_tally *tally)
{
    switch (job->queues) {
    case FS_QUEUES_ALL:
        return match_cached_block_if(job, p, c, i, n, FS_QUEUES_ALL, tally);
    case FS_QUEUES_NONE:
        return match_cached_block_if(job, p, c, i, n, FS_QUEUES_NONE, tally);
    default:
        return match_cached_block_if(job, p, c, i, n, FS_QUEUES_PICK, tally);
    }
}

/* The most ids room_ahead reserves at once beyond a doubling (4 MiB, where
 * fs_idbuf.c's pool of kept buffers takes over): a first block of unusual
 * rows may not make it reserve for millions of rows at their rate. */
#define AHEAD_MAX_IDS (((size_t)4 << 20) / sizeof(int64_t))

/* Before a block: when the output has less room left than a block needs at
 * the rate of ids per row seen in this call (emitted over done rows), grow
 * it for all the rows left at that rate (plus an eighth), not by doubling.
 * Doubling from 64 ids copied the output at every step: match_many heavy
 * (~81 ids a row, 1.9 MB for 3,000 rows) spent ~100 instructions a row in
 * realloc's memcpy (callgrind: 600,886 of 18.8M).  FS_OK or FS_ENOMEM. */
static int room_ahead(fs_idbuf *out, size_t emitted, size_t done, size_t left)
{
    if (!emitted || !done || !left)
        return FS_OK;
    size_t per = emitted / done + 1;
    if (out->cap - out->n >= per * BLOCK_ROWS)
        return FS_OK;
    size_t most = out->cap > AHEAD_MAX_IDS ? out->cap : AHEAD_MAX_IDS;
    size_t more = left > most / per ? most : per * left;
    return fs_idbuf_reserve(out, out->n + more + more / 8);
}

/* fs_match_rows' work, with the set-up done: the job's rows a block at a
 * time, the read lock taken for ROWS_PER_LOCK rows at a time. */
static int matcher_run(row_matcher *m, const rows_job *jp)
{
    const rows_job job = *jp;
    const rows_parts parts = {.b = m->b, .w = m->w, .set = &m->set, .also_sc = &m->also_sc,
                              .also_r = &m->also_r, .both = &m->both};
    rows_counts c = {0, 0, 0};
    fs_sublist *sl = job.sl;
    int rc = FS_OK;
    fs_cache_tally tally = {0, 0};
    size_t i = job.begin, first_n = job.out->n;
    while (i < job.end && rc == FS_OK) {
        if (job.cancel && atomic_load_explicit(job.cancel, memory_order_relaxed)) {
            rc = FS_ECANCELLED;
            break;
        }
        size_t stop = job.end - i > ROWS_PER_LOCK ? i + ROWS_PER_LOCK : job.end;
        /* Two indexes' read locks in one order, the older index's first,
         * whichever is the job's also: the order in which the fork
         * handler takes their write locks (fs_fork.c), so that neither a
         * fork() nor two calls naming them the other way round can wait
         * on each other. */
        int also_first = job.also && job.also->fork.seq < sl->fork.seq;
        if (also_first)
            fs_brlock_rdlock(&job.also->lock);
        fs_brlock_rdlock(&sl->lock);
        if (job.also && !also_first)
            fs_brlock_rdlock(&job.also->lock);
        /* (with an also, the walk's path: a cached answer is sl's alone) */
        int cached_index = sl->cache != NULL && !job.also;
        while (i < stop && rc == FS_OK) {
            size_t nblock = stop - i > BLOCK_ROWS ? BLOCK_ROWS : stop - i;
            if ((rc = room_ahead(job.out, job.out->n - first_n, i - job.begin, job.end - i)) < 0)
                break;
            if (cached_index) {
                plan_cached_rows(sl, job.subjects, i, nblock, parts.b);
                rc = match_cached_block(&job, &parts, &c, i, nblock, &tally);
                i += nblock;
                continue;
            }
            if ((rc = plan_rows(sl, job.also, job.subjects, i, nblock, parts.b)) < 0)
                break;
            for (size_t k = 0; k < nblock && rc == FS_OK; k++, i++)
                rc = match_walked_row(&job, &parts, &c, k, i);
        }
        if (job.also)
            fs_brlock_rdunlock(&job.also->lock);
        fs_read_done(sl, &tally);
        tally = (fs_cache_tally){0, 0};
    }
    m->matched += c.matched;
    m->fanout += c.fanout;
    if (c.fanout_max > m->fanout_max)
        m->fanout_max = c.fanout_max;
    return rc;
}

/* The job of rows [begin, end) with fs_match_rows' parameters (row_end and
 * invalid: row begin's). */
static rows_job rows_job_of(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects,
                            const fs_strings *keys, size_t begin, size_t end, int queues, int dedupe,
                            int64_t *row_end, uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel)
{
    int once = fs_rules(sl->dialect)->once_per_id;
    /* AMQP delivers once per sub_id: the rule, not an option. */
    return (rows_job){.sl = sl, .also = also, .subjects = subjects, .keys = keys, .begin = begin, .end = end,
                      .queues = queues, .dedupe = dedupe || once, .once = once, .row_end = row_end,
                      .invalid = invalid, .out = out, .cancel = cancel};
}

int fs_match_rows(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects, const fs_strings *keys,
                  size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                  uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel)
{
    assert(also != sl && (!also || also->dialect == sl->dialect));
    row_matcher m;
    if (matcher_open(&m) != FS_OK)
        return FS_ENOMEM;
    rows_job job = rows_job_of(sl, also, subjects, keys, begin, end, queues, dedupe, row_end, invalid, out, cancel);
    int rc = matcher_run(&m, &job);
    matcher_close(sl, &m);
    return rc;
}

/* ------------------------------------------------------------ threads
 *
 * The rows are cut into units of unit_rows (UNIT_ROWS, or the caller's
 * block_rows), and a block is a run of whole units: a thread claims one
 * with a single fetch-and-add on the next unit, so blocks are claimed in
 * row order without a lock, and a thread that drew cheap rows takes more
 * of them.  Each thread chooses its next block's size from what its
 * blocks cost (next_block_units): ~BLOCK_TARGET_NS of work at the cost per
 * row it has seen (which falls at once and rises by at most a quarter a
 * block, so a block during which the thread was preempted does not shrink
 * the next ones), at most
 * BLOCK_MAX_IDS ids (so a block's ids stay in the L2), never more than
 * twice the last, and smaller near the end so the threads finish
 * together.  Cheap rows (hot1k, cached) grow to thousands of rows a
 * block; heavy's ~80 ids a row keep its blocks to a few hundred.
 *
 * A thread matches a block into a small buffer of its own, which stays in
 * its cache, then copies the ids to their place in the one output, which
 * all threads write at the same time.  The place is found without a lock
 * or a wait for a turn, by a decoupled look-back (Merrill and Garland's
 * single-pass scan): the slot of a block's last unit holds one atomic
 * word, 0 until the block is matched, then AGG | its id count, then
 * PREFIX | the ids of every block up to and including it.  A block's
 * offset is the sum of the words found walking back from its first unit
 * (each word's block says where it starts), stopping at the first PREFIX.
 * A block is matched before it is placed, so the walk only meets a 0 for
 * a block another thread is matching now.  Then the thread does not wait:
 * it keeps the block in its queue (PENDING_BLOCKS) and matches the next.
 * Only with a full queue does it wait: it spins briefly (fs_cpu_relax,
 * SPIN_NS), and if the block before is still not matched -- its thread was
 * preempted, as it is with more threads than processors -- the queue
 * doubles (up to PENDING_MAX blocks or PENDING_MAX_IDS ids) instead of
 * the thread waiting longer.  Only a thread whose queue is at that limit
 * sleeps (a condition variable, woken by the word it waits for), so that
 * a preempted thread's block bounds the memory the others queue: with
 * threads <= CPUs and no other load that never happens, and no block
 * sleeps to be placed.  A thread with nothing left to claim spins for at
 * most END_WAIT_NS; if a block before its own is still being matched then
 * (its thread preempted), it sleeps until every block is matched -- one
 * sleep per thread per batch at most -- and places the rest of its queue
 * (every offset is then known without waiting).  Nothing yields: under
 * load, a thread that yields while it waits hands its processor to other
 * processes and still burns its own time.
 *
 * Measured under load (2 cores shared, load average 10-15; 16 threads,
 * 1M rows): with a fixed queue of 8 whose threads yielded until they could
 * place, light and heavy made 17,000-23,000 involuntary context switches a
 * batch; with the queue growing, 29-200 -- but heavy, whose queues reach
 * their limit, 12,657 while yielding there, and 25% more CPU than the
 * old code at 2 threads.  Threads that gave their queue
 * to fs_batch_finish after END_WAIT_NS instead of sleeping left heavy's
 * caller copying up to 8 MiB of ids per thread alone: heavy T=16 709 ns
 * a row against the old code's 475.  A limit of 32 MiB a worker instead of 8
 * cut heavy's sleeps at T=16 from ~1,200 to 80 a batch, but its system
 * time rose from ~12 to 100-155 ms (the bigger queues' fresh buffers'
 * page faults): 8 MiB stays.
 *
 * What it replaced: blocks of 1,024 rows placed in turn under a mutex,
 * waiting on a condition variable for the block before to be placed:
 * with 16 threads, hot1k spent 2.7 cores in the kernel and made 9,604
 * context switches per 1M-row batch.  And before that, each thread matched
 * a contiguous half into a buffer of its own, grown through fresh pages,
 * then the halves were copied into one: on heavy (~650 MB of ids) the page
 * faults and the copy made threads=2 0.36-0.73x as fast as one thread.
 *
 * The threads are the process's worker pool (fs_pool.h): a batch posts a
 * task for nthreads workers and creates no thread once the pool is big
 * enough.
 *
 * The caller may still be filling the column when the threads start
 * (fs_batch_feed): a block is matched only once its rows are fed.  A
 * Python list's strings are converted under the interpreter lock, one
 * thread's work; fed as they are converted, the threads match the first
 * rows while the rest are converted, instead of after all of them.
 */
#define UNIT_ROWS 32               /* the pipeline's BLOCK_ROWS: a whole plan */
#define FIRST_BLOCK_ROWS 64        /* a thread's first block: a guess to measure */
#define MAX_BLOCK_ROWS 16384
#define BLOCK_TARGET_NS 100000ULL  /* ~100 us a block */
#define BLOCK_MAX_IDS 65536        /* 512 KiB of ids: half the L2 here (1 MiB a core) */
#define PENDING_BLOCKS 8           /* a worker's queue to begin with */
#define PENDING_MAX 1024           /* it grows to this many blocks, */
#define PENDING_MAX_IDS ((size_t)1 << 20)   /* or 8 MiB of ids, then waits */
#define SPIN_NS 20000ULL           /* spin this long before growing the queue, or sleeping */
#define END_WAIT_NS 50000ULL       /* a thread done claiming spins this long, then sleeps */

#define ST_AGG ((uint64_t)1 << 62)
#define ST_PREFIX ((uint64_t)2 << 62)
#define ST_VALUE(s) ((s) & (ST_AGG - 1))

typedef struct {
    _Atomic uint64_t state;    /* at a block's last unit: 0, AGG | ids, PREFIX | ids through it */
    size_t first;              /* that block's first unit: written before state */
} unit_slot;

typedef struct {
    size_t first, last;        /* units */
    fs_idbuf ids;
} pending_block;

typedef struct {
    pending_block *queue;      /* a ring of cap: head, then count */
    unsigned cap, head, count;
    size_t queued_ids;         /* the ids of its count blocks */
    size_t blocked;            /* look_back's: where its last walk stopped */
    unsigned long long ran_ns;   /* its blocks' matching (wall) since crowded_out last judged */
    unsigned long long cpu_at;   /* its thread's processor time then (0: unknown) */
    pending_block first[PENDING_BLOCKS];     /* the ring until it grows */
    /* A worker writes its block's count of ids (first[k].ids.n) on every
     * row, and its ring's fields on every block; the next worker's lie
     * right after.  64 bytes apart, whatever the allocation's alignment,
     * no line holds both's: a row writes nothing another thread reads. */
    char pad[64];
} batch_worker;

struct fs_batch_job {
    fs_sublist *sl, *also;
    fs_strings subjects, keys;
    int has_keys, queues, dedupe, fixed;   /* fixed: every block is one unit */
    size_t nrows, unit_rows, nunits;
    int64_t *row_end;
    uint8_t *invalid;
    unit_slot *slots;
    atomic_int cancel;
    atomic_int rc;                 /* the first error, FS_OK */
    atomic_size_t next_unit;       /* the next unit to claim */
    atomic_uint claiming;          /* workers in worker_run that have not left crowded out */
    unsigned processors;           /* the processors this process may run on (fs_cpus) */
    atomic_size_t units_done;      /* units matched (fs_batch_wait) */
    atomic_size_t fed;             /* rows [0, fed) may be read; written under mu */
    fs_mutex mu;                   /* for the waits on more and done */
    fs_cond more;                  /* more rows were fed, or the job was cancelled */
    fs_cond done;                  /* every unit matched, or the job failed */
    fs_cond placed;                /* a word was written while sleepers > 0 */
    atomic_int sleepers;           /* threads in sleep_on_slot */
    fs_rwlock grow;                /* copies into out share it; growing out takes it alone */
    fs_idbuf out;
    fs_pool_task task;
    unsigned nworkers;
    char pad[64];                  /* workers[0]'s lines hold none of the above (batch_worker) */
    batch_worker workers[];
};

/* Rows of units [first, last]. */
static void unit_span(const fs_batch_job *job, size_t first, size_t last, size_t *begin, size_t *end)
{
    *begin = first * job->unit_rows;
    *end = (last + 1) * job->unit_rows < job->nrows ? (last + 1) * job->unit_rows : job->nrows;
}

static void wake_waiters(fs_batch_job *job)
{
    fs_mutex_lock(&job->mu);
    fs_cond_broadcast(&job->more);
    fs_cond_broadcast(&job->done);
    fs_cond_broadcast(&job->placed);
    fs_mutex_unlock(&job->mu);
}

static void fail(fs_batch_job *job, int rc)
{
    int ok = FS_OK;
    atomic_compare_exchange_strong(&job->rc, &ok, rc);
    atomic_store(&job->cancel, 1);
    wake_waiters(job);
}

static int cancelled(fs_batch_job *job)
{
    return atomic_load_explicit(&job->cancel, memory_order_relaxed);
}

/* Every unit matched, or the job failed or was cancelled. */
static int job_over(fs_batch_job *job)
{
    return atomic_load(&job->units_done) == job->nunits || cancelled(job);
}

/* Sleep until slot q's block is matched (its word is written) or the job
 * is cancelled: only for a thread whose queue is at its limit (see
 * above).  Whoever writes a word wakes the sleepers (publish), and each
 * side writes before it reads the other's (sleepers, the word: seq_cst),
 * so no wake-up is lost. */
static uint64_t sleep_on_slot(fs_batch_job *job, unit_slot *q)
{
    atomic_fetch_add(&job->sleepers, 1);
    fs_mutex_lock(&job->mu);
    uint64_t st;
    while ((st = atomic_load(&q->state)) == 0 && !cancelled(job))
        fs_cond_wait(&job->placed, &job->mu);
    fs_mutex_unlock(&job->mu);
    atomic_fetch_sub(&job->sleepers, 1);
    return st;
}

/* Write a block's word; wake the threads sleeping for one, if any. */
static void publish(fs_batch_job *job, size_t last, uint64_t word)
{
    atomic_store(&job->slots[last].state, word);
    if (atomic_load(&job->sleepers)) {
        fs_mutex_lock(&job->mu);
        fs_cond_broadcast(&job->placed);
        fs_mutex_unlock(&job->mu);
    }
}

/* Wait for a matched block's word in slot q: spin (fs_cpu_relax) for at
 * most limit_ns, or, with limit_ns 0, SPIN_NS and then sleep.  The word,
 * or 0 when the job is cancelled or the time is up. */
static uint64_t await_slot(fs_batch_job *job, unit_slot *q, unsigned long long limit_ns)
{
    unsigned long long start = fs_now_ns();
    for (unsigned spins = 1;; spins++) {
        uint64_t st = atomic_load_explicit(&q->state, memory_order_acquire);
        if (st)
            return st;
        if ((spins & 63) == 0) {
            if (cancelled(job))
                return 0;
            unsigned long long waited = fs_now_ns() - start;
            if (limit_ns && waited > limit_ns)
                return 0;
            if (!limit_ns && waited > SPIN_NS)
                return sleep_on_slot(job, q);
        }
        fs_cpu_relax();
    }
}

/* The ids of every block before unit u, into *sum.  1; 0 when a block
 * before is still being matched and wait is 0 or its time ran out (or the
 * job was cancelled).  *blocked: the slot a walk last stopped at (or
 * SIZE_MAX); while it is still 0, a walk that may not wait fails at once
 * instead of walking back to it again over every block matched since. */
static int look_back(fs_batch_job *job, size_t u, int wait, unsigned long long limit_ns, uint64_t *sum,
                     size_t *blocked)
{
    if (!wait && *blocked < u &&
        atomic_load_explicit(&job->slots[*blocked].state, memory_order_relaxed) == 0)
        return 0;
    uint64_t s = 0;
    while (u > 0) {
        unit_slot *q = &job->slots[u - 1];
        uint64_t st = atomic_load_explicit(&q->state, memory_order_acquire);
        if (st == 0 && (!wait || (st = await_slot(job, q, limit_ns)) == 0)) {
            *blocked = u - 1;
            return 0;
        }
        s += ST_VALUE(st);
        if (st & ST_PREFIX)
            break;
        u = q->first;
    }
    *sum = s;
    return 1;
}

/* Copy a block's ids to offset off in the output, growing it first if
 * they do not fit; make its row ends global. */
static int place_block(fs_batch_job *job, const pending_block *p, size_t off)
{
    size_t n = p->ids.n, need = off + n;
    fs_rwlock_rdlock(&job->grow);
    while (job->out.cap < need) {
        fs_rwlock_rdunlock(&job->grow);
        fs_rwlock_wrlock(&job->grow);
        int rc = FS_OK;
        if (job->out.cap < need) {
            /* Blocks are placed out of order: anything below cap may
             * have been written, so all of it is kept. */
            job->out.n = job->out.cap;
            rc = fs_idbuf_reserve(&job->out, need);
        }
        fs_rwlock_wrunlock(&job->grow);
        if (rc != FS_OK)
            return rc;
        fs_rwlock_rdlock(&job->grow);
    }
    if (n)
        memcpy(job->out.ids + off, p->ids.ids, sizeof(int64_t) * n);
    fs_rwlock_rdunlock(&job->grow);
    if (off) {
        size_t begin, end;
        unit_span(job, p->first, p->last, &begin, &end);
        for (size_t i = begin; i < end; i++)
            job->row_end[i] += (int64_t)off;
    }
    return FS_OK;
}

/* Double a full queue: FS_OK or FS_ENOMEM. */
static int grow_queue(batch_worker *w)
{
    unsigned cap = w->cap * 2;
    pending_block *q = FS_MALLOC(cap * sizeof(pending_block));
    if (!q)
        return FS_ENOMEM;
    memset(q, 0, cap * sizeof(pending_block));
    for (unsigned k = 0; k < w->cap; k++)
        q[k] = w->queue[(w->head + k) % w->cap];
    if (w->queue != w->first)
        FS_FREE(w->queue);
    w->queue = q;
    w->head = 0;
    w->cap = cap;
    return FS_OK;
}

enum { PLACE_READY, PLACE_ROOM, PLACE_END };

/* Sleep until every unit is matched (or the job failed or was
 * cancelled): a thread with nothing left to claim whose queue still waits
 * on a block another thread is matching -- one that was preempted. */
static void sleep_until_over(fs_batch_job *job)
{
    fs_mutex_lock(&job->mu);
    while (!job_over(job))
        fs_cond_wait(&job->done, &job->mu);
    fs_mutex_unlock(&job->mu);
}

/* Place the worker's queued blocks, oldest first, while their offsets are
 * known.  PLACE_READY: without waiting.  PLACE_ROOM: the same, but when the
 * queue is full, make room: spin a while for the oldest, then grow the
 * queue, or (at PENDING_MAX) wait until it is placed.  PLACE_END: wait up
 * to END_WAIT_NS for each, then sleep until every block is matched, and
 * place the rest.  FS_OK, or an error. */
static int place_queued(fs_batch_job *job, batch_worker *w, int how)
{
    while (w->count) {
        pending_block *p = &w->queue[w->head];
        int full = how == PLACE_ROOM && w->count == w->cap;
        int growable = w->cap < PENDING_MAX && w->queued_ids < PENDING_MAX_IDS;
        uint64_t off;
        int found = how == PLACE_END ? look_back(job, p->first, 1, END_WAIT_NS, &off, &w->blocked)
                  : full ? look_back(job, p->first, 1, growable ? SPIN_NS : 0, &off, &w->blocked)
                  : look_back(job, p->first, 0, 0, &off, &w->blocked);
        if (!found) {
            if (cancelled(job))
                return FS_ECANCELLED;
            if (how == PLACE_END) {
                sleep_until_over(job);    /* then every block's word is written */
                continue;
            }
            return full ? grow_queue(w) : FS_OK;
        }
        publish(job, p->last, ST_PREFIX | (off + p->ids.n));
        int rc = place_block(job, p, (size_t)off);
        if (rc != FS_OK)
            return rc;
        w->head = (w->head + 1) % w->cap;
        w->count--;
        w->queued_ids -= p->ids.n;
    }
    return FS_OK;
}

/* Wait until rows [0, end) are fed; FS_ECANCELLED if the job is cancelled
 * first.  (Only a Python list's rows are fed late.) */
static int wait_fed(fs_batch_job *job, size_t end)
{
    if (atomic_load_explicit(&job->fed, memory_order_acquire) >= end)
        return FS_OK;
    int rc = FS_OK;
    fs_mutex_lock(&job->mu);
    while (atomic_load_explicit(&job->fed, memory_order_relaxed) < end) {
        if (cancelled(job)) {
            rc = FS_ECANCELLED;
            break;
        }
        fs_cond_wait(&job->more, &job->mu);
    }
    fs_mutex_unlock(&job->mu);
    return rc;
}

/* With more threads than processors, every worker waits its turn for one,
 * and a block being matched when its thread is preempted holds up the
 * placing of every block after it: heavy at threads=16 on 2 processors
 * ran 1.15-1.17x as long as at threads=2 (bench/run_batch.py --threads
 * 2,16, which sets the thread policy's processor count to 16), with more
 * of the queues' copying, page faults and cache misses.  So a worker
 * whose matching, over RETIRE_SPAN_NS of it at least, had a processor less
 * than half of the time stops claiming blocks (the others take them), so
 * long as more workers claim than the process has processors: only
 * crowding by the job's own threads is relieved by leaving (another
 * process's load is not, and a job never drops below a worker a
 * processor).  The wall time is matcher_run's alone (not the waits for
 * rows or to place a block, which use no processor), set against all the
 * thread's processor time over the span (its placing too: a worker is
 * judged crowded a little later, not sooner), read once a span: the
 * processor clock is a system call (~200 ns here; a block is ~100 us,
 * BLOCK_TARGET_NS).  Nothing is judged where the thread's processor time
 * is unknown (fs_thread_cpu_ns: 0) or blocks are fixed.  heavy, threads=16 / threads=2
 * (bench/ab_scaling.py --threads 2,16 --only heavy): 1.13 judged over 10 ms
 * spans, 1.09 over 2 ms, against 1.13-1.20 without. */
#define RETIRE_SPAN_NS 2000000ULL

static atomic_ullong workers_crowded_out;   /* fs_batch_workers_crowded_out */

unsigned long long fs_batch_workers_crowded_out(void)
{
    return atomic_load_explicit(&workers_crowded_out, memory_order_relaxed);
}

static int crowded_out(fs_batch_job *job, batch_worker *w, unsigned long long wall)
{
    w->ran_ns += wall;
    if (w->ran_ns < RETIRE_SPAN_NS)
        return 0;
    unsigned long long cpu = fs_thread_cpu_ns();
    int crowded = cpu != 0 && (cpu - w->cpu_at) * 2 < w->ran_ns;
    w->ran_ns = 0;
    w->cpu_at = cpu;
    unsigned n = atomic_load_explicit(&job->claiming, memory_order_relaxed);
    while (crowded && n > job->processors)
        if (atomic_compare_exchange_weak_explicit(&job->claiming, &n, n - 1, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            atomic_fetch_add_explicit(&workers_crowded_out, 1, memory_order_relaxed);
            return 1;
        }
    return 0;
}

/* The next block's size, in units, from the last one's rows, time and
 * ids; *cost: the thread's estimate of ns per 1,024 rows (0: none yet). */
static size_t next_block_units(const fs_batch_job *job, size_t rows, unsigned long long ns, size_t ids,
                               unsigned long long *cost)
{
    if (job->fixed)
        return 1;
    unsigned long long c = ns * 1024 / rows, est = *cost;
    est = est == 0 || c < est ? c : c < est + est / 4 ? c : est + est / 4;
    *cost = est;
    unsigned long long want = est ? BLOCK_TARGET_NS * 1024 / est : MAX_BLOCK_ROWS;
    if (ids && want > (unsigned long long)rows * BLOCK_MAX_IDS / ids)
        want = (unsigned long long)rows * BLOCK_MAX_IDS / ids;
    if (want > 2 * (unsigned long long)rows)
        want = 2 * (unsigned long long)rows;
    if (want > MAX_BLOCK_ROWS)
        want = MAX_BLOCK_ROWS;
    size_t units = (size_t)want / job->unit_rows;
    return units ? units : 1;
}

static int worker_run(fs_batch_job *job, batch_worker *w, row_matcher *m)
{
    const fs_strings *keys = job->has_keys ? &job->keys : NULL;
    size_t units = job->fixed ? 1 : (FIRST_BLOCK_ROWS + job->unit_rows - 1) / job->unit_rows;
    unsigned long long cost = 0;
    int leave = 0;
    for (;;) {
        if (leave)
            return place_queued(job, w, PLACE_END);
        int rc = place_queued(job, w, PLACE_ROOM);
        if (rc != FS_OK)
            return rc;
        if (cancelled(job))
            return FS_ECANCELLED;
        /* Near the end, smaller blocks: the threads finish together. */
        size_t left = job->nunits - atomic_load_explicit(&job->next_unit, memory_order_relaxed);
        size_t share = left / (2 * (size_t)job->nworkers);
        size_t take = units < share ? units : share ? share : 1;
        size_t first = atomic_fetch_add_explicit(&job->next_unit, take, memory_order_relaxed);
        if (first >= job->nunits)
            return place_queued(job, w, PLACE_END);
        size_t last = first + take <= job->nunits ? first + take - 1 : job->nunits - 1;
        pending_block *p = &w->queue[(w->head + w->count) % w->cap];
        size_t begin, end;
        unit_span(job, first, last, &begin, &end);
        if ((rc = wait_fed(job, end)) != FS_OK)
            return rc;
        p->first = first;
        p->last = last;
        p->ids.n = 0;
        unsigned long long t0 = job->fixed ? 0 : fs_now_ns();
        rows_job rows = rows_job_of(job->sl, job->also, &job->subjects, keys, begin, end, job->queues, job->dedupe,
                                    job->row_end + begin, job->invalid + begin, &p->ids, &job->cancel);
        rc = matcher_run(m, &rows);
        if (rc != FS_OK)
            return rc;
        if (!job->fixed) {
            unsigned long long wall = fs_now_ns() - t0;
            units = next_block_units(job, end - begin, wall, p->ids.n, &cost);
            if (w->cpu_at != 0)
                leave = crowded_out(job, w, wall);
        }
        job->slots[last].first = first;
        publish(job, last, ST_AGG | p->ids.n);
        w->count++;
        w->queued_ids += p->ids.n;
        size_t n = last - first + 1;
        if (atomic_fetch_add_explicit(&job->units_done, n, memory_order_acq_rel) + n == job->nunits)
            wake_waiters(job);      /* fs_batch_wait: every block is matched */
        if ((rc = place_queued(job, w, PLACE_READY)) != FS_OK)
            return rc;
    }
}

/* A pool worker's turn at the job (fs_pool.h): index picks its queue. */
static void worker_main(void *arg, unsigned index)
{
    fs_batch_job *job = arg;
    batch_worker *w = &job->workers[index];
    if (job_over(job))
        return;                 /* came after the work was done: nothing to set up */
    row_matcher m;
    int rc = matcher_open(&m);
    if (rc == FS_OK) {
        atomic_fetch_add_explicit(&job->claiming, 1, memory_order_relaxed);
        w->cpu_at = job->fixed ? 0 : fs_thread_cpu_ns();
        rc = worker_run(job, w, &m);
        matcher_close(job->sl, &m);
    }
    if (rc != FS_OK)
        fail(job, rc);
}

fs_batch_job *fs_batch_start(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                             int queues, int dedupe, unsigned nthreads, int64_t *row_end, uint8_t *invalid)
{
    return fs_batch_start_blocks(sl, NULL, subjects, keys, queues, dedupe, nthreads, row_end, invalid, 0,
                                 subjects->n);
}

/* A job's locks and memory, once no thread uses it (its output aside). */
static void job_free(fs_batch_job *job)
{
    fs_mutex_destroy(&job->mu);
    fs_cond_destroy(&job->more);
    fs_cond_destroy(&job->done);
    fs_cond_destroy(&job->placed);
    fs_rwlock_destroy(&job->grow);
    FS_FREE(job->slots);
    FS_FREE(job);
}

fs_batch_job *fs_batch_start_blocks(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects,
                                    const fs_strings *keys, int queues, int dedupe, unsigned nthreads,
                                    int64_t *row_end, uint8_t *invalid, size_t block_rows, size_t fed)
{
    assert(also != sl && (!also || also->dialect == sl->dialect));
    size_t n = subjects->n;
    if (fed > n)
        fed = n;
    int fixed = block_rows != 0;
    size_t unit_rows = fixed ? block_rows : UNIT_ROWS;
    size_t nunits = n / unit_rows + (n % unit_rows != 0);
    if (nthreads == 0)
        nthreads = 1;
    if (nunits && nthreads > nunits)
        nthreads = (unsigned)nunits;
    size_t size = sizeof(fs_batch_job) + nthreads * sizeof(batch_worker);
    fs_batch_job *job = FS_MALLOC(size);
    if (!job)
        return NULL;
    memset(job, 0, size);
    job->slots = FS_MALLOC((nunits ? nunits : 1) * sizeof(unit_slot));
    if (!job->slots || fs_rwlock_init(&job->grow) != 0) {
        FS_FREE(job->slots);
        FS_FREE(job);
        return NULL;
    }
    for (size_t u = 0; u < nunits; u++) {
        atomic_init(&job->slots[u].state, 0);
        job->slots[u].first = 0;
    }
    job->sl = sl;
    job->also = also;
    job->subjects = *subjects;
    if (keys) {
        job->keys = *keys;
        job->has_keys = 1;
    }
    job->queues = queues;
    job->dedupe = dedupe;
    job->fixed = fixed;
    job->nrows = n;
    job->unit_rows = unit_rows;
    job->nunits = nunits;
    job->row_end = row_end;
    job->invalid = invalid;
    atomic_init(&job->cancel, 0);
    atomic_init(&job->rc, FS_OK);
    atomic_init(&job->next_unit, 0);
    atomic_init(&job->claiming, 0);
    job->processors = fs_cpus();
    atomic_init(&job->units_done, 0);
    atomic_init(&job->fed, fed);
    fs_mutex_init(&job->mu);
    fs_cond_init(&job->more);
    fs_cond_init(&job->done);
    fs_cond_init(&job->placed);
    atomic_init(&job->sleepers, 0);
    job->nworkers = nthreads;
    for (unsigned t = 0; t < nthreads; t++) {
        job->workers[t].queue = job->workers[t].first;
        job->workers[t].cap = PENDING_BLOCKS;
        job->workers[t].blocked = SIZE_MAX;
    }
    fs_idbuf_start_kept(&job->out);     /* mapped pages: no faults where the last batch wrote */
    job->task.fn = worker_main;
    job->task.arg = job;
    if (nunits && fs_pool_submit(&job->task, nthreads) != FS_OK) {
        fs_idbuf_free(&job->out);
        job_free(job);
        return NULL;
    }
    return job;
}

int fs_batch_wait(fs_batch_job *job, unsigned timeout_ms)
{
    fs_deadline until = fs_deadline_in(timeout_ms);
    fs_mutex_lock(&job->mu);
    while (!job_over(job) && fs_cond_wait_until(&job->done, &job->mu, &until))
        ;
    int finished = job_over(job);
    fs_mutex_unlock(&job->mu);
    return finished;
}

void fs_batch_feed(fs_batch_job *job, size_t fed)
{
    fs_mutex_lock(&job->mu);
    if (fed > job->nrows)
        fed = job->nrows;
    if (fed > atomic_load_explicit(&job->fed, memory_order_relaxed))
        atomic_store_explicit(&job->fed, fed, memory_order_release);
    fs_cond_broadcast(&job->more);
    fs_mutex_unlock(&job->mu);
}

void fs_batch_cancel(fs_batch_job *job)
{
    /* Under mu: a thread waiting for rows checks cancel under it, then
     * sleeps on more, so it cannot miss this wake-up. */
    fs_mutex_lock(&job->mu);
    atomic_store(&job->cancel, 1);
    fs_cond_broadcast(&job->more);
    fs_cond_broadcast(&job->done);
    fs_cond_broadcast(&job->placed);
    fs_mutex_unlock(&job->mu);
}

int fs_batch_finish(fs_batch_job *job, fs_idbuf *out)
{
    if (job->nunits)
        fs_pool_join(&job->task);
    int rc = atomic_load(&job->rc);
    if (rc == FS_OK && atomic_load(&job->units_done) < job->nunits)
        rc = FS_ECANCELLED;          /* cancelled between blocks, with nothing failing */
    uint64_t total = 0;
    /* Every block is matched: the blocks threads left queued are placed
     * here, without waiting. */
    for (unsigned t = 0; t < job->nworkers && rc == FS_OK; t++) {
        batch_worker *w = &job->workers[t];
        rc = place_queued(job, w, PLACE_READY);
        if (rc == FS_OK && w->count)
            rc = FS_ECANCELLED;      /* cannot be: every word is written */
    }
    size_t none = SIZE_MAX;
    if (rc == FS_OK && !look_back(job, job->nunits, 0, 0, &total, &none))
        rc = FS_ECANCELLED;
    for (unsigned t = 0; t < job->nworkers; t++) {
        batch_worker *w = &job->workers[t];
        for (unsigned k = 0; k < w->cap; k++)
            fs_idbuf_free(&w->queue[k].ids);
        if (w->queue != w->first)
            FS_FREE(w->queue);
    }
    *out = job->out;
    out->n = (size_t)total;
    if (rc != FS_OK) {
        out->n = out->cap;           /* blocks were placed anywhere below cap */
        fs_idbuf_free(out);
    }
    job_free(job);
    return rc;
}
