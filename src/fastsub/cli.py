"""The `fastsub` command line.

    fastsub fanout --events PATH --subs PATH --out DIR [--master URL] ...
    fastsub demo [--out DIR] [--events N]
    fastsub match --subs FILE --subjects FILE [--dialect nats|mqtt|amqp]

`fanout` and `demo` run on Spark (pip install 'fastsub[spark]'); `match` is
the engine alone.  A mistake in the input (a missing file, column or type,
an invalid filter) is one line on stderr and exit status 2; see docs/spark.md.
"""
import argparse
import os
import sys
import time

EXIT_USAGE = 2


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


def _err(msg):
    print(f"fastsub: error: {msg}", file=sys.stderr)


def _n(x):
    return f"{x:,}"


def _size(nbytes):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def _java_message(e):
    """The most specific message in a Py4JJavaError's Java cause chain."""
    best, t, seen = None, getattr(e, "java_exception", None), 0
    while t is not None and seen < 20:
        msg = t.getMessage()
        if msg and msg.strip():
            best = msg
        t, seen = t.getCause(), seen + 1
    return best


def _first_line(e):
    """One useful line from an exception: Spark's carry a JVM or Python trace."""
    try:
        text = _java_message(e) if hasattr(e, "java_exception") else None
    except Exception:  # noqa: BLE001 - the JVM may be gone
        text = None
    text = text or str(e) or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        lines = [ln for ln in lines if not ln.startswith(("JVM stacktrace", "at ", "File "))]
        return lines[-1][:500] if lines else type(e).__name__
    for line in lines:
        if not line.startswith(("JVM stacktrace", "at ", "An error occurred while calling")):
            return line[:500]
    return type(e).__name__


# --------------------------------------------------------------------------
# input files
# --------------------------------------------------------------------------

FORMATS = ("parquet", "json", "csv")
_EXT = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json",
        ".ndjson": "json", ".csv": "csv"}
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".snappy", ".deflate")


def _is_local(path):
    return "://" not in path or path.startswith("file://")


def _local_path(path):
    return path[len("file://"):] if path.startswith("file://") else path


def _format_of(path, fmt, what, flag):
    if fmt:
        return fmt
    p = _local_path(path).rstrip("/")
    name = p
    if _is_local(path) and os.path.isdir(p):
        parts = sorted(f for f in os.listdir(p) if not f.startswith(("_", ".")))
        if not parts:
            raise CLIError(f"{what} directory {path} has no data files")
        name = parts[0]
    base = name.lower()
    for c in _COMPRESSED:
        if base.endswith(c):
            base = base[: -len(c)]
    for ext, f in _EXT.items():
        if base.endswith(ext):
            return f
    raise CLIError(f"cannot tell the format of {what} {path} from its name; "
                   f"use {flag} parquet|json|csv")


def _check_readable(path, what):
    if not _is_local(path):
        return
    p = _local_path(path)
    if not os.path.exists(p):
        raise CLIError(f"{what} {path}: no such file or directory")
    if not os.access(p, os.R_OK) or (os.path.isdir(p) and not os.access(p, os.X_OK)):
        raise CLIError(f"{what} {path}: permission denied")


def _read(spark, path, fmt, what):
    """-> DataFrame; a file Spark cannot read is a CLIError naming it."""
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JError
    try:
        r = spark.read
        if fmt == "csv":
            df = r.option("header", True).option("mode", "FAILFAST").csv(path)
        elif fmt == "json":
            df = r.option("mode", "FAILFAST").json(path)
        else:
            df = r.parquet(path)
        df.schema  # noqa: B018 - resolve it now, so an error names this file
    except (PySparkException, Py4JError) as e:
        raise CLIError(f"cannot read {what} {path} as {fmt}: {_first_line(e)}") from None
    if not df.columns:
        raise CLIError(f"{what} {path} has no columns (empty or not {fmt})")
    return df


# --------------------------------------------------------------------------
# fanout
# --------------------------------------------------------------------------

def _out_paths(out, overwrite):
    paths = {k: out.rstrip("/") + "/" + k for k in ("deliveries", "rejected")}
    if _is_local(out) and not overwrite:
        for p in paths.values():
            if os.path.exists(_local_path(p)):
                raise CLIError(f"output {p} already exists (use --overwrite)")
    return paths


def _spark_errors():
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JError
    return (PySparkException, Py4JError)


def run_fanout(spark, events_path, subs_path, out, **kw):
    """Read, fan out, write DIR/deliveries and DIR/rejected, print the summary
    (fastsub._spark_cli.run_fanout).  -> (FanoutCounts, deliveries written, seconds)."""
    from fastsub._spark_cli import run_fanout as run
    return run(spark, events_path, subs_path, out, **kw)


def _session(args):
    from fastsub._spark_cli import session
    return session(args)


def cmd_fanout(args):
    from fastsub._spark_cli import cmd_fanout as run
    return run(args)


def cmd_demo(args):
    from fastsub import _demo
    return _demo.run(args, _session)


# --------------------------------------------------------------------------
# match: the engine alone
# --------------------------------------------------------------------------

#: Bytes of input read, decoded and matched at a time: memory stays bounded
#: by this (plus the output of one batch) whatever the size of the input.
MATCH_BLOCK_BYTES = 4 << 20
#: The progress line appears once a run has taken this long (seconds)...
PROGRESS_AFTER = 2.0
#: ...and is redrawn at most this often.
PROGRESS_EVERY = 0.25
#: Rejected subjects named one by one on stderr; the rest are only counted.
MAX_REJECT_LINES = 100


#: The longest line kept: a subject or filter is at most 65,535 UTF-8 bytes
#: in every dialect, so a longer line can only be rejected.  Longer lines
#: are scanned to their end without being held (bounded memory).
MAX_LINE_BYTES = 65535
#: A subscriptions line may carry a queue name after its filter.
MAX_SUBS_LINE_BYTES = 2 * MAX_LINE_BYTES + 1
#: Exit status of a run that finished but rejected some lines (0: none
#: rejected; 2: a usage or input error stopped the run).
EXIT_REJECTED = 3
_BOM = b"\xef\xbb\xbf"


class Lines(list):
    """A block of read_lines: str items, and `rejected` Rejected ones among
    them (0: every item is a str, the common case, checked in O(1))."""
    __slots__ = ("rejected",)
    rejected: int


class Rejected:
    """A line the reader could not turn into text: its number, why, and its
    bytes (without the line end; None for a line too long to hold, whose
    bytes went straight to the rejects file)."""
    __slots__ = ("lineno", "reason", "raw")

    def __init__(self, lineno, reason, raw):
        self.lineno, self.reason, self.raw = lineno, reason, raw

    def __repr__(self):
        return f"Rejected({self.lineno}, {self.reason!r})"


def _too_long(n, limit):
    return f"line too long ({n:,} bytes; at most {limit:,})"


def _one_line(raw, lineno, limit):
    """One line's bytes (\n removed) -> str, or Rejected."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if len(raw) > limit:
        return Rejected(lineno, _too_long(len(raw), limit), raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejected(lineno, f"not UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1:,} "
                                "of the line)", raw)


def _whole_lines(data, lineno, limit):
    """Lines of data (ending in \n) -> (list of str or Rejected, how many
    Rejected).  One decode for the whole block when every line is short and
    UTF-8; line by line only for a block that holds a bad one."""
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = None
    if lines is not None:
        lines.pop()                             # data ends with \n
        # A line of c characters has at most 4c bytes: only a block with a
        # line over limit/4 characters needs its lines measured in bytes.
        if len(data) <= limit or max(map(len, lines)) * 4 <= limit or \
                max(len(ln.encode("utf-8")) - ln.endswith("\r") for ln in lines) <= limit:
            return [ln[:-1] if ln.endswith("\r") else ln for ln in lines], 0
    raws = data.split(b"\n")
    raws.pop()
    got = [_one_line(raw, lineno + k, limit) for k, raw in enumerate(raws)]
    return got, sum(isinstance(x, Rejected) for x in got)


def read_lines(path, what, limit=MAX_LINE_BYTES, rejects=None, block_bytes=None, opener=None):
    """Read `path` ('-': stdin) in blocks of whole lines, in bounded memory.

    Yields (first line number, items, bytes consumed so far): items (a
    Lines) [k] is line first+k as a str (its \n or \r\n removed), or a
    Rejected -- a line that is not UTF-8, or longer than `limit` bytes;
    items.rejected counts the latter.  No line is ever
    dropped.  A UTF-8 byte-order mark at the start of the input is removed.
    A line is held only up to `limit` bytes: past that it is scanned to its
    end, its bytes streamed to `rejects` (a binary file, or None) as they
    come; the items before it are yielded first, so a caller that writes
    its own rejected lines to the same file, in order, keeps them in order.
    opener: how to open path for reading bytes (gzip.open, say; default open)."""
    block_bytes = max(4, block_bytes or MATCH_BLOCK_BYTES)
    try:
        f = sys.stdin.buffer if path == "-" else (opener or open)(path, "rb")
    except OSError as e:
        raise CLIError(f"cannot read {what} {path}: {e.strerror}") from None
    name = "standard input" if path == "-" else path
    lineno, first, done = 1, 1, 0
    items = Lines()
    items.rejected = 0
    partial, plen = [], 0       # the current line's bytes so far (plen <= limit + 1)
    skipped = -1                # >= 0: bytes of an over-long line seen so far
    at_start = True
    try:
        while True:
            try:
                chunk = f.read(block_bytes)
            except OSError as e:
                raise CLIError(f"cannot read {what} {name}: {e.strerror}") from None
            if at_start and chunk:
                at_start = False
                while len(chunk) < 3 and chunk == _BOM[:len(chunk)]:   # a BOM split by short reads
                    more = f.read(block_bytes)
                    if not more:
                        break
                    chunk += more
                if chunk.startswith(_BOM):
                    chunk = chunk[3:]
                    done += 3
            if not chunk:
                break
            pos, n = 0, len(chunk)
            while pos < n:
                nl = chunk.find(b"\n", pos)
                end = nl if nl >= 0 else n
                if skipped >= 0:                        # inside an over-long line
                    if rejects is not None:
                        rejects.write(chunk[pos:end])
                    skipped += end - pos
                    if nl < 0:
                        break
                    if rejects is not None:
                        rejects.write(b"\n")
                    items.append(Rejected(lineno, _too_long(skipped, limit), None))
                    items.rejected += 1
                    lineno, skipped, pos = lineno + 1, -1, nl + 1
                    continue
                if partial or nl < 0:                   # a line that began in an earlier read
                    partial.append(chunk[pos:end])
                    plen += end - pos
                    if plen > limit + 1:                # too long: stop holding it
                        if items:
                            yield first, items, done + pos
                            first, items = lineno, Lines()
                            items.rejected = 0
                        if rejects is not None:
                            rejects.write(b"".join(partial))
                        skipped, partial, plen, pos = plen, [], 0, end
                        continue
                    if nl < 0:
                        break
                    x = _one_line(b"".join(partial), lineno, limit)
                    items.append(x)
                    items.rejected += isinstance(x, Rejected)
                    lineno, partial, plen, pos = lineno + 1, [], 0, nl + 1
                    continue
                last = chunk.rfind(b"\n", pos) + 1     # whole lines: the fast path
                got, bad = _whole_lines(chunk[pos:last], lineno, limit)
                items.extend(got)
                items.rejected += bad
                lineno += len(got)
                pos = last
            done += n
            if items:
                yield first, items, done
                first, items = lineno, Lines()
                items.rejected = 0
        if partial:                                     # a last line without its \n
            x = _one_line(b"".join(partial), lineno, limit)
            items.append(x)
            items.rejected += isinstance(x, Rejected)
        elif skipped >= 0:
            if rejects is not None:
                rejects.write(b"\n")
            items.append(Rejected(lineno, _too_long(skipped, limit), None))
            items.rejected += 1
        if items:
            yield first, items, done
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def split_subscription(line, dialect):
    """A subscriptions line -> (filter, queue or None), or None for a blank
    line; ValueError when it has more fields.  NATS: a space or a tab
    separates the queue (neither can be in a NATS filter); MQTT and AMQP,
    whose filters may contain spaces: only a tab.  Nothing else splits (not
    U+00A0, nor the other characters str.split() splits on)."""
    if dialect == "nats":
        parts = [p for p in line.replace("\t", " ").split(" ") if p]
        if not parts:
            return None
    else:
        if line == "":
            return None
        parts = line.split("\t")
    if len(parts) > 2:
        raise ValueError("expected 'filter' or 'filter<TAB>queue'" if dialect != "nats"
                         else "expected 'filter' or 'filter queue'")
    return parts[0], (parts[1] if len(parts) == 2 and parts[1] else None)


def read_filters(path, dialect="nats"):
    """Lines `filter` or `filter queue` (NATS: a space or tab between them;
    MQTT and AMQP: a tab); blank lines skipped; sub_id = line number.  A line
    that is one tab, or a tab then a queue, holds the empty filter (the AMQP
    binding key of zero words, which matches only the empty routing key).
    A line that is not UTF-8, too long or has too many fields stops the run
    with an error naming it.  -> (filters, sub_ids, queues)"""
    filters, ids, queues = [], [], []
    for first, items, _ in read_lines(path, "subscriptions", MAX_SUBS_LINE_BYTES):
        for lineno, line in enumerate(items, first):
            if isinstance(line, Rejected):
                raise CLIError(f"subscriptions {path} line {lineno}: {line.reason}")
            try:
                sub = split_subscription(line, dialect)
            except ValueError as e:
                raise CLIError(f"{path} line {lineno}: {e}") from None
            if sub is None:
                continue
            filters.append(sub[0])
            queues.append(sub[1])
            ids.append(lineno)
    return filters, ids, queues


def _duration(seconds):
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """A one-line progress report on a terminal's stderr: rows done, rate,
    and (when the input's size is known) percentage and ETA.  Silent for
    runs shorter than PROGRESS_AFTER seconds, and when stderr is not a
    terminal unless forced."""

    def __init__(self, total_bytes, stream=None, mode="auto", clock=time.monotonic):
        self.stream = stream or sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = mode == "always" or (mode == "auto" and isatty)
        self.total = total_bytes
        self.clock = clock
        self.start = clock()
        self.last = None
        self.width = 0

    def update(self, rows, bytes_done):
        if not self.enabled:
            return
        now = self.clock()
        elapsed = now - self.start
        if elapsed < PROGRESS_AFTER or (self.last is not None and now - self.last < PROGRESS_EVERY):
            return
        self.last = now
        rate = rows / elapsed if elapsed > 0 else 0.0
        line = f"fastsub match: {rows:,} subjects, {rate:,.0f}/s"
        if self.total:
            frac = min(1.0, bytes_done / self.total)
            eta = elapsed * (1 - frac) / frac if frac > 0 else 0.0
            line += f", {frac:.0%}, ETA {_duration(eta)}"
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def finish(self):
        """Clear the line, so the summary that follows starts clean."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _input_size(path):
    if path == "-":
        try:
            st = os.fstat(sys.stdin.fileno())
        except (OSError, ValueError, AttributeError):
            return None
    else:
        st = os.stat(path)
    import stat
    return st.st_size if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None


def cmd_match(args):
    from fastsub import InvalidSubjectError, Sublist
    t_start = time.perf_counter()
    for path, what in ((args.subs, "subscriptions"), (args.subjects, "subjects")):
        if path != "-":
            _check_readable(path, what)
    if args.subs == "-" and args.subjects == "-":
        raise CLIError("--subs and --subjects cannot both be standard input")
    filters, ids, queues = read_filters(args.subs, args.dialect)
    sl = Sublist(args.dialect)
    try:
        sl.insert_many(filters, ids, queues if any(q is not None for q in queues) else None)
    except InvalidSubjectError as e:
        msg = str(e)
        if msg.startswith("item "):
            i = int(msg[5:msg.index(":")])
            msg = f"line {ids[i]}: {msg[msg.index(':') + 2:]}"
        raise CLIError(f"{args.subs} {msg}") from None
    # what each delivery line says after the subject, by sub_id
    labels = {i: f"{i}\t{f}" + (f"\t{q}" if q is not None else "") + "\n"
              for f, i, q in zip(filters, ids, queues)}
    del filters, queues
    t_index = time.perf_counter() - t_start

    rejects = None
    if args.rejects:
        try:
            rejects = open(args.rejects, "wb")
        except OSError as e:
            raise CLIError(f"cannot write --rejects {args.rejects}: {e.strerror}") from None
    try:
        return _match_subjects(args, sl, labels, rejects, t_start, t_index)
    finally:
        if rejects is not None:
            rejects.close()


def _match_subjects(args, sl, labels, rejects, t_start, t_index):
    import numpy as np

    from fastsub import InvalidSubjectError, Sublist
    out, err = sys.stdout, sys.stderr
    progress = Progress(_input_size(args.subjects), err, args.progress)
    checker = None
    rows = delivered = unmatched = rejected = deliveries = 0
    t_match = 0.0
    for first, items, bytes_done in read_lines(args.subjects, "subjects", rejects=rejects):
        subjects = [x if type(x) is str else None for x in items] if items.rejected else items
        t0 = time.perf_counter()
        r = sl.match_many(subjects, queues=args.queues)
        t_match += time.perf_counter() - t0
        counts = np.diff(r.offsets)
        invalid = r.invalid
        n_bad = int(invalid.sum())
        if n_bad:
            checker = checker or Sublist(args.dialect)
            for k in np.flatnonzero(invalid).tolist():
                rejected += 1
                item = items[k]
                if isinstance(item, Rejected):
                    why, raw = item.reason, item.raw
                else:
                    try:
                        checker.match(item)
                        why = "invalid subject"
                    except InvalidSubjectError as e:
                        why = str(e)
                    raw = item.encode("utf-8")
                if rejects is not None and raw is not None:
                    rejects.write(raw + b"\n")
                if rejected <= MAX_REJECT_LINES:
                    print(f"fastsub: {args.subjects} line {first + k}: rejected: {why}", file=err)
        hit = counts > 0
        n_hit = int(hit.sum())
        delivered += n_hit
        unmatched += len(subjects) - n_hit - n_bad
        deliveries += len(r.sub_ids)
        if n_hit:
            row_of = np.repeat(np.arange(len(subjects)), counts).tolist()
            out.write("".join([f"{subjects[k]}\t{labels[sid]}" for k, sid in zip(row_of, r.sub_ids.tolist())]))
        rows += len(subjects)
        progress.update(rows, bytes_done)
    out.flush()
    progress.finish()
    if rejected > MAX_REJECT_LINES:
        print(f"fastsub: {args.subjects}: {rejected - MAX_REJECT_LINES:,} more rejected subjects "
              "not shown", file=err)
    wall = time.perf_counter() - t_start
    print(f"fastsub match: {_n(rows)} subjects = {_n(delivered)} delivered + "
          f"{_n(unmatched)} unmatched + {_n(rejected)} rejected; {_n(deliveries)} deliveries "
          f"from {_n(len(sl))} subscriptions ({args.dialect}, queues={args.queues}) "
          f"in {wall:.2f} s wall: matching {t_match:.2f} s ({t_match / wall if wall > 0 else 0:.0%}), "
          f"index {t_index:.2f} s, reading and writing {max(0.0, wall - t_match - t_index):.2f} s",
          file=err)
    return EXIT_REJECTED if rejected else 0


# --------------------------------------------------------------------------

def _version_line():
    import platform

    from fastsub import __version__
    return (f"fastsub {__version__} ({platform.python_implementation()} {platform.python_version()}, "
            f"{sys.platform} {platform.machine()})")


def _shards_arg(text):
    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', not {text!r}")
    return n


def build_parser():
    ap = argparse.ArgumentParser(
        prog="fastsub", description="NATS, MQTT and AMQP subscription matching: fan events out to "
        "subscription ids on Spark, or match subjects from files.")
    ap.add_argument("--version", action="version", version=_version_line())
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    def spark_opts(p):
        where = p.add_mutually_exclusive_group()
        where.add_argument("--master", default="local[*]", metavar="URL",
                           help="Spark master URL (default: local[*], the embedded Spark)")
        where.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                           help="run on a Spark Connect server instead")
        p.add_argument("--progress", type=float, default=2.0, metavar="SECONDS",
                       help="a progress line on stderr every SECONDS while Spark works "
                       "(default 2; 0: none)")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="Spark's own warnings on stderr, failed tasks' traces included")

    f = sub.add_parser("fanout", help="deliveries of an events table against a subscriptions table",
                       description="Write DIR/deliveries (one row per event x sub_id, Parquet) and "
                       "DIR/rejected (events with a null or invalid subject, or a row that could not "
                       "be read, + `error`, Parquet); print counts that reconcile: events in = "
                       "delivered + unmatched + rejected.  CSV and JSON-lines events are read line "
                       "by line first: a BOM is removed, a line that is not UTF-8 or over 1 MiB is "
                       "rejected with its reason (never dropped), and so is a row Spark cannot "
                       "parse.  Exit status: 0, no event rejected; 3, the run finished with "
                       "rejected events; 2, an error stopped it (a bad subscriptions row among them).")
    f.add_argument("--events", required=True, metavar="PATH",
                   help="events: Parquet, JSON lines or CSV with a header (file or directory)")
    f.add_argument("--subs", required=True, metavar="PATH",
                   help="subscriptions: columns sub_id, filter, queue (optional)")
    f.add_argument("--out", required=True, metavar="DIR")
    f.add_argument("--dialect", choices=("nats", "mqtt", "amqp"), default="nats",
                   help="nats, mqtt, or amqp (RabbitMQ topic-exchange binding keys; "
                        "one delivery per sub_id)")
    f.add_argument("--subject-col", default="subject", metavar="C")
    f.add_argument("--key-col", default=None, metavar="C",
                   help="column the queue-group pick hashes instead of the subject")
    f.add_argument("--queues", choices=("pick", "all", "none"), default="pick",
                   help="queue groups: one member per group (pick, default), every member, none")
    f.add_argument("--format", choices=FORMATS, default=None,
                   help="format of --events (default: from its extension)")
    f.add_argument("--subs-format", choices=FORMATS, default=None,
                   help="format of --subs (default: from its extension)")
    f.add_argument("--overwrite", action="store_true", help="replace existing outputs in DIR")
    f.add_argument("--ship", choices=("auto", "broadcast", "file", "artifact", "inline"),
                   default="auto", help="how the index travels to the executors (default: "
                   "by session kind and size; see docs/spark.md)")
    f.add_argument("--shards", type=_shards_arg, default="auto", metavar="N|auto",
                   help="1: one index, built on the driver; N > 1: the sharded fan-out (each "
                        "shard's index built on the executors); auto (default): one index up to "
                        "fastsub.spark.AUTO_SHARD_MIN_SUBS subscriptions, sharded above")
    f.add_argument("--dedupe", action="store_true",
                   help="one delivery per (event, sub_id), for subscribers with overlapping filters")
    f.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the events lines that could not be read as rows (not UTF-8, over "
                        "1 MiB, malformed CSV/JSON) to FILE, byte for byte; rows with a null or "
                        "invalid subject are in DIR/rejected")
    spark_opts(f)
    f.set_defaults(func=cmd_fanout)

    d = sub.add_parser("demo", help="generate an IoT telemetry sample and fan it out on local Spark")
    d.add_argument("--out", default=os.path.join("out", "demo"), metavar="DIR",
                   help="where the sample and the outputs go (default: out/demo)")
    d.add_argument("--events", type=int, default=500_000, metavar="N",
                   help="number of events (default 500,000)")
    d.add_argument("--seed", type=int, default=7)
    spark_opts(d)
    d.set_defaults(func=cmd_demo)

    m = sub.add_parser("match", help="match subjects against filters (the engine, no Spark)",
                       description="Print one line per delivery: subject, sub_id (the filter's line "
                       "number), filter[, queue]; rejected subjects and a summary on stderr.  The "
                       "subjects are read, matched and written in blocks, so any size streams "
                       "through in bounded memory (a line longer than 65,535 bytes is scanned, not "
                       "held); a progress line shows on a terminal after 2 s.  A subject line that "
                       "is not UTF-8, too long or not a valid subject is rejected with its reason "
                       "and counted, and the run goes on; a UTF-8 byte-order mark is removed.  "
                       "Exit status: 0, every line matched or unmatched; 3, the run finished but "
                       "rejected lines; 2, an error stopped it (a bad subscriptions line among them).")
    m.add_argument("--subs", required=True, metavar="FILE",
                   help="one `filter` or `filter queue` per line ('-' for stdin): NATS "
                        "separates them with a space or a tab, MQTT and AMQP with a tab only "
                        "(their filters may hold spaces); a lone tab is the empty filter (AMQP)")
    m.add_argument("--subjects", required=True, metavar="FILE", help="one subject per line ('-' for stdin)")
    m.add_argument("--dialect", choices=("nats", "mqtt", "amqp"), default="nats",
                   help="nats, mqtt, or amqp (RabbitMQ topic-exchange binding keys; "
                        "one delivery per sub_id)")
    m.add_argument("--queues", choices=("pick", "all", "none"), default="pick")
    m.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress line on stderr: auto (on a terminal, for runs over 2 s), always, never")
    m.add_argument("--rejects", default=None, metavar="FILE",
                   help="write the rejected subject lines to FILE, byte for byte, one per line "
                        "(their reasons are on stderr)")
    m.set_defaults(func=cmd_match)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CLIError as e:
        _err(e)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
