/* fs_cache.h - an LRU cache of match results, keyed by subject.
 *
 *   cache ─► shard[0..S)   (S a power of two; a subject's shard is picked
 *              │             by the top bits of its hash)
 *              ├─ spinlock
 *              ├─ buckets ─► entry ─► entry        (chained by hash)
 *              └─ LRU list: head (newest) <-> ... <-> tail (oldest)
 *
 *   entry: one allocation holding the subject bytes and a private copy of
 *          its fs_result (ids, groups, arena), so a hit needs no trie walk.
 *
 * Lookups and fills happen while the index's read lock is held; insert and
 * remove call fs_cache_invalidate under the write lock, which evicts exactly
 * the entries whose subject the changed filter matches (never a flush).
 * Sharding keeps threads of one batch off each other's locks.
 */
#ifndef FS_CACHE_H
#define FS_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "fs_result.h"
#include "fs_token.h"

typedef struct fs_cache fs_cache;

typedef struct {
    uint64_t entries, capacity, hits, misses, bytes;
} fs_cache_stats;
typedef struct fs_cache_shard fs_cache_shard;

/* A cache bounded by capacity entries (>= 1).  NULL when out of memory. */
fs_cache *fs_cache_new(size_t capacity);
void fs_cache_free(fs_cache *c);

/* Look the subject up.  On a hit returns its result and leaves the shard
 * locked in *held: the caller reads the result, then calls
 * fs_cache_release(*held).  On a miss returns NULL with nothing locked.
 * count: whether this lookup counts in the hit/miss statistics. */
const fs_result *fs_cache_get(fs_cache *c, const char *s, size_t len, uint32_t hash,
                              int count, fs_cache_shard **held);
void fs_cache_release(fs_cache_shard *held);

/* Store a copy of r for the subject (evicting the least recently used
 * entry when full).  Out of memory just leaves it uncached. */
void fs_cache_put(fs_cache *c, const char *s, size_t len, uint32_t hash,
                  const fs_tokens *t, const fs_result *r);

/* Evict every entry whose subject the filter (tokens ft) matches.  literal:
 * the filter has no wildcard, so only the entry for that exact subject can
 * match.  Wildcard filters scan each shard's dense summary array (first and
 * last token hashes, token count) and look closer only at candidates. */
void fs_cache_invalidate(fs_cache *c, fs_dialect d, const char *filter, size_t flen,
                         const fs_tokens *ft, int literal);

void fs_cache_stats_get(fs_cache *c, fs_cache_stats *st);

#endif
