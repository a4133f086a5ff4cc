"""The sharded fan-out routes events in the JVM (topicmatch.spark.shard.
route_column, a Spark SQL expression): on every subject the dialect accepts
it must give route_keys's key exactly (csrc/rules/fs_route.c), or a filter keyed
in C and an event keyed in the JVM would miss each other."""
import random

import pytest

from topicmatch import _reference as R
from topicmatch._core import ROUTE_ANY, ROUTE_INVALID, ROUTE_KEYED, ROUTE_NULL, route_keys

pytestmark = pytest.mark.spark

DEPTHS = (1, 2, 3, 4)
# tokens: plain, unicode (multi-byte UTF-8), empty, `$` topics, wildcard-like
TOKENS = ["a", "orders", "é", "日本", "", "$SYS", "$share", "g1", "*", "+", "#", ">", "x y", "a-b_c"]


def _subjects(dialect, seed, n=3000):
    rng = random.Random(seed)
    sep = "/" if dialect == "mqtt" else "."
    out = [None, "", sep, "$share/g/x/y", "$share/g", "a" * 300, "a" + sep * 5]
    for _ in range(n):
        k = rng.choice([1, 1, 2, 3, 4, 5, 7])       # shorter and longer than the depths
        out.append(sep.join(rng.choice(TOKENS) for _ in range(k)))
    return out


def _jvm_keys(spark, values, column_fn, dialect):
    """{row: its Row of k1.. keys}: column_fn(col, dialect, d) at every depth, in the JVM."""
    from pyspark.sql import functions as F
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i long, v string")
    return {r["i"]: r for r in df.select(
        "i", *[column_fn(F.col("v"), dialect, d).alias(f"k{d}") for d in DEPTHS]).collect()}


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_route_column_is_route_keys(spark, dialect):
    from topicmatch.spark.route import route_column
    subjects = _subjects(dialect, seed={"nats": 1, "mqtt": 2, "amqp": 3}[dialect])
    got = _jvm_keys(spark, subjects, route_column, dialect)
    checked = {ROUTE_KEYED: 0, ROUTE_ANY: 0}
    for d in DEPTHS:
        keys, kinds = route_keys(subjects, dialect, d)
        for i, s in enumerate(subjects):
            jvm = got[i][f"k{d}"]
            if kinds[i] == ROUTE_NULL:
                assert jvm is None
            elif kinds[i] != ROUTE_INVALID:
                assert jvm == int(keys[i]), (dialect, d, s, int(kinds[i]))
                checked[int(kinds[i])] += 1
    # both kinds were tried, many times: keyed, and shorter than the depth
    assert checked[ROUTE_KEYED] > 1000 and checked[ROUTE_ANY] > 300, checked
    if dialect == "amqp":       # the empty key: zero words, shorter than any depth
        assert route_keys([""], "amqp", 1)[1][0] == ROUTE_ANY


def test_a_filter_keyed_in_c_meets_its_subjects_in_the_jvm(spark):
    """A filter keyed by the C router (route_keys(filters=True)) lands where
    the JVM sends its subjects."""
    from pyspark.sql import functions as F

    from topicmatch.spark.route import route_column
    pairs = [("nats", "orders.eu.>", "orders.eu.x.y"), ("mqtt", "$share/g/sport/tennis/#", "sport/tennis"),
             ("mqtt", "a//+", "a//b"), ("amqp", "a.b.#", "a.b")]
    for dialect, flt, subject in pairs:
        fkey = route_keys([flt], dialect, 2, filters=True)
        assert fkey[1][0] == ROUTE_KEYED
        row = spark.createDataFrame([(subject,)], "s string").select(
            route_column(F.col("s"), dialect, 2).alias("k")).first()
        assert row["k"] == int(fkey[0][0]), (dialect, flt, subject)


def _filters(dialect, seed, n=3000):
    rng = random.Random(seed)
    sep, one, rest = {"nats": (".", "*", ">"), "mqtt": ("/", "+", "#"), "amqp": (".", "*", "#")}[dialect]
    words = TOKENS + [one, one, rest]
    out = [None] + [f for f in ("", one, rest, "$share/g/" + rest, "$share/g/a/b")
                    if R.is_valid_filter(f, dialect)]
    while len(out) < n:
        f = sep.join(rng.choice(words) for _ in range(rng.choice([1, 1, 2, 3, 4, 6])))
        if dialect == "mqtt" and rng.random() < 0.2:
            f = f"$share/{rng.choice(['g', 'q1', 'é'])}/{f}"
        if R.is_valid_filter(f, dialect):
            out.append(f)
    return out


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_filter_route_column_is_route_keys(spark, dialect):
    """The sharded image path routes filters in the JVM too (its per-shard
    digests and builds): equal to route_keys(filters=True) on valid filters,
    -1 for the ones every shard needs."""
    from topicmatch.spark.route import filter_route_column
    filters = _filters(dialect, seed={"nats": 4, "mqtt": 5, "amqp": 6}[dialect])
    got = _jvm_keys(spark, filters, filter_route_column, dialect)
    checked = {ROUTE_KEYED: 0, ROUTE_ANY: 0}
    for d in DEPTHS:
        keys, kinds = route_keys(filters, dialect, d, filters=True)
        for i, f in enumerate(filters):
            jvm = got[i][f"k{d}"]
            if kinds[i] == ROUTE_NULL:
                assert jvm is None
            else:
                assert kinds[i] != ROUTE_INVALID, f
                want = int(keys[i]) if kinds[i] == ROUTE_KEYED else -1
                assert jvm == want, (dialect, d, f, int(kinds[i]))
                checked[int(kinds[i])] += 1
    assert checked[ROUTE_KEYED] > 500 and checked[ROUTE_ANY] > 1000, checked


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_filter_bucket_is_the_route_key_mod_n(spark, dialect):
    """filter_bucket (the statistics' buckets, the build's images) is
    filter_key's key mod n in one expression: -1 (or the value given for
    them) for the filters every shard needs, 0 for a null -- with one
    bucket too, where the remainder of -1 would be 0."""
    from pyspark.sql import functions as F

    from topicmatch.spark.route import filter_bucket, filter_inner, filter_route_column
    filters = _filters(dialect, seed={"nats": 7, "mqtt": 8, "amqp": 9}[dialect], n=1500)
    for n, replicated in ((1, -1), (4, 4), (4096, -1)):
        def bucket(col, dialect, d):
            return filter_bucket(filter_inner(col, dialect), dialect, d, n, replicated)
        keys = _jvm_keys(spark, filters, filter_route_column, dialect)
        got = _jvm_keys(spark, filters, bucket, dialect)
        for i, f in enumerate(filters):
            for d in DEPTHS:
                key = keys[i][f"k{d}"]
                want = 0 if key is None else replicated if key == -1 else key % n
                assert got[i][f"k{d}"] == want, (dialect, n, d, f, key)
