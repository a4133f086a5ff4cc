"""`topicmatch demo`: an IoT telemetry sample, fanned out on local Spark.

Subjects are `telemetry.SITE.DEVICE.METRIC` (NATS).  Subscriptions:
per-device dashboards (literal filters), maintenance watchlists
(`telemetry.SITE.DEVICE.*`), site operations (`telemetry.SITE.>`), fleet-wide
monitors (`telemetry.*.*.temperature`), three queue groups whose members
share the work: `alerting` (vibration), `billing` (power) and `archive`
(everything), and an alert relay (`alerts.>`) that no telemetry event
matches (its role is listed with 0 deliveries).  The pick hashes the device id (--key-col device), so every
event of one device goes to the same archive worker.  A few events are
malformed (null, empty token, whitespace, a wildcard) and end up in
`rejected`; heartbeats (`heartbeat.DEVICE`) match nothing.
"""
import csv
import os
import random
import shutil
import time

from topicmatch.cli.common import CLIError, plural
from topicmatch.cli.fanout import check_master, run_fanout, session, where

SITES = ("plant-a", "plant-b", "warehouse-c", "lab-d")
METRICS = ("temperature", "humidity", "vibration", "power", "status")
DEVICES_PER_SITE = 250


def generate(out_dir, n_events=500_000, seed=7):
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
    # The events, vectorized (a million in about a second): every column is
    # an index into a small dictionary of the possible values.
    import numpy as np
    r = np.random.default_rng(seed)
    n, ndev, nmet = n_events, len(devices), len(METRICS)
    hot = np.minimum(r.pareto(1.2, n).astype(np.int64), ndev - 1)    # a few busy devices
    dev = np.where(r.random(n) < 0.3, hot, r.integers(0, ndev, n))
    metric = r.integers(0, nmet, n)
    kind = r.random(n)
    # subject dictionary: telemetry (dev, metric), then heartbeats, then malformed
    subject_values = ([f"telemetry.{site}.{d}.{m}" for site, d in devices for m in METRICS]
                      + [f"heartbeat.{d}" for _, d in devices] + malformed[1:])
    subject_idx = np.where(kind < 0.05, ndev * nmet + dev, dev * nmet + metric)
    bad = kind < 0.001
    subject_idx[bad] = ndev * nmet + ndev + r.integers(0, len(malformed) - 1, int(bad.sum()))
    null_subject = bad & (r.random(n) < 1 / len(malformed))
    subjects = pa.DictionaryArray.from_arrays(
        pa.array(subject_idx, pa.int32(), mask=null_subject),
        pa.array(subject_values, pa.string())).dictionary_decode()
    t0 = 1_767_225_600_000_000  # 2026-01-01 00:00:00 UTC, in microseconds
    table = pa.table({
        "event_id": pa.array(np.arange(1, n + 1, dtype=np.int64)),
        "ts": pa.array(t0 + np.cumsum(r.integers(1, 2000, n)), pa.timestamp("us", tz="UTC")),
        "device": pa.DictionaryArray.from_arrays(pa.array(dev, pa.int32()), pa.array(
            [d for _, d in devices], pa.string())).dictionary_decode(),
        "metric": pa.DictionaryArray.from_arrays(pa.array(metric, pa.int32()), pa.array(
            list(METRICS), pa.string())).dictionary_decode(),
        "value": pa.array(np.round(r.normal(50, 15, n), 2)),
        "subject": subjects,
    })
    events_path = os.path.join(out_dir, "events.parquet")
    pq.write_table(table, events_path, row_group_size=50_000)

    roles = {}
    for _, _, role in subs:
        roles[role] = roles.get(role, 0) + 1
    desc = [f"{n_events:,} telemetry events from {len(devices):,} devices on {len(SITES)} sites "
            f"-> {events_path}",
            f"{plural(len(subs), 'subscription')} -> {subs_path}: "
            + ", ".join(f"{n:,} {r}" for r, n in roles.items())]
    return events_path, subs_path, desc


def cmd_demo(args):
    """The body of `topicmatch demo`."""
    if args.events < 1:
        raise CLIError("--events must be at least 1")
    if not getattr(args, "remote", None):
        check_master(args.master)
    inputs = os.path.join(args.out, "input")
    shutil.rmtree(inputs, ignore_errors=True)
    print("topicmatch demo: generating an IoT telemetry sample")
    events_path, subs_path, desc = generate(inputs, args.events, args.seed)
    for line in desc:
        print("  " + line)
    print(f"starting Spark ({where(args)}) ...", flush=True)
    spark = session(args)
    print(f"$ topicmatch fanout --events {events_path} --subs {subs_path} --out {args.out} "
          "--key-col device --overwrite", flush=True)
    run_fanout(spark, events_path, subs_path, args.out, key_col="device", overwrite=True,
               master=where(args), progress=getattr(args, "progress", 2.0))
    print(f"  (at {args.events:,} events Spark's start-up and plumbing -- jobs, tasks, reading "
          "and writing Parquet -- dominate\n   these rates, not the matching: the engine alone "
          "matches millions of subjects a second; see docs/benchmarks.md)")

    # The tour of the outputs: two small jobs over the deliveries (per-sub
    # counts; devices per archive worker), the subscriptions joined here.
    import csv as _csv

    from pyspark.sql import functions as F
    t0 = time.perf_counter()
    deliveries = spark.read.parquet(os.path.join(args.out, "deliveries"))
    rejected = spark.read.parquet(os.path.join(args.out, "rejected"))
    with open(subs_path, newline="") as f:
        subs = {int(r["sub_id"]): r for r in _csv.DictReader(f)}
    per_sub = {r["sub_id"]: r["count"] for r in deliveries.groupBy("sub_id").count().collect()}
    roles = {}      # every role, those that received nothing included
    for sid, s in subs.items():
        key = (s["role"], s["queue"])
        d, k, n = roles.get(key, (0, 0, 0))
        got = per_sub.get(sid, 0)
        roles[key] = (d + got, k + (got > 0), n + 1)
    print("\ndeliveries per subscriber role (queue groups get one member per event):")
    for (role, queue), (d, k, n) in sorted(roles.items(), key=lambda kv: (-kv[1][0], kv[0][0])):
        q = f" (queue {queue})" if queue else ""
        if not d:
            to = f"({plural(n, 'subscriber')}: no event matched)"
        else:
            to = "to " + (plural(n, "subscriber") if k == n else f"{k:,} of {plural(n, 'subscriber')}")
        print(f"  {role + q:<28} {d:>10,} deliveries {to}")
    archive = [sid for sid, s in subs.items() if s["queue"] == "archive"]
    sticky = (deliveries.where(F.col("sub_id").isin(archive)).groupBy("device")
              .agg(F.countDistinct("sub_id").alias("workers")).agg(F.max("workers")).first()[0])
    print(f"  archive picks are sticky per device: at most {sticky} worker per device")
    print("\nsample deliveries:")
    for r in deliveries.where(F.col("event_id") <= 3).orderBy("event_id", "sub_id").limit(5).collect():
        s = subs[r["sub_id"]]
        print(f"  event {r['event_id']:>6}  {r['subject']:<42} -> sub {r['sub_id']:>5}  {s['filter']}"
              + (f"  [{s['queue']}]" if s["queue"] else ""))
    print("\nrejected events (kept, with the reason):")
    for r in rejected.orderBy("event_id").limit(6).collect():
        print(f"  event {r['event_id']:>6}  {r['subject']!r:<42} {r['error']}")
    print(f"\n(the tour of the outputs took {time.perf_counter() - t0:.1f} s)")
    print(f"\noutputs: {os.path.join(args.out, 'deliveries')}, {os.path.join(args.out, 'rejected')}")
    return 0
