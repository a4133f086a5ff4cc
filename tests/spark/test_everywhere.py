"""The same fan-outs on a standalone cluster (separate master, worker and
executor processes) and on a Spark Connect server whose master is that
cluster give exactly the rows of local mode; the executors run the driver's interpreter by default; each
worker process loads an index once.  The cluster and Connect drivers run in
their own processes (one SparkContext, and one kind of session, per process)."""
import json
import os
import subprocess
import sys

import pytest

from remote_checks import CASES, compute
from spark_expect import Expected, events_rows, random_case

pytestmark = pytest.mark.spark

HERE = os.path.dirname(os.path.abspath(__file__))


def _clean_env(**extra):
    env = dict(os.environ)
    for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
              "TOPICMATCH_SPARK_LOAD_LOG"):
        env.pop(k, None)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.update(extra)
    return env


def _run_checks(tmp_path_factory, args, name, **env):
    out = tmp_path_factory.mktemp(name) / "result.json"
    p = subprocess.run([sys.executable, os.path.join(HERE, "remote_checks.py"), *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=_clean_env(**env), cwd=HERE)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    with open(out) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def local_result(spark):
    return json.loads(json.dumps(compute(spark, ["broadcast", "file"])))


@pytest.fixture(scope="module")
def cluster_result(cluster_url, tmp_path_factory, remote_load_log):
    return _run_checks(tmp_path_factory, [
        "--master", cluster_url, "--ships", "broadcast,file,sharded,auto,stream",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
        "--conf", "spark.cores.max=2", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=64",
        "--conf", "spark.sql.shuffle.partitions=4"], "cluster-run")


def _storage_ships(dirs):
    """Both kinds of fan-out with nothing in common and in the bucket, and
    the unsharded on the shared path (the sharded one there adds nothing
    that the bucket's and local mode's image_dir runs do not check, and
    each fan-out under dynamic allocation is some 10 s of CI).  On the nats
    case alone, without the share_index examples: where the images are
    kept and how executors come and go do not depend on the dialect, and
    the static cluster run checks both cases and the examples."""
    bucket, shared = dirs
    return ["auto", "sharded", f"auto@{bucket}", f"sharded@{bucket}", f"auto@{shared}"]


@pytest.fixture(scope="module")
def storage_result(cluster_url, s3_bucket, tmp_path_factory):
    """The two-host cluster under dynamic allocation (with shuffle tracking;
    idle executors leave after a second, and new ones join for later jobs),
    with images in storage the hosts share -- an S3 bucket (each host
    fetches into its own cache), a path both see -- and with nothing in
    common (through Spark: an executor that joins later fetches what it
    lacks)."""
    import servers
    endpoint, bucket = s3_bucket
    shared = tmp_path_factory.mktemp("shared-images")
    dirs = [f"{bucket}/run", str(shared)]
    aws = servers.s3_env(endpoint)
    result = _run_checks(tmp_path_factory, [
        "--master", cluster_url, "--ships", ",".join(_storage_ships(dirs)), "--cases", "nats",
        "--no-examples",
        "--conf", "spark.dynamicAllocation.enabled=true",
        "--conf", "spark.dynamicAllocation.shuffleTracking.enabled=true",
        "--conf", "spark.dynamicAllocation.minExecutors=0",
        "--conf", "spark.dynamicAllocation.maxExecutors=2",
        "--conf", "spark.dynamicAllocation.executorIdleTimeout=1s",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
        "--conf", "spark.cores.max=2", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=64",
        "--conf", "spark.sql.shuffle.partitions=4",
        *[a for k, v in aws.items() for a in ("--conf", f"spark.executorEnv.{k}={v}")]],
        "storage-run", **aws)
    result["dirs"] = dirs
    result["shared"] = sorted(os.listdir(shared))
    return result


@pytest.fixture(scope="module")
def connect_result(connect_url, cluster_dir, remote_load_log, tmp_path_factory):
    """The Connect server's run on the two-host cluster.  The classic runs
    left their images on the hosts and in their driver's cache: the hosts'
    are removed first (as a cleaner of their temporary directories would),
    and the client keeps its own cache, so every image of this run is
    built on an executor, returned to the client as rows and added to
    its session.  "log_from": where this run's lines start in the load log."""
    import servers
    for d in servers.host_image_dirs(cluster_dir):
        for name in (os.listdir(d) if os.path.isdir(d) else []):
            if name.endswith(".img"):
                os.remove(os.path.join(d, name))
    log_from = os.path.getsize(remote_load_log) if os.path.exists(remote_load_log) else 0
    result = _run_checks(tmp_path_factory, ["--remote", connect_url, "--ships",
                                            "auto,inline,artifact,sharded"], "connect-run",
                         TOPICMATCH_IMAGE_DIR=str(tmp_path_factory.mktemp("connect-client")))
    result["log_from"] = log_from
    return result


def test_local_mode_is_the_reference(local_result):
    """Local mode itself: both shipping methods agree, and the counts are the
    pure-Python reference's (the rows are checked in test_fanout.py)."""
    for name, (dialect, (subs, subjects), _) in CASES.items():
        a, b = local_result["fanout"][f"{name}/broadcast"], local_result["fanout"][f"{name}/file"]
        assert {k: v for k, v in a.items() if k != "arrays"} == b
        exp = Expected(dialect, subs, events_rows(subjects))
        c = exp.counts("pick")
        assert a["counts"][:4] == [c["events"], c["delivered"], c["unmatched"], c["rejected"]]
        assert a["counts"][4] == len(a["deliveries"]) > 0
        assert sorted(r[0] for r in a["rejected"]) == sorted(exp.rejected)
    assert local_result["examples"]["mapPartitions"] == local_result["examples"]["mapInArrow"]


def _same_as_local(result, local, ships):
    for name in result["cases"]:
        want = local["fanout"][f"{name}/broadcast"]
        for ship in ships:
            got = result["fanout"][f"{name}/{ship}"]
            for part in ("counts", "deliveries", "rejected", "arrays"):
                if part in got or part != "arrays":
                    assert got[part] == want[part], (name, ship, part)
        assert "arrays" in result["fanout"][f"{name}/{ships[0]}"]
    for name, rows in result["examples"].items():
        assert rows == local["examples"][name], name


def _loads(log, index_ids):
    with open(log) as f:
        lines = [ln.split() for ln in f]
    return {i: [ln[1] for ln in lines if ln[0] == i] for i in index_ids}


def _builds_per_image(log, since=0):
    """{(content name, location): builds} from the build tasks' log lines
    ("NAME PID build INSERTS LOCATION", images.py), after byte `since`."""
    with open(log) as f:
        f.seek(since)
        lines = [ln.rstrip("\n").split(" ", 4) for ln in f]
    got = {}
    for ln in lines:
        if len(ln) == 5 and ln[2] == "build":
            got[(ln[0], ln[4])] = got.get((ln[0], ln[4]), 0) + 1
    return got


def _fetches(log, since=0):
    """[(content name, host directory)] of the images the hosts fetched from
    the driver ("NAME PID fetch BYTES DIR", image_inbox.fetch_from_driver)."""
    with open(log) as f:
        f.seek(since)
        lines = [ln.rstrip("\n").split(" ", 4) for ln in f]
    return [(ln[0], ln[4]) for ln in lines if len(ln) == 5 and ln[2] == "fetch"]


def test_standalone_cluster_equals_local(cluster_result, local_result, remote_load_log):
    _same_as_local(cluster_result, local_result, ["broadcast", "file", "sharded", "auto"])
    assert cluster_result["shipped_by"]["nats/sharded"] == "sharded:N=4:d=1"
    # the executors run on two hosts (127.0.0.2, 127.0.0.3) with nothing in
    # common: the image built by an executor travels through Spark
    assert cluster_result["shipped_by"]["nats/auto"] == "image"
    assert cluster_result["image_path"]["nats/auto"].startswith("spark:")
    # one build per image and location, whatever the hosts and applications
    builds = _builds_per_image(remote_load_log)
    assert any(loc.startswith("spark:") for _, loc in builds) and set(builds.values()) == {1}, builds
    # each image is matched on both hosts, built on one: the other fetches
    # it from the driver, once; the host that built it never does (Spark's
    # addFile would have had both fetch every image)
    fetched = _fetches(remote_load_log)
    names = [name for name, _ in fetched]
    assert fetched and all(names.count(n) == 1 for n in names), fetched
    assert len({d for _, d in fetched}) <= 2, fetched
    # fanout_stream on the two hosts: the rows of local mode, micro-batch by
    # micro-batch, through the image; the second micro-batch, with the same
    # subscriptions, rebuilds nothing (and the build count above covers
    # the stream's image too: one build per image, all runs together)
    stream = cluster_result["stream"]
    assert stream["deliveries"] == local_result["fanout"]["nats/broadcast"]["deliveries"]
    assert stream["rebuilt"] == [True, False] and stream["shipped_by"] == ["image", "image"]
    assert set(cluster_result["examples"]) == {"mapPartitions", "mapInArrow"}
    assert cluster_result["shipped_by"]["nats/file"] == "file"
    assert cluster_result["shipped_by"]["nats/broadcast"] == "broadcast"
    # PYSPARK_PYTHON was unset: the executors ran the driver's interpreter
    assert [os.path.realpath(p) for p in cluster_result["executor_python"]] == \
        [os.path.realpath(sys.executable)]
    # the executors are other processes than the driver's, each loading an index once
    for index_id, pids in _loads(remote_load_log, cluster_result["index_ids"]).items():
        assert 1 <= len(pids) == len(set(pids)) <= 4, (index_id, pids)


def test_dynamic_allocation_and_shared_storage_equal_local(storage_result, local_result, s3_bucket,
                                                          remote_load_log):
    """Dynamic allocation on two hosts, with nothing in common, image_dir=s3://...
    and image_dir=a shared path: the rows of local mode; the images are in
    the store, fetched by the hosts."""
    import servers
    dirs = storage_result["dirs"]
    _same_as_local(storage_result, local_result, _storage_ships(dirs))
    assert storage_result["image_path"]["nats/auto"].startswith("spark:")
    # an image is built once per content and location: the repeat call
    # (arrays, on the same rows) and a new application on the same rows
    # (the other cluster run's spark: images, which this driver holds)
    # build nothing
    builds = _builds_per_image(remote_load_log)
    assert set(builds.values()) == {1}, builds
    # the executors that joined later fetched only what their host lacked,
    # each image at most once per host, all runs together
    fetched = _fetches(remote_load_log)
    assert all(fetched.count(f) == 1 for f in fetched), fetched
    # the shared path's image is built there; the bucket's may not be built
    # at all: a host's copy of an image is named by its content alone
    # (image_store.cache_path), so a host that already holds the spark:
    # image of the same rows uploads that copy ("there", not logged).  What
    # the bucket holds is checked below.
    assert "" in {loc.split("/")[0] for _, loc in builds}, builds
    for d in dirs:
        assert storage_result["image_path"][f"nats/auto@{d}"].startswith(d + "/")
    # what the bucket holds: the unsharded images and every shard's
    from pyarrow import fs
    endpoint, _ = s3_bucket
    s3 = fs.S3FileSystem(endpoint_override=endpoint, access_key="testing", secret_key="testing",
                         region=servers.s3_env(endpoint)["AWS_DEFAULT_REGION"])
    stored = [i.base_name for i in s3.get_file_info(fs.FileSelector("images/run"))]
    assert stored and all(n.startswith("topicmatch-") and n.endswith(".img") for n in stored), stored
    assert not [n for n in stored if "sav" in n or "part" in n], stored
    assert [n for n in storage_result["shared"] if n.endswith(".img")]


# -- the command line on the cluster and on Connect ---------------------------

def _cli_inputs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    subs, subjects = random_case("nats", n_subs=60, n_events=600, seed=31)
    ev = events_rows(subjects)
    ev_path, sub_path = tmp_path / "events.parquet", tmp_path / "subs.csv"
    pq.write_table(pa.Table.from_pylist([dict(zip(["event_id", "subject", "device", "payload"], r))
                                         for r in ev]), ev_path)
    with open(sub_path, "w") as f:
        f.write("sub_id,filter,queue\n")
        for i, flt, q in subs:
            f.write(f"{i},{flt},{q or ''}\n")
    return str(ev_path), str(sub_path), Expected("nats", subs, ev)


def _outputs(out):
    import pyarrow.parquet as pq
    d = pq.read_table(os.path.join(out, "deliveries")).to_pylist()
    r = pq.read_table(os.path.join(out, "rejected")).to_pylist()
    key = lambda row: tuple((k, str(v)) for k, v in sorted(row.items()))  # noqa: E731
    return sorted(d, key=key), sorted(r, key=key)


def _topicmatch(args, **env):
    exe = os.path.join(os.path.dirname(sys.executable), "topicmatch")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "topicmatch.cli"]
    return subprocess.run(cmd + args, capture_output=True, text=True, timeout=600, env=_clean_env(**env))


@pytest.fixture(scope="module")
def cli_local(spark, tmp_path_factory):
    from topicmatch import cli
    tmp = tmp_path_factory.mktemp("cli-local")
    ev, subs, exp = _cli_inputs(tmp)
    out = str(tmp / "out")
    # exit status 3: the run finished and rejected events (0 when none)
    assert cli.main(["fanout", "--events", ev, "--subs", subs, "--out", out, "--key-col", "device",
                     "--master", "local[2]", "--progress", "0"]) == \
        (cli.EXIT_REJECTED if exp.counts("pick")["rejected"] else 0)
    return ev, subs, exp, _outputs(out)


def _check_cli_run(p, out, cli_local, where):
    from test_cli import RECONCILE
    from topicmatch.cli import EXIT_REJECTED
    ev, subs, exp, (deliveries, rejected) = cli_local
    c = exp.counts("pick")
    assert p.returncode == (EXIT_REJECTED if c["rejected"] else 0), p.stdout + p.stderr[-5000:]
    assert f"on {where}" in p.stdout
    m = RECONCILE.search(p.stdout)
    assert m and [int(x.replace(",", "")) for x in m.groups()] == [
        c["events"], c["delivered"], c["unmatched"], c["rejected"]], p.stdout
    got_d, got_r = _outputs(out)
    assert len(got_d) > 100 and got_d == deliveries
    assert got_r == rejected


def test_cli_on_the_cluster(cluster_url, cli_local, tmp_path):
    """`topicmatch fanout --master spark://...` from a plain environment (no
    PYSPARK_PYTHON): the executors run the driver's interpreter; the index
    travels as a file; the outputs are local mode's."""
    ev, subs, _, _ = cli_local
    out = str(tmp_path / "out")
    p = _topicmatch(["fanout", "--events", ev, "--subs", subs, "--out", out, "--key-col", "device",
                  "--master", cluster_url, "--ship", "file"])
    _check_cli_run(p, out, cli_local, cluster_url)
    assert "shipped by file" in p.stdout


def test_cli_names_the_fix_for_a_bad_executor_python(cluster_url, cli_local, tmp_path):
    # An interpreter without site-packages, like a worker's stock python3:
    # it runs Spark's worker (pyspark comes on PYTHONPATH) but has neither
    # pyarrow nor topicmatch.  Made here, so the test needs nothing of the host.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    ev, subs, _, _ = cli_local
    p = _topicmatch(["fanout", "--events", ev, "--subs", subs, "--out", str(tmp_path / "out"),
                  "--master", cluster_url], PYSPARK_PYTHON=str(bare))
    assert p.returncode == 2, p.stdout + p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("topicmatch: error:")]
    assert len(err) == 1 and "PYSPARK_PYTHON" in err[0] and "No module named" in err[0], p.stderr


# -- Spark Connect on the two-host cluster (last: its server holds the cores) --

def _shard_builds(log, since):
    """{shard image name: builds} from the shard build tasks' log lines
    ("shard-NAME PID SUBSCRIPTIONS SECONDS", shard_images.py) after byte since."""
    with open(log) as f:
        f.seek(since)
        names = [ln.split()[0] for ln in f if ln.startswith("shard-")]
    return {n: names.count(n) for n in names}


def test_connect_equals_local(connect_result, local_result, remote_load_log):
    _same_as_local(connect_result, local_result, ["auto", "inline", "artifact", "sharded"])
    assert connect_result["shipped_by"]["nats/sharded"] == "sharded:N=4:d=1"
    assert set(connect_result["examples"]) == {"mapInArrow"}
    sb, route = connect_result["shipped_by"], connect_result["route"]
    # the server's master is the two-host cluster: the DataFrame's index is
    # an image built by an executor and returned to the client, which adds
    # it to its session (spark:); the sharded one, shard images the same
    # way (ship= named: shipped)
    assert (sb["nats/auto"], sb["nats/inline"], sb["nats/artifact"]) == ("image", "inline", "artifact")
    for name in connect_result["cases"]:
        assert connect_result["image_path"][f"{name}/auto"].startswith("spark:"), name
        assert (route[f"{name}/auto"], route[f"{name}/sharded"]) == ("image", "shard-images"), name
    assert sb["example/mapInArrow"] == "inline"
    # every image of this run built once, on an executor: the repeat call
    # (arrays, on the same rows) builds nothing
    builds = _builds_per_image(remote_load_log, connect_result["log_from"])
    assert len(builds) == len(connect_result["cases"]), builds
    assert set(builds.values()) == {1} and all(loc.startswith("spark:") for _, loc in builds), builds
    shards = _shard_builds(remote_load_log, connect_result["log_from"])
    assert shards and set(shards.values()) == {1}, shards
    for index_id, pids in _loads(remote_load_log, connect_result["index_ids"]).items():
        assert 1 <= len(pids) == len(set(pids)) <= 4, (index_id, pids)


def test_connect_share_index_errors(connect_result):
    # (checked in the Connect process: broadcast needs a SparkContext)
    assert connect_result["errors"]["broadcast"].startswith("ship='broadcast' needs classic Spark")


def test_cli_on_connect(connect_url, cli_local, tmp_path):
    ev, subs, _, _ = cli_local
    out = str(tmp_path / "out")
    p = _topicmatch(["fanout", "--events", ev, "--subs", subs, "--out", out, "--key-col", "device",
                  "--remote", connect_url])
    _check_cli_run(p, out, cli_local, connect_url)
    # the server's master is the two-host cluster: the plan builds the
    # index as an image on an executor, returned to the client as rows
    assert "shipped by image" in p.stdout
