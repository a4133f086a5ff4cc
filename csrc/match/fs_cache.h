/* fs_cache.h - a CLOCK cache of match results, keyed by subject.
 *
 *   cache ─► shard[0..S)   (S a power of two; a subject's shard is picked
 *              │             by the top bits of its hash)
 *              ├─ buckets ─► entry ─► entry   (chains read without a lock)
 *              ├─ ring: summary[0..count)     (what the CLOCK hand sweeps
 *              │                               and invalidation scans)
 *              │   both start small and double with use up to the shard's
 *              │   capacity (the ring under the shard's lock, when full;
 *              │   the buckets under the index's write lock, past one
 *              │   entry per two), so a cache costs what it holds
 *              ├─ spinlock                    (fills and evictions only)
 *              └─ retired ─► entry ─► ...     (evicted by a fill; freed later)
 *
 *   entry: one allocation holding the subject bytes and a private copy of
 *          its fs_result (ids, groups, arena), so a hit needs no index walk.
 *
 * Why CLOCK and not LRU: a hit must write nothing that other threads share,
 * or cached workloads stop scaling with threads (an LRU relinks on every
 * hit, under a lock).  Here a hit reads the bucket chain with acquire loads
 * and sets its entry's reference bit only when it is clear; hit and miss
 * counts go to a caller's tally, added once per call to the counters of
 * the caller's thread stripe (fs_sys.h), a line no other thread writes.
 *
 * Lifetimes, with the index's lock (the caller's):
 *  - lookups and fills run under the read lock.  A fill that evicts cannot
 *    free the victim (a reader may be on it): it unlinks it and retires it.
 *  - invalidation (insert/remove) runs under the write lock: no reader is
 *    inside, so it frees what it evicts, and every retired entry.
 *  - fs_cache_reclaim frees the retired entries and makes a shard's new
 *    buckets; the index calls it under its write lock, after reads that
 *    left more than fs_cache_should_reclaim allows or asked for buckets.
 */
#ifndef FS_CACHE_H
#define FS_CACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fs_result.h"
#include "fs_token.h"

typedef struct fs_cache fs_cache;

/* The cache's own hash of a subject, its key's: held in memory only -- no
 * image stores it, and no pick is made from it (a pick hashes with
 * fs_hash, whose values images store: fs_compute_locked) -- so it is
 * chosen for speed alone: (h ^ word) * M a word, two words a step, the
 * last 16 bytes as the last step (overlapping the words before; a string
 * under 16 bytes as its first and last word, one under 8 byte by byte),
 * and one avalanche whose high half is the hash.  fs_hash mixes every word
 * fully (a shift and a multiply each), as the index's tables need; a
 * lookup needs only buckets spread and keys told apart, which the key's
 * comparison does: match_many of hot1k over Arrow, 190.6 -> 160.0
 * instructions a row (its subjects 29.5 bytes; a word a step with a
 * word-by-word tail: 174.0).  Its buckets are as even as random ones on
 * light's subjects and filters and on runs of numbered keys (chi-square
 * per degree of freedom 0.98-1.01, 4,096 and 65,536 buckets). */
static inline uint32_t fs_cache_hash(const char *p, size_t n)
{
    const uint64_t m = 0x9E3779B97F4A7C15ull;
    uint64_t h = (uint64_t)n * m;
    if (n >= 16) {
        /* words in pairs up to the last 16 bytes, then those 16 as a pair
         * (overlapping what came before): no word-by-word tail */
        const char *q = p, *last = p + n - 16;
        for (; q < last; q += 16)
            h = (((h ^ fs_load_le64(q)) * m) ^ fs_load_le64(q + 8)) * m;
        h = (((h ^ fs_load_le64(last)) * m) ^ fs_load_le64(last + 8)) * m;
    } else if (n >= 8) {
        h = (((h ^ fs_load_le64(p)) * m) ^ fs_load_le64(p + n - 8)) * m;
    } else {
        h = (h ^ fs_load_bytes(p, n)) * m;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (uint32_t)(h >> 32);
}

typedef struct {
    uint64_t entries, capacity, hits, misses, bytes;
} fs_cache_stats;

/* A caller's own hit and miss counts (on its stack): added to its thread
 * stripe's counters by fs_cache_tally_flush, once per call rather than per
 * lookup; fs_cache_stats_get sums the stripes. */
typedef struct {
    uint64_t hits, misses;
} fs_cache_tally;

/* A cache bounded by capacity entries (>= 1), holding none yet (its
 * buckets and ring grow as it fills).  NULL when out of memory. */
fs_cache *fs_cache_new(size_t capacity);
void fs_cache_free(fs_cache *c);

/* One subject's lookup (under the index's read or write lock), for each
 * call that asks about one subject (match(), num_interest, has_interest):
 * hashes it (*hash: the key a miss is filled under) and looks it up.  A
 * hit is counted at once in the stripe given, the calling thread's (the
 * caller has it from its lock hold: fs_brlock_rdlock_in), so a cached
 * answer costs one hash, one probe and no tally to flush; a miss is not
 * counted (the caller counts it in its tally, or not at all when it only
 * asked).  The result is valid until the caller releases that lock. */
const fs_result *fs_cache_get_one(fs_cache *c, const char *s, size_t len, uint32_t *hash, unsigned stripe);
/* Add a call's tally (its misses; a batch's hits too) to the calling
 * thread's stripe. */
void fs_cache_tally_flush(fs_cache *c, const fs_cache_tally *tally);

/* A block of lookups, in two steps, so that the block's misses overlap
 * instead of each lookup waiting on its own.  First the n subjects'
 * buckets (from their hashes), the entries at their heads prefetched;
 * then each lookup starts at its bucket: fs_cache_get_from returns the
 * subject's result (valid until the lock is released) or NULL, counting
 * the hit or the miss into *tally.  Both under one hold of the index's
 * read lock.
 *
 * fs_cache_get_from is inline, and so the entry's layout is here: a
 * cached row costs ~200 instructions in all, and the call into
 * fs_cache.c, its saved registers and the return cost ~15 of them
 * (callgrind, match_many over Arrow, hot1k).  Only fs_cache.c writes an
 * entry. */
typedef struct fs_centry fs_centry;
struct fs_centry {
    /* What a hit reads, first, so that it lies in the entry's first line
     * or two: the chain, the key's hash and length, the reference bit,
     * the result's fields (emit reads ids, nids, nplain, ngroups). */
    _Atomic(fs_centry *) hnext;       /* bucket chain; readers follow it unlocked */
    uint32_t hash, len;
    atomic_uchar ref;                 /* CLOCK reference bit */
    uint32_t slot;                    /* index in the shard's ring (shard lock) */
    fs_result r;                      /* its buffers are inside this allocation */
    fs_centry *retired_next;          /* on the shard's retired list */
    size_t bytes;                     /* size of this allocation */
    /* The subject's bytes, zero-padded to whole words (FS_TOK_ALLOC), then
     * r's ids, groups and arena. */
    char subject[];
};
typedef _Atomic(fs_centry *) fs_cache_bucket;
void fs_cache_buckets(const fs_cache *c, const uint32_t *hash, size_t n, const fs_cache_bucket **buckets);

/* Equality of a cached key (a: word-padded) and a subject of the same
 * length n (b: only its n bytes may be read).  From 16 bytes on, the
 * first 16 and the last 16 (overlapping), then any 16 between, all
 * differences or'ed and tested once: a subject of 16-32 bytes costs
 * eight loads and one branch, where fs_tok_eq_within's word loop took
 * ~34 instructions a hit and a loop with a test per 16 bytes ~27 (hot1k's
 * subjects are 24-39 bytes).  A lookup only compares keys whose hash and
 * length are equal: they differ rarely, and nothing is gained by leaving
 * early.  Keys under a word go to fs_tok_eq_within. */
static inline int fs_cache_key_eq(const char *a, const char *b, size_t n)
{
#define FS_CACHE_DIFF16(off) ((fs_load_le64(a + (off)) ^ fs_load_le64(b + (off))) | \
                              (fs_load_le64(a + (off) + 8) ^ fs_load_le64(b + (off) + 8)))
    if (n >= 16) {
        uint64_t d = FS_CACHE_DIFF16(0) | FS_CACHE_DIFF16(n - 16);
        for (size_t k = 16; k + 16 < n; k += 16)
            d |= FS_CACHE_DIFF16(k);
        return d == 0;
    }
#undef FS_CACHE_DIFF16
    if (n >= 8)
        return ((fs_load_le64(a) ^ fs_load_le64(b)) | (fs_load_le64(a + n - 8) ^ fs_load_le64(b + n - 8))) == 0;
    return fs_tok_eq_within(a, b, (uint32_t)n, b + n);
}

/* The entry for the subject in the chain from e on, or NULL: the one
 * lookup, for the block's lookups and fs_cache.c's. */
static inline fs_centry *fs_cache_find_from(const fs_centry *e, const char *s, size_t len, uint32_t hash)
{
    for (; e; e = atomic_load_explicit(&e->hnext, memory_order_acquire))
        if (e->hash == hash && e->len == len && fs_cache_key_eq(e->subject, s, len))
            return (fs_centry *)e;
    return NULL;
}

/* A hit on e: its result, valid while the caller holds the index's lock.
 * The reference bit is set only when clear, so a hot entry's line stays
 * shared, unwritten.  Counting the hit is the caller's (a tally, or the
 * thread's stripe). */
static inline const fs_result *fs_cache_hit(fs_centry *e)
{
    if (!atomic_load_explicit(&e->ref, memory_order_relaxed))
        atomic_store_explicit(&e->ref, 1, memory_order_relaxed);
    return &e->r;
}

static inline const fs_result *fs_cache_get_from(const fs_cache_bucket *bucket, const char *s, size_t len,
                                                 uint32_t hash, fs_cache_tally *tally)
{
    fs_centry *e = fs_cache_find_from(atomic_load_explicit(bucket, memory_order_acquire), s, len, hash);
    if (!e) {
        tally->misses++;
        return NULL;
    }
    tally->hits++;
    return fs_cache_hit(e);
}

/* Store a copy of r for the subject (under the read lock), evicting by
 * CLOCK when the shard is full, else growing its ring when the ring is
 * (and asking for more buckets past one entry per two).  Out of memory
 * just leaves it uncached. */
void fs_cache_put(fs_cache *c, const char *s, size_t len, uint32_t hash,
                  const fs_tokens *t, const fs_result *r);

/* Whether enough evicted entries wait to be freed, or a shard waits for
 * more buckets, that the index should take its write lock and call
 * fs_cache_reclaim (any lock or none). */
int fs_cache_should_reclaim(fs_cache *c);
/* Free the retired entries, and give the shards that asked more buckets
 * (out of memory: they keep theirs).  Only under the index's write lock. */
void fs_cache_reclaim(fs_cache *c);

/* Evict every entry whose subject the filter (tokens ft) matches, under the
 * index's write lock.  literal: the filter has no wildcard, so only the
 * entry for that exact subject can match.  Wildcard filters scan each
 * shard's dense summary ring (first and last token hashes, token count) and
 * look closer only at candidates. */
void fs_cache_invalidate(fs_cache *c, fs_dialect d, const char *filter, size_t flen,
                         const fs_tokens *ft, int literal);

void fs_cache_stats_get(fs_cache *c, fs_cache_stats *st);

#endif
