"""Spark fan-out benchmark (DESIGN.md section 5): the `light` workload's
publishes as events (repeated to --events rows) against its 100k
subscriptions, on local[2], in one run:

  (a) identity   an identity mapInArrow over the same subject column
  (b) fanout     fastsub.spark.fanout(events, subs) -- one row per delivery,
                 the event's columns carried along (queues="pick")
  (b') arrays    fanout(..., explode=False): one row per event
  (c) naive      rdd.mapPartitions looping Sublist.match() per row
  (p) plumbing   fanout against an empty subscriptions table: the same Spark,
                 Arrow and explode path with (almost) no matching work
  (m) engine     Sublist.match_many alone, on the driver, one thread, over
                 the same subjects in batches of the Arrow batch size

Every pass ends in the `noop` sink, so each one reads the cached events and
produces its rows without writing them anywhere.  Medians of --repeat runs,
interleaved.  Target: b/a <= 1.5.

    .venv/bin/python bench/bench_spark.py [--events 2000000] [--repeat 5] [--master local[2]]

Before timing, fanout(queues="all") is checked against the workload's exact
pair count (every matching subscription line, for every publish).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workloads import EXPECTED, load  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--batch", type=int, default=None,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default: 10000)")
    ap.add_argument("--skip-naive", action="store_true")
    args = ap.parse_args(argv)

    import numpy as np
    import pyarrow as pa
    from pyspark.sql import functions as F

    from fastsub import InvalidSubjectError
    from fastsub.spark import fanout, fanout_with_rejects, local_session

    filters, ids, queues, pubs = load("light")
    reps = -(-args.events // len(pubs))
    subjects = (pubs * reps)[: args.events]
    conf = {}
    if args.batch:
        conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = args.batch
    spark = local_session(args.master, app_name="fastsub bench", conf=conf)

    table = pa.table({"event_id": pa.array(np.arange(len(subjects), dtype=np.int64)),
                      "subject": pa.array(subjects, pa.string())})
    events = spark.createDataFrame(table).repartition(args.partitions).cache()
    n = events.count()
    subs = spark.createDataFrame(
        pa.table({"sub_id": pa.array(ids, pa.int64()), "filter": pa.array(filters, pa.string()),
                  "queue": pa.array(queues, pa.string())})).cache()
    subs.count()
    batch = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    print(f"{n:,} events (light publishes x{reps}), {len(filters):,} subscriptions, "
          f"{args.master}, {args.partitions} partitions, Arrow batches of {batch} rows", flush=True)

    # correctness first: every matching subscription line, for every publish
    pairs_per_million, _ = EXPECTED["light"]
    full, rem = divmod(n, len(pubs))
    if rem == 0:
        got = fanout(events, subs, queues="all").count()
        want = pairs_per_million * full * len(pubs) // 1_000_000
        print(f"check: fanout(queues='all') = {got:,} deliveries, expected {want:,}"
              f" {'OK' if got == want else 'MISMATCH'}", flush=True)
        if got != want:
            return 1

    def noop(df):
        df.write.format("noop").mode("overwrite").save()

    def identity_pass():
        def ident(batches):
            yield from batches
        noop(events.select("subject").mapInArrow(ident, "subject string"))

    build_times = []

    def fanout_pass(explode):
        t0 = time.perf_counter()
        res = fanout_with_rejects(events, subs, explode=explode)
        build_times.append(time.perf_counter() - t0)
        noop(res.deliveries)

    bc = spark.sparkContext.broadcast(_index(filters, ids, queues))  # pickled via to_bytes()

    def naive_pass():
        def per_partition(rows):
            sl = bc.value
            for row in rows:
                try:
                    r = sl.match(row.subject)
                except (InvalidSubjectError, TypeError):
                    continue
                for sid in r.subs:
                    yield (row.event_id, row.subject, sid)
                for _, _, members in r.groups:
                    yield (row.event_id, row.subject, members[0])
        rdd = events.rdd.mapPartitions(per_partition)
        noop(spark.createDataFrame(rdd, "event_id long, subject string, sub_id long"))

    empty_subs = spark.createDataFrame([], "sub_id long, filter string, queue string")

    def plumbing_pass():
        noop(fanout(events, empty_subs))

    sl = _index(filters, ids, queues)
    step = int(batch)
    chunks = [table.column("subject").slice(i, step) for i in range(0, n, step)]

    def engine_pass():
        for c in chunks:
            sl.match_many(c).to_arrow()

    passes = [("a", "identity mapInArrow", identity_pass),
              ("b", "fanout (explode)", lambda: fanout_pass(True)),
              ("b'", "fanout (explode=False)", lambda: fanout_pass(False)),
              ("p", "plumbing (empty index)", plumbing_pass),
              ("m", "match_many alone, 1 thread", engine_pass)]
    if not args.skip_naive:
        passes.append(("c", "naive mapPartitions+match()", naive_pass))
    times = {k: [] for k, _, _ in passes}
    for k, _, f in passes:  # warm-up: JIT, Python workers, broadcasts
        f()
    build_times.clear()
    for _ in range(args.repeat):
        for k, _, f in passes:
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{'pass':<34}{'median s':>10}{'rows/s':>14}{'ns/event':>10}   runs")
    for k, name, _ in passes:
        print(f"({k}) {name:<29}{med[k]:>10.2f}{n / med[k]:>14,.0f}{med[k] / n * 1e9:>10.0f}   "
              + " ".join(f"{t:.2f}" for t in times[k]))
    build = statistics.median(build_times)
    print(f"inside (b) and (b'): building + shipping the index, median {build:.2f} s "
          f"({build / n * 1e9:.0f} ns/event at this size)")
    arrays = med["b'"] / med["a"]
    print(f"b/a = {med['b'] / med['a']:.2f} (target <= 1.5); without the index build "
          f"{(med['b'] - build) / med['a']:.2f}   b'/a = {arrays:.2f}   p/a = {med['p'] / med['a']:.2f}"
          + (f"   c/b = {med['c'] / med['b']:.1f}" if "c" in med else ""))
    return 0


def _index(filters, ids, queues):
    from fastsub import Sublist
    sl = Sublist("nats")
    sl.insert_many(filters, ids, queues)
    return sl


if __name__ == "__main__":
    sys.exit(main())
