"""`fastsub fanout` and the Spark session of `fastsub demo` (fastsub.cli
parses the arguments; this module runs the job).

One fan-out is three Spark jobs over the data: collect the subscriptions
(one small job), then, with the per-event frame observed, write the
deliveries (the matching pass: reads the events, matches, and collects the
counts as it goes), then write the rejected events (a second read of the
events that checks the subjects only: no index, no matching).  The
reconciliation line comes from the observed counts; the deliveries written
are counted again from the Parquet footers.
"""
import bz2
import gzip
import lzma
import os
import shutil
import sys
import tempfile
import time

from fastsub.cli import (EXIT_REJECTED, MAX_REJECT_LINES, CLIError, Rejected, _check_readable,
                         _first_line, _format_of, _is_local, _local_path, _n, _out_paths, _read,
                         _size, _spark_errors, read_lines)

#: An events row of a CSV or JSON-lines file longer than this is rejected
#: without being held (a subject is at most 65,535 bytes; the rest of the row
#: is the event's own columns).
MAX_EVENT_LINE_BYTES = 1 << 20
#: Where Spark puts an events row it cannot parse (PERMISSIVE mode).
CORRUPT_COL = "_fastsub_corrupt_record"
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------
# the events' line discipline (CSV and JSON lines)
# --------------------------------------------------------------------------

def _data_files(p):
    if os.path.isfile(p):
        return [p]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
                  if not f.startswith(("_", ".")) and not f.endswith(".crc"))


def _opener_of(name):
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
        return f.read(3) == _BOM


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
    if fmt == "parquet" or not _is_local(path):
        return ScannedEvents(path, [])
    p = _local_path(path)
    files = [(f, *_opener_of(f)) for f in _data_files(p)]
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
    tmp = tempfile.mkdtemp(prefix="fastsub-events-")
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
        _opener_of(p)[1] or p)), rejected, tmp)


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



def _subs_table(subs, path):
    """The subscriptions on the driver as Arrow (sub_id int64, filter[, queue]),
    in one Spark job.  CSV (and quoted JSON) sub ids are strings: converted here,
    naming the first bad row, without a second job."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from fastsub.spark import collect_subscriptions
    if "sub_id" not in subs.columns or not isinstance(subs.schema["sub_id"].dataType, T.StringType):
        return collect_subscriptions(subs)
    from fastsub.spark import _col, check_subscriptions_schema
    has_queue = check_subscriptions_schema(subs, string_ids=True)
    cols = ["sub_id", "filter"] + (["queue"] if has_queue else [])
    table = subs.select(*(_col(c) for c in cols)).toArrow()
    ids = []
    for i, v in enumerate(table.column(0).to_pylist()):
        if v is None:
            ids.append(None)
            continue
        try:
            n = int(v.strip())
        except ValueError:
            raise CLIError(f"subscriptions {path} row {i + 1}: sub_id {v!r} is not an integer") from None
        if not -(2 ** 63) <= n < 2 ** 63:
            raise CLIError(f"subscriptions {path} row {i + 1}: sub_id {v!r} is outside signed 64-bit")
        ids.append(n)
    return table.set_column(0, "sub_id", pa.array(ids, pa.int64()))


def _parquet_rows(path):
    """Rows of a local Parquet file or directory, from the footers; None if unknown."""
    if not _is_local(path):
        return None
    try:
        import pyarrow.parquet as pq
        p = _local_path(path)
        files = [p] if os.path.isfile(p) else [
            os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs
            if not f.startswith(("_", ".")) and not f.endswith(".crc")]
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    except Exception:  # noqa: BLE001 - only a progress estimate / a check
        return None


def _input_bytes(path):
    if not _is_local(path):
        return None
    p = _local_path(path)
    if os.path.isfile(p):
        return os.path.getsize(p)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs
               if not f.startswith(("_", ".")))


def _split_small_inputs(spark, events_path, tasks_per_core=4):
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


class _Jobs:
    """Counts the Spark jobs run inside it (classic Spark: a job group)."""

    def __init__(self, spark):
        from fastsub.spark import is_connect
        self.sc = None if is_connect(spark) else spark.sparkContext
        self.group = f"fastsub-fanout-{os.getpid()}-{time.monotonic_ns()}"

    def __enter__(self):
        if self.sc is not None:
            self.sc.setJobGroup(self.group, "fastsub fanout")
        return self

    def __exit__(self, *exc):
        if self.sc is not None:
            self.sc.setLocalProperty("spark.jobGroup.id", None)
        return False

    def count(self):
        if self.sc is None:
            return None
        return len(self.sc.statusTracker().getJobIdsForGroup(self.group))


def _read_events(spark, path, fmt):
    """The events as a DataFrame.  CSV and JSON lines are read PERMISSIVE: a
    row Spark cannot parse (a CSV row with the wrong number of fields, a line
    that is not JSON) is kept, its text in CORRUPT_COL, to be rejected with
    a reason rather than stop the run (FAILFAST) or vanish (DROPMALFORMED)."""
    if fmt == "parquet":
        return _read(spark, path, fmt, "events")
    from pyspark.sql import types as T
    try:
        r = spark.read.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT_COL)
        if fmt == "csv":
            # CSV columns are strings; the header names them (one line read).
            head = spark.read.option("header", True).csv(path).schema
            if CORRUPT_COL in head.names:
                raise CLIError(f"events {path}: column {CORRUPT_COL!r} is reserved")
            schema = T.StructType(list(head.fields) + [T.StructField(CORRUPT_COL, T.StringType())])
            df = r.option("header", True).schema(schema).csv(path)
        else:
            df = r.json(path)
        df.schema  # noqa: B018 - resolve it now, so an error names this file
    except _spark_errors() as e:
        raise CLIError(f"cannot read events {path} as {fmt}: {_first_line(e)}") from None
    if not [c for c in df.columns if c != CORRUPT_COL]:
        raise CLIError(f"events {path} has no columns (empty or not {fmt})")
    return df


def _subs_frame(subs, path):
    """The subscriptions as a DataFrame for the sharded fan-out (nothing is
    collected): a string sub_id (CSV) cast to long, the first bad value an
    error that names it (one small job)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    if "sub_id" not in subs.columns or not isinstance(subs.schema["sub_id"].dataType, T.StringType):
        return subs
    cast = F.trim(F.col("sub_id")).cast("long")
    bad = subs.where(F.col("sub_id").isNotNull() & cast.isNull()).select("sub_id").limit(1).collect()
    if bad:
        raise CLIError(f"subscriptions {path}: sub_id {bad[0][0]!r} is not a signed 64-bit integer")
    return subs.withColumn("sub_id", cast)


def run_fanout(spark, events_path, subs_path, out, *, events_format=None, subs_format=None,
               dialect="nats", subject_col="subject", key_col=None, queues="pick",
               overwrite=False, master="", out_stream=None, progress=2.0, ship="auto",
               shards="auto", dedupe=False, rejects=None, err_stream=None):
    """Read, fan out, write DIR/deliveries and DIR/rejected (Parquet), print the
    summary.  -> (FanoutCounts, deliveries written, seconds).  User errors raise CLIError.

    shards: 1, one index built on the driver; N > 1, the sharded fan-out (the
    subscriptions stay a DataFrame); "auto": one index up to
    fastsub.spark.AUTO_SHARD_MIN_SUBS subscriptions (counted once), sharded
    above.  dedupe: one delivery per (event, sub_id).  rejects: a binary
    file for the events lines that never became rows (see scan_events) and
    the text of the rows Spark could not parse."""
    from fastsub.spark import is_connect

    out_stream = out_stream or sys.stdout
    err_stream = err_stream or sys.stderr
    p = lambda *a: print(*a, file=out_stream, flush=True)  # noqa: E731
    ev_fmt = _format_of(events_path, events_format, "events", "--format")
    sub_fmt = _format_of(subs_path, subs_format, "subscriptions", "--subs-format")
    paths = _out_paths(out, overwrite)
    mode = "overwrite" if overwrite else "error"  # ("errorifexists": not on Spark Connect)
    connect = is_connect(spark)
    p(f"fastsub fanout: {events_path} x {subs_path} ({dialect}, queues={queues}"
      + (f", key={key_col}" if key_col else "") + (", dedupe" if dedupe else "")
      + (f", shards={shards}" if shards != "auto" else "")
      + (f") on {master}" if master else ")"))

    jobs = _Jobs(spark)
    scan = scan_events(events_path, ev_fmt, rejects)
    try:
        for n, (f, lineno, why) in enumerate(scan.rejected):
            if n < MAX_REJECT_LINES:
                print(f"fastsub: {f} line {lineno}: rejected: {why}", file=err_stream)
        if len(scan.rejected) > MAX_REJECT_LINES:
            print(f"fastsub: {len(scan.rejected) - MAX_REJECT_LINES:,} more rejected lines not shown",
                  file=err_stream)
        with jobs:
            return _fanout_job(spark, jobs, scan, events_path, subs_path, paths, mode, ev_fmt,
                               sub_fmt, connect, p, dialect=dialect, subject_col=subject_col,
                               key_col=key_col, queues=queues, progress=progress, ship=ship,
                               shards=shards, dedupe=dedupe, rejects=rejects)
    finally:
        scan.cleanup()


def _fanout_job(spark, jobs, scan, events_path, subs_path, paths, mode, ev_fmt, sub_fmt, connect, p,
                *, dialect, subject_col, key_col, queues, progress, ship, shards, dedupe, rejects):
    from pyspark.sql import functions as F

    from fastsub import InvalidSubjectError
    from fastsub.spark import (AUTO_SHARD_MIN_SUBS, ExecutorEnvironmentError, FanoutCounts,
                               FanoutInputError, Progress, fanout_with_rejects, index_from_arrow,
                               share_index)
    t0 = time.perf_counter()
    if not connect:
        _split_small_inputs(spark, scan.path)
    events = _read_events(spark, scan.path, ev_fmt)
    malformed = None
    if CORRUPT_COL in events.columns:
        # Rows Spark could not parse: rejected with their text, never dropped.
        # (Both frames read other columns too: Spark refuses a query of a raw
        # CSV/JSON file that needs its corrupt-record column alone.)
        cols = [c for c in events.columns if c != CORRUPT_COL]
        malformed = events.where(F.col(CORRUPT_COL).isNotNull())
        events = events.where(F.col(CORRUPT_COL).isNull()).drop(CORRUPT_COL)
    if not connect:
        # A small or unsplittable file (one gzip CSV, say) is one partition: spread
        # it over the cores, or a single task does all the matching and writing.
        cores = spark.sparkContext.defaultParallelism
        if events.rdd.getNumPartitions() < cores:
            events = events.repartition(cores)
    subs = _read(spark, subs_path, sub_fmt, "subscriptions")
    t_read = time.perf_counter()
    kw = {"dedupe": True} if dedupe else {}
    try:
        sharded = shards != 1 and (shards != "auto" or subs.count() > AUTO_SHARD_MIN_SUBS)
        if sharded:
            t_collect = t_built = time.perf_counter()
            res = fanout_with_rejects(events, _subs_frame(subs, subs_path), subject_col=subject_col,
                                      key_col=key_col, dialect=dialect, queues=queues, ship=ship,
                                      shards=shards, **kw)
            idx = res.index
        else:
            table = _subs_table(subs, subs_path)
            t_collect = time.perf_counter()
            idx = share_index(spark, index_from_arrow(table, dialect), ship=ship)
            del table
            t_built = time.perf_counter()
            if shards != "auto":
                kw["shards"] = shards
            res = fanout_with_rejects(events, idx, subject_col=subject_col, key_col=key_col,
                                      dialect=dialect, queues=queues, **kw)
    except (FanoutInputError, InvalidSubjectError) as e:
        about_subs = str(e).startswith(("subscriptions", "the subscriptions"))
        where = subs_path if about_subs else events_path
        raise CLIError(f"{where}: {e}") from None
    except ExecutorEnvironmentError as e:
        raise CLIError(str(e)) from None
    except _spark_errors() as e:
        raise CLIError(f"reading subscriptions {subs_path} failed: {_first_line(e)}") from None
    t_index = time.perf_counter()
    if hasattr(idx, "shipped_by"):
        p(f"  index       {_n(idx.nsubs)} subscriptions, {_size(idx.nbytes)}, shipped by "
          f"{idx.shipped_by} ({t_collect - t_read:.1f} s to collect, "
          f"{t_built - t_collect:.1f} s to build and ship)")
    else:
        p(f"  index       sharded: {idx.shards} shards at depth {idx.depth}"
          + (f", {_n(idx.nsubs)} subscriptions" if getattr(idx, "nsubs", None) is not None else "")
          + " (built on the executors)")
    n_events = _parquet_rows(events_path) if ev_fmt == "parquet" else None
    # No persist: caching every event with its ids costs more than reading
    # the events again for the rejected pass, which checks the subjects only.
    res = res.observe()
    rejected = res.rejected
    if malformed is not None:
        rejected = rejected.unionByName(malformed.select(
            *cols, F.concat(F.lit(f"malformed {ev_fmt} row: "),
                            F.substring(F.col(CORRUPT_COL), 1, 200)).alias("error")))
    if scan.rejected:
        schema = rejected.schema
        rows = [tuple([None] * (len(schema.fields) - 1) + [f"{f} line {n}: {why}"])
                for f, n, why in scan.rejected]
        rejected = rejected.unionByName(spark.createDataFrame(rows, schema))
    try:
        with Progress(spark, out=sys.stderr, interval=progress, rows=n_events,
                      label="matching") if progress else _Null():
            res.deliveries.write.mode(mode).parquet(paths["deliveries"])
        t_match = time.perf_counter()
        rejected.write.mode(mode).parquet(paths["rejected"])
        t_rejected = time.perf_counter()
        counts = res.observed_counts()
        extra = len(scan.rejected)
        if malformed is not None:
            written_rejected = _parquet_rows(paths["rejected"])
            if written_rejected is None:
                written_rejected = spark.read.parquet(paths["rejected"]).count()
            n_malformed = written_rejected - counts.rejected - len(scan.rejected)
            extra += n_malformed
            if rejects is not None and n_malformed:
                for row in malformed.select(*cols, CORRUPT_COL).toLocalIterator():
                    rejects.write(row[CORRUPT_COL].encode("utf-8") + b"\n")
        counts = FanoutCounts(counts.events + extra, counts.delivered, counts.unmatched,
                              counts.rejected + extra, counts.deliveries)
    except _spark_errors() as e:
        raise CLIError(f"the fan-out of {events_path} failed: {_first_line(e)}") from None
    t_end = time.perf_counter()
    written = _parquet_rows(paths["deliveries"])
    if written is None:
        written = spark.read.parquet(paths["deliveries"]).count()
    n_jobs = jobs.count()
    seconds = t_end - t0

    ok = counts.reconciles and written == counts.deliveries
    p(f"  events in   {_n(counts.events)} = {_n(counts.delivered)} delivered + "
      f"{_n(counts.unmatched)} unmatched + {_n(counts.rejected)} rejected  "
      + ("[reconciles]" if counts.reconciles else "[DOES NOT RECONCILE]"))
    p(f"  deliveries  {_n(written)} rows -> {paths['deliveries']} (parquet)"
      + ("" if written == counts.deliveries else f"  [expected {_n(counts.deliveries)}]"))
    p(f"  rejected    {_n(counts.rejected)} rows -> {paths['rejected']} (parquet, with `error`)")
    p(f"  time        {seconds:.1f} s: {_n(round(counts.events / seconds))} events/s, "
      f"{_n(round(counts.deliveries / seconds))} deliveries/s"
      + (f", {n_jobs} Spark jobs" if n_jobs is not None else ""))
    p(f"              read inputs {t_read - t0:.1f} s | index {t_built - t_read:.1f} s | "
      f"plan {t_index - t_built:.1f} s | "
      f"read events + match + write deliveries {t_match - t_index:.1f} s | "
      f"check subjects + write rejected {t_rejected - t_match:.1f} s | counts {t_end - t_rejected:.1f} s")
    if not ok:
        raise RuntimeError("the counts do not reconcile: this is a fastsub bug")
    return counts, written, seconds


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def session(args):
    """The session of `fanout` / `demo`: Spark Connect with --remote, else
    local_session(--master) (the executors run this interpreter by default)."""
    try:
        from fastsub.spark import local_session, remote_session
    except ImportError as e:
        raise CLIError(str(e)) from None
    remote = getattr(args, "remote", None)
    if remote:
        try:
            return remote_session(remote, app_name=f"fastsub {args.cmd}")
        except ImportError as e:
            raise CLIError(str(e)) from None
        except ValueError as e:
            raise CLIError(str(e)) from None
    level = "WARN" if args.verbose else "ERROR"
    return local_session(args.master, app_name=f"fastsub {args.cmd}", log_level=level)


def where(args):
    return args.remote if getattr(args, "remote", None) else args.master


def cmd_fanout(args):
    # Everything that can be checked without a JVM is checked before starting one.
    _check_readable(args.events, "events")
    _check_readable(args.subs, "subscriptions")
    _format_of(args.events, args.format, "events", "--format")
    _format_of(args.subs, args.subs_format, "subscriptions", "--subs-format")
    _out_paths(args.out, args.overwrite)
    rejects = None
    if getattr(args, "rejects", None):
        try:
            rejects = open(args.rejects, "wb")
        except OSError as e:
            raise CLIError(f"cannot write --rejects {args.rejects}: {e.strerror}") from None
    try:
        spark = session(args)
        counts, _, _ = run_fanout(
            spark, args.events, args.subs, args.out, events_format=args.format,
            subs_format=args.subs_format, dialect=args.dialect, subject_col=args.subject_col,
            key_col=args.key_col, queues=args.queues, overwrite=args.overwrite,
            master=where(args), progress=getattr(args, "progress", 2.0),
            ship=getattr(args, "ship", "auto"), shards=getattr(args, "shards", "auto"),
            dedupe=getattr(args, "dedupe", False), rejects=rejects)
    finally:
        if rejects is not None:
            rejects.close()
    return EXIT_REJECTED if counts.rejected else 0
