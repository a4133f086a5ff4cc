"""Where an image lives, and how a worker reaches a local copy to map.

The driver names every image by its content (images.name_of) and hands its
tasks a *location*, a string of one of three kinds:

    /abs/dir/NAME.img       a directory every executor reads as a local or
                            mounted file system: image_dir=PATH, or the
                            executors' default directory when they all share
                            one host.  Mapped where it is.
    s3://bucket/dir/NAME.img  (gs://, abfs://, hdfs://) storage the hosts
                            of a cluster have in common: image_dir=URI.  The
                            build task uploads the image it saved; each host
                            fetches it once, under a lock, into its local
                            cache (the default image directory), checks it
                            in full, and renames it into place -- a partial
                            download is never mapped -- and its workers map
                            that copy.
    spark:NAME.img          hosts with nothing in common (no image_dir):
                            the build task saves the image on its own host
                            and streams it to the driver (image_inbox); the
                            driver keeps it in its own cache and serves it
                            (image_inbox.ImageServer), so that each other
                            host fetches it once, when a task first needs
                            it -- executors that join later (dynamic
                            allocation) included -- and the host that built
                            it never does.  (Not SparkContext.addFile: Spark
                            fetches every added file on every executor at
                            its next task, needed or not.)
                            Spark Connect: the tasks return the image to
                            the client as rows of their result, and the
                            client adds it to the session as an artifact
                            (spark.addArtifacts(path, file=True)), which
                            each host fetches through Spark.

The remote client is pyarrow.fs, already a dependency: it reads the
endpoints and credentials the storage's own tools read (for S3 the AWS_*
variables and files, AWS_ENDPOINT_URL included; Hadoop's configuration for
HDFS), and needs no JVM in the Python workers.
"""
import contextlib
import fcntl
import os
import stat
import tempfile
from typing import Optional

from topicmatch._core import TopicmatchTypeError, TopicmatchValueError, _os_error
from topicmatch import Sublist
from topicmatch.spark.image_cache import hold, open_regular, prune_quietly

#: In the executors' environment: the default image directory instead of
#: topicmatch-images-<uid> in their temporary directory.
IMAGE_DIR_ENV = "TOPICMATCH_IMAGE_DIR"

#: The storage schemes image_dir takes besides a path (pyarrow.fs reaches them).
REMOTE_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "hdfs", "viewfs")

#: The prefix of a location that travels through the driver (image_inbox).
SPARK = "spark:"

#: The bytes read or written at a time in an upload or a fetch.
CHUNK_BYTES = 8 << 20


def check_image_dir(image_dir) -> Optional[str]:
    """image_dir as the driver keeps it: None, an absolute path (a file://
    URL's), or a storage URI (REMOTE_SCHEMES) without its trailing slash;
    anything else is a TypeError or a ValueError that says what is taken."""
    if image_dir is None:
        return None
    if not isinstance(image_dir, (str, os.PathLike)):
        raise TopicmatchTypeError(f"image_dir must be a path or a URI (str), not {type(image_dir).__name__}")
    path = os.fspath(image_dir)
    if path.startswith("file://"):
        path = path[len("file://"):]
    scheme = path.split("://", 1)[0].lower() if "://" in path else None
    if scheme is not None:
        if scheme not in REMOTE_SCHEMES or not path.split("://", 1)[1].strip("/"):
            raise TopicmatchValueError(f"image_dir={path!r}: give an absolute directory path every executor "
                             "reads as a local or mounted file system, or a URI of storage the "
                             f"hosts share ({', '.join(s + '://' for s in REMOTE_SCHEMES)})")
        return _reachable(path.rstrip("/"))
    if not os.path.isabs(path):
        raise TopicmatchValueError(f"image_dir={path!r}: give an absolute directory path (or a storage URI "
                         "such as s3://bucket/dir): a relative one means a different directory "
                         "on each executor")
    return path


_REACHED = set()


def _reachable(uri: str) -> str:
    """uri, once pyarrow.fs has made a client for it here (a missing
    library, as libhdfs, or a malformed URI fails on the driver, before any
    task): ValueError naming it otherwise."""
    if uri not in _REACHED:
        try:
            _filesystem(uri)
        except Exception as e:  # noqa: BLE001 - pyarrow's own errors, named below
            raise TopicmatchValueError(f"image_dir={uri!r}: pyarrow.fs cannot reach it ({e})") from None
        _REACHED.add(uri)
    return uri


def is_remote(location: str) -> bool:
    return "://" in location


def is_spark(location: str) -> bool:
    return location.startswith(SPARK)


def location_in(image_dir: Optional[str], name: str, spark_files: bool) -> str:
    """The location of the image `name` (no suffix): in image_dir (a path or a
    URI), or with image_dir None, in the executors' default directory
    (resolved on the executor, where the task runs: None stays None here) or
    through Spark (spark_files)."""
    if image_dir is None:
        return SPARK + name + ".img" if spark_files else None
    if is_remote(image_dir):
        return f"{image_dir}/{name}.img"
    return os.path.join(image_dir, name + ".img")


def default_image_dir() -> str:
    """The default image directory, as a task resolves it on its executor:
    $TOPICMATCH_IMAGE_DIR, or topicmatch-images-<uid> in the executor's
    temporary directory."""
    return os.environ.get(IMAGE_DIR_ENV) or os.path.join(tempfile.gettempdir(),
                                                         f"topicmatch-images-{os.getuid()}")


def image_home() -> str:
    """This host's image directory, ready: the default one made private
    (private_dir) -- one the user names in TOPICMATCH_IMAGE_DIR is theirs to
    share, and only made when missing."""
    path = default_image_dir()
    if IMAGE_DIR_ENV in os.environ:
        os.makedirs(path, exist_ok=True)
        return path
    return private_dir(path)


# --------------------------------------------------------------------------
# directories and locks another local user cannot steer
# --------------------------------------------------------------------------

def private_dir(path: str, what: str = "the image directory",
                fix: str = "or set TOPICMATCH_IMAGE_DIR to a directory of your own") -> str:
    """path, made 0700 if missing, and checked (lstat: a symlink is not
    followed) to be a real directory the caller owns that group and other
    cannot write: a per-user directory in a shared /tmp that another user
    made first, or could plant images or locks in, is refused (PermissionError
    naming it and why), never used."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    why = None
    if not stat.S_ISDIR(st.st_mode):
        why = "it is not a directory (a symlink or a file is there)"
    elif st.st_uid != os.getuid():
        why = f"it belongs to uid {st.st_uid}, not to this user ({os.getuid()})"
    elif st.st_mode & 0o022:
        why = f"group or other can write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if why:
        raise _os_error(f"topicmatch: refusing {what} {path}: {why}; remove it, {fix}",
                        kind=PermissionError)
    return path


@contextlib.contextmanager
def locked(path: str):
    """An exclusive flock on path + ".lock", taken on a read-only
    descriptor (so a lock file of 0644 lets no one else's open for writing
    matter), never through a symlink, and never waiting on a FIFO put at
    its name (O_NONBLOCK: a FIFO's open would wait for a writer; flock
    itself still waits for the lock)."""
    fd = os.open(path + ".lock", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _os_error(f"topicmatch: the lock file {path}.lock is not a regular file", kind=PermissionError)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)        # (closing releases the lock)


# --------------------------------------------------------------------------
# on an executor
# --------------------------------------------------------------------------

def cache_path(location: str, cache_dir: str) -> str:
    """Where this host keeps its copy of a remote or spark: image."""
    return os.path.join(cache_dir, location.rsplit("/", 1)[-1].split(":", 1)[-1])


def _filesystem(uri: str):
    from pyarrow import fs
    return fs.FileSystem.from_uri(uri)


def remote_exists(uri: str) -> bool:
    from pyarrow import fs
    filesystem, path = _filesystem(uri)
    return filesystem.get_file_info(path).type == fs.FileType.File


def upload(local_path: str, uri: str) -> None:
    """Put the local image at uri, whole or not at all: an object store's
    upload appears when it completes; elsewhere it is written under a
    temporary name and moved into place."""
    filesystem, path = _filesystem(uri)
    atomic_put = filesystem.type_name in ("s3", "gcs")
    target = path if atomic_put else f"{path}.{os.getpid()}.{os.urandom(4).hex()}.saving"
    parent = path.rsplit("/", 1)[0]
    if parent and not atomic_put:
        filesystem.create_dir(parent, recursive=True)
    with open(local_path, "rb") as src, filesystem.open_output_stream(target) as out:
        for chunk in iter(lambda: src.read(CHUNK_BYTES), b""):
            out.write(chunk)
    if not atomic_put:
        filesystem.move(target, path)


def once_per_host(local: str, lock, fetch) -> bool:
    """Make this host's copy `local` with fetch() unless it is there: looked
    for before taking lock(local) and again once it is held (another task
    may have made it meanwhile).  -> True when this call made it."""
    if os.path.exists(local):
        return False
    with lock(local):
        if os.path.exists(local):
            return False
        fetch()
        return True


def fetch(uri: str, cache_dir: str, lock) -> str:
    """The local copy of the remote image at uri: fetched once per host,
    under the caller's lock (images.locked), into a temporary file in
    cache_dir, checked in full, then renamed into place; FileNotFoundError
    when uri holds nothing, ValueError when what it holds is damaged."""
    local = cache_path(uri, cache_dir)
    if once_per_host(local, lock, lambda: _download(uri, local, cache_dir)):
        prune_quietly(cache_dir)    # the cache grew (recent images are kept: this one is)
    return local


def copy_down(uri: str, out) -> None:
    """The remote object at uri written into the open file out, CHUNK_BYTES
    at a time (nothing checked: _download checks what it fetched)."""
    filesystem, path = _filesystem(uri)
    with filesystem.open_input_stream(path) as src:
        for chunk in iter(lambda: src.read(CHUNK_BYTES), b""):
            out.write(chunk)


def _download(uri: str, local: str, cache_dir: str) -> None:
    """The remote image at uri into a temporary file in cache_dir, checked
    in full, then renamed to local."""
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".fetch-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            copy_down(uri, out)
        Sublist.open(tmp, verify=True)      # a damaged object is never mapped
        os.chmod(tmp, 0o644)
        os.replace(tmp, local)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def open_location(location: str, cache_dir: str, source=None):
    """The Sublist a worker maps for an image location: a path where it is
    (written by a build task or checked by the driver's probe: the header
    and root checked, every walk inside the mapping); a remote image,
    this host's copy (fetch: checked in full as it arrived); a spark:
    image, this host's own copy (its build, or an earlier fetch), or else,
    with a source (image_inbox.FromDriver: the driver's image server; its
    fetch is called, so that this module needs none of the transport's),
    the copy fetched from the driver once per host (checksummed as it
    arrives, renamed into place whole), and without one (a Spark Connect
    session's artifact) the file Spark fetched into the executor's own
    directory of the application -- the bytes the client checked before
    it added them, which Spark's fetch moves into place only once they
    have all arrived."""
    if is_remote(location):
        local = fetch(location, cache_dir, locked)
    elif is_spark(location):
        local = cache_path(location, cache_dir)
        if not os.path.exists(local):
            if source is not None:
                local = source.fetch(location, cache_dir)
            else:
                local = spark_file(location)
    else:
        local = location
    sl = map_checked(local)
    hold(local)     # used now, and in use while this process lives: never evicted under it
    return sl


def map_checked(local: str) -> Sublist:
    """The image at local, for a worker: a regular file (no link followed,
    no FIFO waited on), opened with its header and root checked where no
    other user can have written it since it was checked in full (the
    driver's probe, this host's own build or fetch), and checked in full
    on the very descriptor that is mapped where another user could have
    (exposed: a shared image_dir), so that no bytes but checked ones are
    ever mapped, whatever was put at the name meanwhile."""
    fd = open_regular(local)
    if fd is None:
        # missing, a link, not a regular file: Sublist.open names which, or
        # checks in full whatever it finds there
        return Sublist.open(local, verify=True)
    try:
        if not exposed(local, os.fstat(fd)):
            return Sublist.open(local, verify=False)
        via = f"/proc/self/fd/{fd}"
        if not os.path.exists(via):     # (no /proc: the name, checked in full)
            return Sublist.open(local, verify=True)
        try:
            return Sublist.open(via, verify=True)
        except ValueError as e:
            raise type(e)(str(e).replace(via, local)) from None
    finally:
        os.close(fd)


def exposed(local: str, st: os.stat_result) -> bool:
    """Could another user have written the image at local (st: its fstat)?
    Yes when the file or its directory is not this user's, or group or
    other may write either."""
    me = os.getuid()
    d = os.lstat(os.path.dirname(os.path.abspath(local)))
    return (st.st_uid != me or st.st_mode & 0o022 != 0
            or d.st_uid != me or d.st_mode & 0o022 != 0)


def spark_file(location: str) -> str:
    """A spark: image's local file on this executor (SparkFiles: fetched
    once per host by Spark)."""
    from pyspark import SparkFiles
    return SparkFiles.get(location[len(SPARK):])
