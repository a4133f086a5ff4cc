"""The sharded fan-out (docs/design.md, 'Why the sharded fan-out is exact') gives, for every event, the same
sub ids, in the same order (issue 34's one order of a row), as the unsharded
one and as the pure-Python reference (_reference.batch_row):
all three dialects, queues pick/all/none, dedupe on and off, depths 1-3,
1-8 shards, salted shards; bad subscription rows raise on the driver; the
plan is visible; workers rebuild only the shards whose rows changed.

Spark actions are few: each Hypothesis example is one collect of a union of
the unsharded and the sharded per-event frames."""
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topicmatch import InvalidSubjectError
from topicmatch import _reference as R
from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, events_rows, random_case

pytestmark = pytest.mark.spark

HERE = os.path.dirname(os.path.abspath(__file__))


def _fillers(dialect):
    """More than 64 filter shapes (the shape tables' budget), so that group
    members sit both in shape tables and in the trie, under keyed and
    replicated filters alike."""
    sep, one = ("/", "+") if dialect == "mqtt" else (".", "*")
    out = []
    for i in range(70):
        n = 2 + i % 6
        toks = ["z"] + [one if (i >> k) & 1 else f"t{k}" for k in range(n - 1)]
        out.append((5000 + i, sep.join(toks), None))
    return out


def _groups(dialect):
    """Queue groups whose members sit under keyed and replicated filters."""
    if dialect == "mqtt":
        return [(7001, "$share/w/a/+", None), (7002, "$share/w/a/+", None),
                (7003, "+/b", "w"), (7004, "+/b", "w"), (7005, "a/b", "w")]
    return [(7001, "a.*", "w"), (7002, "*.b", "w"), (7003, "a.b", "w"), (7004, "a.>", "w"),
            (7005, "#" if dialect == "amqp" else ">", "w")]


def _frames(spark, dialect, seed):
    subs, subjects = random_case(dialect, n_subs=60, n_events=250, seed=seed)
    subs = subs + _fillers(dialect) + _groups(dialect)
    # a skewed key: a third of the events on one first token
    subjects = subjects + (["a/b" if dialect == "mqtt" else "a.b"] * 120)
    if dialect == "amqp":
        subjects.append("")                    # the key of zero words
    ev = spark.createDataFrame(events_rows(subjects, seed), EVENT_SCHEMA).repartition(3)
    sb = spark.createDataFrame(subs, SUBS_SCHEMA).repartition(2)
    return subs, events_rows(subjects, seed), ev, sb


def _reference_rows(dialect, subs, events, queues, dedupe):
    """{event_id: the exact row, in the one order of a row's ids (issue 34,
    _reference.batch_row), or None for a rejected event}."""
    ref = R.ReferenceSublist(dialect)
    for sid, f, q in subs:
        ref.insert(f, sid, q)
    out = {}
    for event_id, subject, device, _ in events:
        if subject is None or not R.is_valid_subject(subject, dialect):
            out[event_id] = None
            continue
        m = ref.match(subject)
        key = device if device is not None else subject
        out[event_id] = R.batch_row(m, queues, key, dialect, dedupe)
    return out


@st.composite
def _configs(draw):
    shards = draw(st.integers(1, 8))
    salts = draw(st.dictionaries(st.integers(0, shards - 1), st.integers(1, 3), max_size=2))
    return dict(shards=shards, depth=draw(st.integers(1, 3)), salts=salts,
                queues=draw(st.sampled_from(["pick", "all", "none"])), dedupe=draw(st.booleans()),
                seed=draw(st.integers(0, 10_000)))


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cfg=_configs())
def test_sharded_equals_unsharded_and_reference(spark, dialect, cfg):
    from pyspark.sql import functions as F

    from topicmatch.spark import ShardPlan, fanout_with_rejects
    subs, events, ev, sb = _frames(spark, dialect, cfg["seed"])
    plan = ShardPlan(cfg["shards"], cfg["depth"], salts=cfg["salts"])
    common = dict(dialect=dialect, key_col="device", queues=cfg["queues"], dedupe=cfg["dedupe"])
    whole = fanout_with_rejects(ev, sb, shards=1, **common)
    part = fanout_with_rejects(ev, sb, shards=plan, **common)
    assert part.index is plan and whole.index.nsubs == len(subs)
    both = whole.per_event.withColumn("how", F.lit("whole")).unionByName(
        part.per_event.withColumn("how", F.lit("sharded")))
    got = {"whole": {}, "sharded": {}}
    for r in both.select("how", "event_id", "sub_ids").collect():
        assert r["event_id"] not in got[r["how"]], "an event came out twice"
        got[r["how"]][r["event_id"]] = r["sub_ids"]
    want = _reference_rows(dialect, subs, events, cfg["queues"], cfg["dedupe"])
    assert got["whole"] == want
    assert got["sharded"] == want


#: (shards, depth, salts, queues, dedupe) per dialect: each dialect gets
#: every queue mode, salted and unsalted shards, and two or three depths;
#: dedupe on and off.
ORDER_CONFIGS = {
    "nats": [(4, 1, {}, "pick", False), (3, 2, {0: 2, 1: 3}, "all", False),
             (5, 3, {2: 2}, "none", True)],
    "mqtt": [(3, 2, {1: 3}, "pick", True), (4, 1, {}, "all", True), (2, 3, {0: 2}, "none", False)],
    "amqp": [(3, 3, {0: 2}, "pick", False), (5, 2, {}, "none", False), (2, 1, {1: 3}, "all", True)],
}


@pytest.mark.parametrize("dialect", ["nats", "mqtt", "amqp"])
def test_explode_false_arrays_are_the_unsharded_ones_exactly(spark, dialect):
    """Issue 35, finding 7: the `sub_ids` arrays of the sharded fan-out, salted
    or not, at depths 1-3, are the unsharded arrays element for element, and
    both are _reference's row in the defined order (issue 34).  One collect
    per dialect."""
    from pyspark.sql import functions as F

    from topicmatch.spark import ShardPlan, fanout_with_rejects
    subs, events, ev, sb = _frames(spark, dialect, seed=35)
    frames = []
    for k, (n, d, salts, queues, dedupe) in enumerate(ORDER_CONFIGS[dialect]):
        common = dict(dialect=dialect, key_col="device", queues=queues, dedupe=dedupe)
        for how, shards in (("whole", 1), ("sharded", ShardPlan(n, d, salts=salts))):
            frames.append(fanout_with_rejects(ev, sb, shards=shards, **common).per_event
                          .select(F.lit(k).alias("k"), F.lit(how).alias("how"), "event_id",
                                  "sub_ids"))
    both = frames[0]
    for f in frames[1:]:
        both = both.union(f)
    got = {}
    for r in both.collect():
        got.setdefault((r["k"], r["how"]), {})[r["event_id"]] = r["sub_ids"]
    for k, (n, d, salts, queues, dedupe) in enumerate(ORDER_CONFIGS[dialect]):
        want = _reference_rows(dialect, subs, events, queues, dedupe)
        assert got[(k, "whole")] == want, (k, "whole")
        differ = [e for e in want if got[(k, "sharded")][e] != want[e]]
        assert not differ, (ORDER_CONFIGS[dialect][k], [(e, got[(k, "sharded")][e], want[e])
                                               for e in differ[:5]])


def test_bad_rows_raise_on_the_driver_naming_the_row(spark):
    """Issue 35, finding 5: the same check, and the same error, for shards=N
    and a ShardPlan (salted or not), which skipped it -- an invalid filter
    dropped silently, a null sub_id or a bad queue a worker's
    PythonException --, worded as the unsharded path words it, which also
    knows the row's position.  test_shard_tables: "auto" and streams."""
    import re

    from topicmatch.spark import FanoutInputError, ShardPlan, fanout_with_rejects
    ev = spark.createDataFrame(events_rows(["a.b"]), EVENT_SCHEMA)
    good = [(i, f"k{i}.x", None) for i in range(50)]
    cases = [((77, "a..b", None), InvalidSubjectError,
              "(sub_id=77): invalid filter 'a..b': empty token (at byte 2)"),
             ((78, "a.b", "bad queue"), InvalidSubjectError,
              "(sub_id=78, queue='bad queue'): invalid queue 'bad queue': whitespace in queue name"),
             ((None, "a.b", None), FanoutInputError, "(sub_id=None, filter='a.b'): null sub_id"),
             ((79, None, None), FanoutInputError, "(sub_id=79, filter=None): null filter"),
             ]
    for row, exc, text in cases:
        whole = spark.createDataFrame(good + [row], SUBS_SCHEMA)
        sb = whole.repartition(3)
        # the image path (a local master) checks in its build task; ship=
        # named takes the cogroup, checked by plan_shards' own job
        for shards, ship in ((4, "auto"), (ShardPlan(2, 1), "auto"),
                             (ShardPlan(3, 2, salts={1: 2}), "auto"), (ShardPlan(2, 1), "file")):
            with pytest.raises(exc, match="^a subscriptions row " + re.escape(text)):
                fanout_with_rejects(ev, sb, shards=shards, ship=ship)
        with pytest.raises(exc, match=f"^subscriptions row {len(good) + 1} " + re.escape(text)):
            fanout_with_rejects(ev, whole, shards=1)


def test_plan_is_visible_and_auto_depth_keeps_workers_small(spark):
    from topicmatch.spark import ShardPlan, SharedIndex, fanout_with_rejects, plan_shards
    import topicmatch
    # d=1 leaves one key with most filters; d=2 splits it
    rows = [(i, f"big.k{i % 40}.x", None) for i in range(800)] + \
           [(1000 + i, f"s{i}.y", None) for i in range(100)] + [(5000, "*.y", None)]
    sb = spark.createDataFrame(rows, SUBS_SCHEMA)
    plan = plan_shards(sb, shards=8)
    assert plan.shards == 8 and plan.nsubs == len(rows)
    assert plan.by_depth[1][1] >= 800 and plan.depth == 2
    assert plan.replicated == 1 and plan.largest < 400
    text = plan.explain()
    for part in ("N=8 shards", "depth d=2", "needed by every shard (replicated) 1 (", "largest shard",
                 "at d=1", "at d=3", "salted: none"):
        assert part in text, (part, text)
    ev = spark.createDataFrame(events_rows(["big.k1.x", "s3.y", "q"]), EVENT_SCHEMA)
    # "auto" keeps a small set on the broadcast path; a Sublist is always shipped whole
    assert isinstance(fanout_with_rejects(ev, sb).index, SharedIndex)
    sl = topicmatch.Sublist()
    sl.insert("a.b", 1)
    assert isinstance(fanout_with_rejects(ev, sl).index, SharedIndex)
    with pytest.raises(ValueError, match="needs the subscriptions as a DataFrame"):
        fanout_with_rejects(ev, sl, shards=4)
    with pytest.raises(ValueError, match="shards must be"):
        fanout_with_rejects(ev, sb, shards=0)
    with pytest.raises(ValueError, match="depth must be"):
        plan_shards(sb, depth=0)
    with pytest.raises(ValueError, match="salts"):
        ShardPlan(4, 1, salts={9: 2})
    stream = spark.readStream.format("rate").load().selectExpr("'a.b' AS subject")
    for shards in (4, ShardPlan(4, 1)):
        with pytest.raises(ValueError, match="use fanout_stream"):
            fanout_with_rejects(stream, sb, shards=shards)


def test_event_skew_is_salted_from_a_sample(spark):
    from topicmatch.spark import ShardPlan
    from topicmatch.spark.shard import _salts
    from pyspark.sql import functions as F
    ev = spark.range(200_000).select(F.when(F.col("id") % 10 < 9, F.lit("hot.x")).otherwise(
        F.concat(F.lit("k"), F.col("id").cast("string"), F.lit(".x"))).alias("subject"))
    plan = ShardPlan(8, 1)
    salts = _salts(ev, "subject", "nats", plan, cores=4)
    from topicmatch._core import route_keys
    hot = int(route_keys(["hot.x"], "nats", 1)[0][0] % 8)
    assert salts.get(hot) == 4 and all(r <= 2 for s, r in salts.items() if s != hot), salts
    assert _salts(ev, "subject", "nats", plan, cores=1) == {}


def _write_json(path, rows):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        for sid, flt, q in rows:
            f.write(json.dumps({"sub_id": sid, "filter": flt, "queue": q}) + "\n")
    os.replace(tmp, path)


def _shard_builds(load_log):
    if not os.path.exists(load_log):
        return []
    with open(load_log) as f:
        return [ln.split()[0] for ln in f if ln.startswith("shard-")]


def test_stream_rebuilds_only_the_shards_that_changed(spark, tmp_path, load_log):
    """Micro-batch 0 builds every shard (and, over images, the replicated
    share's); 1 (same subscriptions) builds none that a worker already
    holds; 2 (one keyed filter added) builds only the one shard it changed,
    and matches it."""
    import pyarrow.parquet as pq

    from topicmatch.spark import ShardPlan, fanout_stream
    subs = [(i, f"k{i % 16}.x{i}", None) for i in range(200)] + [(900, "*.x1", None)]
    subs_file = str(tmp_path / "subs.jsonl")
    _write_json(subs_file, subs)
    inp = tmp_path / "in"
    inp.mkdir()
    cols = ["event_id", "subject", "device", "payload"]

    def add(k, subjects):
        path = str(inp / f"e{k}.json")
        with open(path, "w") as f:
            for r in events_rows(subjects, k):
                f.write(json.dumps(dict(zip(cols, (r[0] + 1000 * k,) + r[1:]))) + "\n")
        os.utime(path, (1_700_000_000 + k, 1_700_000_000 + k))

    for k in range(3):
        add(k, [f"k{i % 16}.x{i}" for i in range(40)] + ["k3.new"])
    builds = {}
    earlier = len(_shard_builds(load_log))     # other tests' builds in this session

    def on_batch(batch_id, counts, index):
        builds[batch_id] = _shard_builds(load_log)[earlier:]
        if batch_id == 1:
            _write_json(subs_file, subs + [(999, "k3.new", None)])

    # one shard per group and few Python workers: local[2] reuses its workers
    plan = ShardPlan(4, 1)
    stream = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(inp))
    q = fanout_stream(stream, lambda: spark.read.schema(SUBS_SCHEMA).json(subs_file),
                      str(tmp_path / "out"), str(tmp_path / "ckpt"), shards=plan, queues="all",
                      trigger={"availableNow": True}, on_batch=on_batch)
    q.awaitTermination(300)
    assert q.exception() is None
    counts = {r["batch_id"]: r for r in pq.read_table(str(tmp_path / "out" / "counts")).to_pylist()}
    assert sorted(counts) == [0, 1, 2]
    assert all(c["index_id"] == "sharded:N=4:d=1" and c["index_rebuilt"] is None
               for c in counts.values())
    new0 = set(builds[0])
    new1 = set(builds[1][len(builds[0]):]) - new0
    new2 = set(builds[2][len(builds[1]):]) - new0
    assert len(new0) == 5 and not new1, builds         # four shards and "*.x1"'s, then none new
    assert len(new2) == 1, builds                      # only the shard of "k3.new"
    deliveries = pq.read_table(str(tmp_path / "out" / "deliveries")).to_pylist()
    assert any(r["sub_id"] == 999 for r in deliveries)
    assert not any(r["sub_id"] == 999 and r["batch_id"] < 2 for r in deliveries)


CAPPED = r"""
import json, sys
from pyspark.sql import functions as F
from topicmatch.spark import IndexTooLargeError, fanout_with_rejects, local_session
spark = local_session("local[2]", conf={"spark.driver.maxResultSize": "1m",
                                        "spark.sql.shuffle.partitions": "8"})
n = int(sys.argv[1])
subs = spark.range(n).select(F.col("id").alias("sub_id"),
    F.concat(F.lit("k"), (F.col("id") % 97).cast("string"), F.lit(".d"), F.col("id").cast("string"))
     .alias("filter"), F.lit(None).cast("string").alias("queue"))
ev = spark.range(20000).select(F.col("id").alias("event_id"),
    F.concat(F.lit("k"), (F.col("id") % 101).cast("string"), F.lit(".d"), (F.col("id") * 7 % n).cast("string"))
     .alias("subject"), F.lit(None).cast("string").alias("device"), F.lit("p").alias("payload"))
out = {}
try:
    # built on the driver and shipped (ship= named; the default builds an image on the executors)
    fanout_with_rejects(ev, subs, shards=1, ship="broadcast").counts()
    out["unsharded"] = "passed"
except IndexTooLargeError as e:
    out["unsharded"] = str(e)
for name, how in (("sharded", dict(shards=4)), ("image", dict(shards=1))):
    r = fanout_with_rejects(ev, subs, **how)
    c = r.counts()
    out[name] = [list(c), r.deliveries.agg(F.sum(F.col("event_id") * 1000003 + F.col("sub_id"))).first()[0]]
print("RESULT " + json.dumps(out))
"""


def test_capped_driver_fails_unsharded_and_passes_sharded(spark, tmp_path):
    """A driver whose spark.driver.maxResultSize cannot take the subscriptions:
    the unsharded fan-out built on the driver fails with an error that names
    shards=; the sharded one, and the unsharded index built as an image on
    the executors, give the uncapped session's count and checksum.  Own JVM:
    the cap cannot be changed at runtime."""
    from pyspark.sql import functions as F

    from topicmatch.spark import fanout_with_rejects
    n = 150_000
    script = tmp_path / "capped.py"
    script.write_text(CAPPED)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "TOPICMATCH_SPARK_LOAD_LOG")}
    p = subprocess.run([sys.executable, str(script), str(n)], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    got = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert "maxResultSize" in got["unsharded"] and "shards=" in got["unsharded"], got
    subs = spark.range(n).select(F.col("id").alias("sub_id"), F.concat(
        F.lit("k"), (F.col("id") % 97).cast("string"), F.lit(".d"), F.col("id").cast("string"))
        .alias("filter"), F.lit(None).cast("string").alias("queue"))
    ev = spark.range(20000).select(F.col("id").alias("event_id"), F.concat(
        F.lit("k"), (F.col("id") % 101).cast("string"), F.lit(".d"),
        (F.col("id") * 7 % n).cast("string")).alias("subject"),
        F.lit(None).cast("string").alias("device"), F.lit("p").alias("payload"))
    r = fanout_with_rejects(ev, subs, shards=1)
    want = [list(r.counts()),
            r.deliveries.agg(F.sum(F.col("event_id") * 1000003 + F.col("sub_id"))).first()[0]]
    assert got["sharded"] == got["image"] == want and want[0][1] > 0


def test_a_void_queue_column_means_all_plain(spark):
    """A queue column of nulls only is typed void (lit(None), or pandas'
    all-None column through createDataFrame)."""
    from pyspark.sql import functions as F

    from topicmatch.spark import ShardPlan, fanout_with_rejects
    sb = spark.createDataFrame([(1, "a.*"), (2, "a.b")], ["sub_id", "filter"]).withColumn(
        "queue", F.lit(None))
    assert sb.schema["queue"].dataType.typeName() == "void"
    ev = spark.createDataFrame(events_rows(["a.b", "a.c"]), EVENT_SCHEMA)
    for shards in (1, ShardPlan(2, 1)):
        got = {r["event_id"]: sorted(r["sub_ids"]) for r in
               fanout_with_rejects(ev, sb, shards=shards).per_event.collect()}
        assert got == {1: [1, 2], 2: [1]}, shards


SELF_BUILT = r"""
import sys
from pyspark.sql import SparkSession
from topicmatch.spark import ExecutorEnvironmentError, fanout
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
ev = spark.createDataFrame([(1, "a.b")], "event_id long, subject string")
sb = spark.createDataFrame([(1, "a.b")], "sub_id long, filter string")
try:
    fanout(ev, sb).collect()
    print("NO ERROR")
except ExecutorEnvironmentError as e:
    print("CLEAR " + str(e))
"""


def test_a_session_the_user_built_gets_the_executor_check(tmp_path):
    """A local session built by hand whose workers run a Python without
    topicmatch: one clear error naming the fix, not a worker's stack."""
    base = getattr(sys, "_base_executable", None)
    if not base or sys.prefix == sys.base_prefix:
        pytest.skip("needs a virtual environment (its base Python lacks topicmatch)")
    probe = subprocess.run([base, "-c", "import topicmatch, pyarrow"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"the base Python {base} has topicmatch and pyarrow")
    script = tmp_path / "self_built.py"
    script.write_text(SELF_BUILT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_DRIVER_PYTHON",)}
    env["PYSPARK_PYTHON"] = base
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout.strip().splitlines()[-1]
    assert out.startswith("CLEAR the executors cannot run topicmatch"), p.stdout[-2000:]
    assert "PYSPARK_PYTHON" in out
