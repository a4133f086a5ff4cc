/* fs_groups.h - a row's queue groups, merged (fs_result.c defines them).
 *
 * NATS and AMQP merge same-named groups across the matched nodes into one
 * group; MQTT keeps one group per (name, filter), that is per node (the
 * rules table's groups_merge).  Result building (fs_result.c) and the
 * batch's direct emit (fs_batch.c) take a row's groups from fs_row_groups,
 * in the row's order (fs_result.h: by name, then filter), a merged group's
 * parts side by side (the batch takes those of a row where one node holds
 * groups straight from its name-ordered list, and of a row where two do,
 * in a dialect that merges them, from fs_group_pair, the merge
 * fs_row_groups takes for such a row too):
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

/* The row's order of the groups of two nodes a and b, in a dialect that
 * merges same-named groups (fs_groups_merge), written once: each node's
 * groups are in name order with distinct names (fs_node.c), so the row's
 * groups are the two lists merged by name, a name both hold being one
 * group whose parts are a's, then b's.  Both fs_row_groups (its refs) and
 * the batch's direct emit (fs_batch.c) walk it a step at a time:
 *
 *     fs_group_pair pr = fs_group_pair_start(sl, mapped, a, b);
 *     while (fs_group_pair_next(sl, mapped, &pr))
 *         ... one group: pr.ga (a's part, NULL: none), pr.gb (b's) ...
 *
 * na and nb are read once, at the start: a mapped node whose groups
 * changed since reads as fewer (fs_group_of_if), never as more. */
typedef struct {
    const fs_node *a, *b;
    uint32_t na, nb, i, j;     /* the next group of each: i of na, j of nb */
    const fs_group *ga, *gb;   /* the step's parts (NULL: that node has none in it) */
    uint32_t ia, ib;           /* and their numbers in their nodes */
} fs_group_pair;

FS_ALWAYS_INLINE fs_group_pair fs_group_pair_start(const fs_sublist *sl, int mapped, const fs_node *a,
                                                   const fs_node *b)
{
    fs_group_pair pr = {a, b, fs_ngroups_of_if(sl, mapped, a), fs_ngroups_of_if(sl, mapped, b), 0, 0,
                        NULL, NULL, 0, 0};
    return pr;
}

/* The row's next group: 1 with its parts in pr->ga and pr->gb (one or
 * both), 0 when both lists are done. */
FS_ALWAYS_INLINE int fs_group_pair_next(const fs_sublist *sl, int mapped, fs_group_pair *pr)
{
    if (pr->i >= pr->na && pr->j >= pr->nb)
        return 0;
    const fs_group *ga = pr->i < pr->na ? fs_group_of_if(sl, mapped, pr->a, pr->i) : NULL;
    const fs_group *gb = pr->j < pr->nb ? fs_group_of_if(sl, mapped, pr->b, pr->j) : NULL;
    int c = !ga ? 1 : !gb ? -1 : fs_group_name_cmp_if(sl, mapped, ga, gb);
    pr->ga = c <= 0 ? ga : NULL;
    pr->gb = c >= 0 ? gb : NULL;
    pr->ia = pr->i;
    pr->ib = pr->j;
    pr->i += c <= 0;
    pr->j += c >= 0;
    return 1;
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
