/* sublist.h - the subscription index.
 *
 *   fs_sublist ─┬─ literals: table  key(all tokens) ─► entry
 *               │                   ("orders.eu.created"), + a bitmap
 *               ├─ shapes:   shape[j] (fs_shape.h), one table each
 *               │     (3, {1}, -)    key(literal tokens) ─► entry
 *               │     (2, {},  rest) key(literal tokens) ─► entry
 *               │     + a bitmap of the keys (L2-sized): most probes
 *               │       stop there, before touching the table
 *               │   probe[hidden][k]: the shapes a subject of k tokens
 *               │     probes (hidden: the tokenizer's '$' decision)
 *               ├─ root ─► trie (fs_trie.c): what no table holds
 *               │   hidden_roots: its '$' children (MQTT), in memory
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
 * Files, one job each, in one folder per layer (top first; a file
 * includes and calls only its own layer and those below, and no two files
 * call each other -- tests/test_layout.py checks it, docs/design.md's
 * "Layers of the C core" draws it):
 *
 *   serial/  the mapped image (version 4): fs_image.c opens it,
 *            fs_image_write.c writes it, fs_image_verify.c checks it in
 *            full, fs_image_thaw.c turns it back into a built index;
 *            versions 1 and 2: fs_serial.c loads, fs_serial_dump.c writes;
 *            fs_header.c the file header, fs_entry.h the checks of a
 *            stored entry, fs_checksum.[ch] the format's checksum (and
 *            its stream, fed piece by piece); they build indexes through
 *            this API, which declares their calls
 *   api/     sublist.c: this API -- creates and frees an index, validates,
 *            locks and routes the writes (insert, remove, bulk; the cache
 *            invalidated), owns the literal table; fs_column.c a column
 *            matched at once (match_many's driver: threads, chunks, the
 *            CSR gather); fs_tuning.c the settings and counters of tests
 *            and measurements, one table by name
 *   batch/   fs_batch.c the batch pipeline, fs_pool.c the worker threads,
 *            fs_idbuf.c its output buffers and the pool of released big ones
 *   match/   fs_walk.[ch] the one walk (probes; a mapped image's live
 *            part), fs_groups.h a row's merged queue groups, fs_result.c
 *            results, fs_cache.c the cache, fs_match.c one subject (and
 *            fs_match.h, the match calls of this API), fs_reverse.c reverse
 *            matching, fs_workspace.c per-call working memory
 *   index/   fs_layout.[ch] the layout and reading it (a mapped image's
 *            offsets checked, its live part's masked set), fs_index.h the
 *            layer's API (shapes), fs_scratch.h the types the calls share,
 *            fs_shape.c the shapes, fs_trie.c the trie (and pruning it),
 *            fs_node.c nodes and their subscriptions, fs_table.c the hash
 *            tables, fs_slab.c the blocks nodes are carved from, fs_mem.c
 *            growing arrays and an index's memory account (memory_bytes)
 *   arrow/   fs_arrow.c a column of strings read from Arrow's C Data
 *            Interface, every read checked (the Python layer's door for
 *            Arrow columns; nothing in the core calls it), fs_arrow_export.c
 *            the exports it holds for that layer, chunks read as one column
 *   rules/   fs_dialect.c the dialects' rules (every difference between
 *            them is a field of the table), fs_token.c tokens (validated as
 *            they are cut) and one filter against a subject or a filter,
 *            fs_utf8.h the UTF-8 rule (borrowed), fs_strings.h a column of
 *            strings, fs_route.c the sharded fan-out's route keys
 *   base/    fs_status.h the status codes of the whole core, fs_bits.h the
 *            compiler built-ins, fs_alloc.c the one door for memory, fs_sys.c
 *            threads and locks (POSIX or Windows), fs_brlock.c the index's
 *            lock (a reader/writer lock whose readers write only their own
 *            thread's stripe), fs_fork.c the fork registry (any lock
 *            registers with it), fs_xxh64.h XXH64 (borrowed, written from
 *            its specification: the format's checksum, the route key),
 *            fs_guard.h an object's close() against the calls in flight
 */
#ifndef FS_SUBLIST_H
#define FS_SUBLIST_H

#include <stddef.h>
#include <stdint.h>

/* The public faces of the layers below, part of this API (the Python
 * layer includes this header and fs_status.h only, tests/test_layout.py):
 * the memory door and its fault injection, the compiler built-ins, the
 * mapped image's SIGBUS guard, threads and pages, close()'s guard against
 * the calls in flight (base/); tokens, a
 * column of strings, the route keys (rules/); the Arrow reader (arrow/);
 * the match calls (match/); the queue modes and the output buffers of a
 * batch (batch/). */
#include "fs_alloc.h"
#include "fs_arrow.h"
#include "fs_batch.h"
#include "fs_bits.h"
#include "fs_cache.h"
#include "fs_fault.h"
#include "fs_guard.h"
#include "fs_idbuf.h"
#include "fs_match.h"
#include "fs_result.h"
#include "fs_route.h"
#include "fs_scratch.h"
#include "fs_shape.h"
#include "fs_status.h"
#include "fs_strings.h"
#include "fs_sys.h"
#include "fs_token.h"
#include "fs_tuning.h"

/* The match calls (fs_sublist_match, _interest, _has_interest,
 * _reverse_match, _match_small) and the per-thread workspace are the match
 * layer's, declared in fs_match.h; the types an index's calls share
 * (fs_spec, fs_scratch, fs_rresult) in fs_scratch.h. */

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
/* The name of dialect number d ("nats", "mqtt", "amqp"), NULL from
 * FS_NDIALECTS on: the one place the names are written. */
const char *fs_dialect_name(int d);
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

void fs_sublist_stats(fs_sublist *sl, fs_stats *st);

/* Give the index a result cache of `capacity` entries, replacing any
 * it had (0: no cache).  FS_OK or FS_ENOMEM (the old cache is kept). */
int fs_sublist_set_cache(fs_sublist *sl, size_t capacity);

/* Is s a valid subject (is_filter 0) or filter (1; MQTT "$share/G/f"
 * included)?  FS_OK, FS_EINVAL (err set) or FS_ENOMEM. */
int fs_validate(fs_dialect d, const char *s, size_t len, int is_filter, fs_error *err);

/* ---- the bulk builder (serial/fs_build.c) */

/* A subscription as an insert sees it once parsed: where an insert routes
 * it is decided from these fields alone (literal, shaped, shape), with the
 * index's shapes and trie. */
typedef struct {
    const char *filter;   /* the filter ("$share/G/" taken off: MQTT) */
    uint32_t filter_len;
    const char *queue;    /* NULL: plain */
    uint32_t queue_len;
    int literal;          /* no wildcard: the literal table, keyed shape.key */
    int shaped;           /* has a shape (shape), whose table holds it while
                           * the shape budget admits the shape */
    fs_shape_of shape;
} fs_parsed;

/* Parse spec as fs_sublist_insert does (the share split, the tokenizer's
 * and the queue's checks; t: the filter's tokens).  FS_OK, FS_EINVAL (err
 * set, as insert sets it) or FS_ENOMEM. */
int fs_spec_parse(fs_dialect d, const fs_spec *spec, fs_tokens *t, fs_parsed *out, fs_error *err);

/* Write the image of the index that inserting specs[0..n) (in any order:
 * the image is the set's) into a new index of dialect d would make -- byte
 * for byte what fs_image_write of it gives -- without building that
 * index's tables (fs_build.c; shapes placed by fs_shapes_choose), its
 * work (parse, route, sort, the file's pages, large tables' entries) on
 * up to `threads` threads, the bytes the same for any count.  path
 * non-NULL: into that file (created or truncated; durable: written to
 * disk), else into memory
 * (*out, *len; freed with FS_FREE).  FS_OK; FS_EINVAL with *bad the first
 * invalid row and err as fs_sublist_insert_many sets them; FS_ENOMEM;
 * FS_EIO (the file: errno says why; cut to nothing); FS_ENOSYS (no file
 * mappings here: write the bytes made in memory instead). */
int fs_build_image(fs_dialect d, const fs_spec *specs, size_t n, unsigned threads, const char *path,
                   int durable, char **out, size_t *len, size_t *bad, fs_error *err);
/* fs_build_image in two steps, so that the caller can free the specs
 * before the image's pages are made.  fs_build_rows parses and routes
 * specs[0..n) (read only during the call; the filters' and queues' bytes
 * they point to must stay until fs_build_free): FS_OK with *out, FS_EINVAL
 * (*bad, err as fs_build_image), FS_ENOMEM.  fs_build_write writes the
 * image as fs_build_image does (its statuses; after FS_ENOSYS it may be
 * called again with path NULL). */
typedef struct fs_build fs_build;
int fs_build_rows(fs_dialect d, const fs_spec *specs, size_t n, unsigned threads, fs_build **out, size_t *bad,
                  fs_error *err);
/* fs_build_rows of the rows of columns read in place, no spec array made
 * of them: row i is filter i of `filters` (its n rows), id ids[i] and
 * queue i of `queues` (NULL, or a null row: plain).  The caller refuses
 * null filters first (fs_strings_first_null): here one is the empty
 * filter, refused as invalid.  The columns' bytes must stay until
 * fs_build_free, as the specs' must. */
int fs_build_columns(fs_dialect d, const fs_strings *filters, const int64_t *ids, const fs_strings *queues,
                     unsigned threads, fs_build **out, size_t *bad, fs_error *err);
int fs_build_write(fs_build *b, const char *path, int durable, char **out, size_t *len);
void fs_build_free(fs_build *b);

/* ---- the image (serial/: fs_image.c opens it, fs_image_write.c writes it,
 * fs_image_verify.c checks it; docs/FORMAT.md, version 4, and fs_image.h,
 * its layout) */

/* The version the writers write, and the oldest one read: 3 differs from
 * 4 only in its checksum (one XXH64 chain, not blocks: fs_checksum.h). */
#define FS_IMAGE_VERSION 4
#define FS_IMAGE_VERSION_MIN 3

/* Write the index (under its read lock) as a version 4 image into a new
 * buffer (FS_MALLOC; free with FS_FREE).  FS_OK, or FS_ENOMEM with *out
 * NULL.  An index opened from an image writes its current set. */
int fs_image_write(fs_sublist *sl, char **out, size_t *len);
/* fs_image_write into the caller's memory buf[0..cap) (8-byte aligned,
 * any contents; the bytes object to_bytes returns, so that the image is
 * not written once and copied again): FS_OK with *out == buf when the
 * image fits there, FS_OK with *out a new buffer (FS_MALLOC; buf's bytes
 * then mean nothing) when it does not, or FS_ENOMEM, FS_EBADDATA with
 * *out NULL.  buf NULL (or not aligned): fs_image_write. */
int fs_image_write_in(fs_sublist *sl, char *buf, size_t cap, char **out, size_t *len);
/* About the size of the index's image (under its read lock): room that
 * fits it nearly always, for fs_image_write_in. */
size_t fs_image_size_hint(fs_sublist *sl);

/* Write the index's image into the file at path (created or truncated),
 * through the file's pages: the image is never whole in memory.  The file
 * is on disk (fsync) when this returns FS_OK and durable is nonzero, else
 * in the page cache (a cache of images that is rebuilt anyway); the
 * caller renames it into place.  FS_ENOMEM, FS_EBADDATA (a damaged opened image), FS_EIO (errno
 * says why), FS_ENOSYS (no file mappings here: write fs_image_write's
 * buffer instead). */
int fs_image_save(fs_sublist *sl, const char *path, int durable);

/* What fs_image_open checks before the index is used (docs/FORMAT.md,
 * "Opening: three levels of checking").  Every level checks the header
 * and the root block, and matching bounds-checks every offset it follows
 * and the order where a merge meets it (fs_layout.h, fs_result.c), so no
 * level lets a read or a write go outside data or the index's buffers. */
typedef enum {
    FS_VERIFY_NONE = 0,       /* nothing more: O(1).  Damage is found only where
                               * a bounds or order check meets it (the call
                               * then fails: FS_EBADDATA); elsewhere answers
                               * may be wrong. */
    FS_VERIFY_FULL = 1,       /* the checksum, then every invariant: one pass,
                               * linear in len; what opens is what inserts
                               * make. */
    FS_VERIFY_CHECKSUM = 2    /* the checksum alone (XXH64 over every byte:
                               * O(len) at memory speed): accidental damage
                               * is refused; bytes forged with a valid
                               * checksum are trusted as with FS_VERIFY_NONE. */
} fs_verify;

/* An index that matches straight from data[0..len), a version 3 or 4 image,
 * which must stay readable and unchanged, at the same address, until the
 * index is freed (the caller keeps it alive; nothing is copied).  data
 * must be 8-byte aligned.  verify: an fs_verify, what is checked first;
 * threads: how many threads FS_VERIFY_FULL may use (1: the caller's).
 * FS_OK (*out set), FS_EBADDATA (err->reason, err->pos; a checksum
 * mismatch is at the checksum's own offset, 48 + P, the end of the bytes
 * [0, 48 + P) it sums), FS_ENOMEM. */
int fs_image_open(const char *data, size_t len, int verify, unsigned threads, fs_sublist **out, fs_error *err);
/* (FS_VERIFY_FULL's check runs on up to `threads` threads, the process's
 * worker pool, fs_pool.h, and the caller's, the checksum beside the
 * tables, for images of fs_image_parallel_min bytes and more: fs_tuning.h.) */

/* Did a call reach damage in the image sl matches from (then it failed,
 * and every later call fails)? */
int fs_image_damaged(const fs_sublist *sl);

/* The image img[0..len) made the given version, 3 or 4, in place: the
 * two differ only in the header's version and the checksum (fs_checksum.h),
 * summed on `threads` threads.  Nothing is written when it is that
 * version already.  Version 3 is what readers before version 4 open
 * (to_bytes(version=3)); a version 3 image opened and written unchanged
 * becomes the writers' version. */
void fs_image_as_version(char *img, size_t len, unsigned version, unsigned threads);

/* Is data a version 3 or 4 image (by its header's magic and version)? */
int fs_image_is(const char *data, size_t len);

/* The checksum of an image that arrives in pieces (a receiver checks it
 * as it streams in, without holding or mapping it; serial/fs_checksum.c):
 * new, feed each piece in order, end (what the image's own checksum must
 * equal, whatever its version), free (NULL: nothing).  new: NULL when
 * memory is short. */
typedef struct fs_checksum_stream fs_checksum_stream;
fs_checksum_stream *fs_checksum_stream_new(void);
void fs_checksum_stream_feed(fs_checksum_stream *s, const void *data, size_t n);
uint64_t fs_checksum_stream_end(const fs_checksum_stream *s);
void fs_checksum_stream_free(fs_checksum_stream *s);

/* ---- versions 1 and 2 (serial/fs_serial_dump.c writes, fs_serial.c
 * loads; the format: fs_serial.h, docs/FORMAT.md) */

/* Serialize the index (under its read lock) into a new buffer.
 * FS_OK: *out (from FS_MALLOC; the caller frees it with FS_FREE) holds *len
 * bytes.  FS_ENOMEM: *out is NULL, nothing leaked, the index is unchanged. */
int fs_sublist_dump(fs_sublist *sl, char **out, size_t *len);

/* Build a new index from data[0..len) (not retained; may be read-only).
 * FS_OK: *out is the index (free it with fs_sublist_free).
 * FS_EBADDATA: the data is corrupt; err->reason (a static string) says what
 *   is wrong and err->pos at which byte; *out is NULL.
 * FS_ENOMEM: *out is NULL.  On either error nothing is leaked. */
int fs_sublist_load(const char *data, size_t len, fs_sublist **out, fs_error *err);

/* ---- A column matched at once (match_many; api/fs_column.c) -----------
 *
 * The whole batch driver: the thread policy, the chunks, feeding the
 * threads a column still being filled, cancelling, the parts' ids placed
 * one after another, a dictionary chunk's values matched once and spread
 * over its rows.  The caller translates arguments, errors and objects. */

/* One part of a column (a chunk of an Arrow column, or a whole list):
 * rows.n rows, of which [0, filled) are there now (hooks->fill brings the
 * rest: a Python list's strings are converted as the threads match).
 * dict not NULL: a dictionary chunk, its rows dict's indices into values
 * (filled in whole), each distinct value matched once and its ids given
 * to every row that names it, a null index a null row (only where no key
 * picks for the rows: fs_match_column's keys NULL or queues not PICK). */
typedef struct {
    fs_strings rows;
    size_t filled;
    const fs_arrow_indices *dict;
    const fs_strings *values;
} fs_column_part;

typedef struct {
    int queues;                   /* FS_QUEUES_PICK, _ALL or _NONE (fs_batch.h) */
    int dedupe;                   /* each id at most once per row */
    unsigned threads;             /* at most this many (1: the calling thread only) */
} fs_column_options;              /* (the policy's constants: fs_tuning.h's fs_column_tuned) */

/* How the call talks to its caller, on the calling thread; any may be
 * NULL.  fill: rows [filled, end) of part k made ready, *filled set (to
 * end, or rows.n); poll: between chunks and waits, the caller's chance to
 * stop (Ctrl-C); release and acquire: around each chunk matched here and
 * each wait for the threads, the caller's lock let go and taken back (the
 * interpreter's).  fill and poll: 0 to go on, non-zero to stop the call
 * (FS_ECANCELLED; the caller knows why). */
typedef struct {
    void *ctx;
    int (*fill)(void *ctx, size_t k, size_t end, size_t *filled);
    int (*poll)(void *ctx);
    void (*release)(void *ctx);
    void (*acquire)(void *ctx);
} fs_column_hooks;

/* Rows matched per chunk on the calling thread (poll between), and the
 * fewest rows per thread worth a thread's wake-up and its blocks'
 * placement. */
#define FS_COLUMN_CHUNK_ROWS 16384
/* A list's rows handed to the threads this many at a time as they are
 * filled (8 blocks: a mutex and a wake-up per 8,192 rows). */
#define FS_COLUMN_FEED_ROWS 8192

/* Match the column parts[0..nparts) (its rows one after another; keys NULL,
 * or a column over all of them) against sl, with also (NULL, or another
 * index of sl's dialect: fs_match_rows), as opt says, on at most
 * opt->threads threads: never more than the processors, nor fewer rows a
 * thread than FS_COLUMN_CHUNK_ROWS.  Output, CSR: row_end[i] (n entries,
 * n the parts' rows) the ids through row i in *ids (empty on entry),
 * invalid[i] 1 for a null or invalid row (invalid may be NULL when n is
 * 0).  FS_OK (*ids fitted:
 * fs_idbuf_fit), FS_ENOMEM, or FS_ECANCELLED when a hook said stop; on
 * error *ids is empty. */
int fs_match_column(fs_sublist *sl, fs_sublist *also, const fs_column_part *parts, size_t nparts,
                    const fs_strings *keys, const fs_column_options *opt, const fs_column_hooks *hooks,
                    int64_t *row_end, uint8_t *invalid, fs_idbuf *ids);

/* The processors this process may run on, as the thread policy counts
 * them (fs_cpus, or fs_column_tuned.cpus where a test set it), at least 1. */
unsigned fs_column_cpus(void);
/* The threads a step over a whole index may use -- build_image, a full
 * image check (open(verify=True)), save() and to_bytes() of a large
 * index: the processors fs_column_cpus counts, at most
 * FS_INDEX_THREADS_MAX. */
#define FS_INDEX_THREADS_MAX 64u
unsigned fs_index_threads(void);
/* Threads in the batch's worker pool (fs_pool.h), and how many of them
 * are idle now (tests). */
void fs_column_pool_status(unsigned *threads, unsigned *idle);
/* How many batch workers have left their batch crowded out by its other
 * threads (more threads than processors: fs_batch.c), since the process
 * started (tests). */
unsigned long long fs_column_workers_crowded_out(void);

#endif
