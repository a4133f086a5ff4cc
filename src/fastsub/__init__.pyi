"""Type stubs for fastsub: the public names, re-exported from fastsub._core."""
from fastsub._core import BatchResult as BatchResult
from fastsub._core import FastsubError as FastsubError
from fastsub._core import InvalidSubjectError as InvalidSubjectError
from fastsub._core import MatchResult as MatchResult
from fastsub._core import Sublist as Sublist
from fastsub._core import is_valid_filter as is_valid_filter
from fastsub._core import is_valid_subject as is_valid_subject
from fastsub._core import release_memory as release_memory
from fastsub._core import subject_matches as subject_matches

__version__: str
__all__ = [
    "BatchResult",
    "FastsubError",
    "InvalidSubjectError",
    "MatchResult",
    "Sublist",
    "is_valid_filter",
    "is_valid_subject",
    "release_memory",
    "subject_matches",
    "__version__",
]
