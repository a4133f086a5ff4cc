# Serialization glue: Sublist.to_bytes / from_bytes / open / save / pickle
# over csrc/serial/fs_image.c (version 3: the image, matched in place) and
# csrc/serial/fs_serial.c (versions 1 and 2: rebuilt).  Format: docs/FORMAT.md.
# Included into _core.pyx.
import os as _os
import mmap as _mmap
import stat as _stat
import errno as _errnos
import secrets as _secrets
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.errno cimport errno
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcpy

cdef extern from "fs_serial.h" nogil:
    int fs_sublist_dump(fs_sublist *sl, char **out, size_t *len)
    int fs_sublist_load(const char *data, size_t len, fs_sublist **out, fs_error *err)
    ctypedef struct fs_checksum_state:
        pass
    void fs_checksum_begin(fs_checksum_state *s)
    void fs_checksum_feed(fs_checksum_state *s, const void *data, size_t n)
    uint64_t fs_checksum_end(const fs_checksum_state *s)

cdef extern from "sublist.h" nogil:
    fs_dialect _serial_dialect "fs_sublist_dialect"(const fs_sublist *sl)

cdef extern from "sublist.h" nogil:
    void _serial_free "fs_free"(void *p)
    void fs_pages_huge(void *p, size_t size)

cdef extern from "Python.h":
    PyObject *_new_bytes "PyBytes_FromStringAndSize"(const char *v, Py_ssize_t n)
    char *_bytes_data "PyBytes_AS_STRING"(PyObject *o)
    int _PyBytes_Resize(PyObject **o, Py_ssize_t n) except -1
    void Py_XDECREF(PyObject *o)
    enum: PY_SSIZE_T_MAX


cdef int _write_image(Sublist sl, int version, char **out, size_t *n, char *buf=NULL,
                      size_t cap=0) except -1:
    # The image (3) or blob (2) of sl into *out, *n: a new buffer, or
    # (version 3) buf[0..cap) when it fits there (then *out == buf).
    cdef int rc, st
    if version != 3 and version != 2:
        raise TopicmatchValueError(f"version must be 2 or 3, not {version!r}")
    sl._enter()
    with nogil:
        if version == 3:
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


cdef int _written_state(Sublist sl, int rc) noexcept nogil:
    # After a writer, inside sl's _enter/_leave: what its image says.  An
    # opened file that changed while it was read comes first (what was
    # written may hold its zeros or its new bytes); a damaged opened image
    # is only found damaged on the way (FS_EBADDATA).
    cdef int st = sl._file_state()
    if st == IMG_OK and rc == FS_EBADDATA:
        st = sl._image_state()
    return st


cdef int _written(int rc, int st, Sublist sl) except -1:
    # A writer's status, after sl's _leave: the image's error (st), else
    # anything left is memory.
    sl._raise_state(st)
    if rc != FS_OK:
        raise MemoryError()
    return 0


def _sublist_to_bytes(Sublist sl not None, version=3):
    """The index as bytes (docs/FORMAT.md): an image (3) or version 2."""
    cdef char *out = NULL
    cdef size_t n = 0
    cdef int v = _count_arg(version, "version")
    if v == 3:
        return _image_bytes(sl)
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


cdef Py_ssize_t _image_room_override = -1


def _set_image_bytes_room(n):
    """Testing only: to_bytes() writes the image into a bytes object of n
    bytes (-1: the index's own estimate, fs_image_size_hint), so that a
    test can make it too small.  Returns the previous n."""
    global _image_room_override
    old = _image_room_override
    _image_room_override = n
    return old


cdef object _image_bytes(Sublist sl):
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
    if _image_room_override >= 0:
        hint = <size_t>_image_room_override
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
        return <object>o
    finally:
        Py_XDECREF(o)


def _save_mode(mode):
    """save()'s mode= checked: None, or permission bits 0o000-0o777."""
    if mode is None:
        return None
    if type(mode) is bool or not isinstance(mode, int):
        raise TopicmatchTypeError(f"mode must be int or None, not {type(mode).__name__}")
    if not 0 <= mode <= 0o777:
        raise TopicmatchValueError(f"mode must be permission bits 0o000-0o777, not {mode:#o}")
    return int(mode)


def _save_temp(folder, base, path):
    """A new temporary file beside path, made as open() makes a file: mode
    0o666 less the umask, which the kernel applies, so the umask is never
    read (reading it means setting it, process-wide).  mkstemp would give
    0o600, and a worker of another user could not open the saved image.
    O_EXCL and O_NOFOLLOW: the name is new, never someone's link.  An error
    names the user's path; the temporary's name means nothing to them."""
    flags = _os.O_RDWR | _os.O_CREAT | _os.O_EXCL | getattr(_os, "O_NOFOLLOW", 0) | \
        getattr(_os, "O_CLOEXEC", 0) | getattr(_os, "O_BINARY", 0)
    for _ in range(100):
        tmp = _os.path.join(folder, f".{base}.{_secrets.token_hex(6)}.tmp")
        try:
            return _os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise _os_error(e.errno, f"cannot save the image: {e.strerror}", path) from None
    raise _os_error(_errnos.EEXIST, "cannot save the image: no free temporary name beside it", path)


def _rename_into_place(tmp, path, folder, durable):
    """The temporary file tmp, written whole, renamed over path (in folder),
    and with durable the rename itself on disk: the last step of every
    image file written (save(), build_image)."""
    try:
        _os.replace(tmp, path)
    except OSError as e:
        raise _os_error(e.errno, f"cannot save the image: {e.strerror}", path) from None
    if durable and hasattr(_os, "O_DIRECTORY"):
        dfd = _os.open(folder, _os.O_RDONLY | _os.O_DIRECTORY)
        try:
            _os.fsync(dfd)
        finally:
            _os.close(dfd)


def _sublist_save(Sublist sl not None, path, mode=None, durable=True):
    """Write the image to path atomically: into a temporary file in the same
    folder (through its pages: the image is never whole in memory), on disk
    (fsync; not with durable=False), then renamed over path, and the rename
    itself on disk (the same).  The file gets the mode open() would give
    it (0o666 less the umask), or exactly `mode` when one is given."""
    if sl.closed:                       # before any temporary file is made
        raise sl._closed_error()
    path = _os.fspath(path)
    mode = _save_mode(mode)
    folder = _os.path.dirname(_os.path.abspath(path))
    fd, tmp = _save_temp(folder, _os.path.basename(path), path)
    try:
        if mode is not None:
            # Exactly as asked, the umask aside (as chmod does): a server
            # with umask 077 can still save an image its workers of another
            # user read (mode=0o644).
            if hasattr(_os, "fchmod"):
                _os.fchmod(fd, mode)
            else:
                _os.chmod(tmp, mode)
    except OSError as e:
        _os.close(fd)
        _os.unlink(tmp)
        raise _os_error(e.errno, f"cannot save the image with mode {mode:#o}: {e.strerror}", path) from None
    _os.close(fd)
    cdef bytes ctmp = _os.fsencode(tmp)
    cdef const char *ctmp_p = ctmp
    cdef int rc, st, saved_errno = 0
    cdef int c_durable = 1 if durable else 0
    cdef char *out = NULL
    cdef size_t n = 0
    try:
        sl._enter()
        with nogil:
            rc = fs_image_save(sl.sl, ctmp_p, c_durable)
            saved_errno = errno
            st = _written_state(sl, rc)
            sl._leave()
        if rc == FS_ENOSYS:             # no file mappings here: through memory
            _write_image(sl, 3, &out, &n)
            try:
                with open(tmp, "wb") as f:
                    f.write(PyMemoryView_FromMemory(out, <Py_ssize_t>n, 0x100))     # PyBUF_READ
                    f.flush()
                    if durable:
                        _os.fsync(f.fileno())
            finally:
                _serial_free(out)
        elif rc == FS_EIO:
            raise _os_error(saved_errno, f"cannot save the image: {_os.strerror(saved_errno)}", path)
        else:
            _written(rc, st, sl)
        _rename_into_place(tmp, path, folder, durable)
        tmp = None
    finally:
        if tmp is not None:
            try:
                _os.unlink(tmp)
            except OSError:
                pass


cdef Sublist _new_like(fs_sublist *loaded, Py_ssize_t cache_size):
    """A Sublist object owning the C index `loaded` (freed on failure)."""
    cdef Sublist obj
    try:
        d = _serial_dialect(loaded)
        obj = Sublist.__new__(Sublist, _NAMES[d])
    except BaseException:
        fs_sublist_free(loaded)
        raise
    fs_sublist_free(obj.sl)
    obj.sl = loaded
    obj._cache_size = cache_size
    if cache_size and fs_sublist_set_cache(obj.sl, <size_t>cache_size) != FS_OK:
        raise MemoryError()
    return obj


cdef int _verify_level(object verify) except -1:
    """verify= as fs_image_open's level (fs_image.h, fs_verify): True
    checks everything, "checksum" the checksum alone, False neither."""
    if isinstance(verify, str):
        if verify == "checksum":
            return FS_VERIFY_CHECKSUM
        raise TopicmatchValueError(f"verify must be True, False or 'checksum', not {verify!r}")
    return FS_VERIFY_FULL if verify else FS_VERIFY_NONE


cdef bint _unchanging(object data):
    """Can data's bytes never change while an index reads them?  Only
    bytes' (a memoryview's too, when it views bytes).  A read-only view
    says nothing of its owner: memoryview(bytearray).toreadonly(), or a
    read-only mmap of a file someone may rewrite, can change under it."""
    if isinstance(data, memoryview):
        data = data.obj
    return type(data) is bytes


# The first bytes of every image and serialized index (docs/FORMAT.md).
_MAGIC = b"\x89FSB\r\n\x1a\n"


cdef bint _has_magic(const char *buf, Py_ssize_t n):
    """Does buf start as an image or serialized index does?  A non-empty
    buffer shorter than the magic that is its prefix counts: a truncated
    image, not a foreign file."""
    cdef Py_ssize_t k = n if n < 8 else 8
    return n > 0 and buf[:k] == _MAGIC[:k]


cdef object _not_an_image(object source, const char *buf, Py_ssize_t n):
    """The NotAnImageError of data that does not start with the magic."""
    what = f"{source!r}: " if source is not None else ""
    head = buf[:n if n < 8 else 8]
    if n == 0:
        return NotAnImageError(f"{what}not a topicmatch image: it is empty")
    return NotAnImageError(f"{what}not a topicmatch image: bad magic: it starts with {head!r}, not "
                           f"{_MAGIC!r}, the magic bytes every topicmatch image and serialized index "
                           f"starts with")


cdef str _corrupt_message(const fs_error *err):
    """The text of a refused image: the reason and where (docs/FORMAT.md).
    A checksum is stored right after the bytes it sums ([0, 48 + P)): its
    mismatch names that range, not only the byte where it is stored."""
    reason = err.reason.decode('ascii')
    if reason == "checksum mismatch":
        return (f"corrupt topicmatch index: checksum mismatch: the XXH64 of bytes [0, {err.pos}) "
                f"is not the checksum stored at byte {err.pos}")
    return f"corrupt topicmatch index: {reason} at byte {err.pos}"


def _sublist_from_bytes(data, cache_size=0, verify=True, source=None, own_mapping=False):
    """An index over data: an image matched in place (the buffer held), or
    a version 1/2 blob rebuilt.  NotAnImageError for data that does not start
    with the magic, CorruptImageError for damaged data (both ValueErrors), TypeError for
    non-buffers.  own_mapping: data is Sublist.open's read-only mapping of
    the file it opened (read in place; any other buffer that can change is
    copied first)."""
    cache_size = _count_arg(cache_size, "cache_size")
    if cache_size < 0:
        raise TopicmatchValueError(f"cache_size must be >= 0, not {cache_size}")
    cdef int check = _verify_level(verify)
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except TypeError:
        raise TopicmatchTypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    except BufferError:
        # A buffer, but not a contiguous one: copy it once.
        data = memoryview(data).tobytes()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef fs_sublist *loaded = NULL
    cdef fs_error err
    cdef int rc
    cdef Sublist obj
    cdef bint image = fs_image_is(<const char *>view.buf, <size_t>view.len)
    # a full check runs on every CPU this process may use (C decides from
    # the image's size whether threads pay: fs_image_parallel_min)
    cdef size_t threads = _cpus() if check == FS_VERIFY_FULL else 1
    threads = threads if threads < 64 else 64
    if not image and not _has_magic(<const char *>view.buf, view.len):
        # Not an image nor a serialized index at all (a CSV, say): said
        # as such, not as the header the C loader finds truncated or wrong.
        try:
            raise _not_an_image(source, <const char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
    if image and (not (own_mapping or _unchanging(data)) or (<size_t>view.buf) % 8):
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
        what = f"{source!r}: " if source is not None else ""
        raise CorruptImageError(f"{what}{_corrupt_message(&err)}")
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
    obj._img_source = repr(source) if source is not None else f"<{type(data).__name__} of {view.len} bytes>"
    return obj


cdef class _MapGuard:
    """A file mapping's guard while Sublist.open reads it (csrc/base/fs_fault.h):
    from before the first read, so that a file cut shorter under it makes
    the open fail, not the process; handed to the index that matches from
    the mapping, else released before the mapping is closed."""
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

    cdef bint changed(self):
        return (self.slot >= 0 and fs_fault_revoked(self.slot)) or (
            self.len >= 8 and fs_fault_tail(self.buf + self.len - 8) != self.tail)

    cdef void hand_to(self, Sublist obj, path):
        # obj matches from the mapping: it checks it after every call and
        # releases the guard when it goes (Sublist.__dealloc__).
        if obj._img_held and <const char *>obj._img_view.buf == self.buf and self.len >= 8:
            obj._img_tail_p = self.buf + self.len - 8
            obj._img_tail = self.tail
            obj._img_path = path
            if self.slot >= 0:
                obj._img_guard = self.slot + 1
                self.slot = FS_ENOSYS

    cdef void release(self):
        if self.slot >= 0:
            fs_fault_unguard(self.slot)
            self.slot = FS_ENOSYS

    def __dealloc__(self):
        self.release()


def _open_regular(path):
    """A read-only file object for path, refused at once (ValueError naming
    it) unless it is a regular file: a FIFO, a device or a directory cannot
    be mapped, and opening a FIFO without O_NONBLOCK waits for a writer
    forever.  O_NONBLOCK changes nothing for a regular file's reads."""
    flags = _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_NOCTTY", 0) | \
        getattr(_os, "O_CLOEXEC", 0) | getattr(_os, "O_BINARY", 0)
    fd = _os.open(path, flags)
    try:
        mode = _os.fstat(fd).st_mode
        if not _stat.S_ISREG(mode):
            kind = ("a directory" if _stat.S_ISDIR(mode) else "a FIFO" if _stat.S_ISFIFO(mode)
                    else "a socket" if _stat.S_ISSOCK(mode)
                    else "a device" if _stat.S_ISCHR(mode) or _stat.S_ISBLK(mode) else "not a regular file")
            raise NotAnImageError(f"{path!r}: {kind}, not a topicmatch index file (Sublist.open maps regular files only)")
        return _os.fdopen(fd, "rb")
    except BaseException:
        _os.close(fd)
        raise


def _sublist_open(path, verify=True, cache_size=0):
    """Sublist.open: map the file read-only; an image is matched in place."""
    path = _os.fspath(path)
    cdef _MapGuard guard
    with _open_regular(path) as f:
        size = _os.fstat(f.fileno()).st_size
        if size == 0:
            raise NotAnImageError(f"{path!r}: empty file, not a topicmatch image")
        mm = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
        guard = _MapGuard(mm)
        if guard.slot == FS_ENOMEM:
            # Every guard is taken (csrc/base/fs_fault.h): the file's bytes
            # are read into memory instead, where no change to the file
            # reaches them.
            mm.close()
            f.seek(0)
            return _sublist_from_bytes(f.read(), cache_size, verify, path)
    try:
        try:
            obj = _sublist_from_bytes(mm, cache_size, verify, path, True)
        except ValueError as e:
            if guard.changed():
                raise _image_changed(path, guard.slot >= 0 and fs_fault_revoked(guard.slot)) from e
            raise
        if guard.changed():
            raise _image_changed(path, guard.slot >= 0 and fs_fault_revoked(guard.slot))
        guard.hand_to(obj, path)
        return obj
    finally:
        # An image holds mm's buffer (the mapping lives on with the index,
        # and so does the guard); a version 1/2 file was rebuilt, so its
        # mapping can go now, after its guard.
        guard.release()
        try:
            mm.close()
        except BufferError:
            pass


cdef class _ImageChecksum:
    """An image's checksum summed as its bytes arrive, without holding or
    mapping them (topicmatch.spark's driver receives images over a socket
    this way): update(piece) for each piece in order, then check(source):
    CorruptImageError, worded as open() words it, unless the checksum of
    every byte before the last eight is the value those eight hold
    (docs/FORMAT.md: it sums [0, 48 + P) and stands at 48 + P, the image's
    last eight bytes).  Open the file with verify=False then, whose header
    check ties P to the file's size: the two check what
    open(verify="checksum") checks, with none of the image's pages in
    memory at once."""
    cdef fs_checksum_state st
    cdef unsigned char tail[8]      # the last bytes seen, not summed yet
    cdef size_t ntail
    cdef uint64_t seen

    def __cinit__(self):
        fs_checksum_begin(&self.st)
        self.ntail = 0
        self.seen = 0

    def update(self, const unsigned char[::1] piece not None):
        cdef size_t n = piece.shape[0], total, out, i
        if n == 0:
            return
        cdef const unsigned char *p = &piece[0]
        self.seen += n
        if n >= 8:                  # the tail and all but piece's last eight are summed
            with nogil:
                fs_checksum_feed(&self.st, self.tail, self.ntail)
                fs_checksum_feed(&self.st, p, n - 8)
            memcpy(self.tail, p + n - 8, 8)
            self.ntail = 8
            return
        total = self.ntail + n
        out = total - 8 if total > 8 else 0
        fs_checksum_feed(&self.st, self.tail, out)
        for i in range(self.ntail - out):
            self.tail[i] = self.tail[out + i]
        memcpy(self.tail + self.ntail - out, p, n)
        self.ntail = total - out

    def check(self, source):
        cdef uint64_t stored = 0
        cdef int i
        cdef fs_error err
        if self.ntail == 8:
            for i in range(8):
                stored |= (<uint64_t>self.tail[i]) << (8 * i)
            if fs_checksum_end(&self.st) == stored:
                return
        err.reason = "checksum mismatch" if self.ntail == 8 else "image shorter than its header and root block"
        err.pos = self.seen - 8 if self.ntail == 8 else self.seen
        raise CorruptImageError(f"{source!r}: {_corrupt_message(&err)}")
