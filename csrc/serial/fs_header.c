/* fs_header.c - the file format's header, written and checked (see
 * fs_header.h): the one place that knows the magic and each field's
 * offset. */
#include "fs_header.h"

#include <string.h>

static const unsigned char MAGIC[8] = {0x89, 'F', 'S', 'B', '\r', '\n', 0x1a, '\n'};

void fs_header_put(unsigned char *h, const fs_file_header *f)
{
    memcpy(h + FS_HDR_MAGIC, MAGIC, sizeof(MAGIC));
    fs_header_set_version(h, f->version);
    fs_le_put(h + FS_HDR_FLAGS, f->flags, 2);
    fs_le_put(h + FS_HDR_RESERVED, f->reserved, 4);
    fs_le_put(h + FS_HDR_PAYLOAD, f->payload, 8);
    fs_le_put(h + FS_HDR_SUBS, f->subs, 8);
    fs_le_put(h + FS_HDR_LITERALS, f->literals, 8);
    fs_le_put(h + FS_HDR_NODES, f->nodes, 8);
}

void fs_header_read(const unsigned char *h, fs_file_header *f)
{
    f->version = (uint16_t)fs_header_version(h);
    f->flags = (uint16_t)fs_le_get(h + FS_HDR_FLAGS, 2);
    f->reserved = (uint32_t)fs_le_get(h + FS_HDR_RESERVED, 4);
    f->payload = fs_le_get(h + FS_HDR_PAYLOAD, 8);
    f->subs = fs_le_get(h + FS_HDR_SUBS, 8);
    f->literals = fs_le_get(h + FS_HDR_LITERALS, 8);
    f->nodes = fs_le_get(h + FS_HDR_NODES, 8);
}

unsigned fs_header_version(const unsigned char *h)
{
    return (unsigned)fs_le_get(h + FS_HDR_VERSION, 2);
}

void fs_header_set_version(unsigned char *h, unsigned version)
{
    fs_le_put(h + FS_HDR_VERSION, version, 2);
}

int fs_header_is(const unsigned char *h, size_t len, unsigned version)
{
    return len >= FS_SERIAL_HEADER && memcmp(h + FS_HDR_MAGIC, MAGIC, sizeof(MAGIC)) == 0 &&
           fs_header_version(h) == version;
}

static int refused(fs_error *err, const char *why, size_t at)
{
    err->reason = why;
    err->pos = at;
    err->in_queue = 0;
    return FS_EBADDATA;
}

int fs_header_get(const unsigned char *h, size_t len, const fs_header_rules *r, fs_file_header *f,
                  fs_dialect *d, fs_error *err)
{
    if (len < r->min_len || len < FS_SERIAL_HEADER)
        return refused(err, r->short_why, len);
    if (memcmp(h + FS_HDR_MAGIC, MAGIC, sizeof(MAGIC)) != 0)
        return refused(err, r->magic_why, FS_HDR_MAGIC);
    fs_header_read(h, f);
    if (f->version < r->vmin || f->version > r->vmax)
        return refused(err, r->version_why, FS_HDR_VERSION);
    if (f->flags & ~FS_HDR_DIALECT_BITS)
        return refused(err, r->flags_why, FS_HDR_FLAGS);
    if (!fs_dialect_of_code(f->flags, d))
        return refused(err, r->dialect_why, FS_HDR_FLAGS);
    if (f->reserved != 0)
        return refused(err, r->reserved_why, FS_HDR_RESERVED);
    return FS_OK;
}
