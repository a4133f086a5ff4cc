"""The sharded fan-out over images: each shard's index is built once per
content by executor tasks and saved as an image in the image directory
(images.py's: image_dir or the executors' shared local disk), and a call
shuffles only the events (docs/spark.md, "Images on the executors").

On the driver, per call:

1. the digest job, routed: one aggregate over the subscriptions grouped
   by their shard (the route key computed in the JVM, filter_route_column;
   the replicated filters as a group of their own).  A shard's image is
   named by the content of its rows, its keyed ones plus the replicated
   ones (images.name_of: the digest's sums add up), so a change to the
   subscriptions renames only the shards it touches (every shard, for a
   replicated filter), and an unchanged shard keeps its image;
2. once per application and content (remembered, as images.py remembers
   the unsharded image): one probe task checks the shards' images in full;
3. only for shards whose image is missing or damaged: one grouped job
   routes the subscriptions (a keyed filter to its shard, a replicated one
   to every shard being built), and each group's task builds its shard's
   index and saves it under an exclusive flock (looking again once it holds
   the lock);
4. the events, grouped as sharded_per_event groups them (shard.event_side),
   each group's task maps its shard's image (kept per worker process) and
   streams the group's events through match_many.

So a call on unchanged subscriptions runs the digest job and shuffles the
events, nothing else: the subscriptions never meet the events' shuffle,
and no Python process reads them.
"""
import fcntl
import os
import threading
import time
from typing import Dict, Iterator, List

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fastsub import Sublist
from fastsub.spark.base import insert_arrow
from fastsub.spark.images import _check_dir, _image_path, _rows, digest_columns, name_of
from fastsub.spark.session import session_key
from fastsub.spark.ship import LOAD_LOG_ENV, WorkerCache
from fastsub.spark.shard import (_GROUP, _PICK, ShardPlan, _int_array, event_side,
                                  filter_route_column)

_RESULT = "shard int, status string, path string, inserts long, nsubs long"
_RESULT_SCHEMA = pa.schema([("shard", pa.int32()), ("status", pa.string()), ("path", pa.string()),
                            ("inserts", pa.int64()), ("nsubs", pa.int64())])
_ROWS_SCHEMA = pa.schema([("sub_id", pa.int64()), ("filter", pa.string()), ("queue", pa.string())])

#: Shard images a Python worker keeps mapped (least recently used out first).
#: A mapping costs address space, not memory: the pages are the page cache's.
MAPPED_MAX = 256


def _routed_shard(dialect: str, plan: ShardPlan):
    """Column: a subscription's shard, or -1 for one every shard needs."""
    key = filter_route_column(F.col("filter"), dialect, plan.depth)
    return F.when(key == -1, F.lit(-1)).otherwise(F.pmod(key, F.lit(plan.shards)))


def shard_names(subscriptions: DataFrame, dialect: str, plan: ShardPlan) -> List[str]:
    """The content name of each shard's image: one aggregate job."""
    got = {r[0]: r[1:] for r in _rows(subscriptions).groupBy(_routed_shard(dialect, plan))
           .agg(*digest_columns()).collect()}
    replicated = got.get(-1, (0,) * 5)
    return [name_of(dialect, [a + b for a, b in zip(got.get(k, (0,) * 5), replicated)])
            for k in range(plan.shards)]


def _result(shard, status, path, inserts=0, nsubs=0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"shard": [shard], "status": [status], "path": [path],
                                       "inserts": [inserts], "nsubs": [nsubs]}, schema=_RESULT_SCHEMA)


def _probe_task(image_dir, names, shards):
    """One task: each shard's image checked in full ("ok"), "missing" or
    "damaged: why"."""
    def fastsub_shard_probe(batches):
        for _ in batches:
            pass
        for k in shards:
            path = _image_path(image_dir, names[k])
            try:
                nsubs = len(Sublist.open(path, verify=True))
            except FileNotFoundError:
                yield _result(k, "missing", path)
                continue
            except (ValueError, OSError) as e:
                yield _result(k, f"damaged: {e}", path)
                continue
            yield _result(k, "ok", path, nsubs=nsubs)
    return fastsub_shard_probe


def _save_locked(path: str, force: bool, build):
    """build() -> Sublist saved at path under an exclusive flock beside it,
    unless the image is there by the time the lock is held (and not force).
    -> (status, inserts, nsubs)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if not force and os.path.exists(path):
                return "there", 0, len(Sublist.open(path, verify=False))
            sl = build()
            sl.save(path)
            return "built", sl.stats()["inserts"], len(sl)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _build_task(image_dir, names, dialect, force):
    """The function of one shard's group: its rows (shard, sub_id, filter,
    queue) become the shard's image."""
    def fastsub_shard_build(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        got = list(batches)
        shard = got[0].column("shard")[0].as_py()
        path = _image_path(image_dir, names[shard])

        def build():
            table = pa.Table.from_batches([b.select(["sub_id", "filter", "queue"]) for b in got])
            sl, bad = insert_arrow(table, dialect)
            if bad is not None:     # plan_shards checked every row before: not expected
                raise ValueError(f"fastsub: shard {shard}: subscription row {bad} is invalid")
            return sl
        t0 = time.perf_counter()
        status, inserts, nsubs = _save_locked(path, shard in force, build)
        log = os.environ.get(LOAD_LOG_ENV)
        if log and status == "built":   # as shard.py's builds: "shard-<name> <pid> <subscriptions> <seconds>"
            with open(log, "a") as f:
                f.write(f"shard-{names[shard]} {os.getpid()} {inserts} {time.perf_counter() - t0:.3f}\n")
        yield _result(shard, status, path, inserts, nsubs)
    return fastsub_shard_build


def _empty_task(image_dir, names, dialect, shards, force):
    """One task: the images of shards no subscription reaches (empty)."""
    def fastsub_shard_empty(batches):
        for _ in batches:
            pass
        for k in shards:
            path = _image_path(image_dir, names[k])
            status, inserts, nsubs = _save_locked(path, k in force, lambda: Sublist(dialect))
            yield _result(k, status, path, inserts, nsubs)
    return fastsub_shard_empty


# (session, image_dir, shard name) -> path, for shard images this driver
# found good or built.
_KNOWN: Dict[tuple, str] = {}
_KNOWN_LOCK = threading.Lock()


def shard_images(subscriptions: DataFrame, dialect: str, plan: ShardPlan, image_dir=None, *,
                 rebuild: bool = False) -> dict:
    """-> {"paths": [path of shard k's image], "built": [shards built by
    this call], "inserts": subscriptions they inserted}: every shard's
    image, built by executor tasks where it is missing or damaged (every
    one, with rebuild=True)."""
    image_dir = _check_dir(image_dir)
    spark = subscriptions.sparkSession
    names = shard_names(subscriptions, dialect, plan)
    keys = [(session_key(spark), image_dir, name) for name in names]
    with _KNOWN_LOCK:
        paths = [None if rebuild else _KNOWN.get(k) for k in keys]
    if all(paths):
        return {"paths": paths, "built": [], "inserts": 0}
    one = spark.range(1, numPartitions=1)
    unknown = [k for k, p in enumerate(paths) if p is None]
    if rebuild:
        probe = {k: {"status": "rebuild", "path": _image_path(image_dir, names[k])} for k in unknown}
    else:
        # (the shards with the same content, e.g. empty ones, share a name)
        probe = {r["shard"]: r for r in one.mapInArrow(
            _probe_task(image_dir, names, unknown), _RESULT).collect()}
    todo = sorted(k for k in unknown if probe[k]["status"] != "ok")
    force = {k for k in todo if probe[k]["status"] != "missing"}
    built = {}
    if todo:
        routed = _routed_shard(dialect, plan)
        every = _int_array(todo)
        rows = _rows(subscriptions).select(
            F.explode(F.when(routed == -1, every).otherwise(F.array(routed))).alias("shard"),
            "sub_id", "filter", "queue").where(F.col("shard").isin(todo))
        for r in rows.groupBy("shard").applyInArrow(
                _build_task(image_dir, names, dialect, force), _RESULT).collect():
            built[r["shard"]] = r
        empty = [k for k in todo if k not in built]
        if empty:
            for r in one.mapInArrow(_empty_task(image_dir, names, dialect, empty, force),
                                    _RESULT).collect():
                built[r["shard"]] = r
    for k in unknown:
        paths[k] = (built.get(k) or probe[k])["path"]
    with _KNOWN_LOCK:
        for k, p in zip(keys, paths):
            _KNOWN[k] = p
    return {"paths": paths, "built": sorted(k for k, r in built.items() if r["status"] == "built"),
            "inserts": sum(r["inserts"] for r in built.values())}


# --------------------------------------------------------------------------
# the workers: shard images mapped, kept by path
# --------------------------------------------------------------------------

# Checked in full by the driver's probe or written by a build task of this
# application: opened with the header and root block checked, and every walk
# stays inside the mapping.
_mapped = WorkerCache(MAPPED_MAX)


def _open_shard(path: str) -> Sublist:
    sl, opened = _mapped.get(path, lambda: Sublist.open(path, verify=False))
    log = os.environ.get(LOAD_LOG_ENV)
    if opened and log:
        with open(log, "a") as f:
            f.write(f"mapped-shard {os.path.basename(path)} {os.getpid()}\n")
    return sl


def _match_fn(paths: List[str], width: int, queues, dedupe, subject, event_cols, out_schema):
    def fastsub_shard_image_match(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sl = None
        for b in batches:
            if b.num_rows == 0:
                continue
            if sl is None:
                sl = _open_shard(paths[b.column(_GROUP)[0].as_py() // width])
            ids = sl.match_many(b.column(subject), keys=b.column(_PICK), queues=queues,
                                dedupe=dedupe).to_arrow()
            yield pa.RecordBatch.from_arrays([b.column(c) for c in event_cols] + [ids],
                                             schema=out_schema)
    return fastsub_shard_image_match


def image_per_event(events: DataFrame, plan: ShardPlan, paths: List[str], *, subject_col: str,
                    key_col, dialect: str, queues: str, dedupe: bool) -> DataFrame:
    """sharded_per_event's frame, from the shards' images (shard_images'
    paths): only the events are shuffled."""
    side = event_side(events, plan, subject_col=subject_col, key_col=key_col, dialect=dialect)
    fn = _match_fn(paths, plan._width, queues, dedupe, side.subject, side.safe, side.out_schema)
    return side.frame.groupBy(_GROUP).applyInArrow(fn, side.out_schema_spark) \
        .toDF(*side.event_cols, "sub_ids")
