/* fs_checksum.h - the file format's checksum (docs/FORMAT.md), shared by
 * its writers and readers: fs_serial_dump.c and fs_serial.c (versions 1
 * and 2), fs_image_write.c, fs_image.c and fs_image_verify.c (versions 3
 * and 4).  A header of its own, so that none of them calls another for it.
 *
 * Versions 1 to 3 sum the bytes in one XXH64 chain, which one thread
 * runs.  Version 4 sums them in blocks of FS_CHECKSUM_BLOCK bytes, each
 * block's XXH64 independent of the others, and the checksum is the XXH64
 * of the blocks' sums (each as 8 little-endian bytes, in order): so the
 * writers and the check spread it over threads (fs_checksum_blocks). */
#ifndef FS_CHECKSUM_H
#define FS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "fs_header.h"
#include "fs_xxh64.h"

/* The format's checksum: XXH64 with seed 0 (never fails). */
#define FS_CHECKSUM_SEED 0
static inline uint64_t fs_serial_checksum(const void *data, size_t len)
{
    return fs_xxh64(data, len, FS_CHECKSUM_SEED);
}

/* Version 4's blocks: 1 MiB, the last one shorter (none for no bytes). */
#define FS_CHECKSUM_BLOCK ((size_t)1 << 20)
#define FS_CHECKSUM_BLOCKED_FROM 4      /* the first version summed in blocks */

static inline size_t fs_checksum_nblocks(size_t len) { return (len + FS_CHECKSUM_BLOCK - 1) / FS_CHECKSUM_BLOCK; }

/* Block k's sum of data[0..len). */
static inline uint64_t fs_checksum_block(const void *data, size_t len, size_t k)
{
    size_t at = k * FS_CHECKSUM_BLOCK, n = len - at < FS_CHECKSUM_BLOCK ? len - at : FS_CHECKSUM_BLOCK;
    return fs_xxh64((const unsigned char *)data + at, n, FS_CHECKSUM_SEED);
}

/* One block's sum added to the sum of sums. */
static inline void fs_checksum_add(fs_xxh64_state *sums, uint64_t block_sum)
{
    unsigned char le[8];
    for (unsigned i = 0; i < 8; i++)
        le[i] = (unsigned char)(block_sum >> (8 * i));
    fs_xxh64_feed(sums, le, 8);
}

/* Version 4's checksum from its blocks' sums, in order. */
static inline uint64_t fs_checksum_of_sums(const uint64_t *block_sums, size_t n)
{
    fs_xxh64_state sums;
    fs_xxh64_begin(&sums, FS_CHECKSUM_SEED);
    for (size_t k = 0; k < n; k++)
        fs_checksum_add(&sums, block_sums[k]);
    return fs_xxh64_end(&sums);
}

/* The checksum of a version's image data[0..len) (the bytes before the
 * checksum), on one thread (no memory for the blocks' sums: each added as
 * it is made). */
static inline uint64_t fs_checksum_of(unsigned version, const void *data, size_t len)
{
    if (version < FS_CHECKSUM_BLOCKED_FROM)
        return fs_serial_checksum(data, len);
    fs_xxh64_state sums;
    fs_xxh64_begin(&sums, FS_CHECKSUM_SEED);
    for (size_t k = 0, n = fs_checksum_nblocks(len); k < n; k++)
        fs_checksum_add(&sums, fs_checksum_block(data, len, k));
    return fs_xxh64_end(&sums);
}

/* The same on `threads` threads (the worker pool's and this one), the
 * blocks taken in turn; on one where threads <= 1, the image is small, or
 * memory for the blocks' sums is short (fs_checksum.c). */
uint64_t fs_checksum_blocks(unsigned version, const void *data, size_t len, unsigned threads);

/* The checksum of bytes that arrive in pieces (a receiver checks an image
 * as it streams in, without holding or mapping it): begin, feed each piece
 * in order, end.  The version is read from the bytes (the header's
 * version field, as every version's header has it: fs_header_version):
 * until it is known, both ways are summed. */
typedef struct {
    fs_xxh64_state whole;       /* versions 1 to 3 */
    fs_xxh64_state block, sums; /* version 4: the block being summed, the sum of sums */
    size_t in_block;            /* bytes of the block fed so far */
    uint64_t fed;
    unsigned version;           /* 0 until the version field has been fed */
    unsigned char head[FS_HDR_VERSION + 2];     /* the header up to its version */
} fs_checksum_state;

static inline void fs_checksum_begin(fs_checksum_state *s)
{
    fs_xxh64_begin(&s->whole, FS_CHECKSUM_SEED);
    fs_xxh64_begin(&s->block, FS_CHECKSUM_SEED);
    fs_xxh64_begin(&s->sums, FS_CHECKSUM_SEED);
    s->in_block = 0;
    s->fed = 0;
    s->version = 0;
}

static inline void fs_checksum_feed(fs_checksum_state *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; s->fed + i < sizeof(s->head) && i < n; i++)
        s->head[s->fed + i] = p[i];
    s->fed += n;
    if (!s->version && s->fed >= sizeof(s->head))
        s->version = fs_header_version(s->head);
    if (s->version && s->version < FS_CHECKSUM_BLOCKED_FROM) {
        fs_xxh64_feed(&s->whole, p, n);
        return;
    }
    if (!s->version)
        fs_xxh64_feed(&s->whole, p, n);     /* (the version not known yet: both ways) */
    while (n) {
        size_t take = FS_CHECKSUM_BLOCK - s->in_block < n ? FS_CHECKSUM_BLOCK - s->in_block : n;
        fs_xxh64_feed(&s->block, p, take);
        s->in_block += take;
        p += take;
        n -= take;
        if (s->in_block == FS_CHECKSUM_BLOCK) {
            fs_checksum_add(&s->sums, fs_xxh64_end(&s->block));
            fs_xxh64_begin(&s->block, FS_CHECKSUM_SEED);
            s->in_block = 0;
        }
    }
}

static inline uint64_t fs_checksum_end(const fs_checksum_state *s)
{
    if (s->version < FS_CHECKSUM_BLOCKED_FROM)       /* (the version field not fed: no image at all) */
        return fs_xxh64_end(&s->whole);
    fs_xxh64_state sums = s->sums;
    if (s->in_block)
        fs_checksum_add(&sums, fs_xxh64_end(&s->block));
    return fs_xxh64_end(&sums);
}

#endif
