"""Spark sessions for topicmatch.spark (topicmatch.spark re-exports the public
names): a quiet local session (Spark's logging set up from the first line,
log4j), a Spark Connect session, which kind a session is, and the check
that a session's executors can run topicmatch."""
import contextlib
import os
import re
import stat
import sys
import tempfile
import threading
import weakref
from typing import Optional

from pyspark.sql import SparkSession

from topicmatch._core import TopicmatchImportError, TopicmatchValueError
from topicmatch.spark.base import ExecutorEnvironmentError


def is_connect(spark) -> bool:
    """True for a Spark Connect session (sc://...), which has no SparkContext."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_key(spark):
    """What a shipped index is valid for: the SparkContext (classic; the
    sessions of foreachBatch are new objects over the same one) or the
    Connect session id."""
    if is_connect(spark):
        return ("connect", getattr(spark, "session_id", None) or id(spark))
    sc = spark.sparkContext
    # (the application id too: a context made after another one stopped
    # may take the same object id)
    return ("classic", id(sc), sc.applicationId)


# --------------------------------------------------------------------------
# a quiet local session (the command line, the tests, the benchmark)
# --------------------------------------------------------------------------

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
# PySpark's gateway initializes Spark's logging as a shell does: unless its own
# logger has a level set here, Spark prints "Setting default log level to WARN".
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""

# A failed task is reported by the exception its action raises; the per-task
# stack traces Spark logs at ERROR on the way are shown only at WARN and below.
_TASK_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.util.Utils",
                 "org.apache.spark.sql.execution.datasources.FileFormatWriter",
                 "org.apache.spark.sql.execution.datasources.FileFormatDataWriter",
                 "org.apache.spark.api.python.PythonRunner")


def _log4j_file(level: str) -> str:
    """The log4j2 configuration of a quiet session, in a directory private to
    this user: made 0700 and checked as one (image_store.private_dir), so
    another user of a shared /tmp can neither make it first nor plant a
    symlink in it for this code to write through.  The new text goes to a
    mkstemp file, renamed into place."""
    from topicmatch.spark.image_store import private_dir
    d = os.path.join(tempfile.gettempdir(), f"topicmatch-{os.getuid() if hasattr(os, 'getuid') else 0}")
    try:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(d, 0o700)      # this user's own, made by an older version under its umask
    except FileNotFoundError:
        pass
    d = private_dir(d, "the logging configuration's directory", "and start again")
    path = os.path.join(d, f"log4j2-{level.lower()}.properties")
    text = _LOG4J.format(level=level.lower())
    if level.upper() in ("ERROR", "FATAL", "OFF"):
        for i, name in enumerate(_TASK_LOGGERS):
            text += f"logger.task{i}.name = {name}\nlogger.task{i}.level = off\n"
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)    # (the JVM reads it; the directory keeps others out)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


#: Lines the JVM prints at start-up that say nothing to a user: Spark's
#: launcher always adds --add-modules=jdk.incubator.vector, and Java 17+
#: then warns on every start (no JVM option silences it); and the echo of
#: options the user set in the environment (JDK_JAVA_OPTIONS,
#: JAVA_TOOL_OPTIONS, _JAVA_OPTIONS), which the JVM repeats on every start.
#: Dropped from the JVM's stderr unless the log level shows warnings.
_JVM_NOISE = (b"WARNING: Using incubator modules: ", b"NOTE: Picked up JDK_JAVA_OPTIONS: ",
              b"Picked up JAVA_TOOL_OPTIONS: ", b"Picked up _JAVA_OPTIONS: ")


def forward_jvm_stderr(read_fd: int, write_fd: int = 2, drop=_JVM_NOISE) -> None:
    """Copy the JVM's stderr (read_fd, a pipe) to write_fd line by line, the
    lines that start with one of `drop` left out, until the pipe closes.
    Lines pass through as they come (a long line in pieces)."""
    buf = b""
    with os.fdopen(read_fd, "rb", buffering=0) as r:
        while True:
            try:
                chunk = r.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            out = b"".join(ln + b"\n" for ln in lines if not ln.startswith(drop))
            if len(buf) > 65536:
                out, buf = out + buf, b""
            try:
                if out:
                    os.write(write_fd, out)
            except OSError:
                pass
    if buf and not buf.startswith(drop):
        try:
            os.write(write_fd, buf)
        except OSError:
            pass


def _start_quiet_context(builder) -> None:
    """Start the SparkContext the builder would start, with the JVM's stderr
    read through forward_jvm_stderr (its start-up noise dropped) -- only
    when no context or gateway exists yet in this process."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    if SparkContext._active_spark_context is not None or SparkContext._gateway is not None \
            or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    conf = SparkConf()
    for k, v in builder._options.items():
        conf.set(k, str(v))
    r, w = os.pipe()
    threading.Thread(target=forward_jvm_stderr, args=(r,), name="topicmatch-jvm-stderr",
                     daemon=True).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": w})
    finally:
        os.close(w)             # the JVM holds its copy; EOF when it exits
    SparkContext(conf=conf, gateway=gateway)


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def local_session(master: str = "local[*]", *, app_name: str = "topicmatch",
                  log_level: str = "ERROR", shuffle_partitions: Optional[int] = None,
                  conf: Optional[dict] = None) -> SparkSession:
    """A SparkSession set up to be quiet and quick: Spark's own logging at
    `log_level` from the first line (not just after start-up), no progress
    bars, no UI for a local master; for a local master the workers run this
    interpreter (PYSPARK_PYTHON = sys.executable), the driver binds to
    127.0.0.1 and `spark.sql.shuffle.partitions` is small (2 x cores).  For a
    cluster master, the executors run this interpreter too unless
    PYSPARK_PYTHON (or spark.pyspark.python in `conf`) says otherwise; a
    fan-out checks once that they can import topicmatch and says how to fix it
    when they cannot.  Returns the existing session if one is already running.
    At a quiet log_level (ERROR and above), the JVM's start-up warning
    "Using incubator modules" is dropped from its stderr."""
    local = is_local_master(master)
    b = SparkSession.builder.master(master).appName(app_name)
    props = _log4j_file(log_level)
    opts = f"-Dlog4j2.configurationFile=file:{props} -Dlog4j.configurationFile=file:{props}"
    b = (b.config("spark.driver.extraJavaOptions", opts)
          .config("spark.ui.showConsoleProgress", "false")
          .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if local:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if shuffle_partitions is None:
            m = re.match(r"local\[(\d+)", master)
            cores = int(m.group(1)) if m else (os.cpu_count() or 2)
            shuffle_partitions = max(2, 2 * cores)
        b = (b.config("spark.pyspark.python", sys.executable)
              .config("spark.ui.enabled", "false")
              .config("spark.driver.host", "127.0.0.1")
              .config("spark.driver.bindAddress", "127.0.0.1"))
    elif not os.environ.get("PYSPARK_PYTHON") and not (conf or {}).get("spark.pyspark.python"):
        # Executors run this interpreter unless told otherwise: the default
        # `python3` of the workers' PATH rarely has topicmatch and pyarrow.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        b = b.config("spark.pyspark.python", sys.executable)
    if shuffle_partitions is not None:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for k, v in (conf or {}).items():
        b = b.config(k, str(v))
    if log_level.upper() in ("ERROR", "FATAL", "OFF"):
        _start_quiet_context(b)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    return spark


def remote_session(url: str, *, app_name: str = "topicmatch") -> SparkSession:
    """A Spark Connect session on `url` (sc://host:port).  The server's
    executors must have topicmatch installed (see check_executors)."""
    if not url.startswith("sc://"):
        raise TopicmatchValueError(f"a Spark Connect URL starts with sc://, not {url!r}")
    try:
        import pyspark.sql.connect.session  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TopicmatchImportError(f"Spark Connect needs grpcio, grpcio-status, googleapis-common-protos "
                          f"and zstandard ({e}): pip install 'topicmatch[spark]'") from e
    return SparkSession.builder.remote(url).appName(app_name).getOrCreate()


# --------------------------------------------------------------------------
# executors: is their Python able to run topicmatch?
# --------------------------------------------------------------------------

_CHECKED = weakref.WeakSet()


def _probe(batches):
    import pyarrow as pa_
    import topicmatch as fs
    from topicmatch._columns import batch_of
    # (this function is pickled by reference: unpickling it imported
    # topicmatch.spark, what a fan-out's build and match functions need, in
    # each core's worker beside the plan's first job, not in their tasks.
    # Its row is made without pyarrow's conversion of Python values, which
    # imports pandas where it is installed: ~1 s of each fresh worker)
    for _ in batches:
        pass
    yield batch_of({"python": [sys.executable], "topicmatch": [fs.__file__]},
                   pa_.schema([("python", pa_.string()), ("topicmatch", pa_.string())]))


def _checked(spark) -> bool:
    try:
        return spark in _CHECKED
    except TypeError:  # pragma: no cover
        return False


@contextlib.contextmanager
def executors_checked(spark):
    """check_executors(spark) around a plan's first jobs: on classic Spark,
    for a session not checked yet, its one-row tasks run on a thread of
    their own (its job beside the plan's first, which runs no Python: the
    statistics aggregate), and is waited for on exit.  Where it failed,
    its error (ExecutorEnvironmentError, which names the fix) is raised in
    place of the body's: a job of the body that ran Python on executors
    without topicmatch fails with a worker's stack instead.  (On a loaded
    two-host rig the check job and the planning of the aggregate after it
    took 0.5 and 3.4 s in a row.)  Spark Connect, or a session checked
    already: check_executors in line."""
    if is_connect(spark) or _checked(spark):
        check_executors(spark)
        yield
        return
    failed = []

    def run():
        try:
            check_executors(spark)
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread
            failed.append(e)
    # (a plain thread: its one-row job runs without the caller's job group or
    # pool, which pyspark's InheritableThread would copy, but which asserts a
    # Connect session wherever SPARK_REMOTE is set in the environment)
    thread = threading.Thread(target=run, name="topicmatch-executors-check", daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        thread.join()
        if failed:
            raise failed[0] from None
        raise
    thread.join()
    if failed:
        raise failed[0]


def parallelism(spark) -> int:
    """The cores the session's tasks run on (defaultParallelism; on Spark
    Connect, which has no SparkContext, the conf's word for it, else 2)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        for key in ("spark.default.parallelism", "spark.executor.cores"):
            try:
                v = spark.conf.get(key, None)
                if v:
                    return max(1, int(v))
            except Exception:  # noqa: BLE001
                pass
        return 2


#: The most tasks of the executors' check (one a core, up to this many).
CHECK_TASKS_MAX = 64


def check_executors(spark: SparkSession, *, force: bool = False) -> None:
    """Run one-row tasks that import topicmatch (topicmatch.spark with it)
    and pyarrow on the executors, one a core (up to CHECK_TASKS_MAX);
    raise ExecutorEnvironmentError naming the fix when they cannot.  Done
    once per session (every fan-out calls it, on any master).  One task a
    core, not one in all: each core's Python worker (reused by the later
    tasks) has then imported what a fan-out's tasks unpickle, beside the
    plan's first job, where one task warmed one host only and the other
    host's first build task imported it on the critical path (0.12-0.38 s
    on the two-host rig under a load average of 6)."""
    if not force and _checked(spark):
        return
    n = min(parallelism(spark), CHECK_TASKS_MAX)
    try:
        spark.range(n, numPartitions=n).mapInArrow(_probe, "python string, topicmatch string").collect()
    except Exception as e:  # noqa: BLE001 - any failure here is the environment's
        text = str(e)
        m = re.search(r"(ModuleNotFoundError: [^\n]*|No module named [^\n]*|Cannot run program [^\n]*"
                      r"|ImportError: [^\n]*)", text)
        why = m.group(1).strip() if m else (text.strip().splitlines() or [type(e).__name__])[0][:300]
        if is_connect(spark):
            fix = ("the Spark Connect server's executors need a Python with topicmatch, pyarrow and "
                   "numpy installed: set PYSPARK_PYTHON (or spark.pyspark.python) on the server")
        else:
            fix = (f"set PYSPARK_PYTHON to a Python that has topicmatch, pyarrow and numpy on every "
                   f"executor (the driver runs {sys.executable}; topicmatch.spark.local_session uses it "
                   "by default when PYSPARK_PYTHON is unset)")
        raise ExecutorEnvironmentError(f"the executors cannot run topicmatch ({why}); {fix}") from None
    try:
        _CHECKED.add(spark)
    except TypeError:  # pragma: no cover
        pass

