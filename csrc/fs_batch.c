/* fs_batch.c - batch matching, on one thread or several (see fs_batch.h). */
#include "fs_batch.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_internal.h"
#include "fs_sys.h"

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
 * same order emit() gives for the built result: plain ids, then each
 * group's members (NATS: merged by name across nodes). */
static int emit_hits(const fs_sublist *sl, const fs_node *const *hits, size_t nhits, int queues,
                     uint32_t keyhash, fs_idbuf *out)
{
    for (size_t k = 0; k < nhits; k++)
        if (put(out, fs_node_ids(hits[k]), hits[k]->nsubs) < 0)
            return FS_ENOMEM;
    if (queues == FS_QUEUES_NONE)
        return FS_OK;
    const int merge = fs_hits_merge_groups(sl, hits, nhits);
    for (size_t k = 0; k < nhits; k++) {
        const fs_node *n = hits[k];
        for (uint32_t gi = 0; gi < fs_ngroups(n); gi++) {
            const fs_group *g = fs_node_group(n, gi);
            if (merge && fs_group_repeats(hits, k, g))
                continue;
            /* The group's members: g's, then (NATS) the same name's on later
             * hits; "pick" offers them all to one rendezvous choice. */
            fs_pick_best best = {0, 0, 0};
            const uint64_t seed = queues == FS_QUEUES_PICK ? fs_pick_seed(keyhash, fs_group_key(sl, n, g)) : 0;
            const fs_group *cur = g;
            size_t k2 = k;
            for (;;) {
                if (queues == FS_QUEUES_PICK) {
                    fs_pick_offer(&best, seed, cur->ids, cur->n);
                } else if (put(out, cur->ids, cur->n) < 0) {
                    return FS_ENOMEM;
                }
                cur = NULL;
                if (merge)
                    while (!cur && ++k2 < nhits)
                        if (fs_ngroups(hits[k2]))
                            cur = fs_node_find_group(hits[k2], g->name, g->name_len, g->name_hash);
                if (!cur)
                    break;
            }
            if (best.any && put(out, &best.id, 1) < 0)
                return FS_ENOMEM;
        }
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
    const char *s;
    size_t len;
    int state;
    int literal;                            /* 1: probe the literal table */
    uint64_t literal_key;
    uint64_t shapes;                        /* bit j: probe shape j */
    uint64_t keys[FS_SHAPE_MAX_PROBES];     /* in bit order */
} row_plan;

typedef struct {
    row_plan row[BLOCK_ROWS];
    fs_tokens toks[BLOCK_ROWS];
    uint32_t hash[BLOCK_ROWS];              /* with a cache: the subjects' (its key) */
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
        row_plan *r = &b->row[k];
        r->state = fs_strings_get(subjects, i + k, &r->s, &r->len) ? ROW_OK : ROW_NULL;
        b->hash[k] = r->state == ROW_OK ? fs_hash(r->s, r->len) : 0;
    }
    fs_cache_prefetch_heads(sl->cache, b->hash, n);
}

static int plan_rows(const fs_sublist *sl, const fs_strings *subjects, size_t i, size_t n, block *b)
{
    const fs_shapes *S = &sl->shapes;
    const fs_level *lit = &sl->literals;
    int mqtt = sl->dialect == FS_MQTT;
    for (size_t k = 0; k < n; k++) {
        row_plan *r = &b->row[k];
        fs_tokens *t = &b->toks[k];
        r->shapes = 0;
        r->literal = 0;
        r->state = ROW_NULL;
        if (!fs_strings_get(subjects, i + k, &r->s, &r->len))
            continue;
        fs_error err;
        int rc = fs_tokenize(sl->dialect, r->s, r->len, 0, t, &err);
        if (rc == FS_ENOMEM)
            return rc;
        if (rc < 0) {
            r->state = ROW_INVALID;
            continue;
        }
        r->state = ROW_OK;
        uint32_t nt = t->n;
        uint64_t bits = S->probe[nt > FS_SHAPE_MAX_TOKENS ? FS_SHAPE_MAX_TOKENS + 1 : nt];
        if (mqtt && r->s[0] == '$')
            for (uint64_t w = bits; w; w &= w - 1)
                if (S->shape[fs_ctz64(w)]->first_wild)
                    bits &= ~(1ull << fs_ctz64(w));
        if (!bits && !lit->count)
            continue;
        uint32_t need = nt < FS_SHAPE_MAX_TOKENS ? nt : FS_SHAPE_MAX_TOKENS;
        uint64_t m[FS_SHAPE_MAX_TOKENS], P[FS_SHAPE_MAX_TOKENS + 1];
        fs_shape_mixes(t->tok, need, m, P);
        if (lit->count) {
            uint64_t key = fs_tokens_key(t->tok, need, nt, P[need]);
            r->literal_key = key;
            r->literal = fs_level_may_hold(lit, key);
            if (r->literal)
                FS_PREFETCH(&lit->slots[(uint32_t)key & (lit->cap - 1)]);
        }
        /* Only the probes the shape's bitmap lets through go on: most
         * stop here, without touching their table. */
        uint32_t q = 0;
        uint64_t probe = 0;        /* set on a pass: most shapes are refused */
        for (uint64_t w = bits; w; w &= w - 1) {
            const fs_shape *sh = S->shape[fs_ctz64(w)];
            uint64_t key = fs_shape_subject_key(sh, m, P);
            if (!fs_level_may_hold(&sh->table, key))
                continue;
            probe |= w & (0 - w);
            r->keys[q++] = key;
            FS_PREFETCH(&sh->table.slots[(uint32_t)key & (sh->table.cap - 1)]);
        }
        r->shapes = probe;
    }
    return FS_OK;
}

static void fetch_entries(const fs_sublist *sl, size_t n, const block *b)
{
    const fs_shapes *S = &sl->shapes;
    const fs_level *lit = &sl->literals;
    for (size_t k = 0; k < n; k++) {
        const row_plan *r = &b->row[k];
        if (r->state != ROW_OK)
            continue;
        if (r->literal) {
            const fs_slot *e = &lit->slots[(uint32_t)r->literal_key & (lit->cap - 1)];
            if (e->node && e->hash == (uint32_t)r->literal_key)
                FS_PREFETCH(e->node);
        }
        uint32_t q = 0;
        for (uint64_t w = r->shapes; w; w &= w - 1, q++) {
            const fs_level *L = &S->shape[fs_ctz64(w)]->table;
            const fs_slot *e = &L->slots[(uint32_t)r->keys[q] & (L->cap - 1)];
            if (e->node && e->hash == (uint32_t)r->keys[q]) {
                FS_PREFETCH(e->node);
                FS_PREFETCH((const char *)e->node + 64);
            }
        }
    }
}

/* The matched nodes of a planned row, into sc->hits. */
static int collect_row(const fs_sublist *sl, const row_plan *r, const fs_tokens *t, fs_scratch *sc)
{
    const fs_shapes *S = &sl->shapes;
    const char *end = r->s + r->len;
    char sep = fs_sep(sl->dialect);
    sc->nhits = 0;
    if (r->literal) {
        const fs_node *e = fs_keyed_find(&sl->literals, r->literal_key, r->s, (uint32_t)r->len, end);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
    }
    uint32_t q = 0;
    for (uint64_t w = r->shapes; w; w &= w - 1, q++) {
        const fs_node *e = fs_shape_probe_slots(S->shape[fs_ctz64(w)], r->keys[q], sep, r->s, t->tok, end);
        if (e && fs_push_node(&sc->hits, &sc->nhits, &sc->cap_hits, e) < 0)
            return FS_ENOMEM;
    }
    return fs_trie_walk_locked(sl, r->s, t, sc);
}

int fs_match_rows(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                  size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                  uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel)
{
    fs_workspace spare;
    fs_workspace *w = fs_workspace_acquire(&spare);
    if (!w)
        return FS_ENOMEM;
    int amqp = sl->dialect == FS_AMQP;
    if (amqp)
        dedupe = 1;          /* AMQP delivers once per sub_id: the rule, not an option */
    int rc = FS_OK;
    uint64_t matched = 0, fanout = 0, fanout_max = 0;
    block *b = FS_MALLOC(sizeof(block));
    fs_idbuf set = {0};
    fs_cache_tally tally = {0, 0};
    if (!b) {
        fs_workspace_release(w, &spare);
        return FS_ENOMEM;
    }
    for (size_t k = 0; k < BLOCK_ROWS; k++)
        fs_tokens_init(&b->toks[k]);
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
            } else {
                rc = plan_rows(sl, subjects, i, nblock, b);
                if (rc < 0)
                    break;
                fetch_entries(sl, nblock, b);
            }
            for (size_t k = 0; k < nblock && rc == FS_OK; k++, i++) {
                row_plan *r = &b->row[k];
                size_t before = out->n;
                invalid[i - begin] = r->state != ROW_OK;
                if (r->state != ROW_OK) {
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
                    const fs_result *cached = fs_cache_get(sl->cache, r->s, r->len, b->hash[k], &tally);
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
                    rc = collect_row(sl, r, &b->toks[k], &w->sc);
                    if (rc == FS_OK && amqp && queues != FS_QUEUES_NONE && any_groups(&w->sc)) {
                        /* AMQP picks among deduplicated members, as the
                         * built (and cached) result has them. */
                        rc = fs_build_result(sl, &w->sc, &w->r);
                        if (rc == FS_OK)
                            rc = emit(&w->r, queues, keyhash, 0, out);
                    } else if (rc == FS_OK) {
                        rc = emit_hits(sl, w->sc.hits, w->sc.nhits, queues, keyhash, out);
                    }
                }
                if (rc != FS_OK)
                    break;
                /* Only when the row emitted: with nothing emitted yet, out->ids may be
                 * NULL, and NULL + 0 is undefined. */
                if (dedupe && out->n > before) {
                    size_t m = out->n - before;
                    if ((rc = fs_ids_dedupe(out->ids + before, &m, &set.ids, &set.cap)) != FS_OK)
                        break;
                    out->n = before + m;
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
    for (size_t k = 0; k < BLOCK_ROWS; k++)
        fs_tokens_free(&b->toks[k]);
    FS_FREE(b);
    set.n = set.cap;            /* a hash set: any of its slots may be written */
    fs_idbuf_free(&set);
    fs_count_matches(sl, matched, fanout, fanout_max);
    fs_workspace_release(w, &spare);
    return rc;
}

/* ------------------------------------------------------------ threads */

typedef struct {
    struct fs_batch_job *job;
    fs_thread thread;
    int started;
    size_t begin, end;
    fs_idbuf out;
    size_t dest;          /* where this part's ids go in the job's output */
    int rc;
} batch_part;

struct fs_batch_job {
    fs_sublist *sl;
    fs_strings subjects, keys;
    int has_keys, queues, dedupe;
    int64_t *row_end;
    uint8_t *invalid;
    atomic_int cancel;
    fs_mutex mu;
    fs_cond done;
    unsigned running, nparts, nstarted, matched;
    /* The output: the first part's buffer, grown to the total once every
     * part has matched; then each other thread copies its own ids in --
     * in parallel, never one thread concatenating them all after the
     * others have stopped, and the first part's ids never move (heavy
     * returns hundreds of MB: a copy of them all, into fresh pages, cost
     * threads=2 most of its gain). */
    int gathered, gather_rc;
    fs_idbuf out;
    batch_part parts[];
};

/* Called with job->mu held by the last part to finish matching (or by
 * fs_batch_finish when no thread ran): size the output. */
static void gather_locked(fs_batch_job *job)
{
    int rc = FS_OK;
    size_t total = 0;
    for (unsigned t = 0; t < job->nparts; t++) {
        batch_part *p = &job->parts[t];
        if (p->rc == FS_ENOMEM || (p->rc != FS_OK && rc == FS_OK))
            rc = p->rc;
        p->dest = total;
        total += p->out.n;
    }
    if (rc == FS_OK && total) {
        fs_idbuf *first = &job->parts[0].out;
        if (fs_idbuf_reserve(first, total) == FS_OK) {
            job->out = (fs_idbuf){first->ids, total, first->cap};
            *first = (fs_idbuf){NULL, 0, 0};     /* its ids are in place */
        } else {
            rc = FS_ENOMEM;
        }
    }
    job->gather_rc = rc;
    job->gathered = 1;
    fs_cond_broadcast(&job->done);
}

/* Move a part's ids to their place in the output and make its row ends
 * global. */
static void place_part(fs_batch_job *job, batch_part *p)
{
    if (p->out.n)
        memcpy(job->out.ids + p->dest, p->out.ids, sizeof(int64_t) * p->out.n);
    if (p->dest)
        for (size_t i = p->begin; i < p->end; i++)
            job->row_end[i] += (int64_t)p->dest;
    fs_idbuf_free(&p->out);
}

static void part_main(void *arg)
{
    batch_part *p = arg;
    fs_batch_job *job = p->job;
    p->rc = fs_match_rows(job->sl, &job->subjects, job->has_keys ? &job->keys : NULL,
                          p->begin, p->end, job->queues, job->dedupe, job->row_end + p->begin,
                          job->invalid + p->begin, &p->out, &job->cancel);
    fs_mutex_lock(&job->mu);
    if (++job->matched == job->nstarted)
        gather_locked(job);
    while (!job->gathered)
        fs_cond_wait(&job->done, &job->mu);
    int ok = job->gather_rc == FS_OK;
    fs_mutex_unlock(&job->mu);
    if (ok)
        place_part(job, p);
    fs_mutex_lock(&job->mu);
    job->running--;
    fs_cond_broadcast(&job->done);
    fs_mutex_unlock(&job->mu);
}

fs_batch_job *fs_batch_start(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                             int queues, int dedupe, unsigned nthreads, int64_t *row_end, uint8_t *invalid)
{
    size_t n = subjects->n;
    if (nthreads == 0)
        nthreads = 1;
    fs_batch_job *job = FS_MALLOC(sizeof(fs_batch_job) + nthreads * sizeof(batch_part));
    if (!job)
        return NULL;
    memset(job, 0, sizeof(fs_batch_job) + nthreads * sizeof(batch_part));
    job->sl = sl;
    job->subjects = *subjects;
    if (keys) {
        job->keys = *keys;
        job->has_keys = 1;
    }
    job->queues = queues;
    job->dedupe = dedupe;
    job->row_end = row_end;
    job->invalid = invalid;
    atomic_init(&job->cancel, 0);
    fs_mutex_init(&job->mu);
    fs_cond_init(&job->done);
    job->nparts = nthreads;
    fs_idbuf_start_kept(&job->parts[0].out);     /* the first part's buffer becomes the output */
    for (unsigned t = 0; t < nthreads; t++) {
        batch_part *p = &job->parts[t];
        p->job = job;
        p->begin = n * t / nthreads;
        p->end = n * (t + 1) / nthreads;
    }
    fs_mutex_lock(&job->mu);
    for (unsigned t = 0; t < nthreads; t++) {
        batch_part *p = &job->parts[t];
        job->running++;
        if (fs_thread_start(&p->thread, part_main, p) != 0) {
            job->running--;
            p->rc = FS_ENOMEM;
            atomic_store(&job->cancel, 1);
            break;
        }
        p->started = 1;
        job->nstarted++;
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

void fs_batch_cancel(fs_batch_job *job) { atomic_store(&job->cancel, 1); }

int fs_batch_finish(fs_batch_job *job, fs_idbuf *out)
{
    for (unsigned t = 0; t < job->nparts; t++)
        if (job->parts[t].started)
            fs_thread_join(&job->parts[t].thread);
    if (!job->gathered)              /* no thread ran: they could not be started */
        gather_locked(job);
    int rc = job->gather_rc;
    *out = job->out;
    if (rc != FS_OK)
        fs_idbuf_free(out);
    for (unsigned t = 0; t < job->nparts; t++)
        fs_idbuf_free(&job->parts[t].out);
    fs_mutex_destroy(&job->mu);
    fs_cond_destroy(&job->done);
    FS_FREE(job);
    return rc;
}
