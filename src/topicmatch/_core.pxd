# Declarations of the C core (csrc/); see csrc/api/sublist.h for the contract.
#
# An include list in pyarrow's manner: the extension module names
# csrc/api/sublist.h, the whole C API (which includes the public faces of
# the layers below it, and declares the image's calls, whose layer,
# serial/, sits above it), and csrc/base/fs_status.h, the status codes --
# nothing else of csrc/ (tests/test_layout.py, the api-only rule).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "fs_status.h" nogil:
    enum:
        FS_OK
        FS_ENOMEM
        FS_EINVAL
        FS_ENOTFOUND
        FS_EBADDATA
        FS_ECANCELLED
        FS_ENOSYS
        FS_EIO
    ctypedef struct fs_error:
        const char *reason
        size_t pos
        int in_queue

cdef extern from "sublist.h" nogil:
    # the memory door (csrc/base/fs_alloc.h): freeing what C allocated
    void fs_free(void *p)
    # the settings and counters of tests and measurements, by name
    # (csrc/api/fs_tuning.h)
    int fs_tuning_get(const char *name, int64_t *value)
    int fs_tuning_set(const char *name, int64_t value)
    int64_t fs_image_room

    # Sublist.close()'s guard against the calls in flight (csrc/base/fs_guard.h)
    ctypedef struct fs_guard:
        pass
    int fs_guard_enter(fs_guard *g) noexcept
    void fs_guard_leave(fs_guard *g) noexcept
    bint fs_guard_closed(fs_guard *g) noexcept
    bint fs_guard_may_wait(fs_guard *g) noexcept
    bint fs_guard_start_close(fs_guard *g) noexcept
    void fs_guard_wait_idle(fs_guard *g) noexcept
    void fs_guard_set_closed(fs_guard *g) noexcept
    void fs_guard_wait_closed(fs_guard *g) noexcept

    # dialects and tokens (csrc/rules/fs_token.h)
    ctypedef enum fs_dialect:
        FS_NATS
        FS_MQTT
        FS_AMQP
    ctypedef struct fs_tokens:
        pass
    void fs_tokens_init(fs_tokens *t)
    void fs_tokens_free(fs_tokens *t)
    int fs_tokenize(fs_dialect d, const char *s, size_t len, int is_filter, fs_tokens *t, fs_error *err)
    int fs_check_queue(fs_dialect d, const char *q, size_t len, fs_error *err)
    int fs_split_share(const char *s, size_t len, const char **group, size_t *glen,
                       const char **filter, size_t *flen, fs_error *err)

    # the index (csrc/api/sublist.h, the match layer's calls in fs_match.h)
    ctypedef struct fs_sublist:
        pass
    ctypedef struct fs_spec:
        const char *filter
        size_t filter_len
        const char *queue
        size_t queue_len
        int64_t id
    ctypedef struct fs_scratch:
        pass
    ctypedef struct fs_group_out:
        size_t name_off, name_len
        size_t filter_off, filter_len
        size_t members_off, members_len
        uint32_t key_hash
    ctypedef struct fs_result:
        int64_t *ids
        size_t nids, nplain
        fs_group_out *groups
        size_t ngroups
        char *arena
    ctypedef struct fs_rhit:
        size_t filter_off, filter_len
        size_t queue_off, queue_len
        int has_queue
        int64_t id
    ctypedef struct fs_rresult:
        fs_rhit *hits
        size_t nhits
        char *arena
    ctypedef struct fs_cache_stats:
        uint64_t entries, capacity, hits, misses, bytes
    ctypedef struct fs_stats:
        uint64_t subscriptions, nodes, memory_bytes
        uint64_t mapped_bytes, live_subscriptions, live_bytes
        uint64_t inserts, removes, matches, fanout_total, fanout_max
        uint64_t generation
        fs_cache_stats cache

    fs_sublist *fs_sublist_new(fs_dialect d)
    const char *fs_dialect_name(int d)
    void fs_sublist_free(fs_sublist *sl)
    uint64_t fs_sublist_count(fs_sublist *sl)
    uint64_t fs_sublist_generation(fs_sublist *sl)
    int fs_sublist_insert(fs_sublist *sl, const fs_spec *spec, fs_error *err)
    int fs_sublist_remove(fs_sublist *sl, const fs_spec *spec, fs_error *err)
    int fs_sublist_insert_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                               size_t *changed, size_t *bad, fs_error *err)
    int fs_sublist_remove_many(fs_sublist *sl, const fs_spec *specs, size_t n,
                               size_t *changed, size_t *bad, fs_error *err)
    void fs_scratch_init(fs_scratch *sc)
    void fs_scratch_free(fs_scratch *sc)
    void fs_result_init(fs_result *r)
    void fs_result_free(fs_result *r)
    int fs_result_dedupe(fs_result *r)
    int fs_ids_dedupe(int64_t *ids, size_t *n, int64_t **set, size_t *cap_set)
    void fs_rresult_init(fs_rresult *r)
    void fs_rresult_free(fs_rresult *r)
    int fs_sublist_match(fs_sublist *sl, const char *subject, size_t len,
                         fs_scratch *sc, fs_result *r, fs_error *err)
    int fs_sublist_interest(fs_sublist *sl, const char *subject, size_t len,
                            fs_scratch *sc, uint64_t *nplain, uint64_t *nqueue, fs_error *err)
    int fs_sublist_reverse_match(fs_sublist *sl, const char *filter, size_t len,
                                 fs_scratch *sc, fs_rresult *r, fs_error *err)
    void fs_sublist_stats(fs_sublist *sl, fs_stats *st)
    int fs_sublist_set_cache(fs_sublist *sl, size_t capacity)
    ctypedef struct fs_workspace:
        fs_scratch sc
        fs_result r
        int busy
    fs_workspace *fs_workspace_get()
    void fs_workspace_trim(fs_workspace *w)
    fs_workspace *fs_workspace_acquire(fs_workspace *spare)
    void fs_workspace_release(fs_workspace *w, fs_workspace *spare)
    int fs_sublist_has_interest(fs_sublist *sl, const char *subject, size_t len,
                                fs_scratch *sc, fs_error *err)
    int fs_validate(fs_dialect d, const char *s, size_t len, int is_filter, fs_error *err)
    int fs_subject_matches(fs_dialect d, const char *filter, size_t flen,
                           const char *subject, size_t slen, int *which, fs_error *err)

cdef extern from "sublist.h" nogil:
    # a column of strings (csrc/rules/fs_strings.h)
    enum:
        FS_STR_PTRS
        FS_STR_ARROW
    ctypedef struct fs_strings:
        int layout
        size_t n
        const char *const *ptrs
        const size_t *lens
        const char *data
        const int32_t *off32
        const int64_t *off64
        const uint8_t *validity
        int64_t offset
    int fs_strings_get(const fs_strings *s, size_t i, const char **p, size_t *len)
    size_t fs_strings_first_null(const fs_strings *s)
    size_t fs_strings_first_not_utf8(const fs_strings *s, size_t *at)
    int fs_spec_of_row(fs_spec *out, const fs_strings *filters, const int64_t *ids,
                       const fs_strings *queues, size_t i)

    # match_many's output buffers and their pool (csrc/batch/fs_idbuf.h)
    ctypedef struct fs_idbuf:
        int64_t *ids
        size_t n, cap
    void fs_idbuf_free(fs_idbuf *b)
    size_t fs_idpool_trim()
    void fs_idpool_hold_for_test(unsigned ms)

    # Arrow's C Data Interface (csrc/arrow/fs_arrow.h): pyarrow exports into
    # an fs_arrow_export's two structs, csrc/arrow/ holds and reads them.
    struct ArrowSchema:
        pass
    struct ArrowArray:
        int64_t length
    enum:
        FS_ARROW_NOT_TEXT
        FS_ARROW_OFFSETS
        FS_ARROW_VIEWS
        FS_ARROW_DICTIONARY
    ctypedef struct fs_arrow_column:
        const ArrowArray *array
        const ArrowSchema *schema
        const int64_t *sizes
        int64_t n_sizes
        const int64_t *dict_sizes
        int64_t n_dict_sizes
    ctypedef struct fs_arrow_error:
        int in_dictionary
    ctypedef struct fs_arrow_indices:
        int64_t length
        int64_t values
    int fs_arrow_kind(const ArrowSchema *schema)
    int fs_arrow_indices_of(const fs_arrow_column *col, fs_arrow_indices *out, fs_arrow_error *err)
    int fs_arrow_index_at(const fs_arrow_indices *x, int64_t i, int64_t *k)
    ctypedef struct fs_arrow_export:
        ArrowArray array
        ArrowSchema schema
        fs_arrow_column col
        int kind
    fs_arrow_export *fs_arrow_exports_new(size_t n)
    void fs_arrow_exports_free(fs_arrow_export *e, size_t n)
    int fs_arrow_export_kind(fs_arrow_export *e)
    int64_t *fs_arrow_export_sizes(fs_arrow_export *e, int64_t n, int64_t nd)
    void fs_arrow_export_free(fs_arrow_export *e)
    ctypedef struct fs_arrow_text:
        fs_strings s
    int fs_arrow_text_read(fs_arrow_text *t, const fs_arrow_export *chunks, size_t n, int values,
                           fs_arrow_error *err)
    void fs_arrow_text_free(fs_arrow_text *t)
    void fs_arrow_describe(const fs_arrow_error *err, const char *what, int64_t row_base, char *buf, size_t size)

    ctypedef struct fs_column_hooks
    # a column matched at once (csrc/api/fs_column.c); the hooks run on the
    # calling thread: fill and poll stop the call by raising (FS_ECANCELLED
    # comes back with their exception set)
    enum:
        FS_QUEUES_PICK
        FS_QUEUES_ALL
        FS_QUEUES_NONE
    ctypedef struct fs_column_part:
        fs_strings rows
        size_t filled
        const fs_arrow_indices *dict
        const fs_strings *values
    ctypedef struct fs_column_options:
        int queues
        int dedupe
        unsigned threads
    int fs_match_column(fs_sublist *sl, fs_sublist *also, const fs_column_part *parts, size_t nparts,
                        const fs_strings *keys, const fs_column_options *opt, const fs_column_hooks *hooks,
                        int64_t *row_end, uint8_t *invalid, fs_idbuf *ids) except? -5
    unsigned fs_index_threads()

cdef extern from "sublist.h":
    # fs_match_column's hooks: Python code, run with the GIL held
    ctypedef int (*fs_column_fill)(void *ctx, size_t k, size_t end, size_t *filled) except -1
    ctypedef int (*fs_column_poll)(void *ctx) except -1
    ctypedef void (*fs_column_lock)(void *ctx) noexcept
    ctypedef struct fs_column_hooks:
        void *ctx
        fs_column_fill fill
        fs_column_poll poll
        fs_column_lock release
        fs_column_lock acquire

cdef extern from "sublist.h" nogil:
    # the sharded fan-out's route keys (csrc/rules/fs_route.h)
    enum:
        FS_ROUTE_KEYED
        FS_ROUTE_ANY
        FS_ROUTE_INVALID
        FS_ROUTE_NULL
        FS_ROUTE_MAX_DEPTH
    int fs_route_rows(fs_dialect d, const fs_strings *rows, int is_filter, unsigned depth,
                      int64_t *key, uint8_t *kind)
    ctypedef struct fs_route_split:
        char sep
        char one
        char rest
        uint8_t empty_is_no_tokens
        const char *share_prefix
    fs_route_split fs_route_rules(fs_dialect d)

cdef extern from "sublist.h" nogil:
    # the image (serial/)
    enum: FS_IMAGE_VERSION
    ctypedef enum fs_verify:
        FS_VERIFY_NONE
        FS_VERIFY_FULL
        FS_VERIFY_CHECKSUM
    int fs_image_write(fs_sublist *sl, char **out, size_t *len)
    int fs_image_write_in(fs_sublist *sl, char *buf, size_t cap, char **out, size_t *len)
    size_t fs_image_size_hint(fs_sublist *sl)
    int fs_image_save(fs_sublist *sl, const char *path, int durable)
    int fs_image_open(const char *data, size_t len, int verify, unsigned threads, fs_sublist **out, fs_error *err)
    int fs_image_is(const char *data, size_t len)
    int fs_image_damaged(const fs_sublist *sl)
    void fs_image_as_version(char *img, size_t len, unsigned version, unsigned threads)

cdef extern from "sublist.h" nogil:
    # the SIGBUS guard of mapped images (csrc/base/fs_fault.h)
    int fs_fault_guard(const void *base, size_t len)
    void fs_fault_unguard(int slot)
    int fs_fault_revoked(int slot)
    uint64_t fs_fault_tail(const void *p)


# ------------------------------------------------------------------------
# What the Cython layer itself calls beyond the C API above: the rest of
# sublist.h it names under other names or uses in one file (the image
# glue's versions 1 and 2 and its streamed checksum among them), and the
# CPython API, _pyobjects.h and _pyrows.h (the C that needs Python.h).
from cpython.pystate cimport PyThreadState

# (_core.pyx)
cdef extern from "sublist.h" nogil:
    int fs_sublist_match_small(fs_sublist *sl, const char *subject, size_t len,
                               int64_t *ids, size_t cap, size_t *n,
                               fs_workspace *spare, fs_workspace **wp, fs_error *err, fs_match_how how)
    ctypedef enum fs_match_how:
        FS_MATCH_CACHE_ONLY
        FS_MATCH_WAIT
        FS_MATCH_NO_WAIT
    enum: FS_MATCH_WALK
    fs_match_how fs_match_first_how     # (csrc/api/fs_tuning.h)

cdef extern from "_pyobjects.h":
    const bint TM_FREE_THREADED

cdef extern from "Python.h":
    ctypedef struct PyObject
    # NULL with the error set: _utf8 checks for it itself, so that its hot
    # path has no try block; the raising twin serves the error path
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size)
    const char *_utf8_or_raise "PyUnicode_AsUTF8AndSize"(object s, Py_ssize_t *size) except NULL
    void PyErr_Clear()
    Py_ssize_t PyUnicode_GET_LENGTH(object s)
    long long PyLong_AsLongLongAndOverflow(object v, int *overflow) except? -1

cdef extern from "_pyrows.h":
    # a compact ASCII str, whose characters are its UTF-8 bytes, and those
    # characters (_utf8's fast path: the rule the list paths use)
    bint TM_IS_ASCII_STR(object s)
    const char *tm_ascii_chars(object s)
    # a list's usual rows read as C (_Column.fill_to, _specs_of): each
    # returns the first row it did not take (tm_copies_fill: or -1, with
    # MemoryError set)
    ctypedef struct tm_copies:
        const char **ptrs
        size_t *lens
    int tm_copies_init(tm_copies *c, size_t n) except -1
    void tm_copies_free(tm_copies *c)
    Py_ssize_t tm_copies_fill(tm_copies *c, PyObject **rows, Py_ssize_t i, Py_ssize_t end) except -1
    int tm_copies_put(tm_copies *c, Py_ssize_t i, const char *p, size_t n) except -1
    Py_ssize_t tm_specs_fill(fs_spec *specs, PyObject *filters, PyObject *ids, PyObject *queues,
                             Py_ssize_t i, Py_ssize_t n)

cdef extern from "_pyobjects.h":
    void tm_ints_clear()         # release_memory: the kept ints let go
    # match()'s and reverse_match()'s objects made in C: a name (bytes not
    # UTF-8 as surrogates), a list of ids, the groups' list
    str tm_str(const char *p, size_t n)
    list tm_id_list(const int64_t *ids, size_t n)
    list tm_groups(const fs_result *r, int with_filter)

# (_batch.pxi: match_many)
cdef extern from "Python.h":
    # the GIL let go and taken back, as `with nogil` does (fs_match_column's
    # release and acquire hooks)
    PyThreadState *PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState *tstate)

cdef extern from "Python.h":
    # borrowed references, for a list or a tuple
    PyObject *PySequence_Fast_GET_ITEM(object o, Py_ssize_t i)
    PyObject **PySequence_Fast_ITEMS(object o)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)

# (_build.pxi: build_image)
cdef extern from "sublist.h" nogil:
    ctypedef struct fs_build:
        pass
    int fs_build_rows(fs_dialect d, const fs_spec *specs, size_t n, unsigned threads, fs_build **out,
                      size_t *bad, fs_error *err)
    int fs_build_columns(fs_dialect d, const fs_strings *filters, const int64_t *ids, const fs_strings *queues,
                         unsigned threads, fs_build **out, size_t *bad, fs_error *err)
    int fs_build_write(fs_build *b, const char *path, int durable, char **out, size_t *len)
    void fs_build_free(fs_build *b)

# (_serial.pxi: to_bytes, from_bytes, open, save)
cdef extern from "sublist.h" nogil:
    int fs_sublist_dump(fs_sublist *sl, char **out, size_t *len)
    int fs_sublist_load(const char *data, size_t len, fs_sublist **out, fs_error *err)
    ctypedef struct fs_checksum_stream:
        pass
    fs_checksum_stream *fs_checksum_stream_new()
    void fs_checksum_stream_feed(fs_checksum_stream *s, const void *data, size_t n)
    uint64_t fs_checksum_stream_end(const fs_checksum_stream *s)
    void fs_checksum_stream_free(fs_checksum_stream *s)

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
