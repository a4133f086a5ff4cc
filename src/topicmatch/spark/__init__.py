"""Fan events out to subscription ids on Spark (docs/spark.md).

    >>> from topicmatch.spark import fanout, fanout_with_rejects, share_index
    >>> deliveries = fanout(events, subs)                 # one row per (event, sub_id)
    >>> r = fanout_with_rejects(events, subs)             # deliveries + rejected + counts
    >>> r.rejected.show()                                 # the events' columns + `error`
    >>> r.counts()                                        # events = delivered + unmatched + rejected
    >>> idx = share_index(spark, sublist)                 # your own code: idx.get() on executors

How it runs.  A subscriptions DataFrame's index is built on an executor and
saved as an image file named by a digest of its rows, which every Python
worker maps (topicmatch.spark.images; image_dir=), where the executors can
share files: local mode, one-host clusters, or image_dir on shared storage.
Otherwise the subscriptions table is collected once on the driver and
built into one `Sublist`; `share_index` ships its `to_bytes()` image to the
executors under an id chosen on the driver (a uuid): by broadcast or, above
`BROADCAST_MAX_BYTES`, as a file (`SparkContext.addFile`) on classic Spark;
on Spark Connect (no SparkContext) inside the UDF itself up to
`INLINE_MAX_BYTES`, else as an artifact (`spark.addArtifacts(file=True)`).
Each Python worker process loads the image the first time a task needs it
and keeps the `Sublist` in a module-level cache keyed by that id
(topicmatch.spark.ship), so later tasks and batches on the same worker reuse
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

The parts, one job each, all re-exported here: the fan-out (fan_out.py),
how a call reaches its index (plan.py: plan_fanout, FanoutPlan.explain()),
the index built on the driver (shared_index.py),
streaming (stream.py), images built on the executors (images.py),
sessions and their log4j set-up (session.py), the
progress line (progress.py), what they share (base.py: the errors, the
subscriptions' schema), shipping an index to the executors (ship.py), the
sharded plan (shard.py), and the thresholds' reader (limits.py).

This module imports PySpark; `import topicmatch` does not import this module.
"""
from topicmatch._core import TopicmatchImportError
try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401  (the check that PySpark is installed)
    import pyspark.sql  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise TopicmatchImportError(
        f"topicmatch.spark needs PySpark 4 and pyarrow ({e}); install them with: "
        "pip install 'topicmatch[spark]'") from e

from topicmatch import TopicmatchError, InvalidSubjectError, Sublist  # noqa: F401
from topicmatch._dialects import check_dialect as _check_dialect  # noqa: F401
from topicmatch.spark.base import (ExecutorEnvironmentError, FanoutInputError,  # noqa: F401
                                 IndexTooLargeError, check_subscriptions_schema,
                                 collect_subscriptions)
from topicmatch.spark.base import column as _col  # noqa: F401
from topicmatch.spark.fan_out import (FanoutCounts,  # noqa: F401
                                   FanoutResult, Subscriptions, build_index, fanout,
                                   fanout_with_rejects, index_from_arrow, share_index)
from topicmatch.spark.plan import FanoutOptions, FanoutPlan, plan_fanout  # noqa: F401
from topicmatch.spark.image_cache import CachedImage, Pruned, list_images  # noqa: F401
from topicmatch.spark.image_cache import prune as prune_images  # noqa: F401
from topicmatch.spark.images import default_image_dir, image_version  # noqa: F401
from topicmatch.spark.progress import Progress  # noqa: F401
from topicmatch.spark.session import (check_executors, is_connect, is_local_master,  # noqa: F401
                                    local_session, remote_session)
from topicmatch.spark.shard import (ShardPlan, check_shards,  # noqa: F401
                                  plan_shards, sharded_per_event)
from topicmatch.spark.ship import (LOAD_LOG_ENV, SharedIndex, fork_safe_lock,  # noqa: F401
                                 invalid_reasons, match_batches, reject_reasons)
from topicmatch.spark.stream import fanout_stream  # noqa: F401

__all__ = [
    "fanout", "fanout_with_rejects", "fanout_stream", "share_index", "SharedIndex",
    "plan_fanout", "FanoutPlan", "FanoutOptions",
    "FanoutResult", "FanoutCounts", "FanoutInputError", "ExecutorEnvironmentError",
    "build_index", "local_session", "remote_session", "is_connect", "check_executors",
    "BROADCAST_MAX_BYTES", "INLINE_MAX_BYTES", "LOAD_LOG_ENV",
    "ShardPlan", "plan_shards", "IndexTooLargeError", "AUTO_SHARD_MIN_SUBS",
    "default_image_dir", "list_images", "prune_images", "CachedImage", "Pruned",
]


# The thresholds: a user may set them here (topicmatch.spark.BROADCAST_MAX_BYTES
# = n, or a test's monkeypatch); the fan-out reads them from here when it
# uses them (limits.limit).

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

#: shards="auto" keeps the broadcast path up to this many subscriptions
#: (docs/scale.md: the measured crossover on local[2]).
AUTO_SHARD_MIN_SUBS = 2_000_000
