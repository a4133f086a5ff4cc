"""fastsub: the fastest subscription matcher a Python user can install.

    >>> from fastsub import Sublist
    >>> sl = Sublist("nats")
    >>> sl.insert("orders.*.created", 17)
    True
    >>> sl.match("orders.eu.created").subs
    [17]
"""
from fastsub._core import (
    BatchResult,
    FastsubError,
    InvalidSubjectError,
    MatchResult,
    Sublist,
    is_valid_filter,
    is_valid_subject,
    release_memory,
    subject_matches,
)

# The one place the version is written: pyproject.toml reads it from here
# (dynamic = ["version"]), `fastsub --version` prints it.
__version__ = "0.1.0"

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
