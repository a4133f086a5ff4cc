/* fs_entry.h - the checks on a stored table entry's subscriptions that
 * every reader of the format makes (docs/FORMAT.md: version 2's "an entry
 * holds subscriptions" and group order, the image's invariants 9 and 10),
 * in one place: the version 1-2 loader (fs_serial.c) reads an entry from
 * the blob's bytes, the image verifier (fs_image_verify.c) from the mapped
 * structs, and both ask these, of trie nodes too (fs_subs_why).  The texts are the format's; where a
 * reader names a fault in its own words, it passes them. */
#ifndef FS_ENTRY_H
#define FS_ENTRY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_dialect.h"

/* Are a stored node's subscriptions -- nids plain ids and ngroups queue
 * groups, on a filter that starts "$share/" (MQTT) when shared is nonzero
 * -- as inserts leave them?  NULL, or why not: none at all (the reader's
 * words, empty_why; NULL where none is allowed, as on a trie node with
 * children), or plain ids on a "$share/" filter (insert("$share/G/f")
 * always makes a group, so a plain subscription there cannot be built
 * through the API).  Every reader asks this of every node it reads, a
 * table entry's or a trie node's; each knows "shared" its own way: from
 * the entry's filter bytes (fs_entry_subs_why), or from the trie path
 * (a node below the root's "$share" level, fs_share_level). */
static inline const char *fs_subs_why(int shared, uint32_t nids, uint32_t ngroups, const char *empty_why)
{
    if (!nids && !ngroups)
        return empty_why;
    if (nids && shared)
        return "plain subscription on a '$share/' filter";
    return NULL;
}

/* fs_subs_why for a table entry, the filter f of flen bytes. */
static inline const char *fs_entry_subs_why(fs_dialect d, const char *f, uint32_t flen, uint32_t nids,
                                            uint32_t ngroups, const char *empty_why)
{
    return fs_subs_why(nids && fs_share_prefixed(d, f, flen), nids, ngroups, empty_why);
}

/* Does the queue name b (blen bytes) come strictly after a (alen bytes)
 * in byte order, a prefix first -- the order of a node's queue groups
 * that fs_group_find relies on? */
static inline int fs_gname_after(const char *a, uint32_t alen, const char *b, uint32_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c < 0 || (c == 0 && alen < blen);
}

#define FS_GROUPS_ORDER_WHY "queue groups not in strictly increasing name order"

#endif
