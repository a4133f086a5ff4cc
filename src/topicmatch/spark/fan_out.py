"""The fan-out of topicmatch.spark, which re-exports its public names (and whose
docstring says how a fan-out runs): the index of a subscriptions table
(an image built on the executors, images.py; or built on the driver and
shipped by share_index; kept for later calls on the same DataFrame), the matching UDFs, FanoutResult, fanout_with_rejects and
fanout.  The sharded plan is shard.py's; streams are stream.py's.
"""
import atexit
import dataclasses
import functools
import logging
import os
import re
import shutil
import tempfile
import uuid
import weakref
from typing import Iterator, NamedTuple, Optional, Tuple, Union

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from topicmatch._core import TopicmatchRuntimeError, TopicmatchTypeError, TopicmatchValueError
from topicmatch import Sublist
from topicmatch._dialects import check_dialect
from topicmatch.spark.base import (QUEUE_MODES, FanoutInputError, IndexTooLargeError,  # noqa: F401
                                 check_events, collect_subscriptions, column, expect_dataframe,
                                 index_from_arrow, type_name)
from topicmatch.spark.images import image_index, save_sublist, use_images, vanished
from topicmatch.spark.shard_images import image_per_event, shard_images
from topicmatch.spark.session import check_executors, is_connect, session_key
from topicmatch.spark.ship import (SharedIndex, fork_safe_lock, invalid_reasons, match_batches,
                                 reject_reasons)
from topicmatch.spark.limits import limit
from topicmatch.spark.shard import (ShardPlan, _parallelism, _salts,
                                  check_rows, check_shards, plan_shards, sharded_per_event)


# --------------------------------------------------------------------------
# driver side: the index
# --------------------------------------------------------------------------

def build_index(subscriptions: DataFrame, dialect: str = "nats") -> Sublist:
    """build_index(subscriptions, dialect="nats") -> Sublist

    Collect `subscriptions` (`sub_id` integer, `filter` string, optional
    `queue` string) to the driver and build the index.  A bad row raises one
    error naming the row (1-based, in the table's order), its sub_id and
    filter: InvalidSubjectError for an invalid filter or queue name,
    FanoutInputError for a null sub_id/filter or a wrong column type."""
    check_dialect(dialect)
    expect_dataframe(subscriptions, "subscriptions")
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
            "fanout_with_rejects / fanout_stream, or --shards to `topicmatch fanout`, to build "
            "the index shard by shard on the executors; or leave ship='auto' with image_dir= "
            "(a directory every executor shares) to build it as one image on an executor") from None
    return index_from_arrow(table, dialect)


_TMPDIR = []


def _tmpdir():
    if not _TMPDIR:
        _TMPDIR.append(tempfile.mkdtemp(prefix="topicmatch-index-"))
        atexit.register(shutil.rmtree, _TMPDIR[0], True)
    return _TMPDIR[0]


def _write_image(data: bytes, name: str) -> str:
    path = os.path.join(_tmpdir(), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


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
    built on the executors into image_dir, or into their default directory
    where every executor shares a host, and reused by content (see
    fanout's image_dir); elsewhere it is built on the driver and shipped.

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
        check_dialect(dialect)
        if use_images(spark, image_dir, ship):
            return image_index(sublist, dialect, image_dir)
        sublist = build_index(sublist, dialect)
    if not isinstance(sublist, Sublist):
        raise TopicmatchTypeError("share_index needs a topicmatch.Sublist (or a subscriptions DataFrame), "
                        f"not {type_name(sublist)}")
    if dialect is not None and dialect != sublist.dialect:
        raise TopicmatchValueError(f"the Sublist is {sublist.dialect!r}, share_index was given "
                         f"dialect={dialect!r}")
    if image_dir is not None:
        use_images(spark, image_dir, ship)     # checks the pair
        return save_sublist(sublist, image_dir)
    connect = is_connect(spark)
    data = sublist.to_bytes()
    n = len(data)
    if ship == "auto":
        if connect:
            ship = "inline" if n <= limit("INLINE_MAX_BYTES") else "artifact"
        else:
            ship = "broadcast" if n <= limit("BROADCAST_MAX_BYTES") else "file"
    elif connect and ship == "file":
        ship = "artifact"
    if ship not in ("broadcast", "file", "artifact", "inline"):
        raise TopicmatchValueError(f"ship must be 'auto', 'broadcast', 'file', 'artifact' or 'inline', not {ship!r}")
    if connect and ship == "broadcast":
        raise TopicmatchValueError("ship='broadcast' needs classic Spark (a SparkContext); on Spark Connect "
                         "use 'inline' or 'artifact' (or 'auto')")
    if not connect and ship == "artifact":
        raise TopicmatchValueError("ship='artifact' is for Spark Connect sessions; on classic Spark "
                         "use 'broadcast' or 'file' (or 'auto')")
    index_id = uuid.uuid4().hex
    common = dict(index_id=index_id, dialect=sublist.dialect, nbytes=n, nsubs=len(sublist),
                  shipped_by=ship, sublist=sublist)
    if ship == "broadcast":
        return SharedIndex(broadcast=spark.sparkContext.broadcast(data), **common)
    if ship == "inline":
        return SharedIndex(data=data, **common)
    name = f"topicmatch-index-{index_id}.bin"
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


def _index_for(spark, subscriptions, dialect, ship, reuse, image_dir=None) -> SharedIndex:
    """DataFrame, Sublist or SharedIndex -> the SharedIndex a fan-out uses.
    A DataFrame's index is an image built on the executors (images.py)
    where use_images says so, else built here and shipped."""
    if isinstance(subscriptions, SharedIndex):
        if subscriptions.dialect != dialect:
            raise TopicmatchValueError(f"the shared index is {subscriptions.dialect!r}, the fan-out "
                             f"asks for dialect={dialect!r}")
        return subscriptions
    if isinstance(subscriptions, Sublist):
        if subscriptions.dialect != dialect:
            raise TopicmatchValueError(f"the Sublist is {subscriptions.dialect!r}, the fan-out "
                             f"asks for dialect={dialect!r}")
        return share_index(spark, subscriptions, ship=ship, image_dir=image_dir)
    if not isinstance(subscriptions, DataFrame):
        raise TopicmatchTypeError("subscriptions must be a pyspark.sql.DataFrame, a topicmatch.Sublist "
                        f"or a SharedIndex, not {type_name(subscriptions)}")
    if use_images(spark, image_dir, ship):
        key = (session_key(spark), dialect, "image", image_dir)
        idx = _reused(subscriptions, key) if reuse else None
        if idx is None or vanished(idx.image_path):
            idx = image_index(subscriptions, dialect, image_dir, rebuild=not reuse)
            if reuse:
                _remember(subscriptions, key, idx)
        return idx
    key = (session_key(spark), dialect, ship)
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
                            self.index, observation=obs, events=self._events)

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


Subscriptions = Union[DataFrame, Sublist, SharedIndex]


def _plan_for(events, subscriptions, dialect, shards, depth, subject_col, reuse, images=False,
              salting=True):
    """-> the ShardPlan of a sharded fan-out, or None for the broadcast path.

    Every sharded fan-out -- shards=N, "auto" past AUTO_SHARD_MIN_SUBS, a
    ShardPlan, and each micro-batch of fanout_stream -- gets its plan here,
    from plan_shards, whose one job over the subscriptions validates every
    row (a bad one raises on the driver, as base.bad_subscription words it)
    before any event is read.  A ShardPlan runs as given (shards, depth,
    salts): the job checks the rows (once per DataFrame object with
    reuse_index, as for shards=N)."""
    given = None
    if isinstance(shards, ShardPlan):
        if not isinstance(subscriptions, DataFrame):
            raise TopicmatchValueError("a ShardPlan shards a subscriptions DataFrame, not a "
                             f"{type_name(subscriptions)}")
        given, shards, depth = shards, shards.shards, shards.depth
    else:
        check_shards(shards)
        if shards == 1:
            return None
        if not isinstance(subscriptions, DataFrame):
            if shards == "auto":
                return None     # already one index on the driver: the broadcast path
            raise TopicmatchValueError(
                f"shards={shards} needs the subscriptions as a DataFrame: a "
                f"{type_name(subscriptions)} is one index already built on the driver, "
                "so it is shipped whole (shards=1 or 'auto')")
        if shards == "auto" and small_enough(subscriptions, dialect, reuse):
            return None
    if events.isStreaming:
        raise TopicmatchValueError("a sharded fan-out of a streaming DataFrame runs per micro-batch: "
                         "use fanout_stream(..., shards=...)")
    spark = events.sparkSession
    plan = checked_plan(subscriptions, dialect, shards, depth, reuse, images=images)
    if given is not None:
        # The caller's plan runs as given (its salting included); the log
        # shows it with the figures the job measured.
        logging.getLogger("topicmatch.spark").info(
            "%s", dataclasses.replace(plan, salts=dict(given.salts)).explain())
        return given
    # The salting follows these events: a sample of them, per call (none
    # when the events are matched where they are).
    if salting:
        plan = dataclasses.replace(plan, salts=_salts(events, subject_col, dialect, plan,
                                                      _parallelism(spark)))
    logging.getLogger("topicmatch.spark").info("%s", plan.explain())
    return plan


def checked_plan(subscriptions: DataFrame, dialect: str, shards, depth, reuse: bool, *,
                 images: bool = False) -> ShardPlan:
    """plan_shards(subscriptions, dialect, shards, depth) -- the aggregate
    that measures the shards and names their images, and the job that checks
    every subscriptions row -- kept for later calls on the same DataFrame
    object (with reuse).  The one place a sharded fan-out plans: _plan_for,
    and fanout_stream before it starts, call it.  images=True: planned for
    shard images (plan_shards(images=True)), whose build checks the rows
    instead of the check job."""
    check = not images
    key = (session_key(subscriptions.sparkSession), dialect, "plan", shards, depth, images)
    checked_key = key + ("checked",)
    plan = _reused(subscriptions, key) if reuse else None
    if plan is None:
        plan = plan_shards(subscriptions, dialect, shards, depth, check=check, images=images)
        if reuse:
            _remember(subscriptions, key, plan)
    elif check and not _reused(subscriptions, checked_key):
        check_rows(subscriptions, dialect)
    if check and reuse:
        _remember(subscriptions, checked_key, True)
    return plan


def small_enough(subscriptions: DataFrame, dialect: str, reuse: bool) -> bool:
    """shards="auto": are there at most AUTO_SHARD_MIN_SUBS subscriptions?  One count job."""
    key = (session_key(subscriptions.sparkSession), dialect, "small")
    small = _reused(subscriptions, key) if reuse else None
    if small is None:
        small = subscriptions.count() <= limit("AUTO_SHARD_MIN_SUBS")
        if reuse:
            _remember(subscriptions, key, small)
    return small


def fanout_with_rejects(events: DataFrame, subscriptions: Subscriptions,
                        subject_col: str = "subject", key_col: Optional[str] = None,
                        dialect: str = "nats", queues: str = "pick", explode: bool = True, *,
                        ship: str = "auto", reuse_index: bool = True, shards="auto",
                        depth="auto", dedupe: bool = False,
                        image_dir: Optional[str] = None) -> FanoutResult:
    """fanout_with_rejects(events, subscriptions, subject_col="subject", key_col=None,
    dialect="nats", queues="pick", explode=True, *, ship="auto", reuse_index=True,
    shards="auto", depth="auto", dedupe=False, image_dir=None) -> FanoutResult

    Like fanout(), and also the rejected events (with an `error` column), the
    unmatched ones, the per-event frame and counts().  See FanoutResult."""
    if queues not in QUEUE_MODES:
        raise TopicmatchValueError(f"queues must be 'pick', 'all' or 'none', not {queues!r}")
    check_dialect(dialect)
    expect_dataframe(events, "events")
    check_events(events, subject_col, key_col, explode)

    spark = events.sparkSession
    # Once per session, local masters included: a session the user built from
    # a Python without pyarrow gets a clear error instead of a worker's stack.
    check_executors(spark)
    # Shard images check their rows as they build (and not at all when
    # found by content): the plan's own check job is for the other paths.
    images = isinstance(subscriptions, DataFrame) and use_images(spark, image_dir, ship)
    # Every host holds every image it needs (its own disk, a mount, its copy
    # of the store's, or Spark's): the events are matched where they are,
    # against every shard's image, with no shuffle and no salting sample.
    # Shuffling them by shard would save only the mapping of images a host's
    # tasks do not meet, at the price of moving every event.
    in_place = images
    plan = _plan_for(events, subscriptions, dialect, shards, depth, subject_col, reuse_index,
                     images=images, salting=not in_place)
    if plan is not None:
        how = dict(subject_col=subject_col, key_col=key_col, dialect=dialect, queues=queues,
                   dedupe=bool(dedupe))
        if images:
            # each shard's image built once per content, only the events
            # shuffled (or none); the same DataFrame object again: not even
            # the plan's aggregate
            key = (session_key(spark), dialect, "shard-images", image_dir, plan.shards, plan.depth)
            paths = _reused(subscriptions, key) if reuse_index else None
            if paths is None or any(vanished(p) for p in paths):
                paths = shard_images(subscriptions, dialect, plan, image_dir,
                                     rebuild=not reuse_index)["paths"]
                if reuse_index:
                    _remember(subscriptions, key, paths)
            per_event = image_per_event(events, plan, paths, in_place=in_place, **how)
        else:
            per_event = sharded_per_event(events, subscriptions, plan, **how)
        return FanoutResult(per_event, list(events.columns), subject_col, dialect, explode, plan,
                            events=events)
    idx = _index_for(spark, subscriptions, dialect, ship, reuse_index, image_dir)

    subject = column(subject_col)
    if key_col is None:
        matched = _match_udf(idx, queues, False, bool(dedupe))(subject)
    else:
        # A null key falls back to the subject, as if no key had been given.
        key = F.coalesce(column(key_col).cast("string"), subject)
        matched = _match_udf(idx, queues, True, bool(dedupe))(subject, key)
    per_event = events.withColumn("sub_ids", matched)
    return FanoutResult(per_event, list(events.columns), subject_col, dialect, explode, idx,
                        events=events)


def fanout(events: DataFrame, subscriptions: Subscriptions, subject_col: str = "subject",
           key_col: Optional[str] = None, dialect: str = "nats", queues: str = "pick",
           explode: bool = True, *, ship: str = "auto", reuse_index: bool = True,
           shards="auto", depth="auto", dedupe: bool = False,
           image_dir: Optional[str] = None) -> DataFrame:
    """fanout(events, subscriptions, subject_col="subject", key_col=None, dialect="nats",
    queues="pick", explode=True, *, ship="auto", reuse_index=True, shards="auto",
    depth="auto", dedupe=False, image_dir=None) -> DataFrame

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
    image_dir      where the unsharded index of a subscriptions DataFrame lives:
                   an executor task builds it from the rows and saves it there
                   as an image named by a digest of the rows' content (one
                   aggregate job per call), and every Python worker maps it.
                   A later call, application or micro-batch on the same rows
                   builds nothing.  None: a directory on the executors' local
                   disk, when every executor shares a host (local mode, a
                   one-host cluster); on several hosts or Spark Connect, give
                   a directory on storage they all mount, or the index is
                   built on the driver and shipped as before (docs/spark.md,
                   "Images on the executors").  A Sublist given with image_dir
                   is saved there instead of shipped.  Not with ship= other
                   than "auto" (a DataFrame with ship= set goes the shipped way).
    ship           how an index built on the driver travels (see share_index):
                   "auto", "broadcast", "file", "artifact" or "inline".
    reuse_index    a subscriptions DataFrame's index is reused by later calls
                   with the same DataFrame object (and session, dialect, ship,
                   image_dir) without any job; as an image it is also reused by
                   calls on other DataFrames with the same rows.  False builds
                   it again (an image is rebuilt and replaced).  Re-read the
                   table (a new DataFrame) to pick up changed subscriptions.
    shards         1: one index, built once (see image_dir) and mapped or
                   shipped to every worker.
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
                               shards=shards, depth=depth, dedupe=dedupe,
                               image_dir=image_dir).deliveries

