"""The route keys of the sharded fan-out as Spark SQL expressions
(docs/design.md, "Route keys"): computed in the JVM, so neither the events
nor the subscriptions pass through Python to be routed.  Each is tested
equal to topicmatch._core.route_keys, the C router that splits with the
index's own tokenizer (tests/spark/test_route_column.py).

The key is Spark's xxhash64 of a value's first d tokens as they stand in
it (all of it when it has fewer), sign bit cleared: csrc/rules/fs_route.c
computes the same hash, so a filter keyed there and a subject keyed here
meet.
"""
import re

from pyspark.sql import functions as F

from topicmatch._core import route_split

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


def filter_inner(filters, dialect: str):
    """Column: each filter as it is routed (MQTT's "$share/GROUP/" cut off)."""
    sep, _, _, _, share = route_split(dialect)
    if share is None:
        return filters
    return F.when(filters.startswith(share), F.regexp_replace(
        filters, "^" + re.escape(share) + "[^" + re.escape(sep) + "]*" + re.escape(sep), "")
    ).otherwise(filters)


def _has_token(prefix, sep: str, token: str, depth: int):
    """Column: does `token` stand whole among the tokens of prefix (a
    value's first `depth`)?  Compared in place (no array, no new string).
    At depth 1 the prefix is one token (it stops before the first
    separator), so only the whole comparison can hold: the other three
    are left out of the code Spark generates and compiles, on the driver
    and on each executor, for every query that routes."""
    whole = prefix == F.lit(token)
    if depth == 1:
        return whole
    return (whole | prefix.startswith(token + sep) | prefix.endswith(sep + token)
            | prefix.contains(sep + token + sep))


def _keyed(inner, dialect: str, depth: int):
    """(Column: is a filter given by filter_inner keyed at `depth`, null
    for a null; Column: the prefix its key hashes).  Read off the prefix
    with string comparisons only: splitting each filter into an array cost
    about as much as the rest of the build's routing, on 3M filters.  A
    filter has fewer than `depth` tokens when its first depth - 1 are all
    of it."""
    sep, one, rest, empty_is_none, _ = route_split(dialect)
    prefix = _prefix(inner, sep, depth)
    keyed = ~_has_token(prefix, sep, one, depth) & ~_has_token(prefix, sep, rest, depth)
    if depth > 1:
        keyed = keyed & (_prefix(inner, sep, depth - 1) != inner)
    elif empty_is_none:     # AMQP's empty key has no token at all
        keyed = keyed & (inner != F.lit(""))
    return keyed, prefix


def filter_key(inner, dialect: str, depth: int):
    """Column: the route key at `depth` of a filter given by filter_inner,
    or -1 for one every shard needs: fewer than `depth` tokens, or a
    wildcard among the first `depth`; null for a null."""
    keyed, prefix = _keyed(inner, dialect, depth)
    # (the prefix in the first condition: Spark computes it once a row for
    # every branch; under an outer null check it was computed per use)
    return F.when(keyed, _key(prefix)).when(inner.isNull(), F.lit(None)).otherwise(F.lit(-1))


def filter_bucket(inner, dialect: str, depth: int, n: int, replicated: int = -1):
    """Column: the bucket of n of a filter given by filter_inner -- its
    route key at `depth` mod n -- or `replicated` for one every shard
    needs; a null filter's is 0, the bucket that then refuses it.  One
    CASE over the key (tested equal to filter_key's values taken mod n):
    a CASE over filter_key's value repeated the key's whole expression in
    two branches, code Spark generates and compiles on the driver and on
    each executor.  (The replicated rows are named, never the remainder of
    -1: -1 % 1 is 0, so with one shard their digest once went to shard 0's
    image name and the replicated share's image was named empty.)"""
    keyed, prefix = _keyed(inner, dialect, depth)
    return (F.when(keyed, _key(prefix) % F.lit(n)).when(inner.isNull(), F.lit(0))
            .otherwise(F.lit(replicated)))


def filter_route_column(filters, dialect: str, depth: int):
    """Column: each filter's route key, as route_keys(filters=True) gives it
    for a filter the dialect accepts (tested equal), with -1 for a filter
    every shard needs (a wildcard among its first `depth` tokens, or fewer
    tokens); null for a null.  An invalid filter gets some value (the build
    or the check that reads it refuses it)."""
    return filter_key(filter_inner(filters, dialect), dialect, depth)


def image_column(dialect: str, depth: int, n: int):
    """Column over index_rows' frame: each subscription's image on the
    shard image path: its shard of n, or n, the replicated share's image,
    for one every shard needs (a null filter's: 0, whose build refuses it)."""
    return filter_bucket(filter_inner(F.col("filter"), dialect), dialect, depth, n, replicated=n)
