"""Type stubs for topicmatch: the public names, re-exported from topicmatch._core.

Argument types are checked alike everywhere: a wrong type is a TypeError
naming the argument (and the row, for a column); str only, bytes refused;
a bool is not an id.  Columns may be Arrow string, large_string,
string_view or dictionary<string> arrays, chunked or not (topicmatch._core's
stubs say where)."""
from topicmatch._core import BatchResult as BatchResult
from topicmatch._core import ClosedError as ClosedError
from topicmatch._core import TopicmatchError as TopicmatchError
from topicmatch._core import TopicmatchValueError as TopicmatchValueError
from topicmatch._core import TopicmatchTypeError as TopicmatchTypeError
from topicmatch._core import TopicmatchOSError as TopicmatchOSError
from topicmatch._core import TopicmatchOverflowError as TopicmatchOverflowError
from topicmatch._core import TopicmatchKeyError as TopicmatchKeyError
from topicmatch._core import TopicmatchIndexError as TopicmatchIndexError
from topicmatch._core import TopicmatchRuntimeError as TopicmatchRuntimeError
from topicmatch._core import TopicmatchBufferError as TopicmatchBufferError
from topicmatch._core import TopicmatchImportError as TopicmatchImportError
from topicmatch._core import ImageChangedError as ImageChangedError
from topicmatch._core import ImageError as ImageError
from topicmatch._core import NotAnImageError as NotAnImageError
from topicmatch._core import CorruptImageError as CorruptImageError
from topicmatch._core import InvalidSubjectError as InvalidSubjectError
from topicmatch._core import MatchResult as MatchResult
from topicmatch._core import Sublist as Sublist
from topicmatch._core import build_image as build_image
from topicmatch._core import is_valid_filter as is_valid_filter
from topicmatch._core import is_valid_subject as is_valid_subject
from topicmatch._core import release_memory as release_memory
from topicmatch._core import subject_matches as subject_matches

__version__: str
__all__ = [
    "BatchResult",
    "ClosedError",
    "TopicmatchError",
    "TopicmatchValueError",
    "TopicmatchTypeError",
    "TopicmatchOSError",
    "TopicmatchOverflowError",
    "TopicmatchKeyError",
    "TopicmatchIndexError",
    "TopicmatchRuntimeError",
    "TopicmatchBufferError",
    "TopicmatchImportError",
    "ImageChangedError",
    "ImageError",
    "NotAnImageError",
    "CorruptImageError",
    "InvalidSubjectError",
    "MatchResult",
    "Sublist",
    "build_image",
    "is_valid_filter",
    "is_valid_subject",
    "release_memory",
    "subject_matches",
    "__version__",
]
