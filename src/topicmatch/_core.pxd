# Declarations of the C core (csrc/); see csrc/api/sublist.h for the contract.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "fs_alloc.h" nogil:
    void fs_free(void *p)
    void fs_fault_inject(uint64_t nth)
    uint64_t fs_fault_injected()
    uint64_t fs_fault_counted()

cdef extern from "fs_token.h" nogil:
    ctypedef enum fs_dialect:
        FS_NATS
        FS_MQTT
        FS_AMQP
    ctypedef struct fs_error:
        const char *reason
        size_t pos
        int in_queue
    ctypedef struct fs_tokens:
        pass
    enum:
        FS_OK
        FS_ENOMEM
        FS_EINVAL
        FS_ENOTFOUND
        FS_EBADDATA
    void fs_tokens_init(fs_tokens *t)
    void fs_tokens_free(fs_tokens *t)
    int fs_tokenize(fs_dialect d, const char *s, size_t len, int is_filter, fs_tokens *t, fs_error *err)
    int fs_check_queue(fs_dialect d, const char *q, size_t len, fs_error *err)
    int fs_split_share(const char *s, size_t len, const char **group, size_t *glen,
                       const char **filter, size_t *flen, fs_error *err)

cdef extern from "sublist.h" nogil:
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

cdef extern from "fs_idbuf.h" nogil:
    ctypedef struct fs_idbuf:
        int64_t *ids
        size_t n, cap
    int fs_idbuf_room(fs_idbuf *b, size_t more)
    void fs_idbuf_free(fs_idbuf *b)
    void fs_idbuf_start_kept(fs_idbuf *b)
    int fs_idbuf_fit(fs_idbuf *b)
    size_t fs_idpool_trim()
    void fs_idpool_status(size_t *buffers, size_t *bytes)
    void fs_idpool_hold_for_test(unsigned ms)

cdef extern from "fs_pool.h" nogil:
    void fs_pool_status(unsigned *threads, unsigned *idle)

cdef extern from "fs_batch.h" nogil:
    enum:
        FS_STR_PTRS
        FS_STR_ARROW
        FS_QUEUES_PICK
        FS_QUEUES_ALL
        FS_QUEUES_NONE
        FS_ECANCELLED
        FS_ENOSYS
        FS_EIO
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
    ctypedef struct fs_batch_job:
        pass
    int fs_strings_get(const fs_strings *s, size_t i, const char **p, size_t *len)
    int fs_match_rows(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects, const fs_strings *keys,
                      size_t begin, size_t end, int queues, int dedupe, int64_t *row_end,
                      uint8_t *invalid, fs_idbuf *out, const void *cancel)
    fs_batch_job *fs_batch_start_blocks(fs_sublist *sl, fs_sublist *also, const fs_strings *subjects,
                                        const fs_strings *keys, int queues, int dedupe, unsigned nthreads,
                                        int64_t *row_end, uint8_t *invalid, size_t block_rows, size_t fed)
    void fs_batch_feed(fs_batch_job *job, size_t fed)
    int fs_batch_wait(fs_batch_job *job, unsigned timeout_ms)
    void fs_batch_cancel(fs_batch_job *job)
    int fs_batch_finish(fs_batch_job *job, fs_idbuf *out)

cdef extern from "fs_route.h" nogil:
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

cdef extern from "fs_image.h" nogil:
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
    size_t fs_image_parallel_min
    int fs_image_is(const char *data, size_t len)
    int fs_image_damaged(const fs_sublist *sl)

cdef extern from "fs_fault.h" nogil:
    # the SIGBUS guard of mapped images (csrc/base/fs_fault.h)
    int fs_fault_guard(const void *base, size_t len)
    void fs_fault_unguard(int slot)
    int fs_fault_revoked(int slot)
    uint64_t fs_fault_revocations()
    uint64_t fs_fault_tail(const void *p)

cdef extern from "fs_arrow.h" nogil:
    # Arrow's C Data Interface (csrc/arrow/fs_arrow.h): pyarrow exports into
    # these, fs_arrow.c reads them; Cython only allocates and releases them.
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
    int fs_arrow_strings(const fs_arrow_column *col, fs_strings *out, fs_arrow_error *err)
    int fs_arrow_rows(const fs_arrow_column *col, const char **ptrs, size_t *lens, fs_arrow_error *err)
    int fs_arrow_indices_of(const fs_arrow_column *col, fs_arrow_indices *out, fs_arrow_error *err)
    int fs_arrow_index_at(const fs_arrow_indices *x, int64_t i, int64_t *k)
    void fs_arrow_message(const fs_arrow_error *err, int64_t row_base, char *buf, size_t size)
    void fs_arrow_release(ArrowArray *array, ArrowSchema *schema)
