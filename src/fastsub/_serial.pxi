# Serialization glue: Sublist.to_bytes / from_bytes / pickle over
# csrc/fs_serial.c (format: docs/FORMAT.md).  Included into _core.pyx.
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize

cdef extern from "fs_serial.h" nogil:
    int fs_sublist_dump(fs_sublist *sl, char **out, size_t *len)
    int fs_sublist_load(const char *data, size_t len, fs_sublist **out, fs_error *err)

cdef extern from "sublist.h" nogil:
    fs_dialect _serial_dialect "fs_sublist_dialect"(const fs_sublist *sl)

cdef extern from "fs_alloc.h" nogil:
    void _serial_free "fs_free"(void *p)


def _sublist_to_bytes(Sublist sl not None):
    """The index in fastsub's serialized format (docs/FORMAT.md)."""
    cdef char *out = NULL
    cdef size_t n = 0
    cdef int rc
    with nogil:
        rc = fs_sublist_dump(sl.sl, &out, &n)
    if rc != FS_OK:
        raise MemoryError()
    try:
        return PyBytes_FromStringAndSize(out, <Py_ssize_t>n)
    finally:
        _serial_free(out)


def _sublist_from_bytes(data, cache_size=0):
    """Load an index written by to_bytes() from any contiguous buffer (read
    in place).  ValueError for corrupt data, TypeError for non-buffers."""
    cache_size = _count_arg(cache_size, "cache_size")
    if cache_size < 0:
        raise ValueError(f"cache_size must be >= 0, not {cache_size}")
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    except BufferError:
        # A buffer, but not a contiguous one: copy it once.
        data = memoryview(data).tobytes()
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cdef fs_sublist *loaded = NULL
    cdef fs_error err
    cdef int rc
    try:
        with nogil:
            rc = fs_sublist_load(<const char *>view.buf, <size_t>view.len, &loaded, &err)
    finally:
        PyBuffer_Release(&view)
    if rc == FS_EBADDATA:
        raise ValueError(f"corrupt fastsub index: {err.reason.decode('ascii')} at byte {err.pos}")
    if rc != FS_OK:
        raise MemoryError()
    cdef Sublist obj
    try:
        d = _serial_dialect(loaded)
        obj = Sublist.__new__(Sublist, "mqtt" if d == FS_MQTT else "amqp" if d == FS_AMQP else "nats")
    except BaseException:
        fs_sublist_free(loaded)
        raise
    fs_sublist_free(obj.sl)
    obj.sl = loaded
    obj._cache_size = cache_size
    if cache_size and fs_sublist_set_cache(obj.sl, <size_t>cache_size) != FS_OK:
        raise MemoryError()
    return obj
