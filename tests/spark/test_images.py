"""The unsharded index of a subscriptions DataFrame as an image built on the
executors (topicmatch.spark.images): named by its rows' content, built at most
once per name and image directory (counted by the build task's insert
counter and the build lines of the load log), mapped by the workers (their
own insert counters stay at 0), rebuilt when damaged, and the same rows as
the index built on the driver."""
import os
import threading

import pyarrow as pa
import pytest

import topicmatch
from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, Expected, events_rows, random_case

pytestmark = pytest.mark.spark

SUBS, SUBJECTS = random_case("nats", n_subs=60, n_events=300, seed=51)


def _builds(load_log, idx):
    """The build lines the build task wrote for idx's image: [inserts]."""
    if not os.path.exists(load_log):
        return []
    with open(load_log) as f:
        lines = [ln.split(" ", 4) for ln in f]
    return [int(ln[3]) for ln in lines if len(ln) == 5 and ln[2] == "build"
            and (ln[0], ln[4].rstrip("\n")) == (idx.digest, idx.image_path)]


def _pairs(df):
    return sorted((r["event_id"], r["sub_id"]) for r in df.select("event_id", "sub_id").collect())


def _worker_inserts(spark, idx):
    """Sublist.stats()["inserts"] of the index as the workers have it."""
    def probe(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"inserts": [idx.get().stats()["inserts"]]})
    return [r[0] for r in spark.range(4, numPartitions=4).mapInArrow(probe, "inserts long").collect()]


@pytest.fixture
def frames(spark):
    ev = spark.createDataFrame(events_rows(SUBJECTS), EVENT_SCHEMA).repartition(3)
    return ev, (lambda rows=SUBS: spark.createDataFrame(rows, SUBS_SCHEMA))


def test_built_once_per_content(spark, frames, tmp_path, load_log):
    from topicmatch.spark import fanout_with_rejects
    ev, subs = frames
    d = str(tmp_path / "images")
    exp = Expected("nats", SUBS, events_rows(SUBJECTS))
    want = sorted((e, s) for e in exp.plain for s in exp.ids(e, "all"))

    sb = subs()
    a = fanout_with_rejects(ev, sb, queues="all", image_dir=d)
    assert a.index.shipped_by == "image" and a.index.image_path.startswith(d)
    assert a.index.inserts == len(SUBS) == a.index.nsubs
    assert _builds(load_log, a.index) == [len(SUBS)]
    assert _pairs(a.deliveries) == want
    assert _worker_inserts(spark, a.index) == [0] * 4      # mapped, not built, on the workers

    # the same DataFrame object: the same index, no job
    assert fanout_with_rejects(ev, sb, queues="all", image_dir=d).index is a.index
    # a DataFrame made anew with the same rows, in another order: same image, nothing built
    b = fanout_with_rejects(ev, subs(list(reversed(SUBS))), queues="all", image_dir=d)
    assert (b.index.digest, b.index.image_path, b.index.inserts) == (a.index.digest, a.index.image_path, 0)
    assert b.index.index_id != a.index.index_id
    assert _pairs(b.deliveries) == want
    # a Parquet table written twice, with other files: same rows, same image
    for k, parts in enumerate((1, 3)):
        path = str(tmp_path / f"subs-{k}.parquet")
        subs().repartition(parts).write.parquet(path)
        r = fanout_with_rejects(ev, spark.read.parquet(path), queues="all", image_dir=d)
        assert (r.index.digest, r.index.inserts) == (a.index.digest, 0)
    assert _builds(load_log, a.index) == [len(SUBS)]

    # one changed row: another image, built once
    changed = [(SUBS[0][0], SUBS[0][1] + ".x", SUBS[0][2])] + SUBS[1:]
    c = fanout_with_rejects(ev, subs(changed), queues="all", image_dir=d)
    assert c.index.digest != a.index.digest and c.index.inserts == len(SUBS)
    exp_c = Expected("nats", changed, events_rows(SUBJECTS))
    assert _pairs(c.deliveries) == sorted((e, s) for e in exp_c.plain for s in exp_c.ids(e, "all"))
    # a null queue or a queue where there was none: also another name
    q = [(SUBS[0][0], SUBS[0][1], "g" if SUBS[0][2] is None else None)] + SUBS[1:]
    assert fanout_with_rejects(ev, subs(q), image_dir=d).index.digest not in (a.index.digest,
                                                                               c.index.digest)


def test_a_new_application_reuses_the_images(spark, frames, tmp_path, load_log, monkeypatch):
    """The driver's memo of the images it built or checked is what a new
    application lacks: without it, the probe task finds the image (checked in
    full) and nothing is built; a damaged one is rebuilt, never used."""
    from topicmatch.spark import fanout, fanout_with_rejects, images
    ev, subs = frames
    d = str(tmp_path / "images")
    a = fanout_with_rejects(ev, subs(), image_dir=d).index
    monkeypatch.setattr(images, "_KNOWN", {})
    b = fanout_with_rejects(ev, subs(), image_dir=d).index
    assert (b.digest, b.inserts) == (a.digest, 0)
    assert _builds(load_log, a) == [len(SUBS)]

    want = _pairs(fanout(ev, topicmatch.spark.build_index(subs())))
    with open(a.image_path, "r+b") as f:            # damage the payload
        f.seek(2000)
        byte = f.read(1)
        f.seek(2000)
        f.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(images, "_KNOWN", {})
    r = fanout_with_rejects(ev, subs(), image_dir=d)
    assert (r.index.digest, r.index.inserts) == (a.digest, len(SUBS))
    assert _builds(load_log, a) == [len(SUBS)] * 2
    topicmatch.Sublist.open(a.image_path)              # a good image again
    assert _pairs(r.deliveries) == want


def test_a_deleted_image_is_built_again(spark, frames, tmp_path, load_log):
    """An image removed while the application runs (a /tmp cleaner) is built
    again by the next call -- on the same DataFrame object too, whose index
    the fan-out keeps -- never reported missing by every later call."""
    from topicmatch.spark import fanout_with_rejects
    ev, subs = frames
    d = str(tmp_path / "images")
    df = subs()
    a = fanout_with_rejects(ev, df, image_dir=d)
    want = _pairs(a.deliveries)
    os.remove(a.index.image_path)
    for frame in (df, subs()):
        r = fanout_with_rejects(ev, frame, image_dir=d)
        assert r.index.image_path == a.index.image_path and os.path.exists(r.index.image_path)
        assert _pairs(r.deliveries) == want
    assert _builds(load_log, a.index) == [len(SUBS)] * 2


def test_the_default_directory_in_local_mode(spark, frames):
    from topicmatch.spark import default_image_dir, fanout_with_rejects
    ev, subs = frames
    r = fanout_with_rejects(ev, subs())
    assert r.index.shipped_by == "image"
    assert os.path.dirname(r.index.image_path) == default_image_dir()
    # ship= named: the index is built on the driver and shipped, as before
    assert fanout_with_rejects(ev, subs(), ship="broadcast").index.shipped_by == "broadcast"


def test_bad_rows_raise_on_the_driver(spark, tmp_path):
    from topicmatch.spark import FanoutInputError, fanout
    ev = spark.createDataFrame([(1, "a.b", None, "p")], EVENT_SCHEMA)
    d = str(tmp_path / "images")
    with pytest.raises(topicmatch.InvalidSubjectError,
                       match=r"^subscriptions row 3 \(sub_id=3, queue='q'\): invalid filter 'a\.\.b': empty token"):
        fanout(ev, spark.createDataFrame([(1, "a.*", None), (2, "b.>", None), (3, "a..b", "q")],
                                         SUBS_SCHEMA), image_dir=d)
    with pytest.raises(FanoutInputError, match=r"^subscriptions row 2 \(sub_id=None, filter='b'\): null sub_id"):
        fanout(ev, spark.createDataFrame([(1, "a", None), (None, "b", None)], SUBS_SCHEMA), image_dir=d)
    assert not [n for n in os.listdir(d) if n.endswith(".img")]     # nothing saved
    # an empty table is an empty index
    r = fanout(ev, spark.createDataFrame([], SUBS_SCHEMA), image_dir=d, explode=False)
    assert [list(x["sub_ids"]) for x in r.collect()] == [[]]


def test_image_dir_errors(spark, frames, tmp_path):
    from topicmatch.spark import fanout, share_index
    ev, subs = frames
    with pytest.raises(ValueError, match="absolute directory path"):
        fanout(ev, subs(), image_dir="relative/dir")
    with pytest.raises(ValueError, match="absolute directory path every executor"):
        fanout(ev, subs(), image_dir="ftp://nn/images")
    with pytest.raises(ValueError, match="absolute directory path every executor"):
        fanout(ev, subs(), image_dir="s3://")
    # a storage scheme the hosts may share: refused only when no client is here
    with pytest.raises(ValueError, match="pyarrow.fs cannot reach it"):
        fanout(ev, subs(), image_dir="hdfs://127.0.0.1:1/images")
    with pytest.raises(ValueError, match="ship='file' and image_dir= are two ways"):
        fanout(ev, subs(), ship="file", image_dir=str(tmp_path))
    with pytest.raises(TypeError, match="image_dir must be a path"):
        share_index(spark, topicmatch.Sublist(), image_dir=3)


def test_share_index_into_an_image_dir(spark, frames, tmp_path, load_log):
    from topicmatch.spark import build_index, fanout, share_index
    ev, subs = frames
    d = str(tmp_path / "images")
    sl = build_index(subs())
    idx = share_index(spark, sl, image_dir=d)
    assert idx.shipped_by == "image" and os.path.dirname(idx.image_path) == d and idx.get() is sl
    again = share_index(spark, sl, image_dir=d)
    assert again.image_path == idx.image_path and len(os.listdir(d)) == 2   # the image + its lock
    assert _pairs(fanout(ev, idx)) == _pairs(fanout(ev, sl))
    # a DataFrame: its rows' image, reused by a fan-out on the same rows
    di = share_index(spark, subs(), image_dir=d)
    assert di.inserts == len(SUBS)
    assert fanout_with_rejects_index(ev, subs(), d).inserts == 0
    with pytest.raises(ValueError, match="share_index was given dialect='mqtt'"):
        share_index(spark, sl, dialect="mqtt")


def fanout_with_rejects_index(ev, sb, d):
    from topicmatch.spark import fanout_with_rejects
    return fanout_with_rejects(ev, sb, image_dir=d).index


def test_two_tasks_never_build_one_image(tmp_path):
    """The build under the lock: of two tasks at once, one builds, the other
    finds the image when it gets the lock."""
    from topicmatch.spark.images import _build_task
    table = pa.table({"sub_id": pa.array([i for i, _, _ in SUBS], pa.int64()),
                      "filter": [f for _, f, _ in SUBS], "queue": [q for _, _, q in SUBS]})
    at = str(tmp_path / "topicmatch-nats-test.img")      # (a location: image_store)
    out = []
    go = threading.Barrier(2)

    def task():
        go.wait()
        out.extend(_build_task(at, "topicmatch-nats-test", "nats", False, False)(iter(table.to_batches())))

    threads = [threading.Thread(target=task) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(b.column("status")[0].as_py() for b in out) == ["built", "there"]
    assert sorted(b.column("inserts")[0].as_py() for b in out) == [0, len(SUBS)]


def test_stream_builds_once_per_content(spark, tmp_path, load_log):
    """Micro-batches on unchanged subscriptions build nothing, and neither
    does a new stream (a restart, a new application) on the same image_dir."""
    import json

    from topicmatch.spark import fanout_stream
    d = str(tmp_path / "images")
    inp = tmp_path / "in"
    inp.mkdir()
    rows = events_rows(SUBJECTS)
    cols = ["event_id", "subject", "device", "payload"]
    for k in range(3):
        with open(inp / f"events-{k}.json", "w") as f:
            for r in rows[k * 100:(k + 1) * 100]:
                f.write(json.dumps(dict(zip(cols, r))) + "\n")
    ids = []
    for run in range(2):
        stream = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
        q = fanout_stream(stream, lambda: spark.createDataFrame(SUBS, SUBS_SCHEMA),
                          str(tmp_path / f"out-{run}"), str(tmp_path / f"ckpt-{run}"),
                          queues="all", trigger={"availableNow": True}, image_dir=d,
                          on_batch=lambda b, c, idx: ids.append(idx))
        q.awaitTermination(300)
        assert q.exception() is None
    assert len(ids) == 6 and len({(i.digest, i.image_path) for i in ids}) == 1
    # one SharedIndex per stream (the micro-batches keep it): built by the first
    assert [i.inserts for i in ids] == [len(SUBS)] * 3 + [0] * 3
    assert len({i.index_id for i in ids[:3]}) == len({i.index_id for i in ids[3:]}) == 1
    assert _builds(load_log, ids[0]) == [len(SUBS)]
    import pyarrow.parquet as pq
    exp = Expected("nats", SUBS, rows)
    want = sorted((e, s) for e in exp.plain for s in exp.ids(e, "all"))
    for run in range(2):
        got = pq.read_table(str(tmp_path / f"out-{run}" / "deliveries")).to_pylist()
        assert sorted((r["event_id"], r["sub_id"]) for r in got) == want


class _Info:
    def __init__(self, host):
        self._host = host

    def host(self):
        return self._host


class _FakeSession:
    """What default_dir_works reads of a classic session: the master, the
    context's own conf (_conf: getConf() would copy it) and the status
    tracker's executors (the driver's entry first)."""

    def __init__(self, master, hosts, dynamic="false"):
        from types import SimpleNamespace as NS
        conf = {"spark.driver.host": "driver-host", "spark.dynamicAllocation.enabled": dynamic}
        tracker = NS(getExecutorInfos=lambda: [_Info(h) for h in hosts])
        self.sparkContext = NS(master=master, _conf=NS(get=lambda k, d=None: conf.get(k, d)),
                               _jsc=NS(sc=lambda: NS(statusTracker=lambda: tracker)))


@pytest.mark.parametrize("master, hosts, dynamic, works", [
    ("local[2]", [], "false", True),
    ("spark://m:7077", ["driver-host", "w1", "w1"], "false", True),       # one host
    ("spark://m:7077", ["driver-host", "w1", "w2"], "false", False),      # several hosts
    ("spark://m:7077", ["driver-host", "w1"], "true", False),             # executors may come and go
    ("spark://m:7077", ["driver-host"], "false", False),                  # none registered yet
    ("yarn", ["driver-host", "driver-host"], "false", True),              # beside the driver
])
def test_where_the_default_directory_works(master, hosts, dynamic, works):
    from topicmatch.spark.images import default_dir_works, spark_files, use_images
    s = _FakeSession(master, hosts, dynamic)
    assert default_dir_works(s) is works
    # images on every classic cluster: where the executors share no host,
    # they travel through Spark (spark: locations)
    assert use_images(s, None, "auto") is True
    assert spark_files(s, None) is not works
    assert spark_files(s, "/mnt/shared/images") is False
    assert use_images(s, None, "broadcast") is False
    assert use_images(s, "/mnt/shared/images", "auto") is True


def test_the_digest_is_the_sum_of_the_row_hashes(spark):
    """The name's digest: the sums mod 2^64 of Spark's own seeded xxhash64
    per row (the job adds 32-bit halves as bigints), any row order."""
    from pyspark.sql import functions as F

    from topicmatch.spark import images
    rows = [(1, "a.b", None), (2, "c.*", "q"), (3, "x", None), (-5, "y.>", "")]
    df = spark.createDataFrame(rows, SUBS_SCHEMA)
    cols = [F.col(c) for c in ("sub_id", "filter", "queue")]
    flags = [c.isNull() for c in cols]
    hashes = [df.select(F.xxhash64(F.lit(s), *cols, *flags)).collect() for s in images._SEEDS]
    digest = "".join(f"{sum(r[0] % (1 << 64) for r in h) % (1 << 64):016x}" for h in hashes)
    assert images.digest_name(df, "nats") == f"topicmatch-nats-v{images.image_version()}-n4-{digest}"
    assert images.digest_name(spark.createDataFrame(rows[::-1], SUBS_SCHEMA), "nats") == \
        images.digest_name(df, "nats")
    assert images.digest_name(df, "mqtt") != images.digest_name(df, "nats")
    assert images.image_version() == topicmatch.Sublist().to_bytes()[8]


def test_index_rows_of_a_frame_in_its_shape_is_that_frame(spark):
    """index_rows selects the columns an index is built from (sub_id as a
    long, a null queue where the column is absent); a frame that has
    exactly those is returned as it is, so a plan that made it once hands
    it to each of its jobs with no select of its own."""
    from pyspark.sql import functions as F

    from topicmatch.spark.images import index_rows
    sdf = spark.createDataFrame([(1, "a.b", None), (2, "c", "q")], SUBS_SCHEMA)
    rows = index_rows(sdf.select(F.col("sub_id").cast("int").alias("sub_id"), "filter"))
    assert [(f.name, f.dataType.simpleString()) for f in rows.schema.fields] == [
        ("sub_id", "bigint"), ("filter", "string"), ("queue", "string")]
    assert sorted(map(tuple, rows.collect())) == [(1, "a.b", None), (2, "c", None)]
    assert index_rows(rows) is rows and index_rows(sdf) is sdf
    # another order or another column is selected again
    assert index_rows(sdf.select("filter", "sub_id", "queue")).columns == ["sub_id", "filter", "queue"]
    assert index_rows(sdf.withColumn("x", F.lit(1))).columns == ["sub_id", "filter", "queue"]


def test_rows_from_columns_spark_marks_not_null(spark, tmp_path):
    """spark.range's id is `not null` in the task's Arrow batches."""
    from pyspark.sql import functions as F

    from topicmatch.spark import fanout
    ev = spark.createDataFrame(events_rows(["a.b", "c"]), EVENT_SCHEMA)
    sb = spark.range(1, 4).select(F.col("id").alias("sub_id"), F.lit("a.>").alias("filter"))
    assert sorted(r["sub_id"] for r in fanout(ev, sb, image_dir=str(tmp_path)).collect()) == [1, 2, 3]


class _FakeConnect:
    """What the plan reads of a Spark Connect session: its id, the server's
    master, and addArtifacts (with file=: Spark Connect 3.5+, or without)."""

    def __init__(self, master, file_param=True):
        from types import SimpleNamespace as NS
        self.session_id = f"fake-{id(self)}"
        self.conf = NS(get=lambda k, d=None: master if k == "spark.master" else d)
        self.added = []
        if file_param:
            self.addArtifacts = lambda *paths, pyfile=False, archive=False, file=False: \
                self.added.append((paths, file))
        else:
            self.addArtifacts = lambda *paths, pyfile=False, archive=False: None


_FakeConnect.__module__ = "pyspark.sql.connect.session"


@pytest.mark.parametrize("master, file_param, images, through_spark, why", [
    ("spark://m:7077", True, True, True, "returned to this client as rows"),
    ("spark://m:7077", False, False, True, "built on the driver and shipped"),
    ("local[2]", True, True, False, "reported one host (h:/d)"),
])
def test_connect_decides_images_by_the_servers_master(monkeypatch, master, file_param, images,
                                                      through_spark, why):
    """Spark Connect with no image_dir: a local master's executors share the
    host the probe task reported (the default directory); a cluster's may
    not, and the images travel through Spark, returned to the client as
    rows and added to its session; a client whose addArtifacts cannot add
    a file builds the index on the driver, and the plan says why."""
    from topicmatch.spark import image_hosts as im
    from topicmatch.spark.plan import FanoutOptions, _images_why
    # (the local master's probe task, as the server would answer it)
    monkeypatch.setattr(im, "_ask_connect", lambda s: (True, "h:/d", master)
                        if master.startswith("local") else (False, None, master))
    s = _FakeConnect(master, file_param)
    assert im.use_images(s, None, "auto") is images
    assert im.spark_files(s, None) is through_spark
    got, text, through = _images_why(s, FanoutOptions())
    assert got is images and why in text, text
    assert through is (through_spark and images)
    if through_spark and images:
        assert repr(master) in text
    # image_dir given: images there, whatever the server
    assert _images_why(s, FanoutOptions(image_dir="/mnt/shared"))[0] is True


def test_connect_adds_an_image_to_its_session_once(tmp_path):
    """images.add_file on Spark Connect: spark.addArtifacts(path,
    file=True), once per session and path."""
    from topicmatch.spark.images import add_file
    path = tmp_path / "topicmatch-nats-x.img"
    topicmatch.Sublist().save(str(path))
    s = _FakeConnect("spark://m:7077")
    add_file(s, str(path))
    add_file(s, str(path))
    assert s.added == [((str(path),), True)]
    other = _FakeConnect("spark://m:7077")
    add_file(other, str(path))
    assert other.added == [((str(path),), True)]
