# Serialization glue: Sublist.to_bytes / from_bytes / open / save / pickle
# over sublist.h's image calls (serial/fs_image*.c: versions 3 and 4, the
# image, matched in place) and its versions 1 and 2 (serial/fs_serial*.c:
# rebuilt).  Format: docs/FORMAT.md.
# The file handling around them, and the words of a refused image, are plain
# Python (_imagefiles.py).  Included into _core.pyx.
import os as _os
from topicmatch import _imagefiles
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.errno cimport errno
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy

cdef int _write_image(_Sublist sl, int version, char **out, size_t *n, char *buf=NULL,
                      size_t cap=0) except -1:
    # The image (version >= 3: the writers' own, 4) or blob (2) of sl into
    # *out, *n: a new buffer, or (an image) buf[0..cap) when it fits there
    # (then *out == buf).
    cdef int rc, st
    sl._enter()
    with nogil:
        if version >= 3:
            rc = fs_image_write_in(sl.sl, buf, cap, out, n)
        else:
            rc = fs_sublist_dump(sl.sl, out, n)
        st = _written_state(sl, rc)
        sl._leave()
    try:
        return _written(rc, st, sl)
    except BaseException:
        # written, then found to hold a changed file's bytes: not returned
        if out[0] != NULL and out[0] != buf:
            _serial_free(out[0])
        out[0] = NULL
        raise


cdef int _written_state(_Sublist sl, int rc) noexcept nogil:
    # After a writer, inside sl's _enter/_leave: what its image says.  An
    # opened file that changed while it was read comes first (what was
    # written may hold its zeros or its new bytes); a damaged opened image
    # is only found damaged on the way (FS_EBADDATA).
    cdef int st = sl._file_state()
    if st == IMG_OK and rc == FS_EBADDATA:
        st = sl._image_state()
    return st


cdef int _written(int rc, int st, _Sublist sl) except -1:
    # A writer's status, after sl's _leave: the image's error (st), else
    # anything left is memory.
    sl._raise_state(st)
    if rc != FS_OK:
        raise MemoryError()
    return 0


def _sublist_to_bytes(_Sublist sl not None, version=4):
    """The index as bytes (docs/FORMAT.md): an image (4, or 3: its older
    checksum) or version 2."""
    cdef char *out = NULL
    cdef size_t n = 0
    cdef int v = _args.image_version(version)
    if v >= 3:
        return _image_bytes(sl, v)
    _write_image(sl, v, &out, &n)
    cdef bytes b
    cdef char *dst
    try:
        # the copy's pages on huge pages where the system allows: most of
        # copying a large image was faulting in fresh 4 KiB pages
        b = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>n)
        dst = <char *>b
        with nogil:
            fs_pages_huge(dst, n)
            memcpy(dst, out, n)
        return b
    finally:
        _serial_free(out)


cdef object _image_bytes(_Sublist sl, int version):
    # The image written straight into the bytes object returned: one made
    # at about the image's size (fs_image_size_hint), cut to it after.
    # Writing it elsewhere and copying it in touched twice as many fresh
    # pages, which was most of a large to_bytes().  An image that does
    # not fit (the index grew meanwhile) comes back in a buffer of its
    # own and is copied.
    cdef size_t hint, n = 0
    cdef char *out = NULL
    cdef char *dst
    sl._enter()                 # a closed index refused before its pointer is read
    with nogil:
        hint = fs_image_size_hint(sl.sl)
        sl._leave()
    if fs_image_room >= 0:             # (a test's: csrc/api/fs_tuning.h)
        hint = <size_t>fs_image_room
    if hint > <size_t>PY_SSIZE_T_MAX:
        raise MemoryError()
    cdef PyObject *o = _new_bytes(NULL, <Py_ssize_t>hint)
    if o == NULL:
        raise MemoryError()
    try:
        dst = _bytes_data(o)
        with nogil:
            fs_pages_huge(dst, hint)
        _write_image(sl, 3, &out, &n, dst, hint)
        if out != dst:
            try:
                _PyBytes_Resize(&o, <Py_ssize_t>n)
                dst = _bytes_data(o)
                with nogil:
                    fs_pages_huge(dst, n)
                    memcpy(dst, out, n)
            finally:
                _serial_free(out)
        else:
            _PyBytes_Resize(&o, <Py_ssize_t>n)      # in place: the block is cut, not moved
        # the version asked for (4 is what was written: nothing to do), in
        # place before anyone holds the bytes object
        dst = _bytes_data(o)
        with nogil:
            fs_image_as_version(dst, n, <unsigned>version, 1)
        return <object>o
    finally:
        Py_XDECREF(o)


def _sublist_save(_Sublist sl not None, path, mode=None, durable=True):
    """Write the image to path atomically (_imagefiles.save: a temporary
    file beside it, renamed over it)."""
    if sl.closed:                       # before any temporary file is made
        raise sl._closed_error()
    _imagefiles.save(path, mode, durable, lambda tmp, path: _save_into(sl, tmp, path, durable))


cdef int _save_into(_Sublist sl, object tmp, object path, bint durable) except -1:
    """sl's image written into the file tmp through its pages (durable: on
    disk), or through memory where files cannot be mapped; an error names
    path, the file saved."""
    cdef bytes ctmp = _os.fsencode(tmp)
    cdef const char *ctmp_p = ctmp
    cdef int rc, st, saved_errno = 0
    cdef int c_durable = 1 if durable else 0
    cdef char *out = NULL
    cdef size_t n = 0
    sl._enter()
    with nogil:
        rc = fs_image_save(sl.sl, ctmp_p, c_durable)
        saved_errno = errno
        st = _written_state(sl, rc)
        sl._leave()
    if rc == FS_ENOSYS:             # no file mappings here: through memory
        _write_image(sl, 3, &out, &n)
        try:
            _imagefiles.write_whole(tmp, PyMemoryView_FromMemory(out, <Py_ssize_t>n, 0x100), durable)  # PyBUF_READ
        finally:
            _serial_free(out)
    elif rc == FS_EIO:
        raise _os_error(saved_errno, f"cannot save the image: {_os.strerror(saved_errno)}", path)
    else:
        _written(rc, st, sl)
    return 0


cdef _Sublist _new_like(fs_sublist *loaded, Py_ssize_t cache_size):
    """A Sublist object owning the C index `loaded` (freed on failure)."""
    cdef _Sublist obj
    try:
        d = _serial_dialect(loaded)
        obj = Sublist.__new__(Sublist, _NAMES[d])
    except BaseException:
        fs_sublist_free(loaded)
        raise
    fs_sublist_free(obj.sl)
    obj.sl = loaded
    obj._set_cache(cache_size)
    return obj


def _sublist_from_bytes(data, cache_size=0, verify=True, source=None, own_mapping=False):
    """An index over data: an image matched in place (the buffer held), or
    a version 1/2 blob rebuilt.  NotAnImageError for data that does not start
    with the magic, CorruptImageError for damaged data (both ValueErrors), TypeError for
    non-buffers.  own_mapping: data is Sublist.open's read-only mapping of
    the file it opened (read in place; any other buffer that can change is
    copied first)."""
    cache_size = _args.cache_size(cache_size)
    # (sublist.h's fs_verify: the level _imagefiles.verify_level names)
    level = _imagefiles.verify_level(verify)
    cdef int check = FS_VERIFY_CHECKSUM if level == "checksum" else FS_VERIFY_FULL if level else FS_VERIFY_NONE
    cdef Py_buffer view
    data = _imagefiles.contiguous(data)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef fs_sublist *loaded = NULL
    cdef fs_error err
    cdef int rc
    cdef _Sublist obj
    cdef bint image = fs_image_is(<const char *>view.buf, <size_t>view.len)
    # a check (full, or the checksum alone) runs on every CPU this process
    # may use (C decides from the image's size whether threads pay)
    cdef unsigned threads = fs_index_threads() if check != FS_VERIFY_NONE else 1
    head = (<const char *>view.buf)[:view.len if view.len < 8 else 8]
    if not image and not _imagefiles.has_magic(head):
        # Not an image nor a serialized index at all (a CSV, say): said
        # as such, not as the header the C loader finds truncated or wrong.
        PyBuffer_Release(&view)
        raise _imagefiles.not_an_image(source, head)
    if image and (not (own_mapping or _imagefiles.unchanging(data)) or (<size_t>view.buf) % 8):
        # The index reads these bytes for as long as it lives, and trusts
        # what it checked once (verify=True): a buffer that may change under
        # it -- any whose owner can still write it, read-only view or not --
        # or one it cannot read in place, is copied once (bytes are
        # immutable and 8-byte aligned).
        PyBuffer_Release(&view)
        data = bytes(data)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            if image:
                rc = fs_image_open(<const char *>view.buf, <size_t>view.len, check, <unsigned>threads, &loaded, &err)
            else:
                rc = fs_sublist_load(<const char *>view.buf, <size_t>view.len, &loaded, &err)
    except BaseException:
        PyBuffer_Release(&view)
        raise
    if rc != FS_OK or not image:
        PyBuffer_Release(&view)
    if rc == FS_EBADDATA:
        raise _imagefiles.corrupt(source, err.reason.decode("ascii"), err.pos)
    if rc != FS_OK:
        raise MemoryError()
    if not image:
        return _new_like(loaded, cache_size)
    try:
        obj = _new_like(loaded, cache_size)
    except BaseException:
        PyBuffer_Release(&view)
        raise
    obj._img_view = view
    obj._img_held = True
    obj._img_source = _imagefiles.describe(source, data, view.len)
    return obj


cdef class _MapGuard:
    """A file mapping's guard while Sublist.open reads it (csrc/base/fs_fault.h;
    _imagefiles.open_mapped): from before the first read, so that a file cut
    shorter under it makes the open fail, not the process; handed to the
    index that matches from the mapping, else released before the mapping
    is closed."""
    cdef int slot                   # fs_fault_guard's: >= 0, or FS_ENOSYS / FS_ENOMEM
    cdef const char *buf
    cdef size_t len
    cdef uint64_t tail              # the mapping's last 8 bytes, as at open

    def __cinit__(self, mm):
        cdef Py_buffer v
        PyObject_GetBuffer(mm, &v, PyBUF_SIMPLE)
        self.buf = <const char *>v.buf
        self.len = <size_t>v.len
        PyBuffer_Release(&v)        # mm stays open: the addresses stay
        self.slot = fs_fault_guard(self.buf, self.len)
        if self.len >= 8:
            self.tail = fs_fault_tail(self.buf + self.len - 8)

    @property
    def exhausted(self):
        """Every guard is taken: the file is to be read, not mapped."""
        return self.slot == FS_ENOMEM

    def revoked(self):
        """Was a read past the file's new end turned into zeros?"""
        return self.slot >= 0 and fs_fault_revoked(self.slot)

    def changed(self):
        return self.revoked() or (self.len >= 8 and fs_fault_tail(self.buf + self.len - 8) != self.tail)

    def hand_to(self, _Sublist obj not None, path):
        # obj matches from the mapping: it checks it after every call and
        # releases the guard when it goes (Sublist.__dealloc__).
        if obj._img_held and <const char *>obj._img_view.buf == self.buf and self.len >= 8:
            obj._img_tail_p = self.buf + self.len - 8
            obj._img_tail = self.tail
            obj._img_path = path
            if self.slot >= 0:
                obj._img_guard = self.slot + 1
                self.slot = FS_ENOSYS

    def release(self):
        self._release()

    cdef void _release(self) noexcept:
        if self.slot >= 0:
            fs_fault_unguard(self.slot)
            self.slot = FS_ENOSYS

    def __dealloc__(self):
        self._release()


cdef class _Checksum:
    """The format's checksum (XXH64, fs_checksum.h) of the bytes fed, for
    _imagefiles.ImageChecksum, which sums an image as its bytes arrive."""
    cdef fs_checksum_stream *st

    def __cinit__(self):
        self.st = fs_checksum_stream_new()
        if self.st == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.st != NULL:         # (NULL: __cinit__ found no memory)
            fs_checksum_stream_free(self.st)

    def feed(self, const unsigned char[::1] piece not None):
        cdef size_t n = piece.shape[0]
        if n:
            with nogil:
                fs_checksum_stream_feed(self.st, &piece[0], n)

    def end(self):
        return fs_checksum_stream_end(self.st)


from topicmatch._imagefiles import ImageChecksum as _ImageChecksum    # spark's driver's, and the tests'
