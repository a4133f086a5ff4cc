"""Spark servers for the tests, started from the PySpark package itself:

    connect_server(dir, master)  sbin/start-connect-server.sh --wait (the connect
                           jar ships in pyspark/jars), on a free port, its
                           master local[2] or a standalone cluster's
    standalone_cluster(dir) a master and two workers (bin/spark-class), each its
                           own process: the master on 127.0.0.1, worker k on
                           127.0.0.(k+1) -- a host of its own, with its own
                           temporary, local and work directories

    s3_server(dir)         moto's standalone S3 API server on 127.0.0.1 and a free
                           port: the object store the cluster's hosts share

Every process gets a private directory (logs, work, local dirs, an empty conf
dir) under `dir`, runs in its own process group, and is stopped by the pid
this module started (SIGTERM to its group, then SIGKILL).
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def spark_home():
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port():
    return free_ports(1)[0]


def free_ports(n):
    """n distinct free ports: every socket stays bound until all are picked,
    so two calls in a row cannot hand out the same port twice."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _log4j(path):
    # warn, except the line where the master's web UI says which port it bound
    # (Spark moves to the next port when the one asked for is taken)
    with open(path, "w") as f:
        f.write("rootLogger.level = warn\nrootLogger.appenderRef.stderr.ref = console\n"
                "appender.console.type = Console\nappender.console.name = console\n"
                "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n"
                "logger.masterui.name = org.apache.spark.deploy.master.ui.MasterWebUI\n"
                "logger.masterui.level = info\n")
    return path


class Server:
    """One process (group) we started; .stop() ends it by its pid."""

    def __init__(self, name, argv, env, log_path):
        self.name, self.log_path = name, log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.proc.pid, sig)   # the group whose leader we started
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.close()


def _env(base_dir, extra=None, host="127.0.0.1"):
    conf = os.path.join(base_dir, "conf")
    os.makedirs(conf, exist_ok=True)
    env = dict(os.environ)
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "MASTER"):
        env.pop(k, None)
    env.update({
        "SPARK_HOME": spark_home(),
        "SPARK_CONF_DIR": conf,
        "SPARK_LOG_DIR": os.path.join(base_dir, "logs"),
        "SPARK_PID_DIR": os.path.join(base_dir, "pids"),
        "SPARK_LOCAL_DIRS": os.path.join(base_dir, "local"),
        # every process binds to its loopback address only, never to the
        # machine's other interfaces
        "SPARK_LOCAL_IP": host,
        # a host's own disk: its executors' temporary directory (the default
        # image directory lives there) is nobody else's
        "TMPDIR": os.path.join(base_dir, "tmp"),
        "SPARK_IDENT_STRING": "topicmatch-tests",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    })
    for k in ("SPARK_LOG_DIR", "SPARK_PID_DIR", "SPARK_LOCAL_DIRS", "TMPDIR"):
        os.makedirs(env[k], exist_ok=True)
    env.update(extra or {})
    return env


def _wait(what, ready, servers, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        for s in servers:
            if not s.alive():
                raise RuntimeError(f"{s.name} exited while starting:\n{s.log_tail()}")
        try:
            if ready():
                return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.5)
    tails = "\n".join(f"--- {s.name}\n{s.log_tail()}" for s in servers)
    raise RuntimeError(f"{what} not ready after {timeout} s:\n{tails}")


def _port_open(port):
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


def _listening(name, argv, env, log_path, port, timeout):
    """A Server started and waited for until it accepts connections on
    127.0.0.1:port (stopped again if it never does)."""
    server = Server(name, argv, env, log_path)
    try:
        _wait(name, lambda: _port_open(port), [server], timeout)
    except BaseException:
        server.stop()
        raise
    return server


def connect_server(base_dir, extra_env=None, timeout=180, master="local[2]", conf=None):
    """-> (url "sc://127.0.0.1:PORT", Server): a Connect server whose
    application runs on `master`, with `conf` (key -> value) besides the
    quiet defaults."""
    os.makedirs(base_dir, exist_ok=True)
    port = free_port()
    env = _env(base_dir, extra_env)
    props = _log4j(os.path.join(base_dir, "log4j2.properties"))
    argv = [os.path.join(spark_home(), "sbin", "start-connect-server.sh"), "--wait",
            "--master", master,
            "--driver-memory", "1g",
            "--driver-java-options", f"-Dlog4j2.configurationFile=file:{props}",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", "spark.sql.shuffle.partitions=4",
            "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=64",
            *[a for k, v in (conf or {}).items() for a in ("--conf", f"{k}={v}")]]
    server = _listening("the Spark Connect server", argv, env, os.path.join(base_dir, "server.log"),
                        port, timeout)
    return f"sc://127.0.0.1:{port}", server


def worker_host(k):
    """The loopback address of worker k (0-based): 127.0.0.2, 127.0.0.3, ..."""
    return f"127.0.0.{k + 2}"


def host_image_dirs(base_dir, workers=2):
    """The default image directory of each host of standalone_cluster(base_dir):
    topicmatch-images-<uid> in its worker's temporary directory, which its
    executors inherit."""
    return [os.path.join(base_dir, f"worker{k + 1}", "tmp", f"topicmatch-images-{os.getuid()}")
            for k in range(workers)]


def standalone_cluster(base_dir, workers=2, extra_env=None, timeout=180, worker_memory="1g"):
    """-> (master url "spark://127.0.0.1:PORT", [master, worker, ...]).
    Worker k runs on worker_host(k): a cluster of `workers` hosts that share
    nothing but this machine's page cache (each its own TMPDIR, local and
    work directories)."""
    os.makedirs(base_dir, exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    props = _log4j(os.path.join(base_dir, "log4j2.properties"))
    port, ui, *worker_uis = free_ports(2 + workers)
    servers = []

    def env_for(name, host="127.0.0.1"):
        d = os.path.join(base_dir, name)
        e = _env(d, extra_env, host)
        e["SPARK_DAEMON_JAVA_OPTS"] = f"-Dlog4j2.configurationFile=file:{props}"
        e["SPARK_DAEMON_MEMORY"] = "384m"
        return d, e

    try:
        d, env = env_for("master")
        servers.append(Server("spark master", [
            spark_class, "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
            env, os.path.join(d, "master.log")))
        url = f"spark://127.0.0.1:{port}"
        _wait("the standalone master", lambda: _port_open(port), servers, timeout)
        for k in range(workers):
            d, env = env_for(f"worker{k + 1}", worker_host(k))
            # nothing shared between hosts unless a test says so: not the
            # image directory the driver's tests may have set
            if "TOPICMATCH_IMAGE_DIR" not in (extra_env or {}):
                env.pop("TOPICMATCH_IMAGE_DIR", None)
            env["SPARK_WORKER_DIR"] = os.path.join(d, "work")
            servers.append(Server(f"spark worker {k + 1} ({worker_host(k)})", [
                spark_class, "org.apache.spark.deploy.worker.Worker",
                "--host", worker_host(k), "--webui-port", str(worker_uis[k]),
                "--cores", "1", "--memory", worker_memory, "--work-dir", env["SPARK_WORKER_DIR"], url],
                env, os.path.join(d, "worker.log")))

        master = servers[0]
        last_answer = []

        def registered():
            # the master's state as JSON from its web UI, on the port its log
            # says it bound; anything else (a page still starting, another
            # server on the port) means "not yet", and is shown on timeout
            bound = re.findall(r"MasterWebUI.*started at http://[^:]+:(\d+)", master.log_tail(200))
            at = int(bound[-1]) if bound else ui
            with urllib.request.urlopen(f"http://127.0.0.1:{at}/json/", timeout=2) as r:
                body = r.read()
            try:
                state = json.loads(body)
            except ValueError:
                last_answer[:] = [f"port {at} answered /json/ with {body[:120]!r}"]
                return False
            return state.get("url") == url and state.get("aliveworkers", 0) >= workers
        try:
            _wait(f"{workers} standalone workers", registered, servers, timeout)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{''.join(last_answer)}") from None
    except BaseException:
        for s in reversed(servers):
            s.stop()
        raise
    return url, servers


def s3_server(base_dir, timeout=60):
    """-> (endpoint "http://127.0.0.1:PORT", Server): moto's S3 API server
    (from PyPI's moto[server]), its state in memory, stopped by .stop()."""
    os.makedirs(base_dir, exist_ok=True)
    port = free_port()
    argv = [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1",
            "-p", str(port)]
    server = _listening("the S3 server", argv, dict(os.environ), os.path.join(base_dir, "s3.log"),
                        port, timeout)
    return f"http://127.0.0.1:{port}", server


def s3_env(endpoint):
    """The variables the AWS tools (and pyarrow.fs) read to reach `endpoint`."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true"}
