"""The plain filter list (`--filters-file`): one `filter` or `filter queue`
per line, its line number the sub id.  The format `topicmatch match --subs`
read before it took tables; kept for lists typed by hand or cut from logs.
"""
from topicmatch._core import TopicmatchValueError
from topicmatch.cli.common import MAX_LINE_BYTES, CLIError, Rejected, read_lines

#: A subscriptions line may carry a queue name after its filter.
MAX_SUBS_LINE_BYTES = 2 * MAX_LINE_BYTES + 1


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
        raise TopicmatchValueError("expected 'filter' or 'filter<TAB>queue'" if dialect != "nats"
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
