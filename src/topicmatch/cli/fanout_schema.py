"""`topicmatch fanout`'s inputs checked before the JVM starts: the columns and
types of local files read from the files themselves (a CSV's header line, a
JSON-lines file's first lines, a Parquet footer), `--schema` (a Spark DDL
string) parsed and checked against them, and the inference of a CSV's id
columns (int64 only when every value is a canonical integer).

A mistake found here is a CLIError in well under a second, where Spark would
find it only after its 10-45 s start.  Remote paths are left to Spark."""
import csv
import json
import re

from topicmatch._core import TopicmatchValueError
from topicmatch.cli.common import BOM, CLIError, is_local, local_path

#: A JSON-lines file's columns are read from its first lines (up to this
#: many, and at most JSON_SAMPLE_BYTES): Spark infers them from every line,
#: so a column missing from all of these is reported as missing.
JSON_SAMPLE_LINES = 1000
JSON_SAMPLE_BYTES = 1 << 20
#: A canonical integer: no sign but a leading '-', no leading zero, no
#: space, not "-0" -- the text an int64 prints as, so a conversion loses
#: nothing (an id "007" stays a string).
CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,18})$"
#: The columns fanout adds to the events (explode=True): the events may not have them.
ADDED_COLUMNS = ("sub_ids", "error", "sub_id")
#: How deep --schema's types may nest (array<array<...>>, struct<a:struct<...>>).
#: The parser descends one Python frame per level, so without a limit a
#: schema a few thousand levels deep escaped as a RecursionError traceback;
#: 100 is far past any table a fan-out reads (Arrow's IPC reader stops at
#: 64 levels) and far below the interpreter's default limit of 1,000.
MAX_SCHEMA_DEPTH = 100
#: --schema is quoted in its errors up to this many characters.
SCHEMA_QUOTE_CHARS = 80


def is_id_column(name):
    """`id`, or a name ending in `_id` (event_id, device_id), any case."""
    low = name.lower()
    return low == "id" or low.endswith("_id")


# --------------------------------------------------------------------------
# --schema: a Spark DDL string, parsed without Spark
# --------------------------------------------------------------------------

_ALIASES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint",
            "real": "float", "dec": "decimal", "numeric": "decimal", "varchar": "string",
            "char": "string", "character": "string", "bool": "boolean"}
_ATOMIC = {"string", "binary", "boolean", "tinyint", "smallint", "int", "bigint", "float",
           "double", "decimal", "date", "timestamp", "timestamp_ntz", "timestamp_ltz", "void",
           "interval", "variant"}
_INTERVAL_UNITS = {"year", "month", "day", "hour", "minute", "second"}
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(-?\d+)|('(?:[^'\\]|\\.)*')"
                    r"|([<>(),:]))")


def _tokens(text):
    """[(kind, value, 1-based character where it starts)]."""
    pos, out = 0, []
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            at = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise TopicmatchValueError(f"unexpected {text[at]!r} at character {at + 1}")
        pos = m.end()
        quoted, word, num, string, punct = m.groups()
        at = m.start(m.lastindex) + 1
        if quoted is not None:
            out.append(("name", quoted[1:-1].replace("``", "`"), at))
        elif word is not None:
            out.append(("word", word, at))
        elif num is not None:
            out.append(("num", num, at))
        elif string is not None:
            out.append(("str", string, at))
        else:
            out.append(("p", punct, at))
    return out


class _DDL:
    def __init__(self, text):
        toks = _tokens(text)
        self.toks = [(k, v) for k, v, _ in toks]
        self.at = [a for _, _, a in toks]
        self.i = 0

    def where(self):
        """The character (1-based) where the token just taken starts."""
        return self.at[self.i - 1]

    def peek(self, value=None):
        t = self.toks[self.i] if self.i < len(self.toks) else (None, None)
        return t if value is None else (t[1] if t[0] in ("p", "word") else None) == value

    def take(self, what):
        kind, value = self.peek()
        if kind is None:
            raise TopicmatchValueError(f"expected {what}, found the end")
        self.i += 1
        return kind, value

    def expect(self, punct):
        kind, value = self.take(repr(punct))
        if (kind, value) != ("p", punct):
            raise TopicmatchValueError(f"expected {punct!r}, found {value!r}")

    def type(self, depth=1):
        kind, word = self.take("a type")
        if kind != "word":
            raise TopicmatchValueError(f"expected a type, found {word!r}")
        low = _ALIASES.get(word.lower(), word.lower())
        if low in ("array", "map", "struct"):
            if depth > MAX_SCHEMA_DEPTH:
                raise TopicmatchValueError(f"types nested more than {MAX_SCHEMA_DEPTH} deep "
                                 f"(at character {self.where()})")
            self.expect("<")
            if low == "array":
                inner = f"array<{self.type(depth + 1)}>"
            elif low == "map":
                k = self.type(depth + 1)
                self.expect(",")
                inner = f"map<{k},{self.type(depth + 1)}>"
            else:
                fields = [] if self.peek(">") else self.fields(nested=True, depth=depth + 1)
                inner = "struct<" + ",".join(f"{n}:{t}" for n, t in fields) + ">"
            self.expect(">")
            return inner
        if low not in _ATOMIC:
            raise TopicmatchValueError(f"unknown type {word!r}")
        if low == "interval":
            while self.peek()[0] == "word" and (self.peek()[1].lower() in _INTERVAL_UNITS
                                                or self.peek("to") or self.peek("TO")):
                self.i += 1
        if self.peek("("):                      # decimal(10, 2), varchar(20)
            self.i += 1
            args = [self.take("a number")]
            while self.peek(","):
                self.i += 1
                args.append(self.take("a number"))
            if any(k != "num" for k, _ in args):
                raise TopicmatchValueError(f"expected numbers in the parentheses of {word}")
            self.expect(")")
            if low == "decimal":
                return "decimal(" + ",".join(v for _, v in args) + ")"
        return low

    def fields(self, nested=False, depth=1):
        out = []
        while True:
            kind, name = self.take("a column name")
            if kind not in ("name", "word"):
                raise TopicmatchValueError(f"expected a column name, found {name!r}")
            if self.peek(":"):
                self.i += 1
            out.append((name, self.type(depth)))
            if self.peek("NOT") or self.peek("not"):
                self.i += 1
                kind, word = self.take("NULL")
                if word.lower() != "null":
                    raise TopicmatchValueError(f"expected NULL after NOT, found {word!r}")
            if self.peek("COMMENT") or self.peek("comment"):
                self.i += 1
                if self.take("a quoted comment")[0] != "str":
                    raise TopicmatchValueError("expected a quoted string after COMMENT")
            if not self.peek(","):
                return out
            self.i += 1


def parse_ddl(text):
    """A Spark DDL schema ("event_id BIGINT, subject STRING", or
    "struct<...>") -> [(name, type)], the types in Spark's simple strings
    (bigint, string, array<int>, ...).  ValueError says what is wrong."""
    if not text or not text.strip():
        raise TopicmatchValueError("empty schema")
    p = _DDL(text)
    if p.peek()[0] == "word" and p.peek()[1].lower() == "struct" and \
            len(p.toks) > 1 and p.toks[1] == ("p", "<"):
        p.i += 2
        fields = p.fields(nested=True)
        p.expect(">")
    else:
        fields = p.fields()
    if p.i < len(p.toks):
        raise TopicmatchValueError(f"unexpected {p.toks[p.i][1]!r} after the schema")
    names = [n for n, _ in fields]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TopicmatchValueError(f"column {dup[0]!r} appears twice")
    return fields


def check_schema_option(ddl, fmt):
    """--schema: only for CSV and JSON events, and parseable."""
    if ddl is None:
        return None
    if fmt == "parquet":
        raise CLIError("--schema is for CSV and JSON events (Parquet carries its own schema)")
    try:
        return parse_ddl(ddl)
    except ValueError as e:
        raise CLIError(f"--schema {_quote(ddl)}: {e}") from None


def _quote(ddl):
    """--schema as its errors quote it: whole when short, else its start
    and its length (a generated schema can be kilobytes on one line)."""
    if len(ddl) <= SCHEMA_QUOTE_CHARS:
        return repr(ddl)
    return f"{ddl[:SCHEMA_QUOTE_CHARS]!r}... ({len(ddl):,} characters)"


# --------------------------------------------------------------------------
# the columns of a local file
# --------------------------------------------------------------------------

def _first_file(path):
    from topicmatch.cli.fanout_io import data_files, opener_of
    p = local_path(path)
    for f in data_files(p):
        op, _ = opener_of(f)
        if op is not None:
            return f, op
    return None, None


def _arrow_type_name(t):
    import pyarrow as pa
    import pyarrow.types as pt
    if pa.types.is_dictionary(t):
        return _arrow_type_name(t.value_type)
    names = [(pt.is_string, "string"), (pt.is_large_string, "string"), (pt.is_int64, "bigint"),
             (pt.is_int32, "int"), (pt.is_int16, "smallint"), (pt.is_int8, "tinyint"),
             (pt.is_uint8, "smallint"), (pt.is_uint16, "int"), (pt.is_uint32, "bigint"),
             (pt.is_float64, "double"), (pt.is_float32, "float"), (pt.is_boolean, "boolean"),
             (pt.is_date, "date"), (pt.is_timestamp, "timestamp"), (pt.is_binary, "binary"),
             (pt.is_large_binary, "binary"), (pt.is_null, "void")]
    if hasattr(pt, "is_string_view"):
        names.append((pt.is_string_view, "string"))
    for test, name in names:
        if test(t):
            return name
    if pt.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pt.is_list(t) or pt.is_large_list(t):
        return f"array<{_arrow_type_name(t.value_type)}>"
    if pt.is_struct(t):
        return "struct<" + ",".join(f"{t.field(i).name}:{_arrow_type_name(t.field(i).type)}"
                                    for i in range(t.num_fields)) + ">"
    if pt.is_map(t):
        return f"map<{_arrow_type_name(t.key_type)},{_arrow_type_name(t.item_type)}>"
    return str(t)


def _json_type(values):
    kinds = set()
    for v in values:
        if v is None:
            continue
        kinds.add("boolean" if isinstance(v, bool) else "bigint" if isinstance(v, int) else
                  "double" if isinstance(v, float) else "string" if isinstance(v, str) else
                  "struct" if isinstance(v, dict) else "array")
    if not kinds:
        return None                                   # nulls only: unknown
    if kinds == {"bigint", "double"}:
        return "double"
    return kinds.pop() if len(kinds) == 1 else "string"


def csv_header(path):
    """A local CSV's column names, from its first data file's header line
    (a BOM removed); None when there is no readable file."""
    f, op = _first_file(path)
    if f is None:
        return None
    with op(f, "rb") as fh:
        line = fh.readline(1 << 20)
    if line.startswith(BOM):
        line = line[3:]
    try:
        text = line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None                                   # the line scan names it
    if not text:
        return []
    return next(csv.reader([text]))


class Columns:
    """A local input's columns: `names` in order, `types` {name: Spark type
    name, or None when not known yet}, and `source`, where they were read
    (said in errors)."""

    def __init__(self, names, types, source):
        self.names, self.types, self.source = names, types, source


def local_columns(path, fmt, schema=None):
    """The columns of a local events or subscriptions input, read without
    Spark; None for a remote path or when they cannot be told (Spark then
    reports what is wrong).  schema: --schema's parsed fields (they are the
    columns; a CSV's header must name the same ones, in the same order)."""
    if not is_local(path):
        return None
    if fmt == "csv":
        header = csv_header(path)
        if schema is not None:
            names = [n for n, _ in schema]
            if header is not None and header != names:
                raise CLIError(f"--schema names the columns {', '.join(names)}, but the header of "
                               f"{path} names {', '.join(header) or '(none)'}: give the header's "
                               "columns, in its order")
            return Columns(names, dict(schema), "--schema")
        if header is None:
            return None
        return Columns(header, {n: "string" for n in header}, "its header")
    if schema is not None:
        return Columns([n for n, _ in schema], dict(schema), "--schema")
    if fmt == "parquet":
        import pyarrow.parquet as pq
        f, _ = _first_file(path)
        if f is None:
            return None
        try:
            s = pq.read_schema(f)
        except Exception:  # noqa: BLE001 - Spark's read names the problem
            return None
        return Columns(list(s.names), {fld.name: _arrow_type_name(fld.type) for fld in s},
                       "its Parquet schema")
    return _json_columns(path)


def _json_columns(path):
    f, op = _first_file(path)
    if f is None:
        return None
    rows, n, size = [], 0, 0
    with op(f, "rb") as fh:
        for raw in fh:
            n += 1
            size += len(raw)
            try:
                obj = json.loads(raw[3:] if n == 1 and raw.startswith(BOM) else raw)
            except ValueError:
                obj = None                            # a malformed line: rejected later
            if isinstance(obj, dict):
                rows.append(obj)
            if n >= JSON_SAMPLE_LINES or size >= JSON_SAMPLE_BYTES:
                break
    if not rows:
        return None
    names = sorted({k for r in rows for k in r})      # Spark orders JSON fields by name
    types = {k: _json_type([r.get(k) for r in rows]) for k in names}
    return Columns(names, types, f"its first {n:,} line{'s' if n != 1 else ''}")


# --------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------

def _no_column(path, what, name, cols):
    listed = ", ".join(cols.names) or "(none)"
    src = "" if cols.source in ("its header", "its Parquet schema") else f" in {cols.source}"
    raise CLIError(f"{path}: the {what} table has no column {name!r}{src} (columns: {listed})")


def check_events(path, cols, subject_col, key_col):
    """The events' columns as fanout needs them (its own checks, made early)."""
    from topicmatch.cli.fanout_io import CORRUPT_COL
    if cols is None:
        return
    if subject_col not in cols.types:
        _no_column(path, "events", subject_col, cols)
    t = cols.types[subject_col]
    if t is not None and t != "string":
        raise CLIError(f"{path}: events column {subject_col!r} has type {t}, expected string")
    if key_col is not None:
        if key_col not in cols.types:
            _no_column(path, "events", key_col, cols)
        t = cols.types[key_col]
        if t is not None and t.startswith(("array", "map", "struct")):
            raise CLIError(f"{path}: events column {key_col!r} has type {t}, expected a string, "
                           "number, date or timestamp key")
    clash = [c for c in ADDED_COLUMNS if c in cols.types]
    if clash:
        raise CLIError(f"{path}: the events table already has column(s) "
                       f"{', '.join(map(repr, clash))}, which fanout adds; rename them first")
    if CORRUPT_COL in cols.types:
        raise CLIError(f"events {path}: column {CORRUPT_COL!r} is reserved")


def check_subscriptions(path, cols, names=None):
    """The subscriptions' columns: names (a SubsColumns, --id-col ...; None:
    sub_id, filter, queue) says which hold the sub id, filter and queue."""
    if cols is None:
        return
    id_col, filter_col, queue_col = ((names.sub_id, names.filter, names.queue) if names is not None
                                     else ("sub_id", "filter", "queue"))
    for name in (id_col, filter_col):
        if name not in cols.types:
            _no_column(path, "subscriptions", name, cols)
    t = cols.types[id_col]
    if t is not None and t not in ("bigint", "int", "smallint", "tinyint", "string"):
        raise CLIError(f"{path}: subscriptions column {id_col!r} has type {t}, "
                       "expected an integer type (bigint)")
    for name in (filter_col, queue_col):
        t = cols.types.get(name)
        if t is not None and t not in ("string", "void"):
            raise CLIError(f"{path}: subscriptions column {name!r} has type {t}, expected string")


# --------------------------------------------------------------------------
# CSV id columns: int64 when every value is a canonical integer
# --------------------------------------------------------------------------

def integer_id_columns(path, header, exclude=()):
    """The id columns (is_id_column) of local CSV events whose every non-empty
    value is a canonical integer that fits int64: Spark reads them as bigint.
    One pass with pyarrow's CSV reader over those columns only, stopping at
    the first value that is not; [] when there is none or the files cannot be
    read this way (compressed otherwise than gzip, bz2, xz)."""
    cands = [c for c in header if is_id_column(c) and c not in exclude and header.count(c) == 1]
    if not cands or not is_local(path):
        return []
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyarrow import csv as pacsv

    from topicmatch.cli.fanout_io import data_files, opener_of
    parse = pacsv.ParseOptions(quote_char='"', escape_char="\\", double_quote=True,
                               invalid_row_handler=lambda row: "skip")
    left, seen = list(cands), set()
    for f in data_files(local_path(path)):
        op, _ = opener_of(f)
        if op is None:
            return []
        conv = pacsv.ConvertOptions(include_columns=left, column_types={c: pa.string() for c in left},
                                    strings_can_be_null=True, null_values=[""])
        try:
            with op(f, "rb") as stream:
                reader = pacsv.open_csv(stream, parse_options=parse, convert_options=conv,
                                        read_options=pacsv.ReadOptions(block_size=4 << 20))
                for batch in reader:
                    for c in list(left):
                        col = batch.column(c)
                        if col.null_count == len(col):
                            continue
                        seen.add(c)
                        ok = pc.all(pc.match_substring_regex(col, CANONICAL_INT)).as_py()
                        if ok:
                            try:
                                pc.cast(col, pa.int64())
                            except (pa.ArrowInvalid, OverflowError):
                                ok = False
                        if not ok:
                            left.remove(c)
                    if not left:
                        return []
        except (pa.ArrowInvalid, OSError, KeyError, EOFError):
            return []               # an odd file: the columns stay strings
    return [c for c in left if c in seen]
