"""How a spark: image gets from the executor that built it to the driver,
and from the driver to the hosts that lack it.

Where the hosts share nothing (image_store: spark: locations), the driver
serves each image to the hosts that lack it (ImageServer, below; a host
fetches an image once, when a task of its first needs it); first the
driver needs the file.  The build task (or the probe task that found it)
streams it over TCP straight into the driver's cache:

    driver                                  task (an executor)
    Inbox(host): a listener on the          send(ticket, location, path):
    driver's own address (Spark's           connect, the ticket's secret,
    spark.driver.host, which every          the location, the size, the
    executor reaches already), a            file (sendfile: no copy in
    secret of this call                     Python), then wait for "ok"
    each connection: written to a
    temporary file as it arrives,
    its checksum summed as it
    arrives, its header checked,
    renamed into the cache; "ok"

So the driver never holds an image in memory (a result row would: the
whole image in its JVM and in Python, and under spark.driver.maxResultSize),
nor maps it whole (a full check would: its pages counted in the driver's
memory, an image at a time), and the task's result reaches the driver only
once its image is in place.  The checksum and the header are the checks
of open(verify="checksum"): damage on the way is refused.  The structure
is not checked again here: the image is a build task's of this
application, written by the same writer as a host's own build, which that
host's workers map with the same quick check (image_store.map_checked),
and only a task of this call holds the secret.
The secret (32 random bytes, compared in constant time) keeps any other
client of the port from placing a file; a location is taken only as
spark:NAME.img with a plain file name, so none can steer where it goes.

A Spark Connect client has no SparkContext, and is often out of the
executors' reach: there the tasks return each image as rows of their own
result instead (as_rows: numbered pieces of ROW_BYTES), and the client
reads the job's result as it comes (RowInbox.rows_of: toLocalIterator, a
batch of rows at a time), each image through the same receive -- written
as it arrives, its checksum summed on the way, its header checked, renamed
into the cache -- and adds it to the session (images.add_file:
spark.addArtifacts(path, file=True)), where its tasks find it with
SparkFiles as they find an added file.  The pieces pass through the
server's driver as the job's results: a job's images together count
against its spark.driver.maxResultSize (past it, an error names the
setting and image_dir=); only a task of the client's own job puts rows
in its result.
"""
import hmac
import itertools
import os
import socket
import struct
import tempfile
import threading
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import pyarrow as pa

from topicmatch._columns import batch_of
from topicmatch._core import TopicmatchRuntimeError, TopicmatchValueError, _ImageChecksum, _os_error
from topicmatch import Sublist
from topicmatch.spark.image_cache import open_regular, prune_quietly
from topicmatch.spark.image_store import SPARK, cache_path, is_spark, locked, once_per_host
from topicmatch.spark.ship import LOAD_LOG_ENV

#: A ticket: (host, port, secret), pickled into the tasks' closures.
Ticket = Tuple[str, int, bytes]

_SECRET = 32
_HEADER = struct.Struct("<HQ")          # location length, file size
_OK, _FAILED = b"\x01", b"\x00"
_TIMEOUT_S = 600


def _plain_name(location: str) -> bool:
    name = location[len(SPARK):]
    return (is_spark(location) and name.endswith(".img") and os.path.basename(name) == name
            and not name.startswith("."))


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        got = conn.recv(min(n - len(data), 1 << 20))
        if not got:
            raise _os_error(f"the sender closed after {len(data)} of {n} bytes", kind=ConnectionError)
        data += got
    return bytes(data)


class _Listener:
    """A listener on the driver's own address with a secret of its own:
    each connection that starts with the secret (compared in constant time)
    is handed to self._serve(conn) on a thread of its own; any other is
    closed unanswered.  .ticket is what the tasks need to connect."""

    _thread_name = "topicmatch-image-listener"

    def __init__(self, host: str, cache_dir: str):
        self._cache_dir = cache_dir
        self._secret = os.urandom(_SECRET)
        # (accept blocks: no timeout to poll, so an ImageServer, which lives
        # as long as the driver, costs nothing while no host fetches)
        self._server = socket.create_server((host, 0))
        self.ticket: Ticket = (host, self._server.getsockname()[1], self._secret)
        self._closed = threading.Event()
        self._accepting = threading.Thread(target=self._accept, name=self._thread_name,
                                           daemon=True)
        self._accepting.start()

    def close(self) -> None:
        """Stop accepting, and return once the accept thread has ended (the
        connections being served finish on their own threads)."""
        if self._closed.is_set():
            return
        self._closed.set()
        # The accept blocks: a connection of our own wakes it at once, and
        # should that fail, shutting the listening socket down does (Linux:
        # accept() then fails with EINVAL).
        try:
            socket.create_connection(self.ticket[:2], timeout=1).close()
        except OSError:
            pass
        self._accepting.join(timeout=2)
        if self._accepting.is_alive():
            try:
                self._server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._accepting.join(timeout=10)
        self._server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                if self._closed.is_set():
                    break
                # (out of descriptors, say: tried again, not in a tight loop)
                self._closed.wait(0.1)
                continue
            if self._closed.is_set():
                conn.close()
                break
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_TIMEOUT_S)
            try:
                if not hmac.compare_digest(_read_exactly(conn, _SECRET), self._secret):
                    return          # not one of our tasks: nothing done, no answer
            except (OSError, ValueError):
                return
            self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class Inbox(_Listener):
    """The driver's listener for one call's spark: images (a context
    manager: closed on exit).  .ticket goes to the tasks; .received(location)
    is the driver's checked copy, or None."""

    _thread_name = "topicmatch-image-inbox"

    def __init__(self, host: str, cache_dir: str,
                 on_received: Optional[Callable[[str, str], None]] = None):
        """on_received(location, local): called with each image as soon as
        it is in place (images.inbox_for: offered to the driver's image
        server then, not when the job ends, so that the hosts that lack it
        can fetch it while the other builds run: prefetch)."""
        self._got: Dict[str, str] = {}
        self._errors: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._on_received = on_received
        super().__init__(host, cache_dir)

    def __enter__(self) -> "Inbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rows_of(self, frame) -> list:
        """The result rows of a job whose tasks send images here."""
        return frame.collect()

    def received(self, location: str) -> Optional[str]:
        with self._lock:
            if location in self._errors:
                raise TopicmatchValueError(f"topicmatch: the image {location} sent to the driver was refused: "
                                 f"{self._errors[location]}")
            return self._got.get(location)

    def _serve(self, conn: socket.socket) -> None:
        location = None
        try:
            n, size = _HEADER.unpack(_read_exactly(conn, _HEADER.size))
            location = _read_exactly(conn, n).decode("utf-8")
            self._write(conn, location, size)
            conn.sendall(_OK)
        except (OSError, ValueError, UnicodeDecodeError) as e:
            if location is not None:
                with self._lock:
                    self._errors[location] = str(e)
            try:
                conn.sendall(_FAILED)
            except OSError:
                pass

    def _write(self, conn: socket.socket, location: str, size: int) -> None:
        """The file, as it arrives (receive), into the cache."""
        local = receive(_socket_pieces(conn, size), location, self._cache_dir)
        with self._lock:
            self._got[location] = local
            self._errors.pop(location, None)
        if self._on_received is not None:
            self._on_received(location, local)


#: The most bytes of an image read from a socket at a time, into one buffer
#: the whole image reuses.  Fewer, larger reads cost the receiving end less:
#: a 226 MB image over loopback (bench/image_transfer.py) took 0.92 CPU s/GB
#: in 1 MiB reads, 0.60 in 4 MiB ones (8 MiB: no less, and more for the
#: sender's end); a socket's queue grows past that (tcp_rmem's autotuning,
#: to 6 MiB by default), so a read finds that much waiting.
_PIECE = 4 << 20


def _socket_pieces(conn: socket.socket, size: int) -> Iterator[memoryview]:
    """The next `size` bytes from conn, as they arrive, as views of one
    buffer: each view is overwritten by the next, so the caller consumes
    it before asking for the next (receive does).  A fresh bytes per read
    cost an allocation of fresh pages each time (thousands of page faults
    an image) and, when the read fell short, a copy to shrink it."""
    buf = memoryview(bytearray(min(size, _PIECE)))
    left = size
    while left:
        got = conn.recv_into(buf, min(left, len(buf)))
        if not got:
            raise _os_error(f"the sender closed with {left} of {size} bytes to come",
                            kind=ConnectionError)
        left -= got
        yield buf[:got]


def receive(pieces: Iterable[Union[bytes, memoryview]], location: str, cache_dir: str) -> str:
    """The image `location` (spark:NAME.img, a plain name) from its bytes in
    order (`pieces`: each consumed before the next is asked for, so they
    may be views of one reused buffer), as they arrive, into a temporary
    file in cache_dir, its checksum summed on the way; its header checked;
    renamed over the cache's copy (a retried task's second copy replaces
    the first whole).  -> the cache's copy; ValueError (nothing kept) when
    the name or the bytes are refused.  The one way an image is taken in,
    from a socket (Inbox) or from a job's rows (RowInbox)."""
    if not _plain_name(location):
        raise TopicmatchValueError(f"not a spark: image name: {location!r}")
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".inbox-", suffix=".part")
    try:
        checksum = _ImageChecksum()
        try:
            for got in pieces:
                checksum.update(got)        # (which refuses what is not plain bytes)
                _write_all(fd, got)
        finally:
            os.close(fd)
        checksum.check(location)
        Sublist.open(tmp, verify=False)
        local = cache_path(location, cache_dir)
        os.replace(tmp, local)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    prune_quietly(cache_dir)      # the driver's copies grew (recent ones, and added ones, are kept)
    return local


def _write_all(fd: int, piece) -> None:
    """All of piece to fd, straight from its buffer, written on after a
    short write (a signal, a nearly full disk): the pieces are large, so a
    file object's buffer would save no system call."""
    view = memoryview(piece)
    while view:
        view = view[os.write(fd, view):]


def send(ticket: Ticket, location: str, path: str) -> None:
    """On an executor: stream the image at path to the driver's inbox, and
    return once the driver has checked it and put it in place (RuntimeError
    when it refused it).  With a Connect client's ticket (ROWS) it sends
    nothing: the task returns the image itself (as_rows)."""
    if ticket == ROWS:
        return
    host, port, secret = ticket
    name = location.encode("utf-8")
    why = "it answered no"
    with open(path, "rb") as f, socket.create_connection((host, port), timeout=_TIMEOUT_S) as conn:
        size = os.fstat(f.fileno()).st_size
        try:
            conn.sendall(secret + _HEADER.pack(len(name), size) + name)
            conn.sendfile(f)
            answer = conn.recv(1)
        except OSError as e:    # the driver closed on us: refused before the end
            answer, why = b"", str(e)
    if answer != _OK:
        raise TopicmatchRuntimeError(f"topicmatch: the driver at {host}:{port} did not take the image "
                           f"{location} ({path}): {why}")


# --------------------------------------------------------------------------
# the driver's image server: a host fetches only the images it lacks
# --------------------------------------------------------------------------

_NAME = struct.Struct("<H")             # a request: the location's length
_SIZE = struct.Struct("<Q")             # an answer: the file's size


class ImageServer(_Listener):
    """The driver's server of the spark: images it holds, for the life of
    the driver process (one per driver address: images.serving).  A worker
    that needs an image its host lacks fetches it (fetch_from_driver: the
    server's secret, then the location; the answer is the file, sendfile'd
    from the driver's cache), so a host fetches only what it lacks, when a
    task first needs it -- never the images it built itself, and an
    executor that joins later (dynamic allocation) fetches what it needs
    the same way.  Only what offer() was given is served."""

    _thread_name = "topicmatch-image-server"

    def __init__(self, host: str):
        self._offered: Dict[str, str] = {}
        self._lock = threading.Lock()
        super().__init__(host, "")

    def offer(self, location: str, local: str) -> None:
        """Serve the driver's checked copy `local` of the image `location`."""
        if not _plain_name(location):
            raise TopicmatchValueError(f"not a spark: image name: {location!r}")
        with self._lock:
            self._offered[location] = local

    def offered(self, location: str) -> Optional[str]:
        with self._lock:
            return self._offered.get(location)

    def _serve(self, conn: socket.socket) -> None:
        try:
            (n,) = _NAME.unpack(_read_exactly(conn, _NAME.size))
            location = _read_exactly(conn, n).decode("utf-8")
        except (OSError, ValueError, UnicodeDecodeError):
            return
        local = self.offered(location)
        fd = open_regular(local) if local is not None else None
        try:
            if fd is None:
                conn.sendall(_FAILED)
                return
            with os.fdopen(fd, "rb") as f:
                fd = None
                conn.sendall(_OK + _SIZE.pack(os.fstat(f.fileno()).st_size))
                conn.sendfile(f)
        except OSError:
            pass            # the task went away: it raises on its side
        finally:
            if fd is not None:
                os.close(fd)


def fetch_from_driver(source: Ticket, location: str, cache_dir: str) -> str:
    """On an executor: this host's copy of the spark: image `location`,
    fetched from the driver's ImageServer (source: its ticket) when the
    host has none -- once per host, under the image's lock (a second task
    waiting on it finds the copy), written as it arrives through receive
    (its checksum summed on the way, its header checked, renamed into
    place: a partial or damaged copy is never kept).  -> the local path."""
    local = cache_path(location, cache_dir)
    size = []
    if once_per_host(local, locked, lambda: size.append(_fetch(source, location, cache_dir))):
        log = os.environ.get(LOAD_LOG_ENV)
        if log:     # "NAME PID fetch BYTES CACHE_DIR": the tests count each host's fetches
            with open(log, "a") as f:
                f.write(f"{location[len(SPARK):-len('.img')]} {os.getpid()} fetch {size[0]} {cache_dir}\n")
    return local


class FromDriver:
    """Where a worker fetches the spark: images its host lacks: the
    driver's ImageServer, by its ticket.  It travels in the match's closure
    and image_store.open_location calls its fetch, so the store needs
    nothing of this module's (which builds on it)."""
    __slots__ = ("ticket",)

    def __init__(self, ticket: Ticket):
        self.ticket = ticket

    def fetch(self, location: str, cache_dir: str) -> str:
        return fetch_from_driver(self.ticket, location, cache_dir)


#: How long a prefetch waits for the images still being built elsewhere
#: (the driver serves each as it arrives), in seconds.
PREFETCH_WAIT_S = 120.0

_PREFETCHING = set()
_PREFETCHING_LOCK = threading.Lock()


def prefetch(source: "FromDriver", locations: List[str], cache_dir: str) -> None:
    """On an executor, once a build task has built and sent its images: a
    thread of this Python worker fetches, as the driver comes to serve them,
    the spark: images among `locations` that this host lacks -- those the
    other hosts' build tasks are building -- so that they are here when the
    match's first task on this host needs them, fetched while the cores
    wait on the driver between the jobs rather than in that task (2 or 3 of
    5 images, 131-174 MB a host at 3M subscriptions: some 0.7 s of each
    host's first match task, measured).  Each goes through fetch_from_driver
    (once per host, under the image's lock, checked as it arrives), so a
    match task that wants it meanwhile waits for this copy, and one that
    this host builds after all is never fetched.  One thread per process
    and set of images; it ends when the host has them all, when the driver
    stops answering, or after PREFETCH_WAIT_S."""
    spark_locations = tuple(dict.fromkeys(loc for loc in locations
                                          if loc is not None and is_spark(loc)))
    key = (source.ticket, spark_locations, cache_dir)
    with _PREFETCHING_LOCK:
        if key in _PREFETCHING or not spark_locations:
            return
        _PREFETCHING.add(key)
    threading.Thread(target=_prefetch, args=(source, spark_locations, cache_dir),
                     name="topicmatch-image-prefetch", daemon=True).start()


def _prefetch(source: "FromDriver", locations, cache_dir: str) -> None:
    left = list(locations)
    deadline = time.monotonic() + PREFETCH_WAIT_S
    pause = 0.05
    while left and time.monotonic() < deadline:
        waiting = []
        for location in left:
            if os.path.exists(cache_path(location, cache_dir)):
                continue
            try:
                source.fetch(location, cache_dir)
            except TopicmatchRuntimeError:
                waiting.append(location)    # not served yet: still being built elsewhere
            except (OSError, ValueError):
                return      # the driver gone, or a copy refused: the match fetches (and says why)
        left = waiting
        if left:
            time.sleep(pause)
            pause = min(2 * pause, 0.5)


def _fetch(source: Ticket, location: str, cache_dir: str) -> int:
    """One fetch of the spark: image `location` from the driver's
    ImageServer into cache_dir, through receive.  -> its size in bytes."""
    host, port, secret = source
    name = location.encode("utf-8")
    with socket.create_connection((host, port), timeout=_TIMEOUT_S) as conn:
        conn.sendall(secret + _NAME.pack(len(name)) + name)
        try:
            answer = _read_exactly(conn, 1)
        except OSError:
            answer = b""
        if answer != _OK:
            raise TopicmatchRuntimeError(
                f"topicmatch: the driver at {host}:{port} does not serve the image {location} "
                "(was the fan-out's plan made by another driver process?)")
        (size,) = _SIZE.unpack(_read_exactly(conn, _SIZE.size))
        receive(_socket_pieces(conn, size), location, cache_dir)
    return size


# --------------------------------------------------------------------------
# Spark Connect: the image as rows of the task's result
# --------------------------------------------------------------------------

#: The ticket of a Spark Connect client's tasks: a client is often out of
#: the executors' reach, so they return each spark: image as rows.
ROWS = "rows"

#: The status of a row that carries a piece of an image (as_rows).
CHUNK = "chunk"

#: The bytes of an image one row carries: a few Arrow batches of the
#: server's (spark.connect.grpc.arrow.maxBatchSize, 4 MiB) each.
ROW_BYTES = 2 << 20

_HAS = ("ok", "built", "there")


def as_rows(ticket, status: str, location: Optional[str], path: str,
            schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """On an executor, for a Connect client's ticket (ROWS): the image at
    path, when the task has it (status "ok", "built" or "there") at a
    spark: location, as rows of the task's result schema, to go before
    the row that names it: status "chunk", path the location, part the
    piece's number from 0, data its bytes (ROW_BYTES, read one at a time);
    the other columns null.  Nothing for another ticket."""
    if ticket != ROWS or status not in _HAS or location is None or not is_spark(location):
        return
    with open(path, "rb") as f:
        for part, data in enumerate(iter(lambda: f.read(ROW_BYTES), b"")):
            yield batch_of({"status": [CHUNK], "path": [location], "part": [part], "data": [data]}, schema)


def _in_order(rows, location: str) -> Iterator[bytes]:
    for i, r in enumerate(rows):
        if r["part"] != i:
            raise TopicmatchValueError(f"piece {r['part']} of {location} came where piece {i} "
                                       "was due")
        yield r["data"]


class RowInbox:
    """A Spark Connect client's inbox: .ticket (ROWS) goes to the tasks,
    which return each spark: image as rows of their result (as_rows);
    rows_of(frame) reads the job's result as it comes (toLocalIterator: a
    batch of rows at a time, so no image is held whole in the client),
    each image's pieces into the cache through receive, and returns the
    other rows; .received(location) is the checked copy, or None."""

    ticket = ROWS

    def __init__(self, cache_dir: str):
        self._cache_dir = cache_dir
        self._got: Dict[str, str] = {}

    def __enter__(self) -> "RowInbox":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def received(self, location: str) -> Optional[str]:
        return self._got.get(location)

    def rows_of(self, frame) -> list:
        rows = []
        runs = itertools.groupby(frame.toLocalIterator(),
                                 key=lambda r: (r["status"] == CHUNK, r["path"]))
        try:
            for (chunk, location), run in runs:
                if not chunk:
                    rows.extend(run)
                    continue
                try:
                    self._got[location] = receive(_in_order(run, location), location,
                                                  self._cache_dir)
                except (OSError, ValueError) as e:
                    raise TopicmatchValueError(f"topicmatch: the image {location} returned to "
                                               f"the client was refused: {e}") from None
        except Exception as e:  # noqa: BLE001 - only the server's result limit is translated
            why = next((ln.strip() for ln in str(e).splitlines() if "maxResultSize" in ln), None)
            if why is None:
                raise
            raise TopicmatchRuntimeError(
                f"topicmatch: the images returned to this Spark Connect client pass through the "
                f"server's driver as the job's results, and exceed its limit ({why[:300]}): "
                "set spark.driver.maxResultSize higher on the server (0: no limit), or pass "
                "image_dir= storage the executors share, where nothing passes through the "
                "client") from None
        return rows
