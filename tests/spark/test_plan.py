"""One plan per fan-out (topicmatch.spark.plan): plan_fanout decides the
route from the subscriptions alone and runs the jobs that takes, explain()
says it, fanout(events, plan) runs no job at call time and gives the rows
the plain call gives (checked against _reference), and FanoutOptions
carries the keywords as one object."""
import pytest

from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, Expected, events_rows, random_case, rows_by_event

pytestmark = pytest.mark.spark


def _frames(spark, dialect="nats", seed=21):
    subs, subjects = random_case(dialect, n_subs=60, n_events=300, seed=seed)
    events = events_rows(subjects)
    sdf = spark.createDataFrame(subs, SUBS_SCHEMA)
    edf = spark.createDataFrame(spark.sparkContext.parallelize(events, 3), EVENT_SCHEMA)
    return subs, events, sdf, edf


class _Jobs:
    """The Spark jobs run inside the block, counted by a job group of its own."""

    def __init__(self, spark, name):
        self.sc, self.name = spark.sparkContext, name

    def __enter__(self):
        self.sc.setJobGroup(self.name, self.name)
        return self

    def __exit__(self, *exc):
        self.sc.setLocalProperty("spark.jobGroup.id", None)

    @property
    def count(self):
        return len(self.sc.statusTracker().getJobIdsForGroup(self.name))


def _check(dialect, subs, events, frame, queues="all"):
    """frame: a fan-out's deliveries with explode=False (every accepted event)."""
    Expected(dialect, subs, events).check(rows_by_event(frame.collect(), False), queues)


def test_a_plan_made_ahead_runs_no_job_at_call_time(spark):
    from topicmatch.spark import FanoutPlan, fanout, plan_fanout
    subs, events, sdf, edf = _frames(spark)
    plan = plan_fanout(sdf)
    assert isinstance(plan, FanoutPlan) and plan.route == "image"
    with _Jobs(spark, "topicmatch-call") as jobs:
        out = fanout(edf, plan, queues="all", explode=False)
    assert jobs.count == 0
    _check("nats", subs, events, out)
    assert sorted(map(tuple, out.collect())) == sorted(
        map(tuple, fanout(edf, sdf, queues="all", explode=False).collect()))


def test_a_plain_call_plans_first_and_its_repeat_runs_no_job(spark):
    from topicmatch.spark import fanout_with_rejects
    subs, events, sdf, edf = _frames(spark, seed=22)
    with _Jobs(spark, "topicmatch-first") as first:
        res = fanout_with_rejects(edf, sdf, queues="all", explode=False)
    # the statistics (counting for shards="auto" and naming the image) and,
    # for an image this application has not seen, the probe and the build
    assert first.count >= 2
    assert res.plan.steps[0].startswith("statistics job")
    with _Jobs(spark, "topicmatch-again") as again:
        res2 = fanout_with_rejects(edf, sdf, queues="all", explode=False)
    assert again.count == 0 and res2.plan.steps == []
    _check("nats", subs, events, res2.deliveries)


def test_explain_says_the_route_and_why(spark):
    from topicmatch.spark import plan_fanout
    _, _, sdf, _ = _frames(spark, seed=23)
    text = plan_fanout(sdf).explain()
    assert "route 'image'" in text
    assert "every executor on one host" in text
    n = plan_fanout(sdf).nsubs
    assert f'shards="auto": {n:,} subscriptions <= AUTO_SHARD_MIN_SUBS (2,000,000): one index' in text
    assert "statistics job" in text and ("build task" in text or "probe task" in text)
    assert "at call time: no job" in text
    again = plan_fanout(sdf).explain()
    assert "none (remembered from an earlier call on this DataFrame object)" in again


@pytest.mark.parametrize("kw, route, reason", [
    ({"shards": 2}, "shard-images", "shards=2"),
    ({"ship": "broadcast"}, "shipped", "ship='broadcast' was given"),
    ({"ship": "broadcast", "shards": 2}, "cogroup", "ship='broadcast' was given"),
])
def test_each_route_gives_the_reference_rows(spark, kw, route, reason):
    from topicmatch.spark import fanout, plan_fanout
    subs, events, sdf, edf = _frames(spark, seed=24)
    plan = plan_fanout(sdf, **kw)
    assert plan.route == route
    text = plan.explain()
    assert reason in text
    if route == "cogroup":
        assert "a 1% sample of the events" in plan.at_call_time()
        out = fanout(edf, plan, queues="all", explode=False)
    else:
        with _Jobs(spark, f"topicmatch-{route}") as jobs:
            out = fanout(edf, plan, queues="all", explode=False)
        assert jobs.count == 0
    if plan.sharded:
        assert plan.index.shards == 2 and "sharded fan-out: N=2" in text
    _check("nats", subs, events, out)


def test_a_sublist_or_shared_index_is_planned_as_given(spark):
    import topicmatch
    from topicmatch.spark import fanout, plan_fanout, share_index
    subs, events, _, edf = _frames(spark, dialect="mqtt", seed=25)
    sl = topicmatch.Sublist("mqtt")
    for sid, f, q in subs:
        sl.insert(f, sid, queue=q)
    plan = plan_fanout(sl, spark=spark, dialect="mqtt")
    assert plan.route == "shipped" and plan.index.shipped_by == "broadcast"
    assert "a Sublist was passed in" in plan.explain()
    # the dialect comes from the plan: fanout's own default is not a conflict
    _check("mqtt", subs, events, fanout(edf, plan, queues="all", explode=False))
    shared = share_index(spark, sl)
    plan = plan_fanout(shared, spark=spark, dialect="mqtt")
    assert plan.index is shared and "used as it is (broadcast)" in plan.explain()
    with pytest.raises(ValueError, match="the shared index is 'mqtt', the fan-out asks for "
                                         "dialect='nats'"):
        plan_fanout(shared, spark=spark)


def test_a_keyword_that_disagrees_with_the_plan_is_refused(spark):
    from topicmatch.spark import fanout, plan_fanout
    _, _, sdf, edf = _frames(spark, seed=26)
    plan = plan_fanout(sdf)
    with pytest.raises(ValueError, match=r"shards=4 was given with a FanoutPlan made with "
                                         r"shards='auto': plan again with it, or leave it out"):
        fanout(edf, plan, shards=4)
    with pytest.raises(ValueError, match="dialect='mqtt' was given with a FanoutPlan"):
        fanout(edf, plan, dialect="mqtt")
    fanout(edf, plan, shards="auto", dialect="nats", image_dir=None)    # agreeing is fine
    with pytest.raises(ValueError, match="image_dir='/elsewhere' was given with a FanoutPlan "
                                         "made with image_dir=None"):
        fanout(edf, plan, image_dir="/elsewhere")


def test_a_plan_whose_image_has_gone_is_refused_and_planning_again_builds_it(spark):
    import os

    from topicmatch.spark import fanout, plan_fanout
    subs, events, sdf, edf = _frames(spark, seed=29)
    plan = plan_fanout(sdf)
    os.remove(plan.index.image_path)        # a cleaner of the temporary directory
    with pytest.raises(ValueError, match="an image the FanoutPlan names has gone since it was "
                                         "made .*: plan again"):
        fanout(edf, plan)
    again = plan_fanout(sdf)                # the remembered plan is stale: made afresh
    assert again.steps and os.path.exists(again.index.image_path)
    _check("nats", subs, events, fanout(edf, again, queues="all", explode=False))


def test_share_index_of_a_dataframe_is_a_new_index_each_call(spark):
    from topicmatch.spark import share_index
    _, _, sdf, _ = _frames(spark, seed=30)
    a = share_index(spark, sdf, ship="broadcast")
    a.release()
    b = share_index(spark, sdf, ship="broadcast")
    assert b is not a and b.index_id != a.index_id and b.get().match("a").subs is not None


def test_a_misspelt_option_is_named(spark):
    from topicmatch.spark import plan_fanout
    _, _, sdf, _ = _frames(spark, seed=31)
    with pytest.raises(TypeError, match="unknown fan-out option 'shard': the options are .*shards"):
        plan_fanout(sdf, shard=2)


def test_options_are_one_object(spark):
    from topicmatch.spark import FanoutOptions, fanout, fanout_with_rejects
    subs, events, sdf, edf = _frames(spark, seed=27)
    opts = FanoutOptions(queues="all", explode=False)
    _check("nats", subs, events, fanout(edf, sdf, options=opts))
    # a keyword set beside the options overrides them
    res = fanout_with_rejects(edf, sdf, options=opts, queues="none")
    _check("nats", subs, events, res.deliveries, queues="none")
    with pytest.raises(ValueError, match="queues must be 'pick', 'all' or 'none', not 'every'"):
        fanout(edf, sdf, options=FanoutOptions(queues="every"))
    with pytest.raises(ValueError, match="ship must be 'auto', 'broadcast', 'file', 'artifact' "
                                         "or 'inline', not 'torrent'"):
        fanout(edf, sdf, options=FanoutOptions(ship="torrent"))
    with pytest.raises(TypeError, match="options must be a topicmatch.spark.FanoutOptions, not dict"):
        fanout(edf, sdf, options={"queues": "all"})
    # a keyword at its default leaves the options' value
    res = fanout_with_rejects(edf, sdf, options=FanoutOptions(queues="none", explode=False),
                              queues="pick")
    _check("nats", subs, events, res.deliveries, queues="none")


def test_a_new_dataframe_over_changed_rows_gives_the_new_answers(spark):
    from topicmatch.spark import fanout, plan_fanout
    subs, events, sdf, edf = _frames(spark, seed=28)
    first = plan_fanout(sdf)
    changed = subs[1:] + [(999, ">", None)]
    sdf2 = spark.createDataFrame(changed, SUBS_SCHEMA)
    second = plan_fanout(sdf2)
    assert second.index.digest != first.index.digest
    _check("nats", changed, events, fanout(edf, second, queues="all", explode=False))
    # the same rows in a new DataFrame: the digest runs, nothing is built
    third = plan_fanout(spark.createDataFrame(changed, SUBS_SCHEMA))
    assert third.index.digest == second.index.digest
    assert [s.split(":")[0] for s in third.steps] == ["statistics job", "no task"]
    # the one pass's name is the digest's: the same image whichever job named it
    from topicmatch.spark.images import digest_name
    assert third.index.digest == digest_name(sdf2, "nats")
    assert plan_fanout(sdf2, shards=1, reuse_index=False).index.digest == third.index.digest


@pytest.mark.parametrize("kw", [{}, {"shards": 2}])
def test_a_plan_makes_the_rows_frame_once_and_asks_where_the_executors_are_once(
        spark, monkeypatch, kw):
    """The columns an index is built from (images.index_rows' select, which
    costs the driver the JVM's analysis) are made once per plan and handed
    to each job that reads the rows: the statistics and the build (the one
    image's, or the shards').  Whether the images travel through Spark
    (spark_files, which asks the JVM for the executors) is asked once."""
    from pyspark.sql import functions as F

    from topicmatch.spark import fanout, image_hosts, images, plan_fanout
    subs, events, sdf, edf = _frames(spark, seed=29)
    # sub_id an int: not index_rows' shape, so the plan has it select
    narrow = sdf.select(F.col("sub_id").cast("int").alias("sub_id"), "filter", "queue")
    made, asked = [], []
    check, works = images.check_subscriptions_schema, image_hosts.default_dir_works
    monkeypatch.setattr(images, "check_subscriptions_schema",
                        lambda df, *a: made.append(df) or check(df, *a))
    monkeypatch.setattr(image_hosts, "default_dir_works", lambda s: asked.append(s) or works(s))
    # (reuse_index=False: every image built again, so the build job reads the rows)
    plan = plan_fanout(narrow, reuse_index=False, **kw)
    assert [s.split(":")[0] for s in plan.steps][-1].startswith("build"), plan.steps
    assert len(made) == 1 and len(asked) == 1, (len(made), len(asked), plan.steps)
    monkeypatch.undo()
    _check("nats", subs, events, fanout(edf, plan, queues="all", explode=False))
