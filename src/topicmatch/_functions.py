"""The package's module-level functions that are not on a hot path, in
plain Python over the Cython layer's primitives (each _core's function of
the same name with a leading underscore, which converts the arguments,
calls C and raises; build_image's writes the file that _imagefiles.save
makes and renames): their signatures and documents live here.
topicmatch._core names each of them too, as it always has."""
import os

from topicmatch import _core, _imagefiles


def build_image(path, filters, sub_ids, queues=None, *, dialect="nats", threads=None, durable=True):
    """build_image(path, filters, sub_ids, queues=None, *, dialect="nats",
    threads=None, durable=True) -> Sublist

    Write the image of the index that Sublist(dialect).insert_many(filters,
    sub_ids, queues) would build -- byte for byte what its save(path)
    writes -- straight from the columns, without building that index, and
    return it opened (Sublist.open(path, verify=False): this library wrote
    it).  The columns are insert_many's: sequences, or Arrow string columns
    (string, large_string, string_view, dictionary, chunked) and an
    Arrow/numpy integer array of ids.  The rows are parsed, routed and
    sorted, the file's pages made and the large tables written on up to
    `threads` threads (None: every CPU this process may use); the bytes
    are the same for any count.  An invalid
    row raises what insert_many raises (InvalidSubjectError naming the
    first bad row) and leaves no file.  The file is written as save()
    writes it: a temporary beside path, on disk (durable=False: not
    flushed), then renamed over path."""
    write = _core._build_writer(filters, sub_ids, queues, dialect, threads, durable)
    path = os.fspath(path)
    _imagefiles.save(path, None, durable, write)
    return _core.Sublist.open(path, verify=False)


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
    return _core._route_keys(values, dialect, depth, filters)


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
    return _core._route_split(dialect)


def release_memory():
    """release_memory() -> int: give back the output buffers topicmatch keeps.

    match_many writes its ids into buffers of the C core.  When a result of
    4 MiB or more is freed, its buffer is kept (up to four buffers, 1 GiB in
    all) with its pages marked discardable: the next big match_many writes
    into pages already mapped instead of faulting in fresh ones, which was a
    third of the time on fan-out-heavy workloads.  The system takes those
    pages back by itself when memory runs short; this call gives the
    buffers back to malloc at once.  Returns how many bytes it gave back.
    (On Windows nothing is kept, and this returns 0.)  It also lets go of
    the ints match() keeps for ids it returns often (at most 4,096; not
    counted in the bytes)."""
    return _core._release_memory()
