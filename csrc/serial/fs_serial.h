/* fs_serial.h - an index as a byte string and back (the file format is
 * specified byte by byte in docs/FORMAT.md).
 *
 *   offset 0   header, 48 bytes, fixed little-endian (fs_header.h)
 *              magic "\x89FSB\r\n\x1a\n" | u16 version | u16 flags (bits 0-1:
 *              the dialect) | u32 0 | u64 payload length P | u64 subscriptions |
 *              u64 literal filters | u64 trie nodes
 *   offset 48  payload, P bytes
 *                literal table: per whole literal filter,
 *                    len, bytes, subscriptions
 *                trie, depth first, preorder, from the root:
 *                    subscriptions, children = nlit << 2 | one | rest << 1,
 *                    then each literal child (len, token, its record),
 *                    then the '*'/'+' child's record, then the '>'/'#' one's
 *   offset 48+P  u64 checksum: XXH64 (seed 0) of bytes [0, 48 + P)
 *
 *   subscriptions = varint nsubs << 1 | has_groups, ids, [varint ngroups,
 *                   per group (sorted by name): len, name, count, ids]
 *   ids           = zigzag varint of the first, then varint (next - prev - 1)
 *   len, counts   = unsigned LEB128 varints (canonical: no padding bytes)
 *
 * The blob holds offsets and lengths only (no pointers), so it can be
 * loaded at any address, on any machine, from a read-only buffer.  Loading
 * trusts nothing: after the checksum, every read is bounds-checked, every
 * count is checked against the bytes left before anything is allocated
 * from it, every token, group and id is re-validated against the same
 * rules insert applies, and the state must be one that inserts produce:
 * each filter stored once, in the place an insert puts it (the numbered
 * list in docs/FORMAT.md, "Invariants a reader checks").
 */
#ifndef FS_SERIAL_H
#define FS_SERIAL_H

#include <stddef.h>
#include <stdint.h>

#include "fs_checksum.h"
#include "fs_header.h"
#include "fs_token.h"
#include "sublist.h"

#define FS_SERIAL_VERSION 2      /* writes 2; reads 1 and 2 */

/* fs_sublist_dump (writes version 2) and fs_sublist_load (reads 1 and 2)
 * are declared in sublist.h, the whole C API. */

#endif
