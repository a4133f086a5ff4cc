/* fs_checksum.h - the file format's checksum (docs/FORMAT.md), shared by
 * by its writers and readers: fs_serial_dump.c and fs_serial.c (versions 1
 * and 2), fs_image_write.c, fs_image.c and fs_image_verify.c (version 3).
 * A header of its own, so that none of them calls another for it. */
#ifndef FS_CHECKSUM_H
#define FS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "fs_xxh64.h"

/* The format's checksum: XXH64 with seed 0 (never fails). */
#define FS_CHECKSUM_SEED 0
static inline uint64_t fs_serial_checksum(const void *data, size_t len)
{
    return fs_xxh64(data, len, FS_CHECKSUM_SEED);
}

/* The same, of bytes that arrive in pieces (a receiver checks an image as
 * it streams in, without holding or mapping it): begin, feed each piece
 * in order, end. */
typedef fs_xxh64_state fs_checksum_state;
static inline void fs_checksum_begin(fs_checksum_state *s) { fs_xxh64_begin(s, FS_CHECKSUM_SEED); }
static inline void fs_checksum_feed(fs_checksum_state *s, const void *data, size_t n) { fs_xxh64_feed(s, data, n); }
static inline uint64_t fs_checksum_end(const fs_checksum_state *s) { return fs_xxh64_end(s); }

#endif
