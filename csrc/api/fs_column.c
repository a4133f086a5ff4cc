/* fs_column.c - match_many's driver: a column of parts matched on the
 * calling thread a chunk at a time, or on the pool's threads (fs_batch.h),
 * the parts' ids one after another in one buffer (see sublist.h).
 *
 *   parts:   [ list / chunk ][ chunk ][ dictionary chunk ] ...
 *   row_end: [ ............ n rows, ids through each row ............ ]
 *   ids:     [ part 0's ][ part 1's ][ each row its value's ids ] ...
 *
 * The caller's hooks run on the calling thread only, with its lock held
 * (released only around a chunk matched here or a wait for the threads),
 * so a Python list is converted under the interpreter lock throughout. */
#include "sublist.h"

#include <string.h>

#include "fs_alloc.h"
#include "fs_pool.h"
#include "fs_sys.h"

/* A batch of at least this many rows starts its output in the largest
 * buffer the id pool keeps (fs_idbuf.h); smaller ones never touch the
 * pool, so a loop of tiny batches pays nothing for it. */
#define KEPT_BUFFER_ROWS 4096
/* How long a wait for the threads lasts before the caller is polled. */
#define POLL_MS 50

typedef struct {
    fs_sublist *sl, *also;
    const fs_column_options *opt;
    const fs_column_hooks *h;
    size_t rows;                  /* the whole column's */
} column_call;

static void release(const column_call *c)
{
    if (c->h->release)
        c->h->release(c->h->ctx);
}

static void acquire(const column_call *c)
{
    if (c->h->acquire)
        c->h->acquire(c->h->ctx);
}

static int poll(const column_call *c)
{
    return c->h->poll ? c->h->poll(c->h->ctx) : 0;
}

/* Rows of part k through end (at most its rows) made ready: FS_OK, or
 * FS_ECANCELLED when the caller's fill said stop. */
static int fill(const column_call *c, const fs_column_part *p, size_t k, size_t end, size_t *filled)
{
    if (end > p->rows.n)
        end = p->rows.n;
    if (*filled >= end)
        return FS_OK;
    if (!c->h->fill)
        return FS_ECANCELLED;     /* rows no one can fill: no answer for them */
    return c->h->fill(c->h->ctx, k, end, filled) ? FS_ECANCELLED : FS_OK;
}

/* The threads a part of rows gets: never more than the processors (more
 * would only take turns on them, and a block waiting its turn to be
 * placed holds the others up: heavy at threads=4 on 2 CPUs ran at 0.61x
 * of one thread without this cap), and never fewer than
 * min_rows_per_thread rows a thread, where handing work to the pool's
 * threads would cost more than it gains. */
static unsigned threads_for(const fs_column_options *opt, size_t rows)
{
    if (opt->threads <= 1)
        return 1;
    size_t per = fs_column_tuned.min_rows_per_thread ? fs_column_tuned.min_rows_per_thread : FS_COLUMN_CHUNK_ROWS;
    size_t n = opt->threads;
    size_t cpus = fs_column_cpus();
    if (n > cpus)
        n = cpus;
    if (n > rows / per)
        n = rows / per;
    return n > 1 ? (unsigned)n : 1;
}

/* A part on the calling thread, a chunk at a time: the caller's lock let
 * go while each chunk is matched, polled after each.  Every row is filled
 * in first (a list as it was at the call, whatever the caller's other
 * threads do to it meanwhile). */
static int match_here(const column_call *c, const fs_column_part *p, size_t k, const fs_strings *keys,
                      int64_t *ends, uint8_t *invalid, fs_idbuf *ids)
{
    size_t n = p->rows.n, filled = p->filled;
    if (!ids->ids && c->rows >= KEPT_BUFFER_ROWS)
        fs_idbuf_start_kept(ids);
    int rc = fill(c, p, k, n, &filled);
    for (size_t begin = 0, end; rc == FS_OK && begin < n; begin = end) {
        end = begin + FS_COLUMN_CHUNK_ROWS < n ? begin + FS_COLUMN_CHUNK_ROWS : n;
        release(c);
        rc = fs_match_rows(c->sl, c->also, &p->rows, keys, begin, end, c->opt->queues, c->opt->dedupe,
                           ends + begin, invalid + begin, ids, NULL);
        acquire(c);
        if (rc == FS_OK && poll(c))
            rc = FS_ECANCELLED;
    }
    return rc;
}

/* part's ids after ids' (part's row ends, n of them at ends, counted from
 * 0, moved after them); part is emptied either way.  FS_OK or FS_ENOMEM. */
static int append(fs_idbuf *ids, fs_idbuf *part, int64_t *ends, size_t n)
{
    int rc = FS_OK;
    if (!ids->ids && ids->n == 0) {
        *ids = *part;
        memset(part, 0, sizeof(*part));
        return FS_OK;
    }
    if (part->n && fs_idbuf_room(ids, part->n) != FS_OK) {
        rc = FS_ENOMEM;
    } else if (part->n) {
        memcpy(ids->ids + ids->n, part->ids, sizeof(int64_t) * part->n);
    }
    if (rc == FS_OK) {
        for (size_t i = 0; i < n; i++)
            ends[i] += (int64_t)ids->n;
        ids->n += part->n;
    }
    fs_idbuf_free(part);
    return rc;
}

/* A part on nthreads of the pool's threads (fs_batch_start_blocks), its
 * ids appended to ids.  Its rows are filled in here, fed_rows at a time,
 * while the threads match those before; then the threads are waited for
 * POLL_MS at a time, the caller polled between.  On any stop the job is
 * cancelled and its threads waited for before this returns. */
static int match_threads(const column_call *c, const fs_column_part *p, size_t k, const fs_strings *keys,
                         unsigned nthreads, int64_t *ends, uint8_t *invalid, fs_idbuf *ids)
{
    size_t n = p->rows.n, filled = p->filled;
    size_t feed = fs_column_tuned.feed_rows ? fs_column_tuned.feed_rows : FS_COLUMN_FEED_ROWS;
    if (fill(c, p, k, feed, &filled) != FS_OK)
        return FS_ECANCELLED;
    fs_batch_job *job = fs_batch_start_blocks(c->sl, c->also, &p->rows, keys, c->opt->queues, c->opt->dedupe,
                                              nthreads, ends, invalid, fs_column_tuned.block_rows, filled);
    if (!job)
        return FS_ENOMEM;
    int stop = 0;
    while (!stop && filled < n) {
        stop = fill(c, p, k, filled + feed, &filled) != FS_OK;
        if (!stop)
            fs_batch_feed(job, filled);
    }
    for (int done = 0; !stop && !done;) {
        release(c);
        done = fs_batch_wait(job, POLL_MS);
        acquire(c);
        stop = poll(c) != 0;
    }
    if (stop)
        fs_batch_cancel(job);
    fs_idbuf part = {NULL, 0, 0};
    release(c);
    int rc = fs_batch_finish(job, &part);
    acquire(c);
    if (stop) {
        fs_idbuf_free(&part);
        return FS_ECANCELLED;
    }
    return rc == FS_OK ? append(ids, &part, ends, n) : rc;
}

static int match_part(const column_call *c, const fs_column_part *p, size_t k, const fs_strings *keys,
                      int64_t *ends, uint8_t *invalid, fs_idbuf *ids);

/* A dictionary part: its values matched as a column of their own (no
 * keys: a row's ids depend only on its subject), then each row takes its
 * value's ids; a null index is a null row. */
static int match_dictionary(const column_call *c, const fs_column_part *p, int64_t *ends, uint8_t *invalid,
                            fs_idbuf *ids)
{
    const fs_arrow_indices *x = p->dict;
    size_t nv = p->values->n;
    fs_column_part vp = {*p->values, p->values->n, NULL, NULL};
    column_call vc = *c;
    vc.rows = nv;
    fs_idbuf vids = {NULL, 0, 0};
    int64_t *vend = FS_MALLOC(sizeof(int64_t) * (nv + 1));
    uint8_t *vinv = FS_MALLOC(nv ? nv : 1);
    int rc = vend && vinv ? FS_OK : FS_ENOMEM;
    if (rc == FS_OK) {
        vend[0] = 0;
        rc = match_part(&vc, &vp, 0, NULL, vend + 1, vinv, &vids);
    }
    size_t total = ids->n, start = ids->n;
    int64_t v;
    for (int64_t i = 0; rc == FS_OK && i < x->length; i++) {
        if (!fs_arrow_index_at(x, i, &v)) {
            invalid[i] = 1;
        } else {
            invalid[i] = vinv[v];
            total += (size_t)(vend[v + 1] - vend[v]);
        }
        ends[i] = (int64_t)total;
    }
    if (rc == FS_OK && total > start && fs_idbuf_room(ids, total - start) != FS_OK)
        rc = FS_ENOMEM;
    if (rc == FS_OK && total > start) {
        release(c);
        for (int64_t i = 0; i < x->length; i++) {
            if (!fs_arrow_index_at(x, i, &v) || vend[v + 1] == vend[v])
                continue;
            size_t len = (size_t)(vend[v + 1] - vend[v]);
            memcpy(ids->ids + ids->n, vids.ids + vend[v], sizeof(int64_t) * len);
            ids->n += len;
        }
        acquire(c);
    }
    fs_idbuf_free(&vids);
    FS_FREE(vend);
    FS_FREE(vinv);
    return rc;
}

/* One part, its rows at ends and invalid, its ids appended to ids. */
static int match_part(const column_call *c, const fs_column_part *p, size_t k, const fs_strings *keys,
                      int64_t *ends, uint8_t *invalid, fs_idbuf *ids)
{
    if (p->dict)
        return match_dictionary(c, p, ends, invalid, ids);
    unsigned nthreads = threads_for(c->opt, p->rows.n);
    if (nthreads == 1)
        return match_here(c, p, k, keys, ends, invalid, ids);
    return match_threads(c, p, k, keys, nthreads, ends, invalid, ids);
}

int fs_match_column(fs_sublist *sl, fs_sublist *also, const fs_column_part *parts, size_t nparts,
                    const fs_strings *keys, const fs_column_options *opt, const fs_column_hooks *hooks,
                    int64_t *row_end, uint8_t *invalid, fs_idbuf *ids)
{
    static const fs_column_hooks none = {NULL, NULL, NULL, NULL, NULL};
    column_call c = {sl, also, opt, hooks ? hooks : &none, 0};
    for (size_t k = 0; k < nparts; k++)
        c.rows += parts[k].rows.n;
    int rc = FS_OK;
    for (size_t k = 0, base = 0; rc == FS_OK && k < nparts; base += parts[k++].rows.n) {
        fs_strings kpart;
        if (keys)
            kpart = fs_strings_slice(keys, base, parts[k].rows.n);
        rc = match_part(&c, &parts[k], k, keys ? &kpart : NULL, row_end + base, invalid ? invalid + base : NULL,
                        ids);
    }
    if (rc == FS_OK)
        rc = fs_idbuf_fit(ids);
    if (rc != FS_OK)
        fs_idbuf_free(ids);
    return rc;
}

unsigned fs_column_cpus(void)
{
    return fs_column_tuned.cpus ? fs_column_tuned.cpus : fs_cpus();
}

unsigned fs_index_threads(void)
{
    unsigned t = fs_column_cpus();
    return t < FS_INDEX_THREADS_MAX ? t : FS_INDEX_THREADS_MAX;
}

void fs_column_pool_status(unsigned *threads, unsigned *idle)
{
    fs_pool_status(threads, idle);
}

unsigned long long fs_column_workers_crowded_out(void)
{
    return fs_batch_workers_crowded_out();
}
