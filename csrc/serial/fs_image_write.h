/* fs_image_write.h - the image writer's parts (fs_image_write.c), for a
 * writer that has no built index for its tables: the bulk builder
 * (fs_build.c) lays the literal and shape tables out from its own sorted
 * entries, and writes everything else -- the trie, a node and its payload,
 * a level and its slots, the root block, the header and the checksum --
 * through these, so that each byte of an image is written by one piece
 * of code whichever way the image was made (docs/FORMAT.md, version 4).
 *
 *   fs_imgw_new ─► [fs_imgw_file] ─► fs_imgw_begin ─► fs_imgw_trie
 *     ─► fs_imgw_alloc (a level) ─► fs_imgw_level ─► per entry, in
 *        writing order: fs_imgw_node, fs_imgw_place
 *     ─► per shape: fs_imgw_alloc (an fs_shape), its level as above,
 *        fs_imgw_shape ─► fs_imgw_end ─► fs_imgw_close
 *
 * Offsets are the image's (0: out of memory, or the file could not grow;
 * the writer then fails every later call, and fs_imgw_end says so). */
#ifndef FS_IMAGE_WRITE_H
#define FS_IMAGE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "fs_index.h"

typedef struct fs_imgw fs_imgw;

/* What the root block and the header say beyond the shapes. */
typedef struct {
    fs_dialect dialect;
    uint64_t subs, literals, nodes;     /* nodes: trie nodes (not the root) and table entries */
    uint64_t root, lit;                 /* the trie root's offset, the literal level's */
    uint64_t shapes[FS_SHAPE_MAX];      /* each fs_shape's offset, in canonical order */
} fs_img_totals;

/* A writer into memory; NULL when out of memory. */
fs_imgw *fs_imgw_new(void);
/* Write into the file at path (created or truncated) through its pages
 * instead.  FS_OK, FS_ENOSYS (no file mappings here: the writer stays in
 * memory) or FS_EIO (errno says why). */
int fs_imgw_file(fs_imgw *X, const char *path);
/* Room for about size_about bytes, the first `now` of them made ready at
 * once (a file's pages populated; the rest as they are written, or by
 * fs_imgw_touch), and the header and root block (zeros until
 * fs_imgw_end).  FS_OK or FS_ENOMEM. */
int fs_imgw_begin(fs_imgw *X, size_t size_about, size_t now);
/* Make the pages of bytes [from, to) of the room ready (a file's
 * populated, memory's touched: save's rule, wb_ready), so that threads
 * can share that work beside other work, before anything is written
 * there. */
void fs_imgw_touch(const fs_imgw *X, size_t from, size_t to);
/* The trie under root, as fs_image_write writes an index's: its root's
 * offset (0: out of memory). */
uint64_t fs_imgw_trie(fs_imgw *X, const fs_node *root);
/* size bytes of zeros at the next 8-byte boundary: their offset. */
uint64_t fs_imgw_alloc(fs_imgw *X, size_t size);
/* The keyed table of count entries at lv_off (an fs_level already
 * allocated): its slots and bitmap at the capacity an index growing from
 * empty has (fs_table_cap; half_full: a shape's).  The slots' offset (0:
 * none, or out of memory). */
uint64_t fs_imgw_level(fs_imgw *X, uint64_t lv_off, uint32_t count, int half_full);
/* Table entry n (a built node, or one made up for the purpose: its
 * fields, token and payload are read, never its links) and its payload:
 * its offset. */
uint64_t fs_imgw_node(fs_imgw *X, const fs_node *n);
/* The bytes fs_imgw_node takes for n and its payload, so that entries
 * can be laid out before they are written (on threads, into parts). */
uint64_t fs_imgw_node_bytes(const fs_node *n);
/* A writer of X's bytes [at, end) (already allocated in X, zeros), for a
 * thread writing its own run of entries with fs_imgw_node: it never grows
 * (an object past end fails it: 0).  NULL when out of memory.  Freed with
 * fs_imgw_part_free, before X. */
fs_imgw *fs_imgw_part(const fs_imgw *X, uint64_t at, uint64_t end);
void fs_imgw_part_free(fs_imgw *P);
/* Slot e (e.node: the entry's offset) into the table at lv_off, by the one
 * probe sequence; entries come in writing order, *next the slot after the
 * last placed (0 at first). */
void fs_imgw_place(fs_imgw *X, uint64_t lv_off, fs_slot e, uint32_t *next);
/* The fs_shape at `at` takes sh's fields (its table written already). */
void fs_imgw_shape(fs_imgw *X, uint64_t at, const fs_shape *sh);
/* The root block (T, and shapes' count and probe sets), the header and the
 * checksum, summed on `threads` threads (fs_checksum_blocks).  FS_OK or
 * FS_ENOMEM (some write failed). */
int fs_imgw_end(fs_imgw *X, const fs_img_totals *T, const fs_shapes *shapes, unsigned threads);
/* Free the writer.  ok: keep what it wrote -- a file is cut to the image
 * (and written to disk when durable), memory handed to *out and *len (the
 * caller frees it with FS_FREE); not ok: a file is cut to nothing, memory
 * freed.  FS_OK, or FS_EIO (closing the file failed). */
int fs_imgw_close(fs_imgw *X, int ok, int durable, char **out, size_t *len);

#endif
