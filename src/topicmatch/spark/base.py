"""What the parts of topicmatch.spark share: its errors, access to a column by
its exact name, the checks of the events table (check_events) and of the
subscriptions table, the one error a bad subscriptions row raises
(bad_subscription), on every path, and the index of an Arrow subscriptions
table (index_from_arrow: on the driver, or in the task that builds an
image).  topicmatch.spark re-exports the public
names.  Imports no other part of topicmatch.spark."""
from typing import Optional, Tuple

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from topicmatch import InvalidSubjectError, Sublist, build_image
from topicmatch._core import TopicmatchRuntimeError, TopicmatchTypeError, TopicmatchValueError
from topicmatch._dialects import check_dialect

#: The queues= modes of a fan-out.
QUEUE_MODES = ("pick", "all", "none")
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)


class FanoutInputError(TopicmatchValueError):
    """The events or subscriptions table does not have the columns/types fanout needs."""


class ExecutorEnvironmentError(TopicmatchRuntimeError):
    """The executors' Python cannot run topicmatch (wrong interpreter, missing packages)."""


class IndexTooLargeError(TopicmatchRuntimeError):
    """The unsharded fan-out could not bring the subscriptions to the driver
    (spark.driver.maxResultSize, driver memory): shard them (shards=N)."""


def type_name(obj) -> str:
    """The kind of obj for a message, as module.qualname: a pandas DataFrame
    given where a Spark one is expected reads "pandas.core.frame.DataFrame",
    not a bare "DataFrame" that looks like the very type asked for.  Built-in
    types keep their short name ("int", "str", "NoneType")."""
    t = type(obj)
    module = getattr(t, "__module__", None)
    name = getattr(t, "__qualname__", t.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def expect_dataframe(df, what: str) -> None:
    """TypeError unless df is a Spark DataFrame (classic or Connect), naming
    what was given by type_name."""
    if not isinstance(df, DataFrame):
        raise TopicmatchTypeError(f"{what} must be a pyspark.sql.DataFrame, not {type_name(df)}")


def column(name: str) -> Column:
    """A top-level column by its exact name (dots and backticks included)."""
    return F.col("`" + name.replace("`", "``") + "`")


def schema_field(df: DataFrame, name: str, what: str):
    """The field `name` of df's schema, or FanoutInputError listing df's columns."""
    for f in df.schema.fields:
        if f.name == name:
            return f
    cols = ", ".join(df.columns) or "(none)"
    raise FanoutInputError(f"{what} has no column {name!r} (columns: {cols})")


def _same_name(spark):
    """The session's rule for two column names being one: exact when
    spark.sql.caseSensitive is on, else case-insensitive (Spark's default)."""
    try:
        sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    except Exception:  # noqa: BLE001 - a session kind without the conf
        sensitive = False
    return (lambda n: n) if sensitive else (lambda n: n.lower())


def check_events(events: DataFrame, subject_col: str, key_col, explode: bool) -> None:
    """The checks of an events table that every fan-out makes on the driver
    before any job (batch or stream, sharded or not): the subject column is
    a string, the key column an atomic type, and no column has a name the
    fan-out adds (`sub_ids`, `error`, and `sub_id` when exploding), as the
    session compares names (case-insensitively by default: withColumn would
    silently replace `SUB_IDS`).  Raises FanoutInputError."""
    f_subject = schema_field(events, subject_col, "the events table")
    if not isinstance(f_subject.dataType, T.StringType):
        raise FanoutInputError(
            f"events column {subject_col!r} has type {f_subject.dataType.simpleString()}, "
            "expected string")
    if key_col is not None:
        f_key = schema_field(events, key_col, "the events table")
        if not isinstance(f_key.dataType, T.AtomicType):
            raise FanoutInputError(
                f"events column {key_col!r} has type {f_key.dataType.simpleString()}, "
                "expected a string, number, date or timestamp key")
    norm = _same_name(events.sparkSession)
    added = {norm(c): c for c in ["sub_ids", "error"] + (["sub_id"] if explode else [])}
    clash = [c for c in events.columns if norm(c) in added]
    if clash:
        raise FanoutInputError(
            f"the events table already has column(s) {', '.join(map(repr, clash))}, which "
            "fanout adds; rename them first")


def bad_subscription(dialect: str, sub_id, filter, queue, row=None) -> Exception:
    """The error of a bad subscriptions row, the same on every path (the
    unsharded index built on the driver, and the sharded fan-out's
    validation job): FanoutInputError for a null sub_id or filter, else the
    index's own InvalidSubjectError for the filter or queue.  `row` is its
    1-based position where the driver knows it (the collected table); the
    sharded job reads the table in parallel and has no order to count in."""
    where = "a subscriptions row" if row is None else f"subscriptions row {row}"
    q = f", queue={queue!r}" if queue is not None else ""
    if sub_id is None or filter is None:
        return FanoutInputError(f"{where} (sub_id={sub_id}, filter={filter!r}{q}): "
                                f"null {'sub_id' if sub_id is None else 'filter'}")
    try:
        Sublist(dialect).insert(filter, sub_id, queue=queue)
    except InvalidSubjectError as e:
        return InvalidSubjectError(f"{where} (sub_id={sub_id}{q}): {e}",
                                   getattr(e, "subject", None), getattr(e, "reason", None),
                                   getattr(e, "position", None))
    return FanoutInputError(f"{where} (sub_id={sub_id}{q}): refused by the index")  # pragma: no cover


def check_subscriptions_schema(subscriptions: DataFrame, string_ids: bool = False) -> bool:
    """Raise FanoutInputError on a missing column or a wrong type (string sub
    ids allowed with string_ids=True); -> whether there is a queue column."""
    f_id = schema_field(subscriptions, "sub_id", "the subscriptions table")
    f_filter = schema_field(subscriptions, "filter", "the subscriptions table")
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
        f_queue = schema_field(subscriptions, "queue", "the subscriptions table")
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
    cols = [column("sub_id").cast("long"), column("filter")] + (
        [column("queue").cast("string").alias("queue")] if has_queue else [])
    return subscriptions.select(*cols).toArrow()



def _from_arrow(table: pa.Table, dialect: str, make):
    """make(filters, ids, queues) over the columns of an Arrow table
    (sub_id, filter[, queue]) as collect_subscriptions returns it, read in
    place (no Python object per row): (its result, None), or (None, (i,
    sub_id, filter, queue)) for the first bad row i (0-based), whose error
    bad_subscription words (a task returns the row; the driver raises)."""
    import pyarrow.compute as pc
    check_dialect(dialect)
    ids_a, filters_a = table.column(0), table.column(1)
    queues_a = table.column(2) if table.num_columns > 2 else None

    def bad(i):
        q = queues_a[i].as_py() if queues_a is not None else None
        return None, (i, ids_a[i].as_py(), filters_a[i].as_py(), q)

    if ids_a.null_count or filters_a.null_count:
        return bad(pc.index(pc.or_(pc.is_null(ids_a), pc.is_null(filters_a)), True).as_py())
    queues = queues_a if queues_a is not None and queues_a.null_count < len(queues_a) else None
    try:
        return make(filters_a, ids_a, queues), None
    except InvalidSubjectError as e:
        if e.row is None:
            raise
        return bad(e.row)


def insert_arrow(table: pa.Table, dialect: str) -> Tuple[Optional[Sublist], Optional[tuple]]:
    """The index of an Arrow table (sub_id, filter[, queue]): (Sublist,
    None), or (None, the first bad row) as _from_arrow gives it."""
    def make(filters, ids, queues):
        sl = Sublist(dialect)
        sl.insert_many(filters, ids, queues)
        return sl
    return _from_arrow(table, dialect, make)


def image_from_arrow(table: pa.Table, dialect: str, path: str,
                     durable: bool) -> Tuple[Optional[int], Optional[tuple]]:
    """The image of an Arrow table (sub_id, filter[, queue]) written at path
    by build_image, straight from the columns on one thread (a task's
    core), without building the index first: (its subscriptions, None), or
    (None, the first bad row) as _from_arrow gives it, and no file."""
    def make(filters, ids, queues):
        sl = build_image(path, filters, ids, queues, dialect=dialect, threads=1, durable=durable)
        try:
            return len(sl)
        finally:
            sl.close()
    return _from_arrow(table, dialect, make)


def index_from_arrow(table: pa.Table, dialect: str = "nats") -> Sublist:
    """A Sublist from an Arrow table (sub_id, filter[, queue]) as collect_subscriptions
    returns it.  A bad row raises one error naming it (1-based)."""
    sl, bad = insert_arrow(table, dialect)
    if bad is not None:
        i, sub_id, filter_, queue = bad
        raise bad_subscription(dialect, sub_id, filter_, queue, row=i + 1)
    return sl


def check_shards(shards, auto=True):
    """shards= is "auto" (when allowed) or a positive int (not a bool)."""
    if auto and shards == "auto":
        return
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        also = "'auto', " if auto else ""
        raise TopicmatchValueError(f"shards must be {also}a positive integer or a ShardPlan, not {shards!r}")


def check_depth(depth, auto=True):
    """depth= is "auto" (when allowed) or an int from 1 to 16 (fs_route's limit)."""
    if auto and depth == "auto":
        return
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 16:
        also = "'auto' or " if auto else ""
        raise TopicmatchValueError(f"depth must be {also}an integer from 1 to 16, not {depth!r}")
