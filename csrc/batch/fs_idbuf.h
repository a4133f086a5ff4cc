/* fs_idbuf.h - the batch's output: growable buffers of ids, and a pool
 * that keeps the pages of recently released big ones for the next batch.
 *
 * Why a pool: a batch that returns hundreds of MB of ids (heavy: ~650
 * bytes per subject) spent a third of its time in page faults when every
 * call wrote into fresh memory -- the kernel maps and zeroes each page on
 * its first touch, ~400 ns per KB here against ~130 ns to rewrite a mapped
 * page.  malloc gives such big blocks back to the system on free (glibc:
 * anything over its mmap threshold, at most 32 MiB), so nothing reused
 * them.  Now a released buffer of FS_IDPOOL_MIN_BYTES or more is kept:
 * its pages are marked discardable (fs_pages_discard: the system takes
 * them back only when memory runs short, so an idle process does not
 * hold them against anyone).  A batch's output starts in the largest kept
 * buffer (fs_idbuf_start_kept) and is moved out of it at the end if it
 * used little of it (fs_idbuf_fit); any other buffer growing past 1/8 of
 * a kept one's size moves into it.  At most FS_IDPOOL_SLOTS buffers and
 * FS_IDPOOL_MAX_BYTES in all are kept; fs_idpool_trim gives them all back.
 * Where pages cannot be marked discardable (Windows), nothing is kept.
 *
 * All memory here comes from FS_MALLOC / FS_REALLOC, so fault injection
 * covers it; taking a kept buffer allocates nothing.
 */
#ifndef FS_IDBUF_H
#define FS_IDBUF_H

#include <stddef.h>
#include <stdint.h>

#define FS_IDPOOL_MIN_BYTES ((size_t)4 << 20)
#define FS_IDPOOL_MAX_BYTES ((size_t)1 << 30)
#define FS_IDPOOL_SLOTS 4

/* ids[0..n) in a buffer of cap ids (ids NULL when cap is 0). */
typedef struct {
    int64_t *ids;
    size_t n, cap;
} fs_idbuf;

/* Make room for need ids in all (cap >= need; the contents are kept).
 * FS_OK, or FS_ENOMEM with b unchanged. */
int fs_idbuf_reserve(fs_idbuf *b, size_t need);
/* Room for more ids after b's: 0 (FS_OK) or FS_ENOMEM, as
 * fs_idbuf_reserve.  The check is inline (the batch's emit path runs it
 * per row), the growth out of line. */
static inline int fs_idbuf_room(fs_idbuf *b, size_t more)
{
    return b->n + more <= b->cap ? 0 : fs_idbuf_reserve(b, b->n + more);
}

/* Release b's buffer (into the pool or to malloc) and empty b. */
void fs_idbuf_free(fs_idbuf *b);

/* Start an empty b in the largest kept buffer, if there is one: a batch's
 * output usually ends near the size of the last batch's, and starting
 * there saves growing through the smaller ones -- or, on threads, the
 * output landing in a smaller buffer than a helper's and being grown into
 * fresh pages.  Allocates nothing. */
void fs_idbuf_start_kept(fs_idbuf *b);
/* When b is done and uses under 1/8 of a big buffer, move its ids to a
 * buffer of their size and keep the big one for the next batch (so a small
 * result never pins a big buffer).  FS_OK, or FS_ENOMEM with b unchanged. */
int fs_idbuf_fit(fs_idbuf *b);

/* Give every kept buffer back to malloc; returns how many bytes. */
size_t fs_idpool_trim(void);
/* How many buffers, and bytes, the pool keeps now. */
void fs_idpool_status(size_t *buffers, size_t *bytes);
/* Testing: hold the pool's lock for ms milliseconds (a fork() meanwhile
 * must wait for it, not copy it held into the child). */
void fs_idpool_hold_for_test(unsigned ms);

#endif
