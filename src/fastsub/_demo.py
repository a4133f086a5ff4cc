"""`fastsub demo`: an IoT telemetry sample, fanned out on local Spark.

Subjects are `telemetry.SITE.DEVICE.METRIC` (NATS).  Subscriptions:
per-device dashboards (literal filters), maintenance watchlists
(`telemetry.SITE.DEVICE.*`), site operations (`telemetry.SITE.>`), fleet-wide
monitors (`telemetry.*.*.temperature`), and three queue groups whose members
share the work: `alerting` (vibration), `billing` (power) and `archive`
(everything).  The pick hashes the device id (--key-col device), so every
event of one device goes to the same archive worker.  A few events are
malformed (null, empty token, whitespace, a wildcard) and end up in
`rejected`; heartbeats (`heartbeat.DEVICE`) match nothing.
"""
import csv
import os
import random
import shutil

SITES = ("plant-a", "plant-b", "warehouse-c", "lab-d")
METRICS = ("temperature", "humidity", "vibration", "power", "status")
DEVICES_PER_SITE = 250


def generate(out_dir, n_events=200_000, seed=7):
    """Write out_dir/events.parquet and out_dir/subscriptions.csv.
    -> (events path, subscriptions path, description lines)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    devices = [(site, f"dev-{k:04d}") for k, site in
               ((i, SITES[i // DEVICES_PER_SITE]) for i in range(len(SITES) * DEVICES_PER_SITE))]

    subs = []  # (filter, queue, role)

    def add(f, q, role):
        subs.append((f, q, role))

    for site, dev in rng.sample(devices, 600):                       # dashboards
        for metric in rng.sample(METRICS, 3):
            add(f"telemetry.{site}.{dev}.{metric}", None, "dashboard")
    for site, dev in rng.sample(devices, 150):                       # maintenance
        add(f"telemetry.{site}.{dev}.*", None, "maintenance")
    for site in SITES:                                               # site ops
        add(f"telemetry.{site}.>", None, "site-ops")
    add("telemetry.*.*.temperature", None, "thermal-monitor")
    add("telemetry.*.*.status", None, "status-board")
    for _ in range(3):
        add("telemetry.*.*.vibration", "alerting", "alerting")
    for _ in range(2):
        add("telemetry.*.*.power", "billing", "billing")
    for _ in range(4):
        add("telemetry.>", "archive", "archive")
    add("alerts.>", None, "alert-relay")                             # never matched here

    subs_path = os.path.join(out_dir, "subscriptions.csv")
    with open(subs_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sub_id", "filter", "queue", "role"])
        for i, (flt, q, role) in enumerate(subs, 1):
            w.writerow([i, flt, q or "", role])

    malformed = [None, "telemetry.plant-a..temperature", "telemetry.plant-b.dev 0042.power",
                 "telemetry.*.dev-0001.status", "telemetry.lab-d.dev-0999.", ""]
    ids, ts, devs, metrics, values, subjects = [], [], [], [], [], []
    t = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC, in microseconds
    for i in range(n_events):
        site, dev = devices[min(int(rng.paretovariate(1.2)) - 1, len(devices) - 1)
                            if rng.random() < 0.3 else rng.randrange(len(devices))]
        metric = rng.choice(METRICS)
        r = rng.random()
        if r < 0.001:
            subject = rng.choice(malformed)
        elif r < 0.05:
            subject = f"heartbeat.{dev}"
        else:
            subject = f"telemetry.{site}.{dev}.{metric}"
        t += rng.randrange(1, 2000)
        ids.append(i + 1)
        ts.append(t)
        devs.append(dev)
        metrics.append(metric)
        values.append(round(rng.gauss(50, 15), 2))
        subjects.append(subject)
    table = pa.table({
        "event_id": pa.array(ids, pa.int64()),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "device": pa.array(devs, pa.string()),
        "metric": pa.array(metrics, pa.string()),
        "value": pa.array(values, pa.float64()),
        "subject": pa.array(subjects, pa.string()),
    })
    events_path = os.path.join(out_dir, "events.parquet")
    pq.write_table(table, events_path, row_group_size=50_000)

    roles = {}
    for _, _, role in subs:
        roles[role] = roles.get(role, 0) + 1
    desc = [f"{n_events:,} telemetry events from {len(devices):,} devices on {len(SITES)} sites "
            f"-> {events_path}",
            f"{len(subs):,} subscriptions -> {subs_path}: "
            + ", ".join(f"{n} {r}" for r, n in roles.items())]
    return events_path, subs_path, desc


def run(args, session):
    """The body of `fastsub demo`."""
    from fastsub._spark_cli import run_fanout, where
    from fastsub.cli import CLIError

    if args.events < 1:
        raise CLIError("--events must be at least 1")
    inputs = os.path.join(args.out, "input")
    shutil.rmtree(inputs, ignore_errors=True)
    print("fastsub demo: generating an IoT telemetry sample")
    events_path, subs_path, desc = generate(inputs, args.events, args.seed)
    for line in desc:
        print("  " + line)
    print(f"starting Spark ({where(args)}) ...", flush=True)
    spark = session(args)
    print(f"$ fastsub fanout --events {events_path} --subs {subs_path} --out {args.out} "
          "--key-col device --overwrite", flush=True)
    run_fanout(spark, events_path, subs_path, args.out, key_col="device", overwrite=True,
               master=where(args), progress=getattr(args, "progress", 2.0))

    from pyspark.sql import functions as F
    deliveries = spark.read.parquet(os.path.join(args.out, "deliveries"))
    rejected = spark.read.parquet(os.path.join(args.out, "rejected"))
    subs = spark.read.option("header", True).csv(subs_path) \
        .withColumn("sub_id", F.col("sub_id").cast("long"))
    print("\ndeliveries per subscriber role (queue groups get one member per event):")
    per_role = (deliveries.groupBy("sub_id").count().join(subs, "sub_id")
                .groupBy("role", "queue").agg(F.sum("count").alias("deliveries"),
                                               F.count("sub_id").alias("subscribers"))
                .orderBy(F.desc("deliveries")).collect())
    for r in per_role:
        q = f" (queue {r['queue']})" if r["queue"] else ""
        print(f"  {r['role'] + q:<28} {r['deliveries']:>10,} deliveries to {r['subscribers']:,} subscribers")
    sticky = (deliveries.join(subs.where(F.col("queue") == "archive"), "sub_id")
              .groupBy("device").agg(F.countDistinct("sub_id").alias("workers"))
              .agg(F.max("workers")).first()[0])
    print(f"  archive picks are sticky per device: at most {sticky} worker per device")
    print("\nsample deliveries:")
    for r in deliveries.join(subs, "sub_id").orderBy("event_id", "sub_id").limit(5).collect():
        print(f"  event {r['event_id']:>6}  {r['subject']:<42} -> sub {r['sub_id']:>5}  {r['filter']}"
              + (f"  [{r['queue']}]" if r["queue"] else ""))
    print("\nrejected events (kept, with the reason):")
    for r in rejected.orderBy("event_id").limit(6).collect():
        print(f"  event {r['event_id']:>6}  {r['subject']!r:<42} {r['error']}")
    print(f"\noutputs: {os.path.join(args.out, 'deliveries')}, {os.path.join(args.out, 'rejected')}")
    return 0
