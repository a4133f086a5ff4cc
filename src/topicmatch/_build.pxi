# The bulk builder: topicmatch.build_image over csrc/serial/fs_build.c
# (fs_build_rows or fs_build_columns, fs_build_write: sublist.h): the image
# of insert_many's rows written straight from the columns.  Thin: Arrow
# columns are handed to C as they are, other columns become fs_specs as
# insert_many's do (_specs_of), and the first invalid row raises what
# insert_many raises; _functions.build_image has the file made and renamed as
# save() does (_imagefiles.save) and opens it.
# Included into _core.pyx, after _serial.pxi.

cdef int _build_into(fs_dialect d, _Specs sp, unsigned threads, object tmp, bint durable) except -1:
    """Write the image of sp's rows into the file tmp (through memory where
    files cannot be mapped).  Raises what insert_many would for a bad row.
    sp's specs are freed once the rows are parsed (sp is used no more):
    they are read no more, and the image's pages come after."""
    cdef bytes ctmp = _os.fsencode(tmp)
    cdef const char *path = ctmp
    cdef char *out = NULL
    cdef size_t n = 0, bad = 0
    cdef fs_error err
    cdef fs_build *b = NULL
    cdef int rc, saved_errno = 0
    cdef int c_durable = 1 if durable else 0
    cdef const int64_t[::1] idv
    cdef const int64_t *ids = NULL
    cdef const fs_strings *queues = NULL
    if sp.specs == NULL:            # Arrow columns, read in place
        idv = sp.ids
        if sp.n:
            ids = &idv[0]
        if sp.qcol is not None:
            queues = &sp.qcol.s
        with nogil:
            rc = fs_build_columns(d, &sp.fcol.s, ids, queues, threads, &b, &bad, &err)
    else:
        with nogil:
            rc = fs_build_rows(d, sp.specs, <size_t>sp.n, threads, &b, &bad, &err)
    if rc == FS_EINVAL:
        e = _spec_error(rc, &err, sp.frows[bad], None if sp.qrows is None else sp.qrows[bad])
        raise InvalidSubjectError(f"item {bad}: {e}", e.subject, e.reason, e.position, bad)
    if rc != FS_OK:
        raise MemoryError()
    PyMem_Free(sp.specs)
    sp.specs = NULL
    sp.n = 0
    with nogil:
        rc = fs_build_write(b, path, c_durable, NULL, NULL)
        saved_errno = errno
        if rc == FS_ENOSYS:             # no file mappings here: through memory
            rc = fs_build_write(b, NULL, 0, &out, &n)
        fs_build_free(b)
    if rc == FS_EIO:
        raise _os_error(saved_errno, f"cannot write the image: {_os.strerror(saved_errno)}", tmp)
    if rc != FS_OK:
        raise MemoryError()
    if out != NULL:
        try:
            _imagefiles.write_whole(tmp, PyMemoryView_FromMemory(out, <Py_ssize_t>n, 0x100), durable)  # PyBUF_READ
        finally:
            _serial_free(out)
    return 0


def _build_writer(filters, sub_ids, queues, dialect, threads, durable):
    """build_image (_functions.py): the arguments checked and the columns
    read, in its order; returns write(tmp, path), which writes the image
    into the file tmp (_imagefiles.save's writer)."""
    cdef fs_dialect d = _dialect(dialect)
    # (threads None: every CPU this process may use; never more than those
    # CPUs: more would take turns)
    cdef unsigned most = fs_index_threads()
    cdef unsigned nthreads = most if threads is None else <unsigned>_args.threads(threads, most)
    cdef _Specs sp = _specs_of(filters, sub_ids, queues, True)
    return lambda tmp, _: _build_into(d, sp, nthreads, tmp, durable)
