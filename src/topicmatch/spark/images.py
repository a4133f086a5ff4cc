"""Indexes built on the executors and kept as image files, named by their
content (topicmatch.spark re-exports the public names; docs/spark.md, "Images
on the executors").

The unsharded fan-out of a subscriptions DataFrame runs, on the driver:

1. the digest job: one aggregate over the rows (count, and the sums mod
   2^64 of two differently seeded xxhash64 of (sub_id, filter, queue)):
   order-independent, so a table rewritten with the same rows keeps its
   name, and one changed row changes it.  The name also carries the
   dialect and the image format version;
2. the probe task (one row): is that image in the image directory?  An
   image found there is checked in full (Sublist.open(verify=True)) once
   per application; a damaged one is rebuilt;
3. only when it is not there, the build task: the rows, in the table's
   order, go to one task (coalesce(1)), which builds the index with
   index_from_arrow's logic and save()s it (atomic), under an exclusive
   flock on a lock file beside it; after taking the lock it looks again,
   so two tasks never build the same image.  A bad row is returned, not
   raised, and the driver raises its error (base.bad_subscription).

The workers map the image (SharedIndex "image": Sublist.open, O(1)) and
keep it per process under its content name.  The driver remembers which
images it has probed or built, per session and image directory, so a later
call on the same rows runs the digest job only (and a call on the same
DataFrame object nothing: fan_out's cache).

Where (image_store.py): image_dir, a path every executor can read and
write (shared storage: every executor and later applications map the same
files) or the URI of storage the hosts share (s3://, gs://, abfs://,
hdfs://: each host fetches an image once into its local cache); or by
default a directory on the executors' local disk (topicmatch-images-<uid>
in their temporary directory).  Where the executors run on several hosts
with nothing in common, the build task also sends the image's bytes back,
and the driver serves it (image_inbox.ImageServer): each other host
fetches it once, when a task of its first needs it.

Spark Connect, with no image_dir: when the server's master is local, images
in the default directory of its one host (connect_one_host).  With a cluster
behind the server, the same spark: path, but a Connect client has no
SparkContext and is often out of the executors' reach: the build task (or
the probe task that found the image on its host) returns the image's bytes
as rows of its own result, in numbered pieces of a few MB; the client reads
the job's result as it comes (toLocalIterator, a batch at a time), writes
each image into its cache with its checksum summed as it arrives
(image_inbox.RowInbox, the inbox's own receive), and adds it to its session
with spark.addArtifacts(path, file=True), which each host fetches once and
its workers find with SparkFiles as they find an added file
(image_store.open_location).  Only a client that cannot add a file to its
session (addArtifacts without file=, before Spark Connect 3.5) builds the
index on the driver and ships it (share_index), with the reason in the
plan's explain().
"""
import contextlib
import hashlib
import time
import logging
import os
import socket
import threading
import uuid
from typing import Callable, Dict, Optional, Tuple

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from topicmatch._columns import batch_of
from topicmatch._core import IMAGE_FORMAT_VERSION, TopicmatchRuntimeError, _os_error
from topicmatch import Sublist
from topicmatch.spark.base import (bad_subscription, check_subscriptions_schema, column,
                                 image_from_arrow)
from topicmatch.spark.image_inbox import FromDriver, ImageServer, Inbox, RowInbox, as_rows, send
from topicmatch.spark.image_cache import hold, prune_quietly, touch
from topicmatch.spark.image_store import (IMAGE_DIR_ENV, cache_path,  # noqa: F401
                                          check_image_dir, default_image_dir, fetch, image_home,
                                          is_remote, is_spark, location_in, locked, private_dir,
                                          remote_exists, upload)
from topicmatch.spark.image_hosts import (check_dir_and_ship, connect_host,  # noqa: F401
                                          connect_master, connect_one_host, connect_takes_images,
                                          default_dir_works, spark_files, use_images, warn_once)
from topicmatch.spark.session import is_connect, session_key
from topicmatch.spark.ship import LOAD_LOG_ENV, SharedIndex

#: The seeds of the digest's two row hashes (any two different values; a
#: change renames every image).
_SEEDS = (0x66617374, 0x73756273)

#: What the probe and the build task return: one row per image.
#: (part and data: a piece of an image returned to a Spark Connect client,
#: image_inbox.as_rows; null in a result row)
_RESULT = ("status string, path string, host string, inserts long, nsubs long, nbytes long, "
           "bad_row long, bad_sub_id long, bad_filter string, bad_queue string, part long, "
           "data binary")

_log = logging.getLogger("topicmatch.spark")


def image_version() -> int:
    """The format version of the images save() writes (the core's
    constant)."""
    return IMAGE_FORMAT_VERSION


def _check_dir(image_dir) -> Optional[str]:
    return check_image_dir(image_dir)


# --------------------------------------------------------------------------
# the digest job
# --------------------------------------------------------------------------

#: index_rows' columns: a frame of exactly these is its own index_rows.
_INDEX_ROWS = [("sub_id", T.LongType()), ("filter", T.StringType()), ("queue", T.StringType())]


def index_rows(subscriptions: DataFrame) -> DataFrame:
    """sub_id (long), filter, queue (string, null when the column is absent):
    the columns an index is built from, as collect_subscriptions reads them.
    A frame that has exactly these columns (index_rows' own, say) is
    returned as it is: the select would change nothing, and a plan makes
    this frame once and hands it to each job that reads the rows (each
    select costs the driver the JVM's analysis of it)."""
    if [(f.name, f.dataType) for f in subscriptions.schema.fields] == _INDEX_ROWS:
        return subscriptions
    has_queue = check_subscriptions_schema(subscriptions)
    queue = column("queue").cast("string") if has_queue else F.lit(None).cast("string")
    return subscriptions.select(column("sub_id").cast("long").alias("sub_id"),
                                column("filter").alias("filter"), queue.alias("queue"))


def digest_hashes():
    """The digest's two row hashes over index_rows' frame: xxhash64 of (sub_id,
    filter, queue), once per seed."""
    cols = [F.col(c) for c in ("sub_id", "filter", "queue")]
    # xxhash64 skips a null argument: the null flags keep (a, null) and (null, a) apart.
    flags = [c.isNull() for c in cols]
    return [F.xxhash64(F.lit(seed), *cols, *flags) for seed in _SEEDS]


def digest_sums(hashes):
    """The digest's aggregate columns over rows whose digest_hashes are the
    Columns `hashes`: the row count, and per hash the sums of its high and
    low 32-bit halves.  Sums add up: the digest of a union of row sets is
    the sum of theirs (the sharded image path names each shard's image by
    its keyed rows' sums, and the replicated share's by its rows', summed
    from finer buckets)."""
    # A hash's two 32-bit halves are summed as bigints (exact up to 2^31
    # rows; a bigint sum that wraps would fail under ANSI mode, and a
    # decimal sum measured twice as slow), and put together mod 2^64 here.
    sums = [F.count(F.lit(1))]
    for h in hashes:
        sums += [F.coalesce(F.sum(F.shiftrightunsigned(h, 32)), F.lit(0)),
                 F.coalesce(F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))), F.lit(0))]
    return sums


def digest_columns():
    """The digest's aggregate columns over index_rows' frame (name_of reads them)."""
    return digest_sums(digest_hashes())


def name_of(dialect: str, sums) -> str:
    """The content name of the rows whose digest_columns are `sums` (n,
    hi1, lo1, hi2, lo2): topicmatch-<dialect>-v<format>-n<rows>-<32 hex digits>."""
    n, hi1, lo1, hi2, lo2 = (int(x) for x in sums)
    h1, h2 = (((hi << 32) + lo) % (1 << 64) for hi, lo in ((hi1, lo1), (hi2, lo2)))
    return f"topicmatch-{dialect}-v{image_version()}-n{n}-{h1:016x}{h2:016x}"


def digest_name(subscriptions: DataFrame, dialect: str) -> str:
    """The content name of the index of `subscriptions`: one aggregate job
    on the executors (name_of)."""
    return name_of(dialect, index_rows(subscriptions).agg(*digest_columns()).first())


# --------------------------------------------------------------------------
# the tasks (run on an executor)
# --------------------------------------------------------------------------

_RESULT_SCHEMA = pa.schema([
    ("status", pa.string()), ("path", pa.string()), ("host", pa.string()), ("inserts", pa.int64()),
    ("nsubs", pa.int64()), ("nbytes", pa.int64()), ("bad_row", pa.int64()),
    ("bad_sub_id", pa.int64()), ("bad_filter", pa.string()), ("bad_queue", pa.string()),
    ("part", pa.int64()), ("data", pa.binary())])


def _result(status, path, inserts=0, nsubs=0, nbytes=0, bad=None) -> pa.RecordBatch:
    i, sub_id, filter_, queue = bad if bad is not None else (None,) * 4
    return batch_of({
        "status": [status], "path": [path], "host": [socket.gethostname()],
        "inserts": [inserts], "nsubs": [nsubs], "nbytes": [nbytes], "bad_row": [i],
        "bad_sub_id": [sub_id], "bad_filter": [filter_], "bad_queue": [queue]}, _RESULT_SCHEMA)


def task_file(location: Optional[str], name: str) -> str:
    """The local file a task reads or writes for the image `name` at
    `location` (image_store): None, the executor's default directory; a
    remote or spark: image, this host's copy in that directory."""
    if location is None or is_remote(location) or is_spark(location):
        home = image_home()
        return os.path.join(home, name + ".img") if location is None else cache_path(location, home)
    return location


def _driver_path(location: Optional[str], local: str) -> str:
    """What the driver hands the workers: the location itself, or (the
    default directory) the executor's local path."""
    return local if location is None else location


def probe_at(location: Optional[str], name: str, dialect: str, ticket=None):
    """The probe of one image: (status, path for the driver, subscriptions,
    nbytes).  A remote image is fetched to this host (checked in full as it
    arrives); a spark: image found here is sent to the driver's inbox
    (ticket: image_inbox)."""
    local = task_file(location, name)
    if location is not None and is_remote(location):
        if not remote_exists(location):
            return "missing", location, 0, 0
        try:
            fetch(location, os.path.dirname(local), locked)
        except (ValueError, OSError) as e:
            return f"damaged: {e}", location, 0, 0
    status, nsubs = probe_image(local, dialect)
    ok = status == "ok"
    if ok:
        touch(local)    # used now: kept (image_cache) until the workers open and hold it
    if ok and location is not None and is_spark(location):
        send(ticket, location, local)
    return status, _driver_path(location, local), nsubs, os.path.getsize(local) if ok else 0


def build_at(location: Optional[str], name: str, force: bool, build: Callable[[str, bool], int],
             ticket=None, *, dialect: str, times: Optional[dict] = None):
    """Build (unless there, and not force; build: save_locked's) and
    publish one image: saved on this host, uploaded to a remote location,
    or sent to the driver's inbox for a spark: one (ticket: image_inbox).  -> (status, path for the
    driver, inserts, subscriptions, nbytes); BadRow passes through.
    times: a dict that gets the seconds of "save" (the build and the save
    under the lock) and "send" (the upload, or the send to the driver)."""
    t0 = time.perf_counter()
    local = task_file(location, name)
    # This host's cache (the default directory, the copy of a remote or
    # spark: image) is checked in full by the next application's probe and
    # rebuilt when damaged: no fsync there.  A directory the user named
    # (a mount every host reads) gets a durable file.
    durable = location is not None and not is_remote(location) and not is_spark(location)
    status, inserts, nsubs = save_locked(local, force, build, durable, dialect=dialect)
    t1 = time.perf_counter()
    if status == "built" and local != location:
        prune_quietly(os.path.dirname(local))   # this host's directory grew (this image is kept: recent)
    elif status == "there":
        touch(local)
    if location is not None and is_remote(location) and (
            status == "built" or force or not remote_exists(location)):
        upload(local, location)
    if location is not None and is_spark(location):
        send(ticket, location, local)
    if times is not None:
        times.update(save=t1 - t0, send=time.perf_counter() - t1)
    return status, _driver_path(location, local), inserts, nsubs, os.path.getsize(local)


def probe_image(path: str, dialect: str) -> Tuple[str, int]:
    """Is the image at path good?  ("ok", its subscriptions) when it opens
    checked in full (Sublist.open(verify=True)) as a `dialect` index;
    ("missing", 0); or ("damaged: <why>", 0)."""
    try:
        sl = Sublist.open(path, verify=True)
    except FileNotFoundError:
        return "missing", 0
    except PermissionError as e:
        # another user's image (a shared image_dir without group read):
        # reported as what it is, never as damage to rebuild over
        raise _os_error(f"topicmatch: cannot read the image {path}: {e.strerror or e}; "
                        "images in a shared image_dir must be readable by its group "
                        "(save() writes them under the umask)", kind=PermissionError) from None
    except (ValueError, OSError) as e:
        return f"damaged: {e}", 0
    if sl.dialect != dialect:
        return f"damaged: a {sl.dialect} index under a {dialect} name", 0
    return "ok", len(sl)


class BadRow(Exception):
    """A build met a row the index refuses: args (i, sub_id, filter, queue),
    as base._from_arrow gives it."""


def save_locked(path: str, force: bool, build: Callable[[str, bool], int],
                durable: bool = True, *, dialect: str) -> Tuple[str, int, int]:
    """build(path, durable) -> subscriptions, the image written at path
    (atomically: rows_builder, sublist_builder), under an exclusive lock on
    a lock file beside it (image_store.locked), unless the image is there
    by the time the lock is held (another task built it while this one
    waited) and not `force` (it was found damaged).  durable=False: written
    without the fsync, for a host's cache.  -> (status "built" or "there",
    inserts, subscriptions).  build may raise BadRow, which passes through,
    the lock released."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with locked(path):
        if not force and os.path.exists(path):
            # Another task built it while this one waited, or, in an
            # image_dir others can write, someone put a file there: it is
            # checked in full before any worker maps it (the probe checked
            # only what was there before the wait), and built over when bad.
            status, nsubs = probe_image(path, dialect)
            if status == "ok":
                return "there", 0, nsubs
            _log.warning("topicmatch: rebuilding the image %s (%s)", path, status)
        nsubs = build(path, durable)
        return "built", nsubs, nsubs        # (a new image: each subscription inserted once)


def rows_builder(rows: pa.Table, dialect: str) -> Callable[[str, bool], int]:
    """save_locked's build for rows (sub_id, filter, queue): their image
    written by build_image, straight from the Arrow columns, where
    insert_many then save() built the index and then wrote it (1M
    light-like rows: 0.57 s against 0.69 s, docs/spark.md); BadRow for the
    first row it refuses, and no file."""
    def build(path: str, durable: bool) -> int:
        nsubs, bad = image_from_arrow(rows, dialect, path, durable)
        if bad is not None:
            raise BadRow(*bad)
        return nsubs
    return build


def sublist_builder(make: Callable[[], Sublist]) -> Callable[[str, bool], int]:
    """save_locked's build for an index made in memory (an empty shard's):
    make()'s index saved."""
    def build(path: str, durable: bool) -> int:
        sl = make()
        sl.save(path, durable=durable)
        return len(sl)
    return build


def _probe_task(location, name, dialect, ticket=None):
    """-> the probe: a row with status "ok" (checked in full), "missing" or
    "damaged: <why>" (a spark: image found is sent to the driver first)."""
    def topicmatch_image_probe(batches):
        for _ in batches:
            pass
        status, path, nsubs, nbytes = probe_at(location, name, dialect, ticket)
        yield from as_rows(ticket, status, location, task_file(location, name), _RESULT_SCHEMA)
        yield _result(status, path, nsubs=nsubs, nbytes=nbytes)
    return topicmatch_image_probe


def _build_task(location, name, dialect, force, empty, ticket=None):
    """-> the build: the task's rows (all of the table's, in its order; none
    when `empty`) become the image, unless it is there by the time the lock
    is held (force: rebuild it anyway, it was found damaged)."""
    schema = pa.schema([("sub_id", pa.int64()), ("filter", pa.string()), ("queue", pa.string())])

    def topicmatch_image_build(batches):
        got = [b for b in batches if not empty]
        # (Spark's batches may mark a column not null: their own schema)
        table = pa.Table.from_batches(got) if got else schema.empty_table()
        try:
            status, path, inserts, nsubs, nbytes = build_at(
                location, name, force, rows_builder(table, dialect), ticket, dialect=dialect)
        except BadRow as e:
            yield _result("bad", location, bad=e.args)
            return
        log = os.environ.get(LOAD_LOG_ENV)
        if log and status == "built":
            with open(log, "a") as f:
                f.write(f"{name} {os.getpid()} build {inserts} {path}\n")
        yield from as_rows(ticket, status, location, task_file(location, name), _RESULT_SCHEMA)
        yield _result(status, path, inserts=inserts, nsubs=nsubs, nbytes=nbytes)
    return topicmatch_image_build


@contextlib.contextmanager
def inbox_for(spark, locations):
    """The driver's inbox (image_inbox) for this call's spark: images, on
    the driver's own address; a Spark Connect client's, which takes them
    from the rows of the tasks' results (RowInbox); None when no location
    is spark:."""
    if not any(loc is not None and is_spark(loc) for loc in locations):
        yield None
        return
    if is_connect(spark):
        yield RowInbox(driver_cache_dir())
        return
    server = serving(spark)
    # each image offered by the driver's server as soon as it is in place,
    # not when the job ends: the other hosts can fetch it meanwhile (prefetch)
    with Inbox(_driver_host(spark), driver_cache_dir(),
               on_received=lambda location, local: _offer(server, location, local)) as inbox:
        yield inbox


def results(frame: DataFrame, inbox) -> list:
    """The result rows of a probe or build job: collected, or read by the
    inbox its tasks send images to (a Connect client's takes them from the
    rows as they come)."""
    return frame.collect() if inbox is None else inbox.rows_of(frame)


def publish(rows, spark, inbox) -> list:
    """The task result rows, once every spark: image they name (built, or
    found by a probe) is in the driver's cache -- sent there by its task
    before the task ended -- and handed out: on classic Spark the inbox
    offered each to the driver's server as it arrived (inbox_for), which
    its task waited for; a Connect client's are added to its session here
    (hand_out)."""
    rows = list(rows)
    if inbox is None:
        return rows
    t0 = time.perf_counter()
    added = 0
    for r in rows:
        if r["status"] in ("ok", "built", "there") and r["path"] and is_spark(r["path"]):
            local = inbox.received(r["path"])
            if local is None:
                raise TopicmatchRuntimeError(f"topicmatch: the task that reported the image {r['path']} "
                                   "did not send it to the driver")
            if is_connect(spark):
                hand_out(spark, r["path"], local)
            added += 1
    if added:
        _log.info("topicmatch: %d image(s) received by the driver and handed out "
                  "(%.2f s after the job)", added, time.perf_counter() - t0)
    return rows


def vanished(location: str) -> bool:
    """Has an image the driver handed out gone from a directory the driver
    sees too (local mode, a shared mount)?  A path in a directory the
    driver cannot see (an executor's own disk), or may not look into
    (a Connect server's private one, the client being another user),
    cannot be told: False."""
    if is_remote(location) or is_spark(location):
        return False
    try:
        os.stat(location)
    except FileNotFoundError:
        return os.path.isdir(os.path.dirname(location))
    except OSError:
        return False
    return False


def driver_cache_dir() -> str:
    """Where the driver keeps the spark: images it adds to applications."""
    return private_dir(os.path.join(image_home(), "driver"))


# driver address -> the ImageServer of this process on it
_SERVERS: Dict[str, ImageServer] = {}
_SERVERS_LOCK = threading.Lock()


def _driver_host(spark) -> str:
    """The driver's address the executors reach (spark.driver.host).  Read
    from the context's own conf, one call into the JVM (getConf() copies
    every setting: some 40 ms a call, measured)."""
    sc = spark.sparkContext
    return sc._conf.get("spark.driver.host", None) or socket.gethostname()


def serving(spark) -> ImageServer:
    """The image server of this driver process on the session's driver
    address (spark.driver.host, which every executor reaches), started on
    first use and kept for the life of the process: a plan's images stay
    fetchable by executors that join later, and by later applications of
    the same driver process (their driver_has images)."""
    host = _driver_host(spark)
    with _SERVERS_LOCK:
        server = _SERVERS.get(host)
        if server is None:
            server = _SERVERS[host] = ImageServer(host)
        return server


def image_source(spark, locations) -> Optional[FromDriver]:
    """What the workers fetch the spark: images among `locations` from:
    this driver's image server (classic Spark), or None (no
    spark: location, or Spark Connect, whose images are the session's
    artifacts)."""
    if is_connect(spark) or not any(loc is not None and is_spark(loc) for loc in locations):
        return None
    return FromDriver(serving(spark).ticket)


def hand_out(spark, location: str, local: str) -> None:
    """Make the driver's checked copy `local` of the spark: image
    `location` reachable by every executor: on classic Spark, served by
    this process's image server (each host fetches it when a task of its
    first needs it, and only a host that lacks it); on Spark Connect,
    added to the session (add_file).  Held while the driver lives (never
    evicted from its cache): a later executor may still fetch it."""
    if is_connect(spark):
        add_file(spark, local)
        return
    _offer(serving(spark), location, local)


def _offer(server: ImageServer, location: str, local: str) -> None:
    server.offer(location, local)
    hold(local)


_ADDED = set()


def add_file(spark, path: str) -> None:
    """On Spark Connect: the file at path added to the session, once per
    session and path (spark.addArtifacts(path, file=True)), the session's
    files, which its tasks find with SparkFiles as they find an added file
    (image_store.spark_file).  (Classic Spark's images are served by the
    driver instead: hand_out.)"""
    key = (session_key(spark), path)
    if key not in _ADDED:
        spark.addArtifacts(path, file=True)
        _ADDED.add(key)
        # Spark checks an added file against its source for every later
        # task of the session: held while the driver lives, never evicted
        hold(path)


def driver_has(spark, location: str, dialect: str) -> bool:
    """Does the driver hold a good copy of a spark: image (from an earlier
    call or application)?  Then it is only added to this application: no
    probe, no build."""
    local = cache_path(location, driver_cache_dir())
    if probe_image(local, dialect)[0] != "ok":
        return False
    hand_out(spark, location, local)
    return True


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------

# (session, image_dir, name) -> the probe's or the build's row, for images
# this driver found good or built: a later call on the same rows needs
# neither task.
_KNOWN = {}
_KNOWN_LOCK = threading.Lock()


def image_index(subscriptions: DataFrame, dialect: str, image_dir=None, *,
                rebuild: bool = False, name: Optional[str] = None,
                steps: Optional[list] = None,
                through_spark: Optional[bool] = None) -> SharedIndex:
    """The SharedIndex ("image") of `subscriptions`' rows in image_dir (None:
    the executors' default directory), built by an executor task unless an
    image of the same content is there.  rebuild=True builds it again (and
    replaces the file).  A bad row raises its error here, on the driver.
    name: the rows' content name when the caller ran the digest already
    (the plan's first job); steps: a list each job run is told to, in
    words (the plan's explain()); through_spark: whether the image travels
    through Spark, as the caller's plan found it (spark_files); None: asked
    here."""
    image_dir = _check_dir(image_dir)
    spark = subscriptions.sparkSession
    steps = [] if steps is None else steps
    if name is None:
        name = digest_name(subscriptions, dialect)
        steps.append("digest job: one aggregate over the rows names the image by its content")
    if through_spark is None:
        through_spark = spark_files(spark, image_dir)
    location = location_in(image_dir, name, through_spark)
    key = (session_key(spark), image_dir, location, name)
    with _KNOWN_LOCK:
        row = None if rebuild else _KNOWN.get(key)
    if row is not None and vanished(row["path"]):
        row = None      # deleted while the application ran (a /tmp cleaner): probed again
    inserts = 0
    if row is None and not rebuild and location is not None and is_spark(location) \
            and driver_has(spark, location, dialect):
        # the driver holds it from an earlier call or application: added, no job
        local = cache_path(location, driver_cache_dir())
        row = {"path": location, "nbytes": os.path.getsize(local),
               "nsubs": len(Sublist.open(local, verify=False)), "host": socket.gethostname()}
        steps.append("no task: the driver holds this image from an earlier call or application, "
                     "checked in full, and adds it to this one")
    elif row is not None:
        steps.append("no task: this application found or built this image before")
    if row is None:
        with inbox_for(spark, [location]) as inbox:
            row, inserts = _probe_or_build(subscriptions, dialect, location, name, rebuild, inbox,
                                           steps)
        with _KNOWN_LOCK:
            _KNOWN[key] = row
    return SharedIndex(uuid.uuid4().hex, dialect, row["nbytes"], row["nsubs"], "image",
                       image_path=row["path"], digest=name, build_host=row["host"],
                       inserts=inserts, source=image_source(spark, [row["path"]]))


def _probe_or_build(subscriptions, dialect, location, name, rebuild, inbox, steps):
    """The probe task, then (missing, damaged, or rebuild) the build task:
    -> (their row, subscriptions inserted); each told to `steps`."""
    spark = subscriptions.sparkSession
    ticket = inbox.ticket if inbox is not None else None
    one = spark.range(1, numPartitions=1)
    force = rebuild
    inserts = 0
    row = None
    if not rebuild and location is not None and is_spark(location):
        # (the driver lacks it: a probe task would look on one host only;
        # the build task looks on its own, checking in full what it finds)
        steps.append("no probe task: the driver lacks this image; the build task looks for it "
                     "on its own host first (checked in full under the image's lock)")
    elif not rebuild:
        row = publish(results(one.mapInArrow(_probe_task(location, name, dialect, ticket), _RESULT),
                              inbox), spark, inbox)[0]
        steps.append(f"probe task: the image is {row['status']} at {row['path']}")
        if row["status"].startswith("damaged"):
            _log.warning("topicmatch: rebuilding the image %s (%s)", row["path"], row["status"])
            force = True
    if row is None or row["status"] != "ok":
        rows = index_rows(subscriptions).coalesce(1)
        got = results(rows.mapInArrow(_build_task(location, name, dialect, force, False, ticket),
                                      _RESULT), inbox)
        if not got:     # no partition at all: an empty table
            got = results(one.mapInArrow(_build_task(location, name, dialect, force, True, ticket),
                                         _RESULT), inbox)
        row = publish(got, spark, inbox)[0]
        if row["status"] == "bad":
            raise bad_subscription(dialect, row["bad_sub_id"], row["bad_filter"],
                                   row["bad_queue"], row=row["bad_row"] + 1)
        inserts = row["inserts"]
        if row["status"] == "there":
            steps.append(f"build task: the image was on its host already, checked in full, "
                         f"{row['nbytes']:,} bytes at {row['path']}")
        else:
            steps.append(f"build task: the rows in one task, {inserts:,} inserted, "
                         f"{row['nbytes']:,} bytes saved at {row['path']}")
    return row, inserts


def save_sublist(sublist: Sublist, image_dir) -> SharedIndex:
    """share_index(..., image_dir=): the driver's Sublist saved into
    image_dir (which the driver and every executor see, or storage they
    share: uploaded there) under a name from a hash of its image; an image
    of that name already there is checked in full and kept (or replaced
    when damaged)."""
    image_dir = _check_dir(image_dir)
    remote = is_remote(image_dir)
    home = driver_cache_dir() if remote else image_dir
    os.makedirs(home, exist_ok=True)
    tmp = os.path.join(home, f".topicmatch-{uuid.uuid4().hex}.saving")
    try:
        sublist.save(tmp)
        h = hashlib.blake2b(digest_size=16)
        with open(tmp, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        name = f"topicmatch-{sublist.dialect}-v{image_version()}-image-{h.hexdigest()}"
        path = location_in(image_dir, name, False)
        local = cache_path(path, home) if remote else path
        with locked(local):
            try:
                Sublist.open(local, verify=True)
            except (ValueError, OSError):   # missing or damaged: ours goes there
                os.replace(tmp, local)
        if remote and not remote_exists(path):
            upload(local, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return SharedIndex(uuid.uuid4().hex, sublist.dialect, os.path.getsize(local), len(sublist),
                       "image", image_path=path, digest=name, build_host=socket.gethostname(),
                       sublist=sublist)


def image_of(sublist: Sublist, path: str, name: str) -> SharedIndex:
    """A SharedIndex over an image the driver opened (a replayed micro-batch's)."""
    return SharedIndex(uuid.uuid4().hex, sublist.dialect, os.path.getsize(path), len(sublist),
                       "image", image_path=path, digest=name, build_host=socket.gethostname(),
                       sublist=sublist)
