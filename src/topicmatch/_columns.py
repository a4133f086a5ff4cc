"""What a column argument is, as Python objects: the policy of the Cython
layer's column arguments (match_many's subjects and keys, insert_many's
columns, route_keys' values) that needs no C -- which objects are Arrow
columns, their chunks and their buffers' sizes (what Arrow's C Data
Interface leaves out, for csrc/arrow/), numpy arrays of strings and of
integers, the rows of a column for an error message.  The Cython layer
(_batch.pxi) hands the exports and the sizes to C and translates its
errors; the type errors here are the same words it has always raised.

Also the conversions between Arrow, numpy and Python values that do
without pyarrow's own, which import pandas (int_values, bool_values,
python_array, batch_of, numpy_as_arrow): the Spark workers' too."""

#: The Arrow types read as a column of strings (csrc/arrow/fs_arrow.h).
ARROW_STRING_TYPES = "string, large_string, string_view or dictionary<string>"


def _errors():
    # the exception classes live in _core, which imports this module
    from topicmatch import _core
    return _core


def is_arrow(x):
    return type(x).__module__.startswith("pyarrow")


def arrow_input(col):
    """col as a pyarrow object when it is one or exports the Arrow PyCapsule
    interface (a polars Series, say); otherwise None."""
    if is_arrow(col):
        return col
    tp = type(col)
    if hasattr(tp, "__arrow_c_stream__") or hasattr(tp, "__arrow_c_array__"):
        import pyarrow as pa
        return pa.chunked_array(col) if hasattr(tp, "__arrow_c_stream__") else pa.array(col)
    return None


def arrow_chunks(col, what):
    """The Arrow arrays of col (one, or a ChunkedArray's chunks, maybe
    none); TypeError naming the argument for another object."""
    import pyarrow as pa
    if isinstance(col, pa.ChunkedArray):
        return col.chunks
    if isinstance(col, pa.Array):
        return [col]
    raise _errors().TopicmatchTypeError(f"{what} must be an Arrow Array or ChunkedArray of {ARROW_STRING_TYPES}, "
                                        f"not {type(col).__name__}")


def arrow_type_error(what, t):
    return _errors().TopicmatchTypeError(f"{what} must be an Arrow column of {ARROW_STRING_TYPES}, not {t}")


def buffer_sizes(arr, dictionary):
    """The sizes in bytes of arr's buffers (0 for a missing one), then its
    dictionary's when `dictionary`; and how many are arr's own."""
    own = [b.size if b is not None else 0 for b in arr.buffers()]
    if dictionary:
        return own + [b.size if b is not None else 0 for b in arr.dictionary.buffers()], len(own)
    return own, len(own)


def is_ndarray(x):
    return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"


def numpy_strings(col, what):
    """A one-dimensional numpy array of strings (dtype O, U or T) as a list."""
    if col.ndim != 1:
        raise _errors().TopicmatchTypeError(f"{what} must be one-dimensional, not {col.ndim}-dimensional")
    if col.dtype.kind not in "OUT":
        raise _errors().TopicmatchTypeError(f"{what}: numpy arrays of dtype {col.dtype} are not strings")
    return col.tolist()


def numpy_keys(keys):
    """match_many's keys given as a numpy array, as a list of str."""
    if keys.ndim != 1 or keys.dtype.kind not in "OUT":
        raise _errors().TopicmatchTypeError(f"keys: numpy arrays of dtype {keys.dtype} are not strings")
    return keys.tolist()


def _int_dtype(t):
    """The numpy dtype of the Arrow integer type t (not
    t.to_pandas_dtype(), which some pyarrow versions make import pandas)."""
    import numpy as np
    import pyarrow as pa
    return np.dtype(("=i" if pa.types.is_signed_integer(t) else "=u") + str(t.bit_width // 8))


def _ints_view(arr):
    """An Arrow integer array without nulls as a numpy array over its own
    buffer (no copy).  Not arr.to_numpy(): pyarrow imports pandas for that
    the first time, where pandas is installed, which took about a second
    of the first insert_many or build_image given Arrow ids."""
    import numpy as np
    dt = _int_dtype(arr.type)
    data = arr.buffers()[1]
    if data is None or len(arr) == 0:
        return np.empty(0, dt)
    return np.frombuffer(data, dtype=dt, count=len(arr), offset=arr.offset * dt.itemsize)


def numpy_as_arrow(values, type_):
    """A one-dimensional numpy array as an Arrow array of type_: a numeric
    type of the array's own width, over the array's buffer (a strided
    array's contiguous copy), or bool_ for a bool array (its bits packed).
    Without pa.array(), which imports pandas the first time (see
    _ints_view), and without DataType.to_pandas_dtype(), which some pyarrow
    versions make import it too."""
    import numpy as np
    import pyarrow as pa
    n = len(values)
    if type_ == pa.bool_():
        values = np.packbits(values, bitorder="little")      # Arrow's bits, least significant first
    elif values.dtype.itemsize * 8 != type_.bit_width:
        raise _errors().TopicmatchTypeError(f"a {values.dtype} array is not {type_}")
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(np.ascontiguousarray(values))])


def int_values(col):
    """An Arrow integer column without nulls (an Array or a ChunkedArray)
    as a numpy array: over its buffer where it is one array, its chunks
    joined otherwise.  Without to_numpy() (see _ints_view)."""
    import numpy as np
    import pyarrow as pa
    if not isinstance(col, pa.ChunkedArray):
        return _ints_view(col)
    parts = [_ints_view(c) for c in col.chunks]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, _int_dtype(col.type))


def bool_values(arr):
    """An Arrow bool array without nulls (is_null()'s, say) as a numpy bool
    array: its bits unpacked.  Without to_numpy() (see _ints_view)."""
    import numpy as np
    import pyarrow as pa
    if isinstance(arr, pa.ChunkedArray):
        return np.concatenate([bool_values(c) for c in arr.chunks]) if arr.num_chunks else np.empty(0, bool)
    data, n = arr.buffers()[1], len(arr)
    if data is None or n == 0:
        return np.empty(0, bool)
    bits = np.unpackbits(np.frombuffer(data, np.uint8), count=arr.offset + n, bitorder="little")
    return bits[arr.offset:].astype(bool)


def python_array(values, type_):
    """A list of Python values (None: null) as an Arrow array of type_ --
    an integer, floating point, bool, string or binary type (large ones
    too), or null -- made from its buffers.  For the small batches of
    rows that Spark tasks return: pa.array() and RecordBatch.from_pydict
    import pandas the first time in a process, where it is installed,
    which cost each fresh Python worker about a second (see _ints_view)."""
    import numpy as np
    import pyarrow as pa
    n = len(values)
    if pa.types.is_null(type_):
        return pa.nulls(n)
    valid = np.fromiter((v is not None for v in values), bool, n)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    t = pa.types
    if t.is_string(type_) or t.is_large_string(type_) or t.is_binary(type_) or t.is_large_binary(type_):
        text = t.is_string(type_) or t.is_large_string(type_)
        data = [b"" if v is None else v.encode("utf-8") if text else bytes(v) for v in values]
        wide = t.is_large_string(type_) or t.is_large_binary(type_)
        offsets = np.zeros(n + 1, np.int64 if wide else np.int32)
        np.cumsum(np.fromiter((len(d) for d in data), np.int64, n), out=offsets[1:])
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
    if t.is_boolean(type_):
        bits = np.packbits(np.fromiter((bool(v) for v in values), bool, n), bitorder="little")
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(bits)])
    if t.is_integer(type_) or t.is_floating(type_):
        kind = "f" if t.is_floating(type_) else "i" if t.is_signed_integer(type_) else "u"
        data = np.fromiter((0 if v is None else v for v in values), np.dtype(f"={kind}{type_.bit_width // 8}"), n)
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)])
    raise _errors().TopicmatchTypeError(f"no Arrow array of {type_} is made from Python values here")


def batch_of(columns, schema):
    """A RecordBatch of schema from {name: list of Python values} (a name
    left out: nulls), through python_array (no pandas)."""
    import pyarrow as pa
    n = len(next(iter(columns.values()))) if columns else 0
    return pa.RecordBatch.from_arrays([python_array(columns.get(f.name, [None] * n), f.type) for f in schema],
                                      schema=schema)


def int64_array(ids, what):
    """ids as a contiguous numpy int64 array when it is an Arrow or numpy
    integer array (no nulls; unsigned values must fit); None for any other
    object, which the caller converts item by item."""
    import numpy as np
    E = _errors()
    if is_arrow(ids):
        import pyarrow as pa
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if not isinstance(ids, pa.Array) or not pa.types.is_integer(ids.type):
            raise E.TopicmatchTypeError(f"{what} must be an integer Arrow array, not "
                                        f"{getattr(ids, 'type', 'None' if ids is None else type(ids).__name__)}")
        if ids.null_count:
            first = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
            raise E.TopicmatchTypeError(f"{what}[{first}] must be int, not None (a null in the Arrow {what})")
        ids = _ints_view(ids)
    if not is_ndarray(ids) or ids.dtype.kind == "O":
        return None
    if ids.dtype.kind not in "iu":
        raise E.TopicmatchTypeError(f"{what} must be an integer array, not one of dtype {ids.dtype}")
    if ids.ndim != 1:
        raise E.TopicmatchTypeError(f"{what} must be one-dimensional, not {ids.ndim}-dimensional")
    if ids.dtype.kind == "u" and ids.size and int(ids.max()) > 0x7FFFFFFFFFFFFFFF:
        i = int(np.argmax(ids))
        raise E.TopicmatchOverflowError(f"item {i}: sub_id {int(ids[i])} is outside the signed 64-bit range")
    return np.ascontiguousarray(ids, dtype=np.int64)


class Rows:
    """Row i of a column as a Python object (for error messages)."""
    def __init__(self, col):
        self.col = col

    def __getitem__(self, i):
        x = self.col[i]
        if not is_arrow(x):
            return x
        try:
            return x.as_py()
        except UnicodeDecodeError:
            # bytes that are not UTF-8 (refused by C, which names them):
            # as a str whose other bytes are surrogates, as results are
            x = getattr(x, "value", x)            # a dictionary row's value
            return x.as_buffer().to_pybytes().decode("utf-8", "surrogateescape")
