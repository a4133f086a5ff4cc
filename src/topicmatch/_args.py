"""The Cython layer's arguments, in plain Python: the checks and the words
of whatever is not on a hot path.  _core.pyx keeps the fast test (an exact
int, a list or tuple, an ASCII str) and calls here for the rest -- an int
argument that is not an exact int, a sequence that is not a list, a
dialect or queue mode or thread count, match_many's also -- and for the
error of a refused argument or row.  The messages are the ones the Cython
layer has always raised."""
import operator
import sys

from topicmatch import _columns
from topicmatch._errors import (InvalidSubjectError, TopicmatchOverflowError, TopicmatchTypeError,
                                TopicmatchValueError)

#: match_many's queues= modes (their C values: _batch.pxi).
QUEUE_MODES = ("pick", "all", "none")


def tname(x):
    """The type of x as an error message names it ("None" for None)."""
    return "None" if x is None else type(x).__name__


def shown(s):
    """repr of s, shortened for huge inputs."""
    if len(s) > 80:
        return repr(s[:60]) + f"... ({len(s)} characters)"
    return repr(s)


def invalid(what, s, reason, pos):
    """The InvalidSubjectError of a subject, filter or queue the C core
    refused (its reason, at byte pos)."""
    return InvalidSubjectError(f"invalid {what} {shown(s)}: {reason} (at byte {pos})", s, reason, pos)


def utf8_error(what, s, row=None):
    """The error of a str that has no UTF-8 form (a lone surrogate): an
    InvalidSubjectError naming what (and the row, of a column); MemoryError
    when s encodes after all (its encoding was what ran out)."""
    try:
        s.encode("utf-8")
        return MemoryError()
    except UnicodeEncodeError as e:
        start = e.start
    said = "" if row is None else f"item {row}: "
    return InvalidSubjectError(f"{said}invalid {what} {shown(s)}: not valid UTF-8 (lone surrogate at "
                               f"character {start})", s, "not valid UTF-8", None, row)


def not_str(what, s):
    """The TypeError of a str argument given something else (bytes too: a
    str is text, bytes are not, as in pyarrow's string and binary types)."""
    return TopicmatchTypeError(f"{what} must be str, not {tname(s)}")


def index(x, what):
    """x (not an exact int) as an int, through __index__; a bool (an int
    to Python, not a count or an id: numpy's bool_ refuses operator.index
    by itself) or another type is a TypeError naming what."""
    if isinstance(x, bool):
        raise TopicmatchTypeError(f"{what} must be int, not bool")
    try:
        return operator.index(x)
    except TypeError:
        raise TopicmatchTypeError(f"{what} must be int, not {tname(x)}") from None


def ssize(x, what):
    """An int argument (a count, a version) as a C ssize_t holds it: an
    exact int, or one through index(); OverflowError beyond, in the words
    of Cython's conversion, which took these arguments before."""
    n = x if type(x) is int else index(x, what)
    if not -sys.maxsize - 1 <= n <= sys.maxsize:
        raise TopicmatchOverflowError("Python int too large to convert to C ssize_t")
    return n


def cache_size(x):
    """cache_size= (Sublist(), from_bytes, open), checked: an int >= 0."""
    n = ssize(x, "cache_size")
    if n < 0:
        raise TopicmatchValueError(f"cache_size must be >= 0, not {n}")
    return n


def image_version(x):
    """to_bytes()'s version=, checked: 2, 3 or 4 (docs/FORMAT.md)."""
    v = ssize(x, "version")
    if not 2 <= v <= 4:
        raise TopicmatchValueError(f"version must be 2, 3 or 4, not {v!r}")
    return v


def depth(x, most):
    """route_keys's depth=, checked: an int from 1 to most (the core's
    FS_ROUTE_MAX_DEPTH)."""
    d = ssize(x, "depth")
    if not 1 <= d <= most:
        raise TopicmatchValueError(f"depth must be an integer from 1 to {most}, not {d!r}")
    return d


def seq(x, what, of):
    """A sequence argument as a new list; a single str or bytes (which
    would be taken character by character) and non-iterables are a
    TypeError naming the argument."""
    if type(x) is list or type(x) is tuple:
        return list(x)
    if isinstance(x, (str, bytes, bytearray)):
        raise TopicmatchTypeError(f"{what} must be a sequence of {of}, not a single {tname(x)}")
    try:
        it = iter(x)
    except TypeError:
        raise TopicmatchTypeError(f"{what} must be a sequence of {of}, not {tname(x)}") from None
    return list(it)


def insert_rows(filters, sub_ids, queues, free_threaded):
    """insert_many's (and remove_many's, build_image's) columns given as
    sequences, checked once per call: (filters, sub_ids, queues, lent),
    lists of one length (queues None when not given), in the order of
    the checks' errors (filters, sub_ids, their lengths, queues).  Each is
    a new list, except a list of sub_ids, which is lent (lent true: read
    in place, its copy and release cost ~13 instructions a row) where
    nothing else can change it before its rows are read: queues a list, a
    tuple or None (copying those runs no Python code) and not a
    free-threaded build."""
    fl = seq(filters, "filters", "str")
    n = len(fl)
    lent = (not free_threaded and type(sub_ids) is list and
            (queues is None or type(queues) is list or type(queues) is tuple))
    il = sub_ids if lent else seq(sub_ids, "sub_ids", "int")
    if len(il) != n:
        raise TopicmatchValueError(f"filters and sub_ids differ in length ({n} != {len(il)})")
    ql = None
    if queues is not None:
        ql = seq(queues, "queues", "str or None")
        if len(ql) != n:
            raise TopicmatchValueError(f"filters and queues differ in length ({n} != {len(ql)})")
    return fl, il, ql, lent


def iterable(col, what, got):
    """col when it is an iterable other than a single str or bytes; else
    the TypeError naming what (and got, the type as the message says it)."""
    if isinstance(col, (str, bytes, bytearray)):
        raise TopicmatchTypeError(f"{what} must be a sequence of str, not a single {type(col).__name__}")
    try:
        iter(col)
    except TypeError:
        raise TopicmatchTypeError(f"{what} must be a list of str, a numpy array or an Arrow string column, "
                                  f"not {got}") from None
    return col


def said(names):
    """The dialects' names as a message lists them: 'a', 'b' or 'c'."""
    return ", ".join(map(repr, names[:-1])) + " or " + repr(names[-1])


def dialect_error(d, names):
    """The error of a dialect= that is none of names."""
    if not isinstance(d, str):
        return TopicmatchTypeError(f"dialect must be str ({said(names)}), not {tname(d)}")
    return TopicmatchValueError(f"dialect must be {said(names)}, not {d!r}")


def row_type_error(i, f, sub_id, q):
    """The TypeError of insert_many/remove_many's row i, naming the column
    and the row (the checks of _core's _fill_spec, in its order)."""
    if not isinstance(f, str):
        return TopicmatchTypeError(f"filters[{i}] must be str, not {tname(f)}")
    if type(sub_id) is not int:
        try:
            index(sub_id, "sub_id")
        except TypeError:
            return TopicmatchTypeError(f"sub_ids[{i}] must be int, not {tname(sub_id)}")
    return TopicmatchTypeError(f"queues[{i}] must be str or None, not {tname(q)}")


def row_error(what, strict, i, x):
    """The error of row i of a column of str being converted: a TypeError
    for a wrong type, InvalidSubjectError for a lone surrogate in a strict
    column (strict: the singular it names, "filter" or "queue")."""
    if not isinstance(x, str):
        return TopicmatchTypeError(f"{what}[{i}] must be {'str' if strict == 'filter' else 'str or None'}, "
                                   f"not {tname(x)}")
    return utf8_error(strict, x, i)


def int64_column(ids, what):
    """ids as a contiguous numpy int64 array: from an Arrow or numpy integer
    array (_columns.int64_array), or item by item from any sequence of int
    (the errors of the list path, with the item)."""
    import numpy as np
    out = _columns.int64_array(ids, what)
    if out is not None:
        return out
    rows = seq(ids, what, "int")
    out = np.empty(len(rows), dtype=np.int64)
    for i, x in enumerate(rows):
        try:
            v = x if type(x) is int else index(x, "sub_id")
        except TypeError:
            raise TopicmatchTypeError(f"{what}[{i}] must be int, not {tname(x)}") from None
        if not -(1 << 63) <= v < (1 << 63):
            raise TopicmatchOverflowError(f"item {i}: sub_id {v} is outside the signed 64-bit range")
        out[i] = v
    return out


def queue_mode(queues):
    """match_many's queues=, checked: one of QUEUE_MODES."""
    if not isinstance(queues, str):
        raise TopicmatchTypeError(f"queues must be 'pick', 'all' or 'none', not {tname(queues)}")
    if queues not in QUEUE_MODES:
        raise TopicmatchValueError(f"queues must be 'pick', 'all' or 'none', not {queues!r}")
    return str(queues)


def threads(threads, most):
    """threads= of match_many and build_image, checked: an int >= 1, taken
    as `most` when it is more."""
    t = ssize(threads, "threads")
    if t < 1:
        raise TopicmatchValueError(f"threads must be >= 1, not {t}")
    return min(t, most)


def also(sl, other, cls):
    """match_many's also=, checked: None, or another index (of class cls)
    of sl's dialect."""
    if other is None:
        return None
    if not isinstance(other, cls):
        raise TopicmatchTypeError(f"also must be a topicmatch.Sublist or None, not {tname(other)}")
    if other is sl:
        raise TopicmatchValueError("also must be another index: an index matched with itself would answer each "
                                   "subscription twice")
    if other.dialect != sl.dialect:
        raise TopicmatchValueError(f"also is a {other.dialect!r} index, this one {sl.dialect!r}: "
                                   f"both must be of one dialect")
    return other
