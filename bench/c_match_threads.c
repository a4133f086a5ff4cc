/* c_match_threads.c - match() from T threads at the C level (the path the
 * Python layer takes: fs_sublist_match_small, cache-only look-up first),
 * with no Python in the way: whether the core's read path scales.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -pthread -Icsrc/base -Icsrc/rules -Icsrc/index -Icsrc/match -Icsrc/batch -Icsrc/api -Icsrc/serial $(find csrc -name '*.c') bench/c_match_threads.c -o c_match_threads
 *   ./c_match_threads [max_threads] [cache_size]
 *
 * 10,000 filters, the same 1,000 hot subjects in every thread (each its
 * own copy: the working set stays 1,000 whatever T, as a cached workload's
 * does); prints ns per call (wall
 * over all calls) and the speed-up over one thread for T = 1, 2, 4, ... */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fs_sys.h"
#include "sublist.h"

enum { FILTERS = 10000, HOT = 1000, CALLS = 2000000 };
static fs_sublist *sl;
static atomic_int go;
static char subj[64][HOT][40];
static size_t subj_len[64][HOT];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct { int t, n; } job;

static void worker(void *arg)
{
    job *j = arg;
    while (!atomic_load(&go))
        ;
    int64_t ids[32];
    size_t n;
    fs_workspace spare, *w;
    fs_error err;
    for (int i = 0; i < j->n; i++) {
        int k = i % HOT;
#ifdef FS_MATCH_WALK
        int rc = fs_sublist_match_small(sl, subj[j->t][k], subj_len[j->t][k], ids, 32, &n, &spare, &w, &err, 0);
        if (rc == FS_MATCH_WALK)
            rc = fs_sublist_match_small(sl, subj[j->t][k], subj_len[j->t][k], ids, 32, &n, &spare, &w, &err, 1);
#else   /* a core from before the cache-only look-up (for comparing) */
        int rc = fs_sublist_match_small(sl, subj[j->t][k], subj_len[j->t][k], ids, 32, &n, &spare, &w, &err);
#endif
        if (rc != FS_OK)
            abort();
        if (w)
            fs_workspace_release(w, &spare);
    }
}

static double run(int threads)
{
    fs_thread th[64];
    job jobs[64];
    atomic_store(&go, 0);
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){t, CALLS / threads};
        if (fs_thread_start(&th[t], worker, &jobs[t]) != 0)
            abort();
    }
    double t0 = now();
    atomic_store(&go, 1);
    for (int t = 0; t < threads; t++)
        fs_thread_join(&th[t]);
    return (now() - t0) / (double)((CALLS / threads) * threads) * 1e9;
}

int main(int argc, char **argv)
{
    int maxt = argc > 1 ? atoi(argv[1]) : 16;
    size_t cache = argc > 2 ? (size_t)atol(argv[2]) : 4096;
    if (maxt > 64)
        maxt = 64;
    sl = fs_sublist_new(FS_NATS);
    if (!sl || (cache && fs_sublist_set_cache(sl, cache) != FS_OK))
        return 1;
    fs_error err;
    char f[64];
    for (int i = 0; i < FILTERS; i++) {
        int n = snprintf(f, sizeof f, i % 4 ? "svc.%d.%d.evt" : "svc.%d.%d.*", i % 300, i);
        fs_spec s = {f, (size_t)n, NULL, 0, i};
        if (fs_sublist_insert(sl, &s, &err) < 0)
            return 1;
    }
    for (int t = 0; t < 64; t++)
        for (int k = 0; k < HOT; k++)
            subj_len[t][k] = (size_t)snprintf(subj[t][k], sizeof subj[t][k], "svc.%d.%d.evt", k % 300,
                                              (k * 37) % FILTERS);
    run(1);                                   /* warm the cache */
    double base = 0;
    printf("cache %zu, %d filters, %d hot subjects per thread\n", cache, FILTERS, HOT);
    for (int t = 1; t <= maxt; t *= 2) {
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double x = run(t);
            if (x < best)
                best = x;
        }
        if (t == 1)
            base = best;
        printf("T=%-2d %7.1f ns/call (best of 5), speed-up %.2fx\n", t, best, base / best);
    }
    fs_sublist_free(sl);
    return 0;
}
