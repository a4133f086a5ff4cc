"""Type stubs for the compiled core, topicmatch._core (src/topicmatch/_core.pyx).

Checked against the built module by ``python -m mypy.stubtest topicmatch``
(tests/test_typing.py).  pyarrow carries no type information, so Arrow
inputs and outputs are typed ``Any``.
"""
import os
from types import TracebackType
from typing import Any, ClassVar, Dict, List, Literal, Optional, Sequence, SupportsIndex, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

_Dialect = Literal["nats", "mqtt", "amqp"]
_QueueMode = Literal["pick", "all", "none"]
# Sublist.open / from_bytes: everything, the checksum alone, or the header alone
_Verify = Union[bool, Literal["checksum"]]
_Bytes = Union[bytes, bytearray, memoryview]
# Argument types (issue 34): a wrong type is a TypeError naming the argument,
# and the row for a column ("filters[3] must be str, not bytes").  Text is
# str only: bytes are refused everywhere, as Arrow binary columns are.  A
# bool is not an id.  A single str where a sequence is expected is refused.
#
# A column of subjects (or keys, or route_keys' values): a list of str (None
# for a null row), a numpy str/object array, or an Arrow column (Any) of
# string, large_string, string_view or dictionary<string> (any index type),
# an Array or a ChunkedArray, or an object exporting one through the Arrow
# PyCapsule interface (a polars Series).
_SubjectColumn = Union[Sequence[Optional[str]], npt.NDArray[Any], Any]
# insert_many/remove_many: filters and queues as a sequence of str or such an
# Arrow column (Any); sub_ids as ints, a numpy or Arrow integer array.
_FilterColumn = Union[Sequence[str], Any]
_QueueColumn = Union[Sequence[Optional[str]], Any]
_IdColumn = Union[Sequence[int], npt.NDArray[np.integer[Any]], Any]

class TopicmatchError(Exception):
    """Base of every error topicmatch raises on its own account; each is
    also the built-in a caller would catch (ValueError, TypeError, OSError...).
    MemoryError and KeyboardInterrupt stay as Python makes them."""

class TopicmatchValueError(TopicmatchError, ValueError):
    """A value topicmatch refuses, where no more specific class fits."""

class TopicmatchTypeError(TopicmatchError, TypeError):
    """An argument or a row of the wrong type."""

class TopicmatchOSError(TopicmatchError, OSError):
    """An operating-system error topicmatch reports itself, naming the
    user's path; also of the OSError subclass for its errno."""

class TopicmatchOverflowError(TopicmatchError, OverflowError):
    """An integer outside the range it must fit (a sub_id past int64)."""

class TopicmatchKeyError(TopicmatchError, KeyError):
    """A key that is not there (remove() of a subscription not held)."""

class TopicmatchIndexError(TopicmatchError, IndexError):
    """An index out of range (a row of a BatchResult)."""

class TopicmatchRuntimeError(TopicmatchError, RuntimeError):
    """A failure of a run rather than of an argument."""

class TopicmatchBufferError(TopicmatchError, BufferError):
    """A buffer asked for in a way it cannot be given."""

class TopicmatchImportError(TopicmatchError, ImportError):
    """An optional dependency a feature needs is missing."""

class ImageChangedError(TopicmatchOSError):
    """The file an index was opened from (Sublist.open) was truncated or
    rewritten in place while mapped; every later call on the index raises
    it too.  Replace image files (write a new one, rename it over); never
    rewrite one in place.  ``path``: the file."""
    path: Optional[str]
    def __init__(self, message: str, path: Optional[str] = ...) -> None: ...

class ImageError(TopicmatchValueError):
    """Bytes or a file given as an index image (Sublist.open, from_bytes)
    that cannot be read as one: NotAnImageError or CorruptImageError."""

class NotAnImageError(ImageError):
    """Not a topicmatch image or serialized index at all: it does not
    start with the magic bytes b"\\x89FSB\\r\\n\\x1a\\n"."""

class CorruptImageError(ImageError):
    """A topicmatch image or serialized index (its magic is right) whose
    content is damaged: truncated, a checksum mismatch, a bad offset."""

class ClosedError(TopicmatchValueError):
    """A call on a Sublist after its close() (or the end of its ``with``
    block): its memory, and an opened image's mapping, are gone."""

class InvalidSubjectError(TopicmatchValueError):
    """A subject, filter or queue name is malformed.

    ``subject``: the input; ``reason``: what is wrong; ``position``: byte
    offset in its UTF-8 form, or None; ``row``: in a batch (insert_many,
    remove_many), the 0-based index of the bad item, else None."""
    subject: Optional[str]
    reason: Optional[str]
    position: Optional[int]
    row: Optional[int]
    def __init__(self, message: str, subject: Optional[str] = None, reason: Optional[str] = None,
                 position: Optional[int] = None, row: Optional[int] = None) -> None: ...

@disjoint_base
class MatchResult:
    """The subscriptions matching one subject.

    subs:   ids of the matching plain subscriptions, one per matching
            (filter, sub_id).
    groups: (queue, filter_or_None, members) per matching queue group.
            NATS: groups merge by queue name and filter is None.
            MQTT: a group is the pair (group, filter).
    Order (docs/guide.md, "The order of a row"): subs ascending by value;
    groups by (queue bytes, filter bytes), members ascending; the same
    whatever the insertion order, cache, threads or image round trip.
    """
    @property
    def subs(self) -> List[int]: ...
    @property
    def groups(self) -> List[Tuple[str, Optional[str], List[int]]]: ...
    def __len__(self) -> int: ...
    # A value: equal when subs and groups are (what the repr shows); no
    # hash, the lists are the caller's to change.
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class BatchResult:
    """What match_many found, in CSR form: row i's ids are
    ``sub_ids[offsets[i]:offsets[i + 1]]``; ``invalid[i]`` is True where the
    subject was null or invalid (such rows have no ids)."""
    __slots__ = ("_offsets", "_sub_ids", "_invalid", "_hash")
    @property
    def offsets(self) -> npt.NDArray[np.int64]: ...
    @property
    def sub_ids(self) -> npt.NDArray[np.int64]: ...
    @property
    def invalid(self) -> npt.NDArray[np.bool_]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: SupportsIndex) -> npt.NDArray[np.int64]: ...
    def counts(self) -> npt.NDArray[np.int64]: ...
    def to_arrow(self) -> Any:
        """A pyarrow ListArray<int64> with int32 offsets (null where invalid)."""
    # A value: read-only arrays, equal when the rows are, hashed alike.
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

class _Stats(TypedDict):
    subscriptions: int
    nodes: int
    memory_bytes: int
    cache_entries: int
    cache_capacity: int
    inserts: int
    removes: int
    matches: int
    cache_hits: int
    cache_misses: int
    cache_hit_rate: float
    max_fanout: int
    avg_fanout: float
    generation: int
    mapped_bytes: int
    live_subscriptions: int
    live_bytes: int

# (not a disjoint base: its C side, _core._Sublist, is, and Sublist adds no
# layout of its own: _sublist.py)
class Sublist:
    """An index of subscriptions (filter, sub_id, queue) answering "which
    subscriptions match this subject?".  Safe to use from many threads."""
    def __new__(cls, dialect: _Dialect = "nats", *, cache_size: int = 0) -> Sublist: ...
    @property
    def dialect(self) -> _Dialect: ...
    @property
    def generation(self) -> int: ...
    def insert(self, filter: str, sub_id: int, *, queue: Optional[str] = None) -> bool: ...
    def remove(self, filter: str, sub_id: int, *, queue: Optional[str] = None) -> None: ...
    def discard(self, filter: str, sub_id: int, *, queue: Optional[str] = None) -> bool: ...
    def insert_many(self, filters: _FilterColumn, sub_ids: _IdColumn,
                    queues: Optional[_QueueColumn] = None) -> int: ...
    def remove_many(self, filters: _FilterColumn, sub_ids: _IdColumn,
                    queues: Optional[_QueueColumn] = None) -> int: ...
    def __len__(self) -> int: ...
    def match(self, subject: str, *, dedupe: bool = False) -> MatchResult: ...
    def match_many(self, subjects: _SubjectColumn, keys: Optional[_SubjectColumn] = None, queues: _QueueMode = "pick",
                   threads: int = 1, *, dedupe: bool = False, also: Optional["Sublist"] = None) -> BatchResult: ...
    def has_interest(self, subject: str) -> bool: ...
    def num_interest(self, subject: str) -> Tuple[int, int]: ...
    def reverse_match(self, filter: str) -> List[Tuple[str, int, Optional[str]]]: ...
    def stats(self) -> _Stats: ...
    def to_bytes(self, *, version: int = 4) -> bytes: ...
    @staticmethod
    def from_bytes(data: _Bytes, *, cache_size: int = 0, verify: _Verify = True) -> Sublist:
        """An index over the bytes to_bytes() returned: bytes, memoryview,
        mmap or any buffer.  An image (version 3 or 4) held in bytes (or a
        memoryview of bytes) is matched in place, not rebuilt: the index
        keeps the buffer alive.  Any other buffer -- one whose owner could
        still write it, even through a read-only view or mapping -- is
        copied first.  Versions 1 and 2 are rebuilt and checked in full,
        whatever verify says.  verify, for an image:
          True        the checksum and every invariant, once (linear in
                      the size): what opens is what inserts make;
          "checksum"  the checksum alone (XXH64 at memory speed, no
                      structural pass): accidental damage is refused,
                      bytes forged with a valid checksum are trusted as
                      with False;
          False       the header alone (O(1)), for bytes this library
                      wrote.
        At every level no call reads or writes outside the buffer or
        crashes.  Under "checksum" and False, damage is found only where a
        bounds or order check meets it (the call raises ValueError, and so
        does every later one); elsewhere answers may be wrong.  Corrupt,
        truncated or hostile data raises ValueError.  close(), or the end
        of a ``with`` block, lets go of the buffer at once."""
    @staticmethod
    def open(path: Union[str, "os.PathLike[str]"], *, verify: _Verify = True, cache_size: int = 0) -> Sublist: ...
    def save(self, path: Union[str, "os.PathLike[str]"], *, mode: Optional[int] = None,
             durable: bool = True) -> None: ...
    def __reduce__(self) -> Tuple[Any, Tuple[bytes, int]]: ...
    # close() frees the index now (an opened image: unmaps its file), after
    # the calls in flight; later calls raise ClosedError; twice: nothing.
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Sublist: ...
    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]: ...

def build_image(path: Union[str, "os.PathLike[str]"], filters: _FilterColumn, sub_ids: _IdColumn,
                queues: Optional[_QueueColumn] = None, *, dialect: _Dialect = "nats",
                threads: Optional[int] = None, durable: bool = True) -> Sublist: ...
def subject_matches(filter: str, subject: str, dialect: _Dialect = "nats") -> bool: ...
def is_valid_subject(subject: str, dialect: _Dialect = "nats") -> bool: ...
def is_valid_filter(filter: str, dialect: _Dialect = "nats") -> bool: ...
def _fault_inject(nth: int) -> None: ...
def _fault_status() -> Tuple[int, int]: ...
def _mapping_faults() -> int: ...
def release_memory() -> int: ...
def _idpool_status() -> Tuple[int, int]: ...
def _idpool_hold(ms: int) -> None: ...
def _pool_status() -> Tuple[int, int]: ...
def _set_batch_threading(min_rows_per_thread: Optional[int] = None, block_rows: Optional[int] = None,
                         cpus: Optional[int] = None, feed_rows: Optional[int] = None) -> Dict[str, int]: ...
def _set_walk_releases_gil(on: bool) -> bool: ...
def _arrow_rows(col: Any, shrink: Optional[Dict[int, int]] = None) -> Tuple[List[Optional[bytes]], bool]: ...
def _arrow_indices(arr: Any) -> List[Optional[int]]: ...

IMAGE_FORMAT_VERSION: int
DIALECT_NAMES: Tuple[str, ...]
ROUTE_KEYED: int
ROUTE_ANY: int
ROUTE_INVALID: int
ROUTE_NULL: int
def route_keys(values: _SubjectColumn, dialect: _Dialect = "nats", depth: int = 1, *,
               filters: bool = False) -> Tuple[Any, Any]: ...
def route_split(dialect: _Dialect = "nats") -> Tuple[str, str, str, bool, Optional[str]]: ...
