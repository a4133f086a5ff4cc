"""The sharded fan-out over images (topicmatch.spark.shard_images): every
shard's index is built once per content on the executors and mapped by the
workers, beside one image of the replicated share (the filters every
shard needs), matched with each shard's as one index; a call on unchanged
subscriptions shuffles only the events; a changed subscription rebuilds
only the image it reaches.  The answers are
the reference's, in every dialect."""
import pytest

from spark_expect import (EVENT_SCHEMA, SUBS_SCHEMA, Expected, events_rows, random_case,
                          rows_by_event)

pytestmark = pytest.mark.spark


def _plan():
    from topicmatch.spark import ShardPlan
    return ShardPlan(4, 1)


@pytest.mark.parametrize("dialect,seed", [("nats", 21), ("mqtt", 22), ("amqp", 23)])
@pytest.mark.parametrize("queues", ["all", "pick"])
def test_exact_and_built_once(spark, tmp_path, dialect, seed, queues):
    from topicmatch.spark import fanout
    from topicmatch.spark.shard_images import shard_images
    subs, subjects = random_case(dialect, n_subs=80, n_events=300, seed=seed)
    events = events_rows(subjects)
    ev = spark.createDataFrame(spark.sparkContext.parallelize(events, 3), EVENT_SCHEMA)
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    want = Expected(dialect, subs, events)
    for _ in range(2):
        got = rows_by_event(fanout(ev, sd, dialect=dialect, queues=queues, shards=_plan(),
                                   image_dir=str(tmp_path)).collect(), True)
        for e in want.plain:
            got.setdefault(e, [])
        want.check(got, queues)
    # the same rows in a new DataFrame, in another order: nothing to build
    again = spark.createDataFrame(list(reversed(subs)), SUBS_SCHEMA)
    assert shard_images(again, dialect, _plan(), str(tmp_path))["built"] == []


def test_a_change_rebuilds_only_the_image_it_reaches(spark, tmp_path):
    from topicmatch._core import ROUTE_KEYED, route_keys
    from topicmatch.spark.shard_images import _KNOWN, shard_images
    subs = [(1, "a.x", None), (2, "b.y.>", None), (3, "c.z", "q"), (4, "d", None),
            (5, "e.f", None), (6, "*.g", None)]
    plan = _plan()
    first = shard_images(spark.createDataFrame(subs, SUBS_SCHEMA), "nats", plan, str(tmp_path))
    assert first["built"] and first["inserts"] > 0
    # a new keyed filter: only its own shard's image is new
    keys, kinds = route_keys(["a.new"], "nats", 1, filters=True)
    assert kinds[0] == ROUTE_KEYED
    _KNOWN.clear()            # as a new application would: the probe runs
    second = shard_images(spark.createDataFrame(subs + [(7, "a.new", None)], SUBS_SCHEMA),
                          "nats", plan, str(tmp_path))
    assert second["built"] == [int(keys[0]) % plan.shards]
    changed = [k for k in range(plan.shards + 1) if first["paths"][k] != second["paths"][k]]
    assert changed == second["built"]
    # a new replicated filter: only the replicated share's image (image N)
    third = shard_images(spark.createDataFrame(subs + [(7, "a.new", None), (8, "*.h", None)], SUBS_SCHEMA),
                         "nats", plan, str(tmp_path))
    assert third["built"] == [plan.shards]
    assert third["paths"][:plan.shards] == second["paths"][:plan.shards]
    assert len(set(third["paths"])) == len(third["paths"])


def test_the_events_move_only_between_hosts(spark, tmp_path):
    """The matching job's plan reads no subscriptions (their images were
    built before it).  On one host (a local master) it has no exchange at
    all: each task matches its events in place against every shard's image.
    Shuffled (executors on several hosts), its one exchange is the events',
    each group into a partition of its own; the answers are the same."""
    import re

    from pyspark.sql import functions as F

    from topicmatch.spark import fanout
    from topicmatch.spark.shard_images import image_per_event, shard_images
    subs = [(i, f"t{i % 7}.x.{i}", None) for i in range(200)] + [(999, "*.x.>", None)]
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    ev = spark.createDataFrame(events_rows([f"t{i % 7}.x.{i}" for i in range(100)]), EVENT_SCHEMA) \
        .repartition(3)
    res = fanout(ev, sd, shards=_plan(), image_dir=str(tmp_path), queues="all")
    text = res._jdf.queryExecution().executedPlan().toString()
    assert not re.search(r"\bfilter#\d", text), text     # the subscriptions are not read
    ev_plan = ev._jdf.queryExecution().executedPlan().toString()
    assert text.count("Exchange") == ev_plan.count("Exchange"), text   # the events' own only
    assert res.count() == 100 + 100     # its own filter, and the replicated one
    paths = shard_images(sd, "nats", _plan(), str(tmp_path))["paths"]
    for in_place in (True, False):
        per_event = image_per_event(ev, _plan(), paths, subject_col="subject", key_col=None,
                                    dialect="nats", queues="all", dedupe=False, in_place=in_place)
        text = per_event._jdf.queryExecution().executedPlan().toString()
        assert text.count("Exchange") == ev_plan.count("Exchange") + (0 if in_place else 1), text
        got = sorted((r["event_id"], sorted(r["sub_ids"])) for r in per_event.collect())
        assert len(got) == 100 and all(999 in ids for _, ids in got)
        assert per_event.select(F.explode("sub_ids")).count() == 200


def test_damaged_shard_image_is_rebuilt(spark, tmp_path):
    from topicmatch.spark.shard_images import _KNOWN, shard_images
    subs = [(i, f"k{i}.x", None) for i in range(40)]
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    first = shard_images(sd, "nats", _plan(), str(tmp_path))
    victim = first["paths"][0]
    with open(victim, "r+b") as f:
        f.seek(2000)
        f.write(b"\xff" * 16)
    _KNOWN.clear()
    second = shard_images(sd, "nats", _plan(), str(tmp_path))
    assert 0 in second["built"] and second["paths"] == first["paths"]


@pytest.mark.parametrize("dialect,seed", [("nats", 31), ("mqtt", 32), ("amqp", 33)])
def test_names_are_the_digests_of_each_shards_rows(spark, dialect, seed):
    """An image's name, folded out of the plan's buckets, is the unsharded
    digest of exactly the rows it holds, found here by the C router
    (route_keys): a shard's keyed filters, and (image N) the replicated
    ones."""
    from topicmatch._core import ROUTE_KEYED, route_keys
    from topicmatch.spark import plan_shards
    from topicmatch.spark.images import digest_name
    from topicmatch.spark.shard_images import shard_names
    subs, _ = random_case(dialect, n_subs=120, n_events=1, seed=seed)
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    for shards, depth in ((4, 1), (8, 2), ("auto", "auto")):
        plan = plan_shards(sd, dialect, shards, depth)
        names = shard_names(sd, dialect, plan)
        keys, kinds = route_keys([f for _, f, _ in subs], dialect, plan.depth, filters=True)
        assert len(names) == plan.shards + 1
        for k in range(plan.shards + 1):
            mine = [r for r, key, kind in zip(subs, keys, kinds)
                    if (kind != ROUTE_KEYED if k == plan.shards else kind == ROUTE_KEYED and
                        key % plan.shards == k)]
            assert names[k] == digest_name(spark.createDataFrame(mine, SUBS_SCHEMA), dialect)
        # a plan without its figures (as a caller may build one) names alike
        from topicmatch.spark import ShardPlan
        assert shard_names(sd, dialect, ShardPlan(plan.shards, plan.depth)) == names


@pytest.mark.parametrize("dialect,seed", [("nats", 41), ("mqtt", 42), ("amqp", 43)])
def test_row_stats_of_one_depth_are_those_of_several(spark, dialect, seed):
    """row_stats groups one depth by its bucket directly and several
    through one row per depth: a depth's figures are the same either way,
    and their counts are the C router's."""
    from topicmatch._core import ROUTE_KEYED, route_keys
    from topicmatch.spark.shard import row_stats
    subs, _ = random_case(dialect, n_subs=150, n_events=1, seed=seed)
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    every = row_stats(sd, dialect, (1, 2, 3), 16)
    for d in (1, 2, 3):
        one = row_stats(sd, dialect, (d,), 16)
        assert one.sums == {k: v for k, v in every.sums.items() if k[0] == d}
        keys, kinds = route_keys([f for _, f, _ in subs], dialect, d, filters=True)
        want = [0] * 16
        for key, kind in zip(keys, kinds):
            if kind == ROUTE_KEYED:
                want[int(key) % 16] += 1
        assert one.counts(d, 16).tolist() == want
        assert one.replicated(d) == len(subs) - sum(want)


def test_the_build_gives_each_shard_a_partition_of_its_own(spark):
    """_placement's values, hashed as Spark hashes an int, land one per
    partition: the build job needs no sort to give each shard its task."""
    from pyspark.sql import functions as F

    from topicmatch.spark.shard_images import _murmur3_int, _placement
    vals = [0, 1, -1, 7, 123456, 2 ** 31 - 1, -2 ** 31]
    got = spark.createDataFrame([(v,) for v in vals], "v int").select(F.hash("v")).collect()
    assert [r[0] for r in got] == [_murmur3_int(v) for v in vals]
    for n in (1, 3, 8, 13):
        place = _placement(n)
        parts = spark.createDataFrame([(v,) for v in place], "v int").repartition(n, "v") \
            .rdd.glom().map(lambda rows: [r[0] for r in rows]).collect()
        assert parts == [[v] for v in place]


@pytest.mark.parametrize("gather", [1, 3, 100])
def test_a_partition_holding_two_groups_matches_each_by_its_own_shard(tmp_path, monkeypatch, gather):
    """The match job places each (shard, salt) group in a partition of its
    own; were Spark to place two in one (or a batch to mix them), each
    group's events must still meet their own shard's image."""
    import pyarrow as pa

    from topicmatch import Sublist
    from topicmatch.spark.shard import _GROUP, _PICK
    from topicmatch.spark.shard_images import _match_fn
    paths = []
    for k, flt in enumerate(["a.>", "b.>", "*.z"]):        # two shards, then the replicated share
        sl = Sublist("nats")
        sl.insert(flt, 10 + k)
        paths.append(str(tmp_path / f"s{k}.img"))
        sl.save(paths[-1])
    out_schema = pa.schema([("e0", pa.string()), ("sub_ids", pa.list_(pa.int64()))])
    fn = _match_fn(paths, 2, "pick", False, "e0", ["e0"], out_schema)
    # width 2: groups 0, 1 are shard 0's; 2, 3 shard 1's
    batch = pa.RecordBatch.from_pydict({_GROUP: pa.array([0, 3, 1, 2], pa.int32()),
                                        "e0": ["a.x", "b.x", "a.y", "a.z"],
                                        _PICK: ["a.x", "b.x", "a.y", "a.z"]})
    # Spark's batches are gathered up to MATCH_ROWS rows before they are
    # split by shard: across batches, and not past the rows given
    from topicmatch.spark import shard_images
    monkeypatch.setattr(shard_images, "MATCH_ROWS", gather)
    pieces = [batch.slice(0, 1), batch.slice(1, 0), batch.slice(1, 2), batch.slice(3)]
    out = list(fn(iter(pieces)))
    assert sum(b.num_rows for b in out) == 4
    got = sorted((r["e0"], r["sub_ids"]) for b in out for r in b.to_pylist())
    # "a.z" sits in shard 1's group 2: routed there, it meets shard 1's
    # image (and the replicated share's), not shard 0's
    assert got == [("a.x", [10]), ("a.y", [10]), ("a.z", [12]), ("b.x", [11])]


def test_a_host_without_an_image_fetches_it_from_the_driver_once(spark, monkeypatch, image_dir,
                                                                 load_log):
    """Where the hosts share nothing (spark: images, forced here on the
    local master), each build task sends its image to the driver, which
    serves it: a host that holds an image (it built it) fetches nothing,
    and one that lacks it (an executor that joins later, a cleaned cache:
    here the host's copies removed after the plan) fetches each image it
    needs from the driver, once per host, when a task first needs it.
    The answers are exact either way."""
    import os

    from topicmatch.spark import ShardPlan, fanout, plan_fanout
    from topicmatch.spark import images as im
    from topicmatch.spark import plan as pl
    from topicmatch.spark import shard_images as si
    # (a plan asks once and hands its answer to the builds; the others ask
    # where they are called without one)
    for module in (pl, si, im):
        monkeypatch.setattr(module, "spark_files", lambda s, d: True)

    def fetches():
        if not os.path.exists(load_log):
            return []
        with open(load_log) as f:
            lines = [ln.rstrip("\n").split(" ", 4) for ln in f]
        return [(ln[0], ln[4]) for ln in lines if len(ln) == 5 and ln[2] == "fetch"]

    def planned_and_checked(seed, lose_copies):
        subs, subjects = random_case("nats", n_subs=90, n_events=300, seed=seed)
        events = events_rows(subjects)
        ev = spark.createDataFrame(spark.sparkContext.parallelize(events, 3), EVENT_SCHEMA)
        plan = plan_fanout(spark.createDataFrame(subs, SUBS_SCHEMA), shards=ShardPlan(4, 1))
        assert plan.route == "shard-images"
        assert all(p.startswith("spark:") for p in plan.shard_paths), plan.shard_paths
        names = sorted({p[len("spark:"):-len(".img")] for p in plan.shard_paths})
        if lose_copies:
            for n in names:
                os.remove(os.path.join(image_dir, n + ".img"))
        want = Expected("nats", subs, events)
        for _ in range(2):
            got = rows_by_event(fanout(ev, plan, queues="all").collect(), True)
            for e in want.plain:
                got.setdefault(e, [])
            want.check(got, "all")
        return names

    before = fetches()
    first = planned_and_checked(27, lose_copies=False)
    assert fetches() == before            # the host built them all: nothing fetched
    names = planned_and_checked(28, lose_copies=True)
    got = fetches()[len(before):]
    # each image at most once (two calls, two worker threads), then the
    # host's copy is used
    assert len(got) == len(set(got)), got
    assert {d for _, d in got} == {str(image_dir)}, got
    fetched = {n for n, _ in got}
    # every image new to this call, fetched
    new = {n for n in names if n not in first}
    assert new <= fetched, got
    assert len(new) >= 3
    # An image of the same content as one of the first call's has the same
    # name (the empty one here): a worker process that mapped it then keeps
    # its mapping and fetches nothing, but one that did not fetches it.
    # Which of Spark's pooled Python workers runs each task is Spark's
    # choice (after test_runtime.py's tasks the pool holds more of them),
    # so such an image may or may not be fetched, once at most.
    assert fetched <= set(names), got


def test_the_match_frame_is_made_while_the_images_build(spark, tmp_path, monkeypatch):
    """A call that plans shard images makes its match frame on a thread of
    its own while the build job runs; a call whose plan is remembered (no
    build job) makes it in line.  The answers are exact either way."""
    import threading

    from topicmatch.spark import fan_out, fanout
    made_on = []
    real = fan_out._shard_image_frame

    def spy(*args, **kwargs):
        made_on.append(threading.current_thread().name)
        return real(*args, **kwargs)
    monkeypatch.setattr(fan_out, "_shard_image_frame", spy)
    subs, subjects = random_case("nats", n_subs=80, n_events=300, seed=31)
    events = events_rows(subjects)
    ev = spark.createDataFrame(spark.sparkContext.parallelize(events, 3), EVENT_SCHEMA)
    sd = spark.createDataFrame(subs, SUBS_SCHEMA)
    want = Expected("nats", subs, events)
    for thread in ("topicmatch-match-ahead", threading.current_thread().name):
        made_on.clear()
        got = rows_by_event(fanout(ev, sd, queues="all", shards=_plan(),
                                   image_dir=str(tmp_path)).collect(), True)
        for e in want.plain:
            got.setdefault(e, [])
        want.check(got, "all")
        assert made_on == [thread]


def test_a_match_frame_made_for_another_plan_is_not_used(monkeypatch):
    """_MatchAhead's frame serves only the plan it was made for: the same
    ShardPlan object and paths, on the shard-images route."""
    from types import SimpleNamespace

    from topicmatch.spark import fan_out
    monkeypatch.setattr(fan_out, "_shard_image_frame", lambda *a: "frame")
    sp, paths = _plan(), ["spark:a.img", "spark:b.img"]

    def plan(route="shard-images", shard_plan=sp, shard_paths=paths):
        return SimpleNamespace(route=route, shard_plan=shard_plan, shard_paths=shard_paths)
    ahead = fan_out._MatchAhead(None, None)
    assert ahead.frame_for(plan()) is None        # nothing made ahead
    ahead.start(sp, paths)
    assert ahead.frame_for(plan()) == "frame"
    assert ahead.frame_for(plan(shard_plan=_plan())) is None   # an equal plan, not this one
    assert ahead.frame_for(plan(shard_paths=paths[:1])) is None
    assert ahead.frame_for(plan(route="image")) is None
    # where making it failed: made in line, which raises there
    monkeypatch.setattr(fan_out, "_shard_image_frame", lambda *a: 1 / 0)
    failed = fan_out._MatchAhead(None, None)
    failed.start(sp, paths)
    assert failed.frame_for(plan()) is None


def test_a_call_whose_planning_fails_leaves_no_match_frame_thread_behind(spark, monkeypatch):
    """Where planning raises after the match frame's thread started (the
    build job failed), the call waits for the thread before it raises:
    nothing of a call that raised runs on after it."""
    import time

    from topicmatch.spark import fan_out, fanout
    finished = []

    def slow_frame(*args):
        time.sleep(0.3)
        finished.append(True)
        return "frame"

    def plan_that_fails(subscriptions, opts, spark=None, _while_building=None):
        _while_building(_plan(), ["spark:a.img"])
        raise RuntimeError("the build job failed")
    monkeypatch.setattr(fan_out, "_shard_image_frame", slow_frame)
    monkeypatch.setattr(fan_out, "plan_fanout", plan_that_fails)
    subs, subjects = random_case("nats", n_subs=5, n_events=5, seed=3)
    ev = spark.createDataFrame(events_rows(subjects), EVENT_SCHEMA)
    with pytest.raises(RuntimeError, match="the build job failed"):
        fanout(ev, spark.createDataFrame(subs, SUBS_SCHEMA), queues="all")
    assert finished == [True]
