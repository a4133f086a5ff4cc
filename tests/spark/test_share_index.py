"""share_index: the documented mapPartitions and mapInArrow examples, every
shipping method on classic Spark, and fanout taking a Sublist / SharedIndex."""
import os
import pickle

import pytest

import topicmatch
from doc_examples import run
from spark_expect import EVENT_SCHEMA, NATS_SUBJECTS, SUBS_SCHEMA, events_rows, random_case

pytestmark = pytest.mark.spark


def _events(spark, subjects, partitions=4):
    return spark.createDataFrame(spark.sparkContext.parallelize(events_rows(subjects), partitions),
                                 EVENT_SCHEMA)


def _reference_pairs(filters_ids, events):
    from topicmatch import _reference as R
    ref = R.ReferenceSublist("nats")
    for f, i in filters_ids:
        ref.insert(f, i, None)
    out = []
    for e in events:
        if e[1] is not None and R.is_valid_subject(e[1], "nats"):
            out.extend((e[0], s) for s in ref.match(e[1]).subs)
    return sorted(out)


def test_documented_examples(spark, load_log):
    from topicmatch.spark import fanout
    _, subjects = random_case("nats", n_events=400, seed=11)
    subjects = subjects + NATS_SUBJECTS + ["orders.eu.created", "billing.x"] * 20
    events = _events(spark, subjects)
    ns = run(["share", "mapPartitions", "mapInArrow"], {"spark": spark, "events": events})
    idx = ns["idx"]
    assert idx.shipped_by == "broadcast" and idx.nsubs == 3
    want = _reference_pairs([("orders.*.created", 1), ("orders.>", 2), ("billing.*", 3)],
                            events_rows(subjects))
    assert len(want) > 50
    got = sorted(tuple(r) for r in ns["pairs"].collect())
    assert got == want
    # the mapInArrow block redefined `pairs`: run the first again for its own rows
    ns1 = run(["share", "mapPartitions"], {"spark": spark, "events": events})
    assert sorted(tuple(r) for r in ns1["pairs"].collect()) == want
    # and fanout with the Sublist itself gives the same pairs
    via_fanout = fanout(events, ns["sl"]).select("event_id", "sub_id").collect()
    assert sorted(tuple(r) for r in via_fanout) == want
    # each worker process loaded the shared index at most once
    with open(load_log) as f:
        pids = [ln.split()[1] for ln in f if ln.split()[0] == idx.index_id]
    assert 1 <= len(pids) == len(set(pids)), pids


@pytest.mark.parametrize("ship", ["broadcast", "file", "inline"])
def test_every_method_on_classic(spark, ship):
    from topicmatch.spark import fanout, share_index
    subs, subjects = random_case("nats", n_subs=60, n_events=300, seed=12)
    sl = topicmatch.Sublist("nats")
    sl.insert_many([f for _, f, _ in subs], [i for i, _, _ in subs], [q for _, _, q in subs])
    idx = share_index(spark, sl, ship=ship)
    assert idx.shipped_by == ship and idx.nbytes == len(sl.to_bytes())
    assert idx.get() is sl                     # on the driver: the driver's own
    blob = pickle.dumps(idx)
    assert (len(blob) > idx.nbytes) == (ship == "inline")
    events = _events(spark, subjects)
    a = fanout(events, idx, queues="all").orderBy("event_id", "sub_id").collect()
    b = fanout(events, spark.createDataFrame(subs, SUBS_SCHEMA), queues="all") \
        .orderBy("event_id", "sub_id").collect()
    assert a == b and len(a) > 0

    def count_in_task(batches):
        import pyarrow as pa
        for batch in batches:
            n = len(idx.get())                 # the executors' copy
            yield pa.RecordBatch.from_pydict({"n": [n] * batch.num_rows})
    got = {r["n"] for r in events.select("event_id").mapInArrow(count_in_task, "n long").collect()}
    assert got == {len(sl)}
    idx.release()


@pytest.mark.parametrize("ship", ["broadcast", "file", "inline"])
def test_release_leaves_the_session_working(spark, ship):
    """release() right after share_index, before any task fetched the index:
    the session's later jobs still run.  (It used to delete a file shipped
    by addFile, and every later task then failed: 'File ... exists and does
    not match contents of ...'.)"""
    from topicmatch.spark import share_index
    sl = topicmatch.Sublist("nats")
    sl.insert_many(["a.*", "b.>"], [1, 2])
    share_index(spark, sl, ship=ship).release()
    assert spark.range(10).repartition(2).count() == 10


def test_share_index_errors(spark):
    from topicmatch.spark import share_index
    sl = topicmatch.Sublist("mqtt")
    with pytest.raises(TypeError, match="needs a topicmatch.Sublist"):
        share_index(spark, [("a", 1)])
    with pytest.raises(ValueError, match="ship='artifact' is for Spark Connect"):
        share_index(spark, sl, ship="artifact")
    with pytest.raises(ValueError, match="ship must be"):
        share_index(spark, sl, ship="carrier-pigeon")
    from topicmatch.spark import fanout
    ev = _events(spark, ["a"])
    with pytest.raises(ValueError, match="the Sublist is 'mqtt'"):
        fanout(ev, sl)


def test_index_is_reused_for_the_same_dataframe(spark):
    from topicmatch.spark import fanout_with_rejects
    ev = _events(spark, ["orders.eu.created"] * 10)
    sb = spark.createDataFrame([(1, "orders.>", None)], SUBS_SCHEMA)
    a = fanout_with_rejects(ev, sb)
    b = fanout_with_rejects(ev, sb)
    assert a.index is b.index
    c = fanout_with_rejects(ev, sb, reuse_index=False)
    d = fanout_with_rejects(ev, spark.createDataFrame([(1, "orders.>", None)], SUBS_SCHEMA))
    assert len({id(a.index), id(c.index), id(d.index)}) == 3
    assert fanout_with_rejects(ev, sb, ship="file").index is not a.index


def test_get_outside_a_task_says_why(tmp_path):
    from topicmatch.spark.ship import SharedIndex
    idx = pickle.loads(pickle.dumps(SharedIndex("x" * 32, "nats", 10, 1, "file",
                                                filename="topicmatch-index-nowhere.bin")))
    with pytest.raises(RuntimeError, match="topicmatch-index-nowhere.bin"):
        idx.get()
