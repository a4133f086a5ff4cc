/* fs_match.h - matching one subject (fs_match.c), reverse matching
 * (fs_reverse.c) and the per-thread workspace (fs_workspace.c): the match
 * layer's calls of the public API (sublist.h includes this header), and
 * the internals the batch pipeline shares with match(). */
#ifndef FS_MATCH_H
#define FS_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "fs_cache.h"
#include "fs_result.h"
#include "fs_scratch.h"
#include "fs_sys.h"
#include "fs_token.h"

void fs_scratch_init(fs_scratch *sc);
void fs_scratch_free(fs_scratch *sc);
void fs_rresult_init(fs_rresult *r);
void fs_rresult_free(fs_rresult *r);

/* Match a literal subject into r (cleared first).  FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                     fs_scratch *sc, fs_result *r, fs_error *err);
/* Count what a subject matches: plain subscriptions and queue members.
 * FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                        fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue,
                        fs_error *err);
/* Does the subject match anything?  Stops at the first matching entry of
 * the literal and shape tables (where nearly every filter lives); a trie
 * walk, for filters past the shape budget, is done whole.  1 yes,
 * 0 no, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, fs_error *err);
/* Every stored subscription whose filter intersects the given filter.
 * FS_OK, FS_EINVAL, FS_ENOMEM. */
int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                             fs_scratch *sc, fs_rresult *r, fs_error *err);

/* Working memory kept per thread (freed when the thread exits), so a
 * single match allocates nothing once warm.  NULL when out of memory. */
typedef struct {
    fs_scratch sc;
    fs_result r;
    int busy;            /* lent out by fs_workspace_acquire */
} fs_workspace;
fs_workspace *fs_workspace_get(void);
/* Drop buffers a huge result left oversized. */
void fs_workspace_trim(fs_workspace *w);
/* Borrow the thread's workspace for one call.  A call that is still using
 * it further up the same thread's stack (a garbage-collector pass run while
 * Python objects are built from a result can re-enter the index) makes
 * this return spare instead, freshly initialised.  NULL when out of
 * memory.  Give it back with fs_workspace_release(w, spare). */
fs_workspace *fs_workspace_acquire_slow(fs_workspace *spare);
#if FS_TLS_COPY_OK
/* The thread's workspace once made (fs_workspace.c's; its key owns it). */
extern FS_THREAD_LOCAL fs_workspace *fs_workspace_mine;
#endif
static inline fs_workspace *fs_workspace_acquire(fs_workspace *spare)
{
#if FS_TLS_COPY_OK
    /* the common case inline: the thread's workspace, made and not busy
     * (a call less on every uncached match()) */
    fs_workspace *w = fs_workspace_mine;
    if (FS_LIKELY(w != NULL && !w->busy)) {
        w->busy = 1;
        return w;
    }
#endif
    return fs_workspace_acquire_slow(spare);
}
void fs_workspace_release(fs_workspace *w, fs_workspace *spare);
/* fs_workspace_release after a call that left w->r untouched (its answer
 * copied out from the scratch): only the scratch may have grown, so only
 * its size is tested, inline. */
static inline void fs_workspace_release_walked(fs_workspace *w, fs_workspace *spare)
{
    if (FS_LIKELY(w != spare && !fs_scratch_oversized(&w->sc)))
        w->busy = 0;
    else
        fs_workspace_release(w, spare);
}

/* match() for a caller that builds its own objects from the answer (the
 * Python layer): a small answer -- plain ids only, at most cap of them --
 * is written to ids[0..*n) and the call is done (*wp NULL); a cached one
 * needs no workspace at all.  Any other answer is left in (*wp)->r, with
 * *wp the thread's workspace (or spare, see fs_workspace_acquire) lent to
 * the caller until fs_workspace_release(*wp, spare) (its groups' key_hash
 * is 0 when the index has no cache: no queue pick reads it).  FS_OK, FS_EINVAL,
 * FS_ENOMEM (then *wp is NULL), or FS_MATCH_WALK (below).  how, when the
 * answer is not cached:
 *   FS_MATCH_CACHE_ONLY  return FS_MATCH_WALK having done and counted
 *                        nothing (*wp NULL), so that the caller can let go
 *                        of what it holds (the GIL) for the walk and call
 *                        again with FS_MATCH_WAIT;
 *   FS_MATCH_NO_WAIT     walk, unless a writer holds or waits for the
 *                        index: then return FS_MATCH_WALK, as above, before
 *                        waiting for anything (a caller holding the GIL
 *                        never waits on a writer that may need it);
 *   FS_MATCH_WAIT        walk, waiting for a writer if there is one. */
typedef enum {
    FS_MATCH_CACHE_ONLY,
    FS_MATCH_WAIT,
    FS_MATCH_NO_WAIT
} fs_match_how;
/* The return that asks the caller to walk in a second call (a result, not
 * a mode: FS_OK and the errors are the others). */
#define FS_MATCH_WALK 1
int fs_sublist_match_small(fs_sublist *sl, const char *subject, size_t len,
                           int64_t *ids, size_t cap, size_t *n,
                           fs_workspace *spare, fs_workspace **wp, fs_error *err, fs_match_how how);



/* ---- internals (fs_match.c) */
/* Tokenize, walk and build the full result of a subject (filling the cache
 * if there is one, under hash: its fs_cache_hash).  Read lock held.  FS_OK,
 * FS_EINVAL, FS_ENOMEM. */
int fs_compute_locked(fs_sublist *sl, const char *s, size_t len, uint32_t hash,
                      fs_scratch *sc, fs_result *r, fs_error *err);
/* Release the read lock at the end of a call that used the cache: flush the
 * call's hit/miss tally and free evicted entries when enough wait (that
 * briefly takes the write lock).  fs_reclaim_cache does the latter alone. */
void fs_read_done(fs_sublist *sl, const fs_cache_tally *tally);
void fs_reclaim_cache(fs_sublist *sl);
/* Add to the match statistics (thread-safe). */
void fs_count_matches(fs_sublist *sl, uint64_t matches, uint64_t fanout, uint64_t fanout_max);

#endif
