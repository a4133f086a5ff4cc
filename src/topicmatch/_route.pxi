# Route keys of the sharded fan-out (csrc/rules/fs_route.h; docs/design.md, 'Why
# the sharded fan-out is exact'): which shard holds a filter, and which shard
# serves a subject, split by the index's own tokenizer.  Included by _core.pyx.

ROUTE_KEYED = FS_ROUTE_KEYED
ROUTE_ANY = FS_ROUTE_ANY
ROUTE_INVALID = FS_ROUTE_INVALID
ROUTE_NULL = FS_ROUTE_NULL


def route_keys(values, dialect="nats", depth=1, *, filters=False):
    """route_keys(values, dialect="nats", depth=1, *, filters=False) -> (keys, kinds)

    For each row of `values` (a list of str or None, a numpy array, or an
    Arrow column of string, large_string, string_view or dictionary<string>,
    chunked or not; a row of another type is a TypeError): kinds[i] is ROUTE_KEYED (keys[i], >= 0, is a hash of the
    first `depth` tokens), ROUTE_ANY (a filter with a wildcard or fewer
    than `depth` tokens, needed by every shard; a subject with fewer than
    `depth` tokens, which any shard serves: keys[i] spreads them),
    ROUTE_INVALID or ROUTE_NULL.  keys int64 and kinds uint8, numpy arrays.
    The same on every machine and in every process."""
    import numpy as np
    cdef fs_dialect d = _dialect(dialect)
    depth = _count_arg(depth, "depth")
    if not 1 <= depth <= FS_ROUTE_MAX_DEPTH:
        raise TopicmatchValueError(f"depth must be an integer from 1 to {FS_ROUTE_MAX_DEPTH}, not {depth!r}")
    cdef unsigned dep = depth
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



def route_split(dialect="nats"):
    """route_split(dialect="nats") -> (separator, one, rest, empty_is_no_tokens, share_prefix)

    How route_keys splits a value that the dialect accepts, for a router
    written elsewhere (topicmatch.spark.route's route_column and
    filter_route_column, Spark SQL expressions): split on the separator;
    `one` and `rest` are the wildcards (whole tokens of a filter); the empty
    string is zero tokens where empty_is_no_tokens (AMQP's empty key), else
    invalid; a filter starting with share_prefix ("$share/" in MQTT, else
    None) and a group name routes as what follows the group.  A key is then
    Spark's xxhash64 of the first `depth` tokens as they stand in the value
    (all of it, for a subject with fewer), with the sign bit cleared."""
    cdef fs_route_split r = fs_route_rules(_dialect(dialect))
    return (chr(r.sep), chr(r.one), chr(r.rest), bool(r.empty_is_no_tokens),
            r.share_prefix.decode() if r.share_prefix != NULL else None)
