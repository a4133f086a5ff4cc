/* fs_tuning.c - the table of the core's settings and counters for tests
 * and measurements (fs_tuning.h), each read and written through functions
 * of its own type, so that a size_t, an int and an enum are all set by a
 * checked int64_t. */
#include "fs_tuning.h"

#include <string.h>

#include "sublist.h"

fs_match_how fs_match_first_how = FS_MATCH_NO_WAIT;
fs_column_policy fs_column_tuned;
int64_t fs_image_room = -1;
size_t fs_image_parallel_min = (size_t)16 << 20;
/* Measured (2 threads, light-like rows, only the largest table threaded,
 * medians of 7): at 64,000 rows threads took 1.05-1.06x one thread's
 * time, at 128,000 0.91-1.01x, at 256,000 0.81-0.94x, at 512,000
 * 0.77-0.79x; with every small table threaded too, 1.9-2.4x at 2,000. */
#ifndef FS_IMAGE_WRITE_PAR_ENTRIES
#define FS_IMAGE_WRITE_PAR_ENTRIES 131072u
#endif
size_t fs_image_write_par_entries = FS_IMAGE_WRITE_PAR_ENTRIES;
atomic_uint_least64_t fs_image_write_threaded;

/* The n passed to fs_fault_inject last, for reading back. */
static int64_t alloc_fail_nth;

static int64_t get_cache_only_first(void) { return fs_match_first_how == FS_MATCH_CACHE_ONLY; }
static void set_cache_only_first(int64_t v) { fs_match_first_how = v ? FS_MATCH_CACHE_ONLY : FS_MATCH_NO_WAIT; }
static int64_t get_image_parallel_min(void) { return (int64_t)fs_image_parallel_min; }
static void set_image_parallel_min(int64_t v) { fs_image_parallel_min = (size_t)v; }
static int64_t get_image_write_par_entries(void) { return (int64_t)fs_image_write_par_entries; }
static void set_image_write_par_entries(int64_t v) { fs_image_write_par_entries = (size_t)v; }
static int64_t get_merge_simd(void) { return fs_merge_simd; }
static void set_merge_simd(int64_t v) { fs_merge_simd = (int)v; }
static int64_t get_min_rows(void) { return (int64_t)fs_column_tuned.min_rows_per_thread; }
static void set_min_rows(int64_t v) { fs_column_tuned.min_rows_per_thread = (size_t)v; }
static int64_t get_block_rows(void) { return (int64_t)fs_column_tuned.block_rows; }
static void set_block_rows(int64_t v) { fs_column_tuned.block_rows = (size_t)v; }
static int64_t get_cpus(void) { return fs_column_tuned.cpus; }
static void set_cpus(int64_t v) { fs_column_tuned.cpus = (unsigned)v; }
static int64_t get_feed_rows(void) { return (int64_t)fs_column_tuned.feed_rows; }
static void set_feed_rows(int64_t v) { fs_column_tuned.feed_rows = (size_t)v; }
static int64_t get_image_room(void) { return fs_image_room; }
static void set_image_room(int64_t v) { fs_image_room = v; }
static int64_t get_fail_nth(void) { return alloc_fail_nth; }
static void set_fail_nth(int64_t v)
{
    alloc_fail_nth = v;
    fs_fault_inject((uint64_t)v);
}

static int64_t get_image_write_threaded(void) { return (int64_t)atomic_load(&fs_image_write_threaded); }
static int64_t get_alloc_counted(void) { return (int64_t)fs_fault_counted(); }
static int64_t get_alloc_failed(void) { return (int64_t)fs_fault_injected(); }
static int64_t get_mapping_faults(void) { return (int64_t)fs_fault_revocations(); }
static int64_t get_crowded_out(void) { return (int64_t)fs_column_workers_crowded_out(); }
static int64_t get_pool_threads(void)
{
    unsigned threads, idle;
    fs_column_pool_status(&threads, &idle);
    return threads;
}
static int64_t get_pool_idle(void)
{
    unsigned threads, idle;
    fs_column_pool_status(&threads, &idle);
    return idle;
}
static int64_t get_idpool_buffers(void)
{
    size_t buffers, bytes;
    fs_idpool_status(&buffers, &bytes);
    return (int64_t)buffers;
}
static int64_t get_idpool_bytes(void)
{
    size_t buffers, bytes;
    fs_idpool_status(&buffers, &bytes);
    return (int64_t)bytes;
}

typedef struct {
    const char *name;
    int64_t (*get)(void);
    void (*set)(int64_t v);       /* NULL: a counter */
    int64_t lo, hi;               /* set's range */
} knob;

static const knob knobs[] = {
    /* settings */
    {"match_cache_only_first", get_cache_only_first, set_cache_only_first, 0, 1},
    {"image_parallel_min", get_image_parallel_min, set_image_parallel_min, 0, INT64_MAX},
    {"image_write_par_entries", get_image_write_par_entries, set_image_write_par_entries, 0, INT64_MAX},
    {"merge_simd", get_merge_simd, set_merge_simd, 0, 1},
    {"column_min_rows_per_thread", get_min_rows, set_min_rows, 0, INT64_MAX},
    {"column_block_rows", get_block_rows, set_block_rows, 0, INT64_MAX},
    {"column_cpus", get_cpus, set_cpus, 0, 1 << 20},
    {"column_feed_rows", get_feed_rows, set_feed_rows, 0, INT64_MAX},
    {"image_room", get_image_room, set_image_room, -1, INT64_MAX},
    {"alloc_fail_nth", get_fail_nth, set_fail_nth, 0, INT64_MAX},
    /* counters */
    {"alloc_counted", get_alloc_counted, NULL, 0, 0},
    {"image_write_threaded", get_image_write_threaded, NULL, 0, 0},
    {"alloc_failed", get_alloc_failed, NULL, 0, 0},
    {"mapping_faults", get_mapping_faults, NULL, 0, 0},
    {"workers_crowded_out", get_crowded_out, NULL, 0, 0},
    {"pool_threads", get_pool_threads, NULL, 0, 0},
    {"pool_idle", get_pool_idle, NULL, 0, 0},
    {"idpool_buffers", get_idpool_buffers, NULL, 0, 0},
    {"idpool_bytes", get_idpool_bytes, NULL, 0, 0},
};
#define NKNOBS (sizeof(knobs) / sizeof(knobs[0]))

static const knob *find(const char *name)
{
    for (size_t i = 0; i < NKNOBS; i++)
        if (strcmp(knobs[i].name, name) == 0)
            return &knobs[i];
    return NULL;
}

int fs_tuning_get(const char *name, int64_t *value)
{
    const knob *k = find(name);
    if (!k)
        return FS_EINVAL;
    *value = k->get();
    return FS_OK;
}

int fs_tuning_set(const char *name, int64_t value)
{
    const knob *k = find(name);
    if (!k || !k->set || value < k->lo || value > k->hi)
        return FS_EINVAL;
    k->set(value);
    return FS_OK;
}
