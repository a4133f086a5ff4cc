"""Fan events out to subscription ids on Spark (DESIGN.md section 4; docs/spark.md).

    >>> from fastsub.spark import fanout, fanout_with_rejects
    >>> deliveries = fanout(events, subs)                 # one row per (event, sub_id)
    >>> r = fanout_with_rejects(events, subs)             # deliveries + rejected + counts
    >>> r.rejected.show()                                 # the events' columns + `error`
    >>> r.counts()                                        # events = delivered + unmatched + rejected

How it runs.  The subscriptions table is collected once on the driver and
built into one `Sublist`; its `to_bytes()` image is shipped to the executors
by broadcast (or, above `BROADCAST_MAX_BYTES`, as a file through
`SparkContext.addFile`), under an id chosen on the driver (a uuid).  Each
Python worker process loads the image the first time a task needs it and
keeps the `Sublist` in a module-level cache keyed by that id, so later tasks
and batches on the same worker reuse it.  The matching is a scalar iterator
`arrow_udf`: only the subject column (and the key column, if any) crosses
from the JVM to Python, as Arrow; `Sublist.match_many` reads the Arrow string
buffers in place and its `BatchResult.to_arrow()` list column goes back as
is.  The other event columns stay in the JVM, which also does the explode.

Rejects.  A null or invalid subject never raises and never disappears: the
per-event frame carries a null `sub_ids` for it; `fanout()` leaves such
events out of the deliveries, and `fanout_with_rejects()` returns them in
`.rejected` with an `error` column saying why ("null subject", "empty token
(at byte 2)", ...).

This module imports PySpark; `import fastsub` does not import this module.
"""
import atexit
import collections
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from typing import Iterator, NamedTuple, Optional, Tuple

try:
    import pyarrow as pa
    import pyspark  # noqa: F401  (the check that PySpark is installed)
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"fastsub.spark needs PySpark 4 and pyarrow ({e}); install them with: "
        "pip install 'fastsub[spark]'") from e

from fastsub import FastsubError, InvalidSubjectError, Sublist

__all__ = [
    "fanout", "fanout_with_rejects", "FanoutResult", "FanoutCounts",
    "FanoutInputError", "build_index", "local_session", "BROADCAST_MAX_BYTES",
]

#: Serialized indexes up to this size travel as a broadcast variable; larger
#: ones as a file (SparkContext.addFile).  A broadcast is held in the driver's
#: and every executor's JVM block manager on top of the Python copy, and goes
#: through the driver's memory in one piece; a file is fetched once per
#: executor to local disk and read straight into the Python worker.  64 MiB
#: is about 500k-1M subscriptions.
BROADCAST_MAX_BYTES = 64 << 20

#: Set on the executors (in local mode: in the driver's environment before the
#: session starts) to a file path, and every worker-side index load appends
#: "<index id> <pid>" to it: a way to see that each Python worker process
#: loads an index once, not once per task.
LOAD_LOG_ENV = "FASTSUB_SPARK_LOAD_LOG"

_QUEUE_MODES = ("pick", "all", "none")
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)


class FanoutInputError(FastsubError, ValueError):
    """The events or subscriptions table does not have the columns/types fanout needs."""


# --------------------------------------------------------------------------
# driver side: the index
# --------------------------------------------------------------------------

def _col(name: str) -> Column:
    """A top-level column by its exact name (dots and backticks included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _field(df: DataFrame, name: str, what: str):
    for f in df.schema.fields:
        if f.name == name:
            return f
    cols = ", ".join(df.columns) or "(none)"
    raise FanoutInputError(f"{what} has no column {name!r} (columns: {cols})")


def build_index(subscriptions: DataFrame, dialect: str = "nats") -> Sublist:
    """build_index(subscriptions, dialect="nats") -> Sublist

    Collect `subscriptions` (`sub_id` integer, `filter` string, optional
    `queue` string) to the driver and build the index.  A bad row raises one
    error naming the row (1-based, in the table's order), its sub_id and
    filter: InvalidSubjectError for an invalid filter or queue name,
    FanoutInputError for a null sub_id/filter or a wrong column type."""
    if dialect not in ("nats", "mqtt"):
        raise ValueError(f"unknown dialect {dialect!r}: expected 'nats' or 'mqtt'")
    f_id = _field(subscriptions, "sub_id", "the subscriptions table")
    f_filter = _field(subscriptions, "filter", "the subscriptions table")
    if not isinstance(f_id.dataType, _INTEGRAL):
        raise FanoutInputError(
            f"subscriptions column 'sub_id' has type {f_id.dataType.simpleString()}, "
            "expected an integer type (bigint)")
    if not isinstance(f_filter.dataType, T.StringType):
        raise FanoutInputError(
            f"subscriptions column 'filter' has type {f_filter.dataType.simpleString()}, "
            "expected string")
    has_queue = "queue" in subscriptions.columns
    if has_queue:
        f_queue = _field(subscriptions, "queue", "the subscriptions table")
        if not isinstance(f_queue.dataType, T.StringType):
            raise FanoutInputError(
                f"subscriptions column 'queue' has type {f_queue.dataType.simpleString()}, "
                "expected string (null for a plain subscription)")
    cols = [_col("sub_id").cast("long"), _col("filter")] + ([_col("queue")] if has_queue else [])
    table = subscriptions.select(*cols).toArrow()
    ids = table.column(0).to_pylist()
    filters = table.column(1).to_pylist()
    queues = table.column(2).to_pylist() if has_queue else None
    for i, (sid, f) in enumerate(zip(ids, filters)):
        if sid is None or f is None:
            what = "sub_id" if sid is None else "filter"
            raise FanoutInputError(
                f"subscriptions row {i + 1} (sub_id={sid}, filter={f!r}): null {what}")
    if queues is not None and all(q is None for q in queues):
        queues = None
    sl = Sublist(dialect)
    try:
        sl.insert_many(filters, ids, queues)
    except InvalidSubjectError as e:
        m = re.match(r"item (\d+): (.*)", str(e), re.S)
        if not m:
            raise
        i = int(m.group(1))
        q = f", queue={queues[i]!r}" if queues is not None and queues[i] is not None else ""
        raise InvalidSubjectError(
            f"subscriptions row {i + 1} (sub_id={ids[i]}{q}): {m.group(2)}",
            getattr(e, "subject", None), getattr(e, "reason", None),
            getattr(e, "position", None)) from None
    return sl


class _IndexHandle:
    """What a task needs to find the index: pickled into the UDF's closure.
    Small: the image itself travels by broadcast or by file."""

    def __init__(self, index_id, dialect, nbytes, nsubs, broadcast=None, filename=None):
        self.index_id, self.dialect = index_id, dialect
        self.nbytes, self.nsubs = nbytes, nsubs
        self.broadcast, self.filename = broadcast, filename

    @property
    def shipped_by(self):
        return "broadcast" if self.broadcast is not None else "file"

    def __repr__(self):
        return (f"<fastsub index {self.index_id}: {self.nsubs} subscriptions, "
                f"{self.nbytes} bytes, by {self.shipped_by}>")


_TMPDIRS = []


def _cleanup_tmpdirs():
    for d in _TMPDIRS:
        shutil.rmtree(d, ignore_errors=True)


def _ship(spark: SparkSession, sl: Sublist, ship: str) -> _IndexHandle:
    data = sl.to_bytes()
    index_id = uuid.uuid4().hex
    if ship == "auto":
        ship = "broadcast" if len(data) <= BROADCAST_MAX_BYTES else "file"
    if ship == "broadcast":
        bc = spark.sparkContext.broadcast(data)
        return _IndexHandle(index_id, sl.dialect, len(data), len(sl), broadcast=bc)
    if ship != "file":
        raise ValueError(f"ship must be 'auto', 'broadcast' or 'file', not {ship!r}")
    if not _TMPDIRS:
        atexit.register(_cleanup_tmpdirs)
    d = tempfile.mkdtemp(prefix="fastsub-index-")
    _TMPDIRS.append(d)
    name = f"fastsub-index-{index_id}.bin"
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    spark.sparkContext.addFile(path)
    return _IndexHandle(index_id, sl.dialect, len(data), len(sl), filename=name)


# --------------------------------------------------------------------------
# worker side: one load per Python worker process, then a cache hit
# --------------------------------------------------------------------------

_CACHE_MAX = 4                            # indexes kept per worker (LRU)
_cache = collections.OrderedDict()        # index id -> Sublist
_cache_lock = threading.Lock()


def _load(handle: _IndexHandle) -> Sublist:
    """The index of this handle, loaded once per process.  Called once per task."""
    with _cache_lock:
        sl = _cache.get(handle.index_id)
        if sl is not None:
            _cache.move_to_end(handle.index_id)
            return sl
        if handle.broadcast is not None:
            data = handle.broadcast.value
        else:
            from pyspark import SparkFiles
            with open(SparkFiles.get(handle.filename), "rb") as f:
                data = f.read()
        sl = Sublist.from_bytes(data)
        del data
        _cache[handle.index_id] = sl
        while len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
        log = os.environ.get(LOAD_LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(f"{handle.index_id} {os.getpid()}\n")
        return sl


def _match_batches(handle, queues, with_key, batches):
    """The body of the matching UDF: Arrow string arrays in, Arrow list arrays out."""
    sl = _load(handle)
    for item in batches:
        if with_key:
            subjects, keys = item
            yield sl.match_many(subjects, keys=keys, queues=queues).to_arrow()
        else:
            yield sl.match_many(item, queues=queues).to_arrow()


def _reason(subject, checker: Sublist) -> str:
    """Why a subject was rejected, for the `error` column."""
    if subject is None:
        return "null subject"
    try:
        checker.match(subject)
    except InvalidSubjectError as e:
        reason = getattr(e, "reason", None) or str(e)
        pos = getattr(e, "position", None)
        return reason if pos is None else f"{reason} (at byte {pos})"
    except (TypeError, ValueError) as e:  # pragma: no cover - defensive
        return str(e)
    return "invalid subject"  # pragma: no cover - match_many and match disagree


def _reasons(dialect, subjects):
    checker = Sublist(dialect)
    return pa.array([_reason(s, checker) for s in subjects.to_pylist()], pa.string())


def _match_udf(handle: _IndexHandle, queues: str, with_key: bool):
    if with_key:
        def fastsub_match(batches: Iterator[Tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
            return _match_batches(handle, queues, True, batches)
    else:
        def fastsub_match(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return _match_batches(handle, queues, False, batches)
    # Non-deterministic to the optimizer only: it must not copy the call into
    # the filter it infers for explode (that would match every event twice)
    # nor push filters through it.  The output itself is deterministic.
    return F.arrow_udf(fastsub_match, "array<bigint>").asNondeterministic()


def _reason_udf(dialect: str):
    def fastsub_reject_reason(subjects: pa.Array) -> pa.Array:
        return _reasons(dialect, subjects)
    return F.arrow_udf(fastsub_reject_reason, "string").asNondeterministic()


# --------------------------------------------------------------------------
# the API
# --------------------------------------------------------------------------

class FanoutCounts(NamedTuple):
    """events == delivered + unmatched + rejected; deliveries = rows of the exploded output."""
    events: int
    delivered: int
    unmatched: int
    rejected: int
    deliveries: int

    @property
    def reconciles(self) -> bool:
        return self.events == self.delivered + self.unmatched + self.rejected


class FanoutResult:
    """What fanout_with_rejects() returns.

    per_event   one row per input event: its columns + `sub_ids` array<bigint>
                (empty when nothing matched, null when the subject was rejected).
                Every other frame here is derived from it; persist() it when
                you will use more than one of them.
    deliveries  what fanout() returns: explode=True, one row per (event, sub_id)
                with the event's columns + `sub_id`; explode=False, one row per
                accepted event (matched or not) with `sub_ids`.
    rejected    the events with a null or invalid subject: their columns +
                `error` (string).
    unmatched   the accepted events no subscription matched: their columns.
    index       the shipped index: .index_id, .nsubs, .nbytes, .shipped_by.

    Unpacks as a pair: deliveries, rejected = fanout_with_rejects(...).
    """

    def __init__(self, per_event, deliveries, rejected, unmatched, index):
        self.per_event, self.deliveries = per_event, deliveries
        self.rejected, self.unmatched, self.index = rejected, unmatched, index

    def counts(self) -> FanoutCounts:
        """One Spark job over per_event: events, delivered, unmatched, rejected, deliveries."""
        ids = F.col("sub_ids")
        n = F.size(ids)
        row = self.per_event.agg(
            F.count(F.lit(1)).alias("events"),
            F.count_if(ids.isNotNull() & (n > 0)).alias("delivered"),
            F.count_if(ids.isNotNull() & (n == 0)).alias("unmatched"),
            F.count_if(ids.isNull()).alias("rejected"),
            F.coalesce(F.sum(F.when(ids.isNotNull(), n)), F.lit(0)).alias("deliveries"),
        ).first()
        return FanoutCounts(*(int(v) for v in row))

    def persist(self, storage_level=None) -> "FanoutResult":
        """Persist per_event (MEMORY_AND_DISK by default), so deliveries, rejected
        and counts() share one matching pass.  Returns self."""
        from pyspark import StorageLevel
        self.per_event.persist(storage_level or StorageLevel.MEMORY_AND_DISK)
        return self

    def unpersist(self) -> "FanoutResult":
        self.per_event.unpersist()
        return self

    def __iter__(self):  # deliveries, rejected = fanout_with_rejects(...)
        return iter((self.deliveries, self.rejected))

    def __repr__(self):
        return f"<FanoutResult {self.index!r}>"


def fanout_with_rejects(events: DataFrame, subscriptions: DataFrame, subject_col: str = "subject",
                        key_col: Optional[str] = None, dialect: str = "nats",
                        queues: str = "pick", explode: bool = True, *,
                        ship: str = "auto") -> FanoutResult:
    """fanout_with_rejects(events, subscriptions, subject_col="subject", key_col=None,
    dialect="nats", queues="pick", explode=True, *, ship="auto") -> FanoutResult

    Like fanout(), and also the rejected events (with an `error` column), the
    unmatched ones, the per-event frame and counts().  See FanoutResult."""
    if queues not in _QUEUE_MODES:
        raise ValueError(f"queues must be 'pick', 'all' or 'none', not {queues!r}")
    if not isinstance(events, DataFrame) or not isinstance(subscriptions, DataFrame):
        raise TypeError("events and subscriptions must be pyspark.sql.DataFrame")
    f_subject = _field(events, subject_col, "the events table")
    if not isinstance(f_subject.dataType, T.StringType):
        raise FanoutInputError(
            f"events column {subject_col!r} has type {f_subject.dataType.simpleString()}, "
            "expected string")
    if key_col is not None:
        f_key = _field(events, key_col, "the events table")
        if not isinstance(f_key.dataType, (T.AtomicType,)):
            raise FanoutInputError(
                f"events column {key_col!r} has type {f_key.dataType.simpleString()}, "
                "expected a string, number, date or timestamp key")
    added = ["sub_ids", "error"] + (["sub_id"] if explode else [])
    clash = [c for c in added if c in events.columns]
    if clash:
        raise FanoutInputError(
            f"the events table already has column(s) {', '.join(map(repr, clash))}, which "
            "fanout adds; rename them first")

    spark = events.sparkSession
    sl = build_index(subscriptions, dialect)
    handle = _ship(spark, sl, ship)
    del sl

    subject = _col(subject_col)
    if key_col is None:
        matched = _match_udf(handle, queues, False)(subject)
    else:
        # A null key falls back to the subject, as if no key had been given.
        key = F.coalesce(_col(key_col).cast("string"), subject)
        matched = _match_udf(handle, queues, True)(subject, key)
    per_event = events.withColumn("sub_ids", matched)

    event_cols = [_col(c) for c in events.columns]
    ids = F.col("sub_ids")
    if explode:
        deliveries = per_event.select(*event_cols, F.explode(ids).alias("sub_id"))
    else:
        deliveries = per_event.where(ids.isNotNull())
    rejected = per_event.where(ids.isNull()).select(
        *event_cols, _reason_udf(dialect)(subject).alias("error"))
    unmatched = per_event.where(ids.isNotNull() & (F.size(ids) == 0)).select(*event_cols)
    return FanoutResult(per_event, deliveries, rejected, unmatched, handle)


def fanout(events: DataFrame, subscriptions: DataFrame, subject_col: str = "subject",
           key_col: Optional[str] = None, dialect: str = "nats", queues: str = "pick",
           explode: bool = True, *, ship: str = "auto") -> DataFrame:
    """fanout(events, subscriptions, subject_col="subject", key_col=None, dialect="nats",
    queues="pick", explode=True, *, ship="auto") -> DataFrame

    The delivery list of `events` against `subscriptions` (`sub_id` long,
    `filter` string, `queue` string or null).

    explode=True   one row per (event, sub_id): the event's columns + `sub_id` bigint.
    explode=False  one row per accepted event: its columns + `sub_ids` array<bigint>
                   (empty when no subscription matched: countable).
    queues         "pick": plain subscriptions + one member per matching queue
                   group, picked from a hash of (key or subject, group), so a rerun
                   or a retried task gives the same rows; "all": every member;
                   "none": plain subscriptions only.
    key_col        the column the queue pick hashes instead of the subject (e.g. a
                   device id, for sticky picks); cast to string; null -> subject.
    ship           "auto" (broadcast up to BROADCAST_MAX_BYTES, else a file),
                   "broadcast" or "file".

    Events with a null or invalid subject are not in the deliveries; get them,
    with the reason, from fanout_with_rejects(...).rejected.  An invalid
    filter in `subscriptions` raises InvalidSubjectError naming its row, on
    the driver, before any event is read.  Needs classic Spark (a
    SparkContext: broadcast/addFile), not Spark Connect."""
    return fanout_with_rejects(events, subscriptions, subject_col, key_col, dialect,
                               queues, explode, ship=ship).deliveries


# --------------------------------------------------------------------------
# a quiet local session (the command line, the tests, the benchmark)
# --------------------------------------------------------------------------

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
# PySpark's gateway initializes Spark's logging as a shell does: unless its own
# logger has a level set here, Spark prints "Setting default log level to WARN".
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""

# A failed task is reported by the exception its action raises; the per-task
# stack traces Spark logs at ERROR on the way are shown only at WARN and below.
_TASK_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.util.Utils",
                 "org.apache.spark.sql.execution.datasources.FileFormatWriter",
                 "org.apache.spark.sql.execution.datasources.FileFormatDataWriter",
                 "org.apache.spark.api.python.PythonRunner")


def _log4j_file(level: str) -> str:
    d = os.path.join(tempfile.gettempdir(), f"fastsub-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"log4j2-{level.lower()}.properties")
    text = _LOG4J.format(level=level.lower())
    if level.upper() in ("ERROR", "FATAL", "OFF"):
        for i, name in enumerate(_TASK_LOGGERS):
            text += f"logger.task{i}.name = {name}\nlogger.task{i}.level = off\n"
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def local_session(master: str = "local[*]", *, app_name: str = "fastsub",
                  log_level: str = "ERROR", shuffle_partitions: Optional[int] = None,
                  conf: Optional[dict] = None) -> SparkSession:
    """A SparkSession set up to be quiet and quick: Spark's own logging at
    `log_level` from the first line (not just after start-up), no progress
    bars, no UI for a local master; for a local master the workers run this
    interpreter (PYSPARK_PYTHON = sys.executable), the driver binds to
    127.0.0.1 and `spark.sql.shuffle.partitions` is small (2 x cores).  For a
    cluster master, PYSPARK_PYTHON is left to the cluster's configuration.
    Returns the existing session if one is already running."""
    local = is_local_master(master)
    b = SparkSession.builder.master(master).appName(app_name)
    props = _log4j_file(log_level)
    opts = f"-Dlog4j2.configurationFile=file:{props} -Dlog4j.configurationFile=file:{props}"
    b = (b.config("spark.driver.extraJavaOptions", opts)
          .config("spark.ui.showConsoleProgress", "false")
          .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if local:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if shuffle_partitions is None:
            m = re.match(r"local\[(\d+)", master)
            cores = int(m.group(1)) if m else (os.cpu_count() or 2)
            shuffle_partitions = max(2, 2 * cores)
        b = (b.config("spark.pyspark.python", sys.executable)
              .config("spark.ui.enabled", "false")
              .config("spark.driver.host", "127.0.0.1")
              .config("spark.driver.bindAddress", "127.0.0.1"))
    if shuffle_partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for k, v in (conf or {}).items():
        b = b.config(k, str(v))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    return spark
