"""`topicmatch match`: subjects matched against subscriptions (a table, an
image or a filter list: subs_source.py), the engine alone (no Spark).  The subjects stream through in blocks (bounded memory);
one line per delivery on stdout; rejected lines, a progress line and the
summary on stderr."""
import os
import sys
import time

from topicmatch.cli.common import (EXIT_REJECTED, CLIError, Rejected, RejectNames, Stderr,
                                   check_readable, plural, read_lines)
from topicmatch.cli.match_labels import Labels
from topicmatch.cli.subs_index import load
from topicmatch.cli.subs_source import subs_source

#: The progress line appears once a run has taken this long (seconds)...
PROGRESS_AFTER = 2.0
#: ...and is redrawn at most this often.
PROGRESS_EVERY = 0.25


def _duration(seconds):
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class MatchProgress:
    """`topicmatch match`'s one-line progress report on stderr: rows done, rate,
    and (when the input's size is known) percentage and ETA.  Drawn through
    a Stderr (the one writer of stderr, which clears the line before any
    message): only on a terminal unless forced, and only for runs longer
    than PROGRESS_AFTER seconds.  (`fanout` and `demo` report Spark's
    progress with topicmatch.spark.Progress, through the same writer.)

    stream: a Stderr, or a stream (wrapped in one with `mode`)."""

    def __init__(self, total_bytes, stream=None, mode="auto", clock=time.monotonic):
        self.err = stream if isinstance(stream, Stderr) else Stderr(stream, mode)
        self.enabled = self.err.drawing
        self.total = total_bytes
        self.clock = clock
        self.start = clock()
        self.last = None

    def update(self, rows, bytes_done):
        if not self.enabled:
            return
        now = self.clock()
        elapsed = now - self.start
        if elapsed < PROGRESS_AFTER or (self.last is not None and now - self.last < PROGRESS_EVERY):
            return
        self.last = now
        rate = rows / elapsed if elapsed > 0 else 0.0
        line = f"topicmatch match: {rows:,} subjects, {rate:,.0f}/s"
        if self.total:
            frac = min(1.0, bytes_done / self.total)
            eta = elapsed * (1 - frac) / frac if frac > 0 else 0.0
            line += f", {frac:.0%}, ETA {_duration(eta)}"
        self.err.status(line)

    def finish(self):
        """Clear the line, so the summary that follows starts clean."""
        self.err.clear()


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
    t_start = time.perf_counter()
    src = subs_source(args)
    if args.subjects != "-":
        check_readable(args.subjects, "subjects")
    if src.path == "-" and args.subjects == "-":
        raise CLIError("the subscriptions and --subjects cannot both be standard input")
    err = Stderr(sys.stderr, args.progress)
    loaded = load(src, args.dialect, err)
    labels = Labels(loaded.sublist, loaded.rows)
    args.dialect = loaded.dialect           # an image's own, when --dialect was not given
    t_index = time.perf_counter() - t_start

    rejects = None
    if args.rejects:
        try:
            rejects = open(args.rejects, "wb")
        except OSError as e:
            raise CLIError(f"cannot write --rejects {args.rejects}: {e.strerror}") from None
    try:
        return _match_subjects(args, loaded.sublist, labels, rejects, t_start, t_index, err)
    finally:
        if rejects is not None:
            rejects.close()


def _match_subjects(args, sl, labels, rejects, t_start, t_index, err):
    out = sys.stdout
    progress = MatchProgress(_input_size(args.subjects), err)
    names = RejectNames(err)
    try:
        return _match_blocks(args, sl, labels, rejects, t_start, t_index, out, err, progress, names)
    finally:
        progress.finish()         # an error or ^C is then reported on a line of its own


def _match_blocks(args, sl, labels, rejects, t_start, t_index, out, err, progress, names):
    import numpy as np

    from topicmatch import InvalidSubjectError, Sublist
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
                names.name(f"{args.subjects} line {first + k}", why)
        hit = counts > 0
        n_hit = int(hit.sum())
        delivered += n_hit
        unmatched += len(subjects) - n_hit - n_bad
        deliveries += len(r.sub_ids)
        if n_hit:
            row_of = np.repeat(np.arange(len(subjects)), counts).tolist()
            out.write(labels.lines(subjects, row_of, r.sub_ids.tolist()))
        rows += len(subjects)
        progress.update(rows, bytes_done)
    out.flush()
    progress.finish()
    names.finish(args.subjects, "subjects")
    wall = time.perf_counter() - t_start
    err.line(f"topicmatch match: {plural(rows, 'subject')} = {delivered:,} delivered + "
          f"{unmatched:,} unmatched + {rejected:,} rejected; {plural(deliveries, 'delivery', 'deliveries')} "
          f"from {plural(len(sl), 'subscription')} ({args.dialect}, queues={args.queues}) "
          f"in {wall:.2f} s wall: matching {t_match:.2f} s ({t_match / wall if wall > 0 else 0:.0%}), "
          f"index {t_index:.2f} s, reading and writing {max(0.0, wall - t_match - t_index):.2f} s")
    return EXIT_REJECTED if rejected else 0

