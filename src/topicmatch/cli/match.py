"""`topicmatch match`: subjects matched against filters from files, the engine
alone (no Spark).  The subjects stream through in blocks (bounded memory);
one line per delivery on stdout; rejected lines, a progress line and the
summary on stderr."""
import os
import sys
import time

from topicmatch.cli.common import (EXIT_REJECTED, MAX_LINE_BYTES, CLIError, Rejected, RejectNames,
                                 Stderr, check_readable, commas, read_lines)

#: A subscriptions line may carry a queue name after its filter.
MAX_SUBS_LINE_BYTES = 2 * MAX_LINE_BYTES + 1
#: The progress line appears once a run has taken this long (seconds)...
PROGRESS_AFTER = 2.0
#: ...and is redrawn at most this often.
PROGRESS_EVERY = 0.25


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
    from topicmatch import InvalidSubjectError, Sublist
    t_start = time.perf_counter()
    for path, what in ((args.subs, "subscriptions"), (args.subjects, "subjects")):
        if path != "-":
            check_readable(path, what)
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
    out, err = sys.stdout, Stderr(sys.stderr, args.progress)
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
            out.write("".join([f"{subjects[k]}\t{labels[sid]}" for k, sid in zip(row_of, r.sub_ids.tolist())]))
        rows += len(subjects)
        progress.update(rows, bytes_done)
    out.flush()
    progress.finish()
    names.finish(args.subjects, "subjects")
    wall = time.perf_counter() - t_start
    err.line(f"topicmatch match: {commas(rows)} subjects = {commas(delivered)} delivered + "
          f"{commas(unmatched)} unmatched + {commas(rejected)} rejected; {commas(deliveries)} deliveries "
          f"from {commas(len(sl))} subscriptions ({args.dialect}, queues={args.queues}) "
          f"in {wall:.2f} s wall: matching {t_match:.2f} s ({t_match / wall if wall > 0 else 0:.0%}), "
          f"index {t_index:.2f} s, reading and writing {max(0.0, wall - t_match - t_index):.2f} s")
    return EXIT_REJECTED if rejected else 0

