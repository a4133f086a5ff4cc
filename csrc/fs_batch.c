/* fs_batch.c - batch matching, on one thread or several (see fs_batch.h). */
#include "fs_batch.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_internal.h"
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

/* Emit a row from a built (or cached) result.  by_subject: the row's pick
 * key is its subject and r's subject_pick are filled (fs_compute_locked):
 * the picks are read, not recomputed over every member. */
FS_ALWAYS_INLINE int emit(const fs_result *r, int queues, uint32_t keyhash, int by_subject,
                          fs_idbuf *out)
{
    size_t extra = queues == FS_QUEUES_ALL ? r->nids - r->nplain
                 : queues == FS_QUEUES_PICK ? r->ngroups : 0;
    if (r->nplain + extra == 0)   /* out->ids may still be NULL: no NULL + 0 */
        return FS_OK;
    if (fs_idbuf_room(out, r->nplain + extra) < 0)
        return FS_ENOMEM;
    int64_t *dst = out->ids + out->n;
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
    out->n = (size_t)(dst - out->ids);
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

/* Emit a row straight from the matched nodes (no cache to fill), in the
 * order emit() gives for the built result (fs_result.h): the plain ids,
 * then each merged group's members (fs_walk.h), groups in the order
 * fs_row_groups gives them. */
static int emit_hits(const fs_sublist *sl, fs_scratch *sc, int queues, uint32_t keyhash, fs_idbuf *out)
{
    const fs_node *const *hits = sc->hits;
    size_t nhits = sc->nhits;
    size_t nplain = 0;
    int grouped = 0;                 /* most rows have no groups: no call for them */
    for (size_t k = 0; k < nhits; k++) {
        nplain += hits[k]->nsubs;
        grouped |= hits[k]->groups != NULL;
    }
    if (nplain) {
        if (fs_idbuf_room(out, nplain) < 0)
            return FS_ENOMEM;
        out->n += fs_hits_plain(hits, nhits, out->ids + out->n);
    }
    if (queues == FS_QUEUES_NONE || !grouped)
        return FS_OK;
    size_t nrefs;
    if (fs_row_groups(sl, sc, &nrefs) < 0)
        return FS_ENOMEM;
    for (size_t j = 0, end; j < nrefs; j = end) {
        end = fs_row_group_end(sl, sc, j, nrefs);
        const fs_node *n = hits[sc->grefs[j].hit];
        if (queues == FS_QUEUES_PICK) {
            /* one rendezvous choice over every part's members */
            fs_pick_best best = {0, 0, 0};
            const uint64_t seed = fs_pick_seed(keyhash, fs_group_key(sl, n, fs_node_group(n, sc->grefs[j].group)));
            for (size_t p = j; p < end; p++) {
                const fs_group *part = fs_node_group(hits[sc->grefs[p].hit], sc->grefs[p].group);
                fs_pick_offer(&best, seed, part->ids, part->n);
            }
            if (put(out, &best.id, 1) < 0)
                return FS_ENOMEM;
            continue;
        }
        fs_runs runs = {0, 0};
        for (size_t p = j; p < end; p++) {
            const fs_group *part = fs_node_group(hits[sc->grefs[p].hit], sc->grefs[p].group);
            if (fs_idbuf_room(out, runs.n + part->n) < 0)
                return FS_ENOMEM;
            fs_runs_add(&runs, out->ids + out->n, part->ids, part->n);
        }
        fs_runs_end(&runs, out->ids + out->n);
        out->n += runs.n;
    }
    return FS_OK;
}

static int any_groups(const fs_scratch *sc)
{
    for (size_t k = 0; k < sc->nhits; k++)
        if (fs_ngroups(sc->hits[k]))
            return 1;
    return 0;
}

/* ------------------------------------------------------- the pipeline */

/* A block of rows goes through three passes, so that the memory each
 * needs is requested for the whole block before any row waits on it:
 *   plan:   tokenize, hash, compute every shape key; prefetch the slots
 *   fetch:  the slots have arrived: prefetch the entries they point to
 *   match:  verify the entries (now cached), walk the trie, emit
 * BLOCK_ROWS was measured, not guessed: builds with FASTSUB_BLOCK_ROWS=N
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
    fs_tokens toks[BLOCK_ROWS];
    int state[BLOCK_ROWS];
    uint32_t hash[BLOCK_ROWS];              /* with a cache: the subjects' (its key) */
    const fs_cache_bucket *bucket[BLOCK_ROWS];  /* and their buckets */
} block;

/* With a cache, a block's plan is the rows' subjects and hashes, and the
 * entries their buckets point to are prefetched, so a hit finds its entry
 * in L1 (hot1k, cache_size=4096, 50,000 rows, one thread, interleaved
 * medians: 52.6-53.5 -> 47.0-47.8 ns/subject; prefetching the buckets
 * first as well gained nothing: 46.3-47.5). */
static void plan_cached_rows(const fs_sublist *sl, const fs_strings *subjects, size_t i, size_t n,
                             block *b)
{
    for (size_t k = 0; k < n; k++) {
        fs_walk_row *r = &b->plan[k];
        b->state[k] = fs_strings_get(subjects, i + k, &r->s, &r->len) ? ROW_OK : ROW_NULL;
        b->hash[k] = b->state[k] == ROW_OK ? fs_hash(r->s, r->len) : 0;
    }
    fs_cache_buckets(sl->cache, b->hash, n, b->bucket);
}

/* The walk's plan and fetch steps over a block of rows (fs_walk.h). */
static int plan_rows(const fs_sublist *sl, const fs_strings *subjects, size_t i, size_t n, block *b)
{
    for (size_t k = 0; k < n; k++) {
        const char *s;
        size_t len;
        b->state[k] = ROW_NULL;
        if (!fs_strings_get(subjects, i + k, &s, &len))
            continue;
        fs_error err;
        int rc = fs_walk_plan(sl, s, len, &b->toks[k], &b->plan[k], &err);
        if (rc == FS_ENOMEM)
            return rc;
        b->state[k] = rc < 0 ? ROW_INVALID : ROW_OK;
    }
    for (size_t k = 0; k < n; k++)
        if (b->state[k] == ROW_OK)
            fs_walk_fetch(sl, &b->plan[k]);
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
    return FS_OK;
}

static void matcher_close(fs_sublist *sl, row_matcher *m)
{
    for (size_t k = 0; k < BLOCK_ROWS; k++)
        fs_tokens_free(&m->b->toks[k]);
    FS_FREE(m->b);
    m->set.n = m->set.cap;      /* a hash set: any of its slots may be written */
    fs_idbuf_free(&m->set);
    fs_count_matches(sl, m->matched, m->fanout, m->fanout_max);
    fs_workspace_release(m->w, &m->spare);
}

/* fs_match_rows' work, with the set-up done. */
static int matcher_run(row_matcher *m, fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                       size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                       uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel)
{
    fs_workspace *w = m->w;
    block *b = m->b;
    int once = fs_rules(sl->dialect)->once_per_id;
    if (once)
        dedupe = 1;          /* AMQP delivers once per sub_id: the rule, not an option */
    int rc = FS_OK;
    fs_cache_tally tally = {0, 0};
    uint64_t matched = 0, fanout = 0, fanout_max = 0;   /* into m's at the end */
    size_t i = begin;
    while (i < end && rc == FS_OK) {
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed)) {
            rc = FS_ECANCELLED;
            break;
        }
        size_t stop = end - i > ROWS_PER_LOCK ? i + ROWS_PER_LOCK : end;
        fs_rwlock_rdlock(&sl->lock);
        int cached_index = sl->cache != NULL;
        while (i < stop && rc == FS_OK) {
            size_t nblock = stop - i > BLOCK_ROWS ? BLOCK_ROWS : stop - i;
            if (cached_index) {
                plan_cached_rows(sl, subjects, i, nblock, b);
            } else if ((rc = plan_rows(sl, subjects, i, nblock, b)) < 0) {
                break;
            }
            for (size_t k = 0; k < nblock && rc == FS_OK; k++, i++) {
                const fs_walk_row *r = &b->plan[k];
                size_t before = out->n;
                invalid[i - begin] = b->state[k] != ROW_OK;
                if (b->state[k] != ROW_OK) {
                    row_end[i - begin] = (int64_t)out->n;
                    continue;
                }
                /* Queue picks hash the row's key: its own, or the subject
                 * (the cache's key; without a cache, hashed for picks alone). */
                const char *key;
                size_t klen;
                uint32_t keyhash = 0;
                int keyed = 0;
                if (queues == FS_QUEUES_PICK) {
                    keyed = keys && fs_strings_get(keys, i, &key, &klen);
                    keyhash = keyed ? fs_hash(key, klen)
                            : cached_index ? b->hash[k] : fs_hash(r->s, r->len);
                }
                if (cached_index) {
                    const fs_result *cached = fs_cache_get_from(b->bucket[k], r->s, r->len,
                                                                b->hash[k], &tally);
                    if (cached) {
                        rc = emit(cached, queues, keyhash, !keyed, out);
                    } else {
                        fs_error err;
                        rc = fs_compute_locked(sl, r->s, r->len, b->hash[k], &w->sc, &w->r, &err);
                        if (rc == FS_OK)
                            rc = emit(&w->r, queues, keyhash, !keyed, out);
                        if (rc == FS_EINVAL) {
                            invalid[i - begin] = 1;
                            rc = FS_OK;
                        }
                    }
                } else {
                    rc = fs_walk_collect(sl, r, &b->toks[k], &w->sc, 0);
                    if (rc == FS_OK && once && queues != FS_QUEUES_NONE && any_groups(&w->sc)) {
                        /* AMQP picks among deduplicated members, as the
                         * built (and cached) result has them. */
                        rc = fs_build_result(sl, &w->sc, &w->r);
                        if (rc == FS_OK)
                            rc = emit(&w->r, queues, keyhash, 0, out);
                    } else if (rc == FS_OK) {
                        rc = emit_hits(sl, &w->sc, queues, keyhash, out);
                    }
                }
                if (rc != FS_OK)
                    break;
                /* Only when the row emitted: with nothing emitted yet, out->ids may be
                 * NULL, and NULL + 0 is undefined. */
                if (dedupe && out->n > before) {
                    size_t kept = out->n - before;
                    if ((rc = fs_ids_dedupe(out->ids + before, &kept, &m->set.ids, &m->set.cap)) != FS_OK)
                        break;
                    out->n = before + kept;
                }
                row_end[i - begin] = (int64_t)out->n;
                if (!invalid[i - begin]) {
                    uint64_t f = out->n - before;
                    matched++;
                    fanout += f;
                    if (f > fanout_max) fanout_max = f;
                }
            }
        }
        fs_read_done(sl, &tally);
        tally = (fs_cache_tally){0, 0};
    }
    m->matched += matched;
    m->fanout += fanout;
    if (fanout_max > m->fanout_max)
        m->fanout_max = fanout_max;
    return rc;
}

int fs_match_rows(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                  size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                  uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel)
{
    row_matcher m;
    if (matcher_open(&m) != FS_OK)
        return FS_ENOMEM;
    int rc = matcher_run(&m, sl, subjects, keys, begin, end, queues, dedupe, row_end, invalid, out, cancel);
    matcher_close(sl, &m);
    return rc;
}

/* ------------------------------------------------------------ threads
 *
 * The rows are cut into blocks of THREAD_BLOCK_ROWS, which the threads
 * claim one at a time (a thread that drew cheap rows takes more of them).
 * A thread matches a block into a small buffer of its own, which stays in
 * its cache, then reserves the block's place in the output -- in block
 * order, since the output is the blocks' ids one after another -- and
 * copies the ids there.  So the output is written once, by all the
 * threads at the same time, into one buffer (usually the pool's kept
 * one, whose pages are mapped already), and row ends are global as soon
 * as they are written.
 *
 * What it replaced: each thread matched a contiguous half into a buffer
 * of its own, grown through fresh pages, and the halves were then copied
 * into one.  On heavy (~650 MB of ids) the second half's page faults and
 * that copy made threads=2 0.36-0.73x as fast as one thread.
 *
 * A block whose turn to reserve has not come waits in its thread's queue
 * (PENDING_BLOCKS) while the thread matches the next one: a thread stops
 * only when its queue is full, and then only until the one block before
 * its oldest is placed.
 *
 * The caller may still be filling the column when the threads start
 * (fs_batch_feed): a block is matched only once its rows are fed.  A
 * Python list's strings are converted under the interpreter lock, one
 * thread's work; fed as they are converted, the threads match the first
 * rows while the rest are converted, instead of after all of them.
 */
/* 1,024 rows: measured against 256 and 2,048 (1M-row Arrow batches, medians,
 * threads=2 / 1): hot1k cached 1.54-1.59x / 1.81-1.84x / 1.71-1.74x, heavy
 * 1.68-1.76x / 1.83-1.87x / 1.77-1.80x.  Smaller blocks pay the per-block
 * lock, tally and reservation too often for cheap rows; bigger ones
 * outgrow the L2 with heavy's ids (~650 bytes a row).
 * fs_batch_start_blocks can ask for other sizes. */
#define THREAD_BLOCK_ROWS 1024
#define PENDING_BLOCKS 4

typedef struct {
    size_t block;
    fs_idbuf ids;
} pending_block;

typedef struct {
    struct fs_batch_job *job;
    fs_thread thread;
    int started;
    pending_block queue[PENDING_BLOCKS];     /* a ring: head, then count */
    unsigned head, count;
} batch_worker;

struct fs_batch_job {
    fs_sublist *sl;
    fs_strings subjects, keys;
    int has_keys, queues, dedupe;
    size_t nrows, nblocks, block_rows;
    int64_t *row_end;
    uint8_t *invalid;
    atomic_int cancel;
    atomic_size_t next_block;      /* the next block to claim */
    atomic_size_t fed;             /* rows [0, fed) may be read; written under mu */
    fs_mutex mu;                   /* guards what follows, up to grow */
    fs_cond turn;                  /* a place was reserved, or the job failed */
    fs_cond more;                  /* more rows were fed, or the job was cancelled */
    fs_cond done;                  /* a worker ended (fs_batch_wait) */
    size_t next_reserve;           /* the block whose place is reserved next */
    size_t reserved;               /* ids placed so far: that block's offset */
    int rc;                        /* the first error, FS_OK */
    unsigned running;
    fs_rwlock grow;                /* copies into out share it; growing out takes it alone */
    fs_idbuf out;
    unsigned nworkers;
    batch_worker workers[];
};

/* Block b's rows: [*begin, *end). */
static void block_span(const fs_batch_job *job, size_t b, size_t *begin, size_t *end)
{
    *begin = b * job->block_rows;
    *end = *begin + job->block_rows < job->nrows ? *begin + job->block_rows : job->nrows;
}

static void fail_locked(fs_batch_job *job, int rc)
{
    if (job->rc == FS_OK)
        job->rc = rc;
    atomic_store_explicit(&job->cancel, 1, memory_order_relaxed);
    fs_cond_broadcast(&job->turn);
    fs_cond_broadcast(&job->more);
}

/* Copy a block's ids to their place, offset off, growing the output first
 * if they do not fit; make its row ends global. */
static int place_block(fs_batch_job *job, const pending_block *p, size_t off)
{
    size_t n = p->ids.n, need = off + n;
    fs_rwlock_rdlock(&job->grow);
    while (job->out.cap < need) {
        fs_rwlock_rdunlock(&job->grow);
        fs_rwlock_wrlock(&job->grow);
        int rc = FS_OK;
        if (job->out.cap < need) {
            /* Keep what was placed: everything reserved lies below
             * job->reserved (mu is never held around taking grow). */
            fs_mutex_lock(&job->mu);
            size_t placed = job->reserved;
            fs_mutex_unlock(&job->mu);
            job->out.n = placed < job->out.cap ? placed : job->out.cap;
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
        block_span(job, p->block, &begin, &end);
        for (size_t i = begin; i < end; i++)
            job->row_end[i] += (int64_t)off;
    }
    return FS_OK;
}

enum { FLUSH_READY, FLUSH_ROOM, FLUSH_ALL };

/* Place the worker's queued blocks whose turn has come.  FLUSH_READY
 * places what it can without waiting; FLUSH_ROOM waits, when the queue is
 * full, until it can place one; FLUSH_ALL waits until the queue is empty. */
static int flush_queue(fs_batch_job *job, batch_worker *w, int how)
{
    fs_mutex_lock(&job->mu);
    while (w->count) {
        pending_block *p = &w->queue[w->head];
        if (job->rc != FS_OK) {
            int rc = job->rc;
            fs_mutex_unlock(&job->mu);
            return rc;
        }
        if (job->next_reserve != p->block) {
            if (how == FLUSH_ALL || (how == FLUSH_ROOM && w->count == PENDING_BLOCKS)) {
                fs_cond_wait(&job->turn, &job->mu);
                continue;
            }
            break;
        }
        size_t off = job->reserved;
        job->reserved += p->ids.n;
        job->next_reserve++;
        fs_cond_broadcast(&job->turn);
        fs_mutex_unlock(&job->mu);
        int rc = place_block(job, p, off);
        fs_mutex_lock(&job->mu);
        if (rc != FS_OK) {
            fail_locked(job, rc);
            fs_mutex_unlock(&job->mu);
            return rc;
        }
        w->head = (w->head + 1) % PENDING_BLOCKS;
        w->count--;
    }
    fs_mutex_unlock(&job->mu);
    return FS_OK;
}

/* Wait until rows [0, end) are fed; FS_ECANCELLED if the job is cancelled
 * first. */
static int wait_fed(fs_batch_job *job, size_t end)
{
    if (atomic_load_explicit(&job->fed, memory_order_acquire) >= end)
        return FS_OK;
    int rc = FS_OK;
    fs_mutex_lock(&job->mu);
    while (atomic_load_explicit(&job->fed, memory_order_relaxed) < end) {
        if (atomic_load_explicit(&job->cancel, memory_order_relaxed)) {
            rc = FS_ECANCELLED;
            break;
        }
        fs_cond_wait(&job->more, &job->mu);
    }
    fs_mutex_unlock(&job->mu);
    return rc;
}

static int worker_run(fs_batch_job *job, batch_worker *w, row_matcher *m)
{
    const fs_strings *keys = job->has_keys ? &job->keys : NULL;
    for (;;) {
        int rc = flush_queue(job, w, FLUSH_ROOM);
        if (rc != FS_OK)
            return rc;
        if (atomic_load_explicit(&job->cancel, memory_order_relaxed))
            return FS_ECANCELLED;
        size_t b = atomic_fetch_add_explicit(&job->next_block, 1, memory_order_relaxed);
        if (b >= job->nblocks)
            return flush_queue(job, w, FLUSH_ALL);
        pending_block *p = &w->queue[(w->head + w->count) % PENDING_BLOCKS];
        size_t begin, end;
        block_span(job, b, &begin, &end);
        if ((rc = wait_fed(job, end)) != FS_OK)
            return rc;
        p->block = b;
        p->ids.n = 0;
        rc = matcher_run(m, job->sl, &job->subjects, keys, begin, end, job->queues, job->dedupe,
                         job->row_end + begin, job->invalid + begin, &p->ids, &job->cancel);
        if (rc != FS_OK)
            return rc;
        w->count++;
        if ((rc = flush_queue(job, w, FLUSH_READY)) != FS_OK)
            return rc;
    }
}

static void worker_main(void *arg)
{
    batch_worker *w = arg;
    fs_batch_job *job = w->job;
    row_matcher m;
    int rc = matcher_open(&m);
    if (rc == FS_OK) {
        rc = worker_run(job, w, &m);
        matcher_close(job->sl, &m);
    }
    for (unsigned k = 0; k < PENDING_BLOCKS; k++)
        fs_idbuf_free(&w->queue[k].ids);
    fs_mutex_lock(&job->mu);
    if (rc != FS_OK)
        fail_locked(job, rc);
    job->running--;
    fs_cond_broadcast(&job->done);
    fs_mutex_unlock(&job->mu);
}

fs_batch_job *fs_batch_start(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                             int queues, int dedupe, unsigned nthreads, int64_t *row_end, uint8_t *invalid)
{
    return fs_batch_start_blocks(sl, subjects, keys, queues, dedupe, nthreads, row_end, invalid, 0,
                                 subjects->n);
}

fs_batch_job *fs_batch_start_blocks(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                                    int queues, int dedupe, unsigned nthreads, int64_t *row_end,
                                    uint8_t *invalid, size_t block_rows, size_t fed)
{
    size_t n = subjects->n;
    if (fed > n)
        fed = n;
    if (block_rows == 0)
        block_rows = THREAD_BLOCK_ROWS;
    size_t nblocks = n / block_rows + (n % block_rows != 0);
    if (nthreads == 0)
        nthreads = 1;
    if (nblocks && nthreads > nblocks)
        nthreads = (unsigned)nblocks;
    size_t size = sizeof(fs_batch_job) + nthreads * sizeof(batch_worker);
    fs_batch_job *job = FS_MALLOC(size);
    if (!job)
        return NULL;
    memset(job, 0, size);
    if (fs_rwlock_init(&job->grow) != 0) {
        FS_FREE(job);
        return NULL;
    }
    job->sl = sl;
    job->subjects = *subjects;
    if (keys) {
        job->keys = *keys;
        job->has_keys = 1;
    }
    job->queues = queues;
    job->dedupe = dedupe;
    job->nrows = n;
    job->nblocks = nblocks;
    job->block_rows = block_rows;
    job->row_end = row_end;
    job->invalid = invalid;
    job->rc = FS_OK;
    atomic_init(&job->cancel, 0);
    atomic_init(&job->next_block, 0);
    atomic_init(&job->fed, fed);
    fs_mutex_init(&job->mu);
    fs_cond_init(&job->turn);
    fs_cond_init(&job->more);
    fs_cond_init(&job->done);
    job->nworkers = nthreads;
    fs_idbuf_start_kept(&job->out);     /* mapped pages: no faults where the last batch wrote */
    fs_mutex_lock(&job->mu);
    for (unsigned t = 0; t < nthreads; t++) {
        batch_worker *w = &job->workers[t];
        w->job = job;
        job->running++;
        if (fs_thread_start(&w->thread, worker_main, w) != 0) {
            job->running--;
            /* The blocks are claimed, not assigned: the threads that did
             * start match them all.  None at all: fail. */
            if (t == 0)
                fail_locked(job, FS_ENOMEM);
            break;
        }
        w->started = 1;
    }
    fs_mutex_unlock(&job->mu);
    return job;
}

int fs_batch_wait(fs_batch_job *job, unsigned timeout_ms)
{
    fs_deadline until = fs_deadline_in(timeout_ms);
    fs_mutex_lock(&job->mu);
    while (job->running && fs_cond_wait_until(&job->done, &job->mu, &until))
        ;
    int finished = job->running == 0;
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
    fs_mutex_unlock(&job->mu);
}

int fs_batch_finish(fs_batch_job *job, fs_idbuf *out)
{
    for (unsigned t = 0; t < job->nworkers; t++)
        if (job->workers[t].started)
            fs_thread_join(&job->workers[t].thread);
    int rc = job->rc;
    if (rc == FS_OK && job->next_reserve < job->nblocks)
        rc = FS_ECANCELLED;          /* cancelled between blocks, with nothing failing */
    *out = job->out;
    out->n = job->reserved;
    if (rc != FS_OK)
        fs_idbuf_free(out);
    fs_mutex_destroy(&job->mu);
    fs_cond_destroy(&job->turn);
    fs_cond_destroy(&job->more);
    fs_cond_destroy(&job->done);
    fs_rwlock_destroy(&job->grow);
    FS_FREE(job);
    return rc;
}
