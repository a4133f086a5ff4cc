"""The fan-outs that must give the same rows everywhere.

compute(spark, ships) runs fanout_with_rejects on two generated cases for
each shipping method (cases= to choose), and the documented share_index
examples (examples=False: not); results are
plain lists (rows ordered by every column) so runs can be compared exactly.
The tests call it in-process on local mode, and run this file as a script,
in its own process, against a standalone cluster (--master spark://...) or a
Spark Connect server (--remote sc://...), which need a driver of their own:

    python remote_checks.py (--master URL | --remote URL) --ships broadcast,file --out FILE \
        [--cases nats,mqtt] [--no-examples]

A ship "auto@DIR" or "sharded@DIR" runs that fan-out with image_dir=DIR.
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doc_examples import run  # noqa: E402
from spark_expect import EVENT_SCHEMA, SUBS_SCHEMA, events_rows, random_case  # noqa: E402

CASES = {
    "nats": ("nats", random_case("nats", n_subs=50, n_events=400, seed=21), "device"),
    "mqtt": ("mqtt", random_case("mqtt", n_subs=50, n_events=400, seed=22), None),
}


def _rows(df, *order):
    return [list(r) for r in df.orderBy(*(order or df.columns)).collect()]


def compute(spark, ships, cases=tuple(CASES), examples=True):
    from topicmatch.spark import ShardPlan, fanout, fanout_with_rejects, is_connect
    out = {"fanout": {}, "examples": {}, "shipped_by": {}, "index_ids": [], "cases": list(cases)}
    for name in cases:
        dialect, (subs, subjects), key = CASES[name]
        ev = spark.createDataFrame(events_rows(subjects), EVENT_SCHEMA).repartition(3)
        sb = spark.createDataFrame(subs, SUBS_SCHEMA)
        for ship in [s for s in ships if s != "stream"]:
            # one matching pass: the counts are observed while the deliveries
            # are collected, the rejected rows come from the persisted frame.
            # "sharded": the sharded fan-out (4 shards at depth 1, one of them
            # salted into 2 groups) instead of a shipped index.
            # "auto@DIR", "sharded@DIR": with image_dir=DIR (a path or a URI)
            kind, _, image_dir = ship.partition("@")
            how = dict(shards=ShardPlan(4, 1, salts={1: 2})) if kind == "sharded" else dict(ship=kind)
            if image_dir:
                how["image_dir"] = image_dir
            res = fanout_with_rejects(ev, sb, dialect=dialect, key_col=key, **how)
            out.setdefault("route", {})[f"{name}/{ship}"] = res.plan.route
            res = res.observe().persist()
            if kind == "sharded":
                out["shipped_by"][f"{name}/{ship}"] = res.index.index_id
            else:
                out["shipped_by"][f"{name}/{ship}"] = res.index.shipped_by
                out.setdefault("image_path", {})[f"{name}/{ship}"] = getattr(res.index, "image_path", None)
                out["index_ids"].append(res.index.index_id)
            got = out["fanout"][f"{name}/{ship}"] = {
                "deliveries": _rows(res.deliveries),
                "rejected": _rows(res.rejected),
                "counts": list(res.observed_counts()),
            }
            res.unpersist()
            if ship == ships[0]:
                got["arrays"] = _rows(fanout(ev, sb, dialect=dialect, key_col=key, **how,
                                             explode=False).select("event_id", "sub_ids"), "event_id")
    if "stream" in ships:
        out["stream"] = _stream(spark)
    _, subjects = random_case("nats", n_events=300, seed=23)
    events = spark.createDataFrame(events_rows(subjects + ["orders.eu.created", "billing.x"] * 30),
                                   EVENT_SCHEMA).repartition(3)
    names = [] if not examples else ["mapInArrow"] if is_connect(spark) else ["mapPartitions", "mapInArrow"]
    for name in names:
        ns = run(["share", name], {"spark": spark, "events": events})
        out["examples"][name] = _rows(ns["pairs"])
        out["shipped_by"][f"example/{name}"] = ns["idx"].shipped_by
        out["index_ids"].append(ns["idx"].index_id)
    out["errors"] = {}
    if is_connect(spark):
        import topicmatch
        from topicmatch.spark import share_index
        try:
            share_index(spark, topicmatch.Sublist(), ship="broadcast")
        except ValueError as e:
            out["errors"]["broadcast"] = str(e)
    return out


def _stream(spark):
    """fanout_stream over the nats case's events, written as two Parquet
    files and read one per micro-batch, against the same subscriptions
    DataFrame: -> the deliveries (batch_id dropped, ordered as _rows
    orders them) and each micro-batch's index_rebuilt."""
    import tempfile

    from topicmatch.spark import fanout_stream
    dialect, (subs, subjects), key = CASES["nats"]
    work = tempfile.mkdtemp(prefix="topicmatch-stream-check-")
    rows = events_rows(subjects)
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        spark.createDataFrame(part, EVENT_SCHEMA).coalesce(1).write.parquet(f"{work}/in/{i}")
    # the two directories' files, each a micro-batch of its own
    files = f"{work}/files"
    os.makedirs(files)
    for i in range(2):
        (name,) = [n for n in os.listdir(f"{work}/in/{i}") if n.endswith(".parquet")]
        os.rename(f"{work}/in/{i}/{name}", f"{files}/part-{i}.parquet")
    events = spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(files)
    sb = spark.createDataFrame(subs, SUBS_SCHEMA)
    rebuilt = {}
    q = fanout_stream(events, sb, f"{work}/out", f"{work}/checkpoint", dialect=dialect,
                      key_col=key, trigger={"availableNow": True},
                      on_batch=lambda b, counts, index: rebuilt.__setitem__(b, index.shipped_by))
    try:
        q.awaitTermination()
        out = spark.read.parquet(f"{work}/out/deliveries").drop("batch_id")
        counts = spark.read.parquet(f"{work}/out/counts").orderBy("batch_id").collect()
        return {"deliveries": _rows(out), "rebuilt": [r["index_rebuilt"] for r in counts],
                "shipped_by": [rebuilt[b] for b in sorted(rebuilt)]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--master")
    g.add_argument("--remote")
    ap.add_argument("--ships", required=True)
    ap.add_argument("--cases", default=",".join(CASES), help="of " + ", ".join(CASES))
    ap.add_argument("--no-examples", dest="examples", action="store_false",
                    help="leave out the share_index examples")
    ap.add_argument("--out", required=True)
    ap.add_argument("--conf", action="append", default=[], metavar="K=V")
    args = ap.parse_args(argv)
    from topicmatch.spark import local_session, remote_session
    if args.remote:
        spark = remote_session(args.remote, app_name="topicmatch remote checks")
    else:
        conf = dict(kv.split("=", 1) for kv in args.conf)
        spark = local_session(args.master, app_name="topicmatch cluster checks", conf=conf)
    try:
        result = compute(spark, args.ships.split(","), args.cases.split(","), args.examples)
        result["executor_python"] = sorted({r[0] for r in spark.range(4, numPartitions=4).mapInArrow(
            _python_of_worker, "python string").collect()})
    finally:
        spark.stop()
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


def _python_of_worker(batches):
    import sys as _sys

    import pyarrow as pa
    for b in batches:
        yield pa.RecordBatch.from_pydict({"python": [_sys.executable] * b.num_rows})


if __name__ == "__main__":
    sys.exit(main())
