/* fs_scratch.h - the types the index's calls and its walks share: a
 * subscription to insert or remove (fs_spec), a call's working memory
 * (fs_scratch: the tokens, the walk's frontier and hits, a row's queue
 * groups), and the rows of a reverse match (fs_rresult).  Plain data: the
 * index layer's walks (fs_trie.c) fill them, the match layer reads them,
 * and the public API (sublist.h) hands them to callers. */
#ifndef FS_SCRATCH_H
#define FS_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "fs_strings.h"
#include "fs_token.h"

typedef struct fs_sublist fs_sublist;
typedef struct fs_node fs_node;

/* One subscription to insert or remove in bulk.  queue == NULL: plain. */
typedef struct {
    const char *filter;
    size_t filter_len;
    const char *queue;
    size_t queue_len;
    int64_t id;
} fs_spec;

/* Row i of columns as a spec: filter i of `filters`, ids[i], queue i of
 * `queues` (NULL, or a null row: plain).  0 when the filter is null (then
 * out's filter is not set): the one rule by which insert_many's Arrow
 * columns (the Python layer's spec pass) and the bulk builder (fs_build.c,
 * reading them in place) make a row's spec. */
static inline int fs_spec_of_row(fs_spec *out, const fs_strings *filters, const int64_t *ids,
                                 const fs_strings *queues, size_t i)
{
    out->id = ids[i];
    if (!queues || !fs_strings_get(queues, i, &out->queue, &out->queue_len)) {
        out->queue = NULL;
        out->queue_len = 0;
    }
    return fs_strings_get(filters, i, &out->filter, &out->filter_len);
}

/* A queue group of a row, by where its first part is: hits[hit]'s group
 * number group (fs_row_groups, fs_result.c).  part: 1 when it is a later
 * part of the group of the ref before it (NATS and AMQP merge same-named
 * groups across filters), found once as the refs are put in order. */
typedef struct {
    uint32_t hit, group, part;
} fs_gref;

/* Per-call working memory, reusable across calls by one thread. */
typedef struct {
    fs_tokens toks;
    const fs_node **front, **next, **hits;
    size_t nfront, nnext, nhits;
    size_t cap_front, cap_next, cap_hits;
    fs_gref *grefs;          /* the row's groups, in order (fs_row_groups) */
    size_t cap_grefs;
    int grefs_merge;         /* 1: two of them may be parts of one group */
    const fs_node **seen;    /* AMQP trie walk: open-addressing set of nodes, */
    size_t cap_seen, act_seen;   /* allocated / in use (a power of 2) */
} fs_scratch;

/* Is the scratch holding more than a typical call needs?  (A kept
 * workspace's is then freed: fs_workspace_release, fs_workspace_trim.) */
static inline int fs_scratch_oversized(const fs_scratch *sc)
{
    return sc->cap_front > 65536 || sc->cap_next > 65536 || sc->cap_hits > 65536 ||
           sc->cap_seen > 131072 || sc->cap_grefs > 4096 || sc->toks.cap > 4096;
}

/* One reverse-match hit. */
typedef struct {
    size_t filter_off, filter_len;
    size_t queue_off, queue_len;
    int has_queue;
    int64_t id;
} fs_rhit;

typedef struct {
    fs_rhit *hits;
    size_t nhits, cap_hits;
    char *arena;
    size_t narena, cap_arena;
} fs_rresult;



#endif
