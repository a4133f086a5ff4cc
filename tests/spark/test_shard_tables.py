"""A sharded fan-out takes any legal table (issue 35, findings 3-5).

- Column names: any name Spark allows -- a dot, a backtick, a space,
  Unicode, one of the fan-out's internal names -- comes through every path
  untouched (shards=1, N, "auto" past a lowered AUTO_SHARD_MIN_SUBS, a
  ShardPlan salted and not, fanout_stream), as subject, key and passenger
  columns of the events, and as extra columns of the subscriptions.
- Internal columns cannot clash: an events column `__topicmatch_key` (the old
  route key's name) keeps its own values.
- Validation: a bad subscriptions row raises the same error, on the driver,
  before any event is read, on every sharded path; the unsharded path words
  it the same way, with the row's position.

The batch paths of one events table are unioned into one collect."""
import json
import re

import pytest

from topicmatch import InvalidSubjectError
from topicmatch import _reference as R
from spark_expect import NATS_SUBJECTS, NATS_SUBS, SUBS_SCHEMA

pytestmark = pytest.mark.spark

#: Event columns: (name, type).  The subject and key columns are among the
#: odd names; the others ride along.  "e0", "g", "key", "pick" are the
#: cogroup frame's own names (shard.py), "__topicmatch_*" the old ones.
EVENT_COLUMNS = [("ev.id", "long"), ("payload.device", "string"), ("a`b", "string"),
                 ("sp ace", "string"), ("ünï.ß `x`", "string"), ("__topicmatch_key", "long"),
                 ("__topicmatch_group", "long"), ("e0", "string"), ("g", "int"), ("key", "string"),
                 ("pick", "string"), ("`", "string")]


def _quote(name):
    return "`" + name.replace("`", "``") + "`"


def _ddl(columns):
    return ", ".join(f"{_quote(n)} {t}" for n, t in columns)


def _event_rows():
    subjects = NATS_SUBJECTS + ["orders.eu.created"] * 20 + [f"orders.k{i}.created" for i in range(20)]
    rows = []
    for i, s in enumerate(subjects):
        other = subjects[(i * 7) % len(subjects)]
        rows.append((i, s, other, f"dev-{i % 5}" if i % 4 else None, f"ü{i % 3}" if i % 3 else None,
                     -7 - i, -100 - i, f"x{i}", i % 4, f"k{i}", None if i % 2 else "p", "`"))
    return rows


def _subs(spark):
    """NATS_SUBS with extra columns of odd names (ignored by the fan-out)."""
    rows = [(sid, f, q, f"x{sid}", sid * 2, "s") for sid, f, q in NATS_SUBS]
    return spark.createDataFrame(rows, SUBS_SCHEMA + ", `x.y` string, `__topicmatch_key` long, "
                                 "`a``b` string")


def _want(subject_of, key_of):
    """{event_id: sorted sub_ids or None} from _reference, queues="all" (no pick)."""
    ref = R.ReferenceSublist("nats")
    for sid, f, q in NATS_SUBS:
        ref.insert(f, sid, q)
    out = {}
    for r in _event_rows():
        s = subject_of(r)
        if s is None or not R.is_valid_subject(s, "nats"):
            out[r[0]] = None
            continue
        m = ref.match(s)
        out[r[0]] = sorted(list(m.subs) + [i for _, _, ms in m.groups for i in ms])
    return out


@pytest.mark.parametrize("subject_col,key_col,paths", [
    ("payload.device", "sp ace", ("1", "4", "auto", "plan-salted", "plan-d2")),
    ("a`b", "ünï.ß `x`", ("1", "plan-salted"))])
def test_any_column_name_through_every_batch_path(spark, monkeypatch, subject_col, key_col, paths):
    """Finding 3 (a dot: UNRESOLVED_COLUMN; a backtick:
    INVALID_ATTRIBUTE_NAME_SYNTAX, both sharded only) and finding 4 (an
    events column `__topicmatch_key` overwritten by the route key): every
    path gives the unsharded rows -- every column, names and values -- and
    the reference's ids."""
    import topicmatch.spark
    from topicmatch.spark import ShardPlan, fanout_with_rejects
    from pyspark.sql import functions as F
    monkeypatch.setattr(topicmatch.spark, "AUTO_SHARD_MIN_SUBS", 0)
    ev = spark.createDataFrame(_event_rows(), _ddl(EVENT_COLUMNS)).repartition(3)
    sb = _subs(spark)
    every = {"1": 1, "4": 4, "auto": "auto", "plan-salted": ShardPlan(3, 1, salts={0: 2, 2: 3}),
             "plan-d2": ShardPlan(2, 2)}
    paths = {how: every[how] for how in paths}
    frames, results = [], {}
    for how, shards in paths.items():
        r = fanout_with_rejects(ev, sb, subject_col=subject_col, key_col=key_col, queues="all",
                                shards=shards)
        results[how] = r
        assert r.per_event.columns == ev.columns + ["sub_ids"], how
        frames.append(r.per_event.select(F.lit(how).alias("how"),
                                         *[F.col(_quote(c)) for c in r.per_event.columns]))
    if "auto" in results:
        assert type(results["auto"].index).__name__ == "ShardPlan"
    both = frames[0]
    for f in frames[1:]:
        both = both.union(f)
    got = {how: {} for how in paths}
    for row in both.collect():
        values = tuple(row)[1:]
        ids = values[-1]
        got[row["how"]][values[0]] = values[:-1] + (None if ids is None else tuple(sorted(ids)),)
    assert got["1"] == {r[0]: r + (got["1"][r[0]][-1],) for r in _event_rows()}
    for how in paths:
        assert got[how] == got["1"], how
    col = [n for n, _ in EVENT_COLUMNS].index(subject_col)
    want = _want(lambda r: r[col], None)
    assert {e: None if v[-1] is None else list(v[-1]) for e, v in got["1"].items()} == want
    # the derived frames keep the names too
    r = results["plan-salted"]
    assert r.deliveries.columns == ev.columns + ["sub_id"]
    assert r.rejected.columns == ev.columns + ["error"]


def test_any_column_name_through_a_stream(spark, tmp_path):
    """fanout_stream, sharded by a salted ShardPlan, with the same odd names:
    the deliveries it writes are the batch fan-out's."""
    import pyarrow.parquet as pq

    from topicmatch.spark import ShardPlan, fanout_stream, fanout_with_rejects
    inp = tmp_path / "in"
    inp.mkdir()
    with open(inp / "e0.json", "w") as f:
        for r in _event_rows():
            f.write(json.dumps(dict(zip([n for n, _ in EVENT_COLUMNS], r))) + "\n")
    sb = _subs(spark)
    schema = _ddl(EVENT_COLUMNS)
    stream = spark.readStream.schema(schema).json(str(inp))
    q = fanout_stream(stream, sb, str(tmp_path / "out"), str(tmp_path / "ckpt"),
                      subject_col="payload.device", key_col="sp ace", queues="all",
                      shards=ShardPlan(3, 1, salts={0: 2}), trigger={"availableNow": True})
    q.awaitTermination(300)
    assert q.exception() is None
    got = pq.read_table(str(tmp_path / "out" / "deliveries")).drop(["batch_id"])
    assert got.column_names == [n for n, _ in EVENT_COLUMNS] + ["sub_id"]
    ev = spark.read.schema(schema).json(str(inp))
    want = fanout_with_rejects(ev, sb, subject_col="payload.device", key_col="sp ace",
                               queues="all", shards=1).deliveries.collect()
    assert sorted(got.to_pylist(), key=repr) == sorted((r.asDict() for r in want), key=repr)


def test_the_same_validation_on_every_path(spark, monkeypatch, tmp_path):
    """Finding 5, beside test_shard.py's test of every bad row on shards=N,
    a ShardPlan and shards=1: "auto" past AUTO_SHARD_MIN_SUBS and
    fanout_stream (before the query starts) raise the same error."""
    import topicmatch.spark
    from topicmatch.spark import FanoutInputError, ShardPlan, fanout_stream, fanout_with_rejects
    monkeypatch.setattr(topicmatch.spark, "AUTO_SHARD_MIN_SUBS", 0)
    ev = spark.createDataFrame([(1, "a.b")], "event_id long, subject string")
    stream = spark.readStream.schema("event_id long, subject string").json(str(tmp_path))
    good = [(i, f"k{i}.x", None) for i in range(20)]
    bad = spark.createDataFrame(good + [(77, "a..b", None)], SUBS_SCHEMA).repartition(3)
    text = re.escape("a subscriptions row (sub_id=77): invalid filter 'a..b': empty token (at byte 2)")
    with pytest.raises(InvalidSubjectError, match="^" + text):
        fanout_with_rejects(ev, bad, shards="auto")
    with pytest.raises(InvalidSubjectError, match="^" + text):
        fanout_stream(stream, bad, str(tmp_path / "o1"), str(tmp_path / "c1"), shards=ShardPlan(2, 1))
    null = spark.createDataFrame(good + [(None, "a.b", None)], SUBS_SCHEMA).repartition(3)
    with pytest.raises(FanoutInputError, match=re.escape("(sub_id=None, filter='a.b'): null sub_id")):
        fanout_stream(stream, null, str(tmp_path / "o2"), str(tmp_path / "c2"), shards=4)
    assert not spark.streams.active, "a stream started"
