"""Image files, in plain Python: the steps around the C writer and reader
that need no C.  Writing (Sublist.save, build_image): the temporary file
beside the path, its mode, its rename into place.  Reading (Sublist.open):
the refusal of what is not a regular file, the mapping and its guard's
verdicts.  The words of data that is not an image or is a damaged one; and
the checksum of an image summed as its bytes arrive.  The Cython layer
(_serial.pxi, _build.pxi) calls C for the bytes and hands the rest here;
the errors are the words it has always raised."""
import errno
import mmap
import os
import secrets
import stat

from topicmatch._errors import (CorruptImageError, NotAnImageError, TopicmatchBufferError, TopicmatchTypeError,
                                TopicmatchValueError, _image_changed, _os_error)

#: The first bytes of every image and serialized index (docs/FORMAT.md).
MAGIC = b"\x89FSB\r\n\x1a\n"


def save_mode(mode):
    """save()'s mode= checked: None, or permission bits 0o000-0o777."""
    if mode is None:
        return None
    if type(mode) is bool or not isinstance(mode, int):
        raise TopicmatchTypeError(f"mode must be int or None, not {type(mode).__name__}")
    if not 0 <= mode <= 0o777:
        raise TopicmatchValueError(f"mode must be permission bits 0o000-0o777, not {mode:#o}")
    return int(mode)


def _temp(folder, base, path):
    """A new temporary file beside path, made as open() makes a file: mode
    0o666 less the umask, which the kernel applies, so the umask is never
    read (reading it means setting it, process-wide).  mkstemp would give
    0o600, and a worker of another user could not open the saved image.
    O_EXCL and O_NOFOLLOW: the name is new, never someone's link.  An error
    names the user's path; the temporary's name means nothing to them."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise _os_error(e.errno, f"cannot save the image: {e.strerror}", path) from None
    raise _os_error(errno.EEXIST, "cannot save the image: no free temporary name beside it", path)


def _rename_into_place(tmp, path, folder, durable):
    """The temporary file tmp, written whole, renamed over path (in folder),
    and with durable the rename itself on disk."""
    try:
        os.replace(tmp, path)
    except OSError as e:
        raise _os_error(e.errno, f"cannot save the image: {e.strerror}", path) from None
    if durable and hasattr(os, "O_DIRECTORY"):
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def save(path, mode, durable, write):
    """Write an image file atomically, the one way every image file is
    written (save(), build_image): write(tmp, path) fills a new temporary file in
    path's folder (the C writer, through its pages: the image is never
    whole in memory), on disk (fsync; not with durable=False), then it is
    renamed over path, and the rename itself on disk (the same).  The file
    gets the mode open() would give it (0o666 less the umask), or exactly
    `mode` when one is given.  No temporary file is left behind."""
    path = os.fspath(path)
    mode = save_mode(mode)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = _temp(folder, os.path.basename(path), path)
    try:
        if mode is not None:
            # Exactly as asked, the umask aside (as chmod does): a server
            # with umask 077 can still save an image its workers of another
            # user read (mode=0o644).
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)
            else:
                os.chmod(tmp, mode)
    except OSError as e:
        os.close(fd)
        os.unlink(tmp)
        raise _os_error(e.errno, f"cannot save the image with mode {mode:#o}: {e.strerror}", path) from None
    os.close(fd)
    try:
        write(tmp, path)
        _rename_into_place(tmp, path, folder, durable)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_whole(tmp, data, durable):
    """data (a buffer: an image the C writer made in memory, where files
    cannot be mapped) written into the file tmp, and on disk with durable."""
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())


def _open_regular(path):
    """A read-only file object for path, refused at once (ValueError naming
    it) unless it is a regular file: a FIFO, a device or a directory cannot
    be mapped, and opening a FIFO without O_NONBLOCK waits for a writer
    forever.  O_NONBLOCK changes nothing for a regular file's reads."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | \
        getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise NotAnImageError(f"{path!r}: {kind}, not a topicmatch index file (Sublist.open maps regular files only)")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_mapped(path, verify, cache_size, from_bytes, guard_of):
    """Sublist.open: the file at path mapped read-only and handed to
    from_bytes (the C reader: an image is matched in place), under the
    guard guard_of(mapping) makes (_core._MapGuard, csrc/base/fs_fault.h)
    from before the first read, so that a file cut shorter or rewritten
    under it makes the open fail, not the process."""
    path = os.fspath(path)
    with _open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise NotAnImageError(f"{path!r}: empty file, not a topicmatch image")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        guard = guard_of(mm)
        if guard.exhausted:
            # Every guard is taken (csrc/base/fs_fault.h): the file's bytes
            # are read into memory instead, where no change to the file
            # reaches them.
            mm.close()
            f.seek(0)
            return from_bytes(f.read(), cache_size, verify, path)
    try:
        try:
            obj = from_bytes(mm, cache_size, verify, path, True)
        except ValueError as e:
            if guard.changed():
                raise _image_changed(path, guard.revoked()) from e
            raise
        if guard.changed():
            raise _image_changed(path, guard.revoked())
        guard.hand_to(obj, path)
        return obj
    finally:
        # An image holds mm's buffer (the mapping lives on with the index,
        # and so does the guard); a version 1/2 file was rebuilt, so its
        # mapping can go now, after its guard.
        guard.release()
        try:
            mm.close()
        except BufferError:
            pass


def unchanging(data):
    """Can data's bytes never change while an index reads them?  Only
    bytes' (a memoryview's too, when it views bytes).  A read-only view
    says nothing of its owner: memoryview(bytearray).toreadonly(), or a
    read-only mmap of a file someone may rewrite, can change under it."""
    if isinstance(data, memoryview):
        data = data.obj
    return type(data) is bytes


def has_magic(head):
    """Does data whose first bytes (up to 8) are head start as an image or
    serialized index does?  A non-empty buffer shorter than the magic that
    is its prefix counts: a truncated image, not a foreign file."""
    return len(head) > 0 and head == MAGIC[:len(head)]


def not_an_image(source, head):
    """The NotAnImageError of data whose first bytes (up to 8), head, are
    not the magic."""
    what = f"{source!r}: " if source is not None else ""
    if not head:
        return NotAnImageError(f"{what}not a topicmatch image: it is empty")
    return NotAnImageError(f"{what}not a topicmatch image: bad magic: it starts with {head!r}, not "
                           f"{MAGIC!r}, the magic bytes every topicmatch image and serialized index "
                           f"starts with")


def corrupt(source, reason, pos):
    """The CorruptImageError of a refused image: its source (a path, or None
    for bytes), the reason and where (docs/FORMAT.md).  A checksum is stored
    right after the bytes it sums ([0, 48 + P)): its mismatch names that
    range, not only the byte where it is stored."""
    what = f"{source!r}: " if source is not None else ""
    if reason == "checksum mismatch":
        return CorruptImageError(f"{what}corrupt topicmatch index: checksum mismatch: the checksum of bytes "
                                 f"[0, {pos}) is not the one stored at byte {pos}")
    return CorruptImageError(f"{what}corrupt topicmatch index: {reason} at byte {pos}")


def verify_level(verify):
    """open() and from_bytes()'s verify=, checked: "checksum" (the checksum
    alone), or its truth (True: the whole image, False: neither; fs_verify
    in csrc/api/sublist.h)."""
    if isinstance(verify, str):
        if verify == "checksum":
            return "checksum"
        raise TopicmatchValueError(f"verify must be True, False or 'checksum', not {verify!r}")
    return bool(verify)


def contiguous(data):
    """from_bytes()'s data as an object whose bytes can be read as one run:
    itself, or a copy of a buffer that is not contiguous.  TypeError for
    what is not a buffer at all."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TopicmatchTypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    with view:
        return data if view.c_contiguous else view.tobytes()


def describe(source, data, n):
    """How messages name an index's image: the path it was opened from
    (source), else the buffer's type and size (n bytes)."""
    return repr(source) if source is not None else f"<{type(data).__name__} of {n} bytes>"


class ImageChecksum:
    """An image's checksum summed as its bytes arrive, without holding or
    mapping them (topicmatch.spark's driver receives images over a socket
    this way): update(piece) for each piece in order, then check(source):
    CorruptImageError, worded as open() words it, unless the checksum of
    every byte before the last eight is the value those eight hold
    (docs/FORMAT.md: it sums [0, 48 + P) and stands at 48 + P, the image's
    last eight bytes).  Open the file with verify=False then, whose header
    check ties P to the file's size: the two check what
    open(verify="checksum") checks, with none of the image's pages in
    memory at once."""

    def __init__(self):
        from topicmatch._core import _Checksum     # (_core imports this module)
        self._sum = _Checksum()
        self._tail = b""        # the last bytes seen (up to eight), not summed yet
        self._seen = 0

    def update(self, piece):
        view = memoryview(piece)
        # bytes, as the C sum's buffer of unsigned chars took them: not an
        # array of wider items read as its bytes, nor a view with gaps
        if view.ndim != 1 or view.itemsize != 1 or not view.c_contiguous:
            raise TopicmatchBufferError(f"a piece of an image must be contiguous bytes, not a {view.ndim}-dimensional "
                              f"{'' if view.c_contiguous else 'non-contiguous '}buffer of {view.format!r}")
        piece = view.cast("B")
        n = len(piece)
        self._seen += n
        if n >= 8:              # the tail and all but piece's last eight are summed
            self._sum.feed(self._tail)
            self._sum.feed(piece[:n - 8])
            self._tail = bytes(piece[n - 8:])
            return
        joined = self._tail + bytes(piece)
        out = max(len(joined) - 8, 0)
        self._sum.feed(joined[:out])
        self._tail = joined[out:]

    def check(self, source):
        if len(self._tail) == 8:
            if self._sum.end() == int.from_bytes(self._tail, "little"):
                return
            reason, pos = "checksum mismatch", self._seen - 8
        else:
            reason, pos = "image shorter than its header and root block", self._seen
        raise corrupt(source, reason, pos)
