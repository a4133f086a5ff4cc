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


def _has_token(prefix, sep: str, token: str):
    """Column: does `token` stand whole among prefix's tokens?  Compared in
    place (no array, no new string)."""
    return ((prefix == F.lit(token)) | prefix.startswith(token + sep) | prefix.endswith(sep + token)
            | prefix.contains(sep + token + sep))


def filter_key(inner, dialect: str, depth: int):
    """Column: the route key at `depth` of a filter given by filter_inner,
    or -1 for one every shard needs: fewer than `depth` tokens, or a
    wildcard among the first `depth`; null for a null.  Read off the prefix the key hashes,
    with string comparisons only: splitting each filter into an array cost
    about as much as the rest of the build's routing, on 3M filters.  A
    filter has fewer than `depth` tokens when its first depth - 1 are all
    of it."""
    sep, one, rest, empty_is_none, _ = route_split(dialect)
    prefix = _prefix(inner, sep, depth)
    keyed = ~_has_token(prefix, sep, one) & ~_has_token(prefix, sep, rest)
    if depth > 1:
        keyed = keyed & (_prefix(inner, sep, depth - 1) != inner)
    elif empty_is_none:     # AMQP's empty key has no token at all
        keyed = keyed & (inner != F.lit(""))
    # (the prefix in the first condition: Spark computes it once a row for
    # every branch; under an outer null check it was computed per use)
    return F.when(keyed, _key(prefix)).when(inner.isNull(), F.lit(None)).otherwise(F.lit(-1))


def filter_route_column(filters, dialect: str, depth: int):
    """Column: each filter's route key, as route_keys(filters=True) gives it
    for a filter the dialect accepts (tested equal), with -1 for a filter
    every shard needs (a wildcard among its first `depth` tokens, or fewer
    tokens); null for a null.  An invalid filter gets some value (the build
    or the check that reads it refuses it)."""
    return filter_key(filter_inner(filters, dialect), dialect, depth)


def shard_of(key, n: int):
    """Column: the shard of n of a filter route key (-1 stays -1: keys are
    otherwise non-negative); a null filter's is 0, the shard that then
    refuses it.  (-1 is kept by name, not by the remainder: -1 % 1 is 0, so
    with one shard the replicated rows' digest went to shard 0's image name
    and the replicated share's image was named empty.)"""
    return F.coalesce(F.when(key == F.lit(-1), F.lit(-1)).otherwise(key % F.lit(n)), F.lit(0))


def image_column(dialect: str, depth: int, n: int):
    """Column over index_rows' frame: each subscription's image on the
    shard image path: its shard of n, or n, the replicated share's image,
    for one every shard needs.  (The key in the first condition: Spark
    computes it once a row.)"""
    key = filter_route_column(F.col("filter"), dialect, depth)
    return F.when(key == F.lit(-1), F.lit(n)).otherwise(shard_of(key, n))
