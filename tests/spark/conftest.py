"""A session-scoped local Spark for the tests in this directory.

`local[2,3]`: two worker threads (as `local[2]`) and up to three attempts per
task, so a test can make a task fail once and see the retry.  The Python
workers run this interpreter.  Arrow batches are small (64 rows) so that
even the small test tables go through several batches per task.

Tests that need Spark take the `spark` fixture and carry the `spark` mark;
without Java or PySpark they are skipped.  pyspark is imported only here,
lazily, so `make test-engine` collects this directory without it.
"""
import importlib.util
import os
import shutil

import pytest

# Without PySpark nothing here is collected: every file imports
# topicmatch.spark (which needs it), even those that start no JVM
# (test_image_store.py, test_image_inbox.py); the wheel round trip's venv
# has only the test extra.  find_spec looks, without importing.
if importlib.util.find_spec("pyspark") is None:
    collect_ignore_glob = ["test_*.py"]

# Every JVM these tests start (local drivers, the standalone master, workers
# and executors, the Connect server, the command line's drivers) lives a
# minute or less: HotSpot's C1 compiler alone and the serial collector, no
# C2 compiler threads or parallel GC threads competing for the machine's
# cores.  Measured on 2 cores (tests/spark/test_cli.py -k "demo or
# fanout_command"): 114 CPU s and 68 s wall with the defaults, 71 CPU s and
# 60 s with these.  JDK_JAVA_OPTIONS reaches only the `java` launcher (JDK 9+),
# which Spark's scripts call; a value the user set is kept.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

MASTER = "local[2,3]"
ARROW_BATCH = 64


def _have_java():
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


@pytest.fixture(scope="session")
def load_log(tmp_path_factory):
    """The file every worker-side index load appends "<index id> <pid>" to."""
    return tmp_path_factory.mktemp("spark-loads") / "loads.log"


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory):
    """The executors' default image directory for this session: images are
    named by content, so a directory kept from an earlier run would hold
    them already (TOPICMATCH_IMAGE_DIR, set before any JVM starts)."""
    from topicmatch.spark.images import IMAGE_DIR_ENV
    path = tmp_path_factory.mktemp("images")
    os.environ[IMAGE_DIR_ENV] = str(path)
    return path


@pytest.fixture(scope="session")
def spark(load_log, image_dir):
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'topicmatch[spark]')")
    if not _have_java():
        pytest.skip("no Java runtime: the Spark tests need one")
    from topicmatch.spark import LOAD_LOG_ENV, local_session
    # Set before the JVM starts: its Python workers inherit the environment.
    os.environ[LOAD_LOG_ENV] = str(load_log)
    session = local_session(MASTER, app_name="topicmatch-tests", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": ARROW_BATCH,
        "spark.default.parallelism": 2,
    })
    yield session
    session.stop()


# -- servers: one cluster for the session, a Connect server on it per module --

@pytest.fixture(scope="session")
def remote_load_log(tmp_path_factory):
    """Index loads on the Connect server's and the cluster's executors."""
    return tmp_path_factory.mktemp("remote-loads") / "loads.log"


def _servers_or_skip():
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'topicmatch[spark]')")
    if not _have_java():
        pytest.skip("no Java runtime: the Spark tests need one")
    import servers
    return servers


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory, remote_load_log, image_dir, cluster_url):
    """sc://127.0.0.1:PORT of a Spark Connect server started from the PySpark
    package, its master the two-host cluster (cluster_url), stopped at the
    end of the module that asked for it.  Its application holds both of
    the cluster's cores while it lives (an executor on each host), so a
    cluster application started meanwhile would wait for ever: a module's
    tests on the cluster come before its Connect tests."""
    servers = _servers_or_skip()
    pytest.importorskip("grpc", reason="Spark Connect needs grpcio (pip install 'topicmatch[spark]')")
    from topicmatch.spark import LOAD_LOG_ENV
    url, server = servers.connect_server(
        str(tmp_path_factory.mktemp("connect-server")), master=cluster_url,
        extra_env={LOAD_LOG_ENV: str(remote_load_log)},
        # (one attempt per task: a task that fails on a host, say one that
        # could not find an image, fails the run, never hidden by a retry
        # on the other host)
        conf={"spark.executor.memory": "512m", "spark.executor.cores": 1, "spark.cores.max": 2,
              "spark.task.maxFailures": 1})
    yield url
    server.stop()


@pytest.fixture(scope="session")
def cluster_dir(tmp_path_factory):
    """The standalone cluster's directories (servers.standalone_cluster)."""
    return str(tmp_path_factory.mktemp("cluster"))


@pytest.fixture(scope="session")
def cluster_url(cluster_dir, remote_load_log, image_dir):
    """spark://127.0.0.1:PORT of a standalone master with two 1-core workers,
    each its own process, stopped at the end of the session."""
    servers = _servers_or_skip()
    from topicmatch.spark import LOAD_LOG_ENV
    url, procs = servers.standalone_cluster(cluster_dir,
                                            extra_env={LOAD_LOG_ENV: str(remote_load_log)})
    yield url
    for p in reversed(procs):
        p.stop()


@pytest.fixture(scope="session")
def s3_bucket(tmp_path_factory):
    """(endpoint, "s3://BUCKET"): a bucket on an S3 API server on loopback
    (moto's), the storage the cluster's hosts have in common."""
    servers = _servers_or_skip()
    pytest.importorskip("moto", reason="the S3 tests need moto[server] (the test extra)")
    import boto3
    endpoint, server = servers.s3_server(str(tmp_path_factory.mktemp("s3")))
    env = servers.s3_env(endpoint)
    boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                 aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket="images")
    yield endpoint, "s3://images"
    server.stop()
