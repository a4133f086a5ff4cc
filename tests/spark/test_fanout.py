"""topicmatch.spark.fan_out against the pure-Python reference, every dialect."""
import pytest

import topicmatch
from spark_expect import (EVENT_SCHEMA, MQTT_SUBJECTS, MQTT_SUBS, NATS_SUBJECTS, NATS_SUBS,
                          SUBS_SCHEMA, Expected, events_rows, random_case, rows_by_event)

pytestmark = pytest.mark.spark

CASES = {
    "nats": (NATS_SUBS, NATS_SUBJECTS),
    "mqtt": (MQTT_SUBS, MQTT_SUBJECTS),
    "nats-random": random_case("nats"),
    "mqtt-random": random_case("mqtt", seed=2),
    "amqp-random": random_case("amqp", seed=3),
}


def _frames(spark, case, partitions=3):
    subs, subjects = CASES[case]
    events = events_rows(subjects)
    ev = spark.createDataFrame(spark.sparkContext.parallelize(events, partitions), EVENT_SCHEMA)
    return subs, events, ev, spark.createDataFrame(subs, SUBS_SCHEMA)


def _engine_pick(dialect, subs, events, with_key):
    """The engine's own answer on the driver (for the pick, which is its hash)."""
    sl = topicmatch.Sublist(dialect)
    sl.insert_many([f for _, f, _ in subs], [i for i, _, _ in subs], [q for _, _, q in subs])
    subjects = [e[1] for e in events]
    keys = [(e[2] if e[2] is not None else e[1]) for e in events] if with_key else None
    r = sl.match_many(subjects, keys=keys, queues="pick")
    out = {}
    for k, e in enumerate(events):
        if not r.invalid[k]:
            out[e[0]] = sorted(r.sub_ids[r.offsets[k]:r.offsets[k + 1]].tolist())
    return out


MATRIX = [(case, queues, explode) for case in CASES for queues in ("pick", "all", "none")
          for explode in (True, False) if explode or not case.endswith("random")]


@pytest.mark.parametrize("case, queues, explode", MATRIX,
                         ids=[f"{c}-{q}-{'explode' if e else 'arrays'}" for c, q, e in MATRIX])
def test_fanout_equals_reference(spark, case, queues, explode):
    from topicmatch.spark import fanout_with_rejects
    dialect = case.split("-")[0]
    subs, events, ev, sb = _frames(spark, case)
    exp = Expected(dialect, subs, events)
    with_key = case.endswith("random")
    res = fanout_with_rejects(ev, sb, dialect=dialect, queues=queues, explode=explode,
                              key_col="device" if with_key else None)
    rows = res.deliveries.collect()
    if explode:
        assert res.deliveries.columns == ev.columns + ["sub_id"]
        actual = {e: [] for e in exp.plain}
        for e, ids in rows_by_event(rows, True).items():
            assert e in exp.plain, f"event {e} has deliveries but should not"
            actual[e] = ids
    else:
        assert res.deliveries.columns == ev.columns + ["sub_ids"]
        actual = rows_by_event(rows, False)
    exp.check(actual, queues)
    if queues == "pick":
        engine = _engine_pick(dialect, subs, events, with_key)
        assert {e: sorted(v) for e, v in actual.items()} == engine
    # the event's own columns travel with its deliveries
    by_id = {e[0]: e for e in events}
    for r in rows:
        assert (r["event_id"], r["subject"], r["device"], r["payload"]) == by_id[r["event_id"]]

    rejected = {r["event_id"]: r for r in res.rejected.collect()}
    assert sorted(rejected) == sorted(exp.rejected)
    assert res.rejected.columns == ev.columns + ["error"]
    for e, r in rejected.items():
        assert r["subject"] == by_id[e][1]
        if exp.rejected[e] == "null subject":
            assert r["error"] == "null subject"
        else:
            assert r["error"] and r["error"] != "null subject"

    c = res.counts()
    assert c._asdict() == dict(exp.counts(queues), deliveries=sum(len(v) for v in actual.values()))
    assert c.reconciles
    if not explode:
        assert res.unmatched.count() == c.unmatched == sum(1 for v in actual.values() if not v)


def test_reject_reasons(spark):
    from topicmatch.spark import fanout_with_rejects
    _, _, ev, sb = _frames(spark, "nats")
    got = {r["subject"]: r["error"] for r in fanout_with_rejects(ev, sb).rejected.collect()}
    assert got == {
        None: "null subject",
        "orders..x": "empty token (at byte 7)",
        "a b": "whitespace (at byte 1)",
        "orders.*": "wildcard in subject (at byte 7)",
        "": "empty (at byte 0)",
        ".a": "empty token (at byte 0)",
    }


def test_fanout_returns_the_deliveries(spark):
    from topicmatch.spark import fanout, fanout_with_rejects
    _, _, ev, sb = _frames(spark, "nats")
    a = fanout(ev, sb, queues="all").collect()
    b = fanout_with_rejects(ev, sb, queues="all").deliveries.collect()
    assert a == b and len(a) > 0
    deliveries, rejected = fanout_with_rejects(ev, sb)  # unpacks as a pair
    assert rejected.count() == 6


def test_key_makes_the_pick_sticky(spark):
    """With key_col, every event of one key goes to the same member of a group."""
    from topicmatch.spark import fanout
    subs = [(i, "t.>", "g") for i in range(1, 9)]
    events = [(i, f"t.{i}.x", f"dev-{i % 5}", "p") for i in range(400)]
    ev = spark.createDataFrame(spark.sparkContext.parallelize(events, 4), EVENT_SCHEMA)
    sb = spark.createDataFrame(subs, SUBS_SCHEMA)
    rows = fanout(ev, sb, key_col="device").collect()
    assert len(rows) == 400
    member = {}
    for r in rows:
        assert member.setdefault(r["device"], r["sub_id"]) == r["sub_id"]
    # and without a key the subject decides: the picks spread over the members
    assert len({r["sub_id"] for r in fanout(ev, sb).collect()}) > 4


def test_ship_by_file_gives_the_same_rows(spark):
    from topicmatch.spark import fanout_with_rejects
    _, _, ev, sb = _frames(spark, "mqtt-random")
    a = fanout_with_rejects(ev, sb, dialect="mqtt", ship="broadcast")
    b = fanout_with_rejects(ev, sb, dialect="mqtt", ship="file")
    assert (a.index.shipped_by, b.index.shipped_by) == ("broadcast", "file")
    assert a.deliveries.collect() == b.deliveries.collect()
    assert a.rejected.collect() == b.rejected.collect()


def test_large_index_goes_by_file(spark, monkeypatch):
    import topicmatch.spark as fs
    monkeypatch.setattr(fs, "BROADCAST_MAX_BYTES", 10)
    _, _, ev, sb = _frames(spark, "nats")
    # an index built on the driver (a DataFrame's is an image on the
    # executors in local mode: test_images.py)
    r = fs.fanout_with_rejects(ev, fs.build_index(sb))
    assert r.index.shipped_by == "file" and r.index.nbytes > 10
    assert r.deliveries.count() > 0


def test_one_matching_pass_per_plan(spark):
    """explode infers a `size(sub_ids) > 0` filter; the UDF must not be copied into it."""
    from topicmatch.spark import fanout
    _, _, ev, sb = _frames(spark, "nats")
    plan = fanout(ev, sb)._jdf.queryExecution().executedPlan().toString()
    assert plan.count("ArrowEvalPython") == 1, plan


def test_persist_shares_the_pass(spark):
    from topicmatch.spark import fanout_with_rejects
    _, _, ev, sb = _frames(spark, "nats")
    res = fanout_with_rejects(ev, sb).persist()
    try:
        res.counts()
        for df in (res.deliveries, res.rejected):
            plan = df._jdf.queryExecution().executedPlan().toString()
            above_cache = plan.split("InMemoryRelation")[0]
            assert "InMemoryTableScan" in above_cache and "topicmatch_match" not in above_cache, plan
    finally:
        res.unpersist()


def test_no_subscriptions_all_unmatched(spark):
    from topicmatch.spark import fanout_with_rejects
    _, events, ev, _ = _frames(spark, "nats")
    res = fanout_with_rejects(ev, spark.createDataFrame([], SUBS_SCHEMA))
    c = res.counts()
    assert (c.events, c.delivered, c.deliveries, c.rejected) == (len(events), 0, 0, 6)


def test_queue_column_is_optional(spark):
    from topicmatch.spark import fanout
    ev = spark.createDataFrame([(1, "a.b", None, "p")], EVENT_SCHEMA)
    sb = spark.createDataFrame([(7, "a.*")], "sub_id int, filter string")
    assert [r["sub_id"] for r in fanout(ev, sb).collect()] == [7]


# -- errors a user can make: one clear message, raised on the driver --------

def _bad(spark, subs, schema=SUBS_SCHEMA, events=None, **kw):
    from topicmatch.spark import fanout
    ev = events if events is not None else spark.createDataFrame([(1, "a.b", None, "p")], EVENT_SCHEMA)
    return lambda: fanout(ev, spark.createDataFrame(subs, schema), **kw)


def test_invalid_filter_names_the_row(spark):
    f = _bad(spark, [(1, "a.*", None), (2, "b.>", None), (3, "a..b", "q")])
    with pytest.raises(topicmatch.InvalidSubjectError,
                       match=r"^subscriptions row 3 \(sub_id=3, queue='q'\): invalid filter 'a\.\.b': empty token"):
        f()
    f = _bad(spark, [(1, "sport/#/x", None)], dialect="mqtt")
    with pytest.raises(topicmatch.InvalidSubjectError, match=r"row 1 \(sub_id=1\): invalid filter 'sport/#/x'"):
        f()
    with pytest.raises(topicmatch.InvalidSubjectError, match="row 2.*invalid queue 'a b'"):
        _bad(spark, [(1, "a", None), (2, "b", "a b")])()


@pytest.mark.parametrize("subs, schema, message", [
    ([(1, None, None)], SUBS_SCHEMA, r"subscriptions row 1 \(sub_id=1, filter=None\): null filter"),
    ([(None, "a", None)], SUBS_SCHEMA, r"subscriptions row 1 .*: null sub_id"),
    ([("1", "a", None)], "sub_id string, filter string, queue string",
     r"column 'sub_id' has type string, expected an integer"),
    ([(1, "a")], "sub_id long, topic string", r"has no column 'filter' \(columns: sub_id, topic\)"),
    ([(1, "a", 5)], "sub_id long, filter string, queue int", r"column 'queue' has type int"),
])
def test_bad_subscriptions_table(spark, subs, schema, message):
    from topicmatch.spark import FanoutInputError
    with pytest.raises(FanoutInputError, match=message):
        _bad(spark, subs, schema)()


def test_bad_events_table(spark):
    from topicmatch.spark import FanoutInputError
    subs = [(1, "a", None)]
    ev = spark.createDataFrame([(1, 5)], "event_id long, subject long")
    with pytest.raises(FanoutInputError, match=r"events column 'subject' has type bigint, expected string"):
        _bad(spark, subs, events=ev)()
    with pytest.raises(FanoutInputError, match=r"events table has no column 'topic' \(columns: event_id, subject\)"):
        _bad(spark, subs, events=ev, subject_col="topic")()
    ev = spark.createDataFrame([(1, "a", 2)], "event_id long, subject string, sub_id long")
    with pytest.raises(FanoutInputError, match=r"already has column\(s\) 'sub_id'"):
        _bad(spark, subs, events=ev)()
    with pytest.raises(ValueError, match="queues must be"):
        _bad(spark, subs, queues="some")()
    with pytest.raises(ValueError, match="unknown dialect"):
        _bad(spark, subs, dialect="stomp")()
