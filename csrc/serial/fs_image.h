/* fs_image.h - the index as a mapped image (docs/FORMAT.md, version 4):
 * written once, then matched from its bytes by every process that maps
 * it, with nothing rebuilt.
 *
 *   offset 0     header, 48 bytes, as versions 1 and 2 (fs_header.h)
 *   offset 48    root block: the index's own fields (node count, the
 *                trie's root, the literal table, the shapes and their
 *                probe sets), offsets where a built index has pointers
 *   offset 1024  objects: levels, slot arrays with their bitmaps, nodes,
 *                ids, queue groups -- the structs of fs_layout.h, each
 *                8-byte aligned, links as offsets from the image's first
 *                byte (a node's payload: offsets from the node)
 *   offset 48+P  u64 checksum: XXH64 (seed 0) of bytes [0, 48 + P)
 *
 * The walk that matches a built index matches the image (fs_layout.h,
 * "reading a mapped image"): the same probe sequence, the same tables.
 * Opening is O(1): the header and the root block are checked, and every
 * offset is bounds-checked when a walk first follows it; or O(len): the
 * checksum too (FS_VERIFY_CHECKSUM), or the checksum and every invariant
 * that inserts keep (FS_VERIFY_FULL, fs_image_verify.c).  The writer is
 * fs_image_write.c, the reader fs_image.c, the thaw fs_image_thaw.c.
 *
 * The structs are the host's: the image is written and mapped on 64-bit
 * little-endian hosts (every platform topicmatch builds wheels for); version
 * 2 stays readable and writable everywhere (fs_serial.h).
 */
#ifndef FS_IMAGE_H
#define FS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "fs_token.h"
#include "sublist.h"

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

/* A built index holding what sl holds now (an opened image and the changes
 * made to it since).  FS_OK, FS_ENOMEM, FS_EBADDATA (a damaged image). */
int fs_image_thaw(fs_sublist *sl, fs_sublist **out);

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

/* Bytes of the image an index matches from (0: a built index). */
uint64_t fs_image_bytes(const fs_sublist *sl);

#endif
