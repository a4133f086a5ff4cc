"""A host's image directory as a bounded cache: the images its build tasks
saved and the copies it fetched (image_store) are evicted, least recently
used first, once they take more than TOPICMATCH_IMAGE_CACHE_BYTES, never
while a process has one open.

How "open" and "recently used" are known, without a daemon:

- A worker that maps an image holds a shared flock on it (hold(): on a
  read-only descriptor kept for the life of the process, as the worker
  keeps its index) and sets its modification time to now.  The time is the
  image's last use; the lock says a process has it mapped.
- prune() removes an image only when it can take the exclusive flock on it
  (no holder) and the image's build lock (no build or fetch of it under
  way), and only when it was last used MIN_IDLE_SECONDS ago or more: that
  covers the moment between a build task saving an image and the first
  worker opening it.  Removing it under those locks, the inode checked to
  be the one locked, means a later task finds it missing and builds or
  fetches it again (images.py), never a half-removed file.

Only files this project writes are touched: NAME.img, NAME.img.lock, and
the fetch's and upload's temporary files; anything else in the directory is
left alone.  A directory the user names in image_dir is theirs: only the
host's own one (image_store.image_home: the default directory, or
TOPICMATCH_IMAGE_DIR) is pruned on its own.  `topicmatch images` lists and
prunes it from the command line."""
import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

from topicmatch._core import TopicmatchValueError

_log = logging.getLogger("topicmatch.spark")

#: The bound on a host's image directory, in bytes (an int; a suffix K, M,
#: G or T is taken): images beyond it are evicted least recently used first.
CACHE_BYTES_ENV = "TOPICMATCH_IMAGE_CACHE_BYTES"

#: The bound when CACHE_BYTES_ENV is not set.
DEFAULT_CACHE_BYTES = 8 << 30

#: An image used less than this long ago is never evicted (see above).
MIN_IDLE_SECONDS = 600.0

#: Temporary files older than this are leftovers of a process that died.
STALE_TEMP_SECONDS = 3600.0

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text, what: str = CACHE_BYTES_ENV) -> int:
    """'8G', '500M', '2GiB', '1048576' -> bytes; ValueError naming `what`
    otherwise."""
    t = str(text).strip().upper()
    for unit_name in ("IB", "B"):
        if t.endswith(unit_name) and len(t) > len(unit_name):
            t = t[:-len(unit_name)]
            break
    unit = t[-1] if t and t[-1] in "KMGT" else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise TopicmatchValueError(f"{what}={text!r}: give a size in bytes >= 0, such as 8G, 500M or 1048576")
    return int(value * _SUFFIXES[unit])


def cache_bytes() -> int:
    """The bound this process applies: CACHE_BYTES_ENV, else the default."""
    text = os.environ.get(CACHE_BYTES_ENV)
    return DEFAULT_CACHE_BYTES if text is None or not text.strip() else parse_bytes(text)


# --------------------------------------------------------------------------
# a worker's holds
# --------------------------------------------------------------------------

# path -> (descriptor, inode): the images this process has mapped.  The
# descriptors stay open as long as the process does: a worker keeps its
# opened indexes for its life (ship.WorkerCache), and one more descriptor per
# image is what marks it in use.
_HELD: Dict[str, tuple] = {}
_HELD_LOCK = threading.Lock()


def open_regular(path: str) -> Optional[int]:
    """A read-only descriptor on path (never through a symlink, never
    blocking on a FIFO), or None when it cannot be opened or is not a
    regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def hold(path: str) -> None:
    """Mark the image at path used now, and in use by this process for its
    life (a shared flock).  Best effort: an image another user owns (a
    shared image_dir) cannot have its time set, and is not pruned by this
    user anyway."""
    fd = open_regular(path)
    if fd is None:
        return
    try:
        st = os.fstat(fd)
        with _HELD_LOCK:
            old = _HELD.get(path)
            if old is not None and old[1] == st.st_ino:
                os.close(fd)
                fd = old[0]
            else:
                fcntl.flock(fd, fcntl.LOCK_SH)
                _HELD[path] = (fd, st.st_ino)
                if old is not None:
                    os.close(old[0])        # an image replaced under its name: the old one is let go
        try:
            os.utime(fd)
        except OSError:
            pass
    except OSError:
        os.close(fd)


def touch(path: str) -> None:
    """Mark the image at path used now (best effort): the driver's probe
    found it good, and the workers are about to open it -- the recent-use
    window keeps it until they do and hold it."""
    try:
        os.utime(path)
    except OSError:
        pass


# --------------------------------------------------------------------------
# listing and pruning a directory
# --------------------------------------------------------------------------

class CachedImage(NamedTuple):
    """One image in a host's directory."""
    name: str           #: the file name (NAME.img)
    path: str
    nbytes: int
    last_used: float    #: seconds since the epoch (the file's modification time)
    in_use: bool        #: a process holds it (hold()) or is building or fetching it


def _try_lock(path: str, how: int) -> Optional[int]:
    """A descriptor on path holding flock `how` | LOCK_NB, or None when
    another holds a conflicting lock (or path is not a regular file)."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return fd
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
    os.close(fd)
    return None


@contextlib.contextmanager
def _exclusive(path: str):
    """Both exclusive flocks of the image at path, without waiting: its
    build lock (when its lock file exists: no build or fetch under way) and
    the image's own (no process holds it).  Yields the image's descriptor,
    or None when either is taken (or the image is gone)."""
    lock = path + ".lock"
    lock_fd = _try_lock(lock, fcntl.LOCK_EX) if os.path.exists(lock) else -1
    fd = _try_lock(path, fcntl.LOCK_EX) if lock_fd is not None else None
    try:
        yield fd
    finally:
        for d in (fd, lock_fd):
            if d is not None and d >= 0:
                os.close(d)


def _busy(path: str) -> bool:
    """Is the image at path open (held) or being built or fetched?"""
    with _exclusive(path) as fd:
        return fd is None


def _images(directory: str) -> List[Tuple[str, os.stat_result]]:
    out = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        if name.endswith(".img") and not name.startswith("."):
            try:
                st = os.lstat(os.path.join(directory, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((name, st))
    return out


def list_images(directory: str) -> List[CachedImage]:
    """The images in directory, least recently used first."""
    got = [CachedImage(name, os.path.join(directory, name), st.st_size, st.st_mtime,
                       _busy(os.path.join(directory, name)))
           for name, st in _images(directory)]
    return sorted(got, key=lambda c: (c.last_used, c.name))


class Pruned(NamedTuple):
    """What prune() did."""
    removed: List[str]      #: the images' file names
    freed: int              #: bytes, the temporary files' included
    kept_bytes: int         #: what the directory's images take now
    busy: List[str]         #: images over the bound kept because in use or recent


def _remove_locked(path: str, st: os.stat_result) -> bool:
    """Remove the image at path (whose lstat was st) if no process holds it
    and none builds or fetches it: both flocks taken (_exclusive), the inode
    checked to be the one locked, then the image and its lock file unlinked."""
    with _exclusive(path) as fd:
        if fd is None or os.fstat(fd).st_ino != st.st_ino:
            return False        # busy, or replaced since it was listed: looked at again next time
        os.unlink(path)
        try:
            os.unlink(path + ".lock")
        except FileNotFoundError:
            pass
        return True


def _is_temp(name: str) -> bool:
    """A temporary file of this project's: a fetch's or the driver inbox's
    (.fetch-*.part, .inbox-*.part), save()'s (.NAME.img.*.tmp), an upload's
    to a path (*.saving)."""
    return ((name.startswith((".fetch-", ".inbox-")) and name.endswith(".part"))
            or (name.startswith(".") and ".img." in name and name.endswith(".tmp"))
            or name.endswith(".saving"))


def _remove_leftovers(directory: str, now: float) -> int:
    """Temporary files of fetches and uploads that a dead process left
    (older than STALE_TEMP_SECONDS), and lock files without their image:
    -> bytes freed."""
    freed = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        temp = _is_temp(name)
        orphan_lock = name.endswith(".img.lock") and not os.path.lexists(path[:-len(".lock")])
        if not (temp or orphan_lock):
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STALE_TEMP_SECONDS:
            continue
        if orphan_lock:
            fd = _try_lock(path, fcntl.LOCK_EX)
            if fd is None:
                continue
            os.close(fd)
        try:
            os.unlink(path)
            freed += st.st_size
        except FileNotFoundError:
            pass
    return freed


def prune(directory: str, max_bytes: Optional[int] = None, *, min_idle: float = MIN_IDLE_SECONDS,
          now: Optional[float] = None) -> Pruned:
    """Evict the least recently used images of directory until its images
    take at most max_bytes (None: cache_bytes()), skipping those in use or
    used less than min_idle seconds ago; remove leftover temporary and lock
    files too."""
    if max_bytes is None:
        max_bytes = cache_bytes()
    if max_bytes < 0:
        raise TopicmatchValueError(f"max_bytes={max_bytes}: give a size in bytes >= 0")
    now = time.time() if now is None else now
    images = sorted(_images(directory), key=lambda e: (e[1].st_mtime, e[0]))
    total = sum(st.st_size for _, st in images)
    removed, busy, freed = [], [], 0
    for name, st in images:
        if total <= max_bytes:
            break
        path = os.path.join(directory, name)
        if now - st.st_mtime >= min_idle and _remove_locked(path, st):
            removed.append(name)
            total -= st.st_size
            freed += st.st_size
        else:
            busy.append(name)
    freed += _remove_leftovers(directory, now)
    if removed:
        _log.info("topicmatch: evicted %d image(s) (%d bytes) from %s, over its bound of %d bytes",
                  len(removed), freed, directory, max_bytes)
    return Pruned(removed, freed, total, busy)


def prune_quietly(directory: str) -> None:
    """prune(directory) after this host's cache grew (a build or a fetch):
    an error is logged, never raised into the task that grew it."""
    try:
        prune(directory)
    except (OSError, ValueError) as e:
        _log.warning("topicmatch: could not prune the image directory %s: %s", directory, e)
