"""What a command's subscriptions input is, decided once from its options
and the file's first bytes, before anything is read: a table (CSV, JSON
lines, Parquet) and the names of its three columns, an image (a file that
`topicmatch build` or `Sublist.save` wrote), or a plain filter list
(`--filters-file`).  `match`, `fanout` and `build` all start here, so the
three take the same inputs and say the same things about them.
"""
import dataclasses
from typing import Optional

# IMAGE_MAGIC: the first bytes of every image file (docs/FORMAT.md), which
# a table never starts with (0x89 is not UTF-8 text, nor Parquet's "PAR1")
from topicmatch._imagefiles import MAGIC as IMAGE_MAGIC
from topicmatch.cli.common import CLIError, check_readable, is_local, local_path
from topicmatch.cli.fanout_io import format_of


@dataclasses.dataclass(frozen=True)
class SubsColumns:
    """The table's columns that hold the sub id, the filter and the queue
    (--id-col, --filter-col, --queue-col); the queue column is optional."""
    sub_id: str = "sub_id"
    filter: str = "filter"
    queue: str = "queue"

    def renamed(self):
        """[(name in the table, name it stands for)] of the renamed ones."""
        return [(got, want) for got, want in ((self.sub_id, "sub_id"), (self.filter, "filter"),
                                              (self.queue, "queue")) if got != want]


@dataclasses.dataclass(frozen=True)
class SubsSource:
    """kind: "table", "image" or "filters"; fmt: a table's format."""
    path: str
    kind: str
    fmt: Optional[str] = None
    columns: SubsColumns = SubsColumns()
    allow_empty: bool = False

    def describe(self):
        """How messages name it: 'subscriptions PATH'."""
        return f"subscriptions {'standard input' if self.path == '-' else self.path}"


def is_image(path):
    """Whether a local file starts with IMAGE_MAGIC (a directory, a remote
    path or standard input is never an image)."""
    if path == "-" or not is_local(path):
        return False
    try:
        with open(local_path(path), "rb") as f:
            return f.read(len(IMAGE_MAGIC)) == IMAGE_MAGIC
    except IsADirectoryError:
        return False
    except OSError as e:
        raise CLIError(f"cannot read subscriptions {path}: {e.strerror}") from None


def _columns(args):
    cols = SubsColumns(args.id_col, args.filter_col, args.queue_col)
    names = [cols.sub_id, cols.filter, cols.queue]
    if len(set(names)) < 3:
        raise CLIError(f"--id-col, --filter-col and --queue-col name the same column twice "
                       f"({', '.join(names)})")
    return cols


def subs_source(args):
    """The subscriptions input of parsed arguments (--subs or --filters-file;
    the parser makes one of them required).  Checks that a local file is
    readable, and that the table options are not given with an image or a
    filter list, where they would silently mean nothing."""
    cols = _columns(args)
    if args.filters_file is not None:
        path, kind, fmt = args.filters_file, "filters", None
        if path != "-":
            check_readable(path, "subscriptions")
    else:
        path = args.subs
        if path != "-":
            check_readable(path, "subscriptions")
        kind = "image" if is_image(path) else "table"
        fmt = _table_format(path, args.subs_format) if kind == "table" else None
    if kind != "table":
        given = [flag for flag, v in (("--subs-format", args.subs_format),
                                      ("--id-col", cols.sub_id != "sub_id"),
                                      ("--filter-col", cols.filter != "filter"),
                                      ("--queue-col", cols.queue != "queue")) if v]
        if given:
            what = "an image" if kind == "image" else "a filter list"
            raise CLIError(f"{given[0]} is for a subscriptions table; {path} is {what}")
    return SubsSource(path, kind, fmt, cols, args.allow_empty)


def _table_format(path, fmt):
    if path == "-" and fmt is None:
        raise CLIError("--subs -: give the format of standard input with --subs-format csv|json "
                       "(or read a plain filter list with --filters-file -)")
    if path == "-" and fmt == "parquet":
        raise CLIError("--subs -: Parquet cannot be read from standard input; give a file")
    try:
        return format_of(path, fmt, "subscriptions", "--subs-format")
    except CLIError as e:
        # the name tells nothing: say that a plain list has its own option
        raise CLIError(f"{e}; or --filters-file for a plain filter list (one per line)") from None
