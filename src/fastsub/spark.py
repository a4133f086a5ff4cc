"""Fan events out to subscription ids on Spark (docs/spark.md).

    >>> from fastsub.spark import fanout, fanout_with_rejects, share_index
    >>> deliveries = fanout(events, subs)                 # one row per (event, sub_id)
    >>> r = fanout_with_rejects(events, subs)             # deliveries + rejected + counts
    >>> r.rejected.show()                                 # the events' columns + `error`
    >>> r.counts()                                        # events = delivered + unmatched + rejected
    >>> idx = share_index(spark, sublist)                 # your own code: idx.get() on executors

How it runs.  The subscriptions table is collected once on the driver and
built into one `Sublist`; `share_index` ships its `to_bytes()` image to the
executors under an id chosen on the driver (a uuid): by broadcast or, above
`BROADCAST_MAX_BYTES`, as a file (`SparkContext.addFile`) on classic Spark;
on Spark Connect (no SparkContext) inside the UDF itself up to
`INLINE_MAX_BYTES`, else as an artifact (`spark.addArtifacts(file=True)`).
Each Python worker process loads the image the first time a task needs it
and keeps the `Sublist` in a module-level cache keyed by that id
(fastsub._spark_ship), so later tasks and batches on the same worker reuse
it.  The index built from a subscriptions DataFrame is kept for later calls
on the same DataFrame object.  The matching is a scalar iterator
`arrow_udf`: only the subject column (and the key column, if any) crosses
from the JVM to Python, as Arrow; `Sublist.match_many` reads the Arrow
string buffers in place and its `BatchResult.to_arrow()` list column goes
back as is.  The other event columns stay in the JVM, which also does the
explode.

Rejects.  A null or invalid subject never raises and never disappears: the
per-event frame carries a null `sub_ids` for it; `fanout()` leaves such
events out of the deliveries, and `fanout_with_rejects()` returns them in
`.rejected` with an `error` column saying why ("null subject", "empty token
(at byte 2)", ...).

Streams.  `fanout_stream` runs the fan-out per micro-batch (foreachBatch),
writes deliveries, rejected and counts per batch idempotently, and re-reads
the subscriptions between micro-batches.

This module imports PySpark; `import fastsub` does not import this module.
"""
import atexit
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
import weakref
from typing import Callable, Iterator, NamedTuple, Optional, Tuple, Union

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
from fastsub._spark_ship import (LOAD_LOG_ENV, SharedIndex, fork_safe_lock, invalid_reasons,
                                 match_batches, reject_reasons)
from fastsub._spark_shard import (AUTO_SHARD_MIN_SUBS, ShardPlan, _parallelism, _salts,
                                  check_shards, plan_shards, sharded_per_event)

__all__ = [
    "fanout", "fanout_with_rejects", "fanout_stream", "share_index", "SharedIndex",
    "FanoutResult", "FanoutCounts", "FanoutInputError", "ExecutorEnvironmentError",
    "build_index", "local_session", "remote_session", "is_connect", "check_executors",
    "BROADCAST_MAX_BYTES", "INLINE_MAX_BYTES", "LOAD_LOG_ENV",
    "ShardPlan", "plan_shards", "IndexTooLargeError", "AUTO_SHARD_MIN_SUBS",
]

#: Classic Spark: serialized indexes up to this size travel as a broadcast
#: variable; larger ones as a file (SparkContext.addFile).  A broadcast is
#: held in the driver's and every executor's JVM block manager on top of the
#: Python copy, and goes through the driver's memory in one piece; a file is
#: fetched once per executor to local disk and read straight into the Python
#: worker.  64 MiB is about 500k-1M subscriptions.
BROADCAST_MAX_BYTES = 64 << 20

#: Spark Connect: serialized indexes up to this size travel inside the UDF's
#: pickled closure (part of the plan the client sends; no extra round trip);
#: larger ones as an artifact file.  The closure goes with every task, so
#: this stays small: 1 MiB is about 30k subscriptions of `light`'s shape.
INLINE_MAX_BYTES = 1 << 20

_QUEUE_MODES = ("pick", "all", "none")
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)


class FanoutInputError(FastsubError, ValueError):
    """The events or subscriptions table does not have the columns/types fanout needs."""


class ExecutorEnvironmentError(FastsubError, RuntimeError):
    """The executors' Python cannot run fastsub (wrong interpreter, missing packages)."""


class IndexTooLargeError(FastsubError, RuntimeError):
    """The unsharded fan-out could not bring the subscriptions to the driver
    (spark.driver.maxResultSize, driver memory): shard them (shards=N)."""


def is_connect(spark) -> bool:
    """True for a Spark Connect session (sc://...), which has no SparkContext."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _session_key(spark):
    """What a shipped index is valid for: the SparkContext (classic; the
    sessions of foreachBatch are new objects over the same one) or the
    Connect session id."""
    if is_connect(spark):
        return ("connect", getattr(spark, "session_id", None) or id(spark))
    return ("classic", id(spark.sparkContext))


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


def _check_dialect(dialect):
    if dialect not in ("nats", "mqtt", "amqp"):
        raise ValueError(f"unknown dialect {dialect!r}: expected 'nats', 'mqtt' or 'amqp'")


def check_subscriptions_schema(subscriptions: DataFrame, string_ids: bool = False) -> bool:
    """Raise FanoutInputError on a missing column or a wrong type (string sub
    ids allowed with string_ids=True); -> whether there is a queue column."""
    f_id = _field(subscriptions, "sub_id", "the subscriptions table")
    f_filter = _field(subscriptions, "filter", "the subscriptions table")
    if not isinstance(f_id.dataType, _INTEGRAL) and not (
            string_ids and isinstance(f_id.dataType, T.StringType)):
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
        # A column of nulls only (createDataFrame's type for [None] * n) is void:
        # every subscription is plain.
        if not isinstance(f_queue.dataType, (T.StringType, T.NullType)):
            raise FanoutInputError(
                f"subscriptions column 'queue' has type {f_queue.dataType.simpleString()}, "
                "expected string (null for a plain subscription)")
    return has_queue


def collect_subscriptions(subscriptions: DataFrame) -> pa.Table:
    """The subscriptions table on the driver as Arrow (sub_id int64, filter,
    queue if present): one Spark job.  Raises FanoutInputError on a missing
    column or a wrong type."""
    has_queue = check_subscriptions_schema(subscriptions)
    cols = [_col("sub_id").cast("long"), _col("filter")] + (
        [_col("queue").cast("string").alias("queue")] if has_queue else [])
    return subscriptions.select(*cols).toArrow()


def index_from_arrow(table: pa.Table, dialect: str = "nats") -> Sublist:
    """A Sublist from an Arrow table (sub_id, filter[, queue]) as collect_subscriptions
    returns it.  A bad row raises one error naming it (1-based)."""
    import pyarrow.compute as pc
    _check_dialect(dialect)
    ids_a, filters_a = table.column(0), table.column(1)
    queues_a = table.column(2) if table.num_columns > 2 else None
    if ids_a.null_count or filters_a.null_count:
        bad = pc.or_(pc.is_null(ids_a), pc.is_null(filters_a))
        i = pc.index(bad, True).as_py()
        sid, f = ids_a[i].as_py(), filters_a[i].as_py()
        what = "sub_id" if sid is None else "filter"
        raise FanoutInputError(
            f"subscriptions row {i + 1} (sub_id={sid}, filter={f!r}): null {what}")
    # insert_many reads the Arrow columns in place: no Python object per row.
    queues = queues_a if queues_a is not None and queues_a.null_count < len(queues_a) else None
    sl = Sublist(dialect)
    try:
        sl.insert_many(filters_a, ids_a, queues)
    except InvalidSubjectError as e:
        m = re.match(r"item (\d+): (.*)", str(e), re.S)
        if not m:
            raise
        i = int(m.group(1))
        qi = queues[i].as_py() if queues is not None else None
        q = f", queue={qi!r}" if qi is not None else ""
        raise InvalidSubjectError(
            f"subscriptions row {i + 1} (sub_id={ids_a[i].as_py()}{q}): {m.group(2)}",
            getattr(e, "subject", None), getattr(e, "reason", None),
            getattr(e, "position", None)) from None
    return sl


def build_index(subscriptions: DataFrame, dialect: str = "nats") -> Sublist:
    """build_index(subscriptions, dialect="nats") -> Sublist

    Collect `subscriptions` (`sub_id` integer, `filter` string, optional
    `queue` string) to the driver and build the index.  A bad row raises one
    error naming the row (1-based, in the table's order), its sub_id and
    filter: InvalidSubjectError for an invalid filter or queue name,
    FanoutInputError for a null sub_id/filter or a wrong column type."""
    _check_dialect(dialect)
    try:
        table = collect_subscriptions(subscriptions)
    except FanoutInputError:
        raise
    except Exception as e:  # noqa: BLE001 - only a driver-capacity failure is translated
        text = str(e)
        if not re.search(r"maxResultSize|OutOfMemoryError|Java heap space|GC overhead", text):
            raise
        why = next((ln.strip() for ln in text.splitlines()
                    if re.search(r"maxResultSize|OutOfMemory|heap space|GC overhead", ln)), text[:300])
        raise IndexTooLargeError(
            f"the subscriptions do not fit through the driver ({why[:300]}); an unsharded "
            "fan-out collects them all: pass shards=N (or shards='auto') to fanout / "
            "fanout_with_rejects / fanout_stream, or --shards to `fastsub fanout`, to build "
            "the index shard by shard on the executors") from None
    return index_from_arrow(table, dialect)


_TMPDIR = []


def _tmpdir():
    if not _TMPDIR:
        _TMPDIR.append(tempfile.mkdtemp(prefix="fastsub-index-"))
        atexit.register(shutil.rmtree, _TMPDIR[0], True)
    return _TMPDIR[0]


def _write_image(data: bytes, name: str) -> str:
    path = os.path.join(_tmpdir(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def share_index(spark: SparkSession, sublist: Sublist, *, ship: str = "auto") -> SharedIndex:
    """share_index(spark, sublist, *, ship="auto") -> SharedIndex

    Ship `sublist` to the executors once; `.get()` inside any function Spark
    runs there returns it, loaded once per Python worker process.

    ship="auto" picks by session kind and size:
        classic Spark   broadcast up to BROADCAST_MAX_BYTES, else "file"
        Spark Connect   "inline" up to INLINE_MAX_BYTES, else "artifact"
    or name one: "broadcast" and "file" need classic Spark, "artifact" needs
    Spark Connect ("file" on Connect means "artifact"), "inline" works on both.

    The Sublist is serialized now: later changes to it are not shipped (share
    it again).  Call .release() when done to free a broadcast (or an
    artifact's local copy) early; a file stays until the driver exits."""
    if not isinstance(sublist, Sublist):
        raise TypeError(f"share_index needs a fastsub.Sublist, not {type(sublist).__name__}")
    connect = is_connect(spark)
    data = sublist.to_bytes()
    n = len(data)
    if ship == "auto":
        if connect:
            ship = "inline" if n <= INLINE_MAX_BYTES else "artifact"
        else:
            ship = "broadcast" if n <= BROADCAST_MAX_BYTES else "file"
    elif connect and ship == "file":
        ship = "artifact"
    if ship not in ("broadcast", "file", "artifact", "inline"):
        raise ValueError(f"ship must be 'auto', 'broadcast', 'file', 'artifact' or 'inline', not {ship!r}")
    if connect and ship == "broadcast":
        raise ValueError("ship='broadcast' needs classic Spark (a SparkContext); on Spark Connect "
                         "use 'inline' or 'artifact' (or 'auto')")
    if not connect and ship == "artifact":
        raise ValueError("ship='artifact' is for Spark Connect sessions; on classic Spark "
                         "use 'broadcast' or 'file' (or 'auto')")
    index_id = uuid.uuid4().hex
    common = dict(index_id=index_id, dialect=sublist.dialect, nbytes=n, nsubs=len(sublist),
                  shipped_by=ship, sublist=sublist)
    if ship == "broadcast":
        return SharedIndex(broadcast=spark.sparkContext.broadcast(data), **common)
    if ship == "inline":
        return SharedIndex(data=data, **common)
    name = f"fastsub-index-{index_id}.bin"
    path = _write_image(data, name)
    del data
    if ship == "file":
        spark.sparkContext.addFile(path)
    else:
        spark.addArtifacts(path, file=True)
    return SharedIndex(filename=name, local_path=path, **common)


# What a fan-out learnt about a subscriptions DataFrame, kept for later calls
# on the same DataFrame object: id(df) -> (weakref(df), {key: value}); keys
# (session id, dialect, ship) -> its SharedIndex, (..., "plan", shards,
# depth) -> its ShardPlan, (..., "small") -> True when "auto" found it small.
_BUILT = {}
_BUILT_LOCK = fork_safe_lock()


def _forget(key):
    # Only the cache entry goes: plans built on the DataFrame may still run
    # with its index (the shipped file stays until the driver exits).
    with _BUILT_LOCK:
        _BUILT.pop(key, None)


def _index_for(spark, subscriptions, dialect, ship, reuse) -> SharedIndex:
    """DataFrame, Sublist or SharedIndex -> the SharedIndex a fan-out uses."""
    if isinstance(subscriptions, SharedIndex):
        if subscriptions.dialect != dialect:
            raise ValueError(f"the shared index is {subscriptions.dialect!r}, the fan-out "
                             f"asks for dialect={dialect!r}")
        return subscriptions
    if isinstance(subscriptions, Sublist):
        if subscriptions.dialect != dialect:
            raise ValueError(f"the Sublist is {subscriptions.dialect!r}, the fan-out "
                             f"asks for dialect={dialect!r}")
        return share_index(spark, subscriptions, ship=ship)
    if not isinstance(subscriptions, DataFrame):
        raise TypeError("subscriptions must be a pyspark.sql.DataFrame, a fastsub.Sublist "
                        f"or a SharedIndex, not {type(subscriptions).__name__}")
    key = (_session_key(spark), dialect, ship)
    idx = _reused(subscriptions, key) if reuse else None
    if idx is None:
        idx = share_index(spark, build_index(subscriptions, dialect), ship=ship)
        if reuse:
            _remember(subscriptions, key, idx)
    return idx


def _reused(subscriptions, key):
    """What an earlier fan-out kept for this DataFrame object under key, or None."""
    with _BUILT_LOCK:
        entry = _BUILT.get(id(subscriptions))
        if entry is not None and entry[0]() is subscriptions:
            return entry[1].get(key)
    return None


def _remember(subscriptions, key, value):
    with _BUILT_LOCK:
        entry = _BUILT.get(id(subscriptions))
        if entry is None or entry[0]() is not subscriptions:
            try:
                ref = weakref.ref(subscriptions, lambda _r, k=id(subscriptions): _forget(k))
            except TypeError:  # pragma: no cover - a DataFrame class without weakrefs
                return
            entry = _BUILT[id(subscriptions)] = (ref, {})
        entry[1][key] = value


# --------------------------------------------------------------------------
# executors: is their Python able to run fastsub?
# --------------------------------------------------------------------------

_CHECKED = weakref.WeakSet()


def _probe(batches):
    import pyarrow as pa_
    import fastsub as fs
    for _ in batches:
        pass
    yield pa_.RecordBatch.from_pydict({"python": [sys.executable],
                                       "fastsub": [fs.__file__]})


def check_executors(spark: SparkSession, *, force: bool = False) -> None:
    """Run one one-row task that imports fastsub and pyarrow on an executor;
    raise ExecutorEnvironmentError naming the fix when it cannot.  Done once
    per session (every fan-out calls it, on any master)."""
    if not force:
        try:
            if spark in _CHECKED:
                return
        except TypeError:  # pragma: no cover
            pass
    try:
        spark.range(1, numPartitions=1).mapInArrow(_probe, "python string, fastsub string").collect()
    except Exception as e:  # noqa: BLE001 - any failure here is the environment's
        text = str(e)
        m = re.search(r"(ModuleNotFoundError: [^\n]*|No module named [^\n]*|Cannot run program [^\n]*"
                      r"|ImportError: [^\n]*)", text)
        why = m.group(1).strip() if m else (text.strip().splitlines() or [type(e).__name__])[0][:300]
        if is_connect(spark):
            fix = ("the Spark Connect server's executors need a Python with fastsub, pyarrow and "
                   "numpy installed: set PYSPARK_PYTHON (or spark.pyspark.python) on the server")
        else:
            fix = (f"set PYSPARK_PYTHON to a Python that has fastsub, pyarrow and numpy on every "
                   f"executor (the driver runs {sys.executable}; fastsub.spark.local_session uses it "
                   "by default when PYSPARK_PYTHON is unset)")
        raise ExecutorEnvironmentError(f"the executors cannot run fastsub ({why}); {fix}") from None
    try:
        _CHECKED.add(spark)
    except TypeError:  # pragma: no cover
        pass


# --------------------------------------------------------------------------
# the UDFs
# --------------------------------------------------------------------------

def _match_udf(idx: SharedIndex, queues: str, with_key: bool, dedupe: bool = False):
    if with_key:
        def fastsub_match(batches: Iterator[Tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
            return match_batches(idx, queues, True, batches, dedupe)
    else:
        def fastsub_match(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return match_batches(idx, queues, False, batches, dedupe)
    # Non-deterministic to the optimizer only: it must not copy the call into
    # the filter it infers for explode (that would match every event twice)
    # nor push filters through it.  The output itself is deterministic.
    return F.arrow_udf(fastsub_match, "array<bigint>").asNondeterministic()


def _invalid_udf(dialect: str):
    def fastsub_invalid_reason(subjects: pa.Array) -> pa.Array:
        return invalid_reasons(dialect, subjects)
    return F.arrow_udf(fastsub_invalid_reason, "string").asNondeterministic()


def _reason_udf(dialect: str):
    def fastsub_reject_reason(subjects: pa.Array) -> pa.Array:
        return reject_reasons(dialect, subjects)
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


def _count_exprs():
    ids = F.col("sub_ids")
    n = F.size(ids)
    return [
        F.count(F.lit(1)).alias("events"),
        F.count_if(ids.isNotNull() & (n > 0)).alias("delivered"),
        F.count_if(ids.isNotNull() & (n == 0)).alias("unmatched"),
        F.count_if(ids.isNull()).alias("rejected"),
        F.coalesce(F.sum(F.when(ids.isNotNull(), n)), F.lit(0)).cast("long").alias("deliveries"),
    ]


def _is_persisted(df) -> bool:
    try:
        return bool(df.is_cached)
    except Exception:  # noqa: BLE001 - a session kind without the flag
        return False


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
    index       the SharedIndex used (.index_id, .nsubs, .nbytes, .shipped_by), or
                the ShardPlan of a sharded fan-out (.index_id, .nsubs, .explain()).

    Unpacks as a pair: deliveries, rejected = fanout_with_rejects(...).
    """

    def __init__(self, per_event, event_cols, subject_col, dialect, explode, index,
                 observation=None, events=None):
        self.per_event, self.index = per_event, index
        self._args = (event_cols, subject_col, dialect, explode)
        self._observation = observation
        self._events = events

    # The derived frames are made on first use: each costs the driver an
    # analysis (tens of ms), and fanout() needs only the deliveries.
    @functools.cached_property
    def deliveries(self) -> DataFrame:
        event_cols, _, _, explode = self._args
        ids = F.col("sub_ids")
        if explode:
            return self.per_event.select(*map(_col, event_cols), F.explode(ids).alias("sub_id"))
        return self.per_event.where(ids.isNotNull())

    @property
    def rejected(self) -> DataFrame:
        """From the persisted per_event when it is persisted; else from a pass
        over the subjects alone (a validity check, no index, no matching):
        cheaper than matching every event again."""
        event_cols, subject_col, dialect, _ = self._args
        if self._events is None or _is_persisted(self.per_event):
            return self.per_event.where(F.col("sub_ids").isNull()).select(
                *map(_col, event_cols), _reason_udf(dialect)(_col(subject_col)).alias("error"))
        err = _invalid_udf(dialect)(_col(subject_col))
        return self._events.select(*map(_col, event_cols), err.alias("error")) \
            .where(F.col("error").isNotNull())

    @functools.cached_property
    def unmatched(self) -> DataFrame:
        ids = F.col("sub_ids")
        return self.per_event.where(ids.isNotNull() & (F.size(ids) == 0)).select(
            *map(_col, self._args[0]))

    def counts(self) -> FanoutCounts:
        """One Spark job over per_event: events, delivered, unmatched, rejected, deliveries."""
        row = self.per_event.agg(*_count_exprs()).first()
        return FanoutCounts(*(int(v or 0) for v in row))

    def observe(self) -> "FanoutResult":
        """A FanoutResult whose per_event collects the counts while the first
        action over it runs (Spark's Observation): observed_counts() afterwards
        costs no job.  With persist(), several outputs share one matching pass
        and the counts come with the first."""
        from pyspark.sql import Observation
        obs = Observation(f"fastsub_{uuid.uuid4().hex[:12]}")
        return FanoutResult(self.per_event.observe(obs, *_count_exprs()), *self._args,
                            self.index, observation=obs, events=self._events)

    def observed_counts(self) -> FanoutCounts:
        """The counts observed during the first action over this result (see
        observe()); call it after that action (it waits for the action's end)."""
        if self._observation is None:
            raise RuntimeError("observed_counts() needs a result from .observe()")
        m = self._observation.get
        return FanoutCounts(*(int(m[k] or 0) for k in FanoutCounts._fields))

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


Subscriptions = Union[DataFrame, Sublist, SharedIndex]


def _plan_for(events, subscriptions, dialect, shards, depth, subject_col, reuse):
    """-> the ShardPlan of a sharded fan-out, or None for the broadcast path."""
    plan = None
    if isinstance(shards, ShardPlan):
        if not isinstance(subscriptions, DataFrame):
            raise ValueError("a ShardPlan shards a subscriptions DataFrame, not a "
                             f"{type(subscriptions).__name__}")
        plan = shards
    else:
        check_shards(shards)
        if shards == 1:
            return None
        if not isinstance(subscriptions, DataFrame):
            if shards == "auto":
                return None     # already one index on the driver: the broadcast path
            raise ValueError(
                f"shards={shards} needs the subscriptions as a DataFrame: a "
                f"{type(subscriptions).__name__} is one index already built on the driver, "
                "so it is shipped whole (shards=1 or 'auto')")
        if shards == "auto" and _small(subscriptions, dialect, reuse):
            return None
    if events.isStreaming:
        raise ValueError("a sharded fan-out of a streaming DataFrame runs per micro-batch: "
                         "use fanout_stream(..., shards=...)")
    if plan is None:
        spark = events.sparkSession
        key = (_session_key(spark), dialect, "plan", shards, depth)
        plan = _reused(subscriptions, key) if reuse else None
        if plan is None:
            plan = plan_shards(subscriptions, dialect, shards, depth)
            if reuse:
                _remember(subscriptions, key, plan)
        # The salting follows these events: a sample of them, per call.
        plan = dataclasses.replace(plan, salts=_salts(events, subject_col, dialect, plan,
                                                      _parallelism(spark)))
        logging.getLogger("fastsub.spark").info("%s", plan.explain())
    return plan


def _small(subscriptions: DataFrame, dialect: str, reuse: bool) -> bool:
    """shards="auto": are there at most AUTO_SHARD_MIN_SUBS subscriptions?  One count job."""
    key = (_session_key(subscriptions.sparkSession), dialect, "small")
    small = _reused(subscriptions, key) if reuse else None
    if small is None:
        small = subscriptions.count() <= AUTO_SHARD_MIN_SUBS
        if reuse:
            _remember(subscriptions, key, small)
    return small


def fanout_with_rejects(events: DataFrame, subscriptions: Subscriptions,
                        subject_col: str = "subject", key_col: Optional[str] = None,
                        dialect: str = "nats", queues: str = "pick", explode: bool = True, *,
                        ship: str = "auto", reuse_index: bool = True, shards="auto",
                        depth="auto", dedupe: bool = False) -> FanoutResult:
    """fanout_with_rejects(events, subscriptions, subject_col="subject", key_col=None,
    dialect="nats", queues="pick", explode=True, *, ship="auto", reuse_index=True,
    shards="auto", depth="auto", dedupe=False) -> FanoutResult

    Like fanout(), and also the rejected events (with an `error` column), the
    unmatched ones, the per-event frame and counts().  See FanoutResult."""
    if queues not in _QUEUE_MODES:
        raise ValueError(f"queues must be 'pick', 'all' or 'none', not {queues!r}")
    _check_dialect(dialect)
    if not isinstance(events, DataFrame):
        raise TypeError("events must be a pyspark.sql.DataFrame")
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
    # Once per session, local masters included: a session the user built from
    # a Python without pyarrow gets a clear error instead of a worker's stack.
    check_executors(spark)
    plan = _plan_for(events, subscriptions, dialect, shards, depth, subject_col, reuse_index)
    if plan is not None:
        per_event = sharded_per_event(events, subscriptions, plan, subject_col=subject_col,
                                      key_col=key_col, dialect=dialect, queues=queues,
                                      dedupe=bool(dedupe))
        return FanoutResult(per_event, list(events.columns), subject_col, dialect, explode, plan,
                            events=events)
    idx = _index_for(spark, subscriptions, dialect, ship, reuse_index)

    subject = _col(subject_col)
    if key_col is None:
        matched = _match_udf(idx, queues, False, bool(dedupe))(subject)
    else:
        # A null key falls back to the subject, as if no key had been given.
        key = F.coalesce(_col(key_col).cast("string"), subject)
        matched = _match_udf(idx, queues, True, bool(dedupe))(subject, key)
    per_event = events.withColumn("sub_ids", matched)
    return FanoutResult(per_event, list(events.columns), subject_col, dialect, explode, idx,
                        events=events)


def fanout(events: DataFrame, subscriptions: Subscriptions, subject_col: str = "subject",
           key_col: Optional[str] = None, dialect: str = "nats", queues: str = "pick",
           explode: bool = True, *, ship: str = "auto", reuse_index: bool = True,
           shards="auto", depth="auto", dedupe: bool = False) -> DataFrame:
    """fanout(events, subscriptions, subject_col="subject", key_col=None, dialect="nats",
    queues="pick", explode=True, *, ship="auto", reuse_index=True, shards="auto",
    depth="auto", dedupe=False) -> DataFrame

    The delivery list of `events` against `subscriptions`: a DataFrame
    (`sub_id` long, `filter` string, `queue` string or null), a Sublist, or
    a SharedIndex from share_index().

    explode=True   one row per (event, sub_id): the event's columns + `sub_id` bigint.
    explode=False  one row per accepted event: its columns + `sub_ids` array<bigint>
                   (empty when no subscription matched: countable).
    queues         "pick": plain subscriptions + one member per matching queue
                   group, picked from a hash of (key or subject, group), so a rerun
                   or a retried task gives the same rows; "all": every member;
                   "none": plain subscriptions only.
    key_col        the column the queue pick hashes instead of the subject (e.g. a
                   device id, for sticky picks); cast to string; null -> subject.
    ship           how the index travels (see share_index): "auto", "broadcast",
                   "file", "artifact" or "inline".
    reuse_index    a subscriptions DataFrame's index is built at its first fan-out
                   and reused by later calls with the same DataFrame object (and
                   session, dialect, ship); False builds it again.  Re-read the
                   table (a new DataFrame) to pick up changed subscriptions.
    shards         1: one index, built on the driver and shipped to every worker.
                   N > 1 or a ShardPlan: the sharded fan-out (docs/spark.md,
                   "Sharded"): both sides are partitioned by a route key, each
                   shard's index is built on an executor, nothing index-sized
                   passes through the driver.  "auto": sharded above
                   AUTO_SHARD_MIN_SUBS subscriptions (one count job), N chosen
                   from the count and the cores.  A Sublist or SharedIndex is
                   always shipped whole.  The rows are the same either way.
    depth          the sharded fan-out's route depth d (1-16), or "auto": the
                   depth that keeps the largest shard plus the replicated share
                   smallest (plan_shards(...).explain() shows the figures).
    dedupe         each sub_id at most once per event (Sublist.match_many's
                   dedupe): one delivery per subscriber with overlapping filters.

    Works on classic Spark (local or a cluster) and on Spark Connect, on batch
    and streaming DataFrames (see fanout_stream for rejects and counts per
    micro-batch).  Events with a null or invalid subject are not in the
    deliveries; get them, with the reason, from fanout_with_rejects(...).rejected.
    An invalid filter in `subscriptions` raises InvalidSubjectError naming its
    row, on the driver, before any event is read."""
    return fanout_with_rejects(events, subscriptions, subject_col, key_col, dialect,
                               queues, explode, ship=ship, reuse_index=reuse_index,
                               shards=shards, depth=depth, dedupe=dedupe).deliveries


# --------------------------------------------------------------------------
# Structured Streaming: one fan-out per micro-batch
# --------------------------------------------------------------------------

class _StreamIndex:
    """The index a stream uses, refreshed between micro-batches and recorded
    per batch id, so a micro-batch replayed after a restart uses the index
    its first attempt used (and writes the same rows)."""

    def __init__(self, subscriptions, dialect, ship, state_dir):
        self.source, self.dialect, self.ship = subscriptions, dialect, ship
        self.state_dir = state_dir
        os.makedirs(state_dir, exist_ok=True)
        self.digest = None          # of the subscriptions the current index holds
        self.idx = None
        self.session_id = None

    def resolve(self):
        """The subscriptions of this micro-batch: the source, or what it returns."""
        return self.source() if callable(self.source) else self.source

    def _current(self, src):
        """-> (digest, Sublist or None if unchanged)"""
        if isinstance(src, Sublist):
            if src.dialect != self.dialect:
                raise ValueError(f"the Sublist is {src.dialect!r}, the stream asks for {self.dialect!r}")
            data = src.to_bytes()
            digest = hashlib.blake2b(data, digest_size=16).hexdigest()
            return digest, (None if digest == self.digest else Sublist.from_bytes(data))
        if not isinstance(src, DataFrame):
            raise TypeError("subscriptions must be a DataFrame, a Sublist, or a callable "
                            f"returning one, not {type(src).__name__}")
        table = collect_subscriptions(src)
        h = hashlib.blake2b(digest_size=16)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        h.update(sink.getvalue())
        digest = h.hexdigest()
        return digest, (None if digest == self.digest else index_from_arrow(table, self.dialect))

    def _record(self, batch_id):
        return os.path.join(self.state_dir, f"batch-{batch_id}.json")

    def _image(self, digest):
        return os.path.join(self.state_dir, f"index-{digest}.bin")

    def for_batch(self, spark, batch_id, src) -> Tuple[SharedIndex, bool]:
        """-> (the SharedIndex of this micro-batch, whether it was rebuilt);
        src: what resolve() gave for it."""
        rec = self._record(batch_id)
        sl = None
        if os.path.exists(rec):                       # a replay: the recorded index
            with open(rec) as f:
                digest = json.load(f)["index"]
            if digest != self.digest:
                with open(self._image(digest), "rb") as f:
                    sl = Sublist.from_bytes(f.read())
        else:
            digest, sl = self._current(src)
            if sl is not None and not os.path.exists(self._image(digest)):
                _atomic_write(self._image(digest), sl.to_bytes())
            _atomic_write(rec, json.dumps({"batch_id": batch_id, "index": digest}).encode())
            self._prune(batch_id)
        rebuilt = sl is not None or self.idx is None or self.session_id != _session_key(spark)
        if rebuilt:
            if sl is None:
                with open(self._image(digest), "rb") as f:
                    sl = Sublist.from_bytes(f.read())
            if self.idx is not None:
                self.idx.release()
            self.idx = share_index(spark, sl, ship=self.ship)
            self.digest, self.session_id = digest, _session_key(spark)
        return self.idx, rebuilt

    def _prune(self, batch_id, keep=100):
        """Forget records (and index images no record names) older than `keep` batches."""
        names = os.listdir(self.state_dir)
        used = set()
        for name in names:
            m = re.fullmatch(r"batch-(\d+)\.json", name)
            if not m:
                continue
            path = os.path.join(self.state_dir, name)
            if int(m.group(1)) < batch_id - keep:
                os.remove(path)
                continue
            with open(path) as f:
                used.add(json.load(f)["index"])
        for name in names:
            m = re.fullmatch(r"index-([0-9a-f]+)\.bin", name)
            if m and m.group(1) not in used:
                os.remove(os.path.join(self.state_dir, name))


def _atomic_write(path, data: bytes):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fanout_stream(events: DataFrame, subscriptions, out: str, checkpoint: str, *,
                  subject_col: str = "subject", key_col: Optional[str] = None,
                  dialect: str = "nats", queues: str = "pick", explode: bool = True,
                  ship: str = "auto", trigger: Optional[dict] = None,
                  on_batch: Optional[Callable] = None, query_name: Optional[str] = None,
                  state_dir: Optional[str] = None, shards="auto", depth="auto",
                  dedupe: bool = False):
    """fanout_stream(events, subscriptions, out, checkpoint, *, subject_col="subject",
    key_col=None, dialect="nats", queues="pick", explode=True, ship="auto",
    trigger=None, on_batch=None, query_name=None, state_dir=None, shards="auto",
    depth="auto", dedupe=False) -> StreamingQuery

    Fan a streaming DataFrame out per micro-batch (foreachBatch) and write,
    for micro-batch N, Parquet directories

        out/deliveries/batch_id=N     as fanout()
        out/rejected/batch_id=N       as fanout_with_rejects().rejected
        out/counts/batch_id=N         one row: events, delivered, unmatched,
                                      rejected, deliveries, index_id, index_rebuilt

    Each directory is overwritten as a whole, so a micro-batch that Spark
    replays after a failure or a restart (same batch id, same input, and the
    index its first attempt used: recorded under state_dir) leaves exactly
    the rows of one attempt: every event is delivered exactly once.  Read
    `out/deliveries` as one table: `batch_id` is a partition column.

    subscriptions: a DataFrame, a Sublist, or a callable returning either,
    called at the start of every micro-batch (e.g. `lambda:
    spark.read.parquet(path)`, which re-reads the files).  The index is
    rebuilt and shipped again only when what it returns has changed (a hash
    of the collected table, or of the Sublist's image); a change lands
    between micro-batches, never inside one.  A plain DataFrame over files
    keeps the file listing it was created with: pass a callable to follow
    new files.

    trigger: DataStreamWriter.trigger's keywords, e.g. {"availableNow": True}
    or {"processingTime": "10 seconds"}.  on_batch(batch_id, counts, index)
    is called on the driver after a micro-batch's outputs are written; an
    exception there fails the query (the batch is replayed on restart).
    state_dir (default checkpoint/fastsub, a local path) keeps the per-batch
    index records.  Classic Spark: foreachBatch runs on the driver.

    shards, depth, dedupe: as fanout().  Sharded (a DataFrame source with
    shards=N, or "auto" above AUTO_SHARD_MIN_SUBS), no index passes through
    the driver: each micro-batch cogroups its events with the subscriptions
    the source gives, and the workers keep each shard's index keyed by a
    digest of its rows, so an unchanged shard is not rebuilt (a change
    rebuilds only the shards it touches).  The counts row then has
    index_id "sharded:N=..:d=.." and a null index_rebuilt, and a replayed
    micro-batch uses the subscriptions as the source gives them at the replay."""
    if queues not in _QUEUE_MODES:
        raise ValueError(f"queues must be 'pick', 'all' or 'none', not {queues!r}")
    _check_dialect(dialect)
    if not events.isStreaming:
        raise ValueError("fanout_stream needs a streaming DataFrame (spark.readStream...); "
                         "use fanout_with_rejects for a batch one")
    if state_dir is None:
        if "://" in checkpoint and not checkpoint.startswith("file:"):
            raise ValueError("the checkpoint is not a local path: pass state_dir= (a local "
                             "or mounted directory) for fastsub's per-batch index records")
        state_dir = os.path.join(checkpoint.replace("file://", "").replace("file:", ""), "fastsub")
    # Fail on a bad events table now, not in the first micro-batch.
    _field(events, subject_col, "the events table")
    state = _StreamIndex(subscriptions, dialect, ship, state_dir)
    base = out.rstrip("/")

    def run_batch(batch_df, batch_id):
        spark = batch_df.sparkSession
        src = state.resolve()
        if shards != 1 and isinstance(src, DataFrame) and (
                shards != "auto" or not _small(src, dialect, True)):
            idx, rebuilt = src, None
        else:
            idx, rebuilt = state.for_batch(spark, batch_id, src)
        res = fanout_with_rejects(batch_df, idx, subject_col, key_col, dialect, queues,
                                  explode, shards=shards, depth=depth,
                                  dedupe=dedupe).observe().persist()
        idx = res.index
        try:
            part = f"batch_id={batch_id}"
            res.deliveries.write.mode("overwrite").parquet(f"{base}/deliveries/{part}")
            res.rejected.write.mode("overwrite").parquet(f"{base}/rejected/{part}")
            c = res.observed_counts()
            row = c._asdict()
            row.update(index_id=idx.index_id,
                       index_rebuilt=None if rebuilt is None else bool(rebuilt))
            (spark.createDataFrame([row], "events long, delivered long, unmatched long, rejected "
                                   "long, deliveries long, index_id string, index_rebuilt boolean")
             .coalesce(1).write.mode("overwrite").parquet(f"{base}/counts/{part}"))
        finally:
            res.unpersist()
        if on_batch is not None:
            on_batch(batch_id, c, idx)

    w = events.writeStream.foreachBatch(run_batch).option("checkpointLocation", checkpoint)
    if query_name:
        w = w.queryName(query_name)
    if trigger:
        w = w.trigger(**trigger)
    return w.start()


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
    cluster master, the executors run this interpreter too unless
    PYSPARK_PYTHON (or spark.pyspark.python in `conf`) says otherwise; a
    fan-out checks once that they can import fastsub and says how to fix it
    when they cannot.  Returns the existing session if one is already running."""
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
    elif not os.environ.get("PYSPARK_PYTHON") and not (conf or {}).get("spark.pyspark.python"):
        # Executors run this interpreter unless told otherwise: the default
        # `python3` of the workers' PATH rarely has fastsub and pyarrow.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        b = b.config("spark.pyspark.python", sys.executable)
    if shuffle_partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for k, v in (conf or {}).items():
        b = b.config(k, str(v))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    return spark


def remote_session(url: str, *, app_name: str = "fastsub") -> SparkSession:
    """A Spark Connect session on `url` (sc://host:port).  The server's
    executors must have fastsub installed (see check_executors)."""
    if not url.startswith("sc://"):
        raise ValueError(f"a Spark Connect URL starts with sc://, not {url!r}")
    try:
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(f"Spark Connect needs grpcio, grpcio-status, googleapis-common-protos "
                          f"and zstandard ({e}): pip install 'fastsub[spark]'") from e
    return SparkSession.builder.remote(url).appName(app_name).getOrCreate()


# --------------------------------------------------------------------------
# progress of long jobs (classic Spark: the status tracker)
# --------------------------------------------------------------------------

class Progress:
    """A thread printing one line every `interval` seconds while Spark jobs
    run: the active stages, their tasks done / total, and elapsed time; with
    `rows` (the input size, when known), an estimate of rows done and the
    rate.  A no-op on Spark Connect (no status tracker on the client).

        with Progress(spark, out=sys.stderr, rows=n):
            df.write.parquet(...)
    """

    def __init__(self, spark, out=None, interval: float = 2.0, rows: Optional[int] = None,
                 label: str = ""):
        self.spark, self.out, self.interval = spark, out or sys.stderr, interval
        self.rows, self.label = rows, label
        self._stop = threading.Event()
        self._thread = None
        self.lines = 0

    def __enter__(self):
        if not is_connect(self.spark):
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._run, name="fastsub-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        return False

    def line(self) -> Optional[str]:
        st = self.spark.sparkContext.statusTracker()
        stages = []
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info is not None:
                stages.append(info)
        if not stages:
            return None
        done = sum(s.numCompletedTasks for s in stages)
        total = sum(s.numTasks for s in stages)
        running = sum(s.numActiveTasks for s in stages)
        elapsed = time.perf_counter() - self._t0
        parts = [f"stage {', '.join(str(s.stageId) for s in stages)}",
                 f"{done}/{total} tasks done, {running} running"]
        if self.rows and total:
            est = self.rows * done // total
            parts.append(f"~{est:,} of {self.rows:,} rows (~{est / elapsed:,.0f}/s)")
        label = f"{self.label}: " if self.label else ""
        return f"  [{elapsed:5.1f} s] {label}" + ", ".join(parts)

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                text = self.line()
            except Exception:  # noqa: BLE001 - the session is stopping
                return
            if text:
                print(text, file=self.out, flush=True)
                self.lines += 1
