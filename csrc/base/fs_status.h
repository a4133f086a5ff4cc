/* fs_status.h - the status codes of the whole core, defined once, and
 * the detail that comes with FS_EINVAL and FS_EBADDATA.
 *
 * Every function of csrc/ that can fail returns one of these (or, where its
 * comment says so, a count or 0/1 answer on success: success is never
 * negative).  The Cython layer turns each into its exception.
 */
#ifndef FS_STATUS_H
#define FS_STATUS_H

#include <stddef.h>

enum {
    FS_OK = 0,
    FS_ENOMEM = -1,      /* an allocation failed; nothing was changed */
    FS_EINVAL = -2,      /* invalid subject/filter/queue; see fs_error */
    FS_ENOTFOUND = -3,   /* no such subscription */
    FS_EBADDATA = -4,    /* corrupt serialized data; see fs_error */
    FS_ECANCELLED = -5,  /* a batch was asked to stop (fs_batch_cancel) */
    FS_ENOSYS = -6,      /* not available on this system (fs_sys.h) */
    FS_EIO = -7          /* the system refused a file operation: errno says why */
};

/* Why an input was refused (FS_EINVAL: a subject, filter or queue name;
 * FS_EBADDATA: a serialized index): a static reason, the byte offset, and
 * whether it was the queue name (not the filter) that was wrong. */
typedef struct {
    const char *reason;
    size_t pos;
    int in_queue;
} fs_error;

#endif
