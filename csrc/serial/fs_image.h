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

/* The image's public calls -- its version, writing, saving, opening at
 * each level of checking, the version a written image is given -- are
 * declared in sublist.h ("the image"), the whole C API; what follows is
 * this layer's own. */

/* A built index holding what sl holds now (an opened image and the changes
 * made to it since).  FS_OK, FS_ENOMEM, FS_EBADDATA (a damaged image). */
int fs_image_thaw(fs_sublist *sl, fs_sublist **out);

/* Bytes of the image an index matches from (0: a built index). */
uint64_t fs_image_bytes(const fs_sublist *sl);

#endif
