/* fs_checksum.c - version 4's checksum on threads (fs_checksum.h): the
 * blocks' sums taken in turn by the worker pool's threads and the
 * caller's, each into its own place, then summed in order on the caller's;
 * and sublist.h's stream of an image's checksum, fed piece by piece. */
#include <stdatomic.h>

#include "fs_alloc.h"
#include "fs_checksum.h"
#include "fs_pool.h"
#include "fs_status.h"
#include "sublist.h"

/* Below this many blocks one thread sums them (handing out the work costs
 * a few microseconds a thread, against ~80-160 us a block). */
#define THREADED_BLOCKS 2u

typedef struct {
    fs_pool_task task;
    const void *data;
    size_t len, nblocks;
    uint64_t *sums;
    atomic_size_t next;
} sum_job;

static void sum_work(sum_job *J)
{
    for (size_t k; (k = atomic_fetch_add(&J->next, 1)) < J->nblocks;)
        J->sums[k] = fs_checksum_block(J->data, J->len, k);
}

static void sum_run(void *arg, unsigned index)
{
    (void)index;
    sum_work(arg);
}

uint64_t fs_checksum_blocks(unsigned version, const void *data, size_t len, unsigned threads)
{
    size_t nblocks = fs_checksum_nblocks(len);
    if (version < FS_CHECKSUM_BLOCKED_FROM || threads <= 1 || nblocks < THREADED_BLOCKS)
        return fs_checksum_of(version, data, len);
    sum_job J = {.task = {.fn = sum_run}, .data = data, .len = len, .nblocks = nblocks};
    J.task.arg = &J;
    J.sums = FS_MALLOC(sizeof(uint64_t) * nblocks);
    if (!J.sums)
        return fs_checksum_of(version, data, len);      /* the same sum, on this thread */
    atomic_init(&J.next, 0);
    int posted = fs_pool_submit(&J.task, threads - 1) == FS_OK;
    sum_work(&J);
    if (posted)
        fs_pool_join(&J.task);
    uint64_t sum = fs_checksum_of_sums(J.sums, nblocks);
    FS_FREE(J.sums);
    return sum;
}

/* The stream of sublist.h: fs_checksum_state behind a pointer, so that the
 * API's callers (the Python layer's receiver) need not see its fields. */
struct fs_checksum_stream {
    fs_checksum_state state;
};

fs_checksum_stream *fs_checksum_stream_new(void)
{
    fs_checksum_stream *s = FS_MALLOC(sizeof *s);
    if (s)
        fs_checksum_begin(&s->state);
    return s;
}

void fs_checksum_stream_feed(fs_checksum_stream *s, const void *data, size_t n)
{
    fs_checksum_feed(&s->state, data, n);
}

uint64_t fs_checksum_stream_end(const fs_checksum_stream *s)
{
    return fs_checksum_end(&s->state);
}

void fs_checksum_stream_free(fs_checksum_stream *s)
{
    FS_FREE(s);
}
