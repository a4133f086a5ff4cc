"""The sharded fan-out over images: each shard's index is built once per
content by executor tasks and saved as an image in the image directory
(images.py's: image_dir or the executors' shared local disk), and a call
moves no subscription: the events are matched where they are on one host,
and only they are shuffled across hosts (docs/spark.md, "Shard images").

On the driver, per call:

1. the names: the N shards' images and one more, the replicated share's
   (the filters every shard needs: image N), each named by the content of
   its rows (images.name_of: the digest's sums add up).  The sums come
   from plan_shards' one aggregate, which sums the rows' two hashes per
   depth and route-key bucket, all in the JVM (shard.row_stats), so naming
   costs no job of its own.  A change to the subscriptions renames only
   the image it touches (a keyed filter's shard, or the replicated share),
   and every other image keeps its name;
2. once per application and content (remembered, as images.py remembers
   the unsharded image): one probe task checks the shards' images in full;
3. only for images missing or damaged: one job routes the subscriptions
   (a keyed filter to its shard, a replicated one to image N: each row to
   one image, none copied), and each image's task builds its index and
   saves it under an exclusive flock (looking again once it holds the
   lock).  The build is where this path checks the rows (a bad one
   raises on the driver, as plan_shards' check would word it): an image
   found by its content name was built from rows that passed.  Where the
   images travel through the driver (spark: locations, no image_dir on
   several hosts), each task sends the image it built or found to the
   driver as images.py's tasks do: to its inbox, which the driver then
   serves to the hosts that lack it (each fetches it when a task first
   needs it), or on Spark Connect as rows of its result, which the client
   adds to its session;
4. the match (image_per_event).  Where every executor shares one host
   (and so one page cache), in place: each task maps every image (kept
   per worker process) and matches each event by its shard's and the
   replicated share's as by one index (match_many(also=...)), with no
   shuffle and no salting sample.  Across hosts, the events are grouped
   as sharded_per_event groups them (shard.event_side, salted), each group
   shuffled into a partition of its own, so a host maps only the images
   of the groups it runs.

So a call on unchanged subscriptions runs the plan's aggregate and the
match, nothing else: no subscription is shuffled or read by Python.
"""
import logging
import os
import threading
import time
from typing import Dict, Iterator, List, Optional

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from topicmatch import Sublist
from topicmatch._columns import batch_of, int_values, numpy_as_arrow
from topicmatch.spark.base import bad_subscription
from topicmatch.spark.image_store import image_home, is_spark, location_in, open_location
from topicmatch.spark.image_inbox import as_rows, prefetch
from topicmatch.spark.images import (BadRow, _check_dir, build_at, driver_has,
                                     image_source, inbox_for, index_rows, name_of, probe_at,
                                     publish, results, rows_builder, spark_files,
                                     sublist_builder, task_file, vanished)
from topicmatch.spark.session import session_key
from topicmatch.spark.ship import LOAD_LOG_ENV, WorkerCache
from topicmatch.spark.route import image_column
from topicmatch.spark.shard import _GROUP, ShardPlan, event_side, pick_keys, row_stats

_log = logging.getLogger("topicmatch.spark")

# (part and data: a piece of an image returned to a Spark Connect client,
# image_inbox.as_rows; null in a result row)
_RESULT = ("shard int, status string, path string, inserts long, nsubs long, bad_sub_id long, "
           "bad_filter string, bad_queue string, part long, data binary")
_RESULT_SCHEMA = pa.schema([("shard", pa.int32()), ("status", pa.string()), ("path", pa.string()),
                            ("inserts", pa.int64()), ("nsubs", pa.int64()),
                            ("bad_sub_id", pa.int64()), ("bad_filter", pa.string()),
                            ("bad_queue", pa.string()), ("part", pa.int64()),
                            ("data", pa.binary())])

#: Shard images a Python worker keeps mapped (least recently used out first).
#: A mapping costs address space, not memory: the pages are the page cache's.
MAPPED_MAX = 256


def shard_names(subscriptions: DataFrame, dialect: str, plan: ShardPlan) -> List[str]:
    """The content name of each of the N shards' images, then the
    replicated share's: read from the figures of the plan's own job
    (plan.stats: the digest of every bucket of rows), or, for a plan
    without them, one aggregate job."""
    stats = plan.stats
    sums = stats.shard_sums(plan.depth, plan.shards) if stats is not None else None
    if sums is None:
        sums = row_stats(subscriptions, dialect, (plan.depth,), plan.shards).shard_sums(
            plan.depth, plan.shards)
    return [name_of(dialect, v) for v in sums]


def _result(shard, status, path, inserts=0, nsubs=0, bad=(None, None, None)) -> pa.RecordBatch:
    return batch_of({"shard": [shard], "status": [status], "path": [path], "inserts": [inserts],
                     "nsubs": [nsubs], "bad_sub_id": [bad[0]], "bad_filter": [bad[1]],
                     "bad_queue": [bad[2]]}, _RESULT_SCHEMA)


def _probe_task(locations, names, dialect, shards, ticket):
    """One task: each shard's image checked in full ("ok"), "missing" or
    "damaged: why" (images.probe_at; a spark: image found is sent to the
    driver's inbox)."""
    def topicmatch_shard_probe(batches):
        for _ in batches:
            pass
        for k in shards:
            status, path, nsubs, _ = probe_at(locations[k], names[k], dialect, ticket)
            yield from _returned(ticket, status, locations[k], names[k])
            yield _result(k, status, path, nsubs=nsubs)
    return topicmatch_shard_probe


def _build_task(locations, names, dialect, force, ticket, source=None):
    """The function of the build job's partitions: their rows (shard,
    sub_id, filter, queue) become the images of the shards in them (one per
    partition, as _placement places them).  This is where the image path
    checks its rows (plan_shards(check=False)): a row the index refuses
    comes back as status "bad", and the driver raises its error.  source
    (the driver's image server, where the executors are on several hosts):
    once its images are sent, the task's worker fetches the others as the
    driver comes to serve them (image_inbox.prefetch)."""
    def topicmatch_shard_build(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t0 = time.perf_counter()
        got = [b for b in batches if b.num_rows]
        if not got:
            return
        table = pa.Table.from_batches(got)
        received = time.perf_counter() - t0
        for shard, rows in _runs(table, int_values(table.column("shard"))):
            row = _build_one(locations, names, dialect, force, ticket, shard,
                             rows.select(["sub_id", "filter", "queue"]), received)
            if source is not None and row["status"][0].as_py() != "bad":
                prefetch(source, locations, image_home())
            yield from _returned(ticket, row["status"][0].as_py(), locations[shard], names[shard])
            yield row
    return topicmatch_shard_build


def _returned(ticket, status, location, name):
    """A Spark Connect client's image, as rows before the row that names it
    (image_inbox.as_rows); nothing for another ticket."""
    return as_rows(ticket, status, location, task_file(location, name), _RESULT_SCHEMA)


def _build_one(locations, names, dialect, force, ticket, shard, rows: pa.Table,
               received: float = 0.0) -> pa.RecordBatch:
    t0 = time.perf_counter()
    times = {}

    def build(path, durable):
        t = time.perf_counter()
        nsubs = rows_builder(rows, dialect)(path, durable)
        times["insert"] = time.perf_counter() - t
        return nsubs
    try:
        status, path, inserts, nsubs, _ = build_at(
            locations[shard], names[shard], shard in force, build, ticket, dialect=dialect,
            times=times)
    except BadRow as e:     # (its position in a shard means nothing to the caller)
        return _result(shard, "bad", locations[shard], bad=e.args[1:])
    log = os.environ.get(LOAD_LOG_ENV)
    if log and status == "built":
        # as shard.py's builds: "shard-<name> <pid> <subscriptions> <seconds>", then the
        # split: the task's rows received (all its shards'), the image built
        # (build_image: "insert" is the whole build, "save" the lock's rest), sent
        with open(log, "a") as f:
            f.write(f"shard-{names[shard]} {os.getpid()} {inserts} {time.perf_counter() - t0:.3f} "
                    f"received={received:.3f} insert={times.get('insert', 0):.3f} "
                    f"save={times.get('save', 0) - times.get('insert', 0):.3f} "
                    f"send={times.get('send', 0):.3f}\n")
    return _result(shard, status, path, inserts, nsubs)


def _murmur3_int(v: int, seed: int = 42) -> int:
    """Spark SQL's hash() of an int (Murmur3 x86 32-bit, its seed 42): the
    hash its HashPartitioning places a row by."""
    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF
    k = (v & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k = rotl(k, 15) * 0x1B873593 & 0xFFFFFFFF
    h = rotl(seed ^ k, 13)
    h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h ^= h >> 16
    h = h * 0x85EBCA6B & 0xFFFFFFFF
    h ^= h >> 13
    h = h * 0xC2B2AE35 & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def _placement(n: int) -> List[int]:
    """For each partition p of n, an int that repartition(n, column) sends
    to p: the build job gives each shard a partition of its own, with no
    sort (a grouped job would sort every row by its shard first).  Were
    Spark to place rows otherwise, a task would build two shards: slower,
    never wrong."""
    out: Dict[int, int] = {}
    v = 0
    while len(out) < n:
        out.setdefault(_murmur3_int(v) % n, v)
        v += 1
    return [out[p] for p in range(n)]


def _largest_first(todo: List[int], plan: ShardPlan) -> List[int]:
    """The images to build, the most rows first (as the plan's figures
    count them; as given without them): the build job's partitions, one an
    image, start in this order, so the longest build starts at once and
    the short ones fill the cores at the end.  (10M light filters, 2 cores:
    the builds took 10.2 s in shard order, the longest started second.)"""
    if plan.stats is None:
        return todo
    rows = list(plan.stats.counts(plan.depth, plan.shards)) + [plan.stats.replicated(plan.depth)]
    return sorted(todo, key=lambda k: (-rows[k], k))


def _empty_task(locations, names, dialect, shards, force, ticket):
    """One task: the images of shards no subscription reaches (empty)."""
    def topicmatch_shard_empty(batches):
        for _ in batches:
            pass
        for k in shards:
            status, path, inserts, nsubs, _ = build_at(
                locations[k], names[k], k in force, sublist_builder(lambda: Sublist(dialect)), ticket, dialect=dialect)
            yield from _returned(ticket, status, locations[k], names[k])
            yield _result(k, status, path, inserts, nsubs)
    return topicmatch_shard_empty


# (session, image_dir, shard name) -> path, for shard images this driver
# found good or built.
_KNOWN: Dict[tuple, str] = {}
_KNOWN_LOCK = threading.Lock()


def shard_images(subscriptions: DataFrame, dialect: str, plan: ShardPlan, image_dir=None, *,
                 rebuild: bool = False, steps: Optional[list] = None,
                 while_building=None, through_spark: Optional[bool] = None) -> dict:
    """-> {"paths": [path of image k: shard k's, then (k = N) the
    replicated share's], "built": [the images this call built],
    "inserts": subscriptions they inserted}: every image, built by executor
    tasks where it is missing or damaged (every one, with rebuild=True).
    while_building(paths): called just before the build job (when there is
    one) with the paths this returns, where every image has a location
    (not the default directory's, whose path is the executor's own): a
    location is the path build_at and probe_at return for it.
    through_spark: whether the images travel through Spark, as the
    caller's plan found it (images.spark_files); None: asked here."""
    image_dir = _check_dir(image_dir)
    spark = subscriptions.sparkSession
    steps = [] if steps is None else steps
    names = shard_names(subscriptions, dialect, plan)
    if through_spark is None:
        through_spark = spark_files(spark, image_dir)
    locations = [location_in(image_dir, name, through_spark) for name in names]
    keys = [(session_key(spark), image_dir, loc, name) for loc, name in zip(locations, names)]
    with _KNOWN_LOCK:
        paths = [None if rebuild else _KNOWN.get(k) for k in keys]
    # (deleted while the application ran: probed, and built, again)
    paths = [None if p is not None and vanished(p) else p for p in paths]
    if through_spark and not rebuild:
        # the spark: images the driver holds from an earlier call or
        # application are only added to this one: no probe, no build
        paths = [p or (locations[k] if driver_has(spark, locations[k], dialect) else None)
                 for k, p in enumerate(paths)]
    if all(paths):
        with _KNOWN_LOCK:
            for k, p in zip(keys, paths):
                _KNOWN[k] = p
        steps.append(f"no task: the {len(paths)} images (the shards' and the replicated "
                     "share's) were found or built before, by this application or its driver")
        return {"paths": paths, "built": [], "inserts": 0}
    unknown = [k for k, p in enumerate(paths) if p is None]
    before_build = None
    if while_building is not None and all(loc is not None for loc in locations):
        ahead = [p or locations[k] for k, p in enumerate(paths)]
        before_build = lambda: while_building(ahead)  # noqa: E731
    with inbox_for(spark, [locations[k] for k in unknown]) as inbox:
        probe, built = _probe_and_build(subscriptions, dialect, plan, names, locations, unknown,
                                        rebuild, inbox, probe=not through_spark,
                                        before_build=before_build)
    for k in unknown:
        paths[k] = (built.get(k) or probe[k])["path"]
    with _KNOWN_LOCK:
        for k, p in zip(keys, paths):
            _KNOWN[k] = p
    made = sorted(k for k, r in built.items() if r["status"] == "built")
    inserts = sum(r["inserts"] for r in built.values())
    if not rebuild and through_spark:
        steps.append(f"no probe task: the driver holds {len(paths) - len(unknown)} of the "
                     f"{len(paths)} images; each build task looks for its image on its own host "
                     "first (checked in full under the image's lock)")
    elif not rebuild:
        steps.append(f"probe task: {len(unknown)} of the {len(paths)} images looked for, "
                     f"{len(unknown) - len(built)} found good")
    if built:
        steps.append(f"build job: {len(built)} image(s) built from the routed rows "
                     f"({inserts:,} inserted), one task each")
    return {"paths": paths, "built": made, "inserts": inserts}


def _probe_and_build(subscriptions, dialect, plan, names, locations, unknown, rebuild, inbox,
                     probe=True, before_build=None):
    """The probe task over the unknown images, then one build job for those
    missing or damaged (and one task for the empty ones): -> ({shard: probe
    row}, {shard: build row}).  probe=False (spark: images the driver
    lacks): no probe task, whose one task would look on one host only; the
    build job's tasks look on their own hosts instead (save_locked: an
    image found there is checked in full, and built over when damaged).
    before_build(): called once the build job's query is made, just before
    it runs (after the driver's own work for it, which it would slow)."""
    spark = subscriptions.sparkSession
    ticket = inbox.ticket if inbox is not None else None
    one = spark.range(1, numPartitions=1)
    if rebuild:
        probe = {k: {"status": "rebuild", "path": locations[k]} for k in unknown}
    elif not probe:
        probe = {k: {"status": "missing", "path": locations[k]} for k in unknown}
    else:
        # (the shards with the same content, e.g. empty ones, share a name)
        t0 = time.perf_counter()
        probe = {r["shard"]: r for r in publish(results(one.mapInArrow(
            _probe_task(locations, names, dialect, unknown, ticket), _RESULT), inbox), spark, inbox)}
        _log.info("topicmatch: the probe of %d shard image(s) took %.2f s", len(unknown),
                  time.perf_counter() - t0)
    todo = sorted(k for k in unknown if probe[k]["status"] != "ok")
    force = {k for k in todo if probe[k]["status"] != "missing"}
    built = {}
    if todo:
        job = routed_rows(subscriptions, dialect, plan, todo).mapInArrow(
            # (the driver's image server where the images travel through it:
            # spark: locations, which the executors on several hosts get)
            _build_task(locations, names, dialect, force, ticket, image_source(spark, locations)),
            _RESULT)
        if before_build is not None:
            before_build()
        t0 = time.perf_counter()
        got = results(job, inbox)
        _log.info("topicmatch: the build job of %d shard image(s) took %.2f s", len(todo),
                  time.perf_counter() - t0)
        for r in publish(got, spark, inbox):
            if r["status"] == "bad":
                raise bad_subscription(dialect, r["bad_sub_id"], r["bad_filter"], r["bad_queue"])
            built[r["shard"]] = r
        empty = [k for k in todo if k not in built]
        if empty:
            for r in publish(results(one.mapInArrow(
                    _empty_task(locations, names, dialect, empty, force, ticket), _RESULT), inbox),
                    spark, inbox):
                built[r["shard"]] = r
    return probe, built


# --------------------------------------------------------------------------
# the workers: shard images mapped, kept by path
# --------------------------------------------------------------------------

# Checked in full by the driver's probe or written by a build task of this
# application: opened with the header and root block checked, and every walk
# stays inside the mapping.
_mapped = WorkerCache(MAPPED_MAX)


def _open_shard(path: str, source=None) -> Sublist:
    """Shard image `path` (a location: image_store.open_location; a spark:
    one this host lacks is fetched from `source`, the driver's image
    server), mapped once per worker process."""
    sl, opened = _mapped.get(path, lambda: open_location(path, image_home(), source))
    log = os.environ.get(LOAD_LOG_ENV)
    if opened and log:
        with open(log, "a") as f:
            f.write(f"mapped-shard {os.path.basename(path)} {os.getpid()}\n")
    return sl


def _runs(rows, keys: np.ndarray):
    """[(key, its rows)] of rows (an Arrow table or batch) split by `keys`
    (one per row): whole when they all agree, else sorted by key and sliced."""
    if (keys == keys[0]).all():
        return [(int(keys[0]), rows)]
    order = np.argsort(keys, kind="stable")
    rows, keys = rows.take(numpy_as_arrow(order.astype(np.int64), pa.int64())), keys[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(keys)) + 1))
    ends = np.concatenate((starts[1:], [len(keys)]))
    return [(int(keys[i]), rows.slice(i, j - i)) for i, j in zip(starts, ends)]


#: Rows matched together in the in-place match: Spark's Arrow batches
#: (10,000 rows by default) are gathered up to this many, so that each
#: shard's run is one match_many call a few times larger.  Split batch by
#: batch, 1M light events took 0.78 s on 3M subscriptions in four shards,
#: against 0.60 s unsharded (a call per shard per batch: 0.2 ms each);
#: gathered 10 at a time, 0.55 s, as unsharded.
MATCH_ROWS = 100_000


def _gathered(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The batches, as tables of at least `rows` rows (the last may hold
    fewer), without copying them."""
    got, n = [], 0
    for b in batches:
        if b.num_rows:
            got.append(b)
            n += b.num_rows
        if n >= rows:
            yield pa.Table.from_batches(got)
            got, n = [], 0
    if got:
        yield pa.Table.from_batches(got)


def _match_fn(paths: List[str], width: int, queues, dedupe, subject, event_cols, out_schema,
              source=None):
    """The function of the match job's partitions: each batch's events,
    matched by their shard's image and the replicated share's (paths[-1])
    as by one index.  Shuffled, a partition holds one (shard, salt) group
    (_one_per_partition); matched in place, a batch holds events of every
    shard, and each shard's run is matched by its own image."""
    def topicmatch_shard_image_match(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # (an empty replicated share: no second walk, and the shard's cache)
        replicated = _open_shard(paths[-1], source)
        replicated = replicated if len(replicated) else None
        for table in _gathered(batches, MATCH_ROWS):
            shards = int_values(table.column(_GROUP)) // width     # (groups are >= 0)
            for k, rows in _runs(table, shards):
                ids = _open_shard(paths[k], source).match_many(
                    rows.column(subject), keys=pick_keys(rows), queues=queues,
                    dedupe=dedupe, also=replicated).to_arrow()
                yield from pa.Table.from_arrays([rows.column(c) for c in event_cols] + [ids],
                                                schema=out_schema).to_batches()
    return topicmatch_shard_image_match


def routed_rows(subscriptions: DataFrame, dialect: str, plan: ShardPlan, todo: List[int]) -> DataFrame:
    """The build job's rows: each subscription with its image (`shard`:
    image_column's, the replicated share's being plan.shards), those of the
    images `todo` only, each image's rows in a partition of their own, the
    largest image's first (bench/bench_spark_shard.py's routed-in pass
    times this frame alone)."""
    rows = index_rows(subscriptions).select(
        image_column(dialect, plan.depth, plan.shards).alias("shard"), "sub_id", "filter", "queue")
    if len(todo) < plan.shards + 1:
        rows = rows.where(F.col("shard").isin(todo))
    return _one_per_partition(rows, "shard", _largest_first(todo, plan))


def _one_per_partition(frame: DataFrame, column: str, values: List[int]) -> DataFrame:
    """frame repartitioned so that the rows of each of `values` (the int
    Column `column`) have a partition of their own: no sort, as a grouped
    job would need (see _placement)."""
    place = _placement(len(values))
    slot = F.element_at(F.create_map(*[F.lit(x) for i, v in enumerate(values)
                                       for x in (v, place[i])]), F.col(column))
    return frame.repartition(len(values), slot)


def image_per_event(events: DataFrame, plan: ShardPlan, paths: List[str], *, subject_col: str,
                    key_col, dialect: str, queues: str, dedupe: bool,
                    in_place: bool = False, source=None) -> DataFrame:
    """sharded_per_event's frame, from the images (shard_images' paths:
    the N shards', then the replicated share's, which every event meets
    beside its shard's).  Shuffled (in_place=False): only the events are,
    each (shard, salt) group into a partition of its own, so a host reads
    only the images of the groups its tasks run (and the replicated
    share's).  In place: nothing is shuffled; each task maps every image
    and matches each event by its shard's -- where every executor shares
    one host, and so one page cache, moving the events buys nothing.
    source: the driver's image server, which spark: images a host lacks
    are fetched from (images.image_source)."""
    side = event_side(events, plan, subject_col=subject_col, key_col=key_col, dialect=dialect)
    fn = _match_fn(paths, plan._width, queues, dedupe, side.subject, side.safe, side.out_schema,
                   source)
    frame = side.frame if in_place else _one_per_partition(side.frame, _GROUP, plan._all_groups())
    return frame.mapInArrow(fn, side.out_schema_spark).toDF(*side.event_cols, "sub_ids")
