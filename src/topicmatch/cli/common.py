"""What every command of the `topicmatch` command line shares: the user error
and the exit statuses, counts for humans, local paths, and the line reader
of `topicmatch match` and of `topicmatch fanout`'s CSV / JSON-lines events.

A leaf: it imports nothing else of the command line (main.py holds the
parser and the dispatch; match.py, fanout.py and demo.py the commands).
"""
import os
import sys
import threading

from topicmatch._core import TopicmatchError

#: Exit status of a usage or input error that stopped the run.
EXIT_USAGE = 2
#: Exit status of a run that finished but rejected some lines (0: none
#: rejected; 2: a usage or input error stopped the run).
EXIT_REJECTED = 3
#: Rejected lines named one by one on stderr; the rest are only counted.
MAX_REJECT_LINES = 100


class CLIError(TopicmatchError):
    """A user error: printed as one line, exit status 2.  A TopicmatchError, as
    every error the package raises; main() prints it and exits."""


def commas(x):
    """1234567 -> '1,234,567'."""
    return f"{x:,}"


def plural(n, noun, nouns=None):
    """1 -> '1 subject', 2 -> '2 subjects' (nouns: an irregular plural,
    'deliveries' for 'delivery')."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def human_bytes(nbytes):
    """1536 -> '1.5 KiB'; below 1 KiB, '512 bytes'."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:,} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def per_second(n, seconds):
    """A rate for humans: whole numbers from 10 a second up, two significant
    digits below (a small input's 3 events in 7 s is '0.43', not a '0' that
    reads as nothing done), '0' only for nothing."""
    if n == 0 or seconds <= 0:
        return "0"
    r = n / seconds
    return f"{r:,.0f}" if r >= 10 else f"{r:.2g}"


# --------------------------------------------------------------------------
# stderr: one writer for the messages and the progress line
# --------------------------------------------------------------------------

def isatty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Stderr:
    """The one writer of a command's stderr (tqdm's `write`, in small): it
    knows whether a progress line is showing, and clears it before any other
    message, so a message never runs into the progress text.

    progress: "auto" draws the progress line only when the stream is a
    terminal, "always" on any stream, "never" not at all.  Off a terminal
    (auto) there is no progress line: only the messages.  Thread-safe: the
    Spark progress thread draws while the main thread writes messages."""

    def __init__(self, stream=None, progress="auto"):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = isatty(self.stream)
        self.drawing = progress == "always" or (progress == "auto" and self.tty)
        self.width = 0                  # the progress line's width; 0: none showing
        self._lock = threading.RLock()

    def status(self, text):
        """Draw `text` as the progress line, replacing the one showing."""
        if not self.drawing:
            return
        with self._lock:
            self.stream.write("\r" + text.ljust(self.width))
            self.stream.flush()
            self.width = len(text)

    def clear(self):
        """Remove the progress line, if one is showing."""
        with self._lock:
            if self.width:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
                self.width = 0

    def line(self, text):
        """A message on a line of its own (the progress line cleared first;
        the next status() draws it again)."""
        with self._lock:
            self.clear()
            self.stream.write(text + "\n")
            self.stream.flush()

    def write(self, text):
        """A file-like write (print(..., file=stderr)): clears the progress line."""
        with self._lock:
            if text:
                self.clear()
            return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return self.tty


class RejectNames:
    """Names rejected lines on a Stderr, "topicmatch: WHERE: rejected: WHY",
    the first MAX_REJECT_LINES of them; the rest are counted, and finish()
    says how many were not shown."""

    def __init__(self, err, cap=None):
        self.err, self.cap, self.count = err, MAX_REJECT_LINES if cap is None else cap, 0

    def name(self, where, why):
        self.count += 1
        if self.count <= self.cap:
            self.err.line(f"topicmatch: {where}: rejected: {why}")

    def finish(self, what, noun="lines"):
        """`what`: the input, or None; then "N more rejected NOUN not shown"."""
        if self.count > self.cap:
            self.err.line(f"topicmatch: {what + ': ' if what else ''}{self.count - self.cap:,} more "
                          f"rejected {noun} not shown")


# --------------------------------------------------------------------------
# input files
# --------------------------------------------------------------------------

def is_local(path):
    return "://" not in path or path.startswith("file://")


def local_path(path):
    return path[len("file://"):] if path.startswith("file://") else path


def check_readable(path, what):
    if not is_local(path):
        return
    p = local_path(path)
    if not os.path.exists(p):
        raise CLIError(f"{what} {path}: no such file or directory")
    if not os.access(p, os.R_OK) or (os.path.isdir(p) and not os.access(p, os.X_OK)):
        raise CLIError(f"{what} {path}: permission denied")


# --------------------------------------------------------------------------
# the line reader
# --------------------------------------------------------------------------

#: Bytes of input read, decoded and matched at a time: memory stays bounded
#: by this (plus the output of one batch) whatever the size of the input.
MATCH_BLOCK_BYTES = 4 << 20
#: The longest line kept: a subject or filter is at most 65,535 UTF-8 bytes
#: in every dialect, so a longer line can only be rejected.  Longer lines
#: are scanned to their end without being held (bounded memory).
MAX_LINE_BYTES = 65535
#: A UTF-8 byte-order mark, removed from the start of an input.
BOM = b"\xef\xbb\xbf"


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
                while len(chunk) < 3 and chunk == BOM[:len(chunk)]:   # a BOM split by short reads
                    more = f.read(block_bytes)
                    if not more:
                        break
                    chunk += more
                if chunk.startswith(BOM):
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

