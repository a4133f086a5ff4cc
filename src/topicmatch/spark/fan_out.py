"""The fan-out of topicmatch.spark, which re-exports its public names (and whose
docstring says how a fan-out runs): share_index, the matching UDFs,
FanoutResult, fanout_with_rejects and fanout.  How a call reaches its index
is its plan's (plan.py); the index built on the driver is shared_index.py's,
images are images.py's and shard_images.py's, the cogroup is shard.py's;
streams are stream.py's.
"""
import dataclasses
import functools
import logging
import threading
import time
import uuid
from typing import Iterator, NamedTuple, Optional, Tuple, Union

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from topicmatch._core import TopicmatchRuntimeError, TopicmatchValueError
from topicmatch import Sublist
from topicmatch.spark.base import (QUEUE_MODES, FanoutInputError, IndexTooLargeError,  # noqa: F401
                                 check_events, column, expect_dataframe, index_from_arrow)
from topicmatch.spark.plan import (FanoutOptions, FanoutPlan, event_options, options_of,
                                   plan_fanout, plan_in)
from topicmatch.spark.images import image_source
from topicmatch.spark.shard_images import image_per_event
from topicmatch.spark.session import check_executors, parallelism
from topicmatch.spark.shared_index import build_index, ship_sublist  # noqa: F401
from topicmatch.spark.ship import SharedIndex, invalid_reasons, match_batches, reject_reasons
from topicmatch.spark.shard import ShardPlan, _salts, sharded_per_event


# --------------------------------------------------------------------------
# share_index
# --------------------------------------------------------------------------

def share_index(spark: SparkSession, sublist: Union[Sublist, DataFrame], *, ship: str = "auto",
                image_dir: Optional[str] = None, dialect: Optional[str] = None) -> SharedIndex:
    """share_index(spark, sublist, *, ship="auto", image_dir=None, dialect=None) -> SharedIndex

    Ship `sublist` to the executors once; `.get()` inside any function Spark
    runs there returns it, loaded once per Python worker process.

    image_dir (a directory the driver and every executor see, e.g. shared
    storage): `sublist` is saved there as an image, named by its content,
    and the workers map it (shipped_by "image"); nothing else travels.
    `sublist` may also be a subscriptions DataFrame (sub_id, filter[,
    queue]; dialect= names its dialect, "nats" by default): its index is
    planned as fanout's one index is (plan_fanout(..., shards=1)): an image
    built on the executors, reused by content; where images cannot be used
    (Spark Connect with a cluster behind it and no image_dir, ship= named)
    built on the driver and
    shipped.

    ship="auto" picks by session kind and size:
        classic Spark   broadcast up to BROADCAST_MAX_BYTES, else "file"
        Spark Connect   "inline" up to INLINE_MAX_BYTES, else "artifact"
    or name one: "broadcast" and "file" need classic Spark, "artifact" needs
    Spark Connect ("file" on Connect means "artifact"), "inline" works on both.

    The Sublist is serialized now: later changes to it are not shipped (share
    it again).  Call .release() when done to free a broadcast (or an
    artifact's local copy) early; a file stays until the driver exits."""
    if isinstance(sublist, DataFrame):
        dialect = "nats" if dialect is None else dialect
        # (each call its own index, as before plans: not remembered for the
        # DataFrame, so a released one is never handed out again)
        return plan_fanout(sublist, FanoutOptions(dialect=dialect, shards=1, ship=ship,
                                                  image_dir=image_dir),
                           _remember=False).shared_index
    return ship_sublist(spark, sublist, ship=ship, image_dir=image_dir, dialect=dialect)


# --------------------------------------------------------------------------
# the UDFs
# --------------------------------------------------------------------------

def _match_udf(idx: SharedIndex, queues: str, with_key: bool, dedupe: bool = False):
    if with_key:
        def topicmatch_match(batches: Iterator[Tuple[pa.Array, pa.Array]]) -> Iterator[pa.Array]:
            return match_batches(idx, queues, True, batches, dedupe)
    else:
        def topicmatch_match(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return match_batches(idx, queues, False, batches, dedupe)
    # Non-deterministic to the optimizer only: it must not copy the call into
    # the filter it infers for explode (that would match every event twice)
    # nor push filters through it.  The output itself is deterministic.
    return F.arrow_udf(topicmatch_match, "array<bigint>").asNondeterministic()


def _invalid_udf(dialect: str):
    def topicmatch_invalid_reason(subjects: pa.Array) -> pa.Array:
        return invalid_reasons(dialect, subjects)
    return F.arrow_udf(topicmatch_invalid_reason, "string").asNondeterministic()


def _reason_udf(dialect: str):
    def topicmatch_reject_reason(subjects: pa.Array) -> pa.Array:
        return reject_reasons(dialect, subjects)
    return F.arrow_udf(topicmatch_reject_reason, "string").asNondeterministic()


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
    plan        the FanoutPlan the call ran (plan.explain(): its route, why,
                and the jobs planning ran).

    Unpacks as a pair: deliveries, rejected = fanout_with_rejects(...).
    """

    def __init__(self, per_event, event_cols, subject_col, dialect, explode, index,
                 observation=None, events=None, plan=None):
        self.per_event, self.index, self.plan = per_event, index, plan
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
            return self.per_event.select(*map(column, event_cols), F.explode(ids).alias("sub_id"))
        return self.per_event.where(ids.isNotNull())

    @property
    def rejected(self) -> DataFrame:
        """From the persisted per_event when it is persisted; else from a pass
        over the subjects alone (a validity check, no index, no matching):
        cheaper than matching every event again."""
        event_cols, subject_col, dialect, _ = self._args
        if self._events is None or _is_persisted(self.per_event):
            return self.per_event.where(F.col("sub_ids").isNull()).select(
                *map(column, event_cols), _reason_udf(dialect)(column(subject_col)).alias("error"))
        err = _invalid_udf(dialect)(column(subject_col))
        return self._events.select(*map(column, event_cols), err.alias("error")) \
            .where(F.col("error").isNotNull())

    @functools.cached_property
    def unmatched(self) -> DataFrame:
        ids = F.col("sub_ids")
        return self.per_event.where(ids.isNotNull() & (F.size(ids) == 0)).select(
            *map(column, self._args[0]))

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
        obs = Observation(f"topicmatch_{uuid.uuid4().hex[:12]}")
        return FanoutResult(self.per_event.observe(obs, *_count_exprs()), *self._args,
                            self.index, observation=obs, events=self._events, plan=self.plan)

    def observed_counts(self) -> FanoutCounts:
        """The counts observed during the first action over this result (see
        observe()); call it after that action (it waits for the action's end)."""
        if self._observation is None:
            raise TopicmatchRuntimeError("observed_counts() needs a result from .observe()")
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


Subscriptions = Union[DataFrame, Sublist, SharedIndex, FanoutPlan]


def fanout_with_rejects(events: DataFrame, subscriptions: Subscriptions,
                        subject_col: str = "subject", key_col: Optional[str] = None,
                        dialect: str = "nats", queues: str = "pick", explode: bool = True, *,
                        ship: str = "auto", reuse_index: bool = True, shards="auto",
                        depth="auto", dedupe: bool = False,
                        image_dir: Optional[str] = None,
                        options: Optional[FanoutOptions] = None) -> FanoutResult:
    """fanout_with_rejects(events, subscriptions, subject_col="subject", key_col=None,
    dialect="nats", queues="pick", explode=True, *, ship="auto", reuse_index=True,
    shards="auto", depth="auto", dedupe=False, image_dir=None, options=None) -> FanoutResult

    Like fanout(), and also the rejected events (with an `error` column), the
    unmatched ones, the per-event frame and counts().  See FanoutResult."""
    given = options_of(options, subject_col=subject_col, key_col=key_col, dialect=dialect,
                       queues=queues, explode=explode, ship=ship, reuse_index=reuse_index,
                       shards=shards, depth=depth, dedupe=dedupe, image_dir=image_dir)
    expect_dataframe(events, "events")
    spark = events.sparkSession
    if isinstance(subscriptions, FanoutPlan):
        plan = plan_in(spark, subscriptions, given)
        opts = event_options(plan, given).check()
    else:
        opts = given.check()
    check_events(events, opts.subject_col, opts.key_col, opts.explode)
    if events.isStreaming and (isinstance(opts.shards, ShardPlan) or opts.shards not in (1, "auto")):
        # (before any job: "auto" is told once the plan has counted)
        raise _streaming_sharded()
    # Once per session, local masters included: a session the user built from
    # a Python without pyarrow gets a clear error instead of a worker's stack
    # (plan_fanout checks beside its first job, where it plans)
    ahead = None
    if isinstance(subscriptions, FanoutPlan):
        check_executors(spark)
    else:
        # (a stream's events: _per_event refuses a sharded plan, in line)
        ahead = None if events.isStreaming else _MatchAhead(events, opts)
        try:
            plan = plan_fanout(subscriptions, opts, spark=spark,
                               _while_building=ahead.start if ahead is not None else None)
        except BaseException:
            if ahead is not None:
                ahead.wait()        # nothing of a call that raised runs on after it
            raise
        check_executors(spark)      # (a remembered plan: checked when it was made)
    made = ahead.frame_for(plan) if ahead is not None else None
    per_event, index = (made, plan.index) if made is not None else _per_event(events, plan, opts)
    return FanoutResult(per_event, list(events.columns), opts.subject_col, opts.dialect,
                        opts.explode, index, events=events, plan=plan)


def _shard_image_frame(events: DataFrame, shard_plan: ShardPlan, paths, opts: FanoutOptions):
    """The events with their `sub_ids`, matched in place by the shard
    images at `paths` (the shard-images route)."""
    return image_per_event(events, shard_plan, paths, in_place=True,
                           source=image_source(events.sparkSession, paths),
                           subject_col=opts.subject_col, key_col=opts.key_col,
                           dialect=opts.dialect, queues=opts.queues, dedupe=bool(opts.dedupe))


class _MatchAhead:
    """The shard-images match frame of a call that plans, made on a thread
    of its own while the plan's build job runs (plan_fanout's
    _while_building: called with the shard plan and the paths the images
    will have, before the job).  Making it is the driver's alone -- PySpark
    building the query, the JVM analysing each step, 0.2-0.3 s on a quiet
    two-host rig and 0.9 s under a load of 9 (cProfile) -- and it was done
    after the build job, between it and the match job, while the cores
    built.  Used only for the very plan it was made for (the same ShardPlan
    object and paths); otherwise, or where making it failed, the frame is
    made in line as before (which raises any error on the caller's thread)."""

    def __init__(self, events: DataFrame, opts: FanoutOptions):
        self._events, self._opts = events, opts
        self._thread: Optional[threading.Thread] = None
        self._for = None
        self._frame = None

    def start(self, shard_plan: ShardPlan, paths) -> None:
        if self._thread is not None:
            return
        self._for = (shard_plan, list(paths))

        def run():
            t0 = time.perf_counter()
            try:
                self._frame = _shard_image_frame(self._events, shard_plan, list(paths), self._opts)
            except Exception:  # noqa: BLE001 - made again in line, where it raises
                logging.getLogger("topicmatch.spark").debug(
                    "topicmatch: the match frame made beside the build job failed; made in line",
                    exc_info=True)
                self._frame = None
                return
            logging.getLogger("topicmatch.spark").info(
                "topicmatch: the match frame made beside the build job (%.2f s)",
                time.perf_counter() - t0)
        self._thread = threading.Thread(target=run, name="topicmatch-match-ahead", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Until the thread, if one started, is done."""
        if self._thread is not None:
            self._thread.join()

    def frame_for(self, plan: FanoutPlan) -> Optional[DataFrame]:
        """The frame made ahead for `plan`, or None (none made, or for
        another plan: made in line)."""
        if self._thread is None:
            return None
        self.wait()
        shard_plan, paths = self._for
        if (plan.route != "shard-images" or plan.shard_plan is not shard_plan
                or list(plan.shard_paths) != paths):
            return None
        return self._frame


def _streaming_sharded():
    return TopicmatchValueError("a sharded fan-out of a streaming DataFrame runs per micro-batch: "
                                "use fanout_stream(..., shards=...)")


def _per_event(events: DataFrame, plan: FanoutPlan, opts: FanoutOptions):
    """-> (the events with their `sub_ids`, matched as the plan says; the
    index they were matched by: the plan's, or the cogroup's ShardPlan
    with this call's salting)."""
    if plan.sharded and events.isStreaming:
        raise _streaming_sharded()
    how = dict(subject_col=opts.subject_col, key_col=opts.key_col, dialect=opts.dialect,
               queues=opts.queues, dedupe=bool(opts.dedupe))
    if plan.route == "shard-images":
        return _shard_image_frame(events, plan.shard_plan, plan.shard_paths, opts), plan.index
    if plan.route == "cogroup":
        sp = plan.shard_plan
        if not isinstance(opts.shards, ShardPlan):
            # the salting follows these events: a sample of them, per call
            sp = dataclasses.replace(sp, salts=_salts(events, opts.subject_col, opts.dialect, sp,
                                                      parallelism(events.sparkSession)))
            logging.getLogger("topicmatch.spark").info("%s", sp.explain())
        return sharded_per_event(events, plan.subscriptions, sp, **how), sp
    subject = column(opts.subject_col)
    if opts.key_col is None:
        matched = _match_udf(plan.shared_index, opts.queues, False, bool(opts.dedupe))(subject)
    else:
        # A null key falls back to the subject, as if no key had been given.
        key = F.coalesce(column(opts.key_col).cast("string"), subject)
        matched = _match_udf(plan.shared_index, opts.queues, True, bool(opts.dedupe))(subject, key)
    return events.withColumn("sub_ids", matched), plan.index


def fanout(events: DataFrame, subscriptions: Subscriptions, subject_col: str = "subject",
           key_col: Optional[str] = None, dialect: str = "nats", queues: str = "pick",
           explode: bool = True, *, ship: str = "auto", reuse_index: bool = True,
           shards="auto", depth="auto", dedupe: bool = False,
           image_dir: Optional[str] = None,
           options: Optional[FanoutOptions] = None) -> DataFrame:
    """fanout(events, subscriptions, subject_col="subject", key_col=None, dialect="nats",
    queues="pick", explode=True, *, ship="auto", reuse_index=True, shards="auto",
    depth="auto", dedupe=False, image_dir=None, options=None) -> DataFrame

    The delivery list of `events` against `subscriptions`: a DataFrame
    (`sub_id` long, `filter` string, `queue` string or null), a Sublist, a
    SharedIndex from share_index(), or a FanoutPlan from plan_fanout().

    Jobs at call time.  Given a subscriptions DataFrame, fanout plans its
    index before it returns (plan_fanout, whose explain() lists them): one
    aggregate over the subscriptions (the statistics job; a count job where
    images cannot be used), then, for an image not yet
    known to this application, a probe task and (only for an image not
    found) the build.  That is why a call is not lazy, as a Spark
    transformation is: the index must exist before a task can map it.  A
    repeat call on the same DataFrame object runs none of them, and a plan
    made ahead (plan = plan_fanout(subs, ...); fanout(events, plan)) moves
    them all out of the call (the cogroup, where images cannot be used,
    still samples the events for its salting: one job).  The match itself
    runs with the first action on the result.

    options        a FanoutOptions carrying any of these keywords at once (a
                   keyword set here overrides it).  With a FanoutPlan, the
                   plan's own keywords (dialect, shards, depth, ship,
                   image_dir, reuse_index) come from the plan: one set here
                   must agree with it.

    explode=True   one row per (event, sub_id): the event's columns + `sub_id` bigint.
    explode=False  one row per accepted event: its columns + `sub_ids` array<bigint>
                   (empty when no subscription matched: countable).
    queues         "pick": plain subscriptions + one member per matching queue
                   group, picked from a hash of (key or subject, group), so a rerun
                   or a retried task gives the same rows; "all": every member;
                   "none": plain subscriptions only.
    key_col        the column the queue pick hashes instead of the subject (e.g. a
                   device id, for sticky picks); cast to string; null -> subject.
    image_dir      where the unsharded index of a subscriptions DataFrame lives:
                   an executor task builds it from the rows and saves it there
                   as an image named by a digest of the rows' content (the
                   plan's one aggregate job), and every Python worker maps it.
                   A later call, application or micro-batch on the same rows
                   builds nothing.  None: a directory on the executors' local
                   disk on one host (local mode, a one-host cluster, Spark
                   Connect on a local master), else sent to the driver,
                   which serves each host the images it lacks; on Spark
                   Connect with a cluster behind it, give storage the
                   executors share, or the index is built on the driver
                   and shipped (docs/spark.md, "Images on the
                   executors").  A Sublist given with image_dir
                   is saved there instead of shipped.  Not with ship= other
                   than "auto" (a DataFrame with ship= set goes the shipped way).
    ship           how an index built on the driver travels (see share_index):
                   "auto", "broadcast", "file", "artifact" or "inline".
    reuse_index    a subscriptions DataFrame's plan is reused by later calls
                   with the same DataFrame object (and session, dialect, ship,
                   image_dir, shards, depth) without any job; as an image it is also reused by
                   calls on other DataFrames with the same rows.  False builds
                   it again (an image is rebuilt and replaced).  Re-read the
                   table (a new DataFrame) to pick up changed subscriptions.
    shards         1: one index, built once (see image_dir) and mapped or
                   shipped to every worker.
                   N > 1 or a ShardPlan: the sharded fan-out (docs/spark.md,
                   "Sharded"): both sides are partitioned by a route key, each
                   shard's index is built on an executor, nothing index-sized
                   passes through the driver.  "auto": sharded above
                   AUTO_SHARD_MIN_SUBS subscriptions (counted by the plan's
                   one statistics job, or a count job where images cannot
                   be used), N chosen
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
                               shards=shards, depth=depth, dedupe=dedupe,
                               image_dir=image_dir, options=options).deliveries

