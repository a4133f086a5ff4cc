# Batch matching: Sublist.match_many and its result (included by _core.pyx).
#
# Input columns reach C as fs_strings: pyarrow arrays exported through
# Arrow's C Data Interface and read by csrc/arrow/fs_arrow.c, which checks
# them -- (large_)string arrays in place through their data/offsets/validity
# buffers; string_view and dictionary arrays (and chunked arrays cut
# elsewhere than the subjects, for keys) as a pointer and a length per row
# into their own buffers; a Python
# sequence's strings copied, one after another, into buffers of their own
# (_Column).  A dictionary column of subjects is matched once per distinct
# value, and each row takes its value's ids.  The batch itself -- thread
# policy, chunks, feeding the threads, cancelling, the CSR gather -- is
# fs_match_column (csrc/api/fs_column.c); here are its arguments and its
# hooks (converting a list's rows, Ctrl-C, the GIL).  Output ids are
# written by C into one buffer that numpy and pyarrow then view without
# copying; the result over them is BatchResult (_results.py).

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBUF_WRITABLE
from cpython.exc cimport PyErr_CheckSignals
from cpython.pystate cimport PyThreadState

from libc.stdint cimport uintptr_t

_QUEUE_MODES = {"pick": FS_QUEUES_PICK, "all": FS_QUEUES_ALL, "none": FS_QUEUES_NONE}


cdef class _IdBuffer:
    """Owns the int64 id buffer the C core filled; exposes it read-only
    through the buffer protocol so numpy/pyarrow view it in place."""
    cdef fs_idbuf buf             # released into fs_idbuf.c's pool, not freed
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __getbuffer__(self, Py_buffer *buf, int flags):
        # shape and strides are set once, by _take_ids: threads exporting
        # one buffer at once (free-threaded builds) only read this object.
        if flags & PyBUF_WRITABLE:
            raise TopicmatchBufferError("match_many ids are read-only")
        if self.buf.ids != NULL:
            buf.buf = <void *>self.buf.ids
        else:
            buf.buf = <void *>&self.shape[0]     # any valid address for 0 bytes
        buf.obj = self
        buf.len = self.shape[0] * sizeof(int64_t)
        buf.readonly = 1
        buf.itemsize = sizeof(int64_t)
        buf.format = NULL
        if flags & PyBUF_FORMAT:
            buf.format = b"q"
        buf.ndim = 1
        buf.shape = NULL
        buf.strides = NULL
        if flags & PyBUF_ND:
            buf.shape = self.shape
            buf.strides = self.strides
        buf.suboffsets = NULL
        buf.internal = NULL

    def __releasebuffer__(self, Py_buffer *buf):
        pass

    def __dealloc__(self):
        fs_idbuf_free(&self.buf)


cdef _IdBuffer _take_ids(fs_idbuf *b):
    cdef _IdBuffer out = _IdBuffer.__new__(_IdBuffer)
    out.buf = b[0]
    memset(b, 0, sizeof(fs_idbuf))
    out.shape[0] = <Py_ssize_t>out.buf.n
    out.strides[0] = sizeof(int64_t)
    return out


@cython.final
cdef class _Column:
    """A C view (fs_strings) of one column of strings, and what must outlive
    it: the Arrow array read in place, or the copies of a Python
    sequence's strings.

    A sequence's rows are converted by fill_to, which copies each string's
    UTF-8 bytes into the column's own chunks (tm_copies, _pyrows.h: why
    copied).  match_many's threads may match the first rows while fill_to
    converts the rest (fs_batch_feed)."""
    cdef fs_strings s
    cdef object keep           # the Arrow array; or the sequence, until filled
    cdef Py_ssize_t filled     # rows converted so far
    cdef str what              # the argument, for a row's TypeError
    cdef str strict            # not None: a lone surrogate is an invalid <strict>, not a null row
    cdef _Column values        # a dictionary chunk's values (s: its rows, not read; x: their indices)
    cdef fs_arrow_indices x
    cdef fs_arrow_text t       # an Arrow column's rows, as csrc/arrow/ read them
    cdef tm_copies copies      # a sequence's rows, copied

    def __dealloc__(self):
        tm_copies_free(&self.copies)
        fs_arrow_text_free(&self.t)

    cdef int fill_to(self, Py_ssize_t end) except -1:
        """Convert rows [filled, end) of the sequence.  No Python code runs
        here, so the list cannot change under it; match_many calls it with
        the interpreter lock held throughout, between feeds too."""
        cdef Py_ssize_t i = self.filled, other_len = 0
        cdef const char *p
        cdef object items = self.keep, held
        if end > <Py_ssize_t>self.s.n:
            end = <Py_ssize_t>self.s.n
        if end <= self.filled:
            return 0
        if end > PySequence_Fast_GET_SIZE(items):
            raise TopicmatchRuntimeError("the subjects list changed size during match_many")
        while True:
            # the usual rows (ASCII str) in C, up to the first other one
            i = tm_copies_fill(&self.copies, PySequence_Fast_ITEMS(items), i, end)
            if i == end:
                break
            held = <object>PySequence_Fast_ITEMS(items)[i]    # p may point into it: kept until copied
            p = _other_row(self, i, held, &other_len)
            # (the error it may make and catch may run a collection, and a
            # finalizer change the list: checked, and read again above)
            if end > PySequence_Fast_GET_SIZE(items):
                raise TopicmatchRuntimeError("the subjects list changed size during match_many")
            tm_copies_put(&self.copies, i, p, <size_t>other_len)
            i += 1
        self.filled = end
        if end == <Py_ssize_t>self.s.n:
            self.keep = None           # every string is copied
        return 0


cdef const char *_other_row(_Column c, Py_ssize_t i, object x, Py_ssize_t *ln) except? NULL:
    """fill_to's row i when it is not an ASCII str (tm_copies_fill's loop
    stops at it): a str's UTF-8 bytes; NULL for a null row (None,
    or a lone surrogate: an invalid row, unless the column is strict); a
    wrong type is a mistake in the caller's code, not data to flag: a
    TypeError (bytes included: str only, as everywhere)."""
    cdef const char *p
    if isinstance(x, str):
        p = PyUnicode_AsUTF8AndSize(x, ln)
        if p != NULL:
            return p
        PyErr_Clear()
        if c.strict is None:
            try:
                return _utf8_or_raise(x, ln)     # fails the same way, raising
            except UnicodeEncodeError:
                return NULL
    elif x is None:
        return NULL
    raise _args.row_error(c.what, c.strict, i, x)


cdef _Column _ptrs_column(Py_ssize_t n, str what):
    """An empty FS_STR_PTRS column of n rows, to be filled."""
    cdef _Column c = _Column.__new__(_Column)
    c.what = what
    tm_copies_init(&c.copies, <size_t>n)
    c.s.layout = FS_STR_PTRS
    c.s.n = <size_t>n
    c.s.ptrs = c.copies.ptrs
    c.s.lens = c.copies.lens
    return c


cdef _Column _column_of_strs(object items, str what, bint fill=True):
    """list/tuple (or any iterable) of str; None rows become nulls, other
    types a TypeError naming what and the row.  fill=False leaves the rows
    to _Column.fill_to."""
    if type(items) is not list and type(items) is not tuple:
        items = _seq(items, what, "str")
    elif TM_FREE_THREADED and type(items) is list:
        # fill_to reads the rows as borrowed pointers, safe while no other
        # thread can change the list: without the GIL another thread can,
        # so it reads a tuple of them instead (copied under the list's lock)
        items = tuple(items)
    cdef _Column c = _ptrs_column(len(items), what)
    c.keep = items
    if fill:
        c.fill_to(len(items))
    return c


# ------------------------------------------------------------- Arrow columns
#
# Accepted wherever a column of strings is: string, large_string,
# string_view (pyarrow >= 16) and dictionary<any integer, one of these>,
# each as an Array or a ChunkedArray.  binary and other types are a
# TypeError naming the argument (bytes are not text, as in pyarrow).
#
# Each array is exported through Arrow's C Data Interface into structs
# csrc/arrow/ holds (fs_arrow_export) and reads, checking every read
# against the sizes of the array's buffers (pyarrow validates only when
# asked, and a buffer may be changed in place after it did).  Here: the
# export's call, the sizes (_columns.buffer_sizes), the errors.


@cython.final
cdef class _Arrow:
    """Arrow arrays exported (fs_arrow_export, one a chunk), and the arrays
    themselves, kept so that their buffers outlive the exports."""
    cdef fs_arrow_export *x
    cdef size_t n
    cdef list arrays

    def __dealloc__(self):
        fs_arrow_exports_free(self.x, self.n)


cdef _Arrow _export(list arrays, str what):
    """arrays exported, each one's type checked (TypeError naming what if
    it is not a column of strings) and its buffers' sizes given."""
    cdef _Arrow a = _Arrow.__new__(_Arrow)
    cdef fs_arrow_export *x
    cdef int64_t *at
    a.x = fs_arrow_exports_new(len(arrays))
    if a.x == NULL:
        raise MemoryError()
    a.arrays = arrays
    for arr in arrays:
        x = &a.x[a.n]
        a.n += 1
        arr._export_to_c(<uintptr_t>&x.array, <uintptr_t>&x.schema)
        if fs_arrow_export_kind(x) == FS_ARROW_NOT_TEXT:
            raise _columns.arrow_type_error(what, arr.type)
        sizes, own = _columns.buffer_sizes(arr, x.kind == FS_ARROW_DICTIONARY)
        at = fs_arrow_export_sizes(x, own, len(sizes) - own)
        if at == NULL:
            raise MemoryError()
        for k in range(len(sizes)):
            at[k] = sizes[k]
    return a


cdef list _chunks(object col, str what):
    """The Arrow arrays of col (_columns.arrow_chunks), a column without
    chunks its type checked (each chunk's is, as it is exported)."""
    chunks = _columns.arrow_chunks(col, what)
    if not chunks:
        _check_arrow_type(col.type, what)
    return chunks


cdef _Arrow _export_column(object col, str what):
    """A whole Arrow column's chunks exported."""
    return _export(_chunks(col, what), what)


cdef int _check_arrow_type(object t, str what) except -1:
    """TypeError naming what unless the Arrow type t is a column of
    strings (for a column with no chunk to export, and before pyarrow's own
    validation of insert_many's)."""
    cdef fs_arrow_export x
    memset(&x, 0, sizeof(x))
    t._export_to_c(<uintptr_t>&x.schema)
    cdef int kind = fs_arrow_export_kind(&x)
    fs_arrow_export_free(&x)
    if kind == FS_ARROW_NOT_TEXT:
        raise _columns.arrow_type_error(what, t)
    return 0


cdef object _arrow_error(const fs_arrow_error *err, str what, Py_ssize_t row_base):
    """The ValueError of a column csrc/arrow/ refused (its message, row
    numbers counted from row_base)."""
    cdef char msg[512]
    fs_arrow_describe(err, what.encode(), row_base, msg, sizeof(msg))
    return TopicmatchValueError(msg.decode())


cdef _Column _arrow_column(_Arrow a, str what, Py_ssize_t row_base, bint values=False):
    """The rows of a's chunks (or, values, of its one chunk's dictionary)
    as one column, read by csrc/arrow/ (in place, or a pointer per row)."""
    cdef _Column c = _Column.__new__(_Column)
    cdef fs_arrow_error err
    cdef int rc = fs_arrow_text_read(&c.t, a.x, a.n, values, &err)
    if rc == FS_ENOMEM:
        raise MemoryError()
    if rc != FS_OK:
        raise _arrow_error(&err, what, row_base)
    c.s = c.t.s
    c.what = what
    c.keep = a
    c.filled = <Py_ssize_t>c.s.n
    return c


cdef _Column _dictionary_column(_Arrow a, str what, Py_ssize_t row_base):
    """A dictionary chunk to be matched once per distinct value: its
    indices checked (then its values, whose errors name the dictionary)."""
    cdef fs_arrow_error err
    cdef _Column c = _Column.__new__(_Column)
    if fs_arrow_indices_of(&a.x[0].col, &c.x, &err) != FS_OK:
        raise _arrow_error(&err, what, row_base)
    c.values = _arrow_column(a, what, 0, True)
    c.what = what
    c.keep = a
    c.filled = <Py_ssize_t>a.x[0].array.length
    c.s.layout = FS_STR_PTRS
    c.s.n = <size_t>a.x[0].array.length
    return c


def _arrow_rows(col, shrink=None):
    """Testing: the rows of an Arrow column (Array or ChunkedArray) as the
    C reader (csrc/arrow/) sees them, each bytes or None, with the errors
    match_many's values would raise; and whether the column was read in
    place (through its offsets) rather than a pointer per row.  shrink
    ({buffer: bytes}, an Array's; its dictionary's buffers numbered after
    its own): those buffers said that much shorter than they are, as
    pyarrow (which checks sizes when it builds an array) never says."""
    cdef _Arrow a = _export_column(col, "values")
    for k, less in (shrink or {}).items():
        if not 0 <= k < a.x[0].col.n_sizes + a.x[0].col.n_dict_sizes:
            raise TopicmatchIndexError(f"no buffer {k}")
        (<int64_t *>a.x[0].col.sizes)[k] -= less
    cdef _Column c = _arrow_column(a, "values", 0)
    cdef const char *p
    cdef size_t ln, i
    rows = []
    for i in range(c.s.n):
        rows.append(p[:ln] if fs_strings_get(&c.s, i, &p, &ln) else None)
    return rows, c.s.layout == FS_STR_ARROW


def _arrow_indices(arr):
    """Testing: a dictionary array's indices as the C reader reads them,
    each an int or None (null), every one checked against the dictionary
    (then its values checked too), with match_many's errors."""
    cdef _Arrow a = _export([arr], "values")
    cdef fs_arrow_indices x
    cdef fs_arrow_error err
    cdef int64_t i, k
    if a.x[0].kind != FS_ARROW_DICTIONARY:
        raise TopicmatchTypeError(f"not a dictionary array: {arr.type}")
    if fs_arrow_indices_of(&a.x[0].col, &x, &err) != FS_OK:
        raise _arrow_error(&err, "values", 0)
    return [k if fs_arrow_index_at(&x, i, &k) else None for i in range(x.length)]


# ---------------------------------------------- Arrow columns for insert_many

cdef _Column _bulk_column(object col, str what, str singular):
    """insert_many/remove_many's filters or queues as one _Column: an Arrow
    column read in place, its offsets checked by csrc/arrow/ and its UTF-8
    by C (a filter's by the tokenizer, as each row is parsed, naming the
    row as the list path does; a queue column's here: the core takes a
    NATS or MQTT queue name's bytes as they are), or a list of str copied
    (a lone surrogate: InvalidSubjectError, as on the list path)."""
    cdef _Column c
    cdef size_t i, at = 0
    if _columns.is_arrow(col):
        c = _arrow_column(_export_column(col, what), what, 0)
        if singular == "queue":
            i = fs_strings_first_not_utf8(&c.s, &at)
            if i < c.s.n:
                raise TopicmatchValueError(f"{what}[{i}] is not valid UTF-8 (byte {at})")
        return c
    c = _ptrs_column(len(col), what)
    c.keep = col
    c.strict = singular
    c.fill_to(len(col))
    return c


cdef list _segments(object col, str what, Py_ssize_t row_base=0, bint fill=True, bint spread=False):
    """Split an input column into [(row_base, _Column)]: one segment, or one
    per chunk of a ChunkedArray.  row_base: the first row's number in error
    messages.  fill=False leaves a Python sequence's rows to
    _Column.fill_to (Arrow columns are read in place: always filled).
    spread: a dictionary chunk becomes a segment of its own with no rows
    read, its indices and values read instead (_dictionary_column)."""
    cdef _Arrow a
    if type(col) is list or type(col) is tuple:
        return [(0, _column_of_strs(col, what, fill))]      # the usual call: no probing
    arrow = _columns.arrow_input(col)
    if arrow is not None:
        out, base = [], 0
        for chunk in _chunks(arrow, what):
            a = _export([chunk], what)
            if spread and a.x[0].kind == FS_ARROW_DICTIONARY:
                out.append((base, _dictionary_column(a, what, row_base + base)))
            else:
                out.append((base, _arrow_column(a, what, row_base + base)))
            base += len(chunk)
        return out
    if _columns.is_ndarray(col):
        return [(0, _column_of_strs(_columns.numpy_strings(col, what), what, fill))]
    return [(0, _column_of_strs(_args.iterable(col, what, _args.tname(col)), what, fill))]


cdef _Column _checked_keys(object keys):
    """keys as one column over every row: an Arrow string column or a list
    of str/None (None: the row's subject is its key).  Anything else is a
    TypeError: a key that is silently ignored would partition rows by the
    wrong thing."""
    if type(keys) is list or type(keys) is tuple:
        return _column_of_strs(keys, "keys")
    arrow = _columns.arrow_input(keys)
    if arrow is not None:
        return _arrow_column(_export_column(arrow, "keys"), "keys", 0)
    if _columns.is_ndarray(keys):
        keys = _columns.numpy_keys(keys)
    return _column_of_strs(_args.iterable(keys, "keys", type(keys).__name__), "keys")


cdef struct _HookState:
    PyObject *cols               # match_many's list of _Column, one a part
    PyThreadState *released      # while the GIL is let go


cdef int _fill_hook(void *ctx, size_t k, size_t end, size_t *filled) except -1:
    """fs_match_column's fill: rows of part k converted through end."""
    cdef _Column c = <_Column>PyList_GET_ITEM(<object>(<_HookState *>ctx).cols, <Py_ssize_t>k)
    c.fill_to(<Py_ssize_t>end)
    filled[0] = <size_t>c.filled
    return 0


cdef int _poll_hook(void *ctx) except -1:
    """fs_match_column's poll: Ctrl-C (any signal handler's exception)."""
    return PyErr_CheckSignals()


cdef void _release_hook(void *ctx) noexcept:
    (<_HookState *>ctx).released = PyEval_SaveThread()


cdef void _acquire_hook(void *ctx) noexcept:
    PyEval_RestoreThread((<_HookState *>ctx).released)


cdef object _match_many(_Sublist self, _Sublist also, object subjects, object keys, object queues,
                        object threads, bint dedupe):
    import numpy as np
    cdef fs_column_options opt
    opt.queues = _QUEUE_MODES[_args.queue_mode(queues)]
    opt.dedupe = dedupe
    opt.threads = <unsigned>_args.threads(threads, 256)
    # a dictionary column is matched once per distinct value, unless each
    # row's pick follows a key of its own
    cdef list cols = [c for _, c in _segments(subjects, "subjects", 0, False,
                                              keys is None or opt.queues != FS_QUEUES_PICK)]
    cdef _Parts parts = _Parts.of(cols)
    cdef _Column kcol = None
    if keys is not None:
        kcol = _checked_keys(keys)
        if kcol.s.n != parts.rows:
            raise TopicmatchValueError(f"keys has {kcol.s.n} rows, subjects {parts.rows}")
    offsets = np.empty(parts.rows + 1, dtype=np.int64)
    invalid = np.empty(parts.rows, dtype=np.bool_)
    offsets[0] = 0
    cdef int64_t[::1] off_view = offsets
    cdef uint8_t[::1] inv_view = invalid.view(np.uint8)
    cdef _HookState st
    st.cols = <PyObject *>cols
    cdef fs_column_hooks hooks
    hooks.ctx = &st
    hooks.fill = _fill_hook
    hooks.poll = _poll_hook
    hooks.release = _release_hook
    hooks.acquire = _acquire_hook
    cdef fs_idbuf ids
    memset(&ids, 0, sizeof(ids))
    try:
        if fs_match_column(self.sl, also.sl if also is not None else NULL, parts.p, parts.n,
                           &kcol.s if kcol is not None else NULL, &opt, &hooks,
                           &off_view[0] + 1, &inv_view[0] if parts.rows else NULL, &ids) != FS_OK:
            raise MemoryError()
        # Read-only, as sub_ids is: a result is a value (it hashes).
        offsets.flags.writeable = False
        invalid.flags.writeable = False
        return BatchResult._of(offsets, np.frombuffer(_take_ids(&ids), dtype=np.int64), invalid)
    finally:
        fs_idbuf_free(&ids)           # unless _take_ids took them: a Python allocation failed


@cython.final
cdef class _Parts:
    """match_many's columns as fs_match_column's parts (a dictionary
    chunk's: its indices and values); the columns themselves stay with the
    caller."""
    cdef fs_column_part one
    cdef fs_column_part *p
    cdef size_t n, rows

    @staticmethod
    cdef _Parts of(list cols):
        cdef _Parts out = _Parts.__new__(_Parts)
        cdef _Column c
        cdef size_t k = 0
        out.n = <size_t>len(cols)
        out.p = &out.one
        if out.n > 1:
            out.p = <fs_column_part *>PyMem_Malloc(sizeof(fs_column_part) * out.n)
            if out.p == NULL:
                raise MemoryError()
        for c in cols:
            out.p[k].rows = c.s
            out.p[k].filled = <size_t>c.filled
            out.p[k].dict = &c.x if c.values is not None else NULL
            out.p[k].values = &c.values.s if c.values is not None else NULL
            out.rows += c.s.n
            k += 1
        return out

    def __dealloc__(self):
        if self.p != &self.one:
            PyMem_Free(self.p)
