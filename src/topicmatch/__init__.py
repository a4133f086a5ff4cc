"""topicmatch: the fastest subscription matcher a Python user can install.

    >>> from topicmatch import Sublist
    >>> sl = Sublist("nats")
    >>> sl.insert("orders.*.created", 17)
    True
    >>> sl.match("orders.eu.created").subs
    [17]
"""
from topicmatch._core import (
    BatchResult,
    ClosedError,
    TopicmatchError,
    TopicmatchValueError,
    TopicmatchTypeError,
    TopicmatchOSError,
    TopicmatchOverflowError,
    TopicmatchKeyError,
    TopicmatchIndexError,
    TopicmatchRuntimeError,
    TopicmatchBufferError,
    TopicmatchImportError,
    ImageChangedError,
    ImageError,
    NotAnImageError,
    CorruptImageError,
    InvalidSubjectError,
    MatchResult,
    Sublist,
    build_image,
    is_valid_filter,
    is_valid_subject,
    release_memory,
    subject_matches,
)

# The one place the version is written: pyproject.toml reads it from here
# (dynamic = ["version"]), `topicmatch --version` prints it.
__version__ = "0.1.0"

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
