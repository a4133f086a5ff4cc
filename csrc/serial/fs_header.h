/* fs_header.h - the file format's 48-byte header (docs/FORMAT.md,
 * "Header"), defined once for every version: the writers of versions 1
 * and 2 (fs_serial_dump.c) and 3 (fs_image_write.c) write it with
 * fs_header_put, their readers (fs_serial.c, fs_image.c) read and check it with fs_header_get, each reader with its own words for a fault
 * (fs_header_rules), which tests and docs/FORMAT.md quote.
 *
 *   offset  0  8 bytes  magic "\x89FSB\r\n\x1a\n"
 *           8  u16      version
 *          10  u16      flags: bits 0-1 the dialect (fs_dialect_code), the rest 0
 *          12  u32      reserved, 0
 *          16  u64      payload length P (bytes between header and checksum)
 *          24  u64      subscriptions
 *          32  u64      literal table entries
 *          40  u64      nodes: versions 1-2 trie nodes but the root; 3 every node
 *          48           the payload; at 48 + P the u64 checksum (fs_checksum.h)
 *
 * Every field is little-endian; fs_le_get and fs_le_put read and write one.
 */
#ifndef FS_HEADER_H
#define FS_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "fs_dialect.h"
#include "fs_status.h"

#define FS_SERIAL_HEADER 48u     /* bytes before the payload */
#define FS_SERIAL_TRAILER 8u     /* the checksum after it */

/* Where each field lies. */
#define FS_HDR_MAGIC 0u
#define FS_HDR_VERSION 8u
#define FS_HDR_FLAGS 10u
#define FS_HDR_RESERVED 12u
#define FS_HDR_PAYLOAD 16u
#define FS_HDR_SUBS 24u
#define FS_HDR_LITERALS 32u
#define FS_HDR_NODES 40u

#define FS_HDR_DIALECT_BITS 3u   /* of flags; every other bit is 0 */

/* The header's fields, as stored. */
typedef struct {
    uint16_t version;
    uint16_t flags;       /* the dialect's code in bits 0-1 (fs_dialect_code) */
    uint32_t reserved;    /* 0 */
    uint64_t payload;     /* P */
    uint64_t subs;        /* subscriptions: plain ids plus queue-group members */
    uint64_t literals;    /* literal table entries */
    uint64_t nodes;       /* versions 1-2: trie nodes but the root; 3: every node */
} fs_file_header;

/* How one reader refuses a header: data shorter than min_len (the short
 * text, at the data's length), then the magic (at 0), a version outside
 * [vmin, vmax] (at 8), flags with a bit outside the dialect's (at 10), a
 * dialect code no dialect has (at 10), a nonzero reserved field (at 12),
 * in this order. */
typedef struct {
    size_t min_len;
    unsigned vmin, vmax;
    const char *short_why, *magic_why, *version_why, *flags_why, *dialect_why, *reserved_why;
} fs_header_rules;

/* An unsigned little-endian field of n bytes (n <= 8) at p. */
static inline uint64_t fs_le_get(const unsigned char *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void fs_le_put(unsigned char *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Write the magic and f's fields into h[0, 48). */
void fs_header_put(unsigned char *h, const fs_file_header *f);

/* Read h[0, 48)'s fields into *f, checking nothing (h holds 48 bytes). */
void fs_header_read(const unsigned char *h, fs_file_header *f);

/* The version field of h (which holds at least the header's first 10
 * bytes), read and written: an image made another version in place
 * (fs_image_as_version), a check that sums as its version does. */
unsigned fs_header_version(const unsigned char *h);
void fs_header_set_version(unsigned char *h, unsigned version);

/* Do h[0, len) start with the magic and this version? */
int fs_header_is(const unsigned char *h, size_t len, unsigned version);

/* Read and check the header of h[0, len) by r: FS_OK with *f and *d set,
 * or FS_EBADDATA with err's reason (one of r's texts) and position. */
int fs_header_get(const unsigned char *h, size_t len, const fs_header_rules *r, fs_file_header *f,
                  fs_dialect *d, fs_error *err);

#endif
