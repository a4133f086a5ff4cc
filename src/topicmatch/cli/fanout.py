"""`topicmatch fanout`: the fan-out of an events table against subscriptions
(a table, an image or a filter list, as subs_source.py tells) on Spark,
written to DIR/deliveries and DIR/rejected, with counts that reconcile; and
the Spark session `topicmatch demo` runs on too.  (parser.py parses the
arguments; fanout_io.py reads the inputs and counts rows.)  An image or a
filter list is indexed before Spark starts and shipped as it is.

One fan-out is one plan (plan_fanout, as every fan-out makes it: its one
pass over the subscriptions counts them and decides the route; for an
image not built yet, a build task), then two Spark jobs over the events:
with the per-event frame observed, write the deliveries (the matching
pass: reads the events, matches, and collects the counts as it goes), then
write the rejected events (a second read of the events that checks the
subjects only: no index, no matching).  The
reconciliation line comes from the observed counts; the deliveries written
are counted again from the Parquet footers.
"""
import dataclasses
import os
import sys
import time
from typing import Optional

from topicmatch._core import TopicmatchRuntimeError
from topicmatch.cli.common import (EXIT_REJECTED, CLIError, RejectNames, Stderr, check_readable,
                                   commas, human_bytes, is_local, local_path, per_second, plural)
from topicmatch.cli.fanout_io import (CORRUPT_COL, bad_sub_id, first_line, format_of, locate_lines,
                                      parquet_rows, read_events, read_table, scan_events,
                                      select_subs_columns, spark_errors, split_small_inputs,
                                      subs_frame)
from topicmatch.cli.fanout_schema import (check_events, check_schema_option, check_subscriptions,
                                          csv_header, integer_id_columns, local_columns)
from topicmatch.cli.subs_index import check_not_empty, empty_reason, load, read_rows, warn_foreign
from topicmatch.cli.subs_source import SubsColumns, subs_source


def _out_paths(out, overwrite):
    paths = {k: out.rstrip("/") + "/" + k for k in ("deliveries", "rejected")}
    if is_local(out) and not overwrite:
        for p in paths.values():
            if os.path.exists(local_path(p)):
                raise CLIError(f"output {p} already exists (use --overwrite)")
    return paths


class _Jobs:
    """Counts the Spark jobs run inside it (classic Spark: a job group)."""

    def __init__(self, spark):
        from topicmatch.spark import is_connect
        self.sc = None if is_connect(spark) else spark.sparkContext
        self.group = f"topicmatch-fanout-{os.getpid()}-{time.monotonic_ns()}"

    def __enter__(self):
        if self.sc is not None:
            self.sc.setJobGroup(self.group, "topicmatch fanout")
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
               overwrite=False, master="", out_stream=None, progress=2.0, ship="auto",
               shards="auto", dedupe=False, rejects=None, err_stream=None, schema=None,
               subs_columns=None, sublist=None, allow_empty=False):
    """Read, fan out, write DIR/deliveries and DIR/rejected (Parquet), print the
    summary.  -> (FanoutCounts, deliveries written, seconds).  User errors raise CLIError.

    shards: 1, one index; N > 1, the sharded fan-out; "auto": one index up
    to topicmatch.spark.AUTO_SHARD_MIN_SUBS subscriptions, sharded above.
    The fan-out's plan decides (plan_fanout, made once here and given to
    fanout_with_rejects): its one pass over the subscriptions counts them,
    and the summary's count, route and size are the plan's.  dedupe: one
    delivery per (event, sub_id).  rejects: a binary file for the events
    lines that never became rows (see scan_events) and the text of the rows
    Spark could not parse.  schema: the events' columns
    as a Spark DDL string (CSV and JSON); without it a local CSV's id columns
    are bigint when every value is a canonical integer, its other columns
    strings.  err_stream: a stream, or the command's Stderr (rejected lines
    named there, the first MAX_REJECT_LINES; the progress line drawn there,
    on a terminal only).  subs_columns: the subscriptions table's columns
    (--id-col, ...).  sublist: the subscriptions already indexed (an image,
    a filter list), shipped as they are; subs_path then only names them.
    allow_empty: a table of no rows is not an error."""
    from topicmatch.spark import is_connect

    out_stream = out_stream or sys.stdout
    subs_columns = subs_columns or SubsColumns()
    err = err_stream if isinstance(err_stream, Stderr) else Stderr(err_stream or sys.stderr)
    p = lambda *a: print(*a, file=out_stream, flush=True)  # noqa: E731
    ev_fmt = format_of(events_path, events_format, "events", "--format")
    sub_fmt = None if sublist is not None else format_of(subs_path, subs_format, "subscriptions",
                                                         "--subs-format")
    paths = _out_paths(out, overwrite)
    mode = "overwrite" if overwrite else "error"  # ("errorifexists": not on Spark Connect)
    connect = is_connect(spark)
    p(f"topicmatch fanout: {events_path} x {subs_path} ({dialect}, queues={queues}"
      + (f", key={key_col}" if key_col else "") + (", dedupe" if dedupe else "")
      + (f", shards={shards}" if shards != "auto" else "")
      + (f") on {master}" if master else ")"))

    job = _Job(events_path=events_path, subs_path=subs_path, paths=paths, mode=mode, ev_fmt=ev_fmt,
               sub_fmt=sub_fmt, connect=connect, dialect=dialect, subject_col=subject_col,
               key_col=key_col, queues=queues, progress=progress, ship=ship, shards=shards,
               dedupe=dedupe, rejects=rejects, schema=schema, subs_columns=subs_columns,
               sublist=sublist, allow_empty=allow_empty)
    jobs = _Jobs(spark)
    scan = scan_events(events_path, ev_fmt, rejects)
    names = RejectNames(err)
    try:
        for f, lineno, why in scan.rejected:
            names.name(f"{f} line {lineno}", why)
        if ev_fmt == "csv" and schema is None and is_local(scan.path):
            header = csv_header(scan.path) or []
            job.long_cols = integer_id_columns(scan.path, header, exclude=(subject_col,))
        with jobs:
            # Can the executors run topicmatch?  Asked before any input is
            # read (the fan-out asks after reading and counting them), so a
            # wrong PYSPARK_PYTHON is named at once; _Blame turns its error
            # into the command's.  A part of the start, as the JVM's is: not timed.
            from topicmatch.spark import check_executors
            with _Blame(job.events_path, "events"):
                check_executors(spark)
            clock = _Clock(time.perf_counter())
            inputs = _read(spark, job, scan, clock)
            res = _run(spark, job, inputs, clock)
            _report_index(p, res.plan, clock)
            counts, written = _write(spark, job, scan, inputs, res, err, names, clock)
            seconds = clock.end - clock.start
            _report(p, job, counts, written, jobs.count(), clock)
            return counts, written, seconds
    finally:
        names.finish(None)
        scan.cleanup()


@dataclasses.dataclass
class _Job:
    """What one `topicmatch fanout` was asked to do."""
    events_path: str
    subs_path: str
    paths: dict
    mode: str
    ev_fmt: str
    sub_fmt: str
    connect: bool
    dialect: str
    subject_col: str
    key_col: Optional[str]
    queues: str
    progress: float
    ship: str
    shards: object
    dedupe: bool
    rejects: object
    schema: Optional[str]
    subs_columns: SubsColumns
    sublist: object
    allow_empty: bool
    long_cols: tuple = ()


@dataclasses.dataclass
class _Clock:
    """When each phase ended (time.perf_counter()), for the summary."""
    start: float
    read: float = 0.0
    planned: float = 0.0
    index: float = 0.0
    match: float = 0.0
    rejected: float = 0.0
    end: float = 0.0


@dataclasses.dataclass
class _Inputs:
    """The events (parsed rows), the rows Spark could not parse (or None)
    and the events' columns beside them, and the subscriptions."""
    events: object
    malformed: object
    cols: list
    subs: object


def _read(spark, job, scan, clock):
    """Read the events and the subscriptions as DataFrames (lazily: Spark
    reads them when the fan-out runs)."""
    from pyspark.sql import functions as F
    if not job.connect:
        split_small_inputs(spark, scan.path)
    events = read_events(spark, scan.path, job.ev_fmt, job.schema, job.long_cols)
    malformed, cols = None, list(events.columns)
    if CORRUPT_COL in events.columns:
        # Rows Spark could not parse: rejected with their text, never dropped.
        # (Both frames read other columns too: Spark refuses a query of a raw
        # CSV/JSON file that needs its corrupt-record column alone.)
        cols = [c for c in events.columns if c != CORRUPT_COL]
        malformed = events.where(F.col(CORRUPT_COL).isNotNull())
        events = events.where(F.col(CORRUPT_COL).isNull()).drop(CORRUPT_COL)
    if not job.connect:
        # A small or unsplittable file (one gzip CSV, say) is one partition: spread
        # it over the cores, or a single task does all the matching and writing.
        cores = spark.sparkContext.defaultParallelism
        if events.rdd.getNumPartitions() < cores:
            events = events.repartition(cores)
    subs = None
    if job.sublist is None:
        subs = select_subs_columns(read_table(spark, job.subs_path, job.sub_fmt, "subscriptions"),
                                   job.subs_columns, job.subs_path)
    clock.read = time.perf_counter()
    return _Inputs(events, malformed, cols, subs)


class _Blame:
    """Errors of the fan-out's inputs, routed by their type and by the step
    that raised them (never by their text): within `with _Blame(path, what)`, a
    FanoutInputError or InvalidSubjectError becomes a CLIError naming
    `path`, the input that step reads (`what`: "events", "subscriptions")."""

    def __init__(self, path, what):
        self.path, self.what = path, what

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        from topicmatch import InvalidSubjectError
        from topicmatch.spark import ExecutorEnvironmentError, FanoutInputError
        if kind is not None and issubclass(kind, (FanoutInputError, InvalidSubjectError)):
            raise CLIError(f"{self.path}: {e}") from None
        if kind is not None and issubclass(kind, ExecutorEnvironmentError):
            raise CLIError(str(e)) from None
        if kind is not None and issubclass(kind, spark_errors()):
            raise CLIError(f"reading {self.what} {self.path} failed: {first_line(e)}") from None
        return False


def _run(spark, job, inputs, clock):
    """Plan the index, once, and set up the fan-out with that plan: ->
    FanoutResult (its .plan, the summary's).  The events are checked first
    and the subscriptions next, each under its own _Blame: what planning
    raises is about the subscriptions (a build finds a bad row), what the
    fan-out raises with a plan made is about the events."""
    from topicmatch.spark import fanout_with_rejects
    from topicmatch.spark.base import check_events as spark_check_events
    with _Blame(job.events_path, "events"):
        spark_check_events(inputs.events, job.subject_col, job.key_col, True)
    with _Blame(job.subs_path, "subscriptions"):
        plan = _plan(spark, job, inputs)
    clock.planned = time.perf_counter()
    with _Blame(job.events_path, "events"):
        res = fanout_with_rejects(inputs.events, plan, subject_col=job.subject_col,
                                  key_col=job.key_col, queues=job.queues, dedupe=job.dedupe)
    clock.index = time.perf_counter()
    return res


def _plan(spark, job, inputs):
    """The fan-out's plan (plan_fanout).  An index given (an image, a filter
    list) is shipped as it is; a table is planned as any fan-out's
    subscriptions DataFrame is, and its count is the plan's."""
    from topicmatch.spark import FanoutInputError, plan_fanout
    from topicmatch.spark.base import check_subscriptions_schema
    how = dict(dialect=job.dialect, ship=job.ship, shards=job.shards)
    if job.sublist is not None:
        return plan_fanout(job.sublist, spark=spark, **how)
    subs = inputs.subs
    check_subscriptions_schema(subs, string_ids=True)
    try:
        plan = plan_fanout(subs_frame(subs), **how)
    except FanoutInputError:
        bad_sub_id(subs, job.subs_path)
        raise
    _check_rows(job, plan.nsubs)
    return plan


def _check_rows(job, n):
    """A table Spark read (a remote one: a local one was checked before the
    JVM started) whose plan counted no rows is an error unless --allow-empty."""
    if n == 0 and not job.allow_empty:
        raise CLIError(f"subscriptions {job.subs_path} has no subscriptions (an empty table, or a "
                       "header only): nothing could match; give --allow-empty to run with none")


def _write(spark, job, scan, inputs, res, err, names, clock):
    """Run the fan-out: write the deliveries (the matching pass, with the
    progress line) and the rejected rows, name the malformed ones.  ->
    (FanoutCounts, deliveries written)."""
    from pyspark.sql import functions as F

    from topicmatch.spark import FanoutCounts, Progress
    n_events = parquet_rows(job.events_path) if job.ev_fmt == "parquet" else None
    # No persist: caching every event with its ids costs more than reading
    # the events again for the rejected pass, which checks the subjects only.
    res = res.observe()
    rejected = res.rejected
    malformed, cols = inputs.malformed, inputs.cols
    if malformed is not None:
        rejected = rejected.unionByName(malformed.select(
            *cols, F.concat(F.lit(f"malformed {job.ev_fmt} row: "),
                            F.substring(F.col(CORRUPT_COL), 1, 200)).alias("error")))
    if scan.rejected:
        schema = rejected.schema
        rows = [tuple([None] * (len(schema.fields) - 1) + [f"{f} line {n}: {why}"])
                for f, n, why in scan.rejected]
        rejected = rejected.unionByName(spark.createDataFrame(rows, schema))
    paths = job.paths
    try:
        with Progress(spark, out=err, interval=job.progress, rows=n_events,
                      label="matching") if job.progress else _Null():
            res.deliveries.write.mode(job.mode).parquet(paths["deliveries"])
        clock.match = time.perf_counter()
        rejected.write.mode(job.mode).parquet(paths["rejected"])
        clock.rejected = time.perf_counter()
        counts = res.observed_counts()
        extra = len(scan.rejected)
        if malformed is not None:
            written_rejected = parquet_rows(paths["rejected"])
            if written_rejected is None:
                written_rejected = spark.read.parquet(paths["rejected"]).count()
            n_malformed = written_rejected - counts.rejected - len(scan.rejected)
            extra += n_malformed
            texts = []
            if job.rejects is not None and n_malformed:
                for row in malformed.select(*cols, CORRUPT_COL).toLocalIterator():
                    job.rejects.write(row[CORRUPT_COL].encode("utf-8") + b"\n")
                    if len(texts) < names.cap:
                        texts.append(row[CORRUPT_COL])
            elif n_malformed and names.count < names.cap:
                texts = [r[0] for r in malformed.select(CORRUPT_COL, *cols)
                         .limit(names.cap - names.count).collect()]
            _name_malformed(names, job.events_path, job.ev_fmt, texts, n_malformed)
        counts = FanoutCounts(counts.events + extra, counts.delivered, counts.unmatched,
                              counts.rejected + extra, counts.deliveries)
    except spark_errors() as e:
        raise CLIError(f"the fan-out of {job.events_path} failed: {first_line(e)}") from None
    clock.end = time.perf_counter()
    written = parquet_rows(paths["deliveries"])
    if written is None:
        written = spark.read.parquet(paths["deliveries"]).count()
    return counts, written


#: how a sharded plan's shards are built, by its route
_SHARDS_BUILT = {"shard-images": "an image per shard, built on the executors",
                 "cogroup": "each shard's index built in its task"}


def _report_index(p, plan, clock):
    """The summary's first line, printed as soon as the index is ready: the
    plan's count, route and size, and the time it took (its jobs, its
    build and shipping)."""
    took = f"{clock.planned - clock.read:.1f} s to plan"
    idx = plan.index
    if plan.sharded:
        p(f"  index       sharded: {idx.shards} shards at depth {idx.depth}, "
          f"{plural(plan.nsubs, 'subscription')} ({_SHARDS_BUILT[plan.route]}; {took})")
    else:
        p(f"  index       {plural(plan.nsubs, 'subscription')}, {human_bytes(idx.nbytes)}, "
          f"shipped by {idx.shipped_by} ({took})")


def _report(p, job, counts, written, n_jobs, clock):
    """The rest of the summary: the reconciliation, where the rows went, the
    times.  A fan-out whose counts do not reconcile is a topicmatch bug."""
    seconds = clock.end - clock.start
    paths = job.paths
    ok = counts.reconciles and written == counts.deliveries
    p(f"  events in   {commas(counts.events)} = {commas(counts.delivered)} delivered + "
      f"{commas(counts.unmatched)} unmatched + {commas(counts.rejected)} rejected  "
      + ("[reconciles]" if counts.reconciles else "[DOES NOT RECONCILE]"))
    p(f"  deliveries  {plural(written, 'row')} -> {paths['deliveries']} (parquet)"
      + ("" if written == counts.deliveries else f"  [expected {commas(counts.deliveries)}]"))
    p(f"  rejected    {plural(counts.rejected, 'row')} -> {paths['rejected']} (parquet, with `error`)")
    p(f"  time        {seconds:.1f} s: {per_second(counts.events, seconds)} events/s, "
      f"{per_second(counts.deliveries, seconds)} deliveries/s"
      + (f", {n_jobs} Spark jobs" if n_jobs is not None else ""))
    p(f"              read inputs {clock.read - clock.start:.1f} s | "
      f"index {clock.planned - clock.read:.1f} s | plan {clock.index - clock.planned:.1f} s | "
      f"read events + match + write deliveries {clock.match - clock.index:.1f} s | "
      f"check subjects + write rejected {clock.rejected - clock.match:.1f} s | "
      f"counts {clock.end - clock.rejected:.1f} s")
    if not ok:
        raise TopicmatchRuntimeError("the counts do not reconcile: this is a topicmatch bug")


def _name_malformed(names, events_path, fmt, texts, n_malformed):
    """Name the rows Spark could not parse on stderr, as the line scan's
    rejects are: by file and line (found by their text, for local files)."""
    shown = locate_lines(events_path, texts[:max(0, names.cap - names.count)])
    for f, lineno, text in shown:
        where = f"{f} line {lineno}" if f is not None else events_path
        names.name(where, f"malformed {fmt} row: {text[:200]}")
    names.count += max(0, n_malformed - len(shown))


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def session(args):
    """The session of `fanout` / `demo`: Spark Connect with --remote, else
    local_session(--master) (the executors run this interpreter by default)."""
    try:
        from topicmatch.spark import local_session, remote_session
    except ImportError as e:
        raise CLIError(str(e)) from None
    remote = getattr(args, "remote", None)
    if remote:
        try:
            return remote_session(remote, app_name=f"topicmatch {args.cmd}")
        except ImportError as e:
            raise CLIError(str(e)) from None
        except ValueError as e:
            raise CLIError(str(e)) from None
    check_master(args.master)
    level = "WARN" if args.verbose else "ERROR"
    try:
        return local_session(args.master, app_name=f"topicmatch {args.cmd}", log_level=level)
    except spark_errors() as e:
        raise CLIError(f"Spark did not start on {args.master}: {first_line(e)}") from None


def check_master(master):
    """A master URL Spark accepts (before the JVM: Spark's own refusal is a
    stack trace after its start)."""
    if master in ("local", "yarn") or master.startswith(("local[", "spark://", "k8s://")):
        return
    raise CLIError(f"--master {master!r}: expected local, local[N], local[*], spark://HOST:PORT, "
                   "yarn or k8s://URL")


def where(args):
    return args.remote if getattr(args, "remote", None) else args.master


def precheck(args, err):
    """Everything that can be checked without a JVM, checked before one
    starts: the files exist, their formats, --schema, the outputs, and for
    local inputs their columns and types (a CSV's header, a JSON-lines
    file's first lines, a Parquet footer); a local subscriptions table is
    read once here (pyarrow), for its rows: none is an error, and filters
    of another dialect are warned about.  An image or a filter list is
    loaded here.  -> (SubsSource, the loaded Sublist or None, the dialect)."""
    check_readable(args.events, "events")
    src = subs_source(args)
    if not getattr(args, "remote", None):
        check_master(args.master)
    ev_fmt = format_of(args.events, args.format, "events", "--format")
    schema = check_schema_option(getattr(args, "schema", None), ev_fmt)
    _out_paths(args.out, args.overwrite)
    check_events(args.events, local_columns(args.events, ev_fmt, schema), args.subject_col,
                 args.key_col)
    if src.kind != "table":
        if args.shards not in ("auto", 1):
            raise CLIError(f"--shards {args.shards} splits a subscriptions table; {src.path} is "
                           "one index already (give the table, or --shards 1)")
        loaded = load(src, args.dialect, err)
        return src, loaded.sublist, loaded.dialect
    dialect = args.dialect or "nats"
    check_subscriptions(args.subs, local_columns(args.subs, src.fmt), src.columns)
    if is_local(src.path):
        rows = read_rows(src, dialect)
        check_not_empty(src, len(rows), empty_reason(src))
        warn_foreign(rows, dialect, src, err)
    return src, None, dialect


def cmd_fanout(args):
    err = Stderr(sys.stderr)
    src, sublist, dialect = precheck(args, err)
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
            subs_format=src.fmt, dialect=dialect, subject_col=args.subject_col,
            key_col=args.key_col, queues=args.queues, overwrite=args.overwrite,
            master=where(args), progress=getattr(args, "progress", 2.0),
            ship=getattr(args, "ship", "auto"), shards=getattr(args, "shards", "auto"),
            dedupe=getattr(args, "dedupe", False), rejects=rejects,
            schema=getattr(args, "schema", None), err_stream=err, subs_columns=src.columns,
            sublist=sublist, allow_empty=src.allow_empty)
    finally:
        if rejects is not None:
            rejects.close()
    return EXIT_REJECTED if counts.rejected else 0
