/* fs_groups.h - a row's queue groups, merged (fs_result.c defines them).
 *
 * NATS and AMQP merge same-named groups across the matched nodes into one
 * group; MQTT keeps one group per (name, filter), that is per node (the
 * rules table's groups_merge).  Result building (fs_result.c) and the
 * batch's direct emit (fs_batch.c) take a row's groups from fs_row_groups,
 * in the row's order (fs_result.h: by name, then filter), a merged group's
 * parts side by side (the batch takes those of a row where one node holds
 * groups, or two in a dialect that merges them, straight from the nodes'
 * name-ordered lists, in the same order):
 *
 *     size_t nrefs;
 *     fs_row_groups(sl, sc, &nrefs);
 *     for (size_t j = 0, end; j < nrefs; j = end) {
 *         end = fs_row_group_end(sc, j, nrefs);
 *         ... one group: the members of sc->grefs[j..end), merged ...
 *     }
 *
 * A header of its own so that neither the walk (fs_walk.h) nor the
 * results' builder names the other for it. */
#ifndef FS_GROUPS_H
#define FS_GROUPS_H

#include <stddef.h>

#include "fs_layout.h"
#include "fs_scratch.h"

/* The queue groups of the hits in the row's order (fs_result.h):
 * sc->grefs[0..*nrefs), each a node's group (hit, group number).  NATS and
 * AMQP merge same-named groups across filters: a row's group is then the
 * refs [j, fs_row_group_end(j)) -- its parts, side by side; MQTT's groups
 * are (name, filter): one ref each.  FS_OK or FS_ENOMEM. */
int fs_row_groups(const fs_sublist *sl, fs_scratch *sc, size_t *nrefs);
/* Groups a and b by name bytes (<0, 0, >0): the first key of the row's
 * order of groups (fs_result.h).  mapped: fs_img_mapped(sl), or 1. */
FS_ALWAYS_INLINE int fs_group_name_cmp_if(const fs_sublist *sl, int mapped, const fs_group *a, const fs_group *b)
{
    const char *an, *bn;
    uint32_t na = fs_gname_of_if(sl, mapped, a, &an), nb = fs_gname_of_if(sl, mapped, b, &bn);
    uint32_t n = na < nb ? na : nb;
    for (uint32_t i = 0; i < n; i++)          /* names are short: no call */
        if (an[i] != bn[i])
            return (unsigned char)an[i] < (unsigned char)bn[i] ? -1 : 1;
    return na < nb ? -1 : na > nb;
}

/* The end of the group that starts at ref j: its parts were marked
 * (fs_gref's part) by fs_row_groups. */
static inline size_t fs_row_group_end(const fs_scratch *sc, size_t j, size_t nrefs)
{
    size_t end = j + 1;
    while (end < nrefs && sc->grefs[end].part)
        end++;
    return end;
}

#endif
