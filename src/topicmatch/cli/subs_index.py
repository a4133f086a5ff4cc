"""A SubsSource turned into what the commands use: its rows (a table or a
filter list) checked, warned about and inserted into a Sublist, or its
image opened.  Every mistake is one CLIError naming the input; an empty
input is one too, unless --allow-empty.
"""
from topicmatch._core import TopicmatchRuntimeError
from topicmatch.cli.dialect_hint import warning as dialect_warning
from topicmatch.cli.common import CLIError
from topicmatch.cli.filters_file import read_filters
from topicmatch.cli.subs_table import SubsRows, read_table


class Loaded:
    """sublist; rows (SubsRows, or None for an image); dialect."""

    def __init__(self, sublist, rows, dialect):
        self.sublist, self.rows, self.dialect = sublist, rows, dialect


def resolve_dialect(src, given):
    """--dialect, or when not given: an image's own, else nats.  An image
    built for another dialect than the one asked for is an error (its
    filters were checked by that dialect's rules)."""
    if src.kind != "image":
        return given or "nats"
    return given


def read_rows(src, dialect):
    """A table's or a filter list's rows -> SubsRows (not yet checked for
    emptiness)."""
    if src.kind == "table":
        return read_table(src)
    filters, ids, queues = read_filters(src.path, dialect)
    return SubsRows(ids, filters, queues if any(q is not None for q in queues) else None,
                    unit="line", linenos=ids)


def check_not_empty(src, n, why):
    if n == 0 and not src.allow_empty:
        raise CLIError(f"{src.describe()} has no subscriptions ({why}): nothing could match; "
                       "give --allow-empty to run with none")


def empty_reason(src):
    if src.kind == "image":
        return "an image of none"
    if src.kind == "filters":
        return "no line holds a filter"
    return "an empty table, or a header only"


def warn_foreign(rows, dialect, src, err):
    """The one warning for filters that look like another dialect's."""
    filters = rows.filters if isinstance(rows.filters, list) else rows.filters.to_pylist()
    line = dialect_warning(filters, dialect, src.path)
    if line:
        err.line(line)


def insert_rows(rows, dialect, src):
    """SubsRows -> a Sublist.  A row the index refuses (an invalid filter or
    queue name) is found again by inserting the rows one by one, on the
    error path only, so the message names its row from the error's type,
    not from the text of the batch error."""
    from topicmatch import InvalidSubjectError, Sublist
    sl = Sublist(dialect)
    try:
        sl.insert_many(rows.filters, rows.sub_ids, rows.queues)
        return sl
    except InvalidSubjectError:
        pass
    _raise_bad_row(rows, dialect, src)
    raise TopicmatchRuntimeError("insert_many refused a row that insert() accepts")  # pragma: no cover


def _raise_bad_row(rows, dialect, src):
    from topicmatch import InvalidSubjectError, Sublist
    pylist = lambda c: c if isinstance(c, list) else c.to_pylist()  # noqa: E731
    filters, ids = pylist(rows.filters), pylist(rows.sub_ids)
    queues = pylist(rows.queues) if rows.queues is not None else [None] * len(ids)
    scratch = Sublist(dialect)
    for i, (f, sid, q) in enumerate(zip(filters, ids, queues)):
        try:
            scratch.insert(f, sid, queue=q)
        except InvalidSubjectError as e:
            # a table's row is named with its sub id; a list's line number is its sub id
            named = "" if rows.linenos is not None else f" (sub_id {sid})"
            raise CLIError(f"{src.describe()} {rows.where(i)}{named}: {e}") from None


def open_image(src, dialect):
    """An image file -> its Sublist; a damaged or foreign file, or one of
    another dialect than --dialect, is a CLIError."""
    from topicmatch import Sublist, TopicmatchError
    try:
        sl = Sublist.open(src.path)
    except (TopicmatchError, OSError, ValueError) as e:
        raise CLIError(f"{src.describe()}: cannot open the image: {e}") from None
    if dialect is not None and sl.dialect != dialect:
        raise CLIError(f"{src.describe()} is an image of {sl.dialect} subscriptions, not "
                       f"{dialect}: drop --dialect, or build it again with --dialect {dialect}")
    return sl


def load(src, given_dialect, err):
    """The whole load: -> Loaded.  err: the command's Stderr (the warning,
    and on a terminal what is being done while it takes seconds)."""
    dialect = resolve_dialect(src, given_dialect)
    if src.kind == "image":
        err.status(f"topicmatch: opening the image {src.path} ...")
        sl = open_image(src, dialect)
        check_not_empty(src, len(sl), empty_reason(src))
        return Loaded(sl, None, sl.dialect)
    err.status(f"topicmatch: reading {src.describe()} ...")
    rows = read_rows(src, dialect)
    check_not_empty(src, len(rows), empty_reason(src))
    warn_foreign(rows, dialect, src, err)
    err.status(f"topicmatch: indexing {len(rows):,} subscriptions ({dialect}) ...")
    sl = insert_rows(rows, dialect, src)
    err.clear()
    return Loaded(sl, rows, dialect)
