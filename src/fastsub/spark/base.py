"""What the parts of fastsub.spark share: its errors, access to a column by
its exact name, and the checks of the subscriptions table (fastsub.spark
re-exports the public names).  Imports no other part of fastsub.spark."""
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from fastsub import FastsubError

#: The queues= modes of a fan-out.
QUEUE_MODES = ("pick", "all", "none")
_INTEGRAL = (T.LongType, T.IntegerType, T.ShortType, T.ByteType)


class FanoutInputError(FastsubError, ValueError):
    """The events or subscriptions table does not have the columns/types fanout needs."""


class ExecutorEnvironmentError(FastsubError, RuntimeError):
    """The executors' Python cannot run fastsub (wrong interpreter, missing packages)."""


class IndexTooLargeError(FastsubError, RuntimeError):
    """The unsharded fan-out could not bring the subscriptions to the driver
    (spark.driver.maxResultSize, driver memory): shard them (shards=N)."""


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

