"""Type stubs for fastsub: the public names, re-exported from fastsub._core.

Argument types are checked alike everywhere: a wrong type is a TypeError
naming the argument (and the row, for a column); str only, bytes refused;
a bool is not an id.  Columns may be Arrow string, large_string,
string_view or dictionary<string> arrays, chunked or not (fastsub._core's
stubs say where)."""
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
