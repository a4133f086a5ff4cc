/* fs_checksum.h - the file format's checksum (docs/FORMAT.md), shared by
 * both its writers and readers: fs_serial.c (versions 1 and 2) and
 * fs_image.c (version 3).  A header of its own, so that neither file calls
 * the other for it. */
#ifndef FS_CHECKSUM_H
#define FS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "fs_xxh64.h"

/* The format's checksum: XXH64 with seed 0 (never fails). */
static inline uint64_t fs_serial_checksum(const void *data, size_t len) { return fs_xxh64(data, len, 0); }

#endif
