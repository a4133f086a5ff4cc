"""A local subscriptions table (CSV with a header, JSON lines, Parquet; a
file or a directory of part files) read without Spark, as the three Arrow
columns a Sublist takes: sub_id (int64), filter, queue (or None).

It reads a table as `fanout` does on Spark: a CSV's fields are text (an
empty field is null), its sub ids integers written as text; JSON and
Parquet keep their types.  Every mistake names the file and, for a bad
value, its 1-based data row.  Needs pyarrow (the `arrow` or `spark` extra).
"""
import os
import sys

from topicmatch.cli.common import CLIError, local_path

_INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class SubsRows:
    """sub_ids (int64 Arrow array), filters, queues (string Arrow arrays;
    queues None when the table has no queue or only nulls), and `where(i)`,
    how messages name row i (0-based)."""

    def __init__(self, sub_ids, filters, queues, unit="row", linenos=None):
        self.sub_ids, self.filters, self.queues = sub_ids, filters, queues
        self.unit, self.linenos = unit, linenos

    def __len__(self):
        return len(self.sub_ids)

    def where(self, i):
        return f"{self.unit} {self.linenos[i] if self.linenos is not None else i + 1}"


def _pyarrow():
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise CLIError("reading a subscriptions table needs pyarrow: pip install "
                       "'topicmatch[arrow]' (or give a plain filter list with --filters-file)") from None


def _files(src):
    from topicmatch.cli.fanout_io import data_files
    if src.path == "-":
        return ["-"]
    return data_files(local_path(src.path))


def _read_one(f, fmt, names):
    """One file -> an Arrow table of those of `names` it has (all of them
    strings for CSV), or a CLIError naming it."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq
    source = pa.BufferReader(sys.stdin.buffer.read()) if f == "-" else f
    try:
        if fmt == "parquet":
            schema = pq.read_schema(f)
            if names[0] not in schema.names or names[1] not in schema.names:
                return schema.empty_table()     # no rows read: the caller names the missing column
            return pq.read_table(f, columns=[n for n in names if n in schema.names])
        if fmt == "json":
            return pajson.read_json(source)
        # CSV: text, as Spark reads it; an empty field is null (Spark's nullValue).
        conv = pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                    strings_can_be_null=True, null_values=[""])
        return pacsv.read_csv(source, convert_options=conv)
    except (pa.ArrowInvalid, OSError) as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CLIError(f"cannot read subscriptions {f} as {fmt}: {text}") from None


def read_table(src):
    """The SubsSource `src` (kind "table") -> SubsRows.  An input with no
    data at all (an empty file, a header only) is SubsRows of length 0:
    the caller decides whether that is allowed."""
    _pyarrow()
    import pyarrow as pa
    cols = src.columns
    want = [cols.sub_id, cols.filter, cols.queue]
    parts = []
    for f in _files(src):
        if f != "-" and os.path.getsize(f) == 0:
            continue                        # no header, no rows: nothing to add
        parts.append(_read_one(f, src.fmt, want))
    if not parts or all(t.num_columns == 0 for t in parts):
        return _empty()
    names = parts[0].column_names
    for need in (cols.sub_id, cols.filter):
        if need not in names:
            flags = "" if need in ("sub_id", "filter") else " (--id-col / --filter-col)"
            raise CLIError(f"{src.path}: the subscriptions table has no column {need!r}{flags} "
                           f"(columns: {', '.join(names) or '(none)'})")
    keep = [n for n in want if n in names]
    try:
        table = pa.concat_tables([t.select(keep) for t in parts], promote_options="permissive")
    except (pa.ArrowInvalid, KeyError) as e:
        raise CLIError(f"subscriptions {src.path}: its files do not have the same columns: "
                       f"{e}") from None
    if table.num_rows == 0:
        return _empty()
    ids = _sub_ids(table.column(cols.sub_id), src.path)
    filters = _strings(table.column(cols.filter), cols.filter, src.path)
    queues = None
    if cols.queue in keep:
        queues = _strings(table.column(cols.queue), cols.queue, src.path)
        if queues.null_count == len(queues):
            queues = None
    if filters.null_count:
        i = _first_null(filters)
        raise CLIError(f"subscriptions {src.path} row {i + 1}: no filter (an empty or null "
                       f"{cols.filter!r})")
    return SubsRows(ids, filters, queues)


def _empty():
    import pyarrow as pa
    return SubsRows(pa.array([], pa.int64()), pa.array([], pa.string()), None)


def _first_null(arr):
    import pyarrow.compute as pc
    return pc.index(pc.is_null(arr), True).as_py()


def _strings(col, name, path):
    import pyarrow as pa
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_null(col.type):
        return pa.array([None] * len(col), pa.string())
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise CLIError(f"{path}: subscriptions column {name!r} has type {col.type}, expected string")
    return col


def _sub_ids(col, path):
    """The sub id column as int64: integers as they are (a uint64 above
    int64 refused), text (CSV) as canonical or padded integers, as fanout's
    own conversion takes them; the first bad value names its row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if col.null_count:
        i = _first_null(col)
        raise CLIError(f"subscriptions {path} row {i + 1}: no sub_id (an empty or null value)")
    if str(col.type) in _INT_TYPES:
        try:
            return pc.cast(col, pa.int64())
        except pa.ArrowInvalid:
            i = pc.index(pc.greater(col, 2 ** 63 - 1), True).as_py()
            raise CLIError(f"subscriptions {path} row {i + 1}: sub_id {col[i].as_py()} is outside "
                           "signed 64-bit") from None
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise CLIError(f"{path}: subscriptions column 'sub_id' has type {col.type}, "
                       "expected an integer type")
    try:
        return pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
    except pa.ArrowInvalid:
        pass
    for i, v in enumerate(col.to_pylist()):      # the error path only: find the row
        try:
            n = int(v.strip())
        except ValueError:
            raise CLIError(f"subscriptions {path} row {i + 1}: sub_id {v!r} is not an "
                           "integer") from None
        if not -(2 ** 63) <= n < 2 ** 63:
            raise CLIError(f"subscriptions {path} row {i + 1}: sub_id {v!r} is outside "
                           "signed 64-bit") from None
    raise CLIError(f"subscriptions {path}: the sub_id column could not be read as integers")
