/* fs_image_verify.h - the full check of an opened image (FS_VERIFY_FULL:
 * every invariant of docs/FORMAT.md, "Invariants of a mapped image") and
 * its checksum, which the reader (fs_image.c) calls; internal to the
 * serial layer.  The checks that make following one offset safe while
 * matching are the index layer's (fs_layout.h). */
#ifndef FS_IMAGE_VERIFY_H
#define FS_IMAGE_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "fs_token.h"
#include "sublist.h"

/* Every invariant of sl's mapped image, on up to `threads` threads where
 * the image is at least fs_image_parallel_min bytes; sum_pending: the
 * checksum too (the reader put it off, to run beside the tables).  A
 * mismatched checksum is the error whatever else is wrong, as when it is
 * checked first.  FS_OK, FS_EBADDATA (err says why and where), FS_ENOMEM. */
int fs_image_verify(fs_sublist *sl, unsigned threads, int sum_pending, fs_error *err);

/* The image's checksum: FS_OK, or FS_EBADDATA naming it (at its own
 * offset, len - 8).  sum: of the bytes before it, or NULL to compute it
 * here. */
int fs_image_checksum_check(const char *data, size_t len, const uint64_t *sum, unsigned threads, fs_error *err);

#endif
