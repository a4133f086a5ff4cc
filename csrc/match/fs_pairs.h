/* fs_pairs.h - each thread's cache of merged node pairs: the ids of a
 * row's two biggest runs (two nodes of a built index) merged once and kept,
 * so that the next row hitting the same two nodes copies them and merges
 * only the rest (fs_hits_merge, fs_result.c).  Heavy's rows: 16,007 of the
 * 25,750 small ids of 3,000 rows sit in second-biggest runs of eight or
 * more, and those 785 rows hit only 23 distinct pairs (51 from four ids).
 *
 *   fs_pairs (one a thread: a thread-local of fs_pairs.c)
 *     slot[FS_PAIRS_SLOTS]: key (index, its generation, the epoch of
 *                           freed indexes, the two nodes and their counts)
 *                           -> ids[na + nb], the two runs merged
 *
 * Never stale: an entry serves only the index it was made from at the
 * generation it was made at (every insert and remove that changes the set
 * bumps it: api/sublist.c), and only while no index has been freed since
 * (fs_pairs_forget_index, from fs_sublist_free): a new index at a freed
 * one's address, with nodes at the freed one's node addresses, would
 * otherwise match an old key.  A mapped image's nodes are never cached
 * (its bytes may change under a read; fs_layout.h), only a built index's.
 * Bounded: FS_PAIRS_SLOTS entries of at most FS_PAIRS_MAX_IDS ids each
 * (512 KiB a thread, made and freed with its workspace: fs_workspace.c). */
#ifndef FS_PAIRS_H
#define FS_PAIRS_H

#include <stddef.h>
#include <stdint.h>

#include "fs_sys.h"

/* 256 slots of 256 ids: no pair of heavy's holds more than 215 ids (a
 * bigger pair merges as without a cache).  The slot is chosen by the
 * runs' contents (fs_pair_key.place), not the nodes' addresses: by
 * address, which of heavy's ~51 pairs shared a slot depended on where
 * malloc put the nodes, and so did the gate's count (match_many heavy
 * 2,229.0 here against 2,237.0 in a clean clone with 64 slots; 2,205.4
 * against 2,224.9 from one build to the next with 256). */
#define FS_PAIRS_SLOT_BITS 8
#define FS_PAIRS_SLOTS (1u << FS_PAIRS_SLOT_BITS)
#define FS_PAIRS_MAX_IDS 256

typedef struct {
    const void *index;          /* the fs_sublist */
    uint64_t generation;        /* its generation when merged */
    const void *a, *b;          /* the nodes: the biggest run's, the second's */
    size_t na, nb;              /* their counts */
    uint64_t place;             /* picks the slot (not compared): the runs' first ids and counts */
} fs_pair_key;

typedef struct fs_pairs fs_pairs;

/* Make this thread's cache, if it has none (fs_workspace_get, with the
 * workspace).  FS_OK or FS_ENOMEM. */
int fs_pairs_make_mine(void);

/* The buffer of key's merged ids (na + nb of them), or NULL where no
 * cache can hold them (too many ids, no cache made on this thread, or a
 * platform without a thread-local copy: FS_TLS_COPY_OK): the
 * caller then merges as it would without one.  *fresh = 1: the buffer is
 * the key's new entry, and the caller fills it before its next call here
 * (the slot's former entry is gone); 0: it holds the merge already. */
int64_t *fs_pairs_find(const fs_pair_key *key, int *fresh);

/* Every thread's entries made before this call are stale (an index was
 * freed).  Never fails; one atomic add. */
void fs_pairs_forget_index(void);

/* Free this thread's cache (the workspace's destructor: the thread ends).
 * Never fails. */
void fs_pairs_free_mine(void);

#endif
