/* fs_walk.c - the walk's rest for a mapped image with a live part (see
 * fs_walk.h, whose fs_walk_collect calls it): the image's entries found,
 * the masked ones are dropped, the image's trie is walked, then the live
 * part (a built index of its own) is walked like any index. */
#include "fs_walk.h"

/* Drop from sc->hits[from..) the image nodes moved to the live part. */
static void drop_masked(const fs_sublist *sl, fs_scratch *sc, size_t from)
{
    if (!sl->masked_n)
        return;
    size_t k = from;
    for (size_t i = from; i < sc->nhits; i++)
        if (!fs_image_masked(sl, sc->hits[i]))
            sc->hits[k++] = sc->hits[i];
    sc->nhits = k;
}

int fs_walk_image_rest(const fs_sublist *sl, const char *s, size_t len, const fs_tokens *t,
                       fs_scratch *sc, int first_only)
{
    drop_masked(sl, sc, 0);
    if (first_only && sc->nhits)
        return FS_OK;
    size_t from = sc->nhits;
    int rc = fs_trie_walk_locked(sl, s, t, sc);
    if (rc < 0)
        return rc;
    drop_masked(sl, sc, from);
    if (first_only && sc->nhits)
        return FS_OK;
    const fs_sublist *live = sl->live;
    if (!live->count)
        return FS_OK;
    fs_walk_row p;
    fs_walk_plan_tokens(live, s, len, t, NULL, &p);
    if (fs_walk_entries(live, &p, t, sc, first_only) < 0)
        return FS_ENOMEM;
    if (first_only && sc->nhits)
        return FS_OK;
    return fs_trie_walk_locked(live, s, t, sc);
}

