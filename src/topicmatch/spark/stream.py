"""Structured Streaming for topicmatch.spark: fanout_stream, one fan-out per
micro-batch (foreachBatch), with the index a micro-batch used recorded so a
replay writes the same rows (topicmatch.spark re-exports fanout_stream)."""
import hashlib
import json
import os
import re
from typing import Callable, Optional, Tuple

import pyarrow as pa
from pyspark.sql import DataFrame

from topicmatch._core import TopicmatchRuntimeError, TopicmatchTypeError, TopicmatchValueError
from topicmatch import Sublist
from topicmatch.spark.base import check_events, collect_subscriptions, expect_dataframe, type_name
from topicmatch.spark.fan_out import fanout_with_rejects, index_from_arrow, share_index
from topicmatch.spark.plan import FanoutOptions, is_sharded, options_of, plan_fanout
from topicmatch.spark.images import digest_name, image_index, image_of, use_images
from topicmatch.spark.session import session_key
from topicmatch.spark.ship import SharedIndex


class _StreamIndex:
    """The index a stream uses, refreshed between micro-batches and recorded
    per batch id, so a micro-batch replayed after a restart uses the index
    its first attempt used (and writes the same rows)."""

    def __init__(self, subscriptions, dialect, ship, state_dir, image_dir=None):
        self.source, self.dialect, self.ship = subscriptions, dialect, ship
        self.state_dir, self.image_dir = state_dir, image_dir
        os.makedirs(state_dir, exist_ok=True)
        self.digest = None          # of the subscriptions the current index holds
        self.idx = None
        self.session_id = None
        self._primed = None         # (source, _current's answer) from prime()

    def resolve(self):
        """The subscriptions of this micro-batch: the source, or what it returns."""
        return self.source() if callable(self.source) else self.source

    def _current(self, src):
        """-> (digest, None if unchanged, else the Sublist built here or, for
        a DataFrame whose index is an image, its SharedIndex)"""
        if isinstance(src, Sublist):
            if src.dialect != self.dialect:
                raise TopicmatchValueError(f"the Sublist is {src.dialect!r}, the stream asks for {self.dialect!r}")
            data = src.to_bytes()
            digest = hashlib.blake2b(data, digest_size=16).hexdigest()
            return digest, (None if digest == self.digest else Sublist.from_bytes(data))
        if not isinstance(src, DataFrame):
            raise TopicmatchTypeError("subscriptions must be a DataFrame, a Sublist, or a callable "
                            f"returning one, not {type_name(src)}")
        primed, self._primed = self._primed, None
        if primed is not None and primed[0] is src:
            return primed[1]
        if use_images(src.sparkSession, self.image_dir, self.ship):
            # the image of the rows: (its content name, its SharedIndex, or
            # None when it is the index in use)
            name = digest_name(src, self.dialect)
            if name == self.digest:
                return name, None
            idx = image_index(src, self.dialect, self.image_dir)
            return idx.digest, idx
        table = collect_subscriptions(src)
        h = hashlib.blake2b(digest_size=16)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        h.update(sink.getvalue())
        digest = h.hexdigest()
        return digest, (None if digest == self.digest else index_from_arrow(table, self.dialect))

    def prime(self, src):
        """Collect and check src now (a bad row raises here); the first
        micro-batch that resolves the same object uses what was built."""
        self._primed = (src, self._current(src))

    def _record(self, batch_id):
        return os.path.join(self.state_dir, f"batch-{batch_id}.json")

    def _image(self, digest):
        return os.path.join(self.state_dir, f"index-{digest}.bin")

    def for_batch(self, spark, batch_id, src) -> Tuple[SharedIndex, bool]:
        """-> (the SharedIndex of this micro-batch, whether it was rebuilt);
        src: what resolve() gave for it."""
        rec = self._record(batch_id)
        sl = None
        if os.path.exists(rec):                       # a replay: the recorded index
            with open(rec) as f:
                recorded = json.load(f)
            digest = recorded["index"]
            if digest != self.digest or self.session_id != session_key(spark):
                if recorded.get("image"):
                    sl = self._replayed_image(src, recorded)
                else:
                    with open(self._image(digest), "rb") as f:
                        sl = Sublist.from_bytes(f.read())
        else:
            digest, sl = self._current(src)
            record = {"batch_id": batch_id, "index": digest}
            image = sl if sl is not None else self.idx
            if isinstance(image, SharedIndex) and image.shipped_by == "image":
                record["image"] = image.image_path
            if isinstance(sl, Sublist) and not os.path.exists(self._image(digest)):
                _atomic_write(self._image(digest), sl.to_bytes())
            _atomic_write(rec, json.dumps(record).encode())
            self._prune(batch_id)
        rebuilt = sl is not None or self.idx is None or self.session_id != session_key(spark)
        if rebuilt and (isinstance(sl, SharedIndex) or (
                sl is None and isinstance(src, DataFrame) and self.idx is not None
                and self.idx.shipped_by == "image")):
            # an image: nothing to ship; one on the session of an earlier
            # SharedIndex is probed again (images' memo is per session)
            if sl is None:
                sl = image_index(src, self.dialect, self.image_dir)
            if self.idx is not None:
                self.idx.release()
            self.idx, self.digest, self.session_id = sl, digest, session_key(spark)
            return self.idx, True
        if rebuilt:
            if sl is None:
                with open(self._image(digest), "rb") as f:
                    sl = Sublist.from_bytes(f.read())
            if self.idx is not None:
                self.idx.release()
            self.idx = share_index(spark, sl, ship=self.ship, image_dir=self.image_dir)
            self.digest, self.session_id = digest, session_key(spark)
        return self.idx, rebuilt

    def _replayed_image(self, src, recorded) -> SharedIndex:
        """The image a replayed micro-batch's first attempt recorded: the
        source's, if its rows are still those; else the file, if it is still
        in the image directory (it is never written in place)."""
        if isinstance(src, DataFrame) and use_images(src.sparkSession, self.image_dir,
                                                            self.ship):
            if digest_name(src, self.dialect) == recorded["index"]:
                return image_index(src, self.dialect, self.image_dir)
        path = recorded["image"]
        try:
            sl = Sublist.open(path)
        except (OSError, ValueError) as e:
            raise TopicmatchRuntimeError(
                f"micro-batch {recorded['batch_id']} is replayed with the index its first "
                f"attempt used, the image {path}, which this driver cannot read ({e}), and the "
                "subscriptions have changed since: give fanout_stream an image_dir the driver "
                "sees (shared storage), or keep the image") from None
        return image_of(sl, path, recorded["index"])

    def _prune(self, batch_id, keep=100):
        """Forget records (and index images no record names) older than `keep` batches."""
        names = os.listdir(self.state_dir)
        used = set()
        for name in names:
            m = re.fullmatch(r"batch-(\d+)\.json", name)
            if not m:
                continue
            path = os.path.join(self.state_dir, name)
            if int(m.group(1)) < batch_id - keep:
                os.remove(path)
                continue
            with open(path) as f:
                used.add(json.load(f)["index"])
        for name in names:
            m = re.fullmatch(r"index-([0-9a-f]+)\.bin", name)
            if m and m.group(1) not in used:
                os.remove(os.path.join(self.state_dir, name))


def _atomic_write(path, data: bytes):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fanout_stream(events: DataFrame, subscriptions, out: str, checkpoint: str, *,
                  subject_col: str = "subject", key_col: Optional[str] = None,
                  dialect: str = "nats", queues: str = "pick", explode: bool = True,
                  ship: str = "auto", trigger: Optional[dict] = None,
                  on_batch: Optional[Callable] = None, query_name: Optional[str] = None,
                  state_dir: Optional[str] = None, shards="auto", depth="auto",
                  dedupe: bool = False, image_dir: Optional[str] = None,
                  options: Optional[FanoutOptions] = None):
    """fanout_stream(events, subscriptions, out, checkpoint, *, subject_col="subject",
    key_col=None, dialect="nats", queues="pick", explode=True, ship="auto",
    trigger=None, on_batch=None, query_name=None, state_dir=None, shards="auto",
    depth="auto", dedupe=False, image_dir=None, options=None) -> StreamingQuery

    Fan a streaming DataFrame out per micro-batch (foreachBatch) and write,
    for micro-batch N, Parquet directories

        out/deliveries/batch_id=N     as fanout()
        out/rejected/batch_id=N       as fanout_with_rejects().rejected
        out/counts/batch_id=N         one row: events, delivered, unmatched,
                                      rejected, deliveries, index_id, index_rebuilt

    Each directory is overwritten as a whole, so a micro-batch that Spark
    replays after a failure or a restart (same batch id, same input, and the
    index its first attempt used: recorded under state_dir) leaves exactly
    the rows of one attempt: every event is delivered exactly once.  Read
    `out/deliveries` as one table: `batch_id` is a partition column.

    subscriptions: a DataFrame, a Sublist, or a callable returning either,
    called at the start of every micro-batch (e.g. `lambda:
    spark.read.parquet(path)`, which re-reads the files).  The index is
    rebuilt and shipped again only when what it returns has changed (a hash
    of the collected table, or of the Sublist's image); a change lands
    between micro-batches, never inside one.  A plain DataFrame over files
    keeps the file listing it was created with: pass a callable to follow
    new files.

    trigger: DataStreamWriter.trigger's keywords, e.g. {"availableNow": True}
    or {"processingTime": "10 seconds"}.  on_batch(batch_id, counts, index)
    is called on the driver after a micro-batch's outputs are written; an
    exception there fails the query (the batch is replayed on restart).
    state_dir (default checkpoint/topicmatch, a local path) keeps the per-batch
    index records.  Classic Spark: foreachBatch runs on the driver.

    image_dir: as fanout().  A DataFrame's rows are digested per micro-batch
    (one aggregate job); the image of rows seen before is reused, and a
    change builds the new rows' image on an executor.  The batch record
    names the image, so a replay maps the image its first attempt used.

    shards, depth, dedupe: as fanout().  Sharded (a DataFrame source with
    shards=N, or "auto" above AUTO_SHARD_MIN_SUBS), no index passes through
    the driver: each micro-batch cogroups its events with the subscriptions
    the source gives, and the workers keep each shard's index keyed by a
    digest of its rows, so an unchanged shard is not rebuilt (a change
    rebuilds only the shards it touches).  The counts row then has
    index_id "sharded:N=..:d=.." and a null index_rebuilt, and a replayed
    micro-batch uses the subscriptions as the source gives them at the replay.

    options: a FanoutOptions carrying the fan-out's keywords at once (a
    keyword set here to other than its default overrides it), as fanout()
    takes it; its reuse_index is not used: a stream reuses what it can and
    records what each micro-batch used.  ship, with a sharded DataFrame,
    is as fanout()'s: named, the micro-batches take the cogroup."""
    opts = options_of(options, subject_col=subject_col, key_col=key_col, dialect=dialect,
                      queues=queues, explode=explode, ship=ship, shards=shards, depth=depth,
                      dedupe=dedupe, image_dir=image_dir)
    subject_col, key_col, dialect, queues = opts.subject_col, opts.key_col, opts.dialect, opts.queues
    explode, ship, shards, depth = opts.explode, opts.ship, opts.shards, opts.depth
    dedupe, image_dir = opts.dedupe, opts.image_dir
    # every keyword's check, as every fan-out makes them (each micro-batch's
    # fanout_with_rejects makes them again): a bad one fails now
    opts.check()
    expect_dataframe(events, "events")
    if not events.isStreaming:
        raise TopicmatchValueError("fanout_stream needs a streaming DataFrame (spark.readStream...); "
                         "use fanout_with_rejects for a batch one")
    if state_dir is None:
        if "://" in checkpoint and not checkpoint.startswith("file:"):
            raise TopicmatchValueError("the checkpoint is not a local path: pass state_dir= (a local "
                             "or mounted directory) for topicmatch's per-batch index records")
        state_dir = os.path.join(checkpoint.replace("file://", "").replace("file:", ""), "topicmatch")
    # Fail on a bad events table or argument now, not in the first
    # micro-batch: the checks every fan-out makes (each micro-batch's
    # fanout_with_rejects makes them again, and checks the subscriptions).
    check_events(events, subject_col, key_col, explode)
    state = _StreamIndex(subscriptions, dialect, ship, state_dir, image_dir)
    if isinstance(subscriptions, DataFrame):
        # A fixed subscriptions table is checked now, by the check its
        # micro-batches make (kept, so the first one does not repeat it); a
        # callable's tables are checked in each micro-batch.
        if is_sharded(subscriptions, shards):
            # its plan, made now and kept for the DataFrame object: the
            # first micro-batch's fan-out reuses it
            plan_fanout(subscriptions, FanoutOptions(dialect=dialect, shards=shards, depth=depth,
                                                     ship=ship, image_dir=image_dir))
        else:
            state.prime(subscriptions)
    base = out.rstrip("/")

    def run_batch(batch_df, batch_id):
        spark = batch_df.sparkSession
        src = state.resolve()
        if isinstance(src, DataFrame) and is_sharded(src, shards):
            idx, rebuilt = src, None
        else:
            idx, rebuilt = state.for_batch(spark, batch_id, src)
        res = fanout_with_rejects(batch_df, idx, subject_col, key_col, dialect, queues,
                                  explode, shards=shards, depth=depth, dedupe=dedupe,
                                  ship=ship, image_dir=image_dir).observe().persist()
        idx = res.index
        try:
            part = f"batch_id={batch_id}"
            res.deliveries.write.mode("overwrite").parquet(f"{base}/deliveries/{part}")
            res.rejected.write.mode("overwrite").parquet(f"{base}/rejected/{part}")
            c = res.observed_counts()
            row = c._asdict()
            row.update(index_id=idx.index_id,
                       index_rebuilt=None if rebuilt is None else bool(rebuilt))
            (spark.createDataFrame([row], "events long, delivered long, unmatched long, rejected "
                                   "long, deliveries long, index_id string, index_rebuilt boolean")
             .coalesce(1).write.mode("overwrite").parquet(f"{base}/counts/{part}"))
        finally:
            res.unpersist()
        if on_batch is not None:
            on_batch(batch_id, c, idx)

    w = events.writeStream.foreachBatch(run_batch).option("checkpointLocation", checkpoint)
    if query_name:
        w = w.queryName(query_name)
    if trigger:
        w = w.trigger(**trigger)
    return w.start()
