/* fs_batch.h - matching a column of subjects at once.
 *
 * Input: a column of strings in one of two layouts, read in place:
 *   FS_STR_PTRS   ptrs[i], lens[i]            (ptrs[i] NULL: a null row)
 *   FS_STR_ARROW  Arrow utf8 / large_utf8:   data, int32 or int64 offsets,
 *                 optional validity bitmap, and the array's offset
 * Output, CSR: row i's ids are ids[row_end[i-1] .. row_end[i]); invalid[i]
 * is 1 for a null or invalid subject (which gets no ids and never stops
 * the batch).
 *
 * Queue groups: FS_QUEUES_ALL emits every member, FS_QUEUES_NONE none, and
 * FS_QUEUES_PICK one member per group, chosen from a hash of the row's key
 * (or its subject) and the group, so the same input gives the same output.
 */
#ifndef FS_BATCH_H
#define FS_BATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fs_idbuf.h"
#include "fs_status.h"
#include "fs_match.h"
#include "fs_strings.h"

enum { FS_QUEUES_PICK = 0, FS_QUEUES_ALL = 1, FS_QUEUES_NONE = 2 };


/* Match rows [begin, end) of subjects (keys may be NULL), appending ids to
 * out; row_end[i - begin] receives out->n after row i, invalid[i - begin]
 * 1 or 0.  also (NULL, or another index of sl's dialect, not sl): each row
 * gets the answer one index holding both indexes' subscriptions would give
 * (fs_result_merge; queue picks over both's members) -- the sharded
 * fan-out matches a shard's image and the image of the filters every
 * shard needs so, without copying those into every shard.  The two must
 * not share a subscription (one index holds it once; both would deliver
 * it twice).  Both read locks are held while rows are matched, taken in
 * the fork handler's order (fs_fork.c); sl's cache is not used, and the
 * match counts go to sl's statistics.  dedupe: each id at most once per row (its first occurrence;
 * always so for an AMQP index, where it is the delivery rule).  Stops early with FS_ECANCELLED when *cancel (may be NULL)
 * becomes non-zero.
 * FS_OK, FS_ENOMEM, FS_ECANCELLED. */
int fs_match_rows(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects, const fs_strings *keys,
                  size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                  uint8_t *invalid, fs_idbuf *out, const atomic_int *cancel);

/* The same over nthreads workers of the process's thread pool
 * (fs_pool.h), which claim blocks of rows in turn and place each block's
 * ids, in order, in one output, found by a lock-free look-back over the
 * blocks before (fs_batch.c).  Start, poll, then finish. */
typedef struct fs_batch_job fs_batch_job;

/* Posts the work to the pool (starting threads only when it has too few
 * free).  row_end has n entries, invalid n.  NULL when out of memory or
 * the pool has no thread and none could be started. */
fs_batch_job *fs_batch_start(fs_sublist *sl, const fs_strings *subjects, const fs_strings *keys,
                             int queues, int dedupe, unsigned nthreads, int64_t *row_end, uint8_t *invalid);
/* The same, with an also (NULL: none; see fs_match_rows), the rows cut
 * into blocks of block_rows (0: sized as the batch
 * runs, from what each thread's last block cost) that the threads claim
 * in turn (tests and fuzzers make them tiny, so that small batches take
 * the threaded path's every turn), with only rows
 * [0, fed) of subjects filled in so far: the caller fills the rest while
 * the threads match, and hands them over with fs_batch_feed.  (keys must
 * be filled in whole.) */
fs_batch_job *fs_batch_start_blocks(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects,
                                    const fs_strings *keys, int queues, int dedupe, unsigned nthreads,
                                    int64_t *row_end, uint8_t *invalid, size_t block_rows, size_t fed);
/* Rows [0, fed) of the subjects are filled in and may be matched.  The
 * caller must feed every row, or cancel, before fs_batch_wait can end. */
void fs_batch_feed(fs_batch_job *job, size_t fed);
/* Wait up to timeout_ms for the job; 1 when every row is matched (or the
 * job failed or was cancelled), else 0. */
int fs_batch_wait(fs_batch_job *job, unsigned timeout_ms);
/* Ask the threads to stop early. */
void fs_batch_cancel(fs_batch_job *job);
/* Wait for the job's workers to return, place any blocks they left,
 * hand the ids over in *out (row_end is global), free the job.  FS_OK, FS_ENOMEM or FS_ECANCELLED; on error *out
 * is empty. */
int fs_batch_finish(fs_batch_job *job, fs_idbuf *out);

/* How many workers of this process's batches have stopped claiming blocks
 * because other threads of their batch kept them from a processor
 * (fs_batch.c, crowded_out); tests. */
unsigned long long fs_batch_workers_crowded_out(void);

#endif
