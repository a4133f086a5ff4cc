/* fs_status.h - the status codes of the whole core, defined once.
 *
 * Every function of csrc/ that can fail returns one of these (or, where its
 * comment says so, a count or 0/1 answer on success: success is never
 * negative).  The Cython layer turns each into its exception.
 */
#ifndef FS_STATUS_H
#define FS_STATUS_H

enum {
    FS_OK = 0,
    FS_ENOMEM = -1,      /* an allocation failed; nothing was changed */
    FS_EINVAL = -2,      /* invalid subject/filter/queue; see fs_error */
    FS_ENOTFOUND = -3,   /* no such subscription */
    FS_EBADDATA = -4,    /* corrupt serialized data; see fs_error */
    FS_ECANCELLED = -5   /* a batch was asked to stop (fs_batch_cancel) */
};

#endif
