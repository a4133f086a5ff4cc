"""`topicmatch fanout`'s files: the inputs' formats, the line scan of local CSV
and JSON-lines events (nothing is lost: a line that cannot become a row is
rejected with its reason), reading them with Spark, the subscriptions' sub
ids, and row counts from Parquet footers.  Spark's errors become one-line
CLIErrors naming the file."""
import bz2
import gzip
import lzma
import os
import shutil
import tempfile

from topicmatch.cli.common import BOM, CLIError, Rejected, is_local, local_path, read_lines

FORMATS = ("parquet", "json", "csv")
_EXT = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json",
        ".ndjson": "json", ".csv": "csv"}
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".snappy", ".deflate")
#: An events row of a CSV or JSON-lines file longer than this is rejected
#: without being held (a subject is at most 65,535 bytes; the rest of the row
#: is the event's own columns).
MAX_EVENT_LINE_BYTES = 1 << 20
#: Where Spark puts an events row it cannot parse (PERMISSIVE mode).
CORRUPT_COL = "_topicmatch_corrupt_record"
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


# --------------------------------------------------------------------------
# Spark's errors, in one line
# --------------------------------------------------------------------------

def _java_message(e):
    """The most specific message in a Py4JJavaError's Java cause chain."""
    best, t, seen = None, getattr(e, "java_exception", None), 0
    while t is not None and seen < 20:
        msg = t.getMessage()
        if msg and msg.strip():
            best = msg
        t, seen = t.getCause(), seen + 1
    return best


def first_line(e):
    """One useful line from an exception: Spark's carry a JVM or Python trace."""
    try:
        text = _java_message(e) if hasattr(e, "java_exception") else None
    except Exception:  # noqa: BLE001 - the JVM may be gone
        text = None
    text = text or str(e) or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        lines = [ln for ln in lines if not ln.startswith(("JVM stacktrace", "at ", "File "))]
        return lines[-1][:500] if lines else type(e).__name__
    for line in lines:
        if not line.startswith(("JVM stacktrace", "at ", "An error occurred while calling")):
            return line[:500]
    return type(e).__name__


def spark_errors():
    """The exceptions a Spark call raises for a user's mistake (a file, a column)."""
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JError
    return (PySparkException, Py4JError)


# --------------------------------------------------------------------------
# formats, and reading a table
# --------------------------------------------------------------------------

def format_of(path, fmt, what, flag):
    if fmt:
        return fmt
    p = local_path(path).rstrip("/")
    name = p
    if is_local(path) and os.path.isdir(p):
        parts = sorted(f for f in os.listdir(p) if not f.startswith(("_", ".")))
        if not parts:
            raise CLIError(f"{what} directory {path} has no data files")
        name = parts[0]
    base = name.lower()
    for c in _COMPRESSED:
        if base.endswith(c):
            base = base[: -len(c)]
    for ext, f in _EXT.items():
        if base.endswith(ext):
            return f
    raise CLIError(f"cannot tell the format of {what} {path} from its name; "
                   f"use {flag} parquet|json|csv")


def read_table(spark, path, fmt, what):
    """-> DataFrame; a file Spark cannot read is a CLIError naming it."""
    try:
        r = spark.read
        if fmt == "csv":
            df = r.option("header", True).option("mode", "FAILFAST").csv(path)
        elif fmt == "json":
            df = r.option("mode", "FAILFAST").json(path)
        else:
            df = r.parquet(path)
        df.schema  # noqa: B018 - resolve it now, so an error names this file
    except spark_errors() as e:
        raise CLIError(f"cannot read {what} {path} as {fmt}: {first_line(e)}") from None
    if not df.columns:
        raise CLIError(f"{what} {path} has no columns (empty or not {fmt})")
    return df


# --------------------------------------------------------------------------
# the events' line discipline (CSV and JSON lines)
# --------------------------------------------------------------------------

def data_files(p):
    if os.path.isfile(p):
        return [p]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
                  if not f.startswith(("_", ".")) and not f.endswith(".crc"))


def opener_of(name):
    """-> (opener, name without its compression suffix), or (None, None) for
    a compression this scan cannot read (Spark still reads the file)."""
    low = name.lower()
    for ext, op in _OPENERS.items():
        if low.endswith(ext):
            return op, name[: -len(ext)]
    if low.endswith((".zst", ".lz4", ".snappy", ".deflate")):
        return None, None
    return open, name


def _starts_with_bom(path, opener):
    with opener(path, "rb") as f:
        return f.read(3) == BOM


class ScannedEvents:
    """The result of scanning local CSV / JSON-lines events line by line:
    `path`, what Spark should read (the input, or a cleaned copy without the
    rejected lines and byte-order marks); `rejected`, (file, line, reason)
    of each line that never became a row."""

    def __init__(self, path, rejected, tmpdir=None):
        self.path, self.rejected, self._tmpdir = path, rejected, tmpdir

    def cleanup(self):
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def scan_events(path, fmt, rejects=None, limit=None):
    """Every line of local CSV / JSON-lines events is checked before Spark
    reads them: a byte-order mark is removed, and a line that is not UTF-8
    or longer than `limit` bytes (scanned in bounded memory) is rejected with
    its reason -- Spark would otherwise read the first as U+FFFD replacements
    and hold the second whole.  Only when a file has such a line (or a BOM)
    is a cleaned copy written, to a temporary directory; the rejected lines
    go to `rejects` (a binary file) byte for byte.  Parquet, remote paths and
    compressions other than gzip, bz2 and xz are read by Spark as they are.
    A CSV header line that is rejected is an error (the columns are unknown)."""
    limit = limit or MAX_EVENT_LINE_BYTES
    if fmt == "parquet" or not is_local(path):
        return ScannedEvents(path, [])
    p = local_path(path)
    files = [(f, *opener_of(f)) for f in data_files(p)]
    files = [(f, op, plain) for f, op, plain in files if op is not None]

    def bad_lines(f, op, out=None):
        found = []
        streamed_to = rejects if out is not None else None      # the second pass only
        for first, items, _ in read_lines(f, "events", limit, rejects=streamed_to, opener=op):
            for k, x in enumerate(items):
                if isinstance(x, Rejected):
                    if first + k == 1 and fmt == "csv":
                        raise CLIError(f"events {f} line 1 (the CSV header): {x.reason}")
                    found.append((f, first + k, x))
            if out is not None:
                _write_clean(out, items, rejects)
        return found

    if not any(_starts_with_bom(f, op) for f, op, _ in files) and \
            not any(bad_lines(f, op) for f, op, _ in files):
        return ScannedEvents(path, [])
    tmp = tempfile.mkdtemp(prefix="topicmatch-events-")
    rejected = []
    try:
        for f, op, plain in files:
            rel = os.path.relpath(plain, p) if os.path.isdir(p) else os.path.basename(plain)
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8", newline="") as out:
                rejected += [(f, n, x.reason) for f, n, x in bad_lines(f, op, out)]
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ScannedEvents(tmp if os.path.isdir(p) else os.path.join(tmp, os.path.basename(
        opener_of(p)[1] or p)), rejected, tmp)


def locate_lines(path, texts, limit=None):
    """Where the rows Spark could not parse are: [(file, line number, text)]
    for the lines of local events `path` whose text is the first line of one
    of `texts` (Spark's corrupt records), in file order, each text found as
    many times as it is given; a text not found is listed last with
    (None, None).  The scan stops once every text is found."""
    from collections import Counter
    want = Counter(t.split("\n", 1)[0].rstrip("\r") for t in texts)
    full = {t.split("\n", 1)[0].rstrip("\r"): t for t in texts}
    left = sum(want.values())
    found = []
    if is_local(path) and left:
        for f in data_files(local_path(path)):
            op, _ = opener_of(f)
            if op is None:
                continue
            for first, items, _ in read_lines(f, "events", limit or MAX_EVENT_LINE_BYTES, opener=op):
                for k, x in enumerate(items):
                    if type(x) is str and want.get(x):
                        want[x] -= 1
                        left -= 1
                        found.append((f, first + k, full[x]))
                if not left:
                    return found
    return found + [(None, None, full[t]) for t, n in want.items() for _ in range(n)]


def _write_clean(out, items, rejects):
    """The good lines of a block to the cleaned copy; the rejected ones (that
    read_lines has not streamed already) to the rejects file."""
    good = [x for x in items if not isinstance(x, Rejected)]
    if good:
        out.write("\n".join(good) + "\n")
    if rejects is not None:
        for x in items:
            if isinstance(x, Rejected) and x.raw is not None:
                rejects.write(x.raw + b"\n")


# --------------------------------------------------------------------------
# reading with Spark
# --------------------------------------------------------------------------

def read_events(spark, path, fmt, schema=None, long_cols=()):
    """The events as a DataFrame.  CSV and JSON lines are read PERMISSIVE: a
    row Spark cannot parse (a CSV row with the wrong number of fields, a line
    that is not JSON, a value that is not of its --schema type) is kept, its
    text in CORRUPT_COL, to be rejected with a reason rather than stop the run
    (FAILFAST) or vanish (DROPMALFORMED).

    schema: --schema, a Spark DDL string (CSV: the header's columns, in its
    order; JSON: the fields read).  Without it a CSV's columns are strings,
    but those in long_cols (id columns whose every value is a canonical
    integer) are bigint; a JSON file's types are Spark's inference."""
    if fmt == "parquet":
        return read_table(spark, path, fmt, "events")
    from pyspark.sql import types as T
    corrupt = T.StructField(CORRUPT_COL, T.StringType())
    try:
        r = spark.read.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT_COL)
        given = None
        if schema is not None:
            try:
                given = T._parse_datatype_string(schema)
            except Exception as e:  # noqa: BLE001 - Spark's parser has the last word
                raise CLIError(f"--schema {schema!r}: {first_line(e)}") from None
            if not isinstance(given, T.StructType):
                raise CLIError(f"--schema {schema!r}: expected columns (name type, ...)")
            if CORRUPT_COL in given.names:
                raise CLIError(f"--schema: column {CORRUPT_COL!r} is reserved")
        if fmt == "csv":
            if given is not None:
                # the header is checked against the schema's names, not ignored
                schema_ = T.StructType(list(given.fields) + [corrupt])
                df = r.option("header", True).option("enforceSchema", False).schema(schema_).csv(path)
            else:
                # CSV columns are strings (one line read for the header), the
                # inferred id columns bigint.
                head = spark.read.option("header", True).csv(path).schema
                if CORRUPT_COL in head.names:
                    raise CLIError(f"events {path}: column {CORRUPT_COL!r} is reserved")
                fields = [T.StructField(f.name, T.LongType()) if f.name in long_cols else f
                          for f in head.fields]
                df = r.option("header", True).schema(T.StructType(fields + [corrupt])).csv(path)
        elif given is not None:
            df = r.schema(T.StructType(list(given.fields) + [corrupt])).json(path)
        else:
            df = r.json(path)
        df.schema  # noqa: B018 - resolve it now, so an error names this file
    except spark_errors() as e:
        raise CLIError(f"cannot read events {path} as {fmt}: {first_line(e)}") from None
    if not [c for c in df.columns if c != CORRUPT_COL]:
        raise CLIError(f"events {path} has no columns (empty or not {fmt})")
    return df


def select_subs_columns(subs, columns, path):
    """The subscriptions DataFrame with its sub id, filter and queue columns
    (a SubsColumns: --id-col, --filter-col, --queue-col) under the names
    the fan-out reads; other columns are dropped (a renamed table may have
    its own column called `filter`).  A missing column is a CLIError."""
    from topicmatch.spark.base import column
    if not columns.renamed():
        return subs
    for name in (columns.sub_id, columns.filter):
        if name not in subs.columns:
            raise CLIError(f"{path}: the subscriptions table has no column {name!r} "
                           f"(columns: {', '.join(subs.columns)})")
    picked = [column(columns.sub_id).alias("sub_id"), column(columns.filter).alias("filter")]
    if columns.queue in subs.columns:
        picked.append(column(columns.queue).alias("queue"))
    return subs.select(*picked)


def subs_frame(subs):
    """The subscriptions as the fan-out's plan takes them: a string sub_id
    (CSV, quoted JSON) cast to long, in the plan's own pass (no job of its
    own).  A value that is no signed 64-bit integer casts to null, which the
    plan refuses; bad_sub_id then names it."""
    if not _string_ids(subs):
        return subs
    return subs.withColumn("sub_id", _long_id())


def bad_sub_id(subs, path):
    """On the error path of a plan of subs_frame(subs): a string sub_id that
    is no signed 64-bit integer (and so reached the plan as a null) is a
    CLIError naming it as written (one small job)."""
    from pyspark.sql import functions as F
    if not _string_ids(subs):
        return
    bad = subs.where(F.col("sub_id").isNotNull() & _long_id().isNull()).select("sub_id") \
        .limit(1).collect()
    if bad:
        raise CLIError(f"subscriptions {path}: sub_id {bad[0][0]!r} is not a signed 64-bit integer")


def _string_ids(subs):
    from pyspark.sql import types as T
    return "sub_id" in subs.columns and isinstance(subs.schema["sub_id"].dataType, T.StringType)


def _long_id():
    # try_cast: null for a bad value under ANSI mode too, where cast raises
    # from inside whichever job meets the value first
    from pyspark.sql import functions as F
    return F.trim(F.col("sub_id")).try_cast("long")


# --------------------------------------------------------------------------
# sizes: the inputs' rows and bytes
# --------------------------------------------------------------------------

def parquet_rows(path):
    """Rows of a local Parquet file or directory, from the footers; None if unknown."""
    if not is_local(path):
        return None
    try:
        import pyarrow.parquet as pq
        p = local_path(path)
        files = [p] if os.path.isfile(p) else [
            os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
            if not f.startswith(("_", ".")) and not f.endswith(".crc")]
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # noqa: BLE001 - only a progress estimate / a check
        return None


def _input_bytes(path):
    if not is_local(path):
        return None
    p = local_path(path)
    if os.path.isfile(p):
        return os.path.getsize(p)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs
               if not f.startswith(("_", ".")))


def split_small_inputs(spark, events_path, tasks_per_core=4):
    """Let a small input split into a few tasks per core (Spark's default
    splits at 128 MiB: a 20 MB file would be one task, or one per core after
    a shuffle): the work spreads evenly, a task's retry is cheap, and the
    progress lines move.  Parquet splits at row groups."""
    size = _input_bytes(events_path)
    if not size:
        return
    cores = spark.sparkContext.defaultParallelism
    split = max(1 << 20, size // (cores * tasks_per_core))
    if split < 128 << 20:
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
        spark.conf.set("spark.sql.files.openCostInBytes", str(min(split, 4 << 20)))
