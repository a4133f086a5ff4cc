"""A session-scoped local Spark for the tests in this directory.

`local[2,3]`: two worker threads (as `local[2]`) and up to three attempts per
task, so a test can make a task fail once and see the retry.  The Python
workers run this interpreter.  Arrow batches are small (64 rows) so that
even the small test tables go through several batches per task.

Tests that need Spark take the `spark` fixture and carry the `spark` mark;
without Java or PySpark they are skipped.  pyspark is imported only here,
lazily, so `make test-engine` collects this directory without it.
"""
import os
import shutil

import pytest

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
def spark(load_log):
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'fastsub[spark]')")
    if not _have_java():
        pytest.skip("no Java runtime: the Spark tests need one")
    from fastsub.spark import LOAD_LOG_ENV, local_session
    # Set before the JVM starts: its Python workers inherit the environment.
    os.environ[LOAD_LOG_ENV] = str(load_log)
    session = local_session(MASTER, app_name="fastsub-tests", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": ARROW_BATCH,
        "spark.default.parallelism": 2,
    })
    yield session
    session.stop()
