"""The route keys of the sharded fan-out as Spark SQL expressions
(docs/design.md, "Route keys"): computed in the JVM, so neither the events
nor the subscriptions pass through Python to be routed.  Each is tested
equal to fastsub._core.route_keys, the C router that splits with the
index's own tokenizer (tests/spark/test_route_column.py).

The key is Spark's xxhash64 of a value's first d tokens as they stand in
it (all of it when it has fewer), sign bit cleared: csrc/rules/fs_route.c
computes the same hash, so a filter keyed there and a subject keyed here
meet.
"""
import re

from pyspark.sql import functions as F

from fastsub._core import route_split

def _prefix(values, sep: str, depth: int):
    """Column: each value's first `depth` tokens as they stand in it (the
    whole value when it has fewer): what the route key hashes."""
    return F.substring_index(values, sep, depth)


_KEY_MASK = 0x7FFFFFFFFFFFFFFF


def _key(prefix):
    return F.xxhash64(prefix).bitwiseAND(F.lit(_KEY_MASK))


def route_column(subjects, dialect: str, depth: int):
    """Column: each subject's route key, computed in the JVM (no Python
    pass over the events): route_keys(subjects, dialect, depth)'s key for
    every subject the dialect accepts, keyed or shorter than depth (tested
    equal on random rows of every dialect); null for a null.  An invalid
    subject gets some key: the shard it lands in rejects it, as any would.

    The key is Spark's xxhash64 of the subject's first `depth` tokens as
    they stand in it (all of it when it has fewer), sign bit cleared:
    csrc/rules/fs_route.c computes the same hash, so a filter keyed there and a
    subject keyed here meet.  Only string functions Spark compiles (no
    split into an array, no lambda): the events pass it once per call."""
    sep = route_split(dialect)[0]
    return F.when(subjects.isNotNull(), _key(_prefix(subjects, sep, depth)))


def filter_shape(filters, dialect: str):
    """Columns (inner, count, first) of each filter: the filter routed (MQTT's
    "$share/GROUP/" cut off), its number of tokens, and the 1-based place of
    its first wildcard token (null when it has none).  Split once: the
    route key at every depth is read from these."""
    sep, one, rest, empty_is_none, share = route_split(dialect)
    if share is not None:
        filters = F.when(filters.startswith(share), F.regexp_replace(
            filters, "^" + re.escape(share) + "[^" + re.escape(sep) + "]*" + re.escape(sep), "")
        ).otherwise(filters)
    tokens = F.split(filters, re.escape(sep), -1)
    count = F.size(tokens)
    if empty_is_none:       # AMQP's empty key has no token at all
        count = F.when(filters == F.lit(""), F.lit(0)).otherwise(count)
    at = [F.array_position(tokens, w) for w in (one, rest)]
    first = F.least(*[F.when(p > 0, p) for p in at])
    return filters, count, first


def filter_key(inner, count, first, dialect: str, depth: int):
    """Column: the route key at `depth` of a filter given by filter_shape's
    columns, or -1 for one every shard needs (fewer tokens, or a wildcard
    among the first depth)."""
    literal = (count >= F.lit(depth)) & (first.isNull() | (first > F.lit(depth)))
    return F.when(literal, _key(_prefix(inner, route_split(dialect)[0], depth))).otherwise(F.lit(-1))


def filter_route_column(filters, dialect: str, depth: int):
    """Column: each filter's route key, as route_keys(filters=True) gives it
    for a filter the dialect accepts (tested equal), with -1 for a filter
    every shard needs (a wildcard among its first `depth` tokens, or fewer
    tokens); null for a null.  An invalid filter gets some value (the build
    or the check that reads it refuses it)."""
    return F.when(filters.isNotNull(), filter_key(*filter_shape(filters, dialect), dialect, depth))


def shard_of(key, n: int):
    """Column: the shard of n of a filter route key (-1 stays -1: keys are
    otherwise non-negative); a null filter's is 0, the shard that then
    refuses it."""
    return F.coalesce(key % F.lit(n), F.lit(0))


def shard_column(dialect: str, depth: int, n: int):
    """Column over index_rows' frame: each subscription's shard of n, -1 for
    one every shard needs."""
    return shard_of(filter_route_column(F.col("filter"), dialect, depth), n)
