"""Which hosts a session's executors are on, and so whether a subscriptions
DataFrame's index goes through images and how an image reaches them
(images.py re-exports these names): the executors' default directory where
they share one host, Spark itself (spark: locations) where they may not,
or the driver's build and shipping where images cannot be used.  On Spark
Connect this is asked of the server (its master, and a probe task), never
judged from the client."""
import logging
import threading
import socket
from typing import Optional

import pyarrow as pa

from topicmatch._columns import batch_of
from topicmatch._core import TopicmatchValueError
from topicmatch.spark.image_store import check_image_dir, default_image_dir
from topicmatch.spark.session import check_executors, is_connect, is_local_master, session_key

_log = logging.getLogger("topicmatch.spark")


# --------------------------------------------------------------------------
# where a DataFrame's index goes
# --------------------------------------------------------------------------

def use_images(spark, image_dir, ship: str) -> bool:
    """Does a subscriptions DataFrame's index go through an image (True) or
    the driver build + ship of share_index (False)?  image_dir given: yes
    (with ship="auto" only: the two are different ways for the index to
    reach the executors).  The default directory: on classic Spark, always
    (on one host the executors share it; across hosts the image travels
    through Spark: spark_files).  Spark Connect: when the server's
    executors share one host (connect_one_host); across hosts, when the
    client can take the images back and add them to its session
    (connect_takes_images); elsewhere no."""
    if image_dir is not None:
        check_dir_and_ship(image_dir, ship)
        return True
    if ship != "auto":
        return False
    if is_connect(spark) and not connect_one_host(spark) and not connect_takes_images(spark):
        warn_once(spark, "topicmatch: on Spark Connect without image_dir= a subscriptions "
                          "DataFrame's index is built on the driver and shipped: the server's "
                          "executors may run on several hosts, and this client cannot add an "
                          "image to its session (its PySpark's addArtifacts takes no file=: "
                          "Spark Connect 3.5+); pass image_dir= a path or storage URI they "
                          "share to build it there, once per content")
        return False
    return True


def connect_takes_images(spark) -> bool:
    """Can a Spark Connect client take the images its tasks build on
    several hosts?  They come back as rows of the build job's result
    (image_inbox.RowInbox: toLocalIterator, in every Connect client), and
    the client adds each to its session for the other hosts
    (spark.addArtifacts(path, file=True): Spark Connect 3.5+)."""
    import inspect
    add = getattr(spark, "addArtifacts", None)
    try:
        return add is not None and "file" in inspect.signature(add).parameters
    except (TypeError, ValueError):     # no signature to read
        return False


# session -> (do a Connect server's executors share one host, the host they
# reported, the server's master)
_CONNECT_HOSTS = {}
_CONNECT_LOCK = threading.Lock()


_HOST_SCHEMA = pa.schema([("host", pa.string()), ("home", pa.string())])


def _host_probe(batches):
    for b in batches:
        yield batch_of({"host": [socket.gethostname()] * b.num_rows,
                        "home": [default_image_dir()] * b.num_rows}, _HOST_SCHEMA)


def connect_one_host(spark) -> bool:
    """Spark Connect: do the server's executors share one host, so that
    images in their default directory serve every one of them?  The client
    sees no executor, so this is asked of the server, once per session:
    its master must be local (every executor is then a thread of the
    server's own process, on its host: dynamic allocation cannot add one
    elsewhere), and a probe task, run there, reports the host and the
    image directory the executors will use.  A cluster behind the server
    is never assumed to share a host: an executor on another one could
    not map the path (the images travel through Spark: spark_files)."""
    key = session_key(spark)
    with _CONNECT_LOCK:
        if key not in _CONNECT_HOSTS:
            _CONNECT_HOSTS[key] = _ask_connect(spark)
    return _CONNECT_HOSTS[key][0]


def _ask_connect(spark):
    """connect_one_host's question, asked: -> (one host?, "host:directory",
    the server's master)."""
    try:
        master = spark.conf.get("spark.master", None) or ""
    except Exception:  # noqa: BLE001 - a server that does not say
        master = ""
    answer = (False, None, master)
    if is_local_master(master):
        # (the executors' check first: a server without topicmatch gets
        # its clear error, not a worker's stack from the probe)
        check_executors(spark)
        rows = spark.range(2, numPartitions=2).mapInArrow(
            _host_probe, "host string, home string").collect()
        hosts = {(r["host"], r["home"]) for r in rows}
        if len(hosts) == 1:
            answer = (True, "%s:%s" % hosts.pop(), master)
    return answer


def connect_host(spark) -> Optional[str]:
    """The host and image directory a Connect server's executors reported
    (connect_one_host), for the plan's explain(); None where not one host."""
    return _CONNECT_HOSTS.get(session_key(spark), (False, None, None))[1]


def connect_master(spark) -> Optional[str]:
    """The master a Connect server said it runs (connect_one_host asked),
    for the plan's explain(); None where not asked or not said."""
    return _CONNECT_HOSTS.get(session_key(spark), (False, None, None))[2] or None


_WARNED = set()


def warn_once(spark, message: str) -> None:
    """A path that images cannot take is said, once per session, never silently."""
    key = (session_key(spark), message)
    if key not in _WARNED:
        _WARNED.add(key)
        _log.warning("%s", message)


def spark_files(spark, image_dir) -> bool:
    """Do the images travel through Spark (spark: locations)?  With no
    image_dir, where the executors do not all share one host."""
    return image_dir is None and not default_dir_works(spark)


def check_dir_and_ship(image_dir, ship: str = "auto") -> str:
    """image_dir as a path, or a clear error (TypeError, ValueError): an
    absolute directory, not a URL, and not with ship= other than "auto"."""
    path = check_image_dir(image_dir)
    if ship != "auto":
        raise TopicmatchValueError(f"ship={ship!r} and image_dir= are two ways for the index to reach "
                         "the executors: give one (image_dir builds it there, ship sends "
                         "the driver's)")
    return path


def default_dir_works(spark) -> bool:
    """Can the executors share images on their local disk?  A local master:
    yes.  Classic Spark on a cluster: when every registered executor runs
    on one host and dynamic allocation is off (executors added later could
    be elsewhere).  Spark Connect: when the server's executors report one
    host (connect_one_host)."""
    if is_connect(spark):
        return connect_one_host(spark)
    sc = spark.sparkContext
    if is_local_master(sc.master):
        return True
    conf = sc._conf     # the context's own (getConf() copies every setting: ~40 ms a call)
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return False
    try:
        infos = list(sc._jsc.sc().statusTracker().getExecutorInfos())
        driver = conf.get("spark.driver.host", None)
        hosts = [i.host() for i in infos]
        # the driver is one of the entries; at least one executor besides it
        executors = [h for h in hosts if h != driver] or hosts[1:]
    except Exception:  # noqa: BLE001 - no way to see the executors
        return False
    return len(hosts) >= 2 and len(set(executors)) == 1
