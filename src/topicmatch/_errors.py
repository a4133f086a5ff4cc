"""The exception tree of topicmatch (docs/embedding.md, "Errors: one
hierarchy"), in plain Python: the classes, and the few errors whose words
are made the same way wherever they are raised.  topicmatch._core imports
every name here and is the classes' home (their __module__), as it always
was: pickle and the stubs (_core.pyi) find them there."""

#: Where the classes say they live: pickle looks them up there.
_HOME = "topicmatch._core"


class TopicmatchError(Exception):
    """Base of every error topicmatch raises on its own account.

    Each one is also the built-in exception a caller would catch for it:
    a bad value is a ValueError, a wrong type a TypeError, a file or socket
    error an OSError (docs/embedding.md, "Errors: one hierarchy", draws the
    tree).  Where no more specific class fits, the error is the general one
    named after its built-in: TopicmatchValueError, TopicmatchTypeError,
    TopicmatchOSError, TopicmatchOverflowError, TopicmatchKeyError,
    TopicmatchIndexError, TopicmatchRuntimeError, TopicmatchBufferError,
    TopicmatchImportError.
    So ``except ValueError`` keeps working, and ``except TopicmatchError``
    catches everything the package reports.  Not wrapped, and never a
    TopicmatchError: MemoryError (out of memory, in C or in Python) and
    KeyboardInterrupt (Ctrl-C during a long call), which stay what Python
    makes them, and errors of the caller's own objects (an exception
    raised by an iterator or a callable it passed) or of open() on the
    caller's path, which pass through as they are."""


class TopicmatchValueError(TopicmatchError, ValueError):
    """A value topicmatch refuses (an argument out of range, a malformed
    row, columns of different lengths), where no more specific class
    (InvalidSubjectError, ImageError, ClosedError) fits."""


class TopicmatchTypeError(TopicmatchError, TypeError):
    """An argument or a row of the wrong type ("sub_id must be int, not
    str")."""


class TopicmatchOSError(TopicmatchError, OSError):
    """An operating-system error topicmatch reports itself, naming the
    user's path (Sublist.save, topicmatch.spark's image directory).  Made
    as OSError(errno, ...) makes one, of the OSError subclass for its errno
    as well: saving into a missing folder raises an error that is both a
    TopicmatchOSError and a FileNotFoundError."""


class TopicmatchOverflowError(TopicmatchError, OverflowError):
    """An integer outside the range it must fit (a sub_id outside the
    signed 64-bit range)."""


class TopicmatchKeyError(TopicmatchError, KeyError):
    """A key that is not there: remove() of a subscription the index does
    not hold."""


class TopicmatchIndexError(TopicmatchError, IndexError):
    """An index out of range (a row of a BatchResult)."""


class TopicmatchRuntimeError(TopicmatchError, RuntimeError):
    """A failure of a run rather than of an argument (a list changed size
    during match_many, a Spark job that did not deliver)."""


class TopicmatchBufferError(TopicmatchError, BufferError):
    """A buffer asked for in a way it cannot be given (match_many's ids
    asked for writable)."""


class TopicmatchImportError(TopicmatchError, ImportError):
    """An optional dependency a feature needs is missing (PySpark for
    topicmatch.spark)."""


# TopicmatchOSError's kinds: one class per OSError subclass (named
# _Topicmatch<Builtin>; _core holds them, so that pickle finds them),
# picked by _os_error.
_OS_KINDS = {OSError: TopicmatchOSError}
for _kind in (BlockingIOError, ChildProcessError, ConnectionError, BrokenPipeError,
              ConnectionAbortedError, ConnectionRefusedError, ConnectionResetError,
              FileExistsError, FileNotFoundError, InterruptedError, IsADirectoryError,
              NotADirectoryError, PermissionError, ProcessLookupError, TimeoutError):
    _OS_KINDS[_kind] = type("_Topicmatch" + _kind.__name__, (TopicmatchOSError, _kind), {
        "__module__": _HOME, "__qualname__": "_Topicmatch" + _kind.__name__,
        "__doc__": f"A TopicmatchOSError that is a {_kind.__name__}."})
del _kind


def _os_error(*args, kind=None):
    """A TopicmatchOSError made as OSError(*args) is made: of the subclass
    its errno picks (ENOENT: FileNotFoundError...), or of `kind` (an OSError
    subclass) when given.  The message is OSError's own, unchanged."""
    if kind is None:
        kind = type(OSError(*args))
    return _OS_KINDS.get(kind, TopicmatchOSError)(*args)


class ImageChangedError(TopicmatchOSError):
    """The file an index was opened from (Sublist.open) was truncated or
    rewritten in place while it was mapped.  The call that found it raises,
    and so does every later call on that index: open the file again.
    Replace image files (write a new file, rename it over the old one, as
    save() does); never rewrite one in place.  Attribute: ``path``."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


class ImageError(TopicmatchValueError):
    """Bytes or a file given as an index image (Sublist.open, from_bytes)
    that cannot be read as one: NotAnImageError or CorruptImageError."""


class NotAnImageError(ImageError):
    """What was given is not a topicmatch image or serialized index at all:
    it does not start with the magic bytes b"\\x89FSB\\r\\n\\x1a\\n" (a CSV,
    an empty file, a directory...)."""


class CorruptImageError(ImageError):
    """A topicmatch image or serialized index (its magic bytes are right)
    whose content is damaged: truncated, a checksum mismatch, an offset
    leading outside it."""


class ClosedError(TopicmatchValueError):
    """A call on a Sublist after its close() (or the end of its ``with``
    block): the index's memory, and an opened image's mapping, are gone.
    A ValueError, as Python's own "I/O operation on closed file" is."""


class InvalidSubjectError(TopicmatchValueError):
    """A subject, filter or queue name is malformed.

    Attributes: ``subject`` (the input), ``reason`` (what is wrong),
    ``position`` (byte offset in its UTF-8 form, or None) and ``row`` (in a
    batch -- insert_many, remove_many -- the 0-based index of the bad item,
    also named in the message; None otherwise)."""

    def __init__(self, message, subject=None, reason=None, position=None, row=None):
        super().__init__(message)
        self.subject = subject
        self.reason = reason
        self.position = position
        self.row = row


def _image_changed(path, faulted):
    """The ImageChangedError of an index whose mapped file changed."""
    how = ("a read past its new end was turned into zeros" if faulted
           else "its bytes are no longer those opened")
    return ImageChangedError(
        f"topicmatch image {path!r} was truncated or rewritten in place after it was opened "
        f"({how}): this index cannot answer from it any more; open the file again.  Replace "
        f"image files (write a new file, then rename it over the old one, as Sublist.save() "
        f"does), never rewrite one in place", path)


def _closed(dialect, source):
    """The ClosedError of a call on an index after its close(); source: the
    image it let go of, as _imagefiles.describe names it (None: none)."""
    return ClosedError(f"this topicmatch.Sublist ({dialect}) is closed: close() or the end of its "
                       f"with block freed it{'' if source is None else ' and let go of its image ' + source}; "
                       f"open or build the index again")


def _close_refused():
    """The error of a close() called from inside a call on an index (a
    __del__ or a signal handler) while calls are in flight: waiting would
    wait for its own caller."""
    return TopicmatchRuntimeError(
        "close() refused: it was called from inside a call on a topicmatch index (a __del__ or a "
        "signal handler), while calls are in this one: it would wait for its own caller.  "
        "Close it after that call returns")


def _image_damaged(source):
    """The CorruptImageError of a mapped image whose damage a call met (the
    offsets are checked when followed, not all at open with verify=False)."""
    return CorruptImageError(f"topicmatch image {source} is damaged: an offset in it leads outside "
                             f"it, a walk in it loops or its ids are out of order (open it with verify=True "
                             f"to find where)")


__all__ = ["TopicmatchError", "TopicmatchValueError", "TopicmatchTypeError", "TopicmatchOSError",
           "TopicmatchOverflowError", "TopicmatchKeyError", "TopicmatchIndexError", "TopicmatchRuntimeError",
           "TopicmatchBufferError", "TopicmatchImportError", "ImageChangedError", "ImageError", "NotAnImageError",
           "CorruptImageError", "ClosedError", "InvalidSubjectError", "_OS_KINDS", "_os_error", "_image_changed",
           "_closed", "_close_refused", "_image_damaged"]
for _name in __all__:
    if isinstance(globals()[_name], type):
        globals()[_name].__module__ = _HOME
del _name
