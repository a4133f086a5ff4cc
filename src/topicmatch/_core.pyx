# cython: language_level=3
"""topicmatch._core: the thin Cython layer over the C core in csrc/.

It converts arguments, calls C, and turns C status codes into exceptions.
Strings reach C as the UTF-8 buffers CPython caches in each str (no copy for
ASCII strings); results come back in C-owned buffers and are converted here.

Threads, with or without the GIL (the module is built freethreading_compatible,
so a free-threaded CPython keeps the GIL off): the C index is protected by its
own lock (csrc/base/fs_brlock.h); a Sublist's Python fields are written only while
it is made and when it is freed; MatchResult's lazily made lists are set in a
critical section; BatchResult and its id buffer are read-only once made; the
module's C globals are testing hooks.  docs/design.md, "What protects each
shared structure", has the whole table.
"""
cimport cython
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.list cimport PyList_GetSlice, PyList_GET_ITEM
from cpython.sequence cimport PySequence_List
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

from topicmatch._core cimport *

from topicmatch import _columns      # what a column argument is, in plain Python
from topicmatch import _args         # the checks and words of arguments off the hot paths
from topicmatch import _stats        # stats()'s dict, from the core's counters
from topicmatch._results import BatchResult     # match_many's result, in plain Python

#: The format version of the images save() and to_bytes() write (the u16
#: after the magic; docs/FORMAT.md): the core's own constant, so that no
#: module learns it by writing an image.
IMAGE_FORMAT_VERSION = FS_IMAGE_VERSION

# The exception tree, and the errors made alike wherever they are raised
# (_os_error, _image_changed): plain Python, every name here.
from topicmatch._errors import *
globals().update({k.__name__: k for k in _OS_KINDS.values()})     # their home too (pickle)


cdef object _invalid(str what, object s, fs_error *err):
    return _args.invalid(what, s, err.reason.decode("ascii"), err.pos)


cdef inline const char *_utf8(object s, str what, Py_ssize_t *n) except NULL:
    """The UTF-8 bytes of a str; TypeError for non-str, InvalidSubjectError
    for strings that cannot be encoded (lone surrogates)."""
    if TM_IS_ASCII_STR(s):
        # ASCII is its own UTF-8, stored right after the object header:
        # no call (every subject and filter of the benchmarks takes this)
        n[0] = PyUnicode_GET_LENGTH(s)
        return tm_ascii_chars(s)
    return _utf8_any(s, what, n)


cdef const char *_utf8_any(object s, str what, Py_ssize_t *n) except NULL:
    if type(s) is not str and not isinstance(s, str):
        raise _args.not_str(what, s)
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, n)
    if p == NULL:
        PyErr_Clear()
        raise _args.utf8_error(what, s)
    return p


cdef int64_t _sub_id(object sub_id) except? -1:
    cdef int overflow = 0
    if type(sub_id) is not int:
        sub_id = _args.index(sub_id, "sub_id")
    cdef long long v = PyLong_AsLongLongAndOverflow(sub_id, &overflow)
    if overflow:
        raise TopicmatchOverflowError(f"sub_id {sub_id} is outside the signed 64-bit range")
    return <int64_t>v


cdef list _seq(object x, str what, str of):
    """A sequence argument as a new list (_args.seq, which says what is
    refused)."""
    # A list or tuple is copied whole (a copy, never the caller's own list:
    # the items' buffers are read after Python code may have run, and
    # without the GIL), not item by item through an iterator.
    if type(x) is list:
        return PyList_GetSlice(x, 0, len(<list>x))
    if type(x) is tuple:
        return PySequence_List(x)
    return _args.seq(x, what, of)


cdef tuple _core_dialect_names():
    cdef list names = []
    cdef const char *p = fs_dialect_name(0)
    while p != NULL:
        names.append(p.decode("ascii"))
        p = fs_dialect_name(len(names))
    return tuple(names)


#: The dialects' names as the core writes them (fs_dialect_name, its one
#: table of them), in the order of its dialect numbers.
cdef tuple _NAMES = _core_dialect_names()       # read as a C global by _dialect
DIALECT_NAMES = _NAMES


cdef fs_dialect _dialect(object d) except *:
    cdef Py_ssize_t i
    if isinstance(d, str):
        for i in range(len(_NAMES)):
            if _NAMES[i] == d:
                return <fs_dialect>i
    raise _args.dialect_error(d, _NAMES)


cdef int _fill_spec(fs_spec *sp, object f, object sub_id, object q) except -1:
    cdef Py_ssize_t n
    sp.filter = _utf8(f, "filter", &n)
    sp.filter_len = <size_t>n
    sp.id = _sub_id(sub_id)
    if q is None:
        sp.queue = NULL
        sp.queue_len = 0
    else:
        if not isinstance(q, str):
            raise TopicmatchTypeError(f"queue must be str or None, not {_args.tname(q)}")
        sp.queue = _utf8(q, "queue", &n)
        sp.queue_len = <size_t>n
    return 0


cdef object _spec_error(int rc, fs_error *err, object f, object q):
    if rc == FS_ENOMEM:
        return MemoryError()
    # the C core says which argument was wrong (a "$share/G/" group is part
    # of the filter argument, so it names the filter)
    if q is not None and err.in_queue:
        return _invalid("queue", q, err)
    return _invalid("filter", f, err)


@cython.freelist(16)       # match() makes one per call: reuse their memory
cdef class MatchResult:
    """The subscriptions matching one subject.

    ``subs``: ids of the matching plain subscriptions (one per matching
    (filter, id); AMQP: one per id); ``groups``: ``(queue, filter_or_None,
    members)`` per matching queue group (NATS, AMQP: merged by queue name,
    filter None; MQTT: one per (group, filter)).  Order (docs/guide.md, "The order
    of a row"): ``subs`` ascending; ``groups`` by (queue, filter) as bytes,
    members ascending -- whatever the insertion order, cache, threads or
    image round trip."""
    # None: there are none, and the empty list is not made until asked for
    # (~40% of subjects match nothing; `if not m:` or len(m) then costs
    # no list at all).
    cdef list _subs
    cdef list _groups

    @property
    def subs(self):
        return self._subs if self._subs is not None else self._make_empty(False)

    @property
    def groups(self):
        return self._groups if self._groups is not None else self._make_empty(True)

    cdef list _make_empty(self, bint groups):
        """The empty subs or groups list, made on first access.  Making it
        may run other threads or a __del__ that asks first: the list that
        got there first stays."""
        cdef list made = []
        # Free-threaded builds: two threads may ask at once; the critical
        # section (a no-op with the GIL) makes test-and-set one step.
        with cython.critical_section(self):
            if groups:
                if self._groups is None:
                    self._groups = made
                return self._groups
            if self._subs is None:
                self._subs = made
            return self._subs

    def __len__(self):
        cdef Py_ssize_t n = 0 if self._subs is None else len(self._subs)
        if self._groups is None:
            return n
        return n + sum(len(g[2]) for g in self._groups)

    def __repr__(self):
        return f"MatchResult(subs={self.subs!r}, groups={self.groups!r})"

    # A value: two results are equal when their subs and groups are, which
    # is what the repr shows (ids and names print one way each), so equal
    # reprs mean equal results.  The order of both is fixed (the class
    # docstring), so equal answers compare equal whatever path made them:
    # live, cached, image, threads.  Not hashable: subs and groups are the
    # caller's lists to change, and a hash must not change.
    def __eq__(self, other):
        if not isinstance(other, MatchResult):
            return NotImplemented
        return self.subs == (<MatchResult>other).subs and self.groups == (<MatchResult>other).groups

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None


cdef enum:
    # what Sublist._file_state / _image_state found
    IMG_OK = 0
    IMG_CHANGED = 1     # the mapped file's bytes are no longer those opened
    IMG_FAULTED = 2     # ... and a read past its new end was turned into zeros
    IMG_DAMAGED = 3     # the image's damage was met


cdef enum:
    SMALL_IDS = 32      # match(): answers of up to this many plain ids come back on the stack


cdef inline MatchResult _small_result(int64_t *ids, size_t n):
    cdef MatchResult m = MatchResult.__new__(MatchResult)
    if n:
        m._subs = tm_id_list(ids, n)
    return m


cdef MatchResult _to_match_result(fs_result *r, bint mqtt):
    cdef MatchResult m = MatchResult.__new__(MatchResult)
    if r.nplain:
        m._subs = tm_id_list(r.ids, r.nplain)
    if r.ngroups:
        m._groups = tm_groups(r, mqtt)
    return m


cdef class _Specs:
    """The rows of insert_many's columns as fs_specs (read in place: the
    columns -- fcol, qcol, ids, where they are Arrow -- are kept alive here
    while the specs point into them), or, for the bulk builder, those
    columns as they are (specs NULL: none made); and row i back as Python
    objects for an error message (frows[i], qrows[i])."""
    cdef fs_spec *specs
    cdef Py_ssize_t n
    cdef object frows, qrows
    cdef _Column fcol, qcol
    cdef object ids

    def __dealloc__(self):
        PyMem_Free(self.specs)

    cdef int alloc(self, Py_ssize_t n) except -1:
        self.n = n
        self.specs = <fs_spec *>PyMem_Malloc(sizeof(fs_spec) * (n if n else 1))
        if self.specs == NULL:
            raise MemoryError()
        return 0


cdef _Specs _specs_of(filters, sub_ids, queues, bint columns=False):
    """insert_many's columns (sequences, or Arrow and numpy columns) as
    fs_specs, every argument and row checked as insert_many checks them.
    columns: where there is an Arrow column, keep the columns instead of
    making specs (the bulk builder reads them in place)."""
    if type(filters) is not list or (queues is not None and type(queues) is not list):
        af = _columns.arrow_input(filters)
        aq = _columns.arrow_input(queues) if queues is not None else None
        if af is not None or aq is not None:
            return _specs_of_arrow(filters if af is None else af, sub_ids, queues if aq is None else aq,
                                   columns)
    cdef list fl, il, ql
    cdef bint ids_lent
    # The columns as lists of one length, checked once (_args.insert_rows,
    # which says when the caller's list of sub_ids is lent, not copied: its
    # ids are converted before any Python code can run, in tm_specs_fill,
    # and nothing keeps a reference to one after).  The first row that needs
    # _fill_spec, which may run an __index__ that changes a lent list,
    # copies it first: as it was given, since no Python code has run.
    fl, il, ql, ids_lent = _args.insert_rows(filters, sub_ids, queues, TM_FREE_THREADED)
    cdef Py_ssize_t n = len(fl), i = 0
    cdef _Specs sp = _Specs()
    sp.alloc(n)
    sp.frows, sp.qrows = fl, ql
    cdef fs_spec *specs = sp.specs
    # The rows are read below without a bounds check: a lent list checked
    # again (a collection since, in an allocation, may have run a
    # finalizer that changed it; the lists made here no one else holds).
    if len(il) != n:
        raise TopicmatchValueError(f"filters and sub_ids differ in length ({n} != {len(il)})")
    # One try around the loop, not one per item (each try saves the
    # exception state); i says which item failed.
    try:
        while True:
            # the usual rows in C (_pyrows.h), up to the first other one
            i = tm_specs_fill(specs, <PyObject *>fl, <PyObject *>il,
                              <PyObject *>ql if ql is not None else NULL, i, n)
            if i == n:
                break
            if ids_lent:
                il = PyList_GetSlice(il, 0, n)
                ids_lent = False
            _fill_spec(&specs[i], fl[i], il[i], None if ql is None else ql[i])
            i += 1
    except TypeError:
        raise _args.row_type_error(i, fl[i], il[i], None if ql is None else ql[i]) from None
    except InvalidSubjectError as e:
        raise InvalidSubjectError(f"item {i}: {e}", e.subject, e.reason, e.position, i) from None
    except OverflowError as e:
        raise type(e)(f"item {i}: {e}") from None
    return sp


cdef _Specs _specs_of_arrow(filters, sub_ids, queues, bint columns):
    """_specs_of where filters or queues is an Arrow column (string,
    large_string, string_view, dictionary of these, chunked or not), read
    in place (no Python str per row); the other may be a sequence of str.
    queues: a null row is plain.  sub_ids an Arrow or numpy integer array,
    or any sequence of int."""
    if not _columns.is_arrow(filters):
        filters = _seq(filters, "filters", "str")
    if queues is not None and not _columns.is_arrow(queues):
        queues = _seq(queues, "queues", "str or None")
    cdef _Column fcol = _bulk_column(filters, "filters", "filter")
    cdef Py_ssize_t n = <Py_ssize_t>fcol.s.n, i
    ids = _args.int64_column(sub_ids, "sub_ids")
    if len(ids) != n:
        raise TopicmatchValueError(f"filters and sub_ids differ in length ({n} != {len(ids)})")
    cdef _Column qcol = None
    if queues is not None:
        qcol = _bulk_column(queues, "queues", "queue")
        if <Py_ssize_t>qcol.s.n != n:
            raise TopicmatchValueError(f"filters and queues differ in length ({n} != {qcol.s.n})")
    cdef _Specs sp = _Specs()
    sp.n, sp.fcol, sp.qcol, sp.ids = n, fcol, qcol, ids
    sp.frows, sp.qrows = _columns.Rows(filters), (_columns.Rows(queues) if queues is not None else None)
    if columns:
        i = <Py_ssize_t>fs_strings_first_null(&fcol.s)
        if i < n:
            raise TopicmatchTypeError(f"filters[{i}] must be str, not None")
        return sp
    sp.alloc(n)
    cdef fs_spec *specs = sp.specs
    cdef const int64_t[::1] idv = ids
    cdef const int64_t *idp = &idv[0] if n else NULL
    cdef const fs_strings *qs = &qcol.s if qcol is not None else NULL
    for i in range(n):
        if not fs_spec_of_row(&specs[i], &fcol.s, idp, qs, <size_t>i):
            raise TopicmatchTypeError(f"filters[{i}] must be str, not None")
    return sp


cdef class _Sublist:
    """Sublist's C side (the class, its document and its methods off the
    hot paths: _sublist.py): the C index, the guard of its calls, an
    opened image's mapping, and the calls that reach them."""
    # First: the guard's counter lies in the object's first cache line,
    # which every call from another thread already writes (its refcount).
    cdef fs_guard _use
    cdef fs_sublist *sl
    cdef fs_dialect _d
    cdef readonly str dialect
    cdef Py_ssize_t _cache_size
    # A mapped image's bytes, held (exported) for as long as the index
    # matches from them: an mmap cannot be closed under it (_serial.pxi).
    cdef Py_buffer _img_view
    cdef bint _img_held
    cdef object _img_source
    # A mapped file's guard (Sublist.open, _serial.pxi): its slot in
    # csrc/base/fs_fault.c's table plus one (0: none), and the mapping's last
    # 8 bytes, where they are (NULL: not a file) and as they were at open.
    cdef int _img_guard
    cdef const char *_img_tail_p
    cdef uint64_t _img_tail
    cdef object _img_path

    def __cinit__(self, dialect="nats", *, cache_size=0):
        self._d = _dialect(dialect)
        self.dialect = _NAMES[self._d]
        cdef Py_ssize_t n = _args.cache_size(cache_size)
        self.sl = fs_sublist_new(self._d)
        if self.sl == NULL:
            raise MemoryError()
        self._set_cache(n)

    cdef int _set_cache(self, Py_ssize_t n) except -1:
        """A cache of n answers (0: none) for this index."""
        self._cache_size = n
        if n and fs_sublist_set_cache(self.sl, <size_t>n) != FS_OK:
            raise MemoryError()
        return 0

    def __dealloc__(self):
        self._free()

    # Every call that reaches self.sl, or an opened image's bytes, does so
    # between _enter() and _leave() (close() waits for those to leave), and
    # builds no Python object in between that could run other code -- a
    # __del__ could call close() and wait for its own caller.  Errors found
    # inside are raised after _leave().
    cdef inline int _enter(self) except -1:
        if fs_guard_enter(&self._use):
            raise self._closed_error()
        return 0

    cdef inline void _leave(self) noexcept nogil:
        fs_guard_leave(&self._use)

    cdef object _closed_error(self):
        return _closed(self.dialect, self._img_source)

    def _close(self):
        """Sublist.close()'s work (_sublist.py says what it does)."""
        if fs_guard_closed(&self._use):
            with nogil:
                fs_guard_wait_closed(&self._use)
            return
        if not fs_guard_may_wait(&self._use):
            raise _close_refused()
        if not fs_guard_start_close(&self._use):
            with nogil:
                fs_guard_wait_closed(&self._use)      # another thread's close() frees it
            return
        with nogil:
            fs_guard_wait_idle(&self._use)
        self._free()
        fs_guard_set_closed(&self._use)

    @property
    def closed(self):
        """True once close() has begun (no call can start any more)."""
        return fs_guard_closed(&self._use)

    def __enter__(self):
        if fs_guard_closed(&self._use):
            raise self._closed_error()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    cdef void _free(self) noexcept:
        if self.sl != NULL:
            fs_sublist_free(self.sl)
            self.sl = NULL
        if self._img_guard:         # before the mapping goes (another may take its addresses)
            fs_fault_unguard(self._img_guard - 1)
            self._img_guard = 0
        self._img_tail_p = NULL
        if self._img_held:          # after the index: it reads these bytes
            self._img_held = False
            PyBuffer_Release(&self._img_view)     # the mapping's last holder: unmapped

    cdef inline bint _img_changed(self) noexcept nogil:
        # Was the mapped file rewritten or cut shorter under the index?  Its
        # last 8 bytes differ from those read at open (a read of a page past
        # a new end faults into csrc/base/fs_fault.c, which puts zeros over
        # the mapping: they differ too).  One load, on the open()ed only.
        return self._img_tail_p != NULL and fs_fault_tail(self._img_tail_p) != self._img_tail

    cdef int _file_state(self) noexcept nogil:
        # Has the mapped file changed under the index?  IMG_OK, or
        # IMG_CHANGED / IMG_FAULTED (a read past a new end was turned into
        # zeros).  Inside _enter/_leave: it reads the mapping.
        if self._img_tail_p == NULL:
            return IMG_OK
        if self._img_guard and fs_fault_revoked(self._img_guard - 1):
            return IMG_FAULTED
        return IMG_CHANGED if self._img_changed() else IMG_OK

    cdef int _image_state(self) noexcept nogil:
        # _file_state, then IMG_DAMAGED if a mapped image's damage was met.
        # A mapped image's damage shows at the first call that reaches it
        # (every offset is checked when followed): that call fails, and
        # every later one.  A file changed under its mapping is said first:
        # the zeros or the new bytes read as damage too.
        cdef int st = self._file_state()
        if st == IMG_OK and self._img_held and fs_image_damaged(self.sl):
            return IMG_DAMAGED
        return st

    cdef int _raise_state(self, int st) except -1:
        # The error of a state that _file_state or _image_state found
        # (after _leave(): it builds Python objects).
        if st == IMG_CHANGED or st == IMG_FAULTED:
            raise _image_changed(self._img_path, st == IMG_FAULTED)
        if st == IMG_DAMAGED:
            raise _image_damaged(self._img_source)
        return 0

    def __len__(self):
        self._enter()
        cdef uint64_t n = fs_sublist_count(self.sl)
        self._leave()
        return n

    @property
    def generation(self):
        """Grows on every insert or remove that changed the index."""
        self._enter()
        cdef uint64_t g = fs_sublist_generation(self.sl)
        self._leave()
        return g

    def insert(self, filter, sub_id, *, queue=None):
        """insert(filter, sub_id, *, queue=None) -> bool

        Add the subscription; True if it is new.  MQTT also takes
        "$share/GROUP/filter" for a shared subscription."""
        cdef fs_spec sp
        cdef fs_error err
        cdef int rc, st
        _fill_spec(&sp, filter, sub_id, queue)
        self._enter()
        with nogil:
            rc = fs_sublist_insert(self.sl, &sp, &err)
            st = self._file_state()     # an opened image's entry was read (copied to the live part)
            self._leave()
        self._raise_state(st)
        if rc < 0:
            raise _spec_error(rc, &err, filter, queue)
        return rc == 1

    def discard(self, filter, sub_id, *, queue=None):
        """discard(filter, sub_id, *, queue=None) -> bool

        Remove the subscription if present; True if it was there."""
        cdef fs_spec sp
        cdef fs_error err
        cdef int rc, st
        _fill_spec(&sp, filter, sub_id, queue)
        self._enter()
        with nogil:
            rc = fs_sublist_remove(self.sl, &sp, &err)
            st = self._file_state()
            self._leave()
        self._raise_state(st)
        if rc < 0:
            raise _spec_error(rc, &err, filter, queue)
        return rc == 1

    def _bulk(self, filters, sub_ids, queues, bint inserting):
        """insert_many (inserting) and remove_many's work (_sublist.py)."""
        if fs_guard_closed(&self._use):       # said before any argument's error
            raise self._closed_error()
        cdef _Specs sp = _specs_of(filters, sub_ids, queues)
        return self._apply(sp.specs, sp.n, inserting, sp.frows, sp.qrows)

    cdef object _apply(self, fs_spec *specs, Py_ssize_t n, bint inserting, filters, queues):
        """Run the bulk operation on filled specs; filters[i] / queues[i]
        give row i back as Python objects for an error message."""
        cdef size_t changed = 0, bad = 0
        cdef fs_error err
        cdef int rc, st
        self._enter()
        with nogil:
            if inserting:
                rc = fs_sublist_insert_many(self.sl, specs, <size_t>n, &changed, &bad, &err)
            else:
                rc = fs_sublist_remove_many(self.sl, specs, <size_t>n, &changed, &bad, &err)
            st = self._file_state()
            self._leave()
        self._raise_state(st)
        if rc < 0:
            if rc == FS_ENOMEM:
                raise MemoryError()
            e = _spec_error(rc, &err, filters[bad], None if queues is None else queues[bad])
            raise InvalidSubjectError(f"item {bad}: {e}", e.subject, e.reason, e.position, bad)
        return changed

    # match, has_interest, num_interest: plain methods, not cyfunctions
    # (binding=False): a call skips the cyfunction layer, ~100 instructions
    # of ~1,600 on a cached match; the clinic signature keeps
    # inspect.signature working.
    @cython.binding(False)
    @cython.embedsignature.format("clinic")
    def match(self, subject, *, bint dedupe=False):
        """match(subject, *, dedupe=False) -> MatchResult

        dedupe: each sub_id at most once in subs and in each group's
        members (for subscribers holding overlapping filters; always so in
        the AMQP dialect)."""
        # (dedupe a bint: the call without it, nearly every call, takes the
        # C default instead of testing the truth of False: ~15
        # instructions, callgrind, light)
        cdef Py_ssize_t n
        cdef const char *s = _utf8(subject, "subject", &n)
        cdef int64_t ids[SMALL_IDS]
        cdef size_t k, seen_cap = 0
        cdef int64_t *seen = NULL       # (SMALL_IDS ids are deduplicated without a set)
        cdef fs_workspace spare
        cdef fs_workspace *w
        cdef fs_error err
        # A small answer (plain ids only) comes back in ids, the index and
        # the workspace already let go: no Python object is built while
        # either is held.  A larger one stays in the workspace, lent to
        # this call until its objects are built (that may run the garbage
        # collector, and a __del__ may call back into an index on this
        # thread: a nested call gets a workspace of its own).
        # The walk runs with the GIL held: it is shorter than letting go of
        # the GIL and taking it back (the rule and its measurements: docs/
        # design.md, "When match() lets go of the GIL").  Waiting is what
        # the GIL is let go for: where a writer holds the index, the first
        # call returns FS_MATCH_WALK before waiting, and the second waits
        # and walks without it.  (fs_match_first_how, which a test may set
        # to FS_MATCH_CACHE_ONLY: a cached answer is looked up with the GIL
        # held, a miss walks without it.)
        cdef int rc, st = IMG_OK
        self._enter()
        rc = fs_sublist_match_small(self.sl, s, <size_t>n, ids, SMALL_IDS, &k, &spare, &w, &err,
                                    fs_match_first_how)
        if rc == FS_MATCH_WALK:
            with nogil:
                rc = fs_sublist_match_small(self.sl, s, <size_t>n, ids, SMALL_IDS, &k, &spare, &w, &err,
                                            FS_MATCH_WAIT)
        if self._img_held:
            st = self._image_state()
        self._leave()
        if rc < 0:
            if rc == FS_EINVAL:
                raise _invalid("subject", subject, &err)
            raise MemoryError()
        if st != IMG_OK:
            if w != NULL:
                fs_workspace_release(w, &spare)
            self._raise_state(st)
        # dedupe: C's rule (fs_ids_dedupe), on the answer lent to this call
        if w == NULL:
            if dedupe:
                rc = fs_ids_dedupe(ids, &k, &seen, &seen_cap)
                fs_free(seen)
                if rc != FS_OK:
                    raise MemoryError()
            return _small_result(ids, k)
        try:
            if dedupe and fs_result_dedupe(&w.r) != FS_OK:
                raise MemoryError()
            return _to_match_result(&w.r, self._d == FS_MQTT)
        finally:
            fs_workspace_release(w, &spare)

    cdef int _interest(self, object subject, bint count, uint64_t *nplain, uint64_t *nqueue) except -2:
        """has_interest (count false: 1 or 0) and num_interest (count: the
        two counts, returns 0): one walk with a workspace's scratch, taken
        before the index is entered and given back before any error is
        raised."""
        cdef Py_ssize_t n
        cdef const char *s = _utf8(subject, "subject", &n)
        cdef fs_workspace spare
        cdef fs_error err
        cdef int rc, st
        cdef fs_workspace *w = fs_workspace_acquire(&spare)
        if w == NULL:
            raise MemoryError()
        try:
            self._enter()
        except ClosedError:
            fs_workspace_release(w, &spare)
            raise
        if count:
            rc = fs_sublist_interest(self.sl, s, <size_t>n, &w.sc, nplain, nqueue, &err)
        else:
            rc = fs_sublist_has_interest(self.sl, s, <size_t>n, &w.sc, &err)
        st = self._image_state()
        self._leave()
        fs_workspace_release(w, &spare)
        if rc == FS_EINVAL:
            raise _invalid("subject", subject, &err)
        if rc < 0:
            raise MemoryError()
        self._raise_state(st)
        return rc

    @cython.binding(False)
    @cython.embedsignature.format("clinic")
    def num_interest(self, subject):
        """num_interest(subject) -> (n_plain, n_queue_members)"""
        cdef uint64_t nplain = 0, nqueue = 0
        self._interest(subject, True, &nplain, &nqueue)
        return (nplain, nqueue)

    @cython.binding(False)
    @cython.embedsignature.format("clinic")
    def has_interest(self, subject):
        """has_interest(subject) -> bool: does anything match?  Stops at
        the first matching filter of the literal and shape tables, where
        nearly every filter lives (no result is built)."""
        return self._interest(subject, False, NULL, NULL) == 1

    def reverse_match(self, filter):
        """reverse_match(filter) -> list[(filter, sub_id, queue)]

        The stored subscriptions whose filter can match some subject that
        the given filter matches."""
        cdef Py_ssize_t n
        cdef const char *s = _utf8(filter, "filter", &n)
        cdef fs_scratch sc
        cdef fs_rresult r
        cdef fs_error err
        cdef int rc, st
        cdef size_t i
        cdef fs_rhit *h
        self._enter()
        fs_scratch_init(&sc)
        fs_rresult_init(&r)
        try:
            rc = fs_sublist_reverse_match(self.sl, s, <size_t>n, &sc, &r, &err)
            st = self._image_state()
            self._leave()
            if rc == FS_EINVAL:
                raise _invalid("filter", filter, &err)
            if rc < 0:
                raise MemoryError()
            self._raise_state(st)
            out = []
            for i in range(r.nhits):
                h = &r.hits[i]
                # (an AMQP "" filter alone leaves the arena NULL: no NULL + 0)
                out.append((tm_str(r.arena + h.filter_off, h.filter_len) if h.filter_len else "", h.id,
                            tm_str(r.arena + h.queue_off, h.queue_len) if h.has_queue else None))
            return out
        finally:
            fs_scratch_free(&sc)
            fs_rresult_free(&r)

    def _match_column(self, subjects, keys, queues, threads, bint dedupe, also):
        """Sublist.match_many's work (_sublist.py)."""
        cdef _Sublist other = _args.also(self, also, _Sublist)
        cdef int st, other_st = IMG_OK
        # Both indexes are held for the whole call, threads included: it
        # converts rows (under the GIL) while its threads match.
        self._enter()
        if other is not None:
            try:
                other._enter()
            except ClosedError:
                self._leave()
                raise
        try:
            result = _match_many(self, other, subjects, keys, queues, threads, dedupe)
            st = self._image_state()
            if other is not None:
                other_st = other._image_state()
        finally:
            if other is not None:
                other._leave()
            self._leave()
        self._raise_state(st)
        if other is not None:
            other._raise_state(other_st)
        return result

    def __reduce__(self):
        return (_sublist_from_bytes, (self.to_bytes(), self._cache_size))

    def stats(self):
        """stats() -> dict of counters and sizes (_stats.as_dict names them)."""
        cdef fs_stats st
        self._enter()
        fs_sublist_stats(self.sl, &st)
        self._leave()
        return _stats.as_dict(st)


def _tuning(name, value=None):
    """Testing and measuring: the core's setting or counter called name
    (csrc/api/fs_tuning.c's table; _tuning.py names each); with value, set
    it first.  Returns the value before."""
    cdef bytes key = name.encode("ascii")
    cdef int64_t old
    if fs_tuning_get(key, &old) != FS_OK:
        raise TopicmatchValueError(f"no setting or counter {name!r}")
    if value is not None and fs_tuning_set(key, value) != FS_OK:
        raise TopicmatchValueError(f"{name!r} cannot be set to {value!r}")
    return old

include "_batch.pxi"
include "_serial.pxi"
include "_build.pxi"
include "_route.pxi"


def subject_matches(filter, subject, dialect="nats"):
    """subject_matches(filter, subject, dialect="nats") -> bool"""
    cdef fs_dialect d = _dialect(dialect)
    cdef Py_ssize_t fn, sn
    cdef const char *f = _utf8(filter, "filter", &fn)
    cdef const char *s = _utf8(subject, "subject", &sn)
    cdef fs_error err
    cdef int which = 0
    cdef int rc = fs_subject_matches(d, f, <size_t>fn, s, <size_t>sn, &which, &err)
    if rc == FS_EINVAL:
        raise _invalid("subject" if which else "filter", subject if which else filter, &err)
    if rc < 0:
        raise MemoryError()
    return rc == 1


cdef bint _valid(object s, str what, object dialect, bint is_filter) except -1:
    cdef fs_dialect d = _dialect(dialect)
    cdef Py_ssize_t n
    cdef const char *p
    cdef fs_error err
    try:
        p = _utf8(s, what, &n)
    except InvalidSubjectError:
        return False
    cdef int rc = fs_validate(d, p, <size_t>n, is_filter, &err)
    if rc == FS_ENOMEM:
        raise MemoryError()
    return rc == FS_OK


def is_valid_subject(subject, dialect="nats"):
    """is_valid_subject(subject, dialect="nats") -> bool: a literal subject
    that match() accepts."""
    return _valid(subject, "subject", dialect, False)


def is_valid_filter(filter, dialect="nats"):
    """is_valid_filter(filter, dialect="nats") -> bool: a filter that
    insert() accepts (MQTT: "$share/GROUP/filter" included)."""
    return _valid(filter, "filter", dialect, True)


def _release_memory():
    """release_memory (_functions.py): the ints and the output buffers let go."""
    tm_ints_clear()
    return fs_idpool_trim()


def _idpool_hold(ms):
    """Testing hook: hold the output pool's lock for ms milliseconds, the
    GIL released (the fork test forks meanwhile)."""
    cdef unsigned t = ms
    with nogil:
        fs_idpool_hold_for_test(t)


# The module-level functions off the hot paths, documented in plain Python
# over the primitives above (_release_memory, _build_writer, _route_keys,
# _route_split): last, since _functions reads this module.
from topicmatch._functions import build_image, release_memory, route_keys, route_split
# The index's class over its C side, _Sublist (made by _new_like too).
from topicmatch._sublist import Sublist
# The testing hooks over _tuning, under the names tests and benchmarks
# call (older trees' too: bench/ab_scaling.py loads them side by side).
from topicmatch._tuning import *
