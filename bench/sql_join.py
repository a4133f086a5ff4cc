"""The plain Spark SQL way to fan events out to wildcard subscriptions, with
no Python on the executors and no topicmatch: the benchmarks' rival and their
independent oracle (issue 31).

A filter's *shape* is where its wildcards stand: its token count, the
positions of its one-token wildcards, and whether it ends in the rest
wildcard.  A subject matches a filter exactly when the filter's text equals
the subject rewritten to the filter's shape: each one-token wildcard
position replaced by the wildcard, and, for a rest-wildcard shape, the
tokens past the prefix replaced by the rest wildcard.  So:

  1. the distinct shapes of the subscriptions (an aggregate on the
     executors; a handful: light has 9),
  2. every event exploded into one candidate key per shape that its token
     count allows,
  3. an equi-join of the candidates with the subscriptions on the filter.

plan="merge" lets Spark choose (a sort-merge join: broadcasts are turned
off), plan="broadcast" hints the subscriptions side.  The answer is
queues="all"'s: every matching subscription, one row per (event,
subscription), the event's columns carried along.

NATS and MQTT (`$share/{group}/` stripped; MQTT's first-level wildcards
skip `$` topics; `#` also matches its parent) are covered; AMQP's `#`
matches any number of words anywhere, so one shape gives many candidates,
and it is not covered here.  Subjects must be valid in the dialect (the
benchmarks' are): this way has no notion of an invalid subject.

    from sql_join import sql_fanout
    deliveries = sql_fanout(events, subscriptions, "nats", plan="broadcast")
"""
from typing import List, NamedTuple, Tuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: dialect -> (separator, one-token wildcard, rest wildcard, the fewest tokens
#: the rest wildcard takes, whether first-level wildcards skip `$` topics)
DIALECTS = {
    "nats": (".", "*", ">", 1, False),
    "mqtt": ("/", "+", "#", 0, True),
}


class Shape(NamedTuple):
    tokens: int                 # the filter's tokens, the rest wildcard included
    ones: Tuple[int, ...]       # positions (0-based) of one-token wildcards
    rest: bool                  # ends in the rest wildcard


def _rules(dialect):
    try:
        return DIALECTS[dialect]
    except KeyError:
        raise ValueError(f"the SQL shape-join covers {sorted(DIALECTS)}, not {dialect!r} "
                         "(AMQP's '#' anywhere gives many candidates per shape)") from None


def _sql_string(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def inner_filter(dialect: str):
    """The filter a subscription matches on: MQTT's `$share/{group}/` goes."""
    col = F.col("filter")
    if dialect == "mqtt":
        return F.regexp_replace(col, r"^\$share/[^/]*/", "")
    return col


def shapes(subscriptions: DataFrame, dialect: str) -> List[Shape]:
    """The distinct shapes of the subscriptions' filters (one Spark job)."""
    sep, one, rest, _, _ = _rules(dialect)
    toks = F.split(inner_filter(dialect), "\\" + sep, -1)
    df = subscriptions.select(toks.alias("t")).select(
        F.size("t").alias("n"),
        F.expr(f"filter(sequence(0, size(t) - 1), i -> t[i] = {_sql_string(one)})").alias("ones"),
        (F.element_at("t", -1) == F.lit(rest)).alias("rest")).distinct()
    return sorted(Shape(r["n"], tuple(r["ones"]), bool(r["rest"])) for r in df.collect())


def _candidate(shape: Shape, dialect: str, subject: str) -> str:
    """SQL: the event's key for this shape, or NULL when its token count
    (or MQTT's `$` rule) rules the shape out.  `__t` is its tokens."""
    sep, one, rest, rest_min, dollar = _rules(dialect)
    prefix = shape.tokens - 1 if shape.rest else shape.tokens
    if shape.ones:
        body = (f"concat_ws({_sql_string(sep)}, transform(slice(__t, 1, {prefix}), (x, i) -> "
                f"CASE WHEN i IN ({', '.join(map(str, shape.ones))}) THEN {_sql_string(one)} ELSE x END))")
    else:
        body = f"concat_ws({_sql_string(sep)}, slice(__t, 1, {prefix}))"
    if shape.rest:
        key = _sql_string(rest) if prefix == 0 else f"concat({body}, {_sql_string(sep + rest)})"
        fits = f"size(__t) >= {prefix + rest_min}"
    else:
        key = body
        fits = f"size(__t) = {shape.tokens}"
    if dollar and (0 in shape.ones or (shape.rest and prefix == 0)):
        fits += f" AND NOT startswith({subject}, '$')"
    return f"CASE WHEN {fits} THEN {key} END"


def candidates(events: DataFrame, shape_list: List[Shape], dialect: str,
               subject_col: str = "subject") -> DataFrame:
    """The events, one row per (event, candidate key `__key`)."""
    sep = _rules(dialect)[0]
    subject = f"`{subject_col}`"
    keys = ", ".join(_candidate(s, dialect, subject) for s in shape_list) or "CAST(NULL AS STRING)"
    return (events.withColumn("__t", F.split(F.col(subject_col), "\\" + sep, -1))
            .withColumn("__key", F.explode(F.expr(f"filter(array({keys}), k -> k IS NOT NULL)")))
            .drop("__t"))


def sql_fanout(events: DataFrame, subscriptions: DataFrame, dialect: str = "nats", *,
               subject_col: str = "subject", plan: str = "merge",
               shape_list: List[Shape] = None) -> DataFrame:
    """Deliveries (the events' columns, sub_id, queue) by the shape-join.
    plan: "merge" (broadcasts off for this join: Spark's sort-merge) or
    "broadcast" (the subscriptions side hinted)."""
    if plan not in ("merge", "broadcast"):
        raise ValueError(f"plan must be 'merge' or 'broadcast', not {plan!r}")
    if shape_list is None:
        shape_list = shapes(subscriptions, dialect)
    subs = subscriptions.select(inner_filter(dialect).alias("__key"), "sub_id", "queue")
    if plan == "broadcast":
        subs = F.broadcast(subs)
    else:
        subs = subs.hint("merge")
    return candidates(events, shape_list, dialect, subject_col).join(subs, "__key").drop("__key")
