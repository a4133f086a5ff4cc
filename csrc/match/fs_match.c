/* fs_match.c - the read side of the index for one subject: match,
 * num_interest and has_interest.  A subject is looked up in the result
 * cache, else tokenized and answered by the literal table, the shape
 * tables (fs_shape.c) and the trie (fs_trie.c), whose hits fs_result.c
 * turns into a result.  The walk is fs_walk.h's, which the batch matcher
 * (fs_batch.c) shares. */
#include "fs_match.h"

#include <stdatomic.h>

#include "fs_cache.h"
#include "fs_index.h"
#include "fs_sys.h"

#include <string.h>
#include "fs_walk.h"

/* The walk (fs_walk.h) of one subject: tokenize it into sc->toks, then
 * collect into sc->hits every node whose subscriptions match it (first_only:
 * at least one, if any).  Caller holds the read lock.  (A call, not
 * inline, in fs_sublist_match_small too: inlined there it cost ~15
 * instructions a match more, callgrind, light.) */
static int walk_locked(const fs_sublist *sl, const char *s, size_t len, fs_scratch *sc,
                       int first_only, fs_error *err)
{
    fs_walk_row p;
    int rc = fs_walk_plan(sl, NULL, s, len, &sc->toks, &p, NULL, err);
    if (rc == FS_OK)
        rc = fs_walk_collect(sl, &p, &sc->toks, sc, first_only);
    return rc;
}

/* Into the calling thread's stripe sp (fs_brlock.h): a line no other
 * thread writes (unless more than FS_STRIPES threads match), so match()
 * from many threads shares nothing here.  stats() sums. */
static inline void count_in(fs_stripe *sp, uint64_t matches, uint64_t fanout, uint64_t fanout_max)
{
    atomic_fetch_add_explicit(&sp->matches, matches, memory_order_relaxed);
    /* A locked add costs a match() more than its lookup's arithmetic: none
     * when nothing matched (~40% of subjects in the benchmarks). */
    if (fanout == 0)
        return;
    atomic_fetch_add_explicit(&sp->fanout_total, fanout, memory_order_relaxed);
    uint64_t cur = atomic_load_explicit(&sp->fanout_max, memory_order_relaxed);
    while (fanout_max > cur &&
           !atomic_compare_exchange_weak_explicit(&sp->fanout_max, &cur, fanout_max,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void fs_count_matches(fs_sublist *sl, uint64_t matches, uint64_t fanout, uint64_t fanout_max)
{
    count_in(fs_brlock_mine(&sl->lock), matches, fanout, fanout_max);
}

/* One match of a call about one subject, into the stripe of its hold. */
static inline void count_match(fs_stripe *mine, uint64_t fanout) { count_in(mine, 1, fanout, fanout); }

int fs_compute_locked(fs_sublist *sl, const char *s, size_t len, uint32_t hash,
                      fs_scratch *sc, fs_result *r, fs_error *err)
{
    int rc = walk_locked(sl, s, len, sc, 0, err);
    if (rc == FS_OK)
        rc = fs_build_result(sl, sc, r);
    /* A cached result remembers its picks for its own subject: a batch row
     * without a key then picks from the cache in O(1).  (match() without a
     * cache makes no picks: nothing to compute.)  The picks hash the
     * subject with fs_hash, as an uncached row's do; hash is the cache's
     * (fs_cache_hash). */
    if (rc == FS_OK && sl->cache) {
        if (r->ngroups)
            fs_result_pick_for_subject(r, fs_hash(s, len));
        fs_cache_put(sl->cache, s, len, hash, &sc->toks, r);
    }
    return rc;
}

void fs_reclaim_cache(fs_sublist *sl)
{
    fs_brlock_wrlock(&sl->lock);
    if (sl->cache)
        fs_cache_reclaim(sl->cache);
    fs_brlock_wrunlock(&sl->lock);
}

/* End of a read-locked call that may have filled the cache: flush its
 * tally, then release the read lock (held in the stripe mine), then free
 * evicted entries if enough wait (that needs the write lock: no reader
 * may still be on them). */
static inline void read_done_in(fs_sublist *sl, const fs_cache_tally *tally, fs_stripe *mine)
{
    int reclaim = 0;
    if (sl->cache) {
        /* (a call about one subject counts its hit in the lookup: only a
         * miss, or a batch's tally, is left to add) */
        if (tally->hits | tally->misses)
            fs_cache_tally_flush(sl->cache, tally);
        /* Only a fill retires entries or asks for buckets, and only a miss
         * fills: a call that missed nothing leaves the reclaim to the call
         * whose fill made it due (that call asks here after its fill). */
        if (tally->misses)
            reclaim = fs_cache_should_reclaim(sl->cache);
    }
    fs_brlock_rdunlock_in(mine);
    if (reclaim)
        fs_reclaim_cache(sl);
}

void fs_read_done(fs_sublist *sl, const fs_cache_tally *tally)
{
    read_done_in(sl, tally, fs_brlock_mine(&sl->lock));
}

/* The cache lookup of a call about one subject (match(), num_interest,
 * has_interest), read lock held in the stripe mine: its cached answer, or
 * NULL (no cache, or a miss, counted into *tally); *hash, the key a miss
 * is filled under (0 without a cache).  A hit is counted by the lookup
 * itself, in mine's number. */
static inline const fs_result *lookup_one(fs_sublist *sl, fs_stripe *mine, const char *s, size_t len,
                                          uint32_t *hash, fs_cache_tally *tally)
{
    *hash = 0;
    if (!sl->cache)
        return NULL;
    const fs_result *cached = fs_cache_get_one(sl->cache, s, len, hash, fs_brlock_stripe_no(&sl->lock, mine));
    tally->misses += !cached;
    return cached;
}

int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                     fs_scratch *sc, fs_result *r, fs_error *err)
{
    int rc;
    fs_cache_tally tally = {0, 0};
    uint32_t hash;
    fs_stripe *mine = fs_brlock_rdlock_in(&sl->lock);
    const fs_result *cached = lookup_one(sl, mine, subject, len, &hash, &tally);
    if (cached)
        rc = fs_result_copy(r, cached);
    else
        rc = fs_compute_locked(sl, subject, len, hash, sc, r, err);
    read_done_in(sl, &tally, mine);
    if (rc == FS_OK)
        count_match(mine, r->nids);
    return rc;
}

/* r's answer when it is plain ids only, at most cap of them: copied to
 * ids[0..*n), 1.  Else 0. */
static int copy_small(const fs_result *r, int64_t *ids, size_t cap, size_t *n)
{
    size_t nids = r->nids;        /* once: ids' stores may alias it (long, unsigned long) */
    if (r->ngroups || nids > cap)
        return 0;
    /* (a loop, not memcpy: a cached answer is an id or two, and the call
     * into libc cost more than the copy) */
    const int64_t *src = r->ids;
    for (size_t i = 0; i < nids; i++)
        ids[i] = src[i];
    *n = nids;
    return 1;
}

/* The same straight from the walk's hits, without building a result: the
 * plain ids in the row's order (fs_hits_plain, as fs_build_result puts
 * them).  Not for AMQP, whose built result is deduplicated (one delivery
 * per sub_id). */
static int copy_small_hits(const fs_sublist *sl, const fs_scratch *sc, int64_t *ids, size_t cap,
                           size_t *n)
{
    if (fs_rules(sl->dialect)->once_per_id)
        return 0;
    size_t total = 0;
    for (size_t k = 0; k < sc->nhits; k++) {
        if (fs_ngroups_of(sl, sc->hits[k]))
            return 0;
        total += fs_nsubs_of(sl, sc->hits[k]);
    }
    if (total > cap)
        return 0;
    *n = fs_hits_plain(sl, sc->hits, sc->nhits, ids, total);
    return 1;
}

int fs_sublist_match_small(fs_sublist *sl, const char *subject, size_t len,
                           int64_t *ids, size_t cap, size_t *n,
                           fs_workspace *spare, fs_workspace **wp, fs_error *err, fs_match_how how)
{
    int rc = FS_OK;
    *n = 0;
    *wp = NULL;
    /* The stripe is found once: the hold, the hit and the match count go
     * to it. */
    fs_stripe *mine = how != FS_MATCH_NO_WAIT ? fs_brlock_rdlock_in(&sl->lock) : fs_brlock_tryrdlock_in(&sl->lock);
    if (!mine)
        return FS_MATCH_WALK;
    /* A hit is counted by the lookup itself: a small cached answer then
     * goes straight to ids, with no workspace, no copy into a result and
     * no tally to flush. */
    uint32_t hash;
    fs_cache_tally tally = {0, 0};
    const fs_result *cached = lookup_one(sl, mine, subject, len, &hash, &tally);
    if (cached && copy_small(cached, ids, cap, n)) {
        /* The common cached answer: its hit is counted, nothing was filled
         * (no tally to flush, no reclaim due: read_done_in's tests, and
         * the workspace's, skipped). */
        fs_brlock_rdunlock_in(mine);
        count_match(mine, *n);
        return FS_OK;
    }
    if (!cached && how == FS_MATCH_CACHE_ONLY) {
        /* The caller walks in a second call: this one leaves no trace
         * (the miss is counted then). */
        tally.misses = 0;
        read_done_in(sl, &tally, mine);
        return FS_MATCH_WALK;
    }
    /* (a cached answer here is not small: it is copied into a result) */
    int result_used = 1;              /* 0: w->r untouched (fs_workspace_release_walked) */
    fs_workspace *w = fs_workspace_acquire(spare);
    int small = 0;
    if (!w) {
        rc = FS_ENOMEM;
    } else if (cached) {
        rc = fs_result_copy(&w->r, cached);
    } else if (sl->cache) {
        rc = fs_compute_locked(sl, subject, len, hash, &w->sc, &w->r, err);
        small = rc == FS_OK && copy_small(&w->r, ids, cap, n);
    } else {
        /* Nothing to cache: a small answer needs no result built, and
         * a larger one no queue picks (the caller reads none). */
        rc = walk_locked(sl, subject, len, &w->sc, 0, err);
        small = rc == FS_OK && copy_small_hits(sl, &w->sc, ids, cap, n);
        result_used = rc == FS_OK && !small;
        if (result_used)
            rc = fs_build_result_unpicked(sl, &w->sc, &w->r);
    }
    if (rc == FS_OK && !small) {
        *n = w->r.nids;
        *wp = w;                  /* lent until the caller releases it */
    }
    read_done_in(sl, &tally, mine);
    if (w && !*wp) {
        if (result_used)
            fs_workspace_release(w, spare);
        else
            fs_workspace_release_walked(w, spare);
    }
    if (rc == FS_OK)
        count_match(mine, *n);
    return rc;
}

/* num_interest's answer; caller holds the read lock (in the stripe mine),
 * then calls read_done_in with the tally. */
static int interest_locked(fs_sublist *sl, fs_stripe *mine, const char *subject, size_t len, fs_scratch *sc,
                           uint64_t *nplain, uint64_t *nqueue, fs_error *err, fs_cache_tally *tally)
{
    *nplain = *nqueue = 0;
    int rc = FS_OK;
    uint32_t hash;
    const fs_result *cached = lookup_one(sl, mine, subject, len, &hash, tally);
    if (cached) {
        *nplain = cached->nplain;
        *nqueue = cached->nids - cached->nplain;
    } else if (sl->cache || fs_rules(sl->dialect)->once_per_id) {
        /* Fill the cache: the next question about this subject is cheap.
         * (AMQP counts each sub_id once: the built result is deduplicated.) */
        fs_result r;
        fs_result_init(&r);
        rc = fs_compute_locked(sl, subject, len, hash, sc, &r, err);
        *nplain = r.nplain;
        *nqueue = r.nids - r.nplain;
        fs_result_free(&r);
    } else {
        rc = walk_locked(sl, subject, len, sc, 0, err);
        for (size_t k = 0; rc == FS_OK && k < sc->nhits; k++) {
            const fs_node *n = sc->hits[k];
            *nplain += fs_nsubs_of(sl, n);
            uint32_t ng = fs_ngroups_of(sl, n);
            for (uint32_t gi = 0; gi < ng; gi++) {
                const int64_t *gids;
                *nqueue += fs_gids_of(sl, fs_group_of(sl, n, gi), &gids);
            }
        }
    }
    return rc;
}

int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                        fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue,
                        fs_error *err)
{
    fs_cache_tally tally = {0, 0};
    fs_stripe *mine = fs_brlock_rdlock_in(&sl->lock);
    int rc = interest_locked(sl, mine, subject, len, sc, nplain, nqueue, err, &tally);
    read_done_in(sl, &tally, mine);
    if (rc == FS_OK)
        count_match(mine, *nplain + *nqueue);
    return rc;
}

int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, fs_error *err)
{
    fs_stripe *mine = fs_brlock_rdlock_in(&sl->lock);      /* once: a lock pair is ~60 instructions */
    if (sl->cache) {
        /* With a cache the whole answer is worth computing: it is kept,
         * and the next question about this subject is one lookup. */
        uint64_t nplain, nqueue;
        fs_cache_tally tally = {0, 0};
        int rc = interest_locked(sl, mine, subject, len, sc, &nplain, &nqueue, err, &tally);
        read_done_in(sl, &tally, mine);
        if (rc < 0)
            return rc;
        count_match(mine, nplain + nqueue);
        return nplain + nqueue > 0;
    }
    /* The tables first, stopping at the first entry; the trie only if none. */
    int rc = walk_locked(sl, subject, len, sc, 1, err);
    if (rc == FS_OK)
        rc = sc->nhits > 0;
    fs_brlock_rdunlock_in(mine);
    if (rc >= 0)
        count_match(mine, 0);
    return rc;
}
