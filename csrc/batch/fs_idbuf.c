/* fs_idbuf.c - output id buffers and the pool of released big ones (see
 * fs_idbuf.h). */
#include "fs_idbuf.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_fork.h"
#include "fs_status.h"
#include "fs_sys.h"

typedef struct {
    int64_t *ids;        /* NULL: an empty slot */
    size_t cap;
} kept_buffer;

/* The pool is process-wide (a batch's threads and every index share it)
 * and touched once per buffer growth or release, never per row: a mutex
 * is plenty. */
static kept_buffer pool[FS_IDPOOL_SLOTS];
static size_t pool_bytes;
static fs_mutex pool_mu;

/* Around fork(): the fork registry (fs_fork.h) holds this lock (after
 * every index's lock: the pool is entered with an index lock held) so
 * that no other thread is inside it when the process is copied, then
 * releases it on both sides. */
static void fork_lock(void *arg)
{
    (void)arg;
    fs_mutex_lock(&pool_mu);
}
static void fork_unlock(void *arg)
{
    (void)arg;
    fs_mutex_unlock(&pool_mu);
}
static fs_fork_entry pool_fork = {.prepare = fork_lock, .parent = fork_unlock, .child = fork_unlock, .order = 1};

static void pool_init(void) { fs_mutex_init(&pool_mu); }

/* 1 when buffers may be kept: 0 when the fork handlers could not be
 * registered (unsafe across fork: keep nothing).  The lock is initialised
 * either way. */
static int pool_on(void) { return fs_fork_register_once(&pool_fork, pool_init) == FS_OK; }

static void pool_lock(void)
{
    (void)fs_fork_register_once(&pool_fork, pool_init);
    fs_mutex_lock(&pool_mu);
}

/* Take a kept buffer: the largest (largest = 1), or the smallest that
 * holds need ids and is at most 8 times want (the growth's next size, so a
 * small output never pins a huge buffer).  {NULL, 0} when none fits. */
static kept_buffer pool_take(size_t need, size_t want, int largest)
{
    kept_buffer got = {NULL, 0};
    pool_lock();
    int best = -1;
    for (int i = 0; i < FS_IDPOOL_SLOTS; i++) {
        if (!pool[i].ids || (!largest && (pool[i].cap < need || pool[i].cap / 8 > want)))
            continue;
        if (best < 0 || (largest ? pool[i].cap > pool[best].cap : pool[i].cap < pool[best].cap))
            best = i;
    }
    if (best >= 0) {
        got = pool[best];
        pool[best] = (kept_buffer){NULL, 0};
        pool_bytes -= got.cap * sizeof(int64_t);
    }
    fs_mutex_unlock(&pool_mu);
    return got;
}

/* Keep b, evicting smaller buffers to make room; what is not kept (b, or
 * the evicted) is freed outside the lock. */
static void pool_put(kept_buffer b)
{
    kept_buffer out[FS_IDPOOL_SLOTS + 1];
    int nout = 0;
    size_t bytes = b.cap * sizeof(int64_t);
    pool_lock();
    for (;;) {
        int empty = -1, smallest = -1;
        for (int i = 0; i < FS_IDPOOL_SLOTS; i++) {
            if (!pool[i].ids)
                empty = i;
            else if (smallest < 0 || pool[i].cap < pool[smallest].cap)
                smallest = i;
        }
        if (empty >= 0 && pool_bytes + bytes <= FS_IDPOOL_MAX_BYTES) {
            pool[empty] = b;
            pool_bytes += bytes;
            break;
        }
        if (smallest < 0 || pool[smallest].cap >= b.cap) {  /* b is the smallest: drop it */
            out[nout++] = b;
            break;
        }
        out[nout++] = pool[smallest];
        pool_bytes -= pool[smallest].cap * sizeof(int64_t);
        pool[smallest] = (kept_buffer){NULL, 0};
    }
    fs_mutex_unlock(&pool_mu);
    for (int i = 0; i < nout; i++)
        FS_FREE(out[i].ids);
}

/* Move b's ids into the buffer ids (cap of them, holding b->n) and
 * release b's old buffer. */
static void move_ids(fs_idbuf *b, int64_t *ids, size_t cap)
{
    if (b->n)
        memcpy(ids, b->ids, b->n * sizeof(int64_t));
    fs_idbuf old = *b;
    *b = (fs_idbuf){ids, old.n, cap};
    fs_idbuf_free(&old);
}

int fs_idbuf_reserve(fs_idbuf *b, size_t need)
{
    if (need <= b->cap)
        return FS_OK;
    if (need > SIZE_MAX / (2 * sizeof(int64_t)))
        return FS_ENOMEM;
    size_t want = b->cap * 2 > need ? b->cap * 2 : need;
    if (want < 64)
        want = 64;
    if (want * sizeof(int64_t) >= FS_IDPOOL_MIN_BYTES / 8) {
        kept_buffer k = pool_take(need, want, 0);
        if (k.ids) {
            move_ids(b, k.ids, k.cap);
            return FS_OK;
        }
    }
    int64_t *p = FS_REALLOC(b->ids, want * sizeof(int64_t));
    if (!p)
        return FS_ENOMEM;
    b->ids = p;
    b->cap = want;
    return FS_OK;
}

/* Bytes past the ids that may have been written too: dedupe shortens a
 * row after writing it (one row's ids at most), and the page holding the
 * last id must be covered whatever the page size. */
#define WRITTEN_SLACK ((size_t)64 << 10)

void fs_idbuf_free(fs_idbuf *b)
{
    kept_buffer k = {b->ids, b->cap};
    size_t bytes = k.cap * sizeof(int64_t);
    /* Ids are only ever written from the start up: the pages past them are
     * untouched since the buffer was last kept (still discardable) or
     * never touched, so only the written part is discarded -- a barely used
     * big buffer goes back in one short system call, not a walk over it. */
    size_t written = b->n * sizeof(int64_t) + WRITTEN_SLACK;
    memset(b, 0, sizeof(*b));
    if (!k.ids)
        return;
    if (bytes < FS_IDPOOL_MIN_BYTES || bytes > FS_IDPOOL_MAX_BYTES || !pool_on() ||
        fs_pages_discard(k.ids, written < bytes ? written : bytes) != 0) {
        FS_FREE(k.ids);
        return;
    }
    pool_put(k);
}

void fs_idbuf_start_kept(fs_idbuf *b)
{
    if (b->ids)
        return;
    kept_buffer k = pool_take(0, 0, 1);
    *b = (fs_idbuf){k.ids, 0, k.cap};
}

int fs_idbuf_fit(fs_idbuf *b)
{
    if (b->cap * sizeof(int64_t) < FS_IDPOOL_MIN_BYTES || b->n >= b->cap / 8)
        return FS_OK;
    if (b->n == 0) {                 /* no ids: no buffer (a NULL one is valid) */
        fs_idbuf_free(b);
        return FS_OK;
    }
    int64_t *small = FS_MALLOC(b->n * sizeof(int64_t));
    if (!small)
        return FS_ENOMEM;
    move_ids(b, small, b->n);
    return FS_OK;
}

size_t fs_idpool_trim(void)
{
    kept_buffer out[FS_IDPOOL_SLOTS];
    size_t bytes;
    pool_lock();
    memcpy(out, pool, sizeof(pool));
    memset(pool, 0, sizeof(pool));
    bytes = pool_bytes;
    pool_bytes = 0;
    fs_mutex_unlock(&pool_mu);
    for (int i = 0; i < FS_IDPOOL_SLOTS; i++)
        FS_FREE(out[i].ids);
    return bytes;
}

void fs_idpool_status(size_t *buffers, size_t *bytes)
{
    size_t n = 0;
    pool_lock();
    for (int i = 0; i < FS_IDPOOL_SLOTS; i++)
        n += pool[i].ids != NULL;
    *bytes = pool_bytes;
    fs_mutex_unlock(&pool_mu);
    *buffers = n;
}

void fs_idpool_hold_for_test(unsigned ms)
{
    fs_mutex m;
    fs_cond c;
    fs_mutex_init(&m);
    fs_cond_init(&c);
    pool_lock();
    fs_deadline until = fs_deadline_in(ms);
    fs_mutex_lock(&m);
    while (fs_cond_wait_until(&c, &m, &until))      /* nobody signals c: wait out the deadline */
        ;
    fs_mutex_unlock(&m);
    fs_mutex_unlock(&pool_mu);
    fs_cond_destroy(&c);
    fs_mutex_destroy(&m);
}
