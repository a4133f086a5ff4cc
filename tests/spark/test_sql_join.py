"""bench/sql_join.py, the plain Spark SQL shape-join that the benchmarks
race topicmatch against and check their totals with: its deliveries equal the
reference's and topicmatch's fan-out's, both plans, NATS and MQTT."""
import collections
import os
import sys

import pytest

from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, Expected, events_rows, random_case
from topicmatch import _reference as R

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sql_join():
    """bench/sql_join.py, imported here: it needs PySpark, which a test
    run without Spark (the wheel's) does not have at collection."""
    pytest.importorskip("pyspark")
    sys.path.insert(0, BENCH)
    import sql_join
    return sql_join


def _case(dialect, seed):
    subs, subjects = random_case(dialect, n_subs=60, n_events=400, seed=seed)
    # the SQL way has no notion of an invalid subject: valid ones only
    subjects = [s for s in subjects if s is not None and R.is_valid_subject(s, dialect)]
    return subs, events_rows(subjects)


@pytest.mark.parametrize("dialect,seed", [("nats", 11), ("mqtt", 12), ("mqtt", 13)])
def test_sql_join_is_the_reference(spark, sql_join, dialect, seed):
    from topicmatch.spark import fanout
    subs, events = _case(dialect, seed)
    ev = spark.createDataFrame(spark.sparkContext.parallelize(events, 3), EVENT_SCHEMA)
    sub_df = spark.createDataFrame(subs, SUBS_SCHEMA)
    want = Expected(dialect, subs, events)
    shape_list = sql_join.shapes(sub_df, dialect)
    assert shape_list, "random cases have filters"
    fast = sorted((r["event_id"], r["sub_id"]) for r in
                  fanout(ev, sub_df, dialect=dialect, queues="all").select("event_id", "sub_id").collect())
    for plan in ("merge", "broadcast"):
        rows = sql_join.sql_fanout(ev, sub_df, dialect, plan=plan, shape_list=shape_list) \
            .select("event_id", "sub_id").collect()
        got = collections.defaultdict(list)
        for r in rows:
            got[r["event_id"]].append(r["sub_id"])
        for e in want.plain:
            got.setdefault(e, [])
        want.check(dict(got), "all")
        assert sorted((r["event_id"], r["sub_id"]) for r in rows) == fast


def test_shapes_and_plans(spark, sql_join):
    subs = [(1, "a.*.c", None), (2, "a.>", None), (3, "x.y", "q"), (4, "*.*.c", None)]
    sub_df = spark.createDataFrame(subs, SUBS_SCHEMA)
    assert sql_join.shapes(sub_df, "nats") == [
        sql_join.Shape(2, (), False), sql_join.Shape(2, (), True),
        sql_join.Shape(3, (0, 1), False), sql_join.Shape(3, (1,), False)]
    ev = spark.createDataFrame([(1, "a.b.c", None, "p")], EVENT_SCHEMA)
    assert "BroadcastHashJoin" in sql_join.sql_fanout(ev, sub_df, plan="broadcast")._jdf \
        .queryExecution().executedPlan().toString()
    assert "SortMergeJoin" in sql_join.sql_fanout(ev, sub_df, plan="merge")._jdf \
        .queryExecution().executedPlan().toString()
    with pytest.raises(ValueError, match="not 'amqp'"):
        sql_join.sql_fanout(ev, sub_df, "amqp")
    with pytest.raises(ValueError, match="plan must be"):
        sql_join.sql_fanout(ev, sub_df, plan="hash")
