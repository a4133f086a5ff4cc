"""Filters that look written for another dialect: under NATS, `sensors/+/temp`
and `a.#` are valid literals that match only themselves, so a user who
forgot `--dialect mqtt` gets no deliveries and no error.  One warning, with
the count, tells them.

The rule, one for every dialect: a filter looks like dialect D's when it
uses D's wildcard as a whole token (split at any dialect's separator) where
the chosen dialect has no such wildcard, or D's separator and not the
chosen dialect's own.  So `c++.lang` under NATS is not flagged (`+` is not
a token), nor `v1.0/status` under MQTT (it has MQTT's `/`).
"""
import re

from topicmatch._dialects import DIALECTS

#: Each dialect's token separator and wildcard tokens.
SEPARATOR = {"nats": ".", "mqtt": "/", "amqp": "."}
WILDCARDS = {"nats": ("*", ">"), "mqtt": ("+", "#"), "amqp": ("*", "#")}
#: Filters named in the warning, as examples.
EXAMPLES = 2
_TOKENS = re.compile("[" + re.escape("".join(sorted(set(SEPARATOR.values())))) + "]")


def looks_like(filter_, dialect):
    """The other dialects whose filter `filter_` looks like (a tuple, empty
    when it looks like its own dialect's)."""
    sep = SEPARATOR[dialect]
    tokens = None
    found = []
    for other in DIALECTS:
        if other == dialect:
            continue
        if SEPARATOR[other] != sep and SEPARATOR[other] in filter_ and sep not in filter_:
            found.append(other)
            continue
        foreign = [w for w in WILDCARDS[other] if w not in WILDCARDS[dialect]]
        if foreign and any(w in filter_ for w in foreign):
            tokens = tokens if tokens is not None else set(_TOKENS.split(filter_))
            if any(w in tokens for w in foreign):
                found.append(other)
    return tuple(found)


def foreign_filters(filters, dialect):
    """-> (how many of `filters` look like another dialect's, the dialects
    they look like in DIALECTS order, the first EXAMPLES of them)."""
    n, seen, examples = 0, set(), []
    for f in filters:
        if f is None:
            continue
        others = looks_like(f, dialect)
        if others:
            n += 1
            seen.update(others)
            if len(examples) < EXAMPLES:
                examples.append(f)
    return n, [d for d in DIALECTS if d in seen], examples


def warning(filters, dialect, path):
    """The one warning line for `filters` read from `path`, or None."""
    n, others, examples = foreign_filters(filters, dialect)
    if not n:
        return None
    total = sum(f is not None for f in filters)
    like = " or ".join(d.upper() for d in others)
    return (f"topicmatch: warning: {n:,} of {total:,} filters in {path} look like {like} filters "
            f"({', '.join(map(repr, examples))}{', ...' if n > len(examples) else ''}); "
            f"under --dialect {dialect} they match only themselves, literally "
            f"(--dialect {' or '.join(others)}?)")
