"""The sharded fan-out at scale: subscriptions and events generated on the
executors, unsharded against sharded, in one run.

    .venv/bin/python bench/bench_spark_shard.py --subs 10000000 --events 20000000 \
        [--master local[2] | --hosts 2] [--runs identity,unsharded,sharded] [--shards auto]
        [--image-dir none | PATH | s3://...]

The data follow `light` (bench/gen_workload.py's light arguments: five
levels, vocabularies 50/100/200/500/1000 with Zipf 0.5, 10% of filters with
one `*`, 2% ending in `>` after 2-4 literal tokens, 5% in queue groups q0-q9),
scaled up: subscription j and event i are drawn from counter-based hashes of
(seed, j) and (seed, i), so every partition generates its own rows with no
data from the driver, and half of the events are derived from a random
subscription (its wildcards filled in), as light's publishes are.  No filter
is padding that no event can reach.

Each pass ends in one aggregate (count and checksum of the (event, sub_id)
deliveries), so every pass reads its events and produces its rows, and the
unsharded and sharded passes must agree on both figures.

  identity   mapInArrow passing the events' subjects through: the floor
  unsharded  fanout(shards=1, reuse_index=False): collect, build, ship, match
  sharded    fanout(shards=...): one stats job, the events' salting sample,
             the cogroup that builds each shard's index on the executors
  fanout     fanout(events, subs) with its default arguments (shards="auto"),
             the images built into a new directory (--image-dir; with none,
             the driver's image directory is the run's own unless
             --host-cache): a first call
  again      the same call again on the same subscriptions DataFrame
  first      a first call each time it runs: fanout over a new DataFrame
             object of the same rows (so no plan is remembered) into a new
             image directory (so every image is built); to alternate first
             calls with the SQL passes in one application.  Needs an image
             directory (not --image-dir none, where the driver keeps the
             images it was sent)
  subs-in    the subscriptions' rows into Python (mapInArrow), each task's
             only counted: their one trip from the JVM, which any first call
             that builds from the rows pays at least (its floor, beside
             identity's)
  stats      the plan's statistics alone, as a first call's plan runs them
             (the aggregate at the first depth, in the JVM: the one pass over
             the rows that counts them and names the images; the other depths
             only where the plan asks for them)
  routed-in  the build job's rows without the builds: routed to one
             partition per image as the plan of an earlier stats pass places
             them (shard_images.routed_rows, the build job's own frame: the
             largest image's partition first), shuffled, and into Python,
             each task's only counted.
  shuffled-in
             routed-in with no routing expression: the rows repartitioned by
             sub_id into as many partitions (Spark's own hash), a baseline
             for routed-in: what a shuffle of the rows costs with the
             plainest key and even partitions.
             stats, routed-in and shuffled-in are first-of-their-kind in an
             application of their own: in one with a fanout pass, whichever
             ran second would find its query's code compiled (run them apart
             for a first call's floor)
  sql-merge, sql-broadcast
             the plain Spark SQL shape-join (bench/sql_join.py: one candidate
             key per filter shape, an equi-join on the filter), sort-merge or
             with the subscriptions broadcast-hinted; no Python, no topicmatch.
             Its physical plans are printed (explain()).

Every pass delivers to every matching subscription (queues="all", as the
SQL does) and must agree with every other on the count and the checksum:
the SQL passes are the fan-out's independent oracle.

Reported per pass: wall seconds, events/s, shuffle bytes written per event
(Spark's REST API), the peak RSS of the driver's Python and of its JVM (with
--cluster the driver is a process of its own, the executors are not in it),
and the largest peak RSS of any Python worker (sampled from /proc; every
peak is reset at the start of a pass, so it is that pass's own).  For the
sharded pass: the plan (d, N, replicated share, largest shard), and the CPU
seconds spent building shard indexes in the workers (their build log).
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sql_join  # noqa: E402  (bench/sql_join.py, the plain SQL way)
SEED = 0x5EED
VOCAB = (50, 100, 200, 500, 1000)
ZIPF = 0.5


# --------------------------------------------------------------------------
# generation, on the executors
# --------------------------------------------------------------------------

def _u(ids, salt):
    """Uniform [0, 1) per id: splitmix64 of (seed, id, salt)."""
    import numpy as np
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(SEED * 1000 + salt)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _tokens(level, u):
    import numpy as np
    import pyarrow as pa
    w = 1.0 / np.arange(1, VOCAB[level] + 1) ** ZIPF
    cdf = np.cumsum(w)
    k = np.minimum(np.searchsorted(cdf, u * cdf[-1]), VOCAB[level] - 1)
    names = pa.array([f"t{level}x{i}" for i in range(VOCAB[level])])
    return names.take(pa.array(k))


def _sub_parts(j):
    """Subscription j's draws: tokens per level, '*' position (-1), '>' depth (-1), queue."""
    import numpy as np
    toks = [_tokens(lv, _u(j, lv)) for lv in range(5)]
    r = _u(j, 5)
    star = np.where(r < 0.10, np.minimum((_u(j, 6) * 5).astype(np.int64), 4), -1)
    rest = np.where((r >= 0.10) & (r < 0.12), 2 + np.minimum((_u(j, 7) * 3).astype(np.int64), 2), -1)
    return toks, star, rest


def _join(toks):
    import pyarrow.compute as pc
    return pc.binary_join_element_wise(*toks, ".", null_handling="skip")


def gen_subs(batches):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    for b in batches:
        j = b.column(0).to_numpy()
        toks, star, rest = _sub_parts(j)
        out = []
        for lv in range(5):
            t = pc.if_else(pa.array(star == lv), "*", toks[lv])
            t = pc.if_else(pa.array(rest == lv), ">", t)
            out.append(pc.if_else(pa.array((rest >= 0) & (lv > rest)), pa.scalar(None, pa.string()), t))
        q = _u(j, 8) < 0.05
        qname = pc.binary_join_element_wise("q", pa.array((_u(j, 9) * 10).astype(np.int64)).cast(pa.string()), "")
        yield pa.RecordBatch.from_arrays(
            [pa.array(j), _join(out), pc.if_else(pa.array(q), qname, pa.scalar(None, pa.string()))],
            ["sub_id", "filter", "queue"])


def gen_events(nsubs):
    def gen(batches):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc
        for b in batches:
            i = b.column(0).to_numpy()
            derived = _u(i, 100) < 0.5
            j = np.minimum((_u(i, 101) * nsubs).astype(np.int64), nsubs - 1)
            stoks, star, rest = _sub_parts(j)
            fresh = [_tokens(lv, _u(i, 102 + lv)) for lv in range(5)]
            out = []
            for lv in range(5):
                keep = derived & (star != lv) & ((rest < 0) | (lv < rest))
                out.append(pc.if_else(pa.array(keep), stoks[lv], fresh[lv]))
            yield pa.RecordBatch.from_arrays([pa.array(i), _join(out)], ["event_id", "subject"])
    return gen


# --------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------

def _status(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                if ln.startswith(field + ":"):
                    return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class RssSampler:
    """Peak RSS (VmHWM) of the Python workers and of the driver's JVM, sampled every 0.2 s."""

    def __init__(self, driver_jvm_pid):
        self.jvm = driver_jvm_pid
        self.worker_peak = 0
        self.jvm_peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.2)

    def _sample(self):
        for pid in _python_workers():
            self.worker_peak = max(self.worker_peak, _status(pid, "VmHWM"))
        if self.jvm:
            self.jvm_peak = max(self.jvm_peak, _status(self.jvm, "VmHWM"))
        self.driver_peak = max(getattr(self, "driver_peak", 0), _status(os.getpid(), "VmHWM"))

    def __enter__(self):
        _reset_peaks(_python_workers() + [os.getpid()] + ([self.jvm] if self.jvm else []))
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._sample()


def _shuffle_bytes(spark):
    """Shuffle bytes written by every stage so far (Spark's REST API)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=30) as r:
        stages = json.load(r)
    if os.environ.get("BENCH_DEBUG"):
        print([(s["stageId"], s.get("shuffleWriteBytes"), s["name"][:40]) for s in stages])
    return sum(s.get("shuffleWriteBytes", 0) for s in stages)


def _jobs(spark):
    """Every job so far (Spark's REST API): id -> (wall seconds, description)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=30) as r:
        jobs = json.load(r)
    out = {}
    for j in jobs:
        t0, t1 = j.get("submissionTime"), j.get("completionTime")
        if t0 and t1:
            secs = (_rest_time(t1) - _rest_time(t0))
            out[j["jobId"]] = (secs, (j.get("description") or j.get("name") or "")[:70],
                               _rest_time(t0), _rest_time(t1))
    return out


def _rest(spark, path):
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{path}"
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def _stage_rows(spark, jobs_before):
    """Per stage of the jobs not in jobs_before (REST API): its wall and the
    sums of its tasks' metrics, and per task (stages of at most 8 tasks) its
    host, start (s after the stage's submission), deserialization (which
    includes fetching the files added since the executor's last task), run
    and GC time.  -> printable lines."""
    jobs = [j for j in _rest(spark, "jobs") if j["jobId"] not in jobs_before]
    lines = []
    for j in sorted(jobs, key=lambda j: j["jobId"]):
        for sid in sorted(j.get("stageIds", [])):
            for st in _rest(spark, f"stages/{sid}"):
                if st.get("status") != "COMPLETE":
                    continue
                sub = st.get("submissionTime")
                t0 = _rest_time(sub) if sub else None
                wall = _rest_time(st["completionTime"]) - t0 if t0 and st.get("completionTime") else 0
                tasks = _rest(spark, f"stages/{sid}/{st['attemptId']}/taskList?length=1000")
                m = lambda k: sum(t.get("taskMetrics", {}).get(k, 0) for t in tasks) / 1000  # noqa: E731
                lines.append(
                    f"      job {j['jobId']:>3} stage {sid:>3}: {st['numTasks']:>3} tasks, wall "
                    f"{wall:6.2f} s; sums: deser {m('executorDeserializeTime'):6.2f} s run "
                    f"{m('executorRunTime'):6.2f} s gc {m('jvmGcTime'):5.2f} s; shuffle read "
                    f"{st.get('shuffleReadBytes', 0) / 1e6:7.1f} MB write "
                    f"{st.get('shuffleWriteBytes', 0) / 1e6:7.1f} MB  {st['name'][:40]}")
                if len(tasks) <= 8:
                    for t in sorted(tasks, key=lambda t: t["launchTime"]):
                        tm = t.get("taskMetrics", {})
                        at = _rest_time(t["launchTime"]) - t0 if t0 else 0
                        lines.append(
                            f"          task {t['index']:>2} {t['host']:<10} at {at:6.2f} s "
                            f"dur {t.get('duration', 0) / 1000:6.2f} s deser "
                            f"{tm.get('executorDeserializeTime', 0) / 1000:5.2f} run "
                            f"{tm.get('executorRunTime', 0) / 1000:6.2f} gc "
                            f"{tm.get('jvmGcTime', 0) / 1000:5.2f} in "
                            f"{tm.get('inputMetrics', {}).get('recordsRead', 0) + tm.get('shuffleReadMetrics', {}).get('recordsRead', 0):>9,} rows")
    return lines


def _sql_rows(spark, since):
    """The SQL queries submitted since `since` (REST API): when each was
    submitted (seconds after `since`), how long it ran and its jobs.  With
    the jobs' times this splits a driver's gap in two: before a query's
    submission, building it (PySpark and the JVM's analysis); from its
    submission to its first job, the rest of the driver's work for it
    (planning its stages, compiling their generated code)."""
    out = []
    for q in _rest(spark, "sql?details=false"):
        start = _rest_time(q["submissionTime"])
        if start < since:
            continue
        jobs = sorted(q.get("successJobIds", []) + q.get("runningJobIds", [])
                      + q.get("failedJobIds", []))
        out.append(f"      sql {q['id']:>4} submitted at {start - since:6.2f}, "
                   f"{q.get('duration', 0) / 1000:6.2f} s, jobs {jobs}  "
                   f"{q.get('description', '')[:60]}")
    return out


def _rest_time(text):
    """Seconds of a REST API time ("2026-11-28T13:33:05.123GMT")."""
    import datetime
    return datetime.datetime.strptime(text.replace("GMT", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def _driver_jvm_pid():
    """The driver's JVM: the SparkSubmit child of this process (the cluster's
    master and workers are children too, with other main classes)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            c = _cmdline(int(name))
            if ppid == me and "java" in c and "SparkSubmit" in c:
                return int(name)
    return None


def _python_workers():
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            c = _cmdline(int(name))
            if "pyspark.daemon" in c or "pyspark.worker" in c or "pyspark/daemon" in c:
                out.append(int(name))
    return out


def _reset_peaks(pids):
    """Start each process's peak RSS (VmHWM) over from its current RSS, so a
    pass's peak is its own, not an earlier pass's in the same (reused) process."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass


def _count_rows(frame):
    """The rows of frame moved into Python (mapInArrow), each task's only
    counted and one row returned: the floor passes' work."""
    from pyspark.sql import functions as F

    def count(batches):
        import pyarrow as pa
        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], ["n"])
    return int(frame.mapInArrow(count, "n long").agg(F.sum("n")).first()[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subs", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--cluster", action="store_true",
                    help="start a standalone cluster (a master, two 1-core workers) and run on it: "
                         "--hosts 2")
    ap.add_argument("--hosts", type=int, default=0,
                    help="start a standalone cluster of this many hosts (tests/spark/servers.py: "
                         "a 1-core worker on each of 127.0.0.2, 127.0.0.3, ..., each with its own "
                         "temporary and local directories) and run on it")
    ap.add_argument("--jobs", action="store_true",
                    help="after each pass, list the Spark jobs it ran with their wall seconds, "
                         "and its SQL queries with when each was submitted (REST API)")
    ap.add_argument("--stages", action="store_true",
                    help="after each pass, its stages' task metrics (REST API): deserialization "
                         "(with the fetches of added files), run and GC time, shuffle bytes; and "
                         "each task of a stage of at most 8 tasks")
    ap.add_argument("--profile", action="store_true",
                    help="profile the driver's Python through the fanout pass (cProfile: the "
                         "calls that took the most time, waits on the JVM included)")
    ap.add_argument("--profile-out", metavar="FILE",
                    help="with --profile: also write the profile's raw statistics to FILE "
                         "(pstats; to count the calls by caller)")
    ap.add_argument("--runs", default="warmup,identity,unsharded,sharded",
                    # also: fanout, again, first, sql-merge, sql-broadcast
                    help="passes in order (warmup: the identity pass, not reported)")
    ap.add_argument("--shards", default="auto")
    ap.add_argument("--depth", default="auto")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--executor-memory", default="5g")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    ap.add_argument("--image-dir", default=None,
                    help="where the shard images go (default: a new temporary directory, so "
                         "that the first fanout pass builds them: a first call); 'none': no "
                         "image_dir, the fan-out's default arguments")
    ap.add_argument("--host-cache", action="store_true",
                    help="with --image-dir none: keep the driver's usual image directory "
                         "(topicmatch-images-<uid> in the system's temporary directory, or "
                         "$TOPICMATCH_IMAGE_DIR), where the images of earlier runs are found, so "
                         "that a fanout pass is a new application on the same rows (images "
                         "fetched, none built); by default the run's own new directory: a first "
                         "call")
    ap.add_argument("--keep-files", action="store_true",
                    help="keep the run's temporary directory (the cluster's work and local "
                         "directories, the images, the build log), removed at exit otherwise: "
                         "a two-host run leaves ~0.9 GB there")
    ap.add_argument("--verbose", action="store_true",
                    help="log topicmatch.spark's steps (the plan, builds, images received) to stderr")
    args = ap.parse_args(argv)
    if args.verbose:
        import logging
        logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("topicmatch.spark").setLevel(logging.INFO)
    if args.cluster and not args.hosts:
        args.hosts = 2
    args.cluster = args.hosts > 0

    from pyspark.sql import functions as F

    from topicmatch.spark import LOAD_LOG_ENV, IndexTooLargeError, fanout, local_session, plan_shards
    from topicmatch.spark.image_store import IMAGE_DIR_ENV

    # Everything the run writes goes under one directory, removed at exit
    # (atexit: after the cluster's servers are stopped, also where a pass
    # fails), so that runs do not fill the disk: a two-host run's workers
    # leave ~0.9 GB of images and shuffle files.
    work = tempfile.mkdtemp(prefix="topicmatch-bench-shard-")
    if args.keep_files:
        print(f"files kept in {work}", flush=True)
    else:
        atexit.register(shutil.rmtree, work, True)
    build_log = os.path.join(work, "builds.log")
    image_dir = args.image_dir or tempfile.mkdtemp(prefix="images-", dir=work)
    if image_dir == "none":
        image_dir = None
        if not args.host_cache:
            # Without image_dir the driver keeps every image it was sent in
            # its own directory, which outlives the run; a later run on the
            # same rows would find them there and build nothing.  (The
            # JVM, and in local mode the Python workers it starts, inherit
            # this; a cluster's hosts have directories of their own.)
            os.environ[IMAGE_DIR_ENV] = tempfile.mkdtemp(prefix="driver-images-", dir=work)
    os.environ[LOAD_LOG_ENV] = build_log
    cluster = None
    master = args.master
    if args.cluster:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "spark"))
        import servers
        cluster_dir = tempfile.mkdtemp(prefix="cluster-", dir=work)
        master, cluster = servers.standalone_cluster(cluster_dir, workers=args.hosts,
                                                     extra_env={LOAD_LOG_ENV: build_log},
                                                     worker_memory=args.executor_memory)
        for server in cluster:      # (stop is idempotent: the end stops them too)
            atexit.register(server.stop)
    conf = {"spark.driver.memory": args.driver_memory, "spark.sql.shuffle.partitions": args.partitions,
            "spark.driver.maxResultSize": "4g", "spark.ui.enabled": "true"}
    if args.cluster:
        conf.update({"spark.executor.memory": args.executor_memory, "spark.executor.cores": 1,
                     "spark.cores.max": args.hosts, "spark.driver.host": "127.0.0.1"})
    spark = local_session(master, app_name="topicmatch shard bench", conf=conf)
    jvm = _driver_jvm_pid()
    subs = spark.range(args.subs, numPartitions=args.partitions).mapInArrow(
        gen_subs, "sub_id long, filter string, queue string")
    events = spark.range(args.events, numPartitions=args.partitions).mapInArrow(
        gen_events(args.subs), "event_id long, subject string")
    # Generated once and kept in the JVMs' memory (a table being read), so the
    # passes time the fan-out, not the generation.
    subs = subs.persist()
    events = events.persist()
    subs.count(), events.count()
    shards = args.shards if args.shards == "auto" else int(args.shards)
    depth = args.depth if args.depth == "auto" else int(args.depth)
    where = f"standalone cluster ({args.hosts} hosts x 1-core executors)" if args.cluster else master
    print(f"{args.subs:,} subscriptions, {args.events:,} events (light's mix, generated on the "
          f"executors), {where}", flush=True)

    def agg(df):
        r = df.agg(F.count(F.lit(1)).alias("n"),
                   F.sum((F.col("event_id") * 1000003 + F.col("sub_id")) % 1000000007).alias("c")).first()
        return int(r["n"]), int(r["c"] or 0)

    def identity():
        def ident(batches):
            yield from batches
        r = events.mapInArrow(ident, "event_id long, subject string").agg(
            F.count(F.lit(1)), F.sum(F.length("subject"))).first()
        return int(r[0]), int(r[1])

    def subs_in():
        # the rows' one trip into Python, the least a first call that
        # builds from them pays
        return _count_rows(subs)

    floor_plan = []     # the stats pass's ShardPlan, which routed-in routes by

    def stats_pass():
        # the plan's statistics as a first call's plan_fanout runs them: with
        # shards="auto", its one aggregate at the first depth, then
        # plan_shards with it (which asks for the other depths only where the
        # first leaves room to do better); with a count given, plan_shards'
        # own aggregate
        from topicmatch.spark.images import index_rows
        from topicmatch.spark.plan import auto_statistics
        rows = index_rows(subs)
        st = auto_statistics(rows, "nats", depth)[1] if shards == "auto" else None
        floor_plan[:] = [plan_shards(rows, "nats", shards, depth, check=False, images=True, stats=st)]
        return floor_plan[0].nsubs

    def routed_in(routing=True):
        from topicmatch.spark.images import index_rows
        from topicmatch.spark.shard_images import routed_rows
        if not floor_plan:
            # (planning here would time the stats pass inside this one)
            raise SystemExit("the routed-in and shuffled-in passes route by the plan of an "
                             "earlier stats pass: --runs ...,stats,routed-in")
        sp = floor_plan[0]
        if routing:
            routed = routed_rows(subs, "nats", sp, list(range(sp.shards + 1)))
        else:
            routed = index_rows(subs).repartition(sp.shards + 1, "sub_id")
        return _count_rows(routed)

    results = {"subs": args.subs, "events": args.events, "where": where, "passes": {}}
    explained = {}
    plan = None
    for name in args.runs.split(","):
        before = _shuffle_bytes(spark)
        jobs_before = set(_jobs(spark)) if args.jobs or args.stages else set()
        with open(build_log, "a"):
            pass
        log_at = os.path.getsize(build_log)
        t0 = time.perf_counter()
        epoch0 = time.time()
        with RssSampler(jvm) as rss:
            try:
                if name in ("identity", "warmup"):
                    got = identity()
                elif name == "subs-in":
                    got = subs_in()
                elif name == "stats":
                    got = stats_pass()
                elif name == "routed-in":
                    got = routed_in()
                elif name == "shuffled-in":
                    got = routed_in(routing=False)
                elif name == "unsharded":
                    got = agg(fanout(events, subs, shards=1, reuse_index=False, queues="all",
                                     image_dir=image_dir))
                elif name == "sharded":
                    # the plan as shards="auto" would make it above its threshold
                    # (salting included), passed on so that this pass shards at any size
                    plan = plan_shards(subs, "nats", shards, depth, events=events)
                    got = agg(fanout(events, subs, shards=plan, queues="all", image_dir=image_dir))
                elif name in ("fanout", "again"):
                    prof = None
                    if args.profile and name == "fanout":
                        import cProfile
                        prof = cProfile.Profile()
                        prof.enable()
                    got = agg(fanout(events, subs, queues="all", image_dir=image_dir))
                    if prof is not None:
                        import pstats
                        prof.disable()
                        if args.profile_out:
                            prof.dump_stats(args.profile_out)
                        pstats.Stats(prof).sort_stats("cumulative").print_stats("topicmatch|pyspark", 60)
                elif name == "first":
                    if image_dir is None:
                        raise SystemExit("the first pass needs an image directory (not "
                                         "--image-dir none)")
                    fresh = tempfile.mkdtemp(prefix="topicmatch-bench-first-", dir=image_dir)
                    got = agg(fanout(events, subs.select("*"), queues="all", image_dir=fresh))
                elif name in ("sql-merge", "sql-broadcast"):
                    how = name.split("-")[1]
                    joined = sql_join.sql_fanout(events, subs, "nats", plan=how)
                    if how not in explained:
                        explained[how] = joined._jdf.queryExecution().executedPlan().toString()
                    got = agg(joined)
                else:
                    raise SystemExit(f"unknown pass {name!r}")
            except IndexTooLargeError as e:
                got = f"failed: {e}"
        wall = time.perf_counter() - t0
        time.sleep(3)     # the REST API follows the listener bus, a little behind the jobs
        shuffled = _shuffle_bytes(spark) - before
        with open(build_log) as f:
            f.seek(log_at)
            logged = [ln.split() for ln in f if ln.strip()]
        builds = [b for b in logged if b[0].startswith("shard-")]
        row = {"wall_s": round(wall, 2), "events_per_s": round(args.events / wall),
               "result": got, "shuffle_bytes_per_event": round(shuffled / args.events, 1),
               "driver_python_peak_rss_mb": rss.driver_peak >> 20,
               "driver_jvm_peak_rss_mb": rss.jvm_peak >> 20,
               "python_worker_peak_rss_mb": rss.worker_peak >> 20}
        if builds:
            row["shard_builds"] = len(builds)
            row["shard_build_cpu_s"] = round(sum(float(b[3]) for b in builds if len(b) > 3), 2)
            row["largest_shard_built"] = max(int(b[2]) for b in builds)
        elif name in ("fanout", "first"):
            # no shard image built: an unsharded one, or every image found
            # (then this was not what a first call pays)
            row["images_built"] = sum(1 for b in logged if b[2:3] == ["build"])
            row["images_fetched"] = sum(1 for b in logged if b[2:3] == ["fetch"])
        results["passes"].setdefault(name, []).append(row)
        print(f"  {name:<10} {wall:8.1f} s  {args.events / wall:>12,.0f} events/s  {row}", flush=True)
        if args.jobs:
            for jid, (secs, what, start, end) in sorted(_jobs(spark).items()):
                if jid not in jobs_before:
                    # (from/to: seconds since the pass began; the gaps are the driver's)
                    print(f"      job {jid:>4} {secs:7.2f} s  from {start - epoch0:6.2f} to "
                          f"{end - epoch0:6.2f}  {what}", flush=True)
            for line in _sql_rows(spark, epoch0):
                print(line, flush=True)
        if args.stages:
            print("\n".join(_stage_rows(spark, jobs_before)), flush=True)
    if plan is not None:
        print(plan.explain())
        results["plan"] = {"shards": plan.shards, "depth": plan.depth, "nsubs": plan.nsubs,
                           "replicated": plan.replicated, "largest": plan.largest,
                           "by_depth": {str(k): v for k, v in plan.by_depth.items()}}
    p = results["passes"]
    for name, rows in p.items():
        if name != "warmup":
            walls = [r["wall_s"] for r in rows]
            print(f"  {name:<10} median {statistics.median(walls):.1f} s over {len(walls)}: {walls}")
    for how, text in explained.items():
        print(f"== sql-{how}: physical plan\n{text}")
    results["sql_plans"] = explained
    if "identity" in p:
        base = statistics.median(r["wall_s"] for r in p["identity"])
        for name in p:
            if name not in ("identity", "warmup"):
                print(f"  {name} / identity = {statistics.median(r['wall_s'] for r in p[name]) / base:.2f}")
    sql = [name for name in ("sql-merge", "sql-broadcast") if name in p]
    if "first" in p and sql:
        # round i: the i-th first call against the better of the i-th SQL
        # passes (alternated in one application, so each pair saw the same load)
        rounds = [f["wall_s"] / min(p[name][i]["wall_s"] for name in sql)
                  for i, f in enumerate(p["first"]) if all(i < len(p[name]) for name in sql)]
        if rounds:
            print(f"  first / the better SQL plan, round by round: "
                  f"{', '.join(f'{r:.2f}' for r in rounds)}; median {statistics.median(rounds):.2f}")
    floors = ("identity", "warmup", "subs-in", "stats", "routed-in", "shuffled-in")    # no deliveries
    delivered = [(name, tuple(r["result"])) for name, rows in p.items() if name not in floors
                 for r in rows if not isinstance(r["result"], str)]
    if len(delivered) > 1:
        same = {got for _, got in delivered}
        print(f"  {', '.join(sorted({n for n, _ in delivered}))}: deliveries agree: {len(same) == 1}")
        if len(same) != 1:
            print(f"  MISMATCH: {delivered}")
            return 1
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(results) + "\n")
    spark.stop()
    if cluster:
        for s in cluster:
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
