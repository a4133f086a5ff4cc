/* sys_smoke.c - a C smoke test of the thread layer (csrc/base/fs_sys.h) and of
 * the core on top of it, built from csrc/: for Windows by
 * `make cross-windows` (run under Wine when Wine is installed), and
 * natively under ThreadSanitizer by `make test-tsan`.  It checks what each
 * side implements on its own: the reader/writer lock under contention, a
 * condition-variable wait with a deadline, threads, once, the thread-exit
 * destructor, and a threaded batch (fs_batch_*) against the same batch on
 * one thread, with writers and the result cache running alongside, and
 * match() from 16 threads beside inserts and removes, the cache on.  Prints
 * "ok" and exits 0, or names the first failed check and exits 1. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_batch.h"
#include "fs_brlock.h"
#include "fs_pool.h"
#include "fs_sys.h"
#include "sublist.h"

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "sys_smoke: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

/* ---- the rwlock: writers bump two counters that readers must see equal */

static fs_rwlock lock;
static long a_count, b_count;
static int torn;

static void hammer(void *arg)
{
    int writer = *(int *)arg;
    for (int i = 0; i < 20000; i++) {
        if (writer) {
            fs_rwlock_wrlock(&lock);
            a_count++;
            b_count++;
            fs_rwlock_wrunlock(&lock);
        } else {
            fs_rwlock_rdlock(&lock);
            if (a_count != b_count)
                torn = 1;
            fs_rwlock_rdunlock(&lock);
        }
    }
}

/* ---- the index's lock (fs_brlock): the same, on its fast and long read
 * sides, the readers reading without pause all the while: a writer gets
 * in between overlapping reads (writers are preferred), or this hangs. */

static fs_brlock blk;
static long c_count, d_count;
static atomic_int blk_torn, blk_writers_left;

static void br_hammer(void *arg)
{
    int role = *(int *)arg;          /* 1 writer, 0 fast reader, 2 long reader */
    if (role == 1) {
        for (int i = 0; i < 5000; i++) {
            fs_brlock_wrlock(&blk);
            c_count++;
            d_count++;
            fs_brlock_wrunlock(&blk);
        }
        atomic_fetch_sub(&blk_writers_left, 1);
        return;
    }
    while (atomic_load(&blk_writers_left) > 0) {
        if (role == 0)
            fs_brlock_rdlock(&blk);
        else
            fs_brlock_rdlock_long(&blk);
        if (c_count != d_count)
            atomic_store(&blk_torn, 1);
        if (role == 0)
            fs_brlock_rdunlock(&blk);
        else
            fs_brlock_rdunlock_long(&blk);
    }
}

/* ---- once, and the thread-specific destructor */

static int once_calls, destroyed;
static fs_once_flag once = FS_ONCE_INIT;
static fs_mutex mu;

static void once_body(void) { once_calls++; }

static void FS_TLS_DESTRUCTOR count_destroyed(void *p)
{
    fs_mutex_lock(&mu);
    destroyed += *(int *)p;
    fs_mutex_unlock(&mu);
}

static fs_tls_key dkey;
static int one = 1;

static void tls_user(void *arg)
{
    (void)arg;
    fs_once(&once, once_body);
    CHECK(fs_tls_get(dkey) == NULL);
    CHECK(fs_tls_set(dkey, &one) == 0);
    CHECK(fs_tls_get(dkey) == &one);
}

/* ---- a threaded batch against the one-thread answer */

static fs_sublist *sl;
static atomic_int stop_writers;

/* One batch against the one-thread answer (want, want_end). */
static fs_strings *smoke_col;
static const fs_idbuf *want;
static const int64_t *want_end;

static int batch_agrees(unsigned threads, size_t block_rows)
{
    size_t n = smoke_col->n;
    int64_t *end = malloc(n * sizeof(int64_t));
    uint8_t *inv = malloc(n);
    fs_idbuf got;
    int ok = 0;
    fs_batch_job *job = end && inv ? fs_batch_start_blocks(sl, NULL, smoke_col, NULL, FS_QUEUES_ALL, 0, threads,
                                                           end, inv, block_rows, n) : NULL;
    if (job) {
        while (!fs_batch_wait(job, 5))
            ;
        if (fs_batch_finish(job, &got) == FS_OK) {
            ok = got.n == want->n && memcmp(end, want_end, n * sizeof(int64_t)) == 0 &&
                 memcmp(got.ids, want->ids, got.n * sizeof(int64_t)) == 0;
            fs_idbuf_free(&got);
        }
    }
    free(end);
    free(inv);
    return ok;
}

/* Batches from another caller thread, beside the main one's: the pool
 * serves both. */
static atomic_int side_ok;
static void side_batches(void *arg)
{
    (void)arg;
    int ok = 1;
    for (int i = 0; i < 6; i++)
        ok &= batch_agrees(i % 2 ? 5 : 16, (size_t)(i % 4));
    atomic_store(&side_ok, ok);
}

static void writer(void *arg)
{
    (void)arg;
    char f[64];
    fs_error err;
    for (int i = 0; !atomic_load(&stop_writers); i = (i + 1) % 500) {
        int n = snprintf(f, sizeof f, "churn.%d.>", i);
        fs_spec s = {f, (size_t)n, NULL, 0, 1000000 + i};
        fs_sublist_insert(sl, &s, &err);
        fs_sublist_remove(sl, &s, &err);
    }
}

/* ---- match() from 16 threads, the cache on, beside inserts and removes.
 * The paths the Python layer takes (fs_sublist_match_small: a first call
 * that walks unless a writer is there, or that answers from the cache
 * only; then, if it could not answer, the walk that waits), every answer checked against the one taken
 * before the threads started: the writers' filters either match no
 * subject ("churn.N.>") or add exactly one id (TOGGLE_ID, "orders.>"),
 * which is taken out before comparing. */
enum { MATCHERS = 16, MATCH_SUBJECTS = 800, MATCH_ROUNDS = 3, TOGGLE_ID = 777777 };
static char msubj[MATCH_SUBJECTS][32];
static size_t msubj_len[MATCH_SUBJECTS];
static int64_t mwant[MATCH_SUBJECTS][8];
static size_t mwant_n[MATCH_SUBJECTS];
static atomic_int match_bad;
static atomic_ullong match_calls;

/* The plain ids of one match() of subject k, TOGGLE_ID left out, into
 * ids (room for 8).  Their count, or -1 on an error. */
static long match_one(int k, int64_t *ids)
{
    int64_t small[4];
    size_t n = 0;
    fs_workspace spare, *w = NULL;
    fs_error err;
    int how = (k & 1) ? FS_MATCH_NO_WAIT : FS_MATCH_CACHE_ONLY;
    int rc = fs_sublist_match_small(sl, msubj[k], msubj_len[k], small, 4, &n, &spare, &w, &err, how);
    if (rc == FS_MATCH_WALK)
        rc = fs_sublist_match_small(sl, msubj[k], msubj_len[k], small, 4, &n, &spare, &w, &err,
                                    FS_MATCH_WAIT);
    if (rc != FS_OK)
        return -1;
    const int64_t *got = w ? w->r.ids : small;
    size_t ngot = w ? w->r.nplain : n;
    long m = 0;
    for (size_t i = 0; i < ngot; i++)
        if (got[i] != TOGGLE_ID && m < 8)
            ids[m++] = got[i];
    if (w)
        fs_workspace_release(w, &spare);
    return m;
}

static void matcher(void *arg)
{
    int first = *(int *)arg;
    unsigned long long calls = 0;
    for (int r = 0; r < MATCH_ROUNDS; r++)
        for (int i = 0; i < MATCH_SUBJECTS; i++) {
            int k = (first + i * 7) % MATCH_SUBJECTS;
            int64_t ids[8];
            long m = match_one(k, ids);
            calls++;
            if (m != (long)mwant_n[k] || memcmp(ids, mwant[k], sizeof(int64_t) * (size_t)m) != 0)
                atomic_store(&match_bad, 1);
        }
    atomic_fetch_add(&match_calls, calls);
}

static void toggler(void *arg)
{
    (void)arg;
    fs_error err;
    fs_spec s = {"orders.>", 8, NULL, 0, TOGGLE_ID};
    while (!atomic_load(&stop_writers)) {
        fs_sublist_insert(sl, &s, &err);
        fs_sublist_remove(sl, &s, &err);
    }
}

int main(void)
{
    /* rwlock: 2 writers, 2 readers */
    CHECK(fs_rwlock_init(&lock) == 0);
    fs_thread t[4];
    int roles[4] = {1, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        CHECK(fs_thread_start(&t[i], hammer, &roles[i]) == 0);
    for (int i = 0; i < 4; i++)
        fs_thread_join(&t[i]);
    CHECK(a_count == 40000 && b_count == 40000 && !torn);
    fs_rwlock_destroy(&lock);

    /* the index's lock: 2 writers, 3 fast readers, 1 long reader */
    {
        CHECK(fs_brlock_init(&blk) == 0);
        atomic_store(&blk_writers_left, 2);
        fs_thread bt[6];
        int broles[6] = {1, 0, 0, 1, 0, 2};
        for (int i = 0; i < 6; i++)
            CHECK(fs_thread_start(&bt[i], br_hammer, &broles[i]) == 0);
        for (int i = 0; i < 6; i++)
            fs_thread_join(&bt[i]);
        CHECK(c_count == 10000 && d_count == 10000 && !atomic_load(&blk_torn));
        fs_brlock_destroy(&blk);
    }

    /* a deadline wait that nobody signals times out, and not early */
    fs_mutex_init(&mu);
    fs_cond cv;
    fs_cond_init(&cv);
    fs_deadline until = fs_deadline_in(50);
    fs_mutex_lock(&mu);
    int woken = 0;
    while (fs_cond_wait_until(&cv, &mu, &until))
        woken++;
    CHECK(woken < 1000);
    CHECK(fs_cond_wait_until(&cv, &mu, &until) == 0);   /* past: at once */
    fs_mutex_unlock(&mu);

    /* once runs once; each thread's destructor runs at its exit */
    CHECK(fs_tls_create(&dkey, count_destroyed) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(fs_thread_start(&t[i], tls_user, NULL) == 0);
    for (int i = 0; i < 4; i++)
        fs_thread_join(&t[i]);
    CHECK(once_calls == 1);
    CHECK(destroyed == 4);
    fs_cond_destroy(&cv);

    /* the core: 2000 filters, 20000 subjects, 4 threads vs 1, writers on */
    sl = fs_sublist_new(FS_NATS);
    CHECK(sl != NULL);
    CHECK(fs_sublist_set_cache(sl, 1024) == FS_OK);
    fs_error err;
    char buf[64];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(buf, sizeof buf, i % 3 ? "orders.%d.*" : "orders.%d.created", i % 700);
        fs_spec s = {buf, (size_t)n, NULL, 0, i};
        CHECK(fs_sublist_insert(sl, &s, &err) >= 0);
    }
    enum { N = 20000 };
    static char text[N][32];
    static const char *ptrs[N];
    static size_t lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = (size_t)snprintf(text[i], sizeof text[i], "orders.%d.created", (i * 7) % 800);
        ptrs[i] = text[i];
    }
    fs_strings col = {FS_STR_PTRS, N, ptrs, lens, NULL, NULL, NULL, NULL, 0};
    fs_thread w[2];
    for (int i = 0; i < 2; i++)
        CHECK(fs_thread_start(&w[i], writer, NULL) == 0);
    fs_idbuf out[2];
    static int64_t row_end[2][N];
    static uint8_t invalid[2][N];
    for (int k = 0; k < 2; k++) {
        fs_batch_job *job = fs_batch_start(sl, &col, NULL, FS_QUEUES_ALL, 0, k ? 4 : 1, row_end[k], invalid[k]);
        CHECK(job != NULL);
        while (!fs_batch_wait(job, 5))
            ;
        CHECK(fs_batch_finish(job, &out[k]) == FS_OK);
    }
    /* Rows fed while the threads wait for them (as a Python list's are
     * while it is converted): the same output.  Then a job cancelled while
     * its threads wait for rows that never come: it ends, cancelled. */
    {
        static int64_t fed_end[N];
        static uint8_t fed_invalid[N];
        fs_idbuf fed_out;
        fs_batch_job *job = fs_batch_start_blocks(sl, NULL, &col, NULL, FS_QUEUES_ALL, 0, 4, fed_end, fed_invalid,
                                                  64, 0);
        CHECK(job != NULL);
        for (size_t fed = 1000; fed < N; fed += 1000)
            fs_batch_feed(job, fed);
        fs_batch_feed(job, N);
        while (!fs_batch_wait(job, 5))
            ;
        CHECK(fs_batch_finish(job, &fed_out) == FS_OK);
        CHECK(fed_out.n == out[0].n && memcmp(fed_end, row_end[0], sizeof fed_end) == 0);
        CHECK(memcmp(fed_out.ids, out[0].ids, sizeof(int64_t) * fed_out.n) == 0);
        fs_idbuf_free(&fed_out);

        job = fs_batch_start_blocks(sl, NULL, &col, NULL, FS_QUEUES_ALL, 0, 4, fed_end, fed_invalid, 64, 1000);
        CHECK(job != NULL);
        CHECK(!fs_batch_wait(job, 20));      /* the rows after 1,000 never come */
        fs_batch_cancel(job);
        while (!fs_batch_wait(job, 5))
            ;
        CHECK(fs_batch_finish(job, &fed_out) == FS_ECANCELLED && fed_out.n == 0);
    }
    /* The pool: 16 workers (more than the CPUs), tiny fixed blocks and
     * sized ones, the look-back over every size; after the first batch at
     * 16, no thread is started, by this caller or by two side by side. */
    {
        smoke_col = &col;
        want = &out[0];
        want_end = row_end[0];
        CHECK(batch_agrees(16, 1));
        unsigned pool_threads, idle;
        fs_pool_status(&pool_threads, &idle);
        CHECK(pool_threads >= 16);
        static const size_t sizes[] = {1, 2, 3, 0, 7, 0};
        for (int i = 0; i < 12; i++)
            CHECK(batch_agrees(i % 3 ? 16 : 3, sizes[i % 6]));
        unsigned now;
        fs_pool_status(&now, &idle);
        CHECK(now == pool_threads);
        fs_thread side;
        CHECK(fs_thread_start(&side, side_batches, NULL) == 0);
        for (int i = 0; i < 6; i++)
            CHECK(batch_agrees(i % 2 ? 4 : 16, (size_t)(i % 4)));
        fs_thread_join(&side);
        CHECK(atomic_load(&side_ok));
    }
    /* match() from 16 threads, the cache on (1,024 entries for 800
     * subjects: hits, and misses after each invalidation), the churning
     * writers and a toggler of a matching filter running; then stats()
     * counts exactly the calls made (hits + misses, and matches). */
    {
        for (int k = 0; k < MATCH_SUBJECTS; k++) {
            msubj_len[k] = (size_t)snprintf(msubj[k], sizeof msubj[k], "orders.%d.created", k);
            long m = match_one(k, mwant[k]);
            CHECK(m >= 0);
            mwant_n[k] = (size_t)m;
        }
        fs_stats before, after;
        fs_sublist_stats(sl, &before);
        fs_thread tg, mt[MATCHERS];
        int firsts[MATCHERS];
        CHECK(fs_thread_start(&tg, toggler, NULL) == 0);
        for (int i = 0; i < MATCHERS; i++) {
            firsts[i] = i * 50;
            CHECK(fs_thread_start(&mt[i], matcher, &firsts[i]) == 0);
        }
        for (int i = 0; i < MATCHERS; i++)
            fs_thread_join(&mt[i]);
        CHECK(!atomic_load(&match_bad));
        fs_sublist_stats(sl, &after);
        unsigned long long calls = atomic_load(&match_calls);
        CHECK(calls == (unsigned long long)MATCHERS * MATCH_ROUNDS * MATCH_SUBJECTS);
        CHECK(after.matches - before.matches == calls);
        CHECK((after.cache.hits + after.cache.misses) - (before.cache.hits + before.cache.misses) == calls);
        CHECK(after.cache.hits > before.cache.hits);
        atomic_store(&stop_writers, 1);
        fs_thread_join(&tg);
    }
    atomic_store(&stop_writers, 1);
    for (int i = 0; i < 2; i++)
        fs_thread_join(&w[i]);
    CHECK(out[0].n > 0 && out[0].n == out[1].n);
    CHECK(memcmp(row_end[0], row_end[1], sizeof row_end[0]) == 0);
    CHECK(memcmp(out[0].ids, out[1].ids, sizeof(int64_t) * out[0].n) == 0);
    fs_idbuf_free(&out[0]);
    fs_idbuf_free(&out[1]);
    fs_sublist_free(sl);
    puts("ok");
    return 0;
}
