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
import os
import sys
import time

from fastsub.cli import (CLIError, _check_readable, _first_line, _format_of, _is_local, _local_path,
                         _n, _out_paths, _read, _size, _spark_errors)


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


def run_fanout(spark, events_path, subs_path, out, *, events_format=None, subs_format=None,
               dialect="nats", subject_col="subject", key_col=None, queues="pick",
               overwrite=False, master="", out_stream=None, progress=2.0, ship="auto"):
    """Read, fan out, write DIR/deliveries and DIR/rejected (Parquet), print the
    summary.  -> (FanoutCounts, deliveries written, seconds).  User errors raise CLIError."""
    from fastsub import InvalidSubjectError
    from fastsub.spark import (ExecutorEnvironmentError, FanoutInputError, Progress,
                               fanout_with_rejects, index_from_arrow, is_connect, share_index)

    out_stream = out_stream or sys.stdout
    p = lambda *a: print(*a, file=out_stream, flush=True)  # noqa: E731
    ev_fmt = _format_of(events_path, events_format, "events", "--format")
    sub_fmt = _format_of(subs_path, subs_format, "subscriptions", "--subs-format")
    paths = _out_paths(out, overwrite)
    mode = "overwrite" if overwrite else "error"  # ("errorifexists": not on Spark Connect)
    connect = is_connect(spark)
    p(f"fastsub fanout: {events_path} x {subs_path} ({dialect}, queues={queues}"
      + (f", key={key_col}" if key_col else "") + (f") on {master}" if master else ")"))

    jobs = _Jobs(spark)
    with jobs:
        t0 = time.perf_counter()
        if not connect:
            _split_small_inputs(spark, events_path)
        events = _read(spark, events_path, ev_fmt, "events")
        if not connect:
            # A small or unsplittable file (one gzip CSV, say) is one partition: spread
            # it over the cores, or a single task does all the matching and writing.
            cores = spark.sparkContext.defaultParallelism
            if events.rdd.getNumPartitions() < cores:
                events = events.repartition(cores)
        subs = _read(spark, subs_path, sub_fmt, "subscriptions")
        t_read = time.perf_counter()
        try:
            table = _subs_table(subs, subs_path)
            t_collect = time.perf_counter()
            idx = share_index(spark, index_from_arrow(table, dialect), ship=ship)
            del table
            t_built = time.perf_counter()
            res = fanout_with_rejects(events, idx, subject_col=subject_col, key_col=key_col,
                                      dialect=dialect, queues=queues)
        except (FanoutInputError, InvalidSubjectError) as e:
            about_subs = str(e).startswith(("subscriptions", "the subscriptions"))
            where = subs_path if about_subs else events_path
            raise CLIError(f"{where}: {e}") from None
        except ExecutorEnvironmentError as e:
            raise CLIError(str(e)) from None
        except _spark_errors() as e:
            raise CLIError(f"reading subscriptions {subs_path} failed: {_first_line(e)}") from None
        t_index = time.perf_counter()
        p(f"  index       {_n(idx.nsubs)} subscriptions, {_size(idx.nbytes)}, shipped by "
          f"{idx.shipped_by} ({t_collect - t_read:.1f} s to collect, "
          f"{t_built - t_collect:.1f} s to build and ship)")
        n_events = _parquet_rows(events_path) if ev_fmt == "parquet" else None
        # No persist: caching every event with its ids costs more than reading
        # the events again for the rejected pass, which checks the subjects only.
        res = res.observe()
        try:
            with Progress(spark, out=sys.stderr, interval=progress, rows=n_events,
                          label="matching") if progress else _Null():
                res.deliveries.write.mode(mode).parquet(paths["deliveries"])
            t_match = time.perf_counter()
            res.rejected.write.mode(mode).parquet(paths["rejected"])
            t_rejected = time.perf_counter()
            counts = res.observed_counts()
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
    spark = session(args)
    run_fanout(spark, args.events, args.subs, args.out, events_format=args.format,
               subs_format=args.subs_format, dialect=args.dialect, subject_col=args.subject_col,
               key_col=args.key_col, queues=args.queues, overwrite=args.overwrite,
               master=where(args), progress=getattr(args, "progress", 2.0),
               ship=getattr(args, "ship", "auto"))
    return 0
