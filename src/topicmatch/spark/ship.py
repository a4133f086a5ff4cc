"""Shipping a Sublist to Spark's executors: the part that runs on both sides.

`SharedIndex` is what a Spark function's closure captures.  On the driver,
`topicmatch.spark.share_index` makes one and puts the serialized index where
the executors can read it; on an executor, `SharedIndex.get()` returns the
`Sublist`, loaded the first time a task of this Python worker process asks
and then kept in a module-level cache keyed by the driver-chosen id.

How the image travels (`shipped_by`):

    broadcast   classic Spark: a broadcast variable (driver + executor JVMs
                hold it; the Python worker reads it once)
    file        classic Spark: SparkContext.addFile, fetched once per
                executor to local disk, read with SparkFiles
    artifact    Spark Connect: spark.addArtifacts(path, file=True), read on
                the workers with SparkFiles (the session's artifact directory)
    inline      the bytes themselves inside the pickled closure: no round trip
                through any store, but they travel with every task's command,
                so only for small indexes
    image       nothing travels: an executor task built the index from the
                subscriptions rows and saved it as an image file in an image
                directory (topicmatch.spark.images); each Python worker maps
                that file, and every worker of a host shares its pages

This module imports neither pyspark.sql nor the JVM gateway: executors load
it quickly, and unpickling a SharedIndex costs only its own fields.
"""
import collections
import os
import threading
from typing import Tuple

from topicmatch._columns import python_array
from topicmatch._core import TopicmatchRuntimeError, TopicmatchValueError
from topicmatch import Sublist

#: Set on the executors (in local mode: in the driver's environment before the
#: session starts) to a file path, and every worker-side index load appends
#: "<index id> <pid> <shipped_by>" to it: a way to see that each Python worker
#: process loads an index once, not once per task.
LOAD_LOG_ENV = "TOPICMATCH_SPARK_LOAD_LOG"

METHODS = ("broadcast", "file", "artifact", "inline", "image")

def fork_safe_lock() -> threading.Lock:
    """A lock that a fork() never leaves held in the child: held across the
    fork (so no other thread is inside it), then released on both sides."""
    lock = threading.Lock()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=lock.acquire, after_in_parent=lock.release,
                            after_in_child=lock.release)
    return lock


class WorkerCache:
    """Indexes a Python worker keeps (least recently used out first), under
    a fork-safe lock: get(key, open) returns the kept one, or opens, keeps
    and returns a new one; `opened` says which (for the load logs)."""

    def __init__(self, max_items: int):
        self.max_items = max_items
        self._items = collections.OrderedDict()
        self._lock = fork_safe_lock()

    def get(self, key, open_fn) -> Tuple[Sublist, bool]:
        with self._lock:
            sl = self._items.get(key)
            if sl is not None:
                self._items.move_to_end(key)
                return sl, False
            sl = self._items[key] = open_fn()
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
            return sl, True


# index id (image: its digest name) -> Sublist, 4 per worker process
_cache = WorkerCache(4)


class SharedIndex:
    """A Sublist shipped to Spark's executors.

    idx.get() -> Sublist      inside any function Spark runs on executors
                              (mapPartitions, mapInArrow, arrow_udf,
                              foreachPartition, ...): loaded once per Python
                              worker process, then reused.  On the driver it
                              returns the driver's own Sublist.
    idx.index_id              the driver-chosen id (a uuid hex string)
    idx.shipped_by            "broadcast", "file", "artifact", "inline" or "image"
    idx.nbytes, idx.nsubs     size of the serialized image, subscriptions
    idx.dialect
    idx.image_path            "image": the image file the workers map
                              (None for the other methods)
    idx.digest                "image": its content name (dialect, format
                              version, row count and row digest); the
                              workers' cache key, so indexes of the same
                              rows share one mapping per worker process
    idx.inserts               "image": the subscriptions the build task
                              inserted for this SharedIndex (0 when the
                              image was there already: nothing was built)
    idx.release()             free the broadcast / the artifact's temporary file
                              (a file shipped by addFile stays until the
                              driver exits: Spark cannot withdraw it)

    Pickles small (a few hundred bytes, unless inline): the image itself is
    in the broadcast, the file or the artifact.
    """

    def __init__(self, index_id, dialect, nbytes, nsubs, shipped_by, *, broadcast=None,
                 filename=None, data=None, local_path=None, sublist=None, image_path=None,
                 digest=None, build_host=None, inserts=0, source=None):
        if shipped_by not in METHODS:
            raise TopicmatchValueError(f"unknown shipping method {shipped_by!r}")
        self.index_id, self.dialect = index_id, dialect
        self.nbytes, self.nsubs, self.shipped_by = nbytes, nsubs, shipped_by
        self._broadcast, self._filename, self._data = broadcast, filename, data
        self.image_path, self.digest, self.inserts = image_path, digest, inserts
        self._build_host = build_host     # the host whose task wrote or checked the image
        self._source = source             # a spark: image's: the driver's image server (its ticket)
        self._local_path = local_path     # driver only: the file it shipped
        self._sublist = sublist           # driver only: never pickled

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_sublist"] = None
        state["_local_path"] = None
        return state

    def get(self) -> Sublist:
        """get() -> Sublist: the index, loaded once per process."""
        if self._sublist is not None:
            return self._sublist
        sl, opened = _cache.get(self.digest if self.shipped_by == "image" else self.index_id,
                                self._open)
        log = os.environ.get(LOAD_LOG_ENV)
        if opened and log:
            with open(log, "a") as f:
                f.write(f"{self.index_id} {os.getpid()} {self.shipped_by}\n")
        return sl

    def _open(self) -> Sublist:
        """The index over the shipped image, matched in place (nothing is
        rebuilt).  A file is mapped: every Python worker of an executor
        shares its pages, and checks it once (it crossed the network
        without a checksum of Spark's).  A broadcast's blocks are
        checksummed by Spark: the bytes are trusted, an O(1) open."""
        if self.shipped_by == "broadcast":
            return Sublist.from_bytes(self._broadcast.value, verify=False)
        if self.shipped_by == "inline":
            return Sublist.from_bytes(self._data)
        if self.shipped_by == "image":
            return self._open_image()
        from pyspark import SparkFiles
        try:
            path = SparkFiles.get(self._filename)
        except Exception as e:  # noqa: BLE001 - SparkFiles outside a task
            raise TopicmatchRuntimeError(
                f"topicmatch index {self.index_id}: cannot locate {self._filename} with "
                f"SparkFiles ({e}); SharedIndex.get() reads it inside Spark tasks") from e
        try:
            return Sublist.open(path)
        except FileNotFoundError:
            raise TopicmatchRuntimeError(
                f"topicmatch index {self.index_id}: {self._filename} is not in this worker's "
                f"SparkFiles directory ({os.path.dirname(path)}); was it shipped by another "
                "session, or released?") from None

    def _open_image(self) -> Sublist:
        """The image, mapped where it is or from this host's copy
        (image_store.open_location): the task that built it wrote it with
        save() (atomic), and one that found it there checked it in full
        before the driver handed it out (images.py)."""
        from topicmatch.spark.image_store import image_home, is_remote, is_spark, open_location
        try:
            return open_location(self.image_path, image_home(), self._source)
        except FileNotFoundError:
            if is_remote(self.image_path) or is_spark(self.image_path):
                raise
            import socket
            here = socket.gethostname()
            where = ("" if here == self._build_host else
                     f" (the image was made on host {self._build_host!r}, this task runs on "
                     f"{here!r}: pass image_dir= a directory every executor shares)")
            raise TopicmatchRuntimeError(
                f"topicmatch index {self.index_id}: its image {self.image_path} is missing on this "
                f"executor{where}; was the image directory cleaned while the fan-out ran?") from None

    def release(self) -> None:
        """Free what shipping holds: the broadcast's blocks; for an artifact,
        the driver's temporary copy (the server has its own).  Tasks started
        afterwards cannot load a released broadcast (workers that already
        have the index keep their copy until it falls out of their cache).
        A file shipped with SparkContext.addFile is kept until the driver
        exits: Spark has no way to withdraw an added file, and every later
        task of the session checks each added file against its source --
        with the source gone, they all fail."""
        if self._broadcast is not None:
            try:
                self._broadcast.unpersist()
            except Exception:  # noqa: BLE001 - the session may be gone
                pass
        if self._local_path and self.shipped_by != "file":
            try:
                os.remove(self._local_path)
            except OSError:
                pass
            self._local_path = None

    def __repr__(self):
        return (f"<topicmatch SharedIndex {self.index_id}: {self.nsubs:,} subscriptions "
                f"({self.dialect}), {self.nbytes:,} bytes, by {self.shipped_by}>")


def match_batches(idx, queues, with_key, batches, dedupe=False):
    """The body of the matching arrow_udf: Arrow string arrays in, Arrow list arrays out."""
    sl = idx.get()
    for item in batches:
        if with_key:
            subjects, keys = item
            yield sl.match_many(subjects, keys=keys, queues=queues, dedupe=dedupe).to_arrow()
        else:
            yield sl.match_many(item, queues=queues, dedupe=dedupe).to_arrow()


def reject_reason(subject, checker: Sublist) -> str:
    """Why a subject was rejected, for the `error` column."""
    from topicmatch import InvalidSubjectError
    if subject is None:
        return "null subject"
    try:
        checker.match(subject)
    except InvalidSubjectError as e:
        reason = getattr(e, "reason", None) or str(e)
        pos = getattr(e, "position", None)
        return reason if pos is None else f"{reason} (at byte {pos})"
    except (TypeError, ValueError) as e:  # pragma: no cover - defensive
        return str(e)
    return "invalid subject"  # pragma: no cover - match_many and match disagree


def reject_reasons(dialect, subjects):
    import pyarrow as pa
    checker = Sublist(dialect)
    return python_array([reject_reason(s, checker) for s in subjects.to_pylist()], pa.string())


def invalid_reasons(dialect, subjects):
    """For an Arrow string array: null where the subject is valid, the reason
    where it is not.  The validity is the batch matcher's own (an empty index),
    so it agrees with match_many's invalid mask; reasons are worked out only
    for the invalid rows."""
    import numpy as np
    import pyarrow as pa
    checker = Sublist(dialect)
    bad = np.flatnonzero(checker.match_many(subjects).invalid)
    out = [None] * len(subjects)
    for i in bad.tolist():
        out[i] = reject_reason(subjects[i].as_py(), checker)
    return python_array(out, pa.string())
