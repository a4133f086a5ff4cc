# Route keys of the sharded fan-out (csrc/rules/fs_route.h; docs/design.md, 'Why
# the sharded fan-out is exact'): which shard holds a filter, and which shard
# serves a subject, split by the index's own tokenizer.  Included by _core.pyx.

ROUTE_KEYED = FS_ROUTE_KEYED
ROUTE_ANY = FS_ROUTE_ANY
ROUTE_INVALID = FS_ROUTE_INVALID
ROUTE_NULL = FS_ROUTE_NULL


def _route_keys(values, dialect, depth, filters):
    """route_keys (_functions.py): the keys and kinds, as numpy arrays."""
    import numpy as np
    cdef fs_dialect d = _dialect(dialect)
    cdef unsigned dep = _args.depth(depth, FS_ROUTE_MAX_DEPTH)
    cdef int is_filter = 1 if filters else 0
    segments = _segments(values, "values")
    cdef _Column col
    cdef Py_ssize_t base, n = 0
    for base, col in segments:
        n += <Py_ssize_t>col.s.n
    keys = np.zeros(n, dtype=np.int64)
    kinds = np.zeros(n, dtype=np.uint8)
    cdef int64_t[::1] kv = keys
    cdef uint8_t[::1] tv = kinds
    cdef int rc
    for base, col in segments:
        if col.s.n == 0:
            continue
        with nogil:
            rc = fs_route_rows(d, &col.s, is_filter, dep, &kv[base], &tv[base])
        if rc != FS_OK:
            raise MemoryError()
    return keys, kinds



def _route_split(dialect):
    """route_split (_functions.py): fs_route_rules' answer."""
    cdef fs_route_split r = fs_route_rules(_dialect(dialect))
    return (chr(r.sep), chr(r.one), chr(r.rest), bool(r.empty_is_no_tokens),
            r.share_prefix.decode() if r.share_prefix != NULL else None)
