/* sublist.h - the subscription index.
 *
 *   fs_sublist ─┬─ literals: table  key(all tokens) ─► entry
 *               │                   ("orders.eu.created"), + a bitmap
 *               ├─ shapes:   shape[j] (fs_shape.h), one table each
 *               │     (3, {1}, -)    key(literal tokens) ─► entry
 *               │     (2, {},  rest) key(literal tokens) ─► entry
 *               │     + a bitmap of the keys (L2-sized): most probes
 *               │       stop there, before touching the table
 *               │   probe[k]: the shapes a subject of k tokens probes
 *               ├─ root ─► trie (fs_trie.c): what no table holds
 *               │   level ─┬─ "orders" ─► node ─► level ...
 *               │          ├─ one  ─► node      ('*' / '+')
 *               │          └─ rest ─► node      ('>' / '#'; a leaf, except
 *               │                               AMQP '#', which has children)
 *               └─ cache: CLOCK cache of results by subject (fs_cache.h)
 *
 *   entry / node: plain subscription ids (sorted int64 array, inline when
 *   there is one) and queue groups (name + sorted member ids); an entry
 *   holds its whole filter, a trie node one token.  Only trie nodes carry
 *   the parent and next-level links (fs_link, stored before the node), so
 *   the entries, most subscriptions, are 16 bytes smaller.
 *
 * A subscription is the triple (filter, queue-or-none, sub_id).  Matching
 * a subject probes the literal table with the sum of its tokens' mixes,
 * every shape of its length with a key derived in O(wildcards) from them
 * -- independent probes, which the batch matcher prefetches a block of
 * rows at a time (fs_batch.c) -- and walks the trie only when it holds
 * anything.  Every public function takes the index's read/write lock
 * itself; results are copied out into caller-owned buffers, so nothing
 * returned points into the index.
 *
 * Files, one job each: sublist.c routes the writes (insert, remove, bulk)
 * and owns the index (and its literal table), fs_match.c answers one
 * subject, fs_batch.c the batch pipeline (fs_idbuf.c its output buffers
 * and the pool that keeps released big ones), fs_reverse.c reverse
 * matching; fs_table.c the hash tables, fs_shape.c the shapes, fs_trie.c
 * the trie (and pruning it), fs_node.c nodes and their subscriptions
 * (fs_slab.c the blocks they are carved from), fs_result.c results,
 * fs_cache.c the cache, fs_serial.c the file format, fs_workspace.c
 * per-call working memory, fs_token.c tokens (validated as they are cut)
 * and one filter against one subject, fs_dialect.c the dialects' rules,
 * which the tokenizer and the loader share (byte classes, wildcards,
 * lengths, queue names, MQTT shares, the loader's check of a stored
 * literal); fs_sys.c threads and locks (POSIX or Windows),
 * fs_bits.h the compiler built-ins, fs_alloc.c the one door for memory,
 * fs_mem.c growing arrays and counting an index's memory (memory_bytes),
 * fs_status.h the status codes of the whole core; borrowed algorithms,
 * written here from their specifications: fs_xxh64.h the format's
 * checksum (XXH64), fs_utf8.h the UTF-8 rule.  fs_internal.h is the
 * layout the index's files share; the tables, nodes and trie declare
 * their functions in fs_table.h, fs_node.h, fs_trie.h.
 * fs_walk.h: the one walk (probes, group merge) of match, batch, reverse.
 *
 * Layers of the index's files, as intended: each calls only files on its
 * row or below.  This is not checked yet, and fs_internal.h's inline
 * functions, fs_fork.c <-> fs_idbuf.c and fs_result.c <-> fs_walk.h break
 * it (docs/design.md, "Layers of the C core", lists where); what
 * tests/test_layout.py checks of the C core is said there too:
 *
 *   fs_serial.c                                     the file format
 *   sublist.c | fs_match.c fs_batch.c fs_reverse.c  writes | reads
 *   fs_shape.c fs_trie.c | fs_result.c fs_cache.c   filters | results
 *   fs_node.c fs_table.c                            nodes, hash tables
 *   fs_slab.c fs_mem.c                              blocks, the account
 *   fs_token.c                                      tokens
 *   fs_dialect.c fs_alloc.c                         the rules, the one door
 */
#ifndef FS_SUBLIST_H
#define FS_SUBLIST_H

#include <stddef.h>
#include <stdint.h>

#include "fs_cache.h"
#include "fs_result.h"
#include "fs_token.h"

typedef struct fs_sublist fs_sublist;
typedef struct fs_node fs_node;

/* One subscription to insert or remove in bulk.  queue == NULL: plain. */
typedef struct {
    const char *filter;
    size_t filter_len;
    const char *queue;
    size_t queue_len;
    int64_t id;
} fs_spec;

/* A queue group of a row, by where its first part is: hits[hit]'s group
 * number group (fs_row_groups, fs_result.c). */
typedef struct {
    uint32_t hit, group;
} fs_gref;

/* Per-call working memory, reusable across calls by one thread. */
typedef struct {
    fs_tokens toks;
    const fs_node **front, **next, **hits;
    size_t nfront, nnext, nhits;
    size_t cap_front, cap_next, cap_hits;
    fs_gref *grefs;          /* the row's groups, in order (fs_row_groups) */
    size_t cap_grefs;
    int grefs_merge;         /* 1: two of them may be parts of one group */
    const fs_node **seen;    /* AMQP trie walk: open-addressing set of nodes, */
    size_t cap_seen, act_seen;   /* allocated / in use (a power of 2) */
} fs_scratch;

/* One reverse-match hit. */
typedef struct {
    size_t filter_off, filter_len;
    size_t queue_off, queue_len;
    int has_queue;
    int64_t id;
} fs_rhit;

typedef struct {
    fs_rhit *hits;
    size_t nhits, cap_hits;
    char *arena;
    size_t narena, cap_arena;
} fs_rresult;


typedef struct {
    uint64_t subscriptions, nodes, memory_bytes;   /* memory: index + cache */
    uint64_t mapped_bytes;        /* a mapped image's bytes (0: built) */
    uint64_t live_subscriptions;  /* in its live part: those of every filter changed
                                   * since opening (moved there whole) */
    uint64_t live_bytes;          /* the live part's memory (in memory_bytes) */
    uint64_t inserts, removes, matches, fanout_total, fanout_max;
    uint64_t generation;
    fs_cache_stats cache;
} fs_stats;

/* A new empty index; NULL when out of memory. */
fs_sublist *fs_sublist_new(fs_dialect d);
/* Frees everything the index holds (never allocates). */
void fs_sublist_free(fs_sublist *sl);
fs_dialect fs_sublist_dialect(const fs_sublist *sl);
uint64_t fs_sublist_count(fs_sublist *sl);
uint64_t fs_sublist_generation(fs_sublist *sl);

/* Insert one subscription (queue NULL: plain; MQTT also takes
 * "$share/GROUP/filter").  Returns 1 if new, 0 if it was already there,
 * FS_EINVAL (err set; nothing changed) or FS_ENOMEM (nothing changed). */
int fs_sublist_insert(fs_sublist *sl, const fs_spec *spec, fs_error *err);
/* Remove one.  Returns 1 if removed, 0 if absent, FS_EINVAL. Never ENOMEM
 * for filters of up to FS_TOKENS_INLINE tokens. */
int fs_sublist_remove(fs_sublist *sl, const fs_spec *spec, fs_error *err);
/* Bulk insert under one lock, all or nothing: returns FS_OK with *changed
 * the number of new subscriptions, or FS_EINVAL with *bad the index of the
 * offending spec, or FS_ENOMEM; on either error the index is unchanged. */
int fs_sublist_insert_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err);
/* Bulk remove: validates all first, then removes; absent ones are skipped.
 * FS_OK (*changed = number removed), FS_EINVAL (*bad set) or FS_ENOMEM. */
int fs_sublist_remove_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                           size_t *changed, size_t *bad, fs_error *err);

void fs_scratch_init(fs_scratch *sc);
void fs_scratch_free(fs_scratch *sc);
void fs_rresult_init(fs_rresult *r);
void fs_rresult_free(fs_rresult *r);

/* Match a literal subject into r (cleared first).  FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                     fs_scratch *sc, fs_result *r, fs_error *err);
/* Count what a subject matches: plain subscriptions and queue members.
 * FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                        fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue,
                        fs_error *err);
/* Does the subject match anything?  Stops at the first matching entry of
 * the literal and shape tables (where nearly every filter lives); a trie
 * walk, for filters past the shape budget, is done whole.  1 yes,
 * 0 no, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, fs_error *err);
/* Every stored subscription whose filter intersects the given filter.
 * FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                             fs_scratch *sc, fs_rresult *r, fs_error *err);

void fs_sublist_stats(fs_sublist *sl, fs_stats *st);

/* Give the index a result cache of `capacity` entries, replacing any
 * it had (0: no cache).  FS_OK or FS_ENOMEM (the old cache is kept). */
int fs_sublist_set_cache(fs_sublist *sl, size_t capacity);

/* Working memory kept per thread (freed when the thread exits), so a
 * single match allocates nothing once warm.  NULL when out of memory. */
typedef struct {
    fs_scratch sc;
    fs_result r;
    int busy;            /* lent out by fs_workspace_acquire */
} fs_workspace;
fs_workspace *fs_workspace_get(void);
/* Drop buffers a huge result left oversized. */
void fs_workspace_trim(fs_workspace *w);
/* Borrow the thread's workspace for one call.  A call that is still using
 * it further up the same thread's stack (a garbage-collector pass run while
 * Python objects are built from a result can re-enter the index) makes
 * this return spare instead, freshly initialised.  NULL when out of
 * memory.  Give it back with fs_workspace_release(w, spare). */
fs_workspace *fs_workspace_acquire(fs_workspace *spare);
void fs_workspace_release(fs_workspace *w, fs_workspace *spare);

/* match() for a caller that builds its own objects from the answer (the
 * Python layer): a small answer -- plain ids only, at most cap of them --
 * is written to ids[0..*n) and the call is done (*wp NULL); a cached one
 * needs no workspace at all.  Any other answer is left in (*wp)->r, with
 * *wp the thread's workspace (or spare, see fs_workspace_acquire) lent to
 * the caller until fs_workspace_release(*wp, spare).  FS_OK, FS_EINVAL or
 * FS_ENOMEM (then *wp is NULL). */
int fs_sublist_match_small(fs_sublist *sl, const char *subject, size_t len,
                           int64_t *ids, size_t cap, size_t *n,
                           fs_workspace *spare, fs_workspace **wp, fs_error *err);


/* Is s a valid subject (is_filter 0) or filter (1; MQTT "$share/G/f"
 * included)?  FS_OK, FS_EINVAL (err set) or FS_ENOMEM. */
int fs_validate(fs_dialect d, const char *s, size_t len, int is_filter, fs_error *err);

#endif
