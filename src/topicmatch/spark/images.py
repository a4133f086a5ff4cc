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

Where: image_dir, a path every executor can read and write (shared storage:
every executor and later applications map the same files), or by default a
directory on the executors' local disk (topicmatch-images-<uid> in their
temporary directory), which works only when every executor shares a host
with the build task: local mode, or a cluster whose executors all run on one
host.  Elsewhere (executors on several hosts, dynamic allocation, Spark
Connect, where the client cannot see the executors) the fan-out keeps the
index built on the driver and shipped (share_index).
"""
import fcntl
import hashlib
import logging
import os
import socket
import struct
import tempfile
import threading
import uuid
from typing import Callable, Optional, Tuple

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from topicmatch import Sublist
from topicmatch.spark.base import (bad_subscription, check_subscriptions_schema, column,
                                 insert_arrow)
from topicmatch.spark.session import is_connect, is_local_master, session_key
from topicmatch.spark.ship import LOAD_LOG_ENV, SharedIndex

#: The seeds of the digest's two row hashes (any two different values; a
#: change renames every image).
_SEEDS = (0x66617374, 0x73756273)

#: What the probe and the build task return: one row.
_RESULT = ("status string, path string, host string, inserts long, nsubs long, nbytes long, "
           "bad_row long, bad_sub_id long, bad_filter string, bad_queue string")

_log = logging.getLogger("topicmatch.spark")


def image_version() -> int:
    """The format version of the images save() writes (the u16 after the
    8-byte magic of the core's own header)."""
    if not _VERSION:
        _VERSION.append(struct.unpack_from("<H", Sublist().to_bytes(), 8)[0])
    return _VERSION[0]


_VERSION = []


#: In the executors' environment: the default image directory instead of
#: topicmatch-images-<uid> in their temporary directory.
IMAGE_DIR_ENV = "TOPICMATCH_IMAGE_DIR"


def default_image_dir() -> str:
    """The default image directory, as a task resolves it on its executor:
    $TOPICMATCH_IMAGE_DIR, or topicmatch-images-<uid> in the executor's
    temporary directory."""
    return os.environ.get(IMAGE_DIR_ENV) or os.path.join(tempfile.gettempdir(),
                                                         f"topicmatch-images-{os.getuid()}")


def _check_dir(image_dir) -> Optional[str]:
    if image_dir is None:
        return None
    if not isinstance(image_dir, (str, os.PathLike)):
        raise TypeError(f"image_dir must be a path (str), not {type(image_dir).__name__}")
    path = os.fspath(image_dir)
    if path.startswith("file://"):
        path = path[len("file://"):]
    if "://" in path or not os.path.isabs(path):
        raise ValueError(f"image_dir={path!r}: give an absolute directory path that every "
                         "executor reads as a local or mounted file system (images are mapped "
                         "with mmap; a URL such as hdfs:// or s3:// cannot be)")
    return path


# --------------------------------------------------------------------------
# where a DataFrame's index goes
# --------------------------------------------------------------------------

def use_images(spark, image_dir, ship: str) -> bool:
    """Does a subscriptions DataFrame's index go through an image (True) or
    the driver build + ship of share_index (False)?  image_dir given: yes
    (with ship="auto" only: the two are different ways for the index to
    reach the executors).  The default directory: when every executor
    shares a host (see default_dir_works)."""
    if image_dir is not None:
        check_image_dir(image_dir, ship)
        return True
    return ship == "auto" and default_dir_works(spark)


def check_image_dir(image_dir, ship: str = "auto") -> str:
    """image_dir as a path, or a clear error (TypeError, ValueError): an
    absolute directory, not a URL, and not with ship= other than "auto"."""
    path = _check_dir(image_dir)
    if ship != "auto":
        raise ValueError(f"ship={ship!r} and image_dir= are two ways for the index to reach "
                         "the executors: give one (image_dir builds it there, ship sends "
                         "the driver's)")
    return path


def default_dir_works(spark) -> bool:
    """Can the executors share images on their local disk?  A local master:
    yes.  Classic Spark on a cluster: when every registered executor runs
    on one host and dynamic allocation is off (executors added later could
    be elsewhere).  Spark Connect: no (the client cannot see the executors;
    pass image_dir)."""
    if is_connect(spark):
        return False
    sc = spark.sparkContext
    if is_local_master(sc.master):
        return True
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return False
    try:
        infos = list(sc._jsc.sc().statusTracker().getExecutorInfos())
        driver = conf.get("spark.driver.host", None)
        hosts = [i.host() for i in infos]
        # the driver is one of the entries; at least one executor besides it
        executors = [h for h in hosts if h != driver] or hosts[1:]
    except Exception:  # noqa: BLE001 - no way to see the executors
        return False
    return len(hosts) >= 2 and len(set(executors)) == 1


# --------------------------------------------------------------------------
# the digest job
# --------------------------------------------------------------------------

def index_rows(subscriptions: DataFrame) -> DataFrame:
    """sub_id (long), filter, queue (string, null when the column is absent):
    the columns an index is built from, as collect_subscriptions reads them."""
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

def _result(status, path, inserts=0, nsubs=0, nbytes=0, bad=None) -> pa.RecordBatch:
    i, sub_id, filter_, queue = bad if bad is not None else (None,) * 4
    return pa.RecordBatch.from_pydict({
        "status": [status], "path": [path], "host": [socket.gethostname()],
        "inserts": [inserts], "nsubs": [nsubs], "nbytes": [nbytes], "bad_row": [i],
        "bad_sub_id": [sub_id], "bad_filter": [filter_], "bad_queue": [queue]},
        schema=pa.schema([("status", pa.string()), ("path", pa.string()), ("host", pa.string()),
                          ("inserts", pa.int64()), ("nsubs", pa.int64()), ("nbytes", pa.int64()),
                          ("bad_row", pa.int64()), ("bad_sub_id", pa.int64()),
                          ("bad_filter", pa.string()), ("bad_queue", pa.string())]))


def _image_path(image_dir, name) -> str:
    return os.path.join(image_dir if image_dir is not None else default_image_dir(), name + ".img")


def probe_image(path: str, dialect: str) -> Tuple[str, int]:
    """Is the image at path good?  ("ok", its subscriptions) when it opens
    checked in full (Sublist.open(verify=True)) as a `dialect` index;
    ("missing", 0); or ("damaged: <why>", 0)."""
    try:
        sl = Sublist.open(path, verify=True)
    except FileNotFoundError:
        return "missing", 0
    except (ValueError, OSError) as e:
        return f"damaged: {e}", 0
    if sl.dialect != dialect:
        return f"damaged: a {sl.dialect} index under a {dialect} name", 0
    return "ok", len(sl)


class BadRow(Exception):
    """A build met a row the index refuses: args (i, sub_id, filter, queue),
    as insert_arrow gives it."""


def save_locked(path: str, force: bool, build: Callable[[], Sublist]) -> Tuple[str, int, int]:
    """build() -> a Sublist, saved at path under an exclusive flock on a lock
    file beside it, unless the image is there by the time the lock is held
    (another task built it while this one waited) and not `force` (it was
    found damaged).  -> (status "built" or "there", inserts, subscriptions).
    build() may raise BadRow, which passes through, the lock released."""
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


def build_rows(rows: pa.Table, dialect: str) -> Sublist:
    """The index of rows (sub_id, filter, queue), or BadRow for the first
    row it refuses."""
    sl, bad = insert_arrow(rows, dialect)
    if bad is not None:
        raise BadRow(*bad)
    return sl


def _probe_task(image_dir, name, dialect):
    """-> the probe: a row with status "ok" (checked in full), "missing" or
    "damaged: <why>"."""
    def topicmatch_image_probe(batches):
        for _ in batches:
            pass
        path = _image_path(image_dir, name)
        status, nsubs = probe_image(path, dialect)
        yield _result(status, path, nsubs=nsubs,
                      nbytes=os.path.getsize(path) if status == "ok" else 0)
    return topicmatch_image_probe


def _build_task(image_dir, name, dialect, force, empty):
    """-> the build: the task's rows (all of the table's, in its order; none
    when `empty`) become the image, unless it is there by the time the lock
    is held (force: rebuild it anyway, it was found damaged)."""
    schema = pa.schema([("sub_id", pa.int64()), ("filter", pa.string()), ("queue", pa.string())])

    def topicmatch_image_build(batches):
        got = [b for b in batches if not empty]
        path = _image_path(image_dir, name)
        # (Spark's batches may mark a column not null: their own schema)
        table = pa.Table.from_batches(got) if got else schema.empty_table()
        try:
            status, inserts, nsubs = save_locked(path, force, lambda: build_rows(table, dialect))
        except BadRow as e:
            yield _result("bad", path, bad=e.args)
            return
        log = os.environ.get(LOAD_LOG_ENV)
        if log and status == "built":
            with open(log, "a") as f:
                f.write(f"{name} {os.getpid()} build {inserts} {path}\n")
        yield _result(status, path, inserts=inserts, nsubs=nsubs, nbytes=os.path.getsize(path))
    return topicmatch_image_build


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------

# (session, image_dir, name) -> the probe's or the build's row, for images
# this driver found good or built: a later call on the same rows needs
# neither task.
_KNOWN = {}
_KNOWN_LOCK = threading.Lock()


def image_index(subscriptions: DataFrame, dialect: str, image_dir=None, *,
                rebuild: bool = False) -> SharedIndex:
    """The SharedIndex ("image") of `subscriptions`' rows in image_dir (None:
    the executors' default directory), built by an executor task unless an
    image of the same content is there.  rebuild=True builds it again (and
    replaces the file).  A bad row raises its error here, on the driver."""
    image_dir = _check_dir(image_dir)
    spark = subscriptions.sparkSession
    name = digest_name(subscriptions, dialect)
    key = (session_key(spark), image_dir, name)
    with _KNOWN_LOCK:
        row = None if rebuild else _KNOWN.get(key)
    inserts = 0
    if row is None:
        one = spark.range(1, numPartitions=1)
        force = rebuild
        if not rebuild:
            row = one.mapInArrow(_probe_task(image_dir, name, dialect), _RESULT).first()
            if row["status"].startswith("damaged"):
                _log.warning("topicmatch: rebuilding the image %s (%s)", row["path"], row["status"])
                force = True
        if rebuild or row["status"] != "ok":
            rows = index_rows(subscriptions).coalesce(1)
            got = rows.mapInArrow(_build_task(image_dir, name, dialect, force, False), _RESULT).collect()
            if not got:     # no partition at all: an empty table
                got = one.mapInArrow(_build_task(image_dir, name, dialect, force, True), _RESULT).collect()
            row = got[0]
            if row["status"] == "bad":
                raise bad_subscription(dialect, row["bad_sub_id"], row["bad_filter"],
                                       row["bad_queue"], row=row["bad_row"] + 1)
            inserts = row["inserts"]
        with _KNOWN_LOCK:
            _KNOWN[key] = row
    return SharedIndex(uuid.uuid4().hex, dialect, row["nbytes"], row["nsubs"], "image",
                       image_path=row["path"], digest=name, build_host=row["host"],
                       inserts=inserts)


def save_sublist(sublist: Sublist, image_dir) -> SharedIndex:
    """share_index(..., image_dir=): the driver's Sublist saved into
    image_dir (which the driver and every executor see) under a name from a
    hash of its image; an image of that name already there is checked in
    full and kept (or replaced when damaged)."""
    image_dir = _check_dir(image_dir)
    os.makedirs(image_dir, exist_ok=True)
    tmp = os.path.join(image_dir, f".topicmatch-{uuid.uuid4().hex}.saving")
    try:
        sublist.save(tmp)
        h = hashlib.blake2b(digest_size=16)
        with open(tmp, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        name = f"topicmatch-{sublist.dialect}-v{image_version()}-image-{h.hexdigest()}"
        path = _image_path(image_dir, name)
        with open(path + ".lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                try:
                    Sublist.open(path, verify=True)
                except (ValueError, OSError):   # missing or damaged: ours goes there
                    os.replace(tmp, path)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return SharedIndex(uuid.uuid4().hex, sublist.dialect, os.path.getsize(path), len(sublist),
                       "image", image_path=path, digest=name, build_host=socket.gethostname(),
                       sublist=sublist)


def image_of(sublist: Sublist, path: str, name: str) -> SharedIndex:
    """A SharedIndex over an image the driver opened (a replayed micro-batch's)."""
    return SharedIndex(uuid.uuid4().hex, sublist.dialect, os.path.getsize(path), len(sublist),
                       "image", image_path=path, digest=name, build_host=socket.gethostname(),
                       sublist=sublist)
